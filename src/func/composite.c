/* Composite ops (TF's composite-op framework): an op type whose body is other ops, given
   as an nb_custom_fn written with public ops. A call in a graph context traces the body
   into a function graph and adds one StatefulPartitionedCall node of it (TF keeps a
   composite as a function call until a graph pass lowers it; here the session runs the
   call), so its gradient is the body's (SymbolicGradient) unless nb_register_gradient
   registered one under the composite's name: then that one, as TF's registered gradient
   of the op type wins over its body. An eager call runs the body directly, so a tape
   records the body's ops and differentiates through them; with a registered gradient it
   is refused, as one tape entry for the whole body is not built yet. */
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

static composite *composites;
static int ncomposites, composites_cap;
static pthread_mutex_t composites_lock = PTHREAD_MUTEX_INITIALIZER;

/* The composite named name, or NULL. Callers hold composites_lock. */
static const composite *find_locked(const char *name) {
  for (int i = 0; i < ncomposites; i++)
    if (strcmp(composites[i].name, name) == 0) return &composites[i];
  return NULL;
}

static nb_code add_locked(const char *name, nb_custom_fn fn, void *user, int nin, int nout) {
  if (find_locked(name) || nbop_lookup(name))
    return nbop_registry_fail(NB_INVALID, "nb_register_composite_op: an op type '%s' is already registered", name);
  if (!nbcore_grow_array((void **)&composites, &composites_cap, ncomposites + 1, sizeof *composites))
    return nbop_registry_fail(NB_NOMEM, "nb_register_composite_op: out of memory");
  size_t len = strlen(name) + 1;
  char *copy = malloc(len);
  if (!copy) return nbop_registry_fail(NB_NOMEM, "nb_register_composite_op: out of memory");
  memcpy(copy, name, len);
  composites[ncomposites++] = (composite){copy, fn, user, nin, nout};
  return NB_OK;
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

nb_code nb_composite_op(nb_ctx *c, const char *name, nb_tensor *const *in, int nin, nb_tensor **out, int nout) {
  if (!c) return NB_INVALID;
  for (int i = 0; out && i < nout; i++) out[i] = NULL;
  if (c->status) return c->status;
  if (!name || !out || (nin > 0 && !in)) return nbcore_fail(c, NB_INVALID, "nb_composite_op: NULL name, in or out");
  pthread_mutex_lock(&composites_lock);
  const composite *found = find_locked(name);
  composite op = found ? *found : (composite){0};
  pthread_mutex_unlock(&composites_lock);
  if (!found) return nbcore_fail(c, NB_NOT_FOUND, "nb_composite_op: no composite op '%s' is registered", name);
  if (nin != op.nin || nout != op.nout)
    return nbcore_fail(c, NB_INVALID, "%s: the composite op takes %d inputs and gives %d outputs, not %d and %d", name,
                       op.nin, op.nout, nin, nout);
  for (int i = 0; i < nin; i++)
    if (!in[i]) return nbcore_fail(c, NB_INVALID, "%s: input %d is NULL", name, i);
  if (c->graph) return add_call(c, &op, in, out);
  nb_grad_fn registered;
  if (nbad_grad_lookup(NULL, name, &registered) == NBAD_GRAD_FN)
    return nbcore_fail(c, NB_UNIMPLEMENTED,
                       "%s: an eager call of a composite op with a registered gradient (a tape would "
                       "need one entry for it); call it in a graph context",
                       name);
  return nbfunc_cf_call_body(c, name, body_adapter, in, out, nout, &op);
}
