"""attention_prefill peers: torch.nn.functional.scaled_dot_product_attention with the FLASH (FlashAttention-2),
CUDNN and EFFICIENT (memory-efficient, xformers-style) backends on the lab's workloads: 32 qo / 8 kv heads x 128,
bf16, K/V contiguous per request (SDPA has no paged layout, so the peers skip the page gather ours does).
- GQA: enable_gqa=True where the backend takes it; otherwise K/V expanded to 32 heads before timing (the row's
  params say "gqa": "enable_gqa" or "expanded"; expanding is outside the timed call).
- Causal: torch's is_causal is top-left aligned, which is right only for q_len == kv_len; the extend shape
  (512 new tokens over 4096 keys) passes torch.nn.attention.bias.causal_lower_right (params "mask").
- Ragged batches: one SDPA call per request, in a loop inside the timed region (params "ragged": "loop").
FLOPs and bytes are the lab's models (perf.c), so tc_frac compares like with like. causal-8k-p1 has no peer row:
without pages it is causal-8k. The check recomputes 32 query
rows (first and last of each request, more at random) in float64 and asks rel_l2 <= 2^-7 (bf16 output and bf16 P)."""

QO, KV, DIM = 32, 8, 128
# ragged-b16: the same draw as lab/attention_prefill/perf.c (q_len = kv_len)
RAGGED = [2461, 2196, 1102, 2693, 1703, 2865, 2655, 276, 383, 2700, 1712, 3421, 199, 829, 1916, 2167]
WORKLOADS = {
    "causal-8k": ([8192], [8192], True),
    "causal-b4x2k": ([2048] * 4, [2048] * 4, True),
    "extend-b4-q512-kv4k": ([512] * 4, [4096] * 4, True),
    "ragged-b16": (RAGGED, RAGGED, True),
    "noncausal-4k": ([4096], [4096], False),
}
BACKENDS = ["FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"]


def visible(causal, q_len, kv_len, i):
    return min(kv_len, max(0, kv_len - q_len + i + 1)) if causal else kv_len


def models(q_lens, kv_lens, causal):
    pairs = sum(sum(visible(causal, q, kv, i) for i in range(q)) for q, kv in zip(q_lens, kv_lens))
    pages = sum((kv + 15) // 16 for kv in kv_lens)
    b = len(q_lens)
    nbytes = sum(q_lens) * QO * DIM * 2 * 2 + sum(kv_lens) * KV * DIM * 2 * 2 + sum(q_lens) * QO * 4 + \
        4 * (2 * (b + 1) + b + pages)
    return 4.0 * DIM * QO * pairs, nbytes


def cases(torch, only):
    F = torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    for name, (q_lens, kv_lens, causal) in WORKLOADS.items():
        if only and only != name:
            continue
        flops, nbytes = models(q_lens, kv_lens, causal)
        for backend in BACKENDS:
            kind = getattr(SDPBackend, backend)
            g = torch.Generator(device="cuda").manual_seed(11)
            sets, how = {}, {}

            def call(q, k, v, q_len, kv_len, gqa, kind=kind, causal=causal):
                """One request: q [1, QO, q_len, DIM], k/v [1, KV or QO, kv_len, DIM]."""
                with sdpa_kernel(kind):
                    if causal and q_len != kv_len:
                        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(q_len, kv_len),
                                                              enable_gqa=gqa)
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

            def make(i, g=g, sets=sets, how=how, call=call, q_lens=q_lens, kv_lens=kv_lens):
                reqs = []
                for q_len, kv_len in zip(q_lens, kv_lens):
                    q = torch.randn(1, QO, q_len, DIM, device="cuda", generator=g).to(torch.bfloat16)
                    k = torch.randn(1, KV, kv_len, DIM, device="cuda", generator=g).to(torch.bfloat16)
                    v = torch.randn(1, KV, kv_len, DIM, device="cuda", generator=g).to(torch.bfloat16)
                    reqs.append((q, k, v, q_len, kv_len))
                if "gqa" not in how:  # does this backend take GQA as it is? (decided once, on the first request)
                    q, k, v, q_len, kv_len = reqs[0]
                    try:
                        call(q, k, v, q_len, kv_len, True)
                        torch.cuda.synchronize()
                        how["gqa"] = "enable_gqa"
                    except RuntimeError:
                        how["gqa"] = "expanded"
                if how["gqa"] == "expanded":
                    reqs = [(q, k.repeat_interleave(QO // KV, dim=1), v.repeat_interleave(QO // KV, dim=1), ql, kl)
                            for q, k, v, ql, kl in reqs]
                sets[i] = reqs
                gqa = how["gqa"] == "enable_gqa"

                def run():
                    for q, k, v, q_len, kv_len in reqs:
                        call(q, k, v, q_len, kv_len, gqa)
                return run

            def check(sets=sets, how=how, call=call):
                worst = (0.0, 0.0, True)
                gen = torch.Generator().manual_seed(3)
                for q, k, v, q_len, kv_len in sets[0]:
                    got = call(q, k, v, q_len, kv_len, how["gqa"] == "enable_gqa").double()
                    rows = sorted({0, q_len - 1, *torch.randint(0, q_len, (6,), generator=gen).tolist()})
                    kk = k.double().repeat_interleave(QO // k.shape[1], dim=1)
                    vv = v.double().repeat_interleave(QO // v.shape[1], dim=1)
                    for i in rows:
                        n = visible(causal, q_len, kv_len, i)
                        s = (q[0, :, i:i + 1, :].double() @ kk[0, :, :n, :].transpose(-1, -2)) / DIM ** 0.5
                        ref = torch.softmax(s, dim=-1) @ vv[0, :, :n, :]  # [QO, 1, DIM]
                        err = got[0, :, i:i + 1, :] - ref
                        rel = (err.norm() / ref.norm()).item()
                        worst = (max(worst[0], rel), max(worst[1], err.abs().max().item()), worst[2] and rel <= 2 ** -7)
                return worst

            # Probe: a backend that refuses this shape (no kernel for it on this GPU) is left out with a note.
            try:
                probe = make(-1)
                probe()
                torch.cuda.synchronize()
            except RuntimeError as e:
                import sys
                print(f"peers attention_prefill {name}: {backend} not usable: {str(e).splitlines()[0][:160]}",
                      file=sys.stderr)
                continue
            sets.pop(-1, None)
            kv_heads = KV if how["gqa"] == "enable_gqa" else QO
            set_bytes = sum(q * QO * DIM * 2 * 2 + kv * kv_heads * DIM * 2 * 2 for q, kv in zip(q_lens, kv_lens))
            params = {"batch": len(q_lens), "num_qo_heads": QO, "num_kv_heads": KV, "head_dim": DIM,
                      "causal": causal, "dtype": "bf16", "kv": "contiguous per request", "gqa": how["gqa"]}
            if len(set(q_lens)) > 1:
                params["ragged"] = "loop: one SDPA call per request"
                params["lengths"] = "q_len = kv_len per request, 16 drawn from 128..4096: 199..3421"
            else:
                params["q_len"], params["kv_len"] = q_lens[0], kv_lens[0]
            if causal and q_lens[0] != kv_lens[0]:
                params["mask"] = "causal_lower_right"
            yield {"variant": "torch.sdpa." + backend.split("_")[0].lower(), "workload": name, "params": params,
                   "bytes": nbytes, "flops": flops, "set_bytes": set_bytes, "make": make, "check": check}
