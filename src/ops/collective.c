/* Collective ops, TF's: CollectiveReduceV2, CollectiveGatherV2, CollectiveBcastSendV2,
   CollectiveBcastRecvV2 (tensorflow/core/ops/collective_ops.cc) and NcclAllReduce
   (nccl_ops.cc). Every member of a group calls the op; the op returns when all have.
   The members are the devices of this process (threads that set one with
   nb_collective_set_device), met here in a rendezvous keyed by group and instance, or the
   processes of the transport src/dist installs (MPI). Reductions merge in member order,
   so every member gets the same bits. A member that waits longer than the op's timeout
   fails, and so does every member of an instance whose members disagree on dtype, shape
   or kind: an error, never a hang. The gradient rules are in src/grad/collective_grad.c. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "collective.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- merging ------------------------------------------------------------------------------ */

#define MERGE_LOOP(T)                                                     \
  do {                                                                    \
    T *a = acc;                                                           \
    const T *b = x;                                                       \
    switch (m) {                                                          \
      case NBOP_MERGE_ADD:                                                \
        for (int64_t i = 0; i < n; i++) a[i] += b[i];                     \
        break;                                                            \
      case NBOP_MERGE_MUL:                                                \
        for (int64_t i = 0; i < n; i++) a[i] *= b[i];                     \
        break;                                                            \
      case NBOP_MERGE_MIN:                                                \
        for (int64_t i = 0; i < n; i++) a[i] = b[i] < a[i] ? b[i] : a[i]; \
        break;                                                            \
      case NBOP_MERGE_MAX:                                                \
        for (int64_t i = 0; i < n; i++) a[i] = b[i] > a[i] ? b[i] : a[i]; \
        break;                                                            \
    }                                                                     \
  } while (0)

void nbop_merge_into(nbop_merge m, nb_dtype t, void *acc, const void *x, int64_t n) {
  switch (t) {
    case NB_F32: MERGE_LOOP(float); break;
    case NB_F64: MERGE_LOOP(double); break;
    case NB_I32: MERGE_LOOP(int32_t); break;
    case NB_I64: MERGE_LOOP(int64_t); break;
    case NB_BOOL: break; /* validate admits numeric dtypes only */
  }
}

/* A float quotient: when by is a power of two its reciprocal is exact, and x * (1 / by) is
   the same exact quotient rounded once, so it has the division's bits at a fraction of
   its cost (a divide is several times a multiply). */
#define DIVIDE_FLOAT(T)                                    \
  do {                                                     \
    T *d = dst, inv = (T)1 / (T)by;                        \
    const T *x = src;                                      \
    if ((by & (by - 1)) == 0)                              \
      for (int64_t i = 0; i < n; i++) d[i] = x[i] * inv;   \
    else                                                   \
      for (int64_t i = 0; i < n; i++) d[i] = x[i] / (T)by; \
  } while (0)

void nbop_divide_into(nb_dtype t, void *dst, const void *src, int64_t n, int64_t by) {
  switch (t) {
    case NB_F32: DIVIDE_FLOAT(float); break;
    case NB_F64: DIVIDE_FLOAT(double); break;
    case NB_I32:
      for (int64_t i = 0; i < n; i++) ((int32_t *)dst)[i] = ((const int32_t *)src)[i] / (int32_t)by;
      break;
    case NB_I64:
      for (int64_t i = 0; i < n; i++) ((int64_t *)dst)[i] = ((const int64_t *)src)[i] / by;
      break;
    case NB_BOOL: break;
  }
}

void nbop_divide_by(nb_dtype t, void *x, int64_t n, int64_t by) { nbop_divide_into(t, x, x, n, by); }

static bool is_bcast(nbop_coll_kind k) { return k == NBOP_COLL_BCAST_SEND || k == NBOP_COLL_BCAST_RECV; }

static const char *const kind_names[] = {"reduce", "gather", "broadcast send", "broadcast receive"};

bool nbop_coll_matches(const nbop_coll *a, int ia, const nbop_coll *b, int ib, char *err, size_t cap) {
  if (a->kind != b->kind && !(is_bcast(a->kind) && is_bcast(b->kind))) {
    snprintf(err, cap, "member %d runs a %s (%s), member %d a %s (%s)", ia, kind_names[a->kind], a->op, ib,
             kind_names[b->kind], b->op);
    return false;
  }
  if (a->instance_key != b->instance_key || a->group_size != b->group_size) {
    snprintf(err, cap, "member %d runs instance %lld of a group of %lld, member %d instance %lld of a group of %lld",
             ia, (long long)a->instance_key, (long long)a->group_size, ib, (long long)b->instance_key,
             (long long)b->group_size);
    return false;
  }
  if (a->dtype != b->dtype || a->rank != b->rank || memcmp(a->shape, b->shape, (size_t)a->rank * sizeof *a->shape)) {
    snprintf(err, cap, "member %d has %s %s, member %d has %s %s", ia, nb_dtype_name(a->dtype),
             nbop_sstr(a->rank, a->shape), ib, nb_dtype_name(b->dtype), nbop_sstr(b->rank, b->shape));
    return false;
  }
  if (a->kind == NBOP_COLL_REDUCE && (a->merge != b->merge || a->final_div != b->final_div)) {
    snprintf(err, cap, "members %d and %d reduce with different merge_op or final_op", ia, ib);
    return false;
  }
  return true;
}

/* ---- the in-process rendezvous ------------------------------------------------------------
   One slot per instance being met: the members' descriptions by device. The last member
   to arrive runs the collective for all (their output buffers live while they wait), then
   marks the slot done; the last member to leave frees it. A slot that failed (a timeout or
   a mismatch) takes no more members: a later arrival opens a new one. */
typedef struct slot {
  const char *shared_name;
  int64_t group_key, instance_key, group_size;
  int arrived, left;
  bool full, done;
  nb_code failed; /* NB_OK, or why the slot failed: NB_INTERNAL (timeout), NB_INVALID (mismatch) */
  char err[384];
  const nbop_coll **members;
  struct slot *next;
} slot;

static pthread_mutex_t rendezvous_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rendezvous_cond = PTHREAD_COND_INITIALIZER;
static slot *slots; /* under rendezvous_lock */
static _Thread_local int thread_device = -1;
static _Atomic(const nbop_coll_transport *) process_transport;
static _Atomic double default_timeout = 600;

void nb_collective_set_device(int device) { thread_device = device < 0 ? -1 : device; }
int nb_collective_device(void) { return thread_device; }
void nbop_collective_install(const nbop_coll_transport *t) { process_transport = t; }
void nbop_collective_set_default_timeout(double seconds) {
  if (seconds > 0) default_timeout = seconds;
}
double nbop_collective_default_timeout(void) { return default_timeout; }

static bool same_group(const slot *s, const nbop_coll *c) {
  if (!s->shared_name != !c->shared_name) return false;
  return s->shared_name ? strcmp(s->shared_name, c->shared_name) == 0 : s->group_key == c->group_key;
}

/* The slot c's instance is being met in, a new one when none takes members; NULL when out
   of memory. */
static slot *open_slot(const nbop_coll *c) {
  for (slot *s = slots; s; s = s->next)
    if (!s->full && !s->failed && same_group(s, c) && s->instance_key == c->instance_key) return s;
  slot *s = calloc(1, sizeof *s);
  const nbop_coll **members = calloc((size_t)c->group_size, sizeof *members);
  if (!s || !members) {
    free(s);
    free(members);
    return NULL;
  }
  s->members = members;
  s->shared_name = c->shared_name;
  s->group_key = c->group_key;
  s->instance_key = c->instance_key;
  s->group_size = c->group_size;
  s->next = slots;
  slots = s;
  return s;
}

static void unlink_slot(slot *s) {
  for (slot **p = &slots; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  free(s->members);
  free(s);
}

/* Broadcast: the one sender of the group, or -1 (with err) when there is not exactly one. */
static int find_sender(const nbop_coll *const *m, int64_t n, char *err, size_t cap) {
  int sender = -1;
  for (int i = 0; i < n; i++) {
    if (m[i]->kind != NBOP_COLL_BCAST_SEND) continue;
    if (sender >= 0) {
      snprintf(err, cap, "members %d and %d both send the broadcast", sender, i);
      return -1;
    }
    sender = i;
  }
  if (sender < 0) snprintf(err, cap, "no member sends the broadcast");
  return sender;
}

/* Runs the collective of the n members m[0..n) (checked alike) into each one's out. */
static bool run_members(const nbop_coll *const *m, int64_t n, char *err, size_t cap) {
  for (int i = 1; i < n; i++)
    if (!nbop_coll_matches(m[0], 0, m[i], i, err, cap)) return false;
  size_t bytes = (size_t)m[0]->count * nb_dtype_size(m[0]->dtype);
  void *first = m[0]->out;
  switch (m[0]->kind) {
    case NBOP_COLL_REDUCE:
      memcpy(first, m[0]->in, bytes);
      for (int i = 1; i < n; i++) nbop_merge_into(m[0]->merge, m[0]->dtype, first, m[i]->in, m[0]->count);
      if (m[0]->final_div) nbop_divide_by(m[0]->dtype, first, m[0]->count, n);
      break;
    case NBOP_COLL_GATHER:
      for (int i = 0; i < n; i++) memcpy((char *)first + (size_t)i * bytes, m[i]->in, bytes);
      bytes *= (size_t)n;
      break;
    case NBOP_COLL_BCAST_SEND:
    case NBOP_COLL_BCAST_RECV: {
      int sender = find_sender(m, n, err, cap);
      if (sender < 0) return false;
      memcpy(first, m[sender]->in, bytes);
      break;
    }
  }
  for (int i = 1; i < n; i++) memcpy(m[i]->out, first, bytes);
  return true;
}

static struct timespec deadline_after(double seconds) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  double whole = (double)(time_t)seconds;
  t.tv_sec += (time_t)seconds;
  t.tv_nsec += (long)((seconds - whole) * 1e9);
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

/* The last member in: runs the collective without the lock (the slot is full, so no one
   else touches its members), then wakes the others. */
static void complete(slot *s) {
  char err[sizeof s->err];
  s->full = true;
  pthread_mutex_unlock(&rendezvous_lock);
  bool ok = run_members(s->members, s->group_size, err, sizeof err);
  pthread_mutex_lock(&rendezvous_lock);
  if (!ok && !s->failed) {
    s->failed = NB_INVALID;
    snprintf(s->err, sizeof s->err, "%s", err);
  }
  s->done = true;
  pthread_cond_broadcast(&rendezvous_cond);
}

static void wait_for_members(slot *s, const nbop_coll *c) {
  struct timespec until = deadline_after(c->timeout);
  while (!s->done && !s->failed)
    if (pthread_cond_timedwait(&rendezvous_cond, &rendezvous_lock, &until) == ETIMEDOUT && !s->done && !s->full) {
      s->failed = NB_INTERNAL;
      snprintf(s->err, sizeof s->err, "timed out after %g s: %d of %lld devices arrived", c->timeout, s->arrived,
               (long long)s->group_size);
      pthread_cond_broadcast(&rendezvous_cond);
    }
}

static nb_code run_in_process(const nbop_coll *c, int device, char *err, size_t cap) {
  if (device >= c->group_size) {
    snprintf(err, cap, "device %d is outside the group of %lld", device, (long long)c->group_size);
    return NB_INVALID;
  }
  pthread_mutex_lock(&rendezvous_lock);
  slot *s = open_slot(c);
  if (!s) {
    pthread_mutex_unlock(&rendezvous_lock);
    snprintf(err, cap, "out of memory");
    return NB_NOMEM;
  }
  nb_code code = NB_OK;
  if (s->group_size != c->group_size) {
    snprintf(s->err, sizeof s->err, "device %d runs a group of %lld, the devices before it a group of %lld", device,
             (long long)c->group_size, (long long)s->group_size);
    snprintf(err, cap, "%s", s->err);
    s->failed = NB_INVALID; /* the devices waiting fail now too */
    pthread_cond_broadcast(&rendezvous_cond);
    code = NB_INVALID;
  } else if (s->members[device]) {
    snprintf(err, cap, "device %d joined instance %lld twice", device, (long long)c->instance_key);
    code = NB_INVALID;
  } else {
    s->members[device] = c;
    if (++s->arrived == s->group_size)
      complete(s);
    else
      wait_for_members(s, c);
    if (s->failed) {
      snprintf(err, cap, "%s", s->err);
      code = s->failed;
    }
    if (++s->left == s->arrived && (s->done || s->failed)) unlink_slot(s);
  }
  pthread_mutex_unlock(&rendezvous_lock);
  return code;
}

/* A group of one: this process alone, with no transport installed. */
static nb_code run_alone(const nbop_coll *c, char *err, size_t cap) {
  if (c->group_size != 1) {
    snprintf(err, cap,
             "a group of %lld members, but this thread has no device (nb_collective_set_device) and the "
             "process runs alone (start it with mpirun and call nb_dist_init)",
             (long long)c->group_size);
    return NB_INVALID;
  }
  const nbop_coll *self = c;
  return run_members(&self, 1, err, cap) ? NB_OK : NB_INVALID;
}

nb_code nbop_collective_run(const nbop_coll *c, char *err, size_t cap) {
  if (thread_device >= 0) return run_in_process(c, thread_device, err, cap);
  const nbop_coll_transport *t = process_transport;
  return t ? t->run(c, err, cap) : run_alone(c, err, cap);
}

/* ---- the ops ------------------------------------------------------------------------------ */

static const char *const merge_ops[] = {"Add", "Mul", "Min", "Max", NULL};
static const char *const final_ops[] = {"Id", "Div", NULL};
static const char *const nccl_reductions[] = {"sum", "prod", "min", "max", NULL};
static const char *const hints[] = {"auto", "ring", "nccl", NULL};

enum { OP_REDUCE, OP_GATHER, OP_BCAST_SEND, OP_BCAST_RECV, OP_NCCL_ALL_REDUCE, OP_COUNT };
/* attr slots */
enum { REDUCE_MERGE, REDUCE_FINAL, REDUCE_HINT, REDUCE_TIMEOUT };
enum { GATHER_HINT, GATHER_TIMEOUT };
enum { RECV_T, RECV_HINT, RECV_TIMEOUT };
enum { NCCL_REDUCTION, NCCL_NUM_DEVICES, NCCL_SHARED_NAME };

/* The inputs group_size, group_key, instance_key from input first on: int32 scalars. */
static nb_code check_keys(nbop_kargs *k, int first) {
  static const char *const names[] = {"group_size", "group_key", "instance_key"};
  for (int i = 0; i < 3; i++) {
    nb_code code = nbop_kcheck_dtype(k, first + i, NBOP_M_INT);
    if (!code) code = nbop_kcheck_rank(k, first + i, 0, 0, names[i]);
    if (code) return code;
  }
  return NB_OK;
}

static nb_code read_keys(nbop_kargs *k, int first, nbop_coll *c) {
  int64_t v[3];
  int n;
  for (int i = 0; i < 3; i++) {
    nb_code code = nbop_kints(k, first + i, 0, &v[i], 1, &n);
    if (code) return code;
  }
  if (v[0] < 1) return nbop_kfail(k, NB_INVALID, "group_size must be >= 1, got %lld", (long long)v[0]);
  c->group_size = v[0];
  c->group_key = v[1];
  c->instance_key = v[2];
  return NB_OK;
}

static nb_code data_validate(nbop_kargs *k) {
  nb_code code = nbop_kcheck_dtype(k, 0, NBOP_M_NUM);
  return code ? code : check_keys(k, 1);
}

static nb_code gather_validate(nbop_kargs *k) {
  nb_code code = data_validate(k);
  return code ? code : nbop_kcheck_rank(k, 0, 1, NB_MAX_RANK, "input");
}

static nb_code recv_validate(nbop_kargs *k) {
  nb_code code = check_keys(k, 0);
  if (!code) code = nbop_kcheck_dtype(k, 3, NBOP_M_INT);
  return code ? code : nbop_kcheck_rank(k, 3, 1, 1, "shape");
}

static nb_code gather_infer(nbop_kargs *k) {
  int64_t group_size;
  int n;
  nb_code code = nbop_kints(k, 1, 0, &group_size, 1, &n);
  if (code) return code;
  nbop_meta_like(&k->out[0], k->in[0]);
  if (k->out[0].shape[0] >= 0) k->out[0].shape[0] *= group_size;
  return NB_OK;
}

static nb_code recv_infer(nbop_kargs *k) {
  int64_t dims[NB_MAX_RANK];
  int n;
  nb_code code = nbop_kints(k, 3, 1, dims, NB_MAX_RANK, &n);
  if (code) return code;
  for (int i = 0; i < n; i++)
    if (dims[i] < 0) return nbop_kfail(k, NB_SHAPE, "shape has a negative dim: %s", nbop_sstr(n, dims));
  nbop_meta_set(&k->out[0], k->attr[RECV_T].type, n, dims);
  return NB_OK;
}

static double timeout_of(double attr) { return attr > 0 ? attr : nbop_collective_default_timeout(); }

/* The common part of every op's description: the data, the output, the op. */
static void describe(nbop_kargs *k, nbop_coll_kind kind, const nb_tensor *like, nbop_coll *c) {
  memset(c, 0, sizeof *c);
  c->op = k->def->name;
  c->kind = kind;
  c->dtype = like->dtype;
  c->rank = like->rank;
  memcpy(c->shape, like->shape, (size_t)like->rank * sizeof *like->shape);
  c->count = like->size;
  c->in = kind == NBOP_COLL_BCAST_RECV ? NULL : nbcore_tdata(k->in[0]);
  c->out = nbcore_tdata(k->res[0]);
}

/* ---- deferred reduces ------------------------------------------------------------------ */

typedef struct started_reduce {
  void *handle; /* the transport's */
  const void *out;
  char what[256]; /* "op (node 'name'): group g, instance i" for messages */
} started_reduce;

static _Thread_local bool defer_next;
static _Thread_local started_reduce *started;
static _Thread_local int nstarted, started_cap;
static _Atomic int64_t deferred_total;

void nbop_collective_defer(bool on) { defer_next = on; }
int nbop_collective_started(void) { return nstarted; }
int64_t nbop_collective_deferred_total(void) { return deferred_total; }

/* Whether c starts deferred: asked for, a reduce, and on a process transport that can. */
static bool take_defer(const nbop_coll *c) {
  const nbop_coll_transport *t = process_transport;
  bool yes = defer_next && c->kind == NBOP_COLL_REDUCE && thread_device < 0 && t && t->start;
  defer_next = false;
  return yes;
}

static void describe_what(nbop_kargs *k, const nbop_coll *c, char *what, size_t cap) {
  int n = k->ctx->run_node ? snprintf(what, cap, "%s (node '%s'): ", k->def->name, k->ctx->run_node)
                           : snprintf(what, cap, "%s: ", k->def->name);
  if (n < 0 || (size_t)n >= cap) return;
  if (c->shared_name)
    snprintf(what + n, cap - (size_t)n, "shared_name '%s'", c->shared_name);
  else
    snprintf(what + n, cap - (size_t)n, "group %lld, instance %lld", (long long)c->group_key,
             (long long)c->instance_key);
}

static nb_code start_deferred(nbop_kargs *k, const nbop_coll *c, char *err, size_t cap) {
  if (nstarted == started_cap) {
    int want = started_cap ? 2 * started_cap : 8;
    started_reduce *grown = realloc(started, (size_t)want * sizeof *grown);
    if (!grown) {
      snprintf(err, cap, "out of memory");
      return NB_NOMEM;
    }
    started = grown;
    started_cap = want;
  }
  const nbop_coll_transport *t = process_transport;
  started_reduce *s = &started[nstarted];
  nb_code code = t->start(c, &s->handle, err, cap);
  if (code) return code;
  s->out = c->out;
  describe_what(k, c, s->what, sizeof s->what);
  nstarted++;
  deferred_total++;
  return NB_OK;
}

void nbop_collective_progress(void) {
  const nbop_coll_transport *t = process_transport;
  for (int i = 0; i < nstarted; i++) t->poll(started[i].handle);
}

/* Finishes started[i] and drops it from the list (freed with the list's last entry). */
static nb_code finish_started(int i, char *err, size_t cap) {
  const nbop_coll_transport *t = process_transport;
  size_t n = (size_t)snprintf(err, cap, "%s: ", started[i].what); /* the transport's message follows */
  nb_code code = t->finish(started[i].handle, err + (n < cap ? n : cap - 1), n < cap ? cap - n : 1);
  started[i] = started[--nstarted];
  if (nstarted == 0) {
    free(started);
    started = NULL;
    started_cap = 0;
  }
  return code;
}

nb_code nbop_collective_await(const void *data, char *err, size_t cap) {
  for (int i = 0; i < nstarted; i++)
    if (started[i].out == data) return finish_started(i, err, cap);
  return NB_OK;
}

nb_code nbop_collective_await_all(char *err, size_t cap) {
  nb_code first = NB_OK;
  while (nstarted > 0) {
    char why[NBCORE_ERR_CAP];
    nb_code code = finish_started(nstarted - 1, why, sizeof why);
    if (code && !first) {
      first = code;
      snprintf(err, cap, "%s", why);
    }
  }
  return first;
}

static nb_code run_kernel(nbop_kargs *k, const nbop_coll *c) {
  char err[512];
  nb_code code = take_defer(c) ? start_deferred(k, c, err, sizeof err) : nbop_collective_run(c, err, sizeof err);
  if (!code) return NB_OK;
  if (c->shared_name) return nbop_kfail(k, code, "shared_name '%s': %s", c->shared_name, err);
  return nbop_kfail(k, code, "group %lld, instance %lld: %s", (long long)c->group_key, (long long)c->instance_key, err);
}

/* What distinguishes the V2 ops' kernels (each def's impl). */
typedef struct v2_spec {
  nbop_coll_kind kind;
  int timeout_slot; /* the attr slot of timeout_seconds */
  int first_key;    /* the input holding group_size, then group_key and instance_key */
} v2_spec;

static const v2_spec reduce_spec = {NBOP_COLL_REDUCE, REDUCE_TIMEOUT, 1},
                     gather_spec = {NBOP_COLL_GATHER, GATHER_TIMEOUT, 1},
                     send_spec = {NBOP_COLL_BCAST_SEND, GATHER_TIMEOUT, 1},
                     recv_spec = {NBOP_COLL_BCAST_RECV, RECV_TIMEOUT, 0};

static nb_code v2_kernel(nbop_kargs *k) {
  const v2_spec *spec = k->def->impl;
  nbop_coll c;
  describe(k, spec->kind, spec->kind == NBOP_COLL_BCAST_RECV ? k->res[0] : k->in[0], &c);
  if (spec->kind == NBOP_COLL_REDUCE) {
    c.merge = (nbop_merge)nbop_kchoice(k, REDUCE_MERGE);
    c.final_div = nbop_kchoice(k, REDUCE_FINAL) == 1;
  }
  c.timeout = timeout_of(k->attr[spec->timeout_slot].f);
  nb_code code = read_keys(k, spec->first_key, &c);
  return code ? code : run_kernel(k, &c);
}

static nb_code nccl_validate(nbop_kargs *k) {
  nb_code code = nbop_kcheck_dtype(k, 0, NBOP_M_NUM);
  if (!code && k->attr[NCCL_NUM_DEVICES].i < 1)
    code = nbop_kfail(k, NB_INVALID, "num_devices must be >= 1, got %lld", (long long)k->attr[NCCL_NUM_DEVICES].i);
  return code;
}

/* NcclAllReduce's reduction names TF's merge in the order of nccl_reductions. */
static nb_code nccl_kernel(nbop_kargs *k) {
  static const nbop_merge merges[] = {NBOP_MERGE_ADD, NBOP_MERGE_MUL, NBOP_MERGE_MIN, NBOP_MERGE_MAX};
  nbop_coll c;
  describe(k, NBOP_COLL_REDUCE, k->in[0], &c);
  c.merge = merges[nbop_kchoice(k, NCCL_REDUCTION)];
  c.shared_name = k->attr[NCCL_SHARED_NAME].s;
  c.group_size = k->attr[NCCL_NUM_DEVICES].i;
  c.timeout = nbop_collective_default_timeout();
  return run_kernel(k, &c);
}

#define HINT_ATTR \
  { "communication_hint", NB_ATTR_STR, {.s = "auto"}, false }
#define TIMEOUT_ATTR \
  { "timeout_seconds", NB_ATTR_FLOAT, {.f = 0}, false }
#define HINT_CHECK \
  { .choices = hints }

/* Stateful: a collective exchanges values with other members, so no graph folds it. */
static nbop_def collective_ops[OP_COUNT] = {
    [OP_REDUCE] = {.name = "CollectiveReduceV2",
                   .nin = 4,
                   .nout = 1,
                   .alias = -1,
                   .stateful = true,
                   .nattrs = 4,
                   .attrs = {{"merge_op", NB_ATTR_STR, {.s = "Add"}, true},
                             {"final_op", NB_ATTR_STR, {.s = "Id"}, true},
                             HINT_ATTR,
                             TIMEOUT_ATTR},
                   .checks = {{.choices = merge_ops}, {.choices = final_ops}, HINT_CHECK},
                   .validate = data_validate,
                   .infer = nbop_infer_same,
                   .kernel = v2_kernel,
                   .impl = &reduce_spec},
    [OP_GATHER] = {.name = "CollectiveGatherV2",
                   .nin = 4,
                   .nout = 1,
                   .alias = -1,
                   .stateful = true,
                   .nattrs = 2,
                   .attrs = {HINT_ATTR, TIMEOUT_ATTR},
                   .checks = {HINT_CHECK},
                   .validate = gather_validate,
                   .infer = gather_infer,
                   .kernel = v2_kernel,
                   .impl = &gather_spec},
    [OP_BCAST_SEND] = {.name = "CollectiveBcastSendV2",
                       .nin = 4,
                       .nout = 1,
                       .alias = -1,
                       .stateful = true,
                       .nattrs = 2,
                       .attrs = {HINT_ATTR, TIMEOUT_ATTR},
                       .checks = {HINT_CHECK},
                       .validate = data_validate,
                       .infer = nbop_infer_same,
                       .kernel = v2_kernel,
                       .impl = &send_spec},
    [OP_BCAST_RECV] = {.name = "CollectiveBcastRecvV2",
                       .nin = 4,
                       .nout = 1,
                       .alias = -1,
                       .stateful = true,
                       .dtype_attr = 1 + RECV_T,
                       .nattrs = 3,
                       .attrs = {{"T", NB_ATTR_TYPE, {.type = NB_F32}, true}, HINT_ATTR, TIMEOUT_ATTR},
                       .checks = {{.types = NBOP_M_NUM}, HINT_CHECK},
                       .validate = recv_validate,
                       .infer = recv_infer,
                       .kernel = v2_kernel,
                       .impl = &recv_spec},
    [OP_NCCL_ALL_REDUCE] = {.name = "NcclAllReduce",
                            .nin = 1,
                            .nout = 1,
                            .alias = -1,
                            .stateful = true,
                            .nattrs = 3,
                            .attrs = {{"reduction", NB_ATTR_STR, {.s = "sum"}, true},
                                      {"num_devices", NB_ATTR_INT, {.i = 1}, true},
                                      {"shared_name", NB_ATTR_STR, {.s = ""}, true}},
                            .checks = {{.choices = nccl_reductions}},
                            .validate = nccl_validate,
                            .infer = nbop_infer_same,
                            .kernel = nccl_kernel},
};

bool nbop_collective_deferrable(const nbop_def *def) {
  return def == &collective_ops[OP_REDUCE] || def == &collective_ops[OP_NCCL_ALL_REDUCE];
}

nbop_family nbop_collective_family(void) { return (nbop_family){collective_ops, OP_COUNT}; }

/* ---- the typed wrappers -------------------------------------------------------------------- */

/* The one output of op on data (NULL for a receiver) then the three group scalars, then
   extra (a receiver's shape; NULL for none), with attrs. */
static nb_tensor *call_collective(nb_ctx *c, int op, nb_tensor *data, int64_t group_size, int64_t group_key,
                                  int64_t instance_key, nb_tensor *extra, const nbop_attrval *attr) {
  nb_tensor *in[4], *keys[3] = {nb_scalar(c, NB_I32, (double)group_size), nb_scalar(c, NB_I32, (double)group_key),
                                nb_scalar(c, NB_I32, (double)instance_key)};
  int n = 0;
  if (data) in[n++] = data;
  for (int i = 0; i < 3; i++) in[n++] = keys[i];
  if (extra) in[n++] = extra;
  nb_tensor *y = nbop_live(c) ? nbop_call(c, &collective_ops[op], in, n, attr) : NULL;
  for (int i = 0; i < 3; i++) nb_tensor_free(keys[i]);
  return y;
}

nb_tensor *nb_collective_reduce_v2(nb_ctx *c, nb_tensor *input, int64_t group_size, int64_t group_key,
                                   int64_t instance_key, const char *merge_op, const char *final_op,
                                   double timeout_seconds) {
  nbop_attrval attr[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&collective_ops[OP_REDUCE], attr);
  attr[REDUCE_MERGE].s = merge_op;
  attr[REDUCE_FINAL].s = final_op;
  attr[REDUCE_TIMEOUT].f = timeout_seconds;
  if (nbop_live(c) && (!merge_op || !final_op)) {
    nbcore_fail(c, NB_INVALID, "CollectiveReduceV2: merge_op and final_op must not be NULL");
    return NULL;
  }
  return call_collective(c, OP_REDUCE, input, group_size, group_key, instance_key, NULL, attr);
}

static nb_tensor *timed_collective(nb_ctx *c, int op, nb_tensor *data, int64_t group_size, int64_t group_key,
                                   int64_t instance_key, double timeout_seconds) {
  nbop_attrval attr[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&collective_ops[op], attr);
  attr[GATHER_TIMEOUT].f = timeout_seconds;
  return call_collective(c, op, data, group_size, group_key, instance_key, NULL, attr);
}

nb_tensor *nb_collective_gather_v2(nb_ctx *c, nb_tensor *input, int64_t group_size, int64_t group_key,
                                   int64_t instance_key, double timeout_seconds) {
  return timed_collective(c, OP_GATHER, input, group_size, group_key, instance_key, timeout_seconds);
}

nb_tensor *nb_collective_bcast_send_v2(nb_ctx *c, nb_tensor *input, int64_t group_size, int64_t group_key,
                                       int64_t instance_key, double timeout_seconds) {
  return timed_collective(c, OP_BCAST_SEND, input, group_size, group_key, instance_key, timeout_seconds);
}

nb_tensor *nb_collective_bcast_recv_v2(nb_ctx *c, nb_dtype t, const int64_t *shape, int rank, int64_t group_size,
                                       int64_t group_key, int64_t instance_key, double timeout_seconds) {
  if (!nbop_live(c)) return NULL;
  if (rank < 0 || rank > NB_MAX_RANK || (rank > 0 && !shape)) {
    nbcore_fail(c, NB_INVALID, "CollectiveBcastRecvV2: rank %d out of [0, %d] or a NULL shape", rank, NB_MAX_RANK);
    return NULL;
  }
  nbop_attrval attr[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&collective_ops[OP_BCAST_RECV], attr);
  attr[RECV_T].type = t;
  attr[RECV_TIMEOUT].f = timeout_seconds;
  nb_tensor *dims = nbop_const_ints(c, NB_I64, shape, rank);
  nb_tensor *y = call_collective(c, OP_BCAST_RECV, NULL, group_size, group_key, instance_key, dims, attr);
  nb_tensor_free(dims);
  return y;
}

nb_tensor *nb_nccl_all_reduce(nb_ctx *c, nb_tensor *input, const char *reduction, int num_devices,
                              const char *shared_name) {
  if (!nbop_live(c)) return NULL;
  if (!reduction || !shared_name) {
    nbcore_fail(c, NB_INVALID, "NcclAllReduce: reduction and shared_name must not be NULL");
    return NULL;
  }
  nbop_attrval attr[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&collective_ops[OP_NCCL_ALL_REDUCE], attr);
  attr[NCCL_REDUCTION].s = reduction;
  attr[NCCL_NUM_DEVICES].i = num_devices;
  attr[NCCL_SHARED_NAME].s = shared_name;
  return nbop_call(c, &collective_ops[OP_NCCL_ALL_REDUCE], &input, 1, attr);
}
