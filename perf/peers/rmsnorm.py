"""rmsnorm peers: torch.nn.functional.rms_norm, and for the fused form what eager PyTorch does
without a fused kernel: the add, then F.rms_norm (two kernels, the sum round-trips DRAM).
Bytes are the lab's model of the fused minimum, so the fraction shows what the fusion saves."""

WORKLOADS = {"decode-64": (64, 4096, False), "prefill-16k": (16384, 4096, False),
             "decode-64-add": (64, 4096, True), "prefill-16k-add": (16384, 4096, True)}
EPS = 1e-6


def cases(torch, only):
    F = torch.nn.functional
    for name, (n, h, fused) in WORKLOADS.items():
        if only and only != name:
            continue
        g = torch.Generator(device="cuda").manual_seed(7)
        weight = (1 + 0.5 * torch.randn(h, device="cuda", generator=g)).to(torch.bfloat16)
        elem = n * h * 2
        nbytes = (4 if fused else 2) * elem + h * 2
        sets = {}

        def make(i, n=n, h=h, fused=fused, g=g, weight=weight, sets=sets):
            x = torch.randn(n, h, device="cuda", generator=g).to(torch.bfloat16)
            r = torch.randn(n, h, device="cuda", generator=g).to(torch.bfloat16) if fused else None
            sets[i] = (x, r)
            if fused:
                def run():
                    s = x + r
                    return F.rms_norm(s, (h,), weight, EPS), s
            else:
                def run():
                    return F.rms_norm(x, (h,), weight, EPS)
            return run

        def check(h=h, fused=fused, weight=weight, sets=sets):
            x, r = sets[0]
            s = x + r if fused else x
            got = F.rms_norm(s, (h,), weight, EPS).double()
            s64 = x.double() + r.double() if fused else x.double()
            ref = s64 * torch.rsqrt(s64.pow(2).mean(-1, keepdim=True) + EPS) * weight.double()
            rel = ((got - ref).norm() / ref.norm()).item()
            return rel, (got - ref).abs().max().item(), rel <= 2 ** -8  # bf16 rel_l2 bound (compare.c)

        yield {"variant": "torch.add+rms_norm" if fused else "torch.rms_norm", "workload": name,
               "params": {"num_tokens": n, "hidden": h, "dtype": "bf16", "fused_add": fused},
               "bytes": nbytes, "flops": (5 if fused else 4) * n * h, "set_bytes": nbytes,
               "make": make, "check": check}
