/* packer/pipeline.c - see pipeline.h.
 *
 * Wake-ups are rationed. On a virtual machine waking a thread that sleeps on
 * another vCPU costs an inter-processor interrupt and two exits to the
 * hypervisor, several microseconds each side; a wake-up per image (the first
 * version) was about 1.5% of the decoding thread's time. So the consumer, once
 * asleep, is only woken when `batch` items in a row are ready for it (or the
 * last ones are), and the workers only when one of them is actually waiting
 * for a free slot. The window is large enough that the workers never run
 * dry meanwhile.
 *
 * Inputs are announced (prefetch) `ahead` items before they are taken, by
 * the worker taking the item that many places earlier: their reads are then
 * in flight while the items before them are produced, instead of stalling a
 * worker each (a cold dataset stalls on every file; even a warm one here
 * lost a few percent of its files' pages to reclaim within seconds). */
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
    pthread_cond_t cv_ready, cv_free;
    uint64_t next_take, consumed; /* next item to hand out; next item to consume */
    uint64_t batch;               /* ready items in a row that wake the consumer */
    bool consumer_waiting;
    unsigned free_waiters;        /* workers asleep on cv_free */
    bool stop, init_failed;
} run_t;

/* Whether the sleeping consumer has enough to do: `batch` items in a row
 * from the next one (fewer at the end of the input) are ready. Under lock. */
static bool enough_ready(const run_t *r)
{
    const pk_pipeline *p = r->p;
    uint64_t need = p->end - r->consumed < r->batch ? p->end - r->consumed : r->batch;
    for (uint64_t k = 0; k < need; k++)
        if (!r->ready[(r->consumed + k) % p->window]) return false;
    return true;
}

static void *worker(void *arg)
{
    run_t *r = arg;
    const pk_pipeline *p = r->p;
    void *state = p->thread_init ? p->thread_init(p->user) : NULL;
    pthread_mutex_lock(&r->lock);
    if (p->thread_init && !state) {
        r->init_failed = r->stop = true;
        pthread_cond_broadcast(&r->cv_ready);
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
        if (r->consumer_waiting && enough_ready(r)) pthread_cond_signal(&r->cv_ready);
    }
    pthread_mutex_unlock(&r->lock);
    if (state && p->thread_fini) p->thread_fini(state);
    return NULL;
}

static int consume_all(run_t *r)
{
    const pk_pipeline *p = r->p;
    int rc = 0;
    for (uint64_t i = p->first; i < p->end && !rc; i++) {
        size_t s = (size_t)(i % p->window);
        pthread_mutex_lock(&r->lock);
        if (!r->ready[s] && !r->init_failed) {
            r->consumer_waiting = true;
            while (!enough_ready(r) && !r->init_failed) pthread_cond_wait(&r->cv_ready, &r->lock);
            r->consumer_waiting = false;
        }
        bool failed = r->init_failed;
        pthread_mutex_unlock(&r->lock);
        if (failed) return -1;
        rc = p->consume(p->user, i, &r->slots[s], &r->res[s]);
        pthread_mutex_lock(&r->lock);
        r->ready[s] = false;
        r->consumed = i + 1;
        if (rc) r->stop = true;
        if (r->free_waiters || rc) pthread_cond_broadcast(&r->cv_free);
        pthread_mutex_unlock(&r->lock);
    }
    return rc;
}

int pk_pipeline_run(const pk_pipeline *p)
{
    if (p->threads == 0 || p->window < p->threads || p->first > p->end) return -1;
    run_t r;
    memset(&r, 0, sizeof r);
    r.p = p;
    r.next_take = r.consumed = p->first;
    /* Half the window: the workers still have the other half to fill while
     * the consumer catches up. */
    r.batch = p->window / 2 ? p->window / 2 : 1;
    r.slots = calloc(p->window, sizeof *r.slots);
    r.res = calloc(p->window, sizeof *r.res);
    r.ready = calloc(p->window, sizeof *r.ready);
    pthread_t *th = calloc(p->threads, sizeof *th);
    int rc = -1;
    unsigned started = 0;
    if (r.slots && r.res && r.ready && th && pk_pool_free_count(p->pool) >= p->window) {
        for (size_t k = 0; k < p->window; k++) r.slots[k] = pk_pool_get(p->pool);
        pthread_mutex_init(&r.lock, NULL);
        pthread_cond_init(&r.cv_ready, NULL);
        pthread_cond_init(&r.cv_free, NULL);
        /* The items no worker announces: the first `ahead` (2 us each when
         * the files are cached; on cold storage the workers would wait
         * for the first files anyway). */
        for (uint64_t i = p->first; p->prefetch && i < p->end && i - p->first < p->ahead; i++)
            p->prefetch(p->user, i);
        for (; started < p->threads; started++)
            if (pthread_create(&th[started], NULL, worker, &r) != 0) break;
        rc = started ? consume_all(&r) : -1;
        pthread_mutex_lock(&r.lock);
        r.stop = true;
        pthread_cond_broadcast(&r.cv_free);
        pthread_mutex_unlock(&r.lock);
        for (unsigned k = 0; k < started; k++) pthread_join(th[k], NULL);
        pthread_cond_destroy(&r.cv_free);
        pthread_cond_destroy(&r.cv_ready);
        pthread_mutex_destroy(&r.lock);
        for (size_t k = 0; k < p->window; k++) pk_pool_put(p->pool, r.slots[k]);
    }
    free(th);
    free(r.ready);
    free(r.res);
    free(r.slots);
    return rc;
}
