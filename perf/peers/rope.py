"""rope peers: an eager PyTorch RoPE with a cos/sin cache, the way vLLM's forward_native writes it
(gather the cos/sin rows of the positions, rotate the halves in float32, copy back in place), on
the lab's workloads: 32 q + 8 kv heads x 128 bf16, neox, positions random in [0, 131072).
Bytes are the lab's model (q and k read + written, positions, one cos/sin row per distinct
position), so the fraction is comparable with ours; eager PyTorch moves several times that."""

Q_HEADS, KV_HEADS, DIM, ROT, MAX_POS, BASE = 32, 8, 128, 128, 131072, 500000.0
WORKLOADS = {"decode-64": 64, "prefill-16k": 16384}


def rope_(torch, x, cos, sin):
    """Rotates x [n, heads, DIM] in place; cos, sin [n, 1, ROT/2] float32."""
    half = ROT // 2
    x1, x2 = x[..., :half].float(), x[..., half:ROT].float()
    x[..., :ROT] = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def cases(torch, only):
    cache = None
    for name, n in WORKLOADS.items():
        if only and only != name:
            continue
        if cache is None:
            inv = BASE ** (-torch.arange(0, ROT, 2, dtype=torch.float64, device="cuda") / ROT)
            ang = torch.arange(MAX_POS, dtype=torch.float64, device="cuda")[:, None] * inv[None, :]
            cache = torch.cat((ang.cos(), ang.sin()), dim=1).float()
        g = torch.Generator(device="cuda").manual_seed(7)
        pos = torch.randint(0, MAX_POS, (n,), device="cuda", generator=g)
        distinct = int(pos.unique().numel())
        nbytes = 2 * n * (Q_HEADS + KV_HEADS) * DIM * 2 + n * 8 + distinct * ROT * 4
        sets = {}

        def make(i, n=n, g=g, pos=pos, cache=cache, sets=sets):
            q = torch.randn(n, Q_HEADS, DIM, device="cuda", generator=g).to(torch.bfloat16)
            k = torch.randn(n, KV_HEADS, DIM, device="cuda", generator=g).to(torch.bfloat16)
            sets[i] = (q.clone(), k.clone())

            def run():
                cs = cache.index_select(0, pos)
                cos, sin = cs[:, None, : ROT // 2], cs[:, None, ROT // 2:]
                rope_(torch, q, cos, sin)
                rope_(torch, k, cos, sin)
            return run

        def check(pos=pos, cache=cache, sets=sets):
            q0, k0 = sets[0]
            q, k = q0.clone(), k0.clone()
            cs = cache.index_select(0, pos)
            cos, sin = cs[:, None, : ROT // 2], cs[:, None, ROT // 2:]
            rope_(torch, q, cos, sin)
            rope_(torch, k, cos, sin)
            worst = (0.0, 0.0, True)
            for got, x in ((q, q0), (k, k0)):
                x = x.double()
                c, s = cos.double(), sin.double()
                x1, x2 = x[..., : ROT // 2], x[..., ROT // 2:]
                ref = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
                rel = ((got.double() - ref).norm() / ref.norm()).item()
                mx = (got.double() - ref).abs().max().item()
                worst = (max(worst[0], rel), max(worst[1], mx), worst[2] and rel <= 2 ** -8)
            return worst

        yield {"variant": "torch.rope_eager", "workload": name,
               "params": {"num_tokens": n, "num_q_heads": Q_HEADS, "num_kv_heads": KV_HEADS, "head_dim": DIM,
                          "rotary_dim": ROT, "max_pos": MAX_POS, "distinct_positions": distinct,
                          "is_neox": True, "dtype": "bf16"},
               "bytes": nbytes, "flops": 6 * n * (Q_HEADS + KV_HEADS) * (ROT // 2), "set_bytes": nbytes,
               "make": make, "check": check}
