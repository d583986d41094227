"""attention_decode peers: torch's scaled_dot_product_attention with the FLASH, CUDNN and
EFFICIENT backends, on the same shapes with K/V laid out contiguously ([batch, kv_heads,
kv_len, head_dim]): none of them reads a page table, so they do the same work on the same
bytes without the indirection. GQA through enable_gqa=True where the backend takes it, else
K/V expanded as a strided view (say so in params). The ragged batch runs as one call per
request (captured in one CUDA graph), since padding would read the padding.
The -qN workloads verify N draft tokens per request: q [batch, heads, N, head_dim] with the causal
mask aligned to the end of the keys (query i sees keys j <= kv_len - N + i), given to SDPA as
torch.nn.attention.bias.causal_lower_right (is_causal=True aligns to the start, a different mask).
A backend that cannot take that mask prints why and gives no row."""
import math

QO, KV, D = 32, 8, 128
# name: (batch, kv_len or the longest for ragged, ragged, query tokens per request)
WORKLOADS = {"b64-kv8k-p16": (64, 8192, False, 1), "b32-kv4k-p1": (32, 4096, False, 1),
             "b1-kv32k-p16": (1, 32768, False, 1), "b128-kv1k-p16": (128, 1024, False, 1),
             "ragged-b64-p16": (64, 16384, True, 1), "b8-kv512-p16": (8, 512, False, 1),
             "b64-kv8k-p16-q4": (64, 8192, False, 4), "b16-kv2k-p16-q8": (16, 2048, False, 8)}
RAGGED_SEED = 20261123


def ragged_lens(batch, longest):
    """The lab's lengths for the ragged workload: xoshiro256** as lab/core/tensor.c draws them."""
    mask = (1 << 64) - 1

    def splitmix(x):
        x = (x + 0x9E3779B97F4A7C15) & mask
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return x, z ^ (z >> 31)

    x, s = RAGGED_SEED, []
    for _ in range(4):
        x, z = splitmix(x)
        s.append(z)

    def rotl(v, k):
        return ((v << k) | (v >> (64 - k))) & mask

    def nxt():
        r = (rotl((s[1] * 5) & mask, 7) * 9) & mask
        t = (s[1] << 17) & mask
        s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45)
        return r

    return [1 + nxt() % longest for _ in range(batch)]


def cases(torch, only):
    F = torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"FLASH": SDPBackend.FLASH_ATTENTION, "CUDNN": SDPBackend.CUDNN_ATTENTION,
                "EFFICIENT": SDPBackend.EFFICIENT_ATTENTION}
    from torch.nn.attention.bias import causal_lower_right
    for name, (batch, longest, ragged, n_q) in WORKLOADS.items():
        if only and only != name:
            continue
        lens = ragged_lens(batch, longest) if ragged else [longest] * batch
        tokens = sum(lens)
        rows = batch * n_q  # KV read once whatever n_q; q, out and lse once per query row
        nbytes = tokens * KV * D * 2 * 2 + 2 * rows * QO * D * 2 + rows * QO * 4
        flops = 4 * (n_q * tokens - batch * n_q * (n_q - 1) // 2) * D * QO
        mask = causal_lower_right(n_q, longest) if n_q > 1 else None
        for label, backend in backends.items():
            g = torch.Generator(device="cuda").manual_seed(11)
            sets = {}

            def attend(q, k, v, backend=backend, mask=mask):
                with sdpa_kernel(backend):
                    try:
                        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True), "enable_gqa"
                    except (RuntimeError, TypeError):
                        grp = QO // KV  # a strided view: no copy, but every kv head read per qo head
                        ke = k.unsqueeze(2).expand(-1, -1, grp, -1, -1).reshape(k.shape[0], QO, k.shape[2], D)
                        ve = v.unsqueeze(2).expand(-1, -1, grp, -1, -1).reshape(v.shape[0], QO, v.shape[2], D)
                        return F.scaled_dot_product_attention(q, ke, ve, attn_mask=mask), "expanded"

            def make(i, lens=lens, ragged=ragged, g=g, sets=sets, attend=attend, n_q=n_q):
                q = torch.randn(len(lens), QO, n_q, D, device="cuda", generator=g).to(torch.bfloat16)
                if ragged:
                    ks = [torch.randn(1, KV, n, D, device="cuda", generator=g).to(torch.bfloat16) for n in lens]
                    vs = [torch.randn(1, KV, n, D, device="cuda", generator=g).to(torch.bfloat16) for n in lens]
                    sets[i] = (q, ks, vs)
                    return lambda: [attend(q[b:b + 1], ks[b], vs[b]) for b in range(len(lens))]
                k = torch.randn(len(lens), KV, lens[0], D, device="cuda", generator=g).to(torch.bfloat16)
                v = torch.randn(len(lens), KV, lens[0], D, device="cuda", generator=g).to(torch.bfloat16)
                sets[i] = (q, [k], [v])
                return lambda: attend(q, k, v)

            def check(sets=sets, ragged=ragged, attend=attend, n_q=n_q):
                q, ks, vs = sets[0]
                k, v = (ks[0], vs[0])
                q0 = q[:1]
                got, _ = attend(q0, k[:1], v[:1])
                qd, kd, vd = q0.double(), k[:1].double().repeat_interleave(QO // KV, 1), v[:1].double().repeat_interleave(QO // KV, 1)
                s = (qd @ kd.transpose(-1, -2)) / math.sqrt(D)
                n = k.shape[2]  # query i of n_q sees keys j <= n - n_q + i
                seen = torch.arange(n, device=s.device)[None, :] <= (n - n_q + torch.arange(n_q, device=s.device))[:, None]
                s = s.masked_fill(~seen, float("-inf"))
                ref = torch.softmax(s, -1) @ vd
                rel = ((got.double() - ref).norm() / ref.norm()).item()
                n = k.shape[2]
                bound = (qd.norm(dim=-1).max() * kd.norm(dim=-1).max()).item() / math.sqrt(D)
                limit = 2 ** -8 + 2 * (math.sqrt(D) + 8) * 2 ** -24 * bound + 2 ** -21 + 2 * math.sqrt(n) * 2 ** -24
                return rel, (got.double() - ref).abs().max().item(), rel <= limit  # lab/core/compare.c's rel_l2

            probe = {}
            try:
                fn = make(-1)
                out = fn()
                probe["gqa"] = (out[0] if ragged else out)[1]
                del sets[-1]
            except Exception as e:  # this backend cannot run the shape here: no row, say why
                print(f"peers attention_decode: torch SDPA {label} on {name}: {str(e).splitlines()[0][:160]}")
                continue
            params = {"batch": batch, "kv_tokens": tokens, "num_qo_heads": QO, "num_kv_heads": KV,
                      "head_dim": D, "dtype": "bf16", "kv_layout": "contiguous (no page table)",
                      "gqa": probe["gqa"], "ragged": "one call per request" if ragged else "no"}
            if n_q > 1:
                params["q_len"], params["mask"] = n_q, "causal_lower_right"
            yield {"variant": f"torch.sdpa.{label}", "workload": name, "params": params,
                   "bytes": nbytes, "flops": flops, "set_bytes": nbytes, "make": make, "check": check}
