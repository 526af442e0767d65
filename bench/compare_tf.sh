#!/bin/sh
# nabla beside TensorFlow on the same workloads, in the same run (bench/peers/compare.sh):
# by default gradient construction (bench/grad_build beside tf.gradients on the same
# graphs, SIZES="10000 100000 1000000"); name other bench programs, or all, as arguments.
# TensorFlow: bench/peers/requirements.txt.
exec "$(dirname "$0")/peers/compare.sh" tf "${@:-grad_build}"
