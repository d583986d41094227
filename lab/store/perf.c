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
 * and read back whole and compared bit for bit with the reference after it. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/store/store_module.h"
#include "perf/bench.h"
#include "reference/store.h"

enum { SEQUENTIAL = 1 };

static const struct kl_workload kworkloads[] = {
    {"decode-64-sequential", "64 tokens, 8 x 128 bf16, consecutive slots of a 1M-slot cache", {64, 8, 128, 1 << 20}, SEQUENTIAL},
    {"decode-64-random", "64 tokens, 8 x 128 bf16, random slots of a 1M-slot cache", {64, 8, 128, 1 << 20}, 0},
    {"prefill-8k-sequential", "8192 tokens, 8 x 128 bf16, consecutive slots of a 1M-slot cache", {8192, 8, 128, 1 << 20}, SEQUENTIAL},
    {"prefill-8k-random", "8192 tokens, 8 x 128 bf16, random slots of a 1M-slot cache", {8192, 8, 128, 1 << 20}, 0},
};

static double row_bytes(const struct kl_workload *w) { return (double)w->shape[1] * (double)w->shape[2] * 2; }

static double bytes(const struct kl_workload *w)
{
    const double n = (double)w->shape[0];
    return n * 8 + 2 * n * row_bytes(w) /* k, v read */ + 2 * n * row_bytes(w) /* cache rows written */;
}

static double flops(const struct kl_workload *w) { return 0; }

static size_t set_bytes(const struct kl_workload *w) { return (size_t)bytes(w); }

struct state {
    int64_t n, row, num_slots;
    int sets;
    struct kl_tensor k0, v0, slots0; /* set 0's inputs on the host, for the re-check */
    void *k_cache, *v_cache;         /* shared by every set */
    struct kl_store_params *p;       /* per set: its own k, v and slots */
};

static void teardown(void *q)
{
    struct state *s = q;
    if (!s) return;
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

static void *setup(const struct kl_workload *w, int sets, uint64_t seed, struct kl_err *err)
{
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

static int launch(const struct kl_variant *v, void *q, int set, cudaStream_t stream)
{
    struct state *s = q;
    return (int)((kl_store_launch_fn)v->launch)(&s->p[set], stream);
}

static int poison(void *q, cudaStream_t stream)
{
    struct state *s = q;
    const size_t rb = (size_t)s->row * 2;
    int rc = kl_dev_poison_rows(s->k_cache, rb, s->p[0].slots, s->n, stream);
    return rc ? rc : kl_dev_poison_rows(s->v_cache, rb, s->p[0].slots, s->n, stream);
}

/* Set 0's rows of both caches, as the last timed launch left them, against the reference run on
 * a compact cache of n slots (slot t of it = set 0's token t). */
static int check(const struct kl_variant *v, void *q, struct kl_cmp *out, struct kl_recheck *what, struct kl_err *err)
{
    struct state *s = q;
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
    return o;
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
};
