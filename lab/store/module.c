/* The store lab module: golden-case loading, the check catalogue, running a variant. Tests,
 * `kernlab verify/check/bench` all come through here; the perf workloads are in perf.c. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/store/store.h"
#include "lab/core/registry.h"
#include "lab/store/store_module.h"
#include "reference/store.h"

void kl_store_problem_free(struct kl_store_problem *p)
{
    if (!p) return;
    kl_tensor_free(&p->k), kl_tensor_free(&p->v), kl_tensor_free(&p->slots);
    kl_tensor_free(&p->k_cache), kl_tensor_free(&p->v_cache);
    kl_tensor_free(&p->qkv), kl_tensor_free(&p->positions), kl_tensor_free(&p->cos_sin_cache);
    kl_tensor_free(&p->k_scale), kl_tensor_free(&p->v_scale);
    free(p->k_pre), free(p->v_pre), free(p->k_slack), free(p->v_slack);
    free(p);
}

static void free_problem(void *p) { kl_store_problem_free(p); }


/* Data movement: both caches compared bit-exactly, untouched slots included. */
static void set_outputs(const void *prob, struct kl_outputs *o)
{
    const struct kl_store_problem *p = prob;
    if (p->fused) return kl_store_fused_outputs(p, o);
    int64_t n = p->num_slots * p->num_kv_heads * p->head_dim;
    kl_outputs_set(o, 0, "k_cache_out", p->dtype, true, n);
    kl_outputs_set(o, 1, "v_cache_out", p->dtype, true, n);
}

static void *load(const struct kl_case *c, struct kl_outputs *expected, struct kl_err *err)
{
    /* A fused case says what its caches hold (lab/CONTRACTS.md section 4). */
    const cJSON *kv = c->params ? cJSON_GetObjectItemCaseSensitive(c->params, "kv_dtype") : NULL;
    if (kv && !(cJSON_IsString(kv) && strcmp(kv->valuestring, "fp8_e4m3") == 0)) {
        kl_fail(err, "%s/meta.json: params.kv_dtype must be \"fp8_e4m3\" (or absent: the plain store)", c->dir);
        return NULL;
    }
    if (kv) return kl_store_fused_load(c, expected, err);
    struct kl_store_problem *p = calloc(1, sizeof *p);
    struct kl_tensor k = {0}, v = {0}, kc = {0}, vc = {0}, kco = {0}, vco = {0};
    char path[1200];
    unsigned char *used = NULL;
    p->dtype = c->dtype;
    if (c->dtype != KL_F32 && c->dtype != KL_F16 && c->dtype != KL_BF16) {
        kl_fail(err, "%s/meta.json: store needs dtype fp32, fp16 or bf16", c->dir);
        goto fail;
    }
    if (kl_case_array(c, "k", &k, false, err) || kl_case_array(c, "v", &v, false, err) ||
        kl_case_array(c, "slots", &p->slots, false, err) || kl_case_array(c, "k_cache", &kc, false, err) ||
        kl_case_array(c, "v_cache", &vc, false, err) || kl_case_array(c, "k_cache_out", &kco, false, err) ||
        kl_case_array(c, "v_cache_out", &vco, false, err))
        goto fail;
    if (kl_tensor_expect(&k, kl_case_path(c, "k.npy", path, sizeof path), 3, (int64_t[]){-1, -1, -1}, err)) goto fail;
    p->num_tokens = k.dims[0], p->num_kv_heads = k.dims[1], p->head_dim = k.dims[2];
    if (p->num_kv_heads < 1 || p->head_dim < 1) {
        kl_fail(err, "%s: num_kv_heads and head_dim must be >= 1", path);
        goto fail;
    }
    if (kl_tensor_expect(&kc, kl_case_path(c, "k_cache.npy", path, sizeof path), 3,
                         (int64_t[]){-1, p->num_kv_heads, p->head_dim}, err))
        goto fail;
    p->num_slots = kc.dims[0];
    const int64_t cache[3] = {p->num_slots, p->num_kv_heads, p->head_dim};
    if (kl_tensor_expect(&v, kl_case_path(c, "v.npy", path, sizeof path), 3, k.dims, err) ||
        kl_tensor_expect(&vc, kl_case_path(c, "v_cache.npy", path, sizeof path), 3, cache, err) ||
        kl_tensor_expect(&kco, kl_case_path(c, "k_cache_out.npy", path, sizeof path), 3, cache, err) ||
        kl_tensor_expect(&vco, kl_case_path(c, "v_cache_out.npy", path, sizeof path), 3, cache, err))
        goto fail;
    kl_case_path(c, "slots.npy", path, sizeof path);
    if (p->slots.dtype != KL_I64) {
        kl_fail(err, "%s: dtype %s, expected <i8", path, kl_dtype_name(p->slots.dtype));
        goto fail;
    }
    if (kl_tensor_expect(&p->slots, path, 1, &p->num_tokens, err)) goto fail;
    /* A case's slots are distinct and inside the cache (lab/CONTRACTS.md section 4): a repeated slot
     * makes the result depend on write order, an out-of-range one is not a store at all. */
    used = calloc((size_t)p->num_slots + 1, 1);
    if (!used) { /* num_slots comes from the file: no memory for it is this case's failure */
        kl_fail(err, "%s: out of host memory for %lld slots", path, (long long)p->num_slots);
        goto fail;
    }
    for (int64_t t = 0; t < p->num_tokens; t++) {
        int64_t s = ((const int64_t *)p->slots.data)[t];
        if (s < 0) continue;
        if (s >= p->num_slots) {
            kl_fail(err, "%s: slots[%lld] = %lld is past the cache (%lld slots)", path, (long long)t, (long long)s,
                    (long long)p->num_slots);
            goto fail;
        }
        if (used[s]++) {
            kl_fail(err, "%s: slot %lld repeats (slots must be distinct)", path, (long long)s);
            goto fail;
        }
    }
    if (kl_tensor_convert_exact(&p->k, &k, p->dtype, kl_case_path(c, "k.npy", path, sizeof path), err) ||
        kl_tensor_convert_exact(&p->v, &v, p->dtype, kl_case_path(c, "v.npy", path, sizeof path), err) ||
        kl_tensor_convert_exact(&p->k_cache, &kc, p->dtype, kl_case_path(c, "k_cache.npy", path, sizeof path), err) ||
        kl_tensor_convert_exact(&p->v_cache, &vc, p->dtype, kl_case_path(c, "v_cache.npy", path, sizeof path), err))
        goto fail;

    set_outputs(p, expected);
    for (int64_t i = 0; i < expected->o[0].n; i++) {
        expected->o[0].v[i] = kl_load_elem(kco.dtype, kco.data, (size_t)i);
        expected->o[1].v[i] = kl_load_elem(vco.dtype, vco.data, (size_t)i);
    }
    free(used);
    kl_tensor_free(&k), kl_tensor_free(&v), kl_tensor_free(&kc), kl_tensor_free(&vc), kl_tensor_free(&kco),
        kl_tensor_free(&vco);
    return p;
fail:
    free(used);
    kl_tensor_free(&k), kl_tensor_free(&v), kl_tensor_free(&kc), kl_tensor_free(&vc), kl_tensor_free(&kco),
        kl_tensor_free(&vco);
    kl_outputs_free(expected);
    kl_store_problem_free(p);
    return NULL;
}

struct kl_store_problem *kl_store_problem_random(int64_t num_tokens, int64_t num_kv_heads, int64_t head_dim,
                                                 int64_t num_slots, enum kl_dtype dtype,
                                                 enum kl_store_slot_pattern pattern, int skipped, bool last_slot,
                                                 uint64_t seed)
{
    struct kl_store_problem *p = calloc(1, sizeof *p);
    struct kl_rng rng;
    kl_rng_seed(&rng, seed);
    *p = (struct kl_store_problem){.num_tokens = num_tokens, .num_kv_heads = num_kv_heads, .head_dim = head_dim,
                                   .num_slots = num_slots, .dtype = dtype};
    const int64_t tok[3] = {num_tokens, num_kv_heads, head_dim}, cache[3] = {num_slots, num_kv_heads, head_dim};
    kl_tensor_alloc(&p->k, dtype, 3, tok), kl_tensor_alloc(&p->v, dtype, 3, tok);
    kl_tensor_alloc(&p->k_cache, dtype, 3, cache), kl_tensor_alloc(&p->v_cache, dtype, 3, cache);
    kl_tensor_alloc(&p->slots, KL_I64, 1, &num_tokens);
    kl_rng_fill_normal(&rng, &p->k, 1.0), kl_rng_fill_normal(&rng, &p->v, 1.0);
    /* The caches hold other requests' K/V: random, never zero, so a lost or misplaced write
     * shows up in the untouched slots as well as in the written ones. */
    kl_rng_fill_normal(&rng, &p->k_cache, 1.0), kl_rng_fill_normal(&rng, &p->v_cache, 1.0);

    /* Distinct slots: a partial Fisher-Yates shuffle of 0..num_slots-1 (random), or a run of
     * consecutive slots from a random start (sequential: a prefill filling fresh pages). */
    int64_t *slots = p->slots.data, *perm = malloc(sizeof(int64_t) * (size_t)(num_slots ? num_slots : 1));
    for (int64_t i = 0; i < num_slots; i++) perm[i] = i;
    const int64_t start = num_slots > num_tokens ? kl_rng_range(&rng, num_slots - num_tokens + 1) : 0;
    for (int64_t t = 0; t < num_tokens; t++) {
        if (pattern == KL_SLOTS_SEQUENTIAL) {
            slots[t] = t < num_slots ? start + t : -1;
        } else if (t < num_slots) {
            int64_t j = t + kl_rng_range(&rng, num_slots - t), tmp = perm[t];
            perm[t] = perm[j], perm[j] = tmp;
            slots[t] = perm[t];
        } else {
            slots[t] = -1; /* more tokens than slots: the rest are padding */
        }
    }
    if (last_slot && num_tokens > 0 && num_slots > 0) {
        for (int64_t t = 1; t < num_tokens; t++)
            if (slots[t] == num_slots - 1) slots[t] = slots[0]; /* keep the slots distinct */
        slots[0] = num_slots - 1;
    }
    for (int64_t t = 0; t < num_tokens; t++)
        if (kl_rng_range(&rng, 8) < skipped && !(last_slot && t == 0)) slots[t] = -1;
    free(perm);
    return p;
}

/* The check catalogue: edge cases first, then random shapes. */
static const struct edge {
    int64_t num_tokens, num_kv_heads, head_dim, num_slots;
    enum kl_dtype dtype;
    enum kl_store_slot_pattern pattern;
    int skipped;
    bool last_slot;
    const char *what;
} kedges[] = {
    {1, 8, 128, 64, KL_BF16, KL_SLOTS_RANDOM, 0, true, "one token into the last slot"},
    {64, 8, 128, 4096, KL_BF16, KL_SLOTS_RANDOM, 0, false, "decode batch, random slots"},
    {200, 8, 128, 1024, KL_BF16, KL_SLOTS_SEQUENTIAL, 0, true, "prefill, sequential slots"},
    {40, 8, 128, 512, KL_BF16, KL_SLOTS_RANDOM, 3, true, "slot -1 skips tokens"},
    {30, 4, 80, 256, KL_BF16, KL_SLOTS_RANDOM, 1, true, "head_dim 80"},
    {30, 2, 256, 256, KL_F16, KL_SLOTS_RANDOM, 1, true, "head_dim 256"},
    {50, 1, 128, 300, KL_BF16, KL_SLOTS_RANDOM, 1, true, "one kv head"},
    {25, 1, 64, 100, KL_F32, KL_SLOTS_SEQUENTIAL, 2, false, "head_dim 64 fp32"},
    {20, 3, 7, 50, KL_BF16, KL_SLOTS_RANDOM, 1, true, "rows not whole 16-byte vectors"},
    {16, 8, 128, 64, KL_BF16, KL_SLOTS_RANDOM, 8, false, "every token skipped"},
    {80, 2, 64, 48, KL_BF16, KL_SLOTS_RANDOM, 0, true, "more tokens than slots: padding"},
    {0, 8, 128, 64, KL_BF16, KL_SLOTS_RANDOM, 0, false, "no tokens"},
};
#define N_EDGES ((int)(sizeof kedges / sizeof kedges[0]))
#define N_RANDOM 6

static void *make(int i, uint64_t seed, char *label, size_t len)
{
    if (i >= N_EDGES + N_RANDOM) return kl_store_fused_make(i - N_EDGES - N_RANDOM, seed, label, len);
    struct kl_rng rng;
    kl_rng_seed(&rng, seed * 1000003u + (uint64_t)i);
    struct edge e;
    if (i < N_EDGES) {
        e = kedges[i];
    } else {
        static const enum kl_dtype types[3] = {KL_F32, KL_F16, KL_BF16};
        static const int64_t dims[5] = {64, 80, 96, 128, 256};
        int64_t n = 1 + kl_rng_range(&rng, 300);
        e = (struct edge){n, 1 + kl_rng_range(&rng, 8), dims[kl_rng_range(&rng, 5)], n + kl_rng_range(&rng, 2000),
                          types[kl_rng_range(&rng, 3)], (enum kl_store_slot_pattern)kl_rng_range(&rng, 2),
                          (int)kl_rng_range(&rng, 3), kl_rng_range(&rng, 2) == 1, "random"};
    }
    snprintf(label, len, "%s:tokens=%lld,kv_heads=%lld,head_dim=%lld,slots=%lld,%s,%s", e.what,
             (long long)e.num_tokens, (long long)e.num_kv_heads, (long long)e.head_dim, (long long)e.num_slots,
             e.pattern == KL_SLOTS_SEQUENTIAL ? "sequential" : "random", kl_dtype_name(e.dtype));
    for (char *c = label; *c; c++)
        if (*c == ' ') *c = '_';
    return kl_store_problem_random(e.num_tokens, e.num_kv_heads, e.head_dim, e.num_slots, e.dtype, e.pattern,
                                   e.skipped, e.last_slot, kl_rng_u64(&rng));
}

static int reference(const void *prob, struct kl_outputs *out, struct kl_err *err)
{
    const struct kl_store_problem *p = prob;
    if (p->fused) return kl_store_fused_reference(p, out, err);
    double *k = kl_tensor_to_f64(&p->k), *v = kl_tensor_to_f64(&p->v);
    double *kc = kl_tensor_to_f64(&p->k_cache), *vc = kl_tensor_to_f64(&p->v_cache);
    set_outputs(p, out);
    int64_t bad = kl_store_reference(k, v, p->slots.data, p->num_tokens, p->num_kv_heads * p->head_dim, p->num_slots,
                                     kc, vc);
    memcpy(out->o[0].v, kc, sizeof(double) * (size_t)out->o[0].n);
    memcpy(out->o[1].v, vc, sizeof(double) * (size_t)out->o[1].n);
    free(k), free(v), free(kc), free(vc);
    return bad ? kl_fail(err, "%lld slots past the cache", (long long)bad) : 0;
}

/* The device side (lab/core/tensor_ops.c does the work): everything uploaded, the caches with
 * their contents before the store (nothing to poison: an unwritten slot keeps its old value, which
 * is what a store must leave everywhere else); 16 bytes where a tensor is empty. validate set. */
static void device(const void *prob, void *params, struct kl_dev_buf *b)
{
    const struct kl_store_problem *p = prob;
    *(struct kl_store_params *)params = (struct kl_store_params){
        .num_tokens = p->num_tokens, .num_kv_heads = p->num_kv_heads, .head_dim = p->head_dim,
        .num_slots = p->num_slots, .dtype = p->dtype, .validate = true, .fused = p->fused,
        .num_qo_heads = p->num_qo_heads, .rotary_dim = p->rotary_dim, .max_pos = p->max_pos, .is_neox = p->is_neox};
    /* In buf_field's order; a family's buffers the other does not take stay unallocated (NULL).
     * q_out starts poisoned: an element the kernel never writes is NaN and fails. */
    const struct kl_tensor *src[11] = {&p->k, &p->v, &p->slots, &p->k_cache, &p->v_cache, &p->qkv, NULL,
                                       &p->positions, &p->cos_sin_cache, &p->k_scale, &p->v_scale};
    const bool plain_buf[11] = {1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0}, fused_buf[11] = {0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1};
    for (int i = 0; i < 11; i++)
        b[i] = (p->fused ? fused_buf[i] : plain_buf[i]) ? kl_buf_tensor(src[i], true) : (struct kl_dev_buf){0};
    if (p->fused) b[6] = kl_buf_fill((size_t)(p->num_tokens * p->num_qo_heads * p->head_dim) * kl_dtype_size(p->dtype), 0xff, true);
}

/* A plain variant on a fused problem, or a fused one on a plain problem: a SKIP with the reason. */
static void declined(const struct kl_variant *v, const void *prob, struct kl_err *err)
{
    const struct kl_store_problem *p = prob;
    kl_fail(err, "%s: %s", v->name, p->fused ? "a plain store; this case is the fused RoPE + e4m3 quantize + store"
                                             : "a fused RoPE + e4m3 quantize + store; this case is a plain store");
}

#define B(field) offsetof(struct kl_store_params, field)
KL_TENSOR_OPS(kl_store_ops, struct kl_store_params, kl_store_launch_fn, .load = load, .make = make,
              .reference = reference, .free = free_problem, .n_bufs = 11,
              .buf_field = {B(k), B(v), B(slots), B(k_cache), B(v_cache), B(qkv), B(q_out), B(positions),
                            B(cos_sin_cache), B(k_scale), B(v_scale)},
              .out_field = {B(k_cache), B(v_cache), B(q_out)}, .device = device, .outputs = set_outputs,
              .declined = declined);
#undef B

KL_MODULE(store, .summary = "K/V scatter into a paged KV cache (slot mapping); fused RoPE + FP8 quantize + store", .min_cc = 70, .in_place = "k_cache, v_cache",
          .tolerance = kl_e4m3_tolerance_text,
          .learning_step = 3, .tensor = &kl_store_ops, .perf = &kl_store_perf);
