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

/* The process transport: runs c with this process as one member (its rank) of a group of
   the processes; on failure it writes a message to err and returns the code. */
typedef nb_code (*nbop_coll_run_fn)(const nbop_coll *c, char *err, size_t cap);
/* Installs run as the process transport (NULL: none) and the default timeout (seconds > 0)
   of collectives whose timeout_seconds is 0. */
void nbop_collective_install(nbop_coll_run_fn run);
void nbop_collective_set_default_timeout(double seconds);
double nbop_collective_default_timeout(void);
/* Runs c on the calling thread's transport (its device's group, else the process's). */
nb_code nbop_collective_run(const nbop_coll *c, char *err, size_t cap);

/* acc[i] = merge(acc[i], x[i]) for n elements of dtype t. */
void nbop_merge_into(nbop_merge m, nb_dtype t, void *acc, const void *x, int64_t n);
/* x[i] /= by (integer division for int dtypes, TF's Div final op). */
void nbop_divide_by(nb_dtype t, void *x, int64_t n, int64_t by);
/* Whether a and b describe the same collective (kind, merge, dtype, shape, keys); when not,
   a message naming what differs (members ia and ib) goes to err. */
bool nbop_coll_matches(const nbop_coll *a, int ia, const nbop_coll *b, int ib, char *err, size_t cap);

#endif
