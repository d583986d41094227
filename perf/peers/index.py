"""index peers: torch.nn.functional.embedding on the lab's workloads (Llama-3.1-8B's 128256 x 4096
bf16 table, random ids). Bytes are the lab's model (ids + the gathered rows read + out written),
so the fraction is comparable with ours. The table is allocated once and shared by every input
set; sets differ in their ids (random ids into 1 GB already defeat the L2). Ids are int64, the
dtype F.embedding is documented for (the 4 extra bytes a token are not counted)."""

WORKLOADS = {"decode-64": (64, 128256, 4096), "prefill-8k": (8192, 128256, 4096)}


def cases(torch, only):
    F = torch.nn.functional
    for name, (n, vocab, hidden) in WORKLOADS.items():
        if only and only != name:
            continue
        g = torch.Generator(device="cuda").manual_seed(7)
        table = torch.randn(vocab, hidden, device="cuda", generator=g).to(torch.bfloat16)
        nbytes = n * 4 + 2 * n * hidden * 2
        sets = {}

        def make(i, n=n, vocab=vocab, table=table, g=g, sets=sets):
            ids = torch.randint(0, vocab, (n,), device="cuda", generator=g, dtype=torch.int64)
            sets[i] = ids

            def run():
                return F.embedding(ids, table)
            return run

        def check(table=table, sets=sets):
            ids = sets[0]
            got = F.embedding(ids, table)
            ok = torch.equal(got, table[ids])  # data movement: bit-exact
            return (0.0 if ok else 1.0), (0.0 if ok else float("inf")), ok

        yield {"variant": "torch.embedding", "workload": name,
               "params": {"num_tokens": n, "vocab": vocab, "hidden": hidden, "vocab_start": 0, "dtype": "bf16"},
               "bytes": nbytes, "flops": 0, "set_bytes": nbytes, "make": make, "check": check}
