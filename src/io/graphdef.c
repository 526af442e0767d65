/* GraphDef import: TF's binary GraphDef (graph.proto) into a graph context's graph.

   A node list (the GraphDef's nodes, or a FunctionDef's body) is first resolved: every
   input name to a producer and output, the nodes sorted topologically (Kahn's algorithm:
   a node is built after everything it names as an input, data or control), and every op
   type checked against nabla's registry, across the functions the graph reaches. Then
   each node is built through nabla's dispatch with TF's attrs mapped onto the op's (a TF
   file omits default-valued attrs: the op's defaults fill them), named as in the file, so
   nb_graph_tensor_by_name finds "dense/MatMul:0". Function calls, While and If trace their
   FunctionDefs into nabla function graphs (nb_function_new, nb_while_ex, nb_cond): the
   trace callback builds the body's nodes the same way. Resources (VarHandleOp, VariableV2,
   resource arguments of functions) stand for nabla variables, which the graph owns;
   control-only nodes (NoOp) pass their control inputs on to their dependents. The graph
   is marked first and rolled back on any error, so a failed import leaves it unchanged. */
#include "graphdef.h"
#include "graphdef_common.h"

#include "../core/variable.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* TF's DT_RESOURCE; how deep function calls may nest, and how many function instances one
   import may trace (a bound on files whose calls multiply: f calling g twice, g calling h
   twice, ...). */
enum { TF_RESOURCE = 20, MAX_FUNC_DEPTH = 32, MAX_TRACES = 4096 };

/* What one output of an imported node stands for. */
typedef struct gd_val {
  nb_tensor *t;     /* a tensor of the importing context (a variable's read for resources) */
  nb_variable *var; /* the variable of a resource or of a TF 1 variable */
  bool resource;    /* a resource handle (VarHandleOp, a resource argument): Identity passes it on */
} gd_val;

/* An input reference: node >= 0 a node of the list, else the function argument -1 - node;
   out -1 for a control input. */
typedef struct gd_ref {
  int32_t node, out;
} gd_ref;

/* A resolved node list. */
typedef struct gd_body {
  Nbpb__NodeDef **nodes;
  int32_t n;
  const Nbpb__OpDef *sig; /* a function's signature, else NULL */
  gd_ref *refs;           /* node i's inputs: refs[in0[i] .. in0[i + 1]) */
  int32_t *in0;
  int32_t *order; /* topological */
  int32_t *nout;  /* outputs each node's references reach (at least) */
  gd_ref *rets;   /* a function's results, per output arg */
  bool ready;
  bool active; /* a function being traced: calling it again is recursion */
} gd_body;

/* One import. */
typedef struct gd_import {
  nb_ctx *c;    /* the caller's context, where errors go */
  nb_ctx *vals; /* eager: constant values, until they become node attrs */
  const Nbpb__GraphDef *gd;
  const char *who;
  gd_body main;
  gd_body *funcs; /* per library function, resolved on first use */
  int depth, traces;
} gd_import;

/* One instance of a node list being built into a context. */
typedef struct gd_inst {
  gd_import *im;
  nb_ctx *c;
  gd_body *b;
  const gd_val *args;
  gd_val **outs;       /* per node, once built */
  const char **names;  /* the top level's: per node, its name reserved in the graph */
  nb_tensor ***anchor; /* per node, the tensors a control input on it waits for (NULL-ended) */
} gd_inst;
static nb_code build_body(gd_inst *in);

/* ---- failures ------------------------------------------------------------------------------ */

static nb_code fail(gd_import *im, nb_ctx *c, nb_code code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static nb_code fail(gd_import *im, nb_ctx *c, nb_code code, const char *fmt, ...) {
  char msg[NBCORE_ERR_CAP];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return nbcore_fail(c, code, "%s: %s", im->who, msg);
}

static nb_code nomem(gd_import *im, nb_ctx *c) { return fail(im, c, NB_NOMEM, "out of memory"); }

/* ---- attrs ----------------------------------------------------------------------------------- */

static const Nbpb__AttrValue *node_attr(const Nbpb__NodeDef *n, const char *name) {
  for (size_t i = 0; i < n->n_attr; i++)
    if (n->attr[i]->key && strcmp(n->attr[i]->key, name) == 0) return n->attr[i]->value;
  return NULL;
}

static const char *value_kind_name(Nbpb__AttrValue__ValueCase k) {
  switch (k) {
    case NBPB__ATTR_VALUE__VALUE_S: return "a string";
    case NBPB__ATTR_VALUE__VALUE_I: return "an int";
    case NBPB__ATTR_VALUE__VALUE_F: return "a float";
    case NBPB__ATTR_VALUE__VALUE_B: return "a bool";
    case NBPB__ATTR_VALUE__VALUE_TYPE: return "a type";
    case NBPB__ATTR_VALUE__VALUE_SHAPE: return "a shape";
    case NBPB__ATTR_VALUE__VALUE_TENSOR: return "a tensor";
    case NBPB__ATTR_VALUE__VALUE_LIST: return "a list";
    case NBPB__ATTR_VALUE__VALUE_FUNC: return "a function";
    default: return "empty";
  }
}

static nb_code bad_attr(gd_import *im, nb_ctx *c, const Nbpb__NodeDef *n, const char *name, const char *want) {
  const Nbpb__AttrValue *a = node_attr(n, name);
  return fail(im, c, NB_CORRUPT, "node '%s' (op %s): attr '%s' is %s, the op takes %s", n->name, n->op, name,
              a ? value_kind_name(a->value_case) : "missing", want);
}

/* Type attr `name` of n as nabla's dtype: NB_CORRUPT when it is not a type, NB_DTYPE when
   nabla lacks it. */
static nb_code attr_dtype(gd_import *im, nb_ctx *c, const Nbpb__NodeDef *n, const char *name, nb_dtype *t) {
  const Nbpb__AttrValue *a = node_attr(n, name);
  if (!a || a->value_case != NBPB__ATTR_VALUE__VALUE_TYPE) return bad_attr(im, c, n, name, "a type");
  if (!nbio_dtype_from_tf(a->type, t))
    return fail(im, c, NB_DTYPE, "node '%s' (op %s): attr %s is %s, not one of nabla's dtypes", n->name, n->op, name,
                nbio_tf_dtype_name(a->type));
  return NB_OK;
}

/* A shape attr into dims[0..*rank) (*rank -1: unknown rank). */
static nb_code attr_shape(gd_import *im, nb_ctx *c, const Nbpb__NodeDef *n, const Nbpb__AttrValue *a, const char *name,
                          int64_t *dims, int *rank) {
  if (a->value_case != NBPB__ATTR_VALUE__VALUE_SHAPE || !nbio_shape_from_proto(a->shape, rank, dims))
    return bad_attr(im, c, n, name, "a shape of rank <= 8");
  return NB_OK;
}

static bool is_list(const Nbpb__AttrValue *a) { return a->value_case == NBPB__ATTR_VALUE__VALUE_LIST && a->list; }

enum { LIST_CAP = 64, STR_CAP = 256 };

/* Room for one node's list and string attr values: the graph copies a node's attrs when
   it adds the node, so these live for one node. */
typedef struct attr_store {
  int64_t ints[NBOP_MAX_ATTRS][LIST_CAP];
  double floats[NBOP_MAX_ATTRS][LIST_CAP];
  nb_dtype types[NBOP_MAX_ATTRS][LIST_CAP];
  char strs[NBOP_MAX_ATTRS][STR_CAP];
} attr_store;

static nb_code list_attr(gd_import *im, nb_ctx *c, const Nbpb__NodeDef *n, const nbop_attr_spec *spec,
                         const Nbpb__AttrValue *a, int slot, nbop_attrval *v, attr_store *st) {
  v->ints = st->ints[slot];
  v->floats = st->floats[slot];
  v->types = st->types[slot];
  if (spec->kind == NB_ATTR_INTS && a->value_case == NBPB__ATTR_VALUE__VALUE_SHAPE) /* Placeholder's shape */
    return attr_shape(im, c, n, a, spec->name, st->ints[slot], &v->n);
  if (!is_list(a)) return bad_attr(im, c, n, spec->name, "a list");
  const Nbpb__AttrValue__ListValue *l = a->list;
  size_t len = spec->kind == NB_ATTR_INTS ? l->n_i : spec->kind == NB_ATTR_FLOATS ? l->n_f : l->n_type;
  if (len > LIST_CAP)
    return fail(im, c, NB_CORRUPT, "node '%s': attr '%s' has %zu values (at most %d)", n->name, spec->name, len,
                LIST_CAP);
  for (size_t i = 0; i < len; i++) {
    if (spec->kind == NB_ATTR_INTS) st->ints[slot][i] = l->i[i];
    if (spec->kind == NB_ATTR_FLOATS) st->floats[slot][i] = l->f[i];
    if (spec->kind == NB_ATTR_TYPES && !nbio_dtype_from_tf(l->type[i], &st->types[slot][i]))
      return fail(im, c, NB_DTYPE, "node '%s' (op %s): attr %s holds %s, not one of nabla's dtypes", n->name, n->op,
                  spec->name, nbio_tf_dtype_name(l->type[i]));
  }
  v->n = (int)len;
  return NB_OK;
}

static nb_code tensor_attr(gd_import *im, nb_ctx *c, const Nbpb__NodeDef *n, const char *name, const Nbpb__AttrValue *a,
                           nbop_attrval *v) {
  if (a->value_case != NBPB__ATTR_VALUE__VALUE_TENSOR || !a->tensor) return bad_attr(im, c, n, name, "a tensor");
  char who[NBCORE_ERR_CAP / 2];
  snprintf(who, sizeof who, "%s: node '%s': attr '%s'", im->who, n->name, name);
  v->tensor = nbio_tensor_from_proto(im->vals, a->tensor, who);
  if (!v->tensor) {
    nbcore_fail(c, nb_status(im->vals), "%s", nb_error(im->vals));
    nb_clear_error(im->vals);
  }
  return c->status;
}

/* TF attr a (of node n) as nabla's attr slot of kind spec->kind. */
static nb_code map_attr(gd_import *im, nb_ctx *c, const Nbpb__NodeDef *n, const nbop_attr_spec *spec,
                        const Nbpb__AttrValue *a, int slot, nbop_attrval *v, attr_store *st) {
  Nbpb__AttrValue__ValueCase k = a->value_case;
  switch (spec->kind) {
    case NB_ATTR_INT:
      if (k != NBPB__ATTR_VALUE__VALUE_I) return bad_attr(im, c, n, spec->name, "an int");
      v->i = a->i;
      return NB_OK;
    case NB_ATTR_FLOAT:
      if (k != NBPB__ATTR_VALUE__VALUE_F) return bad_attr(im, c, n, spec->name, "a float");
      v->f = a->f;
      return NB_OK;
    case NB_ATTR_BOOL:
      if (k != NBPB__ATTR_VALUE__VALUE_B) return bad_attr(im, c, n, spec->name, "a bool");
      v->b = a->b;
      return NB_OK;
    case NB_ATTR_STR:
      if (k != NBPB__ATTR_VALUE__VALUE_S || a->s.len >= STR_CAP || (a->s.len && memchr(a->s.data, 0, a->s.len)))
        return bad_attr(im, c, n, spec->name, "a string");
      if (a->s.len) memcpy(st->strs[slot], a->s.data, a->s.len);
      st->strs[slot][a->s.len] = 0;
      v->s = st->strs[slot];
      return NB_OK;
    case NB_ATTR_TYPE: return attr_dtype(im, c, n, spec->name, &v->type);
    case NB_ATTR_TENSOR: return tensor_attr(im, c, n, spec->name, a, v);
    default: return list_attr(im, c, n, spec, a, slot, v, st);
  }
}

/* n's attrs as def's: given ones mapped, the rest TF's defaults (which TF leaves out of
   files); attrs nabla keeps internally ('_') and TF's attrs nabla's op lacks are not read. */
static nb_code map_attrs(gd_import *im, nb_ctx *c, const Nbpb__NodeDef *n, const nbop_def *def, nbop_attrval *v,
                         attr_store *st) {
  nbop_attr_defaults(def, v);
  for (int s = 0; s < def->nattrs; s++) {
    const nbop_attr_spec *spec = &def->attrs[s];
    if (spec->name[0] == '_') continue;
    const Nbpb__AttrValue *a = node_attr(n, spec->name);
    if (!a) {
      if (spec->required && !(def->variadic && s == 0)) return bad_attr(im, c, n, spec->name, "a value (required)");
      continue;
    }
    nb_code code = map_attr(im, c, n, spec, a, s, &v[s], st);
    if (code) return code;
  }
  return NB_OK;
}

/* ---- op types ----------------------------------------------------------------------------------- */

static const char *const tf1_control_flow[] = {"Switch",        "Merge",    "Enter",           "Exit",
                                               "NextIteration", "LoopCond", "RefSwitch",       "RefMerge",
                                               "RefEnter",      "RefExit",  "RefNextIteration"};
/* Ops the importer builds itself (resources, control-only nodes, calls). */
static const char *const special_ops[] = {"Const",
                                          "Placeholder",
                                          "PlaceholderWithDefault",
                                          "NoOp",
                                          "Identity",
                                          "IdentityN",
                                          "VarHandleOp",
                                          "VariableV2",
                                          "Variable",
                                          "ReadVariableOp",
                                          "AssignVariableOp",
                                          "AssignAddVariableOp",
                                          "AssignSubVariableOp",
                                          "Assign",
                                          "AssignAdd",
                                          "AssignSub",
                                          "StatefulPartitionedCall",
                                          "PartitionedCall",
                                          "While",
                                          "StatelessWhile",
                                          "If",
                                          "StatelessIf"};

static bool in_list(const char *s, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(s, list[i]) == 0) return true;
  return false;
}
#define IN_LIST(s, list) in_list(s, list, sizeof list / sizeof *list)

static int find_function(const gd_import *im, const char *name) {
  const Nbpb__FunctionDefLibrary *lib = im->gd->library;
  for (size_t i = 0; lib && i < lib->n_function; i++)
    if (strcmp(lib->function[i]->signature->name, name) == 0) return (int)i;
  return -1;
}

static bool op_known(const gd_import *im, const char *op) {
  if (IN_LIST(op, special_ops)) return true;
  if (op[0] != '_' && nbop_lookup(op)) return true;
  return find_function(im, op) >= 0;
}

/* ---- resolving a node list ------------------------------------------------------------------- */

typedef struct named {
  const char *name;
  int32_t id; /* node index, or -1 - argument index */
} named;

static int by_name(const void *a, const void *b) { return strcmp(((const named *)a)->name, ((const named *)b)->name); }

/* The id of the name name[0..len) in sorted[0..n), INT32_MIN when absent. */
static int32_t lookup(const named *sorted, int32_t n, const char *name, size_t len) {
  int32_t lo = 0, hi = n;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    int cmp = strncmp(sorted[mid].name, name, len);
    if (cmp == 0 && sorted[mid].name[len]) cmp = 1;
    if (cmp == 0) return sorted[mid].id;
    if (cmp < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return INT32_MIN;
}

/* Output args of TF ops with several (each one tensor): "node:arg:k" in a function body
   counts from the arg's first output. Ops with one output arg (a tensor or a list) use k. */
typedef struct out_args {
  const char *op;
  const char *args[6];
} out_args;
static const out_args multi_out[] = {
    {"FusedBatchNormV3",
     {"y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2", "reserve_space_3"}},
    {"FusedBatchNormGradV3", {"x_backprop", "scale_backprop", "offset_backprop", "reserve_space_4", "reserve_space_5"}},
    {"SoftmaxCrossEntropyWithLogits", {"loss", "backprop"}},
    {"SparseSoftmaxCrossEntropyWithLogits", {"loss", "backprop"}},
    {"BroadcastGradientArgs", {"r0", "r1"}}};

static bool names_equal(const char *a, const char *b, size_t len) { return strlen(a) == len && !strncmp(a, b, len); }

static int32_t out_arg_offset(const gd_import *im, const char *op, const char *arg, size_t len) {
  for (size_t i = 0; i < sizeof multi_out / sizeof *multi_out; i++) {
    if (strcmp(multi_out[i].op, op) != 0) continue;
    for (int a = 0; a < 6 && multi_out[i].args[a]; a++)
      if (names_equal(multi_out[i].args[a], arg, len)) return a;
  }
  int f = find_function(im, op); /* a function called by its name: its output args */
  if (f >= 0) {
    const Nbpb__OpDef *sig = im->gd->library->function[f]->signature;
    for (size_t a = 0; a < sig->n_output_arg; a++)
      if (names_equal(sig->output_arg[a]->name, arg, len)) return (int32_t)a;
  }
  return 0;
}

static bool parse_index(const char *s, int32_t *k) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < 0 || v > 1 << 20) return false;
  *k = (int32_t)v;
  return true;
}

/* Input string s of node `who` in b: "^node" (control), "node" or "node:k" (GraphDef),
   "arg" or "node:arg:k" (FunctionDef). */
static nb_code resolve_input(gd_import *im, const gd_body *b, const named *sorted, int32_t nsorted, const char *who,
                             const char *s, gd_ref *r) {
  bool control = s[0] == '^';
  const char *name = s + control, *colon = strchr(name, ':');
  size_t len = colon ? (size_t)(colon - name) : strlen(name);
  int32_t id = lookup(sorted, nsorted, name, len), k = 0;
  if (id == INT32_MIN)
    return fail(im, im->c, NB_CORRUPT, "node '%s': input '%s' is not a node of the %s", who, s,
                b->sig ? "function" : "graph");
  if (colon && b->sig && id >= 0) { /* node:arg:k */
    const char *arg = colon + 1, *colon2 = strchr(arg, ':');
    if (!colon2 || !parse_index(colon2 + 1, &k))
      return fail(im, im->c, NB_CORRUPT, "node '%s': input '%s' is not 'node:arg:index'", who, s);
    k += out_arg_offset(im, b->nodes[id]->op, arg, (size_t)(colon2 - arg));
  } else if (colon && !parse_index(colon + 1, &k)) {
    return fail(im, im->c, NB_CORRUPT, "node '%s': input '%s' has a bad output index", who, s);
  }
  if (id < 0 && (colon || control)) /* an argument is named alone */
    return fail(im, im->c, NB_CORRUPT, "node '%s': input '%s' names a function argument with an output", who, s);
  *r = (gd_ref){id, control ? -1 : k};
  return NB_OK;
}

/* Notes that output r->out of its node is read (set_outputs checks it exists). */
static void note_read(gd_body *b, const gd_ref *r) {
  if (r->node >= 0 && r->out >= b->nout[r->node]) b->nout[r->node] = r->out + 1;
}

static nb_code resolve_inputs(gd_import *im, gd_body *b, const named *sorted, int32_t nsorted) {
  int32_t total = 0;
  for (int32_t i = 0; i < b->n; i++) total += (int32_t)b->nodes[i]->n_input;
  b->refs = malloc(((size_t)total + 1) * sizeof *b->refs);
  b->in0 = malloc(((size_t)b->n + 1) * sizeof *b->in0);
  b->nout = calloc((size_t)b->n + 1, sizeof *b->nout);
  if (!b->refs || !b->in0 || !b->nout) return nomem(im, im->c);
  int32_t at = 0;
  for (int32_t i = 0; i < b->n; i++) {
    const Nbpb__NodeDef *n = b->nodes[i];
    b->in0[i] = at;
    for (size_t j = 0; j < n->n_input; j++, at++) {
      nb_code code = resolve_input(im, b, sorted, nsorted, n->name, n->input[j], &b->refs[at]);
      if (code) return code;
      note_read(b, &b->refs[at]);
    }
  }
  b->in0[b->n] = at;
  return NB_OK;
}

/* A function's results: its ret entry per output arg ("node:arg:k" or "arg"). */
static nb_code resolve_rets(gd_import *im, gd_body *b, const named *sorted, int32_t nsorted) {
  const Nbpb__FunctionDef *fd = im->gd->library->function[b - im->funcs];
  const char *fname = b->sig->name;
  b->rets = malloc((b->sig->n_output_arg + 1) * sizeof *b->rets);
  if (!b->rets) return nomem(im, im->c);
  for (size_t o = 0; o < b->sig->n_output_arg; o++) {
    const char *src = NULL;
    for (size_t r = 0; r < fd->n_ret; r++)
      if (fd->ret[r]->key && strcmp(fd->ret[r]->key, b->sig->output_arg[o]->name) == 0) src = fd->ret[r]->value;
    if (!src)
      return fail(im, im->c, NB_CORRUPT, "function '%s': no ret for output '%s'", fname, b->sig->output_arg[o]->name);
    nb_code code = resolve_input(im, b, sorted, nsorted, fname, src, &b->rets[o]);
    if (code) return code;
    if (b->rets[o].out < 0)
      return fail(im, im->c, NB_CORRUPT, "function '%s': ret '%s' is a control input", fname, src);
    note_read(b, &b->rets[o]);
  }
  return NB_OK;
}

/* The node whose input range holds edge e. */
static int32_t consumer_of(const gd_body *b, int32_t e) {
  int32_t lo = 0, hi = b->n;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (b->in0[mid + 1] <= e)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Kahn's algorithm over every input edge; a node left over lies on a cycle. */
static nb_code sort_nodes(gd_import *im, gd_body *b) {
  int32_t n = b->n, *pending = calloc((size_t)n + 1, sizeof *pending);
  int32_t *first = malloc(((size_t)n + 1) * sizeof *first), *next = malloc(((size_t)b->in0[n] + 1) * sizeof *next);
  b->order = malloc(((size_t)n + 1) * sizeof *b->order);
  nb_code code = NB_OK;
  if (!pending || !first || !next || !b->order) code = nomem(im, im->c);
  for (int32_t i = 0; !code && i < n; i++) first[i] = -1;
  for (int32_t i = 0; !code && i < n; i++) /* consumer lists: edge e hangs off its producer */
    for (int32_t e = b->in0[i]; e < b->in0[i + 1]; e++)
      if (b->refs[e].node >= 0) {
        pending[i]++;
        next[e] = first[b->refs[e].node];
        first[b->refs[e].node] = e;
      }
  int32_t head = 0, tail = 0;
  for (int32_t i = 0; !code && i < n; i++)
    if (!pending[i]) b->order[tail++] = i;
  while (head < tail) {
    int32_t p = b->order[head++];
    for (int32_t e = first[p]; e >= 0; e = next[e]) {
      int32_t i = consumer_of(b, e);
      if (--pending[i] == 0) b->order[tail++] = i;
    }
  }
  for (int32_t i = 0; !code && tail < n && i < n; i++)
    if (pending[i])
      code = fail(im, im->c, NB_CORRUPT, "the %s has a cycle through node '%s'", b->sig ? "function" : "graph",
                  b->nodes[i]->name);
  free(pending);
  free(first);
  free(next);
  return code;
}

static nb_code prepare_body(gd_import *im, gd_body *b) {
  if (b->ready) return NB_OK;
  int32_t nargs = b->sig ? (int32_t)b->sig->n_input_arg : 0, total = b->n + nargs;
  named *sorted = malloc(((size_t)total + 1) * sizeof *sorted);
  if (!sorted) return nomem(im, im->c);
  for (int32_t i = 0; i < b->n; i++) sorted[i] = (named){b->nodes[i]->name, i};
  for (int32_t a = 0; a < nargs; a++) sorted[b->n + a] = (named){b->sig->input_arg[a]->name, -1 - a};
  qsort(sorted, (size_t)total, sizeof *sorted, by_name);
  nb_code code = NB_OK;
  for (int32_t i = 1; i < total && !code; i++)
    if (strcmp(sorted[i - 1].name, sorted[i].name) == 0)
      code = fail(im, im->c, NB_CORRUPT, "two nodes named '%s'", sorted[i].name);
  for (int32_t i = 0; i < b->n && !code; i++)
    if (!b->nodes[i]->name[0]) code = fail(im, im->c, NB_CORRUPT, "node %d has no name", (int)i);
  if (!code) code = resolve_inputs(im, b, sorted, total);
  if (!code && b->sig) code = resolve_rets(im, b, sorted, total);
  free(sorted);
  if (!code) code = sort_nodes(im, b);
  b->ready = !code;
  return code;
}

static void body_free(gd_body *b) {
  free(b->refs);
  free(b->in0);
  free(b->order);
  free(b->nout);
  free(b->rets);
}

/* ---- checking op types across the graph and the functions it reaches ----------------------- */

/* Pushes function f unless seen. */
static void push_function(int f, int *stack, int *top, bool *seen) {
  if (f >= 0 && !seen[f]) {
    seen[f] = true;
    stack[(*top)++] = f;
  }
}

/* The functions node n names through its attrs (f, cond, body, then/else_branch) or its type. */
static void push_called(const gd_import *im, const Nbpb__NodeDef *n, int *stack, int *top, bool *seen) {
  push_function(find_function(im, n->op), stack, top, seen);
  for (size_t a = 0; a < n->n_attr; a++) {
    const Nbpb__AttrValue *v = n->attr[a]->value;
    if (v && v->value_case == NBPB__ATTR_VALUE__VALUE_FUNC && v->func && v->func->name)
      push_function(find_function(im, v->func->name), stack, top, seen);
  }
}

/* "Type 'node'" entries of unknown ops, as many as the message has room for. */
typedef struct unknown_list {
  char msg[NBCORE_ERR_CAP - 160];
  size_t len;
  int count, tf1;
  bool cut;
} unknown_list;

static void note_unknown(unknown_list *u, const Nbpb__NodeDef *n) {
  u->count++;
  u->tf1 += IN_LIST(n->op, tf1_control_flow);
  char item[192];
  int k = snprintf(item, sizeof item, "%s%.60s '%.80s'", u->len ? ", " : "", n->op, n->name);
  if (!u->cut && u->len + (size_t)k + 8 < sizeof u->msg) {
    memcpy(u->msg + u->len, item, (size_t)k + 1);
    u->len += (size_t)k;
  } else if (!u->cut) {
    u->cut = true;
    snprintf(u->msg + u->len, sizeof u->msg - u->len, ", ...");
  }
}

static void check_list(const gd_import *im, Nbpb__NodeDef *const *nodes, size_t n, unknown_list *u, int *stack,
                       int *top, bool *seen) {
  for (size_t i = 0; i < n; i++) {
    if (!op_known(im, nodes[i]->op)) note_unknown(u, nodes[i]);
    push_called(im, nodes[i], stack, top, seen);
  }
}

static nb_code check_ops(gd_import *im) {
  size_t nf = im->gd->library ? im->gd->library->n_function : 0;
  int *stack = malloc((nf + 1) * sizeof *stack), top = 0;
  bool *seen = calloc(nf + 1, sizeof *seen);
  unknown_list *u = calloc(1, sizeof *u);
  nb_code code = stack && seen && u ? NB_OK : nomem(im, im->c);
  if (!code) check_list(im, im->gd->node, im->gd->n_node, u, stack, &top, seen);
  while (!code && top > 0) {
    const Nbpb__FunctionDef *f = im->gd->library->function[stack[--top]];
    check_list(im, f->node_def, f->n_node_def, u, stack, &top, seen);
  }
  if (!code && u->tf1)
    code = fail(im, im->c, NB_UNIMPLEMENTED,
                "TF 1 control flow (Switch/Merge/Enter/Exit/NextIteration/LoopCond) not supported yet: export "
                "with functional control flow (lower_control_flow=False); %d node%s nabla cannot build: %s",
                u->count, u->count == 1 ? "" : "s", u->msg);
  else if (!code && u->count)
    code = fail(im, im->c, NB_UNIMPLEMENTED, "%d node%s of ops nabla does not have: %s", u->count,
                u->count == 1 ? "" : "s", u->msg);
  free(stack);
  free(seen);
  free(u);
  return code;
}

/* ---- building nodes ---------------------------------------------------------------------------- */

static const gd_val *input_val(const gd_inst *in, int32_t e) {
  const gd_ref *r = &in->b->refs[e];
  return r->node < 0 ? &in->args[-1 - r->node] : &in->outs[r->node][r->out];
}

/* Node i's data inputs as tensors (a variable's: its read in this context). */
static nb_code data_inputs(gd_inst *in, int32_t i, nb_tensor **x, int *nx) {
  const gd_body *b = in->b;
  int k = 0;
  for (int32_t e = b->in0[i]; e < b->in0[i + 1]; e++) {
    if (b->refs[e].out < 0) continue;
    const gd_val *v = input_val(in, e);
    x[k] = v->t ? v->t : v->var ? nb_variable_read(in->c, v->var) : NULL;
    if (!x[k])
      return in->c->status ? in->c->status
                           : fail(in->im, in->c, NB_INVALID, "node '%s': input %d has no value", b->nodes[i]->name, k);
    k++;
  }
  *nx = k;
  return NB_OK;
}

/* Counts (into *n) or copies (into to, when not NULL) the anchors of node i's control inputs. */
static int control_anchors(const gd_inst *in, int32_t i, nb_tensor **to) {
  int n = 0;
  for (int32_t e = in->b->in0[i]; e < in->b->in0[i + 1]; e++)
    if (in->b->refs[e].out < 0 && in->b->refs[e].node >= 0)
      for (nb_tensor **a = in->anchor[in->b->refs[e].node]; *a; a++) {
        if (to) to[n] = *a;
        n++;
      }
  return n;
}

/* Records node i's n outputs, and the anchors of control inputs on it: its first output,
   else (no nabla node) the anchors of its own control inputs, passed on. */
static nb_code set_outputs(gd_inst *in, int32_t i, const gd_val *v, int n) {
  const Nbpb__NodeDef *node = in->b->nodes[i];
  if (in->b->nout[i] > n)
    return fail(in->im, in->c, NB_CORRUPT, "node '%s' (op %s) has %d output%s; a node reads output %d", node->name,
                node->op, n, n == 1 ? "" : "s", (int)in->b->nout[i] - 1);
  in->outs[i] = calloc((size_t)n + 1, sizeof **in->outs);
  if (!in->outs[i]) return nomem(in->im, in->c);
  if (n) memcpy(in->outs[i], v, (size_t)n * sizeof *v);
  nb_tensor *own = n > 0 ? v[0].t : NULL;
  in->anchor[i] = calloc((size_t)(own ? 1 : control_anchors(in, i, NULL)) + 1, sizeof *in->anchor[i]);
  if (!in->anchor[i]) return nomem(in->im, in->c);
  if (own)
    in->anchor[i][0] = own;
  else
    control_anchors(in, i, in->anchor[i]);
  return NB_OK;
}

/* Node i's control inputs, on the node of its first output (made for it: a resource passed
   on through Identity has none of its own). */
static nb_code control_inputs(gd_inst *in, int32_t i) {
  nb_tensor *x = in->outs[i][0].t;
  if (!x || in->outs[i][0].resource) return NB_OK;
  for (int32_t e = in->b->in0[i]; e < in->b->in0[i + 1]; e++) {
    if (in->b->refs[e].out >= 0 || in->b->refs[e].node < 0) continue;
    for (nb_tensor **a = in->anchor[in->b->refs[e].node]; *a; a++)
      if (nb_add_control_input(x, *a) != NB_OK) return nomem(in->im, in->c);
  }
  return NB_OK;
}

static nb_code build_generic(gd_inst *in, int32_t i, nb_tensor **x, int nx) {
  const Nbpb__NodeDef *n = in->b->nodes[i];
  const nbop_def *def = nbop_lookup(n->op);
  nbop_attrval v[NBOP_MAX_ATTRS];
  attr_store *st = malloc(sizeof *st);
  if (!st) return nomem(in->im, in->c);
  nb_code code = map_attrs(in->im, in->c, n, def, v, st);
  int nout = def->nout;
  if (!code && nout == NBOP_VARIADIC) { /* Unpack: its first attr, num */
    nout = def->nattrs && def->attrs[0].kind == NB_ATTR_INT ? (int)v[0].i : -1;
    if (nout < 0 || nout > 4096) code = fail(in->im, in->c, NB_CORRUPT, "node '%s': %d outputs", n->name, nout);
  }
  nb_tensor **out = code ? NULL : calloc((size_t)nout + 1, sizeof *out);
  gd_val *vals = code ? NULL : calloc((size_t)nout + 1, sizeof *vals);
  if (!code && (!out || !vals)) code = nomem(in->im, in->c);
  if (!code) code = nbop_dispatch(in->c, def, x, nx, v, out, nout);
  for (int s = 0; s < def->nattrs; s++) /* a Const's value: the node holds its own share */
    if (def->attrs[s].kind == NB_ATTR_TENSOR && v[s].tensor != def->attrs[s].def.tensor) nb_tensor_free(v[s].tensor);
  for (int k = 0; !code && k < nout; k++) vals[k].t = out[k];
  if (!code) code = set_outputs(in, i, vals, nout);
  free(out);
  free(vals);
  free(st);
  return code;
}

/* ---- variables --------------------------------------------------------------------------------- */

/* A variable for n (VarHandleOp, VariableV2: attrs dtype and a fully known shape), zeros
   until assigned, owned by c's graph, and its read node. */
static nb_code make_variable(gd_inst *in, int32_t i) {
  const Nbpb__NodeDef *n = in->b->nodes[i];
  nb_dtype t;
  int rank;
  int64_t dims[NB_MAX_RANK];
  nb_code code = attr_dtype(in->im, in->c, n, "dtype", &t);
  const Nbpb__AttrValue *a = node_attr(n, "shape");
  if (!code && !a) code = bad_attr(in->im, in->c, n, "shape", "a shape");
  if (!code) code = attr_shape(in->im, in->c, n, a, "shape", dims, &rank);
  if (code) return code;
  int64_t size;
  if (rank < 0 || !nbcore_dims_known(rank, dims) || !nbcore_shape_checked_size(rank, dims, &size) ||
      size > NBIO_MAX_COMPACT_ELEMENTS)
    return fail(in->im, in->c, NB_SHAPE, "variable '%s' has shape %s; nabla's variables need a known one", n->name,
                rank < 0 ? "<unknown>" : nbop_sstr(rank, dims));
  nb_tensor *zeros = nb_tensor_from(in->im->vals, t, rank, dims, NULL);
  nb_variable *var = zeros ? nb_variable_new(in->im->vals, zeros, true, n->name) : NULL;
  nb_tensor_free(zeros);
  if (!var) return nomem(in->im, in->c);
  nb_graph *g = in->c->graph;
  nbop_attrval attrs[NBOP_MAX_ATTRS] = {{.type = t}, {.i = nbcore_variable_bits(var)}};
  nb_tensor *read = NULL;
  if (nbcore_grow_array((void **)&g->vars, &g->vars_cap, g->nvars + 1, sizeof *g->vars))
    read = nbop_call(in->c, nbop_lookup("ReadVariableOp"), NULL, 0, attrs);
  if (!read) {
    nbcore_variable_release(var);
    return in->c->status ? in->c->status : nomem(in->im, in->c);
  }
  g->vars[g->nvars++] = (nbgraph_var){var, read->node, true}; /* the graph takes the reference */
  gd_val v = {read, var, strcmp(n->op, "VarHandleOp") == 0};
  return set_outputs(in, i, &v, 1);
}

static const gd_val *first_input(const gd_inst *in, int32_t i) {
  for (int32_t e = in->b->in0[i]; e < in->b->in0[i + 1]; e++)
    if (in->b->refs[e].out >= 0) return input_val(in, e);
  return NULL;
}

/* ReadVariableOp, Assign*VariableOp, Assign, AssignAdd, AssignSub. */
static nb_code build_variable_op(gd_inst *in, int32_t i, nb_tensor **x, int nx) {
  const Nbpb__NodeDef *n = in->b->nodes[i];
  const gd_val *res = first_input(in, i);
  nb_variable *var = res ? res->var : NULL;
  if (!var) return fail(in->im, in->c, NB_INVALID, "node '%s' (op %s): input 0 is not a variable", n->name, n->op);
  bool read = strcmp(n->op, "ReadVariableOp") == 0;
  if (!read && nx != 2)
    return fail(in->im, in->c, NB_CORRUPT, "node '%s' (op %s): %d inputs, the op takes 2", n->name, n->op, nx);
  nb_tensor *y;
  if (read) /* a read made before (here or, captured, in a graph enclosing this function's) */
    y = res->t ? nb_identity(in->c, res->t) : nb_variable_read(in->c, var);
  else if (strstr(n->op, "AssignAdd"))
    y = nb_variable_assign_add(in->c, var, x[1]);
  else if (strstr(n->op, "AssignSub"))
    y = nb_variable_assign_sub(in->c, var, x[1]);
  else
    y = nb_variable_assign(in->c, var, x[1]);
  if (!y) return in->c->status;
  gd_val v = {y, NULL, false};
  return set_outputs(in, i, &v, 1);
}

/* ---- functions --------------------------------------------------------------------------------- */

/* A FunctionDef to trace at one call site: per argument its resource (a variable, and its
   read in the caller, which reads in the body capture: one value per run, and gradients
   reach it) or nothing (var NULL: the next nabla argument). */
typedef struct gd_call {
  gd_import *im;
  int f;
  gd_val *res_args;
  int nvals; /* results that are not resources */
} gd_call;

static bool resource_arg(const Nbpb__OpDef__ArgDef *a) { return a->type == TF_RESOURCE; }

static void inst_free(gd_inst *in) {
  for (int32_t i = 0; i < in->b->n; i++) {
    if (in->outs) free(in->outs[i]);
    if (in->anchor) free(in->anchor[i]);
  }
  free(in->outs);
  free(in->names);
  free(in->anchor);
}

/* Builds call's function body in c on the nabla arguments xs, writing its non-resource
   results to out[0..call->nvals). */
static nb_code trace_body(nb_ctx *c, gd_call *call, nb_tensor *const *xs, nb_tensor **out) {
  gd_import *im = call->im;
  gd_body *b = &im->funcs[call->f];
  if (b->active) return fail(im, c, NB_CORRUPT, "function '%s' calls itself", b->sig->name);
  if (im->depth >= MAX_FUNC_DEPTH || im->traces >= MAX_TRACES)
    return fail(im, c, NB_UNIMPLEMENTED, "function '%s': calls nest deeper than %d or make more than %d instances",
                b->sig->name, MAX_FUNC_DEPTH, MAX_TRACES);
  int32_t nargs = (int32_t)b->sig->n_input_arg, k = 0;
  gd_val *args = calloc((size_t)nargs + 1, sizeof *args);
  gd_inst in = {
      im, c, b, args, calloc((size_t)b->n + 1, sizeof *in.outs), NULL, calloc((size_t)b->n + 1, sizeof *in.anchor)};
  nb_code code = args && in.outs && in.anchor ? NB_OK : nomem(im, c);
  for (int32_t a = 0; !code && a < nargs; a++)
    args[a] = call->res_args[a].var ? call->res_args[a] : (gd_val){xs[k++], NULL, false};
  im->depth++;
  im->traces++;
  b->active = true;
  if (!code) code = build_body(&in);
  b->active = false;
  im->depth--;
  k = 0;
  for (size_t o = 0; !code && o < b->sig->n_output_arg; o++) {
    if (resource_arg(b->sig->output_arg[o])) continue;
    const gd_ref *r = &b->rets[o];
    const gd_val *v = r->node < 0 ? &args[-1 - r->node] : &in.outs[r->node][r->out];
    if (!v->t) code = fail(im, c, NB_CORRUPT, "function '%s': output %zu has no value", b->sig->name, o);
    out[k++] = v->t;
  }
  inst_free(&in);
  free(args);
  return code;
}

/* The trace callbacks: user is a gd_call, or for While and If a pair (cond and body, then
   and else). */
typedef struct gd_pair {
  gd_call *first, *second;
} gd_pair;
static nb_code call_fn(nb_ctx *c, nb_tensor *const *vars, nb_tensor **next, void *user) {
  return trace_body(c, user, vars, next);
}
static nb_code first_fn(nb_ctx *c, nb_tensor *const *vars, nb_tensor **next, void *user) {
  return trace_body(c, ((gd_pair *)user)->first, vars, next);
}
static nb_code second_fn(nb_ctx *c, nb_tensor *const *vars, nb_tensor **next, void *user) {
  return trace_body(c, ((gd_pair *)user)->second, vars, next);
}
static nb_code first_cond_fn(nb_ctx *c, nb_tensor *const *vars, nb_tensor **pred, void *user) {
  return trace_body(c, ((gd_pair *)user)->first, vars, pred);
}

/* The function named by n's func attr `attr` (or, attr NULL, by n's type), prepared, with
   the resources among n's data inputs from `first` on as its resource arguments, and the
   others' values in xs[0..*nx). */
static nb_code bind_call(gd_inst *in, int32_t i, const char *attr, nb_tensor *const *x, int first, gd_call *call,
                         nb_tensor **xs, int *nx) {
  const Nbpb__NodeDef *n = in->b->nodes[i];
  const Nbpb__AttrValue *a = attr ? node_attr(n, attr) : NULL;
  if (attr && (!a || a->value_case != NBPB__ATTR_VALUE__VALUE_FUNC || !a->func || !a->func->name))
    return bad_attr(in->im, in->c, n, attr, "a function");
  const char *fname = attr ? a->func->name : n->op;
  int f = find_function(in->im, fname);
  if (f < 0) return fail(in->im, in->c, NB_CORRUPT, "node '%s': function '%s' is not in the library", n->name, fname);
  gd_body *b = &in->im->funcs[f];
  nb_code code = prepare_body(in->im, b);
  if (code) return code;
  size_t nargs = b->sig->n_input_arg;
  int k = 0, d = 0;
  *call = (gd_call){in->im, f, calloc(nargs + 1, sizeof *call->res_args), 0};
  if (!call->res_args) return nomem(in->im, in->c);
  for (int32_t e = in->b->in0[i]; e < in->b->in0[i + 1]; e++) {
    if (in->b->refs[e].out < 0 || d++ < first) continue;
    size_t arg = (size_t)(d - 1 - first);
    if (arg >= nargs) break;
    const gd_val *v = input_val(in, e);
    if (!resource_arg(b->sig->input_arg[arg]))
      xs[k++] = x[d - 1];
    else if (!(call->res_args[arg] = *v).var)
      return fail(in->im, in->c, NB_INVALID,
                  "node '%s': argument %zu of function '%s' is a resource, given no variable", n->name, arg, fname);
  }
  if ((size_t)(d - first) != nargs)
    return fail(in->im, in->c, NB_CORRUPT, "node '%s': %d inputs, function '%s' has %zu arguments", n->name, d - first,
                fname, nargs);
  for (size_t o = 0; o < b->sig->n_output_arg; o++) call->nvals += !resource_arg(b->sig->output_arg[o]);
  *nx = k;
  return NB_OK;
}

/* Node outputs from the nabla results out; a loop's resource outputs are the variables
   passed in at the same position. */
static nb_code set_call_outputs(gd_inst *in, int32_t i, const gd_call *call, nb_tensor **out, bool loop) {
  const Nbpb__OpDef *sig = in->im->funcs[call->f].sig;
  size_t n = sig->n_output_arg;
  gd_val *v = calloc(n + 1, sizeof *v);
  if (!v) return nomem(in->im, in->c);
  for (size_t o = 0, k = 0; o < n; o++) {
    if (!resource_arg(sig->output_arg[o]))
      v[o].t = out[k++];
    else if (loop && o < sig->n_input_arg)
      v[o] = call->res_args[o];
  }
  nb_code code = set_outputs(in, i, v, (int)n);
  free(v);
  return code;
}

static nb_code build_call(gd_inst *in, int32_t i, nb_tensor **x) {
  const Nbpb__NodeDef *n = in->b->nodes[i];
  bool by_type = find_function(in->im, n->op) >= 0;
  gd_call call = {0};
  nb_tensor **xs = calloc((size_t)(in->b->in0[i + 1] - in->b->in0[i]) + 1, sizeof *xs), **out = NULL;
  int nx = 0;
  nb_code code = xs ? bind_call(in, i, by_type ? NULL : "f", x, 0, &call, xs, &nx) : nomem(in->im, in->c);
  if (!code && !(out = calloc((size_t)call.nvals + 1, sizeof *out))) code = nomem(in->im, in->c);
  nb_function *f = code ? NULL : nb_function_new(in->c, call_fn, &call, xs, nx, call.nvals);
  if (!code && !f) code = in->c->status;
  if (!code) code = nb_call_function(in->c, f, xs, nx, out, call.nvals);
  if (!code) code = set_call_outputs(in, i, &call, out, false);
  free(call.res_args);
  free(xs);
  free(out);
  return code;
}

/* While's declared shapes (attr output_shapes) of its non-resource loop variables; *given
   false without them. */
static nb_code while_shapes(gd_inst *in, const Nbpb__NodeDef *n, const gd_call *call, nb_shape_spec *spec,
                            int64_t (*dims)[NB_MAX_RANK], int nvals, bool *given) {
  const Nbpb__AttrValue *a = node_attr(n, "output_shapes");
  *given = a && is_list(a) && a->list->n_shape == in->im->funcs[call->f].sig->n_input_arg;
  for (size_t s = 0, k = 0; *given && s < a->list->n_shape; s++) {
    if (call->res_args[s].var) continue;
    if ((int)k == nvals || !nbio_shape_from_proto(a->list->shape[s], &spec[k].rank, dims[k]))
      return bad_attr(in->im, in->c, n, "output_shapes", "a list of shapes of rank <= 8");
    spec[k].dims = dims[k];
    k++;
  }
  return NB_OK;
}

static nb_code build_while(gd_inst *in, int32_t i, nb_tensor **x) {
  const Nbpb__NodeDef *n = in->b->nodes[i];
  gd_call body = {0}, cond = {0};
  int nd = in->b->in0[i + 1] - in->b->in0[i], nx = 0, ncx = 0;
  nb_tensor **xs = calloc((size_t)nd + 1, sizeof *xs), **out = calloc((size_t)nd + 1, sizeof *out);
  nb_shape_spec *spec = calloc((size_t)nd + 1, sizeof *spec);
  int64_t(*dims)[NB_MAX_RANK] = calloc((size_t)nd + 1, sizeof *dims);
  nb_code code = xs && out && spec && dims ? NB_OK : nomem(in->im, in->c);
  if (!code) code = bind_call(in, i, "body", x, 0, &body, xs, &nx);
  if (!code) code = bind_call(in, i, "cond", x, 0, &cond, xs, &ncx);
  bool given = false;
  if (!code && body.nvals != nx)
    code = fail(in->im, in->c, NB_CORRUPT, "node '%s': the body has %d results for %d loop variables", n->name,
                body.nvals, nx);
  if (!code && cond.nvals != 1)
    code = fail(in->im, in->c, NB_CORRUPT, "node '%s': the cond has %d results, not 1", n->name, cond.nvals);
  if (!code) code = while_shapes(in, n, &body, spec, dims, nx, &given);
  if (!code) {
    nb_while_opts o = {given ? spec : NULL};
    code = nb_while_ex(in->c, first_cond_fn, second_fn, &(gd_pair){&cond, &body}, xs, nx, -1, &o, out);
  }
  if (!code) code = set_call_outputs(in, i, &body, out, true);
  free(body.res_args);
  free(cond.res_args);
  free(xs);
  free(out);
  free(spec);
  free(dims);
  return code;
}

/* If's predicate as bool: TF takes a nonzero number as true. */
static nb_tensor *as_pred(nb_ctx *c, nb_tensor *p) {
  if (nb_dtype_of(p) == NB_BOOL) return p;
  nb_tensor *zero = nb_scalar(c, nb_dtype_of(p), 0);
  return zero ? nb_not_equal(c, p, zero) : NULL;
}

static nb_code build_if(gd_inst *in, int32_t i, nb_tensor **x, int nx) {
  const Nbpb__NodeDef *n = in->b->nodes[i];
  if (nx < 1) return fail(in->im, in->c, NB_CORRUPT, "node '%s' (op %s) has no cond input", n->name, n->op);
  gd_call then_c = {0}, else_c = {0};
  nb_tensor **xs = calloc((size_t)nx + 1, sizeof *xs), **out = NULL;
  int nin = 0, nin2 = 0;
  nb_code code = xs ? NB_OK : nomem(in->im, in->c);
  if (!code) code = bind_call(in, i, "then_branch", x, 1, &then_c, xs, &nin);
  if (!code) code = bind_call(in, i, "else_branch", x, 1, &else_c, xs, &nin2);
  if (!code && (then_c.nvals != else_c.nvals || then_c.nvals < 1))
    code = fail(in->im, in->c, NB_CORRUPT, "node '%s': the branches have %d and %d results", n->name, then_c.nvals,
                else_c.nvals);
  if (!code && !(out = calloc((size_t)then_c.nvals + 1, sizeof *out))) code = nomem(in->im, in->c);
  nb_tensor *pred = code ? NULL : as_pred(in->c, x[0]);
  if (!code && !pred) code = in->c->status;
  if (!code) code = nb_cond(in->c, pred, first_fn, second_fn, &(gd_pair){&then_c, &else_c}, xs, nin, out, then_c.nvals);
  if (!code) code = set_call_outputs(in, i, &then_c, out, false);
  free(then_c.res_args);
  free(else_c.res_args);
  free(xs);
  free(out);
  return code;
}

/* ---- nodes ------------------------------------------------------------------------------------- */

static nb_code build_identities(gd_inst *in, int32_t i, nb_tensor **x, int nx) {
  gd_val *v = calloc((size_t)nx + 1, sizeof *v);
  if (!v) return nomem(in->im, in->c);
  nb_code code = NB_OK;
  for (int k = 0; k < nx && !code; k++)
    if (!(v[k].t = nb_identity(in->c, x[k]))) code = in->c->status;
  if (!code) code = set_outputs(in, i, v, nx);
  free(v);
  return code;
}

static nb_code build_placeholder(gd_inst *in, int32_t i, nb_tensor **x, int nx) {
  const Nbpb__NodeDef *n = in->b->nodes[i];
  const Nbpb__AttrValue *t = node_attr(n, "dtype");
  if (t && t->value_case == NBPB__ATTR_VALUE__VALUE_TYPE && t->type == TF_RESOURCE)
    return fail(in->im, in->c, NB_UNIMPLEMENTED,
                "placeholder '%s' is a resource (a captured variable) whose dtype and shape the graph does not hold: "
                "import a graph with its VarHandleOp, or a frozen one",
                n->name);
  return build_generic(in, i, x, nx);
}

static bool op_is(const Nbpb__NodeDef *n, const char *const *types, size_t count) {
  return in_list(n->op, types, count);
}
#define OP_IS(n, ...) \
  op_is(n, (const char *const[]){__VA_ARGS__}, sizeof((const char *const[]){__VA_ARGS__}) / sizeof(char *))

static nb_code build_node(gd_inst *in, int32_t i, nb_tensor **x, int nx) {
  const Nbpb__NodeDef *n = in->b->nodes[i];
  if (OP_IS(n, "NoOp")) return set_outputs(in, i, NULL, 0);
  if (OP_IS(n, "Placeholder")) return build_placeholder(in, i, x, nx);
  if (OP_IS(n, "VarHandleOp", "VariableV2", "Variable")) return make_variable(in, i);
  if (OP_IS(n, "ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "Assign",
            "AssignAdd", "AssignSub"))
    return build_variable_op(in, i, x, nx);
  if (OP_IS(n, "While", "StatelessWhile")) return build_while(in, i, x);
  if (OP_IS(n, "If", "StatelessIf")) return build_if(in, i, x, nx);
  if (OP_IS(n, "StatefulPartitionedCall", "PartitionedCall") || find_function(in->im, n->op) >= 0)
    return build_call(in, i, x);
  const gd_val *v = OP_IS(n, "Identity") && nx == 1 ? first_input(in, i) : NULL;
  if (v && v->resource) return set_outputs(in, i, v, 1); /* a resource handle passed on */
  if (OP_IS(n, "Identity", "IdentityN", "PlaceholderWithDefault")) return build_identities(in, i, x, nx);
  return build_generic(in, i, x, nx);
}

/* At the top level nodes keep the file's names (look-ups by name), reserved before the
   build: the node made for node i takes its name, or where node i made none (a read of
   a variable made before) an Identity of its output does. */
static nb_code take_name(gd_inst *in, int32_t i, int32_t first_new) {
  gd_val *v = in->outs[i];
  if (!in->names || !v[0].t || v[0].resource) return NB_OK;
  int32_t id = v[0].t->node;
  if (id < first_new) {
    nb_tensor *y = nb_identity(in->c, v[0].t);
    if (!y) return in->c->status;
    v[0].t = in->anchor[i][0] = y;
    id = y->node;
  }
  nbgraph_rename(in->c->graph, id, in->names[i]);
  return NB_OK;
}

static nb_code build_body(gd_inst *in) {
  const gd_body *b = in->b;
  int cap = 0;
  for (int32_t i = 0; i < b->n; i++)
    if (b->in0[i + 1] - b->in0[i] > cap) cap = b->in0[i + 1] - b->in0[i];
  nb_tensor **x = calloc((size_t)cap + 1, sizeof *x);
  if (!x) return nomem(in->im, in->c);
  nb_code code = NB_OK;
  for (int32_t k = 0; k < b->n && !code; k++) {
    int32_t i = b->order[k], nx = 0, first_new = in->c->graph->nnodes;
    code = data_inputs(in, i, x, &nx);
    if (!code) code = build_node(in, i, x, nx);
    if (!code) code = take_name(in, i, first_new);
    if (!code) code = control_inputs(in, i);
  }
  free(x);
  return code;
}

/* ---- the entry points ---------------------------------------------------------------------------- */

/* Prefixes c's error with who unless it has it (errors from nabla's dispatch name the node
   and op only). */
static void prefix_error(nb_ctx *c, const char *who) {
  size_t n = strlen(who);
  const char *msg = nb_error(c);
  if (strncmp(msg, who, n) == 0 && msg[n] == ':') return;
  char copy[NBCORE_ERR_CAP];
  snprintf(copy, sizeof copy, "%s", msg);
  nb_code code = nb_status(c);
  nb_clear_error(c);
  nbcore_fail(c, code, "%s: %s", who, copy);
}

/* The top-level nodes' names, reserved in the graph before anything is built. */
static nb_code reserve_names(gd_import *im, const char **names) {
  nb_graph *g = im->c->graph;
  for (int32_t i = 0; i < im->main.n; i++) {
    const char *name = im->main.nodes[i]->name;
    if (nbgraph_name_taken(g, name))
      return fail(im, im->c, NB_INVALID, "node '%s': the graph already has a node of that name", name);
    if (!(names[i] = nbgraph_reserve_name(g, name))) return fail(im, im->c, NB_NOMEM, "out of memory");
  }
  return NB_OK;
}

static nb_code import_main(gd_import *im) {
  nb_code code = check_ops(im);
  if (!code) code = prepare_body(im, &im->main);
  if (code) return code;
  size_t n = (size_t)im->main.n + 1;
  gd_inst in = {im,
                im->c,
                &im->main,
                NULL,
                calloc(n, sizeof *in.outs),
                calloc(n, sizeof *in.names),
                calloc(n, sizeof *in.anchor)};
  code = in.outs && in.names && in.anchor ? reserve_names(im, in.names) : nomem(im, im->c);
  if (!code) code = build_body(&in);
  inst_free(&in);
  return code;
}

nb_code nbio_graphdef_import(nb_ctx *c, const Nbpb__GraphDef *gd, const char *who) {
  if (!nbop_live(c)) return c ? c->status : NB_INVALID;
  if (!c->graph || !gd)
    return nbcore_fail(c, NB_INVALID, "%s: GraphDef import needs a graph context", who ? who : "GraphDef");
  size_t nf = gd->library ? gd->library->n_function : 0;
  for (size_t f = 0; f < nf; f++)
    if (!gd->library->function[f]->signature || !gd->library->function[f]->signature->name)
      return nbcore_fail(c, NB_CORRUPT, "%s: function %zu of the library has no signature", who, f);
  gd_import im = {.c = c, .vals = nb_eager_new(), .gd = gd, .who = who ? who : "GraphDef"};
  im.main = (gd_body){.nodes = gd->node, .n = (int32_t)gd->n_node};
  im.funcs = calloc(nf + 1, sizeof *im.funcs);
  for (size_t f = 0; im.funcs && f < nf; f++) {
    const Nbpb__FunctionDef *fd = gd->library->function[f];
    im.funcs[f] = (gd_body){.nodes = fd->node_def, .n = (int32_t)fd->n_node_def, .sig = fd->signature};
  }
  nb_graph *g = c->graph;
  nbgraph_mark mark;
  bool marked = false;
  nb_code code = !im.vals || !im.funcs ? nbcore_fail(c, NB_NOMEM, "%s: out of memory", im.who) : NB_OK;
  if (!code && !(marked = !nbgraph_mark_take(g, &mark))) code = nbcore_fail(c, NB_NOMEM, "%s: out of memory", im.who);
  if (!code) {
    nb_scope_begin(c);
    code = import_main(&im);
    nb_scope_end(c, NULL, 0);
  }
  if (marked && code) nbgraph_rollback(g, &mark);
  if (marked && !code) nbgraph_mark_drop(&mark);
  if (code) prefix_error(c, im.who);
  body_free(&im.main);
  for (size_t f = 0; im.funcs && f < nf; f++) body_free(&im.funcs[f]);
  free(im.funcs);
  nb_ctx_free(im.vals);
  return code;
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

nb_code nb_graph_read_graphdef_buffer(nb_ctx *c, const void *data, size_t size) {
  if (!nbop_live(c)) return c ? c->status : NB_INVALID;
  if (!data && size) return nbcore_fail(c, NB_INVALID, "nb_graph_read_graphdef_buffer: NULL data");
  Nbpb__GraphDef *gd = nbpb__graph_def__unpack(NULL, size, data);
  if (!gd) return nbcore_fail(c, NB_CORRUPT, "GraphDef: not a valid GraphDef message (truncated or not protobuf)");
  nb_code code = nbio_graphdef_import(c, gd, "GraphDef");
  nbpb__graph_def__free_unpacked(gd, NULL);
  return code;
}

nb_code nb_graph_read_graphdef(nb_ctx *c, const char *path) {
  if (!nbop_live(c)) return c ? c->status : NB_INVALID;
  if (!path) return nbcore_fail(c, NB_INVALID, "nb_graph_read_graphdef: NULL path");
  FILE *f = fopen(path, "rb");
  if (!f) return nbcore_fail(c, NB_IO, "%s: cannot open: %s", path, strerror(errno));
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  nb_code code = NB_OK;
  for (;;) {
    if (len == cap) {
      uint8_t *more = cap < (SIZE_MAX >> 2) ? realloc(buf, cap ? cap * 2 : 1 << 16) : NULL;
      if (!more) {
        code = nbcore_fail(c, NB_NOMEM, "%s: out of memory reading the file", path);
        break;
      }
      buf = more;
      cap = cap ? cap * 2 : 1 << 16;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) {
      if (ferror(f)) code = nbcore_fail(c, NB_IO, "%s: read error (a directory?)", path);
      break;
    }
  }
  fclose(f);
  Nbpb__GraphDef *gd = code ? NULL : nbpb__graph_def__unpack(NULL, len, buf);
  free(buf);
  if (!code && !gd)
    code = nbcore_fail(c, NB_CORRUPT, "%s: not a valid GraphDef message (truncated or not protobuf)", base_name(path));
  if (!code) code = nbio_graphdef_import(c, gd, base_name(path));
  if (gd) nbpb__graph_def__free_unpacked(gd, NULL);
  return code;
}

int nb_graph_variables(nb_ctx *c, nb_variable **out, int cap) {
  if (!c || !c->graph || (cap > 0 && !out)) return -1;
  const nb_graph *g = c->graph;
  int n = 0;
  for (int32_t i = 0; i < g->nvars; i++)
    if (g->vars[i].imported) {
      if (n < cap) out[n] = g->vars[i].var;
      n++;
    }
  return n;
}

/* Nodes whose values were folded from node id at build time compute them at run time
   instead: the values leave (to g's retired list, as handles may still point at them). */
static nb_code unfold_downstream(nb_graph *g, int32_t id) {
  int32_t *stack = malloc(((size_t)g->nnodes + 1) * sizeof *stack), top = 0;
  if (!stack) return NB_NOMEM;
  uint32_t gen = nbgraph_next_gen(g);
  stack[top++] = id;
  g->nodes[id].stamp = gen;
  while (top > 0) {
    const nbgraph_node *n = &g->nodes[stack[--top]];
    for (int32_t e = n->first_use; e >= 0; e = g->edges[e].next_use) {
      nbgraph_node *u = &g->nodes[g->edges[e].consumer];
      if (g->edges[e].out < 0 || u->stamp == gen || !nbgraph_node_values_known(g, u)) continue;
      u->stamp = gen;
      for (int32_t o = 0; o < u->nout; o++) {
        nb_code code = nbgraph_retire_value(g, g->outs[u->out0 + o].value);
        if (code) {
          free(stack);
          return code;
        }
        g->outs[u->out0 + o].value = NULL;
      }
      stack[top++] = g->edges[e].consumer;
    }
  }
  free(stack);
  return NB_OK;
}

nb_code nb_graph_const_to_variable(nb_ctx *c, const char *const_node_name, nb_variable **out) {
  if (out) *out = NULL;
  if (!nbop_live(c)) return c ? c->status : NB_INVALID;
  if (!c->graph || !const_node_name || !out)
    return nbcore_fail(c, NB_INVALID, "nb_graph_const_to_variable: needs a graph context, a node name and out");
  nb_graph *g = c->graph;
  int32_t id = -1;
  for (int32_t i = 0; i < g->nnodes && id < 0; i++)
    if (strcmp(g->nodes[i].name, const_node_name) == 0) id = i;
  if (id < 0)
    return nbcore_fail(c, NB_NOT_FOUND, "nb_graph_const_to_variable: no node '%s' in the graph", const_node_name);
  nbgraph_node *n = &g->nodes[id];
  if (strcmp(n->def->name, "Const") != 0)
    return nbcore_fail(c, NB_INVALID, "nb_graph_const_to_variable: node '%s' is a %s, not a Const", const_node_name,
                       n->def->name);
  nb_tensor *value = n->attr[0].tensor; /* Const's attrs: value, dtype */
  if (!nbcore_grow_array((void **)&g->vars, &g->vars_cap, g->nvars + 1, sizeof *g->vars))
    return nbcore_fail(c, NB_NOMEM, "nb_graph_const_to_variable: out of memory");
  nb_variable *v = nb_variable_new(c, value, true, const_node_name);
  if (!v) return c->status;
  nbop_attrval attrs[NBOP_MAX_ATTRS] = {{.type = value->dtype}, {.i = nbcore_variable_bits(v)}};
  const nbop_def *read = nbop_lookup("ReadVariableOp");
  nbop_attrval *copy = nbop_attrs_copy(&g->arena, read, attrs);
  nb_code code = copy ? nbgraph_retire_value(g, g->outs[n->out0].value) : NB_NOMEM;
  if (!code) code = unfold_downstream(g, id);
  if (code) {
    nbcore_variable_release(v);
    return nbcore_fail(c, code, "nb_graph_const_to_variable: out of memory");
  }
  /* the Const becomes the variable's read node: same name, output and consumers */
  g->outs[n->out0].value = NULL;
  nb_tensor_free(value);
  n->def = read;
  n->attr = copy;
  g->vars[g->nvars++] = (nbgraph_var){v, id, true};
  g->version++;
  *out = v;
  return NB_OK;
}
