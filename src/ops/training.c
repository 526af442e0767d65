/* TF's training ops with variables as attrs: ResourceApplyGradientDescent,
   ResourceApplyMomentum, ResourceApplyAdam, ResourceApplyRMSProp,
   ResourceApplyCenteredRMSProp, and ResourceApplyAdamW (nabla's: Adam after Keras's
   decoupled weight decay, var -= var * weight_decay * lr, in the same pass). Adam's
   use_nesterov attr is not supported (Keras's Adam has no Nesterov variant). Inputs are
   TF's minus the resources (hyperparameters as scalars of the variable's dtype, then or
   among them grad); the variable and its slots travel in the internal attr _variables
   (pointer bits). Each update is one pass over memory, no temporaries: every element
   reads var, slots and grad once and writes var and slots once, with the formulas of
   TF's training_ops.cc functors. Output: the variable's new value (its buffer). */
#include "training.h"

#include <stddef.h>
#include <string.h>
#include <tgmath.h>

#define APPLY_PAR_MIN (1 << 15) /* elements below which an update stays on one thread, as elementwise ops */

typedef struct apply_job {
  nb_apply_kind kind;
  void *p[NB_APPLY_MAX_VARS];  /* var and slot data */
  const void *g;
  nb_hyper h;
} apply_job;

int nb_apply_num_vars(nb_apply_kind kind) {
  switch (kind) {
    case NB_APPLY_SGD: return 1;
    case NB_APPLY_MOMENTUM: return 2;
    case NB_APPLY_CENTERED_RMSPROP: return 4;
    default: return 3;
  }
}

/* The loops for one float type T over [lo, hi). Hyperparameters are converted to T once;
   nesterov variants select coefficients instead of branching in the loop. sqrt and the
   division make them compute-bound: NB_SIMD_CLONES. */
#define DEFINE_UPDATE(T, sfx)                                                                 \
  NB_SIMD_CLONES static void update_##sfx(void *arg, int64_t lo, int64_t hi) {                \
    const apply_job *j = arg;                                                                 \
    const nb_hyper *h = &j->h;                                                                \
    T *restrict w = (T *)j->p[0];                                                             \
    const T *restrict g = (const T *)j->g;                                                    \
    const T lr = (T)h->lr, eps = (T)h->epsilon;                                               \
    switch (j->kind) {                                                                        \
      case NB_APPLY_SGD:                                                                      \
        for (int64_t i = lo; i < hi; i++) w[i] -= g[i] * lr;                                  \
        break;                                                                                \
      case NB_APPLY_MOMENTUM: { /* accum = accum mu + g; var -= lr accum (nesterov: lr (g + mu accum)) */ \
        T *restrict a = (T *)j->p[1];                                                         \
        const T mu = (T)h->momentum, ca = h->nesterov ? mu * lr : lr, cg = h->nesterov ? lr : 0; \
        for (int64_t i = lo; i < hi; i++) {                                                   \
          T ai = a[i] * mu + g[i];                                                            \
          a[i] = ai;                                                                          \
          w[i] -= g[i] * cg + ai * ca;                                                        \
        }                                                                                     \
        break;                                                                                \
      }                                                                                       \
      case NB_APPLY_ADAM:                                                                     \
      case NB_APPLY_ADAMW: { /* lr_t = lr sqrt(1 - b2^t) / (1 - b1^t); var -= lr_t m / (sqrt(v) + eps) */ \
        T *restrict m = (T *)j->p[1], *restrict v = (T *)j->p[2];                             \
        const T b1 = (T)h->beta1, b2 = (T)h->beta2;                                           \
        const T lr_t = (T)(h->lr * sqrt(1 - h->beta2_power) / (1 - h->beta1_power));          \
        const T decay = (T)(h->weight_decay * h->lr); /* 0 for Adam: var - var * 0 is var */  \
        for (int64_t i = lo; i < hi; i++) {                                                   \
          T gi = g[i], mi = m[i] + (gi - m[i]) * (1 - b1), vi = v[i] + (gi * gi - v[i]) * (1 - b2); \
          m[i] = mi;                                                                          \
          v[i] = vi;                                                                          \
          T wi = w[i] - w[i] * decay;                                                         \
          w[i] = wi - mi * lr_t / (sqrt(vi) + eps);                                           \
        }                                                                                     \
        break;                                                                                \
      }                                                                                       \
      case NB_APPLY_RMSPROP: { /* ms += (g^2 - ms)(1 - rho); mom = mu mom + lr g / sqrt(ms + eps) */ \
        T *restrict ms = (T *)j->p[1], *restrict mom = (T *)j->p[2];                          \
        const T rho = (T)h->rho, mu = (T)h->momentum;                                         \
        for (int64_t i = lo; i < hi; i++) {                                                   \
          T gi = g[i], si = ms[i] + (gi * gi - ms[i]) * (1 - rho);                            \
          T oi = mom[i] * mu + gi * lr / sqrt(si + eps);                                      \
          ms[i] = si;                                                                         \
          mom[i] = oi;                                                                        \
          w[i] -= oi;                                                                         \
        }                                                                                     \
        break;                                                                                \
      }                                                                                       \
      case NB_APPLY_CENTERED_RMSPROP: { /* as RMSProp with ms - mg^2 for ms, mg the mean of g */ \
        T *restrict mg = (T *)j->p[1], *restrict ms = (T *)j->p[2], *restrict mom = (T *)j->p[3]; \
        const T rho = (T)h->rho, mu = (T)h->momentum;                                         \
        for (int64_t i = lo; i < hi; i++) {                                                   \
          T gi = g[i], ai = mg[i] + (gi - mg[i]) * (1 - rho), si = ms[i] + (gi * gi - ms[i]) * (1 - rho); \
          T oi = mom[i] * mu + gi * lr / sqrt(si - ai * ai + eps);                            \
          mg[i] = ai;                                                                         \
          ms[i] = si;                                                                         \
          mom[i] = oi;                                                                        \
          w[i] -= oi;                                                                         \
        }                                                                                     \
        break;                                                                                \
      }                                                                                       \
    }                                                                                         \
  }

DEFINE_UPDATE(float, f32)
DEFINE_UPDATE(double, f64)

nb_code nb_apply_update(nb_ctx *c, nb_apply_kind kind, nb_variable *const *vars, const void *grad, const nb_hyper *h,
                        int threads) {
  apply_job j = {.kind = kind, .g = grad, .h = *h};
  int nv = nb_apply_num_vars(kind);
  for (int i = 0; i < nv; i++)
    if (!(j.p[i] = nb_variable_writable(c, vars[i], true))) return c->status;
  int64_t n = vars[0]->size;
  nb_parallel_range(n >= APPLY_PAR_MIN ? threads : 1, n, vars[0]->dtype == NB_F32 ? update_f32 : update_f64, &j);
  return NB_OK;
}

/* ---- the ops ---------------------------------------------------------------------------- */

enum { ATTR_VARS, ATTR_LOCKING, ATTR_NESTEROV }; /* use_nesterov: Momentum only */
#define GRAD (-1)

/* An op's inputs: for each, the nb_hyper field it sets (its offset), or GRAD. */
typedef struct train_impl {
  nb_apply_kind kind;
  int16_t field[8];
} train_impl;

#define F(name) (int16_t) offsetof(nb_hyper, name)
static const train_impl sgd_impl = {NB_APPLY_SGD, {F(lr), GRAD}};
static const train_impl momentum_impl = {NB_APPLY_MOMENTUM, {F(lr), GRAD, F(momentum)}};
static const train_impl adam_impl = {
    NB_APPLY_ADAM, {F(beta1_power), F(beta2_power), F(lr), F(beta1), F(beta2), F(epsilon), GRAD}};
static const train_impl adamw_impl = {
    NB_APPLY_ADAMW, {F(beta1_power), F(beta2_power), F(lr), F(beta1), F(beta2), F(epsilon), GRAD, F(weight_decay)}};
static const train_impl rmsprop_impl = {NB_APPLY_RMSPROP, {F(lr), F(rho), F(momentum), F(epsilon), GRAD}};
static const train_impl centered_impl = {NB_APPLY_CENTERED_RMSPROP, {F(lr), F(rho), F(momentum), F(epsilon), GRAD}};
#undef F

static int grad_input(const train_impl *impl) {
  int i = 0;
  while (impl->field[i] != GRAD) i++;
  return i;
}

/* The variables named by _variables: the right count, each live, all of the var's dtype. */
static nb_code attr_variables(nb_kargs *k, const train_impl *impl, nb_variable **vars) {
  int n = nb_apply_num_vars(impl->kind);
  if (k->attr[ATTR_VARS].n != n)
    return nb_kfail(k, NB_INVALID, "attr _variables has %d entries, expected %d", k->attr[ATTR_VARS].n, n);
  for (int i = 0; i < n; i++) {
    nb_variable *v = vars[i] = nb_variable_from_bits(k->attr[ATTR_VARS].ints[i]);
    if (!v) return nb_kfail(k, NB_INVALID, "attr _variables entry %d is not set", i);
    if (v->freed)
      return nb_kfail(k, NB_INVALID, "variable '%s' was freed (nb_variable_free) while a graph still uses it", v->name);
    if (!nb_is_float(v->dtype) || v->dtype != vars[0]->dtype || v->size != vars[0]->size)
      return nb_kfail(k, NB_DTYPE, "variable '%s' is %s %s; expected a float variable like '%s' (%s %s)", v->name,
                      nb_dtype_name(v->dtype), nb_sstr(v->rank, v->shape), vars[0]->name,
                      nb_dtype_name(vars[0]->dtype), nb_sstr(vars[0]->rank, vars[0]->shape));
  }
  return NB_OK;
}

static nb_code train_infer(nb_kargs *k) {
  const train_impl *impl = k->def->impl;
  nb_variable *vars[NB_APPLY_MAX_VARS];
  nb_code code = attr_variables(k, impl, vars);
  if (code) return code;
  nb_variable *v = vars[0];
  for (int i = 0; i < k->nin; i++) {
    const nb_tensor *x = k->in[i];
    const char *shape = x->rank < 0 ? "<unknown>" : nb_tstr(x);
    if (impl->field[i] == GRAD && !nb_variable_accepts(v, x))
      return nb_kfail(k, x->dtype != v->dtype ? NB_DTYPE : NB_SHAPE,
                      "grad (input %d) has shape %s and dtype %s; variable '%s' needs a gradient of shape %s and "
                      "dtype %s", i, shape, nb_dtype_name(x->dtype), v->name, nb_sstr(v->rank, v->shape),
                      nb_dtype_name(v->dtype));
    if (impl->field[i] != GRAD && (x->dtype != v->dtype || x->rank > 0))
      return nb_kfail(k, x->dtype != v->dtype ? NB_DTYPE : NB_SHAPE,
                      "input %d must be a %s scalar like variable '%s', got shape %s and dtype %s", i,
                      nb_dtype_name(v->dtype), v->name, shape, nb_dtype_name(x->dtype));
  }
  nb_meta_set(&k->out[0], v->dtype, v->rank, v->shape);
  return NB_OK;
}

/* infer has checked the variables and inputs of this very call */
static nb_code train_kernel(nb_kargs *k) {
  const train_impl *impl = k->def->impl;
  nb_variable *vars[NB_APPLY_MAX_VARS];
  for (int i = 0; i < k->attr[ATTR_VARS].n; i++) vars[i] = nb_variable_from_bits(k->attr[ATTR_VARS].ints[i]);
  nb_hyper h = {.nesterov = k->def->nattrs > ATTR_NESTEROV && k->attr[ATTR_NESTEROV].b};
  for (int i = 0; i < k->nin; i++) {
    const void *d = nb_tdata(k->in[i]);
    if (impl->field[i] != GRAD)
      *(double *)((char *)&h + impl->field[i]) = k->in[i]->dtype == NB_F32 ? *(const float *)d : *(const double *)d;
  }
  nb_code code = nb_apply_update(k->ctx, impl->kind, vars, nb_tdata(k->in[grad_input(impl)]), &h, k->threads);
  if (!code) nb_variable_share_into(k->ctx, k->res[0], vars[0]);
  return code;
}

#define TRAIN_ATTRS {"_variables", NB_ATTR_INTS, {.n = 0}, true}, {"use_locking", NB_ATTR_BOOL, {.b = false}, false}
#define TRAIN_OP(op_name, n, impl_)                                                                         \
  {.name = op_name, .nin = n, .nout = 1, .alias = -1, .stateful = true, .nattrs = 2, .attrs = {TRAIN_ATTRS}, \
   .infer = train_infer, .kernel = train_kernel, .impl = &(impl_)}
#define NESTEROV_OP(op_name, n, impl_)                                                                      \
  {.name = op_name, .nin = n, .nout = 1, .alias = -1, .stateful = true, .nattrs = 3,                        \
   .attrs = {TRAIN_ATTRS, {"use_nesterov", NB_ATTR_BOOL, {.b = false}, false}}, .infer = train_infer,       \
   .kernel = train_kernel, .impl = &(impl_)}

static nb_op_def training_ops[] = {
    TRAIN_OP("ResourceApplyGradientDescent", 2, sgd_impl),
    NESTEROV_OP("ResourceApplyMomentum", 3, momentum_impl),
    TRAIN_OP("ResourceApplyAdam", 7, adam_impl),
    TRAIN_OP("ResourceApplyAdamW", 8, adamw_impl),
    TRAIN_OP("ResourceApplyRMSProp", 5, rmsprop_impl),
    TRAIN_OP("ResourceApplyCenteredRMSProp", 5, centered_impl),
};

nb_op_family nb_training_family(void) { return (nb_op_family){training_ops, 6}; }
