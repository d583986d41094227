/* v1_simd: compare 8 tokens (AVX2) or 4 tokens (SSE2) per instruction, 32 tokens per loop trip.
 *
 * What changed from v0_scalar: instead of one compare and one branch per token, each trip
 * loads 128 bytes of each key (4 x 32-byte AVX2 or 8 x 16-byte SSE2 loads), compares them as
 * int32 lanes, ANDs the results and takes ONE branch on the movemask. Only when a trip sees a
 * difference do we look inside it (ctz of the inverted mask / 4 = the first differing token).
 * This is the shape of glibc's memcmp, minus the ordering (we only need equal/not equal), so
 * on a long shared prefix it should run at memcmp's speed: memcmp_frac close to 1.
 *
 * The path is chosen once, at load time: AVX2 when the CPU (and OS) support it, else SSE2
 * (always present on x86-64), else the scalar loop (other architectures). KL_RADIX_SIMD=sse2 or
 * =scalar in the environment forces a slower path, to measure each rung of the ladder.
 * Tails: the last partial vector is an overlapping load ending exactly at n (never past it:
 * nodes are exactly-sized allocations); tokens before it are already known equal, so the first
 * difference it reports is the right one.
 * Run alone: build/kernlab bench radix --variant v1_simd */
#include <stdlib.h>
#include <string.h>

#include "radix_compare.h"

#include "kernels/variant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* First differing token of a 4-token window whose 16-byte cmpeq movemask is m. */
static inline size_t first_diff4(unsigned m)
{
    return (size_t)__builtin_ctz(~m & 0xFFFFu) >> 2;
}

size_t kl_radix_cmp_sse2(const int32_t *a, const int32_t *b, size_t n)
{
    size_t i = 0;
    /* 16 tokens (64 bytes, one cache line) per trip: four compares, one branch. */
    for (; i + 16 <= n; i += 16) {
        __m128i e0 =
            _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(a + i)), _mm_loadu_si128((const __m128i *)(b + i)));
        __m128i e1 = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(a + i + 4)),
                                     _mm_loadu_si128((const __m128i *)(b + i + 4)));
        __m128i e2 = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(a + i + 8)),
                                     _mm_loadu_si128((const __m128i *)(b + i + 8)));
        __m128i e3 = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(a + i + 12)),
                                     _mm_loadu_si128((const __m128i *)(b + i + 12)));
        __m128i all = _mm_and_si128(_mm_and_si128(e0, e1), _mm_and_si128(e2, e3));
        if ((unsigned)_mm_movemask_epi8(all) != 0xFFFFu) {
            unsigned m;
            if ((m = (unsigned)_mm_movemask_epi8(e0)) != 0xFFFFu) return i + first_diff4(m);
            if ((m = (unsigned)_mm_movemask_epi8(e1)) != 0xFFFFu) return i + 4 + first_diff4(m);
            if ((m = (unsigned)_mm_movemask_epi8(e2)) != 0xFFFFu) return i + 8 + first_diff4(m);
            return i + 12 + first_diff4((unsigned)_mm_movemask_epi8(e3));
        }
    }
    for (; i + 4 <= n; i += 4) {
        unsigned m = (unsigned)_mm_movemask_epi8(
            _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(a + i)), _mm_loadu_si128((const __m128i *)(b + i))));
        if (m != 0xFFFFu) return i + first_diff4(m);
    }
    if (i == n) return n;
    if (n >= 4) { /* overlapping window [n-4, n): its tokens before i are known equal */
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(a + n - 4)),
                                                                 _mm_loadu_si128((const __m128i *)(b + n - 4))));
        return m == 0xFFFFu ? n : n - 4 + first_diff4(m);
    }
    while (i < n && a[i] == b[i])
        i++; /* keys shorter than one vector */
    return i;
}

/* First differing token of an 8-token window whose 32-byte cmpeq movemask is m. */
static inline size_t first_diff8(unsigned m)
{
    return (size_t)__builtin_ctz(~m) >> 2;
}

__attribute__((target("avx2"))) size_t kl_radix_cmp_avx2(const int32_t *a, const int32_t *b, size_t n)
{
    size_t i = 0;
    /* 32 tokens (128 bytes, two cache lines of each key) per trip: enough independent loads
     * in flight to keep both load ports busy, and one well-predicted branch. */
    for (; i + 32 <= n; i += 32) {
        __m256i e0 = _mm256_cmpeq_epi32(_mm256_loadu_si256((const __m256i *)(a + i)),
                                        _mm256_loadu_si256((const __m256i *)(b + i)));
        __m256i e1 = _mm256_cmpeq_epi32(_mm256_loadu_si256((const __m256i *)(a + i + 8)),
                                        _mm256_loadu_si256((const __m256i *)(b + i + 8)));
        __m256i e2 = _mm256_cmpeq_epi32(_mm256_loadu_si256((const __m256i *)(a + i + 16)),
                                        _mm256_loadu_si256((const __m256i *)(b + i + 16)));
        __m256i e3 = _mm256_cmpeq_epi32(_mm256_loadu_si256((const __m256i *)(a + i + 24)),
                                        _mm256_loadu_si256((const __m256i *)(b + i + 24)));
        __m256i all = _mm256_and_si256(_mm256_and_si256(e0, e1), _mm256_and_si256(e2, e3));
        if ((unsigned)_mm256_movemask_epi8(all) != 0xFFFFFFFFu) {
            unsigned m;
            if ((m = (unsigned)_mm256_movemask_epi8(e0)) != 0xFFFFFFFFu) return i + first_diff8(m);
            if ((m = (unsigned)_mm256_movemask_epi8(e1)) != 0xFFFFFFFFu) return i + 8 + first_diff8(m);
            if ((m = (unsigned)_mm256_movemask_epi8(e2)) != 0xFFFFFFFFu) return i + 16 + first_diff8(m);
            return i + 24 + first_diff8((unsigned)_mm256_movemask_epi8(e3));
        }
    }
    for (; i + 8 <= n; i += 8) {
        unsigned m = (unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi32(_mm256_loadu_si256((const __m256i *)(a + i)),
                                                                       _mm256_loadu_si256((const __m256i *)(b + i))));
        if (m != 0xFFFFFFFFu) return i + first_diff8(m);
    }
    if (i == n) return n;
    if (n >= 8) { /* overlapping window [n-8, n) */
        unsigned m = (unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi32(
            _mm256_loadu_si256((const __m256i *)(a + n - 8)), _mm256_loadu_si256((const __m256i *)(b + n - 8))));
        return m == 0xFFFFFFFFu ? n : n - 8 + first_diff8(m);
    }
    return i + kl_radix_cmp_sse2(a + i, b + i, n - i); /* keys shorter than 8 tokens */
}

int kl_radix_cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

#else /* not x86: the scalar loop stands in for both paths */

size_t kl_radix_cmp_sse2(const int32_t *a, const int32_t *b, size_t n)
{
    return kl_radix_cmp_scalar(a, b, n);
}
size_t kl_radix_cmp_avx2(const int32_t *a, const int32_t *b, size_t n)
{
    return kl_radix_cmp_scalar(a, b, n);
}
int kl_radix_cpu_has_avx2(void)
{
    return 0;
}

#endif

static kl_radix_cmp_fn simd_fn;
static const char *simd_name = "scalar";

/* Chosen once before main (a constructor), so the hot call is one indirect jump with no check. */
__attribute__((constructor)) static void pick_simd_path(void)
{
    const char *force = getenv("KL_RADIX_SIMD");
    simd_fn = kl_radix_cmp_scalar;
    simd_name = "scalar";
#if defined(__x86_64__) || defined(__i386__)
    if (force && strcmp(force, "scalar") == 0) return;
    simd_fn = kl_radix_cmp_sse2;
    simd_name = "sse2";
    if (force && strcmp(force, "sse2") == 0) return;
    if (kl_radix_cpu_has_avx2()) {
        simd_fn = kl_radix_cmp_avx2;
        simd_name = "avx2";
    }
#else
    (void)force;
#endif
}

size_t kl_radix_cmp_simd(const int32_t *a, const int32_t *b, size_t n)
{
    if (__builtin_expect(simd_fn == NULL, 0)) pick_simd_path(); /* called before constructors ran */
    return simd_fn(a, b, n);
}

const char *kl_radix_cmp_simd_path(void)
{
    if (!simd_fn) pick_simd_path();
    return simd_name;
}

KL_VARIANT(radix, v1_simd, kl_radix_cmp_simd, .min_cc = 0,
           .summary = "CPU: AVX2/SSE2 key compare, 32 tokens per branch (path chosen at run time)");
