/* Variables (tf.Variable): a value that lives outside every context scope and persists
   across steps and session runs.

   Eager: every read returns a handle sharing the variable's buffer under the variable's
   own tensor id, so a tape's gradient for that id sums over all reads (TF sends the
   gradient to the variable's handle). Tapes watch trainable variables as they are read
   (watch_accessed_variables). Assigns write in place unless a read handle, a tape or a
   session value still holds the old buffer: then the variable moves to a new one and the
   holders keep the old value (copy-on-write).

   Graphs: a graph has one ReadVariableOp node per variable, which yields the value at run
   time; every assign or optimizer update of the variable waits for that node (a control
   edge). So within one nb_run every read sees the value from the start of the run and the
   updates apply after it; several updates of one variable in one run apply in an
   unspecified order unless control inputs order them. Values persist across runs.
   A graph keeps the variables its nodes use alive: after nb_variable_free, running such a
   node fails with NB_INVALID naming the variable. */
#include "runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

nb_variable *nb_variable_new(nb_ctx *c, nb_tensor *initial, bool trainable, const char *name) {
  if (!nbop_live(c)) return NULL;
  if (!initial || !initial->buf) {
    nbcore_fail(c, NB_INVALID, "nb_variable_new: the initial value of variable '%s' must be a concrete tensor",
                name ? name : "Variable");
    return NULL;
  }
  nbcore_buffer_retain(initial->buf); /* shared: the first in-place write copies it while initial lives */
  nb_variable *v = nbcore_variable_make(initial->dtype, initial->rank, initial->shape, initial->buf, trainable, name);
  if (!v) nbcore_fail(c, NB_NOMEM, "nb_variable_new: out of memory");
  return v;
}

void nb_variable_free(nb_variable *v) {
  if (!v || v->freed) return;
  v->freed = true;
  nbcore_buffer_release(NULL, v->buf);
  v->buf = NULL;
  nbcore_variable_release(v);
}

const char *nb_variable_name(const nb_variable *v) { return v ? v->name : NULL; }
bool nb_variable_trainable(const nb_variable *v) { return v && v->trainable; }
nb_dtype nb_variable_dtype(const nb_variable *v) { return v ? v->dtype : NB_F32; }
int nb_variable_rank(const nb_variable *v) { return v ? v->rank : -1; }
const int64_t *nb_variable_shape(const nb_variable *v) { return v ? v->shape : NULL; }
const void *nb_variable_data(const nb_variable *v) { return v && v->buf ? v->buf->data : NULL; }

/* ---- graphs ------------------------------------------------------------------------------ */

/* v's entry in c's graph, added (and v retained) on first use; NULL when out of memory. */
static nbgraph_var *graph_var(nb_ctx *c, nb_variable *v) {
  nb_graph *g = c->graph;
  for (int32_t i = 0; i < g->nvars; i++)
    if (g->vars[i].var == v) return &g->vars[i];
  if (!nbcore_grow_array((void **)&g->vars, &g->vars_cap, g->nvars + 1, sizeof *g->vars)) {
    nbcore_fail(c, NB_NOMEM, "out of memory adding variable '%s' to a graph", v->name);
    return NULL;
  }
  nbcore_variable_retain(v);
  g->vars[g->nvars] = (nbgraph_var){v, -1, false};
  return &g->vars[g->nvars++];
}

/* Calls def with its node named "<variable>_<suffix>" ('/' in the name become '_'). */
static nb_tensor *named_call(nb_ctx *c, const nbop_def *def, const nb_variable *v, nb_tensor *const *in, int nin,
                             const nbop_attrval *attrs, const char *suffix) {
  char name[256];
  snprintf(name, sizeof name, "%s_%s", v->name, suffix);
  for (char *p = name; *p; p++)
    if (*p == '/') *p = '_';
  if (c->graph) c->next_name = name;
  nb_tensor *out = nbop_call(c, def, in, nin, attrs);
  c->next_name = NULL;
  return out;
}

/* The id of v's ReadVariableOp node in c's graph, made on first use; -1 on error. */
static int32_t read_node(nb_ctx *c, nb_variable *v) {
  nbgraph_var *gv = graph_var(c, v);
  if (!gv) return -1;
  if (gv->read_node >= 0) return gv->read_node;
  nbop_attrval attrs[NBOP_MAX_ATTRS] = {{.type = v->dtype}, {.i = nbcore_variable_bits(v)}};
  nb_tensor *x = named_call(c, nbop_lookup("ReadVariableOp"), v, NULL, 0, attrs, "read");
  if (!x) return -1;
  gv->read_node = x->node;
  nb_tensor_free(x);
  return gv->read_node;
}

nb_tensor *nb_variable_read(nb_ctx *c, nb_variable *v) {
  if (!nbop_live(c)) return NULL;
  if (!v || v->freed) {
    nbcore_fail(c, NB_INVALID, "nb_variable_read: %s variable", v ? "a freed" : "NULL");
    return NULL;
  }
  if (c->graph) {
    int32_t node = read_node(c, v);
    return node < 0 ? NULL : nbgraph_handle(c, c->graph, node, 0);
  }
  nb_tensor *x = nbcore_variable_handle(c, v);
  if (x && v->trainable && c->watch_read) c->watch_read(c, v);
  return x;
}

nb_tensor *nbrt_variable_update(nb_ctx *c, const nbop_def *def, nb_variable *const *uses, int nuses,
                                nb_tensor *const *in, int nin, const void *attrs, const char *suffix) {
  if (!c->graph) return named_call(c, def, uses[0], in, nin, attrs, suffix);
  for (int i = 1; i < nuses; i++)
    if (!graph_var(c, uses[i])) return NULL;
  int32_t read = read_node(c, uses[0]);
  nb_tensor *op = read < 0 ? NULL : named_call(c, def, uses[0], in, nin, attrs, suffix);
  nb_tensor *r = op ? nbgraph_handle(c, c->graph, read, 0) : NULL;
  if (r && nb_add_control_input(op, r) != NB_OK) {
    nbcore_fail(c, NB_NOMEM, "out of memory ordering an update of variable '%s' after its read", uses[0]->name);
    nb_tensor_free(op);
    op = NULL;
  }
  nb_tensor_free(r);
  return op;
}

/* The update op `type` of v with inputs in[0..nin) (none NULL). Eager: it runs now and a
   read of the new value is returned. Graph: the update's node, to fetch. */
static nb_tensor *update(nb_ctx *c, nb_variable *v, nb_tensor *const *in, int nin, const char *type,
                         const char *suffix) {
  if (!nbop_live(c)) return NULL;
  bool null_input = false;
  for (int i = 0; i < nin; i++) null_input |= !in[i];
  if (!v || null_input || v->freed) {
    nbcore_fail(c, NB_INVALID, "%s: %s", type,
                !v         ? "NULL variable"
                : v->freed ? "a freed variable"
                : nin == 1 ? "NULL value"
                           : "NULL indices or updates");
    return NULL;
  }
  nbop_attrval attrs[NBOP_MAX_ATTRS] = {{.type = v->dtype}, {.i = nbcore_variable_bits(v)}};
  nb_tensor *op = nbrt_variable_update(c, nbop_lookup(type), &v, 1, in, nin, attrs, suffix);
  if (!op || c->graph) return op;
  nb_tensor_free(op);
  return nb_variable_read(c, v);
}

nb_tensor *nb_variable_assign(nb_ctx *c, nb_variable *v, nb_tensor *value) {
  return update(c, v, &value, 1, "AssignVariableOp", "assign");
}
nb_tensor *nb_variable_assign_add(nb_ctx *c, nb_variable *v, nb_tensor *value) {
  return update(c, v, &value, 1, "AssignAddVariableOp", "assign_add");
}
nb_tensor *nb_variable_assign_sub(nb_ctx *c, nb_variable *v, nb_tensor *value) {
  return update(c, v, &value, 1, "AssignSubVariableOp", "assign_sub");
}

/* ResourceScatterAdd/Sub: the indices beside the updates. */
nb_tensor *nb_variable_scatter_add(nb_ctx *c, nb_variable *v, nb_tensor *indices, nb_tensor *updates) {
  nb_tensor *in[2] = {indices, updates};
  return update(c, v, in, 2, "ResourceScatterAdd", "scatter_add");
}
nb_tensor *nb_variable_scatter_sub(nb_ctx *c, nb_variable *v, nb_tensor *indices, nb_tensor *updates) {
  nb_tensor *in[2] = {indices, updates};
  return update(c, v, in, 2, "ResourceScatterSub", "scatter_sub");
}
