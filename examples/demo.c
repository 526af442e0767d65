/* make demo: build a small function, run it eagerly, print the results.
   y = tanh(x W + b), then a row-wise mean and the arg max of each row. */
#include <nabla.h>

#include <stdio.h>

static void print_tensor(const char *name, const nb_tensor *t) {
  printf("%s shape [", name);
  for (int i = 0; i < nb_rank(t); i++) printf(i ? ",%lld" : "%lld", (long long)nb_shape(t)[i]);
  printf("]:");
  for (int64_t i = 0; i < nb_num_elements(t); i++) printf(" %.4g", nb_item(t, i));
  printf("\n");
}

int main(void) {
  nb_ctx *c = nb_eager_new();
  if (!c) return 1;
  const int64_t xs[2] = {2, 3}, ws[2] = {3, 4}, bs[1] = {4};
  const float x[6] = {1, 2, 3, -1, 0.5f, 2};
  const float w[12] = {0.1f, -0.2f, 0.3f, 0.0f, 0.5f, 0.1f, -0.4f, 0.2f, -0.3f, 0.2f, 0.1f, 0.6f};
  const float b[4] = {0.01f, 0.02f, -0.03f, 0.0f};
  nb_tensor *X = nb_tensor_from(c, NB_F32, 2, xs, x);
  nb_tensor *W = nb_tensor_from(c, NB_F32, 2, ws, w);
  nb_tensor *B = nb_tensor_from(c, NB_F32, 1, bs, b);
  nb_tensor *Y = nb_tanh(c, nb_add(c, nb_matmul(c, X, W, false, false), B));
  const int axis[1] = {1};
  nb_tensor *M = nb_mean(c, Y, axis, 1, false);
  nb_tensor *A = nb_argmax(c, Y, 1, NB_I64);
  if (nb_status(c) != NB_OK) {
    fprintf(stderr, "error: %s\n", nb_error(c));
    nb_ctx_free(c);
    return 1;
  }
  print_tensor("x", X);
  print_tensor("y = tanh(x @ W + b)", Y);
  print_tensor("mean(y, axis=1)", M);
  print_tensor("argmax(y, axis=1)", A);
  /* errors are values: a shape mismatch is reported, not fatal */
  nb_tensor *bad = nb_add(c, X, W);
  printf("x + W -> %s: %s\n", bad ? "ok" : nb_code_name(nb_status(c)), nb_error(c));
  nb_ctx_free(c);
  return 0;
}
