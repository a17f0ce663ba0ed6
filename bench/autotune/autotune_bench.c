/* bench/autotune/autotune_bench.c - one run of libstoker's reader under a
 * simulated trainer, timed the way the online tuner is judged:
 *
 *   autotune_bench DATASET [--tuning on|off] [--threads T] [--prefetch P] [--io-depth D]
 *                  [--io auto|mmap|direct] [--crop random:S] [--step-us US] [--batch B]
 *                  [--batches N] [--start N0] [--fields F] [--seed S] [--log]
 *
 * Opens a shuffled reader (threads, prefetch and io_depth 0: the library's
 * defaults; with tuning on they are where the tuner starts) and reads N
 * batches (default 400) of B records (default 64). After each batch the
 * trainer's thread computes for US microseconds of its own CPU time,
 * spinning (a step measured in CPU time, not wall time: worker threads that
 * take the trainer's core make its steps longer, as they would a real
 * trainer's). --crop random:S has the workers decode and crop the 'image'
 * field (RandomResizedCrop(S) + flip, u8 NHWC), as shardread --crop does.
 *
 * Prints one JSON line: for the start (the first N0 batches, default 200,
 * from the first call of next) and for the rest (after the start):
 * samples/s, the trainer's wait fraction (time blocked in next over the
 * window's wall time), the CPU the rest of the process used (the workers,
 * the copy and I/O threads, the tuner: process CPU time minus the trainer
 * thread's) in core-seconds and in cores, and the reader's own busy_s; the
 * knobs at the end and the number of changes the tuner made (tuner: 1 when
 * it was on). --log prints the
 * tuner's change log to stderr. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <stoker/reader.h>


static double clock_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "autotune_bench: %s: %s\n", what, msg);
    exit(1);
}

static unsigned parse_uint(const char *opt, const char *s)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (!*s || *end || v > 1000000000ul) die(opt, "expects a non-negative integer");
    return (unsigned)v;
}

/* The trainer's step: spin until this thread has used `us` microseconds of
 * CPU. The volatile sink keeps the loop from being optimised away. */
static void step(unsigned us)
{
    if (!us) return;
    static volatile unsigned long sink;
    double until = clock_s(CLOCK_THREAD_CPUTIME_ID) + us * 1e-6;
    while (clock_s(CLOCK_THREAD_CPUTIME_ID) < until)
        for (int i = 0; i < 2000; i++) sink = sink * 6364136223846793005ul + 1442695040888963407ul;
}

/* What the clocks say at one point of the run. */
typedef struct {
    double wall, wait, proc_cpu, self_cpu;
    uint64_t samples;
} mark;

static void window_json(const char *name, const mark *a, const mark *b)
{
    double wall = b->wall - a->wall, workers = (b->proc_cpu - b->self_cpu) - (a->proc_cpu - a->self_cpu);
    printf("\"%s\":{\"wall_s\":%.4f,\"samples_per_s\":%.1f,\"wait_s\":%.4f,\"wait_fraction\":%.4f,"
           "\"worker_cpu_s\":%.4f,\"worker_cores\":%.4f}",
           name, wall, wall > 0 ? (double)(b->samples - a->samples) / wall : 0, b->wait - a->wait,
           wall > 0 ? (b->wait - a->wait) / wall : 0, workers, wall > 0 ? workers / wall : 0);
}

int main(int argc, char **argv)
{
    const char *path = NULL, *fields = NULL, *crop = NULL;
    int tuning = STK_TUNING_ON, io = STK_IO_AUTO, log = 0;
    unsigned threads = 0, prefetch = 0, depth = 0, step_us = 0, batch = 64, n = 400, start = 200;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = strcmp(a, "--log") != 0;
        if (takes && !v) die(a, "needs a value");
        if (!strcmp(a, "--tuning")) {
            if (strcmp(v, "on") && strcmp(v, "off")) die(a, "on or off");
            tuning = !strcmp(v, "on") ? STK_TUNING_ON : STK_TUNING_OFF;
        } else if (!strcmp(a, "--threads")) {
            threads = parse_uint(a, v);
        } else if (!strcmp(a, "--prefetch")) {
            prefetch = parse_uint(a, v);
        } else if (!strcmp(a, "--io-depth")) {
            depth = parse_uint(a, v);
        } else if (!strcmp(a, "--io")) {
            io = !strcmp(v, "mmap") ? STK_IO_MMAP : !strcmp(v, "direct") ? STK_IO_DIRECT : STK_IO_AUTO;
            if (io == STK_IO_AUTO && strcmp(v, "auto")) die(a, "auto, mmap or direct");
        } else if (!strcmp(a, "--crop")) {
            if (strncmp(v, "random:", 7) || !parse_uint(a, v + 7)) die(a, "random:SIZE");
            crop = v;
        } else if (!strcmp(a, "--step-us")) {
            step_us = parse_uint(a, v);
        } else if (!strcmp(a, "--batch")) {
            batch = parse_uint(a, v);
        } else if (!strcmp(a, "--batches")) {
            n = parse_uint(a, v);
        } else if (!strcmp(a, "--start")) {
            start = parse_uint(a, v);
        } else if (!strcmp(a, "--fields")) {
            fields = v;
        } else if (!strcmp(a, "--seed")) {
            seed = parse_uint(a, v);
        } else if (!strcmp(a, "--log")) {
            log = 1;
        } else if (a[0] == '-' || path) {
            die(a, "unknown argument (see the head of bench/autotune/autotune_bench.c)");
        } else {
            path = a;
            continue;
        }
        i += takes;
    }
    if (!path) die("usage", "autotune_bench DATASET [options]");
    if (!batch || start < 1 || n <= start) die("usage", "needs --batch >= 1 and --batches > --start >= 1");

    stk_transform t;
    stk_reader_options o;
    stk_reader_options_init(&o);
    o.batch_size = batch;
    o.order = STK_ORDER_SHUFFLE;
    o.seed = seed;
    o.rank = 0, o.world_size = 1;
    o.threads = threads, o.prefetch = prefetch, o.io_depth = depth, o.io = io;
    o.tuning = tuning;
    o.fields = fields ? fields : crop ? "image" : "image,label";
    if (crop) {
        stk_transform_imagenet(&t, 1, parse_uint("--crop", crop + 7));
        t.dtype = STK_DT_U8, t.layout = STK_IMAGE_NHWC;
        o.transform = &t;
        o.device = STK_DEVICE_NONE; /* the workers decode and crop */
    }
    stk_error e;
    stk_reader *r = stk_reader_open(path, &o, &e);
    if (!r) die(path, e.msg);

    mark m0 = {0}, m1 = {0}, m2 = {0};
    double wait = 0;
    uint64_t samples = 0;
    m0.wall = now(), m0.proc_cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID),
    m0.self_cpu = clock_s(CLOCK_THREAD_CPUTIME_ID);
    for (unsigned b = 0; b < n; b++) {
        double a = now();
        const stk_batch *bt = stk_reader_next(r, &e);
        if (!bt) die(path, e.msg);
        double z = now();
        wait += z - a;
        samples += bt->size;
        if (b + 1 == start || b + 1 == n) {
            mark *m = b + 1 == start ? &m1 : &m2;
            m->wall = z, m->wait = wait, m->samples = samples;
            m->proc_cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID), m->self_cpu = clock_s(CLOCK_THREAD_CPUTIME_ID);
        }
        if (b + 1 < n) step(step_us); /* the last batch's step is not waited for */
    }
    stk_reader_stats st;
    stk_reader_stats_get(r, &st);
    stk_reader_io_stats ios;
    stk_reader_io_stats_get(r, &ios);
    stk_reader_tune_stats ts;
    stk_reader_tune_stats_get(r, &ts);
    if (log) {
        static stk_reader_tune_event ev[256];
        size_t k = stk_reader_tune_log(r, ev, 256);
        for (size_t i = 0; i < k; i++)
            fprintf(stderr, "  batch %5llu %7.3f s  threads %u prefetch %u io_depth %u: %s\n",
                    (unsigned long long)ev[i].batch, ev[i].t_s, ev[i].threads, ev[i].prefetch, ev[i].io_depth,
                    ev[i].reason);
    }
    printf("{\"tuning\":\"%s\",\"batch\":%u,\"batches\":%u,\"start\":%u,\"step_us\":%u,\"io\":\"%s\",",
           tuning == STK_TUNING_ON ? "on" : "off", batch, n, start, step_us,
           ios.io == STK_IO_DIRECT ? "direct" : "mmap");
    window_json("first", &m0, &m1);
    putchar(',');
    window_json("after", &m1, &m2);
    printf(",\"busy_s\":%.4f,\"threads\":%u,\"prefetch\":%u,\"io_depth\":%u,\"changes\":%ld,\"settled\":%d,"
           "\"tuner\":%d}\n",
           st.busy_s, ts.threads, ts.prefetch, ts.io_depth, (long)ts.changes, ts.settled, ts.on);
    stk_reader_close(r);
    return 0;
}
