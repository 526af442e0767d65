"""Peer of bench/eager_chain.c: eager autodiff overhead in PyTorch, TensorFlow or JAX.

The chain x = tanh(x * w + b), 10^4 steps (3 ops a step) on 1xW float32 (W = 8, 1024),
x0 ~ U(-1, 1), w ~ U(0.5, 1), b ~ U(-0.1, 0.1), gradients of sum(x) w.r.t. w and b; 1
thread, median of 7 runs after a warm-up run, us_per_op = run time / steps / 3:
  name=eager_chain_fwd_notape  the forward, nothing recorded (torch.no_grad; TF with no
                               tape; JAX op by op)
  name=eager_chain_fwd_record  the forward plus its sum, recorded: torch with w, b
                               requiring grad; TF under a GradientTape watching w, b; JAX
                               inside jax.vjp (its linearization is JAX's recording)
  name=eager_chain_bwd         torch.autograd.grad, tape.gradient, or the vjp function
  name=eager_chain_rss         resident set before, after the warm-up and after the runs,
                               and the gradients' largest error against a float64 reverse
                               pass (max_rel_err)
  name=eager_jacobian          d y / d x of y = 10 steps on 1x64 of the chain and of an MLP
                               tanh(x @ W + b) (W 64x64), the forward recorded once (as
                               nabla's persistent tape): path=vectorized is one backward
                               pass batched over the 64 one-hot seeds (torch
                               is_grads_batched, TF tape.jacobian with pfor, JAX vmap of
                               the vjp function), path=loop is 64 backward passes (TF
                               experimental_use_pfor=False); us, median of 7. TF's
                               tape.jacobian traces a tf.function at every eager call.
                               Compiled, forward included, traced beforehand: TF
                               path=function (tape.jacobian in a tf.function), JAX
                               path=jit (jax.jit(jax.jacrev(f)))
  name=eager_train_loop        per step: record y = sum(tanh(x * w + b)) on 1x8, take dw,
                               w = w - 0.001 dw; us_per_step and the resident set at the
                               start, at 1% of the steps and at the end
JAX dispatches asynchronously: each timed piece waits for its result
(block_until_ready), since nabla's eager ops return finished tensors.
Usage: eager_chain.py --impl torch|tf|jax [--train-steps N] [--quick]
"""
import numpy as np

import benchutil as bu

STEPS, JAC_WIDTH, JAC_STEPS, LR = 10000, 64, 10, 1e-3


class TorchEager:
    """PyTorch: leaves requiring grad record the forward; torch.autograd.grad runs it back."""

    def __init__(self, torch):
        self.t = torch
        self.tanh, self.sum = torch.tanh, torch.sum

    def tensor(self, a):
        return self.t.from_numpy(a)

    def notape(self, f, *args):
        with self.t.no_grad():
            return f(*args)

    def record(self, loss_of, params, persistent=False):
        """Runs loss_of(*params) recording what the gradient w.r.t. params needs."""
        leaves = [p.detach().requires_grad_() for p in params]
        return loss_of(*leaves), leaves, persistent

    def gradient(self, recording, seed=None):
        loss, leaves, persistent = recording
        return self.t.autograd.grad(loss, leaves, grad_outputs=seed, retain_graph=persistent)

    def jacobian_paths(self, recording, width):
        y, (x,), _ = recording
        eye = self.t.eye(width).reshape(width, 1, width)
        vectorized = lambda: self.t.autograd.grad(y, x, eye, retain_graph=True, is_grads_batched=True)[0]
        loop = lambda: self.t.stack([self.gradient(recording, eye[i])[0] for i in range(width)])
        return {"vectorized": vectorized, "loop": loop}

    def compiled_jacobians(self, f, x):
        return {}

    def numpy(self, t):
        return t.detach().numpy()

    def sub(self, w, dw):
        return (w - LR * dw).detach()


class TFEager:
    """TensorFlow: a GradientTape watching the sources records the forward."""

    def __init__(self, tf):
        self.tf = tf
        self.tanh, self.sum = tf.tanh, tf.reduce_sum

    def tensor(self, a):
        return self.tf.constant(a)

    def notape(self, f, *args):
        return f(*args)

    def record(self, loss_of, params, persistent=False):
        tape = self.tf.GradientTape(persistent=persistent, watch_accessed_variables=False)
        with tape:
            for p in params:
                tape.watch(p)
            loss = loss_of(*params)
        return loss, params, tape

    def gradient(self, recording):
        loss, params, tape = recording
        return tape.gradient(loss, params)

    def jacobian_paths(self, recording, width):
        y, (x,), tape = recording
        return {"vectorized": lambda: tape.jacobian(y, x),
                "loop": lambda: tape.jacobian(y, x, experimental_use_pfor=False)}

    def compiled_jacobians(self, f, x):
        """The forward and tape.jacobian in a tf.function, traced before the timing."""
        tf = self.tf

        @tf.function
        def jacobian(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = f(x)
            return tape.jacobian(y, x)
        return {"function": lambda: jacobian(x)}

    def numpy(self, t):
        return t.numpy()

    def sub(self, w, dw):
        return w - LR * dw


class JaxEager:
    """JAX: jax.vjp records (linearizes) the forward op by op; its vjp function runs it back."""

    def __init__(self, jax):
        self.jax = jax
        self.tanh, self.sum = jax.numpy.tanh, jax.numpy.sum

    def tensor(self, a):
        return self.jax.numpy.asarray(a)

    def notape(self, f, *args):
        return self.jax.block_until_ready(f(*args))

    def record(self, loss_of, params, persistent=False):
        """jax.vjp: the forward and its linearization (a vjp function may be called again)."""
        loss, vjp = self.jax.vjp(loss_of, *params)
        return self.jax.block_until_ready(loss), vjp

    def gradient(self, recording):
        loss, vjp = recording
        return self.jax.block_until_ready(vjp(self.jax.numpy.ones_like(loss)))

    def jacobian_paths(self, recording, width):
        jnp = self.jax.numpy
        _, vjp = recording
        eye = jnp.eye(width, dtype=jnp.float32).reshape(width, 1, width)
        vectorized = lambda: self.jax.block_until_ready(self.jax.vmap(vjp)(eye)[0])
        loop = lambda: self.jax.block_until_ready(jnp.stack([vjp(eye[i])[0] for i in range(width)]))
        return {"vectorized": vectorized, "loop": loop}

    def compiled_jacobians(self, f, x):
        """jax.jacrev (vmap of the vjp) of the forward under jax.jit, compiled before the timing."""
        jitted = self.jax.jit(self.jax.jacrev(f))
        return {"jit": lambda: self.jax.block_until_ready(jitted(x))}

    def numpy(self, t):
        return np.asarray(t)

    def sub(self, w, dw):
        return self.jax.block_until_ready(w - LR * dw)


def make_eager(peer):
    return {"torch": TorchEager, "tf": TFEager, "jax": JaxEager}[peer.impl](peer.fw)


def chain_forward(e, x, w, b, steps):
    for _ in range(steps):
        x = e.tanh(x * w + b)
    return x


def reference_gradients(x0, w, b, steps):
    """dL/dw, dL/db of L = sum(x_steps) in float64: y_i = tanh(y_{i-1} w + b),
    dy_{i-1} = dy_i (1 - y_i^2) w."""
    x0, w, b = (a.astype(np.float64) for a in (x0, w, b))
    ys = [x0]
    for _ in range(steps):
        ys.append(np.tanh(ys[-1] * w + b))
    dy, gw, gb = np.ones_like(x0), np.zeros_like(x0), np.zeros_like(x0)
    for i in range(steps, 0, -1):
        dz = dy * (1 - ys[i] ** 2)
        gw, gb, dy = gw + dz * ys[i - 1], gb + dz, dz * w
    return gw, gb


def max_rel_err(e, grads, reference):
    err = max(np.max(np.abs(e.numpy(g) - r)) for g, r in zip(grads, reference))
    return err / max(max(np.max(np.abs(r)) for r in reference), 1e-30)


def bench_width(peer, e, width, runs):
    rng = np.random.default_rng(1)
    host = [bu.uniform(rng, (1, width), lo, hi) for lo, hi in ((-1, 1), (0.5, 1), (-0.1, 0.1))]
    x0, w, b = (e.tensor(a) for a in host)
    loss_of = lambda w, b: e.sum(chain_forward(e, x0, w, b, STEPS))
    times = {"notape": [], "record": [], "bwd": []}
    rss_start = bu.rss_kib()
    for r in range(runs + 1):  # run 0 warms up
        t0 = bu.now()
        e.notape(chain_forward, e, x0, w, b, STEPS)
        t1 = bu.now()
        recording = e.record(loss_of, [w, b])
        t2 = bu.now()
        grads = e.gradient(recording)
        t3 = bu.now()
        del recording
        if r == 0:
            rss_warm = bu.rss_kib()
            continue
        for key, dt in (("notape", t1 - t0), ("record", t2 - t1), ("bwd", t3 - t2)):
            times[key].append(dt)
    times["record_plus_bwd"] = [a + b for a, b in zip(times["record"], times["bwd"])]
    for key, name in (("notape", "fwd_notape"), ("record", "fwd_record"), ("bwd", "bwd"),
                      ("record_plus_bwd", "record_plus_bwd")):
        bu.line(f"eager_chain_{name}", peer.impl, width=width, steps=STEPS, threads=1, runs=runs,
                us_per_op=bu.median(times[key]) / STEPS / 3 * 1e6)
    err = max_rel_err(e, grads, reference_gradients(*host, STEPS))
    bu.line("eager_chain_rss", peer.impl, width=width, threads=1, rss_kib_start=rss_start,
            rss_kib_after_warmup=rss_warm, **{f"rss_kib_after_{runs}_runs": bu.rss_kib()}, max_rel_err=f"{err:.2e}")


def jacobian_function(e, mlp, w, b):
    def f(x):
        for _ in range(JAC_STEPS):
            x = e.tanh((x @ w if mlp else x * w) + b)
        return x
    return f


def bench_jacobian(peer, e, mlp, runs):
    rng = np.random.default_rng(2)
    x, b = (e.tensor(bu.uniform(rng, (1, JAC_WIDTH), -0.5, 0.5)) for _ in range(2))
    w = e.tensor(bu.uniform(rng, (JAC_WIDTH, JAC_WIDTH), -0.25, 0.25) if mlp else
                 bu.uniform(rng, (1, JAC_WIDTH), -0.5, 0.5))
    f = jacobian_function(e, mlp, w, b)
    recording = e.record(f, [x], persistent=True)
    paths = {**e.jacobian_paths(recording, JAC_WIDTH), **e.compiled_jacobians(f, x)}
    results = {path: e.numpy(fn()).reshape(JAC_WIDTH, JAC_WIDTH) for path, fn in paths.items()}
    diff = max(np.max(np.abs(r - results["loop"])) for r in results.values())
    for path, fn in paths.items():
        us = bu.median_of(fn, runs) * 1e6
        bu.line("eager_jacobian", peer.impl, model="mlp" if mlp else "chain", shape=f"1x{JAC_WIDTH}",
                steps=JAC_STEPS, threads=1, runs=runs, path=path, us=us, max_abs_diff=f"{diff:.2e}")


def train_loop(peer, e, steps):
    rng = np.random.default_rng(3)
    x, w = (e.tensor(bu.uniform(rng, (1, 8), -0.5, 0.5)) for _ in range(2))
    b = e.tensor(np.zeros((1, 8), np.float32))
    loss_of = lambda w: e.sum(e.tanh(x * w + b))
    rss_start, rss_early = bu.rss_kib(), 0
    t0 = bu.now()
    for i in range(steps):
        (dw,) = e.gradient(e.record(loss_of, [w]))
        w = e.sub(w, dw)
        if i == steps // 100:
            rss_early = bu.rss_kib()
    us = (bu.now() - t0) / steps * 1e6
    bu.line("eager_train_loop", peer.impl, shape="1x8", steps=steps, threads=1, us_per_step=us,
            rss_kib_start=rss_start, rss_kib_at_1pct=rss_early, rss_kib_end=bu.rss_kib())


def main():
    p = bu.parser(__doc__)
    p.set_defaults(threads="1")
    p.add_argument("--train-steps", type=int, default=100000,
                   help="steps of the training loop (default %(default)s; nabla's runs 10^6)")
    args, peer = bu.start(p)
    if not peer:
        return
    e = make_eager(peer)
    runs = 2 if args.quick else 7
    for width in (8, 1024):
        bench_width(peer, e, width, runs)
    for mlp in (False, True):
        bench_jacobian(peer, e, mlp, runs)
    train_loop(peer, e, 1000 if args.quick else args.train_steps)


if __name__ == "__main__":
    main()
