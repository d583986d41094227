#!/usr/bin/env bash
# One call on a GPU machine: build, the tests, verify the goldens, ceilings, and bench the given
# modules with counters, peers and the gate. Results go to $OUT/data/<device>/ (or
# ./device-out/data/<device>/), <device> being the GPU's short name (h100, h200; DEVICE to
# override), as reports/data/<device>/<module>.jsonl wants them: one such call per GPU kind, then
#   cp -r <files>/data/<device> reports/data/ && build/kernlab report --results reports/data --out reports
# Logs go to $OUT/logs.tgz: the device tool returns at most 8 files. A short table of every
# results row comes last (its gate column: pass/MISS with the metric, "ungated" for a judged
# variant's workload without a target row, "throttled" beside either). bench's exit status says
# 0 every target met, 3 a target missed, anything else an error. Uses the dependencies packed in
# .gpu-deps.tar.xz at the root of the tree when there is one:
#   KL_COMMIT=$(git rev-parse --short=12 HEAD) perf/scripts/device_run.sh rmsnorm index store rope radix
#   perf/scripts/device_run.sh allreduce                     # on the 2 x H200 kind
# ctest runs the given modules' tests (cpu, gpu, multigpu, sanitizer: every test whose name has the
# module's name as a word) and the lab-wide CPU checks (cli, golden manifest, guides); `verify`
# checks the given modules' goldens. Options:
#   --all-tests  every ctest test and every golden case, whatever modules are given
#   --no-tests   skip ctest and verify (a second device's call, when time is short; SKIP_TESTS=1 too)
#   --dry-run    print the commands, run nothing
# NVLink multicast stays off on the shared multi-GPU machines: NCCL_NVLS_ENABLE=0 for everything
# started from here (kernlab's ranks set it again themselves).
set -uo pipefail
all_tests=0 dry=0 tests=$([ "${SKIP_TESTS:-0}" = 1 ] && echo 0 || echo 1)
while [ $# -gt 0 ]; do
  case "$1" in
  --all-tests) all_tests=1; shift ;;
  --no-tests) tests=0; shift ;;
  --dry-run) dry=1; shift ;;
  -*) echo "device_run.sh: unknown option $1" >&2; exit 2 ;;
  *) break ;;
  esac
done
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
out=${OUT:-$PWD/device-out}
logs=$(mktemp -d)
run() { if [ $dry = 1 ]; then echo "+ $*"; else eval "$@"; fi; }
if [ -f .gpu-deps.tar.xz ]; then
  run tar xJf .gpu-deps.tar.xz
  export LD_LIBRARY_PATH=$PWD/.gpu-deps/lib:${LD_LIBRARY_PATH:-} PKG_CONFIG_PATH=$PWD/.gpu-deps/lib/pkgconfig \
    CMAKE_PREFIX_PATH=$PWD/.gpu-deps
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
device=${DEVICE:-$(printf '%s' "${gpu:-unknown}" | sed -e 's/^NVIDIA //' -e 's/ .*//' | tr '[:upper:]' '[:lower:]')}
data=$out/data/$device
[ $dry = 1 ] || mkdir -p "$data"
echo "== $gpu -> $data"
# The tree copied to the GPU machine may have no .git, or an older checkout's under the copied files:
# without KL_COMMIT the results say "unknown", or that older commit marked "-dirty" (CMakeLists.txt).
[ -n "${KL_COMMIT:-}" ] || echo "warning: no KL_COMMIT: results carry the commit of this tree's .git (if any), marked -dirty where files differ"
finish() { [ $dry = 1 ] || tar czf "$out/logs.tgz" -C "$logs" . ; }
trap finish EXIT
run "nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > '$logs/gpu.txt' 2>&1"
run "nvidia-smi topo -m > '$logs/topo.txt' 2>&1"
run "( cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real \
  && cmake --build build -j 16 ) > '$logs/build.log' 2>&1" || { tail -40 "$logs/build.log"; exit 1; }
echo "== build ok"
if [ $tests = 1 ]; then
  filter=""
  if [ $all_tests = 0 ] && [ $# -gt 0 ]; then
    filter="-R '(^|_)($(IFS='|'; echo "$*"))(_|\$)|^(cli|golden_manifest|report_fixture|reports_current)\$'"
  fi
  run "(cd build && ctest --label-exclude perf --output-on-failure -j 4 $filter) > '$logs/ctest.log' 2>&1"
  run "grep -E 'tests passed|tests failed|Failed|\*\*\*' '$logs/ctest.log' | head -30"
  verify=golden
  [ $all_tests = 0 ] && [ $# -gt 0 ] && verify=$(printf 'golden/%s ' "$@")
  run "build/kernlab verify $verify > '$logs/verify.log' 2>&1; echo \"== verify: rc=\$? \$(tail -1 '$logs/verify.log')\""
  run "grep -E '^(FAIL|SKIP)' '$logs/verify.log' | head -5"
fi
run "build/kernlab ceilings --json '$data/ceilings.json' 2>/dev/null | tee '$logs/ceilings.txt'"
for m in "$@"; do
  run "build/kernlab bench $m --counters --peers --gate --json '$data/$m.jsonl' > '$logs/bench-$m.txt' 2> '$logs/bench-$m.err'; echo \"== bench $m: rc=\$?\""
  run "grep -E '^gate: |fail|error|needs|throttled' '$logs/bench-$m.err' | head -20"
done
# The short table, last: one line per results row, with the gate, the same-size copy (the decode-size
# target of issue 15) and the latency against NCCL (allreduce).
summary() {
  python3 - "$data" "$@" <<'PY'
import json, os, sys
d = sys.argv[1]
for m in sys.argv[2:]:
    p = os.path.join(d, m + ".jsonl")
    if not os.path.exists(p):
        print(f"{m}: no results")
        continue
    print(f"\n{m}: {'variant':<28} {'workload':<20} {'median_us':>10} {'GB/s':>7} {'TF/s':>6} {'copy=':>6} {'vs_nccl':>7}  gate")
    for line in open(p):
        r = json.loads(line)
        g = r.get("gate") or {}
        gate = ("pass " if g.get("pass") else "MISS ") + g["metric"] if g.get("metric") else "-"
        gate = "ungated" if g.get("ungated") else gate
        gate += " throttled" if r.get("throttled") else ""
        vs, cf = r.get("latency_vs_nccl"), r.get("copy_same_bytes_frac")
        print(f"  {r['variant'][:28]:<28} {r['workload'][:20]:<20} {r['time_us']['median']:10.2f} {r.get('gbs') or 0:7.0f} "
              f"{r.get('tflops') or 0:6.1f} {'' if cf is None else format(cf, '.3f'):>6} "
              f"{'' if vs is None else format(vs, '.2f'):>7}  {gate}{' (peer)' if r.get('peer') else ''}")
PY
}
if [ $dry = 1 ]; then echo "+ summary $*"; else summary "$@"; fi
