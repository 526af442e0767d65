/* Forward-mode Jacobians on the eager tape (JAX's jacfwd): the tape's records are replayed
   in order, each entry's forward rule (nbad_jvp_op) turning its inputs' tangents into its
   outputs', once per column: the tangent of the source is one-hot at element j (in every
   row, for the batch Jacobian), and the target's tangent is column j. Only entries on a
   path from the source to the target replay, and a tangent is freed after the last entry
   reading it. The replay fails as the reverse pass would (the same checks, and the same
   error for an op without a gradient), so the mode changes the cost and the rounding,
   not the result. */
#include "tape.h"

#include <stdlib.h>
#include <string.h>

typedef struct replay {
  nb_tape *t;
  int32_t nentries;     /* the entries there were when the Jacobian began */
  int32_t xv, yv;       /* the source's and the target's value numbers (-1: untracked) */
  bool *replayed;       /* per entry: on a path from the source to the target */
  int32_t *last_read;   /* per value: the last replayed entry reading its tangent, -1 none */
  nb_tensor **tangents; /* per value: its tangent in the running column */
  nb_tensor *views;     /* borrowed views of one entry's recorded tensors */
  nb_tensor **buf;      /* one entry's handles: inputs, outputs, their tangents (+ guards) */
} replay;

static bool is_float_slot(const tape_slot *s) { return nbcore_is_float((nb_dtype)s->dtype); }

/* The values whose gradients the reverse pass would reach from the target (through
   entries with a gradient), failing as it would on a reached entry without one: the
   entries in reverse order, so the first such entry is the one the pass meets first. */
static nb_code mark_reached(replay *r, bool *reached) {
  nb_tape *t = r->t;
  if (r->yv >= 0) reached[r->yv] = true;
  for (int32_t i = r->nentries - 1; i >= 0; i--) {
    const tape_entry *e = &t->entries[i];
    bool any = false;
    for (int32_t o = 0; o < e->nout; o++) any |= reached[t->slots[e->slot0 + e->nin + o].value];
    nb_grad_fn fn;
    nbad_grad_kind kind = any ? nbad_grad_lookup(e->def, NULL, &fn) : NBAD_GRAD_STOP;
    if (kind == NBAD_GRAD_NONE) return nbad_tape_no_gradient(t, e->def);
    for (int32_t k = 0; k < e->nin && kind == NBAD_GRAD_FN; k++) {
      const tape_slot *s = &t->slots[e->slot0 + k];
      if (s->value >= 0 && is_float_slot(s)) reached[s->value] = true;
    }
  }
  return NB_OK;
}

/* Entries to replay: reached from the target and reading a tangent carried from the
   source; each tangent's last reader. The width of the widest replayed entry. */
static int32_t plan_replay(replay *r, const bool *reached, bool *carried) {
  nb_tape *t = r->t;
  int32_t width = 0;
  if (r->xv >= 0) carried[r->xv] = true;
  for (int32_t i = 0; i < r->nentries; i++) {
    const tape_entry *e = &t->entries[i];
    bool reads = false, reaches = false;
    for (int32_t k = 0; k < e->nin; k++)
      reads |= t->slots[e->slot0 + k].value >= 0 && carried[t->slots[e->slot0 + k].value];
    for (int32_t o = 0; o < e->nout; o++) reaches |= reached[t->slots[e->slot0 + e->nin + o].value];
    if (!(r->replayed[i] = reads && reaches)) continue;
    for (int32_t k = 0; k < e->nin; k++)
      if (t->slots[e->slot0 + k].value >= 0) r->last_read[t->slots[e->slot0 + k].value] = i;
    for (int32_t o = 0; o < e->nout; o++)
      if (is_float_slot(&t->slots[e->slot0 + e->nin + o])) carried[t->slots[e->slot0 + e->nin + o].value] = true;
    if (nbad_grad_width(e->nin, e->nout) > width) width = nbad_grad_width(e->nin, e->nout);
  }
  return width;
}

/* The replay's per-entry and per-value arrays and its planned entries; NB_NOMEM or the
   reverse pass's error. */
static nb_code begin_replay(replay *r) {
  nb_tape *t = r->t;
  size_t nv = (size_t)t->nvalues + 1;
  bool *reached = calloc(nv, sizeof *reached), *carried = calloc(nv, sizeof *carried);
  r->replayed = calloc((size_t)r->nentries + 1, sizeof *r->replayed);
  r->last_read = malloc(nv * sizeof *r->last_read);
  r->tangents = calloc(nv, sizeof *r->tangents);
  nb_code code = reached && carried && r->replayed && r->last_read && r->tangents
                     ? NB_OK
                     : nbcore_fail(t->c, NB_NOMEM, "nb_tape_jacobian: out of memory");
  for (size_t v = 0; v < nv && !code; v++) r->last_read[v] = -1;
  if (!code) code = mark_reached(r, reached);
  int32_t width = code ? 0 : plan_replay(r, reached, carried);
  r->views = code ? NULL : malloc((size_t)(width + 1) * sizeof *r->views);
  r->buf = code ? NULL : malloc((size_t)(width + 1) * sizeof *r->buf);
  if (!code && (!r->views || !r->buf)) code = nbcore_fail(t->c, NB_NOMEM, "nb_tape_jacobian: out of memory");
  for (int32_t i = 0; i < width && !code; i++) nbcore_borrowed_init(&r->views[i], NB_F32, 0, NULL, NULL, 0);
  free(reached);
  free(carried);
  return code;
}

static void end_replay(replay *r) {
  free(r->replayed);
  free(r->last_read);
  free(r->tangents);
  free(r->views);
  free(r->buf);
}

/* Drops value v's tangent (the target's is the column, kept). */
static void drop_tangent(replay *r, int32_t v) {
  if (v == r->yv || !r->tangents[v]) return;
  nb_tensor_free(r->tangents[v]);
  r->tangents[v] = NULL;
}

/* Entry i's output tangents from its inputs', in a scope of its own that keeps only them;
   then the tangents no later entry reads are dropped. */
static nb_code replay_entry(replay *r, int32_t i) {
  nb_tape *t = r->t;
  const tape_entry *e = &t->entries[i];
  const tape_slot *s = &t->slots[e->slot0];
  nb_tensor **ins = r->buf, **outs = ins + e->nin, **tin = outs + e->nout, **tout = tin + e->nin;
  for (int32_t k = 0; k < e->nin + e->nout; k++) {
    nbcore_borrowed_set(&r->views[k], (nb_dtype)s[k].dtype, s[k].rank, s[k].shape, s[k].buf, s[k].id);
    ins[k] = &r->views[k];
  }
  for (int32_t k = 0; k < e->nin; k++) tin[k] = s[k].value >= 0 ? r->tangents[s[k].value] : NULL;
  nb_scope_begin(t->c);
  uint32_t fresh_from = t->c->scopes[t->c->nscopes - 1];
  nb_fwd_op op = {e->def, e->def->name, e->nin, e->nout, ins, outs, e->attr, NULL};
  nb_code code = nbad_jvp_op(t->c, &op, NULL, tin, tout);
  for (int32_t o = 0; o < e->nout && !code; o++)
    if (tout[o] && !(tout[o] = nbad_tape_take_or_own(t, tout[o], fresh_from, tout, o))) code = nb_status(t->c);
  nb_scope_end(t->c, code ? NULL : tout, code ? 0 : e->nout);
  for (int32_t o = 0; o < e->nout && !code; o++) {
    int32_t v = s[e->nin + o].value;
    drop_tangent(r, v); /* an output recorded twice (a repeated id) */
    r->tangents[v] = tout[o];
    if (r->last_read[v] < 0) drop_tangent(r, v);
  }
  for (int32_t k = 0; k < e->nin; k++)
    if (s[k].value >= 0 && r->last_read[s[k].value] == i) drop_tangent(r, s[k].value);
  return code;
}

/* Column j: the target's tangent along seed, as [batch, target row elements] in the
   target's dtype, zeros when unconnected. */
static nb_tensor *column(replay *r, nb_tensor *target, nb_tensor *seed, int64_t batch) {
  nb_ctx *c = r->t->c;
  if (r->xv >= 0) r->tangents[r->xv] = seed;
  nb_code code = NB_OK;
  for (int32_t i = 0; i < r->nentries && !code; i++)
    if (r->replayed[i]) code = replay_entry(r, i);
  nb_tensor *ty = r->yv >= 0 ? r->tangents[r->yv] : NULL;
  for (int32_t v = 0; v < r->t->nvalues; v++) r->tangents[v] = NULL; /* the rest died with their readers */
  if (code) return NULL;
  if (!ty) ty = nb_zeros_like(c, target);
  return nb_reshape(c, ty, (const int64_t[]){batch, -1}, 2);
}

/* The columns, each [batch, m] with m = target row elements, stacked as [batch, m, n] in
   the source's dtype (the reverse Jacobian's). */
static nb_code columns(replay *r, nb_tensor *target, nb_tensor *source, int64_t batch, nb_tensor **out) {
  nb_ctx *c = r->t->c;
  int64_t n = source->size / batch;
  nb_tensor **cols = malloc((size_t)(n + 1) * sizeof *cols);
  if (!cols) return nbcore_fail(c, NB_NOMEM, "nb_tape_jacobian: out of memory");
  nb_code code = NB_OK;
  for (int64_t j = 0; j < n && !code; j++) {
    nb_scope_begin(c); /* the column's seed and tangents go with it */
    nb_tensor *seed = nbad_one_hot_rows(c, source, batch, n, j);
    cols[j] = seed ? column(r, target, seed, batch) : NULL;
    nb_scope_end(c, &cols[j], 1);
    code = cols[j] ? NB_OK : nb_status(c);
  }
  if (!code) *out = nb_pack(c, cols, (int)n, 2);
  if (!code && *out && (*out)->dtype != source->dtype) *out = nb_cast(c, *out, source->dtype);
  free(cols);
  return code ? code : nb_status(c);
}

nb_code nbad_tape_jacobian_forward(nb_tape *t, nb_tensor *target, nb_tensor *source, int64_t batch,
                                   const int64_t *shape, int rank, nb_tensor **out) {
  nb_code code = NB_OK;
  replay r = {
      .t = t, .nentries = t->nentries, .xv = nbad_tape_value(t, source->id), .yv = nbad_tape_value(t, target->id)};
  bool was_recording = t->recording;
  t->recording = false; /* the seeds, the replay and the stacking are not part of the taped function */
  t->running = true;
  nb_scope_begin(t->c);
  if (target->size == 0 || source->size == 0) { /* no column, or columns of nothing: no replay */
    *out = nb_tensor_from(t->c, source->dtype, rank, shape, NULL);
  } else {
    code = begin_replay(&r);
    if (!code) code = columns(&r, target, source, batch, out);
    if (!code) *out = nb_reshape(t->c, *out, shape, rank);
  }
  code = code ? code : nb_status(t->c);
  if (!code) t->last_path = NB_JACOBIAN_FORWARD;
  nb_scope_end(t->c, out, 1);
  end_replay(&r);
  t->running = false;
  t->recording = was_recording;
  return code;
}
