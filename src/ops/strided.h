/* The strided copy engine shared by the kernels that only move data (Transpose,
   BroadcastTo, Tile, Pad, Fill, Slice, StridedSlice). A plan is a grid of dims, outermost
   first; each step along a dim moves the input and the output by that dim's element
   strides. An input stride may be anything: 0 repeats a value, negative walks backwards,
   above 1 skips. Dims merge as they are added, so the innermost run is as long as it can
   be; a run is a memcpy, a fill (input stride 0) or a typed stepped loop. */
#ifndef NBOP_STRIDED_H
#define NBOP_STRIDED_H

#include "op.h"

#define NBOP_STRIDED_MAX (2 * NB_MAX_RANK) /* Tile splits each dim into (multiple, size) */

/* Element types that may alias the data of any dtype. */
typedef uint16_t __attribute__((may_alias)) nbop_u16a;
typedef uint32_t __attribute__((may_alias)) nbop_u32a;
typedef uint64_t __attribute__((may_alias)) nbop_u64a;

/* Start from {0}, then nbop_strided_add each dim, outermost first. */
typedef struct nbop_strided {
  int rank;
  int64_t dims[NBOP_STRIDED_MAX];
  int64_t in_st[NBOP_STRIDED_MAX]; /* element strides */
  int64_t out_st[NBOP_STRIDED_MAX];
} nbop_strided;

/* Adds a dim inside those added so far. A size-1 dim is dropped; a dim that continues
   the one outside it (in the input and the output alike) merges into it. */
void nbop_strided_add(nbop_strided *p, int64_t dim, int64_t in_st, int64_t out_st);

/* Copies every element of the plan from in to out (esz 1, 2, 4 or 8 bytes), split across
   k's threads. The element strides are relative to the in and out pointers. */
void nbop_strided_run(const nbop_kargs *k, const nbop_strided *p, const void *in, void *out, size_t esz);

/* out[0..n) = *val across k's threads. */
void nbop_strided_fill(const nbop_kargs *k, void *out, const void *val, size_t esz, int64_t n);

/* A position in the outer n dims of a plan, moved with additions only. */
typedef struct nbop_odometer {
  const nbop_strided *p;
  int n;
  int64_t idx[NBOP_STRIDED_MAX];
  int64_t in, out; /* element offsets of the position */
} nbop_odometer;

/* Starts w at the flat (row-major) position pos of p's dims [0, n). */
void nbop_odometer_seek(nbop_odometer *w, const nbop_strided *p, int n, int64_t pos);
/* Moves w to the next position (after the last one it wraps to the first). */
void nbop_odometer_next(nbop_odometer *w);

/* Element strides of a row-major tensor of this shape. */
void nbop_row_major_strides(int rank, const int64_t *shape, int64_t *st);

#endif
