/* IDX files (the format of the MNIST family): a magic of two zero bytes, a type code and
   a rank, one big-endian uint32 per dim, then the elements, big-endian, row-major. Files
   are read whole, through zlib, which reads gzip-compressed and raw files alike. */
#define _POSIX_C_SOURCE 200809L /* open, fstat */
#include "idx.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

typedef struct idx_type {
  int code;
  const char *name;
  size_t size;    /* bytes per element in the file */
  nb_dtype dtype; /* what nb_idx_read makes of it */
} idx_type;

static const idx_type idx_types[] = {
    {NBIO_IDX_UBYTE, "ubyte", 1, NB_I32}, {NBIO_IDX_BYTE, "byte", 1, NB_I32},   {NBIO_IDX_SHORT, "short", 2, NB_I32},
    {NBIO_IDX_INT, "int", 4, NB_I32},     {NBIO_IDX_FLOAT, "float", 4, NB_F32}, {NBIO_IDX_DOUBLE, "double", 8, NB_F64},
};

static const idx_type *find_type(int code) {
  for (size_t i = 0; i < sizeof idx_types / sizeof *idx_types; i++)
    if (idx_types[i].code == code) return &idx_types[i];
  return NULL;
}

const char *nbio_idx_type_name(int type) {
  const idx_type *t = find_type(type);
  return t ? t->name : "unknown";
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64(const uint8_t *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }

static nb_code corrupt(nb_ctx *c, const char *name, const char *what) {
  return nbcore_fail(c, NB_CORRUPT, "%s: %s", name, what);
}

/* Fills h's rank, dims, count and byte sizes from a header already checked to be whole. */
static nb_code read_dims(nb_ctx *c, const char *name, const uint8_t *bytes, nbio_idx *h) {
  size_t esize = find_type(h->type)->size;
  int64_t count;
  for (int i = 0; i < h->rank; i++) h->dims[i] = be32(bytes + 4 + 4 * i);
  /* checked_size keeps count * 16 within int64, so count * esize (esize <= 8) fits in
     uint64; the header and a spare byte (see load_body) must fit in size_t as well */
  if (!nbcore_shape_checked_size(h->rank, h->dims, &count) ||
      (uint64_t)count * esize > SIZE_MAX - NBIO_IDX_MAX_HEADER - 1) {
    char s[160];
    return nbcore_fail(c, NB_CORRUPT, "%s: dims %s of %s elements overflow a byte count", name,
                       nbcore_shape_str(s, sizeof s, h->rank, h->dims), nbio_idx_type_name(h->type));
  }
  h->count = count;
  h->data_bytes = (size_t)count * esize;
  return NB_OK;
}

/* Parses the header at bytes[0..n) (n may be just the header): NB_CORRUPT, with a
   message naming `name`, for a header that is short, has a bad magic or type code, a
   rank outside 1..NB_MAX_RANK, or dims whose byte count overflows. */
static nb_code nbio_idx_parse_header(nb_ctx *c, const char *name, const uint8_t *bytes, size_t n, nbio_idx *h) {
  memset(h, 0, sizeof *h);
  if (n == 0) return corrupt(c, name, "empty file, not an IDX file");
  if (n < 4) return nbcore_fail(c, NB_CORRUPT, "%s: truncated header: %zu bytes, the magic alone takes 4", name, n);
  if (bytes[0] != 0 || bytes[1] != 0)
    return nbcore_fail(c, NB_CORRUPT, "%s: bad magic 0x%08x: an IDX file starts with two zero bytes", name,
                       (unsigned)be32(bytes));
  h->type = bytes[2];
  if (!find_type(h->type))
    return nbcore_fail(c, NB_CORRUPT,
                       "%s: bad type code 0x%02x (IDX has 0x08 ubyte, 0x09 byte, 0x0B short, 0x0C int, "
                       "0x0D float, 0x0E double)",
                       name, (unsigned)h->type);
  h->rank = bytes[3];
  if (h->rank < 1 || h->rank > NB_MAX_RANK)
    return nbcore_fail(c, NB_CORRUPT, "%s: rank %d is outside 1..%d", name, h->rank, NB_MAX_RANK);
  h->header_bytes = 4 + 4 * (size_t)h->rank;
  if (n < h->header_bytes)
    return nbcore_fail(c, NB_CORRUPT, "%s: truncated header: %zu bytes, rank %d needs %zu", name, n, h->rank,
                       h->header_bytes);
  return read_dims(c, name, bytes, h);
}

nb_code nbio_idx_parse(nb_ctx *c, const char *name, const uint8_t *bytes, size_t n, nbio_idx *h) {
  nb_code rc = nbio_idx_parse_header(c, name, bytes, n, h);
  if (rc != NB_OK) return rc;
  char s[160];
  size_t have = n - h->header_bytes;
  /* Extra bytes are an error (torchvision's reader agrees; TF's and Keras' ignore or
     misread them): they mean a wrong header or files run together. */
  if (have < h->data_bytes)
    return nbcore_fail(c, NB_CORRUPT, "%s: truncated data: dims %s of %s take %zu bytes, the file has %zu", name,
                       nbcore_shape_str(s, sizeof s, h->rank, h->dims), nbio_idx_type_name(h->type), h->data_bytes,
                       have);
  if (have > h->data_bytes) /* the loader reads one byte past the data: no count */
    return nbcore_fail(c, NB_CORRUPT,
                       "%s: trailing bytes after the data: dims %s of %s take %zu bytes, "
                       "the file has more",
                       name, nbcore_shape_str(s, sizeof s, h->rank, h->dims), nbio_idx_type_name(h->type),
                       h->data_bytes);
  h->data = bytes + h->header_bytes;
  return NB_OK;
}

/* Reads up to n bytes (gzread takes an int count, so in chunks); -1 on a read error. */
static int64_t read_upto(gzFile gz, uint8_t *dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    size_t want = n - got < (size_t)INT_MAX ? n - got : (size_t)INT_MAX;
    int r = gzread(gz, dst + got, (unsigned)want);
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (int64_t)got;
}

/* The most bytes a file of file_size bytes can hold: deflate expands at most 1032-fold,
   which bounds what a gzip file decompresses to. A header declaring more is truncated
   data, found without trying to allocate it. */
static uint64_t max_content(uint64_t file_size, bool compressed) { return compressed ? file_size * 1032 : file_size; }

/* A failed gzread: the system's read failed (NB_IO) or the gzip data is damaged. */
static nb_code read_error(nb_ctx *c, const char *path, gzFile gz) {
  int zerr;
  const char *msg = gzerror(gz, &zerr);
  if (zerr == Z_ERRNO) return nbcore_fail(c, NB_IO, "%s: read error: %s", path, strerror(errno));
  if (zerr == Z_MEM_ERROR) return nbcore_fail(c, NB_NOMEM, "%s: out of memory decompressing it", path);
  return nbcore_fail(c, NB_CORRUPT, "%s: corrupt gzip data: %s", path, msg);
}

/* Reads the header (magic, then as many dims as the rank says) and parses it. */
static nb_code load_header(nb_ctx *c, const char *path, gzFile gz, uint8_t *head, nbio_idx *h) {
  int64_t n = read_upto(gz, head, 4);
  if (n == 4 && head[3] >= 1 && head[3] <= NB_MAX_RANK) {
    int64_t dims = read_upto(gz, head + 4, 4 * (size_t)head[3]);
    n = dims < 0 ? -1 : n + dims;
  }
  if (n < 0) return read_error(c, path, gz);
  return nbio_idx_parse_header(c, path, head, (size_t)n, h);
}

/* Reads the rest of the file after the header into one buffer and parses the whole. */
static nb_code load_body(nb_ctx *c, const char *path, gzFile gz, uint64_t file_size, const uint8_t *head,
                         nbio_idx_file *f) {
  nbio_idx *h = &f->idx;
  char s[160];
  if (h->data_bytes > max_content(file_size, !gzdirect(gz)))
    return nbcore_fail(c, NB_CORRUPT,
                       "%s: truncated data: dims %s of %s take %zu bytes, more than a "
                       "file of %llu bytes holds",
                       path, nbcore_shape_str(s, sizeof s, h->rank, h->dims), nbio_idx_type_name(h->type),
                       h->data_bytes, (unsigned long long)file_size);
  /* one byte more than declared, to see trailing bytes */
  size_t cap = h->header_bytes + h->data_bytes + 1;
  f->bytes = malloc(cap);
  if (!f->bytes) return nbcore_fail(c, NB_NOMEM, "%s: out of memory reading %zu bytes", path, h->data_bytes);
  memcpy(f->bytes, head, h->header_bytes);
  int64_t n = read_upto(gz, f->bytes + h->header_bytes, h->data_bytes + 1);
  nb_code rc = n < 0 ? read_error(c, path, gz) : nbio_idx_parse(c, path, f->bytes, h->header_bytes + (size_t)n, h);
  if (rc != NB_OK) {
    free(f->bytes);
    f->bytes = NULL;
    return rc;
  }
  f->size = h->header_bytes + (size_t)n;
  return NB_OK;
}

nb_code nbio_idx_load(nb_ctx *c, const char *path, nbio_idx_file *f) {
  memset(f, 0, sizeof *f);
  if (!c || c->status != NB_OK) return c ? c->status : NB_INVALID;
  if (!path) return nbcore_fail(c, NB_INVALID, "IDX file: NULL path");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nbcore_fail(c, NB_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  bool stat_failed = fstat(fd, &st) != 0;
  if (stat_failed || !S_ISREG(st.st_mode)) {
    const char *why = stat_failed ? strerror(errno) : "not a regular file";
    close(fd);
    return nbcore_fail(c, NB_IO, "%s: %s", path, why);
  }
  gzFile gz = gzdopen(fd, "rb");
  if (!gz) {
    close(fd);
    return nbcore_fail(c, NB_NOMEM, "%s: out of memory opening it", path);
  }
  uint8_t head[NBIO_IDX_MAX_HEADER];
  nb_code rc = load_header(c, path, gz, head, &f->idx);
  if (rc == NB_OK) rc = load_body(c, path, gz, (uint64_t)st.st_size, head, f);
  gzclose(gz); /* closes fd too */
  return rc;
}

/* Widens the big-endian elements to the tensor's dtype (int32, float32 or float64). */
static void convert(const nbio_idx *h, void *dst) {
  const uint8_t *p = h->data;
  int32_t *i32 = dst;
  switch (h->type) {
    case NBIO_IDX_UBYTE:
      for (int64_t i = 0; i < h->count; i++) i32[i] = p[i];
      break;
    case NBIO_IDX_BYTE:
      for (int64_t i = 0; i < h->count; i++) i32[i] = (int32_t)p[i] - (p[i] & 0x80 ? 256 : 0);
      break;
    case NBIO_IDX_SHORT:
      for (int64_t i = 0; i < h->count; i++) {
        int32_t v = p[2 * i] << 8 | p[2 * i + 1];
        i32[i] = v - (v & 0x8000 ? 65536 : 0);
      }
      break;
    case NBIO_IDX_INT: /* int32, float32 and float64 keep their bit patterns */
    case NBIO_IDX_FLOAT:
      for (int64_t i = 0; i < h->count; i++) {
        uint32_t u = be32(p + 4 * i);
        memcpy((uint8_t *)dst + 4 * i, &u, 4);
      }
      break;
    case NBIO_IDX_DOUBLE:
      for (int64_t i = 0; i < h->count; i++) {
        uint64_t u = be64(p + 8 * i);
        memcpy((uint8_t *)dst + 8 * i, &u, 8);
      }
      break;
  }
}

nb_tensor *nbio_idx_tensor(nb_ctx *c, const nbio_idx *h) {
  nb_tensor *x = nbcore_tensor_alloc(c, find_type(h->type)->dtype, h->rank, h->dims);
  if (x) convert(h, nbcore_tdata(x));
  return x;
}

nb_tensor *nb_idx_read(nb_ctx *c, const char *path) {
  if (!c || c->status != NB_OK) return NULL;
  if (c->graph) {
    nbcore_fail(c, NB_INVALID,
                "nb_idx_read: needs an eager context (feed file data to a graph "
                "through a placeholder)");
    return NULL;
  }
  nbio_idx_file f;
  if (nbio_idx_load(c, path, &f) != NB_OK) return NULL;
  nb_tensor *x = nbio_idx_tensor(c, &f.idx);
  free(f.bytes);
  return x;
}
