/* Jacobians on the eager tape (tf.GradientTape.jacobian and batch_jacobian): forward mode
   for wide ones (jacobian_forward.c), else reverse mode vectorized as TF's pfor does it:
   one backward pass whose gradients carry a leading dim of seeds (see tape.c for how each
   entry runs batched), or, when that would not fit, one pass per seed. */
#include "tape.h"

#include <stdlib.h>
#include <string.h>

static void set_one(nb_tensor *seed, int64_t i) {
  if (seed->dtype == NB_F32)
    ((float *)nbcore_tdata(seed))[i] = 1;
  else
    ((double *)nbcore_tdata(seed))[i] = 1;
}

nb_tensor *nbad_one_hot_rows(nb_ctx *c, nb_tensor *like, int64_t batch, int64_t per, int64_t j) {
  nb_tensor *seed = nb_zeros_like(c, like);
  for (int64_t b = 0; seed && b < batch; b++) set_one(seed, b * per + j);
  return seed;
}

/* Elements per batched tensor beyond which the loop's smaller memory wins. */
enum { BATCHED_JACOBIAN_LIMIT = 1 << 24 };

/* Whether one batched pass of k seeds fits: every taped tensor, with the seed dim added,
   stays within the rank limit and, times k, within the size limit. */
static bool batched_pass_fits(const nb_tape *t, int64_t k, int target_rank) {
  if (k < 1 || target_rank >= NB_MAX_RANK) return false;
  for (int32_t i = 0; i < t->nslots; i++) {
    if (t->slots[i].rank >= NB_MAX_RANK) return false;
    int64_t n = 1;
    for (int d = 0; d < t->slots[i].rank; d++) n *= t->slots[i].shape[d];
    if (n > BATCHED_JACOBIAN_LIMIT / k) return false;
  }
  return true;
}

/* The source's gradient [k, batch, source row dims] as [batch, k, source row dims]. */
static nb_tensor *seed_dim_second(nb_tape *t, nb_tensor *g) {
  int perm[NB_MAX_RANK] = {1, 0};
  for (int d = 2; d < g->rank; d++) perm[d] = d;
  return nb_transpose(t->c, g, perm, g->rank);
}

/* The whole Jacobian from one batched backward pass of k seeds, k = the elements of one of
   `batch` target rows: seed j is one-hot at element j of every row, as [k, target dims].
   The source's gradient is then [k, source dims]: the Jacobian's layout when batch is 1
   (the identity seed); for the batch Jacobian the seed dim moves behind the batch dim. */
static nb_code jacobian_batched(nb_tape *t, nb_tensor *target, nb_tensor *source, int64_t batch, const int64_t *shape,
                                int rank, nb_tensor **out) {
  int64_t k = target->size / batch, dims[NB_MAX_RANK];
  dims[0] = k;
  memcpy(dims + 1, target->shape, (size_t)target->rank * sizeof *dims);
  bool was_recording = t->recording;
  t->recording = false; /* the seed and the reshape are not part of the taped function */
  nb_scope_begin(t->c);
  nb_tensor *seed = nb_tensor_from(t->c, target->dtype, target->rank + 1, dims, NULL), *g = NULL;
  for (int64_t j = 0; seed && j < k; j++)
    for (int64_t b = 0; b < batch; b++) set_one(seed, j * target->size + b * k + j);
  t->batch = k;
  t->seed_looped = 0;
  nb_code code = seed ? nbad_tape_run(t, &target, 1, &source, 1, &seed, &g) : nb_status(t->c);
  t->batch = 0;
  t->last_path = t->seed_looped ? NB_JACOBIAN_MIXED : NB_JACOBIAN_VECTORIZED;
  if (!code && g && batch > 1) g = seed_dim_second(t, g);
  if (!code) *out = g ? nb_reshape(t->c, g, shape, rank) : nb_tensor_from(t->c, source->dtype, rank, shape, NULL);
  code = code ? code : nb_status(t->c);
  nb_scope_end(t->c, out, 1);
  t->recording = was_recording;
  return code;
}

/* Jacobian rows: one backward pass per element j of a target row, seeded in all `batch`
   rows at once, stacked on axis `axis` (0 for the plain Jacobian, 1 for the batch one). */
static nb_code jacobian_rows(nb_tape *t, nb_tensor *target, nb_tensor *source, int64_t batch, int axis,
                             const int64_t *shape, int rank, nb_tensor **out) {
  int64_t per = batch ? target->size / batch : 0;
  nb_tensor **rows = malloc((size_t)(per + 1) * sizeof *rows);
  if (!rows) return nbcore_fail(t->c, NB_NOMEM, "jacobian: out of memory");
  bool was_recording = t->recording;
  t->recording = false; /* the seeds and the stacking are not part of the taped function */
  nb_scope_begin(t->c);
  nb_code code = NB_OK;
  for (int64_t j = 0; j < per && !code; j++) {
    nb_tensor *seed = nbad_one_hot_rows(t->c, target, batch, per, j);
    code = seed ? nbad_tape_run(t, &target, 1, &source, 1, &seed, &rows[j]) : nb_status(t->c);
    if (!code && !rows[j]) rows[j] = nb_zeros_like(t->c, source);
    /* flat ([batch, -1] for the batch Jacobian): a rank-8 source still stacks */
    if (!code) rows[j] = nb_reshape(t->c, rows[j], (const int64_t[]){axis ? batch : -1, -1}, axis + 1);
  }
  if (!code && per > 0) *out = nb_reshape(t->c, nb_pack(t->c, rows, (int)per, axis), shape, rank);
  if (!code && per == 0) *out = nb_tensor_from(t->c, source->dtype, rank, shape, NULL);
  code = code ? code : nb_status(t->c);
  nb_scope_end(t->c, out, 1);
  t->recording = was_recording;
  free(rows);
  return code;
}

/* Whether the tape's mode, or in AUTO the sizes, ask for forward mode: fewer elements
   in a source row (the n columns, one replay each) than in a target row (the m rows). */
static bool forward_mode(const nb_tape *t, const nb_tensor *target, const nb_tensor *source, int64_t batch) {
  if (t->jacobian_mode != NB_JACOBIAN_MODE_AUTO) return t->jacobian_mode == NB_JACOBIAN_MODE_FORWARD;
  return batch > 0 && source->size / batch < target->size / batch;
}

/* Forward mode when chosen; else one batched backward pass when it fits, else one pass
   per element of a target row. Either way a one-shot tape is spent. */
static nb_code jacobian(nb_tape *t, nb_tensor *target, nb_tensor *source, int64_t batch, const int64_t *shape, int rank,
                        nb_tensor **out) {
  nb_code code;
  if (forward_mode(t, target, source, batch))
    code = nbad_tape_jacobian_forward(t, target, source, batch, shape, rank, out);
  else if (batch > 0 && batched_pass_fits(t, target->size / batch, target->rank))
    code = jacobian_batched(t, target, source, batch, shape, rank, out);
  else
    code = jacobian_rows(t, target, source, batch, batch > 1, shape, rank, out);
  nbad_tape_spend(t);
  return code;
}

/* shape = target's dims then source's, skipping source's first `skip` (its batch dim). */
static void join_shapes(int64_t *shape, const nb_tensor *target, const nb_tensor *source, int skip) {
  memcpy(shape, target->shape, (size_t)target->rank * sizeof *shape);
  memcpy(shape + target->rank, source->shape + skip, (size_t)(source->rank - skip) * sizeof *shape);
}

static nb_code check_jacobian(nb_tape *t, const char *fn, nb_tensor *target, nb_tensor *source, nb_tensor **out) {
  if (!t) return NB_INVALID;
  if (!out) return nbcore_fail(t->c, NB_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  t->last_path = NB_JACOBIAN_LOOP;
  if (!nbop_live(t->c)) return nb_status(t->c);
  if (!t->active) return nbcore_fail(t->c, NB_INVALID, "%s: the tape was ended", fn);
  nb_code busy = nbad_tape_check_idle(t, fn);
  if (busy) return busy;
  if (!target || !source || !target->buf || !source->buf)
    return nbcore_fail(t->c, NB_INVALID, "%s: target and source must be concrete tensors", fn);
  if (!nbcore_is_float(target->dtype) || !nbcore_is_float(source->dtype))
    return nbcore_fail(t->c, NB_DTYPE, "%s: target and source must be float, got %s and %s", fn,
                       nb_dtype_name(target->dtype), nb_dtype_name(source->dtype));
  if (t->used && !t->persistent) return nbcore_fail(t->c, NB_INVALID, "%s: the tape was used already", fn);
  return NB_OK;
}

/* d target / d source: forward mode (jacobian_forward.c) when source has fewer elements,
   else one batched backward pass when the batched tensors fit, else one pass per element
   of target. */
nb_code nb_tape_jacobian(nb_tape *t, nb_tensor *target, nb_tensor *source, nb_tensor **out) {
  nb_code code = check_jacobian(t, "nb_tape_jacobian", target, source, out);
  if (code) return code;
  int rank = target->rank + source->rank;
  if (rank > NB_MAX_RANK)
    return nbcore_fail(t->c, NB_SHAPE, "nb_tape_jacobian: the Jacobian's rank %d exceeds %d", rank, NB_MAX_RANK);
  int64_t shape[NB_MAX_RANK];
  join_shapes(shape, target, source, 0);
  return jacobian(t, target, source, 1, shape, rank, out);
}

/* tf's batch_jacobian: row b of target depends on row b of source only, so a seed set at
   element j of every row gives all rows' j-th Jacobian rows at once: target.size / batch
   seeds instead of target.size, in one batched pass. */
nb_code nb_tape_batch_jacobian(nb_tape *t, nb_tensor *target, nb_tensor *source, nb_tensor **out) {
  nb_code code = check_jacobian(t, "nb_tape_batch_jacobian", target, source, out);
  if (code) return code;
  if (target->rank < 1 || source->rank < 1 || target->shape[0] != source->shape[0])
    return nbcore_fail(t->c, NB_SHAPE,
                       "nb_tape_batch_jacobian: target %s and source %s need the same first (batch) dim",
                       nbop_tstr(target), nbop_tstr(source));
  int rank = target->rank + source->rank - 1;
  if (rank > NB_MAX_RANK)
    return nbcore_fail(t->c, NB_SHAPE, "nb_tape_batch_jacobian: the result's rank %d exceeds %d", rank, NB_MAX_RANK);
  int64_t shape[NB_MAX_RANK];
  join_shapes(shape, target, source, 1);
  return jacobian(t, target, source, target->shape[0], shape, rank, out);
}

nb_jacobian_path nb_tape_jacobian_path(const nb_tape *t) { return t ? t->last_path : NB_JACOBIAN_LOOP; }

nb_code nb_tape_set_jacobian_mode(nb_tape *t, nb_jacobian_mode mode) {
  if (!t) return NB_INVALID;
  if (mode != NB_JACOBIAN_MODE_AUTO && mode != NB_JACOBIAN_MODE_FORWARD && mode != NB_JACOBIAN_MODE_REVERSE)
    return nbcore_fail(t->c, NB_INVALID, "nb_tape_set_jacobian_mode: %d is no nb_jacobian_mode", (int)mode);
  t->jacobian_mode = mode;
  return NB_OK;
}
