/* reader/io.c - the direct-read engine (see io.h).
 *
 * Why not the mapping: a page fault reads synchronously on the faulting
 * thread, and madvise(WILLNEED) covers one part at a time, so cold shuffled
 * reads keep one or two requests in flight where NVMe wants dozens, and more
 * threads only add contention on the mapping. Reads submitted ahead fill the
 * device queue; O_DIRECT lands them in the slot without a page-cache copy and
 * leaves the trainer's memory alone on a dataset larger than RAM.
 *
 * The fault seam: STOKER_IO_FAULT="short:N,eintr:N,eagain:N,eio:S/R" makes
 * every Nth completion short (half, block-aligned), EINTR or EAGAIN, and any
 * read covering local record R of shard S fail with EIO. The reader reads it
 * at open; tests use it to exercise the retry and error paths of both
 * engines. */
#define _GNU_SOURCE
#include "io.h"
#include "membuf.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef STOKER_HAVE_URING
#  include <liburing.h>
#endif

#define IO_ALIGN 4096u                  /* O_DIRECT alignment of offsets, lengths, buffers */
#define IO_CHUNK (4u << 20)             /* reads are split at 4 MiB: a coalesced run spreads over the queue */
#define IO_BYTES_PER_DEPTH (256u << 10) /* bytes in flight per unit of depth (large reads) */
#define POOL_THREADS_MAX 64u

typedef struct stk__ioreq stk__ioreq;
struct stk__ioreq {
    size_t shard;
    uint64_t off, len; /* what the caller asked for */
    uint8_t *dst;
    uint64_t rec;
    uint32_t nrec;
    /* the read as issued: [roff, roff + need) into rbuf (dst, or the bounce area) */
    int fd;
    uint64_t roff, rlen, need, done;
    uint64_t sub; /* bytes of the read in flight (the ring) */
    uint8_t *rbuf;
    int bounce;
    int padded; /* the caller's buffer has IO_ALIGN writable bytes around dst */
    int err;    /* errno of a failure; -1: end of file */
    void *tag;  /* the caller's */
    stk__ioq *q;
    stk__ioreq *next; /* the pool's queue */
};

struct stk__ioq {
    stk__io *io;
    stk__ioreq *req;
    size_t n, cap;
    uint8_t *bounce;
    uint64_t bounce_cap;
    size_t left;   /* pool: reads not yet done (under io->pmu) */
    stk__rioq *rq; /* the remote backend's queue (remote shards), or NULL */
    int planned;   /* submitted, not yet waited for */
    pthread_cond_t done_cv;
#ifdef STOKER_HAVE_URING
    struct io_uring ring;
    int ring_ok;
    int dead; /* a submit failed for good: the rest of this queue's reads are read synchronously */
    size_t next, inflight, nre; /* the ring's progress through req[] */
    uint64_t inflight_bytes;
#endif
};

struct stk__io {
    const stk_dataset *ds;
    int engine;
    unsigned depth, nq;
    unsigned depth_now; /* the limit in force, <= depth (stk__io_set_depth; atomic) */
    stk__ioq *q;

    pthread_mutex_t fmu; /* the file table */
    int *fd;             /* per shard: -2 not opened yet, -1 read through the map */
    uint8_t *direct;     /* per shard: opened with O_DIRECT */

    /* the pool (STK__ENGINE_THREADS) */
    pthread_mutex_t pmu;
    pthread_cond_t pcv;
    stk__ioreq *head, *tail;
    pthread_t *th;
    unsigned nth;
    unsigned running; /* reads the pool's threads are doing (under pmu) */
    int stop;

    /* the fault seam */
    unsigned f_short, f_eintr, f_eagain;
    long long f_eio_shard;
    uint64_t f_eio_rec;
    uint64_t f_n; /* completions seen (atomic) */

    stk__rio *rio; /* the remote backend (io_remote.c) when shards are remote */

    uint64_t c_reads, c_bytes, c_retries, c_bounced, c_map; /* atomic */
    unsigned c_buffered;                                    /* under fmu */
};

/* ------------------------------------------------------------ the fault seam */

static int parse_fault(stk__io *io, const char *spec, stk_error *err)
{
    io->f_eio_shard = -1;
    if (!spec || !*spec) return STK_OK;
    const char *p = spec;
    while (*p) {
        unsigned long long a = 0, b = 0;
        int used = 0;
        if (sscanf(p, "short:%llu%n", &a, &used) == 1 && used) io->f_short = (unsigned)a;
        else if (sscanf(p, "eintr:%llu%n", &a, &used) == 1 && used) io->f_eintr = (unsigned)a;
        else if (sscanf(p, "eagain:%llu%n", &a, &used) == 1 && used) io->f_eagain = (unsigned)a;
        else if (sscanf(p, "eio:%llu/%llu%n", &a, &b, &used) == 2 && used) {
            io->f_eio_shard = (long long)a;
            io->f_eio_rec = b;
        } else {
            return stk_error_set(
                err, STK_E_ARG,
                "STOKER_IO_FAULT='%s': expected short:N, eintr:N, eagain:N or eio:SHARD/RECORD, "
                "comma-separated",
                spec);
        }
        if (io->f_eintr == 1 || io->f_eagain == 1)
            return stk_error_set(err, STK_E_ARG,
                                 "STOKER_IO_FAULT='%s': eintr:1 or eagain:1 would retry forever", spec);
        p += used;
        if (*p == ',') p++;
        else if (*p) return stk_error_set(err, STK_E_ARG, "STOKER_IO_FAULT='%s': stray '%s'", spec, p);
    }
    return STK_OK;
}

/* What the seam makes of a completion's result. */
static long long fault(stk__io *io, const stk__ioreq *rq, long long res)
{
    if (io->f_eio_shard >= 0 && (size_t)io->f_eio_shard == rq->shard && io->f_eio_rec >= rq->rec &&
        io->f_eio_rec < rq->rec + rq->nrec)
        return -EIO;
    if (!io->f_short && !io->f_eintr && !io->f_eagain) return res;
    uint64_t n = __atomic_add_fetch(&io->f_n, 1, __ATOMIC_RELAXED);
    if (io->f_eintr && n % io->f_eintr == 0) return -EINTR;
    if (io->f_eagain && n % io->f_eagain == 0) return -EAGAIN;
    if (io->f_short && n % io->f_short == 0 && res >= 2 * (long long)IO_ALIGN)
        return (res / 2) & ~(long long)(IO_ALIGN - 1);
    return res;
}

/* ------------------------------------------------------------ files */

/* The shard's file, opened once: O_DIRECT where the file system takes it.
 * The file must be the one the dataset mapped (same device and inode): a
 * shard replaced by rename is read through the mapping, as the reader
 * promises. -1: read through the mapping. */
static int shard_fd(stk__io *io, size_t s)
{
    pthread_mutex_lock(&io->fmu);
    int fd = io->fd[s];
    if (fd == -2) {
        const stk_shard *sh = stk_dataset_shard(io->ds, s);
        uint64_t dev, ino;
        stk_shard_file_id(sh, &dev, &ino);
        fd = -1;
        if (dev || ino) {
            int direct = 1;
            fd = open(stk_shard_path(sh), O_RDONLY | O_CLOEXEC | O_DIRECT);
            if (fd < 0 && errno == EINVAL) { /* tmpfs and some network file systems */
                direct = 0;
                fd = open(stk_shard_path(sh), O_RDONLY | O_CLOEXEC);
            }
            struct stat st;
            if (fd >= 0 &&
                (fstat(fd, &st) != 0 || (uint64_t)st.st_dev != dev || (uint64_t)st.st_ino != ino)) {
                close(fd);
                fd = -1;
            }
            if (fd >= 0) {
                io->direct[s] = (uint8_t)direct;
                io->c_buffered += !direct;
            }
        }
        io->fd[s] = fd;
    }
    pthread_mutex_unlock(&io->fmu);
    return fd;
}

/* ------------------------------------------------------------ completions */

static void fail(stk__ioreq *rq, int e)
{
    if (!rq->err) rq->err = e;
}

/* Account res bytes (or an error) for rq. Returns 1 when the rest must be
 * read again, 0 when rq is finished (done or failed). */
static int complete(stk__io *io, stk__ioreq *rq, long long res)
{
    res = fault(io, rq, res);
    if (res == -EINTR || res == -EAGAIN) {
        __atomic_add_fetch(&io->c_retries, 1, __ATOMIC_RELAXED);
        return 1;
    }
    if (res < 0) {
        fail(rq, (int)-res);
        return 0;
    }
    if (res == 0) { /* end of file before the records end: the shard shrank */
        fail(rq, -1);
        return 0;
    }
    rq->done += (uint64_t)res;
    if (rq->done < rq->need) {
        __atomic_add_fetch(&io->c_retries, 1, __ATOMIC_RELAXED);
        return 1;
    }
    if (rq->bounce) {
        memcpy(rq->dst, rq->rbuf + (rq->off - rq->roff), rq->len);
        __atomic_add_fetch(&io->c_bounced, rq->rlen, __ATOMIC_RELAXED);
    }
    __atomic_add_fetch(&io->c_reads, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&io->c_bytes, rq->len, __ATOMIC_RELAXED);
    return 0;
}

static int req_error(const stk__io *io, const stk__ioreq *rq, stk_error *err)
{
    const char *path = stk_shard_path(stk_dataset_shard(io->ds, rq->shard));
    char recs[64];
    if (rq->nrec > 1)
        snprintf(recs, sizeof recs, "records %llu-%llu", (unsigned long long)rq->rec,
                 (unsigned long long)(rq->rec + rq->nrec - 1));
    else snprintf(recs, sizeof recs, "record %llu", (unsigned long long)rq->rec);
    if (rq->err < 0)
        return stk_error_set(err, STK_E_TRUNCATED,
                             "%s: %s: end of file at offset %llu, before the %llu bytes the shard's header "
                             "promises (truncated in place?)",
                             path, recs, (unsigned long long)(rq->roff + rq->done),
                             (unsigned long long)(rq->off + rq->len));
    return stk_error_set(err, STK_E_IO, "%s: %s: read of %llu bytes at offset %llu failed: %s (errno %d)",
                         path, recs, (unsigned long long)rq->len, (unsigned long long)rq->off,
                         strerror(rq->err), rq->err);
}

/* ------------------------------------------------------------ the pool */

/* Read rq whole with pread, retrying as the ring would. */
static void pool_read(stk__io *io, stk__ioreq *rq)
{
    for (;;) {
        ssize_t got = pread(rq->fd, rq->rbuf + rq->done, rq->rlen - rq->done, (off_t)(rq->roff + rq->done));
        if (!complete(io, rq, got < 0 ? -(long long)errno : (long long)got)) return;
    }
}

/* Under pmu: how many of the pool's threads may read at once (depth_now
 * per queue). */
static unsigned pool_cap(const stk__io *io)
{
    uint64_t cap = (uint64_t)__atomic_load_n(&io->depth_now, __ATOMIC_RELAXED) * io->nq;
    return cap < io->nth ? (unsigned)cap : io->nth;
}

static void *pool_main(void *arg)
{
    stk__io *io = arg;
    pthread_mutex_lock(&io->pmu);
    for (;;) {
        while (!io->stop && (!io->head || io->running >= pool_cap(io))) pthread_cond_wait(&io->pcv, &io->pmu);
        if (!io->head) break;
        stk__ioreq *rq = io->head;
        io->head = rq->next;
        if (!io->head) io->tail = NULL;
        io->running++;
        pthread_mutex_unlock(&io->pmu);
        pool_read(io, rq);
        pthread_mutex_lock(&io->pmu);
        io->running--;
        if (--rq->q->left == 0) pthread_cond_signal(&rq->q->done_cv);
    }
    pthread_mutex_unlock(&io->pmu);
    return NULL;
}

static void pool_submit(stk__ioq *q)
{
    stk__io *io = q->io;
    pthread_mutex_lock(&io->pmu);
    for (size_t i = 0; i < q->n; i++) {
        stk__ioreq *rq = &q->req[i];
        rq->next = NULL;
        if (io->tail) io->tail->next = rq;
        else io->head = rq;
        io->tail = rq;
    }
    q->left = q->n;
    pthread_cond_broadcast(&io->pcv);
    pthread_mutex_unlock(&io->pmu);
}

static void pool_wait(stk__ioq *q)
{
    stk__io *io = q->io;
    pthread_mutex_lock(&io->pmu);
    while (q->left) pthread_cond_wait(&q->done_cv, &io->pmu);
    pthread_mutex_unlock(&io->pmu);
}

/* ------------------------------------------------------------ io_uring */

#ifdef STOKER_HAVE_URING
static void ring_prep(stk__ioq *q, stk__ioreq *rq)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring); /* never NULL: at most depth in flight */
    io_uring_prep_read(sqe, rq->fd, rq->rbuf + rq->done, (unsigned)(rq->rlen - rq->done),
                       rq->roff + rq->done);
    io_uring_sqe_set_data(sqe, rq);
}

/* Submit queued reads (resubmits first) while fewer than depth, and fewer
 * than depth x 256 KiB, are in flight: record-sized reads want many in
 * flight, 4 MiB block reads want a few (deeper queues of them were slower,
 * bench/README.md). A failed submit fails the requests not yet finished;
 * those in flight are waited for regardless. */
static void ring_fill(stk__ioq *q)
{
    stk__io *io = q->io;
    stk__ioreq **again = (stk__ioreq **)(void *)(q->req + q->cap);      /* see grow_reqs */
    unsigned depth = __atomic_load_n(&io->depth_now, __ATOMIC_RELAXED); /* <= the ring's size */
    uint64_t max_bytes = (uint64_t)depth * IO_BYTES_PER_DEPTH;
    stk__ioreq *prepared[1024]; /* io_depth <= 1024 (io_plan.c) */
    unsigned queued = 0;
    while (!q->dead && q->inflight < depth && queued < 1024 && (q->nre || q->next < q->n)) {
        stk__ioreq *rq = q->nre ? again[q->nre - 1] : &q->req[q->next];
        if (q->inflight && q->inflight_bytes + (rq->rlen - rq->done) > max_bytes) break;
        if (q->nre) q->nre--;
        else q->next++;
        rq->sub = rq->rlen - rq->done;
        q->inflight_bytes += rq->sub;
        ring_prep(q, rq);
        q->inflight++;
        prepared[queued++] = rq;
    }
    if (!queued) return;
    /* io_uring_submit may take fewer than were prepared (short of memory):
     * submit again until every prepared read is in the kernel's hands */
    unsigned taken = 0, spins = 0;
    while (taken < queued) {
        int rc = io_uring_submit(&q->ring);
        if (rc > 0) {
            taken += (unsigned)rc;
            spins = 0;
        } else if (rc == -EINTR || ((rc == -EAGAIN || rc == -EBUSY || rc == 0) && ++spins < 1000)) {
            if (rc != -EINTR) sched_yield();
        } else { /* the ring is unusable: what it did not take is read here, synchronously */
            for (unsigned i = taken; i < queued; i++) {
                q->inflight_bytes -= prepared[i]->sub;
                prepared[i]->sub = 0;
            }
            q->inflight -= queued - taken;
            q->dead = 1;
            return;
        }
    }
}

/* A dead ring's reads, from the one the ring refused on: synchronously, on
 * the worker's thread. Reads the ring took still complete through it. */
static void sync_rest(stk__ioq *q)
{
    stk__ioreq **again = (stk__ioreq **)(void *)(q->req + q->cap);
    while (q->nre) pool_read(q->io, again[--q->nre]);
    for (size_t i = 0; i < q->n; i++) {
        stk__ioreq *rq = &q->req[i];
        if (!rq->err && rq->done < rq->need && !rq->sub) pool_read(q->io, rq);
    }
    q->next = q->n;
}

/* Reap completions, refilling the ring, until every request is finished.
 * It never returns with a read in flight: the buffers are the reads' until
 * they complete. */
static void ring_wait(stk__ioq *q)
{
    stk__io *io = q->io;
    stk__ioreq **again = (stk__ioreq **)(void *)(q->req + q->cap);
    for (;;) {
        if (!q->dead) ring_fill(q);
        if (q->dead) sync_rest(q);
        if (!q->inflight) {
            if (q->dead || (q->next >= q->n && !q->nre)) break;
            continue;
        }
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&q->ring, &cqe);
        if (rc < 0) { /* EINTR, EAGAIN; anything else, retried too: reads are still out */
            if (rc != -EINTR) {
                struct timespec ts = {0, 1000000};
                nanosleep(&ts, NULL);
            }
            continue;
        }
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&q->ring, head, cqe)
        {
            stk__ioreq *rq = io_uring_cqe_get_data(cqe);
            q->inflight--;
            q->inflight_bytes -= rq->sub;
            rq->sub = 0;
            seen++;
            if (complete(io, rq, cqe->res)) again[q->nre++] = rq;
        }
        io_uring_cq_advance(&q->ring, seen);
    }
}
#endif

/* ------------------------------------------------------------ queues */

static int grow_reqs(stk__ioq *q, stk_error *err)
{
    if (q->n < q->cap) return STK_OK;
    size_t cap = q->cap ? 2 * q->cap : 256;
    /* one allocation: the requests, then a pointer per request (the ring's
     * resubmit stack) */
    stk__ioreq *p = realloc(q->req, cap * (sizeof *p + sizeof(stk__ioreq *)));
    if (!p) return stk_error_set(err, STK_E_NOMEM, "out of memory for the read queue");
    q->req = p;
    q->cap = cap;
    return STK_OK;
}

static int add(stk__ioq *q, size_t shard, uint64_t off, uint64_t len, void *dst, uint64_t rec, uint32_t nrec,
               void *tag, int padded, stk_error *err)
{
    if (stk__rio_remote(q->io->rio, shard))
        return stk__rioq_add(q->rq, shard, off, len, dst, rec, nrec, tag, err);
    int fd = shard_fd(q->io, shard);
    if (fd < 0) {
        __atomic_add_fetch(&q->io->c_map, 1, __ATOMIC_RELAXED);
        return STK__IO_USE_MAP;
    }
    for (uint64_t pos = 0; pos < len;) {
        int rc = grow_reqs(q, err);
        if (rc) return rc;
        /* padded reads end chunks on aligned offsets: their aligned
         * supersets then never overlap one another */
        uint64_t cur = off + pos,
                 end = padded ? (cur + IO_CHUNK) & ~(uint64_t)(IO_ALIGN - 1) : cur + IO_CHUNK;
        uint64_t n = end - cur < len - pos ? end - cur : len - pos;
        stk__ioreq *rq = &q->req[q->n++];
        memset(rq, 0, sizeof *rq);
        rq->shard = shard;
        rq->off = cur;
        rq->len = n;
        rq->dst = (uint8_t *)dst + pos;
        rq->rec = rec;
        rq->nrec = nrec;
        rq->fd = fd;
        rq->tag = tag;
        rq->padded = padded;
        rq->q = q;
        pos += n;
    }
    return STK_OK;
}

int stk__ioq_add(stk__ioq *q, size_t shard, uint64_t off, uint64_t len, void *dst, uint64_t rec,
                 uint32_t nrec, void *tag, stk_error *err)
{
    return add(q, shard, off, len, dst, rec, nrec, tag, 0, err);
}

int stk__ioq_add_padded(stk__ioq *q, size_t shard, uint64_t off, uint64_t len, void *dst, uint64_t rec,
                        uint32_t nrec, void *tag, stk_error *err)
{
    return add(q, shard, off, len, dst, rec, nrec, tag, 1, err);
}

/* Where each read goes: in place, or (O_DIRECT off alignment) the aligned
 * superset into the bounce area, sized here for the whole queue. */
static int plan_reads(stk__ioq *q, stk_error *err)
{
    const stk__io *io = q->io;
    uint64_t need = 0;
    for (size_t i = 0; i < q->n; i++) {
        stk__ioreq *rq = &q->req[i];
        int off_align = io->direct[rq->shard] && ((rq->off | rq->len | (uintptr_t)rq->dst) & (IO_ALIGN - 1));
        /* padded, with dst and off alike modulo the alignment: the aligned
         * superset lands in place, around dst */
        int in_place = off_align && rq->padded && !(((uintptr_t)rq->dst ^ rq->off) & (IO_ALIGN - 1));
        rq->bounce = off_align && !in_place;
        rq->roff = off_align ? rq->off & ~(uint64_t)(IO_ALIGN - 1) : rq->off;
        rq->need = rq->off + rq->len - rq->roff;
        rq->rlen = off_align ? (rq->need + IO_ALIGN - 1) & ~(uint64_t)(IO_ALIGN - 1) : rq->len;
        rq->rbuf = in_place ? rq->dst - (rq->off - rq->roff) : rq->dst;
        if (rq->bounce) need += rq->rlen;
    }
    if (need > q->bounce_cap) {
        void *p = stk__buf_alloc(need); /* IO_ALIGN-aligned */
        if (!p)
            return stk_error_set(err, STK_E_NOMEM, "out of memory for %llu bytes of read bounce area",
                                 (unsigned long long)need);
        free(q->bounce);
        q->bounce = p;
        q->bounce_cap = need;
    }
    uint64_t pos = 0;
    for (size_t i = 0; i < q->n; i++) {
        stk__ioreq *rq = &q->req[i];
        if (!rq->bounce) continue;
        rq->rbuf = q->bounce + pos;
        pos += rq->rlen;
    }
    return STK_OK;
}

static int local_submit(stk__ioq *q, stk_error *err)
{
    q->planned = 0;
    if (!q->n) return STK_OK;
    int rc = plan_reads(q, err);
    if (rc) {
        q->n = 0;
        return rc;
    }
    q->planned = 1;
#ifdef STOKER_HAVE_URING
    if (q->ring_ok) {
        q->next = q->inflight = q->nre = 0;
        q->inflight_bytes = 0;
        if (!q->dead) ring_fill(q);
        return STK_OK;
    }
#endif
    pool_submit(q);
    return STK_OK;
}

/* The remote shards' GETs go first: they wait longest. */
int stk__ioq_submit(stk__ioq *q, stk_error *err)
{
    int rrc = q->rq ? stk__rioq_submit(q->rq, err) : STK_OK;
    int rc = local_submit(q, rrc ? NULL : err);
    return rrc ? rrc : rc;
}

void stk__ioq_drain(stk__ioq *q)
{
    if (q->rq) stk__rioq_drain(q->rq);
    if (q->planned != 1) return;
#ifdef STOKER_HAVE_URING
    if (q->ring_ok) ring_wait(q);
    else
#endif
        pool_wait(q);
    q->planned = 2;
}

/* The local reads, then the remote runs. */
size_t stk__ioq_count(const stk__ioq *q) { return (q->planned ? q->n : 0) + stk__rioq_count(q->rq); }

int stk__ioq_result(stk__ioq *q, size_t i, void **tag, stk_error *err)
{
    size_t nl = q->planned ? q->n : 0;
    if (i >= nl) return stk__rioq_result(q->rq, i - nl, tag, err);
    stk__ioreq *rq = &q->req[i];
    if (tag) *tag = rq->tag;
    if (!rq->err && rq->done >= rq->need) return STK_OK;
    if (!rq->err) rq->err = EIO; /* the ring failed under it */
    return req_error(q->io, rq, err);
}

void stk__ioq_clear(stk__ioq *q)
{
    q->n = 0;
    q->planned = 0;
    stk__rioq_clear(q->rq);
}

/* Local reads queued but never submitted (the part failed first) were
 * never started: nothing to wait for or report. */
int stk__ioq_wait(stk__ioq *q, stk_error *err)
{
    stk__ioq_drain(q);
    int rc = STK_OK;
    for (size_t i = 0, n = stk__ioq_count(q); i < n && !rc; i++) rc = stk__ioq_result(q, i, NULL, err);
    stk__ioq_clear(q);
    return rc;
}

/* ------------------------------------------------------------ open, close */

static int start_engine(stk__io *io, const stk__io_config *c, char *note, size_t note_cap, stk_error *err)
{
    io->engine = STK__ENGINE_THREADS;
#ifdef STOKER_HAVE_URING
    if (c->engine != STK__ENGINE_THREADS) {
        int rc = 0;
        unsigned i;
        for (i = 0; i < io->nq && !rc; i++) {
            rc = io_uring_queue_init(io->depth, &io->q[i].ring, 0);
            io->q[i].ring_ok = rc == 0;
        }
        if (!rc) { /* IORING_OP_READ needs Linux 5.6: older rings take the ring but fail every read */
            struct io_uring_probe *pr = io_uring_get_probe_ring(&io->q[0].ring);
            if (!pr || !io_uring_opcode_supported(pr, IORING_OP_READ)) rc = -EOPNOTSUPP;
            if (pr) io_uring_free_probe(pr);
        }
        if (!rc) {
            io->engine = STK__ENGINE_URING;
            return STK_OK;
        }
        for (i = 0; i < io->nq; i++)
            if (io->q[i].ring_ok) {
                io_uring_queue_exit(&io->q[i].ring);
                io->q[i].ring_ok = 0;
            }
        snprintf(note, note_cap, "io_uring unavailable (%s): reading with a pool of pread threads",
                 strerror(-rc));
    }
#else
    if (c->engine == STK__ENGINE_URING)
        snprintf(note, note_cap, "built without liburing: reading with a pool of pread threads");
#endif
    io->nth = io->depth * io->nq < POOL_THREADS_MAX ? io->depth * io->nq : POOL_THREADS_MAX;
    if (!(io->th = calloc(io->nth, sizeof *io->th))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    for (unsigned i = 0; i < io->nth; i++) {
        int e = pthread_create(&io->th[i], NULL, pool_main, io);
        if (e) {
            io->nth = i;
            return stk_error_set(err, STK_E_IO, "cannot start an I/O thread: %s", strerror(e));
        }
    }
    return STK_OK;
}

int stk__io_open(stk__io **out, const stk_dataset *ds, const stk__io_config *c, char *note, size_t note_cap,
                 stk_error *err)
{
    *out = NULL;
    if (note_cap) note[0] = 0;
    stk__io *io = calloc(1, sizeof *io);
    if (!io) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    io->ds = ds;
    io->depth = c->depth ? c->depth : 1;
    io->depth_now = c->depth_now && c->depth_now < io->depth ? c->depth_now : io->depth;
    io->nq = c->queues ? c->queues : 1;
    pthread_mutex_init(&io->fmu, NULL);
    pthread_mutex_init(&io->pmu, NULL);
    pthread_cond_init(&io->pcv, NULL);
    size_t ns = stk_dataset_nshards(ds);
    io->fd = malloc((ns ? ns : 1) * sizeof *io->fd);
    io->direct = calloc(ns ? ns : 1, 1);
    io->q = calloc(io->nq, sizeof *io->q);
    if (!io->fd || !io->direct || !io->q) {
        free(io->fd);
        free(io->direct);
        free(io->q);
        free(io);
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    }
    for (size_t s = 0; s < ns; s++) io->fd[s] = -2;
    for (unsigned i = 0; i < io->nq; i++) {
        io->q[i].io = io;
        pthread_cond_init(&io->q[i].done_cv, NULL);
    }
    int rc = parse_fault(io, c->fault, err);
    if (!rc) rc = stk__rio_open(&io->rio, ds, io->nq, err);
    size_t nremote = 0;
    for (size_t s = 0; !rc && s < ns; s++) nremote += stk__rio_remote(io->rio, s);
    for (unsigned i = 0; !rc && i < io->nq; i++) io->q[i].rq = stk__rio_queue(io->rio, i);
    if (!rc && ns && nremote == ns) io->engine = STK__ENGINE_REMOTE; /* no local file to read */
    else if (!rc) rc = start_engine(io, c, note, note_cap, err);
    if (rc) {
        stk__io_close(io);
        return rc;
    }
    *out = io;
    return STK_OK;
}

void stk__io_close(stk__io *io)
{
    if (!io) return;
    pthread_mutex_lock(&io->pmu);
    io->stop = 1;
    pthread_cond_broadcast(&io->pcv);
    pthread_mutex_unlock(&io->pmu);
    for (unsigned i = 0; i < io->nth; i++) pthread_join(io->th[i], NULL);
    free(io->th);
    stk__rio_close(io->rio);
    for (unsigned i = 0; i < io->nq; i++) {
#ifdef STOKER_HAVE_URING
        if (io->q[i].ring_ok) io_uring_queue_exit(&io->q[i].ring);
#endif
        pthread_cond_destroy(&io->q[i].done_cv);
        free(io->q[i].req);
        free(io->q[i].bounce);
    }
    free(io->q);
    for (size_t s = 0; s < stk_dataset_nshards(io->ds); s++)
        if (io->fd[s] >= 0) close(io->fd[s]);
    free(io->fd);
    free(io->direct);
    pthread_cond_destroy(&io->pcv);
    pthread_mutex_destroy(&io->pmu);
    pthread_mutex_destroy(&io->fmu);
    free(io);
}

int stk__io_engine(const stk__io *io) { return io->rio ? STK__ENGINE_REMOTE : io->engine; }
void stk__io_remote_counts(const stk__io *io, stk__rio_counts *c)
{
    stk__rio_counts_get(io ? io->rio : NULL, c);
}
stk__ioq *stk__io_queue(stk__io *io, unsigned i) { return &io->q[i]; }

void stk__io_counts_get(stk__io *io, stk__io_counts *c)
{
    c->reads = __atomic_load_n(&io->c_reads, __ATOMIC_RELAXED);
    c->bytes = __atomic_load_n(&io->c_bytes, __ATOMIC_RELAXED);
    c->retries = __atomic_load_n(&io->c_retries, __ATOMIC_RELAXED);
    c->bounced = __atomic_load_n(&io->c_bounced, __ATOMIC_RELAXED);
    c->map_reads = __atomic_load_n(&io->c_map, __ATOMIC_RELAXED);
    pthread_mutex_lock(&io->fmu);
    c->buffered = io->c_buffered;
    pthread_mutex_unlock(&io->fmu);
}

void stk__io_set_depth(stk__io *io, unsigned depth)
{
    if (!io) return;
    depth = depth < 1 ? 1 : depth > io->depth ? io->depth : depth;
    pthread_mutex_lock(&io->pmu);
    __atomic_store_n(&io->depth_now, depth, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&io->pcv); /* pool threads held back by the old limit */
    pthread_mutex_unlock(&io->pmu);
}
