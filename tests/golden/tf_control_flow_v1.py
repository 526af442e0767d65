"""TF 1 control flow GraphDefs for nabla's functionalization pass (src/io/functionalize.c).

Run by hand with TensorFlow installed; CI uses only the files this script commits.

  python tf_control_flow_v1.py make        writes graphdef_v1/<model>.pb with feeds,
                                           TF's outputs and gradients (.npy)
  python tf_control_flow_v1.py check DIR   loads DIR/<model>.pb (the graphs after
                                           nabla's pass: test_functionalize --write),
                                           runs them in TF and writes
                                           graphdef_v1/tf_results.txt

Models (small, float32, fixed weights from a seeded generator):
  rnn_v1        tf.while_loop RNN, h = tanh(x_t W + h U + b), graph mode with
                control flow v1 (Enter/Merge/Switch/Exit/NextIteration/LoopCond)
  rnn_frozen    the same RNN as a tf.function with variables, frozen by
                convert_variables_to_constants_v2 (lowering on: TF's own freezing)
  cond_v1_*     tf.cond on a fed bool predicate (fed true, fed false), v1 graph mode
  cond_frozen   the same cond as a tf.function with a variable, frozen (lowered If)
  cond_in_while a tf.cond inside a tf.while_loop body, v1 graph mode
  nested_while  a tf.while_loop inside a tf.while_loop body, v1 graph mode
  while_in_cond the RNN's tf.while_loop inside a tf.cond branch, v1 graph mode
  nested_cond   a tf.cond inside a tf.cond branch, v1 graph mode
Gradients (eager GradientTape of the same math) are of loss = sum(y^2) / 2 with respect
to each float feed, and second order: d/dh0 of sum(dloss/dh0) (a Hessian-vector
product with ones), for the models with an h0 feed.
"""
import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import convert_to_constants

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "graphdef_v1")
T, B, D, H = 4, 2, 3, 5

rng = np.random.default_rng(16)
W = (rng.standard_normal((D, H)) * 0.5).astype(np.float32)
U = (rng.standard_normal((H, H)) * 0.5).astype(np.float32)
BIAS = (rng.standard_normal((H,)) * 0.1).astype(np.float32)
X = rng.standard_normal((T, B, D)).astype(np.float32)
H0 = (rng.standard_normal((B, H)) * 0.5).astype(np.float32)


# The math of each model, eagerly, for the gradients.
def rnn_math(x, h0):
    h = h0
    for t in range(T):
        h = tf.tanh(tf.matmul(x[t], W) + tf.matmul(h, U) + BIAS)
    return h


def cond_math(x, h0, p):
    if p:
        return tf.tanh(tf.matmul(x[0], W) + h0)
    return tf.matmul(h0, U) * 0.5 + 1.0


def cond_in_while_math(x, h0):
    h = h0
    for t in range(T):
        if t < 2:
            h = tf.tanh(tf.matmul(x[t], W) + tf.matmul(h, U))
        else:
            h = h * 0.5 + BIAS
    return h


def nested_while_math(x, h0):
    h = h0
    for t in range(T):
        for _ in range(2):
            h = tf.tanh(tf.matmul(h, U) + tf.matmul(x[t], W))
        h = h + BIAS
    return h


def while_in_cond_math(x, h0, p):
    if p:
        return rnn_math(x, h0)
    return h0 * 2.0


def nested_cond_math(x, h0, p):
    if p:
        if tf.reduce_sum(h0) > 0:
            return tf.tanh(h0 + BIAS)
        return tf.matmul(x[1], W) - h0
    return h0 * 3.0


# The same models as TF 1 graphs.
def rnn_graph(x, h0):
    def body(i, h):
        return i + 1, tf.tanh(tf.matmul(x[i], W) + tf.matmul(h, U) + BIAS)

    _, h = tf.compat.v1.while_loop(lambda i, h: i < T, body, [tf.constant(0), h0])
    return h


def cond_graph(x, h0, p):
    return tf.compat.v1.cond(p, lambda: tf.tanh(tf.matmul(x[0], W) + h0),
                             lambda: tf.matmul(h0, U) * 0.5 + 1.0)


def cond_in_while_graph(x, h0):
    def body(i, h):
        h = tf.compat.v1.cond(i < 2,
                              lambda: tf.tanh(tf.matmul(x[i], W) + tf.matmul(h, U)),
                              lambda: h * 0.5 + BIAS)
        return i + 1, h

    _, h = tf.compat.v1.while_loop(lambda i, h: i < T, body, [tf.constant(0), h0])
    return h


def nested_while_graph(x, h0):
    def outer(i, h):
        def inner(j, g):
            return j + 1, tf.tanh(tf.matmul(g, U) + tf.matmul(x[i], W))

        _, h = tf.compat.v1.while_loop(lambda j, g: j < 2, inner, [tf.constant(0), h])
        return i + 1, h + BIAS

    _, h = tf.compat.v1.while_loop(lambda i, h: i < T, outer, [tf.constant(0), h0])
    return h


def while_in_cond_graph(x, h0, p):
    return tf.compat.v1.cond(p, lambda: rnn_graph(x, h0), lambda: h0 * 2.0)


def nested_cond_graph(x, h0, p):
    def inner():
        return tf.compat.v1.cond(tf.reduce_sum(h0) > 0, lambda: tf.tanh(h0 + BIAS),
                                 lambda: tf.matmul(x[1], W) - h0)

    return tf.compat.v1.cond(p, inner, lambda: h0 * 3.0)


def v1_graph(build, with_p):
    """A GraphDef with TF 1 control flow: placeholders x, h0 (and p), output y."""
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.disable_control_flow_v2()
        x = tf.compat.v1.placeholder(tf.float32, [T, B, D], name="x")
        h0 = tf.compat.v1.placeholder(tf.float32, [B, H], name="h0")
        args = [x, h0]
        if with_p:
            args.append(tf.compat.v1.placeholder(tf.bool, [], name="p"))
        tf.identity(build(*args), name="y")
        tf.compat.v1.enable_control_flow_v2()
    return g.as_graph_def()


def frozen_rnn():
    """The RNN as a tf.function over variables, frozen as TF freezes (lowered loops)."""
    wv, uv, bv = tf.Variable(W), tf.Variable(U), tf.Variable(BIAS)

    @tf.function(input_signature=[tf.TensorSpec([T, B, D], tf.float32, name="x"),
                                  tf.TensorSpec([B, H], tf.float32, name="h0")])
    def f(x, h0):
        def body(i, h):
            return i + 1, tf.tanh(tf.matmul(x[i], wv) + tf.matmul(h, uv) + bv)

        _, h = tf.while_loop(lambda i, h: i < T, body, [tf.constant(0), h0])
        return tf.identity(h, name="y")

    frozen = convert_to_constants.convert_variables_to_constants_v2(f.get_concrete_function())
    return frozen.graph.as_graph_def()


def frozen_cond():
    """The cond model as a tf.function over a variable, frozen as TF freezes (lowered If)."""
    wv = tf.Variable(W)

    @tf.function(input_signature=[tf.TensorSpec([T, B, D], tf.float32, name="x"),
                                  tf.TensorSpec([B, H], tf.float32, name="h0"),
                                  tf.TensorSpec([], tf.bool, name="p")])
    def f(x, h0, p):
        y = tf.cond(p, lambda: tf.tanh(tf.matmul(x[0], wv) + h0), lambda: tf.matmul(h0, U) * 0.5 + 1.0)
        return tf.identity(y, name="y")

    frozen = convert_to_constants.convert_variables_to_constants_v2(f.get_concrete_function())
    return frozen.graph.as_graph_def()


def output_name(gd):
    """The frozen function's output node (an Identity of y)."""
    outs = [n.name for n in gd.node if n.op == "Identity" and n.name.startswith("Identity")]
    return outs[-1] if outs else "y"


def run_graph(gd, feeds, fetch):
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=g) as s:
        return s.run(fetch + ":0", {k + ":0": v for k, v in feeds.items()})


def gradients(math, x, h0, *rest):
    xv, hv = tf.constant(x), tf.constant(h0)
    with tf.GradientTape() as outer:
        outer.watch(hv)
        with tf.GradientTape() as inner:
            inner.watch([xv, hv])
            y = math(xv, hv, *rest)
            loss = tf.reduce_sum(y * y) / 2
        gx, gh = inner.gradient(loss, [xv, hv], unconnected_gradients=tf.UnconnectedGradients.ZERO)
        s = tf.reduce_sum(gh)
    ghh = outer.gradient(s, hv)
    return {"grad_x": gx.numpy(), "grad_h0": gh.numpy(), "grad2_h0": ghh.numpy()}


MODELS = {
    # name: (graph def maker, eager math, feeds beyond x and h0)
    "rnn_v1": (lambda: v1_graph(rnn_graph, False), rnn_math, {}),
    "rnn_frozen": (frozen_rnn, rnn_math, {}),
    "cond_v1_true": (lambda: v1_graph(cond_graph, True), cond_math, {"p": np.array(True)}),
    "cond_v1_false": (lambda: v1_graph(cond_graph, True), cond_math, {"p": np.array(False)}),
    "cond_frozen": (frozen_cond, cond_math, {"p": np.array(False)}),
    "cond_in_while": (lambda: v1_graph(cond_in_while_graph, False), cond_in_while_math, {}),
    "nested_while": (lambda: v1_graph(nested_while_graph, False), nested_while_math, {}),
    "while_in_cond": (lambda: v1_graph(while_in_cond_graph, True), while_in_cond_math, {"p": np.array(True)}),
    "nested_cond": (lambda: v1_graph(nested_cond_graph, True), nested_cond_math, {"p": np.array(True)}),
}


def make():
    os.makedirs(OUT, exist_ok=True)
    np.save(os.path.join(OUT, "x.npy"), X)
    np.save(os.path.join(OUT, "h0.npy"), H0)
    for name, (maker, math, extra) in MODELS.items():
        gd = maker()
        with open(os.path.join(OUT, name + ".pb"), "wb") as f:
            f.write(gd.SerializeToString())
        feeds = dict(x=X, h0=H0, **extra)
        y = run_graph(gd, feeds, output_name(gd))
        ref = math(tf.constant(X), tf.constant(H0), *[bool(v) for v in extra.values()])
        assert np.allclose(y, ref.numpy(), rtol=1e-5, atol=1e-6), name
        np.save(os.path.join(OUT, name + ".y.npy"), y)
        grads = gradients(math, X, H0, *[bool(v) for v in extra.values()])
        for k, v in grads.items():
            np.save(os.path.join(OUT, name + "." + k + ".npy"), v)
        ops = sorted({n.op for n in gd.node})
        print(name, "output", output_name(gd), "ops", " ".join(ops))


def check(done_dir):
    lines = ["# TF %s runs each graph after nabla's functionalization pass and compares" % tf.__version__,
             "# its output with the original graph's (committed .y.npy): max abs difference."]
    ok = True
    for name, (_, _, extra) in MODELS.items():
        gd = tf.compat.v1.GraphDef()
        with open(os.path.join(done_dir, name + ".pb"), "rb") as f:
            gd.ParseFromString(f.read())
        left = sorted({n.op for n in gd.node} & {"Switch", "Merge", "Enter", "Exit",
                                                  "NextIteration", "LoopCond"})
        feeds = dict(x=X, h0=H0, **extra)
        want = np.load(os.path.join(OUT, name + ".y.npy"))
        got = run_graph(gd, feeds, output_name(gd))
        diff = float(np.max(np.abs(got - want)))
        whiles = sum(n.op == "While" for n in gd.node)
        ifs = sum(n.op == "If" for n in gd.node)
        # The same ops run in both graphs, but inside functions TF may pick other kernels
        # or fusions: allow each of the T steps a few float32 roundings of its result.
        tol = 4 * T * np.finfo(np.float32).eps * max(1.0, float(np.max(np.abs(want))))
        good = not left and diff <= tol
        ok = ok and good
        lines.append("%s: %s While=%d If=%d functions=%d v1_ops_left=%s max_abs_diff=%.3g" %
                     (name, "ok" if good else "FAIL", whiles, ifs, len(gd.library.function),
                      ",".join(left) or "none", diff))
    with open(os.path.join(OUT, "tf_results.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return ok


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "make":
        make()
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(0 if check(sys.argv[2]) else 1)
    else:
        sys.exit(__doc__)
