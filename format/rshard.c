/* format/rshard.c - shards of a remote dataset (rshard.h): the fetches
 * behind a remote stk_shard.
 *
 * Open: the first 8 KiB and the footer (one round trip), the rest of a
 * header longer than that, then the metadata ranges in parallel (the
 * header, the footer, every bytes field's offsets and dims columns, every
 * compressed field's data region, the checksum table), checked against the
 * footer's index hash and stored as the cache file's pinned metadata; the
 * tensor columns those first GETs hold whole (a label column near the
 * footer) are checked and offered to the cache as values. A
 * cache file whose metadata is there already (an earlier run, another rank)
 * is taken without a fetch, after the same index-hash check.
 *
 * Values: fetched in runs of absent units, one GET per run of at most PIECE
 * bytes, several in flight, every value checked against the checksum table
 * as it arrives; a run with a mismatch is fetched once more and what still
 * mismatches fails naming shard, field and record. What the cache admits is
 * stored as usual; what it does not (the limit) is stored all the same and
 * remembered in the dataset's window, which drops the oldest such bytes
 * once more than its size is held past the limit (rshard.h,
 * STK__RWINDOW_DEFAULT): the window is what keeps a pointer from
 * stk_shard_value valid under any cache limit. */
#define _GNU_SOURCE
#include "rshard.h"

#include "cache.h"
#include "remote.h"
#include "shard_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <zstd.h>

#define EDGE ((uint64_t)64 << 10)  /* the first GETs: the object's first and last 64 KiB */
#define HEADER_MAX (1u << 20)      /* a larger header is refused (as layout.c does) */
#define PIECE ((uint64_t)8 << 20)  /* one GET of values, at most (one value may be more) */
#define BATCH ((uint64_t)32 << 20) /* bytes of values in flight in one synchronous fetch */

/* ------------------------------------------------------------- the window */

typedef struct {
    const stk__rshard *owner;
    uint64_t u0, u1, off, len;
} held;

struct stk__rwindow {
    pthread_mutex_t mu;
    uint64_t cap, bytes;
    held *e; /* a queue: e[0] oldest */
    size_t n, room;
};

struct stk__rshard {
    stk__remote *r;
    stk__rcache *c;
    stk__rfile *file;
    char *key;
    char *etag; /* NULL: none */
    stk__rwindow *w;
    bool own_w;
    /* per field: the unit after the last value fetched one at a time (a
     * miss there is a scan: the values after it are read ahead) */
    uint64_t next_miss[STK_MAX_FIELDS];
};

stk__rwindow *stk__rwindow_new(uint64_t bytes)
{
    stk__rwindow *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    pthread_mutex_init(&w->mu, NULL);
    w->cap = bytes ? bytes : STK__RWINDOW_DEFAULT;
    return w;
}

void stk__rwindow_free(stk__rwindow *w)
{
    if (!w) return;
    pthread_mutex_destroy(&w->mu);
    free(w->e);
    free(w);
}

/* Bytes of rs stored past the limit: remembered; the oldest beyond the cap
 * (never the newest) dropped. */
static void window_add(stk__rshard *rs, uint64_t u0, uint64_t u1, uint64_t off, uint64_t len)
{
    stk__rwindow *w = rs->w;
    pthread_mutex_lock(&w->mu);
    if (w->n == w->room) {
        size_t room = w->room ? 2 * w->room : 64;
        held *e = realloc(w->e, room * sizeof *e);
        if (!e) { /* no memory to remember them: drop them now (a later fetch gets them again) */
            pthread_mutex_unlock(&w->mu);
            stk__rfile_drop(rs->file, u0, u1, off, len);
            return;
        }
        w->e = e;
        w->room = room;
    }
    w->e[w->n++] = (held){rs, u0, u1, off, len};
    w->bytes += len;
    size_t k = 0;
    while (w->bytes > w->cap && w->n - k > 1) {
        const held *h = &w->e[k++];
        stk__rfile_drop(h->owner->file, h->u0, h->u1, h->off, h->len);
        w->bytes -= h->len;
    }
    memmove(w->e, w->e + k, (w->n - k) * sizeof *w->e);
    w->n -= k;
    pthread_mutex_unlock(&w->mu);
}

/* At close: what rs stored past the limit leaves the cache with it. */
static void window_forget(stk__rshard *rs)
{
    stk__rwindow *w = rs->w;
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    size_t k = 0;
    for (size_t i = 0; i < w->n; i++) {
        if (w->e[i].owner != rs) {
            w->e[k++] = w->e[i];
            continue;
        }
        stk__rfile_drop(rs->file, w->e[i].u0, w->e[i].u1, w->e[i].off, w->e[i].len);
        w->bytes -= w->e[i].len;
    }
    w->n = k;
    pthread_mutex_unlock(&w->mu);
}

/* ------------------------------------------------------------ small helpers */

static const stk_field *field_of(const stk_shard *sh, unsigned f) { return &sh->L.schema.fields[f]; }

static uint64_t unit_of(const stk_shard *sh, unsigned f, uint64_t i) { return f * sh->L.records + i; }

/* A compressed field's block table entry k: first record, frame offset. */
static uint64_t blk_first(const stk_shard *sh, unsigned f, uint64_t k)
{
    return rd64(sh->map + sh->L.region[f].data_off + stk__block_table_at(field_of(sh, f), sh->L.records) + 8 +
                16 * k);
}
static uint64_t blk_frame(const stk_shard *sh, unsigned f, uint64_t k)
{
    return rd64(sh->map + sh->L.region[f].data_off + stk__block_table_at(field_of(sh, f), sh->L.records) +
                16 + 16 * k);
}
static uint64_t nblocks(const stk_shard *sh, unsigned f)
{
    return rd64(sh->map + sh->L.region[f].data_off + stk__block_table_at(field_of(sh, f), sh->L.records));
}
/* Record i's checksum of field f (the table is metadata: always present).
 * Not stk_shard_stored_hash: shard.c calls this file, never the reverse. */
static uint64_t stored_hash(const stk_shard *sh, unsigned f, uint64_t i)
{
    return rd64(sh->map + sh->L.cksum_off + (i * sh->L.schema.nfields + f) * 8);
}
/* A bytes field's offsets column entry i. */
static uint64_t col_at(const stk_shard *sh, unsigned f, uint64_t i)
{
    return rd64(sh->map + sh->L.region[f].data_off + 8 * i);
}

/* The file bytes of a span: [*off, *off + *len). STK_E_FORMAT when the
 * offsets (not covered by the index hash) do not make a range. */
static int span_bytes(const stk_shard *sh, unsigned f, uint64_t first, uint64_t count, int block,
                      uint64_t *off, uint64_t *len, stk_error *err)
{
    const stk__region *r = &sh->L.region[f];
    uint64_t a, b, lim = r->heap_len;
    if (block) {
        a = blk_frame(sh, f, first);
        b = blk_frame(sh, f, first + count);
        *off = r->heap_off + a;
    } else if (field_of(sh, f)->kind == STK_KIND_TENSOR) {
        a = first * r->stride;
        b = (first + count) * r->stride;
        lim = r->data_len;
        *off = r->data_off + a;
    } else {
        a = col_at(sh, f, first);
        b = col_at(sh, f, first + count);
        *off = r->heap_off + a;
    }
    if (a > b || b > lim)
        return stk_error_set(err, STK_E_FORMAT,
                             "%s: field '%s': %s %llu..%llu give the bytes [%llu, %llu), not a range inside "
                             "the %llu-byte region",
                             sh->path, field_of(sh, f)->name, block ? "blocks" : "records",
                             (unsigned long long)first, (unsigned long long)(first + count - 1),
                             (unsigned long long)a, (unsigned long long)b, (unsigned long long)lim);
    *len = b - a;
    return STK_OK;
}

/* Units of a span that need no bytes (empty values) count as present. */
static int unit_present(const stk_shard *sh, unsigned f, uint64_t i, int block)
{
    if (stk__rfile_present(sh->remote->file, unit_of(sh, f, i))) return 1;
    uint64_t off = 0, len = 0;
    return span_bytes(sh, f, i, 1, block, &off, &len, NULL) == STK_OK && len == 0;
}

static int span_ok(const stk_shard *sh, unsigned f, uint64_t first, uint64_t count, int block, stk_error *err)
{
    uint64_t end, lim;
    if (!sh || !sh->remote || f >= sh->L.schema.nfields)
        return stk_error_set(err, STK_E_ARG, "%s: field %u out of range", sh ? sh->path : "(null)", f);
    bool comp = stk__field_compressed(field_of(sh, f));
    if (!!block != comp)
        return stk_error_set(err, STK_E_ARG, "%s: field '%s' is %scompressed: its units are %s", sh->path,
                             field_of(sh, f)->name, comp ? "" : "not ", comp ? "blocks" : "records");
    lim = comp ? nblocks(sh, f) : sh->L.records;
    if (!add_ok(first, count, &end) || end > lim || count == 0)
        return stk_error_set(err, STK_E_RANGE, "%s: field '%s': %s %llu (+%llu) out of range (%llu)",
                             sh->path, field_of(sh, f)->name, comp ? "block" : "record",
                             (unsigned long long)first, (unsigned long long)count, (unsigned long long)lim);
    return STK_OK;
}

/* --------------------------------------------------------------- rshard.h */


int stk__rshard_fd(const stk_shard *sh) { return sh && sh->remote ? stk__rfile_fd(sh->remote->file) : -1; }
stk__remote *stk__rshard_client(const stk_shard *sh) { return sh && sh->remote ? sh->remote->r : NULL; }
const char *stk__rshard_key(const stk_shard *sh) { return sh && sh->remote ? sh->remote->key : NULL; }
const char *stk__rshard_etag(const stk_shard *sh) { return sh && sh->remote ? sh->remote->etag : NULL; }

int stk__rshard_span(const stk_shard *sh, uint64_t off, uint64_t len, unsigned *field, uint64_t *first,
                     uint64_t *count, int *block, stk_error *err)
{
    uint64_t end;
    if (!sh || len == 0 || !add_ok(off, len, &end))
        return stk_error_set(err, STK_E_ARG, "%s: an empty or overflowing range", sh ? sh->path : "(null)");
    for (unsigned f = 0; f < sh->L.schema.nfields; f++) {
        const stk__region *r = &sh->L.region[f];
        const stk_field *fd = field_of(sh, f);
        bool comp = stk__field_compressed(fd);
        if (!comp && fd->kind == STK_KIND_TENSOR) {
            if (off < r->data_off || end > r->data_off + r->data_len || !r->stride) continue;
            if ((off - r->data_off) % r->stride || len % r->stride) break;
            *field = f, *first = (off - r->data_off) / r->stride, *count = len / r->stride, *block = 0;
            return STK_OK;
        }
        if (off < r->heap_off || end > r->heap_off + r->heap_len) continue;
        uint64_t a = off - r->heap_off, b = end - r->heap_off;
        uint64_t n = comp ? nblocks(sh, f) : sh->L.records;
        /* lowest k with entry(k) >= a, highest with entry(k) <= b: entries increase */
        uint64_t lo = 0, hi = n;
        while (lo < hi) {
            uint64_t mid = lo + (hi - lo) / 2;
            if ((comp ? blk_frame(sh, f, mid) : col_at(sh, f, mid)) < a) lo = mid + 1;
            else hi = mid;
        }
        uint64_t k0 = lo;
        lo = k0, hi = n;
        while (lo < hi) {
            uint64_t mid = lo + (hi - lo + 1) / 2;
            if ((comp ? blk_frame(sh, f, mid) : col_at(sh, f, mid)) <= b) lo = mid;
            else hi = mid - 1;
        }
        uint64_t k1 = lo;
        if (k0 >= k1 || (comp ? blk_frame(sh, f, k0) : col_at(sh, f, k0)) != a ||
            (comp ? blk_frame(sh, f, k1) : col_at(sh, f, k1)) != b)
            break;
        *field = f, *first = k0, *count = k1 - k0, *block = comp;
        return STK_OK;
    }
    return stk_error_set(err, STK_E_ARG, "%s: bytes [%llu, %llu) are not whole values of one field", sh->path,
                         (unsigned long long)off, (unsigned long long)end);
}

int stk__rshard_present(const stk_shard *sh, unsigned field, uint64_t first, uint64_t count, int block)
{
    if (span_ok(sh, field, first, count, block, NULL)) return 0;
    for (uint64_t i = first; i < first + count; i++)
        if (!unit_present(sh, field, i, block)) return 0;
    return 1;
}

/* The first record of [first, first + count) of uncompressed field f whose
 * value in bytes (the span's, starting at file offset base) fails its
 * checksum, or first + count. */
static uint64_t first_bad_value(const stk_shard *sh, unsigned f, uint64_t first, uint64_t count,
                                const uint8_t *bytes, uint64_t base, uint64_t *want, uint64_t *got)
{
    for (uint64_t i = first; i < first + count; i++) {
        uint64_t off = 0, len = 0;
        if (span_bytes(sh, f, i, 1, 0, &off, &len, NULL)) return i;
        *want = stored_hash(sh, f, i);
        *got = stk_hash(bytes + (off - base), (size_t)len);
        if (*got != *want) return i;
    }
    return first + count;
}

/* Compressed field f, block k: its frame (packed bytes at src) decodes to
 * its records' values and each matches its checksum. */
static int check_block(const stk_shard *sh, unsigned f, uint64_t k, const uint8_t *src, stk_error *err)
{
    const stk_field *fd = field_of(sh, f);
    uint64_t r0 = blk_first(sh, f, k), r1 = blk_first(sh, f, k + 1);
    uint64_t packed = blk_frame(sh, f, k + 1) - blk_frame(sh, f, k), raw, base = 0;
    if (fd->kind == STK_KIND_TENSOR) {
        raw = (r1 - r0) * sh->L.region[f].stride;
    } else {
        base = col_at(sh, f, r0);
        raw = col_at(sh, f, r1) - base;
        if (col_at(sh, f, r1) < base || raw > STK_BLOCK_RAW_MAX)
            return stk_error_set(err, STK_E_FORMAT, "%s: field '%s', block %llu: offsets out of order",
                                 sh->path, fd->name, (unsigned long long)k);
    }
    uint8_t *dst = malloc(raw ? raw : 1);
    if (!dst)
        return stk_error_set(err, STK_E_NOMEM, "out of memory for a %llu-byte block",
                             (unsigned long long)raw);
    int rc = STK_OK;
    size_t got = ZSTD_decompress(dst, (size_t)raw, src, (size_t)packed);
    if (ZSTD_isError(got) || got != raw) {
        rc = stk_error_set(
            err, STK_E_CHECKSUM, "%s: field '%s', block %llu (records %llu..%llu): the fetched zstd frame %s",
            sh->path, fd->name, (unsigned long long)k, (unsigned long long)r0, (unsigned long long)(r1 - 1),
            ZSTD_isError(got) ? ZSTD_getErrorName(got) : "decompresses to a different size");
    }
    for (uint64_t i = r0; i < r1 && !rc; i++) {
        uint64_t a, b;
        if (fd->kind == STK_KIND_TENSOR) {
            a = (i - r0) * sh->L.region[f].stride;
            b = a + sh->L.region[f].stride;
        } else {
            a = col_at(sh, f, i) - base;
            b = col_at(sh, f, i + 1) - base;
            if (a > b || b > raw) {
                rc = stk_error_set(err, STK_E_FORMAT, "%s: record %llu, field '%s': offsets out of order",
                                   sh->path, (unsigned long long)i, fd->name);
                break;
            }
        }
        uint64_t want = stored_hash(sh, f, i), h = stk_hash(dst + a, (size_t)(b - a));
        if (h != want)
            rc =
                stk_error_set(err, STK_E_CHECKSUM,
                              "%s: record %llu, field '%s': checksum mismatch in block %llu (stored %016llx, "
                              "computed %016llx)",
                              sh->path, (unsigned long long)i, fd->name, (unsigned long long)k,
                              (unsigned long long)want, (unsigned long long)h);
    }
    free(dst);
    return rc;
}

int stk__rshard_check(const stk_shard *sh, unsigned field, uint64_t first, uint64_t count, int block,
                      const void *bytes, stk_error *err)
{
    int rc = span_ok(sh, field, first, count, block, err);
    if (rc) return rc;
    uint64_t base, len;
    if ((rc = span_bytes(sh, field, first, count, block, &base, &len, err))) return rc;
    const uint8_t *p = bytes;
    if (block) {
        for (uint64_t k = first; k < first + count && !rc; k++)
            rc = check_block(sh, field, k,
                             p + (sh->L.region[field].heap_off + blk_frame(sh, field, k) - base), err);
        return rc;
    }
    uint64_t want = 0, got = 0, bad = first_bad_value(sh, field, first, count, p, base, &want, &got);
    if (bad == first + count) return STK_OK;
    return stk_error_set(err, STK_E_CHECKSUM,
                         "%s: record %llu, field '%s': checksum mismatch (stored %016llx, computed %016llx)",
                         sh->path, (unsigned long long)bad, field_of(sh, field)->name,
                         (unsigned long long)want, (unsigned long long)got);
}

void stk__rshard_store(const stk_shard *sh, unsigned field, uint64_t first, uint64_t count, int block,
                       uint64_t off, const void *bytes, uint64_t len)
{
    if (span_ok(sh, field, first, count, block, NULL) || len == 0) return;
    uint64_t u0 = unit_of(sh, field, first);
    stk__rfile_store(sh->remote->file, off, bytes, len, u0, u0 + count, NULL);
}

/* Store a checked span; what the limit does not admit is stored past it and
 * held in the window. */
static int keep(const stk_shard *sh, unsigned f, uint64_t first, uint64_t count, uint64_t off,
                const void *bytes, uint64_t len, stk_error *err)
{
    if (len == 0) return STK_OK;
    stk__rshard *rs = sh->remote;
    uint64_t u0 = unit_of(sh, f, first);
    int rc = stk__rfile_store(rs->file, off, bytes, len, u0, u0 + count, err);
    if (rc < 0) return rc;
    if (rc == 1) return STK_OK;
    if ((rc = stk__rfile_store_over(rs->file, off, bytes, len, u0, u0 + count, err))) return rc;
    window_add(rs, u0, u0 + count, off, len);
    return STK_OK;
}

void stk__rshard_forget(const stk_shard *sh, unsigned f, uint64_t first, uint64_t count, int block)
{
    uint64_t off = 0, len = 0;
    if (span_ok(sh, f, first, count, block, NULL) || span_bytes(sh, f, first, count, block, &off, &len, NULL))
        return;
    uint64_t u0 = unit_of(sh, f, first);
    stk__rfile_drop(sh->remote->file, u0, u0 + count, off, len);
}

/* One GET of a fetch: units [first, first + count) at [off, off + len). */
typedef struct {
    uint64_t first, count, off, len;
    uint8_t *buf;
} piece;

/* Check a fetched piece and keep its good values (every run of them).
 * Returns the first unit not kept (first + count: all kept); err holds its
 * mismatch. */
static uint64_t check_keep(const stk_shard *sh, unsigned f, int block, const piece *p, int *rc,
                           stk_error *err)
{
    *rc = STK_OK;
    uint64_t end = p->first + p->count, first_bad = end;
    if (block) {
        for (uint64_t k = p->first; k < end; k++) {
            uint64_t off = 0, len = 0;
            span_bytes(sh, f, k, 1, 1, &off, &len, NULL);
            stk_error e;
            if (check_block(sh, f, k, p->buf + (off - p->off), &e)) {
                if (first_bad == end) {
                    first_bad = k;
                    *rc = e.code;
                    if (err) *err = e;
                }
                continue;
            }
            int kc = keep(sh, f, k, 1, off, p->buf + (off - p->off), len, err);
            if (kc) return *rc = kc, k;
        }
        return first_bad;
    }
    for (uint64_t a = p->first; a < end;) {
        uint64_t want = 0, got = 0;
        uint64_t bad = first_bad_value(sh, f, a, end - a, p->buf, p->off, &want, &got);
        if (bad > a) {
            uint64_t off = 0, len = 0;
            span_bytes(sh, f, a, bad - a, 0, &off, &len, NULL);
            int kc = keep(sh, f, a, bad - a, off, p->buf + (off - p->off), len, err);
            if (kc) return *rc = kc, a;
        }
        if (bad == end) break;
        if (first_bad == end) {
            first_bad = bad;
            *rc = stk_error_set(
                err, STK_E_CHECKSUM,
                "%s: record %llu, field '%s': checksum mismatch (stored %016llx, computed %016llx) "
                "in two fetches",
                sh->path, (unsigned long long)bad, field_of(sh, f)->name, (unsigned long long)want,
                (unsigned long long)got);
        }
        a = bad + 1;
    }
    return first_bad;
}

static int get_range(const stk_shard *sh, uint64_t off, uint64_t len, void *dst, stk_error *err)
{
    const stk__rshard *rs = sh->remote;
    return stk__remote_get_range(rs->r, rs->key, off, len, dst, rs->etag, NULL, err);
}

/* The fetch behind stk__rshard_fetch and stk__rshard_fetch_records. strict
 * 0: a value that mismatches twice is left absent, not an error. */
static int fetch(const stk_shard *sh, unsigned f, uint64_t first, uint64_t count, int block, int strict,
                 stk_error *err)
{
    stk__rshard *rs = sh->remote;
    uint64_t i = first, end = first + count;
    int rc = STK_OK;
    stk__rgroup *g = NULL;
    piece *ps = NULL;
    size_t np = 0, room = 0;
    while (i < end && !rc) {
        /* a batch: runs of absent units, at most PIECE per GET, BATCH in all */
        uint64_t total = 0;
        np = 0;
        while (i < end && total < BATCH && !rc) {
            if (unit_present(sh, f, i, block)) {
                i++;
                continue;
            }
            uint64_t j = i + 1, off, len;
            if ((rc = span_bytes(sh, f, i, 1, block, &off, &len, err))) break;
            while (j < end && len < PIECE && !unit_present(sh, f, j, block)) {
                uint64_t o2 = 0, l2 = 0;
                if (span_bytes(sh, f, i, j + 1 - i, block, &o2, &l2, NULL) || (l2 > PIECE && j > i)) break;
                len = l2, j++;
            }
            if (np == room) {
                size_t r2 = room ? 2 * room : 16;
                piece *q = realloc(ps, r2 * sizeof *q);
                if (!q) {
                    rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
                    break;
                }
                ps = q, room = r2;
            }
            piece *p = &ps[np];
            *p = (piece){i, j - i, off, len, malloc(len ? len : 1)};
            if (!p->buf) {
                rc = stk_error_set(err, STK_E_NOMEM, "%s: out of memory for %llu bytes", sh->path,
                                   (unsigned long long)len);
                break;
            }
            np++;
            total += len;
            i = j;
        }
        if (!rc && np) {
            if (!g && !(g = stk__rgroup_new(rs->r))) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
            for (size_t k = 0; k < np && !rc; k++)
                if (ps[k].len)
                    rc = stk__rgroup_add(g, rs->key, ps[k].off, ps[k].len, ps[k].buf, rs->etag, NULL, err);
            if (g) {
                stk__rgroup_start(g);
                int wrc = stk__rgroup_wait(g, rc ? NULL : err);
                if (!rc) rc = wrc;
                stk__rgroup_clear(g);
            }
        }
        for (size_t k = 0; k < np && !rc; k++) {
            piece *p = &ps[k];
            uint64_t done = check_keep(sh, f, block, p, &rc, err);
            if (!rc || rc != STK_E_CHECKSUM) continue;
            /* a mismatch: the rest of the piece once more */
            piece q = {done, p->first + p->count - done, 0, 0, NULL};
            if ((rc = span_bytes(sh, f, q.first, q.count, block, &q.off, &q.len, err))) break;
            q.buf = p->buf + (q.off - p->off);
            if ((rc = get_range(sh, q.off, q.len, q.buf, err))) break;
            done = check_keep(sh, f, block, &q, &rc, err);
            if (rc == STK_E_CHECKSUM && !strict) {
                rc = STK_OK; /* left absent: the caller reports it value by value */
            }
        }
        for (size_t k = 0; k < np; k++) free(ps[k].buf);
        np = 0;
    }
    for (size_t k = 0; k < np; k++) free(ps[k].buf);
    free(ps);
    stk__rgroup_free(g);
    return rc;
}

int stk__rshard_fetch(const stk_shard *sh, unsigned field, uint64_t first, uint64_t count, int block,
                      stk_error *err)
{
    int rc = span_ok(sh, field, first, count, block, err);
    return rc ? rc : fetch(sh, field, first, count, block, 1, err);
}

#define READAHEAD ((uint64_t)1 << 20) /* bytes fetched ahead of a scan's miss */

int stk__rshard_fetch_value(const stk_shard *sh, unsigned f, uint64_t i, int block, stk_error *err)
{
    int rc = span_ok(sh, f, i, 1, block, err);
    if (rc) return rc;
    stk__rshard *rs = sh->remote;
    uint64_t n = 1, lim = block ? nblocks(sh, f) : sh->L.records;
    if (__atomic_load_n(&rs->next_miss[f], __ATOMIC_RELAXED) == i) { /* a scan: up to READAHEAD more */
        uint64_t lo = 1, hi = lim - i;
        while (lo < hi) {
            uint64_t mid = lo + (hi - lo + 1) / 2, off = 0, len = 0;
            if (span_bytes(sh, f, i, mid, block, &off, &len, NULL) == STK_OK && len <= READAHEAD) lo = mid;
            else hi = mid - 1;
        }
        n = lo;
    }
    rc = fetch(sh, f, i, n, block, 1, err);
    __atomic_store_n(&rs->next_miss[f], i + n, __ATOMIC_RELAXED);
    return rc;
}

int stk__rshard_fetch_records(const stk_shard *sh, uint64_t first, uint64_t n, uint64_t bytes, uint64_t *done,
                              stk_error *err)
{
    *done = 0;
    if (!sh->remote || n == 0) return *done = n, STK_OK;
    /* the records whose uncompressed values fit in `bytes` (at least one) */
    uint64_t lo = 1, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo + 1) / 2, sum = 0;
        for (unsigned f = 0; f < sh->L.schema.nfields; f++) {
            uint64_t off = 0, len = 0;
            if (stk__field_compressed(field_of(sh, f))) continue;
            if (span_bytes(sh, f, first, mid, 0, &off, &len, NULL) == STK_OK) sum += len;
        }
        if (sum <= bytes) lo = mid;
        else hi = mid - 1;
    }
    for (unsigned f = 0; f < sh->L.schema.nfields; f++) {
        if (stk__field_compressed(field_of(sh, f))) continue;
        uint64_t off = 0, len = 0;
        if (span_bytes(sh, f, first, lo, 0, &off, &len, NULL)) continue; /* the values report it one by one */
        int rc = fetch(sh, f, first, lo, 0, 0, err);
        if (rc) return rc;
    }
    *done = lo;
    return STK_OK;
}

int stk__rshard_read(const stk_shard *sh, uint64_t off, uint64_t len, void *dst, stk_error *err)
{
    uint64_t end;
    if (!add_ok(off, len, &end) || end > sh->size)
        return stk_error_set(err, STK_E_RANGE, "%s: bytes [%llu, +%llu) past its end", sh->path,
                             (unsigned long long)off, (unsigned long long)len);
    return len ? get_range(sh, off, len, dst, err) : STK_OK;
}

uint64_t stk__rshard_file_hash(const stk_shard *sh)
{
    enum { N = 4 }; /* pieces in flight */
    stk__rshard *rs = sh->remote;
    stk__hasher *h = stk__hasher_new();
    stk__rgroup *g = stk__rgroup_new(rs->r);
    uint8_t *buf = malloc(N * PIECE);
    uint64_t v = 0;
    int ok = h && g && buf;
    for (uint64_t off = 0; ok && off < sh->size; off += N * PIECE) {
        uint64_t n[N] = {0};
        for (int k = 0; k < N && ok; k++) {
            uint64_t a = off + k * PIECE;
            n[k] = a >= sh->size ? 0 : sh->size - a < PIECE ? sh->size - a : PIECE;
            if (n[k])
                ok = stk__rgroup_add(g, rs->key, a, n[k], buf + k * PIECE, rs->etag, NULL, NULL) == STK_OK;
        }
        stk__rgroup_start(g);
        ok = stk__rgroup_wait(g, NULL) == STK_OK && ok;
        stk__rgroup_clear(g);
        for (int k = 0; k < N && ok; k++) stk__hasher_update(h, buf + k * PIECE, (size_t)n[k]);
    }
    if (ok) v = stk__hasher_digest(h);
    free(buf);
    stk__rgroup_free(g);
    stk__hasher_free(h);
    return v;
}

/* ------------------------------------------------------------------ open */

/* header (hs bytes) + checksum table hash to the footer's index hash. */
static int index_ok(const uint8_t *head, uint32_t hs, const uint8_t *cksum, uint64_t cksum_len, uint64_t want)
{
    stk__hasher *h = stk__hasher_new();
    if (!h) return 0;
    stk__hasher_update(h, head, hs);
    stk__hasher_update(h, cksum, (size_t)cksum_len);
    uint64_t got = stk__hasher_digest(h);
    stk__hasher_free(h);
    return got == want;
}

/* The metadata ranges of a layout (at most 2 per field + 3). */
static size_t meta_ranges(const stk__layout *L, uint64_t size, uint64_t *offs, uint64_t *lens)
{
    size_t n = 0;
    offs[n] = 0, lens[n++] = L->header_size;
    for (uint32_t f = 0; f < L->schema.nfields; f++) {
        const stk_field *fd = &L->schema.fields[f];
        if (stk__field_compressed(fd) || stk__field_has_heap(fd))
            offs[n] = L->region[f].data_off, lens[n++] = L->region[f].data_len;
    }
    offs[n] = L->cksum_off, lens[n++] = L->cksum_len;
    offs[n] = size - STK_FOOTER_SIZE, lens[n++] = STK_FOOTER_SIZE;
    return n;
}

/* The cached metadata, when the cache file has it and it is whole. */
static int cached_meta_ok(stk__rfile *file, const char *name, uint64_t size, uint64_t index_hash,
                          uint32_t *hs)
{
    if (!stk__rfile_meta_ready(file)) return 0;
    const uint8_t *m = stk__rfile_map(file);
    stk__layout L;
    if (!m || stk__layout_decode(m, (size_t)size, size, name, &L, NULL)) return 0;
    if (rd64(m + size - STK_FOOTER_SIZE + F_INDEX_HASH) != index_hash) return 0;
    if (!index_ok(m, L.header_size, m + L.cksum_off, L.cksum_len, index_hash)) return 0;
    *hs = L.header_size;
    return 1;
}

/* The first round trip of an uncached open: the object's first and last
 * EDGE bytes (the whole object when it is at most twice that), beside the
 * HEAD that pins its ETag when the caller has none. */
typedef struct {
    uint8_t *head, *tail; /* tail NULL: head is the whole object */
    uint64_t hn, tn;
} edges;

static int fetch_edges(stk__rshard *rs, const char *name, uint64_t size, const char *etag, edges *x,
                       stk_error *err)
{
    memset(x, 0, sizeof *x);
    x->hn = size <= 2 * EDGE ? size : EDGE;
    x->tn = size <= 2 * EDGE ? 0 : EDGE;
    stk__rgroup *g = stk__rgroup_new(rs->r);
    x->head = malloc(x->hn);
    x->tail = x->tn ? malloc(x->tn) : NULL;
    if (!g || !x->head || (x->tn && !x->tail)) {
        stk__rgroup_free(g);
        return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", name);
    }
    int rc = stk__rgroup_add(g, rs->key, 0, x->hn, x->head, etag, NULL, err);
    if (!rc && x->tn) rc = stk__rgroup_add(g, rs->key, size - x->tn, x->tn, x->tail, etag, NULL, err);
    stk__rgroup_start(g);
    if (!rc && !etag) { /* the object's identity, pinned for every later GET; meanwhile the GETs run */
        stk__robject o;
        rc = stk__remote_head(rs->r, rs->key, &o, NULL, err);
        if (!rc && o.size != size)
            rc = stk_error_set(err, STK_E_MANIFEST, "%s: is %llu bytes, the manifest says %llu", name,
                               (unsigned long long)o.size, (unsigned long long)size);
        if (!rc && o.etag[0] && !(rs->etag = strdup(o.etag)))
            rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
    }
    int wrc = stk__rgroup_wait(g, rc ? NULL : err);
    stk__rgroup_free(g);
    if (!rc) rc = wrc;
    uint32_t want = rc ? 0 : rd32(x->head + H_HEADER_SIZE);
    if (!rc && want > x->hn && want <= HEADER_MAX && want <= size) { /* a header longer than the first GET */
        uint8_t *b = realloc(x->head, want);
        if (!b) return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", name);
        x->head = b;
        rc = stk__remote_get_range(rs->r, rs->key, x->hn, want - x->hn, b + x->hn, rs->etag, NULL, err);
        x->hn = want;
    }
    return rc;
}

/* Range [off, off + len) inside what the edges hold, or NULL. */
static uint8_t *in_edges(const edges *x, uint64_t size, uint64_t off, uint64_t len)
{
    if (off + len <= x->hn) return x->head + off;
    if (x->tn && off >= size - x->tn) return x->tail + (off - (size - x->tn));
    return NULL;
}

/* Tensor columns the edges hold whole (a label column next to the footer;
 * every column of a small object), each value checked against the checksum
 * table cks: offered to the cache now, so that reading them costs no
 * request (a reader's first parts would otherwise wait for a GET of each
 * shard's label column before they queue their own). */
static void keep_edge_columns(stk__rshard *rs, const stk__layout *L, const edges *x, uint64_t size,
                              const uint8_t *cks)
{
    for (uint32_t f = 0; f < L->schema.nfields && L->records; f++) {
        const stk_field *fd = &L->schema.fields[f];
        const stk__region *rg = &L->region[f];
        if (fd->kind != STK_KIND_TENSOR || stk__field_compressed(fd) || !rg->stride ||
            rg->data_len != L->records * rg->stride)
            continue;
        const uint8_t *p = in_edges(x, size, rg->data_off, rg->data_len);
        if (!p) continue;
        uint64_t i = 0;
        while (i < L->records && stk_hash(p + i * rg->stride, (size_t)rg->stride) ==
                                     rd64(cks + (i * L->schema.nfields + f) * 8))
            i++;
        if (i == L->records)
            (void)stk__rfile_store(rs->file, rg->data_off, p, rg->data_len, (uint64_t)f * L->records,
                                   (uint64_t)(f + 1) * L->records, NULL);
    }
}

int stk__rshard_attach(stk_shard *sh, stk__remote *r, stk__rcache *c, const char *key, uint64_t index_hash,
                       uint64_t records, unsigned nfields, const char *etag, stk__rwindow *w,
                       size_t *head_len, stk_error *err)
{
    const char *name = sh->path;
    uint64_t size = sh->size;
    stk__rshard *rs = calloc(1, sizeof *rs);
    if (!rs) return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", name);
    sh->remote = rs;
    rs->r = r, rs->c = c;
    rs->w = w;
    if (!w) {
        if (!(rs->w = stk__rwindow_new(0))) return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", name);
        rs->own_w = true;
    }
    if (!(rs->key = strdup(key)) || (etag && !(rs->etag = strdup(etag))))
        return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", name);
    char id[64];
    snprintf(id, sizeof id, "%016llx-%llu", (unsigned long long)index_hash, (unsigned long long)size);
    uint32_t hs = 0;
    int rc;
    if (records && nfields) { /* the cache file's units known from the manifest: maybe cached already */
        uint64_t nunits;
        if (!mul_ok(records, nfields, &nunits))
            return stk_error_set(err, STK_E_MANIFEST, "%s: %llu records x %u fields overflow", name,
                                 (unsigned long long)records, nfields);
        if ((rc = stk__rfile_open(c, id, size, nunits, &rs->file, err))) return rc;
        if (cached_meta_ok(rs->file, name, size, index_hash, &hs)) {
            if (!etag) { /* only the ETag to pin */
                stk__robject o;
                if ((rc = stk__remote_head(r, key, &o, NULL, err))) return rc;
                if (o.size != size)
                    return stk_error_set(err, STK_E_MANIFEST, "%s: is %llu bytes, the manifest says %llu",
                                         name, (unsigned long long)o.size, (unsigned long long)size);
                if (o.etag[0] && !(rs->etag = strdup(o.etag)))
                    return stk_error_set(err, STK_E_NOMEM, "out of memory");
            }
            sh->map = stk__rfile_map(rs->file);
            *head_len = hs;
            return STK_OK;
        }
    }
    edges x;
    rc = fetch_edges(rs, name, size, etag, &x, err);
    const uint8_t *foot = NULL;
    stk__layout L;
    if (!rc) foot = x.tn ? x.tail + x.tn - STK_FOOTER_SIZE : x.head + size - STK_FOOTER_SIZE;
    if (!rc) rc = stk__layout_decode(x.head, x.hn, size, name, &L, err);
    if (!rc) hs = L.header_size;
    if (!rc && memcmp(foot + F_MAGIC, STK_FOOTER_MAGIC, 8) != 0)
        rc = stk_error_set(err, STK_E_FORMAT,
                           "%s: footer magic missing at offset %llu (incomplete or corrupt file)", name,
                           (unsigned long long)(size - STK_FOOTER_SIZE));
    if (!rc && rd64(foot + F_INDEX_HASH) != index_hash)
        rc = stk_error_set(err, STK_E_MANIFEST,
                           "%s: index hash %016llx differs from the manifest's %016llx (a different or "
                           "replaced shard)",
                           name, (unsigned long long)rd64(foot + F_INDEX_HASH),
                           (unsigned long long)index_hash);
    if (!rc && records && L.records != records)
        rc = stk_error_set(err, STK_E_MANIFEST, "%s: holds %llu records, the manifest says %llu", name,
                           (unsigned long long)L.records, (unsigned long long)records);
    if (!rc && !rs->file) {
        uint64_t nunits = L.records * L.schema.nfields; /* bounded by the checksum table's length */
        rc = stk__rfile_open(c, id, size, nunits, &rs->file, err);
    }
    /* the metadata ranges: what the edges hold, the rest fetched in parallel;
     * the checksum table checked with the header against the footer */
    enum { NMAX = 2 * STK_MAX_FIELDS + 3 };
    uint64_t offs[NMAX], lens[NMAX];
    uint8_t *bufs[NMAX] = {NULL};
    bool owned[NMAX] = {false};
    size_t n = rc ? 0 : meta_ranges(&L, size, offs, lens), cks = n - 2;
    stk__rgroup *g = n ? stk__rgroup_new(r) : NULL;
    if (n && !g) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
    for (int attempt = 0; attempt < 2 && !rc; attempt++) {
        for (size_t k = 0; k < n && !rc; k++) {
            if (bufs[k] && !(attempt && k == cks)) continue;
            if (!attempt && (bufs[k] = in_edges(&x, size, offs[k], lens[k]))) continue;
            if (!bufs[k]) {
                if (!(bufs[k] = malloc(lens[k] ? lens[k] : 1))) {
                    rc = stk_error_set(err, STK_E_NOMEM, "%s: out of memory for %llu bytes of metadata", name,
                                       (unsigned long long)lens[k]);
                    break;
                }
                owned[k] = true;
            } else if (!owned[k]) { /* a second fetch of the table in the edges: into its own buffer */
                uint8_t *b = malloc(lens[k] ? lens[k] : 1);
                if (!b) {
                    rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
                    break;
                }
                bufs[k] = b, owned[k] = true;
            }
            if (lens[k]) rc = stk__rgroup_add(g, key, offs[k], lens[k], bufs[k], rs->etag, NULL, err);
        }
        stk__rgroup_start(g);
        int wrc = stk__rgroup_wait(g, rc ? NULL : err);
        if (!rc) rc = wrc;
        stk__rgroup_clear(g);
        if (rc || index_ok(bufs[0], hs, bufs[cks], lens[cks], index_hash)) break;
        if (attempt)
            rc = stk_error_set(err, STK_E_CHECKSUM,
                               "%s: the checksum table does not hash to the footer's index hash %016llx "
                               "(fetched twice)",
                               name, (unsigned long long)index_hash);
    }
    stk__rgroup_free(g);
    if (!rc) rc = stk__rfile_store_meta(rs->file, n, offs, lens, (const void *const *)bufs, err);
    if (!rc) keep_edge_columns(rs, &L, &x, size, bufs[cks]);
    for (size_t k = 0; k < n; k++)
        if (owned[k]) free(bufs[k]);
    free(x.head);
    free(x.tail);
    if (rc) return rc;
    sh->map = stk__rfile_map(rs->file);
    *head_len = hs;
    return STK_OK;
}

void stk__rshard_free(stk__rshard *rs)
{
    if (!rs) return;
    if (rs->file) {
        window_forget(rs);
        stk__rfile_close(rs->file);
    }
    if (rs->own_w) stk__rwindow_free(rs->w);
    free(rs->key);
    free(rs->etag);
    free(rs);
}
