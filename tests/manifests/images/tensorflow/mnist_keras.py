"""A small Keras classifier on synthetic 28x28 "digits": lives only in the image."""

import argparse
import json
import os

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

# As on Kubeflow, a job of one replica gets no TF_CONFIG: it trains alone.
task = json.loads(os.environ.get("TF_CONFIG", '{"task": {"type": "worker", "index": 0}}'))["task"]
rng = np.random.default_rng(0)
labels = rng.integers(0, 10, size=2000)
images = rng.normal(size=(2000, 28, 28)).astype("float32") * 0.3
images[np.arange(2000), labels, labels] += 3.0  # each digit lights its own pixel
model = tf.keras.Sequential(
    [tf.keras.Input((28, 28)), tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)]
)
model.compile(
    optimizer=tf.keras.optimizers.Adam(0.01),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
history = model.fit(images, labels, epochs=args.epochs, batch_size=100, verbose=0)
accuracy = history.history["accuracy"][-1]
print(f"{task['type']} {task['index']}: epochs={args.epochs} accuracy={accuracy:.2f}")
