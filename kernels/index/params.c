/* The argument checks every index launcher starts with. */
#include <stdio.h>

#include "index.h"

#include "kernels/dtype.h"

cudaError_t kl_index_check_params(const struct kl_index_params *p, const char *variant)
{
    const char *bad = NULL;
    if (p->num_tokens < 0) bad = "num_tokens < 0";
    else if (p->num_tokens > INT32_MAX) bad = "num_tokens > 2^31 - 1";
    else if (p->hidden < 1) bad = "hidden < 1";
    else if (p->hidden > (1 << 24)) bad = "hidden > 2^24";
    else if (p->vocab < 0) bad = "vocab < 0";
    else if (p->num_tokens > 0 && (!p->ids || !p->out)) bad = "ids and out must be set";
    else if (p->num_tokens > 0 && p->vocab > 0 && !p->table) bad = "table must be set when vocab > 0";
    else if (!(p->dtype == KL_F32 || p->dtype == KL_F16 || p->dtype == KL_BF16)) bad = "dtype must be fp32, fp16 or bf16";
    if (!bad) return cudaSuccess;
    fprintf(stderr, "index %s: %s (num_tokens=%lld vocab=%lld hidden=%lld vocab_start=%lld)\n", variant, bad,
            (long long)p->num_tokens, (long long)p->vocab, (long long)p->hidden, (long long)p->vocab_start);
    return cudaErrorInvalidValue;
}

int kl_index_unit_bytes(const struct kl_index_params *p)
{
    const int64_t row = p->hidden * (int64_t)kl_dtype_size(p->dtype);
    const uintptr_t addr = (uintptr_t)p->table | (uintptr_t)p->out;
    for (int w = 16; w > 2; w /= 2)
        if (row % w == 0 && addr % (uintptr_t)w == 0) return w;
    return (int)kl_dtype_size(p->dtype);
}
