/* Elementwise math: unary and broadcasting binary ops, comparisons, logical ops,
   SelectV2, Cast, AddN, Identity, StopGradient, and TF's fused gradient ops (TanhGrad,
   SigmoidGrad, RsqrtGrad, SqrtGrad, ReciprocalGrad, ReluGrad, EluGrad, SoftplusGrad). Loops run over contiguous memory with
   broadcast strides of 0 or 1 in the innermost dimension, so the compiler vectorizes
   them; large tensors are split across threads. Integer arithmetic goes through
   unsigned types so overflow wraps instead of being undefined. */
#include "elementwise.h"
#include "vmath.h"

#include <string.h>
#include <tgmath.h>

/* ---- element functions ----------------------------------------------------------- */

#define FLOAT_FN1(name, expr)                 \
  static inline float name##_f32(float v) {   \
    typedef float T __attribute__((unused));  \
    return (T)(expr);                         \
  }                                           \
  static inline double name##_f64(double v) { \
    typedef double T __attribute__((unused)); \
    return (T)(expr);                         \
  }
#define INT_FN1(name, expr)                     \
  static inline int32_t name##_i32(int32_t v) { \
    typedef int32_t T __attribute__((unused));  \
    typedef uint32_t U __attribute__((unused)); \
    return (T)(expr);                           \
  }                                             \
  static inline int64_t name##_i64(int64_t v) { \
    typedef int64_t T __attribute__((unused));  \
    typedef uint64_t U __attribute__((unused)); \
    return (T)(expr);                           \
  }
#define FLOAT_FN2(name, expr)                           \
  static inline float name##_f32(float x, float y) {    \
    typedef float T __attribute__((unused));            \
    return (T)(expr);                                   \
  }                                                     \
  static inline double name##_f64(double x, double y) { \
    typedef double T __attribute__((unused));           \
    return (T)(expr);                                   \
  }
#define INT_FN2(name, expr)                                \
  static inline int32_t name##_i32(int32_t x, int32_t y) { \
    typedef int32_t T __attribute__((unused));             \
    typedef uint32_t U __attribute__((unused));            \
    return (T)(expr);                                      \
  }                                                        \
  static inline int64_t name##_i64(int64_t x, int64_t y) { \
    typedef int64_t T __attribute__((unused));             \
    typedef uint64_t U __attribute__((unused));            \
    return (T)(expr);                                      \
  }

/* unary */
FLOAT_FN1(neg, -v)
INT_FN1(neg, (U)0 - (U)v)
static inline float exp_f32(float v) { return vexpf(v); }
static inline double exp_f64(double v) { return exp(v); }
FLOAT_FN1(log, log(v))
FLOAT_FN1(log1p, log1p(v))
FLOAT_FN1(sqrt, sqrt(v))
FLOAT_FN1(rsqrt, 1 / sqrt(v))
FLOAT_FN1(reciprocal, 1 / v)
FLOAT_FN1(square, v *v)
INT_FN1(square, (U)v *(U)v)
FLOAT_FN1(abs, fabs(v))
INT_FN1(abs, v < 0 ? (U)0 - (U)v : (U)v)
FLOAT_FN1(sign, v > 0 ? 1 : v < 0 ? -1 : v) /* sign(NaN) = NaN, sign(-0) = -0 */
INT_FN1(sign, (v > 0) - (v < 0))
static inline float tanh_f32(float v) { return vtanhf(v); }
static inline double tanh_f64(double v) { return tanh(v); }
/* 1/(1+e^-x): e^-x overflowing to inf gives the right limit 0. */
static inline float sigmoid_f32(float v) { return 1.0f / (1.0f + vexpf(-v)); }
/* 1/(1+e^-x) for x >= 0 and e^x/(1+e^x) below: neither form overflows. */
static inline double sigmoid_f64(double v) { return v >= 0 ? 1 / (1 + exp(-v)) : exp(v) / (1 + exp(v)); }
FLOAT_FN1(relu, v > 0 ? v : 0)
INT_FN1(relu, v > 0 ? v : 0)
FLOAT_FN1(elu, v > 0 ? v : expm1(v))
/* log(1+e^x) = max(x,0) + log1p(e^-|x|), exact in both tails. */
FLOAT_FN1(softplus, (v > 0 ? v : 0) + log1p(exp(-fabs(v))))
FLOAT_FN1(sin, sin(v))
FLOAT_FN1(cos, cos(v))
static inline uint8_t logical_not_b(uint8_t v) { return !v; }

/* binary */
FLOAT_FN2(add, x + y)
INT_FN2(add, (U)x + (U)y)
FLOAT_FN2(sub, x - y)
INT_FN2(sub, (U)x - (U)y)
FLOAT_FN2(mul, x *y)
INT_FN2(mul, (U)x *(U)y)
FLOAT_FN2(div, x / y)
/* y == -1 is negation (INT_MIN / -1 traps in hardware); y == 0 is rejected up front. */
INT_FN2(div, y == -1 ? (U)0 - (U)x : (U)(x / y))
FLOAT_FN2(pow, pow(x, y))
FLOAT_FN2(sqdiff, (x - y) * (x - y))
INT_FN2(sqdiff, ((U)x - (U)y) * ((U)x - (U)y))
/* NaN propagates from either side, as in TF. */
FLOAT_FN2(maximum, (x > y || x != x) ? x : y)
INT_FN2(maximum, x > y ? x : y)
FLOAT_FN2(minimum, (x < y || x != x) ? x : y)
INT_FN2(minimum, x < y ? x : y)

/* Integer power by squaring; negative exponents are rejected before the loop. */
static inline int32_t pow_i32(int32_t x, int32_t y) {
  uint32_t r = 1, b = (uint32_t)x;
  for (; y > 0; y >>= 1, b *= b)
    if (y & 1) r *= b;
  return (int32_t)r;
}
static inline int64_t pow_i64(int64_t x, int64_t y) {
  uint64_t r = 1, b = (uint64_t)x;
  for (; y > 0; y >>= 1, b *= b)
    if (y & 1) r *= b;
  return (int64_t)r;
}

#define CMP_FN(name, op)                                                    \
  static inline uint8_t name##_f32(float x, float y) { return x op y; }     \
  static inline uint8_t name##_f64(double x, double y) { return x op y; }   \
  static inline uint8_t name##_i32(int32_t x, int32_t y) { return x op y; } \
  static inline uint8_t name##_i64(int64_t x, int64_t y) { return x op y; }
CMP_FN(less, <)
CMP_FN(less_equal, <=)
CMP_FN(greater, >)
CMP_FN(greater_equal, >=)
CMP_FN(equal, ==)
CMP_FN(not_equal, !=)
static inline uint8_t equal_b(uint8_t x, uint8_t y) { return x == y; }
static inline uint8_t not_equal_b(uint8_t x, uint8_t y) { return x != y; }
static inline uint8_t logical_and_b(uint8_t x, uint8_t y) { return x && y; }
static inline uint8_t logical_or_b(uint8_t x, uint8_t y) { return x || y; }

/* Fused gradients, parameters in TF's input order: GRAD_FN makes one for one type (T
   names that type inside expr), the FLOAT/INT forms one per float or integer type. */
#define GRAD_FN(name, sfx, TYPE, a, b, expr)        \
  static inline TYPE name##_##sfx(TYPE a, TYPE b) { \
    typedef TYPE T __attribute__((unused));         \
    return (T)(expr);                               \
  }
#define FLOAT_GRAD_FN(name, a, b, expr) GRAD_FN(name, f32, float, a, b, expr) GRAD_FN(name, f64, double, a, b, expr)
#define INT_GRAD_FN(name, a, b, expr) GRAD_FN(name, i32, int32_t, a, b, expr) GRAD_FN(name, i64, int64_t, a, b, expr)

/* y is the forward output, dy the incoming gradient. As in TF, Sqrt/Rsqrt/Reciprocal
   gradients are 0 where dy is 0, even where y is 0 or inf (which would give NaN). */
FLOAT_GRAD_FN(tanh_grad, y, dy, dy *(1 - y * y))
FLOAT_GRAD_FN(sigmoid_grad, y, dy, dy *y *(1 - y))
FLOAT_GRAD_FN(rsqrt_grad, y, dy, dy == 0 ? 0 : (T)-0.5 * (dy * y) * (y * y))
FLOAT_GRAD_FN(sqrt_grad, y, dy, dy == 0 ? 0 : (T)0.5 * dy / y)
FLOAT_GRAD_FN(reciprocal_grad, y, dy, dy == 0 ? 0 : -y * y * dy)
/* g is the incoming gradient. ReluGrad multiplies (so a NaN g stays NaN, as in TF);
   EluGrad reads the forward output o: d elu/dx = o + 1 where o < 0. */
FLOAT_GRAD_FN(relu_grad, g, f, g *(T)(f > 0))
INT_GRAD_FN(relu_grad, g, f, g *(T)(f > 0))
FLOAT_GRAD_FN(elu_grad, g, o, o < 0 ? g * (o + 1) : g)
/* d softplus/dx = sigmoid(x) */
static inline float softplus_grad_f32(float g, float f) { return g * sigmoid_f32(f); }
static inline double softplus_grad_f64(double g, double f) { return g * sigmoid_f64(f); }

/* ---- loops ------------------------------------------------------------------------ */

/* Unary loops are compute-bound (exp, tanh, ...): NBOP_SIMD_CLONES (op.h). */
#define UNARY_LOOP(name, sfx, T)                                                                  \
  NBOP_SIMD_CLONES static void name##_loop_##sfx(const void *px, void *py, int64_t n, double p) { \
    (void)p;                                                                                      \
    const T *x = px;                                                                              \
    T *y = py;                                                                                    \
    for (int64_t i = 0; i < n; i++) y[i] = name##_##sfx(x[i]);                                    \
  }
#define UNARY_FLOAT(name) UNARY_LOOP(name, f32, float) UNARY_LOOP(name, f64, double)
#define UNARY_NUM(name) UNARY_FLOAT(name) UNARY_LOOP(name, i32, int32_t) UNARY_LOOP(name, i64, int64_t)
#define FLOAT_TABLE(name, loop) [NB_F32] = name##_##loop##_f32, [NB_F64] = name##_##loop##_f64
#define INT_TABLE(name, loop) [NB_I32] = name##_##loop##_i32, [NB_I64] = name##_##loop##_i64
#define UNARY_FLOAT_IMPL(name)  \
  {                             \
    { FLOAT_TABLE(name, loop) } \
  }
#define UNARY_NUM_IMPL(name)                           \
  {                                                    \
    { FLOAT_TABLE(name, loop), INT_TABLE(name, loop) } \
  }

UNARY_NUM(neg)
UNARY_FLOAT(exp)
UNARY_FLOAT(log)
UNARY_FLOAT(log1p)
UNARY_FLOAT(sqrt)
UNARY_FLOAT(rsqrt)
UNARY_FLOAT(reciprocal)
UNARY_NUM(square)
UNARY_NUM(abs)
UNARY_NUM(sign)
UNARY_FLOAT(tanh)
UNARY_FLOAT(sigmoid)
UNARY_NUM(relu)
UNARY_FLOAT(elu)
UNARY_FLOAT(softplus)
UNARY_FLOAT(sin)
UNARY_FLOAT(cos)
UNARY_LOOP(logical_not, b, uint8_t)

typedef struct binary_impl {
  nbop_binary_loop fn[NB_BOOL + 1];
  bool to_bool;                    /* comparisons produce bool */
  nb_code (*check)(nbop_kargs *k); /* rejects inputs the loop cannot take */
  bool mismatch_value;             /* Equal/NotEqual: the result for shapes that do not broadcast */
} binary_impl;

/* Separate loops per stride case so each one vectorizes; with AVX clones too, as the
   fused kernel runs them on blocks in cache, where they are compute-bound. */
#define BINARY_LOOP(name, sfx, T, TO)                                                                              \
  NBOP_SIMD_CLONES static void name##_bin_##sfx(int64_t n, const void *pa, int64_t sa, const void *pb, int64_t sb, \
                                                void *po) {                                                        \
    const T *a = pa, *b = pb;                                                                                      \
    TO *o = po;                                                                                                    \
    if (sa && sb) {                                                                                                \
      for (int64_t i = 0; i < n; i++) o[i] = name##_##sfx(a[i], b[i]);                                             \
    } else if (sb) {                                                                                               \
      const T x = a[0];                                                                                            \
      for (int64_t i = 0; i < n; i++) o[i] = name##_##sfx(x, b[i]);                                                \
    } else if (sa) {                                                                                               \
      const T y = b[0];                                                                                            \
      for (int64_t i = 0; i < n; i++) o[i] = name##_##sfx(a[i], y);                                                \
    } else {                                                                                                       \
      const TO v = name##_##sfx(a[0], b[0]);                                                                       \
      for (int64_t i = 0; i < n; i++) o[i] = v;                                                                    \
    }                                                                                                              \
  }
#define BINARY_FLOAT(name) BINARY_LOOP(name, f32, float, float) BINARY_LOOP(name, f64, double, double)
#define BINARY_NUM(name) \
  BINARY_FLOAT(name) BINARY_LOOP(name, i32, int32_t, int32_t) BINARY_LOOP(name, i64, int64_t, int64_t)
#define BINARY_CMP(name)                  \
  BINARY_LOOP(name, f32, float, uint8_t)  \
  BINARY_LOOP(name, f64, double, uint8_t) \
  BINARY_LOOP(name, i32, int32_t, uint8_t) BINARY_LOOP(name, i64, int64_t, uint8_t)

BINARY_NUM(add)
BINARY_NUM(sub)
BINARY_NUM(mul)
BINARY_NUM(div)
BINARY_NUM(pow)
BINARY_NUM(sqdiff)
BINARY_NUM(maximum)
BINARY_NUM(minimum)
BINARY_CMP(less)
BINARY_CMP(less_equal)
BINARY_CMP(greater)
BINARY_CMP(greater_equal)
BINARY_CMP(equal)
BINARY_CMP(not_equal)
BINARY_LOOP(equal, b, uint8_t, uint8_t)
BINARY_LOOP(not_equal, b, uint8_t, uint8_t)
BINARY_LOOP(logical_and, b, uint8_t, uint8_t)
BINARY_LOOP(logical_or, b, uint8_t, uint8_t)

/* Fused gradient loops: both inputs have the output's shape, so one flat loop. */

#define PAIR_LOOP(name, sfx, T)                                                                                   \
  NBOP_SIMD_CLONES static void name##_pair_##sfx(const void *pa, const void *pb, void *po, int64_t n, double p) { \
    (void)p;                                                                                                      \
    const T *a = pa, *b = pb;                                                                                     \
    T *o = po;                                                                                                    \
    for (int64_t i = 0; i < n; i++) o[i] = name##_##sfx(a[i], b[i]);                                              \
  }
#define PAIR_FLOAT(name) PAIR_LOOP(name, f32, float) PAIR_LOOP(name, f64, double)

PAIR_FLOAT(tanh_grad)
PAIR_FLOAT(sigmoid_grad)
PAIR_FLOAT(rsqrt_grad)
PAIR_FLOAT(sqrt_grad)
PAIR_FLOAT(reciprocal_grad)
PAIR_FLOAT(relu_grad)
PAIR_LOOP(relu_grad, i32, int32_t)
PAIR_LOOP(relu_grad, i64, int64_t)
PAIR_FLOAT(elu_grad)
PAIR_FLOAT(softplus_grad)

/* ---- integer input checks --------------------------------------------------------- */

/* True when any element of int tensor x satisfies bad(v). */
static bool any_int(const nb_tensor *x, bool (*bad)(int64_t)) {
  for (int64_t i = 0; i < x->size; i++) {
    int64_t v = x->dtype == NB_I32 ? ((const int32_t *)nbcore_tdata(x))[i] : ((const int64_t *)nbcore_tdata(x))[i];
    if (bad(v)) return true;
  }
  return false;
}
static bool is_zero(int64_t v) { return v == 0; }
static bool is_negative(int64_t v) { return v < 0; }

static nb_code check_int_div(nbop_kargs *k) {
  if (!(NBOP_M(k->in[1]->dtype) & NBOP_M_INT) || !any_int(k->in[1], is_zero)) return NB_OK;
  return nbop_kfail(k, NB_INVALID, "Integer division by zero");
}

static nb_code check_int_pow(nbop_kargs *k) {
  if (!(NBOP_M(k->in[1]->dtype) & NBOP_M_INT) || !any_int(k->in[1], is_negative)) return NB_OK;
  return nbop_kfail(k, NB_INVALID, "Integers to negative integer powers are not allowed");
}

/* ---- infer and kernels ------------------------------------------------------------ */

/* The dtype mask of the non-NULL entries of a per-dtype table. */
static unsigned nbop_impl_mask(const void *const *fns) {
  unsigned m = 0;
  for (int t = 0; t <= NB_BOOL; t++)
    if (fns[t]) m |= NBOP_M(t);
  return m;
}

nb_code nbop_unary_validate(nbop_kargs *k) {
  const nbop_unary_impl *u = k->def->impl;
  return nbop_kcheck_dtype(k, 0, nbop_impl_mask((const void *const *)u->fn));
}

/* The op's parameter for its loops: attr 0 if it has attrs. TF's float attrs are 32-bit,
   so a float one is rounded to float as TF's float64 kernels see it. */
double nbop_loop_param(const nbop_def *def, const nbop_attrval *attr) {
  if (!def->nattrs) return 0;
  return def->attrs[0].kind == NB_ATTR_BOOL ? (double)attr[0].b : (double)(float)attr[0].f;
}

static double loop_param(const nbop_kargs *k) { return nbop_loop_param(k->def, k->attr); }

/* One flat loop split over threads: a unary loop (b NULL) or a pair loop. */
typedef struct flat_job {
  nbop_unary_loop unary;
  nbop_pair_loop pair;
  const char *a, *b;
  char *o;
  size_t esz;
  double p;
} flat_job;

static void flat_range(void *arg, int64_t lo, int64_t hi) {
  const flat_job *j = arg;
  size_t off = (size_t)lo * j->esz;
  if (j->unary)
    j->unary(j->a + off, j->o + off, hi - lo, j->p);
  else
    j->pair(j->a + off, j->b + off, j->o + off, hi - lo, j->p);
}

nb_code nbop_unary_kernel(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  const nbop_unary_impl *u = k->def->impl;
  flat_job j = {.unary = u->fn[x->dtype],
                .a = nbcore_tdata(x),
                .o = nbcore_tdata(k->res[0]),
                .esz = nb_dtype_size(x->dtype),
                .p = loop_param(k)};
  nbop_parallel_range(nbop_kthreads(k, x->size), x->size, flat_range, &j);
  return NB_OK;
}

/* Inputs ins[0..nin) must broadcast together: pairwise, so with unknown dims too. */
static nb_code check_broadcast(nbop_kargs *k, int nin, const int *ins) {
  for (int i = 0; i < nin; i++)
    for (int j = i + 1; j < nin; j++)
      if (!nbop_broadcastable(k->in[ins[i]]->rank, k->in[ins[i]]->shape, k->in[ins[j]]->rank, k->in[ins[j]]->shape))
        return nbop_kfail(k, NB_SHAPE, "Incompatible shapes: %s vs. %s", nbop_tstr(k->in[ins[i]]),
                          nbop_tstr(k->in[ins[j]]));
  return NB_OK;
}

/* The broadcast of inputs ins[0..nin), which validate found compatible (a graph's probe
   with made-up dims may not be: it then fails and proves nothing). */
static nb_code broadcast_out(nbop_kargs *k, int nin, const int *ins, nb_dtype t) {
  nbop_meta *m = &k->out[0];
  m->rank = k->in[ins[0]]->rank;
  memcpy(m->shape, k->in[ins[0]]->shape, sizeof m->shape);
  for (int i = 1; i < nin; i++) {
    const nb_tensor *x = k->in[ins[i]];
    int64_t s[NB_MAX_RANK];
    int r;
    if (!nbcore_broadcast_shape(m->rank, m->shape, x->rank, x->shape, &r, s))
      return nbop_kfail(k, NB_SHAPE, "Incompatible shapes: %s vs. %s", nbop_sstr(m->rank, m->shape), nbop_tstr(x));
    m->rank = r;
    memcpy(m->shape, s, sizeof s);
  }
  m->dtype = t;
  return NB_OK;
}

static const int binary_ins[2] = {0, 1};

static nb_code binary_check_dtypes(nbop_kargs *k) {
  const binary_impl *b = k->def->impl;
  nb_code code = nbop_kcheck_dtype(k, 0, nbop_impl_mask((const void *const *)b->fn));
  return code ? code : nbop_kcheck_same_dtype(k, 0, 1);
}

static nb_code binary_validate(nbop_kargs *k) {
  nb_code code = binary_check_dtypes(k);
  return code ? code : check_broadcast(k, 2, binary_ins);
}

static nb_code binary_infer(nbop_kargs *k) {
  const binary_impl *b = k->def->impl;
  return broadcast_out(k, 2, binary_ins, b->to_bool ? NB_BOOL : k->in[0]->dtype);
}

/* Iteration over a broadcast plan: one range = rows (rank > 1) or elements (rank 1). */
typedef struct bcast_job {
  const nbcore_bcast *plan;
  const char *in[NBCORE_BCAST_MAX_IN];
  size_t in_esz[NBCORE_BCAST_MAX_IN];
  char *out;
  size_t out_esz;
  nbop_binary_loop bfn;
  void (*row)(const struct bcast_job *j, int64_t n, const char *const *in, const int64_t *st, char *out);
} bcast_job;

static void bcast_range(void *arg, int64_t lo, int64_t hi) {
  const bcast_job *j = arg;
  const nbcore_bcast *p = j->plan;
  int last = p->rank - 1, nin = p->nin;
  int64_t st[NBCORE_BCAST_MAX_IN], off[NBCORE_BCAST_MAX_IN];
  const char *in[NBCORE_BCAST_MAX_IN];
  for (int i = 0; i < nin; i++) st[i] = p->strides[i][last];
  if (p->rank == 1) {
    for (int i = 0; i < nin; i++) in[i] = j->in[i] + (size_t)(lo * st[i]) * j->in_esz[i];
    j->row(j, hi - lo, in, st, j->out + (size_t)lo * j->out_esz);
    return;
  }
  int64_t inner = p->dims[last];
  for (int64_t r = lo; r < hi; r++) {
    nbcore_bcast_row(p, r, off);
    for (int i = 0; i < nin; i++) in[i] = j->in[i] + (size_t)off[i] * j->in_esz[i];
    j->row(j, inner, in, st, j->out + (size_t)(r * inner) * j->out_esz);
  }
}

static void run_bcast(nbop_kargs *k, bcast_job *j, int nin, const int *ins) {
  nbcore_bcast *plan = (nbcore_bcast *)k->scratch;
  const nb_tensor *xs[NBCORE_BCAST_MAX_IN];
  int64_t total = k->res[0]->size;
  bool same_shapes = true; /* equal size and rank with the output means equal shape */
  for (int i = 0; i < nin; i++) {
    xs[i] = k->in[ins[i]];
    same_shapes &= xs[i]->size == total && xs[i]->rank == k->out[0].rank;
  }
  if (same_shapes)
    nbcore_bcast_flat(plan, nin, total);
  else
    nbcore_bcast_plan(plan, nin, xs, k->out[0].rank, k->out[0].shape);
  j->plan = plan;
  for (int i = 0; i < nin; i++) {
    j->in[i] = nbcore_tdata(xs[i]);
    j->in_esz[i] = nb_dtype_size(xs[i]->dtype);
  }
  j->out = nbcore_tdata(k->res[0]);
  j->out_esz = nb_dtype_size(k->res[0]->dtype);
  if (total == 0) return;
  int64_t units = plan->rank == 1 ? total : plan->outer;
  nbop_parallel_range(nbop_kthreads(k, total), units, bcast_range, j);
}

static void binary_row(const bcast_job *j, int64_t n, const char *const *in, const int64_t *st, char *out) {
  j->bfn(n, in[0], st[0], in[1], st[1], out);
}

static nb_code binary_kernel(nbop_kargs *k) {
  const binary_impl *b = k->def->impl;
  if (b->check) {
    nb_code code = b->check(k);
    if (code) return code;
  }
  bcast_job j = {.bfn = b->fn[k->in[0]->dtype], .row = binary_row};
  run_bcast(k, &j, 2, binary_ins);
  return NB_OK;
}

nbop_binary_loop nbop_binary_loop_of(const nbop_def *def, nb_dtype t) {
  if (def->kernel != binary_kernel) return NULL;
  const binary_impl *b = def->impl;
  return b->to_bool ? NULL : b->fn[t];
}

/* Equal and NotEqual take TF's attr incompatible_shape_error: when it is false, inputs
   whose shapes do not broadcast compare as a whole, giving a scalar (false for Equal,
   true for NotEqual). infer leaves in scratch whether that happened. */
enum { ATTR_INCOMPATIBLE_SHAPE_ERROR };

static nb_code equality_validate(nbop_kargs *k) {
  return k->attr[ATTR_INCOMPATIBLE_SHAPE_ERROR].b ? binary_validate(k) : binary_check_dtypes(k);
}

static nb_code equality_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0], *y = k->in[1];
  int rank;
  int64_t shape[NB_MAX_RANK];
  bool *mismatch = (bool *)k->scratch;
  *mismatch = !k->attr[ATTR_INCOMPATIBLE_SHAPE_ERROR].b &&
              !nbcore_broadcast_shape(x->rank, x->shape, y->rank, y->shape, &rank, shape);
  if (!*mismatch) return binary_infer(k);
  nbop_meta_set(&k->out[0], NB_BOOL, 0, NULL);
  return NB_OK;
}

static nb_code equality_kernel(nbop_kargs *k) {
  if (!*(const bool *)k->scratch) return binary_kernel(k);
  const binary_impl *b = k->def->impl;
  *(uint8_t *)nbcore_tdata(k->res[0]) = b->mismatch_value;
  return NB_OK;
}

/* SelectV2(condition, t, e): all three broadcast. */
static const int select_ins[3] = {0, 1, 2};

static nb_code select_validate(nbop_kargs *k) {
  nb_code code = nbop_kcheck_dtype(k, 0, NBOP_M(NB_BOOL));
  if (!code) code = nbop_kcheck_same_dtype(k, 1, 2);
  return code ? code : check_broadcast(k, 3, select_ins);
}

static nb_code select_infer(nbop_kargs *k) { return broadcast_out(k, 3, select_ins, k->in[1]->dtype); }

static void select_row(const bcast_job *j, int64_t n, const char *const *in, const int64_t *st, char *out) {
  const uint8_t *c = (const uint8_t *)in[0];
  size_t esz = j->out_esz;
  for (int64_t i = 0; i < n; i++) {
    const char *src = c[i * st[0]] ? in[1] + (size_t)(i * st[1]) * esz : in[2] + (size_t)(i * st[2]) * esz;
    memcpy(out + (size_t)i * esz, src, esz);
  }
}

static nb_code select_kernel(nbop_kargs *k) {
  bcast_job j = {.row = select_row};
  run_bcast(k, &j, 3, select_ins);
  return NB_OK;
}

/* ---- fused gradient ops ------------------------------------------------------------ */

nb_code nbop_pair_validate(nbop_kargs *k) {
  const nbop_pair_impl *p = k->def->impl;
  const nb_tensor *a = k->in[0], *b = k->in[1];
  nb_code code = nbop_kcheck_dtype(k, 0, nbop_impl_mask((const void *const *)p->fn));
  if (!code) code = nbop_kcheck_same_dtype(k, 0, 1);
  if (code) return code;
  if (!nbop_shapes_compatible(a, b))
    return nbop_kfail(k, NB_SHAPE, "%s and %s must have the same shape, got %s and %s", p->names[0], p->names[1],
                      nbop_tstr(a), nbop_tstr(b));
  return NB_OK;
}

nb_code nbop_pair_kernel(nbop_kargs *k) {
  const nbop_pair_impl *p = k->def->impl;
  const nb_tensor *a = k->in[0];
  flat_job j = {.pair = p->fn[a->dtype],
                .a = nbcore_tdata(a),
                .b = nbcore_tdata(k->in[1]),
                .o = nbcore_tdata(k->res[0]),
                .esz = nb_dtype_size(a->dtype),
                .p = loop_param(k)};
  nbop_parallel_range(nbop_kthreads(k, a->size), a->size, flat_range, &j);
  return NB_OK;
}

/* ---- Cast ------------------------------------------------------------------------- */

/* Float to int saturates and maps NaN to 0 (C leaves out-of-range conversion undefined). */
#define SAT(T, MIN, MAX)                                                                \
  static inline T sat_##T(double v) {                                                   \
    return v != v ? 0 : v <= (double)(MIN) ? (MIN) : v >= (double)(MAX) ? (MAX) : (T)v; \
  }
SAT(int32_t, INT32_MIN, INT32_MAX)
SAT(int64_t, INT64_MIN, INT64_MAX)

static void cast_elems(nb_dtype from, const void *src, nb_dtype to, void *dst, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) {
    double v = 0;
    int64_t iv = 0;
    bool is_int = from == NB_I32 || from == NB_I64 || from == NB_BOOL;
    switch (from) {
      case NB_F32: v = ((const float *)src)[i]; break;
      case NB_F64: v = ((const double *)src)[i]; break;
      case NB_I32: iv = ((const int32_t *)src)[i]; break;
      case NB_I64: iv = ((const int64_t *)src)[i]; break;
      case NB_BOOL: iv = ((const uint8_t *)src)[i]; break;
    }
    switch (to) {
      case NB_F32: ((float *)dst)[i] = is_int ? (float)iv : (float)v; break;
      case NB_F64: ((double *)dst)[i] = is_int ? (double)iv : v; break;
      case NB_I32: ((int32_t *)dst)[i] = is_int ? (int32_t)(uint32_t)iv : sat_int32_t(v); break;
      case NB_I64: ((int64_t *)dst)[i] = is_int ? iv : sat_int64_t(v); break;
      case NB_BOOL: ((uint8_t *)dst)[i] = is_int ? iv != 0 : v != 0; break;
    }
  }
}

typedef struct cast_job {
  nb_dtype from, to;
  const void *src;
  void *dst;
} cast_job;

static void cast_range(void *arg, int64_t lo, int64_t hi) {
  const cast_job *j = arg;
  cast_elems(j->from, j->src, j->to, j->dst, lo, hi);
}

/* SrcT and DstT are checked by their specs: only an explicit SrcT must match the input. */
enum { CAST_SRCT, CAST_DSTT, CAST_TRUNCATE };

static nb_code cast_infer(nbop_kargs *k) {
  nbop_meta_set(&k->out[0], k->attr[CAST_DSTT].type, k->in[0]->rank, k->in[0]->shape);
  return NB_OK;
}

static nb_code cast_kernel(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  if (x->dtype == k->res[0]->dtype) {
    memcpy(nbcore_tdata(k->res[0]), nbcore_tdata(x), (size_t)x->size * nb_dtype_size(x->dtype));
    return NB_OK;
  }
  cast_job j = {x->dtype, k->res[0]->dtype, nbcore_tdata(x), nbcore_tdata(k->res[0])};
  nbop_parallel_range(nbop_kthreads(k, x->size), x->size, cast_range, &j);
  return NB_OK;
}

/* ---- AddN, Identity ------------------------------------------------------------------ */

/* Every input of one dtype and shape: pairwise, so unknown dims of one input do not hide
   a mismatch of two others. */
static nb_code add_n_validate(nbop_kargs *k) {
  nb_code code = nbop_kcheck_dtype(k, 0, NBOP_M_NUM);
  for (int i = 1; i < k->nin && !code; i++) code = nbop_kcheck_same_dtype(k, 0, i);
  for (int i = 0; i < k->nin && !code; i++)
    for (int j = i + 1; j < k->nin && !code; j++)
      if (!nbop_shapes_compatible(k->in[i], k->in[j]))
        code = nbop_kfail(k, NB_SHAPE, "inputs must have the same shape: input %d is %s, input %d is %s", i,
                          nbop_tstr(k->in[i]), j, nbop_tstr(k->in[j]));
  return code;
}

typedef struct add_n_job {
  const nbop_kargs *k;
  nbop_binary_loop add;
  size_t esz;
} add_n_job;

/* Sums the inputs pairwise into the output, one cache-sized block at a time. */
static void add_n_range(void *arg, int64_t lo, int64_t hi) {
  const add_n_job *j = arg;
  const nbop_kargs *k = j->k;
  char *out = (char *)nbcore_tdata(k->res[0]);
  for (int64_t b = lo; b < hi; b += 4096) {
    int64_t n = hi - b < 4096 ? hi - b : 4096;
    size_t off = (size_t)b * j->esz;
    if (k->nin == 1)
      memcpy(out + off, (const char *)nbcore_tdata(k->in[0]) + off, (size_t)n * j->esz);
    else
      j->add(n, (const char *)nbcore_tdata(k->in[0]) + off, 1, (const char *)nbcore_tdata(k->in[1]) + off, 1,
             out + off);
    for (int i = 2; i < k->nin; i++) j->add(n, out + off, 1, (const char *)nbcore_tdata(k->in[i]) + off, 1, out + off);
  }
}

static nb_code add_n_kernel(nbop_kargs *k) {
  static const binary_impl add = {.fn = {FLOAT_TABLE(add, bin), INT_TABLE(add, bin)}};
  add_n_job j = {k, add.fn[k->in[0]->dtype], nb_dtype_size(k->in[0]->dtype)};
  int64_t n = k->res[0]->size;
  nbop_parallel_range(nbop_kthreads(k, n * k->nin), n, add_n_range, &j);
  return NB_OK;
}

enum { ACCUMULATE_N, ACCUMULATE_SHAPE };

/* x fits the shape attr: same rank, dims equal where both are known. */
static bool fits_shape_attr(const nb_tensor *x, const nbop_attrval *shape) {
  bool fits = x->rank < 0 || shape->n == x->rank;
  for (int d = 0; fits && x->rank >= 0 && d < shape->n; d++)
    fits = shape->ints[d] < 0 || x->shape[d] < 0 || shape->ints[d] == x->shape[d];
  return fits;
}

/* AccumulateNV2: AddN with the sum's shape stated in attr "shape" (dims -1: unknown),
   which the inputs must fit. */
static nb_code accumulate_n_validate(nbop_kargs *k) {
  const nbop_attrval *shape = &k->attr[ACCUMULATE_SHAPE];
  if (shape->n < 0 || shape->n > NB_MAX_RANK)
    return nbop_kfail(k, NB_SHAPE, "the shape attr has rank %d, not in [0, %d]", shape->n, NB_MAX_RANK);
  for (int d = 0; d < shape->n; d++)
    if (shape->ints[d] < -1) return nbop_kfail(k, NB_SHAPE, "the shape attr has dim %lld", (long long)shape->ints[d]);
  nb_code code = add_n_validate(k);
  for (int i = 0; i < k->nin && !code; i++)
    if (!fits_shape_attr(k->in[i], shape))
      code = nbop_kfail(k, NB_SHAPE, "inputs of shape %s do not fit the shape attr %s", nbop_tstr(k->in[i]),
                        nbop_sstr(shape->n, shape->ints));
  return code;
}

/* ---- the table ---------------------------------------------------------------------- */

#define UNARY(NAME, IMPL)                                                                                 \
  {                                                                                                       \
    .name = NAME, .nin = 1, .nout = 1, .alias = -1, .elementwise = true, .validate = nbop_unary_validate, \
    .infer = nbop_infer_same, .kernel = nbop_unary_kernel, .impl = &(const nbop_unary_impl)IMPL           \
  }
#define BINARY(NAME, FNS, TO_BOOL, CHECK)                                                                       \
  {                                                                                                             \
    .name = NAME, .nin = 2, .nout = 1, .alias = -1, .bool_out = TO_BOOL, .elementwise = true,                   \
    .validate = binary_validate, .infer = binary_infer, .kernel = binary_kernel, .impl = &(const binary_impl) { \
      .fn = {FNS}, .to_bool = TO_BOOL, .check = CHECK                                                           \
    }                                                                                                           \
  }
#define BINARY_NUM_FNS(name) FLOAT_TABLE(name, bin), INT_TABLE(name, bin)
#define BINARY_CMP_FNS(name) BINARY_NUM_FNS(name), [NB_BOOL] = name##_bin_b
#define PAIR(NAME, FNS, IN0, IN1)                                                                        \
  {                                                                                                      \
    .name = NAME, .nin = 2, .nout = 1, .alias = -1, .elementwise = true, .validate = nbop_pair_validate, \
    .infer = nbop_infer_same, .kernel = nbop_pair_kernel, .impl = &(const nbop_pair_impl) {              \
      .fn = {FNS}, .names = { IN0, IN1 }                                                                 \
    }                                                                                                    \
  }
#define PAIR_NUM_FNS(name) FLOAT_TABLE(name, pair), INT_TABLE(name, pair)
#define EQUALITY(NAME, FNS, MISMATCH)                                                                         \
  {                                                                                                           \
    .name = NAME, .nin = 2, .nout = 1, .alias = -1, .nattrs = 1, .bool_out = true, .elementwise = true,       \
    .attrs = {{"incompatible_shape_error", NB_ATTR_BOOL, {.b = true}, false}}, .validate = equality_validate, \
    .infer = equality_infer, .kernel = equality_kernel, .impl = &(const binary_impl) {                        \
      .fn = {FNS}, .to_bool = true, .mismatch_value = MISMATCH                                                \
    }                                                                                                         \
  }

enum {
  OP_NEG,
  OP_EXP,
  OP_LOG,
  OP_LOG1P,
  OP_SQRT,
  OP_RSQRT,
  OP_RECIPROCAL,
  OP_SQUARE,
  OP_ABS,
  OP_SIGN,
  OP_TANH,
  OP_SIGMOID,
  OP_RELU,
  OP_ELU,
  OP_SOFTPLUS,
  OP_SIN,
  OP_COS,
  OP_LOGICAL_NOT,
  OP_ADDV2,
  OP_ADD,
  OP_SUB,
  OP_MUL,
  OP_REALDIV,
  OP_POW,
  OP_SQDIFF,
  OP_MAXIMUM,
  OP_MINIMUM,
  OP_LESS,
  OP_LESS_EQUAL,
  OP_GREATER,
  OP_GREATER_EQUAL,
  OP_EQUAL,
  OP_NOT_EQUAL,
  OP_LOGICAL_AND,
  OP_LOGICAL_OR,
  OP_SELECT,
  OP_CAST,
  OP_ADD_N,
  OP_IDENTITY,
  OP_STOP_GRADIENT,
  OP_PREVENT_GRADIENT,
  OP_ACCUMULATE_N,
  OP_TANH_GRAD,
  OP_SIGMOID_GRAD,
  OP_RSQRT_GRAD,
  OP_SQRT_GRAD,
  OP_RECIPROCAL_GRAD,
  OP_RELU_GRAD,
  OP_ELU_GRAD,
  OP_SOFTPLUS_GRAD,
  OP_COUNT
};

static nbop_def math_ops[OP_COUNT] = {
    [OP_NEG] = UNARY("Neg", UNARY_NUM_IMPL(neg)),
    [OP_EXP] = UNARY("Exp", UNARY_FLOAT_IMPL(exp)),
    [OP_LOG] = UNARY("Log", UNARY_FLOAT_IMPL(log)),
    [OP_LOG1P] = UNARY("Log1p", UNARY_FLOAT_IMPL(log1p)),
    [OP_SQRT] = UNARY("Sqrt", UNARY_FLOAT_IMPL(sqrt)),
    [OP_RSQRT] = UNARY("Rsqrt", UNARY_FLOAT_IMPL(rsqrt)),
    [OP_RECIPROCAL] = UNARY("Reciprocal", UNARY_FLOAT_IMPL(reciprocal)),
    [OP_SQUARE] = UNARY("Square", UNARY_NUM_IMPL(square)),
    [OP_ABS] = UNARY("Abs", UNARY_NUM_IMPL(abs)),
    [OP_SIGN] = UNARY("Sign", UNARY_NUM_IMPL(sign)),
    [OP_TANH] = UNARY("Tanh", UNARY_FLOAT_IMPL(tanh)),
    [OP_SIGMOID] = UNARY("Sigmoid", UNARY_FLOAT_IMPL(sigmoid)),
    [OP_RELU] = UNARY("Relu", UNARY_NUM_IMPL(relu)),
    [OP_ELU] = UNARY("Elu", UNARY_FLOAT_IMPL(elu)),
    [OP_SOFTPLUS] = UNARY("Softplus", UNARY_FLOAT_IMPL(softplus)),
    [OP_SIN] = UNARY("Sin", UNARY_FLOAT_IMPL(sin)),
    [OP_COS] = UNARY("Cos", UNARY_FLOAT_IMPL(cos)),
    [OP_LOGICAL_NOT] = UNARY("LogicalNot", {{[NB_BOOL] = logical_not_loop_b}}), /* bool in, bool out */
    [OP_ADDV2] = BINARY("AddV2", BINARY_NUM_FNS(add), false, NULL),
    [OP_ADD] = BINARY("Add", BINARY_NUM_FNS(add), false, NULL),
    [OP_SUB] = BINARY("Sub", BINARY_NUM_FNS(sub), false, NULL),
    [OP_MUL] = BINARY("Mul", BINARY_NUM_FNS(mul), false, NULL),
    [OP_REALDIV] = BINARY("RealDiv", BINARY_NUM_FNS(div), false, check_int_div),
    [OP_POW] = {.name = "Pow",
                .nin = 2,
                .nout = 1,
                .alias = -1,
                .elementwise = true,
                .validate = binary_validate,
                .infer = binary_infer,
                .kernel = binary_kernel,
                .impl = &(const binary_impl){.fn = {BINARY_NUM_FNS(pow)}, .check = check_int_pow}},
    [OP_SQDIFF] = BINARY("SquaredDifference", BINARY_NUM_FNS(sqdiff), false, NULL),
    [OP_MAXIMUM] = BINARY("Maximum", BINARY_NUM_FNS(maximum), false, NULL),
    [OP_MINIMUM] = BINARY("Minimum", BINARY_NUM_FNS(minimum), false, NULL),
    [OP_LESS] = BINARY("Less", BINARY_NUM_FNS(less), true, NULL),
    [OP_LESS_EQUAL] = BINARY("LessEqual", BINARY_NUM_FNS(less_equal), true, NULL),
    [OP_GREATER] = BINARY("Greater", BINARY_NUM_FNS(greater), true, NULL),
    [OP_GREATER_EQUAL] = BINARY("GreaterEqual", BINARY_NUM_FNS(greater_equal), true, NULL),
    [OP_EQUAL] = EQUALITY("Equal", BINARY_CMP_FNS(equal), false),
    [OP_NOT_EQUAL] = EQUALITY("NotEqual", BINARY_CMP_FNS(not_equal), true),
    [OP_LOGICAL_AND] = BINARY("LogicalAnd", [NB_BOOL] = logical_and_bin_b, true, NULL),
    [OP_LOGICAL_OR] = BINARY("LogicalOr", [NB_BOOL] = logical_or_bin_b, true, NULL),
    [OP_SELECT] = {.name = "SelectV2",
                   .nin = 3,
                   .nout = 1,
                   .alias = -1,
                   .t_input = 1,
                   .elementwise = true,
                   .validate = select_validate,
                   .infer = select_infer,
                   .kernel = select_kernel},
    [OP_CAST] = {.name = "Cast",
                 .nin = 1,
                 .nout = 1,
                 .alias = -1,
                 .nattrs = 3,
                 .dtype_attr = 1 + CAST_DSTT,
                 .elementwise = true,
                 .attrs = {{"SrcT", NB_ATTR_TYPE, {.type = NBOP_TYPE_UNSET}, false},
                           {"DstT", NB_ATTR_TYPE, {.type = NB_F32}, true},
                           {"Truncate", NB_ATTR_BOOL, {.b = false}, false}},
                 .checks = {[CAST_SRCT] = {.of_input = 1}},
                 .infer = cast_infer,
                 .kernel = cast_kernel},
    [OP_ADD_N] = {.name = "AddN",
                  .nin = 0,
                  .variadic = true,
                  .nout = 1,
                  .alias = -1,
                  .nattrs = 1,
                  .elementwise = true,
                  .attrs = {{"N", NB_ATTR_INT, {.i = 1}, true}},
                  .validate = add_n_validate,
                  .infer = nbop_infer_same,
                  .kernel = add_n_kernel},
    /* TF's shape fn takes the output shape from the attr; here it is the inputs' (they fit it) */
    [OP_ACCUMULATE_N] = {.name = "AccumulateNV2",
                         .nin = 0,
                         .variadic = true,
                         .nout = 1,
                         .alias = -1,
                         .nattrs = 2,
                         .elementwise = true,
                         .attrs = {[ACCUMULATE_N] = {"N", NB_ATTR_INT, {.i = 1}, true},
                                   [ACCUMULATE_SHAPE] = {"shape", NB_ATTR_INTS, {.n = 0}, true}},
                         .validate = accumulate_n_validate,
                         .infer = nbop_infer_same,
                         .kernel = add_n_kernel},
    [OP_IDENTITY] =
        {.name = "Identity", .nin = 1, .nout = 1, .alias = 0, .elementwise = true, .infer = nbop_infer_same},
    [OP_STOP_GRADIENT] =
        {.name = "StopGradient", .nin = 1, .nout = 1, .alias = 0, .elementwise = true, .infer = nbop_infer_same},
    /* an identity whose gradient is an error quoting "message" (src/grad/math_grad.c) */
    [OP_PREVENT_GRADIENT] = {.name = "PreventGradient",
                             .nin = 1,
                             .nout = 1,
                             .alias = 0,
                             .nattrs = 1,
                             .elementwise = true,
                             .attrs = {{"message", NB_ATTR_STR, {.s = ""}, false}},
                             .infer = nbop_infer_same},
    [OP_TANH_GRAD] = PAIR("TanhGrad", FLOAT_TABLE(tanh_grad, pair), "y", "dy"),
    [OP_SIGMOID_GRAD] = PAIR("SigmoidGrad", FLOAT_TABLE(sigmoid_grad, pair), "y", "dy"),
    [OP_RSQRT_GRAD] = PAIR("RsqrtGrad", FLOAT_TABLE(rsqrt_grad, pair), "y", "dy"),
    [OP_SQRT_GRAD] = PAIR("SqrtGrad", FLOAT_TABLE(sqrt_grad, pair), "y", "dy"),
    [OP_RECIPROCAL_GRAD] = PAIR("ReciprocalGrad", FLOAT_TABLE(reciprocal_grad, pair), "y", "dy"),
    [OP_RELU_GRAD] = PAIR("ReluGrad", PAIR_NUM_FNS(relu_grad), "gradients", "features"),
    [OP_ELU_GRAD] = PAIR("EluGrad", FLOAT_TABLE(elu_grad, pair), "gradients", "outputs"),
    [OP_SOFTPLUS_GRAD] = PAIR("SoftplusGrad", FLOAT_TABLE(softplus_grad, pair), "gradients", "features"),
};

nbop_family nbop_math_family(void) { return (nbop_family){math_ops, OP_COUNT}; }

/* ---- wrappers ----------------------------------------------------------------------- */

/* The one output of op on x, or on a and b (attrs at their defaults). */
static nb_tensor *unary(nb_ctx *c, int op, nb_tensor *x) { return nbop_call(c, &math_ops[op], &x, 1, NULL); }
static nb_tensor *binary(nb_ctx *c, int op, nb_tensor *a, nb_tensor *b) {
  return nbop_call_pair(c, &math_ops[op], a, b);
}

nb_tensor *nb_neg(nb_ctx *c, nb_tensor *x) { return unary(c, OP_NEG, x); }
nb_tensor *nb_exp(nb_ctx *c, nb_tensor *x) { return unary(c, OP_EXP, x); }
nb_tensor *nb_log(nb_ctx *c, nb_tensor *x) { return unary(c, OP_LOG, x); }
nb_tensor *nb_log1p(nb_ctx *c, nb_tensor *x) { return unary(c, OP_LOG1P, x); }
nb_tensor *nb_sqrt(nb_ctx *c, nb_tensor *x) { return unary(c, OP_SQRT, x); }
nb_tensor *nb_rsqrt(nb_ctx *c, nb_tensor *x) { return unary(c, OP_RSQRT, x); }
nb_tensor *nb_reciprocal(nb_ctx *c, nb_tensor *x) { return unary(c, OP_RECIPROCAL, x); }
nb_tensor *nb_square(nb_ctx *c, nb_tensor *x) { return unary(c, OP_SQUARE, x); }
nb_tensor *nb_abs(nb_ctx *c, nb_tensor *x) { return unary(c, OP_ABS, x); }
nb_tensor *nb_sign(nb_ctx *c, nb_tensor *x) { return unary(c, OP_SIGN, x); }
nb_tensor *nb_tanh(nb_ctx *c, nb_tensor *x) { return unary(c, OP_TANH, x); }
nb_tensor *nb_sigmoid(nb_ctx *c, nb_tensor *x) { return unary(c, OP_SIGMOID, x); }
nb_tensor *nb_relu(nb_ctx *c, nb_tensor *x) { return unary(c, OP_RELU, x); }
nb_tensor *nb_elu(nb_ctx *c, nb_tensor *x) { return unary(c, OP_ELU, x); }
nb_tensor *nb_softplus(nb_ctx *c, nb_tensor *x) { return unary(c, OP_SOFTPLUS, x); }
nb_tensor *nb_sin(nb_ctx *c, nb_tensor *x) { return unary(c, OP_SIN, x); }
nb_tensor *nb_cos(nb_ctx *c, nb_tensor *x) { return unary(c, OP_COS, x); }
nb_tensor *nb_logical_not(nb_ctx *c, nb_tensor *x) { return unary(c, OP_LOGICAL_NOT, x); }
nb_tensor *nb_identity(nb_ctx *c, nb_tensor *x) { return unary(c, OP_IDENTITY, x); }
nb_tensor *nb_stop_gradient(nb_ctx *c, nb_tensor *x) { return unary(c, OP_STOP_GRADIENT, x); }
nb_tensor *nb_add(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_ADDV2, a, b); }
nb_tensor *nb_sub(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_SUB, a, b); }
nb_tensor *nb_mul(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_MUL, a, b); }
nb_tensor *nb_real_div(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_REALDIV, a, b); }
nb_tensor *nb_pow(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_POW, a, b); }
nb_tensor *nb_squared_difference(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_SQDIFF, a, b); }
nb_tensor *nb_maximum(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_MAXIMUM, a, b); }
nb_tensor *nb_minimum(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_MINIMUM, a, b); }
nb_tensor *nb_less(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_LESS, a, b); }
nb_tensor *nb_less_equal(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_LESS_EQUAL, a, b); }
nb_tensor *nb_greater(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_GREATER, a, b); }
nb_tensor *nb_greater_equal(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_GREATER_EQUAL, a, b); }
nb_tensor *nb_equal(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_EQUAL, a, b); }
nb_tensor *nb_not_equal(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_NOT_EQUAL, a, b); }
nb_tensor *nb_logical_and(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_LOGICAL_AND, a, b); }
nb_tensor *nb_logical_or(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return binary(c, OP_LOGICAL_OR, a, b); }
nb_tensor *nb_tanh_grad(nb_ctx *c, nb_tensor *y, nb_tensor *dy) { return binary(c, OP_TANH_GRAD, y, dy); }
nb_tensor *nb_sigmoid_grad(nb_ctx *c, nb_tensor *y, nb_tensor *dy) { return binary(c, OP_SIGMOID_GRAD, y, dy); }
nb_tensor *nb_rsqrt_grad(nb_ctx *c, nb_tensor *y, nb_tensor *dy) { return binary(c, OP_RSQRT_GRAD, y, dy); }
nb_tensor *nb_sqrt_grad(nb_ctx *c, nb_tensor *y, nb_tensor *dy) { return binary(c, OP_SQRT_GRAD, y, dy); }
nb_tensor *nb_reciprocal_grad(nb_ctx *c, nb_tensor *y, nb_tensor *dy) { return binary(c, OP_RECIPROCAL_GRAD, y, dy); }
nb_tensor *nb_relu_grad(nb_ctx *c, nb_tensor *gradients, nb_tensor *features) {
  return binary(c, OP_RELU_GRAD, gradients, features);
}
nb_tensor *nb_elu_grad(nb_ctx *c, nb_tensor *gradients, nb_tensor *outputs) {
  return binary(c, OP_ELU_GRAD, gradients, outputs);
}
nb_tensor *nb_softplus_grad(nb_ctx *c, nb_tensor *gradients, nb_tensor *features) {
  return binary(c, OP_SOFTPLUS_GRAD, gradients, features);
}

nb_tensor *nb_select(nb_ctx *c, nb_tensor *cond, nb_tensor *t, nb_tensor *e) {
  nb_tensor *in[3] = {cond, t, e};
  return nbop_call(c, &math_ops[OP_SELECT], in, 3, NULL);
}

nb_tensor *nb_cast(nb_ctx *c, nb_tensor *x, nb_dtype to) {
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&math_ops[OP_CAST], a);
  a[CAST_DSTT].type = to;
  return nbop_call(c, &math_ops[OP_CAST], &x, 1, a);
}

bool nbop_merge_shapes(nb_tensor *const *xs, int n, nbop_meta *m, int *conflict) {
  m->rank = -1;
  *conflict = -1;
  for (int i = 0; i < n; i++) {
    const nb_tensor *x = xs[i];
    if (!x || x->rank < 0) continue;
    if (m->rank < 0) {
      nbop_meta_like(m, x);
      continue;
    }
    bool fits = x->rank == m->rank;
    for (int d = 0; fits && d < m->rank; d++) {
      fits = m->shape[d] < 0 || x->shape[d] < 0 || m->shape[d] == x->shape[d];
      if (m->shape[d] < 0) m->shape[d] = x->shape[d];
    }
    if (!fits) {
      *conflict = i;
      return false;
    }
  }
  return true;
}

/* tf.math.accumulate_n's shape: the static shapes of xs merged, into *m; an error when
   they conflict or none has a known rank. */
static nb_code accumulator_shape(nb_ctx *c, nb_tensor *const *xs, int n, nbop_meta *m) {
  int bad;
  if (n < 1 || !xs) return nbcore_fail(c, NB_INVALID, "AccumulateNV2: needs at least one input, got %d", n);
  for (int i = 0; i < n; i++)
    if (!xs[i]) return nbcore_fail(c, NB_INVALID, "AccumulateNV2: input %d is NULL", i);
  if (!nbop_merge_shapes(xs, n, m, &bad))
    return nbcore_fail(c, NB_SHAPE, "AccumulateNV2: input %d of shape %s does not fit the shape %s of those before it",
                       bad, nbop_tstr(xs[bad]), nbop_sstr(m->rank, m->shape));
  if (m->rank < 0)
    return nbcore_fail(c, NB_SHAPE,
                       "AccumulateNV2: every input has an unknown rank; pass the shape attr through nb_op");
  return NB_OK;
}

nb_tensor *nb_accumulate_n(nb_ctx *c, nb_tensor *const *xs, int n) {
  nbop_meta m;
  if (!nbop_live(c) || accumulator_shape(c, xs, n, &m)) return NULL;
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&math_ops[OP_ACCUMULATE_N], a);
  a[ACCUMULATE_SHAPE].ints = m.shape;
  a[ACCUMULATE_SHAPE].n = m.rank;
  return nbop_call(c, &math_ops[OP_ACCUMULATE_N], xs, n, a);
}

nb_tensor *nb_prevent_gradient(nb_ctx *c, nb_tensor *x, const char *message) {
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&math_ops[OP_PREVENT_GRADIENT], a);
  if (message) a[0].s = message;
  return nbop_call(c, &math_ops[OP_PREVENT_GRADIENT], &x, 1, a);
}

nb_tensor *nb_add_n(nb_ctx *c, nb_tensor *const *xs, int n) {
  if (nbop_live(c) && (n < 1 || !xs)) {
    nbcore_fail(c, NB_INVALID, "AddN: needs at least one input, got %d", n);
    return NULL;
  }
  return nbop_call(c, &math_ops[OP_ADD_N], xs, n, NULL);
}
