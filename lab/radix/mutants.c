/* Deliberately wrong radix compares, linked into the tests only: the goldens and the check
 * must flag every one. Each is a realistic way to get the key compare wrong:
 *   skips_last_token     loops to n - 1 and calls the rest equal (a fencepost)
 *   drops_vector_tail    compares whole 8-token vectors only; the last n % 8 tokens are
 *                        assumed equal (a SIMD loop without its tail)
 *   counts_the_mismatch  returns the index one past the first difference
 *   compares_low_16_bits tokens compared as uint16 (ids stored in 16 bits; Llama 3 has 128k) */
#include <string.h>

#include "kernels/radix/radix_compare.h"
#include "lab/core/registry.h"

static size_t skips_last_token(const int32_t *a, const int32_t *b, size_t n)
{
    size_t i = 0;
    while (i + 1 < n && a[i] == b[i])
        i++;
    return i + 1 >= n ? n : i;
}

static size_t drops_vector_tail(const int32_t *a, const int32_t *b, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        if (memcmp(a + i, b + i, 8 * sizeof *a) != 0)
            for (size_t k = i;; k++)
                if (a[k] != b[k]) return k;
    return n;
}

static size_t counts_the_mismatch(const int32_t *a, const int32_t *b, size_t n)
{
    size_t i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i < n ? i + 1 : n;
}

static size_t compares_low_16_bits(const int32_t *a, const int32_t *b, size_t n)
{
    size_t i = 0;
    while (i < n && (uint16_t)a[i] == (uint16_t)b[i])
        i++;
    return i;
}

KL_VARIANT(radix, m_skips_last_token, skips_last_token, .min_cc = 0, .summary = "mutant: fencepost", .mutant = 1);
KL_VARIANT(radix, m_drops_vector_tail, drops_vector_tail, .min_cc = 0, .summary = "mutant: no SIMD tail", .mutant = 1);
KL_VARIANT(radix, m_counts_the_mismatch, counts_the_mismatch, .min_cc = 0, .summary = "mutant: off by one",
           .mutant = 1);
KL_VARIANT(radix, m_compares_low_16_bits, compares_low_16_bits, .min_cc = 0, .summary = "mutant: 16-bit ids",
           .mutant = 1);
