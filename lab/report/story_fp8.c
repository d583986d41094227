/* story.md's section on the FP8 KV cache: this run's decode step beside a `kernlab story --kv fp8`
 * run's (the results' story-fp8.json, attached to the document as "kv_fp8_run" by kl_story_load),
 * or "not measured" where there is none. Every figure comes from the two documents. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/core/guide.h"
#include "lab/core/json_path.h"
#include "lab/report/story_doc.h"
#include "lab/story/story.h"

/* One run's eager decode: the median step's GPU time and the shares of its kernel time. */
struct decode_figures {
    double step_us, attention_us, store_us, kernel_us; /* per step: median span; sums over steps / steps */
    int steps;
};

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static struct decode_figures decode_figures(const cJSON *doc)
{
    struct decode_figures r = {NAN, 0, 0, 0, 0};
    const cJSON *ops = kl_json_get(doc, "ops"), *phases = kl_json_get(doc, "phases"), *p = NULL;
    for (const cJSON *e = phases ? phases->child : NULL; e; e = e->next)
        if (strcmp(kl_json_str(e, "name", ""), "decode") == 0) p = e;
    const cJSON *steps = kl_json_get(p, "steps");
    const int n = cJSON_GetArraySize(steps), n_ops = cJSON_GetArraySize(ops);
    double *span = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!span || n == 0) return free(span), r;
    for (const cJSON *s = steps->child; s; s = s->next) {
        span[r.steps++] = kl_json_num(s, "t1_us") - kl_json_num(s, "t0_us");
        const cJSON *by_op = kl_json_get(s, "by_op");
        for (int o = 0; o < n_ops; o++) {
            const char *name = cJSON_GetArrayItem(ops, o)->valuestring;
            const double us = cJSON_GetArrayItem(by_op, o) ? cJSON_GetArrayItem(by_op, o)->valuedouble : 0;
            r.kernel_us += us;
            if (strcmp(name, "attention") == 0) r.attention_us += us;
            if (strcmp(name, "kv_store") == 0 || strcmp(name, "rope") == 0) r.store_us += us;
        }
    }
    qsort(span, (size_t)n, sizeof *span, cmp);
    r.step_us = n % 2 ? span[n / 2] : (span[n / 2 - 1] + span[n / 2]) / 2;
    r.attention_us /= n, r.store_us /= n, r.kernel_us /= n;
    free(span);
    return r;
}

/* (macros: KL_F's buffer lives in the caller's block) */
#define US(v) (isfinite(v) ? KL_F("%.1f us", v) : "-")
#define PCT(part, whole) ((whole) > 0 ? KL_F("%.1f%%", 100 * (part) / (whole)) : "-")

/* What would keep the two runs from being read side by side: another device, shape or build. */
static const char *mismatch(const cJSON *a, const cJSON *b)
{
    static const char *const same[] = {"device.name", "model.layers", "model.hidden", "run.prompt",
                                       "run.shared",  "run.steps",    "model.seed"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        const cJSON *x = kl_json_get(a, same[i]), *y = kl_json_get(b, same[i]);
        if (!x || !y || !cJSON_Compare(x, y, true)) return same[i];
    }
    return NULL;
}

void kl_sd_section_fp8(FILE *f, const struct kl_story_doc *d)
{
    const cJSON *fp8 = kl_json_get(d->root, "kv_fp8_run");
    /* The variants the measured run used (a later build may name others); without a run, this build's. */
    const char *fused = fp8 ? kl_json_str(fp8, "variants.store_fused", "?") : KL_STORY_FP8_STORE;
    const char *decode = fp8 ? kl_json_str(fp8, "variants.attention_decode", "?") : KL_STORY_FP8_DECODE;
    fprintf(
        f,
        "## The FP8 KV cache (`--kv fp8`)\n\nWith `kernlab story --kv fp8` the decode steps read K and V as e4m3 "
        "codes, one byte an element, with a float32 scale per (layer, kv head): each step's qkv_gemm writes q, k and v "
        "in one row per token and one kv_store kernel, store's %s, rotates q and k, quantizes k and v and writes "
        "them into the pages (no rope op), and attention is attention_decode's %s on those pages. Prefill and "
        "extend still attend over bf16 K/V, as there is no FP8 prefill kernel: they fill both caches (the fused "
        "store for the FP8 one, then rope on K and the bf16 store). The scale is the weights' bound on |K| (|V|) "
        "over 448, so no code saturates; e4m3 keeps 3 mantissa bits for every value above scale/64, so the "
        "headroom costs precision only in the subnormals.\n\n",
        fused, decode);
    if (!fp8) {
        fprintf(f,
                "FP8 decode: not measured (no story-fp8.json in the results: `build/kernlab story --kv fp8 --out DIR`, "
                "then copy DIR/story-fp8.json beside story.json and run `kernlab report`).\n\n");
        return;
    }
    const char *diff = mismatch(d->root, fp8);
    if (diff) fprintf(f, "The FP8 run differs from this one in %s: the columns are not one comparison.\n\n", diff);
    const struct decode_figures b = decode_figures(d->root), e = decode_figures(fp8);
    fprintf(f, "| eager decode, per step (2 requests) | bf16 KV | fp8 KV |\n|---|---|---|\n");
    fprintf(f, "| GPU time (median step) | %s | %s |\n", US(b.step_us), US(e.step_us));
    fprintf(f, "| attention | %s (%s) | %s (%s) |\n", US(b.attention_us), PCT(b.attention_us, b.kernel_us),
            US(e.attention_us), PCT(e.attention_us, e.kernel_us));
    fprintf(f, "| rope + kv_store | %s (%s) | %s (%s) |\n", US(b.store_us), PCT(b.store_us, b.kernel_us),
            US(e.store_us), PCT(e.store_us, e.kernel_us));
    fprintf(f, "| variants | %s, %s + %s | %s, %s |\n\n", kl_json_str(d->root, "variants.attention_decode", "?"),
            kl_json_str(d->root, "variants.rope", "?"), kl_json_str(d->root, "variants.store", "?"),
            kl_json_str(fp8, "variants.attention_decode", "?"), kl_json_str(fp8, "variants.store_fused", "?"));
    fprintf(f, "Shares are of the step's kernel time; the FP8 run is %s, %s, commit %s.\n\n",
            kl_json_str(fp8, "device.name", "?"), kl_json_str(fp8, "date", "?"), kl_json_str(fp8, "commit", "?"));
}
