/* IDX files and datasets: every element type raw and gzip-compressed, every malformed file,
   batches and shuffling on small generated files, and the real Fashion-MNIST files. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, rmdir, unlink */
#include "tempdir.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

typedef tu_files fixture;

/* Writes bytes[0..n) to dir/name, gzip-compressed when gz; returns the path in out. */
static const char *write_file(fixture *f, char out[512], const char *name, const void *bytes, size_t n, bool gz) {
  snprintf(out, 512, "%s/%s", f->dir, name);
  if (gz) {
    gzFile z = gzopen(out, "wb");
    assert_non_null(z);
    assert_int_equal(gzwrite(z, bytes, (unsigned)n), (int)n);
    assert_int_equal(gzclose(z), Z_OK);
  } else {
    FILE *fp = fopen(out, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(bytes, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
  }
  return out;
}

/* An IDX file image: header for (type, rank, dims) followed by data[0..n). Returns its size. */
static size_t idx_bytes(uint8_t *out, int type, int rank, const uint32_t *dims, const void *data, size_t n) {
  out[0] = out[1] = 0;
  out[2] = (uint8_t)type;
  out[3] = (uint8_t)rank;
  for (int i = 0; i < rank; i++)
    for (int b = 0; b < 4; b++) out[4 + 4 * i + b] = (uint8_t)(dims[i] >> (24 - 8 * b));
  memcpy(out + 4 + 4 * rank, data, n);
  return 4 + 4 * (size_t)rank + n;
}

/* Writes an IDX file to dir/name; returns its path, written to out (512 bytes). */
static const char *write_idx(fixture *f, char *out, const char *name, int type, int rank, const uint32_t *dims,
                             const void *data, size_t n, bool gz) {
  uint8_t buf[4096];
  assert_true(4 + 4 * (size_t)rank + n <= sizeof buf);
  return write_file(f, out, name, buf, idx_bytes(buf, type, rank, dims, data, n), gz);
}

#define DIMS(...) ((const uint32_t[]){__VA_ARGS__})

/* Reads path and checks the tensor's dtype, shape and values. */
static void check_read(fixture *f, const char *path, nb_dtype t, int rank, const int64_t *shape, const double *want) {
  nb_tensor *x = nb_idx_read(f->c, path);
  if (!x) fail_msg("%s", nb_error(f->c));
  tu_check(x, t, rank, shape, want, 0);
}

/* ---- element types, raw and gzip-compressed ---- */

static void test_read_each_type(void **state) {
  fixture *f = *state;
  for (int gz = 0; gz < 2; gz++) {
    const uint8_t ubytes[6] = {0, 1, 127, 128, 200, 255};
    check_read(f, write_idx(f, f->path, "ubyte", 0x08, 2, DIMS(2, 3), ubytes, 6, gz), NB_I32, 2, TU_SHAPE(2, 3),
               TU_VALS(0, 1, 127, 128, 200, 255));
    check_read(f, write_idx(f, f->path, "byte", 0x09, 1, DIMS(6), ubytes, 6, gz), NB_I32, 1, TU_SHAPE(6),
               TU_VALS(0, 1, 127, -128, -56, -1));
    const uint8_t shorts[6] = {0x01, 0x02, 0xff, 0xfe, 0x80, 0x00}; /* 258, -2, -32768 */
    check_read(f, write_idx(f, f->path, "short", 0x0B, 1, DIMS(3), shorts, 6, gz), NB_I32, 1, TU_SHAPE(3),
               TU_VALS(258, -2, -32768));
    const uint8_t ints[12] = {0x7f, 0xff, 0xff, 0xff, 0x80, 0, 0, 0, 0, 0, 0x01, 0x00};
    check_read(f, write_idx(f, f->path, "int", 0x0C, 3, DIMS(1, 3, 1), ints, 12, gz), NB_I32, 3, TU_SHAPE(1, 3, 1),
               TU_VALS(2147483647, -2147483648.0, 256));
    const uint8_t floats[8] = {0x3f, 0xc0, 0, 0, 0xc1, 0x20, 0, 0}; /* 1.5, -10 */
    check_read(f, write_idx(f, f->path, "float", 0x0D, 1, DIMS(2), floats, 8, gz), NB_F32, 1, TU_SHAPE(2),
               TU_VALS(1.5, -10));
    const uint8_t doubles[8] = {0x40, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18}; /* pi */
    check_read(f, write_idx(f, f->path, "double", 0x0E, 1, DIMS(1), doubles, 8, gz), NB_F64, 1, TU_SHAPE(1),
               TU_VALS(3.141592653589793));
  }
}

static void test_read_rank8_and_empty(void **state) {
  fixture *f = *state;
  const uint8_t two[2] = {7, 9};
  check_read(f, write_idx(f, f->path, "r8", 0x08, 8, DIMS(1, 1, 1, 2, 1, 1, 1, 1), two, 2, true), NB_I32, 8,
             TU_SHAPE(1, 1, 1, 2, 1, 1, 1, 1), TU_VALS(7, 9));
  nb_tensor *x = nb_idx_read(f->c, write_idx(f, f->path, "empty", 0x0D, 2, DIMS(0, 5), "", 0, false));
  tu_check_shape(x, NB_F32, 2, TU_SHAPE(0, 5));
}

/* ---- malformed files: NB_CORRUPT (or NB_IO) with a message naming the file ---- */

/* Reads the bytes as a file (raw and gzip-compressed) and expects code with fragment. */
static void expect_error(fixture *f, const uint8_t *bytes, size_t n, nb_code code, const char *fragment) {
  for (int gz = 0; gz < 2; gz++) {
    const char *path = write_file(f, f->path, gz ? "bad.gz" : "bad", bytes, n, gz);
    assert_null(nb_idx_read(f->c, path));
    tu_check_error(f->c, code, path, fragment);
  }
}

static void test_header_errors(void **state) {
  fixture *f = *state;
  expect_error(f, NULL, 0, NB_CORRUPT, "empty file");
  expect_error(f, (const uint8_t[]){0, 0, 8}, 3, NB_CORRUPT, "truncated header: 3 bytes");
  expect_error(f, (const uint8_t[]){1, 0, 8, 1, 0, 0, 0, 1, 5}, 9, NB_CORRUPT, "bad magic 0x01000801");
  expect_error(f, (const uint8_t[]){0, 2, 8, 1, 0, 0, 0, 1, 5}, 9, NB_CORRUPT, "bad magic");
  expect_error(f, (const uint8_t[]){0, 0, 0x0A, 1, 0, 0, 0, 1, 5}, 9, NB_CORRUPT, "bad type code 0x0a");
  expect_error(f, (const uint8_t[]){0, 0, 8, 0, 5}, 5, NB_CORRUPT, "rank 0 is outside 1..8");
  uint8_t rank9[4 + 36] = {0, 0, 8, 9};
  expect_error(f, rank9, sizeof rank9, NB_CORRUPT, "rank 9 is outside 1..8");
  expect_error(f, (const uint8_t[]){0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 1}, 12, NB_CORRUPT,
               "truncated header: 12 bytes, rank 3 needs 16");
}

static void test_data_errors(void **state) {
  fixture *f = *state;
  uint8_t buf[64];
  const uint8_t data[7] = {1, 2, 3, 4, 5, 6, 7};
  size_t n = idx_bytes(buf, 0x08, 2, DIMS(2, 3), data, 5);
  expect_error(f, buf, n, NB_CORRUPT, "truncated data: dims [2,3] of ubyte take 6 bytes, the file has 5");
  n = idx_bytes(buf, 0x0C, 1, DIMS(2), data, 7);
  expect_error(f, buf, n, NB_CORRUPT, "truncated data: dims [2] of int take 8 bytes, the file has 7");
  n = idx_bytes(buf, 0x08, 2, DIMS(2, 3), data, 7);
  expect_error(f, buf, n, NB_CORRUPT,
               "trailing bytes after the data: dims [2,3] of ubyte take 6 bytes, the file has more");
  /* 2^32-1 elements declared in a file of a few bytes: found without allocating them */
  n = idx_bytes(buf, 0x0E, 1, DIMS(0xFFFFFFFFu), data, 7);
  expect_error(f, buf, n, NB_CORRUPT, "more than a file of");
  /* (2^32-1)^8 elements: no byte count holds them */
  const uint32_t big[8] = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu,
                           0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu};
  n = idx_bytes(buf, 0x08, 8, big, data, 7);
  expect_error(f, buf, n, NB_CORRUPT, "overflow a byte count");
  /* nor (2^32-1)^2 elements per item, even for zero items (so rows * cols always fits) */
  n = idx_bytes(buf, 0x08, 3, DIMS(0, 0xFFFFFFFFu, 0xFFFFFFFFu), data, 0);
  expect_error(f, buf, n, NB_CORRUPT, "dims [0,4294967295,4294967295] of ubyte elements overflow");
}

/* Reads a whole small file into buf; returns its size. */
static size_t slurp(const char *path, uint8_t *buf, size_t cap) {
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  size_t n = fread(buf, 1, cap, fp);
  assert_true(n < cap);
  fclose(fp);
  return n;
}

static void test_damaged_gzip(void **state) {
  fixture *f = *state;
  uint8_t pixels[256];
  for (int i = 0; i < 256; i++) pixels[i] = (uint8_t)(i * 37);
  uint8_t gz[1024];
  size_t n = slurp(write_idx(f, f->path, "whole.gz", 0x08, 2, DIMS(16, 16), pixels, 256, true), gz, sizeof gz);
  /* the gzip stream cut short: the data ends early */
  const char *cut = write_file(f, f->path2, "cut.gz", gz, n / 2, false);
  assert_null(nb_idx_read(f->c, cut));
  tu_check_error(f->c, NB_CORRUPT, cut, "truncated data");
  /* a damaged CRC in the gzip trailer */
  gz[n - 6] ^= 0x55;
  const char *crc = write_file(f, f->path2, "crc.gz", gz, n, false);
  assert_null(nb_idx_read(f->c, crc));
  tu_check_error(f->c, NB_CORRUPT, crc, "corrupt gzip data");
}

static void test_io_errors(void **state) {
  fixture *f = *state;
  char missing[600];
  snprintf(missing, sizeof missing, "%s/no-such-file", f->dir);
  assert_null(nb_idx_read(f->c, missing));
  tu_check_error(f->c, NB_IO, missing, "cannot open");
  assert_null(nb_idx_read(f->c, f->dir));
  tu_check_error(f->c, NB_IO, f->dir, "not a regular file");
  assert_null(nb_idx_read(f->c, NULL));
  tu_check_error(f->c, NB_INVALID, "NULL path", NULL);
}

static void test_read_needs_eager_and_keeps_first_error(void **state) {
  fixture *f = *state;
  const char *path = write_idx(f, f->path, "ok", 0x08, 1, DIMS(1), (const uint8_t[]){3}, 1, false);
  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g);
  assert_null(nb_idx_read(gc, path));
  tu_check_error(gc, NB_INVALID, "nb_idx_read: needs an eager context", NULL);
  nb_ctx_free(gc);
  nb_graph_free(g);
  nb_set_error(f->c, NB_SHAPE, "earlier failure");
  assert_null(nb_idx_read(f->c, path));
  tu_check_error(f->c, NB_SHAPE, "earlier failure", NULL);
}

/* ---- datasets ---- */

#define ITEMS 5
#define ROWS 2
#define COLS 3

/* images and labels files where item i's pixels are 10 i + p (p the pixel index) and its
   label is 2 i; returns the dataset. */
static nb_dataset *small_dataset(fixture *f) {
  uint8_t pixels[ITEMS * ROWS * COLS], labels[ITEMS];
  for (int i = 0; i < ITEMS; i++) {
    labels[i] = (uint8_t)(2 * i);
    for (int p = 0; p < ROWS * COLS; p++) pixels[i * ROWS * COLS + p] = (uint8_t)(10 * i + p);
  }
  write_idx(f, f->path, "images", 0x08, 3, DIMS(ITEMS, ROWS, COLS), pixels, sizeof pixels, true);
  write_idx(f, f->path2, "labels", 0x08, 1, DIMS(ITEMS), labels, sizeof labels, false);
  nb_dataset *d = nb_dataset_idx(f->c, f->path, f->path2);
  if (!d) fail_msg("%s", nb_error(f->c));
  return d;
}

/* Checks a batch holds items[0..n) of small_dataset in the given images shape. */
static void check_batch(nb_tensor *images, nb_tensor *labels, const int *items, int n, int rank, const int64_t *shape) {
  tu_check_shape(images, NB_F32, rank, shape);
  tu_check_shape(labels, NB_I32, 1, TU_SHAPE(n));
  const float *px = nb_data(images);
  const int32_t *lb = nb_data(labels);
  for (int k = 0; k < n; k++) {
    assert_int_equal(lb[k], 2 * items[k]);
    for (int p = 0; p < ROWS * COLS; p++) assert_true(px[k * ROWS * COLS + p] == (float)(10 * items[k] + p) / 255.0f);
  }
}

static void test_dataset_batches(void **state) {
  fixture *f = *state;
  nb_dataset *d = small_dataset(f);
  assert_int_equal(nb_dataset_size(d), ITEMS);
  int64_t rows, cols;
  nb_dataset_image_dims(d, &rows, &cols);
  assert_int_equal(rows, ROWS);
  assert_int_equal(cols, COLS);
  nb_tensor *x, *y;
  assert_int_equal(nb_dataset_batch(f->c, d, 0, ITEMS, NB_IMAGES_NHWC, &x, &y), NB_OK);
  check_batch(x, y, (const int[]){0, 1, 2, 3, 4}, 5, 4, TU_SHAPE(5, ROWS, COLS, 1));
  assert_int_equal(nb_dataset_batch(f->c, d, 1, 3, NB_IMAGES_NCHW, &x, &y), NB_OK);
  check_batch(x, y, (const int[]){1, 2, 3}, 3, 4, TU_SHAPE(3, 1, ROWS, COLS));
  assert_int_equal(nb_dataset_batch(f->c, d, 3, 2, NB_IMAGES_FLAT, &x, &y), NB_OK);
  check_batch(x, y, (const int[]){3, 4}, 2, 2, TU_SHAPE(2, ROWS * COLS));
  assert_int_equal(nb_dataset_batch(f->c, d, 5, 0, NB_IMAGES_FLAT, &x, &y), NB_OK);
  tu_check_shape(x, NB_F32, 2, TU_SHAPE(0, ROWS * COLS));
  /* after a shuffle, batches follow the new order: seed 42 on 5 items gives 1 2 0 4 3 */
  assert_int_equal(nb_dataset_shuffle(d, 42), NB_OK);
  assert_int_equal(nb_dataset_batch(f->c, d, 0, ITEMS, NB_IMAGES_NHWC, &x, &y), NB_OK);
  check_batch(x, y, (const int[]){1, 2, 0, 4, 3}, 5, 4, TU_SHAPE(5, ROWS, COLS, 1));
  nb_dataset_free(d);
}

static void test_batch_errors(void **state) {
  fixture *f = *state;
  nb_dataset *d = small_dataset(f);
  nb_tensor *x = nb_scalar(f->c, NB_F32, 1), *y = x; /* failures set the outputs to NULL */
  assert_int_equal(nb_dataset_batch(f->c, d, 4, 2, NB_IMAGES_NHWC, &x, &y), NB_INVALID);
  assert_null(x);
  assert_null(y);
  tu_check_error(f->c, NB_INVALID, "items [4, 4 + 2) are outside the dataset's 5", NULL);
  assert_int_equal(nb_dataset_batch(f->c, d, -1, 2, NB_IMAGES_NHWC, &x, &y), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "items [-1, -1 + 2)", NULL);
  assert_int_equal(nb_dataset_batch(f->c, d, 0, -1, NB_IMAGES_NHWC, &x, &y), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "outside the dataset", NULL);
  assert_int_equal(nb_dataset_batch(f->c, d, 0, 1, (nb_image_layout)7, &x, &y), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "unknown image layout 7", NULL);
  assert_int_equal(nb_dataset_batch(f->c, NULL, 0, 1, NB_IMAGES_NHWC, &x, &y), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "NULL dataset", NULL);
  assert_int_equal(nb_dataset_batch(f->c, d, 0, 1, NB_IMAGES_NHWC, NULL, &y), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "NULL dataset or output", NULL);
  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g);
  assert_int_equal(nb_dataset_batch(gc, d, 0, 1, NB_IMAGES_NHWC, &x, &y), NB_INVALID);
  tu_check_error(gc, NB_INVALID, "nb_dataset_batch: needs an eager context", NULL);
  nb_ctx_free(gc);
  nb_graph_free(g);
  nb_set_error(f->c, NB_SHAPE, "earlier failure");
  assert_int_equal(nb_dataset_batch(f->c, d, 0, 1, NB_IMAGES_NHWC, &x, &y), NB_SHAPE);
  assert_null(x);
  tu_check_error(f->c, NB_SHAPE, "earlier failure", NULL);
  assert_int_equal(nb_dataset_batch(NULL, d, 0, 1, NB_IMAGES_NHWC, &x, &y), NB_INVALID);
  nb_dataset_free(d);
}

/* Loads a dataset from two files expected to be rejected with code and fragment. */
static void expect_dataset_error(fixture *f, const char *images, const char *labels, nb_code code, const char *named,
                                 const char *fragment) {
  assert_null(nb_dataset_idx(f->c, images, labels));
  tu_check_error(f->c, code, named, fragment);
}

static void test_dataset_errors(void **state) {
  fixture *f = *state;
  char images[512], labels[512], floats[512], flat[512], missing[512];
  uint8_t px[12] = {0}, lb[3] = {0};
  write_idx(f, images, "images", 0x08, 3, DIMS(2, 2, 3), px, 12, false);
  write_idx(f, labels, "labels3", 0x08, 1, DIMS(3), lb, 3, false);
  write_idx(f, floats, "floats", 0x0D, 3, DIMS(1, 1, 3), px, 12, false);
  write_idx(f, flat, "flat", 0x08, 2, DIMS(3, 4), px, 12, false);
  snprintf(missing, sizeof missing, "%s/missing", f->dir);
  expect_dataset_error(f, images, labels, NB_CORRUPT, images, "has 2 images but");
  expect_dataset_error(f, images, labels, NB_CORRUPT, labels, "has 3 labels");
  expect_dataset_error(f, floats, labels, NB_DTYPE, floats, "images [count, rows, cols] must be ubyte");
  expect_dataset_error(f, flat, labels, NB_SHAPE, flat, "must have rank 3, the file has dims [3,4]");
  expect_dataset_error(f, images, flat, NB_SHAPE, flat, "labels [count] must have rank 1");
  expect_dataset_error(f, images, floats, NB_DTYPE, floats, "labels [count] must be ubyte");
  expect_dataset_error(f, missing, labels, NB_IO, missing, "cannot open");
  expect_dataset_error(f, images, missing, NB_IO, missing, "cannot open");
  /* a context already in error keeps it and makes nothing */
  nb_set_error(f->c, NB_SHAPE, "earlier failure");
  assert_null(nb_dataset_idx(f->c, images, images));
  assert_null(nb_fashion_mnist(f->c, f->dir, true));
  tu_check_error(f->c, NB_SHAPE, "earlier failure", NULL);
}

/* ---- shuffling ---- */

/* The dataset's order, read back through a batch of labels (small_dataset's label is 2 i). */
static void batch_order(fixture *f, nb_dataset *d, int *order) {
  nb_tensor *x, *y;
  assert_int_equal(nb_dataset_batch(f->c, d, 0, nb_dataset_size(d), NB_IMAGES_FLAT, &x, &y), NB_OK);
  for (int64_t i = 0; i < nb_dataset_size(d); i++) order[i] = (int)nb_item(y, i) / 2;
  nb_tensor_free(x);
  nb_tensor_free(y);
}

static void test_shuffle_reproducible(void **state) {
  fixture *f = *state;
  nb_dataset *d = small_dataset(f);
  int a[ITEMS], b[ITEMS];
  /* from tests/golden/shuffle_order.py 5 42 and 5 0 */
  const int seed42[ITEMS] = {1, 2, 0, 4, 3}, seed0[ITEMS] = {2, 3, 1, 4, 0};
  assert_int_equal(nb_dataset_shuffle(d, 42), NB_OK);
  batch_order(f, d, a);
  assert_memory_equal(a, seed42, sizeof a);
  /* the order depends on the seed alone, not on earlier shuffles */
  assert_int_equal(nb_dataset_shuffle(d, 0), NB_OK);
  batch_order(f, d, b);
  assert_memory_equal(b, seed0, sizeof b);
  assert_int_equal(nb_dataset_shuffle(d, 42), NB_OK);
  batch_order(f, d, b);
  assert_memory_equal(b, seed42, sizeof b);
  assert_int_equal(nb_dataset_shuffle(NULL, 1), NB_INVALID);
  nb_dataset_free(d);
}

/* Shuffles of 1000 items are permutations, different for different seeds. */
static void test_shuffle_permutes(void **state) {
  fixture *f = *state;
  enum { N = 1000 };
  static uint8_t pixels[N][2], labels[N];
  for (int i = 0; i < N; i++) { /* item i's two pixels spell i in base 256 */
    pixels[i][0] = (uint8_t)(i / 256);
    pixels[i][1] = (uint8_t)(i % 256);
  }
  write_idx(f, f->path, "many-images", 0x08, 3, DIMS(N, 1, 2), pixels, sizeof pixels, true);
  write_idx(f, f->path2, "many-labels", 0x08, 1, DIMS(N), labels, N, true);
  nb_dataset *d = nb_dataset_idx(f->c, f->path, f->path2);
  assert_non_null(d);
  int seen[N], first[16];
  for (int s = 0; s < 16; s++) {
    assert_int_equal(nb_dataset_shuffle(d, (uint64_t)s * 0x9E3779B97F4A7C15u), NB_OK);
    nb_tensor *x, *y;
    assert_int_equal(nb_dataset_batch(f->c, d, 0, N, NB_IMAGES_FLAT, &x, &y), NB_OK);
    memset(seen, 0, sizeof seen);
    for (int k = 0; k < N; k++) {
      int item = (int)lround(nb_item(x, 2 * k) * 255) * 256 + (int)lround(nb_item(x, 2 * k + 1) * 255);
      assert_in_range(item, 0, N - 1);
      seen[item]++;
      if (k == 0) first[s] = item;
    }
    for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
    nb_tensor_free(x);
    nb_tensor_free(y);
  }
  int distinct = 0;
  for (int s = 0; s < 16; s++) {
    bool repeat = false;
    for (int t = 0; t < s; t++) repeat |= first[t] == first[s];
    distinct += !repeat;
  }
  assert_true(distinct >= 12); /* 16 draws of a first item out of 1000 rarely collide */
  nb_dataset_free(d);
}

/* ---- the Fashion-MNIST helper on generated files ---- */

/* Writes dir/<set>-images-idx3-ubyte.gz ([2, rows, cols]) and the labels file (label, 0). */
static void write_fashion_files(fixture *f, const char *set, uint32_t rows, int label) {
  char name[64];
  uint8_t px[2 * 28 * 28] = {0};
  snprintf(name, sizeof name, "%s-images-idx3-ubyte.gz", set);
  write_idx(f, f->path, name, 0x08, 3, DIMS(2, rows, 28), px, 2 * rows * 28, true);
  snprintf(name, sizeof name, "%s-labels-idx1-ubyte.gz", set);
  write_idx(f, f->path, name, 0x08, 1, DIMS(2), (const uint8_t[]){(uint8_t)label, 0}, 2, true);
}

static void test_fashion_mnist_checks(void **state) {
  fixture *f = *state;
  write_fashion_files(f, "train", 28, 9);
  write_fashion_files(f, "t10k", 28, 10);
  nb_dataset *d = nb_fashion_mnist(f->c, f->dir, true);
  assert_non_null(d);
  assert_int_equal(nb_dataset_size(d), 2);
  nb_dataset_free(d);
  assert_null(nb_fashion_mnist(f->c, f->dir, false));
  tu_check_error(f->c, NB_CORRUPT, "t10k-labels-idx1-ubyte.gz: label 10 of item 0", "not a Fashion-MNIST class 0..9");
  write_fashion_files(f, "t10k", 27, 1);
  assert_null(nb_fashion_mnist(f->c, f->dir, false));
  tu_check_error(f->c, NB_CORRUPT, "t10k-images-idx3-ubyte.gz: Fashion-MNIST images are 28x28", "these are 27x28");
  char missing[600];
  snprintf(missing, sizeof missing, "%s/none", f->dir);
  assert_null(nb_fashion_mnist(f->c, missing, true));
  tu_check_error(f->c, NB_IO, "none/train-images-idx3-ubyte.gz", "cannot open");
  char *long_dir = malloc(5000);
  assert_non_null(long_dir);
  memset(long_dir, 'a', 4999);
  long_dir[4999] = '\0';
  assert_null(nb_fashion_mnist(f->c, long_dir, true));
  tu_check_error(f->c, NB_INVALID, "directory name too long", NULL);
  free(long_dir);
}

/* ---- the real files (Debian's dataset-fashion-mnist) ---- */

static nb_dataset *real_fashion_mnist(nb_ctx *c, bool train) {
  struct stat st;
  if (stat(NB_FASHION_MNIST_DIR, &st) != 0)
    fail_msg("%s is missing: run scripts/deps.sh (it installs dataset-fashion-mnist)", NB_FASHION_MNIST_DIR);
  nb_dataset *d = nb_fashion_mnist(c, NULL, train);
  if (!d) fail_msg("%s", nb_error(c));
  return d;
}

/* Counts labels per class over the whole dataset; checks the first ten labels. */
static void check_real_labels(nb_ctx *c, nb_dataset *d, int per_class, const int *first10) {
  nb_tensor *x, *y;
  assert_int_equal(nb_dataset_batch(c, d, 0, nb_dataset_size(d), NB_IMAGES_FLAT, &x, &y), NB_OK);
  int counts[10] = {0};
  for (int64_t i = 0; i < nb_dataset_size(d); i++) counts[(int)nb_item(y, i)]++;
  for (int k = 0; k < 10; k++) assert_int_equal(counts[k], per_class);
  for (int i = 0; i < 10; i++) assert_int_equal(nb_item(y, i), first10[i]);
  nb_tensor_free(x);
  nb_tensor_free(y);
}

static void test_real_fashion_mnist(void **state) {
  fixture *f = *state;
  nb_dataset *train = real_fashion_mnist(f->c, true), *test = real_fashion_mnist(f->c, false);
  assert_int_equal(nb_dataset_size(train), 60000);
  assert_int_equal(nb_dataset_size(test), 10000);
  int64_t rows, cols;
  nb_dataset_image_dims(train, &rows, &cols);
  assert_int_equal(rows, 28);
  assert_int_equal(cols, 28);
  /* the dataset's documented first items: an ankle boot (9), then t-shirts (0) ... */
  check_real_labels(f->c, train, 6000, (const int[]){9, 0, 0, 3, 0, 2, 7, 2, 5, 5});
  check_real_labels(f->c, test, 1000, (const int[]){9, 2, 1, 1, 6, 1, 4, 6, 5, 7});
  /* the first training image's pixels add up to 76247 (summed with Python's gzip module) */
  nb_tensor *x, *y;
  assert_int_equal(nb_dataset_batch(f->c, train, 0, 1, NB_IMAGES_NHWC, &x, &y), NB_OK);
  tu_check_shape(x, NB_F32, 4, TU_SHAPE(1, 28, 28, 1));
  double sum = 0;
  for (int p = 0; p < 784; p++) sum += round(nb_item(x, p) * 255);
  assert_true(sum == 76247);
  nb_dataset_free(train);
  nb_dataset_free(test);
  /* the generic reader agrees */
  nb_tensor *labels = nb_idx_read(f->c, NB_FASHION_MNIST_DIR "/t10k-labels-idx1-ubyte.gz");
  tu_check_shape(labels, NB_I32, 1, TU_SHAPE(10000));
  assert_int_equal(nb_item(labels, 1), 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_read_each_type, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_read_rank8_and_empty, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_header_errors, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_data_errors, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_damaged_gzip, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_io_errors, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_read_needs_eager_and_keeps_first_error, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_dataset_batches, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_batch_errors, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_dataset_errors, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_shuffle_reproducible, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_shuffle_permutes, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_fashion_mnist_checks, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_real_fashion_mnist, tu_files_setup, tu_files_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
