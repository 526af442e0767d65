/* Batch normalization: TF's FusedBatchNormV3 and FusedBatchNormGradV3 with the values of
   TF's CPU kernels. x is viewed as [outer, channels, inner] (NHWC: inner 1; NCHW: outer
   N, inner H*W), so one set of loops serves every data_format. Per-channel sums run in
   double over fixed blocks of x, each block's partial kept apart and the blocks added in
   order, so the result does not depend on the thread count. A forward pass reads x
   twice (mean, then squared deviations) and writes y once; the gradient reads dy and x
   once for its sums and once more to write dx. */
#include "op.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Attr slots (T is inferred from x, as in every op). */
enum { BN_U, BN_EPSILON, BN_AVG_FACTOR, BN_DATA_FORMAT, BN_IS_TRAINING };
enum { BNG_U, BNG_EPSILON, BNG_DATA_FORMAT, BNG_IS_TRAINING };

/* Elements per block of the sums: a block is one piece of parallel work. */
#define BLOCK_ELEMS 16384

/* The passes walk "units": with channels last a row of x (channels elements), with
   channels first one channel's inner elements of one row (unit u has channel
   u % channels). Blocks of units are the parallel work of the sums. */
typedef struct bn_plan {
  int64_t outer, channels, inner; /* x as [outer, channels, inner] */
  int64_t count;                  /* elements per channel: outer * inner */
  int64_t units, units_per_block, nblocks;
} bn_plan;
_Static_assert(sizeof(bn_plan) <= NBOP_SCRATCH_BYTES, "bn_plan must fit the scratch");

/* ---- layout -------------------------------------------------------------------------- */

typedef struct layout {
  int rank; /* the rank data_format implies */
  int channel_axis;
} layout;

/* data_format's choices (its attr spec's) and the layout of each. */
static const char *const formats[] = {"NHWC", "NCHW", "NDHWC", "NCDHW", NULL};
static const layout layouts[] = {{4, 3}, {4, 1}, {5, 4}, {5, 1}};

static layout layout_of(const nbop_kargs *k, int format_slot) { return layouts[nbop_kchoice(k, format_slot)]; }

/* x (input xi) has the rank data_format implies, where known. */
static nb_code check_format_rank(nbop_kargs *k, int format_slot, int xi) {
  const nb_tensor *x = k->in[xi];
  layout l = layout_of(k, format_slot);
  if (x->rank >= 0 && x->rank != l.rank)
    return nbop_kfail(k, NB_SHAPE, "x must be %d-dimensional for data_format %s, got shape %s", l.rank,
                      k->attr[format_slot].s, nbop_tstr(x));
  return NB_OK;
}

static void make_plan(bn_plan *p, const nb_tensor *x, const layout *l) {
  p->outer = p->inner = 1;
  for (int d = 0; d < l->channel_axis; d++) p->outer *= x->shape[d];
  for (int d = l->channel_axis + 1; d < x->rank; d++) p->inner *= x->shape[d];
  p->channels = x->shape[l->channel_axis];
  p->count = p->outer * p->inner;
  bool last = p->inner == 1;
  int64_t unit_len = last ? p->channels : p->inner;
  p->units = p->channels == 0 ? 0 : last ? p->outer : p->outer * p->channels; /* no channels: x is empty */
  p->units_per_block = unit_len >= BLOCK_ELEMS || unit_len == 0 ? 1 : BLOCK_ELEMS / unit_len;
  p->nblocks = (p->units + p->units_per_block - 1) / p->units_per_block;
}

/* ---- input checks ------------------------------------------------------------------ */

/* x is float; inputs first..nin-1 have x's dtype (U equals T here: float32 with float32,
   and nabla's float64 with float64; an explicit U must name scale's, its spec says). */
static nb_code check_dtypes(nbop_kargs *k, const char *const *names, int first) {
  const nb_tensor *x = k->in[first - 1];
  if (!nbcore_is_float(x->dtype))
    return nbop_kfail(k, NB_DTYPE, "%s has dtype %s; supported: float32, float64", names[first - 1],
                      nb_dtype_name(x->dtype));
  for (int i = 0; i < first - 1; i++)
    if (k->in[i]->dtype != x->dtype)
      return nbop_kfail(k, NB_DTYPE, "%s has dtype %s, %s has %s; they must match", names[i],
                        nb_dtype_name(k->in[i]->dtype), names[first - 1], nb_dtype_name(x->dtype));
  for (int i = first; i < k->nin; i++)
    if (k->in[i]->dtype != x->dtype)
      return nbop_kfail(k, NB_DTYPE, "%s has dtype %s; U must equal x's dtype %s here", names[i],
                        nb_dtype_name(k->in[i]->dtype), nb_dtype_name(x->dtype));
  return NB_OK;
}

/* The checks of both ops: dtypes, an epsilon >= 0, x's rank for data_format, the
   statistics inputs (first..4) 1-D, where ranks are known. */
static nb_code check_common(nbop_kargs *k, const char *const *names, int xi, int eps_slot, int format_slot) {
  nb_code code = check_dtypes(k, names, xi + 1);
  if (code) return code;
  if (!(k->attr[eps_slot].f >= 0))
    return nbop_kfail(k, NB_INVALID, "epsilon must be >= 0, got %g", k->attr[eps_slot].f);
  code = check_format_rank(k, format_slot, xi);
  for (int i = xi + 1; i < 5 && !code; i++) code = nbop_kcheck_rank(k, i, 1, 1, names[i]);
  return code;
}

/* Input i (1-D) has length channels when need_channels; why prefixes the message. */
static nb_code check_vector(nbop_kargs *k, int i, const char *name, int64_t channels, bool need_channels,
                            const char *why) {
  const nb_tensor *v = k->in[i], *x = k->in[0];
  if (need_channels && v->shape[0] != channels)
    return nbop_kfail(k, NB_SHAPE,
                      "%s%s must have the same number of elements as the channels of x, got %lld and %lld "
                      "(x %s)",
                      why, name, (long long)v->shape[0], (long long)channels, nbop_tstr(x));
  return NB_OK;
}

static void set_vector_outputs(nbop_kargs *k, int first, int last, nb_dtype t, int64_t len) {
  for (int o = first; o <= last; o++) nbop_meta_set(&k->out[o], t, 1, (const int64_t[]){len});
}

/* ---- FusedBatchNormV3: checks and output shapes ------------------------------------------ */

static const char *const bn_names[] = {"x", "scale", "offset", "mean", "variance"};

static nb_code bn_validate(nbop_kargs *k) { return check_common(k, bn_names, 0, BN_EPSILON, BN_DATA_FORMAT); }

static nb_code bn_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  layout l = layout_of(k, BN_DATA_FORMAT);
  nb_code code = NB_OK;
  int64_t channels = x->shape[l.channel_axis];
  bool training = k->attr[BN_IS_TRAINING].b, stats_used = !training || k->attr[BN_AVG_FACTOR].f != 1;
  const char *why = training ? "When exponential_avg_factor != 1, " : "When is_training=false, ";
  for (int i = 1; i < 5 && !code; i++)
    code = check_vector(k, i, bn_names[i], channels, i < 3 || stats_used, i < 3 ? "" : why);
  if (code) return code;
  nbop_meta_like(&k->out[0], x);
  set_vector_outputs(k, 1, 4, x->dtype, channels);
  nbop_meta_set(&k->out[5], x->dtype, 0, NULL);
  make_plan((bn_plan *)k->scratch, x, &l);
  return NB_OK;
}

/* ---- loops ------------------------------------------------------------------------------
   Every pass walks contiguous runs of x: with channels last a whole block of units (rows)
   is one run whose element j has channel j % channels; with channels first each unit is
   a run of inner elements of one channel. A run is processed in chunks of w
   lanes (w a multiple of the channels when they are last, so lane l always holds channel
   l % channels), which keeps the loops free of index arithmetic and lets them vectorize;
   the lanes fold into the per-channel sums at the end of the run. */

#define LANES 256   /* lanes of a channels-last run, when the channels fit */
#define RUN_LANES 8 /* lanes of a channels-first run */

/* One pass over x (and dy): per-block sums into part1 (and part2), and the elementwise
   out = alpha[c] u + beta[c] v + gamma[c] (v optional). */
typedef struct bn_job {
  const bn_plan *p;
  bool f32;
  const void *x, *dy;
  const double *center;  /* per channel; NULL: plain sums of x */
  double *part1, *part2; /* [nblocks][channels]; part2 only with dy */
  const void *u, *v;
  const double *alpha, *beta, *gamma;
  void *out;
} bn_job;

/* Lane width of a channels-last run: a multiple of ch, at least LANES when ch is smaller. */
static int64_t last_lanes(int64_t ch) { return ch >= LANES ? ch : ch * (LANES / ch); }

/* v[l % ch] tiled over w lanes (or v itself when w == ch). */
static const double *tile(const double *v, int64_t ch, int64_t w, double *buf) {
  if (!v || w == ch) return v;
  for (int64_t l = 0; l < w; l++) buf[l] = v[l % ch];
  return buf;
}

/* Adds w lanes into their channels (l % ch), or into one channel c when c >= 0. */
static void fold(const double *lane, int64_t w, int64_t ch, int64_t c, double *sum) {
  for (int64_t l = 0; l < w; l++) sum[c >= 0 ? c : l % ch] += lane[l];
}

#define DEFINE_LOOPS(T)                                                                                                \
  /* lane[l] += x (m NULL) or (x - m[l])^2 over a run of len elements */                                               \
  static void run_moment_##T(const T *x, const double *m, int64_t len, int64_t w, double *lane) {                      \
    int64_t j = 0;                                                                                                     \
    if (!m) {                                                                                                          \
      for (; j + w <= len; j += w)                                                                                     \
        for (int64_t l = 0; l < w; l++) lane[l] += x[j + l];                                                           \
      for (int64_t l = 0; j + l < len; l++) lane[l] += x[j + l];                                                       \
      return;                                                                                                          \
    }                                                                                                                  \
    for (; j + w <= len; j += w)                                                                                       \
      for (int64_t l = 0; l < w; l++) {                                                                                \
        double d = x[j + l] - m[l];                                                                                    \
        lane[l] += d * d;                                                                                              \
      }                                                                                                                \
    for (int64_t l = 0; j + l < len; l++) {                                                                            \
      double d = x[j + l] - m[l];                                                                                      \
      lane[l] += d * d;                                                                                                \
    }                                                                                                                  \
  }                                                                                                                    \
  /* l1[l] += dy, l2[l] += dy (x - m[l]) over a run */                                                                 \
  static void run_grad_##T(const T *x, const T *dy, const double *m, int64_t len, int64_t w, double *l1, double *l2) { \
    int64_t j = 0;                                                                                                     \
    for (; j + w <= len; j += w)                                                                                       \
      for (int64_t l = 0; l < w; l++) {                                                                                \
        l1[l] += dy[j + l];                                                                                            \
        l2[l] += dy[j + l] * (x[j + l] - m[l]);                                                                        \
      }                                                                                                                \
    for (int64_t l = 0; j + l < len; l++) {                                                                            \
      l1[l] += dy[j + l];                                                                                              \
      l2[l] += dy[j + l] * (x[j + l] - m[l]);                                                                          \
    }                                                                                                                  \
  }                                                                                                                    \
  /* out = a u + b v + g, lane-wise coefficients (v NULL: no b v) */                                                   \
  static void run_affine_##T(const T *u, const T *v, const double *a, const double *b, const double *g, int64_t len,   \
                             int64_t w, T *out) {                                                                      \
    for (int64_t j = 0; j < len; j += w) {                                                                             \
      int64_t n = len - j < w ? len - j : w;                                                                           \
      if (v)                                                                                                           \
        for (int64_t l = 0; l < n; l++) out[j + l] = (T)(a[l] * u[j + l] + b[l] * v[j + l] + g[l]);                    \
      else                                                                                                             \
        for (int64_t l = 0; l < n; l++) out[j + l] = (T)(a[l] * u[j + l] + g[l]);                                      \
    }                                                                                                                  \
  }                                                                                                                    \
  /* out = a u + b v + g with one channel's coefficients (v NULL: no b v) */                                           \
  static void run_affine1_##T(const T *u, const T *v, double a, double b, double g, int64_t len, T *out) {             \
    if (v)                                                                                                             \
      for (int64_t i = 0; i < len; i++) out[i] = (T)(a * u[i] + b * v[i] + g);                                         \
    else                                                                                                               \
      for (int64_t i = 0; i < len; i++) out[i] = (T)(a * u[i] + g);                                                    \
  }                                                                                                                    \
  /* Block b's sums into part1 (and part2 with dy). */                                                                 \
  static void sums_##T(const bn_job *j, int64_t b) {                                                                   \
    const bn_plan *p = j->p;                                                                                           \
    int64_t ch = p->channels, inner = p->inner, lo = b * p->units_per_block;                                           \
    int64_t hi = lo + p->units_per_block < p->units ? lo + p->units_per_block : p->units;                              \
    double *s1 = j->part1 + b * ch, *s2 = j->dy ? j->part2 + b * ch : NULL;                                            \
    double l1[LANES], l2[LANES], mbuf[LANES];                                                                          \
    memset(s1, 0, (size_t)ch * sizeof *s1);                                                                            \
    if (s2) memset(s2, 0, (size_t)ch * sizeof *s2);                                                                    \
    if (inner == 1) {                                                                                                  \
      int64_t w = last_lanes(ch), len = (hi - lo) * ch;                                                                \
      double *a1 = w == ch ? s1 : l1, *a2 = w == ch ? s2 : l2;                                                         \
      const double *m = tile(j->center, ch, w, mbuf);                                                                  \
      const T *x = (const T *)j->x + lo * ch;                                                                          \
      if (w != ch) {                                                                                                   \
        memset(l1, 0, (size_t)w * sizeof *l1);                                                                         \
        memset(l2, 0, (size_t)w * sizeof *l2);                                                                         \
      }                                                                                                                \
      if (j->dy)                                                                                                       \
        run_grad_##T(x, (const T *)j->dy + lo * ch, m, len, w, a1, a2);                                                \
      else                                                                                                             \
        run_moment_##T(x, m, len, w, a1);                                                                              \
      if (w != ch) {                                                                                                   \
        fold(l1, w, ch, -1, s1);                                                                                       \
        if (s2) fold(l2, w, ch, -1, s2);                                                                               \
      }                                                                                                                \
      return;                                                                                                          \
    }                                                                                                                  \
    for (int64_t u = lo; u < hi; u++) {                                                                                \
      int64_t c = u % ch;                                                                                              \
      const T *x = (const T *)j->x + u * inner;                                                                        \
      for (int l = 0; l < RUN_LANES; l++) l1[l] = l2[l] = 0, mbuf[l] = j->center ? j->center[c] : 0;                   \
      if (j->dy)                                                                                                       \
        run_grad_##T(x, (const T *)j->dy + u * inner, mbuf, inner, RUN_LANES, l1, l2);                                 \
      else                                                                                                             \
        run_moment_##T(x, j->center ? mbuf : NULL, inner, RUN_LANES, l1);                                              \
      fold(l1, RUN_LANES, ch, c, s1);                                                                                  \
      if (s2) fold(l2, RUN_LANES, ch, c, s2);                                                                          \
    }                                                                                                                  \
  }                                                                                                                    \
  /* Units lo..hi-1 of out = alpha u + beta v + gamma. */                                                              \
  static void affine_##T(const bn_job *j, int64_t lo, int64_t hi) {                                                    \
    const bn_plan *p = j->p;                                                                                           \
    int64_t ch = p->channels, inner = p->inner;                                                                        \
    const T *u = (const T *)j->u, *v = (const T *)j->v;                                                                \
    T *out = (T *)j->out;                                                                                              \
    if (inner == 1) {                                                                                                  \
      double abuf[LANES], bbuf[LANES], gbuf[LANES];                                                                    \
      int64_t w = last_lanes(ch), off = lo * ch;                                                                       \
      run_affine_##T(u + off, v ? v + off : NULL, tile(j->alpha, ch, w, abuf), tile(j->beta, ch, w, bbuf),             \
                     tile(j->gamma, ch, w, gbuf), (hi - lo) * ch, w, out + off);                                       \
      return;                                                                                                          \
    }                                                                                                                  \
    for (int64_t i = lo; i < hi; i++) {                                                                                \
      int64_t c = i % ch, off = i * inner;                                                                             \
      run_affine1_##T(u + off, v ? v + off : NULL, j->alpha[c], j->beta ? j->beta[c] : 0, j->gamma[c], inner,          \
                      out + off);                                                                                      \
    }                                                                                                                  \
  }

DEFINE_LOOPS(float)
DEFINE_LOOPS(double)

static void sums_range(void *arg, int64_t lo, int64_t hi) {
  const bn_job *j = arg;
  for (int64_t b = lo; b < hi; b++) j->f32 ? sums_float(j, b) : sums_double(j, b);
}

static void affine_range(void *arg, int64_t lo, int64_t hi) {
  const bn_job *j = arg;
  j->f32 ? affine_float(j, lo, hi) : affine_double(j, lo, hi);
}

/* Threads for one pass over x. */
static int pass_threads(const nbop_kargs *k, const bn_plan *p) { return nbop_kthreads(k, p->count * p->channels); }

/* Per-channel totals of the block partials, added in block order. */
static void add_blocks(const bn_plan *p, const double *part, double *total) {
  for (int64_t c = 0; c < p->channels; c++) total[c] = 0;
  for (int64_t b = 0; b < p->nblocks; b++)
    for (int64_t c = 0; c < p->channels; c++) total[c] += part[b * p->channels + c];
}

/* j's sums over every block, totalled into sum1 (and sum2 with dy). */
static void channel_sums(const nbop_kargs *k, bn_job *j, double *sum1, double *sum2) {
  nbop_parallel_range(pass_threads(k, j->p), j->p->nblocks, sums_range, j);
  add_blocks(j->p, j->part1, sum1);
  if (j->dy) add_blocks(j->p, j->part2, sum2);
}

static void affine_pass(const nbop_kargs *k, bn_job *j) {
  nbop_parallel_range(pass_threads(k, j->p), j->p->units, affine_range, j);
}

/* Per-channel work arrays: n arrays of channels doubles, then two [nblocks][channels]
   partial tables; NULL when out of memory. */
static double *work_alloc(const bn_plan *p, int n, double **parts) {
  size_t ch = (size_t)p->channels, tab = (size_t)p->nblocks * ch;
  double *w = malloc(((size_t)n * ch + 2 * tab) * sizeof *w + 1); /* + 1: never malloc(0) */
  if (w) {
    parts[0] = w + (size_t)n * ch;
    parts[1] = parts[0] + tab;
  }
  return w;
}

static void read_vector(const nb_tensor *t, double *v, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    v[i] = t->dtype == NB_F32 ? ((const float *)nbcore_tdata(t))[i] : ((const double *)nbcore_tdata(t))[i];
}

static void write_vector(nb_tensor *t, const double *v, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (t->dtype == NB_F32)
      ((float *)nbcore_tdata(t))[i] = (float)v[i];
    else
      ((double *)nbcore_tdata(t))[i] = v[i];
  }
}

/* ---- FusedBatchNormV3: kernel -------------------------------------------------------------- */

/* Work arrays of the forward kernel. */
enum { W_SCALE, W_OFFSET, W_MEAN, W_VAR, W_A, W_B, W_RUN, W_COUNT };

/* Training: batch mean and biased variance (two passes); batch_mean/batch_variance are
   the running averages (1 - f) old + f batch, the variance Bessel-corrected by
   n / max(n - 1, 1); reserve_space_1/2 keep the batch mean and biased variance for the
   gradient. Empty x gives NaN statistics (0/0), as TF sets them. */
static void batch_moments(const nbop_kargs *k, bn_job *j, double **w) {
  const bn_plan *p = j->p;
  channel_sums(k, j, w[W_MEAN], NULL);
  for (int64_t c = 0; c < p->channels; c++) w[W_MEAN][c] /= (double)p->count;
  j->center = w[W_MEAN];
  channel_sums(k, j, w[W_VAR], NULL);
  for (int64_t c = 0; c < p->channels; c++) w[W_VAR][c] /= (double)p->count;
}

static void running_outputs(nbop_kargs *k, double **w) {
  const bn_plan *p = (const bn_plan *)k->scratch;
  double f = k->attr[BN_AVG_FACTOR].f, n = (double)p->count, bessel = n / (n > 1 ? n - 1 : 1);
  int64_t ch = p->channels;
  bool blend = f != 1;
  if (blend) read_vector(k->in[3], w[W_RUN], ch);
  for (int64_t c = 0; c < ch; c++) w[W_RUN][c] = (blend ? (1 - f) * w[W_RUN][c] : 0) + f * w[W_MEAN][c];
  write_vector(k->res[1], w[W_RUN], ch);
  if (blend) read_vector(k->in[4], w[W_RUN], ch);
  for (int64_t c = 0; c < ch; c++) w[W_RUN][c] = (blend ? (1 - f) * w[W_RUN][c] : 0) + f * bessel * w[W_VAR][c];
  write_vector(k->res[2], w[W_RUN], ch);
}

static nb_code bn_kernel(nbop_kargs *k) {
  const bn_plan *p = (const bn_plan *)k->scratch;
  const nb_tensor *x = k->in[0];
  int64_t ch = p->channels;
  double *parts[2], *w[W_COUNT];
  double *mem = work_alloc(p, W_COUNT, parts);
  if (!mem) return nbop_kfail(k, NB_NOMEM, "out of memory for the per-channel sums (x %s)", nbop_tstr(x));
  for (int i = 0; i < W_COUNT; i++) w[i] = mem + (size_t)i * (size_t)ch;
  read_vector(k->in[1], w[W_SCALE], ch);
  read_vector(k->in[2], w[W_OFFSET], ch);
  bn_job j = {.p = p, .f32 = x->dtype == NB_F32, .x = nbcore_tdata(x), .part1 = parts[0], .part2 = parts[1]};
  bool training = k->attr[BN_IS_TRAINING].b;
  if (training) {
    batch_moments(k, &j, w);
    running_outputs(k, w);
  } else {
    read_vector(k->in[3], w[W_MEAN], ch);
    read_vector(k->in[4], w[W_VAR], ch);
    /* an empty batch has NaN statistics in both modes, as TF sets them */
    for (int64_t c = 0; c < ch && x->size == 0; c++) w[W_RUN][c] = NAN;
    write_vector(k->res[1], x->size ? w[W_MEAN] : w[W_RUN], ch);
    write_vector(k->res[2], x->size ? w[W_VAR] : w[W_RUN], ch);
  }
  /* reserve_space_1/2: the statistics y was normalized with, which the gradient reads */
  write_vector(k->res[3], w[W_MEAN], ch);
  write_vector(k->res[4], w[W_VAR], ch);
  write_vector(k->res[5], (const double[]){0}, 1);
  /* y = (x - mean) scale / sqrt(var + eps) + offset = a x + b */
  double eps = k->attr[BN_EPSILON].f;
  for (int64_t c = 0; c < ch; c++) {
    w[W_A][c] = w[W_SCALE][c] / sqrt(w[W_VAR][c] + eps);
    w[W_B][c] = w[W_OFFSET][c] - w[W_MEAN][c] * w[W_A][c];
  }
  j.u = j.x;
  j.alpha = w[W_A];
  j.gamma = w[W_B];
  j.out = nbcore_tdata(k->res[0]);
  affine_pass(k, &j);
  free(mem);
  return NB_OK;
}

/* ---- FusedBatchNormGradV3 ------------------------------------------------------------------ */

static const char *const bng_names[] = {"y_backprop",     "x", "scale", "reserve_space_1", "reserve_space_2",
                                        "reserve_space_3"};

/* y_backprop has x's shape where both are known. */
static nb_code bng_validate(nbop_kargs *k) {
  const nb_tensor *dy = k->in[0], *x = k->in[1];
  nb_code code = check_common(k, bng_names, 1, BNG_EPSILON, BNG_DATA_FORMAT);
  if (!code && !nbop_shapes_compatible(dy, x))
    return nbop_kfail(k, NB_SHAPE,
                      "x and y_backprop must have same shape, but x has shape %s and y_backprop has "
                      "shape %s",
                      nbop_tstr(x), nbop_tstr(dy));
  return code;
}

static nb_code bng_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[1];
  layout l = layout_of(k, BNG_DATA_FORMAT);
  nb_code code = NB_OK;
  int64_t channels = x->shape[l.channel_axis];
  for (int i = 2; i < 5 && !code; i++) code = check_vector(k, i, bng_names[i], channels, true, "");
  if (code) return code;
  nbop_meta_like(&k->out[0], x);
  set_vector_outputs(k, 1, 2, x->dtype, channels);
  set_vector_outputs(k, 3, 4, x->dtype, 0);
  /* the plan views x (input 1), which validate gave the rank of */
  make_plan((bn_plan *)k->scratch, x, &l);
  return NB_OK;
}

enum { G_SCALE, G_MEAN, G_VAR, G_SUM_DY, G_SUM_DYXC, G_ALPHA, G_BETA, G_GAMMA, G_COUNT };

/* With r = 1/sqrt(var + eps), xc = x - mean, A = sum dy, B = sum dy xc per channel:
   scale_backprop = r B, offset_backprop = A, and x_backprop
     training:  scale r (dy - A/n - xc r^2 B/n) = alpha dy + beta x + gamma
     inference: scale r dy
   (the training form differentiates through the batch mean and variance too). */
static nb_code bng_kernel(nbop_kargs *k) {
  const bn_plan *p = (const bn_plan *)k->scratch;
  const nb_tensor *x = k->in[1];
  int64_t ch = p->channels;
  double *parts[2], *w[G_COUNT];
  double *mem = work_alloc(p, G_COUNT, parts);
  if (!mem) return nbop_kfail(k, NB_NOMEM, "out of memory for the per-channel sums (x %s)", nbop_tstr(x));
  for (int i = 0; i < G_COUNT; i++) w[i] = mem + (size_t)i * (size_t)ch;
  read_vector(k->in[2], w[G_SCALE], ch);
  read_vector(k->in[3], w[G_MEAN], ch);
  read_vector(k->in[4], w[G_VAR], ch);
  bn_job j = {.p = p,
              .f32 = x->dtype == NB_F32,
              .x = nbcore_tdata(x),
              .dy = nbcore_tdata(k->in[0]),
              .center = w[G_MEAN],
              .part1 = parts[0],
              .part2 = parts[1]};
  channel_sums(k, &j, w[G_SUM_DY], w[G_SUM_DYXC]);
  double eps = k->attr[BNG_EPSILON].f, n = (double)p->count;
  bool training = k->attr[BNG_IS_TRAINING].b;
  for (int64_t c = 0; c < ch; c++) {
    double r = 1 / sqrt(w[G_VAR][c] + eps), a = w[G_SUM_DY][c], b = w[G_SUM_DYXC][c];
    w[G_ALPHA][c] = w[G_SCALE][c] * r;
    w[G_BETA][c] = training ? -w[G_ALPHA][c] * r * r * b / n : 0;
    w[G_GAMMA][c] = training ? -w[G_ALPHA][c] * a / n - w[G_BETA][c] * w[G_MEAN][c] : 0;
    w[G_SUM_DYXC][c] = r * b;
  }
  write_vector(k->res[1], w[G_SUM_DYXC], ch);
  write_vector(k->res[2], w[G_SUM_DY], ch);
  j.u = j.dy;
  j.v = training ? j.x : NULL;
  j.alpha = w[G_ALPHA];
  j.beta = w[G_BETA];
  j.gamma = w[G_GAMMA];
  j.out = nbcore_tdata(k->res[0]);
  affine_pass(k, &j);
  free(mem);
  return NB_OK;
}

/* ---- the table ---------------------------------------------------------------------------- */

#define U_ATTR \
  { "U", NB_ATTR_TYPE, {.type = NBOP_TYPE_UNSET}, false }
#define EPSILON_ATTR \
  { "epsilon", NB_ATTR_FLOAT, {.f = 0.0001}, false }
#define FORMAT_ATTR \
  { "data_format", NB_ATTR_STR, {.s = "NHWC"}, false }
/* U (slot U_SLOT) names scale's dtype (input SCALE), and with it x's */
#define BN_CHECKS(U_SLOT, SCALE, FORMAT_SLOT) \
  .checks = {[U_SLOT] = {.types = NBOP_M_FLOAT, .of_input = 1 + (SCALE)}, [FORMAT_SLOT] = {.choices = formats}}
#define TRAINING_ATTR \
  { "is_training", NB_ATTR_BOOL, {.b = true}, false }

enum { OP_FUSED_BATCH_NORM_V3, OP_FUSED_BATCH_NORM_GRAD_V3, OP_COUNT };

static nbop_def norm_ops[OP_COUNT] = {
    /* the gradient reads x, scale, mean and variance (inference) and the reserve spaces */
    [OP_FUSED_BATCH_NORM_V3] = {.name = "FusedBatchNormV3",
                                .nin = 5,
                                .nout = 6,
                                .alias = -1,
                                .nattrs = 5,
                                .attrs = {U_ATTR,
                                          EPSILON_ATTR,
                                          {"exponential_avg_factor", NB_ATTR_FLOAT, {.f = 1}, false},
                                          FORMAT_ATTR,
                                          TRAINING_ATTR},
                                BN_CHECKS(BN_U, 1, BN_DATA_FORMAT),
                                .validate = bn_validate,
                                .infer = bn_infer,
                                .kernel = bn_kernel},
    /* its gradient recomputes everything from y_backprop, x, scale and the statistics */
    [OP_FUSED_BATCH_NORM_GRAD_V3] = {.name = "FusedBatchNormGradV3",
                                     .nin = 6,
                                     .nout = 5,
                                     .alias = -1,
                                     .t_input = 1,
                                     .nattrs = 4,
                                     .attrs = {U_ATTR, EPSILON_ATTR, FORMAT_ATTR, TRAINING_ATTR},
                                     BN_CHECKS(BNG_U, 2, BNG_DATA_FORMAT),
                                     .validate = bng_validate,
                                     .infer = bng_infer,
                                     .kernel = bng_kernel},
};

nbop_family nbop_norm_family(void) { return (nbop_family){norm_ops, OP_COUNT}; }

/* ---- wrappers ------------------------------------------------------------------------------- */

/* An empty vector of x's dtype, for the statistics training mode does not read. */
static nb_tensor *empty_like_dtype(nb_ctx *c, nb_tensor *x) {
  return nbop_live(c) && x ? nb_tensor_from(c, x->dtype, 1, (const int64_t[]){0}, NULL) : NULL;
}

nb_code nb_fused_batch_norm(nb_ctx *c, nb_tensor *x, nb_tensor *scale, nb_tensor *offset, nb_tensor *mean,
                            nb_tensor *variance, double epsilon, double exponential_avg_factor, const char *data_format,
                            bool is_training, nb_tensor **out) {
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&norm_ops[OP_FUSED_BATCH_NORM_V3], a);
  a[BN_EPSILON].f = epsilon;
  a[BN_AVG_FACTOR].f = exponential_avg_factor;
  if (data_format) a[BN_DATA_FORMAT].s = data_format;
  a[BN_IS_TRAINING].b = is_training;
  nb_tensor *in[5] = {x, scale, offset, mean ? mean : empty_like_dtype(c, x),
                      variance ? variance : empty_like_dtype(c, x)};
  nb_code code = nbop_dispatch(c, &norm_ops[OP_FUSED_BATCH_NORM_V3], in, 5, a, out, 6);
  /* the placeholders are this call's own: release them now, not at the scope's end */
  if (!mean) nb_tensor_free(in[3]);
  if (!variance) nb_tensor_free(in[4]);
  return code;
}

nb_code nb_fused_batch_norm_grad(nb_ctx *c, nb_tensor *y_backprop, nb_tensor *x, nb_tensor *scale,
                                 nb_tensor *reserve_space_1, nb_tensor *reserve_space_2, nb_tensor *reserve_space_3,
                                 double epsilon, const char *data_format, bool is_training, nb_tensor **out) {
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&norm_ops[OP_FUSED_BATCH_NORM_GRAD_V3], a);
  a[BNG_EPSILON].f = epsilon;
  if (data_format) a[BNG_DATA_FORMAT].s = data_format;
  a[BNG_IS_TRAINING].b = is_training;
  nb_tensor *in[6] = {y_backprop, x, scale, reserve_space_1, reserve_space_2, reserve_space_3};
  return nbop_dispatch(c, &norm_ops[OP_FUSED_BATCH_NORM_GRAD_V3], in, 6, a, out, 5);
}
