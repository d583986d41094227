/* All-reduce across GPUs (allreduce): the C ABI every variant implements.
 *
 *   out[i] = x_0[i] + x_1[i] + ... + x_{world-1}[i]      on every rank, for i < n
 * Rank r is one process driving GPU r (lab/core/ranks.h); x is its own contribution. Every rank
 * must end with the same bits: the custom variants sum in rank order 0, 1, ..., world-1 in
 * float32 and round once to the dtype, whichever rank computes an element. NCCL (v0) rounds its
 * partial sums to the dtype at each ring step instead: also identical on every rank, not
 * necessarily identical to ours.
 *
 * What the lab gives a variant (struct kl_allreduce_comm, one per rank, built by
 * lab/allreduce/comm.c before the first call):
 *   - a registered buffer per rank (cudaMalloc, shared with every peer by cudaIpcMemHandle and
 *     opened with peer access over NVLink): staging[s] is rank s's, readable and writable by all;
 *   - a signal area per rank (struct kl_ar_signal), also shared: the barrier flags;
 *   - the NCCL communicator, when the variant asks for it (KL_AR_NEEDS_NCCL);
 *   - the stream every call of this communicator must use.
 * NVLink multicast is never used: no cuMulticastCreate, no multimem instructions, and every rank
 * runs with NCCL_NVLS_ENABLE=0 (lab/CONTRACTS.md section 10). Peer loads and stores only.
 *
 * Registration: a variant's KL_VARIANT launch pointer is a kl_allreduce_ops_fn returning the
 * variant's static table (its launcher and what it needs from the communicator). */
#ifndef KL_KERNELS_ALLREDUCE_H
#define KL_KERNELS_ALLREDUCE_H

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KL_AR_MAX_RANKS 8
/* Most blocks of any custom kernel: one flag row per block and barrier. A kernel's blocks wait
 * for each other across GPUs, so they must all be resident at once: the lab also caps the grid
 * at the smallest SM count of the ranks (one block per SM always fits). */
#define KL_AR_MAX_BLOCKS 160
/* Barrier slots per call: a kernel may pass up to this many barriers in one call. */
#define KL_AR_PHASES 4
#define KL_AR_LAMPORT_SETS 3 /* rotating buffer sets of the Lamport variants (see below) */
/* Where a wait can time out: a barrier (start, middle, end), or a Lamport variant's wait for a
 * peer's data (its flag value is reported as 0). */
enum kl_ar_phase { KL_AR_START = 0, KL_AR_MID = 1, KL_AR_END = 2, KL_AR_DATA = 3 };

/* A rank's signal area, in its own device memory, mapped into every peer.
 * arrive[p][b][s] holds the last call (epoch) in which block b of rank s passed barrier p; rank
 * s writes it into the area of every rank (including its own), the owner reads it. Each word
 * has exactly one writer and is never reset: values only grow, so a flag left from an earlier
 * call can never be mistaken for this call's (two bugs of the engines' first custom all-reduces
 * were byte flags sharing one 8-byte word and a reset racing with the next call's set).
 * epoch and done are the owner's alone: how many calls its kernels completed on this
 * communicator, and how many blocks of the current call have finished. */
struct kl_ar_signal {
    uint32_t arrive[KL_AR_PHASES][KL_AR_MAX_BLOCKS][KL_AR_MAX_RANKS];
    uint32_t epoch;
    uint32_t done;
    /* Lamport variants: bytes each peer wrote into this rank's slots of set k (the call that
     * used set k records it; the call two later clears that many). The owner's alone. */
    uint64_t lamport_dirty[KL_AR_LAMPORT_SETS];
};

/* Where a barrier wait that timed out writes what it waited for (mapped pinned host memory),
 * just before the kernel traps: the host reads it after the failed launch. */
struct kl_ar_diag {
    uint32_t tripped; /* nonzero: the fields below describe the wait that timed out */
    int32_t phase;    /* enum kl_ar_phase */
    int32_t block;
    int32_t peer;     /* the rank whose flag never came */
    uint32_t epoch;   /* the call waited for */
    uint32_t seen;    /* the flag's last value */
};

/* Lamport buffers (KL_AR_NEEDS_LAMPORT): rank s's lamport[s] holds KL_AR_LAMPORT_SETS sets of
 * `world` slots of `capacity` bytes; peer p writes its x for call e into slot p of set e % 3 of
 * every rank. A slot reads as empty while it holds the sentinel: every 16-bit half of it equal to
 * KL_AR_LAMPORT_EMPTY16 (a NaN in fp16 and in bf16; two of them, 0x7fff7fff, a NaN in fp32), so
 * one cleared state serves every dtype. A writer sends an input element that equals the sentinel
 * as another NaN of its type (see kernels/allreduce/lamport.cuh). */
#define KL_AR_LAMPORT_EMPTY16 0x7fffu
#define KL_AR_LAMPORT_EMPTY32 0x7fff7fffu

/* The staging buffer of each rank holds KL_AR_REGIONS regions of `capacity` bytes:
 *   region 0, 1: this rank's input, copied in for peers to read (half = epoch & 1)
 *   region 2, 3: reduced chunks of the two-shot variants (half = epoch & 1) */
#define KL_AR_REGIONS 4

struct kl_allreduce_comm {
    int rank, world;
    int device;                    /* the CUDA device of this rank (= rank) */
    int blocks;                    /* most blocks a custom kernel may use: min SMs of the ranks, <= KL_AR_MAX_BLOCKS */
    size_t capacity;               /* bytes of one staging region (a multiple of 256) */
    void *staging[KL_AR_MAX_RANKS];              /* [world]: rank s's buffer, [KL_AR_REGIONS][capacity] bytes */
    struct kl_ar_signal *signal[KL_AR_MAX_RANKS]; /* [world]: rank s's signal area */
    void *lamport[KL_AR_MAX_RANKS];               /* [world]: rank s's Lamport sets (KL_AR_NEEDS_LAMPORT), else NULL */
    ncclComm_t nccl;               /* NULL unless a variant of this run needs NCCL */
    cudaStream_t stream;           /* every call on this communicator uses this stream (one epoch sequence) */
    struct kl_ar_diag *diag;       /* device view of mapped host memory (NULL without peers) */
    uint64_t spin_timeout_ns;      /* a barrier wait longer than this traps (a peer died or never came) */
};

struct kl_allreduce_params {
    const void *x;               /* [n] this rank's contribution; any device memory, 16-byte aligned for the fast paths */
    void *out;                   /* [n] the sum over ranks; may be x itself (in place) */
    int64_t n;                   /* elements; 0 is a no-op on every rank */
    enum kl_dtype dtype;         /* KL_F32, KL_F16 or KL_BF16 for x and out */
    struct kl_allreduce_comm *comm;
    unsigned long long *trace;   /* NULL, or [KL_AR_TRACE_STAMPS] device words, zeroed: block 0 writes %globaltimer at
                                  * each phase, every block raises KL_AR_T_LAST_EXIT to its exit */
};

/* The phases a custom kernel stamps into params.trace (nanoseconds of %globaltimer), for the
 * execution story; a stamp a variant does not pass stays 0. */
enum kl_ar_stamp {
    KL_AR_T_ENTRY,    /* block 0 started */
    KL_AR_T_COPIED,   /* its share of x is in the staging buffer */
    KL_AR_T_STARTED,  /* start barrier passed: every rank's staging is ready */
    KL_AR_T_REDUCED,  /* peer reads and the sum done (two-shot: this rank's chunk) */
    KL_AR_T_MID,      /* two-shot: middle barrier passed */
    KL_AR_T_GATHERED, /* two-shot: the other chunks copied in */
    KL_AR_T_EXIT,     /* end barrier passed (or none), epoch published */
    KL_AR_T_RELEASED, /* a programmatic dependent's griddepcontrol.wait returned: the previous kernel ended */
    KL_AR_T_LAST_EXIT, /* the last block's exit: every block's thread 0 raises it to its own exit time (atomicMax) */
    KL_AR_TRACE_STAMPS
};

typedef cudaError_t (*kl_allreduce_launch_fn)(const struct kl_allreduce_params *p, cudaStream_t stream);

/* The fused all-reduce + residual add + RMSNorm, the step a tensor-parallel decoder runs before each
 * norm (twice a layer):
 *   r[t, i] = x_0[t, i] + ... + x_{world-1}[t, i] + residual[t, i]      residual_out = r
 *   out[t, i] = r[t, i] / sqrt(mean_j r[t, j]^2 + eps) * weight[i]
 * on every rank, the same bits everywhere (residual and weight are the same on every rank, as a
 * replicated residual stream and norm weight are). A fused variant implements this instead of
 * the plain call: its ops table has add_rmsnorm set and launch NULL (KL_AR_FUSED_OPS). */
struct kl_allreduce_add_rmsnorm_params {
    struct kl_allreduce_params ar; /* x: this rank's partial [num_tokens, hidden]; out: the normed rows
                                    * [num_tokens, hidden], may be x; n = num_tokens * hidden; dtype,
                                    * comm and trace as for the plain call */
    const void *residual;          /* [num_tokens, hidden] */
    const void *weight;            /* [hidden] */
    void *residual_out;            /* [num_tokens, hidden]: the sum + residual; may be residual (in place) */
    int64_t num_tokens;
    int64_t hidden;
    float eps;
};

typedef cudaError_t (*kl_allreduce_add_rmsnorm_fn)(const struct kl_allreduce_add_rmsnorm_params *p,
                                                    cudaStream_t stream);

/* PEERS: staging buffers and signal areas; NCCL: the communicator; LAMPORT: the Lamport sets
 * (with PEERS, whose epoch and signal area they use); NCCL_WINDOW (with NCCL): x and out must lie
 * in memory from ncclMemAlloc registered on every rank as a symmetric window
 * (ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC, NCCL >= 2.27), which lets NCCL run its
 * symmetric-memory kernels; the lab's harness allocates the buffers of such a variant that way. */
enum { KL_AR_NEEDS_PEERS = 1u, KL_AR_NEEDS_NCCL = 2u, KL_AR_NEEDS_LAMPORT = 4u, KL_AR_NEEDS_NCCL_WINDOW = 8u };

struct kl_allreduce_ops {
    kl_allreduce_launch_fn launch;           /* the plain all-reduce; NULL in a fused variant */
    unsigned needs;                          /* KL_AR_NEEDS_*: what the lab must set up in the communicator */
    kl_allreduce_add_rmsnorm_fn add_rmsnorm; /* the fused all-reduce + add + RMSNorm; NULL in a plain variant */
};
typedef const struct kl_allreduce_ops *(*kl_allreduce_ops_fn)(void);
/* Defines `static const struct kl_allreduce_ops *name(void)`, the function KL_VARIANT registers:
 * KL_AR_OPS for a plain all-reduce, KL_AR_FUSED_OPS for a fused add + RMSNorm variant. The lab runs
 * a variant only on cases of its own kind (the other kind's say SKIP). */
#define KL_AR_OPS(name, launcher, needs_)                                                     \
    static const struct kl_allreduce_ops *name(void)                                          \
    {                                                                                         \
        static const struct kl_allreduce_ops o = {launcher, needs_, NULL};                    \
        return &o;                                                                            \
    }
#define KL_AR_FUSED_OPS(name, launcher, needs_)                                               \
    static const struct kl_allreduce_ops *name(void)                                          \
    {                                                                                         \
        static const struct kl_allreduce_ops o = {NULL, needs_, launcher};                    \
        return &o;                                                                            \
    }

/* Argument checks every launcher starts with: cudaErrorInvalidValue with the argument at fault
 * on stderr, or cudaSuccess. Needs: what the variant uses (KL_AR_NEEDS_*); with peers, n elements
 * must fit one staging region. A stream other than comm->stream is refused: two streams on one
 * communicator would race on its epoch and flags. */
cudaError_t kl_allreduce_check_params(const struct kl_allreduce_params *p, cudaStream_t stream, unsigned needs,
                                      const char *variant);
/* The same for the fused call: p->ar as above (its n must be num_tokens * hidden), then hidden >= 1,
 * residual, weight and residual_out set when there are tokens, eps >= 0. */
cudaError_t kl_allreduce_check_add_rmsnorm(const struct kl_allreduce_add_rmsnorm_params *p, cudaStream_t stream,
                                           unsigned needs, const char *variant);
/* A kernel that trapped in a barrier wait leaves its diagnosis in comm->diag: a sentence naming
 * the phase, block and peer into buf, or "" when no wait timed out. */
const char *kl_allreduce_diag(const struct kl_allreduce_comm *c, char *buf, size_t len);
/* NCCL's data type for a kl_dtype (fp32, fp16, bf16). */
ncclDataType_t kl_allreduce_nccl_type(enum kl_dtype t);
/* The NCCL variants' whole launcher: the checks, then ncclAllReduce on comm->nccl. */
cudaError_t kl_allreduce_nccl_launch(const struct kl_allreduce_params *p, cudaStream_t stream, unsigned needs,
                                     const char *variant);

#ifdef __cplusplus
}
#endif
#endif
