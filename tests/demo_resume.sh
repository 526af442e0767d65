#!/bin/sh
# The demo persists: one epoch saved, then restored in a new process for a second epoch,
# which must continue at epoch 2 from the saved step counter and save again.
# Usage: demo_resume.sh DEMO_BINARY WORK_DIR
set -eu
demo=$1
prefix=$2/demo_resume/cnn
rm -rf "$2/demo_resume"
mkdir -p "$2/demo_resume"
"$demo" --epochs 1 --save "$prefix" | tee "$2/demo_resume/first.log"
grep -q "checkpoint saved to $prefix.index" "$2/demo_resume/first.log"
"$demo" --epochs 1 --restore "$prefix" --save "$prefix" | tee "$2/demo_resume/second.log"
grep -q "restored $prefix: 937 steps, continuing at epoch 2" "$2/demo_resume/second.log"
grep -q "test accuracy [89][0-9]\." "$2/demo_resume/second.log"
# A missing checkpoint is an error naming the file, not a fresh start.
if "$demo" --epochs 1 --restore "$2/demo_resume/missing" 2> "$2/demo_resume/missing.log"; then exit 1; fi
grep -q "missing" "$2/demo_resume/missing.log"
echo "demo resume: ok"
