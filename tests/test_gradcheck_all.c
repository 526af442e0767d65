/* Registry-wide gradient check: every op type with a registered gradient is built in a
   graph over several input shapes (scalars, size-1 dims, broadcasting), and its symbolic
   Jacobian is compared with float64 central differences (nb_gradcheck), first and second
   order. The cases are data (the tables below); the test fails when an op that has a
   gradient has no case, so a new differentiable op cannot go unchecked.

   Second order: g_i = d(sum(y * W))/dx_i for a fixed random W (grad_ys = W), then
   y2 = sum_i sum(g_i * V_i) for fixed random V_i, and y2 is gradchecked in turn. Every
   case runs twice: with static placeholder shapes, and with every dim unknown.

   Tape mode: every case also runs eagerly under two nested tapes (the inner one's gradient
   recorded by the outer one), and the tape's first- and second-order gradients must equal
   the graph's at the same values and weights to 1e-12 relative: both run the same
   gradient functions, so only the order of sums may differ. The same again on one
   persistent tape, which records its own first pass.

   Jacobian mode: nb_tape_jacobian of every case against every input, in reverse and in
   forward mode (the tape replayed with the forward rules), equals the rows of one-hot
   gradients, and takes the expected path (vectorized, mixed or loop; forward).

   Forward mode: nb_jvp of every case along random tangents equals the central difference
   quotient along them and satisfies <u, J v> = <J^T u, v> against nb_gradients, for y and
   for the second-order y2 (forward over reverse), with static and with unknown dims; the
   eager forward accumulator gives the graph's JVP case by case. */
#include "testutil.h"

#include <stdio.h>

#define GC_TOL 1e-6
#define MAX_IN 6
#define MAX_ATTRS 6
#define MAX_OUT 6
#define MAX_ELEMS 64
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Value domains of the float inputs: each keeps the op smooth around the sampled point
   (at least 0.1 away from a kink, a tie or a pole; the difference step is 1e-6). */
typedef enum {
  D_ANY,      /* [-1.5, 1.5] */
  D_POS,      /* [0.5, 2]: Log, Sqrt, Rsqrt, the base of Pow */
  D_NONZERO,  /* +-[0.4, 1.6]: denominators and the kinks of Abs, Sign, Relu, Elu */
  D_DISTINCT, /* +-(0.3 + 0.15 k), all different across one case's inputs: no ties for
                 Maximum, Minimum, Max, Min */
  D_LOG1P,    /* [-0.6, 0.9] */
  D_ELU_OUT,  /* outputs of Elu away from 0: -[0.2, 0.9] or [0.2, 1.5] */
  D_FIXED,    /* the spec's own values */
} domain;

typedef enum { IN_NONE, IN_VAR, IN_I32, IN_I64, IN_BOOL } in_kind;

/* One op input: a float64 variable (a placeholder checked by gradcheck) or a constant. */
typedef struct in_spec {
  in_kind kind;
  domain dom;
  int rank;
  int64_t shape[NB_MAX_RANK];
  const double *vals; /* a constant's values, or a D_FIXED variable's */
} in_spec;

typedef struct gc_spec {
  const char *op;
  in_spec in[MAX_IN];       /* ends at the first IN_NONE */
  nb_attr attrs[MAX_ATTRS]; /* ends at the first NULL name */
  int nout;                 /* 0: one output */
  bool first_only;          /* a tie or a kink on purpose: the gradient jumps there, so only
                             the first order (TF's rule there) is checkable */
} gc_spec;

#define UNPAREN(...) __VA_ARGS__
#define NVALS(...) ((int64_t)(sizeof((const double[]){__VA_ARGS__}) / sizeof(double)))
/* a float64 variable of the given shape */
#define X(dom, ...) \
  { IN_VAR, dom, TU_RANK(__VA_ARGS__), {__VA_ARGS__}, NULL }
#define S(dom) \
  { IN_VAR, dom, 0, {0}, NULL }
/* a float64 variable at fixed values: XF((2, 3), (1, 2, 3, 4, 5, 6)) */
#define XF(dims, vals)                                                               \
  {                                                                                  \
    IN_VAR, D_FIXED, TU_RANK dims, {UNPAREN dims}, (const double[]) { UNPAREN vals } \
  }
/* integer constants: 1-D int32 / int64, an int32 scalar, an empty int32 list, any shape */
#define IV(...)                                                                \
  {                                                                            \
    IN_I32, D_FIXED, 1, {NVALS(__VA_ARGS__)}, (const double[]) { __VA_ARGS__ } \
  }
#define IV64(...)                                                              \
  {                                                                            \
    IN_I64, D_FIXED, 1, {NVALS(__VA_ARGS__)}, (const double[]) { __VA_ARGS__ } \
  }
#define IS(v)                                       \
  {                                                 \
    IN_I32, D_FIXED, 0, {0}, (const double[]) { v } \
  }
#define IS64(v)                                     \
  {                                                 \
    IN_I64, D_FIXED, 0, {0}, (const double[]) { v } \
  }
#define IV0 \
  { IN_I32, D_FIXED, 1, {0}, NULL }
#define K(kind, dims, vals)                                                        \
  {                                                                                \
    kind, D_FIXED, TU_RANK dims, {UNPAREN dims}, (const double[]) { UNPAREN vals } \
  }
#define BS(v)                                        \
  {                                                  \
    IN_BOOL, D_FIXED, 0, {0}, (const double[]) { v } \
  }

#define AB(n, val) \
  { .name = n, .kind = NB_ATTR_BOOL, .v.b = val }
#define AI(n, val) \
  { .name = n, .kind = NB_ATTR_INT, .v.i = val }
#define AT(n, val) \
  { .name = n, .kind = NB_ATTR_TYPE, .v.type = val }
#define AF(n, val) \
  { .name = n, .kind = NB_ATTR_FLOAT, .v.f = val }
#define AS(n, val) \
  { .name = n, .kind = NB_ATTR_STR, .v.s = val }
#define AL(key, ...)                                                                                          \
  {                                                                                                           \
    .name = key, .kind = NB_ATTR_INTS, .n = TU_RANK(__VA_ARGS__), .v.ints = (const int64_t[]) { __VA_ARGS__ } \
  }

/* ---- elementwise ops: each op over each shape case of its arity ------------------------- */

typedef struct unary_op {
  const char *op;
  domain dom;
} unary_op;

static const unary_op unary_ops[] = {
    {"Neg", D_ANY},
    {"Exp", D_ANY},
    {"Log", D_POS},
    {"Log1p", D_LOG1P},
    {"Sqrt", D_POS},
    {"Rsqrt", D_POS},
    {"Reciprocal", D_NONZERO},
    {"Square", D_ANY},
    {"Abs", D_NONZERO},
    {"Sign", D_NONZERO},
    {"Tanh", D_ANY},
    {"Sigmoid", D_ANY},
    {"Relu", D_NONZERO},
    {"Elu", D_NONZERO},
    {"Softplus", D_ANY},
    {"Sin", D_ANY},
    {"Cos", D_ANY},
    {"Identity", D_ANY},
};

typedef struct shape_case {
  int rank;
  int64_t shape[NB_MAX_RANK];
} shape_case;

static const shape_case unary_shapes[] = {{0, {0}}, {2, {2, 3}}, {3, {1, 3, 1}}, {8, {1, 2, 1, 1, 1, 1, 2, 1}}};

typedef struct binary_op {
  const char *op;
  domain a, b;
} binary_op;

static const binary_op binary_ops[] = {
    {"AddV2", D_ANY, D_ANY},
    {"Add", D_ANY, D_ANY},
    {"Sub", D_ANY, D_ANY},
    {"Mul", D_ANY, D_ANY},
    {"RealDiv", D_ANY, D_NONZERO},
    {"Pow", D_POS, D_ANY},
    {"SquaredDifference", D_ANY, D_ANY},
    {"Maximum", D_DISTINCT, D_DISTINCT},
    {"Minimum", D_DISTINCT, D_DISTINCT},
};

/* the two operands' shapes: equal, scalar on either side, both broadcasting, rank mismatch,
   size-1 dims, rank 8 */
static const shape_case binary_shapes[][2] = {
    {{2, {2, 3}}, {2, {2, 3}}},
    {{0, {0}}, {2, {2, 3}}},
    {{2, {2, 3}}, {0, {0}}},
    {{2, {3, 1}}, {2, {1, 4}}},
    {{3, {2, 3, 2}}, {1, {2}}},
    {{1, {1}}, {3, {2, 1, 3}}},
    {{3, {2, 1, 3}}, {2, {2, 1}}},
    {{0, {0}}, {0, {0}}},
    {{4, {2, 1, 3, 1}}, {4, {1, 2, 1, 2}}},
    {{8, {1, 1, 1, 1, 1, 1, 2, 1}}, {8, {2, 1, 1, 1, 1, 1, 1, 3}}},
};

/* TF's fused gradient ops: two same-shape inputs in TF's order */
static const binary_op fused_ops[] = {
    {"TanhGrad", D_ANY, D_ANY},       {"SigmoidGrad", D_ANY, D_ANY},
    {"RsqrtGrad", D_ANY, D_ANY},      {"SqrtGrad", D_POS, D_ANY},
    {"ReciprocalGrad", D_ANY, D_ANY}, {"ReluGrad", D_ANY, D_NONZERO}, /* (gradients, features) */
    {"EluGrad", D_ANY, D_ELU_OUT},                                    /* (gradients, outputs) */
    {"SoftplusGrad", D_ANY, D_ANY},                                   /* (gradients, features) */
};

static const shape_case fused_shapes[] = {{0, {0}}, {2, {2, 3}}};

/* ---- reductions: each op over each (input, axes, keep_dims) case ------------------------- */

static const unary_op reduce_ops[] = {
    {"Sum", D_ANY}, {"Mean", D_ANY}, {"Max", D_DISTINCT}, {"Min", D_DISTINCT}, {"Prod", D_ANY},
};

typedef struct reduce_case {
  in_spec x, axes;
  bool keep_dims;
} reduce_case;

static const reduce_case reduce_cases[] = {
    {X(D_ANY, 2, 3), IV(1), false},
    {X(D_ANY, 2, 3), IV(0), true},
    {X(D_ANY, 2, 3, 2), IV(0, 2), false},
    {X(D_ANY, 2, 3, 2), IV(-1), true},
    {X(D_ANY, 2, 3), IV(0, 1), false},
    {X(D_ANY, 2, 3), IV0, false},
    {S(D_ANY), IV0, true},
    {X(D_ANY, 1, 3), IV64(0), false},
    {X(D_ANY, 2, 3), IV(1, -1), false},
    {X(D_ANY, 3), IS(0), true},
};

/* ---- every other differentiable op, case by case ---------------------------------------- */

static const gc_spec other_specs[] = {
    /* reductions at special points: TF splits a Max/Min gradient equally between two ties
       (the central difference sees exactly that); Prod is right at zeros */
    {.op = "Max", .in = {XF((2, 3), (1, 0.5, 1, -2, 0.3, -2)), IV(1)}, .first_only = true},
    {.op = "Min", .in = {XF((4), (0.7, -1, 2, -1)), IV(0)}, .first_only = true},
    {.op = "Prod", .in = {XF((2, 3), (1.5, 0, -0.5, 0.8, -1.2, 2)), IV(1)}},
    {.op = "Prod", .in = {XF((2, 3), (0, 1.5, 0, 0.8, 0, 2)), IV(0, 1)}},
    {.op = "Prod", .in = {XF((4), (0, 0, 0, 1.1)), IV(0)}, .attrs = {AB("keep_dims", true)}},
    /* scans: each direction, exclusive, a negative axis, rank 0 is not scannable */
    {.op = "Cumsum", .in = {X(D_ANY, 2, 3), IS(1)}},
    {.op = "Cumsum", .in = {X(D_ANY, 3, 2), IS64(-2)}, .attrs = {AB("exclusive", true), AB("reverse", true)}},
    {.op = "Cumsum", .in = {X(D_ANY, 4), IS(0)}, .attrs = {AB("reverse", true)}},
    /* Cumprod's gradient divides by x (TF's formula): nonzero inputs */
    {.op = "Cumprod", .in = {X(D_NONZERO, 2, 3), IS(1)}},
    {.op = "Cumprod", .in = {X(D_NONZERO, 3, 2), IS(0)}, .attrs = {AB("exclusive", true)}},
    {.op = "Cumprod", .in = {X(D_NONZERO, 2, 1, 3), IS(-1)}, .attrs = {AB("exclusive", true), AB("reverse", true)}},
    {.op = "Cumprod", .in = {X(D_NONZERO, 4), IS(0)}, .attrs = {AB("reverse", true)}},
    /* Abs at 0: TF's sign(0) = 0 is the central difference's slope */
    {.op = "Abs", .in = {XF((3), (0, 0.5, -0.7))}, .first_only = true},

    {.op = "SelectV2", .in = {K(IN_BOOL, (2, 3), (1, 0, 0, 1, 1, 0)), X(D_ANY, 2, 3), X(D_ANY, 2, 3)}},
    {.op = "SelectV2", .in = {K(IN_BOOL, (2, 1), (1, 0)), X(D_ANY, 1, 3), S(D_ANY)}},
    {.op = "SelectV2", .in = {BS(1), X(D_ANY, 2, 2), X(D_ANY, 2, 2)}},
    {.op = "SelectV2", .in = {K(IN_BOOL, (3), (0, 1, 1)), X(D_ANY, 2, 3), X(D_ANY, 2, 1)}},
    /* Cast float64 -> float64 only: through float32 the difference quotient would lose
       about 7 digits, far above the bound */
    {.op = "Cast", .in = {X(D_ANY, 2, 3)}, .attrs = {AT("DstT", NB_F64)}},
    {.op = "Cast", .in = {S(D_ANY)}, .attrs = {AT("SrcT", NB_F64), AT("DstT", NB_F64)}},
    {.op = "AddN", .in = {X(D_ANY, 2, 3)}},
    {.op = "AddN", .in = {X(D_ANY, 2, 3), X(D_ANY, 2, 3), X(D_ANY, 2, 3)}},
    {.op = "AddN", .in = {S(D_ANY), S(D_ANY)}},
    {.op = "AccumulateNV2", .in = {X(D_ANY, 2, 3), X(D_ANY, 2, 3), X(D_ANY, 2, 3)}, .attrs = {AL("shape", 2, 3)}},
    {.op = "AccumulateNV2", .in = {X(D_ANY, 2, 1), X(D_ANY, 2, 1)}, .attrs = {AL("shape", -1, 1)}},
    {.op = "AccumulateNV2", .in = {S(D_ANY), S(D_ANY)}, .attrs = {{.name = "shape", .kind = NB_ATTR_INTS, .n = 0}}},

    {.op = "MatMul", .in = {X(D_ANY, 2, 3), X(D_ANY, 3, 2)}},
    {.op = "MatMul", .in = {X(D_ANY, 3, 2), X(D_ANY, 3, 2)}, .attrs = {AB("transpose_a", true)}},
    {.op = "MatMul", .in = {X(D_ANY, 2, 3), X(D_ANY, 2, 3)}, .attrs = {AB("transpose_b", true)}},
    {.op = "MatMul",
     .in = {X(D_ANY, 3, 2), X(D_ANY, 2, 3)},
     .attrs = {AB("transpose_a", true), AB("transpose_b", true)}},
    {.op = "MatMul", .in = {X(D_ANY, 1, 3), X(D_ANY, 3, 1)}},
    {.op = "BatchMatMulV2", .in = {X(D_ANY, 2, 2, 3), X(D_ANY, 2, 3, 2)}},
    {.op = "BatchMatMulV2", .in = {X(D_ANY, 2, 1, 2, 3), X(D_ANY, 3, 2)}},
    {.op = "BatchMatMulV2", .in = {X(D_ANY, 1, 2, 3), X(D_ANY, 2, 3, 1)}},
    {.op = "BatchMatMulV2", .in = {X(D_ANY, 3, 2), X(D_ANY, 2, 2, 1)}},
    {.op = "BatchMatMulV2", .in = {X(D_ANY, 2, 3, 2), X(D_ANY, 2, 3, 2)}, .attrs = {AB("adj_x", true)}},
    {.op = "BatchMatMulV2", .in = {X(D_ANY, 2, 2, 3), X(D_ANY, 1, 2, 3)}, .attrs = {AB("adj_y", true)}},
    {.op = "BatchMatMulV2", .in = {X(D_ANY, 2, 3, 2), X(D_ANY, 2, 3)}, .attrs = {AB("adj_x", true), AB("adj_y", true)}},

    {.op = "Reshape", .in = {X(D_ANY, 2, 3), IV(3, 2)}},
    {.op = "Reshape", .in = {X(D_ANY, 2, 3), IV(-1)}},
    {.op = "Reshape", .in = {X(D_ANY, 2, 3), IV64(1, 6, 1)}},
    {.op = "Reshape", .in = {S(D_ANY), IV(1, 1)}},
    {.op = "Reshape", .in = {X(D_ANY, 1, 4), IV(2, -1)}},
    {.op = "ExpandDims", .in = {X(D_ANY, 2, 3), IS(0)}},
    {.op = "ExpandDims", .in = {X(D_ANY, 2, 3), IS(-1)}},
    {.op = "ExpandDims", .in = {X(D_ANY, 2, 3), IS(1)}},
    {.op = "ExpandDims", .in = {S(D_ANY), IS(0)}},
    {.op = "Squeeze", .in = {X(D_ANY, 1, 3, 1)}},
    {.op = "Squeeze", .in = {X(D_ANY, 1, 3, 1)}, .attrs = {AL("squeeze_dims", 2)}},
    {.op = "Squeeze", .in = {X(D_ANY, 1, 3, 1)}, .attrs = {AL("squeeze_dims", -3)}},
    {.op = "Squeeze", .in = {X(D_ANY, 2, 1)}, .attrs = {AL("squeeze_dims", -1)}},
    {.op = "Transpose", .in = {X(D_ANY, 2, 3), IV(1, 0)}},
    {.op = "Transpose", .in = {X(D_ANY, 2, 3, 2), IV(2, 0, 1)}},
    {.op = "Transpose", .in = {X(D_ANY, 1, 2, 3), IV64(1, 2, 0)}},
    {.op = "Transpose", .in = {X(D_ANY, 2, 3), IV(0, 1)}},
    {.op = "Transpose", .in = {S(D_ANY), IV0}},
    {.op = "BroadcastTo", .in = {X(D_ANY, 3), IV(2, 3)}},
    {.op = "BroadcastTo", .in = {X(D_ANY, 3, 1), IV(2, 3, 2)}},
    {.op = "BroadcastTo", .in = {S(D_ANY), IV(2, 2)}},
    {.op = "BroadcastTo", .in = {X(D_ANY, 1, 3), IV64(2, 3)}},
    {.op = "BroadcastTo", .in = {X(D_ANY, 2, 3), IV(2, 3)}},
    {.op = "ConcatV2", .in = {X(D_ANY, 2, 3), X(D_ANY, 2, 3), IS(0)}},
    {.op = "ConcatV2", .in = {X(D_ANY, 2, 1), X(D_ANY, 2, 3), X(D_ANY, 2, 2), IS(1)}},
    {.op = "ConcatV2", .in = {X(D_ANY, 2, 2), X(D_ANY, 2, 1), IS(-1)}},
    {.op = "ConcatV2", .in = {X(D_ANY, 3), X(D_ANY, 1), IS64(0)}},
    {.op = "Pack", .in = {X(D_ANY, 2), X(D_ANY, 2)}},
    {.op = "Pack", .in = {X(D_ANY, 2, 3), X(D_ANY, 2, 3), X(D_ANY, 2, 3)}, .attrs = {AI("axis", 1)}},
    {.op = "Pack", .in = {X(D_ANY, 2, 2), X(D_ANY, 2, 2)}, .attrs = {AI("axis", -1)}},
    {.op = "Pack", .in = {S(D_ANY), S(D_ANY), S(D_ANY)}},
    {.op = "Pack", .in = {X(D_ANY, 1, 3)}, .attrs = {AI("axis", 0)}},
    {.op = "Unpack", .in = {X(D_ANY, 3, 2)}, .attrs = {AI("num", 3)}, .nout = 3},
    {.op = "Unpack", .in = {X(D_ANY, 2, 3)}, .attrs = {AI("num", 3), AI("axis", 1)}, .nout = 3},
    {.op = "Unpack", .in = {X(D_ANY, 2, 2)}, .attrs = {AI("num", 2), AI("axis", -1)}, .nout = 2},
    {.op = "Unpack", .in = {X(D_ANY, 1, 3)}, .attrs = {AI("num", 1)}, .nout = 1},
    {.op = "Tile", .in = {X(D_ANY, 2, 3), IV(2, 1)}},
    {.op = "Tile", .in = {X(D_ANY, 1, 2), IV(3, 2)}},
    {.op = "Tile", .in = {X(D_ANY, 2), IV64(3)}},
    {.op = "Tile", .in = {X(D_ANY, 2, 1, 2), IV(1, 3, 1)}},
    {.op = "Pad", .in = {X(D_ANY, 2, 3), K(IN_I32, (2, 2), (1, 0, 2, 1))}},
    {.op = "Pad", .in = {X(D_ANY, 3), K(IN_I64, (1, 2), (0, 2))}},
    {.op = "Pad", .in = {X(D_ANY, 1, 2, 1), K(IN_I32, (3, 2), (0, 1, 0, 0, 1, 1))}},
    {.op = "Fill", .in = {IV(2, 3), S(D_ANY)}},
    {.op = "Fill", .in = {IV64(3), S(D_ANY)}},
    {.op = "Fill", .in = {IV0, S(D_ANY)}},

    {.op = "Slice", .in = {X(D_ANY, 3, 4), IV(1, 0), IV(2, -1)}},
    {.op = "Slice", .in = {X(D_ANY, 2, 3, 4), IV(0, 1, 1), IV(-1, 1, 2)}},
    {.op = "Slice", .in = {X(D_ANY, 2, 3), IV64(0, 0), IV64(2, 3)}},
    {.op = "Slice", .in = {X(D_ANY, 4), IV(3), IV(1)}},
    {.op = "StridedSlice", .in = {X(D_ANY, 4, 5), IV(1, 0), IV(3, 5), IV(1, 2)}},
    {.op = "StridedSliceGrad",
     .in = {IV(3, 4), IV(0, 3), IV(0, 0), IV(2, -2), X(D_ANY, 2, 2)},
     .attrs = {AI("end_mask", 1)}},
    {.op = "StridedSliceGrad", .in = {IV(4, 5), IV(1, 0), IV(3, 5), IV(1, 2), X(D_ANY, 2, 3)}},
    /* rows 3..0 backwards (end_mask on dim 0), columns 4 and 2 */
    {.op = "StridedSlice", .in = {X(D_ANY, 4, 5), IV(3, -1), IV(0, 0), IV(-1, -2)}, .attrs = {AI("end_mask", 1)}},
    /* x[1, :] */
    {.op = "StridedSlice", .in = {X(D_ANY, 3, 4), IV(1, 0), IV(2, 4), IV(1, 1)}, .attrs = {AI("shrink_axis_mask", 1)}},
    /* x[..., newaxis, 1:3] */
    {.op = "StridedSlice",
     .in = {X(D_ANY, 2, 3, 4), IV(0, 0, 1), IV(0, 0, 3), IV(1, 1, 1)},
     .attrs = {AI("ellipsis_mask", 1), AI("new_axis_mask", 2)}},
    /* x[:-1:2] */
    {.op = "StridedSlice", .in = {X(D_ANY, 6), IV64(0), IV64(-1), IV64(2)}, .attrs = {AI("begin_mask", 1)}},
    /* x[-1] of a vector: a scalar */
    {.op = "StridedSlice", .in = {X(D_ANY, 3), IV(-1), IV(0), IV(1)}, .attrs = {AI("shrink_axis_mask", 1)}},
    {.op = "GatherV2", .in = {X(D_ANY, 4, 3), IV(2, 0, 2), IS(0)}},
    {.op = "GatherV2", .in = {X(D_ANY, 4, 3), IV(1, 1), IS(1)}},
    {.op = "GatherV2", .in = {X(D_ANY, 2, 3), IV64(2, 0, 0), IS(-1)}},
    {.op = "GatherV2", .in = {X(D_ANY, 4, 3), K(IN_I32, (2, 2), (3, 0, 0, 1)), IS(0)}},
    {.op = "GatherV2", .in = {X(D_ANY, 4, 3), IS(1), IS64(0)}},
    {.op = "GatherV2", .in = {X(D_ANY, 2, 3), K(IN_I32, (2, 2), (0, 2, 1, 1)), IS(1)}, .attrs = {AI("batch_dims", 1)}},
    /* segment 1 gets nothing; id -1 is dropped, so its row gets no gradient */
    {.op = "UnsortedSegmentSum", .in = {X(D_ANY, 4, 3), IV(0, 2, 0, -1), IS(3)}},
    {.op = "UnsortedSegmentSum", .in = {X(D_ANY, 5), IV(1, 1, 0, 3, 2), IS(4)}},
    {.op = "UnsortedSegmentSum", .in = {X(D_ANY, 2, 3), K(IN_I32, (2, 3), (0, 1, 0, 2, 2, 1)), IS64(3)}},

    /* ---- nn family (src/ops/nn.c) ---- */
    {.op = "Softmax", .in = {X(D_ANY, 2, 3)}},
    {.op = "Softmax", .in = {X(D_ANY, 4)}},
    {.op = "Softmax", .in = {X(D_ANY, 2, 1, 3)}},
    {.op = "Softmax", .in = {X(D_ANY, 3, 1)}},
    {.op = "LogSoftmax", .in = {X(D_ANY, 2, 3)}},
    {.op = "LogSoftmax", .in = {X(D_ANY, 4)}},
    {.op = "LogSoftmax", .in = {X(D_ANY, 2, 1, 3)}},
    /* labels are distributions (rows sum to 1), where TF's backprop is d loss/d features;
       features and labels broadcast to [batch, classes] */
    {.op = "SoftmaxCrossEntropyWithLogits", .in = {X(D_ANY, 2, 3), XF((2, 3), (0.2, 0.5, 0.3, 1, 0, 0))}, .nout = 2},
    {.op = "SoftmaxCrossEntropyWithLogits",
     .in = {X(D_ANY, 1, 3), XF((2, 3), (0.1, 0.1, 0.8, 0.4, 0.4, 0.2))},
     .nout = 2},
    {.op = "SoftmaxCrossEntropyWithLogits",
     .in = {X(D_ANY, 4), XF((2, 4), (0.25, 0.25, 0.25, 0.25, 0, 0.7, 0.3, 0))},
     .nout = 2},
    {.op = "SoftmaxCrossEntropyWithLogits", .in = {X(D_ANY, 3, 2), XF((2), (0.6, 0.4))}, .nout = 2},
    {.op = "SparseSoftmaxCrossEntropyWithLogits", .in = {X(D_ANY, 3, 4), IV(1, 0, 3)}, .nout = 2},
    {.op = "SparseSoftmaxCrossEntropyWithLogits", .in = {X(D_ANY, 2, 3), IV64(2, 2)}, .nout = 2},
    {.op = "SparseSoftmaxCrossEntropyWithLogits", .in = {X(D_ANY, 1, 1), IV(0)}, .nout = 2},
    {.op = "Relu6", .in = {X(D_NONZERO, 2, 3)}},
    {.op = "Relu6", .in = {XF((4), (6.5, 7, -0.5, 3))}},
    {.op = "Relu6Grad", .in = {X(D_ANY, 2, 3), XF((2, 3), (0.5, -0.5, 6.5, 3, 7, -2))}},
    {.op = "Relu6Grad", .in = {S(D_ANY), S(D_NONZERO)}},
    {.op = "LeakyRelu", .in = {X(D_NONZERO, 2, 3)}},
    {.op = "LeakyRelu", .in = {X(D_NONZERO, 4)}, .attrs = {AF("alpha", 0.05)}},
    {.op = "LeakyRelu", .in = {S(D_NONZERO)}, .attrs = {AF("alpha", 1.5)}},
    {.op = "LeakyReluGrad", .in = {X(D_ANY, 2, 3), X(D_NONZERO, 2, 3)}},
    {.op = "LeakyReluGrad", .in = {X(D_ANY, 3), X(D_NONZERO, 3)}, .attrs = {AF("alpha", 0.3)}},
    {.op = "Selu", .in = {X(D_NONZERO, 2, 3)}},
    {.op = "Selu", .in = {S(D_NONZERO)}},
    {.op = "SeluGrad", .in = {X(D_ANY, 2, 3), X(D_ELU_OUT, 2, 3)}},
    {.op = "SeluGrad", .in = {S(D_ANY), S(D_ELU_OUT)}},
    {.op = "Gelu", .in = {X(D_ANY, 2, 3)}},
    {.op = "Gelu", .in = {X(D_ANY, 2, 3)}, .attrs = {AB("approximate", true)}},
    {.op = "Gelu", .in = {XF((3), (-3, 0, 2.5))}, .attrs = {AB("approximate", false)}},
    {.op = "GeluGrad", .in = {X(D_ANY, 2, 3), X(D_ANY, 2, 3)}},
    {.op = "GeluGrad", .in = {X(D_ANY, 2, 3), X(D_ANY, 2, 3)}, .attrs = {AB("approximate", true)}},
    {.op = "GeluGrad", .in = {S(D_ANY), S(D_ANY)}, .attrs = {AB("approximate", true)}},
    {.op = "L2Loss", .in = {X(D_ANY, 2, 3)}},
    {.op = "L2Loss", .in = {S(D_ANY)}},
    {.op = "L2Loss", .in = {X(D_ANY, 1, 4, 1)}},
    /* ---- norm family: batch normalization. Every output counts (y and the statistics);
       variances are positive. FusedBatchNormV3: x, scale, offset, mean, variance. ---- */
    {.op = "FusedBatchNormV3",
     .in = {X(D_ANY, 2, 2, 1, 3), X(D_ANY, 3), X(D_ANY, 3), X(D_ANY, 3), X(D_POS, 3)},
     .nout = 6},
    {.op = "FusedBatchNormV3",
     .in = {X(D_ANY, 2, 3, 1, 2), X(D_ANY, 3), X(D_ANY, 3), X(D_ANY, 3), X(D_POS, 3)},
     .attrs = {AS("data_format", "NCHW"), AF("exponential_avg_factor", 0.1), AF("epsilon", 0.01)},
     .nout = 6},
    {.op = "FusedBatchNormV3",
     .in = {X(D_ANY, 1, 3, 1, 2), X(D_ANY, 2), X(D_ANY, 2), X(D_ANY, 2), X(D_POS, 2)},
     .attrs = {AB("is_training", false)},
     .nout = 6},
    {.op = "FusedBatchNormV3",
     .in = {X(D_ANY, 2, 2, 1, 2), X(D_ANY, 2), X(D_ANY, 2), X(D_ANY, 2), X(D_POS, 2)},
     .attrs = {AS("data_format", "NCHW"), AB("is_training", false)},
     .nout = 6},
    {.op = "FusedBatchNormV3",
     .in = {X(D_ANY, 1, 2, 2, 1, 2), X(D_ANY, 2), X(D_ANY, 2), X(D_ANY, 2), X(D_POS, 2)},
     .attrs = {AS("data_format", "NCDHW")},
     .nout = 6},
    /* FusedBatchNormGradV3: y_backprop, x, scale, reserve_space_1 (mean), reserve_space_2
       (variance), reserve_space_3; its statistics are independent inputs here */
    {.op = "FusedBatchNormGradV3",
     .in = {X(D_ANY, 2, 2, 1, 3), X(D_ANY, 2, 2, 1, 3), X(D_ANY, 3), X(D_ANY, 3), X(D_POS, 3), S(D_ANY)},
     .nout = 5},
    {.op = "FusedBatchNormGradV3",
     .in = {X(D_ANY, 2, 3, 1, 2), X(D_ANY, 2, 3, 1, 2), X(D_ANY, 3), X(D_ANY, 3), X(D_POS, 3), S(D_ANY)},
     .attrs = {AS("data_format", "NCHW"), AF("epsilon", 0.01)},
     .nout = 5},
    {.op = "FusedBatchNormGradV3",
     .in = {X(D_ANY, 1, 2, 2, 2), X(D_ANY, 1, 2, 2, 2), X(D_ANY, 2), X(D_ANY, 2), X(D_POS, 2), S(D_ANY)},
     .attrs = {AB("is_training", false)},
     .nout = 5},
    {.op = "FusedBatchNormGradV3",
     .in = {X(D_ANY, 2, 2, 1, 2), X(D_ANY, 2, 2, 1, 2), X(D_ANY, 2), X(D_ANY, 2), X(D_POS, 2), S(D_ANY)},
     .attrs = {AS("data_format", "NCHW"), AB("is_training", false)},
     .nout = 5},
/* ---- conv family: convolutions, pools, bias (small images keep the float64
       differences cheap); MaxPool inputs are distinct so no window has a tie ---- */
#define STRIDES1 AL("strides", 1, 1, 1, 1)
#define STRIDES2 AL("strides", 1, 2, 2, 1)
    {.op = "Conv2D", .in = {X(D_ANY, 1, 4, 4, 2), X(D_ANY, 2, 2, 2, 2)}, .attrs = {STRIDES1, AS("padding", "VALID")}},
    {.op = "Conv2D", .in = {X(D_ANY, 2, 3, 4, 1), X(D_ANY, 2, 2, 1, 2)}, .attrs = {STRIDES2, AS("padding", "SAME")}},
    {.op = "Conv2D",
     .in = {X(D_ANY, 1, 3, 3, 2), X(D_ANY, 2, 2, 2, 1)},
     .attrs = {STRIDES1, AS("padding", "EXPLICIT"), AL("explicit_paddings", 0, 0, 1, 0, 0, 1, 0, 0)}},
    {.op = "Conv2D",
     .in = {X(D_ANY, 1, 2, 5, 4), X(D_ANY, 2, 2, 2, 2)},
     .attrs = {STRIDES1, AS("padding", "VALID"), AS("data_format", "NCHW"), AL("dilations", 1, 1, 2, 2)}},
    {.op = "Conv2D",
     .in = {X(D_ANY, 1, 1, 5, 5), X(D_ANY, 3, 3, 1, 2)},
     .attrs = {AL("strides", 1, 1, 2, 2), AS("padding", "SAME"), AS("data_format", "NCHW")}},
    {.op = "Conv2DBackpropInput",
     .in = {IV(1, 4, 4, 2), X(D_ANY, 2, 2, 2, 2), X(D_ANY, 1, 3, 3, 2)},
     .attrs = {STRIDES1, AS("padding", "VALID")}},
    {.op = "Conv2DBackpropInput",
     .in = {IV(1, 2, 4, 4), X(D_ANY, 3, 3, 2, 1), X(D_ANY, 1, 1, 2, 2)},
     .attrs = {AL("strides", 1, 1, 2, 2), AS("padding", "SAME"), AS("data_format", "NCHW")}},
    {.op = "Conv2DBackpropFilter",
     .in = {X(D_ANY, 1, 4, 4, 2), IV(2, 2, 2, 2), X(D_ANY, 1, 3, 3, 2)},
     .attrs = {STRIDES1, AS("padding", "VALID")}},
    {.op = "Conv2DBackpropFilter",
     .in = {X(D_ANY, 2, 3, 3, 1), IV(2, 2, 1, 2), X(D_ANY, 2, 2, 2, 2)},
     .attrs = {STRIDES2, AS("padding", "SAME"), AL("dilations", 1, 1, 1, 1)}},
    {.op = "MaxPool",
     .in = {X(D_DISTINCT, 1, 4, 4, 2)},
     .attrs = {AL("ksize", 1, 2, 2, 1), STRIDES2, AS("padding", "VALID")}},
    {.op = "MaxPool",
     .in = {X(D_DISTINCT, 1, 5, 4, 1)},
     .attrs = {AL("ksize", 1, 3, 3, 1), STRIDES2, AS("padding", "SAME")}},
    {.op = "MaxPool",
     .in = {X(D_DISTINCT, 1, 2, 3, 4)},
     .attrs = {AL("ksize", 1, 1, 2, 2), AL("strides", 1, 1, 1, 1), AS("padding", "VALID"), AS("data_format", "NCHW")}},
    /* TF's MaxPoolGradGrad takes no EXPLICIT padding, so the second order is not defined */
    {.op = "MaxPool",
     .in = {X(D_DISTINCT, 1, 3, 3, 1)},
     .attrs = {AL("ksize", 1, 2, 2, 1), STRIDES2, AS("padding", "EXPLICIT"),
               AL("explicit_paddings", 0, 0, 1, 0, 0, 1, 0, 0)},
     .first_only = true},
    {.op = "MaxPoolGrad",
     .in = {X(D_DISTINCT, 1, 4, 4, 1), X(D_ANY, 1, 2, 2, 1), X(D_ANY, 1, 2, 2, 1)},
     .attrs = {AL("ksize", 1, 2, 2, 1), STRIDES2, AS("padding", "VALID")}},
    {.op = "MaxPoolGrad",
     .in = {X(D_DISTINCT, 1, 3, 3, 2), X(D_ANY, 1, 3, 3, 2), X(D_ANY, 1, 3, 3, 2)},
     .attrs = {AL("ksize", 1, 2, 2, 1), STRIDES1, AS("padding", "SAME")}},
    {.op = "MaxPoolGradGrad",
     .in = {X(D_DISTINCT, 1, 4, 4, 1), X(D_ANY, 1, 2, 2, 1), X(D_ANY, 1, 4, 4, 1)},
     .attrs = {AL("ksize", 1, 3, 3, 1), STRIDES2, AS("padding", "SAME")}},
    {.op = "AvgPool",
     .in = {X(D_ANY, 1, 4, 5, 2)},
     .attrs = {AL("ksize", 1, 3, 3, 1), STRIDES2, AS("padding", "SAME")}},
    {.op = "AvgPool",
     .in = {X(D_ANY, 1, 2, 3, 3)},
     .attrs = {AL("ksize", 1, 1, 2, 2), AL("strides", 1, 1, 1, 1), AS("padding", "VALID"), AS("data_format", "NCHW")}},
    {.op = "AvgPoolGrad",
     .in = {IV(1, 4, 5, 2), X(D_ANY, 1, 2, 3, 2)},
     .attrs = {AL("ksize", 1, 3, 3, 1), STRIDES2, AS("padding", "SAME")}},
    {.op = "BiasAdd", .in = {X(D_ANY, 2, 3, 4), X(D_ANY, 4)}},
    {.op = "BiasAdd", .in = {X(D_ANY, 2, 3, 2, 2), X(D_ANY, 3)}, .attrs = {AS("data_format", "NCHW")}},
    {.op = "BiasAdd", .in = {X(D_ANY, 3, 2), X(D_ANY, 2)}, .attrs = {AS("data_format", "NCHW")}},
    {.op = "BiasAddGrad", .in = {X(D_ANY, 2, 3, 4)}},
    {.op = "BiasAddGrad", .in = {X(D_ANY, 2, 3, 2, 2)}, .attrs = {AS("data_format", "NCHW")}},
    /* ---- collectives (collective.c), as a group of one: this process alone, so the
       all-reduce is the identity (Div by 1); tests/test_collective.c and test_dist_mpi.c
       check them across devices and ranks ---- */
    {.op = "CollectiveReduceV2",
     .in = {X(D_ANY, 2, 3), IS(1), IS(1), IS(1)},
     .attrs = {AS("merge_op", "Add"), AS("final_op", "Id")}},
    {.op = "CollectiveReduceV2",
     .in = {X(D_ANY, 3), IS(1), IS(2), IS(5)},
     .attrs = {AS("merge_op", "Add"), AS("final_op", "Div")}},
    {.op = "NcclAllReduce",
     .in = {X(D_ANY, 2, 2)},
     .attrs = {AS("reduction", "sum"), AI("num_devices", 1), AS("shared_name", "g")}},
#undef STRIDES2
#undef STRIDES1
#undef AS
    /* ---- end of the conv family ---- */
};

/* ---- running one case ------------------------------------------------------------------- */

typedef struct rng {
  uint64_t s;
} rng;

/* splitmix64: a uniform double in [0, 1) */
static double uniform(rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

static double between(rng *r, double lo, double hi) { return lo + (hi - lo) * uniform(r); }
static double random_sign(rng *r) { return uniform(r) < 0.5 ? -1 : 1; }

static int64_t elems(const in_spec *in) {
  int64_t n = 1;
  for (int i = 0; i < in->rank; i++) n *= in->shape[i];
  return n;
}

/* The case's pool of distinct values: magnitudes 0.3 + 0.15 k with random signs, shuffled. */
static void distinct_pool(rng *r, double *pool, int n) {
  for (int k = 0; k < n; k++) pool[k] = random_sign(r) * (0.3 + 0.15 * k);
  for (int k = n - 1; k > 0; k--) {
    int j = (int)(uniform(r) * (k + 1));
    double t = pool[k];
    pool[k] = pool[j];
    pool[j] = t;
  }
}

static double sample(rng *r, domain d) {
  switch (d) {
    case D_POS: return between(r, 0.5, 2);
    case D_NONZERO: return random_sign(r) * between(r, 0.4, 1.6);
    case D_LOG1P: return between(r, -0.6, 0.9);
    case D_ELU_OUT: return uniform(r) < 0.5 ? -between(r, 0.2, 0.9) : between(r, 0.2, 1.5);
    default: return between(r, -1.5, 1.5);
  }
}

typedef struct gc_case {
  nb_graph *g;
  nb_ctx *c, *e;
  nb_session *s;
  rng r;
  bool unknown_dims; /* placeholders with every dim -1: the gradients' run-time shape paths */
  nb_tensor *in[MAX_IN], *xs[MAX_IN], *vals[MAX_IN];
  nb_tensor *ein[MAX_IN]; /* the same inputs in the eager context: vals and constants */
  int nin, nx;
} gc_case;

/* The op's inputs: placeholders (with their values in the eager context) and constants,
   and the same inputs as eager tensors. */
static void make_inputs(gc_case *k, const gc_spec *sp) {
  static const nb_dtype const_types[] = {[IN_I32] = NB_I32, [IN_I64] = NB_I64, [IN_BOOL] = NB_BOOL};
  int ndistinct = 0, used = 0;
  for (int i = 0; i < MAX_IN && sp->in[i].kind; i++)
    if (sp->in[i].kind == IN_VAR && sp->in[i].dom == D_DISTINCT) ndistinct += (int)elems(&sp->in[i]);
  double pool[MAX_ELEMS * MAX_IN], v[MAX_ELEMS];
  distinct_pool(&k->r, pool, ndistinct);
  for (k->nin = 0; k->nin < MAX_IN && sp->in[k->nin].kind; k->nin++) {
    const in_spec *in = &sp->in[k->nin];
    int64_t n = elems(in);
    assert_true(n <= MAX_ELEMS);
    if (in->kind != IN_VAR) {
      k->in[k->nin] = tu_make(k->c, const_types[in->kind], in->rank, in->shape, in->vals);
      k->ein[k->nin] = tu_make(k->e, const_types[in->kind], in->rank, in->shape, in->vals);
      continue;
    }
    for (int64_t j = 0; j < n; j++)
      v[j] = in->dom == D_FIXED ? in->vals[j] : in->dom == D_DISTINCT ? pool[used++] : sample(&k->r, in->dom);
    char name[8];
    snprintf(name, sizeof name, "x%d", k->nx);
    int64_t unknown[NB_MAX_RANK] = {-1, -1, -1, -1, -1, -1, -1, -1};
    k->xs[k->nx] = k->in[k->nin] = nb_placeholder(k->c, NB_F64, in->rank, k->unknown_dims ? unknown : in->shape, name);
    k->ein[k->nin] = k->vals[k->nx++] = nb_tensor_from(k->e, NB_F64, in->rank, in->shape, v);
  }
}

/* Whether the tensors' static ranks and dims agree (an unknown rank agrees with nothing). */
static bool same_static_shapes(nb_tensor *const *t, int n) {
  if (nb_rank(t[0]) < 0) return false; /* unknown: flattened and concatenated whatever they are */
  for (int i = 1; i < n; i++)
    if (nb_rank(t[i]) != nb_rank(t[0]) ||
        (nb_rank(t[0]) > 0 && memcmp(nb_shape(t[i]), nb_shape(t[0]), (size_t)nb_rank(t[0]) * sizeof(int64_t))))
      return false;
  return true;
}

/* The op's output over the inputs in (graph or eager), or its outputs combined into one:
   sum_k (k + 1.5) out_k, or when the outputs' shapes differ (FusedBatchNormV3's y and
   statistics) the (k + 1.5) out_k flattened and concatenated. */
static nb_tensor *build_y(nb_ctx *c, nb_tensor *const *in, int nin, const gc_spec *sp) {
  int nattrs = 0, nout = sp->nout ? sp->nout : 1;
  while (nattrs < MAX_ATTRS && sp->attrs[nattrs].name) nattrs++;
  nb_tensor *outs[MAX_OUT] = {0};
  if (nb_op(c, sp->op, in, nin, sp->attrs, nattrs, outs, nout) != NB_OK) return NULL;
  if (nout == 1) return outs[0];
  bool same = same_static_shapes(outs, nout);
  for (int i = 0; i < nout; i++) {
    outs[i] = nb_mul(c, outs[i], nb_scalar(c, NB_F64, i + 1.5));
    if (!same) outs[i] = nb_reshape(c, outs[i], (const int64_t[]){-1}, 1);
  }
  return same ? nb_add_n(c, outs, nout) : nb_concat(c, outs, nout, 0);
}

/* sum(g * v), flattened first: a g whose static rank is unknown still sums to a scalar. */
static nb_tensor *dot(nb_ctx *c, nb_tensor *g, nb_tensor *v) {
  nb_tensor *flat = nb_reshape(c, nb_mul(c, g, v), (const int64_t[]){-1}, 1);
  return nb_sum(c, flat, (const int[]){0}, 1, false);
}

/* sum_i sum(g_i * v_i) over the g_i that are not NULL (none: a zero constant). */
static nb_tensor *sum_dots(nb_ctx *c, nb_tensor *const *g, nb_tensor *const *v, int n) {
  nb_tensor *terms[MAX_IN];
  int m = 0;
  for (int i = 0; i < n; i++)
    if (g[i]) terms[m++] = dot(c, g[i], v[i]);
  if (m == 0) return nb_scalar(c, NB_F64, 0);
  return m == 1 ? terms[0] : nb_add_n(c, terms, m);
}

/* A float64 constant of the given shape with random entries in [-1, 1]. */
static nb_tensor *random_const(gc_case *k, int rank, const int64_t *shape) {
  double v[MAX_ELEMS];
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  assert_true(n <= MAX_ELEMS);
  for (int64_t i = 0; i < n; i++) v[i] = between(&k->r, -1, 1);
  return nb_tensor_from(k->c, NB_F64, rank, shape, v);
}

/* y2 = sum_i sum(g_i * V_i) with g_i = d(sum(y * W))/dx_i; the shapes are taken from the
   values (y0 is y's), so a gradient whose static shape is unknown still gets its V_i. */
static nb_tensor *build_y2(gc_case *k, nb_tensor *y, const nb_tensor *y0) {
  nb_tensor *w = random_const(k, nb_rank(y0), nb_shape(y0)), *g[MAX_IN] = {0}, *v[MAX_IN] = {0};
  nb_grad_opts o = {.grad_ys = &w};
  if (nb_gradients(k->c, &y, 1, k->xs, k->nx, &o, g) != NB_OK) return NULL;
  for (int i = 0; i < k->nx; i++)
    if (g[i]) v[i] = random_const(k, nb_rank(k->vals[i]), nb_shape(k->vals[i]));
  return sum_dots(k->c, g, v, k->nx);
}

/* t's value at the case's values (in the eager context) and max(1, max |t|): the scale of
   the difference quotient's rounding error. */
static nb_tensor *value_of(gc_case *k, nb_tensor *t, double *scale) {
  nb_tensor *out = NULL;
  if (nb_run(k->s, k->xs, k->vals, k->nx, &t, 1, &out) != NB_OK) return NULL;
  *scale = 1;
  for (int64_t i = 0; i < nb_num_elements(out); i++)
    if (!(fabs(nb_item(out, i)) <= *scale)) *scale = fabs(nb_item(out, i));
  return out;
}

/* Appends "f64[2,3]" / "i32[2]=(1,0)" per input to buf. */
static void describe(const gc_spec *sp, char *buf, size_t cap) {
  static const char *kinds[] = {"", "f64", "i32", "i64", "bool"};
  size_t len = strlen(buf);
  for (int i = 0; i < MAX_IN && sp->in[i].kind && len < cap; i++) {
    const in_spec *in = &sp->in[i];
    len += (size_t)snprintf(buf + len, cap - len, "%s%s[", i ? " " : "", kinds[in->kind]);
    for (int d = 0; d < in->rank && len < cap; d++)
      len += (size_t)snprintf(buf + len, cap - len, "%s%lld", d ? "," : "", (long long)in->shape[d]);
    if (len < cap) len += (size_t)snprintf(buf + len, cap - len, "]");
    for (int64_t j = 0; in->kind != IN_VAR && in->vals && j < elems(in) && len < cap; j++)
      len +=
          (size_t)snprintf(buf + len, cap - len, "%s%g%s", j ? "," : "=(", in->vals[j], j + 1 < elems(in) ? "" : ")");
  }
  for (int i = 0; i < MAX_ATTRS && sp->attrs[i].name && len < cap; i++) {
    const nb_attr *a = &sp->attrs[i];
    long long v = a->kind == NB_ATTR_BOOL ? a->v.b : a->kind == NB_ATTR_INT ? a->v.i : (long long)a->v.type;
    if (a->kind == NB_ATTR_INTS) { /* the whole list: [2,3], or [] */
      len += (size_t)snprintf(buf + len, cap - len, " %s=[", a->name);
      for (int d = 0; d < a->n && len < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", d ? "," : "", (long long)a->v.ints[d]);
      if (len < cap) len += (size_t)snprintf(buf + len, cap - len, "]");
    } else if (a->kind == NB_ATTR_FLOAT)
      len += (size_t)snprintf(buf + len, cap - len, " %s=%g", a->name, a->v.f);
    else if (a->kind == NB_ATTR_STR)
      len += (size_t)snprintf(buf + len, cap - len, " %s=%s", a->name, a->v.s);
    else
      len += (size_t)snprintf(buf + len, cap - len, " %s=%lld", a->name, v);
  }
}

typedef struct tally tally;
/* Runs one case of a table: gradcheck (check_case) or tape against graph (check_tape_case). */
typedef void check_fn(tally *t, const gc_spec *sp, int index, uint64_t seed, bool unknown_dims);

struct tally {
  check_fn *check;
  const char *table; /* the table being walked, named in failure lines */
  int cases, failures;
};

/* Runs one case: reports a failure with print_error and counts it. */
static void check_case(tally *t, const gc_spec *sp, int index, uint64_t seed, bool unknown_dims) {
  gc_case k = {.g = nb_graph_new(), .e = nb_eager_new(), .r = {seed}, .unknown_dims = unknown_dims};
  k.c = nb_graph_ctx_new(k.g);
  k.s = nb_session_new(k.g);
  double err1 = -1, err2 = -1, scale1 = 1, scale2 = 1;
  const char *stage = "build";
  make_inputs(&k, sp);
  nb_tensor *y = build_y(k.c, k.in, k.nin, sp);
  bool ok = y && nb_status(k.c) == NB_OK;
  nb_tensor *y0 = NULL;
  if (ok) {
    stage = "first order";
    y0 = value_of(&k, y, &scale1);
    ok = y0 && nb_gradcheck(k.c, y, k.xs, k.nx, k.vals, &err1) == NB_OK;
  }
  bool pass = ok && err1 <= GC_TOL * scale1;
  if (ok && !sp->first_only) {
    stage = "second order";
    nb_tensor *y2 = build_y2(&k, y, y0), *y2v = NULL;
    ok = y2 && nb_status(k.c) == NB_OK && (y2v = value_of(&k, y2, &scale2)) &&
         nb_gradcheck(k.c, y2, k.xs, k.nx, k.vals, &err2) == NB_OK;
    nb_tensor_free(y2v);
    pass = pass && ok && err2 <= GC_TOL * scale2;
  }
  nb_tensor_free(y0);
  t->cases++;
  if (!pass) {
    char what[512] = "";
    describe(sp, what, sizeof what);
    t->failures++;
    if (!ok)
      print_error("[%s] %s case %d (%s%s): %s failed: %s %s\n", t->table, sp->op, index, what,
                  unknown_dims ? "; dims unknown" : "", stage, nb_code_name(nb_status(k.c)),
                  nb_status(k.c) ? nb_error(k.c) : nb_session_error(k.s));
    else
      print_error("[%s] %s case %d (%s%s): first-order err %.3g (bound %.3g), second-order err %.3g (bound %.3g)\n",
                  t->table, sp->op, index, what, unknown_dims ? "; dims unknown" : "", err1, GC_TOL * scale1, err2,
                  GC_TOL * scale2);
  }
  nb_session_free(k.s);
  nb_ctx_free(k.c);
  nb_ctx_free(k.e);
  nb_graph_free(k.g);
}

/* ---- tape mode: the eager tape's gradients equal the graph's ----------------------------- */

/* Both modes run the same gradient functions on the same values; only the order of a sum
   (accumulating gradients) may differ. */
#define TAPE_TOL 1e-12

/* The weights of one mode: W for y's gradient, V_i for the second-order function. */
typedef struct weights {
  nb_tensor *w, *v[MAX_IN];
} weights;

/* The same random entries in [-1, 1] as an eager tensor and as a graph constant. */
static void random_pair(gc_case *k, int rank, const int64_t *shape, nb_tensor **eager, nb_tensor **graph) {
  double v[MAX_ELEMS];
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  assert_true(n <= MAX_ELEMS);
  for (int64_t i = 0; i < n; i++) v[i] = between(&k->r, -1, 1);
  *eager = nb_tensor_from(k->e, NB_F64, rank, shape, v);
  *graph = nb_tensor_from(k->c, NB_F64, rank, shape, v);
}

/* The tape's gradients: y is computed under two tapes watching the xs; the inner tape's
   g_i = d(sum(y * W))/dx_i is recorded by the outer one, which then gives
   g2_i = d(sum_j sum(g_j * V_j))/dx_i. With one_tape, a single persistent tape records
   its own first pass and gives both. The weights go to gw too. NULL, or the error (and
   *stage, the step that failed). */
static const char *tape_grads(gc_case *k, const gc_spec *sp, bool one_tape, weights *gw, nb_tensor **g1, nb_tensor **g2,
                              const char **stage) {
  nb_tape *outer = nb_tape_begin(k->e, one_tape), *inner = one_tape ? outer : nb_tape_begin(k->e, 0);
  for (int i = 0; i < k->nx; i++) {
    nb_tape_watch(outer, k->vals[i]);
    nb_tape_watch(inner, k->vals[i]);
  }
  weights ew;
  *stage = "eager op";
  nb_tensor *y = build_y(k->e, k->ein, k->nin, sp);
  if (y) {
    random_pair(k, nb_rank(y), nb_shape(y), &ew.w, &gw->w);
    for (int i = 0; i < k->nx; i++) random_pair(k, nb_rank(k->vals[i]), nb_shape(k->vals[i]), &ew.v[i], &gw->v[i]);
    *stage = "tape first order";
    if (nb_tape_gradient(inner, &y, 1, k->vals, k->nx, &ew.w, g1) == NB_OK) {
      *stage = "tape second order";
      nb_tensor *y2 = sum_dots(k->e, g1, ew.v, k->nx);
      nb_tape_gradient(outer, &y2, 1, k->vals, k->nx, NULL, g2);
    }
  }
  if (!one_tape) nb_tape_end(inner);
  nb_tape_end(outer);
  return nb_status(k->e) ? nb_error(k->e) : NULL;
}

/* The graph's gradients with the same weights, as values (the caller frees them):
   out[i] = g_i, out[nx + i] = g2_i. NULL, or the error. */
static const char *graph_grads(gc_case *k, const gc_spec *sp, const weights *gw, nb_tensor **out) {
  nb_tensor *y = build_y(k->c, k->in, k->nin, sp), *sym[2 * MAX_IN] = {0}, *fetch[2 * MAX_IN], *vals[2 * MAX_IN];
  nb_grad_opts o = {.grad_ys = &gw->w};
  if (y && nb_gradients(k->c, &y, 1, k->xs, k->nx, &o, sym) == NB_OK) {
    nb_tensor *y2 = sum_dots(k->c, sym, gw->v, k->nx);
    if (y2) nb_gradients(k->c, &y2, 1, k->xs, k->nx, NULL, sym + k->nx);
  }
  if (nb_status(k->c)) return nb_error(k->c);
  int n = 0;
  for (int i = 0; i < 2 * k->nx; i++)
    if (sym[i]) fetch[n++] = sym[i];
  if (n && nb_run(k->s, k->xs, k->vals, k->nx, fetch, n, vals) != NB_OK) return nb_session_error(k->s);
  for (int i = 0, j = 0; i < 2 * k->nx; i++) out[i] = sym[i] ? vals[j++] : NULL;
  return NULL;
}

/* Writes to why how the tape's gradient differs from the graph's; false when they agree
   (both NULL, or the same shape and values within TAPE_TOL max(1, max |graph|)). */
static bool differs(const nb_tensor *tape, const nb_tensor *graph, char *why, size_t cap) {
  if (!tape || !graph) {
    if (tape != graph)
      snprintf(why, cap, "the %s gives no gradient, the %s does", tape ? "graph" : "tape", tape ? "tape" : "graph");
    return tape != graph;
  }
  bool same_shape = nb_rank(tape) == nb_rank(graph) && nb_num_elements(tape) == nb_num_elements(graph);
  for (int d = 0; same_shape && d < nb_rank(tape); d++) same_shape = nb_shape(tape)[d] == nb_shape(graph)[d];
  if (!same_shape || nb_dtype_of(tape) != nb_dtype_of(graph)) {
    snprintf(why, cap, "the tape's gradient has another dtype or shape (rank %d, %lld elements; graph: rank %d, %lld)",
             nb_rank(tape), (long long)nb_num_elements(tape), nb_rank(graph), (long long)nb_num_elements(graph));
    return true;
  }
  double scale = 1, diff = 0;
  for (int64_t i = 0; i < nb_num_elements(graph); i++) {
    if (!(fabs(nb_item(graph, i)) <= scale)) scale = fabs(nb_item(graph, i));
    double d = fabs(nb_item(tape, i) - nb_item(graph, i));
    if (!(d <= diff)) diff = d;
  }
  snprintf(why, cap, "max |tape - graph| %.3g (bound %.3g)", diff, TAPE_TOL * scale);
  return !(diff <= TAPE_TOL * scale);
}

/* Runs one case in both modes and compares every first- and second-order gradient. Eager
   tensors have all their dims, so only the static-shape graph is compared. */
static void check_tape_mode(tally *t, const gc_spec *sp, int index, uint64_t seed, bool one_tape) {
  const char *mode = one_tape ? "one tape" : "tape";
  gc_case k = {.g = nb_graph_new(), .e = nb_eager_new(), .r = {seed}};
  k.c = nb_graph_ctx_new(k.g);
  k.s = nb_session_new(k.g);
  make_inputs(&k, sp);
  weights gw = {0};
  nb_tensor *tape[2 * MAX_IN] = {0}, *graph[2 * MAX_IN] = {0};
  const char *stage, *err = tape_grads(&k, sp, one_tape, &gw, tape, tape + k.nx, &stage);
  if (!err) stage = "graph", err = graph_grads(&k, sp, &gw, graph);
  char what[512] = "", why[160];
  describe(sp, what, sizeof what);
  bool failed = err != NULL;
  if (err) print_error("[%s, %s] %s case %d (%s): %s failed: %s\n", t->table, mode, sp->op, index, what, stage, err);
  for (int i = 0; i < 2 * k.nx && !err; i++)
    if (differs(tape[i], graph[i], why, sizeof why)) {
      failed = true;
      print_error("[%s, %s] %s case %d (%s): %s order d/dx%d: %s\n", t->table, mode, sp->op, index, what,
                  i < k.nx ? "first" : "second", i % k.nx, why);
    }
  t->cases++;
  t->failures += failed;
  for (int i = 0; i < 2 * k.nx; i++) nb_tensor_free(graph[i]);
  nb_session_free(k.s);
  nb_ctx_free(k.c);
  nb_ctx_free(k.e);
  nb_graph_free(k.g);
}

static void check_tape_case(tally *t, const gc_spec *sp, int index, uint64_t seed, bool unknown_dims) {
  (void)unknown_dims;
  check_tape_mode(t, sp, index, seed, false);
}

static void check_one_tape_case(tally *t, const gc_spec *sp, int index, uint64_t seed, bool unknown_dims) {
  (void)unknown_dims;
  check_tape_mode(t, sp, index, seed, true);
}

/* ---- Jacobian mode: the batched Jacobian equals stacked one-hot gradients ------------- */

/* d y / d x by one gradient per element of y, seeded one-hot, stacked as jac's shape; the
   tape (persistent) does not record them, so the next Jacobian sees the same tape. */
static nb_tensor *jacobian_by_rows(nb_ctx *e, nb_tape *t, nb_tensor *y, nb_tensor *x, const nb_tensor *jac) {
  int64_t m = nb_num_elements(y);
  nb_tensor *rows[MAX_ELEMS];
  assert_true(m >= 1 && m <= MAX_ELEMS);
  nb_tape_stop_recording(t);
  for (int64_t j = 0; j < m; j++) {
    double onehot[MAX_ELEMS] = {0};
    onehot[j] = 1;
    nb_tensor *seed = nb_cast(e, nb_tensor_from(e, NB_F64, nb_rank(y), nb_shape(y), onehot), nb_dtype_of(y));
    if (nb_tape_gradient(t, &y, 1, &x, 1, &seed, &rows[j]) != NB_OK) return NULL;
    if (!rows[j]) rows[j] = nb_zeros_like(e, x);
  }
  nb_tensor *stacked = nb_reshape(e, nb_pack(e, rows, (int)m, 0), nb_shape(jac), nb_rank(jac));
  nb_tape_resume_recording(t);
  return stacked;
}

static bool in_table(const char *op, const binary_op *ops, int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(ops[i].op, op)) return true;
  return false;
}

static bool in_unary_table(const char *op, const unary_op *ops, int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(ops[i].op, op)) return true;
  return false;
}

/* The loop when a taped tensor has rank 8 (no room for the seed dim); otherwise one
   batched pass, fully vectorized for elementwise ops (the unary, binary and fused tables,
   SelectV2, Cast, AddN, AccumulateNV2), MatMul, the reductions, the scans, Reshape/ExpandDims/Squeeze
   and Transpose; the gradient once per seed for every other op. */
static nb_jacobian_path expected_path(const char *op, nb_tensor *const *in, int nin, const nb_tensor *y) {
  int rank = nb_rank(y);
  for (int i = 0; i < nin; i++) rank = nb_rank(in[i]) > rank ? nb_rank(in[i]) : rank;
  if (rank >= NB_MAX_RANK) return NB_JACOBIAN_LOOP;
  bool elementwise = in_table(op, binary_ops, COUNT(binary_ops)) || in_table(op, fused_ops, COUNT(fused_ops)) ||
                     !strcmp(op, "SelectV2") || !strcmp(op, "Cast") || !strcmp(op, "AddN") ||
                     !strcmp(op, "AccumulateNV2") || !strcmp(op, "MatMul") ||
                     in_unary_table(op, reduce_ops, COUNT(reduce_ops)) || !strcmp(op, "Cumsum") ||
                     !strcmp(op, "Cumprod") || !strcmp(op, "Reshape") || !strcmp(op, "ExpandDims") ||
                     !strcmp(op, "Squeeze") || !strcmp(op, "Transpose");
  elementwise |= in_unary_table(op, unary_ops, COUNT(unary_ops));
  /* nn: the activations and their fused gradients are elementwise; Softmax and LogSoftmax
     take the seed dim as a leading batch dim */
  static const char *const nn_batched[] = {"Relu6",    "Relu6Grad", "LeakyRelu", "LeakyReluGrad", "Selu",
                                           "SeluGrad", "Gelu",      "GeluGrad",  "Softmax",       "LogSoftmax"};
  for (int i = 0; i < COUNT(nn_batched); i++) elementwise |= !strcmp(op, nn_batched[i]);
  return elementwise ? NB_JACOBIAN_VECTORIZED : NB_JACOBIAN_MIXED;
}

/* The JVP differentiates each gradient op with respect to its incoming gradient; TF's
   MaxPoolGradGrad takes no EXPLICIT padding, so MaxPool's JVP there is an error (docs/gradients.md). */
static bool jvp_documented_limit(const gc_spec *sp) {
  if (strcmp(sp->op, "MaxPool")) return false;
  for (int i = 0; i < MAX_ATTRS && sp->attrs[i].name; i++)
    if (!strcmp(sp->attrs[i].name, "padding") && !strcmp(sp->attrs[i].v.s, "EXPLICIT")) return true;
  return false;
}

/* nb_tape_jacobian of the op's output against every float input, in both modes, equals
   the rows of one-hot gradients (reverse: same functions; forward: the forward rules, or
   the gradient transposed; sums may run in another order). */
static void check_jacobian_case(tally *t, const gc_spec *sp, int index, uint64_t seed, bool unknown_dims) {
  (void)unknown_dims;
  gc_case k = {.g = nb_graph_new(), .e = nb_eager_new(), .r = {seed}};
  k.c = nb_graph_ctx_new(k.g);
  make_inputs(&k, sp);
  nb_tape *tape = nb_tape_begin(k.e, 1);
  for (int i = 0; i < k.nx; i++) nb_tape_watch(tape, k.vals[i]);
  nb_tensor *y = build_y(k.e, k.ein, k.nin, sp);
  char what[512] = "", why[160] = "";
  describe(sp, what, sizeof what);
  bool failed = !y;
  for (int n = 0; y && n < k.nx * 2 && !failed && nb_num_elements(y) > 0; n++) {
    int i = n / 2;
    bool forward = n % 2;
    if (nb_rank(y) + nb_rank(k.vals[i]) > NB_MAX_RANK) continue; /* no such Jacobian */
    nb_tensor *jac = NULL, *rows = NULL;
    nb_tape_set_jacobian_mode(tape, forward ? NB_JACOBIAN_MODE_FORWARD : NB_JACOBIAN_MODE_REVERSE);
    failed = nb_tape_jacobian(tape, y, k.vals[i], &jac) != NB_OK;
    if (forward && jvp_documented_limit(sp)) { /* the replay transposes MaxPool's gradient: nb_jvp's error */
      failed = !failed || !strstr(nb_error(k.e), "EXPLICIT");
      if (failed)
        print_error("[%s, jacobian] %s case %d: forward mode did not fail on EXPLICIT padding\n", t->table, sp->op,
                    index);
      nb_clear_error(k.e);
      continue;
    }
    nb_jacobian_path path = nb_tape_jacobian_path(tape);
    nb_jacobian_path want = forward ? NB_JACOBIAN_FORWARD : expected_path(sp->op, k.ein, k.nin, y);
    if (!failed) rows = jacobian_by_rows(k.e, tape, y, k.vals[i], jac);
    failed = !rows;
    if (!failed && path != want)
      snprintf(why, sizeof why, "the Jacobian took path %d, not %d", (int)path, (int)want);
    else if (failed || !differs(jac, rows, why, sizeof why))
      *why = 0;
    failed |= *why != 0;
    if (*why)
      print_error("[%s, jacobian] %s case %d (%s): d/dx%d (%s mode): %s\n", t->table, sp->op, index, what, i,
                  forward ? "forward" : "reverse", why);
  }
  if (failed && !*why)
    print_error("[%s, jacobian] %s case %d (%s): failed: %s\n", t->table, sp->op, index, what, nb_error(k.e));
  t->cases++;
  t->failures += failed;
  nb_tape_end(tape);
  nb_ctx_free(k.c);
  nb_ctx_free(k.e);
  nb_graph_free(k.g);
}

/* ---- forward mode: nb_jvp against central differences along the tangent --------------- */

/* The difference quotient's step along the tangent. */
#define JVP_STEP 1e-6

/* y at the case's values moved by step * v (v eager, one per variable). */
static nb_tensor *y_moved(gc_case *k, nb_tensor *y, nb_tensor *const *v, double step) {
  nb_tensor *at[MAX_IN], *out = NULL;
  for (int i = 0; i < k->nx; i++) at[i] = nb_add(k->e, k->vals[i], nb_mul(k->e, v[i], nb_scalar(k->e, NB_F64, step)));
  return nb_run(k->s, k->xs, at, k->nx, &y, 1, &out) == NB_OK ? out : NULL;
}

/* The largest |jvp - (y(x + h v) - y(x - h v)) / 2h| (a NULL jvp counts as zeros); -1
   when something fails. */
static double jvp_error(gc_case *k, nb_tensor *y, nb_tensor *jvp, nb_tensor *const *v) {
  nb_tensor *plus = y_moved(k, y, v, JVP_STEP), *minus = y_moved(k, y, v, -JVP_STEP), *j = NULL;
  double err = plus && minus ? 0 : -1;
  if (!err && jvp && nb_run(k->s, k->xs, k->vals, k->nx, &jvp, 1, &j) != NB_OK) err = -1;
  if (!err && j && nb_num_elements(j) != nb_num_elements(plus)) err = -1;
  for (int64_t i = 0; !(err < 0) && i < nb_num_elements(plus); i++) {
    double fd = (nb_item(plus, i) - nb_item(minus, i)) / (2 * JVP_STEP);
    err = fmax(err, fabs((j ? nb_item(j, i) : 0) - fd));
  }
  nb_tensor_free(plus);
  nb_tensor_free(minus);
  nb_tensor_free(j);
  return err;
}

/* <u, J v> = <J^T u, v> for a random u: the JVP against nb_gradients. Each entry of J v
   and of J^T u is a sum of at most n = size(x) + size(y) products, each through the few
   roundings of one op's rule and its transposition (at most 64 per term, with margin), and
   each dot sums n more: |lhs - rhs| <= gamma_{64 n}(f64) (sum |u Jv| + sum |J^T u v|).
   Returns the gap over that bound (<= 1 passes), -1 when something fails. */
static double transposition_gap(gc_case *k, nb_tensor *y, nb_tensor *jvp, nb_tensor *const *gv, const nb_tensor *y0) {
  nb_tensor *u = random_const(k, nb_rank(y0), nb_shape(y0)), *g[MAX_IN] = {0}, *abs_v[MAX_IN];
  if (nb_gradients(k->c, &y, 1, k->xs, k->nx, &(nb_grad_opts){.grad_ys = &u}, g) != NB_OK) return -1;
  for (int i = 0; i < k->nx; i++) abs_v[i] = nb_abs(k->c, gv[i]);
  nb_tensor *abs_g[MAX_IN];
  for (int i = 0; i < k->nx; i++) abs_g[i] = g[i] ? nb_abs(k->c, g[i]) : NULL;
  nb_tensor *fetch[4] = {jvp ? dot(k->c, u, jvp) : nb_scalar(k->c, NB_F64, 0), sum_dots(k->c, g, gv, k->nx),
                         jvp ? dot(k->c, nb_abs(k->c, u), nb_abs(k->c, jvp)) : nb_scalar(k->c, NB_F64, 0),
                         sum_dots(k->c, abs_g, abs_v, k->nx)},
            *vals[4];
  if (nb_status(k->c) || nb_run(k->s, k->xs, k->vals, k->nx, fetch, 4, vals) != NB_OK) return -1;
  int64_t n = nb_num_elements(y0);
  for (int i = 0; i < k->nx; i++) n += nb_num_elements(k->vals[i]);
  double gap = fabs(nb_item(vals[0], 0) - nb_item(vals[1], 0));
  double bound = tu_gamma(NB_F64, 64 * n) * (nb_item(vals[2], 0) + nb_item(vals[3], 0));
  for (int i = 0; i < 4; i++) nb_tensor_free(vals[i]);
  return gap == 0 ? 0 : gap / bound;
}

/* One order's forward check of f (y, or the second-order y2): the JVP against differences
   and the transposition identity. false, with *err and *scale for the message, on failure. */
static bool jvp_order_passes(gc_case *k, nb_tensor *f, nb_tensor *const *ev, nb_tensor *const *gv, double *err,
                             double *scale, double *gap) {
  nb_tensor *jvp = NULL, *f0 = NULL;
  *err = *gap = -1;
  if (nb_jvp(k->c, &f, 1, k->xs, k->nx, gv, &jvp) != NB_OK || !(f0 = value_of(k, f, scale))) return false;
  *err = jvp_error(k, f, jvp, ev);
  *gap = transposition_gap(k, f, jvp, gv, f0);
  nb_tensor_free(f0);
  return *err >= 0 && *err <= GC_TOL * *scale && *gap >= 0 && *gap <= 1;
}

/* nb_jvp of the case's y along random tangents equals the directional difference quotient
   and the transpose of the gradient, at first and (forward over reverse) second order; or
   fails, for a documented limit. */
static void check_jvp_case(tally *t, const gc_spec *sp, int index, uint64_t seed, bool unknown_dims) {
  gc_case k = {.g = nb_graph_new(), .e = nb_eager_new(), .r = {seed}, .unknown_dims = unknown_dims};
  k.c = nb_graph_ctx_new(k.g);
  k.s = nb_session_new(k.g);
  make_inputs(&k, sp);
  nb_tensor *y = build_y(k.c, k.in, k.nin, sp), *ev[MAX_IN], *gv[MAX_IN], *jvp = NULL, *y0 = NULL;
  for (int i = 0; i < k.nx; i++) random_pair(&k, nb_rank(k.vals[i]), nb_shape(k.vals[i]), &ev[i], &gv[i]);
  double scale = 1, err = -1, gap = -1;
  const char *stage = "first order";
  bool pass;
  if (jvp_documented_limit(sp)) {
    pass = y && nb_jvp(k.c, &y, 1, k.xs, k.nx, gv, &jvp) != NB_OK;
  } else {
    pass = y && jvp_order_passes(&k, y, ev, gv, &err, &scale, &gap);
    if (pass && !sp->first_only && (y0 = value_of(&k, y, &scale))) {
      stage = "second order";
      nb_tensor *y2 = build_y2(&k, y, y0);
      pass = y2 && jvp_order_passes(&k, y2, ev, gv, &err, &scale, &gap);
    }
  }
  t->cases++;
  t->failures += !pass;
  if (!pass) {
    char what[512] = "";
    describe(sp, what, sizeof what);
    print_error("[%s, jvp] %s case %d (%s%s): %s: err %.3g (bound %.3g), transposition gap %.3g of its bound; %s %s\n",
                t->table, sp->op, index, what, unknown_dims ? "; dims unknown" : "", stage, err, GC_TOL * scale, gap,
                nb_error(k.c), nb_session_error(k.s));
  }
  nb_tensor_free(y0);
  nb_session_free(k.s);
  nb_ctx_free(k.c);
  nb_ctx_free(k.e);
  nb_graph_free(k.g);
}

/* ---- eager forward mode: the accumulator's tangents equal nb_jvp's ----------------------- */

/* The case's y computed eagerly under an accumulator watching the values along ev equals
   the graph's nb_jvp along the same tangents: both apply the same forward rules to the same
   values, so only the order of sums may differ (TAPE_TOL, as tapes against graphs). */
static void check_accumulator_case(tally *t, const gc_spec *sp, int index, uint64_t seed, bool unknown_dims) {
  (void)unknown_dims;
  gc_case k = {.g = nb_graph_new(), .e = nb_eager_new(), .r = {seed}};
  k.c = nb_graph_ctx_new(k.g);
  k.s = nb_session_new(k.g);
  make_inputs(&k, sp);
  nb_tensor *ev[MAX_IN], *gv[MAX_IN], *gjvp = NULL, *want = NULL, *got = NULL;
  for (int i = 0; i < k.nx; i++) random_pair(&k, nb_rank(k.vals[i]), nb_shape(k.vals[i]), &ev[i], &gv[i]);
  nb_tensor *y = build_y(k.c, k.in, k.nin, sp);
  bool limit = jvp_documented_limit(sp), ok = y && nb_jvp(k.c, &y, 1, k.xs, k.nx, gv, &gjvp) == NB_OK;
  if (ok && gjvp) ok = nb_run(k.s, k.xs, k.vals, k.nx, &gjvp, 1, &want) == NB_OK;
  nb_forward_accumulator *acc = nb_forward_accumulator_begin(k.e);
  for (int i = 0; i < k.nx; i++) nb_forward_accumulator_watch(acc, k.vals[i], ev[i]);
  nb_tensor *ey = build_y(k.e, k.ein, k.nin, sp);
  if (ey) got = nb_forward_accumulator_jvp(acc, ey);
  nb_forward_accumulator_end(acc);
  char why[256] = "";
  bool pass = limit ? !ey && nb_status(k.e) != NB_OK : ok && ey && !differs(got, want, why, sizeof why);
  t->cases++;
  t->failures += !pass;
  if (!pass) {
    char what[512] = "";
    describe(sp, what, sizeof what);
    print_error("[%s, accumulator] %s case %d (%s): %s; eager: %s; graph: %s %s\n", t->table, sp->op, index, what, why,
                nb_error(k.e), nb_error(k.c), nb_session_error(k.s));
  }
  nb_tensor_free(want);
  nb_session_free(k.s);
  nb_ctx_free(k.c);
  nb_ctx_free(k.e);
  nb_graph_free(k.g);
}

static void finish(const tally *t, const char *what) {
  if (t->failures) fail_msg("%s: %d of %d cases failed (listed above)", what, t->failures, t->cases);
}

static in_spec var(domain dom, const shape_case *s) {
  in_spec in = {IN_VAR, dom, s->rank, {0}, NULL};
  memcpy(in.shape, s->shape, sizeof s->shape);
  return in;
}

/* ---- coverage --------------------------------------------------------------------------- */

static bool has_spec(const char *op) {
  for (int i = 0; i < COUNT(unary_ops); i++)
    if (!strcmp(unary_ops[i].op, op)) return true;
  for (int i = 0; i < COUNT(binary_ops); i++)
    if (!strcmp(binary_ops[i].op, op)) return true;
  for (int i = 0; i < COUNT(fused_ops); i++)
    if (!strcmp(fused_ops[i].op, op)) return true;
  for (int i = 0; i < COUNT(reduce_ops); i++)
    if (!strcmp(reduce_ops[i].op, op)) return true;
  for (int i = 0; i < COUNT(other_specs); i++)
    if (!strcmp(other_specs[i].op, op)) return true;
  return false;
}

static void append(char *buf, size_t cap, const char *fmt, const char *op) {
  size_t len = strlen(buf);
  if (len < cap) snprintf(buf + len, cap - len, fmt, op);
}

/* control flow (control_flow.c): While, If and StatefulPartitionedCall run function graphs
   held in internal attrs, so only nb_while, nb_cond and nb_call_function build them, and no
   spec can; tests/test_control_flow.c gradchecks them (first and second order). Host
   callbacks (PyFunc, PyFuncStateless) likewise hold their function in an internal attr:
   only nb_py_func builds them, and tests/test_host_callback.c checks their gradients. */
static const char *const built_by_callers[] = {"While", "If", "StatefulPartitionedCall", "PyFunc", "PyFuncStateless"};

static bool built_by_caller(const char *op) {
  for (int i = 0; i < COUNT(built_by_callers); i++)
    if (!strcmp(built_by_callers[i], op)) return true;
  return false;
}

/* Internal op types ('_' prefix, as _CustomGradient) are refused by nb_op, so no spec can
   build them; their own tests cover them. */
static bool is_internal(const char *op) { return op[0] == '_' || built_by_caller(op); }

/* PreventGradient's gradient is an error by design: tests/test_gradients.c checks it. */
static bool needs_spec(const char *op) { return !is_internal(op) && strcmp(op, "PreventGradient") != 0; }

/* Every op with a gradient has a case, and every case's op has a gradient. */
static void test_every_gradient_has_a_spec(void **state) {
  (void)state;
  char problems[4096] = "";
  for (int i = 0; i < nb_num_op_types(); i++)
    if (nb_has_gradient(nb_op_type_name(i)) && needs_spec(nb_op_type_name(i)) && !has_spec(nb_op_type_name(i)))
      append(problems, sizeof problems, "no gradcheck spec for op %s; ", nb_op_type_name(i));
  const char *ops[COUNT(unary_ops) + COUNT(binary_ops) + COUNT(fused_ops) + COUNT(reduce_ops) + COUNT(other_specs)];
  int n = 0;
  for (int i = 0; i < COUNT(unary_ops); i++) ops[n++] = unary_ops[i].op;
  for (int i = 0; i < COUNT(binary_ops); i++) ops[n++] = binary_ops[i].op;
  for (int i = 0; i < COUNT(fused_ops); i++) ops[n++] = fused_ops[i].op;
  for (int i = 0; i < COUNT(reduce_ops); i++) ops[n++] = reduce_ops[i].op;
  for (int i = 0; i < COUNT(other_specs); i++) ops[n++] = other_specs[i].op;
  for (int i = 0; i < n; i++) {
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = !strcmp(ops[i], ops[j]);
    if (!seen && !nb_has_gradient(ops[i]))
      append(problems, sizeof problems, "spec for op %s, which has no gradient; ", ops[i]);
  }
  if (*problems) fail_msg("%s", problems);
}

/* ---- the cases: each table walked with static shapes, then all with unknown dims -------- */

static void walk_unary(tally *t, bool unknown_dims) {
  t->table = "unary";
  for (int o = 0; o < COUNT(unary_ops); o++)
    for (int s = 0; s < COUNT(unary_shapes); s++) {
      gc_spec sp = {.op = unary_ops[o].op, .in = {var(unary_ops[o].dom, &unary_shapes[s])}};
      t->check(t, &sp, s, 1000u * (uint64_t)o + (uint64_t)s, unknown_dims);
    }
}

static void walk_binary(tally *t, bool unknown_dims) {
  t->table = "binary";
  for (int o = 0; o < COUNT(binary_ops); o++)
    for (int s = 0; s < COUNT(binary_shapes); s++) {
      gc_spec sp = {.op = binary_ops[o].op,
                    .in = {var(binary_ops[o].a, &binary_shapes[s][0]), var(binary_ops[o].b, &binary_shapes[s][1])}};
      t->check(t, &sp, s, 100000u + 1000u * (uint64_t)o + (uint64_t)s, unknown_dims);
    }
}

static void walk_fused(tally *t, bool unknown_dims) {
  t->table = "fused";
  for (int o = 0; o < COUNT(fused_ops); o++)
    for (int s = 0; s < COUNT(fused_shapes); s++) {
      gc_spec sp = {.op = fused_ops[o].op,
                    .in = {var(fused_ops[o].a, &fused_shapes[s]), var(fused_ops[o].b, &fused_shapes[s])}};
      t->check(t, &sp, s, 200000u + 1000u * (uint64_t)o + (uint64_t)s, unknown_dims);
    }
}

/* With dims unknown, Prod's gradient takes its exclusive products from Cumprod, whose own
   gradient divides by x as TF's does: the second order at a zero of x is a documented
   limit (docs/gradients.md), so only the first order of those cases is checked. */
static bool documented_limit(const gc_spec *sp, bool unknown_dims) {
  if (!unknown_dims || strcmp(sp->op, "Prod") || !sp->in[0].vals) return false;
  for (int64_t i = 0; i < elems(&sp->in[0]); i++)
    if (sp->in[0].vals[i] == 0) return true;
  return false;
}

static void walk_reductions(tally *t, bool unknown_dims) {
  t->table = "reductions";
  for (int o = 0; o < COUNT(reduce_ops); o++)
    for (int s = 0; s < COUNT(reduce_cases); s++) {
      gc_spec sp = {.op = reduce_ops[o].op,
                    .in = {reduce_cases[s].x, reduce_cases[s].axes},
                    .attrs = {AB("keep_dims", reduce_cases[s].keep_dims)}};
      sp.in[0].dom = reduce_ops[o].dom;
      t->check(t, &sp, s, 300000u + 1000u * (uint64_t)o + (uint64_t)s, unknown_dims);
    }
}

static void walk_others(tally *t, bool unknown_dims) {
  t->table = "others";
  for (int i = 0; i < COUNT(other_specs); i++) {
    int index = 0; /* the case's number among its op's cases */
    for (int j = 0; j < i; j++) index += !strcmp(other_specs[j].op, other_specs[i].op);
    gc_spec sp = other_specs[i];
    sp.first_only |= documented_limit(&sp, unknown_dims);
    t->check(t, &sp, index, 400000u + (uint64_t)i, unknown_dims);
  }
}

static void walk_all(tally *t, bool unknown_dims) {
  walk_unary(t, unknown_dims);
  walk_binary(t, unknown_dims);
  walk_fused(t, unknown_dims);
  walk_reductions(t, unknown_dims);
  walk_others(t, unknown_dims);
}

#define WALK_TEST(name, walk, what)  \
  static void name(void **state) {   \
    (void)state;                     \
    tally t = {.check = check_case}; \
    walk(&t, false);                 \
    finish(&t, what);                \
  }

WALK_TEST(test_unary, walk_unary, "unary ops")
WALK_TEST(test_binary, walk_binary, "binary ops")
WALK_TEST(test_fused_gradient_ops, walk_fused, "fused gradient ops")
WALK_TEST(test_reductions, walk_reductions, "reductions")
WALK_TEST(test_other_ops, walk_others, "other ops")

/* The same cases with placeholders whose dims are all unknown (-1): gradients must then
   take their shapes at run time (Shape, BroadcastGradientArgs, ...), as TF's do. */
static void test_unknown_dims(void **state) {
  (void)state;
  tally t = {.check = check_case};
  walk_all(&t, true);
  finish(&t, "unknown dims");
}

/* The eager tape's first and second order equal the graph's, case by case. */
static void test_tape_equals_graph(void **state) {
  (void)state;
  tally t = {.check = check_tape_case};
  walk_all(&t, false);
  finish(&t, "tape against graph");
}

/* The same on one persistent tape, which records its own first backward pass (TF's). */
static void test_one_tape_equals_graph(void **state) {
  (void)state;
  tally t = {.check = check_one_tape_case};
  walk_all(&t, false);
  finish(&t, "one persistent tape against graph");
}

/* Every op's Jacobian on the tape, batched where the op allows, equals the loop's. */
static void test_jacobian_vectorized_equals_loop(void **state) {
  (void)state;
  tally t = {.check = check_jacobian_case};
  walk_all(&t, false);
  finish(&t, "vectorized Jacobian against the loop");
}

/* Forward mode through every op: the JVP (each op's forward rule, or its transposed
   gradient) against differences and reverse mode, with static and with unknown dims. */
static void test_jvp(void **state) {
  (void)state;
  tally t = {.check = check_jvp_case};
  walk_all(&t, false);
  walk_all(&t, true);
  finish(&t, "forward mode (nb_jvp)");
}

/* Eager forward mode through every op: the accumulator equals nb_jvp. */
static void test_accumulator_equals_graph(void **state) {
  (void)state;
  tally t = {.check = check_accumulator_case};
  walk_all(&t, false);
  finish(&t, "forward accumulator against nb_jvp");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_gradient_has_a_spec),
      cmocka_unit_test(test_unary),
      cmocka_unit_test(test_binary),
      cmocka_unit_test(test_fused_gradient_ops),
      cmocka_unit_test(test_reductions),
      cmocka_unit_test(test_other_ops),
      cmocka_unit_test(test_unknown_dims),
      cmocka_unit_test(test_tape_equals_graph),
      cmocka_unit_test(test_one_tape_equals_graph),
      cmocka_unit_test(test_jacobian_vectorized_equals_loop),
      cmocka_unit_test(test_jvp),
      cmocka_unit_test(test_accumulator_equals_graph),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
