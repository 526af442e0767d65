"""Peer of bench/conv.c: the LeNet-5 convolution and pooling layers, batch 64, float32,
VALID, one op at a time:
  conv1 (28x28x1 input, 5x5x1x6 filter) forward and filter backprop, conv2 (12x12x6 input,
  5x5x6x16 filter) forward, input and filter backprops, 2x2/2 max pools of 24x24x6 and
  8x8x16 forward and gradient.
  name=<op> impl=... threads=N us_per_op=...   median of 7 passes of at least 0.2 s
  name=lenet_conv_total ...                    their sum
TensorFlow: NHWC, the ops nabla implements (Conv2D, Conv2DBackpropInput/Filter, MaxPool,
MaxPoolGrad), eagerly. PyTorch: NCHW, its native layout: F.conv2d,
torch.nn.grad.conv2d_input/conv2d_weight, F.max_pool2d and max_pool2d_with_indices_backward
(torch's pool gradient takes the argmax indices the forward saved). JAX: NHWC, each op
jitted: lax.conv_general_dilated, its transposes (jax.linear_transpose: what jax.grad runs),
lax.reduce_window max and its vjp (XLA's select-and-scatter); waited for with
block_until_ready.
Usage: conv.py --impl torch|tf|jax [--threads 1,2] [--quick]
"""
import numpy as np

import benchutil as bu

BATCH = 64
# NHWC inputs and gradients, HWIO filters
SHAPES = {"x1": (BATCH, 28, 28, 1), "w1": (5, 5, 1, 6), "dy1": (BATCH, 24, 24, 6),
          "x2": (BATCH, 12, 12, 6), "w2": (5, 5, 6, 16), "dy2": (BATCH, 8, 8, 16),
          "p1": (BATCH, 24, 24, 6), "dp1": (BATCH, 12, 12, 6), "p2": (BATCH, 8, 8, 16), "dp2": (BATCH, 4, 4, 16)}


def host_data():
    rng = np.random.default_rng(1)
    return {k: bu.uniform(rng, s, -1.0, 1.0) for k, s in SHAPES.items()}


def tf_ops(tf, d):
    t = {k: tf.constant(v) for k, v in d.items()}
    one, two = [1, 1, 1, 1], [1, 2, 2, 1]
    q1, q2 = tf.nn.max_pool2d(t["p1"], 2, 2, "VALID"), tf.nn.max_pool2d(t["p2"], 2, 2, "VALID")
    raw = tf.raw_ops
    return {
        "conv1_forward": lambda: tf.nn.conv2d(t["x1"], t["w1"], 1, "VALID"),
        "conv1_backprop_filter": lambda: raw.Conv2DBackpropFilter(
            input=t["x1"], filter_sizes=SHAPES["w1"], out_backprop=t["dy1"], strides=one, padding="VALID"),
        "conv2_forward": lambda: tf.nn.conv2d(t["x2"], t["w2"], 1, "VALID"),
        "conv2_backprop_input": lambda: raw.Conv2DBackpropInput(
            input_sizes=SHAPES["x2"], filter=t["w2"], out_backprop=t["dy2"], strides=one, padding="VALID"),
        "conv2_backprop_filter": lambda: raw.Conv2DBackpropFilter(
            input=t["x2"], filter_sizes=SHAPES["w2"], out_backprop=t["dy2"], strides=one, padding="VALID"),
        "pool1_forward": lambda: tf.nn.max_pool2d(t["p1"], 2, 2, "VALID"),
        "pool1_grad": lambda: raw.MaxPoolGrad(orig_input=t["p1"], orig_output=q1, grad=t["dp1"],
                                              ksize=two, strides=two, padding="VALID"),
        "pool2_forward": lambda: tf.nn.max_pool2d(t["p2"], 2, 2, "VALID"),
        "pool2_grad": lambda: raw.MaxPoolGrad(orig_input=t["p2"], orig_output=q2, grad=t["dp2"],
                                              ksize=two, strides=two, padding="VALID"),
    }


def torch_ops(torch, d):
    F = torch.nn.functional

    def torch_layout(key, a):  # filters HWIO -> OIHW, the rest NHWC -> NCHW
        return torch.from_numpy(np.ascontiguousarray(a.transpose((3, 2, 0, 1) if key.startswith("w") else (0, 3, 1, 2))))

    t = {k: torch_layout(k, v) for k, v in d.items()}
    _, i1 = F.max_pool2d(t["p1"], 2, return_indices=True)
    _, i2 = F.max_pool2d(t["p2"], 2, return_indices=True)
    pool_grad = torch.ops.aten.max_pool2d_with_indices_backward
    return {
        "conv1_forward": lambda: F.conv2d(t["x1"], t["w1"]),
        "conv1_backprop_filter": lambda: torch.nn.grad.conv2d_weight(t["x1"], t["w1"].shape, t["dy1"]),
        "conv2_forward": lambda: F.conv2d(t["x2"], t["w2"]),
        "conv2_backprop_input": lambda: torch.nn.grad.conv2d_input(t["x2"].shape, t["w2"], t["dy2"]),
        "conv2_backprop_filter": lambda: torch.nn.grad.conv2d_weight(t["x2"], t["w2"].shape, t["dy2"]),
        "pool1_forward": lambda: F.max_pool2d(t["p1"], 2),
        "pool1_grad": lambda: pool_grad(t["dp1"], t["p1"], [2, 2], [2, 2], [0, 0], [1, 1], False, i1),
        "pool2_forward": lambda: F.max_pool2d(t["p2"], 2),
        "pool2_grad": lambda: pool_grad(t["dp2"], t["p2"], [2, 2], [2, 2], [0, 0], [1, 1], False, i2),
    }


def jax_ops(jax, d):
    lax, t = jax.lax, {k: jax.numpy.asarray(v) for k, v in d.items()}

    def conv(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def pool(p):
        return lax.reduce_window(p, np.float32(-np.inf), lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    @jax.jit
    def backprop_filter(x, dy, w):
        return jax.linear_transpose(lambda w: conv(x, w), w)(dy)[0]

    @jax.jit
    def backprop_input(x, dy, w):
        return jax.linear_transpose(lambda x: conv(x, w), x)(dy)[0]

    @jax.jit
    def pool_grad(p, dq):
        return jax.vjp(pool, p)[1](dq)[0]

    conv_jit, pool_jit, ready = jax.jit(conv), jax.jit(pool), jax.block_until_ready
    return {
        "conv1_forward": lambda: ready(conv_jit(t["x1"], t["w1"])),
        "conv1_backprop_filter": lambda: ready(backprop_filter(t["x1"], t["dy1"], t["w1"])),
        "conv2_forward": lambda: ready(conv_jit(t["x2"], t["w2"])),
        "conv2_backprop_input": lambda: ready(backprop_input(t["x2"], t["dy2"], t["w2"])),
        "conv2_backprop_filter": lambda: ready(backprop_filter(t["x2"], t["dy2"], t["w2"])),
        "pool1_forward": lambda: ready(pool_jit(t["p1"])),
        "pool1_grad": lambda: ready(pool_grad(t["p1"], t["dp1"])),
        "pool2_forward": lambda: ready(pool_jit(t["p2"])),
        "pool2_grad": lambda: ready(pool_grad(t["p2"], t["dp2"])),
    }


def main():
    args, peer = bu.start(bu.parser(__doc__))
    if not peer:
        return
    runs, min_seconds = (3, 0.02) if args.quick else (7, 0.2)
    ops = {"torch": torch_ops, "tf": tf_ops, "jax": jax_ops}[peer.impl](peer.fw, host_data())
    total = 0.0
    for name, op in ops.items():
        us = bu.per_call(op, runs, min_seconds) * 1e6
        total += us
        bu.line(name, peer.impl, threads=peer.threads, us_per_op=us)
    bu.line("lenet_conv_total", peer.impl, threads=peer.threads, us_per_op=total)


if __name__ == "__main__":
    main()
