"""store peers: what eager PyTorch does to write K/V into a paged cache: two index_copy_ calls
(K, then V) on the caches viewed as [num_slots, kv_heads * head_dim]. Workloads as the lab's:
8 kv heads x 128 bf16 into a 1M-slot cache, 64 or 8192 tokens, sequential or random slots.
Bytes are the lab's model (k, v, slots read + the rows written; the cache is never read). The
caches (2 GB each) are shared by every input set; sets differ in k, v and slots. Every token has
a valid slot here (index_copy_ has no "skip slot -1"; vLLM's reshape_and_cache does)."""

HEADS, DIM, SLOTS = 8, 128, 1 << 20
WORKLOADS = {"decode-64-sequential": (64, True), "decode-64-random": (64, False),
             "prefill-8k-sequential": (8192, True), "prefill-8k-random": (8192, False)}


def cases(torch, only):
    k_cache = v_cache = None
    for name, (n, sequential) in WORKLOADS.items():
        if only and only != name:
            continue
        if k_cache is None:
            k_cache = torch.zeros(SLOTS, HEADS * DIM, device="cuda", dtype=torch.bfloat16)
            v_cache = torch.zeros(SLOTS, HEADS * DIM, device="cuda", dtype=torch.bfloat16)
        g = torch.Generator(device="cuda").manual_seed(7)
        row = HEADS * DIM * 2
        nbytes = n * 8 + 4 * n * row
        sets = {}

        def make(i, n=n, sequential=sequential, g=g, sets=sets, kc=k_cache, vc=v_cache):
            k = torch.randn(n, HEADS * DIM, device="cuda", generator=g).to(torch.bfloat16)
            v = torch.randn(n, HEADS * DIM, device="cuda", generator=g).to(torch.bfloat16)
            if sequential:
                start = int(torch.randint(0, SLOTS - n + 1, (1,), device="cuda", generator=g).item())
                slots = torch.arange(start, start + n, device="cuda", dtype=torch.int64)
            else:
                slots = torch.randperm(SLOTS, device="cuda", generator=g)[:n]
            sets[i] = (k, v, slots)

            def run():
                kc.index_copy_(0, slots, k)
                vc.index_copy_(0, slots, v)
            return run

        def check(sets=sets, kc=k_cache, vc=v_cache):
            k, v, slots = sets[0]
            kc.index_copy_(0, slots, k)
            vc.index_copy_(0, slots, v)
            ok = torch.equal(kc[slots], k) and torch.equal(vc[slots], v)
            return (0.0 if ok else 1.0), (0.0 if ok else float("inf")), ok

        yield {"variant": "torch.index_copy_", "workload": name,
               "params": {"num_tokens": n, "num_kv_heads": HEADS, "head_dim": DIM, "num_slots": SLOTS,
                          "dtype": "bf16", "slots": "sequential" if sequential else "random"},
               "bytes": nbytes, "flops": 0, "set_bytes": nbytes, "make": make, "check": check}
