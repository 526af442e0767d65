/* The stateless random ops have no gradient (TF: ops.NotDifferentiable): their outputs
   depend only on a shape and a seed, both integers. Dropout and the initializers are
   composites of public ops, differentiated through those. */
#include "grad.h"

void nbg_register_random_grads(void) {
  nbad_register_builtin("StatelessRandomUniform", NULL);
  nbad_register_builtin("StatelessRandomNormal", NULL);
  nbad_register_builtin("StatelessTruncatedNormal", NULL);
}
