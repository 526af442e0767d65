"""Peer of bench/matmul.c: square float32 MatMul, n = 256, 512, 1024, 2048, one op at a time
(PyTorch: torch.matmul on MKL or oneDNN, as its build picks; TensorFlow: tf.linalg.matmul,
eagerly; JAX: jnp.matmul jitted, waited for with block_until_ready).
  name=matmul impl=... n=N dtype=float32 threads=T ms=... gflops=...
ms is the median of 7 passes of at least 0.2 s; gflops counts 2 n^3 flops. The fraction of
the core's peak is bench/peak's figure from the same run (bench/matmul prints its own).
Usage: matmul.py --impl torch|tf|jax [--threads 1,2] [--quick]
"""
import numpy as np

import benchutil as bu

SIZES = (256, 512, 1024, 2048)


def products(impl, fw, sizes):
    rng = np.random.default_rng(1)
    host = {n: (bu.uniform(rng, (n, n), -1.0, 1.0), bu.uniform(rng, (n, n), -1.0, 1.0)) for n in sizes}
    if impl == "torch":
        return {n: (lambda a=fw.from_numpy(a), b=fw.from_numpy(b): fw.matmul(a, b)) for n, (a, b) in host.items()}
    if impl == "tf":
        return {n: (lambda a=fw.constant(a), b=fw.constant(b): fw.linalg.matmul(a, b)) for n, (a, b) in host.items()}
    matmul = fw.jit(fw.numpy.matmul)
    return {n: (lambda a=fw.numpy.asarray(a), b=fw.numpy.asarray(b): fw.block_until_ready(matmul(a, b)))
            for n, (a, b) in host.items()}


def main():
    args, peer = bu.start(bu.parser(__doc__))
    if not peer:
        return
    runs, min_seconds, sizes = (3, 0.02, SIZES[:2]) if args.quick else (7, 0.2, SIZES)
    for n, op in products(peer.impl, peer.fw, sizes).items():
        seconds = bu.per_call(op, runs, min_seconds)
        bu.line("matmul", peer.impl, n=n, dtype="float32", threads=peer.threads, ms=seconds * 1e3,
                gflops=2.0 * n ** 3 / seconds * 1e-9)


if __name__ == "__main__":
    main()
