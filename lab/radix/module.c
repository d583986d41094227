/* The radix module: longest-prefix match in SGLang's radix cache, on the CPU.
 *
 * verify: replays golden/radix/<case>/trace.jsonl (trace.c).
 * check:  seeded random op sequences and long-key edge traces, every op compared with the
 *         reference (tree results, sizes, and the whole tree's shape, stamps and locks).
 * bench:  CPU timing of the match walk against memcmp over the very same bytes, and of
 *         insert/evict churn. Rows go to results JSON (lab/CONTRACTS.md section 7) with the radix
 *         fields: memcmp_frac, ns_per_match, p50/p99 match latency, nodes, bytes and cache
 *         lines per match. */
#include <cjson/cJSON.h>
#include <linux/perf_event.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../perf/bench.h"
#include "../core/registry.h"
#include "../core/results.h"
#include "../core/tensor.h"
#include "radix.h"
#include "trace.h"

/* ---- check ---- */

static int check_trace(const struct kl_variant *v, const struct kl_radix_trace *tr, const char *label, FILE *log)
{
    struct kl_radix_impl ref, var;
    struct kl_err err = {{0}};
    kl_radix_impl_open(&ref, "reference", NULL, tr->page_size, &err);
    kl_radix_impl_open_variant(&var, v, tr->page_size, &err);
    int bad = kl_radix_trace_diff(tr, &ref, &var, true, &err) != 0;
    size_t total = 0, evictable = 0;
    kl_radix_size(var.state, &total, &evictable);
    fprintf(log, "%s radix %s %s ops=%zu nodes=%zu tokens=%zu rel_l2=0 max_abs=%d%s%s\n", bad ? "FAIL" : "PASS", label,
            v->name, tr->nops, kl_radix_node_count(var.state), total, bad, bad ? " " : "", bad ? err.msg : "");
    kl_radix_impl_close(&ref);
    kl_radix_impl_close(&var);
    return bad;
}

/* Long keys: the random traces keep keys short (to force sharing), so the vector loops'
 * 32-token trips and their tails get their own catalogue: lengths around every vector
 * width and a 4k key, differing at the first, a middle, the last-but-one and the last token. */
static void long_key_trace(struct kl_radix_trace *tr, int page, uint64_t seed)
{
    static const size_t lens[] = {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 4096};
    struct kl_rng rng;
    kl_rng_seed(&rng, seed);
    memset(tr, 0, sizeof *tr);
    snprintf(tr->name, sizeof tr->name, "long_keys(page=%d)", page);
    tr->page_size = page;
    int32_t *a = malloc(4097 * sizeof *a), *b = malloc(4097 * sizeof *b);
    KL_CHECK(a && b, "out of memory");
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        size_t n = lens[li];
        for (size_t i = 0; i < n; i++)
            a[i] = (int32_t)kl_rng_u64(&rng);
        size_t at[] = {0, n / 2, n >= 2 ? n - 2 : 0, n - 1};
        kl_radix_trace_add(tr, KL_RADIX_INSERT, a, n, 0);
        for (int k = 0; k < 4; k++) {
            memcpy(b, a, n * sizeof *a);
            b[at[k]] ^= 1 << (k * 7);
            kl_radix_trace_add(tr, KL_RADIX_MATCH, b, n, 0);
            kl_radix_trace_add(tr, KL_RADIX_INSERT, b, n, 0);
            kl_radix_trace_add(tr, KL_RADIX_MATCH, a, n, 0);
        }
        kl_radix_trace_add(tr, KL_RADIX_EVICT, NULL, 0, (long long)(n / 2));
        kl_radix_trace_add(tr, KL_RADIX_SIZE, NULL, 0, 0);
    }
    free(a);
    free(b);
}

static int radix_check(const struct kl_variant *v, uint64_t seed, FILE *log)
{
    int failures = 0;
    int nv = v ? 1 : kl_variant_count("radix", false);
    for (int vi = 0; vi < nv; vi++) {
        const struct kl_variant *var = v ? v : kl_variant_at("radix", vi, false);
        static const int pages[] = {1, 2, 4, 16};
        for (int p = 0; p < 4; p++) {
            struct kl_radix_trace tr;
            char label[96];
            long_key_trace(&tr, pages[p], seed);
            snprintf(label, sizeof label, "long_keys(page=%d)", pages[p]);
            failures += check_trace(var, &tr, label, log);
            kl_radix_trace_free(&tr);
            for (int k = 0; k < 3; k++) {
                uint64_t s = seed * 1000003u + (uint64_t)(p * 16 + k);
                kl_radix_trace_random(&tr, s, pages[p], 2000);
                snprintf(label, sizeof label, "random_ops(page=%d,seed=%llu)", pages[p], (unsigned long long)s);
                failures += check_trace(var, &tr, label, log);
                kl_radix_trace_free(&tr);
            }
        }
    }
    return failures;
}

/* ---- bench ---- */

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(double *v, size_t n, double q) /* v sorted */
{
    if (!n) return 0;
    size_t i = (size_t)ceil(q * (double)n) - 1;
    return v[i < n ? i : n - 1];
}

/* Last-level cache misses of this thread, where the kernel lets us count them (bare metal;
 * most VMs and containers refuse: then -1 and the rows carry only the lines estimate). */
static int misses_open(void)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_HARDWARE;
    a.config = PERF_COUNT_HW_CACHE_MISSES;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
}

static long long misses_read(int fd)
{
    long long v = 0;
    if (fd < 0 || read(fd, &v, sizeof v) != (ssize_t)sizeof v) return -1;
    return v;
}

static void cpu_device(struct kl_device_info *d)
{
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ' || *c == '\t')
                    c++;
                c[strcspn(c, "\n")] = 0;
                snprintf(d->name, sizeof d->name, "%s", c);
            }
            break;
        }
    }
    if (f) fclose(f);
    d->cc = 0;
    d->sms = (int)sysconf(_SC_NPROCESSORS_ONLN); /* CPU cores where a GPU row has SMs */
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    d->l2_bytes = l2 > 0 ? l2 : 0;
}

/* The corpus: a serving day's cache. 64 system prompts (256-1024 tokens), each followed by one
 * of 4 few-shot blocks (128-768 tokens), then a conversation of its own: 10240 sequences of
 * 1024-4096 tokens. Token ids are uniform over a Llama-3-sized vocabulary; each conversation
 * starts with a token no other one has, so no cached sequence extends another. */
#define SYS_PROMPTS 64
#define FEW_SHOTS 4
#define SEQUENCES 10240
#define KEY_TOKENS 4096
#define VOCAB 128000

struct corpus {
    int page;
    int32_t *sys[SYS_PROMPTS], *shot[SYS_PROMPTS][FEW_SHOTS];
    size_t sys_len[SYS_PROMPTS], shot_len[SYS_PROMPTS][FEW_SHOTS];
};

static size_t round_page(size_t n, int page)
{
    return n - n % (size_t)page;
}

static void corpus_init(struct corpus *c, int page)
{
    struct kl_rng rng;
    kl_rng_seed(&rng, 20240601);
    c->page = page;
    for (int s = 0; s < SYS_PROMPTS; s++) {
        c->sys_len[s] = round_page(256 + (size_t)kl_rng_range(&rng, 769), page);
        c->sys[s] = malloc(c->sys_len[s] * sizeof(int32_t));
        for (size_t i = 0; i < c->sys_len[s]; i++)
            c->sys[s][i] = (int32_t)kl_rng_range(&rng, VOCAB);
        for (int f = 0; f < FEW_SHOTS; f++) {
            size_t n = round_page(128 + (size_t)kl_rng_range(&rng, 641), page);
            c->shot_len[s][f] = n;
            c->shot[s][f] = malloc(n * sizeof(int32_t));
            for (size_t i = 0; i < n; i++)
                c->shot[s][f][i] = (int32_t)kl_rng_range(&rng, VOCAB);
        }
    }
}

static void corpus_free(struct corpus *c)
{
    for (int s = 0; s < SYS_PROMPTS; s++) {
        free(c->sys[s]);
        for (int f = 0; f < FEW_SHOTS; f++)
            free(c->shot[s][f]);
    }
}

/* Sequence i (deterministic), written to out (>= KEY_TOKENS tokens); returns its length. */
static size_t corpus_seq(const struct corpus *c, uint64_t i, int32_t *out)
{
    struct kl_rng rng;
    kl_rng_seed(&rng, 0x5eed0000 + i);
    int s = (int)(i % SYS_PROMPTS), f = (int)((i / SYS_PROMPTS) % FEW_SHOTS);
    size_t n = 0;
    memcpy(out, c->sys[s], c->sys_len[s] * sizeof *out);
    n += c->sys_len[s];
    memcpy(out + n, c->shot[s][f], c->shot_len[s][f] * sizeof *out);
    n += c->shot_len[s][f];
    size_t len = round_page(1024 + (size_t)kl_rng_range(&rng, KEY_TOKENS - 1024 + 1), c->page);
    if (len < n + 8 * (size_t)c->page) len = n + 8 * (size_t)c->page;
    out[n++] = VOCAB + (int32_t)i; /* this conversation's own first token */
    while (n < len)
        out[n++] = (int32_t)kl_rng_range(&rng, VOCAB);
    return len;
}

static struct kl_radix *corpus_tree(const struct corpus *c, kl_radix_cmp_fn cmp, int32_t *buf)
{
    struct kl_radix *t = kl_radix_new(c->page, cmp);
    for (uint64_t i = 0; i < SEQUENCES; i++)
        kl_radix_insert(t, buf, corpus_seq(c, i, buf));
    return t;
}

/* Query q: a follow-up turn of a random cached conversation: the whole conversation, then new
 * tokens (starting with one nobody has) up to 4096. Expect a hit of the conversation's length. */
static size_t corpus_query(const struct corpus *c, uint64_t q, int32_t *key, size_t *expect)
{
    struct kl_rng rng;
    kl_rng_seed(&rng, 0xabc000 + q);
    size_t n = corpus_seq(c, (uint64_t)kl_rng_range(&rng, SEQUENCES), key);
    *expect = n;
    key[n++] = -1 - (int32_t)q;
    while (n < KEY_TOKENS)
        key[n++] = (int32_t)kl_rng_range(&rng, VOCAB);
    return KEY_TOKENS;
}

struct queries {
    size_t count;
    int32_t *keys; /* count x KEY_TOKENS */
    size_t *expect;
    struct kl_radix_seg *segs; /* count x MAX_SEGS: the bytes memcmp is timed on */
    size_t *nsegs;
};
#define MAX_SEGS 64

static volatile int sink;

/* memcmp over exactly the bytes match compares: the same node tokens, the same key bytes. */
static double memcmp_pass(const struct queries *q)
{
    int acc = 0;
    double t0 = now_ns();
    for (size_t i = 0; i < q->count; i++) {
        const int32_t *key = q->keys + i * KEY_TOKENS;
        for (size_t s = 0; s < q->nsegs[i]; s++) {
            const struct kl_radix_seg *g = &q->segs[i * MAX_SEGS + s];
            acc |= memcmp(g->tokens, key + g->key_off, g->len * sizeof(int32_t));
        }
    }
    double t = now_ns() - t0;
    sink = acc;
    return t;
}

static double match_pass(struct kl_radix *t, const struct queries *q, size_t *bad)
{
    size_t wrong = 0;
    double t0 = now_ns();
    for (size_t i = 0; i < q->count; i++)
        wrong += kl_radix_match(t, q->keys + i * KEY_TOKENS, KEY_TOKENS) != q->expect[i];
    double dt = now_ns() - t0;
    if (bad) *bad += wrong;
    return dt;
}

struct workload {
    const char *name;
    int page;
    int hot;   /* queries: 16 repeated (cache-resident) vs 4096 (DRAM) */
    int churn; /* insert/lock/unlock/evict churn instead of matches */
    const char *what;
};

static const struct workload workloads[] = {
    {"match_cold_p1", 1, 0, 0, "4096-token follow-up keys over a 10240-sequence tree, page 1, working set >> LLC"},
    {"match_hot_p1", 1, 1, 0, "16 follow-up keys repeated (tree path and keys in L2), page 1"},
    {"match_cold_p16", 16, 0, 0, "as match_cold_p1 with page_size 16"},
    {"churn_p1", 1, 0, 1, "insert a new 1-4k conversation, lock it, unlock the one 8 back, evict to the cap"},
};

struct row_ctx {
    const struct kl_bench_args *args;
    const struct workload *w;
    const struct kl_variant *v;
    struct kl_device_info dev;
    const struct kl_targets *targets; /* perf/targets/cpu.csv when gating, else NULL */
    const char *judged;               /* the variant the gate judges; NULL: none */
};

/* Writes one results line; the gate judges it when rc's variant is the judged one. Returns the
 * table's gate column in gate. */
static void emit(const struct row_ctx *rc, cJSON *params, cJSON *extra, double tmin, double tmed, double tmax,
                 double bytes, bool check_pass, double max_abs, char *gate, size_t gate_len)
{
    const struct kl_bench_args *args = rc->args;
    struct kl_result r;
    memset(&r, 0, sizeof r);
    char date[32];
    r.module = "radix";
    r.variant = rc->v->name;
    r.workload = rc->w->name;
    r.params = params;
    r.device = rc->dev;
    r.time_us_min = tmin / 1e3;
    r.time_us_median = tmed / 1e3;
    r.time_us_max = tmax / 1e3;
    r.bytes = bytes;
    r.gbs = tmed > 0 ? bytes / tmed : 0; /* bytes per ns = GB/s */
    r.checked = true;
    r.check_pass = check_pass;
    r.max_abs = max_abs;
    r.extra = extra;
    r.commit = kl_build_commit();
    r.date = kl_today(date, sizeof date);
    /* The gate: perf/targets/cpu.csv's rows (memcmp_frac for the match workloads), for the variant
     * it names or the one --variant names; every other row is a measurement, not judged. */
    const bool judge = rc->judged && strcmp(rc->judged, rc->v->name) == 0;
    if (judge) kl_gate_judge(rc->targets, &r);
    if (args->json) kl_result_write(args->json, &r);
    if (judge && args->gate_log) kl_gate_record(args->gate_log, rc->targets, &r, stderr);
    kl_gate_cell(gate, gate_len, &r);
}

static void bench_match(const struct row_ctx *base, struct kl_radix *t, const struct queries *q, const char *tree_desc,
                        int nvariants, const struct kl_variant **vs, int *failures)
{
    const struct workload *w = base->w;
    const int reps = w->hot ? 15 : 9;
    const int inner = w->hot ? 256 : 1; /* hot: one "pass" = 256 rounds of the 16 queries */
    for (int vi = 0; vi < nvariants; vi++) {
        struct row_ctx rc = *base;
        rc.v = vs[vi];
        kl_bench_progress("radix %s %s", rc.v->name, w->name);
        kl_radix_set_cmp(t, (kl_radix_cmp_fn)rc.v->launch);
        size_t bad = 0;
        match_pass(t, q, &bad); /* warm-up; also checks every result once */
        memcmp_pass(q);
        double tm[16], tc[16];
        for (int r = 0; r < reps; r++) { /* interleaved, so both see the same machine state */
            tc[r] = tm[r] = 0;
            for (int k = 0; k < inner; k++)
                tc[r] += memcmp_pass(q);
            for (int k = 0; k < inner; k++)
                tm[r] += match_pass(t, q, &bad);
        }
        double per = (double)q->count * inner;
        for (int r = 0; r < reps; r++)
            tm[r] /= per, tc[r] /= per;
        qsort(tm, (size_t)reps, sizeof *tm, cmp_double);
        qsort(tc, (size_t)reps, sizeof *tc, cmp_double);
        double tmed = tm[reps / 2], cmed = tc[reps / 2];

        /* Latency: each match timed alone (the clock read adds ~20 ns to each). */
        size_t nl = q->count * (w->hot ? 64 : 2);
        double *lat = malloc(nl * sizeof *lat);
        for (size_t i = 0; i < nl; i++) {
            size_t k = i % q->count;
            double t0 = now_ns();
            bad += kl_radix_match(t, q->keys + k * KEY_TOKENS, KEY_TOKENS) != q->expect[k];
            lat[i] = now_ns() - t0;
        }
        qsort(lat, nl, sizeof *lat, cmp_double);
        double p50 = percentile(lat, nl, 0.50), p99 = percentile(lat, nl, 0.99);
        free(lat);

        /* The walk's story over one pass: nodes, bytes, lines; LLC misses where countable. */
        kl_radix_stats_reset(t);
        int fd = misses_open();
        long long m0 = misses_read(fd);
        match_pass(t, q, &bad);
        long long m1 = misses_read(fd);
        if (fd >= 0) close(fd);
        struct kl_radix_stats st;
        kl_radix_stats(t, &st);
        double matched_bytes = 0;
        for (size_t i = 0; i < q->count; i++)
            matched_bytes += (double)q->expect[i] * sizeof(int32_t);
        matched_bytes /= (double)q->count;
        double n = (double)q->count;
        double nodes = (double)st.nodes_visited / n, bytes_cmp = (double)st.tokens_compared * 4 / n;
        double lines = (double)st.lines_touched / n;
        double frac = cmed / tmed;

        cJSON *params = cJSON_CreateObject();
        cJSON_AddNumberToObject(params, "page_size", w->page);
        cJSON_AddNumberToObject(params, "sequences", SEQUENCES);
        cJSON_AddNumberToObject(params, "key_tokens", KEY_TOKENS);
        cJSON_AddNumberToObject(params, "queries", (double)q->count);
        cJSON_AddStringToObject(params, "tree", tree_desc);
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "memcmp_frac", frac);
        cJSON_AddNumberToObject(x, "ns_per_match", tmed);
        cJSON_AddNumberToObject(x, "p50_match_ns", p50);
        cJSON_AddNumberToObject(x, "p99_match_ns", p99);
        cJSON_AddNumberToObject(x, "memcmp_ns_per_match", cmed);
        cJSON_AddNumberToObject(x, "memcmp_gbs", matched_bytes / cmed);
        cJSON_AddNumberToObject(x, "matched_bytes_per_match", matched_bytes);
        cJSON_AddNumberToObject(x, "nodes_per_match", nodes);
        cJSON_AddNumberToObject(x, "bytes_per_match", bytes_cmp);
        cJSON_AddNumberToObject(x, "probes_per_match", (double)st.probes / n);
        cJSON_AddNumberToObject(x, "lines_per_match", lines);
        cJSON_AddNumberToObject(x, "lines_per_node", nodes > 0 ? lines / nodes : 0);
        if (m0 >= 0 && m1 >= m0) cJSON_AddNumberToObject(x, "llc_misses_per_match", (double)(m1 - m0) / n);
        cJSON_AddNumberToObject(x, "tree_nodes", (double)kl_radix_node_count(t));
        cJSON_AddNumberToObject(x, "tree_bytes", (double)kl_radix_bytes(t));
        if (strcmp(rc.v->name, "v1_simd") == 0) cJSON_AddStringToObject(x, "simd_path", kl_radix_cmp_simd_path());
        char gate[96];
        emit(&rc, params, x, tm[0], tmed, tm[reps - 1], matched_bytes, bad == 0, (double)bad, gate, sizeof gate);
        cJSON_Delete(params);
        cJSON_Delete(x);
        if (bad) {
            fprintf(stderr, "bench radix %s %s: %zu matches returned the wrong length\n", w->name, rc.v->name, bad);
            (*failures)++;
            if (base->args->failures) ++*base->args->failures;
        }
        if (base->args->table)
            fprintf(base->args->table, "%-15s %-10s %9.0f %9.0f %9.0f %7.2f %7.2f %6.2f %6.2f %7.0f %7.1f %s\n",
                    w->name, rc.v->name, tmed, p50, p99, matched_bytes / tmed, matched_bytes / cmed, frac, nodes,
                    bytes_cmp, nodes > 0 ? lines / nodes : 0, gate);
    }
}

static void bench_churn(const struct row_ctx *base, const struct corpus *c, int nvariants, const struct kl_variant **vs,
                        int32_t *buf, int *failures)
{
    enum { OPS = 20000, RUNNING = 8 };
    for (int vi = 0; vi < nvariants; vi++) {
        struct row_ctx rc = *base;
        rc.v = vs[vi];
        kl_bench_progress("radix %s %s", rc.v->name, base->w->name);
        struct kl_radix *t = corpus_tree(c, (kl_radix_cmp_fn)rc.v->launch, buf);
        size_t cap = 0, ev = 0;
        kl_radix_size(t, &cap, &ev);
        /* Keys of the requests still running: the 8 most recent, locked until 8 ops later. */
        int32_t *run = malloc((size_t)RUNNING * KEY_TOKENS * sizeof *run);
        size_t run_len[RUNNING] = {0};
        double *lat = malloc(OPS * sizeof *lat), key_bytes = 0, tot = 0;
        size_t bad = 0;
        for (int i = 0; i < OPS; i++) {
            int32_t *key = run + (size_t)(i % RUNNING) * KEY_TOKENS;
            size_t old = run_len[i % RUNNING];
            int32_t *oldkey = malloc((old + 1) * sizeof *oldkey);
            memcpy(oldkey, key, old * sizeof *key);
            size_t n = corpus_seq(c, SEQUENCES + (uint64_t)i, key); /* a new conversation */
            run_len[i % RUNNING] = n;
            key_bytes += (double)n * sizeof(int32_t);
            double t0 = now_ns();
            size_t hit = kl_radix_insert(t, key, n);
            kl_radix_lock(t, key, n);
            if (old && kl_radix_unlock(t, oldkey, old) < 0) bad++;
            size_t total = 0;
            kl_radix_size(t, &total, NULL);
            if (total > cap) kl_radix_evict(t, total - cap);
            lat[i] = now_ns() - t0;
            tot += lat[i];
            bad += hit > n;
            free(oldkey);
        }
        char msg[256];
        if (kl_radix_validate(t, msg, sizeof msg) != 0) {
            fprintf(stderr, "kernlab: radix churn %s: %s\n", rc.v->name, msg);
            bad++;
        }
        double mean = tot / OPS;
        qsort(lat, OPS, sizeof *lat, cmp_double);
        double p50 = percentile(lat, OPS, 0.5), p99 = percentile(lat, OPS, 0.99);
        cJSON *params = cJSON_CreateObject();
        cJSON_AddNumberToObject(params, "page_size", c->page);
        cJSON_AddNumberToObject(params, "sequences", SEQUENCES);
        cJSON_AddNumberToObject(params, "ops", OPS);
        cJSON_AddNumberToObject(params, "cap_tokens", (double)cap);
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "ns_per_op", mean);
        cJSON_AddNumberToObject(x, "p50_op_ns", p50);
        cJSON_AddNumberToObject(x, "p99_op_ns", p99);
        cJSON_AddNumberToObject(x, "tree_nodes", (double)kl_radix_node_count(t));
        cJSON_AddNumberToObject(x, "tree_bytes", (double)kl_radix_bytes(t));
        char gate[96];
        emit(&rc, params, x, lat[0], p50, lat[OPS - 1], key_bytes / OPS, bad == 0, (double)bad, gate, sizeof gate);
        cJSON_Delete(params);
        cJSON_Delete(x);
        if (bad) {
            fprintf(stderr, "bench radix %s %s: the churn broke the tree or an unlock was refused\n", base->w->name,
                    rc.v->name);
            (*failures)++;
            if (base->args->failures) ++*base->args->failures;
        }
        if (base->args->table)
            fprintf(base->args->table, "%-15s %-10s %9.0f %9.0f %9.0f  (ns per insert+lock+unlock+evict op) %s\n",
                    base->w->name, rc.v->name, mean, p50, p99, gate);
        free(lat);
        free(run);
        kl_radix_free(t);
    }
}

static int radix_bench(const struct kl_bench_args *args)
{
    const struct kl_variant *vs[16];
    int nv = 0;
    for (int i = 0; i < kl_variant_count("radix", false) && nv < 16; i++) {
        const struct kl_variant *v = kl_variant_at("radix", i, false);
        if (!args->variant || strcmp(args->variant, v->name) == 0) vs[nv++] = v;
    }
    if (!nv) {
        fprintf(stderr, "bench radix: no variant named \"%s\"\n", args->variant);
        return -2;
    }
    const int nw = (int)(sizeof workloads / sizeof *workloads);
    const char *names[sizeof workloads / sizeof *workloads];
    for (int i = 0; i < nw; i++) names[i] = workloads[i].name;
    const char *unknown = args->workload ? kl_bench_unknown_workload(args->workload, names, nw) : NULL;
    if (unknown) {
        fprintf(stderr, "bench radix: no workload named \"%.*s\" (have:", (int)strcspn(unknown, ","), unknown);
        for (int i = 0; i < nw; i++)
            fprintf(stderr, " %s", workloads[i].name);
        fprintf(stderr, ")\n");
        return -2;
    }
    struct row_ctx base = {.args = args};
    cpu_device(&base.dev);
    /* radix runs on the CPU: its targets are perf/targets/cpu.csv whatever GPU the run has. */
    struct kl_targets targets = {0};
    if (args->gate) {
        struct kl_err err = {{0}};
        char why[640];
        if (kl_targets_load(&targets, KL_SOURCE_DIR "/perf/targets", 0, &err) || kl_targets_check(&targets, &err)) {
            fprintf(stderr, "bench radix --gate: %s\n", err.msg);
            kl_targets_free(&targets);
            return -1;
        }
        base.targets = &targets;
        if (!(base.judged = kl_gate_variant(&targets, "radix", args->variant, why, sizeof why)))
            fprintf(stderr, "gate: radix: nothing judged: %s\n", why);
    }
    if (args->table)
        fprintf(args->table, "radix on %s (CPU, one thread)\n%-15s %-10s %9s %9s %9s %7s %7s %6s %6s %7s %7s %s\n",
                base.dev.name, "workload", "variant", "ns/match", "p50_ns", "p99_ns", "GB/s", "memcmp", "frac", "nodes",
                "bytes", "lines/n", "gate");
    int failures = 0;
    int32_t *buf = malloc((KEY_TOKENS + 16) * sizeof *buf);
    for (int page = 1; page <= 16; page *= 16) {
        struct corpus c;
        bool need = false;
        for (int i = 0; i < nw; i++)
            need |= workloads[i].page == page && kl_bench_wants(args, workloads[i].name);
        if (!need) continue;
        corpus_init(&c, page);
        struct kl_radix *t = NULL;
        char desc[128];
        for (int wi = 0; wi < nw; wi++) {
            const struct workload *w = &workloads[wi];
            if (w->page != page || !kl_bench_wants(args, w->name)) continue;
            base.w = w;
            if (w->churn) {
                bench_churn(&base, &c, nv, vs, buf, &failures);
                continue;
            }
            if (!t) {
                t = corpus_tree(&c, NULL, buf);
                size_t tot = 0;
                kl_radix_size(t, &tot, NULL);
                snprintf(desc, sizeof desc, "%zu nodes, %zu tokens, %.0f MB", kl_radix_node_count(t), tot,
                         (double)kl_radix_bytes(t) / 1e6);
            }
            struct queries q = {.count = w->hot ? 16 : 4096};
            q.keys = malloc(q.count * KEY_TOKENS * sizeof *q.keys);
            q.expect = malloc(q.count * sizeof *q.expect);
            q.segs = malloc(q.count * MAX_SEGS * sizeof *q.segs);
            q.nsegs = malloc(q.count * sizeof *q.nsegs);
            KL_CHECK(q.keys && q.expect && q.segs && q.nsegs, "out of memory");
            for (size_t i = 0; i < q.count; i++) {
                corpus_query(&c, w->hot ? 1000000 + i : i, q.keys + i * KEY_TOKENS, &q.expect[i]);
                q.nsegs[i] =
                    kl_radix_peek(t, q.keys + i * KEY_TOKENS, KEY_TOKENS, q.segs + i * MAX_SEGS, MAX_SEGS, NULL);
            }
            bench_match(&base, t, &q, desc, nv, vs, &failures);
            free(q.keys);
            free(q.expect);
            free(q.segs);
            free(q.nsegs);
        }
        kl_radix_free(t);
        corpus_free(&c);
    }
    free(buf);
    kl_targets_free(&targets);
    return failures ? -1 : 0;
}

static const char *workload_at(int i)
{
    return i >= 0 && i < (int)(sizeof workloads / sizeof *workloads) ? workloads[i].name : NULL;
}
KL_BENCH_WORKLOADS(radix, workload_at);

KL_MODULE(radix, .summary = "CPU longest-prefix match in SGLang's radix KV cache (insert, match, lock, evict)",
          .learning_step = 5, .min_cc = 0, .verify = kl_radix_verify, .check = radix_check, .bench = radix_bench);
