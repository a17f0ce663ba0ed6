/* bench/cold/cold_epoch.c - one shuffled epoch over a dataset larger than
 * RAM, beside a process that holds memory of its own (a trainer's):
 *
 *   cold_epoch DATASET IO HOG_GB [THREADS]
 *
 * IO is auto, mmap or direct. A child process allocates HOG_GB GiB, touches
 * every page, then keeps touching them in passes until told to stop; it
 * reports its major faults and its slowest pass against its first quiet one.
 * The parent reads one epoch (batch 256) and prints the throughput of each
 * tenth of it. One JSON line at the end for bench/cold/run.
 *
 * What it shows: direct reads bypass the page cache, so the hog keeps its
 * pages (no major faults) and the reader's speed does not decay as the cache
 * fills; the mmap path pushes pages through the cache (the kernel reclaims
 * either the cache or, without swap, nothing of the hog, but it works for it). */
#define _GNU_SOURCE
#include "stoker/reader.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile sig_atomic_t stop_hog;
static void on_term(int sig)
{
    (void)sig;
    stop_hog = 1;
}

/* The child: hold and touch `bytes`; write "majflt first_pass_s worst_pass_s
 * passes" to fd when told to stop. */
static void hog(size_t bytes, int fd, int ready_fd)
{
    signal(SIGTERM, on_term);
    uint8_t *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) _exit(3);
    long page = sysconf(_SC_PAGESIZE);
    double t0 = now();
    for (size_t i = 0; i < bytes; i += (size_t)page) p[i] = (uint8_t)i;
    double first = now() - t0, worst = 0, quiet;
    t0 = now(); /* a pass before the reader starts: the quiet figure */
    for (size_t i = 0; i < bytes; i += (size_t)page) p[i]++;
    quiet = now() - t0;
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    unsigned passes = 0;
    char c = 1;
    if (write(ready_fd, &c, 1) != 1) _exit(3);
    while (!stop_hog) {
        double a = now();
        for (size_t i = 0; i < bytes; i += (size_t)page) p[i]++;
        double d = now() - a;
        worst = d > worst ? d : worst;
        passes++;
    }
    getrusage(RUSAGE_SELF, &ru1);
    char buf[160];
    int n = snprintf(buf, sizeof buf, "%ld %.4f %.4f %.4f %u", ru1.ru_majflt - ru0.ru_majflt, first, quiet,
                     worst, passes);
    if (write(fd, buf, (size_t)n) != n) _exit(3);
    _exit(0);
}

/* cold_epoch --epochs DATASET ORDER THREADS E [IO [READ_ONCE]]: E whole
 * epochs in one reader at its defaults (IO auto unless given), one JSON line
 * per epoch: seconds, GB/s, the path and the io statistics after it. */
static int epochs_main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr,
                "usage: cold_epoch --epochs DATASET ORDER THREADS E [auto|mmap|direct [READ_ONCE]]\n");
        return 2;
    }
    stk_reader_options o;
    stk_reader_options_init(&o);
    o.batch_size = 256;
    o.order = !strcmp(argv[3], "shuffle") ? STK_ORDER_SHUFFLE
              : !strcmp(argv[3], "quasi") ? STK_ORDER_QUASI
                                          : STK_ORDER_SEQUENTIAL;
    o.rank = 0;
    o.world_size = 1;
    o.threads = (unsigned)atoi(argv[4]);
    unsigned epochs = (unsigned)atoi(argv[5]);
    o.io = argc > 6 && !strcmp(argv[6], "mmap")     ? STK_IO_MMAP
           : argc > 6 && !strcmp(argv[6], "direct") ? STK_IO_DIRECT
                                                    : STK_IO_AUTO;
    o.read_once = argc > 7 ? atoi(argv[7]) : 0;
    stk_error err;
    double t0 = now();
    stk_reader *r = stk_reader_open(argv[2], &o, &err);
    if (!r) {
        fprintf(stderr, "cold_epoch: %s\n", err.msg);
        return 2;
    }
    uint64_t nb = stk_reader_batches_per_epoch(r), filled = 0;
    double fill_t = 0;
    stk_reader_set_epochs(r, epochs);
    for (unsigned e = 0; e < epochs; e++) {
        double bytes = 0, te = e ? now() : t0; /* the first epoch's time includes the open */
        for (uint64_t i = 0; i < nb; i++) {
            const stk_batch *b = stk_reader_next(r, &err);
            if (!b) {
                fprintf(stderr, "cold_epoch: %s\n", err.code ? err.msg : "the epoch ended early");
                stk_reader_close(r);
                return 1;
            }
            for (unsigned f = 0; f < b->nfields; f++) bytes += (double)b->fields[f].nbytes;
            if (i % 8 == 0) { /* when the read-ahead last brought something in */
                stk_reader_io_stats fs;
                stk_reader_io_stats_get(r, &fs);
                if (fs.filled_bytes != filled) {
                    filled = fs.filled_bytes;
                    fill_t = now() - t0;
                }
            }
        }
        double dt = now() - te;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
                     ru.ru_stime.tv_usec * 1e-6,
               sys = (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
        stk_reader_io_stats is;
        stk_reader_io_stats_get(r, &is);
        printf("{\"epoch\":%u,\"seconds\":%.3f,\"gb_per_s\":%.4f,\"io\":\"%s\",\"reads\":%llu,"
               "\"read_gb\":%.3f,\"filled_gb\":%.3f,\"fill_s\":%.3f,\"cpu_s\":%.3f,\"sys_s\":%.3f,\"reason\":"
               "\"%s\"}\n",
               e, dt, bytes / dt / 1e9, is.io == STK_IO_DIRECT ? "direct" : "mmap",
               (unsigned long long)is.reads, (double)is.bytes / 1e9, (double)is.filled_bytes / 1e9, fill_t,
               cpu, sys, is.reason);
        fflush(stdout);
    }
    stk_reader_close(r);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--epochs")) return epochs_main(argc, argv);
    if (argc < 4) {
        fprintf(stderr, "usage: cold_epoch DATASET auto|mmap|direct HOG_GB [THREADS]\n");
        return 2;
    }
    int io = !strcmp(argv[2], "mmap")     ? STK_IO_MMAP
             : !strcmp(argv[2], "direct") ? STK_IO_DIRECT
                                          : STK_IO_AUTO;
    size_t hog_bytes = (size_t)(atof(argv[3]) * (1u << 30));
    int res[2], ready[2];
    if (pipe(res) || pipe(ready)) return 2;
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
        close(res[0]);
        close(ready[0]);
        hog(hog_bytes, res[1], ready[1]);
    }
    close(res[1]);
    close(ready[1]);
    char c;
    if (read(ready[0], &c, 1) != 1) {
        fprintf(stderr, "cold_epoch: the memory holder failed to start\n");
        return 2;
    }

    stk_reader_options o;
    stk_reader_options_init(&o);
    o.batch_size = 256;
    o.order = STK_ORDER_SHUFFLE;
    o.rank = 0;
    o.world_size = 1;
    o.threads = argc > 4 ? (unsigned)atoi(argv[4]) : 2;
    o.io = io;
    stk_error err;
    stk_reader *r = stk_reader_open(argv[1], &o, &err);
    if (!r) {
        fprintf(stderr, "cold_epoch: %s\n", err.msg);
        kill(pid, SIGKILL);
        return 2;
    }
    uint64_t nb = stk_reader_batches_per_epoch(r), done = 0;
    double tenth[10] = {0}, t0 = now(), tl = t0, bytes = 0;
    unsigned k = 0;
    stk_reader_set_epochs(r, 1);
    const stk_batch *b;
    int rc = 0;
    while ((b = stk_reader_next(r, &err))) {
        for (unsigned f = 0; f < b->nfields; f++) bytes += (double)b->fields[f].nbytes;
        done++;
        if (k < 10 && done >= nb * (k + 1) / 10) {
            double t = now();
            tenth[k++] = bytes / (t - tl) / 1e9;
            tl = t;
            bytes = 0;
        }
    }
    if (err.code) {
        fprintf(stderr, "cold_epoch: %s\n", err.msg);
        rc = 1;
    }
    double wall = now() - t0;
    stk_reader_io_stats is;
    stk_reader_io_stats_get(r, &is);
    stk_reader_close(r);
    kill(pid, SIGTERM);
    char buf[160] = {0};
    ssize_t n = read(res[0], buf, sizeof buf - 1);
    int status = 0;
    waitpid(pid, &status, 0);
    long majflt = -1;
    double first = 0, quiet = 0, worst = 0;
    unsigned passes = 0;
    if (n <= 0 || sscanf(buf, "%ld %lf %lf %lf %u", &majflt, &first, &quiet, &worst, &passes) != 5)
        fprintf(stderr, "cold_epoch: no report from the memory holder\n");
    printf("{\"io\":\"%s\",\"reason\":\"%s\",\"batches\":%llu,\"seconds\":%.3f,\"tenths_gb_per_s\":[",
           is.io == STK_IO_DIRECT ? "direct" : "mmap", is.reason, (unsigned long long)done, wall);
    for (unsigned i = 0; i < k; i++) printf(i ? ",%.3f" : "%.3f", tenth[i]);
    printf("],\"hog_gib\":%.1f,\"hog_major_faults\":%ld,\"hog_quiet_pass_s\":%.4f,\"hog_worst_pass_s\":%.4f,"
           "\"hog_passes\":%u}\n",
           (double)hog_bytes / (1u << 30), majflt, quiet, worst, passes);
    return rc;
}
