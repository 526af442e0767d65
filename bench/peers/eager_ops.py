"""Peer of bench/eager_ops.c: eager elementwise ops in PyTorch, TensorFlow or JAX.

  name=eager_<op>          add, mul, relu, exp, tanh, sigmoid on 1M-element float32
                           tensors (values in [-2, 2)): GB/s of memory traffic (inputs read
                           + output written) and us_per_op, per thread count
  name=eager_add_bcast_row a [1024,1024] + [1024] row broadcast, the same figures
  name=eager_overhead      ns per call of add and tanh on 1x8 tensors (1 thread only)
  name=eager_chain         x = tanh(x * a + b) on 1x8 for --chain-steps steps (3 ops a
                           step): ns_per_op, and the resident set at the start, at 1% of
                           the steps and at the end (it must stay flat)

Each figure is the median of 7 passes of at least 0.2 s (as bench_per_call). Every call
makes a new output tensor, as nabla's eager ops do. JAX dispatches asynchronously, so each
JAX call waits for its result (block_until_ready): nabla's ops return finished tensors.
Usage: eager_ops.py --impl torch|tf|jax [--threads 1,2] [--chain-steps N] [--quick]
"""
import numpy as np

import benchutil as bu

N = 1 << 20


def ops_of(peer):
    """name -> (f(a, b), inputs read) in the peer's own eager API, each call synchronous."""
    if peer.impl == "torch":
        t = peer.fw
        return {"add": (t.add, 2), "mul": (t.mul, 2), "relu": (lambda a, b: t.relu(a), 1),
                "exp": (lambda a, b: t.exp(a), 1), "tanh": (lambda a, b: t.tanh(a), 1),
                "sigmoid": (lambda a, b: t.sigmoid(a), 1)}
    if peer.impl == "tf":
        tf = peer.fw
        return {"add": (tf.add, 2), "mul": (tf.multiply, 2), "relu": (lambda a, b: tf.nn.relu(a), 1),
                "exp": (lambda a, b: tf.exp(a), 1), "tanh": (lambda a, b: tf.tanh(a), 1),
                "sigmoid": (lambda a, b: tf.sigmoid(a), 1)}
    import jax
    jnp = jax.numpy
    return {"add": (lambda a, b: jnp.add(a, b).block_until_ready(), 2),
            "mul": (lambda a, b: jnp.multiply(a, b).block_until_ready(), 2),
            "relu": (lambda a, b: jax.nn.relu(a).block_until_ready(), 1),
            "exp": (lambda a, b: jnp.exp(a).block_until_ready(), 1),
            "tanh": (lambda a, b: jnp.tanh(a).block_until_ready(), 1),
            "sigmoid": (lambda a, b: jax.nn.sigmoid(a).block_until_ready(), 1)}


def tensor_of(peer, array):
    if peer.impl == "torch":
        return peer.fw.from_numpy(array)
    if peer.impl == "tf":
        return peer.fw.constant(array)
    return peer.fw.numpy.asarray(array)


def random_tensor(peer, shape):
    return tensor_of(peer, bu.uniform(np.random.default_rng(1), shape, -2.0, 2.0))


def throughput(peer, ops, runs, min_seconds):
    """GB/s and us per op of each elementwise op on N elements, and of a row broadcast."""
    a, b = random_tensor(peer, (N,)), random_tensor(peer, (N,))
    for name, (op, nin) in ops.items():
        s = bu.per_call(lambda: op(a, b), runs, min_seconds)
        bu.line(f"eager_{name}", peer.impl, dtype="f32", n=N, threads=peer.threads,
                gbps=N * 4.0 * (nin + 1) / s / 1e9, us_per_op=s * 1e6)
    m, row = random_tensor(peer, (1024, 1024)), random_tensor(peer, (1024,))
    add = ops["add"][0]
    s = bu.per_call(lambda: add(m, row), runs, min_seconds)
    bu.line("eager_add_bcast_row", peer.impl, dtype="f32", n=N, threads=peer.threads,
            gbps=N * 8.0 / s / 1e9, us_per_op=s * 1e6)


def overhead(peer, ops, runs, min_seconds):
    """ns per call of add and tanh on 1x8: the framework's per-op cost."""
    a, b = random_tensor(peer, (1, 8)), random_tensor(peer, (1, 8))
    for label, key in (("AddV2", "add"), ("Tanh", "tanh")):
        op = ops[key][0]
        s = bu.per_call(lambda: op(a, b), runs, min_seconds)
        bu.line("eager_overhead", peer.impl, op=label, shape="1x8", threads=1, ns_per_op=s * 1e9)


def chain(peer, ops, steps):
    """x = tanh(x * a + b) for `steps` steps on 1x8, each step's x replacing the last."""
    a, b = random_tensor(peer, (1, 8)), random_tensor(peer, (1, 8))
    add, mul, tanh = ops["add"][0], ops["mul"][0], ops["tanh"][0]
    x, rss_start, rss_mid = a, bu.rss_kib(), 0
    t0 = bu.now()
    for i in range(steps):
        x = tanh(add(mul(x, a), b), None)
        if i == steps // 100:
            rss_mid = bu.rss_kib()
    per_op = (bu.now() - t0) / steps / 3
    bu.line("eager_chain", peer.impl, shape="1x8", steps=steps, threads=1, ns_per_op=per_op * 1e9,
            rss_kib_start=rss_start, rss_kib_at_1pct=rss_mid, rss_kib_end=bu.rss_kib())


def main():
    p = bu.parser(__doc__)
    p.add_argument("--chain-steps", type=int, default=1000000, help="steps of the 1x8 chain (default %(default)s)")
    args, peer = bu.start(p)
    if not peer:
        return
    runs, min_seconds = (3, 0.02) if args.quick else (7, 0.2)
    ops = ops_of(peer)
    throughput(peer, ops, runs, min_seconds)
    if peer.threads == 1:
        overhead(peer, ops, runs, min_seconds)
        chain(peer, ops, 10000 if args.quick else args.chain_steps)


if __name__ == "__main__":
    main()
