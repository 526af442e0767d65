#!/usr/bin/env python3
"""The TF-made GraphDef tests/test_tool.sh runs the `nabla` command on, in tests/golden/tool/:

  tanh.pb   float64 placeholders x [?, 3] and w [3, 2]; y = tanh(x @ w) ("y"), its sum
            ("loss"), and a float64 placeholder "dy" [?, 2] to weight y's gradient
  x.npy, w.npy, dy.npy   values to feed them (x: 2 rows)

CI uses only what is committed; rerun by hand (pip install tensorflow-cpu) from the
repository root:

    python3 tests/golden/make_tool_graph.py
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tool")


def main():
    os.makedirs(OUT, exist_ok=True)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float64, [None, 3], name="x")
        w = tf.compat.v1.placeholder(tf.float64, [3, 2], name="w")
        tf.compat.v1.placeholder(tf.float64, [None, 2], name="dy")
        y = tf.tanh(tf.matmul(x, w), name="y")
        tf.reduce_sum(y, name="loss")
    tf.io.write_graph(graph.as_graph_def(), OUT, "tanh.pb", as_text=False)
    rng = np.random.default_rng(16)
    np.save(os.path.join(OUT, "x.npy"), rng.standard_normal((2, 3)))
    np.save(os.path.join(OUT, "w.npy"), rng.standard_normal((3, 2)))
    np.save(os.path.join(OUT, "dy.npy"), rng.standard_normal((2, 2)))


if __name__ == "__main__":
    main()
