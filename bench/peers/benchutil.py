"""Timing, printing and set-up shared by the peer benchmarks in bench/peers.

Each peer script runs one workload of a bench/ program (torch_X.py, tf_X.py and jax_X.py
for bench/X.c) and prints lines in nabla's style, the same name without its `nb_` prefix
and the same metric key, plus `impl=torch|tf|jax`:

    name=train_step impl=tf model=mlp mode=eager batch=128 threads=1 step_ms=4.210

Threads: PyTorch sets its intra-op pool in the process (torch.set_num_threads) and
runs every count in one process. TensorFlow's and JAX's pools are fixed when the runtime
starts, so their scripts run each thread count in a child process of its own
(run_per_thread_count): TensorFlow with intra-op threads N and inter-op threads 1 (nabla
runs one node at a time and threads inside ops); JAX pinned to N CPUs
(os.sched_setaffinity, which sizes XLA's CPU pools) and, for N = 1, with
XLA_FLAGS=--xla_cpu_multi_thread_eigen=false.

Figures are medians of runs after a warm-up, as in bench/benchutil.h. `--quick` makes every
script finish in seconds (fewer runs, shorter runs, smaller sizes): to check that a peer
works, not to compare.
"""
import argparse
import gzip
import os
import resource
import statistics
import struct
import subprocess
import sys
import time

import numpy as np


def now():
    return time.perf_counter()


def median(values):
    return statistics.median(values)


def median_of(fn, runs, warmup=1):
    """Median seconds of one call of fn() over `runs` calls, after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = now()
        fn()
        times.append(now() - t0)
    return median(times)


def per_call(fn, runs, min_seconds):
    """Median seconds per call of fn(), as bench_per_call in bench/benchutil.h: the
    repetitions double until a pass takes min_seconds / 4, then `runs` passes of four
    times that many are timed."""
    def one_pass(reps):
        t0 = now()
        for _ in range(reps):
            fn()
        return now() - t0

    reps = 1
    while one_pass(reps) < min_seconds / 4:
        reps *= 2
    reps *= 4
    return median([one_pass(reps) / reps for _ in range(runs)])


def _format(value):
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)


def line(name, impl, **fields):
    """Prints one `name=... impl=... key=value ...` line, fields in the order given."""
    parts = [f"name={name}", f"impl={impl}"] + [f"{k}={_format(v)}" for k, v in fields.items()]
    print(" ".join(parts), flush=True)


def note(text):
    """A `#` line: a comment among the results (versions, skipped workloads)."""
    print(f"# {text}", flush=True)


def rss_kib():
    """Resident set size in KiB, from /proc (0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGESIZE") // 1024)
    except OSError:
        return 0


def maxrss_mb():
    """The process's peak resident set in MiB (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


IMPLS = ("torch", "tf", "jax")


def parser(doc):
    """The options every peer script takes."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", choices=IMPLS, required=True, help="the peer: PyTorch, TensorFlow or JAX")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="a few short runs: checks that the script works")
    return p


def thread_counts(args):
    return [int(t) for t in args.threads.split(",") if t]


def run_per_thread_count(args):
    """For runtimes whose thread pools are fixed at start-up: with several thread counts,
    runs this script once per count in a child process and returns True (the caller then
    returns); with one count returns False and the caller goes on in this process."""
    counts = thread_counts(args)
    if len(counts) == 1:
        return False
    for n in counts:
        code = subprocess.call([sys.executable, sys.argv[0], f"--threads={n}"] + _without_threads(sys.argv[1:]))
        if code:
            sys.exit(code)
    return True


def _without_threads(argv):
    """argv less its --threads option, given as one word or two."""
    kept, skip_value = [], False
    for arg in argv:
        if skip_value or arg.startswith("--threads="):
            skip_value = False
        elif arg == "--threads":
            skip_value = True
        else:
            kept.append(arg)
    return kept


def jax_threads(n):
    """Limits JAX (XLA's CPU client) to n threads; call before `import jax`. Pins the
    process to n CPUs (XLA sizes its pools from the affinity mask) and, for one thread,
    turns off Eigen's multi-threading inside XLA's kernels."""
    cpus = sorted(os.sched_getaffinity(0))[:n]
    os.sched_setaffinity(0, cpus)
    if n == 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    return f"cpus={','.join(map(str, cpus))} XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}"


def tf_threads(tf, n):
    """TensorFlow: n intra-op threads (inside an op) and one inter-op thread (one op at a
    time, as nabla's session); must run before the first op."""
    tf.config.threading.set_intra_op_parallelism_threads(n)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def quiet_tf():
    """Keeps TensorFlow's start-up log off the results."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def uniform(rng, shape, low, high):
    return rng.uniform(low, high, size=shape).astype(np.float32)


def glorot_uniform(rng, shape):
    """Glorot (Xavier) uniform, limit sqrt(6 / (fan_in + fan_out)); for a conv filter
    [kh, kw, in, out] the fans are kh*kw*in and kh*kw*out (as TF/Keras)."""
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return uniform(rng, shape, -limit, limit)


def read_idx_gz(path):
    """An IDX file (gzip-compressed, ubyte data) as a uint8 array of its dims: what
    Keras' fashion_mnist.load_data does with the same files (gunzip + np.frombuffer)."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, rank = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not a ubyte IDX file")
    dims = struct.unpack(f">{rank}I", data[4:4 + 4 * rank])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


class Peer:
    """The framework one process runs: impl (torch, tf or jax), its module, its thread count."""

    def __init__(self, impl, module, threads):
        self.impl, self.fw, self.threads = impl, module, threads


def _import(impl, threads):
    """Imports the framework with its pools limited to `threads`; returns (module, how)."""
    if impl == "torch":
        import torch
        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
        return torch, f"torch.set_num_threads({threads})"
    if impl == "tf":
        quiet_tf()
        import tensorflow as tf
        tf.get_logger().setLevel("ERROR")  # tape.jacobian's retracing warnings
        tf_threads(tf, threads)
        return tf, f"intra_op={threads} inter_op=1"
    how = jax_threads(threads)
    import jax
    return jax, how


def start(p, unsupported=None):
    """Parses the command line with p and sets up the process for --impl on one thread
    count: returns (args, its Peer), the Peer None when there is nothing more to do here:
    each thread count ran in a child process (run_per_thread_count), the framework is not
    installed, or it has no such workload (unsupported: impl -> why); a `#` line says so."""
    args = p.parse_args()
    if unsupported and args.impl in unsupported:
        note(f"impl={args.impl}: {unsupported[args.impl]}")
        return args, None
    if run_per_thread_count(args):
        return args, None
    threads = thread_counts(args)[0]
    try:
        module, how = _import(args.impl, threads)
    except ImportError as e:
        note(f"impl={args.impl} not available ({e}): its lines are skipped")
        return args, None
    note(f"impl={args.impl} version={module.__version__} threads={threads} ({how})")
    return args, Peer(args.impl, module, threads)
