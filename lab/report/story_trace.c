/* The story's trace, story-trace.json: Chrome's trace-event format (Perfetto, chrome://tracing),
 * a track per stream (lanes where PDL overlaps kernels), slices per op and kernel, counters of
 * HBM and tensor-pipe use from each kernel's profiled instance. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/core/guide.h"
#include "lab/core/json_path.h"
#include "lab/report/story_doc.h"
#include "lab/story/story.h"
#include "perf/figures.h"


#define KL_LANES 4 /* tracks per stream: PDL overlaps two kernels, rarely three */
struct trace {
    FILE *f;
    bool first;
    double stream_end[64][KL_LANES]; /* per stream, per lane: where the last slice there ended */
    double last_counter[2];          /* HBM %, tensor pipe %: the last value written */
    int streams[64], n_streams;
};

static void ev(struct trace *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ev(struct trace *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(t->f, "%s\n", t->first ? "" : ",");
    t->first = false;
    vfprintf(t->f, fmt, ap);
    va_end(ap);
}

/* JSON string escaping for names and details (quotes, backslashes, control characters). */
static const char *esc(const char *s, char *buf, size_t len)
{
    size_t o = 0;
    for (; *s && o + 7 < len; s++) {
        if (*s == '"' || *s == '\\')
            buf[o++] = '\\', buf[o++] = *s;
        else if ((unsigned char)*s < 0x20)
            o += (size_t)snprintf(buf + o, len - o, "\\u%04x", *s);
        else
            buf[o++] = *s;
    }
    buf[o] = 0;
    return buf;
}
#define ESC(s) esc(s, (char[512]){0}, 512)

enum { PID_GPU = 1, PID_HOST = 2, TID_STREAM = 100 };

/* The track of a kernel: its stream's, or the stream's overlap track when it starts before the
 * previous slice there ends (PDL), so no track holds two partly overlapping slices. */
static int stream_tid(struct trace *t, int stream, double start, double end)
{
    int i = 0;
    while (i < t->n_streams && t->streams[i] != stream)
        i++;
    if (i == t->n_streams && i < 64) {
        t->streams[t->n_streams++] = stream;
        for (int lane = 0; lane < KL_LANES; lane++)
            ev(t, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"stream %d%s\"}}",
               PID_GPU, TID_STREAM + KL_LANES * i + lane, stream, lane ? " (PDL overlap)" : "");
    }
    if (i >= 64) i = 63;
    int lane = 0;
    while (lane < KL_LANES - 1 && start < t->stream_end[i][lane])
        lane++;
    t->stream_end[i][lane] = fmax(t->stream_end[i][lane], end);
    return TID_STREAM + KL_LANES * i + lane;
}

/* A time in microseconds on a grid of 1/256 us (under 4 ns, finer than the recorder's clock), written
 * exactly: a slice's start and end both lie on the grid, so a reader that adds "dur" to "ts" gets
 * the end back bit for bit, and a slice inside another in the recording stays inside it in the file
 * (rounding both ends the same way keeps their order; %.3f on each did not). */
static double on_grid(double us)
{
    return round(us * 256) / 256;
}
static const char *exact_us(char *buf, size_t len, double us)
{
    snprintf(buf, len, "%.8f", us); /* k / 256 has at most 8 decimals */
    char *e = buf + strlen(buf) - 1;
    while (*e == '0')
        *e-- = 0;
    if (*e == '.') *e = 0;
    return buf;
}

static void slice(struct trace *t, int tid, const char *name, const char *cat, double ts, double dur, const char *args)
{
    const double t0 = on_grid(ts), t1 = on_grid(ts + (dur > 0 ? dur : 0));
    char a[40], b[40];
    ev(t, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"cat\":\"%s\",\"ts\":%s,\"dur\":%s%s%s%s}", PID_GPU,
       tid, ESC(name), cat, exact_us(a, sizeof a, t0), exact_us(b, sizeof b, t1 - t0), args ? ",\"args\":{" : "",
       args ? args : "", args ? "}" : "");
}

/* The span of a phase or step slice: its recorded [t0, t1], widened to hold every kernel of its
 * detail (the recorder's t1 can fall before the last kernel's end: the argmax that closes a pass). */
static void enclosing(const cJSON *p, const cJSON *detail, double *t0, double *t1)
{
    *t0 = kl_json_num(p, "t0_us"), *t1 = kl_json_num(p, "t1_us");
    for (const cJSON *e = detail ? detail->child : NULL; e; e = e->next) {
        const struct kl_sd_span s = kl_sd_op_span(e);
        if (isfinite(s.t0)) *t0 = fmin(*t0, s.t0), *t1 = fmax(*t1, s.t1);
    }
}

/* A counter track's value at ts, written only when it changes. */
static void counter_event(struct trace *t, int which, const char *name, double ts, double value)
{
    if (!isfinite(value) || value == t->last_counter[which]) return;
    t->last_counter[which] = value;
    ev(t, "{\"ph\":\"C\",\"pid\":%d,\"name\":\"%s\",\"ts\":%.3f,\"args\":{\"value\":%.1f}}", PID_GPU, name, ts, value);
}

/* Every kernel of a detail array on its stream's track, inside a slice per layer (and, around them,
 * the caller's phase or step slice on the same track); the ops' counters as counter tracks. A
 * layer's slice spans the kernels on the stream's first lane, so slices on a track always nest. */
static void trace_detail(struct trace *t, const struct kl_story_doc *d, const char *ph, const cJSON *detail)
{
    int n = 0, max_layer = -1;
    for (const cJSON *e = detail ? detail->child : NULL; e; e = e->next) {
        n += cJSON_GetArraySize(cJSON_GetArrayItem(e, 2));
        if (kl_sd_at(e, 1) > max_layer) max_layer = (int)kl_sd_at(e, 1);
    }
    int *tid = malloc(sizeof(int) * (size_t)(n ? n : 1));
    double *l0 = malloc(sizeof(double) * (size_t)(max_layer + 2)),
           *l1 = malloc(sizeof(double) * (size_t)(max_layer + 2));
    if (!tid || !l0 || !l1) {
        free(tid), free(l0), free(l1);
        return;
    }
    for (int l = 0; l <= max_layer; l++)
        l0[l] = INFINITY, l1[l] = -INFINITY;
    int i = 0, lane0 = -1;
    for (const cJSON *e = detail ? detail->child : NULL; e; e = e->next) /* lanes first: layers span lane 0 */
        for (const cJSON *k = cJSON_GetArrayItem(e, 2)->child; k; k = k->next, i++) {
            const double ts = kl_sd_at(k, 1), end = ts + kl_sd_at(k, 2);
            tid[i] = stream_tid(t, (int)kl_sd_at(k, 9), ts, end);
            if ((tid[i] - TID_STREAM) % KL_LANES || kl_sd_at(e, 1) < 0) continue;
            lane0 = tid[i];
            l0[(int)kl_sd_at(e, 1)] = fmin(l0[(int)kl_sd_at(e, 1)], ts), l1[(int)kl_sd_at(e, 1)] = fmax(l1[(int)kl_sd_at(e, 1)], end);
        }
    for (int l = 0; l <= max_layer && lane0 >= 0; l++) {
        char name[32];
        snprintf(name, sizeof name, "layer %d", l);
        if (isfinite(l0[l])) slice(t, lane0, name, "layer", l0[l], l1[l] - l0[l], NULL);
    }
    i = 0;
    for (const cJSON *e = detail ? detail->child : NULL; e; e = e->next) {
        const int op = (int)kl_sd_at(e, 0), l = (int)kl_sd_at(e, 1);
        const struct kl_sd_span s = kl_sd_op_span(e);
        if (isfinite(s.t0)) {
            counter_event(t, 0, isfinite(d->copy_gbs) ? "HBM % of copy" : "HBM GB/s", s.t0,
                          isfinite(d->copy_gbs) ? kl_sd_dram_pct(d, ph, op) : kl_sd_dram_gbs(d, ph, op));
            counter_event(t, 1, "tensor pipe %", s.t0, kl_sd_counter(d, ph, op, "tensor_pipe_pct"));
        }
        for (const cJSON *k = cJSON_GetArrayItem(e, 2)->child; k; k = k->next, i++) {
            char name[96], args[256];
            kl_sd_kernel_name(d, (int)kl_sd_at(k, 0), name, sizeof name);
            snprintf(args, sizeof args,
                     "\"op\":\"%s\",\"layer\":%d,\"grid\":[%.0f,%.0f,%.0f],\"block\":[%.0f,%.0f,%.0f]", kl_sd_op_name(d, op),
                     l, kl_sd_at(k, 3), kl_sd_at(k, 4), kl_sd_at(k, 5), kl_sd_at(k, 6), kl_sd_at(k, 7), kl_sd_at(k, 8));
            slice(t, tid[i], name, kl_sd_op_name(d, op), kl_sd_at(k, 1), kl_sd_at(k, 2), args);
        }
    }
    free(tid), free(l0), free(l1);
}

/* The track phases and steps go on: the first stream's (the story runs on one). */
static int main_track(struct trace *t, const struct kl_story_doc *d)
{
    for (const cJSON *p = d->phases ? d->phases->child : NULL; p; p = p->next) {
        const cJSON *det = kl_json_get(p, "detail");
        if (!det && kl_json_get(p, "detail_steps")) det = kl_json_get(p, "detail_steps")->child;
        const cJSON *e = det ? det->child : NULL, *k = e ? cJSON_GetArrayItem(e, 2)->child : NULL;
        if (k) {
            int i = 0;
            while (i < t->n_streams && t->streams[i] != (int)kl_sd_at(k, 9))
                i++;
            if (i == t->n_streams && i < 64) {
                t->streams[t->n_streams++] = (int)kl_sd_at(k, 9);
                for (int lane = 0; lane < KL_LANES; lane++)
                    ev(t,
                       "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"stream "
                       "%d%s\"}}",
                       PID_GPU, TID_STREAM + KL_LANES * i + lane, (int)kl_sd_at(k, 9), lane ? " (PDL overlap)" : "");
            }
            return TID_STREAM + KL_LANES * (i < 64 ? i : 63);
        }
    }
    return TID_STREAM;
}

int kl_sd_write_trace(const struct kl_story_doc *d, const char *path)
{
    struct trace t = {.f = fopen(path, "w"), .first = true, .last_counter = {NAN, NAN}};
    if (!t.f) return fprintf(stderr, "kernlab: %s: %s\n", path, strerror(errno)), -1;
    fprintf(t.f,
            "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"device\":\"%s\",\"commit\":\"%s\",\"date\":\"%s\"},"
            "\"traceEvents\":[",
            ESC(kl_json_str(d->root, "device.name", "?")), ESC(kl_json_str(d->root, "commit", "?")), ESC(kl_json_str(d->root, "date", "?")));
    ev(&t, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"GPU: %s\"}}", PID_GPU,
       ESC(kl_json_str(d->root, "device.name", "?")));
    ev(&t, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"host: the scheduler\"}}", PID_HOST);
    ev(&t, "{\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"name\":\"thread_name\",\"args\":{\"name\":\"events\"}}", PID_HOST);
    for (const cJSON *e = kl_json_get(d->root, "events") ? kl_json_get(d->root, "events")->child : NULL; e; e = e->next)
        ev(&t,
           "{\"ph\":\"i\",\"s\":\"t\",\"pid\":%d,\"tid\":1,\"name\":\"%s\",\"ts\":%.3f,\"args\":{\"detail\":\"%s\"}}",
           PID_HOST, ESC(kl_json_str(e, "what", "")), kl_json_num(e, "t_us"), ESC(kl_json_str(e, "detail", "")));
    const int track = main_track(&t, d);
    for (const cJSON *p = d->phases ? d->phases->child : NULL; p; p = p->next) {
        const char *ph = kl_json_str(p, "name", "?");
        const cJSON *steps = kl_json_get(p, "steps");
        double t0, t1;
        if (!steps) { /* the phase's slice, then its layers and kernels inside it on the same track */
            char title[160];
            snprintf(title, sizeof title, "%s%s", kl_json_str(p, "title", ph), kl_json_get(p, "detail") ? "" : " (summary)");
            enclosing(p, kl_json_get(p, "detail"), &t0, &t1);
            slice(&t, track, title, "phase", t0, t1 - t0, NULL);
            if (kl_json_get(p, "detail")) trace_detail(&t, d, ph, kl_json_get(p, "detail"));
            continue;
        }
        double p0 = INFINITY, p1 = -INFINITY; /* the phase holds every step, each widened to its kernels */
        for (const cJSON *s = steps->child; s; s = s->next) {
            char key[16];
            snprintf(key, sizeof key, "%.0f", kl_json_num(s, "step"));
            enclosing(s, kl_json_get(kl_json_get(p, "detail_steps"), key), &t0, &t1);
            p0 = fmin(p0, t0), p1 = fmax(p1, t1);
        }
        if (steps->child) slice(&t, track, kl_json_str(p, "title", ph), "phase", p0, p1 - p0, NULL);
        for (const cJSON *s = steps->child; s; s = s->next) {
            char n[96], key[16], args[128];
            snprintf(key, sizeof key, "%.0f", kl_json_num(s, "step"));
            const cJSON *det = kl_json_get(kl_json_get(p, "detail_steps"), key);
            snprintf(n, sizeof n, "step %.0f%s", kl_json_num(s, "step"), det ? "" : " (summary)");
            snprintf(args, sizeof args, "\"kv_len\":%.0f,\"kernels\":%.0f", kl_sd_at(kl_json_get(s, "kv_len"), 0), kl_json_num(s, "kernels"));
            enclosing(s, det, &t0, &t1);
            slice(&t, track, n, ph, t0, t1 - t0, args);
            if (det) trace_detail(&t, d, ph, det);
        }
    }
    fprintf(t.f, "\n]}\n");
    return fclose(t.f) ? -1 : 0;
}

/* ---- entry points ---- */

