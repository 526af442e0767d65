/* Sparse updates: optimizers given the IndexedSlices gradient of an embedding lookup, in
   eager and graph mode. An embedding table [6, 3] (float64) is trained for three steps by
   gather-based losses whose indices repeat. SGD, Adam and AdamW must match the dense
   update of the densified gradient; Momentum and RMSProp (plain, centered) must update
   only the listed rows (TF's lazy semantics), checked against references written here from
   the update formulas. Also: big tables (the threaded paths, and untouched rows' slots as
   the witness that nothing was densified), ResourceScatterAdd/Sub, and the errors. */
#include "graphutil.h"

#include <stdio.h>

#define ROWS 6
#define COLS 3
#define STEPS 3
#define N 4 /* lookups per step */

static const int64_t TABLE[2] = {ROWS, COLS};
/* the lookups of each step; row 2 is never looked up, rows 0, 4 and 5 in one step only */
static const int32_t STEP_IDS[STEPS][N] = {{1, 3, 1, 4}, {3, 3, 0, 3}, {5, 1, 1, 5}};
static const int UNTOUCHED = 2;

static double table_value(int64_t i) { return sin(1.3 * (double)(i / COLS) + 0.7 * (double)(i % COLS) + 0.2); }
static double weight_value(int step, int64_t i) {
  return cos(0.9 * (double)(i / COLS) + 0.4 * (double)(i % COLS) + step);
}

static nb_tensor *initial_table(nb_ctx *c) {
  double v[ROWS * COLS];
  for (int i = 0; i < ROWS * COLS; i++) v[i] = table_value(i);
  return nb_tensor_from(c, NB_F64, 2, TABLE, v);
}

static nb_tensor *step_ids(nb_ctx *c, int step) { return nb_tensor_from(c, NB_I32, 1, (int64_t[]){N}, STEP_IDS[step]); }

static nb_tensor *step_weights(nb_ctx *c, int step) {
  double v[N * COLS];
  for (int i = 0; i < N * COLS; i++) v[i] = weight_value(step, i);
  return nb_tensor_from(c, NB_F64, 2, (int64_t[]){N, COLS}, v);
}

/* sum(0.5 G^2 + G W) for G = table[ids]: row i of the gradient is table[ids[i]] + W[i]. */
static nb_tensor *lookup_loss(nb_ctx *c, nb_tensor *table, nb_tensor *ids, nb_tensor *w) {
  nb_tensor *g = nb_gather(c, table, ids, 0, 0);
  nb_tensor *terms = nb_add(c, nb_mul(c, nb_scalar(c, NB_F64, 0.5), nb_square(c, g)), nb_mul(c, g, w));
  return nb_sum(c, terms, NULL, 0, false);
}

/* ---- the optimizers and the references of the lazy ones ---------------------------------- */

static const double LR = 0.1, MU = 0.9, B1 = 0.9, B2 = 0.999, EPS = 1e-7, RHO = 0.9, WD = 0.05;

typedef enum { EXACT, LAZY_MOMENTUM, LAZY_NESTEROV, LAZY_RMSPROP, LAZY_CENTERED } semantics;

typedef struct sparse_case {
  const char *name;
  nb_optimizer *(*make)(void);
  semantics kind;
  const char *slots[3]; /* the reference's a, b, c */
} sparse_case;

static nb_optimizer *make_sgd(void) { return nb_sgd_new(LR); }
static nb_optimizer *make_adam(void) { return nb_adam_new(LR, B1, B2, EPS); }
static nb_optimizer *make_adamw(void) { return nb_adamw_new(LR, B1, B2, EPS, WD); }
static nb_optimizer *make_momentum(void) { return nb_momentum_new(LR, MU, false); }
static nb_optimizer *make_nesterov(void) { return nb_momentum_new(LR, MU, true); }
static nb_optimizer *make_rmsprop(void) { return nb_rmsprop_new(LR, RHO, MU, EPS, false); }
static nb_optimizer *make_centered(void) { return nb_rmsprop_new(LR, RHO, MU, EPS, true); }

static const sparse_case cases[] = {
    {"sgd", make_sgd, EXACT, {NULL}},
    {"adam", make_adam, EXACT, {"m", "v", NULL}},
    {"adamw", make_adamw, EXACT, {"m", "v", NULL}},
    {"momentum", make_momentum, LAZY_MOMENTUM, {"momentum", NULL}},
    {"nesterov", make_nesterov, LAZY_NESTEROV, {"momentum", NULL}},
    {"rmsprop", make_rmsprop, LAZY_RMSPROP, {"rms", "momentum", NULL}},
    {"centered_rmsprop", make_centered, LAZY_CENTERED, {"rms", "momentum", "mg"}},
};

/* The table and up to three slots, all [6, 3]. */
typedef struct ref_state {
  double w[ROWS * COLS], a[ROWS * COLS], b[ROWS * COLS], c[ROWS * COLS];
} ref_state;

/* One element of a touched row, in the textbook form of each update. */
static void lazy_ref_element(semantics kind, ref_state *s, int i, double g) {
  switch (kind) {
    case LAZY_MOMENTUM:
    case LAZY_NESTEROV:
      s->a[i] = MU * s->a[i] + g;
      s->w[i] -= kind == LAZY_MOMENTUM ? LR * s->a[i] : LR * g + LR * MU * s->a[i];
      break;
    case LAZY_RMSPROP:
    case LAZY_CENTERED: {
      s->a[i] = RHO * s->a[i] + (1 - RHO) * g * g;
      double denom = s->a[i] + EPS;
      if (kind == LAZY_CENTERED) {
        s->c[i] = RHO * s->c[i] + (1 - RHO) * g;
        denom -= s->c[i] * s->c[i];
      }
      s->b[i] = MU * s->b[i] + LR * g / sqrt(denom);
      s->w[i] -= s->b[i];
      break;
    }
    case EXACT: break;
  }
}

/* A lazy step: the gradient summed per row over the lookups, then only those rows move. */
static void lazy_ref_step(semantics kind, ref_state *s, int step) {
  double g[ROWS * COLS] = {0};
  bool touched[ROWS] = {false};
  for (int i = 0; i < N; i++) {
    int r = STEP_IDS[step][i];
    touched[r] = true;
    for (int k = 0; k < COLS; k++) g[r * COLS + k] += s->w[r * COLS + k] + weight_value(step, i * COLS + k);
  }
  for (int r = 0; r < ROWS; r++)
    for (int k = 0; touched[r] && k < COLS; k++) lazy_ref_element(kind, s, r * COLS + k, g[r * COLS + k]);
}

static void check_close(const char *what, const double *got, const double *want, int n, double tol) {
  for (int i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))))
      fail_msg("%s element %d: got %.17g, want %.17g", what, i, got[i], want[i]);
}

/* ---- training: eager and graph, sparse and densified --------------------------------------- */

/* A table trained by one optimizer; in graph mode with its train op. */
typedef struct trained {
  nb_variable *v;
  nb_optimizer *o;
  nb_tensor *train;
} trained;

static trained trained_new(nb_ctx *c, const sparse_case *sc, const char *name) {
  return (trained){nb_variable_new(c, initial_table(c), true, name), sc->make(), NULL};
}

static void trained_free(trained *t) {
  nb_optimizer_free(t->o);
  nb_variable_free(t->v);
}

/* One eager step; the tape's gradient is IndexedSlices, densified when dense is set. */
static void eager_step(nb_ctx *c, trained *t, int step, bool dense) {
  nb_scope_begin(c);
  nb_tape *tape = nb_tape_begin(c, 0);
  nb_tensor *loss = lookup_loss(c, nb_variable_read(c, t->v), step_ids(c, step), step_weights(c, step)), *g;
  assert_int_equal(nb_tape_gradient_vars(tape, &loss, 1, &t->v, 1, &g), NB_OK);
  assert_true(nb_is_indexed_slices(g));
  if (dense) g = nb_densify(c, g);
  assert_int_equal(nb_optimizer_apply(t->o, c, &g, &t->v, 1, NULL), NB_OK);
  nb_tape_end(tape);
  nb_scope_end(c, NULL, 0);
}

/* Adds t's update from the graph gradient of the lookup loss fed through ids and w. */
static void graph_update(gu_fixture *f, trained *t, nb_tensor *ids, nb_tensor *w, bool dense) {
  nb_tensor *read = nb_variable_read(f->c, t->v), *loss = lookup_loss(f->c, read, ids, w), *g;
  assert_int_equal(nb_gradients(f->c, &loss, 1, &read, 1, NULL, &g), NB_OK);
  assert_true(nb_is_indexed_slices(g));
  if (dense) g = nb_densify(f->c, g);
  assert_int_equal(nb_optimizer_apply(t->o, f->c, &g, &t->v, 1, &t->train), NB_OK);
  assert_non_null(t->train);
}

static void graph_step(gu_fixture *f, nb_tensor *ids, nb_tensor *w, trained *a, trained *b, int step) {
  nb_tensor *feed[2] = {ids, w}, *vals[2] = {step_ids(f->e, step), step_weights(f->e, step)};
  nb_tensor *fetch[2] = {a->train, b->train}, *out[2];
  if (nb_run(f->s, feed, vals, 2, fetch, 2, out)) fail_msg("nb_run: %s", nb_session_error(f->s));
  nb_tensor_free(out[0]);
  nb_tensor_free(out[1]);
}

/* x and y's variables and named slots agree to tol. */
static void check_same(const sparse_case *sc, const char *what, const trained *x, const trained *y, double tol) {
  char label[96];
  snprintf(label, sizeof label, "%s %s: table", sc->name, what);
  check_close(label, nb_variable_data(x->v), nb_variable_data(y->v), ROWS * COLS, tol);
  for (int s = 0; s < 3 && sc->slots[s]; s++) {
    snprintf(label, sizeof label, "%s %s: slot %s", sc->name, what, sc->slots[s]);
    check_close(label, nb_variable_data(nb_optimizer_slot(x->o, x->v, sc->slots[s])),
                nb_variable_data(nb_optimizer_slot(y->o, y->v, sc->slots[s])), ROWS * COLS, tol);
  }
}

/* The lazy reference, and row 2, never looked up, exactly as it started: the table's
   values and zero slots. */
static void check_lazy(const sparse_case *sc, const trained *t, const ref_state *ref) {
  const double *want[4] = {ref->w, ref->a, ref->b, ref->c};
  const double *got = nb_variable_data(t->v);
  check_close(sc->name, got, ref->w, ROWS * COLS, 1e-12);
  for (int k = 0; k < COLS; k++) assert_true(got[UNTOUCHED * COLS + k] == table_value(UNTOUCHED * COLS + k));
  for (int s = 0; s < 3 && sc->slots[s]; s++) {
    const double *slot = nb_variable_data(nb_optimizer_slot(t->o, t->v, sc->slots[s]));
    check_close(sc->slots[s], slot, want[s + 1], ROWS * COLS, 1e-12);
    for (int k = 0; k < COLS; k++) assert_true(slot[UNTOUCHED * COLS + k] == 0);
  }
}

static void test_sparse_updates(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const sparse_case *sc = &cases[k];
    nb_ctx *c = nb_eager_new();
    gu_fixture f;
    assert_true(gu_open(&f));
    trained es = trained_new(c, sc, "emb"), ed = trained_new(c, sc, "emb");
    trained gs = trained_new(c, sc, "emb"), gd = trained_new(c, sc, "emb");
    nb_tensor *ids = nb_placeholder(f.c, NB_I32, 1, TU_SHAPE(N), "ids");
    nb_tensor *w = nb_placeholder(f.c, NB_F64, 2, TU_SHAPE(N, COLS), "w");
    graph_update(&f, &gs, ids, w, false);
    graph_update(&f, &gd, ids, w, true);
    ref_state ref;
    memset(&ref, 0, sizeof ref);
    for (int i = 0; i < ROWS * COLS; i++) ref.w[i] = table_value(i);
    for (int step = 0; step < STEPS; step++) {
      eager_step(c, &es, step, false);
      eager_step(c, &ed, step, true);
      graph_step(&f, ids, w, &gs, &gd, step);
      if (sc->kind == EXACT) {
        check_same(sc, "eager sparse vs densified", &es, &ed, 1e-12);
        check_same(sc, "graph sparse vs densified", &gs, &gd, 1e-12);
      } else {
        lazy_ref_step(sc->kind, &ref, step);
        check_lazy(sc, &es, &ref);
      }
      check_same(sc, "graph vs eager", &gs, &es, 1e-12);
    }
    assert_int_equal(nb_optimizer_iterations(es.o), STEPS);
    assert_int_equal(nb_optimizer_iterations(gs.o), STEPS);
    trained_free(&es);
    trained_free(&ed);
    trained_free(&gs);
    trained_free(&gd);
    gu_close(&f);
    nb_ctx_free(c);
  }
}

/* Lookups of unknown length (a batch of any size) in a graph: the gradient of the lookup
   itself is IndexedSlices (GatherV2's axis is the constant 0) and trains lazily; through
   a sum, whose gradient's rank is known only at run time, it is dense and still trains. */
static void test_graph_lookups_of_unknown_length(void **state) {
  gu_fixture *f = *state;
  nb_variable *v = nb_variable_new(f->e, initial_table(f->e), true, "emb");
  nb_variable *u = nb_variable_new(f->e, initial_table(f->e), true, "emb2");
  nb_optimizer *om = nb_momentum_new(LR, MU, false), *os = nb_sgd_new(LR);
  nb_tensor *ids = nb_placeholder(f->c, NB_I32, 1, TU_SHAPE(-1), "ids");
  nb_tensor *dy = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(-1, COLS), "dy");
  nb_tensor *read = nb_variable_read(f->c, v), *y = nb_gather(f->c, read, ids, 0, 0), *g, *train[2];
  nb_grad_opts opts = {.grad_ys = &dy};
  assert_int_equal(nb_gradients(f->c, &y, 1, &read, 1, &opts, &g), NB_OK);
  assert_true(nb_is_indexed_slices(g));
  assert_int_equal(nb_optimizer_apply(om, f->c, &g, &v, 1, &train[0]), NB_OK);
  nb_tensor *read2 = nb_variable_read(f->c, u), *sum = nb_sum(f->c, nb_gather(f->c, read2, ids, 0, 0), NULL, 0, false);
  assert_int_equal(nb_gradients(f->c, &sum, 1, &read2, 1, NULL, &g), NB_OK);
  assert_int_equal(nb_optimizer_apply(os, f->c, &g, &u, 1, &train[1]), NB_OK);
  const double dyv[3 * COLS] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  nb_tensor *feed[2] = {ids, dy}, *vals[2] = {nb_tensor_from(f->e, NB_I32, 1, TU_SHAPE(3), (const int32_t[]){1, 3, 1}),
                                              nb_tensor_from(f->e, NB_F64, 2, TU_SHAPE(3, COLS), dyv)};
  nb_tensor *out[2];
  assert_int_equal(nb_run(f->s, feed, vals, 2, train, 2, out), NB_OK);
  nb_tensor_free(out[0]);
  nb_tensor_free(out[1]);
  const double *accum = nb_variable_data(nb_optimizer_slot(om, v, "momentum"));
  const double *w = nb_variable_data(v), *w2 = nb_variable_data(u);
  for (int r = 0; r < ROWS; r++)
    for (int k = 0; k < COLS; k++) {
      int i = r * COLS + k;
      double g_row = r == 1 ? dyv[k] + dyv[2 * COLS + k] : r == 3 ? dyv[COLS + k] : 0;
      assert_true(accum[i] == g_row);
      assert_true(fabs(w[i] - (table_value(i) - LR * g_row)) < 1e-15);
      assert_true(fabs(w2[i] - (table_value(i) - LR * (r == 1 ? 2 : r == 3 ? 1 : 0))) < 1e-15);
    }
  nb_optimizer_free(om);
  nb_optimizer_free(os);
  nb_variable_free(v);
  nb_variable_free(u);
}

/* The lazy updates differ from the dense ones: after step 2 row 4 (looked up in step 1
   only) still has its step-1 momentum, where a dense update would have decayed it. */
static void test_lazy_differs_from_dense(void **state) {
  (void)state;
  nb_ctx *c = nb_eager_new();
  trained s = trained_new(c, &cases[3], "emb"), d = trained_new(c, &cases[3], "emb");
  eager_step(c, &s, 0, false);
  eager_step(c, &d, 0, true);
  const double *accum = nb_variable_data(nb_optimizer_slot(s.o, s.v, "momentum"));
  double row4[COLS];
  memcpy(row4, accum + 4 * COLS, sizeof row4);
  eager_step(c, &s, 1, false);
  eager_step(c, &d, 1, true);
  accum = nb_variable_data(nb_optimizer_slot(s.o, s.v, "momentum"));
  const double *dense = nb_variable_data(nb_optimizer_slot(d.o, d.v, "momentum"));
  for (int k = 0; k < COLS; k++) {
    assert_true(accum[4 * COLS + k] == row4[k]);
    assert_true(fabs(dense[4 * COLS + k] - MU * row4[k]) < 1e-15);
  }
  trained_free(&s);
  trained_free(&d);
  nb_ctx_free(c);
}

/* ---- the touched rows only ------------------------------------------------------------------- */

/* SGD: a sentinel in an untouched row survives bit for bit; the touched rows move by
   lr times their summed values. */
static void test_sgd_touches_listed_rows(void **state) {
  nb_ctx *c = *state;
  double init[ROWS * COLS];
  for (int i = 0; i < ROWS * COLS; i++) init[i] = table_value(i);
  init[UNTOUCHED * COLS + 1] = -0.0;
  init[UNTOUCHED * COLS + 2] = NAN;
  nb_variable *v = nb_variable_new(c, nb_tensor_from(c, NB_F64, 2, TABLE, init), true, "emb");
  nb_optimizer *o = nb_sgd_new(0.5);
  double vals[3 * COLS] = {1, 2, 3, 10, 20, 30, 100, 200, 300};
  nb_tensor *g = nb_indexed_slices(c, nb_tensor_from(c, NB_F64, 2, TU_SHAPE(3, COLS), vals),
                                   nb_tensor_from(c, NB_I64, 1, TU_SHAPE(3), (const int64_t[]){5, 0, 5}), TABLE, 2);
  assert_int_equal(nb_optimizer_apply(o, c, &g, &v, 1, NULL), NB_OK);
  const double *got = nb_variable_data(v);
  for (int k = 0; k < COLS; k++) {
    assert_true(fabs(got[k] - (init[k] - 0.5 * vals[COLS + k])) < 1e-15);
    assert_true(fabs(got[5 * COLS + k] - (init[5 * COLS + k] - 0.5 * (vals[k] + vals[2 * COLS + k]))) < 1e-13);
  }
  for (int r = 1; r < 5; r++) assert_memory_equal(got + r * COLS, init + r * COLS, sizeof(double[COLS]));
  nb_optimizer_free(o);
  nb_variable_free(v);
}

/* Momentum on a [100000, 16] table: after a dense step every accumulator is 1; a sparse
   step with 4 lookups leaves the other 99998 rows' accumulators exactly 1 (a densified
   update would decay them to 0.9) and their values untouched. */
static void test_big_table_momentum_untouched_slots(void **state) {
  nb_ctx *c = *state;
  enum { BIG = 100000, WIDE = 16 };
  double *ones = malloc(sizeof(double) * BIG * WIDE);
  for (int64_t i = 0; i < (int64_t)BIG * WIDE; i++) ones[i] = 1;
  nb_variable *v = nb_variable_new(c, nb_tensor_from(c, NB_F64, 2, TU_SHAPE(BIG, WIDE), ones), true, "big");
  nb_optimizer *o = nb_momentum_new(0.5, MU, false);
  nb_scope_begin(c);
  nb_tensor *dense = nb_tensor_from(c, NB_F64, 2, TU_SHAPE(BIG, WIDE), ones);
  assert_int_equal(nb_optimizer_apply(o, c, &dense, &v, 1, NULL), NB_OK); /* accum 1, table 0.5 */
  nb_scope_end(c, NULL, 0);
  double vals[4 * WIDE];
  for (int i = 0; i < 4 * WIDE; i++) vals[i] = 2;
  const int64_t rows[4] = {7, BIG - 1, 7, 50000};
  nb_tensor *g = nb_indexed_slices(c, nb_tensor_from(c, NB_F64, 2, TU_SHAPE(4, WIDE), vals),
                                   nb_tensor_from(c, NB_I64, 1, TU_SHAPE(4), rows), TU_SHAPE(BIG, WIDE), 2);
  assert_int_equal(nb_optimizer_apply(o, c, &g, &v, 1, NULL), NB_OK);
  const double *accum = nb_variable_data(nb_optimizer_slot(o, v, "momentum")), *w = nb_variable_data(v);
  for (int64_t r = 0; r < BIG; r++) {
    int hits = (r == 7) * 2 + (r == BIG - 1) + (r == 50000);
    double want_accum = hits ? MU + 2 * hits : 1, want_w = hits ? 0.5 - 0.5 * want_accum : 0.5;
    for (int k = 0; k < WIDE; k++)
      if (accum[r * WIDE + k] != want_accum || w[r * WIDE + k] != want_w)
        fail_msg("row %lld: accum %g (want %g), table %g (want %g)", (long long)r, accum[r * WIDE + k], want_accum,
                 w[r * WIDE + k], want_w);
  }
  nb_optimizer_free(o);
  nb_variable_free(v);
  free(ones);
}

/* Tables big enough for the threaded paths: Adam (every row) equals the densified update
   after two steps on partly different rows (4096 lookups of 3000 rows each); RMSProp's
   first step from zero slots equals it too (zero gradient rows stay put). */
static void test_threaded_paths(void **state) {
  nb_ctx *c = *state;
  enum { BIG = 8192, WIDE = 16, LOOKUPS = 4096 };
  double *init = malloc(sizeof(double) * BIG * WIDE), *vals = malloc(sizeof(double) * LOOKUPS * WIDE);
  int32_t *rows = malloc(sizeof(int32_t) * LOOKUPS);
  for (int64_t i = 0; i < (int64_t)BIG * WIDE; i++) init[i] = sin(0.01 * (double)i);
  for (int64_t i = 0; i < (int64_t)LOOKUPS * WIDE; i++) vals[i] = cos(0.3 * (double)i);
  nb_optimizer *(*makes[2])(void) = {make_adam, make_rmsprop};
  for (int m = 0; m < 2; m++) {
    nb_variable *vs = nb_variable_new(c, nb_tensor_from(c, NB_F64, 2, TU_SHAPE(BIG, WIDE), init), true, "s");
    nb_variable *vd = nb_variable_new(c, nb_tensor_from(c, NB_F64, 2, TU_SHAPE(BIG, WIDE), init), true, "d");
    nb_optimizer *os = makes[m](), *od = makes[m]();
    for (int step = 0; step < (m == 0 ? 2 : 1); step++) {
      for (int i = 0; i < LOOKUPS; i++) rows[i] = (int32_t)((i * 7919) % 3000 + 2000 * step);
      nb_scope_begin(c);
      nb_tensor *g = nb_indexed_slices(c, nb_tensor_from(c, NB_F64, 2, TU_SHAPE(LOOKUPS, WIDE), vals),
                                       nb_tensor_from(c, NB_I32, 1, TU_SHAPE(LOOKUPS), rows), TU_SHAPE(BIG, WIDE), 2);
      nb_tensor *d = nb_densify(c, g);
      assert_int_equal(nb_optimizer_apply(os, c, &g, &vs, 1, NULL), NB_OK);
      assert_int_equal(nb_optimizer_apply(od, c, &d, &vd, 1, NULL), NB_OK);
      nb_scope_end(c, NULL, 0);
    }
    check_close(m == 0 ? "adam" : "rmsprop", nb_variable_data(vs), nb_variable_data(vd), BIG * WIDE, 1e-12);
    const char *slot = m == 0 ? "v" : "rms";
    check_close(slot, nb_variable_data(nb_optimizer_slot(os, vs, slot)),
                nb_variable_data(nb_optimizer_slot(od, vd, slot)), BIG * WIDE, 1e-12);
    nb_optimizer_free(os);
    nb_optimizer_free(od);
    nb_variable_free(vs);
    nb_variable_free(vd);
  }
  free(init);
  free(vals);
  free(rows);
}

/* float32 tables take the same paths. */
static void test_float32(void **state) {
  nb_ctx *c = *state;
  const float init[4] = {1, 2, 3, 4}, vals[3] = {0.5f, 0.25f, 1};
  nb_variable *v = nb_variable_new(c, nb_tensor_from(c, NB_F32, 2, TU_SHAPE(4, 1), init), true, "t");
  nb_optimizer *o = nb_momentum_new(0.5, MU, true);
  nb_tensor *g =
      nb_indexed_slices(c, nb_tensor_from(c, NB_F32, 2, TU_SHAPE(3, 1), vals),
                        nb_tensor_from(c, NB_I32, 1, TU_SHAPE(3), (const int32_t[]){3, 0, 3}), TU_SHAPE(4, 1), 2);
  assert_int_equal(nb_optimizer_apply(o, c, &g, &v, 1, NULL), NB_OK);
  /* nesterov from zero accum: accum = g, var -= lr (g + mu g) */
  const float *w = nb_variable_data(v);
  assert_true(fabsf(w[0] - (1 - 0.5f * 0.25f * 1.9f)) < 1e-6f);
  assert_true(w[1] == 2 && w[2] == 3);
  assert_true(fabsf(w[3] - (4 - 0.5f * 1.5f * 1.9f)) < 1e-6f);
  nb_optimizer_free(o);
  nb_variable_free(v);
}

/* No rows: Momentum changes nothing; Adam still decays every row, as the dense update of
   a zero gradient; a table with no rows takes an empty update. */
static void test_empty_slices(void **state) {
  nb_ctx *c = *state;
  nb_optimizer *(*makes[2])(void) = {make_momentum, make_adam};
  for (int m = 0; m < 2; m++) {
    nb_variable *vs = nb_variable_new(c, initial_table(c), true, "s"),
                *vd = nb_variable_new(c, initial_table(c), true, "d");
    nb_optimizer *os = makes[m](), *od = makes[m]();
    for (int step = 0; step < 2; step++) { /* step 0 dense for both, so the slots are not zero */
      nb_tensor *dense = tu_make(c, NB_F64, 2, TABLE, TU_VALS(1, -2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9));
      nb_tensor *empty = nb_indexed_slices(c, nb_tensor_from(c, NB_F64, 2, TU_SHAPE(0, COLS), NULL),
                                           nb_tensor_from(c, NB_I32, 1, TU_SHAPE(0), NULL), TABLE, 2);
      nb_tensor *zeros = tu_make(c, NB_F64, 2, TABLE, NULL);
      assert_int_equal(nb_optimizer_apply(os, c, step ? &empty : &dense, &vs, 1, NULL), NB_OK);
      assert_int_equal(nb_optimizer_apply(od, c, step ? &zeros : &dense, &vd, 1, NULL), NB_OK);
    }
    const char *slot = m == 0 ? "momentum" : "m";
    const double *accum = nb_variable_data(nb_optimizer_slot(os, vs, slot));
    if (m == 0)
      assert_true(accum[1] == -2); /* lazy: the first step's accumulator, not decayed */
    else
      check_close("adam", nb_variable_data(vs), nb_variable_data(vd), ROWS * COLS, 1e-15);
    nb_optimizer_free(os);
    nb_optimizer_free(od);
    nb_variable_free(vs);
    nb_variable_free(vd);
  }
  nb_variable *none = nb_variable_new(c, nb_tensor_from(c, NB_F64, 2, TU_SHAPE(0, COLS), NULL), true, "none");
  nb_optimizer *o = nb_adam_new(LR, B1, B2, EPS);
  nb_tensor *empty = nb_indexed_slices(c, nb_tensor_from(c, NB_F64, 2, TU_SHAPE(0, COLS), NULL),
                                       nb_tensor_from(c, NB_I32, 1, TU_SHAPE(0), NULL), TU_SHAPE(0, COLS), 2);
  assert_int_equal(nb_optimizer_apply(o, c, &empty, &none, 1, NULL), NB_OK);
  assert_int_equal(nb_optimizer_iterations(o), 1);
  nb_optimizer_free(o);
  nb_variable_free(none);
}

/* Clipping keeps slices sparse and counts their values, as TF's global_norm: rows 1 and
   1 with values 3 and 4 count 3^2 + 4^2, not (3 + 4)^2; with a dense 12 the norm is 13. */
static void test_clip_keeps_slices(void **state) {
  nb_ctx *c = *state;
  nb_tensor *g[2] = {
      nb_indexed_slices(c, tu_make(c, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(3, 0, 4, 0)),
                        nb_tensor_from(c, NB_I32, 1, TU_SHAPE(2), (const int32_t[]){1, 1}), TU_SHAPE(3, 2), 2),
      tu_make(c, NB_F64, 1, TU_SHAPE(1), TU_VALS(12))};
  nb_tensor *out[2], *norm;
  assert_int_equal(nb_clip_by_global_norm(c, g, 2, 6.5, out, &norm), NB_OK);
  tu_check_vals(norm, TU_VALS(13), 1e-15);
  assert_true(nb_is_indexed_slices(out[0]));
  tu_check_shape(out[0], NB_F64, 2, TU_SHAPE(3, 2));
  tu_check(nb_indexed_slices_values(out[0]), NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(1.5, 0, 2, 0), 1e-15);
  tu_check_vals(nb_indexed_slices_indices(out[0]), TU_VALS(1, 1), 0);
  tu_check_vals(out[1], TU_VALS(6), 1e-15);
}

/* ---- errors --------------------------------------------------------------------------------- */

static void test_eager_errors(void **state) {
  nb_ctx *c = *state;
  nb_variable *v = nb_variable_new(c, initial_table(c), true, "emb");
  nb_optimizer *o = nb_momentum_new(0.1, 0.9, false);
  nb_tensor *ix = nb_tensor_from(c, NB_I32, 1, TU_SHAPE(2), (const int32_t[]){0, 5});
  nb_tensor *g32 = nb_indexed_slices(c, nb_tensor_from(c, NB_F32, 2, TU_SHAPE(2, COLS), NULL), ix, TABLE, 2);
  assert_int_equal(nb_optimizer_apply(o, c, &g32, &v, 1, NULL), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "gradient 0 has IndexedSlices of dense shape [6,3] and dtype float32",
                 "variable 'emb' has shape [6,3] and dtype float64");
  nb_tensor *short_table =
      nb_indexed_slices(c, nb_tensor_from(c, NB_F64, 2, TU_SHAPE(2, COLS), NULL), ix, TU_SHAPE(7, COLS), 2);
  assert_int_equal(nb_optimizer_apply(o, c, &short_table, &v, 1, NULL), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "dense shape [7,3]", "'emb' has shape [6,3]");
  assert_null(nb_optimizer_slot(o, v, "momentum")); /* nothing was made or updated */
  check_close("table", nb_variable_data(v), nb_data(initial_table(c)), ROWS * COLS, 0);
  nb_optimizer_free(o);
  nb_variable_free(v);
}

/* Graph mode: indices come at run time; bad ones stop the run before any write. */
static void test_graph_errors(void **state) {
  gu_fixture *f = *state;
  nb_ctx *c = f->e;
  nb_tensor *ids = nb_placeholder(f->c, NB_I64, 1, TU_SHAPE(-1), "ids");
  nb_tensor *vals = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(-1, -1), "vals");
  nb_tensor *g = nb_indexed_slices(f->c, vals, ids, TABLE, 2);
  nb_optimizer *opts[2] = {nb_momentum_new(0.1, 0.9, false), nb_sgd_new(0.1)};
  const char *op_names[2] = {"ResourceSparseApplyMomentum", "ResourceScatterSub"};
  nb_tensor *feed[2] = {ids, vals}, *out = NULL;
  for (int k = 0; k < 2; k++) {
    nb_variable *v = nb_variable_new(c, initial_table(c), true, "emb");
    nb_tensor *train;
    assert_int_equal(nb_optimizer_apply(opts[k], f->c, &g, &v, 1, &train), NB_OK);
    nb_tensor *fed[2] = {nb_tensor_from(c, NB_I64, 1, TU_SHAPE(3), (const int64_t[]){1, 6, 0}),
                         tu_make(c, NB_F64, 2, TU_SHAPE(3, COLS), NULL)};
    assert_int_equal(nb_run(f->s, feed, fed, 2, &train, 1, &out), NB_INVALID);
    const char *msg = nb_session_error(f->s);
    if (!strstr(msg, op_names[k]) || !strstr(msg, "indices[1] = 6 is not in [0, 6): variable 'emb' has 6 rows"))
      fail_msg("message: %s", msg);
    fed[0] = nb_tensor_from(c, NB_I64, 1, TU_SHAPE(1), (const int64_t[]){-1});
    fed[1] = tu_make(c, NB_F64, 2, TU_SHAPE(1, COLS), NULL);
    assert_int_equal(nb_run(f->s, feed, fed, 2, &train, 1, &out), NB_INVALID);
    assert_non_null(strstr(nb_session_error(f->s), "indices[0] = -1 is not in [0, 6)"));
    check_close("table", nb_variable_data(v), nb_data(initial_table(c)), ROWS * COLS, 0);
    /* rows of the wrong width, and a count of rows that is not the count of indices */
    fed[0] = nb_tensor_from(c, NB_I64, 1, TU_SHAPE(2), (const int64_t[]){1, 2});
    fed[1] = tu_make(c, NB_F64, 2, TU_SHAPE(2, 4), NULL);
    assert_int_equal(nb_run(f->s, feed, fed, 2, &train, 1, &out), NB_SHAPE);
    assert_non_null(strstr(nb_session_error(f->s), k == 0 ? "needs float64 rows of shape [3]" : "row shape [3]"));
    fed[1] = tu_make(c, NB_F64, 2, TU_SHAPE(3, COLS), NULL);
    assert_int_equal(nb_run(f->s, feed, fed, 2, &train, 1, &out), NB_SHAPE);
    assert_non_null(strstr(
        nb_session_error(f->s),
        k == 0 ? "indices (input 2) has shape [2]; expected one index per row of grad [3,3]" : "indices.shape [2]"));
    nb_variable_free(v);
  }
  nb_optimizer_free(opts[0]);
  nb_optimizer_free(opts[1]);
}

/* ---- ResourceScatterAdd / ResourceScatterSub ------------------------------------------------- */

static void test_scatter(void **state) {
  nb_ctx *c = *state;
  nb_variable *v =
      nb_variable_new(c, tu_make(c, NB_F64, 2, TU_SHAPE(4, 2), TU_VALS(0, 1, 2, 3, 4, 5, 6, 7)), true, "t");
  nb_tensor *ix = nb_tensor_from(c, NB_I64, 1, TU_SHAPE(3), (const int64_t[]){3, 0, 3});
  nb_tensor *r = nb_variable_scatter_add(c, v, ix, tu_make(c, NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(1, 2, 3, 4, 5, 6)));
  tu_check(r, NB_F64, 2, TU_SHAPE(4, 2), TU_VALS(3, 5, 2, 3, 4, 5, 12, 15), 0); /* row 3 gets both */
  /* int32, indices of rank 2: updates [2, 2] + the row shape [2] */
  nb_variable *k =
      nb_variable_new(c, tu_make(c, NB_I32, 2, TU_SHAPE(3, 2), TU_VALS(10, 10, 10, 10, 10, 10)), false, "k");
  nb_tensor *ix2 = nb_tensor_from(c, NB_I32, 2, TU_SHAPE(2, 2), (const int32_t[]){1, 1, 0, 2});
  r = nb_variable_scatter_sub(c, k, ix2, tu_make(c, NB_I32, 3, TU_SHAPE(2, 2, 2), TU_VALS(1, 2, 3, 4, 5, 6, 7, 8)));
  tu_check(r, NB_I32, 2, TU_SHAPE(3, 2), TU_VALS(5, 4, 6, 4, 3, 2), 0);
  /* errors name the op */
  assert_null(nb_variable_scatter_add(c, v, nb_tensor_from(c, NB_I64, 1, TU_SHAPE(1), (const int64_t[]){4}),
                                      tu_make(c, NB_F64, 2, TU_SHAPE(1, 2), NULL)));
  tu_check_error(c, NB_INVALID, "ResourceScatterAdd", "indices[0] = 4 is not in [0, 4): variable 't' has 4 rows");
  assert_null(nb_variable_scatter_add(c, v, ix, tu_make(c, NB_F64, 2, TU_SHAPE(3, 3), NULL)));
  tu_check_error(c, NB_SHAPE, "updates [3,3] must have shape indices.shape [3]", "row shape [2]");
  assert_null(nb_variable_scatter_sub(c, v, ix, tu_make(c, NB_F32, 2, TU_SHAPE(3, 2), NULL)));
  tu_check_error(c, NB_DTYPE, "ResourceScatterSub", "updates have dtype float32; variable 't' has dtype float64");
  assert_null(nb_variable_scatter_add(c, v, tu_make(c, NB_F64, 1, TU_SHAPE(3), NULL),
                                      tu_make(c, NB_F64, 2, TU_SHAPE(3, 2), NULL)));
  tu_check_error(c, NB_DTYPE, "input 0 has dtype float64", NULL);
  nb_variable *s = nb_variable_new(c, nb_scalar(c, NB_F64, 1), true, "s");
  assert_null(nb_variable_scatter_add(c, s, ix, tu_make(c, NB_F64, 1, TU_SHAPE(3), NULL)));
  tu_check_error(c, NB_SHAPE, "variable 's' is a scalar", NULL);
  assert_null(nb_variable_scatter_add(c, v, NULL, ix));
  tu_check_error(c, NB_INVALID, "ResourceScatterAdd: NULL indices or updates", NULL);
  tu_check_vals(nb_variable_read(c, v), TU_VALS(3, 5, 2, 3, 4, 5, 12, 15), 0); /* unchanged by the errors */
  /* graph: the node runs on fetch, once per run */
  gu_fixture f;
  assert_true(gu_open(&f));
  nb_tensor *feed[2] = {nb_placeholder(f.c, NB_I64, 1, TU_SHAPE(-1), "ix"),
                        nb_placeholder(f.c, NB_F64, 2, TU_SHAPE(-1, 2), "up")};
  nb_tensor *op = nb_variable_scatter_sub(f.c, v, feed[0], feed[1]), *out = NULL;
  nb_tensor *fed[2] = {ix, tu_make(c, NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(1, 2, 3, 4, 5, 6))};
  assert_int_equal(nb_run(f.s, feed, fed, 2, &op, 1, &out), NB_OK);
  tu_check_vals(out, TU_VALS(0, 1, 2, 3, 4, 5, 6, 7), 0);
  nb_tensor_free(out);
  fed[0] = nb_tensor_from(c, NB_I64, 1, TU_SHAPE(3), (const int64_t[]){0, 1, 9});
  assert_int_equal(nb_run(f.s, feed, fed, 2, &op, 1, &out), NB_INVALID);
  assert_non_null(strstr(nb_session_error(f.s), "ResourceScatterSub (node 't_scatter_sub'): indices[2] = 9"));
  tu_check_vals(nb_variable_read(c, v), TU_VALS(0, 1, 2, 3, 4, 5, 6, 7), 0);
  gu_close(&f);
  nb_variable_free(v);
  nb_variable_free(k);
  nb_variable_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sparse_updates),
      cmocka_unit_test_setup_teardown(test_graph_lookups_of_unknown_length, gu_setup, gu_teardown),
      cmocka_unit_test(test_lazy_differs_from_dense),
      cmocka_unit_test_setup_teardown(test_sgd_touches_listed_rows, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_big_table_momentum_untouched_slots, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_threaded_paths, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_float32, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_empty_slices, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_clip_keeps_slices, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_eager_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_errors, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_scatter, tu_setup, tu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
