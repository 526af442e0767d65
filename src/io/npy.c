/* NumPy's .npy files: the magic "\x93NUMPY", a version (1.0, 2.0 or 3.0), the header's
   length (little-endian uint16 in 1.0, uint32 in 2.0 and 3.0), the header, then the
   elements. The header is a Python dict literal with the keys 'descr' (the dtype, e.g.
   '<f4'), 'fortran_order' and 'shape' (a tuple), padded with spaces to end in '\n'. */
#define _POSIX_C_SOURCE 200809L /* pread, fstat */
#include "npy.h"
#include "file_read.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint8_t npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

static bool host_big_endian(void) {
  const uint16_t one = 1;
  uint8_t first;
  memcpy(&first, &one, 1);
  return first == 0;
}

/* ---- the prefix: magic, version, header length ---- */

/* The offset at which the data of the file starting with bytes[0..n) begins, read from the
   prefix (magic, version, header length): NB_CORRUPT naming `name` when n is too short for
   the prefix, the magic is wrong or the version is not 1.0, 2.0 or 3.0. */
static nb_code nbio_npy_data_offset(nb_ctx *c, const char *name, const uint8_t *bytes, size_t n, uint64_t *offset) {
  if (n == 0) return nbcore_fail(c, NB_CORRUPT, "%s: empty file, not a .npy file", name);
  if (memcmp(bytes, npy_magic, n < 6 ? n : 6) != 0)
    return nbcore_fail(c, NB_CORRUPT, "%s: bad magic: a .npy file starts with \\x93NUMPY", name);
  if (n < 8) return nbcore_fail(c, NB_CORRUPT, "%s: truncated: %zu bytes, the magic and version take 8", name, n);
  int major = bytes[6], minor = bytes[7];
  if (major < 1 || major > 3 || minor != 0)
    return nbcore_fail(c, NB_CORRUPT, "%s: .npy version %d.%d: nabla reads versions 1.0, 2.0 and 3.0", name, major,
                       minor);
  size_t len_bytes = major == 1 ? 2 : 4;
  if (n < 8 + len_bytes)
    return nbcore_fail(c, NB_CORRUPT, "%s: truncated: %zu bytes, the prefix of version %d.0 takes %zu", name, n, major,
                       8 + len_bytes);
  uint64_t len = 0;
  for (size_t i = 0; i < len_bytes; i++) len |= (uint64_t)bytes[8 + i] << (8 * i);
  *offset = 8 + len_bytes + len;
  return NB_OK;
}

/* ---- the header dict ---- */

/* A position in the header; start is the file's first byte, for offsets in messages. */
typedef struct cursor {
  nb_ctx *c;
  const char *name;
  const uint8_t *start, *p, *end;
} cursor;

static nb_code bad_header(cursor *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static nb_code bad_header(cursor *k, const char *fmt, ...) {
  char what[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return nbcore_fail(k->c, NB_CORRUPT, "%s: bad .npy header at byte %zu: %s", k->name, (size_t)(k->p - k->start), what);
}

/* Up to cap - 1 bytes of s for a message, bytes outside printable ASCII shown as '?'. */
static const char *printable(char *out, size_t cap, const uint8_t *s, size_t n) {
  size_t m = n < cap - 1 ? n : cap - 1;
  for (size_t i = 0; i < m; i++) out[i] = s[i] >= 0x20 && s[i] < 0x7f ? (char)s[i] : '?';
  out[m] = '\0';
  return out;
}

static void skip_space(cursor *k) { /* Python's whitespace between tokens */
  while (k->p < k->end && (*k->p == ' ' || (*k->p >= '\t' && *k->p <= '\r'))) k->p++;
}

/* Consumes ch (after whitespace) when it comes next. */
static bool accept(cursor *k, char ch) {
  skip_space(k);
  if (k->p < k->end && *k->p == (uint8_t)ch) {
    k->p++;
    return true;
  }
  return false;
}

/* A quoted string without escapes (NumPy's keys and descrs have none): its bytes in *s, *n. */
static nb_code parse_string(cursor *k, const uint8_t **s, size_t *n) {
  skip_space(k);
  if (k->p >= k->end || (*k->p != '\'' && *k->p != '"')) return bad_header(k, "expected a quoted string");
  uint8_t quote = *k->p++;
  *s = k->p;
  for (; k->p < k->end && *k->p != quote; k->p++)
    if (*k->p == '\\' || *k->p == '\n') return bad_header(k, "escapes and line breaks in strings are not read");
  if (k->p >= k->end) return bad_header(k, "unterminated string");
  *n = (size_t)(k->p++ - *s);
  return NB_OK;
}

static bool is_word_char(uint8_t ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/* Consumes the identifier word when it comes next, whole. */
static bool accept_word(cursor *k, const char *word) {
  size_t n = strlen(word);
  skip_space(k);
  if ((size_t)(k->end - k->p) < n || memcmp(k->p, word, n) != 0) return false;
  if (k->p + n < k->end && is_word_char(k->p[n])) return false;
  k->p += n;
  return true;
}

static nb_code parse_bool(cursor *k, bool *v) {
  if (accept_word(k, "True")) return *v = true, NB_OK;
  if (accept_word(k, "False")) return *v = false, NB_OK;
  return bad_header(k, "'fortran_order' must be True or False");
}

/* A non-negative decimal integer, with Python 2's long suffix L that NumPy still reads. */
static nb_code parse_dim(cursor *k, int64_t *v) {
  skip_space(k);
  if (k->p >= k->end || *k->p < '0' || *k->p > '9') return bad_header(k, "expected a dim (a non-negative integer)");
  *v = 0;
  for (; k->p < k->end && *k->p >= '0' && *k->p <= '9'; k->p++) {
    if (*v > (INT64_MAX - (*k->p - '0')) / 10) return bad_header(k, "dim too large");
    *v = *v * 10 + (*k->p - '0');
  }
  if (k->p < k->end && (*k->p == 'L' || *k->p == 'l')) k->p++;
  return NB_OK;
}

/* A tuple of dims as Python writes it: (), (3,), (2, 3) and (2, 3,). */
static nb_code parse_shape(cursor *k, nbio_npy *h) {
  if (!accept(k, '(')) return bad_header(k, "'shape' must be a tuple such as (2, 3)");
  int n = 0;
  bool comma = false;
  while (!accept(k, ')')) {
    if (n > 0 && !comma) return bad_header(k, "expected ',' or ')' in 'shape'");
    int64_t d = 0;
    nb_code rc = parse_dim(k, &d);
    if (rc != NB_OK) return rc;
    if (n == NB_MAX_RANK)
      return nbcore_fail(k->c, NB_SHAPE, "%s: shape of rank more than %d, nabla's largest", k->name, NB_MAX_RANK);
    h->dims[n++] = d;
    comma = accept(k, ',');
  }
  if (n == 1 && !comma) return bad_header(k, "'shape' (n) is a number, not a tuple: NumPy writes (n,)");
  h->rank = n;
  return NB_OK;
}

/* The descrs nabla reads and the dtype each becomes: integers narrower than 32 bits and
   uint32 are widened, losing nothing. */
typedef struct npy_type {
  char kind;
  int size;
  nb_dtype dtype;
} npy_type;

static const npy_type npy_types[] = {
    {'f', 4, NB_F32}, {'f', 8, NB_F64}, {'i', 1, NB_I32}, {'i', 2, NB_I32}, {'i', 4, NB_I32},
    {'i', 8, NB_I64}, {'u', 1, NB_I32}, {'u', 2, NB_I32}, {'u', 4, NB_I64}, {'b', 1, NB_BOOL},
};

/* NumPy's name of a kind nabla has no dtype for, or NULL when kind is not a NumPy kind. */
static const char *kind_name(uint8_t kind) {
  switch (kind) {
    case 'f': return "float";
    case 'i': return "int";
    case 'u': return "uint";
    case 'b': return "bool";
    case 'c': return "complex";
    case 'O': return "object (pickled Python objects, never read)";
    case 'U': return "str";
    case 'S':
    case 'a': return "bytes";
    case 'V': return "void";
    case 'M': return "datetime64";
    case 'm': return "timedelta64";
    default: return NULL;
  }
}

/* Reads a descr such as '<f4': a byte order ('<', '>', '|' or '=', optional), a kind
   letter and a size in bytes. */
static nb_code read_descr(cursor *k, const uint8_t *s, size_t n, nbio_npy *h) {
  char shown[48];
  printable(shown, sizeof shown, s, n);
  size_t i = 0;
  char order = n > 0 && s[0] && strchr("<>|=", s[0]) ? (char)s[i++] : '=';
  const char *kname = i < n ? kind_name(s[i]) : NULL;
  if (!kname) return bad_header(k, "descr '%s' is not a NumPy dtype", shown);
  char kind = (char)s[i++];
  int size = 0;
  for (; i < n && s[i] >= '0' && s[i] <= '9' && size < 1000; i++) size = size * 10 + (s[i] - '0');
  bool plain = i == n && size > 0 && strchr("fiub", kind);
  for (size_t t = 0; plain && t < sizeof npy_types / sizeof *npy_types; t++)
    if (npy_types[t].kind == kind && npy_types[t].size == size) {
      h->kind = kind;
      h->file_size = size;
      h->dtype = npy_types[t].dtype;
      h->big_endian = order == '>' || (order != '<' && host_big_endian());
      snprintf(h->descr, sizeof h->descr, "%c%c%d", order, kind, size);
      return NB_OK;
    }
  if (plain)
    return nbcore_fail(k->c, NB_DTYPE,
                       "%s: dtype %s%d (descr '%s') has no nabla dtype: nabla reads float32, "
                       "float64, int8 to int64, uint8 to uint32 and bool",
                       k->name, kname, 8 * size, shown);
  if (strchr("fiub", kind)) return bad_header(k, "descr '%s' is not a NumPy dtype", shown);
  return nbcore_fail(k->c, NB_DTYPE, "%s: dtype %s (descr '%s') has no nabla dtype", k->name, kname, shown);
}

static nb_code parse_descr(cursor *k, nbio_npy *h) {
  skip_space(k);
  if (k->p < k->end && *k->p == '[')
    return nbcore_fail(k->c, NB_DTYPE, "%s: structured dtype (descr is a list of fields) has no nabla dtype", k->name);
  const uint8_t *s;
  size_t n;
  nb_code rc = parse_string(k, &s, &n);
  return rc != NB_OK ? rc : read_descr(k, s, n, h);
}

static const char *const npy_keys[3] = {"descr", "fortran_order", "shape"};

/* The value of key number `key` of npy_keys. */
static nb_code parse_value(cursor *k, int key, nbio_npy *h, bool *fortran) {
  switch (key) {
    case 0: return parse_descr(k, h);
    case 1: return parse_bool(k, fortran);
    default: return parse_shape(k, h);
  }
}

/* The key at the cursor: its index in npy_keys, each at most once. */
static nb_code parse_key(cursor *k, const bool seen[3], int *key) {
  const uint8_t *s;
  size_t n;
  nb_code rc = parse_string(k, &s, &n);
  if (rc != NB_OK) return rc;
  for (*key = 0; *key < 3; ++*key)
    if (strlen(npy_keys[*key]) == n && memcmp(npy_keys[*key], s, n) == 0) break;
  char shown[48];
  if (*key == 3) return bad_header(k, "unknown key '%s'", printable(shown, sizeof shown, s, n));
  if (seen[*key]) return bad_header(k, "key '%s' given twice", npy_keys[*key]);
  if (!accept(k, ':')) return bad_header(k, "expected ':' after '%s'", npy_keys[*key]);
  return NB_OK;
}

/* {'descr': ..., 'fortran_order': ..., 'shape': ...}: the keys in any order, a trailing
   comma allowed, nothing but whitespace after. */
static nb_code parse_dict(cursor *k, nbio_npy *h) {
  bool seen[3] = {false, false, false}, fortran = false;
  if (!accept(k, '{')) return bad_header(k, "expected '{': the header is a Python dict");
  while (!accept(k, '}')) {
    int key;
    nb_code rc = parse_key(k, seen, &key);
    if (rc == NB_OK) rc = parse_value(k, key, h, &fortran);
    if (rc != NB_OK) return rc;
    seen[key] = true;
    if (accept(k, ',')) continue;
    if (!accept(k, '}')) return bad_header(k, "expected ',' or '}'");
    break;
  }
  skip_space(k);
  if (k->p != k->end) return bad_header(k, "text after the dict");
  for (int i = 0; i < 3; i++)
    if (!seen[i]) return bad_header(k, "no key '%s'", npy_keys[i]);
  if (fortran)
    return nbcore_fail(k->c, NB_UNIMPLEMENTED,
                       "%s: Fortran-order data is not read (save a C-order array: "
                       "np.ascontiguousarray)",
                       k->name);
  return NB_OK;
}

/* Parses the header at bytes[0..n) (n may stop where the data starts): NB_CORRUPT for a
   header that is short or not the dict NumPy writes, NB_DTYPE for a descr nabla has no
   dtype for, NB_UNIMPLEMENTED for Fortran order, NB_SHAPE for a rank above NB_MAX_RANK. */
static nb_code nbio_npy_parse_header(nb_ctx *c, const char *name, const uint8_t *bytes, size_t n, nbio_npy *h) {
  memset(h, 0, sizeof *h);
  uint64_t offset;
  nb_code rc = nbio_npy_data_offset(c, name, bytes, n, &offset);
  if (rc != NB_OK) return rc;
  if (offset > n)
    return nbcore_fail(c, NB_CORRUPT, "%s: truncated header: it takes %llu bytes, the file has %zu", name,
                       (unsigned long long)offset, n);
  h->major = bytes[6];
  h->header_bytes = (size_t)offset;
  cursor k = {c, name, bytes, bytes + (h->major == 1 ? 10 : 12), bytes + offset};
  rc = parse_dict(&k, h);
  if (rc != NB_OK) return rc;
  int64_t count;
  /* checked_size keeps count * 16 within int64: count * file_size (at most 8) fits */
  if (!nbcore_shape_checked_size(h->rank, h->dims, &count)) {
    char s[160];
    return nbcore_fail(c, NB_CORRUPT, "%s: shape %s of %s overflows a byte count", name,
                       nbcore_shape_str(s, sizeof s, h->rank, h->dims), h->descr);
  }
  h->count = count;
  h->data_bytes = (size_t)count * (size_t)h->file_size;
  return NB_OK;
}

/* NB_CORRUPT unless `have` bytes of data are exactly the h->data_bytes the shape needs. */
static nb_code nbio_npy_check_data_size(nb_ctx *c, const char *name, const nbio_npy *h, uint64_t have) {
  if (have == h->data_bytes) return NB_OK;
  char s[160];
  nbcore_shape_str(s, sizeof s, h->rank, h->dims);
  if (have < h->data_bytes)
    return nbcore_fail(c, NB_CORRUPT, "%s: truncated data: shape %s of %s takes %zu bytes, the file has %llu", name, s,
                       h->descr, h->data_bytes, (unsigned long long)have);
  /* NumPy's np.load ignores them; here they mean a wrong header or files run together */
  return nbcore_fail(c, NB_CORRUPT, "%s: %llu bytes after the data (shape %s of %s takes %zu)", name,
                     (unsigned long long)(have - h->data_bytes), s, h->descr, h->data_bytes);
}

/* ---- elements ---- */

static uint64_t load_uint(const uint8_t *p, int size, bool big_endian) {
  uint64_t u = 0;
  for (int b = 0; b < size; b++) u |= (uint64_t)p[big_endian ? size - 1 - b : b] << (8 * b);
  return u;
}

/* Stores the low bits of u as element i of a native array of `size`-byte elements. */
static void store_uint(void *dst, int64_t i, size_t size, uint64_t u) {
  uint8_t *at = (uint8_t *)dst + (size_t)i * size;
  if (size == 1) {
    *at = (uint8_t)u;
  } else if (size == 4) {
    uint32_t v = (uint32_t)u;
    memcpy(at, &v, 4);
  } else {
    memcpy(at, &u, 8);
  }
}

/* Converts the file's elements src to the tensor's dtype at dst (native byte order, bools
   0 or 1). dst may equal src when the element sizes are equal. */
static void nbio_npy_convert(const nbio_npy *h, const uint8_t *src, void *dst) {
  size_t out = nb_dtype_size(h->dtype);
  if (h->count == 0) return;
  if (h->big_endian == host_big_endian() && (size_t)h->file_size == out && h->kind != 'b') {
    if ((const void *)src != dst) memcpy(dst, src, h->data_bytes);
    return;
  }
  int bits = 8 * h->file_size;
  for (int64_t i = 0; i < h->count; i++) {
    uint64_t u = load_uint(src + (size_t)i * (size_t)h->file_size, h->file_size, h->big_endian);
    if (h->kind == 'i' && bits < 64 && (u >> (bits - 1) & 1)) u |= ~(uint64_t)0 << bits; /* sign-extend */
    if (h->kind == 'b') u = u != 0; /* NumPy reads any nonzero byte as True */
    store_uint(dst, i, out, u);
  }
}

nb_tensor *nbio_npy_parse(nb_ctx *c, const char *name, const uint8_t *bytes, size_t n) {
  if (!c || c->status != NB_OK) return NULL;
  nbio_npy h;
  if (nbio_npy_parse_header(c, name, bytes, n, &h) != NB_OK ||
      nbio_npy_check_data_size(c, name, &h, n - h.header_bytes) != NB_OK)
    return NULL;
  nb_tensor *x = nbcore_tensor_alloc(c, h.dtype, h.rank, h.dims);
  if (x) nbio_npy_convert(&h, bytes + h.header_bytes, nbcore_tdata(x));
  return x;
}

/* ---- files ---- */

/* Reads up to n bytes at offset `at`; the count read (short only at the end of the file),
   or -1 with errno set. */
static nb_code read_failed(nb_ctx *c, const char *path) {
  return nbcore_fail(c, NB_IO, "%s: read error: %s", path, strerror(errno));
}

/* Reads and parses the header of the file of `size` bytes; allocates no more than that. */
static nb_code read_header(nb_ctx *c, const char *path, int fd, uint64_t size, nbio_npy *h) {
  uint8_t prefix[NBIO_NPY_PREFIX + 2];
  int64_t n = io_pread_full(fd, prefix, sizeof prefix, 0);
  if (n < 0) return read_failed(c, path);
  uint64_t offset;
  nb_code rc = nbio_npy_data_offset(c, path, prefix, (size_t)n, &offset);
  if (rc != NB_OK) return rc;
  size_t want = (size_t)(offset < size ? offset : size); /* a shorter file: parse says truncated */
  uint8_t *head = malloc(want);
  if (!head) return nbcore_fail(c, NB_NOMEM, "%s: out of memory reading a header of %zu bytes", path, want);
  n = io_pread_full(fd, head, want, 0);
  rc = n < 0 ? read_failed(c, path) : nbio_npy_parse_header(c, path, head, (size_t)n, h);
  free(head);
  if (rc == NB_OK) rc = nbio_npy_check_data_size(c, path, h, size - h->header_bytes);
  return rc;
}

/* Reads the data into x: straight into its buffer when the element sizes agree (converted
   in place), else through a buffer of the file's data. */
static nb_code read_data(nb_ctx *c, const char *path, int fd, const nbio_npy *h, nb_tensor *x) {
  bool in_place = (size_t)h->file_size == nb_dtype_size(h->dtype);
  uint8_t *src = in_place ? nbcore_tdata(x) : malloc(h->data_bytes ? h->data_bytes : 1);
  if (!src) return nbcore_fail(c, NB_NOMEM, "%s: out of memory reading %zu bytes", path, h->data_bytes);
  int64_t n = io_pread_full(fd, src, h->data_bytes, h->header_bytes);
  nb_code rc = NB_OK;
  if (n < 0)
    rc = read_failed(c, path);
  else if ((size_t)n < h->data_bytes)
    rc = nbcore_fail(c, NB_CORRUPT, "%s: truncated data: the file shrank while being read", path);
  else
    nbio_npy_convert(h, src, nbcore_tdata(x));
  if (!in_place) free(src);
  return rc;
}

/* The size of the regular file open as fd, or NB_IO naming path. */
static nb_code regular_file_size(nb_ctx *c, const char *path, int fd, uint64_t *size) {
  struct stat st;
  if (fstat(fd, &st) != 0) return nbcore_fail(c, NB_IO, "%s: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return nbcore_fail(c, NB_IO, "%s: not a regular file", path);
  *size = (uint64_t)st.st_size;
  return NB_OK;
}

nb_tensor *nb_npy_read(nb_ctx *c, const char *path) {
  if (!c || c->status != NB_OK) return NULL;
  if (c->graph) {
    nbcore_fail(c, NB_INVALID, "nb_npy_read: needs an eager context (feed file data to a graph through a placeholder)");
    return NULL;
  }
  if (!path) {
    nbcore_fail(c, NB_INVALID, "nb_npy_read: NULL path");
    return NULL;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    nbcore_fail(c, NB_IO, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  uint64_t size = 0;
  nbio_npy h;
  nb_tensor *x = NULL;
  if (regular_file_size(c, path, fd, &size) == NB_OK && read_header(c, path, fd, size, &h) == NB_OK)
    x = nbcore_tensor_alloc(c, h.dtype, h.rank, h.dims);
  if (x && read_data(c, path, fd, &h, x) != NB_OK) {
    nb_tensor_free(x);
    x = NULL;
  }
  close(fd);
  return x;
}

/* ---- writing ---- */

/* The longest header nabla writes: the dict for rank NB_MAX_RANK of 19-digit dims, padded. */
#define NPY_MAX_HEADER 384

/* The version 1.0 header for x (a dtype in this machine's byte order), padded with spaces
   and a '\n' so that the data starts at a multiple of 64 bytes, as NumPy aligns it. */
static size_t format_header(const nb_tensor *x, char out[NPY_MAX_HEADER]) {
  static const char *const kinds[] = {
      [NB_F32] = "f4", [NB_F64] = "f8", [NB_I32] = "i4", [NB_I64] = "i8", [NB_BOOL] = "b1"};
  char order = x->dtype == NB_BOOL ? '|' : host_big_endian() ? '>' : '<';
  char *d = out + NBIO_NPY_PREFIX;
  char *end = out + NPY_MAX_HEADER;
  d += snprintf(d, (size_t)(end - d), "{'descr': '%c%s', 'fortran_order': False, 'shape': (", order, kinds[x->dtype]);
  for (int i = 0; i < x->rank; i++)
    d += snprintf(d, (size_t)(end - d),
                  i + 1 < x->rank ? "%lld, "
                  : x->rank == 1  ? "%lld,"
                                  : "%lld",
                  (long long)x->shape[i]);
  d += snprintf(d, (size_t)(end - d), "), }");
  size_t total = ((size_t)(d - out) + 1 + 63) / 64 * 64; /* + 1: the '\n' */
  memset(d, ' ', total - 1 - (size_t)(d - out));
  out[total - 1] = '\n';
  memcpy(out, npy_magic, 6);
  size_t len = total - NBIO_NPY_PREFIX;
  out[6] = 1;
  out[7] = 0;
  out[8] = (char)(len & 0xff);
  out[9] = (char)(len >> 8);
  return total;
}

/* Writes the header and the data; NB_IO naming path on failure. */
static nb_code write_file(nb_ctx *c, const char *path, const char *header, size_t hn, const void *data, size_t bytes) {
  FILE *f = fopen(path, "wb");
  if (!f) return nbcore_fail(c, NB_IO, "%s: cannot open for writing: %s", path, strerror(errno));
  bool ok = fwrite(header, 1, hn, f) == hn && (bytes == 0 || fwrite(data, 1, bytes, f) == bytes);
  int err = errno;
  if (fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok) return NB_OK;
  struct stat st; /* a truncated regular file goes, so no reader takes it as whole (not /dev/full) */
  if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) unlink(path);
  return nbcore_fail(c, NB_IO, "%s: write error: %s", path, strerror(err));
}

nb_code nb_npy_write(nb_ctx *c, const nb_tensor *x, const char *path) {
  if (!c) return NB_INVALID;
  if (c->status != NB_OK) return c->status;
  if (!x || !path) return nbcore_fail(c, NB_INVALID, "nb_npy_write: NULL %s", x ? "path" : "tensor");
  if (nbcore_released(x)) return nbcore_fail(c, NB_INVALID, "nb_npy_write: %s: the tensor was released", path);
  size_t bytes = (size_t)x->size * nb_dtype_size(x->dtype);
  const void *data = nbcore_tdata(x);
  void *dense = NULL;
  if (x->slice_values) { /* IndexedSlices: written as the dense tensor they stand for */
    dense = malloc(bytes ? bytes : 1);
    if (!dense) return nbcore_fail(c, NB_NOMEM, "nb_npy_write: %s: out of memory densifying %zu bytes", path, bytes);
    nb_code read = nb_read(x, dense, bytes);
    if (read) {
      free(dense);
      return nbcore_fail(c, read, "nb_npy_write: %s: cannot densify the IndexedSlices", path);
    }
    data = dense;
  }
  if (!data) {
    free(dense);
    return nbcore_fail(c, NB_INVALID, "nb_npy_write: %s: a symbolic tensor has no value (run it in a session)", path);
  }
  char header[NPY_MAX_HEADER];
  nb_code rc = write_file(c, path, header, format_header(x, header), data, bytes);
  free(dense);
  return rc;
}
