/* load_bench - the image pipeline at load against its limit.
 *
 *   load_bench DATASET --mode crop|decode [--threads N] [--size S] [--batch B]
 *              [--seconds X] [--dtype u8|f32] [--eval]
 *
 * crop:   libstoker's reader, shuffled, batches of B: RandomResizedCrop(S) +
 *         flip of the 'image' field on the worker threads, u8 NHWC, or with
 *         --dtype f32 normalised to f32 NCHW there too (no device).
 * decode: the limit: TurboJPEG decoding the dataset's stored JPEGs (an
 *         'image' field with codec jpeg) at full size to RGB, on N threads,
 *         each over its own share, round and round.
 * path:   the crop's decode + resize alone on those JPEGs, N threads as
 *         decode: --path old (the region decode at full scale + resize, a
 *         whole decode for --eval: the load path before the planner) or new
 *         (image/'s planner: the region at the smallest power-of-two DCT
 *         scale + the fractional-box resize), with the same boxes (torchvision
 *         RandomResizedCrop boxes drawn from a per-image seed, or the eval
 *         crop), so the two compare on the same work. --path planes: a
 *         probe of the raw-plane route (not a load path): the whole frame
 *         decoded to its YCbCr planes at full scale (TurboJPEG, as pack
 *         does) and resampled by stk__resize_ycc (chroma upsampling folded
 *         in, colour conversion at output size): the eval crop's exact
 *         window; a random crop as the window of a resize that maps its box
 *         to S x S (the same taps, box edges rounded to output pixels, no
 *         flip). Sources that have no planes take the planner's path.
 *         --path new takes the load path's region-decode settings
 *         (stk__jpeg_set_opts: arena + merged upsampling + splice) unless --jopts N
 *         gives others; --scales all lets the planner take every N/8.
 *         --psnr: one pass, the PSNR of the path's crops against a full
 *         decode + the same box resample (the decode's own effect), instead
 *         of a rate. --ab 0,4,1,0s: the new path under each setting in turn
 *         (jopts values; s: every DCT scale), 32 images each in rotating
 *         order, rated in images per thread-CPU second (steadier than wall
 *         time on a shared machine).
 * After one untimed pass (first touch of buffers), images are counted for
 * X seconds. Prints "RESULT <name> <images/s>". */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <turbojpeg.h>

#include "crop_box.h"
#include "image.h"
#include "stoker/reader.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "load_bench: %s: %s\n", what, msg);
    exit(1);
}

typedef struct {
    const stk_value *v;
    const uint64_t *hw; /* height, width per value */
    size_t n;
    double seconds;
    uint64_t done;
    int path; /* 0: the TurboJPEG limit; 1: the old crop path; 2: the planner's; 3: planes probe */
    int eval;
    uint32_t size;
    unsigned jopts, scales; /* stk__jpeg_set_opts for the new path; the planner's allowed scales */
    int psnr;               /* one pass: PSNR of the path against a full decode + the same resample */
    double psnr_sum, psnr_min;
    uint64_t psnr_same;
    /* --ab: settings taken in turn, 32 images each, in rotating order; per
     * setting the thread's CPU seconds and images */
    unsigned ab_n, ab_opts[8], ab_scales[8];
    double ab_cpu[8];
    uint64_t ab_done[8];
} share_t;

typedef struct {
    stk__jpeg *j;
    stk__resizer *rs;
    stk__img_buf px;
    uint8_t *out;
    stk__jpeg *jref; /* --psnr: the reference decoder, its image and output */
    stk__img_buf ref;
    uint8_t *rout;
} crop_t;

/* One crop of value k by the old or the new path into c->out. */
static void crop_one(share_t *s, crop_t *c, size_t k)
{
    uint32_t H = (uint32_t)s->hw[2 * k], W = (uint32_t)s->hw[2 * k + 1], o = s->size;
    const uint8_t *data = s->v[k].data;
    size_t len = (size_t)s->v[k].size;
    lb_crop cb;
    lb_crop_of(k, W, H, o, s->eval, &cb);
    stk__img_layout l;
    stk__img_eval_layout(o, o, W, H, &l);
    stk__rect win = {0, 0, o, o};
    stk__jpeg_info info;
    stk_error e;
    const uint8_t *at;
    size_t stride;
    if (s->path == 1 && !s->eval) {
        if (stk__jpeg_decode_region(c->j, data, len, W, H, (uint32_t)cb.b.x0, (uint32_t)cb.b.y0,
                                    (uint32_t)cb.b.w, (uint32_t)cb.b.h, &c->px, 64, &at, &stride, &e))
            die("old path", e.msg);
        stk__rgb_view v = {at, (uint32_t)cb.b.w, (uint32_t)cb.b.h, stride, 0};
        if (stk__resize(c->rs, &v, o, o, &win, cb.flip, c->out, (size_t)o * 3)) die("old path", "resize");
    } else if (s->path == 1) {
        if (stk__jpeg_header(c->j, data, len, &info, &e) ||
            stk__img_buf_reserve(&c->px, (size_t)W * H * 3 + 64, "image", &e) ||
            stk__jpeg_decode(c->j, data, len, &info, STK_IMG_PF_RGB, 1, c->px.p, &e))
            die("old path", e.msg);
        stk__rgb_view v = {c->px.p, W, H, (size_t)W * 3, 64};
        stk__rect ew = {l.crop_x, l.crop_y, o, o};
        if (stk__resize(c->rs, &v, l.resized_w, l.resized_h, &ew, 0, c->out, (size_t)o * 3))
            die("old path", "resize");
    } else if (s->path == 3 && !stk__jpeg_header(c->j, data, len, &info, &e) && stk__jpeg_planar_ok(&info)) {
        stk__ycc_view yv;
        if (stk__jpeg_decode_planes(c->j, data, len, &info, &c->px, &yv, &e)) die("planes probe", e.msg);
        uint64_t rw = l.resized_w, rh = l.resized_h;
        stk__rect pw = {l.crop_x, l.crop_y, o, o};
        if (!s->eval) lb_box_window(W, H, &cb, o, &rw, &rh, &pw);
        if (stk__resize_ycc(c->rs, &yv, rw, rh, &pw, c->out, (size_t)o * 3)) die("planes probe", "resize");
    } else {
        stk__jpeg_plan p;
        stk__jpeg_plan_make(W, H, cb.x, cb.y, cb.w, cb.h, o, o, s->scales, s->eval, &p);
        if (stk__jpeg_decode_plan(c->j, data, len, W, H, &p, &c->px, 64, &at, &stride, &e))
            die("new path", e.msg);
        stk__rgb_view v = {at, p.w, p.h, stride, 0};
        if (stk__resize_box(c->rs, &v, p.bx, p.by, p.bw, p.bh, o, o, &win, cb.flip, c->out, (size_t)o * 3))
            die("new path", "resize");
        if (s->psnr) { /* the reference: a full decode (Pillow's pixels), the same box resampled */
            if (stk__jpeg_header(c->jref, data, len, &info, &e) ||
                stk__img_buf_reserve(&c->ref, (size_t)W * H * 3 + 64, "image", &e) ||
                stk__jpeg_decode(c->jref, data, len, &info, STK_IMG_PF_RGB, 1, c->ref.p, &e))
                die("reference", e.msg);
            stk__rgb_view rv = {c->ref.p, W, H, (size_t)W * 3, 64};
            if (stk__resize_box(c->rs, &rv, cb.x, cb.y, cb.w, cb.h, o, o, &win, cb.flip, c->rout,
                                (size_t)o * 3))
                die("reference", "resize");
            double se = 0;
            for (size_t i = 0; i < (size_t)o * o * 3; i++) {
                double d = (double)c->out[i] - c->rout[i];
                se += d * d;
            }
            double db = se == 0 ? 100 : 10 * log10(255.0 * 255.0 / (se / ((double)o * o * 3)));
            s->psnr_sum += db;
            s->psnr_same += se == 0;
            if (db < s->psnr_min) s->psnr_min = db;
        }
    }
}

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* --ab: the settings in turn over the same runs of 32 images. */
static void ab_loop(share_t *s, crop_t *c)
{
    double t0 = now();
    for (size_t k = 0, round = 0; now() - t0 < s->seconds; round++) {
        size_t n = s->n - k < 32 ? s->n - k : 32;
        for (unsigned i = 0; i < s->ab_n; i++) {
            unsigned a = (unsigned)((i + round) % s->ab_n);
            stk__jpeg_set_opts(c->j, s->ab_opts[a]);
            s->scales = s->ab_scales[a];
            double c0 = cpu_now();
            for (size_t q = 0; q < n; q++) crop_one(s, c, k + q);
            s->ab_cpu[a] += cpu_now() - c0;
            s->ab_done[a] += n;
        }
        k = (k + n) % s->n;
    }
    s->done = 1;
    s->seconds = now() - t0;
}

static void *path_loop(void *arg)
{
    share_t *s = arg;
    crop_t c = {stk__jpeg_new(),
                stk__resizer_new(),
                {0},
                malloc((size_t)s->size * s->size * 3),
                stk__jpeg_new(),
                {0},
                malloc((size_t)s->size * s->size * 3)};
    if (!c.j || !c.rs || !c.out || !c.jref || !c.rout) die("path", "out of memory");
    stk__jpeg_set_opts(c.j, s->path == 2 ? s->jopts : 0); /* new: the load path's settings */
    for (size_t k = 0; k < s->n; k++) crop_one(s, &c, k); /* untimed: first touch */
    if (s->psnr) {
        s->done = s->n;
        s->seconds = 1;
        s->psnr = 0;
    }
    if (s->done) goto out;
    if (s->ab_n) {
        ab_loop(s, &c);
        goto out;
    }
    double t0 = now();
    for (size_t k = 0;; k = (k + 1) % s->n) {
        crop_one(s, &c, k);
        if ((++s->done & 15) == 0 && now() - t0 >= s->seconds) break;
    }
    s->seconds = now() - t0;
out:
    stk__jpeg_free(c.j);
    stk__jpeg_free(c.jref);
    stk__resizer_free(c.rs);
    stk__img_buf_free(&c.px);
    stk__img_buf_free(&c.ref);
    free(c.out);
    free(c.rout);
    return NULL;
}

static void decode_one(share_t *s, tjhandle tj, size_t k, uint8_t **px, size_t *cap)
{
    size_t need = (size_t)(s->hw[2 * k] * s->hw[2 * k + 1] * 3);
    if (need > *cap && !(*px = realloc(*px, *cap = need))) die("decode", "out of memory");
    if (tjDecompress2(tj, s->v[k].data, (unsigned long)s->v[k].size, *px, (int)s->hw[2 * k + 1], 0,
                      (int)s->hw[2 * k], TJPF_RGB, 0) != 0)
        die("decode", tjGetErrorStr2(tj));
}

static void *decode_loop(void *arg)
{
    share_t *s = arg;
    tjhandle tj = tjInitDecompress();
    uint8_t *px = NULL;
    size_t cap = 0;
    for (size_t k = 0; k < s->n; k++) decode_one(s, tj, k, &px, &cap); /* untimed: first touch */
    double t0 = now();
    for (size_t k = 0;; k = (k + 1) % s->n) {
        decode_one(s, tj, k, &px, &cap);
        if ((++s->done & 15) == 0 && now() - t0 >= s->seconds) break;
    }
    s->seconds = now() - t0;
    free(px);
    tjDestroy(tj);
    return NULL;
}

/* Images/s of `which` (share_t.path) on `threads` threads, each share as
 * proto; with proto->psnr, prints the PSNR line instead and returns 0. */
static double run_decode(const char *path, unsigned threads, double seconds, int which, int eval,
                         uint32_t size, const share_t *proto)
{
    stk_error e;
    stk_dataset *ds = stk_dataset_open(path, &e);
    if (!ds) die(path, e.msg);
    int f = stk_schema_find(stk_dataset_schema(ds), "image");
    if (f < 0 || stk_dataset_schema(ds)->fields[f].codec != STK_CODEC_JPEG)
        die(path, "no JPEG 'image' field");
    size_t n = (size_t)stk_dataset_records(ds);
    stk_value *v = malloc(n * sizeof *v);
    uint64_t *hw = malloc(2 * n * sizeof *hw);
    for (size_t i = 0; i < n; i++) {
        size_t s;
        uint64_t local, dims[STK_MAX_DIMS];
        if (stk_dataset_value(ds, (unsigned)f, i, &v[i].data, &v[i].size, &e) ||
            stk_dataset_locate(ds, i, &s, &local, &e) ||
            stk_shard_value_shape(stk_dataset_shard(ds, s), (unsigned)f, local, dims, &e))
            die(path, e.msg);
        hw[2 * i] = dims[0], hw[2 * i + 1] = dims[1];
    }
    pthread_t th[64];
    share_t sh[64];
    size_t per = n / threads;
    for (unsigned t = 0; t < threads; t++) {
        sh[t] = *proto;
        sh[t].v = v + t * per, sh[t].hw = hw + 2 * t * per, sh[t].n = per, sh[t].seconds = seconds;
        sh[t].done = 0, sh[t].path = which, sh[t].eval = eval, sh[t].size = size;
        sh[t].psnr_sum = 0, sh[t].psnr_min = 1e9, sh[t].psnr_same = 0;
        pthread_create(&th[t], NULL, which ? path_loop : decode_loop, &sh[t]);
    }
    double rate = 0, sum = 0, worst = 1e9;
    uint64_t same = 0, cnt = 0;
    for (unsigned t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        rate += (double)sh[t].done / sh[t].seconds;
        sum += sh[t].psnr_sum, same += sh[t].psnr_same, cnt += sh[t].n;
        worst = sh[t].psnr_min < worst ? sh[t].psnr_min : worst;
    }
    for (unsigned a = 0; a < proto->ab_n; a++) {
        double cpu = 0;
        uint64_t d = 0;
        for (unsigned t = 0; t < threads; t++) cpu += sh[t].ab_cpu[a], d += sh[t].ab_done[a];
        printf("AB opts %u%s: %.1f images per CPU second (%llu images)\n", proto->ab_opts[a],
               proto->ab_scales[a] == STK_IMG_SCALES_ALL ? " scales all" : "", (double)d / cpu,
               (unsigned long long)d);
    }
    if (proto->psnr) {
        printf("PSNR %s: %llu images, mean %.2f dB, worst %.2f dB, %llu identical (100 dB)\n", path,
               (unsigned long long)cnt, sum / (double)cnt, worst, (unsigned long long)same);
        rate = 0;
    }
    free(v);
    free(hw);
    stk_dataset_close(ds);
    return rate;
}

static double run_crop(const char *path, unsigned threads, uint32_t size, uint32_t batch, double seconds,
                       int f32, int eval)
{
    stk_error e;
    stk_dataset *ds = stk_dataset_open(path, &e);
    if (!ds) die(path, e.msg);
    int f = stk_schema_find(stk_dataset_schema(ds), "image");
    if (f < 0) die(path, "no 'image' field");
    uint64_t n = stk_dataset_records(ds);
    stk_transform t;
    stk_transform_imagenet(&t, !eval, size);
    if (!f32) t.dtype = STK_DT_U8, t.layout = STK_IMAGE_NHWC;
    stk_reader_options o;
    stk_reader_options_init(&o);
    o.batch_size = batch;
    o.order = STK_ORDER_SHUFFLE;
    o.threads = threads;
    o.rank = 0, o.world_size = 1;
    o.fields = "image";
    o.transform = &t;
    o.device = STK_DEVICE_NONE; /* the workers crop (and normalise) u8 RGB images, square ones too */
    stk_reader *r = stk_reader_open_dataset(ds, &o, &e);
    if (!r) die(path, e.msg);
    uint64_t warm = n / batch + 1, imgs = 0; /* one epoch untimed */
    for (uint64_t b = 0; b < warm; b++)
        if (!stk_reader_next(r, &e) || stk_reader_synchronize(r, &e)) die(path, e.msg);
    double t0 = now(), el = 0;
    while ((el = now() - t0) < seconds) {
        const stk_batch *b = stk_reader_next(r, &e);
        if (!b || stk_reader_synchronize(r, &e)) die(path, e.msg);
        imgs += b->size;
    }
    stk_reader_close(r);
    stk_dataset_close(ds);
    return (double)imgs / el;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *mode = "crop", *which = "new";
    unsigned threads = 1;
    uint32_t size = 224, batch = 256;
    double seconds = 5;
    int f32 = 0, eval = 0;
    share_t proto = {.scales = STK_IMG_SCALES_POW2, .jopts = STK_IMG_JPEG_LOAD_OPTS};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--mode")) mode = v, i++;
        else if (!strcmp(a, "--threads")) threads = (unsigned)atoi(v), i++;
        else if (!strcmp(a, "--size")) size = (uint32_t)atoi(v), i++;
        else if (!strcmp(a, "--batch")) batch = (uint32_t)atoi(v), i++;
        else if (!strcmp(a, "--seconds")) seconds = atof(v), i++;
        else if (!strcmp(a, "--dtype")) f32 = !strcmp(v, "f32"), i++;
        else if (!strcmp(a, "--eval")) eval = 1;
        else if (!strcmp(a, "--path")) which = v, i++;
        else if (!strcmp(a, "--jopts")) proto.jopts = (unsigned)atoi(v), i++;
        else if (!strcmp(a, "--scales"))
            proto.scales = !strcmp(v, "all") ? STK_IMG_SCALES_ALL : STK_IMG_SCALES_POW2, i++;
        else if (!strcmp(a, "--psnr")) proto.psnr = 1;
        else if (!strcmp(a, "--ab")) { /* e.g. 0,4,1,0s: jopts values, s: every DCT scale allowed */
            for (const char *q = v; *q && proto.ab_n < 8;) {
                char *e2;
                proto.ab_opts[proto.ab_n] = (unsigned)strtoul(q, &e2, 10);
                proto.ab_scales[proto.ab_n++] = *e2 == 's' ? STK_IMG_SCALES_ALL : STK_IMG_SCALES_POW2;
                q = e2 + (*e2 == 's');
                q += *q == ',';
            }
            i++;
        } else if (a[0] == '-') die(a, "unknown option (see the comment at the top of load_bench.c)");
        else path = a;
    }
    if (!path || !threads || threads > 64 || !size || !batch)
        die("usage", "load_bench DATASET --mode crop|decode ...");
    if (!strcmp(mode, "decode"))
        printf("RESULT decode_t%u %.1f images/s\n", threads,
               run_decode(path, threads, seconds, 0, 0, size, &proto));
    else if (!strcmp(mode, "path"))
        printf("RESULT path_%s%s_t%u %.1f images/s\n", which, eval ? "_eval" : "", threads,
               run_decode(path, threads, seconds,
                          !strcmp(which, "old")      ? 1
                          : !strcmp(which, "planes") ? 3
                                                     : 2,
                          eval, size, &proto));
    else
        printf("RESULT crop%s%s_t%u %.1f images/s\n", eval ? "_eval" : "", f32 ? "_f32" : "", threads,
               run_crop(path, threads, size, batch, seconds, f32, eval));
    return 0;
}
