/* nb_custom_gradient: runs the user's forward function (unrecorded by tapes), then wraps
   its outputs in a _CustomGradient op whose inputs are those outputs and the function's
   inputs, and whose gradient is the user's function (src/grad/custom_grad.c).
   nb_recompute_grad wraps them the same way in a _RecomputeGrad op, whose gradient reruns
   the function (recompute.c). */
#include "autodiff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs fwd with every tape of c paused: its ops are not what gets differentiated. who
   names the caller in errors. */
static nb_code run_forward(nb_ctx *c, const char *who, nb_custom_fn fwd, void *user, nb_tensor *const *in, int nin,
                           nb_tensor **tmp, int nout) {
  char what[64];
  snprintf(what, sizeof what, "%s: forward function", who);
  c->tapes_paused++; /* tapes the function itself begins are paused too, and stay active */
  nbcore_scope_frame f = nbcore_scope_enter_callback(c);
  nb_code code = fwd(c, in, nin, tmp, nout, user);
  nb_code left = nbcore_scope_leave_callback(c, f, tmp, nout, "%s: the callback", what);
  c->tapes_paused--;
  code = nbcore_callback_code(c, what, code);
  if (!code) code = left;
  for (int i = 0; i < nout && !code; i++)
    if (!tmp[i]) code = nbcore_fail(c, NB_INVALID, "%s: the forward function left output %d NULL", who, i);
  return code;
}

/* Runs fwd unrecorded and wraps its outputs in one node of type def, whose attrs carry
   the function pointer fn_bits (the gradient's or, for _RecomputeGrad, fwd's) and user. */
static nb_code wrap_forward(nb_ctx *c, const char *who, const nbop_def *def, nb_custom_fn fwd, int64_t fn_bits,
                            void *user, nb_tensor *const *in, int nin, nb_tensor **out, int nout) {
  nbad_grad_builtins_init();
  nb_tensor **args = calloc((size_t)(nout + nin), sizeof *args);
  if (!args) return nbcore_fail(c, NB_NOMEM, "%s: out of memory", who);
  nb_scope_begin(c); /* fwd's temporaries go at the end; the inputs it may return stay */
  nb_code code = run_forward(c, who, fwd, user, in, nin, args, nout);
  if (!code) {
    memcpy(args + nout, in, (size_t)nin * sizeof *in);
    nbop_attrval a[NBOP_MAX_ATTRS];
    nbop_attr_defaults(def, a);
    a[NBOP_CUSTOM_NUM_OUTPUTS].i = nout;
    a[NBOP_CUSTOM_GRAD_FN].i = fn_bits;
    a[NBOP_CUSTOM_USER].i = nbcore_bits_of(&user, sizeof user);
    code = nbop_dispatch(c, def, args, nout + nin, a, out, nout);
  }
  nb_scope_end(c, out, code ? 0 : nout);
  free(args);
  return code;
}

/* Clears out and checks the arguments both entry points share. */
static nb_code check_args(nb_ctx *c, const char *who, bool fns, nb_tensor *const *in, int nin, nb_tensor **out,
                          int nout) {
  for (int i = 0; out && i < nout; i++) out[i] = NULL;
  if (c->status) return c->status;
  if (!fns || !out || nout < 1 || nin < 0 || (nin > 0 && !in))
    return nbcore_fail(c, NB_INVALID, "%s: NULL function, arrays, or counts out of range (nin %d, nout %d)", who, nin,
                       nout);
  return NB_OK;
}

nb_code nbad_custom_gradient(nb_ctx *c, const char *who, nb_custom_fn fwd, nb_custom_grad_fn grad, void *user,
                             nb_tensor *const *in, int nin, nb_tensor **out, int nout) {
  if (!c) return NB_INVALID;
  nb_code code = check_args(c, who, fwd && grad, in, nin, out, nout);
  return code ? code
              : wrap_forward(c, who, nbop_custom_gradient_def(), fwd, nbcore_bits_of(&grad, sizeof grad), user, in, nin,
                             out, nout);
}

nb_code nb_custom_gradient(nb_ctx *c, nb_custom_fn fwd, nb_custom_grad_fn grad, void *user, nb_tensor *const *in,
                           int nin, nb_tensor **out, int nout) {
  return nbad_custom_gradient(c, "nb_custom_gradient", fwd, grad, user, in, nin, out, nout);
}

nb_code nb_recompute_grad(nb_ctx *c, nb_custom_fn fn, void *user, nb_tensor *const *in, int nin, nb_tensor **out,
                          int nout) {
  const char *who = "nb_recompute_grad";
  if (!c) return NB_INVALID;
  nb_code code = check_args(c, who, fn != NULL, in, nin, out, nout);
  return code ? code
              : wrap_forward(c, who, nbop_recompute_grad_def(), fn, nbcore_bits_of(&fn, sizeof fn), user, in, nin, out,
                             nout);
}
