/* The argument checks every attention_decode launcher starts with, the split-KV plan and its
 * workspace. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "attention_decode.h"

/* Which opt-in the calling variant declares: none, several query tokens, an FP8 cache. */
enum support { PLAIN, MULTI, FP8 };

static cudaError_t check(const struct kl_attention_decode_params *p, const char *variant, enum support s)
{
    const bool multi = s == MULTI;
    const char *bad = NULL;
    if (p->batch < 0) bad = "batch < 0";
    else if (p->batch > INT32_MAX / 2) bad = "batch > 2^30";
    else if (p->num_kv_heads < 1) bad = "num_kv_heads < 1";
    else if (p->num_qo_heads < 1 || p->num_qo_heads % p->num_kv_heads) bad = "num_qo_heads must be a positive multiple of num_kv_heads";
    else if (p->num_qo_heads > 1024) bad = "num_qo_heads > 1024";
    else if (p->head_dim < 8 || p->head_dim > 256 || p->head_dim % 8) bad = "head_dim must be a multiple of 8 in 8..256";
    else if (p->page_size < 1) bad = "page_size < 1";
    else if (p->num_pages < 0) bad = "num_pages < 0";
    else if (p->max_kv_len < 0) bad = "max_kv_len < 0";
    else if (!(p->dtype == KL_F32 || p->dtype == KL_F16 || p->dtype == KL_BF16)) bad = "dtype must be fp32, fp16 or bf16";
    else if (p->sm_scale != p->sm_scale) bad = "sm_scale is NaN";
    else if (p->batch > 0 && (!p->q || !p->kv_indptr || !p->kv_last_page_len || !p->out || !p->lse))
        bad = "q, kv_indptr, kv_last_page_len, out and lse must be set";
    else if (p->batch > 0 && p->num_pages > 0 && (!p->k_cache || !p->v_cache || !p->kv_indices))
        bad = "k_cache, v_cache and kv_indices must be set";
    else if (multi && p->qo_indptr && (p->max_q_len < 1 || p->max_q_len > KL_DECODE_MAX_Q_LEN))
        bad = "max_q_len must be 1..8 with qo_indptr set";
    else if (p->v_scale && !p->k_scale) bad = "k_scale must be set with v_scale (an FP8 cache)";
    else if (p->k_scale && !p->v_scale) bad = "v_scale must be set with k_scale (an FP8 cache)";
    else if (s == FP8 && p->k_scale && p->dtype == KL_F32) bad = "dtype must be fp16 or bf16 (q and out) with an FP8 cache";
    if (!bad && p->qo_indptr && !multi) return cudaErrorNotSupported; /* one query row per request only */
    if (!bad && p->k_scale && s != FP8) return cudaErrorNotSupported; /* the caches hold e4m3 codes */
    if (!bad && !p->k_scale && !p->v_scale && s == FP8) return cudaErrorNotSupported; /* 16-bit caches */
    if (!bad) return cudaSuccess;
    fprintf(stderr,
            "attention_decode %s: %s (batch=%lld num_qo_heads=%lld num_kv_heads=%lld head_dim=%lld page_size=%lld "
            "num_pages=%lld max_q_len=%lld)\n",
            variant, bad, (long long)p->batch, (long long)p->num_qo_heads, (long long)p->num_kv_heads,
            (long long)p->head_dim, (long long)p->page_size, (long long)p->num_pages, (long long)p->max_q_len);
    return cudaErrorInvalidValue;
}

cudaError_t kl_attention_decode_check_params(const struct kl_attention_decode_params *p, const char *variant)
{
    return check(p, variant, PLAIN);
}

cudaError_t kl_attention_decode_check_params_multi(const struct kl_attention_decode_params *p, const char *variant)
{
    return check(p, variant, MULTI);
}

cudaError_t kl_attention_decode_check_params_fp8(const struct kl_attention_decode_params *p, const char *variant)
{
    return check(p, variant, FP8);
}

int kl_attention_decode_check_qo(const int32_t *qo_indptr, const int64_t *kv_len, int64_t batch, int64_t max_q_len,
                                 char *why, size_t len)
{
    if (qo_indptr[0] != 0) return snprintf(why, len, "qo_indptr[0] = %d, must be 0", qo_indptr[0]), -1;
    for (int64_t b = 0; b < batch; b++) {
        const int64_t q_len = (int64_t)qo_indptr[b + 1] - qo_indptr[b];
        if (q_len < 0)
            return snprintf(why, len, "qo_indptr decreases at request %lld (%d then %d)", (long long)b, qo_indptr[b],
                            qo_indptr[b + 1]), -1;
        if (q_len > kv_len[b])
            return snprintf(why, len, "qo_indptr: request %lld has %lld query tokens but %lld keys (q_len <= kv_len)",
                            (long long)b, (long long)q_len, (long long)kv_len[b]), -1;
        if (q_len > max_q_len)
            return snprintf(why, len, "qo_indptr: request %lld has %lld query tokens, max_q_len %lld", (long long)b,
                            (long long)q_len, (long long)max_q_len), -1;
    }
    return 0;
}

int64_t kl_attention_decode_q_rows(const struct kl_attention_decode_params *p)
{
    return p->qo_indptr ? p->max_q_len : 1;
}

struct kl_decode_split kl_attention_decode_split(const struct kl_attention_decode_params *p, int sms,
                                                 int blocks_per_sm, int64_t granule, int64_t min_chunk,
                                                 int64_t max_chunk)
{
    const int64_t group = p->num_qo_heads / p->num_kv_heads, head_blocks = (group + 7) / 8;
    const int64_t pairs = p->batch * p->num_kv_heads * head_blocks, want = (int64_t)blocks_per_sm * sms;
    const int64_t n = p->max_kv_len, splits = pairs > 0 ? (want + pairs - 1) / pairs : 1;
    int64_t chunk = (n + splits - 1) / splits;
    if (chunk < min_chunk) chunk = min_chunk;
    if (chunk > max_chunk) chunk = max_chunk;
    chunk = (chunk + granule - 1) / granule * granule;
    if (n > KL_DECODE_MAX_SPLITS * chunk) chunk = (n + KL_DECODE_MAX_SPLITS - 1) / KL_DECODE_MAX_SPLITS;
    chunk = (chunk + granule - 1) / granule * granule;
    return (struct kl_decode_split){chunk, n > 0 ? (int)((n + chunk - 1) / chunk) : 1};
}

struct kl_decode_split kl_attention_decode_split_waves(const struct kl_attention_decode_params *p,
                                                       int64_t ctas_per_split, int64_t slots)
{
    const int64_t n = p->max_kv_len;
    struct kl_decode_split best = {n > 0 ? (n + 63) / 64 * 64 : 64, 1};
    int64_t best_cost = INT64_MAX;
    for (int64_t s = 1; s <= KL_DECODE_MAX_SPLITS && n > 0 && slots > 0; s++) {
        const int64_t chunk = ((n + s - 1) / s + 63) / 64 * 64;
        if (s > 1 && chunk < KL_DECODE_MIN_CHUNK) break;
        if ((n + chunk - 1) / chunk != s) continue; /* this chunk makes fewer splits: counted there */
        const int64_t cost = (ctas_per_split * s + slots - 1) / slots * (chunk + KL_DECODE_CTA_TOKENS);
        if (cost < best_cost) best_cost = cost, best = (struct kl_decode_split){chunk, (int)s};
    }
    return best;
}

size_t kl_attention_decode_workspace_for(const struct kl_attention_decode_params *p, int splits)
{
    const int64_t group = p->num_qo_heads / (p->num_kv_heads > 0 ? p->num_kv_heads : 1);
    const int64_t q_rows = kl_attention_decode_q_rows(p) > 1 ? kl_attention_decode_q_rows(p) : 1;
    const size_t counters =
        (size_t)(p->batch * p->num_kv_heads * ((group * q_rows + 7) / 8) + KL_DECODE_SCHEDULER_WORDS) *
        sizeof(unsigned);
    const size_t partials =
        (size_t)splits * (size_t)(p->batch * q_rows * p->num_qo_heads) * (size_t)(p->head_dim + 2) * 4;
    return (counters + 255) / 256 * 256 + partials;
}

size_t kl_attention_decode_workspace_bytes(const struct kl_attention_decode_params *p, int sms)
{
    /* Room for the most splits any plan makes: chunks of KL_DECODE_MIN_CHUNK tokens, at most
     * KL_DECODE_MAX_SPLITS of them. */
    int64_t splits = (p->max_kv_len + KL_DECODE_MIN_CHUNK - 1) / KL_DECODE_MIN_CHUNK;
    if (splits > KL_DECODE_MAX_SPLITS) splits = KL_DECODE_MAX_SPLITS;
    return kl_attention_decode_workspace_for(p, splits > 1 ? (int)splits : 1);
}

int kl_attention_decode_sms(void)
{
    static int sms = 0;
    if (!sms) {
        int dev = 0;
        cudaGetDevice(&dev);
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) sms = 1;
    }
    return sms;
}

int kl_attention_decode_knob(const char *name, int lo, int hi, int fallback)
{
    const char *e = getenv(name);
    char *end = NULL;
    const long v = e ? strtol(e, &end, 10) : 0;
    return e && *e && *end == '\0' && v >= lo && v <= hi ? (int)v : fallback;
}

const char *const *kl_attention_decode_by_shape(const struct kl_attention_decode_params *p, int sms)
{
    static const char *const fp8[] = {"v27_fp8_tile_gatherers", "v10_fp8_page_heads", "v7_fp8_f16_mma", NULL};
    static const char *const pages16_split[] = {"v13_cluster_merge", "v8_tma_pages", "v4_tensor_cores", NULL};
    static const char *const pages16_long[] = {"v32_cluster_tail", "v13_cluster_merge", "v8_tma_pages",
                                               "v4_tensor_cores", NULL};
    static const char *const pages16[] = {"v31_shrinking_items", "v8_tma_pages", "v4_tensor_cores", NULL};
    static const char *const gather[] = {"v32_cluster_tail", "v19_one_gatherer", "v12_cp_async_gather",
                                         "v4_tensor_cores", NULL};
    static const char *const draft[] = {"v28_draft_tile_gatherers", "v4_tensor_cores", NULL};
    if (p->k_scale) return fp8;
    if (p->qo_indptr) return draft;
    if (p->page_size % 16) return gather;
    /* v8's plan splits the keys when the pairs cannot fill about three CTAs an SM: there the merge of
     * the splits is the call's tail, and v13 merges them inside a cluster, never through memory where a
     * request's splits fit one cluster of 8; where they do not (long requests), v32, whose clusters'
     * partials meet in one batch of loads. Where the pairs do fill the SMs, v31's queue: a serving batch
     * is ragged, and the queue ends its CTAs' key loops together whatever the lengths (on a batch of
     * equal lengths v26's grid, one chunk a CTA, is a little faster). */
    const int64_t heads = p->num_kv_heads > 0 ? p->num_kv_heads : 1;
    const int64_t pairs = p->batch * heads * ((p->num_qo_heads / heads + 7) / 8);
    if (pairs >= 3 * (int64_t)sms) return pages16;
    return kl_attention_decode_split(p, sms, 3, 64, 128, 2048).splits > 8 ? pages16_long : pages16_split;
}
