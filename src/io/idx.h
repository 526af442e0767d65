/* Internal: the IDX file format (the MNIST files), parsed from memory so that the file
   loader and the fuzzer (fuzz/fuzz_idx.c) run the same checks. */
#ifndef NBIO_IDX_H
#define NBIO_IDX_H

#include "../core/core.h"

#include <stdint.h>

/* Magic (two zero bytes, type code, rank) and one big-endian uint32 per dim. */
#define NBIO_IDX_MAX_HEADER (4 + 4 * NB_MAX_RANK)

/* The IDX type codes. */
enum {
  NBIO_IDX_UBYTE = 0x08,
  NBIO_IDX_BYTE = 0x09,
  NBIO_IDX_SHORT = 0x0B,
  NBIO_IDX_INT = 0x0C,
  NBIO_IDX_FLOAT = 0x0D,
  NBIO_IDX_DOUBLE = 0x0E
};

/* A parsed IDX file. */
typedef struct nbio_idx {
  int type; /* NBIO_IDX_UBYTE ... */
  int rank; /* 1..NB_MAX_RANK */
  int64_t dims[NB_MAX_RANK];
  int64_t count;       /* elements: the product of dims */
  size_t header_bytes; /* 4 + 4 * rank */
  size_t data_bytes;   /* count * element size */
  const uint8_t *data; /* the big-endian elements (set by nbio_idx_parse only) */
} nbio_idx;

/* A file read whole into memory (raw or gzip-decompressed) and parsed; bytes is malloc'd. */
typedef struct nbio_idx_file {
  uint8_t *bytes;
  size_t size;
  nbio_idx idx; /* idx.data points into bytes */
} nbio_idx_file;

/* The type code's name in the format's terms ("ubyte", "double", ...). */
const char *nbio_idx_type_name(int type);

/* Parses a whole file held in bytes[0..n): the header, then exactly data_bytes of data
   (NB_CORRUPT when there are fewer or more bytes). h->data points into bytes. */
nb_code nbio_idx_parse(nb_ctx *c, const char *name, const uint8_t *bytes, size_t n, nbio_idx *h);

/* Reads and parses the file at path, gzip-compressed or raw, in one allocation. On
   error nothing is left allocated: NB_IO when it cannot be opened or read, NB_CORRUPT
   for a malformed file, NB_NOMEM. */
nb_code nbio_idx_load(nb_ctx *c, const char *path, nbio_idx_file *f);

/* The elements of a parsed file as a new eager tensor of h's dims: the integer types as
   int32, float as float32, double as float64. */
nb_tensor *nbio_idx_tensor(nb_ctx *c, const nbio_idx *h);

/* A dataset from an images file ([n, rows, cols] ubyte) and a labels file ([n] ubyte)
   held in memory, named in errors by the two names. Takes over the two malloc'd files
   (freed on error too). */
nb_dataset *nbio_dataset_adopt(nb_ctx *c, const char *images_name, nbio_idx_file images, const char *labels_name,
                               nbio_idx_file labels);

#endif
