/* Gradients of FusedBatchNormV3 and FusedBatchNormGradV3 (TF's nn_grad.py:
   _FusedBatchNormV3Grad, _FusedBatchNormGradGrad). Both give the full derivative of
   every output with respect to every float input: TF's gradient reads only y's gradient
   and returns none for mean and variance, which is the same whenever only y is used,
   while here batch_mean, batch_variance and the reserve spaces (which the gradient op
   reads back) are differentiable too, so the gradient op's own gradient can treat its
   statistic inputs as independent, and second order is exact.

   Notation, per channel (sums over every other axis, n elements each, B(v) broadcasts a
   channel vector against x): r = 1/sqrt(var + eps), xc = x - B(mean). */
#include "grad.h"

#include <string.h>

/* The layout facts the gradients need; data_format ends in C for channels last. */
typedef struct bn_axes {
  int rank, channel_axis, naxes;
  int axes[NB_MAX_RANK]; /* every axis but the channel axis */
} bn_axes;

static bn_axes axes_of(const nb_fwd_op *op, nb_tensor *x) {
  const char *f = nb_fwd_attr_str(op, "data_format");
  size_t n = f ? strlen(f) : 0; /* the ops refuse any other than their four: never 0 */
  bn_axes a = {.rank = nb_rank(x)};
  a.channel_axis = n > 0 && f[n - 1] == 'C' ? a.rank - 1 : 1;
  for (int d = 0; d < a.rank; d++)
    if (d != a.channel_axis) a.axes[a.naxes++] = d;
  return a;
}

/* v ([C]) shaped to broadcast against x: [C, 1, ...] when channels come first. */
static nb_tensor *bcast(nb_ctx *c, const bn_axes *a, nb_tensor *v) {
  if (!v || a->channel_axis == a->rank - 1) return v;
  int64_t shape[NB_MAX_RANK] = {-1};
  for (int d = 1; d < a->rank - 1; d++) shape[d] = 1;
  return nb_reshape(c, v, shape, a->rank - 1);
}

static nb_tensor *channel_sum(nb_ctx *c, const bn_axes *a, nb_tensor *t) {
  return nb_sum(c, t, a->axes, a->naxes, false);
}

/* Elements per channel, n = size(x) / size(scale), as a scalar of x's dtype. */
static nb_tensor *per_channel_count(nb_ctx *c, nb_tensor *x, nb_tensor *scale) {
  if (nbg_static(x) && nbg_static(scale)) {
    int64_t ch = nb_shape(scale)[0], size = 1;
    for (int d = 0; d < nb_rank(x); d++) size *= nb_shape(x)[d];
    return nbg_scalar_like(c, x, ch ? (double)size / (double)ch : 0);
  }
  nb_tensor *sx = nb_prod(c, nb_shape_op(c, x, NB_I64), NULL, 0, false);
  nb_tensor *ss = nb_prod(c, nb_shape_op(c, scale, NB_I64), NULL, 0, false);
  return nb_real_div(c, nb_cast(c, sx, nb_dtype_of(x)), nb_cast(c, ss, nb_dtype_of(x)));
}

/* acc + k t, where a NULL t (no gradient) adds nothing and a NULL acc is 0. */
static nb_tensor *add_scaled(nb_ctx *c, nb_tensor *acc, nb_tensor *k, nb_tensor *t) {
  if (!t) return acc;
  nb_tensor *term = k ? nb_mul(c, k, t) : t;
  return acc ? nb_add(c, acc, term) : term;
}

/* ---- FusedBatchNormV3 ------------------------------------------------------------------- */

/* Training. y's part is FusedBatchNormGradV3. The statistic outputs depend on x through
   the batch mean mu = sum x / n and biased variance s2 = sum xc^2 / n, whose derivatives
   are 1/n and 2 xc / n (sum xc = 0): with g1..g4 the gradients of batch_mean,
   batch_variance, reserve_space_1 and reserve_space_2, f = exponential_avg_factor and
   the Bessel factor k = n / max(n - 1, 1),
     dx += B((f g1 + g3) / n) + xc B(2 (f k g2 + g4) / n),
   and the running inputs get (1 - f) g1 and (1 - f) g2 (nothing when f is 1). */
static void training_statistics_grads(nb_ctx *c, const nb_fwd_op *op, const bn_axes *a, nb_tensor *const *dys,
                                      nb_tensor **dxs) {
  nb_tensor *x = nb_fwd_input(op, 0);
  double f = nb_fwd_attr_float(op, "exponential_avg_factor");
  if (f != 1) {
    dxs[3] = add_scaled(c, NULL, nbg_scalar_like(c, x, 1 - f), dys[1]);
    dxs[4] = add_scaled(c, NULL, nbg_scalar_like(c, x, 1 - f), dys[2]);
  }
  if (!nb_fwd_input_needs_grad(op, 0) || (!dys[1] && !dys[2] && !dys[3] && !dys[4])) return;
  nb_tensor *n = per_channel_count(c, x, nb_fwd_input(op, 1)), *one = nbg_scalar_like(c, x, 1);
  nb_tensor *bessel = nb_real_div(c, n, nb_maximum(c, nb_sub(c, n, one), one));
  nb_tensor *fk = nb_mul(c, nbg_scalar_like(c, x, f), bessel);
  nb_tensor *g_mean = add_scaled(c, add_scaled(c, NULL, nbg_scalar_like(c, x, f), dys[1]), NULL, dys[3]);
  nb_tensor *g_var = add_scaled(c, add_scaled(c, NULL, fk, dys[2]), NULL, dys[4]);
  nb_tensor *xc = nb_sub(c, x, bcast(c, a, nb_fwd_output(op, 3)));
  if (g_mean) dxs[0] = nb_add(c, dxs[0], bcast(c, a, nb_real_div(c, g_mean, n)));
  if (g_var) {
    nb_tensor *two_over_n = nb_real_div(c, nbg_scalar_like(c, x, 2), n);
    dxs[0] = nb_add(c, dxs[0], nb_mul(c, xc, bcast(c, a, nb_mul(c, g_var, two_over_n))));
  }
}

/* Inference: y = B(scale r) xc + offset with the given mean and variance, so
     dmean = -scale r sum dy = -scale r offset_backprop,
     dvariance = -scale r^3 sum dy xc / 2 = -scale r^2 scale_backprop / 2,
   and batch_mean, batch_variance, reserve_space_1/2 pass mean and variance through. */
static void inference_statistics_grads(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *x = nb_fwd_input(op, 0), *scale = nb_fwd_input(op, 1), *var = nb_fwd_input(op, 4);
  nb_tensor *r = nb_rsqrt(c, nb_add(c, var, nbg_scalar_like(c, x, nb_fwd_attr_float(op, "epsilon"))));
  nb_tensor *scale_r = nb_mul(c, scale, r);
  nb_tensor *dmean = nb_mul(c, nb_neg(c, scale_r), dxs[2]);
  nb_tensor *dvar = nb_mul(c, nb_mul(c, scale_r, nb_mul(c, r, nbg_scalar_like(c, x, -0.5))), dxs[1]);
  dxs[3] = add_scaled(c, add_scaled(c, dmean, NULL, dys[1]), NULL, dys[3]);
  dxs[4] = add_scaled(c, add_scaled(c, dvar, NULL, dys[2]), NULL, dys[4]);
}

/* The mean and variance FusedBatchNormV3 normalized with: the batch's (reserve_space_1
   and 2) in training, the given ones in inference. */
static void normalizing_stats(const nb_fwd_op *op, bool training, nb_tensor **mean, nb_tensor **var) {
  *mean = training ? nb_fwd_output(op, 3) : nb_fwd_input(op, 3);
  *var = training ? nb_fwd_output(op, 4) : nb_fwd_input(op, 4);
}

static nb_code fused_batch_norm_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *x = nb_fwd_input(op, 0), *scale = nb_fwd_input(op, 1), *mean, *var;
  bool training = nb_fwd_attr_bool(op, "is_training");
  bn_axes a = axes_of(op, x);
  normalizing_stats(op, training, &mean, &var);
  nb_tensor *dy = dys[0] ? dys[0] : nb_zeros_like(c, x), *g[5] = {0};
  nb_fused_batch_norm_grad(c, dy, x, scale, mean, var, nb_fwd_output(op, 5), nb_fwd_attr_float(op, "epsilon"),
                           nb_fwd_attr_str(op, "data_format"), training, g);
  for (int i = 0; i < 3; i++) dxs[i] = g[i];
  if (training)
    training_statistics_grads(c, op, &a, dys, dxs);
  else
    inference_statistics_grads(c, op, dys, dxs);
  return nb_status(c);
}

/* ---- FusedBatchNormGradV3 ----------------------------------------------------------------
   Its outputs as functions of independent inputs g (y_backprop), x, s (scale), m, v:
     dscale = r B, doffset = A, with A = sum g, B = sum g xc, and
     training:  dx = s r (g - A/n - xc r^2 B/n);  inference: dx = s r g.
   With incoming gradients Gx, Gs, Go and the per-channel sums D = sum Gx g, P = sum Gx,
   Q = sum Gx xc (b, p, q: B, P, Q divided by n), differentiating
   L = sum Gx dx + sum Gs dscale + sum Go doffset term by term gives
     training:  dg = B(s r) (Gx - B(p)) + xc B(Gs r - s r^3 q) + B(Go)
                dx = g B(Gs r - s r^3 q) - Gx B(s r^3 b)
                dm = s r^3 (P b + A q) - Gs r A          (= -sum of dx's xc part)
                ds = r (D - A p) - r^3 B q
                dv = -r^3 (s (D - A p) + Gs B) / 2 + 3 s r^5 B q / 2
     inference: dg = B(s r) Gx + xc B(Gs r) + B(Go),  dx = g B(Gs r),  dm = -Gs r A,
                ds = r D,  dv = -r^3 (s D + Gs B) / 2. */

typedef struct bng_terms {
  nb_tensor *g, *x, *s, *m, *v, *gx, *gs, *go; /* inputs and incoming gradients */
  nb_tensor *r, *xc, *a, *b, *d, *p, *q;       /* b, p, q: means; a, d: sums */
  nb_tensor *sum_b, *sum_p;
} bng_terms;

static void bng_common(nb_ctx *c, const nb_fwd_op *op, const bn_axes *ax, nb_tensor *const *dys, bng_terms *t) {
  t->g = nb_fwd_input(op, 0), t->x = nb_fwd_input(op, 1), t->s = nb_fwd_input(op, 2);
  t->m = nb_fwd_input(op, 3), t->v = nb_fwd_input(op, 4);
  t->gx = dys[0] ? dys[0] : nb_zeros_like(c, t->x);
  t->gs = dys[1] ? dys[1] : nb_zeros_like(c, t->s);
  t->go = dys[2] ? dys[2] : nb_zeros_like(c, t->s);
  t->r = nb_rsqrt(c, nb_add(c, t->v, nbg_scalar_like(c, t->x, nb_fwd_attr_float(op, "epsilon"))));
  t->xc = nb_sub(c, t->x, bcast(c, ax, t->m));
  nb_tensor *n = per_channel_count(c, t->x, t->s);
  t->a = channel_sum(c, ax, t->g);
  t->sum_b = channel_sum(c, ax, nb_mul(c, t->g, t->xc));
  t->d = channel_sum(c, ax, nb_mul(c, t->gx, t->g));
  t->sum_p = channel_sum(c, ax, t->gx);
  t->b = nb_real_div(c, t->sum_b, n);
  t->p = nb_real_div(c, t->sum_p, n);
  t->q = nb_real_div(c, channel_sum(c, ax, nb_mul(c, t->gx, t->xc)), n);
}

static nb_tensor *mul3(nb_ctx *c, nb_tensor *a, nb_tensor *b, nb_tensor *d) { return nb_mul(c, nb_mul(c, a, b), d); }

static void bng_training(nb_ctx *c, const nb_fwd_op *op, const bn_axes *ax, const bng_terms *t, nb_tensor **dxs) {
  nb_tensor *r3 = nb_mul(c, t->r, nb_square(c, t->r)), *sr = nb_mul(c, t->s, t->r), *sr3 = nb_mul(c, t->s, r3);
  nb_tensor *gs_r = nb_mul(c, t->gs, t->r), *coef_xc = nb_sub(c, gs_r, nb_mul(c, sr3, t->q));
  nb_tensor *d_ap = nb_sub(c, t->d, nb_mul(c, t->a, t->p)), *bq = nb_mul(c, t->sum_b, t->q);
  if (nb_fwd_input_needs_grad(op, 0))
    dxs[0] = nb_add(c,
                    nb_add(c, nb_mul(c, bcast(c, ax, sr), nb_sub(c, t->gx, bcast(c, ax, t->p))),
                           nb_mul(c, t->xc, bcast(c, ax, coef_xc))),
                    bcast(c, ax, t->go));
  if (nb_fwd_input_needs_grad(op, 1))
    dxs[1] = nb_sub(c, nb_mul(c, t->g, bcast(c, ax, coef_xc)), nb_mul(c, t->gx, bcast(c, ax, nb_mul(c, sr3, t->b))));
  if (nb_fwd_input_needs_grad(op, 2)) dxs[2] = nb_sub(c, nb_mul(c, t->r, d_ap), nb_mul(c, r3, bq));
  if (nb_fwd_input_needs_grad(op, 3))
    dxs[3] =
        nb_sub(c, nb_mul(c, sr3, nb_add(c, nb_mul(c, t->sum_p, t->b), nb_mul(c, t->a, t->q))), nb_mul(c, gs_r, t->a));
  if (nb_fwd_input_needs_grad(op, 4)) {
    nb_tensor *first = nb_add(c, nb_mul(c, t->s, d_ap), nb_mul(c, t->gs, t->sum_b));
    nb_tensor *half = nbg_scalar_like(c, t->x, 0.5), *r5 = nb_mul(c, r3, nb_square(c, t->r));
    dxs[4] = nb_sub(c, mul3(c, nbg_scalar_like(c, t->x, 1.5), nb_mul(c, t->s, r5), bq), mul3(c, half, r3, first));
  }
}

static void bng_inference(nb_ctx *c, const nb_fwd_op *op, const bn_axes *ax, const bng_terms *t, nb_tensor **dxs) {
  nb_tensor *gs_r = nb_mul(c, t->gs, t->r);
  if (nb_fwd_input_needs_grad(op, 0))
    dxs[0] = nb_add(
        c, nb_add(c, nb_mul(c, bcast(c, ax, nb_mul(c, t->s, t->r)), t->gx), nb_mul(c, t->xc, bcast(c, ax, gs_r))),
        bcast(c, ax, t->go));
  if (nb_fwd_input_needs_grad(op, 1)) dxs[1] = nb_mul(c, t->g, bcast(c, ax, gs_r));
  if (nb_fwd_input_needs_grad(op, 2)) dxs[2] = nb_mul(c, t->r, t->d);
  if (nb_fwd_input_needs_grad(op, 3)) dxs[3] = nb_neg(c, nb_mul(c, gs_r, t->a));
  if (nb_fwd_input_needs_grad(op, 4)) {
    nb_tensor *r3 = nb_mul(c, t->r, nb_square(c, t->r));
    nb_tensor *inner = nb_add(c, nb_mul(c, t->s, t->d), nb_mul(c, t->gs, t->sum_b));
    dxs[4] = mul3(c, nbg_scalar_like(c, t->x, -0.5), r3, inner);
  }
}

static nb_code fused_batch_norm_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  bn_axes ax = axes_of(op, nb_fwd_input(op, 1));
  bng_terms t;
  bng_common(c, op, &ax, dys, &t);
  if (nb_fwd_attr_bool(op, "is_training"))
    bng_training(c, op, &ax, &t, dxs);
  else
    bng_inference(c, op, &ax, &t, dxs);
  return nb_status(c);
}

void nbg_register_norm_grads(void) {
  static const nbg_entry rules[] = {
      {"FusedBatchNormV3", fused_batch_norm_grad, NBG_IN(0) | NBG_IN(1) | NBG_IN(3) | NBG_IN(4),
       NBG_OUT(3) | NBG_OUT(4) | NBG_OUT(5)},
      {"FusedBatchNormGradV3", fused_batch_norm_grad_grad, NBG_IN(0) | NBG_IN(1) | NBG_IN(2) | NBG_IN(3) | NBG_IN(4),
       0},
  };
  nbad_register_table(rules, sizeof rules / sizeof *rules);
}

/* ---- forward rule -----------------------------------------------------------------------
   With tangents tx, ts, to, tm, tv of the inputs (zeros when absent), y = B(s) xc B(r) + B(o):
     ty = B(s) (tx - B(tmu)) B(r) + B(s) xc B(tr) + xc B(ts r) + B(to),  tr = -r^3 tvar / 2,
   where in training mu and var are the batch's (tmu = sum tx / n, tvar = 2 sum xc tx / n,
   sum xc = 0) and batch_mean = f mu + (1 - f) mean, batch_variance = f k var + (1 - f)
   variance (f, k as in training_statistics_grads), reserve_space_1/2 = mu and var; in
   inference mu and var are the inputs, passed through by the four statistic outputs. */
static nb_tensor *tangent_of(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *tin, int i) {
  return tin[i] ? tin[i] : nb_zeros_like(c, nb_fwd_input(op, i));
}

/* The batch statistics' tangents (training): out[0] tmu, out[1] tvar. */
static void batch_stat_tangents(nb_ctx *c, const bn_axes *a, nb_tensor *tx, nb_tensor *xc, nb_tensor *n,
                                nb_tensor **out) {
  out[0] = nb_real_div(c, channel_sum(c, a, tx), n);
  out[1] = nb_real_div(c, nb_mul(c, nbg_scalar_like(c, tx, 2), channel_sum(c, a, nb_mul(c, xc, tx))), n);
}

static nb_code fused_batch_norm_fwd(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *tin, nb_tensor **tout) {
  nb_tensor *x = nb_fwd_input(op, 0), *s = nb_fwd_input(op, 1), *mu, *var;
  bool training = nb_fwd_attr_bool(op, "is_training");
  bn_axes a = axes_of(op, x);
  normalizing_stats(op, training, &mu, &var);
  nb_tensor *tx = tangent_of(c, op, tin, 0), *xc = nb_sub(c, x, bcast(c, &a, mu)), *stats[2];
  nb_tensor *n = per_channel_count(c, x, s);
  if (training)
    batch_stat_tangents(c, &a, tx, xc, n, stats);
  else
    stats[0] = tangent_of(c, op, tin, 3), stats[1] = tangent_of(c, op, tin, 4);
  nb_tensor *r = nb_rsqrt(c, nb_add(c, var, nbg_scalar_like(c, x, nb_fwd_attr_float(op, "epsilon"))));
  nb_tensor *tr = nb_mul(c, nb_mul(c, nbg_scalar_like(c, x, -0.5), nb_mul(c, r, nb_square(c, r))), stats[1]);
  nb_tensor *centered = nb_mul(c, nb_sub(c, tx, bcast(c, &a, stats[0])), bcast(c, &a, nb_mul(c, s, r)));
  nb_tensor *per_channel = nb_add(c, nb_mul(c, s, tr), nb_mul(c, tangent_of(c, op, tin, 1), r));
  tout[0] =
      nb_add(c, nb_add(c, centered, nb_mul(c, xc, bcast(c, &a, per_channel))), bcast(c, &a, tangent_of(c, op, tin, 2)));
  tout[3] = stats[0], tout[4] = stats[1];
  double f = nb_fwd_attr_float(op, "exponential_avg_factor");
  if (!training) {
    tout[1] = stats[0], tout[2] = stats[1];
  } else {
    nb_tensor *one = nbg_scalar_like(c, x, 1), *keep = nbg_scalar_like(c, x, 1 - f);
    nb_tensor *fk = nb_mul(c, nbg_scalar_like(c, x, f), nb_real_div(c, n, nb_maximum(c, nb_sub(c, n, one), one)));
    tout[1] = nb_add(c, nb_mul(c, nbg_scalar_like(c, x, f), stats[0]), nb_mul(c, keep, tangent_of(c, op, tin, 3)));
    tout[2] = nb_add(c, nb_mul(c, fk, stats[1]), nb_mul(c, keep, tangent_of(c, op, tin, 4)));
  }
  return nb_status(c);
}

void nbg_register_norm_fwd(void) {
  static const nbg_fwd_entry table[] = {{"FusedBatchNormV3", NBG_FWD_RULE, fused_batch_norm_fwd, 0, 0}};
  nbad_register_fwd_table(table, sizeof table / sizeof table[0]);
}
