#!/bin/sh
# One training step, nabla beside PyTorch on the same workloads, in the same run:
# bench/train_step, then ../shared/bench-peers/{mlp_step,cnn_step}.py (Debian's
# python3-torch, run with /usr/bin/python3). Needs a built tree (make bench). Each nabla
# configuration runs in a process of its own so its peak RSS is its own.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
for model in mlp lenet; do
  for threads in 1 2; do
    "$top/build/bench/train_step" "$model" all "$threads"
  done
done
peers="$top/../shared/bench-peers"
if /usr/bin/python3 -c "import torch" 2>/dev/null && [ -f "$peers/mlp_step.py" ]; then
  /usr/bin/python3 "$peers/mlp_step.py" --config 784-512-512-10:128 --threads 1,2
  /usr/bin/python3 "$peers/cnn_step.py" --threads 1,2
else
  echo "# torch or $peers not available: PyTorch lines skipped" >&2
fi
