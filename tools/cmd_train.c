/* nabla train: the demo's CNN on Fashion-MNIST (cnn_trainer.h). */
#include "cnn_trainer.h"
#include "tool.h"

static int train_main(int argc, char **argv) {
  cnn_options opt;
  if (!cnn_parse_options(argc - 1, argv + 1, NULL, &opt))
    return tool_usage_error(&tool_train, "flags come in pairs --flag VALUE; numbers must be positive");
  return cnn_train("nabla train", &opt) ? TOOL_OK : TOOL_ERROR;
}

const tool_cmd tool_train = {
    "train", "trains the demo's CNN on Fashion-MNIST, saving and restoring TF checkpoints",
    CNN_FLAGS_USAGE
    "\n"
    "  --epochs N         epochs to train (default 6; after --restore: more epochs)\n"
    "  --batch N          batch size (default 64)\n"
    "  --threads N        threads (default: every core)\n"
    "  --mode graph|eager a session running one built step, or a tape per step (default graph)\n"
    "  --lr X             Adam's learning rate (default 0.001)\n"
    "  --data DIR         the Fashion-MNIST IDX files (default " NB_FASHION_MNIST_DIR
    ")\n"
    "  --save PREFIX      writes PREFIX.index and PREFIX.data-00000-of-00001 at the end\n"
    "  --restore PREFIX   starts from that checkpoint (weights, Adam's slots, step count)\n",
    train_main};
