/* Shapes, NumPy broadcasting and broadcast iteration plans. */
#include "core.h"

#include <stdio.h>
#include <string.h>

int64_t nbcore_shape_size(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  return n;
}

/* Size with overflow and negative-dim checks, for shapes that come from users. The
   product of the nonzero dims must fit too: ops that reorder or slice dims multiply
   subsets of them even when the whole tensor is empty. */
bool nbcore_shape_checked_size(int rank, const int64_t *shape, int64_t *size) {
  int64_t nonzero = 1;
  bool empty = false;
  for (int i = 0; i < rank; i++) {
    if (shape[i] < 0) return false;
    if (shape[i] == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(nonzero, shape[i], &nonzero) || nonzero > INT64_MAX / 16) return false;
  }
  *size = empty ? 0 : nonzero;
  return true;
}

bool nbcore_shape_fits(int rank, const int64_t *shape, int decl_rank, const int64_t *decl_shape) {
  if (decl_rank < 0) return true;
  if (rank != decl_rank) return false;
  for (int d = 0; d < rank; d++)
    if (decl_shape[d] >= 0 && shape[d] != decl_shape[d]) return false;
  return true;
}

char *nbcore_shape_str(char *buf, size_t cap, int rank, const int64_t *shape) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < rank && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, i ? ",%lld" : "%lld", (long long)shape[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

bool nbcore_broadcast_shape(int ra, const int64_t *sa, int rb, const int64_t *sb, int *rout, int64_t *sout) {
  int r = ra > rb ? ra : rb;
  for (int i = 0; i < r; i++) {
    int64_t da = i < r - ra ? 1 : sa[i - (r - ra)];
    int64_t db = i < r - rb ? 1 : sb[i - (r - rb)];
    if (da != db && da != 1 && db != 1) return false;
    sout[i] = da == 1 ? db : da;
  }
  *rout = r;
  return true;
}

bool nbcore_norm_axis(int64_t axis, int rank, int *out) {
  if (axis < -rank || axis >= rank) return false;
  *out = (int)(axis < 0 ? axis + rank : axis);
  return true;
}

/* Per-input strides over the output shape: 0 on broadcast dims, row-major otherwise. */
static void input_strides(const nb_tensor *x, int rout, const int64_t *sout, int64_t *st) {
  int64_t s = 1;
  for (int i = rout - 1; i >= 0; i--) {
    int xi = i - (rout - x->rank);
    int64_t d = xi >= 0 ? x->shape[xi] : 1;
    st[i] = (d == 1 && sout[i] != 1) ? 0 : s;
    s *= d;
  }
}

/* Dim i merges into the collapsed dim j (inner to it) when, for every input, stepping
   over all of dim j lands exactly on the next index of dim i (zero strides included). */
static bool mergeable(int nin, int64_t st[][NB_MAX_RANK], int i, int64_t cst[][NB_MAX_RANK], int j, int64_t dj) {
  for (int k = 0; k < nin; k++)
    if (st[k][i] != cst[k][j] * dj) return false;
  return true;
}

void nbcore_bcast_plan(nbcore_bcast *p, int nin, const nb_tensor *const *in, int rout, const int64_t *sout) {
  int64_t st[NBCORE_BCAST_MAX_IN][NB_MAX_RANK];
  p->nin = nin;
  for (int k = 0; k < nin; k++) input_strides(in[k], rout, sout, st[k]);
  /* Walk dims from the innermost out, merging into the current collapsed dim. */
  int64_t dims[NB_MAX_RANK], cst[NBCORE_BCAST_MAX_IN][NB_MAX_RANK];
  int r = 0;
  for (int i = rout - 1; i >= 0; i--) {
    if (sout[i] == 1) continue; /* size-1 dims contribute nothing */
    if (r > 0 && mergeable(nin, st, i, cst, r - 1, dims[r - 1])) {
      dims[r - 1] *= sout[i];
      continue;
    }
    dims[r] = sout[i];
    for (int k = 0; k < nin; k++) cst[k][r] = st[k][i];
    r++;
  }
  if (r == 0) {
    dims[0] = 1;
    for (int k = 0; k < nin; k++) cst[k][0] = 0;
    r = 1;
  }
  /* reverse into outermost-first order */
  p->rank = r;
  p->outer = 1;
  for (int j = 0; j < r; j++) {
    p->dims[j] = dims[r - 1 - j];
    for (int k = 0; k < nin; k++) p->strides[k][j] = cst[k][r - 1 - j];
    if (j < r - 1) p->outer *= p->dims[j];
  }
}

void nbcore_bcast_row(const nbcore_bcast *p, int64_t r, int64_t *off) {
  for (int k = 0; k < p->nin; k++) off[k] = 0;
  for (int j = p->rank - 2; j >= 0; j--) {
    int64_t idx = r % p->dims[j];
    r /= p->dims[j];
    for (int k = 0; k < p->nin; k++) off[k] += idx * p->strides[k][j];
  }
}

void nbcore_bcast_flat(nbcore_bcast *p, int nin, int64_t n) {
  p->nin = nin;
  p->rank = 1;
  p->outer = 1;
  p->dims[0] = n;
  for (int k = 0; k < nin; k++) p->strides[k][0] = 1;
}
