/* The function layer (src/func): function graphs and their runner (function.c), nb_while
   and nb_cond with the shape invariants of loop variables (while_cond.c), the While, If
   and call kernels (function_ops.c) and the control-flow gradients (control_flow_grad.c).
   They build, run and differentiate graphs at once, so they sit above runtime and
   autodiff, as TF's function library runtime sits above graphs and kernels. */
#ifndef NBFUNC_H
#define NBFUNC_H

#include "../runtime/runtime.h"

#include "../grad/grad.h"

/* Installs src/func's half of the ops that run function graphs in their defs (see
   nbop_install_function_ops) and the control-flow gradients in the gradient registry (see
   nbad_install_function_grads). function.c calls both once, before it makes the first
   function. */
void nbfunc_install_ops(void);
void nbfunc_install_grads(void);

/* A loop variable's shape invariant: rank -1 unknown rank, dims -1 unknown. */
typedef struct nbfunc_shape_inv {
  int rank;
  int64_t shape[NB_MAX_RANK];
} nbfunc_shape_inv;

/* Checks a body's results against the loop variables (dtype, shape invariant); errors name the variable. */
nb_code nbfunc_cf_check_next(nb_ctx *c, const char *who, nb_tensor *const *vars, nb_tensor *const *next, int n,
                             const nbfunc_shape_inv *inv);
/* Calls the user's body or branch fn(c, in, out, user) and returns its error, else c's: the
   scopes it leaves open are closed (keeping out[0..nout)) and fail it ("<who> left 1 scope
   open"), and it cannot end the scopes open before the call. */
nb_code nbfunc_cf_call_body(nb_ctx *c, const char *who, nb_body_fn fn, nb_tensor *const *in, nb_tensor **out, int nout,
                            void *user);
/* The same for a cond function writing *pred. */
nb_code nbfunc_cf_call_cond(nb_ctx *c, const char *who, nb_cond_fn fn, nb_tensor *const *in, nb_tensor **pred,
                            void *user);

/* A function graph (TF's FunctionDef): a graph, arguments (placeholders) and results, all
   handles of the context it was traced in. A session over it runs it; one is cached for
   the While/If kernels (busy while a kernel uses it: a concurrent run makes its own). */
struct nb_function {
  nb_graph *g;
  nb_ctx *c;
  nb_tensor **args, **res;
  int nargs, nres;
  int nacc;                /* res[nres .. nres + nacc) are intermediates the gradient reads,
                              fetched too: While bodies stack them every iteration (the
                              accumulators), If branches output them */
  atomic_llong iters_hint; /* While bodies: the iterations the last run took (sizes the stacks) */
  int64_t *caps;           /* the parent-graph tensors its last ncaps arguments capture */
  int ncaps;
  nb_function *grad;               /* its symbolic gradient, built on first use */
  nb_grad_fn user_grad;            /* a gradient the user set for calls of it, or NULL */
  struct nbfunc_while_grad *wgrad; /* While bodies: the loop gradient's pieces, built on first use */
  struct nbfunc_if_grad *igrad;    /* If then-branches: the If gradient's pieces, built on first use */
  nb_session *cached;
  atomic_bool busy;
};

/* A new function of graph src: arguments the tensors arg_keys of src (each becomes a
   placeholder), results res_keys, and the nodes of src between them copied (dispatched
   again), so an intermediate of src given as an argument has no producer in it. Owned by
   owner (freed with it). Errors go to err. */
nb_function *nbfunc_extract(nb_ctx *err, nb_graph *owner, nb_graph *src, const int64_t *arg_keys, int nargs,
                            const int64_t *res_keys, int nres);
/* A rewrite of one node as nbfunc_inline copies it: given the node and its inputs in
   c, it may make the outputs itself (out[0..n->nout)) and return true (errors on c); false
   copies the node as it is. */
typedef bool (*nbfunc_inline_rewrite)(nb_ctx *c, const nbgraph_node *n, nb_tensor *const *in, nb_tensor **out,
                                      void *user);
/* f's nodes copied into c (a graph context: added there; eager: run) on arguments
   in[0..f->nargs), giving its results out[0..f->nres): a call without a call node, so
   its ops can fuse with the caller's. rewrite (may be NULL) sees each node first. */
nb_code nbfunc_inline(nb_ctx *c, nb_function *f, nb_tensor *const *in, nbfunc_inline_rewrite rewrite, void *user,
                      nb_tensor **out);
/* TF's SymbolicGradient of f: a function of (f's arguments, the incoming gradients of f's
   float results) giving the gradient of every argument (zeros where unconnected). Cached. */
nb_function *nbfunc_gradient(nb_ctx *err, nb_function *f);
/* Gradient building inside f's graph, shared by the function, If and While gradients:
   dx[i] = d ys / d xs[i] seeded with seeds, dense, zeros where unconnected. */
nb_code nbfunc_grads(nb_function *f, nb_tensor *const *ys, nb_tensor *const *seeds, int ny, nb_tensor *const *xs,
                     int nx, nb_tensor **dx);
/* Ends a gradient build in f: a failure (code) is reported on err as "who: <f's error>"
   unless err has one; f's context is cleared either way. */
void nbfunc_grad_done(nb_ctx *err, nb_function *f, const char *who, nb_code code);
/* Adds a StatefulPartitionedCall node (or runs it, eagerly) of f on in[0..f->nargs). */
nb_code nbfunc_call_node(nb_ctx *c, nb_function *f, nb_tensor *const *in, nb_tensor **out);
/* Adds a While or If node of functions fa, fb (cond/body, then/else) on in[0..nin). */
nb_code nbfunc_cf_node(nb_ctx *c, const char *type, nb_tensor *const *in, int nin, nb_function *fa, nb_function *fb,
                       nb_tensor **out, int nout);
/* A function pointer carried in an int attr. */
static inline nb_function *nbfunc_from_bits(int64_t bits) {
  nb_function *f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* Runs f: results res[0..f->nres + f->nacc) (detached, the caller's) from argument values
   args; threads for its ops. It takes over (frees) args[0..take), whatever the outcome, so
   its ops may write over those that die in it. place (NULL: none) names a block per
   result that its op may write it into (nbrt_session_place_fetches). On error sets the
   message on k and returns its code. */
nb_code nbfunc_run(nbop_kargs *k, nb_function *f, const char *what, nb_tensor *const *args, int take,
                   nbcore_buffer *const *place, nb_tensor **res);

/* The pieces of a While's gradient (control_flow_grad.c), kept on its body. */
typedef struct nbfunc_while_grad {
  int64_t *acc; /* the accumulated intermediates (keys in the body graph) */
  int nacc;
  int *fvars, nfv; /* body arguments that are float loop variables */
  int *fcaps, nfc; /* body arguments that are float captures */
  int *facc, nfa;  /* accumulators that are float (second order seeds them) */
  /* The gradient in the body graph, as the keys of one reverse step: arguments
     (acc..., caps..., d next..., [d acc...]) then results (d vars..., d caps...); [1]
     with the accumulators seeded (second order), built on need. */
  int64_t *keys[2];
  int nkargs[2];
  struct nbfunc_step_fn *steps; /* reverse steps extracted, per (seeded, captures differentiated) */
  int nsteps;
  int32_t nfwd; /* the body's nodes before any gradient: the forward ones */
} nbfunc_while_grad;
typedef struct nbfunc_step_fn {
  uint64_t mask; /* bit q: the gradient of float capture q is a result */
  bool seeded;
  nb_function *f;
} nbfunc_step_fn;
void nbfunc_while_grad_free(nbfunc_while_grad *w);

/* The pieces of an If's gradient, kept on its then-branch: the intermediates of each
   branch its gradient reads (exposed as outputs of the If: the then-branch's, then the
   else-branch's, each branch giving zeros for the other's), and the branch gradient
   functions, per branch b: arguments (b's arguments..., then-intermediates...,
   else-intermediates..., d results..., [d intermediates...]), results d arguments; [1]
   with the intermediates seeded (second order), built on need. */
typedef struct nbfunc_if_grad {
  int nread[2];          /* intermediates of the then and the else branch */
  int32_t nfwd[2];       /* each branch's nodes before any gradient: the forward ones */
  int64_t *slots[2];     /* per branch: its tensors standing for [then's..., else's...]:
                              its own intermediates, placeholders for the other's */
  nb_function *fn[2][2]; /* [seeded][branch] */
} nbfunc_if_grad;
void nbfunc_if_grad_free(nbfunc_if_grad *w);

/* Output metas shared by the control-flow ops and their gradients (function_ops.c).
   A While that accumulates t stacks it densely, [unknown count, t's shape], when t's
   shape is fully known (and leaves room for the iteration dim); else ragged: its values
   flat, [unknown], plus an index, int64 [unknown count, NBOP_CF_INDEX_COLS], whose row i
   holds value i's offset, rank and dims. nbfunc_cf_accumulator_metas writes the nacc stacks'
   metas, then those of the indexes (one per ragged stack, in order). */
bool nbfunc_cf_ragged(const nb_tensor *t);
int nbfunc_cf_num_ragged(nb_tensor *const *acc, int nacc);
void nbfunc_cf_accumulator_metas(nb_tensor *const *acc, int nacc, nbop_meta *m);
/* What both a and b fit: a's meta with the dims, or the rank, where they differ unknown. */
void nbfunc_cf_merged_meta(nbop_meta *m, const nb_tensor *a, const nb_tensor *b);

/* Whether x is made by a ZerosLike node (a gradient pass's filler for an output that got no gradient). */
bool nbfunc_is_zeros_filler(const nb_tensor *x);

/* Graph contexts: trace and add a While / If node. */
nb_code nbfunc_graph_while(nb_ctx *c, nb_cond_fn cond, nb_body_fn body, void *user, nb_tensor *const *vars, int n,
                           int64_t max_iters, const nbfunc_shape_inv *inv, nb_tensor **out);
nb_code nbfunc_graph_cond(nb_ctx *c, nb_tensor *pred, nb_body_fn then_fn, nb_body_fn else_fn, void *user,
                          nb_tensor *const *in, int nin, nb_tensor **out, int nout);

#endif
