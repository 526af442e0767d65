/* The demo's job, shared by examples/demo.c (`make demo`) and `nabla train`: a small CNN
   trained on Fashion-MNIST (Debian's dataset-fashion-mnist), its test accuracy reported,
   its weights and Adam's state saved as a TensorFlow checkpoint.

   The model: conv 3x3x16 (SAME) + ReLU, 2x2 max pool, conv 3x3x32 (SAME) + ReLU, 2x2 max
   pool, dense 128 + ReLU, dense 10; softmax cross-entropy, Adam. Graph mode builds the
   training step once (forward, nb_gradients, the optimizer's update nodes) and runs it per
   batch in a session; eager mode records each step on a tape.

   The checkpoint (PREFIX.index and PREFIX.data-00000-of-00001) holds the weights under
   Keras' layer/variable names, Adam's slots and its step counter. Restoring one trains
   --epochs more, continuing the epoch count (and so the shuffles) where it stopped.

   --data-parallel, under mpirun -np N: each rank trains on its shard of every epoch
   (batch per rank, so N x batch per step), the gradients averaged across the ranks as the
   backward pass produces them (nb_dist_gradient_vars; graph mode: nb_dist_average_gradients);
   rank 0's initial values are broadcast first, and rank 0 alone reports and saves the
   checkpoint (docs/distributed.md). */
#ifndef CNN_TRAINER_H
#define CNN_TRAINER_H

#include <stdbool.h>
#include <stdio.h>

typedef struct cnn_options {
  int epochs, batch, threads;
  bool eager;
  double lr;
  const char *data;           /* NULL: NB_FASHION_MNIST_DIR */
  const char *save, *restore; /* checkpoint prefixes; NULL: none */
  bool data_parallel;         /* under mpirun: shard, average gradients, rank 0 reports */
} cnn_options;

/* The flags cnn_parse_options takes, for usage messages. */
#define CNN_FLAGS_USAGE                                                                 \
  "[--epochs N] [--batch N] [--threads N] [--mode graph|eager] [--lr X] [--data DIR]\n" \
  "        [--save PREFIX] [--restore PREFIX] [--data-parallel]"

/* Defaults (6 epochs, batch 64, every core, graph mode, lr 1e-3, save to save), then the
   flag/value pairs of args[0..n); false on an unknown flag, a missing or bad value. */
bool cnn_parse_options(int n, char **args, const char *save, cnn_options *o);

/* Trains as o says, then evaluates and saves: progress to stderr, results to stdout,
   errors to stderr prefixed with prog. True when every step worked. */
bool cnn_train(const char *prog, const cnn_options *o);

#endif
