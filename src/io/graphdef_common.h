/* What GraphDef import and export share: TF's DataType numbers of nabla's dtypes, shapes
   and TensorProto values (src/io/proto/tensor.proto). */
#ifndef NBIO_GRAPHDEF_COMMON_H
#define NBIO_GRAPHDEF_COMMON_H

#include "../core/core.h"
#include "tensor.pb-c.h"

/* The most elements a value not stored in the file may have (a TensorProto's repeated last
   value, a variable's zeros): 2^26, 256 MiB of float32. */
#define NBIO_MAX_COMPACT_ELEMENTS ((int64_t)1 << 26)

/* TF's DataType of t (DT_FLOAT 1, DT_DOUBLE 2, DT_INT32 3, DT_INT64 9, DT_BOOL 10). */
int nbio_dtype_to_tf(nb_dtype t);
/* nabla's dtype of TF's DataType tf (its _REF variant, tf + 100, too); false for the others. */
bool nbio_dtype_from_tf(int tf, nb_dtype *t);
/* TF's name of DataType tf ("half", "string", ...) for messages; "DataType <n>" when unknown
   (a thread-local buffer). */
const char *nbio_tf_dtype_name(int tf);
/* s as *rank (-1: unknown rank) and dims[0..*rank) (-1: unknown): false when the rank passes
   NB_MAX_RANK or a dim is below -1. s NULL: unknown rank. */
bool nbio_shape_from_proto(const Nbpb__TensorShape *s, int *rank, int64_t *dims);
/* p's value as a concrete tensor of eager context c (the caller's; its scope). Errors on c,
   naming who: NB_DTYPE for a dtype nabla lacks, NB_CORRUPT for a bad shape or a value of the
   wrong size, NB_UNIMPLEMENTED for a repeated value of more than NBIO_MAX_COMPACT_ELEMENTS. */
nb_tensor *nbio_tensor_from_proto(nb_ctx *c, const Nbpb__TensorProto *p, const char *who);

#endif
