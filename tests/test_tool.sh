#!/bin/sh
# The `nabla` command: every subcommand's --help, usage errors (status 2), errors with a
# message naming what is wrong (status 1), and each subcommand's work.
# Usage: test_tool.sh NABLA_BINARY WORK_DIR
set -eu
nabla=$1
work=$2/test_tool
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
for cmd in info train; do
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

echo "test_tool: ok"
