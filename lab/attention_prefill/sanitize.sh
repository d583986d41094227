#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck and synccheck over every attention_prefill variant, each on
# the golden cases (small problems: ragged batches, pages of 1, 5, 8 and 16 slots, 300 keys, so the
# pipelined kernels run several key tiles through both shared-memory stages). One line per
# (variant, tool); a failure prints the sanitizer's report. Exit 77 (a ctest SKIP) when this machine
# has no CUDA device or no compute-sanitizer. Run by ctest (label sanitizer) through kl_gpu_guard:
#   bash lab/attention_prefill/sanitize.sh build/kernlab
set -uo pipefail
kl=$(realpath "${1:?usage: sanitize.sh path/to/kernlab}")
cd "$(dirname "$0")/../.."
san=$(command -v compute-sanitizer || true)
[ -n "$san" ] || san=/usr/local/cuda/bin/compute-sanitizer
if [ ! -x "$san" ]; then echo "skipped: no compute-sanitizer on PATH or in /usr/local/cuda/bin"; exit 77; fi
"$(dirname "$kl")/kl_gpu_guard" true > /dev/null || { echo "skipped: no CUDA device"; exit 77; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
variants=$("$kl" list | awk '$1 ~ /^attention_prefill\// { sub("attention_prefill/", "", $1); print $1 }')
[ -n "$variants" ] || { echo "FAIL no attention_prefill variants listed"; exit 1; }
passes=0 fails=0
for v in $variants; do
  for tool in memcheck racecheck synccheck; do
    "$san" --tool "$tool" --error-exitcode 99 "$kl" verify golden/attention_prefill --variant "$v" > "$log" 2>&1
    rc=$?
    if [ $rc -eq 77 ]; then # nothing this GPU runs (v7 and up on sm_80): verify says why, last
      echo "skip $v $tool: $(tail -1 "$log")"
    elif [ $rc -eq 0 ] && ! grep -q '^FAIL' "$log"; then
      echo "ok   $v $tool"; passes=$((passes + 1))
    else
      echo "FAIL $v $tool"; tail -40 "$log"; fails=$((fails + 1))
    fi
  done
done
echo "$passes passed, $fails failed"
exit $((fails > 0))
