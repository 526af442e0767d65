#!/bin/sh
# One benchmark, this tree's build against an earlier commit's, in the same minutes: the
# earlier commit is built (Release) in a temporary worktree, then the two binaries run in
# turns, N rounds, each round in the other order than the last (so neither always runs
# on a warmer or quieter machine). A shared VM's speed moves by tens of percent between
# minutes; a ratio taken per round moves far less than either time, and its median is
# what an "x times today's time" target is checked against.
#
# Usage: bench/versus.sh [-n ROUNDS] COMMIT BENCH [ARGS...]    (after `make build`)
#   BENCH: a program of bench/ (rnn, train_step, ...), ARGS: its arguments.
# Every line both builds print with a time (ms_median=, step_ms= or ms=) gives
#   name=versus bench=BENCH line=NAME threads=T config=K:V,... base=COMMIT metric=M
#        rounds=N base_median=... new_median=... ratio_median=... ratio_min=... ratio_max=...
# A line is known by its name, its threads and its other fields with a value that is not a
# number (config: model=mlp, mode=graph, fusion=on, ...), but for those naming the kernels
# that ran (backend, kernel, conv, path), which differ between commits by design.
# ratio = this tree's time / the commit's (below 1: faster now). The environment (e.g.
# OMP_NUM_THREADS) applies to both; the commit is configured with CMake's defaults
# (Release), as `make build` configures without CMAKE_FLAGS.
set -eu
rounds=9
if [ "${1:-}" = "-n" ]; then
  rounds=${2:-}
  shift 2 || true
fi
case $rounds in
  '' | *[!0-9]* | 0) echo "versus: -n takes a positive count of rounds" >&2; exit 2 ;;
esac
[ $# -ge 2 ] || { echo "usage: bench/versus.sh [-n ROUNDS] COMMIT BENCH [ARGS...]" >&2; exit 2; }
base=$1 bench=$2
shift 2
top=$(cd "$(dirname "$0")/.." && pwd)
new="$top/build/bench/$bench"
[ -x "$new" ] || { echo "versus: $new is not built (make build)" >&2; exit 2; }
rev=$(git -C "$top" rev-parse --short "$base^{commit}")
work=$(mktemp -d)
cleanup() {
  git -C "$top" worktree remove --force "$work/src" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
git -C "$top" worktree add --detach "$work/src" "$rev" >/dev/null 2>&1
cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" -j "$(nproc)" --target "bench_$bench" >/dev/null
old="$work/build/bench/$bench"

# One run's timing lines as "KEY METRIC VALUE", KEY = name@threads@config; a run that fails
# or prints no timing line stops the comparison.
timing_lines() {
  "$@" 2>"$work/stderr" >"$work/out" || { echo "versus: $* failed: $(tail -n 3 "$work/stderr")" >&2; exit 1; }
  awk '/^name=/ {
    name = ""; threads = "-"; metric = ""; value = ""; config = ""
    for (i = 1; i <= NF; i++) {
      eq = index($i, "="); if (eq == 0) continue
      k = substr($i, 1, eq - 1); v = substr($i, eq + 1)
      if (k == "name") name = v
      else if (k == "threads") threads = v
      else if (metric == "" && (k == "ms_median" || k == "step_ms" || k == "ms")) { metric = k; value = v }
      else if (v !~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/ && k != "backend" && k != "kernel" && k != "conv" && k != "path")
        config = config (config == "" ? "" : ",") k ":" v
    }
    if (metric != "") print name "@" threads "@" (config == "" ? "-" : config), metric, value
  }' "$work/out" >"$work/lines"
  [ -s "$work/lines" ] || { echo "versus: $* printed no timing line" >&2; exit 1; }
  cat "$work/lines"
}

# Round ROUND's timing lines of one binary, tagged base or new, appended to $work/times.
run_tagged() {
  round=$1 tag=$2
  shift 2
  timing_lines "$@" >"$work/tagged"
  sed "s/^/$round $tag /" "$work/tagged" >>"$work/times"
}

r=0
while [ "$r" -lt "$rounds" ]; do
  if [ $((r % 2)) -eq 0 ]; then
    run_tagged "$r" base "$old" "$@"
    run_tagged "$r" new "$new" "$@"
  else
    run_tagged "$r" new "$new" "$@"
    run_tagged "$r" base "$old" "$@"
  fi
  r=$((r + 1))
done

# Medians per line; ratios per round. A line printed several times in a run (the same
# name and threads) keeps its first value.
awk -v bench="$bench" -v rev="$rev" -v rounds="$rounds" '
  function median(a, n,    i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  !(($1, $2, $3) in seen) {
    seen[$1, $2, $3] = 1
    value[$1, $2, $3] = $5
    metric[$3] = $4
    if (!($3 in order)) { order[$3] = ++nkeys; keys[nkeys] = $3 }
  }
  END {
    for (k = 1; k <= nkeys; k++) {
      key = keys[k]; n = 0
      for (r = 0; r < rounds; r++) {
        if (!((r, "base", key) in value) || !((r, "new", key) in value)) continue
        n++
        b[n] = value[r, "base", key]; w[n] = value[r, "new", key]; q[n] = w[n] / b[n]
        lo = n == 1 || q[n] < lo ? q[n] : lo; hi = n == 1 || q[n] > hi ? q[n] : hi
      }
      if (n == 0) continue
      split(key, part, "@")
      printf "name=versus bench=%s line=%s threads=%s config=%s base=%s metric=%s rounds=%d base_median=%.2f new_median=%.2f ratio_median=%.3f ratio_min=%.3f ratio_max=%.3f\n",
             bench, part[1], part[2], part[3], rev, metric[key], n, median(b, n), median(w, n), median(q, n), lo, hi
    }
  }' "$work/times"
