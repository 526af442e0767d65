/* bench/checkpoint: nb_checkpoint_save and nb_checkpoint_restore of ~100 MB of float32
   variables (a model-like mix: an embedding, dense kernels, conv filters, biases), beside
   the real cp(1) of a plain file of the same bytes, in the same directory in the same run.
   Median of RUNS runs of each, after one untimed run, so that every timed save replaces the
   previous checkpoint and every timed cp_fsync overwrites the previous copy (the old
   file's blocks are freed inside the timing on both sides; a fresh file would skip that):
     nb_checkpoint_save     both files written, fsynced, renamed into place (the save's contract)
     cp_fsync               cp SRC DST, then sync DST (coreutils' sync fsyncs a named file):
                            the save's baseline, fsync included on both sides
     nb_checkpoint_restore  the index parsed, every tensor read, CRC checked, copied into its variable
     cp                     cp SRC DST into a fresh DST, no sync: the restore's baseline (the
                            bytes read, then copied once more in memory: a restore reads them
                            into buffers and writes nothing to disk)
     cp_to_devnull          cp SRC /dev/null: reading the file alone, the floor under both
     nb_checkpoint_vs_cp    save_ratio = save / cp_fsync, restore_ratio = restore / cp,
                            read_ratio = restore / cp_to_devnull
                            (issue 15's target: both below 1.5)
   Page cache: after the first write every byte read here is in the page cache (for the
   library and for cp alike), so the figures are the library's own work (CRC-32C, copies,
   the index) plus the fsyncs' write-back, not the disk's read speed.
   The directory is a mkdtemp under $TMPDIR (default /tmp), removed at the end; argv[1]
   names another parent directory (another disk). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, mkdtemp, posix_spawnp */
#include <nabla.h>

#include "benchutil.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUNS 5
#define NVARS 18

extern char **environ;

/* Shapes of a model of ~25M float32 parameters (100 MB). */
static const int var_ranks[NVARS] = {2, 2, 2, 2, 2, 1, 1, 1, 1, 4, 4, 4, 4, 1, 1, 1, 1, 2};
static const int64_t var_shapes[NVARS][4] = {
    {10000, 512}, /* embedding */
    {1024, 4096},
    {4096, 1024},
    {1024, 4096},
    {4096, 1024}, /* dense kernels */
    {4096},
    {1024},
    {4096},
    {1024}, /* their biases */
    {3, 3, 256, 256},
    {3, 3, 256, 256},
    {3, 3, 256, 256},
    {3, 3, 256, 256}, /* conv filters */
    {256},
    {256},
    {256},
    {256},       /* batch-norm scales */
    {1024, 726}, /* output layer */
};

typedef struct model {
  nb_variable *vars[NVARS];
  char keys[NVARS][64];
  const char *key_ptrs[NVARS];
  size_t bytes;
} model;

static int64_t elements(int k) {
  int64_t n = 1;
  for (int d = 0; d < var_ranks[k]; d++) n *= var_shapes[k][d];
  return n;
}

/* The variables, filled with a pseudo-random pattern (no long runs a file system could skip). */
static int make_model(nb_ctx *c, model *m) {
  uint32_t state = 12345;
  for (int k = 0; k < NVARS; k++) {
    int64_t n = elements(k);
    float *vals = malloc((size_t)n * sizeof *vals);
    if (!vals) return -1;
    for (int64_t i = 0; i < n; i++) {
      state = state * 1664525u + 1013904223u;
      vals[i] = (float)(state >> 8) / 16777216.0f - 0.5f;
    }
    snprintf(m->keys[k], sizeof m->keys[k], "layer%02d/kernel/.ATTRIBUTES/VARIABLE_VALUE", k);
    m->key_ptrs[k] = m->keys[k];
    m->vars[k] = nb_variable_new(c, nb_tensor_from(c, NB_F32, var_ranks[k], var_shapes[k], vals), true, m->keys[k]);
    free(vals);
    if (!m->vars[k]) return -1;
    m->bytes += (size_t)n * sizeof(float);
  }
  return 0;
}

/* Runs argv (a program on the PATH) and waits: 0 when it exits with 0. */
static int run_program(char *const argv[]) {
  pid_t pid;
  int status;
  if (posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ) != 0) return -1;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* A plain file of the model's bytes, variable after variable (the cp's source). */
static int write_plain(const model *m, const char *path) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int rc = 0;
  for (int k = 0; k < NVARS && rc == 0; k++)
    if (fwrite(nb_variable_data(m->vars[k]), sizeof(float), (size_t)elements(k), f) != (size_t)elements(k)) rc = -1;
  if (fclose(f) != 0) rc = -1;
  return rc;
}

/* Median seconds of cp SRC DST, then sync DST when fsync_too; DST is overwritten from the
   run before, or removed first (untimed) when fresh. */
static double time_cp(const char *src, const char *dst, int fsync_too, int fresh) {
  char *cp_argv[] = {"cp", (char *)src, (char *)dst, NULL};
  char *sync_argv[] = {"sync", (char *)dst, NULL};
  double runs[RUNS];
  for (int r = -1; r < RUNS; r++) {
    if (fresh) unlink(dst);
    double t0 = bench_now();
    if (run_program(cp_argv) != 0 || (fsync_too && run_program(sync_argv) != 0)) return -1;
    if (r >= 0) runs[r] = bench_now() - t0;
  }
  return bench_median(runs, RUNS);
}

/* Median seconds of a save (restore when restoring) of the model under prefix. */
static double time_checkpoint(nb_ctx *c, const model *m, const char *prefix, int restoring) {
  double runs[RUNS];
  for (int r = -1; r < RUNS; r++) {
    double t0 = bench_now();
    nb_code code = restoring ? nb_checkpoint_restore(c, prefix, m->vars, m->key_ptrs, NVARS, NULL)
                             : nb_checkpoint_save(c, prefix, m->vars, m->key_ptrs, NVARS, NULL);
    if (code != NB_OK) return -1;
    if (r >= 0) runs[r] = bench_now() - t0;
  }
  return bench_median(runs, RUNS);
}

static void print_line(const char *name, const model *m, double seconds) {
  double mb = (double)m->bytes / 1e6;
  printf("name=%s mb=%.1f threads=1 runs=%d ms_median=%.1f mb_per_s=%.0f\n", name, mb, RUNS, seconds * 1e3,
         mb / seconds);
}

/* The four timings in dir; 0 on success. */
static int bench_in(nb_ctx *c, const model *m, const char *dir) {
  char prefix[4200], src[4200], dst[4200];
  snprintf(prefix, sizeof prefix, "%s/model", dir);
  snprintf(src, sizeof src, "%s/plain.bin", dir);
  snprintf(dst, sizeof dst, "%s/plain.copy", dir);
  if (write_plain(m, src) != 0) return fprintf(stderr, "bench/checkpoint: cannot write %s\n", src), -1;
  double save = time_checkpoint(c, m, prefix, 0), cp_fsync = time_cp(src, dst, 1, 0);
  double restore = time_checkpoint(c, m, prefix, 1), cp = time_cp(src, dst, 0, 1);
  double cp_read = time_cp(src, "/dev/null", 0, 0);
  if (save < 0 || restore < 0) return fprintf(stderr, "bench/checkpoint: %s\n", nb_error(c)), -1;
  if (cp_fsync < 0 || cp < 0 || cp_read < 0)
    return fprintf(stderr, "bench/checkpoint: cp or sync failed in %s\n", dir), -1;
  print_line("nb_checkpoint_save", m, save);
  print_line("cp_fsync", m, cp_fsync);
  print_line("nb_checkpoint_restore", m, restore);
  print_line("cp", m, cp);
  print_line("cp_to_devnull", m, cp_read);
  printf("name=nb_checkpoint_vs_cp mb=%.1f threads=1 save_ratio=%.2f restore_ratio=%.2f read_ratio=%.2f\n",
         (double)m->bytes / 1e6, save / cp_fsync, restore / cp, restore / cp_read);
  return 0;
}

int main(int argc, char **argv) {
  const char *parent = argc > 1 ? argv[1] : getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/nb_ckpt_bench_XXXXXX", parent && *parent ? parent : "/tmp");
  if (!mkdtemp(dir)) return perror(dir), 1;
  nb_ctx *c = nb_eager_new();
  model m = {0};
  int rc = c && make_model(c, &m) == 0 ? bench_in(c, &m, dir) : -1;
  if (rc != 0 && c && nb_status(c) != NB_OK) fprintf(stderr, "bench/checkpoint: %s\n", nb_error(c));
  for (int k = 0; k < NVARS; k++) nb_variable_free(m.vars[k]);
  nb_ctx_free(c);
  char *rm_argv[] = {"rm", "-rf", dir, NULL};
  if (run_program(rm_argv) != 0) fprintf(stderr, "bench/checkpoint: cannot remove %s\n", dir);
  return rc == 0 ? 0 : 1;
}
