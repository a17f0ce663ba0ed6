/* packer/pack_workers.c - the pipeline's work for pack: a worker reads an
 * input, decodes, resizes and encodes it into its slot and hashes it
 * (pk_produce, in parallel); the ordered part hands the record to the
 * writer or records why it was skipped (pk_consume). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "pack.h"

#define MAX_FILE_BYTES ((uint64_t)1 << 30)

typedef struct {
    pk_decoder *dec;
    uint8_t *buf;
    size_t cap;
    uint8_t *jpeg; /* --image-format jpeg/original: the encoder's output, tjBufSize of the largest image */
    size_t jcap;
    pk_stage st; /* copied to pk_run.stages[k] by pk_worker_fini */
    pk_stage *out;
} worker_t;

void pk_worker_fini(void *state)
{
    worker_t *w = state;
    if (w->out) *w->out = w->st;
    pk_decoder_free(w->dec);
    free(w->jpeg);
    free(w->buf);
    free(w);
}

void *pk_worker_init(void *user, unsigned k)
{
    pk_run *r = user;
    worker_t *w = calloc(1, sizeof *w);
    if (!w || !(w->dec = pk_decoder_new())) {
        free(w);
        return NULL;
    }
    if (r->stages && k < r->nthreads) w->out = &r->stages[k];
    if (r->o->image_format != PK_IMG_RAW) {
        w->jcap = tjBufSize((int)r->o->img.size, (int)r->o->img.size, TJSAMP_420);
        w->jpeg = malloc(w->jcap);
        if (!w->jpeg) {
            pk_worker_fini(w);
            return NULL;
        }
    }
    return w;
}

/* Read a whole file into w->buf; returns its size, or -1 with res set. */
static int64_t read_input(worker_t *w, const char *path, pk_result *res)
{
    /* An input that cannot be read (vanished, no permission, a FIFO) is a
     * bad input like a corrupt one: skipped with its reason, not fatal. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    const char *why = NULL;
    if (fd < 0 || fstat(fd, &st) != 0) why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) why = "not a regular file";
    if (why) {
        res->status = PK_E_CORRUPT;
        snprintf(res->msg, sizeof res->msg, "cannot read: %s", why);
        if (fd >= 0) close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size > MAX_FILE_BYTES) {
        close(fd);
        res->status = PK_E_TOO_LARGE;
        snprintf(res->msg, sizeof res->msg, "file of %lld bytes is larger than 1 GiB", (long long)st.st_size);
        return -1;
    }
    size_t n = (size_t)st.st_size, got = 0;
    if (n + 1 > w->cap) {
        uint8_t *b = realloc(w->buf, n + 1);
        if (!b) {
            close(fd);
            res->status = PK_E_NOMEM;
            snprintf(res->msg, sizeof res->msg, "out of memory reading %zu bytes", n);
            return -1;
        }
        w->buf = b;
        w->cap = n + 1;
    }
    while (got < n) {
        ssize_t r = read(fd, w->buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    int e = errno;
    close(fd);
    if (got != n) {
        res->status = PK_E_CORRUPT;
        snprintf(res->msg, sizeof res->msg, "cannot read: %s",
                 got < n && e ? strerror(e) : "file shrank while reading");
        return -1;
    }
    return (int64_t)n;
}

/* Start reading item i's file into the page cache (pipeline prefetch): an
 * open, an fadvise and a close, 2 us here against a decode's several
 * hundred. Failures are ignored: read_input reports them when the item is
 * produced. At most the first PREFETCH_BYTES: a rare huge file's decode
 * takes long enough to hide the rest, and two windows of them must not
 * flood the page cache. */
#define PREFETCH_BYTES ((off_t)16 << 20)
void pk_prefetch(void *user, uint64_t i)
{
    pk_run *r = user;
    char *path = r->L.e[i].label < 0 ? NULL : pk_listing_path(&r->L, (size_t)i);
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY) : -1;
    free(path);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) /* not a device's readahead for an input refused anyway */
        (void)posix_fadvise(fd, 0, PREFETCH_BYTES, POSIX_FADV_WILLNEED);
    close(fd);
}

/* A JPEG input stored as it is (--image-format original): it needs no
 * resize or crop, decodes to three components (not greyscale or CMYK, which
 * the field's u8[*,*,3] could not hold), and fits a slot. */
static bool keep_original(const pk_run *r, worker_t *w, const uint8_t *data, size_t n, const pk_result *res)
{
    pk_layout l;
    if (stk__img_sniff(data, n) != STK_IMG_FMT_JPEG || n > pk_image_bytes(r->o)) return false;
    pk_layout_compute(&r->o->img, res->w, res->h, &l);
    if (l.resized_w != res->w || l.resized_h != res->h || l.w != res->w || l.h != res->h || l.crop_x ||
        l.crop_y || l.pad_x || l.pad_y)
        return false;
    return pk_jpeg_three_components(w->dec, data, n, res->w, res->h);
}

/* data[0 .. n) losslessly rewritten into slot (stk__jpeg_transcode) with
 * the run's restart markers, as baseline: true when it was and fits (kept
 * 2 when it was progressive); false leaves the slot alone (a stream it
 * cannot rewrite is stored as it is: it decodes all the same), or sets
 * res's status when out of memory. */
static bool rewrite_jpeg(const pk_run *r, const uint8_t *data, size_t n, uint8_t *slot, pk_result *res)
{
    uint8_t *b = NULL;
    size_t bn = 0;
    bool prog = false;
    stk_error e;
    if (stk__jpeg_transcode(data, n, r->o->jpeg_restart, &b, &bn, &prog, &e) == STK_IMG_E_NOMEM) {
        res->status = PK_E_NOMEM;
        snprintf(res->msg, sizeof res->msg, "%.300s", e.msg);
        return false;
    }
    /* rarely larger than the slot: then stored as it came */
    bool fits = b && bn <= pk_image_bytes(r->o);
    if (fits) {
        memcpy(slot, b, bn);
        res->out_bytes = bn;
        res->restarted = r->o->jpeg_restart != 0;
        if (prog) res->kept = 2;
    }
    free(b);
    return fits;
}

/* The image in slot (res->out_w x res->out_h RGB) as the image format wants
 * it: raw stays, JPEG is encoded (or, for a kept original, the input copied
 * or losslessly rewritten). */
static void encode_image(const pk_run *r, worker_t *w, const uint8_t *data, size_t n, uint8_t *slot,
                         pk_result *res)
{
    res->out_bytes = (uint64_t)res->out_w * res->out_h * 3;
    if (r->o->image_format == PK_IMG_RAW) return;
    if (r->o->image_format == PK_IMG_ORIGINAL && keep_original(r, w, data, n, res)) {
        res->kept = 1;
        if ((r->o->jpeg_restart || r->o->jpeg_baseline) && rewrite_jpeg(r, data, n, slot, res)) return;
        if (res->status != PK_OK) return;
        memcpy(slot, data, n);
        res->out_bytes = n;
        return;
    }
    size_t size = 0;
    stk_error e;
    if (stk__jpeg_encode(slot, res->out_w, res->out_h, r->o->quality, r->o->jpeg_restart, w->jpeg, w->jcap,
                         &size, &e)) {
        res->status = PK_E_NOMEM;
        snprintf(res->msg, sizeof res->msg, "%.300s", e.msg);
        return;
    }
    res->restarted = r->o->jpeg_restart != 0;
    memcpy(slot, w->jpeg, size);
    res->out_bytes = size;
}

void pk_produce(void *user, void *state, uint64_t i, uint8_t *slot, pk_result *res)
{
    pk_run *r = user;
    worker_t *w = state;
    if (r->L.e[i].label < 0) {
        res->status = PK_E_UNSUPPORTED;
        snprintf(res->msg, sizeof res->msg,
                 "not inside a class directory (ImageFolder wants ROOT/CLASS/FILE)");
        return;
    }
    double t0 = cli_now();
    char *path = pk_listing_path(&r->L, (size_t)i);
    int64_t n = path ? read_input(w, path, res) : -1;
    free(path);
    double t1 = cli_now();
    w->st.read += t1 - t0;
    if (n < 0) return;
    res->in_bytes = (uint64_t)n;
    res->status =
        pk_process(w->dec, w->buf, (size_t)n, &r->o->img, slot, &res->w, &res->h, res->msg, sizeof res->msg);
    if (pk_variable_images(r->o)) {
        pk_layout l;
        if (res->status == PK_OK) {
            pk_layout_compute(&r->o->img, res->w, res->h, &l);
            res->out_w = l.w, res->out_h = l.h;
            encode_image(r, w, w->buf, (size_t)n, slot, res);
        }
        w->st.decode += cli_now() - t1;
        return; /* the writer hashes it as it copies it */
    }
    double t2 = cli_now();
    w->st.decode += t2 - t1;
    /* The record's checksum, here, while the image is in this core's cache
     * and in parallel, not on the one thread that puts records in order;
     * with it the block sums the writer's whole-file hash takes instead of
     * reading the image again from this core's cache (they live in the
     * slot, after the image: see slot_bytes). */
    size_t img = pk_image_bytes(r->o);
    if (res->status == PK_OK) res->hash = stk_hash_blocks(slot, img, pk_block_sums(r->o, slot, img));
    w->st.hash += cli_now() - t2;
}

bool pk_add_skip(pk_run *r, uint64_t index, const char *reason)
{
    if (r->nskips == r->capskips) {
        size_t c = r->capskips ? 2 * r->capskips : 64;
        pk_skip *s = realloc(r->skips, c * sizeof *s);
        if (!s) return false;
        r->skips = s;
        r->capskips = c;
    }
    r->skips[r->nskips].index = index;
    if (!(r->skips[r->nskips].reason = strdup(reason))) return false;
    r->nskips++;
    return true;
}

void pk_report_bad(pk_run *r, uint64_t i, const char *msg)
{
    char *path = pk_listing_path(&r->L, (size_t)i);
    cli_progress_clear(&r->bar);
    fprintf(stderr, "pack: %s: %s%s\n", path ? path : r->L.e[i].path, msg,
            r->o->fail_fast ? " (--on-error fail: stopping)" : "");
    free(path);
}

/* The writer's waits so far, summed: its queue and the committer's. */
static double writer_waits(const pk_out *o) { return o->stats.io.queue_wait + o->stats.submit_wait; }

static int consume_one(pk_run *r, worker_t *w, uint64_t i, uint8_t **slot, const pk_result *res);

/* The ordered part, on whichever worker finished item i: timed for --stats. */
int pk_consume(void *user, void *state, uint64_t i, uint8_t **slot, const pk_result *res)
{
    pk_run *r = user;
    worker_t *w = state;
    double t0 = cli_now();
    int rc = consume_one(r, w, i, slot, res);
    w->st.consume += cli_now() - t0;
    return rc;
}

static int consume_one(pk_run *r, worker_t *w, uint64_t i, uint8_t **slot, const pk_result *res)
{
    r->done++;
    r->in_bytes += res->in_bytes;
    if (res->status) {
        pk_report_bad(r, i, res->msg);
        if (r->o->fail_fast) return r->failed_input = true, 1;
        if (!pk_add_skip(r, i, res->msg))
            return r->fatal = STK_E_NOMEM, snprintf(r->err.msg, sizeof r->err.msg, "out of memory"), 1;
    } else {
        int64_t label = r->L.e[i].label;
        uint32_t size[2] = {res->w, res->h};
        uint64_t source = i;
        bool var = pk_variable_images(r->o);
        size_t img = var ? (size_t)res->out_bytes : pk_image_bytes(r->o);
        uint64_t dims[2] = {res->out_h, res->out_w};
        /* The image is lent to the writer, which writes it from this very
         * buffer and puts it back in the pool; the pipeline gets another. */
        uint8_t *px = *slot;
        double t0 = cli_now();
        *slot = pk_pool_get(r->pool);
        double t1 = cli_now(), waited = writer_waits(&r->out);
        stk_value v[4] = {{px, img}, {&label, 8}, {size, 8}, {&source, 8}};
        stk_prehash pre = {res->hash, pk_block_sums(r->o, px, img)};
        r->fatal =
            pk_out_append(&r->out, v, var ? dims : NULL, var ? NULL : &pre, pk_pool_done, r->pool, &r->err);
        waited = writer_waits(&r->out) - waited;
        w->st.pool_wait += t1 - t0;
        w->st.writer_wait += waited;
        w->st.append += cli_now() - t1 - waited;
        if (r->fatal) return 1;
        r->packed++;
        if (r->o->image_format == PK_IMG_ORIGINAL) ++*(res->kept ? &r->kept : &r->reencoded);
        r->baseline += res->kept == 2;
        r->restarted += res->restarted;
    }
    if (cli_progress_due(&r->bar, r->done)) {
        char extra[96];
        double el = cli_now() - r->bar.start;
        snprintf(extra, sizeof extra, "%.1f MB/s, %zu skipped", el > 0 ? (double)r->in_bytes / el / 1e6 : 0.0,
                 r->nskips);
        cli_progress_update(&r->bar, r->done, extra);
    }
    return 0;
}
