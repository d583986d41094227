#!/usr/bin/env bash
# One call on a GPU machine: build, every test (cpu + gpu), verify the goldens, ceilings, and
# bench the given modules with counters, peers and the gate. Results go to $OUT/data/ (or
# ./device-out/data/), logs to $OUT/logs.tgz: the device tool returns at most 8 files.
# Used with the packed dependencies of ../shared/device/gpu-deps.sh:
#   perf/device_run.sh rmsnorm index store rope radix
set -uo pipefail
out=${OUT:-$PWD/device-out}
logs=$(mktemp -d)
mkdir -p "$out/data"
if [ -f .gpu-deps.tar.xz ]; then
  tar xJf .gpu-deps.tar.xz
  export LD_LIBRARY_PATH=$PWD/.gpu-deps/lib:${LD_LIBRARY_PATH:-} PKG_CONFIG_PATH=$PWD/.gpu-deps/lib/pkgconfig \
    CMAKE_PREFIX_PATH=$PWD/.gpu-deps
fi
finish() { tar czf "$out/logs.tgz" -C "$logs" . ; }
trap finish EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$logs/gpu.txt" 2>&1
( cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real \
  && cmake --build build -j 16 ) > "$logs/build.log" 2>&1 || { tail -40 "$logs/build.log"; exit 1; }
echo "== build ok"
(cd build && ctest --label-exclude perf --output-on-failure -j 4) > "$logs/ctest.log" 2>&1
grep -E "tests passed|tests failed|Failed|\*\*\*" "$logs/ctest.log" | head -30
build/kernlab verify golden > "$logs/verify.log" 2>&1; echo "== verify golden: rc=$? $(tail -1 "$logs/verify.log")"
grep -E "^(FAIL|SKIP)" "$logs/verify.log" | head -5
build/kernlab ceilings --json "$out/data/ceilings.json" 2>/dev/null | tee "$logs/ceilings.txt"
for m in "$@"; do
  build/kernlab bench "$m" --counters --peers --gate --json "$out/data/$m.jsonl" > "$logs/bench-$m.txt" 2> "$logs/bench-$m.err"
  echo "== bench $m: rc=$?"; sed -n '/variant/,$p' "$logs/bench-$m.txt"; grep -E "gate|MISS|fail|error" "$logs/bench-$m.err" | head
done
