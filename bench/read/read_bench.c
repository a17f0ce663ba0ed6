/* bench/read/read_bench.c - libstoker's reader, measured the way a trainer uses it.
 *
 *   read_bench info    DATASET [--fields F]
 *       prints the record count and the bytes per record of each selected
 *       field, so the run script can give the gather limit the same layout
 *   read_bench shuffle DATASET [-t THREADS] [-b BATCH] [-p PREFETCH] [-s SECONDS] [--fields F] [--seed S]
 *       shuffled order: one untimed warm-up epoch (which also checks every
 *       record of every batch against the dataset and that the epoch is a
 *       permutation), then batches for SECONDS; samples/s and GB/s from
 *       stk_reader_stats_get; anonymous memory (RssAnon) before open, at its
 *       peak during the timed part and at the end, against the slots
 *   read_bench mix     DATASET [options of shuffle]
 *       the same, over a mixture of three sources that are the dataset itself,
 *       repeat 0.5, 0.3 and 0.2 (an epoch of the dataset's size, over the same
 *       bytes), each source shuffled: what mixing costs against shuffle. The
 *       warm-up checks the values and that every record's source index is
 *       consistent (sources cover random parts: no permutation check)
 *   read_bench seq     DATASET [-t THREADS] [-b BATCH] [-n CALLS] [--step-calls N] [--step-us US] [--release 0|1]
 *                      [--fields F] [--no-touch]
 *       sequential order, after one warm-up epoch: first CALLS calls of
 *       stk_reader_next back to back (throughput; next mostly waits for the
 *       workers), then N calls with a US-microsecond step between them, as a
 *       trainer makes them while the accelerator computes: the wall time of
 *       next itself (median, p99, max). Checks that every batch that lies
 *       inside one shard came back zero-copy
 *   read_bench open    DATASET [-t THREADS] [-b BATCH] [-r REPEATS] [--order shuffle|sequential]
 *       the time from stk_reader_open to the first batch in hand
 *
 * The consumer does no work of its own besides what is said (in seq, by
 * default, it reads one byte of every 4 KiB of each batch outside the timed
 * call, as a host-to-device copy would, so that pages a zero-copy batch
 * points at are really mapped and released). Every measured figure is printed
 * as "RESULT name value unit [value unit ...]" for bench/read/run.
 *
 * Defaults: --fields image,label (what the issue measures: the u8 image and
 * the i64 label of a pack or shardgen dataset), batch 256. GB = 1e9 bytes. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <stoker/reader.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* RssAnon of this process in bytes (0 if /proc is not there). Read with
 * open/read, not stdio, so that sampling it allocates nothing itself. */
static uint64_t rss_anon(void)
{
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    const char *p = strstr(buf, "RssAnon:");
    return p ? strtoull(p + 8, NULL, 10) * 1024 : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    const char *cmd, *path, *fields, *order;
    unsigned threads, prefetch, repeats;
    uint32_t batch;
    double seconds;
    uint64_t calls, step_calls, step_us, seed;
    int touch, release;
} args_t;

static void usage(FILE *to)
{
    fprintf(to, "usage: read_bench info    DATASET [--fields F]\n"
                "       read_bench mix     DATASET (the options of shuffle)\n"
                "       read_bench shuffle DATASET [-t THREADS] [-b BATCH] [-p PREFETCH] [-s SECONDS] "
                "[--fields F] [--seed S]\n"
                "       read_bench seq     DATASET [-t THREADS] [-b BATCH] [-n CALLS] [--step-calls N] "
                "[--step-us US]\n"
                "                          [--release 0|1] [--fields F] [--no-touch]\n"
                "       read_bench open    DATASET [-t THREADS] [-b BATCH] [-r REPEATS] [--order "
                "shuffle|sequential]\n"
                "defaults: --fields image,label, -b 256, -t 0 (the library's default), -p 0 (default),\n"
                "          -s 5, -n 2000, --step-calls 300, --step-us 10000, -r 5, --order shuffle\n");
}

static int parse_args(int argc, char **argv, args_t *a)
{
    *a = (args_t){.fields = "image,label",
                  .order = "shuffle",
                  .batch = 256,
                  .seconds = 5,
                  .calls = 2000,
                  .step_calls = 300,
                  .step_us = 10000,
                  .repeats = 5,
                  .touch = 1,
                  .release = -1};
    if (argc < 3) return -1;
    a->cmd = argv[1];
    a->path = argv[2];
    for (int i = 3; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--no-touch")) {
            a->touch = 0;
            continue;
        }
        if (i + 1 >= argc) return -1;
        const char *v = argv[++i];
        char *end;
        errno = 0;
        unsigned long long n = strtoull(v, &end, 10);
        int num_ok = !errno && end != v && !*end && v[0] != '-';
        if (!strcmp(o, "--fields")) a->fields = v;
        else if (!strcmp(o, "--order")) a->order = v;
        else if (!strcmp(o, "-s")) {
            if ((a->seconds = strtod(v, &end)) <= 0 || *end) return -1;
        } else if (!num_ok) return -1;
        else if (!strcmp(o, "-t") && n <= 256) a->threads = (unsigned)n;
        else if (!strcmp(o, "-p") && n <= 4096) a->prefetch = (unsigned)n;
        else if (!strcmp(o, "-b") && n >= 1 && n <= 1u << 20) a->batch = (uint32_t)n;
        else if (!strcmp(o, "-n") && n >= 1) a->calls = n;
        else if (!strcmp(o, "--step-calls") && n >= 1) a->step_calls = n;
        else if (!strcmp(o, "--step-us") && n <= 10000000) a->step_us = n;
        else if (!strcmp(o, "--release") && n <= 1) a->release = (int)n;
        else if (!strcmp(o, "-r") && n >= 1 && n <= 1000) a->repeats = (unsigned)n;
        else if (!strcmp(o, "--seed")) a->seed = n;
        else return -1;
    }
    return 0;
}

static void reader_options(const args_t *a, int order, stk_reader_options *o)
{
    stk_reader_options_init(o);
    o->batch_size = a->batch;
    o->order = order;
    o->seed = a->seed;
    o->threads = a->threads;
    o->prefetch = a->prefetch;
    o->fields = a->fields;
    o->release_pages = a->release;
    o->rank = 0; /* a benchmark of one process, whatever the environment says */
    o->world_size = 1;
}

static stk_reader *open_reader(const args_t *a, int order, stk_error *err)
{
    stk_reader_options o;
    reader_options(a, order, &o);
    return stk_reader_open(a->path, &o, err);
}

/* The mixture of `mix`: the dataset three times, 0.5 + 0.3 + 0.2 of it. */
static stk_reader *open_mix(const args_t *a, stk_error *err)
{
    static const double share[3] = {0.5, 0.3, 0.2};
    stk_reader_options o;
    reader_options(a, STK_ORDER_SHUFFLE, &o);
    stk_source src[3];
    for (int i = 0; i < 3; i++) {
        stk_source_init(&src[i]);
        src[i].path = a->path;
        src[i].kind = STK_MIX_REPEAT;
        src[i].value = share[i];
    }
    return stk_reader_open_mix(src, 3, &o, err);
}

/* Bytes one full batch of the selected tensor fields occupies. */
static uint64_t batch_bytes(const stk_batch *b)
{
    uint64_t per = 0;
    for (unsigned f = 0; f < b->nfields; f++)
        if (b->fields[f].kind == STK_KIND_TENSOR && b->size) per += b->fields[f].nbytes / b->size;
    return per;
}

/* Every record of the batch, field by field, against the dataset's own
 * value: the reader's gather (or zero-copy view) must be exactly the record.
 * Returns the number of mismatching values. */
static uint64_t check_batch(const stk_dataset *ds, const stk_batch *b)
{
    const stk_schema *s = stk_dataset_schema(ds);
    uint64_t bad = 0;
    for (unsigned f = 0; f < b->nfields; f++) {
        const stk_batch_field *bf = &b->fields[f];
        int fi = stk_schema_find(s, bf->name);
        if (fi < 0) return b->size;
        for (uint32_t i = 0; i < b->size; i++) {
            const void *want;
            uint64_t wsz;
            stk_error err;
            if (stk_dataset_value(ds, (unsigned)fi, b->records[i], &want, &wsz, &err)) {
                bad++;
                continue;
            }
            if (bf->kind == STK_KIND_TENSOR) {
                uint64_t stride = bf->nbytes / b->size;
                if (stride != wsz || memcmp((const uint8_t *)bf->data + i * stride, want, wsz)) bad++;
            } else if (bf->values[i].size != wsz || memcmp(bf->values[i].data, want, wsz)) {
                bad++;
            }
        }
    }
    return bad;
}

static int cmd_info(const args_t *a)
{
    stk_error err;
    stk_dataset *ds = stk_dataset_open(a->path, &err);
    if (!ds) {
        fprintf(stderr, "read_bench: %s\n", err.msg);
        return 1;
    }
    const stk_schema *s = stk_dataset_schema(ds);
    char *list = strdup(a->fields), *save = NULL, sizes[512] = "";
    size_t len = 0;
    int rc = 0;
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int f = stk_schema_find(s, tok);
        if (f < 0 || s->fields[f].kind != STK_KIND_TENSOR) {
            fprintf(stderr, "read_bench: %s: no tensor field '%s'\n", a->path, tok);
            rc = 1;
            break;
        }
        len += (size_t)snprintf(sizes + len, sizeof sizes - len, "%s%llu", len ? "," : "",
                                (unsigned long long)stk_field_stride(&s->fields[f]));
    }
    free(list);
    if (!rc) {
        printf("RESULT records %llu\n", (unsigned long long)stk_dataset_records(ds));
        printf("RESULT shards %zu\n", stk_dataset_nshards(ds));
        printf("RESULT field_bytes %s\n", sizes);
    }
    stk_dataset_close(ds);
    return rc;
}

static int cmd_shuffle(const args_t *a, int mix)
{
    stk_error err;
    uint64_t anon0 = rss_anon();
    stk_reader *r = mix ? open_mix(a, &err) : open_reader(a, STK_ORDER_SHUFFLE, &err);
    if (!r) {
        fprintf(stderr, "read_bench: %s\n", err.msg);
        return 1;
    }
    const stk_reader_options *o = stk_reader_get_options(r);
    const stk_dataset *ds = stk_reader_dataset(r);
    uint64_t N = stk_dataset_records(ds), nb = stk_reader_batches_per_epoch(r);
    uint8_t *seen = calloc((size_t)N, 1);
    uint64_t bad = 0, dup = 0, per_record = 0, got = 0;
    const stk_batch *b;
    /* Warm-up: a whole epoch, so every page of the dataset has been read once
     * (page cache and this process's page tables), checked as it goes. */
    for (uint64_t k = 0; k < nb; k++) {
        if (!(b = stk_reader_next(r, &err))) goto fail;
        if (!per_record) per_record = batch_bytes(b);
        bad += check_batch(ds, b);
        for (uint32_t i = 0; i < b->size && !mix; i++)
            if (b->records[i] < N && seen[b->records[i]]++) dup++;
        for (uint32_t i = 0; i < b->size && mix; i++) /* the sources are the dataset, one after another */
            bad += !b->sources || b->sources[i] > 2 ||
                   b->records[i] != b->sources[i] * (N / 3) + b->source_records[i];
        got += b->size;
    }
    uint64_t missing = 0;
    for (uint64_t i = 0; i < N && !mix; i++) missing += !seen[i];
    free(seen);
    seen = NULL;
    printf("read_bench: warm-up epoch: %llu batches, %llu records, %llu values differ from the dataset, "
           "%llu records repeated, %llu missing (pad tail repeats up to batch-1)\n",
           (unsigned long long)nb, (unsigned long long)got, (unsigned long long)bad, (unsigned long long)dup,
           (unsigned long long)missing);

    stk_reader_stats_reset(r);
    uint64_t peak = rss_anon(), n = 0;
    double t0 = now(), el;
    do {
        if (!(b = stk_reader_next(r, &err))) goto fail;
        if ((++n & 7) == 0) { /* a /proc read every 8 batches: well under 1% of the time */
            uint64_t v = rss_anon();
            if (v > peak) peak = v;
        }
    } while ((el = now() - t0) < a->seconds);
    stk_reader_stats st;
    stk_reader_stats_get(r, &st);
    uint64_t anon1 = rss_anon();
    if (anon1 > peak) peak = anon1;
    char verdict[256];
    stk_reader_verdict(&st, verdict, sizeof verdict);
    double sps = st.wall_s > 0 ? (double)st.samples / st.wall_s : 0,
           gbs = st.wall_s > 0 ? (double)st.bytes / st.wall_s / 1e9 : 0;
    unsigned slots = o->prefetch + 1;
    uint64_t allowed = (uint64_t)slots * per_record * o->batch_size + (32u << 20);
    printf("read_bench: %s, %u thread(s), prefetch %u, batch %u, fields %s (%llu bytes per record): "
           "%llu batches in %.2f s (own clock %.2f s): %.0f samples/s, %.2f GB/s; wait %.2f s, workers busy "
           "%.2f s, "
           "%.2f batches ready on average\n",
           mix ? "mixture of 3 sources (0.5, 0.3, 0.2 of the dataset), shuffled" : "shuffle", o->threads,
           o->prefetch, o->batch_size, o->fields ? o->fields : "(all)", (unsigned long long)per_record,
           (unsigned long long)st.batches, st.wall_s, el, sps, gbs, st.wait_s, st.busy_s, st.mean_ready);
    printf("read_bench: %s\n", verdict);
    printf("read_bench: RssAnon %.1f MiB before open, %.1f MiB peak, %.1f MiB at the end; growth %.1f MiB; "
           "allowed %u slots x %.1f MiB + 32 MiB = %.1f MiB\n",
           anon0 / 1048576.0, peak / 1048576.0, anon1 / 1048576.0, (double)(peak - anon0) / 1048576.0, slots,
           (double)per_record * o->batch_size / 1048576.0, allowed / 1048576.0);
    printf("RESULT %s_t%u %.1f samples/s %.3f GB/s\n", mix ? "mix" : "shuffle", o->threads, sps, gbs);
    if (mix) {
        stk_reader_close(r);
        return bad ? 1 : 0;
    }
    printf("RESULT check_t%u %llu bad %llu dup %llu missing\n", o->threads, (unsigned long long)bad,
           (unsigned long long)dup, (unsigned long long)missing);
    printf("RESULT anon_t%u %.1f MiB_growth %.1f MiB_allowed %.1f MiB_before %.1f MiB_peak %u slots\n",
           o->threads, (double)(peak - anon0) / 1048576.0, allowed / 1048576.0, anon0 / 1048576.0,
           peak / 1048576.0, slots);
    stk_reader_close(r);
    return bad ? 1 : 0;
fail:
    fprintf(stderr, "read_bench: %s\n", err.code ? err.msg : "stream ended early");
    free(seen);
    stk_reader_close(r);
    return 1;
}

/* Is the batch one run of consecutive records inside one shard (so the
 * reader can hand it out without copying)? */
static int expect_zero_copy(const stk_dataset *ds, const stk_batch *b)
{
    if (!b->size) return 0;
    for (uint32_t i = 1; i < b->size; i++)
        if (b->records[i] != b->records[0] + i) return 0;
    size_t s0, s1;
    uint64_t l;
    stk_error err;
    if (stk_dataset_locate(ds, b->records[0], &s0, &l, &err) ||
        stk_dataset_locate(ds, b->records[b->size - 1], &s1, &l, &err))
        return 0;
    return s0 == s1;
}

static int all_zero_copy(const stk_batch *b)
{
    for (unsigned f = 0; f < b->nfields; f++)
        if (b->fields[f].kind == STK_KIND_TENSOR && !b->fields[f].zero_copy) return 0;
    return 1;
}

static volatile uint8_t sink;

static void touch(const stk_batch *b)
{
    uint8_t x = 0;
    for (unsigned f = 0; f < b->nfields; f++) {
        const uint8_t *p = b->fields[f].data;
        if (!p) continue;
        for (uint64_t o = 0; o < b->fields[f].nbytes; o += 4096) x ^= p[o];
    }
    sink ^= x;
}

/* Sleep for a training step: the workers get the cores meanwhile, as they
 * would while an accelerator computes. */
static void step(uint64_t us)
{
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

typedef struct {
    uint64_t zc, expected, missed, wrong;
} zc_count;

/* `calls` timed calls of next, a step of step_us between them (0: none).
 * Fills t[] with each call's seconds (sorted) and returns 0, or -1 on error. */
static int timed_nexts(const args_t *a, stk_reader *r, uint64_t calls, uint64_t step_us, double *t,
                       zc_count *z, stk_error *err)
{
    const stk_dataset *ds = stk_reader_dataset(r);
    for (uint64_t k = 0; k < calls; k++) {
        if (step_us) step(step_us);
        double t0 = now();
        const stk_batch *b = stk_reader_next(r, err);
        t[k] = now() - t0;
        if (!b) return -1;
        int want = expect_zero_copy(ds, b), is = all_zero_copy(b);
        z->zc += is;
        z->expected += want;
        z->missed += want && !is;
        z->wrong += is && !want;
        if (a->touch) touch(b);
    }
    qsort(t, calls, sizeof *t, cmp_double);
    return 0;
}

static double pct(const double *sorted, uint64_t n, double p)
{
    return sorted[(size_t)((double)(n - 1) * p)] * 1e6;
}

static int cmd_seq(const args_t *a)
{
    stk_error err;
    stk_reader *r = open_reader(a, STK_ORDER_SEQUENTIAL, &err);
    if (!r) {
        fprintf(stderr, "read_bench: %s\n", err.msg);
        return 1;
    }
    const stk_reader_options *o = stk_reader_get_options(r);
    const stk_dataset *ds = stk_reader_dataset(r);
    uint64_t nb = stk_reader_batches_per_epoch(r), bad = 0;
    const stk_batch *b;
    for (uint64_t k = 0; k < nb; k++) {
        if (!(b = stk_reader_next(r, &err))) goto fail;
        bad += check_batch(ds, b);
        if (a->touch) touch(b);
    }
    uint64_t most = a->calls > a->step_calls ? a->calls : a->step_calls;
    double *t = malloc(most * sizeof *t);
    zc_count z = {0};
    /* 1. Back to back: the consumer takes batches as fast as they come, so
     *    next mostly waits for the workers; this is sequential throughput. */
    stk_reader_stats_reset(r);
    if (timed_nexts(a, r, a->calls, 0, t, &z, &err)) {
        free(t);
        goto fail;
    }
    stk_reader_stats st;
    stk_reader_stats_get(r, &st);
    double tmed = pct(t, a->calls, 0.5), tp99 = pct(t, a->calls, 0.99);
    double sps = st.wall_s > 0 ? (double)st.samples / st.wall_s : 0,
           gbs = st.wall_s > 0 ? (double)st.bytes / st.wall_s / 1e9 : 0;
    /* 2. With a training step between calls (the workers keep the ring
     *    full): what next itself costs a trainer when its batch is ready. */
    stk_reader_stats_reset(r);
    if (timed_nexts(a, r, a->step_calls, a->step_us, t, &z, &err)) {
        free(t);
        goto fail;
    }
    stk_reader_stats st2;
    stk_reader_stats_get(r, &st2);
    double med = pct(t, a->step_calls, 0.5), p99 = pct(t, a->step_calls, 0.99),
           mx = t[a->step_calls - 1] * 1e6;
    free(t);
    printf("read_bench: sequential, %u thread(s), prefetch %u, batch %u, fields %s, release_pages %d, %llu "
           "batches "
           "per epoch; warm-up epoch: %llu values differ from the dataset%s\n",
           o->threads, o->prefetch, o->batch_size, o->fields ? o->fields : "(all)", o->release_pages,
           (unsigned long long)nb, (unsigned long long)bad,
           a->touch ? "; the consumer reads each 4 KiB page of every batch" : "");
    printf(
        "read_bench: back to back, %llu calls: %.0f samples/s, %.2f GB/s; next median %.1f us, p99 %.1f us "
        "(waiting for the workers: busy %.2f s in %.2f s)\n",
        (unsigned long long)a->calls, sps, gbs, tmed, tp99, st.busy_s, st.wall_s);
    printf("read_bench: with a %.1f ms step between calls, %llu calls: next median %.2f us, p99 %.2f us, max "
           "%.1f us; "
           "%.2f batches ready on average\n",
           a->step_us / 1e3, (unsigned long long)a->step_calls, med, p99, mx, st2.mean_ready);
    printf("read_bench: zero-copy %llu of %llu batches (expected %llu: those inside one shard; %llu expected "
           "but "
           "copied, %llu zero-copy unexpectedly)\n",
           (unsigned long long)z.zc, (unsigned long long)(a->calls + a->step_calls),
           (unsigned long long)z.expected, (unsigned long long)z.missed, (unsigned long long)z.wrong);
    printf("RESULT seq_next %.3f us_median %.3f us_p99 %.3f us_max\n", med, p99, mx);
    printf("RESULT seq_backtoback %.1f samples/s %.3f GB/s %.3f us_median\n", sps, gbs, tmed);
    printf("RESULT seq_zero_copy %llu batches %llu expected %llu missed %llu bad\n", (unsigned long long)z.zc,
           (unsigned long long)z.expected, (unsigned long long)z.missed, (unsigned long long)bad);
    stk_reader_close(r);
    return bad ? 1 : 0;
fail:
    fprintf(stderr, "read_bench: %s\n", err.code ? err.msg : "stream ended early");
    stk_reader_close(r);
    return 1;
}

static int cmd_open(const args_t *a)
{
    int order = !strcmp(a->order, "sequential") ? STK_ORDER_SEQUENTIAL : STK_ORDER_SHUFFLE;
    if (order == STK_ORDER_SHUFFLE && strcmp(a->order, "shuffle")) {
        usage(stderr);
        return 2;
    }
    /* Timed in three parts (their sum is what stk_reader_open(path) and the
     * first next cost): mapping the dataset, starting the reader, first batch. */
    double *t = malloc(a->repeats * sizeof *t), part[3] = {0};
    size_t nshards = 0;
    for (unsigned k = 0; k < a->repeats; k++) {
        stk_error err;
        stk_reader_options o;
        reader_options(a, order, &o);
        double t0 = now();
        stk_dataset *ds = stk_dataset_open(a->path, &err);
        double t1 = now();
        stk_reader *r = ds ? stk_reader_open_dataset(ds, &o, &err) : NULL;
        double t2 = now();
        const stk_batch *b = r ? stk_reader_next(r, &err) : NULL;
        double t3 = now();
        if (!b) {
            fprintf(stderr, "read_bench: %s\n", err.msg);
            stk_reader_close(r);
            stk_dataset_close(ds);
            free(t);
            return 1;
        }
        t[k] = t3 - t0;
        part[0] += t1 - t0;
        part[1] += t2 - t1;
        part[2] += t3 - t2;
        nshards = stk_dataset_nshards(ds);
        stk_reader_close(r); /* not timed: a trainer closes at the end of training */
        stk_dataset_close(ds);
    }
    double first = t[0] * 1e3;
    qsort(t, a->repeats, sizeof *t, cmp_double);
    double med = t[a->repeats / 2] * 1e3, mx = t[a->repeats - 1] * 1e3;
    free(t);
    printf("read_bench: open to first batch, %s order, %zu shards, batch %u, %u runs: first %.2f ms, median "
           "%.2f ms, "
           "max %.2f ms; on average %.2f ms mapping the dataset, %.2f ms starting the reader, %.2f ms to the "
           "first batch\n",
           a->order, nshards, a->batch, a->repeats, first, med, mx, part[0] / a->repeats * 1e3,
           part[1] / a->repeats * 1e3, part[2] / a->repeats * 1e3);
    printf("RESULT open_first_%s %.3f ms_median %.3f ms_first %.3f ms_max %zu shards\n", a->order, med, first,
           mx, nshards);
    return 0;
}

int main(int argc, char **argv)
{
    args_t a;
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return 0;
    }
    if (parse_args(argc, argv, &a)) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(a.cmd, "info")) return cmd_info(&a);
    if (!strcmp(a.cmd, "shuffle")) return cmd_shuffle(&a, 0);
    if (!strcmp(a.cmd, "mix")) return cmd_shuffle(&a, 1);
    if (!strcmp(a.cmd, "seq")) return cmd_seq(&a);
    if (!strcmp(a.cmd, "open")) return cmd_open(&a);
    usage(stderr);
    return 2;
}
