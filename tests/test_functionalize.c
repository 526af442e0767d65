/* TF 1 control flow raised into While/If (src/io/functionalize.c): TensorFlow's own TF 1
   graphs (tests/golden/graphdef_v1, written by tests/golden/tf_control_flow_v1.py) come
   out with no Switch/Merge/Enter/Exit/NextIteration/LoopCond, the expected While and If
   nodes and function signatures, every input resolving; malformed frames are NB_CORRUPT
   naming the node.

   `test_functionalize --write IN.pb OUT.pb` runs the pass on one file and writes the
   result: tf_control_flow_v1.py check loads those into TensorFlow and compares outputs. */
#include "testutil.h"

#include <stdio.h>

#include "../src/io/graphdef.h"

#ifndef NB_GRAPHDEF_V1_DIR
#error "tests/CMakeLists.txt defines NB_GRAPHDEF_V1_DIR"
#endif

static const char *const v1_ops[] = {"Switch",    "Merge",    "Enter",    "Exit",    "NextIteration",   "LoopCond",
                                     "RefSwitch", "RefMerge", "RefEnter", "RefExit", "RefNextIteration"};

static Nbpb__GraphDef *read_graph(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0, got;
  do {
    if (n == cap) {
      cap = cap ? cap * 2 : 1 << 16;
      uint8_t *b = realloc(buf, cap);
      if (!b) break;
      buf = b;
    }
    got = fread(buf + n, 1, cap - n, f);
    n += got;
  } while (got);
  fclose(f);
  Nbpb__GraphDef *gd = buf ? nbpb__graph_def__unpack(NULL, n, buf) : NULL;
  free(buf);
  return gd;
}

static bool write_graph(const Nbpb__GraphDef *gd, const char *path) {
  size_t n = nbpb__graph_def__get_packed_size(gd);
  uint8_t *buf = malloc(n ? n : 1);
  FILE *f = buf ? fopen(path, "wb") : NULL;
  bool ok = f && (nbpb__graph_def__pack(gd, buf), fwrite(buf, 1, n, f) == n);
  if (f) ok = fclose(f) == 0 && ok;
  free(buf);
  return ok;
}

static Nbpb__GraphDef *functionalized(const char *model) {
  char path[512], err[512];
  snprintf(path, sizeof path, "%s/%s.pb", NB_GRAPHDEF_V1_DIR, model);
  Nbpb__GraphDef *gd = read_graph(path);
  if (!gd) fail_msg("cannot read %s", path);
  nb_code rc = nbio_functionalize_control_flow(gd, err, sizeof err);
  if (rc != NB_OK) fail_msg("%s: %s (%s)", model, err, nb_code_name(rc));
  return gd;
}

/* ---- structure ------------------------------------------------------------------------------ */

static const Nbpb__FunctionDef *find_function(const Nbpb__GraphDef *gd, const char *name) {
  for (size_t i = 0; gd->library && i < gd->library->n_function; i++)
    if (strcmp(gd->library->function[i]->signature->name, name) == 0) return gd->library->function[i];
  fail_msg("no function %s", name);
  return NULL;
}

static const char *func_attr(const Nbpb__NodeDef *n, const char *key) {
  const Nbpb__AttrValue *v = nbio_node_attr(n, key);
  assert_non_null(v);
  assert_int_equal(v->value_case, NBPB__ATTR_VALUE__VALUE_FUNC);
  return v->func->name;
}

static const Nbpb__AttrValue__ListValue *types_attr(const Nbpb__NodeDef *n, const char *key) {
  const Nbpb__AttrValue *v = nbio_node_attr(n, key);
  assert_non_null(v);
  assert_int_equal(v->value_case, NBPB__ATTR_VALUE__VALUE_LIST);
  return v->list;
}

/* The function's argument types equal types[0..n) (outputs when outputs). */
static void check_signature(const Nbpb__FunctionDef *fd, bool outputs, const int32_t *types, size_t n) {
  const Nbpb__OpDef *s = fd->signature;
  size_t have = outputs ? s->n_output_arg : s->n_input_arg;
  Nbpb__OpDef__ArgDef **args = outputs ? s->output_arg : s->input_arg;
  assert_int_equal(have, n);
  for (size_t i = 0; i < n; i++) assert_int_equal(args[i]->type, types[i]);
  if (outputs) assert_int_equal(fd->n_ret, n);
}

/* While: cond (T) -> bool, body (T) -> T. If: then/else (Tin) -> Tout. */
static void check_call_node(const Nbpb__GraphDef *gd, const Nbpb__NodeDef *n, int *whiles, int *ifs) {
  static const int32_t bool_type = 10;
  if (strcmp(n->op, "While") == 0) {
    const Nbpb__AttrValue__ListValue *t = types_attr(n, "T");
    const Nbpb__FunctionDef *cond = find_function(gd, func_attr(n, "cond"));
    const Nbpb__FunctionDef *body = find_function(gd, func_attr(n, "body"));
    check_signature(cond, false, t->type, t->n_type);
    check_signature(cond, true, &bool_type, 1);
    check_signature(body, false, t->type, t->n_type);
    check_signature(body, true, t->type, t->n_type);
    (*whiles)++;
  } else if (strcmp(n->op, "If") == 0) {
    const Nbpb__AttrValue__ListValue *tin = types_attr(n, "Tin"), *tout = types_attr(n, "Tout");
    for (int b = 0; b < 2; b++) {
      const Nbpb__FunctionDef *fd = find_function(gd, func_attr(n, b ? "then_branch" : "else_branch"));
      check_signature(fd, false, tin->type, tin->n_type);
      check_signature(fd, true, tout->type, tout->n_type);
    }
    assert_true(n->n_input >= tin->n_type + 1);
    (*ifs)++;
  }
  for (size_t k = 0; k < sizeof v1_ops / sizeof v1_ops[0]; k++)
    if (strcmp(n->op, v1_ops[k]) == 0) fail_msg("node %s (%s) is left", n->name, n->op);
}

/* Every input of nodes[0..n) names one of them ("name", "name:k", "^name") or, in a
   function, an argument of fd. */
static void check_inputs_resolve(Nbpb__NodeDef *const *nodes, size_t n, const Nbpb__FunctionDef *fd) {
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < nodes[i]->n_input; j++) {
      const char *in = nodes[i]->input[j] + (nodes[i]->input[j][0] == '^');
      size_t len = strcspn(in, ":");
      bool found = false;
      for (size_t k = 0; k < n && !found; k++)
        found = strlen(nodes[k]->name) == len && !strncmp(nodes[k]->name, in, len);
      for (size_t k = 0; fd && k < fd->signature->n_input_arg && !found; k++)
        found = strcmp(fd->signature->input_arg[k]->name, in) == 0;
      if (!found) fail_msg("node %s: input %s resolves to nothing", nodes[i]->name, nodes[i]->input[j]);
    }
}

typedef struct expect {
  const char *model;
  int graph_whiles, graph_ifs; /* in the graph itself */
  int all_whiles, all_ifs;     /* in the graph and its functions */
  size_t functions;
} expect;

static void check_model(const expect *e) {
  Nbpb__GraphDef *gd = functionalized(e->model);
  int whiles = 0, ifs = 0;
  for (size_t i = 0; i < gd->n_node; i++) check_call_node(gd, gd->node[i], &whiles, &ifs);
  assert_int_equal(whiles, e->graph_whiles);
  assert_int_equal(ifs, e->graph_ifs);
  check_inputs_resolve(gd->node, gd->n_node, NULL);
  size_t nfunc = gd->library ? gd->library->n_function : 0;
  assert_int_equal(nfunc, e->functions);
  for (size_t f = 0; f < nfunc; f++) {
    const Nbpb__FunctionDef *fd = gd->library->function[f];
    for (size_t i = 0; i < fd->n_node_def; i++) check_call_node(gd, fd->node_def[i], &whiles, &ifs);
    check_inputs_resolve(fd->node_def, fd->n_node_def, fd);
  }
  assert_int_equal(whiles, e->all_whiles);
  assert_int_equal(ifs, e->all_ifs);
  bool has_y = false;
  for (size_t i = 0; i < gd->n_node; i++) has_y = has_y || strcmp(gd->node[i]->name, "y") == 0;
  assert_true(has_y);
  nbpb__graph_def__free_unpacked(gd, NULL);
}

static void test_rnn_v1(void **state) {
  (void)state;
  check_model(&(expect){"rnn_v1", 1, 0, 1, 0, 2});
}

static void test_rnn_frozen(void **state) {
  (void)state;
  check_model(&(expect){"rnn_frozen", 1, 0, 1, 0, 2});
}

static void test_cond(void **state) {
  (void)state;
  check_model(&(expect){"cond_v1_true", 0, 1, 0, 1, 2});
  check_model(&(expect){"cond_v1_false", 0, 1, 0, 1, 2});
  check_model(&(expect){"cond_frozen", 0, 1, 0, 1, 2});
}

static void test_cond_in_while(void **state) {
  (void)state;
  check_model(&(expect){"cond_in_while", 1, 0, 1, 1, 4});
}

static void test_nested_while(void **state) {
  (void)state;
  check_model(&(expect){"nested_while", 1, 0, 2, 0, 4});
}

static void test_while_in_cond(void **state) {
  (void)state;
  check_model(&(expect){"while_in_cond", 0, 1, 1, 1, 4});
}

static void test_nested_cond(void **state) {
  (void)state;
  check_model(&(expect){"nested_cond", 0, 1, 0, 2, 4});
}

/* A graph without TF 1 control flow is left as it was, byte for byte. */
static void test_plain_graph_untouched(void **state) {
  (void)state;
  Nbpb__NodeDef x = NBPB__NODE_DEF__INIT, y = NBPB__NODE_DEF__INIT;
  char *y_in[] = {"x"};
  x.name = "x", x.op = "Placeholder";
  y.name = "y", y.op = "Identity", y.input = y_in, y.n_input = 1;
  Nbpb__NodeDef *nodes[] = {&x, &y};
  Nbpb__GraphDef g = NBPB__GRAPH_DEF__INIT;
  g.node = nodes, g.n_node = 2;
  char err[64];
  size_t before = nbpb__graph_def__get_packed_size(&g);
  assert_int_equal(nbio_functionalize_control_flow(&g, err, sizeof err), NB_OK);
  assert_int_equal(nbpb__graph_def__get_packed_size(&g), before);
  assert_ptr_equal(g.node[1], &y);
}

/* ---- malformed frames ----------------------------------------------------------------------- */

/* One node of a hand-written graph: inputs joined by ',', frame for an Enter. */
typedef struct spec {
  const char *name, *op, *inputs, *frame;
  bool constant;
} spec;

/* Packs specs[0..n) into a GraphDef and unpacks it, so that the pass owns malloc'd memory. */
static Nbpb__GraphDef *graph_of(const spec *specs, size_t n) {
  Nbpb__NodeDef defs[16], *nodes[16];
  Nbpb__NodeDef__AttrEntry frame_e[16], const_e[16], t_e[16], *attrs[16][3];
  Nbpb__AttrValue frame_v[16], const_v[16], t_v[16];
  char *inputs[16][4], text[16][128];
  assert_true(n <= 16);
  for (size_t i = 0; i < n; i++) {
    nbpb__node_def__init(&defs[i]);
    defs[i].name = (char *)specs[i].name;
    defs[i].op = (char *)specs[i].op;
    snprintf(text[i], sizeof text[i], "%s", specs[i].inputs);
    for (char *tok = strtok(text[i], ","); tok; tok = strtok(NULL, ",")) inputs[i][defs[i].n_input++] = tok;
    defs[i].input = inputs[i];
    nbpb__attr_value__init(&t_v[i]);
    t_v[i].value_case = NBPB__ATTR_VALUE__VALUE_TYPE, t_v[i].type = 1;
    nbpb__node_def__attr_entry__init(&t_e[i]);
    t_e[i].key = "T", t_e[i].value = &t_v[i];
    attrs[i][defs[i].n_attr++] = &t_e[i];
    if (specs[i].frame) {
      nbpb__attr_value__init(&frame_v[i]);
      frame_v[i].value_case = NBPB__ATTR_VALUE__VALUE_S;
      frame_v[i].s = (ProtobufCBinaryData){strlen(specs[i].frame), (uint8_t *)specs[i].frame};
      nbpb__node_def__attr_entry__init(&frame_e[i]);
      frame_e[i].key = "frame_name", frame_e[i].value = &frame_v[i];
      nbpb__attr_value__init(&const_v[i]);
      const_v[i].value_case = NBPB__ATTR_VALUE__VALUE_B, const_v[i].b = specs[i].constant;
      nbpb__node_def__attr_entry__init(&const_e[i]);
      const_e[i].key = "is_constant", const_e[i].value = &const_v[i];
      attrs[i][defs[i].n_attr++] = &frame_e[i];
      attrs[i][defs[i].n_attr++] = &const_e[i];
    }
    defs[i].attr = attrs[i];
    nodes[i] = &defs[i];
  }
  Nbpb__GraphDef g = NBPB__GRAPH_DEF__INIT;
  g.node = nodes, g.n_node = n;
  size_t len = nbpb__graph_def__get_packed_size(&g);
  uint8_t *buf = malloc(len);
  assert_non_null(buf);
  nbpb__graph_def__pack(&g, buf);
  Nbpb__GraphDef *gd = nbpb__graph_def__unpack(NULL, len, buf);
  free(buf);
  assert_non_null(gd);
  return gd;
}

static void expect_error(const spec *specs, size_t n, nb_code code, const char *node, const char *fragment) {
  Nbpb__GraphDef *gd = graph_of(specs, n);
  char err[512];
  nb_code rc = nbio_functionalize_control_flow(gd, err, sizeof err);
  nbpb__graph_def__free_unpacked(gd, NULL);
  if (rc != code) fail_msg("%s: got %s: %s", node, nb_code_name(rc), err);
  char quoted[128];
  snprintf(quoted, sizeof quoted, "'%s'", node);
  if (!strstr(err, quoted) || !strstr(err, fragment)) fail_msg("'%s' lacks %s or '%s'", err, quoted, fragment);
}

#define EXPECT_ERROR(specs, code, node, fragment) \
  expect_error(specs, sizeof specs / sizeof specs[0], code, node, fragment)
#define EXPECT_CORRUPT(specs, node, fragment) EXPECT_ERROR(specs, NB_CORRUPT, node, fragment)

/* A well-formed one-variable loop: i = x; while (p) i = i + x. */
#define LOOP_NODES                                                                                                   \
  {"x", "Placeholder", "", NULL, false}, {"p", "Placeholder", "", NULL, false}, {"enter", "Enter", "x", "f", false}, \
      {"enter_p", "Enter", "p", "f", true}, {"merge", "Merge", "enter,next", NULL, false},                           \
      {"cond", "LoopCond", "enter_p", NULL, false}, {"switch", "Switch", "merge,cond", NULL, false},                 \
      {"body", "Identity", "switch:1", NULL, false}, {"next", "NextIteration", "body", NULL, false}, {               \
    "exit", "Exit", "switch", NULL, false                                                                            \
  }

static void test_well_formed_loop(void **state) {
  (void)state;
  static const spec loop[] = {LOOP_NODES, {"y", "Identity", "exit", NULL, false}};
  Nbpb__GraphDef *gd = graph_of(loop, sizeof loop / sizeof loop[0]);
  char err[256];
  nb_code rc = nbio_functionalize_control_flow(gd, err, sizeof err);
  if (rc) fail_msg("%s", err);
  assert_int_equal(gd->library->n_function, 2);
  nbpb__graph_def__free_unpacked(gd, NULL);
}

static void test_exit_without_enter(void **state) {
  (void)state;
  static const spec g[] = {
      {"x", "Placeholder", "", NULL, false}, {"e", "Exit", "x", NULL, false}, {"y", "Identity", "e", NULL, false}};
  EXPECT_CORRUPT(g, "e", "Exit without Enter");
}

static void test_next_iteration_without_merge(void **state) {
  (void)state;
  static const spec g[] = {LOOP_NODES, {"stray", "NextIteration", "body", NULL, false}};
  EXPECT_CORRUPT(g, "stray", "feeds no Merge");
  static const spec h[] = {
      LOOP_NODES, {"stray", "NextIteration", "body", NULL, false}, {"use", "Identity", "stray", NULL, false}};
  EXPECT_CORRUPT(h, "stray", "not a Merge");
}

static void test_mismatched_frames(void **state) {
  (void)state;
  static const spec g[] = {LOOP_NODES, {"mix", "AddV2", "body,x", NULL, false}};
  EXPECT_CORRUPT(g, "mix", "mismatched frames");
  static const spec h[] = {LOOP_NODES, {"enter2", "Enter", "body", "f", false}};
  EXPECT_CORRUPT(h, "enter2", "mismatched frames");
}

static void test_merge_unconnected(void **state) {
  (void)state;
  static const spec g[] = {{"x", "Placeholder", "", NULL, false}, {"m", "Merge", "x,missing", NULL, false}};
  EXPECT_CORRUPT(g, "m", "names no node");
  /* a loop Merge whose second input is not a NextIteration */
  static const spec h[] = {{"x", "Placeholder", "", NULL, false},
                           {"p", "Placeholder", "", NULL, false},
                           {"enter", "Enter", "x", "f", false},
                           {"enter_p", "Enter", "p", "f", true},
                           {"merge", "Merge", "enter,enter_p", NULL, false},
                           {"cond", "LoopCond", "enter_p", NULL, false}};
  EXPECT_CORRUPT(h, "merge", "no NextIteration");
}

static void test_loop_without_loop_cond(void **state) {
  (void)state;
  static const spec g[] = {{"x", "Placeholder", "", NULL, false},
                           {"enter", "Enter", "x", "f", true},
                           {"exit", "Exit", "enter", NULL, false}};
  EXPECT_CORRUPT(g, "f", "no LoopCond");
}

/* Conds the pass cannot raise: a node reading both branches, a branch reading an unguarded value. */
static void test_unraisable_conds(void **state) {
  (void)state;
  static const spec both[] = {{"x", "Placeholder", "", NULL, false},
                              {"p", "Placeholder", "", NULL, false},
                              {"sw", "Switch", "x,p", NULL, false},
                              {"both", "AddV2", "sw,sw:1", NULL, false}};
  EXPECT_ERROR(both, NB_UNIMPLEMENTED, "both", "reads both branches");
  static const spec unguarded[] = {{"x", "Placeholder", "", NULL, false}, {"p", "Placeholder", "", NULL, false},
                                   {"sw", "Switch", "x,p", NULL, false},  {"t", "AddV2", "sw:1,x", NULL, false},
                                   {"f", "Identity", "sw", NULL, false},  {"m", "Merge", "f,t", NULL, false}};
  EXPECT_ERROR(unguarded, NB_UNIMPLEMENTED, "x", "outside the branch");
}

/* ---- the writer for tf_control_flow_v1.py check ------------------------------------------- */

static int write_mode(const char *in, const char *out) {
  char err[512];
  Nbpb__GraphDef *gd = read_graph(in);
  if (!gd) return fprintf(stderr, "cannot read %s\n", in), 1;
  nb_code rc = nbio_functionalize_control_flow(gd, err, sizeof err);
  bool ok = rc == NB_OK && write_graph(gd, out);
  if (!ok) fprintf(stderr, "%s: %s\n", in, rc ? err : "cannot write the result");
  nbpb__graph_def__free_unpacked(gd, NULL);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--write") == 0) return write_mode(argv[2], argv[3]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rnn_v1),
      cmocka_unit_test(test_rnn_frozen),
      cmocka_unit_test(test_cond),
      cmocka_unit_test(test_cond_in_while),
      cmocka_unit_test(test_nested_while),
      cmocka_unit_test(test_while_in_cond),
      cmocka_unit_test(test_nested_cond),
      cmocka_unit_test(test_plain_graph_untouched),
      cmocka_unit_test(test_well_formed_loop),
      cmocka_unit_test(test_exit_without_enter),
      cmocka_unit_test(test_next_iteration_without_merge),
      cmocka_unit_test(test_mismatched_frames),
      cmocka_unit_test(test_merge_unconnected),
      cmocka_unit_test(test_loop_without_loop_cond),
      cmocka_unit_test(test_unraisable_conds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
