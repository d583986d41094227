#!/usr/bin/env python3
"""Peers: what a user would otherwise pick (PyTorch), timed on the lab's workloads the way the
lab times its own variants, written as the same results lines (lab/CONTRACTS.md section 7).

    python3 perf/peers/run.py --module rmsnorm --json F --ceilings C.json [--workload W] [--commit X]

Each perf/peers/<module>.py defines cases(torch, workload) yielding dicts (or run(torch, args, ceil),
which times and writes its rows itself: allreduce, which needs one process per GPU):
    variant, workload, params, bytes, flops, set_bytes,
    make(i) -> a zero-argument callable running the peer on input set i,
    check() -> (rel_l2, max_abs, pass) or None
Timing: CUDA events, warm-up, median of >= 20 reps (min/max kept), input sets rotated so they
span >= 4x the L2, small workloads captured in a CUDA graph. The SM clock is read before and after
each row's timing and the row marked throttled as kernlab marks its own (perf/peers/clocks.py).
A peer's row never carries a gate verdict ("gate": null): the gate judges our variants only.
Run by `kernlab bench --peers`.
"""
import argparse
import datetime
import importlib
import json
import math
import os
import sys

import clocks

SMALL_US = 20.0
L2_MULTIPLE = 4
ROTATION_BYTES_MAX = 4 << 30


def time_case(torch, case, ceil):
    set_bytes = max(1, case["set_bytes"])
    want = L2_MULTIPLE * ceil["l2_bytes"]
    sets = 1 if set_bytes >= want else min(math.ceil(want / set_bytes), max(1, ROTATION_BYTES_MAX // set_bytes))
    fns = [case["make"](i) for i in range(sets)]
    # The sets were made on the default stream; the timing stream must not read them before
    # they are written (prefill-sized ids were once read half-made: out-of-range gathers).
    torch.cuda.synchronize()
    small = True  # every workload is timed as graph replays, as kernlab bench does (perf/bench.c)
    stream = torch.cuda.Stream()
    times = []
    with torch.cuda.stream(stream):
        for i in range(min(sets, 8) + 3):
            fns[i % sets]()
        torch.cuda.synchronize()
        if small:
            per_graph = max(sets, 20)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                for i in range(per_graph):
                    fns[i % sets]()
            graph.replay()
            reps = 30
            for _ in range(reps):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(stream)
                graph.replay()
                b.record(stream)
                times.append((a, b, per_graph))
        else:
            reps = 50
            for r in range(reps):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(stream)
                fns[r % sets]()
                b.record(stream)
                times.append((a, b, 1))
    torch.cuda.synchronize()
    us = sorted(1e3 * a.elapsed_time(b) / n for a, b, n in times)
    med = us[len(us) // 2] if len(us) % 2 else 0.5 * (us[len(us) // 2 - 1] + us[len(us) // 2])
    return {"min": us[0], "median": med, "max": us[-1]}, "graph" if small else "events", sets


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", required=True)
    ap.add_argument("--workload")
    ap.add_argument("--json", required=True)
    ap.add_argument("--ceilings", required=True)
    ap.add_argument("--commit", default="unknown")
    args = ap.parse_args()
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
    except Exception as e:  # no PyTorch here: peers are optional
        print(f"peers {args.module}: skipped: PyTorch not usable ({e})", file=sys.stderr)
        return 0
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        mod = importlib.import_module(args.module)
    except ModuleNotFoundError:
        print(f"peers {args.module}: none defined (perf/peers/{args.module}.py)", file=sys.stderr)
        return 0
    ceil = json.load(open(args.ceilings))
    if hasattr(mod, "run"):  # a peer that times itself (allreduce: one process per GPU)
        return mod.run(torch, args, ceil)
    device = {k: ceil[k] for k in ("name", "cc", "sms", "l2_bytes", "copy_gbs", "gemm_tflops")}
    if ceil.get("read_gbs"):
        device["read_gbs"] = ceil["read_gbs"]
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    with open(args.json, "a") as out:
        for case in (c for only in (args.workload.split(",") if args.workload else [None]) for c in mod.cases(torch, only)):
            before = clocks.read(torch)
            t, timing, sets = time_case(torch, case, ceil)
            after = clocks.read(torch)
            s = t["median"] * 1e-6
            gbs = case["bytes"] / s / 1e9
            tflops = case["flops"] / s / 1e12
            chk = case["check"]() if case.get("check") else None
            row = {
                "module": args.module, "variant": case["variant"], "workload": case["workload"],
                "params": case["params"], "device": device, "time_us": t, "bytes": case["bytes"],
                "flops": case["flops"], "gbs": gbs, "bw_frac": gbs / ceil["copy_gbs"], "tflops": tflops,
                "tc_frac": tflops / ceil["gemm_tflops"], "counters": {},
                "check": {"rel_l2": chk[0], "max_abs": chk[1], "pass": bool(chk[2])} if chk else {},
                "gate": None, "throttled": False, "commit": args.commit, "date": today,
                "peer": True, "timing": timing, "input_sets": sets,
                "floor_frac": ceil["launch_us_graph"] / t["median"], "torch": torch.__version__,
            }
            if ceil.get("read_gbs"):
                row["read_frac"] = gbs / ceil["read_gbs"]
            row.update(clocks.row_fields(before, after))
            out.write(json.dumps(row, separators=(",", ":")) + "\n")
            out.flush()
            ok = "ok" if not chk or chk[2] else "FAIL"
            print(f"{case['variant']:<14} {case['workload']:<20} {t['median']:9.2f} {gbs:8.0f} "
                  f"{gbs / ceil['copy_gbs']:7.3f} {row['floor_frac']:5.2f}      -    {ok} (peer)"
                  f"{' throttled' if row['throttled'] else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
