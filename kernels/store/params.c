/* The argument checks every store launcher starts with, and the out-of-range slot protocol. */
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "store.h"

cudaError_t kl_store_check_params(const struct kl_store_params *p, const char *variant)
{
    const char *bad = NULL;
    if (p->fused) return cudaErrorNotSupported; /* the fused family's call: a SKIP, not an error */
    if (p->num_tokens < 0) bad = "num_tokens < 0";
    else if (p->num_tokens > INT32_MAX) bad = "num_tokens > 2^31 - 1";
    else if (p->num_kv_heads < 1) bad = "num_kv_heads < 1";
    else if (p->head_dim < 1) bad = "head_dim < 1";
    else if (p->num_kv_heads * p->head_dim > (1 << 24)) bad = "num_kv_heads * head_dim > 2^24";
    else if (p->num_slots < 0) bad = "num_slots < 0";
    else if (p->num_tokens > 0 && (!p->k || !p->v || !p->slots)) bad = "k, v and slots must be set";
    else if (p->num_tokens > 0 && p->num_slots > 0 && (!p->k_cache || !p->v_cache)) bad = "k_cache and v_cache must be set";
    else if (!(p->dtype == KL_F32 || p->dtype == KL_F16 || p->dtype == KL_BF16)) bad = "dtype must be fp32, fp16 or bf16";
    if (!bad) return cudaSuccess;
    fprintf(stderr, "store %s: %s (num_tokens=%lld num_kv_heads=%lld head_dim=%lld num_slots=%lld)\n", variant, bad,
            (long long)p->num_tokens, (long long)p->num_kv_heads, (long long)p->head_dim, (long long)p->num_slots);
    return cudaErrorInvalidValue;
}

cudaError_t kl_store_check_fused_params(const struct kl_store_params *p, const char *variant)
{
    const char *bad = NULL;
    if (!p->fused) return cudaErrorNotSupported; /* a plain store: a SKIP, not an error */
    if (p->num_tokens < 0) bad = "num_tokens < 0";
    else if (p->num_tokens > INT32_MAX) bad = "num_tokens > 2^31 - 1";
    else if (p->num_kv_heads < 1) bad = "num_kv_heads < 1";
    else if (p->num_qo_heads < 1 || p->num_qo_heads % p->num_kv_heads) bad = "num_qo_heads must be a multiple of num_kv_heads";
    else if (p->num_qo_heads + 2 * p->num_kv_heads > 4096) bad = "num_qo_heads + 2 * num_kv_heads > 4096";
    else if (p->head_dim < 2 || p->head_dim > 1024) bad = "head_dim outside [2, 1024]";
    else if (p->rotary_dim < 2 || p->rotary_dim > p->head_dim || p->rotary_dim % 2) bad = "rotary_dim must be even, in [2, head_dim]";
    else if (p->max_pos < 1) bad = "max_pos < 1";
    else if (p->num_slots < 0) bad = "num_slots < 0";
    else if (p->num_tokens > 0 && (!p->qkv || !p->q_out || !p->positions || !p->cos_sin_cache || !p->slots ||
                                   !p->k_scale || !p->v_scale))
        bad = "qkv, q_out, positions, cos_sin_cache, slots, k_scale and v_scale must be set";
    else if (p->num_tokens > 0 && p->num_slots > 0 && (!p->k_cache || !p->v_cache)) bad = "k_cache and v_cache must be set";
    else if (!(p->dtype == KL_F16 || p->dtype == KL_BF16)) bad = "dtype must be fp16 or bf16 (qkv and q_out)";
    if (!bad) return cudaSuccess;
    fprintf(stderr, "store %s: %s (num_tokens=%lld qo_heads=%lld kv_heads=%lld head_dim=%lld rotary_dim=%lld)\n",
            variant, bad, (long long)p->num_tokens, (long long)p->num_qo_heads, (long long)p->num_kv_heads,
            (long long)p->head_dim, (long long)p->rotary_dim);
    return cudaErrorInvalidValue;
}

bool kl_store_fused_chunks(const struct kl_store_params *p)
{
    const uintptr_t a16 = (uintptr_t)p->qkv | (uintptr_t)p->q_out | (uintptr_t)p->cos_sin_cache;
    const uintptr_t a8 = (uintptr_t)p->k_cache | (uintptr_t)p->v_cache;
    return p->head_dim % 8 == 0 && p->rotary_dim % (p->is_neox ? 16 : 8) == 0 && a16 % 16 == 0 && a8 % 8 == 0;
}

int kl_store_unit_bytes(const struct kl_store_params *p)
{
    const int64_t row = p->num_kv_heads * p->head_dim * (int64_t)kl_dtype_size(p->dtype);
    const uintptr_t addr = (uintptr_t)p->k | (uintptr_t)p->v | (uintptr_t)p->k_cache | (uintptr_t)p->v_cache;
    for (int w = 16; w > 2; w /= 2)
        if (row % w == 0 && addr % (uintptr_t)w == 0) return w;
    return (int)kl_dtype_size(p->dtype);
}

cudaError_t kl_store_validate_begin(const struct kl_store_params *p, unsigned *dev_flag, cudaStream_t stream)
{
    return p->validate ? cudaMemsetAsync(dev_flag, 0, sizeof(unsigned), stream) : cudaSuccess;
}

cudaError_t kl_store_validate_end(const struct kl_store_params *p, unsigned *dev_flag, cudaStream_t stream,
                                  const char *variant)
{
    cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess || !p->validate) return rc;
    unsigned flag = 0;
    rc = cudaMemcpyAsync(&flag, dev_flag, sizeof flag, cudaMemcpyDeviceToHost, stream);
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
    if (rc != cudaSuccess) return rc;
    if (!flag) return cudaSuccess;
    fprintf(stderr, "store %s: slots holds a slot >= num_slots (%lld); those tokens were not stored\n", variant,
            (long long)p->num_slots);
    return cudaErrorInvalidValue;
}
