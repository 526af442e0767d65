/* Control-flow ops (TF's functional While, If and StatefulPartitionedCall, as while_v2
   and cond_v2 build them). The functions they run are function graphs
   (src/graph/function.c) held in the internal attrs _cond/_body, _then_branch/_else_branch
   and _f; nb_while, nb_cond and nb_call_function make these nodes, and the leading
   underscore keeps the attrs out of nb_op's reach (they are pointers).
   While's inputs are the loop variables: [iteration counter, the user's variables...,
   captured tensors...]; its outputs their final values (captures pass through), then,
   once a gradient needs them, the accumulators (src/grad/control_flow_grad.c). If's
   inputs are [cond, inputs..., captured tensors...]. All are stateful as in TF (never
   folded at build time). A kernel runs in a session's context: it runs the functions
   through sessions over their graphs, then hands the final buffers to its outputs.
   _StackGet and _StackGetGrad (_RaggedGet and _RaggedGetGrad for values whose shapes may
   change) read the accumulators in the gradient loops; _EnsureShape holds those loops'
   variables to their declared shapes. */
#include "../graph/function.h"

#include <stdlib.h>

enum { CF_N, CF_FIRST_FN, CF_SECOND_FN, WHILE_PARALLEL_ITERATIONS };

static nb_function *fn_attr(const nb_kargs *k, int slot) { return nb_function_from_bits(k->attr[slot].i); }

/* Makes res hold v's value (dtype, shape and a reference to its buffer). The output
   allocated before the kernel ran is a placeholder: the final shape is known only now. */
static void adopt(nb_ctx *c, nb_tensor *res, const nb_tensor *v) {
  if (v->buf) nb_buffer_retain(v->buf);
  nb_buffer_release(c, res->buf);
  res->buf = v->buf;
  res->dtype = v->dtype;
  res->rank = v->rank;
  memcpy(res->shape, v->shape, sizeof res->shape);
  res->size = v->size;
}

/* At run time (no graph) an output's meta only sizes that placeholder allocation: the
   static meta m becomes that, unknown dims 0 (unknown rank: a scalar). */
static void to_run_time(const nb_kargs *k, nb_meta *m) {
  if (k->ctx->graph) return;
  if (m->rank < 0) m->rank = 0;
  for (int d = 0; d < m->rank; d++)
    if (m->shape[d] < 0) m->shape[d] = 0;
}

static nb_code check_arg_dtypes(nb_kargs *k, const nb_function *f, int first) {
  for (int i = 0; i < f->nargs; i++)
    if (k->in[first + i]->dtype != f->args[i]->dtype)
      return nb_kfail(k, NB_DTYPE, "input %d is %s but the function takes %s", first + i,
                      nb_dtype_name(k->in[first + i]->dtype), nb_dtype_name(f->args[i]->dtype));
  return NB_OK;
}

/* ---- While ---------------------------------------------------------------------------- */

/* The accumulators' outputs: a stack per accumulator, and an index per ragged one. */
static int while_acc_outputs(const nb_function *body) {
  return body->nacc + nb_cf_num_ragged(body->res + body->nres, body->nacc);
}

/* A node made before its body gained accumulators (a copy in another function) has none. */
static bool while_accumulates(const nb_kargs *k) {
  return k->nout == k->nin + while_acc_outputs(fn_attr(k, CF_SECOND_FN));
}

static nb_code while_validate(nb_kargs *k) {
  const nb_function *cond = fn_attr(k, CF_FIRST_FN), *body = fn_attr(k, CF_SECOND_FN);
  if (k->nin != body->nargs || k->nin != cond->nargs || (k->nout != k->nin && !while_accumulates(k)) || cond->nres != 1)
    return nb_kfail(k, NB_INVALID, "%d inputs and %d outputs do not fit its functions (%d arguments)", k->nin, k->nout,
                    body->nargs);
  return check_arg_dtypes(k, body, 0);
}

static nb_code while_infer(nb_kargs *k) {
  const nb_function *body = fn_attr(k, CF_SECOND_FN);
  if (while_accumulates(k)) {
    nb_cf_accumulator_metas(body->res + body->nres, body->nacc, k->out + k->nin);
    for (int a = 0; a < while_acc_outputs(body); a++) to_run_time(k, &k->out[k->nin + a]);
  }
  for (int i = 0; i < k->nin; i++) /* in a graph, loop variables keep their invariants */
    nb_meta_like(&k->out[i], k->ctx->graph && i < body->nres ? body->args[i] : k->in[i]);
  return NB_OK;
}

static nb_code read_pred(nb_kargs *k, const nb_tensor *pred, bool *go) {
  if (pred->dtype != NB_BOOL || pred->rank != 0)
    return nb_kfail(k, NB_INVALID, "the predicate must be a bool scalar, got %s %s", nb_dtype_name(pred->dtype),
                    nb_tstr(pred));
  *go = *(const uint8_t *)nb_tdata(pred) != 0;
  return NB_OK;
}

static void free_list(nb_tensor **xs, int n) {
  for (int i = 0; i < n; i++) nb_tensor_free(xs[i]);
}

/* Whether the loop goes on: cond on the loop variables cur. */
static nb_code run_cond(nb_kargs *k, nb_function *cond, nb_tensor **cur, bool *go) {
  nb_tensor *pred = NULL;
  nb_code code = nb_function_run(k, cond, "cond", cur, 0, &pred);
  if (!code) code = read_pred(k, pred, go);
  nb_tensor_free(pred);
  return code;
}

/* The accumulators: each iteration's value of an intermediate the gradient reads, copied
   into a stack that doubles when full, so the value's buffer is freed at once (the next
   iteration reuses it) and nothing is copied again at the end. The first capacity is the
   iteration count of the loop's previous run: a loop that runs the same count each time
   fills one stack (from the pool) without growing it.
   A value of fully known static shape goes into a dense stack [capacity, shape]. Another
   may change shape between iterations (a relaxed loop variable; or it has the largest
   rank, leaving no room for the iteration dim): its stack is ragged, the values one
   after another in a flat block, with an index stack whose row t holds value t's
   offset, rank and dims (see _RaggedGet).
   A loop variable's argument, when the gradient reads both it and the body's result for
   that variable (an RNN's h_{t-1} and h_t), is that result one iteration late: the two
   share one stack [initial value, result 0, result 1, ...] and output views of it. */
typedef struct accumulator {
  nb_tensor *stack;        /* dense: [capacity, shape]; ragged: the values, flat; NULL before any */
  nb_tensor *index;        /* ragged: [capacity, NB_CF_INDEX_COLS] */
  int64_t n;               /* values pushed */
  int64_t cap;             /* rows of room: in the stack (dense) or the index (ragged) */
  int64_t used, room;      /* ragged: elements of the flat stack used, and allocated */
  bool ragged;
  int late;                /* >= 0: this argument's values are accumulator `late`'s, one behind */
  int first_var;           /* >= 0: the stack starts with this loop variable's initial value */
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
    accs[a].ragged = nb_cf_ragged(acc[a]);
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
static nb_code reserve_rows(nb_kargs *k, nb_tensor **s, int64_t *cap, int64_t used, int64_t need, int64_t first,
                            nb_dtype t, int rank, const int64_t *row) {
  if (*s && need <= *cap) return NB_OK;
  int64_t shape[NB_MAX_RANK + 1];
  shape[0] = *s ? 2 * *cap : first;
  if (shape[0] < need) shape[0] = need;
  if (shape[0] < 1) shape[0] = 1;
  if (rank) memcpy(shape + 1, row, (size_t)rank * sizeof *shape);
  nb_tensor *grown = nb_tensor_alloc(k->ctx, t, rank + 1, shape);
  if (!grown) return k->ctx->status;
  size_t bytes = (size_t)used * (size_t)nb_shape_size(rank, row) * nb_dtype_size(t);
  if (bytes) memcpy(nb_tdata(grown), nb_tdata(*s), bytes);
  nb_tensor_free(*s);
  *s = grown;
  *cap = shape[0];
  return NB_OK;
}

static nb_code push_dense(nb_kargs *k, accumulator *acc, int a, const nb_tensor *x, int64_t first) {
  const nb_tensor *s = acc->stack;
  if (s && (x->rank != s->rank - 1 || memcmp(x->shape, s->shape + 1, (size_t)x->rank * sizeof *x->shape)))
    return nb_kfail(k, NB_SHAPE, "accumulated intermediate %d has shape %s, not its static %s", a, nb_tstr(x),
                    nb_sstr(s->rank - 1, s->shape + 1));
  nb_code code = reserve_rows(k, &acc->stack, &acc->cap, acc->n, acc->n + 1, first, x->dtype, x->rank, x->shape);
  if (code) return code;
  size_t bytes = (size_t)x->size * nb_dtype_size(x->dtype);
  if (bytes) memcpy((char *)nb_tdata(acc->stack) + (size_t)acc->n * bytes, nb_tdata(x), bytes);
  acc->n++;
  return NB_OK;
}

/* Appends x's elements to the flat stack and its place and shape to the index. */
static nb_code push_ragged(nb_kargs *k, accumulator *acc, const nb_tensor *x, int64_t first) {
  static const int64_t cols = NB_CF_INDEX_COLS;
  nb_code code = reserve_rows(k, &acc->stack, &acc->room, acc->used, acc->used + x->size, first * x->size, x->dtype, 0,
                              NULL);
  if (!code) code = reserve_rows(k, &acc->index, &acc->cap, acc->n, acc->n + 1, first, NB_I64, 1, &cols);
  if (code) return code;
  size_t size = nb_dtype_size(x->dtype);
  if (x->size) memcpy((char *)nb_tdata(acc->stack) + (size_t)acc->used * size, nb_tdata(x), (size_t)x->size * size);
  int64_t *row = (int64_t *)nb_tdata(acc->index) + acc->n * NB_CF_INDEX_COLS;
  memset(row, 0, NB_CF_INDEX_COLS * sizeof *row);
  row[0] = acc->used;
  row[1] = x->rank;
  memcpy(row + 2, x->shape, (size_t)x->rank * sizeof *row);
  acc->used += x->size;
  acc->n++;
  return NB_OK;
}

static nb_code push(nb_kargs *k, accumulator *acc, int a, const nb_tensor *x, int64_t hint) {
  int64_t first = hint > 0 ? hint + (acc->first_var >= 0) : 16;
  return acc->ragged ? push_ragged(k, acc, x, first) : push_dense(k, acc, a, x, first);
}

/* Iteration's value x of accumulator a (a late argument's come with its partner's). */
static nb_code accumulate(nb_kargs *k, accumulator *accs, int a, const nb_tensor *x, int64_t hint) {
  accumulator *acc = &accs[a];
  if (acc->late >= 0) return NB_OK;
  nb_code code = acc->first_var >= 0 && acc->n == 0 ? push(k, acc, a, k->in[acc->first_var], hint) : NB_OK;
  return code ? code : push(k, acc, a, x, hint);
}

/* res as stack s trimmed to its first `rows` rows, or as a view of rows [first, first +
   rows) when another output shares s. */
static nb_code output_rows(nb_kargs *k, nb_tensor *res, nb_tensor *s, int64_t first, int64_t rows, bool shared) {
  if (!shared) {
    s->shape[0] = rows;
    s->size = nb_shape_size(s->rank, s->shape);
    adopt(k->ctx, res, s);
    return NB_OK;
  }
  size_t row = (size_t)nb_shape_size(s->rank - 1, s->shape + 1) * nb_dtype_size(s->dtype);
  nb_buffer *view = nb_buffer_view(s->buf, (size_t)first * row, (size_t)rows * row);
  if (!view) return nb_kfail(k, NB_NOMEM, "out of memory");
  nb_tensor like = *s;
  like.buf = view;
  like.shape[0] = rows;
  like.size = nb_shape_size(like.rank, like.shape);
  adopt(k->ctx, res, &like);
  nb_buffer_release(k->ctx, view);
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
static nb_code finish_accumulator(nb_kargs *k, const accumulator *accs, int a, int index_out) {
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

static nb_code while_kernel(nb_kargs *k) {
  nb_function *cond = fn_attr(k, CF_FIRST_FN), *body = fn_attr(k, CF_SECOND_FN);
  /* nv: loop variables the body computes (the captures after them stay); the body also
     fetches its accumulators, which this node stacks when it has their outputs */
  int nv = body->nres, fetched = body->nacc, nacc = k->nout > k->nin ? fetched : 0;
  nb_tensor **cur = malloc((2 * (size_t)k->nin + (size_t)fetched) * sizeof *cur), **next = cur + k->nin;
  accumulator *accs = calloc((size_t)nacc + 1, sizeof *accs);
  if (!cur || !accs) {
    free(cur), free(accs);
    return nb_kfail(k, NB_NOMEM, "out of memory");
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
    code = nb_function_run(k, body, "body", cur, owned ? nv : 0, next);
    owned = false;
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
  free(accs);
  free(cur);
  return code;
}

/* ---- If ------------------------------------------------------------------------------------ */

bool nb_cf_ragged(const nb_tensor *t) { return !nb_dims_known(t->rank, t->shape) || t->rank == NB_MAX_RANK; }

int nb_cf_num_ragged(nb_tensor *const *acc, int nacc) {
  int n = 0;
  for (int a = 0; a < nacc; a++) n += nb_cf_ragged(acc[a]);
  return n;
}

void nb_cf_accumulator_metas(nb_tensor *const *acc, int nacc, nb_meta *m) {
  nb_meta *index = m + nacc;
  for (int a = 0; a < nacc; a++) {
    const nb_tensor *t = acc[a];
    if (nb_cf_ragged(t)) {
      nb_meta_set(&m[a], t->dtype, 1, (const int64_t[]){-1});
      nb_meta_set(index++, NB_I64, 2, (const int64_t[]){-1, NB_CF_INDEX_COLS});
      continue;
    }
    m[a].dtype = t->dtype;
    m[a].rank = t->rank + 1;
    m[a].shape[0] = -1;
    memcpy(m[a].shape + 1, t->shape, (size_t)t->rank * sizeof *t->shape);
  }
}

void nb_cf_merged_meta(nb_meta *m, const nb_tensor *a, const nb_tensor *b) {
  nb_meta_set(m, a->dtype, a->rank, a->shape);
  if (a->rank != b->rank) {
    m->rank = -1;
    return;
  }
  for (int d = 0; d < a->rank; d++)
    if (a->shape[d] != b->shape[d]) m->shape[d] = -1;
}

/* An If has the branches' results as outputs, then, once a gradient needs them, the
   intermediates that gradient reads (nacc more results of each branch, see
   src/grad/control_flow_grad.c); a node made before they existed has only the first. */
static nb_code if_validate(nb_kargs *k) {
  const nb_function *t = fn_attr(k, CF_FIRST_FN);
  if (k->nin != 1 + t->nargs || (k->nout != t->nres && k->nout != t->nres + t->nacc))
    return nb_kfail(k, NB_INVALID, "%d inputs and %d outputs do not fit its branches (%d arguments, %d results)",
                    k->nin, k->nout, t->nargs, t->nres);
  if (k->in[0]->dtype != NB_BOOL || k->in[0]->rank > 0)
    return nb_kfail(k, NB_INVALID, "cond must be a bool scalar, got %s %s", nb_dtype_name(k->in[0]->dtype),
                    nb_tstr(k->in[0]));
  return check_arg_dtypes(k, t, 1);
}

static nb_code if_infer(nb_kargs *k) {
  const nb_function *t = fn_attr(k, CF_FIRST_FN), *e = fn_attr(k, CF_SECOND_FN);
  for (int i = 0; i < k->nout; i++) {
    nb_cf_merged_meta(&k->out[i], t->res[i], e->res[i]); /* the dims both branches agree on */
    to_run_time(k, &k->out[i]);
  }
  return NB_OK;
}

static nb_code if_kernel(nb_kargs *k) {
  bool taken = false;
  nb_code code = read_pred(k, k->in[0], &taken);
  if (code) return code;
  nb_function *f = fn_attr(k, taken ? CF_FIRST_FN : CF_SECOND_FN);
  int fetched = f->nres + f->nacc;
  nb_tensor *small[8], **res = fetched <= 8 ? small : malloc((size_t)fetched * sizeof *res);
  if (!res) return nb_kfail(k, NB_NOMEM, "out of memory");
  code = nb_function_run(k, f, taken ? "then_branch" : "else_branch", k->in + 1, 0, res);
  for (int i = 0; i < k->nout && !code; i++) adopt(k->ctx, k->res[i], res[i]);
  if (!code) free_list(res, fetched);
  if (res != small) free(res);
  return code;
}

/* ---- StatefulPartitionedCall: a function called as a node ------------------------------------ */

static nb_code call_validate(nb_kargs *k) {
  const nb_function *f = fn_attr(k, CF_FIRST_FN);
  if (k->nin != f->nargs || k->nout != f->nres)
    return nb_kfail(k, NB_INVALID, "%d inputs and %d outputs do not fit its function (%d arguments, %d results)", k->nin,
                    k->nout, f->nargs, f->nres);
  return check_arg_dtypes(k, f, 0);
}

static nb_code call_infer(nb_kargs *k) {
  const nb_function *f = fn_attr(k, CF_FIRST_FN);
  for (int i = 0; i < k->nout; i++) {
    nb_meta_like(&k->out[i], f->res[i]);
    to_run_time(k, &k->out[i]);
  }
  return NB_OK;
}

static nb_code call_kernel(nb_kargs *k) {
  nb_function *f = fn_attr(k, CF_FIRST_FN);
  nb_tensor *small[8], **res = k->nout <= 8 ? small : malloc((size_t)k->nout * sizeof *res);
  if (!res) return nb_kfail(k, NB_NOMEM, "out of memory");
  nb_code code = nb_function_run(k, f, "function", k->in, 0, res);
  for (int i = 0; i < k->nout && !code; i++) adopt(k->ctx, k->res[i], res[i]);
  if (!code) free_list(res, k->nout);
  if (res != small) free(res);
  return code;
}

/* ---- _StackGet and _StackGetGrad: reading the accumulators -------------------------------------
   _StackGet(stack [T, ...], t) = stack[t]; _StackGetGrad(stack, t, dy) is zeros of the
   stack's shape with dy at [t] (the first one's gradient; its own gradient is _StackGet
   of the incoming gradient). Unlike GatherV2's gradient they keep the stack's static shape
   ([-1, ...] while T is unknown), which the gradient loops' shape checks need. */
enum { STACK_T = 1 };

/* The index t: an int64 scalar within the stack (rank >= 1) where known; -1 while its
   value is not known. validate checks this; the kernels read t through it. */
static nb_code stack_index(nb_kargs *k, const nb_tensor *stack, int64_t *t) {
  if (k->in[STACK_T]->dtype != NB_I64 || k->in[STACK_T]->rank > 0)
    return nb_kfail(k, NB_INVALID, "the index must be an int64 scalar, got %s %s", nb_dtype_name(k->in[STACK_T]->dtype),
                    nb_tstr(k->in[STACK_T]));
  if (stack->rank == 0) return nb_kfail(k, NB_SHAPE, "the stack must have rank >= 1, got %s", nb_tstr(stack));
  *t = -1;
  if (k->in[STACK_T]->buf) {
    *t = *(const int64_t *)nb_tdata(k->in[STACK_T]);
    if (stack->shape[0] >= 0 && (*t < 0 || *t >= stack->shape[0]))
      return nb_kfail(k, NB_INVALID, "index %lld is outside the stack of %lld entries", (long long)*t,
                      (long long)stack->shape[0]);
  }
  return NB_OK;
}

static nb_code stack_get_validate(nb_kargs *k) {
  int64_t t;
  return stack_index(k, k->in[0], &t);
}

static nb_code stack_get_infer(nb_kargs *k) {
  nb_meta_set(&k->out[0], k->in[0]->dtype, k->in[0]->rank - 1, k->in[0]->shape + 1);
  return NB_OK;
}

static size_t entry_bytes(const nb_tensor *stack) {
  return (size_t)nb_shape_size(stack->rank - 1, stack->shape + 1) * nb_dtype_size(stack->dtype);
}

/* Entry t of the stack as a view of its row: the reverse loop reads every entry once,
   and copying them out cost as much as pushing them. */
static nb_code stack_get_kernel(nb_kargs *k) {
  int64_t t = 0;
  nb_code code = stack_index(k, k->in[0], &t);
  size_t bytes = entry_bytes(k->in[0]);
  if (code || !bytes) return code;
  nb_buffer *row = nb_buffer_view(k->in[0]->buf, (size_t)t * bytes, bytes);
  if (!row) return nb_kfail(k, NB_NOMEM, "out of memory");
  nb_buffer_release(k->ctx, k->res[0]->buf);
  k->res[0]->buf = row;
  return NB_OK;
}

static nb_code stack_get_grad_validate(nb_kargs *k) {
  nb_code code = stack_get_validate(k);
  return code ? code : nb_kcheck_same_dtype(k, 0, 2);
}

static nb_code stack_get_grad_kernel(nb_kargs *k) {
  int64_t t = 0;
  nb_code code = stack_index(k, k->in[0], &t);
  if (!code && k->in[2]->size * (int64_t)nb_dtype_size(k->in[2]->dtype) != (int64_t)entry_bytes(k->in[0]))
    code = nb_kfail(k, NB_SHAPE, "dy %s does not match an entry of the stack %s", nb_tstr(k->in[2]), nb_tstr(k->in[0]));
  if (code) return code;
  size_t bytes = entry_bytes(k->in[0]);
  memset(nb_tdata(k->res[0]), 0, (size_t)k->in[0]->size * nb_dtype_size(k->in[0]->dtype));
  memcpy((char *)nb_tdata(k->res[0]) + (size_t)t * bytes, nb_tdata(k->in[2]), bytes);
  return NB_OK;
}

/* ---- _RaggedGet and _RaggedGetGrad: reading the ragged accumulators ----------------------
   A ragged stack is its values flat, with an index [T, NB_CF_INDEX_COLS] whose row t is
   value t's offset in it, rank and dims. _RaggedGet(values, t, index) is value t (a view;
   in a graph it has the static shape of attr "shape", the accumulated tensor's: dims -1
   unknown, no dims unknown rank); _RaggedGetGrad(values, t, dy, index) is zeros of
   values' shape with dy at value t's place (the first one's gradient; its own gradient is
   _RaggedGet of the incoming gradient). */
enum { RAGGED_SHAPE };

typedef struct ragged_entry {
  int64_t offset, size;
  int rank;
  int64_t shape[NB_MAX_RANK];
} ragged_entry;

/* Checks the inputs; at run time reads entry t of the index into *e. */
static nb_code ragged_entry_of(nb_kargs *k, int index_input, ragged_entry *e) {
  const nb_tensor *values = k->in[0], *t = k->in[STACK_T], *index = k->in[index_input];
  if (t->dtype != NB_I64 || t->rank != 0)
    return nb_kfail(k, NB_INVALID, "the index must be an int64 scalar, got %s %s", nb_dtype_name(t->dtype), nb_tstr(t));
  bool index_ok = index->rank < 0 || (index->rank == 2 && (index->shape[1] < 0 || index->shape[1] == NB_CF_INDEX_COLS));
  if (index->dtype != NB_I64 || !index_ok)
    return nb_kfail(k, NB_INVALID, "the stack index must be int64 [T, %d], got %s %s", NB_CF_INDEX_COLS,
                    nb_dtype_name(index->dtype), nb_tstr(index));
  if (values->rank >= 0 && values->rank != 1)
    return nb_kfail(k, NB_SHAPE, "the values must be flat, got %s", nb_tstr(values));
  if (!t->buf || !index->buf) return NB_OK; /* a graph: nothing to read yet */
  int64_t at = *(const int64_t *)nb_tdata(t);
  if (at < 0 || at >= index->shape[0])
    return nb_kfail(k, NB_INVALID, "index %lld is outside the stack of %lld entries", (long long)at,
                    (long long)index->shape[0]);
  const int64_t *row = (const int64_t *)nb_tdata(index) + at * NB_CF_INDEX_COLS;
  e->offset = row[0];
  e->rank = (int)row[1];
  bool ok = row[1] >= 0 && row[1] <= NB_MAX_RANK && nb_shape_checked_size(e->rank, row + 2, &e->size);
  if (ok) memcpy(e->shape, row + 2, (size_t)e->rank * sizeof *e->shape);
  if (!ok || e->offset < 0 || e->offset > values->size - e->size)
    return nb_kfail(k, NB_CORRUPT, "entry %lld of the stack index does not fit the %lld values", (long long)at,
                    (long long)values->size);
  return NB_OK;
}

static nb_code ragged_get_validate(nb_kargs *k) {
  ragged_entry e;
  return ragged_entry_of(k, 2, &e);
}

/* validate has checked the entry, so reading it again cannot fail. */
static nb_code ragged_get_infer(nb_kargs *k) {
  ragged_entry e = {0};
  nb_code code = ragged_entry_of(k, 2, &e);
  if (code) return code;
  const nb_attrval *s = &k->attr[RAGGED_SHAPE];
  if (k->ctx->graph) nb_meta_set(&k->out[0], k->in[0]->dtype, s->n, s->ints);
  else nb_meta_set(&k->out[0], k->in[0]->dtype, e.rank, e.shape);
  return NB_OK;
}

/* Entry t as a view of its elements (as _StackGet's). */
static nb_code ragged_get_kernel(nb_kargs *k) {
  ragged_entry e = {0};
  nb_code code = ragged_entry_of(k, 2, &e);
  size_t size = nb_dtype_size(k->in[0]->dtype);
  if (code || !e.size) return code;
  nb_buffer *view = nb_buffer_view(k->in[0]->buf, (size_t)e.offset * size, (size_t)e.size * size);
  if (!view) return nb_kfail(k, NB_NOMEM, "out of memory");
  nb_buffer_release(k->ctx, k->res[0]->buf);
  k->res[0]->buf = view;
  return NB_OK;
}

static nb_code ragged_get_grad_validate(nb_kargs *k) {
  ragged_entry e;
  nb_code code = ragged_entry_of(k, 3, &e);
  return code ? code : nb_kcheck_same_dtype(k, 0, 2);
}

static nb_code ragged_get_grad_infer(nb_kargs *k) {
  ragged_entry e = {0};
  nb_code code = ragged_entry_of(k, 3, &e);
  if (!code && !k->ctx->graph && k->in[2]->size != e.size)
    code = nb_kfail(k, NB_SHAPE, "dy %s does not match entry %s of the stack", nb_tstr(k->in[2]),
                    nb_sstr(e.rank, e.shape));
  if (!code) nb_meta_like(&k->out[0], k->in[0]);
  return code;
}

static nb_code ragged_get_grad_kernel(nb_kargs *k) {
  ragged_entry e = {0};
  nb_code code = ragged_entry_of(k, 3, &e);
  if (code) return code;
  size_t size = nb_dtype_size(k->in[0]->dtype);
  if (k->res[0]->size) memset(nb_tdata(k->res[0]), 0, (size_t)k->res[0]->size * size);
  if (e.size) memcpy((char *)nb_tdata(k->res[0]) + (size_t)e.offset * size, nb_tdata(k->in[2]), (size_t)e.size * size);
  return NB_OK;
}

/* ---- _EnsureShape: a gradient loop's variable held to its declared shape -----------------
   Output 0 is input 0 (a view) with the static shape of attr "shape" (TF's EnsureShape;
   dims -1 unknown, no dims given: unknown rank) wherever that says more: a gradient may
   know less about its result than the loop does (a Reshape to a shape computed at run
   time has unknown rank). Graphs check only the rank (their inference probes unknown
   dims with stand-in sizes); at run time every declared dim must match. */
enum { ENSURE_SHAPE };

static nb_code ensure_shape_validate(nb_kargs *k) {
  const nb_tensor *x = k->in[0];
  const nb_attrval *s = &k->attr[ENSURE_SHAPE];
  bool run_time = !k->ctx->graph;
  bool fits = run_time ? nb_shape_fits(x->rank, x->shape, s->n, s->ints) : x->rank == s->n;
  if (s->n >= 0 && x->rank >= 0 && !fits)
    return nb_kfail(k, NB_SHAPE, "the value has shape %s, which its declared shape %s does not admit", nb_tstr(x),
                    nb_sstr(s->n, s->ints));
  return NB_OK;
}

static nb_code ensure_shape_infer(nb_kargs *k) {
  const nb_tensor *x = k->in[0];
  const nb_attrval *s = &k->attr[ENSURE_SHAPE];
  nb_meta *m = &k->out[0];
  nb_meta_like(m, x);
  if (s->n < 0) return NB_OK;
  m->rank = s->n;
  for (int d = 0; d < s->n; d++)
    if (x->rank < 0 || s->ints[d] >= 0) m->shape[d] = s->ints[d];
  return NB_OK;
}

static nb_op_def control_flow_ops[] = {
    {.name = "While", .nin = 0, .variadic = true, .nout = NB_VARIADIC, .alias = -1, .stateful = true, .any_rank = true, .nattrs = 4,
     .attrs = {{"N", NB_ATTR_INT, {.i = 1}, true},
               {"_cond", NB_ATTR_INT, {.i = 0}, true},
               {"_body", NB_ATTR_INT, {.i = 0}, true},
               {"parallel_iterations", NB_ATTR_INT, {.i = 10}, false}},
     .validate = while_validate, .infer = while_infer, .kernel = while_kernel},
    {.name = "If", .nin = 0, .variadic = true, .nout = NB_VARIADIC, .alias = -1, .stateful = true, .any_rank = true, .nattrs = 3,
     .attrs = {{"N", NB_ATTR_INT, {.i = 1}, true},
               {"_then_branch", NB_ATTR_INT, {.i = 0}, true},
               {"_else_branch", NB_ATTR_INT, {.i = 0}, true}},
     .validate = if_validate, .infer = if_infer, .kernel = if_kernel},
    {.name = "StatefulPartitionedCall", .nin = 0, .variadic = true, .nout = NB_VARIADIC, .alias = -1, .stateful = true, .any_rank = true,
     .nattrs = 2,
     .attrs = {{"N", NB_ATTR_INT, {.i = 1}, true}, {"_f", NB_ATTR_INT, {.i = 0}, true}},
     .validate = call_validate, .infer = call_infer, .kernel = call_kernel},
    {.name = "_StackGet", .nin = 2, .nout = 1, .alias = -1, .validate = stack_get_validate,
     .infer = stack_get_infer, .kernel = stack_get_kernel},
    {.name = "_StackGetGrad", .nin = 3, .nout = 1, .alias = -1, .t_input = 2,
     .validate = stack_get_grad_validate, .infer = nb_infer_same, .kernel = stack_get_grad_kernel},
    {.name = "_RaggedGet", .nin = 3, .nout = 1, .alias = -1, .any_rank = true, .nattrs = 1,
     .attrs = {{"shape", NB_ATTR_INTS, {.n = -1}, false}}, .validate = ragged_get_validate, .infer = ragged_get_infer,
     .kernel = ragged_get_kernel},
    {.name = "_RaggedGetGrad", .nin = 4, .nout = 1, .alias = -1, .t_input = 2, .any_rank = true,
     .validate = ragged_get_grad_validate, .infer = ragged_get_grad_infer, .kernel = ragged_get_grad_kernel},
    {.name = "_EnsureShape", .nin = 1, .nout = 1, .alias = 0, .any_rank = true, .nattrs = 1,
     .attrs = {{"shape", NB_ATTR_INTS, {.n = -1}, false}}, .validate = ensure_shape_validate, .infer = ensure_shape_infer},
};

nb_op_family nb_control_flow_family(void) {
  return (nb_op_family){control_flow_ops, sizeof control_flow_ops / sizeof *control_flow_ops};
}
