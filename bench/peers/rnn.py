"""Peer of bench/rnn.c: a tanh RNN, h_t = tanh(x_t W_ih + h_{t-1} W_hh + b), h_0 = 0,
hidden 256, input 64, 100 steps, batch 32, float32, loss = mean(h_T^2); one forward and
backward to W_ih, W_hh and b, median of 7 runs after a warm-up:
  name=rnn_<mode> impl=... hidden=256 input=64 seq=100 batch=32 threads=N ms_median=...
      max_abs_diff: the largest difference of its gradients from the first mode's
Modes:
  PyTorch  eager: a Python loop of ops, torch.autograd.grad; fused: torch.nn.RNN (its
           second bias held at zero), one op for the sequence on the Python side
  TF       eager: a Python loop under a GradientTape; graph: tf.while_loop in a
           tf.function, its gradient the while_v2 gradient loop (nabla's nb_while)
  JAX      eager: a Python loop, jax.grad op by op; jit: lax.scan under jax.jit(jax.grad)
           (XLA's while loop), compiled before the timing
Usage: rnn.py --impl torch|tf|jax [--threads 1,2] [--quick]
"""
import numpy as np

import benchutil as bu

HIDDEN, INPUT, SEQ, BATCH = 256, 64, 100, 32


def host_weights():
    """W_ih, W_hh, b, xs with nabla's scales."""
    rng = np.random.default_rng(1)
    return [bu.uniform(rng, (INPUT, HIDDEN), -0.125, 0.125), bu.uniform(rng, (HIDDEN, HIDDEN), -0.0625, 0.0625),
            bu.uniform(rng, (HIDDEN,), -0.0625, 0.0625), bu.uniform(rng, (SEQ, BATCH, INPUT), -1.0, 1.0)]


def torch_modes(torch, host):
    wih, whh, b, xs = (torch.from_numpy(a) for a in host)
    params = [p.requires_grad_() for p in (wih, whh, b)]

    def eager():
        h = torch.zeros(BATCH, HIDDEN)
        for t in range(SEQ):
            h = torch.tanh(xs[t] @ wih + h @ whh + b)
        return torch.autograd.grad(h.square().mean(), params)

    rnn = torch.nn.RNN(INPUT, HIDDEN, nonlinearity="tanh")
    with torch.no_grad():  # nn.RNN computes x W_ih^T + b_ih + h W_hh^T + b_hh
        rnn.weight_ih_l0.copy_(wih.T)
        rnn.weight_hh_l0.copy_(whh.T)
        rnn.bias_ih_l0.copy_(b)
        rnn.bias_hh_l0.zero_()
    fused_params = [rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0]

    def fused():
        _, h = rnn(xs)
        dwih, dwhh, db = torch.autograd.grad(h[0].square().mean(), fused_params)
        return dwih.T, dwhh.T, db
    return {"eager": eager, "fused": fused}


def tf_modes(tf, host):
    wih, whh, b, xs = (tf.constant(a) for a in host)
    params = [wih, whh, b]

    def step(t, h):
        return t + 1, tf.tanh(tf.matmul(tf.gather(xs, t), wih) + tf.matmul(h, whh) + b)

    def eager():
        with tf.GradientTape() as tape:
            tape.watch(params)
            h = tf.zeros([BATCH, HIDDEN])
            for t in range(SEQ):
                h = step(t, h)[1]
            loss = tf.reduce_mean(tf.square(h))
        return tape.gradient(loss, params)

    @tf.function
    def graph():
        with tf.GradientTape() as tape:
            tape.watch(params)
            _, h = tf.while_loop(lambda t, h: t < SEQ, step, (tf.constant(0), tf.zeros([BATCH, HIDDEN])))
            loss = tf.reduce_mean(tf.square(h))
        return tape.gradient(loss, params)
    return {"eager": eager, "graph": graph}


def jax_modes(jax, host):
    jnp = jax.numpy
    params, xs = [jnp.asarray(a) for a in host[:3]], jnp.asarray(host[3])

    def cell(p, h, x):
        wih, whh, b = p
        return jnp.tanh(x @ wih + h @ whh + b)

    def loop_loss(p):
        h = jnp.zeros((BATCH, HIDDEN), jnp.float32)
        for t in range(SEQ):
            h = cell(p, h, xs[t])
        return jnp.mean(jnp.square(h))

    def scan_loss(p):
        h, _ = jax.lax.scan(lambda h, x: (cell(p, h, x), None), jnp.zeros((BATCH, HIDDEN), jnp.float32), xs)
        return jnp.mean(jnp.square(h))

    grad_scan = jax.jit(jax.grad(scan_loss))
    return {"eager": lambda: jax.block_until_ready(jax.grad(loop_loss)(params)),
            "jit": lambda: jax.block_until_ready(grad_scan(params))}


def max_abs_diff(grads, reference):
    return max(float(np.max(np.abs(np.asarray(g) - np.asarray(r)))) for g, r in zip(grads, reference))


def main():
    args, peer = bu.start(bu.parser(__doc__))
    if not peer:
        return
    runs = 2 if args.quick else 7
    modes = {"torch": torch_modes, "tf": tf_modes, "jax": jax_modes}[peer.impl](peer.fw, host_weights())
    reference = None
    for mode, fn in modes.items():
        grads = fn()  # also the warm-up run
        reference = reference or grads
        ms = bu.median_of(fn, runs, warmup=0) * 1e3
        bu.line(f"rnn_{mode}", peer.impl, hidden=HIDDEN, input=INPUT, seq=SEQ, batch=BATCH, threads=peer.threads,
                ms_median=ms, max_abs_diff=f"{max_abs_diff(grads, reference):.1e}")


if __name__ == "__main__":
    main()
