/* The gradient registry: a slot per op type (by the op's dense id) plus free names for
   gradient_override_map. Built-in gradients register once, before any user call, so a
   user registration for an op that already has one is reported as a duplicate. */
#include "autodiff.h"

#include "../grad/grad.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct named_grad {
  char *name;
  nb_grad_fn fn;
} named_grad;

static nb_grad_fn op_fns[NBOP_MAX_OPS];
static bool op_stops[NBOP_MAX_OPS];
static bool op_reserved[NBOP_MAX_OPS]; /* the function layer's, until it installs them */
static bool op_user[NBOP_MAX_OPS];     /* registered by nb_register_gradient */
static uint32_t op_reads_in[NBOP_MAX_OPS], op_reads_out[NBOP_MAX_OPS]; /* what each op's rule reads */
static nbg_sum_fn op_sum_into[NBOP_MAX_OPS];                           /* built-in rules' fused sums */
static named_grad *named;
static int32_t nnamed, named_cap;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;

static nb_code register_grad(const char *name, nb_grad_fn f, uint32_t reads_in, uint32_t reads_out);

/* The ops whose gradients build function graphs (src/func/control_flow_grad.c), above
   autodiff: src/func installs them (nbad_install_function_grads) before it makes its first
   function, so before any node of these ops exists. Their slots are reserved with the
   built-ins, so that nb_has_gradient and a user's duplicate registration see them from
   the start, whether or not a function was made yet. */
static const char *const function_grad_ops[] = {
    "While",         "If",         "StatefulPartitionedCall", "_StackGet",
    "_StackGetGrad", "_RaggedGet", "_RaggedGetGrad",          "_EnsureShape"};

/* src/grad's rules, the function layer's slots, and the one autodiff defines itself: it
   reruns the user's function on the inputs, so it reads every input and no output. */
static void register_builtins(void) {
  nbg_register_builtin_gradients();
  for (size_t i = 0; i < sizeof function_grad_ops / sizeof *function_grad_ops; i++)
    op_reserved[nbop_lookup(function_grad_ops[i])->id] = true;
  register_grad("_RecomputeGrad", nbad_recompute_gradient, NBG_ALL, 0);
}

void nbad_grad_builtins_init(void) {
  nbop_registry_init();
  pthread_once(&builtins_once, register_builtins);
}

static named_grad *find_named(const char *name) {
  for (int i = 0; i < nnamed; i++)
    if (strcmp(named[i].name, name) == 0) return &named[i];
  return NULL;
}

static nb_code add_named(const char *name, nb_grad_fn f) {
  if (find_named(name)) return NB_INVALID;
  if (!nbcore_grow_array((void **)&named, &named_cap, nnamed + 1, sizeof *named)) return NB_NOMEM;
  size_t len = strlen(name) + 1;
  char *copy = malloc(len);
  if (!copy) return NB_NOMEM;
  memcpy(copy, name, len);
  named[nnamed++] = (named_grad){copy, f};
  return NB_OK;
}

/* f NULL registers "no gradient" for an op type. reads_in/reads_out: nbg_entry's. */
static nb_code register_grad(const char *name, nb_grad_fn f, uint32_t reads_in, uint32_t reads_out) {
  if (!name || !*name) return NB_INVALID;
  const nbop_def *def = nbop_lookup(name);
  pthread_mutex_lock(&registry_lock);
  nb_code code = NB_OK;
  if (def) {
    if (op_fns[def->id] || op_stops[def->id] || op_reserved[def->id])
      code = NB_INVALID;
    else if (f) {
      op_fns[def->id] = f;
      op_reads_in[def->id] = reads_in;
      op_reads_out[def->id] = reads_out;
    } else
      op_stops[def->id] = true;
  } else {
    code = f ? add_named(name, f) : NB_NOT_FOUND;
  }
  pthread_mutex_unlock(&registry_lock);
  return code;
}

/* The message of a failed user registration (register_grad's codes). */
static nb_code user_registration(const char *who, const char *name, nb_code code) {
  nbop_registry_clear_error();
  if (code == NB_INVALID)
    return nbop_registry_fail(code, "%s: %s", who,
                              name && *name ? "a gradient is already registered for this op type"
                                            : "the name is NULL or empty, or the function NULL");
  return code ? nbop_registry_fail(code, "%s: no op type '%s'", who, name) : NB_OK;
}

/* A user's rule declares nothing it reads, so a tape keeps every input and output for it
   (until nb_register_gradient_reads says what it reads). */
nb_code nb_register_gradient(const char *name, nb_grad_fn f) {
  nbad_grad_builtins_init();
  nb_code code = f ? register_grad(name, f, NBG_ALL, NBG_ALL) : NB_INVALID;
  const nbop_def *def = !code && name ? nbop_lookup(name) : NULL;
  if (def) {
    pthread_mutex_lock(&registry_lock);
    op_user[def->id] = true;
    pthread_mutex_unlock(&registry_lock);
  }
  return user_registration("nb_register_gradient", name, code);
}

nb_code nb_register_no_gradient(const char *op_type) {
  nbad_grad_builtins_init();
  return user_registration("nb_register_no_gradient", op_type, register_grad(op_type, NULL, 0, 0));
}

nb_code nb_register_gradient_reads(const char *op_type, uint32_t inputs, uint32_t outputs) {
  nbad_grad_builtins_init();
  nbop_registry_clear_error();
  const nbop_def *def = op_type ? nbop_lookup(op_type) : NULL;
  pthread_mutex_lock(&registry_lock);
  bool mine = def && op_user[def->id];
  if (mine) {
    op_reads_in[def->id] = inputs;
    op_reads_out[def->id] = outputs;
  }
  pthread_mutex_unlock(&registry_lock);
  return mine ? NB_OK
              : nbop_registry_fail(NB_NOT_FOUND,
                                   "nb_register_gradient_reads: op type '%s' has no gradient registered "
                                   "with nb_register_gradient",
                                   op_type ? op_type : "(null)");
}

/* Registrations used by the built-in gradient files (inside the once-block). */
nb_code nbad_register_builtin(const char *name, nb_grad_fn f) { return register_grad(name, f, 0, 0); }

void nbad_register_table(const nbg_entry *table, size_t n) {
  for (size_t i = 0; i < n; i++) register_grad(table[i].op, table[i].fn, table[i].reads_in, table[i].reads_out);
}

/* Built-in only (inside the once-block): a user cannot replace a built-in rule, so the
   sum stays the rule's. */
void nbad_register_sum_into(const char *op_type, nbg_sum_fn f) {
  const nbop_def *def = nbop_lookup(op_type);
  assert(def && op_fns[def->id]);
  op_sum_into[def->id] = f;
}

nbg_sum_fn nbad_grad_sum_into(const nbop_def *def) { return op_sum_into[def->id]; }

void nbad_grad_reads(const nbop_def *def, uint32_t *reads_in, uint32_t *reads_out) {
  *reads_in = op_reads_in[def->id];
  *reads_out = op_reads_out[def->id];
}

/* The table is src/func's, so an op outside the reserved ones is a bug here, not a user
   error. */
void nbad_install_function_grads(const nbg_entry *table, size_t n) {
  nbad_grad_builtins_init();
  pthread_mutex_lock(&registry_lock);
  for (size_t i = 0; i < n; i++) {
    const nbop_def *def = nbop_lookup(table[i].op);
    assert(def && op_reserved[def->id]);
    op_fns[def->id] = table[i].fn;
    op_reads_in[def->id] = table[i].reads_in;
    op_reads_out[def->id] = table[i].reads_out;
  }
  pthread_mutex_unlock(&registry_lock);
}

nbad_grad_kind nbad_grad_lookup(const nbop_def *def, const char *override_name, nb_grad_fn *fn) {
  *fn = NULL;
  if (override_name) {
    const nbop_def *target = nbop_lookup(override_name);
    if (target) return nbad_grad_lookup(target, NULL, fn);
    const named_grad *n = find_named(override_name);
    if (!n) return NBAD_GRAD_NONE;
    *fn = n->fn;
    return NBAD_GRAD_FN;
  }
  if (op_stops[def->id]) return NBAD_GRAD_STOP;
  *fn = op_fns[def->id];
  return *fn ? NBAD_GRAD_FN : NBAD_GRAD_NONE;
}

bool nb_has_gradient(const char *op_type) {
  nbad_grad_builtins_init();
  const nbop_def *def = op_type ? nbop_lookup(op_type) : NULL;
  return def && (op_fns[def->id] || op_reserved[def->id]);
}

int nb_num_op_types(void) {
  nbop_registry_init();
  return nbop_count();
}

const char *nb_op_type_name(int i) {
  const nbop_def *def = nbop_by_id(i);
  return def ? def->name : NULL;
}

/* TF's _GradientsHelper sets each calculated input gradient's shape to its input's, which
   fails when they are incompatible: a gradient function returned something other than the
   gradient of that input. Integer and bool inputs take no gradient, so theirs is not
   checked; IndexedSlices carry their values' dtype and their dense shape. */
static nb_code mismatch(nb_ctx *c, nb_code code, const nb_fwd_op *op, int i, const char *what, const char *had,
                        const char *got) {
  return nbcore_fail(c, code,
                     "Incompatible %ss between op input and calculated input gradient. Forward operation: %s (op type: "
                     "%s). Input index: %d. Original input %s: %s. Calculated input gradient %s: %s",
                     what, op->name, op->def->name, i, what, had, what, got);
}

static nb_code check_input_grads(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dxs) {
  for (int i = 0; i < op->nin; i++) {
    const nb_tensor *x = op->in[i], *dx = dxs[i];
    if (!dx || !x || !nbcore_is_float(x->dtype)) continue;
    if (dx->dtype != x->dtype)
      return mismatch(c, NB_DTYPE, op, i, "dtype", nb_dtype_name(x->dtype), nb_dtype_name(dx->dtype));
    if (!nbop_shapes_compatible(x, dx)) return mismatch(c, NB_SHAPE, op, i, "shape", nbop_tstr(x), nbop_tstr(dx));
  }
  return NB_OK;
}

nb_code nbad_grad_invoke(nb_ctx *c, nb_grad_fn fn, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *guard = (nb_tensor *)&guard;
  for (int i = 0; i < op->nin; i++) dxs[i] = NULL;
  for (int i = 0; i < NBAD_GRAD_GUARDS; i++) dxs[op->nin + i] = guard;
  nbcore_scope_frame f = nbcore_scope_enter_callback(c);
  nb_code code = fn(c, op, dys, dxs);
  nb_code left = nbcore_scope_leave_callback(c, f, dxs, op->nin, "the gradient function of '%s' (op type: %s)",
                                             op->name, op->def->name);
  if (!code) code = left;
  int extra = 0;
  while (extra < NBAD_GRAD_GUARDS && dxs[op->nin + extra] != guard) extra++;
  if (!code && extra)
    return nbcore_fail(c, NB_INTERNAL, "Num gradients %s%d generated for op %s do not match num inputs %d",
                       extra == NBAD_GRAD_GUARDS ? "at least " : "", op->nin + extra, op->name, op->nin);
  if (code && nb_status(c) == NB_OK)
    nbcore_fail(c, code, "the gradient function of '%s' (op type: %s) failed", op->name, op->def->name);
  if (!code) code = nb_status(c);
  return code ? code : check_input_grads(c, op, dxs);
}

/* ---- gradient_override_map ------------------------------------------------------------- */

nb_code nb_gradient_override_push(nb_graph *g, const char *op_type, const char *grad_name) {
  if (!g || !op_type || !grad_name) return NB_INVALID;
  nbad_grad_builtins_init();
  const nbop_def *def = nbop_lookup(grad_name);
  if (!(def && (op_fns[def->id] || op_stops[def->id])) && !find_named(grad_name)) return NB_NOT_FOUND;
  if (!nbcore_grow_array((void **)&g->overrides, &g->overrides_cap, g->noverrides + 1, sizeof *g->overrides))
    return NB_NOMEM;
  const char *t = nbcore_arena_strdup(&g->arena, op_type), *n = nbcore_arena_strdup(&g->arena, grad_name);
  if (!t || !n) return NB_NOMEM;
  g->overrides[g->noverrides++] = (nbgraph_override){t, n};
  return NB_OK;
}

void nb_gradient_override_pop(nb_graph *g) {
  if (g && g->noverrides > 0) g->noverrides--;
}

/* ---- the forward-op view ----------------------------------------------------------------- */

bool nb_fwd_input_needs_grad(const nb_fwd_op *op, int i) {
  return op && i >= 0 && i < op->nin && (!op->needs_grad || op->needs_grad[i]);
}

const char *nb_fwd_type(const nb_fwd_op *op) { return op ? op->def->name : NULL; }
const char *nb_fwd_name(const nb_fwd_op *op) { return op ? op->name : NULL; }
int nb_fwd_num_inputs(const nb_fwd_op *op) { return op ? op->nin : 0; }
int nb_fwd_num_outputs(const nb_fwd_op *op) { return op ? op->nout : 0; }
nb_tensor *nb_fwd_input(const nb_fwd_op *op, int i) { return op && i >= 0 && i < op->nin ? op->in[i] : NULL; }
nb_tensor *nb_fwd_output(const nb_fwd_op *op, int i) { return op && i >= 0 && i < op->nout ? op->out[i] : NULL; }

static const nbop_attrval *attr_named(const nb_fwd_op *op, const char *name) {
  if (!op || !name) return NULL;
  for (int i = 0; i < op->def->nattrs; i++)
    if (strcmp(op->def->attrs[i].name, name) == 0) return &op->attr[i];
  return NULL;
}

int64_t nb_fwd_attr_int(const nb_fwd_op *op, const char *name) {
  const nbop_attrval *a = attr_named(op, name);
  return a ? a->i : 0;
}
double nb_fwd_attr_float(const nb_fwd_op *op, const char *name) {
  const nbop_attrval *a = attr_named(op, name);
  return a ? a->f : 0;
}
bool nb_fwd_attr_bool(const nb_fwd_op *op, const char *name) {
  const nbop_attrval *a = attr_named(op, name);
  return a ? a->b : false;
}
nb_dtype nb_fwd_attr_type(const nb_fwd_op *op, const char *name) {
  const nbop_attrval *a = attr_named(op, name);
  return a ? a->type : NB_F32;
}
const int64_t *nb_fwd_attr_ints(const nb_fwd_op *op, const char *name, int *n) {
  const nbop_attrval *a = attr_named(op, name);
  if (n) *n = a ? a->n : 0;
  return a ? a->ints : NULL;
}
const char *nb_fwd_attr_str(const nb_fwd_op *op, const char *name) {
  const nbop_attrval *a = attr_named(op, name);
  return a ? a->s : NULL;
}
const double *nb_fwd_attr_floats(const nb_fwd_op *op, const char *name, int *n) {
  const nbop_attrval *a = attr_named(op, name);
  if (n) *n = a ? a->n : 0;
  return a ? a->floats : NULL;
}
const nb_dtype *nb_fwd_attr_types(const nb_fwd_op *op, const char *name, int *n) {
  const nbop_attrval *a = attr_named(op, name);
  if (n) *n = a ? a->n : 0;
  return a ? a->types : NULL;
}
