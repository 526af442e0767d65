/* .npy files: NumPy's own files (tests/golden/npy, written by tests/golden/make_npy.py) for
   every dtype, byte order and version, the files nabla refuses, hand-written headers, and
   round trips of every dtype at ranks 0 to 4. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, rmdir, unlink */
#include "tempdir.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef NB_NPY_GOLDEN_DIR
#error "tests/CMakeLists.txt defines NB_NPY_GOLDEN_DIR"
#endif

typedef tu_files fixture;

static const char *golden(fixture *f, const char *name) {
  snprintf(f->path, sizeof f->path, "%s/%s", NB_NPY_GOLDEN_DIR, name);
  return f->path;
}

static const char *temp_path(fixture *f, const char *name) {
  snprintf(f->path, sizeof f->path, "%s/%s", f->dir, name);
  return f->path;
}

/* Reads the golden file and checks its dtype, shape and values. */
static nb_tensor *check_golden(fixture *f, const char *name, nb_dtype t, int rank, const int64_t *shape,
                               const double *want) {
  nb_tensor *x = nb_npy_read(f->c, golden(f, name));
  if (!x) fail_msg("%s: %s", name, nb_error(f->c));
  tu_check(x, t, rank, shape, want, 0);
  return x;
}

/* Reads path expecting failure with code and a message naming the file and fragment. */
static void expect_read_error(fixture *f, const char *path, nb_code code, const char *fragment) {
  assert_null(nb_npy_read(f->c, path));
  tu_check_error(f->c, code, path, fragment);
}

/* ---- NumPy's files ---- */

static void test_golden_float(void **state) {
  fixture *f = *state;
  const double *six = TU_VALS(1.5, -2.0, 0.25, 3.0, (float)1e-3, -7.5);
  const char *f4[] = {"f4_le.npy", "f4_be.npy", "v2_f4.npy", "v3_f4.npy"};
  for (int i = 0; i < 4; i++) check_golden(f, f4[i], NB_F32, 2, TU_SHAPE(2, 3), six);
  check_golden(f, "f8_le.npy", NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(1.5, -2.0, 0.25, 3.0, 1e-3, -7.5));
  check_golden(f, "f8_be.npy", NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(1.5, -2.0, 0.25, 3.0, 1e-3, -7.5));
}

static void test_golden_int_and_bool(void **state) {
  fixture *f = *state;
  for (int be = 0; be < 2; be++) {
    check_golden(f, be ? "i4_be.npy" : "i4_le.npy", NB_I32, 1, TU_SHAPE(5),
                 TU_VALS(-2147483648.0, -1, 0, 7, 2147483647));
    nb_tensor *x = nb_npy_read(f->c, golden(f, be ? "i8_be.npy" : "i8_le.npy"));
    tu_check_shape(x, NB_I64, 2, TU_SHAPE(2, 2));
    const int64_t *v = nb_data(x);
    assert_true(v[0] == INT64_MIN && v[1] == 5 && v[2] == (int64_t)1 << 40 && v[3] == INT64_MAX);
  }
  check_golden(f, "b1.npy", NB_BOOL, 2, TU_SHAPE(2, 2), TU_VALS(1, 0, 0, 1));
  /* bytes 0, 2, 1, 255 viewed as bool: NumPy reads nonzero as True; nabla stores 1 */
  nb_tensor *b = check_golden(f, "b1_byte2.npy", NB_BOOL, 1, TU_SHAPE(4), TU_VALS(0, 1, 1, 1));
  assert_memory_equal(nb_data(b), ((const uint8_t[]){0, 1, 1, 1}), 4);
}

static void test_golden_widened(void **state) {
  fixture *f = *state;
  check_golden(f, "i1.npy", NB_I32, 1, TU_SHAPE(4), TU_VALS(-128, -1, 0, 127));
  check_golden(f, "u1.npy", NB_I32, 1, TU_SHAPE(4), TU_VALS(0, 1, 128, 255));
  check_golden(f, "i2_be.npy", NB_I32, 1, TU_SHAPE(4), TU_VALS(-32768, -2, 258, 32767));
  check_golden(f, "u2_le.npy", NB_I32, 1, TU_SHAPE(3), TU_VALS(0, 258, 65535));
  check_golden(f, "u4_be.npy", NB_I64, 1, TU_SHAPE(3), TU_VALS(0, 1, 4294967295.0));
}

static void test_golden_ranks(void **state) {
  fixture *f = *state;
  check_golden(f, "scalar_f8.npy", NB_F64, 0, NULL, TU_VALS(3.25));
  double want[24];
  for (int i = 0; i < 24; i++) want[i] = i;
  check_golden(f, "rank4_i4.npy", NB_I32, 4, TU_SHAPE(1, 2, 3, 4), want);
  nb_tensor *e = nb_npy_read(f->c, golden(f, "empty_f4.npy"));
  tu_check_shape(e, NB_F32, 2, TU_SHAPE(0, 5));
}

static void test_golden_refused(void **state) {
  fixture *f = *state;
  expect_read_error(f, golden(f, "fortran_f4.npy"), NB_UNIMPLEMENTED, "Fortran-order");
  expect_read_error(f, golden(f, "object.npy"), NB_DTYPE, "object (pickled");
  expect_read_error(f, golden(f, "complex64.npy"), NB_DTYPE, "dtype complex (descr '<c8')");
  expect_read_error(f, golden(f, "float16.npy"), NB_DTYPE, "dtype float16 (descr '<f2')");
  expect_read_error(f, golden(f, "unicode.npy"), NB_DTYPE, "dtype str (descr '<U2')");
  expect_read_error(f, golden(f, "uint64.npy"), NB_DTYPE, "dtype uint64");
  expect_read_error(f, golden(f, "structured.npy"), NB_DTYPE, "structured dtype");
  expect_read_error(f, golden(f, "rank9.npy"), NB_SHAPE, "rank more than 8");
  expect_read_error(f, golden(f, "truncated.npy"), NB_CORRUPT,
                    "truncated data: shape [2,3] of <f4 takes 24 bytes, the file has 21");
  expect_read_error(f, golden(f, "trailing.npy"), NB_CORRUPT, "1 bytes after the data");
  expect_read_error(f, golden(f, "bad_magic.npy"), NB_CORRUPT, "bad magic");
  expect_read_error(f, golden(f, "header_cut.npy"), NB_CORRUPT,
                    "truncated header: it takes 128 bytes, the file has 40");
}

/* ---- hand-written files ---- */

/* Writes raw bytes to a temporary file; returns its path. */
static const char *write_raw(fixture *f, const void *bytes, size_t n) {
  temp_path(f, "hand.npy");
  FILE *fp = fopen(f->path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(bytes, 1, n, fp), n);
  assert_int_equal(fclose(fp), 0);
  return f->path;
}

/* A version-1.0 file with header text dict (unpadded) and data[0..n); returns its path. */
static const char *write_npy(fixture *f, const char *dict, const void *data, size_t n) {
  uint8_t buf[1024];
  size_t len = strlen(dict);
  assert_true(10 + len + n <= sizeof buf);
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (uint8_t)len;
  buf[9] = (uint8_t)(len >> 8);
  memcpy(buf + 10, dict, len);
  memcpy(buf + 10 + len, data, n);
  return write_raw(f, buf, 10 + len + n);
}

static void test_header_syntax_accepted(void **state) {
  fixture *f = *state;
  const int32_t v[6] = {1, 2, 3, 4, 5, 6};
  const char *dicts[] = {
      "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }",
      "{\"shape\":(2,3),\"fortran_order\":False,\"descr\":\"<i4\"}",
      "{ 'fortran_order' : False ,\n\t'shape' : ( 2 , 3 , ) , 'descr' : '=i4' }   \n",
      "{'descr': '|i4', 'fortran_order': False, 'shape': (2L, 3L)}\n",
      "{'descr': 'i4', 'fortran_order': False, 'shape': (2, 3)}",
  };
  for (int i = 0; i < 5; i++) {
    nb_tensor *x = nb_npy_read(f->c, write_npy(f, dicts[i], v, sizeof v));
    if (!x) fail_msg("%s: %s", dicts[i], nb_error(f->c));
    tu_check(x, NB_I32, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6), 0);
  }
  nb_tensor *s = nb_npy_read(f->c, write_npy(f, "{'descr': '<i4', 'fortran_order': False, 'shape': ()}", v, 4));
  tu_check(s, NB_I32, 0, NULL, TU_VALS(1), 0);
  nb_tensor *one = nb_npy_read(f->c, write_npy(f, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,)}", v, 12));
  tu_check(one, NB_I32, 1, TU_SHAPE(3), TU_VALS(1, 2, 3), 0);
}

/* The header dict, with (a format for) the shape, and the message fragment it must give. */
typedef struct bad_dict {
  const char *dict, *fragment;
  nb_code code;
} bad_dict;

static void test_header_syntax_refused(void **state) {
  fixture *f = *state;
  const bad_dict cases[] = {
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (3)}", "(n) is a number, not a tuple", NB_CORRUPT},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': [3]}", "'shape' must be a tuple", NB_CORRUPT},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (3 1)}", "expected ',' or ')'", NB_CORRUPT},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (-3,)}", "expected a dim", NB_CORRUPT},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999999999999,)}", "dim too large", NB_CORRUPT},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (4611686018427387904, 4)}", "overflows a byte count",
       NB_CORRUPT},
      {"{'descr': '<i4', 'fortran_order': False}", "no key 'shape'", NB_CORRUPT},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (3,), 'x': 1}", "unknown key 'x'", NB_CORRUPT},
      {"{'descr': '<i4', 'descr': '<i4', 'shape': (3,)}", "key 'descr' given twice", NB_CORRUPT},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (3,)} x", "text after the dict", NB_CORRUPT},
      {"{'descr': '<i4' 'fortran_order': False, 'shape': (3,)}", "expected ',' or '}'", NB_CORRUPT},
      {"{'descr' '<i4', 'fortran_order': False, 'shape': (3,)}", "expected ':' after 'descr'", NB_CORRUPT},
      {"{'descr': '<i4', 'fortran_order': 0, 'shape': (3,)}", "must be True or False", NB_CORRUPT},
      {"{'descr': '<i4', 'fortran_order': Falsey, 'shape': (3,)}", "must be True or False", NB_CORRUPT},
      {"{'descr': '<x4', 'fortran_order': False, 'shape': (3,)}", "descr '<x4' is not a NumPy dtype", NB_CORRUPT},
      {"{'descr': '<f', 'fortran_order': False, 'shape': (3,)}", "descr '<f' is not a NumPy dtype", NB_CORRUPT},
      {"{'descr': '<f4x', 'fortran_order': False, 'shape': (3,)}", "descr '<f4x'", NB_CORRUPT},
      {"{'descr': '<i4\\n', 'fortran_order': False, 'shape': (3,)}", "escapes", NB_CORRUPT},
      {"{'descr': '<i4, 'fortran_order': False, 'shape': (3,)}", "descr '<i4, ' is not a NumPy dtype", NB_CORRUPT},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (3,)", "expected ',' or '}'", NB_CORRUPT},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (3,", "at byte 63: expected a dim", NB_CORRUPT},
      {"{'descr", "unterminated string", NB_CORRUPT},
      {"['descr', '<i4']", "expected '{'", NB_CORRUPT},
      {"{descr: '<i4'}", "expected a quoted string", NB_CORRUPT},
      {"", "expected '{'", NB_CORRUPT},
      {"{'descr': '<i4', 'fortran_order': True, 'shape': (3,)}", "Fortran-order", NB_UNIMPLEMENTED},
      {"{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (3,)}", "dtype datetime64", NB_DTYPE},
      {"{'descr': '|V4', 'fortran_order': False, 'shape': (3,)}", "dtype void", NB_DTYPE},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1)}", "rank more than 8", NB_SHAPE},
  };
  const int32_t v[3] = {1, 2, 3};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *path = write_npy(f, cases[i].dict, v, sizeof v);
    if (nb_npy_read(f->c, path)) fail_msg("%s: read", cases[i].dict);
    tu_check_error(f->c, cases[i].code, path, cases[i].fragment);
  }
}

static void test_prefix_refused(void **state) {
  fixture *f = *state;
  expect_read_error(f, write_raw(f, "", 0), NB_CORRUPT, "empty file");
  expect_read_error(f, write_raw(f, "\x93NUM", 4), NB_CORRUPT, "truncated: 4 bytes");
  expect_read_error(f, write_raw(f, "\x93NUMPY\x01\x00\x10", 9), NB_CORRUPT, "prefix of version 1.0 takes 10");
  expect_read_error(f, write_raw(f, "\x93NUMPY\x02\x00\x10\x00\x00", 11), NB_CORRUPT, "version 2.0 takes 12");
  expect_read_error(f, write_raw(f, "\x93NUMPY\x04\x00\x10\x00", 10), NB_CORRUPT, "version 4.0");
  expect_read_error(f, write_raw(f, "\x93NUMPY\x01\x01\x10\x00", 10), NB_CORRUPT, "version 1.1");
  expect_read_error(f, write_raw(f, "PK\x03\x04", 4), NB_CORRUPT, "bad magic");
  /* a version 2.0 header declaring 4 GiB: refused from the file's size, nothing allocated */
  expect_read_error(f, write_raw(f, "\x93NUMPY\x02\x00\xff\xff\xff\xff{", 13), NB_CORRUPT,
                    "truncated header: it takes 4294967307 bytes, the file has 13");
  expect_read_error(f, temp_path(f, "missing.npy"), NB_IO, "No such file");
  expect_read_error(f, f->dir, NB_IO, "not a regular file");
}

static void test_read_needs_eager_context(void **state) {
  fixture *f = *state;
  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g);
  assert_null(nb_npy_read(gc, golden(f, "f4_le.npy")));
  tu_check_error(gc, NB_INVALID, "needs an eager context", NULL);
  assert_null(nb_npy_read(f->c, NULL));
  tu_check_error(f->c, NB_INVALID, "NULL path", NULL);
  nb_ctx_free(gc);
  nb_graph_free(g);
}

/* ---- writing ---- */

/* Checks the written file's prefix and that its header is dict (padded to 64). */
static void check_written_header(fixture *f, const char *dict) {
  FILE *fp = fopen(f->path, "rb");
  assert_non_null(fp);
  uint8_t buf[512];
  size_t n = fread(buf, 1, sizeof buf, fp);
  fclose(fp);
  assert_true(n >= 64);
  assert_memory_equal(buf, "\x93NUMPY\x01\x00", 8);
  size_t total = 10 + (size_t)(buf[8] | buf[9] << 8);
  assert_int_equal(total % 64, 0);
  assert_true(total <= n);
  assert_int_equal(buf[total - 1], '\n');
  assert_memory_equal(buf + 10, dict, strlen(dict));
  for (size_t i = 10 + strlen(dict); i < total - 1; i++) assert_int_equal(buf[i], ' ');
}

static const int64_t round_trip_shapes[][4] = {{0}, {5}, {2, 3}, {2, 0, 3}, {2, 1, 3, 2}};

static void test_round_trip(void **state) {
  fixture *f = *state;
  const nb_dtype types[5] = {NB_F32, NB_F64, NB_I32, NB_I64, NB_BOOL};
  for (int t = 0; t < 5; t++)
    for (int rank = 0; rank <= 4; rank++) {
      const int64_t *shape = round_trip_shapes[rank];
      int64_t n = 1;
      for (int i = 0; i < rank; i++) n *= shape[i];
      double v[12];
      for (int64_t i = 0; i < n; i++) v[i] = types[t] == NB_BOOL ? (double)(i % 3 == 0) : 1.5 * (double)i - 4;
      if (types[t] == NB_F32 || types[t] == NB_F64) v[0] = -0.1; /* not exact in binary */
      nb_tensor *x = tu_make(f->c, types[t], rank, shape, v);
      assert_int_equal(nb_npy_write(f->c, x, temp_path(f, "rt.npy")), NB_OK);
      nb_tensor *y = nb_npy_read(f->c, f->path);
      if (!y) fail_msg("%s rank %d: %s", nb_dtype_name(types[t]), rank, nb_error(f->c));
      tu_check_shape(y, types[t], rank, shape);
      assert_memory_equal(nb_data(y), nb_data(x), (size_t)n * nb_dtype_size(types[t]));
    }
}

static void test_written_headers(void **state) {
  fixture *f = *state;
  const char *order = (const union {
                        uint16_t u;
                        uint8_t b[2];
                      }){.u = 1}
                              .b[0]
                          ? "<"
                          : ">";
  char want[128];
  nb_tensor *m = nb_tensor_from(f->c, NB_F32, 2, TU_SHAPE(2, 3), NULL);
  assert_int_equal(nb_npy_write(f->c, m, temp_path(f, "m.npy")), NB_OK);
  snprintf(want, sizeof want, "{'descr': '%sf4', 'fortran_order': False, 'shape': (2, 3), }", order);
  check_written_header(f, want);
  assert_int_equal(nb_npy_write(f->c, nb_scalar(f->c, NB_I64, 7), f->path), NB_OK);
  snprintf(want, sizeof want, "{'descr': '%si8', 'fortran_order': False, 'shape': (), }", order);
  check_written_header(f, want);
  assert_int_equal(nb_npy_write(f->c, nb_tensor_from(f->c, NB_BOOL, 1, TU_SHAPE(3), NULL), f->path), NB_OK);
  check_written_header(f, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }");
  /* a long header: rank 8, an 18-digit dim (a zero-size tensor) */
  int64_t big[8] = {0, 100000000000000000, 5, 1, 1, 1, 1, 1};
  nb_tensor *z = nb_tensor_from(f->c, NB_F64, 8, big, NULL);
  assert_int_equal(nb_npy_write(f->c, z, f->path), NB_OK);
  tu_check_shape(nb_npy_read(f->c, f->path), NB_F64, 8, big);
}

static void test_write_indexed_slices(void **state) {
  fixture *f = *state;
  nb_tensor *values = nb_tensor_from(f->c, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 10, 20));
  nb_tensor *indices = nb_tensor_from(f->c, NB_I32, 1, TU_SHAPE(2), (const int32_t[]){2, 2});
  nb_tensor *s = nb_indexed_slices(f->c, values, indices, TU_SHAPE(3, 2), 2);
  assert_int_equal(nb_npy_write(f->c, s, temp_path(f, "s.npy")), NB_OK);
  nb_tensor *y = nb_npy_read(f->c, f->path);
  tu_check(y, NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(0, 0, 0, 0, 11, 22), 0);
}

static void test_write_errors(void **state) {
  fixture *f = *state;
  nb_tensor *x = nb_scalar(f->c, NB_F32, 1);
  char path[600];
  snprintf(path, sizeof path, "%s/no/such/dir/x.npy", f->dir);
  assert_int_equal(nb_npy_write(f->c, x, path), NB_IO);
  tu_check_error(f->c, NB_IO, path, "cannot open for writing: No such file");
  if (access("/dev/full", W_OK) == 0) { /* every write fails with ENOSPC */
    assert_int_equal(nb_npy_write(f->c, x, "/dev/full"), NB_IO);
    tu_check_error(f->c, NB_IO, "/dev/full: write error", NULL);
  }
  assert_int_equal(nb_npy_write(f->c, NULL, path), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "NULL tensor", NULL);
  assert_int_equal(nb_npy_write(f->c, x, NULL), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "NULL path", NULL);
  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g);
  nb_tensor *p = nb_placeholder(gc, NB_F32, 1, TU_SHAPE(2), "p");
  assert_int_equal(nb_npy_write(gc, p, temp_path(f, "p.npy")), NB_INVALID);
  tu_check_error(gc, NB_INVALID, "symbolic tensor", NULL);
  nb_ctx_free(gc);
  nb_graph_free(g);
  nb_tensor *gone = nb_scalar(f->c, NB_F32, 2);
  nb_tensor_free(gone);
  assert_int_equal(nb_npy_write(f->c, gone, temp_path(f, "gone.npy")), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "released", NULL);
  /* a context already failed: nothing is written, its error stays */
  nb_set_error(f->c, NB_SHAPE, "earlier");
  assert_int_equal(nb_npy_write(f->c, x, temp_path(f, "later.npy")), NB_SHAPE);
  assert_int_equal(access(f->path, F_OK), -1);
  tu_check_error(f->c, NB_SHAPE, "earlier", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_golden_float, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_golden_int_and_bool, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_golden_widened, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_golden_ranks, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_golden_refused, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_header_syntax_accepted, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_header_syntax_refused, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_prefix_refused, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_read_needs_eager_context, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_round_trip, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_written_headers, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_write_indexed_slices, tu_files_setup, tu_files_teardown),
      cmocka_unit_test_setup_teardown(test_write_errors, tu_files_setup, tu_files_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
