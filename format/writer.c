/* format/writer.c - write one shard, crash-safely.
 *
 * The header comes first in the file but depends on the final record count,
 * so it is written last. Field 0, when it is a tensor (the image in a packed
 * dataset, nearly all the bytes), streams straight into its region, which
 * starts at a place known from the schema alone. Every other region is
 * spooled in memory and placed at finish; in a packed dataset those are a few
 * bytes per record. Put your largest tensor field first.
 *
 * Everything goes to PATH.tmp, which is fsynced and renamed to PATH only when
 * complete, so PATH is either absent, the previous file, or a complete shard.
 *
 * Streaming (stk_writer_expect): a caller that knows how many records a shard
 * will get (a packer does: all its shards but the last are full) says so
 * before the first append. The header is then known up front, so the
 * whole-file XXH3 is computed while the data goes out, in file order, and
 * finish need not read the file back (which, at the end of a pack, is a pass
 * over up to a gigabyte nobody can overlap). Field 0 then goes to an I/O
 * thread that hashes and writes it, with O_DIRECT where the file system takes
 * it: no page-cache copy, no writeback later, no dirty gigabyte for the final
 * fsync, and the appending thread never waits for the disk. Values are copied
 * into 4 MiB staging buffers, or, lent (stk_writer_append_lent), written from
 * the caller's memory: a packer's appending thread then does no per-byte work
 * at all. A lent value may come with its XXH3 block sums (stk_hash_blocks,
 * computed where it was made); the I/O thread then folds those into the file
 * hash and never reads the value's bytes (hash_blocks.h). If the count turns
 * out different, finish falls back to reading the file back. */
#define _GNU_SOURCE
#include "internal.h"
#include "zpool.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#define DIRECT_BUF (4u << 20)
#define DIRECT_BIG (64u << 10)
/* Streaming: field 0 goes to the I/O thread as a queue of chunks in file
 * order. A chunk is either a staging buffer of STREAM_BUF bytes (values
 * copied into it; STREAM_NBUF of them, allocated on first use) or a lent
 * value (stk_writer_append_lent), written from the caller's memory. The
 * thread writes up to STREAM_BATCH bytes per pwritev and sleeps until that
 * much is queued, so it wakes once per few megabytes, not once per record;
 * the appender waits while STK_WRITER_LENT_MAX bytes are queued or being
 * written. Sizes are multiples of any block size O_DIRECT asks for. */
#define STREAM_BUF ((size_t)4 << 20)
#define STREAM_NBUF 3
#define STREAM_BATCH ((size_t)4 << 20)
#define STREAM_QMAX ((size_t)STK_WRITER_LENT_MAX)
#define STREAM_QCAP 512u /* chunks queued at most              */
/* A partial batch is written once it has waited this long: a caller lending
 * from fewer buffers than a batch would otherwise wait for them for ever. */
#define STREAM_LINGER_MS 20
#define STREAM_IOV 256u  /* chunks per write at most (IOV_MAX: 1024) */
#define STREAM_ALIGN STK_WRITER_LEND_ALIGN

typedef struct {
    uint8_t *p;
    size_t len, cap;
} buf_t;

static bool buf_reserve(buf_t *b, size_t extra)
{
    if (b->len + extra <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) {
        if (cap > SIZE_MAX / 2) return false;
        cap *= 2;
    }
    uint8_t *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

/* One piece of field 0 on its way to the file. */
typedef struct {
    const uint8_t *p;
    size_t len;
    int buf;               /* staging buffer index, or -1: lent */
    stk_lent_done_fn done; /* lent: whom to give p back to     */
    void *ctx;
    const uint64_t *sums;  /* lent: NULL, or p's block sums (stk_hash_blocks) */
} chunk_t;

/* The streaming state (see the top of the file). The appending thread fills
 * staging buffer `fill` and queues chunks at the tail of q; the I/O thread
 * takes runs from the head, hashes and writes them, and releases them. Every
 * chunk starts at a multiple of STREAM_ALIGN (lent ones are taken only
 * there, with aligned lengths; staging buffers start where one ends), so the
 * whole stream can go out with O_DIRECT. */
typedef struct {
    pthread_t thread;
    bool thread_on, quit, abandon;
    pthread_mutex_t lock;
    pthread_cond_t cv_work;  /* the I/O thread waits for a batch */
    pthread_cond_t cv_room;  /* the appender waits for room       */
    uint8_t *buf[STREAM_NBUF];
    bool busy[STREAM_NBUF];  /* queued or being written           */
    int fill;                /* staging buffer being filled, or -1 */
    size_t fill_len;
    uint64_t off;            /* file offset of the next byte appended */
    chunk_t q[STREAM_QCAP];
    unsigned qhead, qlen;
    size_t qbytes;           /* bytes queued or being written     */
    uint64_t qoff;           /* file offset of q[qhead]           */
    int dfd;                 /* O_DIRECT descriptor, or -1: buffered (I/O thread only) */
    int err;                 /* sticky: a write failed (with e)   */
    stk_error e;
    stk__hasher *fh;          /* whole-file hash, fed in file order */
    uint64_t expect;         /* the record count the header was made for */
    uint8_t *hdr;            /* that header                        */
    size_t hdr_len;
} stream_t;

struct stk_writer {
    stk_schema schema;
    char *path, *tmp;
    int fd;
    int failed;             /* sticky: a write to the file failed */
    uint64_t records;
    bool direct;            /* field 0 streams into the file       */
    uint64_t direct_off;    /* where the next direct bytes go      */
    buf_t direct_buf;       /* pending direct bytes                */
    buf_t spool[STK_MAX_FIELDS]; /* tensor values or bytes heaps   */
    buf_t offsets[STK_MAX_FIELDS]; /* bytes fields: u64 offsets    */
    buf_t cksum;            /* u64 per record per field            */
    stream_t *st;           /* streaming, or NULL                  */
    /* compressed fields (spec 4.12): values gather in raw[f] until a block
     * is full, then go to spool[f] as one zstd frame; table[f] holds the
     * (first record, frame offset) entries so far, starting with (0, 0) */
    ZSTD_CCtx *cctx;
    int level[STK_MAX_FIELDS];
    uint64_t block_bytes[STK_MAX_FIELDS];
    buf_t raw[STK_MAX_FIELDS], table[STK_MAX_FIELDS];
    uint64_t block_first[STK_MAX_FIELDS], raw_total[STK_MAX_FIELDS];
    /* with compression threads (zpool.c): blocks submitted, not yet taken back */
    unsigned zthreads;
    stk__zpool *pool;
    uint64_t zpending_raw[STK_MAX_FIELDS], zpending_n[STK_MAX_FIELDS];
};

static void stream_stop(stream_t *st, bool abandon);
static void stream_free(stream_t *st);
static int close_block(stk_writer *w, uint32_t f, stk_error *err);

static void writer_free(stk_writer *w)
{
    if (!w) return;
    if (w->st) stream_stop(w->st, true), stream_free(w->st);
    if (w->fd >= 0) close(w->fd);
    free(w->direct_buf.p);
    for (unsigned i = 0; i < STK_MAX_FIELDS; i++) free(w->spool[i].p), free(w->offsets[i].p);
    free(w->cksum.p);
    for (unsigned i = 0; i < STK_MAX_FIELDS; i++) free(w->raw[i].p), free(w->table[i].p);
    stk__zpool_free(w->pool);
    ZSTD_freeCCtx(w->cctx);
    free(w->path);
    free(w->tmp);
    free(w);
}

stk_writer *stk_writer_create(const char *path, const stk_schema *schema, stk_error *err)
{
    if (!path || !schema) return stk_error_set(err, STK_E_ARG, "stk_writer_create: NULL argument"), NULL;
    if (schema->nfields == 0) return stk_error_set(err, STK_E_ARG, "%s: schema has no fields", path), NULL;
    if (stk_schema_validate(schema, err)) return NULL;
    stk_writer *w = calloc(1, sizeof *w);
    if (!w) return stk_error_set(err, STK_E_NOMEM, "out of memory"), NULL;
    w->fd = -1;
    w->schema = *schema;
    size_t n = strlen(path);
    w->path = strdup(path);
    w->tmp = malloc(n + 5);
    if (!w->path || !w->tmp) goto nomem;
    memcpy(w->tmp, path, n);
    memcpy(w->tmp + n, ".tmp", 5);
    for (uint32_t f = 0; f < schema->nfields; f++) {
        if (schema->fields[f].kind != STK_KIND_BYTES) continue;
        if (!buf_reserve(&w->offsets[f], 8)) goto nomem;
        wr64(w->offsets[f].p, 0);
        w->offsets[f].len = 8;
    }
    for (uint32_t f = 0; f < schema->nfields; f++) {
        if (!stk__field_compressed(&schema->fields[f])) continue;
        w->level[f] = 3;
        w->block_bytes[f] = (uint64_t)1 << 20;
        if (!buf_reserve(&w->table[f], 16)) goto nomem;
        memset(w->table[f].p, 0, 16); /* entry 0: record 0 at frame offset 0 */
        w->table[f].len = 16;
        if (!w->cctx && !(w->cctx = ZSTD_createCCtx())) goto nomem;
    }
    w->direct = schema->fields[0].kind == STK_KIND_TENSOR && !stk__field_compressed(&schema->fields[0]);
    align_ok(stk__header_size(schema->nfields), STK_ALIGN, &w->direct_off);
    if (w->direct && !buf_reserve(&w->direct_buf, DIRECT_BUF)) goto nomem;
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        stk__error_set_errno(err, STK_E_IO, errno, "%s: cannot create", w->tmp);
        writer_free(w);
        return NULL;
    }
    return w;
nomem:
    stk_error_set(err, STK_E_NOMEM, "%s: out of memory", path);
    writer_free(w);
    return NULL;
}

static int flush_direct(stk_writer *w, stk_error *err)
{
    if (!w->direct_buf.len) return STK_OK;
    int rc = stk__pwrite_all(w->fd, w->direct_buf.p, w->direct_buf.len, w->direct_off, w->tmp, err);
    if (rc) {
        w->failed = rc;
        return rc;
    }
    w->direct_off += w->direct_buf.len;
    w->direct_buf.len = 0;
    return STK_OK;
}

/* Check every value and make room for all of them before copying any, so a
 * refused record leaves the writer as it was. */
static int prepare(stk_writer *w, const stk_value *v, stk_error *err)
{
    const stk_schema *s = &w->schema;
    for (uint32_t f = 0; f < s->nfields; f++) {
        const stk_field *fd = &s->fields[f];
        if (!v[f].data && v[f].size)
            return stk_error_set(err, STK_E_ARG, "%s: record %llu, field '%s': NULL data", w->path,
                            (unsigned long long)w->records, fd->name);
        if (fd->kind == STK_KIND_TENSOR && v[f].size != stk_field_stride(fd))
            return stk_error_set(err, STK_E_ARG, "%s: record %llu, field '%s': value is %llu bytes, expected %llu",
                            w->path, (unsigned long long)w->records, fd->name,
                            (unsigned long long)v[f].size, (unsigned long long)stk_field_stride(fd));
        if (v[f].size > SIZE_MAX / 4)
            return stk_error_set(err, STK_E_ARG, "%s: record %llu, field '%s': value too large", w->path,
                            (unsigned long long)w->records, fd->name);
        buf_t *dst = stk__field_compressed(fd) ? &w->raw[f] : &w->spool[f];
        bool ok = (f == 0 && w->direct) || buf_reserve(dst, (size_t)v[f].size);
        if (ok && fd->kind == STK_KIND_BYTES) ok = buf_reserve(&w->offsets[f], 8);
        if (!ok) return stk_error_set(err, STK_E_NOMEM, "%s: out of memory spooling field '%s'", w->path, fd->name);
    }
    if (!buf_reserve(&w->cksum, 8 * (size_t)s->nfields))
        return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", w->path);
    return STK_OK;
}

/* ------------------------------------------------------------ streaming */

static int make_layout_n(const stk_writer *w, uint64_t records, const stk_value *extra, stk__layout *L,
                         stk_error *err);

/* Write n chunks that lie back to back from file offset off. With O_DIRECT
 * all of them in one pwritev; the last chunk of a shard is a staging buffer
 * zero-padded to STREAM_ALIGN (the padding only covers the zero gap before
 * the next region, which is page-aligned). A short direct write (a file size
 * limit, a full disk) is finished buffered, which says why it fails;
 * EINVAL (the file system opened O_DIRECT but will not do it here) or
 * nothing written switches to buffered writes for good. */
static int stream_write(stk_writer *w, stream_t *st, const chunk_t *c, unsigned n, uint64_t off,
                        stk_error *err)
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
            return stk__error_set_errno(err, STK_E_IO, errno, "%s: write at offset %llu failed", w->tmp,
                                  (unsigned long long)off);
        if (r > 0) done = (size_t)r;
        else close(st->dfd), st->dfd = -1;
    }
    for (unsigned i = 0; i < n; off += c[i].len, i++) {
        if (done >= c[i].len) {
            done -= c[i].len;
            continue;
        }
        int rc = stk__pwrite_all(w->fd, c[i].p + done, c[i].len - done, off + done, w->tmp, err);
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

static void *stream_thread(void *arg)
{
    stk_writer *w = arg;
    stream_t *st = w->st;
    chunk_t run[STREAM_IOV];
    pthread_mutex_lock(&st->lock);
    for (;;) {
        while (!st->quit && st->qbytes < STREAM_BATCH && st->qlen < STREAM_QCAP) {
            if (!st->qlen) {
                pthread_cond_wait(&st->cv_work, &st->lock);
            } else if (wait_ms(&st->cv_work, &st->lock, STREAM_LINGER_MS) == ETIMEDOUT) {
                break; /* a partial batch: a caller short of buffers waits for these */
            }
        }
        if (st->abandon || !st->qlen) break; /* what is left of an abandoned queue: stream_stop */
        /* A run from the head: at least one chunk, at most a batch. */
        unsigned n = 0;
        size_t bytes = 0;
        while (n < st->qlen && n < STREAM_IOV) {
            const chunk_t *c = &st->q[(st->qhead + n) % STREAM_QCAP];
            if (n && bytes + c->len > STREAM_BATCH) break;
            run[n++] = *c;
            bytes += c->len;
        }
        uint64_t off = st->qoff;
        bool skip = st->err != 0;
        pthread_mutex_unlock(&st->lock);
        stk_error e;
        int rc = STK_OK;
        if (!skip) {
            /* A lent value that comes with its block sums is not read
             * again (hash_blocks.h): 64 bytes a kilobyte, and one block. */
            for (unsigned i = 0; i < n; i++) stk__hasher_absorb(st->fh, run[i].p, run[i].sums, run[i].len);
            rc = stream_write(w, st, run, n, off, &e);
        }
        pthread_mutex_lock(&st->lock);
        if (rc && !st->err) st->err = rc, st->e = e;
        for (unsigned i = 0; i < n; i++)
            if (run[i].buf >= 0) st->busy[run[i].buf] = false;
        st->qhead = (st->qhead + n) % STREAM_QCAP;
        st->qlen -= n;
        st->qbytes -= bytes;
        st->qoff += bytes;
        pthread_cond_broadcast(&st->cv_room);
        pthread_mutex_unlock(&st->lock);
        give_back(run, n);
        pthread_mutex_lock(&st->lock);
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

/* Wait for the I/O thread to write what is queued (or, abandon, to drop
 * it) and end it. Dropped lent chunks go back to their owners. */
static void stream_stop(stream_t *st, bool abandon)
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

static void stream_free(stream_t *st)
{
    for (unsigned b = 0; b < STREAM_NBUF; b++) free(st->buf[b]);
    if (st->dfd >= 0) close(st->dfd);
    stk__hasher_free(st->fh);
    free(st->hdr);
    pthread_cond_destroy(&st->cv_room);
    pthread_cond_destroy(&st->cv_work);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

/* Queue chunk c at the tail, waiting while the queue is full. Returns the
 * sticky I/O error, if any; c is then not queued. Under st->lock. */
static int stream_push_locked(stream_t *st, const chunk_t *c, stk_error *err)
{
    while ((st->qbytes >= STREAM_QMAX || st->qlen == STREAM_QCAP) && !st->err) {
        pthread_cond_signal(&st->cv_work);
        pthread_cond_wait(&st->cv_room, &st->lock);
    }
    if (st->err) return stk_error_set(err, st->err, "%s", st->e.msg);
    st->q[(st->qhead + st->qlen) % STREAM_QCAP] = *c;
    st->qlen++;
    st->qbytes += c->len;
    st->off += c->buf >= 0 ? 0 : c->len; /* staging bytes were counted as they were copied */
    /* A full batch, or the first chunk (the thread then waits at most
     * STREAM_LINGER_MS for the rest of the batch instead of for ever). */
    if (st->qbytes >= STREAM_BATCH || st->qlen == STREAM_QCAP || st->qlen == 1) pthread_cond_signal(&st->cv_work);
    return STK_OK;
}

/* Queue the staging buffer being filled, if it holds anything. */
static int stream_push_fill(stk_writer *w, stk_error *err)
{
    stream_t *st = w->st;
    if (st->fill < 0 || !st->fill_len) return STK_OK;
    chunk_t c = {st->buf[st->fill], st->fill_len, st->fill, NULL, NULL, NULL};
    pthread_mutex_lock(&st->lock);
    st->busy[st->fill] = true;
    int rc = stream_push_locked(st, &c, err);
    pthread_mutex_unlock(&st->lock);
    st->fill = -1;
    st->fill_len = 0;
    return rc ? (w->failed = rc) : STK_OK;
}

/* A free staging buffer to fill (allocated on first use), waiting while
 * every one is queued. */
static int stream_take_buf(stk_writer *w, stk_error *err)
{
    stream_t *st = w->st;
    int rc = STK_OK;
    pthread_mutex_lock(&st->lock);
    for (;;) {
        for (int b = 0; b < STREAM_NBUF && st->fill < 0; b++)
            if (!st->busy[b]) st->fill = b;
        if (st->fill >= 0 || st->err) break;
        pthread_cond_signal(&st->cv_work);
        pthread_cond_wait(&st->cv_room, &st->lock);
    }
    if (st->err) rc = stk_error_set(err, st->err, "%s", st->e.msg);
    pthread_mutex_unlock(&st->lock);
    if (!rc && !st->buf[st->fill] &&
        posix_memalign((void **)&st->buf[st->fill], STREAM_ALIGN, STREAM_BUF) != 0) {
        st->buf[st->fill] = NULL;
        st->fill = -1;
        rc = stk_error_set(err, STK_E_NOMEM, "%s: out of memory for write buffers", w->path);
    }
    st->fill_len = 0;
    return rc ? (w->failed = rc) : STK_OK;
}

/* Field 0 of one record copied into the staging buffers. */
static int stream_copy(stk_writer *w, const uint8_t *p, size_t n, stk_error *err)
{
    stream_t *st = w->st;
    int rc;
    while (n) {
        if (st->fill < 0 && (rc = stream_take_buf(w, err))) return rc;
        size_t k = STREAM_BUF - st->fill_len;
        if (k > n) k = n;
        memcpy(st->buf[st->fill] + st->fill_len, p, k);
        st->fill_len += k;
        st->off += k;
        p += k;
        n -= k;
        if (st->fill_len == STREAM_BUF && (rc = stream_push_fill(w, err))) return rc;
    }
    return STK_OK;
}

/* Whether field 0's value p[0 .. n) can go to the file from where it is:
 * it starts and ends on STREAM_ALIGN, and so does its place in the file. */
static bool stream_can_lend(const stream_t *st, const void *p, size_t n)
{
    return n && (uintptr_t)p % STREAM_ALIGN == 0 && n % STREAM_ALIGN == 0 && st->off % STREAM_ALIGN == 0;
}

/* Field 0 of one record queued by reference (stream_can_lend holds). */
static int stream_lend(stk_writer *w, const uint8_t *p, size_t n, const uint64_t *sums, stk_lent_done_fn done,
                       void *ctx, stk_error *err)
{
    stream_t *st = w->st;
    int rc = stream_push_fill(w, err); /* what was copied before goes first */
    if (rc) return rc;
    chunk_t c = {p, n, -1, done, ctx, sums};
    pthread_mutex_lock(&st->lock);
    rc = stream_push_locked(st, &c, err);
    pthread_mutex_unlock(&st->lock);
    return rc ? (w->failed = rc) : STK_OK;
}

/* Queue the partly filled buffer (zero-padded for O_DIRECT), wait for all
 * writes, end the thread. */
static int stream_drain(stk_writer *w, stk_error *err)
{
    stream_t *st = w->st;
    if (st->fill >= 0) {
        size_t padded = (st->fill_len + STREAM_ALIGN - 1) & ~(size_t)(STREAM_ALIGN - 1);
        memset(st->buf[st->fill] + st->fill_len, 0, padded - st->fill_len);
    }
    int rc = stream_push_fill(w, err);
    stream_stop(st, false);
    if (!rc && st->err) rc = stk_error_set(err, st->err, "%s", st->e.msg);
    if (rc) w->failed = rc;
    w->direct_off = st->off;
    return rc;
}

int stk_writer_expect(stk_writer *w, uint64_t records, stk_error *err)
{
    if (!w) return stk_error_set(err, STK_E_ARG, "stk_writer_expect: NULL writer");
    if (w->records || w->st || !w->direct || records == 0) return STK_OK; /* too late, or nothing to gain */
    for (uint32_t f = 0; f < w->schema.nfields; f++)
        if (w->schema.fields[f].kind != STK_KIND_TENSOR || stk__field_compressed(&w->schema.fields[f]))
            return STK_OK; /* heap or frame sizes unknown up front */
    stk__layout L;
    int rc = make_layout_n(w, records, NULL, &L, err);
    if (rc) return rc;
    stream_t *st = calloc(1, sizeof *st);
    if (!st) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    st->dfd = -1;
    st->fill = -1;
    pthread_mutex_init(&st->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->cv_work, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&st->cv_room, NULL);
    if (!(st->fh = stk__hasher_new()) || !(st->hdr = calloc(1, L.header_size))) {
        stream_free(st);
        return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", w->path);
    }
    st->expect = records;
    st->hdr_len = L.header_size;
    stk__layout_encode(&L, st->hdr);
    /* The file starts with the header and zeros up to field 0's region. */
    static const uint8_t zeros[STK_ALIGN];
    stk__hasher_update(st->fh, st->hdr, st->hdr_len);
    for (uint64_t at = st->hdr_len; at < L.region[0].data_off;) {
        size_t k = (size_t)(L.region[0].data_off - at < sizeof zeros ? L.region[0].data_off - at : sizeof zeros);
        stk__hasher_update(st->fh, zeros, k);
        at += k;
    }
    st->off = st->qoff = L.region[0].data_off;
#ifdef O_DIRECT
    st->dfd = open(w->tmp, O_WRONLY | O_DIRECT | O_CLOEXEC); /* -1: buffered writes */
#endif
    w->st = st;
    if (pthread_create(&st->thread, NULL, stream_thread, w) != 0) {
        w->st = NULL;
        stream_free(st);
        return stk_error_set(err, STK_E_NOMEM, "%s: cannot start the write thread", w->path);
    }
    st->thread_on = true;
    return STK_OK;
}


/* The whole-file hash of a streamed shard: everything after field 0's data
 * (the other regions, checksum table, footer and the zero gaps between them)
 * is in memory; lay it out as in the file and hash it after the data. */
static int stream_hash_tail(stk_writer *w, const stk__layout *L, const uint8_t *foot, uint64_t *out,
                            stk_error *err)
{
    uint64_t from = L->region[0].data_off + L->region[0].data_len;
    size_t n = (size_t)(L->file_size - from);
    uint8_t *t = calloc(1, n ? n : 1);
    if (!t) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    for (uint32_t f = 1; f < w->schema.nfields; f++)
        memcpy(t + (L->region[f].data_off - from), w->spool[f].p, w->spool[f].len);
    memcpy(t + (L->cksum_off - from), w->cksum.p, w->cksum.len);
    memcpy(t + n - STK_FOOTER_SIZE, foot, STK_FOOTER_SIZE);
    stk__hasher_update(w->st->fh, t, n);
    *out = stk__hasher_digest(w->st->fh);
    free(t);
    return STK_OK;
}

/* Field 0 of a checked record, by whichever path the writer takes; *lent
 * says whether the writer kept v0's memory (it then gives it back later). */
static int append_field0(stk_writer *w, const stk_value *v0, const stk_prehash *pre, stk_lent_done_fn done,
                         void *ctx, bool *lent, stk_error *err)
{
    int rc;
    size_t n = (size_t)v0->size;
    if (w->st) {
        if (done && stream_can_lend(w->st, v0->data, n)) {
            rc = stream_lend(w, v0->data, n, pre ? pre->sums : NULL, done, ctx, err);
            *lent = rc == STK_OK;
            return rc;
        }
        return stream_copy(w, v0->data, n, err);
    }
    /* Flush first so that a failure leaves this record unwritten. Values of
     * 64 KiB and more (images) go straight from the caller's buffer: copying
     * them into ours first would only add a memcpy per record. */
    bool big = n >= DIRECT_BIG;
    if ((big || w->direct_buf.len + n > DIRECT_BUF) && (rc = flush_direct(w, err))) return rc;
    if (big) {
        if ((rc = stk__pwrite_all(w->fd, v0->data, n, w->direct_off, w->tmp, err))) return w->failed = rc;
        w->direct_off += n;
    } else {
        memcpy(w->direct_buf.p + w->direct_buf.len, v0->data, n);
        w->direct_buf.len += n;
    }
    return STK_OK;
}

static int append(stk_writer *w, const stk_value *v, const stk_prehash *pre, stk_lent_done_fn done, void *ctx,
                  bool *lent, stk_error *err)
{
    if (!w || !v) return stk_error_set(err, STK_E_ARG, "stk_writer_append: NULL argument");
    if (w->failed) return stk_error_set(err, w->failed, "%s: an earlier write failed", w->path);
    int rc = prepare(w, v, err);
    if (rc) return rc;
    const stk_schema *s = &w->schema;
    if (w->direct && (rc = append_field0(w, &v[0], pre, done, ctx, lent, err))) return rc;
    for (uint32_t f = 0; f < s->nfields; f++) {
        uint64_t h = f == 0 && pre ? pre->hash : stk_hash(v[f].data ? v[f].data : "", (size_t)v[f].size);
        wr64(w->cksum.p + w->cksum.len, h);
        w->cksum.len += 8;
        if (f == 0 && w->direct) continue;
        bool z = stk__field_compressed(&s->fields[f]);
        buf_t *dst = z ? &w->raw[f] : &w->spool[f];
        if (v[f].size) memcpy(dst->p + dst->len, v[f].data, (size_t)v[f].size);
        dst->len += (size_t)v[f].size;
        w->raw_total[f] += z ? v[f].size : 0;
        if (s->fields[f].kind == STK_KIND_BYTES) {
            wr64(w->offsets[f].p + w->offsets[f].len, z ? w->raw_total[f] : w->spool[f].len);
            w->offsets[f].len += 8;
        }
    }
    w->records++;
    for (uint32_t f = 0; f < s->nfields; f++)
        if (stk__field_compressed(&s->fields[f]) && w->raw[f].len >= w->block_bytes[f] &&
            (rc = close_block(w, f, err)))
            return w->failed = rc; /* the record is in: a writer that cannot compress is done */
    return STK_OK;
}

int stk_writer_append(stk_writer *w, const stk_value *v, stk_error *err)
{
    bool lent = false;
    return append(w, v, NULL, NULL, NULL, &lent, err);
}

int stk_writer_append_lent(stk_writer *w, const stk_value *v, const stk_prehash *pre, stk_lent_done_fn done,
                           void *ctx, stk_error *err)
{
    bool lent = false;
    int rc = append(w, v, pre, done, ctx, &lent, err);
    if (!lent && done && v) done(ctx, v[0].data);
    return rc;
}

int stk_writer_compression(stk_writer *w, uint32_t f, int level, uint64_t block_bytes, stk_error *err)
{
    if (!w) return stk_error_set(err, STK_E_ARG, "stk_writer_compression: NULL writer");
    if (w->records) return stk_error_set(err, STK_E_ARG, "%s: compression is set before the first record", w->path);
    if (level < 0 || level > ZSTD_maxCLevel())
        return stk_error_set(err, STK_E_ARG, "%s: zstd level %d out of range (1..%d)", w->path, level, ZSTD_maxCLevel());
    if (block_bytes > STK_BLOCK_RAW_MAX / 2)
        return stk_error_set(err, STK_E_ARG, "%s: block size %llu over %llu", w->path, (unsigned long long)block_bytes,
                        (unsigned long long)(STK_BLOCK_RAW_MAX / 2));
    for (uint32_t i = 0; i < w->schema.nfields; i++) {
        if (f != UINT32_MAX && i != f) continue;
        if (!stk__field_compressed(&w->schema.fields[i])) {
            if (f == UINT32_MAX) continue;
            return stk_error_set(err, STK_E_ARG, "%s: field '%s' is not compressed", w->path, w->schema.fields[i].name);
        }
        w->level[i] = level ? level : 3;
        w->block_bytes[i] = block_bytes ? block_bytes : (uint64_t)1 << 20;
    }
    if (f != UINT32_MAX && f >= w->schema.nfields)
        return stk_error_set(err, STK_E_RANGE, "%s: field %u out of range", w->path, f);
    return STK_OK;
}

uint64_t stk_writer_records(const stk_writer *w) { return w ? w->records : 0; }

int stk_writer_threads(stk_writer *w, unsigned threads, stk_error *err)
{
    if (!w) return stk_error_set(err, STK_E_ARG, "stk_writer_threads: NULL writer");
    if (w->records) return stk_error_set(err, STK_E_ARG, "%s: threads are set before the first record", w->path);
    w->zthreads = threads > 64 ? 64 : threads;
    return STK_OK;
}

/* A frame back from the pool, in block order: append it and its table entry. */
static int take_frame(stk_writer *w, const stk__zframe *z, stk_error *err)
{
    uint32_t f = z->field;
    int rc = STK_OK;
    if (z->err)
        rc = z->err == STK_E_NOMEM ? stk_error_set(err, STK_E_NOMEM, "%s: out of memory compressing", w->path)
                                   : stk_error_set(err, STK_E_IO, "%s: field '%s': zstd: %s", w->path,
                                              w->schema.fields[f].name, ZSTD_getErrorName(z->zerr));
    else if (!buf_reserve(&w->spool[f], z->len) || !buf_reserve(&w->table[f], 16))
        rc = stk_error_set(err, STK_E_NOMEM, "%s: out of memory", w->path);
    if (!rc) {
        memcpy(w->spool[f].p + w->spool[f].len, z->frame, z->len);
        w->spool[f].len += z->len;
        wr64(w->table[f].p + w->table[f].len, z->next_first);
        wr64(w->table[f].p + w->table[f].len + 8, w->spool[f].len);
        w->table[f].len += 16;
    }
    w->zpending_raw[f] -= z->raw_len;
    w->zpending_n[f]--;
    free(z->frame);
    return rc;
}

/* Take back every finished frame at the front of the queue; with `all`, wait
 * for every one; else wait only while too many blocks are in flight. */
static int drain_pool(stk_writer *w, bool all, stk_error *err)
{
    stk__zframe z;
    int rc = STK_OK;
    while (w->pool) {
        bool must = all ? stk__zpool_pending(w->pool) > 0 : stk__zpool_pending(w->pool) > 2u * w->zthreads;
        if (!stk__zpool_take(w->pool, must, &z)) break;
        int r2 = take_frame(w, &z, err);
        if (!rc) rc = r2;
    }
    return rc;
}

/* Compress the pending records of field f into one frame. Single-threaded
 * with a fixed level: the same records give the same bytes anywhere. With
 * compression threads the block goes to the pool and its frame comes back
 * later, in order (drain_pool). */
static int close_block(stk_writer *w, uint32_t f, stk_error *err)
{
    if (w->zthreads > 1) {
        if (!w->pool && !(w->pool = stk__zpool_new(w->zthreads)))
            return stk_error_set(err, STK_E_NOMEM, "%s: cannot start compression threads", w->path);
        buf_t *raw = &w->raw[f];
        uint8_t *p = raw->p ? raw->p : malloc(1);
        if (!p || stk__zpool_submit(w->pool, f, p, raw->len, w->level[f], w->records)) {
            if (!raw->p) free(p);
            return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", w->path);
        }
        w->zpending_raw[f] += raw->len;
        w->zpending_n[f]++;
        *raw = (buf_t){NULL, 0, 0}; /* the pool owns that buffer now */
        w->block_first[f] = w->records;
        return drain_pool(w, false, err);
    }
    buf_t *raw = &w->raw[f], *out = &w->spool[f];
    size_t bound = ZSTD_compressBound(raw->len);
    if (!buf_reserve(out, bound) || !buf_reserve(&w->table[f], 16))
        return stk_error_set(err, STK_E_NOMEM, "%s: out of memory compressing field '%s'", w->path,
                        w->schema.fields[f].name);
    size_t n = ZSTD_compressCCtx(w->cctx, out->p + out->len, bound, raw->p, raw->len, w->level[f]);
    if (ZSTD_isError(n))
        return stk_error_set(err, STK_E_IO, "%s: field '%s': zstd: %s", w->path, w->schema.fields[f].name,
                        ZSTD_getErrorName(n));
    out->len += n;
    raw->len = 0;
    wr64(w->table[f].p + w->table[f].len, w->records);      /* the next block's first record */
    wr64(w->table[f].p + w->table[f].len + 8, out->len);    /* and its frame's offset        */
    w->table[f].len += 16;
    w->block_first[f] = w->records;
    return STK_OK;
}

/* Fill in lengths and place every region, as if `extra` (may be NULL) were
 * appended too. Pending compressed records count uncompressed (and one more
 * table entry): an estimate until finish closes the last blocks. */
static int make_layout_n(const stk_writer *w, uint64_t records, const stk_value *extra, stk__layout *L,
                         stk_error *err)
{
    memset(L, 0, sizeof *L);
    L->schema = w->schema;
    L->records = records;
    for (uint32_t f = 0; f < w->schema.nfields; f++) {
        stk__region *r = &L->region[f];
        const stk_field *fd = &w->schema.fields[f];
        if (stk__field_compressed(fd)) {
            bool pending = w->records > w->block_first[f] || extra;
            r->stride = fd->kind == STK_KIND_TENSOR ? stk_field_stride(fd) : 8;
            r->data_len = stk__block_table_at(fd, L->records) + 8 + w->table[f].len + (pending ? 16 : 0) +
                          16 * w->zpending_n[f];
            r->heap_len = w->spool[f].len + w->raw[f].len + w->zpending_raw[f] + (extra ? extra[f].size : 0);
        } else if (fd->kind == STK_KIND_TENSOR) {
            r->stride = stk_field_stride(fd);
            r->data_len = L->records * r->stride;
        } else {
            r->stride = 8;
            r->data_len = w->offsets[f].len + (extra ? 8 : 0);
            r->heap_len = w->spool[f].len + (extra ? extra[f].size : 0);
        }
    }
    return stk__layout_place(L, err);
}

static int make_layout(const stk_writer *w, const stk_value *extra, stk__layout *L, stk_error *err)
{
    return make_layout_n(w, w->records + (extra != NULL), extra, L, err);
}

uint64_t stk_writer_bytes(const stk_writer *w)
{
    stk__layout L;
    return w && make_layout(w, NULL, &L, NULL) == STK_OK ? L.file_size : 0;
}

uint64_t stk__writer_bytes_after(const stk_writer *w, const stk_value *v)
{
    stk__layout L;
    return make_layout(w, v, &L, NULL) == STK_OK ? L.file_size : UINT64_MAX;
}

/* XXH3 of the finished temporary file. The pages were just written, so this
 * is a memory-speed pass; it maps 64 MiB windows one after another (no copy,
 * unlike read(), and a 1 GiB shard never sits in the resident set whole). */
static int hash_file(stk_writer *w, uint64_t size, uint64_t *out, stk_error *err)
{
    const uint64_t WINDOW = (uint64_t)64 << 20;
    int fd = open(w->tmp, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return stk__error_set_errno(err, STK_E_IO, errno, "%s: cannot reopen", w->tmp);
    stk__hasher *h = stk__hasher_new();
    int rc = h ? STK_OK : stk_error_set(err, STK_E_NOMEM, "out of memory");
    for (uint64_t off = 0; !rc && off < size; off += WINDOW) {
        size_t len = (size_t)(size - off < WINDOW ? size - off : WINDOW);
        void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);
        if (m == MAP_FAILED) {
            rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: mmap for the file hash failed", w->tmp);
            break;
        }
        madvise(m, len, MADV_SEQUENTIAL);
        stk__hasher_update(h, m, len);
        munmap(m, len);
    }
    if (!rc) *out = stk__hasher_digest(h);
    stk__hasher_free(h);
    close(fd);
    return rc;
}

static int write_all_parts(stk_writer *w, stk__layout *L, stk_shard_info *info, stk_error *err)
{
    int rc;
    if (w->st && (rc = stream_drain(w, err))) return rc;
    if ((rc = flush_direct(w, err))) return rc;
    for (uint32_t f = 0; f < w->schema.nfields; f++) /* the last, partial blocks */
        if (stk__field_compressed(&w->schema.fields[f]) && w->records > w->block_first[f] &&
            (rc = close_block(w, f, err)))
            return rc;
    if ((rc = drain_pool(w, true, err))) return rc;
    if ((rc = make_layout(w, NULL, L, err))) return rc;
    for (uint32_t f = 0; f < w->schema.nfields; f++) {
        const stk__region *r = &L->region[f];
        if (stk__field_compressed(&w->schema.fields[f])) {
            uint64_t at = r->data_off, nb = w->table[f].len / 16 - 1;
            uint8_t n8[8];
            wr64(n8, nb);
            if (w->schema.fields[f].kind == STK_KIND_BYTES &&
                (rc = stk__pwrite_all(w->fd, w->offsets[f].p, w->offsets[f].len, at, w->tmp, err)))
                return rc;
            at += stk__block_table_at(&w->schema.fields[f], w->records);
            if ((rc = stk__pwrite_all(w->fd, n8, 8, at, w->tmp, err)) ||
                (rc = stk__pwrite_all(w->fd, w->table[f].p, w->table[f].len, at + 8, w->tmp, err)) ||
                (rc = stk__pwrite_all(w->fd, w->spool[f].p, w->spool[f].len, r->heap_off, w->tmp, err)))
                return rc;
        } else if (w->schema.fields[f].kind == STK_KIND_BYTES) {
            if ((rc = stk__pwrite_all(w->fd, w->offsets[f].p, w->offsets[f].len, r->data_off, w->tmp, err)) ||
                (rc = stk__pwrite_all(w->fd, w->spool[f].p, w->spool[f].len, r->heap_off, w->tmp, err)))
                return rc;
        } else if (!(f == 0 && w->direct) &&
                   (rc = stk__pwrite_all(w->fd, w->spool[f].p, w->spool[f].len, r->data_off, w->tmp, err))) {
            return rc;
        }
    }
    uint8_t *hdr = calloc(1, L->header_size);
    if (!hdr) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    stk__layout_encode(L, hdr);
    /* The streamed hash holds when the header is the one it started with. */
    bool streamed = w->st && w->records == w->st->expect && w->st->hdr_len == L->header_size &&
                    memcmp(w->st->hdr, hdr, L->header_size) == 0;
    stk__hasher *h = stk__hasher_new();
    uint8_t foot[STK_FOOTER_SIZE] = {0};
    if (!h) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
    if (!rc) {
        stk__hasher_update(h, hdr, L->header_size);
        stk__hasher_update(h, w->cksum.p, w->cksum.len);
        info->index_hash = stk__hasher_digest(h);
        wr64(foot + F_INDEX_HASH, info->index_hash);
        wr64(foot + F_FILE_SIZE, L->file_size);
        memcpy(foot + F_MAGIC, STK_FOOTER_MAGIC, 8);
        rc = stk__pwrite_all(w->fd, hdr, L->header_size, 0, w->tmp, err);
    }
    if (!rc) rc = stk__pwrite_all(w->fd, w->cksum.p, w->cksum.len, L->cksum_off, w->tmp, err);
    if (!rc) rc = stk__pwrite_all(w->fd, foot, sizeof foot, L->file_size - STK_FOOTER_SIZE, w->tmp, err);
    if (!rc && streamed) rc = stream_hash_tail(w, L, foot, &info->file_hash, err);
    stk__hasher_free(h);
    free(hdr);
    /* Gaps never written are holes and read as the zero padding the format requires. */
    if (!rc && ftruncate(w->fd, (off_t)L->file_size) != 0)
        rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: ftruncate failed", w->tmp);
    if (!rc && fsync(w->fd) != 0) rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: fsync failed", w->tmp);
    if (!rc && !streamed) rc = hash_file(w, L->file_size, &info->file_hash, err);
    info->records = w->records;
    info->file_size = L->file_size;
    return rc;
}

int stk_writer_finish(stk_writer *w, stk_shard_info *info, stk_error *err)
{
    if (!w) return stk_error_set(err, STK_E_ARG, "stk_writer_finish: NULL writer");
    stk_shard_info local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    int rc = w->failed ? stk_error_set(err, w->failed, "%s: an earlier write failed", w->path) : STK_OK;
    stk__layout L;
    if (!rc) rc = write_all_parts(w, &L, info, err);
    if (!rc && close(w->fd) != 0) rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: close failed", w->tmp);
    w->fd = -1;
    if (!rc && rename(w->tmp, w->path) != 0)
        rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: rename to %s failed", w->tmp, w->path);
    if (rc) unlink(w->tmp);
    else if ((rc = stk__fsync_parent(w->path, err)) && err) {
        char m[STK_ERROR_MSG_MAX];
        snprintf(m, sizeof m, "%s", err->msg);
        stk_error_set(err, rc, "%s committed, but %s", w->path, m);
    }
    writer_free(w);
    return rc;
}

void stk_writer_abort(stk_writer *w)
{
    if (!w) return;
    unlink(w->tmp);
    writer_free(w);
}
