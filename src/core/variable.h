/* Internal variables: a named value that outlives every context scope. Not public API. */
#ifndef NBCORE_VARIABLE_H
#define NBCORE_VARIABLE_H

#include "core.h"

struct nb_variable {
  atomic_int refs; /* the user's handle, plus one per graph whose nodes use it */
  bool freed;      /* nb_variable_free ran: the value is gone, graphs still refer to it */
  bool trainable;
  nb_dtype dtype;
  int rank;
  int64_t shape[NB_MAX_RANK];
  int64_t size;
  nbcore_buffer *buf; /* the current value; NULL once freed */
  uint64_t id;        /* the tensor id every eager read carries (tapes key by it) */
  char *name;
};

/* A variable holding buf (taken over) with shape and dtype; NULL when out of memory. */
nb_variable *nbcore_variable_make(nb_dtype t, int rank, const int64_t *shape, nbcore_buffer *buf, bool trainable,
                                  const char *name);
void nbcore_variable_retain(nb_variable *v);
void nbcore_variable_release(nb_variable *v);
/* Makes v's buffer v's alone before an in-place write (copy-on-write): when anything else
   holds it (a read handle, a tape, a session value) v moves to a new buffer from c's pool,
   with the old contents when keep is set, and the holders keep seeing the old value.
   Returns the data to write, NULL when out of memory (c's status set). */
void *nbcore_variable_writable(nb_ctx *c, nb_variable *v, bool keep);
/* Makes buf (taken over; v's dtype and byte size) v's value, releasing the old buffer to c's
   pool; holders of the old buffer keep seeing the old value. */
void nbcore_variable_adopt(nb_ctx *c, nb_variable *v, nbcore_buffer *buf);
/* An eager handle in c's scope sharing v's buffer, under v's id (no tape sees it). */
nb_tensor *nbcore_variable_handle(nb_ctx *c, nb_variable *v);
/* Makes out (an op's output, allocated by dispatch) share v's buffer instead. */
void nbcore_variable_share_into(nb_ctx *c, nb_tensor *out, nb_variable *v);
/* Whether x has v's dtype and a shape compatible with v's (unknown dims match anything). */
bool nbcore_variable_accepts(const nb_variable *v, const nb_tensor *x);
/* The pointer carried in an op's int attr, and back. */
int64_t nbcore_variable_bits(const nb_variable *v);
nb_variable *nbcore_variable_from_bits(int64_t bits);

/* What a checkpoint (src/io) needs of an optimizer, whose state src/train, a later layer,
   defines: an optimizer's struct begins with a pointer to these functions, as TF's
   optimizers are Trackable objects a checkpoint asks for their variables. */
typedef struct nbcore_optim_state {
  /* The names of o's slots, in its kernels' order; *n gets their count. */
  const char *const *(*slot_names)(const nb_optimizer *o, int *n);
  /* var's slot `name`, NULL while var has none (nb_optimizer_slot). */
  nb_variable *(*slot)(const nb_optimizer *o, const nb_variable *var, const char *name);
  /* The step counter's value, 0 before the first update (nb_optimizer_iterations). */
  int64_t (*iterations)(const nb_optimizer *o);
  /* o's step counter (int64 scalar), made (0) when o has none yet; NULL when out of
     memory (c's status set). */
  nb_variable *(*step_variable)(nb_optimizer *o, nb_ctx *c);
  /* var's slots (as many as slot_names gives), made (zeros) when var has none yet; NULL
     when out of memory (c's status set). The array is o's. */
  nb_variable *const *(*slots)(nb_optimizer *o, nb_ctx *c, nb_variable *var);
} nbcore_optim_state;
/* o's state functions, which its struct's first member points to. */
static inline const nbcore_optim_state *nbcore_optim_state_of(const nb_optimizer *o) {
  return *(const nbcore_optim_state *const *)(const void *)o;
}

#endif
