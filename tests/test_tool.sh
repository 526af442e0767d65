#!/bin/sh
# The `nabla` command: every subcommand's --help, usage errors (status 2), errors with a
# message naming what is wrong (status 1), and each subcommand's work.
# Usage: test_tool.sh NABLA_BINARY WORK_DIR GOLDEN_DIR (tests/golden)
set -eu
nabla=$1
work=$2/test_tool
tool=$3/tool             # a TF-made GraphDef and feeds (tests/golden/make_tool_graph.py)
saved=$3/saved_model     # TF-made SavedModels (tests/golden/tf_saved_model.py)
rm -rf "$work"
mkdir -p "$work"
out=$work/out
err=$work/err

fail() {
  echo "test_tool: $*" >&2
  [ -f "$out" ] && sed 's/^/  stdout: /' "$out" >&2
  [ -f "$err" ] && sed 's/^/  stderr: /' "$err" >&2
  exit 1
}
# expect STATUS CMD...: runs CMD with stdout in $out and stderr in $err; its status must be STATUS
expect() {
  want=$1
  shift
  set +e
  "$@" > "$out" 2> "$err"
  got=$?
  set -e
  [ "$got" -eq "$want" ] || fail "'$*' exited $got, expected $want"
}
# has FILE PATTERN: FILE has a line matching the grep pattern
has() { grep -q -- "$2" "$1" || fail "no line matching '$2'"; }

# ---- the command and its help
expect 2 "$nabla"
has "$err" "usage: nabla COMMAND"
expect 0 "$nabla" --help
has "$out" "^  train "
expect 2 "$nabla" frobnicate
has "$err" "unknown command 'frobnicate'"
for cmd in info run grad dot gradcheck train; do
  expect 0 "$nabla" "$cmd" --help
  has "$out" "^usage: nabla $cmd "
done

# ---- info --build
expect 0 "$nabla" info --build
has "$out" "^nabla [0-9]*\.[0-9]*\.[0-9]*; compiler "
expect 2 "$nabla" info
expect 2 "$nabla" info a b
expect 2 "$nabla" info --frob
has "$err" "unknown flag '--frob'"
expect 1 "$nabla" info "$work/nothing"
has "$err" "$work/nothing"

# ---- train on a tiny Fashion-MNIST look-alike (64 blank images, labels 0..9), saved,
# inspected, restored
data=$work/data
mkdir -p "$data"
idx_images() { # IDX ubyte [64, 28, 28]
  printf '\000\000\010\003\000\000\000\100\000\000\000\034\000\000\000\034'
  head -c 50176 /dev/zero
}
idx_labels() { # IDX ubyte [64]: 0 1 ... 9 0 1 ...
  printf '\000\000\010\001\000\000\000\100'
  i=0
  while [ $i -lt 64 ]; do
    printf "\\$(printf %03o $((i % 10)))"
    i=$((i + 1))
  done
}
for split in train t10k; do
  idx_images > "$data/$split-images-idx3-ubyte.gz" # raw IDX: the reader tells by content
  idx_labels > "$data/$split-labels-idx1-ubyte.gz"
done
expect 0 "$nabla" train --data "$data" --epochs 1 --batch 16 --threads 1 --save "$work/cnn"
has "$out" "test accuracy"
has "$out" "checkpoint saved to $work/cnn.index"
expect 0 "$nabla" info "$work/cnn"
has "$out" "^checkpoint $work/cnn: 25 tensors"
has "$out" "^  conv1/kernel  *float32 \[3,3,1,16\]$"
has "$out" "^  optimizer/iterations  *int64 \[\]$"
expect 0 "$nabla" info "$work/cnn.index"
has "$out" "dense2/bias/v  *float32 \[10\]$"
expect 0 "$nabla" train --data "$data" --epochs 1 --batch 16 --threads 1 --mode eager --restore "$work/cnn"
has "$out" "restored $work/cnn: 4 steps, continuing at epoch 2"
expect 2 "$nabla" train --epochs
expect 2 "$nabla" train --epochs 0
expect 2 "$nabla" train --frob 1
expect 1 "$nabla" train --data "$data" --restore "$work/missing"
has "$err" "$work/missing"
expect 1 "$nabla" train --data "$work/nodata"
has "$err" "$work/nodata"

# ---- a GraphDef: info, run, grad (its graph run again), dot, gradcheck
g=$tool/tanh.pb
feeds="--feed x=$tool/x.npy --feed w=$tool/w.npy"
expect 0 "$nabla" info "$g"
has "$out" "^graphdef $g: [0-9]* nodes"
has "$out" "^  Placeholder  *3$"
has "$out" "^  x:0  *float64 \[?,3\]$"
has "$out" "^  loss:0  *float64 \[\]$"
has "$out" "^variables (0):"
expect 0 "$nabla" run "$g" $feeds --fetch y --fetch loss:0 -o "$work"
has "$out" "^$work/y.npy: float64 \[2,2\]$"
has "$out" "^$work/loss_0.npy: float64 \[\]$"
[ -s "$work/y.npy" ] && [ -s "$work/loss_0.npy" ] || fail "run wrote no .npy files"
expect 2 "$nabla" run "$g" --feed x --fetch y
has "$err" "NAME=FILE.npy"
expect 2 "$nabla" run "$g" $feeds
has "$err" "needs at least one --fetch"
expect 2 "$nabla" run "$g" "$g" --fetch y
expect 2 "$nabla" run "$g" --fetch
expect 1 "$nabla" run "$g" $feeds --fetch nosuch
has "$err" "nosuch"
expect 1 "$nabla" run "$g" --feed x="$work/missing.npy" --fetch y
has "$err" "$work/missing.npy"
expect 1 "$nabla" run "$g" --feed x="$tool/x.npy" --fetch y
has "$err" "'w'"
expect 1 "$nabla" run "$g" --feed x="$tool/w.npy" --feed w="$tool/w.npy" --fetch y
has "$err" "x"
expect 1 "$nabla" run "$work/missing.pb" --fetch y
has "$err" "$work/missing.pb"
expect 1 "$nabla" run "$tool/x.npy" --fetch y
has "$err" "x.npy"

expect 0 "$nabla" grad "$g" --ys loss --xs x,w -o "$work/grad.pb"
has "$out" "^  x:0  gradients/"
dx=$(awk '$1 == "x:0" { print $2 }' "$out")
dw=$(awk '$1 == "w:0" { print $2 }' "$out")
expect 0 "$nabla" run "$work/grad.pb" $feeds --fetch "$dx" --fetch "$dw" -o "$work"
has "$out" "float64 \[2,3\]$"
has "$out" "float64 \[3,2\]$"
expect 0 "$nabla" grad "$g" --ys y --xs w --grad-ys dy -o "$work/grad_dy.pb"
expect 0 "$nabla" grad "$g" --ys y --xs dy -o "$work/unconnected.pb"
has "$out" "dy:0  (not connected"
expect 2 "$nabla" grad "$g" --xs w -o "$work/grad.pb"
has "$err" "needs --ys"
expect 2 "$nabla" grad "$g" --ys y --xs w
has "$err" "needs -o"
expect 2 "$nabla" grad "$g" --ys y, --xs w -o "$work/grad.pb"
expect 2 "$nabla" grad "$g" --ys y --ys loss --xs w -o "$work/grad.pb"
has "$err" "given twice"
expect 1 "$nabla" grad "$g" --ys nosuch --xs w -o "$work/grad.pb"
has "$err" "nosuch"
expect 1 "$nabla" grad "$g" --ys y --xs w --grad-ys dy,dy -o "$work/grad.pb"
has "$err" "2 tensors for 1 --ys"
expect 1 "$nabla" grad "$g" --ys y --xs w -o "$work/nodir/grad.pb"
has "$err" "$work/nodir/grad.pb"

expect 0 "$nabla" dot "$g" -o "$work/tanh.dot"
has "$work/tanh.dot" "digraph"
expect 0 "$nabla" dot "$g"
has "$out" "digraph"
expect 1 "$nabla" dot "$g" -o "$work/nodir/tanh.dot"
has "$err" "$work/nodir/tanh.dot"
expect 2 "$nabla" dot
has "$err" "needs a GRAPH"

expect 0 "$nabla" gradcheck "$g" --ys loss --xs x,w $feeds --tol 1e-6
has "$out" "max |numeric - symbolic| = "
expect 1 "$nabla" gradcheck "$g" --ys loss --xs x,w $feeds --tol 0
has "$err" "above --tol 0"
expect 1 "$nabla" gradcheck "$g" --ys loss --xs x,w --feed x="$tool/x.npy"
has "$err" "w:0 has no --feed"
expect 1 "$nabla" gradcheck "$g" --ys loss --xs x $feeds
has "$err" "not one of the --xs"
expect 2 "$nabla" gradcheck "$g" --ys y,loss --xs x $feeds
expect 2 "$nabla" gradcheck "$g" --ys loss --xs x $feeds --tol abc
has "$err" "--tol takes a number"

# ---- a SavedModel: its signatures and variables
expect 0 "$nabla" info "$saved/mlp_export"
has "$out" "^saved model $saved/mlp_export (tags serve): 2 signatures, 4 variables$"
has "$out" "^signature serving_default (tensorflow/serving/predict):$"
has "$out" "^  input  x  *serving_default_x:0  *float32 \[?,4\]$"
has "$out" "^  output output_0  *StatefulPartitionedCall_1:0  *float32 \[?,3\]$"
has "$out" "^  variables/0/.ATTRIBUTES/VARIABLE_VALUE  *[^ ]*  *float32 \[4,8\]$"
expect 1 "$nabla" info "$saved/mlp_export" --tags serve,gpu
has "$err" "no MetaGraphDef tagged 'serve,gpu'"
expect 2 "$nabla" info "$g" --tags serve
has "$err" "--tags is for SavedModels"
expect 1 "$nabla" info "$work"
has "$err" "$work/saved_model.pb"

echo "test_tool: ok"
