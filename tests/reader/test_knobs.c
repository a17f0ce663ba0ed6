/*
 * tests/reader/test_knobs.c - the engine's knobs (reader.c) seen from the
 * consumer's statistics: with the prefetch knob below the slots allocated
 * (tuning on), the batches counted ready at next are batches of the stream
 * that are ready, each once: a slot that the free-slot map still names for
 * a batch not yet claimed is not counted again.
 */
#include "engine.h"
#include "testutil.h"

#include <string.h>
#include <time.h>

enum { N = 64, PER = 16, IMG = 32 * 32 * 3 };

static const char *dataset(void)
{
    static char dir[TU_PATH];
    if (dir[0]) return dir;
    stk_schema s;
    stk_error e;
    const uint64_t img[3] = {32, 32, 3};
    stk_schema_init(&s);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "image", STK_DT_U8, 3, img, &e), STK_OK);
    tu_scratch(dir, sizeof dir, "knobs");
    stk_dataset_options o;
    memset(&o, 0, sizeof o);
    o.records_per_shard = PER;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    static uint8_t im[IMG];
    for (uint64_t i = 0; i < N; i++) {
        tu_fill(im, IMG, 5 + i);
        stk_value v[1] = {{im, IMG}};
        ck_assert_msg(stk_dataset_writer_append(dw, v, &e) == STK_OK, "%s", e.msg);
    }
    ck_assert_msg(stk_dataset_writer_finish(dw, &e) == STK_OK, "%s", e.msg);
    return dir;
}

/* Whether the workers have claimed `n` batches, all of them ready. */
static int prepared(stk_reader *r, uint64_t n)
{
    pthread_mutex_lock(&r->mu);
    int done = r->claim == n && r->claim_part == 0;
    for (uint64_t q = 0; done && q < n; q++) {
        const stk__slot *sl = &r->slots[stk__slot_index(r, q)];
        done = sl->state == SLOT_READY && sl->seq == q;
    }
    pthread_mutex_unlock(&r->mu);
    return done;
}

/* Prefetch 1 at open, with room for many more (tuning on): two batches
 * are ready when next is first called (the one it returns and one ahead),
 * never three. */
START_TEST(ready_counts_each_batch_once)
{
    stk_reader_options o = tu_reader_options(4, STK_ORDER_SEQUENTIAL);
    o.io = STK_IO_MMAP;
    o.threads = 1;
    o.prefetch = 1;
    o.tuning = STK_TUNING_ON;
    o.tune_pin = STK_PIN_THREADS;
    stk_reader *r = tu_open_reader(dataset(), &o);
    ck_assert_uint_ge(r->nslots, 4); /* slots beyond the knob: their map entries unused */
    const struct timespec ms = {0, 1000000};
    for (int i = 0; i < 20000 && !prepared(r, 2); i++) nanosleep(&ms, NULL);
    ck_assert_msg(prepared(r, 2), "the worker did not prepare batches 0 and 1");
    stk_error e;
    ck_assert_msg(stk_reader_next(r, &e) != NULL, "%s", e.msg);
    stk_reader_stats st;
    stk_reader_stats_get(r, &st);
    ck_assert_uint_eq(st.batches, 1);
    ck_assert_msg(st.mean_ready == 2.0, "%.1f batches counted ready, 2 were", st.mean_ready);
    stk_reader_close(r);
}
END_TEST

TU_MAIN("reader knobs", {.name = "ready", .timeout = 60, .tests = {ready_counts_each_batch_once}})
