/* The store module's fused family: RoPE + FP8 (e4m3) quantize + paged store (kernels/store/store.h).
 * Golden cases (lab/CONTRACTS.md section 4, params.kv_dtype "fp8_e4m3"), random problems, the
 * reference's outputs and the e4m3 policy's per-element arrays (lab/core/compare.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/core/registry.h"
#include "lab/store/store_module.h"
#include "reference/rope.h"
#include "reference/store.h"

#define KL_ROPE_BASE_FUSED 500000.0 /* Llama 3's rope theta, as the rope module's problems use */

void kl_store_fused_args(const struct kl_store_problem *p, struct kl_store_rope_quant *a)
{
    *a = (struct kl_store_rope_quant){
        .num_tokens = p->num_tokens, .num_qo_heads = p->num_qo_heads, .num_kv_heads = p->num_kv_heads,
        .head_dim = p->head_dim, .rotary_dim = p->rotary_dim, .max_pos = p->max_pos, .num_slots = p->num_slots,
        .is_neox = p->is_neox, .qkv = kl_tensor_to_f64(&p->qkv), .positions = p->positions.data,
        .slots = p->slots.data, .cos_sin_cache = kl_tensor_to_f64(&p->cos_sin_cache),
        .k_scale = kl_tensor_to_f64(&p->k_scale), .v_scale = kl_tensor_to_f64(&p->v_scale)};
}

void kl_store_fused_args_free(struct kl_store_rope_quant *a)
{
    free((void *)a->qkv), free((void *)a->cos_sin_cache), free((void *)a->k_scale), free((void *)a->v_scale);
}

/* Runs the reference into copies of the caches: codes into k, v (each num_slots * row bytes, or
 * NULL), q_out (or NULL), and the policy's arrays into p. */
static int64_t run_reference(struct kl_store_problem *p, uint8_t *k, uint8_t *v, double *q_out)
{
    const size_t n = (size_t)(p->num_slots * p->num_kv_heads * p->head_dim);
    uint8_t *kc = k ? k : malloc(n + 1), *vc = v ? v : malloc(n + 1);
    double *q = q_out ? q_out : malloc(sizeof(double) * (size_t)(kl_numel(&p->qkv) + 1));
    double *kt = malloc(sizeof(double) * (n + 1)), *vt = malloc(sizeof(double) * (n + 1));
    memcpy(kc, p->k_cache.data, n), memcpy(vc, p->v_cache.data, n);
    if (!p->k_pre) {
        p->k_pre = malloc(sizeof(double) * (n + 1)), p->v_pre = malloc(sizeof(double) * (n + 1));
        p->k_slack = malloc(sizeof(double) * (n + 1)), p->v_slack = malloc(sizeof(double) * (n + 1));
    }
    /* An element the store leaves alone must keep its code: its own value, no slack. */
    for (size_t i = 0; i < n; i++) {
        p->k_pre[i] = kl_e4m3_to_f32(kc[i]), p->v_pre[i] = kl_e4m3_to_f32(vc[i]);
        kt[i] = vt[i] = 0;
    }
    struct kl_store_rope_quant a;
    kl_store_fused_args(p, &a);
    const int64_t bad = kl_store_rope_quant_reference(&a, q, kc, vc, p->k_pre, p->v_pre, kt, vt);
    for (size_t i = 0; i < n; i++) p->k_slack[i] = kl_e4m3_slack(kt[i]), p->v_slack[i] = kl_e4m3_slack(vt[i]);
    kl_store_fused_args_free(&a);
    if (!k) free(kc);
    if (!v) free(vc);
    if (!q_out) free(q);
    free(kt), free(vt);
    return bad;
}

/* The caches compared code by code under the e4m3 policy (bit for bit against a golden, as the
 * reference is judged); q_out under the dtype's row, as the rope module's outputs. */
void kl_store_fused_outputs(const struct kl_store_problem *p, struct kl_outputs *o)
{
    const int64_t n = p->num_slots * p->num_kv_heads * p->head_dim;
    kl_outputs_set(o, 0, "k_cache_out", KL_FP8_E4M3, true, n);
    kl_outputs_set(o, 1, "v_cache_out", KL_FP8_E4M3, true, n);
    kl_outputs_set(o, 2, "q_out", p->dtype, false, p->num_tokens * p->num_qo_heads * p->head_dim);
    kl_outputs_policy(o, 0, kl_policy_e4m3(p->k_pre, p->k_slack));
    kl_outputs_policy(o, 1, kl_policy_e4m3(p->v_pre, p->v_slack));
}

int kl_store_fused_reference(const struct kl_store_problem *p, struct kl_outputs *out, struct kl_err *err)
{
    const size_t n = (size_t)(p->num_slots * p->num_kv_heads * p->head_dim);
    uint8_t *k = malloc(n + 1), *v = malloc(n + 1);
    kl_store_fused_outputs(p, out);
    /* The policy's arrays are the problem's: recomputed here from the same inputs, unchanged. */
    const int64_t bad = run_reference((struct kl_store_problem *)p, k, v, out->o[2].v);
    for (size_t i = 0; i < n; i++) out->o[0].v[i] = kl_e4m3_to_f32(k[i]), out->o[1].v[i] = kl_e4m3_to_f32(v[i]);
    free(k), free(v);
    return bad ? kl_fail(err, "%lld tokens with a slot past the cache or a position past the table", (long long)bad)
               : 0;
}

static int expect_dtype(const struct kl_tensor *t, enum kl_dtype want, const char *path, struct kl_err *err)
{
    if (t->dtype == want) return 0;
    return kl_fail(err, "%s: dtype %s, expected %s", path, kl_dtype_name(t->dtype),
                   want == KL_U8 ? "|u1 (e4m3 codes)" : want == KL_I64 ? "<i8" : "<f4");
}

void *kl_store_fused_load(const struct kl_case *c, struct kl_outputs *expected, struct kl_err *err)
{
    struct kl_store_problem *p = calloc(1, sizeof *p);
    struct kl_tensor qkv = {0}, kco = {0}, vco = {0}, qo = {0};
    char path[1200];
    long long hq = 0, hk = 0, page = 1;
    unsigned char *used = NULL;
    p->fused = true, p->dtype = c->dtype;
    if (c->dtype != KL_F16 && c->dtype != KL_BF16) {
        kl_fail(err, "%s/meta.json: the fused store needs dtype fp16 or bf16", c->dir);
        goto fail;
    }
    if (kl_case_param_int(c, "num_qo_heads", 0, &hq, err) || kl_case_param_int(c, "num_kv_heads", 0, &hk, err) ||
        kl_case_param_int(c, "page_size", 1, &page, err) || kl_case_param_bool(c, "is_neox", true, &p->is_neox, err))
        goto fail;
    if (hk < 1 || hq < 1 || hq % hk || page < 1) {
        kl_fail(err, "%s/meta.json: num_qo_heads (%lld) must be a positive multiple of num_kv_heads (%lld), page_size "
                "(%lld) >= 1", c->dir, hq, hk, page);
        goto fail;
    }
    p->num_qo_heads = hq, p->num_kv_heads = hk;
    if (kl_case_array(c, "qkv", &qkv, false, err) || kl_case_array(c, "positions", &p->positions, false, err) ||
        kl_case_array(c, "cos_sin_cache", &p->cos_sin_cache, false, err) ||
        kl_case_array(c, "k_scale", &p->k_scale, false, err) || kl_case_array(c, "v_scale", &p->v_scale, false, err) ||
        kl_case_array(c, "slots", &p->slots, false, err) || kl_case_array(c, "k_cache", &p->k_cache, false, err) ||
        kl_case_array(c, "v_cache", &p->v_cache, false, err) || kl_case_array(c, "k_cache_out", &kco, false, err) ||
        kl_case_array(c, "v_cache_out", &vco, false, err) || kl_case_array(c, "q_out", &qo, false, err))
        goto fail;
    if (expect_dtype(&p->k_cache, KL_U8, kl_case_path(c, "k_cache.npy", path, sizeof path), err) ||
        kl_tensor_expect(&p->k_cache, path, 3, (int64_t[]){-1, hk, -1}, err))
        goto fail;
    p->num_slots = p->k_cache.dims[0], p->head_dim = p->k_cache.dims[2];
    const int64_t cache[3] = {p->num_slots, hk, p->head_dim};
    if (p->head_dim < 2 || p->num_slots % page) {
        kl_fail(err, "%s: head_dim %lld < 2, or %lld slots are not whole pages of %lld", path, (long long)p->head_dim,
                (long long)p->num_slots, page);
        goto fail;
    }
    if (expect_dtype(&qkv, KL_F32, kl_case_path(c, "qkv.npy", path, sizeof path), err) ||
        kl_tensor_expect(&qkv, path, 2, (int64_t[]){-1, (hq + 2 * hk) * p->head_dim}, err))
        goto fail;
    p->num_tokens = qkv.dims[0];
    if (expect_dtype(&p->v_cache, KL_U8, kl_case_path(c, "v_cache.npy", path, sizeof path), err) ||
        kl_tensor_expect(&p->v_cache, path, 3, cache, err) ||
        expect_dtype(&kco, KL_U8, kl_case_path(c, "k_cache_out.npy", path, sizeof path), err) ||
        kl_tensor_expect(&kco, path, 3, cache, err) ||
        expect_dtype(&vco, KL_U8, kl_case_path(c, "v_cache_out.npy", path, sizeof path), err) ||
        kl_tensor_expect(&vco, path, 3, cache, err) ||
        expect_dtype(&qo, KL_F32, kl_case_path(c, "q_out.npy", path, sizeof path), err) ||
        kl_tensor_expect(&qo, path, 3, (int64_t[]){p->num_tokens, hq, p->head_dim}, err) ||
        expect_dtype(&p->k_scale, KL_F32, kl_case_path(c, "k_scale.npy", path, sizeof path), err) ||
        kl_tensor_expect(&p->k_scale, path, 1, &p->num_kv_heads, err) ||
        expect_dtype(&p->v_scale, KL_F32, kl_case_path(c, "v_scale.npy", path, sizeof path), err) ||
        kl_tensor_expect(&p->v_scale, path, 1, &p->num_kv_heads, err) ||
        expect_dtype(&p->cos_sin_cache, KL_F32, kl_case_path(c, "cos_sin_cache.npy", path, sizeof path), err) ||
        kl_tensor_expect(&p->cos_sin_cache, path, 2, (int64_t[]){-1, -1}, err))
        goto fail;
    p->max_pos = p->cos_sin_cache.dims[0], p->rotary_dim = p->cos_sin_cache.dims[1];
    if (p->max_pos < 1 || p->rotary_dim < 2 || p->rotary_dim % 2 || p->rotary_dim > p->head_dim) {
        kl_fail(err, "%s: rotary_dim %lld must be even, in [2, head_dim %lld], with max_pos >= 1", path,
                (long long)p->rotary_dim, (long long)p->head_dim);
        goto fail;
    }
    for (int64_t h = 0; h < hk; h++) {
        const float ks = ((const float *)p->k_scale.data)[h], vs = ((const float *)p->v_scale.data)[h];
        if (!(ks > 0 && isfinite(ks) && vs > 0 && isfinite(vs))) {
            kl_fail(err, "%s/k_scale.npy, v_scale.npy: head %lld's scale is not finite and positive", c->dir, (long long)h);
            goto fail;
        }
    }
    if (expect_dtype(&p->positions, KL_I64, kl_case_path(c, "positions.npy", path, sizeof path), err) ||
        kl_tensor_expect(&p->positions, path, 1, &p->num_tokens, err) ||
        expect_dtype(&p->slots, KL_I64, kl_case_path(c, "slots.npy", path, sizeof path), err) ||
        kl_tensor_expect(&p->slots, path, 1, &p->num_tokens, err))
        goto fail;
    used = calloc((size_t)p->num_slots + 1, 1);
    for (int64_t t = 0; t < p->num_tokens; t++) {
        const int64_t pos = ((const int64_t *)p->positions.data)[t], s = ((const int64_t *)p->slots.data)[t];
        if (pos < 0 || pos >= p->max_pos) {
            kl_fail(err, "%s/positions.npy: positions[%lld] = %lld is outside [0, %lld)", c->dir, (long long)t,
                    (long long)pos, (long long)p->max_pos);
            goto fail;
        }
        if (s >= p->num_slots || (s >= 0 && used[s]++)) { /* as the plain store's cases (section 4) */
            kl_fail(err, "%s: slots[%lld] = %lld is past the cache or repeats", path, (long long)t, (long long)s);
            goto fail;
        }
    }
    p->k_cache.dtype = p->v_cache.dtype = KL_FP8_E4M3; /* the bytes are e4m3 codes */
    if (kl_tensor_convert_exact(&p->qkv, &qkv, p->dtype, kl_case_path(c, "qkv.npy", path, sizeof path), err)) goto fail;
    run_reference(p, NULL, NULL, NULL);
    kl_store_fused_outputs(p, expected);
    for (int64_t i = 0; i < expected->o[0].n; i++) {
        expected->o[0].v[i] = kl_e4m3_to_f32(((const uint8_t *)kco.data)[i]);
        expected->o[1].v[i] = kl_e4m3_to_f32(((const uint8_t *)vco.data)[i]);
    }
    for (int64_t i = 0; i < expected->o[2].n; i++) expected->o[2].v[i] = ((const float *)qo.data)[i];
    free(used);
    kl_tensor_free(&qkv), kl_tensor_free(&kco), kl_tensor_free(&vco), kl_tensor_free(&qo);
    return p;
fail:
    free(used);
    kl_tensor_free(&qkv), kl_tensor_free(&kco), kl_tensor_free(&vco), kl_tensor_free(&qo);
    kl_outputs_free(expected);
    kl_store_problem_free(p);
    return NULL;
}

struct kl_store_problem *kl_store_fused_random(const struct kl_store_fused_shape *s, uint64_t seed)
{
    /* Slots (and old caches) from the plain generator, which draws them the same way. */
    struct kl_store_problem *p = kl_store_problem_random(s->num_tokens, s->num_kv_heads, s->head_dim, s->num_slots,
                                                         s->dtype, s->pattern, s->skipped, true, seed);
    struct kl_rng rng;
    kl_rng_seed(&rng, seed ^ 0x9e3779b97f4a7c15ull);
    kl_tensor_free(&p->k), kl_tensor_free(&p->v), kl_tensor_free(&p->k_cache), kl_tensor_free(&p->v_cache);
    p->fused = true, p->num_qo_heads = s->num_qo_heads, p->rotary_dim = s->rotary_dim, p->max_pos = s->max_pos;
    p->is_neox = s->is_neox;
    const int64_t n = s->num_tokens, hk = s->num_kv_heads, d = s->head_dim;
    const int64_t cache[3] = {s->num_slots, hk, d};
    kl_tensor_alloc(&p->qkv, s->dtype, 2, (int64_t[]){n, (s->num_qo_heads + 2 * hk) * d});
    kl_tensor_alloc(&p->k_cache, KL_FP8_E4M3, 3, cache), kl_tensor_alloc(&p->v_cache, KL_FP8_E4M3, 3, cache);
    kl_tensor_alloc(&p->positions, KL_I64, 1, &p->num_tokens);
    kl_tensor_alloc(&p->cos_sin_cache, KL_F32, 2, (int64_t[]){s->max_pos, s->rotary_dim});
    kl_tensor_alloc(&p->k_scale, KL_F32, 1, &p->num_kv_heads), kl_tensor_alloc(&p->v_scale, KL_F32, 1, &p->num_kv_heads);
    kl_rng_fill_normal(&rng, &p->qkv, 1.0);
    /* Old codes everywhere, never zero-only: a misplaced or missing write shows in untouched rows. */
    kl_rng_fill_normal(&rng, &p->k_cache, 4.0), kl_rng_fill_normal(&rng, &p->v_cache, 4.0);
    int64_t *pos = p->positions.data;
    for (int64_t t = 0; t < n; t++) pos[t] = kl_rng_range(&rng, s->max_pos);
    if (n > 0) pos[0] = s->max_pos - 1;
    if (n > 1) pos[1] = 0;
    kl_rope_cos_sin_cache(p->cos_sin_cache.data, s->max_pos, s->rotary_dim, KL_ROPE_BASE_FUSED);
    for (int64_t h = 0; h < hk; h++) {
        ((float *)p->k_scale.data)[h] = (float)(s->k_scale_base * (1 + 0.25 * (double)h));
        ((float *)p->v_scale.data)[h] = (float)(1.5 * s->k_scale_base * (1 + 0.25 * (double)h));
    }
    run_reference(p, NULL, NULL, NULL);
    return p;
}

/* The fused problems of the catalogue: decode and prefill shapes, GQA, both RoPE styles, partial
 * rotary, scales small enough that values saturate, skipped tokens, odd head_dim, odd token counts. */
static const struct fused_edge {
    struct kl_store_fused_shape s;
    const char *what;
} kfused[] = {
    {{64, 32, 8, 128, 128, 4096, 2048, true, KL_BF16, KL_SLOTS_RANDOM, 1, 4.0 / 448}, "fused decode batch, GQA 4"},
    {{300, 8, 2, 128, 128, 512, 320, true, KL_F16, KL_SLOTS_SEQUENTIAL, 0, 4.0 / 448}, "fused prefill, fp16"},
    {{40, 4, 4, 64, 32, 64, 128, false, KL_BF16, KL_SLOTS_RANDOM, 2, 1.0 / 448}, "fused interleaved partial, saturating"},
    {{20, 6, 2, 80, 80, 100, 64, true, KL_BF16, KL_SLOTS_RANDOM, 3, 0.05}, "fused head_dim 80"},
    {{7, 3, 1, 6, 4, 10, 16, false, KL_F16, KL_SLOTS_RANDOM, 1, 0.02}, "fused rows not whole 16-byte vectors"},
    {{16, 8, 8, 128, 128, 64, 32, true, KL_BF16, KL_SLOTS_RANDOM, 8, 0.01}, "fused every token skipped"},
    /* Odd token counts: the last tile of a variant that carries several tokens a thread is part-full. */
    {{37, 8, 2, 136, 128, 200, 96, true, KL_BF16, KL_SLOTS_RANDOM, 3, 0.05}, "fused odd tokens, 17 chunks a head"},
    {{33, 6, 3, 72, 48, 80, 64, false, KL_F16, KL_SLOTS_SEQUENTIAL, 2, 0.03}, "fused odd tokens, interleaved partial"},
    {{45, 4, 1, 128, 96, 300, 64, true, KL_F16, KL_SLOTS_RANDOM, 1, 0.03}, "fused odd tokens, neox partial"},
    /* Past a decode batch (over 256 tokens): v6's own ring, not v5's path, in its other shapes: interleaved
     * and partial with an odd chunk count, 17 chunks a head, head_dim 80; token counts no grid divides. */
    {{517, 6, 3, 72, 48, 80, 1024, false, KL_F16, KL_SLOTS_SEQUENTIAL, 2, 0.03},
     "fused interleaved partial, past a decode batch"},
    {{389, 8, 2, 136, 128, 200, 512, true, KL_BF16, KL_SLOTS_RANDOM, 3, 0.05},
     "fused 17 chunks a head, past a decode batch"},
    {{263, 6, 2, 80, 80, 100, 512, true, KL_BF16, KL_SLOTS_RANDOM, 3, 0.05}, "fused head_dim 80, past a decode batch"},
    /* Past a decode batch's grid on any GPU (2501 tiles of 96 pairs): v5's own tiles (v6's ring), not v4's path. */
    {{5001, 8, 2, 128, 128, 8192, 16384, true, KL_BF16, KL_SLOTS_RANDOM, 1, 4.0 / 448},
     "fused prefill, odd tokens, a grid past decode size"},
    /* An odd head count (3 q, 3 k, 3 v: v7's last slice has one head, a k head), interleaved partial with 9
     * chunks a head, on a grid past decode size: v7's own walk, not v4's launch. */
    {{12001, 3, 3, 72, 48, 80, 16384, false, KL_F16, KL_SLOTS_RANDOM, 2, 0.03},
     "fused 9 heads, interleaved partial, a grid past decode size"},
};

struct kl_store_problem *kl_store_fused_make(int i, uint64_t seed, char *label, size_t len)
{
    if (i < 0 || i >= (int)(sizeof kfused / sizeof kfused[0])) return NULL;
    const struct fused_edge *e = &kfused[i];
    snprintf(label, len, "%s:tokens=%lld,heads=%lld/%lld,head_dim=%lld,rotary=%lld,slots=%lld,%s,%s", e->what,
             (long long)e->s.num_tokens, (long long)e->s.num_qo_heads, (long long)e->s.num_kv_heads,
             (long long)e->s.head_dim, (long long)e->s.rotary_dim, (long long)e->s.num_slots,
             e->s.is_neox ? "neox" : "interleaved", kl_dtype_name(e->s.dtype));
    for (char *c = label; *c; c++)
        if (*c == ' ') *c = '_';
    return kl_store_fused_random(&e->s, seed * 7919u + (uint64_t)i);
}
