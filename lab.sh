#!/usr/bin/env bash
# kernlab's two commands (lab/CONTRACTS.md section 2):
#   ./lab.sh test   install what is missing, configure, build, run ctest (GPU tests skip without a GPU)
#   ./lab.sh run    same set-up, then the lab: verify every golden case, benchmark on the GPU if
#                   there is one, and regenerate reports/ from the results. Every module is benched
#                   and the reports written whatever the gate says; then it exits 1 if a bench
#                   failed (an error, a wrong output), 3 if the gate missed a target, else 0.
# Environment: BUILD_DIR (default build), KL_SEED (replay the random inputs of a failed test).
set -euo pipefail
cd "$(dirname "$0")"
build=${BUILD_DIR:-build}
say() { printf '\n== %s\n' "$*"; }

install_missing() {
  # Debian/Ubuntu package names; pkg-config answers first so a machine that has the libraries
  # another way (the GPU machine's packed prefix) installs nothing.
  local pkgs=() cmd
  pkg-config --exists criterion 2>/dev/null || pkgs+=(libcriterion-dev)
  pkg-config --exists libcjson 2>/dev/null || pkgs+=(libcjson-dev)
  pkg-config --exists openblas 2>/dev/null || pkgs+=(libopenblas-dev)
  command -v pkg-config >/dev/null || pkgs+=(pkg-config)
  command -v cmake >/dev/null || pkgs+=(cmake)
  command -v ninja >/dev/null || pkgs+=(ninja-build)
  command -v g++ >/dev/null || pkgs+=(g++)
  command -v python3 >/dev/null || pkgs+=(python3)
  /usr/bin/python3 -c "import numpy" 2>/dev/null || pkgs+=(python3-numpy) # golden/gen only
  command -v valgrind >/dev/null || pkgs+=(valgrind)
  command -v clang >/dev/null || pkgs+=(clang)
  [ ${#pkgs[@]} -eq 0 ] && return 0
  say "installing: ${pkgs[*]}"
  if [ "$(id -u)" -eq 0 ]; then cmd=(); elif command -v sudo >/dev/null; then cmd=(sudo); else
    echo "lab.sh: missing packages (${pkgs[*]}) and no root or sudo to install them" >&2; exit 1
  fi
  if ! command -v apt-get >/dev/null; then
    echo "lab.sh: missing ${pkgs[*]}; this is not a Debian/Ubuntu machine, install them by hand" >&2; exit 1
  fi
  "${cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${cmd[@]}" apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
}

find_cuda() {
  if ! command -v nvcc >/dev/null; then
    for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break; done
  fi
  command -v nvcc >/dev/null || { echo "lab.sh: nvcc not found: kernlab needs the CUDA toolkit (12.8 or newer)" >&2; exit 1; }
}

build_lab() {
  install_missing
  find_cuda
  say "configure ($build)"
  mkdir -p "$build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release > "$build/configure.log" 2>&1 \
    || { cat "$build/configure.log" >&2; exit 1; }
  say "build ($(nproc) jobs)"
  cmake --build "$build" -j "$(nproc)"
}

case "${1:-}" in
test)
  build_lab
  say "test"
  ctest --test-dir "$build" --label-exclude perf --output-on-failure
  ;;
run)
  build_lab
  say "verify every golden case"
  "$build/kernlab" verify golden
  if "$build/kl_gpu_guard" true > /dev/null; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    # One folder per GPU kind (h100, h200, ...): this run replaces its own device's results and
    # leaves the other devices' beside it; the guides show every device side by side.
    data=reports/data/$(printf '%s' "${gpu:-gpu}" | sed -e 's/^NVIDIA //' -e 's/ .*//' | tr '[:upper:]' '[:lower:]')
    say "benchmarks on $gpu (results in $data)"
    mkdir -p "$data"
    "$build/kernlab" ceilings
    failed="" missed=""
    for m in $("$build/kernlab" list | awk '/^[a-z]/{print $1}'); do
      if [ "$m" = allreduce ] && ! "$build/kl_gpu_guard" --min-gpus 2 true > /dev/null; then
        echo "lab.sh: bench allreduce skipped: it needs two GPUs (reports/allreduce.md keeps its committed figures)"
        continue
      fi
      rc=0
      "$build/kernlab" bench "$m" --counters --peers --gate --json "$data/$m.jsonl.new" || rc=$?
      # kernlab bench: 0 every target met, 3 a target missed (the rows are results all the same),
      # anything else an error or a wrong output ($data/$m.jsonl stays as it was).
      case $rc in
      0) mv "$data/$m.jsonl.new" "$data/$m.jsonl" ;;
      3) mv "$data/$m.jsonl.new" "$data/$m.jsonl"; missed="$missed $m" ;;
      *) failed="$failed $m"; echo "lab.sh: bench $m failed (exit $rc, see above); $data/$m.jsonl left as it was" >&2 ;;
      esac
    done
  else
    say "benchmarks need a GPU: $("$build/kl_gpu_guard" true | sed 's/^skipped: //')"
    echo "Only the CPU module benches run here; the GPU figures in reports/ are the committed ones."
    "$build/kernlab" bench all --json "$build/cpu-bench.jsonl" || true
  fi
  say "reports"
  "$build/kernlab" report --results reports/data --out reports
  if [ -n "${failed:-}" ]; then echo "lab.sh run: bench failed for:$failed" >&2; exit 1; fi
  if [ -n "${missed:-}" ]; then
    echo "lab.sh run: the gate missed targets in:$missed (the gate: lines above)" >&2
    exit 3
  fi
  ;;
*)
  echo "usage: ./lab.sh test | run" >&2
  exit 2
  ;;
esac
