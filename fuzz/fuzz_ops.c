/* libFuzzer target for op programs (make fuzz). Each input decodes into a small program
   over the op registry: leaves of random dtypes, ranks 0-4 and dims 0-3 (unknown, -1, in
   graphs), then up to four op calls through nb_op with random inputs from the pool,
   random arities and random (often wrong) attrs. The registry includes a user op
   (nb_register_op) with list(float) and list(type) attrs, so their validation is fuzzed
   too. The program runs
   - eagerly under two nested tapes (first and second order gradients of the last float
     output with respect to the float leaves), and
   - as a graph: placeholders, the ops, nb_gradients and the gradient of the gradient's
     sum, then a session run fed concrete values.
   Invariants checked (a violation aborts, which libFuzzer reports): a failing call
   returns NULL/non-OK and leaves a non-empty message; a successful op gives non-NULL
   outputs; ASan/UBSan/LeakSanitizer see nothing. */
#include "../src/ops/op.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_POOL 12
#define MAX_LEAVES 4
#define MAX_STEPS 4
#define MAX_IN 6
#define MAX_OUT 4

/* The input as a stream of bytes; zeros once it is used up. */
typedef struct {
  const uint8_t *p;
  size_t n;
} bytes;

static uint8_t next_byte(bytes *b) {
  if (b->n == 0) return 0;
  b->n--;
  return *b->p++;
}

static unsigned next_below(bytes *b, unsigned n) { return n ? next_byte(b) % n : 0; }

static void check(bool ok, const char *what) {
  if (ok) return;
  fprintf(stderr, "fuzz_ops: invariant broken: %s\n", what);
  abort();
}

/* A failed call must leave its error, with a message, on the context. */
static void check_error_reported(nb_ctx *c, nb_code rc, const char *what) {
  if (rc == NB_OK) return;
  check(nb_status(c) != NB_OK, what);
  check(nb_error(c)[0] != '\0', what);
}

/* One leaf: its dtype, its concrete shape, and which dims a placeholder leaves unknown. */
typedef struct {
  nb_dtype dtype;
  int rank;
  int64_t shape[4];
  bool unknown_dim[4];
} leaf_spec;

/* One op call: the op, indices into the pool for its inputs, its attrs. */
typedef struct {
  const nbop_def *def;
  int nin, nout;
  int in[MAX_IN];
  int nattrs;
  nb_attr attrs[NBOP_MAX_ATTRS + 1];
  int64_t ints[NBOP_MAX_ATTRS + 1][5];
  double float_list[NBOP_MAX_ATTRS + 1][5];
  nb_dtype type_list[NBOP_MAX_ATTRS + 1][5];
  int tensor_attr_input[NBOP_MAX_ATTRS + 1]; /* pool index of a tensor attr, -1 none */
} step_spec;

typedef struct {
  int nleaves, nsteps;
  leaf_spec leaf[MAX_LEAVES];
  step_spec step[MAX_STEPS];
} program;

static const char *const strings[] = {"SAME", "VALID", "EXPLICIT", "NHWC", "NCHW", "", "bogus", "x"};
static const double floats[] = {0.0, 0.5, 1.0, -1.0, 1e-3, 3.0, NAN, INFINITY};

static void decode_leaf(bytes *b, leaf_spec *l) {
  l->dtype = (nb_dtype)next_below(b, 5);
  l->rank = (int)next_below(b, 5);
  uint8_t unknown = next_byte(b);
  for (int d = 0; d < l->rank; d++) {
    l->shape[d] = next_below(b, 4);
    l->unknown_dim[d] = (unknown >> d) & 1;
  }
}

static void decode_attr(bytes *b, const nbop_attr_spec *spec, step_spec *s, int pool_n) {
  int a = s->nattrs++;
  nb_attr *at = &s->attrs[a];
  s->tensor_attr_input[a] = -1;
  /* Mostly the spec's own name and kind; sometimes another kind under its name. */
  nb_attr_kind kind = next_below(b, 8) == 7 ? (nb_attr_kind)next_below(b, NB_ATTR_TYPES + 1) : spec->kind;
  const char *name = spec->name;
  switch (kind) {
    case NB_ATTR_INT: *at = nb_attr_int(name, (int64_t)next_below(b, 12) - 3); break;
    case NB_ATTR_FLOAT: *at = nb_attr_float(name, floats[next_below(b, 8)]); break;
    case NB_ATTR_BOOL: *at = nb_attr_bool(name, next_below(b, 2)); break;
    case NB_ATTR_STR: *at = nb_attr_str(name, strings[next_below(b, 8)]); break;
    case NB_ATTR_TYPE: *at = nb_attr_type(name, (nb_dtype)next_below(b, 7)); break;
    case NB_ATTR_INTS: {
      int n = (int)next_below(b, 6);
      for (int i = 0; i < n; i++) s->ints[a][i] = (int64_t)next_below(b, 6) - 1;
      *at = nb_attr_ints(name, s->ints[a], n);
      break;
    }
    case NB_ATTR_FLOATS: {
      int n = (int)next_below(b, 6);
      for (int i = 0; i < n; i++) s->float_list[a][i] = floats[next_below(b, 8)];
      *at = nb_attr_floats(name, s->float_list[a], n);
      break;
    }
    case NB_ATTR_TYPES: {
      int n = (int)next_below(b, 6);
      for (int i = 0; i < n; i++) s->type_list[a][i] = (nb_dtype)next_below(b, 7);
      *at = nb_attr_types(name, s->type_list[a], n);
      break;
    }
    default:
      *at = nb_attr_tensor(name, NULL);
      s->tensor_attr_input[a] = (int)next_below(b, (unsigned)pool_n);
      break;
  }
}

static void decode_step(bytes *b, step_spec *s, int pool_n) {
  unsigned id = (unsigned)next_byte(b) << 8 | next_byte(b);
  s->def = nbop_by_id((int)(id % (unsigned)nbop_count()));
  int nfixed = s->def->nin + (s->def->variadic ? 1 + (int)next_below(b, 3) : 0);
  s->nin = nfixed + (next_below(b, 16) == 15) - (next_below(b, 16) == 15);
  if (s->nin < 0) s->nin = 0;
  if (s->nin > MAX_IN) s->nin = MAX_IN;
  for (int i = 0; i < s->nin; i++) s->in[i] = (int)next_below(b, (unsigned)pool_n);
  s->nout = s->def->nout == NBOP_VARIADIC ? 1 + (int)next_below(b, 3) : s->def->nout;
  if (s->nout > MAX_OUT) s->nout = MAX_OUT;
  s->nattrs = 0;
  for (int a = 0; a < s->def->nattrs; a++)
    if (next_below(b, 3)) decode_attr(b, &s->def->attrs[a], s, pool_n);
  if (next_below(b, 32) == 31) {
    nbop_attr_spec bogus = {.name = "no_such_attr", .kind = NB_ATTR_INT};
    decode_attr(b, &bogus, s, pool_n);
  }
}

static void decode(const uint8_t *data, size_t size, program *p) {
  bytes b = {data, size};
  p->nleaves = 1 + (int)next_below(&b, MAX_LEAVES);
  for (int i = 0; i < p->nleaves; i++) decode_leaf(&b, &p->leaf[i]);
  p->nsteps = 1 + (int)next_below(&b, MAX_STEPS);
  int pool_n = p->nleaves;
  for (int s = 0; s < p->nsteps; s++) {
    decode_step(&b, &p->step[s], pool_n);
    pool_n += p->step[s].nout;
    if (pool_n > MAX_POOL) {
      p->nsteps = s;
      break;
    }
  }
}

/* A concrete value for a leaf: small values, so that ops reading sizes, indices or
   counts from their inputs stay small (between -1 and 3). */
static nb_tensor *leaf_value(nb_ctx *c, const leaf_spec *l, int seed) {
  int64_t n = 1;
  for (int d = 0; d < l->rank; d++) n *= l->shape[d];
  double v[81];
  for (int64_t i = 0; i < n; i++) v[i] = (double)((seed * 7 + i * 5) % 5) - 1 + (l->dtype <= NB_F64 ? 0.25 : 0);
  nb_tensor *x64 = nb_tensor_from(c, NB_F64, l->rank, l->shape, v);
  return nb_cast(c, x64, l->dtype);
}

typedef struct {
  nb_tensor *t[MAX_POOL];
  int n;
} pool;

/* A successful op's output: a tensor of a real dtype and a rank the library allows. */
static void check_output(const nb_tensor *x) {
  check(x != NULL, "nb_op succeeded with a NULL output");
  check(nb_dtype_of(x) <= NB_BOOL, "an output has an invalid dtype");
  check(nb_rank(x) >= -1 && nb_rank(x) <= NB_MAX_RANK, "an output has an invalid rank");
}

/* After an error the context is sticky: the next op does nothing and keeps the error. */
static void check_sticky(nb_ctx *c, nb_tensor *x) {
  nb_code before = nb_status(c);
  check(nb_neg(c, x) == NULL && nb_status(c) == before, "an op ran on a context in error");
}

/* Runs the program's steps on c over the leaves already in pl. */
static void run_steps(nb_ctx *c, const program *p, pool *pl) {
  for (int s = 0; s < p->nsteps; s++) {
    const step_spec *st = &p->step[s];
    nb_tensor *in[MAX_IN], *out[MAX_OUT] = {0};
    nb_attr attrs[NBOP_MAX_ATTRS + 1];
    for (int i = 0; i < st->nin; i++) in[i] = pl->t[st->in[i] % pl->n];
    for (int a = 0; a < st->nattrs; a++) {
      attrs[a] = st->attrs[a];
      if (st->tensor_attr_input[a] >= 0) attrs[a].v.tensor = pl->t[st->tensor_attr_input[a] % pl->n];
    }
    nb_code rc = nb_op(c, st->def->name, in, st->nin, attrs, st->nattrs, out, st->nout);
    check_error_reported(c, rc, "nb_op failed without a message");
    if (rc == NB_OK)
      for (int o = 0; o < st->nout; o++) check_output(out[o]);
    else
      check_sticky(c, pl->t[0]);
    nb_clear_error(c);
    for (int o = 0; o < st->nout && pl->n < MAX_POOL; o++)
      if (out[o]) pl->t[pl->n++] = out[o];
  }
}

static bool is_float(const nb_tensor *x) { return x && (nb_dtype_of(x) == NB_F32 || nb_dtype_of(x) == NB_F64); }

/* The sum of the last float tensor made after the leaves; NULL when there is none. */
static nb_tensor *target_of(nb_ctx *c, const pool *pl, int nleaves) {
  for (int i = pl->n - 1; i >= nleaves; i--)
    if (is_float(pl->t[i]) && !nb_is_indexed_slices(pl->t[i])) return nb_sum(c, pl->t[i], NULL, 0, false);
  return NULL;
}

/* The sum of the non-NULL float gradients, the target of the second order. */
static nb_tensor *sum_of(nb_ctx *c, nb_tensor *const *g, int n) {
  nb_tensor *total = NULL;
  for (int i = 0; i < n; i++) {
    if (!is_float(g[i])) continue;
    nb_tensor *s = nb_cast(c, nb_sum(c, g[i], NULL, 0, false), NB_F64);
    total = total ? nb_add(c, total, s) : s;
  }
  return total;
}

static void fuzz_eager(const program *p) {
  nb_ctx *c = nb_eager_new();
  check(c != NULL, "nb_eager_new");
  nb_tape *outer = nb_tape_begin(c, 1), *inner = nb_tape_begin(c, 0);
  pool pl = {.n = 0};
  for (int i = 0; i < p->nleaves; i++) {
    pl.t[pl.n++] = leaf_value(c, &p->leaf[i], i);
    nb_tape_watch(outer, pl.t[i]);
    nb_tape_watch(inner, pl.t[i]);
  }
  check(nb_status(c) == NB_OK, "leaves failed");
  run_steps(c, p, &pl);
  nb_tensor *y = target_of(c, &pl, p->nleaves), *g[MAX_LEAVES] = {0}, *gg[MAX_LEAVES] = {0};
  if (y) {
    nb_code rc = nb_tape_gradient(inner, &y, 1, pl.t, p->nleaves, NULL, g);
    check_error_reported(c, rc, "nb_tape_gradient failed without a message");
    nb_clear_error(c);
    nb_tensor *gy = rc == NB_OK ? sum_of(c, g, p->nleaves) : NULL;
    if (gy) {
      rc = nb_tape_gradient(outer, &gy, 1, pl.t, p->nleaves, NULL, gg);
      check_error_reported(c, rc, "second-order nb_tape_gradient failed without a message");
    }
  }
  nb_tape_end(inner);
  nb_tape_end(outer);
  nb_ctx_free(c);
}

static nb_tensor *placeholder_of(nb_ctx *c, const leaf_spec *l, int i) {
  int64_t shape[4];
  for (int d = 0; d < l->rank; d++) shape[d] = l->unknown_dim[d] ? -1 : l->shape[d];
  char name[16];
  snprintf(name, sizeof name, "x%d", i);
  return nb_placeholder(c, l->dtype, l->rank, shape, name);
}

/* Runs fetches in a session fed the leaves' concrete values; frees the results. */
static void run_session(nb_graph *g, const program *p, nb_tensor *const *feeds, nb_tensor *const *fetch, int nfetch) {
  nb_ctx *values = nb_eager_new();
  nb_tensor *fv[MAX_LEAVES], *res[2 * MAX_LEAVES + 1] = {0};
  for (int i = 0; i < p->nleaves; i++) fv[i] = leaf_value(values, &p->leaf[i], i);
  nb_session *s = nb_session_new(g);
  check(s != NULL, "nb_session_new");
  nb_code rc = nb_run(s, feeds, fv, p->nleaves, fetch, nfetch, res);
  if (rc != NB_OK) check(nb_session_error(s)[0] != '\0', "nb_run failed without a message");
  for (int i = 0; i < nfetch; i++)
    if (rc == NB_OK) nb_tensor_free(res[i]);
  nb_session_free(s);
  nb_ctx_free(values);
}

static void fuzz_graph(const program *p) {
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  check(g && c, "nb_graph_new");
  pool pl = {.n = 0};
  for (int i = 0; i < p->nleaves; i++) pl.t[pl.n++] = placeholder_of(c, &p->leaf[i], i);
  check(nb_status(c) == NB_OK, "placeholders failed");
  run_steps(c, p, &pl);
  nb_tensor *fetch[2 * MAX_LEAVES + 1];
  int nfetch = 0;
  nb_tensor *y = target_of(c, &pl, p->nleaves), *dx[MAX_LEAVES] = {0}, *ddx[MAX_LEAVES] = {0};
  if (y) {
    fetch[nfetch++] = y;
    nb_code rc = nb_gradients(c, &y, 1, pl.t, p->nleaves, NULL, dx);
    check_error_reported(c, rc, "nb_gradients failed without a message");
    nb_clear_error(c);
    nb_tensor *gy = rc == NB_OK ? sum_of(c, dx, p->nleaves) : NULL;
    if (gy && nb_gradients(c, &gy, 1, pl.t, p->nleaves, NULL, ddx) != NB_OK) {
      check_error_reported(c, nb_status(c), "second-order nb_gradients failed without a message");
      memset(ddx, 0, sizeof ddx);
    }
    nb_clear_error(c);
    for (int i = 0; i < p->nleaves; i++) {
      if (dx[i]) fetch[nfetch++] = dx[i];
      if (ddx[i] && nfetch < 2 * MAX_LEAVES + 1) fetch[nfetch++] = ddx[i];
    }
  }
  if (nfetch) run_session(g, p, pl.t, fetch, nfetch);
  nb_ctx_free(c);
  nb_graph_free(g);
}

/* The user op: y = x * prod(scales) for float x (a copy otherwise); "types" lists the
   dtypes it accepts, restricted to float32 and float64. */
static nb_code scale_kernel(nb_op_ctx *k) {
  int nscales = 0, ntypes = 0;
  const double *scales = nb_opctx_attr_floats(k, "scales", &nscales);
  nb_opctx_attr_types(k, "types", &ntypes);
  const nb_tensor *x = nb_opctx_input(k, 0);
  double factor = 1.0;
  for (int i = 0; i < nscales; i++) factor *= scales[i];
  int64_t n = nb_num_elements(x);
  const void *in = nb_opctx_input_value(k, 0);
  void *out = nb_opctx_output_data(k, 0);
  if (nb_dtype_of(x) == NB_F32)
    for (int64_t i = 0; i < n; i++) ((float *)out)[i] = (float)(((const float *)in)[i] * factor);
  else if (nb_dtype_of(x) == NB_F64)
    for (int64_t i = 0; i < n; i++) ((double *)out)[i] = ((const double *)in)[i] * factor;
  else
    memcpy(out, in, (size_t)n * nb_dtype_size(nb_dtype_of(x)));
  return NB_OK;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  static const double unit[] = {1.0};
  static const nb_dtype f32[] = {NB_F32};
  static const nb_op_arg x = {.name = "x", .type_attr = "T"}, y = {.name = "y", .type_attr = "T"};
  static nb_op_attr_def attrs[3] = {
      {.name = "T", .kind = NB_ATTR_TYPE, .required = true},
      {.name = "scales", .kind = NB_ATTR_FLOATS},
      {.name = "types", .kind = NB_ATTR_TYPES, .allowed_types = 1u << NB_F32 | 1u << NB_F64},
  };
  attrs[1].def = nb_attr_floats("", unit, 1);
  attrs[2].def = nb_attr_types("", f32, 1);
  nb_op_spec spec = {.name = "FuzzScale",
                     .inputs = &x,
                     .ninputs = 1,
                     .outputs = &y,
                     .noutputs = 1,
                     .attrs = attrs,
                     .nattrs = 3,
                     .kernel = scale_kernel};
  check(nb_register_op(&spec) == NB_OK, nb_registry_error());
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  program p;
  decode(data, size, &p);
  fuzz_eager(&p);
  fuzz_graph(&p);
  return 0;
}
