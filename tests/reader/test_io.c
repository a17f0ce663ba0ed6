/*
 * tests/reader/test_io.c - the direct read path (reader/io.c) against the
 * mmap path: every order, tail, thread count and rank, both engines
 * (io_uring and the pread pool), aligned and unaligned strides, bytes and
 * compressed fields, resume; short reads, EINTR and EAGAIN injected through
 * the engine's fault seam (STOKER_IO_FAULT) and retried; a failed read and a
 * shard truncated in place name the shard and the record; a shard replaced
 * by rename is still read from the file the dataset opened.
 */
#include "reader_impl.h" /* stk__io_auto_rule */
#include "testutil.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 157, PER = 20, IMG = 32 * 32 * 4, ODD = 40 * 40 * 3 };
static const char *const ENGINES[] = {"io_uring", "threads"};

static void make_dataset(char *dir, size_t cap, const char *name, int compress)
{
    stk_schema s;
    stk_error e;
    const uint64_t img[3] = {32, 32, 4}, odd[3] = {40, 40, 3};
    stk_schema_init(&s);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "x", STK_DT_U64, 0, NULL, &e), STK_OK);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "image", STK_DT_U8, 3, img, &e), STK_OK);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "odd", STK_DT_U8, 3, odd, &e), STK_OK);
    ck_assert_int_eq(stk_schema_add_bytes(&s, "text", &e), STK_OK);
    if (compress) ck_assert_int_eq(stk_schema_set_codec(&s, 1, STK_CODEC_ZSTD, &e), STK_OK);
    tu_scratch(dir, cap, name);
    stk_dataset_options o;
    memset(&o, 0, sizeof o);
    o.records_per_shard = PER;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    static uint8_t im[IMG], od[ODD];
    char text[32];
    for (uint64_t i = 0; i < N; i++) {
        tu_fill(im, compress ? IMG / 4 : IMG, 1000 + i); /* compressible when asked */
        tu_fill(od, ODD, 5000 + i);
        int tl = snprintf(text, sizeof text, "record %llu", (unsigned long long)i);
        stk_value v[4] = {{&i, 8}, {im, IMG}, {od, ODD}, {text, (uint64_t)tl}};
        ck_assert_msg(stk_dataset_writer_append(dw, v, &e) == STK_OK, "%s", e.msg);
    }
    ck_assert_msg(stk_dataset_writer_finish(dw, &e) == STK_OK, "%s", e.msg);
}

static const char *plain_ds(void)
{
    static char dir[TU_PATH];
    if (!dir[0]) make_dataset(dir, sizeof dir, "plain", 0);
    return dir;
}

/* Two batches hold the same records and the same bytes in every field. */
static void same_batch(const stk_batch *a, const stk_batch *b, const char *what)
{
    ck_assert_msg(a->size == b->size && a->epoch == b->epoch && a->index == b->index, "%s: batch shape",
                  what);
    ck_assert_msg(!memcmp(a->records, b->records, a->size * sizeof *a->records), "%s: records", what);
    ck_assert_uint_eq(a->nfields, b->nfields);
    for (unsigned k = 0; k < a->nfields; k++) {
        const stk_batch_field *fa = &a->fields[k], *fb = &b->fields[k];
        ck_assert_msg(fa->nbytes == fb->nbytes, "%s: field %s size", what, fa->name);
        if (fa->kind == STK_KIND_TENSOR) {
            ck_assert_msg(!memcmp(fa->data, fb->data, fa->nbytes),
                          "%s: epoch %llu batch %llu field %s differs", what, (unsigned long long)a->epoch,
                          (unsigned long long)a->index, fa->name);
        } else {
            for (uint32_t i = 0; i < a->size; i++)
                ck_assert_msg(fa->values[i].size == fb->values[i].size &&
                                  !memcmp(fa->values[i].data, fb->values[i].data, fa->values[i].size),
                              "%s: bytes value %u of field %s", what, i, fa->name);
        }
    }
}

/* Read `batches` batches from both readers in lockstep, comparing each. */
static void same_stream(stk_reader *ref, stk_reader *got, uint64_t batches, const char *what)
{
    stk_error e1, e2;
    for (uint64_t j = 0; j < batches; j++) {
        const stk_batch *a = stk_reader_next(ref, &e1), *b = stk_reader_next(got, &e2);
        ck_assert_msg(a != NULL, "%s: mmap reader: %s", what, e1.msg);
        ck_assert_msg(b != NULL, "%s: direct reader: %s", what, e2.msg);
        same_batch(a, b, what);
    }
}

static stk_reader *open_io(const char *dir, const stk_reader_options *base, int io)
{
    stk_reader_options o = *base;
    o.io = io;
    return tu_open_reader(dir, &o);
}

static void check_direct(stk_reader *r, const char *engine, int expect_bounce)
{
    stk_reader_io_stats s;
    stk_reader_io_stats_get(r, &s);
    ck_assert_int_eq(s.io, STK_IO_DIRECT);
    ck_assert_int_eq(s.engine, strcmp(engine, "threads") ? STK_IO_ENGINE_URING : STK_IO_ENGINE_THREADS);
    ck_assert_uint_gt(s.reads, 0);
    ck_assert_uint_gt(s.bytes, 0);
    if (expect_bounce) ck_assert_uint_gt(s.bounced_bytes, 0);
    ck_assert_msg(!strncmp(s.reason, "direct: asked for", 17), "%s", s.reason);
}

/* io_uring refused by the kernel falls back with a note: then this machine
 * cannot test the ring, and says so. */
static int have_uring(void)
{
    static int known = -1;
    if (known < 0) {
        stk_reader_options o = tu_reader_options(4, STK_ORDER_SEQUENTIAL);
        setenv("STOKER_IO_ENGINE", "io_uring", 1);
        stk_reader *r = open_io(plain_ds(), &o, STK_IO_DIRECT);
        stk_reader_io_stats s;
        stk_reader_io_stats_get(r, &s);
        known = s.engine == STK_IO_ENGINE_URING;
        if (!known)
            printf("test_io: io_uring unavailable here (%s): only the thread pool is tested\n", s.reason);
        stk_reader_close(r);
    }
    return known;
}

START_TEST(same_batches)
{
    const char *engine = ENGINES[_i];
    if (_i == 0 && !have_uring()) return;
    setenv("STOKER_IO_ENGINE", engine, 1);
    static const int tails[] = {STK_TAIL_PAD, STK_TAIL_PARTIAL, STK_TAIL_DROP};
    for (int order = 0; order < 3; order++)
        for (int t = 0; t < 3; t++)
            for (unsigned threads = 1; threads <= 3; threads += 2)
                for (int world = 1; world <= 2; world++) {
                    stk_reader_options o = tu_reader_options(12, order);
                    o.tail = tails[t];
                    o.threads = threads;
                    o.world_size = world;
                    o.rank = world - 1;
                    o.seed = 7;
                    /* the block-read bound below is for a fixed thread count: a
                     * tuner changing threads mid-run may read a block twice */
                    o.tuning = STK_TUNING_OFF;
                    /* about 3 records a block: blocks straddle the shards of 20 */
                    o.quasi_block_bytes = 7 * (8 + IMG + ODD + 16) / 2;
                    o.quasi_window = 3;
                    char what[128];
                    snprintf(what, sizeof what, "%s order %d tail %d threads %u rank %d/%d", engine, order,
                             tails[t], threads, o.rank, world);
                    stk_reader *ref = open_io(plain_ds(), &o, STK_IO_MMAP),
                               *got = open_io(plain_ds(), &o, STK_IO_DIRECT);
                    same_stream(ref, got, 2 * stk_reader_batches_per_epoch(ref) + 1, what);
                    check_direct(got, engine, 1);
                    stk_reader_io_stats st;
                    stk_reader_io_stats_get(got, &st);
                    /* one rank reads quasi blocks whole; several ranks, record by record */
                    ck_assert_msg((st.quasi_blocks > 0) == (order == STK_ORDER_QUASI && world == 1),
                                  "%s: %llu blocks", what, (unsigned long long)st.quasi_blocks);
                    /* reading the next window ahead does not read blocks twice: 2 epochs and a
                     * batch of 3-record blocks are at most 3 x 53 block reads */
                    ck_assert_msg(st.quasi_blocks <= 3 * ((N + 2) / 3), "%s: %llu block reads", what,
                                  (unsigned long long)st.quasi_blocks);
                    stk_reader_close(ref);
                    stk_reader_close(got);
                }
    unsetenv("STOKER_IO_ENGINE");
}
END_TEST

/* One field at a time too: aligned alone (no bounce), unaligned alone. */
START_TEST(field_selection)
{
    static const char *const sel[] = {"image", "odd", "x,odd", "text,image"};
    for (unsigned i = 0; i < 4; i++) {
        stk_reader_options o = tu_reader_options(9, STK_ORDER_SHUFFLE);
        o.fields = sel[i];
        o.threads = 2;
        stk_reader *ref = open_io(plain_ds(), &o, STK_IO_MMAP), *got = open_io(plain_ds(), &o, STK_IO_DIRECT);
        same_stream(ref, got, 30, sel[i]);
        stk_reader_io_stats s;
        stk_reader_io_stats_get(got, &s);
        ck_assert_int_eq(s.io, STK_IO_DIRECT);
        if (!strcmp(sel[i], "image")) ck_assert_uint_eq(s.bounced_bytes, 0);
        else if (strstr(sel[i], "odd")) ck_assert_uint_gt(s.bounced_bytes, 0);
        stk_reader_close(ref);
        stk_reader_close(got);
    }
}
END_TEST

START_TEST(faults_retried)
{
    const char *engine = ENGINES[_i];
    if (_i == 0 && !have_uring()) return;
    setenv("STOKER_IO_ENGINE", engine, 1);
    setenv("STOKER_IO_FAULT", "short:3,eintr:4,eagain:7", 1);
    for (int order = 0; order < 3; order++) {
        stk_reader_options o = tu_reader_options(16, order);
        o.threads = 2;
        stk_reader *ref = open_io(plain_ds(), &o, STK_IO_MMAP), *got = open_io(plain_ds(), &o, STK_IO_DIRECT);
        same_stream(ref, got, 25, engine);
        stk_reader_io_stats s;
        stk_reader_io_stats_get(got, &s);
        ck_assert_uint_gt(s.retries, 0);
        stk_reader_close(ref);
        stk_reader_close(got);
    }
    unsetenv("STOKER_IO_FAULT");
    unsetenv("STOKER_IO_ENGINE");
}
END_TEST

/* A read failing with EIO on record 5 of shard 1 (dataset record 25). */
START_TEST(read_error_names_record)
{
    const char *engine = ENGINES[_i];
    if (_i == 0 && !have_uring()) return;
    setenv("STOKER_IO_ENGINE", engine, 1);
    setenv("STOKER_IO_FAULT", "eio:1/5", 1);
    stk_reader_options o = tu_reader_options(1, STK_ORDER_SEQUENTIAL);
    o.fields = "image";
    stk_reader *r = open_io(plain_ds(), &o, STK_IO_DIRECT);
    stk_error e;
    const stk_batch *b;
    uint64_t good = 0;
    while ((b = stk_reader_next(r, &e))) good++;
    ck_assert_uint_eq(good, PER + 5);
    ck_assert_int_eq(e.code, STK_E_IO);
    ck_assert_msg(strstr(e.msg, "-00001.stk: record 5: read of 4096 bytes"), "%s", e.msg);
    ck_assert_msg(strstr(e.msg, strerror(EIO)), "%s", e.msg);
    ck_assert_ptr_null(stk_reader_next(r, &e)); /* sticky */
    ck_assert_int_eq(e.code, STK_E_IO);
    stk_reader_close(r);
    unsetenv("STOKER_IO_FAULT");
    unsetenv("STOKER_IO_ENGINE");
}
END_TEST

/* The same in quasi order, where blocks are read whole: the block's read
 * fails, and every batch that needs one of its records says so. */
START_TEST(quasi_block_read_error)
{
    const char *engine = ENGINES[_i];
    if (_i == 0 && !have_uring()) return;
    setenv("STOKER_IO_ENGINE", engine, 1);
    setenv("STOKER_IO_FAULT", "eio:1/5", 1);
    stk_reader_options o = tu_reader_options(6, STK_ORDER_QUASI);
    o.quasi_block_bytes = 4 * (8 + IMG + ODD + 16);
    o.threads = 2;
    stk_reader *r = open_io(plain_ds(), &o, STK_IO_DIRECT);
    stk_error e;
    uint64_t n = 0;
    while (stk_reader_next(r, &e)) n++;
    ck_assert_uint_lt(n, stk_reader_batches_per_epoch(r));
    ck_assert_int_eq(e.code, STK_E_IO);
    ck_assert_msg(strstr(e.msg, "-00001.stk: records ") && strstr(e.msg, strerror(EIO)), "%s", e.msg);
    stk_reader_close(r);
    unsetenv("STOKER_IO_FAULT");
    unsetenv("STOKER_IO_ENGINE");
}
END_TEST

START_TEST(truncated_shard)
{
    char dir[TU_PATH], path[TU_PATH];
    make_dataset(dir, sizeof dir, "trunc", 0);
    stk_reader_options o = tu_reader_options(PER, STK_ORDER_SEQUENTIAL);
    o.prefetch = 1; /* all fields: the small ones are copied from the map, which must be checked first */
    o.threads = 1;
    stk_reader *r = open_io(dir, &o, STK_IO_DIRECT);
    stk_error e;
    ck_assert_ptr_nonnull(stk_reader_next(r, &e)); /* shard 0; shard 1 may be read ahead */
    ck_assert_ptr_nonnull(stk_reader_next(r, &e));
    tu_join(path, sizeof path, dir, "shard-00003.stk");
    ck_assert_int_eq(truncate(path, 0), 0); /* in place, under the mapping: its small columns too */
    const stk_batch *b;
    while ((b = stk_reader_next(r, &e)) && b->index < 3) {}
    ck_assert_ptr_null(b);
    ck_assert_msg(e.code == STK_E_TRUNCATED, "%d %s", e.code, e.msg);
    ck_assert_msg(strstr(e.msg, "shard-00003.stk") && strstr(e.msg, "record"), "%s", e.msg);
    stk_reader_close(r);
}
END_TEST

/* A shard replaced by rename after the dataset was opened: the reader reads
 * the file the dataset opened (through its mapping), not the new one. */
START_TEST(replaced_shard)
{
    char dir[TU_PATH], other[TU_PATH], path[TU_PATH], tmp[TU_PATH];
    make_dataset(dir, sizeof dir, "replaced", 0);
    make_dataset(other, sizeof other, "replaced_other", 1);
    stk_error e;
    stk_dataset *ds = stk_dataset_open(dir, &e);
    ck_assert_msg(ds != NULL, "%s", e.msg);
    stk_reader_options o = tu_reader_options(7, STK_ORDER_SHUFFLE);
    o.io = STK_IO_MMAP;
    stk_reader *ref = stk_reader_open_dataset(ds, &o, &e);
    ck_assert_msg(ref != NULL, "%s", e.msg);
    tu_join(path, sizeof path, dir, "shard-00002.stk");
    tu_join(tmp, sizeof tmp, other, "shard-00002.stk");
    ck_assert_int_eq(rename(tmp, path), 0);
    o.io = STK_IO_DIRECT;
    stk_reader *got = stk_reader_open_dataset(ds, &o, &e);
    ck_assert_msg(got != NULL, "%s", e.msg);
    same_stream(ref, got, 2 * stk_reader_batches_per_epoch(ref), "replaced");
    stk_reader_io_stats s;
    stk_reader_io_stats_get(got, &s);
    ck_assert_uint_gt(s.map_reads, 0);
    stk_reader_close(ref);
    stk_reader_close(got);
    stk_dataset_close(ds);
}
END_TEST

START_TEST(resume)
{
    stk_reader_options o = tu_reader_options(10, STK_ORDER_QUASI);
    o.quasi_block_bytes = 3 * (8 + IMG + ODD + 16);
    o.threads = 2;
    stk_reader *ref = open_io(plain_ds(), &o, STK_IO_MMAP), *first = open_io(plain_ds(), &o, STK_IO_DIRECT);
    same_stream(ref, first, 21, "before");
    stk_reader_state st;
    stk_reader_save(first, &st);
    stk_reader_close(first);
    stk_reader *again = open_io(plain_ds(), &o, STK_IO_DIRECT);
    stk_error e;
    ck_assert_msg(stk_reader_restore(again, &st, &e) == STK_OK, "%s", e.msg);
    same_stream(ref, again, 25, "after restore");
    ck_assert_int_eq(stk_reader_seek(again, 3, 2, &e), STK_OK);
    ck_assert_int_eq(stk_reader_seek(ref, 3, 2, &e), STK_OK);
    same_stream(ref, again, 5, "after seek");
    stk_reader_close(ref);
    stk_reader_close(again);
}
END_TEST

/* A compressed field is read through the block cache; the plain ones of
 * the same dataset directly. */
START_TEST(compressed)
{
    char dir[TU_PATH];
    make_dataset(dir, sizeof dir, "zstd", 1);
    for (int order = 0; order < 3; order++) {
        stk_reader_options o = tu_reader_options(8, order);
        o.threads = 2;
        stk_reader *ref = open_io(dir, &o, STK_IO_MMAP), *got = open_io(dir, &o, STK_IO_DIRECT);
        same_stream(ref, got, 45, "compressed");
        stk_reader_io_stats s;
        stk_reader_io_stats_get(got, &s);
        ck_assert_int_eq(s.io, STK_IO_DIRECT);
        stk_reader_close(ref);
        stk_reader_close(got);
    }
    /* only the compressed field (and a bytes field): its blocks' frames come
     * through the engine, on both engines, in every order, and decode to the
     * same batches as through the map */
    for (int e = 0; e < 2; e++) {
        if (e == 0 && !have_uring()) continue;
        setenv("STOKER_IO_ENGINE", ENGINES[e], 1);
        for (int order = 0; order < 3; order++) {
            stk_reader_options o = tu_reader_options(8, order);
            o.threads = 2;
            o.fields = "image,text";
            stk_reader *ref = open_io(dir, &o, STK_IO_MMAP), *got = open_io(dir, &o, STK_IO_DIRECT);
            same_stream(ref, got, 45, "compressed only");
            stk_reader_io_stats s;
            stk_reader_io_stats_get(got, &s);
            ck_assert_int_eq(s.io, STK_IO_DIRECT);
            ck_assert_msg(s.reads > 0 && s.bytes > 0, "%s order %d: %llu block reads", ENGINES[e], order,
                          (unsigned long long)s.reads);
            stk_reader_close(ref);
            stk_reader_close(got);
        }
    }
    unsetenv("STOKER_IO_ENGINE");
    /* nothing but a bytes field: the direct path has nothing to do, and says so */
    stk_reader_options o = tu_reader_options(8, STK_ORDER_SHUFFLE);
    o.fields = "text";
    stk_reader *r = open_io(dir, &o, STK_IO_DIRECT);
    stk_reader_io_stats s;
    stk_reader_io_stats_get(r, &s);
    ck_assert_int_eq(s.io, STK_IO_MMAP);
    ck_assert_msg(strstr(s.reason, "no tensor or compressed field"), "%s", s.reason);
    stk_reader_close(r);
}
END_TEST

/* A compressed block whose read fails names the shard and its records. */
START_TEST(compressed_read_error)
{
    char dir[TU_PATH];
    make_dataset(dir, sizeof dir, "zstd_eio", 1);
    setenv("STOKER_IO_FAULT", "eio:1/1", 1);
    stk_reader_options o = tu_reader_options(8, STK_ORDER_SEQUENTIAL);
    o.fields = "image";
    stk_reader *r = open_io(dir, &o, STK_IO_DIRECT);
    stk_error err;
    uint64_t good = 0;
    while (stk_reader_next(r, &err)) good++;
    ck_assert_uint_eq(good, PER / 8); /* the batches before shard 1's block */
    ck_assert_int_eq(err.code, STK_E_IO);
    ck_assert_msg(strstr(err.msg, "-00001.stk: records 0-19: read of"), "%s", err.msg);
    ck_assert_msg(strstr(err.msg, strerror(EIO)), "%s", err.msg);
    stk_reader_close(r);
    unsetenv("STOKER_IO_FAULT");
}
END_TEST

/* auto's rule on its own (the reader feeds it /proc/meminfo and a mincore
 * sample, which a test cannot set): a machine of 24 GB with 22 GB available. */
START_TEST(auto_rule)
{
    const uint64_t G = 1000000000ull, ram = 24 * G, avail = 22 * G;
    char why[STK_ERROR_MSG_MAX];
#define RULE(bytes, hit, probed, huge) \
  stk__io_auto_rule(bytes, ram, avail, hit, probed, huge, why, sizeof why)
    /* cold, within half of the available memory, maps advised huge pages:
     * the page cache keeps it for the next epochs */
    ck_assert_int_eq(RULE(8 * G, 1, 64, 1), STK_IO_MMAP);
    ck_assert_msg(strstr(why, "cold (1 of 64 sampled pages resident) but fit in memory"), "%s", why);
    ck_assert_int_eq(RULE(11 * G, 0, 64, 1), STK_IO_MMAP);
    /* cold and past half of it: direct */
    ck_assert_int_eq(RULE(11 * G + 1, 0, 64, 1), STK_IO_DIRECT);
    ck_assert_msg(strstr(why, "larger than half of available memory (22.0 GB)"), "%s", why);
    /* cold, maps not advised: direct past a quarter, the map below it */
    ck_assert_int_eq(RULE(5500000001ull, 0, 64, 0), STK_IO_DIRECT);
    ck_assert_msg(strstr(why, "than a quarter of available memory (22.0 GB), and their maps are not advised"),
                  "%s", why);
    ck_assert_int_eq(RULE(5500000000ull, 0, 64, 0), STK_IO_MMAP);
    ck_assert_int_eq(RULE(11 * G + 1, 0, 64, 0), STK_IO_DIRECT); /* past half: said so, advice or not */
    ck_assert_msg(strstr(why, "larger than half of available memory (22.0 GB)") &&
                      !strstr(why, "not advised"),
                  "%s", why);
    /* the same bytes resident (half the sample or more): mmap */
    ck_assert_int_eq(RULE(11 * G + 1, 32, 64, 0), STK_IO_MMAP);
    ck_assert_msg(strstr(why, "32 of 64 sampled pages resident) fit in memory"), "%s", why);
    /* past half of RAM: direct, resident or not; at it, the map */
    ck_assert_int_eq(RULE(12 * G + 1, 64, 64, 1), STK_IO_DIRECT);
    ck_assert_msg(strstr(why, "larger than half of RAM (24.0 GB)"), "%s", why);
    ck_assert_int_eq(RULE(12 * G, 64, 64, 1), STK_IO_MMAP);
    /* nothing sampled: the map */
    ck_assert_int_eq(RULE(11 * G + 1, 0, 0, 0), STK_IO_MMAP);
#undef RULE
    /* memory unknown: the map, and the reason says so */
    ck_assert_int_eq(stk__io_auto_rule(100 * G, 0, 0, 0, 64, 0, why, sizeof why), STK_IO_MMAP);
    ck_assert_msg(strstr(why, "cold (0 of 64") && strstr(why, "available memory unknown"), "%s", why);
    ck_assert_int_eq(stk__io_auto_rule(100 * G, 0, 0, 64, 64, 0, why, sizeof why), STK_IO_MMAP);
    ck_assert_msg(strstr(why, "64 of 64 sampled pages resident); available memory unknown"), "%s", why);
}
END_TEST

START_TEST(auto_and_options)
{
    stk_reader_options o = tu_reader_options(8, STK_ORDER_SHUFFLE);
    stk_reader *r = tu_open_reader(plain_ds(), &o);
    stk_reader_io_stats s;
    stk_reader_io_stats_get(r, &s);
    /* a 2 MB dataset on any machine that runs the tests fits in memory */
    ck_assert_int_eq(s.io, STK_IO_MMAP);
    ck_assert_msg(!strncmp(s.reason, "auto: ", 6), "%s", s.reason);
    ck_assert_int_eq(stk_reader_get_options(r)->io, STK_IO_MMAP);
    stk_reader_close(r);

    setenv("STOKER_IO", "direct", 1);
    r = tu_open_reader(plain_ds(), &o);
    stk_reader_io_stats_get(r, &s);
    ck_assert_int_eq(s.io, STK_IO_DIRECT);
    ck_assert_uint_eq(s.depth, 32);
    stk_reader_close(r);

    stk_error e;
    setenv("STOKER_IO", "fast", 1);
    ck_assert_ptr_null(stk_reader_open(plain_ds(), &o, &e));
    ck_assert_msg(e.code == STK_E_ARG && strstr(e.msg, "STOKER_IO='fast'"), "%s", e.msg);
    unsetenv("STOKER_IO");

    o.io = 9;
    ck_assert_ptr_null(stk_reader_open(plain_ds(), &o, &e));
    ck_assert_msg(e.code == STK_E_ARG && strstr(e.msg, "io 9"), "%s", e.msg);
    o.io = STK_IO_DIRECT;
    o.io_depth = 5000;
    ck_assert_ptr_null(stk_reader_open(plain_ds(), &o, &e));
    ck_assert_msg(e.code == STK_E_ARG && strstr(e.msg, "io_depth"), "%s", e.msg);

    o.io_depth = 3;
    setenv("STOKER_IO_FAULT", "eintr:1", 1); /* would retry forever */
    ck_assert_ptr_null(stk_reader_open(plain_ds(), &o, &e));
    ck_assert_msg(e.code == STK_E_ARG && strstr(e.msg, "forever"), "%s", e.msg);
    setenv("STOKER_IO_FAULT", "short:x", 1);
    ck_assert_ptr_null(stk_reader_open(plain_ds(), &o, &e));
    ck_assert_msg(e.code == STK_E_ARG && strstr(e.msg, "STOKER_IO_FAULT"), "%s", e.msg);
    unsetenv("STOKER_IO_FAULT");
    setenv("STOKER_IO_ENGINE", "aio", 1);
    ck_assert_ptr_null(stk_reader_open(plain_ds(), &o, &e));
    ck_assert_msg(e.code == STK_E_ARG && strstr(e.msg, "STOKER_IO_ENGINE"), "%s", e.msg);
    unsetenv("STOKER_IO_ENGINE");

    r = tu_open_reader(plain_ds(), &o);
    stk_reader_io_stats_get(r, &s);
    ck_assert_uint_eq(s.depth, 3);
    stk_reader_close(r);
}
END_TEST

/* The bounce area of unaligned fields counts in the memory budget. */
START_TEST(memory_budget)
{
    stk_reader_options o = tu_reader_options(16, STK_ORDER_SHUFFLE);
    o.fields = "odd";
    o.threads = 2;
    o.prefetch = 1;
    stk_error e;
    uint64_t lo = 1, hi = 1ull << 30; /* the smallest budget the mmap path takes */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        o.memory_budget = mid;
        o.io = STK_IO_MMAP;
        stk_reader *r = stk_reader_open(plain_ds(), &o, &e);
        if (r) hi = mid;
        else lo = mid + 1;
        stk_reader_close(r);
    }
    o.memory_budget = lo;
    o.io = STK_IO_DIRECT;
    ck_assert_ptr_null(stk_reader_open(plain_ds(), &o, &e));
    ck_assert_msg(e.code == STK_E_ARG && strstr(e.msg, "memory budget"), "%s", e.msg);
}
END_TEST

/* Quasi order reads records of 128 KiB and more one by one (io_plan.c:
 * reads that large run at the device's block rate) and smaller ones in
 * blocks; STOKER_QUASI_BLOCKS=1 asks for blocks whatever the size. Both give
 * the mmap path's batches. */
enum { BIG_N = 30, BIG = 128 * 256 * 4 }; /* 128 KiB: the bound itself */

/* n records of a u64 and a 128 KiB tensor, per to a shard, in scratch
 * directory `name`. */
static void make_big(char *dir, size_t cap, const char *name, uint64_t n, uint64_t per, uint64_t seed)
{
    const uint64_t shape[3] = {128, 256, 4};
    stk_schema sc;
    stk_error e;
    stk_schema_init(&sc);
    ck_assert_int_eq(stk_schema_add_tensor(&sc, "x", STK_DT_U64, 0, NULL, &e), STK_OK);
    ck_assert_int_eq(stk_schema_add_tensor(&sc, "big", STK_DT_U8, 3, shape, &e), STK_OK);
    tu_scratch(dir, cap, name);
    tu_write_tensor_dataset(dir, &sc, n, per, seed);
}

/* 30 records, 8 to a shard. */
static const char *big_ds(void)
{
    static char dir[TU_PATH];
    if (!dir[0]) make_big(dir, sizeof dir, "bigrec", BIG_N, 8, 77);
    return dir;
}

START_TEST(quasi_large_records)
{
    const char *dir = big_ds();
    stk_reader_options o = tu_reader_options(5, STK_ORDER_QUASI);
    o.quasi_block_bytes = 4 * (8 + BIG);
    o.quasi_window = 3;
    o.threads = 2;
    o.tail = STK_TAIL_PARTIAL;
    for (int blocks = 0; blocks < 2; blocks++) {
        if (blocks) setenv("STOKER_QUASI_BLOCKS", "1", 1);
        else unsetenv("STOKER_QUASI_BLOCKS");
        stk_reader *ref = open_io(dir, &o, STK_IO_MMAP), *got = open_io(dir, &o, STK_IO_DIRECT);
        same_stream(ref, got, 2 * stk_reader_batches_per_epoch(ref), blocks ? "blocks asked for" : "records");
        stk_reader_io_stats st;
        stk_reader_io_stats_get(got, &st);
        ck_assert_int_eq(st.io, STK_IO_DIRECT);
        if (blocks) {
            ck_assert_msg(st.quasi_blocks > 0 && strstr(st.reason, "quasi blocks read whole"), "%s",
                          st.reason);
        } else {
            ck_assert_msg(st.quasi_blocks == 0 &&
                              strstr(st.reason, "quasi records read one by one (the smallest value read "
                                                "directly is 128 KiB"),
                          "%llu blocks: %s", (unsigned long long)st.quasi_blocks, st.reason);
            ck_assert_uint_gt(st.reads, 0);
        }
        stk_reader_close(got);
        stk_reader_close(ref);
    }
}
END_TEST

/* Values gathered with streaming stores (STOKER_COPY=stream; the reader
 * picks them for large slots, reader_open.c) are the bytes memcpy gives,
 * copied from the map or out of quasi blocks (the direct path's records land
 * in place: it must not mind the setting); a bad STOKER_COPY is refused by
 * name. */
START_TEST(streaming_copies)
{
    const char *dir = big_ds();
    static const int orders[] = {STK_ORDER_SHUFFLE, STK_ORDER_QUASI};
    for (unsigned oi = 0; oi < 2; oi++)
        for (int io = STK_IO_MMAP; io <= STK_IO_DIRECT; io++) {
            stk_reader_options o = tu_reader_options(6, orders[oi]);
            o.quasi_block_bytes = 4 * (8 + BIG);
            o.quasi_window = 3;
            o.threads = 3;
            o.tail = STK_TAIL_PAD;
            setenv("STOKER_QUASI_BLOCKS", "1", 1); /* quasi blocks copy out with it too */
            setenv("STOKER_COPY", "cached", 1);
            stk_reader *ref = open_io(dir, &o, STK_IO_MMAP);
            setenv("STOKER_COPY", "stream", 1);
            stk_reader *got = open_io(dir, &o, io);
            char what[64];
            snprintf(what, sizeof what, "order %d io %d streamed", orders[oi], io);
            same_stream(ref, got, 3 * stk_reader_batches_per_epoch(ref), what);
            stk_reader_close(got);
            stk_reader_close(ref);
        }
    setenv("STOKER_COPY", "fast", 1);
    stk_reader_options o = tu_reader_options(6, STK_ORDER_SHUFFLE);
    stk_error e;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &e));
    ck_assert_msg(e.code == STK_E_ARG && strstr(e.msg, "STOKER_COPY='fast'"), "%s", e.msg);
    unsetenv("STOKER_COPY");
    setenv("STOKER_QUASI_BLOCKS", "yes", 1);
    ck_assert_ptr_null(stk_reader_open(dir, &o, &e));
    ck_assert_msg(e.code == STK_E_ARG && strstr(e.msg, "STOKER_QUASI_BLOCKS='yes'"), "%s", e.msg);
}
END_TEST

/* The environment is read once per open from one table (reader/env.c): a
 * bad value is refused by name where it decides something, and only there: an
 * option set explicitly (opts.io) or a path that does not use the variable
 * (STOKER_IO_ENGINE on the map path) opens as before. */
START_TEST(env_refused_where_used)
{
    const char *dir = big_ds();
    stk_reader_options o = tu_reader_options(6, STK_ORDER_SHUFFLE);
    stk_error e;
    setenv("STOKER_IO", "fast", 1);
    o.io = STK_IO_AUTO;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &e));
    ck_assert_msg(e.code == STK_E_ARG && strstr(e.msg, "STOKER_IO='fast': expected auto, mmap or direct"),
                  "%s", e.msg);
    stk_reader_close(open_io(dir, &o, STK_IO_MMAP)); /* the option decides: the variable is moot */
    unsetenv("STOKER_IO");
    setenv("STOKER_IO_ENGINE", "fast", 1);
    stk_reader_close(open_io(dir, &o, STK_IO_MMAP));
    o.io = STK_IO_DIRECT;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &e));
    ck_assert_msg(e.code == STK_E_ARG && strstr(e.msg, "STOKER_IO_ENGINE='fast'"), "%s", e.msg);
    unsetenv("STOKER_IO_ENGINE");
    char spec[300];
    memset(spec, 'x', sizeof spec - 1);
    spec[sizeof spec - 1] = 0;
    setenv("STOKER_IO_FAULT", spec, 1);
    ck_assert_ptr_null(stk_reader_open(dir, &o, &e));
    ck_assert_msg(e.code == STK_E_ARG && strstr(e.msg, "STOKER_IO_FAULT"), "%s", e.msg);
    setenv("WORLD_SIZE", "0", 1);
    o.world_size = 2; /* set: WORLD_SIZE is not read */
    unsetenv("STOKER_IO_FAULT");
    stk_reader_close(open_io(dir, &o, STK_IO_MMAP));
    o.world_size = -1;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &e));
    ck_assert_msg(e.code == STK_E_ARG && strstr(e.msg, "WORLD_SIZE='0' is not a world size"), "%s", e.msg);
    unsetenv("WORLD_SIZE");
}
END_TEST

/* How many mappings of shard file `shard` of dataset `dir` in this process
 * carry the huge-page advice ("hg" in their VmFlags); -1 when none maps it. */
static int mapped_huge(const char *dir, const char *shard)
{
    char path[TU_PATH], name[PATH_MAX];
    tu_join(path, sizeof path, dir, shard);
    ck_assert_msg(realpath(path, name) != NULL, "%s", path); /* as the kernel names the mapping */
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0, maps = 0, huge = 0;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line), k = strlen(name);
        if (strchr(line, '-') == line + strspn(line, "0123456789abcdef")) { /* a mapping's first line */
            in = n > k + 1 && !strncmp(line + n - 1 - k, name, k) && line[n - 2 - k] == ' ';
            maps += in;
        } else if (in && !strncmp(line, "VmFlags:", 8)) {
            huge += strstr(line, " hg") != NULL;
            in = 0;
        }
    }
    fclose(f);
    return maps ? huge : -1;
}

/* 24 records, 20 to a shard: a shard of 2.5 MiB, which the map path advises
 * huge pages, and one of 0.5 MiB, which it leaves alone (shorter than a
 * huge page). */
static const char *huge_ds(void)
{
    static char dir[TU_PATH];
    if (!dir[0]) make_big(dir, sizeof dir, "hugemap", 24, 20, 300);
    return dir;
}

/* The map path advises huge pages on the shard maps of data that fits in
 * memory (io_plan.c), shards of 2 MiB and more only, says so in the
 * statistics and reads the same batches; STOKER_MAP_HUGE=0 leaves the maps
 * as they are, a bad value is refused. */
START_TEST(map_huge)
{
    int thp = tu_thp_available();
    stk_reader_options o = tu_reader_options(5, STK_ORDER_SHUFFLE);
    o.threads = 2;
    setenv("STOKER_MAP_HUGE", "0", 1);
    stk_reader *ref = open_io(huge_ds(), &o, STK_IO_MMAP);
    stk_reader_io_stats s;
    stk_reader_io_stats_get(ref, &s);
    ck_assert_msg(!strstr(s.reason, "huge"), "%s", s.reason);
    ck_assert_int_eq(mapped_huge(huge_ds(), "shard-00000.stk"), 0);
    unsetenv("STOKER_MAP_HUGE");
    stk_reader *got = open_io(huge_ds(), &o, STK_IO_MMAP);
    stk_reader_io_stats_get(got, &s);
    if (thp) {
        ck_assert_msg(strstr(s.reason, "; 1 of 2 shard maps advised huge pages"), "%s", s.reason);
        ck_assert_int_eq(mapped_huge(huge_ds(), "shard-00000.stk"), 1); /* got's map, not ref's */
        ck_assert_int_eq(mapped_huge(huge_ds(), "shard-00001.stk"), 0); /* 0.5 MiB */
    }
    same_stream(ref, got, 2 * stk_reader_batches_per_epoch(ref) + 1, "huge-page maps");
    stk_reader_close(got);
    stk_reader_close(ref);

    /* a mixture naming the dataset twice: its files counted and advised once */
    stk_source src[2];
    for (int i = 0; i < 2; i++) {
        stk_source_init(&src[i]);
        src[i].path = huge_ds();
    }
    stk_error me;
    stk_reader *mix = stk_reader_open_mix(src, 2, &o, &me);
    ck_assert_msg(mix != NULL, "%s", me.msg);
    stk_reader_io_stats_get(mix, &s);
    if (thp) ck_assert_msg(strstr(s.reason, "; 1 of 2 shard maps advised huge pages"), "%s", s.reason);
    stk_reader_close(mix);

    stk_error e;
    setenv("STOKER_MAP_HUGE", "yes", 1);
    ck_assert_ptr_null(stk_reader_open(huge_ds(), &o, &e));
    ck_assert_msg(e.code == STK_E_ARG && strstr(e.msg, "STOKER_MAP_HUGE='yes'"), "%s", e.msg);
}
END_TEST

/* After each test, whether it passed or not: the reader's environment back
 * to its defaults, so that one failure does not become the next test's. */
static void reset_env(void)
{
    static const char *const vars[] = {"STOKER_IO",           "STOKER_IO_ENGINE", "STOKER_IO_FAULT",
                                       "STOKER_QUASI_BLOCKS", "STOKER_COPY",      "STOKER_MAP_HUGE",
                                       "WORLD_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
}

TU_MAIN("io", {.name = "io",
               .timeout = 300,
               .teardown = reset_env,
               .loop = 2,
               .loop_tests = {same_batches, faults_retried, read_error_names_record, quasi_block_read_error},
               .tests = {field_selection, quasi_large_records, streaming_copies, env_refused_where_used,
                         map_huge, truncated_shard, replaced_shard, resume, compressed, compressed_read_error,
                         auto_rule, auto_and_options, memory_budget}})
