"""Fit y = 2x + 10 with in-graph replication (TensorFlow 1 style graphs and sessions).

This one client builds the whole graph: the variables live on the parameter server, each
worker computes the loss and gradients of its half of every batch, and the parameter server
applies their average. The ps and worker tasks only run `trainfleet tf-server`.
"""

import json
import os

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()

cluster = tf.train.ClusterSpec(json.loads(os.environ["TF_CONFIG"])["cluster"])
num_workers = cluster.num_tasks("worker")

rng = np.random.default_rng(seed=0)
x_data = rng.uniform(-1, 1, size=(512, 1)).astype(np.float32)
y_data = (2 * x_data + 10 + rng.normal(0, 0.1, size=x_data.shape)).astype(np.float32)

x = tf.compat.v1.placeholder(tf.float32, shape=[None, 1])
y = tf.compat.v1.placeholder(tf.float32, shape=[None, 1])

with tf.device("/job:ps/task:0"):
    w = tf.compat.v1.Variable(0.0, name="w")
    b = tf.compat.v1.Variable(0.0, name="b")

# Each worker gets one slice of the batch: its loss and its gradients of w and b.
x_parts, y_parts = tf.split(x, num_workers), tf.split(y, num_workers)
losses, grads_w, grads_b = [], [], []
for i in range(num_workers):
    with tf.device(f"/job:worker/task:{i}"):
        loss = tf.reduce_mean(tf.square(w * x_parts[i] + b - y_parts[i]))
        grad_w, grad_b = tf.gradients(loss, [w, b])
        losses.append(loss)
        grads_w.append(grad_w)
        grads_b.append(grad_b)

with tf.device("/job:ps/task:0"):
    mean_loss = tf.add_n(losses) / num_workers
    learning_rate = 0.2
    train_op = tf.group(
        w.assign_sub(learning_rate * tf.add_n(grads_w) / num_workers),
        b.assign_sub(learning_rate * tf.add_n(grads_b) / num_workers),
    )

# Worker 0's server runs the session; the servers already know the cluster from TF_CONFIG.
with tf.compat.v1.Session(f"grpc://{cluster.task_address('worker', 0)}") as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    for step in range(1, 201):
        batch = rng.choice(len(x_data), size=64, replace=False)
        _, loss_value = sess.run([train_op, mean_loss], {x: x_data[batch], y: y_data[batch]})
        if step == 1 or step % 50 == 0:
            print(f"step {step}: loss={loss_value:.4f}", flush=True)
    w_value, b_value = sess.run([w, b])

print(f"w={w_value:.2f} b={b_value:.2f}")
