/* make demo: trains a small CNN on Fashion-MNIST (Debian's dataset-fashion-mnist) and
   reports its test accuracy. A live progress bar goes to stderr, results to stdout.

     demo [--epochs N] [--batch N] [--threads N] [--mode graph|eager] [--lr X] [--data DIR]
          [--save PREFIX] [--restore PREFIX] [--data-parallel]

   The model and its training loop are tools/cnn_trainer.c, which `nabla train` runs too:
   conv 3x3x16 (SAME) + ReLU, 2x2 max pool, conv 3x3x32 (SAME) + ReLU, 2x2 max pool, dense
   128 + ReLU, dense 10; softmax cross-entropy, Adam, in graph mode (the step built once with
   nb_gradients and the optimizer's update nodes, run per batch in a session) or eager mode
   (each step recorded on a tape).

   At the end the weights, Adam's slots and its step counter are saved as a TensorFlow
   checkpoint (PREFIX.index and PREFIX.data-00000-of-00001; --save, default demo-cnn).
   --restore PREFIX starts from a saved checkpoint and trains --epochs more, continuing the
   epoch count (and so the shuffles) where the saved run stopped. --data-parallel, under
   mpirun -np N, trains on N ranks (docs/distributed.md). */
#include "../tools/cnn_trainer.h"

int main(int argc, char **argv) {
  cnn_options opt;
  if (!cnn_parse_options(argc - 1, argv + 1, "demo-cnn", &opt)) {
    fprintf(stderr, "usage: demo " CNN_FLAGS_USAGE "\n");
    return 2;
  }
  return cnn_train("demo", &opt) ? 0 : 1;
}
