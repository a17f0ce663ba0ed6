/* reader/timeline.c - the timeline recorder (timeline.h): per track, an
 * array of events filled in start order (a range's slot is taken when it
 * begins, its duration filled when it ends), so each track's timestamps are
 * monotonic in the file. */
#include "timeline.h"
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    double ts, dur; /* microseconds since open; dur < 0: a counter */
    const char *name;
    uint64_t seq;
    unsigned part;
    double value; /* counters */
} tl_event;

typedef struct {
    tl_event *ev;
    unsigned n, depth;
    int64_t open[STK__TIMELINE_DEPTH]; /* event index of each open range, -1: dropped */
    uint64_t dropped;
    char name[48];
} tl_track;

struct stk__timeline {
    char *path;
    FILE *f;
    double t0;
    unsigned ntracks;
    tl_track *tr;
};

stk__timeline *stk__timeline_open(const char *path, unsigned tracks, stk_error *err)
{
    stk__timeline *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(path)) || !(t->tr = calloc(tracks, sizeof *t->tr))) goto oom;
    t->ntracks = tracks;
    for (unsigned i = 0; i < tracks; i++) {
        /* calloc: pages are touched only as events are recorded */
        if (!(t->tr[i].ev = calloc(STK__TIMELINE_CAP, sizeof(tl_event)))) goto oom;
        snprintf(t->tr[i].name, sizeof t->tr[i].name, "stoker %u", i);
    }
    if (!(t->f = fopen(path, "w"))) {
        stk_error_set(err, STK_E_IO, "trace '%s': cannot create: %s", path, strerror(errno));
        stk__timeline_close(t, NULL);
        return NULL;
    }
    t->t0 = stk__now();
    return t;
oom:
    stk__timeline_close(t, NULL);
    stk_error_set(err, STK_E_NOMEM, "trace '%s': out of memory for %u tracks", path, tracks);
    return NULL;
}

const char *stk__timeline_path(const stk__timeline *t) { return t->path; }

void stk__timeline_name(stk__timeline *t, unsigned track, const char *name)
{
    if (track < t->ntracks) snprintf(t->tr[track].name, sizeof t->tr[track].name, "%s", name);
}

static tl_event *take(stk__timeline *t, tl_track *k)
{
    if (k->n >= STK__TIMELINE_CAP) {
        k->dropped++;
        return NULL;
    }
    tl_event *e = &k->ev[k->n++];
    e->ts = (stk__now() - t->t0) * 1e6;
    return e;
}

void stk__timeline_push(stk__timeline *t, unsigned track, const char *stage, uint64_t seq, unsigned part)
{
    tl_track *k = &t->tr[track];
    tl_event *e = take(t, k);
    if (e) {
        e->name = stage;
        e->seq = seq;
        e->part = part;
        e->dur = 0;
    }
    if (k->depth < STK__TIMELINE_DEPTH) k->open[k->depth] = e ? (int64_t)(e - k->ev) : -1;
    k->depth++;
}

void stk__timeline_pop(stk__timeline *t, unsigned track)
{
    tl_track *k = &t->tr[track];
    if (!k->depth) return;
    k->depth--;
    if (k->depth >= STK__TIMELINE_DEPTH || k->open[k->depth] < 0) return;
    tl_event *e = &k->ev[k->open[k->depth]];
    e->dur = (stk__now() - t->t0) * 1e6 - e->ts;
}

void stk__timeline_counter(stk__timeline *t, unsigned track, const char *name, double value)
{
    tl_event *e = take(t, &t->tr[track]);
    if (!e) return;
    e->name = name;
    e->dur = -1;
    e->value = value;
}

static void write_file(const stk__timeline *t)
{
    FILE *f = t->f;
    long pid = (long)getpid();
    uint64_t dropped = 0;
    fprintf(f, "{\"traceEvents\":[\n");
    fprintf(f,
            "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%ld,\"tid\":0,\"args\":{\"name\":\"stoker\"}}",
            pid);
    for (unsigned i = 0; i < t->ntracks; i++) {
        const tl_track *k = &t->tr[i];
        dropped += k->dropped;
        fprintf(
            f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%ld,\"tid\":%u,\"args\":{\"name\":\"%s\"}}",
            pid, i + 1, k->name);
        for (unsigned j = 0; j < k->n; j++) {
            const tl_event *e = &k->ev[j];
            if (e->dur < 0)
                fprintf(f,
                        ",\n{\"ph\":\"C\",\"name\":\"%s\",\"pid\":%ld,\"tid\":%u,\"ts\":%.3f,\"args\":{"
                        "\"value\":%.17g}}",
                        e->name, pid, i + 1, e->ts, e->value);
            else
                fprintf(
                    f,
                    ",\n{\"ph\":\"X\",\"cat\":\"stoker\",\"name\":\"%s\",\"pid\":%ld,\"tid\":%u,\"ts\":%.3f,"
                    "\"dur\":%.3f,\"args\":{\"batch\":%" PRIu64 ",\"part\":%u}}",
                    e->name, pid, i + 1, e->ts, e->dur, e->seq, e->part);
        }
    }
    fprintf(f,
            "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"events_per_thread_cap\":%u,\"dropped_events\":"
            "%" PRIu64,
            STK__TIMELINE_CAP, dropped);
    if (dropped)
        fprintf(f, ",\"note\":\"%" PRIu64 " events were dropped: a thread recorded more than %u\"", dropped,
                STK__TIMELINE_CAP);
    fprintf(f, "}}\n");
}

int stk__timeline_close(stk__timeline *t, stk_error *err)
{
    if (!t) return STK_OK;
    int rc = STK_OK;
    if (t->f) {
        write_file(t);
        int bad = ferror(t->f);
        if (fclose(t->f) || bad) rc = stk_error_set(err, STK_E_IO, "trace '%s': write failed", t->path);
    }
    for (unsigned i = 0; t->tr && i < t->ntracks; i++) free(t->tr[i].ev);
    free(t->tr);
    free(t->path);
    free(t);
    return rc;
}
