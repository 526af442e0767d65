/* Internal op definitions: one table entry per TF op type, shared by every mode. */
#ifndef NBOP_H
#define NBOP_H

#include "../core/core.h"

#define NBOP_MAX_ATTRS 6
#define NBOP_VARIADIC (-1)
#define NBOP_SCRATCH_BYTES 1280
/* Internal status from infer: a needed input value is not known at graph build time, so
   the output shapes are left to run time. Never reaches users. */
#define NBOP_DEFER ((nb_code)100)

/* dtype masks for input checks */
#define NBOP_M(t) (1u << (t))
#define NBOP_M_FLOAT (NBOP_M(NB_F32) | NBOP_M(NB_F64))
#define NBOP_M_INT (NBOP_M(NB_I32) | NBOP_M(NB_I64))
#define NBOP_M_NUM (NBOP_M_FLOAT | NBOP_M_INT)
#define NBOP_M_ALL (NBOP_M_NUM | NBOP_M(NB_BOOL))

/* A type attr's default meaning "not given": TF infers it from an input (SrcT, Index, U). */
#define NBOP_TYPE_UNSET ((nb_dtype)(NB_BOOL + 1))

/* A resolved attribute value (the kind is the spec's). */
typedef struct nbop_attrval {
  int64_t i;
  double f;
  bool b;
  const char *s;
  const int64_t *ints;
  const double *floats;
  const nb_dtype *types;
  int n; /* length of ints, floats or types */
  nb_dtype type;
  nb_tensor *tensor;
} nbop_attrval;

typedef struct nbop_attr_spec {
  const char *name;
  nb_attr_kind kind;
  nbop_attrval def; /* TF's default */
  bool required;    /* no default: must be given */
} nbop_attr_spec;

/* What an attr may hold beyond its kind, checked on every call (nbop_kvalidate). Beside
   the specs rather than in them, so the specs stay four positional fields. */
typedef struct nbop_attr_check {
  unsigned types;             /* type attrs: the dtypes allowed (NBOP_M mask); 0: every dtype */
  int8_t of_input;            /* type attrs: 1 + the input whose dtype a given value must name; 0 none */
  const char *const *choices; /* string attrs: the values allowed, NULL-terminated; NULL: any */
} nbop_attr_check;

/* Static facts about one output, computed by inference. */
typedef struct nbop_meta {
  nb_dtype dtype;
  int rank;
  int64_t shape[NB_MAX_RANK];
} nbop_meta;

typedef struct nbop_def nbop_def;

/* Everything an op's infer and kernel functions see for one call. */
typedef struct nbop_kargs {
  nb_ctx *ctx;
  const nbop_def *def;
  int nin, nout;
  nb_tensor *const *in;      /* what infer and kernel read (graphs: known values substituted) */
  nb_tensor *const *orig_in; /* the caller's inputs */
  bool deferred;             /* graphs: output shapes unknown until run time */
  const char *node_name;     /* graphs: the name of the node being built */
  nbop_attrval attr[NBOP_MAX_ATTRS];
  nbop_meta *out;  /* infer fills out[0..nout) */
  nb_tensor **res; /* the kernel writes res[i]'s data (allocated from out[i]) */
  int threads;
  /* State infer hands to the kernel (a broadcast plan, a reduction plan, ...). */
  _Alignas(16) unsigned char scratch[NBOP_SCRATCH_BYTES];
} nbop_kargs;

struct nbop_def {
  const char *name;       /* TF's op type */
  int8_t nin;             /* fixed inputs (those after the list when variadic) */
  bool variadic;          /* inputs begin with a list of N >= 1 tensors (attr "N") */
  bool empty_list;        /* variadic: the list may be empty, N >= 0 (PyFunc's Tin) */
  int8_t nout;            /* NBOP_VARIADIC: infer sets k->nout's metas from attrs */
  int8_t alias;           /* output 0 shares the buffer of this input (a view); -1 none */
  int8_t t_input;         /* the input whose dtype TF's attr "T" names, and by default
                              the output dtype */
  int8_t dtype_attr;      /* 1 + slot of the type attr that gives the output dtype; 0 none */
  bool bool_out;          /* outputs are bool (comparisons, logical ops) */
  bool shape_only;        /* reads only its inputs' shapes (Shape): foldable when they are known */
  bool elementwise;       /* output = broadcast of the inputs, each element from the inputs'
                              elements at its position, and the gradient function likewise
                              (elementwise ops and broadcast reductions only): it stays right
                              when every tensor gains a leading batch dim (vectorized Jacobians) */
  bool batch_leading;     /* the gradient stays right when every float tensor gains a
                              leading batch dim (its other inputs unchanged): Reshape's,
                              which reshapes dy to x's shape (vectorized Jacobians) */
  int8_t axis_input;      /* 1 + the input holding axes (Sum, Cumsum, ...), 0 none: as
                              batch_leading, with these axes moved past the batch dim */
  int8_t perm_input;      /* 1 + the input holding a permutation (Transpose), 0 none: as
                              batch_leading, with the permutation [0, perm + 1] */
  const char *batched_as; /* vectorized Jacobians: the op whose gradient, run on this op's
                              tensors with a leading batch dim (same attr layout), is this
                              op's batched gradient (BatchMatMulV2 for MatMul) */
  int8_t inplace_input;   /* 1 + an input whose block output 0 (same dtype and shape) may
                              take over when the input dies at this op and nothing else holds
                              it (input forwarding; elementwise ops consider inputs 0 and 1), 0 none */
  bool stateful;          /* reads or writes state outside its inputs (variables): never
                              folded at graph build time (TF's SetIsStateful) */
  uint8_t nattrs;
  nbop_attr_spec attrs[NBOP_MAX_ATTRS];
  nbop_attr_check checks[NBOP_MAX_ATTRS]; /* checks[i]: what attrs[i] may hold */
  /* The checks that need no dims: input dtypes, attr values, ranks where known, and
     values of inputs such as axes where known (a graph input may have dims -1 and rank
     -1). Every call runs it before infer, whatever the dims, so a bad graph fails when it
     is built; infer (shape arithmetic) and the kernel rely on what it checked. */
  nb_code (*validate)(nbop_kargs *k);
  nb_code (*infer)(nbop_kargs *k);
  nb_code (*kernel)(nbop_kargs *k);
  const void *impl; /* family data: per-dtype loops, a scalar function, ... */
  int id;           /* dense index assigned by the registry: the op's slot in
                              per-op tables such as the gradient registry */
  bool any_rank;    /* infer handles inputs of unknown rank itself (control flow:
                              the outputs come from function graphs), so graphs call it
                              where they would otherwise give up on the output shapes */
  /* Ops whose attrs hold a counted reference (a host callback's function): a graph node
     takes one (delta +1) once it is added and drops it (-1) when its graph is freed, so
     what the node calls lives as long as the node. NULL: attrs hold no references. */
  void (*hold_attrs)(const nbop_attrval *attr, int delta);
};

/* The most ops the registry holds; nbop_def.id is below it (per-op tables size by it). */
#define NBOP_MAX_OPS 512

/* A family file exports its table through one of these. */
typedef struct nbop_family {
  nbop_def *defs;
  int n;
} nbop_family;

/* registry */
void nbop_registry_init(void);
const nbop_def *nbop_lookup(const char *type);
int nbop_count(void);
const nbop_def *nbop_by_id(int id);
/* Whether def is one of nabla's own ops, not one nb_register_op added. */
bool nbop_is_builtin(const nbop_def *def);
/* Adds a user's op (nb_register_op) and sets its id: NB_INVALID when the name is taken
   (by an op or a reservation), NB_NOMEM when the registry is full. def must live as long as the process. */
nb_code nbop_add(nbop_def *def);
/* Reserves name for a type the layers above define (a composite op): later nbop_add and
   nbop_reserve_name calls with it fail. NB_INVALID when an op or a reservation holds it,
   NB_NOMEM when out of memory. name must live as long as the process. */
nb_code nbop_reserve_name(const char *name);
/* TF's op names: [A-Z][A-Za-z0-9_>]*, at most 128 characters. */
bool nbop_valid_op_name(const char *s);
/* Records this thread's registry error (nb_registry_error) and returns code. */
nb_code nbop_registry_fail(nb_code code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void nbop_registry_clear_error(void);

/* dispatch: attrs NULL means the defaults */
nb_code nbop_dispatch(nb_ctx *c, const nbop_def *def, nb_tensor *const *in, int nin, const nbop_attrval *attrs,
                      nb_tensor **out, int nout);
nb_tensor *nbop_call(nb_ctx *c, const nbop_def *def, nb_tensor *const *in, int nin, const nbop_attrval *attrs);
/* The one output of op def on inputs a and b (attrs at their defaults). */
static inline nb_tensor *nbop_call_pair(nb_ctx *c, const nbop_def *def, nb_tensor *a, nb_tensor *b) {
  nb_tensor *in[2] = {a, b};
  return nbop_call(c, def, in, 2, NULL);
}
void nbop_attr_defaults(const nbop_def *def, nbop_attrval *vals);
/* A copy of def's attr values in a, with string and list values copied into a too (tensor
   values are left to the caller); NULL when out of memory or when def has no attrs. */
nbop_attrval *nbop_attrs_copy(nbcore_arena *a, const nbop_def *def, const nbop_attrval *attr);
/* dense[i] = in[i], with IndexedSlices densified (src/ops/indexed_slices.c). */
nb_code nbop_densify_inputs(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **dense);
/* The sum of IndexedSlices x[0..n) of one dtype and dense shape: all parts concatenated at once. */
nb_tensor *nbop_indexed_slices_concat_n(nb_ctx *c, nb_tensor *const *x, int n);
/* in[0..n) as dense tensors in *dense: in itself when none is IndexedSlices (*owned NULL),
   else a new array (*owned, which the caller frees) of densified ones. */
nb_code nbop_densify_list(nb_ctx *c, nb_tensor *const *in, int n, nb_tensor *const **dense, nb_tensor ***owned);
/* In *m, the most specific shape compatible with the static shapes of xs[0..n) (TF's
   merge_with; NULL entries skipped; rank -1 when no rank is known). False when one does
   not fit those before it: *conflict is its index (else -1), *m their merge. */
bool nbop_merge_shapes(nb_tensor *const *xs, int n, nbop_meta *m, int *conflict);
/* Checks a wrapper's own arguments before dispatch (NULL inputs and such). */
bool nbop_live(nb_ctx *c);
/* A temporary 1-D int tensor for a wrapper's const input; free it after the call. */
nb_tensor *nbop_const_ints(nb_ctx *c, nb_dtype t, const int64_t *v, int n);
nb_tensor *nbop_const_int_list(nb_ctx *c, const int *v, int n);

/* helpers for validate, infer and kernel functions */
nb_code nbop_kfail(nbop_kargs *k, nb_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
nb_code nbop_vkfail(nbop_kargs *k, nb_code code, const char *fmt, va_list ap);
/* Type attr slot's check (its spec's allowed types, of_input), which nbop_kvalidate runs. */
nb_code nbop_kcheck_type_attr(nbop_kargs *k, int slot);
/* The attrs' checks (types, of_input, choices), then the op's validate. */
nb_code nbop_kvalidate(nbop_kargs *k);
/* The position of string attr slot's value among its choices (validated: present). */
int nbop_kchoice(const nbop_kargs *k, int slot);
/* Fails unless input i's rank is unknown or in [lo, hi]; what names the input in the message. */
nb_code nbop_kcheck_rank(nbop_kargs *k, int i, int lo, int hi, const char *what);
/* Fails when a result of rank rank (known: >= 0) would pass NB_MAX_RANK; what names it. */
nb_code nbop_kcheck_out_rank(nbop_kargs *k, int rank, const char *what);
/* Whether x and y can have one shape (TF's is_compatible_with): ranks equal where known,
   dims equal where both are known (-1: unknown). */
bool nbop_shapes_compatible(const nb_tensor *x, const nb_tensor *y);
/* Whether shapes a (rank ra) and b can broadcast: aligned at the right, no two known dims
   differ unless one is 1 (unknown ranks, -1, and dims always can). */
bool nbop_broadcastable(int ra, const int64_t *a, int rb, const int64_t *b);
/* infer for ops whose output 0 is like input 0 (dtype and shape). */
nb_code nbop_infer_same(nbop_kargs *k);
/* Normalizes axis into [0, rank) in *a, or fails naming what ("axis", "dim", ...) and the
   valid range; with rank unknown (< 0) it passes and leaves *a -1. */
nb_code nbop_kaxis(nbop_kargs *k, int64_t axis, int rank, const char *what, int *a);
/* Fails unless input i's dtype is in mask. */
nb_code nbop_kcheck_dtype(nbop_kargs *k, int i, unsigned mask);
/* Fails unless inputs i and j have the same dtype. */
nb_code nbop_kcheck_same_dtype(nbop_kargs *k, int i, int j);
/* Reads the values of int input i (int32 or int64, rank <= max_rank) into v[0..*n). */
nb_code nbop_kints(nbop_kargs *k, int i, int max_rank, int64_t *v, int cap, int *n);
/* Shape string in a rotating thread-local buffer, for messages. */
const char *nbop_sstr(int rank, const int64_t *shape);
static inline const char *nbop_tstr(const nb_tensor *x) { return nbop_sstr(x->rank, x->shape); }
static inline void nbop_meta_set(nbop_meta *m, nb_dtype t, int rank, const int64_t *shape) {
  m->dtype = t;
  m->rank = rank;
  for (int i = 0; i < rank; i++) m->shape[i] = shape[i];
}
static inline void nbop_meta_like(nbop_meta *m, const nb_tensor *x) { nbop_meta_set(m, x->dtype, x->rank, x->shape); }
/* Runs fn(arg, lo, hi) over [0, n) split into nt contiguous ranges (nt 1: one call). */
typedef void (*nbop_range_fn)(void *arg, int64_t lo, int64_t hi);
void nbop_parallel_range(int nt, int64_t n, nbop_range_fn fn, void *arg);
/* Which of nbop_parallel_range's threads runs the calling range function: 0 .. nt - 1, and
   0 when it ran the whole range itself. Per-thread scratch is indexed by it, never by
   omp_get_thread_num(), which inside an enclosing parallel region (a session running two
   steps at once) numbers the outer team's threads. */
int nbop_range_slot(void);
/* Threads worth using for a loop over n elements (1 below the parallel threshold). */
int nbop_kthreads(const nbop_kargs *k, int64_t n);

/* Compute-bound loops get AVX-512 and AVX2+FMA clones beside the baseline one, picked at
   load time, so one binary runs well on any x86-64. */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones) && !defined(__SANITIZE_ADDRESS__)
#define NBOP_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define NBOP_SIMD_CLONE_NAMES "x86-64-v4|x86-64-v3|default" /* for nb_build_info */
#endif
#endif
#ifndef NBOP_SIMD_CLONES
#define NBOP_SIMD_CLONES
#endif

/* The float sums of the Reduce kernel (reduce.c), which the fused kernel adds blocks with
   so that its sums have the same bits: *acc += x[0..n) (a short segment in order, a longer
   one in 8 interleaved partial sums added last), or acc[j] += x[j] for j < n; acc in
   double, x of t (float32 or float64). */
void nbop_float_sum_segment(nb_dtype t, double *acc, const void *x, int64_t n);
void nbop_float_sum_rows(nb_dtype t, double *acc, const void *x, int64_t n);

/* families (one file each in src/ops) */
nbop_family nbop_math_family(void);
nbop_family nbop_reduce_family(void);
nbop_family nbop_linalg_family(void);
nbop_family nbop_array_family(void);
nbop_family nbop_slicing_family(void);
nbop_family nbop_custom_family(void);
nbop_family nbop_nn_family(void);
nbop_family nbop_variable_family(void);
nbop_family nbop_training_family(void);
/* batch normalization (norm.c) */
nbop_family nbop_norm_family(void);
/* stateless random numbers (random.c) */
nbop_family nbop_random_family(void);
nbop_family nbop_conv_family(void);
/* While and If: functional control flow (control_flow.c) */
nbop_family nbop_control_flow_family(void);
/* PyFunc and PyFuncStateless: host callbacks (host_callback.c) */
nbop_family nbop_host_callback_family(void);
/* CollectiveReduceV2, CollectiveGatherV2, the broadcasts, NcclAllReduce (collective.c) */
nbop_family nbop_collective_family(void);
/* _FusedElementwise: the optimizer's fused elementwise ops (fused.c) */
nbop_family nbop_fused_family(void);

/* While, If and StatefulPartitionedCall run function graphs, which sit in src/func, above
   ops, runtime and autodiff. Their defs are in the control-flow family like every op's,
   so the registry, op ids and lookups by name do not depend on the layers above; their
   validate, infer and kernel, which need function graphs, are src/func's: it installs
   them with nbop_install_function_ops before it makes its first function (a lower layer
   never calls up; this is the hook the upper one fills, as graph contexts fill nb_ctx's).
   No node of these ops can exist without a function (their function attrs are internal,
   out of nb_op's reach), so nothing calls the entries before. */
enum { NBOP_WHILE_OP, NBOP_IF_OP, NBOP_CALL_OP, NBOP_FUNCTION_OPS };
typedef struct nbop_impl {
  nb_code (*validate)(nbop_kargs *k);
  nb_code (*infer)(nbop_kargs *k);
  nb_code (*kernel)(nbop_kargs *k);
} nbop_impl;
void nbop_install_function_ops(const nbop_impl impl[NBOP_FUNCTION_OPS]);
/* A While that accumulates a value of unknown or largest-rank shape stacks it ragged: its
   values flat plus an index, int64 [count, NBOP_CF_INDEX_COLS], whose row i holds value i's
   offset, rank and dims (src/func/function_ops.c writes it, _RaggedGet reads it). */
enum { NBOP_CF_INDEX_COLS = 2 + NB_MAX_RANK };
/* The internal op behind nb_custom_gradient, and its attr slots. */
enum { NBOP_CUSTOM_N, NBOP_CUSTOM_NUM_OUTPUTS, NBOP_CUSTOM_GRAD_FN, NBOP_CUSTOM_USER };
const nbop_def *nbop_custom_gradient_def(void);
/* _RecomputeGrad: the same layout, with the forward function (NBOP_CUSTOM_GRAD_FN's slot) in its place. */
const nbop_def *nbop_recompute_grad_def(void);

#endif
