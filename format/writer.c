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
 * thread (writer_stream.c) that hashes and writes it, with O_DIRECT where the
 * file system takes it, so the appending thread never waits for the disk.
 * Values are copied into its staging buffers, or, lent
 * (stk_writer_append_lent), written from the caller's memory: a packer's
 * appending thread then does no per-byte work at all. A lent value may come
 * with its XXH3 block sums (stk_hash_blocks, computed where it was made); the
 * file hash then takes those instead of the value's bytes (hash_blocks.h).
 * Here stays what needs the whole shard: the header that the stream's hash
 * started with is checked against the final one, and the bytes after field 0
 * are hashed last. If the count turns out different, finish falls back to
 * reading the file back. */
#define _GNU_SOURCE
#include "image.h" /* stk__jpeg_check: the format library's one call into image/ */
#include "internal.h"
#include "writer_stream.h"
#include "zpool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

/* Field 0 without streaming: values gather in a buffer of DIRECT_BUF bytes;
 * those of DIRECT_BIG and more are written from the caller's memory. */
#define DIRECT_BUF (4u << 20)
#define DIRECT_BIG (64u << 10)

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

struct stk_writer {
    stk_schema schema;
    char *path, *tmp;
    int fd;
    int failed;      /* sticky: a write to the file failed */
    bool trust_jpeg; /* stk_writer_trust_jpeg: JPEG values get no entropy check */
    uint64_t records;
    bool direct;                   /* field 0 streams into the file       */
    uint64_t direct_off;           /* where the next direct bytes go      */
    buf_t direct_buf;              /* pending direct bytes                */
    buf_t spool[STK_MAX_FIELDS];   /* tensor values or bytes heaps   */
    buf_t offsets[STK_MAX_FIELDS]; /* bytes and array fields: u64 offsets */
    buf_t dims[STK_MAX_FIELDS];    /* array fields: u64 per-record dims    */
    buf_t cksum;                   /* u64 per record per field            */
    stk__stream *st;               /* streaming (writer_stream.c), or NULL */
    stk_writer_io_stats *sink;     /* stk_writer_io_stats_into, or NULL    */
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

static int close_block(stk_writer *w, uint32_t f, stk_error *err);
static int make_layout_n(const stk_writer *w, uint64_t records, const stk_value *extra, stk__layout *L,
                         stk_error *err);

static void writer_free(stk_writer *w)
{
    if (!w) return;
    if (w->sink && w->st) stk__stream_stats_add(w->st, w->sink);
    stk__stream_free(w->st);
    if (w->fd >= 0) close(w->fd);
    free(w->direct_buf.p);
    for (unsigned i = 0; i < STK_MAX_FIELDS; i++)
        free(w->spool[i].p), free(w->offsets[i].p), free(w->dims[i].p);
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
        if (!stk__field_has_heap(&schema->fields[f])) continue;
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
    /* field 0's values go straight to the file: a tensor's region, or an
     * array's heap (placed first for that, stk__heap_first) */
    w->direct = (schema->fields[0].kind == STK_KIND_TENSOR && !stk__field_compressed(&schema->fields[0])) ||
                stk__heap_first(schema);
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

/* The per-record dims of array field f, from `dims` (advanced past them) or,
 * without, from the value's size; checked against the value. */
static int array_dims(const stk_writer *w, const stk_field *fd, const stk_value *v, const uint64_t **dims,
                      uint64_t *var, stk_error *err)
{
    unsigned nv = stk_field_var_dims(fd);
    uint64_t item = stk__array_item(fd), want = item;
    unsigned long long rec = (unsigned long long)w->records;
    if (*dims) {
        memcpy(var, *dims, nv * sizeof *var);
        *dims += nv;
    } else if (nv == 1 && fd->codec != STK_CODEC_JPEG) {
        if (v->size % item)
            return stk_error_set(err, STK_E_ARG,
                                 "%s: record %llu, field '%s': value of %llu bytes is not a whole number of "
                                 "%llu-byte items",
                                 w->path, rec, fd->name, (unsigned long long)v->size,
                                 (unsigned long long)item);
        var[0] = v->size / item;
    } else {
        return stk_error_set(err, STK_E_ARG,
                             "%s: record %llu, field '%s': its shape has %u per-record dims: "
                             "append with them (stk_writer_append_dims)",
                             w->path, rec, fd->name, nv);
    }
    if (fd->codec == STK_CODEC_JPEG) {
        uint32_t h, wd;
        unsigned c;
        if (!stk__jpeg_dims(v->data, v->size, &h, &wd, &c))
            return stk_error_set(err, STK_E_ARG, "%s: record %llu, field '%s': value is not a JPEG stream",
                                 w->path, rec, fd->name);
        if (h != var[0] || wd != var[1] || c != fd->shape[2])
            return stk_error_set(err, STK_E_ARG,
                                 "%s: record %llu, field '%s': JPEG is %ux%u with %u components, dims say "
                                 "%llux%llu with %llu",
                                 w->path, rec, fd->name, h, wd, c, (unsigned long long)var[0],
                                 (unsigned long long)var[1], (unsigned long long)fd->shape[2]);
        /* Through to EOI, so that what is stored decodes: a stream cut after
         * its frame header, with no scan, with 12-bit samples or with damaged
         * entropy data would pass everything above. image/jpeg.c does it,
         * the one decoder: the format library's one call into image/ (both
         * are in libstoker). */
        stk_error je;
        int rc = w->trust_jpeg ? STK_OK : stk__jpeg_check(v->data, (size_t)v->size, &je);
        if (rc)
            return stk_error_set(err, rc == STK_E_NOMEM ? STK_E_NOMEM : STK_E_ARG,
                                 "%s: record %llu, field '%s': the %llu-byte value does not decode: %s",
                                 w->path, rec, fd->name, (unsigned long long)v->size, je.msg);
        return STK_OK;
    }
    for (unsigned k = 0; k < nv; k++)
        if (!mul_ok(want, var[k], &want)) want = UINT64_MAX;
    if (want != v->size)
        return stk_error_set(err, STK_E_ARG,
                             "%s: record %llu, field '%s': value is %llu bytes, its shape needs %llu",
                             w->path, rec, fd->name, (unsigned long long)v->size, (unsigned long long)want);
    return STK_OK;
}

/* Check every value and make room for all of them before copying any, so a
 * refused record leaves the writer as it was. var: the array fields'
 * per-record dims, STK_MAX_DIMS per field. */
static int prepare(stk_writer *w, const stk_value *v, const uint64_t *dims, uint64_t *var, stk_error *err)
{
    const stk_schema *s = &w->schema;
    for (uint32_t f = 0; f < s->nfields; f++) {
        const stk_field *fd = &s->fields[f];
        if (!v[f].data && v[f].size)
            return stk_error_set(err, STK_E_ARG, "%s: record %llu, field '%s': NULL data", w->path,
                                 (unsigned long long)w->records, fd->name);
        int rc =
            fd->kind == STK_KIND_ARRAY ? array_dims(w, fd, &v[f], &dims, var + f * STK_MAX_DIMS, err) : 0;
        if (rc) return rc;
        if (fd->kind == STK_KIND_TENSOR && v[f].size != stk_field_stride(fd))
            return stk_error_set(err, STK_E_ARG,
                                 "%s: record %llu, field '%s': value is %llu bytes, expected %llu", w->path,
                                 (unsigned long long)w->records, fd->name, (unsigned long long)v[f].size,
                                 (unsigned long long)stk_field_stride(fd));
        if (v[f].size > SIZE_MAX / 4)
            return stk_error_set(err, STK_E_ARG, "%s: record %llu, field '%s': value too large", w->path,
                                 (unsigned long long)w->records, fd->name);
        buf_t *dst = stk__field_compressed(fd) ? &w->raw[f] : &w->spool[f];
        bool ok = (f == 0 && w->direct) || buf_reserve(dst, (size_t)v[f].size);
        if (ok && stk__field_has_heap(fd)) ok = buf_reserve(&w->offsets[f], 8);
        if (ok && fd->kind == STK_KIND_ARRAY) ok = buf_reserve(&w->dims[f], 8 * stk_field_var_dims(fd));
        if (!ok)
            return stk_error_set(err, STK_E_NOMEM, "%s: out of memory spooling field '%s'", w->path,
                                 fd->name);
    }
    if (!buf_reserve(&w->cksum, 8 * (size_t)s->nfields))
        return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", w->path);
    return STK_OK;
}

/* ------------------------------------------------------------ streaming */

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
    uint8_t *hdr = calloc(1, L.header_size);
    if (!hdr) return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", w->path);
    stk__layout_encode(&L, hdr);
    rc = stk__stream_start(&w->st, w->fd, w->path, w->tmp, hdr, L.header_size, L.region[0].data_off, err);
    free(hdr);
    if (w->st) stk__stream_sink(w->st, w->sink);
    return rc;
}

void stk_writer_io_stats_into(stk_writer *w, stk_writer_io_stats *sink)
{
    if (!w) return;
    w->sink = sink;
    if (w->st) stk__stream_sink(w->st, sink);
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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
        if (w->spool[f].len) memcpy(t + (L->region[f].data_off - from), w->spool[f].p, w->spool[f].len);
    memcpy(t + (L->cksum_off - from), w->cksum.p, w->cksum.len);
    memcpy(t + n - STK_FOOTER_SIZE, foot, STK_FOOTER_SIZE);
    *out = stk__stream_digest(w->st, t, n);
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
    if (w->st) { /* a stream error is sticky: the writer is done */
        if (done && stk__stream_can_lend(w->st, v0->data, n)) {
            rc = stk__stream_lend(w->st, v0->data, n, pre ? pre->sums : NULL, done, ctx, err);
            *lent = rc == STK_OK;
        } else {
            rc = stk__stream_copy(w->st, v0->data, n, err);
        }
        return rc ? (w->failed = rc) : STK_OK;
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
        if (n) memcpy(w->direct_buf.p + w->direct_buf.len, v0->data, n); /* an empty value may be NULL */
        w->direct_buf.len += n;
    }
    return STK_OK;
}

static int append(stk_writer *w, const stk_value *v, const uint64_t *dims, const stk_prehash *pre,
                  stk_lent_done_fn done, void *ctx, bool *lent, stk_error *err)
{
    if (!w || !v) return stk_error_set(err, STK_E_ARG, "stk_writer_append: NULL argument");
    if (w->failed) return stk_error_set(err, w->failed, "%s: an earlier write failed", w->path);
    uint64_t var[STK_MAX_FIELDS * STK_MAX_DIMS];
    int rc = prepare(w, v, dims, var, err);
    if (rc) return rc;
    const stk_schema *s = &w->schema;
    if (w->direct && (rc = append_field0(w, &v[0], pre, done, ctx, lent, err))) return rc;
    for (uint32_t f = 0; f < s->nfields; f++) {
        uint64_t h = f == 0 && pre ? pre->hash : stk_hash(v[f].data ? v[f].data : "", (size_t)v[f].size);
        wr64(w->cksum.p + w->cksum.len, h);
        w->cksum.len += 8;
        bool z = stk__field_compressed(&s->fields[f]), on_disk = f == 0 && w->direct;
        buf_t *dst = z ? &w->raw[f] : &w->spool[f];
        if (v[f].size && !on_disk) memcpy(dst->p + dst->len, v[f].data, (size_t)v[f].size);
        if (!on_disk) dst->len += (size_t)v[f].size;
        w->raw_total[f] += z || on_disk ? v[f].size : 0; /* a streamed heap: its length so far */
        if (stk__field_has_heap(&s->fields[f])) {
            wr64(w->offsets[f].p + w->offsets[f].len, z || on_disk ? w->raw_total[f] : w->spool[f].len);
            w->offsets[f].len += 8;
        }
        for (unsigned k = 0; k < stk_field_var_dims(&s->fields[f]); k++) {
            wr64(w->dims[f].p + w->dims[f].len, var[f * STK_MAX_DIMS + k]);
            w->dims[f].len += 8;
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
    return append(w, v, NULL, NULL, NULL, NULL, &lent, err);
}

int stk_writer_append_dims(stk_writer *w, const stk_value *v, const uint64_t *dims, stk_error *err)
{
    bool lent = false;
    if (!dims) return stk_error_set(err, STK_E_ARG, "stk_writer_append_dims: NULL dims");
    return append(w, v, dims, NULL, NULL, NULL, &lent, err);
}

int stk_writer_append_lent(stk_writer *w, const stk_value *v, const stk_prehash *pre, stk_lent_done_fn done,
                           void *ctx, stk_error *err)
{
    bool lent = false;
    int rc = append(w, v, NULL, pre, done, ctx, &lent, err);
    if (!lent && done && v) done(ctx, v[0].data);
    return rc;
}

int stk_writer_trust_jpeg(stk_writer *w, int trusted, stk_error *err)
{
    if (!w) return stk_error_set(err, STK_E_ARG, "stk_writer_trust_jpeg: NULL writer");
    w->trust_jpeg = trusted != 0;
    return STK_OK;
}

int stk_writer_compression(stk_writer *w, uint32_t f, int level, uint64_t block_bytes, stk_error *err)
{
    if (!w) return stk_error_set(err, STK_E_ARG, "stk_writer_compression: NULL writer");
    if (w->records)
        return stk_error_set(err, STK_E_ARG, "%s: compression is set before the first record", w->path);
    if (level < 0 || level > ZSTD_maxCLevel())
        return stk_error_set(err, STK_E_ARG, "%s: zstd level %d out of range (1..%d)", w->path, level,
                             ZSTD_maxCLevel());
    if (block_bytes > STK_BLOCK_RAW_MAX / 2)
        return stk_error_set(err, STK_E_ARG, "%s: block size %llu over %llu", w->path,
                             (unsigned long long)block_bytes, (unsigned long long)(STK_BLOCK_RAW_MAX / 2));
    for (uint32_t i = 0; i < w->schema.nfields; i++) {
        if (f != UINT32_MAX && i != f) continue;
        if (!stk__field_compressed(&w->schema.fields[i])) {
            if (f == UINT32_MAX) continue;
            return stk_error_set(err, STK_E_ARG, "%s: field '%s' is not compressed", w->path,
                                 w->schema.fields[i].name);
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
    if (w->records)
        return stk_error_set(err, STK_E_ARG, "%s: threads are set before the first record", w->path);
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
    wr64(w->table[f].p + w->table[f].len, w->records);   /* the next block's first record */
    wr64(w->table[f].p + w->table[f].len + 8, out->len); /* and its frame's offset        */
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
            r->data_len = w->offsets[f].len + w->dims[f].len + (extra ? 8 + 8 * stk_field_var_dims(fd) : 0);
            r->heap_len =
                (f == 0 && w->direct ? w->raw_total[0] : w->spool[f].len) + (extra ? extra[f].size : 0);
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
    if (w->st && (rc = stk__stream_drain(w->st, &w->direct_off, err))) return w->failed = rc;
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
            if (stk__field_has_heap(&w->schema.fields[f]) &&
                ((rc = stk__pwrite_all(w->fd, w->offsets[f].p, w->offsets[f].len, at, w->tmp, err)) ||
                 (rc = stk__pwrite_all(w->fd, w->dims[f].p, w->dims[f].len, at + w->offsets[f].len, w->tmp,
                                       err))))
                return rc;
            at += stk__block_table_at(&w->schema.fields[f], w->records);
            if ((rc = stk__pwrite_all(w->fd, n8, 8, at, w->tmp, err)) ||
                (rc = stk__pwrite_all(w->fd, w->table[f].p, w->table[f].len, at + 8, w->tmp, err)) ||
                (rc = stk__pwrite_all(w->fd, w->spool[f].p, w->spool[f].len, r->heap_off, w->tmp, err)))
                return rc;
        } else if (stk__field_has_heap(&w->schema.fields[f])) {
            if ((rc = stk__pwrite_all(w->fd, w->offsets[f].p, w->offsets[f].len, r->data_off, w->tmp, err)) ||
                (rc = stk__pwrite_all(w->fd, w->dims[f].p, w->dims[f].len, r->data_off + w->offsets[f].len,
                                      w->tmp, err)) ||
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
    bool streamed = w->st && stk__stream_header_is(w->st, hdr, L->header_size);
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
    double t0 = mono_s();
    if (!rc && fsync(w->fd) != 0) rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: fsync failed", w->tmp);
    if (w->sink) w->sink->fsync += mono_s() - t0;
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
