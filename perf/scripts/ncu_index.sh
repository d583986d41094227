#!/usr/bin/env bash
# Counter evidence for the index guide's analysis (why torch.embedding beat v3_rows_stream at 64
# tokens; what v4_pdl_one_trip changes), in one device call after perf/scripts/device_run.sh built build/:
#   perf/scripts/ncu_index.sh            -> $OUT/ncu/index.csv (one row per kernel and metric), index-sass.txt
# Each kernel is profiled alone (ncu serialises launches, so PDL overlap is absent here: these
# figures explain the shape; the overlap shows in the bench's graph timings and in nsys).
# What to read in index.csv, per kernel (torch's vectorized_gather_kernel, index_v3, index_v4):
#   launch__grid_size / launch__block_size          torch 128 x 256 and v4 128 x 256 at 64 tokens, v3 64 x 256
#   smsp__sass_inst_executed_op_global_ld.sum /     global load instructions per warp: torch and v4 2
#     (launch__grid_size * launch__block_size / 32)   (id + one 16-byte row unit), v3 3 (id + two units)
#   l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum /  bytes per load request: 16-byte vectors in all three
#     l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum (512 B per warp request for the row loads)
#   dram__bytes_read.sum, dram__bytes_write.sum     the same bytes in all three (the model's 0.5 + 0.5 MB)
#   smsp__warps_issue_stalled_long_scoreboard.sum / warps launched: cycles a warp waits on loads;
#                                                   v3's longer: its warps wait for one more dependent trip
#   gpu__time_duration.sum                          alone on the GPU: v3 > torch ~ v4 (v4's PDL gain is absent)
# index-sass.txt: the instructions before the first global load in each kernel's SASS.
set -uo pipefail
out=${OUT:-$PWD/device-out}/ncu
mkdir -p "$out"
metrics=launch__grid_size,launch__block_size,launch__registers_per_thread,gpu__time_duration.sum,smsp__inst_executed.sum
metrics+=,smsp__sass_inst_executed_op_global_ld.sum,smsp__sass_inst_executed_op_global_st.sum
metrics+=,l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
metrics+=,dram__bytes_read.sum,dram__bytes_write.sum,smsp__warps_issue_stalled_long_scoreboard.sum
metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active
ncu_run() { ncu --metrics "$metrics" --cache-control all --clock-control none --csv "$@"; }
{
  for v in v3_rows_stream v4_pdl_one_trip; do
    for w in decode-64 prefill-8k; do
      # The bench launches warm-up rounds first; skip them, profile three launches of the kernel.
      ncu_run -k regex:index_v --launch-skip 20 --launch-count 3 \
        build/kernlab bench index --variant "$v" --workload "$w" 2>/dev/null | grep '^"'
    done
  done
  ncu_run -k regex:vectorized_gather --launch-skip 3 --launch-count 6 python3 - <<'PY' 2>/dev/null | grep '^"'
import torch, torch.nn.functional as F
table = torch.randn(128256, 4096, device="cuda").to(torch.bfloat16)
for n in (64, 8192):  # decode-64 and prefill-8k, as perf/peers/index.py runs them
    ids = torch.randint(0, 128256, (n,), device="cuda")
    for _ in range(3):
        F.embedding(ids, table)
torch.cuda.synchronize()
PY
} > "$out/index.csv"
echo "== $(grep -c . "$out/index.csv") metric rows in $out/index.csv"
# Instructions before the first global load: ours from the build, torch's from its library.
{
  for o in build/CMakeFiles/kernlab_objs.dir/kernels/index/v3_rows_stream.cu.o \
           build/CMakeFiles/kernlab_objs.dir/kernels/index/v4_pdl_one_trip.cu.o; do
    echo "== $o"; cuobjdump -sass -arch sm_90a "$o" | grep -E 'Function|LDG|STG|PREEXIT|ACQBULK' | head -20
  done
  lib=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))')
  echo "== $lib"
  # The whole library's SASS is large: bounded, and only the gather kernel's first instructions kept.
  timeout 300 cuobjdump -sass -arch sm_90 "$lib" 2>/dev/null | awk '/Function : .*vectorized_gather_kernelILi16El/{on=1} on' \
    | grep -E 'Function|/\*0[0-9a-f]{3}\*/' | head -60
} > "$out/index-sass.txt" 2>&1
echo "== $out/index-sass.txt: $(grep -c LDG "$out/index-sass.txt") load lines"
