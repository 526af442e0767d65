/* Control-flow ops. While, If and StatefulPartitionedCall (TF's functional ops) run
   function graphs, which sit in src/func above ops: their defs are here, like every op's,
   but their validate, infer and kernel are src/func's (src/func/function_ops.c), filled
   in by nbop_install_function_ops. All are stateful as in TF (never folded at build time).
   _StackGet and _StackGetGrad (_RaggedGet and _RaggedGetGrad for values whose shapes may
   change) read the accumulators in the gradient loops; _EnsureShape holds those loops'
   variables to their declared shapes. */
#include "op.h"

#include <string.h>

/* ---- _StackGet and _StackGetGrad: reading the accumulators -------------------------------------
   _StackGet(stack [T, ...], t) = stack[t]; _StackGetGrad(stack, t, dy) is zeros of the
   stack's shape with dy at [t] (the first one's gradient; its own gradient is _StackGet
   of the incoming gradient). Unlike GatherV2's gradient they keep the stack's static shape
   ([-1, ...] while T is unknown), which the gradient loops' shape checks need. */
enum { STACK_T = 1 };

/* The index t: an int64 scalar within the stack (rank >= 1) where known; -1 while its
   value is not known. validate checks this; the kernels read t through it. */
static nb_code stack_index(nbop_kargs *k, const nb_tensor *stack, int64_t *t) {
  if (k->in[STACK_T]->dtype != NB_I64 || k->in[STACK_T]->rank > 0)
    return nbop_kfail(k, NB_INVALID, "the index must be an int64 scalar, got %s %s",
                      nb_dtype_name(k->in[STACK_T]->dtype), nbop_tstr(k->in[STACK_T]));
  if (stack->rank == 0) return nbop_kfail(k, NB_SHAPE, "the stack must have rank >= 1, got %s", nbop_tstr(stack));
  *t = -1;
  if (k->in[STACK_T]->buf) {
    *t = *(const int64_t *)nbcore_tdata(k->in[STACK_T]);
    if (stack->shape[0] >= 0 && (*t < 0 || *t >= stack->shape[0]))
      return nbop_kfail(k, NB_INVALID, "index %lld is outside the stack of %lld entries", (long long)*t,
                        (long long)stack->shape[0]);
  }
  return NB_OK;
}

static nb_code stack_get_validate(nbop_kargs *k) {
  int64_t t;
  return stack_index(k, k->in[0], &t);
}

static nb_code stack_get_infer(nbop_kargs *k) {
  nbop_meta_set(&k->out[0], k->in[0]->dtype, k->in[0]->rank - 1, k->in[0]->shape + 1);
  return NB_OK;
}

static size_t entry_bytes(const nb_tensor *stack) {
  return (size_t)nbcore_shape_size(stack->rank - 1, stack->shape + 1) * nb_dtype_size(stack->dtype);
}

/* Entry t of the stack as a view of its row: the reverse loop reads every entry once,
   and copying them out cost as much as pushing them. */
static nb_code stack_get_kernel(nbop_kargs *k) {
  int64_t t = 0;
  nb_code code = stack_index(k, k->in[0], &t);
  size_t bytes = entry_bytes(k->in[0]);
  if (code || !bytes) return code;
  nbcore_buffer *row = nbcore_buffer_view(k->in[0]->buf, (size_t)t * bytes, bytes);
  if (!row) return nbop_kfail(k, NB_NOMEM, "out of memory");
  nbcore_buffer_release(k->ctx, k->res[0]->buf);
  k->res[0]->buf = row;
  return NB_OK;
}

static nb_code stack_get_grad_validate(nbop_kargs *k) {
  nb_code code = stack_get_validate(k);
  return code ? code : nbop_kcheck_same_dtype(k, 0, 2);
}

static nb_code stack_get_grad_kernel(nbop_kargs *k) {
  int64_t t = 0;
  nb_code code = stack_index(k, k->in[0], &t);
  if (!code && k->in[2]->size * (int64_t)nb_dtype_size(k->in[2]->dtype) != (int64_t)entry_bytes(k->in[0]))
    code = nbop_kfail(k, NB_SHAPE, "dy %s does not match an entry of the stack %s", nbop_tstr(k->in[2]),
                      nbop_tstr(k->in[0]));
  if (code) return code;
  size_t bytes = entry_bytes(k->in[0]);
  memset(nbcore_tdata(k->res[0]), 0, (size_t)k->in[0]->size * nb_dtype_size(k->in[0]->dtype));
  memcpy((char *)nbcore_tdata(k->res[0]) + (size_t)t * bytes, nbcore_tdata(k->in[2]), bytes);
  return NB_OK;
}

/* ---- _RaggedGet and _RaggedGetGrad: reading the ragged accumulators ----------------------
   A ragged stack is its values flat, with an index [T, NBOP_CF_INDEX_COLS] whose row t is
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
static nb_code ragged_entry_of(nbop_kargs *k, int index_input, ragged_entry *e) {
  const nb_tensor *values = k->in[0], *t = k->in[STACK_T], *index = k->in[index_input];
  if (t->dtype != NB_I64 || t->rank != 0)
    return nbop_kfail(k, NB_INVALID, "the index must be an int64 scalar, got %s %s", nb_dtype_name(t->dtype),
                      nbop_tstr(t));
  bool index_ok =
      index->rank < 0 || (index->rank == 2 && (index->shape[1] < 0 || index->shape[1] == NBOP_CF_INDEX_COLS));
  if (index->dtype != NB_I64 || !index_ok)
    return nbop_kfail(k, NB_INVALID, "the stack index must be int64 [T, %d], got %s %s", NBOP_CF_INDEX_COLS,
                      nb_dtype_name(index->dtype), nbop_tstr(index));
  if (values->rank >= 0 && values->rank != 1)
    return nbop_kfail(k, NB_SHAPE, "the values must be flat, got %s", nbop_tstr(values));
  if (!t->buf || !index->buf) return NB_OK; /* a graph: nothing to read yet */
  int64_t at = *(const int64_t *)nbcore_tdata(t);
  if (at < 0 || at >= index->shape[0])
    return nbop_kfail(k, NB_INVALID, "index %lld is outside the stack of %lld entries", (long long)at,
                      (long long)index->shape[0]);
  const int64_t *row = (const int64_t *)nbcore_tdata(index) + at * NBOP_CF_INDEX_COLS;
  e->offset = row[0];
  e->rank = (int)row[1];
  bool ok = row[1] >= 0 && row[1] <= NB_MAX_RANK && nbcore_shape_checked_size(e->rank, row + 2, &e->size);
  if (ok) memcpy(e->shape, row + 2, (size_t)e->rank * sizeof *e->shape);
  if (!ok || e->offset < 0 || e->offset > values->size - e->size)
    return nbop_kfail(k, NB_CORRUPT, "entry %lld of the stack index does not fit the %lld values", (long long)at,
                      (long long)values->size);
  return NB_OK;
}

static nb_code ragged_get_validate(nbop_kargs *k) {
  ragged_entry e;
  return ragged_entry_of(k, 2, &e);
}

/* validate has checked the entry, so reading it again cannot fail. */
static nb_code ragged_get_infer(nbop_kargs *k) {
  ragged_entry e = {0};
  nb_code code = ragged_entry_of(k, 2, &e);
  if (code) return code;
  const nbop_attrval *s = &k->attr[RAGGED_SHAPE];
  if (k->ctx->graph)
    nbop_meta_set(&k->out[0], k->in[0]->dtype, s->n, s->ints);
  else
    nbop_meta_set(&k->out[0], k->in[0]->dtype, e.rank, e.shape);
  return NB_OK;
}

/* Entry t as a view of its elements (as _StackGet's). */
static nb_code ragged_get_kernel(nbop_kargs *k) {
  ragged_entry e = {0};
  nb_code code = ragged_entry_of(k, 2, &e);
  size_t size = nb_dtype_size(k->in[0]->dtype);
  if (code || !e.size) return code;
  nbcore_buffer *view = nbcore_buffer_view(k->in[0]->buf, (size_t)e.offset * size, (size_t)e.size * size);
  if (!view) return nbop_kfail(k, NB_NOMEM, "out of memory");
  nbcore_buffer_release(k->ctx, k->res[0]->buf);
  k->res[0]->buf = view;
  return NB_OK;
}

static nb_code ragged_get_grad_validate(nbop_kargs *k) {
  ragged_entry e;
  nb_code code = ragged_entry_of(k, 3, &e);
  return code ? code : nbop_kcheck_same_dtype(k, 0, 2);
}

static nb_code ragged_get_grad_infer(nbop_kargs *k) {
  ragged_entry e = {0};
  nb_code code = ragged_entry_of(k, 3, &e);
  if (!code && !k->ctx->graph && k->in[2]->size != e.size)
    code = nbop_kfail(k, NB_SHAPE, "dy %s does not match entry %s of the stack", nbop_tstr(k->in[2]),
                      nbop_sstr(e.rank, e.shape));
  if (!code) nbop_meta_like(&k->out[0], k->in[0]);
  return code;
}

static nb_code ragged_get_grad_kernel(nbop_kargs *k) {
  ragged_entry e = {0};
  nb_code code = ragged_entry_of(k, 3, &e);
  if (code) return code;
  size_t size = nb_dtype_size(k->in[0]->dtype);
  if (k->res[0]->size) memset(nbcore_tdata(k->res[0]), 0, (size_t)k->res[0]->size * size);
  if (e.size)
    memcpy((char *)nbcore_tdata(k->res[0]) + (size_t)e.offset * size, nbcore_tdata(k->in[2]), (size_t)e.size * size);
  return NB_OK;
}

/* ---- _EnsureShape: a gradient loop's variable held to its declared shape -----------------
   Output 0 is input 0 (a view) with the static shape of attr "shape" (TF's EnsureShape;
   dims -1 unknown, no dims given: unknown rank) wherever that says more: a gradient may
   know less about its result than the loop does (a Reshape to a shape computed at run
   time has unknown rank). Graphs check only the rank (their inference probes unknown
   dims with stand-in sizes); at run time every declared dim must match. */
enum { ENSURE_SHAPE };

static nb_code ensure_shape_validate(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  const nbop_attrval *s = &k->attr[ENSURE_SHAPE];
  bool run_time = !k->ctx->graph;
  bool fits = run_time ? nbcore_shape_fits(x->rank, x->shape, s->n, s->ints) : x->rank == s->n;
  if (s->n >= 0 && x->rank >= 0 && !fits)
    return nbop_kfail(k, NB_SHAPE, "the value has shape %s, which its declared shape %s does not admit", nbop_tstr(x),
                      nbop_sstr(s->n, s->ints));
  return NB_OK;
}

static nb_code ensure_shape_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  const nbop_attrval *s = &k->attr[ENSURE_SHAPE];
  nbop_meta *m = &k->out[0];
  nbop_meta_like(m, x);
  if (s->n < 0) return NB_OK;
  m->rank = s->n;
  for (int d = 0; d < s->n; d++)
    if (x->rank < 0 || s->ints[d] >= 0) m->shape[d] = s->ints[d];
  return NB_OK;
}

/* The first NBOP_FUNCTION_OPS entries, in the order of their enum, get src/func's
   functions from nbop_install_function_ops. */
static nbop_def control_flow_ops[] = {
    {.name = "While",
     .nin = 0,
     .variadic = true,
     .nout = NBOP_VARIADIC,
     .alias = -1,
     .stateful = true,
     .any_rank = true,
     .nattrs = 4,
     .attrs = {{"N", NB_ATTR_INT, {.i = 1}, true},
               {"_cond", NB_ATTR_INT, {.i = 0}, true},
               {"_body", NB_ATTR_INT, {.i = 0}, true},
               {"parallel_iterations", NB_ATTR_INT, {.i = 10}, false}}},
    {.name = "If",
     .nin = 0,
     .variadic = true,
     .nout = NBOP_VARIADIC,
     .alias = -1,
     .stateful = true,
     .any_rank = true,
     .nattrs = 3,
     .attrs = {{"N", NB_ATTR_INT, {.i = 1}, true},
               {"_then_branch", NB_ATTR_INT, {.i = 0}, true},
               {"_else_branch", NB_ATTR_INT, {.i = 0}, true}}},
    {.name = "StatefulPartitionedCall",
     .nin = 0,
     .variadic = true,
     .nout = NBOP_VARIADIC,
     .alias = -1,
     .stateful = true,
     .any_rank = true,
     .nattrs = 2,
     .attrs = {{"N", NB_ATTR_INT, {.i = 1}, true}, {"_f", NB_ATTR_INT, {.i = 0}, true}}},
    {.name = "_StackGet",
     .nin = 2,
     .nout = 1,
     .alias = -1,
     .validate = stack_get_validate,
     .infer = stack_get_infer,
     .kernel = stack_get_kernel},
    {.name = "_StackGetGrad",
     .nin = 3,
     .nout = 1,
     .alias = -1,
     .t_input = 2,
     .validate = stack_get_grad_validate,
     .infer = nbop_infer_same,
     .kernel = stack_get_grad_kernel},
    {.name = "_RaggedGet",
     .nin = 3,
     .nout = 1,
     .alias = -1,
     .any_rank = true,
     .nattrs = 1,
     .attrs = {{"shape", NB_ATTR_INTS, {.n = -1}, false}},
     .validate = ragged_get_validate,
     .infer = ragged_get_infer,
     .kernel = ragged_get_kernel},
    {.name = "_RaggedGetGrad",
     .nin = 4,
     .nout = 1,
     .alias = -1,
     .t_input = 2,
     .any_rank = true,
     .validate = ragged_get_grad_validate,
     .infer = ragged_get_grad_infer,
     .kernel = ragged_get_grad_kernel},
    {.name = "_EnsureShape",
     .nin = 1,
     .nout = 1,
     .alias = 0,
     .any_rank = true,
     .nattrs = 1,
     .attrs = {{"shape", NB_ATTR_INTS, {.n = -1}, false}},
     .validate = ensure_shape_validate,
     .infer = ensure_shape_infer},
};

nbop_family nbop_control_flow_family(void) {
  return (nbop_family){control_flow_ops, sizeof control_flow_ops / sizeof *control_flow_ops};
}

/* src/func calls this once, under its pthread_once, before it makes its first function:
   the writes happen before any node of these ops exists, and a thread that later runs
   one got its function through that once. */
void nbop_install_function_ops(const nbop_impl impl[NBOP_FUNCTION_OPS]) {
  for (int i = 0; i < NBOP_FUNCTION_OPS; i++) {
    control_flow_ops[i].validate = impl[i].validate;
    control_flow_ops[i].infer = impl[i].infer;
    control_flow_ops[i].kernel = impl[i].kernel;
  }
}
