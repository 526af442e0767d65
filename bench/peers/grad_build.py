"""Peer of bench/grad_build.c: the cost of building a gradient, on the same graphs.

  chain         y = tanh(y * 0.5) on a [1,8] float32 input, n/2 steps (n ops), then Sum
  dag           n ops each reading one or two of the last 16 values (tanh, sin, mul or
                add, chosen by the same xorshift generator as grad_build.c: the very same
                graph), then Sum
  small_in_big  a 100-op chain differentiated inside a graph that also holds an n-op chain

TensorFlow (`--impl tf`): tf.compat.v1.gradients in a tf.Graph, as nb_gradients:
  name=grad_build graph=chain|dag n=N ns_per_fwd_op=...  (the gradient call only)
  forward_build_s: seconds to create the n forward ops (not in the figure)
  name=grad_small_in_big n=N piece=100 ns_per_piece_op=...
JAX (`--impl jax`) builds no graph until it traces a function; the analogue is the time
jax.grad adds to tracing (JVP, partial evaluation and transposition into a jaxpr):
  ns_per_fwd_op = (time of jax.make_jaxpr(jax.grad(f)) - time of jax.make_jaxpr(f)) / n
  forward_build_s = the time of jax.make_jaxpr(f), tracing the forward alone
  name=grad_compile ... compile_s: jax.jit(jax.grad(f)).lower(x).compile(), XLA's
  compilation of the traced gradient, for n <= --compile-max (it grows fast with n)
  There is no graph around a traced function, so no small_in_big line.
PyTorch records the backward graph while the forward runs (bench/peers/eager_chain.py
times that); it has no separate gradient construction, so `--impl torch` prints a note.
Median of 3 runs, 1 thread (graph building is serial).
Usage: grad_build.py --impl tf|jax [--sizes 10000,100000,1000000] [--compile-max N] [--quick]
"""
import collections

import benchutil as bu

WINDOW = 16
PIECE = 100
MASK64 = (1 << 64) - 1


class Ops:
    """The four forward ops, the final Sum and the chain's constant 0.5, in the peer's API."""

    def __init__(self, tanh, sin, mul, add, total, half):
        self.tanh, self.sin, self.mul, self.add, self.sum, self.half = tanh, sin, mul, add, total, half


def chain(ops, x, n):
    """n forward ops: n/2 steps of y = tanh(y * 0.5)."""
    y = x
    for _ in range(0, n, 2):
        y = ops.tanh(ops.mul(y, ops.half))
    return ops.sum(y)


def dag(ops, x, n):
    """n forward ops, each reading one or two of the last WINDOW values (xorshift64)."""
    ring, s = collections.deque([x], maxlen=WINDOW), 88172645463325252
    for _ in range(n):
        s ^= (s << 13) & MASK64
        s ^= s >> 7
        s ^= (s << 17) & MASK64
        w = len(ring)
        a, b = ring[-1 - s % w], ring[-1 - (s >> 20) % w]
        kind = (s >> 40) % 4
        ring.append(ops.tanh(a) if kind == 0 else ops.sin(a) if kind == 1 else
                    ops.mul(a, b) if kind == 2 else ops.add(a, b))
    return ops.sum(ring[-1])


BUILDERS = {"chain": chain, "dag": dag}


def tf_ops(tf):
    """TensorFlow's ops, the constant made once in the current graph (as grad_build.c)."""
    return Ops(tf.tanh, tf.sin, tf.multiply, tf.add, tf.reduce_sum, tf.constant(0.5))


def jax_ops(jax):
    jnp = jax.numpy
    return Ops(jnp.tanh, jnp.sin, jnp.multiply, jnp.add, jnp.sum, 0.5)


def tf_gradient_seconds(tf, build, n):
    """(seconds of tf.gradients, seconds to build the forward) on a fresh graph."""
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        t0 = bu.now()
        ops = tf_ops(tf)
        x = tf1.placeholder(tf.float32, [1, 8], name="x")
        loss = build(ops, x, n)
        t1 = bu.now()
        tf1.gradients(loss, [x])
        return bu.now() - t1, t1 - t0


def tf_small_in_big_seconds(tf, n):
    """Seconds of tf.gradients of a PIECE-op chain in a graph that also holds n ops."""
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        ops = tf_ops(tf)
        chain(ops, tf1.placeholder(tf.float32, [1, 8], name="z"), n)
        x = tf1.placeholder(tf.float32, [1, 8], name="x")
        loss = chain(ops, x, PIECE)
        t0 = bu.now()
        tf1.gradients(loss, [x])
        return bu.now() - t0


def run_tf(peer, sizes, runs):
    tf = peer.fw
    for n in sizes:
        for graph, build in BUILDERS.items():
            grads, forwards = zip(*(tf_gradient_seconds(tf, build, n) for _ in range(runs)))
            bu.line("grad_build", peer.impl, graph=graph, n=n, threads=1, ns_per_fwd_op=bu.median(grads) * 1e9 / n,
                    forward_build_s=bu.median(forwards))
        piece = [tf_small_in_big_seconds(tf, n) for _ in range(runs)]
        bu.line("grad_small_in_big", peer.impl, n=n, piece=PIECE, threads=1,
                ns_per_piece_op=bu.median(piece) * 1e9 / PIECE)


def jax_trace_seconds(jax, build, n):
    """(seconds to trace jax.grad(f), seconds to trace f) for f = build's loss of x."""
    ops, x = jax_ops(jax), jax.numpy.zeros((1, 8), jax.numpy.float32)

    def f(x):
        return build(ops, x, n)

    t0 = bu.now()
    jax.make_jaxpr(f)(x)
    t1 = bu.now()
    jax.make_jaxpr(jax.grad(f))(x)
    return bu.now() - t1, t1 - t0


def jax_compile_seconds(jax, build, n):
    """Seconds of XLA's compilation of jax.grad(f), traced and lowered beforehand."""
    ops, x = jax_ops(jax), jax.numpy.zeros((1, 8), jax.numpy.float32)
    lowered = jax.jit(jax.grad(lambda x: build(ops, x, n))).lower(x)
    t0 = bu.now()
    lowered.compile()
    return bu.now() - t0


def run_jax(peer, sizes, runs, compile_max):
    jax = peer.fw
    for n in sizes:
        for graph, build in BUILDERS.items():
            grads, forwards = zip(*(jax_trace_seconds(jax, build, n) for _ in range(runs)))
            grad_s, forward_s = bu.median(grads), bu.median(forwards)
            bu.line("grad_build", peer.impl, graph=graph, n=n, threads=1,
                    ns_per_fwd_op=(grad_s - forward_s) * 1e9 / n, forward_build_s=forward_s, grad_trace_s=grad_s)
            if n <= compile_max:
                compile_s = bu.median([jax_compile_seconds(jax, build, n) for _ in range(runs)])
                bu.line("grad_compile", peer.impl, graph=graph, n=n, threads=1, compile_s=compile_s)


def main():
    p = bu.parser(__doc__)
    p.set_defaults(threads="1")
    p.add_argument("--sizes", help="graph sizes n (default 10000,100000,1000000; 200 with --quick)")
    p.add_argument("--compile-max", type=int, default=10000, help="JAX: compile only for n <= this (default %(default)s)")
    args, peer = bu.start(p, {"torch": "PyTorch builds its backward graph while recording the forward "
                                       "(see eager_chain.py); no gradient construction to time"})
    if not peer:
        return
    sizes = [int(s) for s in (args.sizes or ("200" if args.quick else "10000,100000,1000000")).split(",") if s]
    runs = 1 if args.quick else 3
    if peer.impl == "tf":
        run_tf(peer, sizes, runs)
    else:
        run_jax(peer, sizes, runs, args.compile_max)


if __name__ == "__main__":
    main()
