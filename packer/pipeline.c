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

/* Consume every ready item from the next one on, unless another worker is
 * already at it (it will see the items this one made ready before it gives
 * the turn up: both look under the lock). Under lock; drops it around each
 * consume call. */
static void consume_ready(run_t *r)
{
    const pk_pipeline *p = r->p;
    if (r->consuming) return;
    r->consuming = true;
    while (!r->stop && r->consumed < p->end && r->ready[r->consumed % p->window]) {
        uint64_t i = r->consumed;
        size_t s = (size_t)(i % p->window);
        pthread_mutex_unlock(&r->lock);
        int rc = p->consume(p->user, i, &r->slots[s], &r->res[s]);
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
    run_t *r = arg;
    const pk_pipeline *p = r->p;
    void *state = p->thread_init ? p->thread_init(p->user) : NULL;
    pthread_mutex_lock(&r->lock);
    if (p->thread_init && !state) {
        if (!r->rc) r->rc = -1;
        r->stop = true;
        pthread_cond_broadcast(&r->cv_free);
        pthread_cond_signal(&r->cv_done);
    }
    for (;;) {
        while (!r->stop && r->next_take < p->end && r->next_take >= r->consumed + p->window) {
            r->free_waiters++;
            pthread_cond_wait(&r->cv_free, &r->lock);
            r->free_waiters--;
        }
        if (r->stop || r->next_take >= p->end) break;
        uint64_t i = r->next_take++;
        size_t s = (size_t)(i % p->window);
        pthread_mutex_unlock(&r->lock);
        if (p->prefetch && p->ahead && p->end - i > p->ahead) p->prefetch(p->user, i + p->ahead);
        pk_result *res = &r->res[s];
        memset(res, 0, sizeof *res);
        p->produce(p->user, state, i, r->slots[s], res);
        pthread_mutex_lock(&r->lock);
        r->ready[s] = true;
        if (i == r->consumed) consume_ready(r);
    }
    pthread_mutex_unlock(&r->lock);
    if (state && p->thread_fini) p->thread_fini(state);
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
    int rc = -1;
    unsigned started = 0;
    if (r.slots && r.res && r.ready && th && pk_pool_free_count(p->pool) >= p->window) {
        for (size_t k = 0; k < p->window; k++) r.slots[k] = pk_pool_get(p->pool);
        pthread_mutex_init(&r.lock, NULL);
        pthread_cond_init(&r.cv_free, NULL);
        pthread_cond_init(&r.cv_done, NULL);
        /* The items no worker announces: the first `ahead` (2 us each when
         * the files are cached; on cold storage the workers would wait
         * for the first files anyway). */
        for (uint64_t i = p->first; p->prefetch && i < p->end && i - p->first < p->ahead; i++)
            p->prefetch(p->user, i);
        for (; started < p->threads; started++)
            if (pthread_create(&th[started], NULL, worker, &r) != 0) break;
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
    free(th);
    free(r.ready);
    free(r.res);
    free(r.slots);
    return rc;
}
