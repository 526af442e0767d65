"""Peer of bench/formats.c: TensorFlow's as_graph_def of the same graph of 10^5 nodes (a
placeholder x [16] and a chain of 99997 ops cycling Mul by a Const, AddV2 of a second
Const, and Tanh), and import_graph_def of it, in µs per node, median of 5 runs after a
warm-up:
  name=graphdef_export impl=tf nodes=100000 bytes=... threads=1 runs=5 ms_median=... us_per_node=...
  name=graphdef_import impl=tf nodes=100000 source=tf|nabla threads=1 runs=5 ms_median=... us_per_node=...
as_graph_def serializes the graph's C++ GraphDef into the Python proto (what a Python user
gets); the import line imports TF's own GraphDef, and with --graphdef FILE (bench/formats
writes one: `formats FILE`) nabla's export of the graph too. The export and import are
serial: threads do not apply. PyTorch and JAX have no GraphDef.
Usage: formats.py --impl tf [--graphdef FILE] [--quick]
"""
import benchutil as bu

NODES = 100000
RUNS = 5


def chain_graph(tf, nodes):
    g = tf.Graph()
    with g.as_default():
        h = tf.compat.v1.placeholder(tf.float32, [16], name="x")
        scale, shift = tf.constant(0.5), tf.constant(0.25)
        for i in range(nodes - 3):
            h = h * scale if i % 3 == 0 else h + shift if i % 3 == 1 else tf.tanh(h)
    return g


def time_import(tf, gd, runs):
    def run():
        with tf.Graph().as_default():
            tf.compat.v1.import_graph_def(gd, name="")
    return bu.median_of(run, runs)


def main():
    p = bu.parser(__doc__)
    p.set_defaults(threads="1")
    p.add_argument("--graphdef", help="nabla's export of the same graph (bench/formats FILE)")
    none = "no GraphDef (TensorFlow's graph format)"
    args, peer = bu.start(p, {"torch": none, "jax": none})
    if not peer:
        return
    tf = peer.fw
    runs, nodes = (2, NODES // 10) if args.quick else (RUNS, NODES)
    g = chain_graph(tf, nodes)
    gd = g.as_graph_def()
    seconds = bu.median_of(g.as_graph_def, runs)
    bu.line("graphdef_export", "tf", nodes=len(gd.node), bytes=gd.ByteSize(), threads=1, runs=runs,
            ms_median=seconds * 1e3, us_per_node=seconds * 1e6 / len(gd.node))
    sources = [("tf", gd)]
    if args.graphdef:
        nabla_gd = tf.compat.v1.GraphDef()
        with open(args.graphdef, "rb") as f:
            nabla_gd.ParseFromString(f.read())
        sources.append(("nabla", nabla_gd))
    for source, graph_def in sources:
        seconds = time_import(tf, graph_def, runs)
        bu.line("graphdef_import", "tf", nodes=len(graph_def.node), source=source, threads=1, runs=runs,
                ms_median=seconds * 1e3, us_per_node=seconds * 1e6 / len(graph_def.node))


if __name__ == "__main__":
    main()
