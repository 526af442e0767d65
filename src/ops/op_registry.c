/* The op registry: every family's table, interned by name once, read-only after. */
#include "op.h"

#include <assert.h>
#include <pthread.h>
#include <string.h>

#define NB_HASH_SLOTS 1024 /* power of two, at least twice NB_MAX_OPS */

static const nb_op_def *ops_by_id[NB_MAX_OPS];
static int nops;
static const nb_op_def *hash_slots[NB_HASH_SLOTS];
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;

static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  while (*s) h = (h ^ (uint8_t)*s++) * 16777619u;
  return h;
}

/* The tables are ours, so a duplicate name or an overfull registry is a bug here,
   not a user error. */
static void intern(nb_op_def *def) {
  assert(nops < NB_MAX_OPS);
  uint32_t i = name_hash(def->name) & (NB_HASH_SLOTS - 1);
  for (; hash_slots[i]; i = (i + 1) & (NB_HASH_SLOTS - 1)) assert(strcmp(hash_slots[i]->name, def->name) != 0);
  hash_slots[i] = def;
  def->id = nops;
  ops_by_id[nops++] = def;
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

const nb_op_def *nb_op_lookup(const char *type) {
  nb_registry_init();
  uint32_t i = name_hash(type) & (NB_HASH_SLOTS - 1);
  for (; hash_slots[i]; i = (i + 1) & (NB_HASH_SLOTS - 1))
    if (strcmp(hash_slots[i]->name, type) == 0) return hash_slots[i];
  return NULL;
}

int nb_op_count(void) {
  nb_registry_init();
  return nops;
}

const nb_op_def *nb_op_by_id(int id) {
  nb_registry_init();
  return id >= 0 && id < nops ? ops_by_id[id] : NULL;
}
