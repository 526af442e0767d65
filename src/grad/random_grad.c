/* The stateless random ops have no gradient (TF: ops.NotDifferentiable): their outputs
   depend only on a shape and a seed, both integers. Dropout and the initializers are
   composites of public ops, differentiated through those. */
#include "grad.h"

void nb_register_random_grads(void) {
  nb_register_builtin("StatelessRandomUniform", NULL);
  nb_register_builtin("StatelessRandomNormal", NULL);
  nb_register_builtin("StatelessTruncatedNormal", NULL);
}
