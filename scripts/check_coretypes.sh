#!/bin/sh
# Runs the numeric tests (CTest label "numeric") of an existing build under each given
# OpenBLAS core type, on one core and on two (taskset: nabla's default thread count is the
# cores it may use, and its tests compare 1 thread with 2 where there are 2).
#     scripts/check_coretypes.sh BUILD_DIR CORETYPE...
# OPENBLAS_CORETYPE is set explicitly for every run, whatever the environment holds, and
# the thread-count variables are cleared. A core type whose instructions this CPU lacks
# would die of SIGILL (OpenBLAS 0.3.21 does not check), so it is skipped with a line
# saying so; a core type OpenBLAS does not know fails. Exits non-zero when a run fails or
# when no core type could run here.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 BUILD_DIR CORETYPE..." >&2; exit 2; }
build=$1
shift
probe=$build/tests/test_header_cxx
[ -x "$probe" ] || { echo "check-coretypes: $probe is missing; build first" >&2; exit 2; }

# The /proc/cpuinfo flags a core type's kernels need.
needed_flags() {
  case $1 in
    Haswell | Zen) echo "avx2 fma" ;;
    SkylakeX) echo "avx512f avx512cd avx512bw avx512dq avx512vl" ;;
    Cooperlake | SapphireRapids) echo "avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16" ;;
    Sandybridge) echo "avx" ;;
    *) return 1 ;;
  esac
}

# The first n CPUs this process may run on, comma-separated (fewer when there are fewer).
first_cpus() {
  awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status | tr ',' '\n' |
    awk -F- '{ if (NF == 2) { for (i = $1; i <= $2; i++) print i } else print $1 }' | head -n "$1" | paste -sd, -
}

cpu_flags=" $(awk -F: '/^flags/ {print $2; exit}' /proc/cpuinfo) "
inherited=$(env | grep '^OPENBLAS_' | tr '\n' ' ' || true)
[ -z "$inherited" ] || echo "check-coretypes: environment has $inherited(OPENBLAS_CORETYPE is overridden per run)"
ran="" skipped="" failed=""
for core in "$@"; do
  if ! flags=$(needed_flags "$core"); then
    echo "check-coretypes: $core: unknown core type (known: Haswell Zen SkylakeX Cooperlake SapphireRapids Sandybridge)" >&2
    failed="$failed $core"
    continue
  fi
  missing=""
  for f in $flags; do
    case $cpu_flags in *" $f "*) ;; *) missing="$missing $f" ;; esac
  done
  if [ -n "$missing" ]; then
    echo "check-coretypes: SKIPPED $core: this CPU lacks$missing (its kernels would die of SIGILL)"
    skipped="$skipped $core"
    continue
  fi
  # OpenBLAS falls back to detecting the CPU when it does not take the name: make sure it took it.
  picked=$(OPENBLAS_VERBOSE=2 OPENBLAS_CORETYPE=$core "$probe" 2>&1 | sed -n 's/^Core: //p' | head -n 1)
  if [ "$picked" != "$core" ]; then
    echo "check-coretypes: $core: OpenBLAS picked '${picked:-nothing}' instead" >&2
    failed="$failed $core"
    continue
  fi
  for n in 1 2; do
    cpus=$(first_cpus $n)
    if [ "$(echo "$cpus" | tr ',' '\n' | wc -l)" -lt $n ]; then
      echo "check-coretypes: SKIPPED $core on $n cores: only CPU $cpus may be used here"
      skipped="$skipped $core/$n-core"
      continue
    fi
    echo "check-coretypes: $core on $n core(s) (CPU $cpus)"
    if (cd "$build" && env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS -u GOTO_NUM_THREADS OPENBLAS_CORETYPE="$core" \
        taskset -c "$cpus" ctest -L numeric --output-on-failure -j 2); then
      ran="$ran $core/$n-core"
    else
      failed="$failed $core/$n-core"
    fi
  done
done
echo "check-coretypes: passed:${ran:- none}; skipped:${skipped:- none}; failed:${failed:- none}"
[ -n "$ran$failed" ] || echo "check-coretypes: none of $* could run on this CPU (CORETYPES=... picks others)" >&2
[ -z "$failed" ] && [ -n "$ran" ]
