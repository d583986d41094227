/* Sums of non-negative floats as integers (v21_lamport_add_rmsnorm_integer_sums): a group of parts takes
 * the scale of its largest, each part becomes an integer on that scale, the integers add up exactly in
 * any order, and the sum becomes one float again. The pieces are __host__ __device__ so the CPU tests
 * run the same arithmetic (lab/allreduce/fixed_sums.cu). At most 32 parts a group: each integer is
 * below 2^27, so 32 of them stay below 2^32. */
#pragma once

#include <stdint.h>
#include <string.h>

namespace kl_ar
{

__host__ __device__ inline uint32_t float_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

__host__ __device__ inline float bits_float(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* Whether the group's largest part (its bits, top: the largest bits, as non-negative floats order as
 * their bits do) is infinite or NaN: then the group's sum is that value, as a float sum would be. */
__host__ __device__ inline bool fixed_special(uint32_t top)
{
    return top >= 0x7f800000u;
}

/* The group's scale: the exponent field of its largest part, 1 for zero and subnormal parts (whose
 * scale is 2^-126 too). */
__host__ __device__ inline int fixed_exponent(uint32_t top)
{
    const int e = (int)(top >> 23);
    return e > 1 ? e : 1;
}

/* A part (its bits) as an integer of the scale of exponent field e: value * 2^(153 - e), the bits below
 * 1 dropped. The largest part's mantissa lands in [2^26, 2^27); a part 2^31 times smaller is 0. */
__host__ __device__ inline uint32_t fixed_part(uint32_t bits, int e)
{
    const int ev = bits >> 23 ? (int)(bits >> 23) : 1;
    const uint32_t mant = (bits & 0x7fffffu) | (bits >> 23 ? 0x800000u : 0u);
    const int shift = ev - e + 3; /* at most 3 */
    return shift >= 0 ? mant << shift : -shift < 32 ? mant >> -shift : 0u;
}

/* The sum of a group's integers as a float: sum * 2^(e - 153), rounded once (the conversion), the
 * power of two applied as two exact factors, 2^-26 and 2^(e - 127). */
__host__ __device__ inline float fixed_value(uint32_t sum, int e)
{
    return (float)sum * 0x1p-26f * bits_float((uint32_t)e << 23);
}

} // namespace kl_ar
