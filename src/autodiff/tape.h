/* The eager tape's layout, shared by tape.c (recording and the backward pass) and
   jacobian.c (Jacobians built from batched backward passes). */
#ifndef NBAD_TAPE_H
#define NBAD_TAPE_H

#include "autodiff.h"

typedef struct tape_slot {
  uint64_t id;
  nbcore_buffer *buf;   /* kept data, or NULL when the gradient reads only the shape */
  const int64_t *shape; /* rank dims, in the tape's arena */
  int32_t value;        /* the tape's number for the tensor (its gradient's index in the
                              backward pass): an output's own; an input's when the tape
                              tracked it (it needs a gradient); -1 otherwise */
  uint8_t dtype, rank;
} tape_slot;

typedef struct tape_entry {
  const nbop_def *def;
  nbop_attrval *attr; /* in the tape's arena; NULL without attrs */
  int32_t slot0, nin, nout;
} tape_entry;

/* An open-addressing map from tensor id to value number. A slot is in use when its
   generation is the map's epoch, so clearing is one increment: a reused tape keeps its
   capacity and neither wipes nor regrows its map every step. */
typedef struct id_slot {
  uint64_t id;
  int32_t value;
  uint32_t gen;
} id_slot;

typedef struct output_id {
  uint64_t id;
  int32_t value;
} output_id;

/* Called during a backward pass with source's gradient (its index among the sources) as
   soon as no entry left to run can add to it: src/dist starts reducing it across processes
   while the pass goes on. grad belongs to the pass; the hook only reads it. */
typedef void (*nbad_ready_fn)(void *user, int source, const nb_tensor *grad);

typedef struct id_map {
  id_slot *slots; /* one array: a probe touches one cache line */
  uint32_t cap, n, epoch;
} id_map;

struct nb_tape {
  nb_ctx *c;
  bool active, persistent, recording, used, unconnected_zero;
  bool last_pass;      /* the running backward pass is the tape's last: it frees saved data as it goes */
  bool running;        /* a backward pass of this tape is under way */
  bool watch_accessed; /* watches trainable variables read while it records (TF's default) */
  id_map tracked;      /* watched ids and outputs of recorded ops -> value numbers */
  int32_t nvalues;     /* value numbers given so far */
  /* Recorded outputs by increasing id (ids are handed out in order): appending costs no
     hashing and no cache miss, and a lookup that misses the map bisects it. Most outputs
     are read only as the newest output (last_out) or never again. */
  output_id *outputs;
  int32_t noutputs, outputs_cap;
  uint64_t last_out;  /* the newest recorded output: most ops read it (a chain) */
  int32_t last_value; /* and its value number */
  /* During a backward pass, per value number: the accumulated gradient, and whether it is
     a source (its gradient is an answer, not consumed). Dense arrays, not maps: the pass
     reaches each gradient by the slot's number, with no hashing. */
  nb_tensor **grads;
  bool *wanted;
  int32_t grads_cap;
  nb_variable **vars; /* the variables it watches, each retained once, by increasing id */
  int32_t nvars, vars_cap;
  tape_entry *entries;
  int32_t nentries, entries_cap;
  tape_slot *slots;
  int32_t nslots, slots_cap;
  nbcore_arena arena; /* attr values and lists */
  nb_tensor **buf;    /* backward scratch: handles of one entry */
  bool *needs;
  nb_tensor *views; /* borrowed views of one entry's saved tensors */
  int32_t buf_cap;
  int64_t batch;              /* vectorized Jacobian pass: every gradient has this leading dim; 0 otherwise */
  int32_t seed_looped;        /* entries that pass ran once per seed (not batchable) */
  nb_jacobian_path last_path; /* how the last Jacobian ran */
  nb_jacobian_mode jacobian_mode;
  nb_tape *next_spare;
  nbad_ready_fn ready_fn; /* NULL: no hook */
  void *ready_user;
  int32_t *ready_at;    /* during a hooked pass, per source: the entry after which its gradient is final (-1: none) */
  int32_t *ready_value; /* and its value number */
  int ready_n;
};

/* One backward pass: out[i] = d(sum of targets, weighted by output_grads)/d sources[i];
   with t->batch set, every gradient carries the leading seed dim. */
nb_code nbad_tape_run(nb_tape *t, nb_tensor *const *targets, int nt, nb_tensor *const *sources, int ns,
                      nb_tensor *const *output_grads, nb_tensor **out);
/* Sets (fn NULL: clears) the hook of t's next backward passes. */
void nbad_tape_set_ready_hook(nb_tape *t, nbad_ready_fn fn, void *user);
/* A one-shot tape's records are spent after one gradient computation: frees them. */
void nbad_tape_spend(nb_tape *t);
/* The value number t gave the tensor of id (watched, or a recorded output), -1 when none. */
int32_t nbad_tape_value(const nb_tape *t, uint64_t id);
/* g itself when the running entry made it (a live handle of the scope begun at slot
   fresh_from) and kept[0..nkept) does not hold it already, else a handle of t's own for
   g's value: a result the tape alone holds. NULL when out of memory. */
nb_tensor *nbad_tape_take_or_own(nb_tape *t, nb_tensor *g, uint32_t fresh_from, nb_tensor *const *kept, int nkept);
/* NB_NO_GRADIENT for a reached entry of op def without a gradient, as TF words it. */
nb_code nbad_tape_no_gradient(const nb_tape *t, const nbop_def *def);
/* NB_INVALID naming fn while t's own backward pass runs (a gradient function called fn). */
nb_code nbad_tape_check_idle(const nb_tape *t, const char *fn);
/* A float tensor like `like`, zeros but for element j of each of its `batch` rows (of
   `per` elements): a Jacobian's seed (jacobian.c). */
nb_tensor *nbad_one_hot_rows(nb_ctx *c, nb_tensor *like, int64_t batch, int64_t per, int64_t j);
/* The Jacobian by forward mode (jacobian_forward.c): t's records replayed once per element
   j of a source row, the tangent one-hot at j in each of `batch` rows of source, giving
   the target's tangents as column j; *out shaped shape (rank). */
nb_code nbad_tape_jacobian_forward(nb_tape *t, nb_tensor *target, nb_tensor *source, int64_t batch,
                                   const int64_t *shape, int rank, nb_tensor **out);

#endif
