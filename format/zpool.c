/* format/zpool.c - compress a writer's blocks on several threads, hand the
 * frames back in submission order.
 *
 * Each block is compressed on its own with a fixed level (a fresh frame, no
 * dictionary, no zstd worker threads), so its bytes do not depend on which
 * thread compressed it or when: the shard is the same whatever the number
 * of threads. The writer submits closed blocks, takes finished frames from
 * the front of the queue only, and waits when too many are in flight. */
#include "internal.h"
#include "zpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <zstd.h>

typedef struct job {
    struct job *next;
    stk__zframe r;
    uint8_t *raw;
    size_t raw_len;
    int level;
    int state; /* 0 queued, 1 running, 2 done */
} job;

struct stk__zpool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail;
    size_t pending;
    unsigned nthreads;
    int quit;
    pthread_t th[];
};

static void *zpool_main(void *arg)
{
    stk__zpool *p = arg;
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    pthread_mutex_lock(&p->mu);
    for (;;) {
        job *j = p->head;
        while (j && j->state) j = j->next;
        if (!j) {
            if (p->quit) break;
            pthread_cond_wait(&p->cv, &p->mu);
            continue;
        }
        j->state = 1;
        pthread_mutex_unlock(&p->mu);
        size_t bound = ZSTD_compressBound(j->raw_len), n = 0;
        uint8_t *out = cctx ? malloc(bound ? bound : 1) : NULL;
        if (!out) j->r.err = STK_E_NOMEM;
        else if (ZSTD_isError(n = ZSTD_compressCCtx(cctx, out, bound, j->raw, j->raw_len, j->level)))
            j->r.err = STK_E_IO, j->r.zerr = n;
        free(j->raw);
        j->raw = NULL;
        pthread_mutex_lock(&p->mu);
        j->r.frame = out;
        j->r.len = j->r.err ? 0 : n;
        j->state = 2;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    ZSTD_freeCCtx(cctx);
    return NULL;
}

stk__zpool *stk__zpool_new(unsigned threads)
{
    stk__zpool *p = calloc(1, sizeof *p + threads * sizeof(pthread_t));
    if (!p) return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (; p->nthreads < threads; p->nthreads++)
        if (pthread_create(&p->th[p->nthreads], NULL, zpool_main, p) != 0) break;
    if (!p->nthreads) {
        stk__zpool_free(p);
        return NULL;
    }
    return p;
}

void stk__zpool_free(stk__zpool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    for (job *j = p->head; j; j = j->next) /* nobody takes these: drop the queued ones */
        if (!j->state) j->state = 3;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->nthreads; i++) pthread_join(p->th[i], NULL);
    for (job *j = p->head, *n; j; j = n) {
        n = j->next;
        free(j->raw);
        free(j->r.frame);
        free(j);
    }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int stk__zpool_submit(stk__zpool *p, unsigned field, uint8_t *raw, size_t len, int level, uint64_t next_first)
{
    job *j = calloc(1, sizeof *j);
    if (!j) return STK_E_NOMEM;
    j->r.field = field;
    j->r.next_first = next_first;
    j->r.raw_len = len;
    j->raw = raw;
    j->raw_len = len;
    j->level = level;
    pthread_mutex_lock(&p->mu);
    if (p->tail) p->tail->next = j;
    else p->head = j;
    p->tail = j;
    p->pending++;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return STK_OK;
}

int stk__zpool_take(stk__zpool *p, int wait, stk__zframe *out)
{
    pthread_mutex_lock(&p->mu);
    while (wait && p->head && p->head->state != 2) pthread_cond_wait(&p->cv, &p->mu);
    job *j = p->head;
    if (!j || j->state != 2) {
        pthread_mutex_unlock(&p->mu);
        return 0;
    }
    p->head = j->next;
    if (!p->head) p->tail = NULL;
    p->pending--;
    pthread_mutex_unlock(&p->mu);
    *out = j->r;
    free(j);
    return 1;
}

size_t stk__zpool_pending(stk__zpool *p)
{
    pthread_mutex_lock(&p->mu);
    size_t n = p->pending;
    pthread_mutex_unlock(&p->mu);
    return n;
}
