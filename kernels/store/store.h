/* K/V store into a paged cache (store): the C ABI every variant implements.
 *
 *   k_cache[slots[t], :, :] = k[t, :, :]   and   v_cache[slots[t], :, :] = v[t, :, :]
 *   slots[t] < 0: token t is skipped (padding, or a token whose K/V is already cached).
 * The cache layout [num_pages, page_size, num_kv_heads, head_dim] is, flattened over its first
 * two axes, [num_slots, num_kv_heads, head_dim] with slot = page * page_size + offset; so a
 * token's K (or V) is one contiguous row of num_kv_heads * head_dim elements, both in k and in
 * the cache. Pure data movement: bit-exact for any element type.
 *
 * Slots >= num_slots: never written (no memory corruption); the kernel notes that one was
 * seen in a device flag, and with `validate` set the launcher synchronises the stream, reads
 * the flag and returns cudaErrorInvalidValue naming the problem. Why a flag and not a host
 * check: slots live on the device (written by the scheduler's previous kernel), so the host
 * cannot read them without a copy and a sync on every call; the kernel sees every slot anyway,
 * and the flag costs nothing until a bad slot appears. The sync is why validate is opt-in: tests
 * and `kernlab verify/check` set it, a serving loop or the timing harness does not.
 *
 * The fused family (fused set; v4_rope_quant_store and after): the new tokens' q, k and v come
 * straight from the QKV projection in one row per token, q and k are rotated (RoPE, exactly as
 * kernels/rope/rope.h: the same cos_sin_cache, pairs and partial rotary), q goes to q_out and k, v
 * are quantized to FP8 E4M3 with a float32 scale per kv head and stored:
 *   q_out[t, h]               = rope(q[t, h])
 *   k_cache[slots[t], h, :]   = e4m3(rope(k[t, h]) / k_scale[h]),  v_cache[...] = e4m3(v[t, h] / v_scale[h])
 * with e4m3() rounding to nearest even and saturating to +-448 (kernels/dtype.h), so that the
 * value a code stands for is code * scale. q_out is written for every token, skipped ones too
 * (their K/V may be cached already; attention still needs q). k, v are unused; the caches are
 * e4m3 bytes. Plain variants decline a fused call with cudaErrorNotSupported, and fused variants
 * a plain one, so each family is a SKIP on the other's cases. */
#ifndef KL_KERNELS_STORE_H
#define KL_KERNELS_STORE_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kl_store_params {
    const void *k;        /* [num_tokens, num_kv_heads, head_dim] */
    const void *v;        /* [num_tokens, num_kv_heads, head_dim] */
    const int64_t *slots; /* [num_tokens]: cache slot of each token; < 0 skips the token */
    void *k_cache;        /* [num_slots, num_kv_heads, head_dim] == [num_pages, page_size, ...] */
    void *v_cache;        /* [num_slots, num_kv_heads, head_dim] */
    int64_t num_tokens;
    int64_t num_kv_heads;
    int64_t head_dim;
    int64_t num_slots;    /* num_pages * page_size */
    enum kl_dtype dtype;  /* KL_F32, KL_F16 or KL_BF16 for k, v and both caches */
    bool validate;        /* sync after the launch and report slots >= num_slots (see above) */

    /* The fused family only (see above); dtype is then that of qkv and q_out (fp16 or bf16). */
    bool fused;
    const void *qkv;            /* [num_tokens, (num_qo_heads + 2 * num_kv_heads) * head_dim]: q, k, v heads */
    void *q_out;                /* [num_tokens, num_qo_heads, head_dim] */
    const int64_t *positions;   /* [num_tokens], each in [0, max_pos) */
    const float *cos_sin_cache; /* [max_pos, rotary_dim]: cos in columns 0..rotary_dim/2-1, sin after */
    const float *k_scale;       /* [num_kv_heads]: a K code times its head's scale is the value */
    const float *v_scale;       /* [num_kv_heads] */
    int64_t num_qo_heads;       /* a multiple of num_kv_heads */
    int64_t rotary_dim;         /* even, 2 <= rotary_dim <= head_dim */
    int64_t max_pos;            /* rows of cos_sin_cache */
    bool is_neox;               /* true: rotate halves; false: interleaved pairs (GPT-J) */
};

typedef cudaError_t (*kl_store_launch_fn)(const struct kl_store_params *p, cudaStream_t stream);

/* Shape and pointer checks every launcher starts with: cudaErrorInvalidValue, with the
 * argument at fault printed to stderr, or cudaSuccess. */
cudaError_t kl_store_check_params(const struct kl_store_params *p, const char *variant);

/* The fused family's checks: cudaErrorNotSupported (nothing printed) for a plain call, else as
 * above. kl_store_check_params declines a fused call the same way. */
cudaError_t kl_store_check_fused_params(const struct kl_store_params *p, const char *variant);

/* Whether a fused call takes the 16-byte path: 8-element chunks (head_dim % 8 == 0), each inside one half
 * of the rotary span or outside it (rotary_dim a multiple of 16 neox, 8 interleaved), qkv, q_out and
 * cos_sin_cache 16-byte aligned, the caches 8-byte aligned. Also what makes a token's qkv and cos/sin rows
 * whole 16-byte runs (v6's bulk copies). */
bool kl_store_fused_chunks(const struct kl_store_params *p);

/* The widest access (16, 8, 4 bytes, else the element size) that divides a token's row
 * (num_kv_heads * head_dim elements) and to which all four tensors are aligned. */
int kl_store_unit_bytes(const struct kl_store_params *p);

/* The out-of-range protocol around a launch, for a variant's own device flag (an unsigned int
 * the kernel sets to 1 when it skips a slot >= num_slots): begin clears it (when p->validate),
 * end synchronises and reports. Both no-ops without validate. */
cudaError_t kl_store_validate_begin(const struct kl_store_params *p, unsigned *dev_flag, cudaStream_t stream);
cudaError_t kl_store_validate_end(const struct kl_store_params *p, unsigned *dev_flag, cudaStream_t stream,
                                  const char *variant);

#ifdef __cplusplus
}
#endif
#endif
