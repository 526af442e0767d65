/* An MLP (784-256-10) trained on Fashion-MNIST for one epoch in graph mode: the training
   step (forward, nb_gradients, Adam's update nodes) is built once and run per batch. */
#include <nabla.h>

#include <stdio.h>

int main(void) {
  nb_ctx *e = nb_eager_new(); /* loads the data and makes the initial values */
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_session *s = nb_session_new(g);
  nb_dataset *train = nb_fashion_mnist(e, NULL, true), *test = nb_fashion_mnist(e, NULL, false);
  const int64_t seed1[2] = {1, 1}, seed2[2] = {1, 2}; /* a random stream per weight */
  const int64_t w1[2] = {784, 256}, b1[1] = {256}, w2[2] = {256, 10}, b2[1] = {10};
  nb_variable *v[4] = {nb_variable_new(e, nb_init_glorot_uniform(e, NB_F32, 2, w1, seed1), true, "w1"),
                       nb_variable_new(e, nb_init_zeros(e, NB_F32, 1, b1), true, "b1"),
                       nb_variable_new(e, nb_init_glorot_uniform(e, NB_F32, 2, w2, seed2), true, "w2"),
                       nb_variable_new(e, nb_init_zeros(e, NB_F32, 1, b2), true, "b2")};
  nb_tensor *p[4], *grads[4], *loss, *train_op;
  for (int i = 0; i < 4; i++) p[i] = nb_variable_read(c, v[i]);
  nb_tensor *x = nb_placeholder(c, NB_F32, 2, (const int64_t[]){-1, 784}, "x");
  nb_tensor *y = nb_placeholder(c, NB_I32, 1, (const int64_t[]){-1}, "y");
  nb_tensor *h = nb_relu(c, nb_add(c, nb_matmul(c, x, p[0], false, false), p[1]));
  nb_tensor *logits = nb_add(c, nb_matmul(c, h, p[2], false, false), p[3]);
  nb_sparse_softmax_cross_entropy_with_logits(c, logits, y, &loss, NULL);
  loss = nb_mean(c, loss, NULL, 0, false);
  nb_gradients(c, &loss, 1, p, 4, NULL, grads);
  nb_optimizer *adam = nb_adam_new(1e-3, 0.9, 0.999, 1e-7);
  nb_optimizer_apply(adam, c, grads, v, 4, &train_op);
  nb_tensor *right = nb_equal(c, nb_cast(c, nb_argmax(c, logits, 1, NB_I64), NB_I32), y);
  nb_tensor *accuracy = nb_mean(c, nb_cast(c, right, NB_F32), NULL, 0, false);
  nb_code code = nb_status(c) ? nb_status(c) : nb_status(e);
  nb_dataset_shuffle(train, 1);
  for (int64_t i = 0; i + 64 <= nb_dataset_size(train) && !code; i += 64) {
    nb_tensor *feed[2] = {x, y}, *batch[2], *out;
    nb_scope_begin(e);
    code = nb_dataset_batch(e, train, i, 64, NB_IMAGES_FLAT, &batch[0], &batch[1]);
    if (!code) code = nb_run(s, feed, batch, 2, &train_op, 1, &out);
    if (!code) nb_tensor_free(out);
    nb_scope_end(e, NULL, 0);
  }
  nb_tensor *feed[2] = {x, y}, *batch[2], *acc = NULL;
  if (!code) code = nb_dataset_batch(e, test, 0, nb_dataset_size(test), NB_IMAGES_FLAT, &batch[0], &batch[1]);
  if (!code) code = nb_run(s, feed, batch, 2, &accuracy, 1, &acc);
  if (!code)
    printf("test accuracy after one epoch: %.2f%%\n", 100 * nb_item(acc, 0));
  else /* the first context that failed */
    fprintf(stderr, "error: %s\n", *nb_error(c) ? nb_error(c) : *nb_error(e) ? nb_error(e) : nb_session_error(s));
  nb_tensor_free(acc);
  nb_optimizer_free(adam);
  for (int i = 0; i < 4; i++) nb_variable_free(v[i]);
  nb_dataset_free(train);
  nb_dataset_free(test);
  nb_session_free(s);
  nb_ctx_free(c);
  nb_graph_free(g);
  nb_ctx_free(e);
  return code != NB_OK;
}
