/* Radix traces: parse trace.jsonl, replay it on the reference or on the library driven by a
 * variant, compare two implementations op by op, generate random traces (see trace.h). */
#include "trace.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../reference/radix.h"
#include "../core/files.h"
#include "../core/golden.h"
#include "../core/tensor.h"
#include "radix.h"

/* ---- building traces ---- */

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    p = realloc(p, c * elem);
    KL_CHECK(p, "out of memory (trace of %zu elements)", need);
    *cap = c;
    return p;
}

static struct kl_radix_op *push_op(struct kl_radix_trace *tr)
{
    tr->ops = grow(tr->ops, &tr->cap_ops, tr->nops + 1, sizeof *tr->ops);
    struct kl_radix_op *op = &tr->ops[tr->nops++];
    memset(op, 0, sizeof *op);
    op->expect = op->expect_total = op->expect_evictable = -1;
    return op;
}

void kl_radix_trace_add(struct kl_radix_trace *tr, enum kl_radix_opcode code, const int32_t *key, size_t n,
                        long long tokens)
{
    tr->tok = grow(tr->tok, &tr->cap_tok, tr->ntok + n + 1, sizeof *tr->tok);
    struct kl_radix_op *op = push_op(tr);
    op->code = code;
    op->line = (int)tr->nops;
    op->key_off = tr->ntok;
    op->n = n;
    op->tokens = tokens;
    if (n) memcpy(tr->tok + tr->ntok, key, n * sizeof *key);
    tr->ntok += n;
}

void kl_radix_trace_free(struct kl_radix_trace *tr)
{
    free(tr->ops);
    free(tr->tok);
    memset(tr, 0, sizeof *tr);
}

/* ---- parsing ---- */

static const char *const op_names[] = {"insert", "match", "lock", "unlock", "evict", "size"};

/* A JSON number that is an integer in [lo, hi]. */
static bool json_int(const cJSON *j, long long lo, long long hi, long long *out)
{
    if (!cJSON_IsNumber(j)) return false;
    double d = j->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < (double)lo || d > (double)hi) return false;
    *out = (long long)d;
    return true;
}

/* Parses one line's object into an op; on error fills what (no file:line prefix). */
static int parse_op(struct kl_radix_trace *tr, const cJSON *o, int line, char *what, size_t wlen)
{
    const cJSON *jop = cJSON_GetObjectItemCaseSensitive(o, "op");
    if (!cJSON_IsString(jop)) return snprintf(what, wlen, "missing or non-string \"op\""), -1;
    int code = -1;
    for (int i = 0; i < 6; i++)
        if (strcmp(jop->valuestring, op_names[i]) == 0) code = i;
    if (code < 0) return snprintf(what, wlen, "unknown op \"%.40s\"", jop->valuestring), -1;
    const char *name = op_names[code];

    size_t key_off = tr->ntok, n = 0;
    if (code <= KL_RADIX_UNLOCK) {
        const cJSON *key = cJSON_GetObjectItemCaseSensitive(o, "key");
        if (!cJSON_IsArray(key)) return snprintf(what, wlen, "%s needs \"key\": an array of token ids", name), -1;
        size_t count = (size_t)cJSON_GetArraySize(key), i = 0;
        tr->tok = grow(tr->tok, &tr->cap_tok, tr->ntok + count + 1, sizeof *tr->tok);
        for (const cJSON *e = key->child; e; e = e->next, i++) {
            long long v;
            if (!json_int(e, INT32_MIN, INT32_MAX, &v))
                return snprintf(what, wlen, "%s key[%zu] is not an int32 token id", name, i), -1;
            tr->tok[key_off + i] = (int32_t)v;
        }
        n = i;
    }
    long long expect = -1, tokens = 0, total = -1, evictable = -1;
    const cJSON *jexp = cJSON_GetObjectItemCaseSensitive(o, "expect");
    if (code == KL_RADIX_INSERT || code == KL_RADIX_MATCH || code == KL_RADIX_EVICT) {
        if (!json_int(jexp, 0, LLONG_MAX / 2, &expect))
            return snprintf(what, wlen, "%s needs \"expect\": a non-negative integer", name), -1;
    }
    if (code == KL_RADIX_EVICT && !json_int(cJSON_GetObjectItemCaseSensitive(o, "tokens"), 0, LLONG_MAX / 2, &tokens))
        return snprintf(what, wlen, "evict needs \"tokens\": a non-negative integer"), -1;
    if (code == KL_RADIX_SIZE) {
        if (!cJSON_IsObject(jexp) ||
            !json_int(cJSON_GetObjectItemCaseSensitive(jexp, "total"), 0, LLONG_MAX / 2, &total) ||
            !json_int(cJSON_GetObjectItemCaseSensitive(jexp, "evictable"), 0, LLONG_MAX / 2, &evictable))
            return snprintf(what, wlen,
                            "size needs \"expect\": {\"total\": T, \"evictable\": V}, non-negative integers"),
                   -1;
    }
    /* The key's tokens are already in the pool, at key_off. */
    tr->ntok = key_off + n;
    struct kl_radix_op *op = push_op(tr);
    op->code = (enum kl_radix_opcode)code;
    op->line = line;
    op->key_off = key_off;
    op->n = n;
    op->tokens = tokens;
    op->expect = expect;
    op->expect_total = total;
    op->expect_evictable = evictable;
    return 0;
}

/* cJSON takes about 64 bytes per token of a parsed key, so a line is capped: 4 MiB holds a key
 * of several hundred thousand tokens, far past any context length. */
#define KL_TRACE_MAX_LINE (4 << 20)

int kl_radix_trace_parse(const char *text, size_t len, const char *name, int page_size, struct kl_radix_trace *tr,
                         struct kl_err *err)
{
    memset(tr, 0, sizeof *tr);
    snprintf(tr->name, sizeof tr->name, "%s", name);
    tr->page_size = page_size;
    char *buf = NULL;
    size_t bcap = 0;
    int line = 0;
    size_t start = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0; /* a UTF-8 BOM is not JSON */
    for (size_t pos = start; pos < len;) {
        const char *s = text + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t l = nl ? (size_t)(nl - s) : len - pos;
        pos += l + (nl != NULL);
        line++;
        size_t a = 0;
        while (a < l && (s[a] == ' ' || s[a] == '\t' || s[a] == '\r'))
            a++;
        if (a == l) continue; /* blank line */
        if (l > KL_TRACE_MAX_LINE) {
            kl_fail(err, "%s:%d: line of %zu bytes, longer than the %d a trace line may have", name, line, l,
                    KL_TRACE_MAX_LINE);
            free(buf);
            kl_radix_trace_free(tr);
            return -1;
        }
        buf = grow(buf, &bcap, l + 1, 1);
        memcpy(buf, s, l);
        buf[l] = 0;
        char what[160];
        int bad = 0;
        if (memchr(s, 0, l)) {
            snprintf(what, sizeof what, "bad JSON (NUL byte)");
            bad = 1;
        } else {
            const char *end = NULL;
            cJSON *o = cJSON_ParseWithOpts(buf, &end, 1);
            if (!o) {
                snprintf(what, sizeof what, "bad JSON (near column %ld)", end ? (long)(end - buf) + 1 : 1L);
                bad = 1;
            } else if (!cJSON_IsObject(o)) {
                snprintf(what, sizeof what, "not a JSON object");
                bad = 1;
            } else {
                bad = parse_op(tr, o, line, what, sizeof what) != 0;
            }
            cJSON_Delete(o);
        }
        if (bad) {
            kl_fail(err, "%s:%d: %s", name, line, what);
            free(buf);
            kl_radix_trace_free(tr);
            return -1;
        }
    }
    free(buf);
    return 0;
}

/* A trace is read whole, so its size is capped: golden traces are kilobytes, and a trace of
 * millions of ops is still well under this. */
#define KL_TRACE_MAX_BYTES (256ll << 20)

int kl_radix_trace_load(const char *path, int page_size, struct kl_radix_trace *tr, struct kl_err *err)
{
    memset(tr, 0, sizeof *tr);
    size_t n;
    char *text = kl_read_regular(path, KL_TRACE_MAX_BYTES, &n, err);
    if (!text) return -1;
    int rc = kl_radix_trace_parse(text, n, path, page_size, tr, err);
    free(text);
    return rc;
}

/* ---- implementations ---- */

int kl_radix_impl_open(struct kl_radix_impl *im, const char *name, kl_radix_cmp_fn cmp, int page_size,
                       struct kl_err *err)
{
    memset(im, 0, sizeof *im);
    if (page_size < 1) return kl_fail(err, "page_size must be >= 1 (got %d)", page_size);
    im->name = name;
    im->cmp = cmp;
    im->page_size = page_size;
    im->state = cmp ? (void *)kl_radix_new(page_size, cmp) : (void *)kl_radix_ref_new(page_size);
    return 0;
}

int kl_radix_impl_open_variant(struct kl_radix_impl *im, const struct kl_variant *v, int page_size, struct kl_err *err)
{
    return kl_radix_impl_open(im, v ? v->name : "reference", v ? (kl_radix_cmp_fn)v->launch : NULL, page_size, err);
}

void kl_radix_impl_close(struct kl_radix_impl *im)
{
    if (!im->state) return;
    if (im->cmp)
        kl_radix_free(im->state);
    else
        kl_radix_ref_free(im->state);
    im->state = NULL;
}

void kl_radix_impl_apply(struct kl_radix_impl *im, const struct kl_radix_trace *tr, const struct kl_radix_op *op,
                         struct kl_radix_result *r)
{
    static const int32_t none[1] = {0};
    const int32_t *key = tr->tok ? tr->tok + op->key_off : none; /* a trace of evicts and sizes has no pool */
    size_t n = op->n, total = 0, evictable = 0;
    r->value = r->total = r->evictable = 0;
    if (im->cmp) {
        struct kl_radix *t = im->state;
        switch (op->code) {
        case KL_RADIX_INSERT:
            r->value = (long long)kl_radix_insert(t, key, n);
            break;
        case KL_RADIX_MATCH:
            r->value = (long long)kl_radix_match(t, key, n);
            break;
        case KL_RADIX_LOCK:
            r->value = kl_radix_lock(t, key, n);
            break;
        case KL_RADIX_UNLOCK:
            r->value = kl_radix_unlock(t, key, n);
            break;
        case KL_RADIX_EVICT:
            r->value = (long long)kl_radix_evict(t, (size_t)op->tokens);
            break;
        case KL_RADIX_SIZE:
            kl_radix_size(t, &total, &evictable);
            break;
        }
    } else {
        struct kl_radix_ref *t = im->state;
        switch (op->code) {
        case KL_RADIX_INSERT:
            r->value = (long long)kl_radix_ref_insert(t, key, n);
            break;
        case KL_RADIX_MATCH:
            r->value = (long long)kl_radix_ref_match(t, key, n);
            break;
        case KL_RADIX_LOCK:
            r->value = kl_radix_ref_lock(t, key, n);
            break;
        case KL_RADIX_UNLOCK:
            r->value = kl_radix_ref_unlock(t, key, n);
            break;
        case KL_RADIX_EVICT:
            r->value = (long long)kl_radix_ref_evict(t, (size_t)op->tokens);
            break;
        case KL_RADIX_SIZE:
            kl_radix_ref_size(t, &total, &evictable);
            break;
        }
    }
    r->total = (long long)total;
    r->evictable = (long long)evictable;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ULL;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dULL;
    x ^= x >> 33;
    return x;
}

static void digest_node(void *ctx, const int32_t *path, size_t path_len, size_t node_len, long lock, uint64_t stamp,
                        uint64_t seq)
{
    uint64_t h = 0x243f6a8885a308d3ULL;
    for (size_t i = 0; i < path_len; i++)
        h = mix64(h ^ (uint32_t)path[i]);
    h = mix64(h ^ path_len) ^ mix64(node_len * 0x9e3779b97f4a7c15ULL + 1);
    h = mix64(h ^ mix64((uint64_t)lock + 0x51)) ^ mix64(stamp * 3 + 7) ^ mix64(seq * 5 + 11);
    *(uint64_t *)ctx += mix64(h); /* a sum: the order of the visit does not matter */
}

uint64_t kl_radix_impl_digest(const struct kl_radix_impl *im)
{
    uint64_t sum = 0;
    if (im->cmp)
        kl_radix_visit(im->state, digest_node, &sum);
    else
        kl_radix_ref_visit(im->state, digest_node, &sum);
    return sum;
}

int kl_radix_impl_validate(const struct kl_radix_impl *im, char *msg, size_t len)
{
    return im->cmp ? kl_radix_validate(im->state, msg, len) : 0;
}

/* ---- replay ---- */

int kl_radix_trace_replay(const struct kl_radix_trace *tr, struct kl_radix_impl *im, struct kl_err *err, long long *got,
                          long long *want)
{
    for (size_t i = 0; i < tr->nops; i++) {
        const struct kl_radix_op *op = &tr->ops[i];
        struct kl_radix_result r;
        kl_radix_impl_apply(im, tr, op, &r);
        const char *name = op_names[op->code];
        long long g = 0, w = 0;
        const char *what = NULL;
        if (op->code == KL_RADIX_UNLOCK && r.value < 0) {
            if (got) *got = -1;
            if (want) *want = 0;
            return kl_fail(err, "%s:%d: unlock of a path that holds no lock", tr->name, op->line);
        }
        if (op->code == KL_RADIX_SIZE) {
            if (op->expect_total >= 0 && r.total != op->expect_total)
                g = r.total, w = op->expect_total, what = "total";
            else if (op->expect_evictable >= 0 && r.evictable != op->expect_evictable)
                g = r.evictable, w = op->expect_evictable, what = "evictable";
        } else if (op->expect >= 0 && r.value != op->expect) {
            g = r.value, w = op->expect, what = "";
        }
        if (what) {
            if (got) *got = g;
            if (want) *want = w;
            return kl_fail(err, "%s:%d: %s%s%s expected %lld, got %lld", tr->name, op->line, name, *what ? " " : "",
                           what, w, g);
        }
    }
    return 0;
}

int kl_radix_trace_diff(const struct kl_radix_trace *tr, struct kl_radix_impl *a, struct kl_radix_impl *b,
                        bool validate, struct kl_err *err)
{
    char msg[256];
    for (size_t i = 0; i < tr->nops; i++) {
        const struct kl_radix_op *op = &tr->ops[i];
        struct kl_radix_result ra, rb;
        kl_radix_impl_apply(a, tr, op, &ra);
        kl_radix_impl_apply(b, tr, op, &rb);
        const char *name = op_names[op->code];
        if (ra.value != rb.value || ra.total != rb.total || ra.evictable != rb.evictable)
            return kl_fail(err, "%s op %zu (line %d, %s of %zu tokens): %s %lld/%lld/%lld, %s %lld/%lld/%lld", tr->name,
                           i + 1, op->line, name, op->n, a->name, ra.value, ra.total, ra.evictable, b->name, rb.value,
                           rb.total, rb.evictable);
        if (kl_radix_impl_digest(a) != kl_radix_impl_digest(b))
            return kl_fail(err, "%s op %zu (line %d, %s): the trees differ (%s vs %s)", tr->name, i + 1, op->line, name,
                           a->name, b->name);
        if (validate && (kl_radix_impl_validate(a, msg, sizeof msg) || kl_radix_impl_validate(b, msg, sizeof msg)))
            return kl_fail(err, "%s op %zu (line %d, %s): invariant broken: %s", tr->name, i + 1, op->line, name, msg);
    }
    return 0;
}

/* ---- random traces ---- */

#define DOCS 8
#define DOC_MAX 128
#define RUNNING 8

void kl_radix_trace_random(struct kl_radix_trace *tr, uint64_t seed, int page_size, size_t nops)
{
    memset(tr, 0, sizeof *tr);
    snprintf(tr->name, sizeof tr->name, "random(seed=%llu,page=%d)", (unsigned long long)seed, page_size);
    tr->page_size = page_size;
    struct kl_rng rng;
    kl_rng_seed(&rng, seed);
    /* A tiny alphabet makes shared prefixes and page-boundary divergences common; it includes
     * the extremes of int32 so hashing and comparing cannot get signedness wrong. */
    static const int32_t alphabet[] = {0, 1, 2, -1, INT32_MAX, INT32_MIN, 7, 1 << 20};
    int vocab = 2 + (int)kl_rng_range(&rng, 5);
    int32_t docs[DOCS][DOC_MAX];
    size_t doc_len[DOCS];
    /* Documents of up to ~46 tokens at page 1, longer at larger pages (a few pages each). */
    int64_t doc_max = 40 + 6 * (int64_t)page_size < DOC_MAX ? 40 + 6 * (int64_t)page_size : DOC_MAX;
    for (int d = 0; d < DOCS; d++) {
        doc_len[d] = (size_t)kl_rng_range(&rng, doc_max + 1);
        for (size_t i = 0; i < DOC_MAX; i++)
            docs[d][i] = alphabet[kl_rng_range(&rng, vocab)];
    }
    int32_t key[DOC_MAX + 16], running[RUNNING][DOC_MAX + 16];
    size_t running_len[RUNNING], nrun = 0;

    while (tr->nops < nops) {
        /* A request: one of the documents, cut somewhere, perhaps changed at one token,
         * perhaps extended (a longer conversation), sometimes empty or shorter than a page. */
        int d = (int)kl_rng_range(&rng, DOCS);
        size_t n = (size_t)kl_rng_range(&rng, (int64_t)doc_len[d] + 1);
        memcpy(key, docs[d], n * sizeof *key);
        if (n && kl_rng_range(&rng, 4) == 0) key[kl_rng_range(&rng, (int64_t)n)] = alphabet[kl_rng_range(&rng, vocab)];
        if (kl_rng_range(&rng, 4) == 0) {
            size_t extra = (size_t)kl_rng_range(&rng, 16);
            for (size_t i = 0; i < extra; i++)
                key[n++] = alphabet[kl_rng_range(&rng, vocab)];
        }
        if (kl_rng_range(&rng, 20) == 0) n = (size_t)kl_rng_range(&rng, page_size + 1); /* empty / sub-page */
        if (kl_rng_range(&rng, 50) == 0) { /* the workload drifts: a document is replaced */
            int r = (int)kl_rng_range(&rng, DOCS);
            doc_len[r] = (size_t)kl_rng_range(&rng, doc_max + 1);
            for (size_t i = 0; i < DOC_MAX; i++)
                docs[r][i] = alphabet[kl_rng_range(&rng, vocab)];
        }

        int64_t r = kl_rng_range(&rng, 100);
        if (r < 30) { /* a request arrives, is cached, and runs (locked) until a later unlock */
            kl_radix_trace_add(tr, KL_RADIX_INSERT, key, n, 0);
            if (kl_rng_range(&rng, 2) == 0 && nrun < RUNNING) {
                kl_radix_trace_add(tr, KL_RADIX_LOCK, key, n, 0);
                memcpy(running[nrun], key, n * sizeof *key);
                running_len[nrun++] = n;
            }
        } else if (r < 55) {
            kl_radix_trace_add(tr, KL_RADIX_MATCH, key, n, 0);
        } else if (r < 68) { /* a running request finishes */
            if (nrun) {
                size_t k = (size_t)kl_rng_range(&rng, (int64_t)nrun);
                kl_radix_trace_add(tr, KL_RADIX_UNLOCK, running[k], running_len[k], 0);
                memcpy(running[k], running[nrun - 1], running_len[nrun - 1] * sizeof *key);
                running_len[k] = running_len[--nrun];
            } else {
                kl_radix_trace_add(tr, KL_RADIX_MATCH, key, n, 0);
            }
        } else if (r < 80) {
            long long want = kl_rng_range(&rng, 10) == 0 ? 1000000 : kl_rng_range(&rng, 3 * (int64_t)page_size + 24);
            kl_radix_trace_add(tr, KL_RADIX_EVICT, NULL, 0, want);
        } else if (r < 86) {
            kl_radix_trace_add(tr, KL_RADIX_SIZE, NULL, 0, 0);
        } else if (r < 90) { /* a lock of whatever is cached of a key: its unlock, later, may walk
                              * a longer path than it locked (then both sides must refuse it) */
            kl_radix_trace_add(tr, KL_RADIX_LOCK, key, n, 0);
            if (nrun < RUNNING) {
                memcpy(running[nrun], key, n * sizeof *key);
                running_len[nrun++] = n;
            }
        } else if (r < 93) { /* stray unlock: often of a path holding no lock (both must say -1) */
            kl_radix_trace_add(tr, KL_RADIX_UNLOCK, key, n, 0);
        } else { /* the same request again: a full hit */
            kl_radix_trace_add(tr, KL_RADIX_INSERT, key, n, 0);
            kl_radix_trace_add(tr, KL_RADIX_MATCH, key, n, 0);
        }
    }
}

/* ---- the module's verify hook ---- */

void kl_radix_verify(const struct kl_case *c, const struct kl_variant *v, struct kl_verdict *out)
{
    memset(out, 0, sizeof *out);
    out->status = KL_PASS;
    struct kl_err err = {{0}};
    long long page = 1;
    char path[1200];
    kl_case_path(c, "trace.jsonl", path, sizeof path);
    struct kl_radix_trace tr = {0};
    struct kl_radix_impl im = {0};
    long long got = 0, want = 0;
    if (kl_case_param_int(c, "page_size", 1, &page, &err) != 0) goto fail;
    if (page < 1 || page > (1 << 20)) {
        kl_fail(&err, "%s/meta.json: page_size must be between 1 and 2^20 (got %lld)", c->dir, page);
        goto fail;
    }
    if (c->dtype != KL_I32) {
        kl_fail(&err, "%s/meta.json: radix dtype must be \"i4\" (got \"%s\")", c->dir, c->dtype_name);
        goto fail;
    }
    if (kl_radix_trace_load(path, (int)page, &tr, &err) != 0) goto fail;
    if (tr.nops == 0) {
        kl_fail(&err, "%s: no operations", path);
        goto fail;
    }
    if (kl_radix_impl_open_variant(&im, v, (int)page, &err) != 0) goto fail;
    if (kl_radix_trace_replay(&tr, &im, &err, &got, &want) != 0) {
        out->max_abs = fabs((double)(got - want));
        goto fail;
    }
    kl_radix_impl_close(&im);
    kl_radix_trace_free(&tr);
    return;
fail:
    kl_radix_impl_close(&im);
    kl_radix_trace_free(&tr);
    out->status = KL_FAIL;
    snprintf(out->why, sizeof out->why, "%s", err.msg);
}
