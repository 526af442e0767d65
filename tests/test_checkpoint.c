/* Checkpoints in TF's V2 format: CRC-32C, round trips of every dtype and rank 0-4 (bit
   exact), listing, keys, errors (corrupt and truncated files, shape and dtype mismatches,
   missing keys and files) that restore nothing, saves killed at random moments, and
   training resumed bit-exactly in a new process. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, fork, execv, kill, nanosleep */
#include "tempdir.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../src/io/table.h"
#include "golden/ckpt_golden.h"

static char self_path[4096];

typedef struct fixture {
  char dir[256];
  char prefix[300];
  nb_ctx *c;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (!f) return -1;
  if (!tu_make_temp_dir(f->dir, sizeof f->dir)) return -1;
  snprintf(f->prefix, sizeof f->prefix, "%s/model", f->dir);
  f->c = nb_eager_new();
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
  int rc = system(cmd);
  nb_ctx_free(f->c);
  free(f);
  return rc == 0 ? 0 : -1;
}

static char *path_of(const fixture *f, const char *suffix) {
  static char buf[512];
  snprintf(buf, sizeof buf, "%s%s", f->prefix, suffix);
  return buf;
}

/* ---- CRC-32C ---------------------------------------------------------------------------------- */

static void test_crc32c_vectors(void **state) {
  (void)state;
  assert_int_equal(nbio_crc32c(0, "123456789", 9), 0xE3069283u); /* the standard check value */
  assert_int_equal(nbio_crc32c(0, "", 0), 0);
  uint8_t zeros[32] = {0}, ones[32];
  memset(ones, 0xff, sizeof ones);
  assert_int_equal(nbio_crc32c(0, zeros, 32), 0x8A9136AAu); /* RFC 3720's test vectors */
  assert_int_equal(nbio_crc32c(0, ones, 32), 0x62A8AB43u);
  assert_int_equal(nbio_crc32c(nbio_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u); /* continues */
  assert_int_equal(nbio_crc32c_mask(0), 0xa282ead8u);
  assert_int_equal(nbio_crc32c_mask(0x00018000u), 0x00000003u + 0xa282ead8u); /* rotate right by 15 */
}

/* The definition, one bit at a time: the reference both fast paths must match. */
static uint32_t crc32c_bitwise(uint32_t crc, const uint8_t *p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; i++) {
    crc ^= p[i];
    for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

/* The instruction and slicing-by-8 paths agree with the definition at every alignment,
   every length around their 8-byte steps, and when continued from a split. */
static void test_crc32c_paths_agree(void **state) {
  (void)state;
  uint8_t buf[600];
  uint32_t seed = 7;
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
  for (size_t start = 0; start < 9; start++)
    for (size_t n = 0; n + start <= sizeof buf; n += n < 40 ? 1 : 37) {
      uint32_t want = crc32c_bitwise(0, buf + start, n);
      assert_int_equal(nbio_crc32c(0, buf + start, n), want);
      assert_int_equal(nbio_crc32c_portable(0, buf + start, n), want);
      size_t half = n / 3;
      assert_int_equal(nbio_crc32c(nbio_crc32c(0, buf + start, half), buf + start + half, n - half), want);
      assert_int_equal(nbio_crc32c_portable(nbio_crc32c_portable(0, buf + start, half), buf + start + half, n - half),
                       want);
    }
}

/* ---- variables ------------------------------------------------------------------------------- */

#define NVARS 5
static const char *const var_names[NVARS] = {"scalar", "dense/kernel", "counts", "big/ids", "mask"};
static const nb_dtype var_dtypes[NVARS] = {NB_F32, NB_F64, NB_I32, NB_I64, NB_BOOL};
static const int var_ranks[NVARS] = {0, 1, 2, 3, 4};
static const int64_t var_shapes[NVARS][4] = {{0}, {3}, {2, 3}, {2, 1, 2}, {1, 2, 2, 2}};

/* Variables of every dtype and rank 0-4, element i of variable k holding seed + 7k + i
   (floats also odd bit patterns: -0, NaN, the smallest subnormal). */
static void make_vars(nb_ctx *c, double seed, nb_variable **v) {
  for (int k = 0; k < NVARS; k++) {
    double vals[16];
    for (int i = 0; i < 16; i++) vals[i] = seed + 7 * k + i;
    if (var_dtypes[k] == NB_F64) vals[0] = -0.0, vals[1] = NAN, vals[2] = 0x1p-1074;
    if (var_dtypes[k] == NB_BOOL)
      for (int i = 0; i < 16; i++) vals[i] = ((int)seed + i) % 3 == 0;
    v[k] = nb_variable_new(c, tu_make(c, var_dtypes[k], var_ranks[k], var_shapes[k], vals), true, var_names[k]);
    assert_non_null(v[k]);
  }
}

static size_t var_bytes(const nb_variable *v) {
  size_t n = nb_dtype_size(nb_variable_dtype(v));
  for (int d = 0; d < nb_variable_rank(v); d++) n *= (size_t)nb_variable_shape(v)[d];
  return n;
}

static bool same_bits(nb_variable *const *a, nb_variable *const *b, int n) {
  for (int k = 0; k < n; k++)
    if (var_bytes(a[k]) != var_bytes(b[k]) || memcmp(nb_variable_data(a[k]), nb_variable_data(b[k]), var_bytes(a[k])))
      return false;
  return true;
}

static void free_vars(nb_variable **v, int n) {
  for (int k = 0; k < n; k++) nb_variable_free(v[k]);
}

static void test_round_trip_every_dtype_and_rank(void **state) {
  fixture *f = *state;
  nb_variable *saved[NVARS], *fresh[NVARS];
  make_vars(f->c, 1, saved);
  make_vars(f->c, 100, fresh);
  assert_false(same_bits(saved, fresh, NVARS));
  assert_int_equal(nb_checkpoint_save(f->c, f->prefix, saved, NULL, NVARS, NULL), NB_OK);
  assert_int_equal(nb_checkpoint_restore(f->c, f->prefix, fresh, NULL, NVARS, NULL), NB_OK);
  assert_true(same_bits(saved, fresh, NVARS));
  /* no temporary file is left behind */
  assert_int_equal(access(path_of(f, ".index.tmp"), F_OK), -1);
  assert_int_equal(access(path_of(f, ".data-00000-of-00001.tmp"), F_OK), -1);
  free_vars(saved, NVARS);
  free_vars(fresh, NVARS);
}

static void test_list(void **state) {
  fixture *f = *state;
  nb_variable *v[NVARS];
  make_vars(f->c, 1, v);
  assert_int_equal(nb_checkpoint_save(f->c, f->prefix, v, NULL, NVARS, NULL), NB_OK);
  nb_checkpoint_entry *e;
  int n;
  assert_int_equal(nb_checkpoint_list(f->c, f->prefix, &e, &n), NB_OK);
  assert_int_equal(n, NVARS);
  static const int order[NVARS] = {3, 2, 1, 4, 0}; /* big/ids counts dense/kernel mask scalar */
  for (int i = 0; i < n; i++) {
    int k = order[i];
    assert_string_equal(e[i].key, var_names[k]);
    assert_int_equal(e[i].dtype, var_dtypes[k]);
    assert_int_equal(e[i].rank, var_ranks[k]);
    for (int d = 0; d < e[i].rank; d++) assert_int_equal(e[i].shape[d], var_shapes[k][d]);
  }
  nb_checkpoint_list_free(e, n);
  free_vars(v, NVARS);
}

static void test_explicit_keys(void **state) {
  fixture *f = *state;
  nb_variable *saved[NVARS], *fresh[NVARS];
  const char *keys[NVARS] = {"a/.ATTRIBUTES/VARIABLE_VALUE", "b/.ATTRIBUTES/VARIABLE_VALUE", "c", "d", "e"};
  make_vars(f->c, 1, saved);
  make_vars(f->c, 50, fresh);
  assert_int_equal(nb_checkpoint_save(f->c, f->prefix, saved, keys, NVARS, NULL), NB_OK);
  /* by name the keys are not there */
  assert_int_equal(nb_checkpoint_restore(f->c, f->prefix, fresh, NULL, NVARS, NULL), NB_NOT_FOUND);
  assert_non_null(strstr(nb_error(f->c), "no tensor 'scalar'"));
  nb_clear_error(f->c);
  assert_int_equal(nb_checkpoint_restore(f->c, f->prefix, fresh, keys, NVARS, NULL), NB_OK);
  assert_true(same_bits(saved, fresh, NVARS));
  /* a repeated or empty key is refused */
  const char *twice[2] = {"k", "k"}, *empty[1] = {""};
  assert_int_equal(nb_checkpoint_save(f->c, f->prefix, saved, twice, 2, NULL), NB_INVALID);
  nb_clear_error(f->c);
  assert_int_equal(nb_checkpoint_save(f->c, f->prefix, saved, empty, 1, NULL), NB_INVALID);
  nb_clear_error(f->c);
  free_vars(saved, NVARS);
  free_vars(fresh, NVARS);
}

/* A restore gives the variable a new value the way an assign does: a read taken before
   keeps the old one, reads after see the new, and a second restore works the same. */
static void test_restore_leaves_earlier_reads_alone(void **state) {
  fixture *f = *state;
  const char *key[1] = {"w"};
  nb_variable *saved[1] = {nb_variable_new(f->c, tu_make(f->c, NB_F32, 1, TU_SHAPE(2), TU_VALS(5, 6)), true, "s")};
  nb_variable *v[1] = {nb_variable_new(f->c, tu_make(f->c, NB_F32, 1, TU_SHAPE(2), TU_VALS(1, 2)), true, "v")};
  assert_int_equal(nb_checkpoint_save(f->c, f->prefix, saved, key, 1, NULL), NB_OK);
  for (int round = 0; round < 2; round++) {
    nb_tensor *before = nb_variable_read(f->c, v[0]);
    assert_int_equal(nb_checkpoint_restore(f->c, f->prefix, v, key, 1, NULL), NB_OK);
    tu_check_vals(before, round == 0 ? TU_VALS(1, 2) : TU_VALS(5, 6), 0);
    tu_check_vals(nb_variable_read(f->c, v[0]), TU_VALS(5, 6), 0);
  }
  nb_variable_free(saved[0]);
  nb_variable_free(v[0]);
}

/* ---- errors ------------------------------------------------------------------------------------ */

static size_t file_size(const char *path) {
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  return (size_t)st.st_size;
}

static void flip_byte(const char *path, size_t at) {
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  uint8_t b;
  assert_int_equal(pread(fd, &b, 1, (off_t)at), 1);
  b ^= 0x5a;
  assert_int_equal(pwrite(fd, &b, 1, (off_t)at), 1);
  close(fd);
}

/* Restoring into variables of seed 100 fails with code, naming what, and changes nothing. */
static void expect_restore_fails(fixture *f, nb_code code, const char *what) {
  nb_variable *v[NVARS], *before[NVARS];
  make_vars(f->c, 100, v);
  make_vars(f->c, 100, before);
  nb_code got = nb_checkpoint_restore(f->c, f->prefix, v, NULL, NVARS, NULL);
  if (got != code || !strstr(nb_error(f->c), what))
    fail_msg("expected %s naming '%s', got %s: %s", nb_code_name(code), what, nb_code_name(got), nb_error(f->c));
  assert_true(same_bits(v, before, NVARS));
  nb_clear_error(f->c);
  free_vars(v, NVARS);
  free_vars(before, NVARS);
}

static void save_seed(fixture *f, double seed) {
  nb_variable *v[NVARS];
  make_vars(f->c, seed, v);
  assert_int_equal(nb_checkpoint_save(f->c, f->prefix, v, NULL, NVARS, NULL), NB_OK);
  free_vars(v, NVARS);
}

/* Flips each byte of path but those in [skip_from, skip_to) in turn: every flip makes the
   restore fail with NB_CORRUPT naming what. */
static void flip_each_byte(fixture *f, const char *path, size_t skip_from, size_t skip_to, const char *what) {
  size_t n = file_size(path);
  for (size_t at = 0; at < n; at++) {
    if (at >= skip_from && at < skip_to) continue;
    flip_byte(path, at);
    expect_restore_fails(f, NB_CORRUPT, what);
    flip_byte(path, at);
  }
}

/* Where the footer's four varint handles end (its zero padding starts). */
static size_t footer_handles_end(const char *path, size_t n) {
  uint8_t footer[48];
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, footer, 48, (off_t)(n - 48)), 48);
  close(fd);
  size_t at = 0;
  for (int varints = 0; varints < 4; at++)
    if (!(footer[at] & 0x80)) varints++;
  return n - 48 + at;
}

/* Every byte of the index but the footer's zero padding is checked: by a block CRC, or
   (the footer's handles, the magic) by the blocks they must point at. */
static void test_corrupt_index_bytes(void **state) {
  fixture *f = *state;
  save_seed(f, 1);
  char index[512];
  strcpy(index, path_of(f, ".index"));
  size_t n = file_size(index);
  flip_each_byte(f, index, footer_handles_end(index, n), n - 8, index);
}

static void test_corrupt_data_bytes(void **state) {
  fixture *f = *state;
  save_seed(f, 1);
  char data[512];
  strcpy(data, path_of(f, ".data-00000-of-00001"));
  flip_each_byte(f, data, 0, 0, "CRC mismatch");
  /* the message names the file and the tensor: the data starts with big/ids */
  flip_byte(data, 0);
  expect_restore_fails(f, NB_CORRUPT, "data-00000-of-00001: tensor 'big/ids'");
}

static void test_truncated_files(void **state) {
  fixture *f = *state;
  save_seed(f, 1);
  char data[512], index[512];
  strcpy(data, path_of(f, ".data-00000-of-00001"));
  strcpy(index, path_of(f, ".index"));
  assert_int_equal(truncate(data, (off_t)file_size(data) - 1), 0);
  expect_restore_fails(f, NB_CORRUPT, "past the end of the data");
  save_seed(f, 1);
  size_t n = file_size(index);
  assert_int_equal(truncate(index, (off_t)n - 1), 0);
  expect_restore_fails(f, NB_CORRUPT, index);
  assert_int_equal(truncate(index, 10), 0);
  expect_restore_fails(f, NB_CORRUPT, "truncated");
}

static void test_mismatch_restores_nothing(void **state) {
  fixture *f = *state;
  save_seed(f, 1);
  nb_variable *v[NVARS], *before[NVARS];
  make_vars(f->c, 100, v);
  make_vars(f->c, 100, before);
  /* the last variable (in key order: "scalar") has another shape, then another dtype */
  nb_variable *saved_scalar = v[0];
  v[0] = nb_variable_new(f->c, tu_make(f->c, NB_F32, 1, TU_SHAPE(2), TU_VALS(5, 6)), true, "scalar");
  assert_int_equal(nb_checkpoint_restore(f->c, f->prefix, v, NULL, NVARS, NULL), NB_SHAPE);
  assert_non_null(strstr(nb_error(f->c), "tensor 'scalar' has shape [], its variable [2]"));
  nb_clear_error(f->c);
  nb_variable_free(v[0]);
  v[0] = nb_variable_new(f->c, nb_scalar(f->c, NB_F64, 3), true, "scalar");
  assert_int_equal(nb_checkpoint_restore(f->c, f->prefix, v, NULL, NVARS, NULL), NB_DTYPE);
  assert_non_null(strstr(nb_error(f->c), "tensor 'scalar' is float32, its variable float64"));
  nb_clear_error(f->c);
  nb_variable_free(v[0]);
  v[0] = saved_scalar;
  assert_true(same_bits(v, before, NVARS));
  free_vars(v, NVARS);
  free_vars(before, NVARS);
}

static void test_missing_files(void **state) {
  fixture *f = *state;
  expect_restore_fails(f, NB_IO, "model.index");
  save_seed(f, 1);
  assert_int_equal(unlink(path_of(f, ".data-00000-of-00001")), 0);
  expect_restore_fails(f, NB_IO, "model.data-00000-of-00001");
  nb_variable *v[NVARS];
  make_vars(f->c, 1, v);
  assert_int_equal(nb_checkpoint_save(f->c, "/nonexistent-dir/model", v, NULL, NVARS, NULL), NB_IO);
  assert_non_null(strstr(nb_error(f->c), "/nonexistent-dir/model"));
  nb_clear_error(f->c);
  free_vars(v, NVARS);
}

/* ---- killed saves ------------------------------------------------------------------------------ */

#define KILL_ROUNDS 20
#define KILL_ELEMS 256

/* Two variables whose every element is k. */
static void make_filled(nb_ctx *c, int64_t k, nb_variable **v) {
  static float a[KILL_ELEMS];
  static int64_t b[KILL_ELEMS / 4];
  for (int i = 0; i < KILL_ELEMS; i++) a[i] = (float)k;
  for (int i = 0; i < KILL_ELEMS / 4; i++) b[i] = k;
  v[0] = nb_variable_new(c, nb_tensor_from(c, NB_F32, 1, TU_SHAPE(KILL_ELEMS), a), true, "a");
  v[1] = nb_variable_new(c, nb_tensor_from(c, NB_I64, 2, TU_SHAPE(4, KILL_ELEMS / 16), b), true, "b");
}

/* The k all elements of both variables hold; -1 when they are not all one value. */
static int64_t filled_value(nb_variable *const *v) {
  const float *a = nb_variable_data(v[0]);
  const int64_t *b = nb_variable_data(v[1]);
  for (int i = 0; i < KILL_ELEMS; i++)
    if (a[i] != (float)b[0]) return -1;
  for (int i = 0; i < KILL_ELEMS / 4; i++)
    if (b[i] != b[0]) return -1;
  return b[0];
}

static void save_filled(fixture *f, const char *prefix, int64_t k) {
  nb_variable *v[2];
  make_filled(f->c, k, v);
  assert_int_equal(nb_checkpoint_save(f->c, prefix, v, NULL, 2, NULL), NB_OK);
  free_vars(v, 2);
}

static int64_t restore_filled(fixture *f) {
  nb_variable *v[2];
  make_filled(f->c, -7, v);
  nb_code code = nb_checkpoint_restore(f->c, f->prefix, v, NULL, 2, NULL);
  if (code != NB_OK) fail_msg("%s", nb_error(f->c));
  int64_t k = filled_value(v);
  free_vars(v, 2);
  return k;
}

/* The child: saves k = first, first + 1, ... under prefix until killed. */
static int save_forever(const char *prefix, const char *first) {
  nb_ctx *c = nb_eager_new();
  for (int64_t k = atoll(first);; k++) {
    nb_variable *v[2];
    make_filled(c, k, v);
    if (nb_checkpoint_save(c, prefix, v, NULL, 2, NULL) != NB_OK) {
      fprintf(stderr, "%s\n", nb_error(c));
      return 1;
    }
    free_vars(v, 2);
  }
}

static pid_t spawn_self(const char *mode, const char *a, const char *b) {
  pid_t pid = fork();
  if (pid == 0) {
    execl(self_path, self_path, mode, a, b, (char *)NULL);
    _exit(127);
  }
  assert_true(pid > 0);
  return pid;
}

/* A child saving in a loop, SIGKILLed at random moments: the checkpoint stays readable and
   holds one save's values (never a mix), and never goes back to an older save. */
static void test_killed_saves_leave_a_whole_checkpoint(void **state) {
  fixture *f = *state;
  save_filled(f, f->prefix, 0);
  srand(12345);
  int64_t last = 0;
  for (int round = 0; round < KILL_ROUNDS; round++) {
    char first[32];
    snprintf(first, sizeof first, "%lld", (long long)last + 1);
    pid_t pid = spawn_self("save-forever", f->prefix, first);
    struct timespec delay = {0, (long)(rand() % 40000) * 1000L}; /* up to 40 ms */
    nanosleep(&delay, NULL);
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status)); /* killed while saving, not failed */
    int64_t k = restore_filled(f);
    if (k < last) fail_msg("round %d: restored save %lld after save %lld", round, (long long)k, (long long)last);
    last = k;
  }
}

/* A save killed between its two renames: the new data beside the old index, the new index
   whole in PREFIX.index.tmp. Readers take the new index; the next save puts it in place
   before writing its own temporary files. */
static void copy_file(const char *from, const char *to) {
  char cmd[1300];
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
  assert_int_equal(system(cmd), 0);
}

static void test_save_killed_between_renames(void **state) {
  fixture *f = *state;
  char other[512], from[600];
  save_filled(f, f->prefix, 1);
  snprintf(other, sizeof other, "%s/other", f->dir);
  save_filled(f, other, 2);
  snprintf(from, sizeof from, "%s.data-00000-of-00001", other);
  copy_file(from, path_of(f, ".data-00000-of-00001"));
  snprintf(from, sizeof from, "%s.index", other);
  copy_file(from, path_of(f, ".index.tmp"));
  assert_int_equal(restore_filled(f), 2);
  /* the next save first renames the whole temporary index into place: seen when the save
     then fails, its temporary data file being a directory */
  char data_tmp[600];
  snprintf(data_tmp, sizeof data_tmp, "%s", path_of(f, ".data-00000-of-00001.tmp"));
  assert_int_equal(mkdir(data_tmp, 0700), 0);
  nb_variable *v[2];
  make_filled(f->c, 3, v);
  assert_int_equal(nb_checkpoint_save(f->c, f->prefix, v, NULL, 2, NULL), NB_IO);
  nb_clear_error(f->c);
  assert_int_equal(access(path_of(f, ".index.tmp"), F_OK), -1);
  assert_int_equal(restore_filled(f), 2);
  assert_int_equal(rmdir(data_tmp), 0);
  assert_int_equal(nb_checkpoint_save(f->c, f->prefix, v, NULL, 2, NULL), NB_OK);
  assert_int_equal(restore_filled(f), 3);
  assert_int_equal(access(path_of(f, ".index.tmp"), F_OK), -1);
  /* a half-written temporary index beside a whole checkpoint is ignored */
  FILE *junk = fopen(path_of(f, ".index.tmp"), "w");
  assert_non_null(junk);
  fputs("half an index", junk);
  fclose(junk);
  assert_int_equal(restore_filled(f), 3);
  free_vars(v, 2);
}

/* ---- resuming training ------------------------------------------------------------------------- */

#define ROWS 8
#define BATCH_ROWS 2

/* y = x w + b, w [3, 2] and b [2], fitted by Adam on fixed data. */
static void make_model(nb_ctx *c, nb_variable **v) {
  v[0] =
      nb_variable_new(c, tu_make(c, NB_F32, 2, TU_SHAPE(3, 2), TU_VALS(0.1, -0.2, 0.3, 0.05, -0.4, 0.25)), true, "w");
  v[1] = nb_variable_new(c, tu_make(c, NB_F32, 1, TU_SHAPE(2), TU_VALS(0, 0.1)), true, "b");
}

static void train_epoch(nb_ctx *c, nb_variable **v, nb_optimizer *o) {
  double xs[ROWS * 3], ys[ROWS * 2];
  for (int i = 0; i < ROWS * 3; i++) xs[i] = sin(1.7 * i);
  for (int i = 0; i < ROWS * 2; i++) ys[i] = cos(0.9 * i);
  for (int r = 0; r < ROWS; r += BATCH_ROWS) {
    nb_tensor *g[2];
    nb_scope_begin(c);
    nb_tensor *x = tu_make(c, NB_F32, 2, TU_SHAPE(BATCH_ROWS, 3), xs + 3 * r);
    nb_tensor *y = tu_make(c, NB_F32, 2, TU_SHAPE(BATCH_ROWS, 2), ys + 2 * r);
    nb_scope_begin(c);
    nb_tape *t = nb_tape_begin(c, 0);
    nb_tensor *pred = nb_add(c, nb_matmul(c, x, nb_variable_read(c, v[0]), false, false), nb_variable_read(c, v[1]));
    nb_tensor *loss = nb_mean(c, nb_square(c, nb_sub(c, pred, y)), (const int[]){0, 1}, 2, false);
    nb_tape_gradient_vars(t, &loss, 1, v, 2, g);
    nb_tape_end(t);
    nb_scope_end(c, g, 2);
    nb_optimizer_apply(o, c, g, v, 2, NULL);
    nb_scope_end(c, NULL, 0);
  }
}

static nb_optimizer *make_adam(void) { return nb_adam_new(0.05, 0.9, 0.999, 1e-7); }

/* The child: restores model and Adam from `from`, trains one epoch, saves to `to`. */
static int resume(const char *from, const char *to) {
  nb_ctx *c = nb_eager_new();
  nb_variable *v[2];
  nb_optimizer *o = make_adam();
  make_model(c, v);
  nb_checkpoint_restore(c, from, v, NULL, 2, o);
  train_epoch(c, v, o);
  nb_checkpoint_save(c, to, v, NULL, 2, o);
  int failed = nb_status(c) != NB_OK;
  if (failed) fprintf(stderr, "%s\n", nb_error(c));
  nb_optimizer_free(o);
  free_vars(v, 2);
  nb_ctx_free(c);
  return failed;
}

static bool same_optimizer_state(nb_optimizer *a, nb_optimizer *b, nb_variable **va, nb_variable **vb) {
  if (nb_optimizer_iterations(a) != nb_optimizer_iterations(b)) return false;
  for (int k = 0; k < 2; k++) {
    nb_variable *sa[2] = {nb_optimizer_slot(a, va[k], "m"), nb_optimizer_slot(a, va[k], "v")};
    nb_variable *sb[2] = {nb_optimizer_slot(b, vb[k], "m"), nb_optimizer_slot(b, vb[k], "v")};
    if (!sa[0] || !sb[0] || !sa[1] || !sb[1] || !same_bits(sa, sb, 2)) return false;
  }
  return true;
}

/* Two epochs straight equal one epoch, a save, and one epoch in a new process after a
   restore, to the bit: variables, Adam's slots and its step counter. */
static void test_resume_training_bit_exactly(void **state) {
  fixture *f = *state;
  nb_variable *straight[2], *split[2], *result[2];
  nb_optimizer *o_straight = make_adam(), *o_split = make_adam(), *o_result = make_adam();
  make_model(f->c, straight);
  train_epoch(f->c, straight, o_straight);
  train_epoch(f->c, straight, o_straight);
  make_model(f->c, split);
  train_epoch(f->c, split, o_split);
  assert_int_equal(nb_checkpoint_save(f->c, f->prefix, split, NULL, 2, o_split), NB_OK);
  char second[512];
  snprintf(second, sizeof second, "%s/second", f->dir);
  int status;
  pid_t pid = spawn_self("resume", f->prefix, second);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  make_model(f->c, result);
  assert_int_equal(nb_checkpoint_restore(f->c, second, result, NULL, 2, o_result), NB_OK);
  assert_int_equal(nb_optimizer_iterations(o_result), 2 * ROWS / BATCH_ROWS);
  assert_true(same_bits(straight, result, 2));
  assert_true(same_optimizer_state(o_straight, o_result, straight, result));
  /* without the optimizer's state the second epoch goes elsewhere */
  nb_optimizer *o_fresh = make_adam();
  assert_int_equal(nb_checkpoint_restore(f->c, f->prefix, split, NULL, 2, NULL), NB_OK);
  train_epoch(f->c, split, o_fresh);
  assert_false(same_bits(straight, split, 2));
  assert_int_equal(nb_status(f->c), NB_OK);
  nb_optimizer_free(o_fresh);
  nb_optimizer *opts[3] = {o_straight, o_split, o_result};
  for (int i = 0; i < 3; i++) nb_optimizer_free(opts[i]);
  free_vars(straight, 2);
  free_vars(split, 2);
  free_vars(result, 2);
}

/* Slot keys follow their variable's key (TF 2's layout for object-based keys); a slot the
   checkpoint lacks restarts from zeros, and a missing step counter is an error. */
static void test_optimizer_keys(void **state) {
  fixture *f = *state;
  nb_variable *v[2];
  nb_optimizer *adam = make_adam(), *sgd = nb_sgd_new(0.1);
  make_model(f->c, v);
  train_epoch(f->c, v, adam);
  const char *keys[2] = {"model/w/.ATTRIBUTES/VARIABLE_VALUE", "model/b"};
  assert_int_equal(nb_checkpoint_save(f->c, f->prefix, v, keys, 2, adam), NB_OK);
  static const char *const expected[] = {"model/b",
                                         "model/b/m",
                                         "model/b/v",
                                         "model/w/.ATTRIBUTES/VARIABLE_VALUE",
                                         "model/w/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE",
                                         "model/w/.OPTIMIZER_SLOT/optimizer/v/.ATTRIBUTES/VARIABLE_VALUE",
                                         "optimizer/iterations"};
  nb_checkpoint_entry *e;
  int n;
  assert_int_equal(nb_checkpoint_list(f->c, f->prefix, &e, &n), NB_OK);
  assert_int_equal(n, 7);
  for (int i = 0; i < n; i++) assert_string_equal(e[i].key, expected[i]);
  nb_checkpoint_list_free(e, n);
  /* SGD has no slots: Adam's restart from zeros, the step counter comes back */
  assert_int_equal(nb_checkpoint_save(f->c, f->prefix, v, NULL, 2, sgd), NB_OK);
  assert_int_equal(nb_checkpoint_restore(f->c, f->prefix, v, NULL, 2, adam), NB_OK);
  assert_int_equal(nb_optimizer_iterations(adam), 0);
  const float *m = nb_variable_data(nb_optimizer_slot(adam, v[0], "m"));
  for (int i = 0; i < 6; i++) assert_true(m[i] == 0);
  /* without an optimizer in the checkpoint, restoring one is an error */
  assert_int_equal(nb_checkpoint_save(f->c, f->prefix, v, NULL, 2, NULL), NB_OK);
  assert_int_equal(nb_checkpoint_restore(f->c, f->prefix, v, NULL, 2, adam), NB_NOT_FOUND);
  assert_non_null(strstr(nb_error(f->c), "no tensor 'optimizer/iterations'"));
  nb_clear_error(f->c);
  nb_optimizer_free(adam);
  nb_optimizer_free(sgd);
  free_vars(v, 2);
}

/* ---- TensorFlow's checkpoints, and nabla's as TensorFlow read it (tests/golden) ----------------- */

#define COUNT(a) ((int)(sizeof(a) / sizeof *(a)))

static size_t golden_bytes(const ckpt_golden *g) {
  size_t n = nb_dtype_size(g->dtype);
  for (int d = 0; d < g->rank; d++) n *= (size_t)g->shape[d];
  return n;
}

/* Variables (zeros) of the golden entries' dtypes and shapes, and their keys. */
static void golden_vars(nb_ctx *c, const ckpt_golden *g, int n, nb_variable **v, const char **keys, bool values) {
  for (int i = 0; i < n; i++) {
    v[i] = nb_variable_new(c, nb_tensor_from(c, g[i].dtype, g[i].rank, g[i].shape, values ? g[i].values : NULL), true,
                           NULL);
    assert_non_null(v[i]);
    keys[i] = g[i].key;
  }
}

/* Restores every tensor of TF's checkpoint (all at once, by key) and compares its bits with
   TF's; the listing has TF's keys, dtypes and shapes (TF 2's string object graph left out). */
static void check_tf_checkpoint(fixture *f, const char *name, const ckpt_golden *g, int n) {
  char prefix[512];
  snprintf(prefix, sizeof prefix, "%s/%s", NB_CKPT_GOLDEN_DIR, name);
  nb_variable *v[32];
  const char *keys[32];
  assert_true(n <= 32);
  golden_vars(f->c, g, n, v, keys, false);
  if (nb_checkpoint_restore(f->c, prefix, v, keys, n, NULL) != NB_OK) fail_msg("%s", nb_error(f->c));
  for (int i = 0; i < n; i++)
    if (memcmp(nb_variable_data(v[i]), g[i].values, golden_bytes(&g[i])) != 0)
      fail_msg("%s: %s differs", name, g[i].key);
  nb_checkpoint_entry *e;
  int count;
  assert_int_equal(nb_checkpoint_list(f->c, prefix, &e, &count), NB_OK);
  assert_int_equal(count, n);
  for (int i = 0; i < n; i++) {
    assert_string_equal(e[i].key, g[i].key);
    assert_int_equal(e[i].dtype, g[i].dtype);
    assert_int_equal(e[i].rank, g[i].rank);
    assert_memory_equal(e[i].shape, g[i].shape, (size_t)g[i].rank * sizeof *e[i].shape);
  }
  nb_checkpoint_list_free(e, count);
  free_vars(v, n);
}

static void test_reads_tensorflow_checkpoints(void **state) {
  fixture *f = *state;
  check_tf_checkpoint(f, CKPT_TF2_PREFIX, ckpt_tf2, COUNT(ckpt_tf2));
  check_tf_checkpoint(f, CKPT_TF1_PREFIX, ckpt_tf1, COUNT(ckpt_tf1));
}

/* nabla's checkpoint of TF 1's tensors: what make_tf_checkpoints.py --check-nabla loads in
   TensorFlow. */
static int write_golden(nb_ctx *c, const char *prefix) {
  nb_variable *v[32];
  const char *keys[32];
  int n = COUNT(ckpt_tf1);
  golden_vars(c, ckpt_tf1, n, v, keys, true);
  nb_checkpoint_save(c, prefix, v, keys, n, NULL);
  free_vars(v, n);
  if (nb_status(c) != NB_OK) fprintf(stderr, "%s\n", nb_error(c));
  return nb_status(c) != NB_OK;
}

static bool same_file(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  bool same = fa && fb;
  while (same) {
    int ca = fgetc(fa), cb = fgetc(fb);
    same = ca == cb;
    if (ca == EOF) break;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

/* nabla still writes, byte for byte, the checkpoint TensorFlow read back equal to its own
   (tests/golden/ckpt/nabla_read_by_tf.txt). */
static void test_writes_what_tensorflow_read(void **state) {
  fixture *f = *state;
  assert_int_equal(write_golden(f->c, f->prefix), 0);
  static const char *const suffixes[2] = {".index", ".data-00000-of-00001"};
  for (int i = 0; i < 2; i++) {
    char golden[512];
    snprintf(golden, sizeof golden, "%s/nabla%s", NB_CKPT_GOLDEN_DIR, suffixes[i]);
    if (!same_file(path_of(f, suffixes[i]), golden)) fail_msg("%s differs from %s", path_of(f, suffixes[i]), golden);
  }
  FILE *verdict = fopen(NB_CKPT_GOLDEN_DIR "/nabla_read_by_tf.txt", "r");
  char line[512], last[512] = "";
  assert_non_null(verdict);
  while (fgets(line, sizeof line, verdict)) strcpy(last, line);
  fclose(verdict);
  assert_string_equal(last, "result: all equal\n");
}

int main(int argc, char **argv) {
  snprintf(self_path, sizeof self_path, "%s", argv[0]);
  if (argc == 4 && strcmp(argv[1], "save-forever") == 0) return save_forever(argv[2], argv[3]);
  if (argc == 4 && strcmp(argv[1], "resume") == 0) return resume(argv[2], argv[3]);
  if (argc == 4 && strcmp(argv[1], "write-golden") == 0) {
    nb_ctx *c = nb_eager_new();
    int rc = write_golden(c, argv[2]);
    nb_ctx_free(c);
    return rc;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_crc32c_vectors),
      cmocka_unit_test(test_crc32c_paths_agree),
      cmocka_unit_test_setup_teardown(test_round_trip_every_dtype_and_rank, setup, teardown),
      cmocka_unit_test_setup_teardown(test_list, setup, teardown),
      cmocka_unit_test_setup_teardown(test_explicit_keys, setup, teardown),
      cmocka_unit_test_setup_teardown(test_restore_leaves_earlier_reads_alone, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corrupt_index_bytes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corrupt_data_bytes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncated_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mismatch_restores_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_killed_saves_leave_a_whole_checkpoint, setup, teardown),
      cmocka_unit_test_setup_teardown(test_save_killed_between_renames, setup, teardown),
      cmocka_unit_test_setup_teardown(test_resume_training_bit_exactly, setup, teardown),
      cmocka_unit_test_setup_teardown(test_optimizer_keys, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reads_tensorflow_checkpoints, setup, teardown),
      cmocka_unit_test_setup_teardown(test_writes_what_tensorflow_read, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
