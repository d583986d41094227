/* The story's requests, from arrival to finish, as a serving engine's scheduler runs them.
 *
 *   request 1 arrives      radix match: nothing cached; pages for its prompt; prefill; first token;
 *                          its prompt goes into the radix tree (locked while it runs)
 *   request 2 arrives      it shares request 1's first `shared` tokens: the match finds them (whole
 *                          pages), locks them, and only the rest is computed: an extend, whose
 *                          queries attend the cached prefix's keys and their own
 *   decode                 both requests together, one token each per step; a new page whenever a
 *                          request's last one fills; the step's metadata goes up in one copy, the
 *                          tokens come back in another, and the host never waits in between
 *   decode as a graph      the same steps again, each one cudaGraphLaunch of the captured pass
 *   requests finish        their sequences go into the tree; the partial last pages are freed
 *   control                request 2 prefilled from scratch, bypassing the cache: its logits must
 *                          equal the hit's (the cache is only an optimisation), and its time is
 *                          what the hit saved
 * Everything but the forward passes runs on the host between them, as in SGLang's scheduler loop.
 * The results document (story.h) is assembled at the end. */
#include "lab/story/scheduler.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lab/core/device.h"
#include "lab/core/results.h"
#include "lab/core/tensor.h"
#include "lab/story/cache.h"
#include "lab/story/model.h"
#include "lab/story/story.h"
#include "lab/story/timeline.h"
#include "perf/bench.h"

/* ---- metadata images (host, tested without a GPU) ---- */

static size_t up8(size_t x)
{
    return (x + 7) & ~(size_t)7;
}

void kl_story_meta_layout(int64_t tokens, int64_t batch, int64_t pages, struct kl_story_meta *m)
{
    size_t off = 0;
    m->tokens = tokens, m->batch = batch, m->pages = pages;
    m->ids = off, off = up8(off + 4 * (size_t)tokens);
    m->positions = off, off += 8 * (size_t)tokens;
    m->slots = off, off += 8 * (size_t)tokens;
    m->qo_indptr = off, off = up8(off + 4 * (size_t)(batch + 1));
    m->kv_indptr = off, off = up8(off + 4 * (size_t)(batch + 1));
    m->kv_last_page_len = off, off = up8(off + 4 * (size_t)batch);
    m->kv_indices = off, off = up8(off + 4 * (size_t)pages);
    m->bytes = off;
}

int64_t kl_story_meta_build(struct kl_story_req *const *reqs, const int *q_len, int n, int page_size, bool with_ids,
                            void *image, const struct kl_story_meta *m)
{
    char *base = image;
    int32_t *ids = (int32_t *)(base + m->ids), *qo = (int32_t *)(base + m->qo_indptr);
    int32_t *kvp = (int32_t *)(base + m->kv_indptr), *last = (int32_t *)(base + m->kv_last_page_len);
    int32_t *idx = (int32_t *)(base + m->kv_indices);
    int64_t *pos = (int64_t *)(base + m->positions), *slots = (int64_t *)(base + m->slots);
    int64_t t = 0, p = 0, longest = 0;
    qo[0] = kvp[0] = 0;
    if (n > m->batch) return -1;
    for (int b = 0; b < n; b++) {
        const struct kl_story_req *r = reqs[b];
        const int kv_len = r->cached + q_len[b], pages = (kv_len + page_size - 1) / page_size;
        if (pages > r->n_pages || t + q_len[b] > m->tokens || p + pages > m->pages || kv_len > r->len) return -1;
        for (int i = 0; i < q_len[b]; i++, t++) {
            const int at = r->cached + i;
            if (with_ids) ids[t] = r->tokens[at];
            pos[t] = at;
            slots[t] = (int64_t)r->pages[at / page_size] * page_size + at % page_size;
        }
        for (int i = 0; i < pages; i++)
            idx[p++] = r->pages[i];
        qo[b + 1] = (int32_t)t, kvp[b + 1] = (int32_t)p;
        last[b] = kv_len ? (kv_len - 1) % page_size + 1 : 0;
        if (kv_len > longest) longest = kv_len;
    }
    return longest;
}

/* ---- the run's state ---- */

/* A forward pass's metadata: its host image (pinned, so the copy is asynchronous; one image per
 * decode step, since the host runs ahead and must not overwrite an image before it is copied) and
 * the device copy the kernels read. */
struct dev_batch {
    struct kl_story_meta lay;
    char *host; /* images * lay.bytes */
    int images;
    char *dev;
    struct kl_story_batch b;
};

struct story {
    const struct kl_story_options *o;
    struct kl_story_model *m;
    struct kl_story_cache cache;
    struct kl_story_timeline tl;
    struct kl_story_req req[2];
    struct dev_batch prefill, extend, decode, control;
    int32_t *tokens_host; /* pinned: [1 + steps][2] eager tokens, then the same for the graph */
    float *logits_host;   /* pinned: [2 + 1 + 2 * steps * 2 (with keep_logits)][vocab] */
    struct kl_story_result *r;
    struct kl_err *err;
    double match_us, insert_us;
    int64_t matched;
};

static void progress(const struct story *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress(const struct story *st, const char *fmt, ...)
{
    if (!st->o->progress) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(st->o->progress, "story: ");
    vfprintf(st->o->progress, fmt, ap);
    fprintf(st->o->progress, "\n");
    va_end(ap);
}

static double host_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

#define CUDA_TRY(expr)                                                                                                 \
    do {                                                                                                               \
        cudaError_t e_ = (expr);                                                                                       \
        if (e_ != cudaSuccess) return kl_fail(st->err, "%s: %s", #expr, cudaGetErrorString(e_));                       \
    } while (0)

static int batch_alloc(struct story *st, struct dev_batch *d, int64_t tokens, int64_t batch, int64_t pages, int images,
                       bool decode)
{
    memset(d, 0, sizeof *d);
    kl_story_meta_layout(tokens, batch, pages, &d->lay);
    d->images = images;
    CUDA_TRY(cudaMallocHost((void **)&d->host, d->lay.bytes * (size_t)images));
    CUDA_TRY(cudaMalloc((void **)&d->dev, d->lay.bytes));
    CUDA_TRY(cudaMemset(d->dev, 0, d->lay.bytes));
    d->b = (struct kl_story_batch){.decode = decode,
                                   .ids = decode ? st->m->next_ids : (int32_t *)(d->dev + d->lay.ids),
                                   .positions = (int64_t *)(d->dev + d->lay.positions),
                                   .slots = (int64_t *)(d->dev + d->lay.slots),
                                   .qo_indptr = (int32_t *)(d->dev + d->lay.qo_indptr),
                                   .kv_indptr = (int32_t *)(d->dev + d->lay.kv_indptr),
                                   .kv_indices = (int32_t *)(d->dev + d->lay.kv_indices),
                                   .kv_last_page_len = (int32_t *)(d->dev + d->lay.kv_last_page_len)};
    return 0;
}

static void batch_free(struct dev_batch *d)
{
    cudaFreeHost(d->host);
    cudaFree(d->dev);
}

static int req_init(struct kl_story_req *r, int id, const int32_t *prompt, int prompt_len, int cap, int cap_pages)
{
    memset(r, 0, sizeof *r);
    r->id = id, r->cap = cap, r->cap_pages = cap_pages, r->prompt_len = prompt_len;
    r->tokens = malloc(sizeof(int32_t) * (size_t)cap);
    r->pages = malloc(sizeof(int32_t) * (size_t)cap_pages);
    if (!r->tokens || !r->pages) return -1;
    memcpy(r->tokens, prompt, sizeof(int32_t) * (size_t)prompt_len);
    r->len = prompt_len;
    return 0;
}

/* Pages from the free list until the request's pages cover `tokens` tokens. */
static int req_cover(struct story *st, struct kl_story_req *r, int tokens)
{
    const int need = (tokens + KL_STORY_PAGE_SIZE - 1) / KL_STORY_PAGE_SIZE - r->n_pages;
    if (need <= 0) return 0;
    if (r->n_pages + need > r->cap_pages || kl_story_pages_alloc(&st->cache.pages, need, r->pages + r->n_pages))
        return kl_fail(st->err, "request %d: out of KV pages (%d free, %d needed)", r->id, st->cache.pages.n_free,
                       need);
    r->n_pages += need;
    return 0;
}

/* Uploads image i of a batch and runs the forward pass. */
static int forward(struct story *st, struct dev_batch *d, int image)
{
    CUDA_TRY(cudaMemcpyAsync(d->dev, d->host + (size_t)image * d->lay.bytes, d->lay.bytes, cudaMemcpyHostToDevice,
                             st->m->stream));
    CUDA_TRY(kl_story_forward(st->m, &d->b));
    return 0;
}

/* ---- request arrival: radix match, pages, prefill or extend, first token, insert ---- */

static int serve_prompt(struct story *st, struct kl_story_req *r, struct dev_batch *d, enum kl_story_phase phase,
                        float *logits_out)
{
    struct kl_story_timeline *tl = &st->tl;
    const int ps = KL_STORY_PAGE_SIZE;
    kl_story_timeline_event(tl, r->id == 1 ? "request 1 arrives" : "request 2 arrives", "%d prompt tokens",
                            r->prompt_len);
    double t = host_us();
    const size_t hit = kl_story_cache_match(&st->cache, r->tokens, (size_t)r->prompt_len, r->pages);
    /* the last token must be computed to have logits: a full hit leaves its last page to compute */
    const int matched = (int)(hit < (size_t)r->prompt_len ? hit : (size_t)(r->prompt_len - 1) / ps * ps);
    r->n_pages = r->cached = r->matched = matched;
    r->n_pages = matched / ps;
    if (matched) kl_story_cache_lock(&st->cache, r->tokens, (size_t)matched);
    const double match_us = host_us() - t;
    kl_story_timeline_event(tl, "radix match", "%d tokens (%d pages) cached%s, in %.1f us", matched, matched / ps,
                            matched ? ", locked" : ": a miss", match_us);
    if (r->id == 2) st->match_us = match_us, st->matched = matched;
    const int before = st->cache.pages.n_free;
    if (req_cover(st, r, r->prompt_len)) return -1;
    kl_story_timeline_event(tl, "pages", "%d new pages from the free list (%d left)", before - st->cache.pages.n_free,
                            st->cache.pages.n_free);

    const int q_len = r->prompt_len - matched;
    struct kl_story_req *one[1] = {r};
    d->b.tokens = q_len, d->b.batch = 1, d->b.max_q_len = q_len;
    d->b.max_kv_len = kl_story_meta_build(one, &q_len, 1, ps, true, d->host, &d->lay);
    if (d->b.max_kv_len < 0) return kl_fail(st->err, "request %d: metadata does not fit", r->id);
    const int64_t kv[2] = {r->prompt_len, 0};
    kl_story_timeline_segment(tl, phase, 0, 1, q_len, kv, true);
    progress(st, "%s: %d tokens over %d keys", kl_story_phase_names[phase], q_len, r->prompt_len);
    if (forward(st, d, 0)) return -1;
    kl_story_timeline_end_segment(tl);
    CUDA_TRY(cudaMemcpyAsync(&st->tokens_host[r->id - 1], st->m->next_ids, 4, cudaMemcpyDeviceToHost, st->m->stream));
    CUDA_TRY(cudaMemcpyAsync(logits_out, st->m->logits, 4 * (size_t)st->m->cfg.vocab, cudaMemcpyDeviceToHost,
                             st->m->stream));
    CUDA_TRY(cudaStreamSynchronize(st->m->stream));
    r->cached = r->prompt_len;
    kl_story_timeline_event(tl, "first token", "request %d picks token %d", r->id, st->tokens_host[r->id - 1]);

    /* the prompt's pages join the cache; the request keeps them locked while it runs */
    t = host_us();
    int freed = 0;
    const size_t present = kl_story_cache_insert(&st->cache, r->tokens, (size_t)r->prompt_len, r->pages, &freed);
    if (freed) /* pages computed twice (a whole prompt cached): use the cached copies from now on */
        kl_story_cache_match(&st->cache, r->tokens, (size_t)r->prompt_len, r->pages);
    if (matched) kl_story_cache_unlock(&st->cache, r->tokens, (size_t)matched);
    kl_story_cache_lock(&st->cache, r->tokens, (size_t)r->prompt_len);
    const double insert_us = host_us() - t;
    if (r->id == 2) st->insert_us = insert_us;
    kl_story_timeline_event(tl, "radix insert", "%d tokens (%zu already cached), %d pages now cached, in %.1f us",
                            r->prompt_len / ps * ps, present, (int)kl_story_cache_pages_held(&st->cache), insert_us);
    return 0;
}

/* ---- decode ---- */

/* The metadata image of every decode step, built ahead the way the host would build each one just
 * before its step (pages are taken as a request's last page fills); the graph replay reuses them. */
static int plan_decode(struct story *st)
{
    struct dev_batch *d = &st->decode;
    struct kl_story_req *both[2] = {&st->req[0], &st->req[1]};
    const int ones[2] = {1, 1};
    int new_pages = 0;
    for (int s = 1; s <= st->o->steps; s++) {
        for (int b = 0; b < 2; b++) {
            const int before = both[b]->n_pages;
            if (req_cover(st, both[b], both[b]->cached + 1)) return -1;
            new_pages += both[b]->n_pages - before;
            both[b]->len = both[b]->cached + 1; /* the token fed this step (its id comes from the device) */
        }
        if (kl_story_meta_build(both, ones, 2, KL_STORY_PAGE_SIZE, false, d->host + (size_t)(s - 1) * d->lay.bytes,
                                &d->lay) < 0)
            return kl_fail(st->err, "decode step %d: metadata does not fit", s);
        both[0]->cached++, both[1]->cached++;
    }
    /* the host's token lists are filled from the device once decoding is done */
    both[0]->cached -= st->o->steps, both[1]->cached -= st->o->steps;
    both[0]->len = both[0]->prompt_len, both[1]->len = both[1]->prompt_len;
    kl_story_timeline_event(&st->tl, "decode plan", "%d steps of 2 tokens; %d pages taken as pages fill", st->o->steps,
                            new_pages);
    return 0;
}

/* Decode steps 1..steps, eager (graph = false) or as launches of the captured graph. The first
 * step's input tokens are the prefill's and the extend's picks; later ones are the previous step's
 * argmax, already on the device. */
static int run_decode(struct story *st, cudaGraphExec_t graph)
{
    struct dev_batch *d = &st->decode;
    const int steps = st->o->steps, V = st->m->cfg.vocab;
    const enum kl_story_phase phase = graph ? KL_PHASE_DECODE_GRAPH : KL_PHASE_DECODE;
    int32_t *toks = st->tokens_host + (graph ? 2 * (1 + steps) : 0);
    float *keep = st->o->keep_logits ? st->logits_host + (size_t)(3 + (graph ? 2 * steps : 0)) * V : NULL;
    toks[0] = st->tokens_host[0], toks[1] = st->tokens_host[1];
    CUDA_TRY(cudaMemcpyAsync(st->m->next_ids, toks, 8, cudaMemcpyHostToDevice, st->m->stream));
    d->b.tokens = d->b.batch = 2, d->b.max_q_len = 1;
    for (int s = 1; s <= steps; s++) {
        const int64_t kv[2] = {st->req[0].prompt_len + s, st->req[1].prompt_len + s};
        d->b.max_kv_len = kv[0] > kv[1] ? kv[0] : kv[1];
        kl_story_timeline_segment(&st->tl, phase, s, 2, 2, kv, s == 1 || s == steps);
        if (graph) {
            CUDA_TRY(cudaMemcpyAsync(d->dev, d->host + (size_t)(s - 1) * d->lay.bytes, d->lay.bytes,
                                     cudaMemcpyHostToDevice, st->m->stream));
            kl_story_timeline_graph(&st->tl, 1);
            CUDA_TRY(cudaGraphLaunch(graph, st->m->stream));
            kl_story_timeline_graph(&st->tl, 0);
        } else if (forward(st, d, s - 1)) {
            return -1;
        }
        kl_story_timeline_end_segment(&st->tl);
        /* the step's tokens come back asynchronously (a serving engine streams them out) */
        CUDA_TRY(cudaMemcpyAsync(toks + 2 * s, st->m->next_ids, 8, cudaMemcpyDeviceToHost, st->m->stream));
        if (keep)
            CUDA_TRY(cudaMemcpyAsync(keep + (size_t)(s - 1) * 2 * V, st->m->logits, 8 * (size_t)V,
                                     cudaMemcpyDeviceToHost, st->m->stream));
        if (st->o->progress && (s == 1 || s % 32 == 0 || s == steps))
            progress(st, "%s step %d/%d", graph ? "graph decode" : "decode", s, steps);
    }
    CUDA_TRY(cudaStreamSynchronize(st->m->stream));
    return 0;
}

/* One forward pass of the decode batch captured as a graph: the launches and their arguments are
 * fixed, the metadata they read is uploaded before each launch (decode_kv_bound keeps the grids
 * the same for every step). */
static int capture_decode(struct story *st, cudaGraphExec_t *exec)
{
    cudaGraph_t g = NULL;
    CUDA_TRY(cudaStreamBeginCapture(st->m->stream, cudaStreamCaptureModeThreadLocal));
    const cudaError_t fe = kl_story_forward(st->m, &st->decode.b);
    const cudaError_t ce = cudaStreamEndCapture(st->m->stream, &g);
    if (fe != cudaSuccess || ce != cudaSuccess)
        return kl_fail(st->err, "capturing a decode step: %s", cudaGetErrorString(fe != cudaSuccess ? fe : ce));
    const cudaError_t ie = cudaGraphInstantiate(exec, g, 0);
    cudaGraphDestroy(g);
    if (ie != cudaSuccess) return kl_fail(st->err, "cudaGraphInstantiate: %s", cudaGetErrorString(ie));
    return 0;
}

/* ---- finish and control ---- */

static void finish(struct story *st, struct kl_story_req *r)
{
    const int steps = st->o->steps, ps = KL_STORY_PAGE_SIZE;
    for (int s = 0; s < steps; s++)
        r->tokens[r->len++] = st->tokens_host[2 * s + (r->id - 1)];
    r->cached = r->len; /* every fed token has its K/V; the last pick has none yet */
    int freed = 0;
    const size_t present = kl_story_cache_insert(&st->cache, r->tokens, (size_t)r->len, r->pages, &freed);
    kl_story_cache_unlock(&st->cache, r->tokens, (size_t)r->prompt_len);
    const int whole = r->len / ps, tail = r->n_pages - whole;
    if (tail > 0) kl_story_pages_free(&st->cache.pages, r->pages + whole, tail); /* a partial page is not cached */
    kl_story_timeline_event(&st->tl, "request finishes",
                            "request %d: %d tokens; %d inserted (%zu were cached), %d partial page%s freed, unlocked",
                            r->id, r->len, whole * ps, present, tail, tail == 1 ? "" : "s");
}

static int control(struct story *st)
{
    struct kl_story_req c = st->req[1];
    const int ps = KL_STORY_PAGE_SIZE;
    c.pages = malloc(sizeof(int32_t) * (size_t)c.cap_pages);
    if (!c.pages) return kl_fail(st->err, "out of host memory");
    c.n_pages = c.cached = 0, c.len = c.prompt_len;
    int rc = req_cover(st, &c, c.prompt_len);
    struct kl_story_req *one[1] = {&c};
    const int q_len = c.prompt_len;
    struct dev_batch *d = &st->control;
    d->b.tokens = q_len, d->b.batch = 1, d->b.max_q_len = q_len;
    if (!rc && (d->b.max_kv_len = kl_story_meta_build(one, &q_len, 1, ps, true, d->host, &d->lay)) < 0)
        rc = kl_fail(st->err, "control: metadata does not fit");
    if (!rc) {
        const int64_t kv[2] = {q_len, 0};
        kl_story_timeline_segment(&st->tl, KL_PHASE_CONTROL, 0, 1, q_len, kv, false);
        progress(st, "control: request 2 from scratch, %d tokens", q_len);
        rc = forward(st, d, 0);
        kl_story_timeline_end_segment(&st->tl);
    }
    float *out = st->logits_host + 2 * (size_t)st->m->cfg.vocab;
    if (!rc && cudaMemcpyAsync(out, st->m->logits, 4 * (size_t)st->m->cfg.vocab, cudaMemcpyDeviceToHost, st->m->stream))
        rc = kl_fail(st->err, "control: copying the logits back failed");
    if (!rc && cudaStreamSynchronize(st->m->stream)) rc = kl_fail(st->err, "control: the forward pass failed");
    kl_story_pages_free(&st->cache.pages, c.pages, c.n_pages);
    free(c.pages);
    return rc;
}

/* ---- the results document ---- */

cJSON *kl_story_document(const struct kl_story_doc_info *in, const struct kl_story_timeline *tl)
{
    const struct kl_story_options *o = in->o;
    const struct kl_story_config *c = in->model;
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "format", "kernlab-story-1");
    cJSON_AddStringToObject(doc, "commit", in->commit);
    cJSON_AddStringToObject(doc, "date", in->date);
    cJSON *dj = cJSON_AddObjectToObject(doc, "device");
    cJSON_AddStringToObject(dj, "name", in->device.name);
    cJSON_AddNumberToObject(dj, "cc", in->device.cc);
    cJSON_AddNumberToObject(dj, "sms", in->device.sms);
    cJSON_AddNumberToObject(dj, "l2_bytes", in->device.l2_bytes);
    cJSON_AddNumberToObject(dj, "memory_bytes", in->device.memory_bytes);
    cJSON_AddNumberToObject(dj, "sm_clock_mhz", in->device.sm_mhz);
    cJSON_AddNumberToObject(dj, "mem_clock_mhz", in->device.mem_mhz);
    cJSON *mj = cJSON_AddObjectToObject(doc, "model");
    cJSON_AddStringToObject(mj, "name", c->name);
    cJSON_AddNumberToObject(mj, "layers", c->layers);
    cJSON_AddNumberToObject(mj, "hidden", c->hidden);
    cJSON_AddNumberToObject(mj, "qo_heads", c->qo_heads);
    cJSON_AddNumberToObject(mj, "kv_heads", c->kv_heads);
    cJSON_AddNumberToObject(mj, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(mj, "mlp", c->mlp);
    cJSON_AddNumberToObject(mj, "vocab", c->vocab);
    cJSON_AddStringToObject(mj, "dtype", "bf16");
    if (o->kv_fp8) { /* only then: a bf16 run's document is what it always was */
        cJSON_AddStringToObject(mj, "kv", "fp8");
        cJSON_AddStringToObject(mj, "kv_scale", "per (layer, kv head): the weights' bound on |K|, |V| over 448");
    }
    cJSON_AddNumberToObject(mj, "page_size", KL_STORY_PAGE_SIZE);
    cJSON_AddNumberToObject(mj, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(mj, "seed", (double)o->seed);
    cJSON *rj = cJSON_AddObjectToObject(doc, "run");
    cJSON_AddNumberToObject(rj, "prompt", o->prompt);
    cJSON_AddNumberToObject(rj, "shared", o->shared);
    cJSON_AddNumberToObject(rj, "steps", o->steps);
    cJSON *vj = cJSON_AddObjectToObject(doc, "variants");
    static const char *const modules[6] = {"index", "rmsnorm",           "rope",
                                           "store", "attention_prefill", "attention_decode"};
    for (int i = 0; i < 6; i++)
        cJSON_AddStringToObject(vj, modules[i], in->variants[i]);
    cJSON_AddStringToObject(vj, "gemm", in->gemm);
    if (o->kv_fp8) cJSON_AddStringToObject(vj, "store_fused", KL_STORY_FP8_STORE);
    cJSON *memj = cJSON_AddObjectToObject(doc, "memory");
    cJSON_AddNumberToObject(memj, "weights_bytes", in->weights_bytes);
    cJSON_AddNumberToObject(memj, "kv_bytes", in->mem.kv_bytes);
    cJSON_AddNumberToObject(memj, "kv_pages", in->mem.kv_pages);
    cJSON_AddNumberToObject(memj, "activation_bytes", in->mem.activation_bytes);
    cJSON_AddNumberToObject(memj, "free_bytes", in->free_bytes);
    cJSON_AddNumberToObject(memj, "total_bytes", in->mem.total_bytes);
    cJSON_AddNumberToObject(memj, "layers_fit", in->mem.layers_fit);
    cJSON *sj = cJSON_AddObjectToObject(doc, "setup");
    cJSON_AddNumberToObject(sj, "weights_ms", round(in->weights_ms * 10) / 10);
    kl_story_timeline_json(tl, doc);
    cJSON *x = cJSON_AddObjectToObject(doc, "radix");
    cJSON_AddNumberToObject(x, "page_size", KL_STORY_PAGE_SIZE);
    cJSON_AddNumberToObject(x, "matched_tokens", in->matched);
    cJSON_AddNumberToObject(x, "matched_pages", floor(in->matched / KL_STORY_PAGE_SIZE));
    cJSON_AddNumberToObject(x, "extend_tokens", o->prompt - in->matched);
    cJSON_AddNumberToObject(x, "match_us", round(in->match_us * 10) / 10);
    cJSON_AddNumberToObject(x, "insert_us", round(in->insert_us * 10) / 10);
    if (in->control) {
        cJSON_AddNumberToObject(x, "logits_max_abs_diff", in->logits_max_abs_diff);
        cJSON_AddNumberToObject(x, "logits_rel_l2", in->logits_rel_l2);
        cJSON_AddBoolToObject(x, "same_token", in->same_token);
    }
    cJSON *tree = cJSON_AddObjectToObject(x, "tree");
    cJSON_AddNumberToObject(tree, "total", in->tree_total);
    cJSON_AddNumberToObject(tree, "evictable", in->tree_evictable);
    cJSON_AddNumberToObject(tree, "nodes", in->tree_nodes);
    cJSON *tj = cJSON_AddObjectToObject(doc, "tokens");
    for (int b = 0; b < 2; b++) {
        cJSON *a = cJSON_AddArrayToObject(tj, b ? "request2" : "request1");
        for (int s = 0; s <= o->steps; s++)
            cJSON_AddItemToArray(a, cJSON_CreateNumber(in->tokens[2 * s + b]));
    }
    if (in->graph) cJSON_AddBoolToObject(tj, "graph_identical", in->graph_identical);
    return doc;
}

/* The document of this run: the device, the model as built, the radix hit and the control. */
static cJSON *document(struct story *st, const struct kl_story_memory *mem, double weights_ms, size_t free_before)
{
    const struct kl_story_options *o = st->o;
    struct kl_story_doc_info in = {.commit = kl_build_commit(),
                                   .o = o,
                                   .model = &st->m->cfg,
                                   .mem = *mem,
                                   .weights_bytes = st->m->weights_bytes,
                                   .free_bytes = (double)free_before,
                                   .weights_ms = weights_ms,
                                   .matched = (double)st->matched,
                                   .match_us = st->match_us,
                                   .insert_us = st->insert_us,
                                   .control = o->control,
                                   .tokens = st->tokens_host,
                                   .graph = o->graph,
                                   .graph_identical = st->r->graph_identical};
    char today[32], gemm[128];
    in.date = kl_today(today, sizeof today);
    struct kl_device_info d;
    kl_device_query(&d);
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    struct kl_clocks clk;
    kl_clocks_read(&clk);
    in.device.name = d.name, in.device.cc = d.cc, in.device.sms = d.sms, in.device.l2_bytes = (double)d.l2_bytes;
    in.device.memory_bytes = (double)total_b;
    in.device.sm_mhz = clk.valid ? clk.sm_mhz : 0, in.device.mem_mhz = clk.valid ? clk.mem_mhz : 0;
    const struct kl_variant *v[6] = {st->m->v_index, st->m->v_rmsnorm, st->m->v_rope,
                                     st->m->v_store, st->m->v_prefill, st->m->v_decode};
    for (int i = 0; i < 6; i++)
        in.variants[i] = v[i]->name;
    int blas = 0;
    cublasGetVersion(st->m->blas, &blas);
    snprintf(gemm, sizeof gemm, "cuBLAS %d.%d.%d cublasGemmEx, bf16 in, float32 accumulate", blas / 10000,
             blas / 100 % 100, blas % 100);
    in.gemm = gemm;
    if (o->control) { /* the hit's first-token logits against the control's */
        const int V = st->m->cfg.vocab;
        const float *hit = st->logits_host + V, *scratch = st->logits_host + 2 * (size_t)V;
        double e2 = 0, r2 = 0;
        int best_hit = 0, best_scratch = 0;
        for (int i = 0; i < V; i++) {
            const double diff = fabs((double)hit[i] - scratch[i]);
            in.logits_max_abs_diff = fmax(in.logits_max_abs_diff, diff), e2 += diff * diff;
            r2 += (double)scratch[i] * scratch[i];
            if (hit[i] > hit[best_hit]) best_hit = i;
            if (scratch[i] > scratch[best_scratch]) best_scratch = i;
        }
        in.logits_rel_l2 = r2 > 0 ? sqrt(e2 / r2) : 0;
        in.same_token = best_hit == best_scratch;
    }
    size_t total, evictable;
    kl_radix_size(st->cache.tree, &total, &evictable);
    in.tree_total = (double)total, in.tree_evictable = (double)evictable;
    in.tree_nodes = (double)kl_radix_node_count(st->cache.tree);
    return kl_story_document(&in, &st->tl);
}

/* ---- the run ---- */

static void prompts(const struct kl_story_options *o, int vocab, int32_t *p1, int32_t *p2)
{
    struct kl_rng rng;
    kl_rng_seed(&rng, o->seed ^ 0x57A7E5EEDull);
    for (int i = 0; i < o->prompt; i++)
        p1[i] = (int32_t)kl_rng_range(&rng, vocab);
    for (int i = 0; i < o->prompt; i++)
        p2[i] = i < o->shared ? p1[i] : (int32_t)kl_rng_range(&rng, vocab);
}

static int keep_results(struct story *st)
{
    struct kl_story_result *r = st->r;
    const int V = st->m->cfg.vocab, steps = st->o->steps;
    r->vocab = V, r->steps = steps;
    for (int b = 0; b < 2; b++) {
        r->tokens[b] = malloc(sizeof(int32_t) * (size_t)(steps + 1));
        r->logits_first[b] = malloc(sizeof(float) * (size_t)V);
        r->prompt[b] = malloc(sizeof(int32_t) * (size_t)st->req[b].prompt_len);
        if (!r->tokens[b] || !r->logits_first[b] || !r->prompt[b]) return kl_fail(st->err, "out of host memory");
        for (int s = 0; s <= steps; s++)
            r->tokens[b][s] = st->tokens_host[2 * s + b];
        memcpy(r->logits_first[b], st->logits_host + (size_t)b * V, sizeof(float) * (size_t)V);
        memcpy(r->prompt[b], st->req[b].tokens, sizeof(int32_t) * (size_t)st->req[b].prompt_len);
        r->prompt_len[b] = st->req[b].prompt_len;
    }
    if (st->o->control) {
        r->logits_scratch = malloc(sizeof(float) * (size_t)V);
        if (!r->logits_scratch) return kl_fail(st->err, "out of host memory");
        memcpy(r->logits_scratch, st->logits_host + 2 * (size_t)V, sizeof(float) * (size_t)V);
    }
    if (st->o->keep_logits) {
        const size_t n = (size_t)steps * 2 * V;
        r->logits_decode = malloc(sizeof(float) * n);
        if (!r->logits_decode) return kl_fail(st->err, "out of host memory");
        memcpy(r->logits_decode, st->logits_host + 3 * (size_t)V, sizeof(float) * n);
        if (st->o->graph) {
            r->logits_graph = malloc(sizeof(float) * n);
            if (!r->logits_graph) return kl_fail(st->err, "out of host memory");
            memcpy(r->logits_graph, st->logits_host + 3 * (size_t)V + n, sizeof(float) * n);
        }
    }
    return 0;
}

static int story_body(struct story *st, size_t free_before, const struct kl_story_memory *mem)
{
    const struct kl_story_options *o = st->o;
    const int ps = KL_STORY_PAGE_SIZE, V = o->model.vocab;
    const int max_len = o->prompt + o->steps + 1, cap_pages = (max_len + ps - 1) / ps + 1;

    progress(st, "%s, %d layers: generating %.2f GB of weights on the device", o->model.name, o->model.layers,
             mem->weights_bytes / 1e9);
    const double t = host_us();
    st->m = kl_story_model_new(&o->model, o->prompt, 2, mem->kv_pages, max_len + ps, o->prompt + o->steps, o->seed,
                               o->kv_fp8, st->err);
    if (!st->m) return -1;
    const double weights_ms = (host_us() - t) * 1e-3;
    progress(st, "weights ready in %.0f ms; kernels: index %s, rmsnorm %s, rope %s, store %s, prefill %s, decode %s%s%s",
             weights_ms, st->m->v_index->name, st->m->v_rmsnorm->name, st->m->v_rope->name, st->m->v_store->name,
             st->m->v_prefill->name, st->m->v_decode->name, st->m->v_fused ? "; FP8 cache by " : "",
             st->m->v_fused ? st->m->v_fused->name : "");
    if (kl_story_cache_init(&st->cache, ps, mem->kv_pages)) return kl_fail(st->err, "out of host memory");
    int32_t *p1 = malloc(sizeof(int32_t) * (size_t)o->prompt), *p2 = malloc(sizeof(int32_t) * (size_t)o->prompt);
    if (p1 && p2) prompts(o, V, p1, p2);
    if (!p1 || !p2 || req_init(&st->req[0], 1, p1, o->prompt, max_len, cap_pages) ||
        req_init(&st->req[1], 2, p2, o->prompt, max_len, cap_pages)) {
        free(p1), free(p2);
        return kl_fail(st->err, "out of host memory");
    }
    free(p1), free(p2);
    const int pp = (o->prompt + ps - 1) / ps;
    CUDA_TRY(cudaMallocHost((void **)&st->tokens_host, sizeof(int32_t) * 4 * (size_t)(o->steps + 1)));
    CUDA_TRY(cudaMallocHost((void **)&st->logits_host,
                            sizeof(float) * (size_t)V * (3 + (o->keep_logits ? 4 * (size_t)o->steps : 0))));
    if (batch_alloc(st, &st->prefill, o->prompt, 1, pp, 1, false) ||
        batch_alloc(st, &st->extend, o->prompt, 1, pp, 1, false) ||
        batch_alloc(st, &st->decode, 2, 2, 2 * cap_pages, o->steps, true) ||
        batch_alloc(st, &st->control, o->prompt, 1, pp, 1, false))
        return -1;

    if (o->trace) {
        if (kl_story_timeline_start(&st->tl)) return kl_fail(st->err, "CUPTI could not record the run: %s", st->tl.why);
        st->m->hook = kl_story_timeline_hook, st->m->hook_ctx = &st->tl;
    }

    if (serve_prompt(st, &st->req[0], &st->prefill, KL_PHASE_PREFILL, st->logits_host) ||
        serve_prompt(st, &st->req[1], &st->extend, KL_PHASE_EXTEND, st->logits_host + V) || plan_decode(st) ||
        run_decode(st, NULL))
        return -1;
    kl_story_timeline_event(&st->tl, "decode done", "%d steps, 2 tokens each", o->steps);
    if (o->graph) {
        cudaGraphExec_t exec = NULL;
        if (capture_decode(st, &exec)) return -1;
        kl_story_timeline_event(&st->tl, "graph captured", "one decode step's launches as a CUDA graph");
        const int rc = run_decode(st, exec);
        cudaGraphExecDestroy(exec);
        if (rc) return -1;
        st->r->graph_identical =
            memcmp(st->tokens_host, st->tokens_host + 2 * (1 + o->steps), sizeof(int32_t) * 2 * (1 + o->steps)) == 0 &&
            (!o->keep_logits ||
             memcmp(st->logits_host + 3 * (size_t)V, st->logits_host + 3 * (size_t)V + 2 * (size_t)o->steps * V,
                    sizeof(float) * 2 * (size_t)o->steps * V) == 0);
        kl_story_timeline_event(&st->tl, "graph decode done", "tokens %s the eager run's",
                                st->r->graph_identical ? "identical to" : "DIFFERENT from");
    }
    finish(st, &st->req[0]);
    finish(st, &st->req[1]);
    if (o->control && control(st)) return -1;
    size_t total, evictable;
    kl_radix_size(st->cache.tree, &total, &evictable);
    kl_story_timeline_event(&st->tl, "cache", "%zu tokens in %zu pages, %zu evictable; %d pages free", total,
                            kl_story_cache_pages_held(&st->cache), evictable, st->cache.pages.n_free);
    char why[160];
    if (kl_story_cache_validate(&st->cache, why, sizeof why)) return kl_fail(st->err, "cache bookkeeping: %s", why);
    kl_story_timeline_stop(&st->tl);

    if (o->counters && o->trace) {
        progress(st, "counters: replaying %d distinct ops under the Range Profiler", st->tl.n_prof);
        kl_story_timeline_profile(&st->tl, st->m, o->progress);
    }
    if (keep_results(st)) return -1;
    if (o->trace) st->r->doc = document(st, mem, weights_ms, free_before);
    return 0;
}

int kl_story_run(const struct kl_story_options *o, struct kl_story_result *r, struct kl_err *err)
{
    memset(r, 0, sizeof *r);
    if (o->model.layers < 1 || o->prompt < 2 || o->shared < 0 || o->shared >= o->prompt || o->steps < 1)
        return kl_fail(err, "story: layers >= 1, prompt >= 2, 0 <= shared < prompt and steps >= 1 are needed");
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess) return kl_fail(err, "no CUDA device: %s", cudaGetErrorString(e));
    struct kl_story_memory mem;
    kl_story_memory_plan(o, (double)free_b, &mem);
    if (mem.layers_fit < o->model.layers)
        return kl_fail(err, "%d layers do not fit: %.1f GB free holds %d (weights %.1f GB, KV %.2f GB at %d layers)",
                       o->model.layers, (double)free_b / 1e9, mem.layers_fit, mem.weights_bytes / 1e9,
                       mem.kv_bytes / 1e9, o->model.layers);
    struct story st = {.o = o, .r = r, .err = err};
    kl_story_timeline_init(&st.tl);
    const int rc = story_body(&st, free_b, &mem);
    if (st.tl.on) kl_story_timeline_stop(&st.tl);
    kl_story_timeline_release(&st.tl);
    batch_free(&st.prefill), batch_free(&st.extend), batch_free(&st.decode), batch_free(&st.control);
    cudaFreeHost(st.tokens_host), cudaFreeHost(st.logits_host);
    for (int b = 0; b < 2; b++)
        free(st.req[b].tokens), free(st.req[b].pages);
    if (st.cache.tree) kl_story_cache_release(&st.cache);
    kl_story_model_free(st.m);
    if (rc) kl_story_result_free(r);
    return rc;
}

void kl_story_result_free(struct kl_story_result *r)
{
    cJSON_Delete(r->doc);
    for (int b = 0; b < 2; b++)
        free(r->prompt[b]), free(r->tokens[b]), free(r->logits_first[b]);
    free(r->logits_scratch), free(r->logits_decode), free(r->logits_graph);
    memset(r, 0, sizeof *r);
}
