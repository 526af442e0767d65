/* TF's training ops with variables as attrs: ResourceApplyGradientDescent,
   ResourceApplyMomentum, ResourceApplyAdam, ResourceApplyRMSProp,
   ResourceApplyCenteredRMSProp, and ResourceApplyAdamW (nabla's: Adam after Keras's
   decoupled weight decay, var -= var * weight_decay * lr, in the same pass). Adam's
   use_nesterov attr is not supported (Keras's Adam has no Nesterov variant). Inputs are
   TF's minus the resources (hyperparameters as scalars of the variable's dtype, then or
   among them grad); the variable and its slots travel in the internal attr _variables
   (pointer bits). Each update is one pass over memory, no temporaries: every element
   reads var, slots and grad once and writes var and slots once, with the formulas of
   TF's training_ops.cc functors. Output: the variable's new value (its buffer).

   Sparse updates (an IndexedSlices gradient: grad [N, row...] then indices [N] after it):
   TF's ResourceSparseApplyMomentum, ResourceSparseApplyRMSProp and
   ResourceSparseApplyCenteredRMSProp update only the listed rows, var and slots alike
   (TF's lazy semantics: an untouched row's slots do not decay); nabla's
   ResourceSparseApplyAdam and ResourceSparseApplyAdamW update every row as the dense ops
   do given the densified gradient (Keras's non-lazy sparse Adam: m = beta1 m on all rows,
   then the listed rows' (1 - beta1) g added), in one pass. Repeated indices sum first
   (Keras deduplicates before these kernels), so every sparse op agrees with the dense one
   on the densified gradient on the rows it touches. SGD's sparse update is
   ResourceScatterSub (src/ops/variable.c). */
#include "training.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#define APPLY_PAR_MIN (1 << 15) /* elements below which an update stays on one thread, as elementwise ops */

typedef struct apply_job {
  nbop_apply_kind kind;
  void *p[NBOP_APPLY_MAX_VARS]; /* var and slot data */
  const void *g;
  nbop_hyper h;
} apply_job;

int nbop_apply_num_vars(nbop_apply_kind kind) {
  switch (kind) {
    case NBOP_APPLY_SGD: return 1;
    case NBOP_APPLY_MOMENTUM: return 2;
    case NBOP_APPLY_CENTERED_RMSPROP: return 4;
    default: return 3;
  }
}

/* The loops over [lo, hi) of one float type each (training_update.inc). */
#define UPDATE_T float
#define UPDATE_FN update_f32
#include "training_update.inc"
#define UPDATE_T double
#define UPDATE_FN update_f64
#include "training_update.inc"

nb_code nbop_apply_update(nb_ctx *c, nbop_apply_kind kind, nb_variable *const *vars, const void *grad,
                          const nbop_hyper *h, int threads) {
  apply_job j = {.kind = kind, .g = grad, .h = *h};
  int nv = nbop_apply_num_vars(kind);
  for (int i = 0; i < nv; i++)
    if (!(j.p[i] = nbcore_variable_writable(c, vars[i], true))) return c->status;
  int64_t n = vars[0]->size;
  nbop_parallel_range(n >= APPLY_PAR_MIN ? threads : 1, n, vars[0]->dtype == NB_F32 ? update_f32 : update_f64, &j);
  return NB_OK;
}

/* ---- sparse updates ------------------------------------------------------------------------ */

int64_t nbop_first_bad_index(const nb_tensor *indices, int64_t rows) {
  for (int64_t i = 0; i < indices->size; i++) {
    int64_t at = nbop_index_at(indices, i);
    if (at < 0 || at >= rows) return i;
  }
  return -1;
}

nb_code nbop_kcheck_rows(nbop_kargs *k, const nb_tensor *indices, const nb_variable *v) {
  int64_t rows = v->shape[0], bad = nbop_first_bad_index(indices, rows);
  if (bad < 0) return NB_OK;
  return nbop_kfail(k, NB_INVALID, "indices[%lld] = %lld is not in [0, %lld): variable '%s' has %lld rows",
                    (long long)bad, (long long)nbop_index_at(indices, bad), (long long)rows, v->name, (long long)rows);
}

typedef void (*update_fn)(void *arg, int64_t lo, int64_t hi);

/* A sparse update: the dense kernel run row by row on the listed rows (and, for Adam, with
   a zero gradient on the others). */
typedef struct sparse_job {
  apply_job base; /* kind, hyperparameters and the variables' data */
  update_fn fn;
  int nvars;
  int64_t row_size; /* elements per row */
  size_t row_bytes;
  const int64_t *rows; /* the distinct listed rows, ascending */
  const char *g;       /* their summed gradient rows */
  int64_t n;
  const char *zeros; /* zero gradient rows for the untouched rows, zero_rows of them */
  int64_t zero_rows;
} sparse_job;

/* The dense update of rows [row, row + count) with their gradient rows g. */
static void update_rows(const sparse_job *s, int64_t row, int64_t count, const void *g) {
  apply_job j = s->base;
  for (int v = 0; v < s->nvars; v++) j.p[v] = (char *)s->base.p[v] + (size_t)row * s->row_bytes;
  j.g = g;
  s->fn(&j, 0, count * s->row_size);
}

/* How many of rows[u..limit) continue rows[u] consecutively: they share one call. */
static int64_t run_length(const int64_t *rows, int64_t u, int64_t limit) {
  int64_t run = 1;
  while (u + run < limit && rows[u + run] == rows[u] + run) run++;
  return run;
}

/* Momentum, RMSProp: listed rows [lo, hi) of rows[] only (distinct: threads never share a row). */
static void lazy_range(void *arg, int64_t lo, int64_t hi) {
  const sparse_job *s = arg;
  for (int64_t u = lo; u < hi;) {
    int64_t run = run_length(s->rows, u, hi);
    update_rows(s, s->rows[u], run, s->g + (size_t)u * s->row_bytes);
    u += run;
  }
}

/* Adam: every table row in [lo, hi), the untouched ones with a zero gradient. */
static void dense_range(void *arg, int64_t lo, int64_t hi) {
  const sparse_job *s = arg;
  int64_t u = 0, end = s->n; /* u: the first listed row >= lo, by bisection */
  while (u < end) {
    int64_t mid = u + (end - u) / 2;
    if (s->rows[mid] < lo)
      u = mid + 1;
    else
      end = mid;
  }
  for (int64_t r = lo; r < hi;) {
    if (u < s->n && s->rows[u] == r) {
      int64_t run = run_length(s->rows, u, s->n);
      if (run > hi - r) run = hi - r;
      update_rows(s, r, run, s->g + (size_t)u * s->row_bytes);
      u += run, r += run;
    } else {
      int64_t next = u < s->n && s->rows[u] < hi ? s->rows[u] : hi;
      int64_t count = next - r < s->zero_rows ? next - r : s->zero_rows;
      update_rows(s, r, count, s->zeros);
      r += count;
    }
  }
}

typedef struct index_pos {
  int64_t index, pos;
} index_pos;

static int by_index_then_position(const void *a, const void *b) {
  const index_pos *x = a, *y = b;
  if (x->index != y->index) return x->index < y->index ? -1 : 1;
  return (x->pos > y->pos) - (x->pos < y->pos);
}

#define ADD_ROW(T) \
  for (int64_t e = 0; e < row_size; e++) ((T *)dst)[e] += ((const T *)src)[e]

/* The distinct rows of indices, ascending, into rows[] and their values summed in position
   order from zero into g (as the densified gradient, UnsortedSegmentSum, sums them);
   returns how many. */
static int64_t sum_repeated_rows(const nb_tensor *values, const nb_tensor *indices, int64_t row_size, index_pos *order,
                                 int64_t *rows, char *g) {
  int64_t n = indices->size, distinct = 0;
  size_t row_bytes = (size_t)row_size * nb_dtype_size(values->dtype);
  for (int64_t i = 0; i < n; i++) order[i] = (index_pos){nbop_index_at(indices, i), i};
  qsort(order, (size_t)n, sizeof *order, by_index_then_position);
  for (int64_t i = 0; i < n; i++) {
    if (i == 0 || order[i].index != order[i - 1].index) {
      rows[distinct] = order[i].index;
      memset(g + (size_t)distinct++ * row_bytes, 0, row_bytes);
    }
    char *dst = g + (size_t)(distinct - 1) * row_bytes;
    const char *src = (const char *)nbcore_tdata(values) + (size_t)order[i].pos * row_bytes;
    if (values->dtype == NB_F32)
      ADD_ROW(float);
    else
      ADD_ROW(double);
  }
  return distinct;
}
#undef ADD_ROW

/* SGD: each listed row in turn, var -= lr values (the dense kernel on one row). */
static void scatter_rows(sparse_job *s, const nb_tensor *values, const nb_tensor *indices) {
  for (int64_t i = 0; i < indices->size; i++)
    update_rows(s, nbop_index_at(indices, i), 1, (const char *)nbcore_tdata(values) + (size_t)i * s->row_bytes);
}

nb_code nbop_sparse_apply_update(nb_ctx *c, nbop_apply_kind kind, nb_variable *const *vars, const nb_tensor *values,
                                 const nb_tensor *indices, const nbop_hyper *h, int threads) {
  const nb_variable *var = vars[0];
  sparse_job s = {.base = {.kind = kind, .h = *h},
                  .fn = var->dtype == NB_F32 ? update_f32 : update_f64,
                  .nvars = nbop_apply_num_vars(kind)};
  for (int i = 0; i < s.nvars; i++)
    if (!(s.base.p[i] = nbcore_variable_writable(c, vars[i], true))) return c->status;
  if (var->size == 0) return NB_OK;
  s.row_size = var->size / var->shape[0];
  s.row_bytes = (size_t)s.row_size * nb_dtype_size(var->dtype);
  if (kind == NBOP_APPLY_SGD) {
    scatter_rows(&s, values, indices);
    return NB_OK;
  }
  int64_t n = indices->size;
  bool dense = kind == NBOP_APPLY_ADAM || kind == NBOP_APPLY_ADAMW;
  s.zero_rows = dense ? 1 + 4095 / s.row_size : 0; /* about 4096 elements per call */
  index_pos *order = malloc((size_t)n * sizeof *order + 1);
  int64_t *rows = malloc((size_t)n * sizeof *rows + 1);
  char *g = malloc((size_t)n * s.row_bytes + 1);
  char *zeros = calloc((size_t)s.zero_rows * s.row_bytes + 1, 1);
  nb_code code = order && rows && g && zeros ? NB_OK
                                             : nbcore_fail(c, NB_NOMEM,
                                                           "out of memory updating variable '%s' "
                                                           "sparsely",
                                                           var->name);
  if (!code) {
    s.n = sum_repeated_rows(values, indices, s.row_size, order, rows, g);
    s.rows = rows, s.g = g, s.zeros = zeros;
    if (dense)
      nbop_parallel_range(var->size >= APPLY_PAR_MIN ? threads : 1, var->shape[0], dense_range, &s);
    else
      nbop_parallel_range(s.n * s.row_size >= APPLY_PAR_MIN ? threads : 1, s.n, lazy_range, &s);
  }
  free(order);
  free(rows);
  free(g);
  free(zeros);
  return code;
}

/* ---- the ops ---------------------------------------------------------------------------- */

enum { ATTR_VARS, ATTR_LOCKING, ATTR_NESTEROV }; /* use_nesterov: Momentum only */
#define GRAD (-1)
#define INDICES (-2) /* sparse ops: the gradient's rows, after it */

/* An op's inputs: for each, the nbop_hyper field it sets (its offset), GRAD or INDICES. */
typedef struct train_impl {
  nbop_apply_kind kind;
  bool sparse;
  int16_t field[9];
} train_impl;

#define F(name) (int16_t) offsetof(nbop_hyper, name)
static const train_impl sgd_impl = {NBOP_APPLY_SGD, false, {F(lr), GRAD}};
static const train_impl momentum_impl = {NBOP_APPLY_MOMENTUM, false, {F(lr), GRAD, F(momentum)}};
static const train_impl adam_impl = {
    NBOP_APPLY_ADAM, false, {F(beta1_power), F(beta2_power), F(lr), F(beta1), F(beta2), F(epsilon), GRAD}};
static const train_impl adamw_impl = {
    NBOP_APPLY_ADAMW,
    false,
    {F(beta1_power), F(beta2_power), F(lr), F(beta1), F(beta2), F(epsilon), GRAD, F(weight_decay)}};
static const train_impl rmsprop_impl = {NBOP_APPLY_RMSPROP, false, {F(lr), F(rho), F(momentum), F(epsilon), GRAD}};
static const train_impl centered_impl = {
    NBOP_APPLY_CENTERED_RMSPROP, false, {F(lr), F(rho), F(momentum), F(epsilon), GRAD}};
/* the sparse ops: TF's inputs with indices after grad */
static const train_impl sparse_momentum_impl = {NBOP_APPLY_MOMENTUM, true, {F(lr), GRAD, INDICES, F(momentum)}};
static const train_impl sparse_adam_impl = {
    NBOP_APPLY_ADAM, true, {F(beta1_power), F(beta2_power), F(lr), F(beta1), F(beta2), F(epsilon), GRAD, INDICES}};
static const train_impl sparse_adamw_impl = {
    NBOP_APPLY_ADAMW,
    true,
    {F(beta1_power), F(beta2_power), F(lr), F(beta1), F(beta2), F(epsilon), GRAD, INDICES, F(weight_decay)}};
static const train_impl sparse_rmsprop_impl = {
    NBOP_APPLY_RMSPROP, true, {F(lr), F(rho), F(momentum), F(epsilon), GRAD, INDICES}};
static const train_impl sparse_centered_impl = {
    NBOP_APPLY_CENTERED_RMSPROP, true, {F(lr), F(rho), F(momentum), F(epsilon), GRAD, INDICES}};
#undef F

static int grad_input(const train_impl *impl) {
  int i = 0;
  while (impl->field[i] != GRAD) i++;
  return i;
}

/* The variables named by _variables: the right count, each live, all of the var's dtype. */
static nb_code attr_variables(nbop_kargs *k, const train_impl *impl, nb_variable **vars) {
  int n = nbop_apply_num_vars(impl->kind);
  if (k->attr[ATTR_VARS].n != n)
    return nbop_kfail(k, NB_INVALID, "attr _variables has %d entries, expected %d", k->attr[ATTR_VARS].n, n);
  for (int i = 0; i < n; i++) {
    nb_variable *v = vars[i] = nbcore_variable_from_bits(k->attr[ATTR_VARS].ints[i]);
    if (!v) return nbop_kfail(k, NB_INVALID, "attr _variables entry %d is not set", i);
    nb_code code = nbop_kcheck_variable_live(k, v);
    if (code) return code;
    if (!nbcore_is_float(v->dtype) || v->dtype != vars[0]->dtype || v->size != vars[0]->size)
      return nbop_kfail(k, NB_DTYPE, "variable '%s' is %s %s; expected a float variable like '%s' (%s %s)", v->name,
                        nb_dtype_name(v->dtype), nbop_sstr(v->rank, v->shape), vars[0]->name,
                        nb_dtype_name(vars[0]->dtype), nbop_sstr(vars[0]->rank, vars[0]->shape));
  }
  return NB_OK;
}

static const char *shape_str(const nb_tensor *x) { return x->rank < 0 ? "<unknown>" : nbop_tstr(x); }

static nb_code check_dense_grad(nbop_kargs *k, const nb_variable *v, int i) {
  const nb_tensor *x = k->in[i];
  if (nbcore_variable_accepts(v, x)) return NB_OK;
  return nbop_kfail(
      k, x->dtype != v->dtype ? NB_DTYPE : NB_SHAPE,
      "grad (input %d) has shape %s and dtype %s; variable '%s' needs a gradient of shape %s and dtype %s", i,
      shape_str(x), nb_dtype_name(x->dtype), v->name, nbop_sstr(v->rank, v->shape), nb_dtype_name(v->dtype));
}

/* Sparse ops: grad [N, the variable's dims 1..] and indices int [N] (unknown dims pass). */
static nb_code check_sparse_grad(nbop_kargs *k, const nb_variable *v, int i) {
  const nb_tensor *x = k->in[i], *idx = k->in[i + 1];
  bool fits = x->dtype == v->dtype && (x->rank < 0 || x->rank == v->rank);
  for (int d = 1; fits && x->rank > 0 && d < v->rank; d++) fits = x->shape[d] < 0 || x->shape[d] == v->shape[d];
  if (!fits)
    return nbop_kfail(k, x->dtype != v->dtype ? NB_DTYPE : NB_SHAPE,
                      "grad (input %d) has shape %s and dtype %s; variable '%s' (%s %s) needs %s rows of shape %s", i,
                      shape_str(x), nb_dtype_name(x->dtype), v->name, nb_dtype_name(v->dtype),
                      nbop_sstr(v->rank, v->shape), nb_dtype_name(v->dtype), nbop_sstr(v->rank - 1, v->shape + 1));
  if (idx->dtype != NB_I32 && idx->dtype != NB_I64)
    return nbop_kfail(k, NB_DTYPE, "indices (input %d) has dtype %s; expected int32 or int64", i + 1,
                      nb_dtype_name(idx->dtype));
  if (idx->rank >= 0 &&
      (idx->rank != 1 || (x->rank > 0 && x->shape[0] >= 0 && idx->shape[0] >= 0 && x->shape[0] != idx->shape[0])))
    return nbop_kfail(k, NB_SHAPE, "indices (input %d) has shape %s; expected one index per row of grad %s", i + 1,
                      shape_str(idx), shape_str(x));
  return NB_OK;
}

/* The variables, and each input fits them (unknown dims and ranks fit). */
static nb_code train_validate(nbop_kargs *k) {
  const train_impl *impl = k->def->impl;
  nb_variable *vars[NBOP_APPLY_MAX_VARS];
  nb_code code = attr_variables(k, impl, vars);
  if (code) return code;
  nb_variable *v = vars[0];
  if (impl->sparse && v->rank == 0)
    return nbop_kfail(k, NB_SHAPE, "variable '%s' is a scalar; sparse updates need rows", v->name);
  for (int i = 0; i < k->nin && !code; i++) {
    const nb_tensor *x = k->in[i];
    if (impl->field[i] == GRAD)
      code = impl->sparse ? check_sparse_grad(k, v, i) : check_dense_grad(k, v, i);
    else if (impl->field[i] != INDICES && (x->dtype != v->dtype || x->rank > 0))
      code = nbop_kfail(k, x->dtype != v->dtype ? NB_DTYPE : NB_SHAPE,
                        "input %d must be a %s scalar like variable '%s', got shape %s and dtype %s", i,
                        nb_dtype_name(v->dtype), v->name, shape_str(x), nb_dtype_name(x->dtype));
  }
  return code;
}

/* The output is the variable's value after the update, whatever the inputs' ranks (the
   ops are any_rank). */
static nb_code train_infer(nbop_kargs *k) {
  const nb_variable *v = nbcore_variable_from_bits(k->attr[ATTR_VARS].ints[0]);
  nbop_meta_set(&k->out[0], v->dtype, v->rank, v->shape);
  return NB_OK;
}

/* The sparse update, once every index is known to name a row of the variable. */
static nb_code sparse_update(nbop_kargs *k, const train_impl *impl, nb_variable **vars, const nbop_hyper *h) {
  int g = grad_input(impl);
  const nb_tensor *indices = k->in[g + 1];
  nb_code code = nbop_kcheck_rows(k, indices, vars[0]);
  return code ? code : nbop_sparse_apply_update(k->ctx, impl->kind, vars, k->in[g], indices, h, k->threads);
}

/* validate has checked the variables and inputs of this very call */
static nb_code train_kernel(nbop_kargs *k) {
  const train_impl *impl = k->def->impl;
  nb_variable *vars[NBOP_APPLY_MAX_VARS];
  for (int i = 0; i < k->attr[ATTR_VARS].n; i++) vars[i] = nbcore_variable_from_bits(k->attr[ATTR_VARS].ints[i]);
  nbop_hyper h = {.nesterov = k->def->nattrs > ATTR_NESTEROV && k->attr[ATTR_NESTEROV].b};
  for (int i = 0; i < k->nin; i++) {
    const void *d = nbcore_tdata(k->in[i]);
    if (impl->field[i] >= 0)
      *(double *)((char *)&h + impl->field[i]) = k->in[i]->dtype == NB_F32 ? *(const float *)d : *(const double *)d;
  }
  nb_code code =
      impl->sparse ? sparse_update(k, impl, vars, &h)
                   : nbop_apply_update(k->ctx, impl->kind, vars, nbcore_tdata(k->in[grad_input(impl)]), &h, k->threads);
  if (!code) nbcore_variable_share_into(k->ctx, k->res[0], vars[0]);
  return code;
}

#define TRAIN_ATTRS \
  {"_variables", NB_ATTR_INTS, {.n = 0}, true}, { "use_locking", NB_ATTR_BOOL, {.b = false}, false }
#define TRAIN_OP(op_name, n, impl_)                                                                                    \
  {                                                                                                                    \
    .name = op_name, .nin = n, .nout = 1, .alias = -1, .stateful = true, .any_rank = true, .nattrs = 2,                \
    .attrs = {TRAIN_ATTRS}, .validate = train_validate, .infer = train_infer, .kernel = train_kernel, .impl = &(impl_) \
  }
#define NESTEROV_OP(op_name, n, impl_)                                                                       \
  {                                                                                                          \
    .name = op_name, .nin = n, .nout = 1, .alias = -1, .stateful = true, .any_rank = true, .nattrs = 3,      \
    .attrs = {TRAIN_ATTRS, {"use_nesterov", NB_ATTR_BOOL, {.b = false}, false}}, .validate = train_validate, \
    .infer = train_infer, .kernel = train_kernel, .impl = &(impl_)                                           \
  }

static nbop_def training_ops[] = {
    TRAIN_OP("ResourceApplyGradientDescent", 2, sgd_impl),
    NESTEROV_OP("ResourceApplyMomentum", 3, momentum_impl),
    TRAIN_OP("ResourceApplyAdam", 7, adam_impl),
    TRAIN_OP("ResourceApplyAdamW", 8, adamw_impl),
    TRAIN_OP("ResourceApplyRMSProp", 5, rmsprop_impl),
    TRAIN_OP("ResourceApplyCenteredRMSProp", 5, centered_impl),
    NESTEROV_OP("ResourceSparseApplyMomentum", 4, sparse_momentum_impl),
    TRAIN_OP("ResourceSparseApplyAdam", 8, sparse_adam_impl),
    TRAIN_OP("ResourceSparseApplyAdamW", 9, sparse_adamw_impl),
    TRAIN_OP("ResourceSparseApplyRMSProp", 6, sparse_rmsprop_impl),
    TRAIN_OP("ResourceSparseApplyCenteredRMSProp", 6, sparse_centered_impl),
};

nbop_family nbop_training_family(void) {
  return (nbop_family){training_ops, sizeof training_ops / sizeof *training_ops};
}
