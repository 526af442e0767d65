/* TensorFlow's dtypes, shapes, tensors and attr values as protobuf-c messages, for the
   GraphDef reader and writer (graphdef_common.h). */
#include "graphdef_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* TF's DataType numbers of nabla's dtypes. */
static const int tf_dtypes[] = {[NB_F32] = NBIO_TF_FLOAT,
                                [NB_F64] = NBIO_TF_DOUBLE,
                                [NB_I32] = NBIO_TF_INT32,
                                [NB_I64] = NBIO_TF_INT64,
                                [NB_BOOL] = NBIO_TF_BOOL};

int nbio_tf_dtype(nb_dtype t) { return (unsigned)t <= NB_BOOL ? tf_dtypes[t] : 0; }

enum { TF_REF_OFFSET = 100 }; /* DT_FLOAT_REF is DT_FLOAT + 100, and so on */

bool nbio_dtype_from_tf(int tf, nb_dtype *t) {
  if (tf > TF_REF_OFFSET) tf -= TF_REF_OFFSET;
  for (int i = 0; i < (int)(sizeof tf_dtypes / sizeof *tf_dtypes); i++)
    if (tf_dtypes[i] == tf) return *t = (nb_dtype)i, true;
  return false;
}

const char *nbio_tf_dtype_name(int tf) {
  static const char *const names[] = {"invalid",    "float",  "double",    "int32",   "uint8",   "int16",
                                      "int8",       "string", "complex64", "int64",   "bool",    "qint8",
                                      "quint8",     "qint32", "bfloat16",  "qint16",  "quint16", "uint16",
                                      "complex128", "half",   "resource",  "variant", "uint32",  "uint64"};
  static _Thread_local char buf[32];
  int base = tf > TF_REF_OFFSET ? tf - TF_REF_OFFSET : tf;
  if (base >= 0 && base < (int)(sizeof names / sizeof *names)) return names[base];
  snprintf(buf, sizeof buf, "DataType %d", tf);
  return buf;
}

bool nbio_shape_from_proto(const Nbpb__TensorShape *s, int *rank, int64_t *dims) {
  *rank = -1;
  if (!s || s->unknown_rank) return true;
  if (s->n_dim > NB_MAX_RANK) return false;
  for (size_t i = 0; i < s->n_dim; i++) {
    if (s->dim[i]->size < -1) return false;
    dims[i] = s->dim[i]->size;
  }
  *rank = (int)s->n_dim;
  return true;
}

/* The typed field of p holding dtype t's values: its length, and element i as the
   tensor's element type written to dst. */
static size_t typed_count(const Nbpb__TensorProto *p, nb_dtype t) {
  switch (t) {
    case NB_F32: return p->n_float_val;
    case NB_F64: return p->n_double_val;
    case NB_I32: return p->n_int_val;
    case NB_I64: return p->n_int64_val;
    case NB_BOOL: return p->n_bool_val;
  }
  return 0;
}

static void typed_store(const Nbpb__TensorProto *p, nb_dtype t, size_t i, void *dst) {
  switch (t) {
    case NB_F32: memcpy(dst, &p->float_val[i], 4); break;
    case NB_F64: memcpy(dst, &p->double_val[i], 8); break;
    case NB_I32: memcpy(dst, &p->int_val[i], 4); break;
    case NB_I64: memcpy(dst, &p->int64_val[i], 8); break;
    case NB_BOOL: *(uint8_t *)dst = p->bool_val[i] ? 1 : 0; break;
  }
}

/* Fills data (n elements of t) from p: the raw bytes (little-endian, as TF writes them),
   else the typed field, whose last element repeats to the end (TF's compact form). */
static nb_code fill_value(nb_ctx *c, const Nbpb__TensorProto *p, nb_dtype t, int64_t n, uint8_t *data,
                          const char *who) {
  size_t esize = nb_dtype_size(t);
  if (p->tensor_content.len) {
    if (p->tensor_content.len != (size_t)n * esize)
      return nbcore_fail(c, NB_CORRUPT, "%s: tensor_content has %zu bytes, a %s tensor of %lld elements takes %zu", who,
                         p->tensor_content.len, nb_dtype_name(t), (long long)n, (size_t)n * esize);
    if (t == NB_BOOL)
      for (int64_t i = 0; i < n; i++) data[i] = p->tensor_content.data[i] != 0;
    else
      memcpy(data, p->tensor_content.data, (size_t)n * esize);
    return NB_OK;
  }
  size_t m = typed_count(p, t);
  if (m > (size_t)n)
    return nbcore_fail(c, NB_CORRUPT, "%s: %zu values for a tensor of %lld elements", who, m, (long long)n);
  for (int64_t i = 0; m && i < n; i++) typed_store(p, t, (size_t)i < m ? (size_t)i : m - 1, data + (size_t)i * esize);
  return NB_OK; /* no values: zeros */
}

nb_tensor *nbio_tensor_from_proto(nb_ctx *c, const Nbpb__TensorProto *p, const char *who) {
  nb_dtype t;
  if (!nbio_dtype_from_tf(p->dtype, &t)) {
    nbcore_fail(c, NB_DTYPE, "%s: dtype %s is not one of nabla's (float32, float64, int32, int64, bool)", who,
                nbio_tf_dtype_name(p->dtype));
    return NULL;
  }
  int rank;
  int64_t dims[NB_MAX_RANK], n;
  if (!nbio_shape_from_proto(p->tensor_shape, &rank, dims) || rank < 0 || !nbcore_dims_known(rank, dims) ||
      !nbcore_shape_checked_size(rank, dims, &n) || (uint64_t)n > ((uint64_t)1 << 40)) {
    nbcore_fail(c, NB_CORRUPT, "%s: the tensor's shape is not a valid, fully known shape of rank <= %d", who,
                NB_MAX_RANK);
    return NULL;
  }
  if (!p->tensor_content.len && n > NBIO_MAX_COMPACT_ELEMENTS) {
    nbcore_fail(c, NB_UNIMPLEMENTED, "%s: a repeated value of %lld elements (nabla expands at most %lld)", who,
                (long long)n, (long long)NBIO_MAX_COMPACT_ELEMENTS);
    return NULL;
  }
  nb_tensor *x = nb_tensor_from(c, t, rank, dims, NULL);
  if (x && fill_value(c, p, t, n, nbcore_tdata(x), who)) {
    nb_tensor_free(x);
    return NULL;
  }
  return x;
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
