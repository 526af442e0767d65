/* The process side of the collectives: MPI (Open MPI) started by nb_dist_init, a watchdog
   around every non-blocking call, and the gradient reducer built on them. */
#ifndef NBDIST_H
#define NBDIST_H

#include <mpi.h>

#include "../ops/collective.h"

/* Whether this process joined an MPI job (nb_dist_init under mpirun). */
bool nbdist_active(void);
/* MPI calls are serialized through this lock (MPI_THREAD_SERIALIZED). */
void nbdist_lock(void);
void nbdist_unlock(void);
/* Waits for req under the lock's holder, polling until it completes or timeout seconds
   pass. NB_OK, or NB_INTERNAL with a message in err (the job is then marked broken: every
   later collective fails at once, since the ranks no longer agree on what was sent). */
nb_code nbdist_wait(MPI_Request *req, double timeout, const char *what, char *err, size_t cap);
/* NB_INTERNAL with MPI's message for rc in err, or NB_OK for MPI_SUCCESS. */
nb_code nbdist_check(int rc, const char *what, char *err, size_t cap);
/* Marks the job broken (why: the first failure's message): every later collective fails
   at once, since the ranks no longer agree on what was sent. */
void nbdist_mark_broken(const char *why);
/* NB_INTERNAL with a message when an earlier collective broke the job. */
nb_code nbdist_check_broken(char *err, size_t cap);
MPI_Datatype nbdist_mpi_type(nb_dtype t);

#endif
