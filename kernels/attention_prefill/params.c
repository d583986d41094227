/* The argument checks every attention_prefill launcher starts with. Device arrays (indptrs,
 * page numbers) cannot be read here without a synchronisation; the module validates them on the
 * host when it builds a problem (lab/attention_prefill/module.c). */
#include <math.h>
#include <stdio.h>

#include "attention_prefill.h"

cudaError_t kl_attention_prefill_check_params(const struct kl_attention_prefill_params *p, const char *variant)
{
    const char *bad = NULL;
    if (p->batch < 0) bad = "batch < 0";
    else if (p->total_q < 0 || p->total_q > INT32_MAX) bad = "total_q outside [0, 2^31)";
    else if (p->num_kv_heads < 1) bad = "num_kv_heads < 1";
    else if (p->num_qo_heads < 1 || p->num_qo_heads % p->num_kv_heads != 0)
        bad = "num_qo_heads must be a positive multiple of num_kv_heads";
    else if (p->num_qo_heads > 65535) bad = "num_qo_heads > 65535";
    else if (p->head_dim < 1 || p->head_dim > 1024) bad = "head_dim outside [1, 1024]";
    else if (p->page_size < 1) bad = "page_size < 1";
    else if (p->num_pages < 0) bad = "num_pages < 0";
    else if (p->num_pages * p->page_size * p->num_kv_heads * p->head_dim > ((int64_t)1 << 40))
        bad = "k_cache larger than 2^40 elements";
    else if (p->max_q_len < 0 || p->max_q_len > p->total_q) bad = "max_q_len outside [0, total_q]";
    else if (!isfinite(p->sm_scale)) bad = "sm_scale is not finite";
    else if (!(p->dtype == KL_F32 || p->dtype == KL_F16 || p->dtype == KL_BF16)) bad = "dtype must be fp32, fp16 or bf16";
    else if (p->batch > 0 && (!p->qo_indptr || !p->kv_indptr || !p->kv_last_page_len))
        bad = "qo_indptr, kv_indptr and kv_last_page_len must be set";
    else if (p->total_q > 0 && (!p->q || !p->out || !p->lse)) bad = "q, out and lse must be set";
    else if (p->total_q > 0 && p->num_pages > 0 && (!p->k_cache || !p->v_cache || !p->kv_indices))
        bad = "k_cache, v_cache and kv_indices must be set";
    else if (p->workspace_bytes > 0 && !p->workspace) bad = "workspace_bytes > 0 with no workspace";
    if (!bad) return cudaSuccess;
    fprintf(stderr,
            "attention_prefill %s: %s (batch=%lld total_q=%lld qo_heads=%lld kv_heads=%lld head_dim=%lld "
            "page_size=%lld num_pages=%lld max_q_len=%lld)\n",
            variant, bad, (long long)p->batch, (long long)p->total_q, (long long)p->num_qo_heads,
            (long long)p->num_kv_heads, (long long)p->head_dim, (long long)p->page_size, (long long)p->num_pages,
            (long long)p->max_q_len);
    return cudaErrorInvalidValue;
}
