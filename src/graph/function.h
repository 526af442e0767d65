/* Control flow internals: shape invariants of loop variables, and the graph-mode builders
   behind nb_while and nb_cond (function graphs, While and If nodes). */
#ifndef NB_FUNCTION_H
#define NB_FUNCTION_H

#include "graph.h"

/* A loop variable's shape invariant: rank -1 unknown rank, dims -1 unknown. */
typedef struct nb_shape_inv {
  int rank;
  int64_t shape[NB_MAX_RANK];
} nb_shape_inv;

/* The invariants of n loop variables from the public specs (malloc'd; NULL on error, set on c). */
nb_shape_inv *nb_shape_inv_from(nb_ctx *c, const char *who, const nb_shape_spec *specs, int n);
/* Checks that each declared shape admits its variable's initial shape. */
nb_code nb_shape_inv_check_vars(nb_ctx *c, const char *who, const nb_shape_inv *inv, nb_tensor *const *vars, int n);
/* Whether shape (rank, dims) is at least as specific as the invariant (inv NULL: var's own shape). */
bool nb_shape_inv_admits(const nb_shape_inv *inv, const nb_tensor *var, const nb_tensor *next);
/* Checks a body's results against the loop variables (dtype, shape invariant); errors name the variable. */
nb_code nb_cf_check_next(nb_ctx *c, const char *who, nb_tensor *const *vars, nb_tensor *const *next, int n,
                         const nb_shape_inv *inv);

/* A function graph (TF's FunctionDef): a graph, arguments (placeholders) and results, all
   handles of the context it was traced in. A session over it runs it; one is cached for
   the While/If kernels (busy while a kernel uses it: a concurrent run makes its own). */
typedef struct nb_function {
  nb_graph *g;
  nb_ctx *c;
  nb_tensor **args, **res;
  int nargs, nres;
  nb_session *cached;
  atomic_bool busy;
} nb_function;

/* Runs f: results res[0..f->nres) (detached, the caller's) from argument values args;
   threads for its ops. On error sets the message on k and returns its code. */
nb_code nb_function_run(nb_kargs *k, nb_function *f, const char *what, nb_tensor *const *args, nb_tensor **res);

/* Graph contexts: trace and add a While / If node. */
nb_code nb_graph_while(nb_ctx *c, nb_cond_fn cond, nb_body_fn body, void *user, nb_tensor *const *vars, int n,
                       int64_t max_iters, const nb_shape_inv *inv, nb_tensor **out);
nb_code nb_graph_cond(nb_ctx *c, nb_tensor *pred, nb_body_fn then_fn, nb_body_fn else_fn, void *user,
                      nb_tensor *const *in, int nin, nb_tensor **out, int nout);

#endif
