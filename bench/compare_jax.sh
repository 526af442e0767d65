#!/bin/sh
# nabla beside JAX on the same workloads, in the same run (bench/peers/compare.sh): by
# default one training step (bench/train_step, bench/peers/train_step.py: JAX eager and
# jit); name other bench programs, or all, as arguments. JAX: bench/peers/requirements.txt.
exec "$(dirname "$0")/peers/compare.sh" jax "${@:-train_step}"
