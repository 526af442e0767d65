#!/usr/bin/env python3
"""Generates tests/golden/conv_golden.h: Conv2D, its input and filter gradients, MaxPool,
AvgPool (with their gradients and MaxPoolGradGrad) and BiasAdd computed by TensorFlow in
float64, which tests/test_conv.c recomputes with nabla (float64 and float32). Inputs are
multiples of 1/64, exact in float32. NCHW cases are the NHWC results transposed (TF's CPU
kernels take NHWC only for most of these ops). CI uses only the committed header; rerun
this (pip install tensorflow-cpu) to refresh it.

    python3 tests/golden/make_conv_golden.py > tests/golden/conv_golden.h
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

rng = np.random.default_rng(11)


def arr(*shape):
    return np.round(rng.uniform(-2.0, 2.0, size=shape) * 64) / 64


def to_nchw(a):
    return np.transpose(a, (0, 3, 1, 2))


def layout4(v, nchw):  # an NHWC-order 4-tuple in the case's layout
    return [v[0], v[3], v[1], v[2]] if nchw else list(v)


def c_array(name, a):
    flat = ", ".join(repr(float(v)) for v in np.asarray(a).ravel())
    return f"static const double {name}[] = {{{flat}}};"


def ints(v):
    return "{" + ", ".join(str(int(i)) for i in v) + "}"


# name, x shape (NHWC), filter, strides (h, w), dilations (h, w), padding, explicit (t, b, l, r), nchw
CONV_CASES = [
    ("valid", (2, 5, 5, 3), (3, 3, 3, 4), (1, 1), (1, 1), "VALID", None, False),
    ("same_stride2", (2, 6, 7, 2), (3, 2, 2, 3), (2, 2), (1, 1), "SAME", None, False),
    ("explicit", (1, 5, 4, 2), (2, 3, 2, 2), (2, 1), (1, 1), "EXPLICIT", (1, 2, 2, 0), False),
    ("dilation2", (2, 7, 6, 2), (3, 3, 2, 2), (1, 1), (2, 2), "SAME", None, False),
    ("nchw_valid_stride2", (2, 7, 6, 3), (3, 3, 3, 2), (2, 2), (1, 1), "VALID", None, True),
    ("nchw_same_stride2", (1, 6, 6, 2), (2, 2, 2, 3), (2, 2), (1, 1), "SAME", None, True),
    ("pointwise", (2, 3, 3, 4), (1, 1, 4, 3), (1, 1), (1, 1), "VALID", None, False),
    ("nchw_explicit_dilation", (2, 6, 5, 2), (2, 2, 2, 2), (1, 2), (2, 1), "EXPLICIT", (0, 1, 1, 1), True),
    ("one_channel", (2, 7, 6, 1), (3, 3, 1, 2), (2, 1), (1, 2), "SAME", None, False),
    ("one_channel_explicit", (3, 6, 6, 1), (2, 3, 1, 3), (1, 2), (1, 1), "EXPLICIT", (2, 0, 1, 3), False),
]

# name, op, x shape (NHWC), ksize (h, w), strides (h, w), padding, explicit, nchw
POOL_CASES = [
    ("max_valid", "max", (2, 7, 7, 3), (3, 3), (2, 2), "VALID", None, False),
    ("max_same", "max", (1, 6, 5, 2), (3, 3), (2, 2), "SAME", None, False),
    ("max_same_nchw", "max", (2, 5, 4, 3), (2, 2), (1, 1), "SAME", None, True),
    ("max_explicit", "max", (1, 5, 5, 2), (3, 3), (2, 2), "EXPLICIT", (1, 1, 2, 0), False),
    ("max_2x2", "max", (2, 4, 6, 2), (2, 2), (2, 2), "VALID", None, False),
    ("avg_valid", "avg", (2, 7, 6, 2), (3, 2), (2, 2), "VALID", None, False),
    ("avg_same", "avg", (1, 6, 5, 3), (3, 3), (2, 2), "SAME", None, False),
    ("avg_same_nchw", "avg", (2, 5, 4, 2), (3, 3), (1, 2), "SAME", None, True),
]

BIAS_CASES = [("nhwc", (2, 3, 4, 5), False), ("nchw", (2, 3, 4, 2), True), ("matrix", (4, 3), False)]


def dilate(ft, dil):
    """The filter with dil - 1 zeros between taps: an undilated conv with it is the dilated
    conv (TF's CPU backprops refuse dilations, so the gradients go through this)."""
    kh, kw, ci, co = ft.shape
    idx = [[i * dil[0], j * dil[1]] for i in range(kh) for j in range(kw)]
    zeros = tf.zeros([(kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1, ci, co], ft.dtype)
    return tf.tensor_scatter_nd_update(zeros, idx, tf.reshape(ft, [kh * kw, ci, co]))


def conv_case(name, xs, fs, st, dil, pad, expl, nchw):
    x, f = arr(*xs), arr(*fs)
    padding = [[0, 0], [expl[0], expl[1]], [expl[2], expl[3]], [0, 0]] if expl else pad
    xt, ft = tf.constant(x), tf.constant(f)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([xt, ft])
        y = tf.nn.conv2d(xt, dilate(ft, dil), strides=[1, *st, 1], padding=padding)
        y_direct = tf.nn.conv2d(xt, ft, strides=[1, *st, 1], padding=padding, dilations=[1, *dil, 1])
        assert np.allclose(y.numpy(), y_direct.numpy(), rtol=1e-12, atol=1e-12)
        dy = arr(*y.shape)
        loss = tf.reduce_sum(y * dy)
    dx, df = tape.gradient(loss, [xt, ft])
    y, dx = y.numpy(), dx.numpy()
    if nchw:
        x, y, dy, dx = to_nchw(x), to_nchw(y), to_nchw(dy), to_nchw(dx)
    explicit = [0, 0] * 4
    if expl:
        hd = 2 if nchw else 1
        explicit[2 * hd:2 * hd + 4] = list(expl)
    p = "conv_" + name
    out = [c_array(p + "_x", x), c_array(p + "_f", f), c_array(p + "_y", y), c_array(p + "_dy", dy),
           c_array(p + "_dx", dx), c_array(p + "_df", df.numpy())]
    entry = (f'{{"{name}", "{pad}", "{"NCHW" if nchw else "NHWC"}", {ints(layout4((1, *st, 1), nchw))}, '
             f'{ints(layout4((1, *dil, 1), nchw))}, {ints(explicit)}, {ints(x.shape)}, {ints(f.shape)}, '
             f'{ints(y.shape)}, {p}_x, {p}_f, {p}_y, {p}_dy, {p}_dx, {p}_df}}')
    return out, entry


def pool_case(name, op, xs, ks, st, pad, expl, nchw):
    x = arr(*xs)
    padding = [[0, 0], [expl[0], expl[1]], [expl[2], expl[3]], [0, 0]] if expl else pad
    xt = tf.constant(x)
    pool = tf.nn.max_pool2d if op == "max" else tf.nn.avg_pool2d
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = pool(xt, ksize=list(ks), strides=list(st), padding=padding)
        dy = arr(*y.shape)
        loss = tf.reduce_sum(y * dy)
    dx = tape.gradient(loss, xt).numpy()
    ddx = arr(*x.shape)
    if op == "max" and not expl:
        gg = tf.raw_ops.MaxPoolGradGrad(orig_input=xt, orig_output=y, grad=tf.constant(ddx), ksize=[1, *ks, 1],
                                        strides=[1, *st, 1], padding=pad).numpy()
    else:
        gg = np.zeros(y.shape)
    y = y.numpy()
    if nchw:
        x, y, dy, dx, ddx, gg = (to_nchw(a) for a in (x, y, dy, dx, ddx, gg))
    explicit = [0, 0] * 4
    if expl:
        hd = 2 if nchw else 1
        explicit[2 * hd:2 * hd + 4] = list(expl)
    p = "pool_" + name
    out = [c_array(p + "_x", x), c_array(p + "_y", y), c_array(p + "_dy", dy), c_array(p + "_dx", dx),
           c_array(p + "_ddx", ddx), c_array(p + "_gg", gg)]
    entry = (f'{{"{name}", {1 if op == "max" else 0}, "{pad}", "{"NCHW" if nchw else "NHWC"}", '
             f'{ints(layout4((1, *ks, 1), nchw))}, {ints(layout4((1, *st, 1), nchw))}, {ints(explicit)}, '
             f'{ints(x.shape)}, {ints(y.shape)}, {p}_x, {p}_y, {p}_dy, {p}_dx, {p}_ddx, {p}_gg}}')
    return out, entry


def bias_case(name, xs, nchw):
    x = arr(*xs)
    c = xs[1] if nchw and len(xs) > 2 else xs[-1]
    b = arr(c)
    y = tf.nn.bias_add(x, b, data_format="NCHW" if nchw else "NHWC").numpy()
    db = tf.raw_ops.BiasAddGrad(out_backprop=x, data_format="NCHW" if nchw else "NHWC").numpy()
    p = "bias_" + name
    out = [c_array(p + "_x", x), c_array(p + "_b", b), c_array(p + "_y", y), c_array(p + "_db", db)]
    dims = ints(list(xs) + [0] * (4 - len(xs)))
    entry = f'{{"{name}", "{"NCHW" if nchw else "NHWC"}", {len(xs)}, {dims}, {p}_x, {p}_b, {p}_y, {p}_db}}'
    return out, entry


def main():
    print("/* Generated by tests/golden/make_conv_golden.py with TensorFlow " + tf.__version__ + "; do not edit. */")
    print("#ifndef CONV_GOLDEN_H\n#define CONV_GOLDEN_H\n\n#include <stdint.h>\n")
    print("""typedef struct conv_golden {
  const char *name, *padding, *data_format;
  int64_t strides[4], dilations[4], explicit_paddings[8]; /* explicit_paddings used with EXPLICIT */
  int64_t x_shape[4], f_shape[4], y_shape[4];
  const double *x, *f, *y, *dy, *dx, *df; /* dy: the weights of sum(y * dy), dx and df its gradients */
} conv_golden;

typedef struct pool_golden {
  const char *name;
  int is_max;
  const char *padding, *data_format;
  int64_t ksize[4], strides[4], explicit_paddings[8];
  int64_t x_shape[4], y_shape[4];
  const double *x, *y, *dy, *dx; /* dx: the gradient of sum(y * dy) */
  const double *ddx, *gg;         /* MaxPoolGradGrad(x, y, ddx) (zeros for avg and EXPLICIT cases) */
} pool_golden;

typedef struct bias_golden {
  const char *name, *data_format;
  int rank;
  int64_t x_shape[4];
  const double *x, *b, *y, *db; /* db: BiasAddGrad(x) */
} bias_golden;
""")
    for cases, fn, typ in ((CONV_CASES, conv_case, "conv_golden conv_cases"),
                           (POOL_CASES, pool_case, "pool_golden pool_cases"),
                           (BIAS_CASES, bias_case, "bias_golden bias_cases")):
        entries = []
        for case in cases:
            arrays, entry = fn(*case)
            print("\n".join(arrays))
            entries.append(entry)
        print(f"static const {typ}[] = {{\n    " + ",\n    ".join(entries) + "};\n")
    print("#endif")


main()
