#!/usr/bin/env bash
# The in-register Lamport variants (v14, v15, v16) promise that no thread has a stack frame: no by-value
# array indexed at run time, so nothing copied into per-thread local memory. ptxas says so for every
# kernel it compiles (-Xptxas -v, sm_90a); this fails when any kernel or function of FILE reports a
# stack frame or spills. Usage: stack_frames.sh NVCC FILE... (run from the repository root).
set -euo pipefail
nvcc=${1:?usage: stack_frames.sh NVCC FILE...}
shift
[ $# -gt 0 ] || { echo "usage: stack_frames.sh NVCC FILE..."; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for f in "$@"; do
  "$nvcc" -std=c++17 -I. -Ilab/core -O3 -arch=sm_90a -Xptxas -v -c "$f" -o "$tmp/o.o" > "$tmp/log" 2>&1 \
    || { echo "$f: does not compile:"; tail -5 "$tmp/log"; exit 1; }
  frames=$(grep -c "bytes stack frame" "$tmp/log" || true)
  [ "$frames" -gt 0 ] || { echo "$f: ptxas reported no function (is -Xptxas -v honoured?)"; exit 1; }
  bad=$(grep "bytes stack frame" "$tmp/log" | grep -v "^ *0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" || true)
  if [ -n "$bad" ]; then
    echo "$f: a stack frame or spills in $(echo "$bad" | wc -l) of $frames functions:"; echo "$bad" | sort | uniq -c
    status=1
  else
    echo "$f: $frames functions, no stack frame, no spills"
  fi
done
exit $status
