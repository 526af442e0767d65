/* _FusedElementwise (see fused.h). Each member runs the loop its own op's kernel runs, on
   one block of the output at a time: an input that has the output's shape is read in
   place, a broadcast one (a scalar, a row over the last dim, a column of one value per
   row) is expanded into a block buffer, members' values live in block buffers (reused once
   dead) and outputs are written in place. Shapes are checked member by member with each
   member's own validate and infer under its node's name, so errors read as the unfused
   ones. Shapes the block loop does not cover (a member smaller than the output, an input
   broadcast along a middle dim) run the members one by one instead.
   A reduction member adds up each block into double accumulators (as the Reduce kernel
   does for float32): per row, or per chunk of rows for column and total sums. The rows
   are cut into chunks the same way at every thread count and the chunks' partial sums
   are added in chunk order, so the results do not depend on the thread count. */
#include "fused.h"

#include "elementwise.h"

#include <string.h>

#define NCHUNK 16 /* row chunks of a program with a reduction: its threads' work units */
/* Elements per block: a program's block buffers (4 KiB each in float32) then stay in L1/L2
   (at 4096, LayerNorm's groups missed L1 twice as often as the unfused ops). */
#define BLOCK 1024
/* The most elements a block holds: a row up to this long is one block, summed in one piece. */
#define BLOCK_CAP 4096
#define PAGE 4096
/* Bytes between block buffers: a multiple of PAGE, so all sit at one offset modulo PAGE. */
#define REG_STRIDE(esz) (((size_t)BLOCK_CAP * (esz) + PAGE - 1) / PAGE * PAGE)
/* One unit's block buffers, with a page of slack to place them (run_block). */
#define UNIT_BYTES(r) ((size_t)(r)->nregs * REG_STRIDE((r)->esz) + PAGE)

enum { KIND_UNARY, KIND_PAIR, KIND_BINARY, KIND_BROADCAST, KIND_REDUCE };

/* What a reduction member adds up, the full shape seen as [outer, inner]. */
typedef enum { RED_ROWS, RED_COLS, RED_ALL } reduce_class;

static const nbop_fused_program *program_of(const nbop_attrval *attr) {
  const nbop_fused_program *p = NULL;
  int64_t bits = attr[NBOP_FUSED_PROGRAM].i;
  memcpy(&p, &bits, sizeof p);
  return p;
}

static bool is_add_n(const nbop_def *def) {
  return strcmp(def->name, "AddN") == 0 || strcmp(def->name, "AccumulateNV2") == 0;
}

bool nbop_fused_is_broadcast(const nbop_def *def) { return strcmp(def->name, "BroadcastTo") == 0; }

bool nbop_fused_is_reduction(const nbop_def *def) {
  return strcmp(def->name, "Sum") == 0 || strcmp(def->name, "Mean") == 0;
}

static int kind_of(const nbop_def *def) {
  return def->kernel == nbop_unary_kernel  ? KIND_UNARY
         : def->kernel == nbop_pair_kernel ? KIND_PAIR
         : nbop_fused_is_broadcast(def)    ? KIND_BROADCAST
         : nbop_fused_is_reduction(def)    ? KIND_REDUCE
                                           : KIND_BINARY;
}

/* The reduction over axes of a rank-`rank` value as a reduce_class, -1 for another one. */
static int reduce_class_of(const nb_tensor *axes, int rank) {
  const void *v = nbcore_tdata(axes);
  if ((axes->dtype != NB_I32 && axes->dtype != NB_I64) || (axes->size > 0 && !v) || rank > 31) return -1;
  uint32_t mask = 0, last = rank > 0 ? 1u << (rank - 1) : 0, all = rank > 0 ? last | (last - 1) : 0;
  for (int64_t i = 0; i < axes->size; i++) {
    int a;
    int64_t ax = axes->dtype == NB_I32 ? ((const int32_t *)v)[i] : ((const int64_t *)v)[i];
    if (!nbcore_norm_axis(ax, rank, &a)) return -1;
    mask |= 1u << a;
  }
  return mask == all ? RED_ALL : mask == last ? RED_ROWS : rank > 1 && mask == last - 1 ? RED_COLS : -1;
}

bool nbop_fused_reduction_axes(const nb_tensor *axes, int rank) { return reduce_class_of(axes, rank) >= 0; }

bool nbop_fusible(const nbop_def *def, nb_dtype t) {
  if (!nbcore_is_float(t)) return false;
  if (def->kernel == nbop_unary_kernel) return ((const nbop_unary_impl *)def->impl)->fn[t] != NULL;
  if (def->kernel == nbop_pair_kernel) return ((const nbop_pair_impl *)def->impl)->fn[t] != NULL;
  return is_add_n(def) || nbop_fused_is_broadcast(def) || nbop_fused_is_reduction(def) ||
         nbop_binary_loop_of(def, t) != NULL;
}

/* ---- shapes ------------------------------------------------------------------------------ */

/* The input or member value a names (members as shape-only tensors in vals). */
static const nb_tensor *operand(const nbop_kargs *k, const nb_tensor *vals, int32_t a) {
  const nbop_fused_program *p = program_of(k->attr);
  return a < p->nin ? k->in[a] : &vals[a - p->nin];
}

/* The member's inputs: its operands, then BroadcastTo's shape or a reduction's axes. */
static int member_inputs(const nbop_fused_instr *in, const nb_tensor **args) {
  if (in->known) args[in->nargs] = in->known;
  return in->nargs + (in->known != NULL);
}

/* Member i's validate and infer, under its own node's name, into the shape-only vals[i]. */
static nb_code member_shape(nbop_kargs *k, const nbop_fused_instr *in, const nb_tensor **args, nb_tensor *val) {
  nbop_kargs sub;
  nbop_meta m;
  sub.ctx = k->ctx;
  sub.def = in->def;
  sub.nin = member_inputs(in, args);
  sub.nout = 1;
  sub.in = sub.orig_in = (nb_tensor *const *)args;
  sub.deferred = false;
  sub.node_name = NULL;
  sub.out = &m;
  sub.res = NULL;
  sub.threads = k->threads;
  if (in->attr)
    memcpy(sub.attr, in->attr, (size_t)in->def->nattrs * sizeof *in->attr);
  else
    nbop_attr_defaults(in->def, sub.attr);
  if (in->def->variadic) sub.attr[0].i = sub.nin - in->def->nin; /* attr "N" */
  const char *node = k->ctx->run_node;
  k->ctx->run_node = in->node;
  nb_code code = nbop_kvalidate(&sub);
  if (!code) code = in->def->infer(&sub);
  k->ctx->run_node = node;
  if (code) return code;
  memset(val, 0, sizeof *val);
  val->dtype = m.dtype;
  val->rank = m.rank;
  memcpy(val->shape, m.shape, sizeof m.shape);
  val->size = nbcore_shape_size(m.rank, m.shape);
  return NB_OK;
}

static nb_code member_shapes(nbop_kargs *k, nb_tensor *vals) {
  const nbop_fused_program *p = program_of(k->attr);
  for (int32_t i = 0; i < p->ninstr; i++) {
    const nbop_fused_instr *in = &p->instr[i];
    const nb_tensor *args[NBOP_FUSED_MAX_ARGS + 1];
    for (int32_t j = 0; j < in->nargs; j++) args[j] = operand(k, vals, in->args[j]);
    nb_code code = member_shape(k, in, args, &vals[i]);
    if (code) return code;
  }
  return NB_OK;
}

static nb_code fused_validate(nbop_kargs *k) {
  const nbop_fused_program *p = program_of(k->attr);
  if (!p || p->nin != k->nin || p->nout != k->nout || (p->nout == 1 && p->outs[0] != p->ninstr - 1))
    return nbop_kfail(k, NB_INTERNAL, "the program does not match the node's %d inputs and %d outputs", k->nin,
                      k->nout);
  for (int i = 0; i < k->nin; i++)
    if (k->in[i]->dtype != p->dtype)
      return nbop_kfail(k, NB_DTYPE, "input %d has dtype %s; the fused ops run %s", i, nb_dtype_name(k->in[i]->dtype),
                        nb_dtype_name(p->dtype));
  return NB_OK;
}

static nb_code fused_infer(nbop_kargs *k) {
  const nbop_fused_program *p = program_of(k->attr);
  nb_tensor vals[NBOP_FUSED_MAX_INSTR];
  nb_code code = member_shapes(k, vals);
  for (int32_t i = 0; i < p->nout && !code; i++) nbop_meta_like(&k->out[i], &vals[p->outs[i]]);
  return code;
}

/* ---- the block loop ------------------------------------------------------------------------ */

/* How an input maps onto the output viewed as [outer, inner] (inner: its last dim). */
typedef enum { ARG_SAME, ARG_SCALAR, ARG_ROW, ARG_COL } arg_class;

typedef struct fused_run {
  const nbop_fused_program *p;
  size_t esz;
  int64_t total, inner;
  /* Work units: chunk c is elements [c total / nchunks, (c + 1) total / nchunks), cut at
     row ends when a reduction is in the program; thread u runs chunks
     [nchunks u / nunits, nchunks (u + 1) / nunits). */
  int64_t nchunks;
  int nunits;
  bool reduces;
  /* Blocks of whole rows when a row fits in BLOCK_CAP (then every block of a unit sees a
     row or scalar input expanded alike: once per unit), else of BLOCK elements. */
  int64_t block;
  bool whole_rows;
  const char *anchor; /* an output of the full shape (run_block), NULL none */
  int kind[NBOP_FUSED_MAX_INSTR];
  double param[NBOP_FUSED_MAX_INSTR];
  nbop_binary_loop binary[NBOP_FUSED_MAX_INSTR]; /* KIND_BINARY's loops (AddN's: AddV2's) */
  reduce_class red[NBOP_FUSED_MAX_INSTR];        /* KIND_REDUCE's */
  /* KIND_REDUCE's accumulators: one per row (RED_ROWS), inner per chunk (RED_COLS), one
     per chunk (RED_ALL) */
  double *acc[NBOP_FUSED_MAX_INSTR];
  /* value v: input v < nin, else member v - nin */
  const char *data[NBOP_FUSED_MAX_INSTR * (NBOP_FUSED_MAX_ARGS + 1)];
  arg_class cls[NBOP_FUSED_MAX_INSTR * NBOP_FUSED_MAX_ARGS];
  /* block buffer, -1: read in place (an input, an output, a BroadcastTo of an input: its
     operand's buffer) */
  int reg[NBOP_FUSED_MAX_INSTR * (NBOP_FUSED_MAX_ARGS + 1)];
  int nregs;
  /* value v holds one element for a whole block, read with stride 0 (find_single_values) */
  bool single[NBOP_FUSED_MAX_INSTR * (NBOP_FUSED_MAX_ARGS + 1)];
  char *scratch; /* nunits x nregs block buffers, then the accumulators */
} fused_run;

static bool classify(fused_run *r, const nb_tensor *x, arg_class *cls) {
  int64_t last = x->rank > 0 ? x->shape[x->rank - 1] : 1;
  if (x->size == r->total)
    *cls = ARG_SAME;
  else if (x->size == 1)
    *cls = ARG_SCALAR;
  else if (x->size == r->inner && last == r->inner) /* leading dims all 1 */
    *cls = ARG_ROW;
  else if (x->size * r->inner == r->total && last == 1) /* its dims are the output's leading ones */
    *cls = ARG_COL;
  else
    return false;
  return true;
}

/* Values that hold one element for a whole block, which binary members read with stride 0
   (their loops' scalar case, the same element function) instead of from a buffer filled
   with it: a scalar input, a column input when every block is one row (LayerNorm's
   statistics), a BroadcastTo of such a value that is no output. Each is read only by
   binary members and by such BroadcastTos; a value another member reads is expanded. */
static void find_single_values(fused_run *r) {
  const nbop_fused_program *p = r->p;
  bool one_row = r->whole_rows && r->block == r->inner;
  for (int32_t v = 0; v < p->nin; v++) r->single[v] = r->cls[v] == ARG_SCALAR || (r->cls[v] == ARG_COL && one_row);
  for (int32_t i = 0; i < p->ninstr; i++)
    r->single[p->nin + i] = r->kind[i] == KIND_BROADCAST && !r->data[p->nin + i] && r->single[p->instr[i].args[0]];
  for (bool changed = true; changed;) { /* until every reader of a single value takes one */
    changed = false;
    for (int32_t i = 0; i < p->ninstr; i++) {
      const nbop_fused_instr *in = &p->instr[i];
      bool *own = &r->single[p->nin + i], takes_one = r->kind[i] == KIND_BINARY || *own;
      for (int32_t j = 0; j < in->nargs; j++)
        if (r->single[in->args[j]] && !takes_one) r->single[in->args[j]] = false, changed = true;
      if (*own && !r->single[in->args[0]]) *own = false, changed = true;
    }
  }
}

/* Buffers by liveness: a broadcast input holds one for the whole block (but a single
   one), a member that is not an output from its definition to its last use (a reduction
   has no value). A member
   never writes over its own operand: the loops would be right (each reads element i
   before writing it), but the compiler's overlap check would send them to their scalar
   form. */
static void assign_registers(fused_run *r) {
  const nbop_fused_program *p = r->p;
  int32_t last[NBOP_FUSED_MAX_INSTR * (NBOP_FUSED_MAX_ARGS + 1)];
  int free_regs[NBOP_FUSED_MAX_INSTR * (NBOP_FUSED_MAX_ARGS + 1)], nfree = 0;
  int32_t nvals = p->nin + p->ninstr;
  for (int32_t v = 0; v < nvals; v++) last[v] = -1;
  for (int32_t i = 0; i < p->ninstr; i++)
    for (int32_t j = 0; j < p->instr[i].nargs; j++) last[p->instr[i].args[j]] = i;
  r->nregs = 0;
  for (int32_t v = 0; v < p->nin; v++) r->reg[v] = r->cls[v] == ARG_SAME || r->single[v] ? -1 : r->nregs++;
  for (int32_t i = 0; i < p->ninstr; i++) {
    const nbop_fused_instr *in = &p->instr[i];
    int32_t v = p->nin + i;
    bool in_place = r->data[v] || r->single[v] || r->kind[i] == KIND_REDUCE ||
                    (r->kind[i] == KIND_BROADCAST && in->args[0] < p->nin);
    r->reg[v] = in_place ? -1 : nfree ? free_regs[--nfree] : r->nregs++;
    for (int32_t j = 0; j < in->nargs; j++) {
      int32_t a = in->args[j];
      bool dup = j == 1 && in->args[0] == a;
      if (a >= p->nin && last[a] == i && r->reg[a] >= 0 && !dup) free_regs[nfree++] = r->reg[a];
    }
  }
}

static void fill(char *dst, const char *src, size_t esz, int64_t n) {
  if (esz == sizeof(float)) {
    float v;
    memcpy(&v, src, sizeof v);
    for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = v;
  } else {
    double v;
    memcpy(&v, src, sizeof v);
    for (int64_t i = 0; i < n; i++) ((double *)dst)[i] = v;
  }
}

/* The run of positions [at, at + left) within one row: its length, its first element's
   row and column. */
static int64_t row_piece(const fused_run *r, int64_t at, int64_t left, int64_t *row, int64_t *col) {
  *row = at / r->inner;
  *col = at % r->inner;
  return r->inner - *col < left ? r->inner - *col : left;
}

/* Input x's elements at output positions [s, s + n) into dst. */
static void expand(const fused_run *r, arg_class cls, const char *x, char *dst, int64_t s, int64_t n) {
  size_t esz = r->esz;
  if (cls == ARG_SCALAR) {
    fill(dst, x, esz, n);
    return;
  }
  for (int64_t done = 0, row, col, m; done < n; done += m) { /* one piece of a row at a time */
    m = row_piece(r, s + done, n - done, &row, &col);
    if (cls == ARG_ROW)
      memcpy(dst + (size_t)done * esz, x + (size_t)col * esz, (size_t)m * esz);
    else
      fill(dst + (size_t)done * esz, x + (size_t)row * esz, esz, m);
  }
}

/* The sum of x[0..n) in double, started from zero as the Reduce kernel starts a segment's,
   so a row sum within one block has its bits. */
static double sum_of(const fused_run *r, const char *x, int64_t n) {
  double a = 0;
  nbop_float_sum_segment(r->p->dtype, &a, x, n);
  return a;
}

/* Reduction member i adds the block x (positions [s, s + n), in chunk c) to its sums. */
static void reduce_block(const fused_run *r, int32_t i, const char *x, int64_t s, int64_t n, int64_t c) {
  double *acc = r->acc[i];
  if (r->red[i] == RED_ALL) {
    acc[c] += sum_of(r, x, n);
    return;
  }
  for (int64_t done = 0, row, col, m; done < n; done += m) {
    m = row_piece(r, s + done, n - done, &row, &col);
    const char *piece = x + (size_t)done * r->esz;
    if (r->red[i] == RED_ROWS)
      acc[row] += sum_of(r, piece, m);
    else
      nbop_float_sum_rows(r->p->dtype, acc + c * r->inner + col, piece, m);
  }
}

/* Where block buffers go for a unit whose first block starts at s: at the output's address
   modulo 4 KiB, since a load whose address matches a pending store's in the low 12 bits
   (another page) waits for it ("4K aliasing"); at equal offsets each load runs ahead of
   the stores, as in the unfused loops. Blocks of whole rows of a multiple of 4 KiB keep
   that offset block after block. */
static char *unit_registers(const fused_run *r, char *scratch, int64_t s) {
  uintptr_t anchor = r->anchor ? (uintptr_t)(r->anchor + (size_t)s * r->esz) : (uintptr_t)scratch;
  return scratch + ((anchor - (uintptr_t)scratch) & (PAGE - 1));
}

/* Whether input v's block buffer holds the same values for every block of a unit. */
static bool expanded_once(const fused_run *r, int32_t v) {
  return r->whole_rows && (r->cls[v] == ARG_ROW || r->cls[v] == ARG_SCALAR);
}

/* Runs the program on positions [s, s + n) of chunk c; `first`: the unit's first block. */
static void run_block(const fused_run *r, char *regs, int64_t s, int64_t n, int64_t chunk, bool first) {
  const nbop_fused_program *p = r->p;
  size_t esz = r->esz, stride = REG_STRIDE(esz);
  char *at[NBOP_FUSED_MAX_INSTR * (NBOP_FUSED_MAX_ARGS + 1)];
  for (int32_t v = 0; v < p->nin; v++) {
    if (r->reg[v] < 0) { /* in place: of the full shape, or the block's one element */
      at[v] = (char *)r->data[v] + (!r->single[v]          ? (size_t)s
                                    : r->cls[v] == ARG_COL ? (size_t)(s / r->inner)
                                                           : 0) *
                                       esz;
      continue;
    }
    at[v] = regs + (size_t)r->reg[v] * stride;
    if (!expanded_once(r, v))
      expand(r, r->cls[v], r->data[v], at[v], s, n);
    else if (first) /* as long as any block of the unit */
      expand(r, r->cls[v], r->data[v], at[v], s, r->block);
  }
  for (int32_t i = 0; i < p->ninstr; i++) {
    const nbop_fused_instr *in = &p->instr[i];
    int32_t v = p->nin + i;
    const char *a = at[in->args[0]], *b = in->nargs > 1 ? at[in->args[1]] : NULL;
    if (r->kind[i] == KIND_REDUCE) {
      at[v] = NULL;
      reduce_block(r, i, a, s, n, chunk);
      continue;
    }
    at[v] = r->reg[v] >= 0 ? regs + (size_t)r->reg[v] * stride
            : r->data[v]   ? (char *)r->data[v] + (size_t)s * esz
                           : (char *)a; /* a BroadcastTo of an input, already expanded, or of a single value */
    switch (r->kind[i]) {
      case KIND_UNARY: ((const nbop_unary_impl *)in->def->impl)->fn[p->dtype](a, at[v], n, r->param[i]); break;
      case KIND_PAIR: ((const nbop_pair_impl *)in->def->impl)->fn[p->dtype](a, b, at[v], n, r->param[i]); break;
      case KIND_BROADCAST:
        if (at[v] != a) memcpy(at[v], a, (size_t)n * esz);
        break;
      default: r->binary[i](n, a, !r->single[in->args[0]], b, !r->single[in->args[1]], at[v]);
    }
  }
}

/* The first element of chunk c. */
static int64_t chunk_start(const fused_run *r, int64_t c) {
  if (!r->reduces && !r->whole_rows) return r->total * c / r->nchunks;
  int64_t rows = r->total / r->inner;
  return rows * c / r->nchunks * r->inner;
}

static void run_unit(void *arg, int64_t lo, int64_t hi) {
  const fused_run *r = arg;
  for (int64_t u = lo; u < hi; u++) {
    int64_t c0 = r->nchunks * u / r->nunits, c1 = r->nchunks * (u + 1) / r->nunits;
    char *regs = unit_registers(r, r->scratch + (size_t)u * UNIT_BYTES(r), chunk_start(r, c0));
    for (int64_t c = c0; c < c1; c++)
      for (int64_t s = chunk_start(r, c), end = chunk_start(r, c + 1); s < end; s += r->block)
        run_block(r, regs, s, end - s < r->block ? end - s : r->block, c, c == c0 && s == chunk_start(r, c));
  }
}

/* The reductions' results: their sums (chunk partials added in chunk order), a Mean's
   divided by its count, in the output's dtype. */
static void finish_reductions(const fused_run *r) {
  const nbop_fused_program *p = r->p;
  int64_t outer = r->total / r->inner;
  for (int32_t i = 0; i < p->ninstr; i++) {
    if (r->kind[i] != KIND_REDUCE) continue;
    int64_t n = r->red[i] == RED_ROWS ? outer : r->red[i] == RED_COLS ? r->inner : 1;
    double *acc = r->acc[i], count = (double)(r->total / n);
    bool mean = strcmp(p->instr[i].def->name, "Mean") == 0;
    for (int64_t c = 1; r->red[i] != RED_ROWS && c < r->nchunks; c++)
      for (int64_t j = 0; j < n; j++) acc[j] += acc[c * n + j];
    char *out = (char *)r->data[p->nin + i];
    for (int64_t j = 0; j < n; j++) {
      double v = mean ? acc[j] / count : acc[j];
      if (r->esz == sizeof(float))
        ((float *)out)[j] = (float)v;
      else
        ((double *)out)[j] = v;
    }
  }
}

/* Whether the block loop covers these shapes: every member but the reductions has the
   shape of the last of them (the full shape), every input a class, every reduction one
   of the epilogue's; fills r's shape facts and input and reduction classes. */
static bool block_shapes(nbop_kargs *k, fused_run *r, const nb_tensor *vals) {
  const nbop_fused_program *p = r->p;
  const nb_tensor *full = NULL;
  r->reduces = false;
  for (int32_t i = 0; i < p->ninstr; i++)
    if (nbop_fused_is_reduction(p->instr[i].def))
      r->reduces = true;
    else
      full = &vals[i];
  if (!full) return false;
  r->total = full->size;
  r->inner = full->rank > 0 ? full->shape[full->rank - 1] : 1;
  for (int32_t i = 0; i < p->ninstr; i++) {
    const nbop_fused_instr *in = &p->instr[i];
    bool reduction = nbop_fused_is_reduction(in->def);
    const nb_tensor *v = reduction ? operand(k, vals, in->args[0]) : &vals[i];
    if (v->rank != full->rank || memcmp(v->shape, full->shape, (size_t)full->rank * sizeof *full->shape)) return false;
    int red = reduction ? reduce_class_of(in->known, full->rank) : 0;
    if (red < 0) return false;
    r->red[i] = (reduce_class)red;
  }
  for (int32_t v = 0; v < p->nin; v++)
    if (!classify(r, k->in[v], &r->cls[v])) return false;
  return r->inner > 0 && r->total > 0; /* an empty reduction's identity: the members' own kernels */
}

static void prepare_run(nbop_kargs *k, fused_run *r) {
  const nbop_fused_program *p = r->p;
  r->esz = nb_dtype_size(p->dtype);
  nbop_binary_loop add = nbop_binary_loop_of(nbop_lookup("AddV2"), p->dtype);
  for (int32_t i = 0; i < p->ninstr; i++) {
    const nbop_def *def = p->instr[i].def;
    r->kind[i] = kind_of(def);
    r->binary[i] = is_add_n(def) ? add : nbop_binary_loop_of(def, p->dtype);
    r->param[i] = p->instr[i].attr ? nbop_loop_param(p->instr[i].def, p->instr[i].attr) : 0;
    r->data[p->nin + i] = NULL;
  }
  for (int32_t v = 0; v < p->nin; v++) r->data[v] = nbcore_tdata(k->in[v]);
  r->anchor = NULL;
  for (int32_t o = 0; o < p->nout; o++) {
    r->data[p->nin + p->outs[o]] = nbcore_tdata(k->res[o]);
    if (!r->anchor && r->kind[p->outs[o]] != KIND_REDUCE) r->anchor = r->data[p->nin + p->outs[o]];
  }
  find_single_values(r);
  assign_registers(r);
}

/* Doubles the reductions' accumulators take; with `at`, points r->acc into it and zeroes them. */
static size_t place_accumulators(fused_run *r, double *at) {
  size_t n = 0;
  for (int32_t i = 0; i < r->p->ninstr; i++) {
    if (r->kind[i] != KIND_REDUCE) continue;
    size_t len = r->red[i] == RED_ROWS   ? (size_t)(r->total / r->inner)
                 : r->red[i] == RED_COLS ? (size_t)(r->nchunks * r->inner)
                                         : (size_t)r->nchunks;
    if (at) {
      r->acc[i] = at + n;
      memset(r->acc[i], 0, len * sizeof *at);
    }
    n += len;
  }
  return n;
}

static nb_code run_blocks(nbop_kargs *k, fused_run *r) {
  int64_t nblocks = (r->total + BLOCK - 1) / BLOCK, rows = r->total / r->inner;
  int nt = nbop_kthreads(k, r->total);
  r->whole_rows = r->inner <= BLOCK_CAP;
  r->block = !r->whole_rows ? BLOCK : r->inner <= BLOCK ? BLOCK / r->inner * r->inner : r->inner;
  prepare_run(k, r);
  /* one chunk for one block: a total sum is then one segment, as the Reduce kernel's */
  r->nchunks = !r->reduces ? (nt < nblocks ? nt : nblocks) : r->total <= r->block ? 1 : rows < NCHUNK ? rows : NCHUNK;
  if (r->whole_rows && r->nchunks > rows) r->nchunks = rows;
  r->nunits = (int)(nt < r->nchunks ? nt : r->nchunks);
  size_t regs = (size_t)r->nunits * UNIT_BYTES(r), bytes = regs + place_accumulators(r, NULL) * sizeof(double);
  r->scratch = nbcore_scratch_alloc(k->ctx, bytes);
  if (!r->scratch) return nbop_kfail(k, NB_NOMEM, "out of memory for %zu bytes of block buffers", bytes);
  place_accumulators(r, (double *)(r->scratch + regs));
  nbop_parallel_range(r->nunits, r->nunits, run_unit, r);
  finish_reductions(r);
  nbcore_scratch_free(k->ctx, r->scratch);
  return NB_OK;
}

/* ---- one member at a time ---------------------------------------------------------------- */

/* Each member dispatched as its own op (errors name its node), outputs copied over. */
static nb_code run_members(nbop_kargs *k) {
  const nbop_fused_program *p = program_of(k->attr);
  nb_tensor *vals[NBOP_FUSED_MAX_INSTR] = {NULL};
  nb_ctx *c = k->ctx;
  const char *node = c->run_node;
  nb_code code = NB_OK;
  for (int32_t i = 0; i < p->ninstr && !code; i++) {
    const nbop_fused_instr *in = &p->instr[i];
    const nb_tensor *args[NBOP_FUSED_MAX_ARGS + 1];
    for (int32_t j = 0; j < in->nargs; j++)
      args[j] = in->args[j] < p->nin ? k->in[in->args[j]] : vals[in->args[j] - p->nin];
    c->run_node = in->node;
    code = nbop_dispatch(c, in->def, (nb_tensor *const *)args, member_inputs(in, args), in->attr, &vals[i], 1);
  }
  c->run_node = node;
  for (int32_t o = 0; o < p->nout && !code; o++) {
    const nb_tensor *v = vals[p->outs[o]];
    memcpy(nbcore_tdata(k->res[o]), nbcore_tdata(v), (size_t)v->size * nb_dtype_size(v->dtype));
  }
  for (int32_t i = 0; i < p->ninstr; i++) nb_tensor_free(vals[i]);
  return code;
}

static nb_code fused_kernel(nbop_kargs *k) {
  fused_run r;
  nb_tensor vals[NBOP_FUSED_MAX_INSTR];
  r.p = program_of(k->attr);
  nb_code code = member_shapes(k, vals);
  if (code) return code;
  return block_shapes(k, &r, vals) ? run_blocks(k, &r) : run_members(k);
}

static nbop_def fused_op = {.name = "_FusedElementwise",
                            .nin = 0,
                            .variadic = true,
                            .nout = NBOP_VARIADIC,
                            .alias = -1,
                            /* one output is the last member's: every read of a block comes
                               before it is written, so a dying input 0 of the output's shape
                               may hold it (the pass puts such an input first) */
                            .inplace_input = 1,
                            .nattrs = 3,
                            .attrs = {[NBOP_FUSED_N] = {"N", NB_ATTR_INT, {.i = 1}, true},
                                      [NBOP_FUSED_NUM_OUTPUTS] = {"num_outputs", NB_ATTR_INT, {.i = 1}, true},
                                      [NBOP_FUSED_PROGRAM] = {"_program", NB_ATTR_INT, {.i = 0}, true}},
                            .validate = fused_validate,
                            .infer = fused_infer,
                            .kernel = fused_kernel};

nbop_family nbop_fused_family(void) { return (nbop_family){&fused_op, 1}; }

const nbop_def *nbop_fused_def(void) { return &fused_op; }
