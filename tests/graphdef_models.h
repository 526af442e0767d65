/* The graphs whose GraphDef export TensorFlow checked (tests/golden/tf_runs_nabla.py):
   built the same way by the program that wrote the files (tests/golden/
   write_graphdef_export.c) and by test_graphdef_write.c, which requires the same bytes.
   Every value is a small dyadic rational, exact in float32, so the bytes do not depend on
   the machine's libm. */
#ifndef NB_GRAPHDEF_MODELS_H
#define NB_GRAPHDEF_MODELS_H

#include "nabla.h"

#include <stdlib.h>

#define GDM_MAX 16

typedef struct gdm_model {
  const char *name;
  nb_graph *g;
  nb_ctx *c, *e; /* the graph's context; an eager one for the feed values */
  nb_tensor *feed[GDM_MAX], *feed_value[GDM_MAX];
  int nfeed;
  nb_tensor *fetch[GDM_MAX];
  int nfetch;
  nb_variable *var[GDM_MAX]; /* initialized in TF from their values before the run */
  int nvar;
  nb_tensor *update; /* a second run fetches it, then the variables are compared */
  nb_optimizer *opt;
} gdm_model;

/* Element i of a deterministic pattern: multiples of 1/8 in [-5/8, 5/8]. */
static inline double gdm_value(int64_t i, int salt) { return (double)((i * 7 + salt * 3) % 11 - 5) / 8.0; }

static inline nb_tensor *gdm_tensor(nb_ctx *e, int rank, const int64_t *shape, int salt) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  float *v = malloc((size_t)n * sizeof *v);
  if (!v) return NULL;
  for (int64_t i = 0; i < n; i++) v[i] = (float)gdm_value(i, salt);
  nb_tensor *x = nb_tensor_from(e, NB_F32, rank, shape, v);
  free(v);
  return x;
}

static inline nb_tensor *gdm_feed(gdm_model *m, const char *name, int rank, const int64_t *shape, int salt) {
  nb_tensor *p = nb_placeholder(m->c, NB_F32, rank, shape, name);
  m->feed[m->nfeed] = p;
  m->feed_value[m->nfeed++] = gdm_tensor(m->e, rank, shape, salt);
  return p;
}

static inline void gdm_fetch(gdm_model *m, nb_tensor *x) { m->fetch[m->nfetch++] = x; }

/* An MLP with a softmax cross-entropy loss: the loss and its gradients. */
static inline void gdm_mlp(gdm_model *m) {
  nb_ctx *c = m->c;
  nb_tensor *x = gdm_feed(m, "x", 2, (int64_t[]){4, 3}, 1);
  nb_tensor *labels = gdm_feed(m, "labels", 2, (int64_t[]){4, 2}, 2);
  nb_tensor *w1 = nb_const(c, gdm_tensor(m->e, 2, (int64_t[]){3, 5}, 3));
  nb_tensor *b1 = nb_const(c, gdm_tensor(m->e, 1, (int64_t[]){5}, 4));
  nb_tensor *w2 = nb_const(c, gdm_tensor(m->e, 2, (int64_t[]){5, 2}, 5));
  nb_tensor *h = nb_tanh(c, nb_bias_add(c, nb_matmul(c, x, w1, false, false), b1, NULL));
  nb_tensor *logits = nb_matmul(c, h, w2, false, false), *loss;
  nb_softmax_cross_entropy_with_logits(c, logits, labels, &loss, NULL);
  nb_tensor *mean = nb_mean(c, loss, NULL, 0, false);
  nb_tensor *xs[4] = {w1, b1, w2, x}, *dx[4];
  nb_gradients(c, &mean, 1, xs, 4, NULL, dx);
  gdm_fetch(m, mean);
  for (int i = 0; i < 4; i++) gdm_fetch(m, dx[i]);
}

/* A conv net: Conv2D, BiasAdd, Relu, MaxPool, a dense layer; the loss and gradients. */
static inline void gdm_conv(gdm_model *m) {
  nb_ctx *c = m->c;
  nb_tensor *x = gdm_feed(m, "images", 4, (int64_t[]){2, 6, 6, 1}, 1);
  nb_tensor *k = nb_const(c, gdm_tensor(m->e, 4, (int64_t[]){3, 3, 1, 2}, 2));
  nb_tensor *bias = nb_const(c, gdm_tensor(m->e, 1, (int64_t[]){2}, 3));
  nb_tensor *w = nb_const(c, gdm_tensor(m->e, 2, (int64_t[]){18, 3}, 4));
  nb_conv2d_attrs ca = {.strides = (int64_t[]){1, 1, 1, 1}, .padding = "SAME"};
  nb_pool_attrs pa = {.ksize = (int64_t[]){1, 2, 2, 1}, .strides = (int64_t[]){1, 2, 2, 1}, .padding = "VALID"};
  nb_tensor *h = nb_max_pool(c, nb_relu(c, nb_bias_add(c, nb_conv2d(c, x, k, &ca), bias, NULL)), &pa);
  nb_tensor *flat = nb_reshape(c, h, (int64_t[]){2, 18}, 2);
  nb_tensor *y = nb_sum(c, nb_square(c, nb_matmul(c, flat, w, false, false)), NULL, 0, false);
  nb_tensor *xs[4] = {k, bias, w, x}, *dx[4];
  nb_gradients(c, &y, 1, xs, 4, NULL, dx);
  gdm_fetch(m, y);
  for (int i = 0; i < 4; i++) gdm_fetch(m, dx[i]);
}

/* Second order: the gradient g of y = sum(tanh(x w)^2) and the gradient of sum(g v)
   (a Hessian-vector product), through TanhGrad's own gradient. */
static inline void gdm_second_order(gdm_model *m) {
  nb_ctx *c = m->c;
  nb_tensor *x = gdm_feed(m, "x", 2, (int64_t[]){3, 4}, 1);
  nb_tensor *v = gdm_feed(m, "v", 2, (int64_t[]){3, 4}, 2);
  nb_tensor *w = nb_const(c, gdm_tensor(m->e, 2, (int64_t[]){4, 4}, 3));
  nb_tensor *y = nb_sum(c, nb_square(c, nb_tanh(c, nb_matmul(c, x, w, false, false))), NULL, 0, false);
  nb_tensor *g, *hv;
  nb_gradients(c, &y, 1, &x, 1, NULL, &g);
  nb_tensor *gv = nb_sum(c, nb_mul(c, g, v), NULL, 0, false);
  nb_gradients(c, &gv, 1, &x, 1, NULL, &hv);
  gdm_fetch(m, y);
  gdm_fetch(m, g);
  gdm_fetch(m, hv);
}

/* Resource variables: a linear model's loss and gradients, then one SGD step. */
static inline void gdm_variables(gdm_model *m) {
  nb_ctx *c = m->c;
  nb_tensor *x = gdm_feed(m, "x", 2, (int64_t[]){4, 3}, 1);
  m->var[m->nvar++] = nb_variable_new(c, gdm_tensor(m->e, 2, (int64_t[]){3, 2}, 2), true, "dense/kernel");
  m->var[m->nvar++] = nb_variable_new(c, gdm_tensor(m->e, 1, (int64_t[]){2}, 3), true, "dense/bias");
  nb_tensor *w = nb_variable_read(c, m->var[0]), *b = nb_variable_read(c, m->var[1]);
  nb_tensor *y = nb_add(c, nb_matmul(c, x, w, false, false), b);
  nb_tensor *loss = nb_mean(c, nb_square(c, y), NULL, 0, false);
  nb_tensor *xs[2] = {w, b}, *dx[2];
  nb_gradients(c, &loss, 1, xs, 2, NULL, dx);
  gdm_fetch(m, loss);
  gdm_fetch(m, dx[0]);
  gdm_fetch(m, dx[1]);
  m->opt = nb_sgd_new(0.25);
  nb_optimizer_apply(m->opt, c, dx, m->var, 2, &m->update);
}

/* An RNN through nb_while: h = tanh(h W + x_t U) over the rows of x; its gradients
   (a gradient loop reading the forward loop's stacked intermediates). */
typedef struct gdm_rnn {
  nb_tensor *w, *u, *xs;
} gdm_rnn;

static inline nb_code gdm_rnn_cond(nb_ctx *c, nb_tensor *const *v, nb_tensor **pred, void *user) {
  (void)user;
  *pred = nb_less(c, v[0], nb_scalar(c, NB_I32, 4));
  return nb_status(c);
}

static inline nb_code gdm_rnn_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  const gdm_rnn *r = user;
  nb_tensor *xt = nb_reshape(c, nb_gather(c, r->xs, v[0], 0, 0), (int64_t[]){1, 3}, 2);
  next[0] = nb_add(c, v[0], nb_scalar(c, NB_I32, 1));
  next[1] = nb_tanh(c, nb_add(c, nb_matmul(c, v[1], r->w, false, false), nb_matmul(c, xt, r->u, false, false)));
  return nb_status(c);
}

static inline void gdm_while_rnn(gdm_model *m) {
  nb_ctx *c = m->c;
  gdm_rnn r = {nb_const(c, gdm_tensor(m->e, 2, (int64_t[]){2, 2}, 1)),
               nb_const(c, gdm_tensor(m->e, 2, (int64_t[]){3, 2}, 2)), gdm_feed(m, "xs", 2, (int64_t[]){4, 3}, 3)};
  nb_tensor *h0 = gdm_feed(m, "h0", 2, (int64_t[]){1, 2}, 4);
  nb_tensor *init[2] = {nb_const(c, nb_scalar(m->e, NB_I32, 0)), h0}, *out[2];
  nb_while(c, gdm_rnn_cond, gdm_rnn_body, &r, init, 2, -1, out);
  nb_tensor *y = nb_sum(c, nb_square(c, out[1]), NULL, 0, false);
  nb_tensor *xs[4] = {r.w, r.u, r.xs, h0}, *dx[4];
  nb_gradients(c, &y, 1, xs, 4, NULL, dx);
  gdm_fetch(m, y);
  for (int i = 0; i < 4; i++) gdm_fetch(m, dx[i]);
}

/* Second order through the loop: the gradient g of the RNN's loss with respect to U,
   then the gradient of sum(g V) with respect to W and xs (the gradient loop's own
   gradient, which reads the stacks through _StackGetGrad). */
static inline void gdm_while_second_order(gdm_model *m) {
  nb_ctx *c = m->c;
  gdm_rnn r = {nb_const(c, gdm_tensor(m->e, 2, (int64_t[]){2, 2}, 1)),
               nb_const(c, gdm_tensor(m->e, 2, (int64_t[]){3, 2}, 2)), gdm_feed(m, "xs", 2, (int64_t[]){4, 3}, 3)};
  nb_tensor *h0 = gdm_feed(m, "h0", 2, (int64_t[]){1, 2}, 4);
  nb_tensor *v = gdm_feed(m, "v", 2, (int64_t[]){3, 2}, 5);
  nb_tensor *init[2] = {nb_const(c, nb_scalar(m->e, NB_I32, 0)), h0}, *out[2];
  nb_while(c, gdm_rnn_cond, gdm_rnn_body, &r, init, 2, -1, out);
  nb_tensor *y = nb_sum(c, nb_square(c, out[1]), NULL, 0, false), *g, *dx[2];
  nb_gradients(c, &y, 1, &r.u, 1, NULL, &g);
  nb_tensor *gv = nb_sum(c, nb_mul(c, g, v), NULL, 0, false), *xs[2] = {r.w, r.xs};
  nb_gradients(c, &gv, 1, xs, 2, NULL, dx);
  gdm_fetch(m, y);
  gdm_fetch(m, g);
  gdm_fetch(m, dx[0]);
  gdm_fetch(m, dx[1]);
}

/* nb_custom_gradient: y = x^3 with the gradient 3 x^2 dy written by hand, and
   nb_recompute_grad of tanh(x) w; the loss's gradients. */
static inline nb_code gdm_cube(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  out[0] = nb_mul(c, nb_square(c, in[0]), in[0]);
  return nb_status(c);
}

static inline nb_code gdm_cube_grad(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                                    nb_tensor *const *dys, nb_tensor **dxs, void *user) {
  (void)nin, (void)out, (void)nout, (void)user;
  dxs[0] = nb_mul(c, nb_mul(c, nb_scalar(c, NB_F32, 3), nb_square(c, in[0])), dys[0]);
  return nb_status(c);
}

static inline nb_code gdm_tanh_w(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  out[0] = nb_mul(c, nb_tanh(c, in[0]), in[1]);
  return nb_status(c);
}

static inline void gdm_custom_gradient(gdm_model *m) {
  nb_ctx *c = m->c;
  nb_tensor *x = gdm_feed(m, "x", 1, (int64_t[]){6}, 1);
  nb_tensor *w = nb_const(c, gdm_tensor(m->e, 1, (int64_t[]){6}, 2)), *cube, *rec;
  nb_custom_gradient(c, gdm_cube, gdm_cube_grad, NULL, &x, 1, &cube, 1);
  nb_tensor *in[2] = {cube, w}, *dx[2];
  nb_recompute_grad(c, gdm_tanh_w, NULL, in, 2, &rec, 1);
  nb_tensor *y = nb_sum(c, rec, NULL, 0, false), *xs[2] = {x, w};
  nb_gradients(c, &y, 1, xs, 2, NULL, dx);
  gdm_fetch(m, y);
  gdm_fetch(m, dx[0]);
  gdm_fetch(m, dx[1]);
}

/* nb_cond: relu(x W) when sum(x) > 0, else x W squared; its gradients. */
static inline nb_code gdm_then(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  (void)user;
  out[0] = nb_relu(c, nb_matmul(c, in[0], in[1], false, false));
  return nb_status(c);
}

static inline nb_code gdm_else(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  (void)user;
  out[0] = nb_square(c, nb_matmul(c, in[0], in[1], false, false));
  return nb_status(c);
}

static inline void gdm_cond(gdm_model *m) {
  nb_ctx *c = m->c;
  nb_tensor *x = gdm_feed(m, "x", 2, (int64_t[]){2, 3}, 1);
  nb_tensor *w = nb_const(c, gdm_tensor(m->e, 2, (int64_t[]){3, 3}, 2));
  nb_tensor *pred = nb_greater(c, nb_sum(c, x, NULL, 0, false), nb_scalar(c, NB_F32, 0));
  nb_tensor *in[2] = {x, w}, *out;
  nb_cond(c, pred, gdm_then, gdm_else, NULL, in, 2, &out, 1);
  nb_tensor *y = nb_sum(c, nb_tanh(c, out), NULL, 0, false);
  nb_tensor *dx[2];
  nb_gradients(c, &y, 1, in, 2, NULL, dx);
  gdm_fetch(m, y);
  gdm_fetch(m, dx[0]);
  gdm_fetch(m, dx[1]);
}

/* A function called twice (StatefulPartitionedCall) and its gradient (SymbolicGradient). */
static inline nb_code gdm_fn(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  out[0] = nb_mul(c, nb_sin(c, in[0]), user);
  return nb_status(c);
}

static inline void gdm_function(gdm_model *m) {
  nb_ctx *c = m->c;
  nb_tensor *x = gdm_feed(m, "x", 1, (int64_t[]){5}, 1);
  nb_tensor *w = nb_const(c, gdm_tensor(m->e, 1, (int64_t[]){5}, 2));
  nb_function *f = nb_function_new(c, gdm_fn, w, &x, 1, 1);
  nb_tensor *y1, *y2, *dx;
  nb_call_function(c, f, &x, 1, &y1, 1);
  nb_call_function(c, f, &y1, 1, &y2, 1);
  nb_tensor *y = nb_sum(c, y2, NULL, 0, false);
  nb_gradients(c, &y, 1, &x, 1, NULL, &dx);
  gdm_fetch(m, y);
  gdm_fetch(m, dx);
}

typedef void (*gdm_builder)(gdm_model *m);
static const struct {
  const char *name;
  gdm_builder build;
} gdm_models[] = {
    {"mlp", gdm_mlp},
    {"conv", gdm_conv},
    {"second_order", gdm_second_order},
    {"variables", gdm_variables},
    {"while_rnn", gdm_while_rnn},
    {"while_second_order", gdm_while_second_order},
    {"cond", gdm_cond},
    {"function", gdm_function},
    {"custom_gradient", gdm_custom_gradient},
};
#define GDM_COUNT ((int)(sizeof gdm_models / sizeof *gdm_models))

/* Builds model i into m; false on an error (m's contexts say which). */
static inline bool gdm_build(int i, gdm_model *m) {
  *m = (gdm_model){.name = gdm_models[i].name};
  m->g = nb_graph_new();
  m->c = m->g ? nb_graph_ctx_new(m->g) : NULL;
  m->e = nb_eager_new();
  if (!m->c || !m->e) return false;
  gdm_models[i].build(m);
  return nb_status(m->c) == NB_OK && nb_status(m->e) == NB_OK;
}

static inline void gdm_free(gdm_model *m) {
  nb_optimizer_free(m->opt);
  nb_ctx_free(m->c);
  nb_ctx_free(m->e);
  nb_graph_free(m->g);
  for (int i = 0; i < m->nvar; i++) nb_variable_free(m->var[i]);
}

#endif
