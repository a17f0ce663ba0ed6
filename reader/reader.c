/* reader/reader.c - the batch engine: a ring of slots filled by persistent
 * worker threads, handed out in stream order.
 *
 * The stream is numbered by a sequence s = epoch x batches_per_epoch + batch.
 * Batch s lives in slot stk__slot_index(s), taken from the free slots at its
 * claim and given back at its release. Three counters under one mutex say
 * who owns what:
 *
 *     released <= consume <= claim
 *     [released, consume)  the batch the caller holds (at most one)
 *     [consume, claim)     being prepared by a worker, or ready
 *     claim may advance while claim < released + knob_slots (a free slot;
 *     knob_slots <= nslots: the prefetch knob, stk__engine_set_knobs)
 *
 * Workers prepare different batches at once and finish out of order; the
 * caller waits for its own slot. A seek bumps `gen`: workers finishing a
 * batch of an older generation throw it away. Nothing here depends on the
 * thread count or timing: what a batch holds is a pure function of s
 * (spec/ORDERS.md), so prefetch depth and threads change only speed. */
/* madvise advice beyond POSIX: MADV_COLD, MADV_POPULATE_READ (Linux). */
#define _GNU_SOURCE
#include "engine.h"
#include "abi_v0.h"
#include "trace.h"

#include "../format/rshard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void stk_reader_options_init_sized(stk_reader_options *opts, size_t size)
{
    stk_reader_options o;
    memset(&o, 0, sizeof o);
    o.batch_size = 1;
    o.order = STK_ORDER_SEQUENTIAL;
    o.rank = -1;
    o.world_size = -1;
    o.tail = STK_TAIL_PAD;
    o.verify = STK_VERIFY_OFF;
    o.release_pages = -1;
    if (opts) stk__write_sized(opts, size, &o, sizeof o);
}

/* ------------------------------------------------------------- workers */

/* Tell the kernel consumed pages of [off, off+len) of a shard's mapping can
 * go: whole pages only, never the header or a neighbour's partial page. */
static void release_range(const uint8_t *base, uint64_t off, uint64_t len)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)(base + off) + page - 1) & ~(page - 1);
    uintptr_t b = ((uintptr_t)(base + off + len)) & ~(page - 1);
    if (b <= a) return;
#ifdef MADV_COLD
    madvise((void *)a, b - a, MADV_COLD);
#endif
    madvise((void *)a, b - a, MADV_DONTNEED);
}

/* Release the pages of global records [first, first+count) for every
 * selected tensor field. Only a hint: a worker still copying from them just
 * faults them back in from the page cache. */
static void release_records(const stk_reader *r, uint64_t first, uint64_t count)
{
    while (count) {
        size_t s;
        uint64_t local;
        if (stk_dataset_locate(r->ds, first, &s, &local, NULL)) return;
        const stk_shard *sh = stk_dataset_shard(r->ds, s);
        uint64_t n = stk_shard_records(sh) - local;
        if (n > count) n = count;
        for (unsigned i = 0; i < r->nsel; i++) {
            const uint8_t *base = stk_shard_field_base(sh, r->sel[i]);
            if (base) release_range(base, local * r->sel_stride[i], n * r->sel_stride[i]);
        }
        first += n;
        count -= n;
    }
}

/* Called when seq s is claimed: batch s - nslots is done with for good. In
 * sequential order that batch's records are released; in quasi order, the
 * blocks of every window wholly before that batch's first position. */
static void release_consumed(stk_reader *r, uint64_t s, uint64_t *win_epoch, uint64_t *win_next)
{
    if (!r->release || s < r->nslots) return;
    uint64_t done = s - r->nslots;
    uint64_t e = done / r->nbatches, j = done % r->nbatches;
    uint64_t p0 = j * r->G + (uint64_t)r->o.rank * r->o.batch_size;
    if (p0 >= r->N) return;
    if (r->o.order == STK_ORDER_SEQUENTIAL) {
        uint64_t n = r->o.batch_size;
        if (p0 + n > r->N) n = r->N - p0;
        release_records(r, p0, n);
        return;
    }
    /* quasi: windows are G-independent runs of positions */
    stk__epoch_order o;
    stk__epoch_order_init(&o, STK_ORDER_QUASI, r->N, r->o.seed, e, r->K, r->Wq);
    (void)stk__epoch_order_record(&o, p0); /* finds p0's window */
    if (*win_epoch != e) {
        *win_epoch = e;
        *win_next = 0;
    }
    for (; *win_next < o.cur_w; (*win_next)++) {
        uint64_t x0 = *win_next * r->Wq;
        for (uint64_t x = x0; x < x0 + r->Wq && x < o.nb; x++) {
            uint64_t b = stk__perm_fwd(&o.p, x);
            release_records(r, b * r->K, b == o.nb - 1 ? o.Lz : r->K);
        }
    }
}

/* A shard rewritten in place under the mapping would SIGBUS the copy: check
 * each shard a batch touches, once per batch, before touching it. A shard
 * replaced by rename or deleted is fine: the mapping keeps the old inode. */
static int check_shard(stk_reader *r, size_t s, uint64_t local, stk_error *err)
{
    struct stat st;
    const stk_shard *sh = stk_dataset_shard(r->ds, s);
    if (stk__shard_is_remote(sh)) return STK_OK; /* its cache file is never cut: a hole reads as zeros */
    if (stat(stk_shard_path(sh), &st) != 0) return STK_OK;
    if (st.st_dev != r->shard_id[s].dev || st.st_ino != r->shard_id[s].ino) return STK_OK;
    if ((uint64_t)st.st_size < stk_shard_file_size(sh))
        return stk_error_set(err, STK_E_TRUNCATED,
                             "%s: record %llu: the shard shrank from %llu to %llu bytes since it was opened "
                             "(rewritten in place?)",
                             stk_shard_path(sh), (unsigned long long)local,
                             (unsigned long long)stk_shard_file_size(sh), (unsigned long long)st.st_size);
    return STK_OK;
}

static int verify_value(stk_reader *r, const stk_shard *sh, unsigned f, uint64_t local, uint64_t global,
                        const void *data, uint64_t size, stk_error *err)
{
    uint64_t want = stk_shard_stored_hash(sh, f, local), got = stk_hash(data, size);
    if (want == got) return STK_OK;
    return stk_error_set(err, STK_E_CHECKSUM,
                         "%s: record %llu (dataset record %llu), field '%s': checksum mismatch "
                         "(stored %016llx, computed %016llx)",
                         stk_shard_path(sh), (unsigned long long)local, (unsigned long long)global,
                         stk_dataset_schema(r->ds)->fields[f].name, (unsigned long long)want,
                         (unsigned long long)got);
}

static int needs_verify(stk_reader *r, uint64_t rec)
{
    if (r->o.verify == STK_VERIFY_ALWAYS) return 1;
    if (r->o.verify != STK_VERIFY_ONCE) return 0;
    uint64_t bit = 1ULL << (rec & 63);
    return !(__atomic_load_n(&r->verified_bits[rec >> 6], __ATOMIC_RELAXED) & bit);
}

static void mark_verified(stk_reader *r, uint64_t rec)
{
    if (r->o.verify == STK_VERIFY_ONCE)
        __atomic_fetch_or(&r->verified_bits[rec >> 6], 1ULL << (rec & 63), __ATOMIC_RELAXED);
}

/* Batch s's first position in its epoch's order and its record count. */
static uint32_t batch_span(const stk_reader *r, uint64_t s, uint64_t *p0)
{
    uint64_t j = s % r->nbatches;
    *p0 = j * r->G + (uint64_t)r->o.rank * r->o.batch_size;
    uint32_t n = r->o.batch_size;
    if (r->o.tail == STK_TAIL_PARTIAL) n = *p0 >= r->N ? 0 : (uint32_t)(r->N - *p0 < n ? r->N - *p0 : n);
    return n;
}

/* Records [i0, i1) of batch s into rec[]. */
static void part_records(const stk_reader *r, stk__worker *w, uint64_t s, uint64_t p0, uint32_t i0,
                         uint32_t i1, uint64_t *rec)
{
    uint64_t e = s / r->nbatches;
    if (r->mix) {
        stk__slot *sl = &r->slots[stk__slot_index(r, s)];
        stk__mix_positions(r->mix, w->mixc, e, p0 + i0, i1 - i0, rec + i0, sl->sources + i0);
        for (uint32_t i = i0; i < i1; i++) sl->source_records[i] = rec[i] - r->mix->base[sl->sources[i]];
        return;
    }
    if (w->ord_epoch != e) {
        stk__epoch_order_init(&w->ord, r->o.order, r->N, r->o.seed, e, r->K, r->Wq);
        w->ord_epoch = e;
    }
    for (uint32_t i = i0; i < i1; i++) rec[i] = stk__epoch_order_record(&w->ord, (p0 + i) % r->N);
}

/* Whether batch (p0, n) is one run of records inside one shard, which the
 * view can point at instead of copying: sequential order, no wrap, one
 * shard. Pure, so every part of the batch decides alike. */
static int zero_copy_shard(const stk_reader *r, uint64_t p0, uint32_t n, size_t *shard, uint64_t *local)
{
    if (r->o.order != STK_ORDER_SEQUENTIAL || n == 0 || r->be || r->has_compressed || r->direct || r->mix)
        return 0;                /* staged */
    if (p0 + n > r->N) return 0; /* wraps around */
    if (stk_dataset_locate(r->ds, p0, shard, local, NULL)) return 0;
    return stk_dataset_shard_first(r->ds, *shard + 1) >= p0 + n;
}

/* Append n bytes to the part's heap; the value records its offset for now
 * (the buffer may move) and gets its pointer when the part is done. */
static int zheap_put(stk__zheap *h, const void *src, uint64_t n, stk_value *v, stk_error *err)
{
    if (h->len + n > h->cap) {
        uint64_t cap = h->cap ? h->cap : 4096;
        while (cap < h->len + n) cap *= 2;
        uint8_t *p = realloc(h->p, cap);
        if (!p) return stk_error_set(err, STK_E_NOMEM, "out of memory for the values of a compressed field");
        h->p = p;
        h->cap = cap;
    }
    if (n) memcpy(h->p + h->len, src, n);
    v->data = (const void *)(uintptr_t)h->len;
    v->size = n;
    h->len += n;
    return STK_OK;
}

/* The value of selected field k of record (s, local): from the map, or
 * copied out of its decompressed block (the shared cache, blockcache.c)
 * into dst (tensors) or the part's heap (bytes values). */
static int compressed_value(stk_reader *r, stk__worker *w, size_t s, unsigned k, uint64_t local, uint8_t *dst,
                            stk__zheap *zh, stk_value *v, stk_error *err)
{
    const stk_shard *sh = stk_dataset_shard(r->ds, s);
    unsigned f = r->sel[k];
    uint64_t b, size;
    const void *src;
    int rc = stk_shard_block_find(sh, f, local, &b, err);
    if (rc) return rc;
    if (!w->pin[k] || w->pin_shard[k] != s || w->pin_block[k] != b) { /* another block: swap the pin */
        if (w->pin[k]) stk__zcache_put(r->zcache, w->pin[k]);
        w->pin[k] = NULL;
        if ((rc = stk__zcache_get(r->zcache, r->ds, s, f, b, w->zq, &w->pin[k], &w->pin_raw[k], err)))
            return rc;
        w->pin_shard[k] = s;
        w->pin_block[k] = b;
    }
    if (!(rc = stk_shard_block_value(sh, f, b, w->pin_raw[k], local, &src, &size, err))) {
        if (dst) memcpy(dst, src, size);
        else rc = zheap_put(zh, src, size, v, err);
    }
    return rc;
}

/* A remote shard's value that stk_shard_value found (fetching it when the
 * node cache did not hold it) points into the cache's file, which may drop
 * bytes it holds past its limit once enough others were fetched: copy it
 * (into dst, grown as needed) and check the copy; one that changed under
 * the copy is fetched again. */
static int remote_value(const stk_reader *r, const stk_shard *sh, unsigned f, uint64_t local, const void *src,
                        uint64_t size, uint8_t *dst, stk_error *err)
{
    uint64_t want = stk_shard_stored_hash(sh, f, local);
    for (int again = 0;; again = 1) {
        memcpy(dst, src, size);
        if (stk_hash(dst, size) == want) return STK_OK;
        int rc = again ? stk_error_set(err, STK_E_CHECKSUM,
                                       "%s: record %llu, field '%s': checksum mismatch after a fetch",
                                       stk_shard_path(sh), (unsigned long long)local,
                                       stk_dataset_schema(r->ds)->fields[f].name)
                       : stk__rshard_fetch(sh, f, local, 1, 0, err);
        uint64_t n = size;
        if (!rc) rc = stk_shard_value(sh, f, local, &src, &n, err);
        if (!rc && n != size)
            rc = stk_error_set(err, STK_E_FORMAT, "%s: record %llu: value size changed", stk_shard_path(sh),
                               (unsigned long long)local);
        if (rc) return rc;
    }
}

/* stk_shard_value, a remote shard's copied into the worker's buffer. */
static int stable_value(const stk_reader *r, stk__worker *w, const stk_shard *sh, unsigned f, uint64_t local,
                        const void **src, uint64_t *size, stk_error *err)
{
    int rc = stk_shard_value(sh, f, local, src, size, err);
    if (rc || !stk__shard_is_remote(sh)) return rc;
    if (*size > w->rval_cap) {
        uint8_t *p = realloc(w->rval, *size);
        if (!p)
            return stk_error_set(err, STK_E_NOMEM, "out of memory for a %llu-byte value",
                                 (unsigned long long)*size);
        w->rval = p;
        w->rval_cap = *size;
    }
    if ((rc = remote_value(r, sh, f, local, *src, *size, w->rval, err))) return rc;
    *src = w->rval;
    return STK_OK;
}

/* A part is over: let the cache evict the blocks this worker held. */
static void unpin_blocks(stk_reader *r, stk__worker *w)
{
    for (unsigned k = 0; k < r->nsel; k++)
        if (w->pin[k]) {
            stk__zcache_put(r->zcache, w->pin[k]);
            w->pin[k] = NULL;
        }
}

/* check_shard for the first record of shard s in this part (w->batch_no
 * counts parts). */
static int check_shard_once(stk_reader *r, stk__worker *w, size_t s, uint64_t local, stk_error *err)
{
    if (w->stamp[s] == w->batch_no) return STK_OK;
    w->stamp[s] = w->batch_no;
    return check_shard(r, s, local, err);
}

/* The transformed array field of record `rec` (local in shard sh), cropped
 * and resized into its place in the slot (load_crop.c). */
static int load_crop_one(stk_reader *r, stk__worker *w, stk__slot *sl, unsigned k, const stk_shard *sh,
                         uint64_t local, uint64_t rec, uint32_t i, int verify, stk_error *err)
{
    const void *src;
    uint64_t size, dims[STK_MAX_DIMS];
    unsigned f = r->sel[k];
    const int jpeg = stk_shard_schema(sh)->fields[f].codec == STK_CODEC_JPEG;
    int rc = stable_value(r, w, sh, f, local, &src, &size, err);
    /* a coded value's checksum is checked before it is decoded, whatever
     * verify says: the region decode stops after the crop's last row and
     * would not see bit rot below it (spec/FORMAT.md 9.1) */
    if (!rc && (verify || jpeg)) rc = verify_value(r, sh, f, local, rec, src, size, err);
    if (!rc) rc = stk_shard_value_shape(sh, f, local, dims, err);
    if (!rc && !w->cropper && !(w->cropper = stk__cropper_new()))
        rc = stk_error_set(err, STK_E_NOMEM, "out of memory for the image crop");
    if (rc) return rc;
    uint8_t *dst = sl->buf + r->sel_off[k] + (uint64_t)i * r->sel_stride[k], *crop = dst;
    const stk_transform *t = &r->load_xf;
    if (r->load_norm && !w->crop_buf && !(w->crop_buf = malloc((size_t)t->out_height * t->out_width * 3)))
        return stk_error_set(err, STK_E_NOMEM, "out of memory for the image crop");
    if (r->load_norm) crop = w->crop_buf;
    int square = stk_shard_schema(sh)->fields[f].kind == STK_KIND_TENSOR;
    double c0 = stk__now();
    rc = stk__cropper_run(w->cropper, t, r->o.seed, sl->seq / r->nbatches, rec, src, size, dims, jpeg, square,
                          crop, err);
    w->crop_s += stk__now() - c0;
    if (!rc && r->load_norm) {
        double n0 = stk__now();
        stk__xform_normalise(&r->xf_job, crop, dst);
        stk__cropper_add(w->cropper, STK__CROP_NORM, stk__now() - n0);
    }
    if (rc && err) { /* name the shard too: the cropper knows the record only */
        char m[STK_ERROR_MSG_MAX];
        snprintf(m, sizeof m, "%s", err->msg);
        stk_error_set(err, rc, "%s: field '%s', %s", stk_shard_path(sh), stk_shard_schema(sh)->fields[f].name,
                      m);
    }
    return rc;
}

/* Values of at least this many bytes go with streaming stores where the
 * reader chose them (plan_copy): runs long enough that whole lines are the
 * rule; a label or a small crop goes through the cache, and so does a value
 * about to be verified (hashed from the slot right after). */
#define STREAM_VALUE_MIN ((uint64_t)64 << 10)
static void slot_copy(const stk_reader *r, void *dst, const void *src, uint64_t n, int verify)
{
    if (r->stream_copy && n >= STREAM_VALUE_MIN && !verify) stk__copy_stream(dst, src, (size_t)n);
    else memcpy(dst, src, (size_t)n);
}

/* Copy (or point at) every selected field of record `i` of the batch.
 * landed: the direct path's r->io_field (those fields are in the slot
 * already), else NULL. */
static int gather_one(stk_reader *r, stk__worker *w, stk__slot *sl, uint32_t i, int zc, uint64_t *heap,
                      stk__zheap *zh, const uint8_t *landed, stk_error *err)
{
    uint64_t rec = sl->records[i], local;
    size_t s;
    int rc = stk_dataset_locate(r->ds, rec, &s, &local, err);
    if (rc) return rc;
    const stk_shard *sh = stk_dataset_shard(r->ds, s);
    if ((rc = check_shard_once(r, w, s, local, err))) return rc;
    int verify = needs_verify(r, rec);
    for (unsigned k = 0; k < r->nsel; k++) {
        stk_batch_field *bf = &sl->fields[k];
        const void *src;
        uint64_t size;
        if (r->load_crop && (int)k == r->xf_sel) {
            if ((rc = load_crop_one(r, w, sl, k, sh, local, rec, i, verify, err))) return rc;
            continue;
        }
        if (stk_dataset_schema(r->ds)->fields[r->sel[k]].codec ==
            STK_CODEC_ZSTD) { /* out of a shared decompressed block */
            stk_value *v = bf->kind != STK_KIND_TENSOR ? (stk_value *)&bf->values[i] : NULL;
            uint8_t *dst = v ? NULL : sl->buf + r->sel_off[k] + (uint64_t)i * r->sel_stride[k];
            if ((rc = compressed_value(r, w, s, k, local, dst, zh, v, err))) return rc;
            src = v ? (const void *)(zh->p + (uintptr_t)v->data) : dst;
            size = v ? v->size : r->sel_stride[k];
            if (v) heap[k] += size;
        } else if (landed && landed[k]) { /* read into the slot (direct_submit, qblock_copy) */
            size = r->sel_stride[k];
            src = sl->buf + r->sel_off[k] + (uint64_t)i * size;
        } else {
            if ((rc = stk_shard_value(sh, r->sel[k], local, &src, &size, err))) return rc;
            if (bf->kind != STK_KIND_TENSOR && r->rbytes) { /* into the part's heap, as compressed values */
                stk_value *v = (stk_value *)&bf->values[i];
                if ((rc = zheap_put(zh, src, size, v, err))) return rc;
                uint8_t *copy = zh->p + (uintptr_t)v->data;
                if (stk__shard_is_remote(sh) &&
                    (rc = remote_value(r, sh, r->sel[k], local, src, size, copy, err)))
                    return rc;
                src = copy;
                heap[k] += size;
            } else if (bf->kind != STK_KIND_TENSOR) {
                stk_value *v = (stk_value *)&bf->values[i];
                v->data = src;
                v->size = size;
                heap[k] += size;
            } else if (!zc) {
                uint8_t *dst = sl->buf + r->sel_off[k] + (uint64_t)i * size;
                slot_copy(r, dst, src, size, verify);
                src = dst; /* verify what the caller will see */
            }
        }
        if (verify && (rc = verify_value(r, sh, r->sel[k], local, rec, src, size, err))) return rc;
        if (sl->field_shapes[k] &&
            (rc = stk_shard_value_shape(sh, r->sel[k], local,
                                        sl->field_shapes[k] + (uint64_t)i * (bf->ndim - 1), err)))
            return rc;
    }
    if (verify) {
        mark_verified(r, rec);
        w->verified++;
    }
    return STK_OK;
}

#define ADVISE_BELOW_BYTES_PER_S 1e9 /* memory copies run at 5-10 GB/s per core */
#define ADVISE_RUN 16

/* Readahead: ask for every record of [i0, i1) before copying any, so the
 * reads of a cold batch are in flight together rather than one at a time.
 * MADV_WILLNEED leaves out shards whose maps are advised huge pages
 * (io_plan.c): there a fault reads the 2-4 MiB around it, and readahead
 * would fill the page cache with small pages instead, 3x slower to gather
 * from ever after on a virtual machine (bench/README "Warm reads"). */
static void advise_records(const stk_reader *r, const uint64_t *rec, uint32_t i0, uint32_t i1, int how)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (uint32_t i = i0; i < i1; i++) {
        size_t s;
        uint64_t local;
        if (stk_dataset_locate(r->ds, rec[i], &s, &local, NULL)) return;
        const stk_shard *sh = stk_dataset_shard(r->ds, s);
        uint32_t run = 1; /* extend over consecutive records of the same shard */
        while (i + run < i1 && rec[i + run] == rec[i] + run && local + run < stk_shard_records(sh)) run++;
        int faults_read = how == MADV_WILLNEED && r->shard_huge && r->shard_huge[s];
        for (unsigned k = 0; k < r->nsel && !faults_read; k++) {
            const uint8_t *base = stk_shard_field_base(sh, r->sel[k]);
            if (!base) continue;
            uintptr_t a = (uintptr_t)(base + local * r->sel_stride[k]) & ~(page - 1);
            uintptr_t b = (uintptr_t)(base + (local + run) * r->sel_stride[k]);
            madvise((void *)a, b - a, how);
        }
        i += run - 1;
    }
}

/* A copy from the mapping on the direct path (a short run, a shard the
 * engine cannot open): the shard's size is checked first, once per shard
 * and part, as gather_one does, so that a shard cut in place is an error and
 * not SIGBUS. */
static int map_copy(stk_reader *r, stk__worker *w, size_t s, uint64_t local, void *dst, const void *src,
                    uint64_t len, stk_error *err)
{
    int rc = check_shard_once(r, w, s, local, err);
    if (!rc) memcpy(dst, src, len);
    return rc;
}

/* The direct path: queue a read per run of records adjacent in one shard and
 * per field read directly (r->io_field), straight into the slot, and
 * submit them; the rest (bytes fields; compressed fields, whose blocks
 * blockcache.c reads through the same queue) gather_one copies as usual. A shard the engine cannot
 * read (replaced since open) is copied from its mapping here. */
static int direct_submit(stk_reader *r, stk__worker *w, stk__ioq *q, stk__slot *sl, uint32_t i0, uint32_t i1,
                         stk_error *err)
{
    for (uint32_t i = i0; i < i1;) {
        size_t s;
        uint64_t local;
        int rc = stk_dataset_locate(r->ds, sl->records[i], &s, &local, err);
        if (rc) return rc;
        const stk_shard *sh = stk_dataset_shard(r->ds, s);
        int remote = stk__shard_is_remote(sh);
        uint32_t run = 1;
        while (i + run < i1 && sl->records[i + run] == sl->records[i] + run &&
               local + run < stk_shard_records(sh))
            run++;
        for (unsigned k = 0; k < r->nsel; k++) {
            if (!r->io_field[k]) continue;
            uint64_t stride = r->sel_stride[k], len = run * stride;
            uint8_t *dst = sl->buf + r->sel_off[k] + (uint64_t)i * stride;
            /* a run under one block (a label, a small crop) costs a whole
             * block read: such columns are small, the page cache keeps them
             * (a remote shard's map has holes: the backend fetches them) */
            rc = len < STK__IO_MIN_READ && !remote
                     ? STK__IO_USE_MAP
                     : stk__ioq_add(q, s, stk_shard_field_offset(sh, r->sel[k]) + local * stride, len, dst,
                                    local, run, NULL, err);
            if (rc == STK__IO_USE_MAP && remote) { /* the backend copies cached runs itself: never here */
                int frc = stk__rshard_fetch(sh, r->sel[k], local, run, 0, err);
                if (frc) rc = frc;
            }
            if (rc == STK__IO_USE_MAP)
                rc =
                    map_copy(r, w, s, local, dst,
                             (const uint8_t *)stk_shard_field_base(sh, r->sel[k]) + local * stride, len, err);
            if (rc) return rc; /* part_end waits for what was queued */
        }
        i += run;
    }
    return stk__ioq_submit(q, err);
}

/* Part 0 of a batch also fills in the view: where each field's data is. */
static void setup_view(stk_reader *r, stk__slot *sl, uint32_t n, int zc, size_t shard, uint64_t local)
{
    sl->batch.epoch = sl->seq / r->nbatches;
    sl->batch.index = sl->seq % r->nbatches;
    sl->batch.size = n;
    sl->batch.on_device = 0;
    sl->batch.event = NULL;
    const stk_shard *sh = zc ? stk_dataset_shard(r->ds, shard) : NULL;
    for (unsigned k = 0; k < r->nsel; k++) {
        stk_batch_field *bf = &sl->fields[k];
        bf->shape[0] = n;
        int fzc = zc && !(r->load_crop && (int)k == r->xf_sel); /* crops are made, never mapped */
        bf->zero_copy = fzc && bf->kind == STK_KIND_TENSOR;
        bf->data = bf->kind != STK_KIND_TENSOR ? NULL
                   : fzc ? (const uint8_t *)stk_shard_field_base(sh, r->sel[k]) + local * r->sel_stride[k]
                         : sl->buf + r->sel_off[k];
        if (bf->kind == STK_KIND_TENSOR)
            bf->nbytes = n * r->sel_stride[k]; /* bytes fields: summed by parts */
    }
}

/* One part of a batch on its way through a worker: begun (records chosen,
 * direct reads submitted), then ended (reads waited for, the rest gathered).
 * A worker on the direct path begins its next part before it ends the
 * current one, so the device always has reads queued. */
typedef struct {
    stk__slot *sl;
    uint64_t s, gen;
    unsigned part;
    uint32_t i0, i1;
    int zc, over; /* over: nothing left for part_end (zero-copy, or failed) */
    stk__ioq *q;  /* direct: the queue its reads went to */
    /* quasi blocks (qblocks.c): the block of each record, pinned; those this
     * part reads itself, published (loaded or failed) once its reads are done */
    stk__qentry **blk, **own, **pre; /* pre: own blocks read ahead, not this part's */
    uint32_t npinned, nown, npre;
    int submitted, published;
    uint64_t heap[STK_MAX_FIELDS];
    stk_error err;
    double busy;
    double src_busy[STK__MIX_MAX]; /* a timed mixture: gather seconds per source */
} stk__part;

/* Read quasi block b whole into e's buffer: per direct field, one run per
 * shard the block spans (the block's records are consecutive). A block
 * inside one shard reads in place (the aligned overrun has room); both
 * runs of a block that spans two shards go through the bounce area (an
 * overrun of one would land on the other's bytes). */
static int qblock_load(stk_reader *r, stk__worker *w, stk__ioq *q, uint64_t b, stk__qentry *e, stk_error *err)
{
    uint64_t first = b * r->K, end = first + r->K < r->N ? first + r->K : r->N;
    uint8_t *buf = stk__qentry_buf(e);
    uint32_t *shift = stk__qentry_shift(e);
    for (uint64_t g = first; g < end;) {
        size_t s;
        uint64_t local;
        int rc = stk_dataset_locate(r->ds, g, &s, &local, err);
        if (rc) return rc;
        const stk_shard *sh = stk_dataset_shard(r->ds, s);
        int remote = stk__shard_is_remote(sh);
        uint64_t run = stk_shard_records(sh) - local;
        if (run > end - g) run = end - g;
        for (unsigned k = 0; k < r->nsel; k++) {
            if (!r->io_field[k]) continue;
            uint64_t stride = r->sel_stride[k], len = run * stride,
                     off = stk_shard_field_offset(sh, r->sel[k]) + local * stride;
            if (g == first) shift[k] = (uint32_t)(off & 4095);
            uint8_t *dst = buf + r->qb_off[k] + shift[k] + (g - first) * stride;
            /* a remote shard's map has holes where nothing was fetched: its
             * short runs (a label column) go to the backend too, which
             * fetches a window of such a column into the cache */
            rc = len < STK__IO_MIN_READ && !remote ? STK__IO_USE_MAP
                 : run == end - first ? stk__ioq_add_padded(q, s, off, len, dst, local, (uint32_t)run, e, err)
                                      : stk__ioq_add(q, s, off, len, dst, local, (uint32_t)run, e, err);
            if (rc == STK__IO_USE_MAP && remote) { /* the backend never leaves values to the map; in case */
                int frc = stk__rshard_fetch(sh, r->sel[k], local, run, 0, err);
                if (frc) rc = frc;
            }
            if (rc == STK__IO_USE_MAP)
                rc =
                    map_copy(r, w, s, local, dst,
                             (const uint8_t *)stk_shard_field_base(sh, r->sel[k]) + local * stride, len, err);
            if (rc) return rc;
        }
        g += run;
    }
    return STK_OK;
}

/* Read ahead: the blocks of the records one window (W x K positions) after
 * the part's, in this epoch, that are not cached and fit; each goes through
 * the part's queue and is published with its own blocks. A read-ahead that
 * cannot be queued marks its block failed (a part that needs the block then
 * reports why); the part itself goes on. */
static void qblock_ahead(stk_reader *r, stk__worker *w, stk__part *p, uint64_t p0)
{
    uint64_t WK = (uint64_t)r->Wq * r->K;
    for (uint32_t i = p->i0; i < p->i1; i++) {
        uint64_t pos = (p0 + i) % r->N;
        if (pos + WK >= r->N) continue; /* the next epoch's order is another */
        uint64_t b = stk__epoch_order_record(&w->ord, pos + WK) / r->K;
        stk__qentry *e = stk__qcache_claim(r->qcache, b);
        if (!e) continue;
        p->own[p->nown++] = e;
        p->pre[p->npre++] = e;
        stk_error err;
        if (qblock_load(r, w, p->q, b, e, &err)) {
            stk__qcache_loaded(r->qcache, e, &err);
            break;
        }
    }
}

/* Pin the block of every record of the part; read those nobody has yet. */
static int qblock_begin(stk_reader *r, stk__worker *w, stk__part *p, uint64_t p0, stk_error *err)
{
    for (uint32_t i = p->i0; i < p->i1; i++) {
        int load, rc;
        uint64_t b = p->sl->records[i] / r->K;
        stk__qentry *e = stk__qcache_pin(r->qcache, b, &load, err);
        if (!e) return err->code;
        p->blk[p->npinned++] = e;
        if (load) {
            p->own[p->nown++] = e;
            if ((rc = qblock_load(r, w, p->q, b, e, err))) return rc;
        }
    }
    qblock_ahead(r, w, p, p0);
    int rc = stk__ioq_submit(p->q, err);
    p->submitted = !rc;
    return rc;
}

/* The part's own block reads are over: say so to every part waiting for
 * them. A worker publishes every part it has begun before it waits for
 * another worker's block, so no two workers wait on each other. */
static void qblock_publish(stk_reader *r, stk__part *p)
{
    if (!r->qcache || p->published) return;
    p->published = 1;
    stk__ioq_drain(p->q);
    for (size_t i = 0, n = stk__ioq_count(p->q); i < n; i++) {
        void *tag;
        stk_error e;
        if (stk__ioq_result(p->q, i, &tag, &e))
            stk__qcache_loaded(r->qcache, tag, &e); /* first failure wins */
    }
    stk__ioq_clear(p->q);
    stk_error fail = p->err;
    if (!p->submitted && !fail.code) stk_error_set(&fail, STK_E_IO, "quasi block not read");
    for (uint32_t j = 0; j < p->nown; j++)
        stk__qcache_loaded(r->qcache, p->own[j], p->submitted ? NULL : &fail);
}

/* Copy record i's direct fields out of its block (once the block is in). */
static int qblock_copy(stk_reader *r, stk__part *p, const stk__part *other, uint32_t i, stk_error *err)
{
    stk__qentry *e = p->blk[i - p->i0];
    if (!stk__qcache_ready(r->qcache, e) && other) qblock_publish(r, (stk__part *)other);
    int rc = stk__qcache_wait(r->qcache, e, err);
    if (rc) return rc;
    uint64_t idx = p->sl->records[i] % r->K;
    const uint8_t *buf = stk__qentry_buf(e);
    const uint32_t *shift = stk__qentry_shift(e);
    int verify = needs_verify(r, p->sl->records[i]); /* gather_one hashes the copy */
    for (unsigned k = 0; k < r->nsel; k++)
        if (r->io_field[k])
            slot_copy(r, p->sl->buf + r->sel_off[k] + (uint64_t)i * r->sel_stride[k],
                      buf + r->qb_off[k] + shift[k] + idx * r->sel_stride[k], r->sel_stride[k], verify);
    return STK_OK;
}

static void qblock_unpin(stk_reader *r, stk__part *p, uint32_t copied)
{
    for (uint32_t j = 0; j < p->npinned; j++) stk__qcache_unpin(r->qcache, p->blk[j], j < copied);
    for (uint32_t j = 0; j < p->npre; j++) stk__qcache_unpin(r->qcache, p->pre[j], 0);
    p->npinned = p->npre = 0;
}

/* Choose records [i0, i1) of the batch in slot sl (part p->part), set up
 * the view (part 0), and start their reads (direct path). */
static void part_begin(stk_reader *r, stk__worker *w, stk__part *p)
{
    w->batch_no++; /* map_copy checks each shard once per part */
    stk__slot *sl = p->sl;
    stk_error *err = &p->err;
    uint64_t p0, local = 0;
    size_t shard = 0;
    uint32_t n = batch_span(r, sl->seq, &p0);
    uint64_t chunk = ((uint64_t)n + sl->nparts - 1) / sl->nparts;
    p->i0 = (uint32_t)(p->part * chunk < n ? p->part * chunk : n);
    p->i1 = (uint32_t)(p->i0 + chunk < n ? p->i0 + chunk : n);
    p->zc = zero_copy_shard(r, p0, n, &shard, &local);
    if (p->part == 0) setup_view(r, sl, n, p->zc, shard, local);
    part_records(r, w, sl->seq, p0, p->i0, p->i1, sl->records);
    if (p->zc && (err->code = check_shard(r, shard, local + p->i0, err))) {
        p->over = 1;
        return;
    }
    if (p->zc && !r->has_bytes && r->o.verify == STK_VERIFY_OFF && !r->load_crop) {
        /* The caller reads the map: fault it in here, off the caller's
         * thread (that is the prefetch), or at least start the reads.
         * (A load crop is made in the slot: gather_one makes it.) */
#ifdef MADV_POPULATE_READ
        advise_records(r, sl->records, p->i0, p->i1, MADV_POPULATE_READ);
#else
        advise_records(r, sl->records, p->i0, p->i1, MADV_WILLNEED);
#endif
        p->over = 1;
        return;
    }
    /* Readahead pays on storage (all of a part's reads in flight at once
     * instead of one page fault at a time) but costs 10-20% when the records
     * are already in the page cache (the kernel still walks every page). So
     * advise only after a part that copied slower than memory does, and for
     * the next ADVISE_RUN parts; a fast part is the cheap probe.
     * (advise_records skips the shards whose maps are advised huge pages.) */
    if (!p->zc && !r->direct && w->advise_left > 0) {
        advise_records(r, sl->records, p->i0, p->i1, MADV_WILLNEED);
        w->advise_left--;
    }
    if (r->qcache) {
        if (qblock_begin(r, w, p, p0, err)) p->over = 1;
    } else if (r->direct && direct_submit(r, w, p->q, sl, p->i0, p->i1, err)) {
        p->over = 1;
    }
}

/* Wait for the part's reads, then gather what they did not bring. Errors go
 * to p->err; bytes-field sizes to p->heap[k] (the view's totals are summed
 * under the lock when the part is done). */
static void part_end(stk_reader *r, stk__worker *w, stk__part *p, const stk__part *other)
{
    stk__slot *sl = p->sl;
    stk_error *err = &p->err;
    double t0 = stk__now();
    if (r->qcache) {
        qblock_publish(r, p);
    } else if (r->direct) { /* failed or not, nothing may stay in flight into the slot */
        STK_TRACE_PUSH(r->tl, STK_TRACK_WORKER((unsigned)(w - r->workers)), "read wait", sl->seq, p->part);
        double w0 = stk__now();
        int rc = stk__ioq_wait(p->q, err->code ? NULL : err);
        w->read_wait_s += stk__now() - w0;
        STK_TRACE_POP(r->tl, STK_TRACK_WORKER((unsigned)(w - r->workers)));
        if (rc && !err->code) err->code = rc;
        if (err->code) p->over = 1;
    }
    uint32_t i = p->i0;
    int whole = 0; /* every record gathered */
    const uint8_t *landed = r->direct ? r->io_field : NULL;
    stk__zheap *zh = sl->zheap ? &sl->zheap[p->part] : NULL;
    if (!p->over) {
        w->batch_no++;
        w->zq = r->direct ? p->q : NULL; /* waited for above: free for compressed blocks */
        if (zh) zh->len = 0;
        /* a timed mixture: a clock read where the source changes, the time
         * since the last one going to the source before */
        uint32_t cur = r->mix_timed && i < p->i1 ? sl->sources[i] : 0;
        double tc = r->mix_timed ? stk__now() : 0;
        for (; i < p->i1; i++) {
            if (__atomic_load_n(&r->gen, __ATOMIC_RELAXED) != p->gen) break; /* seek or close: abandon */
            if (r->mix_timed && sl->sources[i] != cur) {
                double t = stk__now();
                p->src_busy[cur] += t - tc;
                tc = t;
                cur = sl->sources[i];
            }
            if (r->qcache && qblock_copy(r, p, other, i, err)) break;
            if (gather_one(r, w, sl, i, p->zc, p->heap, zh, landed, err)) break;
        }
        if (r->mix_timed) p->src_busy[cur] += stk__now() - tc;
        if (r->stream_copy) stk__copy_fence(); /* before finish_part hands the slot on */
        whole = i == p->i1;
    }
    if (r->qcache) qblock_unpin(r, p, i - p->i0);
    if (!whole) return;
    if (zh) /* the part's heap stops moving: offsets become pointers */
        for (unsigned k = 0; k < r->nsel; k++)
            if (sl->fields[k].kind != STK_KIND_TENSOR &&
                (r->rbytes || stk_dataset_schema(r->ds)->fields[r->sel[k]].codec == STK_CODEC_ZSTD))
                for (uint32_t j = p->i0; j < p->i1; j++) {
                    stk_value *v = (stk_value *)&sl->fields[k].values[j];
                    v->data = zh->p + (uintptr_t)v->data;
                }
    if (r->xf_sel >= 0) /* the transform's crop boxes travel with the batch */
        for (uint32_t j = p->i0; j < p->i1; j++)
            stk__xform_box(&r->xf, r->xf_job.H, r->xf_job.W, r->o.seed, sl->seq / r->nbatches, sl->records[j],
                           (stk__crop_box *)(sl->buf + r->boxes_off) + j);
    double dt = stk__now() - t0, bytes = (double)(p->i1 - p->i0) * (double)(r->slot_stride_bytes);
    if (!p->zc && !r->direct && dt > 0 && bytes / dt < ADVISE_BELOW_BYTES_PER_S) w->advise_left = ADVISE_RUN;
}

/* A part is done: merge its error (the lowest part's wins, so the message
 * does not depend on timing) and, with the last part, hand the slot on. */
static void finish_part(stk_reader *r, stk__slot *sl, unsigned part, uint64_t gen, const uint64_t *heap,
                        const stk_error *err)
{
    if (err->code && (!sl->err.code || part < sl->err_part)) {
        sl->err = *err;
        sl->err_part = part;
    }
    for (unsigned k = 0; k < r->nsel; k++)
        if (sl->fields[k].kind != STK_KIND_TENSOR) sl->fields[k].nbytes += heap[k];
    if (--sl->parts_left) return;
    sl->state = r->gen != gen ? SLOT_FREE : r->be ? SLOT_GATHERED : SLOT_READY;
    pthread_cond_broadcast(&r->ready_cv);
}

/* Under the lock: whether a part can be claimed now (by a worker the
 * thread knob lets work: w->index < r->knob_threads). The slot knob bounds
 * how far ahead: knob_slots <= nslots. */
static int can_claim(const stk_reader *r)
{
    return !r->stop && !r->pausing && r->claim < r->end_seq && r->claim < r->released + r->knob_slots;
}

/* Under the lock: claim the next part of the earliest unclaimed batch (the
 * batch the consumer will want first gets all the threads first). */
static void claim_part(stk_reader *r, stk__part *p)
{
    uint64_t s = r->claim;
    unsigned part = r->claim_part++;
    if (part == 0) r->slot_map[s % r->nslots] = r->free_slot[--r->nfree]; /* never empty: see can_claim */
    stk__slot *sl = &r->slots[stk__slot_index(r, s)];
    if (part == 0) sl->nparts = r->parts_now; /* the thread knob now: the batch is the same in any parts */
    if (r->claim_part == sl->nparts) {
        r->claim++;
        r->claim_part = 0;
    }
    if (part == 0) {
        sl->seq = s;
        sl->state = SLOT_BUSY;
        sl->parts_left = sl->nparts;
        sl->busy = sl->timed_busy = 0;
        for (uint32_t k = 0; r->mix_timed && k < r->mix->S; k++) sl->src_busy[k] = 0;
        sl->err.code = STK_OK;
        sl->err.msg[0] = 0;
        for (unsigned k = 0; k < r->nsel; k++) sl->fields[k].nbytes = 0;
    }
    stk__ioq *q = p->q;
    stk__qentry **blk = p->blk, **own = p->own, **pre = p->pre;
    memset(p, 0, sizeof *p);
    p->q = q;
    p->blk = blk;
    p->own = own;
    p->pre = pre;
    p->sl = sl;
    p->s = s;
    p->gen = r->gen;
    p->part = part;
    r->active++;
    if (r->claim_part && r->idle) pthread_cond_signal(&r->work_cv); /* more parts: another hand */
}

/* Unlocked: everything before the part's reads are waited for. */
static void begin(stk_reader *r, stk__worker *w, stk__part *p, uint64_t *win_epoch, uint64_t *win_next)
{
    double t0 = stk__now();
    STK_TRACE_PUSH(r->tl, STK_TRACK_WORKER((unsigned)(w - r->workers)), "begin", p->s, p->part);
    if (r->be) { /* the staging buffer's last upload must be over; a device fault surfaces here */
        double h2d = stk__upload_reclaim(r, (unsigned)(p->sl - r->slots), &p->err);
        if (p->part == 0) w->h2d += h2d;
        if (p->err.code) p->over = 1;
    }
    if (r->release && p->part == 0) release_consumed(r, p->s, win_epoch, win_next);
    if (!p->err.code) part_begin(r, w, p);
    STK_TRACE_POP(r->tl, STK_TRACK_WORKER((unsigned)(w - r->workers)));
    p->busy = stk__now() - t0;
}

/* Unlocked: the rest of the part's work (other: the worker's next part, if
 * begun). */
static void end(stk_reader *r, stk__worker *w, stk__part *p, const stk__part *other)
{
    double t0 = stk__now();
    STK_TRACE_PUSH(r->tl, STK_TRACK_WORKER((unsigned)(w - r->workers)), "gather", p->s, p->part);
    if (r->tl && w->cropper)
        stk__cropper_trace(w->cropper, r->tl, STK_TRACK_WORKER((unsigned)(w - r->workers)), p->s, p->part);
    part_end(r, w, p, other);
    if (r->zcache) unpin_blocks(r, w);
    STK_TRACE_POP(r->tl, STK_TRACK_WORKER((unsigned)(w - r->workers)));
    p->busy += stk__now() - t0;
}

/* A worker holds at most r->parts_ahead parts begun: the one it is ending
 * and, on the direct path, those after it, whose reads are already queued
 * (two, or more for remote shards: io_plan.c). They end in the order begun. */
_Static_assert(sizeof((stk__worker *)0)->ioq / sizeof(stk__ioq *) == STK__PARTS_AHEAD_MAX,
               "a worker's queues: one per part it may hold begun");

void *stk__worker_main(void *arg)
{
    stk__worker *w = arg;
    stk_reader *r = w->r;
    uint64_t win_epoch = UINT64_MAX, win_next = 0;
    const unsigned depth = r->parts_ahead;
    stk__part parts[STK__PARTS_AHEAD_MAX];
    memset(parts, 0, sizeof parts);
    for (unsigned i = 0; i < depth; i++) {
        parts[i].q = w->ioq[i];
        parts[i].blk = w->qblk[i & 1];
        parts[i].own = w->qown[i & 1];
        parts[i].pre = w->qpre[i & 1];
    }
    unsigned cur = 0;  /* the oldest part begun */
    unsigned have = 0; /* parts[cur], parts[cur + 1], ... (mod depth) are begun and not yet ended */
    pthread_mutex_lock(&r->mu);
    for (;;) {
        int can = w->index < r->knob_threads && can_claim(r);
        if (!have && !can) {
            if (r->stop) break;
            if (w->index >= r->knob_threads) { /* parked by the thread knob */
                pthread_cond_wait(&r->knob_cv, &r->mu);
                continue;
            }
            r->idle++;
            pthread_cond_wait(&r->work_cv, &r->mu);
            r->idle--;
            continue;
        }
        /* read ahead only when no other worker is idle: it would take the
         * part sooner, and batches stay spread over the workers */
        /* a ramped window (parts_first): shallow until the first batch is out */
        unsigned ahead = r->consume > r->first_seq ? depth : r->parts_first;
        if (can && (!have || (r->direct && !r->idle && have < ahead))) {
            stk__part *next = &parts[(cur + have) % depth];
            claim_part(r, next);
            pthread_mutex_unlock(&r->mu);
            begin(r, w, next, &win_epoch, &win_next);
            pthread_mutex_lock(&r->mu);
            if (++have < depth) continue; /* see whether another can be begun */
        }
        stk__part *next = have > 1 ? &parts[(cur + 1) % depth] : NULL;
        stk__part *p = &parts[cur];
        pthread_mutex_unlock(&r->mu);
        end(r, w, p, next);
        pthread_mutex_lock(&r->mu);
        r->active--;
        r->st_busy += p->busy;
        p->sl->busy += p->busy;
        for (uint32_t k = 0; r->mix_timed && k < r->mix->S; k++) {
            p->sl->src_busy[k] += p->src_busy[k];
            p->sl->timed_busy += p->src_busy[k];
        }
        r->st_h2d += w->h2d;
        w->h2d = 0;
        r->st_crop += w->crop_s;
        r->st_read_wait += w->read_wait_s;
        w->crop_s = w->read_wait_s = 0;
        if (w->cropper) stk__cropper_take(w->cropper, r->st_stage);
        r->st_verified += w->verified;
        w->verified = 0;
        finish_part(r, p->sl, p->part, p->gen, p->heap, &p->err);
        if (!r->active) pthread_cond_broadcast(&r->ready_cv); /* restart_at waits for that */
        have--;
        cur = (cur + 1) % depth;
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ------------------------------------------------------------- consumer */

/* Hand the held slot back. Returns 1 when an idle worker should be woken
 * (after unlocking: a woken worker must not find the mutex still held).
 * Workers are woken once half the ring is free rather than for every slot:
 * a wake-up is a system call on the consumer's thread, and the ring stays
 * half full meanwhile. A consumer about to block wakes them regardless. */
static int release_locked(stk_reader *r)
{
    if (r->released >= r->consume) return 0;
    stk_error e = {STK_OK, ""};
    if (r->be && stk__upload_release(r, stk__slot_index(r, r->consume - 1), &e) && !r->sticky.code)
        r->sticky = e; /* the buffer must not be reused on an unmarked stream: stop here */
    for (; r->released < r->consume; r->released++)
        r->free_slot[r->nfree++] = stk__slot_index(r, r->released);
    /* claims may reach released + knob_slots; a prefetch knob lowered while
     * more were claimed leaves claim above that until the consumer catches
     * up: no slot is free then (the difference must not wrap) */
    uint64_t room = r->released + r->knob_slots, free_slots = room > r->claim ? room - r->claim : 0,
             enough = r->knob_slots / 2 ? r->knob_slots / 2 : 1;
    return r->idle > 0 && (free_slots >= enough || r->claim_part);
}

void stk_reader_release(stk_reader *r)
{
    pthread_mutex_lock(&r->mu);
    int wake = release_locked(r);
    pthread_mutex_unlock(&r->mu);
    if (wake) pthread_cond_signal(&r->work_cv);
}

static const stk_batch *fail_next(stk_reader *r, const stk_error *e, stk_error *err)
{
    r->sticky = *e;
    if (err) *err = *e;
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* One lock section when the batch is ready: the median call must cost a few
 * microseconds. The worker wake-up that the released slot allows is sent
 * after unlocking (or before blocking, so that a worker can fill the slot
 * we are about to wait for). */
const uint64_t *stk_batch_shapes(const stk_batch *b, unsigned field)
{
    if (!b || field >= b->nfields) return NULL;
    const stk__slot *sl = (const stk__slot *)(const void *)((const char *)b - offsetof(stk__slot, batch));
    return sl->field_shapes[field];
}

/* Under the lock: a delivered batch of a mixture in its sources' statistics.
 * The workers' time: what was timed per source (mix_timed), the rest (the
 * part's setup; all of it for records that cost no more than their copy)
 * shared by bytes. */
static void count_sources(stk_reader *r, const stk__slot *sl)
{
    uint64_t bytes[STK__MIX_MAX] = {0}, all = 0;
    for (uint32_t i = 0; i < sl->batch.size; i++) {
        uint64_t b = r->slot_stride_bytes;
        for (unsigned k = 0; k < r->nsel; k++)
            if (sl->fields[k].values) b += sl->fields[k].values[i].size;
        uint32_t s = sl->sources[i];
        r->st_src_samples[s]++;
        bytes[s] += b;
        all += b;
    }
    double rest = sl->busy > sl->timed_busy ? sl->busy - sl->timed_busy : 0;
    for (uint32_t s = 0; s < r->mix->S; s++) {
        r->st_src_bytes[s] += bytes[s];
        if (r->mix_timed) r->st_src_busy[s] += sl->src_busy[s];
        if (all) r->st_src_busy[s] += rest * (double)bytes[s] / (double)all;
    }
}

const stk_batch *stk_reader_next(stk_reader *r, stk_error *err)
{
    pthread_mutex_lock(&r->mu);
    int wake = release_locked(r);
    if (r->sticky.code) {
        stk_error e = r->sticky;
        if (wake) pthread_cond_signal(&r->work_cv);
        return fail_next(r, &e, err);
    }
    if (r->consume >= r->end_seq) {
        pthread_mutex_unlock(&r->mu);
        if (wake) pthread_cond_signal(&r->work_cv);
        stk_error_set(err, STK_OK, "end of stream");
        return NULL;
    }
    stk__slot *sl = &r->slots[stk__slot_index(r, r->consume)]; /* stale until claimed: seq tells */
    double t0 = stk__now();
    if (r->st_start == 0) r->st_start = t0;
    /* a pause since the last batch was returned: the consumer's step */
    if (r->st_last_return > 0 && t0 - r->st_last_return >= STK__STEP_MIN_S) r->st_steps++;
    unsigned ready = 0, making = 0;
    /* only batches [consume, claim], the one partly claimed included, can
     * be ready or in the making: the slots of the ring beyond are idle. A
     * batch not claimed yet has a stale map entry (a slot another batch may
     * hold now): its slot counts only when it holds that batch (seq) */
    for (uint64_t q = r->consume; q <= r->claim && q < r->consume + r->nslots; q++) {
        const stk__slot *qs = &r->slots[stk__slot_index(r, q)];
        if (qs->seq != q) continue;
        ready += qs->state == SLOT_READY;
        making += qs->state == SLOT_BUSY || qs->state == SLOT_GATHERED;
    }
    r->st_ready_sum += ready;
    STK_TRACE_PUSH(r->tl, STK_TRACK_CONSUMER, "next", r->consume, 0);
    STK_TRACE_COUNTER(r->tl, STK_TRACK_CONSUMER, "batches ready", ready);
    STK_TRACE_COUNTER(r->tl, STK_TRACK_CONSUMER, "bytes in flight", (double)making * (double)r->slot_bytes);
    if (!(sl->state == SLOT_READY && sl->seq == r->consume)) {
        STK_TRACE_PUSH(r->tl, STK_TRACK_CONSUMER, "wait", r->consume, 0);
        while (!(sl->state == SLOT_READY && sl->seq == r->consume)) {
            if (r->idle && r->claim < r->released + r->knob_slots && r->claim < r->end_seq) {
                pthread_cond_signal(&r->work_cv); /* about to block: no batching of wake-ups */
                wake = 0;
            }
            pthread_cond_wait(&r->ready_cv, &r->mu);
            sl = &r->slots[stk__slot_index(r, r->consume)]; /* claimed meanwhile */
        }
        STK_TRACE_POP(r->tl, STK_TRACK_CONSUMER);
    }
    unsigned held = stk__slot_index(r, r->consume++);
    stk_error e = sl->err;
    if (e.code) {
        r->st_wait += stk__now() - t0;
        if (wake) pthread_cond_signal(&r->work_cv);
        STK_TRACE_POP(r->tl, STK_TRACK_CONSUMER);
        return fail_next(r, &e, err);
    }
    r->st_batches++;
    r->st_samples += sl->batch.size;
    for (unsigned k = 0; k < r->nsel; k++) r->st_bytes += sl->fields[k].nbytes;
    if (r->mix) count_sources(r, sl);
    for (unsigned k = 0; k < r->nsel; k++)
        if (sl->fields[k].zero_copy) {
            r->st_zero_copy++;
            break;
        }
    if (!r->be) {
        r->st_last_return = stk__now();
        r->st_wait += r->st_last_return - t0;
    }
    int tune = r->tune_fn && r->st_batches >= r->tune_at;
    pthread_mutex_unlock(&r->mu);
    if (wake) pthread_cond_signal(&r->work_cv);
    if (r->be) {
        /* Device path: the consumer's stream waits for the upload (for the
         * host backend without a stream, this thread does: part of the wait). */
        stk__upload_acquire(r, held, &e);
        double t1 = stk__now();
        pthread_mutex_lock(&r->mu);
        r->st_wait += t1 - t0;
        r->st_last_return = t1;
        if (e.code) {
            STK_TRACE_POP(r->tl, STK_TRACK_CONSUMER);
            return fail_next(r, &e, err);
        }
        pthread_mutex_unlock(&r->mu);
    }
    if (tune) { /* the tuner's period is over: it samples, may turn knobs */
        double h0 = stk__now();
        r->tune_fn(r);
        pthread_mutex_lock(&r->mu);
        if (r->st_last_return > 0) r->st_last_return += stk__now() - h0; /* not the consumer's step */
        pthread_mutex_unlock(&r->mu);
    }
    if (err) {
        err->code = STK_OK;
        err->msg[0] = 0;
    }
    STK_TRACE_POP(r->tl, STK_TRACK_CONSUMER);
    return &sl->batch;
}

/* Stop handing out work, wait for the workers to go idle, and restart the
 * stream at sequence s. */
static void restart_at(stk_reader *r, uint64_t s)
{
    pthread_mutex_lock(&r->mu);
    __atomic_store_n(&r->gen, r->gen + 1, __ATOMIC_RELAXED);
    r->pausing = 1; /* no new claims while the ring drains */
    while (r->active) pthread_cond_wait(&r->ready_cv, &r->mu);
    r->pausing = 0;
    /* The batch the caller holds is released here: on the device path its
     * buffer may be refilled only after the caller's stream has passed this. */
    if (r->be && r->released < r->consume) stk__upload_release(r, stk__slot_index(r, r->consume - 1), NULL);
    stk__engine_free_slots(r);
    r->claim = r->consume = r->released = r->next_copy = r->first_seq = s;
    r->claim_part = 0;
    r->sticky.code = STK_OK;
    r->sticky.msg[0] = 0;
    pthread_cond_broadcast(&r->work_cv);
    pthread_mutex_unlock(&r->mu);
    stk__fill_seek(r, s);
}

int stk_reader_seek(stk_reader *r, uint64_t epoch, uint64_t batch, stk_error *err)
{
    if (batch >= r->nbatches)
        return stk_error_set(err, STK_E_RANGE, "seek: batch %llu out of range (%llu batches per epoch)",
                             (unsigned long long)batch, (unsigned long long)r->nbatches);
    /* positions stay below 2^63 (what a saved state holds), so that the ring's
     * arithmetic (sequence + slots) cannot wrap */
    if (epoch >= ((uint64_t)INT64_MAX - r->nslots) / r->nbatches)
        return stk_error_set(err, STK_E_RANGE, "seek: epoch %llu out of range", (unsigned long long)epoch);
    restart_at(r, epoch * r->nbatches + batch);
    return STK_OK;
}

void stk_reader_set_epochs(stk_reader *r, uint64_t epochs)
{
    pthread_mutex_lock(&r->mu);
    r->end_seq = epochs && epochs <= UINT64_MAX / r->nbatches ? epochs * r->nbatches : UINT64_MAX;
    pthread_cond_broadcast(&r->work_cv);
    pthread_mutex_unlock(&r->mu);
}

uint64_t stk_reader_batches_per_epoch(const stk_reader *r) { return r->nbatches; }

void stk_reader_position(const stk_reader *r, uint64_t *epoch, uint64_t *batch)
{
    stk_reader *m = (stk_reader *)r; /* the mutex only */
    pthread_mutex_lock(&m->mu);
    uint64_t s = r->consume;
    pthread_mutex_unlock(&m->mu);
    if (epoch) *epoch = s / r->nbatches;
    if (batch) *batch = s % r->nbatches;
}

const stk_reader_options *stk_reader_get_options(const stk_reader *r) { return &r->o; }
const stk_dataset *stk_reader_dataset(const stk_reader *r) { return r->ds; }
uint64_t stk_reader_quasi_block_records(const stk_reader *r)
{
    return r->o.order == STK_ORDER_QUASI ? r->K : 0;
}

/* ------------------------------------------------------------- statistics */

void stk_reader_stats_get(const stk_reader *r, stk_reader_stats *s)
{
    stk_reader *m = (stk_reader *)r;
    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&m->mu);
    s->batches = r->st_batches;
    s->samples = r->st_samples;
    s->bytes = r->st_bytes;
    s->zero_copy_batches = r->st_zero_copy;
    s->verified = r->st_verified;
    s->wall_s = r->st_start ? stk__now() - r->st_start : 0;
    s->wait_s = r->st_wait;
    s->busy_s = r->st_busy;
    s->mean_ready = r->st_batches ? r->st_ready_sum / (double)r->st_batches : 0;
    s->h2d_s = r->st_h2d;
    s->h2d_bytes = r->st_h2d_bytes;
    s->threads = r->knob_threads; /* now: the tuner may have turned them since open */
    s->prefetch = r->knob_slots - 1;
    pthread_mutex_unlock(&m->mu);
    s->device = r->o.device;
}

void stk_reader_stats_reset(stk_reader *r)
{
    pthread_mutex_lock(&r->mu);
    r->st_batches = r->st_samples = r->st_bytes = r->st_zero_copy = r->st_verified = 0;
    for (uint32_t i = 0; r->mix && i < r->mix->S; i++) {
        r->st_src_samples[i] = r->st_src_bytes[i] = 0;
        r->st_src_busy[i] = 0;
    }
    r->st_start = 0;
    r->st_wait = r->st_busy = r->st_h2d = 0;
    r->st_h2d_bytes = 0;
    r->st_ready_sum = 0;
    r->st_crop = r->st_read_wait = r->st_last_return = 0;
    memset(r->st_stage, 0, sizeof r->st_stage);
    r->st_steps = 0;
    r->st_faults0 = stk__major_faults();
    r->st_resets++;
    r->tune_at = 0; /* the tuner's baseline is gone: let it take another */
    pthread_mutex_unlock(&r->mu);
}

/* ------------------------------------------------------------- knobs */

void stk__engine_free_slots(stk_reader *r)
{
    r->nfree = 0;
    for (unsigned i = r->nslots; i-- > 0;) {
        r->slots[i].state = SLOT_FREE;
        r->free_slot[r->nfree++] = i; /* slot 0 on top */
    }
}

unsigned stk__engine_parts(const stk_reader *r, unsigned threads)
{
    return r->o.batch_size >= 2 * threads ? threads : 1;
}

static unsigned clamp_knob(unsigned v, unsigned max) { return v < 1 ? 1 : v > max ? max : v; }

void stk__engine_set_knobs(stk_reader *r, unsigned threads, unsigned prefetch, unsigned io_depth)
{
    pthread_mutex_lock(&r->mu);
    r->knob_threads = clamp_knob(threads, r->nworkers);
    r->parts_now = stk__engine_parts(r, r->knob_threads);
    r->knob_slots = clamp_knob(prefetch, r->nslots - 1) + 1;
    r->knob_depth = clamp_knob(io_depth, r->io_depth_max);
    if (r->io) stk__io_set_depth(r->io, r->knob_depth);
    pthread_cond_broadcast(&r->knob_cv); /* parked workers: look again */
    pthread_cond_broadcast(&r->work_cv); /* idle ones: more slots, or park */
    pthread_mutex_unlock(&r->mu);
}

static double cpu_seconds(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts)) return 0;
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void stk__engine_sample(stk_reader *r, stk__engine_counters *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&r->mu);
    s->t = stk__now();
    s->batches = r->st_batches;
    s->bytes = r->st_bytes;
    s->wait_s = r->st_wait;
    s->busy_s = r->st_busy;
    s->read_wait_s = r->st_read_wait;
    s->crop_s = r->st_crop;
    s->ready_sum = r->st_ready_sum;
    s->resets = r->st_resets;
    s->knobs.threads = r->knob_threads;
    s->knobs.prefetch = r->knob_slots - 1;
    s->knobs.io_depth = r->knob_depth;
    pthread_mutex_unlock(&r->mu);
    s->max.threads = r->nworkers;
    s->max.prefetch = r->nslots - 1;
    s->max.io_depth = r->io_depth_max;
    s->direct = r->direct;
    for (unsigned i = 0; i < r->nworkers; i++) { /* the threads outlive every next */
        clockid_t id;
        if (r->workers[i].started && !pthread_getcpuclockid(r->workers[i].thread, &id))
            s->worker_cpu_s += cpu_seconds(id);
    }
    s->process_cpu_s = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
}

void stk__engine_tune_after(stk_reader *r, uint64_t batches)
{
    pthread_mutex_lock(&r->mu);
    r->tune_at = r->st_batches + (batches ? batches : 1);
    pthread_mutex_unlock(&r->mu);
}
