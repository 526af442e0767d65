/* Variable storage: ownership, copy-on-write, and the handles eager reads return. */
#include "variable.h"

#include <stdlib.h>
#include <string.h>

nb_variable *nb_variable_make(nb_dtype t, int rank, const int64_t *shape, nb_buffer *buf, bool trainable,
                              const char *name) {
  if (!name) name = "Variable";
  size_t len = strlen(name) + 1;
  nb_variable *v = calloc(1, sizeof *v);
  char *copy = malloc(len);
  if (!v || !copy) {
    free(v);
    free(copy);
    nb_buffer_release(NULL, buf);
    return NULL;
  }
  atomic_init(&v->refs, 1);
  v->trainable = trainable;
  v->dtype = t;
  v->rank = rank;
  if (rank > 0) memcpy(v->shape, shape, (size_t)rank * sizeof *shape);
  v->size = nb_shape_size(rank, shape);
  v->buf = buf;
  v->id = nb_next_tensor_id();
  v->name = memcpy(copy, name, len);
  return v;
}

void nb_variable_retain(nb_variable *v) { atomic_fetch_add_explicit(&v->refs, 1, memory_order_relaxed); }

void nb_variable_release(nb_variable *v) {
  if (!v || atomic_fetch_sub_explicit(&v->refs, 1, memory_order_acq_rel) != 1) return;
  nb_buffer_release(NULL, v->buf);
  free(v->name);
  free(v);
}

void *nb_variable_writable(nb_ctx *c, nb_variable *v, bool keep) {
  if (nb_buffer_exclusive(v->buf)) return v->buf->data;
  size_t bytes = (size_t)v->size * nb_dtype_size(v->dtype);
  nb_buffer *b = nb_buffer_new(c, bytes);
  if (!b) {
    nb_fail(c, NB_NOMEM, "out of memory copying variable '%s' (%zu bytes)", v->name, bytes);
    return NULL;
  }
  if (keep && bytes) memcpy(b->data, v->buf->data, bytes);
  nb_buffer_release(c, v->buf);
  v->buf = b;
  return b->data;
}

void nb_variable_adopt(nb_ctx *c, nb_variable *v, nb_buffer *buf) {
  nb_buffer_release(c, v->buf);
  v->buf = buf;
}

nb_tensor *nb_variable_handle(nb_ctx *c, nb_variable *v) {
  nb_buffer_retain(v->buf);
  nb_tensor *x = nb_handle_new(c, v->dtype, v->rank, v->shape, v->buf);
  if (x) x->id = v->id;
  return x;
}

void nb_variable_share_into(nb_ctx *c, nb_tensor *out, nb_variable *v) {
  nb_buffer_retain(v->buf);
  nb_buffer_release(c, out->buf);
  out->buf = v->buf;
}

bool nb_variable_accepts(const nb_variable *v, const nb_tensor *x) {
  if (x->dtype != v->dtype) return false;
  if (x->rank < 0) return true;
  if (x->rank != v->rank) return false;
  for (int i = 0; i < v->rank; i++)
    if (x->shape[i] >= 0 && x->shape[i] != v->shape[i]) return false;
  return true;
}

/* Pointers travel through int attrs: the bits are copied, not converted. */
int64_t nb_variable_bits(const nb_variable *v) { return nb_bits_of(&v, sizeof v); }

nb_variable *nb_variable_from_bits(int64_t bits) {
  nb_variable *v;
  memcpy(&v, &bits, sizeof v);
  return v;
}
