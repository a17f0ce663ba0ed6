/* reader/io_remote.c - the I/O engine's remote backend (STK__ENGINE_REMOTE):
 * runs of records of remote shards (s3://, https://, format/rshard.h) read
 * by range GETs straight into the callers' buffers, many in flight through
 * the shard's client (remote/remote.h), through the node cache
 * (remote/cache.h) when it holds them.
 *
 * io.c hands every run of a remote shard here (stk__rio_add); its queues
 * own one stk__rioq each, which owns one stk__rgroup per client (a mixture
 * may read several buckets). A run whose values are all in the cache is
 * copied out of the cache file's mapping at once and checked against the
 * shard's checksum table (the cache may have dropped them under us: a hole
 * reads as zeros); a run that is not, or fails that check, becomes a GET.
 * Adjacent runs of one field and shard that land adjacent in the caller's
 * buffer are one GET (sequential and quasi orders read long runs); a long
 * run is cut into pieces of whole values so that its bytes come over
 * several connections; a small column (labels) is fetched a window at a
 * time into the cache (stk__rshard_fetch) and read from there. On wait every piece is checked as it is (a mismatch
 * refetches once, synchronously; a second mismatch fails naming shard,
 * field and record), then offered to the cache (which may not keep it: the
 * limit). Compressed frames whose block is cached are left to the map
 * (STK__IO_USE_MAP): stk_shard_block_read of a remote shard takes them from
 * the cache, checked. Every GET carries the shard's ETag (If-Match), so an
 * object replaced under a running reader fails by name. */
#include "io.h"

#include "../format/rshard.h"
#include "../remote/remote.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Pieces of a run: at most this many bytes per GET, and a queue's bytes
 * spread over at least PIECES_MIN GETs where its runs are long enough
 * (never below PIECE_MIN). */
#define PIECE_MAX ((uint64_t)4 << 20)
#define PIECE_MIN ((uint64_t)64 << 10)
#define PIECES_MIN 16u
/* Columns of values under STK__IO_MIN_READ are fetched whole, this many
 * bytes of them at a time. */
#define SMALL_WINDOW ((uint64_t)256 << 10)

typedef struct {
    size_t shard;
    const stk_shard *sh;
    uint64_t off, len;
    uint8_t *dst;
    uint64_t rec, count; /* the shard's records (values) it holds; a frame: its block's */
    void *tag;
    int block; /* a compressed frame */
    unsigned field;
    unsigned grp;
} rrun;

typedef struct {
    size_t run;
    uint64_t off, len;
    uint8_t *dst;
} rpiece;

typedef struct {
    stk__remote *cl;
    stk__rgroup *g;
} rgrp;

struct stk__rioq {
    stk__rio *rio;
    rrun *run;
    size_t n, cap;
    rpiece *pc;
    size_t npc, pccap;
    int *run_err; /* per run: a failure (STK_E_*), after wait */
    stk_error *run_msg;
    size_t errcap;
    rgrp *grp;
    unsigned ngrp;
    int started; /* submitted, not yet waited for */
};

struct stk__rio {
    const stk_dataset *ds;
    unsigned nq;
    stk__rioq *q;
    uint8_t *remote; /* per shard: 1 remote */
    stk__remote **cl;
    unsigned ncl;
    /* atomic counters */
    uint64_t c_gets, c_bytes, c_hits, c_hit_bytes, c_stored, c_rejected, c_refetch, c_runs, c_small;
};

/* The group of q for client cl (stk__rio_open makes them all). */
static int group_of(stk__rioq *q, stk__remote *cl, unsigned *gi, stk_error *err)
{
    for (unsigned i = 0; i < q->ngrp; i++)
        if (q->grp[i].cl == cl) {
            *gi = i;
            return STK_OK;
        }
    rgrp *p = realloc(q->grp, (q->ngrp + 1) * sizeof *p);
    if (!p) return stk_error_set(err, STK_E_NOMEM, "out of memory for the remote read queue");
    q->grp = p;
    if (!(p[q->ngrp].g = stk__rgroup_new(cl)))
        return stk_error_set(err, STK_E_NOMEM, "out of memory for the remote read queue");
    p[q->ngrp].cl = cl;
    *gi = q->ngrp++;
    return STK_OK;
}

int stk__rio_open(stk__rio **out, const stk_dataset *ds, unsigned nq, stk_error *err)
{
    *out = NULL;
    size_t ns = stk_dataset_nshards(ds), nrem = 0;
    for (size_t s = 0; s < ns; s++) nrem += stk__shard_is_remote(stk_dataset_shard(ds, s)) != 0;
    if (!nrem) return STK_OK;
    stk__rio *io = calloc(1, sizeof *io);
    if (!io) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    io->ds = ds;
    io->nq = nq ? nq : 1;
    io->remote = calloc(ns, 1);
    io->cl = calloc(nrem, sizeof *io->cl);
    io->q = calloc(io->nq, sizeof *io->q);
    if (!io->remote || !io->cl || !io->q) {
        stk__rio_close(io);
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    }
    for (size_t s = 0; s < ns; s++) {
        const stk_shard *sh = stk_dataset_shard(ds, s);
        if (!stk__shard_is_remote(sh)) continue;
        io->remote[s] = 1;
        stk__remote *c = stk__rshard_client(sh);
        unsigned i = 0;
        while (i < io->ncl && io->cl[i] != c) i++;
        if (i == io->ncl) io->cl[io->ncl++] = c;
    }
    /* every queue's groups made now: stk__rio_cancel walks them from
     * another thread, so they never move afterwards */
    for (unsigned i = 0; i < io->nq; i++) {
        stk__rioq *q = &io->q[i];
        q->rio = io;
        for (unsigned c = 0; c < io->ncl; c++) {
            unsigned gi;
            int rc = group_of(q, io->cl[c], &gi, err);
            if (rc) {
                stk__rio_close(io);
                return rc;
            }
        }
    }
    *out = io;
    return STK_OK;
}

void stk__rio_cancel(stk__rio *io)
{
    if (!io) return;
    for (unsigned i = 0; i < io->nq; i++)
        for (unsigned g = 0; g < io->q[i].ngrp; g++) stk__rgroup_cancel(io->q[i].grp[g].g);
}

void stk__rio_close(stk__rio *io)
{
    if (!io) return;
    for (unsigned i = 0; io->q && i < io->nq; i++) {
        stk__rioq *q = &io->q[i];
        for (unsigned g = 0; g < q->ngrp; g++) stk__rgroup_free(q->grp[g].g); /* waits for its GETs */
        free(q->grp);
        free(q->run);
        free(q->pc);
        free(q->run_err);
        free(q->run_msg);
    }
    free(io->q);
    free(io->remote);
    free(io->cl);
    free(io);
}

int stk__rio_remote(const stk__rio *io, size_t shard) { return io && io->remote[shard]; }
stk__rioq *stk__rio_queue(stk__rio *io, unsigned i) { return io ? &io->q[i] : NULL; }

void stk__rio_counts_get(const stk__rio *io, stk__rio_counts *c)
{
    memset(c, 0, sizeof *c);
    if (!io) return;
    c->remote = 1;
    c->gets = __atomic_load_n(&io->c_gets, __ATOMIC_RELAXED);
    c->runs = __atomic_load_n(&io->c_runs, __ATOMIC_RELAXED);
    c->bytes = __atomic_load_n(&io->c_bytes, __ATOMIC_RELAXED);
    c->cache_hits = __atomic_load_n(&io->c_hits, __ATOMIC_RELAXED);
    c->cache_hit_bytes = __atomic_load_n(&io->c_hit_bytes, __ATOMIC_RELAXED);
    c->cache_stored = __atomic_load_n(&io->c_stored, __ATOMIC_RELAXED);
    c->cache_rejected = __atomic_load_n(&io->c_rejected, __ATOMIC_RELAXED);
    c->refetches = __atomic_load_n(&io->c_refetch, __ATOMIC_RELAXED);
    c->small_windows = __atomic_load_n(&io->c_small, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < io->ncl; i++) {
        stk__rcounts rc;
        stk__remote_counts(io->cl[i], &rc);
        c->requests += rc.requests;
        c->bytes_in += rc.bytes_in;
        c->retries += rc.retries;
        c->retry_5xx += rc.retry_5xx;
        c->retry_net += rc.retry_net;
        c->failures += rc.failures;
        if (rc.inflight_max > c->inflight_max) c->inflight_max = rc.inflight_max;
    }
}

/* ------------------------------------------------------------ adding */

static void add_count(uint64_t *c, uint64_t v) { __atomic_add_fetch(c, v, __ATOMIC_RELAXED); }

static const char *recs_text(char *buf, size_t cap, uint64_t rec, uint32_t nrec)
{
    if (nrec > 1)
        snprintf(buf, cap, "records %llu-%llu", (unsigned long long)rec,
                 (unsigned long long)(rec + nrec - 1));
    else snprintf(buf, cap, "record %llu", (unsigned long long)rec);
    return buf;
}


/* A span's values from the cache file's mapping into dst, checked: 1 when
 * they were there and right. Only tensor fields have a base to copy from. */
static int copy_cached(stk__rio *io, const stk_shard *sh, unsigned f, uint64_t first, uint64_t count,
                       uint64_t off, uint64_t len, uint8_t *dst)
{
    const uint8_t *base = stk_shard_field_base(sh, f);
    if (!base) return 0;
    /* pread: the kernel copies from the page cache with no page table of
     * ours to fill (a map copy faults every 64 KiB, in every process) */
    int fd = stk__rshard_fd(sh);
    uint64_t done = 0;
    while (fd >= 0 && done < len) {
        ssize_t n = pread(fd, dst + done, len - done, (off_t)(off + done));
        if (n <= 0 && !(n < 0 && errno == EINTR)) break;
        if (n > 0) done += (uint64_t)n;
    }
    if (done < len) memcpy(dst, base + (off - stk_shard_field_offset(sh, f)), len);
    if (stk__rshard_check(sh, f, first, count, 0, dst, NULL)) return 0; /* dropped under us: fetch */
    add_count(&io->c_hits, count);
    add_count(&io->c_hit_bytes, len);
    return 1;
}

/* Queue a GET of [off, off + len) (values [first, first + count) of field
 * f, or a frame), joined to the run before when adjacent in the file and in
 * dst. */
static int queue(stk__rioq *q, size_t shard, const stk_shard *sh, unsigned f, int block, uint64_t off,
                 uint64_t len, uint8_t *dst, uint64_t rec, uint64_t count, void *tag, stk_error *err)
{
    unsigned gi = 0;
    int rc = group_of(q, stk__rshard_client(sh), &gi, err);
    if (rc) return rc;
    add_count(&q->rio->c_runs, 1);
    if (q->n) {
        rrun *p = &q->run[q->n - 1];
        if (p->shard == shard && !p->block && !block && p->field == f && p->off + p->len == off &&
            p->dst + p->len == dst && p->tag == tag) {
            p->len += len;
            p->count += count;
            return STK_OK;
        }
    }
    if (q->n == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 256;
        rrun *p = realloc(q->run, cap * sizeof *p);
        if (!p) return stk_error_set(err, STK_E_NOMEM, "out of memory for the remote read queue");
        q->run = p;
        q->cap = cap;
    }
    q->run[q->n++] = (rrun){shard, sh, off, len, dst, rec, count, tag, block, f, gi};
    return STK_OK;
}

int stk__rioq_add(stk__rioq *q, size_t shard, uint64_t off, uint64_t len, void *dst, uint64_t rec,
                  uint32_t nrec, void *tag, stk_error *err)
{
    stk__rio *io = q->rio;
    const stk_shard *sh = stk_dataset_shard(io->ds, shard);
    unsigned f;
    uint64_t first, count;
    int block;
    int rc = stk__rshard_span(sh, off, len, &f, &first, &count, &block, err);
    if (rc) return rc;
    (void)nrec; /* the span says which records */
    if (block) {
        if (!stk__rshard_present(sh, f, first, count, 1))
            return queue(q, shard, sh, f, 1, off, len, dst, rec, count, tag, err);
        /* stk_shard_block_read takes the frame from the cache, checked */
        add_count(&io->c_hits, count);
        add_count(&io->c_hit_bytes, len);
        return STK__IO_USE_MAP;
    }
    uint64_t stride = count ? len / count : len;
    if (stride < STK__IO_MIN_READ && !stk__rshard_present(sh, f, first, count, 0)) {
        /* a small column (labels): a GET per record would cost a request
         * per 8 bytes; its whole window of SMALL_WINDOW bytes is fetched
         * now, into the cache, and the records come from there below */
        uint64_t per = SMALL_WINDOW / stride, n = stk_shard_records(sh), w0 = first / per * per;
        uint64_t w1 = (first + count + per - 1) / per * per;
        if (w1 > n) w1 = n;
        if (!stk__rshard_fetch(sh, f, w0, w1 - w0, 0, NULL)) add_count(&io->c_small, 1);
    }
    /* values: what the cache holds copied from it (checked), the rest fetched;
     * stretches of records alike in that, in order */
    for (uint64_t i = 0; i < count && !rc;) {
        int here = stk__rshard_present(sh, f, first + i, 1, 0);
        uint64_t j = i + 1;
        while (j < count && stk__rshard_present(sh, f, first + j, 1, 0) == here) j++;
        uint64_t o = off + i * stride, l = (j - i) * stride;
        uint8_t *d = (uint8_t *)dst + i * stride;
        if (!here || !copy_cached(io, sh, f, first + i, j - i, o, l, d))
            rc = queue(q, shard, sh, f, 0, o, l, d, rec + i, j - i, tag, err);
        i = j;
    }
    return rc;
}

/* ------------------------------------------------------------ submit, wait */

static int push_piece(stk__rioq *q, size_t run, uint64_t off, uint64_t len, uint8_t *dst, stk_error *err)
{
    if (q->npc == q->pccap) {
        size_t cap = q->pccap ? 2 * q->pccap : 256;
        rpiece *p = realloc(q->pc, cap * sizeof *p);
        if (!p) return stk_error_set(err, STK_E_NOMEM, "out of memory for the remote read queue");
        q->pc = p;
        q->pccap = cap;
    }
    q->pc[q->npc++] = (rpiece){run, off, len, dst};
    return STK_OK;
}

/* Cut run i into pieces of whole values of at most `piece` bytes. */
static int cut_run(stk__rioq *q, size_t i, uint64_t piece, stk_error *err)
{
    const rrun *r = &q->run[i];
    uint64_t stride = r->count && !r->block ? r->len / r->count : 0;
    if (r->block || !stride || r->len % stride || r->len <= piece)
        return push_piece(q, i, r->off, r->len, r->dst, err);
    uint64_t per = piece / stride ? piece / stride * stride : stride;
    for (uint64_t pos = 0; pos < r->len; pos += per) {
        uint64_t n = r->len - pos < per ? r->len - pos : per;
        int rc = push_piece(q, i, r->off + pos, n, r->dst + pos, err);
        if (rc) return rc;
    }
    return STK_OK;
}

int stk__rioq_submit(stk__rioq *q, stk_error *err)
{
    if (!q->n) return STK_OK;
    uint64_t total = 0;
    for (size_t i = 0; i < q->n; i++) total += q->run[i].len;
    uint64_t piece = total / PIECES_MIN;
    piece = piece < PIECE_MIN ? PIECE_MIN : piece > PIECE_MAX ? PIECE_MAX : piece;
    q->npc = 0;
    int rc = STK_OK;
    for (size_t i = 0; i < q->n && !rc; i++) rc = cut_run(q, i, piece, err);
    if (!rc && q->errcap < q->n) {
        free(q->run_err);
        free(q->run_msg);
        q->run_err = calloc(q->n, sizeof *q->run_err);
        q->run_msg = calloc(q->n, sizeof *q->run_msg);
        q->errcap = q->run_err && q->run_msg ? q->n : 0;
        if (!q->errcap) rc = stk_error_set(err, STK_E_NOMEM, "out of memory for the remote read queue");
    }
    for (size_t j = 0; j < q->npc && !rc; j++) {
        const rpiece *p = &q->pc[j];
        const rrun *r = &q->run[p->run];
        rc = stk__rgroup_add(q->grp[r->grp].g, stk__rshard_key(r->sh), p->off, p->len, p->dst,
                             stk__rshard_etag(r->sh), (void *)(uintptr_t)j, err);
    }
    for (unsigned g = 0; g < q->ngrp; g++) stk__rgroup_start(q->grp[g].g);
    q->started = 1;
    if (!rc) add_count(&q->rio->c_gets, q->npc);
    return rc;
}

static void run_fail(stk__rioq *q, size_t i, const stk_error *e)
{
    if (q->run_err[i]) return;
    const rrun *r = &q->run[i];
    char recs[64];
    q->run_err[i] = e->code ? e->code : STK_E_IO;
    stk_error_set(&q->run_msg[i], q->run_err[i], "%s: %s: %s", stk_shard_path(r->sh),
                  recs_text(recs, sizeof recs, r->rec, (uint32_t)r->count), e->msg);
}

/* A piece arrived: check it (refetch once on a mismatch), offer it to the
 * cache. */
static void piece_done(stk__rioq *q, const rpiece *p)
{
    stk__rio *io = q->rio;
    const rrun *r = &q->run[p->run];
    unsigned f;
    uint64_t first, count;
    int block;
    stk_error e = {STK_OK, ""};
    if (stk__rshard_span(r->sh, p->off, p->len, &f, &first, &count, &block, &e)) {
        run_fail(q, p->run, &e);
        return;
    }
    add_count(&io->c_bytes, p->len);
    if (stk__rshard_check(r->sh, f, first, count, block, p->dst, &e)) {
        add_count(&io->c_refetch, 1);
        long http = 0;
        stk_error e2 = {STK_OK, ""};
        if (stk__remote_get_range(stk__rshard_client(r->sh), stk__rshard_key(r->sh), p->off, p->len, p->dst,
                                  stk__rshard_etag(r->sh), &http, &e2)) {
            run_fail(q, p->run, &e2);
            return;
        }
        add_count(&io->c_bytes, p->len);
        if (stk__rshard_check(r->sh, f, first, count, block, p->dst, &e)) { /* names shard, field, record */
            q->run_err[p->run] = e.code ? e.code : STK_E_CHECKSUM;
            q->run_msg[p->run] = e;
            q->run_msg[p->run].code = q->run_err[p->run];
            return;
        }
    }
    stk__rshard_store(r->sh, f, first, count, block, p->off, p->dst, p->len);
    add_count(stk__rshard_present(r->sh, f, first, count, block) ? &io->c_stored : &io->c_rejected, p->len);
}

void stk__rioq_drain(stk__rioq *q)
{
    if (!q->started) return;
    q->started = 0;
    for (unsigned g = 0; g < q->ngrp; g++) {
        stk__rgroup *grp = q->grp[g].g;
        (void)stk__rgroup_wait(grp, NULL);
        for (size_t i = 0, n = stk__rgroup_count(grp); i < n; i++) {
            void *tag = NULL;
            stk_error e = {STK_OK, ""};
            int rc = stk__rgroup_result(grp, i, &tag, &e);
            size_t j = (size_t)(uintptr_t)tag;
            if (j >= q->npc) continue;
            if (rc) run_fail(q, q->pc[j].run, &e);
            else if (!q->run_err[q->pc[j].run]) piece_done(q, &q->pc[j]);
        }
        stk__rgroup_clear(grp);
    }
}

size_t stk__rioq_count(const stk__rioq *q) { return q ? q->n : 0; }

int stk__rioq_result(const stk__rioq *q, size_t i, void **tag, stk_error *err)
{
    if (tag) *tag = q->run[i].tag;
    if (i >= q->errcap || !q->run_err[i]) return STK_OK;
    if (err) *err = q->run_msg[i];
    return q->run_err[i];
}

void stk__rioq_clear(stk__rioq *q)
{
    if (!q) return;
    if (q->started) stk__rioq_drain(q);
    if (q->errcap) { memset(q->run_err, 0, q->errcap * sizeof *q->run_err); }
    q->n = q->npc = 0;
}
