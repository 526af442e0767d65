/* libFuzzer target for the .npy reader (make fuzz). Each input is used two ways:
   - as a .npy file in memory: nbio_npy_parse; a tensor it yields is written back with
     nb_npy_write and must read back with the same dtype, shape and bytes;
   - as a file on disk (a memfd): nb_npy_read, which bounds what it allocates by the
     file's size.
   Seeds are in fuzz/corpus/npy (copies of tests/golden/npy, both written by
   tests/golden/make_npy.py). */
#define _GNU_SOURCE /* memfd_create */
#include "../src/io/npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The path of a memfd made once (named name), emptied for each use. */
static const char *memfd_path(int *fd, char path[64], const char *name) {
  if (*fd < 0) {
    *fd = memfd_create(name, 0);
    if (*fd < 0) abort();
    snprintf(path, 64, "/proc/self/fd/%d", *fd);
  }
  if (ftruncate(*fd, 0) != 0) abort();
  return path;
}

/* x written and read back must be x again. */
static void check_round_trip(nb_ctx *c, const nb_tensor *x) {
  static int fd = -1;
  static char path[64];
  if (nb_npy_write(c, x, memfd_path(&fd, path, "fuzz_npy_out")) != NB_OK) abort();
  nb_tensor *y = nb_npy_read(c, path);
  if (!y || nb_dtype_of(y) != nb_dtype_of(x) || nb_rank(y) != nb_rank(x) ||
      memcmp(nb_shape(y), nb_shape(x), (size_t)nb_rank(x) * sizeof(int64_t)) != 0 ||
      memcmp(nb_data(y), nb_data(x), (size_t)nb_num_elements(x) * nb_dtype_size(nb_dtype_of(x))) != 0)
    abort();
}

static void fuzz_parse(nb_ctx *c, const uint8_t *data, size_t size) {
  nb_tensor *x = nbio_npy_parse(c, "input", data, size);
  if (x) check_round_trip(c, x);
}

static void fuzz_read(nb_ctx *c, const uint8_t *data, size_t size) {
  static int fd = -1;
  static char path[64];
  memfd_path(&fd, path, "fuzz_npy_in");
  if (pwrite(fd, data, size, 0) != (ssize_t)size) abort();
  nb_npy_read(c, path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  nb_ctx *c = nb_eager_new();
  if (!c) abort();
  fuzz_parse(c, data, size);
  nb_clear_error(c);
  fuzz_read(c, data, size);
  nb_ctx_free(c);
  return 0;
}
