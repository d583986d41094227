/* The argument checks every rope launcher starts with. */
#include <stdio.h>

#include "rope.h"

cudaError_t kl_rope_check_params(const struct kl_rope_params *p, const char *variant)
{
    const char *bad = NULL;
    if (p->num_tokens < 0) bad = "num_tokens < 0";
    else if (p->num_tokens > INT32_MAX) bad = "num_tokens > 2^31 - 1";
    else if (p->num_q_heads < 1) bad = "num_q_heads < 1";
    else if (p->num_kv_heads < 0) bad = "num_kv_heads < 0";
    else if (p->num_q_heads + p->num_kv_heads > 4096) bad = "num_q_heads + num_kv_heads > 4096";
    else if (p->head_dim < 2 || p->head_dim > 4096) bad = "head_dim outside [2, 4096]";
    else if (p->rotary_dim < 2 || p->rotary_dim > p->head_dim) bad = "rotary_dim outside [2, head_dim]";
    else if (p->rotary_dim % 2) bad = "rotary_dim must be even";
    else if (p->max_pos < 1) bad = "max_pos < 1";
    else if (p->num_tokens > 0 && (!p->q || !p->positions || !p->cos_sin_cache)) bad = "q, positions and cos_sin_cache must be set";
    else if (p->num_tokens > 0 && p->num_kv_heads > 0 && !p->k) bad = "k must be set when num_kv_heads > 0";
    else if (!(p->dtype == KL_F32 || p->dtype == KL_F16 || p->dtype == KL_BF16)) bad = "dtype must be fp32, fp16 or bf16";
    if (!bad) return cudaSuccess;
    fprintf(stderr, "rope %s: %s (num_tokens=%lld q_heads=%lld kv_heads=%lld head_dim=%lld rotary_dim=%lld max_pos=%lld)\n",
            variant, bad, (long long)p->num_tokens, (long long)p->num_q_heads, (long long)p->num_kv_heads,
            (long long)p->head_dim, (long long)p->rotary_dim, (long long)p->max_pos);
    return cudaErrorInvalidValue;
}
