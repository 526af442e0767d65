#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets.

fuzz/corpus/idx (fuzz/fuzz_idx.c): one small valid IDX file per element type (raw, and one
gzip-compressed), and inputs that split into a labels file and an images file (first byte:
the labels file's length) for the dataset path.

fuzz/corpus/ops (fuzz/fuzz_ops.c): for every op id the registry may hold, a one-op program
over two float32 [2, 3] leaves (the first dim unknown in the graph), and one over a
float64 [3] and an int32 scalar; the bytes after the op id are left out, which the decoder
reads as zeros: default inputs and attrs. The ids wrap around the registry's size.

fuzz/corpus/checkpoint (fuzz/fuzz_checkpoint.c): the checkpoints of tests/golden/ckpt, each
as the index's length (two bytes, little-endian), the index, then the data.

fuzz/corpus/graphdef (fuzz/fuzz_graphdef.c): the GraphDefs of tests/golden/graphdef and
tests/golden/graphdef_v1 as they are (TensorFlow's frozen and function graphs, TF 1 control
flow, and the broken ones of the error tests).

fuzz/corpus/saved_model (fuzz/fuzz_saved_model.c): the saved_model.pb files of
tests/golden/saved_model.

    python3 fuzz/make_corpus.py
"""
import gzip
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "idx")
OPS_OUT = os.path.join(HERE, "corpus", "ops")
OP_IDS = 160  # above the registry's op count, so every op has a seed
CKPT_OUT = os.path.join(HERE, "corpus", "checkpoint")
GOLDEN = os.path.join(HERE, "..", "tests", "golden", "ckpt")
GRAPHDEF_OUT = os.path.join(HERE, "corpus", "graphdef")
GRAPHDEF_GOLDEN = [os.path.join(HERE, "..", "tests", "golden", d) for d in ("graphdef", "graphdef_v1")]
SAVED_OUT = os.path.join(HERE, "corpus", "saved_model")
SAVED_GOLDEN = os.path.join(HERE, "..", "tests", "golden", "saved_model")


def idx(type_code, dims, data):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + data


def write(name, content, folder=OUT):
    with open(os.path.join(folder, name), "wb") as f:
        f.write(content)


def checkpoint(name):
    with open(os.path.join(GOLDEN, name + ".index"), "rb") as f:
        index = f.read()
    with open(os.path.join(GOLDEN, name + ".data-00000-of-00001"), "rb") as f:
        data = f.read()
    return struct.pack("<H", len(index)) + index + data


def leaf(dtype, dims, unknown_mask=0):
    """A leaf as fuzz_ops.c decodes it: dtype (0 float32, 1 float64, 2 int32), rank, the
    mask of dims a placeholder leaves unknown, the dims."""
    return bytes([dtype, len(dims), unknown_mask] + dims)


def one_op_program(leaves, op_id):
    return bytes([len(leaves) - 1]) + b"".join(leaves) + bytes([0, op_id >> 8, op_id & 0xFF])


def dataset(labels, rows, cols):
    label_file = idx(0x08, [len(labels)], bytes(labels))
    pixels = bytes((7 * i) % 256 for i in range(len(labels) * rows * cols))
    return bytes([len(label_file)]) + label_file + idx(0x08, [len(labels), rows, cols], pixels)


os.makedirs(OUT, exist_ok=True)
write("ubyte_2x3", idx(0x08, [2, 3], bytes([0, 1, 127, 128, 200, 255])))
write("byte_4", idx(0x09, [4], bytes([0, 1, 128, 255])))
write("short_2", idx(0x0B, [2], struct.pack(">hh", -2, 258)))
write("int_2", idx(0x0C, [2], struct.pack(">ii", -7, 1 << 30)))
write("float_2", idx(0x0D, [2], struct.pack(">ff", 1.5, -10.0)))
write("double_1", idx(0x0E, [1], struct.pack(">d", 3.25)))
write("rank8", idx(0x08, [1, 1, 1, 2, 1, 1, 1, 1], bytes([7, 9])))
write("empty_0x5", idx(0x0D, [0, 5], b""))
write("ubyte_3x2x2.gz", gzip.compress(idx(0x08, [3, 2, 2], bytes(range(12))), mtime=0))
write("dataset_3x2x2", dataset([1, 0, 9], 2, 2))
write("dataset_2x4x3", dataset([5, 255], 4, 3))

os.makedirs(OPS_OUT, exist_ok=True)
for op_id in range(OP_IDS):
    write("f32_2x3_op%03d" % op_id, one_op_program([leaf(0, [2, 3], 1), leaf(0, [2, 3])], op_id), OPS_OUT)
    write("f64_3_i32_op%03d" % op_id, one_op_program([leaf(1, [3]), leaf(2, [])], op_id), OPS_OUT)

os.makedirs(CKPT_OUT, exist_ok=True)
for name in ("tf1", "tf2", "nabla"):
    write(name, checkpoint(name), CKPT_OUT)

os.makedirs(GRAPHDEF_OUT, exist_ok=True)
for folder in GRAPHDEF_GOLDEN:
    for name in sorted(os.listdir(folder)):
        if name.endswith(".pb"):
            with open(os.path.join(folder, name), "rb") as f:
                write(os.path.basename(folder) + "_" + name[:-3], f.read(), GRAPHDEF_OUT)

os.makedirs(SAVED_OUT, exist_ok=True)
for name in ("mlp_export", "mlp_save"):
    with open(os.path.join(SAVED_GOLDEN, name, "saved_model.pb"), "rb") as f:
        write(name, f.read(), SAVED_OUT)
