/* Collectives (src/ops/collective.c): what one member brings to one collective instance,
   and the transports that run it. A member is a device in this process (a thread that set
   one with nb_collective_set_device: the in-process rendezvous here) or, on threads without
   one, this process in the process transport src/dist installs (MPI, one member per rank).
   Without either, a group has one member: this process. */
#ifndef NBOP_COLLECTIVE_H
#define NBOP_COLLECTIVE_H

#include "op.h"

typedef enum { NBOP_COLL_REDUCE, NBOP_COLL_GATHER, NBOP_COLL_BCAST_SEND, NBOP_COLL_BCAST_RECV } nbop_coll_kind;
typedef enum { NBOP_MERGE_ADD, NBOP_MERGE_MUL, NBOP_MERGE_MIN, NBOP_MERGE_MAX } nbop_merge;

typedef struct nbop_coll {
  const char *op; /* the op type, for messages */
  nbop_coll_kind kind;
  nbop_merge merge;
  bool final_div;          /* reduce: divide the merged value by group_size (final_op Div) */
  const char *shared_name; /* NcclAllReduce's: the group is named by it; NULL: by group_key */
  int64_t group_size, group_key, instance_key;
  double timeout; /* seconds (> 0) a member waits for the others */
  nb_dtype dtype;
  int rank;                   /* of the input; of the output for a broadcast receiver */
  int64_t shape[NB_MAX_RANK]; /* likewise */
  int64_t count;              /* elements of in (of out for a receiver) */
  const void *in;             /* NULL for a broadcast receiver */
  void *out;                  /* count elements; gather: group_size * count */
} nbop_coll;

/* The process transport (src/dist's MPI), with this process as one member (its rank) of
   a group of the processes. run runs c to the end. start begins a reduce and returns at
   once with a handle; c->in may be freed then, c->out is written until finish, which
   waits for it and frees the handle; poll lets it move meanwhile. On failure each writes
   a message to err and returns the code. */
typedef struct nbop_coll_transport {
  nb_code (*run)(const nbop_coll *c, char *err, size_t cap);
  nb_code (*start)(const nbop_coll *c, void **handle, char *err, size_t cap);
  void (*poll)(void *handle);
  nb_code (*finish)(void *handle, char *err, size_t cap);
} nbop_coll_transport;
/* Installs t as the process transport (NULL: none) and the default timeout (seconds > 0)
   of collectives whose timeout_seconds is 0. */
void nbop_collective_install(const nbop_coll_transport *t);
void nbop_collective_set_default_timeout(double seconds);
double nbop_collective_default_timeout(void);
/* Runs c on the calling thread's transport (its device's group, else the process's). */
nb_code nbop_collective_run(const nbop_coll *c, char *err, size_t cap);

/* Deferred reduces: a session overlaps a reduce with the steps after it. With
   nbop_collective_defer(true), the calling thread's next CollectiveReduceV2 or
   NcclAllReduce kernel on the process transport only starts the reduce (its output is
   not yet the result) and joins the thread's started list; a session sets it for the one
   step (nbop_collective_deferrable), then clears it. */
void nbop_collective_defer(bool on);
bool nbop_collective_deferrable(const nbop_def *def);
/* How many reduces the calling thread has started and not yet awaited. */
int nbop_collective_started(void);
/* Lets the started reduces move (MPI progresses only inside its calls). */
void nbop_collective_progress(void);
/* Waits for the started reduce whose output is data, if any (NB_OK when none); a failure
   writes "op (node 'name'): ..." to err. */
nb_code nbop_collective_await(const void *data, char *err, size_t cap);
/* Waits for every started reduce of the thread; the first failure's code and message. */
nb_code nbop_collective_await_all(char *err, size_t cap);
/* Reduces started deferred by this process so far (tests check the overlap ran). */
int64_t nbop_collective_deferred_total(void);

/* acc[i] = merge(acc[i], x[i]) for n elements of dtype t. */
void nbop_merge_into(nbop_merge m, nb_dtype t, void *acc, const void *x, int64_t n);
/* dst[i] = src[i] / by for n elements of dtype t (integer division for int dtypes, TF's Div
   final op); dst may be src. */
void nbop_divide_into(nb_dtype t, void *dst, const void *src, int64_t n, int64_t by);
/* x[i] /= by, as nbop_divide_into. */
void nbop_divide_by(nb_dtype t, void *x, int64_t n, int64_t by);
/* Whether a and b describe the same collective (kind, merge, dtype, shape, keys); when not,
   a message naming what differs (members ia and ib) goes to err. */
bool nbop_coll_matches(const nbop_coll *a, int ia, const nbop_coll *b, int ib, char *err, size_t cap);

#endif
