#!/usr/bin/env python3
"""TensorFlow SavedModels for tests/test_saved_model.c, with TF's outputs and gradients.

A small Keras MLP (x [batch, 4] -> Dense(8, tanh) "hidden" -> Dense(3) "logits") is saved
twice into tests/golden/saved_model/: mlp_export (Keras' model.export, signatures "serve"
and "serving_default") and mlp_save (tf.saved_model.save, signature "serving_default").
Beside each, in <name>_golden/, TF's results for the feed x.npy, read back through
tf.saved_model.load:

  y.npy                 the serving signature's output
  dx.npy                d sum(y) / dx
  d_<path>.npy          d sum(y) / d variable, for each variable the signature captures;
                        <path> is its checkpoint key's object path with '/' as '_'
                        ("variables/0/.ATTRIBUTES/VARIABLE_VALUE": d_variables_0.npy)
  sgd_<path>.npy        the variable after one SGD step (learning rate 0.1) on sum(y)
  *_abs.npy             the same sums over absolute values, in float64, from which the
                        test derives its rounding bounds (tests/testutil.h tu_check_sums)

The C test must find these keys through the object graph as TF's loader does. CI uses only
what is committed; rerun by hand (pip install tensorflow-cpu) from the repository root:

    python3 tests/golden/tf_saved_model.py
"""
import collections
import os
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.core.protobuf import saved_model_pb2  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "saved_model")
LR = 0.1


def make_model():
    keras.utils.set_random_seed(16)
    x = keras.Input(shape=(4,), name="x")
    h = keras.layers.Dense(8, activation="tanh", name="hidden", bias_initializer="random_normal")(x)
    y = keras.layers.Dense(3, name="logits", bias_initializer="random_normal")(h)
    return keras.Model(x, y)


def escape(name):
    """A local name in a checkpoint key (TF's trackable escaping)."""
    return name.replace(".", "..").replace("/", ".S")


def capture_keys(path, signature):
    """The checkpoint keys of the signature call's captured variables, in capture order:
    the call node's f is a concrete function whose bound_inputs name object-graph nodes,
    and a node's key is its breadth-first path from the root."""
    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    mg = sm.meta_graphs[0]
    graph = mg.object_graph_def
    paths, queue = {0: []}, collections.deque([0])
    while queue:
        i = queue.popleft()
        for child in graph.nodes[i].children:
            if child.node_id not in paths:
                paths[child.node_id] = paths[i] + [escape(child.local_name)]
                queue.append(child.node_id)
    (info,) = mg.signature_def[signature].outputs.values()
    nodes = {n.name: n for n in mg.graph_def.node}
    call = nodes[info.name.split(":")[0]]
    bound = graph.concrete_functions[call.attr["f"].func.name].bound_inputs
    return ["/".join(paths[i]) + "/.ATTRIBUTES/VARIABLE_VALUE" for i in bound]


def abs_sums(x, weights, h):
    """Sums of absolute values bounding each result's rounding, in the order of the
    model's weights (tanh' <= 1, so an error in z reaches h at most as large; d(1 - h^2)
    = -2 h dh). The loss is sum(y), so d loss / dy is ones."""
    ax, aw1, ab1, aw2, ab2 = (np.abs(np.float64(a)) for a in (x,) + tuple(weights))
    h = np.float64(h)
    s_h = ax @ aw1 + ab1 + np.abs(h)
    dh = np.float64(weights[2]).sum(axis=1)  # d loss / dh, the same for every row
    s_dh = aw2.sum(axis=1) * np.ones_like(h)
    s_dz = s_dh * (1 + h * h) + 2 * np.abs(dh) * np.abs(h) * s_h
    return s_h @ aw2 + ab2, s_dz @ aw1.T, [
        ax.T @ s_dz, s_dz.sum(axis=0), s_h.T @ np.ones((x.shape[0], aw2.shape[1])), np.full(ab2.shape, x.shape[0] * 1.0)
    ]


def golden(name, path, signature, model):
    keys = capture_keys(path, signature)
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures[signature]
    by_handle = {id(v.handle): v for v in fn.variables}
    variables = [by_handle[id(c)] for c in fn.captured_inputs]
    (in_key,) = fn.structured_input_signature[1].keys()
    (out_key,) = fn.structured_outputs.keys()
    x = tf.constant(np.random.default_rng(16).standard_normal((2, 4)).astype(np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(**{in_key: x})[out_key]
        loss = tf.reduce_sum(y)
    grads = tape.gradient(loss, [x] + variables)
    weights = [v.numpy() for v in model.trainable_variables]
    h = np.tanh(x.numpy() @ weights[0] + weights[1])
    y_abs, dx_abs, weight_abs = abs_sums(x.numpy(), weights, h)
    out = os.path.join(OUT, name + "_golden")
    os.makedirs(out)
    np.save(os.path.join(out, "x.npy"), x.numpy())
    np.save(os.path.join(out, "y.npy"), y.numpy())
    np.save(os.path.join(out, "y_abs.npy"), y_abs)
    np.save(os.path.join(out, "dx.npy"), grads[0].numpy())
    np.save(os.path.join(out, "dx_abs.npy"), dx_abs)
    for key, var, grad in zip(keys, variables, grads[1:]):
        stem = key[: -len("/.ATTRIBUTES/VARIABLE_VALUE")].replace("/", "_")
        (index,) = [i for i, w in enumerate(weights) if np.array_equal(w, var.numpy())]
        np.save(os.path.join(out, "d_" + stem + ".npy"), grad.numpy())
        np.save(os.path.join(out, "d_" + stem + "_abs.npy"), weight_abs[index])
        np.save(os.path.join(out, "sgd_" + stem + ".npy"), (var - LR * grad).numpy())
    print(name, signature, in_key, out_key, keys)


def save(name, write):
    path = os.path.join(OUT, name)
    write(path)
    for extra in ("fingerprint.pb", "assets"):  # the loader needs neither
        target = os.path.join(path, extra)
        if os.path.isdir(target):
            shutil.rmtree(target)
        elif os.path.exists(target):
            os.remove(target)
    return path


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    model = make_model()
    golden("mlp_export", save("mlp_export", model.export), "serving_default", model)
    golden("mlp_save", save("mlp_save", lambda p: tf.saved_model.save(model, p)), "serving_default", model)


if __name__ == "__main__":
    main()
