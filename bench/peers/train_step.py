"""Peer of bench/train_step.c: one training step (forward, mean sparse softmax
cross-entropy, gradients, SGD update with learning rate 0.01), float32, synthetic data
(images uniform in [0, 1), labels i * 7 % 10), Glorot-uniform weights and zero biases:
  mlp    MLP 784-512-512-10 (ReLU), batch 128
  lenet  LeNet-5: 28x28x1, valid 5x5x6 conv, 2x2 max pool, 5x5x16 conv, 2x2 max pool,
         fc 120, fc 84, fc 10 (ReLU), batch 64
  name=train_step impl=... model=... mode=... batch=... threads=N step_ms=...
         median of 5 runs of 20 steps after 3 warm-up steps
  name=train_step_maxrss ... maxrss_mb=...   the process's peak resident set (last line)
Modes, the nearest each peer has to nabla's two:
  PyTorch  eager: zero_grad, forward, loss.backward(), torch.optim.SGD.step(); LeNet in
           NCHW, torch's native layout; int64 labels (what F.cross_entropy takes)
  TF       eager: GradientTape, tape.gradient, ResourceApplyGradientDescent per variable
           (the op Keras' SGD runs); graph: that step in a tf.function (no XLA), NHWC
  JAX      eager: jax.grad op by op and p - lr * g; jit: the whole step in jax.jit
           (compiled by XLA before the timing), NHWC
Usage: train_step.py --impl torch|tf|jax [--model mlp|lenet|all] [--mode eager|graph|jit|all]
                     [--threads 1,2] [--quick]
"""
import numpy as np

import benchutil as bu

LR = 0.01
MODELS = {  # name: (batch, input shape (NHWC), weight shapes (HWIO filters, [in, out] dense))
    "mlp": (128, (784,), [(784, 512), (512, 512), (512, 10)]),
    "lenet": (64, (28, 28, 1), [(5, 5, 1, 6), (5, 5, 6, 16), (256, 120), (120, 84), (84, 10)]),
}


def host_model(model):
    """(params [w, b, w, b, ...], x, labels) as NumPy arrays."""
    batch, input_shape, weights = MODELS[model]
    rng = np.random.default_rng(1)
    params = []
    for shape in weights:
        params += [bu.glorot_uniform(rng, shape), np.zeros(shape[-1], np.float32)]
    x = bu.uniform(rng, (batch,) + input_shape, 0.0, 1.0)
    labels = (np.arange(batch) * 7 % 10).astype(np.int32)
    return params, x, labels


def logits(nn, p, x):
    """The model's logits: MLP for 6 parameters, LeNet-5 for 10."""
    if len(p) == 6:
        return nn.dense(nn.relu(nn.dense(nn.relu(nn.dense(x, p[0], p[1])), p[2], p[3])), p[4], p[5])
    h = nn.pool(nn.relu(nn.conv(x, p[0], p[1])))
    h = nn.flatten(nn.pool(nn.relu(nn.conv(h, p[2], p[3]))))
    return nn.dense(nn.relu(nn.dense(nn.relu(nn.dense(h, p[4], p[5])), p[6], p[7])), p[8], p[9])


class TorchNN:
    def __init__(self, torch):
        self.torch, self.F = torch, torch.nn.functional
        self.relu = torch.relu

    def dense(self, x, w, b):
        return self.torch.addmm(b, x, w)

    def conv(self, x, f, b):
        return self.F.conv2d(x, f, b)

    def pool(self, x):
        return self.F.max_pool2d(x, 2)

    def flatten(self, x):
        return x.flatten(1)

    def steps(self, params, x, labels):
        """{mode: one training step}: torch's own loop with torch.optim.SGD."""
        t = self.torch
        to_torch = lambda a: t.from_numpy(np.ascontiguousarray(a.transpose(3, 2, 0, 1) if a.ndim == 4 else a))
        p = [to_torch(a).requires_grad_() for a in params]
        x = t.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2) if x.ndim == 4 else x))
        labels = t.from_numpy(labels).long()
        opt = t.optim.SGD(p, lr=LR)

        def step():
            opt.zero_grad(set_to_none=True)
            self.F.cross_entropy(logits(self, p, x), labels).backward()
            opt.step()
        return {"eager": step}


class TFNN:
    def __init__(self, tf):
        self.tf = tf
        self.relu = tf.nn.relu

    def dense(self, x, w, b):
        return self.tf.nn.bias_add(self.tf.matmul(x, w), b)

    def conv(self, x, f, b):
        return self.tf.nn.bias_add(self.tf.nn.conv2d(x, f, 1, "VALID"), b)

    def pool(self, x):
        return self.tf.nn.max_pool2d(x, 2, 2, "VALID")

    def flatten(self, x):
        return self.tf.reshape(x, [-1, 256])

    def steps(self, params, x, labels):
        tf = self.tf
        v = [tf.Variable(a) for a in params]
        x, labels, lr = tf.constant(x), tf.constant(labels), tf.constant(LR)

        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits(self, v, x)))
            for var, g in zip(v, tape.gradient(loss, v)):
                tf.raw_ops.ResourceApplyGradientDescent(var=var.handle, alpha=lr, delta=g)
        return {"eager": step, "graph": tf.function(step)}


class JaxNN:
    def __init__(self, jax):
        self.jax, self.jnp = jax, jax.numpy
        self.relu = jax.nn.relu

    def dense(self, x, w, b):
        return x @ w + b

    def conv(self, x, f, b):
        return self.jax.lax.conv_general_dilated(x, f, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")) + b

    def pool(self, x):
        return self.jax.lax.reduce_window(x, np.float32(-np.inf), self.jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def flatten(self, x):
        return x.reshape(x.shape[0], -1)

    def steps(self, params, x, labels):
        jax, jnp = self.jax, self.jnp
        x, labels = jnp.asarray(x), jnp.asarray(labels)

        def loss(p):
            z = logits(self, p, x)
            return jnp.mean(jax.nn.logsumexp(z, axis=1) - jnp.take_along_axis(z, labels[:, None], axis=1)[:, 0])

        def update(p):
            return [w - LR * g for w, g in zip(p, jax.grad(loss)(p))]

        state = {"eager": [jnp.asarray(a) for a in params], "jit": [jnp.asarray(a) for a in params]}
        jitted = jax.jit(update)

        def eager():
            state["eager"] = jax.block_until_ready(update(state["eager"]))

        def jit():
            state["jit"] = jax.block_until_ready(jitted(state["jit"]))
        return {"eager": eager, "jit": jit}


def step_ms(step, steps, runs):
    """Median ms per step over `runs` runs of `steps` steps, after 3 warm-up steps."""
    for _ in range(3):
        step()

    def run():
        for _ in range(steps):
            step()
    return bu.median_of(run, runs, warmup=0) / steps * 1e3


def main():
    p = bu.parser(__doc__)
    p.add_argument("--model", choices=("mlp", "lenet", "all"), default="all")
    p.add_argument("--mode", choices=("eager", "graph", "jit", "all"), default="all")
    args, peer = bu.start(p)
    if not peer:
        return
    steps, runs = (3, 2) if args.quick else (20, 5)
    nn = {"torch": TorchNN, "tf": TFNN, "jax": JaxNN}[peer.impl](peer.fw)
    for model in MODELS if args.model == "all" else (args.model,):
        for mode, step in nn.steps(*host_model(model)).items():
            if args.mode not in ("all", mode):
                continue
            bu.line("train_step", peer.impl, model=model, mode=mode, batch=MODELS[model][0], threads=peer.threads,
                    step_ms=step_ms(step, steps, runs))
    bu.line("train_step_maxrss", peer.impl, model=args.model, mode=args.mode, threads=peer.threads,
            maxrss_mb=f"{bu.maxrss_mb():.1f}")


if __name__ == "__main__":
    main()
