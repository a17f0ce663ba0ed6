/* format/shard.c - open, map and verify one shard.
 *
 * Open is O(1) in the shard's size: one fstat, one mmap, header and footer
 * checks. Nothing per record is read until asked for. The mapping is
 * read-only and shared, so N readers of one file share the page cache; a
 * file truncated under a live mapping would raise SIGBUS on access, which is
 * why writers only ever replace shards by rename (spec/FORMAT.md, "Writing").
 *
 * A remote shard (s3://, https://; rshard.h) is the same struct over its
 * cache file's map: open runs the same checks on the fetched metadata, and
 * every call that reads values asks rshard.c for them first. */
#define _GNU_SOURCE
#include "shard_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

/* f: the file's last STK_FOOTER_SIZE bytes. */
static int check_footer(stk_shard *sh, const uint8_t *f, stk_error *err)
{
    if (memcmp(f + F_MAGIC, STK_FOOTER_MAGIC, 8) != 0)
        return stk_error_set(err, STK_E_FORMAT,
                             "%s: footer magic missing at offset %zu (incomplete or corrupt file)", sh->path,
                             sh->size - STK_FOOTER_SIZE);
    if (rd64(f + F_FILE_SIZE) != sh->L.file_size)
        return stk_error_set(err, STK_E_FORMAT, "%s: footer file size %llu disagrees with the header's %llu",
                             sh->path, (unsigned long long)rd64(f + F_FILE_SIZE),
                             (unsigned long long)sh->L.file_size);
    if (rd64(f + F_RESERVED))
        return stk_error_set(err, STK_E_FORMAT, "%s: footer reserved bytes are not zero", sh->path);
    sh->index_hash = rd64(f + F_INDEX_HASH);
    return STK_OK;
}

/* The first and last entries of every offsets column bound the heap: two
 * reads per bytes field, so the heap is known to be covered exactly. */
/* A compressed field's block table (spec 4.12), entry k = (first record,
 * frame offset): starts at (0, 0), ends at (records, heap_len), records
 * strictly increase (no empty block), offsets strictly increase (no empty
 * frame), and no block's tensor values exceed STK_BLOCK_RAW_MAX. O(blocks):
 * 16 bytes per (typically 1 MiB) block. */
static int check_blocks(const stk_shard *sh, uint32_t f, stk_error *err)
{
    const stk_field *fd = &sh->L.schema.fields[f];
    const stk__region *r = &sh->L.region[f];
    const uint8_t *t = sh->map + r->data_off + stk__block_table_at(fd, sh->L.records);
    uint64_t nb = rd64(t), room = (r->data_len - stk__block_table_at(fd, sh->L.records) - 8) / 16;
    if (nb + 1 != room || (nb == 0) != (sh->L.records == 0))
        return stk_error_set(err, STK_E_FORMAT,
                             "%s: field '%s': block table says %llu blocks, its region holds %llu", sh->path,
                             fd->name, (unsigned long long)nb, (unsigned long long)(room ? room - 1 : 0));
    for (uint64_t k = 0; k <= nb; k++) {
        uint64_t rs = rd64(t + 8 + 16 * k), fo = rd64(t + 16 + 16 * k);
        uint64_t prs = k ? rd64(t + 8 + 16 * (k - 1)) : 0, pfo = k ? rd64(t + 16 + 16 * (k - 1)) : 0;
        bool ok = k == 0 ? rs == 0 && fo == 0 : rs > prs && fo > pfo;
        if (ok && k == nb) ok = rs == sh->L.records && fo == r->heap_len;
        if (ok && k && fd->kind == STK_KIND_TENSOR) ok = (rs - prs) <= STK_BLOCK_RAW_MAX / r->stride;
        if (!ok)
            return stk_error_set(err, STK_E_FORMAT,
                                 "%s: field '%s': block table entry %llu (record %llu, frame offset "
                                 "%llu) is out of order or out of bounds",
                                 sh->path, fd->name, (unsigned long long)k, (unsigned long long)rs,
                                 (unsigned long long)fo);
    }
    return STK_OK;
}

static int check_heaps(const stk_shard *sh, stk_error *err)
{
    for (uint32_t f = 0; f < sh->L.schema.nfields; f++) {
        const stk__region *r = &sh->L.region[f];
        if (stk__field_compressed(&sh->L.schema.fields[f])) {
            int rc = check_blocks(sh, f, err);
            if (rc) return rc;
            if (stk__field_has_heap(&sh->L.schema.fields[f]) && rd64(sh->map + r->data_off) != 0)
                return stk_error_set(err, STK_E_FORMAT, "%s: field '%s': offsets column does not start at 0",
                                     sh->path, sh->L.schema.fields[f].name);
            continue;
        }
        if (!stk__field_has_heap(&sh->L.schema.fields[f])) continue;
        const uint8_t *col = sh->map + r->data_off;
        if (rd64(col) != 0 || rd64(col + 8 * sh->L.records) != r->heap_len)
            return stk_error_set(
                err, STK_E_FORMAT,
                "%s: field '%s': offsets column does not span the %llu-byte heap (first %llu, last %llu)",
                sh->path, sh->L.schema.fields[f].name, (unsigned long long)r->heap_len,
                (unsigned long long)rd64(col), (unsigned long long)rd64(col + 8 * sh->L.records));
    }
    return STK_OK;
}

/* head: the first head_len bytes of the file (the map, or a copy read by
 * stk_shard_open); foot: its last STK_FOOTER_SIZE bytes. */
static stk_shard *finish_open(stk_shard *sh, const uint8_t *head, size_t head_len, const uint8_t *foot,
                              stk_error *err)
{
    int rc = stk__layout_decode(head, head_len, sh->size, sh->path, &sh->L, err);
    if (rc == STK_E_TRUNCATED && head != sh->map) /* a header longer than the copy (a later minor version) */
        rc = stk__layout_decode(sh->map, sh->size, sh->size, sh->path, &sh->L, err);
    if (rc || check_footer(sh, foot, err) || check_heaps(sh, err)) {
        stk_shard_close(sh);
        return NULL;
    }
    return sh;
}

/* Read n bytes at off; 0 unless all of them came. */
static int read_at(int fd, uint8_t *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, buf + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return 0;
        got += (size_t)k;
    }
    return 1;
}

/* Header and footer are read with pread rather than through the fresh map:
 * a first touch of a mapping is a page fault (and fault-around of its
 * neighbours), several times a pread's cost, and opening a dataset of
 * thousands of shards is mostly that (bench/README "Warm reads"). This
 * build's headers (32 fields at most) fit in OPEN_HEAD. */
#define OPEN_HEAD 8192u

stk_shard *stk_shard_open(const char *path, stk_error *err)
{
    if (!path) return stk_error_set(err, STK_E_ARG, "stk_shard_open: NULL path"), NULL;
    stk_shard *sh = calloc(1, sizeof *sh);
    if (!sh || !(sh->path = strdup(path))) {
        free(sh);
        return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", path), NULL;
    }
    /* O_NONBLOCK: a FIFO planted at the path must not hang open(). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        stk__error_set_errno(err, STK_E_IO, errno, "%s: cannot open", path);
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        stk_error_set(err, STK_E_IO, "%s: not a regular file", path);
        goto fail;
    }
    if ((uint64_t)st.st_size < STK_HEADER_FIXED) {
        stk_error_set(err, STK_E_TRUNCATED, "%s: file is %lld bytes, shorter than the %u-byte shard header",
                      path, (long long)st.st_size, STK_HEADER_FIXED);
        goto fail;
    }
    sh->size = (size_t)st.st_size;
    sh->dev = (uint64_t)st.st_dev;
    sh->ino = (uint64_t)st.st_ino;
    void *m = mmap(NULL, sh->size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        stk__error_set_errno(err, STK_E_IO, errno, "%s: mmap failed", path);
        goto fail;
    }
    sh->map = m;
    sh->owns_map = true;
    uint8_t head[OPEN_HEAD], foot[STK_FOOTER_SIZE];
    size_t hn = sh->size < OPEN_HEAD ? sh->size : OPEN_HEAD;
    const uint8_t *h = read_at(fd, head, hn, 0) ? head : sh->map;
    const uint8_t *f = read_at(fd, foot, STK_FOOTER_SIZE, sh->size - STK_FOOTER_SIZE)
                           ? foot
                           : sh->map + sh->size - STK_FOOTER_SIZE;
    close(fd);
    return finish_open(sh, h, h == head ? hn : sh->size, f, err);
fail:
    if (fd >= 0) close(fd);
    free(sh->path);
    free(sh);
    return NULL;
}

stk_shard *stk_shard_open_memory(const void *data, size_t len, const char *name, stk_error *err)
{
    if (!data && len) return stk_error_set(err, STK_E_ARG, "stk_shard_open_memory: NULL data"), NULL;
    if (!name) name = "<memory>";
    stk_shard *sh = calloc(1, sizeof *sh);
    if (!sh || !(sh->path = strdup(name))) {
        free(sh);
        return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", name), NULL;
    }
    sh->map = data;
    sh->size = len;
    if (len < STK_HEADER_FIXED) {
        stk_error_set(err, STK_E_TRUNCATED, "%s: %zu bytes, shorter than the %u-byte shard header", name, len,
                      STK_HEADER_FIXED);
        stk_shard_close(sh);
        return NULL;
    }
    return finish_open(sh, sh->map, len, sh->map + len - STK_FOOTER_SIZE, err);
}

/* A remote shard (rshard.h): the same checks over its cache file's map, whose
 * metadata ranges rshard.c has fetched. */
stk_shard *stk__rshard_open(stk__remote *r, stk__rcache *c, const char *key, const char *name, uint64_t size,
                            uint64_t index_hash, uint64_t records, unsigned nfields, const char *etag,
                            stk__rwindow *w, stk_error *err)
{
    if (!r || !c || !key || !name)
        return stk_error_set(err, STK_E_ARG, "stk__rshard_open: NULL argument"), NULL;
    stk_shard *sh = calloc(1, sizeof *sh);
    if (!sh || !(sh->path = strdup(name))) {
        free(sh);
        return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", name), NULL;
    }
    if (size < STK_HEADER_FIXED + STK_FOOTER_SIZE || size > SIZE_MAX) {
        stk_error_set(err, STK_E_TRUNCATED, "%s: %llu bytes, shorter than a shard's header and footer", name,
                      (unsigned long long)size);
        stk_shard_close(sh);
        return NULL;
    }
    sh->size = (size_t)size;
    size_t head_len = 0;
    if (stk__rshard_attach(sh, r, c, key, index_hash, records, nfields, etag, w, &head_len, err)) {
        stk_shard_close(sh);
        return NULL;
    }
    return finish_open(sh, sh->map, head_len, sh->map + sh->size - STK_FOOTER_SIZE, err);
}

int stk__shard_is_remote(const stk_shard *sh) { return sh && sh->remote; }

void stk_shard_close(stk_shard *sh)
{
    if (!sh) return;
    if (sh->owns_map && sh->map) munmap((void *)sh->map, sh->size);
    stk__rshard_free(sh->remote);
    free(sh->path);
    free(sh);
}

const char *stk_shard_path(const stk_shard *sh) { return sh->path; }
const stk_schema *stk_shard_schema(const stk_shard *sh) { return &sh->L.schema; }
uint64_t stk_shard_records(const stk_shard *sh) { return sh->L.records; }
uint64_t stk_shard_file_size(const stk_shard *sh) { return sh->L.file_size; }
uint64_t stk_shard_index_hash(const stk_shard *sh) { return sh->index_hash; }
void stk_shard_file_id(const stk_shard *sh, uint64_t *dev, uint64_t *ino)
{
    *dev = sh->dev;
    *ino = sh->ino;
}
int stk_shard_advise_huge(const stk_shard *sh)
{
#ifdef MADV_HUGEPAGE
    return sh->owns_map && madvise((void *)sh->map, sh->size, MADV_HUGEPAGE) == 0;
#else
    (void)sh;
    return 0;
#endif
}
void stk_shard_version(const stk_shard *sh, unsigned *major, unsigned *minor)
{
    if (major) *major = sh->L.major;
    if (minor) *minor = sh->L.minor;
}

const void *stk_shard_field_base(const stk_shard *sh, unsigned f)
{
    if (f >= sh->L.schema.nfields || sh->L.schema.fields[f].kind != STK_KIND_TENSOR ||
        stk__field_compressed(&sh->L.schema.fields[f]))
        return NULL;
    return sh->map + sh->L.region[f].data_off;
}

uint64_t stk_shard_field_offset(const stk_shard *sh, unsigned f)
{
    return stk_shard_field_base(sh, f) ? sh->L.region[f].data_off : 0;
}

uint64_t stk_shard_stored_hash(const stk_shard *sh, unsigned f, uint64_t i)
{
    if (f >= sh->L.schema.nfields || i >= sh->L.records) return 0;
    return rd64(sh->map + sh->L.cksum_off + (i * sh->L.schema.nfields + f) * 8);
}

/* Record i's per-record dims of array field f (stk_field_var_dims of them). */
static void var_dims(const stk_shard *sh, unsigned f, uint64_t i, uint64_t *var)
{
    const stk_field *fd = &sh->L.schema.fields[f];
    unsigned nv = stk_field_var_dims(fd);
    const uint8_t *col = sh->map + sh->L.region[f].data_off + (sh->L.records + 1) * 8 + i * nv * 8;
    for (unsigned k = 0; k < nv; k++) var[k] = rd64(col + 8 * k);
}

/* An array value of `size` bytes (not JPEG) must hold exactly its shape's
 * elements; on a mismatch, explain in `what`. */
static int check_array_size(const stk_shard *sh, unsigned f, uint64_t i, uint64_t size, char *what,
                            size_t cap)
{
    const stk_field *fd = &sh->L.schema.fields[f];
    uint64_t var[STK_MAX_DIMS], want = stk__array_item(fd);
    unsigned nv = stk_field_var_dims(fd);
    var_dims(sh, f, i, var);
    bool ok = true;
    for (unsigned k = 0; k < nv; k++) ok = ok && mul_ok(want, var[k], &want);
    if (ok && want == size) return STK_OK;
    int n = snprintf(what, cap, "value of %llu bytes does not hold its shape (", (unsigned long long)size);
    for (unsigned k = 0; k < nv && n > 0 && (size_t)n < cap; k++)
        n += snprintf(what + n, cap - (size_t)n, "%s%llu", k ? " x " : "", (unsigned long long)var[k]);
    if (n > 0 && (size_t)n < cap)
        snprintf(what + n, cap - (size_t)n, " x %llu bytes)", (unsigned long long)stk__array_item(fd));
    return STK_E_FORMAT;
}

/* Locate field f of record i; on bad offsets, explain in `what`. */
static int locate(const stk_shard *sh, unsigned f, uint64_t i, const uint8_t **data, uint64_t *size,
                  char *what, size_t cap)
{
    const stk__region *r = &sh->L.region[f];
    if (stk__field_compressed(&sh->L.schema.fields[f])) {
        snprintf(what, cap, "the field is compressed (zstd): read it by blocks or through the reader");
        return STK_E_UNSUPPORTED;
    }
    if (sh->L.schema.fields[f].kind == STK_KIND_TENSOR) {
        *data = sh->map + r->data_off + i * r->stride;
        *size = r->stride;
        return STK_OK;
    }
    const uint8_t *col = sh->map + r->data_off;
    uint64_t a = rd64(col + 8 * i), b = rd64(col + 8 * (i + 1));
    if (i == 0 && a != 0) {
        snprintf(what, cap, "first offset is %llu, not 0", (unsigned long long)a);
        return STK_E_FORMAT;
    }
    if (a > b || b > r->heap_len) {
        snprintf(what, cap, "offsets [%llu, %llu) are not an increasing range inside the %llu-byte heap",
                 (unsigned long long)a, (unsigned long long)b, (unsigned long long)r->heap_len);
        return STK_E_FORMAT;
    }
    if (i + 1 == sh->L.records && b != r->heap_len) {
        snprintf(what, cap, "last offset %llu does not end the %llu-byte heap", (unsigned long long)b,
                 (unsigned long long)r->heap_len);
        return STK_E_FORMAT;
    }
    *data = sh->map + r->heap_off + a;
    *size = b - a;
    const stk_field *fd = &sh->L.schema.fields[f];
    return fd->kind == STK_KIND_ARRAY && fd->codec != STK_CODEC_JPEG
               ? check_array_size(sh, f, i, *size, what, cap)
               : STK_OK;
}

/* STK_E_RANGE unless field f and record i are in the shard. */
static int check_index(const stk_shard *sh, unsigned f, uint64_t i, stk_error *err)
{
    if (f >= sh->L.schema.nfields)
        return stk_error_set(err, STK_E_RANGE, "%s: field %u out of range (%u fields)", sh->path, f,
                             sh->L.schema.nfields);
    if (i >= sh->L.records)
        return stk_error_set(err, STK_E_RANGE, "%s: record %llu out of range (%llu records)", sh->path,
                             (unsigned long long)i, (unsigned long long)sh->L.records);
    return STK_OK;
}

/* A remote shard's value (located at p, size bytes) made present in its
 * cache file. Bytes already there are checked against the checksum table as
 * they are taken (another process stored them; a disk may have damaged
 * them): a mismatch forgets them and fetches again. Fetched bytes are
 * checked on arrival (rshard.c). */
static int remote_value(const stk_shard *sh, unsigned f, uint64_t i, const uint8_t *p, uint64_t size,
                        stk_error *err)
{
    if (size == 0) return STK_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!stk__rshard_present(sh, f, i, 1, 0)) {
            int rc = stk__rshard_fetch_value(sh, f, i, 0, err);
            if (rc || stk__rshard_present(sh, f, i, 1, 0)) return rc;
        }
        if (stk_hash(p, (size_t)size) == stk_shard_stored_hash(sh, f, i)) return STK_OK;
        stk__rshard_forget(sh, f, i, 1, 0);
    }
    return stk_error_set(err, STK_E_CHECKSUM,
                         "%s: record %llu, field '%s': the cached value fails its checksum after a refetch",
                         sh->path, (unsigned long long)i, sh->L.schema.fields[f].name);
}

/* msg without the "PATH: record I, field 'NAME': " that the verify
 * callbacks add themselves. */
static const char *problem_tail(const stk_shard *sh, unsigned f, uint64_t i, const char *msg)
{
    char pre[STK_ERROR_MSG_MAX];
    int n = snprintf(pre, sizeof pre, "%s: record %llu, field '%s': ", sh->path, (unsigned long long)i,
                     sh->L.schema.fields[f].name);
    return n > 0 && strncmp(msg, pre, (size_t)n) == 0 ? msg + n : msg;
}

int stk_shard_value(const stk_shard *sh, unsigned f, uint64_t i, const void **data, uint64_t *size,
                    stk_error *err)
{
    int rc = check_index(sh, f, i, err);
    if (rc) return rc;
    char what[160];
    const uint8_t *p;
    rc = locate(sh, f, i, &p, size, what, sizeof what);
    if (rc)
        return stk_error_set(err, rc, "%s: record %llu, field '%s': %s", sh->path, (unsigned long long)i,
                             sh->L.schema.fields[f].name, what);
    if (sh->remote && (rc = remote_value(sh, f, i, p, *size, err))) return rc;
    *data = p;
    return STK_OK;
}

int stk_shard_value_shape(const stk_shard *sh, unsigned f, uint64_t i, uint64_t dims[STK_MAX_DIMS],
                          stk_error *err)
{
    int rc = check_index(sh, f, i, err);
    if (rc) return rc;
    const stk_field *fd = &sh->L.schema.fields[f];
    uint64_t var[STK_MAX_DIMS];
    unsigned v = 0;
    if (fd->kind == STK_KIND_ARRAY) var_dims(sh, f, i, var);
    for (unsigned d = 0; d < fd->ndim && d < STK_MAX_DIMS; d++)
        dims[d] = fd->kind == STK_KIND_ARRAY && fd->shape[d] == 0 ? var[v++] : fd->shape[d];
    if (fd->kind != STK_KIND_ARRAY || stk__field_compressed(fd)) return STK_OK;
    /* The offsets and dims agree (no value bytes read: a remote shard fetches none). */
    const uint8_t *p;
    uint64_t size;
    char what[160];
    int lc = locate(sh, f, i, &p, &size, what, sizeof what);
    if (lc)
        return stk_error_set(err, lc, "%s: record %llu, field '%s': %s", sh->path, (unsigned long long)i,
                             sh->L.schema.fields[f].name, what);
    return STK_OK;
}

int stk_shard_verify_index(const stk_shard *sh, uint64_t expect, stk_error *err)
{
    stk__hasher *h = stk__hasher_new();
    if (!h) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    stk__hasher_update(h, sh->map, sh->L.header_size);
    stk__hasher_update(h, sh->map + sh->L.cksum_off, (size_t)sh->L.cksum_len);
    uint64_t got = stk__hasher_digest(h);
    stk__hasher_free(h);
    if (got != sh->index_hash)
        return stk_error_set(err, STK_E_CHECKSUM,
                             "%s: checksum table corrupt: footer hash %016llx, computed %016llx", sh->path,
                             (unsigned long long)sh->index_hash, (unsigned long long)got);
    if (expect && expect != sh->index_hash)
        return stk_error_set(
            err, STK_E_MANIFEST,
            "%s: index hash %016llx differs from the manifest's %016llx (a different or replaced shard)",
            sh->path, (unsigned long long)sh->index_hash, (unsigned long long)expect);
    return STK_OK;
}

/* Ask the kernel to start reading records [first, first+n) of every field. */
static void prefetch(const stk_shard *sh, uint64_t first, uint64_t n)
{
    if (!sh->owns_map || n == 0) return;
    uintptr_t page = 4096;
    for (uint32_t f = 0; f < sh->L.schema.nfields; f++) {
        const stk__region *r = &sh->L.region[f];
        uint64_t off, len;
        if (stk__field_compressed(&sh->L.schema.fields[f])) continue; /* blocks are read whole */
        if (sh->L.schema.fields[f].kind == STK_KIND_TENSOR) {
            off = r->data_off + first * r->stride, len = n * r->stride;
        } else { /* the heap span is not known without reading offsets: take the column */
            off = r->data_off + first * 8, len = (n + 1) * 8;
        }
        uintptr_t a = (uintptr_t)(sh->map + off) & ~(page - 1);
        madvise((void *)a, (size_t)((uintptr_t)(sh->map + off) - a + len), MADV_WILLNEED);
    }
}

/* ------------------------------------------------------ compressed fields */

static const uint8_t *block_table(const stk_shard *sh, unsigned f)
{
    return sh->map + sh->L.region[f].data_off + stk__block_table_at(&sh->L.schema.fields[f], sh->L.records);
}

static int need_compressed(const stk_shard *sh, unsigned f, stk_error *err)
{
    if (f >= sh->L.schema.nfields)
        return stk_error_set(err, STK_E_RANGE, "%s: field %u out of range (%u fields)", sh->path, f,
                             sh->L.schema.nfields);
    if (!stk__field_compressed(&sh->L.schema.fields[f]))
        return stk_error_set(err, STK_E_ARG, "%s: field '%s' is not compressed", sh->path,
                             sh->L.schema.fields[f].name);
    return STK_OK;
}

uint64_t stk_shard_nblocks(const stk_shard *sh, unsigned f)
{
    if (f >= sh->L.schema.nfields || !stk__field_compressed(&sh->L.schema.fields[f])) return 0;
    return rd64(block_table(sh, f));
}

int stk_shard_block_find(const stk_shard *sh, unsigned f, uint64_t i, uint64_t *block, stk_error *err)
{
    int rc = need_compressed(sh, f, err);
    if (rc) return rc;
    if (i >= sh->L.records)
        return stk_error_set(err, STK_E_RANGE, "%s: record %llu out of range (%llu records)", sh->path,
                             (unsigned long long)i, (unsigned long long)sh->L.records);
    const uint8_t *t = block_table(sh, f) + 8;
    uint64_t lo = 0, hi = rd64(t - 8); /* first[lo] <= i < first[hi] (checked at open) */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (rd64(t + 16 * mid) <= i) lo = mid;
        else hi = mid;
    }
    *block = lo;
    return STK_OK;
}

/* Uncompressed size of block b: tensors count x stride; bytes fields the
 * span of the offsets column, checked against its neighbours here. */
static int raw_size(const stk_shard *sh, unsigned f, uint64_t first, uint64_t end, uint64_t *raw,
                    stk_error *err)
{
    const stk_field *fd = &sh->L.schema.fields[f];
    if (fd->kind == STK_KIND_TENSOR) {
        *raw = (end - first) * sh->L.region[f].stride; /* <= STK_BLOCK_RAW_MAX: checked at open */
        return STK_OK;
    }
    const uint8_t *col = sh->map + sh->L.region[f].data_off;
    uint64_t a = rd64(col + 8 * first), b = rd64(col + 8 * end);
    if (b < a || b - a > STK_BLOCK_RAW_MAX)
        return stk_error_set(err, STK_E_FORMAT,
                             "%s: field '%s': offsets %llu..%llu of records %llu..%llu are not a "
                             "block of at most 1 GiB",
                             sh->path, fd->name, (unsigned long long)a, (unsigned long long)b,
                             (unsigned long long)first, (unsigned long long)end);
    *raw = b - a;
    return STK_OK;
}

int stk_shard_block_info(const stk_shard *sh, unsigned f, uint64_t block, uint64_t *first, uint64_t *count,
                         uint64_t *raw_bytes, uint64_t *packed_bytes, stk_error *err)
{
    int rc = need_compressed(sh, f, err);
    if (rc) return rc;
    const uint8_t *t = block_table(sh, f);
    if (block >= rd64(t))
        return stk_error_set(err, STK_E_RANGE, "%s: field '%s': block %llu out of range (%llu blocks)",
                             sh->path, sh->L.schema.fields[f].name, (unsigned long long)block,
                             (unsigned long long)rd64(t));
    uint64_t a = rd64(t + 8 + 16 * block), b = rd64(t + 8 + 16 * (block + 1)), raw = 0;
    if ((rc = raw_size(sh, f, a, b, &raw, err))) return rc;
    if (first) *first = a;
    if (count) *count = b - a;
    if (raw_bytes) *raw_bytes = raw;
    if (packed_bytes) *packed_bytes = rd64(t + 16 + 16 * (block + 1)) - rd64(t + 16 + 16 * block);
    return STK_OK;
}

int stk_shard_block_span(const stk_shard *sh, unsigned f, uint64_t block, uint64_t *file_off,
                         uint64_t *packed_bytes, stk_error *err)
{
    uint64_t packed;
    int rc = stk_shard_block_info(sh, f, block, NULL, NULL, NULL, &packed, err);
    if (rc) return rc;
    if (file_off) *file_off = sh->L.region[f].heap_off + rd64(block_table(sh, f) + 16 + 16 * block);
    if (packed_bytes) *packed_bytes = packed;
    return STK_OK;
}

int stk_shard_block_decode(const stk_shard *sh, unsigned f, uint64_t block, const void *src, void *dst,
                           uint64_t cap, stk_error *err)
{
    uint64_t first, count, raw, packed;
    int rc = stk_shard_block_info(sh, f, block, &first, &count, &raw, &packed, err);
    if (rc) return rc;
    if (cap < raw)
        return stk_error_set(err, STK_E_ARG, "%s: block %llu needs %llu bytes, %llu given", sh->path,
                             (unsigned long long)block, (unsigned long long)raw, (unsigned long long)cap);
    size_t got = ZSTD_decompress(dst, (size_t)raw, src, (size_t)packed);
    if (ZSTD_isError(got) || got != raw)
        return stk_error_set(err, STK_E_FORMAT,
                             "%s: field '%s', block %llu (records %llu..%llu): the zstd frame %s", sh->path,
                             sh->L.schema.fields[f].name, (unsigned long long)block,
                             (unsigned long long)first, (unsigned long long)(first + count - 1),
                             ZSTD_isError(got) ? ZSTD_getErrorName(got) : "decompresses to a different size");
    return STK_OK;
}

int stk_shard_block_read(const stk_shard *sh, unsigned f, uint64_t block, void *dst, uint64_t cap,
                         stk_error *err)
{
    uint64_t off;
    int rc = stk_shard_block_span(sh, f, block, &off, NULL, err);
    if (rc || !sh->remote)
        return rc ? rc : stk_shard_block_decode(sh, f, block, sh->map + off, dst, cap, err);
    /* Remote: the frame fetched first (checked as it arrives); a cached frame
     * that does not decode is forgotten and fetched once more. */
    for (int attempt = 0;; attempt++) {
        if (!stk__rshard_present(sh, f, block, 1, 1) && (rc = stk__rshard_fetch_value(sh, f, block, 1, err)))
            return rc;
        rc = stk_shard_block_decode(sh, f, block, sh->map + off, dst, cap, err);
        if (rc != STK_E_FORMAT || attempt) return rc;
        stk__rshard_forget(sh, f, block, 1, 1);
    }
}

int stk_shard_block_value(const stk_shard *sh, unsigned f, uint64_t block, const void *raw, uint64_t i,
                          const void **data, uint64_t *size, stk_error *err)
{
    uint64_t first, count;
    int rc = stk_shard_block_info(sh, f, block, &first, &count, NULL, NULL, err);
    if (rc) return rc;
    if (i < first || i - first >= count)
        return stk_error_set(err, STK_E_RANGE, "%s: record %llu is not in block %llu", sh->path,
                             (unsigned long long)i, (unsigned long long)block);
    if (sh->L.schema.fields[f].kind == STK_KIND_TENSOR) {
        *size = sh->L.region[f].stride;
        *data = (const uint8_t *)raw + (i - first) * *size;
        return STK_OK;
    }
    const uint8_t *col = sh->map + sh->L.region[f].data_off;
    uint64_t base = rd64(col + 8 * first), a = rd64(col + 8 * i), b = rd64(col + 8 * (i + 1));
    if (a < base || b < a || b > rd64(col + 8 * (first + count)))
        return stk_error_set(err, STK_E_FORMAT,
                             "%s: record %llu, field '%s': offsets [%llu, %llu) are not an increasing "
                             "range inside its block",
                             sh->path, (unsigned long long)i, sh->L.schema.fields[f].name,
                             (unsigned long long)a, (unsigned long long)b);
    *data = (const uint8_t *)raw + (a - base);
    *size = b - a;
    char what[160];
    if (sh->L.schema.fields[f].kind == STK_KIND_ARRAY && check_array_size(sh, f, i, *size, what, sizeof what))
        return stk_error_set(err, STK_E_FORMAT, "%s: record %llu, field '%s': %s", sh->path,
                             (unsigned long long)i, sh->L.schema.fields[f].name, what);
    return STK_OK;
}

int stk_shard_value_at(const stk_shard *sh, unsigned f, uint64_t i, stk_block_cursor *c, const void **data,
                       uint64_t *size, stk_error *err)
{
    if (f >= sh->L.schema.nfields || !stk__field_compressed(&sh->L.schema.fields[f]))
        return stk_shard_value(sh, f, i, data, size, err);
    uint64_t b, raw;
    int rc = stk_shard_block_find(sh, f, i, &b, err);
    if (rc) return rc;
    if (!(c->valid && c->shard == sh && c->field == f && c->block == b)) {
        c->valid = 0;
        if ((rc = stk_shard_block_info(sh, f, b, NULL, NULL, &raw, NULL, err))) return rc;
        if (raw + 1 > c->cap) {
            uint8_t *p = realloc(c->raw, raw + 1);
            if (!p)
                return stk_error_set(err, STK_E_NOMEM, "out of memory for a %llu-byte block",
                                     (unsigned long long)raw);
            c->raw = p;
            c->cap = raw + 1;
        }
        if ((rc = stk_shard_block_read(sh, f, b, c->raw, c->cap, err))) return rc;
        c->shard = sh;
        c->field = f;
        c->block = b;
        c->valid = 1;
    }
    return stk_shard_block_value(sh, f, b, c->raw, i, data, size, err);
}

void stk_block_cursor_free(stk_block_cursor *c)
{
    if (!c) return;
    free(c->raw);
    memset(c, 0, sizeof *c);
}

/* Verify records [first, end) of compressed field f block by block: every
 * block touching the range is decompressed once. */
static uint64_t verify_blocks(const stk_shard *sh, uint32_t f, uint64_t first, uint64_t end,
                              stk_problem_fn fn, void *user)
{
    if (first >= end) return 0;
    uint64_t problems = 0, b0, b1, cap = 0;
    void *raw = NULL;
    if (stk_shard_block_find(sh, f, first, &b0, NULL) || stk_shard_block_find(sh, f, end - 1, &b1, NULL))
        return 0;
    for (uint64_t b = b0; b <= b1; b++) {
        stk_error e;
        uint64_t bf, bn, rb;
        int rc = stk_shard_block_info(sh, f, b, &bf, &bn, &rb, NULL, &e);
        if (!rc && rb > cap) {
            free(raw);
            cap = rb;
            if (!(raw = malloc(cap ? cap : 1)))
                rc = stk_error_set(&e, STK_E_NOMEM, "out of memory for block %llu", (unsigned long long)b);
        }
        if (!rc) rc = stk_shard_block_read(sh, f, b, raw, cap, &e);
        uint64_t lo = bf > first ? bf : first, hi = bf + bn < end ? bf + bn : end;
        if (rc) { /* one problem for the block, at its first record in range */
            problems++;
            if (fn) fn(user, sh, lo, (int)f, rc, strstr(e.msg, "block") ? strstr(e.msg, "block") : e.msg);
            continue;
        }
        for (uint64_t i = lo; i < hi; i++) {
            const void *p;
            uint64_t size;
            char what[200];
            if ((rc = stk_shard_block_value(sh, f, b, raw, i, &p, &size, &e))) {
                snprintf(what, sizeof what, "%.190s", e.msg);
            } else {
                uint64_t want = stk_shard_stored_hash(sh, f, i), got = stk_hash(p, (size_t)size);
                if (got == want) continue;
                rc = STK_E_CHECKSUM;
                snprintf(what, sizeof what,
                         "checksum mismatch in block %llu (stored %016llx, computed %016llx)",
                         (unsigned long long)b, (unsigned long long)want, (unsigned long long)got);
            }
            problems++;
            if (fn) fn(user, sh, i, (int)f, rc, what);
        }
    }
    free(raw);
    return problems;
}

/* A JPEG value's frame header must give the record's stored shape. */
static int check_jpeg(const stk_shard *sh, unsigned f, uint64_t i, const uint8_t *p, uint64_t size,
                      char *what, size_t cap)
{
    uint64_t var[STK_MAX_DIMS];
    uint32_t h, w;
    unsigned c;
    var_dims(sh, f, i, var);
    if (!stk__jpeg_dims(p, size, &h, &w, &c)) {
        snprintf(what, cap, "the %llu-byte value is not a JPEG stream with a frame header",
                 (unsigned long long)size);
        return STK_E_FORMAT;
    }
    if (h != var[0] || w != var[1] || c != sh->L.schema.fields[f].shape[2]) {
        snprintf(what, cap, "JPEG frame is %ux%u with %u components, the record says %llux%llu with %llu", h,
                 w, c, (unsigned long long)var[0], (unsigned long long)var[1],
                 (unsigned long long)sh->L.schema.fields[f].shape[2]);
        return STK_E_FORMAT;
    }
    return STK_OK;
}

uint64_t stk_shard_verify_records(const stk_shard *sh, uint64_t first, uint64_t count, stk_problem_fn fn,
                                  void *user)
{
    uint64_t end, problems = 0;
    if (!add_ok(first, count, &end) || end > sh->L.records) {
        if (fn) fn(user, sh, first, -1, STK_E_RANGE, "record range out of bounds");
        return 1;
    }
    /* Work in chunks of about 8 MiB of records, prefetching the next chunk. */
    uint64_t rec_bytes = 8 * sh->L.schema.nfields;
    for (uint32_t f = 0; f < sh->L.schema.nfields; f++) rec_bytes += sh->L.region[f].stride;
    uint64_t chunk = (8u << 20) / rec_bytes + 1;
    prefetch(sh, first, chunk < count ? chunk : count);
    for (uint64_t c = first, cend; c < end; c = cend) {
        cend = end - c < chunk ? end : c + chunk;
        if (sh->remote) { /* about 8 MiB of the records' values fetched at a time, then checked */
            stk_error e;
            uint64_t done = 0;
            if (stk__rshard_fetch_records(sh, c, end - c, 8u << 20, &done, &e)) {
                if (fn) fn(user, sh, c, -1, e.code, e.msg);
                return problems + 1;
            }
            cend = c + done;
        } else if (cend < end) {
            prefetch(sh, cend, end - cend < chunk ? end - cend : chunk);
        }
        for (uint64_t i = c; i < cend; i++)
            for (uint32_t f = 0; f < sh->L.schema.nfields; f++) {
                if (stk__field_compressed(&sh->L.schema.fields[f])) continue; /* below, by blocks */
                const uint8_t *p;
                uint64_t size;
                char what[200];
                int rc = locate(sh, f, i, &p, &size, what, sizeof what);
                if (rc == STK_OK && sh->remote) { /* present and checked, or the reason */
                    stk_error e;
                    if ((rc = remote_value(sh, f, i, p, size, &e)))
                        snprintf(what, sizeof what, "%.190s", problem_tail(sh, f, i, e.msg));
                }
                if (rc == STK_OK && sh->L.schema.fields[f].codec == STK_CODEC_JPEG)
                    rc = check_jpeg(sh, f, i, p, size, what, sizeof what);
                if (rc == STK_OK && sh->remote) continue;
                if (rc == STK_OK) {
                    uint64_t want = stk_shard_stored_hash(sh, f, i), got = stk_hash(p, (size_t)size);
                    if (got == want) continue;
                    rc = STK_E_CHECKSUM;
                    snprintf(what, sizeof what, "checksum mismatch (stored %016llx, computed %016llx)",
                             (unsigned long long)want, (unsigned long long)got);
                }
                problems++;
                if (fn) fn(user, sh, i, (int)f, rc, what);
            }
    }
    for (uint32_t f = 0; f < sh->L.schema.nfields; f++)
        if (stk__field_compressed(&sh->L.schema.fields[f]))
            problems += verify_blocks(sh, f, first, end, fn, user);
    return problems;
}

typedef struct {
    uint64_t off, len;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The first nonzero byte of [pos, next), or next; a remote shard's padding
 * is fetched (it is no value and no metadata: never in the cache). */
static int first_nonzero(const stk_shard *sh, uint64_t pos, uint64_t next, uint64_t *at, stk_error *err)
{
    *at = next;
    if (!sh->remote) {
        for (uint64_t b = pos; b < next; b++)
            if (sh->map[b]) return *at = b, STK_OK;
        return STK_OK;
    }
    enum { PIECE = 1u << 20 };
    uint8_t *buf = next > pos ? malloc(next - pos < PIECE ? next - pos : PIECE) : NULL;
    if (next > pos && !buf) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    int rc = STK_OK;
    for (uint64_t a = pos; a < next && !rc && *at == next; a += PIECE) {
        uint64_t n = next - a < PIECE ? next - a : PIECE;
        if ((rc = stk__rshard_read(sh, a, n, buf, err))) break;
        for (uint64_t k = 0; k < n; k++)
            if (buf[k]) {
                *at = a + k;
                break;
            }
    }
    free(buf);
    return rc;
}

uint64_t stk_shard_verify_padding(const stk_shard *sh, stk_problem_fn fn, void *user)
{
    span s[2 * STK_MAX_FIELDS + 2];
    unsigned n = 0;
    s[n++] = (span){0, sh->L.header_size};
    for (uint32_t f = 0; f < sh->L.schema.nfields; f++) {
        s[n++] = (span){sh->L.region[f].data_off, sh->L.region[f].data_len};
        if (stk__field_has_heap(&sh->L.schema.fields[f]) || stk__field_compressed(&sh->L.schema.fields[f]))
            s[n++] = (span){sh->L.region[f].heap_off, sh->L.region[f].heap_len};
    }
    s[n++] = (span){sh->L.cksum_off, sh->L.file_size - sh->L.cksum_off}; /* table + footer */
    qsort(s, n, sizeof s[0], span_cmp);
    uint64_t problems = 0, pos = 0;
    for (unsigned k = 0; k <= n; k++) {
        uint64_t next = k < n ? s[k].off : sh->L.file_size;
        uint64_t b;
        stk_error e;
        if (first_nonzero(sh, pos, next, &b, &e)) { /* a remote read failed */
            problems++;
            if (fn) fn(user, sh, UINT64_MAX, -1, e.code, e.msg);
        } else if (b < next) {
            char what[160];
            snprintf(what, sizeof what,
                     "nonzero padding byte at offset %llu (padding %llu..%llu must be zero)",
                     (unsigned long long)b, (unsigned long long)pos, (unsigned long long)next);
            problems++;
            if (fn) fn(user, sh, UINT64_MAX, -1, STK_E_FORMAT, what);
        }
        if (k < n && s[k].off + s[k].len > pos) pos = s[k].off + s[k].len;
    }
    return problems;
}

uint64_t stk_shard_file_hash(const stk_shard *sh)
{
    if (sh->remote) return stk__rshard_file_hash(sh);
    if (sh->owns_map) madvise((void *)sh->map, sh->size, MADV_SEQUENTIAL);
    stk__hasher *h = stk__hasher_new();
    if (!h) return 0;
    stk__hasher_update(h, sh->map, sh->size);
    uint64_t v = stk__hasher_digest(h);
    stk__hasher_free(h);
    return v;
}
