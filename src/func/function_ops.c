/* The ops that run function graphs, src/func's half: validation, inference and kernels of
   While, If and StatefulPartitionedCall (TF's functional ops, as while_v2 and cond_v2
   build them), installed in their defs in src/ops/control_flow.c by nbfunc_install_ops.
   The functions they run are function graphs (function.c) held in the internal attrs
   _cond/_body, _then_branch/_else_branch and _f; nb_while, nb_cond and nb_call_function
   make these nodes, and the leading underscore keeps the attrs out of nb_op's reach (they
   are pointers). While's inputs are the loop variables: [iteration counter, the user's
   variables..., captured tensors...]; its outputs their final values (captures pass
   through), then, once a gradient needs them, the accumulators (control_flow_grad.c).
   If's inputs are [cond, inputs..., captured tensors...]. A kernel runs in a session's
   context: it runs the functions through sessions over their graphs, then hands the
   final buffers to its outputs. */
#include "func.h"

#include <stdlib.h>

/* The attr slots of the defs (src/ops/control_flow.c). */
enum { CF_N, CF_FIRST_FN, CF_SECOND_FN, WHILE_PARALLEL_ITERATIONS };

static nb_function *fn_attr(const nbop_kargs *k, int slot) { return nbfunc_from_bits(k->attr[slot].i); }

/* Makes res hold v's value (dtype, shape and a reference to its buffer). The output
   allocated before the kernel ran is a placeholder: the final shape is known only now. */
static void adopt(nb_ctx *c, nb_tensor *res, const nb_tensor *v) {
  if (v->buf) nbcore_buffer_retain(v->buf);
  nbcore_buffer_release(c, res->buf);
  res->buf = v->buf;
  res->dtype = v->dtype;
  res->rank = v->rank;
  memcpy(res->shape, v->shape, sizeof res->shape);
  res->size = v->size;
}

/* At run time (no graph) an output's meta only sizes that placeholder allocation: the
   static meta m becomes that, unknown dims 0 (unknown rank: a scalar). */
static void to_run_time(const nbop_kargs *k, nbop_meta *m) {
  if (k->ctx->graph) return;
  if (m->rank < 0) m->rank = 0;
  for (int d = 0; d < m->rank; d++)
    if (m->shape[d] < 0) m->shape[d] = 0;
}

static nb_code check_arg_dtypes(nbop_kargs *k, const nb_function *f, int first) {
  for (int i = 0; i < f->nargs; i++)
    if (k->in[first + i]->dtype != f->args[i]->dtype)
      return nbop_kfail(k, NB_DTYPE, "input %d is %s but the function takes %s", first + i,
                        nb_dtype_name(k->in[first + i]->dtype), nb_dtype_name(f->args[i]->dtype));
  return NB_OK;
}

/* ---- While ---------------------------------------------------------------------------- */

/* The accumulators' outputs: a stack per accumulator, and an index per ragged one. */
static int while_acc_outputs(const nb_function *body) {
  return body->nacc + nbfunc_cf_num_ragged(body->res + body->nres, body->nacc);
}

/* A node made before its body gained accumulators (a copy in another function) has none. */
static bool while_accumulates(const nbop_kargs *k) {
  return k->nout == k->nin + while_acc_outputs(fn_attr(k, CF_SECOND_FN));
}

static nb_code while_validate(nbop_kargs *k) {
  const nb_function *cond = fn_attr(k, CF_FIRST_FN), *body = fn_attr(k, CF_SECOND_FN);
  if (k->nin != body->nargs || k->nin != cond->nargs || (k->nout != k->nin && !while_accumulates(k)) || cond->nres != 1)
    return nbop_kfail(k, NB_INVALID, "%d inputs and %d outputs do not fit its functions (%d arguments)", k->nin,
                      k->nout, body->nargs);
  return check_arg_dtypes(k, body, 0);
}

static nb_code while_infer(nbop_kargs *k) {
  const nb_function *body = fn_attr(k, CF_SECOND_FN);
  if (while_accumulates(k)) {
    nbfunc_cf_accumulator_metas(body->res + body->nres, body->nacc, k->out + k->nin);
    for (int a = 0; a < while_acc_outputs(body); a++) to_run_time(k, &k->out[k->nin + a]);
  }
  for (int i = 0; i < k->nin; i++) /* in a graph, loop variables keep their invariants */
    nbop_meta_like(&k->out[i], k->ctx->graph && i < body->nres ? body->args[i] : k->in[i]);
  return NB_OK;
}

static nb_code read_pred(nbop_kargs *k, const nb_tensor *pred, bool *go) {
  if (pred->dtype != NB_BOOL || pred->rank != 0)
    return nbop_kfail(k, NB_INVALID, "the predicate must be a bool scalar, got %s %s", nb_dtype_name(pred->dtype),
                      nbop_tstr(pred));
  *go = *(const uint8_t *)nbcore_tdata(pred) != 0;
  return NB_OK;
}

static void free_list(nb_tensor **xs, int n) {
  for (int i = 0; i < n; i++) nb_tensor_free(xs[i]);
}

/* Whether the loop goes on: cond on the loop variables cur. */
static nb_code run_cond(nbop_kargs *k, nb_function *cond, nb_tensor **cur, bool *go) {
  nb_tensor *pred = NULL;
  nb_code code = nbfunc_run(k, cond, "cond", cur, 0, NULL, &pred);
  if (!code) code = read_pred(k, pred, go);
  nb_tensor_free(pred);
  return code;
}

/* The accumulators: each iteration's value of an intermediate the gradient reads, in a
   stack that doubles when full, so nothing is copied again at the end. The first
   capacity is the iteration count of the loop's previous run: a loop that runs the same
   count each time fills one stack (from the pool) without growing it. The op that makes
   the value writes it straight into its row of a dense stack (the body's session places
   it there, see place_rows); a value no op makes anew (an argument passed through, a
   view) is copied into its row, and its buffer is freed at once.
   A value of fully known static shape goes into a dense stack [capacity, shape]. Another
   may change shape between iterations (a relaxed loop variable; or it has the largest
   rank, leaving no room for the iteration dim): its stack is ragged, the values one
   after another in a flat block, with an index stack whose row t holds value t's
   offset, rank and dims (see _RaggedGet).
   A loop variable's argument, when the gradient reads both it and the body's result for
   that variable (an RNN's h_{t-1} and h_t), is that result one iteration late: the two
   share one stack [initial value, result 0, result 1, ...] and output views of it. */
typedef struct accumulator {
  nb_tensor *stack;   /* dense: [capacity, shape]; ragged: the values, flat; NULL before any */
  nb_tensor *index;   /* ragged: [capacity, NBOP_CF_INDEX_COLS] */
  int64_t n;          /* values pushed */
  int64_t cap;        /* rows of room: in the stack (dense) or the index (ragged) */
  int64_t used, room; /* ragged: elements of the flat stack used, and allocated */
  bool ragged;
  int late;      /* >= 0: this argument's values are accumulator `late`'s, one behind */
  int first_var; /* >= 0: the stack starts with this loop variable's initial value */
} accumulator;

/* Which loop variable j < nv accumulated value x of the body is the argument of, or -1. */
static int argument_of(const nb_function *body, int nv, const nb_tensor *x) {
  for (int j = 0; j < nv; j++)
    if (body->args[j]->node == x->node && body->args[j]->out == x->out) return j;
  return -1;
}

static bool same_value(const nb_tensor *a, const nb_tensor *b) { return a->node == b->node && a->out == b->out; }

/* Pairs each accumulated argument with the accumulated result of its variable (of the
   same kind: a result may know its shape where the argument's invariant does not). */
static void pair_late_arguments(const nb_function *body, int nv, accumulator *accs, int nacc) {
  nb_tensor *const *acc = body->res + body->nres;
  for (int a = 0; a < nacc; a++) {
    accs[a].late = accs[a].first_var = -1;
    accs[a].ragged = nbfunc_cf_ragged(acc[a]);
  }
  for (int a = 0; a < nacc; a++) {
    int j = argument_of(body, nv, acc[a]);
    for (int r = 0; j >= 0 && r < nacc; r++)
      if (r != a && same_value(acc[r], body->res[j]) && argument_of(body, nv, acc[r]) < 0 && accs[r].first_var < 0 &&
          accs[r].ragged == accs[a].ragged) {
        accs[a].late = r;
        accs[r].first_var = j;
        break;
      }
  }
}

/* Room in *s for `need` rows of shape row[0..rank) (dtype t), *cap rows now: the first
   block holds `first` rows (or need), later ones double; the `used` rows move over. */
static nb_code reserve_rows(nbop_kargs *k, nb_tensor **s, int64_t *cap, int64_t used, int64_t need, int64_t first,
                            nb_dtype t, int rank, const int64_t *row) {
  if (*s && need <= *cap) return NB_OK;
  int64_t shape[NB_MAX_RANK + 1];
  shape[0] = *s ? 2 * *cap : first;
  if (shape[0] < need) shape[0] = need;
  if (shape[0] < 1) shape[0] = 1;
  if (rank) memcpy(shape + 1, row, (size_t)rank * sizeof *shape);
  nb_tensor *grown = nbcore_tensor_alloc(k->ctx, t, rank + 1, shape);
  if (!grown) return k->ctx->status;
  size_t bytes = (size_t)used * (size_t)nbcore_shape_size(rank, row) * nb_dtype_size(t);
  if (bytes) memcpy(nbcore_tdata(grown), nbcore_tdata(*s), bytes);
  nb_tensor_free(*s);
  *s = grown;
  *cap = shape[0];
  return NB_OK;
}

/* Room in a dense stack for row acc->n, of shape row[0..rank) (dtype t); its address. */
static nb_code reserve_dense_row(nbop_kargs *k, accumulator *acc, int64_t first, nb_dtype t, int rank,
                                 const int64_t *row, char **at) {
  nb_code code = reserve_rows(k, &acc->stack, &acc->cap, acc->n, acc->n + 1, first, t, rank, row);
  size_t bytes = (size_t)nbcore_shape_size(rank, row) * nb_dtype_size(t);
  *at = code ? NULL : (char *)nbcore_tdata(acc->stack) + (size_t)acc->n * bytes;
  return code;
}

static nb_code push_dense(nbop_kargs *k, accumulator *acc, int a, const nb_tensor *x, int64_t first) {
  const nb_tensor *s = acc->stack;
  if (s && (x->rank != s->rank - 1 || memcmp(x->shape, s->shape + 1, (size_t)x->rank * sizeof *x->shape)))
    return nbop_kfail(k, NB_SHAPE, "accumulated intermediate %d has shape %s, not its static %s", a, nbop_tstr(x),
                      nbop_sstr(s->rank - 1, s->shape + 1));
  char *at;
  nb_code code = reserve_dense_row(k, acc, first, x->dtype, x->rank, x->shape, &at);
  if (code) return code;
  size_t bytes = (size_t)x->size * nb_dtype_size(x->dtype);
  if (bytes && at != nbcore_tdata(x)) memcpy(at, nbcore_tdata(x), bytes); /* not made in its row */
  acc->n++;
  return NB_OK;
}

/* Appends x's elements to the flat stack and its place and shape to the index. */
static nb_code push_ragged(nbop_kargs *k, accumulator *acc, const nb_tensor *x, int64_t first) {
  static const int64_t cols = NBOP_CF_INDEX_COLS;
  nb_code code =
      reserve_rows(k, &acc->stack, &acc->room, acc->used, acc->used + x->size, first * x->size, x->dtype, 0, NULL);
  if (!code) code = reserve_rows(k, &acc->index, &acc->cap, acc->n, acc->n + 1, first, NB_I64, 1, &cols);
  if (code) return code;
  size_t size = nb_dtype_size(x->dtype);
  if (x->size)
    memcpy((char *)nbcore_tdata(acc->stack) + (size_t)acc->used * size, nbcore_tdata(x), (size_t)x->size * size);
  int64_t *row = (int64_t *)nbcore_tdata(acc->index) + acc->n * NBOP_CF_INDEX_COLS;
  memset(row, 0, NBOP_CF_INDEX_COLS * sizeof *row);
  row[0] = acc->used;
  row[1] = x->rank;
  memcpy(row + 2, x->shape, (size_t)x->rank * sizeof *row);
  acc->used += x->size;
  acc->n++;
  return NB_OK;
}

/* Rows a stack starts with: the previous run's iterations (+ the initial value). */
static int64_t first_rows(const accumulator *acc, int64_t hint) { return hint > 0 ? hint + (acc->first_var >= 0) : 16; }

static nb_code push(nbop_kargs *k, accumulator *acc, int a, const nb_tensor *x, int64_t hint) {
  int64_t first = first_rows(acc, hint);
  return acc->ragged ? push_ragged(k, acc, x, first) : push_dense(k, acc, a, x, first);
}

/* A stack sharing its rows with a late argument starts with the variable's initial value. */
static nb_code push_initial(nbop_kargs *k, accumulator *acc, int a, int64_t hint) {
  return acc->first_var >= 0 && acc->n == 0 ? push(k, acc, a, k->in[acc->first_var], hint) : NB_OK;
}

/* Iteration's value x of accumulator a (a late argument's come with its partner's). */
static nb_code accumulate(nbop_kargs *k, accumulator *accs, int a, const nb_tensor *x, int64_t hint) {
  accumulator *acc = &accs[a];
  if (acc->late >= 0) return NB_OK;
  nb_code code = push_initial(k, acc, a, hint);
  return code ? code : push(k, acc, a, x, hint);
}

/* Before a body run: place[a] a view of the row where dense accumulator a's next value
   goes (the stack grown if full), for the op that makes the value to write it there;
   NULL for a ragged one, a late argument's, or one of no data. A dense accumulator's
   static shape is known: push_dense checks the value against it still. */
static nb_code place_rows(nbop_kargs *k, const nb_function *body, accumulator *accs, int nacc, int64_t hint,
                          nbcore_buffer **place) {
  nb_tensor *const *acc = body->res + body->nres;
  nb_code code = NB_OK;
  for (int a = 0; a < nacc; a++) place[a] = NULL;
  for (int a = 0; a < nacc && !code; a++) {
    const nb_tensor *t = acc[a];
    size_t bytes = (size_t)nbcore_shape_size(t->rank, t->shape) * nb_dtype_size(t->dtype);
    if (accs[a].ragged || accs[a].late >= 0 || bytes == 0) continue;
    char *at;
    code = push_initial(k, &accs[a], a, hint);
    if (!code) code = reserve_dense_row(k, &accs[a], first_rows(&accs[a], hint), t->dtype, t->rank, t->shape, &at);
    if (code) break;
    nbcore_buffer *stack = accs[a].stack->buf;
    if (!(place[a] = nbcore_buffer_view(stack, (size_t)(at - (char *)stack->data), bytes)))
      code = nbop_kfail(k, NB_NOMEM, "out of memory");
  }
  return code;
}

static void release_rows(nbop_kargs *k, nbcore_buffer **place, int nacc) {
  for (int a = 0; a < nacc; a++) nbcore_buffer_release(k->ctx, place[a]);
}

/* res as stack s trimmed to its first `rows` rows, or as a view of rows [first, first +
   rows) when another output shares s. */
static nb_code output_rows(nbop_kargs *k, nb_tensor *res, nb_tensor *s, int64_t first, int64_t rows, bool shared) {
  if (!shared) {
    s->shape[0] = rows;
    s->size = nbcore_shape_size(s->rank, s->shape);
    adopt(k->ctx, res, s);
    return NB_OK;
  }
  size_t row = (size_t)nbcore_shape_size(s->rank - 1, s->shape + 1) * nb_dtype_size(s->dtype);
  nbcore_buffer *view = nbcore_buffer_view(s->buf, (size_t)first * row, (size_t)rows * row);
  if (!view) return nbop_kfail(k, NB_NOMEM, "out of memory");
  nb_tensor like = *s;
  like.buf = view;
  like.shape[0] = rows;
  like.size = nbcore_shape_size(like.rank, like.shape);
  adopt(k->ctx, res, &like);
  nbcore_buffer_release(k->ctx, view);
  return NB_OK;
}

/* An accumulator of no values: its static shape (unknown dims made 0 by to_run_time). */
static void output_empty(nb_tensor *res) {
  res->shape[0] = 0;
  res->size = 0;
}

/* Output nin + a: accumulator a as [T, shape], or ragged as its flat values (output
   `index_out`: the T rows of its index); a late argument's rows are its partner's, one
   row earlier. */
static nb_code finish_accumulator(nbop_kargs *k, const accumulator *accs, int a, int index_out) {
  nb_tensor *res = k->res[k->nin + a], *ires = index_out >= 0 ? k->res[index_out] : NULL;
  const accumulator *own = accs[a].late >= 0 ? &accs[accs[a].late] : &accs[a];
  if (!own->stack) {
    output_empty(res);
    if (ires) output_empty(ires);
    return NB_OK;
  }
  bool shared = own->first_var >= 0;
  int64_t rows = own->n - shared, first = shared && accs[a].late < 0;
  if (!own->ragged) return output_rows(k, res, own->stack, first, rows, shared);
  nb_code code = output_rows(k, res, own->stack, 0, own->used, false); /* the offsets index all of it */
  return code ? code : output_rows(k, ires, own->index, first, rows, shared);
}

static nb_code while_kernel(nbop_kargs *k) {
  nb_function *cond = fn_attr(k, CF_FIRST_FN), *body = fn_attr(k, CF_SECOND_FN);
  /* nv: loop variables the body computes (the captures after them stay); the body also
     fetches its accumulators, which this node stacks when it has their outputs */
  int nv = body->nres, fetched = body->nacc, nacc = k->nout > k->nin ? fetched : 0;
  nb_tensor **cur = malloc((2 * (size_t)k->nin + (size_t)fetched) * sizeof *cur), **next = cur + k->nin;
  accumulator *accs = calloc((size_t)nacc + 1, sizeof *accs);
  /* blocks for the body's results: none for its loop variables, then the accumulators' rows */
  nbcore_buffer **place = calloc((size_t)(nv + nacc) + 1, sizeof *place);
  if (!cur || !accs || !place) {
    free(cur), free(accs), free(place);
    return nbop_kfail(k, NB_NOMEM, "out of memory");
  }
  memcpy(cur, k->in, (size_t)k->nin * sizeof *cur);
  bool owned = false, go = true; /* owned: cur[0..nv) are the last body's results, this kernel's */
  nb_code code = NB_OK;
  int64_t hint = atomic_load(&body->iters_hint), iters = 0;
  pair_late_arguments(body, nv, accs, nacc);
  while (!code && go) {
    code = run_cond(k, cond, cur, &go);
    if (code || !go) break;
    /* the body takes over results it made: one it updates in place keeps its block
       from iteration to iteration (a running sum) */
    code = place_rows(k, body, accs, nacc, hint, place + nv);
    if (!code) {
      code = nbfunc_run(k, body, "body", cur, owned ? nv : 0, nacc ? place : NULL, next);
      owned = false; /* the run took them over, whatever its outcome */
    }
    release_rows(k, place + nv, nacc);
    if (code) break;
    memcpy(cur, next, (size_t)nv * sizeof *cur);
    owned = true;
    iters++;
    for (int a = 0; a < nacc && !code; a++) code = accumulate(k, accs, a, next[nv + a], hint);
    free_list(next + nv, fetched);
  }
  for (int i = 0; i < k->nin && !code; i++) adopt(k->ctx, k->res[i], cur[i]);
  for (int a = 0, index_out = k->nin + nacc; a < nacc && !code; a++)
    code = finish_accumulator(k, accs, a, accs[a].ragged ? index_out++ : -1);
  if (!code && nacc) atomic_store(&body->iters_hint, iters);
  for (int a = 0; a < nacc; a++) {
    nb_tensor_free(accs[a].stack);
    nb_tensor_free(accs[a].index);
  }
  if (owned) free_list(cur, nv);
  free(place);
  free(accs);
  free(cur);
  return code;
}

/* ---- If ------------------------------------------------------------------------------------ */

bool nbfunc_cf_ragged(const nb_tensor *t) { return !nbcore_dims_known(t->rank, t->shape) || t->rank == NB_MAX_RANK; }

int nbfunc_cf_num_ragged(nb_tensor *const *acc, int nacc) {
  int n = 0;
  for (int a = 0; a < nacc; a++) n += nbfunc_cf_ragged(acc[a]);
  return n;
}

void nbfunc_cf_accumulator_metas(nb_tensor *const *acc, int nacc, nbop_meta *m) {
  nbop_meta *index = m + nacc;
  for (int a = 0; a < nacc; a++) {
    const nb_tensor *t = acc[a];
    if (nbfunc_cf_ragged(t)) {
      nbop_meta_set(&m[a], t->dtype, 1, (const int64_t[]){-1});
      nbop_meta_set(index++, NB_I64, 2, (const int64_t[]){-1, NBOP_CF_INDEX_COLS});
      continue;
    }
    m[a].dtype = t->dtype;
    m[a].rank = t->rank + 1;
    m[a].shape[0] = -1;
    memcpy(m[a].shape + 1, t->shape, (size_t)t->rank * sizeof *t->shape);
  }
}

void nbfunc_cf_merged_meta(nbop_meta *m, const nb_tensor *a, const nb_tensor *b) {
  nbop_meta_set(m, a->dtype, a->rank, a->shape);
  if (a->rank != b->rank) {
    m->rank = -1;
    return;
  }
  for (int d = 0; d < a->rank; d++)
    if (a->shape[d] != b->shape[d]) m->shape[d] = -1;
}

/* An If has the branches' results as outputs, then, once a gradient needs them, the
   intermediates that gradient reads (nacc more results of each branch, see
   control_flow_grad.c); a node made before they existed has only the first. */
static nb_code if_validate(nbop_kargs *k) {
  const nb_function *t = fn_attr(k, CF_FIRST_FN);
  if (k->nin != 1 + t->nargs || (k->nout != t->nres && k->nout != t->nres + t->nacc))
    return nbop_kfail(k, NB_INVALID, "%d inputs and %d outputs do not fit its branches (%d arguments, %d results)",
                      k->nin, k->nout, t->nargs, t->nres);
  if (k->in[0]->dtype != NB_BOOL || k->in[0]->rank > 0)
    return nbop_kfail(k, NB_INVALID, "cond must be a bool scalar, got %s %s", nb_dtype_name(k->in[0]->dtype),
                      nbop_tstr(k->in[0]));
  return check_arg_dtypes(k, t, 1);
}

static nb_code if_infer(nbop_kargs *k) {
  const nb_function *t = fn_attr(k, CF_FIRST_FN), *e = fn_attr(k, CF_SECOND_FN);
  for (int i = 0; i < k->nout; i++) {
    nbfunc_cf_merged_meta(&k->out[i], t->res[i], e->res[i]); /* the dims both branches agree on */
    to_run_time(k, &k->out[i]);
  }
  return NB_OK;
}

static nb_code if_kernel(nbop_kargs *k) {
  bool taken = false;
  nb_code code = read_pred(k, k->in[0], &taken);
  if (code) return code;
  nb_function *f = fn_attr(k, taken ? CF_FIRST_FN : CF_SECOND_FN);
  int fetched = f->nres + f->nacc;
  nb_tensor *small[8], **res = fetched <= 8 ? small : malloc((size_t)fetched * sizeof *res);
  if (!res) return nbop_kfail(k, NB_NOMEM, "out of memory");
  code = nbfunc_run(k, f, taken ? "then_branch" : "else_branch", k->in + 1, 0, NULL, res);
  for (int i = 0; i < k->nout && !code; i++) adopt(k->ctx, k->res[i], res[i]);
  if (!code) free_list(res, fetched);
  if (res != small) free(res);
  return code;
}

/* ---- StatefulPartitionedCall: a function called as a node ------------------------------------ */

static nb_code call_validate(nbop_kargs *k) {
  const nb_function *f = fn_attr(k, CF_FIRST_FN);
  if (k->nin != f->nargs || k->nout != f->nres)
    return nbop_kfail(k, NB_INVALID, "%d inputs and %d outputs do not fit its function (%d arguments, %d results)",
                      k->nin, k->nout, f->nargs, f->nres);
  return check_arg_dtypes(k, f, 0);
}

static nb_code call_infer(nbop_kargs *k) {
  const nb_function *f = fn_attr(k, CF_FIRST_FN);
  for (int i = 0; i < k->nout; i++) {
    nbop_meta_like(&k->out[i], f->res[i]);
    to_run_time(k, &k->out[i]);
  }
  return NB_OK;
}

static nb_code call_kernel(nbop_kargs *k) {
  nb_function *f = fn_attr(k, CF_FIRST_FN);
  nb_tensor *small[8], **res = k->nout <= 8 ? small : malloc((size_t)k->nout * sizeof *res);
  if (!res) return nbop_kfail(k, NB_NOMEM, "out of memory");
  nb_code code = nbfunc_run(k, f, "function", k->in, 0, NULL, res);
  for (int i = 0; i < k->nout && !code; i++) adopt(k->ctx, k->res[i], res[i]);
  if (!code) free_list(res, k->nout);
  if (res != small) free(res);
  return code;
}

/* ---- installing them ---------------------------------------------------------------------- */

void nbfunc_install_ops(void) {
  static const nbop_impl impl[NBOP_FUNCTION_OPS] = {
      [NBOP_WHILE_OP] = {while_validate, while_infer, while_kernel},
      [NBOP_IF_OP] = {if_validate, if_infer, if_kernel},
      [NBOP_CALL_OP] = {call_validate, call_infer, call_kernel},
  };
  nbop_install_function_ops(impl);
}
