/* The C ABI of the radix module's variants: one key-comparison function.
 *
 * The radix tree (lab/radix/radix.h) spends its time in one place: comparing the tokens of a
 * cached node with the tokens of the request's key. A variant is that comparison, and every
 * variant drives the same tree (kl_radix_new takes the function), so `kernlab bench radix`
 * compares comparisons and nothing else.
 *
 * Tokens are int32 (golden dtype i4). A variant returns the length of the common prefix of
 * a[0..n) and b[0..n): the index of the first differing token, or n when all n are equal.
 * It must not read past a[n-1] or b[n-1] (nodes are exactly sized allocations; ASan and the
 * fuzzer check this). The tree rounds the result down to whole pages itself. */
#ifndef KL_RADIX_COMPARE_H
#define KL_RADIX_COMPARE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef size_t (*kl_radix_cmp_fn)(const int32_t *a, const int32_t *b, size_t n);

/* The variants' entry points, also callable directly (tests, fuzzer, bench). */
size_t kl_radix_cmp_scalar(const int32_t *a, const int32_t *b, size_t n); /* v0_scalar */
size_t kl_radix_cmp_simd(const int32_t *a, const int32_t *b, size_t n);   /* v1_simd: dispatches */
/* The paths v1_simd chooses between; the tests call each one the CPU supports. */
size_t kl_radix_cmp_sse2(const int32_t *a, const int32_t *b, size_t n);
size_t kl_radix_cmp_avx2(const int32_t *a, const int32_t *b, size_t n);
/* The path kl_radix_cmp_simd runs on this CPU: "avx2", "sse2" or "scalar". */
const char *kl_radix_cmp_simd_path(void);
/* Nonzero when this CPU runs AVX2 (kl_radix_cmp_avx2 may only be called then). */
int kl_radix_cpu_has_avx2(void);

#ifdef __cplusplus
}
#endif
#endif
