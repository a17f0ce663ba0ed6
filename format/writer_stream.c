/* format/writer_stream.c - the shard writer's streaming I/O thread (see
 * writer_stream.h for what it is for).
 *
 * Field 0 goes to the thread as a queue of chunks in file order. A chunk is
 * either a staging buffer of STREAM_BUF bytes (values copied into it;
 * STREAM_NBUF of them, allocated on first use) or a lent value, written from
 * the caller's memory. The thread writes up to STREAM_BATCH bytes per
 * pwritev and sleeps until that much is queued, so it wakes once per few
 * megabytes, not once per record; the appender waits while
 * STK_WRITER_LENT_MAX bytes are queued or being written. Every chunk starts
 * at a multiple of STREAM_ALIGN (lent ones are taken only there, with aligned
 * lengths; staging buffers start where one ends), so the whole stream can go
 * out with O_DIRECT: no page-cache copy, no writeback later, no dirty
 * gigabyte for the writer's final fsync.
 *
 * The thread also keeps the whole-file hash, fed in file order: the header
 * and the zeros after it at the start, then every chunk before it is
 * written. A lent value that comes with its XXH3 block sums is folded in from
 * those (hash_blocks.h) and never read again on this thread. */
#define _GNU_SOURCE
#include "writer_stream.h"

#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* Sizes are multiples of any block size O_DIRECT asks for. */
#define STREAM_BUF ((size_t)4 << 20)
#define STREAM_NBUF 3
#define STREAM_BATCH ((size_t)4 << 20)
#define STREAM_QMAX ((size_t)STK_WRITER_LENT_MAX)
#define STREAM_QCAP 1024u /* chunks queued at most (STREAM_QMAX of 64 KiB images) */
/* A partial batch is written once it has waited this long: a caller lending
 * from fewer buffers than a batch would otherwise wait for them for ever. */
#define STREAM_LINGER_MS 20
#define STREAM_IOV 256u /* chunks per write at most (IOV_MAX: 1024) */
#define STREAM_ALIGN STK_WRITER_LEND_ALIGN

/* One piece of field 0 on its way to the file. */
typedef struct {
    const uint8_t *p;
    size_t len;
    int buf;               /* staging buffer index, or -1: lent */
    stk_lent_done_fn done; /* lent: whom to give p back to     */
    void *ctx;
    const uint64_t *sums; /* lent: NULL, or p's block sums (stk_hash_blocks) */
} chunk_t;

/* The appending thread fills staging buffer `fill` and queues chunks at the
 * tail of q; the I/O thread takes runs from the head, hashes and writes
 * them, and releases them. */
struct stk__stream {
    pthread_t thread;
    bool thread_on, quit, abandon;
    pthread_mutex_t lock;
    pthread_cond_t cv_work; /* the I/O thread waits for a batch */
    pthread_cond_t cv_room; /* the appender waits for room       */
    uint8_t *buf[STREAM_NBUF];
    bool busy[STREAM_NBUF]; /* queued or being written           */
    int fill;               /* staging buffer being filled, or -1 */
    size_t fill_len;
    uint64_t off; /* file offset of the next byte appended */
    chunk_t q[STREAM_QCAP];
    unsigned qhead, qlen;
    size_t qbytes;          /* bytes queued or being written     */
    uint64_t qoff;          /* file offset of q[qhead]           */
    int fd;                 /* the writer's buffered descriptor  */
    int dfd;                /* O_DIRECT descriptor, or -1: buffered (I/O thread only) */
    const char *path, *tmp; /* the shard's name, the file written (borrowed) */
    int err;                /* sticky: a write failed (with e)   */
    stk_error e;
    stk__hasher *fh; /* whole-file hash, fed in file order */
    uint8_t *hdr;    /* the header the hash started with  */
    size_t hdr_len;
    /* what stk__stream_stats_add reports: the I/O thread's own figures
     * (read once it has ended) and where the appender adds its waits */
    double hash_s, write_s;
    uint64_t bytes, writes;
    stk_writer_io_stats *sink;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------- the I/O thread */

/* Write n chunks that lie back to back from file offset off. With O_DIRECT
 * all of them in one pwritev; the last chunk of a shard is a staging buffer
 * zero-padded to STREAM_ALIGN (the padding only covers the zero gap before
 * the next region, which is page-aligned). A short direct write (a file size
 * limit, a full disk) is finished buffered, which says why it fails;
 * EINVAL (the file system opened O_DIRECT but will not do it here) or
 * nothing written switches to buffered writes for good. */
static int write_run(stk__stream *st, const chunk_t *c, unsigned n, uint64_t off, stk_error *err)
{
    size_t total = 0, done = 0;
    for (unsigned i = 0; i < n; i++) total += c[i].len;
    if (st->dfd >= 0) {
        struct iovec iov[STREAM_IOV];
        for (unsigned i = 0; i < n; i++) {
            size_t len = c[i].len;
            if (i == n - 1 && c[i].buf >= 0) len = (len + STREAM_ALIGN - 1) & ~(size_t)(STREAM_ALIGN - 1);
            iov[i] = (struct iovec){(void *)(uintptr_t)c[i].p, len};
        }
        ssize_t r;
        do r = pwritev(st->dfd, iov, (int)n, (off_t)off);
        while (r < 0 && errno == EINTR);
        if (r >= (ssize_t)total) return STK_OK; /* the zero padding need not land */
        if (r < 0 && errno != EINVAL)
            return stk__error_set_errno(err, STK_E_IO, errno, "%s: write at offset %llu failed", st->tmp,
                                        (unsigned long long)off);
        if (r > 0) done = (size_t)r;
        else close(st->dfd), st->dfd = -1;
    }
    for (unsigned i = 0; i < n; off += c[i].len, i++) {
        if (done >= c[i].len) {
            done -= c[i].len;
            continue;
        }
        int rc = stk__pwrite_all(st->fd, c[i].p + done, c[i].len - done, off + done, st->tmp, err);
        if (rc) return rc;
        done = 0;
    }
    return STK_OK;
}

/* Give lent chunks back to their owners (outside the lock: the callbacks are
 * the caller's code). */
static void give_back(const chunk_t *c, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (c[i].buf < 0 && c[i].done) c[i].done(c[i].ctx, c[i].p);
}

/* pthread_cond_timedwait for ms milliseconds on a CLOCK_MONOTONIC condition. */
static int wait_ms(pthread_cond_t *cv, pthread_mutex_t *m, long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    return pthread_cond_timedwait(cv, m, &ts);
}

/* Under st->lock: wait until a batch is queued, the queue is full, a partial
 * batch has lingered, or the stream is told to quit. */
static void wait_for_batch(stk__stream *st)
{
    while (!st->quit && st->qbytes < STREAM_BATCH && st->qlen < STREAM_QCAP) {
        if (!st->qlen) {
            pthread_cond_wait(&st->cv_work, &st->lock);
        } else if (wait_ms(&st->cv_work, &st->lock, STREAM_LINGER_MS) == ETIMEDOUT) {
            break; /* a partial batch: a caller short of buffers waits for these */
        }
    }
}

/* Under st->lock: copy a run from the head of the queue into run (at least
 * one chunk, at most a batch); returns its length, *bytes its size. */
static unsigned take_run(const stk__stream *st, chunk_t *run, size_t *bytes)
{
    unsigned n = 0;
    *bytes = 0;
    while (n < st->qlen && n < STREAM_IOV) {
        const chunk_t *c = &st->q[(st->qhead + n) % STREAM_QCAP];
        if (n && *bytes + c->len > STREAM_BATCH) break;
        run[n++] = *c;
        *bytes += c->len;
    }
    return n;
}

/* Under st->lock: a run of n chunks (bytes in all) is done, with status rc. */
static void release_run(stk__stream *st, const chunk_t *run, unsigned n, size_t bytes, int rc,
                        const stk_error *e)
{
    if (rc && !st->err) st->err = rc, st->e = *e;
    for (unsigned i = 0; i < n; i++)
        if (run[i].buf >= 0) st->busy[run[i].buf] = false;
    st->qhead = (st->qhead + n) % STREAM_QCAP;
    st->qlen -= n;
    st->qbytes -= bytes;
    st->qoff += bytes;
    pthread_cond_broadcast(&st->cv_room);
}

static void *stream_thread(void *arg)
{
    stk__stream *st = arg;
    chunk_t run[STREAM_IOV];
    pthread_mutex_lock(&st->lock);
    for (;;) {
        wait_for_batch(st);
        if (st->abandon || !st->qlen) break; /* what is left of an abandoned queue: stop() */
        size_t bytes;
        unsigned n = take_run(st, run, &bytes);
        uint64_t off = st->qoff;
        bool skip = st->err != 0; /* after a failed write, chunks are only released */
        pthread_mutex_unlock(&st->lock);
        stk_error e;
        int rc = STK_OK;
        if (!skip) {
            double t0 = now_s();
            for (unsigned i = 0; i < n; i++) stk__hasher_absorb(st->fh, run[i].p, run[i].sums, run[i].len);
            double t1 = now_s();
            rc = write_run(st, run, n, off, &e);
            st->hash_s += t1 - t0;
            st->write_s += now_s() - t1;
            st->bytes += bytes;
            st->writes++;
        }
        pthread_mutex_lock(&st->lock);
        release_run(st, run, n, bytes, rc, &e);
        pthread_mutex_unlock(&st->lock);
        give_back(run, n);
        pthread_mutex_lock(&st->lock);
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

/* Wait for the I/O thread to write what is queued (or, abandon, to drop
 * it) and end it. Dropped lent chunks go back to their owners. */
static void stop(stk__stream *st, bool abandon)
{
    if (!st->thread_on) return;
    pthread_mutex_lock(&st->lock);
    st->quit = true;
    st->abandon = abandon;
    pthread_cond_broadcast(&st->cv_work);
    pthread_mutex_unlock(&st->lock);
    pthread_join(st->thread, NULL);
    st->thread_on = false;
    for (; st->qlen; st->qlen--, st->qhead = (st->qhead + 1) % STREAM_QCAP) give_back(&st->q[st->qhead], 1);
}

/* ------------------------------------------------------- start and end */

/* Hash the start of the file: the header, then zeros up to data_off. */
static void hash_head(stk__stream *st, uint64_t data_off)
{
    static const uint8_t zeros[STK_ALIGN];
    stk__hasher_update(st->fh, st->hdr, st->hdr_len);
    for (uint64_t at = st->hdr_len; at < data_off;) {
        size_t k = (size_t)(data_off - at < sizeof zeros ? data_off - at : sizeof zeros);
        stk__hasher_update(st->fh, zeros, k);
        at += k;
    }
}

int stk__stream_start(stk__stream **out, int fd, const char *path, const char *tmp, const uint8_t *hdr,
                      size_t hdr_len, uint64_t data_off, stk_error *err)
{
    *out = NULL;
    stk__stream *st = calloc(1, sizeof *st);
    if (!st) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    st->fd = fd;
    st->dfd = -1;
    st->fill = -1;
    st->path = path;
    st->tmp = tmp;
    pthread_mutex_init(&st->lock, NULL);
    pthread_condattr_t ca; /* the linger wait measures time on CLOCK_MONOTONIC */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->cv_work, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&st->cv_room, NULL);
    if (!(st->fh = stk__hasher_new()) || !(st->hdr = malloc(hdr_len ? hdr_len : 1))) {
        stk__stream_free(st);
        return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", path);
    }
    memcpy(st->hdr, hdr, hdr_len);
    st->hdr_len = hdr_len;
    hash_head(st, data_off);
    st->off = st->qoff = data_off;
#ifdef O_DIRECT
    st->dfd = open(tmp, O_WRONLY | O_DIRECT | O_CLOEXEC); /* -1: buffered writes */
#endif
    if (pthread_create(&st->thread, NULL, stream_thread, st) != 0) {
        stk__stream_free(st);
        return stk_error_set(err, STK_E_NOMEM, "%s: cannot start the write thread", path);
    }
    st->thread_on = true;
    *out = st;
    return STK_OK;
}

void stk__stream_free(stk__stream *st)
{
    if (!st) return;
    stop(st, true);
    for (unsigned b = 0; b < STREAM_NBUF; b++) free(st->buf[b]);
    if (st->dfd >= 0) close(st->dfd);
    stk__hasher_free(st->fh);
    free(st->hdr);
    pthread_cond_destroy(&st->cv_room);
    pthread_cond_destroy(&st->cv_work);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

/* ---------------------------------------------------------- appending */

/* Queue chunk c at the tail, waiting while the queue is full. Returns the
 * sticky I/O error, if any; c is then not queued. Under st->lock. */
static int push_locked(stk__stream *st, const chunk_t *c, stk_error *err)
{
    if ((st->qbytes >= STREAM_QMAX || st->qlen == STREAM_QCAP) && !st->err) {
        double t0 = now_s();
        while ((st->qbytes >= STREAM_QMAX || st->qlen == STREAM_QCAP) && !st->err) {
            pthread_cond_signal(&st->cv_work);
            pthread_cond_wait(&st->cv_room, &st->lock);
        }
        if (st->sink) st->sink->queue_wait += now_s() - t0;
    }
    if (st->err) return stk_error_set(err, st->err, "%s", st->e.msg);
    st->q[(st->qhead + st->qlen) % STREAM_QCAP] = *c;
    st->qlen++;
    st->qbytes += c->len;
    st->off += c->buf >= 0 ? 0 : c->len; /* staging bytes were counted as they were copied */
    /* A full batch, or the first chunk (the thread then waits at most
     * STREAM_LINGER_MS for the rest of the batch instead of for ever). */
    if (st->qbytes >= STREAM_BATCH || st->qlen == STREAM_QCAP || st->qlen == 1)
        pthread_cond_signal(&st->cv_work);
    return STK_OK;
}

/* Queue the staging buffer being filled, if it holds anything. */
static int push_fill(stk__stream *st, stk_error *err)
{
    if (st->fill < 0 || !st->fill_len) return STK_OK;
    chunk_t c = {st->buf[st->fill], st->fill_len, st->fill, NULL, NULL, NULL};
    pthread_mutex_lock(&st->lock);
    st->busy[st->fill] = true;
    int rc = push_locked(st, &c, err);
    pthread_mutex_unlock(&st->lock);
    st->fill = -1;
    st->fill_len = 0;
    return rc;
}

/* A free staging buffer to fill (allocated on first use), waiting while
 * every one is queued. */
static int take_buf(stk__stream *st, stk_error *err)
{
    int rc = STK_OK;
    double t0 = 0;
    pthread_mutex_lock(&st->lock);
    for (;;) {
        for (int b = 0; b < STREAM_NBUF && st->fill < 0; b++)
            if (!st->busy[b]) st->fill = b;
        if (st->fill >= 0 || st->err) break;
        if (!t0) t0 = now_s();
        pthread_cond_signal(&st->cv_work);
        pthread_cond_wait(&st->cv_room, &st->lock);
    }
    if (t0 && st->sink) st->sink->queue_wait += now_s() - t0;
    if (st->err) rc = stk_error_set(err, st->err, "%s", st->e.msg);
    pthread_mutex_unlock(&st->lock);
    if (!rc && !st->buf[st->fill] &&
        posix_memalign((void **)&st->buf[st->fill], STREAM_ALIGN, STREAM_BUF) != 0) {
        st->buf[st->fill] = NULL;
        st->fill = -1;
        rc = stk_error_set(err, STK_E_NOMEM, "%s: out of memory for write buffers", st->path);
    }
    st->fill_len = 0;
    return rc;
}

int stk__stream_copy(stk__stream *st, const void *data, size_t n, stk_error *err)
{
    const uint8_t *p = data;
    int rc;
    while (n) {
        if (st->fill < 0 && (rc = take_buf(st, err))) return rc;
        size_t k = STREAM_BUF - st->fill_len;
        if (k > n) k = n;
        memcpy(st->buf[st->fill] + st->fill_len, p, k);
        st->fill_len += k;
        st->off += k;
        p += k;
        n -= k;
        if (st->fill_len == STREAM_BUF && (rc = push_fill(st, err))) return rc;
    }
    return STK_OK;
}

bool stk__stream_can_lend(const stk__stream *st, const void *p, size_t n)
{
    return n && (uintptr_t)p % STREAM_ALIGN == 0 && n % STREAM_ALIGN == 0 && st->off % STREAM_ALIGN == 0;
}

int stk__stream_lend(stk__stream *st, const void *p, size_t n, const uint64_t *sums, stk_lent_done_fn done,
                     void *ctx, stk_error *err)
{
    int rc = push_fill(st, err); /* what was copied before goes first */
    if (rc) return rc;
    chunk_t c = {p, n, -1, done, ctx, sums};
    pthread_mutex_lock(&st->lock);
    rc = push_locked(st, &c, err);
    pthread_mutex_unlock(&st->lock);
    return rc;
}

/* ------------------------------------------------------------ the end */

int stk__stream_drain(stk__stream *st, uint64_t *end, stk_error *err)
{
    st->sink = NULL;     /* the finishing thread's waits are its own, not the appender's */
    if (st->fill >= 0) { /* the last staging buffer goes out whole: O_DIRECT */
        size_t padded = (st->fill_len + STREAM_ALIGN - 1) & ~(size_t)(STREAM_ALIGN - 1);
        memset(st->buf[st->fill] + st->fill_len, 0, padded - st->fill_len);
    }
    int rc = push_fill(st, err);
    stop(st, false);
    if (!rc && st->err) rc = stk_error_set(err, st->err, "%s", st->e.msg);
    *end = st->off;
    return rc;
}

void stk__stream_sink(stk__stream *st, stk_writer_io_stats *sink) { st->sink = sink; }

void stk__stream_stats_add(stk__stream *st, stk_writer_io_stats *into)
{
    stop(st, true);
    into->hash += st->hash_s;
    into->write += st->write_s;
    into->bytes += st->bytes;
    into->writes += st->writes;
}

bool stk__stream_header_is(const stk__stream *st, const uint8_t *hdr, size_t len)
{
    return st->hdr_len == len && memcmp(st->hdr, hdr, len) == 0;
}

uint64_t stk__stream_digest(stk__stream *st, const uint8_t *tail, size_t n)
{
    stk__hasher_update(st->fh, tail, n);
    return stk__hasher_digest(st->fh);
}
