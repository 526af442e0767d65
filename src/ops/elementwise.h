/* Flat elementwise ops shared by the math and nn families: y[i] = f(x[i]) (unary) and
   o[i] = f(a[i], b[i]) over two inputs of one shape (TF's fused gradient ops, "pairs").
   Each loop takes the op's parameter p: its attr 0 (LeakyRelu's alpha, Gelu's
   approximate), 0 for ops without attrs. The op def's impl is an nb_unary_impl or an
   nb_pair_impl: one loop per dtype, NULL where the dtype is not supported. */
#ifndef NB_ELEMENTWISE_H
#define NB_ELEMENTWISE_H

#include "op.h"

typedef void (*nb_unary_loop)(const void *x, void *y, int64_t n, double p);
typedef void (*nb_pair_loop)(const void *a, const void *b, void *o, int64_t n, double p);

typedef struct nb_unary_impl {
  nb_unary_loop fn[NB_BOOL + 1];
} nb_unary_impl;

typedef struct nb_pair_impl {
  nb_pair_loop fn[NB_BOOL + 1];
  const char *names[2]; /* TF's input names, for messages */
} nb_pair_impl;

/* The dtype mask of the non-NULL entries of a per-dtype table. */
unsigned nb_impl_mask(const void *const *fns);
/* Input 0's dtype has a loop; the output is like input 0 (nb_infer_same). */
nb_code nb_unary_validate(nb_kargs *k);
nb_code nb_unary_kernel(nb_kargs *k);
/* TF requires both inputs to have one shape and dtype: no broadcasting. */
nb_code nb_pair_validate(nb_kargs *k);
nb_code nb_pair_kernel(nb_kargs *k);

#endif
