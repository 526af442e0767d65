/* Stateless random numbers with TF's values: StatelessRandomUniform, StatelessRandomNormal
   and StatelessTruncatedNormal draw from Philox-4x32-10 exactly as TF's CPU kernels do
   (tensorflow/core/kernels/stateless_random_ops.cc, lib/random/philox_random.h and
   random_distributions.h), so the same seed gives TF's numbers bit for bit. The output is
   cut into groups (4 floats or 2 doubles); group g is a pure function of the seed and g,
   so threads split the groups and any thread count gives the same tensor.

   Built on them, as public composites: stateless dropout and seeded initializers. */
#define _GNU_SOURCE /* sincosf, sincos: TF's Box-Muller uses them on Linux */
#include "op.h"

#include <math.h>
#include <string.h>

/* ---- Philox-4x32-10 ---------------------------------------------------------------------- */

typedef struct philox {
  uint32_t counter[4];
  uint32_t key[2];
} philox;

/* One Philox round: two 32x32->64 products mixed with the other words and the key. */
static void philox_round(uint32_t *c, const uint32_t *k) {
  uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
  uint32_t r[4] = {(uint32_t)(p1 >> 32) ^ c[1] ^ k[0], (uint32_t)p1, (uint32_t)(p0 >> 32) ^ c[3] ^ k[1], (uint32_t)p0};
  memcpy(c, r, sizeof r);
}

/* The four words for the generator's current counter (ten rounds, the key bumped by
   the Weyl constants between rounds). */
static void philox_block(const philox *g, uint32_t out[4]) {
  uint32_t k[2] = {g->key[0], g->key[1]};
  memcpy(out, g->counter, 4 * sizeof *out);
  for (int r = 0; r < 10; r++) {
    philox_round(out, k);
    k[0] += 0x9E3779B9u;
    k[1] += 0xBB67AE85u;
  }
}

/* Advances the 128-bit counter by n (TF's PhiloxRandom::Skip). */
static void philox_skip(philox *g, uint64_t n) {
  uint32_t lo = (uint32_t)n, hi = (uint32_t)(n >> 32);
  g->counter[0] += lo;
  if (g->counter[0] < lo) hi++;
  g->counter[1] += hi;
  if (g->counter[1] < hi && ++g->counter[2] == 0) g->counter[3]++;
}

/* TF's GenerateKey: the two seeds (int32 seeds sign-extended) are scrambled by one Philox
   block under a fixed key, which gives the key and the upper counter words. */
static philox philox_from_seed(uint64_t s0, uint64_t s1) {
  philox g = {{(uint32_t)s0, (uint32_t)(s0 >> 32), (uint32_t)s1, (uint32_t)(s1 >> 32)}, {0x3ec8f720u, 0x02461e29u}};
  uint32_t mix[4];
  philox_block(&g, mix);
  return (philox){{0, 0, mix[2], mix[3]}, {mix[0], mix[1]}};
}

/* ---- distributions (random_distributions.h) ---------------------------------------------- */

/* A float in [0, 1) from 23 random mantissa bits: 1.m - 1. */
static float uint32_to_float(uint32_t x) {
  uint32_t bits = (127u << 23) | (x & 0x7fffffu);
  float f;
  memcpy(&f, &bits, sizeof f);
  return f - 1.0f;
}

/* A double in [0, 1) from 52 bits: 20 of x0 above the 32 of x1. */
static double uint64_to_double(uint32_t x0, uint32_t x1) {
  uint64_t bits = (1023ull << 52) | ((uint64_t)(x0 & 0xfffffu) << 32) | x1;
  double d;
  memcpy(&d, &bits, sizeof d);
  return d - 1.0;
}

/* Box-Muller as TF writes it: u1 floored at 1e-7, the angle computed in double (2.0f * M_PI
   is a double), everything else in float. */
static void box_muller_float(uint32_t x0, uint32_t x1, float *f0, float *f1) {
  float u1 = uint32_to_float(x0);
  if (u1 < 1.0e-7f) u1 = 1.0e-7f;
  const float v1 = (float)(2.0f * M_PI * uint32_to_float(x1));
  const float u2 = sqrtf(-2.0f * logf(u1));
  sincosf(v1, f0, f1);
  *f0 *= u2;
  *f1 *= u2;
}

static void box_muller_double(const uint32_t *x, double *d0, double *d1) {
  double u1 = uint64_to_double(x[0], x[1]);
  if (u1 < 1.0e-7) u1 = 1.0e-7;
  const double v1 = 2 * M_PI * uint64_to_double(x[2], x[3]);
  const double u2 = sqrt(-2.0 * log(u1));
  sincos(v1, d0, d1);
  *d0 *= u2;
  *d1 *= u2;
}

/* TF's SingleSampleAdapter: the generator's words one at a time. */
typedef struct single_sampler {
  philox g;
  uint32_t words[4];
  int used;
} single_sampler;

static uint32_t next_word(single_sampler *s) {
  if (s->used == 4) {
    philox_block(&s->g, s->words);
    philox_skip(&s->g, 1);
    s->used = 0;
  }
  return s->words[s->used++];
}

typedef enum { DIST_UNIFORM, DIST_NORMAL, DIST_TRUNCATED } dist_kind;

/* Normals with |v| < 2, kept in order until the group is full. Each group starts its own
   reserved stretch of 256 Philox blocks (TF's kReservedSamplesPerOutput). */
static void truncated_group(philox g, bool f32, int n, void *out) {
  single_sampler s = {.g = g, .used = 4};
  for (int filled = 0; filled < n;) {
    uint32_t w[4];
    double v[2];
    if (f32) {
      float f[2];
      w[0] = next_word(&s), w[1] = next_word(&s);
      box_muller_float(w[0], w[1], &f[0], &f[1]);
      v[0] = f[0], v[1] = f[1];
    } else {
      for (int i = 0; i < 4; i++) w[i] = next_word(&s);
      box_muller_double(w, &v[0], &v[1]);
    }
    for (int i = 0; i < 2 && filled < n; i++)
      if (fabs(v[i]) < 2.0) {
        if (f32)
          ((float *)out)[filled++] = (float)v[i];
        else
          ((double *)out)[filled++] = v[i];
      }
  }
}

/* Group g's values (n of them: the group size, less for the last group) from one block
   at counter + g (uniform, normal) or the reserved stretch (truncated). */
static void fill_group(philox base, dist_kind kind, bool f32, int64_t g, int n, void *out) {
  int per_group = f32 ? 4 : 2;
  philox_skip(&base, kind == DIST_TRUNCATED ? (uint64_t)g * (uint64_t)(per_group * 256 / 4) : (uint64_t)g);
  if (kind == DIST_TRUNCATED) {
    truncated_group(base, f32, n, out);
    return;
  }
  uint32_t w[4];
  float f[4];
  double d[2];
  philox_block(&base, w);
  if (f32) {
    for (int i = 0; i < 4; i += 2)
      if (kind == DIST_UNIFORM)
        f[i] = uint32_to_float(w[i]), f[i + 1] = uint32_to_float(w[i + 1]);
      else
        box_muller_float(w[i], w[i + 1], &f[i], &f[i + 1]);
    memcpy(out, f, (size_t)n * sizeof *f);
  } else {
    if (kind == DIST_UNIFORM)
      d[0] = uint64_to_double(w[0], w[1]), d[1] = uint64_to_double(w[2], w[3]);
    else
      box_muller_double(w, &d[0], &d[1]);
    memcpy(out, d, (size_t)n * sizeof *d);
  }
}

/* ---- the ops ---------------------------------------------------------------------------- */

/* dtype and Tseed are checked by their attr specs: only an explicit Tseed must match the seed. */
enum { ATTR_DTYPE, ATTR_TSEED };

/* seed: 2 ints; shape: a vector of dims >= 0 (where known). */
static nb_code stateless_validate(nbop_kargs *k) {
  const nb_tensor *shape = k->in[0], *seed = k->in[1];
  nb_code code = nbop_kcheck_dtype(k, 0, NBOP_M_INT);
  if (!code) code = nbop_kcheck_dtype(k, 1, NBOP_M_INT);
  if (code) return code;
  if (seed->rank >= 0 && (seed->rank != 1 || (seed->shape[0] >= 0 && seed->shape[0] != 2)))
    return nbop_kfail(k, NB_SHAPE, "seed must have shape [2], not %s", nbop_tstr(seed));
  if (shape->rank >= 0 && shape->rank != 1)
    return nbop_kfail(k, NB_SHAPE, "shape must be a vector, got shape %s", nbop_tstr(shape));
  int64_t dims[NB_MAX_RANK];
  int n;
  code = nbop_kints(k, 0, 1, dims, NB_MAX_RANK, &n);
  for (int i = 0; !code && i < n; i++)
    if (dims[i] < 0)
      return nbop_kfail(k, NB_INVALID, "Dimension %lld must be >= 0 (shape %s)", (long long)dims[i],
                        nbop_sstr(n, dims));
  return code == NBOP_DEFER ? NB_OK : code;
}

static nb_code stateless_infer(nbop_kargs *k) {
  int64_t dims[NB_MAX_RANK];
  int n;
  nb_code code = nbop_kints(k, 0, 1, dims, NB_MAX_RANK, &n);
  if (!code) nbop_meta_set(&k->out[0], k->attr[ATTR_DTYPE].type, n, dims);
  return code;
}

typedef struct fill_job {
  philox base;
  dist_kind kind;
  bool f32;
  int64_t size;
  void *out;
} fill_job;

static void fill_range(void *arg, int64_t lo, int64_t hi) {
  const fill_job *j = arg;
  int per_group = j->f32 ? 4 : 2;
  size_t esz = j->f32 ? 4 : 8;
  for (int64_t g = lo; g < hi; g++) {
    int64_t first = g * per_group, n = j->size - first < per_group ? j->size - first : per_group;
    fill_group(j->base, j->kind, j->f32, g, (int)n, (char *)j->out + (size_t)first * esz);
  }
}

static nb_code stateless_kernel(nbop_kargs *k) {
  const nb_tensor *seed = k->in[1];
  nb_tensor *y = k->res[0];
  uint64_t s[2];
  for (int i = 0; i < 2; i++) /* int32 seeds sign-extend, as TF's int32 -> uint64 conversion */
    s[i] = seed->dtype == NB_I32 ? (uint64_t)(int64_t)((const int32_t *)nbcore_tdata(seed))[i]
                                 : (uint64_t)((const int64_t *)nbcore_tdata(seed))[i];
  fill_job j = {philox_from_seed(s[0], s[1]), *(const dist_kind *)k->def->impl, y->dtype == NB_F32, y->size,
                nbcore_tdata(y)};
  int64_t groups = (y->size + (j.f32 ? 3 : 1)) / (j.f32 ? 4 : 2);
  /* a truncated group may draw several blocks: weigh it so threads start sooner */
  nbop_parallel_range(nbop_kthreads(k, y->size * (j.kind == DIST_UNIFORM ? 1 : 8)), groups, fill_range, &j);
  return NB_OK;
}

static const dist_kind uniform_kind = DIST_UNIFORM, normal_kind = DIST_NORMAL, truncated_kind = DIST_TRUNCATED;

#define STATELESS_OP(NAME, KIND)                                                                               \
  {                                                                                                            \
    .name = NAME, .nin = 2, .nout = 1, .alias = -1, .dtype_attr = 1 + ATTR_DTYPE, .nattrs = 2,                 \
    .attrs = {{"dtype", NB_ATTR_TYPE, {.type = NB_F32}, false},                                                \
              {"Tseed", NB_ATTR_TYPE, {.type = NBOP_TYPE_UNSET}, false}},                                      \
    .checks = {{.types = NBOP_M_FLOAT}, {.types = NBOP_M_INT, .of_input = 2}}, .validate = stateless_validate, \
    .infer = stateless_infer, .kernel = stateless_kernel, .impl = &KIND                                        \
  }

enum { OP_UNIFORM, OP_NORMAL, OP_TRUNCATED, OP_COUNT };

static nbop_def random_ops[OP_COUNT] = {
    [OP_UNIFORM] = STATELESS_OP("StatelessRandomUniform", uniform_kind),
    [OP_NORMAL] = STATELESS_OP("StatelessRandomNormal", normal_kind),
    [OP_TRUNCATED] = STATELESS_OP("StatelessTruncatedNormal", truncated_kind),
};

nbop_family nbop_random_family(void) { return (nbop_family){random_ops, OP_COUNT}; }

/* ---- wrappers --------------------------------------------------------------------------- */

static nb_tensor *call_stateless(nb_ctx *c, int op, nb_tensor *shape, const int64_t seed[2], nb_dtype dtype) {
  if (!nbop_live(c)) return NULL;
  if (!seed) {
    nb_set_error(c, NB_INVALID, "%s: seed is NULL", random_ops[op].name);
    return NULL;
  }
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&random_ops[op], a);
  a[ATTR_DTYPE].type = dtype;
  nb_tensor *in[2] = {shape, nbop_const_ints(c, NB_I64, seed, 2)};
  nb_tensor *y = nbop_call(c, &random_ops[op], in, 2, a);
  nb_tensor_free(in[1]);
  return y;
}

static nb_tensor *call_with_dims(nb_ctx *c, int op, const int64_t *shape, int rank, const int64_t seed[2],
                                 nb_dtype dtype) {
  if (!nbop_live(c)) return NULL;
  if (rank < 0 || rank > NB_MAX_RANK || (rank > 0 && !shape)) {
    nb_set_error(c, NB_INVALID, "%s: rank %d is not in [0, %d] or shape is NULL", random_ops[op].name, rank,
                 NB_MAX_RANK);
    return NULL;
  }
  nb_tensor *dims = nbop_const_ints(c, NB_I64, shape, rank);
  nb_tensor *y = call_stateless(c, op, dims, seed, dtype);
  nb_tensor_free(dims);
  return y;
}

nb_tensor *nb_stateless_random_uniform(nb_ctx *c, const int64_t *shape, int rank, const int64_t seed[2],
                                       nb_dtype dtype) {
  return call_with_dims(c, OP_UNIFORM, shape, rank, seed, dtype);
}

nb_tensor *nb_stateless_random_normal(nb_ctx *c, const int64_t *shape, int rank, const int64_t seed[2],
                                      nb_dtype dtype) {
  return call_with_dims(c, OP_NORMAL, shape, rank, seed, dtype);
}

nb_tensor *nb_stateless_truncated_normal(nb_ctx *c, const int64_t *shape, int rank, const int64_t seed[2],
                                         nb_dtype dtype) {
  return call_with_dims(c, OP_TRUNCATED, shape, rank, seed, dtype);
}

/* ---- dropout ------------------------------------------------------------------------------ */

/* Ends the scope begun for r's intermediates, keeping r alone. */
static nb_tensor *kept(nb_ctx *c, nb_tensor *r) {
  nb_scope_end(c, &r, 1);
  return r;
}

/* tf.nn.experimental.stateless_dropout: keep where uniform >= rate, scaled by 1 / (1 - rate),
   zero elsewhere (SelectV2, so the mask broadcasts from noise_shape). Public ops only, so
   its gradient is theirs. */
nb_tensor *nb_dropout(nb_ctx *c, nb_tensor *x, double rate, const int64_t *noise_shape, int noise_rank,
                      const int64_t seed[2]) {
  if (!nbop_live(c)) return NULL;
  if (!x) {
    nb_set_error(c, NB_INVALID, "dropout: x is NULL");
    return NULL;
  }
  if (!nbcore_is_float(x->dtype)) {
    nb_set_error(c, NB_DTYPE, "dropout: x has dtype %s; expected float32 or float64", nb_dtype_name(x->dtype));
    return NULL;
  }
  if (!(rate >= 0 && rate < 1)) {
    nb_set_error(c, NB_INVALID, "dropout: rate must be a scalar tensor or a float in the range [0, 1), got %g", rate);
    return NULL;
  }
  if (rate == 0) return x;
  nb_scope_begin(c); /* the mask and scalars go with it */
  nb_tensor *u = noise_shape ? call_with_dims(c, OP_UNIFORM, noise_shape, noise_rank, seed, x->dtype)
                             : call_stateless(c, OP_UNIFORM, nb_shape_op(c, x, NB_I64), seed, x->dtype);
  nb_tensor *keep = nb_greater_equal(c, u, nb_scalar(c, x->dtype, rate));
  nb_tensor *scaled = nb_mul(c, x, nb_scalar(c, x->dtype, 1 / (1 - rate)));
  return kept(c, nb_select(c, keep, scaled, nb_scalar(c, x->dtype, 0)));
}

/* ---- initializers (Keras semantics) ----------------------------------------------------------- */

typedef struct fans {
  double in, out;
} fans;

/* Keras's _compute_fans: a vector is its own fan in and out, a matrix [in, out], and a
   convolution kernel [..., in, out] multiplies both by its receptive field (the product
   of the leading dims). */
static fans compute_fans(int rank, const int64_t *shape) {
  if (rank == 0) return (fans){1, 1};
  if (rank == 1) return (fans){(double)shape[0], (double)shape[0]};
  double field = 1;
  for (int i = 0; i < rank - 2; i++) field *= (double)shape[i];
  return (fans){(double)shape[rank - 2] * field, (double)shape[rank - 1] * field};
}

static bool init_args_ok(nb_ctx *c, const char *name, nb_dtype t, int rank, const int64_t *shape) {
  if (!nbop_live(c)) return false;
  if (!nbcore_is_float(t)) {
    nb_set_error(c, NB_DTYPE, "%s: dtype %s is not supported; expected float32 or float64", name,
                 (unsigned)t <= NB_BOOL ? nb_dtype_name(t) : "(invalid)");
    return false;
  }
  if (rank < 0 || rank > NB_MAX_RANK || (rank > 0 && !shape)) {
    nb_set_error(c, NB_INVALID, "%s: rank %d is not in [0, %d] or shape is NULL", name, rank, NB_MAX_RANK);
    return false;
  }
  for (int i = 0; i < rank; i++)
    if (shape[i] < 0) {
      nb_set_error(c, NB_INVALID, "%s: shape %s has a negative dimension", name, nbop_sstr(rank, shape));
      return false;
    }
  return true;
}

static nb_tensor *filled(nb_ctx *c, const char *name, nb_dtype t, int rank, const int64_t *shape, double v) {
  if (!init_args_ok(c, name, t, rank, shape)) return NULL;
  nb_scope_begin(c);
  return kept(c, nb_fill(c, shape, rank, nb_scalar(c, t, v)));
}

nb_tensor *nb_init_zeros(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape) {
  return filled(c, "zeros", t, rank, shape, 0);
}

nb_tensor *nb_init_ones(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape) {
  return filled(c, "ones", t, rank, shape, 1);
}

/* r * scale + shift, as TF's stateless_random_uniform(minval, maxval) and
   stateless_truncated_normal(mean, stddev) apply them; ends the scope the caller began
   for r, keeping only the result. */
static nb_tensor *affine(nb_ctx *c, nb_tensor *r, double scale, double shift) {
  nb_dtype t = r ? r->dtype : NB_F32;
  return kept(c, nb_add(c, nb_mul(c, r, nb_scalar(c, t, scale)), nb_scalar(c, t, shift)));
}

nb_tensor *nb_init_glorot_uniform(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape, const int64_t seed[2]) {
  if (!init_args_ok(c, "glorot_uniform", t, rank, shape)) return NULL;
  fans f = compute_fans(rank, shape);
  double fan_avg = (f.in + f.out) / 2, limit = sqrt(3.0 / (fan_avg > 1 ? fan_avg : 1));
  nb_scope_begin(c);
  return affine(c, nb_stateless_random_uniform(c, shape, rank, seed, t), 2 * limit, -limit);
}

nb_tensor *nb_init_truncated_normal(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape, double mean, double stddev,
                                    const int64_t seed[2]) {
  if (!init_args_ok(c, "truncated_normal", t, rank, shape)) return NULL;
  nb_scope_begin(c);
  return affine(c, nb_stateless_truncated_normal(c, shape, rank, seed, t), stddev, mean);
}

/* VarianceScaling(scale 2, fan_in, truncated_normal): the truncation at 2 stddev leaves a
   standard deviation of .87962566103423978, which the stddev divides out. */
nb_tensor *nb_init_he_normal(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape, const int64_t seed[2]) {
  if (!init_args_ok(c, "he_normal", t, rank, shape)) return NULL;
  fans f = compute_fans(rank, shape);
  double stddev = sqrt(2.0 / (f.in > 1 ? f.in : 1)) / .87962566103423978;
  return nb_init_truncated_normal(c, t, rank, shape, 0, stddev, seed);
}
