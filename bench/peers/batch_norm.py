"""Peer of bench/batch_norm.c: a training batch norm forward and its gradient on float32
x[i] = sin(i), scale 1, offset 1, epsilon 0.001, in three cases:
  nhwc_64x24x24x6, nchw_64x6x24x24 and nhwc_128x512 (a dense layer's [128,512])
  name=bn_fwd_<case>_t<N> / bn_grad_<case>_t<N> impl=... threads=N us=... pass_gbps=...
us: median of 7 runs of 20 calls; pass_gbps: x's bytes / time (a kernel making k passes
over x shows about 1/k of the machine's stream bandwidth). The gradient takes dy = x and
the statistics the forward saved.
TensorFlow: FusedBatchNormV3 and FusedBatchNormGradV3 (nabla's ops) in the case's layout.
PyTorch: aten's native_batch_norm and native_batch_norm_backward (torch's fused kernels);
NHWC is torch's channels_last memory format on an NCHW-shaped tensor, and the dense case a
[128,512] tensor (BatchNorm1d's input). JAX has no batch-norm op: the forward is the
jitted composite (mean, variance, normalize, scale and shift; XLA fuses it) and the
gradient the jitted vjp of it, which recomputes the statistics instead of reading them.
Usage: batch_norm.py --impl torch|tf|jax [--threads 1,2] [--quick]
"""
import numpy as np

import benchutil as bu

EPSILON = 0.001
REPS = 20
CASES = (("nhwc_64x24x24x6", "NHWC", (64, 24, 24, 6)), ("nchw_64x6x24x24", "NCHW", (64, 6, 24, 24)),
         ("nhwc_128x512", "NHWC", (128, 1, 1, 512)))


def tf_calls(tf, x, layout):
    """(forward, gradient) as zero-argument calls."""
    x = tf.constant(x)
    channels = x.shape[3] if layout == "NHWC" else x.shape[1]
    scale, empty = tf.ones([channels]), tf.constant([], tf.float32)
    forward = lambda: tf.raw_ops.FusedBatchNormV3(x=x, scale=scale, offset=scale, mean=empty, variance=empty,
                                                  epsilon=EPSILON, exponential_avg_factor=1.0,
                                                  data_format=layout, is_training=True)
    _, _, _, r1, r2, r3 = forward()
    gradient = lambda: tf.raw_ops.FusedBatchNormGradV3(y_backprop=x, x=x, scale=scale, reserve_space_1=r1,
                                                       reserve_space_2=r2, reserve_space_3=r3, epsilon=EPSILON,
                                                       data_format=layout, is_training=True)
    return forward, gradient


def torch_calls(torch, x, layout):
    x = torch.from_numpy(x)
    if layout == "NHWC":  # the same bytes seen as channels_last NCHW, or [N, C] when H = W = 1
        x = x.permute(0, 3, 1, 2)
        if x.shape[2] == x.shape[3] == 1:
            x = x.reshape(x.shape[0], x.shape[1])
    scale = torch.ones(x.shape[1])
    aten = torch.ops.aten
    forward = lambda: aten.native_batch_norm(x, scale, scale, None, None, True, 1.0, EPSILON)
    _, mean, invstd = forward()
    gradient = lambda: aten.native_batch_norm_backward(x, x, scale, None, None, mean, invstd, True, EPSILON,
                                                       [True, True, True])
    return forward, gradient


def jax_calls(jax, x, layout):
    jnp = jax.numpy
    x = jnp.asarray(x)
    axis = 3 if layout == "NHWC" else 1
    axes = tuple(a for a in range(4) if a != axis)
    shape = [1, 1, 1, 1]
    shape[axis] = x.shape[axis]
    scale = jnp.ones(x.shape[axis], jnp.float32)

    def batch_norm(x, scale, offset):
        mean = jnp.mean(x, axes, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axes, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + EPSILON) * scale.reshape(shape) + offset.reshape(shape)

    fwd = jax.jit(batch_norm)
    grad = jax.jit(lambda x, scale, dy: jax.vjp(batch_norm, x, scale, scale)[1](dy))
    return (lambda: jax.block_until_ready(fwd(x, scale, scale)),
            lambda: jax.block_until_ready(grad(x, scale, x)))


def time_call(call, runs):
    """Median seconds per call over `runs` runs of REPS calls, after a warm-up call."""
    def run():
        for _ in range(REPS):
            call()
    return bu.median_of(run, runs) / REPS


def main():
    args, peer = bu.start(bu.parser(__doc__))
    if not peer:
        return
    runs = 2 if args.quick else 7
    make = {"torch": torch_calls, "tf": tf_calls, "jax": jax_calls}[peer.impl]
    for name, layout, shape in CASES:
        x = np.sin(np.arange(np.prod(shape), dtype=np.float64)).astype(np.float32).reshape(shape)
        for kind, call in zip(("bn_fwd", "bn_grad"), make(peer.fw, x, layout)):
            s = time_call(call, runs)
            bu.line(f"{kind}_{name}_t{peer.threads}", peer.impl, threads=peer.threads, us=s * 1e6,
                    pass_gbps=x.nbytes / s / 1e9)


if __name__ == "__main__":
    main()
