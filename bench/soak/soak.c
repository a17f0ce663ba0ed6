/* bench/soak/soak.c - a long run, watched: EPOCHS shuffled epochs of a
 * dataset on 2 threads, with the process's resident memory (RSS and its
 * anonymous part) and open file descriptors sampled after every epoch.
 * Prints first / last / max of each and PASS when they stay flat: anonymous
 * memory within 1 MiB of the first epoch's, the same descriptors.
 *
 *   soak DATASET [EPOCHS] [BATCH]        (defaults 100, 64)
 *
 * Exit status 0 flat, 1 something grew (or the read failed), 2 usage. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <stoker/reader.h>

static long status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    size_t n = 0;
    while (key[n]) n++;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && sscanf(line + n, ": %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n - 1; /* the directory stream itself */
}

typedef struct {
    long first, last, max;
} track;

static void see(track *t, long v, int first)
{
    if (first) t->first = t->max = v;
    t->last = v;
    if (v > t->max) t->max = v;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: soak DATASET [EPOCHS] [BATCH]\n");
        return 2;
    }
    unsigned epochs = argc > 2 ? (unsigned)atoi(argv[2]) : 100,
             batch = argc > 3 ? (unsigned)atoi(argv[3]) : 64;
    stk_reader_options o;
    stk_reader_options_init(&o);
    o.batch_size = batch ? batch : 64;
    o.order = STK_ORDER_SHUFFLE;
    o.seed = 7;
    o.threads = 2;
    o.world_size = 1;
    o.verify = STK_VERIFY_ONCE;
    stk_error err;
    stk_reader *r = stk_reader_open(argv[1], &o, &err);
    if (!r) {
        fprintf(stderr, "soak: %s\n", err.msg);
        return 1;
    }
    stk_reader_set_epochs(r, epochs);
    track rss = {0, 0, 0}, anon = {0, 0, 0}, fds = {0, 0, 0};
    uint64_t per = stk_reader_batches_per_epoch(r), n = 0, samples = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const stk_batch *b;
    while ((b = stk_reader_next(r, &err))) {
        samples += b->size;
        if (++n % per == 0) {
            int first = n == per;
            see(&rss, status_kb("VmRSS"), first);
            see(&anon, status_kb("RssAnon"), first);
            see(&fds, count_fds(), first);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (err.code) {
        fprintf(stderr, "soak: %s\n", err.msg);
        return 1;
    }
    stk_reader_close(r);
    double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("soak: %u epochs, %llu batches, %llu samples in %.1f s (%.0f samples/s), shuffled, 2 threads, "
           "verify once\n",
           epochs, (unsigned long long)n, (unsigned long long)samples, s, samples / s);
    printf("%-24s %10s %10s %10s\n", "after each epoch", "first", "last", "max");
    printf("%-24s %10ld %10ld %10ld\n", "RSS (kB)", rss.first, rss.last, rss.max);
    printf("%-24s %10ld %10ld %10ld\n", "anonymous RSS (kB)", anon.first, anon.last, anon.max);
    printf("%-24s %10ld %10ld %10ld\n", "open file descriptors", fds.first, fds.last, fds.max);
    int flat = anon.max - anon.first <= 1024 && fds.max == fds.first && fds.last == fds.first;
    printf("%s: anonymous memory grew %ld kB at most, descriptors %s\n", flat ? "PASS" : "GREW",
           anon.max - anon.first, fds.max == fds.first ? "unchanged" : "changed");
    return flat ? 0 : 1;
}
