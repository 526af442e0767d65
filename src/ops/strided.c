/* The strided copy engine: see strided.h. */
#include "strided.h"

#include <string.h>

/* Runs LOOP(T) with T the element type of esz bytes. */
#define BY_SIZE(esz, LOOP)           \
  switch (esz) {                     \
    case 1: LOOP(uint8_t); break;    \
    case 2: LOOP(nbop_u16a); break;  \
    case 4: LOOP(nbop_u32a); break;  \
    default: LOOP(nbop_u64a); break; \
  }

#define FILL_LOOP(T)                          \
  do {                                        \
    T v, *d = (T *)dst;                       \
    memcpy(&v, val, sizeof v);                \
    for (int64_t i = 0; i < n; i++) d[i] = v; \
  } while (0)

#define STEP_LOOP(T)                                    \
  do {                                                  \
    T *d = (T *)dst;                                    \
    const T *s = (const T *)src;                        \
    for (int64_t i = 0; i < n; i++) d[i] = s[i * step]; \
  } while (0)

static bool all_zero_bytes(const char *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (v[i]) return false;
  return true;
}

/* dst[0..n) = *val. A value of one byte or of zero bytes is a memset of its first byte. */
static void fill(char *dst, const char *val, size_t esz, int64_t n) {
  if (esz == 1 || all_zero_bytes(val, esz))
    memset(dst, *val, (size_t)n * esz);
  else
    BY_SIZE(esz, FILL_LOOP)
}

/* dst[i] = src[i * step] for i in [0, n): a contiguous output run from any input step. */
static void copy_run(char *dst, const char *src, int64_t step, size_t esz, int64_t n) {
  if (step == 1)
    memcpy(dst, src, (size_t)n * esz);
  else if (step == 0)
    fill(dst, src, esz, n);
  else
    BY_SIZE(esz, STEP_LOOP)
}

static void push(nbop_strided *p, int64_t dim, int64_t in_st, int64_t out_st) {
  p->dims[p->rank] = dim;
  p->in_st[p->rank] = in_st;
  p->out_st[p->rank] = out_st;
  p->rank++;
}

/* The new dim continues the outer one when stepping over all of it lands on the outer
   one's next index; the merged dim keeps the inner strides. Merging while adding gives
   the same plan as merging afterwards, since the condition only involves neighbours. */
void nbop_strided_add(nbop_strided *p, int64_t dim, int64_t in_st, int64_t out_st) {
  if (dim == 1) return;
  int o = p->rank - 1;
  if (o >= 0 && p->in_st[o] == in_st * dim && p->out_st[o] == out_st * dim) {
    p->dims[o] *= dim;
    p->in_st[o] = in_st;
    p->out_st[o] = out_st;
  } else {
    push(p, dim, in_st, out_st);
  }
}

void nbop_odometer_seek(nbop_odometer *w, const nbop_strided *p, int n, int64_t pos) {
  w->p = p;
  w->n = n;
  w->in = w->out = 0;
  for (int d = n - 1; d >= 0; d--) {
    w->idx[d] = pos % p->dims[d];
    pos /= p->dims[d];
    w->in += w->idx[d] * p->in_st[d];
    w->out += w->idx[d] * p->out_st[d];
  }
}

void nbop_odometer_next(nbop_odometer *w) {
  const nbop_strided *p = w->p;
  for (int d = w->n - 1; d >= 0; d--) {
    w->in += p->in_st[d];
    w->out += p->out_st[d];
    if (++w->idx[d] < p->dims[d]) return;
    w->in -= p->in_st[d] * p->dims[d];
    w->out -= p->out_st[d] * p->dims[d];
    w->idx[d] = 0;
  }
}

typedef struct run_job {
  const nbop_strided *p; /* its innermost dim has output stride 1 */
  const char *in;
  char *out;
  size_t esz;
} run_job;

/* Units [lo, hi): for a one-dim plan its elements, otherwise whole runs of the innermost
   dim, with the outer dims walked by an odometer. */
static void run_range(void *arg, int64_t lo, int64_t hi) {
  const run_job *j = arg;
  const nbop_strided *p = j->p;
  int last = p->rank - 1;
  int64_t step = p->in_st[last], esz = (int64_t)j->esz;
  if (last == 0) {
    copy_run(j->out + lo * esz, j->in + lo * step * esz, step, j->esz, hi - lo);
    return;
  }
  nbop_odometer w;
  nbop_odometer_seek(&w, p, last, lo);
  for (int64_t r = lo; r < hi; r++, nbop_odometer_next(&w))
    copy_run(j->out + w.out * esz, j->in + w.in * esz, step, j->esz, p->dims[last]);
}

void nbop_strided_run(const nbop_kargs *k, const nbop_strided *p, const void *in, void *out, size_t esz) {
  nbop_strided q = *p;
  int64_t total = 1;
  for (int d = 0; d < q.rank; d++) total *= q.dims[d];
  if (total == 0) return;
  /* runs are contiguous in the output; when the innermost dim is not, runs are elements */
  if (q.rank == 0 || q.out_st[q.rank - 1] != 1) push(&q, 1, 1, 1);
  run_job j = {&q, in, out, esz};
  int last = q.rank - 1;
  int64_t units = last == 0 ? q.dims[0] : total / q.dims[last];
  nbop_parallel_range(nbop_kthreads(k, total), units, run_range, &j);
}

void nbop_strided_fill(const nbop_kargs *k, void *out, const void *val, size_t esz, int64_t n) {
  nbop_strided p = {0};
  nbop_strided_add(&p, n, 0, 1);
  nbop_strided_run(k, &p, val, out, esz);
}

void nbop_row_major_strides(int rank, const int64_t *shape, int64_t *st) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    st[i] = s;
    s *= shape[i];
  }
}
