/* `kernlab story [--layers N] [--prompt N] [--shared N] [--steps N] [--seed N] [--out DIR] [--tiny]
 *                [--kv bf16|fp8]`
 *
 * A command of the report room: it runs the decoder (lab/story/) and writes the story's guide
 * (story.c here), so it sits above both.
 *
 * Arguments are checked before anything else (lab/core/args.h) (usage errors exit 2), then the device (none: exit 1
 * and nothing written), then the memory plan; only then is DIR created. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lab/core/device.h"
#include "lab/report/report.h"
#include "lab/story/story.h"
#include "perf/counters.h"

#include <cuda_runtime_api.h>

enum { STORY_LAYERS, STORY_PROMPT, STORY_SHARED, STORY_STEPS, STORY_SEED, STORY_OUT, STORY_TINY, STORY_KV };
static const struct kl_opt story_opts[] = {
    [STORY_LAYERS] = {"--layers", KL_OPT_NUMBER, "N", "decoder layers, 1-32 (default: as many as fit, 32 on an 80 GB card; --tiny: 2)", 1, 32},
    [STORY_PROMPT] = {"--prompt", KL_OPT_NUMBER, "N", "request 1's prompt tokens, 32-8192 (default 2048)", 32, 8192},
    [STORY_SHARED] = {"--shared", KL_OPT_NUMBER, "N", "tokens request 2 shares with it, 16 <= N < prompt (default 3/4 of the prompt: 1536)", 16, 8191},
    [STORY_STEPS] = {"--steps", KL_OPT_NUMBER, "N", "decode steps, 64-4096 (default 128)", 64, 4096},
    [STORY_SEED] = {"--seed", KL_OPT_NUMBER, "N", "weights and prompts (default 1)"},
    [STORY_OUT] = {"--out", KL_OPT_VALUE, "DIR", "writes DIR/story.json (the results), DIR/story.md and DIR/story-trace.json (default story-out)"},
    [STORY_TINY] = {"--tiny", KL_OPT_FLAG, NULL, "the check's tiny model (hidden 256, 4/2 heads, vocab 512) instead of Llama's shapes"},
    [STORY_KV] = {"--kv", KL_OPT_VALUE, "bf16|fp8", "the KV cache decode reads (default bf16); fp8: e4m3 with a scale per (layer, kv head), written by store's fused " KL_STORY_FP8_STORE ", read by attention_decode's " KL_STORY_FP8_DECODE "; prefill and extend still attend over bf16 K/V (no FP8 prefill kernel); writes DIR/story-fp8.json, not story.json"},
    {0},
};
const struct kl_command kl_story_command = {
    .name = "story",
    .summary = "a Llama-shaped forward pass told kernel by kernel",
    .details = "A Llama-3.1-8B-shaped decoder (random weights) serving two requests: request 1 prefills its prompt\n"
               "(a radix miss), request 2 shares a prefix and prefills only the rest (a hit), both decode together,\n"
               "then decode again as a CUDA graph. Every kernel is recorded (CUPTI) and one of each kind profiled.\n"
               "With --kv fp8 the decode steps read an FP8 cache; story.md sets that run (story-fp8.json) beside\n"
               "a bf16 run's story.json in the same results.\n"
               "More: lab/CONTRACTS.md section 9. exit: 0, 1 no suitable GPU or a failed run (nothing written), 2 usage\n",
    .opts = story_opts,
    .run = kl_cmd_story,
};

int kl_cmd_story(int argc, char **argv)
{
    struct kl_optval opt[8];
    int n, rc = kl_args_parse(&kl_story_command, argc, argv, opt, NULL, &n);
    if (rc >= 0) return rc;
    long layers = opt[STORY_LAYERS].set ? (long)opt[STORY_LAYERS].number : 0; /* 0: as many as fit */
    const long prompt = opt[STORY_PROMPT].set ? (long)opt[STORY_PROMPT].number : 2048;
    const long steps = opt[STORY_STEPS].set ? (long)opt[STORY_STEPS].number : 128;
    const long shared = opt[STORY_SHARED].set ? (long)opt[STORY_SHARED].number : prompt * 3 / 4;
    const unsigned long long seed = opt[STORY_SEED].set ? opt[STORY_SEED].number : 1;
    const char *out = opt[STORY_OUT].set ? opt[STORY_OUT].value : "story-out";
    const bool tiny = opt[STORY_TINY].set;
    const char *kv = opt[STORY_KV].set ? opt[STORY_KV].value : "bf16";
    if (strcmp(kv, "bf16") != 0 && strcmp(kv, "fp8") != 0)
        return kl_usage_error(&kl_story_command, "--kv %s: bf16 or fp8", kv);
    const bool fp8 = strcmp(kv, "fp8") == 0;
    if (shared >= prompt)
        return kl_usage_error(&kl_story_command, "--shared %ld >= --prompt %ld: request 2 must have a token of its own",
                              shared, prompt);

    char why[256];
    /* a variant missing from the build first (any device), then one the device is too old for */
    if (fp8 && kl_story_fp8_missing(1 << 20, why, sizeof why)) return fprintf(stderr, "kernlab story: %s\n", why), 1;
    const int cc = kl_device_cc(why, sizeof why);
    if (!cc) return fprintf(stderr, "kernlab story: needs a CUDA device (%s)\n", why), 1;
    if (cc < 80)
        return fprintf(stderr,
                       "kernlab story: needs a CUDA device of compute capability 8.0 or newer (bf16 tensor "
                       "cores); this one is sm_%d\n",
                       cc),
               1;
    if (fp8 && kl_story_fp8_missing(cc, why, sizeof why)) return fprintf(stderr, "kernlab story: %s\n", why), 1;

    struct kl_story_options o = {.model = tiny ? kl_story_tiny : kl_story_llama8b,
                                 .prompt = (int)prompt,
                                 .shared = (int)shared,
                                 .steps = (int)steps,
                                 .seed = seed,
                                 .trace = true,
                                 .counters = true,
                                 .graph = true,
                                 .control = true,
                                 .kv_fp8 = fp8,
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
    snprintf(path, sizeof path, "%s/%s", out, fp8 ? "story-fp8.json" : "story.json");
    rc = 0;
    /* the guide comes from the file just written, exactly as `kernlab report` will make it; an FP8
     * run is a column of the bf16 run's guide, written when a story.json sits beside it */
    if (kl_story_write_json(r.doc, path)) {
        fprintf(stderr, "kernlab story: %s: %s\n", path, strerror(errno));
        rc = 1;
    } else if (fp8) {
        const int g = kl_story_report_dir(out, out);
        if (g < 0)
            rc = 1;
        else if (g == 0)
            printf("wrote %s (no %s/story.json beside it: run kernlab story --out %s for the guide)\n", path, out, out);
        else
            printf("wrote %s, and %s/story.md with it beside %s/story.json\n", path, out, out);
    } else if (kl_story_report_dir(out, out) != 1) {
        rc = 1;
    } else {
        printf("wrote %s/story.json, %s/story.md, %s/story-trace.json\n", out, out, out);
    }
    kl_story_result_free(&r);
    return rc;
}
