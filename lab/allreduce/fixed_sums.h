/* The sum of 32 non-negative floats as v21_lamport_add_rmsnorm_integer_sums' warps take it, run on the
 * host (lab/allreduce/fixed_sums.cu) for the CPU tests: exact in fixed point on the scale of the
 * largest, rounded once; an infinite or NaN part gives that part. */
#ifndef KL_ALLREDUCE_FIXED_SUMS_H
#define KL_ALLREDUCE_FIXED_SUMS_H

#ifdef __cplusplus
extern "C" {
#endif

float kl_ar_fixed_sum32(const float v[32]);

#ifdef __cplusplus
}
#endif

#endif
