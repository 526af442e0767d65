# Shell pieces shared by bench/peers/run_all.sh and bench/compare_*.sh (sourced, not run,
# after setting top to the repository's root).
# PEERS_PYTHON: the interpreter with the peers installed; by default the repository's
# .venv-peers (see bench/peers/requirements.txt), else python3 on the PATH.
# QUICK=1: every peer script gets --quick (seconds, to check that it works).
: "${top:?set top to the repository root before sourcing common.sh}"
peers="$top/bench/peers"
if [ -z "${PEERS_PYTHON:-}" ]; then
  if [ -x "$top/.venv-peers/bin/python" ]; then PEERS_PYTHON="$top/.venv-peers/bin/python"; else PEERS_PYTHON=python3; fi
fi
peer_quick=
[ "${QUICK:-0}" = 1 ] && peer_quick=--quick

# peer_module IMPL: the Python module an impl needs.
peer_module() {
  case "$1" in
    torch) echo torch ;;
    tf) echo tensorflow ;;
    jax) echo jax ;;
    *) echo "unknown peer '$1' (torch, tf or jax)" >&2; return 1 ;;
  esac
}

# peer_available IMPL: true when PEERS_PYTHON imports it; otherwise prints a '#' line.
# An unknown IMPL ends the script.
peer_available() {
  module=$(peer_module "$1") || exit 2
  if "$PEERS_PYTHON" -c "import numpy, $module" 2>/dev/null; then return 0; fi
  echo "# $module not importable by $PEERS_PYTHON: the $1 lines are skipped (see bench/peers/requirements.txt)"
  return 1
}

# run_peer IMPL BENCH [ARGS...]: bench/peers/BENCH.py for IMPL.
run_peer() {
  peer_impl=$1 peer_script="$peers/$2.py"
  shift 2
  "$PEERS_PYTHON" "$peer_script" --impl "$peer_impl" $peer_quick "$@"
}
