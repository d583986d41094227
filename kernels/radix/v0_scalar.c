/* v0_scalar: the key comparison as the textbook writes it, one token per iteration.
 *
 * Why it is the baseline: it is obviously right, and it shows what the tree costs besides the
 * comparison. Compilers do not vectorize it (the loop exits early on the first difference,
 * and GCC 12 / clang 14 do not vectorize early-exit loops), so it runs at about one token per
 * cycle: ~4 bytes/cycle against the 32-64 bytes/cycle memcmp reaches on data in L1/L2.
 * On a long shared prefix that gap is the whole story of v1_simd.
 *
 * Work: one CPU thread; the radix tree calls this once per node it walks through.
 * Bound: the compare loop (L1/L2-resident keys) or DRAM latency/bandwidth (cold tree).
 * Run alone: build/kernlab bench radix --variant v0_scalar */
#include "radix_compare.h"

#include "kernels/variant.h"

size_t kl_radix_cmp_scalar(const int32_t *a, const int32_t *b, size_t n)
{
    size_t i = 0;
    /* One load from each side, one compare, one branch per token. The branch is
     * well-predicted (equal, equal, ..., different once), so the cost is the loop's
     * dependency chain on i plus two loads: ~1 token per cycle. */
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

KL_VARIANT(radix, v0_scalar, kl_radix_cmp_scalar, .min_cc = 0,
           .summary = "CPU: token-by-token key compare (the baseline the tree is measured with)");
