#!/usr/bin/env bash
# One compute-sanitizer tool over every variant of a module on its golden cases:
#   sanitize.sh path/to/kernlab TOOL MODULE      (TOOL: memcheck, racecheck, synccheck, initcheck)
# Exits 77 (a ctest skip) when compute-sanitizer is not installed; the caller runs it through
# kl_gpu_guard, which skips without a GPU. Any error the tool reports fails the test.
set -uo pipefail
kl=${1:?usage: sanitize.sh KERNLAB TOOL MODULE} tool=${2:?} module=${3:?}
cd "$(dirname "$0")/../.."
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null) \
  || { echo "skipped: compute-sanitizer not found"; exit 77; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$san" --tool "$tool" --error-exitcode 99 --print-limit 20 "$kl" verify "golden/$module" > "$log" 2>&1
rc=$?
grep -E "^(FAIL|SKIP)|ERROR SUMMARY|Error|error" "$log" | head -40
[ $rc -eq 0 ] && { echo "$tool: clean over golden/$module ($(grep -c '^PASS' "$log") runs passed)"; exit 0; }
echo "$tool over golden/$module: exit $rc" >&2
tail -60 "$log" >&2
exit 1
