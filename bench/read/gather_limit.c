/* bench/read/gather_limit.c - the gather limit the shuffled reader is measured against.
 *
 * The cheapest thing any loader can do to deliver a shuffled batch of records
 * that are already decoded and in memory: copy each record of the batch into
 * a batch buffer. Nothing else happens here (no file, no mapping of a dataset,
 * no order computation beyond a table lookup, no synchronisation between
 * threads), so a reader that reaches this rate is bound by memory bandwidth.
 *
 * Records are laid out the way a stoker shard lays them out: one region per
 * field (-r gives the fields' sizes, default 196608,8 = image u8[256,256,3]
 * plus an i64 label), record i of a field at region + i * size; a batch is one
 * contiguous [B, ...] buffer per field. So per record the limit copies exactly
 * the bytes stoker delivers, in the same number of pieces.
 *
 * The regions live in anonymous memory, faulted in before timing. Transparent
 * huge pages are left as the system sets them (on the machines this was
 * written on, "madvise": so 4 KiB pages, like a page-cache mapping).
 *
 * T threads share one fixed random permutation of the records; batch k of the
 * stream goes to thread k mod T, which copies it into its own batch buffers
 * (allocated and touched once, reused: fresh memory is slow to fault in on
 * some machines). Every thread runs for at least -s seconds; the rate is the
 * total bytes over the longest thread's time.
 *
 * Usage: gather_limit [-t THREADS] [-r BYTES[,BYTES...]] [-b BATCH] [-n RECORDS] [-s SECONDS] [--seed S]
 * Prints a summary line and "RESULT gather_limit_t<T> <records/s> records/s <GB/s> GB/s"
 * (GB = 1e9 bytes, counted once per record copied). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define MAX_FIELDS 8
#define MAX_THREADS 64

typedef struct {
    unsigned nfields;
    size_t size[MAX_FIELDS]; /* bytes per record of each field */
    unsigned char *region[MAX_FIELDS];
    size_t records, batch;
    const uint32_t *perm;
    unsigned threads;
    double seconds;
    pthread_barrier_t start;
} shared_t;

typedef struct {
    shared_t *sh;
    unsigned id;
    uint64_t records; /* records copied */
    double elapsed;
    int failed;
} worker_t;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Anonymous memory, written once so that timing sees no page faults. */
static unsigned char *alloc_touched(size_t n, int fill)
{
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    memset(p, fill, n);
    return p;
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    shared_t *sh = w->sh;
    unsigned char *dst[MAX_FIELDS];
    for (unsigned f = 0; f < sh->nfields; f++) {
        dst[f] = alloc_touched(sh->batch * sh->size[f], 0);
        if (!dst[f]) {
            w->failed = 1;
            for (unsigned g = 0; g < f; g++) munmap(dst[g], sh->batch * sh->size[g]);
            pthread_barrier_wait(&sh->start);
            return NULL;
        }
    }
    pthread_barrier_wait(&sh->start);
    /* Batch k covers permutation positions [k B, (k + 1) B) modulo the record
     * count: the stream wraps around epochs without a break, as a reader's does. */
    uint64_t k = w->id, copied = 0;
    double t0 = now(), t;
    do {
        size_t pos = (size_t)((k * sh->batch) % sh->records);
        for (size_t j = 0; j < sh->batch; j++) {
            size_t r = sh->perm[pos];
            if (++pos == sh->records) pos = 0;
            for (unsigned f = 0; f < sh->nfields; f++)
                memcpy(dst[f] + j * sh->size[f], sh->region[f] + r * sh->size[f], sh->size[f]);
        }
        copied += sh->batch;
        k += sh->threads;
        t = now();
    } while (t - t0 < sh->seconds);
    w->records = copied;
    w->elapsed = t - t0;
    /* Read the buffers back so the copies cannot be optimised away. */
    volatile unsigned char sink = 0;
    for (unsigned f = 0; f < sh->nfields; f++) {
        sink ^= dst[f][(copied * 31) % (sh->batch * sh->size[f])];
        munmap(dst[f], sh->batch * sh->size[f]);
    }
    (void)sink;
    return NULL;
}

static void usage(FILE *to)
{
    fprintf(to, "usage: gather_limit [-t THREADS] [-r BYTES[,BYTES...]] [-b BATCH] [-n RECORDS] [-s SECONDS] "
                "[--seed S]\n"
                "  -t  copying threads (default 1)\n"
                "  -r  bytes per record of each field (default 196608,8: u8[256,256,3] image + i64 label)\n"
                "  -b  records per batch (default 256)\n"
                "  -n  records in memory (default 10000; use the dataset's count)\n"
                "  -s  seconds each thread copies for (default 3)\n");
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    shared_t sh = {
        .nfields = 2, .size = {196608, 8}, .records = 10000, .batch = 256, .threads = 1, .seconds = 3};
    uint64_t seed = 1, v;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *a = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!a) {
            usage(stderr);
            return 2;
        }
        i++;
        if (!strcmp(o, "-t") && !parse_u64(a, &v) && v >= 1 && v <= MAX_THREADS) sh.threads = (unsigned)v;
        else if (!strcmp(o, "-b") && !parse_u64(a, &v) && v >= 1 && v <= 1u << 20) sh.batch = (size_t)v;
        else if (!strcmp(o, "-n") && !parse_u64(a, &v) && v >= 1 && v <= UINT32_MAX) sh.records = (size_t)v;
        else if (!strcmp(o, "-s") && (sh.seconds = atof(a)) > 0) continue;
        else if (!strcmp(o, "--seed") && !parse_u64(a, &seed)) continue;
        else if (!strcmp(o, "-r")) {
            char *copy = strdup(a), *save = NULL;
            sh.nfields = 0;
            for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (sh.nfields == MAX_FIELDS || parse_u64(tok, &v) || v == 0 || v > 1u << 30) {
                    fprintf(stderr, "gather_limit: -r: at most %d sizes of 1 byte to 1 GiB\n", MAX_FIELDS);
                    free(copy);
                    return 2;
                }
                sh.size[sh.nfields++] = (size_t)v;
            }
            free(copy);
            if (!sh.nfields) {
                usage(stderr);
                return 2;
            }
        } else {
            fprintf(stderr, "gather_limit: bad option or value: %s %s\n", o, a);
            usage(stderr);
            return 2;
        }
    }

    size_t record_bytes = 0;
    for (unsigned f = 0; f < sh.nfields; f++) {
        record_bytes += sh.size[f];
        /* Distinct content per field, so no page is shared or all-zero. */
        sh.region[f] = alloc_touched(sh.records * sh.size[f], 0x11 * (int)(f + 1));
        if (!sh.region[f]) {
            fprintf(stderr, "gather_limit: cannot allocate %zu x %zu bytes: %s\n", sh.records, sh.size[f],
                    strerror(errno));
            return 1;
        }
    }
    uint32_t *perm = malloc(sh.records * sizeof *perm);
    if (!perm) {
        fprintf(stderr, "gather_limit: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < sh.records; i++) perm[i] = (uint32_t)i;
    for (size_t i = sh.records - 1; i > 0; i--) { /* Fisher-Yates */
        size_t j = (size_t)(splitmix(&seed) % (i + 1));
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    sh.perm = perm;

    pthread_t th[MAX_THREADS];
    worker_t w[MAX_THREADS];
    pthread_barrier_init(&sh.start, NULL, sh.threads);
    for (unsigned i = 0; i < sh.threads; i++) {
        w[i] = (worker_t){.sh = &sh, .id = i};
        if (pthread_create(&th[i], NULL, worker, &w[i])) {
            fprintf(stderr, "gather_limit: cannot start thread %u\n", i);
            return 1;
        }
    }
    uint64_t records = 0;
    double longest = 0;
    int failed = 0;
    for (unsigned i = 0; i < sh.threads; i++) {
        pthread_join(th[i], NULL);
        records += w[i].records;
        failed |= w[i].failed;
        if (w[i].elapsed > longest) longest = w[i].elapsed;
    }
    pthread_barrier_destroy(&sh.start);
    if (failed || longest <= 0) {
        fprintf(stderr, "gather_limit: a thread could not allocate its batch buffers\n");
        return 1;
    }
    double rps = (double)records / longest, gbs = rps * (double)record_bytes / 1e9;
    printf("gather_limit: %u thread(s), %zu records of %zu bytes in %u field(s) (%.2f GB), batch %zu: "
           "%.0f records/s, %.2f GB/s over %.2f s\n",
           sh.threads, sh.records, record_bytes, sh.nfields, (double)sh.records * (double)record_bytes / 1e9,
           sh.batch, rps, gbs, longest);
    printf("RESULT gather_limit_t%u %.1f records/s %.3f GB/s\n", sh.threads, rps, gbs);
    for (unsigned f = 0; f < sh.nfields; f++) munmap(sh.region[f], sh.records * sh.size[f]);
    free(perm);
    return 0;
}
