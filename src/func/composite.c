/* Composite ops (TF's composite-op framework): an op type whose body is other ops, given
   as an nb_custom_fn written with public ops. A call in a graph context traces the body
   into a function graph and adds one StatefulPartitionedCall node of it (TF keeps a
   composite as a function call until a graph pass lowers it; here the session runs the
   call), so its gradient is the body's (SymbolicGradient) unless nb_register_gradient
   registered one under the composite's name: then that one, as TF's registered gradient
   of the op type wins over its body. An eager call runs the body directly, so a tape
   records the body's ops and differentiates through them; with a registered gradient the
   body runs unrecorded inside one custom-gradient entry whose gradient is that rule, shown
   the call as the graph's call node would be (eager_grad), so one rule serves both. A
   composite reserves its name in the op registry, so no op type takes it later. */
#include "../autodiff/autodiff.h"
#include "func.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct composite {
  char *name;
  nb_custom_fn fn;
  void *user;
  int nin, nout;
} composite;

/* Each composite is allocated once and never freed or moved: eager tape entries hold it. */
static composite **composites;
static int ncomposites, composites_cap;
static pthread_mutex_t composites_lock = PTHREAD_MUTEX_INITIALIZER;

/* The composite named name, or NULL. */
static const composite *find(const char *name) {
  const composite *found = NULL;
  pthread_mutex_lock(&composites_lock);
  for (int i = 0; i < ncomposites && !found; i++)
    if (strcmp(composites[i]->name, name) == 0) found = composites[i];
  pthread_mutex_unlock(&composites_lock);
  return found;
}

/* Reserving the name in the op registry refuses a name any op type or composite holds. */
static nb_code add_locked(const char *name, nb_custom_fn fn, void *user, int nin, int nout) {
  size_t len = strlen(name) + 1;
  composite *op = malloc(sizeof *op);
  char *copy = malloc(len);
  nb_code code =
      op && copy && nbcore_grow_array((void **)&composites, &composites_cap, ncomposites + 1, sizeof *composites)
          ? NB_OK
          : NB_NOMEM;
  if (!code) {
    memcpy(copy, name, len);
    code = nbop_reserve_name(copy);
  }
  if (!code) {
    *op = (composite){copy, fn, user, nin, nout};
    composites[ncomposites++] = op;
    return NB_OK;
  }
  free(copy);
  free(op);
  return code == NB_NOMEM
             ? nbop_registry_fail(NB_NOMEM, "nb_register_composite_op: out of memory")
             : nbop_registry_fail(code, "nb_register_composite_op: an op type '%s' is already registered", name);
}

nb_code nb_register_composite_op(const char *name, nb_custom_fn fn, void *user, int nin, int nout) {
  nbop_registry_clear_error();
  if (!nbop_valid_op_name(name))
    return nbop_registry_fail(NB_INVALID,
                              "nb_register_composite_op: '%s' is not a valid op type name ([A-Z][A-Za-z0-9_>]*)",
                              name ? name : "(null)");
  if (!fn || nin < 0 || nout < 1)
    return nbop_registry_fail(NB_INVALID,
                              "nb_register_composite_op: op '%s': NULL body or counts out of range (nin %d, nout %d)",
                              name, nin, nout);
  pthread_mutex_lock(&composites_lock);
  nb_code code = add_locked(name, fn, user, nin, nout);
  pthread_mutex_unlock(&composites_lock);
  return code;
}

/* The body as an nb_body_fn (what function tracing calls), checking it made every output. */
static nb_code body_adapter(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  const composite *op = user;
  nb_code code = op->fn(c, in, op->nin, out, op->nout, op->user);
  for (int i = 0; i < op->nout && !code; i++)
    if (!out[i]) code = nbcore_fail(c, NB_INVALID, "%s: the composite op's body left output %d NULL", op->name, i);
  return code;
}

/* One call node of the body traced as a function of c's graph, with the gradient
   registered under the op's name when there is one. */
static nb_code add_call(nb_ctx *c, const composite *op, nb_tensor *const *in, nb_tensor **out) {
  nb_function *f = nb_function_new(c, body_adapter, (void *)op, in, op->nin, op->nout);
  if (!f) return nb_status(c);
  nb_grad_fn registered;
  if (nbad_grad_lookup(NULL, op->name, &registered) == NBAD_GRAD_FN) nb_function_set_gradient(f, registered);
  return nb_call_function(c, f, in, op->nin, out, op->nout);
}

/* The registered gradient of a composite on its eager tape entry (user: the composite). It
   sees the call as the graph's call node shows it: type StatefulPartitionedCall, inputs the
   body's arguments (eagerly there are no captured tensors), the outputs, attr N the input
   count (_f, the traced function, is 0: there is none); every input counts as needing a
   gradient (the custom-gradient entry does not pass which do). Its gradients go through a
   buffer of its own, as nbad_grad_invoke guards the slots past them, which the entry's
   also are. */
static nb_code eager_grad(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                          nb_tensor *const *dys, nb_tensor **dxs, void *user) {
  const composite *op = user;
  nb_grad_fn rule;
  if (nbad_grad_lookup(NULL, op->name, &rule) != NBAD_GRAD_FN)
    return nb_set_error(c, NB_INTERNAL, "%s: no gradient is registered for the composite op", op->name);
  const nbop_def *def = nbop_lookup("StatefulPartitionedCall");
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(def, a);
  a[0].i = nin; /* N */
  nb_fwd_op call = {def, op->name, nin, nout, in, out, a, NULL};
  nb_tensor **got = calloc((size_t)nin + NBAD_GRAD_GUARDS, sizeof *got);
  if (!got) return nb_set_error(c, NB_NOMEM, "%s gradient: out of memory", op->name);
  nb_code code = nbad_grad_invoke(c, rule, &call, dys, got);
  if (!code) memcpy(dxs, got, (size_t)nin * sizeof *got);
  free(got);
  return code;
}

/* The body as an nb_custom_fn for nbad_custom_gradient (user: the composite). */
static nb_code eager_body(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout;
  return body_adapter(c, in, out, user);
}

nb_code nb_composite_op(nb_ctx *c, const char *name, nb_tensor *const *in, int nin, nb_tensor **out, int nout) {
  if (!c) return NB_INVALID;
  for (int i = 0; out && i < nout; i++) out[i] = NULL;
  if (c->status) return c->status;
  if (!name || !out || (nin > 0 && !in)) return nbcore_fail(c, NB_INVALID, "nb_composite_op: NULL name, in or out");
  const composite *op = find(name);
  if (!op) return nbcore_fail(c, NB_NOT_FOUND, "nb_composite_op: no composite op '%s' is registered", name);
  if (nin != op->nin || nout != op->nout)
    return nbcore_fail(c, NB_INVALID, "%s: the composite op takes %d inputs and gives %d outputs, not %d and %d", name,
                       op->nin, op->nout, nin, nout);
  for (int i = 0; i < nin; i++)
    if (!in[i]) return nbcore_fail(c, NB_INVALID, "%s: input %d is NULL", name, i);
  if (c->graph) return add_call(c, op, in, out);
  nb_grad_fn registered;
  if (nbad_grad_lookup(NULL, name, &registered) == NBAD_GRAD_FN)
    return nbad_custom_gradient(c, op->name, eager_body, eager_grad, (void *)op, in, nin, out, nout);
  return nbfunc_cf_call_body(c, name, body_adapter, in, out, nout, (void *)op);
}
