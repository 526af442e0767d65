/* Internal: NumPy's .npy format, parsed from memory so that the file reader and the fuzzer
   (fuzz/fuzz_npy.c) run the same checks. */
#ifndef NBIO_NPY_H
#define NBIO_NPY_H

#include "../core/core.h"

#include <stdint.h>

/* A parsed .npy header. */
typedef struct nbio_npy {
  int major;       /* format version 1, 2 or 3 (minor is always 0) */
  char kind;       /* the descr's type letter: 'f', 'i', 'u' or 'b' */
  int file_size;   /* bytes per element in the file */
  bool big_endian; /* the file's byte order (1-byte types: this machine's) */
  char descr[16];  /* normalized, for messages: "<f4" */
  nb_dtype dtype;  /* the tensor it becomes */
  int rank;
  int64_t dims[NB_MAX_RANK];
  int64_t count;       /* elements: the product of dims */
  size_t header_bytes; /* magic, version, length and header dict: where the data starts */
  size_t data_bytes;   /* count * file_size */
} nbio_npy;

/* Bytes of the magic, version and header length of version 1 (2 and 3 take 2 more). */
#define NBIO_NPY_PREFIX 10

/* A whole .npy file held in bytes[0..n) as a new eager tensor; NULL on error (c's status). */
nb_tensor *nbio_npy_parse(nb_ctx *c, const char *name, const uint8_t *bytes, size_t n);

#endif
