/* Op dispatch shared by every context: arity and attr checks, shape/dtype inference,
   then the context's execute (run a kernel, or add a node). Also the attr
   constructors, the generic nb_op, and helpers for infer/kernel functions. */
#include "op.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBOP_PAR_MIN (1 << 15) /* elements below which a loop stays on one thread */

/* TF's type attrs that are inferred from the inputs; nb_op accepts and checks them. */
static const char *const inferred_type_attrs[] = {
    "T",          "Tidx", "Tshape", "Tperm", "Tpaddings", "Tmultiples", "Tparams", "Tindices", "Taxis", "Tnumsegments",
    "index_type", "SrcT", "Tcond",  "Index", "Tdim",      "Tlabels",    "TI"};

bool nbop_live(nb_ctx *c) { return c && c->status == NB_OK; }

void nbop_attr_defaults(const nbop_def *def, nbop_attrval *vals) {
  for (int i = 0; i < def->nattrs; i++) vals[i] = def->attrs[i].def;
}

static bool ensure_metas(nb_ctx *c, int n) {
  if (n <= c->metas_cap) return true;
  int cap = n < 16 ? 16 : n;
  nbop_meta *m = realloc(c->metas, (size_t)cap * sizeof *m);
  if (!m) return false;
  c->metas = m;
  c->metas_cap = cap;
  return true;
}

static nb_code check_arity(nb_ctx *c, const nbop_def *def, nb_tensor *const *in, int nin, int nout) {
  int least = def->nin + (def->variadic && !def->empty_list);
  if (def->variadic ? nin < least : nin != def->nin)
    return nbcore_fail(c, NB_INVALID, "%s: expected %s%d inputs, got %d", def->name, def->variadic ? "at least " : "",
                       least, nin);
  if (nin > 0 && !in) return nbcore_fail(c, NB_INVALID, "%s: inputs array is NULL", def->name);
  for (int i = 0; i < nin; i++) {
    if (!in[i]) return nbcore_fail(c, NB_INVALID, "%s: input %d is NULL", def->name, i);
    if (nbcore_released(in[i]))
      return nbcore_fail(c, NB_INVALID, "%s: input %d was released (nb_tensor_free, or the end of its scope)",
                         def->name, i);
  }
  for (int i = 0; i < nin && !c->graph; i++)
    if (!in[i]->buf && (!def->shape_only || in[i]->size < 0))
      return in[i]->graph
                 ? nbcore_fail(c, NB_INVALID,
                               "%s: input %d is a graph tensor ('%s'); eager ops need values (run it in a session)",
                               def->name, i, nb_tensor_node_name(in[i]))
                 : nbcore_fail(c, NB_INTERNAL,
                               "%s: input %d has no data: a tape kept only its shape, but a gradient "
                               "function read it (its registration does not list it as read: src/grad's, or "
                               "nb_register_gradient_reads)",
                               def->name, i);
  if (def->nout != NBOP_VARIADIC && nout != def->nout)
    return nbcore_fail(c, NB_INVALID, "%s: has %d outputs, caller asked for %d", def->name, def->nout, nout);
  if (nout < 0) return nbcore_fail(c, NB_INVALID, "%s: negative output count %d", def->name, nout);
  return NB_OK;
}

/* Every inferred output must have a representable element and byte count, whatever
   the op: shapes built from empty inputs can multiply out past int64. */
static nb_code check_output_sizes(nbop_kargs *k) {
  for (int i = 0; i < k->nout; i++) {
    const nbop_meta *m = &k->out[i];
    int64_t n;
    if (!nbcore_dims_known(m->rank, m->shape)) continue; /* graph outputs with dims known only at run time */
    if (!nbcore_shape_checked_size(m->rank, m->shape, &n) || (uint64_t)n > SIZE_MAX / 8)
      return nbop_kfail(k, NB_SHAPE, "output %d shape %s is too large", i, nbop_sstr(m->rank, m->shape));
  }
  return NB_OK;
}

static bool any_slices(nb_tensor *const *in, int nin) {
  for (int i = 0; in && i < nin; i++)
    if (in[i] && in[i]->slice_values) return true;
  return false;
}

/* The op on its inputs with every IndexedSlices densified first (tf.convert_to_tensor). */
static nb_code dispatch_densified(nb_ctx *c, const nbop_def *def, nb_tensor *const *in, int nin,
                                  const nbop_attrval *attrs, nb_tensor **out, int nout) {
  nb_tensor *small[8], **dense = nin <= 8 ? small : malloc((size_t)nin * sizeof *dense);
  if (!dense) return nbcore_fail(c, NB_NOMEM, "%s: out of memory", def->name);
  nb_code code = nbop_densify_inputs(c, in, nin, dense);
  if (!code) code = nbop_dispatch(c, def, dense, nin, attrs, out, nout);
  if (dense != small) free(dense);
  return code;
}

nb_code nbop_dispatch(nb_ctx *c, const nbop_def *def, nb_tensor *const *in, int nin, const nbop_attrval *attrs,
                      nb_tensor **out, int nout) {
  if (!c) return NB_INVALID;
  if (out)
    for (int i = 0; i < nout; i++) out[i] = NULL;
  if (c->status != NB_OK) return c->status;
  if (any_slices(in, nin)) return dispatch_densified(c, def, in, nin, attrs, out, nout);
  if (!out && nout > 0) return nbcore_fail(c, NB_INVALID, "%s: outputs array is NULL", def->name);
  nb_code code = check_arity(c, def, in, nin, nout);
  if (code) return code;
  if (!ensure_metas(c, nout)) return nbcore_fail(c, NB_NOMEM, "%s: out of memory", def->name);
  nbop_kargs k;
  k.ctx = c;
  k.def = def;
  k.nin = nin;
  k.nout = nout;
  k.in = in;
  k.orig_in = in;
  k.deferred = false;
  k.out = c->metas;
  k.res = out;
  k.threads = c->threads;
  if (attrs)
    memcpy(k.attr, attrs, (size_t)def->nattrs * sizeof *attrs);
  else
    nbop_attr_defaults(def, k.attr);
  if (def->variadic) k.attr[0].i = nin - def->nin; /* attr "N" is first by convention */
  code = c->infer ? c->infer(c, &k) : nbop_kvalidate(&k);
  if (!code && !c->infer) code = def->infer(&k);
  if (!code && !k.deferred) code = check_output_sizes(&k);
  if (code) return code;
  return c->execute(c, &k, out);
}

nb_tensor *nbop_call(nb_ctx *c, const nbop_def *def, nb_tensor *const *in, int nin, const nbop_attrval *attrs) {
  nb_tensor *out = NULL;
  nbop_dispatch(c, def, in, nin, attrs, &out, 1);
  return out;
}

/* ---- the generic entry ------------------------------------------------------------ */

static int find_attr(const nbop_def *def, const char *name) {
  for (int i = 0; i < def->nattrs; i++)
    if (strcmp(def->attrs[i].name, name) == 0) return i;
  return -1;
}

static bool is_inferred_type_attr(const char *name) {
  for (size_t i = 0; i < sizeof inferred_type_attrs / sizeof *inferred_type_attrs; i++)
    if (strcmp(inferred_type_attrs[i], name) == 0) return true;
  return false;
}

static void attr_store(nbop_attrval *v, const nb_attr *a) {
  switch (a->kind) {
    case NB_ATTR_INT: v->i = a->v.i; break;
    case NB_ATTR_FLOAT: v->f = a->v.f; break;
    case NB_ATTR_BOOL: v->b = a->v.b; break;
    case NB_ATTR_STR: v->s = a->v.s; break;
    case NB_ATTR_INTS: v->ints = a->v.ints, v->n = a->n; break;
    case NB_ATTR_TYPE: v->type = a->v.type; break;
    case NB_ATTR_TENSOR: v->tensor = a->v.tensor; break;
    case NB_ATTR_FLOATS: v->floats = a->v.floats, v->n = a->n; break;
    case NB_ATTR_TYPES: v->types = a->v.types, v->n = a->n; break;
  }
}

/* An inferred type attr must name the dtype TF would infer: "T" is checked against the
   op's T input; the others (index types) must be types; the op's kernel reads the
   actual dtypes from its inputs, so a wrong index type cannot mislead it. */
static nb_code check_inferred(nb_ctx *c, const nbop_def *def, const nb_attr *a, nb_tensor *const *in, int nin) {
  if (a->kind != NB_ATTR_TYPE) return nbcore_fail(c, NB_INVALID, "%s: attr '%s' must be a type", def->name, a->name);
  if (strcmp(a->name, "T") == 0 && def->t_input < nin && in && in[def->t_input] && in[def->t_input]->dtype != a->v.type)
    return nbcore_fail(c, NB_DTYPE, "%s: attr T=%s does not match input %d of dtype %s", def->name,
                       nb_dtype_name(a->v.type), def->t_input, nb_dtype_name(in[def->t_input]->dtype));
  return NB_OK;
}

static bool attr_value_missing(const nb_attr *a) {
  switch (a->kind) {
    case NB_ATTR_STR: return !a->v.s;
    case NB_ATTR_TENSOR: return !a->v.tensor;
    case NB_ATTR_INTS: return a->n < 0 || (a->n > 0 && !a->v.ints);
    case NB_ATTR_FLOATS: return a->n < 0 || (a->n > 0 && !a->v.floats);
    case NB_ATTR_TYPES: return a->n < 0 || (a->n > 0 && !a->v.types);
    default: return false;
  }
}

static nb_code resolve_attrs(nb_ctx *c, const nbop_def *def, const nb_attr *attrs, int nattrs, nb_tensor *const *in,
                             int nin, nbop_attrval *vals) {
  bool given[NBOP_MAX_ATTRS] = {false};
  nbop_attr_defaults(def, vals);
  if (nattrs > 0 && !attrs) return nbcore_fail(c, NB_INVALID, "%s: attrs array is NULL", def->name);
  for (int i = 0; i < nattrs; i++) {
    const nb_attr *a = &attrs[i];
    if (!a->name) return nbcore_fail(c, NB_INVALID, "%s: attr %d has no name", def->name, i);
    if (a->name[0] == '_') /* internal attrs carry pointers (variables): only nabla sets them */
      return nbcore_fail(c, NB_INVALID, "%s: attr '%s' is internal and cannot be set through nb_op", def->name,
                         a->name);
    int slot = find_attr(def, a->name);
    if (slot < 0) {
      if (is_inferred_type_attr(a->name)) {
        nb_code code = check_inferred(c, def, a, in, nin);
        if (code) return code;
        continue;
      }
      return nbcore_fail(c, NB_INVALID, "%s: unknown attr '%s'", def->name, a->name);
    }
    if (a->kind != def->attrs[slot].kind)
      return nbcore_fail(c, NB_INVALID, "%s: attr '%s' has the wrong kind", def->name, a->name);
    if (attr_value_missing(a)) return nbcore_fail(c, NB_INVALID, "%s: attr '%s' has a NULL value", def->name, a->name);
    attr_store(&vals[slot], a);
    given[slot] = true;
  }
  for (int i = 0; i < def->nattrs; i++)
    if (def->attrs[i].required && !given[i] && !(def->variadic && i == 0))
      return nbcore_fail(c, NB_INVALID, "%s: missing required attr '%s'", def->name, def->attrs[i].name);
  if (def->variadic && given[0] && vals[0].i != nin - def->nin)
    return nbcore_fail(c, NB_INVALID, "%s: attr N=%lld does not match %d list inputs", def->name, (long long)vals[0].i,
                       nin - def->nin);
  return NB_OK;
}

nb_code nb_op(nb_ctx *c, const char *type, nb_tensor *const *in, int nin, const nb_attr *attrs, int nattrs,
              nb_tensor **out, int nout) {
  if (!c) return NB_INVALID;
  if (out)
    for (int i = 0; i < nout; i++) out[i] = NULL;
  if (c->status != NB_OK) return c->status;
  if (!type) return nbcore_fail(c, NB_INVALID, "nb_op: op type is NULL");
  const nbop_def *def = type[0] == '_' ? NULL : nbop_lookup(type); /* '_' types are internal */
  if (!def) return nbcore_fail(c, NB_NOT_FOUND, "Op type not registered '%s'", type);
  nbop_attrval vals[NBOP_MAX_ATTRS];
  nb_code code = resolve_attrs(c, def, attrs, nattrs, in, nin, vals);
  if (code) return code;
  return nbop_dispatch(c, def, in, nin, vals, out, nout);
}

/* ---- attr constructors ------------------------------------------------------------- */

nb_attr nb_attr_int(const char *name, int64_t v) {
  nb_attr a = {.name = name, .kind = NB_ATTR_INT};
  a.v.i = v;
  return a;
}
nb_attr nb_attr_float(const char *name, double v) {
  nb_attr a = {.name = name, .kind = NB_ATTR_FLOAT};
  a.v.f = v;
  return a;
}
nb_attr nb_attr_bool(const char *name, bool v) {
  nb_attr a = {.name = name, .kind = NB_ATTR_BOOL};
  a.v.b = v;
  return a;
}
nb_attr nb_attr_str(const char *name, const char *v) {
  nb_attr a = {.name = name, .kind = NB_ATTR_STR};
  a.v.s = v;
  return a;
}
nb_attr nb_attr_ints(const char *name, const int64_t *v, int n) {
  nb_attr a = {.name = name, .kind = NB_ATTR_INTS, .n = n};
  a.v.ints = v;
  return a;
}
nb_attr nb_attr_type(const char *name, nb_dtype v) {
  nb_attr a = {.name = name, .kind = NB_ATTR_TYPE};
  a.v.type = v;
  return a;
}

nb_attr nb_attr_floats(const char *name, const double *v, int n) {
  nb_attr a = {.name = name, .kind = NB_ATTR_FLOATS, .n = n};
  a.v.floats = v;
  return a;
}
nb_attr nb_attr_types(const char *name, const nb_dtype *v, int n) {
  nb_attr a = {.name = name, .kind = NB_ATTR_TYPES, .n = n};
  a.v.types = v;
  return a;
}

nb_attr nb_attr_tensor(const char *name, nb_tensor *v) {
  nb_attr a = {.name = name, .kind = NB_ATTR_TENSOR};
  a.v.tensor = v;
  return a;
}

/* The list an attr of kind holds (NULL for the other kinds), and its element size. */
static const void **attr_list(nbop_attrval *v, nb_attr_kind kind, size_t *elem) {
  *elem = kind == NB_ATTR_INTS ? sizeof *v->ints : kind == NB_ATTR_FLOATS ? sizeof *v->floats : sizeof *v->types;
  return kind == NB_ATTR_INTS     ? (const void **)&v->ints
         : kind == NB_ATTR_FLOATS ? (const void **)&v->floats
         : kind == NB_ATTR_TYPES  ? (const void **)&v->types
                                  : NULL;
}

nbop_attrval *nbop_attrs_copy(nbcore_arena *a, const nbop_def *def, const nbop_attrval *attr) {
  if (def->nattrs == 0) return NULL;
  nbop_attrval *out = nbcore_arena_alloc(a, (size_t)def->nattrs * sizeof *out);
  for (int i = 0; out && i < def->nattrs; i++) {
    out[i] = attr[i];
    if (def->attrs[i].kind == NB_ATTR_STR && attr[i].s && !(out[i].s = nbcore_arena_strdup(a, attr[i].s))) return NULL;
    size_t elem;
    const void **list = attr_list(&out[i], def->attrs[i].kind, &elem);
    if (list && attr[i].n > 0) {
      void *copy = nbcore_arena_alloc(a, (size_t)attr[i].n * elem);
      if (!copy) return NULL;
      *list = memcpy(copy, *list, (size_t)attr[i].n * elem);
    }
  }
  return out;
}

/* ---- helpers for wrappers, infer and kernel functions ------------------------------ */

/* A wrapper's list argument must exist unless empty. */
static bool list_ok(nb_ctx *c, const void *v, int n) {
  if (!nbop_live(c)) return false;
  if (n >= 0 && (n == 0 || v)) return true;
  nbcore_fail(c, NB_INVALID, "a list argument is NULL or has negative length %d", n);
  return false;
}

nb_tensor *nbop_const_ints(nb_ctx *c, nb_dtype t, const int64_t *v, int n) {
  if (!list_ok(c, v, n)) return NULL;
  int64_t shape[1] = {n};
  nb_tensor *x = nbcore_tensor_alloc(c, t, 1, shape);
  if (!x) return NULL;
  for (int i = 0; i < n; i++) {
    if (t == NB_I32)
      ((int32_t *)nbcore_tdata(x))[i] = (int32_t)v[i];
    else
      ((int64_t *)nbcore_tdata(x))[i] = v[i];
  }
  return x;
}

nb_tensor *nbop_const_int_list(nb_ctx *c, const int *v, int n) {
  if (!list_ok(c, v, n)) return NULL;
  int64_t shape[1] = {n};
  nb_tensor *x = nbcore_tensor_alloc(c, NB_I32, 1, shape);
  if (x && n) memcpy(nbcore_tdata(x), v, (size_t)n * sizeof *v);
  return x;
}

nb_code nbop_vkfail(nbop_kargs *k, nb_code code, const char *fmt, va_list ap) {
  char prefix[320];
  const char *node = k->ctx->run_node;
  if (node)
    snprintf(prefix, sizeof prefix, "%s (node '%s'): ", k->def->name, node);
  else
    snprintf(prefix, sizeof prefix, "%s: ", k->def->name);
  return nbcore_vfail(k->ctx, code, prefix, fmt, ap);
}

nb_code nbop_kfail(nbop_kargs *k, nb_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  nbop_vkfail(k, code, fmt, ap);
  va_end(ap);
  return code;
}

static const char *mask_str(char *buf, size_t cap, unsigned mask) {
  size_t n = 0;
  buf[0] = '\0';
  for (int t = NB_F32; t <= NB_BOOL; t++)
    if (mask & NBOP_M(t)) n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", nb_dtype_name(t));
  return buf;
}

/* ---- validation ------------------------------------------------------------------------ */

/* A type attr names a dtype its spec allows, and the dtype of its input when tied to one;
   NBOP_TYPE_UNSET is "not given" where that is the default. */
nb_code nbop_kcheck_type_attr(nbop_kargs *k, int slot) {
  const nbop_attr_spec *s = &k->def->attrs[slot];
  const nbop_attr_check *rule = &k->def->checks[slot];
  nb_dtype t = k->attr[slot].type;
  char buf[96];
  if (t == NBOP_TYPE_UNSET && s->def.type == NBOP_TYPE_UNSET) return NB_OK;
  if ((unsigned)t > NB_BOOL) return nbop_kfail(k, NB_DTYPE, "attr %s=%d is not a dtype", s->name, (int)t);
  if (rule->types && !(rule->types & NBOP_M(t)))
    return nbop_kfail(k, NB_DTYPE, "attr %s=%s is not supported; expected %s", s->name, nb_dtype_name(t),
                      mask_str(buf, sizeof buf, rule->types));
  int i = rule->of_input - 1;
  if (i >= 0 && i < k->nin && k->in[i]->dtype != t)
    return nbop_kfail(k, NB_DTYPE, "attr %s=%s does not match input %d of dtype %s", s->name, nb_dtype_name(t), i,
                      nb_dtype_name(k->in[i]->dtype));
  return NB_OK;
}

static int choice_of(const char *const *choices, const char *v) {
  for (int i = 0; v && choices[i]; i++)
    if (strcmp(choices[i], v) == 0) return i;
  return -1;
}

/* A string attr with choices holds one of them; the message lists them TF's way. */
static nb_code check_choice_attr(nbop_kargs *k, int slot) {
  const char *const *choices = k->def->checks[slot].choices, *v = k->attr[slot].s;
  if (choice_of(choices, v) >= 0) return NB_OK;
  char list[160];
  size_t n = 0;
  list[0] = '\0';
  for (int i = 0; choices[i] && n < sizeof list; i++)
    n += (size_t)snprintf(list + n, sizeof list - n, "%s\"%s\"",
                          i == 0           ? ""
                          : choices[i + 1] ? ", "
                                           : " or ",
                          choices[i]);
  return nbop_kfail(k, NB_INVALID, "%s must be %s, got \"%s\"", k->def->attrs[slot].name, list, v ? v : "");
}

/* Each dtype of a list(type) attr is a dtype its spec allows. */
static nb_code check_type_list_attr(nbop_kargs *k, int slot) {
  const nbop_attrval *v = &k->attr[slot];
  unsigned allowed = k->def->checks[slot].types ? k->def->checks[slot].types : NBOP_M_ALL;
  char buf[96];
  for (int i = 0; i < v->n; i++)
    if ((unsigned)v->types[i] > NB_BOOL || !(allowed & NBOP_M(v->types[i])))
      return nbop_kfail(k, NB_DTYPE, "attr %s[%d]=%s is not supported; expected %s", k->def->attrs[slot].name, i,
                        nb_dtype_name(v->types[i]), mask_str(buf, sizeof buf, allowed));
  return NB_OK;
}

nb_code nbop_kvalidate(nbop_kargs *k) {
  const nbop_def *def = k->def;
  for (int a = 0; a < def->nattrs; a++) {
    nb_code code = def->attrs[a].kind == NB_ATTR_TYPE                            ? nbop_kcheck_type_attr(k, a)
                   : def->attrs[a].kind == NB_ATTR_TYPES                         ? check_type_list_attr(k, a)
                   : def->attrs[a].kind == NB_ATTR_STR && def->checks[a].choices ? check_choice_attr(k, a)
                                                                                 : NB_OK;
    if (code) return code;
  }
  return def->validate ? def->validate(k) : NB_OK;
}

int nbop_kchoice(const nbop_kargs *k, int slot) { return choice_of(k->def->checks[slot].choices, k->attr[slot].s); }

nb_code nbop_kcheck_rank(nbop_kargs *k, int i, int lo, int hi, const char *what) {
  const nb_tensor *x = k->in[i];
  if (x->rank < 0 || (x->rank >= lo && x->rank <= hi)) return NB_OK;
  if (lo == hi) return nbop_kfail(k, NB_SHAPE, "%s must be %d-dimensional, got shape %s", what, lo, nbop_tstr(x));
  if (hi >= NB_MAX_RANK)
    return nbop_kfail(k, NB_SHAPE, "%s must be at least %d-dimensional, got shape %s", what, lo, nbop_tstr(x));
  return nbop_kfail(k, NB_SHAPE, "%s must have rank in [%d, %d], got shape %s", what, lo, hi, nbop_tstr(x));
}

nb_code nbop_kcheck_out_rank(nbop_kargs *k, int rank, const char *what) {
  if (rank <= NB_MAX_RANK) return NB_OK;
  return nbop_kfail(k, NB_SHAPE, "%s rank %d exceeds the maximum rank %d", what, rank, NB_MAX_RANK);
}

bool nbop_shapes_compatible(const nb_tensor *x, const nb_tensor *y) {
  if (x->rank < 0 || y->rank < 0) return true;
  if (x->rank != y->rank) return false;
  for (int d = 0; d < x->rank; d++)
    if (x->shape[d] >= 0 && y->shape[d] >= 0 && x->shape[d] != y->shape[d]) return false;
  return true;
}

bool nbop_broadcastable(int ra, const int64_t *a, int rb, const int64_t *b) {
  if (ra < 0 || rb < 0) return true;
  for (int i = 1; i <= ra && i <= rb; i++) {
    int64_t da = a[ra - i], db = b[rb - i];
    if (da >= 0 && db >= 0 && da != db && da != 1 && db != 1) return false;
  }
  return true;
}

nb_code nbop_infer_same(nbop_kargs *k) {
  nbop_meta_like(&k->out[0], k->in[0]);
  return NB_OK;
}

nb_code nbop_kaxis(nbop_kargs *k, int64_t axis, int rank, const char *what, int *a) {
  *a = -1;
  if (rank < 0 || nbcore_norm_axis(axis, rank, a)) return NB_OK;
  return nbop_kfail(k, NB_INVALID, "Expected %s in the range [%d, %d), but got %lld", what, -rank, rank,
                    (long long)axis);
}

nb_code nbop_kcheck_dtype(nbop_kargs *k, int i, unsigned mask) {
  if (mask & NBOP_M(k->in[i]->dtype)) return NB_OK;
  char buf[96];
  return nbop_kfail(k, NB_DTYPE, "input %d has dtype %s; expected %s", i, nb_dtype_name(k->in[i]->dtype),
                    mask_str(buf, sizeof buf, mask));
}

nb_code nbop_kcheck_same_dtype(nbop_kargs *k, int i, int j) {
  if (k->in[i]->dtype == k->in[j]->dtype) return NB_OK;
  return nbop_kfail(k, NB_DTYPE, "inputs %d and %d must have the same dtype, got %s and %s", i, j,
                    nb_dtype_name(k->in[i]->dtype), nb_dtype_name(k->in[j]->dtype));
}

nb_code nbop_kints(nbop_kargs *k, int i, int max_rank, int64_t *v, int cap, int *n) {
  const nb_tensor *x = k->in[i];
  nb_code code = nbop_kcheck_dtype(k, i, NBOP_M_INT);
  if (code) return code;
  if (x->rank > max_rank)
    return nbop_kfail(k, NB_SHAPE, "input %d must have rank <= %d, got shape %s", i, max_rank, nbop_tstr(x));
  if (x->size > cap)
    return nbop_kfail(k, NB_SHAPE, "input %d has %lld values, at most %d allowed", i, (long long)x->size, cap);
  if (!x->buf) return NBOP_DEFER; /* a graph value not known until run time */
  for (int64_t j = 0; j < x->size; j++)
    v[j] = x->dtype == NB_I32 ? ((const int32_t *)nbcore_tdata(x))[j] : ((const int64_t *)nbcore_tdata(x))[j];
  *n = (int)x->size;
  return NB_OK;
}

const char *nbop_sstr(int rank, const int64_t *shape) {
  static _Thread_local char bufs[8][160];
  static _Thread_local unsigned next;
  char *b = bufs[next++ % 8];
  return nbcore_shape_str(b, sizeof bufs[0], rank, shape);
}

int nbop_kthreads(const nbop_kargs *k, int64_t n) { return n >= NBOP_PAR_MIN ? k->threads : 1; }

static _Thread_local int range_slot;

int nbop_range_slot(void) { return range_slot; }

void nbop_parallel_range(int nt, int64_t n, nbop_range_fn fn, void *arg) {
  if (nt <= 1 || n < 2) {
    int outer = range_slot;
    range_slot = 0;
    if (n > 0) fn(arg, 0, n);
    range_slot = outer;
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    int t = omp_get_thread_num(), m = omp_get_num_threads();
    int64_t lo = n * t / m, hi = n * (t + 1) / m;
    int outer = range_slot;
    range_slot = t;
    if (hi > lo) fn(arg, lo, hi);
    range_slot = outer;
  }
}
