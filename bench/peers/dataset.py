"""Peer of bench/dataset.c: Fashion-MNIST's 60000-item training set from Debian's
dataset-fashion-mnist (or --dir), median of 5 runs:
  name=dataset_load_ms impl=... loader=numpy items=60000 median=...
      gunzip + np.frombuffer of the two IDX files and nabla's checks (28x28 images, labels
      0..9, equal counts): what Keras' fashion_mnist.load_data does with these files,
      and what torchvision's reader does before copying into a tensor
  name=dataset_rss_kib impl=... before=... after=...   the resident set around the loads
  name=dataset_batch_us impl=... path=... n=64|128 median=...
      one shuffled batch, images float32 NHWC [n,28,28,1] = pixel / 255 and the labels,
      made and dropped; median of 5 runs of 1000 batches
Paths: PyTorch index (uint8 tensor indexed by a slice of a permutation, then converted)
and dataloader (torch.utils.data.DataLoader over a TensorDataset, shuffle=True: the
idiomatic loop, item by item and collated); TF tf.data (from_tensor_slices, shuffle over
the whole set, batch, map to float). JAX has no dataset API (a JAX program feeds NumPy
batches), so `--impl jax` prints a note. Threads do not apply: one process.
Usage: dataset.py --impl torch|tf [--dir DIR] [--quick]
"""
import os

import benchutil as bu

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
RUNS, BATCHES = 5, 1000


def load(directory):
    """Images [60000,28,28] and labels [60000], uint8, checked as nb_fashion_mnist does."""
    images = bu.read_idx_gz(os.path.join(directory, "train-images-idx3-ubyte.gz"))
    labels = bu.read_idx_gz(os.path.join(directory, "train-labels-idx1-ubyte.gz"))
    if images.shape[1:] != (28, 28) or labels.shape != images.shape[:1] or labels.max() > 9:
        raise ValueError(f"{directory}: not Fashion-MNIST")
    return images, labels


def torch_batches(torch, images, labels, n):
    """{path: make one batch} for PyTorch."""
    x, y = torch.from_numpy(images.copy()), torch.from_numpy(labels.copy())  # writable, as torchvision's copy
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1))
    cursor = {"at": 0}

    def index():
        i = cursor["at"] = (cursor["at"] + n) % (len(x) - n)
        idx = order[i:i + n]
        return x[idx].to(torch.float32).div_(255).unsqueeze(3), y[idx].to(torch.int32)

    data = torch.utils.data.TensorDataset(x, y)
    loader = torch.utils.data.DataLoader(data, batch_size=n, shuffle=True, drop_last=True,
                                         generator=torch.Generator().manual_seed(1))
    batches = {"it": iter(loader)}

    def dataloader():
        try:
            xb, yb = next(batches["it"])
        except StopIteration:
            batches["it"] = iter(loader)
            xb, yb = next(batches["it"])
        return xb.to(torch.float32).div_(255).unsqueeze(3), yb.to(torch.int32)
    return {"index": index, "dataloader": dataloader}


def tf_batches(tf, images, labels, n):
    data = (tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(len(images), seed=1).repeat()
            .batch(n, drop_remainder=True)
            .map(lambda x, y: (tf.expand_dims(tf.cast(x, tf.float32) / 255.0, 3), tf.cast(y, tf.int32))))
    it = iter(data)
    return {"tf.data": lambda: next(it)}


def main():
    p = bu.parser(__doc__)
    p.set_defaults(threads="1")
    p.add_argument("--dir", default=DEFAULT_DIR, help="the IDX files' directory (default %(default)s)")
    args, peer = bu.start(p, {"jax": "JAX has no dataset API; a JAX program feeds NumPy batches"})
    if not peer:
        return
    if not os.path.exists(os.path.join(args.dir, "train-images-idx3-ubyte.gz")):
        bu.note(f"no Fashion-MNIST in {args.dir} (Debian: apt-get install dataset-fashion-mnist): skipped")
        return
    runs, batches = (2, 50) if args.quick else (RUNS, BATCHES)
    rss_before = bu.rss_kib()
    load_ms = bu.median_of(lambda: load(args.dir), runs, warmup=0) * 1e3
    images, labels = load(args.dir)
    bu.line("dataset_load_ms", peer.impl, loader="numpy", items=len(images), median=load_ms)
    bu.line("dataset_rss_kib", peer.impl, before=rss_before, after=bu.rss_kib())
    make = {"torch": torch_batches, "tf": tf_batches}[peer.impl]
    for n in (64, 128):
        for path, batch in make(peer.fw, images, labels, n).items():
            def run():
                for _ in range(batches):
                    batch()
            us = bu.median_of(run, runs) / batches * 1e6
            bu.line("dataset_batch_us", peer.impl, path=path, n=n, median=us)


if __name__ == "__main__":
    main()
