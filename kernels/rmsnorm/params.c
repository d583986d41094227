/* The argument checks every rmsnorm launcher starts with, and whether rows can move as 16-byte vectors. */
#include <stdio.h>

#include "rmsnorm.h"

cudaError_t kl_rmsnorm_check_params(const struct kl_rmsnorm_params *p, const char *variant)
{
    const char *bad = NULL;
    if (p->num_tokens < 0) bad = "num_tokens < 0";
    else if (p->hidden < 1) bad = "hidden < 1";
    else if (p->hidden > (1 << 24)) bad = "hidden > 2^24";
    else if (p->num_tokens > 0 && (!p->x || !p->weight || !p->out)) bad = "x, weight and out must be set";
    else if (p->num_tokens > 0 && p->residual && !p->residual_out) bad = "residual given without residual_out";
    else if (!(p->dtype == KL_F32 || p->dtype == KL_F16 || p->dtype == KL_BF16)) bad = "dtype must be fp32, fp16 or bf16";
    else if (!(p->eps >= 0)) bad = "eps must be >= 0";
    if (!bad) return cudaSuccess;
    fprintf(stderr, "rmsnorm %s: %s (num_tokens=%lld hidden=%lld)\n", variant, bad, (long long)p->num_tokens,
            (long long)p->hidden);
    return cudaErrorInvalidValue;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

bool kl_rmsnorm_vec16_ok(const struct kl_rmsnorm_params *p)
{
    return p->hidden % (16 / (int64_t)kl_dtype_size(p->dtype)) == 0 && aligned16(p->x) && aligned16(p->weight) &&
           aligned16(p->out) && (!p->residual || (aligned16(p->residual) && aligned16(p->residual_out)));
}
