/* Convolution and pooling (TF's nn_ops.cc): Conv2D with its two backprops, MaxPool,
   MaxPoolGrad, MaxPoolGradGrad, AvgPool, AvgPoolGrad, BiasAdd and BiasAddGrad.

   Kernels work on NHWC data; NCHW operands are transposed into NHWC scratch and the
   result back. A convolution is im2col + GEMM: a block of images becomes one matrix
   col [images * out pixels, kh * kw * in_channels] (a patch per row, in the filter's
   [kh, kw, in, out] order), so
     forward          y  = col W                 (W: the filter as [kh kw in, out])
     backprop input   dcol = dy W^T, then col2im adds each patch row back into dx
     backprop filter  dW = col^T dy              (summed over image blocks)
   all without transposing anything. A 1x1 filter at stride 1 without padding needs no
   im2col: the input is col. With one input channel the column matrix is built transposed
   (whole output rows copied at once) and the GEMMs take it with a transpose flag. Threads
   split the batch, one single-threaded GEMM each.

   Float32 Conv2D and its backprops first try oneDNN (onednn.h) over the tensors' own
   NHWC or NCHW buffers; the im2col kernels run for float64 and where oneDNN fails.
   Pools keep the own kernels: oneDNN's were measured slower on bench/conv's pools
   (AVX2, channels 6 and 16), and its MaxPool skips NaNs where TF's gives NaN (its
   gradient would route to no NaN where TF routes to a window's first one). */
#include "blas.h"
#include "onednn.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- window geometry ----------------------------------------------------------------- */

/* The padding attr's choices, in pad_mode's order; the layouts' in data_format's. */
typedef enum { PAD_SAME, PAD_VALID, PAD_EXPLICIT } pad_mode;
static const char *const paddings[] = {"SAME", "VALID", "EXPLICIT", NULL};
static const char *const implicit_paddings[] = {"SAME", "VALID", NULL};
static const char *const formats[] = {"NHWC", "NCHW", NULL};
enum { FORMAT_NHWC, FORMAT_NCHW };

/* A sliding window over an image batch, dims in NHWC terms whatever the layout. */
typedef struct geom {
  int64_t n, h, w, c;             /* input */
  int64_t oh, ow, oc;             /* output (oc: out channels; pools keep c) */
  int64_t kh, kw, sh, sw, dh, dw; /* window, strides, dilations */
  int64_t pt, pl;                 /* padding before the rows and the columns */
  bool nchw;
} geom;
_Static_assert(sizeof(geom) <= NBOP_SCRATCH_BYTES, "geom must fit the scratch");

/* Window attrs above this are refused, so window arithmetic cannot overflow. */
#define WINDOW_MAX ((int64_t)1 << 30)
#define SPATIAL_MAX ((int64_t)1 << 31) /* input rows/cols and window rows/cols */

/* A 4-value window attr (strides, dilations, ksize) in the layout's order: each in
   [1, WINDOW_MAX] and 1 on the batch and channel dims. Gives the (rows, cols) pair. */
static nb_code parse_window_attr(nbop_kargs *k, int slot, bool nchw, int64_t *rows, int64_t *cols) {
  const nbop_attrval *a = &k->attr[slot];
  const char *name = k->def->attrs[slot].name;
  if (a->n != 4) return nbop_kfail(k, NB_INVALID, "%s must have 4 values, got %d", name, a->n);
  for (int i = 0; i < 4; i++)
    if (a->ints[i] < 1 || a->ints[i] > WINDOW_MAX)
      return nbop_kfail(k, NB_INVALID, "%s must be in [1, %lld], got %s", name, (long long)WINDOW_MAX,
                        nbop_sstr(4, a->ints));
  int hd = nchw ? 2 : 1, cd = nchw ? 1 : 3;
  if (a->ints[0] != 1 || a->ints[cd] != 1)
    return nbop_kfail(k, NB_UNIMPLEMENTED, "%s on the batch and channel dims must be 1, got %s (data_format %s)", name,
                      nbop_sstr(4, a->ints), nchw ? "NCHW" : "NHWC");
  *rows = a->ints[hd];
  *cols = a->ints[hd + 1];
  return NB_OK;
}

/* explicit_paddings: 8 values (a before/after pair per dim, layout order) with EXPLICIT,
   none otherwise; only the spatial pairs may be nonzero. pad = top, bottom, left, right. */
static nb_code parse_explicit(nbop_kargs *k, int slot, pad_mode m, bool nchw, int64_t pad[4]) {
  const nbop_attrval *a = &k->attr[slot];
  memset(pad, 0, 4 * sizeof *pad);
  if (m != PAD_EXPLICIT) {
    if (a->n != 0)
      return nbop_kfail(k, NB_INVALID, "explicit_paddings must be empty unless padding is \"EXPLICIT\", got %d values",
                        a->n);
    return NB_OK;
  }
  if (a->n != 8)
    return nbop_kfail(k, NB_INVALID, "explicit_paddings must have 8 values with padding \"EXPLICIT\", got %d", a->n);
  int hd = nchw ? 2 : 1, cd = nchw ? 1 : 3;
  for (int i = 0; i < 8; i++)
    if (a->ints[i] < 0 || a->ints[i] > WINDOW_MAX)
      return nbop_kfail(k, NB_INVALID, "explicit_paddings must be in [0, %lld], got %s", (long long)WINDOW_MAX,
                        nbop_sstr(8, a->ints));
  if (a->ints[0] || a->ints[1] || a->ints[2 * cd] || a->ints[2 * cd + 1])
    return nbop_kfail(k, NB_UNIMPLEMENTED, "explicit_paddings on the batch and channel dims must be 0, got %s",
                      nbop_sstr(8, a->ints));
  for (int i = 0; i < 4; i++) pad[i] = a->ints[2 * hd + i];
  return NB_OK;
}

/* TF's windowed output size along one dim and the padding before it. */
static int64_t out_size(int64_t in, int64_t k, int64_t d, int64_t s, pad_mode m, int64_t pb, int64_t pa,
                        int64_t *before) {
  int64_t eff = (k - 1) * d + 1, out;
  *before = pb;
  if (m == PAD_VALID) {
    out = (in - eff + s) / s;
  } else if (m == PAD_SAME) {
    out = (in + s - 1) / s;
    int64_t need = (out - 1) * s + eff - in;
    *before = need > 0 ? need / 2 : 0;
  } else {
    out = (in + pb + pa - eff + s) / s;
  }
  return out;
}

/* Fills g's output size and padding (g's input, window, strides and dilations set);
   shapes describes the operands for the message. */
static nb_code finish_geom(nbop_kargs *k, geom *g, pad_mode m, const int64_t pad[4], const char *shapes) {
  /* an empty tensor, or a shape operand, can carry any dims: bounded, the window
     arithmetic below cannot overflow (window * dilation <= 2^61) */
  if (g->h > SPATIAL_MAX || g->w > SPATIAL_MAX || g->kh > SPATIAL_MAX || g->kw > SPATIAL_MAX)
    return nbop_kfail(
        k, NB_SHAPE, "spatial and window dims must be at most %lld, got input %lldx%lld, window %lldx%lld (%s)",
        (long long)SPATIAL_MAX, (long long)g->h, (long long)g->w, (long long)g->kh, (long long)g->kw, shapes);
  g->oh = out_size(g->h, g->kh, g->dh, g->sh, m, pad[0], pad[1], &g->pt);
  g->ow = out_size(g->w, g->kw, g->dw, g->sw, m, pad[2], pad[3], &g->pl);
  if (g->oh < 0 || g->ow < 0)
    return nbop_kfail(k, NB_SHAPE,
                      "computed output size would be negative: window %lldx%lld (dilations %lldx%lld) over input "
                      "%lldx%lld with padding %s (%s)",
                      (long long)g->kh, (long long)g->kw, (long long)g->dh, (long long)g->dw, (long long)g->h,
                      (long long)g->w,
                      m == PAD_VALID  ? "VALID"
                      : m == PAD_SAME ? "SAME"
                                      : "EXPLICIT",
                      shapes);
  return NB_OK;
}

/* g's input dims from a 4-D shape in the layout. */
static void set_input_dims(geom *g, const int64_t *s) {
  g->n = s[0];
  g->h = s[g->nchw ? 2 : 1];
  g->w = s[g->nchw ? 3 : 2];
  g->c = s[g->nchw ? 1 : 3];
}

/* A 4-D shape in g's layout from NHWC-order dims. */
static void layout_dims(const geom *g, int64_t n, int64_t h, int64_t w, int64_t c, int64_t *s) {
  s[0] = n;
  s[g->nchw ? 2 : 1] = h;
  s[g->nchw ? 3 : 2] = w;
  s[g->nchw ? 1 : 3] = c;
}

/* The window attrs every conv and pool op has, checked: layout, padding mode, strides and
   explicit paddings into g and *m, pad (validate runs this too, so infer's call cannot fail). */
static nb_code window_attrs(nbop_kargs *k, int format_slot, int padding_slot, int strides_slot, int explicit_slot,
                            geom *g, pad_mode *m, int64_t pad[4]) {
  g->nchw = nbop_kchoice(k, format_slot) == FORMAT_NCHW;
  *m = (pad_mode)nbop_kchoice(k, padding_slot);
  memset(pad, 0, 4 * sizeof *pad);
  nb_code code = parse_window_attr(k, strides_slot, g->nchw, &g->sh, &g->sw);
  if (!code && explicit_slot >= 0) code = parse_explicit(k, explicit_slot, *m, g->nchw, pad);
  return code;
}

static nb_code check_float(nbop_kargs *k, int i) {
  if (!(NBOP_M(k->in[i]->dtype) & NBOP_M_FLOAT))
    return nbop_kfail(k, NB_DTYPE, "input %d has dtype %s; %s supports float32 and float64", i,
                      nb_dtype_name(k->in[i]->dtype), k->def->name);
  return NB_OK;
}

static nb_code check_float_pair(nbop_kargs *k, int i, int j) {
  nb_code code = check_float(k, i);
  return code ? code : nbop_kcheck_same_dtype(k, i, j);
}

/* The 4 values of int input i (a shape: input_sizes, filter_sizes, orig_input_shape);
   NBOP_DEFER while not known. */
static nb_code shape_input(nbop_kargs *k, int i, const char *what, int64_t *s) {
  int n = 0;
  nb_code code = nbop_kcheck_dtype(k, i, NBOP_M_INT);
  if (!code) code = nbop_kints(k, i, 1, s, 4, &n);
  if (code) return code;
  if (n != 4) return nbop_kfail(k, NB_SHAPE, "%s must have 4 values, got %d", what, n);
  for (int d = 0; d < 4; d++)
    if (s[d] < 0) return nbop_kfail(k, NB_SHAPE, "%s must be nonnegative, got %s", what, nbop_sstr(4, s));
  return NB_OK;
}

/* Inputs of ranks[i] where known; ranks[i] 0 marks a shape operand: 4 int values >= 0
   where known. */
static nb_code check_operands(nbop_kargs *k, const int *ranks, const char *const *names) {
  for (int i = 0; i < k->nin; i++) {
    int64_t s[4];
    nb_code code =
        ranks[i] == 0 ? shape_input(k, i, names[i], s) : nbop_kcheck_rank(k, i, ranks[i], ranks[i], names[i]);
    if (code && code != NBOP_DEFER) return code;
  }
  return NB_OK;
}

/* Fails unless input i has shape want (what the op's other operands imply). */
static nb_code check_shape(nbop_kargs *k, int i, const char *what, const int64_t *want, const char *shapes) {
  const nb_tensor *x = k->in[i];
  bool same = x->rank == 4;
  for (int d = 0; same && d < 4; d++) same = x->shape[d] == want[d];
  if (!same)
    return nbop_kfail(k, NB_SHAPE, "%s has shape %s, expected %s (%s)", what, nbop_tstr(x), nbop_sstr(4, want), shapes);
  return NB_OK;
}

/* ---- convolution: infer -------------------------------------------------------------- */

enum { C_STRIDES, C_USE_CUDNN, C_PADDING, C_EXPLICIT, C_FORMAT, C_DILATIONS };

/* A convolution's attrs into g (layout, strides, dilations) and *m, pad. */
static nb_code conv_attrs(nbop_kargs *k, geom *g, pad_mode *m, int64_t pad[4]) {
  nb_code code = window_attrs(k, C_FORMAT, C_PADDING, C_STRIDES, C_EXPLICIT, g, m, pad);
  return code ? code : parse_window_attr(k, C_DILATIONS, g->nchw, &g->dh, &g->dw);
}

/* The input's channels c match the filter's in_channels fc, where both are known. */
static nb_code check_depth(nbop_kargs *k, int64_t c, int64_t fc, const char *shapes) {
  if (c < 0 || fc < 0 || c == fc) return NB_OK;
  return nbop_kfail(k, NB_SHAPE, "input depth %lld does not match filter in_channels %lld (%s)", (long long)c,
                    (long long)fc, shapes);
}

/* Geometry of a convolution of input dims in[4] (layout order) with filter dims f[4]. */
static nb_code conv_geom(nbop_kargs *k, const int64_t *in, const int64_t *f, const char *shapes, geom *g) {
  pad_mode m = PAD_VALID;
  int64_t pad[4];
  nb_code code = conv_attrs(k, g, &m, pad);
  if (code) return code;
  set_input_dims(g, in);
  g->kh = f[0];
  g->kw = f[1];
  g->oc = f[3];
  nb_code depth = check_depth(k, g->c, f[2], shapes);
  if (depth) return depth;
  if (g->kh == 0 || g->kw == 0) return nbop_kfail(k, NB_SHAPE, "filter window must be nonempty (%s)", shapes);
  return finish_geom(k, g, m, pad, shapes);
}

/* Graph builds infer unknown dims by probing infer with made-up sizes, and an output size
   that is a difference of two unknown sizes (input minus window) can agree across probes
   by chance. So an output row or column count is marked unknown outright where the
   caller's input in_i (or filter f_i, -1 none) has that size unknown. */
static void unknown_spatial(const nbop_kargs *k, const geom *g, int in_i, int f_i, int64_t *s) {
  int hd = g->nchw ? 2 : 1;
  const nb_tensor *x = k->orig_in[in_i], *f = f_i >= 0 ? k->orig_in[f_i] : NULL;
  for (int d = 0; d < 2; d++)
    if (x->shape[hd + d] < 0 || (f && f->shape[d] < 0)) s[hd + d] = -1;
}

typedef enum { CONV_FORWARD, CONV_BACKPROP_INPUT, CONV_BACKPROP_FILTER } conv_kind;

/* Conv2D(input, filter) -> y; Conv2DBackpropInput(input_sizes, filter, out_backprop) -> dx
   of shape input_sizes; Conv2DBackpropFilter(input, filter_sizes, out_backprop) -> dW of
   shape filter_sizes. One of input and filter may come as a shape operand; the backprops'
   out_backprop must have the shape Conv2D would give. */
static nb_code conv_validate_as(nbop_kargs *k, conv_kind kind) {
  static const char *const names[3][3] = {
      {"input", "filter"}, {"input_sizes", "filter", "out_backprop"}, {"input", "filter_sizes", "out_backprop"}};
  static const int ranks[3][3] = {{4, 4}, {0, 4, 4}, {4, 0, 4}};
  geom g;
  pad_mode m;
  int64_t pad[4];
  nb_code code = check_float_pair(k, kind == CONV_BACKPROP_INPUT ? 1 : 0, kind == CONV_FORWARD ? 1 : 2);
  if (!code) code = conv_attrs(k, &g, &m, pad);
  if (!code) code = check_operands(k, ranks[kind], names[kind]);
  const nb_tensor *x = k->in[0], *w = k->in[1];
  if (code || kind != CONV_FORWARD || x->rank < 0 || w->rank < 0) return code;
  char shapes[200];
  snprintf(shapes, sizeof shapes, "input %s, filter %s", nbop_tstr(x), nbop_tstr(w));
  return check_depth(k, x->shape[g.nchw ? 1 : 3], w->shape[2], shapes);
}

static nb_code conv2d_validate(nbop_kargs *k) { return conv_validate_as(k, CONV_FORWARD); }
static nb_code backprop_input_validate(nbop_kargs *k) { return conv_validate_as(k, CONV_BACKPROP_INPUT); }
static nb_code backprop_filter_validate(nbop_kargs *k) { return conv_validate_as(k, CONV_BACKPROP_FILTER); }

static nb_code conv_infer_as(nbop_kargs *k, conv_kind kind) {
  bool input_sizes = kind == CONV_BACKPROP_INPUT, filter_sizes = kind == CONV_BACKPROP_FILTER;
  int first = input_sizes ? 1 : 0; /* the first operand that is not a shape */
  int64_t in[4], f[4], out[4];
  nb_code code = input_sizes ? shape_input(k, 0, "input_sizes", in) : NB_OK;
  if (!code && filter_sizes) code = shape_input(k, 1, "filter_sizes", f);
  if (code) return code;
  if (!input_sizes) memcpy(in, k->in[0]->shape, sizeof in);
  if (!filter_sizes) memcpy(f, k->in[1]->shape, sizeof f);
  char shapes[200];
  snprintf(shapes, sizeof shapes, "%s %s, %s %s%s%s", input_sizes ? "input_sizes" : "input", nbop_sstr(4, in),
           filter_sizes ? "filter_sizes" : "filter", nbop_sstr(4, f), kind == CONV_FORWARD ? "" : ", out_backprop ",
           kind == CONV_FORWARD ? "" : nbop_tstr(k->in[2]));
  geom *g = (geom *)k->scratch;
  code = conv_geom(k, in, f, shapes, g);
  if (code) return code;
  layout_dims(g, g->n, g->oh, g->ow, g->oc, out);
  nb_dtype t = k->in[first]->dtype;
  if (kind == CONV_FORWARD) {
    unknown_spatial(k, g, 0, 1, out);
    nbop_meta_set(&k->out[0], t, 4, out);
    return NB_OK;
  }
  code = check_shape(k, 2, "out_backprop", out, shapes);
  if (!code) nbop_meta_set(&k->out[0], t, 4, input_sizes ? in : f);
  return code;
}

static nb_code conv2d_infer(nbop_kargs *k) { return conv_infer_as(k, CONV_FORWARD); }
static nb_code backprop_input_infer(nbop_kargs *k) { return conv_infer_as(k, CONV_BACKPROP_INPUT); }
static nb_code backprop_filter_infer(nbop_kargs *k) { return conv_infer_as(k, CONV_BACKPROP_FILTER); }

/* ---- layout and element helpers ------------------------------------------------------ */

/* Bytes from which memcpy and memset (vectorized for the machine at hand) beat a
   plain loop despite the call. */
#define LIBC_COPY_BYTES 64

/* Elements are moved as same-size integers (a copy needs no arithmetic). */
static inline void copy_elems(char *dst, const char *src, int64_t n, size_t esz) {
  if ((size_t)n * esz >= LIBC_COPY_BYTES)
    memcpy(dst, src, (size_t)n * esz);
  else if (esz == 4)
    for (int64_t i = 0; i < n; i++) ((uint32_t *)dst)[i] = ((const uint32_t *)src)[i];
  else
    for (int64_t i = 0; i < n; i++) ((uint64_t *)dst)[i] = ((const uint64_t *)src)[i];
}

static inline void zero_elems(char *dst, int64_t n, size_t esz) {
  if ((size_t)n * esz >= LIBC_COPY_BYTES)
    memset(dst, 0, (size_t)n * esz);
  else if (esz == 4)
    for (int64_t i = 0; i < n; i++) ((uint32_t *)dst)[i] = 0;
  else
    for (int64_t i = 0; i < n; i++) ((uint64_t *)dst)[i] = 0;
}

/* dst[i] = src[i * stride] for i < n. */
static inline void copy_strided(char *dst, const char *src, int64_t n, int64_t stride, size_t esz) {
  if (stride == 1)
    copy_elems(dst, src, n, esz);
  else if (esz == 4)
    for (int64_t i = 0; i < n; i++) ((uint32_t *)dst)[i] = ((const uint32_t *)src)[i * stride];
  else
    for (int64_t i = 0; i < n; i++) ((uint64_t *)dst)[i] = ((const uint64_t *)src)[i * stride];
}

/* dst[i * stride] += src[i] for i < n. */
static inline void add_strided(nb_dtype t, char *dst, const char *src, int64_t n, int64_t stride) {
  if (t == NB_F32)
    for (int64_t i = 0; i < n; i++) ((float *)dst)[i * stride] += ((const float *)src)[i];
  else
    for (int64_t i = 0; i < n; i++) ((double *)dst)[i * stride] += ((const double *)src)[i];
}

static inline void add_elems(nb_dtype t, char *dst, const char *src, int64_t n) {
  if (t == NB_F32)
    for (int64_t i = 0; i < n; i++) ((float *)dst)[i] += ((const float *)src)[i];
  else
    for (int64_t i = 0; i < n; i++) ((double *)dst)[i] += ((const double *)src)[i];
}

/* n images of c channels and hw pixels: [n, c, hw] -> [n, hw, c], or back when to_nchw.
   Elements move as same-size integers. */
#define TRANSPOSE_LOOP(U)                                                        \
  for (int64_t b = 0; b < n; b++)                                                \
    for (int64_t ch = 0; ch < c; ch++)                                           \
      for (int64_t p = 0; p < hw; p++) {                                         \
        int64_t chw = (b * c + ch) * hw + p, hwc = (b * hw + p) * c + ch;        \
        ((U *)dst)[to_nchw ? chw : hwc] = ((const U *)src)[to_nchw ? hwc : chw]; \
      }

static void transpose_layout(const char *src, char *dst, int64_t n, int64_t c, int64_t hw, size_t esz, bool to_nchw) {
  if (esz == 4) {
    TRANSPOSE_LOOP(uint32_t)
  } else {
    TRANSPOSE_LOOP(uint64_t)
  }
}

/* x's data as NHWC: its own buffer, or a transposed copy in *tmp (the caller frees it).
   NULL when out of memory. dims: n, h, w, c. */
static const char *as_nhwc(nb_ctx *c, const nb_tensor *x, bool nchw, const int64_t *dims, void **tmp) {
  *tmp = NULL;
  if (!nchw || x->size == 0) return nbcore_tdata(x);
  size_t esz = nb_dtype_size(x->dtype);
  if (!(*tmp = nbcore_scratch_alloc(c, (size_t)x->size * esz))) return NULL;
  transpose_layout(nbcore_tdata(x), *tmp, dims[0], dims[3], dims[1] * dims[2], esz, false);
  return *tmp;
}

/* Where a kernel writes its NHWC result: res's buffer, or scratch for an NCHW result. */
static char *out_nhwc(nb_ctx *c, nb_tensor *res, bool nchw, void **tmp) {
  *tmp = NULL;
  if (!nchw || res->size == 0) return nbcore_tdata(res);
  return *tmp = nbcore_scratch_alloc(c, (size_t)res->size * nb_dtype_size(res->dtype));
}

static void release_all(nb_ctx *c, void *const *scratch, int n) {
  for (int i = 0; i < n; i++) nbcore_scratch_free(c, scratch[i]);
}

/* Moves an NHWC result (dims n, h, w, c) from tmp into res (NCHW) and frees tmp. */
static void finish_out(nb_ctx *c, nb_tensor *res, void *tmp, const int64_t *dims) {
  if (!tmp) return;
  transpose_layout(tmp, nbcore_tdata(res), dims[0], dims[3], dims[1] * dims[2], nb_dtype_size(res->dtype), true);
  nbcore_scratch_free(c, tmp);
}

/* ---- convolution: kernels ------------------------------------------------------------ */

/* Column bytes a thread fills per GEMM: a block of images whose columns stay in cache. */
#define COL_BLOCK_BYTES ((int64_t)256 << 10)

typedef struct conv_job {
  const geom *g;
  nb_dtype t;
  size_t esz;
  const char *x, *f, *dy; /* NHWC input, filter [kh, kw, c, oc], NHWC out gradient */
  char *out;              /* y, dx, or dW (thread 0's partial sum) */
  char *partials;         /* backprop filter: dW partial sums of threads 1.. */
  char *cols;             /* one column buffer per thread */
  int64_t col_elems;      /* elements per column buffer */
  int64_t block;          /* images per GEMM */
  bool direct;            /* 1x1, stride 1, no padding: the input is its own col */
  bool planar;            /* col is stored transposed (see im2col_planar) */
} conv_job;

static int64_t patch_size(const geom *g) { return g->kh * g->kw * g->c; }

/* The indices i in [0, count) with start + i * step in [0, limit): [*lo, *hi). */
static void inside(int64_t start, int64_t step, int64_t limit, int64_t count, int64_t *lo, int64_t *hi) {
  *lo = start >= 0 ? 0 : (-start + step - 1) / step;
  *hi = limit - start <= 0 ? 0 : (limit - start + step - 1) / step;
  if (*hi > count) *hi = count;
  if (*lo > *hi) *lo = *hi;
}

/* Fills one column row: the patch of image img at output pixel (oy, ox), zeros where it
   reaches into the padding. */
static void im2col_row(const geom *g, const char *img, int64_t oy, int64_t ox, char *row, size_t esz) {
  int64_t span = g->kw * g->c, ix0 = ox * g->sw - g->pl, k0, k1;
  inside(ix0, g->dw, g->w, g->kw, &k0, &k1); /* the window columns inside the image */
  for (int64_t ky = 0; ky < g->kh; ky++, row += (size_t)span * esz) {
    int64_t iy = oy * g->sh - g->pt + ky * g->dh;
    if (iy < 0 || iy >= g->h) {
      zero_elems(row, span, esz);
      continue;
    }
    int64_t base = (iy * g->w + ix0) * g->c; /* element of column kx = 0, maybe in the padding */
    zero_elems(row, k0 * g->c, esz);
    if (g->dw == 1)
      copy_elems(row + (size_t)(k0 * g->c) * esz, img + (size_t)(base + k0 * g->c) * esz, (k1 - k0) * g->c, esz);
    else
      for (int64_t kx = k0; kx < k1; kx++)
        copy_elems(row + (size_t)(kx * g->c) * esz, img + (size_t)(base + kx * g->dw * g->c) * esz, g->c, esz);
    zero_elems(row + (size_t)(k1 * g->c) * esz, (g->kw - k1) * g->c, esz);
  }
}

/* The inverse scatter: adds one column row into image img's pixels (padding dropped). */
static void col2im_row(const geom *g, nb_dtype t, const char *row, int64_t oy, int64_t ox, char *img, size_t esz) {
  int64_t span = g->kw * g->c, ix0 = ox * g->sw - g->pl, k0, k1;
  inside(ix0, g->dw, g->w, g->kw, &k0, &k1); /* the window columns inside the image */
  for (int64_t ky = 0; ky < g->kh; ky++, row += (size_t)span * esz) {
    int64_t iy = oy * g->sh - g->pt + ky * g->dh;
    if (iy < 0 || iy >= g->h) continue;
    int64_t base = (iy * g->w + ix0) * g->c;
    if (g->dw == 1)
      add_elems(t, img + (size_t)(base + k0 * g->c) * esz, row + (size_t)(k0 * g->c) * esz, (k1 - k0) * g->c);
    else
      for (int64_t kx = k0; kx < k1; kx++)
        add_elems(t, img + (size_t)(base + kx * g->dw * g->c) * esz, row + (size_t)(kx * g->c) * esz, g->c);
  }
}

/* The column matrix of images [n0, n0 + b): in col, or the input itself when direct. */
static const char *im2col(const conv_job *j, int64_t n0, int64_t b, char *col) {
  const geom *g = j->g;
  size_t img_bytes = (size_t)(g->h * g->w * g->c) * j->esz, row_bytes = (size_t)patch_size(g) * j->esz;
  if (j->direct) return j->x + (size_t)n0 * img_bytes;
  for (int64_t i = 0; i < b; i++)
    for (int64_t oy = 0; oy < g->oh; oy++)
      for (int64_t ox = 0; ox < g->ow; ox++, col += row_bytes)
        im2col_row(g, j->x + (size_t)(n0 + i) * img_bytes, oy, ox, col, j->esz);
  return col - (size_t)(b * g->oh * g->ow) * row_bytes;
}

/* The transposed column matrix of images [n0, n0 + b): row (ky, kx, ci) holds that patch
   element for every output pixel of the block, so an output row's run is one strided read
   of an input row (a plain copy with one channel and stride 1). Used for one channel,
   where the patch rows of im2col would be copied a few elements at a time. */
static void im2col_planar(const conv_job *j, int64_t n0, int64_t b, char *col) {
  const geom *g = j->g;
  size_t esz = j->esz;
  for (int64_t ky = 0; ky < g->kh; ky++)
    for (int64_t kx = 0; kx < g->kw; kx++)
      for (int64_t ci = 0; ci < g->c; ci++) {
        int64_t ix0 = kx * g->dw - g->pl, o0, o1;
        inside(ix0, g->sw, g->w, g->ow, &o0, &o1); /* the output columns reading inside */
        for (int64_t i = 0; i < b; i++)
          for (int64_t oy = 0; oy < g->oh; oy++, col += (size_t)g->ow * esz) {
            int64_t iy = oy * g->sh - g->pt + ky * g->dh;
            if (iy < 0 || iy >= g->h) {
              zero_elems(col, g->ow, esz);
              continue;
            }
            int64_t first = (((n0 + i) * g->h + iy) * g->w + ix0 + o0 * g->sw) * g->c + ci;
            zero_elems(col, o0, esz);
            copy_strided(col + (size_t)o0 * esz, j->x + (size_t)first * esz, o1 - o0, g->sw * g->c, esz);
            zero_elems(col + (size_t)o1 * esz, g->ow - o1, esz);
          }
      }
}

/* Adds a transposed column matrix (as im2col_planar's) back into images dx[0..b). */
static void col2im_planar(const conv_job *j, int64_t b, const char *col, char *dx) {
  const geom *g = j->g;
  size_t esz = j->esz;
  for (int64_t ky = 0; ky < g->kh; ky++)
    for (int64_t kx = 0; kx < g->kw; kx++)
      for (int64_t ci = 0; ci < g->c; ci++) {
        int64_t ix0 = kx * g->dw - g->pl, o0, o1;
        inside(ix0, g->sw, g->w, g->ow, &o0, &o1);
        for (int64_t i = 0; i < b; i++)
          for (int64_t oy = 0; oy < g->oh; oy++, col += (size_t)g->ow * esz) {
            int64_t iy = oy * g->sh - g->pt + ky * g->dh;
            if (iy < 0 || iy >= g->h) continue;
            int64_t first = ((i * g->h + iy) * g->w + ix0 + o0 * g->sw) * g->c + ci;
            add_strided(j->t, dx + (size_t)first * esz, col + (size_t)o0 * esz, o1 - o0, g->sw * g->c);
          }
      }
}

static char *thread_col(const conv_job *j) {
  return j->cols ? j->cols + (size_t)(nbop_range_slot() * j->col_elems) * j->esz : NULL;
}

static void forward_range(void *arg, int64_t lo, int64_t hi) {
  const conv_job *j = arg;
  const geom *g = j->g;
  int64_t pix = g->oh * g->ow, kk = patch_size(g);
  char *col = thread_col(j);
  for (int64_t n0 = lo; n0 < hi; n0 += j->block) {
    int64_t b = hi - n0 < j->block ? hi - n0 : j->block;
    char *y = j->out + (size_t)(n0 * pix * g->oc) * j->esz;
    if (j->planar) { /* y = (col^T)^T W */
      im2col_planar(j, n0, b, col);
      nbop_gemm(j->t, true, false, b * pix, g->oc, kk, col, b * pix, j->f, g->oc, 0, y, g->oc);
    } else {
      nbop_gemm(j->t, false, false, b * pix, g->oc, kk, im2col(j, n0, b, col), kk, j->f, g->oc, 0, y, g->oc);
    }
  }
}

static void backprop_input_range(void *arg, int64_t lo, int64_t hi) {
  const conv_job *j = arg;
  const geom *g = j->g;
  int64_t pix = g->oh * g->ow, kk = patch_size(g), img = g->h * g->w * g->c;
  char *col = thread_col(j);
  for (int64_t n0 = lo; n0 < hi; n0 += j->block) {
    int64_t b = hi - n0 < j->block ? hi - n0 : j->block;
    char *dx = j->out + (size_t)(n0 * img) * j->esz;
    const char *dy = j->dy + (size_t)(n0 * pix * g->oc) * j->esz;
    if (j->direct) {
      nbop_gemm(j->t, false, true, b * pix, kk, g->oc, dy, g->oc, j->f, g->oc, 0, dx, kk);
      continue;
    }
    memset(dx, 0, (size_t)(b * img) * j->esz);
    if (j->planar) { /* col^T = W dy^T */
      nbop_gemm(j->t, false, true, kk, b * pix, g->oc, j->f, g->oc, dy, g->oc, 0, col, b * pix);
      col2im_planar(j, b, col, dx);
      continue;
    }
    nbop_gemm(j->t, false, true, b * pix, kk, g->oc, dy, g->oc, j->f, g->oc, 0, col, kk);
    const char *row = col;
    for (int64_t i = 0; i < b; i++)
      for (int64_t oy = 0; oy < g->oh; oy++)
        for (int64_t ox = 0; ox < g->ow; ox++, row += (size_t)kk * j->esz)
          col2im_row(g, j->t, row, oy, ox, dx + (size_t)(i * img) * j->esz, j->esz);
  }
}

static void backprop_filter_range(void *arg, int64_t lo, int64_t hi) {
  const conv_job *j = arg;
  const geom *g = j->g;
  int64_t pix = g->oh * g->ow, kk = patch_size(g);
  int t = nbop_range_slot();
  char *dw = t == 0 ? j->out : j->partials + (size_t)((t - 1) * kk * g->oc) * j->esz, *col = thread_col(j);
  for (int64_t n0 = lo; n0 < hi; n0 += j->block) {
    int64_t b = hi - n0 < j->block ? hi - n0 : j->block;
    const char *dy = j->dy + (size_t)(n0 * pix * g->oc) * j->esz;
    if (j->planar) { /* dW += col^T dy */
      im2col_planar(j, n0, b, col);
      nbop_gemm(j->t, false, false, kk, g->oc, b * pix, col, b * pix, dy, g->oc, 1, dw, g->oc);
    } else {
      nbop_gemm(j->t, true, false, kk, g->oc, b * pix, im2col(j, n0, b, col), kk, dy, g->oc, 1, dw, g->oc);
    }
  }
}

/* Threads worth using for a convolution: by its multiply-adds. */
static int conv_threads(const nbop_kargs *k, const geom *g) {
  double work = (double)g->n * (double)(g->oh * g->ow) * (double)patch_size(g) * (double)g->oc;
  return nbop_kthreads(k, work > 0x1p62 ? INT64_MAX : (int64_t)work);
}

/* Threads, image blocks and column buffers for a job over g->n images. */
static nb_code plan_job(nbop_kargs *k, conv_job *j, int *nt) {
  const geom *g = j->g;
  int64_t pix = g->oh * g->ow, kk = patch_size(g);
  *nt = conv_threads(k, g);
  if (*nt > g->n) *nt = g->n < 1 ? 1 : (int)g->n;
  int64_t per_image = pix * kk * (int64_t)j->esz;
  j->block = per_image > 0 ? COL_BLOCK_BYTES / per_image : g->n;
  if (j->block < 1) j->block = 1;
  j->direct = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->pt == 0 && g->pl == 0 && g->oh == g->h &&
              g->ow == g->w;
  j->planar = !j->direct && g->c == 1;
  j->col_elems = j->block * pix * kk;
  j->cols = NULL;
  if (!j->direct) {
    j->cols = nbcore_scratch_alloc(k->ctx, (size_t)(*nt * j->col_elems) * j->esz + 1);
    if (!j->cols) return nbop_kfail(k, NB_NOMEM, "out of memory for %lld column elements", (long long)j->col_elems);
  }
  return NB_OK;
}

/* ---- convolution: oneDNN ------------------------------------------------------------- */

/* A float32 convolution's key: the kind, then these values. */
enum { K_N = 1, K_C, K_H, K_W, K_OC, K_OH, K_OW, K_KH, K_KW, K_SH, K_SW, K_DH, K_DW, K_PT, K_PB, K_PL, K_PR, K_NCHW };

/* The padding after the input in oneDNN's terms: how far the last window reaches past
   the input's end (TF's SAME puts its odd element there), 0 where it stops inside (VALID,
   or SAME with a stride beyond the window). */
static int64_t pad_after(int64_t in, int64_t out, int64_t k, int64_t d, int64_t s, int64_t before) {
  int64_t past = (out - 1) * s + (k - 1) * d + 1 - in - before;
  return past > 0 ? past : 0;
}

/* The key of g's convolution of kind kind. */
static void conv_key(const geom *g, conv_kind kind, nbop_onednn_key *key) {
  static const int kinds[] = {[CONV_FORWARD] = NBOP_ONEDNN_CONV_FORWARD,
                              [CONV_BACKPROP_INPUT] = NBOP_ONEDNN_CONV_BACKPROP_INPUT,
                              [CONV_BACKPROP_FILTER] = NBOP_ONEDNN_CONV_BACKPROP_FILTER};
  *key = (nbop_onednn_key){{kinds[kind], g->n, g->c, g->h, g->w, g->oc, g->oh, g->ow, g->kh, g->kw, g->sh, g->sw, g->dh,
                            g->dw, g->pt, pad_after(g->h, g->oh, g->kh, g->dh, g->sh, g->pt), g->pl,
                            pad_after(g->w, g->ow, g->kw, g->dw, g->sw, g->pl), g->nchw}};
}

/* The plan of the convolution key names: activations in the tensors' own layout (NHWC or
   NCHW), the filter in whatever layout oneDNN's fastest kernel wants (a blocked one: its
   direct kernels beat both its GEMM-based one and im2col 2-4x on bench/conv), reordered
   from and to TF's [kh, kw, in, out] (hwio). The backprops' descriptors take the
   forward's as a hint, as oneDNN requires. */
static dnnl_status_t make_conv(const nbop_onednn_key *key, dnnl_engine_t engine, const_dnnl_primitive_attr_t attr,
                               nbop_onednn_plan *plan) {
  const int64_t *v = key->v;
  dnnl_format_tag_t layout = v[K_NCHW] ? dnnl_nchw : dnnl_nhwc;
  dnnl_dims_t src_dims = {v[K_N], v[K_C], v[K_H], v[K_W]}, w_dims = {v[K_OC], v[K_C], v[K_KH], v[K_KW]},
              dst_dims = {v[K_N], v[K_OC], v[K_OH], v[K_OW]};
  /* oneDNN counts dilation from 0 (no gaps), TF from 1 */
  dnnl_dims_t strides = {v[K_SH], v[K_SW]}, dilates = {v[K_DH] - 1, v[K_DW] - 1}, pad_l = {v[K_PT], v[K_PL]},
              pad_r = {v[K_PB], v[K_PR]};
  dnnl_memory_desc_t src, w, dst;
  plan->nplain = 1;
  plan->plain_arg[0] = v[0] == NBOP_ONEDNN_CONV_BACKPROP_FILTER ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS;
  plan->plain_out[0] = v[0] == NBOP_ONEDNN_CONV_BACKPROP_FILTER;
  dnnl_status_t s = dnnl_memory_desc_init_by_tag(&src, 4, src_dims, dnnl_f32, layout);
  if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&plan->plain_md[0], 4, w_dims, dnnl_f32, dnnl_hwio);
  if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&w, 4, w_dims, dnnl_f32, dnnl_format_tag_any);
  if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&dst, 4, dst_dims, dnnl_f32, layout);
  dnnl_convolution_desc_t fwd, bwd;
  if (s == dnnl_success)
    s = dnnl_dilated_convolution_forward_desc_init(&fwd, dnnl_forward_training, dnnl_convolution_direct, &src, &w, NULL,
                                                   &dst, strides, dilates, pad_l, pad_r);
  if (s != dnnl_success || v[0] == NBOP_ONEDNN_CONV_FORWARD)
    return s == dnnl_success ? dnnl_primitive_desc_create(&plan->pd, &fwd, attr, engine, NULL) : s;
  if (v[0] == NBOP_ONEDNN_CONV_BACKPROP_INPUT)
    s = dnnl_dilated_convolution_backward_data_desc_init(&bwd, dnnl_convolution_direct, &src, &w, &dst, strides,
                                                         dilates, pad_l, pad_r);
  else
    s = dnnl_dilated_convolution_backward_weights_desc_init(&bwd, dnnl_convolution_direct, &src, &w, NULL, &dst,
                                                            strides, dilates, pad_l, pad_r);
  dnnl_primitive_desc_t hint = NULL;
  if (s == dnnl_success) s = dnnl_primitive_desc_create(&hint, &fwd, NULL, engine, NULL);
  if (s == dnnl_success) s = dnnl_primitive_desc_create(&plan->pd, &bwd, attr, engine, hint);
  if (hint) dnnl_primitive_desc_destroy(hint);
  return s;
}

/* Runs a float32 convolution through oneDNN; false (nothing written) where it did not:
   oneDNN switched off, float64, an empty operand (an empty filter's output is zeros, which
   the own kernel writes), or no oneDNN implementation. */
static bool conv_onednn(nbop_kargs *k, conv_kind kind) {
  const geom *g = (const geom *)k->scratch;
  nb_tensor *res = k->res[0];
  if (res->dtype != NB_F32 || !nbop_onednn_enabled() || g->n * g->h * g->w * g->c == 0 || g->oh * g->ow * g->oc == 0)
    return false;
  nbop_onednn_key key;
  conv_key(g, kind, &key);
  void *x = kind == CONV_BACKPROP_INPUT ? NULL : nbcore_tdata(k->in[0]);
  void *f = kind == CONV_BACKPROP_FILTER ? NULL : nbcore_tdata(k->in[1]);
  void *dy = kind == CONV_FORWARD ? NULL : nbcore_tdata(k->in[2]);
  nbop_onednn_arg args[3][3] = {
      [CONV_FORWARD] = {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, f}, {DNNL_ARG_DST, nbcore_tdata(res)}},
      [CONV_BACKPROP_INPUT] = {{DNNL_ARG_DIFF_SRC, nbcore_tdata(res)}, {DNNL_ARG_WEIGHTS, f}, {DNNL_ARG_DIFF_DST, dy}},
      [CONV_BACKPROP_FILTER] = {
          {DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_WEIGHTS, nbcore_tdata(res)}, {DNNL_ARG_DIFF_DST, dy}}};
  return nbop_onednn_run(k->ctx, &key, make_conv, conv_threads(k, g), args[kind], 3) == dnnl_success;
}

static nb_code run_conv(nbop_kargs *k, conv_kind kind) {
  const geom *g = (const geom *)k->scratch;
  nb_tensor *res = k->res[0];
  if (res->size == 0 || conv_onednn(k, kind)) return NB_OK;
  const nb_tensor *x = kind == CONV_BACKPROP_INPUT ? NULL : k->in[0];
  const nb_tensor *f = kind == CONV_BACKPROP_FILTER ? NULL : k->in[1], *dy = kind == CONV_FORWARD ? NULL : k->in[2];
  conv_job j = {.g = g, .t = res->dtype, .esz = nb_dtype_size(res->dtype)};
  int64_t in_dims[4] = {g->n, g->h, g->w, g->c}, out_dims[4] = {g->n, g->oh, g->ow, g->oc};
  void *xt = NULL, *dyt = NULL, *outt = NULL;
  j.f = f ? nbcore_tdata(f) : NULL;
  nb_ctx *c = k->ctx;
  j.x = x ? as_nhwc(c, x, g->nchw, in_dims, &xt) : NULL;
  j.dy = dy ? as_nhwc(c, dy, g->nchw, out_dims, &dyt) : NULL;
  j.out = kind == CONV_BACKPROP_FILTER ? nbcore_tdata(res) : out_nhwc(c, res, g->nchw, &outt);
  int nt = 1;
  nb_code code = NB_OK;
  if ((x && x->size && !j.x) || (dy && dy->size && !j.dy) || !j.out || (code = plan_job(k, &j, &nt)) != NB_OK) {
    release_all(c, (void *[]){xt, dyt, outt}, 3);
    return code ? code : nbop_kfail(k, NB_NOMEM, "out of memory for a layout copy");
  }
  int64_t dw_elems = patch_size(g) * g->oc;
  if (kind == CONV_BACKPROP_FILTER && nt > 1 &&
      !(j.partials = nbcore_scratch_alloc(c, (size_t)((nt - 1) * dw_elems) * j.esz))) {
    release_all(c, (void *[]){xt, dyt, outt, j.cols}, 4);
    return nbop_kfail(k, NB_NOMEM, "out of memory for filter partial sums");
  }
  int prev_threads = omp_get_max_threads();
  nbop_blas_set_threads(nt > 1 ? 1 : k->threads);
  nbop_range_fn fn = kind == CONV_FORWARD          ? forward_range
                     : kind == CONV_BACKPROP_INPUT ? backprop_input_range
                                                   : backprop_filter_range;
  if (kind == CONV_BACKPROP_FILTER) { /* sums start at zero (all of them: a thread may get no images) */
    memset(j.out, 0, (size_t)res->size * j.esz);
    if (j.partials) memset(j.partials, 0, (size_t)((nt - 1) * dw_elems) * j.esz);
  }
  nbop_parallel_range(nt, g->n, fn, &j);
  nbop_blas_set_threads(prev_threads);
  for (int t = 1; kind == CONV_BACKPROP_FILTER && t < nt; t++)
    add_elems(j.t, j.out, j.partials + (size_t)((t - 1) * dw_elems) * j.esz, dw_elems);
  if (kind == CONV_BACKPROP_INPUT) finish_out(c, res, outt, in_dims);
  if (kind == CONV_FORWARD) finish_out(c, res, outt, out_dims);
  release_all(c, (void *[]){xt, dyt, j.cols, j.partials}, 4);
  return NB_OK;
}

static nb_code conv2d_kernel(nbop_kargs *k) { return run_conv(k, CONV_FORWARD); }
static nb_code backprop_input_kernel(nbop_kargs *k) { return run_conv(k, CONV_BACKPROP_INPUT); }
static nb_code backprop_filter_kernel(nbop_kargs *k) { return run_conv(k, CONV_BACKPROP_FILTER); }

/* ---- pooling: infer ------------------------------------------------------------------ */

/* Attr slots: MaxPool and MaxPoolGrad have explicit_paddings before data_format, the
   other pools end with data_format in its place. */
enum { P_KSIZE, P_STRIDES, P_PADDING, P_EXPLICIT };

static bool pool_has_explicit(const nbop_def *d) { return d->nattrs == 5; }
static int pool_format_slot(const nbop_def *d) { return pool_has_explicit(d) ? P_EXPLICIT + 1 : P_EXPLICIT; }

/* A pool's attrs into g (layout, window, strides) and *m, pad. */
static nb_code pool_attrs(nbop_kargs *k, geom *g, pad_mode *m, int64_t pad[4]) {
  int explicit_slot = pool_has_explicit(k->def) ? P_EXPLICIT : -1;
  nb_code code = window_attrs(k, pool_format_slot(k->def), P_PADDING, P_STRIDES, explicit_slot, g, m, pad);
  return code ? code : parse_window_attr(k, P_KSIZE, g->nchw, &g->kh, &g->kw);
}

/* Geometry of a pool over input dims in[4] (layout order); no dilation, c kept. */
static nb_code pool_geom(nbop_kargs *k, const int64_t *in, const char *shapes, geom *g) {
  pad_mode m = PAD_VALID;
  int64_t pad[4];
  nb_code code = pool_attrs(k, g, &m, pad);
  if (code) return code;
  set_input_dims(g, in);
  g->dh = g->dw = 1;
  g->oc = g->c;
  return finish_geom(k, g, m, pad, shapes);
}

static void pool_in_dims(const geom *g, int64_t *s) { layout_dims(g, g->n, g->h, g->w, g->c, s); }
static void pool_out_dims(const geom *g, int64_t *s) { layout_dims(g, g->n, g->oh, g->ow, g->c, s); }

/* The pools' operands (by their count: MaxPool and AvgPool, AvgPoolGrad, MaxPoolGrad and
   MaxPoolGradGrad): float, of one dtype, 4-D but for AvgPoolGrad's shape operand. */
static nb_code pool_validate(nbop_kargs *k) {
  static const char *const names[3][3] = {
      {"input"}, {"orig_input_shape", "grad"}, {"orig_input", "orig_output", "grad"}};
  static const int ranks[3][3] = {{4}, {0, 4}, {4, 4, 4}};
  int first = k->nin == 2 ? 1 : 0;
  geom g;
  pad_mode m;
  int64_t pad[4];
  nb_code code = check_float(k, first);
  for (int i = first + 1; i < k->nin && !code; i++) code = nbop_kcheck_same_dtype(k, first, i);
  if (!code) code = pool_attrs(k, &g, &m, pad);
  return code ? code : check_operands(k, ranks[k->nin - 1], names[k->nin - 1]);
}

/* MaxPool(input), AvgPool(value) */
static nb_code pool_infer(nbop_kargs *k) {
  char shapes[200];
  snprintf(shapes, sizeof shapes, "input %s", nbop_tstr(k->in[0]));
  geom *g = (geom *)k->scratch;
  nb_code code = pool_geom(k, k->in[0]->shape, shapes, g);
  if (code) return code;
  int64_t s[4];
  pool_out_dims(g, s);
  unknown_spatial(k, g, 0, -1, s);
  nbop_meta_set(&k->out[0], k->in[0]->dtype, 4, s);
  return NB_OK;
}

/* MaxPoolGrad(orig_input, orig_output, grad) -> dx like orig_input;
   MaxPoolGradGrad(orig_input, orig_output, grad like orig_input) -> like orig_output. */
static nb_code max_pool_grad_infer_as(nbop_kargs *k, bool grad_grad) {
  char shapes[200];
  snprintf(shapes, sizeof shapes, "orig_input %s, orig_output %s, grad %s", nbop_tstr(k->in[0]), nbop_tstr(k->in[1]),
           nbop_tstr(k->in[2]));
  geom *g = (geom *)k->scratch;
  nb_code code = pool_geom(k, k->in[0]->shape, shapes, g);
  if (code) return code;
  int64_t in[4], out[4];
  pool_in_dims(g, in);
  pool_out_dims(g, out);
  code = check_shape(k, 1, "orig_output", out, shapes);
  if (!code) code = check_shape(k, 2, "grad", grad_grad ? in : out, shapes);
  if (code) return code;
  if (grad_grad) unknown_spatial(k, g, 0, -1, out);
  nbop_meta_set(&k->out[0], k->in[0]->dtype, 4, grad_grad ? out : in);
  return NB_OK;
}

static nb_code max_pool_grad_infer(nbop_kargs *k) { return max_pool_grad_infer_as(k, false); }
static nb_code max_pool_grad_grad_infer(nbop_kargs *k) { return max_pool_grad_infer_as(k, true); }

/* AvgPoolGrad(orig_input_shape, grad) -> dx of shape orig_input_shape. */
static nb_code avg_pool_grad_infer(nbop_kargs *k) {
  int64_t in[4], out[4];
  nb_code code = shape_input(k, 0, "orig_input_shape", in);
  if (code) return code;
  char shapes[200];
  snprintf(shapes, sizeof shapes, "orig_input_shape %s, grad %s", nbop_sstr(4, in), nbop_tstr(k->in[1]));
  geom *g = (geom *)k->scratch;
  code = pool_geom(k, in, shapes, g);
  if (code) return code;
  pool_out_dims(g, out);
  code = check_shape(k, 1, "grad", out, shapes);
  if (code) return code;
  nbop_meta_set(&k->out[0], k->in[1]->dtype, 4, in);
  return NB_OK;
}

/* ---- pooling: kernels ---------------------------------------------------------------- */

/* Output pixel (oy, ox)'s window clipped to the image: rows [y0, y1), columns [x0, x1). */
static void window(const geom *g, int64_t oy, int64_t ox, int64_t *y0, int64_t *y1, int64_t *x0, int64_t *x1) {
  int64_t ys = oy * g->sh - g->pt, xs = ox * g->sw - g->pl;
  *y0 = ys > 0 ? ys : 0;
  *x0 = xs > 0 ? xs : 0;
  *y1 = ys + g->kh < g->h ? ys + g->kh : g->h;
  *x1 = xs + g->kw < g->w ? xs + g->kw : g->w;
}

/* Max with NaN propagating: a NaN in the window gives NaN. */
#define NAN_MAX(a, v) ((v) > (a) || isnan(v) ? (v) : (a))
/* Whether v is the window maximum m (NaN: v is a NaN too); bitwise, so loops vectorize. */
#define IS_MAX(v, m) (((v) == (m)) | (((v) != (v)) & ((m) != (m))))

/* Runs VISIT for every element of output row oy's windows (in scope: g, oy), in
   row-major window order (ky, then kx) for each window, all the row's windows per (ky,
   kx), so consecutive updates touch different pixels and need not wait for each other.
   VISIT sees at (the element's offset in the image) and q (its pixel and channel's offset
   in the output row). */
#define ROW_WINDOWS(VISIT)                                                \
  for (int64_t ky = 0; ky < g->kh; ky++) {                                \
    int64_t iy = oy * g->sh - g->pt + ky, o0, o1;                         \
    if (iy < 0 || iy >= g->h) continue;                                   \
    for (int64_t kx = 0; kx < g->kw; kx++) {                              \
      inside(kx - g->pl, g->sw, g->w, g->ow, &o0, &o1);                   \
      for (int64_t ox = o0; ox < o1; ox++)                                \
        for (int64_t ch = 0; ch < g->c; ch++) {                           \
          int64_t at = (iy * g->w + ox * g->sw + kx - g->pl) * g->c + ch; \
          int64_t q = ox * g->c + ch;                                     \
          VISIT                                                           \
        }                                                                 \
    }                                                                     \
  }

/* A pool loop over images [lo, hi): a is the first operand, b the second (or NULL), out
   the result, all NHWC; rows is the thread's scratch of 2 output rows (MaxPool's
   gradient ops). */
typedef void (*pool_fn)(const geom *g, const void *a, const void *b, void *out, void *rows, int64_t lo, int64_t hi);

/* Per dtype:
   max_pool       y = max over the window (-inf for a window wholly in the padding)
   row_max        the maxima of output row oy's windows (NaN where one holds a NaN),
                  visited window position by window position across the whole row
   max_pool_grad  dx[argmax] += dy, where argmax is the window's first element equal to
                  its maximum in row-major order (TF's tie rule), the first NaN if any
   max_pool_grad_grad  out = g[argmax] (0 for an empty window)
   Both find argmax in two passes over a row of windows, the maxima then the first element
   equal to each (no index tracking, no branches).
   avg_pool       y = mean over the window's real elements (TF: padding is not counted)
   avg_pool_grad  dx[window] += dy / count */
#define POOL_LOOPS(S, T)                                                                                             \
  static void row_max_##S(const geom *g, const T *img, int64_t oy, T *best) {                                        \
    for (int64_t q = 0; q < g->ow * g->c; q++) best[q] = -INFINITY;                                                  \
    for (int64_t ky = 0; ky < g->kh; ky++) {                                                                         \
      int64_t iy = oy * g->sh - g->pt + ky, o0, o1;                                                                  \
      if (iy < 0 || iy >= g->h) continue;                                                                            \
      for (int64_t kx = 0; kx < g->kw; kx++) {                                                                       \
        inside(kx - g->pl, g->sw, g->w, g->ow, &o0, &o1);                                                            \
        for (int64_t ox = o0; ox < o1; ox++) {                                                                       \
          const T *p = img + (iy * g->w + ox * g->sw + kx - g->pl) * g->c;                                           \
          T *q = best + ox * g->c;                                                                                   \
          for (int64_t ch = 0; ch < g->c; ch++) q[ch] = NAN_MAX(q[ch], p[ch]);                                       \
        }                                                                                                            \
      }                                                                                                              \
    }                                                                                                                \
  }                                                                                                                  \
  static void max_pool_##S(const geom *g, const void *a, const void *b, void *out, void *rows, int64_t lo,           \
                           int64_t hi) {                                                                             \
    (void)b, (void)rows;                                                                                             \
    for (int64_t n = lo; n < hi; n++)                                                                                \
      for (int64_t oy = 0; oy < g->oh; oy++)                                                                         \
        row_max_##S(g, (const T *)a + n * g->h * g->w * g->c, oy, (T *)out + (n * g->oh + oy) * g->ow * g->c);       \
  }                                                                                                                  \
  static void max_pool_grad_##S(const geom *g, const void *a, const void *b, void *out, void *rows, int64_t lo,      \
                                int64_t hi) {                                                                        \
    int64_t img = g->h * g->w * g->c, row = g->ow * g->c;                                                            \
    T *best = rows, *done = best + row;                                                                              \
    memset((T *)out + lo * img, 0, (size_t)((hi - lo) * img) * sizeof(T));                                           \
    for (int64_t n = lo; n < hi; n++) {                                                                              \
      const T *x = (const T *)a + n * img;                                                                           \
      T *dx = (T *)out + n * img;                                                                                    \
      for (int64_t oy = 0; oy < g->oh; oy++) {                                                                       \
        const T *dy = (const T *)b + (n * g->oh + oy) * row;                                                         \
        row_max_##S(g, x, oy, best);                                                                                 \
        for (int64_t q = 0; q < row; q++) done[q] = 0;                                                               \
        ROW_WINDOWS({                                                                                                \
          T hit = (T)((done[q] == 0) & IS_MAX(x[at], best[q]));                                                      \
          dx[at] += hit * dy[q];                                                                                     \
          done[q] += hit;                                                                                            \
        })                                                                                                           \
      }                                                                                                              \
    }                                                                                                                \
  }                                                                                                                  \
  static void max_pool_grad_grad_##S(const geom *g, const void *a, const void *b, void *out, void *rows, int64_t lo, \
                                     int64_t hi) {                                                                   \
    int64_t img = g->h * g->w * g->c, row = g->ow * g->c;                                                            \
    T *best = rows, *done = best + row;                                                                              \
    for (int64_t n = lo; n < hi; n++) {                                                                              \
      const T *x = (const T *)a + n * img, *gx = (const T *)b + n * img;                                             \
      for (int64_t oy = 0; oy < g->oh; oy++) {                                                                       \
        T *o = (T *)out + (n * g->oh + oy) * row;                                                                    \
        row_max_##S(g, x, oy, best);                                                                                 \
        for (int64_t q = 0; q < row; q++) done[q] = 0, o[q] = 0;                                                     \
        ROW_WINDOWS({                                                                                                \
          bool hit = (done[q] == 0) & IS_MAX(x[at], best[q]);                                                        \
          o[q] = hit ? gx[at] : o[q];                                                                                \
          done[q] += hit;                                                                                            \
        })                                                                                                           \
      }                                                                                                              \
    }                                                                                                                \
  }                                                                                                                  \
  static void avg_pool_##S(const geom *g, const void *a, const void *b, void *out, void *rows, int64_t lo,           \
                           int64_t hi) {                                                                             \
    (void)b, (void)rows;                                                                                             \
    const T *x = a;                                                                                                  \
    for (int64_t n = lo; n < hi; n++)                                                                                \
      for (int64_t oy = 0; oy < g->oh; oy++)                                                                         \
        for (int64_t ox = 0; ox < g->ow; ox++) {                                                                     \
          T *o = (T *)out + ((n * g->oh + oy) * g->ow + ox) * g->c;                                                  \
          int64_t y0, y1, x0, x1;                                                                                    \
          window(g, oy, ox, &y0, &y1, &x0, &x1);                                                                     \
          for (int64_t ch = 0; ch < g->c; ch++) o[ch] = 0;                                                           \
          for (int64_t iy = y0; iy < y1; iy++)                                                                       \
            for (int64_t ix = x0; ix < x1; ix++) {                                                                   \
              const T *p = x + ((n * g->h + iy) * g->w + ix) * g->c;                                                 \
              for (int64_t ch = 0; ch < g->c; ch++) o[ch] += p[ch];                                                  \
            }                                                                                                        \
          T scale = (T)1 / (T)((y1 - y0) * (x1 - x0));                                                               \
          for (int64_t ch = 0; ch < g->c; ch++) o[ch] *= scale;                                                      \
        }                                                                                                            \
  }                                                                                                                  \
  static void avg_pool_grad_##S(const geom *g, const void *a, const void *b, void *out, void *rows, int64_t lo,      \
                                int64_t hi) {                                                                        \
    (void)b, (void)rows;                                                                                             \
    int64_t img = g->h * g->w * g->c;                                                                                \
    memset((T *)out + lo * img, 0, (size_t)((hi - lo) * img) * sizeof(T));                                           \
    for (int64_t n = lo; n < hi; n++) {                                                                              \
      const T *dy = (const T *)a + n * g->oh * g->ow * g->c;                                                         \
      T *dx = (T *)out + n * img;                                                                                    \
      for (int64_t oy = 0; oy < g->oh; oy++)                                                                         \
        for (int64_t ox = 0; ox < g->ow; ox++, dy += g->c) {                                                         \
          int64_t y0, y1, x0, x1;                                                                                    \
          window(g, oy, ox, &y0, &y1, &x0, &x1);                                                                     \
          T scale = (T)1 / (T)((y1 - y0) * (x1 - x0));                                                               \
          for (int64_t iy = y0; iy < y1; iy++)                                                                       \
            for (int64_t ix = x0; ix < x1; ix++) {                                                                   \
              T *p = dx + (iy * g->w + ix) * g->c;                                                                   \
              for (int64_t ch = 0; ch < g->c; ch++) p[ch] += dy[ch] * scale;                                         \
            }                                                                                                        \
        }                                                                                                            \
    }                                                                                                                \
  }

POOL_LOOPS(f32, float)
POOL_LOOPS(f64, double)

typedef enum { MAX_POOL, MAX_POOL_GRAD, MAX_POOL_GRAD_GRAD, AVG_POOL, AVG_POOL_GRAD } pool_kind;

/* How each pool reads its operands: a and b are input slots (-1: none), *_out says the
   tensor has the output's dims (else the input's). */
static const struct pool_spec {
  int a, b;
  bool a_out, b_out, res_out;
  pool_fn fn[2]; /* f32, f64 */
} pool_specs[] = {
    [MAX_POOL] = {0, -1, false, false, true, {max_pool_f32, max_pool_f64}},
    [MAX_POOL_GRAD] = {0, 2, false, true, false, {max_pool_grad_f32, max_pool_grad_f64}},
    [MAX_POOL_GRAD_GRAD] = {0, 2, false, false, true, {max_pool_grad_grad_f32, max_pool_grad_grad_f64}},
    [AVG_POOL] = {0, -1, false, false, true, {avg_pool_f32, avg_pool_f64}},
    [AVG_POOL_GRAD] = {1, -1, true, false, false, {avg_pool_grad_f32, avg_pool_grad_f64}},
};

typedef struct pool_job {
  const geom *g;
  pool_fn fn;
  const char *a, *b;
  char *out;
  char *rows; /* per-thread row scratch, row_bytes each (NULL when not needed) */
  size_t row_bytes;
} pool_job;

static void pool_range(void *arg, int64_t lo, int64_t hi) {
  const pool_job *j = arg;
  j->fn(j->g, j->a, j->b, j->out, j->rows ? j->rows + (size_t)nbop_range_slot() * j->row_bytes : NULL, lo, hi);
}

static nb_code run_pool(nbop_kargs *k, pool_kind kind) {
  const geom *g = (const geom *)k->scratch;
  const struct pool_spec *sp = &pool_specs[kind];
  nb_tensor *res = k->res[0];
  if (res->size == 0) return NB_OK;
  int64_t in_dims[4] = {g->n, g->h, g->w, g->c}, out_dims[4] = {g->n, g->oh, g->ow, g->c};
  void *at = NULL, *bt = NULL, *outt = NULL;
  pool_job j = {.g = g, .fn = sp->fn[res->dtype == NB_F64]};
  nb_ctx *c = k->ctx;
  j.a = as_nhwc(c, k->in[sp->a], g->nchw, sp->a_out ? out_dims : in_dims, &at);
  j.b = sp->b >= 0 ? as_nhwc(c, k->in[sp->b], g->nchw, sp->b_out ? out_dims : in_dims, &bt) : NULL;
  j.out = out_nhwc(c, res, g->nchw, &outt);
  if ((!j.a && k->in[sp->a]->size) || (sp->b >= 0 && !j.b && k->in[sp->b]->size) || !j.out) {
    release_all(c, (void *[]){at, bt, outt}, 3);
    return nbop_kfail(k, NB_NOMEM, "out of memory for a layout copy");
  }
  int64_t work = (g->oh * g->ow + g->h * g->w) * g->c * g->n;
  int nt = nbop_kthreads(k, work);
  nt = nt > g->n ? (int)g->n : nt;
  if (kind == MAX_POOL_GRAD || kind == MAX_POOL_GRAD_GRAD) {
    j.row_bytes = 2 * (size_t)(g->ow * g->c) * nb_dtype_size(res->dtype);
    if (!(j.rows = nbcore_scratch_alloc(c, (size_t)nt * j.row_bytes + 1))) {
      release_all(c, (void *[]){at, bt, outt}, 3);
      return nbop_kfail(k, NB_NOMEM, "out of memory for %lld row elements", (long long)(g->ow * g->c));
    }
  }
  nbop_parallel_range(nt, g->n, pool_range, &j);
  finish_out(c, res, outt, sp->res_out ? out_dims : in_dims);
  release_all(c, (void *[]){at, bt, j.rows}, 3);
  return NB_OK;
}

static nb_code max_pool_kernel(nbop_kargs *k) { return run_pool(k, MAX_POOL); }
static nb_code max_pool_grad_kernel(nbop_kargs *k) { return run_pool(k, MAX_POOL_GRAD); }
static nb_code max_pool_grad_grad_kernel(nbop_kargs *k) { return run_pool(k, MAX_POOL_GRAD_GRAD); }
static nb_code avg_pool_kernel(nbop_kargs *k) { return run_pool(k, AVG_POOL); }
static nb_code avg_pool_grad_kernel(nbop_kargs *k) { return run_pool(k, AVG_POOL_GRAD); }

/* ---- BiasAdd and BiasAddGrad --------------------------------------------------------- */

/* value viewed as [outer, channels, inner]: the channel dim is the last one (NHWC, or any
   rank-2 value), or dim 1 for NCHW of rank >= 3. */
typedef struct bias_plan {
  int64_t outer, c, inner;
} bias_plan;

static void bias_plan_of(const nbop_kargs *k, const nb_tensor *v, bias_plan *p) {
  bool nchw = nbop_kchoice(k, 0) == FORMAT_NCHW;
  int cd = nchw && v->rank >= 3 ? 1 : v->rank - 1;
  p->c = v->shape[cd];
  p->outer = nbcore_shape_size(cd, v->shape);
  p->inner = nbcore_shape_size(v->rank - cd - 1, v->shape + cd + 1);
}

/* BiasAdd(value, bias) and BiasAddGrad(out_backprop): float, value at least 2-D, bias 1-D
   of the channel dim's size, where known. */
static nb_code bias_validate(nbop_kargs *k) {
  nb_code code = check_float(k, 0);
  if (!code && k->nin == 2) code = nbop_kcheck_same_dtype(k, 0, 1);
  if (!code) code = nbop_kcheck_rank(k, 0, 2, NB_MAX_RANK, "input");
  if (!code && k->nin == 2) code = nbop_kcheck_rank(k, 1, 1, 1, "bias");
  if (code || k->nin == 1 || k->in[0]->rank < 0 || k->in[1]->rank < 0) return code;
  bias_plan p;
  bias_plan_of(k, k->in[0], &p);
  const nb_tensor *b = k->in[1];
  if (b->shape[0] >= 0 && p.c >= 0 && b->shape[0] != p.c)
    return nbop_kfail(k, NB_SHAPE, "bias must be a vector of the channel dim's size %lld, got shape %s (value %s)",
                      (long long)p.c, nbop_tstr(b), nbop_tstr(k->in[0]));
  return NB_OK;
}

static nb_code bias_add_infer(nbop_kargs *k) {
  bias_plan_of(k, k->in[0], (bias_plan *)k->scratch);
  nbop_meta_like(&k->out[0], k->in[0]);
  return NB_OK;
}

static nb_code bias_add_grad_infer(nbop_kargs *k) {
  bias_plan *p = (bias_plan *)k->scratch;
  bias_plan_of(k, k->in[0], p);
  nbop_meta_set(&k->out[0], k->in[0]->dtype, 1, &p->c);
  return NB_OK;
}

/* y[o, ch, i] = x[o, ch, i] + bias[ch] for rows o in [lo, hi); BiasAddGrad's
   db[ch] = sum over o and i of dy[o, ch, i], accumulated in double. Channels last (NHWC,
   inner 1) runs along the channels instead, so the loops vectorize either way. */
#define BIAS_LOOPS(S, T)                                                                               \
  static void bias_add_##S(const bias_plan *p, const T *x, const T *b, T *y, int64_t lo, int64_t hi) { \
    if (p->inner == 1) {                                                                               \
      for (int64_t o = lo; o < hi; o++)                                                                \
        for (int64_t ch = 0; ch < p->c; ch++) y[o * p->c + ch] = x[o * p->c + ch] + b[ch];             \
      return;                                                                                          \
    }                                                                                                  \
    for (int64_t o = lo; o < hi; o++)                                                                  \
      for (int64_t ch = 0; ch < p->c; ch++) {                                                          \
        int64_t base = (o * p->c + ch) * p->inner;                                                     \
        for (int64_t i = 0; i < p->inner; i++) y[base + i] = x[base + i] + b[ch];                      \
      }                                                                                                \
  }                                                                                                    \
  static void bias_add_grad_##S(const bias_plan *p, const T *dy, double *acc) {                        \
    if (p->inner == 1) {                                                                               \
      for (int64_t o = 0; o < p->outer; o++)                                                           \
        for (int64_t ch = 0; ch < p->c; ch++) acc[ch] += dy[o * p->c + ch];                            \
      return;                                                                                          \
    }                                                                                                  \
    for (int64_t o = 0; o < p->outer; o++)                                                             \
      for (int64_t ch = 0; ch < p->c; ch++) {                                                          \
        const T *row = dy + (o * p->c + ch) * p->inner;                                                \
        double s = 0;                                                                                  \
        for (int64_t i = 0; i < p->inner; i++) s += row[i];                                            \
        acc[ch] += s;                                                                                  \
      }                                                                                                \
  }

BIAS_LOOPS(f32, float)
BIAS_LOOPS(f64, double)

typedef struct bias_job {
  const bias_plan *p;
  const nb_tensor *x, *b;
  nb_tensor *y;
} bias_job;

static void bias_add_range(void *arg, int64_t lo, int64_t hi) {
  const bias_job *j = arg;
  if (j->y->dtype == NB_F32)
    bias_add_f32(j->p, nbcore_tdata(j->x), nbcore_tdata(j->b), nbcore_tdata(j->y), lo, hi);
  else
    bias_add_f64(j->p, nbcore_tdata(j->x), nbcore_tdata(j->b), nbcore_tdata(j->y), lo, hi);
}

static nb_code bias_add_kernel(nbop_kargs *k) {
  const bias_plan *p = (const bias_plan *)k->scratch;
  bias_job j = {p, k->in[0], k->in[1], k->res[0]};
  if (k->res[0]->size) nbop_parallel_range(nbop_kthreads(k, k->res[0]->size), p->outer, bias_add_range, &j);
  return NB_OK;
}

static nb_code bias_add_grad_kernel(nbop_kargs *k) {
  const bias_plan *p = (const bias_plan *)k->scratch;
  nb_tensor *res = k->res[0];
  if (p->c == 0) return NB_OK;
  double *acc = nbcore_scratch_alloc(k->ctx, (size_t)p->c * sizeof *acc);
  if (!acc) return nbop_kfail(k, NB_NOMEM, "out of memory for %lld sums", (long long)p->c);
  memset(acc, 0, (size_t)p->c * sizeof *acc);
  if (res->dtype == NB_F32)
    bias_add_grad_f32(p, nbcore_tdata(k->in[0]), acc);
  else
    bias_add_grad_f64(p, nbcore_tdata(k->in[0]), acc);
  for (int64_t ch = 0; ch < p->c; ch++) {
    if (res->dtype == NB_F32)
      ((float *)nbcore_tdata(res))[ch] = (float)acc[ch];
    else
      ((double *)nbcore_tdata(res))[ch] = acc[ch];
  }
  nbcore_scratch_free(k->ctx, acc);
  return NB_OK;
}

/* ---- the table ----------------------------------------------------------------------- */

static const int64_t unit_dilations[4] = {1, 1, 1, 1};

#define REQUIRED_INTS(NAME) \
  { NAME, NB_ATTR_INTS, {.n = 0}, true }
#define INTS_ATTR(NAME, V, N) \
  { NAME, NB_ATTR_INTS, {.ints = V, .n = N}, false }
#define PADDING_ATTR \
  { "padding", NB_ATTR_STR, {.s = NULL}, true }
#define FORMAT_ATTR \
  { "data_format", NB_ATTR_STR, {.s = "NHWC"}, false }
#define FORMAT_CHECK \
  { .choices = formats }
/* use_cudnn_on_gpu picks a GPU library in TF; it changes nothing here */
#define CONV_ATTRS                                                  \
  .nattrs = 6,                                                      \
  .attrs = {REQUIRED_INTS("strides"),                               \
            {"use_cudnn_on_gpu", NB_ATTR_BOOL, {.b = true}, false}, \
            PADDING_ATTR,                                           \
            INTS_ATTR("explicit_paddings", NULL, 0),                \
            FORMAT_ATTR,                                            \
            INTS_ATTR("dilations", unit_dilations, 4)},             \
  .checks = {[C_PADDING] = {.choices = paddings}, [C_FORMAT] = FORMAT_CHECK}
#define MAX_POOL_ATTRS                                                                                               \
  .nattrs = 5,                                                                                                       \
  .attrs = {REQUIRED_INTS("ksize"), REQUIRED_INTS("strides"), PADDING_ATTR, INTS_ATTR("explicit_paddings", NULL, 0), \
            FORMAT_ATTR},                                                                                            \
  .checks = {[P_PADDING] = {.choices = paddings}, [P_EXPLICIT + 1] = FORMAT_CHECK}
#define POOL_ATTRS                                                                                     \
  .nattrs = 4, .attrs = {REQUIRED_INTS("ksize"), REQUIRED_INTS("strides"), PADDING_ATTR, FORMAT_ATTR}, \
  .checks = {[P_PADDING] = {.choices = implicit_paddings}, [P_EXPLICIT] = FORMAT_CHECK}

enum {
  OP_CONV2D,
  OP_CONV2D_BACKPROP_INPUT,
  OP_CONV2D_BACKPROP_FILTER,
  OP_MAX_POOL,
  OP_MAX_POOL_GRAD,
  OP_MAX_POOL_GRAD_GRAD,
  OP_AVG_POOL,
  OP_AVG_POOL_GRAD,
  OP_BIAS_ADD,
  OP_BIAS_ADD_GRAD,
  OP_COUNT
};

static nbop_def conv_ops[OP_COUNT] = {
    /* Conv2D's gradient reads input and filter; each backprop's gradient reads the two
       operands that are not a shape (the shapes come from Shape of them) */
    [OP_CONV2D] = {.name = "Conv2D",
                   .nin = 2,
                   .nout = 1,
                   .alias = -1,
                   CONV_ATTRS,
                   .validate = conv2d_validate,
                   .infer = conv2d_infer,
                   .kernel = conv2d_kernel},
    [OP_CONV2D_BACKPROP_INPUT] = {.name = "Conv2DBackpropInput",
                                  .nin = 3,
                                  .nout = 1,
                                  .alias = -1,
                                  .t_input = 1,
                                  CONV_ATTRS,
                                  .validate = backprop_input_validate,
                                  .infer = backprop_input_infer,
                                  .kernel = backprop_input_kernel},
    [OP_CONV2D_BACKPROP_FILTER] = {.name = "Conv2DBackpropFilter",
                                   .nin = 3,
                                   .nout = 1,
                                   .alias = -1,
                                   CONV_ATTRS,
                                   .validate = backprop_filter_validate,
                                   .infer = backprop_filter_infer,
                                   .kernel = backprop_filter_kernel},
    /* MaxPool's gradient routes dy through its input and output; the gradients of its
       gradient ops read orig_input and orig_output */
    [OP_MAX_POOL] = {.name = "MaxPool",
                     .nin = 1,
                     .nout = 1,
                     .alias = -1,
                     MAX_POOL_ATTRS,
                     .validate = pool_validate,
                     .infer = pool_infer,
                     .kernel = max_pool_kernel},
    [OP_MAX_POOL_GRAD] = {.name = "MaxPoolGrad",
                          .nin = 3,
                          .nout = 1,
                          .alias = -1,
                          MAX_POOL_ATTRS,
                          .validate = pool_validate,
                          .infer = max_pool_grad_infer,
                          .kernel = max_pool_grad_kernel},
    [OP_MAX_POOL_GRAD_GRAD] = {.name = "MaxPoolGradGrad",
                               .nin = 3,
                               .nout = 1,
                               .alias = -1,
                               POOL_ATTRS,
                               .validate = pool_validate,
                               .infer = max_pool_grad_grad_infer,
                               .kernel = max_pool_grad_grad_kernel},
    /* AvgPool's gradient needs only its input's shape; AvgPoolGrad's only dy */
    [OP_AVG_POOL] = {.name = "AvgPool",
                     .nin = 1,
                     .nout = 1,
                     .alias = -1,
                     POOL_ATTRS,
                     .validate = pool_validate,
                     .infer = pool_infer,
                     .kernel = avg_pool_kernel},
    [OP_AVG_POOL_GRAD] = {.name = "AvgPoolGrad",
                          .nin = 2,
                          .nout = 1,
                          .alias = -1,
                          .t_input = 1,
                          POOL_ATTRS,
                          .validate = pool_validate,
                          .infer = avg_pool_grad_infer,
                          .kernel = avg_pool_grad_kernel},
    /* BiasAdd's gradient is dy and BiasAddGrad(dy); BiasAddGrad's broadcasts dy back to
       its input's shape */
    [OP_BIAS_ADD] = {.name = "BiasAdd",
                     .nin = 2,
                     .nout = 1,
                     .alias = -1,
                     .nattrs = 1,
                     .attrs = {FORMAT_ATTR},
                     .checks = {FORMAT_CHECK},
                     .validate = bias_validate,
                     .infer = bias_add_infer,
                     .kernel = bias_add_kernel},
    [OP_BIAS_ADD_GRAD] = {.name = "BiasAddGrad",
                          .nin = 1,
                          .nout = 1,
                          .alias = -1,
                          .nattrs = 1,
                          .attrs = {FORMAT_ATTR},
                          .checks = {FORMAT_CHECK},
                          .validate = bias_validate,
                          .infer = bias_add_grad_infer,
                          .kernel = bias_add_grad_kernel},
};

nbop_family nbop_conv_family(void) { return (nbop_family){conv_ops, OP_COUNT}; }

/* ---- wrappers ------------------------------------------------------------------------ */

static nb_tensor *call_conv(nb_ctx *c, int op, nb_tensor *a, nb_tensor *b, nb_tensor *d, const nb_conv2d_attrs *at) {
  if (!nbop_live(c)) return NULL;
  if (!at || !at->strides || !at->padding) {
    nbcore_fail(c, NB_INVALID, "%s: attrs, strides or padding is NULL", conv_ops[op].name);
    return NULL;
  }
  nbop_attrval v[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&conv_ops[op], v);
  v[C_STRIDES].ints = at->strides;
  v[C_STRIDES].n = 4;
  v[C_PADDING].s = at->padding;
  if (at->explicit_paddings) v[C_EXPLICIT].ints = at->explicit_paddings, v[C_EXPLICIT].n = 8;
  if (at->data_format) v[C_FORMAT].s = at->data_format;
  if (at->dilations) v[C_DILATIONS].ints = at->dilations;
  nb_tensor *in[3] = {a, b, d};
  return nbop_call(c, &conv_ops[op], in, conv_ops[op].nin, v);
}

nb_tensor *nb_conv2d(nb_ctx *c, nb_tensor *input, nb_tensor *filter, const nb_conv2d_attrs *a) {
  return call_conv(c, OP_CONV2D, input, filter, NULL, a);
}

nb_tensor *nb_conv2d_backprop_input(nb_ctx *c, nb_tensor *input_sizes, nb_tensor *filter, nb_tensor *out_backprop,
                                    const nb_conv2d_attrs *a) {
  return call_conv(c, OP_CONV2D_BACKPROP_INPUT, input_sizes, filter, out_backprop, a);
}

nb_tensor *nb_conv2d_backprop_filter(nb_ctx *c, nb_tensor *input, nb_tensor *filter_sizes, nb_tensor *out_backprop,
                                     const nb_conv2d_attrs *a) {
  return call_conv(c, OP_CONV2D_BACKPROP_FILTER, input, filter_sizes, out_backprop, a);
}

static nb_tensor *call_pool(nb_ctx *c, int op, nb_tensor *a, nb_tensor *b, nb_tensor *d, const nb_pool_attrs *at) {
  if (!nbop_live(c)) return NULL;
  if (!at || !at->ksize || !at->strides || !at->padding) {
    nbcore_fail(c, NB_INVALID, "%s: attrs, ksize, strides or padding is NULL", conv_ops[op].name);
    return NULL;
  }
  if (at->explicit_paddings && !pool_has_explicit(&conv_ops[op])) {
    nbcore_fail(c, NB_INVALID, "%s: takes no explicit_paddings", conv_ops[op].name);
    return NULL;
  }
  nbop_attrval v[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&conv_ops[op], v);
  v[P_KSIZE].ints = at->ksize;
  v[P_KSIZE].n = 4;
  v[P_STRIDES].ints = at->strides;
  v[P_STRIDES].n = 4;
  v[P_PADDING].s = at->padding;
  if (at->explicit_paddings) v[P_EXPLICIT].ints = at->explicit_paddings, v[P_EXPLICIT].n = 8;
  if (at->data_format) v[pool_format_slot(&conv_ops[op])].s = at->data_format;
  nb_tensor *in[3] = {a, b, d};
  return nbop_call(c, &conv_ops[op], in, conv_ops[op].nin, v);
}

nb_tensor *nb_max_pool(nb_ctx *c, nb_tensor *input, const nb_pool_attrs *a) {
  return call_pool(c, OP_MAX_POOL, input, NULL, NULL, a);
}

nb_tensor *nb_max_pool_grad(nb_ctx *c, nb_tensor *orig_input, nb_tensor *orig_output, nb_tensor *grad,
                            const nb_pool_attrs *a) {
  return call_pool(c, OP_MAX_POOL_GRAD, orig_input, orig_output, grad, a);
}

nb_tensor *nb_max_pool_grad_grad(nb_ctx *c, nb_tensor *orig_input, nb_tensor *orig_output, nb_tensor *grad,
                                 const nb_pool_attrs *a) {
  return call_pool(c, OP_MAX_POOL_GRAD_GRAD, orig_input, orig_output, grad, a);
}

nb_tensor *nb_avg_pool(nb_ctx *c, nb_tensor *value, const nb_pool_attrs *a) {
  return call_pool(c, OP_AVG_POOL, value, NULL, NULL, a);
}

nb_tensor *nb_avg_pool_grad(nb_ctx *c, nb_tensor *orig_input_shape, nb_tensor *grad, const nb_pool_attrs *a) {
  return call_pool(c, OP_AVG_POOL_GRAD, orig_input_shape, grad, NULL, a);
}

static nb_tensor *call_bias(nb_ctx *c, int op, nb_tensor *a, nb_tensor *b, const char *data_format) {
  nbop_attrval v[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&conv_ops[op], v);
  if (data_format) v[0].s = data_format;
  nb_tensor *in[2] = {a, b};
  return nbop_call(c, &conv_ops[op], in, conv_ops[op].nin, v);
}

nb_tensor *nb_bias_add(nb_ctx *c, nb_tensor *value, nb_tensor *bias, const char *data_format) {
  return call_bias(c, OP_BIAS_ADD, value, bias, data_format);
}

nb_tensor *nb_bias_add_grad(nb_ctx *c, nb_tensor *out_backprop, const char *data_format) {
  return call_bias(c, OP_BIAS_ADD_GRAD, out_backprop, NULL, data_format);
}
