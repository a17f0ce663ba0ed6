/* tools/sweep.c - see sweep.h.
 *
 * Each point opens a reader on the already-open dataset, takes a batch per
 * slot (every slot touched once), then reads for a fixed time. Peak memory
 * is the process's anonymous resident memory (RssAnon) sampled every few
 * batches: the slots plus what the reader allocates, as a trainer would see
 * it. The knee is the cheapest point within 5% of the best samples/s:
 * fewest threads, then the shallowest prefetch, then the smallest batch,
 * then the shallowest io depth. With --sweep-drop-cache every point starts
 * with an empty page cache, as the first epoch on cold storage does. */
#define _GNU_SOURCE
#include "sweep.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

typedef struct {
    unsigned threads, prefetch;
    uint32_t batch;
    int io; /* as asked; resolved (auto) after the point ran */
    unsigned depth;
    unsigned series; /* the chart's line: every setting but threads */
    double sps, gbs, wait, mib;
    int ok, knee;
} point;

/* Sorted and without repeats, so that the table and the chart's lines run
 * in order of the setting. */
unsigned sweep_parse_list(const char *s, unsigned *out)
{
    unsigned n = 0;
    while (*s) {
        char *end;
        errno = 0;
        if (*s < '0' || *s > '9') return 0; /* no sign, no blank */
        unsigned long v = strtoul(s, &end, 10);
        if (errno || end == s || v == 0 || v > 1u << 20 || n == SWEEP_MAX_VALUES || (*end && *end != ',') ||
            (*end == ',' && !end[1]))
            return 0;
        unsigned k = n++;
        while (k > 0 && out[k - 1] > v) out[k] = out[k - 1], k--;
        if (k > 0 && out[k - 1] == v) { /* a repeat: undo the shift */
            for (unsigned j = k; j + 1 < n; j++) out[j] = out[j + 1];
            n--;
        } else {
            out[k] = (unsigned)v;
        }
        s = *end ? end + 1 : end;
    }
    return n;
}


static void step(const sweep_opts *so)
{
    if (so->step_busy) { /* a compute-bound step holds a core, as a CPU trainer would */
        double until = cli_now() + so->step_us * 1e-6;
        while (cli_now() < until) {}
        return;
    }
    struct timespec ts = {(time_t)(so->step_us / 1000000), (long)(so->step_us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static const char *io_name(int io)
{
    return io == STK_IO_DIRECT ? "direct" : io == STK_IO_MMAP ? "mmap" : "auto";
}

static int drop_cache(void)
{
    sync();
    FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
    if (!f || fputs("3\n", f) < 0 || fclose(f) != 0) {
        fprintf(stderr,
                "shardread: --sweep-drop-cache: cannot write /proc/sys/vm/drop_caches (root needed)\n");
        return -1;
    }
    return 0;
}

static int measure(const stk_dataset *ds, const stk_reader_options *base, const sweep_opts *so, point *p)
{
    stk_reader_options o = *base;
    o.threads = p->threads;
    o.prefetch = p->prefetch;
    o.batch_size = p->batch;
    o.io = p->io;
    o.io_depth = p->depth;
    o.tuning = STK_TUNING_OFF; /* each point measures the setting it names */
    stk_error err;
    if (so->drop_cache && drop_cache()) return -1;
    stk_reader *r = stk_reader_open_dataset(ds, &o, &err);
    if (!r) {
        fprintf(stderr, "shardread: sweep point threads=%u prefetch=%u batch=%u: %s\n", p->threads,
                p->prefetch, p->batch, err.msg);
        return -1;
    }
    /* Warm-up: every slot used once. Fresh memory is slow to touch the first
     * time (seconds per GiB on some VMs); a trainer pays that once, not per
     * batch, so it is not what the point measures. */
    const stk_batch *b = NULL;
    for (unsigned i = 0; i < p->prefetch + 2; i++)
        if (!(b = stk_reader_next(r, &err))) break;
    stk_reader_stats_reset(r);
    double t0 = cli_now(), peak = cli_rss_anon_mib();
    uint64_t n = 0;
    while (b && cli_now() - t0 < so->seconds) {
        if (!(b = stk_reader_next(r, &err))) break;
        if (so->step_us) step(so);
        if (++n % 8 == 0) {
            double m = cli_rss_anon_mib();
            peak = m > peak ? m : peak;
        }
    }
    if (!b && err.code) {
        fprintf(stderr, "shardread: %s\n", err.msg);
        stk_reader_close(r);
        return -1;
    }
    stk_reader_synchronize(r, NULL);
    stk_reader_stats s;
    stk_reader_stats_get(r, &s);
    stk_reader_io_stats io;
    stk_reader_io_stats_get(r, &io);
    p->io = io.io;
    p->depth = io.io == STK_IO_DIRECT ? io.depth : 0;
    p->sps = s.wall_s > 0 ? s.samples / s.wall_s : 0;
    p->gbs = s.wall_s > 0 ? s.bytes / s.wall_s / 1e9 : 0;
    p->wait = s.wall_s > 0 ? s.wait_s / s.wall_s : 0;
    p->mib = peak;
    p->ok = 1;
    stk_reader_close(r);
    return 0;
}

static void mark_knee(point *pt, size_t n)
{
    double best = 0;
    for (size_t i = 0; i < n; i++) best = pt[i].ok && pt[i].sps > best ? pt[i].sps : best;
    size_t k = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (!pt[i].ok || pt[i].sps < 0.95 * best) continue;
        if (k == SIZE_MAX || pt[i].threads < pt[k].threads ||
            (pt[i].threads == pt[k].threads &&
             (pt[i].prefetch < pt[k].prefetch ||
              (pt[i].prefetch == pt[k].prefetch &&
               (pt[i].batch < pt[k].batch || (pt[i].batch == pt[k].batch && pt[i].depth < pt[k].depth))))))
            k = i;
    }
    if (k != SIZE_MAX) pt[k].knee = 1;
}

static int write_csv(const char *path, const point *pt, size_t n)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "shardread: %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(
        f,
        "threads,prefetch,batch_size,samples_per_s,gb_per_s,wait_fraction,peak_anon_mib,knee,io,io_depth\n");
    for (size_t i = 0; i < n; i++)
        if (pt[i].ok)
            fprintf(f, "%u,%u,%u,%.1f,%.4f,%.4f,%.1f,%d,%s,%u\n", pt[i].threads, pt[i].prefetch, pt[i].batch,
                    pt[i].sps, pt[i].gbs, pt[i].wait, pt[i].mib, pt[i].knee, io_name(pt[i].io), pt[i].depth);
    return fclose(f) == 0 ? 0 : -1;
}

/* The smallest 1, 2 or 5 x 10^k x 4 at or above v: four round grid steps. */
static double nice_ceiling(double v)
{
    double q = 1;
    while (q * 10 <= v / 4) q *= 10;
    for (;;) {
        if (q * 4 >= v) return q * 4;
        if (q * 2 * 4 >= v) return q * 2 * 4;
        if (q * 5 * 4 >= v) return q * 5 * 4;
        q *= 10;
    }
}

/* samples/s against threads, one line per (prefetch, batch). */
static int write_svg(const char *path, const point *pt, size_t n, const sweep_opts *so)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "shardread: %s: %s\n", path, strerror(errno));
        return -1;
    }
    const double W = 640, H = 400, L = 70, R = 190, T = 30, B = 50;
    double ymax = 1;
    unsigned tmax = 1;
    for (size_t i = 0; i < n; i++) {
        ymax = pt[i].sps > ymax ? pt[i].sps : ymax;
        tmax = pt[i].threads > tmax ? pt[i].threads : tmax;
    }
    ymax = nice_ceiling(ymax);
    static const char *const colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                          "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define X(t) (L + ((so->nthreads > 1 ? (double)(t) : 1.0) - 1) / (tmax > 1 ? tmax - 1 : 1) * (W - L - R))
#define Y(v) (H - B - (v) / ymax * (H - T - B))
    fprintf(
        f,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
        "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
        W, H);
    fprintf(
        f,
        "<text x=\"%.0f\" y=\"18\" font-size=\"14\">shardread --sweep: samples/s by worker threads</text>\n",
        L);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, H - B, W - R,
            H - B);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, T, L, H - B);
    for (int k = 0; k <= 4; k++) {
        double v = ymax * k / 4;
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n", L - 6, Y(v) + 4, v);
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, Y(v),
                W - R, Y(v));
    }
    for (unsigned i = 0; i < so->nthreads; i++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%u</text>\n", X(so->threads[i]),
                H - B + 16, so->threads[i]);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">threads</text>\n", (L + W - R) / 2,
            H - 12);
    unsigned nseries = n ? pt[n - 1].series + 1 : 0;
    for (unsigned line = 0; line < nseries; line++) {
        const char *c = colours[line % 10];
        const point *first = NULL;
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", c);
        for (size_t i = 0; i < n; i++)
            if (pt[i].series == line) {
                if (!first) first = &pt[i];
                if (pt[i].ok) fprintf(f, "%.1f,%.1f ", X(pt[i].threads), Y(pt[i].sps));
            }
        fprintf(f, "\"/>\n<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">prefetch %u, batch %u, %s", W - R + 10,
                T + 16.0 * line, c, first->prefetch, first->batch, io_name(first->io));
        if (first->depth) fprintf(f, " %u", first->depth);
        fprintf(f, "</text>\n");
    }
    for (size_t i = 0; i < n; i++)
        if (pt[i].knee)
            fprintf(f,
                    "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"none\" stroke=\"black\" "
                    "stroke-width=\"2\"/>\n"
                    "<text x=\"%.1f\" y=\"%.1f\">knee</text>\n",
                    X(pt[i].threads), Y(pt[i].sps), X(pt[i].threads) + 8, Y(pt[i].sps) + 18);
#undef X
#undef Y
    fprintf(f, "</svg>\n");
    return fclose(f) == 0 ? 0 : -1;
}

int sweep_run(const stk_dataset *ds, const stk_reader_options *base, const sweep_opts *so)
{
    int ios[3] = {base->io};
    unsigned nio = so->nio ? so->nio : 1, depths[SWEEP_MAX_VALUES] = {base->io_depth},
             ndepth = so->ndepth ? so->ndepth : 1;
    if (so->nio) memcpy(ios, so->io, sizeof ios);
    if (so->ndepth) memcpy(depths, so->io_depth, sizeof depths);
    /* io depth matters to direct points only: the others take the first */
    size_t nser = 0;
    for (unsigned i = 0; i < nio; i++) nser += ios[i] == STK_IO_MMAP ? 1 : ndepth;
    size_t n = (size_t)so->nthreads * so->nprefetch * so->nbatch * nser, k = 0;
    unsigned series = 0;
    point *pt = calloc(n, sizeof *pt);
    if (!pt) return CLI_EXIT_FAIL;
    cli_progress bar;
    cli_progress_start_units(&bar, "sweep", "points", n, so->quiet);
    for (unsigned b = 0; b < so->nbatch; b++)
        for (unsigned p = 0; p < so->nprefetch; p++)
            for (unsigned i = 0; i < nio; i++)
                for (unsigned d = 0; d < (ios[i] == STK_IO_MMAP ? 1 : ndepth); d++, series++)
                    for (unsigned t = 0; t < so->nthreads; t++, k++) {
                        pt[k].threads = so->threads[t];
                        pt[k].prefetch = so->prefetch[p];
                        pt[k].batch = so->batch[b];
                        pt[k].io = ios[i];
                        pt[k].depth = depths[d];
                        pt[k].series = series;
                        measure(ds, base, so, &pt[k]);
                        cli_progress_update(&bar, k + 1, NULL);
                    }
    cli_progress_end(&bar);
    mark_knee(pt, n);
    int rc = CLI_EXIT_OK;
    if (so->json) {
        printf("{\"points\":[");
        for (size_t i = 0, first = 1; i < n; i++)
            if (pt[i].ok) {
                printf("%s{\"threads\":%u,\"prefetch\":%u,\"batch_size\":%u,\"io\":\"%s\",\"io_depth\":%u,"
                       "\"samples_per_s\":%.1f,\"gb_per_s\":%.4f,"
                       "\"wait_fraction\":%.4f,\"peak_anon_mib\":%.1f,\"knee\":%s}",
                       first ? "" : ",", pt[i].threads, pt[i].prefetch, pt[i].batch, io_name(pt[i].io),
                       pt[i].depth, pt[i].sps, pt[i].gbs, pt[i].wait, pt[i].mib,
                       pt[i].knee ? "true" : "false");
                first = 0;
            }
        printf("]}\n");
    } else {
        printf("%7s %8s %6s %6s %5s %12s %8s %6s %10s\n", "threads", "prefetch", "batch", "io", "depth",
               "samples/s", "GB/s", "wait", "anon MiB");
        for (size_t i = 0; i < n; i++) {
            if (!pt[i].ok) {
                printf("%7u %8u %6u %6s %5u %12s\n", pt[i].threads, pt[i].prefetch, pt[i].batch,
                       io_name(pt[i].io), pt[i].depth, "failed");
                continue;
            }
            printf("%7u %8u %6u %6s %5u %12.0f %8.3f %5.1f%% %10.1f%s\n", pt[i].threads, pt[i].prefetch,
                   pt[i].batch, io_name(pt[i].io), pt[i].depth, pt[i].sps, pt[i].gbs, pt[i].wait * 100,
                   pt[i].mib, pt[i].knee ? "  <- knee" : "");
        }
        for (size_t i = 0; i < n; i++)
            if (pt[i].knee) {
                printf("knee: threads=%u prefetch=%u batch=%u io=%s", pt[i].threads, pt[i].prefetch,
                       pt[i].batch, io_name(pt[i].io));
                if (pt[i].io == STK_IO_DIRECT) printf(" io-depth=%u", pt[i].depth);
                printf(": the cheapest setting within 5%% of the best\n");
            }
    }
    for (size_t i = 0; i < n; i++)
        if (!pt[i].ok) rc = CLI_EXIT_FAIL;
    if (so->csv && write_csv(so->csv, pt, n)) rc = CLI_EXIT_FAIL;
    if (so->plot && write_svg(so->plot, pt, n, so)) rc = CLI_EXIT_FAIL;
    free(pt);
    return rc;
}
