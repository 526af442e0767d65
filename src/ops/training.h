/* The fused optimizer updates (TF's training ops), shared by the graph ops in training.c
   and the eager optimizers in src/train. */
#ifndef NBOP_TRAINING_H
#define NBOP_TRAINING_H

#include "op.h"

#include "../core/variable.h"

typedef enum {
  NBOP_APPLY_SGD,             /* var */
  NBOP_APPLY_MOMENTUM,        /* var, accum */
  NBOP_APPLY_ADAM,            /* var, m, v */
  NBOP_APPLY_ADAMW,           /* var, m, v */
  NBOP_APPLY_RMSPROP,         /* var, ms, mom */
  NBOP_APPLY_CENTERED_RMSPROP /* var, mg, ms, mom */
} nbop_apply_kind;

#define NBOP_APPLY_MAX_VARS 4

/* The hyperparameters of one update (those a kind does not use are ignored). */
typedef struct nbop_hyper {
  double lr, momentum, beta1, beta2, beta1_power, beta2_power, epsilon, rho, weight_decay;
  bool nesterov;
} nbop_hyper;

/* NB_INVALID naming v when it was freed while a graph still uses it (variable.c). */
nb_code nbop_kcheck_variable_live(nbop_kargs *k, const nb_variable *v);
/* Variables an update of this kind touches: the variable and its slots. */
int nbop_apply_num_vars(nbop_apply_kind kind);
/* One fused pass updating vars[0] and its slots vars[1..] from grad (the variable's dtype,
   f32 or f64, and size), in place unless a variable's buffer is shared (then it is copied
   first: copy-on-write). The caller has checked dtypes and shapes. */
nb_code nbop_apply_update(nb_ctx *c, nbop_apply_kind kind, nb_variable *const *vars, const void *grad,
                          const nbop_hyper *h, int threads);

/* A sparse update from IndexedSlices' parts: values [n, row...] of the variable's dtype for
   the rows indices [n] (int32 or int64, each in [0, rows): the caller has checked) of
   vars[0] seen as [rows, row]. SGD subtracts lr values row by row, repeated rows one after
   another (TF's ResourceScatterSub). The others first sum the values of repeated rows (the
   densified gradient's rows); Momentum and RMSProp then update only the listed rows (TF's
   lazy sparse kernels), Adam and AdamW every row, as the dense update of the densified
   gradient does, each with the dense kernel's formulas and rounding. */
nb_code nbop_sparse_apply_update(nb_ctx *c, nbop_apply_kind kind, nb_variable *const *vars, const nb_tensor *values,
                                 const nb_tensor *indices, const nbop_hyper *h, int threads);
/* The first position of indices (int32 or int64) whose index is outside [0, rows), or -1. */
int64_t nbop_first_bad_index(const nb_tensor *indices, int64_t rows);
/* Fails k with NB_INVALID naming the first index of indices that is not a row of v. */
nb_code nbop_kcheck_rows(nbop_kargs *k, const nb_tensor *indices, const nb_variable *v);
/* indices[i] of an int32 or int64 tensor. */
static inline int64_t nbop_index_at(const nb_tensor *indices, int64_t i) {
  const void *d = nbcore_tdata(indices);
  return indices->dtype == NB_I32 ? ((const int32_t *)d)[i] : ((const int64_t *)d)[i];
}

#endif
