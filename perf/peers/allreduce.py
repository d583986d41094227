"""allreduce peer: torch.distributed.all_reduce (NCCL backend), what a PyTorch user calls, on the
lab's workloads (bf16, 8 KB .. 256 MB per rank, every world from 2 to the GPU count), timed the
way the lab times its own variants and written as the same results lines.

torch.distributed needs one process per GPU: run(...) spawns them (torch.multiprocessing, a
fresh interpreter each, NCCL_NVLS_ENABLE=0 and TORCH_SYMM_MEM_DISABLE_MULTICAST=1 so NVLink
multicast stays off). Each rank times its own calls; the row takes the slowest rank's median, as
kernlab does. Timing: the calls captured in a CUDA graph (per_graph a graph, 20 replays) when
PyTorch can capture the collective, else back-to-back eager calls between events ("timing" says
which); eager per-call times are kept beside it. Inputs rotate over up to 20 sets.
Called by perf/peers/run.py (kernlab bench allreduce --peers); alone:
    python3 perf/peers/run.py --module allreduce --json out.jsonl --ceilings ceilings.json
"""
import datetime
import json
import math
import os
import socket
import sys

import clocks

SIZES = [("8KB", 8 << 10), ("64KB", 64 << 10), ("256KB", 256 << 10), ("512KB", 512 << 10),
         ("1MB", 1 << 20), ("8MB", 8 << 20), ("64MB", 64 << 20), ("256MB", 256 << 20)]
REPS = 20


def wanted(only, name, world):
    return not only or only == name or only == f"{name}-world{world}"


def per_graph_for(nbytes):
    return 20 if nbytes <= 1 << 20 else 10 if nbytes <= 16 << 20 else 3


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


def worker(rank, world, port, only, l2_bytes, out_path):
    os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    results = []
    for name, nbytes in SIZES:
        if not wanted(only, name, world):
            continue
        n = nbytes // 2
        per_graph = per_graph_for(nbytes)
        sets = max(1, min(per_graph, math.ceil(4 * l2_bytes / nbytes)))
        xs = [torch.randn(n, device=dev).to(torch.bfloat16) for _ in range(sets)]
        stream = torch.cuda.Stream()
        before = clocks.read(torch, rank)
        with torch.cuda.stream(stream):
            for i in range(3):
                dist.all_reduce(xs[i % sets])
            torch.cuda.synchronize()
            dist.barrier()
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(REPS)]
            for i, (a, b) in enumerate(ev):
                a.record(stream)
                dist.all_reduce(xs[i % sets])
                b.record(stream)
            torch.cuda.synchronize()
            eager = sorted(1e3 * a.elapsed_time(b) for a, b in ev)
            timing, times = "events", eager
            # Capture where PyTorch can; every rank must agree before any replay (a collective).
            graph, captured = torch.cuda.CUDAGraph(), 1.0
            try:
                with torch.cuda.graph(graph, stream=stream):
                    for i in range(per_graph):
                        dist.all_reduce(xs[i % sets])
            except Exception as e:  # capture of the collective unsupported here: eager times stand
                captured = 0.0
                if rank == 0:
                    print(f"peers allreduce: {name} world {world}: graph capture failed ({e}); eager timing",
                          file=sys.stderr)
            torch.cuda.synchronize()
            agree = torch.tensor([captured], device=dev)
            dist.all_reduce(agree, op=dist.ReduceOp.MIN)
            if agree.item() > 0.5:
                graph.replay()
                torch.cuda.synchronize()
                dist.barrier()
                ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(REPS)]
                for a, b in ev:
                    a.record(stream)
                    graph.replay()
                    b.record(stream)
                torch.cuda.synchronize()
                times = sorted(1e3 * a.elapsed_time(b) / per_graph for a, b in ev)
                timing = "graph"
            del graph
            # Check: integer-valued inputs sum exactly in bf16 (|sum| <= 256).
            chk = torch.full((n,), float(rank + 1), device=dev).to(torch.bfloat16)
            dist.all_reduce(chk)
            ok = bool(torch.all(chk.float() == world * (world + 1) / 2).item())
        after = clocks.read(torch, rank)
        valid = float(before["valid"] and after["valid"])
        mine = torch.tensor([times[0], median(times), times[-1], median(eager), float(ok), valid,
                             before.get("sm_mhz", 0), after.get("sm_mhz", 0), after.get("reasons", 0)],
                            device=dev, dtype=torch.float64)
        every = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(every, mine)
        results.append((name, nbytes, per_graph, sets, timing, [t.tolist() for t in every]))
        del xs
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(torch, args, ceil):
    """Entry from perf/peers/run.py: appends the rows to args.json."""
    import tempfile
    import torch.multiprocessing as mp
    gpus = torch.cuda.device_count()
    if gpus < 2:
        print(f"peers allreduce: skipped: needs 2 GPUs, this machine has {gpus}", file=sys.stderr)
        return 0
    device = {k: ceil[k] for k in ("name", "cc", "sms", "l2_bytes", "copy_gbs", "gemm_tflops")}
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    for world in range(2, gpus + 1):
        if not any(wanted(args.workload, name, world) for name, _ in SIZES):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out_path = os.path.join(tmp, "results.json")
            mp.spawn(worker, args=(world, free_port(), args.workload, ceil["l2_bytes"], out_path), nprocs=world,
                     join=True)
            results = json.load(open(out_path))
        with open(args.json, "a") as out:
            for name, nbytes, per_graph, sets, timing, every in results:
                slow = max(range(world), key=lambda r: every[r][1])
                t = {"min": every[slow][0], "median": every[slow][1], "max": every[slow][2]}
                algbw = nbytes / (t["median"] * 1e-6) / 1e9
                busbw = algbw * 2 * (world - 1) / world
                ok = all(e[4] > 0.5 for e in every)
                # Throttled when any rank's GPU was (as kernlab marks its rows); the clocks shown are
                # the slowest rank's.
                read = [({"valid": e[5] > 0.5, "sm_mhz": int(e[6]), "reasons": 0},
                         {"valid": e[5] > 0.5, "sm_mhz": int(e[7]), "reasons": int(e[8])}) for e in every]
                clock_fields = clocks.row_fields(*read[slow])
                clock_fields["throttled"] = any(clocks.throttled(b, a)[0] for b, a in read)
                row = {
                    "module": "allreduce", "variant": "torch.distributed.all_reduce", "workload": f"{name}-world{world}",
                    "params": {"world": world, "bytes": nbytes, "n": nbytes // 2, "dtype": "bf16"}, "device": device,
                    "time_us": t, "bytes": nbytes, "flops": (world - 1) * nbytes / 2, "gbs": algbw,
                    "bw_frac": None, "tflops": 0, "tc_frac": 0, "counters": {},
                    "check": {"rel_l2": 0.0, "max_abs": 0.0, "pass": ok}, "gate": None, "throttled": False,
                    "commit": args.commit, "date": today, "peer": True, "timing": timing, "world": world,
                    "algbw_gbs": algbw, "busbw_gbs": busbw, "rank_time_us": [e[1] for e in every],
                    "slowest_rank": slow, "time_us_eager": every[slow][3], "per_graph": per_graph,
                    "input_sets": sets, "torch": torch.__version__,
                }
                row.update(clock_fields)
                out.write(json.dumps(row, separators=(",", ":")) + "\n")
                print(f"{row['variant']:<26} {row['workload']:<14} {t['median']:9.2f} {every[slow][3]:8.2f} "
                      f"{algbw:8.1f} {busbw:8.1f}       -          - {'ok' if ok else 'FAIL':>5} (peer, {timing})")
    return 0
