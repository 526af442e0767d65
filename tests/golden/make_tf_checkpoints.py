#!/usr/bin/env python3
"""TensorFlow's checkpoints for tests/test_checkpoint.c, and TensorFlow's verdict on nabla's.

Step 1 writes two checkpoints into tests/golden/ckpt/ -- tf2 (tf.train.Checkpoint:
object-based keys, a Keras Dense layer and its Adam optimizer's slots after one step) and
tf1 (tf.compat.v1.train.Saver: variable names, AdamOptimizer's slots, a global step) --
with float32, float64, int32, int64 and bool tensors of rank 0 to 4, and their keys,
dtypes, shapes and values (as TF reads them back) in tests/golden/ckpt_golden.h. The C
tests restore both and compare every bit.

Step 2 has nabla write the tf1 tensors under their keys (test_checkpoint write-golden),
loads that checkpoint with tf.train.load_checkpoint, compares every tensor with TF's own
(dtype, shape, bytes) and records the result in tests/golden/ckpt/nabla_read_by_tf.txt;
the C tests check that nabla still writes those very bytes.

CI uses only what is committed. Rerun by hand (pip install tensorflow-cpu), from the
repository root:

    python3 tests/golden/make_tf_checkpoints.py
    cmake --build build --target test_checkpoint
    python3 tests/golden/make_tf_checkpoints.py --check-nabla build/tests/test_checkpoint
"""
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "ckpt")
rng = np.random.default_rng(15)

NB_DTYPES = {tf.float32: ("NB_F32", "float"), tf.float64: ("NB_F64", "double"), tf.int32: ("NB_I32", "int32_t"),
             tf.int64: ("NB_I64", "int64_t"), tf.bool: ("NB_BOOL", "uint8_t")}


def values(dtype, shape):
    """Random values of dtype: floats spread over magnitudes, integers over their range."""
    if dtype in (np.float32, np.float64):
        return (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, size=shape)).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


# (name, numpy dtype, shape): every dtype, ranks 0-4
PLAIN = [("f32_r0", np.float32, ()), ("f32_r4", np.float32, (2, 1, 2, 3)), ("f64_r1", np.float64, (5,)),
         ("f64_r3", np.float64, (2, 2, 2)), ("i32_r2", np.int32, (2, 3)), ("i32_r0", np.int32, ()),
         ("i64_r3", np.int64, (2, 1, 3)), ("i64_r1", np.int64, (4,)), ("bool_r1", np.bool_, (5,)),
         ("bool_r0", np.bool_, ())]


def write_tf2(prefix):
    model = tf.Module()
    for name, dtype, shape in PLAIN:
        setattr(model, name, tf.Variable(values(dtype, shape)))
    model.dense = tf.keras.layers.Dense(3)
    x = tf.constant(values(np.float32, (4, 2)))
    model.dense(x)
    opt = tf.keras.optimizers.Adam(0.01)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(model.dense(x)))
    variables = model.dense.trainable_variables
    opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return tf.train.Checkpoint(model=model, optimizer=opt).write(prefix)


def write_tf1(prefix):
    with tf.Graph().as_default():
        made = {name: tf.compat.v1.get_variable(name, initializer=values(dtype, shape))
                for name, dtype, shape in PLAIN}
        kernel = tf.compat.v1.get_variable("dense/kernel", initializer=values(np.float32, (2, 3)))
        bias = tf.compat.v1.get_variable("dense/bias", initializer=values(np.float32, (3,)))
        step = tf.compat.v1.train.get_or_create_global_step()
        x = tf.constant(values(np.float32, (4, 2)))
        loss = tf.reduce_sum(tf.square(tf.matmul(x, kernel) + bias)) + tf.cast(tf.reduce_sum(made["f64_r1"] ** 2),
                                                                                 tf.float32)
        train = tf.compat.v1.train.AdamOptimizer(0.01).minimize(loss, global_step=step)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train)
            return tf.compat.v1.train.Saver().save(sess, prefix, write_meta_graph=False, write_state=False)


def c_literal(ctype, v):
    if ctype in ("float", "double"):
        return float(v).hex()
    if ctype == "int64_t":
        return "INT64_MIN" if int(v) == -2**63 else "INT64_C(%d)" % int(v)
    return str(int(v))


def emit_set(set_name, prefix, lines):
    reader = tf.train.load_checkpoint(prefix)
    dtypes = reader.get_variable_to_dtype_map()
    keys = sorted(k for k in dtypes if dtypes[k] in NB_DTYPES)
    for i, key in enumerate(keys):
        ctype = NB_DTYPES[dtypes[key]][1]
        flat = np.asarray(reader.get_tensor(key)).ravel()
        body = ", ".join(c_literal(ctype, v) for v in flat) or "0"
        lines.append("static const %s ckpt_%s_%d[] = {%s};" % (ctype, set_name, i, body))
    lines.append("static const ckpt_golden ckpt_%s[] = {" % set_name)
    for i, key in enumerate(keys):
        shape = reader.get_variable_to_shape_map()[key]
        dims = ", ".join(str(d) for d in shape) or "0"
        lines.append('    {"%s", %s, %d, {%s}, ckpt_%s_%d},' % (key, NB_DTYPES[dtypes[key]][0], len(shape), dims,
                                                            set_name, i))
    lines.append("};")
    lines.append('#define CKPT_%s_PREFIX "%s"' % (set_name.upper(), os.path.basename(prefix)))


def make_golden():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.startswith(("tf1", "tf2")):
            os.remove(os.path.join(OUT, f))
    tf2 = write_tf2(os.path.join(OUT, "tf2"))
    tf1 = write_tf1(os.path.join(OUT, "tf1"))
    lines = ["/* Generated by tests/golden/make_tf_checkpoints.py with TensorFlow %s. */" % tf.__version__,
             "#ifndef NB_CKPT_GOLDEN_H", "#define NB_CKPT_GOLDEN_H", "",
             "typedef struct ckpt_golden {", "  const char *key;", "  nb_dtype dtype;", "  int rank;",
             "  int64_t shape[4];", "  const void *values;", "} ckpt_golden;", ""]
    emit_set("tf2", tf2, lines)
    emit_set("tf1", tf1, lines)
    lines += ["", "#endif", ""]
    with open(os.path.join(HERE, "ckpt_golden.h"), "w") as f:
        f.write("\n".join(lines))


def check_nabla(binary):
    prefix = os.path.join(OUT, "nabla")
    subprocess.run([binary, "write-golden", prefix, ""], check=True)
    theirs, ours = tf.train.load_checkpoint(os.path.join(OUT, "tf1")), tf.train.load_checkpoint(prefix)
    want = {k: d for k, d in theirs.get_variable_to_dtype_map().items() if d in NB_DTYPES}
    got = ours.get_variable_to_dtype_map()
    report = ["# tf.train.load_checkpoint (TensorFlow %s) on nabla's tests/golden/ckpt/nabla" % tf.__version__]
    ok = sorted(got) == sorted(want)
    report.append("keys: %s" % ("same as tf1" if ok else "DIFFER: %s vs %s" % (sorted(got), sorted(want))))
    for key in sorted(want):
        a, b = np.asarray(theirs.get_tensor(key)), np.asarray(ours.get_tensor(key)) if key in got else None
        same = b is not None and got[key] == want[key] and a.shape == b.shape and a.tobytes() == b.tobytes()
        ok &= same
        report.append("%s %s %s: %s" % (key, want[key].name, list(a.shape), "equal" if same else "DIFFERENT"))
    report.append("result: %s" % ("all equal" if ok else "MISMATCH"))
    with open(os.path.join(OUT, "nabla_read_by_tf.txt"), "w") as f:
        f.write("\n".join(report) + "\n")
    print("\n".join(report))
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check-nabla":
        sys.exit(check_nabla(sys.argv[2]))
    make_golden()
