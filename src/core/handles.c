/* Handle memory. A released handle is never returned to malloc: it waits in a queue
   (its context's; the process's once the context is gone, or for detached handles)
   marked NBCORE_HANDLE_POOLED, so a stale pointer to it (a second nb_tensor_free, a free
   after nb_ctx_free, an op given it) reads a valid released handle instead of freed
   memory. Queues reuse their oldest handle, and only past a quarantine of recent
   releases, so a stale pointer is still recognisable as released for a while. The
   memory kept is that of the most handles ever alive at once (160 bytes each on 64-bit
   targets). */
#include "core.h"

#include <pthread.h>
#include <stdlib.h>

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static nbcore_handle_queue shared; /* detached handles and those of ended contexts */

nb_tensor *nbcore_handle_take_shared(void) {
  nb_tensor *x = NULL;
  pthread_mutex_lock(&shared_lock);
  if (shared.n > NBCORE_HANDLE_QUARANTINE) { /* then the queue stays nonempty */
    x = shared.head;
    shared.head = x->next_free;
    shared.n--;
  }
  pthread_mutex_unlock(&shared_lock);
  return x ? x : malloc(sizeof *x);
}

void nbcore_handle_put_shared(nb_tensor *x) {
  pthread_mutex_lock(&shared_lock);
  nbcore_handle_put(&shared, x);
  pthread_mutex_unlock(&shared_lock);
}

void nbcore_handle_give_back(nbcore_handle_queue *q) {
  if (!q->head) return;
  pthread_mutex_lock(&shared_lock);
  if (shared.tail)
    shared.tail->next_free = q->head;
  else
    shared.head = q->head;
  shared.tail = q->tail;
  shared.n += q->n;
  pthread_mutex_unlock(&shared_lock);
  *q = (nbcore_handle_queue){NULL, NULL, 0};
}
