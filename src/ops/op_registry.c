/* The op registry: every family's table, interned by name once, then the ops users
   register (nb_register_op). Lookups take no lock: an entry is published, complete, with
   a release store, and never changes or goes away after. */
#include "op.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define NB_HASH_SLOTS 1024 /* power of two, at least twice NB_MAX_OPS */

static const nb_op_def *_Atomic ops_by_id[NB_MAX_OPS];
static atomic_int nops;
static const nb_op_def *_Atomic hash_slots[NB_HASH_SLOTS];
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t add_lock = PTHREAD_MUTEX_INITIALIZER; /* one writer at a time */

static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  while (*s) h = (h ^ (uint8_t)*s++) * 16777619u;
  return h;
}

static const nb_op_def *slot_at(uint32_t i) { return atomic_load_explicit(&hash_slots[i], memory_order_acquire); }

/* The free hash slot for name, or -1 when name is taken. */
static int64_t free_slot(const char *name) {
  uint32_t i = name_hash(name) & (NB_HASH_SLOTS - 1);
  for (const nb_op_def *d; (d = slot_at(i)); i = (i + 1) & (NB_HASH_SLOTS - 1))
    if (strcmp(d->name, name) == 0) return -1;
  return i;
}

static void publish(nb_op_def *def, int64_t slot) {
  int id = atomic_load_explicit(&nops, memory_order_relaxed);
  def->id = id;
  atomic_store_explicit(&ops_by_id[id], def, memory_order_release);
  atomic_store_explicit(&nops, id + 1, memory_order_release);
  atomic_store_explicit(&hash_slots[slot], def, memory_order_release);
}

/* The tables are ours, so a duplicate name or an overfull registry is a bug here,
   not a user error. */
static void intern(nb_op_def *def) {
  assert(atomic_load(&nops) < NB_MAX_OPS);
  int64_t slot = free_slot(def->name);
  assert(slot >= 0);
  publish(def, slot);
}

static void registry_build(void) {
  nb_op_family (*const families[])(void) = {nb_math_family, nb_reduce_family, nb_linalg_family,
                                            nb_array_family, nb_slicing_family, nb_custom_family, nb_nn_family,
                                            nb_variable_family, nb_training_family, nb_norm_family, nb_random_family,
                                            nb_conv_family, nb_control_flow_family, nb_host_callback_family};
  for (size_t f = 0; f < sizeof families / sizeof *families; f++) {
    nb_op_family fam = families[f]();
    for (int i = 0; i < fam.n; i++) intern(&fam.defs[i]);
  }
}

void nb_registry_init(void) { pthread_once(&registry_once, registry_build); }

nb_code nb_op_add(nb_op_def *def) {
  nb_registry_init();
  pthread_mutex_lock(&add_lock);
  int64_t slot = free_slot(def->name);
  nb_code code = slot < 0 ? NB_INVALID : atomic_load(&nops) >= NB_MAX_OPS ? NB_NOMEM : NB_OK;
  if (!code) publish(def, slot);
  pthread_mutex_unlock(&add_lock);
  return code;
}

const nb_op_def *nb_op_lookup(const char *type) {
  nb_registry_init();
  uint32_t i = name_hash(type) & (NB_HASH_SLOTS - 1);
  for (const nb_op_def *d; (d = slot_at(i)); i = (i + 1) & (NB_HASH_SLOTS - 1))
    if (strcmp(d->name, type) == 0) return d;
  return NULL;
}

int nb_op_count(void) {
  nb_registry_init();
  return atomic_load_explicit(&nops, memory_order_acquire);
}

const nb_op_def *nb_op_by_id(int id) {
  return id >= 0 && id < nb_op_count() ? atomic_load_explicit(&ops_by_id[id], memory_order_acquire) : NULL;
}
