#!/usr/bin/env bash
# One short call on a GPU machine while new variants are brought up (device_run.sh is the full run
# whose results go into reports/): builds only `kernlab` and the module's test binary, then for each
# given variant verifies the module's goldens, checks it against the reference on fresh random inputs
# and the edge catalogue (`kernlab check`), runs it under compute-sanitizer (memcheck, racecheck,
# synccheck) on the goldens, and benches it on the given workloads; then a SASS census of the
# variants' kernels (tensor-core instructions, local-memory traffic), and with GPU_SUITE=1 the
# module's whole GPU test suite (every variant and mutant: minutes). SMOKE_TIMEOUT (seconds, default
# 300) bounds each verify, check, sanitizer and bench, so a hanging new variant costs little device
# time. Short lines on stdout as they come, full logs in $OUT/smoke.tgz. Uses the packed dependencies
# like device_run.sh:
#   KL_COMMIT=$(git rev-parse --short=12 HEAD) perf/scripts/device_smoke.sh attention_prefill \
#       "v7_wgmma v8_warp_specialized v10_pingpong" "causal-8k causal-8k-p1"
set -uo pipefail
module=${1:?usage: device_smoke.sh MODULE \"VARIANTS\" [\"WORKLOADS\"]} variants=${2:?no variants given} workloads=${3:-}
export NCCL_NVLS_ENABLE=0
limit=${SMOKE_TIMEOUT:-300}
out=${OUT:-$PWD/device-out}
logs=$(mktemp -d)
mkdir -p "$out"
trap 'tar czf "$out/smoke.tgz" -C "$logs" .' EXIT
if [ -f .gpu-deps.tar.xz ]; then
  tar xJf .gpu-deps.tar.xz
  export LD_LIBRARY_PATH=$PWD/.gpu-deps/lib:${LD_LIBRARY_PATH:-} PKG_CONFIG_PATH=$PWD/.gpu-deps/lib/pkgconfig \
    CMAKE_PREFIX_PATH=$PWD/.gpu-deps
fi
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
t0=$(date +%s)
( cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real \
  && cmake --build build -j 16 --target kernlab "test_$module" kl_gpu_guard ) > "$logs/build.log" 2>&1 \
  || { tail -40 "$logs/build.log"; exit 1; }
echo "== build ok ($(( $(date +%s) - t0 )) s)"
for v in $variants; do
  timeout "$limit" build/kernlab verify "golden/$module" --variant "$v" > "$logs/verify-$v.log" 2>&1
  echo "verify $v: rc=$? $(grep -c '^PASS' "$logs/verify-$v.log") PASS, $(grep -c '^FAIL' "$logs/verify-$v.log") FAIL, $(grep -c '^SKIP' "$logs/verify-$v.log") SKIP"
  grep -m3 '^FAIL' "$logs/verify-$v.log"
  timeout "$limit" build/kernlab check "$module" --variant "$v" > "$logs/check-$v.log" 2>&1
  echo "check $v: rc=$? $(grep -c '^PASS' "$logs/check-$v.log") PASS, $(grep -c '^FAIL' "$logs/check-$v.log") FAIL"
  grep -m3 '^FAIL' "$logs/check-$v.log"
  for tool in memcheck racecheck synccheck; do
    timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 99 build/kernlab verify "golden/$module" --variant "$v" \
      > "$logs/$tool-$v.log" 2>&1
    rc=$?
    echo "  $tool: rc=$rc"; [ $rc = 0 ] || grep -m5 -E 'Error|Hazard|error' "$logs/$tool-$v.log"
  done
  for w in $workloads; do
    timeout "$limit" build/kernlab bench "$module" --variant "$v" --workload "$w" --json "$logs/bench-$v-$w.jsonl" \
      > "$logs/bench-$v-$w.log" 2>&1
    echo "bench $v $w: rc=$? $(grep -E "^ *$v " "$logs/bench-$v-$w.log" | tail -1)"
  done
done
command -v cuobjdump > /dev/null || echo "sass: no cuobjdump on PATH"
for v in $variants; do
  o=$(find build -name "$v.cu.o" | head -1)
  [ -n "$o" ] || continue
  cuobjdump -sass "$o" > "$logs/sass-$v.txt" 2>/dev/null
  echo "sass $v: $(grep -c HGMMA "$logs/sass-$v.txt") HGMMA, $(grep -c HMMA "$logs/sass-$v.txt") HMMA, $(grep -c -E 'LDL|STL' "$logs/sass-$v.txt") LDL/STL, $(grep -c UTMALDG "$logs/sass-$v.txt") UTMALDG"
done
if [ "${GPU_SUITE:-0}" = 1 ]; then
  timeout 400 build/test_$module --filter "${module}_gpu/*" -j1 > "$logs/gpu-suite.log" 2>&1
  echo "gpu suite: rc=$? $(grep -E 'Synthesis' "$logs/gpu-suite.log")"
  grep -m10 -E '\[FAIL\]' "$logs/gpu-suite.log"
fi
cat "$logs"/bench-*.jsonl > "$out/bench.jsonl" 2>/dev/null
echo "== done in $(( $(date +%s) - t0 )) s"
