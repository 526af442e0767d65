#!/bin/sh
# nabla beside PyTorch on the same workloads, in the same run (bench/peers/compare.sh):
# by default one training step (bench/train_step, bench/peers/train_step.py); name other
# bench programs, or all, as arguments. PyTorch: bench/peers/requirements.txt.
exec "$(dirname "$0")/peers/compare.sh" torch "${@:-train_step}"
