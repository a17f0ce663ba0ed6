/* tests/reader/test_device.c - the device upload protocol through the host
 * backend, and the transform's arithmetic.
 *
 * The consumer is a host stream: the test queues "kernels" on it that check a
 * batch's device buffer later, after random delays, while the CPU has already
 * moved on to the next batches. If the reader reused a device buffer before
 * the consumer's release event, those checks would see other records. */
#define _GNU_SOURCE
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "device.h"

#define SEED 5

/* A scratch dataset of n standard records in shards of `per`. */
static void make(char *dir, size_t cap, const char *name, uint64_t n, uint64_t per)
{
    tu_scratch_std_dataset(dir, cap, name, SEED, n, per);
}

static void sleep_us(unsigned us)
{
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------- checks on the consumer */

static int failures; /* atomic */

typedef struct {
    const uint16_t *image; /* the batch's device buffer for field image */
    const int32_t *label;
    uint64_t records[64];
    uint32_t n;
    unsigned delay_us;
} check_job;

static void check_later(void *arg)
{
    check_job *j = arg;
    sleep_us(j->delay_us); /* the consumer's "kernel" takes a while */
    for (uint32_t i = 0; i < j->n; i++) {
        tu_record want;
        tu_std_record(&want, SEED, j->records[i]);
        if (memcmp(j->image + (size_t)i * TU_IMG_ELEMS, want.image, sizeof want.image) != 0 ||
            j->label[i] != want.label) {
            __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
            fprintf(stderr, "batch data overwritten or wrong: record %llu\n",
                    (unsigned long long)j->records[i]);
        }
    }
    free(j);
}

static stk_reader *open_dev(const char *dir, uint32_t B, int order, unsigned threads, unsigned prefetch,
                            stk_host_stream *s)
{
    stk_reader_options o = tu_reader_options(B, order);
    o.seed = 3;
    o.threads = threads;
    o.prefetch = prefetch;
    o.device = STK_DEVICE_HOST;
    o.stream = s;
    o.fields = "image,label";
    return tu_open_reader(dir, &o);
}

static void queue_check(stk_host_stream *s, const stk_batch *b, unsigned delay_us)
{
    check_job *j = calloc(1, sizeof *j);
    ck_assert_ptr_nonnull(j);
    ck_assert(b->size <= 64);
    j->image = b->fields[0].data;
    j->label = b->fields[1].data;
    j->n = b->size;
    memcpy(j->records, b->records, b->size * sizeof *b->records);
    j->delay_us = delay_us;
    ck_assert_int_eq(stk_host_stream_launch(s, check_later, j, NULL), 0);
}

/* Random consumer delays, several epochs, orders and ring sizes: every batch
 * arrives in order, and its device buffer still holds it when the consumer
 * finally reads it. */
START_TEST(batches_intact_under_random_delays)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "delays", 150, 40);
    srand(7);
    for (int order = STK_ORDER_SEQUENTIAL; order <= STK_ORDER_SHUFFLE; order++)
        for (unsigned prefetch = 1; prefetch <= 4; prefetch += 3) {
            stk_host_stream *s = stk_host_stream_create(NULL);
            ck_assert_ptr_nonnull(s);
            failures = 0;
            stk_reader *r = open_dev(dir, 16, order, 2, prefetch, s);
            stk_reader_set_epochs(r, 3);
            stk_error err;
            const stk_batch *b;
            uint64_t seq = 0;
            while ((b = stk_reader_next(r, &err))) {
                ck_assert(b->on_device);
                ck_assert_ptr_nonnull(b->event);
                ck_assert_uint_eq(b->epoch * stk_reader_batches_per_epoch(r) + b->index, seq++);
                ck_assert_int_eq(b->fields[0].zero_copy, 0);
                queue_check(s, b, (unsigned)(rand() % 1500));
                if (rand() % 4 == 0) sleep_us((unsigned)(rand() % 800)); /* the CPU side dawdles too */
            }
            ck_assert_int_eq(err.code, STK_OK);
            ck_assert_uint_eq(seq, 30);
            stk_reader_stats st;
            stk_reader_stats_get(r, &st);
            ck_assert_int_eq(st.device, STK_DEVICE_HOST);
            ck_assert(st.h2d_bytes >= 150 * 3 * (TU_IMG_ELEMS * 2 + 4));
            stk_reader_close(r);
            stk_host_stream_destroy(s); /* runs the remaining checks */
            ck_assert_int_eq(__atomic_load_n(&failures, __ATOMIC_RELAXED), 0);
        }
}
END_TEST

/* A consumer stream held shut by a gate: the CPU may run ahead (batches are
 * "ready" as soon as their upload is queued), but no device buffer the
 * consumer has not released on its stream may change. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
} gate;

static void gate_wait(void *arg)
{
    gate *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

START_TEST(buffer_not_reused_before_release_event)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "gate", 96, 96);
    stk_host_stream *s = stk_host_stream_create(NULL);
    gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    ck_assert_int_eq(stk_host_stream_launch(s, gate_wait, &g, NULL), 0);
    stk_reader *r = open_dev(dir, 8, STK_ORDER_SEQUENTIAL, 2, 1, s); /* 2 slots */
    stk_error err;
    const uint16_t *img0 = NULL;
    uint64_t rec0[8];
    for (int i = 0; i < 4; i++) { /* b0..b3: b2 and b3 reuse b0's and b1's buffers */
        const stk_batch *b = stk_reader_next(r, &err);
        ck_assert_msg(b != NULL, "%s", err.msg);
        if (i == 0) {
            img0 = b->fields[0].data;
            memcpy(rec0, b->records, sizeof rec0);
        }
        queue_check(s, b, 0);
    }
    sleep_us(50000); /* give a broken reader every chance to overwrite */
    for (int i = 0; i < 8; i++) {
        tu_record want;
        tu_std_record(&want, SEED, rec0[i]);
        ck_assert_msg(memcmp(img0 + (size_t)i * TU_IMG_ELEMS, want.image, sizeof want.image) == 0,
                      "batch 0's device buffer was reused before its release event");
    }
    pthread_mutex_lock(&g.mu);
    g.open = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    for (int i = 4; i < 12; i++) {
        const stk_batch *b = stk_reader_next(r, &err);
        ck_assert_ptr_nonnull(b);
        queue_check(s, b, 100);
    }
    stk_reader_close(r);
    stk_host_stream_destroy(s);
    ck_assert_int_eq(__atomic_load_n(&failures, __ATOMIC_RELAXED), 0);
}
END_TEST

/* seek (and restore) release the batch the caller holds: its device buffer
 * must survive until the caller's stream has passed that point, even though
 * the ring refills at once. */
START_TEST(seek_releases_held_batch_on_stream)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "seek-held", 64, 64);
    stk_host_stream *s = stk_host_stream_create(NULL);
    gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    stk_reader *r = open_dev(dir, 8, STK_ORDER_SHUFFLE, 2, 1, s); /* 2 slots */
    stk_error err;
    failures = 0;
    const stk_batch *b = stk_reader_next(r, &err);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(stk_host_stream_launch(s, gate_wait, &g, NULL), 0);
    queue_check(s, b, 0); /* runs after the gate opens */
    ck_assert_int_eq(stk_reader_seek(r, 3, 0, &err), 0);
    /* both slots refill (their uploads queue behind the release, which sits
     * behind the gate: the CPU gets them, the copies wait) */
    for (int i = 0; i < 2; i++) ck_assert_ptr_nonnull(stk_reader_next(r, &err));
    usleep(30000);
    pthread_mutex_lock(&g.mu);
    g.open = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    stk_reader_close(r);
    stk_host_stream_destroy(s);
    ck_assert_int_eq(__atomic_load_n(&failures, __ATOMIC_RELAXED), 0);
    /* positions stay below 2^63 batches */
    r = open_dev(dir, 8, STK_ORDER_SHUFFLE, 1, 1, NULL);
    ck_assert_int_eq(stk_reader_seek(r, UINT64_MAX / 2, 0, &err), STK_E_RANGE);
    stk_reader_close(r);
}
END_TEST

/* Close while uploads are queued behind a slow consumer, or before any
 * batch was taken: no hang, no leak, no race (ASan/TSan builds run this). */
static void slow(void *arg)
{
    (void)arg;
    sleep_us(20000);
}

START_TEST(shutdown_mid_copy)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "shutdown", 200, 50);
    for (int round = 0; round < 12; round++) {
        stk_host_stream *s = round % 3 ? stk_host_stream_create(NULL) : NULL;
        stk_reader *r = open_dev(dir, 10, round % 2 ? STK_ORDER_SHUFFLE : STK_ORDER_SEQUENTIAL, 3, 6, s);
        stk_error err;
        for (int i = 0; i < round % 4; i++) ck_assert_ptr_nonnull(stk_reader_next(r, &err));
        if (s) ck_assert_int_eq(stk_host_stream_launch(s, slow, NULL, NULL), 0);
        stk_reader_close(r);
        stk_host_stream_destroy(s);
    }
}
END_TEST

/* ------------------------------------------------------------- transform */

/* A u8 [H, W, 3] dataset whose pixels are a linear function of (x, y) per
 * channel: bilinear interpolation of it is exact, so the expected output of
 * any crop and scale is known in closed form. */
#define IH 20
#define IW 30
static uint8_t pix(int y, int x, int c)
{
    return (uint8_t)(c == 0 ? 4 * x + 3 : c == 1 ? 5 * y + 1 : 2 * x + 3 * y);
}

static void make_ramp(char *dir, size_t cap, uint64_t n)
{
    tu_scratch(dir, cap, "ramp");
    stk_schema s;
    stk_schema_init(&s);
    uint64_t shape[3] = {IH, IW, 3};
    ck_assert_int_eq(stk_schema_add_tensor(&s, "image", STK_DT_U8, 3, shape, NULL), 0);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "label", STK_DT_I64, 0, NULL, NULL), 0);
    stk_dataset_options o = {0};
    stk_error err;
    stk_dataset_writer *w = stk_dataset_writer_create(dir, &s, &o, &err);
    ck_assert_msg(w != NULL, "%s", err.msg);
    static uint8_t img[IH * IW * 3];
    for (int y = 0; y < IH; y++)
        for (int x = 0; x < IW; x++)
            for (int c = 0; c < 3; c++) img[(y * IW + x) * 3 + c] = pix(y, x, c);
    for (uint64_t i = 0; i < n; i++) {
        int64_t label = (int64_t)i;
        stk_value v[2] = {{img, sizeof img}, {&label, 8}};
        ck_assert_int_eq(stk_dataset_writer_append(w, v, &err), 0);
    }
    ck_assert_int_eq(stk_dataset_writer_finish(w, &err), 0);
}

/* Expected value of output pixel (ox, oy), channel c, for box b: the linear
 * function at the clamped half-pixel source position. */
static double expect(const stk__crop_box *b, int oh, int ow, int oy, int ox, int c)
{
    int xs = b->flip ? ow - 1 - ox : ox;
    double sx = (xs + 0.5) * b->w / ow - 0.5, sy = (oy + 0.5) * b->h / oh - 0.5;
    sx = sx < 0 ? 0 : sx > b->w - 1 ? b->w - 1 : sx;
    sy = sy < 0 ? 0 : sy > b->h - 1 ? b->h - 1 : sy;
    double x = b->x0 + sx, y = b->y0 + sy;
    return c == 0 ? 4 * x + 3 : c == 1 ? 5 * y + 1 : 2 * x + 3 * y;
}

static float half_to_float(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 1024), e - 25);
    return h & 0x8000 ? -v : v;
}

static float bf16_to_float(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static void run_transform(int crop, int dtype, int layout, uint32_t oh, uint32_t ow, float flip)
{
    char dir[TU_PATH];
    make_ramp(dir, sizeof dir, 24);
    stk_transform t;
    stk_transform_imagenet(&t, crop == STK_CROP_RANDOM_RESIZED, 0);
    t.crop = crop;
    t.dtype = dtype;
    t.layout = layout;
    t.out_height = oh;
    t.out_width = ow;
    t.flip_prob = flip;
    stk_reader_options o = tu_reader_options(6, STK_ORDER_SHUFFLE);
    o.seed = 99;
    o.device = STK_DEVICE_HOST;
    o.transform = &t;
    stk_reader *r = tu_open_reader(dir, &o);
    stk_error err;
    stk_reader_set_epochs(r, 2);
    const stk_batch *b;
    double tol = dtype == STK_DT_F32 ? 1e-4 : dtype == STK_DT_F16 ? 4e-3 : 3e-2;
    int u8 = dtype == STK_DT_U8;
    int flips = 0;
    while ((b = stk_reader_next(r, &err))) {
        const stk_batch_field *f = &b->fields[0];
        ck_assert_int_eq(f->dtype, dtype);
        ck_assert_uint_eq(f->ndim, 4);
        ck_assert_uint_eq(f->shape[0], b->size);
        ck_assert_uint_eq(f->shape[layout == STK_IMAGE_NCHW ? 1 : 3], 3);
        ck_assert_uint_eq(f->shape[layout == STK_IMAGE_NCHW ? 2 : 1], oh);
        ck_assert_uint_eq(f->nbytes, (uint64_t)b->size * 3 * oh * ow * stk_dtype_size(dtype));
        for (uint32_t n = 0; n < b->size; n++) {
            stk__crop_box box, again;
            stk__xform_box(&t, IH, IW, 99, b->epoch, b->records[n], &box);
            stk__xform_box(&t, IH, IW, 99, b->epoch, b->records[n], &again);
            ck_assert(memcmp(&box, &again, sizeof box) == 0); /* a pure function */
            ck_assert(box.x0 >= 0 && box.y0 >= 0 && box.w > 0 && box.h > 0 && box.x0 + box.w <= IW &&
                      box.y0 + box.h <= IH);
            flips += box.flip;
            for (uint32_t c = 0; c < 3; c++)
                for (uint32_t y = 0; y < oh; y++)
                    for (uint32_t x = 0; x < ow; x++) {
                        uint64_t i = layout == STK_IMAGE_NCHW ? ((n * 3ull + c) * oh + y) * ow + x
                                                              : ((n * (uint64_t)oh + y) * ow + x) * 3 + c;
                        double got = u8                    ? ((const uint8_t *)f->data)[i]
                                     : dtype == STK_DT_F32 ? ((const float *)f->data)[i]
                                     : dtype == STK_DT_F16 ? half_to_float(((const uint16_t *)f->data)[i])
                                                           : bf16_to_float(((const uint16_t *)f->data)[i]);
                        double px = expect(&box, (int)oh, (int)ow, (int)y, (int)x, (int)c),
                               want = u8 ? px : (px / 255.0 - t.mean[c]) / t.std[c];
                        /* u8: the pixel rounded (mean and std not applied) */
                        ck_assert_msg(u8 ? fabs(got - want) <= 0.5 + 1e-3
                                         : fabs(got - want) <= tol * (1 + fabs(want)),
                                      "crop %d dtype %d layout %d: sample %u c %u (%u,%u): got %f want %f",
                                      crop, dtype, layout, n, c, y, x, got, want);
                    }
        }
    }
    ck_assert_int_eq(err.code, STK_OK);
    if (flip > 0) ck_assert(flips > 0 && flips < 48); /* 48 samples over 2 epochs */
    stk_reader_close(r);
}

START_TEST(transform_center_crop)
{
    run_transform(STK_CROP_CENTER, STK_DT_F32, STK_IMAGE_NCHW, 16, 16, 0);
    run_transform(STK_CROP_CENTER, STK_DT_F32, STK_IMAGE_NHWC, 20, 30, 0.5f);
}
END_TEST

START_TEST(transform_random_resized)
{
    run_transform(STK_CROP_RANDOM_RESIZED, STK_DT_F32, STK_IMAGE_NCHW, 12, 12, 0.5f);
    run_transform(STK_CROP_RANDOM_RESIZED, STK_DT_F16, STK_IMAGE_NHWC, 9, 14, 0.5f);
    run_transform(STK_CROP_RANDOM_RESIZED, STK_DT_BF16, STK_IMAGE_NCHW, 16, 8, 0);
    run_transform(STK_CROP_RANDOM_RESIZED, STK_DT_U8, STK_IMAGE_NHWC, 11, 13, 0.5f);
    run_transform(STK_CROP_CENTER, STK_DT_U8, STK_IMAGE_NCHW, 16, 16, 0);
    run_transform(STK_CROP_NONE, STK_DT_F16, STK_IMAGE_NCHW, 40, 60, 0); /* upscale */
}
END_TEST

/* RandomResizedCrop's box statistics: areas within the scale range and
 * aspect ratios within the ratio range (or the central fallback). */
START_TEST(random_resized_boxes)
{
    stk_transform t;
    stk_transform_imagenet(&t, 1, 224);
    double area_sum = 0;
    int flips = 0, n = 20000;
    for (int i = 0; i < n; i++) {
        stk__crop_box b;
        stk__xform_box(&t, 256, 256, 1, 0, (uint64_t)i, &b);
        ck_assert(b.x0 >= 0 && b.y0 >= 0 && b.x0 + b.w <= 256 && b.y0 + b.h <= 256);
        double a = (double)b.w * b.h / (256.0 * 256.0), ratio = (double)b.w / b.h;
        ck_assert(a >= 0.075 && a <= 1.0);
        ck_assert(ratio > 0.70 && ratio < 1.42);
        area_sum += a;
        flips += b.flip;
    }
    /* E[area] over U(0.08, 1), a little lower after rejections of large boxes */
    ck_assert_msg(area_sum / n > 0.40 && area_sum / n < 0.56, "mean area %f", area_sum / n);
    ck_assert_msg(abs(flips - n / 2) < n / 20, "flips %d of %d", flips, n);
    stk__crop_box a, b;
    stk__xform_box(&t, 256, 256, 1, 0, 5, &a);
    stk__xform_box(&t, 256, 256, 1, 1, 5, &b); /* another epoch, another box */
    ck_assert(memcmp(&a, &b, sizeof a) != 0);
}
END_TEST

START_TEST(transform_options_refused)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "xopts", 20, 20);
    stk_transform t;
    stk_transform_imagenet(&t, 1, 4);
    stk_reader_options o;
    stk_reader_options_init(&o);
    o.world_size = 1;
    o.transform = &t;
    stk_error err;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &err)); /* no device: the host backend's, which refuses u16 */
    tu_assert_error(&err, STK_E_ARG, "must be u8 [H, W, C]");
    o.device = STK_DEVICE_HOST;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &err)); /* image is u16 [3,5] */
    tu_assert_error(&err, STK_E_ARG, "must be u8 [H, W, C]");
    o.device = 9;
    o.transform = NULL;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &err));
    tu_assert_error(&err, STK_E_ARG, "device 9 unknown");
}
END_TEST

/* Without a GPU (these machines), CUDA is refused with the reason, or falls
 * back as asked. */
START_TEST(cuda_unavailable_falls_back)
{
    stk_error why;
    if (stk_cuda_available(&why)) {
        printf("cuda_unavailable_falls_back: skipped: a CUDA device is present (tests/gpu covers it)\n");
        return;
    }
    ck_assert_int_eq(why.code, STK_E_UNSUPPORTED);
    char dir[TU_PATH];
    make(dir, sizeof dir, "cuda", 20, 20);
    stk_reader_options o = tu_reader_options(4, STK_ORDER_SEQUENTIAL);
    o.device = STK_DEVICE_CUDA;
    stk_error err;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &err));
    ck_assert_int_eq(err.code, STK_E_UNSUPPORTED);
    o.device_fallback = 1;
    stk_reader *r = tu_open_reader(dir, &o);
    const stk_batch *b = stk_reader_next(r, &err);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(b->on_device, 0);
    stk_reader_stats st;
    stk_reader_stats_get(r, &st);
    ck_assert_int_eq(st.device, STK_DEVICE_NONE);
    ck_assert_msg(strstr(stk_reader_device_note(r), "fell back to host batches: ") ==
                      stk_reader_device_note(r),
                  "%s", stk_reader_device_note(r));
    stk_reader_close(r);
    /* with a transform: the host backend, and the CUDA stream handle is not
     * mistaken for a host stream */
    static uint8_t not_a_host_stream[4096];
    stk_transform t;
    stk_transform_imagenet(&t, 0, 4);
    char img[TU_PATH];
    make_ramp(img, sizeof img, 8);
    o.transform = &t;
    o.stream = not_a_host_stream;
    r = stk_reader_open(img, &o, &err);
    ck_assert_msg(r != NULL, "%s", err.msg);
    b = stk_reader_next(r, &err);
    ck_assert_ptr_nonnull(b);
    ck_assert(b->on_device);
    stk_reader_stats_get(r, &st);
    ck_assert_int_eq(st.device, STK_DEVICE_HOST);
    ck_assert(strstr(stk_reader_device_note(r), "fell back to the host backend") != NULL);
    stk_reader_close(r);
}
END_TEST

TU_MAIN("device upload",
        {.name = "device",
         .timeout = 300,
         .tests = {batches_intact_under_random_delays, buffer_not_reused_before_release_event,
                   seek_releases_held_batch_on_stream, shutdown_mid_copy, transform_center_crop,
                   transform_random_resized, random_resized_boxes, transform_options_refused,
                   cuda_unavailable_falls_back}})
