/* The all-reduce bench's workload catalogue (lab/allreduce/workloads.h): the plain sizes, then the fused
 * add + RMSNorm shapes, each at every world; their names, and which of them a --workload list asks for. */
#include <stdio.h>
#include <string.h>

#include "lab/allreduce/allreduce_module.h"
#include "lab/allreduce/workloads.h"
#include "perf/bench.h"

static const struct {
    const char *name;
    int64_t bytes;
} ksizes[] = {{"8KB", 8 << 10}, {"64KB", 64 << 10}, {"256KB", 256 << 10}, {"512KB", 512 << 10},
              {"1MB", 1 << 20}, {"8MB", 8 << 20},   {"64MB", 64 << 20},   {"256MB", 256 << 20}};
#define N_PLAIN_SIZES ((int)(sizeof ksizes / sizeof ksizes[0]))
_Static_assert(N_PLAIN_SIZES == KL_AR_PLAIN_SIZES, "workloads.h counts the plain sizes");
/* The fused workloads, after the plain sizes in a group's size index. */
static const struct {
    int64_t tokens, hidden;
} kfused[] = {{1, 4096}, {16, 4096}, {64, 4096}, {1, 8192}, {16, 8192}, {64, 8192}};
#define N_FUSED_SIZES ((int)(sizeof kfused / sizeof kfused[0]))
#define N_SIZES (N_PLAIN_SIZES + N_FUSED_SIZES)
_Static_assert(N_SIZES == KL_AR_SIZES, "workloads.h counts the fused shapes");

const char *kl_ar_workload_name(char *buf, size_t len, int s, int world)
{
    if (s >= N_PLAIN_SIZES)
        snprintf(buf, len, "add-rmsnorm-t%lld-h%lld-world%d", (long long)kfused[s - N_PLAIN_SIZES].tokens,
                 (long long)kfused[s - N_PLAIN_SIZES].hidden, world);
    else
        snprintf(buf, len, "%s-world%d", ksizes[s].name, world);
    return buf;
}

/* Bytes of one rank's x at size s of the catalogue, and the hidden of a fused one (0: plain). */
int64_t kl_ar_size_bytes(int s)
{
    return s < N_PLAIN_SIZES ? ksizes[s].bytes
                             : kfused[s - N_PLAIN_SIZES].tokens * kfused[s - N_PLAIN_SIZES].hidden * 2;
}
int64_t kl_ar_size_hidden(int s)
{
    return s < N_PLAIN_SIZES ? 0 : kfused[s - N_PLAIN_SIZES].hidden;
}

const char *kl_ar_plain_size_name(int s)
{
    return s >= 0 && s < N_PLAIN_SIZES ? ksizes[s].name : "";
}

/* The plain size of these bytes, or -1. */
static int plain_size_of(int64_t bytes)
{
    for (int k = 0; k < N_PLAIN_SIZES; k++)
        if (ksizes[k].bytes == bytes) return k;
    return -1;
}

int kl_ar_story_size(void) { return plain_size_of(64 << 10); }

int kl_ar_fused_story_size(void)
{
    for (int k = 0; k < N_FUSED_SIZES; k++)
        if (kfused[k].tokens == 1 && kfused[k].hidden == 4096) return N_PLAIN_SIZES + k;
    return -1;
}

int kl_ar_fused_story_plain_size(void) { return kl_ar_plain_size_of_fused(kl_ar_fused_story_size()); }

int kl_ar_plain_size_of_fused(int s) { return s >= N_PLAIN_SIZES && s < N_SIZES ? plain_size_of(kl_ar_size_bytes(s)) : -1; }

bool kl_ar_size_traced(int s)
{
    if (s < 0 || s >= N_SIZES) return false;
    if (s >= N_PLAIN_SIZES || s == kl_ar_story_size()) return true; /* every fused shape, the plain story */
    for (int f = N_PLAIN_SIZES; f < N_SIZES; f++)
        if (kl_ar_plain_size_of_fused(f) == s) return true; /* the plain call of a fused shape's bytes */
    return false;
}

/* Workload i of every one a machine of KL_AR_MAX_RANKS GPUs runs: size i / worlds, world 2 + i % worlds. */
static const char *workload_at(int i)
{
    enum { WORLDS = KL_AR_MAX_RANKS - 1 };
    static char names[N_SIZES * WORLDS][48];
    if (i < 0 || i >= N_SIZES * WORLDS) return NULL;
    if (!names[i][0]) kl_ar_workload_name(names[i], sizeof names[i], i / WORLDS, 2 + i % WORLDS);
    return names[i];
}
KL_BENCH_WORKLOADS(allreduce, workload_at);

/* Whether catalogue size s at this world is asked for: --workload is a comma-separated list of names,
 * each a full workload name (8KB-world2) or one without its world (8KB: every world). */
bool kl_ar_wanted(const struct kl_bench_args *a, int s, int world)
{
    if (!a->workload) return true;
    char wl[48];
    kl_ar_workload_name(wl, sizeof wl, s, world);
    const size_t stem = strlen(wl) - strlen("-world") - (world > 9 ? 2 : 1); /* the name without -worldW */
    for (const char *name = a->workload; *name;) {
        const char *end = strchr(name, ',');
        const size_t len = end ? (size_t)(end - name) : strlen(name);
        if ((len == strlen(wl) && strncmp(name, wl, len) == 0) || (len == stem && strncmp(name, wl, stem) == 0))
            return true;
        name += len + (end ? 1 : 0);
    }
    return false;
}

/* The first name of --workload that no size names at any world, or NULL: said before any GPU is asked. */
const char *kl_ar_unknown_workload(const struct kl_bench_args *a, char *buf, size_t len)
{
    for (const char *name = a ? a->workload : NULL; name && *name;) {
        const char *end = strchr(name, ',');
        const size_t n = end ? (size_t)(end - name) : strlen(name);
        snprintf(buf, len, "%.*s", (int)n, name);
        struct kl_bench_args one = *a;
        one.workload = buf;
        bool known = false;
        for (int world = 2; world <= KL_AR_MAX_RANKS && !known; world++)
            for (int s = 0; s < N_SIZES && !known; s++)
                known = kl_ar_wanted(&one, s, world);
        if (!known) return buf;
        name += n + (end ? 1 : 0);
    }
    return NULL;
}
