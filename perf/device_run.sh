#!/usr/bin/env bash
# One call on a GPU machine: build, every test (cpu + gpu), verify the goldens, ceilings, and
# bench the given modules with counters, peers and the gate. Logs and results go to $OUT
# (or ./device-out). Used with the packed dependencies of ../shared/device/gpu-deps.sh:
#   perf/device_run.sh rmsnorm index store rope
set -uo pipefail
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
if [ -f .gpu-deps.tar.xz ]; then
  tar xJf .gpu-deps.tar.xz
  export LD_LIBRARY_PATH=$PWD/.gpu-deps/lib:${LD_LIBRARY_PATH:-} PKG_CONFIG_PATH=$PWD/.gpu-deps/lib/pkgconfig \
    CMAKE_PREFIX_PATH=$PWD/.gpu-deps
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$out/gpu.txt" 2>&1
( cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real \
  && cmake --build build -j 16 ) > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "== build ok"
(cd build && ctest --label-exclude perf --output-on-failure -j 4) > "$out/ctest.log" 2>&1
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest.log" | head -30
build/kernlab verify golden > "$out/verify.log" 2>&1; echo "== verify golden: rc=$? $(tail -1 "$out/verify.log")"
mkdir -p "$out/data"
build/kernlab ceilings --json "$out/data/ceilings.json" 2>/dev/null | tee "$out/ceilings.txt"
for m in "$@"; do
  build/kernlab bench "$m" --counters --peers --gate --json "$out/data/$m.jsonl" > "$out/bench-$m.txt" 2> "$out/bench-$m.err"
  echo "== bench $m: rc=$?"; cat "$out/bench-$m.txt" | sed -n '/variant/,$p'; grep -E "gate|MISS|fail" "$out/bench-$m.err" | head
done
