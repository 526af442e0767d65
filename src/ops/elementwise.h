/* Flat elementwise ops shared by the math and nn families: y[i] = f(x[i]) (unary) and
   o[i] = f(a[i], b[i]) over two inputs of one shape (TF's fused gradient ops, "pairs").
   Each loop takes the op's parameter p: its attr 0 (LeakyRelu's alpha, Gelu's
   approximate), 0 for ops without attrs. The op def's impl is an nbop_unary_impl or an
   nbop_pair_impl: one loop per dtype, NULL where the dtype is not supported. */
#ifndef NBOP_ELEMENTWISE_H
#define NBOP_ELEMENTWISE_H

#include "op.h"

typedef void (*nbop_unary_loop)(const void *x, void *y, int64_t n, double p);
typedef void (*nbop_pair_loop)(const void *a, const void *b, void *o, int64_t n, double p);
/* One inner row of a broadcasting binary op: a and b advance by sa/sb elements (0 or 1). */
typedef void (*nbop_binary_loop)(int64_t n, const void *a, int64_t sa, const void *b, int64_t sb, void *o);

typedef struct nbop_unary_impl {
  nbop_unary_loop fn[NB_BOOL + 1];
} nbop_unary_impl;

typedef struct nbop_pair_impl {
  nbop_pair_loop fn[NB_BOOL + 1];
  const char *names[2]; /* TF's input names, for messages */
} nbop_pair_impl;

/* Input 0's dtype has a loop; the output is like input 0 (nbop_infer_same). */
nb_code nbop_unary_validate(nbop_kargs *k);
nb_code nbop_unary_kernel(nbop_kargs *k);
/* TF requires both inputs to have one shape and dtype: no broadcasting. */
nb_code nbop_pair_validate(nbop_kargs *k);
nb_code nbop_pair_kernel(nbop_kargs *k);
/* def's row loop for dtype t when def is a broadcasting binary op whose result has its
   inputs' dtype (not a comparison); NULL otherwise. */
nbop_binary_loop nbop_binary_loop_of(const nbop_def *def, nb_dtype t);
/* The parameter p that op def's loops take with attrs attr (see above). */
double nbop_loop_param(const nbop_def *def, const nbop_attrval *attr);

#endif
