/* store workloads for `kernlab bench`: Llama-3.1-8B's KV shape (8 kv heads x head_dim 128,
 * bf16) into a cache of 1M slots (2 GB per cache); a decode batch and an 8k-token prefill, each
 * with sequential slots (fresh pages filled in order) and random slots (a fragmented cache).
 * Byte model (the fewest bytes a correct store moves): k and v read once (2 KB a token each),
 * slots read (8 B a token), and the K and V rows written once into the caches. The caches are
 * never read: a correct kernel overwrites whole rows. FLOP model: none.
 * The caches are allocated once per state and shared by every rotation set (they alone are
 * 4 GB); sets differ in k, v and slots, and may share slots.
 * Re-check: set 0's rows of both caches are poisoned before the last timed repetition, in which
 * set 0 is launched last (kl_time_set: no other set's launch overwrites a shared slot after it),
 * and read back whole and compared bit for bit with the reference after it.
 *
 * The fused workloads (fused-*: the fused family alone runs them, the plain family the others) take
 * Llama-3.1-8B's QKV row (32 q + 8 kv heads x 128, bf16) through RoPE into q_out and e4m3 K/V caches
 * of 1M slots. Byte model: qkv read once (12 KB a token), each token's slot, position and cos/sin row
 * (512 B), q_out written (8 KB) and K and V written as one byte an element (2 KB). In the same run,
 * the extra fields time the composite a decoder runs without the fused kernel, "our rope, then our
 * store": rope's v5_pdl_one_trip on q and k, then store's v3_pdl_one_trip of k and v into bf16
 * caches (no FP8 there: the composite stores twice the bytes), both through their C ABIs on their
 * own buffers, and the fused variant again the same way, graph replays on one input set each:
 * composite_us, fused_us and time_vs_composite = fused_us / composite_us. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/rope/rope.h"
#include "lab/store/store_module.h"
#include "perf/bench.h"
#include "reference/rope.h"
#include "reference/store.h"

enum { SEQUENTIAL = 1, FUSED = 2 };

static const struct kl_workload kworkloads[] = {
    {"decode-64-sequential", "64 tokens, 8 x 128 bf16, consecutive slots of a 1M-slot cache", {64, 8, 128, 1 << 20}, SEQUENTIAL},
    {"decode-64-random", "64 tokens, 8 x 128 bf16, random slots of a 1M-slot cache", {64, 8, 128, 1 << 20}, 0},
    {"prefill-8k-sequential", "8192 tokens, 8 x 128 bf16, consecutive slots of a 1M-slot cache", {8192, 8, 128, 1 << 20}, SEQUENTIAL},
    {"prefill-8k-random", "8192 tokens, 8 x 128 bf16, random slots of a 1M-slot cache", {8192, 8, 128, 1 << 20}, 0},
    {"fused-decode-64", "64 tokens, QKV 32 + 2 x 8 heads x 128 bf16, RoPE, e4m3 K/V at random slots of 1M",
     {64, 8, 128, 1 << 20, 32}, FUSED},
    {"fused-prefill-8k", "8192 tokens, QKV 32 + 2 x 8 heads x 128 bf16, RoPE, e4m3 K/V at consecutive slots of 1M",
     {8192, 8, 128, 1 << 20, 32}, FUSED | SEQUENTIAL},
};

static double row_bytes(const struct kl_workload *w) { return (double)w->shape[1] * (double)w->shape[2] * 2; }

/* The fused kernel's bytes: qkv read, slot, position and cos/sin row read, q written, K and V e4m3. */
static double fused_bytes(const struct kl_workload *w)
{
    const double n = (double)w->shape[0], hk = (double)w->shape[1], d = (double)w->shape[2], hq = (double)w->shape[4];
    return n * ((hq + 2 * hk) * d * 2 + 16 + d * 4 + hq * d * 2 + 2 * hk * d);
}

static double bytes(const struct kl_workload *w)
{
    const double n = (double)w->shape[0];
    if (w->flags & FUSED) return fused_bytes(w);
    return n * 8 + 2 * n * row_bytes(w) /* k, v read */ + 2 * n * row_bytes(w) /* cache rows written */;
}

static double flops(const struct kl_workload *w) { return 0; }

static size_t set_bytes(const struct kl_workload *w) { return (size_t)bytes(w); }

struct state {
    bool fused;  /* false: the plain workloads' state (a struct fused_state starts with true) */
    int64_t n, row, num_slots;
    int sets;
    struct kl_tensor k0, v0, slots0; /* set 0's inputs on the host, for the re-check */
    void *k_cache, *v_cache;         /* shared by every set */
    struct kl_store_params *p;       /* per set: its own k, v and slots */
};

static void fused_teardown(void *q);

static void teardown(void *q)
{
    struct state *s = q;
    if (!s) return;
    if (s->fused) return fused_teardown(q);
    for (int i = 0; i < s->sets; i++)
        kl_dev_free((void *)s->p[i].k), kl_dev_free((void *)s->p[i].v), kl_dev_free((void *)s->p[i].slots);
    kl_dev_free(s->k_cache), kl_dev_free(s->v_cache);
    kl_tensor_free(&s->k0), kl_tensor_free(&s->v0), kl_tensor_free(&s->slots0);
    free(s->p);
    free(s);
}

/* n distinct slots: consecutive from a random start, or random (rejection against a bitmap). */
static void make_slots(int64_t *slots, int64_t n, int64_t num_slots, bool sequential, struct kl_rng *rng)
{
    if (sequential) {
        const int64_t start = kl_rng_range(rng, num_slots - n + 1);
        for (int64_t t = 0; t < n; t++) slots[t] = start + t;
        return;
    }
    unsigned char *used = calloc((size_t)num_slots, 1);
    for (int64_t t = 0; t < n; t++) {
        int64_t s;
        do s = kl_rng_range(rng, num_slots);
        while (used[s]);
        used[s] = 1;
        slots[t] = s;
    }
    free(used);
}

static void *fused_setup(const struct kl_workload *w, int sets, uint64_t seed, struct kl_err *err);

static void *setup(const struct kl_workload *w, int sets, uint64_t seed, struct kl_err *err)
{
    if (w->flags & FUSED) return fused_setup(w, sets, seed, err);
    struct state *s = calloc(1, sizeof *s);
    s->n = w->shape[0], s->row = w->shape[1] * w->shape[2], s->num_slots = w->shape[3], s->sets = sets;
    s->p = calloc((size_t)sets, sizeof *s->p);
    struct kl_rng rng;
    kl_rng_seed(&rng, seed);
    const int64_t dims[3] = {s->n, w->shape[1], w->shape[2]};
    kl_tensor_alloc(&s->k0, KL_BF16, 3, dims), kl_tensor_alloc(&s->v0, KL_BF16, 3, dims);
    kl_tensor_alloc(&s->slots0, KL_I64, 1, &s->n);
    const size_t cache_bytes = (size_t)(s->num_slots * s->row) * 2, kv_bytes = kl_nbytes(&s->k0);
    if (kl_dev_alloc(&s->k_cache, cache_bytes) || kl_dev_alloc(&s->v_cache, cache_bytes)) {
        kl_fail(err, "cudaMalloc of two %zu-byte caches failed", cache_bytes);
        teardown(s);
        return NULL;
    }
    kl_dev_fill_bytes(s->k_cache, 0, cache_bytes), kl_dev_fill_bytes(s->v_cache, 0, cache_bytes);
    /* Every set gets fresh values and slots, drawn into scratch tensors; set 0's are kept. */
    struct kl_tensor k, v, slots;
    kl_tensor_alloc(&k, KL_BF16, 3, dims), kl_tensor_alloc(&v, KL_BF16, 3, dims);
    kl_tensor_alloc(&slots, KL_I64, 1, &s->n);
    int rc = 0;
    for (int i = 0; i < sets && !rc; i++) {
        void *dk = NULL, *dv = NULL, *ds = NULL;
        if (kl_dev_alloc(&dk, kv_bytes) || kl_dev_alloc(&dv, kv_bytes) || kl_dev_alloc(&ds, kl_nbytes(&slots))) {
            kl_dev_free(dk), kl_dev_free(dv);
            rc = kl_fail(err, "cudaMalloc for set %d failed", i);
            break;
        }
        kl_rng_fill_normal(&rng, &k, 1.0), kl_rng_fill_normal(&rng, &v, 1.0);
        make_slots(slots.data, s->n, s->num_slots, w->flags & SEQUENTIAL, &rng);
        kl_dev_upload(dk, k.data, kv_bytes), kl_dev_upload(dv, v.data, kv_bytes);
        kl_dev_upload(ds, slots.data, kl_nbytes(&slots));
        if (i == 0) {
            memcpy(s->k0.data, k.data, kv_bytes), memcpy(s->v0.data, v.data, kv_bytes);
            memcpy(s->slots0.data, slots.data, kl_nbytes(&slots));
        }
        /* validate off: the timed launches are what a serving loop runs (no sync). */
        s->p[i] = (struct kl_store_params){.k = dk, .v = dv, .slots = ds, .k_cache = s->k_cache,
                                           .v_cache = s->v_cache, .num_tokens = s->n, .num_kv_heads = w->shape[1],
                                           .head_dim = w->shape[2], .num_slots = s->num_slots, .dtype = KL_BF16};
    }
    kl_tensor_free(&k), kl_tensor_free(&v), kl_tensor_free(&slots);
    if (rc) {
        teardown(s);
        return NULL;
    }
    return s;
}

static int fused_launch(const struct kl_variant *v, void *q, int set, cudaStream_t stream);
static int fused_poison(void *q, cudaStream_t stream);
static int fused_check(const struct kl_variant *v, void *q, struct kl_cmp *out, struct kl_recheck *what,
                       struct kl_err *err);

static int launch(const struct kl_variant *v, void *q, int set, cudaStream_t stream)
{
    struct state *s = q;
    if (s->fused) return fused_launch(v, q, set, stream);
    return (int)((kl_store_launch_fn)v->launch)(&s->p[set], stream);
}

static int poison(void *q, cudaStream_t stream)
{
    struct state *s = q;
    if (s->fused) return fused_poison(q, stream);
    const size_t rb = (size_t)s->row * 2;
    int rc = kl_dev_poison_rows(s->k_cache, rb, s->p[0].slots, s->n, stream);
    return rc ? rc : kl_dev_poison_rows(s->v_cache, rb, s->p[0].slots, s->n, stream);
}

/* Set 0's rows of both caches, as the last timed launch left them, against the reference run on
 * a compact cache of n slots (slot t of it = set 0's token t). */
static int check(const struct kl_variant *v, void *q, struct kl_cmp *out, struct kl_recheck *what, struct kl_err *err)
{
    struct state *s = q;
    if (s->fused) return fused_check(v, q, out, what, err);
    int rc = 0;
    const int64_t n = s->n, row = s->row;
    const size_t rb = (size_t)row * 2;
    uint16_t *rows = malloc(rb * (size_t)n * 2);
    for (int64_t t = 0; t < n && !rc; t++) {
        const int64_t slot = ((const int64_t *)s->slots0.data)[t];
        rc = kl_dev_download(rows + t * row, (const char *)s->k_cache + slot * rb, rb);
        if (!rc) rc = kl_dev_download(rows + (n + t) * row, (const char *)s->v_cache + slot * rb, rb);
    }
    if (rc) {
        free(rows);
        return kl_fail(err, "copying cache rows back: %s", kl_cuda_error_string(rc));
    }
    double *got = malloc(sizeof(double) * (size_t)(2 * n * row)), *want = calloc((size_t)(2 * n * row), sizeof(double));
    for (int64_t i = 0; i < 2 * n * row; i++) got[i] = kl_load_elem(KL_BF16, rows, (size_t)i);
    double *k = kl_tensor_to_f64(&s->k0), *vv = kl_tensor_to_f64(&s->v0);
    int64_t *local = malloc(sizeof(int64_t) * (size_t)n);
    for (int64_t t = 0; t < n; t++) local[t] = t;
    kl_store_reference(k, vv, local, n, row, n, want, want + n * row);
    kl_compare(got, want, 2 * n * row, kl_policy_for(KL_BF16, true), out);
    what->checked = what->of = (double)(2 * n * row);
    snprintf(what->reason, sizeof what->reason, "input set 0's %lld rows of k_cache and v_cache, poisoned before the "
             "replay, bit for bit against the reference", (long long)n);
    free(rows), free(got), free(want), free(k), free(vv), free(local);
    return 0;
}

static cJSON *params(const struct kl_workload *w)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "num_tokens", (double)w->shape[0]);
    cJSON_AddNumberToObject(o, "num_kv_heads", (double)w->shape[1]);
    cJSON_AddNumberToObject(o, "head_dim", (double)w->shape[2]);
    cJSON_AddNumberToObject(o, "num_slots", (double)w->shape[3]);
    cJSON_AddStringToObject(o, "dtype", "bf16");
    cJSON_AddStringToObject(o, "slots", w->flags & SEQUENTIAL ? "sequential" : "random");
    if (w->flags & FUSED) {
        cJSON_AddNumberToObject(o, "num_qo_heads", (double)w->shape[4]);
        cJSON_AddStringToObject(o, "kv_dtype", "fp8_e4m3");
    }
    return o;
}

/* ---- the fused workloads ---- */

struct fused_state {
    bool fused; /* true: see struct state */
    int64_t n, hq, hk, d, num_slots, max_pos, width;
    int sets;
    struct kl_tensor qkv0, slots0, positions0; /* set 0's inputs on the host, for the re-check */
    struct kl_tensor cos_sin, k_scale, v_scale; /* host copies of the shared tables */
    void *k_cache, *v_cache, *cos_sin_dev, *k_scale_dev, *v_scale_dev; /* shared by every set */
    struct kl_store_params *p;                  /* per set: its own qkv, q_out, positions and slots */
    const struct kl_variant *v;                 /* the fused variant the harness launched */
    /* The composite's own buffers, one set: q [n, hq, d], k, v [n, hk, d] bf16, bf16 caches. */
    void *cq, *ck, *cv, *ck_cache, *cv_cache;
};

static void fused_teardown(void *q)
{
    struct fused_state *s = q;
    for (int i = 0; i < s->sets && s->p; i++)
        kl_dev_free((void *)s->p[i].qkv), kl_dev_free(s->p[i].q_out), kl_dev_free((void *)s->p[i].positions),
            kl_dev_free((void *)s->p[i].slots);
    kl_dev_free(s->k_cache), kl_dev_free(s->v_cache), kl_dev_free(s->cos_sin_dev), kl_dev_free(s->k_scale_dev);
    kl_dev_free(s->v_scale_dev), kl_dev_free(s->cq), kl_dev_free(s->ck), kl_dev_free(s->cv);
    kl_dev_free(s->ck_cache), kl_dev_free(s->cv_cache);
    kl_tensor_free(&s->qkv0), kl_tensor_free(&s->slots0), kl_tensor_free(&s->positions0);
    kl_tensor_free(&s->cos_sin), kl_tensor_free(&s->k_scale), kl_tensor_free(&s->v_scale);
    free(s->p);
    free(s);
}

static int dev_upload_new(void **dst, const struct kl_tensor *t)
{
    int rc = kl_dev_alloc(dst, kl_nbytes(t));
    return rc ? rc : kl_dev_upload(*dst, t->data, kl_nbytes(t));
}

static void *fused_setup(const struct kl_workload *w, int sets, uint64_t seed, struct kl_err *err)
{
    struct fused_state *s = calloc(1, sizeof *s);
    s->fused = true, s->n = w->shape[0], s->hk = w->shape[1], s->d = w->shape[2], s->num_slots = w->shape[3];
    s->hq = w->shape[4], s->width = (s->hq + 2 * s->hk) * s->d, s->max_pos = 2 * s->n + 4096, s->sets = sets;
    s->p = calloc((size_t)sets, sizeof *s->p);
    struct kl_rng rng;
    kl_rng_seed(&rng, seed);
    const int64_t n = s->n, hk = s->hk, d = s->d, row = hk * d;
    kl_tensor_alloc(&s->qkv0, KL_BF16, 2, (int64_t[]){n, s->width});
    kl_tensor_alloc(&s->slots0, KL_I64, 1, &s->n), kl_tensor_alloc(&s->positions0, KL_I64, 1, &s->n);
    kl_tensor_alloc(&s->cos_sin, KL_F32, 2, (int64_t[]){s->max_pos, d});
    kl_tensor_alloc(&s->k_scale, KL_F32, 1, &s->hk), kl_tensor_alloc(&s->v_scale, KL_F32, 1, &s->hk);
    kl_rope_cos_sin_cache(s->cos_sin.data, s->max_pos, d, 500000.0);
    for (int64_t h = 0; h < hk; h++) /* N(0, 1) values: |x| past 4 saturates, as a calibrated scale allows */
        ((float *)s->k_scale.data)[h] = (float)(4.0 / 448 * (1 + 0.25 * (double)h)),
        ((float *)s->v_scale.data)[h] = (float)(3.0 / 448 * (1 + 0.25 * (double)h));
    const size_t cache = (size_t)(s->num_slots * row), qkv_bytes = kl_nbytes(&s->qkv0);
    int rc = kl_dev_alloc(&s->k_cache, cache) || kl_dev_alloc(&s->v_cache, cache) ||
             dev_upload_new(&s->cos_sin_dev, &s->cos_sin) || dev_upload_new(&s->k_scale_dev, &s->k_scale) ||
             dev_upload_new(&s->v_scale_dev, &s->v_scale);
    if (!rc) rc = kl_dev_fill_bytes(s->k_cache, 0, cache) || kl_dev_fill_bytes(s->v_cache, 0, cache);
    struct kl_tensor qkv, slots, pos;
    kl_tensor_alloc(&qkv, KL_BF16, 2, (int64_t[]){n, s->width});
    kl_tensor_alloc(&slots, KL_I64, 1, &s->n), kl_tensor_alloc(&pos, KL_I64, 1, &s->n);
    for (int i = 0; i < sets && !rc; i++) {
        void *dq = NULL, *dqo = NULL, *dp = NULL, *ds = NULL;
        kl_rng_fill_normal(&rng, &qkv, 1.0);
        make_slots(slots.data, n, s->num_slots, w->flags & SEQUENTIAL, &rng);
        /* a prefill's positions run from a random start; a decode batch's are any */
        const int64_t start = kl_rng_range(&rng, s->max_pos - n);
        for (int64_t t = 0; t < n; t++)
            ((int64_t *)pos.data)[t] = w->flags & SEQUENTIAL ? start + t : kl_rng_range(&rng, s->max_pos);
        rc = kl_dev_alloc(&dq, qkv_bytes) || kl_dev_alloc(&dqo, (size_t)(n * s->hq * d * 2)) ||
             kl_dev_alloc(&dp, kl_nbytes(&pos)) || kl_dev_alloc(&ds, kl_nbytes(&slots));
        s->p[i] = (struct kl_store_params){.slots = ds, .k_cache = s->k_cache, .v_cache = s->v_cache, .num_tokens = n,
                                           .num_kv_heads = hk, .head_dim = d, .num_slots = s->num_slots,
                                           .dtype = KL_BF16, .fused = true, .qkv = dq, .q_out = dqo, .positions = dp,
                                           .cos_sin_cache = s->cos_sin_dev, .k_scale = s->k_scale_dev,
                                           .v_scale = s->v_scale_dev, .num_qo_heads = s->hq, .rotary_dim = d,
                                           .max_pos = s->max_pos, .is_neox = true};
        if (rc) break;
        kl_dev_upload(dq, qkv.data, qkv_bytes), kl_dev_upload(dp, pos.data, kl_nbytes(&pos));
        kl_dev_upload(ds, slots.data, kl_nbytes(&slots));
        if (i == 0) {
            memcpy(s->qkv0.data, qkv.data, qkv_bytes), memcpy(s->slots0.data, slots.data, kl_nbytes(&slots));
            memcpy(s->positions0.data, pos.data, kl_nbytes(&pos));
        }
    }
    /* The composite's buffers: q, k, v split out of set 0's row (the rope ABI takes them apart). */
    const size_t qb = (size_t)(n * s->hq * d * 2), kb = (size_t)(n * row * 2);
    if (!rc) rc = kl_dev_alloc(&s->cq, qb) || kl_dev_alloc(&s->ck, kb) || kl_dev_alloc(&s->cv, kb) ||
                  kl_dev_alloc(&s->ck_cache, cache * 2) || kl_dev_alloc(&s->cv_cache, cache * 2);
    if (!rc) rc = kl_dev_fill_random(s->cq, KL_BF16, qb / 2, seed + 1, 1.0f) ||
                  kl_dev_fill_random(s->ck, KL_BF16, kb / 2, seed + 2, 1.0f) ||
                  kl_dev_fill_random(s->cv, KL_BF16, kb / 2, seed + 3, 1.0f) ||
                  kl_dev_fill_bytes(s->ck_cache, 0, cache * 2) || kl_dev_fill_bytes(s->cv_cache, 0, cache * 2);
    kl_tensor_free(&qkv), kl_tensor_free(&slots), kl_tensor_free(&pos);
    if (rc) {
        kl_fail(err, "device allocation or upload for the fused workload failed");
        fused_teardown(s);
        return NULL;
    }
    return s;
}

static int fused_launch(const struct kl_variant *v, void *q, int set, cudaStream_t stream)
{
    struct fused_state *s = q;
    s->v = v;
    return (int)((kl_store_launch_fn)v->launch)(&s->p[set], stream);
}

static int fused_poison(void *q, cudaStream_t stream)
{
    struct fused_state *s = q;
    const size_t rb = (size_t)(s->hk * s->d);
    int rc = kl_dev_poison_rows(s->k_cache, rb, s->p[0].slots, s->n, stream);
    if (!rc) rc = kl_dev_poison_rows(s->v_cache, rb, s->p[0].slots, s->n, stream);
    return rc ? rc : (int)cudaMemsetAsync(s->p[0].q_out, 0xff, (size_t)(s->n * s->hq * s->d * 2), stream);
}

/* Set 0's cache rows (under the e4m3 policy) and q_out (bf16's row) against the reference run on a
 * compact cache of n slots (slot t of it = set 0's token t). */
static int fused_check(const struct kl_variant *v, void *q, struct kl_cmp *out, struct kl_recheck *what,
                       struct kl_err *err)
{
    (void)v;
    struct fused_state *s = q;
    const int64_t n = s->n, row = s->hk * s->d, nq = n * s->hq * s->d;
    uint8_t *codes = malloc((size_t)(2 * n * row)), *want = calloc((size_t)(2 * n * row), 1);
    uint16_t *qo = malloc((size_t)nq * 2);
    int rc = kl_dev_download(qo, s->p[0].q_out, (size_t)nq * 2);
    for (int64_t t = 0; t < n && !rc; t++) {
        const int64_t slot = ((const int64_t *)s->slots0.data)[t];
        rc = kl_dev_download(codes + t * row, (const uint8_t *)s->k_cache + slot * row, (size_t)row);
        if (!rc) rc = kl_dev_download(codes + (n + t) * row, (const uint8_t *)s->v_cache + slot * row, (size_t)row);
    }
    if (rc) {
        free(codes), free(want), free(qo);
        return kl_fail(err, "copying the outputs back: %s", kl_cuda_error_string(rc));
    }
    int64_t *local = malloc(sizeof(int64_t) * (size_t)n);
    for (int64_t t = 0; t < n; t++) local[t] = t;
    double *pre = malloc(sizeof(double) * (size_t)(2 * n * row)), *slack = malloc(sizeof(double) * (size_t)(2 * n * row));
    double *qref = malloc(sizeof(double) * (size_t)nq), *qgot = malloc(sizeof(double) * (size_t)nq);
    double *got = malloc(sizeof(double) * (size_t)(2 * n * row)), *wantv = malloc(sizeof(double) * (size_t)(2 * n * row));
    const struct kl_store_rope_quant a = {
        .num_tokens = n, .num_qo_heads = s->hq, .num_kv_heads = s->hk, .head_dim = s->d, .rotary_dim = s->d,
        .max_pos = s->max_pos, .num_slots = n, .is_neox = true, .qkv = kl_tensor_to_f64(&s->qkv0),
        .positions = s->positions0.data, .slots = local, .cos_sin_cache = kl_tensor_to_f64(&s->cos_sin),
        .k_scale = kl_tensor_to_f64(&s->k_scale), .v_scale = kl_tensor_to_f64(&s->v_scale)};
    kl_store_rope_quant_reference(&a, qref, want, want + n * row, pre, pre + n * row, slack, slack + n * row);
    for (int64_t i = 0; i < 2 * n * row; i++)
        slack[i] = kl_e4m3_slack(slack[i]), got[i] = kl_e4m3_to_f32(codes[i]), wantv[i] = kl_e4m3_to_f32(want[i]);
    for (int64_t i = 0; i < nq; i++) qgot[i] = kl_bf16_to_f32(qo[i]);
    struct kl_cmp cq;
    kl_compare(got, wantv, 2 * n * row, kl_policy_e4m3(pre, slack), out);
    kl_compare(qgot, qref, nq, kl_policy_for(KL_BF16, false), &cq);
    kl_cmp_merge(out, &cq);
    what->checked = what->of = (double)(2 * n * row + nq);
    snprintf(what->reason, sizeof what->reason, "input set 0's %lld rows of k_cache and v_cache (code by code, the "
             "e4m3 policy) and its q_out (bf16's row), poisoned before the replay, against the reference", (long long)n);
    free((void *)a.qkv), free((void *)a.cos_sin_cache), free((void *)a.k_scale), free((void *)a.v_scale);
    free(codes), free(want), free(qo), free(local), free(pre), free(slack), free(qref), free(qgot), free(got), free(wantv);
    return 0;
}

/* The composite, "our rope then our store", and the fused variant, each timed the same way. */
struct composite_ctx {
    struct fused_state *s;
    const struct kl_variant *rope, *store;
};

static int composite_launch(void *q, int set, cudaStream_t stream)
{
    (void)set;
    struct composite_ctx *c = q;
    struct fused_state *s = c->s;
    const struct kl_rope_params rp = {.q = s->cq, .k = s->ck, .positions = s->p[0].positions,
                                      .cos_sin_cache = s->cos_sin_dev, .num_tokens = s->n, .num_q_heads = s->hq,
                                      .num_kv_heads = s->hk, .head_dim = s->d, .rotary_dim = s->d,
                                      .max_pos = s->max_pos, .is_neox = true, .dtype = KL_BF16};
    const struct kl_store_params sp = {.k = s->ck, .v = s->cv, .slots = s->p[0].slots, .k_cache = s->ck_cache,
                                       .v_cache = s->cv_cache, .num_tokens = s->n, .num_kv_heads = s->hk,
                                       .head_dim = s->d, .num_slots = s->num_slots, .dtype = KL_BF16};
    int rc = (int)((kl_rope_launch_fn)c->rope->launch)(&rp, stream);
    return rc ? rc : (int)((kl_store_launch_fn)c->store->launch)(&sp, stream);
}

static int fused_once(void *q, int set, cudaStream_t stream)
{
    (void)set;
    struct fused_state *s = q;
    return (int)((kl_store_launch_fn)s->v->launch)(&s->p[0], stream);
}

static void fused_extra(void *q, cJSON *extra)
{
    struct fused_state *s = q;
    if (!s->fused || !s->v) return;
    struct composite_ctx c = {s, kl_variant_find("rope", "v5_pdl_one_trip"), kl_variant_find("store", "v3_pdl_one_trip")};
    struct kl_timing tc, tf;
    struct kl_err err = {{0}};
    if (!c.rope || !c.store) return (void)fprintf(stderr, "store fused: rope v5 or store v3 is not built\n");
    if (kl_time(composite_launch, &c, 1, 30, true, &tc, &err) || kl_time(fused_once, s, 1, 30, true, &tf, &err))
        return (void)fprintf(stderr, "store fused: timing the composite: %s\n", err.msg);
    cJSON_AddStringToObject(extra, "composite", "rope v5_pdl_one_trip then store v3_pdl_one_trip (bf16 caches)");
    cJSON_AddNumberToObject(extra, "composite_us", tc.median_us);
    cJSON_AddNumberToObject(extra, "fused_us", tf.median_us);
    cJSON_AddNumberToObject(extra, "time_vs_composite", tf.median_us / tc.median_us);
}

const struct kl_perf_ops kl_store_perf = {
    .n_workloads = sizeof kworkloads / sizeof kworkloads[0],
    .workloads = kworkloads,
    .metric = KL_METRIC_BW,
    .bytes = bytes,
    .flops = flops,
    .set_bytes = set_bytes,
    .setup = setup,
    .launch = launch,
    .poison = poison,
    .check = check,
    .teardown = teardown,
    .params = params,
    .extra = fused_extra,
};
