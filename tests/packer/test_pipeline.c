/* tests/packer/test_pipeline.c - pack's ordered parallel pipeline
 * (packer/pipeline.c) and its buffer pool (packer/pool.c).
 *
 * Items come out in order and intact whatever the thread count, window and
 * production times (each item sleeps a pseudo-random few microseconds, so
 * workers finish out of order); a buffer the consumer keeps is never written
 * again until it goes back to the pool; a consumer's stop ends the run with
 * its value; every item is announced (prefetch) exactly once, before a
 * worker takes it when `ahead` is at least the window; consume runs on
 * the workers, one call at a time; a worker that cannot start (thread_init)
 * ends the run with -1 and no hang. Also run under ThreadSanitizer (label
 * threads). */
#include "pipeline.h"
#include "pool.h"
#include "testutil.h"

#include <check.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOT 64
#define MAX_ITEMS 2048
#define HELD 3

typedef struct {
    uint64_t first, end;
    atomic_int produced[MAX_ITEMS];
    atomic_int announced[MAX_ITEMS];
    atomic_int early; /* items produced before they were announced */
    uint64_t next;    /* consumer: the item it expects */
    uint64_t stop_at; /* consumer returns 7 at this item (0: never) */
    pk_pool *pool;
    bool keep; /* consumer keeps buffers (HELD at a time) */
    uint8_t *held[HELD];
    uint64_t held_item[HELD];
    unsigned nheld;
    int bad;             /* consumer-side failures (asserted on the main thread) */
    atomic_int inside;   /* consume calls running now (never more than one) */
    atomic_int overlaps; /* times a consume call found another one running */
    atomic_int inits, finis;
    int fail_init;          /* thread_init's call number that fails (1-based; 0: none; -1: all) */
    pk_thread_stats *stats; /* run(): passed to the pipeline */
} ctx_t;

static void pattern(uint64_t i, uint8_t *out)
{
    for (unsigned k = 0; k < SLOT; k++) out[k] = (uint8_t)(i * 31 + k * 7 + 1);
}

static bool has_pattern(uint64_t i, const uint8_t *p)
{
    uint8_t want[SLOT];
    pattern(i, want);
    return memcmp(want, p, SLOT) == 0;
}

/* A few microseconds, varying with the item: workers finish out of order. */
static void jitter(uint64_t i)
{
    uint64_t x = i * 0x9e3779b97f4a7c15u;
    struct timespec ts = {0, (long)((x >> 40) % 40000)};
    nanosleep(&ts, NULL);
}

static void produce(void *user, void *state, uint64_t i, uint8_t *slot, pk_result *res)
{
    ctx_t *c = user;
    (void)state;
    if (i < MAX_ITEMS) {
        atomic_fetch_add(&c->produced[i], 1);
        if (atomic_load(&c->announced[i]) == 0) atomic_fetch_add(&c->early, 1);
    }
    jitter(i);
    pattern(i, slot);
    res->hash = i;
}

static void release_oldest(ctx_t *c)
{
    if (!has_pattern(c->held_item[0], c->held[0])) c->bad++; /* overwritten while kept */
    pk_pool_put(c->pool, c->held[0]);
    memmove(c->held, c->held + 1, (HELD - 1) * sizeof c->held[0]);
    memmove(c->held_item, c->held_item + 1, (HELD - 1) * sizeof c->held_item[0]);
    c->nheld--;
}

/* Runs on whichever worker finished the next item: in order, never two at
 * once (checked here without a lock: the state below has none). */
static int consume(void *user, void *state, uint64_t i, uint8_t **slot, const pk_result *res)
{
    ctx_t *c = user;
    (void)state;
    if (atomic_fetch_add(&c->inside, 1) != 0) atomic_fetch_add(&c->overlaps, 1);
    if (i != c->next || res->hash != i || !has_pattern(i, *slot)) c->bad++;
    c->next = i + 1;
    int rc = 0;
    if (c->stop_at && i == c->stop_at) {
        rc = 7;
    } else if (c->keep) {
        if (c->nheld == HELD) release_oldest(c);
        c->held[c->nheld] = *slot;
        c->held_item[c->nheld++] = i;
        *slot = pk_pool_get(c->pool);
    }
    atomic_fetch_sub(&c->inside, 1);
    return rc;
}

static void *thread_init(void *user, unsigned worker)
{
    ctx_t *c = user;
    (void)worker;
    int k = atomic_fetch_add(&c->inits, 1) + 1;
    return c->fail_init == -1 || k == c->fail_init ? NULL : c;
}

static void thread_fini(void *state)
{
    ctx_t *c = state;
    atomic_fetch_add(&c->finis, 1);
}

static void prefetch(void *user, uint64_t i)
{
    ctx_t *c = user;
    if (i < MAX_ITEMS) atomic_fetch_add(&c->announced[i], 1);
}

static ctx_t *ctx_new(uint64_t first, uint64_t end)
{
    ctx_t *c = calloc(1, sizeof *c);
    ck_assert_ptr_nonnull(c);
    c->first = c->next = first;
    c->end = end;
    return c;
}

/* Run the pipeline over c's items; returns its status. */
static int run(ctx_t *c, unsigned threads, size_t window, uint64_t ahead, bool with_prefetch)
{
    c->pool = pk_pool_new(window + HELD + 1, SLOT);
    ck_assert_ptr_nonnull(c->pool);
    pk_pipeline p = {.threads = threads,
                     .stats = c->stats,
                     .window = window,
                     .pool = c->pool,
                     .first = c->first,
                     .end = c->end,
                     .user = c,
                     .produce = produce,
                     .consume = consume,
                     .prefetch = with_prefetch ? prefetch : NULL,
                     .ahead = ahead,
                     .thread_init = c->fail_init ? thread_init : NULL,
                     .thread_fini = thread_fini};
    int rc = pk_pipeline_run(&p);
    while (c->nheld) release_oldest(c);
    ck_assert_uint_eq(pk_pool_free_count(c->pool), window + HELD + 1); /* every buffer back */
    pk_pool_free(c->pool);
    return rc;
}

START_TEST(in_order_and_intact)
{
    static const unsigned threads[] = {1, 2, 4};
    for (size_t t = 0; t < 3; t++)
        for (int wide = 0; wide < 2; wide++)
            for (int keep = 0; keep < 2; keep++) {
                size_t window = wide ? 3 * threads[t] + 1 : threads[t];
                ctx_t *c = ctx_new(7, 407);
                c->keep = keep;
                ck_assert_int_eq(run(c, threads[t], window, 0, false), 0);
                ck_assert_msg(c->bad == 0, "%d bad items (threads %u, window %zu, keep %d)", c->bad,
                              threads[t], window, keep);
                ck_assert_int_eq(atomic_load(&c->overlaps), 0);
                ck_assert_uint_eq(c->next, 407);
                for (uint64_t i = 0; i < MAX_ITEMS; i++)
                    ck_assert_int_eq(atomic_load(&c->produced[i]), i >= 7 && i < 407);
                free(c);
            }
}
END_TEST

/* A run over [first, end) whose consumer stops at item stop_at: the run
 * returns the consumer's 7, consuming nothing after the stop. */
static ctx_t *stopped_run(uint64_t first, uint64_t end, uint64_t stop_at, unsigned threads, size_t window)
{
    ctx_t *c = ctx_new(first, end);
    c->stop_at = stop_at;
    ck_assert_int_eq(run(c, threads, window, 0, false), 7);
    ck_assert_uint_eq(c->next, stop_at + 1);
    return c;
}

START_TEST(consumer_stop_ends_the_run)
{
    ctx_t *c = stopped_run(0, 1000, 100, 3, 12);
    ck_assert_int_eq(c->bad, 0);
    int produced = 0;
    for (uint64_t i = 0; i < 1000; i++) produced += atomic_load(&c->produced[i]);
    ck_assert_int_le(produced, 100 + 12); /* items < consumed + window: at most 112 (0 .. 111) */
    free(c);
}
END_TEST

START_TEST(consumer_stop_at_the_edges)
{
    /* one thread and a one-slot window; a stop at the very last item */
    ctx_t *c = stopped_run(0, 50, 20, 1, 1);
    free(c);
    c = stopped_run(3, 60, 59, 4, 9);
    ck_assert_int_eq(c->bad, 0);
    ck_assert_int_eq(atomic_load(&c->overlaps), 0);
    free(c);
}
END_TEST

START_TEST(nothing_to_do)
{
    ctx_t *c = ctx_new(40, 40);
    ck_assert_int_eq(run(c, 3, 6, 6, true), 0);
    ck_assert_uint_eq(c->next, 40); /* consume never called */
    for (uint64_t i = 0; i < MAX_ITEMS; i++) ck_assert_int_eq(atomic_load(&c->produced[i]), 0);
    free(c);
}
END_TEST

/* A worker whose thread_init fails ends the run with -1 (pack: "cannot start
 * N threads"), whatever the others did meanwhile, without hanging; every
 * state that was made is finished. */
START_TEST(worker_init_failure)
{
    static const int fail[] = {1, 2, 3, -1};
    for (size_t f = 0; f < 4; f++) {
        ctx_t *c = ctx_new(0, 500);
        c->fail_init = fail[f];
        ck_assert_int_eq(run(c, 3, 9, 0, false), -1);
        int ok = atomic_load(&c->inits) - (fail[f] == -1 ? atomic_load(&c->inits) : 1);
        ck_assert_int_eq(atomic_load(&c->finis), ok);
        ck_assert_int_eq(c->bad, 0); /* what was consumed before the stop was in order */
        ck_assert_int_eq(atomic_load(&c->overlaps), 0);
        free(c);
    }
}
END_TEST

START_TEST(prefetch_announces_each_item_once)
{
    /* ahead: the window, twice it, more than the items, and 0 (off) */
    static const uint64_t ahead[] = {10, 20, 5000, 0};
    for (size_t a = 0; a < 4; a++)
        for (unsigned threads = 1; threads <= 3; threads += 2) {
            ctx_t *c = ctx_new(5, 605);
            ck_assert_int_eq(run(c, threads, 10, ahead[a], true), 0);
            ck_assert_int_eq(c->bad, 0);
            for (uint64_t i = 0; i < MAX_ITEMS; i++) {
                int want = ahead[a] && i >= 5 && i < 605;
                ck_assert_msg(atomic_load(&c->announced[i]) == want,
                              "item %llu announced %d times (ahead %llu)", (unsigned long long)i,
                              atomic_load(&c->announced[i]), (unsigned long long)ahead[a]);
            }
            /* ahead >= window: no worker can take an item before the one
             * `ahead` places earlier has been consumed, hence announced */
            if (ahead[a]) ck_assert_int_eq(atomic_load(&c->early), 0);
            free(c);
        }
}
END_TEST

/* The per-worker figures: every item produced and consumed once, and each
 * worker's parts add up to its life. The parts leave out only taking the
 * pipeline's lock, a few microseconds per item against each item's sleep
 * of up to 40; the test allows a quarter of the wall and 20 ms (sanitizer
 * builds and a preempted vCPU stretch the lock's share, never beyond). */
START_TEST(stats_add_up)
{
    static const unsigned threads[] = {1, 3};
    for (size_t t = 0; t < 2; t++) {
        pk_thread_stats st[3];
        ctx_t *c = ctx_new(0, 1500);
        c->stats = st;
        ck_assert_int_eq(run(c, threads[t], 4 * threads[t], 8 * threads[t], true), 0);
        uint64_t produced = 0, consumed = 0;
        for (unsigned k = 0; k < threads[t]; k++) {
            const pk_thread_stats *s = &st[k];
            double parts = s->init + s->produce + s->consume + s->window + s->prefetch;
            produced += s->produced, consumed += s->consumed;
            ck_assert_msg(s->wall > 0 && parts <= s->wall * 1.0001 + 1e-6 && parts >= 0.75 * s->wall - 0.02,
                          "worker %u of %u: wall %.4f s, parts %.4f s (init %.4f produce %.4f consume %.4f "
                          "window %.4f prefetch %.4f)",
                          k, threads[t], s->wall, parts, s->init, s->produce, s->consume, s->window,
                          s->prefetch);
            ck_assert_double_ge(s->produce, 0);
            ck_assert_double_ge(s->window, 0);
        }
        ck_assert_uint_eq(produced, 1500);
        ck_assert_uint_eq(consumed, 1500);
        free(c);
    }
}
END_TEST

START_TEST(bad_arguments_refused)
{
    ctx_t *c = ctx_new(0, 10);
    c->pool = pk_pool_new(4, SLOT);
    pk_pipeline p = {.threads = 0,
                     .window = 4,
                     .pool = c->pool,
                     .first = 0,
                     .end = 10,
                     .user = c,
                     .produce = produce,
                     .consume = consume};
    ck_assert_int_eq(pk_pipeline_run(&p), -1); /* no threads */
    p.threads = 5;
    ck_assert_int_eq(pk_pipeline_run(&p), -1); /* window < threads */
    p.threads = 2;
    p.window = 5;
    ck_assert_int_eq(pk_pipeline_run(&p), -1); /* the pool holds fewer than window buffers */
    ck_assert_uint_eq(pk_pool_free_count(c->pool), 4);
    pk_pool_free(c->pool);
    free(c);
}
END_TEST

TU_MAIN("pipeline", {.name = "pipeline",
                     .timeout = 120,
                     .tests = {in_order_and_intact, consumer_stop_ends_the_run, stats_add_up,
                               consumer_stop_at_the_edges, nothing_to_do, worker_init_failure,
                               prefetch_announces_each_item_once, bad_arguments_refused}})
