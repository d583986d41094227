/* What the allreduce module shares between its parts: the problem, the tolerance, the GPU
 * probe, the communicator set-up and the jobs its rank processes run (C only: the payloads hold
 * C11 atomics through lab/core/ranks.h).
 *
 * A run of a variant is a batch: the parent (kernlab verify/check/bench, a test) writes jobs
 * into the payload of a rank group (lab/core/ranks.h), starts `world` ranks of this binary
 * running the program "allreduce_batch", and reads back what every rank produced. One group
 * runs many jobs, so CUDA and NCCL are set up once per batch, not once per problem. */
#ifndef KL_ALLREDUCE_MODULE_H
#define KL_ALLREDUCE_MODULE_H

#include <stdbool.h>
#include <stdio.h>

#include "kernels/allreduce/allreduce.h"
#include "lab/core/ranks.h"
#include "lab/core/registry.h"
#include "lab/core/tensor.h"

/* ---- problems ---- */

struct kl_ar_problem {
    int world;
    int64_t n;
    enum kl_dtype dtype;
    bool in_place;      /* out = x: the variant writes over its own input */
    int misaligned;     /* x and out start one element past a 16-byte boundary: 1 on every rank,
                         * 2 on the last rank only (ranks must agree on the work split anyway) */
    struct kl_tensor x; /* host [world, n] in dtype: rank r's contribution is row r */
    /* The fused all-reduce + residual add + RMSNorm (golden "op": "add_rmsnorm"): n = num_tokens
     * * hidden, outputs out and residual_out. Only fused variants run it (lab/allreduce/fused.c). */
    bool add_rmsnorm;
    int64_t num_tokens, hidden;
    double eps;
    struct kl_tensor residual; /* host [num_tokens, hidden] in dtype */
    struct kl_tensor weight;   /* host [hidden] in dtype */
};

/* Why a misaligned job skips a variant on symmetric windows: NCCL's symmetric kernels take x and
 * out at the same 16-byte-aligned offset of every rank's window (one element off, they return
 * wrong sums). */
#define KL_AR_WINDOW_ALIGNED "NCCL's symmetric kernels need x and out 16-byte aligned at the same offset on every rank"
/* Why a variant skips a case of the other kind: a plain variant a fused case, a fused one a plain case. */
#define KL_AR_NOT_FUSED "a plain all-reduce: fused add + RMSNorm cases are the fused variants'"
#define KL_AR_ONLY_FUSED "a fused all-reduce + add + RMSNorm: plain all-reduce cases are the plain variants'"

/* The float64 reference of problem p into out (out, and residual_out when p->add_rmsnorm). */
void kl_ar_reference(const struct kl_ar_problem *p, struct kl_outputs *out);
/* A fused case's outputs (got: out, residual_out) against want, under compare.c's fused bounds
 * (want_is_golden: want is a golden's <f4 file, whose own rounding is allowed). */
void kl_ar_fused_compare(const struct kl_ar_problem *p, const struct kl_outputs *got, const struct kl_outputs *want,
                         bool want_is_golden, struct kl_cmp *out, struct kl_cmp *residual_out);

struct kl_ar_problem *kl_ar_problem_new(int world, int64_t n, enum kl_dtype dtype);
void kl_ar_problem_free(struct kl_ar_problem *p);
/* The catalogue entries of one world (kernlab check, the tests): NULL past the end. */
struct kl_ar_problem *kl_ar_catalogue(int world, int i, uint64_t seed, char *label, size_t len);
extern const int kl_ar_catalogue_worlds[4]; /* 2, 3, 4, 8 */

/* ---- the tolerance (see module.c for the derivation) ---- */

/* True when every element of x [world, n] is an integer and every |partial sum| stays within
 * the dtype's exact integers (2^8 bf16, 2^11 fp16, 2^24 fp32): then any correct summation is
 * exact, and the check is bit for bit. */
bool kl_ar_exact_inputs(const double *x, int world, int64_t n, enum kl_dtype t);
/* got [n] against the sums of x [world, n] (float64, rank order); want: the expected values
 * (NULL: that float64 sum). Exact: bits (signed zeros included); else the element bound and the
 * bias check (out->bias against out->bias_limit; the rationale derives both). */
void kl_ar_compare(const double *got, const double *want, const double *x, int world, int64_t n, enum kl_dtype t,
                   bool exact, struct kl_cmp *out);
/* The rationale of the bound (lab/core/compare.c: kl_allreduce_bound, kl_allreduce_tolerance_text). */
const char *kl_ar_tolerance_rationale(void);

/* ---- running variants (module.c) ---- */

/* Why v cannot run at `world` ranks here ("needs 2 GPUs, this machine has 1"), or NULL. */
const char *kl_ar_skip_reason(const struct kl_variant *v, int world, char *buf, size_t len);
/* Problems of one world through v in one rank group: a verdict each. want[k]: the expected
 * output of problem k (a golden's), or want NULL: the float64 sums. Ranks that disagree fail. */
void kl_ar_run_problems(const struct kl_variant *v, struct kl_ar_problem *const *probs, const double *const *want,
                        int count, struct kl_verdict *vd);
/* ---- the fused all-reduce + add + RMSNorm (lab/allreduce/fused.c) ---- */

/* Whether v is a fused add + RMSNorm variant (KL_AR_FUSED_OPS). */
bool kl_ar_is_fused(const struct kl_variant *v);
/* A fused problem with its tensors allocated and zero: x [world, tokens, hidden], residual
 * [tokens, hidden], weight [hidden]; eps 1e-6. The caller fills them. */
struct kl_ar_problem *kl_ar_fused_problem_new(int world, int64_t tokens, int64_t hidden, enum kl_dtype dtype);
/* The fused catalogue of one world: NULL past the end. */
struct kl_ar_problem *kl_ar_fused_catalogue(int world, int i, uint64_t seed, char *label, size_t len);
/* Fused problems of one world through the fused variant v in one rank group: a verdict each (out
 * and residual_out under the fused bounds, against want[k]: a golden's outputs, or want NULL: the
 * float64 reference). Ranks that disagree on either output fail. */
void kl_ar_run_fused_problems(const struct kl_variant *v, struct kl_ar_problem *const *probs,
                              const struct kl_outputs *const *want, int count, struct kl_verdict *vd);
/* The fused catalogue of every world through v; a line each to log; returns the failures. */
int kl_ar_fused_check(const struct kl_variant *v, uint64_t seed, FILE *log);
/* The verdict line of a comparison (module.c; "out" names the output). */
void kl_ar_verdict_of(const struct kl_cmp *c, bool exact, const char *output, struct kl_verdict *vd);

/* Every case under golden/allreduce through v, one rank group per world; a line per case to log.
 * Returns the failures (-1: no cases); *skipped counts the cases this machine cannot run. */
int kl_ar_goldens(const struct kl_variant *v, FILE *log, int *skipped);

/* ---- GPUs ---- */

struct kl_ar_device {
    char name[96], pci[32];
    int cc, sms, nvlinks; /* nvlinks: active NVLinks (NVML), -1 unknown */
};

struct kl_ar_topology {
    int count;         /* CUDA devices this process sees (CUDA_VISIBLE_DEVICES honoured) */
    char why[256];     /* when count is 0 */
    struct kl_ar_device dev[KL_AR_MAX_RANKS];
    /* [i][j] for i != j: cudaDeviceCanAccessPeer, cudaDevP2PAttrPerformanceRank, native atomics */
    int p2p[KL_AR_MAX_RANKS][KL_AR_MAX_RANKS], perf_rank[KL_AR_MAX_RANKS][KL_AR_MAX_RANKS];
    int atomics[KL_AR_MAX_RANKS][KL_AR_MAX_RANKS];
    char smi_topo[3072]; /* `nvidia-smi topo -m`, when it runs */
};

/* GPUs this machine has, learned in a child process (the parent never initialises CUDA for it);
 * cached. 0 with the reason in why. */
int kl_ar_gpu_count(char *why, size_t len);
/* The same probe's whole answer (count, names, compute capabilities, P2P), cached. */
const struct kl_ar_topology *kl_ar_machine(void);
/* The whole topology (a child process again); 0 or -1 with err. */
int kl_ar_topology_probe(struct kl_ar_topology *t, struct kl_err *err);
struct cJSON *kl_ar_topology_json(const struct kl_ar_topology *t);

/* ---- the communicator, in a rank ---- */

struct kl_ar_exchange {
    unsigned char nccl_id[128];                 /* ncclUniqueId of rank 0 */
    cudaIpcMemHandle_t staging[KL_AR_MAX_RANKS], signal[KL_AR_MAX_RANKS], lamport[KL_AR_MAX_RANKS];
    int sms[KL_AR_MAX_RANKS];
};

/* Shared-device mode (environment KL_AR_SHARED_DEVICE=1): every rank runs on GPU 0, as its own
 * process, so one GPU exercises the protocols of the custom variants (flags, sentinels, buffer
 * rotation) at worlds up to KL_AR_SHARED_WORLDS. The ranks' kernels take turns on the GPU (time
 * slices between processes), so a wait for a peer ends when the peer's turn comes: correct, and
 * slow. NCCL refuses two ranks on one GPU: its variants skip. Never a measurement: bench refuses. */
#define KL_AR_SHARED_WORLDS 4
bool kl_ar_shared_device(void);

/* Sets up c for rank r (device r, or 0 in shared-device mode): the registered buffers and signal areas of every rank
 * (capacity bytes per staging region) when needs has KL_AR_NEEDS_PEERS, NCCL when it has
 * KL_AR_NEEDS_NCCL; every rank's signals are zero before this returns on any rank. */
int kl_ar_comm_init(struct kl_rank *r, struct kl_ar_exchange *ex, unsigned needs, size_t capacity, double spin_timeout_s,
                    struct kl_allreduce_comm *c);
/* A buffer for a variant's x or out: cudaMalloc, or, when needs has KL_AR_NEEDS_NCCL_WINDOW,
 * ncclMemAlloc registered as a symmetric window. The registration is collective: every rank
 * allocates the same buffers in the same order, outside any graph capture. */
struct kl_ar_buffer {
    void *ptr;
    ncclWindow_t win; /* NULL for cudaMalloc memory */
    bool nccl_mem;
};
int kl_ar_buffer_alloc(struct kl_rank *r, const struct kl_allreduce_comm *c, unsigned needs, size_t bytes,
                       struct kl_ar_buffer *b);
/* Deregisters (a collective too) and frees b. */
void kl_ar_buffer_free(const struct kl_allreduce_comm *c, struct kl_ar_buffer *b);
/* Waits for every rank, then releases c (peers' mappings first). */
void kl_ar_comm_destroy(struct kl_rank *r, struct kl_allreduce_comm *c);
/* Fails the rank with the CUDA error, the barrier diagnosis when a wait timed out, and what. */
int kl_ar_cuda_fail(struct kl_rank *r, const struct kl_allreduce_comm *c, int cuda_rc, const char *what);
const struct kl_allreduce_ops *kl_ar_ops(const struct kl_variant *v);

/* ---- batches ---- */

enum kl_ar_scenario {
    KL_AR_ONCE,    /* one call on inputs from the parent; every rank's output back */
    KL_AR_REPEAT,  /* `calls` calls back to back, fresh device-made inputs each call */
    KL_AR_GRAPH,   /* calls captured in a CUDA graph (per_graph a graph), replayed, with eager calls between */
    KL_AR_STREAMS, /* a second stream on the communicator is refused; the bound one then works */
    KL_AR_PDL,     /* each call followed by a kernel launched with programmatic stream serialization */
};

#define KL_AR_MAX_JOBS 64
#define KL_AR_MAX_CALLS 2048

struct kl_ar_job {
    int scenario; /* enum kl_ar_scenario */
    int dtype;    /* enum kl_dtype */
    int64_t n;
    int in_place, misaligned; /* misaligned: as in struct kl_ar_problem */
    int calls, per_graph;
    int late;          /* REPEAT, GRAPH, PDL: the last rank sleeps 5-40 us on the device before each call */
    uint64_t seed;     /* inputs of call c: kl_ar_gen(seed, c, rank, i) */
    uint64_t x_off;    /* ONCE: payload offset of x [world][n] (dtype bytes) */
    uint64_t out_off;  /* ONCE: payload offset of out [world][n]; REPEAT, GRAPH, PDL: of [calls][world] output hashes */
    int skipped;       /* set by kl_ar_run_add: the variant cannot take this job (no rank runs it) */
    /* The fused all-reduce + add + RMSNorm when hidden > 0 (n = tokens * hidden, in_place: out = x and
     * residual_out = residual). ONCE: residual [n] and weight [hidden] follow x in the payload, and
     * residual_out [world][n] follows out; multi-call jobs make residual and weight on the device
     * (kl_ar_gen of ranks KL_AR_GEN_RESIDUAL, KL_AR_GEN_WEIGHT, the same on every rank) and hash out and
     * residual_out together. */
    int64_t hidden;
    double eps;
    uint64_t res_off, w_off, ro_off;
    /* filled by the ranks (REPEAT, GRAPH, PDL, STREAMS check themselves) */
    int done[KL_AR_MAX_RANKS];
    int64_t n_bad[KL_AR_MAX_RANKS];
    char note[KL_AR_MAX_RANKS][200];
};

struct kl_ar_batch {
    char variant[64];
    int world;
    double spin_timeout_s;
    size_t capacity; /* bytes per staging region: the largest job */
    int n_jobs;
    struct kl_ar_job job[KL_AR_MAX_JOBS];
    struct kl_ar_exchange ex;
    size_t data_bytes; /* the data area (x, out, hashes) after this struct */
};

/* A batch under construction in the parent. */
struct kl_ar_run {
    struct kl_ranks g;
    struct kl_ar_batch *b;
    unsigned char *data;
    size_t used;
};

/* Room for jobs whose data need data_bytes; variant v at world ranks. */
int kl_ar_run_begin(struct kl_ar_run *run, const struct kl_variant *v, int world, size_t data_bytes, struct kl_err *err);
/* Adds a job; ONCE copies p's x into the payload. Returns the job index, or -1. */
int kl_ar_run_add(struct kl_ar_run *run, const struct kl_ar_job *job, const struct kl_ar_problem *p);
/* Starts the ranks and waits (timeout per step). */
int kl_ar_run_go(struct kl_ar_run *run, double timeout_s, struct kl_err *err);
/* Rank r's output of ONCE job j, as doubles (n of them); residual_out: a fused job's (NULL: not wanted). */
void kl_ar_run_output(const struct kl_ar_run *run, int j, int r, double *out);
void kl_ar_run_fused_output(const struct kl_ar_run *run, int j, int r, double *out, double *residual_out);
/* The rank ids whose kl_ar_gen stream makes a fused multi-call job's residual and weight. */
#define KL_AR_GEN_RESIDUAL 100u
#define KL_AR_GEN_WEIGHT 101u
/* 0 when every rank's output of job j has the same bits; else -1 and a message. */
int kl_ar_run_identical(const struct kl_ar_run *run, int j, char *why, size_t len);
void kl_ar_run_end(struct kl_ar_run *run);
/* Bytes of data a job needs in the payload. */
size_t kl_ar_job_bytes(const struct kl_ar_job *job, int world);

/* ---- the device side of the harness (lab/allreduce/tools.cu) ---- */

/* x[i] = kl_ar_gen(seed, call, rank, i) rounded to dtype; call is read from *call_dev when
 * call_dev is not NULL (graph replays), else the value given. */
int kl_ar_dev_generate(void *x, enum kl_dtype t, int64_t n, uint64_t seed, uint32_t call, const uint32_t *call_dev,
                       uint32_t rank, cudaStream_t s);
/* Fills `words` 32-bit words at p with v (the Lamport sets' sentinel). */
int kl_ar_dev_fill32(void *p, uint32_t v, size_t words, cudaStream_t s);
/* Sleeps 5-40 us on the device (the length from the call number, from *call_dev if set). */
int kl_ar_dev_delay(uint32_t call, const uint32_t *call_dev, cudaStream_t s);
/* history[call] = out (n elements), then (*call_dev)++ when call_dev is set. */
int kl_ar_dev_record(const void *out, void *history, enum kl_dtype t, int64_t n, uint32_t call, uint32_t *call_dev,
                     cudaStream_t s);
/* dst = src (n elements of dtype t) in a kernel launched with programmatic stream serialization
 * (it may start before the previous kernel ends) that waits on griddepcontrol before reading. */
int kl_ar_dev_pdl_copy(const void *src, void *dst, enum kl_dtype t, int64_t n, cudaStream_t s);

/* FNV-1a over bytes. */
uint64_t kl_ar_hash(const void *p, size_t bytes);

/* The most rows of names one `kernlab bench allreduce` times: every variant and the fused workloads'
 * composite. A test holds the registry to it, and the bench refuses rather than drop a variant; it
 * leaves room for about ten variants of a learner's own beside the lab's. */
#define KL_AR_BENCH_MAX_VARIANTS 32

int kl_ar_bench(const struct kl_bench_args *args);

/* The module's guide, written whole (lab/allreduce/guide.c). */
extern const struct kl_guide_hooks kl_allreduce_guide;

#endif
