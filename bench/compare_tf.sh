#!/bin/sh
# Gradient construction cost, nabla beside TensorFlow's tf.gradients on the same graphs
# (the workloads of ../shared/bench-peers/tf_grad_build.py). Needs a built tree
# (make bench) and, for the TF lines, `pip install tensorflow-cpu`.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
sizes=${SIZES:-10000 100000 1000000}
"$top/build/bench/grad_build" $sizes
peers="$top/../shared/bench-peers/tf_grad_build.py"
if python3 -c "import tensorflow" 2>/dev/null && [ -f "$peers" ]; then
  python3 "$peers" --sizes "$(echo "$sizes" | tr ' ' ',')" --runs "${RUNS:-1}" --eager-n 1000
else
  echo "# tensorflow or $peers not available: TF lines skipped" >&2
fi
