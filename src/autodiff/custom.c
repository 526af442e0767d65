/* nb_custom_gradient: runs the user's forward function (unrecorded by tapes), then wraps
   its outputs in a _CustomGradient op whose inputs are those outputs and the function's
   inputs, and whose gradient is the user's function (src/grad/custom_grad.c). */
#include "autodiff.h"

#include <stdlib.h>
#include <string.h>

/* Runs fwd with every tape of c paused: its ops are not what gets differentiated. */
static nb_code run_forward(nb_ctx *c, nb_custom_fn fwd, void *user, nb_tensor *const *in, int nin, nb_tensor **tmp,
                           int nout) {
  c->tapes_paused++; /* tapes the function itself begins are paused too, and stay active */
  nb_scope_frame f = nb_scope_enter_callback(c);
  nb_code code = fwd(c, in, nin, tmp, nout, user);
  nb_code left = nb_scope_leave_callback(c, f, tmp, nout, "nb_custom_gradient: forward function: the callback");
  c->tapes_paused--;
  code = nb_callback_code(c, "nb_custom_gradient: forward function", code);
  if (!code) code = left;
  for (int i = 0; i < nout && !code; i++)
    if (!tmp[i]) code = nb_fail(c, NB_INVALID, "nb_custom_gradient: the forward function left output %d NULL", i);
  return code;
}

nb_code nb_custom_gradient(nb_ctx *c, nb_custom_fn fwd, nb_custom_grad_fn grad, void *user, nb_tensor *const *in,
                           int nin, nb_tensor **out, int nout) {
  if (!c) return NB_INVALID;
  for (int i = 0; out && i < nout; i++) out[i] = NULL;
  if (c->status) return c->status;
  if (!fwd || !grad || !out || nout < 1 || nin < 0 || (nin > 0 && !in))
    return nb_fail(c, NB_INVALID, "nb_custom_gradient: NULL function, arrays, or counts out of range");
  nb_grad_builtins_init();
  nb_tensor **args = calloc((size_t)(nout + nin), sizeof *args);
  if (!args) return nb_fail(c, NB_NOMEM, "nb_custom_gradient: out of memory");
  nb_scope_begin(c); /* fwd's temporaries go at the end; the inputs it may return stay */
  nb_code code = run_forward(c, fwd, user, in, nin, args, nout);
  if (!code) {
    memcpy(args + nout, in, (size_t)nin * sizeof *in);
    const nb_op_def *def = nb_custom_gradient_def();
    nb_attrval a[NB_MAX_ATTRS];
    nb_attr_defaults(def, a);
    a[NB_CUSTOM_NUM_OUTPUTS].i = nout;
    a[NB_CUSTOM_GRAD_FN].i = nb_bits_of(&grad, sizeof grad);
    a[NB_CUSTOM_USER].i = nb_bits_of(&user, sizeof user);
    code = nb_dispatch(c, def, args, nout + nin, a, out, nout);
  }
  nb_scope_end(c, out, code ? 0 : nout);
  free(args);
  return code;
}
