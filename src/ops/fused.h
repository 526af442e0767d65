/* _FusedElementwise: a DAG of float elementwise ops run as one kernel (the
   optimizer's fusion pass, src/opt/fuse.c, builds it). Its program lists the member ops in
   graph order; the kernel walks the output in blocks of about 1024 elements (a row up to 4096 is one
   block) and runs
   every member's own loop on each block, so intermediates stay in cache, each input is
   read once and each output written once, and every element is computed by the same
   element function, in the same order, as the unfused ops would (results are bitwise
   equal). A Sum or Mean over the last dim, over all dims but the last, or over all dims
   may end the program (an epilogue: it adds up each block while it is in cache). A row sum
   of a row of at most 4096 elements (one block), and a total sum of at most one block, add
   in the Reduce kernel's order (bitwise equal); other column and total sums, and longer
   rows, add in chunks of rows, so they agree with the unfused ones to the rounding of a
   sum, not bitwise (the same bits at every thread count). */
#ifndef NBOP_FUSED_H
#define NBOP_FUSED_H

#include "op.h"

/* Members a program may hold: the pass starts a new group past it. */
#define NBOP_FUSED_MAX_INSTR 64
/* Operands one member reads (AddN's list is split into a chain of adds). */
#define NBOP_FUSED_MAX_ARGS 2

/* One member op: its def and attrs, its node's name (errors name it), and where its
   operands come from: a < nin is the fused node's input a, else member a - nin. A
   BroadcastTo or reduction member has one operand; its other input (the shape, the axes)
   is the value known at build time. No member reads a reduction's value. */
typedef struct nbop_fused_instr {
  const nbop_def *def;
  const nbop_attrval *attr;
  const char *node;
  int32_t nargs;
  int32_t args[NBOP_FUSED_MAX_ARGS];
  nb_tensor *known; /* BroadcastTo's shape, a reduction's axes; NULL for the others */
} nbop_fused_instr;

typedef struct nbop_fused_program {
  nb_dtype dtype; /* every input, member and output has it */
  int32_t nin, ninstr, nout;
  nbop_fused_instr *instr; /* ninstr members */
  int32_t *outs;           /* output i is member outs[i]'s value */
} nbop_fused_program;

/* Whether def is an op the fused kernel can run for dtype t (a float type): a unary op, a
   broadcasting binary op with a float result, a fused gradient pair, AddN/AccumulateNV2
   (as a chain of adds), BroadcastTo (whose shape must then be known when the graph is
   built), or Sum/Mean (axes known when built, see nbop_fused_reduction_axes). */
bool nbop_fusible(const nbop_def *def, nb_dtype t);
/* Whether def is BroadcastTo. */
bool nbop_fused_is_broadcast(const nbop_def *def);
/* Whether def is Sum or Mean. */
bool nbop_fused_is_reduction(const nbop_def *def);
/* Whether a reduction over the int32/int64 axes (negative ones count from the end) of a
   rank-`rank` value is one the program can end with: over the last dim, over every dim
   but the last, or over every dim (each axis once). */
bool nbop_fused_reduction_axes(const nb_tensor *axes, int rank);
/* The _FusedElementwise op; its attrs: N, num_outputs, _program (the program's bits). */
const nbop_def *nbop_fused_def(void);
enum { NBOP_FUSED_N, NBOP_FUSED_NUM_OUTPUTS, NBOP_FUSED_PROGRAM };

#endif
