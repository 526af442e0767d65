/* SavedModels in (nb_saved_model_load). saved_model.pb is a SavedModel message
   (proto/saved_model.proto). The MetaGraphDef of the tags asked gives the
   signatures; its GraphDef, pruned to the nodes the signatures need (so the
   saver's functions, full of string ops, stay out), is imported through
   graphdef.c; its object graph names each variable's checkpoint key, as TF's
   loader finds it; the checkpoint reader then restores the variables from
   variables/variables. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "file_read.h"
#include "graphdef.h"
#include "graphdef_common.h"
#include "saved_model.pb-c.h"

#include "../core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WHO "nb_saved_model_load"
#define RESERVED_PREFIX "__saved_model" /* __saved_model_init_op, __saved_model_train_op */
#define KEY_SUFFIX "/.ATTRIBUTES/VARIABLE_VALUE"
#define CHECKPOINT "variables/variables"

struct nb_saved_model {
  nb_saved_model_signature *sigs;
  int nsigs;
  nb_variable **vars;
  char **keys;
  int nvars;
};

/* ---- freeing
 * ----------------------------------------------------------------------------------
 */

static void free_tensors(nb_saved_model_tensor *t, int n) {
  for (int i = 0; t && i < n; i++) {
    free((void *)t[i].key);
    free((void *)t[i].name);
  }
  free(t);
}

void nb_saved_model_free(nb_saved_model *m) {
  if (!m) return;
  for (int i = 0; i < m->nsigs; i++) {
    nb_saved_model_signature *s = &m->sigs[i];
    free((void *)s->name);
    free((void *)s->method);
    free_tensors((nb_saved_model_tensor *)s->inputs, s->ninputs);
    free_tensors((nb_saved_model_tensor *)s->outputs, s->noutputs);
  }
  for (int i = 0; i < m->nvars; i++) free(m->keys[i]);
  free(m->sigs);
  free(m->vars);
  free(m->keys);
  free(m);
}

/* ---- the MetaGraphDef of the tags
 * ------------------------------------------------------------- */

/* Whether comma-separated tags name exactly the set mg has (TF's loader asks
 * for equality). */
static bool tags_match(const Nbpb__MetaGraphDef *mg, const char *tags) {
  const Nbpb__MetaGraphDef__MetaInfoDef *info = mg->meta_info_def;
  size_t have = info ? info->n_tags : 0, asked = 0;
  for (const char *t = tags; *t;) {
    size_t len = strcspn(t, ",");
    bool found = false;
    for (size_t i = 0; i < have && !found; i++) found = strlen(info->tags[i]) == len && !strncmp(info->tags[i], t, len);
    if (!found) return false;
    asked++;
    t += len + (t[len] == ',');
  }
  return asked == have;
}

static nb_code no_meta_graph(nb_ctx *c, const char *path, const Nbpb__SavedModel *sm, const char *tags) {
  char have[512] = "";
  size_t len = 0;
  for (size_t i = 0; i < sm->n_meta_graphs && len < sizeof have; i++) {
    const Nbpb__MetaGraphDef__MetaInfoDef *info = sm->meta_graphs[i]->meta_info_def;
    len += (size_t)snprintf(have + len, sizeof have - len, "%s[", i ? ", " : "");
    for (size_t t = 0; info && t < info->n_tags && len < sizeof have; t++)
      len += (size_t)snprintf(have + len, sizeof have - len, "%s%s", t ? "," : "", info->tags[t]);
    if (len < sizeof have) len += (size_t)snprintf(have + len, sizeof have - len, "]");
  }
  return nbcore_fail(c, NB_NOT_FOUND, WHO ": %s: no MetaGraphDef tagged '%s' (the file has %s)", path, tags,
                     sm->n_meta_graphs ? have : "none");
}

/* ---- signatures
 * -------------------------------------------------------------------------------
 */

static int by_key(const void *a, const void *b) {
  return strcmp(((const nb_saved_model_tensor *)a)->key, ((const nb_saved_model_tensor *)b)->key);
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const nb_saved_model_signature *)a)->name, ((const nb_saved_model_signature *)b)->name);
}

static nb_code tensor_info(nb_ctx *c, const char *path, const char *sig, const char *key, const Nbpb__TensorInfo *ti,
                           nb_saved_model_tensor *out) {
  out->key = strdup(key);
  out->name = strdup(ti ? ti->name : "");
  if (!out->key || !out->name) return nbcore_fail(c, NB_NOMEM, WHO ": out of memory");
  if (!out->name[0])
    return nbcore_fail(c, NB_UNIMPLEMENTED, WHO ": %s: signature '%s' tensor '%s' is sparse or composite", path, sig,
                       key);
  if (!nbio_dtype_from_tf(ti->dtype, &out->dtype))
    return nbcore_fail(c, NB_DTYPE, WHO ": %s: signature '%s' tensor '%s' (%s) is %s, a dtype nabla lacks", path, sig,
                       key, ti->name, nbio_tf_dtype_name(ti->dtype));
  if (!nbio_shape_from_proto(ti->tensor_shape, &out->rank, out->shape))
    return nbcore_fail(c, NB_CORRUPT, WHO ": %s: signature '%s' tensor '%s' has a bad shape", path, sig, key);
  return NB_OK;
}

static nb_code signature(nb_ctx *c, const char *path, const Nbpb__MetaGraphDef__SignatureDefEntry *e,
                         nb_saved_model_signature *s) {
  const Nbpb__SignatureDef *d = e->value;
  nb_saved_model_tensor *in = calloc(d->n_inputs + 1, sizeof *in), *out = calloc(d->n_outputs + 1, sizeof *out);
  *s = (nb_saved_model_signature){strdup(e->key), strdup(d->method_name), (int)d->n_inputs, (int)d->n_outputs, in, out};
  if (!s->name || !s->method || !in || !out) return nbcore_fail(c, NB_NOMEM, WHO ": out of memory");
  for (size_t i = 0; i < d->n_inputs; i++)
    if (tensor_info(c, path, s->name, d->inputs[i]->key, d->inputs[i]->value, &in[i])) return nb_status(c);
  for (size_t i = 0; i < d->n_outputs; i++)
    if (tensor_info(c, path, s->name, d->outputs[i]->key, d->outputs[i]->value, &out[i])) return nb_status(c);
  qsort(in, d->n_inputs, sizeof *in, by_key);
  qsort(out, d->n_outputs, sizeof *out, by_key);
  return NB_OK;
}

static nb_code signatures(nb_ctx *c, const char *path, const Nbpb__MetaGraphDef *mg, nb_saved_model *m) {
  m->sigs = calloc(mg->n_signature_def + 1, sizeof *m->sigs);
  if (!m->sigs) return nbcore_fail(c, NB_NOMEM, WHO ": out of memory");
  for (size_t i = 0; i < mg->n_signature_def; i++) {
    const Nbpb__MetaGraphDef__SignatureDefEntry *e = mg->signature_def[i];
    if (!strncmp(e->key, RESERVED_PREFIX, strlen(RESERVED_PREFIX)) || !e->value) continue;
    if (signature(c, path, e, &m->sigs[m->nsigs++])) return nb_status(c);
  }
  qsort(m->sigs, (size_t)m->nsigs, sizeof *m->sigs, by_name);
  return NB_OK;
}

/* ---- the nodes the signatures need
 * ---------------------------------------------------------- */

typedef struct named {
  const char *name;
  int index;
} named;

static int named_order(const void *a, const void *b) {
  return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* The node a node input or tensor name ("^x", "x", "x:1") refers to; -1 when
 * none. */
static int node_of(const named *idx, size_t n, const char *ref) {
  if (*ref == '^') ref++;
  size_t len = strcspn(ref, ":");
  char name[512];
  if (len >= sizeof name) return -1;
  memcpy(name, ref, len);
  name[len] = '\0';
  const named key = {name, 0}, *hit = bsearch(&key, idx, n, sizeof *idx, named_order);
  return hit ? hit->index : -1;
}

/* keep[i] for every node a signature tensor's node depends on (data or control
 * input). */
static nb_code mark_needed(nb_ctx *c, const char *path, const Nbpb__GraphDef *gd, const named *idx,
                           const nb_saved_model *m, bool *keep) {
  int *stack = malloc((gd->n_node ? gd->n_node : 1) * sizeof *stack), top = 0;
  if (!stack) return nbcore_fail(c, NB_NOMEM, WHO ": out of memory");
  for (int s = 0; s < m->nsigs; s++)
    for (int k = 0; k < m->sigs[s].ninputs + m->sigs[s].noutputs; k++) {
      const nb_saved_model_signature *sig = &m->sigs[s];
      const nb_saved_model_tensor *t = k < sig->ninputs ? &sig->inputs[k] : &sig->outputs[k - sig->ninputs];
      int i = node_of(idx, gd->n_node, t->name);
      if (i < 0) {
        free(stack);
        return nbcore_fail(c, NB_CORRUPT,
                           WHO
                           ": %s: signature '%s' names tensor '%s', but "
                           "the graph has no such node",
                           path, sig->name, t->name);
      }
      if (!keep[i]) keep[stack[top++] = i] = true;
    }
  while (top > 0) {
    const Nbpb__NodeDef *n = gd->node[stack[--top]];
    for (size_t k = 0; k < n->n_input; k++) {
      int i = node_of(idx, gd->n_node, n->input[k]);
      if (i >= 0 && !keep[i]) keep[stack[top++] = i] = true; /* a missing input: the import names it */
    }
  }
  free(stack);
  return NB_OK;
}

/* ---- variables' checkpoint keys
 * ---------------------------------------------------------------- */

static bool is_variable(const Nbpb__NodeDef *n) {
  return !strcmp(n->op, "VarHandleOp") || !strcmp(n->op, "VariableV2") || !strcmp(n->op, "Variable");
}

/* A local name in a key: '.' as "..", '/' as ".S" (TF's trackable escaping). */
static size_t escape(const char *name, char *out) {
  size_t len = 0;
  for (const char *p = name; *p; p++) {
    if (*p == '.' || *p == '/') {
      if (out) out[len] = '.', out[len + 1] = *p == '.' ? '.' : 'S';
      len += 2;
    } else {
      if (out) out[len] = *p;
      len++;
    }
  }
  return len;
}

/* Object-graph node obj's checkpoint key: the local names on its breadth-first
   path from the root (parent[] and via[], the child reference reaching each
   node), then KEY_SUFFIX. */
static char *object_key(const int *parent, const char *const *via, int obj) {
  size_t len = sizeof KEY_SUFFIX, parts = 0; /* the parts, '/' between them, the suffix */
  for (int o = obj; parent[o] >= 0; o = parent[o], parts++) len += escape(via[o], NULL);
  len += parts ? parts - 1 : 0;
  char *key = malloc(len);
  if (!key) return NULL;
  size_t end = len - sizeof KEY_SUFFIX;
  memcpy(key + end, KEY_SUFFIX, sizeof KEY_SUFFIX);
  for (int o = obj; parent[o] >= 0; o = parent[o]) { /* written from the end */
    size_t part = escape(via[o], NULL);
    end -= part;
    escape(via[o], key + end);
    if (end > 0) key[--end] = '/';
  }
  return key;
}

/* Breadth-first from the root: parent[o] (-1 for the root, -2 unreached) and
 * via[o]. */
static nb_code object_paths(nb_ctx *c, const Nbpb__SavedObjectGraph *og, int *parent, const char **via) {
  int n = (int)og->n_nodes, *queue = malloc((size_t)n * sizeof *queue), head = 0, tail = 0;
  if (!queue) return nbcore_fail(c, NB_NOMEM, WHO ": out of memory");
  for (int o = 0; o < n; o++) parent[o] = -2;
  parent[0] = -1;
  queue[tail++] = 0;
  while (head < tail) {
    int o = queue[head++];
    for (size_t k = 0; k < og->nodes[o]->n_children; k++) {
      const Nbpb__ObjectReference *r = og->nodes[o]->children[k];
      if (r->node_id < 0 || r->node_id >= n || parent[r->node_id] != -2) continue;
      parent[r->node_id] = o;
      via[r->node_id] = r->local_name;
      queue[tail++] = r->node_id;
    }
  }
  free(queue);
  return NB_OK;
}

static const Nbpb__SavedConcreteFunction *concrete_function(const Nbpb__SavedObjectGraph *og, const char *name) {
  for (size_t i = 0; i < og->n_concrete_functions; i++)
    if (!strcmp(og->concrete_functions[i]->key, name)) return og->concrete_functions[i]->value;
  return NULL;
}

static const char *called_function(const Nbpb__NodeDef *n) {
  for (size_t i = 0; i < n->n_attr; i++)
    if (!strcmp(n->attr[i]->key, "f") && n->attr[i]->value &&
        n->attr[i]->value->value_case == NBPB__ATTR_VALUE__VALUE_FUNC && n->attr[i]->value->func)
      return n->attr[i]->value->func->name;
  return NULL;
}

/* keys[i] for each kept variable node i that a kept call binds: the call's
   trailing data inputs are its function's captures, bound in order to
   object-graph nodes. */
static nb_code bound_keys(nb_ctx *c, const Nbpb__GraphDef *gd, const Nbpb__SavedObjectGraph *og, const named *idx,
                          const bool *keep, char **keys) {
  if (!og || og->n_nodes == 0) return NB_OK;
  int *parent = malloc(og->n_nodes * sizeof *parent);
  const char **via = calloc(og->n_nodes, sizeof *via);
  nb_code code = parent && via ? object_paths(c, og, parent, via) : nbcore_fail(c, NB_NOMEM, WHO ": out of memory");
  for (size_t i = 0; i < gd->n_node && !code; i++) {
    const char *f = keep[i] ? called_function(gd->node[i]) : NULL;
    const Nbpb__SavedConcreteFunction *cf = f ? concrete_function(og, f) : NULL;
    size_t ndata = 0, first;
    for (size_t k = 0; cf && k < gd->node[i]->n_input; k++) ndata += gd->node[i]->input[k][0] != '^';
    if (!cf || cf->n_bound_inputs > ndata) continue;
    first = ndata - cf->n_bound_inputs;
    for (size_t k = 0; k < cf->n_bound_inputs && !code; k++) {
      int obj = cf->bound_inputs[k], v = node_of(idx, gd->n_node, gd->node[i]->input[first + k]);
      if (obj < 0 || (size_t)obj >= og->n_nodes || parent[obj] == -2 || v < 0 || keys[v] || !is_variable(gd->node[v]) ||
          og->nodes[obj]->kind_case != NBPB__SAVED_OBJECT__KIND_VARIABLE)
        continue;
      if (!(keys[v] = object_key(parent, via, obj))) code = nbcore_fail(c, NB_NOMEM, WHO ": out of memory");
    }
  }
  free(parent);
  free(via);
  return code;
}

/* ---- loading
 * -------------------------------------------------------------------------------------
 */

typedef struct plan {
  const char *dir, *path; /* path: saved_model.pb's */
  const Nbpb__GraphDef *gd;
  named *idx;
  bool *keep;
  char **keys; /* per node: a variable's key, else NULL */
  int nvars;
} plan;

static nb_code plan_variables(nb_ctx *c, const Nbpb__MetaGraphDef *mg, plan *p) {
  const Nbpb__GraphDef *gd = p->gd;
  if (bound_keys(c, gd, mg->object_graph_def, p->idx, p->keep, p->keys)) return nb_status(c);
  for (size_t i = 0; i < gd->n_node; i++) {
    if (!p->keep[i] || !is_variable(gd->node[i])) continue;
    if (!p->keys[i] && !(p->keys[i] = strdup(gd->node[i]->name)))
      return nbcore_fail(c, NB_NOMEM, WHO ": out of memory");
    p->nvars++;
  }
  return NB_OK;
}

static char *path_join(const char *dir, const char *file) {
  size_t a = strlen(dir), b = strlen(file);
  char *s = malloc(a + b + 2);
  if (s) snprintf(s, a + b + 2, "%s/%s", dir, file);
  return s;
}

static int entry_order(const void *key, const void *e) { return strcmp(key, ((const nb_checkpoint_entry *)e)->key); }

/* Every variable's key is in the checkpoint (read through e, an eager context).
 */
static nb_code check_keys(nb_ctx *c, nb_ctx *e, const plan *p, const char *prefix) {
  nb_checkpoint_entry *entries = NULL;
  int n = 0;
  if (nb_checkpoint_list(e, prefix, &entries, &n)) return nbcore_fail(c, nb_status(e), WHO ": %s", nb_error(e));
  nb_code code = NB_OK;
  for (size_t i = 0; i < p->gd->n_node && !code; i++)
    if (p->keys[i] && !bsearch(p->keys[i], entries, (size_t)n, sizeof *entries, entry_order))
      code = nbcore_fail(c, NB_NOT_FOUND, WHO ": %s: variable '%s' (checkpoint key '%s') is not in checkpoint %s",
                         p->path, p->gd->node[i]->name, p->keys[i], prefix);
  nb_checkpoint_list_free(entries, n);
  return code;
}

typedef struct keyed {
  char *key;
  nb_variable *var;
} keyed;

static int keyed_order(const void *a, const void *b) {
  return strcmp(((const keyed *)a)->key, ((const keyed *)b)->key);
}

/* The imported variables (named as their nodes) with their keys, in key order,
 * into m. */
static nb_code collect_variables(nb_ctx *c, const plan *p, nb_saved_model *m) {
  int total = nb_graph_variables(c, NULL, 0);
  nb_variable **all = malloc((size_t)(total > 0 ? total : 1) * sizeof *all);
  keyed *kv = calloc((size_t)(p->nvars ? p->nvars : 1), sizeof *kv);
  m->vars = malloc((size_t)(p->nvars ? p->nvars : 1) * sizeof *m->vars);
  m->keys = calloc((size_t)(p->nvars ? p->nvars : 1), sizeof *m->keys);
  nb_code code = all && kv && m->vars && m->keys ? NB_OK : nbcore_fail(c, NB_NOMEM, WHO ": out of memory");
  if (!code) nb_graph_variables(c, all, total);
  int n = 0;
  for (size_t i = 0; i < p->gd->n_node && !code; i++) {
    if (!p->keys[i]) continue;
    kv[n].key = p->keys[i];
    for (int v = 0; v < total && !kv[n].var; v++)
      if (!strcmp(nb_variable_name(all[v]), p->gd->node[i]->name)) kv[n].var = all[v];
    if (!kv[n++].var)
      code =
          nbcore_fail(c, NB_INTERNAL, WHO ": %s: variable node '%s' made no variable", p->path, p->gd->node[i]->name);
  }
  if (!code) {
    qsort(kv, (size_t)n, sizeof *kv, keyed_order);
    for (int i = 0; i < n; i++) {
      m->vars[i] = kv[i].var;
      m->keys[i] = kv[i].key;
    }
    for (size_t i = 0; i < p->gd->n_node; i++) p->keys[i] = NULL; /* moved to m */
    m->nvars = n;
  }
  free(all);
  free(kv);
  return code;
}

static nb_code restore(nb_ctx *c, nb_ctx *e, const nb_saved_model *m, const char *prefix) {
  if (nb_checkpoint_restore(e, prefix, m->vars, (const char *const *)m->keys, m->nvars, NULL))
    return nbcore_fail(c, nb_status(e), WHO ": %s", nb_error(e));
  return NB_OK;
}

/* The pruned graph imported, its variables checked, collected and restored. */
static nb_code import(nb_ctx *c, const Nbpb__MetaGraphDef *mg, plan *p, nb_saved_model *m) {
  nb_ctx *e = nb_eager_new();
  char *prefix = path_join(p->dir, CHECKPOINT);
  const Nbpb__NodeDef **kept = malloc((p->gd->n_node ? p->gd->n_node : 1) * sizeof *kept);
  nb_code code = e && prefix && kept ? plan_variables(c, mg, p) : nbcore_fail(c, NB_NOMEM, WHO ": out of memory");
  if (!code && p->nvars) code = check_keys(c, e, p, prefix);
  if (!code) {
    Nbpb__GraphDef pruned = *p->gd; /* the same library and versions, fewer nodes */
    pruned.n_node = 0;
    pruned.node = (Nbpb__NodeDef **)kept;
    for (size_t i = 0; i < p->gd->n_node; i++)
      if (p->keep[i]) kept[pruned.n_node++] = p->gd->node[i];
    code = nbio_graphdef_import(c, &pruned, "saved_model.pb");
  }
  if (!code) code = collect_variables(c, p, m);
  if (!code && m->nvars) code = restore(c, e, m, prefix);
  free(kept);
  free(prefix);
  nb_ctx_free(e);
  return code;
}

static nb_code load_meta_graph(nb_ctx *c, const char *dir, const char *path, const Nbpb__MetaGraphDef *mg,
                               nb_saved_model *m) {
  if (!mg->graph_def) return nbcore_fail(c, NB_CORRUPT, WHO ": %s: the MetaGraphDef has no GraphDef", path);
  if (signatures(c, path, mg, m)) return nb_status(c);
  const Nbpb__GraphDef *gd = mg->graph_def;
  size_t n = gd->n_node ? gd->n_node : 1;
  plan p = {.dir = dir,
            .path = path,
            .gd = gd,
            .idx = malloc(n * sizeof *p.idx),
            .keep = calloc(n, sizeof *p.keep),
            .keys = calloc(n, sizeof *p.keys)};
  nb_code code = p.idx && p.keep && p.keys ? NB_OK : nbcore_fail(c, NB_NOMEM, WHO ": out of memory");
  for (size_t i = 0; i < gd->n_node && !code; i++) p.idx[i] = (named){gd->node[i]->name, (int)i};
  if (!code) {
    qsort(p.idx, gd->n_node, sizeof *p.idx, named_order);
    code = mark_needed(c, path, gd, p.idx, m, p.keep);
  }
  if (!code) code = import(c, mg, &p, m);
  for (size_t i = 0; p.keys && i < gd->n_node; i++) free(p.keys[i]);
  free(p.idx);
  free(p.keep);
  free(p.keys);
  return code;
}

nb_code nb_saved_model_load(nb_ctx *c, const char *dir, const char *tags, nb_saved_model **out) {
  if (out) *out = NULL;
  if (!nbop_live(c)) return c ? nb_status(c) : NB_INVALID;
  if (!c->graph || !dir || !out) return nbcore_fail(c, NB_INVALID, WHO ": needs a graph context, a directory and out");
  if (!tags) tags = "serve";
  char *path = path_join(dir, "saved_model.pb");
  uint8_t *bytes = NULL;
  size_t n = 0;
  if (!path) return nbcore_fail(c, NB_NOMEM, WHO ": out of memory");
  Nbpb__SavedModel *sm = NULL;
  if (nbio_read_file(c, WHO, path, &bytes, &n) == NB_OK && !(sm = nbpb__saved_model__unpack(NULL, n, bytes)))
    nbcore_fail(c, NB_CORRUPT, WHO ": %s: not a SavedModel (truncated, or not protobuf)", path);
  free(bytes);
  const Nbpb__MetaGraphDef *mg = NULL;
  for (size_t i = 0; sm && i < sm->n_meta_graphs && !mg; i++)
    if (tags_match(sm->meta_graphs[i], tags)) mg = sm->meta_graphs[i];
  if (sm && !mg) no_meta_graph(c, path, sm, tags);
  nb_saved_model *m = mg ? calloc(1, sizeof *m) : NULL;
  if (mg && !m) nbcore_fail(c, NB_NOMEM, WHO ": out of memory");
  if (m && load_meta_graph(c, dir, path, mg, m) == NB_OK)
    *out = m;
  else
    nb_saved_model_free(m);
  if (sm) nbpb__saved_model__free_unpacked(sm, NULL);
  free(path);
  return nb_status(c);
}

/* ---- reading the model
 * ------------------------------------------------------------------------ */

int nb_saved_model_num_signatures(const nb_saved_model *m) { return m ? m->nsigs : -1; }

const nb_saved_model_signature *nb_saved_model_signature_at(const nb_saved_model *m, int i) {
  return m && i >= 0 && i < m->nsigs ? &m->sigs[i] : NULL;
}

const nb_saved_model_signature *nb_saved_model_find_signature(const nb_saved_model *m, const char *name) {
  for (int i = 0; m && name && i < m->nsigs; i++)
    if (!strcmp(m->sigs[i].name, name)) return &m->sigs[i];
  return NULL;
}

nb_code nb_saved_model_signature_tensors(nb_ctx *c, const nb_saved_model_signature *sig, nb_tensor **inputs,
                                         nb_tensor **outputs) {
  if (!nbop_live(c)) return c ? nb_status(c) : NB_INVALID;
  if (!sig) return nbcore_fail(c, NB_INVALID, "nb_saved_model_signature_tensors: NULL signature");
  for (int i = 0; inputs && i < sig->ninputs; i++)
    if (!(inputs[i] = nb_graph_tensor_by_name(c, sig->inputs[i].name))) return nb_status(c);
  for (int i = 0; outputs && i < sig->noutputs; i++)
    if (!(outputs[i] = nb_graph_tensor_by_name(c, sig->outputs[i].name))) return nb_status(c);
  return NB_OK;
}

int nb_saved_model_num_variables(const nb_saved_model *m) { return m ? m->nvars : -1; }

nb_variable *nb_saved_model_variable(const nb_saved_model *m, int i) {
  return m && i >= 0 && i < m->nvars ? m->vars[i] : NULL;
}

const char *nb_saved_model_variable_key(const nb_saved_model *m, int i) {
  return m && i >= 0 && i < m->nvars ? m->keys[i] : NULL;
}
