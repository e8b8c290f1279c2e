"""Step train: fit y = w x + b to the prepared data with tf.distribute.ParameterServerStrategy.

This program is the coordinator (the chief): the variables live on the ps, each scheduled
step runs on whichever worker is free. It reads $TRAINFLEET_RUN_DIR/data.npz and writes the
fitted weights to $TRAINFLEET_RUN_DIR/weights.json.
"""

import json
import os

import numpy as np
import tensorflow as tf

RUN_DIR = os.environ["TRAINFLEET_RUN_DIR"]
EPOCHS = int(os.environ.get("EPOCHS", "5"))

data = np.load(os.path.join(RUN_DIR, "data.npz"))
x, y = data["x"], data["y"]

strategy = tf.distribute.ParameterServerStrategy(
    tf.distribute.cluster_resolver.TFConfigClusterResolver()
)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)


def dataset_fn():
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x)).repeat().batch(32)


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
for epoch in range(1, EPOCHS + 1):
    for _ in range(20):
        loss = coordinator.schedule(train_step, args=(iterator,))
    coordinator.join()  # wait for every scheduled step
    print(f"epoch {epoch}: loss={loss.fetch():.4f}", flush=True)

weights = {"w": float(w.numpy()), "b": float(b.numpy())}
with open(os.path.join(RUN_DIR, "weights.json"), "w") as file:
    json.dump(weights, file)
print(f"saved w={weights['w']:.2f} b={weights['b']:.2f}")
