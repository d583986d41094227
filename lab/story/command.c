/* `kernlab story [--layers N] [--prompt N] [--shared N] [--steps N] [--seed N] [--out DIR] [--tiny]`
 *
 * Arguments are checked before anything else (usage errors exit 2), then the device (none: exit 1
 * and nothing written), then the memory plan; only then is DIR created. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lab/core/device.h"
#include "lab/kernlab.h"
#include "lab/story/story.h"
#include "perf/counters.h"

#include <cuda_runtime_api.h>

static const char story_usage[] =
    "usage: kernlab story [--layers N] [--prompt N] [--shared N] [--steps N] [--seed N] [--out DIR] [--tiny]\n"
    "  A Llama-3.1-8B-shaped decoder (random weights) serving two requests: request 1 prefills its prompt\n"
    "  (a radix miss), request 2 shares a prefix and prefills only the rest (a hit), both decode together,\n"
    "  then decode again as a CUDA graph. Every kernel is recorded (CUPTI) and one of each kind profiled.\n"
    "  --layers N   decoder layers, 1-32 (default: as many as fit, 32 on an 80 GB card; --tiny: 2)\n"
    "  --prompt N   request 1's prompt tokens, 32-8192 (default 2048)\n"
    "  --shared N   tokens request 2 shares with it, 16 <= N < prompt (default 3/4 of the prompt: 1536)\n"
    "  --steps N    decode steps, 64-4096 (default 128)\n"
    "  --seed N     weights and prompts (default 1)\n"
    "  --out DIR    writes DIR/story.json (the results), DIR/story.md and DIR/story-trace.json\n"
    "               (default story-out)\n"
    "  --tiny       the check's tiny model (hidden 256, 4/2 heads, vocab 512) instead of Llama's shapes\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "kernlab story: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%.*s(kernlab story --help says more)\n", (int)strcspn(story_usage, "\n") + 1, story_usage);
    return 2;
}

/* A whole decimal number in [lo, hi], or -1 (the caller names the option). */
static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int kl_story_write_json(const cJSON *doc, const char *path)
{
    /* One line per top-level key and per element of the long arrays: readable diffs, modest size. */
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\n");
    for (const cJSON *it = doc->child; it; it = it->next) {
        fprintf(f, "\"%s\": ", it->string);
        if (cJSON_IsArray(it) && (strcmp(it->string, "events") == 0 || strcmp(it->string, "phases") == 0 ||
                                  strcmp(it->string, "profiles") == 0 || strcmp(it->string, "kernels") == 0)) {
            fprintf(f, "[\n");
            for (const cJSON *e = it->child; e; e = e->next) {
                char *s = cJSON_PrintUnformatted(e);
                fprintf(f, "  %s%s\n", s ? s : "null", e->next ? "," : "");
                cJSON_free(s);
            }
            fprintf(f, "]");
        } else {
            char *s = cJSON_PrintUnformatted(it);
            fprintf(f, "%s", s ? s : "null");
            cJSON_free(s);
        }
        fprintf(f, "%s\n", it->next ? "," : "");
    }
    fprintf(f, "}\n");
    return fclose(f);
}

int kl_cmd_story(int argc, char **argv)
{
    long layers = 0, prompt = 2048, shared = -1, steps = 128;
    unsigned long long seed = 1;
    const char *out = "story-out";
    bool tiny = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--tiny") == 0) {
            tiny = true;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return fputs(story_usage, stdout), 0;
        if (strcmp(a, "--layers") && strcmp(a, "--prompt") && strcmp(a, "--shared") && strcmp(a, "--steps") &&
            strcmp(a, "--seed") && strcmp(a, "--out"))
            return usage_error("unknown argument '%s'", a);
        if (i + 1 == argc) return usage_error("%s needs a value", a);
        const char *val = argv[++i];
        if (strcmp(a, "--out") == 0) {
            if (!*val) return usage_error("%s needs a directory", a);
            out = val;
        } else if (strcmp(a, "--seed") == 0) {
            char *end;
            errno = 0;
            seed = strtoull(val, &end, 10);
            if (errno || end == val || *end || val[0] == '-')
                return usage_error("--seed '%s' is not a number >= 0", val);
        } else if (strcmp(a, "--layers") == 0) {
            if (parse_int(val, 1, 32, &layers)) return usage_error("--layers '%s': a number from 1 to 32", val);
        } else if (strcmp(a, "--prompt") == 0) {
            if (parse_int(val, 32, 8192, &prompt)) return usage_error("--prompt '%s': a number from 32 to 8192", val);
        } else if (strcmp(a, "--shared") == 0) {
            if (parse_int(val, 16, 8191, &shared)) return usage_error("--shared '%s': a number from 16 to 8191", val);
        } else if (parse_int(val, 64, 4096, &steps)) {
            return usage_error("--steps '%s': a number from 64 to 4096", val);
        }
    }
    if (shared < 0) shared = prompt * 3 / 4;
    if (shared >= prompt) {
        char msg[96];
        snprintf(msg, sizeof msg, "%ld >= --prompt %ld", shared, prompt);
        return usage_error("--shared %s: request 2 must have a token of its own", msg);
    }

    char why[256];
    const int cc = kl_device_cc(why, sizeof why);
    if (!cc) return fprintf(stderr, "kernlab story: needs a CUDA device (%s)\n", why), 1;
    if (cc < 80)
        return fprintf(stderr,
                       "kernlab story: needs a CUDA device of compute capability 8.0 or newer (bf16 tensor "
                       "cores); this one is sm_%d\n",
                       cc),
               1;

    struct kl_story_options o = {.model = tiny ? kl_story_tiny : kl_story_llama8b,
                                 .prompt = (int)prompt,
                                 .shared = (int)shared,
                                 .steps = (int)steps,
                                 .seed = seed,
                                 .trace = true,
                                 .counters = true,
                                 .graph = true,
                                 .control = true,
                                 .progress = stderr};
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        return fprintf(stderr, "kernlab story: needs a CUDA device (cudaMemGetInfo failed)\n"), 1;
    struct kl_story_memory mem;
    kl_story_memory_plan(&o, (double)free_b, &mem);
    if (layers == 0) layers = mem.layers_fit;
    if (layers < 1 || layers > mem.layers_fit)
        return fprintf(stderr, "kernlab story: %ld layer%s do not fit in the %.1f GB free on this device (%d do)\n",
                       layers ? layers : 1, layers == 1 ? "" : "s", (double)free_b / 1e9, mem.layers_fit),
               1;
    o.model.layers = (int)layers;

    if (mkdir(out, 0755) && errno != EEXIST)
        return fprintf(stderr, "kernlab story: --out %s: %s\n", out, strerror(errno)), 1;
    struct kl_story_result r;
    struct kl_err err = {{0}};
    if (kl_story_run(&o, &r, &err)) {
        kl_counters_shutdown();
        return fprintf(stderr, "kernlab story: %s\n", err.msg), 1;
    }
    kl_counters_shutdown();
    char path[1200];
    snprintf(path, sizeof path, "%s/story.json", out);
    int rc = 0;
    /* the guide comes from the file just written, exactly as `kernlab report` will make it */
    if (kl_story_write_json(r.doc, path)) {
        fprintf(stderr, "kernlab story: %s: %s\n", path, strerror(errno));
        rc = 1;
    } else if (kl_story_report_dir(out, out) != 1) {
        rc = 1;
    } else {
        printf("wrote %s/story.json, %s/story.md, %s/story-trace.json\n", out, out, out);
    }
    kl_story_result_free(&r);
    return rc;
}
