"""Peer of bench/checkpoint.c: a save and a restore of the same ~100 MB of float32
variables (the same 18 shapes: an embedding, dense kernels, conv filters, biases), in a
temporary directory under $TMPDIR, median of 5 runs after a warm-up:
  name=checkpoint_save impl=... path=... fsync=no|added mb=100.0 threads=1 runs=5 ms_median=... mb_per_s=...
  name=checkpoint_restore impl=... path=... (same fields)
Neither framework fsyncs a checkpoint; nabla's save does (files and directory, as part of
its atomic rename), so each save is timed as the framework does it (fsync=no) and with an
fsync of its files added (fsync=added), the figure to set beside nabla's.
Paths: TF tf.train.Checkpoint(v00=..., ...).write(prefix) and .read(prefix) into the same
variables (TF's V2 format, as nabla's); PyTorch torch.save of the state dict, and
torch.load + copy_ into the tensors (what load_state_dict does). JAX has no checkpoint API in its core (Orbax is a
separate library), so `--impl jax` prints a note. Everything is in the page cache after
the first write, as for nabla. Threads do not apply: one process.
Usage: checkpoint.py --impl torch|tf [--quick]
"""
import os
import shutil
import tempfile

import numpy as np

import benchutil as bu

RUNS = 5
SHAPES = [
    (10000, 512),                                                  # embedding
    (1024, 4096), (4096, 1024), (1024, 4096), (4096, 1024),        # dense kernels
    (4096,), (1024,), (4096,), (1024,),                            # their biases
    (3, 3, 256, 256), (3, 3, 256, 256), (3, 3, 256, 256), (3, 3, 256, 256),  # conv filters
    (256,), (256,), (256,), (256,),                                # batch-norm scales
    (1024, 726),                                                   # output layer
]


def initial_values(shapes):
    rng = np.random.default_rng(1)
    return {f"v{k:02d}": rng.uniform(-0.5, 0.5, size=s).astype(np.float32) for k, s in enumerate(shapes)}


def fsync_files(paths):
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def tf_paths(tf, values, directory):
    """(path, save, restore, the files a save writes) for TensorFlow."""
    variables = {k: tf.Variable(v) for k, v in values.items()}
    ckpt = tf.train.Checkpoint(**variables)
    prefix = os.path.join(directory, "tf_ckpt")
    files = [prefix + ".index", prefix + ".data-00000-of-00001"]
    return ("tf.train.Checkpoint.write/read", lambda: ckpt.write(prefix),
            lambda: ckpt.read(prefix).assert_consumed(), files)


def torch_paths(torch, values, directory):
    """(path, save, restore, the files a save writes) for PyTorch."""
    state = {k: torch.from_numpy(v.copy()) for k, v in values.items()}
    path = os.path.join(directory, "torch_state.pt")

    def restore():
        loaded = torch.load(path, weights_only=True)
        with torch.no_grad():
            for k, t in state.items():
                t.copy_(loaded[k])
    return "torch.save/load", lambda: torch.save(state, path), restore, [path]


def main():
    p = bu.parser(__doc__)
    p.set_defaults(threads="1")
    args, peer = bu.start(p, {"jax": "JAX has no checkpoint API in its core (Orbax is a separate library)"})
    if not peer:
        return
    runs = 2 if args.quick else RUNS
    shapes = [(s[0] // 100,) + s[1:] for s in SHAPES] if args.quick else SHAPES
    values = initial_values(shapes)
    mb = sum(v.nbytes for v in values.values()) / 1e6
    directory = tempfile.mkdtemp(prefix="checkpoint_peer_")
    try:
        make = {"torch": torch_paths, "tf": tf_paths}[peer.impl]
        path, save, restore, files = make(peer.fw, values, directory)

        def save_fsynced():
            save()
            fsync_files(files + [directory])
        for name, fsync, fn in (("checkpoint_save", "no", save), ("checkpoint_save", "added", save_fsynced),
                                ("checkpoint_restore", "no", restore)):
            seconds = bu.median_of(fn, runs)
            bu.line(name, peer.impl, path=path, fsync=fsync, mb=round(mb, 1), threads=1, runs=runs,
                    ms_median=seconds * 1e3, mb_per_s=mb / seconds)
    finally:
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
