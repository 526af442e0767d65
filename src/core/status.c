/* Status codes, dtype facts, sticky error messages. */
#include "core.h"

#include <stdio.h>
#include <string.h>

const char *nb_code_name(nb_code code) {
  static const char *const names[] = {"NB_OK",        "NB_INVALID",       "NB_SHAPE",   "NB_DTYPE",
                                      "NB_NOT_FOUND", "NB_NO_GRADIENT",   "NB_NOMEM",   "NB_IO",
                                      "NB_CORRUPT",   "NB_UNIMPLEMENTED", "NB_INTERNAL"};
  return (unsigned)code < sizeof names / sizeof *names ? names[code] : "NBCORE_UNKNOWN_CODE";
}

const char *nb_dtype_name(nb_dtype t) {
  static const char *const names[] = {"float32", "float64", "int32", "int64", "bool"};
  return (unsigned)t < sizeof names / sizeof *names ? names[t] : "invalid dtype";
}

size_t nb_dtype_size(nb_dtype t) {
  static const size_t sizes[] = {4, 8, 4, 8, 1};
  return (unsigned)t < sizeof sizes / sizeof *sizes ? sizes[t] : 0;
}

const char *nb_version(void) { return "0.1.0"; }

nb_code nb_status(const nb_ctx *c) { return c ? c->status : NB_INVALID; }

const char *nb_error(const nb_ctx *c) {
  if (!c) return "NULL context";
  return c->error;
}

void nb_clear_error(nb_ctx *c) {
  if (!c) return;
  c->status = NB_OK;
  c->error[0] = '\0';
}

/* Records the first error only: later ones are usually consequences of it. */
nb_code nbcore_vfail(nb_ctx *c, nb_code code, const char *prefix, const char *fmt, va_list ap) {
  if (!c || c->status != NB_OK) return code;
  c->status = code;
  int n = snprintf(c->error, NBCORE_ERR_CAP, "%s", prefix ? prefix : "");
  if (n < 0 || n >= NBCORE_ERR_CAP) return code;
  vsnprintf(c->error + n, NBCORE_ERR_CAP - (size_t)n, fmt, ap);
  return code;
}

nb_code nbcore_fail(nb_ctx *c, nb_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  nbcore_vfail(c, code, NULL, fmt, ap);
  va_end(ap);
  return code;
}

nb_code nb_set_error(nb_ctx *c, nb_code code, const char *fmt, ...) {
  if (!c || !fmt) return code;
  va_list ap;
  va_start(ap, fmt);
  nbcore_vfail(c, code, NULL, fmt, ap);
  va_end(ap);
  return code;
}

nb_code nbcore_callback_code(nb_ctx *c, const char *who, nb_code code) {
  if (!code) return c->status;
  if (!c->status)
    nbcore_fail(c, code, "%s: the callback returned %s without setting an error message", who, nb_code_name(code));
  return code;
}
