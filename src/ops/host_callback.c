/* PyFunc and PyFuncStateless: host callbacks (tf.py_func, tf.numpy_function,
   tf.py_function). The node's kernel calls the user's C function (an nb_host_func, whose
   address the internal attr _func carries) on its input values and takes the tensors it
   returns as its outputs, after checking them against the declared dtypes (Tout) and
   shapes (_shapes). A graph node holds a reference to its function (hold_attrs), so the
   function and its user data live as long as the graph. The gradient rule is in
   src/grad/host_callback_grad.c. */
#include "op.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

struct nb_host_func {
  atomic_int refs;
  nb_custom_fn fn;
  nb_custom_grad_fn grad;
  void *user;
  void (*destroy)(void *user);
};

/* The attr slots: N first (the variadic convention), then TF's Tout, then ours. _shapes
   holds each output's declared rank followed by its dims (rank -1: nothing follows). */
enum { HOST_N, HOST_TOUT, HOST_SHAPES, HOST_FUNC };

nb_host_func *nb_host_func_new(nb_custom_fn fn, nb_custom_grad_fn grad, void *user, void (*destroy)(void *user)) {
  if (!fn) return NULL;
  nb_host_func *f = malloc(sizeof *f);
  if (!f) return NULL;
  atomic_init(&f->refs, 1);
  f->fn = fn;
  f->grad = grad;
  f->user = user;
  f->destroy = destroy;
  return f;
}

void nb_host_func_release(nb_host_func *f) {
  if (!f || atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1) return;
  if (f->destroy) f->destroy(f->user);
  free(f);
}

static nb_host_func *attr_func(const nbop_attrval *attr) {
  nb_host_func *f;
  memcpy(&f, &attr[HOST_FUNC].i, sizeof f);
  return f;
}

static void host_hold_attrs(const nbop_attrval *attr, int delta) {
  nb_host_func *f = attr_func(attr);
  if (delta > 0)
    atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
  else
    nb_host_func_release(f);
}

/* ---- the gradient's host function -------------------------------------------------------- */

static void release_forward(void *forward) { nb_host_func_release(forward); }

/* The gradient node's function: its inputs are the forward's nin inputs (nin: the node's
   output count), its nout outputs, then nout upstream gradients (zeros for int/bool
   outputs, which the user's grad sees as NULL, as nb_grad_fn's dys). A dx grad leaves
   NULL becomes zeros: the node must produce every output. Anyone may call it (through
   nb_host_func_gradient), so the counts are checked: n = nin + 2 nout with nout >= 1. */
static nb_code gradient_adapter(nb_ctx *c, nb_tensor *const *in, int n, nb_tensor **dxs, int nin, void *user) {
  const nb_host_func *forward = user;
  if (n - nin < 2 || (n - nin) % 2)
    return nb_set_error(c, NB_INVALID,
                        "host callback gradient: got %d inputs, expected %d + 2 nout (the forward's inputs, "
                        "then its nout >= 1 outputs and their gradients)",
                        n, nin);
  int nout = (n - nin) / 2;
  nb_tensor **dys = malloc((size_t)nout * sizeof *dys);
  if (!dys) return nb_set_error(c, NB_NOMEM, "host callback gradient: out of memory");
  nb_tensor *const *outs = in + nin;
  for (int i = 0; i < nout; i++) dys[i] = nbcore_is_float(outs[i]->dtype) ? in[nin + nout + i] : NULL;
  nb_code code = forward->grad(c, in, nin, outs, nout, dys, dxs, forward->user);
  free(dys);
  for (int i = 0; i < nin && !code; i++)
    if (!dxs[i] && !(dxs[i] = nb_zeros_like(c, in[i]))) code = nb_status(c);
  return code;
}

nb_code nb_host_func_gradient(nb_host_func *f, nb_host_func **grad) {
  *grad = NULL;
  if (!f || !f->grad) return NB_OK;
  if (!(*grad = nb_host_func_new(gradient_adapter, NULL, f, release_forward))) return NB_NOMEM;
  atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed); /* the adapter's user */
  return NB_OK;
}

/* ---- the op ------------------------------------------------------------------------------ */

/* Output i's declared rank and dims (in _shapes, validated). */
static int declared_shape(const nbop_attrval *attr, int i, const int64_t **dims) {
  const int64_t *s = attr[HOST_SHAPES].ints;
  for (int o = 0; o < i; o++) s += 1 + (s[0] > 0 ? s[0] : 0);
  *dims = s + 1;
  return (int)s[0];
}

static nb_code check_shapes_attr(nbop_kargs *k) {
  const nbop_attrval *a = &k->attr[HOST_SHAPES];
  int pos = 0;
  for (int i = 0; i < k->nout; i++) {
    int64_t rank = pos < a->n ? a->ints[pos] : -2;
    if (rank < -1 || rank > NB_MAX_RANK || pos + 1 + (rank > 0 ? rank : 0) > a->n)
      return nbop_kfail(k, NB_INVALID, "output %d: declared rank must be in [-1, %d] with its dims given", i,
                        NB_MAX_RANK);
    for (int d = 0; d < rank; d++)
      if (a->ints[pos + 1 + d] < -1) return nbop_kfail(k, NB_INVALID, "output %d: declared dim %d is below -1", i, d);
    pos += 1 + (rank > 0 ? (int)rank : 0);
  }
  return pos == a->n ? NB_OK : nbop_kfail(k, NB_INVALID, "_shapes declares more than the %d outputs", k->nout);
}

static nb_code host_validate(nbop_kargs *k) {
  const nbop_attrval *tout = &k->attr[HOST_TOUT];
  if (!k->attr[HOST_FUNC].i) return nbop_kfail(k, NB_INVALID, "no host function");
  if (tout->n < 1 || tout->n != k->nout)
    return nbop_kfail(k, NB_INVALID, "Tout lists %d dtypes for %d outputs (at least one)", tout->n, k->nout);
  for (int i = 0; i < k->nout; i++)
    if (tout->ints[i] < NB_F32 || tout->ints[i] > NB_BOOL)
      return nbop_kfail(k, NB_DTYPE, "Tout[%d] = %lld is not a dtype", i, (long long)tout->ints[i]);
  return check_shapes_attr(k);
}

/* The declared outputs in a graph. At run time (no graph) the metas only size the
   placeholders the kernel replaces with the callback's results (take_output), so each is
   an empty vector: nothing is allocated only to be dropped. */
static nb_code host_infer(nbop_kargs *k) {
  bool run_time = !k->ctx->graph;
  for (int i = 0; i < k->nout; i++) {
    const int64_t *dims;
    int rank = declared_shape(k->attr, i, &dims);
    nbop_meta *m = &k->out[i];
    m->dtype = (nb_dtype)k->attr[HOST_TOUT].ints[i];
    m->rank = run_time ? 1 : rank;
    if (run_time)
      m->shape[0] = 0;
    else if (rank > 0)
      memcpy(m->shape, dims, (size_t)rank * sizeof *dims);
  }
  return NB_OK;
}

/* The callback's failure, now the op's: its message prefixed with the op and node. */
static nb_code callback_failed(nbop_kargs *k, nb_code code) {
  char msg[NBCORE_ERR_CAP];
  nb_ctx *c = k->ctx;
  code = nbcore_callback_code(c, "host callback", code);
  snprintf(msg, sizeof msg, "%s", nb_error(c));
  nb_clear_error(c);
  return nbop_kfail(k, code, "%s", msg);
}

/* Output i becomes the callback's result x (its block shared) once x is what was declared. */
static nb_code take_output(nbop_kargs *k, int i, const nb_tensor *x) {
  nb_dtype want = (nb_dtype)k->attr[HOST_TOUT].ints[i];
  const int64_t *dims;
  int rank = declared_shape(k->attr, i, &dims);
  if (!x) return nbop_kfail(k, NB_INVALID, "the host callback left output %d NULL", i);
  if (nbcore_released(x) || !x->buf)
    return nbop_kfail(k, NB_INVALID,
                      "the host callback's output %d is not a concrete tensor (a graph tensor, "
                      "IndexedSlices, or a released one)",
                      i);
  if (x->dtype != want)
    return nbop_kfail(k, NB_DTYPE, "the host callback's output %d is %s but Tout declares %s", i,
                      nb_dtype_name(x->dtype), nb_dtype_name(want));
  if (!nbcore_shape_fits(x->rank, x->shape, rank, dims))
    return nbop_kfail(k, NB_SHAPE, "the host callback's output %d has shape %s, which does not fit the declared %s", i,
                      nbop_tstr(x), rank < 0 ? "<unknown>" : nbop_sstr(rank, dims));
  nb_tensor *res = k->res[i];
  nbcore_buffer_retain(x->buf);
  nbcore_buffer_release(k->ctx, res->buf);
  res->buf = x->buf;
  res->rank = x->rank;
  memcpy(res->shape, x->shape, sizeof res->shape);
  res->size = x->size;
  return NB_OK;
}

/* Calls the function with c's tapes paused (its ops are not what gets differentiated) in
   a scope of its own, which frees its temporaries once its results are taken. */
static nb_code host_kernel(nbop_kargs *k) {
  nb_ctx *c = k->ctx;
  const nb_host_func *f = attr_func(k->attr);
  nb_tensor *small[8], **tmp = k->nout <= 8 ? small : calloc((size_t)k->nout, sizeof *tmp);
  if (!tmp) return nbop_kfail(k, NB_NOMEM, "out of memory");
  for (int i = 0; i < k->nout; i++) tmp[i] = NULL;
  nb_scope_begin(c);
  c->tapes_paused++;
  nbcore_scope_frame frame = nbcore_scope_enter_callback(c);
  nb_code code = f->fn(c, k->in, k->nin, tmp, k->nout, f->user);
  nb_code left = nbcore_scope_leave_callback(c, frame, tmp, k->nout, "the host callback");
  c->tapes_paused--;
  if (code || left || c->status) code = callback_failed(k, code);
  for (int i = 0; i < k->nout && !code; i++) code = take_output(k, i, tmp[i]);
  nb_scope_end(c, NULL, 0);
  if (tmp != small) free(tmp);
  return code;
}

static const int64_t no_ints[1] = {0};

#define HOST_CALLBACK_OP(type, is_stateful)                                                           \
  {                                                                                                   \
    .name = type, .nin = 0, .variadic = true, .empty_list = true, .nout = NBOP_VARIADIC, .alias = -1, \
    .any_rank = true, .stateful = is_stateful, .hold_attrs = host_hold_attrs, .nattrs = 4,            \
    .attrs = {{"N", NB_ATTR_INT, {.i = 0}, true},                                                     \
              {"Tout", NB_ATTR_INTS, {.ints = no_ints, .n = 0}, true},                                \
              {"_shapes", NB_ATTR_INTS, {.ints = no_ints, .n = 0}, true},                             \
              {"_func", NB_ATTR_INT, {.i = 0}, true}},                                                \
    .validate = host_validate, .infer = host_infer, .kernel = host_kernel                             \
  }

static nbop_def host_callback_ops[] = {HOST_CALLBACK_OP("PyFunc", true), HOST_CALLBACK_OP("PyFuncStateless", false)};

nbop_family nbop_host_callback_family(void) { return (nbop_family){host_callback_ops, 2}; }

/* ---- the public entry -------------------------------------------------------------------- */

/* Tout and _shapes of spec[0..nout) into attr, in ints (room for nout * (2 + NB_MAX_RANK)). */
static void spec_attrs(const nb_host_output *spec, int nout, int64_t *ints, nbop_attrval *attr) {
  int64_t *shapes = ints + nout;
  int pos = 0;
  for (int i = 0; i < nout; i++) {
    ints[i] = spec[i].dtype;
    shapes[pos++] = spec[i].rank;
    for (int d = 0; d < spec[i].rank && d < NB_MAX_RANK; d++) shapes[pos++] = spec[i].shape[d];
  }
  attr[HOST_TOUT].ints = ints;
  attr[HOST_TOUT].n = nout;
  attr[HOST_SHAPES].ints = shapes;
  attr[HOST_SHAPES].n = pos;
}

nb_code nb_py_func(nb_ctx *c, nb_host_func *f, bool stateful, nb_tensor *const *in, int nin, const nb_host_output *spec,
                   nb_tensor **out, int nout) {
  if (!c) return NB_INVALID;
  for (int i = 0; out && i < nout; i++) out[i] = NULL;
  if (c->status) return c->status;
  if (!f || !spec || !out || nout < 1 || nin < 0 || (nin > 0 && !in))
    return nbcore_fail(c, NB_INVALID, "nb_py_func: NULL function, arrays, or counts out of range (nin %d, nout %d)",
                       nin, nout);
  const nbop_def *def = &host_callback_ops[stateful ? 0 : 1];
  int64_t *ints = malloc((size_t)nout * (2 + NB_MAX_RANK) * sizeof *ints);
  if (!ints) return nbcore_fail(c, NB_NOMEM, "nb_py_func: out of memory");
  nbop_attrval attr[NBOP_MAX_ATTRS];
  nbop_attr_defaults(def, attr);
  spec_attrs(spec, nout, ints, attr);
  attr[HOST_FUNC].i = nbcore_bits_of(&f, sizeof f);
  nb_code code = nbop_dispatch(c, def, in, nin, attr, out, nout);
  free(ints);
  return code;
}
