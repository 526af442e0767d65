/* What TensorFlow's GraphDef reader and writer share: nabla's dtypes as TF's DataType
   numbers, shapes as TensorShapeProto, and concrete tensors as TensorProto (both ways).
   Messages built here point into an arena, which frees them together. */
#ifndef NBIO_GRAPHDEF_COMMON_H
#define NBIO_GRAPHDEF_COMMON_H

#include "../core/core.h"

#include "graph.pb-c.h"

/* The most elements a value not stored in the file may have (a TensorProto's repeated last
   value, a variable's zeros): 2^26, 256 MiB of float32. */
#define NBIO_MAX_COMPACT_ELEMENTS ((int64_t)1 << 26)

/* TF's DataType numbers the writer uses beside nabla's dtypes. */
enum {
  NBIO_TF_FLOAT = 1,
  NBIO_TF_DOUBLE = 2,
  NBIO_TF_INT32 = 3,
  NBIO_TF_INT64 = 9,
  NBIO_TF_BOOL = 10,
  NBIO_TF_RESOURCE = 20,
  NBIO_TF_VARIANT = 21
};

/* TF's DataType number of t. */
int nbio_tf_dtype(nb_dtype t);
/* nabla's dtype of TF's DataType tf (its _REF variant, tf + 100, too); false for the others. */
bool nbio_dtype_from_tf(int tf, nb_dtype *t);
/* TF's name of DataType tf ("half", "string", ...) for messages; "DataType <n>" when unknown
   (a thread-local buffer). */
const char *nbio_tf_dtype_name(int tf);

/* A TensorShapeProto of rank dims (rank -1: unknown_rank; dims -1: unknown) in a; NULL
   when out of memory. */
Nbpb__TensorShape *nbio_shape_proto(nbcore_arena *a, int rank, const int64_t *dims);
/* s as *rank (-1: unknown rank) and dims[0..*rank) (-1: unknown): false when the rank passes
   NB_MAX_RANK or a dim is below -1. s NULL: unknown rank. */
bool nbio_shape_from_proto(const Nbpb__TensorShape *s, int *rank, int64_t *dims);

/* A TensorProto of concrete x in a: dtype, shape and its little-endian bytes as
   tensor_content (bool one byte per element, as TF). NULL when out of memory. */
Nbpb__TensorProto *nbio_tensor_proto(nbcore_arena *a, const nb_tensor *x);
/* p's value as a concrete tensor of eager context c (the caller's; its scope). Errors on c,
   naming who: NB_DTYPE for a dtype nabla lacks, NB_CORRUPT for a bad shape or a value of the
   wrong size, NB_UNIMPLEMENTED for a repeated value of more than NBIO_MAX_COMPACT_ELEMENTS. */
nb_tensor *nbio_tensor_from_proto(nb_ctx *c, const Nbpb__TensorProto *p, const char *who);

/* AttrValue constructors in a (NULL when out of memory). */
Nbpb__AttrValue *nbio_attr_int(nbcore_arena *a, int64_t v);
Nbpb__AttrValue *nbio_attr_float(nbcore_arena *a, double v);
Nbpb__AttrValue *nbio_attr_bool(nbcore_arena *a, bool v);
Nbpb__AttrValue *nbio_attr_str(nbcore_arena *a, const char *v);
Nbpb__AttrValue *nbio_attr_type(nbcore_arena *a, int tf_type);
Nbpb__AttrValue *nbio_attr_shape(nbcore_arena *a, int rank, const int64_t *dims);
Nbpb__AttrValue *nbio_attr_tensor(nbcore_arena *a, const nb_tensor *x);
Nbpb__AttrValue *nbio_attr_func(nbcore_arena *a, const char *name);
/* An empty list(...) attr; fill its ListValue's arrays. */
Nbpb__AttrValue *nbio_attr_list(nbcore_arena *a);
Nbpb__AttrValue *nbio_attr_ints(nbcore_arena *a, const int64_t *v, int n);
Nbpb__AttrValue *nbio_attr_floats(nbcore_arena *a, const double *v, int n);
/* list(type) of TF type numbers. */
Nbpb__AttrValue *nbio_attr_types(nbcore_arena *a, const int *tf_types, int n);

#endif
