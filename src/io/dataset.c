/* Image classification datasets from IDX files (MNIST, Fashion-MNIST): the pixels stay
   bytes in the images file's buffer; batches are converted to float32 when made. */
#include "idx.h"

#include <stdio.h>
#include <stdlib.h>

struct nb_dataset {
  int64_t size; /* items */
  int64_t rows, cols;
  uint8_t *image_file, *label_file; /* the two files, read whole */
  const uint8_t *pixels;            /* [size, rows, cols], in image_file */
  const uint8_t *labels;            /* [size], in label_file */
  int64_t *order;                   /* batches read items order[first..first+n) */
};

/* NB_DTYPE / NB_SHAPE unless the file holds ubyte elements of the given rank. */
static nb_code check_ubyte(nb_ctx *c, const char *name, const nbio_idx *h, int rank, const char *what) {
  char s[160];
  if (h->type != NBIO_IDX_UBYTE)
    return nbcore_fail(c, NB_DTYPE, "%s: %s must be ubyte (type 0x08), the file has %s (0x%02x)", name, what,
                       nbio_idx_type_name(h->type), (unsigned)h->type);
  if (h->rank != rank)
    return nbcore_fail(c, NB_SHAPE, "%s: %s must have rank %d, the file has dims %s", name, what, rank,
                       nbcore_shape_str(s, sizeof s, h->rank, h->dims));
  return NB_OK;
}

static nb_code check_files(nb_ctx *c, const char *images_name, const nbio_idx *im, const char *labels_name,
                           const nbio_idx *lb) {
  nb_code rc = check_ubyte(c, images_name, im, 3, "images [count, rows, cols]");
  if (rc == NB_OK) rc = check_ubyte(c, labels_name, lb, 1, "labels [count]");
  if (rc == NB_OK && im->dims[0] != lb->dims[0])
    rc = nbcore_fail(c, NB_CORRUPT, "%s has %lld images but %s has %lld labels", images_name, (long long)im->dims[0],
                     labels_name, (long long)lb->dims[0]);
  return rc;
}

static void identity_order(nb_dataset *d) {
  for (int64_t i = 0; i < d->size; i++) d->order[i] = i;
}

/* A dataset over the two checked files, whose buffers it takes over; NULL when out of memory. */
static nb_dataset *dataset_new(const nbio_idx_file *images, const nbio_idx_file *labels) {
  int64_t size = images->idx.dims[0];
  nb_dataset *d = malloc(sizeof *d);
  int64_t *order = malloc(((size_t)size + 1) * sizeof *order);
  if (!d || !order) {
    free(d);
    free(order);
    return NULL;
  }
  *d = (nb_dataset){.size = size,
                    .rows = images->idx.dims[1],
                    .cols = images->idx.dims[2],
                    .image_file = images->bytes,
                    .label_file = labels->bytes,
                    .pixels = images->idx.data,
                    .labels = labels->idx.data,
                    .order = order};
  identity_order(d);
  return d;
}

nb_dataset *nbio_dataset_adopt(nb_ctx *c, const char *images_name, nbio_idx_file images, const char *labels_name,
                               nbio_idx_file labels) {
  nb_dataset *d = NULL;
  if (check_files(c, images_name, &images.idx, labels_name, &labels.idx) == NB_OK &&
      !(d = dataset_new(&images, &labels)))
    nbcore_fail(c, NB_NOMEM, "%s: out of memory for a dataset of %lld items", images_name,
                (long long)images.idx.dims[0]);
  if (!d) {
    free(images.bytes);
    free(labels.bytes);
  }
  return d;
}

nb_dataset *nb_dataset_idx(nb_ctx *c, const char *images_path, const char *labels_path) {
  nbio_idx_file images, labels;
  if (nbio_idx_load(c, images_path, &images) != NB_OK) return NULL;
  if (nbio_idx_load(c, labels_path, &labels) != NB_OK) {
    free(images.bytes);
    return NULL;
  }
  return nbio_dataset_adopt(c, images_path, images, labels_path, labels);
}

/* NB_CORRUPT unless d looks like Fashion-MNIST: 28x28 images, labels 0..9. */
static nb_code check_fashion_mnist(nb_ctx *c, const nb_dataset *d, const char *images_path, const char *labels_path) {
  if (d->rows != 28 || d->cols != 28)
    return nbcore_fail(c, NB_CORRUPT, "%s: Fashion-MNIST images are 28x28, these are %lldx%lld", images_path,
                       (long long)d->rows, (long long)d->cols);
  for (int64_t i = 0; i < d->size; i++)
    if (d->labels[i] > 9)
      return nbcore_fail(c, NB_CORRUPT, "%s: label %d of item %lld is not a Fashion-MNIST class 0..9", labels_path,
                         d->labels[i], (long long)i);
  return NB_OK;
}

nb_dataset *nb_fashion_mnist(nb_ctx *c, const char *dir, bool train) {
  if (!c || c->status != NB_OK) return NULL;
  const char *set = train ? "train" : "t10k";
  char images_path[4096], labels_path[4096];
  if (!dir) dir = NB_FASHION_MNIST_DIR;
  int ni = snprintf(images_path, sizeof images_path, "%s/%s-images-idx3-ubyte.gz", dir, set);
  int nl = snprintf(labels_path, sizeof labels_path, "%s/%s-labels-idx1-ubyte.gz", dir, set);
  if (ni < 0 || nl < 0 || (size_t)ni >= sizeof images_path || (size_t)nl >= sizeof labels_path) {
    nbcore_fail(c, NB_INVALID, "nb_fashion_mnist: directory name too long: %.64s...", dir);
    return NULL;
  }
  nb_dataset *d = nb_dataset_idx(c, images_path, labels_path);
  if (d && check_fashion_mnist(c, d, images_path, labels_path) != NB_OK) {
    nb_dataset_free(d);
    return NULL;
  }
  return d;
}

int64_t nb_dataset_size(const nb_dataset *d) { return d ? d->size : -1; }

void nb_dataset_image_dims(const nb_dataset *d, int64_t *rows, int64_t *cols) {
  if (rows) *rows = d ? d->rows : -1;
  if (cols) *cols = d ? d->cols : -1;
}

/* splitmix64 (Steele, Lea, Flood 2014): a tiny generator whose output depends only on
   the seed, the same on every machine and C library (rand() is neither). */
static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15u);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

/* Uniform in [0, n) without modulo bias: draws below 2^64 mod n are rejected, leaving a
   range that is a multiple of n. */
static uint64_t uniform_below(uint64_t *state, uint64_t n) {
  uint64_t reject_below = (0 - n) % n; /* 2^64 mod n */
  for (;;) {
    uint64_t r = splitmix64(state);
    if (r >= reject_below) return r % n;
  }
}

nb_code nb_dataset_shuffle(nb_dataset *d, uint64_t seed) {
  if (!d) return NB_INVALID;
  identity_order(d);
  uint64_t state = seed;
  for (int64_t i = d->size - 1; i > 0; i--) { /* Fisher-Yates */
    int64_t j = (int64_t)uniform_below(&state, (uint64_t)i + 1);
    int64_t t = d->order[i];
    d->order[i] = d->order[j];
    d->order[j] = t;
  }
  return NB_OK;
}

/* The images tensor's shape in layout; returns its rank, 0 for an unknown layout. */
static int images_shape(const nb_dataset *d, int64_t n, nb_image_layout layout, int64_t shape[4]) {
  shape[0] = n;
  switch (layout) {
    case NB_IMAGES_NHWC:
      shape[1] = d->rows;
      shape[2] = d->cols;
      shape[3] = 1;
      return 4;
    case NB_IMAGES_NCHW:
      shape[1] = 1;
      shape[2] = d->rows;
      shape[3] = d->cols;
      return 4;
    case NB_IMAGES_FLAT: shape[1] = d->rows * d->cols; return 2;
  }
  return 0;
}

static nb_code check_batch(nb_ctx *c, const nb_dataset *d, int64_t first, int64_t n, nb_tensor **images,
                           nb_tensor **labels) {
  if (c->graph)
    return nbcore_fail(c, NB_INVALID,
                       "nb_dataset_batch: needs an eager context (feed batches to a graph "
                       "through placeholders)");
  if (!d || !images || !labels) return nbcore_fail(c, NB_INVALID, "nb_dataset_batch: NULL dataset or output");
  if (first < 0 || n < 0 || first > d->size - n)
    return nbcore_fail(c, NB_INVALID, "nb_dataset_batch: items [%lld, %lld + %lld) are outside the dataset's %lld",
                       (long long)first, (long long)first, (long long)n, (long long)d->size);
  return NB_OK;
}

/* Scales each pixel to [0, 1] as p / 255 (what x / 255.0 gives in NumPy, bit for bit). */
static void scale_pixels(const uint8_t *restrict src, float *restrict dst, int64_t n) {
  for (int64_t p = 0; p < n; p++) dst[p] = (float)src[p] / 255.0f;
}

static void fill_batch(const nb_dataset *d, int64_t first, int64_t n, float *images, int32_t *labels) {
  int64_t pixels = d->rows * d->cols;
  for (int64_t k = 0; k < n; k++) {
    int64_t item = d->order[first + k];
    scale_pixels(d->pixels + item * pixels, images + k * pixels, pixels);
    labels[k] = d->labels[item];
  }
}

nb_code nb_dataset_batch(nb_ctx *c, const nb_dataset *d, int64_t first, int64_t n, nb_image_layout layout,
                         nb_tensor **images, nb_tensor **labels) {
  if (!c) return NB_INVALID;
  if (images) *images = NULL;
  if (labels) *labels = NULL;
  if (c->status != NB_OK) return c->status;
  if (check_batch(c, d, first, n, images, labels) != NB_OK) return c->status;
  int64_t shape[4];
  int rank = images_shape(d, n, layout, shape);
  if (!rank) return nbcore_fail(c, NB_INVALID, "nb_dataset_batch: unknown image layout %d", (int)layout);
  nb_tensor *x = nbcore_tensor_alloc(c, NB_F32, rank, shape);
  nb_tensor *y = x ? nbcore_tensor_alloc(c, NB_I32, 1, &n) : NULL;
  if (!y) {
    nb_tensor_free(x);
    return c->status;
  }
  fill_batch(d, first, n, nbcore_tdata(x), nbcore_tdata(y));
  *images = x;
  *labels = y;
  return NB_OK;
}

void nb_dataset_free(nb_dataset *d) {
  if (!d) return;
  free(d->image_file);
  free(d->label_file);
  free(d->order);
  free(d);
}
