/* tests/faults/test_reader_faults.c - the reader attacked while it runs:
 * bytes flipped in mapped shards under verify=always, shards deleted or
 * replaced mid-run, thousands of open/close cycles (fds and memory flat;
 * LeakSanitizer in the ASan build), readers in parallel processes.
 *
 * Counts are printed ("RESULT ...") for the README's Reliability table;
 * STOKER_FAULT_TRIALS scales the flip trials (default 200). */
#define _GNU_SOURCE
#include "testutil_internal.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEED 9

static unsigned trials(unsigned dflt)
{
    const char *s = getenv("STOKER_FAULT_TRIALS"); /* STK_FAULT_TRIALS: its old name */
    if (!s) s = getenv("STK_FAULT_TRIALS");
    return s && atoi(s) > 0 ? (unsigned)atoi(s) : dflt;
}

/* A scratch dataset of n standard records in shards of `per`. */
static void make(char *dir, size_t cap, const char *name, uint64_t n, uint64_t per)
{
    tu_scratch_std_dataset(dir, cap, name, SEED, n, per);
}

static stk_reader *open_r(const char *dir, int order, int verify)
{
    stk_reader_options o = tu_reader_options(8, order);
    o.seed = 2;
    o.threads = 2;
    o.prefetch = 3;
    o.verify = verify;
    return tu_open_reader(dir, &o);
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

/* Flip one byte of one record's value (image, label or text) in the file
 * while a verify=always reader has it mapped: the epoch must end in a
 * checksum error naming that shard and record, never in bad data. */
START_TEST(flips_under_verify_always)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "flips", 90, 30);
    unsigned n = trials(200), detected = 0;
    srand(11);
    for (unsigned t = 0; t < n; t++) {
        stk_reader *r = open_r(dir, t % 2 ? STK_ORDER_SHUFFLE : STK_ORDER_SEQUENTIAL, STK_VERIFY_ALWAYS);
        stk_reader_set_epochs(r, 2);
        const stk_dataset *ds = stk_reader_dataset(r);
        uint64_t rec = (uint64_t)rand() % 90;
        unsigned field = (unsigned)rand() % 3;
        if (field == TU_TEXT && rec % 5 == 2) field = TU_IMAGE; /* empty text: nothing to flip */
        uint64_t local;
        const void *p;
        uint64_t size;
        const stk_shard *sh = tu_locate_value(ds, rec, field, &local, &p, &size);
        /* the value's offset in the file: its distance from the start of the
         * map, which is the image region's start minus that region's offset */
        size_t hl;
        uint8_t *file = tu_read(stk_shard_path(sh), &hl);
        stk__layout L;
        ck_assert_int_eq(stk__layout_decode(file, hl, hl, "shard", &L, NULL), 0);
        free(file);
        const uint8_t *map0 =
            (const uint8_t *)stk_shard_field_base(sh, TU_IMAGE) - L.region[TU_IMAGE].data_off;
        off_t off = (off_t)((const uint8_t *)p - map0) + (off_t)((unsigned)rand() % size);
        int fd = open(stk_shard_path(sh), O_RDWR);
        ck_assert_int_ge(fd, 0);
        uint8_t b;
        ck_assert_int_eq(pread(fd, &b, 1, off), 1);
        b ^= (uint8_t)(1u << (rand() % 8));
        ck_assert_int_eq(pwrite(fd, &b, 1, off), 1); /* the mapping sees it: MAP_SHARED */
        close(fd);
        stk_error err;
        const stk_batch *bt;
        while ((bt = stk_reader_next(r, &err))) {}
        char want[64];
        snprintf(want, sizeof want, "record %llu (dataset record %llu)", (unsigned long long)local,
                 (unsigned long long)rec);
        if (err.code == STK_E_CHECKSUM && strstr(err.msg, want) && strstr(err.msg, stk_shard_path(sh)))
            detected++;
        else
            fprintf(stderr, "flip %u (record %llu field %u) not reported: %s\n", t, (unsigned long long)rec,
                    field, err.msg);
        stk_reader_close(r);
        make(dir, sizeof dir, "flips", 90, 30); /* a clean copy for the next trial */
    }
    printf("RESULT reader_flips_detected %u of %u\n", detected, n);
    ck_assert_uint_eq(detected, n);
}
END_TEST

/* Deleted (unlinked) and renamed-over shards keep being read from the old
 * file; every value stays right. */
START_TEST(shard_deleted_mid_run)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "deleted", 120, 30);
    stk_reader *r = open_r(dir, STK_ORDER_SHUFFLE, STK_VERIFY_ALWAYS);
    stk_reader_set_epochs(r, 3);
    const stk_dataset *ds = stk_reader_dataset(r);
    stk_error err;
    const stk_batch *b;
    unsigned n = 0;
    while ((b = stk_reader_next(r, &err))) {
        if (n == 3) ck_assert_int_eq(unlink(stk_shard_path(stk_dataset_shard(ds, 1))), 0);
        if (n == 5) {
            char tmp[TU_PATH];
            snprintf(tmp, sizeof tmp, "%s.x", stk_shard_path(stk_dataset_shard(ds, 2)));
            tu_write(tmp, "not a shard", 11);
            ck_assert_int_eq(rename(tmp, stk_shard_path(stk_dataset_shard(ds, 2))), 0);
        }
        for (uint32_t i = 0; i < b->size; i++) {
            tu_record want;
            tu_std_record(&want, SEED, b->records[i]);
            ck_assert(memcmp((const uint16_t *)b->fields[TU_IMAGE].data + i * TU_IMG_ELEMS, want.image,
                             sizeof want.image) == 0);
        }
        n++;
    }
    ck_assert_msg(err.code == STK_OK, "%s", err.msg);
    ck_assert_uint_eq(n, 3 * 15);
    stk_reader_close(r);
}
END_TEST

/* Thousands of open/next/close cycles, some closing mid-stream with the
 * ring full: file descriptors and anonymous memory end where they started
 * (and the ASan build's LeakSanitizer fails the test on any leak). */
static long rss_anon_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

START_TEST(open_close_cycles_leak_nothing)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "cycles", 64, 16);
    unsigned n = trials(200) * 10;
    int fds0 = count_fds();
    long rss0 = 0, rss1;
    for (unsigned i = 0; i < n; i++) {
        stk_reader *r = open_r(dir, (int)(i % 3), (int)(i % 3));
        stk_error err;
        for (unsigned k = 0; k < i % 5; k++) ck_assert_ptr_nonnull(stk_reader_next(r, &err));
        stk_reader_close(r);
        if (i == n / 10) rss0 = rss_anon_kb(); /* after the allocator has warmed up */
    }
    rss1 = rss_anon_kb();
    int fds1 = count_fds();
    printf("RESULT reader_open_close_cycles %u fds %d -> %d rss_anon_kb %ld -> %ld\n", n, fds0, fds1, rss0,
           rss1);
    ck_assert_int_eq(fds1, fds0);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* the sanitizers keep freed memory in quarantine: LeakSanitizer checks leaks here instead */
#else
    ck_assert_msg(rss1 - rss0 < 8 * 1024, "anonymous memory grew by %ld kB over %u cycles", rss1 - rss0, n);
#endif
}
END_TEST

/* Six processes read the same dataset at once, verifying every record. */
START_TEST(parallel_processes)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "procs", 200, 40);
    pid_t pid[6];
    for (int k = 0; k < 6; k++) {
        pid[k] = fork();
        ck_assert_int_ge(pid[k], 0);
        if (pid[k] == 0) {
            stk_reader_options o;
            stk_reader_options_init(&o);
            o.batch_size = 10;
            o.order = k % 3;
            o.seed = (uint64_t)k;
            o.rank = k % 2;
            o.world_size = 2;
            o.threads = 2;
            o.verify = STK_VERIFY_ALWAYS;
            stk_error err;
            stk_reader *r = stk_reader_open(dir, &o, &err);
            if (!r) _exit(2);
            stk_reader_set_epochs(r, 4);
            uint64_t got = 0;
            while (stk_reader_next(r, &err)) got++;
            int ok = err.code == STK_OK && got == 4 * stk_reader_batches_per_epoch(r);
            stk_reader_close(r);
            _exit(ok ? 0 : 1);
        }
    }
    for (int k = 0; k < 6; k++) {
        int st;
        ck_assert_int_eq(waitpid(pid[k], &st, 0), pid[k]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "reader process %d failed (status %d)", k, st);
    }
}
END_TEST

TU_MAIN("reader faults", {.name = "faults",
                          .timeout = 600,
                          .tests = {flips_under_verify_always, shard_deleted_mid_run,
                                    open_close_cycles_leak_nothing, parallel_processes}})
