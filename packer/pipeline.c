/* packer/pipeline.c - see pipeline.h.
 *
 * There is no consumer thread. The worker that finishes the next item in
 * order consumes it, and every item after it that is ready, before it takes
 * new work; the others go on producing meanwhile. Why: a consumer thread of
 * its own has to be woken for its share, and on a virtual machine each
 * wake-up of a busy vCPU is an inter-processor interrupt, exits to the
 * hypervisor and a preempted producer; and where there are spare cores it
 * runs on one of them, so that -jN would be more than N threads' work. This
 * way -jN is N threads' worth of everything but the writer's I/O, and a
 * worker that consumes often finds the item's result in its own cache.
 *
 * Inputs are announced (prefetch) `ahead` items before they are taken, by
 * the worker taking the item that many places earlier: their reads are then
 * in flight while the items before them are produced, instead of stalling a
 * worker each (a cold dataset stalls on every file, and even a warm page
 * cache gives up some of a just-read file set to reclaim). The measurements
 * behind both choices: bench/README.md. */
#include "pipeline.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const pk_pipeline *p;
    uint8_t **slots;
    pk_result *res;
    bool *ready;
    pthread_mutex_t lock;
    pthread_cond_t cv_free, cv_done;
    uint64_t next_take, consumed; /* next item to hand out; next item to consume */
    bool consuming;               /* a worker is consuming (one at a time, in order) */
    unsigned free_waiters;        /* workers asleep on cv_free */
    int rc;                       /* the consumer's nonzero value, or -1: a worker could not start */
    bool stop;
} run_t;

typedef struct {
    run_t *r;
    pk_thread_stats st; /* this worker's, copied to p->stats[k] at its end */
    unsigned k;
} worker_arg;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Consume every ready item from the next one on, unless another worker is
 * already at it (it will see the items this one made ready before it gives
 * the turn up: both look under the lock). Under lock; drops it around each
 * consume call. */
static void consume_ready(run_t *r, void *state, pk_thread_stats *st)
{
    const pk_pipeline *p = r->p;
    if (r->consuming) return;
    r->consuming = true;
    while (!r->stop && r->consumed < p->end && r->ready[r->consumed % p->window]) {
        uint64_t i = r->consumed;
        size_t s = (size_t)(i % p->window);
        pthread_mutex_unlock(&r->lock);
        double t0 = now_s();
        int rc = p->consume(p->user, state, i, &r->slots[s], &r->res[s]);
        st->consume += now_s() - t0;
        st->consumed++;
        pthread_mutex_lock(&r->lock);
        r->ready[s] = false;
        r->consumed = i + 1;
        if (rc && !r->rc) r->rc = rc, r->stop = true;
        if (r->free_waiters || r->stop) pthread_cond_broadcast(&r->cv_free);
    }
    r->consuming = false;
    if (r->stop || r->consumed == p->end) pthread_cond_signal(&r->cv_done);
}

static void *worker(void *arg)
{
    worker_arg *wa = arg;
    run_t *r = wa->r;
    pk_thread_stats *st = &wa->st;
    const pk_pipeline *p = r->p;
    double start = now_s();
    void *state = p->thread_init ? p->thread_init(p->user, wa->k) : NULL;
    st->init = now_s() - start;
    pthread_mutex_lock(&r->lock);
    if (p->thread_init && !state) {
        if (!r->rc) r->rc = -1;
        r->stop = true;
        pthread_cond_broadcast(&r->cv_free);
        pthread_cond_signal(&r->cv_done);
    }
    for (;;) {
        if (!r->stop && r->next_take < p->end && r->next_take >= r->consumed + p->window) {
            double t0 = now_s();
            while (!r->stop && r->next_take < p->end && r->next_take >= r->consumed + p->window) {
                r->free_waiters++;
                pthread_cond_wait(&r->cv_free, &r->lock);
                r->free_waiters--;
            }
            st->window += now_s() - t0;
        }
        if (r->stop || r->next_take >= p->end) break;
        uint64_t i = r->next_take++;
        size_t s = (size_t)(i % p->window);
        pthread_mutex_unlock(&r->lock);
        double t0 = now_s(), t1 = t0;
        if (p->prefetch && p->ahead && p->end - i > p->ahead) {
            p->prefetch(p->user, i + p->ahead);
            t1 = now_s();
            st->prefetch += t1 - t0;
        }
        pk_result *res = &r->res[s];
        memset(res, 0, sizeof *res);
        p->produce(p->user, state, i, r->slots[s], res);
        st->produce += now_s() - t1;
        st->produced++;
        pthread_mutex_lock(&r->lock);
        r->ready[s] = true;
        if (i == r->consumed) consume_ready(r, state, st);
    }
    pthread_mutex_unlock(&r->lock);
    double t0 = now_s();
    if (state && p->thread_fini) p->thread_fini(state);
    double end = now_s();
    st->init += end - t0;
    st->wall = end - start;
    if (p->stats) p->stats[wa->k] = *st; /* read after pthread_join */
    return NULL;
}

int pk_pipeline_run(const pk_pipeline *p)
{
    if (p->threads == 0 || p->window < p->threads || p->first > p->end) return -1;
    run_t r;
    memset(&r, 0, sizeof r);
    r.p = p;
    r.next_take = r.consumed = p->first;
    r.slots = calloc(p->window, sizeof *r.slots);
    r.res = calloc(p->window, sizeof *r.res);
    r.ready = calloc(p->window, sizeof *r.ready);
    pthread_t *th = calloc(p->threads, sizeof *th);
    worker_arg *wa = calloc(p->threads, sizeof *wa);
    int rc = -1;
    unsigned started = 0;
    if (p->stats) memset(p->stats, 0, p->threads * sizeof *p->stats);
    if (r.slots && r.res && r.ready && th && wa && pk_pool_free_count(p->pool) >= p->window) {
        for (size_t k = 0; k < p->window; k++) r.slots[k] = pk_pool_get(p->pool);
        pthread_mutex_init(&r.lock, NULL);
        pthread_cond_init(&r.cv_free, NULL);
        pthread_cond_init(&r.cv_done, NULL);
        /* The items no worker announces: the first `ahead` (2 us each when
         * the files are cached; on cold storage the workers would wait
         * for the first files anyway). */
        for (uint64_t i = p->first; p->prefetch && i < p->end && i - p->first < p->ahead; i++)
            p->prefetch(p->user, i);
        for (; started < p->threads; started++) {
            wa[started] = (worker_arg){.r = &r, .k = started};
            if (pthread_create(&th[started], NULL, worker, &wa[started]) != 0) break;
        }
        pthread_mutex_lock(&r.lock);
        if (!started) r.rc = -1, r.stop = true;
        while (!r.stop && r.consumed < p->end) pthread_cond_wait(&r.cv_done, &r.lock);
        r.stop = true;
        pthread_cond_broadcast(&r.cv_free);
        pthread_mutex_unlock(&r.lock);
        for (unsigned k = 0; k < started; k++) pthread_join(th[k], NULL);
        rc = r.rc;
        pthread_cond_destroy(&r.cv_done);
        pthread_cond_destroy(&r.cv_free);
        pthread_mutex_destroy(&r.lock);
        for (size_t k = 0; k < p->window; k++) pk_pool_put(p->pool, r.slots[k]);
    }
    free(wa);
    free(th);
    free(r.ready);
    free(r.res);
    free(r.slots);
    return rc;
}
