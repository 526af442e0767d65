/* TensorFlow's dtypes, shapes, tensors and attr values as protobuf-c messages, for the
   GraphDef reader and writer (graphdef_common.h). */
#include "graphdef_common.h"

#include <stdlib.h>
#include <string.h>

/* TF's DataType numbers of nabla's dtypes. */
static const int tf_dtypes[] = {[NB_F32] = NBIO_TF_FLOAT,
                                [NB_F64] = NBIO_TF_DOUBLE,
                                [NB_I32] = NBIO_TF_INT32,
                                [NB_I64] = NBIO_TF_INT64,
                                [NB_BOOL] = NBIO_TF_BOOL};

int nbio_tf_dtype(nb_dtype t) { return (unsigned)t <= NB_BOOL ? tf_dtypes[t] : 0; }

bool nbio_dtype_from_tf(int tf, nb_dtype *t) {
  for (int i = 0; i < (int)(sizeof tf_dtypes / sizeof *tf_dtypes); i++)
    if (tf_dtypes[i] == tf) return *t = (nb_dtype)i, true;
  return false;
}

static void *zalloc(nbcore_arena *a, size_t bytes) {
  void *p = nbcore_arena_alloc(a, bytes ? bytes : 1);
  if (p) memset(p, 0, bytes ? bytes : 1);
  return p;
}

Nbpb__TensorShape *nbio_shape_proto(nbcore_arena *a, int rank, const int64_t *dims) {
  Nbpb__TensorShape *s = zalloc(a, sizeof *s);
  if (!s) return NULL;
  nbpb__tensor_shape__init(s);
  if (rank < 0) {
    s->unknown_rank = true;
    return s;
  }
  Nbpb__TensorShapeDim *d = zalloc(a, (size_t)rank * sizeof *d);
  s->dim = zalloc(a, (size_t)rank * sizeof *s->dim);
  if (!d || !s->dim) return NULL;
  for (int i = 0; i < rank; i++) {
    nbpb__tensor_shape_dim__init(&d[i]);
    d[i].size = dims[i];
    s->dim[i] = &d[i];
  }
  s->n_dim = (size_t)rank;
  return s;
}

bool nbio_shape_from_proto(const Nbpb__TensorShape *s, int *rank, int64_t *dims) {
  if (!s) return *rank = 0, true; /* an absent shape is a scalar's */
  if (s->unknown_rank) return *rank = -1, true;
  if (s->n_dim > NB_MAX_RANK) return false;
  *rank = (int)s->n_dim;
  for (size_t i = 0; i < s->n_dim; i++) dims[i] = s->dim[i]->size < 0 ? -1 : s->dim[i]->size;
  return true;
}

/* tensor_content is little-endian, as nabla's buffers are on the machines it builds for. */
Nbpb__TensorProto *nbio_tensor_proto(nbcore_arena *a, const nb_tensor *x) {
  Nbpb__TensorProto *p = zalloc(a, sizeof *p);
  if (!p) return NULL;
  nbpb__tensor_proto__init(p);
  p->dtype = nbio_tf_dtype(x->dtype);
  p->tensor_shape = nbio_shape_proto(a, x->rank, x->shape);
  size_t bytes = (size_t)x->size * nb_dtype_size(x->dtype);
  uint8_t *data = zalloc(a, bytes);
  if (!p->tensor_shape || !data) return NULL;
  if (bytes) memcpy(data, nb_data(x), bytes);
  p->tensor_content.data = data;
  p->tensor_content.len = bytes;
  return p;
}

/* The typed field of p for its dtype: its element count and a pointer to its array. */
static const void *typed_values(const Nbpb__TensorProto *p, nb_dtype t, size_t *n) {
  switch (t) {
    case NB_F32: return *n = p->n_float_val, (const void *)p->float_val;
    case NB_F64: return *n = p->n_double_val, (const void *)p->double_val;
    case NB_I32: return *n = p->n_int_val, (const void *)p->int_val;
    case NB_I64: return *n = p->n_int64_val, (const void *)p->int64_val;
    default: return *n = p->n_bool_val, (const void *)p->bool_val; /* protobuf_c_boolean: int */
  }
}

/* dst[i] = element min(i, n - 1) of the typed field vals (n > 0), converted to t's layout. */
static void expand_typed(void *dst, nb_dtype t, const void *vals, size_t n, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    size_t j = (size_t)i < n ? (size_t)i : n - 1;
    switch (t) {
      case NB_F32: ((float *)dst)[i] = ((const float *)vals)[j]; break;
      case NB_F64: ((double *)dst)[i] = ((const double *)vals)[j]; break;
      case NB_I32: ((int32_t *)dst)[i] = ((const int32_t *)vals)[j]; break;
      case NB_I64: ((int64_t *)dst)[i] = ((const int64_t *)vals)[j]; break;
      default: ((uint8_t *)dst)[i] = ((const protobuf_c_boolean *)vals)[j] != 0; break;
    }
  }
}

nb_tensor *nbio_tensor_from_proto(nb_ctx *c, const Nbpb__TensorProto *p, const char *who) {
  nb_dtype t;
  int rank;
  int64_t dims[NB_MAX_RANK], count = 1;
  if (!nbio_dtype_from_tf(p->dtype, &t))
    return nbcore_fail(c, NB_DTYPE, "%s: tensor of TensorFlow DataType %d, which nabla lacks", who, p->dtype), NULL;
  if (!nbio_shape_from_proto(p->tensor_shape, &rank, dims) || rank < 0)
    return nbcore_fail(c, NB_CORRUPT, "%s: tensor shape of unknown rank or rank above %d", who, NB_MAX_RANK), NULL;
  for (int d = 0; d < rank; d++) {
    if (dims[d] < 0 || (dims[d] && count > INT64_MAX / dims[d]))
      return nbcore_fail(c, NB_CORRUPT, "%s: tensor dim %d is %lld", who, d, (long long)dims[d]), NULL;
    count *= dims[d];
  }
  size_t bytes = (size_t)count * nb_dtype_size(t), n;
  const void *vals = typed_values(p, t, &n);
  if (p->tensor_content.len && p->tensor_content.len != bytes)
    return nbcore_fail(c, NB_CORRUPT, "%s: tensor_content holds %zu bytes, the shape needs %zu", who,
                       p->tensor_content.len, bytes),
           NULL;
  if (n > (size_t)count)
    return nbcore_fail(c, NB_CORRUPT, "%s: %zu values for a tensor of %lld elements", who, n, (long long)count), NULL;
  void *data = calloc(bytes ? bytes : 1, 1);
  if (!data) return nbcore_fail(c, NB_NOMEM, "%s: out of memory for a tensor of %zu bytes", who, bytes), NULL;
  if (p->tensor_content.len)
    memcpy(data, p->tensor_content.data, bytes);
  else if (n)
    expand_typed(data, t, vals, n, count);
  nb_tensor *x = nb_tensor_from(c, t, rank, dims, data);
  free(data);
  return x;
}

/* ---- AttrValue ------------------------------------------------------------------------ */

static Nbpb__AttrValue *attr_new(nbcore_arena *a, Nbpb__AttrValue__ValueCase which) {
  Nbpb__AttrValue *v = zalloc(a, sizeof *v);
  if (!v) return NULL;
  nbpb__attr_value__init(v);
  v->value_case = which;
  return v;
}

Nbpb__AttrValue *nbio_attr_int(nbcore_arena *a, int64_t i) {
  Nbpb__AttrValue *v = attr_new(a, NBPB__ATTR_VALUE__VALUE_I);
  if (v) v->i = i;
  return v;
}

Nbpb__AttrValue *nbio_attr_float(nbcore_arena *a, double f) {
  Nbpb__AttrValue *v = attr_new(a, NBPB__ATTR_VALUE__VALUE_F);
  if (v) v->f = (float)f;
  return v;
}

Nbpb__AttrValue *nbio_attr_bool(nbcore_arena *a, bool b) {
  Nbpb__AttrValue *v = attr_new(a, NBPB__ATTR_VALUE__VALUE_B);
  if (v) v->b = b;
  return v;
}

Nbpb__AttrValue *nbio_attr_str(nbcore_arena *a, const char *s) {
  Nbpb__AttrValue *v = attr_new(a, NBPB__ATTR_VALUE__VALUE_S);
  if (!v) return NULL;
  v->s.data = (uint8_t *)(uintptr_t)s;
  v->s.len = strlen(s);
  return v;
}

Nbpb__AttrValue *nbio_attr_type(nbcore_arena *a, int tf_type) {
  Nbpb__AttrValue *v = attr_new(a, NBPB__ATTR_VALUE__VALUE_TYPE);
  if (v) v->type = tf_type;
  return v;
}

Nbpb__AttrValue *nbio_attr_shape(nbcore_arena *a, int rank, const int64_t *dims) {
  Nbpb__AttrValue *v = attr_new(a, NBPB__ATTR_VALUE__VALUE_SHAPE);
  if (v && !(v->shape = nbio_shape_proto(a, rank, dims))) return NULL;
  return v;
}

Nbpb__AttrValue *nbio_attr_tensor(nbcore_arena *a, const nb_tensor *x) {
  Nbpb__AttrValue *v = attr_new(a, NBPB__ATTR_VALUE__VALUE_TENSOR);
  if (v && !(v->tensor = nbio_tensor_proto(a, x))) return NULL;
  return v;
}

Nbpb__AttrValue *nbio_attr_func(nbcore_arena *a, const char *name) {
  Nbpb__AttrValue *v = attr_new(a, NBPB__ATTR_VALUE__VALUE_FUNC);
  Nbpb__NameAttrList *f = zalloc(a, sizeof *f);
  if (!v || !f) return NULL;
  nbpb__name_attr_list__init(f);
  f->name = (char *)(uintptr_t)name;
  v->func = f;
  return v;
}

Nbpb__AttrValue *nbio_attr_list(nbcore_arena *a) {
  Nbpb__AttrValue *v = attr_new(a, NBPB__ATTR_VALUE__VALUE_LIST);
  Nbpb__AttrValue__ListValue *l = zalloc(a, sizeof *l);
  if (!v || !l) return NULL;
  nbpb__attr_value__list_value__init(l);
  v->list = l;
  return v;
}

Nbpb__AttrValue *nbio_attr_ints(nbcore_arena *a, const int64_t *vals, int n) {
  Nbpb__AttrValue *v = nbio_attr_list(a);
  int64_t *i = zalloc(a, (size_t)n * sizeof *i);
  if (!v || !i) return NULL;
  if (n) memcpy(i, vals, (size_t)n * sizeof *i);
  v->list->i = i;
  v->list->n_i = (size_t)n;
  return v;
}

Nbpb__AttrValue *nbio_attr_floats(nbcore_arena *a, const double *vals, int n) {
  Nbpb__AttrValue *v = nbio_attr_list(a);
  float *f = zalloc(a, (size_t)n * sizeof *f);
  if (!v || !f) return NULL;
  for (int k = 0; k < n; k++) f[k] = (float)vals[k];
  v->list->f = f;
  v->list->n_f = (size_t)n;
  return v;
}

Nbpb__AttrValue *nbio_attr_types(nbcore_arena *a, const int *tf_types, int n) {
  Nbpb__AttrValue *v = nbio_attr_list(a);
  int32_t *t = zalloc(a, (size_t)n * sizeof *t);
  if (!v || !t) return NULL;
  for (int k = 0; k < n; k++) t[k] = tf_types[k];
  v->list->type = t;
  v->list->n_type = (size_t)n;
  return v;
}
