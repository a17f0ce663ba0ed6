/* tests/reader/test_diagnose.c - the verdict of stk_reader_diagnose on the
 * cases that misled the old one (warm data and no step; cold data; CPU-bound
 * crops), from made-up numbers (deterministic, no timing), and the
 * Prometheus text of stk_reader_metrics parsed back. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static stk_reader_diag base(void)
{
    stk_reader_diag d;
    memset(&d, 0, sizeof d);
    d.stats.batches = 100;
    d.stats.samples = 25600;
    d.stats.bytes = 1000000000ULL;
    d.stats.wall_s = 1.0;
    d.stats.threads = 2;
    d.stats.prefetch = 4;
    d.cpus = 4;
    d.io = STK_IO_MMAP;
    return d;
}

static const char *say(const stk_reader_diag *d)
{
    static char buf[2048];
    int n = stk_reader_diagnose(d, buf, sizeof buf);
    ck_assert_int_eq(n, (int)strlen(buf));
    ck_assert_msg(!strncmp(buf, "loader: ", 8), "%s", buf);
    ck_assert_msg(strstr(buf, "\nworkers: decode/crop ") != NULL, "%s", buf); /* its own line */
    return buf;
}

#define HAS(v, s) ck_assert_msg(strstr((v), (s)) != NULL, "wanted '%s' in:\n%s", (s), (v))
#define HASNT(v, s) ck_assert_msg(strstr((v), (s)) == NULL, "did not want '%s' in:\n%s", (s), (v))

/* The demo's read loop over warm data: the consumer never pauses, so it
 * waits nearly all the time; the old verdict said "input-bound ... storage
 * is the limit". */
START_TEST(warm_no_step)
{
    stk_reader_diag d = base();
    d.stats.wait_s = 0.98;
    d.stats.busy_s = 1.9;
    const char *v = say(&d);
    HAS(v, "no training step recorded");
    HAS(v, "no verdict about a trainer");
    HASNT(v, "input-bound");
    HASNT(v, "bound by: storage");
    HAS(v, "bound by: CPU on the workers copying data already in memory");
    HAS(v, "memory bandwidth");
    HAS(v, "1.000 GB/s");
    /* the old verdict is unchanged on the same numbers */
    char old[256];
    stk_reader_verdict(&d.stats, old, sizeof old);
    ck_assert_msg(!strncmp(old, "input-bound: 98%", 16), "%s", old);
}
END_TEST

/* Cold data through the map, and through direct reads: storage. */
START_TEST(cold)
{
    stk_reader_diag d = base();
    d.stats.wait_s = 0.9;
    d.stats.busy_s = 0.6;
    d.major_faults = 20000; /* 50 KB per fault */
    const char *v = say(&d);
    HAS(v, "no training step recorded");
    HAS(v, "bound by: storage: 20000 major page faults");
    HAS(v, "io=direct");
    d.major_faults = 10; /* warm: no */
    v = say(&d);
    HASNT(v, "storage");
    HAS(v, "bound by: the hand-off");
    d = base();
    d.io = STK_IO_DIRECT;
    d.stats.wait_s = 0.5;
    d.stats.busy_s = 1.0;
    d.read_wait_s = 0.7;
    d.steps = 99;
    v = say(&d);
    HAS(v, "trainer: input-bound: 50%");
    HAS(v, "bound by: storage: the workers spent 70% of their time waiting for direct reads");
    HAS(v, "waiting for reads 0.700 s (70%)");
    HASNT(v, "major page faults");
}
END_TEST

/* JPEG random crops on the workers, every core busy, the trainer waiting. */
START_TEST(cpu_bound_crops)
{
    stk_reader_diag d = base();
    d.cpus = 2;
    d.steps = 99;
    d.stats.wait_s = 0.4;
    d.stats.busy_s = 1.95;
    d.crop_s = 1.6;
    const char *v = say(&d);
    HAS(v, "trainer: input-bound: 40% of wall time");
    HAS(v, "decode/crop 1.600 s (82%)");
    HAS(v, "bound by: CPU on the workers: decoding and cropping take 82% of their time");
    HAS(v, "more cores (all threads busy)");
    HASNT(v, "storage");
    d.cpus = 8;
    HAS(say(&d), "more threads");
    HASNT(say(&d), "JPEG decode"); /* no stages measured: none shown */
    /* the crop's stages, and the normalising outside it */
    d.decode_s = 1.2;
    d.resize_s = 0.35;
    d.normalise_s = 0.1;
    v = say(&d);
    HAS(v,
        "decode/crop 1.600 s (82%) [JPEG decode 1.200 s, resize and flip 0.350 s], normalise 0.100 s (5%)");
    HAS(v, "reading and copying 0.250 s (13%)");
}
END_TEST

START_TEST(trainer_not_input_bound)
{
    stk_reader_diag d = base();
    d.steps = 99;
    d.stats.wait_s = 0.02;
    d.stats.busy_s = 0.5;
    const char *v = say(&d);
    HAS(v, "trainer: not input-bound: 2%");
    HAS(v, "bound by: the trainer");
    stk_reader_diag z;
    memset(&z, 0, sizeof z);
    char buf[64];
    stk_reader_diagnose(&z, buf, sizeof buf);
    ck_assert_str_eq(buf, "no batches read yet");
    /* a short buffer: the length it needs, a truncated string */
    char tiny[16];
    int n = stk_reader_diagnose(&d, tiny, sizeof tiny);
    ck_assert_int_gt(n, 15);
    ck_assert_uint_eq(strlen(tiny), 15);
}
END_TEST

/* A real reader: steps counted, the metrics' text parsed back. */
START_TEST(metrics_text)
{
    char dir[512];
    tu_scratch_std_dataset(dir, sizeof dir, "diag_metrics", 3, 200, 50);
    stk_reader_options o = tu_reader_options(10, STK_ORDER_SHUFFLE);
    o.threads = 2;
    stk_reader *r = tu_open_reader(dir, &o);
    stk_error err;
    for (int i = 0; i < 15; i++) ck_assert_ptr_nonnull(stk_reader_next(r, &err));
    /* five batches asked for after a 3 ms pause each: steps of a trainer. The
     * calls before them may count too, when the machine preempts the test
     * for a millisecond, so only the bounds are asserted. */
    for (int i = 0; i < 5; i++) {
        nanosleep(&(struct timespec){0, 3000000}, NULL);
        ck_assert_ptr_nonnull(stk_reader_next(r, &err));
    }
    stk_reader_diag d;
    stk_reader_diag_get(r, &d);
    ck_assert_uint_eq(d.stats.batches, 20);
    ck_assert_uint_ge(d.steps, 5);
    ck_assert_uint_le(d.steps, 20);
    ck_assert(d.io == STK_IO_MMAP || d.io == STK_IO_DIRECT);
    int need = stk_reader_metrics(r, NULL, 0);
    ck_assert_int_gt(need, 0);
    /* the clock moves between the calls: a little room for longer numbers */
    char *text = malloc((size_t)need + 256);
    need = stk_reader_metrics(r, text, (size_t)need + 256);
    ck_assert_uint_eq(strlen(text), (size_t)need);
    /* every sample is preceded by its HELP and TYPE; names stoker_*, counters _total */
    unsigned samples = 0, counters = 0;
    char help[128] = "", type[128] = "", kind[32] = "";
    double batches = -1;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char name[128];
        if (!strncmp(line, "# HELP ", 7)) {
            ck_assert_int_eq(sscanf(line + 7, "%127s", help), 1);
        } else if (!strncmp(line, "# TYPE ", 7)) {
            ck_assert_int_eq(sscanf(line + 7, "%127s %31s", type, kind), 2);
            ck_assert_str_eq(type, help);
            ck_assert(!strcmp(kind, "counter") || !strcmp(kind, "gauge"));
        } else {
            double v;
            ck_assert_msg(sscanf(line, "%127s %lf", name, &v) == 2, "'%s'", line);
            ck_assert_str_eq(name, type);
            ck_assert(!strncmp(name, "stoker_", 7));
            size_t n = strlen(name);
            int total = n > 6 && !strcmp(name + n - 6, "_total");
            ck_assert_int_eq(total, !strcmp(kind, "counter"));
            counters += total;
            if (!strcmp(name, "stoker_batches_total")) batches = v;
            samples++;
        }
    }
    ck_assert_uint_ge(samples, 15);
    ck_assert_uint_ge(counters, 10);
    ck_assert(batches == 20);
    free(text);
    stk_reader_close(r);
}
END_TEST

TU_MAIN("diagnose",
        {.name = "verdict", .tests = {warm_no_step, cold, cpu_bound_crops, trainer_not_input_bound}},
        {.name = "metrics", .tests = {metrics_text}})
