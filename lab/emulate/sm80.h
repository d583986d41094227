/* The emulated wrappers of kernels/ptx_sm80.cuh: gen.py removes every function of that header whose
 * body holds inline PTX and includes this file in its place (inside namespace kl::ptx), so the names
 * and signatures must stay those of sm80.cuh. Each takes the caller's source site as a trailing
 * default argument, for the diagnostics (emulator.h). */

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr, ::emu::site emu_at = EMU_HERE)
{
    ::emu::ldmatrix(r, addr, false, emu_at);
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr, ::emu::site emu_at = EMU_HERE)
{
    ::emu::ldmatrix(r, addr, true, emu_at);
}
/* A warp-wide transpose of one 8 x 8 b16 matrix in the mma fragment layout (runtime.cpp). */
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x, ::emu::site emu_at = EMU_HERE)
{
    return ::emu::movmatrix_trans(x, emu_at);
}
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                          ::emu::site emu_at = EMU_HERE)
{
    ::emu::mma_16816(d, a, b0, b1, std::is_same<T, __nv_bfloat16>::value, emu_at);
}
/* cp.async lands at the cp.async.wait_group that covers it, never before. */
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, bool valid, ::emu::site emu_at = EMU_HERE)
{
    ::emu::cp_async(dst, src, 16, valid, emu_at);
}
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void *src, bool valid, ::emu::site emu_at = EMU_HERE)
{
    ::emu::cp_async(dst, src, 4, valid, emu_at);
}
__device__ __forceinline__ void cp_async_commit(::emu::site emu_at = EMU_HERE) { ::emu::cp_async_commit(emu_at); }
template <int N> __device__ __forceinline__ void cp_async_wait(::emu::site emu_at = EMU_HERE)
{
    ::emu::cp_async_wait(N, emu_at);
}
/* ex2.approx.ftz: subnormal inputs and results flushed to zero */
__device__ __forceinline__ float exp2_fast(float x)
{
    if (std::fabs(x) < 1.17549435e-38f) x = 0.f;
    const float y = exp2f(x);
    return y < 1.17549435e-38f ? 0.f : y;
}
/* %globaltimer: the host's monotonic clock in nanoseconds (the emulation's CTAs run one after another,
 * so only the order of one CTA's stamps means anything) */
__device__ __forceinline__ unsigned long long globaltimer()
{
    return (unsigned long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
