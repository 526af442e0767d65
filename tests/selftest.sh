# Shared by the self-tests of the make-check scripts (sourced: . selftest.sh).
failures=0

# expect_rejection WHAT PATTERN COMMAND...: COMMAND must fail, printing a line matching
# PATTERN; otherwise says so for WHAT and counts a failure.
expect_rejection() {
  what=$1
  pattern=$2
  shift 2
  if out=$("$@" 2>&1); then
    echo "FAIL: $what passed the check"
    failures=$((failures + 1))
  elif ! printf '%s\n' "$out" | grep -q -- "$pattern"; then
    echo "FAIL: $what: expected '$pattern' in: $out"
    failures=$((failures + 1))
  fi
}
