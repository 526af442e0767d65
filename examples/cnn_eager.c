/* A CNN (conv 3x3x8 + ReLU + 2x2 max pool, dense 10) trained on Fashion-MNIST for one
   epoch, eagerly: a tape per step, gradients of the variables, Adam. */
#include <nabla.h>

#include <stdio.h>

static nb_tensor *logits_of(nb_ctx *c, nb_variable **v, nb_tensor *images) {
  static const int64_t ones[4] = {1, 1, 1, 1}, window[4] = {1, 2, 2, 1};
  nb_conv2d_attrs conv = {.strides = ones, .padding = "SAME"};
  nb_pool_attrs pool = {.ksize = window, .strides = window, .padding = "VALID"};
  nb_tensor *h =
      nb_bias_add(c, nb_conv2d(c, images, nb_variable_read(c, v[0]), &conv), nb_variable_read(c, v[1]), NULL);
  h = nb_reshape(c, nb_max_pool(c, nb_relu(c, h), &pool), (const int64_t[]){-1, 14 * 14 * 8}, 2);
  return nb_bias_add(c, nb_matmul(c, h, nb_variable_read(c, v[2]), false, false), nb_variable_read(c, v[3]), NULL);
}

int main(void) {
  nb_ctx *c = nb_eager_new();
  nb_dataset *train = nb_fashion_mnist(c, NULL, true), *test = nb_fashion_mnist(c, NULL, false);
  const int64_t seed1[2] = {1, 1}, seed2[2] = {1, 2}; /* a random stream per weight */
  const int64_t k[4] = {3, 3, 1, 8}, kb[1] = {8}, w[2] = {14 * 14 * 8, 10}, wb[1] = {10};
  nb_variable *v[4] = {nb_variable_new(c, nb_init_glorot_uniform(c, NB_F32, 4, k, seed1), true, "kernel"),
                       nb_variable_new(c, nb_init_zeros(c, NB_F32, 1, kb), true, "kernel_bias"),
                       nb_variable_new(c, nb_init_glorot_uniform(c, NB_F32, 2, w, seed2), true, "dense"),
                       nb_variable_new(c, nb_init_zeros(c, NB_F32, 1, wb), true, "dense_bias")};
  nb_optimizer *adam = nb_adam_new(1e-3, 0.9, 0.999, 1e-7);
  nb_dataset_shuffle(train, 1);
  for (int64_t i = 0; i + 64 <= nb_dataset_size(train) && nb_status(c) == NB_OK; i += 64) {
    nb_tensor *x, *y, *loss, *grads[4];
    nb_scope_begin(c);
    nb_dataset_batch(c, train, i, 64, NB_IMAGES_NHWC, &x, &y);
    nb_scope_begin(c); /* ended before the update, so the variables update in place */
    nb_tape *tape = nb_tape_begin(c, 0);
    nb_sparse_softmax_cross_entropy_with_logits(c, logits_of(c, v, x), y, &loss, NULL);
    loss = nb_mean(c, loss, NULL, 0, false);
    nb_tape_gradient_vars(tape, &loss, 1, v, 4, grads);
    nb_tape_end(tape);
    nb_scope_end(c, grads, 4);
    nb_optimizer_apply(adam, c, grads, v, 4, NULL);
    nb_scope_end(c, NULL, 0);
  }
  nb_tensor *x, *y;
  nb_dataset_batch(c, test, 0, nb_dataset_size(test), NB_IMAGES_NHWC, &x, &y);
  nb_tensor *right = nb_equal(c, nb_cast(c, nb_argmax(c, logits_of(c, v, x), 1, NB_I64), NB_I32), y);
  nb_tensor *accuracy = nb_mean(c, nb_cast(c, right, NB_F32), NULL, 0, false);
  if (nb_status(c) == NB_OK)
    printf("test accuracy after one epoch: %.2f%%\n", 100 * nb_item(accuracy, 0));
  else
    fprintf(stderr, "error: %s\n", nb_error(c));
  int failed = nb_status(c) != NB_OK;
  nb_optimizer_free(adam);
  for (int i = 0; i < 4; i++) nb_variable_free(v[i]);
  nb_dataset_free(train);
  nb_dataset_free(test);
  nb_ctx_free(c);
  return failed;
}
