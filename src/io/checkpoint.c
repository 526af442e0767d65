/* Checkpoints in TF's V2 format (TF's tensor bundle): PREFIX.index, a table (table.c)
   whose entry "" is a BundleHeader and whose other entries are BundleEntry messages, and
   PREFIX.data-00000-of-00001, the tensors' little-endian bytes. Saving writes both files
   under ".tmp" names, fsyncs them and the directory, renames the data file, then the
   index. A kill between the two renames leaves the new data beside the old index: every
   reader then finds the old index failing its CRCs against the data and takes the whole
   new index still in PREFIX.index.tmp instead, and the next save renames it into place
   first. Restores stage every tensor (CRC checked) before writing any variable. */
#define _POSIX_C_SOURCE 200809L /* open, fsync, pread */
#include "file_read.h"
#include "graphdef_common.h"
#include "table.h"
#include "tensor_bundle.pb-c.h"

#include "../core/variable.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATA_SUFFIX ".data-00000-of-00001"
#define TMP_SUFFIX ".tmp"
#define STEP_KEY "optimizer/iterations"
#define OBJECT_SUFFIX "/.ATTRIBUTES/VARIABLE_VALUE"

/* One tensor to save or restore. */
typedef struct item {
  char *key;
  nb_variable *var;        /* NULL: the optimizer's step counter or a slot (below) */
  const nb_variable *like; /* a slot's variable (dtype and shape) */
  int slot;                /* the slot's index, -1 for none */
  nb_dtype dtype;
  int rank;
  const int64_t *shape;
  const void *data;      /* save: the bytes */
  nbcore_buffer *staged; /* restore: the read bytes, handed to the variable */
  size_t bytes;
  bool missing; /* restore: a slot absent from the checkpoint (zeros) */
} item;

typedef struct plan {
  item *items;
  int32_t n, cap;
  int64_t step;
} plan;

static char *joined(const char *a, const char *b, const char *c) {
  size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
  char *s = malloc(la + lb + lc + 1);
  if (!s) return NULL;
  memcpy(s, a, la);
  memcpy(s + la, b, lb);
  memcpy(s + la + lb, c, lc + 1);
  return s;
}

/* "KEY/SLOT", or TF 2's slot key for an object-based key. */
static char *slot_key(const char *key, const char *slot) {
  size_t n = strlen(key), m = strlen(OBJECT_SUFFIX);
  if (n <= m || strcmp(key + n - m, OBJECT_SUFFIX) != 0) return joined(key, "/", slot);
  char *path = malloc(n - m + 1), *s = NULL;
  if (path) {
    memcpy(path, key, n - m);
    path[n - m] = 0;
    char *tail = joined("/.OPTIMIZER_SLOT/optimizer/", slot, OBJECT_SUFFIX);
    s = tail ? joined(path, tail, "") : NULL;
    free(tail);
  }
  free(path);
  return s;
}

static item *plan_add(plan *p, nb_ctx *c, char *key) {
  if (!key || !nbcore_grow_array((void **)&p->items, &p->cap, p->n + 1, sizeof *p->items)) {
    free(key);
    nbcore_fail(c, NB_NOMEM, "checkpoint: out of memory");
    return NULL;
  }
  item *it = &p->items[p->n++];
  *it = (item){.key = key, .slot = -1};
  return it;
}

static void plan_free(nb_ctx *c, plan *p) {
  for (int32_t i = 0; i < p->n; i++) {
    free(p->items[i].key);
    nbcore_buffer_release(c, p->items[i].staged);
  }
  free(p->items);
}

static void describe(item *it, const nb_variable *v) {
  it->dtype = v->dtype;
  it->rank = v->rank;
  it->shape = v->shape;
  it->bytes = (size_t)v->size * nb_dtype_size(v->dtype);
}

/* The tensors of vars (and opt's): keys, variables, dtypes and shapes. Saving only lists
   slots that exist; restoring lists every slot. */
static nb_code make_plan(nb_ctx *c, const char *who, nb_variable *const *vars, const char *const *keys, int n,
                         const nb_optimizer *opt, bool saving, plan *p) {
  if (n < 0 || (n > 0 && !vars)) return nbcore_fail(c, NB_INVALID, "%s: %d variables at %p", who, n, (void *)vars);
  for (int i = 0; i < n; i++) {
    const char *key = keys ? keys[i] : vars[i] ? vars[i]->name : NULL;
    if (!vars[i] || vars[i]->freed) return nbcore_fail(c, NB_INVALID, "%s: variable %d is NULL or freed", who, i);
    if (!key || !*key) return nbcore_fail(c, NB_INVALID, "%s: variable '%s' has an empty key", who, vars[i]->name);
    item *it = plan_add(p, c, joined(key, "", ""));
    if (!it) return c->status;
    it->var = vars[i];
    describe(it, vars[i]);
  }
  if (!opt) return NB_OK;
  int nslots;
  const nbcore_optim_state *state = nbcore_optim_state_of(opt);
  const char *const *names = state->slot_names(opt, &nslots);
  for (int i = 0; i < n; i++)
    for (int s = 0; s < nslots; s++) {
      const nb_variable *slot = state->slot(opt, vars[i], names[s]);
      if (saving && !slot) continue;
      item *it = plan_add(p, c, slot_key(p->items[i].key, names[s]));
      if (!it) return c->status;
      it->like = vars[i];
      it->slot = s;
      describe(it, vars[i]);
      if (saving) it->data = nb_variable_data(slot);
    }
  item *step = plan_add(p, c, joined(STEP_KEY, "", ""));
  if (!step) return c->status;
  p->step = state->iterations(opt);
  *step =
      (item){.key = step->key, .slot = -1, .dtype = NB_I64, .bytes = sizeof(int64_t), .data = saving ? &p->step : NULL};
  return NB_OK;
}

static int item_order(const void *a, const void *b) { return strcmp(((const item *)a)->key, ((const item *)b)->key); }

/* Sorts the plan by key; NB_INVALID naming a repeated key. */
static nb_code sort_plan(nb_ctx *c, const char *who, plan *p) {
  qsort(p->items, (size_t)p->n, sizeof *p->items, item_order);
  for (int32_t i = 1; i < p->n; i++)
    if (strcmp(p->items[i - 1].key, p->items[i].key) == 0)
      return nbcore_fail(c, NB_INVALID, "%s: key '%s' is used twice", who, p->items[i].key);
  return NB_OK;
}

/* ---- files ------------------------------------------------------------------------------------ */

static nb_code write_all(nb_ctx *c, const char *who, int fd, const char *path, const void *data, size_t n) {
  const uint8_t *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return nbio_io_error(c, who, "cannot write", path);
    p += w;
    n -= (size_t)w;
  }
  return NB_OK;
}

/* fsyncs the directory holding path, so that a rename into it is durable. */
static nb_code sync_dir(nb_ctx *c, const char *who, const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? malloc((size_t)(slash - path) + 2) : joined(".", "", "");
  if (!dir) return nbcore_fail(c, NB_NOMEM, "%s: out of memory", who);
  if (slash) {
    size_t len = slash == path ? 1 : (size_t)(slash - path);
    memcpy(dir, path, len);
    dir[len] = 0;
  }
  int fd = open(dir, O_RDONLY | O_CLOEXEC);
  nb_code code = fd < 0 || fsync(fd) != 0 ? nbio_io_error(c, who, "cannot sync the directory", dir) : NB_OK;
  if (fd >= 0) close(fd);
  free(dir);
  return code;
}

/* Syncs and closes fd after writing it returned code. */
static nb_code finish_file(nb_ctx *c, const char *who, int fd, const char *path, nb_code code) {
  if (code == NB_OK && fsync(fd) != 0) code = nbio_io_error(c, who, "cannot sync", path);
  if (close(fd) != 0 && code == NB_OK) code = nbio_io_error(c, who, "cannot close", path);
  return code;
}

/* Writes the plan's tensors to path, back to back, setting each one's offset and masked CRC. */
static nb_code write_data(nb_ctx *c, const char *who, const char *path, plan *p, uint64_t *offsets, uint32_t *crcs) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return nbio_io_error(c, who, "cannot create", path);
  uint64_t offset = 0;
  nb_code code = NB_OK;
  for (int32_t i = 0; i < p->n && code == NB_OK; i++) {
    offsets[i] = offset;
    crcs[i] = nbio_crc32c_mask(nbio_crc32c(0, p->items[i].data, p->items[i].bytes));
    code = write_all(c, who, fd, path, p->items[i].data, p->items[i].bytes);
    offset += p->items[i].bytes;
  }
  return finish_file(c, who, fd, path, code);
}

static nb_code write_file(nb_ctx *c, const char *who, const char *path, const nbio_bytes *b) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return nbio_io_error(c, who, "cannot create", path);
  return finish_file(c, who, fd, path, write_all(c, who, fd, path, b->p, b->n));
}

/* ---- the index ----------------------------------------------------------------------------------- */

/* The serialized BundleEntry of a planned tensor. */
static uint8_t *pack_entry(const item *it, uint64_t offset, uint32_t crc, size_t *len) {
  Nbpb__TensorShapeDim dims[NB_MAX_RANK], *dimp[NB_MAX_RANK];
  for (int d = 0; d < it->rank; d++) {
    nbpb__tensor_shape_dim__init(&dims[d]);
    dims[d].size = it->shape[d];
    dimp[d] = &dims[d];
  }
  Nbpb__TensorShape shape;
  nbpb__tensor_shape__init(&shape);
  shape.n_dim = (size_t)it->rank;
  shape.dim = dimp;
  Nbpb__BundleEntry e;
  nbpb__bundle_entry__init(&e);
  e.dtype = nbio_dtype_to_tf(it->dtype);
  e.shape = &shape;
  e.offset = (int64_t)offset;
  e.size = (int64_t)it->bytes;
  e.crc32c = crc;
  *len = nbpb__bundle_entry__get_packed_size(&e);
  uint8_t *buf = malloc(*len ? *len : 1);
  if (buf) nbpb__bundle_entry__pack(&e, buf);
  return buf;
}

/* The header (one little-endian shard, TF's bundle version 1) and every entry as a table. */
static nb_code build_index(nb_ctx *c, const char *who, const plan *p, const uint64_t *offsets, const uint32_t *crcs,
                           nbio_bytes *out) {
  Nbpb__VersionDef version;
  nbpb__version_def__init(&version);
  version.producer = 1;
  Nbpb__BundleHeader h;
  nbpb__bundle_header__init(&h);
  h.num_shards = 1;
  h.endianness = NBPB__BUNDLE_HEADER__ENDIANNESS__LITTLE;
  h.version = &version;
  uint8_t header[64];
  nbio_table_kv *kv = calloc((size_t)p->n + 1, sizeof *kv);
  bool oom = !kv;
  if (kv) kv[0] = (nbio_table_kv){"", 0, header, nbpb__bundle_header__pack(&h, header)};
  for (int32_t i = 0; !oom && i < p->n; i++) {
    kv[i + 1] = (nbio_table_kv){p->items[i].key, strlen(p->items[i].key), NULL, 0};
    oom = !(kv[i + 1].val = pack_entry(&p->items[i], offsets[i], crcs[i], &kv[i + 1].vlen));
  }
  if (!oom) nbio_table_build(kv, p->n + 1, out);
  for (int32_t i = 1; kv && i <= p->n; i++) free((void *)kv[i].val);
  free(kv);
  return oom || out->oom ? nbcore_fail(c, NB_NOMEM, "%s: out of memory building the index", who) : NB_OK;
}

/* An open checkpoint: its parsed index and its data file. */
typedef struct bundle {
  char *index_path, *data_path;
  uint8_t *index_bytes;
  nbio_table table;
  int data_fd;
  uint64_t data_size;
} bundle;

static void bundle_close(bundle *b) {
  nbio_table_free(&b->table);
  free(b->index_bytes);
  free(b->index_path);
  free(b->data_path);
  if (b->data_fd >= 0) close(b->data_fd);
  *b = (bundle){.data_fd = -1};
}

static nb_code corrupt(nb_ctx *c, const char *who, const char *path, const char *key, const char *what) {
  if (key) return nbcore_fail(c, NB_CORRUPT, "%s: %s: tensor '%s': %s", who, path, key, what);
  return nbcore_fail(c, NB_CORRUPT, "%s: %s: %s", who, path, what);
}

static nb_code check_header(nb_ctx *c, const char *who, const bundle *b) {
  const nbio_table_kv *kv = nbio_table_find(&b->table, "");
  if (!kv) return corrupt(c, who, b->index_path, NULL, "no header entry");
  Nbpb__BundleHeader *h = nbpb__bundle_header__unpack(NULL, kv->vlen, kv->val);
  if (!h) return corrupt(c, who, b->index_path, NULL, "unreadable header entry");
  nb_code code = NB_OK;
  if (h->num_shards != 1)
    code = nbcore_fail(c, NB_UNIMPLEMENTED, "%s: %s: %d shards (nabla reads one)", who, b->index_path, h->num_shards);
  else if (h->endianness != NBPB__BUNDLE_HEADER__ENDIANNESS__LITTLE)
    code = nbcore_fail(c, NB_UNIMPLEMENTED, "%s: %s: big-endian checkpoint", who, b->index_path);
  nbpb__bundle_header__free_unpacked(h, NULL);
  return code;
}

/* Opens the checkpoint of index file index_path and data file prefix + DATA_SUFFIX. */
static nb_code bundle_open(nb_ctx *c, const char *who, const char *prefix, const char *index_path, bundle *b) {
  *b = (bundle){.data_fd = -1};
  b->index_path = joined(index_path, "", "");
  b->data_path = joined(prefix, DATA_SUFFIX, "");
  if (!b->index_path || !b->data_path) return nbcore_fail(c, NB_NOMEM, "%s: out of memory", who);
  size_t n;
  nb_code code = nbio_read_file(c, who, b->index_path, &b->index_bytes, &n);
  if (code != NB_OK) return code;
  bool oom;
  const char *err = nbio_table_parse(b->index_bytes, n, &b->table, &oom);
  if (err)
    return oom ? nbcore_fail(c, NB_NOMEM, "%s: %s: %s", who, b->index_path, err)
               : corrupt(c, who, b->index_path, NULL, err);
  if ((code = check_header(c, who, b)) != NB_OK) return code;
  struct stat st;
  b->data_fd = open(b->data_path, O_RDONLY | O_CLOEXEC);
  if (b->data_fd < 0 || fstat(b->data_fd, &st) != 0) return nbio_io_error(c, who, "cannot open", b->data_path);
  b->data_size = (uint64_t)st.st_size;
  return NB_OK;
}

/* What an index entry says of its tensor. */
typedef struct entry {
  bool known_dtype; /* one of nabla's dtypes */
  nb_dtype dtype;
  int rank;
  int64_t shape[NB_MAX_RANK];
  uint64_t offset, size;
  uint32_t crc;
} entry;

static nb_code decode_shape(nb_ctx *c, const char *who, const bundle *b, const char *key, const Nbpb__BundleEntry *e,
                            entry *out) {
  if (!e->shape || e->shape->unknown_rank || e->shape->n_dim > NB_MAX_RANK)
    return corrupt(c, who, b->index_path, key, "unknown rank or rank above 8");
  out->rank = (int)e->shape->n_dim;
  int64_t count = 1;
  for (int d = 0; d < out->rank; d++) {
    out->shape[d] = e->shape->dim[d]->size;
    if (out->shape[d] < 0) return corrupt(c, who, b->index_path, key, "negative dimension");
  }
  if (!nbcore_shape_checked_size(out->rank, out->shape, &count))
    return corrupt(c, who, b->index_path, key, "dims overflow");
  if (out->known_dtype && (uint64_t)count * nb_dtype_size(out->dtype) != out->size)
    return corrupt(c, who, b->index_path, key, "byte size does not match the shape");
  return NB_OK;
}

static nb_code decode_entry(nb_ctx *c, const char *who, const bundle *b, const nbio_table_kv *kv, entry *out) {
  Nbpb__BundleEntry *e = nbpb__bundle_entry__unpack(NULL, kv->vlen, kv->val);
  if (!e) return corrupt(c, who, b->index_path, kv->key, "unreadable entry");
  *out = (entry){.offset = (uint64_t)e->offset, .size = (uint64_t)e->size, .crc = e->crc32c};
  out->known_dtype = nbio_dtype_from_tf(e->dtype, &out->dtype);
  nb_code code = NB_OK;
  if (e->n_slices > 0 || e->shard_id != 0)
    code = nbcore_fail(c, NB_UNIMPLEMENTED, "%s: %s: tensor '%s' is sliced or in another shard", who, b->index_path,
                       kv->key);
  else if (e->offset < 0 || e->size < 0 || out->offset > b->data_size || out->size > b->data_size - out->offset)
    code = corrupt(c, who, b->data_path, kv->key, "the tensor's bytes lie past the end of the data (truncated?)");
  else
    code = decode_shape(c, who, b, kv->key, e, out);
  nbpb__bundle_entry__free_unpacked(e, NULL);
  return code;
}

/* Reads the tensor's bytes into buf (e->size of them) and checks their CRC. */
static nb_code read_tensor(nb_ctx *c, const char *who, const bundle *b, const char *key, const entry *e, uint8_t *buf) {
  int64_t got = io_pread_full(b->data_fd, buf, (size_t)e->size, (uint64_t)e->offset);
  if (got < 0) return nbio_io_error(c, who, "cannot read", b->data_path);
  if ((uint64_t)got < e->size) return corrupt(c, who, b->data_path, key, "cut short");
  if (nbio_crc32c_mask(nbio_crc32c(0, buf, (size_t)got)) != e->crc)
    return corrupt(c, who, b->data_path, key, "CRC mismatch");
  return NB_OK;
}

/* Checks every tensor of nabla's dtypes against its CRC. */
static nb_code verify_all(nb_ctx *c, const char *who, const bundle *b) {
  for (int32_t i = 0; i < b->table.n; i++) {
    if (!*b->table.kv[i].key) continue;
    entry e;
    uint8_t *bytes = NULL;
    nb_code code = decode_entry(c, who, b, &b->table.kv[i], &e);
    if (code == NB_OK && e.known_dtype && !(bytes = malloc(e.size ? (size_t)e.size : 1)))
      code = nbcore_fail(c, NB_NOMEM, "%s: out of memory reading '%s'", who, b->table.kv[i].key);
    if (code == NB_OK && e.known_dtype) code = read_tensor(c, who, b, b->table.kv[i].key, &e, bytes);
    free(bytes);
    if (code != NB_OK) return code;
  }
  return NB_OK;
}

/* Whether the index at path opens and matches the data, without touching c's status. */
static bool pair_is_whole(const char *prefix, const char *index_path) {
  nb_ctx *scratch = nb_eager_new();
  bundle b = {.data_fd = -1};
  bool whole =
      scratch && bundle_open(scratch, "", prefix, index_path, &b) == NB_OK && verify_all(scratch, "", &b) == NB_OK;
  bundle_close(&b);
  nb_ctx_free(scratch);
  return whole;
}

/* Opens prefix's checkpoint: PREFIX.index, or PREFIX.index.tmp when a save was killed
   between its renames (the index fails against the data, the temporary one matches). */
static nb_code checkpoint_open(nb_ctx *c, const char *who, const char *prefix, bundle *b) {
  char *index = joined(prefix, ".index", ""), *tmp = joined(prefix, ".index", TMP_SUFFIX);
  nb_code code;
  if (!index || !tmp)
    code = nbcore_fail(c, NB_NOMEM, "%s: out of memory", who);
  else if (access(tmp, F_OK) == 0 && !pair_is_whole(prefix, index) && pair_is_whole(prefix, tmp))
    code = bundle_open(c, who, prefix, tmp, b);
  else
    code = bundle_open(c, who, prefix, index, b);
  free(index);
  free(tmp);
  return code;
}

/* ---- saving --------------------------------------------------------------------------------- */

/* A save killed between its renames left the new index in tmp: finish it, so that this
   save's temporary files do not overwrite the only whole copy of it. */
static nb_code finish_killed_save(nb_ctx *c, const char *who, const char *prefix, const char *index, const char *tmp) {
  if (access(tmp, F_OK) != 0 || pair_is_whole(prefix, index) || !pair_is_whole(prefix, tmp)) return NB_OK;
  if (rename(tmp, index) != 0) return nbio_io_error(c, who, "cannot rename into place", tmp);
  return sync_dir(c, who, index);
}

/* Writes the sorted plan: temporary files, synced, then renamed data first. */
static nb_code save_plan(nb_ctx *c, const char *who, const char *prefix, plan *p, char **paths) {
  /* paths: index, index.tmp, data, data.tmp */
  nb_code code = finish_killed_save(c, who, prefix, paths[0], paths[1]);
  bool own_tmp = code == NB_OK; /* from here on the temporaries are this save's */
  uint64_t *offsets = calloc((size_t)p->n + 1, sizeof *offsets);
  uint32_t *crcs = calloc((size_t)p->n + 1, sizeof *crcs);
  nbio_bytes index = {0};
  if (code == NB_OK && (!offsets || !crcs)) code = nbcore_fail(c, NB_NOMEM, "%s: out of memory", who);
  if (code == NB_OK) code = write_data(c, who, paths[3], p, offsets, crcs);
  if (code == NB_OK) code = build_index(c, who, p, offsets, crcs, &index);
  if (code == NB_OK) code = write_file(c, who, paths[1], &index);
  if (code == NB_OK) code = sync_dir(c, who, paths[0]);
  if (code == NB_OK && rename(paths[3], paths[2]) != 0)
    code = nbio_io_error(c, who, "cannot rename into place", paths[3]);
  bool data_renamed = code == NB_OK;
  if (code == NB_OK) code = sync_dir(c, who, paths[0]);
  if (code == NB_OK && rename(paths[1], paths[0]) != 0)
    code = nbio_io_error(c, who, "cannot rename into place", paths[1]);
  if (code == NB_OK) code = sync_dir(c, who, paths[0]);
  /* A save that failed before its data went into place leaves the previous checkpoint as
     it was: its own temporaries go (after the data rename, index.tmp is the only index
     that matches the data, so it stays for the next reader). */
  if (code != NB_OK && own_tmp && !data_renamed) {
    unlink(paths[3]);
    unlink(paths[1]);
  }
  nbio_bytes_free(&index);
  free(offsets);
  free(crcs);
  return code;
}

nb_code nb_checkpoint_save(nb_ctx *c, const char *prefix, nb_variable *const *vars, const char *const *keys, int n,
                           const nb_optimizer *opt) {
  const char *who = "nb_checkpoint_save";
  if (!c) return NB_INVALID;
  if (c->status != NB_OK) return c->status;
  if (!prefix || !*prefix) return nbcore_fail(c, NB_INVALID, "%s: empty prefix", who);
  plan p = {0};
  char *paths[4] = {joined(prefix, ".index", ""), joined(prefix, ".index", TMP_SUFFIX), joined(prefix, DATA_SUFFIX, ""),
                    joined(prefix, DATA_SUFFIX, TMP_SUFFIX)};
  nb_code code = make_plan(c, who, vars, keys, n, opt, true, &p);
  if (code == NB_OK) code = sort_plan(c, who, &p);
  for (int i = 0; i < 4; i++)
    if (code == NB_OK && !paths[i]) code = nbcore_fail(c, NB_NOMEM, "%s: out of memory", who);
  for (int32_t i = 0; code == NB_OK && i < p.n; i++)
    if (p.items[i].var) p.items[i].data = nb_variable_data(p.items[i].var);
  if (code == NB_OK) code = save_plan(c, who, prefix, &p, paths);
  for (int i = 0; i < 4; i++) free(paths[i]);
  plan_free(c, &p);
  return code;
}

/* ---- restoring ----------------------------------------------------------------------------------- */

/* Reads every planned tensor into a buffer of c's pool (where the variables' old buffers
   go, so that repeated restores reuse memory already mapped), checking it against its
   variable. */
static nb_code stage(nb_ctx *c, const char *who, const bundle *b, plan *p) {
  for (int32_t i = 0; i < p->n; i++) {
    item *it = &p->items[i];
    const nbio_table_kv *kv = nbio_table_find(&b->table, it->key);
    if (!kv && it->slot >= 0) {
      it->missing = true;
      continue;
    }
    if (!kv) return nbcore_fail(c, NB_NOT_FOUND, "%s: %s: no tensor '%s'", who, b->index_path, it->key);
    entry e;
    nb_code code = decode_entry(c, who, b, kv, &e);
    if (code != NB_OK) return code;
    if (!e.known_dtype || e.dtype != it->dtype)
      return nbcore_fail(c, NB_DTYPE, "%s: %s: tensor '%s' is %s, its variable %s", who, b->index_path, it->key,
                         e.known_dtype ? nb_dtype_name(e.dtype) : "of a dtype nabla lacks", nb_dtype_name(it->dtype));
    if (e.rank != it->rank || (e.rank > 0 && memcmp(e.shape, it->shape, (size_t)e.rank * sizeof *e.shape) != 0)) {
      char s1[160], s2[160];
      return nbcore_fail(c, NB_SHAPE, "%s: %s: tensor '%s' has shape %s, its variable %s", who, b->index_path, it->key,
                         nbcore_shape_str(s1, sizeof s1, e.rank, e.shape),
                         nbcore_shape_str(s2, sizeof s2, it->rank, it->shape));
    }
    if (!(it->staged = nbcore_buffer_new(c, it->bytes)))
      return nbcore_fail(c, NB_NOMEM, "%s: out of memory reading '%s'", who, it->key);
    if ((code = read_tensor(c, who, b, it->key, &e, it->staged->data)) != NB_OK) return code;
  }
  return NB_OK;
}

/* The variable an item restores into, made (slot, step counter) when missing. */
static nb_variable *target_of(nb_ctx *c, const item *it, nb_optimizer *opt) {
  if (it->var) return it->var;
  if (it->slot < 0) return nbcore_optim_state_of(opt)->step_variable(opt, c);
  nb_variable *const *slots = nbcore_optim_state_of(opt)->slots(opt, c, (nb_variable *)it->like);
  return slots ? slots[it->slot] : NULL;
}

/* Hands each staged buffer to its variable (no copy; holders of the old value keep it);
   slots the checkpoint lacks become zeros. Every target is made first, so that only
   zeroing a slot that a read still holds can run out of memory after the first write. */
static nb_code commit(nb_ctx *c, plan *p, nb_optimizer *opt) {
  for (int32_t i = 0; i < p->n; i++)
    if (!(p->items[i].var = target_of(c, &p->items[i], opt))) return c->status;
  for (int32_t i = 0; i < p->n; i++) {
    item *it = &p->items[i];
    if (!it->missing) {
      nbcore_variable_adopt(c, it->var, it->staged);
      it->staged = NULL;
      continue;
    }
    void *dst = nbcore_variable_writable(c, it->var, false);
    if (!dst) return c->status;
    memset(dst, 0, it->bytes);
  }
  return NB_OK;
}

nb_code nb_checkpoint_restore(nb_ctx *c, const char *prefix, nb_variable *const *vars, const char *const *keys, int n,
                              nb_optimizer *opt) {
  const char *who = "nb_checkpoint_restore";
  if (!c) return NB_INVALID;
  if (c->status != NB_OK) return c->status;
  if (!prefix || !*prefix) return nbcore_fail(c, NB_INVALID, "%s: empty prefix", who);
  plan p = {0};
  bundle b = {.data_fd = -1};
  nb_code code = make_plan(c, who, vars, keys, n, opt, false, &p);
  if (code == NB_OK) code = checkpoint_open(c, who, prefix, &b);
  if (code == NB_OK) code = stage(c, who, &b, &p);
  if (code == NB_OK) code = commit(c, &p, opt);
  bundle_close(&b);
  plan_free(c, &p);
  return code;
}

/* ---- listing -------------------------------------------------------------------------------------- */

void nb_checkpoint_list_free(nb_checkpoint_entry *entries, int n) {
  for (int i = 0; entries && i < n; i++) free(entries[i].key);
  free(entries);
}

nb_code nb_checkpoint_list(nb_ctx *c, const char *prefix, nb_checkpoint_entry **entries, int *n) {
  const char *who = "nb_checkpoint_list";
  if (!c) return NB_INVALID;
  if (c->status != NB_OK) return c->status;
  if (!prefix || !entries || !n) return nbcore_fail(c, NB_INVALID, "%s: NULL argument", who);
  *entries = NULL;
  *n = 0;
  bundle b = {.data_fd = -1};
  nb_code code = checkpoint_open(c, who, prefix, &b);
  nb_checkpoint_entry *list = code == NB_OK ? calloc((size_t)b.table.n + 1, sizeof *list) : NULL;
  if (code == NB_OK && !list) code = nbcore_fail(c, NB_NOMEM, "%s: out of memory", who);
  int count = 0;
  for (int32_t i = 0; code == NB_OK && i < b.table.n; i++) {
    entry e;
    if (!*b.table.kv[i].key || (code = decode_entry(c, who, &b, &b.table.kv[i], &e)) != NB_OK || !e.known_dtype)
      continue;
    nb_checkpoint_entry *out = &list[count++];
    *out = (nb_checkpoint_entry){joined(b.table.kv[i].key, "", ""), e.dtype, e.rank, {0}};
    memcpy(out->shape, e.shape, sizeof e.shape);
    if (!out->key) code = nbcore_fail(c, NB_NOMEM, "%s: out of memory", who);
  }
  bundle_close(&b);
  if (code != NB_OK) {
    nb_checkpoint_list_free(list, count);
    return code;
  }
  *entries = list;
  *n = count;
  return NB_OK;
}
