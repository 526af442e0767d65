/* libFuzzer target for the GraphDef reader (make fuzz). An input is a serialized GraphDef;
   it is imported into a graph holding one node already, which a failed import must leave
   alone (the node count is checked), and a successful one must name its variables. Seeds
   are in fuzz/corpus/graphdef (fuzz/make_corpus.py copies them from tests/golden/graphdef:
   TensorFlow's frozen and function graphs, and broken ones). */
#include <nabla.h>

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  nb_graph *g = nb_graph_new();
  nb_ctx *c = g ? nb_graph_ctx_new(g) : NULL;
  if (!c) abort();
  if (!nb_placeholder(c, NB_F32, 1, (const int64_t[]){-1}, "before")) abort();
  int before = nb_graph_num_nodes(g);
  nb_code code = nb_graph_read_graphdef_buffer(c, data, size);
  if (code != NB_OK && nb_graph_num_nodes(g) != before) abort(); /* all or nothing */
  if (code == NB_OK) {
    int n = nb_graph_variables(c, NULL, 0);
    nb_variable **vars = malloc(((size_t)n + 1) * sizeof *vars);
    if (!vars || nb_graph_variables(c, vars, n) != n) abort();
    for (int i = 0; i < n; i++)
      if (!nb_variable_name(vars[i])) abort();
    free(vars);
  }
  nb_ctx_free(c);
  nb_graph_free(g);
  return 0;
}
