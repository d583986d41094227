#!/usr/bin/env bash
# One call on a GPU machine: build, every test (cpu + gpu + multigpu), verify the goldens, ceilings,
# and bench the given modules with counters, peers and the gate. Results go to $OUT/data/ (or
# ./device-out/data/), logs to $OUT/logs.tgz: the device tool returns at most 8 files. A short
# table of every results row comes last.
# Used with the packed dependencies of ../shared/device/gpu-deps.sh:
#   perf/device_run.sh rmsnorm index store rope radix
#   perf/device_run.sh allreduce                     # on the 2 x H200 kind: ~8 min, build included
# ctest runs the given modules' tests (cpu, gpu, multigpu: every test whose name has the module's
# name as a word, so allreduce_multigpu and report_allreduce too) and the lab-wide CPU checks
# (cli, golden manifest, guides); `verify` checks the given modules' goldens.
# Options:
#   --all-tests  every ctest test and every golden case, whatever modules are given
#   --dry-run    print the commands, run nothing
# NVLink multicast stays off on the shared multi-GPU machines: NCCL_NVLS_ENABLE=0 for everything
# started from here (kernlab's ranks set it again themselves).
set -uo pipefail
all_tests=0 dry=0
while [ $# -gt 0 ]; do
  case "$1" in
  --all-tests) all_tests=1; shift ;;
  --dry-run) dry=1; shift ;;
  -*) echo "device_run.sh: unknown option $1" >&2; exit 2 ;;
  *) break ;;
  esac
done
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
out=${OUT:-$PWD/device-out}
logs=$(mktemp -d)
run() { if [ $dry = 1 ]; then echo "+ $*"; else eval "$@"; fi; }
[ $dry = 1 ] || mkdir -p "$out/data"
if [ -f .gpu-deps.tar.xz ]; then
  run tar xJf .gpu-deps.tar.xz
  export LD_LIBRARY_PATH=$PWD/.gpu-deps/lib:${LD_LIBRARY_PATH:-} PKG_CONFIG_PATH=$PWD/.gpu-deps/lib/pkgconfig \
    CMAKE_PREFIX_PATH=$PWD/.gpu-deps
fi
finish() { [ $dry = 1 ] || tar czf "$out/logs.tgz" -C "$logs" . ; }
trap finish EXIT
run "nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > '$logs/gpu.txt' 2>&1"
run "nvidia-smi topo -m > '$logs/topo.txt' 2>&1"
run "( cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real \
  && cmake --build build -j 16 ) > '$logs/build.log' 2>&1" || { tail -40 "$logs/build.log"; exit 1; }
echo "== build ok"
filter=""
if [ $all_tests = 0 ] && [ $# -gt 0 ]; then
  filter="-R '(^|_)($(IFS='|'; echo "$*"))(_|\$)|^(cli|golden_manifest|report_fixture|reports_current)\$'"
fi
run "(cd build && ctest --label-exclude perf --output-on-failure -j 4 $filter) > '$logs/ctest.log' 2>&1"
run "grep -E 'tests passed|tests failed|Failed|Skipped|\*\*\*' '$logs/ctest.log' | head -30"
verify=golden
[ $all_tests = 0 ] && [ $# -gt 0 ] && verify=$(printf 'golden/%s ' "$@")
run "build/kernlab verify $verify > '$logs/verify.log' 2>&1; echo \"== verify $verify: rc=\$? \$(tail -1 '$logs/verify.log')\""
run "grep -E '^(FAIL|SKIP)' '$logs/verify.log' | head -5"
run "build/kernlab ceilings --json '$out/data/ceilings.json' 2>/dev/null | tee '$logs/ceilings.txt'"
for m in "$@"; do
  run "build/kernlab bench $m --counters --peers --gate --json '$out/data/$m.jsonl' > '$logs/bench-$m.txt' 2> '$logs/bench-$m.err'; echo \"== bench $m: rc=\$?\""
  run "grep -E 'gate|MISS|fail|error|needs' '$logs/bench-$m.err' | head"
done
# The short table, last: one line per results row.
summary() {
  python3 - "$out/data" "$@" <<'PY'
import json, os, sys
d = sys.argv[1]
for m in sys.argv[2:]:
    p = os.path.join(d, m + ".jsonl")
    if not os.path.exists(p):
        print(f"{m}: no results")
        continue
    print(f"\n{m}: {'variant':<30} {'workload':<18} {'median_us':>10} {'GB/s':>7} {'vs_nccl':>7}  gate")
    for line in open(p):
        r = json.loads(line)
        g = r.get("gate") or {}
        gate = ("pass " if g.get("pass") else "MISS ") + g["metric"] if g else "-"
        vs = r.get("latency_vs_nccl")
        print(f"  {r['variant'][:30]:<30} {r['workload'][:18]:<18} {r['time_us']['median']:10.2f} {r.get('gbs') or 0:7.0f} "
              f"{'' if vs is None else format(vs, '.2f'):>7}  {gate}{' (peer)' if r.get('peer') else ''}")
PY
}
if [ $dry = 1 ]; then echo "+ summary $*"; else summary "$@"; fi
