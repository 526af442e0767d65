/* nb_dist_init and the MPI transport of the collective ops. A collective runs in two
   non-blocking steps under a watchdog: the members' descriptions are all-gathered and
   compared (so every rank sees the same mismatch and fails with the same message before
   any data moves), then the data step (MPI_Iallreduce, MPI_Iallgather or MPI_Ibcast). The
   world communicator returns errors (MPI_ERRORS_RETURN) instead of aborting the job. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, setenv */
#include "dist.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static bool joined, we_initialized, broken;
static char broken_why[256];
static int world_rank, world_size = 1;

bool nbdist_active(void) { return joined; }
void nbdist_lock(void) { pthread_mutex_lock(&mpi_lock); }
void nbdist_unlock(void) { pthread_mutex_unlock(&mpi_lock); }
int nb_dist_rank(void) { return world_rank; }
int nb_dist_size(void) { return world_size; }
void nb_dist_set_timeout(double seconds) { nbop_collective_set_default_timeout(seconds); }

MPI_Datatype nbdist_mpi_type(nb_dtype t) {
  switch (t) {
    case NB_F32: return MPI_FLOAT;
    case NB_F64: return MPI_DOUBLE;
    case NB_I32: return MPI_INT32_T;
    case NB_I64: return MPI_INT64_T;
    case NB_BOOL: break;
  }
  return MPI_BYTE;
}

static MPI_Op mpi_op(nbop_merge m) {
  switch (m) {
    case NBOP_MERGE_ADD: return MPI_SUM;
    case NBOP_MERGE_MUL: return MPI_PROD;
    case NBOP_MERGE_MIN: return MPI_MIN;
    case NBOP_MERGE_MAX: return MPI_MAX;
  }
  return MPI_SUM;
}

nb_code nbdist_check(int rc, const char *what, char *err, size_t cap) {
  if (rc == MPI_SUCCESS) return NB_OK;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  snprintf(err, cap, "%s failed on rank %d: %s", what, world_rank, msg);
  return NB_INTERNAL;
}

void nbdist_mark_broken(const char *why) {
  snprintf(broken_why, sizeof broken_why, "%s", why);
  broken = true;
}

nb_code nbdist_check_broken(char *err, size_t cap) {
  if (!broken) return NB_OK;
  snprintf(err, cap, "rank %d: an earlier collective failed (%s); the ranks no longer agree, restart the job",
           world_rank, broken_why);
  return NB_INTERNAL;
}

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Polls MPI_Test until req completes or timeout seconds pass. Open MPI moves a collective
   along only inside MPI calls (no progress thread for shared memory), so the loop never
   sleeps: a pause stalls every fragment and every round of the schedule (it made 2 ranks
   slower than 1). It yields between polls instead, as MPI_Wait does with
   mpi_yield_when_idle: a rank waiting for a slower one leaves its core to runnable work. */
nb_code nbdist_wait(MPI_Request *req, double timeout, const char *what, char *err, size_t cap) {
  double start = now_seconds();
  for (;;) {
    int done = 0;
    nb_code code = nbdist_check(MPI_Test(req, &done, MPI_STATUS_IGNORE), what, err, cap);
    if (code) nbdist_mark_broken(err);
    if (code || done) return code;
    if (now_seconds() - start > timeout) {
      snprintf(err, cap, "%s timed out after %g s on rank %d of %d: another rank died or did not call it", what,
               timeout, world_rank, world_size);
      nbdist_mark_broken(err);
      return NB_INTERNAL;
    }
    sched_yield();
  }
}

/* ---- the transport ------------------------------------------------------------------------ */

/* What every rank tells the others about its call: the fields nbop_coll_matches compares. */
typedef struct meta {
  int32_t kind, merge, final_div, dtype, rank;
  int64_t group_size, group_key, instance_key;
  int64_t shape[NB_MAX_RANK];
} meta;

static meta meta_of(const nbop_coll *c) {
  meta m;
  memset(&m, 0, sizeof m);
  m.kind = c->kind;
  m.merge = c->merge;
  m.final_div = c->final_div;
  m.dtype = c->dtype;
  m.rank = c->rank;
  m.group_size = c->group_size;
  m.group_key = c->group_key;
  m.instance_key = c->instance_key;
  memcpy(m.shape, c->shape, sizeof m.shape);
  return m;
}

static nbop_coll coll_of(const meta *m, const char *op) {
  nbop_coll c;
  memset(&c, 0, sizeof c);
  c.op = op;
  c.kind = (nbop_coll_kind)m->kind;
  c.merge = (nbop_merge)m->merge;
  c.final_div = m->final_div;
  c.dtype = (nb_dtype)m->dtype;
  c.rank = m->rank;
  c.group_size = m->group_size;
  c.group_key = m->group_key;
  c.instance_key = m->instance_key;
  memcpy(c.shape, m->shape, sizeof c.shape);
  return c;
}

/* The ranks' descriptions compared with rank 0's; in *sender the broadcast's root. */
static nb_code check_members(const nbop_coll *c, int *sender, char *err, size_t cap) {
  meta mine = meta_of(c), *all = malloc((size_t)world_size * sizeof *all);
  if (!all) {
    snprintf(err, cap, "out of memory");
    return NB_NOMEM;
  }
  MPI_Request req;
  nb_code code =
      nbdist_check(MPI_Iallgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, MPI_COMM_WORLD, &req),
                   "MPI_Iallgather", err, cap);
  if (!code) code = nbdist_wait(&req, c->timeout, "exchanging the ranks' descriptions", err, cap);
  nbop_coll first = code ? *c : coll_of(&all[0], c->op);
  *sender = -1;
  for (int r = 0; r < world_size && !code; r++) {
    nbop_coll other = coll_of(&all[r], c->op);
    char why[320];
    if (!nbop_coll_matches(&first, 0, &other, r, why, sizeof why)) {
      snprintf(err, cap, "the ranks disagree: %s", why);
      code = NB_INVALID;
    } else if (other.kind == NBOP_COLL_BCAST_SEND && *sender >= 0) {
      snprintf(err, cap, "ranks %d and %d both send the broadcast", *sender, r);
      code = NB_INVALID;
    } else if (other.kind == NBOP_COLL_BCAST_SEND) {
      *sender = r;
    }
  }
  if (!code && first.kind >= NBOP_COLL_BCAST_SEND && *sender < 0) {
    snprintf(err, cap, "no rank sends the broadcast");
    code = NB_INVALID;
  }
  free(all);
  return code;
}

/* Starts c's data step (c already checked against every rank; root: the broadcast's
   sender). A reduce copies its input to its output and reduces there in place, so the
   input may go once it has started (a deferred reduce's does). */
static nb_code start_data(const nbop_coll *c, int root, MPI_Request *req, char *err, size_t cap) {
  MPI_Datatype type = nbdist_mpi_type(c->dtype);
  size_t bytes = (size_t)c->count * nb_dtype_size(c->dtype);
  int rc;
  switch (c->kind) {
    case NBOP_COLL_REDUCE:
      if (c->out != c->in) memcpy(c->out, c->in, bytes); /* the same when a session forwarded it */
      rc = MPI_Iallreduce(MPI_IN_PLACE, c->out, (int)c->count, type, mpi_op(c->merge), MPI_COMM_WORLD, req);
      break;
    case NBOP_COLL_GATHER:
      rc = MPI_Iallgather(c->in, (int)c->count, type, c->out, (int)c->count, type, MPI_COMM_WORLD, req);
      break;
    default:
      if (c->kind == NBOP_COLL_BCAST_SEND && c->out != c->in) memcpy(c->out, c->in, bytes);
      rc = MPI_Ibcast(c->out, (int)c->count, type, root, MPI_COMM_WORLD, req);
      break;
  }
  return nbdist_check(rc, "the data exchange", err, cap);
}

/* What c asks of the job before anything is exchanged. */
static nb_code check_job(const nbop_coll *c, char *err, size_t cap) {
  if (c->group_size != world_size) {
    snprintf(err, cap, "a group of %lld members, but the job has %d ranks (a group is every rank)",
             (long long)c->group_size, world_size);
    return NB_INVALID;
  }
  if (c->count > INT32_MAX) {
    snprintf(err, cap, "%lld elements: MPI counts are int", (long long)c->count);
    return NB_UNIMPLEMENTED;
  }
  return NB_OK;
}

/* Under the lock: the ranks' descriptions compared, then c's data step started. */
static nb_code check_and_start(const nbop_coll *c, MPI_Request *req, char *err, size_t cap) {
  int root = -1;
  nb_code code = nbdist_check_broken(err, cap);
  if (!code) code = check_members(c, &root, err, cap);
  if (!code) code = start_data(c, root, req, err, cap);
  return code;
}

static nb_code mpi_run(const nbop_coll *c, char *err, size_t cap) {
  nb_code code = check_job(c, err, cap);
  if (code) return code;
  MPI_Request req;
  nbdist_lock();
  code = check_and_start(c, &req, err, cap);
  if (!code) code = nbdist_wait(&req, c->timeout, "the data exchange", err, cap);
  nbdist_unlock();
  if (!code && c->kind == NBOP_COLL_REDUCE && c->final_div) nbop_divide_by(c->dtype, c->out, c->count, world_size);
  return code;
}

/* A reduce mpi_start began: its request and what finishing it needs. */
typedef struct started_reduce {
  MPI_Request req;
  int rc; /* of the last MPI_Test by mpi_poll */
  void *out;
  int64_t count;
  nb_dtype dtype;
  bool final_div;
  double timeout;
} started_reduce;

static nb_code mpi_start(const nbop_coll *c, void **handle, char *err, size_t cap) {
  nb_code code = check_job(c, err, cap);
  started_reduce *r = code ? NULL : malloc(sizeof *r);
  if (!code && !r) {
    snprintf(err, cap, "out of memory");
    code = NB_NOMEM;
  }
  if (code) return code;
  *r = (started_reduce){.rc = MPI_SUCCESS,
                        .out = c->out,
                        .count = c->count,
                        .dtype = c->dtype,
                        .final_div = c->final_div,
                        .timeout = c->timeout};
  nbdist_lock();
  code = check_and_start(c, &r->req, err, cap);
  nbdist_unlock();
  if (code) free(r);
  *handle = code ? NULL : r;
  return code;
}

static void mpi_poll(void *handle) {
  started_reduce *r = handle;
  int done = 0;
  nbdist_lock();
  if (r->rc == MPI_SUCCESS) r->rc = MPI_Test(&r->req, &done, MPI_STATUS_IGNORE);
  nbdist_unlock();
}

static nb_code mpi_finish(void *handle, char *err, size_t cap) {
  started_reduce *r = handle;
  nbdist_lock();
  nb_code code = nbdist_check(r->rc, "the data exchange", err, cap);
  if (code) {
    nbdist_mark_broken(err);
  } else {
    code = nbdist_wait(&r->req, r->timeout, "the data exchange", err, cap);
  }
  nbdist_unlock();
  if (!code && r->final_div) nbop_divide_by(r->dtype, r->out, r->count, world_size);
  free(r);
  return code;
}

static const nbop_coll_transport mpi_transport = {mpi_run, mpi_start, mpi_poll, mpi_finish};

/* Open MPI's mpirun (ORTE or PMIx) sets these in every rank it starts. */
static bool launched_by_mpirun(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

/* libnbc, Open MPI's non-blocking collectives, all-reduces with a binomial tree below 4
   ranks or in place: every byte to rank 0 and back, summed by rank 0 alone while the
   others wait (0.66x a blocking MPI_Allreduce at 2 ranks). Its ring moves half of that
   each way and sums in parallel. Set before MPI starts; a choice of the user's (mpirun
   --mca, or the environment) stands. */
static void prefer_ring_allreduce(void) { setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "ring", 0); }

nb_code nb_dist_init(void) {
  nbdist_lock();
  nb_code code = NB_OK;
  if (!joined && launched_by_mpirun()) {
    int initialized = 0, provided = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      prefer_ring_allreduce();
      code = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) == MPI_SUCCESS ? NB_OK : NB_INTERNAL;
      we_initialized = !code;
    }
    if (!code) {
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
      MPI_Comm_size(MPI_COMM_WORLD, &world_size);
      /* a job of one needs no transport: a group of one is this process */
      if (world_size > 1) nbop_collective_install(&mpi_transport);
      joined = true;
    }
  }
  nbdist_unlock();
  return code;
}

nb_code nb_dist_finalize(void) {
  nbdist_lock();
  nb_code code = broken ? NB_INTERNAL : NB_OK;
  if (joined) nbop_collective_install(NULL);
  /* After a failed collective a request may still be pending: MPI_Finalize could then wait
     for ranks that are gone, so the process leaves it to mpirun's clean-up. */
  if (joined && we_initialized && !broken) MPI_Finalize();
  joined = false;
  world_rank = 0;
  world_size = 1;
  nbdist_unlock();
  return code;
}
