#!/usr/bin/env python3
"""Writes OUT/kernels_emu.h: kernels/attention_prefill/mma.cuh with its PTX wrappers (ldmatrix, mma.sync,
cp.async, ex2, the shared-memory address) replaced by the emulated ones below, then hopper.cuh with its
own (wgmma, mbarriers, bulk tensor copies, named barriers, setmaxnreg, fences, the tensor map and the
launch), then the kernel templates of the tensor-core variants, each in a namespace emu_<variant>: each
file's anonymous namespace up to its launcher for v2..v6 (the driver launches those itself), the whole
namespace, launcher included, for the Hopper variants (the driver calls their launcher, whose launch
runs the grid under emulation). The kernels themselves are copied unchanged: the emulation runs their
exact code.
Usage: gen.py SOURCE_DIR OUT_DIR"""
import os
import sys

VARIANTS = ["v2_mma", "v3_swizzle", "v4_cp_async", "v5_longest_first", "v6_gqa_packed"]
HOPPER_VARIANTS = ["v7_wgmma", "v8_warp_specialized", "v9_multicast", "v10_pingpong"]

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
/* The warp's 16 x 16 A operand of an m16n8k16 product (mma.sync, or wgmma from registers), gathered
 * from every lane's fragment by the PTX ISA's table: each lane gets the whole matrix. */
template <typename T> void emu_gather_a(const uint32_t (&a)[4], float (&A)[16][16])
{
    auto &x = emu::g_cta->xchg[emu::wid()];
    const int l = emu::lane();
    for (int i = 0; i < 4; i++) x[l][i] = a[i];
    emu::warp_sync();
    auto lo = [](uint32_t v) { return emu_to_float<T>((uint16_t)(v & 0xffff)); };
    auto hi = [](uint32_t v) { return emu_to_float<T>((uint16_t)(v >> 16)); };
    for (int ln = 0; ln < 32; ln++) {
        const int g = ln / 4, t = ln % 4;
        A[g][2 * t] = lo(x[ln][0]), A[g][2 * t + 1] = hi(x[ln][0]);
        A[g + 8][2 * t] = lo(x[ln][1]), A[g + 8][2 * t + 1] = hi(x[ln][1]);
        A[g][2 * t + 8] = lo(x[ln][2]), A[g][2 * t + 9] = hi(x[ln][2]);
        A[g + 8][2 * t + 8] = lo(x[ln][3]), A[g + 8][2 * t + 9] = hi(x[ln][3]);
    }
    emu::warp_sync();
}
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    float A[16][16], B[16][8];
    emu_gather_a<T>(a, A);
    auto &x = emu::g_cta->xchg[emu::wid()];
    const int l = emu::lane();
    x[l][4] = b0, x[l][5] = b1;
    emu::warp_sync();
    auto lo = [](uint32_t v) { return emu_to_float<T>((uint16_t)(v & 0xffff)); };
    auto hi = [](uint32_t v) { return emu_to_float<T>((uint16_t)(v >> 16)); };
    for (int ln = 0; ln < 32; ln++) {
        const int g = ln / 4, t = ln % 4;
        B[2 * t][g] = lo(x[ln][4]), B[2 * t + 1][g] = hi(x[ln][4]);
        B[2 * t + 8][g] = lo(x[ln][5]), B[2 * t + 9][g] = hi(x[ln][5]);
    }
    emu::warp_sync();
    const int g = l / 4, t = l % 4, rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int e = 0; e < 4; e++)
        for (int k = 0; k < 16; k++) d[e] += A[rows[e]][k] * B[k][cols[e]];
}""",
    # cp.async is deferred like wgmma (shim.h's emu::async_queue): a copy lands at the cp.async.wait_group
    # that covers it, so data read before its wait is stale (the driver's garbage or an older tile).
    "__device__ __forceinline__ void cp_async_16(": """__device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, bool valid)
{
    emu::t_cp_async.open.push_back([dst, src, valid] {
        if (valid) memcpy(emu::g_cta->smem.data() + dst, src, 16);
        else memset(emu::g_cta->smem.data() + dst, 0, 16);
    });
}""",
    "__device__ __forceinline__ void cp_async_4(": """__device__ __forceinline__ void cp_async_4(uint32_t dst, const void *src, bool valid)
{
    emu::t_cp_async.open.push_back([dst, src, valid] {
        if (valid) memcpy(emu::g_cta->smem.data() + dst, src, 4);
        else memset(emu::g_cta->smem.data() + dst, 0, 4);
    });
}""",
    "__device__ __forceinline__ void cp_async_commit()": """__device__ __forceinline__ void cp_async_commit()
{
    emu::t_cp_async.committed.push_back(std::move(emu::t_cp_async.open));
    emu::t_cp_async.open.clear();
}""",
    "template <int N> __device__ __forceinline__ void cp_async_wait()": """template <int N> __device__ __forceinline__ void cp_async_wait()
{
    emu::t_cp_async.run_all_but<N>();
}""",
    "__device__ __forceinline__ float exp2_fast(": "__device__ __forceinline__ float exp2_fast(float x) { return exp2f(x); }",
    # the launcher's <<<>>> is not C++
    # the launch: the grid run under emulation (shim.h), every CTA in turn
    "template <auto Kernel, class... Args>\ncudaError_t launch_kernel_with(": """template <auto Kernel, class... Args>
cudaError_t launch_kernel_with(dim3 grid, int threads, size_t smem, cudaStream_t, Args... args)
{
    if (smem > 227 * 1024) return cudaErrorInvalidValue; /* an H100's limit for one CTA */
    emu::run_grid(grid.x, grid.y, grid.z, (unsigned)threads, smem, [&] { Kernel(args...); });
    return cudaSuccess;
}""",
}

# hopper.cuh: the shared-memory descriptor is decoded as the PTX ISA's "Matrix Descriptor Format" says
# (start >> 4 in bits 0-13, leading byte offset in 16-29, stride byte offset in 32-45, swizzle mode in
# 62-63), element addresses follow the canonical 128-byte-swizzle layouts, and the swizzle XORs address
# bits 4-6 with bits 7-9 of the shared-memory address, for the tensor cores as for the TMA.
HOPPER_EMULATED = {
    # Products are deferred (shim.h's emu::async_queue): issuing one queues it, commit closes a group, and
    # the wait runs every group but the newest N, reading shared memory and writing the accumulators only
    # then, as the tensor cores may do anywhere before it. A kernel that reads an accumulator, or hands a
    # stage back, before the wait that covers its product sees stale values. The wait is .sync.aligned:
    # every lane of the warp is past it together (a warp's lane 0 then hands a stage back for all).
    "template <int N> __device__ __forceinline__ void wgmma_wait()": """template <int N> __device__ __forceinline__ void wgmma_wait()
{
    emu::t_wgmma.run_all_but<N>();
    emu::warp_sync();
}""",
    "__device__ __forceinline__ void wgmma_fence()": "__device__ __forceinline__ void wgmma_fence() {}",
    "__device__ __forceinline__ void wgmma_commit()": """__device__ __forceinline__ void wgmma_commit()
{
    emu::t_wgmma.committed.push_back(std::move(emu::t_wgmma.open));
    emu::t_wgmma.open.clear();
}""",
    "template <typename R, int C> __device__ __forceinline__ void pin(":
        "template <typename R, int C> __device__ __forceinline__ void pin(R (&)[C][4]) {}",
    "template <typename T, int N>\n__device__ __forceinline__ void wgmma_ss(": """struct emu_desc {
    uint32_t start, leading, stride;
};
inline emu_desc emu_decode(uint64_t d)
{
    if ((d >> 62) != 1) emu::fail("wgmma descriptor: only the 128-byte swizzle is emulated", (uint32_t)d);
    emu_desc r{(uint32_t)(d & 0x3FFF) << 4, (uint32_t)((d >> 16) & 0x3FFF) << 4, (uint32_t)((d >> 32) & 0x3FFF) << 4};
    if ((r.start >> 7) & 7) emu::fail("wgmma descriptor: start not at row 0 of a 1024-byte atom", r.start);
    return r;
}
template <typename T> float emu_smem_elem(uint32_t addr)
{
    addr ^= ((addr >> 7) & 7) << 4; /* the 128-byte swizzle */
    if (addr + 2 > emu::g_cta->smem.size()) emu::fail("wgmma operand outside shared memory", addr);
    uint16_t h;
    memcpy(&h, emu::g_cta->smem.data() + addr, 2);
    return mma::emu_to_float<T>(h);
}
/* K-major: element (mn, k), k < 16, of rows 128 bytes long, 8-row groups `stride` apart. */
template <typename T> float emu_kmajor(const emu_desc &d, int mn, int k)
{
    return emu_smem_elem<T>(d.start + (mn / 8) * d.stride + (mn % 8) * 128 + 2 * k);
}
/* MN-major: element (k, mn): 64-column blocks `leading` apart, 8-row groups of k `stride` apart. */
template <typename T> float emu_mnmajor(const emu_desc &d, int k, int mn)
{
    return emu_smem_elem<T>(d.start + (mn / 64) * d.leading + (k / 8) * d.stride + (k % 8) * 128 + 2 * (mn % 64));
}
template <typename T, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t a, uint64_t b, int accumulate)
{
    const emu_desc da = emu_decode(a), db = emu_decode(b);
    const int w = emu::wid() % 4, g = emu::lane() / 4, t = emu::lane() % 4;
    emu::t_wgmma.open.push_back([&d, da, db, accumulate, w, g, t] {
        for (int c = 0; c < N / 8; c++)
            for (int e = 0; e < 4; e++) {
                const int row = 16 * w + g + 8 * (e / 2), col = 8 * c + 2 * t + e % 2;
                float acc = 0.f;
                for (int k = 0; k < 16; k++) acc += emu_kmajor<T>(da, row, k) * emu_kmajor<T>(db, col, k);
                d[c][e] = accumulate ? d[c][e] + acc : acc;
            }
    });
}""",
    "template <typename T, int N>\n__device__ __forceinline__ void wgmma_rs(": """template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t b, int accumulate)
{
    /* A: the warp's 16 rows, an m16n8k16 A fragment in each lane */
    float A[16][16];
    mma::emu_gather_a<T>(a, A);
    const int l = emu::lane();
    const emu_desc db = emu_decode(b);
    const int g = l / 4, t = l % 4;
    std::vector<float> a_rows(&A[0][0], &A[0][0] + 16 * 16); /* the registers as they were at the issue */
    emu::t_wgmma.open.push_back([&d, a_rows, db, accumulate, g, t] {
        for (int c = 0; c < N / 8; c++)
            for (int e = 0; e < 4; e++) {
                const int row = g + 8 * (e / 2), col = 8 * c + 2 * t + e % 2;
                float acc = 0.f;
                for (int k = 0; k < 16; k++) acc += a_rows[row * 16 + k] * emu_mnmajor<T>(db, k, col);
                d[c][e] = accumulate ? d[c][e] + acc : acc;
            }
    });
}""",
    "__device__ __forceinline__ void fence_async_smem()": "__device__ __forceinline__ void fence_async_smem() {}",
    "__device__ __forceinline__ void named_sync(": """__device__ __forceinline__ void named_sync(int id, int threads)
{
    emu::named_barrier(id, threads).arrive_and_wait();
}""",
    "__device__ __forceinline__ void named_arrive(": """__device__ __forceinline__ void named_arrive(int id, int threads)
{
    (void)emu::named_barrier(id, threads).arrive();
}""",
    "__device__ __forceinline__ void mbar_init(": """__device__ __forceinline__ void mbar_init(uint64_t *bar, int count)
{
    emu::mbar_init(smem_addr(bar), count);
}""",
    "__device__ __forceinline__ void mbar_init_fence()": "__device__ __forceinline__ void mbar_init_fence() {}",
    "__device__ __forceinline__ void mbar_arrive(": """__device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
    emu::mbar_update(smem_addr(bar), 0, true);
}""",
    "__device__ __forceinline__ void mbar_arrive_expect(": """__device__ __forceinline__ void mbar_arrive_expect(uint64_t *bar, uint32_t bytes)
{
    emu::mbar_update(smem_addr(bar), bytes, true);
}""",
    "__device__ __forceinline__ void mbar_wait(": """__device__ __forceinline__ void mbar_wait(uint64_t *bar, int parity)
{
    emu::mbar_wait(smem_addr(bar), parity);
}""",
    # the tensor map: the emulated make_cache_map below stores what the copy needs in its opaque bytes
    "__device__ __forceinline__ void tma_load_3d(": """struct emu_map {
    const unsigned char *base;
    uint64_t dims[3], strides[2];
    uint32_t box[3], elem_bytes;
};
static_assert(sizeof(emu_map) <= sizeof(CUtensorMap), "fits the opaque map");
/* The box into CTA c's shared memory at dst, its bytes counted on c's mbarrier at offset bar. */
inline void emu_tma_copy(emu::cta &c, uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2, uint32_t bar)
{
    emu_map m;
    memcpy(&m, map, sizeof m);
    if (dst % 128) emu::fail("bulk tensor copy: destination not 128-byte aligned", dst);
    const uint32_t bytes = m.box[0] * m.box[1] * m.box[2] * m.elem_bytes;
    if (dst + bytes > c.smem.size()) emu::fail("bulk tensor copy past the end of shared memory", dst);
    uint32_t at = dst;
    for (uint32_t z = 0; z < m.box[2]; z++)
        for (uint32_t y = 0; y < m.box[1]; y++)
            for (uint32_t x = 0; x < m.box[0]; x++, at += m.elem_bytes) {
                const int64_t gx = (int64_t)c0 + x, gy = (int64_t)c1 + y, gz = (int64_t)c2 + z;
                const uint32_t phys = at ^ (((at >> 7) & 7) << 4);
                unsigned char *s = c.smem.data() + phys;
                if (gx < 0 || gy < 0 || gz < 0 || gx >= (int64_t)m.dims[0] || gy >= (int64_t)m.dims[1] ||
                    gz >= (int64_t)m.dims[2])
                    memset(s, 0, m.elem_bytes); /* out of bounds: zeros */
                else memcpy(s, m.base + gx * m.elem_bytes + gy * m.strides[0] + gz * m.strides[1], m.elem_bytes);
            }
    emu::mbar_update(c, bar, -(int64_t)bytes, false);
}
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2, uint64_t *bar)
{
    emu_tma_copy(*emu::g_cta, dst, map, c0, c1, c2, smem_addr(bar));
}""",
    # a cluster's CTAs run at the same time (shim.h's run_grid): a multicast copy lands in each CTA of
    # the mask and counts on each one's mbarrier; a remote arrival goes to the partner's barrier
    "__device__ __forceinline__ void tma_load_3d_multicast(": """__device__ __forceinline__ void tma_load_3d_multicast(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2,
                                                      uint64_t *bar, uint16_t cta_mask)
{
    emu::cluster &cl = *emu::g_cta->cl;
    if (cta_mask >> cl.ctas.size()) emu::fail("multicast to a CTA outside the cluster", cta_mask);
    for (size_t r = 0; r < cl.ctas.size(); r++)
        if (cta_mask >> r & 1) emu_tma_copy(*cl.ctas[r], dst, map, c0, c1, c2, smem_addr(bar));
}""",
    "__device__ __forceinline__ uint32_t cluster_rank()": """__device__ __forceinline__ uint32_t cluster_rank() { return emu::g_cta->rank; }""",
    "__device__ __forceinline__ void cluster_sync()": """__device__ __forceinline__ void cluster_sync()
{
    emu::g_cta->cl->sync->arrive_and_wait();
}""",
    "__device__ __forceinline__ void mbar_arrive_cluster(": """__device__ __forceinline__ void mbar_arrive_cluster(uint64_t *bar, uint32_t rank)
{
    emu::cluster &cl = *emu::g_cta->cl;
    if (rank >= cl.ctas.size()) emu::fail("mapa: no such CTA in the cluster", rank);
    emu::mbar_update(*cl.ctas[rank], smem_addr(bar), 0, true);
}""",
    "template <auto Kernel, class... Args>\ncudaError_t launch_cluster_kernel_with(": """template <auto Kernel, class... Args>
cudaError_t launch_cluster_kernel_with(dim3 grid, unsigned cluster_z, int threads, size_t smem, cudaStream_t,
                                       Args... args)
{
    if (smem > 227 * 1024) return cudaErrorInvalidValue; /* an H100's limit for one CTA */
    if (grid.z % cluster_z) return cudaErrorInvalidValue;  /* cudaLaunchKernelEx's rule */
    emu::run_grid(grid.x, grid.y, grid.z, (unsigned)threads, smem, [&] { Kernel(args...); }, cluster_z);
    return cudaSuccess;
}""",
    "template <int R> __device__ __forceinline__ void release_registers_to()":
        "template <int R> __device__ __forceinline__ void release_registers_to() {}",
    "template <int R> __device__ __forceinline__ void claim_registers_to()":
        "template <int R> __device__ __forceinline__ void claim_registers_to() {}",
    "inline cudaError_t make_cache_map(": """inline cudaError_t make_cache_map(CUtensorMap *map, const void *cache, bool, int64_t head_dim, int64_t kv_heads,
                                  int64_t slots, int box_rows)
{
    emu_map m{(const unsigned char *)cache, {(uint64_t)head_dim, (uint64_t)kv_heads, (uint64_t)slots},
              {(uint64_t)head_dim * 2, (uint64_t)(kv_heads * head_dim * 2)}, {64, 1, (uint32_t)box_rows}, 2};
    if (box_rows < 1 || box_rows > 256) return cudaErrorInvalidValue; /* the driver's limit on a box dimension */
    memset(map, 0, sizeof *map);
    memcpy(map, &m, sizeof m);
    return cudaSuccess;
}""",
    # a persistent grid of 3 CTAs: every CTA walks several work tiles in the tests
    "inline int sm_count()": "inline int sm_count() { return 3; }",
}


def replace_function(text, head, new):
    """Replaces the function starting at `head` (through its matching closing brace) by `new`."""
    i = text.find(head)
    if i < 0:
        sys.exit(f"gen.py: '{head.strip()}' not found: update lab/attention_prefill/emulate/gen.py")
    k = text.index("{", i)
    depth = 0
    while True:
        depth += {"{": 1, "}": -1}.get(text[k], 0)
        if depth == 0:
            break
        k += 1
    return text[:i] + new + text[k + 1:]


def strip_asm_macros(text):
    """Drops the #define blocks (with their continuation lines) of hopper.cuh's wgmma asm statements."""
    out, skipping = [], False
    for line in text.split("\n"):
        if line.startswith("#define KL_WGMMA") or line.startswith("#define KL_ACC"):
            skipping = True
        if not skipping:
            out.append(line)
        if skipping and not line.rstrip().endswith("\\"):
            skipping = False
    return "\n".join(out)


def variant_body(src, name, with_launcher):
    s = open(os.path.join(src, "kernels/attention_prefill", name + ".cu")).read()
    start = s.index("namespace {") + len("namespace {")
    end = s.rindex("} // namespace") if with_launcher else s.index("cudaError_t launch(")
    body = s[start:end]
    for shared in ("extern __shared__ __align__(128) unsigned char smem_raw[];", "extern __shared__ unsigned char smem_raw[];"):
        body = body.replace(shared, "unsigned char *smem_raw = emu::g_cta->smem.data();")
    if "emu::g_cta->smem.data()" not in body:
        sys.exit(f"gen.py: {name}.cu declares no 'extern __shared__ ... smem_raw[]': update lab/attention_prefill/emulate/gen.py")
    return "namespace emu_%s {%s}" % (name, body)


def emulated_header(src, name, replacements, drop_include):
    """kernels/attention_prefill/<name> with its #include of drop_include removed (its text comes first in
    the generated file) and the functions of `replacements` swapped for their emulated versions; it must
    then hold no inline PTX."""
    text = open(os.path.join(src, "kernels/attention_prefill", name)).read()
    if drop_include:
        text = text.replace('#include "kernels/attention_prefill/%s"' % drop_include, "")
    text = strip_asm_macros(text)
    for head, new in replacements.items():
        text = replace_function(text, head, new)
    if "asm(" in text or "asm volatile" in text:
        sys.exit(f"gen.py: {name} has inline PTX gen.py does not emulate: update lab/attention_prefill/emulate/gen.py")
    return text


def main():
    src, out = sys.argv[1], sys.argv[2]
    mma = emulated_header(src, "mma.cuh", EMULATED, None)
    hopper = emulated_header(src, "hopper.cuh", HOPPER_EMULATED, "mma.cuh")
    ring = emulated_header(src, "kv_ring.cuh", {}, "hopper.cuh")  # the warp-specialized variants' producer
    parts = ["// Generated by lab/attention_prefill/emulate/gen.py: do not edit.", "#pragma once", '#include "shim.h"', mma,
             hopper, ring]
    parts += [variant_body(src, v, False) for v in VARIANTS]
    parts += [variant_body(src, v, True) for v in HOPPER_VARIANTS]
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "kernels_emu.h")
    text = "\n".join(parts) + "\n"
    if not os.path.exists(path) or open(path).read() != text:
        open(path, "w").write(text)


if __name__ == "__main__":
    main()
