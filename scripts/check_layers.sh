#!/bin/sh
# The layer rule of DESIGN.md ("Layers"): each folder uses only the folders listed before
# it. LAYERS below is the one place that order is written; a file of a folder not listed
# fails, so a new folder must take its place here first.
#
# A file's layer is its folder (include/, src/<layer>/, tools/). Each #include "..." must
# resolve (beside the file, then in include/, or a protoc-c header generated from
# <file's folder>/proto/*.proto) to a file of the same layer or an earlier one, except:
#   - src/grad sees only the public API: its files include only include/ and src/grad.
#   - src/grad's headers may be included from any layer: they see nothing but nabla.h,
#     so including them adds no use of a later layer (autodiff's gradient registry
#     installs the rules through src/grad/grad.h).
# System headers (#include <...>) are not checked.
#
# Usage: check_layers.sh ROOT [FILE...]
#   FILEs are paths relative to ROOT; without them every .c and .h under src/ and tools/
#   is checked. Prints each violation as "file:line: ..." and exits 1 when there is one.
set -eu

LAYERS="include core ops graph runtime autodiff grad func opt io train dist tools"

root=${1:?usage: check_layers.sh ROOT [FILE...]}
shift
cd "$root"
if [ $# -eq 0 ]; then
  for dir in src tools; do
    [ -d "$dir" ] && set -- "$@" $(find "$dir" -name '*.[ch]' | LC_ALL=C sort)
  done
fi
if [ $# -eq 0 ]; then
  echo "check_layers: no files to check under $root" >&2
  exit 1
fi

awk -v layers="$LAYERS" '
function exists(path,   line, r) {
  r = (getline line < path)
  close(path)
  return r >= 0
}
# path with "." and "dir/.." parts removed
function normal(path,   parts, n, out, k, i) {
  n = split(path, parts, "/")
  k = 0
  for (i = 1; i <= n; i++) {
    if (parts[i] == "." || parts[i] == "") continue
    if (parts[i] == ".." && k > 0 && out[k] != "..") { k--; continue }
    out[++k] = parts[i]
  }
  path = ""
  for (i = 1; i <= k; i++) path = path (i > 1 ? "/" : "") out[i]
  return path
}
function dirname(path) { return sub(/\/[^\/]*$/, "", path) ? path : "." }
function layer_of(path,   parts) {
  split(path, parts, "/")
  if (parts[1] == "include" || parts[1] == "tools") return parts[1]
  if (parts[1] == "src") return parts[2]
  return ""
}
# where #include "inc" of file finds its header; "" when nowhere
function resolve(file, inc,   here, base) {
  here = normal(dirname(file) "/" inc)
  if (exists(here)) return here
  if (exists("include/" inc)) return "include/" inc
  if (inc ~ /\.pb-c\.h$/) {
    base = inc
    sub(/\.pb-c\.h$/, "", base)
    if (exists(dirname(file) "/proto/" base ".proto")) return dirname(file) "/proto/" base ".proto"
  }
  return ""
}
function fail(msg) {
  printf "%s:%d: %s\n", FILENAME, FNR, msg
  bad++
}
BEGIN {
  n = split(layers, names, " ")
  for (i = 1; i <= n; i++) rank[names[i]] = i
}
FNR == 1 {
  own = layer_of(FILENAME)
  if (!(own in rank)) fail("folder is not in the layer list (" layers ")")
}
/^[ \t]*#[ \t]*include[ \t]*"/ {
  if (!(own in rank)) next
  inc = $0
  sub(/^[^"]*"/, "", inc)
  sub(/".*$/, "", inc)
  target = resolve(FILENAME, inc)
  if (target == "") { fail("includes \"" inc "\", which is no file of the tree"); next }
  to = layer_of(target)
  if (!(to in rank)) fail("includes " target ", outside the layers")
  else if (own == "grad" && to != "include" && to != "grad")
    fail("includes " target ": src/grad sees only nabla.h and its own headers")
  else if (to != "grad" && rank[to] > rank[own])
    fail("includes " target ": " own " may not use " to ", a later layer")
}
END {
  if (bad) {
    printf "check_layers: %d include(s) break the layer order: %s\n", bad, layers
    exit 1
  }
}
' "$@"
