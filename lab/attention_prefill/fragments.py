#!/usr/bin/env python3
"""Emulates one warp of kernels/ptx_sm80.cuh (and the tiles of kernels/attention_prefill/smem_tiles.cuh) on the CPU: ldmatrix (plain and .trans) and
mma.sync m16n8k16 as the PTX ISA defines their fragments, fed the same lane -> shared-memory address
formulas as qk_tile and pv_tile, for every tile shape (head_dim 64/128/256) and both layouts; checks
S = Q K^T and O = P V against numpy, then counts the bank groups each ldmatrix phase and cp.async
phase touches (8-way conflicts in plain rows, none with the XOR swizzle).
It checks how the index formulas compose, not the PTX definitions themselves (those come from the
ISA's fragment tables, copied into ldmatrix_x4 and mma below). Keep it in step with them.
Run: python3 lab/attention_prefill/fragments.py   (needs numpy; not part of ctest)
"""
import numpy as np
rng = np.random.default_rng(0)

def offset_xor(D):
    return lambda row, chunk: row * D + ((chunk ^ (row & 7)) << 3)
def offset_plain(D):
    return lambda row, chunk: row * D + chunk * 8

def store_tile(smem, M, off):
    rows, D = M.shape
    for r in range(rows):
        for c in range(D // 8):
            base = off(r, c)
            smem[base:base + 8] = M[r, 8 * c:8 * c + 8]

def ldmatrix_x4(smem, addrs, trans=False):
    # addrs[lane] = element offset of row lane%8 of matrix lane//8
    regs = np.zeros((32, 4, 2))
    for i in range(4):
        M = np.array([smem[addrs[8 * i + j]:addrs[8 * i + j] + 8] for j in range(8)])  # 8x8
        for l in range(32):
            if not trans:
                regs[l, i] = M[l // 4, 2 * (l % 4)], M[l // 4, 2 * (l % 4) + 1]
            else:
                regs[l, i] = M[2 * (l % 4), l // 4], M[2 * (l % 4) + 1, l // 4]
    return regs

def mma(c, a, b0, b1):
    # c: [32][4], a: [32][4][2], b0/b1: [32][2]
    A = np.zeros((16, 16)); B = np.zeros((16, 8))
    for l in range(32):
        g, t = l // 4, l % 4
        A[g, 2*t:2*t+2] = a[l, 0]; A[g+8, 2*t:2*t+2] = a[l, 1]
        A[g, 2*t+8:2*t+10] = a[l, 2]; A[g+8, 2*t+8:2*t+10] = a[l, 3]
        B[2*t:2*t+2, g] = b0[l]; B[2*t+8:2*t+10, g] = b1[l]
    C = A @ B
    for l in range(32):
        g, t = l // 4, l % 4
        c[l, 0] += C[g, 2*t]; c[l, 1] += C[g, 2*t+1]; c[l, 2] += C[g+8, 2*t]; c[l, 3] += C[g+8, 2*t+1]

def qk_tile(smem, q_base, k_base, off, D, MT, NT, warp_row0):
    s = np.zeros((MT, NT, 32, 4))
    lanes = np.arange(32)
    for kd in range(D // 16):
        a = []
        for mt in range(MT):
            addrs = [q_base + off(warp_row0 + 16*mt + (l % 8) + 8*((l//8) % 2), 2*kd + l//16) for l in lanes]
            a.append(ldmatrix_x4(smem, addrs))
        for np_ in range(NT // 2):
            addrs = [k_base + off(16*np_ + (l % 8) + 8*(l//16), 2*kd + (l//8) % 2) for l in lanes]
            b = ldmatrix_x4(smem, addrs)
            for mt in range(MT):
                mma(s[mt, 2*np_], a[mt], b[:, 0], b[:, 1])
                mma(s[mt, 2*np_+1], a[mt], b[:, 2], b[:, 3])
    return s

def pv_tile(smem, v_base, off, D, MT, NT, p):
    o = np.zeros((MT, D // 8, 32, 4))
    lanes = np.arange(32)
    for kk in range(NT // 2):
        a = np.zeros((MT, 32, 4, 2))
        for mt in range(MT):
            for l in lanes:
                a[mt, l, 0] = p[mt, 2*kk, l, 0], p[mt, 2*kk, l, 1]
                a[mt, l, 1] = p[mt, 2*kk, l, 2], p[mt, 2*kk, l, 3]
                a[mt, l, 2] = p[mt, 2*kk+1, l, 0], p[mt, 2*kk+1, l, 1]
                a[mt, l, 3] = p[mt, 2*kk+1, l, 2], p[mt, 2*kk+1, l, 3]
        for dp in range(D // 16):
            addrs = [v_base + off(16*kk + (l % 8) + 8*((l//8) % 2), 2*dp + l//16) for l in lanes]
            b = ldmatrix_x4(smem, addrs, trans=True)
            for mt in range(MT):
                mma(o[mt, 2*dp], a[mt], b[:, 0], b[:, 1])
                mma(o[mt, 2*dp+1], a[mt], b[:, 2], b[:, 3])
    return o

def frag_to_matrix(x, MT, NT, warp_row0):
    # x[mt][nt][lane][e] -> (row, col) dict
    M = {}
    for mt in range(MT):
        for nt in range(NT):
            for l in range(32):
                g, t = l // 4, l % 4
                for e in range(4):
                    M[(warp_row0 + 16*mt + g + 8*(e//2), 8*nt + 2*t + e % 2)] = x[mt, nt, l, e]
    return M

for D, MT, BN in [(64, 2, 64), (128, 2, 64), (256, 1, 32)]:
    for layout in ['xor', 'plain']:
        off = offset_xor(D) if layout == 'xor' else offset_plain(D)
        BM = 16 * MT * 4
        NT = BN // 8
        Q = rng.standard_normal((BM, D)); K = rng.standard_normal((BN, D)); V = rng.standard_normal((BN, D))
        smem = np.zeros(BM * D + 2 * BN * D)
        store_tile(smem[:BM*D], Q, off)
        kb = BM * D; vb = BM * D + BN * D
        Ks = np.zeros(BN * D); store_tile(Ks, K, off); smem[kb:kb+BN*D] = Ks
        Vs = np.zeros(BN * D); store_tile(Vs, V, off); smem[vb:vb+BN*D] = Vs
        for warp in range(4):
            w0 = warp * 16 * MT
            s = qk_tile(smem, 0, kb, off, D, MT, NT, w0)
            Sref = Q @ K.T
            M = frag_to_matrix(s, MT, NT, w0)
            err = max(abs(v - Sref[r, c]) for (r, c), v in M.items())
            assert len(M) == 16 * MT * BN, len(M)
            P = rng.standard_normal((MT, NT, 32, 4))
            o = pv_tile(smem, vb, off, D, MT, NT, P)
            Pm = np.zeros((BM, BN))
            for (r, c), v in frag_to_matrix(P, MT, NT, w0).items(): Pm[r, c] = v
            Oref = Pm @ V
            Mo = frag_to_matrix(o, MT, D // 8, w0)
            err2 = max(abs(v - Oref[r, c]) for (r, c), v in Mo.items())
            assert err < 1e-9 and err2 < 1e-9, (D, layout, warp, err, err2)
        print("D", D, layout, "ok")

# Bank groups (16 bytes = 4 banks) of the 8 rows of each ldmatrix matrix: distinct under the XOR.
def conflicts(addr_fn, D, layout):
    off = offset_xor(D) if layout == 'xor' else offset_plain(D)
    worst = 1
    for kd in range(D // 16):
        for base_row in (0, 16, 32):
            addrs = addr_fn(off, kd, base_row)
            for i in range(4):
                groups = [(addrs[8*i + j] * 2 // 16) % 8 for j in range(8)]
                worst = max(worst, 8 - len(set(groups)) + 1)
    return worst
q_addr = lambda off, kd, r0: [off(r0 + (l % 8) + 8*((l//8) % 2), 2*kd + l//16) for l in range(32)]
k_addr = lambda off, kd, r0: [off(r0 + (l % 8) + 8*(l//16), 2*kd + (l//8) % 2) for l in range(32)]
for D in (64, 128, 256):
    for layout in ('plain', 'xor'):
        print(D, layout, 'worst ways', conflicts(q_addr, D, layout), conflicts(k_addr, D, layout))
# cp.async writes: copy_plan: 8 threads a row, thread t of 8 takes chunk t (+8k); a phase of 8 threads = one row
for D in (64, 128, 256):
    off = offset_xor(D)
    worst = 0
    for row in range(16):
        for k in range(D // 64):
            groups = [(off(row, t + 8*k) * 2 // 16) % 8 for t in range(8)]
            worst = max(worst, 8 - len(set(groups)) + 1)
    print('cp.async', D, 'worst ways', worst)
