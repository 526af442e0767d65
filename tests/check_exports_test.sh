#!/bin/sh
# The export check (scripts/check_exports.sh) can fail: on a small tree whose objects keep
# the naming rule it passes, and each violation seeded into that tree (an undeclared nb_
# function or variable, one named only in a comment, another folder's prefix, no prefix)
# makes it fail, naming the object, the symbol and the rule; given objects and an archive.
# Usage: check_exports_test.sh CHECK_EXPORTS_SCRIPT CC [AR]
set -eu
check=${1:?usage: check_exports_test.sh CHECK_EXPORTS_SCRIPT CC [AR]}
cc=${2:?usage: check_exports_test.sh CHECK_EXPORTS_SCRIPT CC [AR]}
ar=${3:-ar}
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
. "$(dirname "$0")/selftest.sh"

mkdir -p "$tree/include" "$tree/src/core" "$tree/src/ops" "$tree/obj"
printf 'int nb_pub(void); // nb_line_comment\n/* nb_commented\n   more */ extern int nb_count;\n' >"$tree/include/nabla.h"

# compile FILE CODE: FILE (relative to the tree) holding CODE, compiled to obj/<name>.o
compile() {
  mkdir -p "$tree/$(dirname "$1")"
  printf '%s\n' "$2" >"$tree/$1"
  "$cc" -c "$tree/$1" -o "$tree/obj/$(basename "$1").o"
}
compile src/core/good.c 'int nb_pub(void) { return 0; }
int nb_count = 1;
static int nb_local(void) { return 2; }
int nbcore_helper(void) { return nb_local(); }'
compile src/ops/kernel.c 'int nbop_kernel(int x) { return x; }'
compile bundle.pb-c.c 'int nbpb_pack(void) { return 3; }'
"$ar" rc "$tree/obj/lib.a" "$tree/obj/good.c.o" "$tree/obj/kernel.c.o" "$tree/obj/bundle.pb-c.c.o"

for lib in "$tree/obj/lib.a" "$tree"/obj/*.o; do
  if ! out=$(sh "$check" "$tree" "$lib" 2>&1); then
    echo "FAIL: $lib keeps the rule but was rejected: $out"
    failures=$((failures + 1))
  fi
done

# seed FILE CODE PATTERN: the object of FILE (CODE), given alone and in an archive with the
# good objects, must fail the check with a message matching PATTERN.
seed() {
  compile "$1" "$2"
  obj="$tree/obj/$(basename "$1").o"
  cp "$tree/obj/lib.a" "$tree/seeded.a"
  "$ar" rc "$tree/seeded.a" "$obj"
  for lib in "$obj" "$tree/seeded.a"; do
    expect_rejection "$1 ($2) in $(basename "$lib")" "$3" sh "$check" "$tree" "$lib"
  done
  rm -f "$tree/$1" "$obj" "$tree/seeded.a"
}

seed src/core/hidden.c 'int nb_hidden(void) { return 4; }' \
  'hidden.c.o: nb_hidden: exported with nb_ but not declared in include/nabla.h'
seed src/core/comment.c 'int nb_commented(void) { return 5; }' 'comment.c.o: nb_commented: exported with nb_ but not declared'
seed src/core/line.c 'int nb_line_comment(void) { return 5; }' 'line.c.o: nb_line_comment: exported with nb_ but not declared'
seed src/core/data.c 'int nb_state = 6;' 'data.c.o: nb_state: exported with nb_ but not declared'
seed src/ops/moved.c 'int nbcore_moved(void) { return 7; }' \
  'moved.c.o: nbcore_moved: an internal symbol of src/ops must start with nbop_'
seed src/core/bare.c 'int helper(void) { return 8; }' 'bare.c.o: helper: an internal symbol of src/core must start with nbcore_'
seed generated.c 'int stray(void) { return 9; }' 'generated.c.o: stray: an internal symbol must start with a module prefix'

if [ "$failures" -ne 0 ]; then
  echo "check_exports_test: $failures failure(s)"
  exit 1
fi
echo "check_exports_test: the check passes objects that keep the naming rule and fails each seeded violation"
