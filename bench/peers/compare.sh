#!/bin/sh
# nabla's bench/ programs beside one peer on the same workloads, in the same run: for each
# BENCH, build/bench/BENCH, then bench/peers/BENCH.py --impl PEER. Needs a built tree
# (make bench, or cmake --build build --target bench_BENCH) and, for the peer's lines, the
# peer installed (bench/peers/requirements.txt); without it they are a '#' line.
# Usage: bench/peers/compare.sh torch|tf|jax BENCH...   (BENCH: eager_ops grad_build
#        eager_chain dataset conv batch_norm matmul train_step rnn checkpoint forward, or all)
# Env: BUILD (default build), SIZES (grad_build's n, default "10000 100000 1000000"),
#      QUICK=1 and PEERS_PYTHON as in bench/peers/common.sh.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/bench/peers/common.sh"
impl=$1
shift
all="eager_ops grad_build eager_chain dataset conv batch_norm matmul train_step rnn checkpoint forward"
benches=$*
[ "$benches" = all ] && benches=$all
build=${BUILD:-$top/build}
sizes=${SIZES:-10000 100000 1000000}

# nabla's side; train_step runs each configuration in a process of its own (its own peak RSS)
run_nabla() {
  bin="$build/bench/$1"
  if [ ! -x "$bin" ]; then
    echo "$bin is missing: cmake --build $build --target bench_$1" >&2
    return 1
  fi
  case $1 in
    train_step) for model in mlp lenet; do for threads in 1 2; do "$bin" "$model" all "$threads"; done; done ;;
    grad_build) "$bin" $sizes ;; # one argument per size
    *) "$bin" ;;
  esac
}

run_peer_side() {
  case $1 in
    train_step) for model in mlp lenet; do run_peer "$impl" train_step --model "$model"; done ;;
    grad_build) run_peer "$impl" grad_build --sizes "$(echo "$sizes" | tr ' ' ',')" ;;
    *) run_peer "$impl" "$1" ;;
  esac
}

have_peer=1
peer_available "$impl" || have_peer=0
for bench in $benches; do
  run_nabla "$bench"
  [ $have_peer = 1 ] && run_peer_side "$bench"
done
exit 0
