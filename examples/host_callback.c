/* A host callback (tf.py_func / tf.numpy_function in C): a graph node that loads a vector
   from a text file each time a session runs it. The node is stateful (PyFunc): the file may
   change between runs, so it is never folded. Usage: example_host_callback [file]; without
   a file it writes host_callback_data.txt itself, and rewrites it between the two runs. */
#include <nabla.h>

#include <stdio.h>
#include <stdlib.h>

/* Reads whitespace-separated numbers from the file user names into a float64 vector. */
static nb_code load_vector(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)in, (void)nin, (void)nout;
  const char *path = user;
  FILE *fp = fopen(path, "r");
  if (!fp) return nb_set_error(c, NB_NOT_FOUND, "cannot open %s", path);
  double *v = NULL, x;
  int64_t n = 0, cap = 0;
  while (fscanf(fp, "%lf", &x) == 1) {
    if (n == cap) {
      double *grown = realloc(v, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *v);
      if (!grown) break;
      v = grown;
    }
    v[n++] = x;
  }
  int bad = !feof(fp);
  fclose(fp);
  if (!bad) out[0] = nb_tensor_from(c, NB_F64, 1, &n, v); /* the node takes it over */
  free(v);
  return bad ? nb_set_error(c, NB_INVALID, "%s: not a list of numbers (or out of memory)", path) : nb_status(c);
}

static int write_numbers(const char *path, const char *text) {
  FILE *fp = fopen(path, "w");
  if (!fp) return 0;
  fputs(text, fp);
  return fclose(fp) == 0;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "host_callback_data.txt";
  if (argc <= 1 && !write_numbers(path, "1 2 3\n")) {
    fprintf(stderr, "cannot write %s\n", path);
    return 1;
  }
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_host_func *load = nb_host_func_new(load_vector, NULL, (void *)path, NULL);
  const nb_host_output vector = {NB_F64, 1, {-1}}; /* its length is known only at run time */
  nb_tensor *v = NULL;
  nb_name_next(c, "load");
  nb_py_func(c, load, true, NULL, 0, &vector, &v, 1);
  nb_host_func_release(load); /* the node keeps its own reference until the graph is freed */
  const int axis = 0;
  nb_tensor *norm2 = nb_sum(c, nb_square(c, v), &axis, 1, false);
  if (nb_status(c)) {
    fprintf(stderr, "build: %s\n", nb_error(c));
    return 1;
  }
  nb_session *s = nb_session_new(g);
  int failed = 0;
  for (int run = 0; run < 2 && !failed; run++) {
    nb_tensor *fetch[2] = {v, norm2}, *out[2];
    if (nb_run(s, NULL, NULL, 0, fetch, 2, out)) {
      fprintf(stderr, "run: %s\n", nb_session_error(s));
      failed = 1;
      break;
    }
    printf("run %d: v =", run + 1);
    for (int64_t i = 0; i < nb_num_elements(out[0]); i++) printf(" %g", nb_item(out[0], i));
    printf("; sum(v^2) = %g\n", nb_item(out[1], 0));
    nb_tensor_free(out[0]);
    nb_tensor_free(out[1]);
    if (argc <= 1 && !write_numbers(path, "4 5\n")) failed = 1; /* the next run reads the new file */
  }
  nb_session_free(s);
  nb_ctx_free(c);
  nb_graph_free(g);
  return failed;
}
