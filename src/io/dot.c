/* Graphviz DOT export. Nodes are grouped into nested clusters by the "/"-separated scope
   prefixes of their names: sorting names makes every scope a contiguous run, so one walk
   opens and closes cluster brackets by comparing each name's scope with the previous
   one's (no recursion, whatever the depth). */
#include "../graph/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct named {
  const char *name;
  int32_t id;
} named;

static int by_name(const void *a, const void *b) { return strcmp(((const named *)a)->name, ((const named *)b)->name); }

/* Writes s[0..n) escaped for a DOT quoted string. */
static void put_escaped(FILE *f, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '"' || s[i] == '\\') putc('\\', f);
    if (s[i] == '\n') {
      fputs("\\n", f);
      continue;
    }
    putc(s[i], f);
  }
}

static void put_quoted(FILE *f, const char *s) {
  putc('"', f);
  put_escaped(f, s, strlen(s));
  putc('"', f);
}

static const char *short_dtype(nb_dtype t) {
  static const char *const names[] = {"f32", "f64", "i32", "i64", "bool"};
  return (unsigned)t <= NB_BOOL ? names[t] : "?";
}

/* "f32[2,?]", "f32[]" (scalar) or "f32 <unknown>" (unknown rank). */
static void put_meta(FILE *f, const nbop_meta *m) {
  fputs(short_dtype(m->dtype), f);
  if (m->rank < 0) {
    fputs(" <unknown>", f);
    return;
  }
  putc('[', f);
  for (int i = 0; i < m->rank; i++) {
    if (i) putc(',', f);
    if (m->shape[i] < 0)
      putc('?', f);
    else
      fprintf(f, "%lld", (long long)m->shape[i]);
  }
  putc(']', f);
}

static void indent(FILE *f, int depth) { fprintf(f, "%*s", 2 * depth + 2, ""); }

static void put_node(FILE *f, const nb_graph *g, int32_t id, int depth) {
  const nbgraph_node *n = &g->nodes[id];
  indent(f, depth);
  put_quoted(f, n->name);
  fputs(" [label=\"", f);
  put_escaped(f, n->name, strlen(n->name));
  fprintf(f, "\\n%s", n->def->name);
  if (n->nout > 0) {
    fputs("\\n", f);
    put_meta(f, &g->outs[n->out0].meta);
  }
  putc('"', f);
  if (n->nout > 0 && g->outs[n->out0].value) fputs(", shape=box", f); /* known at build time */
  fputs("];\n", f);
}

/* Length of the scope part of a name: up to and including its last '/', 0 if none. */
static size_t scope_len(const char *name) {
  const char *slash = strrchr(name, '/');
  return slash ? (size_t)(slash - name) + 1 : 0;
}

/* Length of the longest common whole-component prefix of two scopes (each ends in '/'). */
static size_t common_scope(const char *a, size_t a_len, const char *b, size_t b_len) {
  size_t common = 0;
  for (size_t i = 0; i < a_len && i < b_len && a[i] == b[i]; i++)
    if (a[i] == '/') common = i + 1;
  return common;
}

/* Emits the nodes in name order inside nested clusters, one per scope component. */
static void put_clusters(FILE *f, const nb_graph *g, const named *sorted) {
  const char *open = "";
  size_t open_len = 0;
  int depth = 0, clusters = 0;
  for (int32_t k = 0; k < g->nnodes; k++) {
    const char *name = sorted[k].name;
    size_t len = scope_len(name), common = common_scope(open, open_len, name, len);
    for (size_t i = common; i < open_len; i++) /* close the scopes left */
      if (open[i] == '/') {
        indent(f, --depth);
        fputs("}\n", f);
      }
    for (size_t i = common, start = common; i < len; i++) /* open the scopes entered */
      if (name[i] == '/') {
        indent(f, depth++);
        fprintf(f, "subgraph cluster_%d {\n", clusters++);
        indent(f, depth);
        fputs("label=\"", f);
        put_escaped(f, name + start, i - start);
        fputs("\";\n", f);
        start = i + 1;
      }
    put_node(f, g, sorted[k].id, depth);
    open = name;
    open_len = len;
  }
  while (depth > 0) {
    indent(f, --depth);
    fputs("}\n", f);
  }
}

static void put_edge(FILE *f, const nb_graph *g, const nbgraph_edge *e) {
  fputs("  ", f);
  put_quoted(f, g->nodes[e->src].name);
  fputs(" -> ", f);
  put_quoted(f, g->nodes[e->consumer].name);
  if (e->out < 0)
    fputs(" [style=dashed]", f);
  else if (g->nodes[e->src].nout > 1)
    fprintf(f, " [label=\"%d\"]", e->out);
  fputs(";\n", f);
}

static void put_edges(FILE *f, const nb_graph *g) {
  for (int32_t id = 0; id < g->nnodes; id++) {
    const nbgraph_node *n = &g->nodes[id];
    for (int32_t i = 0; i < n->nin; i++) put_edge(f, g, &g->edges[n->in0 + i]);
    for (int32_t e = n->ctrl; e >= 0; e = g->edges[e].next_ctrl) put_edge(f, g, &g->edges[e]);
  }
}

nb_code nb_graph_to_dot(const nb_graph *g, const char *path) {
  if (!g || !path) return NB_INVALID;
  named *sorted = malloc(((size_t)g->nnodes + 1) * sizeof *sorted);
  if (!sorted) return NB_NOMEM;
  for (int32_t id = 0; id < g->nnodes; id++) sorted[id] = (named){g->nodes[id].name, id};
  qsort(sorted, (size_t)g->nnodes, sizeof *sorted, by_name);
  FILE *f = fopen(path, "w");
  if (!f) {
    free(sorted);
    return NB_IO;
  }
  fputs("digraph nabla {\n", f);
  put_clusters(f, g, sorted);
  put_edges(f, g);
  fputs("}\n", f);
  free(sorted);
  bool failed = ferror(f) != 0; /* any write above failed */
  if (fclose(f) != 0) failed = true;
  return failed ? NB_IO : NB_OK;
}
