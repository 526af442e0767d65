#!/bin/sh
# The layer check (scripts/check_layers.sh) can fail: on a small tree that keeps the layer
# order it passes, and each violation seeded into that tree makes it fail, naming the
# file, the line and the rule.
# Usage: check_layers_test.sh CHECK_LAYERS_SCRIPT
set -eu
check=${1:?usage: check_layers_test.sh CHECK_LAYERS_SCRIPT}
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
. "$(dirname "$0")/selftest.sh"

mkdir -p "$tree/include" "$tree/src/core" "$tree/src/ops" "$tree/src/runtime" "$tree/src/grad" "$tree/src/io/proto"
printf '/* public */\n' >"$tree/include/nabla.h"
printf '#include "nabla.h"\n' >"$tree/src/core/core.h"
printf '#include "../core/core.h"\n' >"$tree/src/ops/op.h"
printf '#include "../ops/op.h"\n#include <stdlib.h>\n' >"$tree/src/runtime/runtime.h"
printf '#include "nabla.h"\n' >"$tree/src/grad/grad.h"
printf '#include "grad.h"\n' >"$tree/src/grad/math_grad.c"
printf '#include "../grad/grad.h"\n#include "runtime.h"\n' >"$tree/src/runtime/registry.c"
printf 'syntax = "proto3";\n' >"$tree/src/io/proto/bundle.proto"
printf '#include "bundle.pb-c.h"\n#include "../ops/op.h"\n' >"$tree/src/io/reader.c"

if ! out=$(sh "$check" "$tree" 2>&1); then
  echo "FAIL: a tree in layer order was rejected: $out"
  failures=$((failures + 1))
fi

# seed FILE LINE PATTERN: FILE (relative to the tree, holding LINE) must fail the check,
# given alone and with the whole tree, with a message matching PATTERN.
seed() {
  mkdir -p "$tree/$(dirname "$1")"
  printf '/* seeded */\n%s\n' "$2" >"$tree/$1"
  for files in "$1" ""; do
    expect_rejection "$1 ($2)${files:+ given alone}" "$3" sh "$check" "$tree" $files
  done
  rm -f "$tree/$1"
}

seed src/ops/upward.c '#include "../runtime/runtime.h"' \
  'src/ops/upward.c:2: includes src/runtime/runtime.h: ops may not use runtime, a later layer'
seed src/core/upward.h '#  include "../ops/op.h"' 'src/core/upward.h:2: includes src/ops/op.h: core may not use ops'
seed src/grad/internal_grad.c '#include "../core/core.h"' \
  'src/grad/internal_grad.c:2: includes src/core/core.h: src/grad sees only nabla.h and its own headers'
seed src/core/missing.c '#include "missing.h"' 'src/core/missing.c:2: includes "missing.h", which is no file of the tree'
seed src/newlayer/x.c '#include "nabla.h"' 'src/newlayer/x.c:1: folder is not in the layer list'

if [ "$failures" -ne 0 ]; then
  echo "check_layers_test: $failures failure(s)"
  exit 1
fi
echo "check_layers_test: the check passes a tree in order and fails each seeded violation"
