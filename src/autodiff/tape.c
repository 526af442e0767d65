/* The eager gradient tape (tf.GradientTape). While a tape is active its context calls
   record() after every op; an op that reads a tensor the tape tracks (watched, or made by
   a recorded op) is appended with the tensors its gradient function reads (the op table
   says which), the rest as shapes only. nb_tape_gradient walks the entries backwards
   calling the same gradient functions the graph pass uses, now on the eager context, so
   ops they run are recorded by any outer tape: nested tapes give higher orders. Saved
   tensors come back with their original ids, which is how an outer tape recognises them.
   A persistent tape that is recording records its own backward pass too, as TF's does
   (higher orders on one tape): the pass walks the entries there were when it began, and
   the ones it appends come after them, in an order that is still topological. Ended
   tapes, with their arrays and scratch, are kept for reuse, so a training loop allocates
   nothing per step once warm. */
#include "tape.h"

#include "../core/variable.h"
#include "../grad/grad.h"

#include <stdlib.h>
#include <string.h>

/* ---- id maps ------------------------------------------------------------------------- */

static uint32_t home_slot(const id_map *m, uint64_t id) {
  return (uint32_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (m->cap - 1);
}

static bool in_use(const id_map *m, uint32_t i) { return m->slots[i].gen == m->epoch; }

/* id's slot, or the empty slot where it would go */
static uint32_t map_slot(const id_map *m, uint64_t id) {
  uint32_t i = home_slot(m, id);
  while (in_use(m, i) && m->slots[i].id != id) i = (i + 1) & (m->cap - 1);
  return i;
}

static bool map_grow(id_map *m) {
  uint32_t cap = m->cap ? m->cap * 2 : 256;
  id_slot *slots = calloc(cap, sizeof *slots); /* generations all 0: free under epoch 1 */
  if (!slots) return false;
  id_map grown = {slots, cap, m->n, 1};
  for (uint32_t i = 0; i < m->cap; i++)
    if (in_use(m, i)) slots[map_slot(&grown, m->slots[i].id)] = (id_slot){m->slots[i].id, m->slots[i].value, 1};
  free(m->slots);
  *m = grown;
  return true;
}

/* id's value, or -1 when absent. */
static int32_t map_get(const id_map *m, uint64_t id) {
  if (!m->cap) return -1;
  uint32_t i = map_slot(m, id);
  return in_use(m, i) ? m->slots[i].value : -1;
}

/* Inserts id -> value unless id is present; false when out of memory. */
static bool map_add(id_map *m, uint64_t id, int32_t value) {
  if (m->cap && in_use(m, map_slot(m, id))) return true;
  if ((m->n + 1) * 2 > m->cap && !map_grow(m)) return false;
  m->slots[map_slot(m, id)] = (id_slot){id, value, m->epoch};
  m->n++;
  return true;
}

static void map_free(id_map *m) {
  free(m->slots);
  *m = (id_map){0};
}

/* Slots kept by a cleared map; a bigger one (left by a very long tape) is released. */
enum { MAP_KEEP_CAP = 1 << 20 };

/* Empties m in O(1): a new epoch leaves every slot unused. */
static void map_clear(id_map *m) {
  if (m->cap > MAP_KEEP_CAP) {
    map_free(m);
    return;
  }
  m->n = 0;
  if (m->cap && ++m->epoch == 0) { /* wrapped: old generations could match again */
    for (uint32_t i = 0; i < m->cap; i++) m->slots[i].gen = 0;
    m->epoch = 1;
  }
}

/* ---- arena and storage ------------------------------------------------------------------ */

/* Drops every entry (releasing kept data and the references its attrs hold) but keeps the
   memory for the next use. */
static void tape_reset(nb_tape *t) {
  for (int32_t i = 0; i < t->nslots; i++) nbcore_buffer_release(t->c, t->slots[i].buf);
  for (int32_t i = 0; i < t->nentries; i++)
    if (t->entries[i].def->hold_attrs) t->entries[i].def->hold_attrs(t->entries[i].attr, -1);
  t->nslots = t->nentries = t->nvalues = t->noutputs = 0;
  t->last_out = 0;
  map_clear(&t->tracked);
  nbcore_arena_reset(&t->arena);
}

/* ---- recording ------------------------------------------------------------------------ */

/* Whether bit i of a gradient rule's reads mask is set (past 32 entries: all or none). */
static bool reads(uint32_t mask, int i) { return i < 32 ? (mask >> i) & 1u : mask == ~0u; }

/* x's dims in the tape's arena: the previous slot's copy when they are the same (ops in a
   chain mostly keep the shape), else a new one. NULL for a scalar or when out of memory. */
static const int64_t *saved_shape(nb_tape *t, const nb_tensor *x) {
  const tape_slot *prev = t->nslots ? &t->slots[t->nslots - 1] : NULL;
  if (prev && prev->rank == x->rank && (!x->rank || !memcmp(prev->shape, x->shape, (size_t)x->rank * sizeof *x->shape)))
    return prev->shape;
  int64_t *shape = x->rank ? nbcore_arena_alloc(&t->arena, (size_t)x->rank * sizeof *shape) : NULL;
  if (shape) memcpy(shape, x->shape, (size_t)x->rank * sizeof *shape);
  return shape;
}

static bool save_slot(nb_tape *t, const nb_tensor *x, bool keep, int32_t value) {
  const int64_t *shape = saved_shape(t, x);
  if (x->rank && !shape) return false;
  tape_slot *s = &t->slots[t->nslots++];
  *s = (tape_slot){x->id, keep ? x->buf : NULL, shape, value, (uint8_t)x->dtype, (uint8_t)x->rank};
  if (s->buf) nbcore_buffer_retain(s->buf);
  return true;
}

/* id's value number in the sorted outputs, or -1. */
static int32_t output_value(const nb_tape *t, uint64_t id) {
  int32_t lo = 0, hi = t->noutputs;
  if (!hi || id < t->outputs[0].id || id > t->outputs[hi - 1].id) return -1;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (t->outputs[mid].id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < t->noutputs && t->outputs[lo].id == id ? t->outputs[lo].value : -1;
}

/* The value number of a tensor t tracks, or -1. */
static int32_t tracked_value(const nb_tape *t, uint64_t id) {
  if (id == t->last_out) return t->last_value;
  int32_t v = map_get(&t->tracked, id);
  return v >= 0 ? v : output_value(t, id);
}

/* id's value number, given now if t did not track it yet (a watched tensor); -1 when out
   of memory. */
static int32_t track(nb_tape *t, uint64_t id) {
  int32_t v = tracked_value(t, id);
  if (v >= 0) return v;
  return map_add(&t->tracked, id, t->nvalues) ? t->nvalues++ : -1;
}

/* A new value number for a recorded op's output: appended to the sorted outputs (into the
   map in the unexpected case of an id older than the newest); -1 when out of memory. */
static int32_t track_output(nb_tape *t, uint64_t id) {
  if (t->noutputs && id <= t->outputs[t->noutputs - 1].id) return track(t, id);
  if (!nbcore_grow_array((void **)&t->outputs, &t->outputs_cap, t->noutputs + 1, sizeof *t->outputs)) return -1;
  t->outputs[t->noutputs++] = (output_id){id, t->nvalues};
  return t->nvalues++;
}

static bool record_entry(nb_tape *t, const nbop_kargs *k, nb_tensor *const *out) {
  if (!nbcore_grow_array((void **)&t->entries, &t->entries_cap, t->nentries + 1, sizeof *t->entries) ||
      !nbcore_grow_array((void **)&t->slots, &t->slots_cap, t->nslots + k->nin + k->nout, sizeof *t->slots))
    return false;
  tape_entry *e = &t->entries[t->nentries];
  *e = (tape_entry){k->def, NULL, t->nslots, k->nin, k->nout};
  e->attr = nbop_attrs_copy(&t->arena, k->def, k->attr);
  if (k->def->nattrs && !e->attr) return false;
  uint32_t reads_in, reads_out;
  nbad_grad_reads(k->def, &reads_in, &reads_out);
  /* int/bool inputs (shapes, axes, indices: small) are kept too, for a forward replay's
     linear rules (jacobian_forward.c) */
  for (int i = 0; i < k->nin; i++)
    if (!save_slot(t, k->in[i], reads(reads_in, i) || !nbcore_is_float(k->in[i]->dtype),
                   tracked_value(t, k->in[i]->id)))
      return false;
  for (int i = 0; i < k->nout; i++) {
    int32_t v = track_output(t, out[i]->id);
    if (v < 0 || !save_slot(t, out[i], reads(reads_out, i), v)) return false;
    t->last_out = out[i]->id;
    t->last_value = v;
  }
  t->nentries++;
  /* as a graph node does: an attr may name a host function, which must outlive the entry */
  if (k->def->hold_attrs) k->def->hold_attrs(e->attr, +1);
  return true;
}

static bool reads_tracked(const nb_tape *t, const nbop_kargs *k) {
  for (int i = 0; i < k->nin; i++)
    if (tracked_value(t, k->in[i]->id) >= 0) return true;
  return false;
}

void nbad_tape_record(nb_ctx *c, nbop_kargs *k, nb_tensor *const *out) {
  for (int i = 0; i < c->ntapes && !c->tapes_paused; i++) {
    nb_tape *t = c->tapes[i];
    if (t->recording && reads_tracked(t, k) && !record_entry(t, k, out))
      nbcore_fail(c, NB_NOMEM, "%s: out of memory recording the op on a tape", k->def->name);
  }
}

/* ---- watched variables ---------------------------------------------------------------- */

/* Where id is, or would go, in t's variables (sorted by id, which is TF's order of creation). */
static int32_t variable_slot(const nb_tape *t, uint64_t id) {
  int32_t lo = 0, hi = t->nvars;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (t->vars[mid]->id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Watches v's id (every read of v carries it) and lists v once; false when out of memory. */
static bool watch_variable(nb_tape *t, nb_variable *v) {
  if (track(t, v->id) < 0) return false;
  int32_t i = variable_slot(t, v->id);
  if (i < t->nvars && t->vars[i] == v) return true;
  if (!nbcore_grow_array((void **)&t->vars, &t->vars_cap, t->nvars + 1, sizeof *t->vars)) return false;
  memmove(&t->vars[i + 1], &t->vars[i], (size_t)(t->nvars - i) * sizeof *t->vars);
  t->vars[i] = v;
  t->nvars++;
  nbcore_variable_retain(v); /* the list's pointers stay valid until the tape lets them go */
  return true;
}

static void unwatch_variables(nb_tape *t) {
  for (int32_t i = 0; i < t->nvars; i++) nbcore_variable_release(t->vars[i]);
  t->nvars = 0;
}

/* A trainable variable was read: tapes recording with watch_accessed watch it. */
static void watch_read(nb_ctx *c, nb_variable *v) {
  for (int i = 0; i < c->ntapes && !c->tapes_paused; i++) {
    nb_tape *t = c->tapes[i];
    if (t->recording && t->watch_accessed && !watch_variable(t, v))
      nbcore_fail(c, NB_NOMEM, "nb_variable_read: out of memory watching the variable on a tape");
  }
}

static void tape_destroy(nb_tape *t) {
  tape_reset(t);
  unwatch_variables(t);
  free(t->vars);
  map_free(&t->tracked);
  free(t->outputs);
  free(t->grads);
  free(t->wanted);
  free(t->entries);
  free(t->slots);
  free(t->buf);
  free(t->needs);
  free(t->views);
  nbcore_arena_free(&t->arena);
  free(t);
}

void nbad_release_tapes(nb_ctx *c) {
  nbad_release_accumulators(c);
  for (int i = 0; i < c->ntapes; i++) tape_destroy(c->tapes[i]);
  while (c->spare_tapes) {
    nb_tape *t = c->spare_tapes;
    c->spare_tapes = t->next_spare;
    tape_destroy(t);
  }
  free(c->tapes);
  c->tapes = NULL;
  c->ntapes = c->tapes_cap = 0;
}

/* ---- the public tape --------------------------------------------------------------------- */

nb_tape *nb_tape_begin(nb_ctx *c, int persistent) {
  if (!nbop_live(c)) return NULL;
  nbad_grad_builtins_init(); /* recording asks the rules what they read */
  if (c->graph) {
    nbcore_fail(c, NB_INVALID, "nb_tape_begin: tapes record eager ops; graph contexts use nb_gradients");
    return NULL;
  }
  if (!nbcore_grow_array((void **)&c->tapes, &c->tapes_cap, c->ntapes + 1, sizeof *c->tapes)) {
    nbcore_fail(c, NB_NOMEM, "nb_tape_begin: out of memory");
    return NULL;
  }
  nb_tape *t = c->spare_tapes;
  if (t)
    c->spare_tapes = t->next_spare;
  else if (!(t = calloc(1, sizeof *t))) {
    nbcore_fail(c, NB_NOMEM, "nb_tape_begin: out of memory");
    return NULL;
  }
  t->c = c;
  t->active = true;
  t->persistent = persistent != 0;
  t->recording = true;
  t->used = t->unconnected_zero = false;
  t->watch_accessed = true;
  t->jacobian_mode = NB_JACOBIAN_MODE_AUTO;
  t->next_spare = NULL;
  c->tapes[c->ntapes++] = t;
  c->record = nbad_record;
  c->watch_read = watch_read;
  c->release_tapes = nbad_release_tapes;
  return t;
}

void nb_tape_watch(nb_tape *t, nb_tensor *x) {
  if (!t || !t->active || !x || !nbop_live(t->c)) return;
  if (!x->buf) {
    nbcore_fail(t->c, NB_INVALID, "nb_tape_watch: only concrete (eager) tensors can be watched");
    return;
  }
  if (track(t, x->id) < 0) nbcore_fail(t->c, NB_NOMEM, "nb_tape_watch: out of memory");
}

void nb_tape_watch_variable(nb_tape *t, nb_variable *v) {
  if (!t || !t->active || !nbop_live(t->c)) return;
  if (!v || v->freed)
    nbcore_fail(t->c, NB_INVALID, "nb_tape_watch_variable: %s variable", v ? "a freed" : "NULL");
  else if (!watch_variable(t, v))
    nbcore_fail(t->c, NB_NOMEM, "nb_tape_watch_variable: out of memory");
}

int nb_tape_watched_variables(const nb_tape *t, nb_variable **out, int cap) {
  if (!t) return -1;
  if (cap < 0 || (cap > 0 && !out)) {
    nbcore_fail(t->c, NB_INVALID, "nb_tape_watched_variables: out is NULL or cap %d is negative", cap);
    return -1;
  }
  int n = 0;
  for (int32_t i = 0; i < t->nvars; i++) {
    if (t->vars[i]->freed) continue; /* held by the tape, gone for the user */
    if (n < cap) out[n] = t->vars[i];
    n++;
  }
  return n;
}

void nb_tape_set_watch_accessed_variables(nb_tape *t, bool watch) {
  if (t) t->watch_accessed = watch;
}

void nb_tape_stop_recording(nb_tape *t) {
  if (t) t->recording = false;
}

void nb_tape_resume_recording(nb_tape *t) {
  if (t) t->recording = true;
}

void nb_tape_set_unconnected_zero(nb_tape *t, bool zero) {
  if (t) t->unconnected_zero = zero;
}

/* NB_INVALID, naming fn, when t's own backward pass runs (a gradient function called fn). */
static nb_code check_not_running(const nb_tape *t, const char *fn) {
  if (!t->running) return NB_OK;
  return nbcore_fail(t->c, NB_INVALID, "%s: the tape is in its backward pass (called from a gradient function)", fn);
}

nb_code nb_tape_reset(nb_tape *t) {
  if (!t) return NB_INVALID;
  if (!nbop_live(t->c)) return nb_status(t->c);
  if (!t->active) return nbcore_fail(t->c, NB_INVALID, "nb_tape_reset: the tape was ended");
  nb_code code = check_not_running(t, "nb_tape_reset");
  if (code) return code;
  if (!t->recording)
    return nbcore_fail(t->c, NB_INVALID,
                       "nb_tape_reset: the tape is not recording (stopped, or a one-shot tape after its gradient); "
                       "resume it first");
  tape_reset(t);
  unwatch_variables(t);
  t->used = false;
  return NB_OK;
}

void nb_tape_end(nb_tape *t) {
  if (!t || check_not_running(t, "nb_tape_end")) return;
  nb_ctx *c = t->c;
  int i = 0;
  while (i < c->ntapes && c->tapes[i] != t) i++;
  if (i == c->ntapes) return; /* t is not in this context's active list */
  memmove(&c->tapes[i], &c->tapes[i + 1], (size_t)(c->ntapes - i - 1) * sizeof *c->tapes);
  if (--c->ntapes == 0 && c->naccs == 0) c->record = NULL;
  tape_reset(t);
  unwatch_variables(t);
  t->active = false;
  t->next_spare = c->spare_tapes;
  c->spare_tapes = t;
}

/* ---- the backward pass ------------------------------------------------------------------ */

/* A view of a recorded tensor: its kept data (or none), under its original id. The slot
   owns the data, so the view borrows it: no handle, no reference count, nothing to free. */
static nb_tensor *slot_view(nb_tape *t, const tape_slot *s, int32_t i) {
  nb_tensor *x = &t->views[i]; /* made a view by ensure_scratch */
  nbcore_borrowed_set(x, (nb_dtype)s->dtype, s->rank, s->shape, s->buf, s->id);
  return x;
}

/* ---- batched entries (vectorized Jacobians) ------------------------------------------------
   In a batched pass every gradient has a leading dim of K seeds. An elementwise entry's
   gradient function then runs on its tensors tiled K times: each as [K, 1.., dims], padded
   with 1s to the entry's largest rank, so the function's broadcast reductions reduce the
   padded and broadcast axes and keep K; its dxs come back as [K, 1.., x dims]. An op with
   a batched_as op (MatMul) runs that op's gradient on its tiled tensors the same way. A
   batch_leading op (Reshape) runs its own gradient with its float tensors as [K, dims],
   unpadded, and its other inputs as they are; an axis op (Sum, Cumsum, ...) likewise,
   with its axes moved past K, and Transpose with its permutation extended to fix K. Any
   other entry runs its gradient function once per seed
   (invoke_per_seed). */

/* 1 + the input of def rewritten for a batched pass (axes or a permutation), 0 none. */
static int rewritten_input(const nbop_def *def) { return def->axis_input ? def->axis_input : def->perm_input; }

/* The op whose gradient function takes e's tensors with the seed dim: e's own (elementwise,
   batch_leading, or an op whose axes or permutation the tape kept), its batched_as op, or
   NULL (then once per seed). */
static const nbop_def *batched_def(const nb_tape *t, const tape_entry *e, nb_grad_fn *fn) {
  if (e->def->elementwise || e->def->batch_leading) return e->def;
  int r = rewritten_input(e->def);
  if (r) return t->slots[e->slot0 + r - 1].buf ? e->def : NULL;
  const nbop_def *as = e->def->batched_as ? nbop_lookup(e->def->batched_as) : NULL;
  return as && nbad_grad_lookup(as, NULL, fn) == NBAD_GRAD_FN ? as : NULL;
}

/* The rank an entry's tensors are padded to: the largest among them. */
static int entry_rank(const nb_tape *t, const tape_entry *e) {
  int rank = 0;
  for (int32_t i = 0; i < e->nin + e->nout; i++)
    if (t->slots[e->slot0 + i].rank > rank) rank = t->slots[e->slot0 + i].rank;
  return rank;
}

/* dims = [K or 1, 1 x (rank - s->rank), s's dims] */
static void batched_dims(const tape_slot *s, int rank, int64_t lead, int64_t *dims) {
  dims[0] = lead;
  for (int d = 0; d < rank - s->rank; d++) dims[1 + d] = 1;
  if (s->rank) memcpy(dims + 1 + rank - s->rank, s->shape, (size_t)s->rank * sizeof *dims);
}

/* slot s as [K, 1.., dims], or as [1, 1.., dims] to broadcast when not tiled: a copy when
   the tape kept its data, a shape alone otherwise. */
static nb_tensor *batched_view(nb_tape *t, const tape_slot *s, int32_t i, int rank, bool tile) {
  int64_t dims[NB_MAX_RANK];
  nb_tensor *x = slot_view(t, s, i);
  batched_dims(s, rank, tile ? t->batch : 1, dims);
  if (!s->buf) {
    nbcore_borrowed_init(x, (nb_dtype)s->dtype, rank + 1, dims, NULL, s->id);
    return x;
  }
  int64_t one_dims[NB_MAX_RANK];
  batched_dims(s, rank, 1, one_dims);
  nb_tensor *one = nb_reshape(t->c, x, one_dims, rank + 1);
  return tile ? nb_broadcast_to(t->c, one, dims, rank + 1) : one;
}

/* The axes of slot s one dim further, past the seed dim: a >= 0 becomes a + 1 (negative
   axes count from the end and stay). */
static nb_tensor *shifted_axes(nb_tape *t, const tape_slot *s, int32_t i) {
  nb_tensor *axes = slot_view(t, s, i);
  nb_tensor *past = nb_greater_equal(t->c, axes, nb_scalar(t->c, (nb_dtype)s->dtype, 0));
  return nb_add(t->c, axes, nb_cast(t->c, past, (nb_dtype)s->dtype));
}

/* The permutation of slot s extended to keep the seed dim first: [0, perm + 1]. */
static nb_tensor *prefixed_perm(nb_tape *t, const tape_slot *s, int32_t i) {
  nb_tensor *perm = slot_view(t, s, i), *zero = nb_tensor_from(t->c, (nb_dtype)s->dtype, 1, (const int64_t[]){1}, NULL);
  nb_tensor *parts[2] = {zero, nb_add(t->c, perm, nb_scalar(t->c, (nb_dtype)s->dtype, 1))};
  return nb_concat(t->c, parts, 2, 0);
}

/* Tensor i of e (inputs, then outputs) for its batched gradient, which is as's. */
static nb_tensor *entry_view(nb_tape *t, const tape_entry *e, const nbop_def *as, int32_t i, const bool *needs) {
  const tape_slot *s = &t->slots[e->slot0 + i];
  if (i == e->def->axis_input - 1) return shifted_axes(t, s, i);
  if (i == e->def->perm_input - 1) return prefixed_perm(t, s, i);
  if (rewritten_input(e->def) || e->def->batch_leading)
    return nbcore_is_float((nb_dtype)s->dtype) ? batched_view(t, s, i, s->rank, true) : slot_view(t, s, i);
  /* a batched_as op's gradient broadcasts an input without a gradient (one GEMM for
     x W's dx); elementwise gradients may pair tensors of equal shapes, so those tile all */
  bool tile = as == e->def || i >= e->nin || needs[i];
  return batched_view(t, s, i, entry_rank(t, e), tile);
}

/* Each needed dx from [K, 1.., x dims] to [K, x dims]. */
static void unbatch_dxs(nb_tape *t, const tape_slot *s, int32_t nin, const bool *needs, nb_tensor **dxs) {
  int64_t dims[NB_MAX_RANK];
  for (int32_t i = 0; i < nin; i++) {
    if (!dxs[i] || !needs[i]) continue;
    batched_dims(&s[i], s[i].rank, t->batch, dims);
    dxs[i] = nb_reshape(t->c, dxs[i], dims, s[i].rank + 1);
  }
}

/* A handle of its own for g's value, under g's id (outer tapes know it by that id). */
static nb_tensor *own(nb_tape *t, nb_tensor *g) {
  if (nb_is_indexed_slices(g)) {
    nb_tensor *s = nb_indexed_slices(t->c, g->slice_values, g->slice_indices, g->shape, g->rank);
    if (s) s->id = g->id;
    return s;
  }
  nbcore_buffer_retain(g->buf);
  nb_tensor *h = nbcore_handle_new(t->c, g->dtype, g->rank, g->shape, g->buf);
  if (h) h->id = g->id;
  return h;
}

/* Whether a term like g (its dtype and shape) can be added into have in place: both are
   dense, the tape alone holds have's data, the shapes match, and no tape records the pass
   (which would need the addition as a recorded op). */
static bool sums_in_place(const nb_tape *t, const nb_tensor *have, const nb_tensor *g) {
  return t->c->ntapes <= 1 && t->c->naccs == 0 && !t->recording && have->buf && g->buf &&
         nbcore_buffer_exclusive(have->buf) && have->dtype == g->dtype && have->size == g->size &&
         have->rank == g->rank && memcmp(have->shape, g->shape, (size_t)g->rank * sizeof *g->shape) == 0;
}

/* have += g in place, when sums_in_place allows it. */
static bool add_in_place(nb_tape *t, nb_tensor *have, const nb_tensor *g) {
  if (!sums_in_place(t, have, g)) return false;
  if (g->dtype == NB_F32) {
    float *a = nbcore_tdata(have);
    const float *b = nbcore_tdata(g);
    for (int64_t i = 0; i < g->size; i++) a[i] += b[i];
  } else {
    double *a = nbcore_tdata(have);
    const double *b = nbcore_tdata(g);
    for (int64_t i = 0; i < g->size; i++) a[i] += b[i];
  }
  return true;
}

/* g itself when the running entry made it (a live handle of its scope, slot >= fresh_from)
   and has not kept it already, so nothing else holds it; else a handle of the tape's own.
   Each gradient held is a handle of the tape's own, so it can be freed when replaced or
   consumed, however the gradient functions share their results. */
static nb_tensor *take_or_own(nb_tape *t, nb_tensor *g, uint32_t fresh_from, nb_tensor *const *kept, int nkept) {
  bool fresh = g->state == NBCORE_HANDLE_LIVE && g->ctx == t->c && g->slot >= fresh_from;
  for (int k = 0; k < nkept && fresh; k++) fresh = kept[k] != g;
  return fresh ? g : own(t, g);
}

/* grads[v] becomes sum (NULL: failed), replacing have (NULL: none), which is freed. */
static nb_code replace_grad(nb_tape *t, int32_t v, nb_tensor *have, nb_tensor *sum, uint32_t fresh_from,
                            nb_tensor *const *kept, int nkept, nb_tensor **owned, nb_tensor **replaced) {
  *owned = sum ? take_or_own(t, sum, fresh_from, kept, nkept) : NULL;
  *replaced = have;
  if (!*owned) return nb_status(t->c);
  if (have) nb_tensor_free(have);
  t->grads[v] = *owned;
  return NB_OK;
}

static nb_code accumulate(nb_tape *t, int32_t v, nb_tensor *g, uint32_t fresh_from, nb_tensor *const *kept, int nkept,
                          nb_tensor **owned, nb_tensor **replaced) {
  nb_tensor *have = t->grads[v];
  *replaced = NULL;
  if (have && add_in_place(t, have, g)) {
    *owned = have; /* unchanged handle: nothing new to keep */
    return NB_OK;
  }
  bool both_sparse = have && nb_is_indexed_slices(have) && nb_is_indexed_slices(g);
  nb_tensor *sum = !have ? g : both_sparse ? nb_indexed_slices_concat(t->c, have, g) : nb_add(t->c, have, g);
  return replace_grad(t, v, have, sum, fresh_from, kept, nkept, owned, replaced);
}

/* The inputs (bits) whose gradient entry e's rule adds straight into the one the tape
   holds (sum_into, nbg_sum_fn): it holds one that sums_in_place allows adding into, the
   input appears once among e's, and no seeds are batched. Their needs become false, so
   the rule itself makes no term for them. */
static uint32_t summed_into(const nb_tape *t, const tape_entry *e, nbg_sum_fn sum_into, nb_tensor *const *ins,
                            nb_tensor *const *dys, bool *needs) {
  if (!sum_into || t->batch || e->nout != 1 || !dys[0]) return 0;
  const tape_slot *s = &t->slots[e->slot0];
  uint32_t bits = 0;
  for (int32_t i = 0; i < e->nin && i < 32; i++) {
    bool once = true;
    for (int32_t j = 0; j < e->nin && once; j++) once = j == i || s[j].value != s[i].value;
    nb_tensor *have = needs[i] ? t->grads[s[i].value] : NULL;
    if (!once || !have || !sums_in_place(t, have, ins[i])) continue;
    needs[i] = false;
    bits |= 1u << i;
  }
  return bits;
}

/* grads[v] += the gradient of op's input i, by the rule's fused sum writing over the
   held gradient's block (the tape holds it alone: sums_in_place); *owned: the new one. */
static nb_code sum_into_held(nb_tape *t, nbg_sum_fn sum_into, const nb_fwd_op *op, nb_tensor *dy, int32_t i, int32_t v,
                             uint32_t fresh_from, nb_tensor **owned) {
  nb_tensor *have = t->grads[v], *replaced;
  t->c->forward_block = have->buf;
  nb_tensor *sum = sum_into(t->c, op, dy, i, have);
  t->c->forward_block = NULL;
  return replace_grad(t, v, have, sum, fresh_from, NULL, 0, owned, &replaced);
}

/* Frees the gradients of e's outputs once e is done: entries run in reverse, so nothing
   reads them again (unless they are sources, whose gradients are the answer). */
static void consume(nb_tape *t, const tape_entry *e) {
  for (int32_t o = 0; o < e->nout; o++) {
    int32_t v = t->slots[e->slot0 + e->nin + o].value;
    if (t->wanted[v] || !t->grads[v]) continue;
    nb_tensor_free(t->grads[v]);
    t->grads[v] = NULL;
  }
}

/* The gradients arriving at entry e's outputs; false when none did. */
static bool entry_dys(nb_tape *t, const tape_entry *e, nb_tensor **dys) {
  bool any = false;
  for (int32_t o = 0; o < e->nout; o++) any |= (dys[o] = t->grads[t->slots[e->slot0 + e->nin + o].value]) != NULL;
  return any;
}

/* Float outputs without a gradient get zeros when a sibling has one, as in the graph pass. */
static void zeros_for_missing_dys(nb_tape *t, const tape_entry *e, nb_tensor **outs, nb_tensor **dys) {
  for (int32_t o = 0; o < e->nout; o++)
    if (!dys[o] && nbcore_is_float(outs[o]->dtype)) dys[o] = nb_zeros_like(t->c, outs[o]);
}

/* One input's dxs from every seed stacked as [K, x dims], zeros for seeds without one;
   NULL when no seed has one or the input needs none. */
static nb_tensor *stack_seeds(nb_tape *t, const nb_tensor *x, nb_tensor **rows, bool needed) {
  bool any = false;
  for (int64_t j = 0; j < t->batch; j++) any |= rows[j] != NULL;
  if (!needed || !any) return NULL;
  for (int64_t j = 0; j < t->batch; j++)
    if (!rows[j]) rows[j] = nb_tensor_from(t->c, x->dtype, x->rank, x->shape, NULL);
  return nb_pack(t->c, rows, (int)t->batch, 0);
}

/* An entry whose gradient function cannot take the batch dim, in a batched pass (TF's
   pfor falls back the same way): the function runs once per seed on that seed's row of
   each batched dy (a dy of the output's own rank is a zero shared by all seeds), and the
   seeds' dxs are stacked back to [K, x dims]. */
static nb_code invoke_per_seed(nb_tape *t, nb_grad_fn fn, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  int64_t k = t->batch;
  int32_t nin = op->nin, nout = op->nout;
  /* every batched dy's rows [nout][k], every seed's dxs [nin][k], one call's dys and dxs */
  nb_tensor **dy_rows = calloc((size_t)((nout + nin) * k + nbad_grad_width(nin, nout)), sizeof *dy_rows);
  if (!dy_rows) return nbcore_fail(t->c, NB_NOMEM, "tape: out of memory");
  nb_tensor **dx_rows = dy_rows + nout * k, **call = dx_rows + nin * k;
  nb_code code = NB_OK;
  for (int32_t o = 0; o < nout && !code; o++)
    if (dys[o] && dys[o]->rank == op->out[o]->rank + 1) code = nb_unpack(t->c, dys[o], 0, (int)k, dy_rows + o * k);
  for (int64_t j = 0; j < k && !code; j++) {
    for (int32_t o = 0; o < nout; o++) call[o] = dy_rows[o * k + j] ? dy_rows[o * k + j] : dys[o];
    code = nbad_grad_invoke(t->c, fn, op, call, call + nout);
    for (int32_t i = 0; i < nin; i++) dx_rows[i * k + j] = call[nout + i];
  }
  for (int32_t i = 0; i < nin && !code; i++) dxs[i] = stack_seeds(t, op->in[i], dx_rows + i * k, op->needs_grad[i]);
  free(dy_rows);
  t->seed_looped++;
  return code ? code : nb_status(t->c);
}

/* One entry's gradient, in a scope of its own: only the accumulated gradients outlive it.
   buf holds the entry's dys already (entry_dys). */
static nb_code call_fn(nb_tape *t, const tape_entry *e, nb_grad_fn fn, nb_tensor **buf, bool *needs) {
  nb_tensor **ins = buf, **outs = ins + e->nin, **dys = outs + e->nout, **dxs = dys + e->nout;
  const nbop_def *as = t->batch ? batched_def(t, e, &fn) : NULL;
  bool batched = as != NULL, per_seed = t->batch && !batched;
  for (int32_t o = 0; o < e->nout; o++) dys[o] = nb_densify(t->c, dys[o]); /* gradient functions take dense dys */
  /* e's slots, valid until an op runs: a pass its tape records appends slots, which may move them */
  const tape_slot *s = &t->slots[e->slot0];
  for (int32_t i = 0; i < e->nin; i++) needs[i] = nbcore_is_float((nb_dtype)s[i].dtype) && s[i].value >= 0;
  for (int32_t i = 0; i < e->nin + e->nout; i++)
    ins[i] = batched ? entry_view(t, e, as, i, needs) : slot_view(t, &s[i], i);
  zeros_for_missing_dys(t, e, outs, dys);
  nbg_sum_fn sum_into = nbad_grad_sum_into(e->def);
  uint32_t summed = summed_into(t, e, sum_into, ins, dys, needs);
  nb_fwd_op op = {batched ? as : e->def, e->def->name, e->nin, e->nout, ins, outs, e->attr, needs};
  nb_code code = per_seed ? invoke_per_seed(t, fn, &op, dys, dxs) : nbad_grad_invoke(t->c, fn, &op, dys, dxs);
  if (!code && batched) unbatch_dxs(t, &t->slots[e->slot0], e->nin, needs, dxs);
  uint32_t fresh_from = t->c->scopes[t->c->nscopes - 1]; /* the entry's scope (run_backward) */
  nb_tensor *sums[32]; /* the fused sums' new gradients, for kept[] once they read ins no more */
  int nsums = 0;
  for (int32_t i = 0; i < e->nin && i < 32 && !code; i++) /* summed_into marks inputs 0..31 */
    if ((summed >> i) & 1u)
      code = sum_into_held(t, sum_into, &op, dys[0], i, t->slots[e->slot0 + i].value, fresh_from, &sums[nsums++]);
  nb_tensor **kept = ins; /* reused: the new gradients held, which must survive the scope */
  int nkept = 0;
  for (int k = 0; k < nsums && !code; k++) kept[nkept++] = sums[k];
  for (int32_t i = 0; i < e->nin && !code; i++) {
    if (!dxs[i] || !needs[i]) continue;
    nb_tensor *owned, *replaced;
    code = accumulate(t, t->slots[e->slot0 + i].value, dxs[i], fresh_from, kept, nkept, &owned, &replaced);
    int k = 0; /* an input listed twice: its new sum replaces the first one kept */
    while (k < nkept && kept[k] != replaced) k++;
    kept[k] = owned;
    nkept += k == nkept;
  }
  if (!code) nb_scope_end(t->c, kept, nkept);
  return code ? code : nb_status(t->c);
}

/* Width of the handle buffer one entry needs: its inputs, outputs, dys and dxs (+ guards). */
static int32_t widest(const nb_tape *t) {
  int32_t w = 0;
  for (int32_t i = 0; i < t->nentries; i++) {
    int32_t need = nbad_grad_width(t->entries[i].nin, t->entries[i].nout);
    if (need > w) w = need;
  }
  return w;
}

/* The tape's scratch for the widest entry, kept across calls (no allocation per step). */
static bool ensure_scratch(nb_tape *t, int32_t w) {
  if (w <= t->buf_cap) return true;
  nb_tensor **buf = realloc(t->buf, (size_t)w * sizeof *buf);
  if (buf) t->buf = buf;
  bool *needs = buf ? realloc(t->needs, (size_t)w * sizeof *needs) : NULL;
  if (needs) t->needs = needs;
  nb_tensor *views = needs ? realloc(t->views, (size_t)w * sizeof *views) : NULL;
  if (views) t->views = views;
  if (!views) return false;
  for (int32_t i = 0; i < w; i++) nbcore_borrowed_init(&views[i], NB_F32, 0, NULL, NULL, 0);
  t->buf_cap = w;
  return true;
}

/* Drops e's saved data once its gradient ran in a one-shot tape's only pass, as PyTorch
   frees saved tensors: the blocks go back to the pool while still in cache, for the
   gradients that later entries allocate. */
static void release_saved(nb_tape *t, const tape_entry *e) {
  for (int32_t i = e->slot0; i < e->slot0 + e->nin + e->nout; i++) {
    nbcore_buffer_release(t->c, t->slots[i].buf);
    t->slots[i].buf = NULL;
  }
}

/* The backward step of entry i: its gradient function on the gradients of its outputs. */
static nb_code backward_entry(nb_tape *t, int32_t i, nb_tensor **buf, bool *needs) {
  const tape_entry entry = t->entries[i], *e = &entry; /* a copy: recording this pass may move the entries */
  if (!entry_dys(t, e, buf + e->nin + e->nout)) return NB_OK;
  nb_grad_fn fn;
  nbad_grad_kind kind = nbad_grad_lookup(e->def, NULL, &fn);
  if (kind == NBAD_GRAD_STOP) return NB_OK;
  if (kind == NBAD_GRAD_NONE) return nbad_tape_no_gradient(t, e->def);
  int32_t depth = t->c->nscopes;
  nb_scope_begin(t->c);
  nb_code code = call_fn(t, e, fn, buf, needs);
  if (t->c->nscopes > depth) nb_scope_end(t->c, NULL, 0); /* call_fn closes it on success */
  if (!code) consume(t, e);
  if (!code && t->last_pass) release_saved(t, e);
  return code;
}

/* The ready hook's calls for the sources whose gradients entry i completed. */
static void fire_ready(nb_tape *t, int32_t i) {
  for (int k = 0; k < t->ready_n; k++)
    if (t->ready_at[k] == i && t->grads[t->ready_value[k]]) t->ready_fn(t->ready_user, k, t->grads[t->ready_value[k]]);
}

static nb_code run_backward(nb_tape *t) {
  nb_code code = ensure_scratch(t, widest(t) + 1) ? NB_OK : nbcore_fail(t->c, NB_NOMEM, "tape: out of memory");
  for (int32_t i = t->nentries - 1; i >= 0 && !code; i--) {
    code = backward_entry(t, i, t->buf, t->needs);
    if (!code && t->ready_n) fire_ready(t, i);
  }
  return code;
}

void nbad_tape_set_ready_hook(nb_tape *t, nbad_ready_fn fn, void *user) {
  t->ready_fn = fn;
  t->ready_user = user;
}

/* For a hooked pass: each source's value and the first entry that reads it (the last the
   backward pass runs), -1 when none does. One sweep of the entries through a map from
   value number to source. False when out of memory. */
static bool plan_ready(nb_tape *t, nb_tensor *const *sources, int ns) {
  size_t n = (size_t)(ns ? ns : 1);
  t->ready_at = malloc(n * sizeof *t->ready_at);
  t->ready_value = malloc(n * sizeof *t->ready_value);
  int32_t *source_of = malloc((size_t)(t->nvalues ? t->nvalues : 1) * sizeof *source_of);
  if (!t->ready_at || !t->ready_value || !source_of) {
    free(source_of);
    return false;
  }
  for (int32_t v = 0; v < t->nvalues; v++) source_of[v] = -1;
  for (int k = 0; k < ns; k++) {
    t->ready_value[k] = tracked_value(t, sources[k]->id);
    t->ready_at[k] = -1;
    if (t->ready_value[k] >= 0 && t->ready_value[k] < t->nvalues) source_of[t->ready_value[k]] = k;
  }
  for (int32_t i = t->nentries - 1; i >= 0; i--) {
    const tape_entry *e = &t->entries[i];
    for (int32_t j = e->slot0; j < e->slot0 + e->nin; j++)
      if (t->slots[j].value >= 0 && source_of[t->slots[j].value] >= 0) t->ready_at[source_of[t->slots[j].value]] = i;
  }
  free(source_of);
  t->ready_n = ns;
  return true;
}

static void unplan_ready(nb_tape *t) {
  free(t->ready_at);
  free(t->ready_value);
  t->ready_at = t->ready_value = NULL;
  t->ready_n = 0;
}

static nb_code check_list(nb_tape *t, const char *what, nb_tensor *const *xs, int n, bool allow_null) {
  if (n < 0 || (n > 0 && !xs))
    return nbcore_fail(t->c, NB_INVALID, "nb_tape_gradient: %s is NULL or has negative length", what);
  for (int i = 0; i < n; i++)
    if (xs[i] ? !xs[i]->buf : !allow_null)
      return nbcore_fail(t->c, NB_INVALID, "nb_tape_gradient: %s[%d] is not a concrete tensor", what, i);
  return NB_OK;
}

/* The per-value arrays of a backward pass, emptied; false when out of memory. */
static bool empty_grads(nb_tape *t) {
  int32_t n = t->nvalues ? t->nvalues : 1;
  if (n > t->grads_cap) {
    nb_tensor **grads = realloc(t->grads, (size_t)n * sizeof *grads);
    if (grads) t->grads = grads;
    bool *wanted = grads ? realloc(t->wanted, (size_t)n * sizeof *wanted) : NULL;
    if (!wanted) return false;
    t->wanted = wanted;
    t->grads_cap = n;
  }
  memset(t->grads, 0, (size_t)n * sizeof *t->grads);
  memset(t->wanted, 0, (size_t)n * sizeof *t->wanted);
  return true;
}

nb_code nbad_tape_run(nb_tape *t, nb_tensor *const *targets, int nt, nb_tensor *const *sources, int ns,
                      nb_tensor *const *output_grads, nb_tensor **out) {
  nb_code code = check_not_running(t, "nb_tape_gradient");
  if (code) return code;
  code = empty_grads(t) ? NB_OK : nbcore_fail(t->c, NB_NOMEM, "tape: out of memory");
  int32_t covered = t->nvalues; /* the values this pass has gradients for */
  bool was_recording = t->recording;
  t->recording = false; /* the seeds are constants */
  t->running = true;
  nbad_grad_builtins_init();
  nb_scope_begin(t->c);
  for (int i = 0; i < nt && !code; i++) {
    int32_t v = tracked_value(t, targets[i]->id);
    if (!nbcore_is_float(targets[i]->dtype) || v < 0) continue;
    nb_tensor *seed = output_grads && output_grads[i] ? output_grads[i] : nb_ones_like(t->c, targets[i]), *owned, *old;
    code = seed ? accumulate(t, v, seed, UINT32_MAX, NULL, 0, &owned, &old) : nb_status(t->c);
  }
  for (int i = 0; i < ns && !code; i++) {
    int32_t v = tracked_value(t, sources[i]->id);
    if (v >= 0) t->wanted[v] = true;
  }
  t->recording = was_recording && t->persistent; /* the pass itself, on a persistent tape (TF's) */
  if (!code && t->ready_fn && !plan_ready(t, sources, ns)) code = nbcore_fail(t->c, NB_NOMEM, "tape: out of memory");
  if (!code) code = run_backward(t);
  unplan_ready(t);
  t->recording = false;
  for (int i = 0; i < ns; i++) {
    int32_t v = code ? -1 : tracked_value(t, sources[i]->id);
    if (v >= covered) v = -1; /* watched during the pass (by a custom gradient function) */
    out[i] = v < 0 || !nbcore_is_float(sources[i]->dtype) ? NULL : t->grads[v];
    if (!code && !t->batch && !out[i] && t->unconnected_zero) out[i] = nb_zeros_like(t->c, sources[i]);
    for (int j = 0; j < i && out[i]; j++) /* a source listed twice gets a handle of its own */
      if (out[j] == out[i]) out[i] = own(t, out[i]);
  }
  nb_scope_end(t->c, out, ns);
  if (code)
    for (int i = 0; i < ns; i++) nb_tensor_free(out[i]), out[i] = NULL;
  t->recording = was_recording;
  t->running = false;
  return code;
}

/* As TF's, a one-shot tape also stops recording: nothing could use what it recorded. */
void nbad_tape_spend(nb_tape *t) {
  if (t->persistent) return;
  t->used = true;
  t->recording = false;
  tape_reset(t);
}

static nb_code tape_gradient(nb_tape *t, nb_tensor *const *targets, int nt, nb_tensor *const *sources, int ns,
                             nb_tensor *const *output_grads, nb_tensor **out) {
  if (!nbop_live(t->c)) return nb_status(t->c); /* t checked and out cleared by nb_tape_gradient */
  if (ns > 0 && !out) return nbcore_fail(t->c, NB_INVALID, "nb_tape_gradient: out is NULL");
  if (!t->active) return nbcore_fail(t->c, NB_INVALID, "nb_tape_gradient: the tape was ended");
  if (t->used && !t->persistent)
    return nbcore_fail(t->c, NB_INVALID,
                       "nb_tape_gradient: a non-persistent tape can be used for one gradient computation only; "
                       "begin it with persistent = 1 to call it again");
  /* bad arguments leave a one-shot tape usable */
  nb_code code = check_list(t, "targets", targets, nt, false);
  if (!code) code = check_list(t, "sources", sources, ns, false);
  if (!code && output_grads) code = check_list(t, "output_grads", output_grads, nt, true);
  for (int i = 0; !code && output_grads && i < nt; i++)
    if (output_grads[i] &&
        (output_grads[i]->dtype != targets[i]->dtype || !nbg_same_shape(output_grads[i], targets[i])))
      code = nbcore_fail(t->c, NB_SHAPE, "nb_tape_gradient: output_grads[%d] is %s %s, target %d is %s %s", i,
                         nb_dtype_name(output_grads[i]->dtype), nbop_tstr(output_grads[i]), i,
                         nb_dtype_name(targets[i]->dtype), nbop_tstr(targets[i]));
  if (code) return code;
  t->last_pass = !t->persistent;
  code = nbad_tape_run(t, targets, nt, sources, ns, output_grads, out);
  t->last_pass = false;
  nbad_tape_spend(t);
  return code;
}

/* Targets that are IndexedSlices (a gradient differentiated again) are densified first;
   the tape records that like any op. */
nb_code nb_tape_gradient(nb_tape *t, nb_tensor *const *targets, int nt, nb_tensor *const *sources, int ns,
                         nb_tensor *const *output_grads, nb_tensor **out) {
  if (!t) return NB_INVALID;
  nb_tensor *const *dense;
  nb_tensor **owned;
  for (int i = 0; out && i < ns; i++) out[i] = NULL;
  nb_code code = nbop_densify_list(t->c, targets, nt, &dense, &owned);
  if (!code) code = tape_gradient(t, dense, nt, sources, ns, output_grads, out);
  free(owned);
  return code;
}

/* The sources are handles of the variables' ids (reads the tapes do not watch). */
nb_code nb_tape_gradient_vars(nb_tape *t, nb_tensor *const *targets, int nt, nb_variable *const *vars, int nv,
                              nb_tensor **out) {
  if (!t) return NB_INVALID;
  for (int i = 0; out && i < nv; i++) out[i] = NULL;
  if (!nbop_live(t->c)) return nb_status(t->c);
  if (nv < 0 || (nv > 0 && (!vars || !out)))
    return nbcore_fail(t->c, NB_INVALID, "nb_tape_gradient_vars: vars or out is NULL, or nv is negative");
  nb_tensor *small[16], **src = nv <= 16 ? small : malloc((size_t)nv * sizeof *src);
  if (!src) return nbcore_fail(t->c, NB_NOMEM, "nb_tape_gradient_vars: out of memory");
  nb_code code = NB_OK;
  for (int i = 0; i < nv; i++) src[i] = NULL;
  for (int i = 0; i < nv && !code; i++) {
    if (!vars[i] || vars[i]->freed)
      code = nbcore_fail(t->c, NB_INVALID, "nb_tape_gradient_vars: vars[%d] is %s", i, vars[i] ? "freed" : "NULL");
    else if (!(src[i] = nbcore_variable_handle(t->c, vars[i])))
      code = nb_status(t->c);
  }
  if (!code) code = nb_tape_gradient(t, targets, nt, src, nv, NULL, out);
  for (int i = 0; i < nv; i++) nb_tensor_free(src[i]);
  if (src != small) free(src);
  return code;
}

int32_t nbad_tape_value(const nb_tape *t, uint64_t id) { return tracked_value(t, id); }

nb_tensor *nbad_tape_take_or_own(nb_tape *t, nb_tensor *g, uint32_t fresh_from, nb_tensor *const *kept, int nkept) {
  return take_or_own(t, g, fresh_from, kept, nkept);
}

/* Eager ops have no node names: TF's eager message names the op type twice. */
nb_code nbad_tape_no_gradient(const nb_tape *t, const nbop_def *def) {
  return nbcore_fail(t->c, NB_NO_GRADIENT, "No gradient defined for operation '%s' (op type: %s)", def->name,
                     def->name);
}

nb_code nbad_tape_check_idle(const nb_tape *t, const char *fn) { return check_not_running(t, fn); }
