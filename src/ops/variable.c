/* Resource variable ops: ReadVariableOp, AssignVariableOp, AssignAddVariableOp,
   AssignSubVariableOp, ResourceScatterAdd and ResourceScatterSub (TF's
   resource_variable_ops). nabla has no resource dtype, so the
   variable travels in the internal attr _variable (its pointer's bits, as _CustomGradient
   carries its function) instead of a resource input: TF's value input and dtype attr stay.
   Reads share the variable's buffer; assigns write it in place unless something still
   holds the old value, which then keeps it (copy-on-write, nbcore_variable_writable). Each op's
   output is the variable's value after the op, sharing its buffer. */
#include "op.h"

#include "training.h"

#include <string.h>

enum { VAR_DTYPE, VAR_PTR };

typedef enum { ASSIGN_SET, ASSIGN_ADD, ASSIGN_SUB } assign_kind;

static nb_variable *attr_variable(const nbop_kargs *k) { return nbcore_variable_from_bits(k->attr[VAR_PTR].i); }

nb_code nbop_kcheck_variable_live(nbop_kargs *k, const nb_variable *v) {
  if (!v->freed) return NB_OK;
  return nbop_kfail(k, NB_INVALID, "variable '%s' was freed (nb_variable_free) while a graph still uses it", v->name);
}

/* The variable named by the attrs, live and of the dtype attr's type. */
static nb_code check_variable(nbop_kargs *k, nb_variable **out) {
  nb_variable *v = *out = attr_variable(k);
  if (!v) return nbop_kfail(k, NB_INVALID, "attr _variable is not set");
  nb_code code = nbop_kcheck_variable_live(k, v);
  if (code) return code;
  if (k->attr[VAR_DTYPE].type != v->dtype)
    return nbop_kfail(k, NB_DTYPE, "attr dtype %s does not match variable '%s' of dtype %s",
                      nb_dtype_name(k->attr[VAR_DTYPE].type), v->name, nb_dtype_name(v->dtype));
  return NB_OK;
}

static nb_code read_validate(nbop_kargs *k) {
  nb_variable *v;
  return check_variable(k, &v);
}

/* Every op's output is the variable's value (validate checked the variable), whatever
   the inputs' ranks: the ops are any_rank. */
static nb_code variable_infer(nbop_kargs *k) {
  const nb_variable *v = attr_variable(k);
  nbop_meta_set(&k->out[0], v->dtype, v->rank, v->shape);
  return NB_OK;
}

static nb_code read_kernel(nbop_kargs *k) {
  nbcore_variable_share_into(k->ctx, k->res[0], attr_variable(k));
  return NB_OK;
}

/* The value fits the variable (unknown dims and ranks fit); adds and subtracts need numbers. */
static nb_code assign_validate(nbop_kargs *k) {
  nb_variable *v;
  nb_code code = check_variable(k, &v);
  if (code) return code;
  const nb_tensor *x = k->in[0];
  if (!nbcore_variable_accepts(v, x))
    return nbop_kfail(k, x->dtype != v->dtype ? NB_DTYPE : NB_SHAPE,
                      "variable '%s' has shape %s and dtype %s; the value has shape %s and dtype %s", v->name,
                      nbop_sstr(v->rank, v->shape), nb_dtype_name(v->dtype), x->rank < 0 ? "<unknown>" : nbop_tstr(x),
                      nb_dtype_name(x->dtype));
  return (assign_kind)(intptr_t)k->def->impl != ASSIGN_SET ? nbop_kcheck_dtype(k, 0, NBOP_M_NUM) : NB_OK;
}

#define ADD_LOOP(T, U, op)                                          \
  do {                                                              \
    T *restrict d = dst;                                            \
    const T *restrict s = src;                                      \
    for (int64_t i = 0; i < n; i++) d[i] = (T)((U)d[i] op(U) s[i]); \
  } while (0)

/* dst op= src over n elements; integers wrap (through unsigned types). */
static void add_into(nb_dtype t, bool subtract, void *dst, const void *src, int64_t n) {
  switch (t) {
    case NB_F32:
      if (subtract)
        ADD_LOOP(float, float, -);
      else
        ADD_LOOP(float, float, +);
      break;
    case NB_F64:
      if (subtract)
        ADD_LOOP(double, double, -);
      else
        ADD_LOOP(double, double, +);
      break;
    case NB_I32:
      if (subtract)
        ADD_LOOP(int32_t, uint32_t, -);
      else
        ADD_LOOP(int32_t, uint32_t, +);
      break;
    case NB_I64:
      if (subtract)
        ADD_LOOP(int64_t, uint64_t, -);
      else
        ADD_LOOP(int64_t, uint64_t, +);
      break;
    case NB_BOOL: break; /* refused by assign_validate */
  }
}

static nb_code assign_kernel(nbop_kargs *k) {
  nb_variable *v = attr_variable(k);
  assign_kind kind = (assign_kind)(intptr_t)k->def->impl;
  void *dst = nbcore_variable_writable(k->ctx, v, kind != ASSIGN_SET);
  if (!dst) return k->ctx->status;
  const void *src = nbcore_tdata(k->in[0]);
  if (kind == ASSIGN_SET)
    memcpy(dst, src, (size_t)v->size * nb_dtype_size(v->dtype));
  else
    add_into(v->dtype, kind == ASSIGN_SUB, dst, src, v->size);
  nbcore_variable_share_into(k->ctx, k->res[0], v);
  return NB_OK;
}

/* ResourceScatterAdd/Sub: updates has shape indices.shape + the variable's dims 1.. (TF
   also broadcasts a scalar update; nabla does not). Unknown dims and ranks fit. */
static nb_code scatter_validate(nbop_kargs *k) {
  nb_variable *v;
  nb_code code = check_variable(k, &v);
  if (!code) code = nbop_kcheck_dtype(k, 0, NBOP_M_INT);
  if (!code) code = nbop_kcheck_dtype(k, 1, NBOP_M_NUM);
  if (code) return code;
  const nb_tensor *idx = k->in[0], *up = k->in[1];
  if (v->rank == 0) return nbop_kfail(k, NB_SHAPE, "variable '%s' is a scalar; scatter updates need rows", v->name);
  if (up->dtype != v->dtype)
    return nbop_kfail(k, NB_DTYPE, "updates have dtype %s; variable '%s' has dtype %s", nb_dtype_name(up->dtype),
                      v->name, nb_dtype_name(v->dtype));
  bool fits = idx->rank < 0 || up->rank < 0 || up->rank == idx->rank + v->rank - 1;
  for (int d = 0; fits && idx->rank >= 0 && up->rank >= 0 && d < up->rank; d++) {
    int64_t want = d < idx->rank ? idx->shape[d] : v->shape[d - idx->rank + 1];
    fits = up->shape[d] < 0 || want < 0 || up->shape[d] == want;
  }
  if (!fits)
    return nbop_kfail(k, NB_SHAPE, "updates %s must have shape indices.shape %s + variable '%s' row shape %s",
                      nbop_tstr(up), nbop_tstr(idx), v->name, nbop_sstr(v->rank - 1, v->shape + 1));
  return NB_OK;
}

/* Rows one after another: repeated indices accumulate, as TF's. */
static nb_code scatter_kernel(nbop_kargs *k) {
  nb_variable *v = attr_variable(k);
  const nb_tensor *indices = k->in[0];
  nb_code code = nbop_kcheck_rows(k, indices, v);
  if (code) return code;
  char *dst = nbcore_variable_writable(k->ctx, v, true);
  if (!dst) return k->ctx->status;
  int64_t rows = v->shape[0], row = rows ? v->size / rows : 0;
  size_t row_bytes = (size_t)row * nb_dtype_size(v->dtype);
  const char *src = nbcore_tdata(k->in[1]);
  bool subtract = (assign_kind)(intptr_t)k->def->impl == ASSIGN_SUB;
  for (int64_t i = 0; i < indices->size; i++)
    add_into(v->dtype, subtract, dst + (size_t)nbop_index_at(indices, i) * row_bytes, src + (size_t)i * row_bytes, row);
  nbcore_variable_share_into(k->ctx, k->res[0], v);
  return NB_OK;
}

#define VAR_ATTRS \
  .nattrs = 2, .attrs = {{"dtype", NB_ATTR_TYPE, {.type = NB_F32}, true}, {"_variable", NB_ATTR_INT, {.i = 0}, true}}
#define ASSIGN_OP(op_name, kind)                                                                      \
  {                                                                                                   \
    .name = op_name, .nin = 1, .nout = 1, .alias = -1, .stateful = true, .any_rank = true, VAR_ATTRS, \
    .validate = assign_validate, .infer = variable_infer, .kernel = assign_kernel,                    \
    .impl = (const void *)(intptr_t)(kind)                                                            \
  }

static nbop_def variable_ops[] = {
    {.name = "ReadVariableOp",
     .nin = 0,
     .nout = 1,
     .alias = -1,
     .stateful = true,
     VAR_ATTRS,
     .validate = read_validate,
     .infer = variable_infer,
     .kernel = read_kernel},
    ASSIGN_OP("AssignVariableOp", ASSIGN_SET),
    ASSIGN_OP("AssignAddVariableOp", ASSIGN_ADD),
    ASSIGN_OP("AssignSubVariableOp", ASSIGN_SUB),
    {.name = "ResourceScatterAdd",
     .nin = 2,
     .nout = 1,
     .alias = -1,
     .stateful = true,
     .any_rank = true,
     VAR_ATTRS,
     .validate = scatter_validate,
     .infer = variable_infer,
     .kernel = scatter_kernel,
     .impl = (const void *)(intptr_t)ASSIGN_ADD},
    {.name = "ResourceScatterSub",
     .nin = 2,
     .nout = 1,
     .alias = -1,
     .stateful = true,
     .any_rank = true,
     VAR_ATTRS,
     .validate = scatter_validate,
     .infer = variable_infer,
     .kernel = scatter_kernel,
     .impl = (const void *)(intptr_t)ASSIGN_SUB},
};

nbop_family nbop_variable_family(void) {
  return (nbop_family){variable_ops, sizeof variable_ops / sizeof *variable_ops};
}
