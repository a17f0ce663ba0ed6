/* reader/device_host.c - the host backend: the device protocol on threads
 * and ordinary memory.
 *
 * A host stream is a thread that runs a FIFO of operations (copy, event
 * completion, event wait, function, transform). Events count records and
 * completions: record() takes a ticket, the stream completes it in order,
 * and a wait blocks for the ticket current when the wait was issued, which
 * is CUDA's semantics for cudaStreamWaitEvent and cudaEventSynchronize. So
 * every ordering rule of the upload protocol is exercised on machines
 * without a GPU, under ThreadSanitizer. */
#include "device.h"
#include "membuf.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t recorded, completed;
    double t_completed; /* monotonic time of the last completion */
} host_event;

enum { OP_COPY, OP_COMPLETE, OP_WAIT, OP_FUNC, OP_XFORM };

typedef struct host_op {
    struct host_op *next;
    int kind;
    void *dst;
    const void *src;
    size_t n;
    host_event *ev;
    uint64_t ticket;
    void (*fn)(void *);
    void *arg;
    stk__xform_job job;
} host_op;

struct stk_host_stream {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* work queued, or an operation ran */
    host_op *head, *tail;
    uint64_t queued, done; /* operations */
    int stop;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------- events */

static void ev_complete(host_event *e, uint64_t ticket)
{
    pthread_mutex_lock(&e->mu);
    if (ticket > e->completed) e->completed = ticket;
    e->t_completed = now_s();
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void ev_wait_ticket(host_event *e, uint64_t ticket)
{
    pthread_mutex_lock(&e->mu);
    while (e->completed < ticket) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

static uint64_t ev_current(host_event *e)
{
    pthread_mutex_lock(&e->mu);
    uint64_t t = e->recorded;
    pthread_mutex_unlock(&e->mu);
    return t;
}

/* ------------------------------------------------------------- streams */

static void run_op(host_op *op)
{
    switch (op->kind) {
    case OP_COPY:
        memcpy(op->dst, op->src, op->n);
        break;
    case OP_COMPLETE:
        ev_complete(op->ev, op->ticket);
        break;
    case OP_WAIT:
        ev_wait_ticket(op->ev, op->ticket);
        break;
    case OP_FUNC:
        op->fn(op->arg);
        break;
    case OP_XFORM:
        stk__xform_host(&op->job);
        break;
    }
}

static void *stream_main(void *arg)
{
    stk_host_stream *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head) break; /* stop, and nothing left to run */
        host_op *op = s->head;
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        pthread_mutex_unlock(&s->mu);
        run_op(op);
        free(op);
        pthread_mutex_lock(&s->mu);
        s->done++;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

stk_host_stream *stk_host_stream_create(stk_error *err)
{
    stk_host_stream *s = calloc(1, sizeof *s);
    if (!s) return stk_error_set(err, STK_E_NOMEM, "out of memory"), NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return stk_error_set(err, STK_E_IO, "cannot start a host stream thread"), NULL;
    }
    return s;
}

void stk_host_stream_destroy(stk_host_stream *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int enqueue(stk_host_stream *s, host_op *op, stk_error *err)
{
    if (!op) return stk_error_set(err, STK_E_NOMEM, "out of memory queueing a host stream operation");
    pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = op;
    else s->head = op;
    s->tail = op;
    s->queued++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return STK_OK;
}

int stk_host_stream_launch(stk_host_stream *s, void (*fn)(void *), void *arg, stk_error *err)
{
    if (!s || !fn) return stk_error_set(err, STK_E_ARG, "stk_host_stream_launch: NULL stream or function");
    host_op *op = calloc(1, sizeof *op);
    if (op) {
        op->kind = OP_FUNC;
        op->fn = fn;
        op->arg = arg;
    }
    return enqueue(s, op, err);
}

void stk_host_stream_synchronize(stk_host_stream *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    uint64_t target = s->queued;
    while (s->done < target) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------- backend */

/* "Pinned" and "device" memory alike: page-aligned, huge pages from 2 MiB
 * (membuf.c: the transform's output ring is hundreds of MiB touched first
 * by the transform). */
static int h_alloc(stk__backend *b, size_t n, void **p, stk_error *err)
{
    (void)b;
    if (!(*p = stk__buf_alloc(n)))
        return stk_error_set(err, STK_E_NOMEM, "out of memory (%zu bytes of host-backend buffers)", n);
    return STK_OK;
}

static void h_free(stk__backend *b, void *p)
{
    (void)b;
    free(p);
}

static int h_stream_create(stk__backend *b, void **s, stk_error *err)
{
    (void)b;
    return (*s = stk_host_stream_create(err)) ? STK_OK : err ? err->code : STK_E_IO;
}

static void h_stream_destroy(stk__backend *b, void *s)
{
    (void)b;
    stk_host_stream_destroy(s);
}

static int h_event_create(stk__backend *b, void **e, int timing, stk_error *err)
{
    (void)b;
    (void)timing;
    host_event *ev = calloc(1, sizeof *ev);
    if (!ev) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    pthread_mutex_init(&ev->mu, NULL);
    pthread_cond_init(&ev->cv, NULL);
    *e = ev;
    return STK_OK;
}

static void h_event_destroy(stk__backend *b, void *e)
{
    (void)b;
    host_event *ev = e;
    if (!ev) return;
    pthread_cond_destroy(&ev->cv);
    pthread_mutex_destroy(&ev->mu);
    free(ev);
}

static host_op *new_op(int kind)
{
    host_op *op = calloc(1, sizeof *op);
    if (op) op->kind = kind;
    return op;
}

static int h_copy(stk__backend *b, void *dst, const void *src, size_t n, void *s, stk_error *err)
{
    (void)b;
    if (!s) {
        memcpy(dst, src, n);
        return STK_OK;
    }
    host_op *op = new_op(OP_COPY);
    if (op) {
        op->dst = dst;
        op->src = src;
        op->n = n;
    }
    return enqueue(s, op, err);
}

static int h_record(stk__backend *b, void *e, void *s, stk_error *err)
{
    (void)b;
    host_event *ev = e;
    pthread_mutex_lock(&ev->mu);
    uint64_t t = ++ev->recorded;
    pthread_mutex_unlock(&ev->mu);
    if (!s) {
        ev_complete(ev, t);
        return STK_OK;
    }
    host_op *op = new_op(OP_COMPLETE);
    if (op) {
        op->ev = ev;
        op->ticket = t;
    }
    return enqueue(s, op, err);
}

static int h_wait(stk__backend *b, void *s, void *e, stk_error *err)
{
    (void)b;
    host_event *ev = e;
    uint64_t t = ev_current(ev);
    if (!s) {
        ev_wait_ticket(ev, t);
        return STK_OK;
    }
    host_op *op = new_op(OP_WAIT);
    if (op) {
        op->ev = ev;
        op->ticket = t;
    }
    return enqueue(s, op, err);
}

static int h_sync(stk__backend *b, void *e, stk_error *err)
{
    (void)b;
    (void)err;
    host_event *ev = e;
    ev_wait_ticket(ev, ev_current(ev));
    return STK_OK;
}

static double h_elapsed(stk__backend *b, void *start, void *end)
{
    (void)b;
    host_event *a = start, *z = end;
    pthread_mutex_lock(&a->mu);
    double t0 = a->t_completed;
    pthread_mutex_unlock(&a->mu);
    pthread_mutex_lock(&z->mu);
    double t1 = z->t_completed;
    pthread_mutex_unlock(&z->mu);
    return t1 > t0 && t0 > 0 ? t1 - t0 : 0;
}

static int h_transform(stk__backend *b, const stk__xform_job *job, void *s, stk_error *err)
{
    (void)b;
    if (!s) {
        stk__xform_host(job);
        return STK_OK;
    }
    host_op *op = new_op(OP_XFORM);
    if (op) op->job = *job;
    return enqueue(s, op, err);
}

static void h_destroy(stk__backend *b) { free(b); }

stk__backend *stk__backend_host_create(stk_error *err)
{
    stk__backend *b = calloc(1, sizeof *b);
    if (!b) return stk_error_set(err, STK_E_NOMEM, "out of memory"), NULL;
    b->kind = STK_DEVICE_HOST;
    b->name = "host";
    b->host_alloc = h_alloc;
    b->host_free = h_free;
    b->dev_alloc = h_alloc;
    b->dev_free = h_free;
    b->stream_create = h_stream_create;
    b->stream_destroy = h_stream_destroy;
    b->event_create = h_event_create;
    b->event_destroy = h_event_destroy;
    b->copy_h2d = h_copy;
    b->event_record = h_record;
    b->stream_wait = h_wait;
    b->event_sync = h_sync;
    b->elapsed = h_elapsed;
    b->transform = h_transform;
    b->destroy = h_destroy;
    return b;
}
