/* Op libraries (tf.load_op_library): shared objects whose init registers ops and
   gradients. The handshake runs before any of the library's registration code: the
   library says which NB_ABI_VERSION it was built against, and only a match is initialized
   (with this nabla's version, which it may check too). Libraries stay loaded: the ops
   they registered run their code. */
#include "op.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct loaded_library {
  void *handle;
  nb_code init_code; /* what its init returned (reported again on a later load) */
} loaded_library;

static loaded_library *loaded;
static int32_t nloaded, loaded_cap;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

static const loaded_library *find_loaded(const void *handle) {
  for (int32_t i = 0; i < nloaded; i++)
    if (loaded[i].handle == handle) return &loaded[i];
  return NULL;
}

/* The address of symbol name in handle, as a function of type T (POSIX's dlsym contract). */
#define LIBRARY_FN(T, handle, name) ((T)dlsym(handle, name))

/* The handshake: the library defines both symbols and was built against this ABI; then a
   slot for it is ready and *init is its init. On failure the handle is closed. */
static nb_code handshake(void *handle, const char *path, nb_code (**init)(int)) {
  int (*abi)(void) = LIBRARY_FN(int (*)(void), handle, "nabla_op_library_abi");
  *init = LIBRARY_FN(nb_code(*)(int), handle, "nabla_op_library_init");
  int version = abi ? abi() : 0;
  nb_code code = NB_OK;
  if (!abi || !*init)
    code = nbop_registry_fail(NB_NOT_FOUND, "nb_load_op_library: '%s' is not a nabla op library: it does not define %s",
                              path, abi ? "nabla_op_library_init" : "nabla_op_library_abi");
  else if (version != NB_ABI_VERSION)
    code = nbop_registry_fail(NB_UNIMPLEMENTED,
                              "nb_load_op_library: '%s' was built against nabla op ABI %d; this "
                              "nabla's is %d (rebuild it against this nabla.h)",
                              path, version, NB_ABI_VERSION);
  else if (!nbcore_grow_array((void **)&loaded, &loaded_cap, nloaded + 1, sizeof *loaded))
    code = nbop_registry_fail(NB_NOMEM, "nb_load_op_library: out of memory loading '%s'", path);
  if (code) dlclose(handle);
  return code;
}

/* The message for a failed init, after the registry's own (the registration that failed). */
static nb_code init_failed(const char *path, nb_code code) {
  char why[NBCORE_ERR_CAP];
  snprintf(why, sizeof why, "%s", nb_registry_error());
  return nbop_registry_fail(code, "nb_load_op_library: the init of '%s' failed with %s%s%s", path, nb_code_name(code),
                            *why ? ": " : "", why);
}

/* Runs the init of a library that passed the handshake; it stays loaded whatever the init
   returns (ops it registered before failing run its code). */
static nb_code initialize(void *handle, const char *path, nb_code (*init)(int)) {
  nb_code code = init(NB_ABI_VERSION);
  loaded[nloaded++] = (loaded_library){handle, code};
  return code ? init_failed(path, code) : NB_OK;
}

nb_code nb_load_op_library(const char *path) {
  nbop_registry_clear_error();
  if (!path) return nbop_registry_fail(NB_INVALID, "nb_load_op_library: path is NULL");
  pthread_mutex_lock(&load_lock);
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  const loaded_library *before = handle ? find_loaded(handle) : NULL;
  nb_code (*init)(int) = NULL;
  nb_code code;
  if (!handle) {
    const char *why = dlerror();
    code = nbop_registry_fail(NB_IO, "nb_load_op_library: cannot load '%s': %s", path, why ? why : "unknown error");
  } else if (before) { /* dlopen counted it again: one reference is enough */
    code = before->init_code ? init_failed(path, before->init_code) : NB_OK;
    dlclose(handle);
  } else {
    code = handshake(handle, path, &init);
    if (!code) code = initialize(handle, path, init);
  }
  pthread_mutex_unlock(&load_lock);
  return code;
}
