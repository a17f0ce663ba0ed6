/* reader/diagnose.c - what the numbers show: the verdict of
 * stk_reader_diagnose (a function of the numbers alone, so that its wording
 * is tested on made-up cases) over stk_reader_diag_get, and the statistics
 * as Prometheus text exposition (stk_reader_metrics). The old one-line
 * stk_reader_verdict (state.c) keeps its behaviour. api layer. */
#include "reader_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void stk_reader_diag_get_sized(const stk_reader *r, stk_reader_diag *out, size_t size)
{
    stk_reader_diag d;
    memset(&d, 0, sizeof d);
    stk_reader_stats_get(r, &d.stats);
    stk_reader *m = (stk_reader *)r;
    pthread_mutex_lock(&m->mu);
    d.steps = m->st_steps;
    d.crop_s = m->st_crop;
    d.read_wait_s = m->st_read_wait;
    uint64_t f0 = m->st_faults0;
    pthread_mutex_unlock(&m->mu);
    uint64_t f = stk__major_faults();
    d.major_faults = f > f0 ? f - f0 : 0;
    d.io = r->direct ? STK_IO_DIRECT : STK_IO_MMAP;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    d.cpus = n < 1 ? 1 : (unsigned)n;
    stk__write_sized(out, size, &d, sizeof d);
}

/* snprintf that appends at *len, counting what did not fit */
typedef struct {
    char *buf;
    size_t cap, len;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *at = o->len < o->cap ? o->buf + o->len : NULL;
    int n = vsnprintf(at, at ? o->cap - o->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n;
}

static int pct(double x) { return (int)(x * 100 + 0.5); }

int stk_reader_diagnose_sized(const stk_reader_diag *in, size_t size, char *buf, size_t cap)
{
    stk_reader_diag d;
    memset(&d, 0, sizeof d);
    if (cap && buf) buf[0] = 0;
    if (!in || size < sizeof(stk_reader_stats)) return snprintf(buf, cap, "no statistics given");
    memcpy(&d, in, size < sizeof d ? size : sizeof d);
    const stk_reader_stats *s = &d.stats;
    if (!s->batches || s->wall_s <= 0) return snprintf(buf, cap, "no batches read yet");
    out_t o = {buf, cap, 0};
    double wall = s->wall_s, wait = s->wait_s / wall;
    unsigned T = s->threads ? s->threads : 1, cpus = d.cpus ? d.cpus : T;
    double util = s->busy_s / (T * wall); /* of the workers' threads */
    double busy = s->busy_s > 0 ? s->busy_s : 1e-12;
    double crop = d.crop_s / busy, rw = d.read_wait_s / busy;
    double copy = 1 - crop - rw;
    if (copy < 0) copy = 0;
    put(&o,
        "loader: %.0f samples/s, %.3f GB/s, %.1f batches/s (%llu batches in %.3f s); %u worker threads %d%% "
        "busy",
        s->samples / wall, s->bytes / wall / 1e9, s->batches / wall, (unsigned long long)s->batches, wall, T,
        pct(util));
    put(&o,
        "\nworkers: decode/crop %.3f s (%d%%), waiting for reads %.3f s (%d%%), reading and copying %.3f s "
        "(%d%%)",
        d.crop_s, pct(crop), d.read_wait_s, pct(rw), copy * s->busy_s, pct(copy));
    if (d.io == STK_IO_MMAP) put(&o, "; %llu major page faults", (unsigned long long)d.major_faults);
    /* a trainer's steps: most batches were asked for after a pause */
    int stepped = d.steps > 0 && 2 * d.steps + 1 >= s->batches;
    int input_bound = wait >= 0.10;
    if (!stepped)
        put(&o,
            "\ntrainer: no training step recorded (the consumer never paused between batches): no verdict "
            "about a trainer; the figures above are the loader's own throughput");
    else
        put(&o, "\ntrainer: %sinput-bound: %d%% of wall time spent waiting for data (threads=%u)",
            input_bound ? "" : "not ", pct(wait), s->threads);
    if (stepped && !input_bound) {
        put(&o, "\nbound by: the trainer: the loader keeps up");
        return (int)o.len;
    }
    int storage =
        d.io == STK_IO_DIRECT ? rw >= 0.3 : d.major_faults > 0 && d.major_faults * (1ULL << 20) >= s->bytes;
    if (storage && d.io == STK_IO_DIRECT)
        put(&o,
            "\nbound by: storage: the workers spent %d%% of their time waiting for direct reads (cold data); "
            "a deeper io_depth or faster storage",
            pct(rw));
    else if (storage)
        put(&o,
            "\nbound by: storage: %llu major page faults for %.3f GB (cold data read through the map); "
            "io=direct "
            "reads cold data at the storage's speed",
            (unsigned long long)d.major_faults, s->bytes / 1e9);
    else if (util >= 0.8 && crop >= 0.5)
        put(&o,
            "\nbound by: CPU on the workers: decoding and cropping take %d%% of their time; %s, a smaller "
            "output, or the crop on the device",
            pct(crop), T < cpus ? "more threads" : "more cores (all threads busy)");
    else if (util >= 0.8)
        put(&o,
            "\nbound by: CPU on the workers copying data already in memory (%.3f GB/s, no storage reads): "
            "memory bandwidth and the copy; %s, or fewer fields",
            s->bytes / wall / 1e9, T < cpus ? "more threads while cores are free" : "all cores busy");
    else if (!stepped && wait < 0.10)
        put(&o,
            "\nbound by: the consumer: it waited %d%% of the time; its own work between batches sets the "
            "pace",
            pct(wait));
    else
        put(&o,
            "\nbound by: the hand-off: the workers were %d%% busy while the consumer waited %d%%; a deeper "
            "prefetch or more threads",
            pct(util), pct(wait));
    return (int)o.len;
}

static void metric(out_t *o, const char *name, const char *type, const char *help, double v)
{
    put(o, "# HELP stoker_%s %s\n# TYPE stoker_%s %s\nstoker_%s %.17g\n", name, help, name, type, name, v);
}

int stk_reader_metrics(const stk_reader *r, char *buf, size_t cap)
{
    stk_reader_diag d;
    stk_reader_diag_get(r, &d);
    stk_reader_io_stats io;
    stk_reader_io_stats_get(r, &io);
    const stk_reader_stats *s = &d.stats;
    out_t o = {buf, cap, 0};
    if (cap && buf) buf[0] = 0;
    metric(&o, "batches_total", "counter", "Batches returned by next.", (double)s->batches);
    metric(&o, "samples_total", "counter", "Records in the batches returned.", (double)s->samples);
    metric(&o, "bytes_total", "counter", "Bytes of the selected fields in the batches returned.",
           (double)s->bytes);
    metric(&o, "zero_copy_batches_total", "counter", "Batches returned without a copy.",
           (double)s->zero_copy_batches);
    metric(&o, "verified_records_total", "counter", "Record values hashed and found good.",
           (double)s->verified);
    metric(&o, "steps_total", "counter", "Batches asked for 1 ms or more after the last one (trainer steps).",
           (double)d.steps);
    metric(&o, "wall_seconds_total", "counter", "Seconds since the first next.", s->wall_s);
    metric(&o, "wait_seconds_total", "counter", "Seconds the consumer spent blocked in next.", s->wait_s);
    metric(&o, "worker_busy_seconds_total", "counter", "Worker seconds preparing batches, summed.",
           s->busy_s);
    metric(&o, "worker_crop_seconds_total", "counter", "Worker seconds decoding and cropping images, summed.",
           d.crop_s);
    metric(&o, "worker_read_wait_seconds_total", "counter",
           "Worker seconds waiting for direct reads, summed.", d.read_wait_s);
    metric(&o, "h2d_seconds_total", "counter", "Seconds the copy engine spent on uploads.", s->h2d_s);
    metric(&o, "h2d_bytes_total", "counter", "Bytes uploaded to the device.", (double)s->h2d_bytes);
    metric(&o, "major_page_faults_total", "counter", "The process's major page faults since open or reset.",
           (double)d.major_faults);
    metric(&o, "direct_reads_total", "counter", "Direct reads completed (since open).", (double)io.reads);
    metric(&o, "direct_read_bytes_total", "counter", "Bytes the direct reads delivered (since open).",
           (double)io.bytes);
    metric(&o, "direct_read_retries_total", "counter", "Short, interrupted or refused reads resubmitted.",
           (double)io.retries);
    stk_reader_tune_stats ts;
    stk_reader_tune_stats_get(r, &ts);
    metric(&o, "threads", "gauge", "Worker threads running now.", s->threads);
    metric(&o, "prefetch", "gauge", "Batches prepared ahead now.", s->prefetch);
    metric(&o, "io_depth", "gauge", "Direct reads in flight per worker queue now.", ts.io_depth);
    metric(&o, "tuning", "gauge", "1: the online tuner turns the knobs.", ts.on);
    metric(&o, "threads_max", "gauge", "Most worker threads the tuner may run.", ts.threads_max);
    metric(&o, "prefetch_max", "gauge", "Most batches ahead the memory budget allows.", ts.prefetch_max);
    metric(&o, "tune_changes_total", "counter", "Knob changes the tuner made (since open).",
           (double)ts.changes);
    metric(&o, "tune_decisions_total", "counter", "Periods the tuner evaluated (since open).",
           (double)ts.decisions);
    metric(&o, "batches_ready_mean", "gauge", "Batches ready when next was called, averaged.", s->mean_ready);
    metric(&o, "io_direct", "gauge", "1: records are read with O_DIRECT reads; 0: from the maps.",
           io.io == STK_IO_DIRECT);
    return (int)o.len;
}
