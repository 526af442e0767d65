"""TensorFlow runs nabla's exported graphs (issue 16, GraphDef export verified against TF).

Reads what write_graphdef_export wrote (manifest.txt, NAME.pb and .npy files), imports
each graph with tf.compat.v1.import_graph_def, initializes its VarHandleOps from nabla's
initial values, runs the fetches with nabla's feeds (and the model's update, then reads
the variables), and compares with nabla's results. Writes tf_results.txt beside them:
per fetched tensor the largest absolute and relative error and PASS or FAIL. Run by hand
with TensorFlow installed:

    build/tests/write_graphdef_export tests/golden/graphdef_export
    python tests/golden/tf_runs_nabla.py tests/golden/graphdef_export
"""
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

# float32 results of sums of at most a few hundred products: TF and nabla may order them
# differently, each order within n * eps of the exact sum relative to the terms' size.
TERMS = 256
EPS32 = np.finfo(np.float32).eps


def read_manifest(path):
    models = []
    for line in path.read_text().splitlines():
        kind, *rest = line.split()
        if kind == "model":
            models.append({"name": rest[0], "pb": rest[1], "feed": [], "fetch": [], "init": [], "after": [],
                           "update": None})
        elif kind == "update":
            models[-1]["update"] = rest[0]
        else:
            models[-1][kind].append(tuple(rest))
    return models


def compare(name, got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return f"{name} shape {got.shape} != {want.shape} FAIL", False
    err = np.abs(got - want)
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    max_abs = float(err.max()) if err.size else 0.0
    max_rel = float((err / np.maximum(np.abs(want), 1e-30)).max()) if err.size else 0.0
    ok = max_abs <= TERMS * EPS32 * scale
    return f"{name} max_abs={max_abs:.3g} max_rel={max_rel:.3g} {'PASS' if ok else 'FAIL'}", ok


def run_model(d, m):
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString((d / m["pb"]).read_bytes())
    lines, all_ok = [], True
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(gd, name="")
        handles = {n.name: n for n in gd.node if n.op == "VarHandleOp"}
        assigns = [tf.raw_ops.AssignVariableOp(resource=g.get_tensor_by_name(v + ":0"), value=np.load(d / f))
                   for v, f in m["init"] if v in handles]
        reads = {v: tf.raw_ops.ReadVariableOp(resource=g.get_tensor_by_name(v + ":0"),
                                              dtype=handles[v].attr["dtype"].type) for v, _ in m["after"]}
    with tf.compat.v1.Session(graph=g) as s:
        s.run(assigns)
        feeds = {g.get_tensor_by_name(t): np.load(d / f) for t, f in m["feed"]}
        got = s.run([g.get_tensor_by_name(t) for t, _ in m["fetch"]], feeds)
        for (t, f), v in zip(m["fetch"], got):
            line, ok = compare(f"{m['name']} {t}", v, np.load(d / f))
            lines.append(line)
            all_ok &= ok
        if m["update"]:
            s.run(g.get_operation_by_name(m["update"]), feeds)
            for v, f in m["after"]:
                line, ok = compare(f"{m['name']} {v} after {m['update']}", s.run(reads[v]), np.load(d / f))
                lines.append(line)
                all_ok &= ok
    return lines, all_ok


def main():
    d = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "graphdef_export")
    out, ok = [f"# TensorFlow {tf.__version__} ran nabla's GraphDef exports (tests/golden/tf_runs_nabla.py)"], True
    for m in read_manifest(d / "manifest.txt"):
        try:
            lines, m_ok = run_model(d, m)
        except Exception as e:  # noqa: BLE001  (a failed import or run is a result too)
            lines, m_ok = [f"{m['name']} ERROR {type(e).__name__}: {str(e).splitlines()[0]} FAIL"], False
        out += lines
        ok &= m_ok
    (d / "tf_results.txt").write_text("\n".join(out) + "\n")
    print("\n".join(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
