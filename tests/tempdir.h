/* The fixture of the tests that write files (define _POSIX_C_SOURCE 200809L before
   including it: mkdtemp, rmdir, unlink). */
#ifndef NB_TEST_TEMPDIR_H
#define NB_TEST_TEMPDIR_H

#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* An eager context and a fresh directory, $TMPDIR/nabla-test-XXXXXX (/tmp without TMPDIR). */
typedef struct tu_files {
  nb_ctx *c;
  char dir[256];
  char path[512];  /* a file the test names */
  char path2[512]; /* a second one */
} tu_files;

/* Makes a fresh directory $TMPDIR/nabla-test-XXXXXX (/tmp without TMPDIR) and writes its
   path to dir; false when it cannot. */
static inline bool tu_make_temp_dir(char *dir, size_t cap) {
  const char *tmp = getenv("TMPDIR");
  int n = snprintf(dir, cap, "%s/nabla-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  return n > 0 && (size_t)n < cap && mkdtemp(dir) != NULL;
}

/* cmocka setup: a tu_files in *state. */
static inline int tu_files_setup(void **state) {
  tu_files *f = calloc(1, sizeof *f);
  if (!f) return -1;
  *state = f;
  if (!tu_make_temp_dir(f->dir, sizeof f->dir)) return -1;
  f->c = nb_eager_new();
  return f->c ? 0 : -1;
}

/* cmocka teardown: removes the directory with the files the test wrote (it holds nothing
   else) and frees the context. */
static inline int tu_files_teardown(void **state) {
  tu_files *f = *state;
  DIR *d = opendir(f->dir);
  char p[600];
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "%s/%s", f->dir, e->d_name);
    unlink(p);
  }
  if (d) closedir(d);
  rmdir(f->dir);
  nb_ctx_free(f->c);
  free(f);
  return 0;
}

#endif
