#!/usr/bin/env bash
# Every variant that issues wgmma keeps its wgmmas pipelined. Where a kernel's registers run short
# around its products, ptxas serializes them (its info line C7511, "wgmma.mma_async instructions are
# serialized due to ..."): the kernel still computes the right thing, so no correctness test sees it,
# and only a GPU's timing shows the loss. This compiles each such variant (kernels/*/v*.cu that use
# wgmma, directly or through the warp-specialized prefill headers) for sm_90a with the build's flags,
# in parallel, and fails naming the file and ptxas's reason. Then it plants the bug it is there for
# (v15_async_gather's consumers testing the copy path at run time, which costs them the register) and
# checks that it is reported. Skipped (exit 77) without nvcc.
#   bash lab/tests/wgmma_pipelined.sh path/to/nvcc
set -uo pipefail
nvcc=${1:?usage: wgmma_pipelined.sh path/to/nvcc}
cd "$(dirname "$0")/../.."
[ -x "$nvcc" ] || nvcc=$(command -v "$nvcc" || true)
if [ -z "$nvcc" ] || [ ! -x "$nvcc" ]; then echo "skipped: no nvcc"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# one file: ok, or FAIL with ptxas's C7511 lines (and any compile error)
compile() {
  local src=$1 log
  log="$tmp/$(basename "$src").log"
  if ! "$nvcc" -std=c++20 -lineinfo --expt-relaxed-constexpr -D_GNU_SOURCE -I. -cubin -arch=sm_90a "$src" \
       -o "$tmp/$(basename "$src").cubin" > "$log" 2>&1; then
    echo "FAIL $src: does not compile"; tail -5 "$log"; return 1
  fi
  if grep -q C7511 "$log"; then
    echo "FAIL $src: ptxas serializes its wgmmas"; grep C7511 "$log" | sed -e 's/^/    /' | head -3; return 1
  fi
  echo "ok   $src"
}
export -f compile
export nvcc tmp
files=$(grep -lE 'wgmma|kv_ring\.cuh|mainloop_sm90\.cuh' kernels/*/v*.cu)
[ -n "$files" ] || { echo "FAIL no variant issues wgmma: the file search is broken"; exit 1; }
printf '%s\n' $files | xargs -P "$(nproc)" -I{} bash -c 'compile {}'
rc=$?
# The planted bug, in a copy: the consumers' fence tested on the runtime box_rows instead of kGathered.
planted=kernels/attention_prefill/v15_async_gather.cu
copy=$tmp/planted_serialized.cu
sed -e 's/if constexpr (kGathered) fence_async_smem();/if (box_rows == 0) fence_async_smem();/' "$planted" > "$copy"
if cmp -s "$planted" "$copy"; then
  echo "FAIL the planted edit no longer applies to $planted: update this script"; exit 1
fi
if compile "$copy" > "$tmp/planted.out" 2>&1; then
  echo "FAIL the planted bug (a runtime test in v15's consumers) was not reported: is C7511 still ptxas's code?"
  exit 1
fi
grep -q 'ptxas serializes its wgmmas' "$tmp/planted.out" \
  || { echo "FAIL the planted copy failed for another reason:"; cat "$tmp/planted.out"; exit 1; }
echo "ok   the planted runtime test in v15's consumers is reported"
[ $rc -eq 0 ] && echo "every wgmma variant keeps its wgmmas pipelined" || echo "FAIL: see above"
exit $rc
