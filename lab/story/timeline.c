/* The story's recorder (timeline.h): CUPTI records in, ops and segments out. */
#include "lab/story/timeline.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "perf/activity.h"

const char *const kl_story_phase_names[KL_PHASE_COUNT] = {"prefill", "extend", "decode", "decode_graph", "control"};

/* Grows an array of elements of size `size` to hold one more; dies on out-of-memory (a recorder
 * that silently drops records would tell a wrong story). */
static void *grow(void *p, int *cap, int n, size_t size)
{
    if (n < *cap) return p;
    *cap = *cap ? *cap * 2 : 1024;
    void *q = realloc(p, (size_t)*cap * size);
    KL_CHECK(q, "out of host memory recording the timeline");
    return q;
}

void kl_story_timeline_init(struct kl_story_timeline *t)
{
    memset(t, 0, sizeof *t);
    t->cur_segment = -1;
}

void kl_story_timeline_release(struct kl_story_timeline *t)
{
    for (int i = 0; i < t->n_names; i++)
        free(t->names[i]);
    free(t->names), free(t->seg), free(t->ops), free(t->k), free(t->copies), free(t->ev), free(t->api);
    memset(t, 0, sizeof *t);
}

uint64_t kl_story_now(const struct kl_story_timeline *t)
{
    return t->clock ? t->clock() : t->on ? kl_activity_now() : 0;
}

/* ---- CUPTI's side ---- */

static int intern(struct kl_story_timeline *t, const char *name)
{
    for (int i = t->n_names - 1; i >= 0; i--) /* few distinct names (a few dozen), recent ones first */
        if (strcmp(t->names[i], name) == 0) return i;
    t->names = grow(t->names, &t->cap_names, t->n_names, sizeof *t->names);
    t->names[t->n_names] = strdup(name);
    KL_CHECK(t->names[t->n_names], "out of host memory");
    return t->n_names++;
}

/* CUPTI may deliver buffers from its own thread: one lock over the records it fills (the run's
 * thread reads them only after kl_activity_stop). */
static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_kernel(void *user, const struct kl_kernel_record *r)
{
    struct kl_story_timeline *t = user;
    pthread_mutex_lock(&sink_lock);
    t->k = grow(t->k, &t->cap_k, t->n_k, sizeof *t->k);
    struct kl_story_kernel *k = &t->k[t->n_k++];
    *k = (struct kl_story_kernel){.start = r->start_ns,
                                  .end = r->end_ns,
                                  .correlation = r->correlation,
                                  .stream = r->stream,
                                  .name = intern(t, r->name),
                                  .op = -1,
                                  .registers = r->registers,
                                  .smem = r->static_smem + r->dynamic_smem,
                                  .local_bytes = r->local_bytes,
                                  .occupancy = (float)r->theoretical_occupancy_pct};
    memcpy(k->grid, r->grid, sizeof k->grid);
    memcpy(k->block, r->block, sizeof k->block);
    pthread_mutex_unlock(&sink_lock);
}

static void api_put(struct kl_story_timeline *t, uint32_t key, uint64_t start)
{
    if (2 * (t->api_used + 1) > t->api_cap) { /* rehash at load 1/2 */
        size_t cap = t->api_cap ? t->api_cap * 2 : 1 << 16;
        __typeof__(t->api) a = calloc(cap, sizeof *a);
        KL_CHECK(a, "out of host memory recording the timeline");
        for (size_t i = 0; i < t->api_cap; i++)
            if (t->api[i].key) {
                size_t j = t->api[i].key * 2654435761u & (cap - 1);
                while (a[j].key)
                    j = (j + 1) & (cap - 1);
                a[j] = t->api[i];
            }
        free(t->api);
        t->api = a, t->api_cap = cap;
    }
    size_t j = key * 2654435761u & (t->api_cap - 1);
    while (t->api[j].key && t->api[j].key != key)
        j = (j + 1) & (t->api_cap - 1);
    if (!t->api[j].key) t->api_used++;
    /* a runtime call and the driver call it makes may share an id: keep the earlier (outer) start */
    if (!t->api[j].key || start < t->api[j].start) t->api[j].start = start;
    t->api[j].key = key;
}

static bool api_get(const struct kl_story_timeline *t, uint32_t key, uint64_t *start)
{
    if (!t->api_cap || !key) return false;
    for (size_t j = key * 2654435761u & (t->api_cap - 1); t->api[j].key; j = (j + 1) & (t->api_cap - 1))
        if (t->api[j].key == key) return *start = t->api[j].start, true;
    return false;
}

static void on_api(void *user, uint32_t correlation, uint64_t start, uint64_t end)
{
    if (!correlation) return;
    pthread_mutex_lock(&sink_lock);
    api_put(user, correlation, start);
    pthread_mutex_unlock(&sink_lock);
}

static void on_copy(void *user, uint32_t correlation, uint32_t stream, uint64_t start, uint64_t end, uint64_t bytes,
                    int kind)
{
    struct kl_story_timeline *t = user;
    pthread_mutex_lock(&sink_lock);
    t->copies = grow(t->copies, &t->cap_copies, t->n_copies, sizeof *t->copies);
    t->copies[t->n_copies++] = (struct kl_story_copy){.start = start,
                                                      .end = end,
                                                      .bytes = bytes,
                                                      .correlation = correlation,
                                                      .stream = stream,
                                                      .kind = kind,
                                                      .segment = -1};
    pthread_mutex_unlock(&sink_lock);
}

struct kl_activity_sink kl_story_timeline_sink(struct kl_story_timeline *t)
{
    return (struct kl_activity_sink){.user = t, .kernel = on_kernel, .api = on_api, .copy = on_copy};
}

int kl_story_timeline_start(struct kl_story_timeline *t)
{
    static struct kl_activity_sink sink; /* CUPTI keeps the pointer until kl_activity_stop */
    sink = kl_story_timeline_sink(t);
    if (kl_activity_start(&sink, t->why, sizeof t->why)) return -1;
    t->on = true;
    t->t_zero = kl_story_now(t);
    return 0;
}

/* ---- the run's side ---- */

int kl_story_timeline_segment(struct kl_story_timeline *t, enum kl_story_phase phase, int step, int requests,
                              int64_t q_tokens, const int64_t *kv_len, bool detail)
{
    kl_story_timeline_end_segment(t);
    t->seg = grow(t->seg, &t->cap_seg, t->n_seg, sizeof *t->seg);
    struct kl_story_segment *s = &t->seg[t->n_seg];
    *s = (struct kl_story_segment){.phase = phase,
                                   .step = step,
                                   .requests = requests,
                                   .q_tokens = q_tokens,
                                   .t_begin = kl_story_now(t),
                                   .first_op = t->n_ops,
                                   .end_op = t->n_ops,
                                   .detail = detail};
    for (int b = 0; b < requests && b < 2; b++)
        s->kv_len[b] = kv_len[b];
    return t->cur_segment = t->n_seg++;
}

void kl_story_timeline_end_segment(struct kl_story_timeline *t)
{
    if (t->cur_segment >= 0) t->seg[t->cur_segment].end_op = t->n_ops;
    t->cur_segment = -1;
}

void kl_story_timeline_event(struct kl_story_timeline *t, const char *what, const char *fmt, ...)
{
    t->ev = grow(t->ev, &t->cap_ev, t->n_ev, sizeof *t->ev);
    struct kl_story_event *e = &t->ev[t->n_ev++];
    e->t = kl_story_now(t);
    snprintf(e->what, sizeof e->what, "%s", what);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->detail, sizeof e->detail, fmt, ap);
    va_end(ap);
}

static void op_begin(struct kl_story_timeline *t, int name, int layer)
{
    t->ops = grow(t->ops, &t->cap_ops, t->n_ops, sizeof *t->ops);
    t->ops[t->n_ops] = (struct kl_story_op_rec){
        .name = (int16_t)name, .layer = (int16_t)layer, .segment = t->cur_segment, .t0 = kl_story_now(t)};
}

void kl_story_timeline_hook(void *ctx, const struct kl_story_op *op, int begin)
{
    struct kl_story_timeline *t = ctx;
    if (t->cur_segment < 0) return;
    if (begin) {
        op_begin(t, op->name, op->layer);
        return;
    }
    t->ops[t->n_ops].t1 = kl_story_now(t);
    /* the first op of each distinct (phase, op) is the one the profiler replays */
    const enum kl_story_phase ph = t->seg[t->cur_segment].phase;
    if (ph == KL_PHASE_PREFILL || ph == KL_PHASE_EXTEND || ph == KL_PHASE_DECODE) {
        int i = 0;
        while (i < t->n_prof && !(t->prof[i].phase == ph && t->prof[i].op.name == op->name))
            i++;
        if (i == t->n_prof)
            t->prof[t->n_prof++] = (struct kl_story_profile){.phase = ph, .op = *op, .first_op = t->n_ops};
    }
    t->n_ops++;
}

void kl_story_timeline_graph(struct kl_story_timeline *t, int begin)
{
    if (t->cur_segment < 0) return;
    if (begin) {
        op_begin(t, -1, -1);
        return;
    }
    t->ops[t->n_ops++].t1 = kl_story_now(t);
}

/* ---- joining kernels to ops ---- */

static int by_start(const void *a, const void *b)
{
    const struct kl_story_kernel *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

/* The op whose host interval holds time s (ops are in issue order, their intervals disjoint). */
static int op_at(const struct kl_story_timeline *t, uint64_t s)
{
    int lo = 0, hi = t->n_ops - 1, found = -1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        if (t->ops[mid].t0 <= s)
            found = mid, lo = mid + 1;
        else
            hi = mid - 1;
    }
    return found >= 0 && s <= t->ops[found].t1 ? found : -1;
}

void kl_story_timeline_stop(struct kl_story_timeline *t)
{
    if (!t->on) return;
    kl_story_timeline_end_segment(t);
    kl_activity_stop();
    t->on = false;
    kl_story_timeline_join(t);
}

void kl_story_timeline_join(struct kl_story_timeline *t)
{
    kl_story_timeline_end_segment(t);
    qsort(t->k, (size_t)t->n_k, sizeof *t->k, by_start);
    for (int i = 0; i < t->n_k; i++) {
        uint64_t s;
        if (api_get(t, t->k[i].correlation, &s)) t->k[i].op = op_at(t, s);
    }
    /* a copy belongs to the segment whose host span [t_begin, last op's end] issued it */
    for (int i = 0; i < t->n_copies; i++) {
        uint64_t s;
        if (!api_get(t, t->copies[i].correlation, &s)) continue;
        for (int g = 0; g < t->n_seg; g++) {
            const struct kl_story_segment *sg = &t->seg[g];
            const uint64_t end = sg->end_op > sg->first_op ? t->ops[sg->end_op - 1].t1 : sg->t_begin;
            if (s >= sg->t_begin && s <= end) t->copies[i].segment = g;
        }
    }
}

double kl_story_op_us(const struct kl_story_timeline *t, int op)
{
    double us = 0;
    for (int i = 0; i < t->n_k; i++)
        if (t->k[i].op == op) us += (double)(t->k[i].end - t->k[i].start) * 1e-3;
    return us;
}

/* ---- the profiler ---- */

struct replay {
    struct kl_story_model *m;
    const struct kl_story_op *op;
};

static void replay_launch(void *ctx)
{
    const struct replay *r = ctx;
    kl_story_op_launch(r->m, r->op);
}

void kl_story_timeline_profile(struct kl_story_timeline *t, struct kl_story_model *m, FILE *progress)
{
    for (int i = 0; i < t->n_prof; i++) {
        struct kl_story_profile *p = &t->prof[i];
        struct replay r = {m, &p->op};
        struct kl_err err = {{0}};
        if (progress)
            fprintf(progress, "story: counters %d/%d: %s %s (layer %d)\n", i + 1, t->n_prof,
                    kl_story_phase_names[p->phase], kl_story_op_names[p->op.name], p->op.layer);
        if (kl_counters_collect(replay_launch, &r, &p->counters, &err) == 0 && p->counters.valid)
            p->measured = true;
        else if (!p->counters.why[0])
            snprintf(p->counters.why, sizeof p->counters.why, "collection failed: %.200s", err.msg);
        if (!p->measured && progress) fprintf(progress, "story: counters: %s\n", p->counters.why);
        if (!p->measured && strstr(p->counters.why, "not available")) { /* the same answer for every op: stop asking */
            for (int j = i + 1; j < t->n_prof; j++)
                t->prof[j].counters = p->counters;
            break;
        }
    }
    cudaDeviceSynchronize();
}

/* ---- the results document ---- */

/* Microseconds from request 1's arrival, to the nanosecond. */
static double us_of(const struct kl_story_timeline *t, uint64_t ns)
{
    return round(((double)ns - (double)t->t_zero) * 1e-3 * 1000) / 1000;
}
static double r3(double v)
{
    return round(v * 1000) / 1000;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Kernels of a segment: [first, end) in the start-sorted array is not contiguous (steps of the
 * graph and the eager run interleave nothing, but a stray kernel might); collect indices. */
static int seg_kernels(const struct kl_story_timeline *t, int g, int **out)
{
    int n = 0, cap = 0;
    int *idx = NULL;
    for (int i = 0; i < t->n_k; i++) {
        const int op = t->k[i].op;
        if (op < 0 || t->ops[op].segment != g) continue;
        idx = grow(idx, &cap, n, sizeof *idx);
        idx[n++] = i;
    }
    *out = idx;
    return n;
}

/* The op (name) of each kernel of a graph step, taken from the eager step that was captured: same
 * kernels in the same order. NULL when the two do not line up. */
static int *graph_op_names(const struct kl_story_timeline *t, const int *ki, int n, const int *ref, int nref)
{
    if (!ref || n != nref) return NULL;
    int *names = malloc(sizeof(int) * (size_t)(n ? n : 1));
    for (int i = 0; names && i < n; i++) {
        if (t->k[ki[i]].name != t->k[ref[i]].name) return free(names), NULL;
        names[i] = t->ops[t->k[ref[i]].op].name;
    }
    return names;
}

static cJSON *kernel_json(const struct kl_story_timeline *t, const struct kl_story_kernel *k)
{
    const double v[10] = {k->name,     us_of(t, k->start), r3((double)(k->end - k->start) * 1e-3),
                          k->grid[0],  k->grid[1],         k->grid[2],
                          k->block[0], k->block[1],        k->block[2],
                          k->stream};
    return cJSON_CreateDoubleArray(v, 10);
}

/* Summary fields of a segment (its kernels ki[0..n)), with its ops' names per kernel in names[]. */
static void segment_summary(const struct kl_story_timeline *t, int g, const int *ki, int n, const int *names, cJSON *o)
{
    const struct kl_story_segment *s = &t->seg[g];
    double by_op[KL_OP_COUNT] = {0}, kernel_us = 0, gap_sum = 0, gap_max = 0;
    double *gaps = malloc(sizeof(double) * (size_t)(n ? n : 1));
    int ng = 0, overlapped = 0;
    for (int i = 0; i < n; i++) {
        const struct kl_story_kernel *k = &t->k[ki[i]];
        const double d = (double)(k->end - k->start) * 1e-3;
        kernel_us += d;
        if (names && names[i] >= 0) by_op[names[i]] += d;
        if (i > 0) {
            const double gap = ((double)k->start - (double)t->k[ki[i - 1]].end) * 1e-3;
            if (gap < 0)
                overlapped++; /* a PDL kernel started under its predecessor */
            else
                gap_sum += gap, gap_max = fmax(gap_max, gap);
            if (gaps) gaps[ng++] = gap > 0 ? gap : 0;
        }
    }
    if (gaps && ng) qsort(gaps, (size_t)ng, sizeof *gaps, cmp_double);
    const uint64_t host_end = s->end_op > s->first_op ? t->ops[s->end_op - 1].t1 : s->t_begin;
    cJSON_AddNumberToObject(o, "t0_us", n ? us_of(t, t->k[ki[0]].start) : us_of(t, s->t_begin));
    cJSON_AddNumberToObject(o, "t1_us", n ? us_of(t, t->k[ki[n - 1]].end) : us_of(t, s->t_begin));
    cJSON_AddNumberToObject(o, "host_us", r3(((double)host_end - (double)s->t_begin) * 1e-3));
    cJSON_AddNumberToObject(o, "kernels", n);
    cJSON_AddNumberToObject(o, "kernel_us", r3(kernel_us));
    cJSON *gj = cJSON_AddObjectToObject(o, "gaps");
    cJSON_AddNumberToObject(gj, "count", ng);
    cJSON_AddNumberToObject(gj, "sum_us", r3(gap_sum));
    cJSON_AddNumberToObject(gj, "median_us", ng ? r3(gaps[ng / 2]) : 0);
    cJSON_AddNumberToObject(gj, "max_us", r3(gap_max));
    cJSON_AddNumberToObject(gj, "overlapped", overlapped);
    free(gaps);
    double rounded[KL_OP_COUNT];
    for (int i = 0; i < KL_OP_COUNT; i++)
        rounded[i] = r3(by_op[i]);
    cJSON_AddItemToObject(o, "by_op", cJSON_CreateDoubleArray(rounded, KL_OP_COUNT));
    double copy_us = 0, copy_bytes = 0;
    int copies = 0;
    for (int i = 0; i < t->n_copies; i++)
        if (t->copies[i].segment == g)
            copies++, copy_bytes += (double)t->copies[i].bytes,
                copy_us += (double)(t->copies[i].end - t->copies[i].start) * 1e-3;
    cJSON *cj = cJSON_AddObjectToObject(o, "copies");
    cJSON_AddNumberToObject(cj, "count", copies);
    cJSON_AddNumberToObject(cj, "bytes", copy_bytes);
    cJSON_AddNumberToObject(cj, "us", r3(copy_us));
}

/* [[op, layer, [[kernel...], ...]], ...]: every op of the segment with its kernels. */
static cJSON *segment_detail(const struct kl_story_timeline *t, int g, const int *ki, int n, const int *names)
{
    cJSON *arr = cJSON_CreateArray();
    const struct kl_story_segment *s = &t->seg[g];
    if (s->end_op - s->first_op == 1 && t->ops[s->first_op].name < 0) { /* a graph step: ops by captured order */
        int cur_name = -2, layer = -1;
        cJSON *ks = NULL;
        for (int i = 0; i < n; i++) {
            const int nm = names ? names[i] : -1;
            if (nm != cur_name || !ks) {
                /* the layer is not known from order alone: count add_rms_norm/rms_norm boundaries */
                if (nm == KL_OP_RMS_NORM || (nm == KL_OP_ADD_RMS_NORM && cur_name == KL_OP_DOWN_GEMM)) layer++;
                cJSON *e = cJSON_CreateArray();
                cJSON_AddItemToArray(e, cJSON_CreateNumber(nm));
                cJSON_AddItemToArray(e, cJSON_CreateNumber(nm == KL_OP_EMBED || nm >= KL_OP_LM_HEAD ? -1 : layer));
                cJSON_AddItemToArray(e, ks = cJSON_CreateArray());
                cJSON_AddItemToArray(arr, e);
                cur_name = nm;
            }
            cJSON_AddItemToArray(ks, kernel_json(t, &t->k[ki[i]]));
        }
        /* the final norm is the add_rms_norm right before the LM head: outside the layers */
        for (int i = 1; i < cJSON_GetArraySize(arr); i++)
            if (cJSON_GetArrayItem(cJSON_GetArrayItem(arr, i), 0)->valueint == KL_OP_LM_HEAD)
                cJSON_SetNumberValue(cJSON_GetArrayItem(cJSON_GetArrayItem(arr, i - 1), 1), -1);
        return arr;
    }
    for (int op = s->first_op; op < s->end_op; op++) {
        cJSON *e = cJSON_CreateArray(), *ks = cJSON_CreateArray();
        cJSON_AddItemToArray(e, cJSON_CreateNumber(t->ops[op].name));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(t->ops[op].layer));
        for (int i = 0; i < n; i++)
            if (t->k[ki[i]].op == op) cJSON_AddItemToArray(ks, kernel_json(t, &t->k[ki[i]]));
        cJSON_AddItemToArray(e, ks);
        cJSON_AddItemToArray(arr, e);
    }
    return arr;
}

static const char *const phase_titles[KL_PHASE_COUNT] = {
    "request 1: prefill (radix miss)", "request 2: extend (radix hit)", "decode: both requests, one token each",
    "decode again, replayed as a CUDA graph", "control: request 2 prefilled from scratch (cache bypassed)"};

void kl_story_timeline_json(const struct kl_story_timeline *t, cJSON *doc)
{
    cJSON_AddItemToObject(doc, "ops", cJSON_CreateStringArray(kl_story_op_names, KL_OP_COUNT));
    cJSON_AddItemToObject(doc, "kinds", cJSON_CreateStringArray(kl_story_kind_names, KL_KIND_COUNT));
    cJSON_AddItemToObject(doc, "op_kind", cJSON_CreateIntArray(kl_story_op_kind, KL_OP_COUNT));
    cJSON_AddItemToObject(doc, "kernels", cJSON_CreateStringArray((const char *const *)t->names, t->n_names));
    int unattributed = 0;
    for (int i = 0; i < t->n_k; i++)
        unattributed += t->k[i].op < 0;
    cJSON *rec = cJSON_AddObjectToObject(doc, "recording");
    cJSON_AddNumberToObject(rec, "kernels", t->n_k);
    cJSON_AddNumberToObject(rec, "unattributed", unattributed);
    cJSON_AddNumberToObject(rec, "ops", t->n_ops);
    cJSON_AddNumberToObject(rec, "copies", t->n_copies);
    cJSON_AddNumberToObject(rec, "api_calls", (double)t->api_used);
    cJSON *ev = cJSON_AddArrayToObject(doc, "events");
    for (int i = 0; i < t->n_ev; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "t_us", us_of(t, t->ev[i].t));
        cJSON_AddStringToObject(e, "what", t->ev[i].what);
        cJSON_AddStringToObject(e, "detail", t->ev[i].detail);
        cJSON_AddItemToArray(ev, e);
    }

    cJSON *phases = cJSON_AddArrayToObject(doc, "phases");
    int *eager_first = NULL, n_eager_first = 0; /* the first eager decode step's kernels: the graph's pattern */
    for (int ph = 0; ph < KL_PHASE_COUNT; ph++) {
        cJSON *pj = NULL, *steps_j = NULL, *detail_steps = NULL;
        for (int g = 0; g < t->n_seg; g++) {
            const struct kl_story_segment *s = &t->seg[g];
            if ((int)s->phase != ph) continue;
            if (!pj) {
                pj = cJSON_CreateObject();
                cJSON_AddStringToObject(pj, "name", kl_story_phase_names[ph]);
                cJSON_AddStringToObject(pj, "title", phase_titles[ph]);
                cJSON_AddNumberToObject(pj, "requests", s->requests);
                if (s->step) {
                    steps_j = cJSON_AddArrayToObject(pj, "steps");
                    detail_steps = cJSON_AddObjectToObject(pj, "detail_steps");
                }
                cJSON_AddItemToArray(phases, pj);
            }
            int *ki = NULL;
            const int n = seg_kernels(t, g, &ki);
            int *names = NULL;
            if (s->end_op - s->first_op == 1 && t->ops[s->first_op].name < 0)
                names = graph_op_names(t, ki, n, eager_first, n_eager_first);
            else if (n) {
                names = malloc(sizeof(int) * (size_t)n);
                for (int i = 0; names && i < n; i++)
                    names[i] = t->ops[t->k[ki[i]].op].name;
            }
            cJSON *o = s->step ? cJSON_CreateObject() : pj;
            if (s->step) {
                cJSON_AddNumberToObject(o, "step", s->step);
                cJSON_AddItemToArray(steps_j, o);
            }
            cJSON_AddNumberToObject(o, "q_tokens", (double)s->q_tokens);
            const double kv[2] = {(double)s->kv_len[0], (double)s->kv_len[1]};
            cJSON_AddItemToObject(o, "kv_len", cJSON_CreateDoubleArray(kv, s->requests < 2 ? 1 : 2));
            segment_summary(t, g, ki, n, names, o);
            if (s->detail) {
                cJSON *d = segment_detail(t, g, ki, n, names);
                if (s->step) {
                    char key[16];
                    snprintf(key, sizeof key, "%d", s->step);
                    cJSON_AddItemToObject(detail_steps, key, d);
                } else {
                    cJSON_AddItemToObject(pj, "detail", d);
                }
            }
            if (ph == KL_PHASE_DECODE && s->step == 1)
                eager_first = ki, n_eager_first = n;
            else
                free(ki);
            free(names);
        }
    }
    free(eager_first);

    cJSON *profiles = cJSON_AddArrayToObject(doc, "profiles");
    for (int i = 0; i < t->n_prof; i++) {
        const struct kl_story_profile *p = &t->prof[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "phase", kl_story_phase_names[p->phase]);
        cJSON_AddNumberToObject(o, "op", p->op.name);
        cJSON_AddNumberToObject(o, "layer", p->op.layer);
        cJSON_AddStringToObject(o, "shape", p->op.shape);
        cJSON_AddNumberToObject(o, "flops", p->op.flops);
        cJSON_AddNumberToObject(o, "bytes", p->op.bytes);
        cJSON_AddNumberToObject(o, "us", r3(kl_story_op_us(t, p->first_op)));
        cJSON *ks = cJSON_AddArrayToObject(o, "launches");
        for (int j = 0; j < t->n_k; j++) {
            const struct kl_story_kernel *k = &t->k[j];
            if (k->op != p->first_op) continue;
            cJSON *l = cJSON_CreateObject();
            cJSON_AddNumberToObject(l, "kernel", k->name);
            cJSON_AddItemToObject(l, "grid", cJSON_CreateIntArray(k->grid, 3));
            cJSON_AddItemToObject(l, "block", cJSON_CreateIntArray(k->block, 3));
            cJSON_AddNumberToObject(l, "registers", k->registers);
            cJSON_AddNumberToObject(l, "smem", k->smem);
            cJSON_AddNumberToObject(l, "local_bytes", k->local_bytes);
            cJSON_AddNumberToObject(l, "theoretical_occupancy_pct", r3(k->occupancy));
            cJSON_AddNumberToObject(l, "us", r3((double)(k->end - k->start) * 1e-3));
            cJSON_AddItemToArray(ks, l);
        }
        cJSON *c = kl_counters_json(&p->counters);
        if (c && !p->measured && !cJSON_GetObjectItem(c, "why")) cJSON_AddStringToObject(c, "why", "not measured");
        cJSON_AddItemToObject(o, "counters", c);
        cJSON_AddItemToArray(profiles, o);
    }
}
