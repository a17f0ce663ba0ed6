/* reader/upload.c - the device path: staging slots -> copy stream -> device
 * buffers, with the event protocol of stoker/reader.h ("Device upload").
 *
 * Per slot i there is a device buffer and four events:
 *   start, copied  around the upload (timing; `copied` also tells a worker
 *                  that the staging buffer may be refilled),
 *   ready          after the upload and the transform: what the consumer's
 *                  stream waits for,
 *   released       recorded on the consumer's stream when the caller lets the
 *                  batch go: the copy stream waits for it before it writes the
 *                  device buffer again.
 * The copy thread uploads batches in stream order, so `ready` events complete
 * in order too. Nothing here blocks the consumer's CPU thread on the device. */
#include "engine.h"
#include "trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int make_events(stk_reader *r, stk__dslot *d, stk_error *err)
{
    stk__backend *be = r->be;
    int rc;
    if ((rc = be->event_create(be, &d->ev_start, 1, err)) ||
        (rc = be->event_create(be, &d->ev_copied, 1, err)) ||
        (rc = be->event_create(be, &d->ev_ready, 0, err)) ||
        (rc = be->event_create(be, &d->ev_released, 0, err)))
        return rc;
    return STK_OK;
}

/* Pick the backend, or fall back to host batches when allowed. Called by
 * reader_open before the slots are allocated (they come from the backend). */
int stk__upload_backend(stk_reader *r, stk_error *err)
{
    stk_reader_options *o = &r->o;
    if (o->device == STK_DEVICE_NONE) return STK_OK;
    if (o->device == STK_DEVICE_HOST) {
        r->be = stk__backend_host_create(err);
    } else if (o->device == STK_DEVICE_CUDA) {
        stk_error why;
        r->be = stk__backend_cuda_create(o->device_index, &why);
        if (!r->be) {
            if (!o->device_fallback) {
                if (err) *err = why;
                return why.code;
            }
            /* With a transform the host backend computes the same output;
             * without one, plain host batches are the cheaper stand-in. */
            snprintf(r->device_note, sizeof r->device_note, "fell back to %s: %.400s",
                     r->xf_sel >= 0 ? "the host backend" : "host batches", why.msg);
            o->stream = NULL; /* a cudaStream_t means nothing to the host backend: the caller's thread */
            if (r->xf_sel < 0) {
                o->device = STK_DEVICE_NONE;
                return STK_OK;
            }
            o->device = STK_DEVICE_HOST;
            r->be = stk__backend_host_create(err);
        }
    } else {
        return stk_error_set(err, STK_E_ARG, "device %d unknown (none, host or cuda)", o->device);
    }
    if (!r->be) return err ? err->code : STK_E_NOMEM;
    return STK_OK;
}

/* Give every slot a device buffer and its events, and make the copy stream. */
int stk__upload_open(stk_reader *r, stk_error *err)
{
    if (!r->be) return STK_OK;
    int rc;
    if ((rc = r->be->stream_create(r->be, &r->copy_stream, err))) return rc;
    if (!(r->dslots = calloc(r->nslots, sizeof *r->dslots)))
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    for (unsigned i = 0; i < r->nslots; i++) {
        stk__dslot *d = &r->dslots[i];
        if ((rc = r->be->dev_alloc(r->be, r->slot_bytes ? r->slot_bytes : 1, &d->dev, err))) return rc;
        if (r->xf_sel >= 0 &&
            (rc = r->be->dev_alloc(r->be, r->xf_out_bytes * r->o.batch_size, &d->dev_out, err)))
            return rc;
        if ((rc = make_events(r, d, err))) return rc;
    }
    return STK_OK;
}

/* Run everything queued on the copy stream, then drop it. */
void stk__upload_drain(stk_reader *r)
{
    if (r->be && r->copy_stream) r->be->stream_destroy(r->be, r->copy_stream);
    if (r->be) r->copy_stream = NULL;
}

void stk__upload_close(stk_reader *r)
{
    if (!r->be) return;
    stk__upload_drain(r);
    if (r->dslots)
        for (unsigned i = 0; i < r->nslots; i++) {
            stk__dslot *d = &r->dslots[i];
            r->be->dev_free(r->be, d->dev);
            r->be->dev_free(r->be, d->dev_out);
            void *ev[4] = {d->ev_start, d->ev_copied, d->ev_ready, d->ev_released};
            for (int k = 0; k < 4; k++)
                if (ev[k]) r->be->event_destroy(r->be, ev[k]);
        }
    free(r->dslots);
    r->be->destroy(r->be);
    r->be = NULL;
}

/* A worker about to refill slot i's staging buffer: wait (this worker only)
 * until its last upload finished, and account the upload's duration. */
double stk__upload_reclaim(stk_reader *r, unsigned i, stk_error *err)
{
    stk__dslot *d = &r->dslots[i];
    if (!d->used) return 0;
    if (r->be->event_sync(r->be, d->ev_copied, err)) return 0;
    return r->be->elapsed(r->be, d->ev_start, d->ev_copied);
}

/* Queue the upload (and transform) of slot sl on the copy stream. */
static int upload(stk_reader *r, stk__slot *sl, stk__dslot *d, uint64_t *bytes, stk_error *err)
{
    stk__backend *be = r->be;
    void *cs = r->copy_stream;
    uint32_t n = sl->batch.size;
    int rc;
    /* From the first queued operation on, the staging buffer is in use:
     * reclaim and close must wait for ev_copied, even if a later enqueue
     * fails (nothing is recorded then, and they wait for the last record). */
    d->used = 1;
    if ((rc = be->stream_wait(be, cs, d->ev_released, err)) ||
        (rc = be->event_record(be, d->ev_start, cs, err)))
        return rc;
    for (unsigned k = 0; k < r->nsel; k++) {
        stk_batch_field *bf = &sl->fields[k];
        if (bf->kind != STK_KIND_TENSOR) continue;
        uint64_t len = (uint64_t)n * r->sel_stride[k];
        if (len &&
            (rc = be->copy_h2d(be, (uint8_t *)d->dev + r->sel_off[k], sl->buf + r->sel_off[k], len, cs, err)))
            return rc;
        *bytes += len;
        bf->data = (uint8_t *)d->dev + r->sel_off[k];
    }
    if (r->xf_sel >= 0 && n) {
        uint64_t len = (uint64_t)n * sizeof(stk__crop_box);
        if ((rc = be->copy_h2d(be, (uint8_t *)d->dev + r->boxes_off, sl->buf + r->boxes_off, len, cs, err)))
            return rc;
        *bytes += len;
    }
    if ((rc = be->event_record(be, d->ev_copied, cs, err))) return rc;
    if (r->xf_sel >= 0) {
        stk_batch_field *bf = &sl->fields[r->xf_sel];
        stk__xform_job job = r->xf_job;
        job.src = (const uint8_t *)d->dev + r->sel_off[r->xf_sel];
        job.dst = d->dev_out;
        job.boxes = (const stk__crop_box *)((const uint8_t *)d->dev + r->boxes_off);
        job.n = n;
        if (n && (rc = be->transform(be, &job, cs, err))) return rc;
        bf->data = d->dev_out;
        bf->nbytes = (uint64_t)n * r->xf_out_bytes;
    }
    if ((rc = be->event_record(be, d->ev_ready, cs, err))) return rc;
    sl->batch.on_device = 1;
    sl->batch.event = d->ev_ready;
    return STK_OK;
}

void *stk__copier_main(void *arg)
{
    stk_reader *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        unsigned i = stk__slot_index(r, r->next_copy); /* stale until claimed: seq tells */
        stk__slot *sl = &r->slots[i];
        if (r->pausing || sl->state != SLOT_GATHERED || sl->seq != r->next_copy) {
            pthread_cond_wait(&r->ready_cv, &r->mu);
            continue;
        }
        uint64_t gen = r->gen, bytes = 0;
        stk__dslot *d = &r->dslots[i];
        r->active++;
        pthread_mutex_unlock(&r->mu);
        STK_TRACE_PUSH(r->tl, STK_TRACK_COPIER(r->nworkers), "upload", sl->seq, 0);
        if (!sl->err.code && upload(r, sl, d, &bytes, &sl->err)) { /* name the batch */
            char what[STK_ERROR_MSG_MAX];
            snprintf(what, sizeof what, "%s", sl->err.msg);
            stk_error_set(&sl->err, sl->err.code, "epoch %llu, batch %llu: %.400s",
                          (unsigned long long)sl->batch.epoch, (unsigned long long)sl->batch.index, what);
        }
        STK_TRACE_POP(r->tl, STK_TRACK_COPIER(r->nworkers));
        pthread_mutex_lock(&r->mu);
        r->active--;
        r->st_h2d_bytes += bytes;
        if (r->gen == gen) {
            sl->state = SLOT_READY;
            r->next_copy++;
        } else {
            sl->state = SLOT_FREE;
        }
        pthread_cond_broadcast(&r->ready_cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* The consumer took batch in slot i: its stream waits for the upload. */
int stk__upload_acquire(stk_reader *r, unsigned i, stk_error *err)
{
    return r->be->stream_wait(r->be, r->o.stream, r->dslots[i].ev_ready, err);
}

/* The consumer let go of the batch in slot i: mark the point on its stream
 * after which the device buffer may be overwritten. */
int stk__upload_release(stk_reader *r, unsigned i, stk_error *err)
{
    return r->be->event_record(r->be, r->dslots[i].ev_released, r->o.stream, err);
}

int stk_reader_synchronize(stk_reader *r, stk_error *err)
{
    pthread_mutex_lock(&r->mu);
    int held = r->be && r->released < r->consume;
    unsigned i = held ? stk__slot_index(r, r->consume - 1) : 0;
    pthread_mutex_unlock(&r->mu);
    return held ? r->be->event_sync(r->be, r->dslots[i].ev_ready, err) : STK_OK;
}

const char *stk_reader_device_note(const stk_reader *r) { return r->device_note; }
