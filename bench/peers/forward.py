"""Peer of bench/forward.c: forward mode and checkpointed gradients, float32:
  jvp   MLP 784-512-512-10 (ReLU), batch 128, mean sparse softmax cross-entropy: the loss
        alone (fwd_ms) against the loss and its JVP along random tangents of every
        parameter (jvp_ms); ratio = jvp_ms / fwd_ms
  hvp   its gradient (grad_ms) against a Hessian-vector product, forward over reverse
        (jvp of grad, hvp_ms); ratio = hvp_ms / grad_ms
  ckpt  64 layers h = tanh(h W_i), width 1024, batch 64: the gradient of sum(h^2) with
        respect to the input (wrt=input) or to every W_i and the input (wrt=weights+input),
        plain and checkpointed in equal segments of ceil(64 / 12) = 6 layers (Chen et al.'s
        sqrt layout over the 130 ops; nabla's NB_CHECKPOINT_SQRT lays its segments out by
        memory, longest first); grad_ms (median of 3 after a warm-up), peak_mb
        (the peak resident set above the one before the first run) and over_fwd_mb (above
        the forward pass's own peak), each configuration in a child process
Lines as nabla's (name=forward_jvp|forward_hvp|forward_ckpt impl=... metric=value).
Paths: PyTorch  torch.func.jvp, torch.func.grad, jvp(grad) for the HVP, the forward
                under torch.no_grad; checkpointing torch.utils.checkpoint (non-reentrant)
       JAX      jax.jvp, jax.grad, jvp(grad), each in jax.jit (compiled before timing);
                checkpointing jax.checkpoint around each segment
       TF       tf.autodiff.ForwardAccumulator for the JVP, a GradientTape inside an
                accumulator for the HVP (forward over back), each in a tf.function
                (traced before timing); checkpointing tf.recompute_grad around each
                segment. TF's CPU allocator has no memory statistics
                (tf.config.experimental.get_memory_info is for GPUs), so its memory is
                the sampled resident set, as for the others
Usage: forward.py --impl torch|tf|jax [--workload mlp|ckpt|all] [--threads 1,2] [--quick]
  (mlp: jvp and hvp)
"""
import math
import subprocess
import sys

import numpy as np

import benchutil as bu

RUNS = 5
MLP_BATCH, DIMS = 128, (784, 512, 512, 10)
DEEP_LAYERS, DEEP_WIDTH, DEEP_BATCH, DEEP_RUNS = 64, 1024, 64, 3
SEGMENTS = math.ceil(math.sqrt(2 * DEEP_LAYERS + 2))


def mlp_host():
    """(params [w, b, ...], tangents of the same shapes, x, labels) as NumPy arrays."""
    rng = np.random.default_rng(1)
    params, tangents = [], []
    for a, b in zip(DIMS, DIMS[1:]):
        params += [bu.glorot_uniform(rng, (a, b)), np.zeros(b, np.float32)]
        tangents += [bu.uniform(rng, (a, b), -1, 1), bu.uniform(rng, (b,), -1, 1)]
    x = bu.uniform(rng, (MLP_BATCH, DIMS[0]), -0.5, 0.5)
    labels = (np.arange(MLP_BATCH) * 7 % 10).astype(np.int32)
    return params, tangents, x, labels


def deep_host():
    rng = np.random.default_rng(2)
    limit = math.sqrt(3.0 / DEEP_WIDTH)
    ws = [bu.uniform(rng, (DEEP_WIDTH, DEEP_WIDTH), -limit, limit) for _ in range(DEEP_LAYERS)]
    return ws, bu.uniform(rng, (DEEP_BATCH, DEEP_WIDTH), -1, 1)


def ratio_line(name, threads, a_key, a, b_key, b):
    bu.line(name, IMPL, model="mlp", batch=MLP_BATCH, threads=threads, **{a_key: 1e3 * a, b_key: 1e3 * b},
            ratio=b / a)


# ---- PyTorch ---------------------------------------------------------------------------------

def torch_mlp(peer, quick):
    torch, F = peer.fw, peer.fw.nn.functional
    params, tangents, x, labels = mlp_host()
    p = tuple(torch.from_numpy(a) for a in params)
    t = tuple(torch.from_numpy(a) for a in tangents)
    x, labels = torch.from_numpy(x), torch.from_numpy(labels).long()

    def loss(p):
        h = x
        for i in range(0, len(p), 2):
            h = torch.addmm(p[i + 1], h, p[i])
            if i + 2 < len(p):
                h = torch.relu(h)
        return F.cross_entropy(h, labels)

    def forward():
        with torch.no_grad():
            loss(p)

    grad = torch.func.grad(loss)
    runs, secs = (1, 0.05) if quick else (RUNS, 1.0)
    fwd = bu.per_call(forward, runs, secs)
    jvp = bu.per_call(lambda: torch.func.jvp(loss, (p,), (t,)), runs, secs)
    ratio_line("forward_jvp", peer.threads, "fwd_ms", fwd, "jvp_ms", jvp)
    g = bu.per_call(lambda: grad(p), runs, secs)
    hvp = bu.per_call(lambda: torch.func.jvp(grad, (p,), (t,)), runs, secs)
    ratio_line("forward_hvp", peer.threads, "grad_ms", g, "hvp_ms", hvp)


def torch_deep(peer, checkpointed, weights, layers):
    torch = peer.fw
    from torch.utils.checkpoint import checkpoint

    tiny = torch.ones(1, requires_grad=True)  # loads what checkpoint loads lazily, before the measurement
    checkpoint(torch.tanh, tiny, use_reentrant=False).sum().backward()
    ws, x = deep_host()
    ws = [torch.from_numpy(w).requires_grad_(weights) for w in ws[:layers]]
    x = torch.from_numpy(x).requires_grad_(True)
    per = math.ceil(len(ws) / SEGMENTS)

    def run(h, lo, hi):
        for w in ws[lo:hi]:
            h = torch.tanh(h @ w)
        return h

    def forward():
        with torch.no_grad():
            run(x, 0, len(ws))

    def gradient():
        h = x
        for lo in range(0, len(ws), per if checkpointed else len(ws)):
            hi = min(len(ws), lo + (per if checkpointed else len(ws)))
            h = checkpoint(run, h, lo, hi, use_reentrant=False) if checkpointed else run(h, lo, hi)
        wrt = [x] + (ws if weights else [])
        for g in torch.autograd.grad((h * h).sum(), wrt):
            g.sum()  # each gradient reduced, as nabla's bench does

    return forward, gradient


# ---- TensorFlow ------------------------------------------------------------------------------

def tf_loss(tf, x, labels):
    def loss(p):
        h = x
        for i in range(0, len(p), 2):
            h = tf.nn.bias_add(tf.matmul(h, p[i]), p[i + 1])
            if i + 2 < len(p):
                h = tf.nn.relu(h)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=h))

    return loss


def tf_mlp(peer, quick):
    tf = peer.fw
    params, tangents, x, labels = mlp_host()
    p, t = [tf.constant(a) for a in params], [tf.constant(a) for a in tangents]
    loss = tf_loss(tf, tf.constant(x), tf.constant(labels))

    def gradient(p):
        with tf.GradientTape() as tape:
            tape.watch(p)
            y = loss(p)
        return tape.gradient(y, p)

    @tf.function
    def jvp(p, t):
        with tf.autodiff.ForwardAccumulator(p, t) as acc:
            y = loss(p)
        return y, acc.jvp(y)

    @tf.function
    def hvp(p, t):
        with tf.autodiff.ForwardAccumulator(p, t) as acc:
            g = gradient(p)
        return acc.jvp(g)

    fwd_fn, grad_fn = tf.function(loss), tf.function(gradient)
    runs, secs = (1, 0.05) if quick else (RUNS, 1.0)

    def timed(fn, *args):
        fn(*args)  # traced before the timing
        return bu.per_call(lambda: fn(*args), runs, secs)

    ratio_line("forward_jvp", peer.threads, "fwd_ms", timed(fwd_fn, p), "jvp_ms", timed(jvp, p, t))
    ratio_line("forward_hvp", peer.threads, "grad_ms", timed(grad_fn, p), "hvp_ms", timed(hvp, p, t))


def tf_deep(peer, checkpointed, weights, layers):
    tf = peer.fw
    ws, x = deep_host()
    ws, x = [tf.constant(w) for w in ws[:layers]], tf.constant(x)
    per = math.ceil(len(ws) / SEGMENTS) if checkpointed else len(ws)

    def segment(h, *seg_ws):
        for w in seg_ws:
            h = tf.tanh(tf.matmul(h, w))
        return h

    block = tf.recompute_grad(segment) if checkpointed else segment

    def loss(ws, x):
        h = x
        for lo in range(0, len(ws), per):
            h = block(h, *ws[lo:lo + per])
        return tf.reduce_sum(h * h)

    @tf.function
    def gradient(ws, x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            if weights:  # watched weights would have their gradients made, then dropped
                tape.watch(ws)
            y = loss(ws, x)
        return [tf.reduce_sum(g) for g in tape.gradient(y, [x] + (ws if weights else []))]

    forward = tf.function(loss)
    forward.get_concrete_function(ws, x)  # traced here, not in the measured calls
    gradient.get_concrete_function(ws, x)
    return (lambda: forward(ws, x)), (lambda: gradient(ws, x))


# ---- JAX -------------------------------------------------------------------------------------

def jax_mlp(peer, quick):
    jax = peer.fw
    jnp = jax.numpy
    params, tangents, x, labels = mlp_host()
    p, t = [jnp.asarray(a) for a in params], [jnp.asarray(a) for a in tangents]
    x, labels = jnp.asarray(x), jnp.asarray(labels)

    def loss(p):
        h = x
        for i in range(0, len(p), 2):
            h = h @ p[i] + p[i + 1]
            if i + 2 < len(p):
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    grad = jax.grad(loss)
    fwd_fn = jax.jit(loss)
    jvp_fn = jax.jit(lambda p, t: jax.jvp(loss, (p,), (t,)))
    grad_fn = jax.jit(grad)
    hvp_fn = jax.jit(lambda p, t: jax.jvp(grad, (p,), (t,))[1])
    runs, secs = (1, 0.05) if quick else (RUNS, 1.0)

    def timed(fn, *args):
        jax.block_until_ready(fn(*args))  # compiled before the timing
        return bu.per_call(lambda: jax.block_until_ready(fn(*args)), runs, secs)

    ratio_line("forward_jvp", peer.threads, "fwd_ms", timed(fwd_fn, p), "jvp_ms", timed(jvp_fn, p, t))
    ratio_line("forward_hvp", peer.threads, "grad_ms", timed(grad_fn, p), "hvp_ms", timed(hvp_fn, p, t))


def jax_deep(peer, checkpointed, weights, layers):
    jax = peer.fw
    jnp = jax.numpy
    ws, x = deep_host()
    ws, x = [jnp.asarray(w) for w in ws[:layers]], jnp.asarray(x)
    per = math.ceil(len(ws) / SEGMENTS)

    def segment(h, seg_ws):
        for w in seg_ws:
            h = jnp.tanh(h @ w)
        return h

    def loss(ws, x):
        h = x
        for lo in range(0, len(ws), per if checkpointed else len(ws)):
            seg = ws[lo:lo + (per if checkpointed else len(ws))]
            h = jax.checkpoint(segment)(h, seg) if checkpointed else segment(h, seg)
        return jnp.sum(h * h)

    fwd = jax.jit(loss)
    grad = jax.jit(jax.grad(loss, argnums=(0, 1) if weights else 1))
    summed = jax.jit(lambda ws, x: jax.tree_util.tree_map(jnp.sum, grad(ws, x)))
    return (lambda: jax.block_until_ready(fwd(ws, x))), (lambda: jax.block_until_ready(summed(ws, x)))


# ---- the checkpointing configurations, each in a child process -------------------------------

def sampled_peak_kib(fn):
    """The largest resident set seen while fn() runs, polled every millisecond: ru_maxrss
    would also hold the start-up's spikes (PyTorch's first backward pass, JAX's compiler)."""
    import threading

    peak, done = [bu.rss_kib()], threading.Event()

    def poll():
        while not done.wait(0.001):
            peak[0] = max(peak[0], bu.rss_kib())

    sampler = threading.Thread(target=poll)
    sampler.start()
    try:
        fn()
    finally:
        done.set()
        sampler.join()
    return max(peak[0], bu.rss_kib())


def deep_child(peer, checkpointed, weights, quick):
    make = {"torch": torch_deep, "tf": tf_deep, "jax": jax_deep}[IMPL]
    forward, gradient = make(peer, checkpointed, weights, 8 if quick else DEEP_LAYERS)
    before = bu.rss_kib()
    fwd_peak = sampled_peak_kib(forward)
    peak = sampled_peak_kib(gradient)  # the first: caching allocators hide later runs' memory
    times = []
    for _ in range(1 if quick else DEEP_RUNS):
        t0 = bu.now()
        gradient()
        times.append(bu.now() - t0)
    bu.line("forward_ckpt", IMPL, layers=8 if quick else DEEP_LAYERS, width=DEEP_WIDTH, batch=DEEP_BATCH,
            wrt="weights+input" if weights else "input", checkpoint="sqrt" if checkpointed else "none",
            threads=peer.threads, grad_ms=1e3 * bu.median(times), peak_mb=(peak - before) / 1024.0,
            over_fwd_mb=(peak - fwd_peak) / 1024.0)


def main():
    global IMPL
    p = bu.parser(__doc__)
    p.add_argument("--workload", choices=("mlp", "ckpt", "all"), default="all")
    p.add_argument("--ckpt-config", default=None, help=argparse_hidden())
    args, peer = bu.start(p)
    if peer is None:
        return
    IMPL = args.impl
    if args.ckpt_config:
        checkpointed, weights = (v == "1" for v in args.ckpt_config.split(","))
        deep_child(peer, checkpointed, weights, args.quick)
        return
    if args.workload in ("ckpt", "all"):
        for weights in (False, True):
            for checkpointed in (False, True):
                cmd = [sys.executable, sys.argv[0], f"--impl={IMPL}", f"--threads={peer.threads}",
                       f"--ckpt-config={int(checkpointed)},{int(weights)}"] + (["--quick"] if args.quick else [])
                if subprocess.call(cmd):
                    sys.exit(1)
    if args.workload in ("mlp", "all"):
        {"torch": torch_mlp, "tf": tf_mlp, "jax": jax_mlp}[IMPL](peer, args.quick)


def argparse_hidden():
    import argparse
    return argparse.SUPPRESS


IMPL = None

if __name__ == "__main__":
    main()
