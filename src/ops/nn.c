/* Neural-network ops after TF's nn_ops.cc: Softmax and LogSoftmax over the last dim, the
   two softmax cross-entropy losses, the activations Relu6, LeakyRelu, Selu and Gelu with
   their fused gradient ops, L2Loss and OneHot. Row ops (softmax, the losses) run one
   contiguous row at a time, rows split across threads; the activations are flat loops.
   Gelu/GeluGrad are nabla's own op types: TF's core registry has no Gelu op (tf.nn.gelu
   is composed in Python), so they take tf.nn.gelu's argument as a bool attr. */
#include "elementwise.h"
#include "vmath.h"

#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#define SELU_SCALE 1.0507009873554804934193349852946
#define SELU_ALPHA 1.6732632423543772848170429916717
#define SQRT_2_OVER_PI 0.79788456080286535587989211986876
#define INV_SQRT_2PI 0.39894228040143267793994605993438
#define GELU_CUBIC 0.044715

/* ---- activations: y = f(x; p), with p the op's one attr (alpha, approximate) ---------- */

#define ACT_FN(name, expr)                              \
  static inline float name##_f32(float v, double p) {   \
    typedef float T __attribute__((unused));            \
    (void)p;                                            \
    return (T)(expr);                                   \
  }                                                     \
  static inline double name##_f64(double v, double p) { \
    typedef double T __attribute__((unused));           \
    (void)p;                                            \
    return (T)(expr);                                   \
  }
#define ACT_INT_FN(name, expr)                            \
  static inline int32_t name##_i32(int32_t v, double p) { \
    (void)p;                                              \
    return (int32_t)(expr);                               \
  }                                                       \
  static inline int64_t name##_i64(int64_t v, double p) { \
    (void)p;                                              \
    return (int64_t)(expr);                               \
  }

/* NaN maps to 0, as Relu's does */
ACT_FN(relu6, v > 0 ? (v < 6 ? v : 6) : 0)
ACT_INT_FN(relu6, v > 0 ? (v < 6 ? v : 6) : 0)
/* TF selects rather than taking max(x, alpha x), which differs for alpha > 1 */
ACT_FN(leaky_relu, v > 0 ? v : v * (T)p)
ACT_FN(selu, v > 0 ? (T)SELU_SCALE * v : (T)(SELU_SCALE * SELU_ALPHA) * expm1(v))

/* float32 erfc that vectorizes (libm's erfcf costs ~10 ns an element): for z = |x|,
   erfc(z) = t e^(-z^2 + P(t)) with t = 1/(1 + z/2) and a degree-9 Chebyshev-fitted P
   (Numerical Recipes' erfcc: relative error below 1.2e-7 for every z, under 4e-7 here in
   float arithmetic); erfc(-z) = 2 - erfc(z). */
static inline float verfcf(float x) {
  float z = fabsf(x), t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  /* e^(-z^2) as e^(-h^2) e^((h - z)(h + z)) with h = z to 12 bits, so h^2 is exact: the
     float -z^2 alone would be off by up to 4e-6 relative where z^2 is near 80 */
  float h = f32_from_bits(f32_bits(z) & 0xfffff000u);
  float r = t * vexpf(-h * h) * vexpf((h - z) * (h + z) + p);
  return x < 0 ? 2.0f - r : r;
}

/* exact: x Phi(x) = x erfc(-x / sqrt 2) / 2 (erfc, as TF: 1 + erf cancels for x < 0);
   approximate (p != 0): x (1 + tanh u) / 2 with u = sqrt(2/pi) (x + 0.044715 x^3),
   computed as x sigmoid(2u) = x / (1 + e^(-2u)), where 1 + tanh u cannot cancel */
static inline double gelu_u(double v) { return SQRT_2_OVER_PI * (v + GELU_CUBIC * v * v * v); }
static inline float gelu_uf(float v) { return (float)SQRT_2_OVER_PI * (v + (float)GELU_CUBIC * v * v * v); }
static inline float gelu_tanh_f32(float v, double p) {
  (void)p;
  return v / (1 + vexpf(-2 * gelu_uf(v)));
}
static inline float gelu_exact_f32(float v, double p) {
  (void)p;
  return 0.5f * v * verfcf(v * -0.70710678f);
}
static inline double gelu_tanh_f64(double v, double p) {
  (void)p;
  return v / (1 + exp(-2 * gelu_u(v)));
}
static inline double gelu_exact_f64(double v, double p) {
  (void)p;
  return 0.5 * v * erfc(v * -0.70710678118654752440);
}

/* fused gradients g(a, b; p) in TF's input order (gradients, features|outputs) */
#define ACT_GRAD_FN(name, a, b, expr)                             \
  static inline float name##_f32(float a, float b, double p) {    \
    typedef float T __attribute__((unused));                      \
    (void)p;                                                      \
    return (T)(expr);                                             \
  }                                                               \
  static inline double name##_f64(double a, double b, double p) { \
    typedef double T __attribute__((unused));                     \
    (void)p;                                                      \
    return (T)(expr);                                             \
  }

ACT_GRAD_FN(relu6_grad, g, f, g *(T)(f > 0 && f < 6))
static inline int32_t relu6_grad_i32(int32_t g, int32_t f, double p) {
  (void)p;
  return g * (f > 0 && f < 6);
}
static inline int64_t relu6_grad_i64(int64_t g, int64_t f, double p) {
  (void)p;
  return g * (f > 0 && f < 6);
}
ACT_GRAD_FN(leaky_relu_grad, g, f, f > 0 ? g : g * (T)p)
/* d selu/dx = scale alpha e^x = outputs + scale alpha where x < 0, scale above */
ACT_GRAD_FN(selu_grad, g, o, o < 0 ? g * (o + (T)(SELU_SCALE * SELU_ALPHA)) : g * (T)SELU_SCALE)
/* exact: Phi(x) + x phi(x); approximate: (1 + t)/2 + x (1 - t^2) u'(x) / 2 with t = tanh u,
   which is s + 2 x s (1 - s) u' for s = sigmoid(2u) = 1/(1 + e), 1 - s = e s, e = e^(-2u) */
static inline double gelu_exact_grad_f64(double g, double x, double p) {
  (void)p;
  return g * (0.5 * erfc(x * -0.70710678118654752440) + x * INV_SQRT_2PI * exp(-0.5 * x * x));
}
static inline double gelu_tanh_grad_f64(double g, double x, double p) {
  (void)p;
  double a = -2 * gelu_u(x), du = SQRT_2_OVER_PI * (1 + 3 * GELU_CUBIC * x * x);
  double e = exp(a > 700 ? 700 : a), s = 1 / (1 + e); /* e stays finite, so e s is not inf * 0 */
  return g * (s + 2 * x * s * (e * s) * du);
}
static inline float gelu_exact_grad_f32(float g, float x, double p) {
  (void)p;
  return g * (0.5f * verfcf(x * -0.70710678f) + x * (float)INV_SQRT_2PI * vexpf(-0.5f * x * x));
}
static inline float gelu_tanh_grad_f32(float g, float x, double p) {
  (void)p;
  float a = -2 * gelu_uf(x), du = (float)SQRT_2_OVER_PI * (1 + 3 * (float)GELU_CUBIC * x * x);
  float e = vexpf(a > 88 ? 88 : a), s = 1 / (1 + e); /* e^88 < FLT_MAX: e s is not inf * 0 */
  return g * (s + 2 * x * s * (e * s) * du);
}

#define ACT_LOOP(name, sfx, T)                                                                    \
  NBOP_SIMD_CLONES static void name##_loop_##sfx(const void *px, void *py, int64_t n, double p) { \
    const T *x = px;                                                                              \
    T *y = py;                                                                                    \
    for (int64_t i = 0; i < n; i++) y[i] = name##_##sfx(x[i], p);                                 \
  }
#define ACT_GRAD_LOOP(name, sfx, T)                                                                               \
  NBOP_SIMD_CLONES static void name##_loop_##sfx(const void *pa, const void *pb, void *po, int64_t n, double p) { \
    const T *a = pa, *b = pb;                                                                                     \
    T *o = po;                                                                                                    \
    for (int64_t i = 0; i < n; i++) o[i] = name##_##sfx(a[i], b[i], p);                                           \
  }
#define LOOPS_FLOAT(KIND, name) KIND(name, f32, float) KIND(name, f64, double)
#define LOOPS_NUM(KIND, name) LOOPS_FLOAT(KIND, name) KIND(name, i32, int32_t) KIND(name, i64, int64_t)
#define TABLE_FLOAT(name) [NB_F32] = name##_loop_f32, [NB_F64] = name##_loop_f64
#define TABLE_NUM(name) TABLE_FLOAT(name), [NB_I32] = name##_loop_i32, [NB_I64] = name##_loop_i64

LOOPS_NUM(ACT_LOOP, relu6)
LOOPS_FLOAT(ACT_LOOP, leaky_relu)
LOOPS_FLOAT(ACT_LOOP, selu)
LOOPS_FLOAT(ACT_LOOP, gelu_tanh)
LOOPS_FLOAT(ACT_LOOP, gelu_exact)
/* one loop per form, so neither computes the other's function */
static void gelu_loop_f32(const void *x, void *y, int64_t n, double p) {
  if (p != 0)
    gelu_tanh_loop_f32(x, y, n, p);
  else
    gelu_exact_loop_f32(x, y, n, p);
}
static void gelu_loop_f64(const void *x, void *y, int64_t n, double p) {
  if (p != 0)
    gelu_tanh_loop_f64(x, y, n, p);
  else
    gelu_exact_loop_f64(x, y, n, p);
}
LOOPS_NUM(ACT_GRAD_LOOP, relu6_grad)
LOOPS_FLOAT(ACT_GRAD_LOOP, leaky_relu_grad)
LOOPS_FLOAT(ACT_GRAD_LOOP, selu_grad)
LOOPS_FLOAT(ACT_GRAD_LOOP, gelu_exact_grad)
LOOPS_FLOAT(ACT_GRAD_LOOP, gelu_tanh_grad)
static void gelu_grad_loop_f32(const void *g, const void *x, void *o, int64_t n, double p) {
  if (p != 0)
    gelu_tanh_grad_loop_f32(g, x, o, n, p);
  else
    gelu_exact_grad_loop_f32(g, x, o, n, p);
}
static void gelu_grad_loop_f64(const void *g, const void *x, void *o, int64_t n, double p) {
  if (p != 0)
    gelu_tanh_grad_loop_f64(g, x, o, n, p);
  else
    gelu_exact_grad_loop_f64(g, x, o, n, p);
}

/* ---- Softmax, LogSoftmax: rows of the last dim, shifted by the row max ------------------ */

/* y = e^(x - m) over a row, returning its sum, and the row max. The sum and the max keep
   8 partial results (a float reduction does not reorder itself), so they vectorize too. */
#define LANES 8
#define EXP_SHIFTED(sfx, T, EXP)                                                                            \
  static inline T exp_shifted_##sfx(const T *x, int64_t stride, T *y, int64_t n, T m) {                     \
    T acc[LANES] = {0}, s = 0;                                                                              \
    int64_t j = 0;                                                                                          \
    for (j = 0; j < n; j++) y[j] = EXP(x[j * stride] - m);                                                  \
    for (j = 0; j + LANES <= n; j += LANES)                                                                 \
      for (int k = 0; k < LANES; k++) acc[k] += y[j + k];                                                   \
    for (; j < n; j++) s += y[j];                                                                           \
    for (int k = 0; k < LANES; k++) s += acc[k];                                                            \
    return s;                                                                                               \
  }                                                                                                         \
  /* NaN anywhere gives a NaN row either way: as m, or through e^(NaN - m) */                               \
  static inline T row_max_##sfx(const T *x, int64_t stride, int64_t n) {                                    \
    if (n < LANES) {                                                                                        \
      T m = n ? x[0] : 0;                                                                                   \
      for (int64_t j = 1; j < n; j++) m = x[j * stride] > m ? x[j * stride] : m;                            \
      return m;                                                                                             \
    }                                                                                                       \
    T acc[LANES];                                                                                           \
    for (int k = 0; k < LANES; k++) acc[k] = x[k * stride];                                                 \
    int64_t j = LANES;                                                                                      \
    for (; j + LANES <= n; j += LANES)                                                                      \
      for (int k = 0; k < LANES; k++) acc[k] = x[(j + k) * stride] > acc[k] ? x[(j + k) * stride] : acc[k]; \
    for (; j < n; j++) acc[0] = x[j * stride] > acc[0] ? x[j * stride] : acc[0];                            \
    T m = acc[0];                                                                                           \
    for (int k = 1; k < LANES; k++) m = acc[k] > m ? acc[k] : m;                                            \
    return m;                                                                                               \
  }
EXP_SHIFTED(f32, float, vexpf)
EXP_SHIFTED(f64, double, exp)

/* softmax = e^(x - m) / s; log_softmax = (x - m) - log s */
#define SOFTMAX_ROWS(sfx, T)                                                                                           \
  NBOP_SIMD_CLONES static void softmax_rows_##sfx(const T *x, T *y, int64_t lo, int64_t hi, int64_t n, bool log_out) { \
    for (int64_t r = lo; r < hi; r++) {                                                                                \
      const T *xr = x + r * n;                                                                                         \
      T *yr = y + r * n, m = row_max_##sfx(xr, 1, n), s = exp_shifted_##sfx(xr, 1, yr, n, m);                          \
      if (log_out) {                                                                                                   \
        T ls = log(s);                                                                                                 \
        for (int64_t j = 0; j < n; j++) yr[j] = (xr[j] - m) - ls;                                                      \
      } else {                                                                                                         \
        T inv = 1 / s;                                                                                                 \
        for (int64_t j = 0; j < n; j++) yr[j] *= inv;                                                                  \
      }                                                                                                                \
    }                                                                                                                  \
  }
SOFTMAX_ROWS(f32, float)
SOFTMAX_ROWS(f64, double)

typedef struct softmax_impl {
  bool log_out; /* LogSoftmax */
} softmax_impl;

typedef struct rows_job {
  const nbop_kargs *k;
  int64_t n; /* row length */
} rows_job;

static void softmax_range(void *arg, int64_t lo, int64_t hi) {
  const rows_job *j = arg;
  const nb_tensor *x = j->k->in[0];
  bool log_out = ((const softmax_impl *)j->k->def->impl)->log_out;
  if (x->dtype == NB_F32)
    softmax_rows_f32(nbcore_tdata(x), nbcore_tdata(j->k->res[0]), lo, hi, j->n, log_out);
  else
    softmax_rows_f64(nbcore_tdata(x), nbcore_tdata(j->k->res[0]), lo, hi, j->n, log_out);
}

static nb_code softmax_validate(nbop_kargs *k) {
  nb_code code = nbop_kcheck_dtype(k, 0, NBOP_M_FLOAT);
  if (code) return code;
  if (k->in[0]->rank == 0)
    return nbop_kfail(k, NB_SHAPE, "logits must have >= 1 dimension, got shape %s", nbop_tstr(k->in[0]));
  return NB_OK;
}

static nb_code softmax_kernel(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  int64_t n = x->shape[x->rank - 1];
  if (n == 0) return NB_OK;
  rows_job j = {k, n};
  nbop_parallel_range(nbop_kthreads(k, x->size), x->size / n, softmax_range, &j);
  return NB_OK;
}

/* ---- the softmax cross-entropy losses -----------------------------------------------------
   Per row: m = max f, s = sum e^(f - m); loss = sum_j l_j (log s - (f_j - m)) and
   backprop = e^(f - m) / s - l. Dense labels may broadcast against the features (TF 2):
   each input walks its rows and columns by a step of 0 where it is broadcast. */

typedef struct xent_plan {
  int64_t batch, classes;
  int64_t f_row, f_col, l_row, l_col; /* element steps; sparse: unused for labels */
} xent_plan;
_Static_assert(sizeof(xent_plan) <= NBOP_SCRATCH_BYTES, "xent_plan must fit the scratch");

/* x's steps per row and per column of the [batch, classes] broadcast. */
static void broadcast_steps(const nb_tensor *x, int64_t *row, int64_t *col) {
  int64_t cols = x->rank >= 1 ? x->shape[x->rank - 1] : 1;
  *col = cols == 1 ? 0 : 1;
  *row = x->rank == 2 && x->shape[0] != 1 ? cols : 0;
}

static nb_code xent_broadcast_fail(nbop_kargs *k) {
  return nbop_kfail(k, NB_SHAPE, "logits and labels must be broadcastable: logits_size=%s labels_size=%s",
                    nbop_tstr(k->in[0]), nbop_tstr(k->in[1]));
}

/* The broadcast of logits and labels is 2-D: neither has a higher rank, one has rank 2. */
static nb_code xent_validate(nbop_kargs *k) {
  const nb_tensor *f = k->in[0], *l = k->in[1];
  nb_code code = nbop_kcheck_dtype(k, 0, NBOP_M_FLOAT);
  if (!code) code = nbop_kcheck_same_dtype(k, 0, 1);
  if (code) return code;
  if (!nbop_broadcastable(f->rank, f->shape, l->rank, l->shape)) return xent_broadcast_fail(k);
  int hi = f->rank > l->rank ? f->rank : l->rank;
  if (hi > 2 || (f->rank >= 0 && l->rank >= 0 && hi != 2))
    return nbop_kfail(k, NB_SHAPE,
                      "logits and labels must be either 2-dimensional, or broadcasted to be 2-dimensional, got "
                      "logits shape %s and labels shape %s",
                      nbop_tstr(f), nbop_tstr(l));
  return NB_OK;
}

static nb_code xent_infer(nbop_kargs *k) {
  const nb_tensor *f = k->in[0], *l = k->in[1];
  int rank;
  int64_t shape[NB_MAX_RANK];
  if (!nbcore_broadcast_shape(f->rank, f->shape, l->rank, l->shape, &rank, shape)) return xent_broadcast_fail(k);
  if (shape[0] > 0 && shape[1] == 0) /* no class to normalize over, as the sparse op refuses */
    return nbop_kfail(k, NB_SHAPE, "Must have at least one class, but got logits shape %s", nbop_tstr(f));
  xent_plan *p = (xent_plan *)k->scratch;
  p->batch = shape[0];
  p->classes = shape[1];
  broadcast_steps(f, &p->f_row, &p->f_col);
  broadcast_steps(l, &p->l_row, &p->l_col);
  nbop_meta_set(&k->out[0], f->dtype, 1, shape);
  nbop_meta_set(&k->out[1], f->dtype, 2, shape);
  return NB_OK;
}

static nb_code sparse_xent_validate(nbop_kargs *k) {
  const nb_tensor *f = k->in[0], *l = k->in[1];
  nb_code code = nbop_kcheck_dtype(k, 0, NBOP_M_FLOAT);
  if (!code) code = nbop_kcheck_dtype(k, 1, NBOP_M_INT);
  if (code) return code;
  if (f->rank >= 0 && f->rank != 2)
    return nbop_kfail(k, NB_SHAPE, "logits must be 2-D, but got shape %s", nbop_tstr(f));
  if (l->rank >= 0 && l->rank != 1)
    return nbop_kfail(k, NB_SHAPE, "labels must be 1-D, but got shape %s", nbop_tstr(l));
  if (f->rank == 2 && l->rank == 1 && f->shape[0] >= 0 && l->shape[0] >= 0 && l->shape[0] != f->shape[0])
    return nbop_kfail(k, NB_SHAPE,
                      "logits and labels must have the same first dimension, got logits shape %s and labels shape %s",
                      nbop_tstr(f), nbop_tstr(l));
  return NB_OK;
}

static nb_code sparse_xent_infer(nbop_kargs *k) {
  const nb_tensor *f = k->in[0];
  if (f->shape[1] == 0 && f->shape[0] > 0)
    return nbop_kfail(k, NB_SHAPE, "Must have at least one class, but got logits shape %s", nbop_tstr(f));
  xent_plan *p = (xent_plan *)k->scratch;
  p->batch = f->shape[0];
  p->classes = f->shape[1];
  p->f_row = p->classes;
  p->f_col = 1;
  nbop_meta_set(&k->out[0], f->dtype, 1, f->shape);
  nbop_meta_like(&k->out[1], f);
  return NB_OK;
}

/* One row at a time: bp holds e^(f - m) until it is normalized. sparse: the labels as
   indices (else l holds dense labels). */
#define XENT_ROWS(sfx, T)                                                                                         \
  NBOP_SIMD_CLONES static void xent_rows_##sfx(const xent_plan *p, const T *f, const T *l, const int64_t *sparse, \
                                               T *loss, T *bp, int64_t lo, int64_t hi) {                          \
    int64_t n = p->classes, fc = p->f_col, lc = p->l_col;                                                         \
    for (int64_t r = lo; r < hi; r++) {                                                                           \
      const T *fr = f + r * p->f_row;                                                                             \
      T *br = bp + r * n, m = row_max_##sfx(fr, fc, n), s = exp_shifted_##sfx(fr, fc, br, n, m);                  \
      T ls = log(s), inv = 1 / s, sum = 0;                                                                        \
      for (int64_t j = 0; j < n; j++) br[j] *= inv;                                                               \
      if (sparse) {                                                                                               \
        int64_t c = sparse[r];                                                                                    \
        br[c] -= 1;                                                                                               \
        sum = ls - (fr[c * fc] - m);                                                                              \
      } else {                                                                                                    \
        const T *lr = l + r * p->l_row;                                                                           \
        for (int64_t j = 0; j < n; j++) {                                                                         \
          sum += lr[j * lc] * (ls - (fr[j * fc] - m));                                                            \
          br[j] -= lr[j * lc];                                                                                    \
        }                                                                                                         \
      }                                                                                                           \
      loss[r] = sum;                                                                                              \
    }                                                                                                             \
  }
XENT_ROWS(f32, float)
XENT_ROWS(f64, double)

typedef struct xent_job {
  const nbop_kargs *k;
  const int64_t *sparse; /* labels as int64, sparse op only */
} xent_job;

static void xent_range(void *arg, int64_t lo, int64_t hi) {
  const xent_job *j = arg;
  const nbop_kargs *k = j->k;
  const xent_plan *p = (const xent_plan *)k->scratch;
  const void *l = j->sparse ? NULL : nbcore_tdata(k->in[1]);
  if (k->in[0]->dtype == NB_F32)
    xent_rows_f32(p, nbcore_tdata(k->in[0]), l, j->sparse, nbcore_tdata(k->res[0]), nbcore_tdata(k->res[1]), lo, hi);
  else
    xent_rows_f64(p, nbcore_tdata(k->in[0]), l, j->sparse, nbcore_tdata(k->res[0]), nbcore_tdata(k->res[1]), lo, hi);
}

static nb_code xent_kernel(nbop_kargs *k) {
  const xent_plan *p = (const xent_plan *)k->scratch;
  xent_job j = {k, NULL};
  nbop_parallel_range(nbop_kthreads(k, p->batch * p->classes), p->batch, xent_range, &j);
  return NB_OK;
}

/* Labels are checked before any row runs, so a bad one leaves no partial result. */
static nb_code sparse_xent_kernel(nbop_kargs *k) {
  const xent_plan *p = (const xent_plan *)k->scratch;
  const nb_tensor *l = k->in[1];
  int64_t stack[256], *labels = p->batch <= 256 ? stack : malloc((size_t)p->batch * sizeof *labels);
  if (!labels) return nbop_kfail(k, NB_NOMEM, "out of memory for %lld labels", (long long)p->batch);
  nb_code code = NB_OK;
  for (int64_t i = 0; i < p->batch && !code; i++) {
    labels[i] = l->dtype == NB_I32 ? ((const int32_t *)nbcore_tdata(l))[i] : ((const int64_t *)nbcore_tdata(l))[i];
    if (labels[i] < 0 || labels[i] >= p->classes)
      code = nbop_kfail(k, NB_INVALID,
                        "Received a label value of %lld which is outside the valid range of [0, %lld) at labels[%lld]",
                        (long long)labels[i], (long long)p->classes, (long long)i);
  }
  if (!code) {
    xent_job j = {k, labels};
    nbop_parallel_range(nbop_kthreads(k, p->batch * p->classes), p->batch, xent_range, &j);
  }
  if (labels != stack) free(labels);
  return code;
}

/* ---- L2Loss: sum(t^2) / 2 ----------------------------------------------------------------- */

static nb_code float_input_validate(nbop_kargs *k) { return nbop_kcheck_dtype(k, 0, NBOP_M_FLOAT); }

static nb_code l2_loss_infer(nbop_kargs *k) {
  nbop_meta_set(&k->out[0], k->in[0]->dtype, 0, NULL);
  return NB_OK;
}

/* float32 sums in double: a million squares keep their digits */
static nb_code l2_loss_kernel(nbop_kargs *k) {
  const nb_tensor *t = k->in[0];
  double s = 0;
  if (t->dtype == NB_F32) {
    const float *x = nbcore_tdata(t);
    for (int64_t i = 0; i < t->size; i++) s += (double)x[i] * x[i];
    *(float *)nbcore_tdata(k->res[0]) = (float)(s / 2);
  } else {
    const double *x = nbcore_tdata(t);
    for (int64_t i = 0; i < t->size; i++) s += x[i] * x[i];
    *(double *)nbcore_tdata(k->res[0]) = s / 2;
  }
  return NB_OK;
}

/* ---- OneHot ------------------------------------------------------------------------------ */

enum { ONE_HOT_AXIS };

typedef struct one_hot_plan {
  int64_t outer, depth, inner; /* output as [outer, depth, inner] */
} one_hot_plan;

/* depth, on_value and off_value are scalars; axis fits indices' rank plus one (where
   known), as does the result; depth is non-negative (where known). */
static nb_code one_hot_validate(nbop_kargs *k) {
  const nb_tensor *ind = k->in[0];
  nb_code code = nbop_kcheck_dtype(k, 0, NBOP_M_INT);
  if (!code) code = nbop_kcheck_dtype(k, 1, NBOP_M(NB_I32));
  if (!code) code = nbop_kcheck_same_dtype(k, 2, 3);
  if (code) return code;
  static const char *const names[4] = {"indices", "depth", "on_value", "off_value"};
  for (int i = 1; i < 4; i++)
    if (k->in[i]->rank > 0)
      return nbop_kfail(k, NB_SHAPE, "%s must be a scalar, but got: %s", names[i], nbop_tstr(k->in[i]));
  int64_t axis = k->attr[ONE_HOT_AXIS].i, depth;
  if (axis < -1 || (ind->rank >= 0 && axis > ind->rank))
    return nbop_kfail(k, NB_INVALID, "Expected axis to be -1 or between [0, %d).  But received: %lld", ind->rank + 1,
                      (long long)axis);
  if (ind->rank >= 0 && (code = nbop_kcheck_out_rank(k, ind->rank + 1, "output"))) return code;
  int n;
  code = nbop_kints(k, 1, 0, &depth, 1, &n);
  if (code == NBOP_DEFER) return NB_OK;
  if (!code && depth < 0) return nbop_kfail(k, NB_INVALID, "depth must be non-negative, got: %lld", (long long)depth);
  return code;
}

static nb_code one_hot_infer(nbop_kargs *k) {
  const nb_tensor *ind = k->in[0];
  int64_t axis = k->attr[ONE_HOT_AXIS].i, depth;
  int n;
  nb_code code = nbop_kints(k, 1, 0, &depth, 1, &n);
  if (code) return code;
  int a = axis < 0 ? ind->rank : (int)axis;
  one_hot_plan *p = (one_hot_plan *)k->scratch;
  p->outer = p->inner = 1;
  p->depth = depth;
  nbop_meta *o = &k->out[0];
  o->dtype = k->in[2]->dtype;
  o->rank = ind->rank + 1;
  for (int d = 0, s = 0; d < o->rank; d++) {
    if (d == a) {
      o->shape[d] = depth;
      continue;
    }
    o->shape[d] = ind->shape[s++];
    if (d < a)
      p->outer *= o->shape[d];
    else
      p->inner *= o->shape[d];
  }
  return NB_OK;
}

/* Fills n elements of size esz with *v. */
static void fill_value(void *dst, int64_t n, const void *v, size_t esz) {
  switch (esz) {
    case 1: memset(dst, *(const uint8_t *)v, (size_t)n); break;
    case 4:
      for (int64_t i = 0; i < n; i++) memcpy((char *)dst + 4 * i, v, 4);
      break;
    default:
      for (int64_t i = 0; i < n; i++) memcpy((char *)dst + 8 * i, v, 8);
      break;
  }
}

/* out[o, d, i] = indices[o, i] == d ? on : off; indices outside [0, depth) give a row of off. */
static nb_code one_hot_kernel(nbop_kargs *k) {
  const one_hot_plan *p = (const one_hot_plan *)k->scratch;
  const nb_tensor *ind = k->in[0];
  size_t esz = nb_dtype_size(k->res[0]->dtype);
  char *out = nbcore_tdata(k->res[0]);
  const void *on = nbcore_tdata(k->in[2]);
  fill_value(out, k->res[0]->size, nbcore_tdata(k->in[3]), esz);
  for (int64_t o = 0; o < p->outer; o++)
    for (int64_t i = 0; i < p->inner; i++) {
      int64_t at = o * p->inner + i;
      int64_t d =
          ind->dtype == NB_I32 ? ((const int32_t *)nbcore_tdata(ind))[at] : ((const int64_t *)nbcore_tdata(ind))[at];
      if (d >= 0 && d < p->depth) memcpy(out + (size_t)((o * p->depth + d) * p->inner + i) * esz, on, esz);
    }
  return NB_OK;
}

/* ---- the table ------------------------------------------------------------------------- */

#define ACT(NAME, FNS, ...)                                                                                     \
  {                                                                                                             \
    .name = NAME, .nin = 1, .nout = 1, .alias = -1, .elementwise = true, .validate = nbop_unary_validate,       \
    .infer = nbop_infer_same, .kernel = nbop_unary_kernel, .impl = &(const nbop_unary_impl){{FNS}}, __VA_ARGS__ \
  }
#define ACT_GRAD(NAME, FNS, IN0, IN1, ...)                                                                    \
  {                                                                                                           \
    .name = NAME, .nin = 2, .nout = 1, .alias = -1, .elementwise = true, .validate = nbop_pair_validate,      \
    .infer = nbop_infer_same, .kernel = nbop_pair_kernel, .impl = &(const nbop_pair_impl){{FNS}, {IN0, IN1}}, \
    __VA_ARGS__                                                                                               \
  }
#define ALPHA_ATTR .nattrs = 1, .attrs = {{"alpha", NB_ATTR_FLOAT, {.f = 0.2}, false}}
#define APPROXIMATE_ATTR .nattrs = 1, .attrs = {{"approximate", NB_ATTR_BOOL, {.b = false}, false}}
#define SOFTMAX(NAME, LOG_OUT)                                                                           \
  {                                                                                                      \
    .name = NAME, .nin = 1, .nout = 1, .alias = -1, .batch_leading = true, .validate = softmax_validate, \
    .infer = nbop_infer_same, .kernel = softmax_kernel, .impl = &(const softmax_impl) {                  \
      LOG_OUT                                                                                            \
    }                                                                                                    \
  }

enum {
  OP_SOFTMAX,
  OP_LOG_SOFTMAX,
  OP_XENT,
  OP_SPARSE_XENT,
  OP_RELU6,
  OP_RELU6_GRAD,
  OP_LEAKY_RELU,
  OP_LEAKY_RELU_GRAD,
  OP_SELU,
  OP_SELU_GRAD,
  OP_GELU,
  OP_GELU_GRAD,
  OP_L2_LOSS,
  OP_ONE_HOT,
  OP_COUNT
};

static nbop_def nn_ops[OP_COUNT] = {
    /* softmax's tensors gain a seed dim freely */
    [OP_SOFTMAX] = SOFTMAX("Softmax", false),
    [OP_LOG_SOFTMAX] = SOFTMAX("LogSoftmax", true),
    [OP_XENT] = {.name = "SoftmaxCrossEntropyWithLogits",
                 .nin = 2,
                 .nout = 2,
                 .alias = -1,
                 .validate = xent_validate,
                 .infer = xent_infer,
                 .kernel = xent_kernel},
    [OP_SPARSE_XENT] = {.name = "SparseSoftmaxCrossEntropyWithLogits",
                        .nin = 2,
                        .nout = 2,
                        .alias = -1,
                        .validate = sparse_xent_validate,
                        .infer = sparse_xent_infer,
                        .kernel = sparse_xent_kernel},
    [OP_RELU6] = ACT("Relu6", TABLE_NUM(relu6)),
    [OP_RELU6_GRAD] = ACT_GRAD("Relu6Grad", TABLE_NUM(relu6_grad), "gradients", "features"),
    [OP_LEAKY_RELU] = ACT("LeakyRelu", TABLE_FLOAT(leaky_relu), ALPHA_ATTR),
    [OP_LEAKY_RELU_GRAD] = ACT_GRAD("LeakyReluGrad", TABLE_FLOAT(leaky_relu_grad), "gradients", "features", ALPHA_ATTR),
    [OP_SELU] = ACT("Selu", TABLE_FLOAT(selu)),
    [OP_SELU_GRAD] = ACT_GRAD("SeluGrad", TABLE_FLOAT(selu_grad), "gradients", "outputs"),
    [OP_GELU] = ACT("Gelu", TABLE_FLOAT(gelu), APPROXIMATE_ATTR),
    [OP_GELU_GRAD] = ACT_GRAD("GeluGrad", TABLE_FLOAT(gelu_grad), "gradients", "features", APPROXIMATE_ATTR),
    [OP_L2_LOSS] = {.name = "L2Loss",
                    .nin = 1,
                    .nout = 1,
                    .alias = -1,
                    .validate = float_input_validate,
                    .infer = l2_loss_infer,
                    .kernel = l2_loss_kernel},
    /* T comes from on_value; TF gives no input a gradient */
    [OP_ONE_HOT] = {.name = "OneHot",
                    .nin = 4,
                    .nout = 1,
                    .alias = -1,
                    .t_input = 2,
                    .nattrs = 1,
                    .attrs = {{"axis", NB_ATTR_INT, {.i = -1}, false}},
                    .validate = one_hot_validate,
                    .infer = one_hot_infer,
                    .kernel = one_hot_kernel},
};

nbop_family nbop_nn_family(void) { return (nbop_family){nn_ops, OP_COUNT}; }

/* ---- wrappers ----------------------------------------------------------------------------- */

/* The one output of op on x, or on a and b (attrs at their defaults). */
static nb_tensor *unary(nb_ctx *c, int op, nb_tensor *x) { return nbop_call(c, &nn_ops[op], &x, 1, NULL); }
static nb_tensor *binary(nb_ctx *c, int op, nb_tensor *a, nb_tensor *b) { return nbop_call_pair(c, &nn_ops[op], a, b); }

nb_tensor *nb_softmax(nb_ctx *c, nb_tensor *x) { return unary(c, OP_SOFTMAX, x); }
nb_tensor *nb_log_softmax(nb_ctx *c, nb_tensor *x) { return unary(c, OP_LOG_SOFTMAX, x); }
nb_tensor *nb_relu6(nb_ctx *c, nb_tensor *x) { return unary(c, OP_RELU6, x); }
nb_tensor *nb_relu6_grad(nb_ctx *c, nb_tensor *gradients, nb_tensor *features) {
  return binary(c, OP_RELU6_GRAD, gradients, features);
}
nb_tensor *nb_selu(nb_ctx *c, nb_tensor *x) { return unary(c, OP_SELU, x); }
nb_tensor *nb_selu_grad(nb_ctx *c, nb_tensor *gradients, nb_tensor *outputs) {
  return binary(c, OP_SELU_GRAD, gradients, outputs);
}
nb_tensor *nb_l2_loss(nb_ctx *c, nb_tensor *x) { return unary(c, OP_L2_LOSS, x); }

static nb_code call2(nb_ctx *c, int op, nb_tensor *features, nb_tensor *labels, nb_tensor **loss,
                     nb_tensor **backprop) {
  nb_tensor *in[2] = {features, labels}, *out[2] = {NULL, NULL};
  nb_code code = nbop_dispatch(c, &nn_ops[op], in, 2, NULL, out, 2);
  if (loss)
    *loss = out[0];
  else
    nb_tensor_free(out[0]);
  if (backprop)
    *backprop = out[1];
  else
    nb_tensor_free(out[1]);
  return code;
}

nb_code nb_softmax_cross_entropy_with_logits(nb_ctx *c, nb_tensor *features, nb_tensor *labels, nb_tensor **loss,
                                             nb_tensor **backprop) {
  return call2(c, OP_XENT, features, labels, loss, backprop);
}

nb_code nb_sparse_softmax_cross_entropy_with_logits(nb_ctx *c, nb_tensor *features, nb_tensor *labels, nb_tensor **loss,
                                                    nb_tensor **backprop) {
  return call2(c, OP_SPARSE_XENT, features, labels, loss, backprop);
}

/* An op whose attr 0 takes v (float or bool by the op's spec). */
static nb_tensor *call_with_param(nb_ctx *c, int op, nb_tensor *const *in, int nin, double v) {
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&nn_ops[op], a);
  if (nn_ops[op].attrs[0].kind == NB_ATTR_BOOL)
    a[0].b = v != 0;
  else
    a[0].f = v;
  return nbop_call(c, &nn_ops[op], in, nin, a);
}

nb_tensor *nb_leaky_relu(nb_ctx *c, nb_tensor *x, double alpha) {
  return call_with_param(c, OP_LEAKY_RELU, &x, 1, alpha);
}

nb_tensor *nb_leaky_relu_grad(nb_ctx *c, nb_tensor *gradients, nb_tensor *features, double alpha) {
  nb_tensor *in[2] = {gradients, features};
  return call_with_param(c, OP_LEAKY_RELU_GRAD, in, 2, alpha);
}

nb_tensor *nb_gelu(nb_ctx *c, nb_tensor *x, bool approximate) {
  return call_with_param(c, OP_GELU, &x, 1, approximate);
}

nb_tensor *nb_gelu_grad(nb_ctx *c, nb_tensor *gradients, nb_tensor *features, bool approximate) {
  nb_tensor *in[2] = {gradients, features};
  return call_with_param(c, OP_GELU_GRAD, in, 2, approximate);
}

nb_tensor *nb_one_hot(nb_ctx *c, nb_tensor *indices, int depth, nb_tensor *on_value, nb_tensor *off_value, int axis) {
  if (!nbop_live(c)) return NULL;
  nb_tensor *in[4] = {indices, nb_scalar(c, NB_I32, depth), on_value, off_value};
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&nn_ops[OP_ONE_HOT], a);
  a[ONE_HOT_AXIS].i = axis;
  nb_tensor *y = nbop_call(c, &nn_ops[OP_ONE_HOT], in, 4, a);
  nb_tensor_free(in[1]);
  return y;
}
