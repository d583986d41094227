/* Ranks: one process per GPU, started by kernlab itself (lab/CONTRACTS.md section 10). No MPI.
 *
 * Why fork + exec, never a bare fork: a process that has initialised CUDA cannot give a forked
 * child a working CUDA (the child's first CUDA call fails), and kernlab's parent has often done
 * so already (`kernlab verify golden` runs other modules' GPU variants first; kl_device_cc calls
 * cudaGetDeviceCount; a Criterion worker may have probed the device). A rank is therefore a fresh
 * copy of the running binary, found through /proc/self/exe and started as
 *     <binary> __kl_rank PROGRAM
 * so its CUDA state is clean whatever the parent did. kernlab's main and the test binaries'
 * main hand that argument to kl_rank_main before anything else (the test binaries run their
 * own mutants this way: they are linked into the tests only). The parent never needs CUDA.
 *
 * The parent and its ranks share one mapping: a memfd (inherited across exec, its number in
 * KL_RANK_FD) holding a header (below) and a payload the caller lays out (the NCCL unique id,
 * cudaIpcMemHandles, inputs, results). Each rank also has a slot: its state, the step it is at
 * (set before every wait), and its failure message.
 *
 * Nothing waits forever:
 *   - kl_rank_barrier (a host barrier between ranks) gives up after the run's timeout, naming the
 *     ranks it was waiting for and the step each of them was at;
 *   - the parent polls the ranks (waitpid WNOHANG): when one exits with an error or a signal, or
 *     stays at one step longer than the timeout (hung: in a kernel, in NCCL, anywhere), it kills
 *     every rank still running and reports the rank and its step;
 *   - each rank dies with its parent (PR_SET_PDEATHSIG).
 * Every rank process starts with NCCL_NVLS_ENABLE=0 in its environment (NVLink multicast stays
 * off on the shared machines; kl_rank_main sets it again before any program runs). */
#ifndef KL_RANKS_H
#define KL_RANKS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "check.h"

#define KL_RANKS_MAX 8
#define KL_RANK_ARG "__kl_rank" /* argv[1] of a rank process */

enum kl_rank_state { KL_RANK_IDLE, KL_RANK_RUNNING, KL_RANK_OK, KL_RANK_FAILED };

/* One rank's public state, written by the rank, read by the parent and the other ranks. */
struct kl_rank_slot {
    _Atomic int state;            /* enum kl_rank_state */
    _Atomic unsigned barrier_gen; /* the host barrier this rank last arrived at */
    _Atomic long long step_ns;    /* CLOCK_MONOTONIC nanoseconds when `step` was last set */
    int pid;
    char step[160];               /* what the rank is doing now ("nccl init", "barrier: ...") */
    char msg[768];                /* why it failed */
};

/* The head of the shared mapping; the caller's payload follows at kl_ranks_payload offset. */
struct kl_ranks_shared {
    unsigned magic;
    int world;
    double timeout_s;           /* a rank may stay this long at one step; waits give up sooner */
    _Atomic unsigned arrived;   /* ranks at the current host barrier */
    _Atomic unsigned generation; /* host barriers completed */
    _Atomic int abort;          /* a rank failed or the parent gave up: stop waiting */
    char program[64];
    size_t payload_bytes;
    struct kl_rank_slot slot[KL_RANKS_MAX];
};

/* ---- the parent ---- */

struct kl_ranks {
    int world, fd;
    size_t map_bytes;
    struct kl_ranks_shared *sh;
    void *payload; /* payload_bytes, zeroed; lay it out before kl_ranks_run */
    pid_t pid[KL_RANKS_MAX];
};

/* The shared mapping for `world` ranks with a zeroed payload of payload_bytes. */
int kl_ranks_create(struct kl_ranks *g, int world, size_t payload_bytes, struct kl_err *err);
/* Starts the ranks (program registered with KL_RANK_PROGRAM in this binary) and waits for all
 * of them. timeout_s: the longest any rank may stay at one step. 0 when every rank returned 0;
 * else -1 with a message naming each failed or hung rank and its step; every rank is gone
 * (exited or killed and reaped) when this returns. May be called again on the same mapping. */
int kl_ranks_run(struct kl_ranks *g, const char *program, double timeout_s, struct kl_err *err);
void kl_ranks_destroy(struct kl_ranks *g);

/* ---- a rank ---- */

struct kl_rank {
    int rank, world;
    struct kl_ranks_shared *sh;
    void *payload;
};

typedef int (*kl_rank_fn)(struct kl_rank *r); /* 0 on success */

struct kl_rank_program {
    const char *name;
    kl_rank_fn fn;
};

/* Registers a rank program in this binary (pointer in the linker section kl_rank_programs, as
 * registry.h does for variants). */
#define KL_RANK_PROGRAM(pname, pfn)                                                           \
    static const struct kl_rank_program kl_rank_program_desc_##pfn = {.name = pname, .fn = pfn}; \
    __attribute__((used, section("kl_rank_programs"))) const struct kl_rank_program          \
        *kl_rank_program_ptr_##pfn = &kl_rank_program_desc_##pfn

/* The entry of a rank process: argv[0] is the program's name (what follows KL_RANK_ARG).
 * Returns the process's exit status. */
int kl_rank_main(int argc, char **argv);
/* True in a process started as a rank (argv[1] == KL_RANK_ARG). */
bool kl_rank_argv(int argc, char **argv);

/* Names the step this rank is at (printf format): shown when it fails or hangs. */
void kl_rank_step(struct kl_rank *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Waits until every rank has called it the same number of times. -1 (message recorded, abort
 * raised) on timeout, naming the ranks that did not arrive and their steps, or when another
 * rank failed meanwhile. */
int kl_rank_barrier(struct kl_rank *r, const char *what);
/* Records why this rank fails, raises abort for the others; returns -1. */
int kl_rank_fail(struct kl_rank *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
