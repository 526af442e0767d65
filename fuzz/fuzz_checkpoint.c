/* libFuzzer target for the checkpoint reader (make fuzz). An input is an index file and a
   data file: its first two bytes (little-endian) are the index's length, the rest after
   the index is the data. Both are written under a temporary prefix; the checkpoint is
   listed, then every listed tensor (up to a size bound) is restored into a variable of its
   dtype and shape, all at once, by key. Seeds are in fuzz/corpus/checkpoint
   (fuzz/make_corpus.py makes them from the TF and nabla checkpoints in tests/golden/ckpt). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <nabla.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TENSORS 64
#define MAX_ELEMENTS (1 << 16)

static char tmp_dir[256], tmp_prefix[300];

static void remove_files(void) {
  char path[340];
  snprintf(path, sizeof path, "%s.index", tmp_prefix);
  unlink(path);
  snprintf(path, sizeof path, "%s.data-00000-of-00001", tmp_prefix);
  unlink(path);
  rmdir(tmp_dir);
}

/* The prefix the inputs are written under, in a directory removed at exit. */
static const char *prefix(void) {
  if (!tmp_prefix[0]) { /* under $TMPDIR, /tmp without it */
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/nabla-fuzz-ckpt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmp_dir)) abort();
    snprintf(tmp_prefix, sizeof tmp_prefix, "%s/ckpt", tmp_dir);
    atexit(remove_files);
  }
  return tmp_prefix;
}

static void write_file(const char *base, const char *suffix, const uint8_t *data, size_t n) {
  char path[340];
  snprintf(path, sizeof path, "%s%s", base, suffix);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) abort();
}

static int64_t elements(const nb_checkpoint_entry *e) {
  int64_t n = 1;
  for (int d = 0; d < e->rank; d++) {
    if (e->shape[d] > MAX_ELEMENTS) return MAX_ELEMENTS + 1;
    n *= e->shape[d];
    if (n > MAX_ELEMENTS) return n;
  }
  return n;
}

static void restore_listed(nb_ctx *c, const char *base, const nb_checkpoint_entry *e, int n) {
  nb_variable *vars[MAX_TENSORS];
  const char *keys[MAX_TENSORS];
  int nv = 0;
  for (int i = 0; i < n && nv < MAX_TENSORS; i++) {
    if (elements(&e[i]) > MAX_ELEMENTS) continue;
    nb_tensor *zeros = nb_tensor_from(c, e[i].dtype, e[i].rank, e[i].shape, NULL);
    if (!zeros) continue;
    keys[nv] = e[i].key;
    vars[nv++] = nb_variable_new(c, zeros, true, NULL);
  }
  nb_checkpoint_restore(c, base, vars, keys, nv, NULL);
  for (int i = 0; i < nv; i++) nb_variable_free(vars[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t index_len = (size_t)data[0] | (size_t)data[1] << 8;
  if (index_len > size - 2) index_len = size - 2;
  const char *base = prefix();
  write_file(base, ".index", data + 2, index_len);
  write_file(base, ".data-00000-of-00001", data + 2 + index_len, size - 2 - index_len);
  nb_ctx *c = nb_eager_new();
  if (!c) abort();
  nb_checkpoint_entry *e;
  int n;
  if (nb_checkpoint_list(c, base, &e, &n) == NB_OK) {
    restore_listed(c, base, e, n);
    nb_checkpoint_list_free(e, n);
  }
  nb_ctx_free(c);
  return 0;
}
