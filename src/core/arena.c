/* Bump arenas (names, attrs and lists of graphs and tapes) and array growth. */
#include "core.h"

#include <stdint.h>
#include <stdlib.h>

#define NBCORE_ARENA_BLOCK (64 * 1024)

struct nbcore_arena_block {
  nbcore_arena_block *next;
  size_t used, cap;
  _Alignas(16) char data[];
};

/* Allocates from the cursor block, moving on to the next block (kept by a reset) or a new
   one at the end when it is full. */
void *nbcore_arena_alloc(nbcore_arena *a, size_t bytes) {
  bytes = (bytes + 15) & ~(size_t)15;
  while (a->cursor && a->cursor->cap - a->cursor->used < bytes && a->cursor->next) a->cursor = a->cursor->next;
  nbcore_arena_block *b = a->cursor;
  if (!b || b->cap - b->used < bytes) {
    size_t cap = bytes > NBCORE_ARENA_BLOCK ? bytes : NBCORE_ARENA_BLOCK;
    nbcore_arena_block *fresh = malloc(sizeof *fresh + cap);
    if (!fresh) return NULL;
    *fresh = (nbcore_arena_block){NULL, 0, cap};
    if (b)
      b->next = fresh;
    else
      a->first = fresh;
    a->cursor = b = fresh;
  }
  void *p = b->data + b->used;
  b->used += bytes;
  return p;
}

char *nbcore_arena_strdup(nbcore_arena *a, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = nbcore_arena_alloc(a, n);
  if (d) memcpy(d, s, n);
  return d;
}

void nbcore_arena_reset(nbcore_arena *a) {
  for (nbcore_arena_block *b = a->first; b; b = b->next) b->used = 0;
  a->cursor = a->first;
}

void nbcore_arena_free(nbcore_arena *a) {
  while (a->first) {
    nbcore_arena_block *b = a->first;
    a->first = b->next;
    free(b);
  }
  a->cursor = NULL;
}

bool nbcore_grow_array(void **arr, int32_t *cap, int32_t need, size_t elem) {
  if (need <= *cap) return true;
  if (need > INT32_MAX / 2) return false; /* doubling past it would overflow n */
  int32_t n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  if ((size_t)n > SIZE_MAX / elem) return false;
  void *p = realloc(*arr, (size_t)n * elem);
  if (!p) return false;
  *arr = p;
  *cap = n;
  return true;
}
