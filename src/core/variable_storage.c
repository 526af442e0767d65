/* Variable storage: ownership, copy-on-write, and the handles eager reads return. */
#include "variable.h"

#include <stdlib.h>
#include <string.h>

nb_variable *nbcore_variable_make(nb_dtype t, int rank, const int64_t *shape, nbcore_buffer *buf, bool trainable,
                                  const char *name) {
  if (!name) name = "Variable";
  size_t len = strlen(name) + 1;
  nb_variable *v = calloc(1, sizeof *v);
  char *copy = malloc(len);
  if (!v || !copy) {
    free(v);
    free(copy);
    nbcore_buffer_release(NULL, buf);
    return NULL;
  }
  atomic_init(&v->refs, 1);
  v->trainable = trainable;
  v->dtype = t;
  v->rank = rank;
  if (rank > 0) memcpy(v->shape, shape, (size_t)rank * sizeof *shape);
  v->size = nbcore_shape_size(rank, shape);
  v->buf = buf;
  v->id = nbcore_next_tensor_id();
  v->name = memcpy(copy, name, len);
  return v;
}

void nbcore_variable_retain(nb_variable *v) { atomic_fetch_add_explicit(&v->refs, 1, memory_order_relaxed); }

void nbcore_variable_release(nb_variable *v) {
  if (!v || atomic_fetch_sub_explicit(&v->refs, 1, memory_order_acq_rel) != 1) return;
  nbcore_buffer_release(NULL, v->buf);
  free(v->name);
  free(v);
}

void *nbcore_variable_writable(nb_ctx *c, nb_variable *v, bool keep) {
  if (nbcore_buffer_exclusive(v->buf)) return v->buf->data;
  size_t bytes = (size_t)v->size * nb_dtype_size(v->dtype);
  nbcore_buffer *b = nbcore_buffer_new(c, bytes);
  if (!b) {
    nbcore_fail(c, NB_NOMEM, "out of memory copying variable '%s' (%zu bytes)", v->name, bytes);
    return NULL;
  }
  if (keep && bytes) memcpy(b->data, v->buf->data, bytes);
  nbcore_buffer_release(c, v->buf);
  v->buf = b;
  return b->data;
}

void nbcore_variable_adopt(nb_ctx *c, nb_variable *v, nbcore_buffer *buf) {
  nbcore_buffer_release(c, v->buf);
  v->buf = buf;
}

nb_tensor *nbcore_variable_handle(nb_ctx *c, nb_variable *v) {
  nbcore_buffer_retain(v->buf);
  nb_tensor *x = nbcore_handle_new(c, v->dtype, v->rank, v->shape, v->buf);
  if (x) x->id = v->id;
  return x;
}

void nbcore_variable_share_into(nb_ctx *c, nb_tensor *out, nb_variable *v) {
  nbcore_buffer_retain(v->buf);
  nbcore_buffer_release(c, out->buf);
  out->buf = v->buf;
}

bool nbcore_variable_accepts(const nb_variable *v, const nb_tensor *x) {
  if (x->dtype != v->dtype) return false;
  if (x->rank < 0) return true;
  if (x->rank != v->rank) return false;
  for (int i = 0; i < v->rank; i++)
    if (x->shape[i] >= 0 && x->shape[i] != v->shape[i]) return false;
  return true;
}

/* Pointers travel through int attrs: the bits are copied, not converted. */
int64_t nbcore_variable_bits(const nb_variable *v) { return nbcore_bits_of(&v, sizeof v); }

nb_variable *nbcore_variable_from_bits(int64_t bits) {
  nb_variable *v;
  memcpy(&v, &bits, sizeof v);
  return v;
}
