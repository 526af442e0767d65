/* libFuzzer target for the IDX reader (make fuzz). Each input is used three ways:
   - as an IDX file in memory: nbio_idx_parse, then conversion to a tensor;
   - as a file on disk (a memfd): nbio_idx_load, which reads gzip too and bounds the sizes
     it allocates by the file's size;
   - split into a labels file and an images file (the first byte is the labels file's
     length) made into a dataset, shuffled and batched in every layout.
   Seeds are in fuzz/corpus/idx (fuzz/make_corpus.py writes them). */
#define _GNU_SOURCE /* memfd_create */
#include "../src/io/idx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void fuzz_parse(nb_ctx *c, const uint8_t *data, size_t size) {
  nbio_idx h;
  if (nbio_idx_parse(c, "input", data, size, &h) == NB_OK) nbio_idx_tensor(c, &h);
}

/* The input as the content of a file: one memfd, rewritten for each input. */
static void fuzz_load(nb_ctx *c, const uint8_t *data, size_t size) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("fuzz_idx", 0);
    if (fd < 0) abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
  nbio_idx_file f;
  if (nbio_idx_load(c, path, &f) == NB_OK) {
    nbio_idx_tensor(c, &f.idx);
    free(f.bytes);
  }
}

/* bytes[0..n) copied and parsed as the loader leaves a file; false (nothing kept) on error. */
static bool parsed_copy(nb_ctx *c, const char *name, const uint8_t *bytes, size_t n, nbio_idx_file *f) {
  f->bytes = malloc(n + 1);
  if (!f->bytes) abort();
  memcpy(f->bytes, bytes, n);
  f->size = n;
  if (nbio_idx_parse(c, name, f->bytes, n, &f->idx) == NB_OK) return true;
  free(f->bytes);
  return false;
}

static void fuzz_dataset(nb_ctx *c, const uint8_t *data, size_t size) {
  if (size == 0) return;
  size_t nlabels = data[0] < size - 1 ? data[0] : size - 1;
  nbio_idx_file labels, images;
  if (!parsed_copy(c, "labels", data + 1, nlabels, &labels)) return;
  if (!parsed_copy(c, "images", data + 1 + nlabels, size - 1 - nlabels, &images)) {
    free(labels.bytes);
    return;
  }
  nb_dataset *d = nbio_dataset_adopt(c, "images", images, "labels", labels);
  if (!d) return;
  int64_t n = nb_dataset_size(d);
  nb_dataset_shuffle(d, (uint64_t)n);
  const nb_image_layout layouts[3] = {NB_IMAGES_NHWC, NB_IMAGES_NCHW, NB_IMAGES_FLAT};
  for (int i = 0; i < 3; i++) {
    nb_tensor *x, *y;
    nb_dataset_batch(c, d, n / 2, n - n / 2, layouts[i], &x, &y);
  }
  nb_dataset_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  nb_ctx *c = nb_eager_new();
  if (!c) abort();
  fuzz_parse(c, data, size);
  nb_clear_error(c);
  fuzz_load(c, data, size);
  nb_clear_error(c);
  fuzz_dataset(c, data, size);
  nb_ctx_free(c);
  return 0;
}
