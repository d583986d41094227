/* What the story records and how it becomes the results document.
 *
 * During the run, CUPTI's Activity API streams every kernel (name, start, end, grid, block,
 * stream, correlation id), every CUDA API call (its host interval and correlation id) and every
 * copy into this recorder, while the model's hook stamps each op's host interval. Afterwards a
 * kernel belongs to the op whose host interval holds the API call that launched it (the
 * correlation id joins the two); a graph launch's kernels belong to that launch, in the captured
 * order. Segments group ops: a phase (request 1's prefill, request 2's extend, the control) or one
 * step of a phase (decode step s, or its graph replay). Then the Range Profiler replays the first
 * op of each distinct (phase, op) alone, once per counter pass. */
#ifndef KL_STORY_TIMELINE_H
#define KL_STORY_TIMELINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lab/story/model.h"
#include "perf/activity.h"
#include "perf/counters.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

/* Phase classes, in story order. The ops of these are profiled (control and the graph replay
 * launch the same kernels on the same shapes as prefill and decode). */
enum kl_story_phase {
    KL_PHASE_PREFILL,
    KL_PHASE_EXTEND,
    KL_PHASE_DECODE,
    KL_PHASE_DECODE_GRAPH,
    KL_PHASE_CONTROL,
    KL_PHASE_COUNT
};
extern const char *const kl_story_phase_names[KL_PHASE_COUNT];

struct kl_story_segment {
    enum kl_story_phase phase;
    int step;          /* decode steps 1..steps; 0 for a whole phase */
    int requests;      /* in the batch */
    int64_t q_tokens;  /* new tokens this segment computes */
    int64_t kv_len[2]; /* keys each request attends (the longest request's for a prefill) */
    uint64_t t_begin;  /* host time the scheduler began the segment (metadata upload first) */
    int first_op, end_op;
    bool detail; /* every kernel goes into the results (else a summary) */
};

struct kl_story_op_rec {
    int16_t name; /* enum kl_story_op_name; -1: a graph launch */
    int16_t layer;
    int32_t segment;
    uint64_t t0, t1; /* host interval around the launches */
};

struct kl_story_kernel {
    uint64_t start, end;
    uint32_t correlation, stream;
    int32_t name; /* index into names */
    int32_t op;   /* index into ops, -1 when unattributed */
    int32_t grid[3], block[3];
    int32_t registers, smem, local_bytes;
    float occupancy; /* theoretical, % */
};

struct kl_story_copy {
    uint64_t start, end, bytes;
    uint32_t correlation, stream;
    int kind;
    int segment;
};

struct kl_story_event {
    uint64_t t;
    char what[96], detail[160];
};

/* One distinct (phase, op): the op to replay, and what the profiler found. */
struct kl_story_profile {
    enum kl_story_phase phase;
    struct kl_story_op op;
    int first_op; /* the recorded instance (for its kernels' launch shapes) */
    struct kl_counters counters;
    bool measured;
};

struct kl_story_timeline {
    bool on;                 /* CUPTI is streaming */
    uint64_t (*clock)(void); /* the tests' clock; NULL: CUPTI's (0 while it is off) */
    char why[256];
    uint64_t t_zero; /* request 1's arrival */
    int cur_segment; /* -1: ops outside any segment are not recorded */
    struct kl_story_segment *seg;
    int n_seg, cap_seg;
    struct kl_story_op_rec *ops;
    int n_ops, cap_ops;
    struct kl_story_kernel *k;
    int n_k, cap_k;
    struct kl_story_copy *copies;
    int n_copies, cap_copies;
    struct kl_story_event *ev;
    int n_ev, cap_ev;
    char **names; /* distinct kernel names */
    int n_names, cap_names;
    struct {
        uint32_t key;
        uint64_t start;
    } * api; /* correlation -> API start, open addressing */
    size_t api_cap, api_used;
    struct kl_story_profile prof[KL_PHASE_COUNT * KL_OP_COUNT];
    int n_prof;
    uint64_t dropped; /* records CUPTI dropped (buffers full) */
};

void kl_story_timeline_init(struct kl_story_timeline *t);
void kl_story_timeline_release(struct kl_story_timeline *t);
/* Starts CUPTI (0), or leaves the timeline off and returns -1 with t->why. */
int kl_story_timeline_start(struct kl_story_timeline *t);
/* Stops CUPTI (every record delivered) and joins kernels to ops (kl_story_timeline_join). */
void kl_story_timeline_stop(struct kl_story_timeline *t);
/* Where CUPTI's records go (the tests feed made-up ones through the same functions). */
struct kl_activity_sink kl_story_timeline_sink(struct kl_story_timeline *t);
/* Gives each kernel its op (the op whose host interval holds its launching API call) and each copy
 * its segment. */
void kl_story_timeline_join(struct kl_story_timeline *t);
uint64_t kl_story_now(const struct kl_story_timeline *t);

/* A new segment; ops from now on belong to it. Returns its index. */
int kl_story_timeline_segment(struct kl_story_timeline *t, enum kl_story_phase phase, int step, int requests,
                              int64_t q_tokens, const int64_t *kv_len, bool detail);
void kl_story_timeline_end_segment(struct kl_story_timeline *t);
void kl_story_timeline_event(struct kl_story_timeline *t, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The model's hook (model.h): stamps ops, keeps the first of each (phase, op) for the profiler. */
void kl_story_timeline_hook(void *ctx, const struct kl_story_op *op, int begin);
/* Around a cudaGraphLaunch: one op that all its kernels belong to. */
void kl_story_timeline_graph(struct kl_story_timeline *t, int begin);

/* The Range Profiler over each kept op, replayed alone on the model's stream. */
void kl_story_timeline_profile(struct kl_story_timeline *t, struct kl_story_model *m, FILE *progress);

/* Adds ops, kinds, op_kind, kernels, events, phases and profiles to the results document. */
void kl_story_timeline_json(const struct kl_story_timeline *t, struct cJSON *doc);

/* Sum of the durations of an op's kernels, us. */
double kl_story_op_us(const struct kl_story_timeline *t, int op);

#ifdef __cplusplus
}
#endif
#endif
