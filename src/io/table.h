/* Internal: LevelDB's sorted string table, the container of TF's checkpoint index
   (tensorflow/core/lib/io/table*), and the CRC-32C it and the bundles use. */
#ifndef NBIO_TABLE_H
#define NBIO_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CRC-32C (Castagnoli) of n bytes, continuing from crc (0 to start); crc32c.c. Uses the
   CPU's crc32 instruction where it has one. */
uint32_t nbio_crc32c(uint32_t crc, const void *data, size_t n);
/* The same without the instruction (slicing-by-8), for tests to check both paths. */
uint32_t nbio_crc32c_portable(uint32_t crc, const void *data, size_t n);
/* The masked form tables and bundles store (so that a CRC over bytes holding CRCs is not
   trivially related to them): rotate right by 15 and add a constant. */
uint32_t nbio_crc32c_mask(uint32_t crc);

/* The little-endian uint32 at p (tables store fixed32s so; the CRC reads words so). */
static inline uint32_t nbio_load_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A growable byte string; oom is set (and later appends do nothing) when memory runs out. */
typedef struct nbio_bytes {
  uint8_t *p;
  size_t n, cap;
  bool oom;
} nbio_bytes;
void nbio_bytes_put(nbio_bytes *b, const void *data, size_t n);
void nbio_bytes_free(nbio_bytes *b);

/* One key and value; the key is NUL-terminated (klen excludes the NUL). */
typedef struct nbio_table_kv {
  char *key;
  size_t klen;
  const uint8_t *val;
  size_t vlen;
} nbio_table_kv;

/* The whole table holding kv[0..n), keys strictly increasing (bytewise), uncompressed,
   in one data block, appended to out. */
void nbio_table_build(const nbio_table_kv *kv, int n, nbio_bytes *out);

/* A parsed table: entries in key order; values point into the table's bytes, which must
   outlive it. */
typedef struct nbio_table {
  nbio_table_kv *kv;
  int32_t n, cap;
} nbio_table;
/* Parses and checks (footer magic, every block's CRC and bounds, key order) a table of n
   bytes. NULL on success, else a static description of what is wrong; *oom tells out of
   memory. t is left empty on failure. */
const char *nbio_table_parse(const uint8_t *bytes, size_t n, nbio_table *t, bool *oom);
void nbio_table_free(nbio_table *t);
/* The entry with key, or NULL. */
const nbio_table_kv *nbio_table_find(const nbio_table *t, const char *key);

#endif
