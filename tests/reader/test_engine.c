/* tests/reader/test_engine.c - the reader's engine: zero-copy views, the
 * gathered bytes, statistics, checksum and truncation errors, memory budget,
 * option checks, seek and shutdown under load. (Which records land in which
 * batch is test_orders.c's job, against an independent implementation.) */
#define _GNU_SOURCE
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEED 11

/* A scratch dataset of n standard records in shards of `per`. */
static void make(char *dir, size_t cap, const char *name, uint64_t n, uint64_t per)
{
    tu_scratch_std_dataset(dir, cap, name, SEED, n, per);
}

static stk_reader *open_r(const char *dir, uint32_t B, int order, unsigned threads, unsigned prefetch)
{
    stk_reader_options o = tu_reader_options(B, order);
    o.threads = threads;
    o.prefetch = prefetch;
    return tu_open_reader(dir, &o);
}

/* make, then open_r on what it made. */
static stk_reader *make_open(char *dir, size_t cap, const char *name, uint64_t n, uint64_t per, uint32_t B,
                             int order, unsigned threads, unsigned prefetch)
{
    make(dir, cap, name, n, per);
    return open_r(dir, B, order, threads, prefetch);
}

/* Every field of every record of the batch equals the standard record. */
static void check_batch(const stk_batch *b)
{
    ck_assert_uint_eq(b->nfields, 3);
    for (uint32_t i = 0; i < b->size; i++) {
        tu_record want;
        tu_std_record(&want, SEED, b->records[i]);
        const uint16_t *img = (const uint16_t *)b->fields[TU_IMAGE].data + (size_t)i * TU_IMG_ELEMS;
        ck_assert_msg(memcmp(img, want.image, sizeof want.image) == 0, "image of record %llu",
                      (unsigned long long)b->records[i]);
        ck_assert_int_eq(((const int32_t *)b->fields[TU_LABEL].data)[i], want.label);
        const stk_value *t = &b->fields[TU_TEXT].values[i];
        ck_assert_uint_eq(t->size, want.v[TU_TEXT].size);
        ck_assert(memcmp(t->data, want.text, t->size) == 0);
    }
}

/* Sequential batches inside one shard point into the map; those that span
 * shards are gathered into a slot and still hold the right bytes. */
START_TEST(zero_copy_points_into_map)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "zc", 100, 30); /* shards of 30: batches of 10 fit, of 20 span */
    for (int B = 10; B <= 20; B += 10) {
        stk_reader *r = open_r(dir, (uint32_t)B, STK_ORDER_SEQUENTIAL, 2, 3);
        const stk_dataset *ds = stk_reader_dataset(r);
        stk_error err;
        uint64_t zc = 0;
        for (uint64_t j = 0; j < stk_reader_batches_per_epoch(r); j++) {
            const stk_batch *b = stk_reader_next(r, &err);
            ck_assert_msg(b != NULL, "%s", err.msg);
            check_batch(b);
            size_t s;
            uint64_t local;
            ck_assert_int_eq(stk_dataset_locate(ds, b->records[0], &s, &local, NULL), 0);
            const stk_shard *sh = stk_dataset_shard(ds, s);
            const uint8_t *base = stk_shard_field_base(sh, TU_IMAGE);
            int inside = local + b->size <= stk_shard_records(sh) &&
                         b->records[b->size - 1] == b->records[0] + b->size - 1;
            ck_assert_int_eq(b->fields[TU_IMAGE].zero_copy, inside);
            if (inside) {
                ck_assert_ptr_eq(b->fields[TU_IMAGE].data, base + local * sizeof(uint16_t) * TU_IMG_ELEMS);
                zc++;
            }
        }
        stk_reader_stats st;
        stk_reader_stats_get(r, &st);
        ck_assert_uint_eq(st.zero_copy_batches, zc);
        ck_assert(B == 10 ? zc == 10 : zc > 0 && zc < 5);
        stk_reader_close(r);
    }
}
END_TEST

START_TEST(shuffle_gathers_right_bytes)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "gather", 203, 17);
    for (unsigned threads = 1; threads <= 4; threads *= 2) {
        stk_reader *r = open_r(dir, 16, STK_ORDER_SHUFFLE, threads, 5);
        stk_reader_set_epochs(r, 2);
        stk_error err;
        const stk_batch *b;
        uint64_t n = 0;
        while ((b = stk_reader_next(r, &err))) {
            ck_assert_int_eq(b->fields[TU_IMAGE].zero_copy, 0);
            ck_assert_uint_eq(b->fields[TU_IMAGE].shape[0], b->size);
            ck_assert_uint_eq(b->fields[TU_IMAGE].ndim, 3);
            ck_assert_uint_eq(b->fields[TU_IMAGE].shape[2], 5);
            check_batch(b);
            n++;
        }
        ck_assert_int_eq(err.code, STK_OK);
        ck_assert_uint_eq(n, 2 * 13); /* ceil(203 / 16) per epoch */
        stk_reader_close(r);
    }
}
END_TEST

START_TEST(stats_sane)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "stats", 96, 32);
    stk_reader_options o = tu_reader_options(8, STK_ORDER_SHUFFLE);
    o.threads = 2;
    o.prefetch = 4;
    o.tuning = STK_TUNING_OFF; /* the knobs as given (the tuner would take a thread the steps leave idle) */
    stk_reader *r = tu_open_reader(dir, &o);
    stk_error err;
    uint64_t bytes = 0;
    for (int i = 0; i < 12; i++) {
        const stk_batch *b = stk_reader_next(r, &err);
        ck_assert_ptr_nonnull(b);
        for (unsigned k = 0; k < b->nfields; k++) bytes += b->fields[k].nbytes;
        usleep(2000); /* a "step": workers get ahead */
    }
    stk_reader_stats s;
    stk_reader_stats_get(r, &s);
    ck_assert_uint_eq(s.batches, 12);
    ck_assert_uint_eq(s.samples, 96);
    ck_assert_uint_eq(s.bytes, bytes);
    ck_assert(s.wall_s >= 0.022 && s.wait_s >= 0 && s.wait_s < s.wall_s);
    ck_assert(s.busy_s > 0);
    ck_assert(s.mean_ready >= 0 && s.mean_ready <= 4); /* how full the ring was: timing, so only bounds */
    ck_assert_uint_eq(s.threads, 2);
    ck_assert_uint_eq(s.prefetch, 4);
    char v[256];
    ck_assert_int_gt(stk_reader_verdict(&s, v, sizeof v), 0);
    ck_assert_msg(strstr(v, "input-bound: ") != NULL, "%s", v); /* either verdict: it depends on timing */
    stk_reader_stats_reset(r);
    stk_reader_stats_get(r, &s);
    ck_assert_uint_eq(s.batches, 0);
    stk_reader_close(r);

    /* the verdicts themselves, from fixed figures (no timing) */
    stk_reader_stats q = {
        .batches = 10, .samples = 100, .wall_s = 1, .wait_s = 0.02, .busy_s = 0.3, .threads = 2};
    stk_reader_verdict(&q, v, sizeof v);
    ck_assert_msg(strcmp(v, "not input-bound: 2% of wall time spent waiting for data (threads=2)") == 0, "%s",
                  v);
    /* a verdict for a starved consumer names the wait and a way out */
    stk_reader_stats t = {
        .batches = 10, .samples = 100, .wall_s = 1, .wait_s = 0.37, .busy_s = 0.3, .threads = 2};
    stk_reader_verdict(&t, v, sizeof v);
    ck_assert_msg(strstr(v, "input-bound: 37% of wall time spent waiting for data (threads=2") == v, "%s", v);
}
END_TEST

/* Flip a byte of record `rec`'s image inside a shard file (not the mapping). */
static void corrupt_record(const char *dir, uint64_t rec, char *shard_path, size_t cap)
{
    stk_error err;
    stk_dataset *ds = stk_dataset_open(dir, &err);
    ck_assert_ptr_nonnull(ds);
    const void *p;
    uint64_t size;
    const stk_shard *sh = tu_locate_value(ds, rec, TU_IMAGE, NULL, &p, &size);
    snprintf(shard_path, cap, "%s", stk_shard_path(sh));
    size_t len;
    uint8_t *file = tu_read(shard_path, &len);
    /* find the value's bytes in the file copy: fields are at fixed offsets */
    uint8_t *hit = memmem(file, len, p, size);
    ck_assert_ptr_nonnull(hit);
    hit[3] ^= 0x40;
    stk_dataset_close(ds);
    tu_write(shard_path, file, len);
    free(file);
}

START_TEST(checksum_error_names_shard_and_record)
{
    char dir[TU_PATH], shard[TU_PATH];
    make(dir, sizeof dir, "cksum", 60, 20);
    corrupt_record(dir, 45, shard, sizeof shard);
    /* verify off: the bad bytes pass (that is what off means) */
    stk_reader *r = open_r(dir, 10, STK_ORDER_SEQUENTIAL, 2, 2);
    stk_error err;
    for (int i = 0; i < 6; i++) ck_assert_ptr_nonnull(stk_reader_next(r, &err));
    stk_reader_close(r);

    for (int mode = STK_VERIFY_ONCE; mode <= STK_VERIFY_ALWAYS; mode++) {
        stk_reader_options o = tu_reader_options(10, STK_ORDER_SEQUENTIAL);
        o.threads = 2;
        o.verify = mode;
        r = tu_open_reader(dir, &o);
        for (int i = 0; i < 4; i++) ck_assert_ptr_nonnull(stk_reader_next(r, &err));
        ck_assert_ptr_null(stk_reader_next(r, &err)); /* batch 4 holds record 45 */
        tu_assert_error(&err, STK_E_CHECKSUM,
                        "record 5 (dataset record 45), field 'image': checksum mismatch");
        ck_assert_msg(strstr(err.msg, shard) != NULL, "%s lacks %s", err.msg, shard);
        stk_error again;
        ck_assert_ptr_null(stk_reader_next(r, &again)); /* sticky */
        ck_assert_int_eq(again.code, STK_E_CHECKSUM);
        stk_reader_close(r);
    }
}
END_TEST

START_TEST(verify_once_hashes_each_record_once)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "once", 50, 20);
    stk_reader_options o = tu_reader_options(7, STK_ORDER_SHUFFLE);
    o.tail = STK_TAIL_PARTIAL;
    o.verify = STK_VERIFY_ONCE;
    stk_reader *r = tu_open_reader(dir, &o);
    stk_error err;
    stk_reader_set_epochs(r, 3);
    while (stk_reader_next(r, &err)) {}
    ck_assert_int_eq(err.code, STK_OK);
    stk_reader_stats s;
    stk_reader_stats_get(r, &s);
    ck_assert_uint_eq(s.samples, 150);
    ck_assert_uint_eq(s.verified, 50);
    stk_reader_close(r);
}
END_TEST

/* A shard truncated in place under a live reader: an error, never SIGBUS.
 * One worker and one prefetched batch keep the workers in shard 0 until the
 * consumer moves on, so nothing touches the cut pages before the check. */
START_TEST(truncated_shard_is_an_error)
{
    char dir[TU_PATH];
    stk_reader *r = make_open(dir, sizeof dir, "trunc", 60, 20, 10, STK_ORDER_SEQUENTIAL, 1, 1);
    const char *last = stk_shard_path(stk_dataset_shard(stk_reader_dataset(r), 2));
    ck_assert_int_eq(truncate(last, 4096), 0);
    stk_error err;
    const stk_batch *b;
    uint64_t n = 0;
    while ((b = stk_reader_next(r, &err)) && n < 6) n++;
    ck_assert_uint_eq(n, 4);
    tu_assert_error(&err, STK_E_TRUNCATED, "shrank from");
    ck_assert(strstr(err.msg, last) != NULL);
    stk_reader_close(r);
}
END_TEST

/* A shard replaced by rename keeps being read from the old mapping. */
START_TEST(replaced_shard_keeps_old_mapping)
{
    char dir[TU_PATH], other[TU_PATH];
    make(dir, sizeof dir, "replace", 40, 20);
    make(other, sizeof other, "replace-other", 40, 20); /* same records: seed differs below */
    stk_reader *r = open_r(dir, 10, STK_ORDER_SEQUENTIAL, 1, 1);
    const char *p1 = stk_shard_path(stk_dataset_shard(stk_reader_dataset(r), 1));
    char tmp[TU_PATH];
    snprintf(tmp, sizeof tmp, "%s.new", p1);
    tu_write(tmp, "junk", 4);
    ck_assert_int_eq(rename(tmp, p1), 0);
    stk_error err;
    const stk_batch *b;
    int n = 0;
    while (n < 4 && (b = stk_reader_next(r, &err))) {
        check_batch(b);
        n++;
    }
    ck_assert_int_eq(n, 4);
    stk_reader_close(r);
}
END_TEST

START_TEST(memory_budget_and_bad_options)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "opts", 30, 10);
    stk_error err;
    stk_reader_options o = tu_reader_options(10, STK_ORDER_SEQUENTIAL);
    o.prefetch = 3;
    /* per slot: image 10 x 30 bytes (64-aligned: 320) + label 10 x 4 (64) + record
     * indices 10 x 8 + the text field's 10 values x 16 = 624 bytes; 4 slots */
    o.memory_budget = 4 * 624 - 1;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &err));
    tu_assert_error(&err, STK_E_ARG, "memory budget");
    ck_assert(strstr(err.msg, "4 slots x 624 bytes = 2496") != NULL);
    o.memory_budget = 4 * 624;
    stk_reader_close(tu_open_reader(dir, &o));

    stk_reader_options_init(&o);
    o.batch_size = 0;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &err));
    tu_assert_error(&err, STK_E_ARG, "batch_size");
    stk_reader_options_init(&o);
    o.rank = 3;
    o.world_size = 3;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &err));
    tu_assert_error(&err, STK_E_ARG, "rank 3 out of range");
    stk_reader_options_init(&o);
    o.fields = "image,nope";
    ck_assert_ptr_null(stk_reader_open(dir, &o, &err));
    tu_assert_error(&err, STK_E_ARG, "no field 'nope'");
    stk_reader_options_init(&o);
    o.batch_size = 31;
    o.world_size = 1;
    o.tail = STK_TAIL_DROP;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &err));
    tu_assert_error(&err, STK_E_ARG, "fewer than one global batch");
    stk_reader_options_init(&o);
    o.order = 7;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &err));
    tu_assert_error(&err, STK_E_ARG, "order 7");

    setenv("WORLD_SIZE", "two", 1);
    stk_reader_options_init(&o);
    ck_assert_ptr_null(stk_reader_open(dir, &o, &err));
    tu_assert_error(&err, STK_E_ARG, "WORLD_SIZE='two'");
    unsetenv("WORLD_SIZE");
}
END_TEST

/* Field selection: only what was asked, in schema order, and the slot holds
 * only those bytes. */
START_TEST(field_selection)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "fields", 30, 10);
    stk_reader_options o = tu_reader_options(4, STK_ORDER_SHUFFLE);
    o.fields = "text,label";
    stk_reader *r = tu_open_reader(dir, &o);
    stk_error err;
    const stk_batch *b = stk_reader_next(r, &err);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(b->nfields, 2);
    ck_assert_str_eq(b->fields[0].name, "label");
    ck_assert_str_eq(b->fields[1].name, "text");
    ck_assert_ptr_null(b->fields[1].data);
    for (uint32_t i = 0; i < b->size; i++) {
        tu_record want;
        tu_std_record(&want, SEED, b->records[i]);
        ck_assert_int_eq(((const int32_t *)b->fields[0].data)[i], want.label);
    }
    stk_reader_close(r);
}
END_TEST

/* Seek and close while workers are busy with many slots in flight. */
START_TEST(seek_and_close_under_load)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "load", 500, 64);
    for (int round = 0; round < 20; round++) {
        stk_reader *r = open_r(dir, 8, round % 3, 4, 16);
        stk_error err;
        if (round % 2) {
            ck_assert_int_eq(stk_reader_seek(r, 3, 7, &err), 0);
            const stk_batch *b = stk_reader_next(r, &err);
            ck_assert_ptr_nonnull(b);
            ck_assert_uint_eq(b->epoch, 3);
            ck_assert_uint_eq(b->index, 7);
            check_batch(b);
            ck_assert_int_eq(stk_reader_seek(r, 0, 0, &err), 0);
            b = stk_reader_next(r, &err);
            ck_assert_uint_eq(b->epoch, 0);
            ck_assert_uint_eq(b->index, 0);
        }
        stk_reader_close(r); /* with the ring full and workers mid-batch */
    }
    stk_reader *r = open_r(dir, 8, 0, 1, 1);
    stk_error err;
    ck_assert_int_eq(stk_reader_seek(r, 0, 63, &err), STK_E_RANGE);
    stk_reader_close(r);
}
END_TEST

START_TEST(state_text_rejects_junk)
{
    static const char *const bad[] = {
        "",
        "[]",
        "{}",
        "{\"stoker_reader_state\":2}",
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":"
        "\"1\","
        "\"global_batch\":0,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":0,"
        "\"batch\":0}",
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"random\",\"seed\":\"1\","
        "\"global_batch\":8,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":0,"
        "\"batch\":0}",
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":\"-"
        "1\","
        "\"global_batch\":8,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":0,"
        "\"batch\":0}",
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":"
        "\"1\","
        "\"global_batch\":8,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":0,"
        "\"batch\":0,"
        "\"extra\":1}",
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":"
        "\"99999999999999999999\","
        "\"global_batch\":8,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":0,"
        "\"batch\":0}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        stk_reader_state st;
        stk_error err;
        ck_assert_msg(stk_reader_state_parse(bad[i], strlen(bad[i]), &st, &err) != 0, "accepted: %s", bad[i]);
        ck_assert(err.code == STK_E_FORMAT || err.code == STK_E_VERSION);
    }
    stk_reader_state st = {.fingerprint = 0xfedcba9876543210ULL,
                           .order = 2,
                           .seed = UINT64_MAX,
                           .global_batch = 24,
                           .tail = 2,
                           .quasi_block_records = 5,
                           .quasi_window = 3,
                           .epoch = 9,
                           .batch = 4},
                     back;
    char buf[512];
    size_t n = stk_reader_state_format(&st, buf, sizeof buf);
    ck_assert_uint_eq(n, strlen(buf));
    ck_assert_int_eq(stk_reader_state_parse(buf, n, &back, NULL), 0);
    ck_assert(back.fingerprint == st.fingerprint && back.order == st.order && back.seed == st.seed);
    ck_assert(back.global_batch == st.global_batch && back.tail == st.tail);
    ck_assert(back.quasi_block_records == 5 && back.quasi_window == 3 && back.epoch == 9 && back.batch == 4);
}
END_TEST

/* Compressed image and text fields: every order, several thread counts and
 * verify always; the bytes equal the records, nothing is zero-copy. */
START_TEST(compressed_fields)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "zstd-read");
    stk_schema sc;
    tu_std_schema(&sc);
    ck_assert_int_eq(stk_schema_set_codec(&sc, TU_IMAGE, STK_CODEC_ZSTD, NULL), 0);
    ck_assert_int_eq(stk_schema_set_codec(&sc, TU_TEXT, STK_CODEC_ZSTD, NULL), 0);
    stk_dataset_options o = {0};
    o.records_per_shard = 70;
    o.zstd_block_bytes = 200; /* a few records per block */
    stk_error err;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &sc, &o, &err);
    ck_assert_ptr_nonnull(dw);
    for (uint64_t i = 0; i < 180; i++) {
        tu_record rec;
        tu_std_record(&rec, SEED, i);
        ck_assert_int_eq(stk_dataset_writer_append(dw, rec.v, &err), 0);
    }
    ck_assert_msg(stk_dataset_writer_finish(dw, &err) == 0, "%s", err.msg);
    for (int order = STK_ORDER_SEQUENTIAL; order <= STK_ORDER_QUASI; order++)
        for (unsigned threads = 1; threads <= 3; threads++) {
            stk_reader_options ro = tu_reader_options(16, order);
            ro.threads = threads;
            ro.verify = STK_VERIFY_ALWAYS;
            ro.quasi_block_bytes = 512;
            stk_reader *r = tu_open_reader(dir, &ro);
            stk_reader_set_epochs(r, 2);
            const stk_batch *b;
            while ((b = stk_reader_next(r, &err))) {
                ck_assert_int_eq(b->fields[TU_IMAGE].zero_copy, 0);
                check_batch(b);
            }
            ck_assert_msg(err.code == STK_OK, "%s", err.msg);
            stk_reader_stats st;
            stk_reader_stats_get(r, &st);
            ck_assert_uint_eq(st.samples, 2 * 12 * 16);
            ck_assert_uint_eq(st.verified, st.samples);
            stk_reader_close(r);
        }
}
END_TEST

TU_MAIN("reader engine",
        {.name = "engine",
         .timeout = 120,
         .tests = {zero_copy_points_into_map, shuffle_gathers_right_bytes, stats_sane,
                   checksum_error_names_shard_and_record, verify_once_hashes_each_record_once,
                   truncated_shard_is_an_error, replaced_shard_keeps_old_mapping,
                   memory_budget_and_bad_options, field_selection, seek_and_close_under_load,
                   state_text_rejects_junk, compressed_fields}})
