/* The eager context: ops run their kernel at once and return concrete tensors. */
#include "../ops/op.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Output i as a view of an input's buffer (Reshape, Identity, ...): no copy. */
static nb_tensor *alias_output(nb_ctx *c, const nbop_meta *m, nb_tensor *src) {
  nbcore_buffer_retain(src->buf);
  return nbcore_handle_new(c, m->dtype, m->rank, m->shape, src->buf);
}

static void free_outputs(nb_tensor **out, int n) {
  for (int i = 0; i < n; i++) {
    nb_tensor_free(out[i]);
    out[i] = NULL;
  }
}

/* Whether input x's block can become output m: the caller lets x die at this op
   (forwardable bit i, from a session), nothing else holds the block, and it fits m. */
static bool can_forward(const nb_tensor *x, int i, const nbop_meta *m, uint32_t forwardable) {
  return ((forwardable >> i) & 1u) && x->buf && x->dtype == m->dtype && x->rank == m->rank &&
         nbcore_buffer_exclusive(x->buf) && memcmp(x->shape, m->shape, (size_t)m->rank * sizeof *m->shape) == 0;
}

/* Whether input i's block is also another input of the op. */
static bool read_twice(const nbop_kargs *k, int i) {
  for (int j = 0; j < k->nin; j++)
    if (j != i && k->in[j]->buf == k->in[i]->buf) return true;
  return false;
}

/* TF's input forwarding: an op writes its result over a dying input's block. An
   elementwise op may take input 0 or 1: each output element depends only on the input
   elements at its position, so the kernel may read and write the same block (not
   variadic AddN, whose later inputs are read after the first write). Other ops name the
   one input their kernel can update in place (inplace_input), unless that block is also
   another of their inputs (GEMM's factors must not overlap its result). NULL when none
   qualifies. */
static nb_tensor *forwarded_output(nb_ctx *c, const nbop_kargs *k, const nbop_meta *m, uint32_t forwardable) {
  const nbop_def *def = k->def;
  if (!forwardable || def->alias >= 0) return NULL;
  if (def->inplace_input) {
    int i = def->inplace_input - 1;
    return i < k->nin && can_forward(k->in[i], i, m, forwardable) && !read_twice(k, i) ? alias_output(c, m, k->in[i])
                                                                                       : NULL;
  }
  if (!def->elementwise || def->variadic) return NULL;
  for (int i = 0; i < k->nin && i < 2; i++)
    if (can_forward(k->in[i], i, m, forwardable)) return alias_output(c, m, k->in[i]);
  return NULL;
}

/* Output m in the block its caller placed it in (a session's fetch, see
   nbrt_session_place_fetches): the data is written there directly instead of being
   copied there afterwards (a While loop's accumulators). NULL when none was placed or
   the block's size is not the output's. */
static nb_tensor *placed_output(nb_ctx *c, nbcore_buffer *block, const nbop_meta *m) {
  if (!block || block->cap != (size_t)nbcore_shape_size(m->rank, m->shape) * nb_dtype_size(m->dtype)) return NULL;
  nbcore_buffer_retain(block);
  return nbcore_handle_new(c, m->dtype, m->rank, m->shape, block);
}

/* The inputs (bits, the first 32) whose block is c's forward_block. */
static uint32_t forward_block_inputs(const nb_ctx *c, const nbop_kargs *k) {
  uint32_t bits = 0;
  for (int i = 0; c->forward_block && i < k->nin && i < 32; i++)
    if (k->in[i]->buf == c->forward_block) bits |= 1u << i;
  return bits;
}

static nb_code eager_execute(nb_ctx *c, nbop_kargs *k, nb_tensor **out) {
  const nbop_def *def = k->def;
  uint32_t forwardable = c->forwardable | forward_block_inputs(c, k);
  nbcore_buffer *const *placed = c->placed;
  int nplaced = c->nplaced;
  /* all three were meant for this op: ops a kernel runs itself (a custom gradient's
     forward function, on these very inputs) must not write over them, nor into those blocks */
  c->forwardable = 0;
  c->forward_block = NULL;
  c->placed = NULL;
  c->nplaced = 0;
  for (int i = 0; i < k->nout; i++) {
    const nbop_meta *m = &k->out[i];
    nb_tensor *src = (i == 0 && def->alias >= 0) ? k->in[def->alias] : NULL;
    nb_tensor *in_place = i < nplaced && !(src && src->buf) ? placed_output(c, placed[i], m) : NULL;
    nb_tensor *forwarded = !in_place && i == 0 && k->nout == 1 ? forwarded_output(c, k, m, forwardable) : NULL;
    out[i] = in_place          ? in_place
             : forwarded       ? forwarded
             : src && src->buf ? alias_output(c, m, src)
                               : nbcore_tensor_alloc(c, m->dtype, m->rank, m->shape);
    if (!out[i]) {
      free_outputs(out, i);
      return c->status;
    }
  }
  nb_code code = def->kernel ? def->kernel(k) : NB_OK;
  if (!code && c->record) {
    c->record(c, k, out);
    code = c->status; /* a tape that could not record the op fails the op */
  }
  if (code) free_outputs(out, k->nout);
  return code;
}

nb_ctx *nb_eager_new(void) {
  nbop_registry_init();
  nb_ctx *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->execute = eager_execute;
  c->threads = omp_get_num_procs();
  return c;
}

void nb_ctx_free(nb_ctx *c) {
  if (!c) return;
  if (c->release_tapes) c->release_tapes(c);
  nbcore_ctx_release_all(c);
  free(c->metas);
  free(c->subst);
  free(c);
}

void nb_ctx_set_threads(nb_ctx *c, int n) {
  if (!c || n == c->threads) return; /* function runs set it per loop iteration: no system call then */
  /* More threads than cores never pays inside one op, and asking OpenMP for
     thousands can fail inside the runtime, which then exits the process. */
  int cores = omp_get_num_procs();
  if (n < 1 || n > cores) {
    nbcore_fail(c, NB_INVALID, "nb_ctx_set_threads: thread count %d must be in [1, %d] (the cores here)", n, cores);
    return;
  }
  c->threads = n;
}

int nb_ctx_threads(const nb_ctx *c) { return c ? c->threads : 0; }
