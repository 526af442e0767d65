/* Data-parallel gradients: every rank computes gradients on its shard of the batch; the
   reducer averages them across ranks. On a tape the gradients are packed, as the backward
   pass finalizes them, into buckets of about bucket_bytes, and each full bucket starts a
   non-blocking MPI_Iallreduce while the pass computes the rest (PyTorch DDP's and
   Horovod's tensor fusion). Each gradient enters its bucket already divided by the number
   of ranks, so the all-reduced sums are the means, and the averaged gradients handed back
   are views of the bucket: no pass over the gradients after the all-reduce. IndexedSlices
   are all-gathered, not densified. In graphs (sessions) each bucket is one
   CollectiveReduceV2 node of the flattened gradients. */
#include "dist.h"

#include "../autodiff/tape.h"
#include "../core/variable.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_BUCKET_BYTES ((size_t)25 << 20) /* DDP's bucket_cap_mb */
#define MAX_DTYPES 2                            /* float32, float64 */

typedef struct bucket {
  nb_dtype dtype;
  nbcore_buffer *block; /* the pass's averaged gradients view it */
  int64_t count, cap;   /* elements */
  MPI_Request req;
  bool started, done;
} bucket;

struct nb_dist_reducer {
  size_t bucket_bytes;
  bool overlap;
  int64_t instance; /* graph buckets: the next CollectiveReduceV2 instance key */
  /* Buckets [0, nbuckets) serve this pass; their memory stays for the next (DDP's
     persistent buckets: fresh pages each step would fault in every gradient byte) unless
     gradients of an earlier pass still view it. */
  bucket *buckets;
  int32_t nbuckets, nbuckets_kept, buckets_cap;
  /* one pass */
  int open[MAX_DTYPES]; /* the bucket filling per dtype; -1 none */
  int *bucket_of;       /* per variable: its bucket, -1 before it has one */
  int64_t *offset_of;   /* and its first element there */
  nb_code code;
  char err[512];
};

nb_dist_reducer *nb_dist_reducer_new(size_t bucket_bytes) {
  nb_dist_reducer *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->bucket_bytes = bucket_bytes ? bucket_bytes : DEFAULT_BUCKET_BYTES;
  r->overlap = true;
  return r;
}

void nb_dist_reducer_set_overlap(nb_dist_reducer *r, bool overlap) {
  if (r) r->overlap = overlap;
}

static void end_pass(nb_dist_reducer *r) {
  free(r->bucket_of);
  free(r->offset_of);
  r->bucket_of = NULL;
  r->offset_of = NULL;
  r->nbuckets = 0;
}

void nb_dist_reducer_free(nb_dist_reducer *r) {
  if (!r) return;
  end_pass(r);
  for (int b = 0; b < r->nbuckets_kept; b++) nbcore_buffer_release(NULL, r->buckets[b].block);
  free(r->buckets);
  free(r);
}

/* Records the pass's first failure. */
static nb_code fail(nb_dist_reducer *r, nb_code code, const char *why) {
  if (!r->code) {
    r->code = code;
    snprintf(r->err, sizeof r->err, "%s", why);
  }
  return r->code;
}

/* A failure of this rank alone while the pass's reduces are under way (out of memory, MPI
   refusing one): the other ranks start reduces this one will not match, so the job is
   broken from here on and every later collective says so at once. */
static void fail_midpass(nb_dist_reducer *r, nb_code code, const char *why) {
  fail(r, code, why);
  if (nbdist_active()) nbdist_mark_broken(why);
}

static bool begin_pass(nb_dist_reducer *r, int nv) {
  r->code = NB_OK;
  r->err[0] = 0;
  for (int d = 0; d < MAX_DTYPES; d++) r->open[d] = -1;
  r->bucket_of = malloc((size_t)(nv ? nv : 1) * sizeof *r->bucket_of);
  r->offset_of = malloc((size_t)(nv ? nv : 1) * sizeof *r->offset_of);
  if (!r->bucket_of || !r->offset_of) return false;
  for (int k = 0; k < nv; k++) r->bucket_of[k] = -1;
  return true;
}

/* Starts bucket b's all-reduce: a sum of the ranks' shares, which is their mean. */
static void start(nb_dist_reducer *r, bucket *b) {
  b->started = true;
  if (!nbdist_active() || r->code) {
    b->done = true;
    return;
  }
  char err[400];
  nbdist_lock();
  nb_code code = nbdist_check_broken(err, sizeof err);
  if (!code)
    code = nbdist_check(MPI_Iallreduce(MPI_IN_PLACE, b->block->data, (int)b->count, nbdist_mpi_type(b->dtype), MPI_SUM,
                                       MPI_COMM_WORLD, &b->req),
                        "MPI_Iallreduce", err, sizeof err);
  nbdist_unlock();
  if (code) {
    b->done = true;
    fail_midpass(r, code, err);
  }
}

/* Lets MPI move the started buckets along (Open MPI progresses only inside MPI calls). */
static void progress(nb_dist_reducer *r) {
  if (!nbdist_active()) return;
  nbdist_lock();
  for (int i = 0; i < r->nbuckets; i++) {
    bucket *b = &r->buckets[i];
    int flag = 0;
    if (b->started && !b->done && MPI_Test(&b->req, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) b->done = true;
  }
  nbdist_unlock();
}

/* The pass's next bucket, on the memory of an earlier pass's when no gradient views it
   any longer (a caller may keep gradients across steps). */
static int new_bucket(nb_dist_reducer *r, nb_dtype t) {
  if (!nbcore_grow_array((void **)&r->buckets, &r->buckets_cap, r->nbuckets + 1, sizeof *r->buckets)) return -1;
  bucket *b = &r->buckets[r->nbuckets];
  nbcore_buffer *block = NULL;
  if (r->nbuckets < r->nbuckets_kept) {
    block = b->block;
    if (block && !nbcore_buffer_exclusive(block)) {
      nbcore_buffer_release(NULL, block);
      block = NULL;
    }
  } else {
    r->nbuckets_kept++;
  }
  memset(b, 0, sizeof *b);
  b->dtype = t;
  b->block = block;
  b->cap = block ? (int64_t)(block->cap / nb_dtype_size(t)) : 0;
  return r->nbuckets++;
}

/* Bucket b with room for at least cap elements of esize bytes, what it holds kept. Its
   block belongs to no context: the reducer outlives the contexts of its passes. */
static bool grow_bucket(bucket *b, int64_t cap, size_t esize) {
  nbcore_buffer *grown = nbcore_buffer_new_shared((size_t)cap * esize);
  if (!grown) return false;
  if (b->count) memcpy(grown->data, b->block->data, (size_t)b->count * esize);
  nbcore_buffer_release(NULL, b->block);
  b->block = grown;
  b->cap = (int64_t)(grown->cap / esize);
  return true;
}

/* Appends variable k's gradient (dense, count elements of t at data) divided by the number
   of ranks to t's open bucket, starting it when full (with overlap; otherwise all start
   after the pass). */
static void place(nb_dist_reducer *r, int k, nb_dtype t, const void *data, int64_t count) {
  int d = t == NB_F64;
  if (r->code) return;
  if (r->open[d] < 0 && (r->open[d] = new_bucket(r, t)) < 0) {
    fail_midpass(r, NB_NOMEM, "out of memory for a gradient bucket");
    return;
  }
  bucket *b = &r->buckets[r->open[d]];
  size_t esize = nb_dtype_size(t);
  if (!b->block || b->count + count > b->cap) {
    int64_t cap = b->count + count, want = (int64_t)(r->bucket_bytes / esize);
    if (!grow_bucket(b, cap > want ? cap : want, esize)) {
      fail_midpass(r, NB_NOMEM, "out of memory for a gradient bucket");
      return;
    }
  }
  /* a gradient's share of the mean, taken as it is copied in (no pass of its own) */
  nbop_divide_into(t, (char *)b->block->data + (size_t)b->count * esize, data, count, nb_dist_size());
  r->bucket_of[k] = r->open[d];
  r->offset_of[k] = b->count;
  b->count += count;
  if ((size_t)b->count * esize >= r->bucket_bytes) {
    r->open[d] = -1;
    if (r->overlap) start(r, b);
  }
  if (r->overlap) progress(r);
}

static void on_ready(void *user, int k, const nb_tensor *grad) {
  if (!nb_is_indexed_slices(grad)) place(user, k, nb_dtype_of(grad), nb_data(grad), nb_num_elements(grad));
}

/* Waits for every started bucket (its sums are the means: place divided each gradient),
   whether or not the pass failed: MPI writes into a started bucket until its reduce
   completes. One that cannot complete (the job broke) is abandoned, neither reused nor
   freed, since MPI may still write into it; the job has to restart then anyway. */
static void await_started(nb_dist_reducer *r) {
  char err[400];
  for (int i = 0; i < r->nbuckets; i++) {
    bucket *b = &r->buckets[i];
    if (b->started && !b->done) {
      nbdist_lock();
      nb_code code = nbdist_check_broken(err, sizeof err);
      if (!code) code = nbdist_wait(&b->req, nbop_collective_default_timeout(), "gradient all-reduce", err, sizeof err);
      nbdist_unlock();
      if (code) {
        fail(r, code, err);
        b->block = NULL;
      }
    }
    b->done = true;
  }
}

/* Starts the buckets not started yet, then waits for all. */
static void finish_buckets(nb_dist_reducer *r) {
  for (int i = 0; i < r->nbuckets; i++)
    if (!r->buckets[i].started) start(r, &r->buckets[i]);
  await_started(r);
}

/* ---- the ranks agree on the variables ------------------------------------------------------ */

/* dtype, rank and dims of each variable, as every rank all-gathers them. */
enum { SIG_WORDS = 2 + NB_MAX_RANK };

static void signature(nb_variable *const *vars, int nv, int64_t *sig) {
  memset(sig, 0, (size_t)nv * SIG_WORDS * sizeof *sig);
  for (int k = 0; k < nv; k++) {
    int64_t *s = sig + (size_t)k * SIG_WORDS;
    s[0] = vars[k]->dtype;
    s[1] = vars[k]->rank;
    memcpy(s + 2, vars[k]->shape, (size_t)vars[k]->rank * sizeof *s);
  }
}

static void name_mismatch(nb_dist_reducer *r, nb_variable *const *vars, int nv, const int64_t *all) {
  const int64_t *mine = all + (size_t)nb_dist_rank() * (1 + (size_t)nv * SIG_WORDS);
  for (int q = 0; q < nb_dist_size(); q++) {
    const int64_t *theirs = all + (size_t)q * (1 + (size_t)nv * SIG_WORDS);
    if (theirs[0] != nv) {
      snprintf(r->err, sizeof r->err, "rank %d passes %d variables, rank %d passes %lld", nb_dist_rank(), nv, q,
               (long long)theirs[0]);
      return;
    }
    for (int k = 0; k < nv; k++) {
      const int64_t *a = mine + 1 + (size_t)k * SIG_WORDS, *b = theirs + 1 + (size_t)k * SIG_WORDS;
      if (memcmp(a, b, SIG_WORDS * sizeof *a) == 0) continue;
      snprintf(r->err, sizeof r->err, "variable '%s' is %s %s on rank %d but %s %s on rank %d", vars[k]->name,
               nb_dtype_name((nb_dtype)a[0]), nbop_sstr((int)a[1], a + 2), nb_dist_rank(),
               nb_dtype_name((nb_dtype)b[0]), nbop_sstr((int)b[1], b + 2), q);
      return;
    }
  }
}

/* NB_INVALID naming the first variable whose dtype or shape differs on some rank. */
static nb_code check_vars(nb_dist_reducer *r, nb_variable *const *vars, int nv) {
  if (!nbdist_active()) return NB_OK;
  size_t words = 1 + (size_t)nv * SIG_WORDS;
  int64_t *all = malloc(words * (size_t)nb_dist_size() * sizeof *all), *mine = malloc(words * sizeof *mine);
  if (!all || !mine) {
    free(all);
    free(mine);
    return fail(r, NB_NOMEM, "out of memory");
  }
  mine[0] = nv;
  signature(vars, nv, mine + 1);
  char err[400];
  MPI_Request req;
  nbdist_lock();
  nb_code code = nbdist_check_broken(err, sizeof err);
  if (!code)
    code =
        nbdist_check(MPI_Iallgather(mine, (int)words, MPI_INT64_T, all, (int)words, MPI_INT64_T, MPI_COMM_WORLD, &req),
                     "MPI_Iallgather", err, sizeof err);
  if (!code) code = nbdist_wait(&req, nbop_collective_default_timeout(), "variable check", err, sizeof err);
  nbdist_unlock();
  if (code) {
    fail(r, code, err);
  } else {
    r->err[0] = 0;
    name_mismatch(r, vars, nv, all);
    if (r->err[0]) r->code = NB_INVALID;
  }
  free(all);
  free(mine);
  return r->code;
}

/* ---- IndexedSlices: all-gathered ---------------------------------------------------------- */

/* Every rank's count of n, then the rows of data (row elements each) in rank order into *out. */
static nb_code gather_rows(nb_dist_reducer *r, const void *data, int64_t n, int64_t row, nb_dtype t, void **out,
                           int64_t *total) {
  int size = nb_dist_size();
  int *counts = malloc((size_t)size * sizeof *counts), *displs = malloc((size_t)size * sizeof *displs);
  int64_t *rows = malloc((size_t)size * sizeof *rows);
  char err[400];
  nb_code code = counts && displs && rows ? NB_OK : fail(r, NB_NOMEM, "out of memory");
  MPI_Request req;
  nbdist_lock();
  if (!code)
    code = nbdist_check(MPI_Iallgather(&n, 1, MPI_INT64_T, rows, 1, MPI_INT64_T, MPI_COMM_WORLD, &req),
                        "MPI_Iallgather", err, sizeof err);
  if (!code) code = nbdist_wait(&req, nbop_collective_default_timeout(), "IndexedSlices gather", err, sizeof err);
  *total = 0;
  for (int q = 0; q < size && !code; q++) {
    counts[q] = (int)(rows[q] * row);
    displs[q] = (int)(*total * row);
    *total += rows[q];
  }
  *out = code ? NULL : malloc((size_t)(*total * row + 1) * nb_dtype_size(t));
  if (!code && !*out) {
    code = NB_NOMEM;
    snprintf(err, sizeof err, "out of memory");
  }
  MPI_Datatype type = nbdist_mpi_type(t);
  if (!code)
    code = nbdist_check(MPI_Iallgatherv(data, (int)(n * row), type, *out, counts, displs, type, MPI_COMM_WORLD, &req),
                        "MPI_Iallgatherv", err, sizeof err);
  if (!code) code = nbdist_wait(&req, nbop_collective_default_timeout(), "IndexedSlices gather", err, sizeof err);
  nbdist_unlock();
  if (code) fail(r, code, err);
  free(counts);
  free(displs);
  free(rows);
  return r->code;
}

/* The IndexedSlices g of every rank, concatenated, values divided by the rank count. */
static nb_tensor *gather_slices(nb_dist_reducer *r, nb_ctx *c, const nb_tensor *g) {
  if (!nbdist_active()) return (nb_tensor *)g;
  nb_tensor *values = nb_indexed_slices_values(g), *indices = nb_cast(c, nb_indexed_slices_indices(g), NB_I64);
  if (!indices) return NULL;
  int64_t n = nb_num_elements(indices), row = n ? nb_num_elements(values) / n : 1, total = 0;
  void *all_values = NULL, *all_indices = NULL;
  nb_tensor *out = NULL;
  if (!gather_rows(r, nb_data(values), n, row, nb_dtype_of(values), &all_values, &total) &&
      !gather_rows(r, nb_data(indices), n, 1, NB_I64, &all_indices, &total)) {
    int64_t shape[NB_MAX_RANK];
    memcpy(shape, nb_shape(values), (size_t)nb_rank(values) * sizeof *shape);
    shape[0] = total;
    nbop_divide_by(nb_dtype_of(values), all_values, total * row, nb_dist_size());
    nb_tensor *v = nb_tensor_from(c, nb_dtype_of(values), nb_rank(values), shape, all_values);
    nb_tensor *i = nb_tensor_from(c, NB_I64, 1, &total, all_indices);
    out = nb_indexed_slices(c, v, i, nb_shape(g), nb_rank(g));
  }
  nb_tensor_free(indices);
  free(all_values);
  free(all_indices);
  return out;
}

/* ---- tapes -------------------------------------------------------------------------------- */

/* Places what the pass did not: gradients no entry finalized (a variable listed twice, or
   one the targets read directly) and, as zeros, variables without one, so that every rank
   brings the same buckets. */
static void place_rest(nb_dist_reducer *r, nb_ctx *c, nb_variable *const *vars, int nv, nb_tensor **out) {
  for (int k = 0; k < nv && !r->code; k++) {
    if (r->bucket_of[k] >= 0 || (out[k] && nb_is_indexed_slices(out[k]))) continue;
    if (!out[k]) out[k] = nb_tensor_from(c, vars[k]->dtype, vars[k]->rank, vars[k]->shape, NULL);
    if (!out[k])
      fail_midpass(r, nb_status(c), nb_error(c));
    else
      place(r, k, vars[k]->dtype, nb_data(out[k]), vars[k]->size);
  }
}

/* Variable k's averaged gradient: a view of its part of its bucket. */
static nb_tensor *average_from_bucket(nb_dist_reducer *r, nb_ctx *c, const nb_variable *v, int k) {
  const bucket *b = &r->buckets[r->bucket_of[k]];
  size_t esize = nb_dtype_size(b->dtype);
  nbcore_buffer *part = nbcore_buffer_view(b->block, (size_t)r->offset_of[k] * esize, (size_t)v->size * esize);
  if (!part) {
    fail(r, NB_NOMEM, "out of memory for an averaged gradient's view");
    return NULL;
  }
  return nbcore_handle_new(c, v->dtype, v->rank, v->shape, part);
}

/* out[k] replaced by its averaged value (dense: from its bucket; slices: gathered). */
static void take_results(nb_dist_reducer *r, nb_ctx *c, nb_variable *const *vars, int nv, nb_tensor **out) {
  for (int k = 0; k < nv && !r->code; k++) {
    nb_tensor *avg = nb_is_indexed_slices(out[k]) ? gather_slices(r, c, out[k]) : average_from_bucket(r, c, vars[k], k);
    if (!avg) {
      fail(r, nb_status(c) ? nb_status(c) : NB_NOMEM, nb_error(c));
    } else if (avg != out[k]) {
      nb_tensor_free(out[k]);
      out[k] = avg;
    }
  }
}

/* A job of one: the tape's gradients are the averages, zeros where a variable has none
   (no bucket copies: one process trains as it would without the reducer). */
static nb_code gradients_alone(nb_ctx *c, nb_tape *t, nb_tensor *const *targets, int nt, nb_variable *const *vars,
                               int nv, nb_tensor **out) {
  nb_code code = nb_tape_gradient_vars(t, targets, nt, vars, nv, out);
  for (int k = 0; k < nv && !code; k++)
    if (!out[k] && !(out[k] = nb_tensor_from(c, vars[k]->dtype, vars[k]->rank, vars[k]->shape, NULL)))
      code = nb_status(c) ? nb_status(c) : NB_NOMEM;
  return code;
}

/* The backward pass with its gradients bucketed and all-reduced across the ranks. */
static nb_code reduce_pass(nb_dist_reducer *r, nb_ctx *c, nb_tape *t, nb_tensor *const *targets, int nt,
                           nb_variable *const *vars, int nv, nb_tensor **out) {
  if (!begin_pass(r, nv)) {
    end_pass(r);
    return nb_set_error(c, NB_NOMEM, "nb_dist_gradient_vars: out of memory");
  }
  nb_code code = check_vars(r, vars, nv);
  if (!code) {
    nbad_tape_set_ready_hook(t, on_ready, r);
    code = nb_tape_gradient_vars(t, targets, nt, vars, nv, out);
    nbad_tape_set_ready_hook(t, NULL, NULL);
  }
  if (!code) {
    place_rest(r, c, vars, nv, out);
    finish_buckets(r);
    take_results(r, c, vars, nv, out);
    code = r->code;
  } else {
    await_started(r); /* MPI may still write into buckets the failed pass started */
  }
  end_pass(r);
  if (code && !nb_status(c)) nb_set_error(c, code, "nb_dist_gradient_vars: %s", r->err);
  return code;
}

nb_code nb_dist_gradient_vars(nb_dist_reducer *r, nb_tape *t, nb_tensor *const *targets, int nt,
                              nb_variable *const *vars, int nv, nb_tensor **out) {
  if (!r || !t) return NB_INVALID;
  nb_ctx *c = t->c;
  for (int k = 0; out && k < nv; k++) out[k] = NULL;
  if (!nbop_live(c)) return nb_status(c);
  if (nv < 0 || (nv > 0 && (!vars || !out)))
    return nb_set_error(c, NB_INVALID, "nb_dist_gradient_vars: vars or out is NULL, or nv is negative");
  for (int k = 0; k < nv; k++)
    if (!vars[k] || vars[k]->freed || !nbcore_is_float(vars[k]->dtype))
      return nb_set_error(c, NB_INVALID, "nb_dist_gradient_vars: vars[%d] is NULL, freed or not float", k);
  nb_code code = nb_dist_size() == 1 ? gradients_alone(c, t, targets, nt, vars, nv, out)
                                     : reduce_pass(r, c, t, targets, nt, vars, nv, out);
  if (code && !nb_status(c)) nb_set_error(c, code, "nb_dist_gradient_vars: out of memory");
  for (int k = 0; code && out && k < nv; k++) {
    nb_tensor_free(out[k]);
    out[k] = NULL;
  }
  return code;
}

/* ---- graphs and sessions ------------------------------------------------------------------ */

/* One bucket of graph gradients grads[first .. last) (dense, one dtype): flattened,
   concatenated, averaged by one CollectiveReduceV2 (Add, Div), split back. */
static void average_bucket(nb_dist_reducer *r, nb_ctx *c, nb_tensor *const *grads, int first, int last,
                           nb_tensor **out) {
  int n = last - first;
  nb_tensor **flat = malloc((size_t)n * sizeof *flat);
  if (!flat) {
    nb_set_error(c, NB_NOMEM, "nb_dist_average_gradients: out of memory");
    return;
  }
  for (int i = 0; i < n; i++) flat[i] = nb_reshape(c, grads[first + i], (int64_t[]){-1}, 1);
  nb_tensor *sum = n == 1 ? flat[0] : nb_concat(c, flat, n, 0);
  nb_tensor *avg = nb_collective_reduce_v2(c, sum, nb_dist_size(), 0, r->instance++, "Add", "Div", 0);
  /* Offsets and sizes as tensors: a graph's gradient may have dims known only at run time
     (Shape folds to a constant where they are known). */
  nb_tensor *at = nb_tensor_from(c, NB_I64, 1, (int64_t[]){1}, (int64_t[]){0});
  for (int i = 0; i < n && nb_status(c) == NB_OK; i++) {
    nb_tensor *shape = nb_shape_op(c, grads[first + i], NB_I64);
    nb_tensor *size = nb_prod(c, shape, (int[]){0}, 1, true); /* [1] */
    out[first + i] = nb_reshape_t(c, nb_slice_t(c, avg, at, size), shape);
    at = nb_add(c, at, size);
  }
  free(flat);
}

/* IndexedSlices of a graph: values and indices gathered (every rank has as many rows). */
static nb_tensor *gather_graph_slices(nb_dist_reducer *r, nb_ctx *c, nb_tensor *g) {
  nb_tensor *values = nb_collective_gather_v2(c, nb_indexed_slices_values(g), nb_dist_size(), 0, r->instance++, 0);
  nb_tensor *indices = nb_collective_gather_v2(c, nb_indexed_slices_indices(g), nb_dist_size(), 0, r->instance++, 0);
  nb_tensor *scaled = nb_real_div(c, values, nb_scalar(c, nb_dtype_of(values), nb_dist_size()));
  return nb_indexed_slices(c, scaled, indices, nb_shape(g), nb_rank(g));
}

nb_code nb_dist_average_gradients(nb_dist_reducer *r, nb_ctx *c, nb_tensor *const *grads, int n, nb_tensor **out) {
  if (!r || !c) return NB_INVALID;
  for (int i = 0; out && out != grads && i < n; i++) out[i] = NULL; /* out may be grads: updated in place */
  if (!nbop_live(c)) return nb_status(c);
  if (n < 0 || (n > 0 && (!grads || !out)))
    return nb_set_error(c, NB_INVALID, "nb_dist_average_gradients: grads or out is NULL, or n is negative");
  int first = -1;
  size_t bytes = 0;
  for (int i = 0; i <= n && nb_status(c) == NB_OK; i++) {
    bool dense = i < n && grads[i] && !nb_is_indexed_slices(grads[i]);
    bool fits = first >= 0 && dense && nb_dtype_of(grads[i]) == nb_dtype_of(grads[first]) && bytes < r->bucket_bytes;
    if (first >= 0 && !fits) {
      average_bucket(r, c, grads, first, i, out);
      first = -1;
      bytes = 0;
    }
    if (i < n && grads[i] && !dense) out[i] = gather_graph_slices(r, c, grads[i]);
    if (dense && first < 0) first = i;
    if (dense && nb_num_elements(grads[i]) > 0) /* unknown dims (-1): counted as none */
      bytes += (size_t)nb_num_elements(grads[i]) * nb_dtype_size(nb_dtype_of(grads[i]));
  }
  return nb_status(c);
}

/* ---- initial values ------------------------------------------------------------------------ */

nb_code nb_dist_broadcast_variables(nb_ctx *c, nb_variable *const *vars, int n) {
  if (!nbop_live(c)) return c ? nb_status(c) : NB_INVALID;
  if (n < 0 || (n > 0 && !vars)) return nb_set_error(c, NB_INVALID, "nb_dist_broadcast_variables: vars is NULL");
  for (int k = 0; k < n; k++)
    if (!vars[k] || vars[k]->freed)
      return nb_set_error(c, NB_INVALID, "nb_dist_broadcast_variables: vars[%d] is NULL or freed", k);
  nb_dist_reducer *r = nb_dist_reducer_new(0);
  if (!r) return nb_set_error(c, NB_NOMEM, "nb_dist_broadcast_variables: out of memory");
  nb_code code = check_vars(r, vars, n);
  char err[400];
  for (int k = 0; k < n && !code && nbdist_active(); k++) {
    void *data = malloc((size_t)vars[k]->size * nb_dtype_size(vars[k]->dtype) + 1);
    if (!data) {
      code = fail(r, NB_NOMEM, "out of memory");
      break;
    }
    memcpy(data, nb_variable_data(vars[k]), (size_t)vars[k]->size * nb_dtype_size(vars[k]->dtype));
    MPI_Request req;
    nbdist_lock();
    code = nbdist_check_broken(err, sizeof err);
    if (!code)
      code =
          nbdist_check(MPI_Ibcast(data, (int)vars[k]->size, nbdist_mpi_type(vars[k]->dtype), 0, MPI_COMM_WORLD, &req),
                       "MPI_Ibcast", err, sizeof err);
    if (!code) code = nbdist_wait(&req, nbop_collective_default_timeout(), "variable broadcast", err, sizeof err);
    nbdist_unlock();
    if (code) fail(r, code, err);
    nb_scope_begin(c);
    if (!code) nb_variable_assign(c, vars[k], nb_tensor_from(c, vars[k]->dtype, vars[k]->rank, vars[k]->shape, data));
    nb_scope_end(c, NULL, 0);
    free(data);
    if (!code) code = nb_status(c);
  }
  if (code && !nb_status(c)) nb_set_error(c, code, "nb_dist_broadcast_variables: %s", r->err);
  nb_dist_reducer_free(r);
  return code;
}
