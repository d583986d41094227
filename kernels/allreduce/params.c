/* The argument checks every allreduce launcher starts with, and the barrier-timeout report. */
#include <stdio.h>

#include "allreduce.h"

cudaError_t kl_allreduce_check_params(const struct kl_allreduce_params *p, cudaStream_t stream, unsigned needs,
                                      const char *variant)
{
    const struct kl_allreduce_comm *c = p->comm;
    const size_t elem = kl_dtype_size(p->dtype);
    const char *bad = NULL;
    if (!c) bad = "comm must be set";
    else if (c->world < 1 || c->world > KL_AR_MAX_RANKS) bad = "comm->world must be 1..8";
    else if (c->rank < 0 || c->rank >= c->world) bad = "comm->rank must be in 0..world-1";
    else if (p->n < 0) bad = "n < 0";
    else if (!(p->dtype == KL_F32 || p->dtype == KL_F16 || p->dtype == KL_BF16)) bad = "dtype must be fp32, fp16 or bf16";
    else if (p->n > 0 && (!p->x || !p->out)) bad = "x and out must be set";
    else if (stream != c->stream) bad = "stream is not the communicator's stream (one communicator serves one stream)";
    else if ((needs & KL_AR_NEEDS_NCCL) && !c->nccl) bad = "comm->nccl is not initialised";
    else if ((needs & KL_AR_NEEDS_PEERS) && (c->blocks < 1 || c->blocks > KL_AR_MAX_BLOCKS)) bad = "comm->blocks must be 1..160";
    else if ((needs & KL_AR_NEEDS_PEERS) && (size_t)p->n * elem > c->capacity) bad = "n elements do not fit comm->capacity";
    for (int s = 0; !bad && (needs & KL_AR_NEEDS_PEERS) && s < c->world; s++)
        if (!c->staging[s] || !c->signal[s]) bad = "comm->staging and comm->signal must be set for every rank";
        else if ((needs & KL_AR_NEEDS_LAMPORT) && !c->lamport[s]) bad = "comm->lamport must be set for every rank";
    if (!bad) return cudaSuccess;
    fprintf(stderr, "allreduce %s: %s (n=%lld, rank %d of %d)\n", variant, bad, (long long)p->n, c ? c->rank : -1,
            c ? c->world : 0);
    return cudaErrorInvalidValue;
}

cudaError_t kl_allreduce_check_add_rmsnorm(const struct kl_allreduce_add_rmsnorm_params *p, cudaStream_t stream,
                                           unsigned needs, const char *variant)
{
    const char *bad = NULL;
    if (p->num_tokens < 0) bad = "num_tokens < 0";
    else if (p->hidden < 1) bad = "hidden < 1";
    else if (p->ar.n != p->num_tokens * p->hidden) bad = "ar.n must be num_tokens * hidden";
    else if (p->num_tokens > 0 && (!p->residual || !p->weight || !p->residual_out))
        bad = "residual, weight and residual_out must be set";
    else if (!(p->eps >= 0)) bad = "eps must be >= 0";
    if (bad) {
        fprintf(stderr, "allreduce %s: %s (num_tokens=%lld hidden=%lld)\n", variant, bad, (long long)p->num_tokens,
                (long long)p->hidden);
        return cudaErrorInvalidValue;
    }
    return kl_allreduce_check_params(&p->ar, stream, needs, variant);
}

const char *kl_allreduce_diag(const struct kl_allreduce_comm *c, char *buf, size_t len)
{
    /* comm->diag is mapped pinned host memory: under unified addressing its device pointer is
     * also its host pointer, and it stays readable after the context has died. */
    const volatile struct kl_ar_diag *d = c ? c->diag : NULL;
    static const char *kphase[] = {"start", "middle", "end", "data"};
    if (!d || !d->tripped) return buf[0] = 0, buf;
    if (d->phase == KL_AR_DATA)
        snprintf(buf, len, "rank %d: the data wait of call %u timed out in block %d: rank %d's data never came", c->rank,
                 d->epoch, d->block, d->peer);
    else
        snprintf(buf, len, "rank %d: the %s barrier of call %u timed out in block %d waiting for rank %d (its flag said %u)",
                 c->rank, d->phase >= 0 && d->phase < KL_AR_PHASES ? kphase[d->phase] : "?", d->epoch, d->block, d->peer,
                 d->seen);
    return buf;
}

ncclDataType_t kl_allreduce_nccl_type(enum kl_dtype t)
{
    return t == KL_F16 ? ncclFloat16 : t == KL_BF16 ? ncclBfloat16 : ncclFloat32;
}

cudaError_t kl_allreduce_nccl_launch(const struct kl_allreduce_params *p, cudaStream_t stream, unsigned needs,
                                     const char *variant)
{
    cudaError_t rc = kl_allreduce_check_params(p, stream, needs, variant);
    if (rc != cudaSuccess || p->n == 0) return rc;
    ncclResult_t r = ncclAllReduce(p->x, p->out, (size_t)p->n, kl_allreduce_nccl_type(p->dtype), ncclSum,
                                   p->comm->nccl, stream);
    if (r != ncclSuccess) {
        fprintf(stderr, "allreduce %s: ncclAllReduce: %s\n", variant, ncclGetErrorString(r));
        return cudaErrorUnknown;
    }
    return cudaGetLastError();
}
