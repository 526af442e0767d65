"""TF-made GraphDefs for nabla's GraphDef import tests (tests/test_graphdef_read.c).

Run by hand with TensorFlow 2 (pip install tensorflow-cpu numpy); CI uses only the files it
wrote into tests/golden/graphdef/. Four models (an MLP, a CNN, a tf.cond model, a
tf.while_loop RNN), each written twice:

  NAME_frozen.pb  convert_variables_to_constants_v2(lower_control_flow=False): Const
                  weights, functional While/If kept
  NAME_func.pb    the concrete function's own graph with its function library; the
                  captured variables' resource placeholders are replaced by VarHandleOp
                  nodes (dtype, shape, shared_name), which is how a graph holding its
                  variables (a SavedModel's, a TF 1 graph's) names them

and beside them, as .npy (float32): NAME_x (the feed of placeholder "x"), NAME_w0, NAME_w1,
... (the variables' values, in the order of their VarHandleOp nodes), NAME_y (output
"y"), NAME_loss (output "loss" = sum(y^2) / 2), NAME_dx and NAME_dw0, ... (d loss / d x
and d loss / d w_k) and, for the twice differentiable models, NAME_ddx (d sum(d loss /
d x) / d x, second order). NAME_consts.txt lists the frozen graph's Const node of each
variable, in the same order.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "graphdef")
rng = np.random.default_rng(16)


def var(shape, name):
    return tf.Variable(rng.standard_normal(shape).astype(np.float32) * 0.5, name=name)


def mlp():
    w = [var([4, 8], "w0"), var([8], "b0"), var([8, 3], "w1")]

    def f(x):
        h = tf.tanh(tf.matmul(x, w[0]) + w[1])
        return tf.matmul(h, w[2])

    return w, f, [5, 4], True


def cnn():
    w = [var([3, 3, 1, 2], "k"), var([2], "kb"), var([18, 3], "wd")]

    def f(x):
        h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w[0], 1, "SAME"), w[1]))
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        return tf.matmul(tf.reshape(h, [-1, 18]), w[2])

    return w, f, [2, 6, 6, 1], False


def cond():
    w = [var([4, 2], "wc")]

    def f(x):
        z = tf.matmul(x, w[0])
        return tf.cond(tf.reduce_sum(x) > 0, lambda: tf.tanh(z), lambda: tf.sigmoid(z) * 2.0)

    return w, f, [3, 4], True


def rnn():
    w = [var([3, 5], "wx"), var([5, 5], "wh")]

    def f(x):
        def body(t, h):
            xt = tf.gather(x, t, axis=1)
            return t + 1, tf.tanh(tf.matmul(xt, w[0]) + tf.matmul(h, w[1]))

        _, h = tf.while_loop(lambda t, h: t < 4, body, [tf.constant(0), tf.zeros([2, 5])])
        return h

    return w, f, [2, 4, 3], True


def resource_to_var_handle(gd, captures):
    """Each captured variable's resource placeholder becomes a VarHandleOp of the variable."""
    by_name = {ph.op.name: v for v, ph in captures}
    for node in gd.node:
        v = by_name.get(node.name)
        if v is None:
            continue
        node.op = "VarHandleOp"
        for key in list(node.attr):
            del node.attr[key]
        node.attr["dtype"].type = v.dtype.as_datatype_enum
        node.attr["shape"].shape.CopyFrom(v.shape.as_proto())
        node.attr["shared_name"].s = v.name.split(":")[0].encode()
    return gd


def write(name, build):
    w, f, xshape, twice = build()
    x0 = rng.standard_normal(xshape).astype(np.float32)

    @tf.function(input_signature=[tf.TensorSpec(xshape, tf.float32, name="x")])
    def model(x):
        y = tf.identity(f(x), name="y")
        return y, tf.identity(tf.reduce_sum(tf.square(y)) / 2, name="loss")

    cf = model.get_concrete_function()
    frozen = convert_variables_to_constants_v2(cf, lower_control_flow=False)
    fgd = frozen.graph.as_graph_def()
    with open(os.path.join(OUT, name + "_frozen.pb"), "wb") as fh:
        fh.write(fgd.SerializeToString())
    captures = [(v, ph) for v, ph in cf.graph.captures if v.dtype == tf.resource]
    ordered = []
    for node in cf.graph.as_graph_def().node:  # the variables in the order of their nodes
        for t, ph in captures:
            if ph.op.name == node.name:
                ordered.append(next(v for v in w if v.handle is t))
    gd = resource_to_var_handle(cf.graph.as_graph_def(), [(v, ph) for v in ordered for t, ph in captures
                                                           if v.handle is t])
    with open(os.path.join(OUT, name + "_func.pb"), "wb") as fh:
        fh.write(gd.SerializeToString())
    consts = []  # the frozen graph's Const of each variable: the placeholder's name kept
    for v in ordered:
        ph = next(ph for t, ph in captures if v.handle is t)
        consts.append(ph.op.name)
    with open(os.path.join(OUT, name + "_consts.txt"), "w") as fh:
        fh.write("\n".join(consts) + "\n")

    x = tf.constant(x0)
    with tf.GradientTape(persistent=True) as outer:
        outer.watch(x)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            y, loss = model(x)
        dx = tape.gradient(loss, x)
        s = tf.reduce_sum(dx)
    dws = tape.gradient(loss, ordered)
    save = {"x": x0, "y": y.numpy(), "loss": loss.numpy(), "dx": dx.numpy()}
    for k, (v, dw) in enumerate(zip(ordered, dws)):
        save["w%d" % k] = v.numpy()
        save["dw%d" % k] = dw.numpy()
    if twice:
        save["ddx"] = outer.gradient(s, x).numpy()
    for key, val in save.items():
        np.save(os.path.join(OUT, "%s_%s.npy" % (name, key)), np.asarray(val, np.float32))


# Graphs whose attrs TF's defaults fill: Sum without keep_dims, MatMul without transpose_a/b,
# Conv2D without data_format and dilations.
DEFAULTS = (
    'node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } '
    'attr { key: "shape" value { shape { dim { size: 1 } dim { size: 2 } dim { size: 3 } dim { size: 1 } } } } }'
    'node { name: "axis" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } '
    'attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 1 } } int_val: 2 } } } }'
    'node { name: "s" op: "Sum" input: "x" input: "axis" attr { key: "T" value { type: DT_FLOAT } } }'
    'node { name: "k" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } '
    'attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 1 } dim { size: 1 } '
    'dim { size: 1 } dim { size: 1 } } float_val: 2 } } } }'
    'node { name: "conv" op: "Conv2D" input: "x" input: "k" attr { key: "padding" value { s: "VALID" } } '
    'attr { key: "strides" value { list { i: 1 i: 1 i: 1 i: 1 } } } }'
    'node { name: "flat" op: "Reshape" input: "x" input: "shape" }'
    'node { name: "shape" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } '
    'attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 2 } } int_val: 2 '
    'int_val: 3 } } } }'
    'node { name: "m" op: "MatMul" input: "flat" input: "flat" attr { key: "transpose_b" value { b: true } } }')

# Broken graphs for the error paths, as text protos (each one fault).
X = 'node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }'
ONE = 'node { name: "one" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } ' \
      'attr { key: "value" value { tensor { dtype: DT_FLOAT float_val: 1 } } } }'
BAD = {
    # three unknown ops of two types, beside a known one: all listed at once
    "bad_unknown_ops": X + ONE + 'node { name: "a" op: "Erfinv" input: "x" }'
                       'node { name: "b" op: "FooBar" input: "a" }'
                       'node { name: "c" op: "Erfinv" input: "b" }'
                       'node { name: "d" op: "AddV2" input: "c" input: "one" }',
    # MatMul's transpose_a given as a string
    "bad_attr_type": X + 'node { name: "m" op: "MatMul" input: "x" input: "x" '
                     'attr { key: "transpose_a" value { s: "yes" } } }',
    "bad_missing_input": X + 'node { name: "t" op: "Tanh" input: "nowhere:0" }',
    "bad_cycle": X + 'node { name: "p" op: "AddV2" input: "x" input: "q" }'
                 'node { name: "q" op: "Tanh" input: "p" }',
    # a string placeholder
    "bad_dtype": 'node { name: "s" op: "Placeholder" attr { key: "dtype" value { type: DT_STRING } } }',
    # TF 1 control flow (a lowered tf.cond)
    "bad_tf1_cond": X + 'node { name: "pred" op: "Const" attr { key: "dtype" value { type: DT_BOOL } } '
                    'attr { key: "value" value { tensor { dtype: DT_BOOL bool_val: true } } } }'
                    'node { name: "sw" op: "Switch" input: "x" input: "pred" }'
                    'node { name: "mg" op: "Merge" input: "sw" input: "sw:1" }',
}


def write_bad():
    from google.protobuf import text_format
    for name, text in list(BAD.items()) + [("defaults", DEFAULTS)]:
        gd = text_format.Parse(text, tf.compat.v1.GraphDef())
        with open(os.path.join(OUT, name + ".pb"), "wb") as fh:
            fh.write(gd.SerializeToString())


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, build in [("mlp", mlp), ("cnn", cnn), ("cond", cond), ("rnn", rnn)]:
        write(name, build)
    write_bad()


if __name__ == "__main__":
    main()
