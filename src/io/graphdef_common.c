/* TF's DataType numbers, shapes and TensorProto values, for GraphDef import and export. */
#include "graphdef_common.h"

#include <stdio.h>
#include <string.h>

enum { TF_REF_OFFSET = 100 }; /* DT_FLOAT_REF is DT_FLOAT + 100, and so on */

static const int tf_dtypes[] = {[NB_F32] = 1, [NB_F64] = 2, [NB_I32] = 3, [NB_I64] = 9, [NB_BOOL] = 10};

int nbio_dtype_to_tf(nb_dtype t) { return tf_dtypes[t]; }

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
