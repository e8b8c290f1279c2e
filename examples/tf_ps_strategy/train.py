"""Fit y = 2x + 10 with tf.distribute.ParameterServerStrategy (TF2 parameter-server training).

This program is the coordinator (the chief). The variables are created on the parameter
server; the coordinator schedules training steps, each runs on whichever worker is free and
updates the variables asynchronously. Workers and the ps only run `trainfleet tf-server`.
"""

import tensorflow as tf

strategy = tf.distribute.ParameterServerStrategy(
    tf.distribute.cluster_resolver.TFConfigClusterResolver()
)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)


def dataset_fn():
    x = tf.random.stateless_uniform([1024, 1], seed=(1, 2), minval=-1, maxval=1)
    noise = tf.random.stateless_normal([1024, 1], seed=(3, 4), stddev=0.1)
    dataset = tf.data.Dataset.from_tensor_slices((x, 2 * x + 10 + noise))
    return dataset.shuffle(1024).repeat().batch(32)


with strategy.scope():
    w = tf.Variable(0.0, name="w")
    b = tf.Variable(0.0, name="b")


@tf.function
def train_step(iterator):
    def step_fn(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(w * x + b - y))
        grad_w, grad_b = tape.gradient(loss, [w, b])
        w.assign_sub(0.1 * grad_w)
        b.assign_sub(0.1 * grad_b)
        return loss

    return strategy.run(step_fn, args=next(iterator))


iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
for epoch in range(1, 6):
    for _ in range(20):
        loss = coordinator.schedule(train_step, args=(iterator,))
    coordinator.join()  # wait for every scheduled step
    print(f"epoch {epoch}: loss={loss.fetch():.4f}", flush=True)

print(f"final loss={loss.fetch():.4f} w={w.numpy():.2f} b={b.numpy():.2f}")
