/* packer/pipeline.c - see pipeline.h. */
#include "pipeline.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const pk_pipeline *p;
    uint8_t *slots;
    pk_result *res;
    bool *ready;
    pthread_mutex_t lock;
    pthread_cond_t cv_ready, cv_free;
    uint64_t next_take, consumed; /* next item to hand out; next item to consume */
    bool stop, init_failed;
} run_t;

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
        while (!r->stop && r->next_take < p->end && r->next_take >= r->consumed + p->window)
            pthread_cond_wait(&r->cv_free, &r->lock);
        if (r->stop || r->next_take >= p->end) break;
        uint64_t i = r->next_take++;
        size_t s = (size_t)(i % p->window);
        pthread_mutex_unlock(&r->lock);
        pk_result *res = &r->res[s];
        memset(res, 0, sizeof *res);
        p->produce(p->user, state, i, r->slots + s * p->slot_bytes, res);
        pthread_mutex_lock(&r->lock);
        r->ready[s] = true;
        pthread_cond_broadcast(&r->cv_ready);
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
        while (!r->ready[s] && !r->init_failed) pthread_cond_wait(&r->cv_ready, &r->lock);
        bool failed = r->init_failed;
        pthread_mutex_unlock(&r->lock);
        if (failed) return -1;
        rc = p->consume(p->user, i, r->slots + s * p->slot_bytes, &r->res[s]);
        pthread_mutex_lock(&r->lock);
        r->ready[s] = false;
        r->consumed = i + 1;
        if (rc) r->stop = true;
        pthread_cond_broadcast(&r->cv_free);
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
    r.slots = malloc(p->window * p->slot_bytes);
    r.res = calloc(p->window, sizeof *r.res);
    r.ready = calloc(p->window, sizeof *r.ready);
    pthread_t *th = calloc(p->threads, sizeof *th);
    int rc = -1;
    unsigned started = 0;
    if (r.slots && r.res && r.ready && th) {
        pthread_mutex_init(&r.lock, NULL);
        pthread_cond_init(&r.cv_ready, NULL);
        pthread_cond_init(&r.cv_free, NULL);
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
    }
    free(th);
    free(r.ready);
    free(r.res);
    free(r.slots);
    return rc;
}
