/* The communicator of one rank (kernels/allreduce/allreduce.h): registered buffers and signal
 * areas shared with every peer through cudaIpcMemHandles, NCCL when a variant needs it. The
 * handles and NCCL's unique id travel through the rank group's shared mapping; every step that
 * waits for the other ranks names itself first, so a hang or a failure says where it was. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "lab/allreduce/allreduce_module.h"

const struct kl_allreduce_ops *kl_ar_ops(const struct kl_variant *v) { return ((kl_allreduce_ops_fn)v->launch)(); }

int kl_ar_cuda_fail(struct kl_rank *r, const struct kl_allreduce_comm *c, int cuda_rc, const char *what)
{
    char diag[256];
    kl_allreduce_diag(c, diag, sizeof diag);
    return kl_rank_fail(r, "%s: %s%s%s", what, cudaGetErrorString((cudaError_t)cuda_rc), diag[0] ? "; " : "", diag);
}

#define TRY(expr, what)                                                                                       \
    do {                                                                                                      \
        cudaError_t rc_ = (expr);                                                                             \
        if (rc_ != cudaSuccess) return kl_ar_cuda_fail(r, c, rc_, what);                                      \
    } while (0)

int kl_ar_comm_init(struct kl_rank *r, struct kl_ar_exchange *ex, unsigned needs, size_t capacity, double spin_timeout_s,
                    struct kl_allreduce_comm *c)
{
    memset(c, 0, sizeof *c);
    const bool shared = kl_ar_shared_device();
    c->rank = r->rank, c->world = r->world, c->device = shared ? 0 : r->rank;
    c->capacity = (capacity + 255) & ~(size_t)255;
    if (c->capacity == 0) c->capacity = 256;
    c->spin_timeout_ns = (uint64_t)(spin_timeout_s * 1e9);
    int count = 0;
    kl_rank_step(r, "cudaSetDevice(%d)", c->device);
    TRY(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (count < (shared ? 1 : c->world))
        return kl_rank_fail(r, "world %d needs %d GPUs, this process sees %d", c->world, shared ? 1 : c->world, count);
    if (shared && (needs & KL_AR_NEEDS_NCCL))
        return kl_rank_fail(r, "shared-device mode (KL_AR_SHARED_DEVICE) cannot run NCCL: it takes one rank per GPU");
    TRY(cudaSetDevice(c->device), "cudaSetDevice");
    TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    TRY(cudaDeviceGetAttribute(&ex->sms[c->rank], cudaDevAttrMultiProcessorCount, c->device), "SM count");

    if (needs & KL_AR_NEEDS_PEERS) {
        kl_rank_step(r, "allocate and share the staging buffer (%zu bytes) and signal area", KL_AR_REGIONS * c->capacity);
        void *staging = NULL, *signal = NULL;
        TRY(cudaMalloc(&staging, KL_AR_REGIONS * c->capacity), "cudaMalloc of the staging buffer");
        TRY(cudaMalloc(&signal, sizeof(struct kl_ar_signal)), "cudaMalloc of the signal area");
        c->staging[c->rank] = staging, c->signal[c->rank] = signal;
        /* Zero flags and epoch (the barrier's starting point); zero staging so a variant that reads
         * before its peer wrote sees zeros, deterministically wrong, not last run's data. */
        TRY(cudaMemset(signal, 0, sizeof(struct kl_ar_signal)), "zeroing the signal area");
        TRY(cudaMemset(staging, 0, KL_AR_REGIONS * c->capacity), "zeroing the staging buffer");
        TRY(cudaIpcGetMemHandle(&ex->staging[c->rank], staging), "cudaIpcGetMemHandle (staging)");
        TRY(cudaIpcGetMemHandle(&ex->signal[c->rank], signal), "cudaIpcGetMemHandle (signal)");
        if (needs & KL_AR_NEEDS_LAMPORT) {
            /* Every slot starts empty: the sentinel in every word (kernels/allreduce/allreduce.h). */
            const size_t bytes = (size_t)KL_AR_LAMPORT_SETS * c->world * c->capacity;
            kl_rank_step(r, "allocate, empty and share the Lamport sets (%zu bytes)", bytes);
            void *lamport = NULL;
            TRY(cudaMalloc(&lamport, bytes), "cudaMalloc of the Lamport sets");
            c->lamport[c->rank] = lamport;
            TRY(kl_ar_dev_fill32(lamport, KL_AR_LAMPORT_EMPTY32, bytes / 4, NULL), "emptying the Lamport sets");
            TRY(cudaIpcGetMemHandle(&ex->lamport[c->rank], lamport), "cudaIpcGetMemHandle (Lamport sets)");
        }
        /* The barrier timeout report: pinned, mapped host memory (readable after a trap). */
        void *diag = NULL;
        TRY(cudaHostAlloc(&diag, sizeof(struct kl_ar_diag), cudaHostAllocMapped), "cudaHostAlloc of the diagnosis");
        memset(diag, 0, sizeof(struct kl_ar_diag));
        TRY(cudaHostGetDevicePointer((void **)&c->diag, diag, 0), "cudaHostGetDevicePointer");
    }
    if ((needs & KL_AR_NEEDS_NCCL) && c->rank == 0) {
        kl_rank_step(r, "ncclGetUniqueId");
        ncclUniqueId id;
        ncclResult_t nr = ncclGetUniqueId(&id);
        if (nr != ncclSuccess) return kl_rank_fail(r, "ncclGetUniqueId: %s", ncclGetErrorString(nr));
        memcpy(ex->nccl_id, &id, sizeof id);
    }
    /* Everything a peer needs from us is in the mapping now. */
    if (kl_rank_barrier(r, "exchange the NCCL id and the IPC handles")) return -1;

    c->blocks = KL_AR_MAX_BLOCKS;
    for (int s = 0; s < c->world; s++)
        if (ex->sms[s] < c->blocks) c->blocks = ex->sms[s]; /* the same grid on every rank, all resident */
    if (needs & KL_AR_NEEDS_PEERS) {
        for (int s = 0; s < c->world; s++) {
            if (s == c->rank) continue;
            int ok = 1;
            if (!shared) TRY(cudaDeviceCanAccessPeer(&ok, c->device, s), "cudaDeviceCanAccessPeer");
            if (!ok)
                return kl_rank_fail(r, "GPU %d cannot access GPU %d's memory (no P2P): the custom variants need it",
                                    c->device, s);
            kl_rank_step(r, "cudaIpcOpenMemHandle of rank %d's buffers", s);
            TRY(cudaIpcOpenMemHandle(&c->staging[s], ex->staging[s], cudaIpcMemLazyEnablePeerAccess),
                "cudaIpcOpenMemHandle (a peer's staging)");
            TRY(cudaIpcOpenMemHandle((void **)&c->signal[s], ex->signal[s], cudaIpcMemLazyEnablePeerAccess),
                "cudaIpcOpenMemHandle (a peer's signal area)");
            if (needs & KL_AR_NEEDS_LAMPORT)
                TRY(cudaIpcOpenMemHandle(&c->lamport[s], ex->lamport[s], cudaIpcMemLazyEnablePeerAccess),
                    "cudaIpcOpenMemHandle (a peer's Lamport sets)");
        }
    }
    if (needs & KL_AR_NEEDS_NCCL) {
        /* Connect every channel now rather than at the first collective: that first call may be
         * inside a CUDA-graph capture (the graph tests capture before any eager call). */
        setenv("NCCL_RUNTIME_CONNECT", "0", 0);
        kl_rank_step(r, "ncclCommInitRank (rank %d of %d)", c->rank, c->world);
        ncclUniqueId id;
        memcpy(&id, ex->nccl_id, sizeof id);
        ncclResult_t nr = ncclCommInitRank(&c->nccl, c->world, id, c->rank);
        if (nr != ncclSuccess) return kl_rank_fail(r, "ncclCommInitRank: %s", ncclGetErrorString(nr));
        int version = 0;
        ncclGetVersion(&version);
        if ((needs & KL_AR_NEEDS_NCCL_WINDOW) && version < 22700)
            return kl_rank_fail(r, "symmetric-window registration needs NCCL 2.27 or later; this process loaded %d",
                                version);
    }
    TRY(cudaDeviceSynchronize(), "synchronising after set-up");
    /* No kernel may write a peer's flags before that peer's memset is done. */
    return kl_rank_barrier(r, "every rank's signals are zero");
}

void kl_ar_comm_destroy(struct kl_rank *r, struct kl_allreduce_comm *c)
{
    if (!c->stream) return;
    cudaStreamSynchronize(c->stream);
    /* Nobody may still read our buffers when we free them. */
    kl_rank_barrier(r, "every rank is done before the buffers go");
    if (c->nccl) ncclCommDestroy(c->nccl);
    for (int s = 0; s < c->world; s++) {
        if (s == c->rank) continue;
        if (c->staging[s]) cudaIpcCloseMemHandle(c->staging[s]);
        if (c->signal[s]) cudaIpcCloseMemHandle(c->signal[s]);
        if (c->lamport[s]) cudaIpcCloseMemHandle(c->lamport[s]);
    }
    cudaFree(c->lamport[c->rank]);
    cudaFree(c->staging[c->rank]);
    cudaFree(c->signal[c->rank]);
    if (c->diag) cudaFreeHost(c->diag);
    cudaStreamDestroy(c->stream);
    memset(c, 0, sizeof *c);
}

#define NCCL_TRY(expr, what)                                                                                  \
    do {                                                                                                      \
        ncclResult_t nr_ = (expr);                                                                            \
        if (nr_ != ncclSuccess) return kl_rank_fail(r, "%s: %s", what, ncclGetErrorString(nr_));              \
    } while (0)

int kl_ar_buffer_alloc(struct kl_rank *r, const struct kl_allreduce_comm *c, unsigned needs, size_t bytes,
                       struct kl_ar_buffer *b)
{
    memset(b, 0, sizeof *b);
    if (!(needs & KL_AR_NEEDS_NCCL_WINDOW)) {
        TRY(cudaMalloc(&b->ptr, bytes), "cudaMalloc of a buffer");
        return 0;
    }
    /* Whole pages: a window's size must be a multiple of NCCL's alignment. */
    const size_t size = (bytes + NCCL_WIN_REQUIRED_ALIGNMENT - 1) & ~(size_t)(NCCL_WIN_REQUIRED_ALIGNMENT - 1);
    b->nccl_mem = true;
    NCCL_TRY(ncclMemAlloc(&b->ptr, size), "ncclMemAlloc of a symmetric buffer");
    kl_rank_step(r, "ncclCommWindowRegister of %zu bytes (every rank)", size);
    NCCL_TRY(ncclCommWindowRegister(c->nccl, b->ptr, size, &b->win, NCCL_WIN_COLL_SYMMETRIC),
             "ncclCommWindowRegister (symmetric)");
    return 0;
}

void kl_ar_buffer_free(const struct kl_allreduce_comm *c, struct kl_ar_buffer *b)
{
    if (b->win) ncclCommWindowDeregister(c->nccl, b->win);
    if (b->nccl_mem) ncclMemFree(b->ptr);
    else cudaFree(b->ptr);
    memset(b, 0, sizeof *b);
}
