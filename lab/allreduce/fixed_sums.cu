/* The host's run of v21's warp sum (kernels/allreduce/fixed_sums.cuh), for the CPU tests: the same
 * arithmetic, with loops where the warp has redux. */
#include "kernels/allreduce/fixed_sums.cuh"
#include "lab/allreduce/fixed_sums.h"

float kl_ar_fixed_sum32(const float v[32])
{
    uint32_t top = 0, sum = 0;
    for (int i = 0; i < 32; i++)
        top = kl_ar::float_bits(v[i]) > top ? kl_ar::float_bits(v[i]) : top;
    if (kl_ar::fixed_special(top)) return kl_ar::bits_float(top);
    const int e = kl_ar::fixed_exponent(top);
    for (int i = 0; i < 32; i++)
        sum += kl_ar::fixed_part(kl_ar::float_bits(v[i]), e);
    return kl_ar::fixed_value(sum, e);
}
