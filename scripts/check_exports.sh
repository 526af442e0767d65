#!/bin/sh
# The naming rule of DESIGN.md: nb_ names the public API only; internals carry their
# module's prefix or are static. Every global symbol a library object defines must be
#   - nb_*: declared in include/nabla.h (in its code, not only in a comment), or
#   - the prefix of the src/ folder its object was compiled from (PREFIXES below, the one
#     place the table is written), or, for an object of no src/ file (generated protobuf
#     code), one of the prefixes of GENERATED.
#
# Usage: check_exports.sh ROOT LIBRARY_OR_OBJECT...
#   ROOT holds include/nabla.h and src/. $NM names the nm to use (default nm). Prints each
#   violation as "object: symbol: ..." and exits 1 when there is one.
set -eu

PREFIXES="core:nbcore ops:nbop graph:nbgraph runtime:nbrt autodiff:nbad grad:nbg func:nbfunc opt:nbopt io:nbio train:nbtrain dist:nbdist"
GENERATED="nbpb"

root=${1:?usage: check_exports.sh ROOT LIBRARY_OR_OBJECT...}
shift
[ $# -gt 0 ] || { echo "check_exports: no library given" >&2; exit 1; }
header="$root/include/nabla.h"
[ -f "$header" ] || { echo "check_exports: no $header" >&2; exit 1; }
sources=$(cd "$root" && find src -name '*.c' 2>/dev/null | LC_ALL=C sort)

symbols=$(${NM:-nm} -A -g --defined-only "$@")
[ -n "$symbols" ] || { echo "check_exports: $* define no global symbol" >&2; exit 1; }

printf '%s\n' "$symbols" | awk -v header="$header" -v sources="$sources" -v prefixes="$PREFIXES" \
  -v generated="$GENERATED" '
BEGIN {
  # identifiers of the header code, comments removed
  text = ""
  while ((getline line < header) > 0) text = text line "\n"
  close(header)
  while ((i = index(text, "/*")) > 0) {
    rest = substr(text, i + 2)
    j = index(rest, "*/")
    text = substr(text, 1, i - 1) " " (j ? substr(rest, j + 2) : "")
  }
  gsub(/\/\/[^\n]*/, " ", text)
  n = split(text, words, /[^A-Za-z0-9_]+/)
  for (i = 1; i <= n; i++) public[words[i]] = 1
  n = split(prefixes, pairs, " ")
  for (i = 1; i <= n; i++) {
    split(pairs[i], kv, ":")
    prefix_of[kv[1]] = kv[2]
    known[kv[2]] = 1
  }
  n = split(generated, gen, " ")
  for (i = 1; i <= n; i++) known[gen[i]] = generated_prefix[gen[i]] = 1
  n = split(sources, files, "\n")
  for (i = 1; i <= n; i++) {
    m = split(files[i], parts, "/")
    base = parts[m] ".o"
    if ((base in folder_of) && folder_of[base] != parts[2]) shared_name[base] = 1
    folder_of[base] = parts[2]
  }
}
function fail(msg) {
  printf "%s: %s: %s\n", object, sym, msg
  bad++
}
# nm -A: "lib.a:object.o:address T name", or "object.o:address T name" for an object given alone
NF >= 2 && $(NF - 1) ~ /^[A-Z]$/ {
  sym = $NF
  # A name with a dot is no C identifier but one the compiler made: clang makes each
  # target_clones function (static ones too) a global "name.resolver" for its ifunc.
  if (sym ~ /\./) next
  object = $1
  sub(/:[^:]*$/, "", object)
  base = object
  sub(/^.*:/, "", base)
  sub(/^.*\//, "", base)
  folder = (base in folder_of) ? folder_of[base] : ""
  if (sym ~ /^nb_/) {
    if (!(sym in public)) fail("exported with nb_ but not declared in include/nabla.h: give it its module prefix or make it static")
    next
  }
  prefix = sym
  sub(/_.*$/, "", prefix)
  if (base in shared_name) {
    # files of one name in two folders: the object does not say which
    if (!(prefix in known) || (prefix in generated_prefix)) fail("an internal symbol must start with a module prefix (or be static)")
  } else if (folder != "" && (folder in prefix_of)) {
    if (prefix != prefix_of[folder]) fail("an internal symbol of src/" folder " must start with " prefix_of[folder] "_ (or be static)")
  } else if (folder != "") {
    fail("src/" folder " has no module prefix in check_exports.sh")
  } else if (!(prefix in generated_prefix)) {
    fail("an internal symbol must start with a module prefix (or be static)")
  }
}
END {
  if (bad) {
    printf "check_exports: %d symbol(s) break the naming rule (nb_ is the public API of include/nabla.h)\n", bad
    exit 1
  }
}
'
