#!/bin/sh
# Every peer benchmark of bench/peers for the given peers (default: torch tf jax), one
# bench/ workload after another; a peer whose package is missing gets a '#' line instead.
# Usage: bench/peers/run_all.sh [torch] [tf] [jax]
#   QUICK=1: a few short runs per script (checks that they work); PEERS_PYTHON: see common.sh
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/bench/peers/common.sh"
[ $# -gt 0 ] || set -- torch tf jax
for impl in "$@"; do
  peer_available "$impl" || continue
  for bench in eager_ops grad_build eager_chain dataset conv batch_norm matmul train_step rnn checkpoint formats forward; do
    run_peer "$impl" "$bench"
  done
done
