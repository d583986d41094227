#!/usr/bin/env bash
# One call on a GPU machine: build, every test (cpu + gpu), verify the goldens, ceilings, and
# bench the given modules with counters, peers and the gate. Results go to $OUT/data/<device>/
# (or ./device-out/data/<device>/), <device> being the GPU's short name (h100, h200; DEVICE to
# override), as reports/data/<device>/<module>.jsonl wants them: one such call per GPU kind, then
#   cp -r <files>/data/<device> reports/data/ && build/kernlab report --results reports/data --out reports
# Logs go to $OUT/logs.tgz: the device tool returns at most 8 files (5 modules + ceilings + logs).
# Used with the packed dependencies of ../shared/device/gpu-deps.sh:
#   KL_COMMIT=$(git rev-parse --short=12 HEAD) perf/device_run.sh rmsnorm index store rope radix
# SKIP_TESTS=1 skips ctest and the golden verify (a second device's call, when time is short).
set -uo pipefail
out=${OUT:-$PWD/device-out}
logs=$(mktemp -d)
if [ -f .gpu-deps.tar.xz ]; then
  tar xJf .gpu-deps.tar.xz
  export LD_LIBRARY_PATH=$PWD/.gpu-deps/lib:${LD_LIBRARY_PATH:-} PKG_CONFIG_PATH=$PWD/.gpu-deps/lib/pkgconfig \
    CMAKE_PREFIX_PATH=$PWD/.gpu-deps
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
device=${DEVICE:-$(printf '%s' "${gpu:-unknown}" | sed -e 's/^NVIDIA //' -e 's/ .*//' | tr '[:upper:]' '[:lower:]')}
data=$out/data/$device
mkdir -p "$data"
echo "== $gpu -> $data"
# The tree copied to the GPU machine has no .git: without KL_COMMIT the results say "unknown".
[ -d .git ] || [ -n "${KL_COMMIT:-}" ] || echo "warning: no .git and no KL_COMMIT: results will carry commit 'unknown'"
finish() { tar czf "$out/logs.tgz" -C "$logs" . ; }
trap finish EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$logs/gpu.txt" 2>&1
( cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real \
  && cmake --build build -j 16 ) > "$logs/build.log" 2>&1 || { tail -40 "$logs/build.log"; exit 1; }
echo "== build ok"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  (cd build && ctest --label-exclude perf --output-on-failure -j 4) > "$logs/ctest.log" 2>&1
  grep -E "tests passed|tests failed|Failed|\*\*\*" "$logs/ctest.log" | head -30
  build/kernlab verify golden > "$logs/verify.log" 2>&1; echo "== verify golden: rc=$? $(tail -1 "$logs/verify.log")"
  grep -E "^(FAIL|SKIP)" "$logs/verify.log" | head -5
fi
build/kernlab ceilings --json "$data/ceilings.json" 2>/dev/null | tee "$logs/ceilings.txt"
for m in "$@"; do
  build/kernlab bench "$m" --counters --peers --gate --json "$data/$m.jsonl" > "$logs/bench-$m.txt" 2> "$logs/bench-$m.err"
  echo "== bench $m: rc=$?"; sed -n '/variant/,$p' "$logs/bench-$m.txt"; grep -E "gate|MISS|fail|error" "$logs/bench-$m.err" | head
done
# Last, what issue 15 is judged by: every decode-size row of ours and the peers, against a same-size copy.
python3 - "$data" <<'PY' 2>/dev/null || true
import glob, json, sys
print("\n== decode-size rows (copy_same_bytes_frac >= 1.0 is the sm_90 target)")
print(f"{'module':8} {'variant':24} {'workload':22} {'us':>7} {'of copy':>8} {'floor':>6}  gate")
for path in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    copy = {r["workload"]: r.get("copy_same_bytes_us") for r in rows if r.get("copy_same_bytes_us")}
    for r in rows:
        if not r["workload"].startswith("decode"):
            continue
        t = r["time_us"]["median"]
        c = copy.get(r["workload"])
        g = r.get("gate") or {}
        print(f"{r['module']:8} {r['variant']:24} {r['workload']:22} {t:7.2f} {c / t if c else float('nan'):8.3f} "
              f"{r.get('floor_frac', float('nan')):6.2f}  {'pass' if g.get('pass') else 'MISS' if g else '-'}")
PY
