/* nb_while and nb_cond (tf.while_loop, tf.cond). In an eager context the callbacks simply
   run: every op they call is an ordinary eager op, so active tapes record the iterations
   that ran and differentiate through them (nested tapes give higher orders). Each
   iteration runs in a context scope, so a loop keeps only its current loop variables
   (and what tapes hold) however many iterations run. Graph contexts trace the callbacks
   into function graphs instead (function.c). */
#include "func.h"

#include <stdlib.h>
#include <string.h>

/* Whether x is a handle made in c since scope mark `mark` (so the caller owns it). */
static bool made_since(const nb_ctx *c, const nb_tensor *x, uint32_t mark) {
  return x->ctx == c && x->slot >= mark && x->state == NBCORE_HANDLE_LIVE;
}

/* A static shape for messages ("<unknown rank>" when so). */
static const char *shape_str(const nb_tensor *x) { return x->rank < 0 ? "<unknown rank>" : nbop_tstr(x); }

/* ---- shape invariants ------------------------------------------------------------------ */

/* The invariants of n loop variables from the public specs (malloc'd; NULL on error, set on c). */
static nbfunc_shape_inv *nbfunc_shape_inv_from(nb_ctx *c, const char *who, const nb_shape_spec *specs, int n) {
  for (int i = 0; i < n; i++)
    if (specs[i].rank < -1 || specs[i].rank > NB_MAX_RANK || (specs[i].rank > 0 && !specs[i].dims)) {
      nbcore_fail(c, NB_SHAPE, "%s: the declared shape of loop variable %d has rank %d (need -1 .. %d, with dims)", who,
                  i, specs[i].rank, NB_MAX_RANK);
      return NULL;
    }
  nbfunc_shape_inv *inv = malloc((size_t)n * sizeof *inv);
  if (!inv) {
    nbcore_fail(c, NB_NOMEM, "%s: out of memory", who);
    return NULL;
  }
  for (int i = 0; i < n; i++) {
    inv[i].rank = specs[i].rank;
    for (int d = 0; d < specs[i].rank; d++) inv[i].shape[d] = specs[i].dims[d] < 0 ? -1 : specs[i].dims[d];
  }
  return inv;
}

/* Whether shape (rank, dims) is at least as specific as the invariant (inv NULL: var's own shape). */
static bool nbfunc_shape_inv_admits(const nbfunc_shape_inv *inv, const nb_tensor *var, const nb_tensor *next) {
  return inv ? nbcore_shape_fits(next->rank, next->shape, inv->rank, inv->shape)
             : nbcore_shape_fits(next->rank, next->shape, var->rank, var->shape);
}

/* Checks that each declared shape admits its variable's initial shape. */
static nb_code nbfunc_shape_inv_check_vars(nb_ctx *c, const char *who, const nbfunc_shape_inv *inv,
                                           nb_tensor *const *vars, int n) {
  for (int i = 0; i < n; i++)
    if (!nbcore_shape_fits(vars[i]->rank, vars[i]->shape, inv[i].rank, inv[i].shape))
      return nbcore_fail(c, NB_SHAPE, "%s: loop variable %d has shape %s, which its declared shape %s does not admit",
                         who, i, shape_str(vars[i]),
                         inv[i].rank < 0 ? "<unknown rank>" : nbop_sstr(inv[i].rank, inv[i].shape));
  return NB_OK;
}

/* Checks a body's results against the loop variables they replace: present, same dtype,
   same shape (the shape invariant; relaxed dims, -1 in `shapes`, may change). */
nb_code nbfunc_cf_check_next(nb_ctx *c, const char *who, nb_tensor *const *vars, nb_tensor *const *next, int n,
                             const nbfunc_shape_inv *inv) {
  for (int i = 0; i < n; i++) {
    if (!next[i]) return nbcore_fail(c, NB_INVALID, "%s: the body left loop variable %d NULL", who, i);
    if (next[i]->dtype != vars[i]->dtype)
      return nbcore_fail(c, NB_DTYPE, "%s: the body changed loop variable %d from %s to %s", who, i,
                         nb_dtype_name(vars[i]->dtype), nb_dtype_name(next[i]->dtype));
    if (!nbfunc_shape_inv_admits(inv ? &inv[i] : NULL, vars[i], next[i]))
      return nbcore_fail(c, NB_SHAPE,
                         "%s: the body changed loop variable %d from shape %s to %s (declare a relaxed shape with "
                         "nb_while_opts.shapes to allow it)",
                         who, i, shape_str(vars[i]), shape_str(next[i]));
  }
  return NB_OK;
}

nb_code nbfunc_cf_call_body(nb_ctx *c, const char *who, nb_body_fn fn, nb_tensor *const *in, nb_tensor **out, int nout,
                            void *user) {
  nbcore_scope_frame f = nbcore_scope_enter_callback(c);
  nb_code code = fn(c, in, out, user);
  nb_code left = nbcore_scope_leave_callback(c, f, out, nout, "%s", who);
  return code ? code : left ? left : nb_status(c);
}

nb_code nbfunc_cf_call_cond(nb_ctx *c, const char *who, nb_cond_fn fn, nb_tensor *const *in, nb_tensor **pred,
                            void *user) {
  nbcore_scope_frame f = nbcore_scope_enter_callback(c);
  nb_code code = fn(c, in, pred, user);
  nb_code left = nbcore_scope_leave_callback(c, f, pred, 1, "%s", who);
  return code ? code : left ? left : nb_status(c);
}

/* The predicate a cond function returned, as a C bool. */
static nb_code read_pred(nb_ctx *c, const char *who, const nb_tensor *pred, bool *value) {
  if (!pred) return nbcore_fail(c, NB_INVALID, "%s: the cond function left its predicate NULL", who);
  if (pred->dtype != NB_BOOL || pred->rank != 0)
    return nbcore_fail(c, NB_INVALID, "%s: the predicate must be a bool scalar, got %s %s", who,
                       nb_dtype_name(pred->dtype), shape_str(pred));
  if (!pred->buf)
    return nbcore_fail(c, NB_INVALID, "%s: the predicate has no value (a graph tensor in an eager loop)", who);
  *value = *(const uint8_t *)nbcore_tdata(pred) != 0;
  return NB_OK;
}

/* Results must be handles the caller owns: a callback that returns one of its inputs or
   an outer tensor gets an Identity of it (also what a tape records for it). */
static nb_code own_results(nb_ctx *c, nb_tensor **res, int n, uint32_t mark) {
  for (int i = 0; i < n; i++) {
    bool fresh = made_since(c, res[i], mark);
    for (int j = 0; j < i && fresh; j++) fresh = res[j] != res[i];
    if (!fresh && !(res[i] = nb_identity(c, res[i]))) return c->status;
  }
  return NB_OK;
}

static nb_code eager_cond_pred(nb_ctx *c, nb_cond_fn cond, void *user, nb_tensor *const *cur, bool *go) {
  nb_tensor *pred = NULL;
  nb_code code = nbfunc_cf_call_cond(c, "nb_while: cond: the callback", cond, cur, &pred, user);
  code = nbcore_callback_code(c, "nb_while: cond", code);
  return code ? code : read_pred(c, "nb_while", pred, go);
}

/* One iteration in its own scope: cond, then (if it holds) body; *cur becomes the new
   loop variables, which the loop owns. */
static nb_code eager_step(nb_ctx *c, nb_cond_fn cond, nb_body_fn body, void *user, nb_tensor **cur, nb_tensor **next,
                          int n, const nbfunc_shape_inv *inv, bool *go) {
  nb_scope_begin(c);
  uint32_t mark = c->nhandles;
  nb_code code = nb_status(c);
  if (!code) code = eager_cond_pred(c, cond, user, cur, go);
  if (!code && *go) {
    memset(next, 0, (size_t)n * sizeof *next);
    code = nbcore_callback_code(c, "nb_while: body",
                                nbfunc_cf_call_body(c, "nb_while: body: the callback", body, cur, next, n, user));
    if (!code) code = nbfunc_cf_check_next(c, "nb_while", cur, next, n, inv);
    if (!code) code = own_results(c, next, n, mark);
  }
  bool keep = !code && *go;
  nb_scope_end(c, next, keep ? n : 0);
  return code;
}

/* Frees the previous iteration's variables (loop-owned, possibly repeated). */
static void free_vars(nb_tensor **vars, int n) {
  for (int i = 0; i < n; i++) {
    bool first = true;
    for (int j = 0; j < i && first; j++) first = vars[j] != vars[i];
    if (first) nb_tensor_free(vars[i]);
  }
}

static nb_code eager_while(nb_ctx *c, nb_cond_fn cond, nb_body_fn body, void *user, nb_tensor *const *vars, int n,
                           int64_t max_iters, const nbfunc_shape_inv *inv, nb_tensor **out) {
  nb_tensor **cur = malloc(2 * (size_t)n * sizeof *cur);
  if (!cur) return nbcore_fail(c, NB_NOMEM, "nb_while: out of memory");
  nb_tensor **next = cur + n;
  memcpy(cur, vars, (size_t)n * sizeof *cur);
  bool owned = false, go = true;
  nb_code code = NB_OK;
  for (int64_t it = 0; !code && go && (max_iters < 0 || it < max_iters); it++) {
    code = eager_step(c, cond, body, user, cur, next, n, inv, &go);
    if (code || !go) break;
    if (owned) free_vars(cur, n);
    memcpy(cur, next, (size_t)n * sizeof *cur);
    owned = true;
  }
  if (!code && !owned) { /* no iteration ran: the results are the initial values */
    uint32_t mark = c->nhandles;
    code = own_results(c, cur, n, mark);
    owned = !code;
  }
  if (!code)
    memcpy(out, cur, (size_t)n * sizeof *out);
  else if (owned)
    free_vars(cur, n);
  free(cur);
  return code;
}

static nb_code check_while_args(nb_ctx *c, nb_cond_fn cond, nb_body_fn body, nb_tensor *const *vars, int n,
                                nb_tensor **out) {
  if (!cond || !body || !vars || !out || n < 1)
    return nbcore_fail(c, NB_INVALID, "nb_while: NULL cond, body, vars or out, or %d loop variables (need >= 1)", n);
  for (int i = 0; i < n; i++)
    if (!vars[i]) return nbcore_fail(c, NB_INVALID, "nb_while: loop variable %d is NULL", i);
  return NB_OK;
}

nb_code nb_while_ex(nb_ctx *c, nb_cond_fn cond, nb_body_fn body, void *user, nb_tensor *const *vars, int n,
                    int64_t max_iters, const nb_while_opts *o, nb_tensor **out) {
  if (!c) return NB_INVALID;
  for (int i = 0; out && i < n; i++) out[i] = NULL;
  if (c->status) return c->status;
  nb_code code = check_while_args(c, cond, body, vars, n, out);
  if (code) return code;
  nbfunc_shape_inv *inv = NULL;
  if (o && o->shapes && !(inv = nbfunc_shape_inv_from(c, "nb_while", o->shapes, n))) return c->status;
  if (inv && (code = nbfunc_shape_inv_check_vars(c, "nb_while", inv, vars, n))) {
    free(inv);
    return code;
  }
  if (c->graph)
    code = nbfunc_graph_while(c, cond, body, user, vars, n, max_iters, inv, out);
  else
    code = eager_while(c, cond, body, user, vars, n, max_iters, inv, out);
  free(inv);
  return code;
}

nb_code nb_while(nb_ctx *c, nb_cond_fn cond, nb_body_fn body, void *user, nb_tensor *const *vars, int n,
                 int64_t max_iters, nb_tensor **out) {
  return nb_while_ex(c, cond, body, user, vars, n, max_iters, NULL, out);
}

/* ---- nb_cond --------------------------------------------------------------------------- */

static nb_code eager_cond(nb_ctx *c, bool taken, nb_body_fn then_fn, nb_body_fn else_fn, void *user,
                          nb_tensor *const *in, nb_tensor **out, int nout) {
  nb_body_fn fn = taken ? then_fn : else_fn;
  nb_scope_begin(c);
  uint32_t mark = c->nhandles;
  nb_code code = nb_status(c);
  const char *who = taken ? "nb_cond: then branch" : "nb_cond: else branch";
  const char *callback = taken ? "nb_cond: then branch: the callback" : "nb_cond: else branch: the callback";
  if (!code) code = nbcore_callback_code(c, who, nbfunc_cf_call_body(c, callback, fn, in, out, nout, user));
  for (int i = 0; i < nout && !code; i++)
    if (!out[i])
      code = nbcore_fail(c, NB_INVALID, "nb_cond: the %s branch left output %d NULL", taken ? "then" : "else", i);
  if (!code) code = own_results(c, out, nout, mark);
  nb_scope_end(c, out, code ? 0 : nout);
  if (code)
    for (int i = 0; i < nout; i++) out[i] = NULL;
  return code;
}

nb_code nb_cond(nb_ctx *c, nb_tensor *pred, nb_body_fn then_fn, nb_body_fn else_fn, void *user, nb_tensor *const *in,
                int nin, nb_tensor **out, int nout) {
  if (!c) return NB_INVALID;
  for (int i = 0; out && i < nout; i++) out[i] = NULL;
  if (c->status) return c->status;
  if (!pred || !then_fn || !else_fn || !out || nout < 1 || nin < 0 || (nin > 0 && !in))
    return nbcore_fail(c, NB_INVALID,
                       "nb_cond: NULL predicate, branch, in or out, or counts out of range (nin %d, nout %d)", nin,
                       nout);
  for (int i = 0; i < nin; i++)
    if (!in[i]) return nbcore_fail(c, NB_INVALID, "nb_cond: input %d is NULL", i);
  if (c->graph) return nbfunc_graph_cond(c, pred, then_fn, else_fn, user, in, nin, out, nout);
  bool taken = false;
  nb_code code = read_pred(c, "nb_cond", pred, &taken);
  return code ? code : eager_cond(c, taken, then_fn, else_fn, user, in, out, nout);
}
