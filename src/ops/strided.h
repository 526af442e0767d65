/* The strided copy engine shared by the kernels that only move data (Transpose,
   BroadcastTo, Tile, Pad, Fill, Slice, StridedSlice). A plan is a grid of dims, outermost
   first; each step along a dim moves the input and the output by that dim's element
   strides. An input stride may be anything: 0 repeats a value, negative walks backwards,
   above 1 skips. Dims merge as they are added, so the innermost run is as long as it can
   be; a run is a memcpy, a fill (input stride 0) or a typed stepped loop. */
#ifndef NB_STRIDED_H
#define NB_STRIDED_H

#include "op.h"

#define NB_STRIDED_MAX (2 * NB_MAX_RANK) /* Tile splits each dim into (multiple, size) */

/* Element types that may alias the data of any dtype. */
typedef uint16_t __attribute__((may_alias)) nb_u16a;
typedef uint32_t __attribute__((may_alias)) nb_u32a;
typedef uint64_t __attribute__((may_alias)) nb_u64a;

/* Start from {0}, then nb_strided_add each dim, outermost first. */
typedef struct nb_strided {
  int rank;
  int64_t dims[NB_STRIDED_MAX];
  int64_t in_st[NB_STRIDED_MAX]; /* element strides */
  int64_t out_st[NB_STRIDED_MAX];
} nb_strided;

/* Adds a dim inside those added so far. A size-1 dim is dropped; a dim that continues
   the one outside it (in the input and the output alike) merges into it. */
void nb_strided_add(nb_strided *p, int64_t dim, int64_t in_st, int64_t out_st);

/* Copies every element of the plan from in to out (esz 1, 2, 4 or 8 bytes), split across
   k's threads. The element strides are relative to the in and out pointers. */
void nb_strided_run(const nb_kargs *k, const nb_strided *p, const void *in, void *out, size_t esz);

/* out[0..n) = *val across k's threads. */
void nb_strided_fill(const nb_kargs *k, void *out, const void *val, size_t esz, int64_t n);

/* A position in the outer n dims of a plan, moved with additions only. */
typedef struct nb_odometer {
  const nb_strided *p;
  int n;
  int64_t idx[NB_STRIDED_MAX];
  int64_t in, out; /* element offsets of the position */
} nb_odometer;

/* Starts w at the flat (row-major) position pos of p's dims [0, n). */
void nb_odometer_seek(nb_odometer *w, const nb_strided *p, int n, int64_t pos);
/* Moves w to the next position (after the last one it wraps to the first). */
void nb_odometer_next(nb_odometer *w);

/* Element strides of a row-major tensor of this shape. */
void nb_row_major_strides(int rank, const int64_t *shape, int64_t *st);

#endif
