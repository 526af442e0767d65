/* Shared graph-mode helpers for the cmocka tests: a graph fixture, a run helper, and one
   float64 central-difference gradient checker (first and second order). */
#ifndef NB_GRAPHUTIL_H
#define NB_GRAPHUTIL_H

#include <stdbool.h>
#include <stdlib.h>

#include "testutil.h"

#define GU_MAX_FEEDS 8  /* standing feeds of a fixture */
#define GU_MAX_INPUTS 4 /* inputs of a gradient case */
#define GU_STEP 1e-6    /* central-difference step */
#define GU_TOL 1e-6     /* default central-difference tolerance, relative to 1 + |numeric| */

/* A graph, its graph context, an eager context for fed values, and a session. */
typedef struct gu_fixture {
  nb_graph *g;
  nb_ctx *c, *e;
  nb_session *s;
  nb_tensor *feed[GU_MAX_FEEDS], *val[GU_MAX_FEEDS]; /* fed by every gu_run (see gu_feed) */
  int nfeed;
} gu_fixture;

/* Opens f; false if anything could not be created. */
static inline bool gu_open(gu_fixture *f) {
  memset(f, 0, sizeof *f);
  f->g = nb_graph_new();
  f->c = nb_graph_ctx_new(f->g);
  f->e = nb_eager_new();
  f->s = nb_session_new(f->g);
  return f->g && f->c && f->e && f->s;
}

static inline void gu_close(gu_fixture *f) {
  nb_session_free(f->s);
  nb_ctx_free(f->c);
  nb_ctx_free(f->e);
  nb_graph_free(f->g);
}

/* cmocka setup/teardown giving each test a fresh gu_fixture in *state. */
static inline int gu_setup(void **state) {
  gu_fixture *f = malloc(sizeof *f);
  *state = f;
  return f && gu_open(f) ? 0 : -1;
}
static inline int gu_teardown(void **state) {
  gu_fixture *f = *state;
  if (f) gu_close(f);
  free(f);
  return 0;
}

/* Registers a standing feed (an index placeholder and its value) that every later gu_run
   of f feeds; returns the placeholder. */
static inline nb_tensor *gu_feed(gu_fixture *f, nb_tensor *placeholder, nb_tensor *value) {
  assert_true(f->nfeed < GU_MAX_FEEDS);
  f->feed[f->nfeed] = placeholder;
  f->val[f->nfeed++] = value;
  return placeholder;
}

/* Runs one fetch with n (placeholder, value) pairs plus f's standing feeds; fails the test
   on a run error. The result belongs to the caller. */
static inline nb_tensor *gu_run(gu_fixture *f, nb_tensor *const *ph, nb_tensor *const *vals, int n, nb_tensor *fetch) {
  nb_tensor *feed[GU_MAX_FEEDS + GU_MAX_INPUTS + 2], *val[GU_MAX_FEEDS + GU_MAX_INPUTS + 2], *out = NULL;
  assert_true(n <= GU_MAX_INPUTS + 2);
  int m = 0;
  for (int i = 0; i < n; i++, m++) feed[m] = ph[i], val[m] = vals[i];
  for (int i = 0; i < f->nfeed; i++, m++) feed[m] = f->feed[i], val[m] = f->val[i];
  if (nb_run(f->s, feed, val, m, &fetch, 1, &out)) fail_msg("nb_run: %s", nb_session_error(f->s));
  return out;
}

/* gu_run with one optional feed (feed NULL: none). */
static inline nb_tensor *gu_run1(gu_fixture *f, nb_tensor *feed, nb_tensor *value, nb_tensor *fetch) {
  return gu_run(f, &feed, &value, feed ? 1 : 0, fetch);
}

/* ---- the gradient checker ---------------------------------------------------------------
   A case builds y from placeholders for its inputs. The check takes dx_i = d<y, W>/dx_i
   with grad_ys = W for every differentiated input, compares each with its expected values
   and with central differences of <y, W>; then, for each dx_a, differentiates <dx_a, V>
   with respect to the inputs and W (the gradient functions differentiated again) and
   compares that with central differences of dx_a. Linear ops have a zero second
   derivative in x, so their second order goes through W. */

typedef nb_tensor *(*gu_build_fn)(gu_fixture *f, nb_tensor *const *x, const void *arg);

typedef struct gu_input {
  int rank;
  const int64_t *shape;       /* the fed shape */
  const int64_t *placeholder; /* the static shape, -1 for unknown dims; NULL: shape */
  const double *values;       /* NULL: gu_x_value */
  bool fed_only;              /* an index, axis or condition of dtype `dtype`, not differentiated;
                                 the others are float64 and differentiated */
  nb_dtype dtype;
} gu_input;

typedef struct gu_grad_case {
  const char *name; /* in failure messages; may be NULL */
  gu_build_fn build;
  const void *arg;
  int n;
  gu_input in[GU_MAX_INPUTS];
  bool dynamic;                      /* every dim of every placeholder unknown, W's and V's too */
  const double *w;                   /* grad_ys values; NULL: 1, 2, 3, ... (easy hand values) */
  const double *want[GU_MAX_INPUTS]; /* expected dx_i at W (to 1e-12); NULL: differences only */
  double tol;                        /* central-difference tolerance; 0: GU_TOL */
  bool first_only;                   /* no second order */
  bool static_dx;                    /* each dx of a fully static input has that static shape */
} gu_grad_case;

static inline double gu_x_value(int64_t i) { return sin(0.7 * (double)i + 0.3); }
static inline double gu_w_value(int64_t i) { return (double)(i + 1); }
static inline double gu_v_value(int64_t i) { return cos(0.3 * (double)i) - 0.25; }

static inline int64_t gu_count(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  return n;
}

/* A case with one float64 input x. */
static inline gu_grad_case gu_case1(int rank, const int64_t *placeholder, const int64_t *shape, gu_build_fn build,
                                    const void *arg, const double *want) {
  return (gu_grad_case){.build = build,
                        .arg = arg,
                        .n = 1,
                        .in = {{.rank = rank, .shape = shape, .placeholder = placeholder}},
                        .want = {want}};
}

/* The placeholders, their values and y of a case being checked; feed n is W, n + 1 is V. */
typedef struct gu_check {
  gu_fixture f;
  const gu_grad_case *k;
  nb_tensor *ph[GU_MAX_INPUTS + 2], *val[GU_MAX_INPUTS + 2];
  int nfeed;
  int idx[GU_MAX_INPUTS + 1], nd; /* the differentiated feeds */
  nb_tensor *xs[GU_MAX_INPUTS + 1];
} gu_check;

static inline const char *gu_name(const gu_check *h) { return h->k->name ? h->k->name : "case"; }

/* A float64 value of the given shape with values vals (NULL: f(i)) and its placeholder,
   whose dims are unknown in a dynamic case. */
static inline nb_tensor *gu_weights(gu_check *h, int rank, const int64_t *shape, const double *vals,
                                    double (*f)(int64_t), nb_tensor **value) {
  int64_t n = gu_count(rank, shape), dims[NB_MAX_RANK];
  double *buf = malloc((size_t)(n + 1) * sizeof *buf);
  assert_non_null(buf);
  for (int64_t i = 0; i < n; i++) buf[i] = vals ? vals[i] : f(i);
  *value = tu_make(h->f.e, NB_F64, rank, shape, buf);
  free(buf);
  for (int d = 0; d < rank; d++) dims[d] = h->k->dynamic ? -1 : shape[d];
  return nb_placeholder(h->f.c, NB_F64, rank, dims, NULL);
}

/* Opens the fixture, makes the inputs' placeholders and values, and builds y. */
static inline nb_tensor *gu_check_open(gu_check *h, const gu_grad_case *k) {
  memset(h, 0, sizeof *h);
  h->k = k;
  assert_true(k->n <= GU_MAX_INPUTS);
  assert_true(gu_open(&h->f));
  for (int i = 0; i < k->n; i++) {
    const gu_input *in = &k->in[i];
    int64_t dims[NB_MAX_RANK];
    for (int d = 0; d < in->rank; d++) dims[d] = k->dynamic ? -1 : (in->placeholder ? in->placeholder : in->shape)[d];
    nb_dtype t = in->fed_only ? in->dtype : NB_F64;
    h->ph[i] = nb_placeholder(h->f.c, t, in->rank, dims, NULL);
    if (in->values) {
      h->val[i] = tu_make(h->f.e, t, in->rank, in->shape, in->values);
    } else {
      int64_t n = gu_count(in->rank, in->shape);
      double *buf = malloc((size_t)(n + 1) * sizeof *buf);
      assert_non_null(buf);
      for (int64_t j = 0; j < n; j++) buf[j] = gu_x_value(j);
      h->val[i] = tu_make(h->f.e, t, in->rank, in->shape, buf);
      free(buf);
    }
    if (!in->fed_only) h->idx[h->nd] = i, h->xs[h->nd++] = h->ph[i];
  }
  h->nfeed = k->n;
  nb_tensor *y = k->build(&h->f, h->ph, k->arg);
  if (!y || nb_status(h->f.c)) fail_msg("%s: building y: %s", gu_name(h), nb_error(h->f.c));
  return y;
}

/* sum(fetch * w) at the current feeds. */
static inline double gu_weighted(gu_check *h, nb_tensor *fetch, const nb_tensor *w) {
  nb_tensor *r = gu_run(&h->f, h->ph, h->val, h->nfeed, fetch);
  assert_int_equal(nb_num_elements(r), nb_num_elements(w));
  double s = 0;
  for (int64_t i = 0; i < nb_num_elements(r); i++) s += nb_item(r, i) * nb_item(w, i);
  nb_tensor_free(r);
  return s;
}

/* The central difference of sum(fetch * w) in element j of feed i (float64). */
static inline double gu_central_diff(gu_check *h, nb_tensor *fetch, const nb_tensor *w, int i, int64_t j) {
  nb_tensor *orig = h->val[i];
  int64_t n = nb_num_elements(orig);
  double *buf = malloc((size_t)(n + 1) * sizeof *buf), side[2];
  assert_non_null(buf);
  for (int s = 0; s < 2; s++) {
    assert_int_equal(nb_read(orig, buf, (size_t)n * sizeof *buf), NB_OK);
    buf[j] += s ? -GU_STEP : GU_STEP;
    h->val[i] = tu_make(h->f.e, NB_F64, nb_rank(orig), nb_shape(orig), buf);
    side[s] = gu_weighted(h, fetch, w);
    nb_tensor_free(h->val[i]);
  }
  h->val[i] = orig;
  free(buf);
  return (side[0] - side[1]) / (2 * GU_STEP);
}

/* The symbolic gradient sym of sum(fetch * w) w.r.t. feed i: its shape is feed i's, its
   values are want (if given) and the central differences. */
static inline void gu_compare(gu_check *h, nb_tensor *sym, nb_tensor *fetch, const nb_tensor *w, int i,
                              const double *want, const char *what) {
  if (!sym) fail_msg("%s: no %s gradient for feed %d", gu_name(h), what, i);
  nb_tensor *r = gu_run(&h->f, h->ph, h->val, h->nfeed, sym);
  tu_check_shape(r, NB_F64, nb_rank(h->val[i]), nb_shape(h->val[i]));
  if (want) tu_check_vals(r, want, 1e-12);
  double tol = h->k->tol > 0 ? h->k->tol : GU_TOL;
  for (int64_t j = 0; j < nb_num_elements(r); j++) {
    double got = nb_item(r, j), num = gu_central_diff(h, fetch, w, i, j);
    if (!(fabs(got - num) <= tol * (1 + fabs(num))))
      fail_msg("%s: %s gradient of feed %d, element %lld: symbolic %.12g, numeric %.12g", gu_name(h), what, i,
               (long long)j, got, num);
  }
  nb_tensor_free(r);
}

/* A symbolic gradient of a fully static input keeps the input's static shape. */
static inline void gu_check_static_shape(const gu_check *h, const nb_tensor *dx, int i) {
  const gu_input *in = &h->k->in[i];
  const int64_t *dims = in->placeholder ? in->placeholder : in->shape;
  for (int d = 0; d < in->rank; d++)
    if (h->k->dynamic || dims[d] < 0) return;
  tu_check_shape(dx, NB_F64, in->rank, in->shape);
}

/* d<dx_a, V>/d(inputs, W) against central differences of <dx_a, V>, for every dx_a. */
static inline void gu_second_order(gu_check *h, nb_tensor *const *first) {
  const gu_grad_case *k = h->k;
  int n = k->n, nd = h->nd;
  h->idx[nd] = n; /* W, feed n, is differentiated too */
  h->xs[nd] = h->ph[n];
  nb_tensor *second[GU_MAX_INPUTS + 1];
  for (int a = 0; a < nd; a++) {
    const gu_input *in = &k->in[h->idx[a]];
    h->ph[n + 1] = gu_weights(h, in->rank, in->shape, NULL, gu_v_value, &h->val[n + 1]);
    h->nfeed = n + 2;
    nb_grad_opts o = {.grad_ys = &h->ph[n + 1], .unconnected_zero = 1};
    if (nb_gradients(h->f.c, &first[a], 1, h->xs, nd + 1, &o, second))
      fail_msg("%s (second order): %s", gu_name(h), nb_error(h->f.c));
    for (int b = 0; b <= nd; b++) gu_compare(h, second[b], first[a], h->val[n + 1], h->idx[b], NULL, "second-order");
    nb_tensor_free(h->val[n + 1]);
    h->nfeed = n + 1;
  }
}

/* Checks the case's first gradients (and second, unless first_only) as described above. */
static inline void gu_check_grad(const gu_grad_case *k) {
  gu_check h;
  nb_tensor *y = gu_check_open(&h, k);
  int n = k->n;
  nb_tensor *y0 = gu_run(&h.f, h.ph, h.val, n, y);
  h.ph[n] = gu_weights(&h, nb_rank(y0), nb_shape(y0), k->w, gu_w_value, &h.val[n]);
  h.nfeed = n + 1;
  nb_tensor_free(y0);
  nb_tensor *first[GU_MAX_INPUTS];
  nb_grad_opts o = {.grad_ys = &h.ph[n], .unconnected_zero = 1};
  if (nb_gradients(h.f.c, &y, 1, h.xs, h.nd, &o, first)) fail_msg("%s: nb_gradients: %s", gu_name(&h), nb_error(h.f.c));
  for (int a = 0; a < h.nd; a++) {
    int i = h.idx[a];
    if (k->static_dx && first[a]) gu_check_static_shape(&h, first[a], i);
    gu_compare(&h, first[a], y, h.val[n], i, k->want[i], "first-order");
  }
  if (!k->first_only) gu_second_order(&h, first);
  gu_close(&h.f);
}

/* Single-input shorthand: gu_check_grad of gu_case1(...). */
static inline void gu_check_grad1(int rank, const int64_t *placeholder, const int64_t *shape, gu_build_fn build,
                                  const void *arg, const double *want) {
  gu_grad_case k = gu_case1(rank, placeholder, shape, build, arg, want);
  gu_check_grad(&k);
}

/* nb_gradients of the case (grad_ys ones) fails with code, the message containing frag. */
static inline void gu_check_grad_fails(gu_grad_case k, nb_code code, const char *frag) {
  gu_check h;
  nb_tensor *y = gu_check_open(&h, &k);
  nb_tensor *dx[GU_MAX_INPUTS];
  for (int a = 0; a < h.nd; a++) dx[a] = h.xs[a];
  assert_int_equal(nb_gradients(h.f.c, &y, 1, h.xs, h.nd, NULL, dx), code);
  for (int a = 0; a < h.nd; a++) assert_null(dx[a]);
  tu_check_error(h.f.c, code, frag, NULL);
  gu_close(&h.f);
}

#endif
