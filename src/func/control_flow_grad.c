/* Gradients of the control-flow ops. These build function graphs, so unlike the other
   gradient files they use the internals of function.c.
   - StatefulPartitionedCall: the user's gradient for the function when set, else TF's
     SymbolicGradient: a call of the function's gradient function, which recomputes the
     forward intermediates it reads from the arguments.
   - If, as cond_v2: an If on the same predicate whose branches are the branches'
     gradient functions; the intermediates those read become extra outputs of the forward
     If (each branch outputs its own, and a zero scalar for each of the other's: nothing
     reads those, so they need no shape), and the gradient uses the taken branch's values
     instead of computing them again. Their gradients (second order) enter the branch
     gradients as extra seeds.
   - While, as while_v2: the forward loop stacks, every iteration, each intermediate the
     body's gradient reads that changes between iterations (the accumulators, extra
     outputs of the forward While; ragged, with an index, when the intermediate's shape
     may change); the gradient is a While that runs the same number of iterations
     backwards, reading iteration T-1-i of each stack and calling one reverse step of the
     body's gradient, carrying the loop variables' gradients and summing the captured
     tensors' gradients, each declared with the shapes its forward value may take. That
     loop is an ordinary While, so its own gradient (second order) is built the same way;
     the gradients that then reach the forward loop's accumulators enter the reverse step
     as extra seeds. */
#include "func.h"

#include <stdlib.h>
#include <string.h>

static nb_tensor *stack_get(nb_ctx *c, nb_tensor *stack, nb_tensor *t);
static nb_tensor *ragged_get(nb_ctx *c, nb_tensor *values, nb_tensor *t, nb_tensor *index, const nb_tensor *like);

/* The output of internal op `type` on in[0..nin) whose attr "shape" (its only one) is
   (rank, dims): a static shape, rank -1 unknown. */
static nb_tensor *shaped_call(nb_ctx *c, const char *type, nb_tensor *const *in, int nin, int rank,
                              const int64_t *dims) {
  const nbop_def *def = nbop_lookup(type);
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(def, a);
  a[0].ints = dims;
  a[0].n = rank;
  nb_tensor *out = NULL;
  nbop_dispatch(c, def, in, nin, a, &out, 1);
  return out;
}

static nb_function *fn_of(const nb_fwd_op *op, const char *attr) { return nbfunc_from_bits(nb_fwd_attr_int(op, attr)); }

/* A new argument placeholder of f with like's dtype and static shape. */
static nb_tensor *new_arg(nb_function *f, const nb_tensor *like, const char *name) {
  nbop_meta m;
  nbop_meta_set(&m, like->dtype, like->rank, like->shape);
  int32_t id = nbgraph_add_arg(f->g, &m, name);
  return id < 0 ? NULL : nbgraph_handle(f->c, f->g, id, 0);
}

/* ---- calls and branches ------------------------------------------------------------------------ */

/* The gradient function's inputs: the op's inputs, then the gradients of the float
   results of f (zeros where none came). */
static nb_tensor **grad_fn_inputs(nb_ctx *c, const nb_fwd_op *op, const nb_function *f, nb_tensor *const *dys, int *n) {
  int nin = nb_fwd_num_inputs(op);
  nb_tensor **ins = malloc(((size_t)nin + (size_t)f->nres + 1) * sizeof *ins);
  if (!ins) {
    nb_set_error(c, NB_NOMEM, "%s gradient: out of memory", nb_fwd_type(op));
    return NULL;
  }
  *n = 0;
  for (int i = 0; i < nin; i++) ins[(*n)++] = nb_fwd_input(op, i);
  for (int o = 0; o < f->nres; o++)
    if (nbcore_is_float(f->res[o]->dtype)) ins[(*n)++] = dys[o] ? dys[o] : nb_zeros_like(c, nb_fwd_output(op, o));
  return ins;
}

/* dxs[first + i] = outs[i] for the float inputs; the others' results are dropped. */
static void hand_out(const nb_fwd_op *op, nb_tensor **outs, int n, int first, nb_tensor **dxs) {
  for (int i = 0; i < n; i++) {
    if (nbcore_is_float(nb_dtype_of(nb_fwd_input(op, first + i))))
      dxs[first + i] = outs[i];
    else
      nb_tensor_free(outs[i]);
  }
}

/* d f(x)/dx is f's gradient function applied to (x, dys): the chain rule through the body. */
static nb_code call_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_function *f = fn_of(op, "_f");
  if (f->user_grad) return f->user_grad(c, op, dys, dxs);
  nb_function *g = nbfunc_gradient(c, f);
  int n = 0;
  nb_tensor **ins = g ? grad_fn_inputs(c, op, f, dys, &n) : NULL;
  nb_tensor **outs = ins ? malloc(((size_t)f->nargs + 1) * sizeof *outs) : NULL;
  nb_code code = nb_status(c);
  if (!code && !outs) code = nb_set_error(c, NB_NOMEM, "StatefulPartitionedCall gradient: out of memory");
  if (!code) code = nbfunc_call_node(c, g, ins, outs);
  if (!code) hand_out(op, outs, f->nargs, 0, dxs);
  free(outs);
  free(ins);
  return code;
}

/* ---- If, as cond_v2 ------------------------------------------------------------------------- */

/* Appends key to keys[0..*n) unless present, counting it in *extra; false when out of memory. */
static bool add_key(int64_t **keys, int *n, int *extra, int64_t key) {
  for (int k = 0; k < *n; k++)
    if ((*keys)[k] == key) return true;
  int64_t *grown = realloc(*keys, ((size_t)*n + 1) * sizeof *grown);
  if (!grown) return false;
  *keys = grown;
  (*keys)[(*n)++] = key;
  (*extra)++;
  return true;
}

/* Which forward tensors a gradient takes from the forward run instead of recomputing. */
typedef bool (*read_filter)(const nb_graph *g, const nbgraph_edge *e, uint32_t gen);

/* The forward tensors (nodes below nfwd) that keep selects and the gradient nodes (from
   `from` on) read, appended to *keys unless present; *extra counts the new ones. */
static nb_code gradient_reads(const nb_graph *g, int32_t from, int32_t nfwd, read_filter keep, uint32_t gen,
                              int64_t **keys, int *n, int *extra) {
  *extra = 0;
  for (int32_t id = from; id < g->nnodes; id++) {
    const nbgraph_node *u = &g->nodes[id];
    for (int32_t i = 0; i < u->nin; i++) {
      const nbgraph_edge *e = &g->edges[u->in0 + i];
      if (e->src >= nfwd || !keep(g, e, gen)) continue;
      if (!add_key(keys, n, extra, nbgraph_key(e->src, e->out))) return NB_NOMEM;
    }
  }
  return NB_OK;
}

/* If branches: every computed tensor (not an argument, not known at build time). */
static bool computed(const nb_graph *g, const nbgraph_edge *e, uint32_t gen) {
  (void)gen;
  const nbgraph_node *src = &g->nodes[e->src];
  return strcmp(src->def->name, "Placeholder") != 0 && !g->outs[src->out0 + e->out].value;
}

static nb_tensor *handle_at(nb_function *b, int64_t key) {
  return nbgraph_handle(b->c, b->g, nbgraph_key_node(key), nbgraph_key_out(key));
}

static bool own_slot(const nbfunc_if_grad *w, int which, int a) { return (a < w->nread[0]) == (which == 0); }

/* A branch's gradient in its graph. Seeds: d of each float result, and when seeded, d of
   each float intermediate slot (its own are seeded, the other branch's get unused
   placeholders). *extra: those seed arguments' keys; *dx: the arguments' gradients; the
   intermediates read are appended to *reads (a seeded build must add none). */
typedef struct branch_grad {
  int64_t *dx, *extra, *reads;
  int nextra, nreads;
} branch_grad;

static nb_code seeds_of(nb_function *b, const nbfunc_if_grad *w, int which, bool seeded, nb_tensor **ys,
                        nb_tensor **gys, int *ny, branch_grad *r) {
  for (int o = 0; o < b->nres; o++) {
    if (!nbcore_is_float(b->res[o]->dtype)) continue;
    nb_tensor *ph = new_arg(b, b->res[o], "dy");
    if (!ph) return NB_NOMEM;
    ys[*ny] = b->res[o];
    gys[(*ny)++] = ph;
    r->extra[r->nextra++] = nbgraph_key_of(ph);
  }
  for (int a = 0; seeded && a < w->nread[0] + w->nread[1]; a++) {
    nb_tensor *slot = handle_at(b, w->slots[which][a]);
    if (!slot) return NB_NOMEM;
    if (!nbcore_is_float(slot->dtype)) continue;
    bool own = own_slot(w, which, a);
    nb_tensor *ph =
        own ? new_arg(b, slot, "d_intermediate") : new_arg(b, &(nb_tensor){.dtype = slot->dtype, .rank = -1}, "unused");
    if (!ph) return NB_NOMEM;
    if (own) ys[*ny] = slot, gys[(*ny)++] = ph;
    r->extra[r->nextra++] = nbgraph_key_of(ph);
  }
  return NB_OK;
}

static nb_code build_branch_grad(nb_ctx *c, nb_function *b, const nbfunc_if_grad *w, int which, bool seeded,
                                 branch_grad *r) {
  int nexp = seeded ? w->nread[0] + w->nread[1] : 0, cap = b->nres + nexp + 1, ny = 0;
  nb_tensor **ys = malloc(((size_t)2 * cap + b->nargs + 1) * sizeof *ys), **gys = ys + cap, **dx = gys + cap;
  r->extra = malloc((size_t)cap * sizeof *r->extra);
  r->dx = malloc(((size_t)b->nargs + 1) * sizeof *r->dx);
  nb_code code = !ys || !r->extra || !r->dx ? NB_NOMEM : seeds_of(b, w, which, seeded, ys, gys, &ny, r);
  int32_t from = b->g->nnodes;
  if (!code) code = nbfunc_grads(b, ys, gys, ny, b->args, b->nargs, dx);
  for (int i = 0; i < b->nargs && !code; i++) r->dx[i] = nbgraph_key_of(dx[i]);
  int extra = 0, nfwd = seeded ? w->nfwd[which] : from;
  if (!code && gradient_reads(b->g, from, nfwd, computed, 0, &r->reads, &r->nreads, &extra)) code = NB_NOMEM;
  if (!code && seeded && extra)
    code = nb_set_error(c, NB_UNIMPLEMENTED,
                        "If gradient: this second-order gradient reads %d branch intermediates the "
                        "first-order gradient did not",
                        extra);
  nbfunc_grad_done(c, b, "If gradient", code);
  free(ys);
  return code;
}

static void branch_grad_free(branch_grad *r) {
  free(r->dx);
  free(r->extra);
  free(r->reads);
}

/* The branch gradient function: arguments (b's arguments..., the intermediate slots...,
   the seeds...), results the arguments' gradients. */
static nb_function *extract_branch_grad(nb_ctx *c, nb_function *b, const nbfunc_if_grad *w, int which,
                                        const branch_grad *r) {
  int nexp = w->nread[0] + w->nread[1], n = 0;
  int64_t *keys = malloc(((size_t)b->nargs + nexp + r->nextra + 1) * sizeof *keys);
  if (!keys) {
    nb_set_error(c, NB_NOMEM, "If gradient: out of memory");
    return NULL;
  }
  for (int i = 0; i < b->nargs; i++) keys[n++] = nbgraph_key_of(b->args[i]);
  for (int a = 0; a < nexp; a++) keys[n++] = w->slots[which][a];
  for (int i = 0; i < r->nextra; i++) keys[n++] = r->extra[i];
  nb_function *f = nbfunc_extract(c, b->g, b->g, keys, n, r->dx, b->nargs);
  free(keys);
  return f;
}

/* Each branch's slots: its own intermediates, and placeholders of the other's dtypes. */
static nb_code make_slots(nb_function *const *br, nbfunc_if_grad *w, branch_grad *r) {
  int nexp = w->nread[0] + w->nread[1];
  for (int b = 0; b < 2; b++) {
    if (!(w->slots[b] = malloc(((size_t)nexp + 1) * sizeof *w->slots[b]))) return NB_NOMEM;
    for (int a = 0; a < nexp; a++) {
      int src = a < w->nread[0] ? 0 : 1, idx = src ? a - w->nread[0] : a;
      int64_t key = r[src].reads[idx];
      if (src == b) {
        w->slots[b][a] = key;
        continue;
      }
      const nb_graph *g = br[src]->g;
      nb_tensor like = {.dtype = g->outs[g->nodes[nbgraph_key_node(key)].out0 + nbgraph_key_out(key)].meta.dtype,
                        .rank = -1};
      nb_tensor *ph = new_arg(br[b], &like, "other_branch");
      if (!ph) return NB_NOMEM;
      w->slots[b][a] = nbgraph_key_of(ph);
    }
  }
  return NB_OK;
}

/* The If's extra results: branch b outputs its own intermediates and zeros for the other's. */
static nb_code expose(nb_function *b, const nbfunc_if_grad *w, int which) {
  int nexp = w->nread[0] + w->nread[1];
  nb_tensor **res = realloc(b->res, ((size_t)b->nres + nexp + 1) * sizeof *res);
  if (!res) return NB_NOMEM;
  b->res = res;
  for (int a = 0; a < nexp; a++) {
    nb_tensor *slot = handle_at(b, w->slots[which][a]);
    if (slot && !own_slot(w, which, a)) slot = nb_scalar(b->c, slot->dtype, 0);
    if (!slot) return NB_NOMEM;
    b->res[b->nres + a] = slot;
  }
  b->nacc = nexp;
  return NB_OK;
}

/* Gives the If node of op outputs for the exposed intermediates it lacks. */
static nb_code add_exposed_outputs(const nb_fwd_op *op, const nb_function *t, const nb_function *e) {
  nb_tensor *first = nb_fwd_output(op, 0);
  nb_graph *g = first->graph;
  int have = g->nodes[first->node].nout - t->nres, n = t->nacc - have;
  if (n <= 0) return NB_OK;
  nbop_meta *m = malloc((size_t)n * sizeof *m);
  if (!m) return NB_NOMEM;
  for (int i = 0; i < n; i++) nbfunc_cf_merged_meta(&m[i], t->res[t->nres + have + i], e->res[t->nres + have + i]);
  nb_code code = nbgraph_add_outputs(g, first->node, m, n) ? NB_NOMEM : NB_OK;
  free(m);
  return code;
}

/* Builds both branches' gradients (finding their intermediates), the slots, the branch
   gradient functions, and exposes the intermediates as If outputs. */
static nb_code build_if_grad(nb_ctx *c, nb_function *const *br) {
  nbfunc_if_grad *w = calloc(1, sizeof *w);
  branch_grad r[2] = {{0}, {0}};
  nb_code code = w ? NB_OK : NB_NOMEM;
  for (int b = 0; b < 2 && !code; b++) {
    w->nfwd[b] = br[b]->g->nnodes;
    code = build_branch_grad(c, br[b], w, b, false, &r[b]);
    w->nread[b] = r[b].nreads;
  }
  if (!code && make_slots(br, w, r)) code = NB_NOMEM;
  for (int b = 0; b < 2 && !code; b++)
    if (!(w->fn[0][b] = extract_branch_grad(c, br[b], w, b, &r[b]))) code = nb_status(c);
  for (int b = 0; b < 2 && !code; b++)
    if (expose(br[b], w, b)) code = NB_NOMEM;
  branch_grad_free(&r[0]);
  branch_grad_free(&r[1]);
  if (code == NB_NOMEM && !nb_status(c)) nb_set_error(c, code, "If gradient: out of memory");
  if (code) {
    nbfunc_if_grad_free(w);
    return nb_status(c);
  }
  br[0]->igrad = w;
  return NB_OK;
}

static nb_code build_seeded(nb_ctx *c, nb_function *const *br, nbfunc_if_grad *w) {
  nb_code code = NB_OK;
  for (int b = 0; b < 2 && !code; b++) {
    branch_grad r = {0};
    int first = b ? w->nread[0] : 0; /* its own intermediates: a seeded build must read no others */
    if (!(r.reads = malloc(((size_t)w->nread[b] + 1) * sizeof *r.reads)))
      code = nb_set_error(c, NB_NOMEM, "If gradient: out of memory");
    for (int a = 0; a < w->nread[b] && !code; a++) r.reads[r.nreads++] = w->slots[b][first + a];
    if (!code) code = build_branch_grad(c, br[b], w, b, true, &r);
    if (!code && !(w->fn[1][b] = extract_branch_grad(c, br[b], w, b, &r))) code = nb_status(c);
    branch_grad_free(&r);
  }
  return code;
}

/* Whether the exposed intermediates got real gradients (second order). */
static bool exposed_have_grads(const nb_fwd_op *op, const nb_function *t, nb_tensor *const *dys) {
  for (int a = t->nres; a < nb_fwd_num_outputs(op); a++)
    if (dys[a] && !nbfunc_is_zeros_filler(dys[a])) return true;
  return false;
}

/* d(If(p, x))/dx = If(p, then's gradient, else's gradient): only the taken branch made
   the outputs, so only its derivative applies; it reads the intermediates that branch
   exposed (the other branch's slots hold zeros). */
static nb_code if_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_function *br[2] = {fn_of(op, "_then_branch"), fn_of(op, "_else_branch")};
  if (!br[0]->igrad && build_if_grad(c, br)) return nb_status(c);
  nbfunc_if_grad *w = br[0]->igrad;
  bool seeded = exposed_have_grads(op, br[0], dys);
  if (seeded && !w->fn[1][0] && build_seeded(c, br, w)) return nb_status(c);
  if (add_exposed_outputs(op, br[0], br[1])) return nb_set_error(c, NB_NOMEM, "If gradient: out of memory");
  nb_tensor *first = nb_fwd_output(op, 0);
  int nin = nb_fwd_num_inputs(op), nres = br[0]->nres, nexp = br[0]->nacc, n = 0;
  nb_tensor **ins = malloc(((size_t)nin + 2 * ((size_t)nres + nexp) + 1) * sizeof *ins);
  nb_tensor **outs = malloc(((size_t)br[0]->nargs + 1) * sizeof *outs);
  nb_code code = ins && outs ? NB_OK : nb_set_error(c, NB_NOMEM, "If gradient: out of memory");
  for (int i = 0; i < nin && !code; i++) ins[n++] = nb_fwd_input(op, i);
  for (int a = 0; a < nexp && !code; a++)
    if (!(ins[n++] = nbgraph_handle(c, first->graph, first->node, nres + a))) code = nb_status(c);
  for (int o = 0; o < nres && !code; o++)
    if (nbcore_is_float(br[0]->res[o]->dtype)) ins[n++] = dys[o] ? dys[o] : nb_zeros_like(c, nb_fwd_output(op, o));
  for (int a = 0; seeded && a < nexp && !code; a++) {
    if (!nbcore_is_float(br[0]->res[nres + a]->dtype)) continue;
    nb_tensor *d = nres + a < nb_fwd_num_outputs(op) ? dys[nres + a] : NULL;
    ins[n++] = d ? d : nb_zeros_like(c, ins[nin + a]);
  }
  if (!code) code = nb_status(c);
  if (!code) code = nbfunc_cf_node(c, "If", ins, n, w->fn[seeded][0], w->fn[seeded][1], outs, br[0]->nargs);
  if (!code) hand_out(op, outs, br[0]->nargs, 1, dxs);
  free(ins);
  free(outs);
  return code;
}

/* ---- While ---------------------------------------------------------------------------------- */

/* Marks (stamp2 == gen) the body nodes below nfwd that depend on the counter or a loop
   variable: the values that change between iterations. */
static nb_code mark_variant(nb_graph *g, const nb_function *b, int32_t nfwd, uint32_t gen) {
  int32_t *stack = malloc(((size_t)nfwd + 1) * sizeof *stack), top = 0;
  if (!stack) return NB_NOMEM;
  for (int j = 0; j < b->nres; j++) {
    nbgraph_node *n = &g->nodes[b->args[j]->node];
    if (n->stamp2 != gen) n->stamp2 = gen, stack[top++] = b->args[j]->node;
  }
  while (top > 0) {
    const nbgraph_node *n = &g->nodes[stack[--top]];
    for (int32_t e = n->first_use; e >= 0; e = g->edges[e].next_use) {
      int32_t u = g->edges[e].consumer;
      if (g->edges[e].out < 0 || u >= nfwd || g->nodes[u].stamp2 == gen) continue;
      g->nodes[u].stamp2 = gen;
      stack[top++] = u;
    }
  }
  free(stack);
  return NB_OK;
}

/* While bodies: the tensors mark_variant marked (those constant across iterations are
   read from the forward graph directly). */
static bool variant(const nb_graph *g, const nbgraph_edge *e, uint32_t gen) { return g->nodes[e->src].stamp2 == gen; }

/* The variant forward tensors the gradient nodes read (see gradient_reads). */
static nb_code collect_reads(nb_graph *g, const nb_function *b, int32_t from, int32_t nfwd, int64_t **keys, int *n,
                             int *extra) {
  uint32_t gen = nbgraph_next_gen(g);
  if (mark_variant(g, b, nfwd, gen)) return NB_NOMEM;
  return gradient_reads(g, from, nfwd, variant, gen, keys, n, extra);
}

/* The gradient of the body's float results (and, with dacc, of the float accumulated
   intermediates) in the body graph, as the keys of the reverse step: arguments
   (accumulators..., captures..., d next..., [d acc...]), results (d vars..., d caps...). */
static nb_code build_step(nb_ctx *c, nb_function *b, nbfunc_while_grad *w, int32_t nfwd, bool dacc) {
  nb_graph *g = b->g;
  int ncap = b->nargs - b->nres, ny = w->nfv + (dacc ? w->nfa : 0), nx = w->nfv + w->nfc;
  int nargs = w->nacc + ncap + ny;
  nb_tensor **ys = malloc(((size_t)2 * ny + nx + 1) * sizeof *ys), **seeds = ys + ny, **xs = seeds + ny;
  nb_tensor **dx = malloc(((size_t)nx + 1) * sizeof *dx);
  int64_t *keys = malloc(((size_t)nargs + nx + 1) * sizeof *keys);
  if (!ys || !dx || !keys) {
    free(ys), free(dx), free(keys);
    return nb_set_error(c, NB_NOMEM, "While gradient: out of memory");
  }
  nb_code code = NB_OK;
  for (int i = 0; i < w->nfv && !code; i++) {
    ys[i] = b->res[w->fvars[i]];
    if (!(seeds[i] = new_arg(b, b->args[w->fvars[i]], "d_next"))) code = NB_NOMEM;
  }
  for (int q = 0; dacc && q < w->nfa && !code; q++) {
    int64_t key = w->acc[w->facc[q]];
    ys[w->nfv + q] = nbgraph_handle(b->c, g, nbgraph_key_node(key), nbgraph_key_out(key));
    if (!ys[w->nfv + q] || !(seeds[w->nfv + q] = new_arg(b, ys[w->nfv + q], "d_acc"))) code = NB_NOMEM;
  }
  for (int i = 0; i < w->nfv; i++) xs[i] = b->args[w->fvars[i]];
  for (int i = 0; i < w->nfc; i++) xs[w->nfv + i] = b->args[w->fcaps[i]];
  int32_t from = g->nnodes;
  if (!code) code = nbfunc_grads(b, ys, seeds, ny, xs, nx, dx);
  int extra = 0;
  if (!code && collect_reads(g, b, from, nfwd, &w->acc, &w->nacc, &extra)) code = NB_NOMEM;
  if (!code && dacc && extra) /* the accumulators are fixed once the first gradient exists */
    code = nb_set_error(c, NB_UNIMPLEMENTED,
                        "While gradient: this second-order gradient reads %d loop intermediates "
                        "the first-order gradient did not accumulate",
                        extra);
  if (!code) {
    nargs = w->nacc + ncap + ny;
    int64_t *k = realloc(keys, ((size_t)nargs + nx + 1) * sizeof *k);
    if (!k)
      code = NB_NOMEM;
    else
      keys = k;
  }
  if (!code) {
    int n = 0;
    for (int a = 0; a < w->nacc; a++) keys[n++] = w->acc[a];
    for (int j = b->nres; j < b->nargs; j++) keys[n++] = nbgraph_key_of(b->args[j]);
    for (int i = 0; i < ny; i++) keys[n++] = nbgraph_key_of(seeds[i]);
    for (int i = 0; i < nx; i++) keys[n + i] = nbgraph_key_of(dx[i]);
    w->keys[dacc] = keys;
    w->nkargs[dacc] = n;
    keys = NULL;
  }
  nbfunc_grad_done(c, b, "While gradient", code);
  free(ys), free(dx), free(keys);
  return code;
}

static nb_code float_indices(const nb_function *b, int lo, int hi, int **out, int *n) {
  *out = malloc(((size_t)(hi - lo) + 1) * sizeof **out);
  if (!*out) return NB_NOMEM;
  *n = 0;
  for (int j = lo; j < hi; j++)
    if (nbcore_is_float(b->args[j]->dtype)) (*out)[(*n)++] = j;
  return NB_OK;
}

/* Makes the forward While node output its accumulators and the body fetch them. */
static nb_code add_accumulators(nb_ctx *c, const nb_fwd_op *op, nb_function *b, nbfunc_while_grad *w) {
  nb_tensor **res = realloc(b->res, ((size_t)b->nres + w->nacc + 1) * sizeof *res);
  nbop_meta *m = malloc((2 * (size_t)w->nacc + 1) * sizeof *m); /* stacks, and at most as many indexes */
  if (!res || !m) {
    if (res) b->res = res;
    free(m);
    return nb_set_error(c, NB_NOMEM, "While gradient: out of memory");
  }
  b->res = res;
  nb_code code = NB_OK;
  for (int a = 0; a < w->nacc && !code; a++) {
    nb_tensor *t = nbgraph_handle(b->c, b->g, nbgraph_key_node(w->acc[a]), nbgraph_key_out(w->acc[a]));
    if (!t)
      code = NB_NOMEM;
    else
      b->res[b->nres + a] = t;
  }
  nb_tensor *const *acc = b->res + b->nres;
  if (!code) nbfunc_cf_accumulator_metas(acc, w->nacc, m);
  nb_graph *g = nb_fwd_output(op, 0)->graph;
  if (!code && nbgraph_add_outputs(g, nb_fwd_output(op, 0)->node, m, w->nacc + nbfunc_cf_num_ragged(acc, w->nacc)))
    code = NB_NOMEM;
  if (!code) b->nacc = w->nacc;
  free(m);
  return code ? nb_set_error(c, code, "While gradient: out of memory") : NB_OK;
}

static nb_code build_while_grad(nb_ctx *c, const nb_fwd_op *op, nb_function *b) {
  nbfunc_while_grad *w = calloc(1, sizeof *w);
  if (!w) return nb_set_error(c, NB_NOMEM, "While gradient: out of memory");
  w->nfwd = b->g->nnodes;
  nb_code code =
      float_indices(b, 1, b->nres, &w->fvars, &w->nfv) || float_indices(b, b->nres, b->nargs, &w->fcaps, &w->nfc)
          ? nb_set_error(c, NB_NOMEM, "While gradient: out of memory")
          : NB_OK;
  if (!code) code = build_step(c, b, w, w->nfwd, false);
  if (!code && !(w->facc = malloc(((size_t)w->nacc + 1) * sizeof *w->facc))) code = NB_NOMEM;
  for (int a = 0; a < w->nacc && !code; a++) {
    const nbgraph_node *n = &b->g->nodes[nbgraph_key_node(w->acc[a])];
    if (nbcore_is_float(b->g->outs[n->out0 + nbgraph_key_out(w->acc[a])].meta.dtype)) w->facc[w->nfa++] = a;
  }
  if (code == NB_NOMEM && !nb_status(c)) nb_set_error(c, code, "While gradient: out of memory");
  if (!code) code = add_accumulators(c, op, b, w);
  if (code) {
    nbfunc_while_grad_free(w);
    return code;
  }
  b->wgrad = w;
  return NB_OK;
}

/* The reverse step (seeded or not) giving the gradients of the loop variables and of the
   captures selected by mask: extracted from the body's gradient once per kind, so a
   capture nobody differentiates (the RNN's inputs) costs nothing per iteration. */
static nb_function *step_for(nb_ctx *c, nb_function *b, nbfunc_while_grad *w, bool seeded, uint64_t mask) {
  for (int i = 0; i < w->nsteps; i++)
    if (w->steps[i].mask == mask && w->steps[i].seeded == seeded) return w->steps[i].f;
  if (!w->keys[seeded] && build_step(c, b, w, w->nfwd, seeded)) return NULL;
  const int64_t *keys = w->keys[seeded], *dx = keys + w->nkargs[seeded];
  int64_t *res = malloc(((size_t)w->nfv + w->nfc + 1) * sizeof *res);
  nbfunc_step_fn *grown = realloc(w->steps, ((size_t)w->nsteps + 1) * sizeof *grown);
  if (grown) w->steps = grown;
  if (!res || !grown) {
    free(res);
    nb_set_error(c, NB_NOMEM, "While gradient: out of memory");
    return NULL;
  }
  int n = 0;
  for (int i = 0; i < w->nfv; i++) res[n++] = dx[i];
  for (int q = 0; q < w->nfc; q++)
    if (q >= 64 || (mask >> q & 1)) res[n++] = dx[w->nfv + q];
  nb_function *f = nbfunc_extract(c, b->g, b->g, keys, w->nkargs[seeded], res, n);
  free(res);
  if (f) w->steps[w->nsteps++] = (nbfunc_step_fn){mask, seeded, f};
  return f;
}

/* What the reverse loop's callbacks read (tensors of the graph the gradient is built in). */
typedef struct reverse {
  nbfunc_while_grad *w;
  nb_function *step;
  nb_tensor *iters;       /* the forward loop's iteration count */
  nb_tensor **stacks;     /* its accumulators */
  nb_tensor **index;      /* per accumulator: a ragged one's index, else NULL */
  nb_tensor *const *acc;  /* the accumulated tensors, in the body (their static shapes) */
  nb_tensor **dstacks;    /* the gradients of its float accumulators (second order), or NULL */
  nb_tensor *const *caps; /* its captured inputs */
  nb_tensor **caps_t;     /* per capture: its transpose, made before the loop for the
                              products that read it transposed (see plain_products), or NULL */
  int ncap;
  const int *sel; /* the float captures (indices into w->fcaps) differentiated */
  int nsel;
  const nb_shape_spec *shapes; /* the reverse loop variables' shapes */
} reverse;

/* x held to the shape s (an _EnsureShape view) where its static shape says less: the
   gradient of a loop variable has that variable's shapes, but gradient ops may know less
   about their results than the loop does (a densified Gather gradient, a Reshape to a
   shape computed at run time). */
static nb_tensor *with_shape(nb_ctx *c, nb_tensor *x, const nb_shape_spec *s) {
  if (!x || nbcore_shape_fits(nb_rank(x), nb_shape(x), s->rank, s->dims)) return x;
  return shaped_call(c, "_EnsureShape", &x, 1, s->rank, s->dims);
}

static nb_code reverse_cond(nb_ctx *c, nb_tensor *const *v, nb_tensor **pred, void *user) {
  *pred = nb_less(c, v[0], ((reverse *)user)->iters);
  return nb_status(c);
}

static bool same_static_shape(const nb_tensor *a, const nb_tensor *b) {
  bool same = nb_rank(a) >= 0 && nb_rank(a) == nb_rank(b);
  for (int d = 0; same && d < nb_rank(a); d++) same = nb_shape(a)[d] >= 0 && nb_shape(a)[d] == nb_shape(b)[d];
  return same;
}

/* sum + x, a capture's running gradient. When x is a product nothing else reads (the
   x_t^T dz_t of a weight the body multiplies by), one _MatMulAdd replaces product and
   add: its GEMM adds into the sum, in the sum's own block once the loop hands that over
   (the MatMul left unread is never run). */
static nb_tensor *add_to_sum(nb_ctx *c, nb_tensor *sum, nb_tensor *x) {
  nb_graph *g = c->graph;
  const nbgraph_node *n = g && x && x->graph == g ? &g->nodes[x->node] : NULL;
  if (!n || strcmp(n->def->name, "MatMul") != 0 || n->first_use >= 0 || !same_static_shape(sum, x))
    return nb_add(c, sum, x);
  const nbgraph_edge *e = &g->edges[n->in0];
  nb_tensor *a = nbgraph_handle(c, g, e[0].src, e[0].out), *b = nbgraph_handle(c, g, e[1].src, e[1].out);
  if (!a || !b) return NULL;
  return nb_matmul_add(c, a, b, n->attr[0].b, n->attr[1].b, sum);
}

/* Inlining rewrite: a product reading a capture transposed (dh = dz W^T, the gradient of
   the body's h W) reads the capture's transpose made once before the loop instead. GEMM
   packs a plain operand faster than a transposed one, and the loop would pack it every
   iteration (for bench/rnn's 256x256 W about a quarter of that product's time). */
static bool plain_products(nb_ctx *c, const nbgraph_node *n, nb_tensor *const *in, nb_tensor **out, void *user) {
  const reverse *r = user;
  if (strcmp(n->def->name, "MatMul") != 0) return false;
  nb_tensor *x[2] = {in[0], in[1]};
  bool t[2] = {n->attr[0].b, n->attr[1].b}, changed = false;
  for (int i = 0; i < 2; i++)
    for (int j = 0; t[i] && j < r->ncap; j++)
      if (x[i] == r->caps[j] && r->caps_t[j]) {
        x[i] = r->caps_t[j];
        t[i] = false;
        changed = true;
      }
  if (changed) out[0] = nb_matmul(c, x[0], x[1], t[0], t[1]);
  return changed;
}

/* The transposes plain_products reads: of each rank-2 capture that a product of the
   reverse step reads transposed. */
static nb_code transpose_captures(nb_ctx *c, const nbfunc_while_grad *w, reverse *r) {
  const nb_graph *g = r->step->g;
  for (int j = 0; j < r->ncap; j++) r->caps_t[j] = NULL;
  for (int32_t i = 0; i < g->nnodes; i++) {
    const nbgraph_node *n = &g->nodes[i];
    for (int e = 0; e < 2 && strcmp(n->def->name, "MatMul") == 0; e++)
      for (int j = 0; n->attr[e].b && j < r->ncap; j++) {
        bool reads_capture = r->step->args[w->nacc + j]->node == g->edges[n->in0 + e].src;
        if (reads_capture && !r->caps_t[j] && nb_rank(r->caps[j]) == 2 &&
            !(r->caps_t[j] = nb_transpose(c, r->caps[j], (const int[]){1, 0}, 2)))
          return nb_status(c);
      }
  }
  return NB_OK;
}

/* Iteration t's value of accumulator a, from its stack (or, second order, from the
   gradient of its stack, laid out alike). */
static nb_tensor *acc_get(nb_ctx *c, const reverse *r, int a, nb_tensor *stack, nb_tensor *t) {
  return r->index[a] ? ragged_get(c, stack, t, r->index[a], r->acc[a]) : stack_get(c, stack, t);
}

/* vars: [i, d vars..., d caps summed so far...]; runs the reverse step of forward
   iteration T-1-i, inlined so that its products can add into the sums. */
static nb_code reverse_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  reverse *r = user;
  nbfunc_while_grad *w = r->w;
  nb_tensor *t = nb_sub(c, nb_sub(c, r->iters, v[0]), nb_scalar(c, NB_I64, 1));
  int n = 0;
  nb_tensor **ins = malloc(((size_t)r->step->nargs + r->step->nres + 1) * sizeof *ins), **outs = ins + r->step->nargs;
  if (!ins) return nb_set_error(c, NB_NOMEM, "While gradient: out of memory");
  for (int a = 0; a < w->nacc; a++) ins[n++] = acc_get(c, r, a, r->stacks[a], t);
  for (int j = 0; j < r->ncap; j++) ins[n++] = r->caps[j];
  for (int i = 0; i < w->nfv; i++) ins[n++] = v[1 + i];
  for (int q = 0; r->dstacks && q < w->nfa; q++) ins[n++] = acc_get(c, r, w->facc[q], r->dstacks[q], t);
  nb_code code = nb_status(c);
  if (!code) code = nbfunc_inline(c, r->step, ins, plain_products, r, outs);
  if (!code) {
    next[0] = nb_add(c, v[0], nb_scalar(c, NB_I64, 1));
    for (int i = 0; i < w->nfv; i++) next[1 + i] = with_shape(c, outs[i], &r->shapes[1 + i]);
    for (int q = 0; q < r->nsel; q++)
      next[1 + w->nfv + q] =
          with_shape(c, add_to_sum(c, v[1 + w->nfv + q], outs[w->nfv + q]), &r->shapes[1 + w->nfv + q]);
    code = nb_status(c);
  }
  free(ins);
  return code;
}

/* The reverse loop's variables and their shapes: each gradient keeps the shapes its
   variable or capture may take (the loop's relaxed ones: unknown dims, unknown rank). */
static nb_code reverse_vars(nb_ctx *c, const nb_fwd_op *op, const nb_function *b, const reverse *r,
                            nb_tensor *const *dys, nb_tensor **vars, nb_shape_spec *shapes) {
  const nbfunc_while_grad *w = r->w;
  vars[0] = nb_scalar(c, NB_I64, 0);
  shapes[0] = (nb_shape_spec){0, NULL};
  for (int i = 0; i < w->nfv; i++) {
    int j = w->fvars[i];
    shapes[1 + i] = (nb_shape_spec){b->args[j]->rank, b->args[j]->shape};
    vars[1 + i] = with_shape(c, dys[j] ? dys[j] : nb_zeros_like(c, nb_fwd_output(op, j)), &shapes[1 + i]);
  }
  for (int q = 0; q < r->nsel; q++) {
    nb_tensor *x = nb_fwd_input(op, w->fcaps[r->sel[q]]);
    vars[1 + w->nfv + q] = nb_zeros_like(c, x);
    shapes[1 + w->nfv + q] = (nb_shape_spec){nb_rank(x), nb_shape(x)};
  }
  return nb_status(c);
}

/* Whether the forward accumulators got real gradients (not a pass's zero fillers). */
static bool accumulators_have_grads(const nb_fwd_op *op, const nbfunc_while_grad *w, nb_tensor *const *dys) {
  int nin = nb_fwd_num_inputs(op);
  if (nb_fwd_num_outputs(op) < nin + w->nacc) return false; /* the accumulators are new */
  for (int q = 0; q < w->nfa; q++) {
    nb_tensor *d = dys[nin + w->facc[q]];
    if (d && !nbfunc_is_zeros_filler(d)) return true;
  }
  return false;
}

static nb_code run_reverse(nb_ctx *c, const nb_fwd_op *op, nb_function *b, reverse *r, nb_tensor *const *dys,
                           nb_tensor **dxs) {
  nbfunc_while_grad *w = r->w;
  int nv = 1 + w->nfv + r->nsel;
  nb_tensor **vars = malloc((2 * (size_t)nv + 1) * sizeof *vars), **outs = vars + nv;
  nb_shape_spec *shapes = malloc(((size_t)nv + 1) * sizeof *shapes);
  nb_code code = !vars || !shapes ? nb_set_error(c, NB_NOMEM, "While gradient: out of memory") : NB_OK;
  if (!code) code = reverse_vars(c, op, b, r, dys, vars, shapes);
  nb_while_opts o = {shapes};
  r->shapes = shapes;
  if (!code) code = nb_while_ex(c, reverse_cond, reverse_body, r, vars, nv, -1, &o, outs);
  if (!code) {
    nb_tensor_free(outs[0]);
    for (int i = 0; i < w->nfv; i++) dxs[w->fvars[i]] = outs[1 + i];
    for (int q = 0; q < r->nsel; q++) dxs[w->fcaps[r->sel[q]]] = outs[1 + w->nfv + q];
  }
  free(vars);
  free(shapes);
  return code;
}

/* The float captures whose gradients are wanted (all past the 64 a mask holds). */
static uint64_t wanted_captures(const nb_fwd_op *op, const nbfunc_while_grad *w, int *sel, int *nsel) {
  uint64_t mask = 0;
  *nsel = 0;
  for (int q = 0; q < w->nfc; q++)
    if (w->nfc > 64 || nb_fwd_input_needs_grad(op, w->fcaps[q])) {
      sel[(*nsel)++] = q;
      if (q < 64) mask |= 1ull << q;
    }
  return mask;
}

/* The forward While's accumulator outputs (after its nin loop variables): each stack, and
   a ragged one's index (those come after all the stacks). */
static nb_code accumulator_outputs(nb_ctx *c, nb_tensor *const *acc, int nacc, nb_tensor *first, int nin,
                                   nb_tensor **stacks, nb_tensor **index) {
  int next_index = nin + nacc;
  for (int a = 0; a < nacc; a++) {
    bool ragged = nbfunc_cf_ragged(acc[a]);
    stacks[a] = nbgraph_handle(c, first->graph, first->node, nin + a);
    index[a] = ragged ? nbgraph_handle(c, first->graph, first->node, next_index++) : NULL;
    if (!stacks[a] || (ragged && !index[a])) return nb_status(c);
  }
  return NB_OK;
}

/* With v_{t+1} = body(v_t, c) for t < T: dv_t = (d body/d v_t)^T dv_{t+1}, from dv_T = dy,
   backwards; dc = sum over t of (d body/d c)^T dv_{t+1} (c used by every iteration). */
static nb_code while_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_function *b = fn_of(op, "_body");
  if (!b->wgrad && build_while_grad(c, op, b)) return nb_status(c);
  nbfunc_while_grad *w = b->wgrad;
  bool second = accumulators_have_grads(op, w, dys);
  nb_tensor *first = nb_fwd_output(op, 0);
  int nin = nb_fwd_num_inputs(op);
  nb_tensor **stacks = malloc((2 * (size_t)w->nacc + w->nfa + 2 * (size_t)b->nargs + 1) * sizeof *stacks);
  int *sel = malloc(((size_t)w->nfc + 1) * sizeof *sel);
  if (!stacks || !sel) {
    free(stacks), free(sel);
    return nb_set_error(c, NB_NOMEM, "While gradient: out of memory");
  }
  nb_tensor **index = stacks + w->nacc, **dstacks = index + w->nacc, **caps = dstacks + w->nfa;
  reverse r = {.w = w,
               .iters = first,
               .stacks = stacks,
               .index = index,
               .acc = b->res + b->nres,
               .dstacks = second ? dstacks : NULL,
               .caps = caps,
               .caps_t = caps + b->nargs,
               .ncap = b->nargs - b->nres,
               .sel = sel};
  uint64_t mask = wanted_captures(op, w, sel, &r.nsel);
  r.step = step_for(c, b, w, second, mask);
  nb_code code = r.step ? NB_OK : nb_status(c);
  if (!code) code = accumulator_outputs(c, r.acc, w->nacc, first, nin, stacks, index);
  for (int q = 0; second && q < w->nfa; q++) dstacks[q] = dys[nin + w->facc[q]];
  for (int j = 0; j < r.ncap; j++) caps[j] = nb_fwd_input(op, b->nres + j);
  if (!code) code = transpose_captures(c, w, &r);
  if (!code) code = run_reverse(c, op, b, &r, dys, dxs);
  free(stacks);
  free(sel);
  return code;
}

/* ---- reading the accumulators ------------------------------------------------------------------ */

static nb_tensor *stack_get(nb_ctx *c, nb_tensor *stack, nb_tensor *t) {
  nb_tensor *in[2] = {stack, t}, *out = NULL;
  nbop_dispatch(c, nbop_lookup("_StackGet"), in, 2, NULL, &out, 1);
  return out;
}

/* d stack = the zeros of its shape with dy at [t]; the index has none. */
static nb_code stack_get_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *in[3] = {nb_fwd_input(op, 0), nb_fwd_input(op, 1), dys[0]};
  return nbop_dispatch(c, nbop_lookup("_StackGetGrad"), in, 3, NULL, &dxs[0], 1);
}

/* Value t of a ragged stack, with like's static shape (an accumulated tensor's). */
static nb_tensor *ragged_get(nb_ctx *c, nb_tensor *values, nb_tensor *t, nb_tensor *index, const nb_tensor *like) {
  nb_tensor *in[3] = {values, t, index};
  return shaped_call(c, "_RaggedGet", in, 3, like->rank, like->shape);
}

/* d values = the zeros of their shape with dy at value t's place; t and the index have none. */
static nb_code ragged_get_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *in[4] = {nb_fwd_input(op, 0), nb_fwd_input(op, 1), dys[0], nb_fwd_input(op, 2)};
  return nbop_dispatch(c, nbop_lookup("_RaggedGetGrad"), in, 4, NULL, &dxs[0], 1);
}

/* _RaggedGetGrad is linear in dy, which gets _RaggedGet of the incoming gradient. */
static nb_code ragged_get_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  dxs[2] = ragged_get(c, dys[0], nb_fwd_input(op, 1), nb_fwd_input(op, 3), nb_fwd_input(op, 2));
  return nb_status(c);
}

/* _StackGetGrad is linear in dy, which gets _StackGet of the incoming gradient. */
static nb_code stack_get_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  dxs[2] = stack_get(c, dys[0], nb_fwd_input(op, 1));
  return nb_status(c);
}

/* _EnsureShape is a view of its input: dx = dy. */
static nb_code ensure_shape_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  (void)c, (void)op;
  dxs[0] = dys[0];
  return NB_OK;
}

void nbfunc_install_grads(void) {
  static const nbg_entry rules[] = {
      {"_EnsureShape", ensure_shape_grad, 0, 0},
      {"_StackGet", stack_get_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"_StackGetGrad", stack_get_grad_grad, NBG_IN(1), 0},
      {"_RaggedGet", ragged_get_grad, NBG_IN(0) | NBG_IN(1) | NBG_IN(2), 0},
      {"_RaggedGetGrad", ragged_get_grad_grad, NBG_IN(1) | NBG_IN(3), 0},
      {"StatefulPartitionedCall", call_grad, NBG_ALL, NBG_ALL},
      {"If", if_grad, NBG_ALL, NBG_ALL},
      {"While", while_grad, NBG_ALL, NBG_ALL},
  };
  nbad_install_function_grads(rules, sizeof rules / sizeof *rules);
}
