#!/usr/bin/env python3
"""Writes the .npy files tests/test_npy.c reads into tests/golden/npy, and copies them into
fuzz/corpus/npy as the seeds of fuzz/fuzz_npy.c: NumPy's own output for each dtype, both
byte orders and the three format versions, and files nabla must refuse (Fortran order,
pickled objects, dtypes it lacks, cut short, a bad magic, trailing bytes, rank 9).

    python3 tests/golden/make_npy.py    # needs numpy
"""
import os
import shutil

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "npy")
SEEDS = os.path.join(HERE, "..", "..", "fuzz", "corpus", "npy")


def save(name, a, version=None, allow_pickle=False):
    with open(os.path.join(OUT, name), "wb") as f:
        np.lib.format.write_array(f, a, version=version, allow_pickle=allow_pickle)


def raw(name, content):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(content)


def saved_bytes(a):
    path = os.path.join(OUT, "tmp.npy")
    np.save(path, a)
    with open(path, "rb") as f:
        content = f.read()
    os.remove(path)
    return content


os.makedirs(OUT, exist_ok=True)
six = np.array([[1.5, -2.0, 0.25], [3.0, 1e-3, -7.5]])
# dtypes nabla keeps, little- and big-endian
save("f4_le.npy", six.astype("<f4"))
save("f4_be.npy", six.astype(">f4"))
save("f8_le.npy", six.astype("<f8"))
save("f8_be.npy", six.astype(">f8").reshape(3, 2))
save("i4_le.npy", np.array([-2147483648, -1, 0, 7, 2147483647], dtype="<i4"))
save("i4_be.npy", np.array([-2147483648, -1, 0, 7, 2147483647], dtype=">i4"))
save("i8_le.npy", np.array([[-(2**63), 5], [2**40, 2**63 - 1]], dtype="<i8"))
save("i8_be.npy", np.array([[-(2**63), 5], [2**40, 2**63 - 1]], dtype=">i8"))
save("b1.npy", np.array([[True, False], [False, True]]))
save("b1_byte2.npy", np.array([0, 2, 1, 255], dtype=np.uint8).view(np.bool_))
# integer dtypes nabla widens
save("i1.npy", np.array([-128, -1, 0, 127], dtype="i1"))
save("u1.npy", np.array([0, 1, 128, 255], dtype="u1"))
save("i2_be.npy", np.array([-32768, -2, 258, 32767], dtype=">i2"))
save("u2_le.npy", np.array([0, 258, 65535], dtype="<u2"))
save("u4_be.npy", np.array([0, 1, 4294967295], dtype=">u4"))
# ranks 0 and 4, a zero-size dim
save("scalar_f8.npy", np.array(3.25))
save("rank4_i4.npy", np.arange(24, dtype="<i4").reshape(1, 2, 3, 4))
save("empty_f4.npy", np.zeros((0, 5), dtype="<f4"))
# format versions 2.0 and 3.0
save("v2_f4.npy", six.astype("<f4"), version=(2, 0))
save("v3_f4.npy", six.astype("<f4"), version=(3, 0))
# refused
save("fortran_f4.npy", np.asfortranarray(six.astype("<f4")))
save("object.npy", np.array([1, "a", None], dtype=object), allow_pickle=True)
save("complex64.npy", np.array([1 + 2j], dtype="<c8"))
save("float16.npy", np.array([1.5], dtype="<f2"))
save("unicode.npy", np.array(["ab", "c"]))
save("uint64.npy", np.array([1], dtype="<u8"))
save("structured.npy", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
save("rank9.npy", np.zeros((1,) * 9, dtype="<f4"))
good = saved_bytes(six.astype("<f4"))
raw("truncated.npy", good[:-3])
raw("trailing.npy", good + b"\0")
raw("bad_magic.npy", b"\x92" + good[1:])
raw("header_cut.npy", good[:40])

os.makedirs(SEEDS, exist_ok=True)
for name in sorted(os.listdir(OUT)):
    shutil.copyfile(os.path.join(OUT, name), os.path.join(SEEDS, name))
