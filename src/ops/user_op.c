/* Ops users register (nb_register_op: TF's REGISTER_OP and REGISTER_KERNEL_BUILDER in one
   call). A registration becomes an nbop_def like a family table's entry, whose validate,
   infer and kernel are the trampolines below: they check the dtypes the spec declares and
   call the user's shape function and kernel through the public kernel context. */
#include "op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBOP_USER_MAX_ARGS 32
#define NBOP_USER_MAX_NAME 128
#define UNSET_RANK (-2) /* an output the shape function has not set */

/* One registration. def.impl points back at it; it lives as long as the process. */
typedef struct user_op {
  nbop_def def;
  nb_code (*shape_fn)(nb_op_ctx *k);
  nb_code (*kernel)(nb_op_ctx *k);
  int ninputs, noutputs;
  char *in_names[NBOP_USER_MAX_ARGS];
  int16_t in_type_slot[NBOP_USER_MAX_ARGS], out_type_slot[NBOP_USER_MAX_ARGS]; /* -1: fixed dtype */
  nb_dtype in_dtype[NBOP_USER_MAX_ARGS], out_dtype[NBOP_USER_MAX_ARGS];
} user_op;

struct nb_op_ctx {
  nbop_kargs *k;
  bool in_kernel; /* outputs exist (kernels) rather than being shaped (shape functions) */
};

/* ---- this thread's registry error --------------------------------------------------------- */

static _Thread_local char registry_error[NBCORE_ERR_CAP];

nb_code nbop_registry_fail(nb_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(registry_error, sizeof registry_error, fmt, ap);
  va_end(ap);
  return code;
}

void nbop_registry_clear_error(void) { registry_error[0] = '\0'; }

const char *nb_registry_error(void) { return registry_error; }

/* ---- checking a spec ---------------------------------------------------------------------- */

static const char *kind_name(nb_attr_kind kind) {
  static const char *const names[] = {"int",  "float",  "bool",        "string",    "list(int)",
                                      "type", "tensor", "list(float)", "list(type)"};
  return (unsigned)kind < sizeof names / sizeof *names ? names[kind] : "invalid kind";
}

/* TF's op names: [A-Z][A-Za-z0-9_>]* (the '>' for nested names such as "A>B"). */
bool nbop_valid_op_name(const char *s) {
  if (!s || !(*s >= 'A' && *s <= 'Z') || strlen(s) > NBOP_USER_MAX_NAME) return false;
  for (; *s; s++)
    if (!(*s >= 'A' && *s <= 'Z') && !(*s >= 'a' && *s <= 'z') && !(*s >= '0' && *s <= '9') && *s != '_' && *s != '>')
      return false;
  return true;
}

/* TF's attr and argument names: [A-Za-z][A-Za-z0-9_]*. */
static bool valid_arg_name(const char *s) {
  if (!s || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')) || strlen(s) > NBOP_USER_MAX_NAME) return false;
  for (; *s; s++)
    if (!(*s >= 'A' && *s <= 'Z') && !(*s >= 'a' && *s <= 'z') && !(*s >= '0' && *s <= '9') && *s != '_') return false;
  return true;
}

static int spec_attr(const nb_op_spec *spec, const char *name) {
  for (int i = 0; name && i < spec->nattrs; i++)
    if (strcmp(spec->attrs[i].name, name) == 0) return i;
  return -1;
}

static nb_code check_default(const nb_op_spec *spec, const nb_op_attr_def *a) {
  const nb_attr *d = &a->def;
  if (d->kind != a->kind)
    return nbop_registry_fail(NB_INVALID, "op '%s': the default of attr '%s' has kind %s, the attr kind %s", spec->name,
                              a->name, kind_name(d->kind), kind_name(a->kind));
  const void *items = a->kind == NB_ATTR_INTS     ? (const void *)d->v.ints
                      : a->kind == NB_ATTR_FLOATS ? (const void *)d->v.floats
                      : a->kind == NB_ATTR_TYPES  ? (const void *)d->v.types
                                                  : NULL;
  bool list = a->kind == NB_ATTR_INTS || a->kind == NB_ATTR_FLOATS || a->kind == NB_ATTR_TYPES;
  if ((a->kind == NB_ATTR_STR && !d->v.s) || (list && (d->n < 0 || (d->n > 0 && !items))))
    return nbop_registry_fail(NB_INVALID, "op '%s': the default of attr '%s' is NULL", spec->name, a->name);
  unsigned allowed = a->allowed_types ? a->allowed_types : NBOP_M_ALL;
  bool types_ok = a->kind != NB_ATTR_TYPE || ((unsigned)d->v.type <= NB_BOOL && (allowed & NBOP_M(d->v.type)));
  for (int i = 0; a->kind == NB_ATTR_TYPES && i < d->n; i++)
    types_ok &= (unsigned)d->v.types[i] <= NB_BOOL && (allowed & NBOP_M(d->v.types[i]));
  if (!types_ok)
    return nbop_registry_fail(NB_INVALID, "op '%s': the default of attr '%s' holds a dtype it does not allow",
                              spec->name, a->name);
  return NB_OK;
}

static nb_code check_attr(const nb_op_spec *spec, int i) {
  const nb_op_attr_def *a = &spec->attrs[i];
  if (!valid_arg_name(a->name))
    return nbop_registry_fail(NB_INVALID, "op '%s': attr %d's name '%s' is not [A-Za-z][A-Za-z0-9_]*", spec->name, i,
                              a->name ? a->name : "(null)");
  if (spec_attr(spec, a->name) != i)
    return nbop_registry_fail(NB_INVALID, "op '%s': attr '%s' is declared twice", spec->name, a->name);
  if ((unsigned)a->kind > NB_ATTR_TYPES || a->kind == NB_ATTR_TENSOR)
    return nbop_registry_fail(NB_INVALID,
                              "op '%s': attr '%s' has kind %s; user ops take int, float, bool, string, "
                              "type, list(int), list(float) and list(type) attrs",
                              spec->name, a->name, kind_name(a->kind));
  bool typed = a->kind == NB_ATTR_TYPE || a->kind == NB_ATTR_TYPES;
  if (a->allowed_types && (!typed || (a->allowed_types & ~(unsigned)NBOP_M_ALL)))
    return nbop_registry_fail(NB_INVALID, "op '%s': attr '%s' has allowed_types that are not dtypes of a type attr",
                              spec->name, a->name);
  return a->required ? NB_OK : check_default(spec, a);
}

/* The attr an argument names (type_attr or number_attr) must be declared with kind. */
static nb_code check_arg_attr(const nb_op_spec *spec, const char *what, const nb_op_arg *arg, const char *attr,
                              nb_attr_kind kind) {
  int slot = spec_attr(spec, attr);
  if (slot < 0)
    return nbop_registry_fail(NB_INVALID, "op '%s': %s '%s' names attr '%s', which is not declared", spec->name, what,
                              arg->name, attr);
  if (spec->attrs[slot].kind != kind)
    return nbop_registry_fail(NB_INVALID, "op '%s': %s '%s' names attr '%s' of kind %s; it must be of kind %s",
                              spec->name, what, arg->name, attr, kind_name(spec->attrs[slot].kind), kind_name(kind));
  return NB_OK;
}

static bool arg_name_taken(const nb_op_spec *spec, const nb_op_arg *arg) {
  for (int i = 0; i < spec->ninputs; i++)
    if (&spec->inputs[i] != arg && strcmp(spec->inputs[i].name, arg->name) == 0) return true;
  for (int i = 0; i < spec->noutputs; i++)
    if (&spec->outputs[i] != arg && strcmp(spec->outputs[i].name, arg->name) == 0) return true;
  return false;
}

static nb_code check_arg(const nb_op_spec *spec, const char *what, const nb_op_arg *arg, int i) {
  if (!valid_arg_name(arg->name))
    return nbop_registry_fail(NB_INVALID, "op '%s': %s %d's name '%s' is not [A-Za-z][A-Za-z0-9_]*", spec->name, what,
                              i, arg->name ? arg->name : "(null)");
  if (arg_name_taken(spec, arg))
    return nbop_registry_fail(NB_INVALID, "op '%s': two inputs or outputs are named '%s'", spec->name, arg->name);
  nb_code code = arg->type_attr ? check_arg_attr(spec, what, arg, arg->type_attr, NB_ATTR_TYPE) : NB_OK;
  if (!code && !arg->type_attr && (unsigned)arg->dtype > NB_BOOL)
    code = nbop_registry_fail(NB_INVALID, "op '%s': %s '%s' has no type attr and an invalid dtype %d", spec->name, what,
                              arg->name, (int)arg->dtype);
  if (!code && arg->number_attr && (arg != spec->inputs))
    code = nbop_registry_fail(NB_UNIMPLEMENTED, "op '%s': %s '%s' is a list; only the first input may be one",
                              spec->name, what, arg->name);
  if (!code && arg->number_attr) code = check_arg_attr(spec, what, arg, arg->number_attr, NB_ATTR_INT);
  return code;
}

static nb_code check_counts(const nb_op_spec *spec) {
  if (spec->ninputs < 0 || spec->ninputs > NBOP_USER_MAX_ARGS || (spec->ninputs && !spec->inputs) ||
      spec->noutputs < 0 || spec->noutputs > NBOP_USER_MAX_ARGS || (spec->noutputs && !spec->outputs))
    return nbop_registry_fail(NB_INVALID, "op '%s': inputs and outputs must be arrays of 0 to %d (got %d and %d)",
                              spec->name, NBOP_USER_MAX_ARGS, spec->ninputs, spec->noutputs);
  if (spec->nattrs < 0 || spec->nattrs > NBOP_MAX_ATTRS || (spec->nattrs && !spec->attrs))
    return nbop_registry_fail(NB_INVALID, "op '%s': attrs must be an array of 0 to %d (got %d)", spec->name,
                              NBOP_MAX_ATTRS, spec->nattrs);
  if (!spec->kernel) return nbop_registry_fail(NB_INVALID, "op '%s': no kernel", spec->name);
  if (!spec->shape_fn && spec->ninputs == 0 && spec->noutputs > 0)
    return nbop_registry_fail(NB_INVALID, "op '%s': no shape function, and no input whose shape the outputs could take",
                              spec->name);
  return NB_OK;
}

static nb_code check_spec(const nb_op_spec *spec) {
  if (!spec) return nbop_registry_fail(NB_INVALID, "nb_register_op: spec is NULL");
  if (!nbop_valid_op_name(spec->name))
    return nbop_registry_fail(NB_INVALID, "nb_register_op: op name '%s' is not [A-Z][A-Za-z0-9_>]* (at most %d chars)",
                              spec->name ? spec->name : "(null)", NBOP_USER_MAX_NAME);
  if (nbop_lookup(spec->name)) return nbop_registry_fail(NB_INVALID, "op '%s' is already registered", spec->name);
  nb_code code = check_counts(spec);
  for (int i = 0; !code && i < spec->nattrs; i++) code = check_attr(spec, i);
  for (int i = 0; !code && i < spec->ninputs; i++) code = check_arg(spec, "input", &spec->inputs[i], i);
  for (int i = 0; !code && i < spec->noutputs; i++) code = check_arg(spec, "output", &spec->outputs[i], i);
  return code;
}

/* ---- the def -------------------------------------------------------------------------------- */

static void free_user_op(user_op *u) {
  free((char *)u->def.name);
  for (int i = 0; i < u->def.nattrs; i++) {
    free((char *)u->def.attrs[i].name);
    free((char *)u->def.attrs[i].def.s);
    free((int64_t *)u->def.attrs[i].def.ints);
    free((double *)u->def.attrs[i].def.floats);
    free((nb_dtype *)u->def.attrs[i].def.types);
  }
  for (int i = 0; i < u->ninputs; i++) free(u->in_names[i]);
  free(u);
}

static char *copy_str(const char *s, bool *ok) {
  if (!s) return NULL;
  char *c = malloc(strlen(s) + 1);
  *ok &= c != NULL;
  return c ? strcpy(c, s) : NULL;
}

/* A copy of n elements of size elem at v (NULL when v is NULL or n is not positive). */
static void *copy_list(const void *v, int n, size_t elem, bool *ok) {
  if (!v || n <= 0) return NULL;
  void *c = malloc((size_t)n * elem);
  *ok &= c != NULL;
  return c ? memcpy(c, v, (size_t)n * elem) : NULL;
}

/* Whether attr name is the type attr of some input: then inferred from it (TF's "T"). */
static bool inferred_from_input(const nb_op_spec *spec, const char *name) {
  for (int i = 0; i < spec->ninputs; i++)
    if (spec->inputs[i].type_attr && strcmp(spec->inputs[i].type_attr, name) == 0) return true;
  return false;
}

/* Spec attr a into def slot s: a list's number attr takes slot 0, as the def's variadic
   machinery expects of attr "N". */
static void set_attr(user_op *u, const nb_op_spec *spec, const nb_op_attr_def *a, int s, bool *ok) {
  nbop_attr_spec *d = &u->def.attrs[s];
  d->name = copy_str(a->name, ok);
  d->kind = a->kind;
  d->required = a->required;
  u->def.checks[s].types = a->allowed_types;
  if (a->kind == NB_ATTR_TYPE && inferred_from_input(spec, a->name)) {
    d->required = false;
    d->def.type = NBOP_TYPE_UNSET;
    return;
  }
  if (a->required) return;
  d->def.s = copy_str(a->kind == NB_ATTR_STR ? a->def.v.s : NULL, ok);
  d->def.ints = copy_list(a->kind == NB_ATTR_INTS ? a->def.v.ints : NULL, a->def.n, sizeof *d->def.ints, ok);
  d->def.floats = copy_list(a->kind == NB_ATTR_FLOATS ? a->def.v.floats : NULL, a->def.n, sizeof *d->def.floats, ok);
  d->def.types = copy_list(a->kind == NB_ATTR_TYPES ? a->def.v.types : NULL, a->def.n, sizeof *d->def.types, ok);
  d->def.n = a->kind == NB_ATTR_INTS || a->kind == NB_ATTR_FLOATS || a->kind == NB_ATTR_TYPES ? a->def.n : 0;
  if (a->kind == NB_ATTR_INT) d->def.i = a->def.v.i;
  if (a->kind == NB_ATTR_FLOAT) d->def.f = a->def.v.f;
  if (a->kind == NB_ATTR_BOOL) d->def.b = a->def.v.b;
  if (a->kind == NB_ATTR_TYPE) d->def.type = a->def.v.type;
}

static nb_code user_validate(nbop_kargs *k);
static nb_code user_infer(nbop_kargs *k);
static nb_code user_kernel(nbop_kargs *k);

static int def_slot(const nbop_def *def, const char *name) {
  for (int i = 0; name && i < def->nattrs; i++)
    if (strcmp(def->attrs[i].name, name) == 0) return i;
  return -1;
}

static void set_args(user_op *u, const nb_op_spec *spec, bool *ok) {
  for (int i = 0; i < spec->ninputs; i++) {
    u->in_names[i] = copy_str(spec->inputs[i].name, ok);
    u->in_type_slot[i] = (int16_t)def_slot(&u->def, spec->inputs[i].type_attr);
    u->in_dtype[i] = spec->inputs[i].dtype;
  }
  for (int i = 0; i < spec->noutputs; i++) {
    u->out_type_slot[i] = (int16_t)def_slot(&u->def, spec->outputs[i].type_attr);
    u->out_dtype[i] = spec->outputs[i].dtype;
  }
}

/* The def's dtype rule for outputs whose shapes are left to run time (deferred_dtype):
   output 0's. */
static void set_output_rule(user_op *u) {
  nbop_def *d = &u->def;
  d->bool_out = u->noutputs > 0 && u->out_type_slot[0] < 0 && u->out_dtype[0] == NB_BOOL;
  d->dtype_attr = (int8_t)(u->noutputs > 0 ? u->out_type_slot[0] + 1 : 0);
}

static user_op *build_def(const nb_op_spec *spec) {
  user_op *u = calloc(1, sizeof *u);
  if (!u) return NULL;
  bool ok = true;
  nbop_def *d = &u->def;
  d->name = copy_str(spec->name, &ok);
  d->variadic = spec->ninputs > 0 && spec->inputs[0].number_attr;
  d->nin = (int8_t)(spec->ninputs - d->variadic);
  d->nout = (int8_t)spec->noutputs;
  d->alias = -1;
  d->stateful = spec->stateful;
  d->nattrs = (uint8_t)spec->nattrs;
  int number = d->variadic ? spec_attr(spec, spec->inputs[0].number_attr) : -1, s = d->variadic;
  for (int i = 0; i < spec->nattrs; i++) set_attr(u, spec, &spec->attrs[i], i == number ? 0 : s++, &ok);
  d->validate = user_validate;
  d->infer = user_infer;
  d->kernel = user_kernel;
  d->impl = u;
  u->shape_fn = spec->shape_fn;
  u->kernel = spec->kernel;
  u->ninputs = spec->ninputs;
  u->noutputs = spec->noutputs;
  set_args(u, spec, &ok);
  set_output_rule(u);
  if (ok) return u;
  free_user_op(u);
  return NULL;
}

nb_code nb_register_op(const nb_op_spec *spec) {
  nbop_registry_clear_error();
  nb_code code = check_spec(spec);
  if (code) return code;
  user_op *u = build_def(spec);
  if (!u) return nbop_registry_fail(NB_NOMEM, "op '%s': out of memory registering it", spec->name);
  code = nbop_add(&u->def);
  if (!code) return NB_OK;
  free_user_op(u);
  return code == NB_NOMEM
             ? nbop_registry_fail(code, "op '%s': the op registry is full (%d ops)", spec->name, NBOP_MAX_OPS)
             : nbop_registry_fail(code, "op '%s' is already registered", spec->name);
}

/* ---- the trampolines ----------------------------------------------------------------------- */

/* The spec input that call input i belongs to (list elements first, when there is a list). */
static int spec_input(const nbop_kargs *k, int i) {
  int n = k->def->variadic ? k->nin - k->def->nin : 0;
  return i < n ? 0 : i - n + k->def->variadic;
}

/* Each input has its declared dtype; a type attr an input names takes that input's dtype
   when not given (TF's inference), then passes the attr's checks. */
static nb_code user_validate(nbop_kargs *k) {
  const user_op *u = k->def->impl;
  for (int i = 0; i < k->nin; i++) {
    int j = spec_input(k, i), slot = u->in_type_slot[j];
    nb_dtype have = k->in[i]->dtype, want = slot < 0 ? u->in_dtype[j] : k->attr[slot].type;
    if (slot >= 0 && want == NBOP_TYPE_UNSET) {
      k->attr[slot].type = have;
      nb_code code = nbop_kcheck_type_attr(k, slot);
      if (code) return code;
    } else if (have != want) {
      return nbop_kfail(k, NB_DTYPE, "input %d ('%s') has dtype %s; expected %s%s%s", i, u->in_names[j],
                        nb_dtype_name(have), nb_dtype_name(want), slot < 0 ? "" : ", the dtype of attr ",
                        slot < 0 ? "" : k->def->attrs[slot].name);
    }
  }
  return NB_OK;
}

static void unchanged_shape(nbop_kargs *k) {
  for (int i = 0; i < k->nout; i++) {
    k->out[i].rank = k->in[0]->rank;
    memcpy(k->out[i].shape, k->in[0]->shape, sizeof k->out[i].shape);
  }
}

static bool all_inputs_known(const nbop_kargs *k) {
  for (int i = 0; i < k->nin; i++)
    if (!k->in[i]->buf) return false;
  return true;
}

/* The user's code returned code: a failure without a message gets one naming what failed. */
static nb_code user_code(nbop_kargs *k, const char *what, nb_code code) {
  char who[NBOP_USER_MAX_NAME + 32];
  snprintf(who, sizeof who, "%s: the %s", k->def->name, what);
  return nbcore_callback_code(k->ctx, who, code);
}

static nb_code user_infer(nbop_kargs *k) {
  const user_op *u = k->def->impl;
  for (int i = 0; i < k->nout; i++) {
    k->out[i].dtype = u->out_type_slot[i] < 0 ? u->out_dtype[i] : k->attr[u->out_type_slot[i]].type;
    k->out[i].rank = UNSET_RANK;
  }
  if (!u->shape_fn) {
    unchanged_shape(k);
    return NB_OK;
  }
  nb_op_ctx ctx = {k, false};
  nb_code code = user_code(k, "shape function", u->shape_fn(&ctx));
  for (int i = 0; !code && i < k->nout; i++)
    if (k->out[i].rank == UNSET_RANK)
      return all_inputs_known(k) ? nbop_kfail(k, NB_INVALID, "the shape function did not set output %d's shape", i)
                                 : NBOP_DEFER;
  return code;
}

static nb_code user_kernel(nbop_kargs *k) {
  const user_op *u = k->def->impl;
  nb_op_ctx ctx = {k, true};
  return user_code(k, "kernel", u->kernel(&ctx));
}

/* ---- the kernel context ---------------------------------------------------------------------- */

static void *data_of(const nb_tensor *x) { return x ? nbcore_tdata(x) : NULL; }

int nb_opctx_num_inputs(const nb_op_ctx *k) { return k ? k->k->nin : 0; }
int nb_opctx_num_outputs(const nb_op_ctx *k) { return k ? k->k->nout : 0; }
int nb_opctx_threads(const nb_op_ctx *k) { return k ? k->k->threads : 1; }

const nb_tensor *nb_opctx_input(const nb_op_ctx *k, int i) { return k && i >= 0 && i < k->k->nin ? k->k->in[i] : NULL; }

const void *nb_opctx_input_value(const nb_op_ctx *k, int i) { return data_of(nb_opctx_input(k, i)); }

const nb_tensor *nb_opctx_output(const nb_op_ctx *k, int i) {
  return k && k->in_kernel && i >= 0 && i < k->k->nout ? k->k->res[i] : NULL;
}

void *nb_opctx_output_data(nb_op_ctx *k, int i) { return data_of(nb_opctx_output(k, i)); }

nb_code nb_opctx_fail(nb_op_ctx *k, nb_code code, const char *fmt, ...) {
  if (!k || !fmt) return code;
  va_list ap;
  va_start(ap, fmt);
  nbop_vkfail(k->k, code, fmt, ap);
  va_end(ap);
  return code;
}

nb_code nb_opctx_set_output_shape(nb_op_ctx *k, int i, int rank, const int64_t *shape) {
  if (!k) return NB_INVALID;
  if (k->in_kernel) return nb_opctx_fail(k, NB_INVALID, "output shapes are set by the shape function, not the kernel");
  if (i < 0 || i >= k->k->nout)
    return nb_opctx_fail(k, NB_INVALID, "no output %d to shape (%d outputs)", i, k->k->nout);
  if (rank < 0 || rank > NB_MAX_RANK || (rank > 0 && !shape))
    return nb_opctx_fail(k, NB_SHAPE, "output %d: rank %d is not in [0, %d] or its shape is NULL", i, rank,
                         NB_MAX_RANK);
  for (int d = 0; d < rank; d++)
    if (shape[d] < 0) return nb_opctx_fail(k, NB_SHAPE, "output %d: dim %d is %lld", i, d, (long long)shape[d]);
  nbop_meta_set(&k->k->out[i], k->k->out[i].dtype, rank, shape);
  return NB_OK;
}

/* The value of the attr name, which must be declared with kind; else a failure. */
static const nbop_attrval *attr_of(nb_op_ctx *k, const char *name, nb_attr_kind kind) {
  if (!k) return NULL;
  int slot = def_slot(k->k->def, name);
  if (slot >= 0 && k->k->def->attrs[slot].kind == kind) return &k->k->attr[slot];
  nb_opctx_fail(k, NB_INVALID, "the op has no %s attr '%s'", kind_name(kind), name ? name : "(null)");
  return NULL;
}

int64_t nb_opctx_attr_int(nb_op_ctx *k, const char *name) {
  const nbop_attrval *a = attr_of(k, name, NB_ATTR_INT);
  return a ? a->i : 0;
}
double nb_opctx_attr_float(nb_op_ctx *k, const char *name) {
  const nbop_attrval *a = attr_of(k, name, NB_ATTR_FLOAT);
  return a ? a->f : 0;
}
bool nb_opctx_attr_bool(nb_op_ctx *k, const char *name) {
  const nbop_attrval *a = attr_of(k, name, NB_ATTR_BOOL);
  return a ? a->b : false;
}
const char *nb_opctx_attr_str(nb_op_ctx *k, const char *name) {
  const nbop_attrval *a = attr_of(k, name, NB_ATTR_STR);
  return a ? a->s : NULL;
}
nb_dtype nb_opctx_attr_type(nb_op_ctx *k, const char *name) {
  const nbop_attrval *a = attr_of(k, name, NB_ATTR_TYPE);
  return a ? a->type : NB_F32;
}
const int64_t *nb_opctx_attr_ints(nb_op_ctx *k, const char *name, int *n) {
  const nbop_attrval *a = attr_of(k, name, NB_ATTR_INTS);
  if (n) *n = a ? a->n : 0;
  return a ? a->ints : NULL;
}
const double *nb_opctx_attr_floats(nb_op_ctx *k, const char *name, int *n) {
  const nbop_attrval *a = attr_of(k, name, NB_ATTR_FLOATS);
  if (n) *n = a ? a->n : 0;
  return a ? a->floats : NULL;
}
const nb_dtype *nb_opctx_attr_types(nb_op_ctx *k, const char *name, int *n) {
  const nbop_attrval *a = attr_of(k, name, NB_ATTR_TYPES);
  if (n) *n = a ? a->n : 0;
  return a ? a->types : NULL;
}
