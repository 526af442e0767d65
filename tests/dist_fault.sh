#!/bin/sh
# A fault under mpirun (tests/test_dist_mpi.c, run_fault): MODE stall, rank 1 stalls past
# rank 0's one-second timeout, so rank 0 must report the failed collective and find its
# checkpoint intact; MODE die, rank 1 dies, so the job must end (by rank 0's watchdog or
# by mpirun's clean-up) instead of hanging. Either way mpirun must return well within the
# CTest timeout; its exit status is not checked (a broken job does not finalize MPI).
# Usage: dist_fault.sh MPIEXEC PROGRAM stall|die
set -u
mpiexec=$1
program=$2
mode=$3
out=$(timeout 60 "$mpiexec" --oversubscribe --allow-run-as-root -np 2 "$program" "--fault-$mode" 2>&1)
status=$?
printf '%s\n' "$out"
if [ "$status" -eq 124 ]; then
  echo "dist_fault: mpirun still running after 60 s: a hang" >&2
  exit 1
fi
case $mode in
  stall)
    printf '%s\n' "$out" | grep -q "rank 0: collective failed: NB_INTERNAL: .*timed out after 1 s" || exit 1
    printf '%s\n' "$out" | grep -q "rank 0: checkpoint intact" || exit 1
    ;;
  die)
    [ "$status" -ne 0 ] || { echo "dist_fault: the job reported success although a rank died" >&2; exit 1; }
    ;;
esac
