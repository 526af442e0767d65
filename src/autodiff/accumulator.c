/* Eager forward mode (TF's ForwardAccumulator): an active accumulator keeps a tangent per
   tensor id it has seen; after each eager op (the record hook the tapes use) it computes
   the op's output tangents from its inputs' with the op's forward rule (nbad_jvp_op).
   Those tangent ops are ordinary eager ops: tapes record them (reverse over forward), and
   accumulators begun before this one see them (forward over forward), while this one and
   those begun inside it do not (an accumulator differentiates its primal ops only). Ops
   a tape's backward pass runs are seen too, so an accumulator around a tape's gradient
   gives Hessian-vector products (forward over reverse). */
#include "autodiff.h"

#include <stdlib.h>
#include <string.h>

typedef struct acc_slot {
  uint64_t id;  /* 0: empty */
  nb_tensor *t; /* detached, under the tangent's own id (tapes know it by that id) */
} acc_slot;

struct nb_forward_accumulator {
  nb_ctx *c;
  bool busy; /* computing tangents: hides itself and accumulators begun after it */
  acc_slot *slots;
  uint32_t cap, n; /* cap a power of two, n < cap / 2 */
};

/* ---- the id -> tangent map (open addressing) ------------------------------------------ */

/* id's slot in slots (cap a power of two): its own, or the empty one it would take. */
static acc_slot *place(acc_slot *slots, uint32_t cap, uint64_t id) {
  uint32_t i = (uint32_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1); /* Fibonacci hashing */
  while (slots[i].id != 0 && slots[i].id != id) i = (i + 1) & (cap - 1);
  return &slots[i];
}

static acc_slot *find(const nb_forward_accumulator *a, uint64_t id) {
  acc_slot *s = a->cap ? place(a->slots, a->cap, id) : NULL;
  return s && s->id ? s : NULL;
}

static bool grow(nb_forward_accumulator *a) {
  uint32_t cap = a->cap ? 2 * a->cap : 64;
  acc_slot *slots = calloc(cap, sizeof *slots);
  if (!slots) return false;
  for (uint32_t i = 0; i < a->cap; i++)
    if (a->slots[i].id) *place(slots, cap, a->slots[i].id) = a->slots[i];
  free(a->slots);
  a->slots = slots;
  a->cap = cap;
  return true;
}

/* A detached copy of t's value (a reference to its data) under t's id. */
static nb_tensor *keep(const nb_tensor *t) {
  nbcore_buffer_retain(t->buf);
  nb_tensor *d = nbcore_detached_new(t->dtype, t->rank, t->shape, t->buf);
  if (d) d->id = t->id;
  return d;
}

/* Sets id's tangent to t's value (replacing any); false when out of memory. */
static bool put(nb_forward_accumulator *a, uint64_t id, const nb_tensor *t) {
  if (2 * (a->n + 1) > a->cap && !grow(a)) return false;
  acc_slot *s = place(a->slots, a->cap, id);
  nb_tensor *d = keep(t);
  if (!d) return false;
  if (s->id)
    nb_tensor_free(s->t);
  else
    a->n++;
  *s = (acc_slot){id, d};
  return true;
}

/* A handle of c's current scope for id's tangent, under the tangent's id; NULL when none. */
static nb_tensor *tangent_of(const nb_forward_accumulator *a, uint64_t id) {
  const acc_slot *s = find(a, id);
  if (!s) return NULL;
  nbcore_buffer_retain(s->t->buf);
  nb_tensor *h = nbcore_handle_new(a->c, s->t->dtype, s->t->rank, s->t->shape, s->t->buf);
  if (h) h->id = s->t->id;
  return h;
}

static void clear(nb_forward_accumulator *a) {
  for (uint32_t i = 0; i < a->cap; i++)
    if (a->slots[i].id) nb_tensor_free(a->slots[i].t);
  free(a->slots);
  a->slots = NULL;
  a->cap = a->n = 0;
}

/* ---- the record hook ------------------------------------------------------------------- */

static bool reads_tangent(const nb_forward_accumulator *a, const nbop_kargs *k) {
  for (int i = 0; i < k->nin; i++)
    if (nbcore_is_float(k->in[i]->dtype) && find(a, k->in[i]->id)) return true;
  return false;
}

/* The tangents of the op's outputs (tout, scratch of 2 (nin + nout) + guards), kept. */
static nb_code op_tangents(nb_forward_accumulator *a, nbop_kargs *k, nb_tensor *const *out, nb_tensor **buf) {
  nb_tensor **tin = buf, **tout = tin + k->nin;
  for (int i = 0; i < k->nin; i++) tin[i] = nbcore_is_float(k->in[i]->dtype) ? tangent_of(a, k->in[i]->id) : NULL;
  nb_fwd_op op = {k->def, k->def->name, k->nin, k->nout, k->in, out, k->attr, NULL};
  nb_code code = nb_status(a->c) ? nb_status(a->c) : nbad_jvp_op(a->c, &op, NULL, tin, tout);
  for (int o = 0; o < k->nout && !code; o++)
    if (tout[o] && !put(a, out[o]->id, tout[o]))
      code = nbcore_fail(a->c, NB_NOMEM, "%s: out of memory keeping a tangent", k->def->name);
  return code;
}

static void accumulate(nb_forward_accumulator *a, nbop_kargs *k, nb_tensor *const *out) {
  nb_tensor *small[32], **buf = small;
  int32_t width = nbad_grad_width(k->nin, k->nout);
  if (width > 32 && !(buf = malloc((size_t)width * sizeof *buf))) {
    nbcore_fail(a->c, NB_NOMEM, "%s: out of memory computing tangents", k->def->name);
    return;
  }
  a->busy = true;
  nb_scope_begin(a->c);
  op_tangents(a, k, out, buf);
  nb_scope_end(a->c, NULL, 0);
  a->busy = false;
  if (buf != small) free(buf);
}

void nbad_record(nb_ctx *c, nbop_kargs *k, nb_tensor *const *out) {
  if (c->ntapes) nbad_tape_record(c, k, out);
  for (int i = 0; i < c->naccs && !c->tapes_paused && !c->status; i++) {
    nb_forward_accumulator *a = c->accs[i];
    if (a->busy) break; /* it and the ones inside it do not see their own tangent ops */
    if (reads_tangent(a, k)) accumulate(a, k, out);
  }
}

void nbad_release_accumulators(nb_ctx *c) {
  for (int i = 0; i < c->naccs; i++) {
    clear(c->accs[i]);
    free(c->accs[i]);
  }
  free(c->accs);
  c->accs = NULL;
  c->naccs = c->accs_cap = 0;
}

/* ---- the public accumulator ---------------------------------------------------------------- */

nb_forward_accumulator *nb_forward_accumulator_begin(nb_ctx *c) {
  if (!nbop_live(c)) return NULL;
  if (c->graph) {
    nbcore_fail(c, NB_INVALID,
                "nb_forward_accumulator_begin: accumulators follow eager ops; graph contexts use nb_jvp");
    return NULL;
  }
  nb_forward_accumulator *a = calloc(1, sizeof *a);
  if (!a || !nbcore_grow_array((void **)&c->accs, &c->accs_cap, c->naccs + 1, sizeof *c->accs)) {
    free(a);
    nbcore_fail(c, NB_NOMEM, "nb_forward_accumulator_begin: out of memory");
    return NULL;
  }
  a->c = c;
  c->accs[c->naccs++] = a;
  c->record = nbad_record;
  c->release_tapes = nbad_release_tapes;
  return a;
}

nb_code nb_forward_accumulator_watch(nb_forward_accumulator *a, nb_tensor *x, nb_tensor *tangent) {
  if (!a) return NB_INVALID;
  nb_ctx *c = a->c;
  if (!nbop_live(c)) return nb_status(c);
  if (!x || !tangent || !x->buf || !tangent->buf || nb_is_indexed_slices(tangent))
    return nbcore_fail(c, NB_INVALID, "nb_forward_accumulator_watch: x and tangent must be concrete dense tensors");
  if (!nbcore_is_float(x->dtype) || tangent->dtype != x->dtype)
    return nbcore_fail(c, NB_DTYPE,
                       "nb_forward_accumulator_watch: x is %s, tangent %s; both must be the same float type",
                       nb_dtype_name(x->dtype), nb_dtype_name(tangent->dtype));
  if (tangent->rank != x->rank || memcmp(tangent->shape, x->shape, (size_t)x->rank * sizeof *x->shape))
    return nbcore_fail(c, NB_SHAPE, "nb_forward_accumulator_watch: the tangent's shape %s is not x's",
                       nbop_tstr(tangent));
  return put(a, x->id, tangent) ? NB_OK : nbcore_fail(c, NB_NOMEM, "nb_forward_accumulator_watch: out of memory");
}

nb_tensor *nb_forward_accumulator_jvp(nb_forward_accumulator *a, nb_tensor *y) {
  if (!a || !y || !nbop_live(a->c)) return NULL;
  return nbcore_is_float(y->dtype) ? tangent_of(a, y->id) : NULL;
}

void nb_forward_accumulator_end(nb_forward_accumulator *a) {
  if (!a) return;
  nb_ctx *c = a->c;
  int i = 0;
  while (i < c->naccs && c->accs[i] != a) i++;
  if (i == c->naccs || a->busy) return;
  memmove(&c->accs[i], &c->accs[i + 1], (size_t)(c->naccs - i - 1) * sizeof *c->accs);
  if (--c->naccs == 0 && c->ntapes == 0) c->record = NULL;
  clear(a);
  free(a);
}
