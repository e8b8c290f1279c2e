"""Print the TensorFlow this task runs, and prove it works with one small computation."""

import tensorflow as tf

product = tf.linalg.matmul([[1.0, 2.0]], [[3.0], [4.0]])
print(f"tensorflow {tf.__version__}: [1, 2] x [3, 4] = {float(product[0][0]):g}", flush=True)
