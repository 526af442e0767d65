/* TF 1 control flow (Switch, Merge, Enter, Exit, NextIteration, LoopCond) raised into
   functional While and If nodes on a parsed GraphDef, as TensorFlow's
   FunctionalizeControlFlow does (tf2xla/functionalize_while.cc, functionalize_cond.cc).

   1. Frames: a walk from the graph's sources gives each node its loop frame: an Enter's
      consumers are in the frame its frame_name names (a child of the Enter input's
      frame), an Exit's in its frame's parent, every other node's in its inputs' frame.
   2. Frames are raised innermost first. In each frame the conds are raised first, then
      the frame itself becomes a While node in its parent frame; the root frame's conds
      come last.
   3. Conds: in topological order each node gets a branch state, the set of (predicate,
      branch) pairs it depends on (a Switch output adds its predicate and port, a cond
      Merge removes the one predicate its two inputs differ in). A Merge's cond is its
      predicate and the state outside it; the deepest cond is raised first, all its
      Merges together (those on the same predicate and outer state that do not depend on
      each other): each branch is the subgraph behind the Merge inputs of that branch, up
      to the Switches on the predicate, which become the If's inputs.
   4. Loops: the body is the subgraph behind the NextIteration inputs, the cond the one
      behind the LoopCond input; a loop variable's Merge and its Switch's true output are
      the function's argument, and so is a loop invariant's Enter.
   Control edges from what becomes a function argument (or an Identity of one, the
   pivots TF's builders add) are dropped: inside a function the arguments are there from
   the start. Nodes are addressed by index into gd->node; inputs are parsed into (node,
   port) references once and written back as strings at the end. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphdef.h"

enum { DT_BOOL = 10 }; /* TensorFlow's DataType enum value for bool */

typedef enum {
  K_OTHER,
  K_SWITCH,
  K_MERGE,
  K_ENTER,
  K_EXIT,
  K_NEXT,
  K_LOOPCOND,
  K_IDENTITY,
} node_kind;

/* A node input: output `port` of node `node`, or a control input (port -1). */
typedef struct ref {
  int node, port;
} ref;

typedef struct fnode {
  ref *in;
  int nin;
  int frame;
  int state; /* branch state id during a cond round */
  int arg;   /* the function argument this node stands for during an extraction, -1 */
  node_kind kind;
  bool dead;  /* removed: freed at the end */
  bool dirty; /* inputs changed: its strings are rewritten at the end */
} fnode;

typedef struct frame_info {
  const char *name; /* the Enter's frame_name attr (not terminated) */
  size_t name_len;
  int parent, depth, loop_cond;
} frame_info;

/* A (predicate, branch) pair of a branch state; states are sorted by predicate. */
typedef struct cpair {
  ref pred;
  int branch;
} cpair;

/* A Merge of a cond: its predicate, the state outside the cond, which input is which branch. */
typedef struct cond_merge {
  int node;
  ref pred;
  int outer;
  int branch_of_input[2];
} cond_merge;

typedef struct pass {
  Nbpb__GraphDef *gd;
  fnode *nodes; /* parallel to gd->node until finish() compacts it */
  size_t nnodes, cap_nodes;
  int *slots; /* name hash table: node index + 1, 0 empty */
  size_t nslots;
  frame_info *frames;
  int nframes, cap_frames;
  int *cons_start; /* consumers in CSR form: cons[cons_start[u] .. cons_start[u + 1]) */
  ref *cons;       /* (consumer, input slot) */
  cpair *pool;     /* interned branch states: state s is pool[st_off[s] .. st_off[s + 1]) */
  size_t npool, cap_pool;
  size_t *st_off;
  int nstates, cap_states;
  int fn_counter;
  char *err;
  size_t errcap;
} pass;

static nb_code fail(pass *p, nb_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static nb_code fail(pass *p, nb_code code, const char *fmt, ...) {
  if (p->errcap) {
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(p->err, p->errcap, "functionalize control flow: ");
    if (n >= 0 && (size_t)n < p->errcap) vsnprintf(p->err + n, p->errcap - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return code;
}

static nb_code nomem(pass *p) { return fail(p, NB_NOMEM, "out of memory"); }

static bool grow(void **buf, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t n = *cap ? *cap * 2 : 16;
  while (n < need) n *= 2;
  void *b = realloc(*buf, n * elem);
  if (!b) return false;
  *buf = b;
  *cap = n;
  return true;
}

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static Nbpb__NodeDef *def_of(const pass *p, int i) { return p->gd->node[i]; }
static const char *name_of(const pass *p, int i) { return p->gd->node[i]->name; }

/* ---- node kinds and names ---------------------------------------------------------------- */

static node_kind kind_of_op(const char *op) {
  static const struct {
    const char *op;
    node_kind kind;
  } kinds[] = {{"Switch", K_SWITCH},      {"Merge", K_MERGE},       {"Enter", K_ENTER},      {"Exit", K_EXIT},
               {"NextIteration", K_NEXT}, {"LoopCond", K_LOOPCOND}, {"Identity", K_IDENTITY}};
  const char *base = strncmp(op, "Ref", 3) == 0 ? op + 3 : op;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(base, kinds[i].op) == 0 && (base == op || kinds[i].kind != K_LOOPCOND)) return kinds[i].kind;
  return K_OTHER;
}

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603u; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211u;
  return h;
}

/* The node named s[0..n), -1 when none. */
static int find_node(const pass *p, const char *s, size_t n) {
  for (size_t i = hash_bytes(s, n) & (p->nslots - 1);; i = (i + 1) & (p->nslots - 1)) {
    if (!p->slots[i]) return -1;
    const char *name = name_of(p, p->slots[i] - 1);
    if (strncmp(name, s, n) == 0 && name[n] == '\0') return p->slots[i] - 1;
  }
}

static void insert_name(pass *p, int node) {
  const char *name = name_of(p, node);
  size_t i = hash_bytes(name, strlen(name)) & (p->nslots - 1);
  while (p->slots[i]) i = (i + 1) & (p->nslots - 1);
  p->slots[i] = node + 1;
}

/* A name table with room for at least `need` names at half load. */
static bool size_names(pass *p, size_t need) {
  if (need * 2 <= p->nslots) return true;
  size_t n = 64;
  while (n < need * 2) n *= 2;
  int *slots = calloc(n, sizeof *slots);
  if (!slots) return false;
  free(p->slots);
  p->slots = slots;
  p->nslots = n;
  for (size_t i = 0; i < p->gd->n_node; i++) insert_name(p, (int)i);
  return true;
}

static int data_inputs(const fnode *v) {
  int n = 0;
  while (n < v->nin && v->in[n].port >= 0) n++;
  return n;
}

/* Parses "name", "name:k" or "^name" into r. */
static nb_code parse_input(pass *p, int node, const char *s, ref *r) {
  bool control = s[0] == '^';
  const char *name = s + control;
  size_t n = strlen(name);
  const char *colon = strrchr(name, ':');
  r->port = control ? -1 : 0;
  if (!control && colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
    long port = strtol(colon + 1, NULL, 10);
    if (strlen(colon + 1) > 9 || port > INT_MAX)
      return fail(p, NB_CORRUPT, "node '%s': input '%s' has a bad output index", name_of(p, node), s);
    r->port = (int)port;
    n = (size_t)(colon - name);
  }
  r->node = find_node(p, name, n);
  if (r->node < 0) return fail(p, NB_CORRUPT, "node '%s': input '%s' names no node", name_of(p, node), s);
  return NB_OK;
}

static nb_code parse_graph(pass *p) {
  size_t n = p->gd->n_node;
  if (!grow((void **)&p->nodes, &p->cap_nodes, n, sizeof *p->nodes) || !size_names(p, n)) return nomem(p);
  memset(p->nodes, 0, n * sizeof *p->nodes);
  p->nnodes = n;
  for (size_t i = 0; i < n; i++) {
    fnode *v = &p->nodes[i];
    Nbpb__NodeDef *d = def_of(p, (int)i);
    v->kind = kind_of_op(d->op);
    v->frame = -1;
    v->arg = -1;
    if (d->n_input && !(v->in = malloc(d->n_input * sizeof *v->in))) return nomem(p);
    for (size_t j = 0; j < d->n_input; j++) {
      nb_code rc = parse_input(p, (int)i, d->input[j], &v->in[v->nin]);
      if (rc) return rc;
      v->nin++;
    }
  }
  return NB_OK;
}

/* Consumers of every live node (the edges from dead nodes left out). */
static nb_code build_consumers(pass *p) {
  size_t n = p->gd->n_node, edges = 0;
  free(p->cons_start);
  free(p->cons);
  p->cons = NULL;
  if (!(p->cons_start = calloc(n + 1, sizeof *p->cons_start))) return nomem(p);
  for (size_t v = 0; v < n; v++)
    if (!p->nodes[v].dead)
      for (int j = 0; j < p->nodes[v].nin; j++) p->cons_start[p->nodes[v].in[j].node + 1]++, edges++;
  for (size_t u = 0; u < n; u++) p->cons_start[u + 1] += p->cons_start[u];
  if (edges && !(p->cons = malloc(edges * sizeof *p->cons))) return nomem(p);
  int *fill = malloc((n + 1) * sizeof *fill);
  if (!fill) return nomem(p);
  memcpy(fill, p->cons_start, (n + 1) * sizeof *fill);
  for (size_t v = 0; v < n; v++)
    if (!p->nodes[v].dead)
      for (int j = 0; j < p->nodes[v].nin; j++) p->cons[fill[p->nodes[v].in[j].node]++] = (ref){(int)v, j};
  free(fill);
  return NB_OK;
}

/* ---- attrs -------------------------------------------------------------------------------- */

static int type_attr(const pass *p, int node, const char *key) {
  const Nbpb__AttrValue *v = nbio_node_attr(def_of(p, node), key);
  return v && v->value_case == NBPB__ATTR_VALUE__VALUE_TYPE ? v->type : -1;
}

static nb_code dtype_of(pass *p, int node, int *dtype) {
  *dtype = type_attr(p, node, "T");
  if (*dtype < 0)
    return fail(p, NB_CORRUPT, "node '%s' (%s) has no type attr T", name_of(p, node), def_of(p, node)->op);
  return NB_OK;
}

static void remove_attr(Nbpb__NodeDef *d, const char *key) {
  for (size_t i = 0; i < d->n_attr; i++)
    if (strcmp(d->attr[i]->key, key) == 0) {
      protobuf_c_message_free_unpacked(&d->attr[i]->base, NULL);
      d->attr[i] = d->attr[--d->n_attr];
      return;
    }
}

static void clear_attrs(Nbpb__NodeDef *d) {
  while (d->n_attr) remove_attr(d, d->attr[d->n_attr - 1]->key);
}

/* Adds attr key = v to d, which takes v (freed on failure; NULL v fails). */
static bool add_attr(Nbpb__NodeDef *d, const char *key, Nbpb__AttrValue *v) {
  if (!v) return false;
  Nbpb__NodeDef__AttrEntry **a = realloc(d->attr, (d->n_attr + 1) * sizeof *a);
  if (a) d->attr = a;
  Nbpb__NodeDef__AttrEntry *e = a ? malloc(sizeof *e) : NULL;
  char *k = e ? dup_str(key) : NULL;
  if (!k) {
    free(e);
    protobuf_c_message_free_unpacked(&v->base, NULL);
    return false;
  }
  nbpb__node_def__attr_entry__init(e);
  e->key = k;
  e->value = v;
  d->attr[d->n_attr++] = e;
  return true;
}

static Nbpb__AttrValue *new_attr(Nbpb__AttrValue__ValueCase kind) {
  Nbpb__AttrValue *v = malloc(sizeof *v);
  if (v) nbpb__attr_value__init(v), v->value_case = kind;
  return v;
}

static Nbpb__AttrValue *type_value(int type) {
  Nbpb__AttrValue *v = new_attr(NBPB__ATTR_VALUE__VALUE_TYPE);
  if (v) v->type = type;
  return v;
}

static Nbpb__AttrValue *type_list_value(const int *types, int n) {
  Nbpb__AttrValue *v = new_attr(NBPB__ATTR_VALUE__VALUE_LIST);
  Nbpb__AttrValue__ListValue *l = v ? malloc(sizeof *l) : NULL;
  if (!l) return free(v), NULL;
  nbpb__attr_value__list_value__init(l);
  v->list = l;
  if (n && !(l->type = malloc((size_t)n * sizeof *l->type))) {
    protobuf_c_message_free_unpacked(&v->base, NULL);
    return NULL;
  }
  for (int i = 0; i < n; i++) l->type[l->n_type++] = types[i];
  return v;
}

/* n shapes of unknown rank. */
static Nbpb__AttrValue *unknown_shapes_value(size_t n) {
  Nbpb__AttrValue *v = new_attr(NBPB__ATTR_VALUE__VALUE_LIST);
  Nbpb__AttrValue__ListValue *l = v ? malloc(sizeof *l) : NULL;
  if (!l) return free(v), NULL;
  nbpb__attr_value__list_value__init(l);
  v->list = l;
  if (n && !(l->shape = malloc(n * sizeof *l->shape))) {
    protobuf_c_message_free_unpacked(&v->base, NULL);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    Nbpb__TensorShape *s = malloc(sizeof *s);
    if (!s) {
      protobuf_c_message_free_unpacked(&v->base, NULL);
      return NULL;
    }
    nbpb__tensor_shape__init(s);
    s->unknown_rank = true;
    l->shape[l->n_shape++] = s;
  }
  return v;
}

static Nbpb__AttrValue *func_value(const char *name) {
  Nbpb__AttrValue *v = new_attr(NBPB__ATTR_VALUE__VALUE_FUNC);
  Nbpb__NameAttrList *f = v ? malloc(sizeof *f) : NULL;
  char *s = f ? dup_str(name) : NULL;
  if (!s) return free(f), free(v), NULL;
  nbpb__name_attr_list__init(f);
  f->name = s;
  v->func = f;
  return v;
}

static bool set_op(Nbpb__NodeDef *d, const char *op) {
  char *s = dup_str(op);
  if (!s) return false;
  if (d->op != protobuf_c_empty_string) free(d->op);
  d->op = s;
  return true;
}

/* ---- input strings ------------------------------------------------------------------------ */

/* The input string of r: graph form ("name", "name:k", "^name"), or function form
   ("name:out_arg:k") when in_function. */
static bool ref_string(const pass *p, ref r, bool in_function, char *buf, size_t cap) {
  const char *name = name_of(p, r.node);
  int n;
  if (r.port < 0) {
    n = snprintf(buf, cap, "^%s", name);
  } else if (in_function) {
    char out[160];
    if (!nbio_tf_output_ref(def_of(p, r.node), r.port, out, sizeof out)) return false;
    n = snprintf(buf, cap, "%s:%s", name, out);
  } else {
    n = r.port ? snprintf(buf, cap, "%s:%d", name, r.port) : snprintf(buf, cap, "%s", name);
  }
  return n >= 0 && (size_t)n < cap;
}

static void free_inputs(Nbpb__NodeDef *d) {
  for (size_t i = 0; i < d->n_input; i++) free(d->input[i]);
  free(d->input);
  d->input = NULL;
  d->n_input = 0;
}

static bool push_input(Nbpb__NodeDef *d, const char *s) {
  char **in = realloc(d->input, (d->n_input + 1) * sizeof *in);
  if (!in) return false;
  d->input = in;
  return (in[d->n_input] = dup_str(s)) ? (d->n_input++, true) : false;
}

static nb_code write_graph_inputs(pass *p, int node) {
  Nbpb__NodeDef *d = def_of(p, node);
  free_inputs(d);
  for (int j = 0; j < p->nodes[node].nin; j++) {
    char buf[1024];
    if (!ref_string(p, p->nodes[node].in[j], false, buf, sizeof buf))
      return fail(p, NB_CORRUPT, "node '%s': input name too long", name_of(p, node));
    if (!push_input(d, buf)) return nomem(p);
  }
  return NB_OK;
}

/* Sets node's inputs to in[0..n) (the node takes the array). */
static void set_refs(pass *p, int node, ref *in, int n) {
  free(p->nodes[node].in);
  p->nodes[node].in = in;
  p->nodes[node].nin = n;
  p->nodes[node].dirty = true;
}

/* ---- frames ------------------------------------------------------------------------------- */

static nb_code frame_of_enter(pass *p, int enter, int parent, int *frame) {
  const Nbpb__AttrValue *v = nbio_node_attr(def_of(p, enter), "frame_name");
  if (!v || v->value_case != NBPB__ATTR_VALUE__VALUE_S || v->s.len == 0)
    return fail(p, NB_CORRUPT, "Enter '%s' has no frame_name", name_of(p, enter));
  const char *name = (const char *)v->s.data;
  for (int f = 1; f < p->nframes; f++)
    if (p->frames[f].name_len == v->s.len && memcmp(p->frames[f].name, name, v->s.len) == 0) {
      if (p->frames[f].parent != parent)
        return fail(p, NB_CORRUPT, "Enter '%s': frame '%.*s' is entered from two frames (mismatched frames)",
                    name_of(p, enter), (int)v->s.len, name);
      *frame = f;
      return NB_OK;
    }
  size_t cap = (size_t)p->cap_frames;
  if (!grow((void **)&p->frames, &cap, (size_t)p->nframes + 1, sizeof *p->frames)) return nomem(p);
  p->cap_frames = (int)cap;
  p->frames[p->nframes] = (frame_info){name, v->s.len, parent, p->frames[parent].depth + 1, -1};
  *frame = p->nframes++;
  return NB_OK;
}

static nb_code frame_name_fail(pass *p, int node, int f, int g) {
  return fail(p, NB_CORRUPT, "node '%s' has inputs from frames '%.*s' and '%.*s' (mismatched frames)", name_of(p, node),
              (int)p->frames[f].name_len, p->frames[f].name, (int)p->frames[g].name_len, p->frames[g].name);
}

/* The frame of consumer v of u (TF's BuildControlFlowInfo). */
static nb_code consumer_frame(pass *p, int u, int v, int *frame) {
  int fu = p->nodes[u].frame;
  if (p->nodes[v].kind == K_ENTER) return frame_of_enter(p, v, fu, frame);
  if (p->nodes[u].kind == K_EXIT) {
    if (fu == 0) return fail(p, NB_CORRUPT, "Exit '%s' is outside any loop frame (Exit without Enter)", name_of(p, u));
    *frame = p->frames[fu].parent;
    return NB_OK;
  }
  *frame = fu;
  return NB_OK;
}

static nb_code assign_frames(pass *p) {
  size_t n = p->gd->n_node, head = 0, tail = 0;
  int *queue = malloc(n * sizeof *queue);
  if (!queue) return nomem(p);
  p->frames[0] = (frame_info){"", 0, 0, 0, -1};
  p->nframes = 1;
  for (size_t i = 0; i < n; i++)
    if (p->nodes[i].nin == 0) p->nodes[i].frame = 0, queue[tail++] = (int)i;
  nb_code rc = NB_OK;
  while (head < tail && !rc) {
    int u = queue[head++];
    for (int k = p->cons_start[u]; k < p->cons_start[u + 1] && !rc; k++) {
      int v = p->cons[k].node, f = 0;
      rc = consumer_frame(p, u, v, &f);
      if (rc) break;
      if (p->nodes[v].frame < 0) {
        p->nodes[v].frame = f;
        queue[tail++] = v;
      } else if (p->nodes[v].frame != f) {
        rc = frame_name_fail(p, v, p->nodes[v].frame, f);
      }
    }
  }
  free(queue);
  for (size_t i = 0; i < n && !rc; i++)
    if (p->nodes[i].frame < 0)
      rc = fail(p, NB_CORRUPT, "node '%s' is reachable from no source (a loop with no Enter?)", name_of(p, (int)i));
  return rc;
}

/* The structural checks TF's executor makes of frames: an Exit and a LoopCond inside a
   loop frame, one LoopCond per loop, a NextIteration feeding only Merges. */
static nb_code check_frames(pass *p) {
  for (size_t i = 0; i < p->gd->n_node; i++) {
    const fnode *v = &p->nodes[i];
    int f = v->frame;
    if ((v->kind == K_EXIT || v->kind == K_LOOPCOND || v->kind == K_NEXT) && f == 0)
      return fail(p, NB_CORRUPT, "%s '%s' is outside any loop frame (%s without Enter)", def_of(p, (int)i)->op,
                  name_of(p, (int)i), def_of(p, (int)i)->op);
    if (v->kind == K_LOOPCOND) {
      if (p->frames[f].loop_cond >= 0)
        return fail(p, NB_CORRUPT, "loop frame '%.*s' has two LoopConds, '%s' and '%s'", (int)p->frames[f].name_len,
                    p->frames[f].name, name_of(p, p->frames[f].loop_cond), name_of(p, (int)i));
      p->frames[f].loop_cond = (int)i;
    }
    if (v->kind == K_NEXT) {
      int merges = 0;
      for (int k = p->cons_start[i]; k < p->cons_start[i + 1]; k++) {
        int c = p->cons[k].node;
        if (p->nodes[c].kind != K_MERGE)
          return fail(p, NB_CORRUPT, "NextIteration '%s' feeds '%s' (%s), not a Merge", name_of(p, (int)i),
                      name_of(p, c), def_of(p, c)->op);
        merges++;
      }
      if (!merges) return fail(p, NB_CORRUPT, "NextIteration '%s' feeds no Merge", name_of(p, (int)i));
    }
  }
  for (int f = 1; f < p->nframes; f++)
    if (p->frames[f].loop_cond < 0)
      return fail(p, NB_CORRUPT, "loop frame '%.*s' has no LoopCond", (int)p->frames[f].name_len, p->frames[f].name);
  return NB_OK;
}

/* ---- branch states ------------------------------------------------------------------------ */

static int state_len(const pass *p, int s) { return (int)(p->st_off[s + 1] - p->st_off[s]); }
static const cpair *state_at(const pass *p, int s) { return p->pool + p->st_off[s]; }

static int cmp_ref(ref a, ref b) {
  return a.node != b.node ? (a.node < b.node ? -1 : 1) : (a.port > b.port) - (a.port < b.port);
}

static void reset_states(pass *p) {
  p->npool = 0;
  p->nstates = 1; /* state 0: the empty state */
  p->st_off[0] = p->st_off[1] = 0;
}

/* The id of the state in the pool's scratch tail pool[npool .. npool + n), interned. */
static nb_code intern_state(pass *p, size_t n, int *id) {
  const cpair *c = p->pool + p->npool;
  for (int s = 0; s < p->nstates; s++)
    if ((size_t)state_len(p, s) == n && (n == 0 || memcmp(state_at(p, s), c, n * sizeof *c) == 0)) {
      *id = s;
      return NB_OK;
    }
  size_t cap = (size_t)p->cap_states;
  if (!grow((void **)&p->st_off, &cap, (size_t)p->nstates + 2, sizeof *p->st_off)) return nomem(p);
  p->cap_states = (int)cap;
  p->npool += n;
  p->st_off[++p->nstates] = p->npool;
  *id = p->nstates - 1;
  return NB_OK;
}

static const cpair NO_PAIR = {{0, 0}, -1};

/* Joins states a and b (plus the pair extra when extra.branch >= 0) into *out; *out = -1
   when they disagree on a predicate's branch (the node could never run). */
static nb_code join_states(pass *p, int a, int b, cpair extra, int *out) {
  size_t la = (size_t)state_len(p, a), lb = (size_t)state_len(p, b);
  if (!grow((void **)&p->pool, &p->cap_pool, p->npool + la + lb + 1, sizeof *p->pool)) return nomem(p);
  const cpair *x = state_at(p, a), *y = state_at(p, b);
  cpair *o = p->pool + p->npool;
  size_t i = 0, j = 0, n = 0;
  bool extra_used = extra.branch < 0;
  while (i < la || j < lb || !extra_used) {
    cpair next;
    const cpair *cands[3] = {i < la ? &x[i] : NULL, j < lb ? &y[j] : NULL, extra_used ? NULL : &extra};
    int best = -1;
    for (int c = 0; c < 3; c++)
      if (cands[c] && (best < 0 || cmp_ref(cands[c]->pred, cands[best]->pred) < 0)) best = c;
    next = *cands[best];
    for (int c = 0; c < 3; c++)
      if (cands[c] && cmp_ref(cands[c]->pred, next.pred) == 0) {
        if (cands[c]->branch != next.branch) {
          *out = -1;
          return NB_OK;
        }
        if (c == 0)
          i++;
        else if (c == 1)
          j++;
        else
          extra_used = true;
      }
    o[n++] = next;
  }
  return intern_state(p, n, out);
}

/* The canonical predicate of Switch s: its predicate input with Identities skipped. */
/* The start of the chain of Identities ending at r (at most nnodes steps: a cycle of
   Identities, which frame_order reports, ends the walk too). */
static ref skip_identities(const pass *p, ref r) {
  for (size_t steps = 0;
       steps < p->nnodes && p->nodes[r.node].kind == K_IDENTITY && r.port == 0 && data_inputs(&p->nodes[r.node]) == 1;
       steps++)
    r = p->nodes[r.node].in[0];
  return r;
}

static ref switch_pred(const pass *p, int s) { return skip_identities(p, p->nodes[s].in[1]); }

static bool is_loop_switch(const pass *p, int s) { return p->nodes[switch_pred(p, s).node].kind == K_LOOPCOND; }

static nb_code check_switch(pass *p, int s) {
  if (data_inputs(&p->nodes[s]) != 2)
    return fail(p, NB_CORRUPT, "Switch '%s' has %d data inputs, not 2 (data, predicate)", name_of(p, s),
                data_inputs(&p->nodes[s]));
  return NB_OK;
}

/* The state of output `port` of u (port -1: its control output). */
static nb_code output_state(pass *p, int u, int port, int *out) {
  const fnode *x = &p->nodes[u];
  if (x->kind != K_SWITCH || port < 0 || is_loop_switch(p, u)) {
    *out = x->state;
    return NB_OK;
  }
  if (port > 1) return fail(p, NB_CORRUPT, "a node reads output %d of Switch '%s', which has 2", port, name_of(p, u));
  return join_states(p, x->state, 0, (cpair){switch_pred(p, u), port}, out);
}

static bool in_frame(const pass *p, int u, int f) { return !p->nodes[u].dead && p->nodes[u].frame == f; }

static bool reads_kind(const pass *p, int v, node_kind k) {
  for (int j = 0; j < data_inputs(&p->nodes[v]); j++)
    if (p->nodes[p->nodes[v].in[j].node].kind == k) return true;
  return false;
}

/* Nodes of frame f in topological order, the NextIteration -> Merge back edges left out. */
static nb_code frame_order(pass *p, int f, int **order, int *count) {
  size_t n = p->gd->n_node;
  int *indeg = calloc(n, sizeof *indeg), *q = malloc(n * sizeof *q);
  int total = 0, head = 0, tail = 0;
  if (!indeg || !q) return free(indeg), free(q), nomem(p);
  for (size_t v = 0; v < n; v++) {
    if (!in_frame(p, (int)v, f)) continue;
    total++;
    for (int j = 0; j < p->nodes[v].nin; j++) {
      int u = p->nodes[v].in[j].node;
      if (in_frame(p, u, f) && p->nodes[u].kind != K_NEXT) indeg[v]++;
    }
    if (!indeg[v]) q[tail++] = (int)v;
  }
  while (head < tail) {
    int u = q[head++];
    if (p->nodes[u].kind == K_NEXT) continue;
    for (int k = p->cons_start[u]; k < p->cons_start[u + 1]; k++)
      if (in_frame(p, p->cons[k].node, f) && --indeg[p->cons[k].node] == 0) q[tail++] = p->cons[k].node;
  }
  nb_code rc = NB_OK;
  if (tail < total)
    for (size_t v = 0; v < n && !rc; v++)
      if (in_frame(p, (int)v, f) && indeg[v])
        rc = fail(p, NB_CORRUPT, "node '%s' is on a cycle that no NextIteration closes", name_of(p, (int)v));
  free(indeg);
  if (rc) return free(q), rc;
  *order = q;
  *count = tail;
  return NB_OK;
}

/* A cond Merge's predicate and outer state: its two inputs' states must differ in
   exactly one predicate's branch. */
static nb_code merge_state(pass *p, int v, cond_merge *m) {
  const fnode *x = &p->nodes[v];
  if (data_inputs(x) != 2)
    return fail(p, NB_CORRUPT, "Merge '%s' has %d data inputs; a cond's Merge has 2", name_of(p, v), data_inputs(x));
  if (reads_kind(p, v, K_ENTER))
    return fail(p, NB_CORRUPT, "Merge '%s' reads an Enter but no NextIteration (an unconnected loop Merge)",
                name_of(p, v));
  int s[2];
  for (int j = 0; j < 2; j++) {
    nb_code rc = output_state(p, x->in[j].node, x->in[j].port, &s[j]);
    if (rc) return rc;
  }
  bool ok = s[0] >= 0 && s[1] >= 0;
  int la = ok ? state_len(p, s[0]) : 0, lb = ok ? state_len(p, s[1]) : 0, diffs = 0;
  /* at least one slot: the pool is never NULL below, where offsets are added to it */
  if (!grow((void **)&p->pool, &p->cap_pool, p->npool + (size_t)la + 1, sizeof *p->pool)) return nomem(p);
  const cpair *a = ok ? state_at(p, s[0]) : NULL, *b = ok ? state_at(p, s[1]) : NULL;
  cpair *common = p->pool + p->npool;
  size_t n = 0;
  ok = ok && la == lb;
  for (int i = 0; ok && i < la; i++) {
    ok = cmp_ref(a[i].pred, b[i].pred) == 0;
    if (ok && a[i].branch == b[i].branch) {
      common[n++] = a[i];
    } else if (ok) {
      m->pred = a[i].pred;
      m->branch_of_input[0] = a[i].branch;
      m->branch_of_input[1] = b[i].branch;
      diffs++;
    }
  }
  if (!ok || diffs != 1)
    return fail(p, NB_CORRUPT, "Merge '%s': inputs '%s' and '%s' are not the two branches of one cond", name_of(p, v),
                name_of(p, x->in[0].node), name_of(p, x->in[1].node));
  m->node = v;
  return intern_state(p, n, &m->outer);
}

/* Branch states of frame f's nodes; the cond Merges in *merges. */
static nb_code compute_states(pass *p, int f, cond_merge **merges, int *nmerges) {
  int *order = NULL, count = 0;
  nb_code rc = frame_order(p, f, &order, &count);
  if (rc) return rc;
  reset_states(p);
  size_t cap = 0;
  *merges = NULL;
  *nmerges = 0;
  for (int t = 0; t < count && !rc; t++) {
    int v = order[t], st = 0;
    fnode *x = &p->nodes[v];
    if (x->kind == K_SWITCH && (rc = check_switch(p, v))) break;
    if (x->kind == K_MERGE && !reads_kind(p, v, K_NEXT)) {
      if (!grow((void **)merges, &cap, (size_t)*nmerges + 1, sizeof **merges))
        rc = nomem(p);
      else if (!(rc = merge_state(p, v, &(*merges)[*nmerges])))
        x->state = (*merges)[(*nmerges)++].outer;
      continue;
    }
    for (int j = 0; j < x->nin && !rc && st >= 0; j++) {
      int u = x->in[j].node, su = 0;
      if (!in_frame(p, u, f) || p->nodes[u].kind == K_NEXT) continue;
      rc = output_state(p, u, x->in[j].port, &su);
      if (!rc) rc = su < 0 ? (st = -1, NB_OK) : join_states(p, st, su, NO_PAIR, &st);
    }
    if (!rc && st < 0)
      rc = fail(p, NB_UNIMPLEMENTED, "node '%s' reads both branches of a cond without a Merge", name_of(p, v));
    x->state = st;
  }
  free(order);
  return rc;
}

/* ---- function extraction ------------------------------------------------------------------ */

/* What an extraction maps: a cond branch (Switches on pred with state outer are the
   arguments, nodes of state inner the branch) or a loop (nodes with arg >= 0). */
/* A cond's If inputs, shared by its two branches. */
typedef struct cond_inputs {
  int *args; /* the Switch nodes that are arguments, in order */
  size_t nargs, cap_args;
  int *control; /* control inputs from outside the cond */
  size_t ncontrol, cap_control;
} cond_inputs;

typedef struct extraction {
  int frame;
  bool loop;
  ref pred;
  int outer, inner, branch;
  cond_inputs *in; /* cond only */
  int *nodes;      /* the nodes copied into the function, in visit order */
  size_t nnodes, cap_nodes;
  int *mark; /* per node: stamp when visited */
  int stamp;
} extraction;

typedef enum { SRC_ARG, SRC_NODE, SRC_DROP } src_class;

static bool is_cond_switch(const pass *p, const extraction *x, int u) {
  return p->nodes[u].kind == K_SWITCH && !is_loop_switch(p, u) && cmp_ref(switch_pred(p, u), x->pred) == 0 &&
         p->nodes[u].state == x->outer;
}

static bool is_argument(const pass *p, const extraction *x, int u) {
  return x->loop ? p->nodes[u].arg >= 0 : is_cond_switch(p, x, u);
}

/* A pivot: an argument, or an Identity chain ending at one (control edges from it are dropped). */
static bool is_pivot(const pass *p, const extraction *x, int node) {
  int u = skip_identities(p, (ref){node, 0}).node;
  if (x->loop) return p->nodes[u].kind != K_OTHER && p->nodes[u].kind != K_IDENTITY;
  return is_argument(p, x, u);
}

/* The position of u in list[0..*n), appended when absent; -1 when out of memory. */
static int find_or_add(int **list, size_t *n, size_t *cap, int u) {
  for (size_t i = 0; i < *n; i++)
    if ((*list)[i] == u) return (int)i;
  if (!grow((void **)list, cap, *n + 1, sizeof **list)) return -1;
  (*list)[*n] = u;
  return (int)(*n)++;
}

static nb_code add_arg(pass *p, extraction *x, int s, int *arg) {
  *arg = find_or_add(&x->in->args, &x->in->nargs, &x->in->cap_args, s);
  return *arg < 0 ? nomem(p) : NB_OK;
}

static nb_code add_outer_control(pass *p, extraction *x, int u) {
  return find_or_add(&x->in->control, &x->in->ncontrol, &x->in->cap_control, u) < 0 ? nomem(p) : NB_OK;
}

static nb_code classify_loop(pass *p, const extraction *x, int reader, ref r, src_class *c, int *arg) {
  const fnode *u = &p->nodes[r.node];
  const char *who = reader < 0 ? "the loop's result" : name_of(p, reader);
  if (r.port < 0) {
    *c = is_pivot(p, x, r.node) ? SRC_DROP : SRC_NODE;
    return NB_OK;
  }
  if (u->arg >= 0) {
    bool var_side = (u->kind == K_SWITCH && r.port == 1) || (u->kind != K_SWITCH && r.port == 0);
    if (!var_side)
      return fail(p, NB_UNIMPLEMENTED, "loop: '%s' reads output %d of '%s' (%s)", who, r.port, name_of(p, r.node),
                  def_of(p, r.node)->op);
    *c = SRC_ARG;
    *arg = u->arg;
    return NB_OK;
  }
  if (u->kind != K_OTHER && u->kind != K_IDENTITY)
    return fail(p, NB_CORRUPT, "loop: '%s' reads '%s' (%s) of its own loop", who, name_of(p, r.node),
                def_of(p, r.node)->op);
  *c = SRC_NODE;
  return NB_OK;
}

static nb_code classify_branch(pass *p, extraction *x, int reader, ref r, src_class *c, int *arg) {
  const char *who = reader < 0 ? "a Merge" : name_of(p, reader);
  int st = 0;
  nb_code rc = output_state(p, r.node, r.port, &st);
  if (rc) return rc;
  if (r.port < 0) { /* a control input: dropped from a pivot, kept in the branch, else moved to the If */
    if (is_pivot(p, x, r.node)) return NB_OK;
    if (st != x->inner) return add_outer_control(p, x, r.node);
    *c = SRC_NODE;
    return NB_OK;
  }
  if (is_argument(p, x, r.node)) {
    if (r.port != x->branch)
      return fail(p, NB_CORRUPT, "'%s' in branch %d of a cond reads the other branch of Switch '%s'", who, x->branch,
                  name_of(p, r.node));
    *c = SRC_ARG;
    return add_arg(p, x, r.node, arg);
  }
  if (st != x->inner || !in_frame(p, r.node, x->frame))
    return fail(p, NB_UNIMPLEMENTED, "'%s' in a branch of a cond reads '%s', outside the branch, with no Switch", who,
                name_of(p, r.node));
  *c = SRC_NODE;
  return NB_OK;
}

static nb_code classify(pass *p, extraction *x, int reader, ref r, src_class *c, int *arg) {
  *arg = -1;
  *c = SRC_DROP;
  return x->loop ? classify_loop(p, x, reader, r, c, arg) : classify_branch(p, x, reader, r, c, arg);
}

/* Collects into x->nodes everything behind roots[0..n) (reverse DFS, explicit stack). */
static nb_code collect(pass *p, extraction *x, const ref *roots, int n) {
  size_t cap = 0, top = 0;
  int *stack = NULL;
  nb_code rc = NB_OK;
  x->stamp++;
  for (int i = 0; i < n && !rc; i++) {
    src_class c;
    int arg;
    if ((rc = classify(p, x, -1, roots[i], &c, &arg))) break;
    if (c == SRC_NODE && x->mark[roots[i].node] != x->stamp) {
      if (!grow((void **)&stack, &cap, top + 1, sizeof *stack))
        rc = nomem(p);
      else
        stack[top++] = roots[i].node, x->mark[roots[i].node] = x->stamp;
    }
  }
  while (top && !rc) {
    int v = stack[--top];
    if (!grow((void **)&x->nodes, &x->cap_nodes, x->nnodes + 1, sizeof *x->nodes)) {
      rc = nomem(p);
      break;
    }
    x->nodes[x->nnodes++] = v;
    for (int j = 0; j < p->nodes[v].nin && !rc; j++) {
      ref r = p->nodes[v].in[j];
      src_class c;
      int arg;
      if ((rc = classify(p, x, v, r, &c, &arg)) || c != SRC_NODE || x->mark[r.node] == x->stamp) continue;
      if (!grow((void **)&stack, &cap, top + 1, sizeof *stack))
        rc = nomem(p);
      else
        stack[top++] = r.node, x->mark[r.node] = x->stamp;
    }
  }
  free(stack);
  return rc;
}

/* The function-body string of r: "argK" or "node:out_arg:k" (NULL name: dropped). */
static nb_code body_ref(pass *p, extraction *x, int reader, ref r, char *buf, size_t cap, bool *keep) {
  src_class c;
  int arg;
  nb_code rc = classify(p, x, reader, r, &c, &arg);
  *keep = c != SRC_DROP;
  if (rc || !*keep) return rc;
  int n = c == SRC_ARG ? snprintf(buf, cap, "arg%d", arg) : 0;
  if (c == SRC_ARG ? n < 0 || (size_t)n >= cap : !ref_string(p, r, true, buf, cap))
    return fail(p, NB_CORRUPT, "node '%s': cannot name input '%s' inside a function",
                reader < 0 ? "?" : name_of(p, reader), name_of(p, r.node));
  return NB_OK;
}

static Nbpb__NodeDef *copy_node_def(const Nbpb__NodeDef *d) {
  size_t n = nbpb__node_def__get_packed_size(d);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return NULL;
  nbpb__node_def__pack(d, buf);
  Nbpb__NodeDef *c = nbpb__node_def__unpack(NULL, n, buf);
  free(buf);
  return c;
}

static nb_code new_arg_def(pass *p, Nbpb__OpDef__ArgDef ***list, size_t *n, const char *prefix, int i, int type) {
  char name[32];
  snprintf(name, sizeof name, "%s%d", prefix, i);
  Nbpb__OpDef__ArgDef **l = realloc(*list, (*n + 1) * sizeof *l);
  if (!l) return nomem(p);
  *list = l;
  Nbpb__OpDef__ArgDef *a = malloc(sizeof *a);
  if (!a) return nomem(p);
  nbpb__op_def__arg_def__init(a);
  a->type = type;
  l[(*n)++] = a;
  return (a->name = dup_str(name)) ? NB_OK : (a->name = (char *)protobuf_c_empty_string, nomem(p));
}

/* A new FunctionDef named name, attached to gd's library (so gd owns it from the start). */
static nb_code new_function(pass *p, const char *name, Nbpb__FunctionDef **out) {
  Nbpb__GraphDef *gd = p->gd;
  if (!gd->library) {
    if (!(gd->library = malloc(sizeof *gd->library))) return nomem(p);
    nbpb__function_def_library__init(gd->library);
  }
  Nbpb__FunctionDefLibrary *lib = gd->library;
  Nbpb__FunctionDef **fs = realloc(lib->function, (lib->n_function + 1) * sizeof *fs);
  if (!fs) return nomem(p);
  lib->function = fs;
  Nbpb__FunctionDef *fd = malloc(sizeof *fd);
  if (!fd) return nomem(p);
  nbpb__function_def__init(fd);
  fs[lib->n_function++] = fd;
  if (!(fd->signature = malloc(sizeof *fd->signature))) return nomem(p);
  nbpb__op_def__init(fd->signature);
  if (!(fd->signature->name = dup_str(name))) return fd->signature->name = (char *)protobuf_c_empty_string, nomem(p);
  *out = fd;
  return NB_OK;
}

static bool function_exists(const pass *p, const char *name) {
  const Nbpb__FunctionDefLibrary *lib = p->gd->library;
  for (size_t i = 0; lib && i < lib->n_function; i++)
    if (lib->function[i]->signature && strcmp(lib->function[i]->signature->name, name) == 0) return true;
  return false;
}

/* A function name of the form "<kind>_<n>" that the library does not hold yet. */
static void fresh_function_name(pass *p, const char *kind, char *buf, size_t cap) {
  do snprintf(buf, cap, "functionalize_%s_%d", kind, p->fn_counter++);
  while (function_exists(p, buf));
}

static nb_code add_ret(pass *p, Nbpb__FunctionDef *fd, int i, const char *value) {
  char key[32];
  snprintf(key, sizeof key, "ret%d", i);
  Nbpb__FunctionDef__RetEntry **r = realloc(fd->ret, (fd->n_ret + 1) * sizeof *r);
  if (!r) return nomem(p);
  fd->ret = r;
  Nbpb__FunctionDef__RetEntry *e = malloc(sizeof *e);
  if (!e) return nomem(p);
  nbpb__function_def__ret_entry__init(e);
  r[fd->n_ret++] = e;
  e->key = dup_str(key);
  e->value = dup_str(value);
  if (!e->key || !e->value) {
    if (!e->key) e->key = (char *)protobuf_c_empty_string;
    if (!e->value) e->value = (char *)protobuf_c_empty_string;
    return nomem(p);
  }
  return NB_OK;
}

/* Copies x's nodes into fd with their inputs in function form. */
static nb_code add_body_nodes(pass *p, extraction *x, Nbpb__FunctionDef *fd) {
  if (x->nnodes && !(fd->node_def = malloc(x->nnodes * sizeof *fd->node_def))) return nomem(p);
  for (size_t i = 0; i < x->nnodes; i++) {
    int v = x->nodes[i];
    Nbpb__NodeDef *d = copy_node_def(def_of(p, v));
    if (!d) return nomem(p);
    fd->node_def[fd->n_node_def++] = d;
    free_inputs(d);
    for (int j = 0; j < p->nodes[v].nin; j++) {
      char buf[1024];
      bool keep;
      nb_code rc = body_ref(p, x, v, p->nodes[v].in[j], buf, sizeof buf, &keep);
      if (rc) return rc;
      if (keep && !push_input(d, buf)) return nomem(p);
    }
  }
  return NB_OK;
}

/* A FunctionDef of x's nodes: arguments of types arg_types, results rets (types ret_types). */
static nb_code emit_function(pass *p, extraction *x, const char *name, const int *arg_types, int nargs, const ref *rets,
                             const int *ret_types, int nrets) {
  Nbpb__FunctionDef *fd = NULL;
  nb_code rc = new_function(p, name, &fd);
  for (int i = 0; i < nargs && !rc; i++)
    rc = new_arg_def(p, &fd->signature->input_arg, &fd->signature->n_input_arg, "arg", i, arg_types[i]);
  for (int i = 0; i < nrets && !rc; i++) {
    char buf[1024];
    bool keep;
    if (!(rc = new_arg_def(p, &fd->signature->output_arg, &fd->signature->n_output_arg, "ret", i, ret_types[i])) &&
        !(rc = body_ref(p, x, -1, rets[i], buf, sizeof buf, &keep)))
      rc = add_ret(p, fd, i, buf);
  }
  return rc ? rc : add_body_nodes(p, x, fd);
}

static nb_code new_extraction(pass *p, extraction *x, int frame, bool loop) {
  memset(x, 0, sizeof *x);
  x->frame = frame;
  x->loop = loop;
  if (!(x->mark = calloc(p->gd->n_node, sizeof *x->mark))) return nomem(p);
  return NB_OK;
}

static void free_extraction(extraction *x) {
  free(x->nodes);
  free(x->mark);
}

/* ---- new nodes ------------------------------------------------------------------------------ */

/* Appends a node named like `base` (made unique) with op `op` to gd; its index in *node. */
static nb_code add_node(pass *p, const char *base, const char *op, int frame, int *node) {
  Nbpb__GraphDef *gd = p->gd;
  size_t n = gd->n_node;
  if (!grow((void **)&p->nodes, &p->cap_nodes, n + 1, sizeof *p->nodes) || !size_names(p, n + 1)) return nomem(p);
  Nbpb__NodeDef **nodes = realloc(gd->node, (n + 1) * sizeof *nodes);
  if (!nodes) return nomem(p);
  gd->node = nodes;
  Nbpb__NodeDef *d = malloc(sizeof *d);
  if (!d) return nomem(p);
  nbpb__node_def__init(d);
  size_t len = strlen(base) + 24;
  char *name = malloc(len);
  if (!name || !set_op(d, op)) return free(name), free(d), nomem(p);
  snprintf(name, len, "%s", base);
  for (int k = 1; find_node(p, name, strlen(name)) >= 0; k++) snprintf(name, len, "%s_%d", base, k);
  d->name = name;
  nodes[n] = d;
  gd->n_node = n + 1;
  p->nnodes = n + 1;
  p->nodes[n] = (fnode){.frame = frame, .arg = -1, .kind = K_OTHER, .dirty = true};
  insert_name(p, (int)n);
  *node = (int)n;
  return NB_OK;
}

/* Makes node an Identity of output k of src (an Exit of a loop, a Merge of a cond). */
static nb_code become_identity(pass *p, int node, int src, int k, int frame) {
  ref *in = malloc(sizeof *in);
  if (!in || !set_op(def_of(p, node), "Identity")) return free(in), nomem(p);
  *in = (ref){src, k};
  set_refs(p, node, in, 1);
  remove_attr(def_of(p, node), "N"); /* Merge's; Exit has T only, as Identity */
  p->nodes[node].kind = K_IDENTITY;
  p->nodes[node].frame = frame;
  return NB_OK;
}

/* ---- conds -------------------------------------------------------------------------------- */

/* Marks the merges of ms[0..n) that depend on another of them (forward walk from all). */
static nb_code mark_dependent(pass *p, const cond_merge *ms, int n, bool *dependent) {
  size_t nn = p->gd->n_node, top = 0;
  bool *seen = calloc(nn, sizeof *seen);
  int *stack = malloc((nn + 1) * sizeof *stack);
  if (!seen || !stack) return free(seen), free(stack), nomem(p);
  for (int i = 0; i < n; i++) stack[top++] = ms[i].node;
  while (top) {
    int u = stack[--top];
    for (int k = p->cons_start[u]; k < p->cons_start[u + 1]; k++) {
      int v = p->cons[k].node;
      if (!seen[v] && p->nodes[u].kind != K_NEXT) seen[v] = true, stack[top++] = v;
    }
  }
  for (int i = 0; i < n; i++) dependent[i] = seen[ms[i].node];
  free(seen);
  free(stack);
  return NB_OK;
}

/* The Merges of the deepest cond (one predicate and outer state, none depending on
   another) moved to the front of ms; their count in *n. */
static nb_code pick_cond(pass *p, cond_merge *ms, int count, int *n) {
  int best = 0;
  for (int i = 1; i < count; i++)
    if (state_len(p, ms[i].outer) > state_len(p, ms[best].outer)) best = i;
  cond_merge key = ms[best];
  int k = 0;
  for (int i = 0; i < count; i++)
    if (ms[i].outer == key.outer && cmp_ref(ms[i].pred, key.pred) == 0) {
      cond_merge t = ms[k];
      ms[k++] = ms[i];
      ms[i] = t;
    }
  bool *dependent = malloc((size_t)k * sizeof *dependent);
  if (!dependent) return nomem(p);
  nb_code rc = mark_dependent(p, ms, k, dependent);
  *n = 0;
  for (int i = 0; i < k && !rc; i++)
    if (!dependent[i]) {
      cond_merge t = ms[*n];
      ms[(*n)++] = ms[i];
      ms[i] = t;
    }
  free(dependent);
  return rc;
}

static nb_code add_control_refs(pass *p, ref **in, int *n, const int *nodes, int count) {
  for (int i = 0; i < count; i++) {
    bool dup = false;
    for (int j = 0; j < *n; j++) dup = dup || ((*in)[j].port < 0 && (*in)[j].node == nodes[i]);
    if (dup) continue;
    ref *r = realloc(*in, (size_t)(*n + 1) * sizeof *r);
    if (!r) return nomem(p);
    *in = r;
    r[(*n)++] = (ref){nodes[i], -1};
  }
  return NB_OK;
}

/* The If node of a cond: inputs pred, the Switches' data inputs, then control inputs. */
static nb_code build_if(pass *p, ref pred, const cond_inputs *ci, int node, const int *tin, const int *tout, int nout,
                        const char *then_name, const char *else_name) {
  ref *in = malloc((ci->nargs + 1) * sizeof *in);
  if (!in) return nomem(p);
  int n = 0;
  in[n++] = pred;
  for (size_t i = 0; i < ci->nargs; i++) in[n++] = p->nodes[ci->args[i]].in[0];
  nb_code rc = add_control_refs(p, &in, &n, ci->control, (int)ci->ncontrol);
  for (size_t i = 0; i < ci->nargs && !rc; i++)
    for (int j = 2; j < p->nodes[ci->args[i]].nin && !rc; j++)
      rc = add_control_refs(p, &in, &n, &p->nodes[ci->args[i]].in[j].node, 1);
  if (rc) return free(in), rc;
  set_refs(p, node, in, n);
  Nbpb__NodeDef *d = def_of(p, node);
  if (!add_attr(d, "Tcond", type_value(DT_BOOL)) || !add_attr(d, "Tin", type_list_value(tin, (int)ci->nargs)) ||
      !add_attr(d, "Tout", type_list_value(tout, nout)) || !add_attr(d, "then_branch", func_value(then_name)) ||
      !add_attr(d, "else_branch", func_value(else_name)))
    return nomem(p);
  return NB_OK;
}

/* Removes the cond's leftovers of frame f: Switches on its predicate and branch nodes
   that nothing reads any more (pivots, a branch's unread nodes). */
static nb_code sweep_cond(pass *p, const extraction *x, int then_state, int else_state) {
  nb_code rc = build_consumers(p);
  size_t n = p->gd->n_node, top = 0;
  int *live = calloc(n, sizeof *live), *stack = malloc((n + 1) * sizeof *stack);
  if (rc || !live || !stack) return free(live), free(stack), rc ? rc : nomem(p);
  for (size_t u = 0; u < n; u++) live[u] = p->cons_start[u + 1] - p->cons_start[u];
  for (size_t u = 0; u < n; u++) {
    bool leftover = in_frame(p, (int)u, x->frame) && (p->nodes[u].state == then_state ||
                                                      p->nodes[u].state == else_state || is_cond_switch(p, x, (int)u));
    if (leftover && !live[u]) stack[top++] = (int)u;
  }
  while (top) {
    int u = stack[--top];
    p->nodes[u].dead = true;
    for (int j = 0; j < p->nodes[u].nin; j++) {
      int s = p->nodes[u].in[j].node;
      bool leftover = in_frame(p, s, x->frame) &&
                      (p->nodes[s].state == then_state || p->nodes[s].state == else_state || is_cond_switch(p, x, s));
      if (--live[s] == 0 && leftover) stack[top++] = s;
    }
  }
  free(live);
  free(stack);
  return NB_OK;
}

static nb_code dtypes_of(pass *p, const int *nodes, int n, int *types) {
  for (int i = 0; i < n; i++) {
    nb_code rc = dtype_of(p, nodes[i], &types[i]);
    if (rc) return rc;
  }
  return NB_OK;
}

/* The roots of branch b (the Merge inputs of that branch) and the Merges' nodes. */
static void branch_roots(const pass *p, const cond_merge *ms, int n, int b, ref *roots, int *merges) {
  for (int j = 0; j < n; j++) {
    roots[j] = p->nodes[ms[j].node].in[ms[j].branch_of_input[0] == b ? 0 : 1];
    merges[j] = ms[j].node;
  }
}

/* The If node named after the cond's first Merge's scope ("cond/If"). */
static nb_code add_if_node(pass *p, int f, int merge, int *node) {
  char base[512];
  const char *m = name_of(p, merge), *slash = strrchr(m, '/');
  snprintf(base, sizeof base, "%.*sIf", slash ? (int)(slash - m + 1) : 0, m);
  return add_node(p, base, "If", f, node);
}

/* Collects both branches of the cond of merges ms[0..n) into x[0] (else) and x[1] (then). */
static nb_code collect_branches(pass *p, int f, const cond_merge *ms, int n, cond_inputs *ci, extraction *x,
                                ref **roots, int *merges) {
  nb_code rc = NB_OK;
  for (int b = 0; b < 2 && !rc; b++) {
    if ((rc = new_extraction(p, &x[b], f, false))) break;
    x[b].pred = ms[0].pred, x[b].outer = ms[0].outer, x[b].branch = b, x[b].in = ci;
    if (!(rc = join_states(p, ms[0].outer, 0, (cpair){ms[0].pred, b}, &x[b].inner))) {
      branch_roots(p, ms, n, b, roots[b], merges);
      rc = collect(p, &x[b], roots[b], n);
    }
  }
  return rc;
}

/* Raises the cond of merges ms[0..n) into an If node; each Merge becomes its Identity. */
static nb_code raise_cond(pass *p, int f, const cond_merge *ms, int n) {
  cond_inputs ci = {0};
  extraction x[2] = {0};
  ref *roots[2] = {malloc((size_t)n * sizeof(ref)), malloc((size_t)n * sizeof(ref))};
  int *tout = malloc((size_t)n * sizeof *tout), *merges = malloc((size_t)n * sizeof *merges), *tin = NULL, node = -1;
  char names[2][96];
  nb_code rc = roots[0] && roots[1] && tout && merges ? collect_branches(p, f, ms, n, &ci, x, roots, merges) : nomem(p);
  if (!rc && !(tin = malloc(ci.nargs * sizeof *tin + 1))) rc = nomem(p);
  if (!rc) rc = dtypes_of(p, ci.args, (int)ci.nargs, tin);
  if (!rc) rc = dtypes_of(p, merges, n, tout);
  if (!rc) {
    fresh_function_name(p, "else", names[0], sizeof names[0]);
    fresh_function_name(p, "then", names[1], sizeof names[1]);
  }
  for (int b = 0; b < 2 && !rc; b++) rc = emit_function(p, &x[b], names[b], tin, (int)ci.nargs, roots[b], tout, n);
  if (!rc) rc = add_if_node(p, f, ms[0].node, &node);
  if (!rc) rc = build_if(p, ms[0].pred, &ci, node, tin, tout, n, names[1], names[0]);
  for (int b = 0; b < 2 && !rc; b++)
    for (size_t i = 0; i < x[b].nnodes; i++) p->nodes[x[b].nodes[i]].dead = true;
  for (int j = 0; j < n && !rc; j++) rc = become_identity(p, ms[j].node, node, j, f);
  if (!rc) p->nodes[node].state = ms[0].outer, rc = sweep_cond(p, &x[1], x[1].inner, x[0].inner);
  free_extraction(&x[0]);
  free_extraction(&x[1]);
  free(ci.args);
  free(ci.control);
  free(roots[0]);
  free(roots[1]);
  free(tout);
  free(tin);
  free(merges);
  return rc;
}

/* Raises every cond of frame f, deepest first. */
static nb_code raise_conds(pass *p, int f) {
  for (;;) {
    cond_merge *ms = NULL;
    int count = 0, n = 0;
    nb_code rc = build_consumers(p);
    if (!rc) rc = compute_states(p, f, &ms, &count);
    if (!rc && count) rc = pick_cond(p, ms, count, &n);
    if (!rc && count) rc = raise_cond(p, f, ms, n);
    free(ms);
    if (rc || !count) return rc;
  }
}

/* ---- loops -------------------------------------------------------------------------------- */

/* A loop argument: its Enter, and for a loop variable its Merge, Switch and NextIteration. */
typedef struct loop_arg {
  int enter, merge, sw, next;
} loop_arg;

/* The loop Switch reading Merge m (predicate: the frame's LoopCond). */
static nb_code loop_switch(pass *p, int f, int m, int *sw) {
  *sw = -1;
  for (int k = p->cons_start[m]; k < p->cons_start[m + 1]; k++) {
    int s = p->cons[k].node;
    if (p->nodes[s].kind != K_SWITCH || p->cons[k].port != 0 || p->nodes[s].dead) continue;
    nb_code rc = check_switch(p, s);
    if (rc) return rc;
    if (switch_pred(p, s).node != p->frames[f].loop_cond) continue;
    if (*sw >= 0) return fail(p, NB_CORRUPT, "loop Merge '%s' feeds two Switches on the LoopCond", name_of(p, m));
    *sw = s;
  }
  if (*sw < 0) return fail(p, NB_CORRUPT, "loop Merge '%s' feeds no Switch on the LoopCond", name_of(p, m));
  return NB_OK;
}

/* The loop variable of Merge m (entered by Enter e). */
static nb_code loop_var(pass *p, int f, int e, int m, loop_arg *a) {
  const fnode *x = &p->nodes[m];
  if (data_inputs(x) != 2)
    return fail(p, NB_CORRUPT, "loop Merge '%s' has %d data inputs; a loop's Merge has 2", name_of(p, m),
                data_inputs(x));
  int next = x->in[0].node == e ? x->in[1].node : x->in[0].node;
  if (p->nodes[next].kind != K_NEXT)
    return fail(p, NB_CORRUPT, "Merge '%s' reads Enter '%s' but no NextIteration (an unconnected loop Merge)",
                name_of(p, m), name_of(p, e));
  if (p->nodes[next].frame != f || data_inputs(&p->nodes[next]) != 1)
    return fail(p, NB_CORRUPT, "NextIteration '%s' does not belong to Merge '%s''s loop", name_of(p, next),
                name_of(p, m));
  *a = (loop_arg){e, m, -1, next};
  return loop_switch(p, f, m, &a->sw);
}

static bool enter_is_constant(const pass *p, int e) {
  const Nbpb__AttrValue *v = nbio_node_attr(def_of(p, e), "is_constant");
  return v && v->value_case == NBPB__ATTR_VALUE__VALUE_B && v->b;
}

static nb_code push_arg(pass *p, loop_arg **args, size_t *n, size_t *cap, loop_arg a) {
  if (!grow((void **)args, cap, *n + 1, sizeof **args)) return nomem(p);
  (*args)[(*n)++] = a;
  return NB_OK;
}

/* Frame f's arguments in node order: each invariant Enter, each Merge of a variable Enter. */
static nb_code loop_args(pass *p, int f, loop_arg **args, size_t *n) {
  size_t cap = 0;
  nb_code rc = NB_OK;
  *args = NULL;
  *n = 0;
  for (size_t e = 0; e < p->gd->n_node && !rc; e++) {
    if (!in_frame(p, (int)e, f) || p->nodes[e].kind != K_ENTER) continue;
    if (data_inputs(&p->nodes[e]) != 1) return fail(p, NB_CORRUPT, "Enter '%s' has no data input", name_of(p, (int)e));
    if (enter_is_constant(p, (int)e)) {
      rc = push_arg(p, args, n, &cap, (loop_arg){(int)e, -1, -1, -1});
      continue;
    }
    for (int k = p->cons_start[e]; k < p->cons_start[e + 1] && !rc; k++) {
      int c = p->cons[k].node;
      loop_arg a = {-1, -1, -1, -1};
      if (p->nodes[c].in[p->cons[k].port].port < 0) continue; /* a control edge */
      if (p->nodes[c].kind != K_MERGE)
        return fail(p, NB_CORRUPT, "Enter '%s' of a loop variable feeds '%s' (%s), not a Merge", name_of(p, (int)e),
                    name_of(p, c), def_of(p, c)->op);
      if (!(rc = loop_var(p, f, (int)e, c, &a))) rc = push_arg(p, args, n, &cap, a);
    }
  }
  return rc;
}

/* Checks that every Merge, NextIteration and Exit of frame f belongs to one of its variables. */
static nb_code check_loop_nodes(pass *p, int f, const loop_arg *args, size_t n) {
  for (size_t v = 0; v < p->gd->n_node; v++) {
    if (!in_frame(p, (int)v, f)) continue;
    const fnode *x = &p->nodes[v];
    bool owned = x->kind != K_MERGE && x->kind != K_NEXT;
    for (size_t i = 0; i < n && !owned; i++) owned = args[i].merge == (int)v || args[i].next == (int)v;
    if (!owned)
      return fail(p, NB_CORRUPT, "%s '%s' belongs to no variable of its loop (no Enter before its Merge)",
                  def_of(p, (int)v)->op, name_of(p, (int)v));
    if (x->kind == K_EXIT) {
      int s = data_inputs(x) == 1 ? x->in[0].node : -1;
      if (s < 0 || x->in[0].port != 0 || p->nodes[s].kind != K_SWITCH || p->nodes[s].arg < 0)
        return fail(p, NB_CORRUPT, "Exit '%s' does not read the false output of its loop's Switch", name_of(p, (int)v));
    }
  }
  return NB_OK;
}

/* Marks the nodes that stand for argument i (an invariant's Enter; a variable's Merge and
   Switch) with i, or clears them. */
static void map_args(pass *p, const loop_arg *args, size_t n, bool on) {
  for (size_t i = 0; i < n; i++) {
    int arg = on ? (int)i : -1;
    if (args[i].merge < 0) {
      p->nodes[args[i].enter].arg = arg;
    } else {
      p->nodes[args[i].merge].arg = arg;
      p->nodes[args[i].sw].arg = arg;
    }
  }
}

/* The cond and body functions of frame f's loop. */
static nb_code loop_functions(pass *p, int f, const loop_arg *args, size_t n, const int *types, char *cond_name,
                              char *body_name, size_t cap) {
  extraction x;
  ref *rets = malloc((n + 1) * sizeof *rets);
  nb_code rc = rets ? new_extraction(p, &x, f, true) : nomem(p);
  if (rc) return free(rets), rc;
  int lc = p->frames[f].loop_cond, bool_type = DT_BOOL;
  if (data_inputs(&p->nodes[lc]) != 1) rc = fail(p, NB_CORRUPT, "LoopCond '%s' has no input", name_of(p, lc));
  fresh_function_name(p, "while_cond", cond_name, cap);
  fresh_function_name(p, "while_body", body_name, cap);
  if (!rc) rc = collect(p, &x, &p->nodes[lc].in[0], 1);
  if (!rc) rc = emit_function(p, &x, cond_name, types, (int)n, &p->nodes[lc].in[0], &bool_type, 1);
  for (size_t i = 0; i < n; i++) rets[i] = args[i].next >= 0 ? p->nodes[args[i].next].in[0] : (ref){args[i].enter, 0};
  x.nnodes = 0;
  if (!rc) rc = collect(p, &x, rets, (int)n);
  if (!rc) rc = emit_function(p, &x, body_name, types, (int)n, rets, types, (int)n);
  free_extraction(&x);
  free(rets);
  return rc;
}

/* Frame f's LoopCond becomes the While node: inputs the Enters' inputs, then their control
   inputs. Its output_shapes are of unknown rank: the static shapes are not known at the
   protobuf level, and a loop variable may change shape (TF 1 loops check no invariants
   unless shape_invariants says so, which the graph does not record). */
static nb_code build_while(pass *p, int f, const loop_arg *args, size_t n, const int *types, const char *cond_name,
                           const char *body_name) {
  int w = p->frames[f].loop_cond, count = 0;
  ref *in = malloc((n + 1) * sizeof *in);
  if (!in) return nomem(p);
  for (size_t i = 0; i < n; i++) in[count++] = p->nodes[args[i].enter].in[0];
  nb_code rc = NB_OK;
  for (size_t i = 0; i < n && !rc; i++)
    for (int j = 1; j < p->nodes[args[i].enter].nin && !rc; j++)
      rc = add_control_refs(p, &in, &count, &p->nodes[args[i].enter].in[j].node, 1);
  if (rc) return free(in), rc;
  set_refs(p, w, in, count);
  Nbpb__NodeDef *d = def_of(p, w);
  clear_attrs(d);
  if (!set_op(d, "While") || !add_attr(d, "T", type_list_value(types, (int)n)) ||
      !add_attr(d, "cond", func_value(cond_name)) || !add_attr(d, "body", func_value(body_name)) ||
      !add_attr(d, "output_shapes", unknown_shapes_value(n)))
    return nomem(p);
  p->nodes[w].kind = K_OTHER;
  p->nodes[w].frame = p->frames[f].parent;
  return NB_OK;
}

/* Raises loop frame f (its conds already raised) into a While node in its parent frame. */
static nb_code raise_loop(pass *p, int f) {
  loop_arg *args = NULL;
  size_t n = 0;
  int *types = NULL;
  char cond_name[96], body_name[96];
  nb_code rc = build_consumers(p);
  if (!rc) rc = loop_args(p, f, &args, &n);
  if (!rc) map_args(p, args, n, true);
  if (!rc) rc = check_loop_nodes(p, f, args, n);
  if (!rc && !(types = malloc((n + 1) * sizeof *types))) rc = nomem(p);
  for (size_t i = 0; i < n && !rc; i++) rc = dtype_of(p, args[i].enter, &types[i]);
  if (!rc) rc = loop_functions(p, f, args, n, types, cond_name, body_name, sizeof cond_name);
  if (!rc) rc = build_while(p, f, args, n, types, cond_name, body_name);
  for (size_t v = 0; v < p->gd->n_node && !rc; v++) {
    if (!in_frame(p, (int)v, f)) continue;
    if (p->nodes[v].kind == K_EXIT)
      rc =
          become_identity(p, (int)v, p->frames[f].loop_cond, p->nodes[p->nodes[v].in[0].node].arg, p->frames[f].parent);
    else
      p->nodes[v].dead = true;
  }
  if (args) map_args(p, args, n, false);
  free(args);
  free(types);
  return rc;
}

/* ---- the pass ----------------------------------------------------------------------------- */

static bool has_control_flow(const Nbpb__GraphDef *gd) {
  for (size_t i = 0; i < gd->n_node; i++) {
    node_kind k = kind_of_op(gd->node[i]->op);
    if (k != K_OTHER && k != K_IDENTITY) return true;
  }
  return false;
}

/* Frames 1.. deepest first (insertion sort: frames are few). */
static void frames_deepest_first(const pass *p, int *order) {
  for (int f = 1, n = 0; f < p->nframes; f++) {
    int j = n++;
    for (; j > 0 && p->frames[order[j - 1]].depth < p->frames[f].depth; j--) order[j] = order[j - 1];
    order[j] = f;
  }
}

static nb_code raise_all(pass *p) {
  int *order = malloc((size_t)p->nframes * sizeof *order);
  if (!order) return nomem(p);
  frames_deepest_first(p, order);
  nb_code rc = NB_OK;
  for (int i = 0; i < p->nframes - 1 && !rc; i++)
    if (!(rc = raise_conds(p, order[i]))) rc = raise_loop(p, order[i]);
  free(order);
  return rc ? rc : raise_conds(p, 0);
}

/* Drops the dead nodes from gd and writes the changed nodes' inputs. */
static nb_code finish(pass *p) {
  Nbpb__GraphDef *gd = p->gd;
  for (size_t i = 0; i < gd->n_node; i++) {
    const fnode *v = &p->nodes[i];
    if (!v->dead && v->kind != K_OTHER && v->kind != K_IDENTITY)
      return fail(p, NB_UNIMPLEMENTED, "%s '%s' is left after raising control flow", def_of(p, (int)i)->op,
                  name_of(p, (int)i));
    if (!v->dead && v->dirty) {
      nb_code rc = write_graph_inputs(p, (int)i);
      if (rc) return rc;
    }
  }
  size_t k = 0;
  for (size_t i = 0; i < gd->n_node; i++) {
    if (p->nodes[i].dead)
      nbpb__node_def__free_unpacked(gd->node[i], NULL);
    else
      gd->node[k++] = gd->node[i];
  }
  gd->n_node = k;
  return NB_OK;
}

nb_code nbio_functionalize_control_flow(Nbpb__GraphDef *gd, char *err, size_t cap) {
  if (cap) err[0] = '\0';
  if (!has_control_flow(gd)) return NB_OK;
  pass p = {.gd = gd, .err = err, .errcap = cap};
  size_t fcap = 0, scap = 0;
  nb_code rc =
      grow((void **)&p.frames, &fcap, 4, sizeof *p.frames) && grow((void **)&p.st_off, &scap, 4, sizeof *p.st_off)
          ? NB_OK
          : nomem(&p);
  p.cap_frames = (int)fcap;
  p.cap_states = (int)scap;
  if (!rc) rc = parse_graph(&p);
  if (!rc) rc = build_consumers(&p);
  if (!rc) rc = assign_frames(&p);
  if (!rc) rc = check_frames(&p);
  if (!rc) rc = raise_all(&p);
  if (!rc) rc = finish(&p);
  for (size_t i = 0; i < p.nnodes; i++) free(p.nodes[i].in);
  free(p.nodes);
  free(p.slots);
  free(p.frames);
  free(p.cons_start);
  free(p.cons);
  free(p.pool);
  free(p.st_off);
  return rc;
}
