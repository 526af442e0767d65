/* Graphviz DOT export of graphs. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, access, unlink */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct fixture {
  nb_graph *g;
  nb_ctx *c;
  char path[512];
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (!f) return -1;
  *state = f;
  const char *dir = getenv("TMPDIR");
  snprintf(f->path, sizeof f->path, "%s/nabla-dot-XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(f->path);
  if (fd < 0) return -1;
  close(fd);
  f->g = nb_graph_new();
  f->c = nb_graph_ctx_new(f->g);
  return f->g && f->c ? 0 : -1;
}

static int teardown(void **state) {
  fixture *f = *state;
  unlink(f->path);
  nb_ctx_free(f->c);
  nb_graph_free(f->g);
  free(f);
  return 0;
}

/* Writes the graph to the fixture's file and returns its text (caller frees). */
static char *dot_text(fixture *f) {
  assert_int_equal(nb_graph_to_dot(f->g, f->path), NB_OK);
  FILE *in = fopen(f->path, "rb");
  assert_non_null(in);
  assert_int_equal(fseek(in, 0, SEEK_END), 0);
  long n = ftell(in);
  assert_true(n >= 0);
  rewind(in);
  char *text = malloc((size_t)n + 1);
  assert_non_null(text);
  assert_int_equal(fread(text, 1, (size_t)n, in), (size_t)n);
  text[n] = '\0';
  fclose(in);
  return text;
}

/* Braces outside quoted strings balance and never go below zero; returns the deepest nesting. */
static int check_braces(const char *s) {
  int depth = 0, deepest = 0;
  bool quoted = false;
  for (; *s; s++) {
    if (quoted && *s == '\\' && s[1])
      s++;
    else if (*s == '"')
      quoted = !quoted;
    else if (!quoted && *s == '{')
      deepest = ++depth > deepest ? depth : deepest;
    else if (!quoted && *s == '}')
      assert_true(--depth >= 0);
  }
  assert_false(quoted);
  assert_int_equal(depth, 0);
  return deepest;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

/* Scopes, a constant, a multi-output op, an unknown shape, a control edge and a name
   that needs escaping: the whole file, checked line by line. */
static void test_scopes_edges_and_labels(void **state) {
  fixture *f = *state;
  nb_ctx *c = f->c;
  nb_tensor *x = nb_placeholder(c, NB_F32, 2, TU_SHAPE(2, 3), "x");
  nb_tensor *q = nb_placeholder(c, NB_F32, 2, TU_SHAPE(-1, 3), "say \"hi\"\\now");
  assert_int_equal(nb_name_scope_push(f->g, "gradients"), NB_OK);
  assert_int_equal(nb_name_scope_push(f->g, "MatMul_grad"), NB_OK);
  nb_tensor *m = nb_mul(c, x, x);
  nb_tanh(c, m);
  nb_name_scope_pop(f->g);
  nb_tensor *neg = nb_neg(c, m);
  nb_name_scope_pop(f->g);
  assert_int_equal(nb_name_scope_push(f->g, "layer"), NB_OK);
  nb_mul(c, x, nb_scalar(c, NB_F32, 2));
  nb_name_scope_pop(f->g);
  nb_tensor *e = nb_exp(c, x);
  assert_int_equal(nb_add_control_input(e, neg), NB_OK);
  nb_tensor *parts[2];
  assert_int_equal(nb_unpack(c, x, 0, 2, parts), NB_OK);
  nb_neg(c, parts[1]);
  nb_add(c, q, x);
  assert_int_equal(nb_status(c), NB_OK);

  char *text = dot_text(f);
  const char *want =
      "digraph nabla {\n"
      "  \"AddV2\" [label=\"AddV2\\nAddV2\\nf32 <unknown>\"];\n"
      "  \"Exp\" [label=\"Exp\\nExp\\nf32[2,3]\"];\n"
      "  \"Neg\" [label=\"Neg\\nNeg\\nf32[3]\"];\n"
      "  \"Unpack\" [label=\"Unpack\\nUnpack\\nf32[3]\"];\n"
      "  subgraph cluster_0 {\n"
      "    label=\"gradients\";\n"
      "    subgraph cluster_1 {\n"
      "      label=\"MatMul_grad\";\n"
      "      \"gradients/MatMul_grad/Mul\" [label=\"gradients/MatMul_grad/Mul\\nMul\\nf32[2,3]\"];\n"
      "      \"gradients/MatMul_grad/Tanh\" [label=\"gradients/MatMul_grad/Tanh\\nTanh\\nf32[2,3]\"];\n"
      "    }\n"
      "    \"gradients/Neg\" [label=\"gradients/Neg\\nNeg\\nf32[2,3]\"];\n"
      "  }\n"
      "  subgraph cluster_2 {\n"
      "    label=\"layer\";\n"
      "    \"layer/Const\" [label=\"layer/Const\\nConst\\nf32[]\", shape=box];\n"
      "    \"layer/Mul\" [label=\"layer/Mul\\nMul\\nf32[2,3]\"];\n"
      "  }\n"
      "  \"say \\\"hi\\\"\\\\now\" [label=\"say \\\"hi\\\"\\\\now\\nPlaceholder\\nf32[?,3]\"];\n"
      "  \"x\" [label=\"x\\nPlaceholder\\nf32[2,3]\"];\n"
      "  \"x\" -> \"gradients/MatMul_grad/Mul\";\n"
      "  \"x\" -> \"gradients/MatMul_grad/Mul\";\n"
      "  \"gradients/MatMul_grad/Mul\" -> \"gradients/MatMul_grad/Tanh\";\n"
      "  \"gradients/MatMul_grad/Mul\" -> \"gradients/Neg\";\n"
      "  \"x\" -> \"layer/Mul\";\n"
      "  \"layer/Const\" -> \"layer/Mul\";\n"
      "  \"x\" -> \"Exp\";\n"
      "  \"gradients/Neg\" -> \"Exp\" [style=dashed];\n"
      "  \"x\" -> \"Unpack\";\n"
      "  \"Unpack\" -> \"Neg\" [label=\"1\"];\n"
      "  \"say \\\"hi\\\"\\\\now\" -> \"AddV2\";\n"
      "  \"x\" -> \"AddV2\";\n"
      "}\n";
  assert_string_equal(text, want);
  assert_int_equal(check_braces(text), 3);
  free(text);
}

/* Scopes are split at whole components ("a" and "ab" are different clusters), a node may
   share its name with a scope, and an empty graph is an empty digraph. */
static void test_sibling_scopes(void **state) {
  fixture *f = *state;
  char *text = dot_text(f);
  assert_string_equal(text, "digraph nabla {\n}\n");
  free(text);
  /* paths come from scopes; a node named like a scope becomes unique ("a_1") */
  const char *paths[][3] = {{"ab", "z", NULL}, {"a", "c", "y"}, {"a", NULL, NULL}, {"a", "b", "x"}, {"a", "b", "w"}};
  for (int i = 0; i < 5; i++) {
    int depth = 0;
    while (depth < 2 && paths[i][depth + 1]) assert_int_equal(nb_name_scope_push(f->g, paths[i][depth++]), NB_OK);
    nb_placeholder(f->c, NB_I64, 0, NULL, paths[i][depth]);
    while (depth-- > 0) nb_name_scope_pop(f->g);
  }
  assert_int_equal(nb_status(f->c), NB_OK);
  text = dot_text(f);
  const char *want =
      "digraph nabla {\n"
      "  subgraph cluster_0 {\n"
      "    label=\"a\";\n"
      "    subgraph cluster_1 {\n"
      "      label=\"c\";\n"
      "      \"a/c/y\" [label=\"a/c/y\\nPlaceholder\\ni64[]\"];\n"
      "    }\n"
      "  }\n"
      "  \"a_1\" [label=\"a_1\\nPlaceholder\\ni64[]\"];\n"
      "  subgraph cluster_2 {\n"
      "    label=\"a_2\";\n"
      "    subgraph cluster_3 {\n"
      "      label=\"b\";\n"
      "      \"a_2/b/x\" [label=\"a_2/b/x\\nPlaceholder\\ni64[]\"];\n"
      "    }\n"
      "  }\n"
      "  subgraph cluster_4 {\n"
      "    label=\"a_3\";\n"
      "    subgraph cluster_5 {\n"
      "      label=\"b\";\n"
      "      \"a_3/b/w\" [label=\"a_3/b/w\\nPlaceholder\\ni64[]\"];\n"
      "    }\n"
      "  }\n"
      "  subgraph cluster_6 {\n"
      "    label=\"ab\";\n"
      "    \"ab/z\" [label=\"ab/z\\nPlaceholder\\ni64[]\"];\n"
      "  }\n"
      "}\n";
  assert_string_equal(text, want);
  free(text);
}

/* Deep scopes nest without recursion; each level is one labelled cluster. */
static void test_deep_scopes(void **state) {
  fixture *f = *state;
  enum { DEPTH = 60 };
  for (int i = 0; i < DEPTH; i++) assert_int_equal(nb_name_scope_push(f->g, "s"), NB_OK);
  nb_tensor *p = nb_placeholder(f->c, NB_BOOL, 1, TU_SHAPE(4), "leaf");
  nb_tensor *ins[1] = {p};
  nb_tensor *out[1];
  nb_tensor *q = nb_placeholder(f->c, NB_BOOL, 1, TU_SHAPE(4), "next");
  for (int i = 0; i < DEPTH; i++) nb_name_scope_pop(f->g);
  assert_int_equal(nb_op(f->c, "LogicalNot", ins, 1, NULL, 0, out, 1), NB_OK);
  assert_int_equal(nb_add_control_input(out[0], q), NB_OK);
  char *text = dot_text(f);
  assert_int_equal(check_braces(text), DEPTH + 1);
  assert_int_equal(count(text, "subgraph cluster_"), DEPTH);
  assert_int_equal(count(text, "label=\"s\";"), DEPTH);
  assert_non_null(strstr(text, "/s/leaf\\nPlaceholder\\nbool[4]\"];\n"));
  assert_non_null(strstr(text, "\"LogicalNot\" [label=\"LogicalNot\\nLogicalNot\\nbool[4]\"];\n"));
  assert_non_null(strstr(text, "/s/next\" -> \"LogicalNot\" [style=dashed];\n"));
  free(text);
}

/* A node named with nb_name_next shows under its name, its gradient in a cluster of it. */
static void test_named_node_and_its_gradient(void **state) {
  fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 1, TU_SHAPE(2), "x"), *dx;
  assert_int_equal(nb_name_next(f->c, "squash"), NB_OK);
  nb_tensor *y = nb_tanh(f->c, x);
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, &dx), NB_OK);
  char *text = dot_text(f);
  assert_non_null(strstr(text, "  \"squash\" [label=\"squash\\nTanh\\nf32[2]\"];\n"));
  assert_non_null(strstr(text,
                         "      label=\"squash_grad\";\n"
                         "      \"gradients/squash_grad/TanhGrad\" [label=\"gradients/squash_grad/TanhGrad\\n"
                         "TanhGrad\\nf32[2]\"];\n"));
  assert_non_null(strstr(text, "  \"squash\" -> \"gradients/squash_grad/TanhGrad\";\n"));
  free(text);
}

static void test_errors(void **state) {
  fixture *f = *state;
  nb_placeholder(f->c, NB_F32, 0, NULL, "x");
  assert_int_equal(nb_graph_to_dot(NULL, f->path), NB_INVALID);
  assert_int_equal(nb_graph_to_dot(f->g, NULL), NB_INVALID);
  assert_int_equal(nb_graph_to_dot(f->g, "/nonexistent-dir/x.dot"), NB_IO);
  if (access("/dev/full", W_OK) == 0) /* opens, but every write fails */
    assert_int_equal(nb_graph_to_dot(f->g, "/dev/full"), NB_IO);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_scopes_edges_and_labels, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sibling_scopes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deep_scopes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_named_node_and_its_gradient, setup, teardown),
      cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
  };
  return cmocka_run_group_tests_name("dot", tests, NULL, NULL);
}
