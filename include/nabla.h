/*
 * nabla: TensorFlow's automatic differentiation system as a C11 library. The manual is
 * docs/ in the source tree; this header is the contract.
 *
 * Contents (the order a user learns it):
 *   1. Contexts and tensors     names, contexts and scopes, tensors, IndexedSlices
 *   2. Ops                      attrs, the generic nb_op, one typed wrapper per TF op,
 *                               user-defined ops and op libraries, collectives
 *   3. Graphs and sessions      graph contexts, names, placeholders, nb_run, the optimizer
 *   4. Gradients                nb_gradients, forward mode, the forward accumulator, gradient
 *                               functions, custom gradients, host callbacks (nb_py_func)
 *   5. The eager tape           tf.GradientTape, Jacobians, watching variables
 *   6. Control flow, functions  nb_while, nb_cond, function graphs
 *   7. Variables, optimizers    tf.Variable, Keras's optimizers, schedules, clipping,
 *                               data-parallel training over MPI (nb_dist_*)
 *   8. Data and files           IDX files and datasets, .npy, TF checkpoints, GraphDef,
 *                               SavedModel
 *   9. Checking                 gradcheck, the non-differentiable finder
 *
 * Errors (every call follows one of three conventions; nothing aborts, exits or prints):
 *   - Calls taking a context (nb_ctx *c) record the first error on c, with a message naming
 *     the op, node and shapes (nb_status, nb_error). The status is sticky, like TF's Scope:
 *     later op calls on c do nothing and return NULL or the code until nb_clear_error, so
 *     builder code checks once at the end. A failed call returns NULL or an nb_code.
 *   - Sessions: nb_run returns a code, and nb_session_error(s) says which node failed and
 *     why (each run starts with an empty message).
 *   - Context-free calls (nb_read, nb_item, nb_register_gradient, nb_dataset_shuffle,
 *     nb_optimizer_set_schedule, nb_lr_schedule_value, ...) return a code, NULL, NaN or -1
 *     as their comment says. Tape calls record errors on the tape's context.
 *
 * Ownership: a tensor handle belongs to the context and scope it was made in;
 * nb_scope_begin/nb_scope_end free what a scope made except the tensors kept, and
 * nb_ctx_free frees everything. nb_tensor_free releases one handle early; freeing a handle
 * twice does nothing and an op given a released handle fails with NB_INVALID. Buffers are
 * reference counted: views (Reshape, Identity, ExpandDims, ...) share their input's.
 * Session results, graphs, sessions, variables, optimizers and datasets belong to the
 * caller (their _free calls).
 *
 * Threads: a context and its tensors are used by one thread at a time; different contexts
 * may run on different threads at once, and a tensor of one may be read by another while
 * nothing frees it. Kernels use nb_ctx_set_threads threads inside one op.
 *
 * Ops are TensorFlow's (tensorflow/core/ops): type names, input order, attrs, defaults.
 * Each has a typed wrapper nb_<snake_case_name>, and every op is reachable through nb_op.
 *
 *     nb_ctx *c = nb_eager_new();
 *     nb_tensor *x = nb_tensor_from(c, NB_F32, 2, (int64_t[]){2, 3}, values);
 *     nb_tensor *s = nb_sum(c, nb_tanh(c, x), NULL, 0, false);
 *     if (nb_status(c) != NB_OK) fprintf(stderr, "%s\n", nb_error(c));
 *     nb_ctx_free(c);
 */
#ifndef NABLA_H
#define NABLA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#if defined(NB_BUILDING) && defined(__GNUC__)
#pragma GCC visibility push(default) /* the library is built with hidden visibility */
#endif

#define NB_VERSION_MAJOR 0
#define NB_VERSION_MINOR 1
#define NB_VERSION_PATCH 0

/* The largest tensor rank. */
#define NB_MAX_RANK 8

typedef enum { NB_F32, NB_F64, NB_I32, NB_I64, NB_BOOL } nb_dtype;
typedef enum {
  NB_OK,
  NB_INVALID,
  NB_SHAPE,
  NB_DTYPE,
  NB_NOT_FOUND,
  NB_NO_GRADIENT,
  NB_NOMEM,
  NB_IO,
  NB_CORRUPT,
  NB_UNIMPLEMENTED,
  NB_INTERNAL
} nb_code;

typedef struct nb_ctx nb_ctx;
typedef struct nb_tensor nb_tensor;
typedef struct nb_graph nb_graph;
typedef struct nb_session nb_session;
typedef struct nb_fwd_op nb_fwd_op;
typedef struct nb_tape nb_tape;
typedef struct nb_variable nb_variable;

/* ==== 1. Contexts and tensors ============================================================= */

/* ---- names ---------------------------------------------------------------- */
const char *nb_code_name(nb_code code); /* "NB_SHAPE", ... */
const char *nb_dtype_name(nb_dtype t);  /* TF's names: "float32", "int64", "bool" */
size_t nb_dtype_size(nb_dtype t);       /* bytes per element; bool is one byte */
const char *nb_version(void);           /* "0.1.0" */
/* One "; "-separated line saying what this build runs on (compiler, CPU, libraries) and a
   warning= field for a known slow path. Static storage: the same pointer on every call. */
const char *nb_build_info(void);

/* ---- contexts --------------------------------------------------------------- */
nb_ctx *nb_eager_new(void);            /* NULL only when out of memory */
nb_code nb_status(const nb_ctx *c);    /* first error since the last clear */
const char *nb_error(const nb_ctx *c); /* its message; "" when NB_OK */
/* Records an error on c (first one wins), e.g. from a gradient function; returns code. */
nb_code nb_set_error(nb_ctx *c, nb_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void nb_clear_error(nb_ctx *c);
void nb_ctx_free(nb_ctx *c); /* frees every tensor made in c */
/* Threads the kernels of one op may use; default: all cores. */
void nb_ctx_set_threads(nb_ctx *c, int n);
int nb_ctx_threads(const nb_ctx *c);

void nb_scope_begin(nb_ctx *c);
/* Frees the tensors made since the matching nb_scope_begin, except keep[0..nkeep),
   which move to the enclosing scope. keep entries may be NULL. Without a matching begin
   (inside a callback: one the callback made), NB_INVALID and nothing is freed. */
void nb_scope_end(nb_ctx *c, nb_tensor *const *keep, int nkeep);

/* ---- tensors ------------------------------------------------------------------ */
/* Copies rank/shape/data (row-major; bool is one byte per element, 0 or 1).
   data NULL gives zeros. */
nb_tensor *nb_tensor_from(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape, const void *data);
nb_tensor *nb_scalar(nb_ctx *c, nb_dtype t, double v);
nb_dtype nb_dtype_of(const nb_tensor *x);
int nb_rank(const nb_tensor *x);
const int64_t *nb_shape(const nb_tensor *x);
int64_t nb_num_elements(const nb_tensor *x);
/* Copies the data out; bytes must equal num_elements * dtype size. */
nb_code nb_read(const nb_tensor *x, void *dst, size_t bytes);
/* Read-only view of a concrete tensor's data; valid while the tensor lives (NULL for
   IndexedSlices, which have no dense data: nb_read or nb_densify them). */
const void *nb_data(const nb_tensor *x);
/* Reads element i (row-major) converted to double; NAN if x is NULL or i is out of range. */
double nb_item(const nb_tensor *x, int64_t i);
/* Releases x now (its scope would later); x NULL, already released, or a part of
   IndexedSlices (which its slices release): nothing happens. */
void nb_tensor_free(nb_tensor *x);

/* ---- IndexedSlices (tf.IndexedSlices): sparse gradients -------------------------
   The dense tensor of shape dense_shape that is zero except rows indices[i] += values[i]
   (repeated indices sum): the gradient of an embedding lookup (docs/gradients.md). Ops
   given slices densify them; nb_read and nb_item read the dense value. */
/* values: float [N, dense_shape[1:]]; indices: int32/int64 [N] in [0, dense_shape[0])
   (checked eagerly); dense_shape fully known. The parts belong to the slices handle. */
nb_tensor *nb_indexed_slices(nb_ctx *c, nb_tensor *values, nb_tensor *indices, const int64_t *dense_shape, int rank);
bool nb_is_indexed_slices(const nb_tensor *x);
nb_tensor *nb_indexed_slices_values(const nb_tensor *x);
nb_tensor *nb_indexed_slices_indices(const nb_tensor *x);
/* The parts of a and b concatenated (the sum of two slices of one dense shape). */
nb_tensor *nb_indexed_slices_concat(nb_ctx *c, nb_tensor *a, nb_tensor *b);
/* x as a dense tensor (UnsortedSegmentSum of the parts); x itself when dense. */
nb_tensor *nb_densify(nb_ctx *c, nb_tensor *x);

/* ==== 2. Ops ============================================================================== */

/* ---- op attributes (names and kinds as in TF's op registry) --------------------- */
typedef enum {
  NB_ATTR_INT,
  NB_ATTR_FLOAT,
  NB_ATTR_BOOL,
  NB_ATTR_STR,
  NB_ATTR_INTS,
  NB_ATTR_TYPE,
  NB_ATTR_TENSOR,
  NB_ATTR_FLOATS,
  NB_ATTR_TYPES /* list(float), list(type): user ops' */
} nb_attr_kind;
typedef struct nb_attr {
  const char *name;
  nb_attr_kind kind;
  int n; /* length of v.ints, v.floats, v.types */
  union {
    int64_t i;
    double f;
    bool b;
    const char *s;
    const int64_t *ints; /* borrowed for the duration of the call */
    nb_dtype type;
    nb_tensor *tensor;     /* a concrete tensor, e.g. Const's "value" */
    const double *floats;  /* borrowed, as ints */
    const nb_dtype *types; /* borrowed, as ints */
  } v;
} nb_attr;
nb_attr nb_attr_int(const char *name, int64_t v);
nb_attr nb_attr_float(const char *name, double v);
nb_attr nb_attr_bool(const char *name, bool v);
nb_attr nb_attr_str(const char *name, const char *v);
nb_attr nb_attr_ints(const char *name, const int64_t *v, int n);
nb_attr nb_attr_type(const char *name, nb_dtype v);
nb_attr nb_attr_tensor(const char *name, nb_tensor *v);

/* ---- the generic op entry ------------------------------------------------------- */
/* Runs (or, in a graph context, adds) op `type` with TF's inputs and attrs. Attrs not
   given take TF's defaults. TF's inferred type attrs ("T", "Tidx", "Tshape", ...) may be
   passed and are checked against the inputs. nout must equal the op's output count. */
nb_code nb_op(nb_ctx *c, const char *type, nb_tensor *const *in, int nin, const nb_attr *attrs, int nattrs,
              nb_tensor **out, int nout);

/* ---- ops: one function per TF op ---------------------------------------------------
   All return NULL on error (and set the context's status). Binary ops broadcast like
   NumPy/TF. Axis arguments may be negative (counted from the end). */

/* elementwise binary (f32 f64 i32 i64 unless noted) */
nb_tensor *nb_add(nb_ctx *c, nb_tensor *a, nb_tensor *b);                /* AddV2 */
nb_tensor *nb_sub(nb_ctx *c, nb_tensor *a, nb_tensor *b);                /* Sub */
nb_tensor *nb_mul(nb_ctx *c, nb_tensor *a, nb_tensor *b);                /* Mul */
nb_tensor *nb_real_div(nb_ctx *c, nb_tensor *a, nb_tensor *b);           /* RealDiv; ints: error on /0 */
nb_tensor *nb_pow(nb_ctx *c, nb_tensor *a, nb_tensor *b);                /* Pow */
nb_tensor *nb_squared_difference(nb_ctx *c, nb_tensor *a, nb_tensor *b); /* SquaredDifference */
nb_tensor *nb_maximum(nb_ctx *c, nb_tensor *a, nb_tensor *b);            /* Maximum */
nb_tensor *nb_minimum(nb_ctx *c, nb_tensor *a, nb_tensor *b);            /* Minimum */
/* comparisons -> bool (Equal/NotEqual also take bool) */
nb_tensor *nb_less(nb_ctx *c, nb_tensor *a, nb_tensor *b);
nb_tensor *nb_less_equal(nb_ctx *c, nb_tensor *a, nb_tensor *b);
nb_tensor *nb_greater(nb_ctx *c, nb_tensor *a, nb_tensor *b);
nb_tensor *nb_greater_equal(nb_ctx *c, nb_tensor *a, nb_tensor *b);
nb_tensor *nb_equal(nb_ctx *c, nb_tensor *a, nb_tensor *b);
nb_tensor *nb_not_equal(nb_ctx *c, nb_tensor *a, nb_tensor *b);
/* logical (bool) */
nb_tensor *nb_logical_and(nb_ctx *c, nb_tensor *a, nb_tensor *b);
nb_tensor *nb_logical_or(nb_ctx *c, nb_tensor *a, nb_tensor *b);
nb_tensor *nb_logical_not(nb_ctx *c, nb_tensor *x);
/* SelectV2: cond ? t : e, broadcasting all three */
nb_tensor *nb_select(nb_ctx *c, nb_tensor *cond, nb_tensor *t, nb_tensor *e);

/* elementwise unary (f32 f64; Neg Abs Sign Square Relu also i32 i64) */
nb_tensor *nb_neg(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_exp(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_log(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_log1p(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_sqrt(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_rsqrt(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_reciprocal(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_square(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_abs(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_sign(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_tanh(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_sigmoid(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_relu(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_elu(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_softplus(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_sin(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_cos(nb_ctx *c, nb_tensor *x);

/* TF's fused gradient ops (f32 f64; ReluGrad also i32 i64). Both inputs must have the
   same shape and dtype (no broadcasting); inputs in TF's order. y is the forward output,
   dy the incoming gradient: */
nb_tensor *nb_tanh_grad(nb_ctx *c, nb_tensor *y, nb_tensor *dy);       /* TanhGrad: dy (1 - y^2) */
nb_tensor *nb_sigmoid_grad(nb_ctx *c, nb_tensor *y, nb_tensor *dy);    /* SigmoidGrad: dy y (1 - y) */
nb_tensor *nb_rsqrt_grad(nb_ctx *c, nb_tensor *y, nb_tensor *dy);      /* RsqrtGrad: -dy y^3 / 2 */
nb_tensor *nb_sqrt_grad(nb_ctx *c, nb_tensor *y, nb_tensor *dy);       /* SqrtGrad: dy / (2 y) */
nb_tensor *nb_reciprocal_grad(nb_ctx *c, nb_tensor *y, nb_tensor *dy); /* ReciprocalGrad: -dy y^2 */
/* ReluGrad: gradients * (features > 0) */
nb_tensor *nb_relu_grad(nb_ctx *c, nb_tensor *gradients, nb_tensor *features);
/* EluGrad: outputs < 0 ? gradients * (outputs + 1) : gradients */
nb_tensor *nb_elu_grad(nb_ctx *c, nb_tensor *gradients, nb_tensor *outputs);
/* SoftplusGrad: gradients * sigmoid(features) */
nb_tensor *nb_softplus_grad(nb_ctx *c, nb_tensor *gradients, nb_tensor *features);

nb_tensor *nb_cast(nb_ctx *c, nb_tensor *x, nb_dtype to);    /* Cast: DstT */
nb_tensor *nb_add_n(nb_ctx *c, nb_tensor *const *xs, int n); /* AddN: same shapes */
/* AccumulateNV2 (tf.math.accumulate_n): AddN's sum, with attr "shape" (dims -1: unknown)
   the inputs must fit; here the inputs' static shapes merged (one must have a known rank). */
nb_tensor *nb_accumulate_n(nb_ctx *c, nb_tensor *const *xs, int n);
nb_tensor *nb_identity(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_stop_gradient(nb_ctx *c, nb_tensor *x);
/* PreventGradient: x itself, but differentiating through it (nb_gradients, tapes) fails
   with NB_NO_GRADIENT: "Gradient explicitly disabled. Reason: <message>" and the node.
   Paths cut before it (stop, StopGradient) do not reach it. message NULL: "". */
nb_tensor *nb_prevent_gradient(nb_ctx *c, nb_tensor *x, const char *message);

/* reductions (Sum Mean Max Min Prod: f32 f64 i32 i64). axes == NULL reduces every
   axis (tf.reduce_sum(x)); axes != NULL with naxes == 0 reduces none (TF's empty
   axis input). Repeated axes count once. Empty reductions give TF's identities:
   Sum 0, Prod 1, Max lowest, Min highest, Mean NaN (floats). */
nb_tensor *nb_sum(nb_ctx *c, nb_tensor *x, const int *axes, int naxes, bool keepdims);
nb_tensor *nb_mean(nb_ctx *c, nb_tensor *x, const int *axes, int naxes, bool keepdims);
nb_tensor *nb_max(nb_ctx *c, nb_tensor *x, const int *axes, int naxes, bool keepdims);
nb_tensor *nb_min(nb_ctx *c, nb_tensor *x, const int *axes, int naxes, bool keepdims);
nb_tensor *nb_prod(nb_ctx *c, nb_tensor *x, const int *axes, int naxes, bool keepdims);
/* ArgMax along axis; output_type NB_I32 or NB_I64 (TF's default); first index wins ties. */
nb_tensor *nb_argmax(nb_ctx *c, nb_tensor *x, int axis, nb_dtype output_type);
/* Cumsum, Cumprod along axis (f32 f64 i32 i64; x's shape): exclusive leaves the element
   itself out (the first result is 0 or 1), reverse scans from the end. */
nb_tensor *nb_cumsum(nb_ctx *c, nb_tensor *x, int axis, bool exclusive, bool reverse);
nb_tensor *nb_cumprod(nb_ctx *c, nb_tensor *x, int axis, bool exclusive, bool reverse);

/* linear algebra (f32 f64) */
nb_tensor *nb_matmul(nb_ctx *c, nb_tensor *a, nb_tensor *b, bool ta, bool tb);
/* acc + op(a) op(b) (_MatMulAdd, PyTorch's addmm with beta = alpha = 1); acc NULL: MatMul. */
nb_tensor *nb_matmul_add(nb_ctx *c, nb_tensor *a, nb_tensor *b, bool ta, bool tb, nb_tensor *acc);
/* BatchMatMulV2: rank >= 2, batch dims broadcast; adj_* transposes the last two dims. */
nb_tensor *nb_batch_matmul(nb_ctx *c, nb_tensor *x, nb_tensor *y, bool adj_x, bool adj_y);

/* shapes and indexing */
nb_tensor *nb_reshape(nb_ctx *c, nb_tensor *x, const int64_t *shape, int rank); /* one -1 allowed */
nb_tensor *nb_transpose(nb_ctx *c, nb_tensor *x, const int *perm, int n);
nb_tensor *nb_expand_dims(nb_ctx *c, nb_tensor *x, int axis);
/* Squeeze: axes NULL/naxes 0 removes every size-1 dim; otherwise exactly those. */
nb_tensor *nb_squeeze(nb_ctx *c, nb_tensor *x, const int *axes, int naxes);
nb_tensor *nb_broadcast_to(nb_ctx *c, nb_tensor *x, const int64_t *shape, int rank);
nb_tensor *nb_concat(nb_ctx *c, nb_tensor *const *xs, int n, int axis); /* ConcatV2 */
nb_tensor *nb_pack(nb_ctx *c, nb_tensor *const *xs, int n, int axis);   /* Pack (tf.stack) */
/* Unpack (tf.unstack): num must equal x's size along axis; fills out[0..num). */
nb_code nb_unpack(nb_ctx *c, nb_tensor *x, int axis, int num, nb_tensor **out);
/* Slice: size -1 takes the rest of the dim. */
nb_tensor *nb_slice(nb_ctx *c, nb_tensor *x, const int64_t *begin, const int64_t *size, int n);
/* StridedSlice with TF's begin/end/ellipsis/new_axis/shrink_axis bit masks. */
typedef struct nb_slice_masks {
  int64_t begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask;
} nb_slice_masks;
nb_tensor *nb_strided_slice(nb_ctx *c, nb_tensor *x, const int64_t *begin, const int64_t *end, const int64_t *strides,
                            int n, const nb_slice_masks *masks);
/* TF's StridedSliceGrad: zeros of the 1-D int tensor `shape` (the forward input's shape)
   with dy written where StridedSlice(x, begin, end, strides, masks) reads. */
nb_tensor *nb_strided_slice_grad(nb_ctx *c, nb_tensor *shape, const int64_t *begin, const int64_t *end,
                                 const int64_t *strides, int n, nb_tensor *dy, const nb_slice_masks *masks);
nb_tensor *nb_tile(nb_ctx *c, nb_tensor *x, const int64_t *multiples, int n);
/* Pad with zeros; paddings is n rows of (before, after), n == rank. */
nb_tensor *nb_pad(nb_ctx *c, nb_tensor *x, const int64_t *paddings, int n);
/* GatherV2 along axis with batch_dims; out-of-range indices are an error. */
nb_tensor *nb_gather(nb_ctx *c, nb_tensor *params, nb_tensor *indices, int axis, int batch_dims);
/* UnsortedSegmentSum: negative ids are dropped, ids >= num_segments are an error. */
nb_tensor *nb_unsorted_segment_sum(nb_ctx *c, nb_tensor *data, nb_tensor *segment_ids, int64_t num_segments);
nb_tensor *nb_fill(nb_ctx *c, const int64_t *dims, int rank, nb_tensor *value);
/* Range: the 1-D sequence start, start + delta, ... stopping before limit; three scalars of
   one dtype (f32 f64 i32 i64), which the output has. Its length is known at graph build
   time only when the three values are. */
nb_tensor *nb_range(nb_ctx *c, nb_tensor *start, nb_tensor *limit, nb_tensor *delta);
nb_tensor *nb_zeros_like(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_ones_like(nb_ctx *c, nb_tensor *x);
/* Const: a copy of value (TF's attrs "value" and "dtype"); nb_tensor_from is the usual way. */
nb_tensor *nb_const(nb_ctx *c, nb_tensor *value);
/* Shape op: x's shape as a 1-D tensor of out_type (NB_I32 or NB_I64). */
nb_tensor *nb_shape_op(nb_ctx *c, nb_tensor *x, nb_dtype out_type);
/* BroadcastGradientArgs: s0, s1 are 1-D int32/int64 shapes; r0, r1 (same dtype) are the
   axes of their broadcast along which each side's gradient must be summed. */
nb_code nb_broadcast_gradient_args(nb_ctx *c, nb_tensor *s0, nb_tensor *s1, nb_tensor **r0, nb_tensor **r1);

/* The same ops with their shape, axes and index arguments as int32/int64 tensors, TF's
   op inputs (values computed in a graph or known only at run time); errors as the ops'. */
nb_tensor *nb_reshape_t(nb_ctx *c, nb_tensor *x, nb_tensor *shape);      /* 1-D, one -1 allowed */
nb_tensor *nb_transpose_t(nb_ctx *c, nb_tensor *x, nb_tensor *perm);     /* 1-D permutation */
nb_tensor *nb_broadcast_to_t(nb_ctx *c, nb_tensor *x, nb_tensor *shape); /* 1-D shape */
nb_tensor *nb_pad_t(nb_ctx *c, nb_tensor *x, nb_tensor *paddings);       /* [rank, 2]: before, after */
nb_tensor *nb_fill_t(nb_ctx *c, nb_tensor *dims, nb_tensor *value);      /* 1-D dims, scalar value */
/* Sum over axes (a scalar or 1-D list; repeated and negative axes allowed). */
nb_tensor *nb_sum_t(nb_ctx *c, nb_tensor *x, nb_tensor *axes, bool keepdims);
nb_tensor *nb_cumsum_t(nb_ctx *c, nb_tensor *x, nb_tensor *axis, bool exclusive, bool reverse); /* scalar axis */
nb_tensor *nb_slice_t(nb_ctx *c, nb_tensor *x, nb_tensor *begin, nb_tensor *size); /* 1-D, size -1: the rest */
/* StridedSlice and StridedSliceGrad over 1-D begin, end, strides; masks NULL: all zero. */
nb_tensor *nb_strided_slice_t(nb_ctx *c, nb_tensor *x, nb_tensor *begin, nb_tensor *end, nb_tensor *strides,
                              const nb_slice_masks *masks);
nb_tensor *nb_strided_slice_grad_t(nb_ctx *c, nb_tensor *shape, nb_tensor *begin, nb_tensor *end, nb_tensor *strides,
                                   nb_tensor *dy, const nb_slice_masks *masks);
/* GatherV2 along the scalar axis. */
nb_tensor *nb_gather_t(nb_ctx *c, nb_tensor *params, nb_tensor *indices, nb_tensor *axis, int batch_dims);
/* num_segments: an int scalar. */
nb_tensor *nb_unsorted_segment_sum_t(nb_ctx *c, nb_tensor *data, nb_tensor *segment_ids, nb_tensor *num_segments);

/* ---- neural-network ops (TF's nn_ops) ------------------------------------------------------
   float32/float64 unless noted. Softmax and LogSoftmax normalize over the last dim (rank >= 1),
   shifted by the row max so large logits stay finite. */
nb_tensor *nb_softmax(nb_ctx *c, nb_tensor *logits);
nb_tensor *nb_log_softmax(nb_ctx *c, nb_tensor *logits);
/* SoftmaxCrossEntropyWithLogits: features and labels (same float dtype) broadcast to
   [batch, classes] (TF 2); loss [batch] = -sum(labels * log_softmax(features)), backprop
   [batch, classes] = softmax(features) - labels. Either out pointer may be NULL. */
nb_code nb_softmax_cross_entropy_with_logits(nb_ctx *c, nb_tensor *features, nb_tensor *labels, nb_tensor **loss,
                                             nb_tensor **backprop);
/* SparseSoftmaxCrossEntropyWithLogits: features [batch, classes], labels int32/int64 [batch]
   with values in [0, classes) (others: NB_INVALID naming the value and its position). */
nb_code nb_sparse_softmax_cross_entropy_with_logits(nb_ctx *c, nb_tensor *features, nb_tensor *labels, nb_tensor **loss,
                                                    nb_tensor **backprop);
/* Relu6: min(max(x, 0), 6) (also int32/int64); Relu6Grad(gradients, features). */
nb_tensor *nb_relu6(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_relu6_grad(nb_ctx *c, nb_tensor *gradients, nb_tensor *features);
/* LeakyRelu: x > 0 ? x : alpha x (attr alpha, TF's default 0.2); LeakyReluGrad likewise. */
nb_tensor *nb_leaky_relu(nb_ctx *c, nb_tensor *x, double alpha);
nb_tensor *nb_leaky_relu_grad(nb_ctx *c, nb_tensor *gradients, nb_tensor *features, double alpha);
/* Selu: scale (x > 0 ? x : alpha (e^x - 1)) with TF's constants; SeluGrad(gradients, outputs). */
nb_tensor *nb_selu(nb_ctx *c, nb_tensor *x);
nb_tensor *nb_selu_grad(nb_ctx *c, nb_tensor *gradients, nb_tensor *outputs);
/* Gelu (op type "Gelu", nabla's own: TF composes tf.nn.gelu in Python): x Phi(x) =
   x (1 + erf(x / sqrt 2)) / 2, or with attr approximate (default false) the tanh form
   x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2. GeluGrad(gradients, features), same attr. */
nb_tensor *nb_gelu(nb_ctx *c, nb_tensor *x, bool approximate);
nb_tensor *nb_gelu_grad(nb_ctx *c, nb_tensor *gradients, nb_tensor *features, bool approximate);
/* L2Loss: sum(t^2) / 2, a scalar. */
nb_tensor *nb_l2_loss(nb_ctx *c, nb_tensor *t);
/* OneHot: indices (int32/int64) with a dim of size depth (>= 0) inserted at axis (-1: last);
   on_value where the index matches, off_value elsewhere (scalars of any one dtype, which the
   output has); indices outside [0, depth) give all off_value. No input has a gradient (TF). */
nb_tensor *nb_one_hot(nb_ctx *c, nb_tensor *indices, int depth, nb_tensor *on_value, nb_tensor *off_value, int axis);

/* ---- batch normalization (f32 f64; semantics and TF differences: docs/ops.md) -------------
   FusedBatchNormV3: x 4-D ("NHWC", "NCHW") or 5-D ("NDHWC", "NCDHW"; NULL: "NHWC"); scale,
   offset, mean, variance: vectors of x's channels and dtype. out[0..6) = y, batch_mean,
   batch_variance, reserve_space_1..3. Training: batch statistics, running outputs
   (1 - f) old + f batch for f = exponential_avg_factor (mean/variance may be NULL when
   f == 1); inference: normalizes with mean/variance. epsilon >= 0 (TF: 1e-4). */
nb_code nb_fused_batch_norm(nb_ctx *c, nb_tensor *x, nb_tensor *scale, nb_tensor *offset, nb_tensor *mean,
                            nb_tensor *variance, double epsilon, double exponential_avg_factor, const char *data_format,
                            bool is_training, nb_tensor **out);
/* FusedBatchNormGradV3: out[0..5) = x_backprop, scale_backprop, offset_backprop and two
   empty reserve spaces, from y_backprop and the forward op's x, scale and reserve spaces
   (inference: its mean and variance inputs). */
nb_code nb_fused_batch_norm_grad(nb_ctx *c, nb_tensor *y_backprop, nb_tensor *x, nb_tensor *scale,
                                 nb_tensor *reserve_space_1, nb_tensor *reserve_space_2, nb_tensor *reserve_space_3,
                                 double epsilon, const char *data_format, bool is_training, nb_tensor **out);

/* ---- stateless random numbers, dropout, initializers (f32 f64) ----------------------------
   TF's StatelessRandomUniform ([0, 1)), StatelessRandomNormal and StatelessTruncatedNormal
   (normals within 2 of 0): the values are TF's CPU values for the same seed, bit for bit
   (Philox-4x32-10), whatever the thread count. Through nb_op they take TF's inputs: shape
   (1-D int32/int64) and seed (int32/int64 [2]); attr dtype. They have no gradient. */
nb_tensor *nb_stateless_random_uniform(nb_ctx *c, const int64_t *shape, int rank, const int64_t seed[2],
                                       nb_dtype dtype);
nb_tensor *nb_stateless_random_normal(nb_ctx *c, const int64_t *shape, int rank, const int64_t seed[2], nb_dtype dtype);
nb_tensor *nb_stateless_truncated_normal(nb_ctx *c, const int64_t *shape, int rank, const int64_t seed[2],
                                         nb_dtype dtype);
/* tf.nn.experimental.stateless_dropout: x * (u >= rate) / (1 - rate) with u uniform of
   noise_shape (NULL: x's shape; it must broadcast to x's), rate in [0, 1); rate 0 returns
   x itself. A composite of public ops, differentiable in x. */
nb_tensor *nb_dropout(nb_ctx *c, nb_tensor *x, double rate, const int64_t *noise_shape, int noise_rank,
                      const int64_t seed[2]);
/* Initializers (Keras semantics; a concrete tensor, or in a graph context a graph
   tensor, of dtype t and the given shape). Fans as Keras: a vector is its own fan in and
   out, a matrix is [fan_in, fan_out], a convolution kernel [..., in, out] multiplies both
   by its receptive field (kh * kw for [kh, kw, in, out]). */
nb_tensor *nb_init_zeros(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape);
nb_tensor *nb_init_ones(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape);
/* uniform in [-limit, limit), limit = sqrt(6 / (fan_in + fan_out)) */
nb_tensor *nb_init_glorot_uniform(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape, const int64_t seed[2]);
/* truncated normal (within 2 stddev) with stddev sqrt(2 / fan_in) / .87962566103423978 */
nb_tensor *nb_init_he_normal(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape, const int64_t seed[2]);
/* mean + stddev * a standard normal truncated to (-2, 2) */
nb_tensor *nb_init_truncated_normal(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape, double mean, double stddev,
                                    const int64_t seed[2]);
/* ---- convolution, pooling and bias (f32 f64) ---------------------------------------------
   Images are 4-D: [batch, height, width, channels] for data_format "NHWC" (NULL means
   "NHWC"), [batch, channels, height, width] for "NCHW". Window attrs (strides, dilations, ksize) have 4 values in data_format's
   order, 1 on the batch and channel dims. padding is "SAME" (output ceil(in / stride),
   zeros split evenly, the extra one after), "VALID" (no padding) or "EXPLICIT" (Conv2D
   family, MaxPool, MaxPoolGrad): then explicit_paddings has 8 values, a (before, after)
   pair per dim in data_format's order, nonzero only on height and width. */
typedef struct nb_conv2d_attrs {
  const int64_t *strides;           /* 4 values */
  const char *padding;              /* "SAME", "VALID" or "EXPLICIT" */
  const int64_t *explicit_paddings; /* 8 values with "EXPLICIT", else NULL */
  const char *data_format;          /* "NHWC" (NULL) or "NCHW" */
  const int64_t *dilations;         /* 4 values; NULL: no dilation */
} nb_conv2d_attrs;
/* Conv2D: filter is [kh, kw, in_channels, out_channels] (in either layout); the output
   has out_channels channels (cross-correlation, as TF). */
nb_tensor *nb_conv2d(nb_ctx *c, nb_tensor *input, nb_tensor *filter, const nb_conv2d_attrs *a);
/* Conv2DBackpropInput: the gradient of Conv2D wrt its input; input_sizes is a 1-D int
   tensor of the input's 4 dims, out_backprop the gradient of Conv2D's output. */
nb_tensor *nb_conv2d_backprop_input(nb_ctx *c, nb_tensor *input_sizes, nb_tensor *filter, nb_tensor *out_backprop,
                                    const nb_conv2d_attrs *a);
/* Conv2DBackpropFilter: the gradient wrt the filter; filter_sizes holds its 4 dims. */
nb_tensor *nb_conv2d_backprop_filter(nb_ctx *c, nb_tensor *input, nb_tensor *filter_sizes, nb_tensor *out_backprop,
                                     const nb_conv2d_attrs *a);
typedef struct nb_pool_attrs {
  const int64_t *ksize, *strides;   /* 4 values each */
  const char *padding;              /* "SAME" or "VALID"; "EXPLICIT" for MaxPool, MaxPoolGrad */
  const int64_t *explicit_paddings; /* MaxPool, MaxPoolGrad with "EXPLICIT" only, else NULL */
  const char *data_format;          /* "NHWC" (NULL) or "NCHW" */
} nb_pool_attrs;
/* MaxPool: the window maximum; a NaN in the window gives NaN. */
nb_tensor *nb_max_pool(nb_ctx *c, nb_tensor *input, const nb_pool_attrs *a);
/* MaxPoolGrad: grad (MaxPool's output shape) added at each window's first maximum of
   orig_input (row-major window order; a NaN counts as the maximum); orig_input's shape. */
nb_tensor *nb_max_pool_grad(nb_ctx *c, nb_tensor *orig_input, nb_tensor *orig_output, nb_tensor *grad,
                            const nb_pool_attrs *a);
/* MaxPoolGradGrad: grad (orig_input's shape) read at each window's first maximum;
   MaxPool's output shape. */
nb_tensor *nb_max_pool_grad_grad(nb_ctx *c, nb_tensor *orig_input, nb_tensor *orig_output, nb_tensor *grad,
                                 const nb_pool_attrs *a);
/* AvgPool: the window mean over its real (non-padding) elements, as TF. */
nb_tensor *nb_avg_pool(nb_ctx *c, nb_tensor *value, const nb_pool_attrs *a);
/* AvgPoolGrad: each grad element spread evenly over its window's real elements;
   orig_input_shape is a 1-D int tensor of the 4 input dims. */
nb_tensor *nb_avg_pool_grad(nb_ctx *c, nb_tensor *orig_input_shape, nb_tensor *grad, const nb_pool_attrs *a);
/* BiasAdd: value (rank >= 2) + bias along the channel dim: the last for "NHWC", dim 1 for
   "NCHW" (the last when value is 2-D). BiasAddGrad: out_backprop summed over all other dims. */
nb_tensor *nb_bias_add(nb_ctx *c, nb_tensor *value, nb_tensor *bias, const char *data_format);
nb_tensor *nb_bias_add_grad(nb_ctx *c, nb_tensor *out_backprop, const char *data_format);

/* ---- collective ops (TF's collective_ops and nccl_ops; docs/distributed.md) -----------------
   Every member of a group calls the op with the same group_size, group_key and
   instance_key (int32 scalar inputs through nb_op) and the same dtype and shape (f32 f64
   i32 i64); the op returns when all have. Members are the devices of this process (threads
   that called nb_collective_set_device) or, on threads without one, the processes that
   nb_dist_init joined (MPI ranks; a group is all of them). Reductions merge in member
   order, so every member gets the same bits. A member that waits more than timeout_seconds
   (0: nb_dist_set_timeout's default) fails with NB_INTERNAL; members that disagree on
   dtype, shape, kind or keys all fail with NB_INVALID naming both. Stateful: graphs never
   fold them. Gradients: docs/distributed.md. */
/* Per-device thread setting: the calling thread is device `device` (0 .. group_size - 1)
   of in-process groups; -1: none (the default). */
void nb_collective_set_device(int device);
int nb_collective_device(void);
/* CollectiveReduceV2: merge_op "Add" "Mul" "Min" "Max" of every member's input, then
   final_op "Id" or "Div" (divided by group_size; ints: integer division). */
nb_tensor *nb_collective_reduce_v2(nb_ctx *c, nb_tensor *input, int64_t group_size, int64_t group_key,
                                   int64_t instance_key, const char *merge_op, const char *final_op,
                                   double timeout_seconds);
/* CollectiveGatherV2: the members' inputs (rank >= 1) concatenated along dim 0 in member order. */
nb_tensor *nb_collective_gather_v2(nb_ctx *c, nb_tensor *input, int64_t group_size, int64_t group_key,
                                   int64_t instance_key, double timeout_seconds);
/* CollectiveBcastSendV2 (returns input) and CollectiveBcastRecvV2 (returns the sender's
   value, of dtype t and the given shape): exactly one member of the group sends. */
nb_tensor *nb_collective_bcast_send_v2(nb_ctx *c, nb_tensor *input, int64_t group_size, int64_t group_key,
                                       int64_t instance_key, double timeout_seconds);
nb_tensor *nb_collective_bcast_recv_v2(nb_ctx *c, nb_dtype t, const int64_t *shape, int rank, int64_t group_size,
                                       int64_t group_key, int64_t instance_key, double timeout_seconds);
/* NcclAllReduce: reduction "sum" "prod" "min" "max" over num_devices members that name the
   same shared_name. */
nb_tensor *nb_nccl_all_reduce(nb_ctx *c, nb_tensor *input, const char *reduction, int num_devices,
                              const char *shared_name);

/* ---- user-defined ops: REGISTER_OP + REGISTER_KERNEL_BUILDER, tf.load_op_library ----------
   nb_register_op adds an op type that is then an op like the built-ins: nb_op(c, "MyOp",
   ...) runs it eagerly, adds it to graphs (function graphs too), sessions run it, tapes
   record it, DOT shows it, and its attrs are validated the same way (a bad attr is an error
   naming the op and the attr). Its gradient is registered apart, with nb_register_gradient
   (or nb_register_no_gradient); docs/writing_ops.md walks through one. Registration and
   loading are thread-safe; ops cannot be unregistered. An op whose body is other ops:
   nb_register_composite_op (section 4, after nb_custom_fn). */
typedef struct nb_op_ctx nb_op_ctx; /* what a shape function and a kernel see of one call */

/* An input or output. Its dtype is dtype, or the value of type attr type_attr when set
   (TF's "x: T"; a type attr an input names is inferred from that input, as TF's).
   number_attr (TF's "x: N * T"): the input is a list of as many tensors as that int attr
   says; only the first input may be a list, and no output. */
typedef struct nb_op_arg {
  const char *name;
  nb_dtype dtype;
  const char *type_attr;
  const char *number_attr;
} nb_op_arg;

/* An attr of one of TF's kinds int, float, bool, string, type, list(int) (shapes too: -1
   for an unknown dim), list(float) and list(type).
   def is its default (its kind must be kind; the name is not read) unless required.
   allowed_types: a type or list(type) attr's allowed dtypes, bit (1u << dtype) each; 0: any. */
typedef struct nb_op_attr_def {
  const char *name;
  nb_attr_kind kind;
  bool required;
  nb_attr def;
  unsigned allowed_types;
} nb_op_attr_def;

/* Shape functions set every output's shape (nb_opctx_set_output_shape) from the inputs'
   dtypes and shapes, the attrs, and the values of inputs known at graph build time
   (nb_opctx_input_value). In a graph an input dim may be unknown: the function then sees
   stand-in dims and the dims of the outputs that follow them stay unknown. An output left
   unset with an input value unknown defers its shape to run time; left unset otherwise, it
   is an error. NULL: every output has input 0's shape (TF's UnchangedShape). Kernels read
   the inputs and write the outputs, which the library allocated from the shape function's
   shapes; they may use nb_opctx_threads() OpenMP threads. Both return NB_OK or the code
   of nb_opctx_fail. stateful: the op reads or writes state outside its inputs, so a graph
   never folds it at build time (TF's SetIsStateful). */
typedef struct nb_op_spec {
  const char *name; /* TF-valid: [A-Z][A-Za-z0-9_>]* */
  const nb_op_arg *inputs;
  int ninputs;
  const nb_op_arg *outputs;
  int noutputs;
  const nb_op_attr_def *attrs;
  int nattrs; /* at most 6 */
  nb_code (*shape_fn)(nb_op_ctx *k);
  nb_code (*kernel)(nb_op_ctx *k);
  bool stateful;
} nb_op_spec;
/* NB_INVALID for an invalid name, a name already registered, or a spec that contradicts
   itself (an undeclared or mistyped attr, a default of the wrong kind, ...);
   NB_UNIMPLEMENTED for a list other than the first input; NB_NOMEM when out of memory or
   when the registry is full. The message: nb_registry_error(). */
nb_code nb_register_op(const nb_op_spec *spec);
/* Values of the list kinds (borrowed for the call, as nb_attr_ints'), and what gradient
   functions read of them (an unknown name: NULL, *n 0). */
nb_attr nb_attr_floats(const char *name, const double *v, int n);
nb_attr nb_attr_types(const char *name, const nb_dtype *v, int n);
const double *nb_fwd_attr_floats(const nb_fwd_op *op, const char *name, int *n);
const nb_dtype *nb_fwd_attr_types(const nb_fwd_op *op, const char *name, int *n);
/* The message of this thread's last failed nb_register_op, nb_register_gradient_reads or
   nb_load_op_library; "" after one that succeeded. */
const char *nb_registry_error(void);
/* Declares which input and output values op_type's registered gradient reads (bit i:
   input or output i), so a tape keeps only those (shapes, dtypes and attrs always). A
   gradient registered without it keeps them all. NB_NOT_FOUND: no gradient registered. */
nb_code nb_register_gradient_reads(const char *op_type, uint32_t inputs, uint32_t outputs);

/* The kernel context. Inputs and outputs are numbered with list elements flattened. */
int nb_opctx_num_inputs(const nb_op_ctx *k);
int nb_opctx_num_outputs(const nb_op_ctx *k);
/* Input i (nb_dtype_of, nb_rank, nb_shape, nb_num_elements apply); NULL out of range. */
const nb_tensor *nb_opctx_input(const nb_op_ctx *k, int i);
/* Input i's data: always in a kernel; in a shape function when known (NULL when not). */
const void *nb_opctx_input_value(const nb_op_ctx *k, int i);
/* Output i's tensor and data (kernels only; NULL in a shape function). */
const nb_tensor *nb_opctx_output(const nb_op_ctx *k, int i);
void *nb_opctx_output_data(nb_op_ctx *k, int i);
nb_code nb_opctx_set_output_shape(nb_op_ctx *k, int i, int rank, const int64_t *shape);
/* Attr values by name. A name the op does not declare with that kind fails the call (the
   getter returns 0 / NULL; the function then returns the context's code). */
int64_t nb_opctx_attr_int(nb_op_ctx *k, const char *name);
double nb_opctx_attr_float(nb_op_ctx *k, const char *name);
bool nb_opctx_attr_bool(nb_op_ctx *k, const char *name);
const char *nb_opctx_attr_str(nb_op_ctx *k, const char *name);
nb_dtype nb_opctx_attr_type(nb_op_ctx *k, const char *name);
const int64_t *nb_opctx_attr_ints(nb_op_ctx *k, const char *name, int *n);
const double *nb_opctx_attr_floats(nb_op_ctx *k, const char *name, int *n);
const nb_dtype *nb_opctx_attr_types(nb_op_ctx *k, const char *name, int *n);
int nb_opctx_threads(const nb_op_ctx *k);
/* Fails the call with a message (prefixed with the op type and, in graphs, the node). */
nb_code nb_opctx_fail(nb_op_ctx *k, nb_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Op libraries (tf.load_op_library). A library is a shared object that defines
     NB_OP_LIBRARY_EXPORT int nabla_op_library_abi(void) { return NB_ABI_VERSION; }
     NB_OP_LIBRARY_EXPORT nb_code nabla_op_library_init(int host_abi) { ...register... }
   nb_load_op_library dlopens it (RTLD_NOW | RTLD_LOCAL), refuses a library whose
   nabla_op_library_abi is not this nabla's NB_ABI_VERSION, then runs its init with that
   version (which may refuse too). Errors: NB_IO for a file that cannot be loaded (the
   loader's message), NB_NOT_FOUND for a missing symbol, NB_UNIMPLEMENTED for a version
   mismatch, the init's code when it fails (ops it registered before stay). Loading the
   same library again does nothing. Messages: nb_registry_error(). */
#define NB_ABI_VERSION 1
#define NB_OP_LIBRARY_EXPORT __attribute__((visibility("default")))
nb_code nb_load_op_library(const char *path);
/* What an op library defines (declared here so that its definitions are checked). */
int nabla_op_library_abi(void);
nb_code nabla_op_library_init(int host_abi);

/* ==== 3. Graphs and sessions ============================================================== */

/* ---- graphs ---------------------------------------------------------------------------
   A graph context adds a node per op call and returns symbolic tensors. Shapes and dtypes
   are inferred and checked as nodes are added (dims -1 or rank -1: unknown), with errors
   naming the node; only checks that need unknown values wait for nb_run. Ops on known
   constants are folded at build time. */
nb_graph *nb_graph_new(void);
void nb_graph_free(nb_graph *g); /* after every context and session on it */
nb_ctx *nb_graph_ctx_new(nb_graph *g);
int nb_graph_num_nodes(const nb_graph *g);
/* Node i of g (0 <= i < nb_graph_num_nodes, in the order nodes were added): its name, its
   op type (TF's: "MatMul"), its output count, and how many data inputs of g's nodes read
   its outputs (0: a sink, what a GraphDef's user fetches); NULL or -1 for i out of range. */
const char *nb_graph_node_name(const nb_graph *g, int i);
const char *nb_graph_node_op(const nb_graph *g, int i);
int nb_graph_node_num_outputs(const nb_graph *g, int i);
int nb_graph_node_num_consumers(const nb_graph *g, int i);
/* Name scopes: nodes made while a scope is pushed are named "scope/Type" (unique: "_1", ...). */
nb_code nb_name_scope_push(nb_graph *g, const char *name);
void nb_name_scope_pop(nb_graph *g);
/* TF's name= argument: the next node c adds is named name (made unique in its scope), its
   gradients go under "gradients/name_grad/"; name NULL drops it. TF's name rule, at most
   255 characters, else NB_INVALID. Eager contexts ignore names. Details: docs/graphs.md. */
nb_code nb_name_next(nb_ctx *c, const char *name);
/* A graph input; dims may be -1 (unknown). Graph contexts only. */
nb_tensor *nb_placeholder(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape, const char *name);
/* The node name of a symbolic tensor ("gradients/MatMul_grad/MatMul"), NULL for concrete ones. */
const char *nb_tensor_node_name(const nb_tensor *x);
int nb_tensor_output_index(const nb_tensor *x);
/* TF's get_tensor_by_name: output k of the node named "node:k" (a bare "node": output 0)
   in c's graph, as a new handle in c; NB_NOT_FOUND when there is none. */
nb_tensor *nb_graph_tensor_by_name(nb_ctx *c, const char *name);
bool nb_is_symbolic(const nb_tensor *x);
/* x's value when it is known without running anything: x itself when concrete, the value
   of a Const or of a node folded at build time, else NULL (TF's constant_value). */
const nb_tensor *nb_constant_value(const nb_tensor *x);
/* Control dependency: x's node runs only after dep's node (both in one graph). */
nb_code nb_add_control_input(nb_tensor *x, nb_tensor *dep);
/* Graphviz DOT of the graph, nodes grouped by name scope (clusters); NB_IO if the file can't be written. */
nb_code nb_graph_to_dot(const nb_graph *g, const char *path);

/* ---- sessions ---------------------------------------------------------------------------
   nb_run computes fetch[i] into results[i], running only what the fetches need; feed[i]
   (usually a placeholder) takes feed_values[i] (a concrete tensor). results belong to the
   caller (nb_tensor_free). On error nb_session_error says which node failed and why. */
nb_session *nb_session_new(nb_graph *g);
void nb_session_free(nb_session *s);
nb_code nb_run(nb_session *s, nb_tensor *const *feed, nb_tensor *const *feed_values, int nfeed, nb_tensor *const *fetch,
               int nfetch, nb_tensor **results);
const char *nb_session_error(const nb_session *s);
void nb_session_set_threads(nb_session *s, int n);
/* What s's runs took from memory. A run's data blocks (values, kernel scratch) come from a
   pool of freed blocks in power-of-two sizes, planned by liveness: each value's block goes
   back right after its last use (or is written over in place by the op that reads it last),
   so once a first run has filled the pool, runs of the same feeds and fetches take nothing
   from malloc (allocs_last_run 0). peak_bytes_last_run: the most bytes of blocks the last
   run held at once beyond those held when it began (its results included). With more than one thread (nb_session_set_threads), two
   independent steps that each move enough data run at once, each on half the threads
   (TF's inter-op parallelism); concurrent_steps_last_run counts them. */
typedef struct nb_session_stats {
  int64_t runs;                      /* nb_run calls that reached their kernels */
  int64_t allocs_last_run;           /* data blocks the last run took from malloc */
  int64_t allocs_total;              /* over every run */
  int64_t peak_bytes_last_run;       /* see above */
  int64_t concurrent_steps_last_run; /* steps of the last run that ran beside another */
  /* nodes the last run's plan holds: those it computes (a fused node is one) and those whose
     value the graph computed when it was built */
  int64_t steps_last_run;
} nb_session_stats;
void nb_session_get_stats(const nb_session *s, nb_session_stats *out);

/* ---- graph optimization: TF's grappler (docs/optimizer.md) ---------------------------------
   Graph -> graph passes that keep TF's semantics and the names of the fed and fetched
   tensors, and never merge, move or drop stateful ops (variables, host callbacks, control
   flow), random ops, or the order of variable reads and updates. A session runs them when
   it plans a (feeds, fetches) signature, on its own copy of the graph. Pruning to what the
   fetches need comes with every pass; the rewritten nodes are folded when their inputs are known. */
enum {
  NB_PASS_LAYOUT = 1u << 0,    /* NCHW conv, pool, BiasAdd, batch-norm ops and their gradients
                                  run NHWC (the kernels' layout), Transposes at the edges */
  NB_PASS_TRANSPOSE = 1u << 1, /* Transposes move through elementwise ops, reductions, Pad,
                                  Concat, Slice; inverse pairs cancel */
  NB_PASS_CSE = 1u << 2,       /* common subexpressions: one node for equal ops on equal inputs */
  NB_PASS_SIMPLIFY = 1u << 3,  /* x*1, x+0, Neg(Neg x), Transpose/Reshape chains, Identity
                                  chains, sums of zeros */
  NB_PASS_FOLD = 1u << 4,      /* values known when the graph was built become Consts (those
                                  of nodes downstream of a fed value excepted) */
  NB_PASS_FUSE = 1u << 5,      /* chains and trees of float elementwise ops run as one loop over
                                  blocks (_FusedElementwise), each input read once; last */
  NB_PASS_ALL = 0xffffu
};
typedef struct nb_session_opts {
  unsigned passes; /* NB_PASS_* bits of the passes to run; 0: the graph runs as built */
} nb_session_opts;
/* The options nb_session_new uses: every pass, unless the environment variable
   NABLA_OPTIMIZE (read once) says "none", "all" or a comma list of pass names ("layout",
   "transpose", "simplify", "cse", "fold", "fuse"). */
nb_session_opts nb_session_opts_default(void);
/* A session whose plans run the passes of opts (NULL: nb_session_opts_default()). */
nb_session *nb_session_new_with_opts(nb_graph *g, const nb_session_opts *opts);
/* The graph s runs for these feeds and fetches (planning it if needed): the optimized copy,
   or s's own graph when no pass changes anything. It belongs to s (valid until s is freed);
   inspect it with nb_graph_num_nodes, nb_graph_to_dot or nb_graph_write_graphdef. */
nb_code nb_session_planned_graph(nb_session *s, nb_tensor *const *feed, int nfeed, nb_tensor *const *fetch, int nfetch,
                                 const nb_graph **out);
/* *out: a new graph computing fetch[0..nfetch) from feed[0..nfeed) (tensors of g) with the
   passes of opts (NULL: nb_session_opts_default()). The fed and fetched tensors keep their
   names there (find them with nb_graph_tensor_by_name on a context of *out). *out uses g's
   functions and variables: free it before g. NB_INVALID for tensors of another graph. */
nb_code nb_graph_optimize(nb_graph *g, nb_tensor *const *feed, int nfeed, nb_tensor *const *fetch, int nfetch,
                          const nb_session_opts *opts, nb_graph **out);

/* ==== 4. Gradients ======================================================================== */

/* ---- symbolic gradients: tf.gradients (graph contexts) ------------------------------------ */
/* How several gradients of one tensor are summed (TF's AggregationMethod): one AddN, a
   pairwise tree of AddV2, or one AccumulateNV2 where the shape is fully known (else AddN). */
enum { NB_AGG_ADD_N = 0, NB_AGG_TREE = 1, NB_AGG_ACCUMULATE_N = 2 };
typedef struct nb_grad_opts {
  nb_tensor *const *grad_ys; /* NULL: ones */
  nb_tensor *const *stop;
  int nstop;            /* stop_gradients */
  int unconnected_zero; /* 0: NULL for unconnected xs; 1: zeros */
  int aggregation;      /* NB_AGG_ADD_N (default), NB_AGG_TREE, NB_AGG_ACCUMULATE_N */
  const char *name;     /* scope, default "gradients" */
  /* Automatic checkpointing (Chen et al. 2016): 0 keeps every forward activation the
     gradient reads; k > 0 splits the N ops between xs and ys (in topological order) into
     k segments, keeps only each segment's last output, and recomputes the rest in the
     gradient graph, one segment at a time as the backward pass reaches it (memory about
     N/k + k activations); NB_CHECKPOINT_SQRT lays the segments out by the bytes the
     gradient rules read, longest first (about sqrt(2N) activations for a chain of N).
     Stateful ops are never recomputed. docs/gradients.md. */
  int checkpoint_segments;
} nb_grad_opts;
#define NB_CHECKPOINT_SQRT (-1)
/* dxs[i] = sum over ys of d ys / d xs[i] (with grad_ys weights), as graph tensors in c's
   graph, under the scope "gradients/<op name>_grad/". c must be a graph context. */
nb_code nb_gradients(nb_ctx *c, nb_tensor *const *ys, int ny, nb_tensor *const *xs, int nx, const nb_grad_opts *o,
                     nb_tensor **dxs);

/* ---- forward mode ------------------------------------------------------------------------- */
/* Graph contexts only (eager: NB_UNIMPLEMENTED; eagerly, a forward accumulator):
   out[i] = J_{ys[i]}(xs) · tangents, summed over xs, one sweep of the ops between xs and
   ys applying each op's forward rule, or for an op without one (or with an overridden
   gradient) TF's fallback, its gradient transposed. tangents[j] has xs[j]'s dtype and
   shape; int/bool or unconnected ys give NULL. The fallback needs the gradient op's own
   gradient (MaxPool with EXPLICIT padding has none: an error). docs/forward-mode.md. */
nb_code nb_jvp(nb_ctx *c, nb_tensor *const *ys, int ny, nb_tensor *const *xs, int nx, nb_tensor *const *tangents,
               nb_tensor **out);
/* Hessian-vector product of y (its sum when not scalar), forward over reverse: out[j] =
   sum over k of d²y/dxs[j]dxs[k] · vs[k]; NULL where xs[j]'s gradient is unconnected. */
nb_code nb_hvp(nb_ctx *c, nb_tensor *y, nb_tensor *const *xs, int nx, nb_tensor *const *vs, nb_tensor **out);
/* tf.hessians: out[i] = d²y/dxs[i]² of shape xs[i].shape + xs[i].shape (NULL when
   unconnected); one gradient per element, so xs[i] needs a fully known shape and 1 to 4096
   elements, else NB_SHAPE naming it. */
nb_code nb_hessian(nb_ctx *c, nb_tensor *y, nb_tensor *const *xs, int nx, nb_tensor **out);
/* The mode of a Jacobian (nb_jacobian here; nb_tape_jacobian and nb_tape_batch_jacobian
   on a tape): AUTO picks forward mode when the source (row) has fewer elements than the
   target (row), reverse mode otherwise; FORWARD and REVERSE force one (JAX's jacfwd and
   jacrev). docs/forward-mode.md. */
typedef enum nb_jacobian_mode {
  NB_JACOBIAN_MODE_AUTO,
  NB_JACOBIAN_MODE_FORWARD,
  NB_JACOBIAN_MODE_REVERSE
} nb_jacobian_mode;
/* The Jacobian dy/dx in c's graph, of shape y.shape + x.shape (float x and y of fully
   known shapes, ranks summing to at most NB_MAX_RANK): forward mode (an nb_jvp per element
   of x, under the name scope "jacfwd") or reverse mode (a gradient per element of y, under
   "jacrev"), as mode says. Unconnected: zeros. Eager contexts: NB_UNIMPLEMENTED (they use
   nb_tape_jacobian); another mode value: NB_INVALID. */
nb_code nb_jacobian(nb_ctx *c, nb_tensor *y, nb_tensor *x, nb_jacobian_mode mode, nb_tensor **out);

/* ---- gradient functions ---------------------------------------------------------------
   A gradient function reads the forward op through nb_fwd_op (TF's ForwardOperation) and
   dys[i], the gradient of output i (zeros when only another output got one; NULL for
   int/bool outputs), and sets dxs[i] for each input (NULL: none). A dxs[i] of another
   dtype or an incompatible static shape than input i fails with NB_DTYPE / NB_SHAPE. */
typedef nb_code (*nb_grad_fn)(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs);
/* Registers f under an op type or a free name (for overrides); duplicates: NB_INVALID.
   Not synchronized with gradients running on other threads: register at start-up. */
nb_code nb_register_gradient(const char *name, nb_grad_fn f);
nb_code nb_register_no_gradient(const char *op_type);
/* While pushed, nodes of op_type made in g use the gradient registered as grad_name
   (TF's gradient_override_map). Unknown grad_name: NB_NOT_FOUND. */
nb_code nb_gradient_override_push(nb_graph *g, const char *op_type, const char *grad_name);
void nb_gradient_override_pop(nb_graph *g);
/* Whether op_type has a gradient function (a registered no-gradient counts as none). */
bool nb_has_gradient(const char *op_type);
/* The registered op types, for tools and registry-wide tests. */
int nb_num_op_types(void);
const char *nb_op_type_name(int i);

/* Whether input i needs a gradient (it lies between the xs and ys, or a tape tracked it);
   a function may skip the others (TF's skip_input_indices). */
bool nb_fwd_input_needs_grad(const nb_fwd_op *op, int i);
const char *nb_fwd_type(const nb_fwd_op *op);
const char *nb_fwd_name(const nb_fwd_op *op);
int nb_fwd_num_inputs(const nb_fwd_op *op);
int nb_fwd_num_outputs(const nb_fwd_op *op);
nb_tensor *nb_fwd_input(const nb_fwd_op *op, int i);
nb_tensor *nb_fwd_output(const nb_fwd_op *op, int i);
/* Attr values by TF name; an unknown name gives 0 / NULL. */
int64_t nb_fwd_attr_int(const nb_fwd_op *op, const char *name);
double nb_fwd_attr_float(const nb_fwd_op *op, const char *name);
bool nb_fwd_attr_bool(const nb_fwd_op *op, const char *name);
nb_dtype nb_fwd_attr_type(const nb_fwd_op *op, const char *name);
const int64_t *nb_fwd_attr_ints(const nb_fwd_op *op, const char *name, int *n);
const char *nb_fwd_attr_str(const nb_fwd_op *op, const char *name);

/* ---- custom gradients: tf.custom_gradient ---------------------------------------------------
   fwd computes out[0..nout) from in[0..nin) with op calls; grad gets in, out and their
   gradients dys and sets dxs (checked as nb_grad_fn's, errors naming _CustomGradient). The
   pair is one op: one tape entry, or one graph node whose gradient is grad. user must
   outlive every gradient computation. */
typedef nb_code (*nb_custom_fn)(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user);
typedef nb_code (*nb_custom_grad_fn)(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                                     nb_tensor *const *dys, nb_tensor **dxs, void *user);
nb_code nb_custom_gradient(nb_ctx *c, nb_custom_fn fwd, nb_custom_grad_fn grad, void *user, nb_tensor *const *in,
                           int nin, nb_tensor **out, int nout);
/* tf.recompute_grad: out = fn(in) as one op that keeps only in and out; its gradient runs
   fn again and differentiates that run. fn must be deterministic and take every tensor to
   differentiate as an input (a variable read inside gets no gradient). */
nb_code nb_recompute_grad(nb_ctx *c, nb_custom_fn fn, void *user, nb_tensor *const *in, int nin, nb_tensor **out,
                          int nout);

/* ---- eager forward mode: tf.autodiff.ForwardAccumulator -----------------------------------
   While an accumulator is active on an eager context, each op that reads a watched tensor
   or a tensor with a tangent computes its outputs' tangents as it runs (the op's forward
   rule; TF's transposed gradient where it has none). The tangent ops are eager ops like
   any: active tapes record them (reverse over forward), and accumulators begun before
   this one see them (forward over forward); ops a tape's gradient runs are seen too, so
   an accumulator around a tape gives Hessian-vector products (forward over reverse).
   Graph contexts: NULL with NB_INVALID (they use nb_jvp). */
typedef struct nb_forward_accumulator nb_forward_accumulator;
nb_forward_accumulator *nb_forward_accumulator_begin(nb_ctx *c);
/* x's tangent is tangent (same float dtype and shape, else NB_DTYPE / NB_SHAPE); again
   for the same x replaces it. */
nb_code nb_forward_accumulator_watch(nb_forward_accumulator *acc, nb_tensor *x, nb_tensor *tangent);
/* The tangent of y, a handle of the context's current scope; NULL when y is int/bool or
   does not depend on a watched tensor (TF's None). */
nb_tensor *nb_forward_accumulator_jvp(nb_forward_accumulator *acc, nb_tensor *y);
/* Stops it and frees its tangents (also done by nb_ctx_free). */
void nb_forward_accumulator_end(nb_forward_accumulator *acc);
/* Hessian-vector product of f's one output y (its sum when not scalar) at xs along vs,
   forward over reverse in both modes: eagerly f runs under an accumulator (outer) and a
   tape (inner); in a graph context f is traced and nb_hvp builds the product. out[j]: as
   nb_hvp's. */
nb_code nb_hvp_fn(nb_ctx *c, nb_custom_fn f, void *user, nb_tensor *const *xs, int nx, nb_tensor *const *vs,
                  nb_tensor **out);
/* The Jacobian dy/dx of f's one output y at x (shape y.shape + x.shape; float x and y),
   in both modes: f runs once, eagerly under a tape, and nb_tape_jacobian (eager) or
   nb_jacobian (graph) gives the Jacobian in the mode AUTO picks: forward (one JVP per
   element of x, JAX's jacfwd) when x has fewer elements than y, else reverse. */
nb_code nb_jacobian_fn(nb_ctx *c, nb_custom_fn f, void *user, nb_tensor *x, nb_tensor **out);

/* ---- composite ops (user-defined ops whose body is other ops) ------------------------------
   TF's composite-op framework: an op type whose body fn is written with
   public ops (as nb_custom_gradient's functions), taking nin inputs to nout outputs.
   nb_composite_op calls it: in a graph context the body is traced into a function graph
   (shaped like in) and the call is one StatefulPartitionedCall node of it, differentiated
   by the gradient nb_register_gradient registered under name (it sees the call node:
   inputs the body's arguments, then the graph tensors the body captured) or, without one,
   through the body; eagerly the body runs at once, so a tape differentiates through it,
   or, with a registered gradient, records the call as one entry whose gradient is that
   one, seeing the call as a graph's call node (type StatefulPartitionedCall, inputs the
   arguments, attr N their count; eagerly nothing is captured). user must outlive every
   call. Registration: NB_INVALID for an invalid or taken name (a composite or any op
   type; a later nb_register_op of a composite's name fails too), a NULL fn or counts out
   of range (message: nb_registry_error()). A call:
   NB_NOT_FOUND for an unknown name, NB_INVALID for wrong counts; a failing body fails
   the call with its code. Composites cannot be unregistered. */
nb_code nb_register_composite_op(const char *name, nb_custom_fn fn, void *user, int nin, int nout);
nb_code nb_composite_op(nb_ctx *c, const char *name, nb_tensor *const *in, int nin, nb_tensor **out, int nout);

/* ---- host callbacks: tf.py_func, tf.numpy_function, tf.py_function ------------------------
   A node that calls a C function at run time. nb_host_func_new wraps fn (and optionally
   grad, and user with its destructor) in a counted object; its reference is the caller's.
   nb_py_func adds a call of it on in[0..nin) (nin may be 0) giving out[0..nout >= 1), whose
   dtypes and shapes spec[0..nout) declares (rank -1: any shape; dims -1: any size): eager
   contexts run fn at once, graph contexts add a node (op PyFunc when stateful, else
   PyFuncStateless, TF's types) that runs fn each time a session runs it. A graph node
   holds a reference until its graph is freed: then the last release calls destroy(user).
   A stateless call whose inputs are all known when the graph is built is folded (fn runs
   once, then); a stateful one never is.
   fn receives the input values as concrete tensors of the context running the node and
   makes out[0..nout) there (nb_tensor_from, or any eager op; they may be its inputs); its
   other temporaries are freed after the call, and no tape records its ops. A failure fn
   reports (an error it set, or a code it returned) fails the call with that code and a
   message naming the op and, in a session, the node; so does an output that is NULL, not
   concrete (graph tensors, IndexedSlices), of another dtype than declared (NB_DTYPE), or
   of a shape that does not fit the declaration (NB_SHAPE).
   Gradients: without grad the node is not differentiable (TF's NotDifferentiable: its
   inputs get gradient none, not an error). With grad (tf.py_function's behaviour) the
   gradient is another host-callback node: grad receives the inputs, the outputs and the
   upstream gradients dys (NULL for int/bool outputs) and sets dxs[0..nin) with the
   inputs' dtypes and shapes (NULL: zeros); gradients of int/bool inputs are none. That
   node has no gradient of its own, so second-order gradients through it are none. A
   tape that recorded a call holds a reference to the function until it is reset or ended. */
typedef struct nb_host_func nb_host_func;
/* NULL when fn is NULL or out of memory. grad and destroy may be NULL. */
nb_host_func *nb_host_func_new(nb_custom_fn fn, nb_custom_grad_fn grad, void *user, void (*destroy)(void *user));
/* Drops one reference (NULL: nothing); the last calls destroy(user). */
void nb_host_func_release(nb_host_func *f);
/* In *grad a new reference to the host function that computes f's gradient (inputs: f's
   inputs, outputs and upstream gradients, int/bool outputs' as zeros; outputs: the inputs'
   gradients); NULL when f has no grad. NB_NOMEM when out of memory. */
nb_code nb_host_func_gradient(nb_host_func *f, nb_host_func **grad);
typedef struct nb_host_output {
  nb_dtype dtype;
  int rank;                   /* -1: any rank */
  int64_t shape[NB_MAX_RANK]; /* the first rank dims; -1: any size */
} nb_host_output;
nb_code nb_py_func(nb_ctx *c, nb_host_func *f, bool stateful, nb_tensor *const *in, int nin, const nb_host_output *spec,
                   nb_tensor **out, int nout);

/* ==== 5. The eager tape =================================================================== */

/* ---- eager tape: tf.GradientTape ----------------------------------------------------------
   An active tape on an eager context records the ops that read a watched tensor or a
   recorded op's output; its gradients run nb_gradients' gradient functions eagerly, and
   other active tapes (and a recording persistent one) record them: higher orders. A tape
   that is not persistent gives one gradient (a second: NB_INVALID). Int/bool and
   unconnected sources get NULL (zeros after nb_tape_set_unconnected_zero). Results belong
   to c's current scope; a tape is invalid after nb_tape_end or nb_ctx_free. */
nb_tape *nb_tape_begin(nb_ctx *c, int persistent);
void nb_tape_watch(nb_tape *t, nb_tensor *x);
void nb_tape_stop_recording(nb_tape *t); /* ops run until resume are not recorded */
void nb_tape_resume_recording(nb_tape *t);
void nb_tape_set_unconnected_zero(nb_tape *t, bool zero);
/* TF's reset(): drops every record and watch (variables too); the tape goes on recording,
   and a one-shot tape may give a gradient again. NB_INVALID, changing nothing, when t is
   not recording (stopped, or one-shot after its gradient), as TF's. */
nb_code nb_tape_reset(nb_tape *t);
/* out[i] = d(sum of targets)/d sources[i]; output_grads (NULL, or entries NULL) weight
   the targets like TF's output_gradients, ones by default. */
nb_code nb_tape_gradient(nb_tape *t, nb_tensor *const *targets, int nt, nb_tensor *const *sources, int ns,
                         nb_tensor *const *output_grads, nb_tensor **out);
/* The Jacobian d target / d source, of shape target.shape + source.shape (TF's jacobian).
   Forward mode (JAX's jacfwd: t's records replayed applying the forward rules, once per
   source element) when source has fewer elements than target, reverse mode otherwise
   (vectorized as TF's pfor); nb_tape_set_jacobian_mode forces one. The modes agree to
   rounding and fail alike, but for MaxPool with EXPLICIT padding, which has no JVP
   (docs/forward-mode.md). Not recorded on t itself. */
nb_code nb_tape_jacobian(nb_tape *t, nb_tensor *target, nb_tensor *source, nb_tensor **out);
/* tf's batch_jacobian: target [b, ...] and source [b, ...] where row i of target depends
   only on row i of source; result [b, target dims..., source dims...]. Forward mode when
   a source row has fewer elements than a target row (one replay per element of a row,
   seeded in every row), reverse otherwise, as nb_tape_jacobian. */
nb_code nb_tape_batch_jacobian(nb_tape *t, nb_tensor *target, nb_tensor *source, nb_tensor **out);
typedef enum nb_jacobian_path {
  NB_JACOBIAN_LOOP,       /* one backward pass per target element (or no Jacobian ran) */
  NB_JACOBIAN_VECTORIZED, /* one batched pass; every gradient function took the seed dim */
  NB_JACOBIAN_MIXED,      /* one batched pass; some ops ran their gradient once per seed */
  NB_JACOBIAN_FORWARD     /* forward mode: one replay of the tape per source element */
} nb_jacobian_path;
/* How t's last nb_tape_jacobian or nb_tape_batch_jacobian ran (LOOP after an error). */
nb_jacobian_path nb_tape_jacobian_path(const nb_tape *t);
/* The mode of t's Jacobians from now on (nb_jacobian_mode; AUTO when begun); another
   value: NB_INVALID. */
nb_code nb_tape_set_jacobian_mode(nb_tape *t, nb_jacobian_mode mode);
void nb_tape_end(nb_tape *t); /* also frees everything it recorded */

/* ---- tapes and variables ---------------------------------------------------------------- */
/* TF's watch_accessed_variables (default true): whether t watches trainable variables read
   while it records. Non-trainable variables are never watched automatically. */
void nb_tape_set_watch_accessed_variables(nb_tape *t, bool watch);
/* TF's watch(variable): t watches every read of v, trainable or not (NB_INVALID for a NULL
   or freed v); unlike nb_tape_watch of a read, v is listed by nb_tape_watched_variables. */
void nb_tape_watch_variable(nb_tape *t, nb_variable *v);
/* TF's watched_variables(): the variables t watches, each once, in order of creation; the
   first cap go to out, valid until nb_tape_reset or nb_tape_end (freed ones left out).
   Returns how many there are; -1 for t NULL, out NULL with cap > 0, or cap < 0. */
int nb_tape_watched_variables(const nb_tape *t, nb_variable **out, int cap);
/* nb_tape_gradient with the variables as sources: out[i] = d(sum of targets)/d vars[i]. */
nb_code nb_tape_gradient_vars(nb_tape *t, nb_tensor *const *targets, int nt, nb_variable *const *vars, int nv,
                              nb_tensor **out);

/* ==== 6. Control flow and functions ======================================================= */

/* ---- control flow: tf.while_loop, tf.cond -------------------------------------------------
   Eager contexts run the callbacks (tapes record them); graph contexts trace each once into
   a function graph, capturing the outer tensors it uses, and add one While or If node.
   Both differentiate to any order (docs/control-flow.md). The loop runs while cond writes
   true to *pred, at most max_iters times (< 0: no bound). body writes n results to next,
   each with its variable's dtype and shape (or nb_while_opts' relaxed shape), else an error
   naming it. nb_cond's branches map in[0..nin) to out[0..nout) of one dtype each. Results
   are new handles in c's current scope; callbacks and user are used only during the call.
   A callback (these, gradient and custom-gradient functions) that fails without setting
   an error, or leaves c's scopes unbalanced, fails its call with a message naming it. */
typedef nb_code (*nb_body_fn)(nb_ctx *c, nb_tensor *const *vars, nb_tensor **next, void *user);
typedef nb_code (*nb_cond_fn)(nb_ctx *c, nb_tensor *const *vars, nb_tensor **pred, void *user);
nb_code nb_while(nb_ctx *c, nb_cond_fn cond, nb_body_fn body, void *user, nb_tensor *const *vars, int n,
                 int64_t max_iters, nb_tensor **out);
nb_code nb_cond(nb_ctx *c, nb_tensor *pred, nb_body_fn then_fn, nb_body_fn else_fn, void *user, nb_tensor *const *in,
                int nin, nb_tensor **out, int nout);
/* A declared shape (TF's shape_invariants): rank -1 any rank, dims -1 any size. */
typedef struct nb_shape_spec {
  int rank;
  const int64_t *dims;
} nb_shape_spec;
typedef struct nb_while_opts {
  const nb_shape_spec *shapes; /* NULL, or one per loop variable: the shapes it may take */
} nb_while_opts;
/* nb_while with options (o may be NULL). */
nb_code nb_while_ex(nb_ctx *c, nb_cond_fn cond, nb_body_fn body, void *user, nb_tensor *const *vars, int n,
                    int64_t max_iters, const nb_while_opts *o, nb_tensor **out);
/* ---- function graphs: tf.function called in a graph (a StatefulPartitionedCall node) ---
   nb_function_new traces fn once: nin arguments shaped like like[0..nin), nout results,
   c's graph tensors it uses captured. c must be a graph context; the function belongs to
   its graph. NULL on error (set on c). */
typedef struct nb_function nb_function;
nb_function *nb_function_new(nb_ctx *c, nb_body_fn fn, void *user, nb_tensor *const *like, int nin, int nout);
/* Adds a call of f to c's graph (f's graph context) on in[0..nin) (nin: f's argument
   count, with its dtypes) giving out[0..nout). Its gradient is f's registered one, else
   the gradient of f's body (TF's SymbolicGradient), a function itself. */
nb_code nb_call_function(nb_ctx *c, nb_function *f, nb_tensor *const *in, int nin, nb_tensor **out, int nout);
/* Sets the gradient of calls of f: grad sees the call node (inputs: f's arguments, then
   the tensors f captured) like any gradient function. NULL restores SymbolicGradient. */
void nb_function_set_gradient(nb_function *f, nb_grad_fn grad);

/* ==== 7. Variables and optimizers ========================================================= */

/* ---- variables: tf.Variable --------------------------------------------------------------
   A variable owns its value outside every scope and context until nb_variable_free.
   Eager: a read shares the value, and a tape's gradient with respect to a read is the
   variable's (over all its reads); an update writes in place unless a read or tape still
   holds the value, which then keeps the old one. Graphs: reads and updates are nodes; in
   one nb_run every read sees the value from the start of the run and updates apply after
   it (fetch an update's tensor to run it). Running a node of a freed variable: NB_INVALID.
   Semantics in full: docs/variables.md. */
/* initial: a concrete tensor (its value is shared, not copied); name NULL: "Variable". */
nb_variable *nb_variable_new(nb_ctx *c, nb_tensor *initial, bool trainable, const char *name);
void nb_variable_free(nb_variable *v);
nb_tensor *nb_variable_read(nb_ctx *c, nb_variable *v);
/* value must have v's dtype and shape (else NB_DTYPE / NB_SHAPE naming v and both shapes).
   Eager: returns a read of the new value; graph: the update node's tensor. */
nb_tensor *nb_variable_assign(nb_ctx *c, nb_variable *v, nb_tensor *value);
nb_tensor *nb_variable_assign_add(nb_ctx *c, nb_variable *v, nb_tensor *value);
nb_tensor *nb_variable_assign_sub(nb_ctx *c, nb_variable *v, nb_tensor *value);
/* TF's ResourceScatterAdd / ResourceScatterSub (tf.Variable.scatter_add/sub): rows
   v[indices[i]] += updates[i] (-=); repeated indices accumulate. indices: int32/int64 of any
   shape, each in [0, v's rows) (else NB_INVALID naming the position, index and rows, at run
   time in graphs); updates: v's dtype (numeric), shape indices.shape + v's dims 1...
   Returns as nb_variable_assign_add. */
nb_tensor *nb_variable_scatter_add(nb_ctx *c, nb_variable *v, nb_tensor *indices, nb_tensor *updates);
nb_tensor *nb_variable_scatter_sub(nb_ctx *c, nb_variable *v, nb_tensor *indices, nb_tensor *updates);
const char *nb_variable_name(const nb_variable *v);
bool nb_variable_trainable(const nb_variable *v);
nb_dtype nb_variable_dtype(const nb_variable *v);
int nb_variable_rank(const nb_variable *v);
const int64_t *nb_variable_shape(const nb_variable *v);
/* The current value for host reads, row-major; valid until the next update of v. */
const void *nb_variable_data(const nb_variable *v);

/* ---- optimizers: Keras's, with TF's update ops ------------------------------------------------
   Each update is TF's ResourceApply* op on the variable and its slots, in place unless
   something holds the value. Slots (zeros) are made on a variable's first update and
   freed with the optimizer. Formulas (g the gradient, t the step counted from 1):
     SGD       var -= lr g                                        (ResourceApplyGradientDescent)
     Momentum  accum = momentum accum + g; var -= lr accum;       (ResourceApplyMomentum)
               nesterov: var -= lr (g + momentum accum)
     Adam      m += (g - m)(1 - beta1); v += (g^2 - v)(1 - beta2);  (ResourceApplyAdam)
               var -= lr sqrt(1 - beta2^t) / (1 - beta1^t) m / (sqrt(v) + epsilon)
     AdamW     var -= var weight_decay lr, then Adam (Keras's decoupled decay; ResourceApplyAdamW)
     RMSProp   ms += (g^2 - ms)(1 - rho); mom = momentum mom + lr g / sqrt(ms + epsilon);
               var -= mom                                         (ResourceApplyRMSProp)
               centered: mg += (g - mg)(1 - rho) and ms - mg^2 for ms (ResourceApplyCenteredRMSProp)
   RMSProp keeps epsilon inside the square root (TF's kernels); Keras's RMSprop without
   momentum puts it outside. Keras's defaults: Adam(0.001, 0.9, 0.999, 1e-7),
   RMSprop(0.001, 0.9, 0, 1e-7), AdamW weight_decay 0.004.
   IndexedSlices gradients update sparsely (repeated indices summed): SGD and Adam(W) as
   the dense update of the densified gradient, Momentum and RMSProp lazily as TF (untouched
   rows and their slots unchanged); docs/variables.md. Indices out of range: NB_INVALID. */
typedef struct nb_optimizer nb_optimizer;
nb_optimizer *nb_sgd_new(double learning_rate); /* NULL only when out of memory */
nb_optimizer *nb_momentum_new(double learning_rate, double momentum, bool nesterov);
nb_optimizer *nb_adam_new(double learning_rate, double beta1, double beta2, double epsilon);
nb_optimizer *nb_adamw_new(double learning_rate, double beta1, double beta2, double epsilon, double weight_decay);
nb_optimizer *nb_rmsprop_new(double learning_rate, double rho, double momentum, double epsilon, bool centered);
/* Frees the optimizer and its slots; a graph's update nodes that use them then fail with
   NB_INVALID when run. */
void nb_optimizer_free(nb_optimizer *o);
/* Updates vars[i] with grads[i] (a NULL gradient skips its variable, as TF) and counts one
   step. Eager: updates now; *train_op (may be NULL) is set to NULL. Graph: adds the update
   nodes and sets *train_op to the step counter's AssignAddVariableOp, which runs after
   every update: fetch it to train. Gradients must match their variable's dtype (f32, f64)
   and shape (IndexedSlices: their dense shape); on error nothing is updated. */
nb_code nb_optimizer_apply(nb_optimizer *o, nb_ctx *c, nb_tensor *const *grads, nb_variable *const *vars, int n,
                           nb_tensor **train_op);
/* Updates applied so far (Keras's iterations); schedules are evaluated at it. */
int64_t nb_optimizer_iterations(const nb_optimizer *o);
/* var's slot: "momentum" (Momentum, RMSProp), "m" and "v" (Adam, AdamW), "rms" and "mg"
   (RMSProp, centered); NULL before var's first update or for an unknown name. */
nb_variable *nb_optimizer_slot(const nb_optimizer *o, const nb_variable *var, const char *slot);

/* Learning-rate schedules, evaluated at the optimizer's step counter (in graph mode
   through the counter's variable, so they advance across nb_run calls). */
typedef enum { NB_LR_CONSTANT, NB_LR_STEP_DECAY, NB_LR_COSINE_DECAY } nb_lr_kind;
typedef struct nb_lr_schedule {
  nb_lr_kind kind;
  double initial;      /* the learning rate at step 0 */
  int64_t decay_steps; /* > 0 */
  double decay_rate;   /* step decay */
  double alpha;        /* cosine decay: the final fraction of initial */
} nb_lr_schedule;
/* initial * decay_rate^floor(step / decay_steps) (Keras's ExponentialDecay, staircase). */
nb_lr_schedule nb_step_decay(double initial, int64_t decay_steps, double decay_rate);
/* Keras's CosineDecay: initial * ((1 - alpha) (1 + cos(pi min(step, decay_steps) / decay_steps)) / 2 + alpha). */
nb_lr_schedule nb_cosine_decay(double initial, int64_t decay_steps, double alpha);
/* The learning rate at step; NaN for NULL or a decay with decay_steps <= 0. */
double nb_lr_schedule_value(const nb_lr_schedule *s, int64_t step);
/* Replaces the optimizer's learning rate; NB_INVALID when decay_steps <= 0. */
nb_code nb_optimizer_set_schedule(nb_optimizer *o, nb_lr_schedule s);

/* tf.clip_by_global_norm: global_norm = sqrt(sum of every grads[i]^2); out[i] = grads[i] *
   clip_norm / max(global_norm, clip_norm). NULL entries stay NULL; an infinite or NaN norm
   makes every output NaN. clip_norm must be > 0; every gradient one float dtype.
   global_norm may be NULL. IndexedSlices stay IndexedSlices (values scaled) and count by
   their values, as TF's: repeated indices are not summed first. */
nb_code nb_clip_by_global_norm(nb_ctx *c, nb_tensor *const *grads, int n, double clip_norm, nb_tensor **out,
                               nb_tensor **global_norm);

/* ---- data-parallel training across processes (Open MPI; docs/distributed.md) --------------
   Start the program with mpirun (-np N, -H host1,host2 across machines); every rank runs
   the same program on its shard of the data. Without mpirun a program is one process:
   rank 0 of 1, and every call below works (and averages over one). */
/* Joins the MPI job when mpirun started the process (MPI_Init_thread, MPI_THREAD_SERIALIZED,
   with MPI_ERRORS_RETURN); otherwise nothing. Collectives on threads without a device then
   run across the ranks. NB_INTERNAL when MPI fails to start. */
nb_code nb_dist_init(void);
/* Leaves the job (MPI_Finalize). NB_INTERNAL, without finalizing, after a collective failed
   or timed out: the ranks no longer agree, so the process should exit (mpirun reports it). */
nb_code nb_dist_finalize(void);
int nb_dist_rank(void); /* 0 .. nb_dist_size() - 1; 0 without mpirun */
int nb_dist_size(void); /* 1 without mpirun */
/* The watchdog of collectives whose timeout_seconds is 0 and of the calls below (seconds,
   > 0; default 600): a rank that waits longer for the others gets NB_INTERNAL naming the
   call, and every later collective of the job fails at once. */
void nb_dist_set_timeout(double seconds);
/* Sets vars[0..n) on every rank to rank 0's values. Every rank passes the same variables
   (dtype and shape; otherwise NB_INVALID naming the first that differs, on every rank). */
nb_code nb_dist_broadcast_variables(nb_ctx *c, nb_variable *const *vars, int n);
/* Gradient averaging (PyTorch DDP, Horovod): dense gradients are fused into buckets of
   about bucket_bytes (0: 25 MiB) whose non-blocking all-reduce starts while the backward
   pass computes the rest; IndexedSlices are all-gathered (values / size), not densified.
   A reducer serves one thread at a time. */
typedef struct nb_dist_reducer nb_dist_reducer;
nb_dist_reducer *nb_dist_reducer_new(size_t bucket_bytes); /* NULL only when out of memory */
void nb_dist_reducer_free(nb_dist_reducer *r);
/* overlap false: every bucket's all-reduce starts after the backward pass (for comparison). */
void nb_dist_reducer_set_overlap(nb_dist_reducer *r, bool overlap);
/* nb_tape_gradient_vars averaged over the ranks: out[i] = mean over ranks of d(sum of
   targets)/d vars[i], a dense gradient divided by the rank count before the sum (as
   PyTorch DDP does; nb_dist_average_gradients sums dense gradients, then divides, as TF's
   collectives do: with a rank count that is not a power of two the two differ in the last
   bits). A variable without a gradient on a rank counts as zeros there (so out[i] is
   never NULL). Every rank passes the same variables (else NB_INVALID naming the first
   that differs, on every rank). */
nb_code nb_dist_gradient_vars(nb_dist_reducer *r, nb_tape *t, nb_tensor *const *targets, int nt,
                              nb_variable *const *vars, int nv, nb_tensor **out);
/* For graphs (sessions) and eager tensors: out[i] = grads[i] averaged over the ranks by one
   CollectiveReduceV2 per bucket (IndexedSlices: CollectiveGatherV2, which needs as many rows
   on every rank); NULL stays NULL; out may be grads. Every rank must build the same buckets.
   A session starts each bucket's reduce without waiting and runs the steps after it until
   one reads the average. */
nb_code nb_dist_average_gradients(nb_dist_reducer *r, nb_ctx *c, nb_tensor *const *grads, int n, nb_tensor **out);

/* ==== 8. Data and files =================================================================== */

/* ---- data: IDX files and image datasets ----------------------------------------------------
   IDX is the format of the MNIST family (gzip-compressed or raw; docs/file-formats.md).
   Errors name the file: NB_IO when it cannot be opened or read or is not a regular file;
   NB_CORRUPT when it is not a valid IDX file (bytes after the declared data included). */
typedef struct nb_dataset nb_dataset;

/* The file's elements as a tensor of its dims: ubyte, byte, short and int as int32, float
   as float32, double as float64. Eager contexts only (NB_INVALID in a graph context: feed
   the values to a placeholder). */
nb_tensor *nb_idx_read(nb_ctx *c, const char *path);

/* An image classification dataset from an IDX images file ([count, rows, cols] ubyte)
   and a labels file ([count] ubyte); pixels stay bytes until batched. Errors go to c:
   NB_DTYPE / NB_SHAPE for another type or rank, NB_CORRUPT when the counts differ. The
   dataset belongs to the caller (nb_dataset_free), not to c. */
nb_dataset *nb_dataset_idx(nb_ctx *c, const char *images_path, const char *labels_path);

/* Where Debian's package dataset-fashion-mnist puts the files. */
#define NB_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
/* Fashion-MNIST from dir (NULL: NB_FASHION_MNIST_DIR): train-images-idx3-ubyte.gz and
   train-labels-idx1-ubyte.gz (60000 items) when train, else the t10k-* files (10000).
   Also NB_CORRUPT unless the images are 28x28 and the labels 0..9. */
nb_dataset *nb_fashion_mnist(nb_ctx *c, const char *dir, bool train);

int64_t nb_dataset_size(const nb_dataset *d); /* items; -1 for NULL */
void nb_dataset_image_dims(const nb_dataset *d, int64_t *rows, int64_t *cols);
/* Sets the batch order to a permutation that depends on seed alone (not on earlier
   shuffles, the machine or the C library). Shuffle with seed + epoch for a new order. */
nb_code nb_dataset_shuffle(nb_dataset *d, uint64_t seed);

typedef enum {
  NB_IMAGES_NHWC, /* [n, rows, cols, 1] (TF's default for Conv2D) */
  NB_IMAGES_NCHW, /* [n, 1, rows, cols] */
  NB_IMAGES_FLAT  /* [n, rows * cols] (dense layers) */
} nb_image_layout;
/* Items first .. first + n - 1 of the current order: *images float32 in layout with each
   pixel scaled to [0, 1] (pixel / 255), *labels int32 [n]. Allocates those two tensors
   and nothing else. Eager contexts only (graphs take batches through placeholders).
   NB_INVALID for a range outside the dataset or an unknown layout. */
nb_code nb_dataset_batch(nb_ctx *c, const nb_dataset *d, int64_t first, int64_t n, nb_image_layout layout,
                         nb_tensor **images, nb_tensor **labels);
void nb_dataset_free(nb_dataset *d);

/* ---- data: .npy files (NumPy's format) ----------------------------------------------------
   Versions 1.0 to 3.0, C order, either byte order; narrower ints widen to int32/int64
   losslessly. Errors name the file: NB_IO (cannot open, read or write; not a regular
   file), NB_CORRUPT (not a valid .npy file, or bytes after the data), NB_DTYPE (a dtype
   nabla lacks), NB_UNIMPLEMENTED (Fortran order), NB_SHAPE (rank above NB_MAX_RANK). */
/* The file as a tensor. Eager contexts only (NB_INVALID in a graph context). */
nb_tensor *nb_npy_read(nb_ctx *c, const char *path);
/* Writes concrete x (IndexedSlices as the dense tensor they stand for) as a version 1.0
   file in this machine's byte order, the data aligned to 64 bytes as NumPy does. NB_INVALID
   for a symbolic tensor; NB_IO naming the file when it cannot be written (a failed write
   may leave a partial file). */
nb_code nb_npy_write(nb_ctx *c, const nb_tensor *x, const char *path);

/* ---- checkpoints: TF's V2 format (tf.train.Checkpoint, tf.compat.v1.train.Saver) ------------
   PREFIX.index and PREFIX.data-00000-of-00001, which TF reads and writes. Tensor keys are
   keys[i] for vars[i] (NULL: the variables' names); an optimizer's counter and slots get
   TF's keys (docs/file-formats.md). Saving is atomic, one saver per prefix at a time.
   Errors go to c naming file and key: NB_IO, NB_CORRUPT (bad CRC, truncated, unreadable),
   NB_NOT_FOUND (missing key), NB_DTYPE / NB_SHAPE (mismatch), NB_UNIMPLEMENTED (sharded). */
/* Writes vars (and opt's step counter and slots when opt is not NULL) under prefix. Keys
   must be distinct and not empty (NB_INVALID). */
nb_code nb_checkpoint_save(nb_ctx *c, const char *prefix, nb_variable *const *vars, const char *const *keys, int n,
                           const nb_optimizer *opt);
/* Reads vars (and opt's counter and slots; a missing slot restarts from zeros) back from
   prefix, CRCs checked. All or nothing: on an error (short of running out of memory) no
   variable, slot or counter changes. */
nb_code nb_checkpoint_restore(nb_ctx *c, const char *prefix, nb_variable *const *vars, const char *const *keys, int n,
                              nb_optimizer *opt);
/* One tensor of a checkpoint (tf.train.list_variables). */
typedef struct nb_checkpoint_entry {
  char *key;
  nb_dtype dtype;
  int rank;
  int64_t shape[NB_MAX_RANK];
} nb_checkpoint_entry;
/* The checkpoint's tensors of nabla's dtypes, in key order (others, like TF 2's string
   object graph, are left out): *entries (free with nb_checkpoint_list_free) and *n. */
nb_code nb_checkpoint_list(nb_ctx *c, const char *prefix, nb_checkpoint_entry **entries, int *n);
void nb_checkpoint_list_free(nb_checkpoint_entry *entries, int n);

/* ---- GraphDef (TensorFlow graphs in and out) ---------------------------------------------------
   TF's binary GraphDef (tf.Graph.as_graph_def, tf.io.write_graph with as_text=False), with its
   function library. docs/file-formats.md lists what imports. */
/* Adds the file's nodes to c's graph (c a graph context), named as in the file, so
   nb_graph_tensor_by_name(c, "dense/MatMul:0") finds them. Frozen graphs (Const weights),
   variables (VarHandleOp with ReadVariableOp and Assign*VariableOp, or TF 1's VariableV2:
   nabla variables, zeros until assigned, owned by the graph), Placeholder (unknown dims
   too) and PlaceholderWithDefault, NoOp and control inputs, Identity and IdentityN, calls
   (StatefulPartitionedCall, PartitionedCall), While and If (and their Stateless forms) with
   their FunctionDefs, which become nabla function graphs. All or nothing: on an error the
   graph is unchanged. Errors: NB_IO (cannot read the file), NB_CORRUPT (not a GraphDef, or a
   bad node: a missing input, a cycle, an attr of the wrong kind, naming node and attr),
   NB_UNIMPLEMENTED (ops nabla does not have, every one listed with its nodes), NB_DTYPE (a
   dtype nabla lacks), NB_INVALID (a node name the graph already has). TF 1 control flow
   (Switch, Merge, Enter, Exit, NextIteration, LoopCond) is raised into While and If. */
nb_code nb_graph_read_graphdef(nb_ctx *c, const char *path);
/* The same from size bytes of a serialized GraphDef at data. */
nb_code nb_graph_read_graphdef_buffer(nb_ctx *c, const void *data, size_t size);
/* Fine-tuning a frozen graph: the Const node const_node_name of c's graph becomes the read of
   a new trainable variable holding its value (*out, owned by the graph, named as the node),
   so its consumers read the variable and gradients and optimizers reach it. Handles of the
   node's tensors made before keep the old constant: take new ones. NB_NOT_FOUND without such
   a node, NB_INVALID when it is not a Const. */
nb_code nb_graph_const_to_variable(nb_ctx *c, const char *const_node_name, nb_variable **out);
/* The variables imports (and nb_graph_const_to_variable) made in c's graph, in file order:
   the first cap go to out; returns their count (-1 for a NULL or eager c). The graph owns them. */
int nb_graph_variables(nb_ctx *c, nb_variable **out, int cap);
/* Writing: TF's binary GraphDef, which tf.compat.v1.import_graph_def loads: nodes keep
   their names, TF op types and attrs (inferred ones such as T and Tidx included),
   control inputs and Const values; variables become VarHandleOps (uninitialized, named by
   the variable) read and updated through their resource; nb_while, nb_cond and function
   calls become While, If and StatefulPartitionedCall with their function graphs in the
   library; internal ops are lowered to TF's (docs/file-formats.md). The same graph always
   gives the same bytes. Errors: NB_INVALID (NULL arguments), NB_UNIMPLEMENTED naming the node
   (host callbacks; nodes TF cannot express), NB_IO naming the file, NB_NOMEM; the message
   is nb_graph_error(g). */
nb_code nb_graph_write_graphdef(const nb_graph *g, const char *path);
/* The same bytes in *data (free with free()) and *size. */
nb_code nb_graph_write_graphdef_buffer(const nb_graph *g, void **data, size_t *size);
/* The message of the last graph-level call on g that failed ("" after one that succeeded;
   GraphDef export), valid until the next such call on g. */
const char *nb_graph_error(const nb_graph *g);

/* ---- SavedModel: TF's tf.saved_model.save and Keras' model.export, read --------------------------
   DIR/saved_model.pb (the MetaGraphDef of the tags asked), its signatures, and its variables
   from DIR/variables/variables.{index,data-00000-of-00001}. The graph the signatures need is
   imported into c's graph, named as in the file (GraphDef rules: nb_graph_read_graphdef);
   each variable becomes a nabla variable owned by the graph, holding the checkpoint's value.
   A variable's checkpoint key is found as TF's loader finds it: a call node's traced function
   (SavedObjectGraph.concrete_functions) binds its captured inputs to object-graph nodes, and a
   variable node's key is its path from the root ("layer/kernel/.ATTRIBUTES/VARIABLE_VALUE");
   a variable no call binds (TF 1's SavedModels) has its node's name as key. Details:
   docs/file-formats.md. */
typedef struct nb_saved_model nb_saved_model;
typedef struct nb_saved_model_tensor {
  const char *key;  /* the signature's name for it: "x", "output_0" */
  const char *name; /* the graph's tensor: "serving_default_x:0" (nb_graph_tensor_by_name) */
  nb_dtype dtype;
  int rank;                   /* -1: unknown */
  int64_t shape[NB_MAX_RANK]; /* -1: an unknown dim */
} nb_saved_model_tensor;
typedef struct nb_saved_model_signature {
  const char *name;   /* "serving_default" */
  const char *method; /* "tensorflow/serving/predict" */
  int ninputs, noutputs;
  const nb_saved_model_tensor *inputs, *outputs; /* each in key order */
} nb_saved_model_signature;
/* Loads dir's MetaGraphDef tagged with every tag of tags (comma-separated; NULL: "serve")
   into c's graph (c a graph context) and sets *out (the caller's: nb_saved_model_free).
   Signatures TF reserves (__saved_model_init_op) are left out. Errors on c naming the file:
   NB_IO (no saved_model.pb, no variables), NB_CORRUPT (not a SavedModel, a signature naming
   no node), NB_NOT_FOUND (no MetaGraphDef with those tags, listing the tag sets there are; a
   variable's key missing from the checkpoint), NB_DTYPE (a signature tensor of a dtype nabla
   lacks), and the GraphDef import's and checkpoint restore's errors. Nothing is imported
   unless the checkpoint holds every variable's key (with its shape); a checkpoint whose data
   fail their CRCs when read leaves the imported graph with zero variables. */
nb_code nb_saved_model_load(nb_ctx *c, const char *dir, const char *tags, nb_saved_model **out);
void nb_saved_model_free(nb_saved_model *m);                /* the graph keeps its nodes and variables */
int nb_saved_model_num_signatures(const nb_saved_model *m); /* -1 for NULL */
/* Signature i (in name order), or the one named name; NULL when there is none. Valid until
   nb_saved_model_free. */
const nb_saved_model_signature *nb_saved_model_signature_at(const nb_saved_model *m, int i);
const nb_saved_model_signature *nb_saved_model_find_signature(const nb_saved_model *m, const char *name);
/* sig's tensors as handles in c (a context of the graph m was loaded into): inputs[i] for
   sig->inputs[i] (placeholders to feed), outputs[i] for sig->outputs[i]; either array may
   be NULL. NB_NOT_FOUND when c's graph lacks one. */
nb_code nb_saved_model_signature_tensors(nb_ctx *c, const nb_saved_model_signature *sig, nb_tensor **inputs,
                                         nb_tensor **outputs);
/* The variables the imported graph reads (its trainable weights), in checkpoint-key order:
   variable i (owned by the graph; NULL out of range) and its checkpoint key. */
int nb_saved_model_num_variables(const nb_saved_model *m);
nb_variable *nb_saved_model_variable(const nb_saved_model *m, int i);
const char *nb_saved_model_variable_key(const nb_saved_model *m, int i);

/* ==== 9. Checking ========================================================================= */

/* ---- checking -------------------------------------------------------------------------- */
/* Numeric Jacobian of y with respect to xs (float64 central differences at x_values, fed
   to xs) against the symbolic one; *max_error is the largest absolute difference. */
nb_code nb_gradcheck(nb_ctx *c, nb_tensor *y, nb_tensor *const *xs, int nx, nb_tensor *const *x_values,
                     double *max_error);
/* Writes into report every op on a path from xs to ys that has no gradient, with its name,
   type and a path; returns NB_OK (report "" when there is none). */
nb_code nb_find_non_differentiable(nb_graph *g, nb_tensor *const *xs, int nx, nb_tensor *const *ys, int ny,
                                   char *report, size_t cap);

#if defined(NB_BUILDING) && defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif
