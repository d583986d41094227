/* The parent's side of a batch (allreduce_module.h): lay out the jobs and their data in the
 * rank group's shared mapping, start `world` ranks of this binary, read back their outputs. No
 * CUDA here: the parent may or may not have initialised it, and does not need to. */
#include <stdlib.h>
#include <string.h>

#include "lab/allreduce/allreduce_module.h"

static size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }
static size_t batch_header(void) { return align64(sizeof(struct kl_ar_batch)); }

size_t kl_ar_job_bytes(const struct kl_ar_job *job, int world)
{
    const size_t row = (size_t)job->n * kl_dtype_size((enum kl_dtype)job->dtype);
    switch (job->scenario) {
    case KL_AR_ONCE: /* x and out; a fused job's residual, weight and residual_out too */
        return (job->hidden ? 3 : 2) * align64(row * (size_t)world) +
               (job->hidden ? align64(row) + align64((size_t)job->hidden * kl_dtype_size((enum kl_dtype)job->dtype)) : 0);
    case KL_AR_STREAMS: return 0;
    default: return align64((size_t)job->calls * (size_t)world * sizeof(uint64_t));
    }
}

int kl_ar_run_begin(struct kl_ar_run *run, const struct kl_variant *v, int world, size_t data_bytes, struct kl_err *err)
{
    memset(run, 0, sizeof *run);
    if (kl_ranks_create(&run->g, world, batch_header() + data_bytes, err)) return -1;
    run->b = run->g.payload;
    run->data = (unsigned char *)run->g.payload + batch_header();
    snprintf(run->b->variant, sizeof run->b->variant, "%s", v->name);
    run->b->world = world;
    /* A barrier wait this long means a peer is gone (the late rank sleeps 40 us at most). Two
     * minutes: a peer whose host is starved on a loaded machine can be seconds late launching, and
     * the ranks' host barrier (0.8 x the run's step timeout) must fire only after this one. */
    run->b->spin_timeout_s = 120.0;
    /* The mutant tests shorten it (KL_AR_SPIN_TIMEOUT_S): a mutant that hangs is flagged sooner. */
    const char *spin = getenv("KL_AR_SPIN_TIMEOUT_S");
    if (spin && atof(spin) > 0) run->b->spin_timeout_s = atof(spin);
    run->b->data_bytes = data_bytes;
    return 0;
}

int kl_ar_run_add(struct kl_ar_run *run, const struct kl_ar_job *job, const struct kl_ar_problem *p)
{
    struct kl_ar_batch *b = run->b;
    const size_t need = kl_ar_job_bytes(job, b->world);
    if (b->n_jobs == KL_AR_MAX_JOBS || run->used + need > b->data_bytes) return -1;
    struct kl_ar_job *j = &b->job[b->n_jobs];
    *j = *job;
    const struct kl_variant *v = kl_variant_find("allreduce", b->variant);
    j->skipped = v && (kl_ar_ops(v)->needs & KL_AR_NEEDS_NCCL_WINDOW) && j->misaligned;
    const size_t row = (size_t)j->n * kl_dtype_size((enum kl_dtype)j->dtype);
    if (j->scenario == KL_AR_ONCE) {
        j->x_off = run->used;
        memcpy(run->data + j->x_off, p->x.data, row * (size_t)b->world);
        j->out_off = run->used + align64(row * (size_t)b->world);
        memset(run->data + j->out_off, 0xff, row * (size_t)b->world); /* a rank that writes nothing shows */
        if (j->hidden) {
            const size_t wrow = (size_t)j->hidden * kl_dtype_size((enum kl_dtype)j->dtype);
            j->ro_off = j->out_off + align64(row * (size_t)b->world);
            j->res_off = j->ro_off + align64(row * (size_t)b->world);
            j->w_off = j->res_off + align64(row);
            memset(run->data + j->ro_off, 0xff, row * (size_t)b->world);
            memcpy(run->data + j->res_off, p->residual.data, row);
            memcpy(run->data + j->w_off, p->weight.data, wrow);
        }
    } else {
        j->out_off = run->used;
    }
    run->used += need;
    /* Room in the staging buffer for the largest job, and 16 spare bytes for the misaligned ones. */
    if (row + 16 > b->capacity) b->capacity = row + 16;
    return b->n_jobs++;
}

int kl_ar_run_go(struct kl_ar_run *run, double timeout_s, struct kl_err *err)
{
    return kl_ranks_run(&run->g, "allreduce_batch", timeout_s, err);
}

void kl_ar_run_output(const struct kl_ar_run *run, int j, int r, double *out)
{
    const struct kl_ar_job *job = &run->b->job[j];
    const enum kl_dtype t = (enum kl_dtype)job->dtype;
    const unsigned char *o = run->data + job->out_off + (size_t)r * (size_t)job->n * kl_dtype_size(t);
    for (int64_t i = 0; i < job->n; i++) out[i] = kl_load_elem(t, o, (size_t)i);
}

void kl_ar_run_fused_output(const struct kl_ar_run *run, int j, int r, double *out, double *residual_out)
{
    const struct kl_ar_job *job = &run->b->job[j];
    const enum kl_dtype t = (enum kl_dtype)job->dtype;
    kl_ar_run_output(run, j, r, out);
    const unsigned char *o = run->data + job->ro_off + (size_t)r * (size_t)job->n * kl_dtype_size(t);
    for (int64_t i = 0; residual_out && i < job->n; i++) residual_out[i] = kl_load_elem(t, o, (size_t)i);
}

int kl_ar_run_identical(const struct kl_ar_run *run, int j, char *why, size_t len)
{
    const struct kl_ar_job *job = &run->b->job[j];
    const int world = run->b->world;
    if (job->scenario != KL_AR_ONCE) { /* per-call output hashes, [calls][world] */
        const uint64_t *h = (const uint64_t *)(run->data + job->out_off);
        for (int c = 0; c < job->calls; c++)
            for (int r = 1; r < world; r++)
                if (h[(size_t)c * world + r] != h[(size_t)c * world]) {
                    snprintf(why, len, "call %d: rank %d's output differs from rank 0's (hashes %016llx, %016llx)", c, r,
                             (unsigned long long)h[(size_t)c * world + r], (unsigned long long)h[(size_t)c * world]);
                    return -1;
                }
        return 0;
    }
    const size_t es = kl_dtype_size((enum kl_dtype)job->dtype), row = (size_t)job->n * es;
    for (int k = 0; k < (job->hidden ? 2 : 1); k++) { /* out; a fused job's residual_out */
        const unsigned char *o = run->data + (k ? job->ro_off : job->out_off);
        for (int r = 1; r < world; r++) {
            if (memcmp(o, o + (size_t)r * row, row) == 0) continue;
            size_t i = 0;
            while (i < (size_t)job->n && memcmp(o + i * es, o + (size_t)r * row + i * es, es) == 0) i++;
            snprintf(why, len, "rank %d's %s[%zu] = %.9g, rank 0's = %.9g: the ranks do not hold the same bits", r,
                     k ? "residual_out" : "out", i, kl_load_elem((enum kl_dtype)job->dtype, o + (size_t)r * row, i),
                     kl_load_elem((enum kl_dtype)job->dtype, o, i));
            return -1;
        }
    }
    return 0;
}

void kl_ar_run_end(struct kl_ar_run *run)
{
    kl_ranks_destroy(&run->g);
    memset(run, 0, sizeof *run);
}

uint64_t kl_ar_hash(const void *p, size_t bytes)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < bytes; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return h;
}
