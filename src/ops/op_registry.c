/* The op registry: every family's table, interned by name once, then the ops users
   register (nb_register_op). Lookups take no lock: an entry is published, complete, with
   a release store, and never changes or goes away after. Layers above reserve names of
   types that are not ops here (composite ops), which no op may then take. */
#include "op.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define NBOP_HASH_SLOTS 1024 /* power of two, at least twice NBOP_MAX_OPS */

static const nbop_def *_Atomic ops_by_id[NBOP_MAX_OPS];
static atomic_int nops;
static const nbop_def *_Atomic hash_slots[NBOP_HASH_SLOTS];
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t add_lock = PTHREAD_MUTEX_INITIALIZER; /* one writer at a time */

static const char **reserved; /* under add_lock */
static int32_t nreserved, reserved_cap;

static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  while (*s) h = (h ^ (uint8_t)*s++) * 16777619u;
  return h;
}

static const nbop_def *slot_at(uint32_t i) { return atomic_load_explicit(&hash_slots[i], memory_order_acquire); }

static bool is_reserved(const char *name) {
  for (int32_t i = 0; i < nreserved; i++)
    if (strcmp(reserved[i], name) == 0) return true;
  return false;
}

/* The free hash slot for name, or -1 when an op or a reservation holds name. Callers
   hold add_lock or build the registry. */
static int64_t free_slot(const char *name) {
  if (is_reserved(name)) return -1;
  uint32_t i = name_hash(name) & (NBOP_HASH_SLOTS - 1);
  for (const nbop_def *d; (d = slot_at(i)); i = (i + 1) & (NBOP_HASH_SLOTS - 1))
    if (strcmp(d->name, name) == 0) return -1;
  return i;
}

static void publish(nbop_def *def, int64_t slot) {
  int id = atomic_load_explicit(&nops, memory_order_relaxed);
  def->id = id;
  atomic_store_explicit(&ops_by_id[id], def, memory_order_release);
  atomic_store_explicit(&nops, id + 1, memory_order_release);
  atomic_store_explicit(&hash_slots[slot], def, memory_order_release);
}

/* The tables are ours, so a duplicate name or an overfull registry is a bug here,
   not a user error. */
static void intern(nbop_def *def) {
  assert(atomic_load(&nops) < NBOP_MAX_OPS);
  int64_t slot = free_slot(def->name);
  assert(slot >= 0);
  publish(def, slot);
}

/* Ops with ids below this are nabla's own; the rest were added by nb_register_op. */
static int nbuiltin;

static void registry_build(void) {
  nbop_family (*const families[])(void) = {
      nbop_math_family,         nbop_reduce_family,        nbop_linalg_family,     nbop_array_family,
      nbop_slicing_family,      nbop_custom_family,        nbop_nn_family,         nbop_variable_family,
      nbop_training_family,     nbop_norm_family,          nbop_random_family,     nbop_conv_family,
      nbop_control_flow_family, nbop_host_callback_family, nbop_collective_family, nbop_fused_family};
  for (size_t f = 0; f < sizeof families / sizeof *families; f++) {
    nbop_family fam = families[f]();
    for (int i = 0; i < fam.n; i++) intern(&fam.defs[i]);
  }
  nbuiltin = atomic_load(&nops);
}

bool nbop_is_builtin(const nbop_def *def) {
  nbop_registry_init();
  return def->id < nbuiltin;
}

void nbop_registry_init(void) { pthread_once(&registry_once, registry_build); }

nb_code nbop_add(nbop_def *def) {
  nbop_registry_init();
  pthread_mutex_lock(&add_lock);
  int64_t slot = free_slot(def->name);
  nb_code code = slot < 0 ? NB_INVALID : atomic_load(&nops) >= NBOP_MAX_OPS ? NB_NOMEM : NB_OK;
  if (!code) publish(def, slot);
  pthread_mutex_unlock(&add_lock);
  return code;
}

nb_code nbop_reserve_name(const char *name) {
  nbop_registry_init();
  pthread_mutex_lock(&add_lock);
  nb_code code = free_slot(name) < 0                                                                     ? NB_INVALID
                 : nbcore_grow_array((void **)&reserved, &reserved_cap, nreserved + 1, sizeof *reserved) ? NB_OK
                                                                                                         : NB_NOMEM;
  if (!code) reserved[nreserved++] = name;
  pthread_mutex_unlock(&add_lock);
  return code;
}

const nbop_def *nbop_lookup(const char *type) {
  nbop_registry_init();
  uint32_t i = name_hash(type) & (NBOP_HASH_SLOTS - 1);
  for (const nbop_def *d; (d = slot_at(i)); i = (i + 1) & (NBOP_HASH_SLOTS - 1))
    if (strcmp(d->name, type) == 0) return d;
  return NULL;
}

int nbop_count(void) {
  nbop_registry_init();
  return atomic_load_explicit(&nops, memory_order_acquire);
}

const nbop_def *nbop_by_id(int id) {
  return id >= 0 && id < nbop_count() ? atomic_load_explicit(&ops_by_id[id], memory_order_acquire) : NULL;
}
