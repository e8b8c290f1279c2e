"""Fit y = 2x + 10 with tf.distribute.MultiWorkerMirroredStrategy.

Every worker runs this same program. The strategy reads TF_CONFIG, each worker trains on its
shard of every global batch, and the gradients are all-reduced (CPU collective ops) so the
copies of the model stay identical. Worker 0 is the chief.

Keras 3's model.fit() does not support this strategy yet (keras-team/keras#20585), so the
Keras model is trained with a custom loop, as in TensorFlow's multi-worker CTL tutorial.

Under trainfleet it resumes after a restart: after each epoch every worker writes a
tf.train.Checkpoint (the strategy needs them all to), the chief into
`$TRAINFLEET_CHECKPOINT_PATH/step-<epoch>`, committed by `COMMITTED` written last; a
restarted job restores `$TRAINFLEET_RESUME_FROM` and goes on from the epoch after it.
"""

import json
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

GLOBAL_BATCH = 64  # each of the 2 workers computes 32 rows of it

strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = json.loads(os.environ["TF_CONFIG"])["task"]

rng = np.random.default_rng(seed=0)
x = rng.uniform(-1, 1, size=(1024, 1)).astype(np.float32)
y = (2 * x + 10 + rng.normal(0, 0.1, size=x.shape)).astype(np.float32)


def dataset_fn(input_context):
    batch = input_context.get_per_replica_batch_size(GLOBAL_BATCH)
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return dataset.shuffle(1024, seed=0).repeat().batch(batch)


tf.keras.utils.set_random_seed(0)  # the same initial weights on every worker
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(1,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.2)


@tf.function
def train_step(iterator):
    def step_fn(x_batch, y_batch):
        with tf.GradientTape() as tape:
            per_example_loss = tf.square(model(x_batch, training=True) - y_batch)
            loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    losses = strategy.run(step_fn, args=next(iterator))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


CHECKPOINTS = os.environ.get("TRAINFLEET_CHECKPOINT_PATH")
KEEP = int(os.environ.get("TRAINFLEET_CHECKPOINT_KEEP", "3"))
EPOCHS = int(os.environ.get("EPOCHS", "5"))
state = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=tf.Variable(0))


def save(epoch: int) -> None:
    """Every worker writes; only the chief's copy is kept, and committed (COMMITTED last)."""
    state.epoch.assign(epoch)
    chief = task["index"] == 0
    folder = os.path.join(CHECKPOINTS, f"step-{epoch}") if chief else tempfile.mkdtemp()
    state.write(os.path.join(folder, "ckpt"))
    if not chief:
        shutil.rmtree(folder)
        return
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

print(f"{strategy.num_replicas_in_sync} replicas in sync", flush=True)
iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
loss = float("nan")  # where it resumed after its last epoch
for epoch in range(first, EPOCHS + 1):
    loss = sum(float(train_step(iterator)) for _ in range(20)) / 20
    print(f"epoch {epoch}: loss={loss:.4f}", flush=True)
    if CHECKPOINTS:
        save(epoch)

kernel, bias = (float(v.numpy().squeeze()) for v in model.trainable_variables)
print(f"{task['type']} {task['index']}: final loss={loss:.4f} w={kernel:.2f} b={bias:.2f}")
