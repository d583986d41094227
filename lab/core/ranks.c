/* Rank processes: start, supervise, share memory with them (see ranks.h for the design). No CUDA
 * in here: the parent must not need it, and the CPU tests run all of this without a GPU. */
#include "ranks.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KL_RANKS_MAGIC 0x6b6c726bu /* "klrk" */
/* A rank waiting at a host barrier gives up at this share of the run's timeout, before the
 * parent's stall check fires, so the message comes from the waiter and names whom it waited for. */
#define KL_BARRIER_SHARE 0.8
/* After a first failure the other ranks get this long to stop on their own (those at a host
 * barrier see abort and say so); whatever still runs then (in a kernel, in NCCL) is killed. */
#define KL_GRACE_S 0.5

extern char **environ;
extern const struct kl_rank_program *__start_kl_rank_programs[] __attribute__((weak));
extern const struct kl_rank_program *__stop_kl_rank_programs[] __attribute__((weak));

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static size_t header_bytes(void) { return (sizeof(struct kl_ranks_shared) + 4095) & ~(size_t)4095; }

int kl_ranks_create(struct kl_ranks *g, int world, size_t payload_bytes, struct kl_err *err)
{
    memset(g, 0, sizeof *g);
    g->fd = -1;
    if (world < 1 || world > KL_RANKS_MAX) return kl_fail(err, "ranks: world %d is not in 1..%d", world, KL_RANKS_MAX);
    /* A memfd, not MAP_ANONYMOUS: the ranks exec, and only a file descriptor survives exec.
     * No MFD_CLOEXEC for the same reason. */
    g->fd = memfd_create("kernlab-ranks", 0);
    if (g->fd < 0) return kl_fail(err, "ranks: memfd_create: %s", strerror(errno));
    g->map_bytes = header_bytes() + (payload_bytes ? payload_bytes : 1);
    if (ftruncate(g->fd, (off_t)g->map_bytes) != 0) {
        kl_fail(err, "ranks: ftruncate of %zu bytes: %s", g->map_bytes, strerror(errno));
        close(g->fd);
        return -1;
    }
    void *m = mmap(NULL, g->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, g->fd, 0);
    if (m == MAP_FAILED) {
        kl_fail(err, "ranks: mmap of %zu bytes: %s", g->map_bytes, strerror(errno));
        close(g->fd);
        return -1;
    }
    g->sh = m; /* a fresh memfd reads as zeros: payload and slots start cleared */
    g->payload = (char *)m + header_bytes();
    g->world = world;
    g->sh->magic = KL_RANKS_MAGIC;
    g->sh->world = world;
    g->sh->payload_bytes = payload_bytes;
    return 0;
}

void kl_ranks_destroy(struct kl_ranks *g)
{
    if (g->sh) munmap(g->sh, g->map_bytes);
    if (g->fd >= 0) close(g->fd);
    memset(g, 0, sizeof *g);
    g->fd = -1;
}

/* The rank's environment: the parent's, minus what we set, plus KL_RANK, KL_WORLD, KL_RANK_FD
 * and NCCL_NVLS_ENABLE=0. Built before fork: after fork in a process with threads (CUDA starts
 * some) the child may only call async-signal-safe functions (execve), not malloc or setenv.
 * BXFI_*: a Criterion test worker's sandbox map; a rank inheriting it would take itself for a
 * sandboxed worker and abort at start. */
static char **rank_env(int rank, int world, int fd)
{
    static const char *ours[] = {"KL_RANK=", "KL_WORLD=", "KL_RANK_FD=", "NCCL_NVLS_ENABLE=", "BXFI_"};
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 5, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool skip = false;
        for (size_t j = 0; j < sizeof ours / sizeof *ours; j++) skip |= strncmp(environ[i], ours[j], strlen(ours[j])) == 0;
        if (!skip) env[k++] = environ[i];
    }
    char *buf = malloc(160);
    int off = 0;
    env[k++] = buf + off, off += snprintf(buf + off, 40, "KL_RANK=%d", rank) + 1;
    env[k++] = buf + off, off += snprintf(buf + off, 40, "KL_WORLD=%d", world) + 1;
    env[k++] = buf + off, off += snprintf(buf + off, 40, "KL_RANK_FD=%d", fd) + 1;
    env[k++] = buf + off, snprintf(buf + off, 40, "NCCL_NVLS_ENABLE=0");
    env[k] = NULL;
    return env;
}

static void free_env(char **env)
{
    if (!env) return;
    size_t n = 0;
    while (env[n]) n++;
    free(env[n - 4]); /* the one buffer holding our four entries */
    free(env);
}

static const char *describe_status(int st, char *buf, size_t len)
{
    if (WIFEXITED(st)) snprintf(buf, len, "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st)) snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else snprintf(buf, len, "stopped (status 0x%x)", st);
    return buf;
}

/* Appends to the run's message, keeping the first (root) failure first. */
static void add_failure(struct kl_err *err, size_t *off, const char *fmt, ...)
{
    if (*off >= sizeof err->msg - 1) return;
    if (*off) *off += (size_t)snprintf(err->msg + *off, sizeof err->msg - *off, "; ");
    va_list ap;
    va_start(ap, fmt);
    if (*off < sizeof err->msg) *off += (size_t)vsnprintf(err->msg + *off, sizeof err->msg - *off, fmt, ap);
    va_end(ap);
}

int kl_ranks_run(struct kl_ranks *g, const char *program, double timeout_s, struct kl_err *err)
{
    struct kl_ranks_shared *sh = g->sh;
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return kl_fail(err, "ranks: cannot find this binary (/proc/self/exe): %s", strerror(errno));
    exe[len] = 0;
    atomic_store(&sh->arrived, 0);
    atomic_store(&sh->generation, 0);
    atomic_store(&sh->abort, 0);
    snprintf(sh->program, sizeof sh->program, "%s", program);
    sh->timeout_s = timeout_s;
    char *argv[] = {exe, KL_RANK_ARG, sh->program, NULL};
    char **envs[KL_RANKS_MAX] = {0};
    for (int r = 0; r < g->world; r++) {
        struct kl_rank_slot *s = &sh->slot[r];
        atomic_store(&s->state, KL_RANK_IDLE);
        atomic_store(&s->barrier_gen, 0);
        atomic_store(&s->step_ns, now_ns());
        snprintf(s->step, sizeof s->step, "starting (exec of %.120s)", exe);
        s->msg[0] = 0;
        s->pid = 0;
        envs[r] = rank_env(r, g->world, g->fd);
    }
    fflush(stdout);
    fflush(stderr);
    const pid_t parent = getpid();
    int started = 0;
    memset(err->msg, 0, sizeof err->msg);
    size_t off = 0;
    bool failed = false;
    for (; started < g->world; started++) {
        pid_t pid = fork();
        if (pid == 0) {
            /* Async-signal-safe calls only until execve (see rank_env). */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(126); /* the parent died before prctl took effect */
            execve(exe, argv, envs[started]);
            static const char msg[] = "kernlab rank: execve of /proc/self/exe failed\n";
            if (write(2, msg, sizeof msg - 1) < 0) _exit(127);
            _exit(127);
        }
        if (pid < 0) {
            add_failure(err, &off, "ranks: fork of rank %d failed: %s", started, strerror(errno));
            failed = true;
            break;
        }
        g->pid[started] = pid;
        sh->slot[started].pid = pid;
    }
    for (int r = 0; r < g->world; r++) free_env(envs[r]);

    bool killed[KL_RANKS_MAX] = {0};
    long long grace_end = 0;
    int alive = started;
    while (alive > 0) {
        for (int r = 0; r < started; r++) {
            if (!g->pid[r]) continue;
            int st = 0;
            if (waitpid(g->pid[r], &st, WNOHANG) != g->pid[r]) continue;
            g->pid[r] = 0, alive--;
            struct kl_rank_slot *s = &sh->slot[r];
            bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && atomic_load(&s->state) == KL_RANK_OK;
            if (ok || killed[r]) continue;
            char how[96];
            add_failure(err, &off, "rank %d %s at step '%s'%s%s", r, describe_status(st, how, sizeof how), s->step,
                        s->msg[0] ? ": " : "", s->msg);
            failed = true;
        }
        const long long now = now_ns();
        for (int r = 0; r < started; r++) { /* a rank stuck at one step is hung: kill it */
            if (!g->pid[r] || killed[r]) continue;
            struct kl_rank_slot *s = &sh->slot[r];
            double at = (double)(now - atomic_load(&s->step_ns)) * 1e-9;
            if (at <= timeout_s) continue;
            add_failure(err, &off, "rank %d hung: no progress for %.1f s at step '%s' (killed)", r, at, s->step);
            kill(g->pid[r], SIGKILL);
            killed[r] = true, failed = true;
        }
        if (failed && !atomic_load(&sh->abort)) atomic_store(&sh->abort, 1);
        if (failed && !grace_end) grace_end = now + (long long)(KL_GRACE_S * 1e9);
        if (failed && now > grace_end) {
            for (int r = 0; r < started; r++) {
                if (!g->pid[r] || killed[r]) continue;
                add_failure(err, &off, "rank %d killed (it was at step '%s')", r, sh->slot[r].step);
                kill(g->pid[r], SIGKILL);
                killed[r] = true;
            }
        }
        if (alive > 0) usleep(2000);
    }
    for (int r = 0; r < g->world; r++) g->pid[r] = 0;
    return failed ? -1 : 0;
}

/* ---- the rank side ---- */

static struct kl_rank_slot *my_slot(struct kl_rank *r) { return &r->sh->slot[r->rank]; }

void kl_rank_step(struct kl_rank *r, const char *fmt, ...)
{
    struct kl_rank_slot *s = my_slot(r);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->step, sizeof s->step, fmt, ap);
    va_end(ap);
    atomic_store(&s->step_ns, now_ns());
}

int kl_rank_fail(struct kl_rank *r, const char *fmt, ...)
{
    struct kl_rank_slot *s = my_slot(r);
    size_t off = strlen(s->msg);
    if (off && off < sizeof s->msg - 2) off += (size_t)snprintf(s->msg + off, sizeof s->msg - off, "; ");
    va_list ap;
    va_start(ap, fmt);
    if (off < sizeof s->msg) vsnprintf(s->msg + off, sizeof s->msg - off, fmt, ap);
    va_end(ap);
    atomic_store(&r->sh->abort, 1);
    return -1;
}

int kl_rank_barrier(struct kl_rank *r, const char *what)
{
    struct kl_ranks_shared *sh = r->sh;
    kl_rank_step(r, "barrier: %s", what);
    /* Generation counting: the last to arrive resets the count, then opens the barrier by
     * bumping the generation; the others wait for the bump. The count is reset before the bump,
     * so a rank leaving early and arriving at the next barrier counts toward that one. */
    const unsigned gen = atomic_load(&sh->generation);
    atomic_store(&my_slot(r)->barrier_gen, gen + 1);
    if (atomic_fetch_add(&sh->arrived, 1) == (unsigned)r->world - 1) {
        atomic_store(&sh->arrived, 0);
        atomic_store(&sh->generation, gen + 1);
        return 0;
    }
    const long long t0 = now_ns(), limit = (long long)(KL_BARRIER_SHARE * sh->timeout_s * 1e9);
    for (unsigned spins = 0; atomic_load(&sh->generation) == gen; spins++) {
        if (atomic_load(&sh->abort))
            return kl_rank_fail(r, "stopped waiting at barrier '%s': another rank failed", what);
        if (now_ns() - t0 > limit) {
            char who[600] = "";
            size_t off = 0;
            for (int k = 0; k < r->world && off < sizeof who; k++)
                if (atomic_load(&sh->slot[k].barrier_gen) != gen + 1)
                    off += (size_t)snprintf(who + off, sizeof who - off, "%srank %d (at step '%s')", off ? ", " : "", k,
                                            sh->slot[k].step);
            return kl_rank_fail(r, "timed out after %.1f s at barrier '%s' waiting for %s", (double)limit * 1e-9, what,
                                who);
        }
        if (spins > 64) {
            struct timespec ts = {0, 20000}; /* 20 us: ranks wait seconds for CUDA init, never long at a spin */
            nanosleep(&ts, NULL);
        }
    }
    return 0;
}

bool kl_rank_argv(int argc, char **argv) { return argc >= 2 && strcmp(argv[1], KL_RANK_ARG) == 0; }

int kl_rank_main(int argc, char **argv)
{
    const char *fd_s = getenv("KL_RANK_FD"), *rank_s = getenv("KL_RANK"), *world_s = getenv("KL_WORLD");
    if (argc < 1 || !fd_s || !rank_s || !world_s) {
        fprintf(stderr, "kernlab: '%s' is how kernlab starts its own rank processes, not a command\n", KL_RANK_ARG);
        return 2;
    }
    /* Again, before any program can touch NCCL: NVLink multicast stays off (lab/CONTRACTS.md section 10). */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    const int fd = atoi(fd_s), rank = atoi(rank_s), world = atoi(world_s);
    struct stat st;
    if (fstat(fd, &st) != 0) return fprintf(stderr, "kernlab rank %d: KL_RANK_FD=%d: %s\n", rank, fd, strerror(errno)), 2;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return fprintf(stderr, "kernlab rank %d: mmap: %s\n", rank, strerror(errno)), 2;
    struct kl_ranks_shared *sh = m;
    if (sh->magic != KL_RANKS_MAGIC || sh->world != world || rank < 0 || rank >= world)
        return fprintf(stderr, "kernlab rank %d: the shared mapping is not a kernlab rank group\n", rank), 2;
    struct kl_rank r = {rank, world, sh, (char *)m + header_bytes()};
    struct kl_rank_slot *s = my_slot(&r);
    s->pid = (int)getpid();
    atomic_store(&s->state, KL_RANK_RUNNING);
    kl_rank_step(&r, "started %s", argv[0]);
    const struct kl_rank_program *prog = NULL;
    for (const struct kl_rank_program *const *p = __start_kl_rank_programs; p && p < __stop_kl_rank_programs; p++)
        if (strcmp((*p)->name, argv[0]) == 0) prog = *p;
    int rc = prog ? prog->fn(&r) : kl_rank_fail(&r, "no rank program '%s' in this binary", argv[0]);
    if (rc != 0) {
        if (!s->msg[0]) kl_rank_fail(&r, "the program returned an error without a message");
        atomic_store(&s->state, KL_RANK_FAILED);
        atomic_store(&sh->abort, 1);
    } else {
        atomic_store(&s->state, KL_RANK_OK);
    }
    munmap(m, (size_t)st.st_size);
    return rc ? 1 : 0;
}
