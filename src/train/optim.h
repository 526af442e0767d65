/* Internal: what checkpoints (src/io/checkpoint.c) need of an optimizer's state. */
#ifndef NB_OPTIM_H
#define NB_OPTIM_H

#include "../core/variable.h"

/* The names of o's slots, in its kernels' order; *n gets their count. */
const char *const *nb_optim_slot_names(const nb_optimizer *o, int *n);
/* o's step counter (int64 scalar), made (0) when o has none yet; NULL when out of memory
   (c's status set). */
nb_variable *nb_optim_step_variable(nb_optimizer *o, nb_ctx *c);
/* var's slots (as many as nb_optim_slot_names gives), made (zeros) when var has none yet;
   NULL when out of memory (c's status set). The array is o's. */
nb_variable *const *nb_optim_slots(nb_optimizer *o, nb_ctx *c, nb_variable *var);

#endif
