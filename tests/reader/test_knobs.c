/*
 * tests/reader/test_knobs.c - the engine's knobs (reader.c) seen from the
 * consumer's statistics: with the prefetch knob below the slots allocated
 * (tuning on), the batches counted ready at next are batches of the stream
 * that are ready, each once: a slot that the free-slot map still names for
 * a batch not yet claimed is not counted again; and the batches stay those
 * of a reader with tuning off while another thread turns every knob and the
 * consumer seeks (both read paths).
 */
#include "engine.h"
#include "testutil.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

enum { N = 64, PER = 16 };

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
    tu_write_tensor_dataset(dir, &s, N, PER, 5);
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

/* Another thread turns every knob up and down while the consumer reads and
 * seeks: the batches equal a reader's with tuning off, seek after seek. */
typedef struct {
    stk_reader *r;
    int stop; /* atomic */
} turner;

static void *turn(void *arg)
{
    turner *t = arg;
    const struct timespec us = {0, 50000};
    for (unsigned j = 0; !__atomic_load_n(&t->stop, __ATOMIC_RELAXED); j++) {
        stk__engine_set_knobs(t->r, 1 + j * 7 % 4, 1 + j * 5 % 9, 1 + j * 11 % 64);
        nanosleep(&us, NULL);
    }
    return NULL;
}

START_TEST(seek_while_knobs_turn)
{
    static const int ios[] = {STK_IO_MMAP, STK_IO_DIRECT};
    for (unsigned ii = 0; ii < 2; ii++) {
        stk_reader_options o = tu_reader_options(5, STK_ORDER_SHUFFLE);
        o.seed = 3;
        o.io = ios[ii];
        o.threads = 2;
        o.tuning = STK_TUNING_OFF;
        stk_reader *ref = tu_open_reader(dataset(), &o);
        o.tuning = STK_TUNING_ON;
        o.threads_max = 4;
        o.prefetch = 2;
        stk_reader *r = tu_open_reader(dataset(), &o);
        turner t = {r, 0};
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, turn, &t), 0);
        uint64_t nb = stk_reader_batches_per_epoch(r);
        for (unsigned j = 0; j < 300; j++) {
            if (j % 7 == 3) {
                uint64_t ep = j % 3, b = (j * 13) % nb;
                ck_assert_int_eq(stk_reader_seek(ref, ep, b, NULL), STK_OK);
                ck_assert_int_eq(stk_reader_seek(r, ep, b, NULL), STK_OK);
            }
            stk_error e1, e2;
            const stk_batch *a = stk_reader_next(ref, &e1), *b = stk_reader_next(r, &e2);
            ck_assert_msg(a != NULL, "%s", e1.msg);
            ck_assert_msg(b != NULL, "io %d, batch %u: %s", ios[ii], j, e2.msg);
            ck_assert_msg(a->epoch == b->epoch && a->index == b->index && a->size == b->size,
                          "io %d, batch %u", ios[ii], j);
            ck_assert_msg(!memcmp(a->records, b->records, a->size * sizeof *a->records),
                          "io %d: records of %u", ios[ii], j);
            ck_assert_msg(a->fields[0].nbytes == b->fields[0].nbytes &&
                              !memcmp(a->fields[0].data, b->fields[0].data, a->fields[0].nbytes),
                          "io %d: the image of batch %u", ios[ii], j);
        }
        __atomic_store_n(&t.stop, 1, __ATOMIC_RELAXED);
        pthread_join(th, NULL);
        stk_reader_close(ref);
        stk_reader_close(r);
    }
}
END_TEST

TU_MAIN("reader knobs",
        {.name = "ready", .timeout = 60, .tests = {ready_counts_each_batch_once, seek_while_knobs_turn}})
