/* The emulated wrappers of kernels/ptx_sm90.cuh (wgmma, fences, named barriers, mbarriers, bulk and bulk tensor
 * copies, clusters, setmaxnreg): gen.py removes every function of that header whose body holds inline
 * PTX and includes this file in its place (inside namespace kl::ptx), so the names and signatures must
 * stay those of sm90.cuh. Each takes the caller's source site as a trailing default argument; gen.py
 * passes wgmma's operand names (the text of the call's arguments). */

__device__ __forceinline__ void wgmma_fence(::emu::site emu_at = EMU_HERE) { ::emu::wgmma_fence(emu_at); }
__device__ __forceinline__ void wgmma_commit(::emu::site emu_at = EMU_HERE) { ::emu::wgmma_commit(emu_at); }
template <int N> __device__ __forceinline__ void wgmma_wait(::emu::site emu_at = EMU_HERE)
{
    ::emu::wgmma_wait(N, emu_at);
}
/* The compiler-ordering pin has nothing to do here: the emulation's operands live in memory. */
template <typename R, int C> __device__ __forceinline__ void pin(R (&)[C][4]) {}
template <typename T, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t a, uint64_t b, int accumulate,
                                         const char *d_name = "d", ::emu::site emu_at = EMU_HERE)
{
    ::emu::wgmma(true, N, std::is_same<T, __nv_bfloat16>::value, &d[0][0], nullptr, a, b, accumulate, d_name, nullptr,
                 emu_at);
}
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t b, int accumulate,
                                         const char *d_name = "d", const char *a_name = "a",
                                         ::emu::site emu_at = EMU_HERE)
{
    ::emu::wgmma(false, N, std::is_same<T, __nv_bfloat16>::value, &d[0][0], a, 0, b, accumulate, d_name, a_name,
                 emu_at);
}
__device__ __forceinline__ void fence_async_smem(::emu::site emu_at = EMU_HERE) { ::emu::fence_proxy_async(emu_at); }
/* Global memory has one view here: the emulated bulk copy reads what the stores left. */
__device__ __forceinline__ void fence_async_global() {}
__device__ __forceinline__ void named_sync(int id, int threads, ::emu::site emu_at = EMU_HERE)
{
    ::emu::named_sync(id, threads, emu_at);
}
__device__ __forceinline__ void named_arrive(int id, int threads, ::emu::site emu_at = EMU_HERE)
{
    ::emu::named_arrive(id, threads, emu_at);
}
__device__ __forceinline__ void mbar_init(uint64_t *bar, int count, ::emu::site emu_at = EMU_HERE)
{
    ::emu::mbar_init(smem_addr(bar), count, emu_at);
}
__device__ __forceinline__ void mbar_init_fence() {}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar, ::emu::site emu_at = EMU_HERE)
{
    ::emu::mbar_arrive(::emu::cur->c->rank, smem_addr(bar), 0, emu_at);
}
__device__ __forceinline__ void mbar_arrive_expect(uint64_t *bar, uint32_t bytes, ::emu::site emu_at = EMU_HERE)
{
    ::emu::mbar_arrive(::emu::cur->c->rank, smem_addr(bar), bytes, emu_at);
}
/* The thread's cp.async copies land, then it arrives: the hardware counts the arrival once they have landed. */
__device__ __forceinline__ void cp_async_mbar_arrive(uint64_t *bar, ::emu::site emu_at = EMU_HERE)
{
    ::emu::cp_async_mbar_arrive(smem_addr(bar), emu_at);
}
__device__ __forceinline__ void mbar_wait(uint64_t *bar, int parity, ::emu::site emu_at = EMU_HERE)
{
    ::emu::mbar_wait(smem_addr(bar), parity, emu_at);
}
/* A copy lands when the mbarrier phase counting its bytes completes (emulator.h). */
__device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint64_t *bar,
                                          ::emu::site emu_at = EMU_HERE)
{
    ::emu::bulk_load(dst, src, bytes, smem_addr(bar), emu_at);
}
/* The policy decides only where lines live in L2: the emulated copy lands as bulk_load's. */
__device__ __forceinline__ void bulk_load_hint(uint32_t dst, const void *src, uint32_t bytes, uint64_t *bar,
                                               uint64_t policy, ::emu::site emu_at = EMU_HERE)
{
    (void)policy;
    ::emu::bulk_load(dst, src, bytes, smem_addr(bar), emu_at);
}
/* A bulk store reads the async proxy's view of shared memory at once and lands at once (emulator.h), so its
 * group's waits have nothing left to wait for. */
__device__ __forceinline__ void bulk_store(void *dst, uint32_t src, uint32_t bytes, ::emu::site emu_at = EMU_HERE)
{
    ::emu::bulk_store(dst, src, bytes, emu_at);
}
__device__ __forceinline__ void bulk_commit() {}
template <int N> __device__ __forceinline__ void bulk_wait_read() {}
__device__ __forceinline__ void bulk_wait_all() {}
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2, uint64_t *bar,
                                            ::emu::site emu_at = EMU_HERE)
{
    ::emu::tma_load(dst, map, c0, c1, c2, smem_addr(bar), (uint16_t)(1u << ::emu::cur->c->rank), emu_at);
}
/* A cache policy decides only where lines live in L2: the emulated copy lands the same. */
__device__ __forceinline__ uint64_t l2_evict_first_policy() { return 0; }
__device__ __forceinline__ void cp_async_16_hint(uint32_t dst, const void *src, uint64_t policy,
                                                 ::emu::site emu_at = EMU_HERE)
{
    (void)policy;
    ::emu::cp_async(dst, src, 16, true, emu_at);
}
__device__ __forceinline__ void tma_load_3d_hint(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2,
                                                 uint64_t *bar, uint64_t policy, ::emu::site emu_at = EMU_HERE)
{
    (void)policy;
    ::emu::tma_load(dst, map, c0, c1, c2, smem_addr(bar), (uint16_t)(1u << ::emu::cur->c->rank), emu_at);
}
/* Lands nothing: the emulation records the box, and the CTA must load it later (emulator.h's tma_prefetch). */
__device__ __forceinline__ void tma_prefetch_3d(const CUtensorMap *map, int c0, int c1, int c2,
                                                ::emu::site emu_at = EMU_HERE)
{
    ::emu::tma_prefetch(map, c0, c1, c2, emu_at);
}
__device__ __forceinline__ uint32_t cluster_rank() { return ::emu::cur->c->rank; }
__device__ __forceinline__ void cluster_sync(::emu::site emu_at = EMU_HERE) { ::emu::cluster_sync(emu_at); }
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t *bar, uint32_t rank, ::emu::site emu_at = EMU_HERE)
{
    ::emu::mbar_arrive(rank, smem_addr(bar), 0, emu_at);
}
__device__ __forceinline__ float ld_cluster_f32(uint32_t addr, uint32_t rank, ::emu::site emu_at = EMU_HERE)
{
    return ::emu::ld_cluster_f32(rank, addr, emu_at);
}
__device__ __forceinline__ void tma_load_3d_multicast(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2,
                                                      uint64_t *bar, uint16_t cta_mask, ::emu::site emu_at = EMU_HERE)
{
    ::emu::tma_load(dst, map, c0, c1, c2, smem_addr(bar), cta_mask, emu_at);
}
template <int R> __device__ __forceinline__ void release_registers_to() {}
template <int R> __device__ __forceinline__ void claim_registers_to() {}
/* An emulated launch is the only grid running: nothing to wait for, nobody to release. */
__device__ __forceinline__ void pdl_release() {}
__device__ __forceinline__ void pdl_wait() {}
/* cvt.rn.f16x2.e4m3x2: two E4M3 codes (the low byte first) as two fp16, the low one in the low half,
 * exact (bias 7, subnormals m 2^-9, 0x7f/0xff NaN, -0 kept). */
__device__ __forceinline__ uint32_t cvt_e4m3x2_f16x2(uint16_t x, ::emu::site emu_at = EMU_HERE)
{
    (void)emu_at;
    uint32_t r = 0;
    for (int i = 0; i < 2; i++) {
        const uint32_t c = (x >> (8 * i)) & 0xFFu, e = (c >> 3) & 0xFu, m = c & 7u;
        const float v = e == 15 && m == 7 ? NAN : e ? std::ldexp((float)(8 + m), (int)e - 10) : std::ldexp((float)m, -9);
        const __half h = __float2half_rn(c & 0x80u ? -v : v);
        uint16_t bits;
        std::memcpy(&bits, &h, 2);
        r |= (uint32_t)bits << (16 * i);
    }
    return r;
}
