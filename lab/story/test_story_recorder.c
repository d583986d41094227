/* The story's recorder (suite `story`, part of test_story; test_story.c lists the files), driven
 * through the real forward pass with made-up CUPTI records; the results writer against its committed
 * fixture; the trace. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lab/report/report.h" /* kernlab story and its guide: a test may use every floor but the command */
#include "lab/story/model.h"
#include "lab/story/scheduler.h"
#include "lab/story/story.h"
#include "lab/story/test_story.h"
#include "lab/story/timeline.h"
#include "reference/rope.h"
/* ---- the recorder, driven through the real forward pass with made-up CUPTI records ---- */

static uint64_t fake_now;
static uint64_t fake_clock(void)
{
    return fake_now;
}

/* Made-up GPU: kernels run back to back after the launch that queued them, each for a time that
 * depends on its op (so summaries have something to sum); one correlation id per launch. */
struct fake_gpu {
    struct kl_story_timeline *t;
    struct kl_activity_sink sink;
    uint64_t gpu_now;
    uint32_t corr;
    int layers;
};

static const char *fake_kernel_name(int op)
{
    static const char *const names[KL_OP_COUNT] = {
        "void index_v4_pdl_one_trip<8>(kl_index_params)",
        "void rmsnorm_v3<__nv_bfloat16, 8, 1>(...)",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
        "5x_cublas",
        "void kl::rope_v5<__nv_bfloat16>(kl_rope_params)",
        "void store_v3<16>(kl_store_params)",
        "void (anonymous namespace)::prefill_v1<128>(kl_attention_prefill_params)",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
        "5x_cublas",
        "void rmsnorm_v3<__nv_bfloat16, 8, 1>(...)",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__"
        "5x_cublas",
        "void silu_mul_kernel<8>(const __nv_bfloat16 *, __nv_bfloat16 *, long)",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
        "5x_cublas",
        "gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, float, 128, 16, 4, 4, false, false>(...)",
        "argmax_kernel(const float *, long, int *)"};
    return names[op];
}

static void fake_launch(struct fake_gpu *g, int op, bool decode, int count)
{
    for (int i = 0; i < count; i++) {
        const uint32_t corr = ++g->corr;
        fake_now += 3000; /* 3 us per launch call */
        g->sink.api(g->sink.user, corr, fake_now - 2500, fake_now - 500);
        struct kl_kernel_record r = {0};
        snprintf(r.name, sizeof r.name, "%s",
                 op == KL_OP_ATTENTION && decode
                     ? "void decode_v4<__nv_bfloat16, 128, 4, 2>(kl_attention_decode_params, int)"
                     : fake_kernel_name(op));
        const uint64_t dur = (uint64_t)(decode ? 4000 + 500 * op : 20000 + 9000 * op);
        if (g->gpu_now < fake_now) g->gpu_now = fake_now + 1000;
        r.start_ns = g->gpu_now - (op == KL_OP_ROPE ? 2000 : 0); /* rope starts under its predecessor (PDL) */
        r.end_ns = r.start_ns + dur;
        g->gpu_now = r.end_ns + 1500;
        r.correlation = corr, r.stream = 7, r.grid[0] = 132, r.grid[1] = r.grid[2] = 1, r.block[0] = 256;
        r.block[1] = r.block[2] = 1, r.registers = 64, r.theoretical_occupancy_pct = 50;
        g->sink.kernel(g->sink.user, &r);
    }
}

static void fake_hook(void *ctx, const struct kl_story_op *op, int begin)
{
    struct fake_gpu *g = ctx;
    kl_story_timeline_hook(g->t, op, begin);
    const bool decode = g->t->seg[g->t->cur_segment].phase == KL_PHASE_DECODE;
    if (begin)
        fake_launch(g, op->name, decode, op->how == KL_LAUNCH_GEMM ? op->u.gemm.count : 1);
    else
        fake_now += 200;
}

static void fake_copy(struct fake_gpu *g, uint64_t bytes)
{
    const uint32_t corr = ++g->corr;
    fake_now += 4000;
    g->sink.api(g->sink.user, corr, fake_now - 3000, fake_now - 1000);
    g->sink.copy(g->sink.user, corr, 7, g->gpu_now, g->gpu_now + 2000, bytes, 1);
    g->gpu_now += 2500;
}

/* The story of kl_story_run, on the tiny model, with every CUDA call replaced by made-up records:
 * the recorder, the document and the report see what a real run would give them. */
static cJSON *synthetic_run(int layers, int prompt, int shared, int steps)
{
    static struct kl_story_timeline t;
    kl_story_timeline_init(&t);
    t.clock = fake_clock;
    fake_now = 1000000000;
    t.t_zero = fake_now;
    struct fake_gpu g = {.t = &t, .sink = kl_story_timeline_sink(&t), .gpu_now = fake_now, .layers = layers};
    static char arena[1 << 22];
    struct kl_story_model m = {.cfg = kl_story_tiny,
                               .max_tokens = prompt,
                               .max_batch = 2,
                               .kv_pages = 64,
                               .max_pos = prompt + steps + 32,
                               .decode_kv_bound = prompt + steps,
                               .dry = true,
                               .hook = fake_hook,
                               .hook_ctx = &g};
    m.cfg.layers = layers;
    struct kl_story_layer_weights lw[4] = {{0}};
    void *kcache[4] = {0}, *vcache[4] = {0};
    m.layer = lw, m.k_cache = kcache, m.v_cache = vcache;
    void **bufs[] = {&m.x, &m.res[0], &m.res[1], &m.hn, &m.q, &m.k, &m.v, &m.attn, &m.o, &m.gu, &m.act, &m.mo};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        *bufs[i] = arena + i * (1 << 18);
    struct kl_story_batch b = {
        .decode = false, .tokens = prompt, .batch = 1, .max_q_len = prompt, .max_kv_len = prompt};

    kl_story_timeline_event(&t, "request 1 arrives", "%d prompt tokens", prompt);
    fake_now += 2000;
    kl_story_timeline_event(&t, "radix match", "0 tokens (0 pages) cached: a miss, in 0.4 us");
    const int64_t kv1[2] = {prompt, 0};
    kl_story_timeline_segment(&t, KL_PHASE_PREFILL, 0, 1, prompt, kv1, true);
    fake_copy(&g, 4096);
    cr_assert_eq(kl_story_forward(&m, &b), cudaSuccess);
    kl_story_timeline_end_segment(&t);
    fake_now = g.gpu_now + 5000;
    kl_story_timeline_event(&t, "first token", "request 1 picks token 17");
    kl_story_timeline_event(&t, "request 2 arrives", "%d prompt tokens", prompt);
    kl_story_timeline_event(&t, "radix match", "%d tokens (%d pages) cached, locked, in 1.1 us", shared / 16 * 16,
                            shared / 16);
    const int q2 = prompt - shared / 16 * 16;
    b.tokens = b.max_q_len = q2;
    kl_story_timeline_segment(&t, KL_PHASE_EXTEND, 0, 1, q2, kv1, true);
    fake_copy(&g, 2048);
    cr_assert_eq(kl_story_forward(&m, &b), cudaSuccess);
    kl_story_timeline_end_segment(&t);
    fake_now = g.gpu_now + 5000;
    kl_story_timeline_event(&t, "first token", "request 2 picks token 23");
    struct kl_story_batch dec = {.decode = true, .tokens = 2, .batch = 2, .max_q_len = 1};
    for (int graph = 0; graph < 2; graph++)
        for (int s = 1; s <= steps; s++) {
            const int64_t kv[2] = {prompt + s, prompt + s};
            dec.max_kv_len = prompt + s;
            kl_story_timeline_segment(&t, graph ? KL_PHASE_DECODE_GRAPH : KL_PHASE_DECODE, s, 2, 2, kv,
                                      s == 1 || s == steps);
            fake_copy(&g, 200);
            if (!graph) {
                cr_assert_eq(kl_story_forward(&m, &dec), cudaSuccess);
            } else { /* one launch call; every kernel of the step carries its correlation id */
                kl_story_timeline_graph(&t, 1);
                fake_now += 5000;
                g.sink.api(g.sink.user, ++g.corr, fake_now - 4000, fake_now - 1000);
                /* emit the eager step's kernels, all under the graph launch's correlation id */
                static const int per_layer[] = {KL_OP_RMS_NORM,     KL_OP_QKV_GEMM,  KL_OP_QKV_GEMM, KL_OP_ROPE,
                                                KL_OP_KV_STORE,     KL_OP_ATTENTION, KL_OP_O_GEMM,   KL_OP_ADD_RMS_NORM,
                                                KL_OP_GATE_UP_GEMM, KL_OP_SILU_MUL,  KL_OP_DOWN_GEMM};
                int seq[256], n = 0;
                seq[n++] = KL_OP_EMBED;
                for (int l = 0; l < layers; l++)
                    for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0]; k++)
                        seq[n++] = k == 0 && l > 0 ? KL_OP_ADD_RMS_NORM : per_layer[k];
                seq[n++] = KL_OP_ADD_RMS_NORM, seq[n++] = KL_OP_LM_HEAD, seq[n++] = KL_OP_ARGMAX;
                for (int i = 0; i < n; i++) {
                    struct kl_kernel_record r = {0};
                    snprintf(r.name, sizeof r.name, "%s",
                             seq[i] == KL_OP_ATTENTION
                                 ? "void decode_v4<__nv_bfloat16, 128, 4, 2>(kl_attention_decode_params, int)"
                                 : fake_kernel_name(seq[i]));
                    if (g.gpu_now < fake_now) g.gpu_now = fake_now + 1000;
                    r.start_ns = g.gpu_now, r.end_ns = g.gpu_now + 4000 + 500 * (uint64_t)seq[i] + 30 * (uint64_t)s;
                    g.gpu_now = r.end_ns + 300;
                    r.correlation = g.corr, r.stream = 7, r.graph = 1, r.grid[0] = 66, r.grid[1] = r.grid[2] = 1;
                    r.block[0] = 128, r.block[1] = r.block[2] = 1;
                    g.sink.kernel(g.sink.user, &r);
                }
                kl_story_timeline_graph(&t, 0);
            }
            kl_story_timeline_end_segment(&t);
        }
    kl_story_timeline_event(&t, "decode done", "%d steps, 2 tokens each", steps);
    kl_story_timeline_segment(&t, KL_PHASE_CONTROL, 0, 1, prompt, kv1, false);
    b.tokens = b.max_q_len = prompt;
    fake_copy(&g, 4096);
    cr_assert_eq(kl_story_forward(&m, &b), cudaSuccess);
    kl_story_timeline_end_segment(&t);
    kl_story_timeline_join(&t);
    /* made-up counters for each profiled op: memory-bound norms, tensor-bound GEMMs in prefill */
    for (int i = 0; i < t.n_prof; i++) {
        struct kl_story_profile *p = &t.prof[i];
        const bool gemm = kl_story_op_kind[p->op.name] == KL_KIND_GEMM, dec = p->phase == KL_PHASE_DECODE;
        p->measured = p->counters.valid = true;
        p->counters.dram_throughput_pct = gemm && !dec ? 20 + p->op.name : 70 + p->op.name;
        p->counters.sm_throughput_pct = gemm && !dec ? 85 : 30 + p->op.name;
        p->counters.tensor_pipe_pct = gemm && !dec ? 60 + p->op.name : gemm ? 8 : 0;
        p->counters.achieved_occupancy_pct = 40 + p->op.name;
        p->counters.l2_hit_rate_pct = 50;
        p->counters.dram_read_bytes = p->op.bytes, p->counters.dram_write_bytes = p->op.bytes / 4;
        p->counters.n_stalls = 2, p->counters.n_passes = 14;
        snprintf(p->counters.stalls[0].name, sizeof p->counters.stalls[0].name, "long_scoreboard");
        snprintf(p->counters.stalls[1].name, sizeof p->counters.stalls[1].name, "wait");
        p->counters.stalls[0].pct = 60, p->counters.stalls[1].pct = 25;
    }
    struct kl_story_options o = {
        .model = m.cfg, .prompt = prompt, .shared = shared, .steps = steps, .seed = 5, .graph = true, .control = true};
    int32_t *tokens = calloc((size_t)2 * (steps + 1), sizeof(int32_t));
    for (int i = 0; i < 2 * (steps + 1); i++)
        tokens[i] = (i * 37) % 512;
    struct kl_story_doc_info in = {
        .commit = "fixture",
        .date = "2026-01-01",
        .o = &o,
        .model = &m.cfg,
        .device = {.name = "Fixture GPU",
                   .cc = 90,
                   .sms = 132,
                   .sm_mhz = 1980,
                   .mem_mhz = 2619,
                   .l2_bytes = 52428800,
                   .memory_bytes = 85e9},
        .variants = {"v4_pdl_one_trip", "v3_pdl_residual_early", "v5_pdl_one_trip", "v3_pdl_one_trip", "v1_tiled",
                     "v4_tensor_cores"},
        .gemm = "cuBLAS 13.0.0 cublasGemmEx, bf16 in, float32 accumulate",
        .mem = {.kv_bytes = 1e6, .kv_pages = 64, .activation_bytes = 2e6, .total_bytes = 9e6, .layers_fit = 32},
        .weights_bytes = 6e6,
        .free_bytes = 80e9,
        .weights_ms = 12.5,
        .matched = shared / 16 * 16,
        .match_us = 1.1,
        .insert_us = 2.3,
        .control = true,
        .logits_max_abs_diff = 0.0123,
        .logits_rel_l2 = 0.0021,
        .same_token = true,
        .tree_total = 2 * prompt,
        .tree_evictable = 2 * prompt,
        .tree_nodes = 3,
        .tokens = tokens,
        .graph = true,
        .graph_identical = true};
    cJSON *doc = kl_story_document(&in, &t);
    free(tokens);
    kl_story_timeline_release(&t);
    return doc;
}

Test(story, the_recorder_joins_every_kernel_to_the_op_that_launched_it)
{
    cJSON *doc = synthetic_run(2, 64, 48, 8);
    const cJSON *rec = cJSON_GetObjectItem(doc, "recording");
    cr_assert_eq(cJSON_GetObjectItem(rec, "unattributed")->valueint, 0, "kernels left without an op");
    const cJSON *phases = cJSON_GetObjectItem(doc, "phases");
    cr_assert_eq(cJSON_GetArraySize(phases), 5, "prefill, extend, decode, decode_graph, control");
    const cJSON *pre = cJSON_GetArrayItem(phases, 0), *detail = cJSON_GetObjectItem(pre, "detail");
    /* embed + 2 layers x 10 ops + final norm + lm_head + argmax */
    cr_assert_eq(cJSON_GetArraySize(detail), 1 + 2 * 10 + 3);
    const cJSON *qkv = cJSON_GetArrayItem(detail, 2);
    cr_assert_eq(cJSON_GetArrayItem(qkv, 0)->valueint, KL_OP_QKV_GEMM);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetArrayItem(qkv, 2)), 2, "qkv_gemm is two cuBLAS launches");
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(pre, "gaps"), "overlapped")->valueint, 2,
                 "each layer's rope started under the GEMM before it");
    /* the graph steps' kernels carry one correlation id; their ops come from the eager step's order */
    const cJSON *gr = cJSON_GetArrayItem(phases, 3), *gsteps = cJSON_GetObjectItem(gr, "steps");
    const cJSON *by_op = cJSON_GetObjectItem(cJSON_GetArrayItem(gsteps, 0), "by_op");
    cr_assert_gt(cJSON_GetArrayItem(by_op, KL_OP_ATTENTION)->valuedouble, 0, "graph step without attention time");
    const cJSON *gdet = cJSON_GetObjectItem(cJSON_GetObjectItem(gr, "detail_steps"), "1");
    cr_assert_eq(cJSON_GetArraySize(gdet), 1 + 2 * 10 + 3, "a graph step's kernels grouped into its ops");
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetArrayItem(gdet, 1 + 10), 1)->valueint, 1, "layer 1 starts after 10 ops");
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetArrayItem(gdet, 21), 1)->valueint, -1,
                 "the final norm is outside the layers");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "profiles")), 3 * KL_OP_COUNT,
                 "every op of prefill, extend and decode, profiled once each");
    const cJSON *copies = cJSON_GetObjectItem(pre, "copies");
    cr_assert_eq(cJSON_GetObjectItem(copies, "count")->valueint, 1, "the prefill's metadata copy");
    cJSON_Delete(doc);
}

void kl_story_test_remove_dir(const char *dir)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* The committed fixture of the report test (lab/tests/report_fixture/data/story.json) is this
 * synthetic run, written by the story command's writer: KL_UPDATE_FIXTURE=1 rewrites it. */
Test(story, a_synthetic_run_writes_the_committed_fixture)
{
    cJSON *doc = synthetic_run(2, 64, 48, 8);
    const char *fixture = KL_SOURCE_DIR "/lab/tests/report_fixture/data/story.json";
    char tmp[] = "/tmp/kl_story_XXXXXX";
    cr_assert(mkdtemp(tmp));
    char path[256];
    snprintf(path, sizeof path, "%s/story.json", tmp);
    cr_assert_eq(kl_story_write_json(doc, path), 0);
    if (getenv("KL_UPDATE_FIXTURE")) cr_assert_eq(kl_story_write_json(doc, fixture), 0);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", path, fixture);
    cr_assert_eq(system(cmd), 0, "the writer's output differs from %s (KL_UPDATE_FIXTURE=1 rewrites it)", fixture);
    /* and what it wrote reads back as the same document */
    cJSON *back = kl_story_read_json(path);
    cr_assert(back, "story.json is not JSON");
    cr_assert(cJSON_Compare(doc, back, true), "story.json does not read back as the document written");
    cJSON_Delete(back);
    cJSON_Delete(doc);
    kl_story_test_remove_dir(tmp);
}

/* X slices per (pid, tid): sorted by start (the longer first on a tie, as viewers nest them), each
 * either nested in or after the one before. */
static int cmp_ts(const void *a, const void *b)
{
    const cJSON *p = *(cJSON *const *)a, *q = *(cJSON *const *)b;
    const double x = cJSON_GetObjectItem(p, "ts")->valuedouble, y = cJSON_GetObjectItem(q, "ts")->valuedouble;
    if (x != y) return (x > y) - (x < y);
    const double dx = cJSON_GetObjectItem(p, "dur")->valuedouble, dy = cJSON_GetObjectItem(q, "dur")->valuedouble;
    return (dx < dy) - (dx > dy);
}

/* A trace file's slices: every track nests exactly as a reader computes ends (ts + dur, in
 * doubles, no tolerance), and every kernel of layer L on its stream's own track lies inside a
 * "layer L" slice (one that a PDL launch started under its predecessor sits on the stream's
 * overlap track, and may start before its layer's first kernel on the main one). Returns the
 * number of kernel slices. */
static int check_trace_nests(const char *path)
{
    cJSON *trace = kl_story_read_json(path);
    cr_assert(trace, "%s is not JSON", path);
    const cJSON *evs = cJSON_GetObjectItem(trace, "traceEvents");
    cr_assert(cJSON_IsArray(evs));
    const int ne = cJSON_GetArraySize(evs);
    cJSON **x = malloc(sizeof(cJSON *) * (size_t)ne);
    int nx = 0, kernels = 0, max_tid = 0, overlap_tids[64], n_overlap = 0;
    for (cJSON *e = evs->child; e; e = e->next) {
        const char *ph = cJSON_GetObjectItem(e, "ph")->valuestring;
        cr_assert(cJSON_GetObjectItem(e, "pid"), "an event without pid");
        const cJSON *args = cJSON_GetObjectItem(e, "args"), *tname = args ? cJSON_GetObjectItem(args, "name") : NULL;
        if (strcmp(ph, "M") == 0 && cJSON_IsString(tname) && strstr(tname->valuestring, "(PDL overlap)") &&
            n_overlap < 64)
            overlap_tids[n_overlap++] = cJSON_GetObjectItem(e, "tid")->valueint;
        if (strcmp(ph, "X") == 0) {
            cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(e, "ts")) && cJSON_IsNumber(cJSON_GetObjectItem(e, "dur")));
            x[nx++] = e;
            if (cJSON_GetObjectItem(e, "tid")->valueint > max_tid) max_tid = cJSON_GetObjectItem(e, "tid")->valueint;
            kernels += strcmp(cJSON_GetObjectItem(e, "cat")->valuestring, "layer") != 0 &&
                       strcmp(cJSON_GetObjectItem(e, "cat")->valuestring, "phase") != 0 &&
                       cJSON_GetObjectItem(e, "args") && cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "op");
        }
    }
    qsort(x, (size_t)nx, sizeof *x, cmp_ts);
    int bad = 0;
    for (int tid = 0; tid <= max_tid; tid++) {
        double stack[16];
        const char *names[16];
        int depth = 0;
        for (int i = 0; i < nx; i++) {
            if (cJSON_GetObjectItem(x[i], "tid")->valueint != tid) continue;
            const double ts = cJSON_GetObjectItem(x[i], "ts")->valuedouble;
            const double end = ts + cJSON_GetObjectItem(x[i], "dur")->valuedouble;
            while (depth && ts >= stack[depth - 1])
                depth--;
            if (depth && end > stack[depth - 1] && bad++ < 5)
                cr_log_error("%s: track %d: slice '%s' at %.3f ends at %.17g, after its parent '%s' (%.17g)", path, tid,
                             cJSON_GetObjectItem(x[i], "name")->valuestring, ts, end, names[depth - 1],
                             stack[depth - 1]);
            if (depth < 16) names[depth] = cJSON_GetObjectItem(x[i], "name")->valuestring, stack[depth++] = end;
        }
    }
    cr_assert_eq(bad, 0, "%s: %d slices end after their parent slice", path, bad);
    /* every kernel of layer L lies inside a "layer L" slice */
    for (int i = 0; i < nx; i++) {
        const cJSON *args = cJSON_GetObjectItem(x[i], "args"), *l = args ? cJSON_GetObjectItem(args, "layer") : NULL;
        bool on_overlap_track = false;
        for (int k = 0; k < n_overlap; k++)
            on_overlap_track |= cJSON_GetObjectItem(x[i], "tid")->valueint == overlap_tids[k];
        if (!l || l->valueint < 0 || on_overlap_track) continue;
        char want[32];
        snprintf(want, sizeof want, "layer %d", l->valueint);
        const double ts = cJSON_GetObjectItem(x[i], "ts")->valuedouble;
        const double end = ts + cJSON_GetObjectItem(x[i], "dur")->valuedouble;
        bool inside = false;
        for (int j = 0; j < nx && !inside; j++) {
            const double lt = cJSON_GetObjectItem(x[j], "ts")->valuedouble;
            inside = strcmp(cJSON_GetObjectItem(x[j], "name")->valuestring, want) == 0 && lt <= ts &&
                     end <= lt + cJSON_GetObjectItem(x[j], "dur")->valuedouble;
        }
        cr_assert(inside, "%s: kernel at %.3f of %s is in no such slice", path, ts, want);
    }
    free(x);
    cJSON_Delete(trace);
    return kernels;
}

Test(story, the_trace_is_json_whose_tracks_nest_and_whose_layers_hold_their_kernels)
{
    cJSON *doc = synthetic_run(2, 64, 48, 8);
    char tmp[] = "/tmp/kl_story_XXXXXX";
    cr_assert(mkdtemp(tmp));
    cr_assert_eq(kl_story_report(doc, tmp), 0);
    char path[256];
    snprintf(path, sizeof path, "%s/story-trace.json", tmp);
    cr_assert_gt(check_trace_nests(path), 4 * 23, "too few kernel slices");
    cJSON_Delete(doc);
    kl_story_test_remove_dir(tmp);
}

/* The same on the committed trace of a real run (kernlab report writes it from reports/data/story.json). */
Test(story, the_committed_trace_nests)
{
    cr_assert_gt(check_trace_nests(KL_SOURCE_DIR "/reports/story-trace.json"), 0, "no kernel slices");
}
