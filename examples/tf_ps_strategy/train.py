"""Fit y = 2x + 10 with tf.distribute.ParameterServerStrategy (TF2 parameter-server training).

This program is the coordinator (the chief). The variables are created on the parameter
server; the coordinator schedules training steps, each runs on whichever worker is free and
updates the variables asynchronously. Workers and the ps only run `trainfleet tf-server`.

A lost worker is tolerated: the coordinator runs its steps elsewhere and takes it back once
restarted. A lost ps fails the coordinator, which restarts and, under trainfleet, restores
the variables from `$TRAINFLEET_RESUME_FROM` (the newest epoch it committed into
`$TRAINFLEET_CHECKPOINT_PATH/step-<epoch>`, `COMMITTED` written last).
"""

import os
import shutil

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


CHECKPOINTS = os.environ.get("TRAINFLEET_CHECKPOINT_PATH")
KEEP = int(os.environ.get("TRAINFLEET_CHECKPOINT_KEEP", "3"))
EPOCHS = int(os.environ.get("EPOCHS", "5"))
state = tf.train.Checkpoint(w=w, b=b, epoch=tf.Variable(0))


def save(epoch: int) -> None:
    """Write the variables (read from the ps), then commit the step: COMMITTED last."""
    state.epoch.assign(epoch)
    folder = os.path.join(CHECKPOINTS, f"step-{epoch}")
    state.write(os.path.join(folder, "ckpt"))
    with open(os.path.join(folder, ".COMMITTED.tmp"), "w") as marker:
        marker.write(f"{epoch}\n")
        os.fsync(marker.fileno())
    os.replace(os.path.join(folder, ".COMMITTED.tmp"), os.path.join(folder, "COMMITTED"))
    for old in range(1, epoch - KEEP + 1):
        shutil.rmtree(os.path.join(CHECKPOINTS, f"step-{old}"), ignore_errors=True)


first = 1
if os.environ.get("TRAINFLEET_RESUME_FROM"):
    state.restore(os.path.join(os.environ["TRAINFLEET_RESUME_FROM"], "ckpt"))
    first = int(state.epoch.numpy()) + 1
    print(f"resumed after epoch {first - 1}", flush=True)

iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
for epoch in range(first, EPOCHS + 1):
    for _ in range(20):
        loss = coordinator.schedule(train_step, args=(iterator,))
    coordinator.join()  # wait for every scheduled step
    print(f"epoch {epoch}: loss={loss.fetch():.4f}", flush=True)
    if CHECKPOINTS:
        save(epoch)

if first <= EPOCHS:
    print(f"final loss={loss.fetch():.4f} w={w.numpy():.2f} b={b.numpy():.2f}")
