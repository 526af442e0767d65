/* LevelDB's table format as TF's checkpoint index uses it (written from the format's
   description): data blocks of prefix-compressed entries ending in an array of restart
   offsets, each block followed by a compression byte and the masked CRC-32C of both; an
   index block mapping the last key of each data block to its handle (offset and size as
   varints); a 48-byte footer of the metaindex and index handles, zero padding and a magic. */
#include "table.h"

#include <stdlib.h>
#include <string.h>

#define TABLE_MAGIC 0xdb4775248b80fb57ull
#define FOOTER_BYTES 48 /* two handles of at most 2 x 10 varint bytes, padded, + magic */
#define BLOCK_TRAILER 5 /* compression type byte + fixed32 CRC */
#define CRC_MASK_DELTA 0xa282ead8u

uint32_t nbio_crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + CRC_MASK_DELTA; }

static void nbio_bytes_put(nbio_bytes *b, const void *data, size_t n) {
  if (b->oom || n == 0) return;
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, data, n);
  b->n += n;
}

void nbio_bytes_free(nbio_bytes *b) {
  free(b->p);
  *b = (nbio_bytes){0};
}

/* ---- writing ------------------------------------------------------------------------------- */

static void put_varint(nbio_bytes *b, uint64_t v) {
  uint8_t buf[10];
  int n = 0;
  for (; v >= 0x80; v >>= 7) buf[n++] = (uint8_t)(v | 0x80);
  buf[n++] = (uint8_t)v;
  nbio_bytes_put(b, buf, (size_t)n);
}

static void put_fixed32(nbio_bytes *b, uint32_t v) {
  uint8_t buf[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  nbio_bytes_put(b, buf, 4);
}

/* A block with a restart at every entry (no prefix sharing: simple, and valid). */
static void put_block(nbio_bytes *out, const nbio_table_kv *kv, int n) {
  size_t start = out->n;
  nbio_bytes restarts = {0};
  for (int i = 0; i < n; i++) {
    put_fixed32(&restarts, (uint32_t)(out->n - start));
    put_varint(out, 0);
    put_varint(out, kv[i].klen);
    put_varint(out, kv[i].vlen);
    nbio_bytes_put(out, kv[i].key, kv[i].klen);
    nbio_bytes_put(out, kv[i].val, kv[i].vlen);
  }
  if (n == 0) put_fixed32(&restarts, 0); /* an empty block still has one restart */
  nbio_bytes_put(out, restarts.p, restarts.n);
  put_fixed32(out, (uint32_t)(restarts.n / 4));
  out->oom |= restarts.oom;
  nbio_bytes_free(&restarts);
}

/* Writes a block and its trailer; *handle gets its offset and size. */
static void put_block_with_trailer(nbio_bytes *out, const nbio_table_kv *kv, int n, uint64_t handle[2]) {
  handle[0] = out->n;
  put_block(out, kv, n);
  handle[1] = out->n - handle[0];
  uint8_t type = 0; /* no compression */
  nbio_bytes_put(out, &type, 1);
  uint32_t crc = out->oom ? 0 : nbio_crc32c(0, out->p + handle[0], (size_t)handle[1] + 1);
  put_fixed32(out, nbio_crc32c_mask(crc));
}

void nbio_table_build(const nbio_table_kv *kv, int n, nbio_bytes *out) {
  uint64_t data[2], meta[2], index[2];
  put_block_with_trailer(out, kv, n, data);
  put_block_with_trailer(out, NULL, 0, meta);
  nbio_bytes handle = {0};
  put_varint(&handle, data[0]);
  put_varint(&handle, data[1]);
  /* the index's key for the data block: any key >= its last one; "" for an empty table */
  nbio_table_kv entry = {n ? kv[n - 1].key : "", n ? kv[n - 1].klen : 0, handle.p, handle.n};
  if (!handle.oom) put_block_with_trailer(out, &entry, n ? 1 : 0, index);
  out->oom |= handle.oom;
  nbio_bytes_free(&handle);
  if (out->oom) return;
  size_t footer = out->n;
  put_varint(out, meta[0]);
  put_varint(out, meta[1]);
  put_varint(out, index[0]);
  put_varint(out, index[1]);
  uint8_t zeros[FOOTER_BYTES] = {0};
  nbio_bytes_put(out, zeros, FOOTER_BYTES - 8 - (out->n - footer));
  put_fixed32(out, (uint32_t)TABLE_MAGIC);
  put_fixed32(out, (uint32_t)(TABLE_MAGIC >> 32));
}

/* ---- reading ------------------------------------------------------------------------------- */

/* A varint at *p (before end); false when cut short or longer than 64 bits. */
static bool get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t byte = *(*p)++;
    *v |= (uint64_t)(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

typedef struct block {
  const uint8_t *p;
  size_t n;
} block;

/* The checked contents of the block at handle [*p...]. */
static const char *read_block(const uint8_t *bytes, size_t size, const uint8_t **p, const uint8_t *end, block *b) {
  uint64_t offset, len;
  if (!get_varint(p, end, &offset) || !get_varint(p, end, &len)) return "bad block handle";
  if (offset > size || len > size - offset || size - offset - len < BLOCK_TRAILER)
    return "block past the end of the file";
  const uint8_t *data = bytes + offset;
  if (data[len] != 0) return "compressed block (nabla reads uncompressed tables only)";
  if (nbio_crc32c_mask(nbio_crc32c(0, data, (size_t)len + 1)) != nbio_load_le32(data + len + 1))
    return "block CRC mismatch";
  *b = (block){data, (size_t)len};
  return NULL;
}

static const char *append_kv(nbio_table *t, const char *key, size_t klen, const uint8_t *val, size_t vlen, bool *oom) {
  if (t->n > 0) {
    const nbio_table_kv *last = &t->kv[t->n - 1];
    size_t common = klen < last->klen ? klen : last->klen;
    int cmp = memcmp(last->key, key, common);
    if (cmp > 0 || (cmp == 0 && last->klen >= klen)) return "keys out of order";
  }
  if (t->n == t->cap) {
    int32_t cap = t->cap ? 2 * t->cap : 16;
    nbio_table_kv *kv = realloc(t->kv, (size_t)cap * sizeof *kv);
    if (!kv) return *oom = true, "out of memory";
    t->kv = kv;
    t->cap = cap;
  }
  char *copy = malloc(klen + 1);
  if (!copy) return *oom = true, "out of memory";
  memcpy(copy, key, klen);
  copy[klen] = 0;
  t->kv[t->n++] = (nbio_table_kv){copy, klen, val, vlen};
  return NULL;
}

/* Calls back with every entry of a block, keys rebuilt from their shared prefixes. */
typedef const char *(*entry_fn)(void *user, const char *key, size_t klen, const uint8_t *val, size_t vlen, bool *oom);

static const char *walk_block(block b, entry_fn fn, void *user, bool *oom) {
  if (b.n < 4) return "block too short";
  uint32_t restarts = nbio_load_le32(b.p + b.n - 4);
  if (restarts == 0 || restarts > (b.n - 4) / 4) return "bad restart count";
  const uint8_t *p = b.p, *end = b.p + b.n - 4 - 4 * (size_t)restarts;
  nbio_bytes key = {0};
  const char *err = NULL;
  while (!err && p < end) {
    uint64_t shared, unshared, vlen;
    if (!get_varint(&p, end, &shared) || !get_varint(&p, end, &unshared) || !get_varint(&p, end, &vlen) ||
        shared > key.n || unshared > (size_t)(end - p) || vlen > (size_t)(end - p) - unshared) {
      err = "bad block entry";
      break;
    }
    key.n = (size_t)shared;
    nbio_bytes_put(&key, p, (size_t)unshared);
    nbio_bytes_put(&key, "", 1); /* a NUL, then dropped: keys become C strings */
    if (key.oom)
      err = (*oom = true, "out of memory");
    else
      err = fn(user, (const char *)key.p, --key.n, p + unshared, (size_t)vlen, oom);
    p += unshared + vlen;
  }
  nbio_bytes_free(&key);
  return err;
}

typedef struct table_walk {
  nbio_table *t;
  const uint8_t *bytes;
  size_t size;
} table_walk;

static const char *data_entry(void *user, const char *key, size_t klen, const uint8_t *val, size_t vlen, bool *oom) {
  return append_kv(((table_walk *)user)->t, key, klen, val, vlen, oom);
}

static const char *index_entry(void *user, const char *key, size_t klen, const uint8_t *val, size_t vlen, bool *oom) {
  (void)key, (void)klen;
  table_walk *w = user;
  block b;
  const char *err = read_block(w->bytes, w->size, &val, val + vlen, &b);
  return err ? err : walk_block(b, data_entry, w, oom);
}

const char *nbio_table_parse(const uint8_t *bytes, size_t n, nbio_table *t, bool *oom) {
  *t = (nbio_table){0};
  *oom = false;
  if (n < FOOTER_BYTES) return "truncated: shorter than a table footer";
  const uint8_t *footer = bytes + n - FOOTER_BYTES, *magic = bytes + n - 8;
  if (((uint64_t)nbio_load_le32(magic + 4) << 32 | nbio_load_le32(magic)) != TABLE_MAGIC)
    return "bad table magic (truncated or not a checkpoint index)";
  block meta, index;
  const char *err = read_block(bytes, n, &footer, magic, &meta);
  if (!err) err = read_block(bytes, n, &footer, magic, &index);
  table_walk w = {t, bytes, n};
  if (!err) err = walk_block(index, index_entry, &w, oom);
  if (err) nbio_table_free(t);
  return err;
}

void nbio_table_free(nbio_table *t) {
  for (int32_t i = 0; i < t->n; i++) free(t->kv[i].key);
  free(t->kv);
  *t = (nbio_table){0};
}

const nbio_table_kv *nbio_table_find(const nbio_table *t, const char *key) {
  int32_t lo = 0, hi = t->n;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    int cmp = strcmp(t->kv[mid].key, key);
    if (cmp == 0) return &t->kv[mid];
    if (cmp < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}
