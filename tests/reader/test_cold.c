/*
 * tests/reader/test_cold.c - cold data under io=auto (reader/io_plan.c,
 * reader/fill.c): data made cold (posix_fadvise DONTNEED on the shard files)
 * is read through the map with the page cache filled ahead of the workers,
 * and is resident afterwards; data made resident (read whole) stays on the
 * map with no fill; opts.read_once reads cold data directly and leaves it
 * cold, resident data on the map; the batches are the same whichever path
 * and fill, in every order and thread count; the reason says each decision.
 * Where the scratch directory's file system keeps pages that DONTNEED should
 * drop (tmpfs), the cold cases say so and check only the batches.
 */
#define _GNU_SOURCE
#include "testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { N = 600, PER = 200, IMG = 64 * 64 * 4 };

/* A dataset of its own for each case: pages that a reader of this process
 * mapped once (2 MiB folios of the huge-page advice) may stay in the page
 * cache after DONTNEED for as long as the process lives, so files that no
 * reader has mapped yet are the ones made cold. */
static const char *cold_ds(const char *name)
{
    static char dirs[16][TU_PATH];
    static unsigned used;
    ck_assert_uint_lt(used, 16u);
    char *dir = dirs[used++];
    stk_schema s;
    stk_error e;
    const uint64_t img[3] = {64, 64, 4};
    stk_schema_init(&s);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "x", STK_DT_U64, 0, NULL, &e), STK_OK);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "image", STK_DT_U8, 3, img, &e), STK_OK);
    tu_scratch(dir, TU_PATH, name);
    tu_write_tensor_dataset(dir, &s, N, PER, 77);
    return dir;
}

/* Every shard file of dir: fn(path, fd). Returns the files seen. */
static unsigned each_shard(const char *dir, void (*fn)(int fd, void *arg), void *arg)
{
    size_t n = 0;
    char **names = tu_list(dir, &n);
    unsigned seen = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(names[i]);
        if (len < 4 || strcmp(names[i] + len - 4, ".stk")) continue;
        char path[TU_PATH];
        tu_join(path, sizeof path, dir, names[i]);
        int fd = open(path, O_RDONLY);
        ck_assert_msg(fd >= 0, "%s", path);
        fn(fd, arg);
        close(fd);
        seen++;
    }
    tu_free_names(names, n);
    return seen;
}

static void drop_fd(int fd, void *arg)
{
    (void)arg;
    fdatasync(fd); /* dirty pages cannot be dropped */
    ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
}

static void read_fd(int fd, void *arg)
{
    (void)arg;
    static char buf[1 << 16];
    while (read(fd, buf, sizeof buf) > 0) {}
}

typedef struct {
    uint64_t pages, resident;
} residency;

static void count_fd(int fd, void *arg)
{
    residency *c = arg;
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    size_t page = (size_t)sysconf(_SC_PAGESIZE), np = ((size_t)st.st_size + page - 1) / page;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    ck_assert(m != MAP_FAILED);
    unsigned char *v = malloc(np);
    ck_assert_int_eq(mincore(m, (size_t)st.st_size, v), 0);
    for (size_t i = 0; i < np; i++) c->resident += v[i] & 1;
    c->pages += np;
    free(v);
    munmap(m, (size_t)st.st_size);
}

/* The fraction of the shard files' pages in the page cache. */
static double resident_fraction(const char *dir)
{
    residency c = {0, 0};
    ck_assert_uint_eq(each_shard(dir, count_fd, &c), N / PER);
    return c.pages ? (double)c.resident / (double)c.pages : 0;
}

/* Drop the dataset's pages; 0 where the file system keeps them (tmpfs). */
static int make_cold(const char *dir)
{
    each_shard(dir, drop_fd, NULL);
    double f = resident_fraction(dir);
    if (f > 0.1) {
        printf("test_cold: %.0f%% of the shard pages stay resident after DONTNEED here (tmpfs?): "
               "the cold cases check the batches only\n",
               f * 100);
        return 0;
    }
    return 1;
}

static void make_resident(const char *dir)
{
    each_shard(dir, read_fd, NULL);
    ck_assert_msg(resident_fraction(dir) > 0.9, "the shard files did not stay in the page cache");
}

static stk_reader_io_stats io_stats(stk_reader *r)
{
    stk_reader_io_stats s;
    stk_reader_io_stats_get(r, &s);
    return s;
}

/* Every batch of `epochs` epochs of a and b hold the same records and bytes. */
static void same_batches(stk_reader *a, stk_reader *b, unsigned epochs, const char *what)
{
    stk_error e1, e2;
    stk_reader_set_epochs(a, epochs);
    stk_reader_set_epochs(b, epochs);
    uint64_t n = 0;
    for (;;) {
        const stk_batch *x = stk_reader_next(a, &e1), *y = stk_reader_next(b, &e2);
        ck_assert_msg((x == NULL) == (y == NULL), "%s: one reader ended first (%s / %s)", what, e1.msg,
                      e2.msg);
        if (!x) break;
        ck_assert_msg(x->size == y->size && x->epoch == y->epoch && x->index == y->index, "%s: batch %llu",
                      what, (unsigned long long)n);
        ck_assert_msg(!memcmp(x->records, y->records, x->size * sizeof *x->records), "%s: records", what);
        for (unsigned k = 0; k < x->nfields; k++)
            ck_assert_msg(x->fields[k].nbytes == y->fields[k].nbytes &&
                              !memcmp(x->fields[k].data, y->fields[k].data, x->fields[k].nbytes),
                          "%s: batch %llu field %s differs", what, (unsigned long long)n, x->fields[k].name);
        n++;
    }
    ck_assert_msg(e1.code == STK_OK && e2.code == STK_OK, "%s: %s / %s", what, e1.msg, e2.msg);
    ck_assert_uint_gt(n, 0);
}

/* Read every batch of one epoch. */
static void drain(stk_reader *r)
{
    stk_error e;
    stk_reader_set_epochs(r, 1);
    while (stk_reader_next(r, &e)) {}
    ck_assert_msg(e.code == STK_OK, "%s", e.msg);
}

/* The fill's threads run beside the workers: wait (bounded) for them to
 * have brought in what the epoch covers. No time is asserted. */
static uint64_t wait_filled(stk_reader *r, uint64_t want)
{
    uint64_t got = 0;
    for (int i = 0; i < 3000 && (got = io_stats(r).filled_bytes) < want; i++) usleep(10000);
    return got;
}

START_TEST(cold_fills_ahead)
{
    const char *dir = cold_ds("fill");
    if (!make_cold(dir)) return;
    stk_reader_options o = tu_reader_options(32, STK_ORDER_SHUFFLE);
    o.threads = 2;
    stk_reader *r = tu_open_reader(dir, &o);
    stk_reader_io_stats s = io_stats(r);
    ck_assert_int_eq(s.io, STK_IO_MMAP);
    ck_assert_int_eq(s.read_once, 0);
    ck_assert_msg(strstr(s.reason, "auto: ") == s.reason && strstr(s.reason, "are cold (") &&
                      strstr(s.reason, "read ahead of the workers along the order (2 MiB runs"),
                  "%s", s.reason);
    drain(r);
    /* the image column, every record of it (the runs around it too) */
    ck_assert_uint_ge(wait_filled(r, (uint64_t)N * IMG), (uint64_t)N * IMG);
    stk_reader_close(r);
    /* the page cache holds it for the next epochs and runs */
    double f = resident_fraction(dir);
    ck_assert_msg(f > 0.9, "after a filled epoch %.2f of the shard pages are resident", f);
}
END_TEST

START_TEST(resident_no_fill)
{
    const char *dir = cold_ds("resident");
    make_resident(dir);
    stk_reader_options o = tu_reader_options(32, STK_ORDER_SHUFFLE);
    stk_reader *r = tu_open_reader(dir, &o);
    stk_reader_io_stats s = io_stats(r);
    ck_assert_int_eq(s.io, STK_IO_MMAP);
    ck_assert_msg(strstr(s.reason, "fit in memory") && !strstr(s.reason, "read ahead") &&
                      !strstr(s.reason, "read once"),
                  "%s", s.reason);
    drain(r);
    ck_assert_uint_eq(io_stats(r).filled_bytes, 0);
    stk_reader_close(r);
    /* read once changes nothing for resident data: there is no fill to avoid */
    o.read_once = 1;
    r = tu_open_reader(dir, &o);
    s = io_stats(r);
    ck_assert_int_eq(s.io, STK_IO_MMAP);
    ck_assert_int_eq(s.read_once, 1);
    ck_assert_msg(strstr(s.reason, "; read once: resident already, no page-cache fill to avoid"), "%s",
                  s.reason);
    stk_reader_close(r);
}
END_TEST

START_TEST(read_once_cold)
{
    const char *dir = cold_ds("once");
    if (!make_cold(dir)) return;
    stk_reader_options o = tu_reader_options(32, STK_ORDER_SEQUENTIAL);
    o.read_once = 1;
    stk_reader *r = tu_open_reader(dir, &o);
    stk_reader_io_stats s = io_stats(r);
    ck_assert_int_eq(s.io, STK_IO_DIRECT);
    ck_assert_int_eq(s.read_once, 1);
    ck_assert_msg(strstr(s.reason, "auto, read once: the selected fields") == s.reason &&
                      strstr(s.reason, "no page-cache fill"),
                  "%s", s.reason);
    drain(r);
    s = io_stats(r);
    ck_assert_uint_eq(s.filled_bytes, 0);
    ck_assert_uint_gt(s.reads, 0);
    stk_reader_close(r);
    /* the image column came O_DIRECT: still cold (the x column, under a page
     * per run, came through the map) */
    if (!s.buffered_files) {
        double f = resident_fraction(dir);
        ck_assert_msg(f < 0.5, "read once left %.2f of the shard pages resident", f);
    }
    /* a value other than 0 or 1 is refused */
    o.read_once = 2;
    stk_error e;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &e));
    ck_assert_msg(e.code == STK_E_ARG && strstr(e.msg, "read_once 2"), "%s", e.msg);
}
END_TEST

/* The batches do not depend on the path auto takes: cold with the fill,
 * read once (direct), and the plain map, every order, 1 and 3 threads, two
 * epochs. */
START_TEST(same_batches_every_path)
{
    static const int orders[] = {STK_ORDER_SEQUENTIAL, STK_ORDER_SHUFFLE, STK_ORDER_QUASI};
    for (unsigned oi = 0; oi < 3; oi++)
        for (unsigned t = 1; t <= 3; t += 2)
            for (int once = 0; once < 2; once++) {
                char what[96];
                snprintf(what, sizeof what, "order %d, %u threads, read_once %d", orders[oi], t, once);
                char name[32];
                snprintf(name, sizeof name, "same-%u-%u-%d", oi, t, once);
                const char *dir = cold_ds(name);
                int cold = make_cold(dir);
                stk_reader_options o = tu_reader_options(24, orders[oi]);
                o.threads = t;
                o.quasi_block_bytes = 8 * IMG;
                o.quasi_window = 4;
                o.read_once = once;
                stk_reader *got = tu_open_reader(dir, &o); /* auto, decided on cold data */
                o.io = STK_IO_MMAP;
                o.read_once = 0;
                stk_reader *ref = tu_open_reader(dir, &o);
                stk_reader_io_stats s = io_stats(got);
                if (cold)
                    ck_assert_msg(once ? s.io == STK_IO_DIRECT : strstr(s.reason, "read ahead") != NULL,
                                  "%s: %s", what, s.reason);
                same_batches(ref, got, 2, what);
                stk_reader_close(got);
                stk_reader_close(ref);
            }
}
END_TEST

TU_MAIN("cold", {.name = "cold",
                 .timeout = 300,
                 .tests = {cold_fills_ahead, resident_no_fill, read_once_cold, same_batches_every_path}})
