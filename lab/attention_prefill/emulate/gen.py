#!/usr/bin/env python3
"""Writes OUT/kernels_emu.h: kernels/attention_prefill/mma.cuh with its PTX wrappers (ldmatrix, mma.sync,
cp.async, ex2, the shared-memory address) replaced by the emulated ones below, then the kernel templates of
the tensor-core variants (each file's anonymous namespace up to its launcher), each in a namespace
emu_<variant>. The kernels themselves are copied unchanged: the emulation runs their exact code.
Usage: gen.py SOURCE_DIR OUT_DIR"""
import os
import sys

VARIANTS = ["v2_mma", "v3_swizzle", "v4_cp_async", "v5_longest_first", "v6_gqa_packed"]

EMULATED = {
    "__device__ __forceinline__ uint32_t smem_addr(": """__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)((const unsigned char *)p - emu::g_cta->smem.data());
}""",
    # ldmatrix: lane l gave the address of row l % 8 of matrix l / 8; register i of lane l gets matrix i's
    # (row l / 4, cols 2 (l % 4), +1), or with .trans (rows 2 (l % 4), +1; col l / 4).
    "__device__ __forceinline__ void ldmatrix_x4(": """__device__ __forceinline__ void ldmatrix_x4_emu(uint32_t (&r)[4], uint32_t addr, bool trans)
{
    auto &x = emu::g_cta->xchg[emu::wid()];
    const int l = emu::lane();
    const unsigned char *s = emu::g_cta->smem.data();
    x[l][0] = addr;
    emu::warp_sync();
    for (int i = 0; i < 4; i++) {
        uint16_t e[2];
        for (int k = 0; k < 2; k++) {
            if (!trans) memcpy(&e[k], s + x[8 * i + l / 4][0] + 2 * (2 * (l % 4) + k), 2);
            else memcpy(&e[k], s + x[8 * i + 2 * (l % 4) + k][0] + 2 * (l / 4), 2);
        }
        r[i] = e[0] | (uint32_t)e[1] << 16;
    }
    emu::warp_sync();
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) { ldmatrix_x4_emu(r, addr, false); }""",
    "__device__ __forceinline__ void ldmatrix_x4_trans(": """__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr)
{
    ldmatrix_x4_emu(r, addr, true);
}""",
    # mma.sync m16n8k16: the warp's A (16 x 16) and B (16 x 8) assembled from every lane's fragments.
    "template <typename T>\n__device__ __forceinline__ void mma_16816(": """template <typename T> float emu_to_float(uint16_t h)
{
    T v;
    memcpy(&v, &h, 2);
    if constexpr (std::is_same<T, __nv_bfloat16>::value) return __bfloat162float(v);
    else return __half2float(v);
}
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    auto &x = emu::g_cta->xchg[emu::wid()];
    const int l = emu::lane();
    for (int i = 0; i < 4; i++) x[l][i] = a[i];
    x[l][4] = b0, x[l][5] = b1;
    emu::warp_sync();
    float A[16][16], B[16][8];
    auto lo = [](uint32_t v) { return emu_to_float<T>((uint16_t)(v & 0xffff)); };
    auto hi = [](uint32_t v) { return emu_to_float<T>((uint16_t)(v >> 16)); };
    for (int ln = 0; ln < 32; ln++) {
        const int g = ln / 4, t = ln % 4;
        A[g][2 * t] = lo(x[ln][0]), A[g][2 * t + 1] = hi(x[ln][0]);
        A[g + 8][2 * t] = lo(x[ln][1]), A[g + 8][2 * t + 1] = hi(x[ln][1]);
        A[g][2 * t + 8] = lo(x[ln][2]), A[g][2 * t + 9] = hi(x[ln][2]);
        A[g + 8][2 * t + 8] = lo(x[ln][3]), A[g + 8][2 * t + 9] = hi(x[ln][3]);
        B[2 * t][g] = lo(x[ln][4]), B[2 * t + 1][g] = hi(x[ln][4]);
        B[2 * t + 8][g] = lo(x[ln][5]), B[2 * t + 9][g] = hi(x[ln][5]);
    }
    emu::warp_sync();
    const int g = l / 4, t = l % 4, rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int e = 0; e < 4; e++)
        for (int k = 0; k < 16; k++) d[e] += A[rows[e]][k] * B[k][cols[e]];
}""",
    "__device__ __forceinline__ void cp_async_16(": """__device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, bool valid)
{
    if (valid) memcpy(emu::g_cta->smem.data() + dst, src, 16);
    else memset(emu::g_cta->smem.data() + dst, 0, 16);
}""",
    "__device__ __forceinline__ void cp_async_4(": """__device__ __forceinline__ void cp_async_4(uint32_t dst, const void *src, bool valid)
{
    if (valid) memcpy(emu::g_cta->smem.data() + dst, src, 4);
    else memset(emu::g_cta->smem.data() + dst, 0, 4);
}""",
    "__device__ __forceinline__ void cp_async_commit()": "__device__ __forceinline__ void cp_async_commit() {}",
    "template <int N> __device__ __forceinline__ void cp_async_wait()":
        "template <int N> __device__ __forceinline__ void cp_async_wait() {}",
    "__device__ __forceinline__ float exp2_fast(": "__device__ __forceinline__ float exp2_fast(float x) { return exp2f(x); }",
    # the launcher's <<<>>> is not C++
    "template <auto Kernel, class... Args>\ncudaError_t launch_kernel(": "",
}


def replace_function(text, head, new):
    """Replaces the function starting at `head` (through its matching closing brace) by `new`."""
    i = text.find(head)
    if i < 0:
        sys.exit(f"gen.py: '{head.strip()}' not found in mma.cuh: update lab/attention_prefill/emulate/gen.py")
    k = text.index("{", i)
    depth = 0
    while True:
        depth += {"{": 1, "}": -1}.get(text[k], 0)
        if depth == 0:
            break
        k += 1
    return text[:i] + new + text[k + 1:]


def main():
    src, out = sys.argv[1], sys.argv[2]
    mma = open(os.path.join(src, "kernels/attention_prefill/mma.cuh")).read()
    for head, new in EMULATED.items():
        mma = replace_function(mma, head, new)
    if "asm(" in mma or "asm volatile" in mma:
        sys.exit("gen.py: mma.cuh has inline PTX gen.py does not emulate: update lab/attention_prefill/emulate/gen.py")
    parts = ["// Generated by lab/attention_prefill/emulate/gen.py: do not edit.", "#pragma once", '#include "shim.h"', mma]
    for v in VARIANTS:
        s = open(os.path.join(src, "kernels/attention_prefill", v + ".cu")).read()
        body = s[s.index("namespace {") + len("namespace {"):s.index("cudaError_t launch(")]
        shared = "extern __shared__ __align__(128) unsigned char smem_raw[];"
        if shared not in body:
            sys.exit(f"gen.py: {v}.cu has no '{shared}': update lab/attention_prefill/emulate/gen.py")
        parts.append("namespace emu_%s {%s}" % (v, body.replace(shared, "unsigned char *smem_raw = emu::g_cta->smem.data();")))
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "kernels_emu.h")
    text = "\n".join(parts) + "\n"
    if not os.path.exists(path) or open(path).read() != text:
        open(path, "w").write(text)


if __name__ == "__main__":
    main()
