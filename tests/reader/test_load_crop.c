/* tests/reader/test_load_crop.c - images of their own size (array fields
 * u8[*,*,3], raw and JPEG) cropped and resized on the workers.
 *
 * The expected pixels are made here from the stored image: the box drawn by
 * stk__xform_box (its distribution against torchvision's is test_crop.c's
 * job), the crop cut out by hand, resampled with the shared filter
 * (image/resize.c, checked against Pillow by the packer's tests), mirrored
 * by hand; eval boxes from torchvision's Resize + CenterCrop arithmetic,
 * written out again below. Every order and thread count gives the same
 * pixels for a record; a JPEG field gives the crops of its decoded image;
 * the host backend's normalised f32 output is the u8 crop over 255. */
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "device.h"
#include "resize.h"

#define N 60
#define OUT 20

static void image_of(uint64_t i, uint8_t *px, uint64_t *h, uint64_t *w)
{
    *h = 8 + (i * 7) % 37;
    *w = 8 + (i * 11) % 41;
    for (uint64_t y = 0; y < *h; y++)
        for (uint64_t x = 0; x < *w; x++)
            for (int c = 0; c < 3; c++)
                px[(y * *w + x) * 3 + c] = (uint8_t)((x * 9 + y * 5 + (uint64_t)c * 70 + i * 13) ^ (x * y));
}

/* image u8[*,*,3] (raw, or JPEG q95 4:4:4), label i64 */
static void write_ds(const char *dir, int jpeg)
{
    stk_schema s;
    stk_schema_init(&s);
    const uint64_t any[3] = {0, 0, 3};
    ck_assert_int_eq(stk_schema_add_array(&s, "image", STK_DT_U8, 3, any, NULL), 0);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "label", STK_DT_I64, 0, NULL, NULL), 0);
    if (jpeg) ck_assert_int_eq(stk_schema_set_codec(&s, 0, STK_CODEC_JPEG, NULL), 0);
    stk_dataset_options o = {.force = 1, .records_per_shard = 25};
    stk_error e;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    tjhandle tj = tjInitCompress();
    for (uint64_t i = 0; i < N; i++) {
        uint8_t px[64 * 64 * 3];
        uint64_t dims[2];
        image_of(i, px, &dims[0], &dims[1]);
        int64_t label = (int64_t)i;
        unsigned char *jb = NULL;
        unsigned long jn = 0;
        if (jpeg)
            ck_assert_int_eq(
                tjCompress2(tj, px, (int)dims[1], 0, (int)dims[0], TJPF_RGB, &jb, &jn, TJSAMP_444, 95, 0), 0);
        stk_value v[2] = {{jpeg ? (void *)jb : px, jpeg ? jn : dims[0] * dims[1] * 3}, {&label, 8}};
        ck_assert_msg(stk_dataset_writer_append_dims(dw, v, dims, &e) == 0, "%s", e.msg);
        tjFree(jb);
    }
    tjDestroy(tj);
    ck_assert_msg(stk_dataset_writer_finish(dw, &e) == 0, "%s", e.msg);
}

/* The stored image of record i as a reader sees it (a JPEG decoded). */
static void stored(uint64_t i, int jpeg, uint8_t *px, uint64_t *h, uint64_t *w)
{
    image_of(i, px, h, w);
    if (!jpeg) return;
    tjhandle c = tjInitCompress(), d = tjInitDecompress();
    unsigned char *jb = NULL;
    unsigned long jn = 0;
    ck_assert_int_eq(tjCompress2(c, px, (int)*w, 0, (int)*h, TJPF_RGB, &jb, &jn, TJSAMP_444, 95, 0), 0);
    ck_assert_int_eq(tjDecompress2(d, jb, jn, px, (int)*w, 0, (int)*h, TJPF_RGB, 0), 0);
    tjFree(jb);
    tjDestroy(c);
    tjDestroy(d);
}

/* torchvision CenterCrop's offset, int(round(d / 2.0)) */
static uint64_t py_centre(uint64_t d) { return (uint64_t)nearbyint((double)d / 2.0); }

static void expected(const stk_transform *t, uint64_t seed, uint64_t epoch, uint64_t i, int jpeg,
                     uint8_t *out)
{
    uint8_t px[64 * 64 * 3], crop[64 * 64 * 3];
    uint64_t h, w;
    stored(i, jpeg, px, &h, &w);
    stk__crop_box box;
    stk__xform_box(t, (uint32_t)h, (uint32_t)w, seed, epoch, i, &box);
    stk__resizer *rs = stk__resizer_new();
    stk__rect all = {0, 0, OUT, OUT};
    if (t->crop == STK_CROP_RANDOM_RESIZED) {
        for (int32_t y = 0; y < box.h; y++)
            memcpy(crop + (size_t)y * box.w * 3, px + ((size_t)(box.y0 + y) * w + (size_t)box.x0) * 3,
                   (size_t)box.w * 3);
        stk__rgb_view v = {crop, (uint32_t)box.w, (uint32_t)box.h, (size_t)box.w * 3, 0};
        ck_assert_int_eq(stk__resize(rs, &v, OUT, OUT, &all, 0, out, OUT * 3), 0);
    } else { /* Resize(round(OUT / 0.875)) + CenterCrop(OUT) */
        uint64_t r = (uint64_t)round(OUT / 0.875), sh = h < w ? h : w, lg = h < w ? w : h;
        uint64_t g = (uint64_t)((double)(r * lg) / (double)sh), rh = h <= w ? r : g, rw = h <= w ? g : r;
        stk__rect win = {py_centre(rw - OUT), py_centre(rh - OUT), OUT, OUT};
        stk__rgb_view v = {px, (uint32_t)w, (uint32_t)h, (size_t)w * 3, 0};
        ck_assert_int_eq(stk__resize(rs, &v, rw, rh, &win, 0, out, OUT * 3), 0);
    }
    stk__resizer_free(rs);
    if (box.flip)
        for (int y = 0; y < OUT; y++)
            for (int x = 0; x < OUT / 2; x++)
                for (int c = 0; c < 3; c++) {
                    uint8_t *a = out + (y * OUT + x) * 3 + c, *b = out + (y * OUT + OUT - 1 - x) * 3 + c,
                            s = *a;
                    *a = *b, *b = s;
                }
}

/* The crop's stages the last run_reader measured (stk_reader_diag). */
static stk_reader_diag last_diag;
/* Where run_reader writes a trace (NULL: none). */
static const char *trace_path;

static void run_reader(const char *dir, int crop, int order, unsigned threads, uint8_t got[N][OUT * OUT * 3])
{
    stk_transform t;
    stk_transform_imagenet(&t, crop == STK_CROP_RANDOM_RESIZED, OUT);
    t.dtype = STK_DT_U8;
    t.layout = STK_IMAGE_NHWC;
    t.crop = crop;
    stk_reader_options o = tu_reader_options(7, order);
    o.seed = 5;
    o.threads = threads;
    o.tail = STK_TAIL_PARTIAL;
    o.transform = &t;
    o.verify = STK_VERIFY_ALWAYS;
    o.trace = trace_path;
    stk_reader *r = tu_open_reader(dir, &o);
    stk_error e;
    uint64_t seen = 0;
    for (int b_i = 0; b_i < 9; b_i++) { /* epoch 0: 60 / 7 -> 9 batches */
        const stk_batch *b = stk_reader_next(r, &e);
        ck_assert_msg(b != NULL, "%s", e.msg);
        const stk_batch_field *f = &b->fields[0];
        ck_assert_int_eq(f->kind, STK_KIND_TENSOR);
        ck_assert_int_eq(f->dtype, STK_DT_U8);
        ck_assert_uint_eq(f->ndim, 4);
        ck_assert(f->shape[1] == OUT && f->shape[2] == OUT && f->shape[3] == 3);
        ck_assert(!f->zero_copy && f->data != NULL);
        for (uint32_t j = 0; j < b->size; j++) {
            ck_assert_int_eq(((const int64_t *)b->fields[1].data)[j], (int64_t)b->records[j]);
            memcpy(got[b->records[j]], (const uint8_t *)f->data + (size_t)j * OUT * OUT * 3, OUT * OUT * 3);
        }
        seen += b->size;
    }
    ck_assert_uint_eq(seen, N);
    /* the crop's stages: the resize in every crop, within the crop's time; no normalising (u8) */
    stk_reader_diag_get(r, &last_diag);
    ck_assert(last_diag.resize_s > 0 && last_diag.normalise_s == 0);
    ck_assert(last_diag.crop_s >= last_diag.decode_s + last_diag.resize_s - 1e-9);
    stk_reader_close(r);
}

START_TEST(crops_match_reference)
{
    int jpeg = _i;
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, jpeg ? "lc-jpeg" : "lc-raw");
    write_ds(dir, jpeg);
    static uint8_t got[N][OUT * OUT * 3], first[N][OUT * OUT * 3], want[OUT * OUT * 3];
    for (int crop = STK_CROP_CENTER; crop <= STK_CROP_RANDOM_RESIZED; crop++) {
        stk_transform t;
        stk_transform_imagenet(&t, crop == STK_CROP_RANDOM_RESIZED, OUT);
        t.crop = crop;
        int flips = 0, shifted = 0;
        for (int order = STK_ORDER_SEQUENTIAL; order <= STK_ORDER_QUASI; order++)
            for (unsigned threads = 1; threads <= 3; threads += 2) {
                run_reader(dir, crop, order, threads, got);
                ck_assert(jpeg ? last_diag.decode_s > 0 : last_diag.decode_s == 0);
                if (order == STK_ORDER_SEQUENTIAL && threads == 1) {
                    for (uint64_t i = 0; i < N; i++) {
                        expected(&t, 5, 0, i, jpeg, want);
                        ck_assert_msg(memcmp(got[i], want, sizeof want) == 0,
                                      "%s crop %d record %llu differs", jpeg ? "jpeg" : "raw", crop,
                                      (unsigned long long)i);
                        stk__crop_box box;
                        uint8_t px[64 * 64 * 3];
                        uint64_t h, w;
                        image_of(i, px, &h, &w);
                        stk__xform_box(&t, (uint32_t)h, (uint32_t)w, 5, 0, i, &box);
                        flips += box.flip;
                        shifted += box.x0 > 0 || box.y0 > 0;
                    }
                    memcpy(first, got, sizeof got);
                } else {
                    ck_assert_msg(memcmp(first, got, sizeof got) == 0, "order %d, %u threads: other pixels",
                                  order, threads);
                }
            }
        if (crop == STK_CROP_RANDOM_RESIZED) ck_assert(flips > 10 && flips < N - 10 && shifted > N / 2);
    }
}
END_TEST

/* The host backend normalises the workers' crops, and without a device the
 * workers do: f32 NCHW = u8 / 255 either way; a square field without a
 * device goes through the workers too. */
START_TEST(normalised_crops)
{
    int device = _i ? STK_DEVICE_NONE : STK_DEVICE_HOST;
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "lc-host");
    write_ds(dir, 0);
    static uint8_t u8[N][OUT * OUT * 3];
    run_reader(dir, STK_CROP_RANDOM_RESIZED, STK_ORDER_SHUFFLE, 2, u8);
    stk_transform t;
    stk_transform_imagenet(&t, 1, OUT);
    for (int c = 0; c < 3; c++) t.mean[c] = 0, t.std[c] = 1;
    stk_reader_options o = tu_reader_options(7, STK_ORDER_SHUFFLE);
    o.seed = 5;
    o.threads = 2;
    o.tail = STK_TAIL_PARTIAL;
    o.device = device;
    o.transform = &t;
    stk_reader *r = tu_open_reader(dir, &o);
    stk_error e;
    for (int b_i = 0; b_i < 9; b_i++) {
        const stk_batch *b = stk_reader_next(r, &e);
        ck_assert_msg(b != NULL, "%s", e.msg);
        ck_assert_msg(stk_reader_synchronize(r, &e) == 0, "%s", e.msg);
        const stk_batch_field *f = &b->fields[0];
        ck_assert_int_eq(f->dtype, STK_DT_F32);
        ck_assert(f->shape[1] == 3 && f->shape[2] == OUT && f->shape[3] == OUT);
        const float *p = f->data;
        for (uint32_t j = 0; j < b->size; j++)
            for (int c = 0; c < 3; c++)
                for (int y = 0; y < OUT; y++)
                    for (int x = 0; x < OUT; x++) {
                        float v = p[(((size_t)j * 3 + c) * OUT + y) * OUT + x];
                        float want = u8[b->records[j]][(y * OUT + x) * 3 + c] / 255.0f;
                        ck_assert_msg(fabsf(v - want) < 1e-5f, "record %llu (%d,%d,%d): %f, want %f",
                                      (unsigned long long)b->records[j], c, y, x, v, want);
                    }
    }
    stk_reader_diag d;
    stk_reader_diag_get(r, &d); /* the workers normalise only without a device */
    ck_assert(device == STK_DEVICE_NONE ? d.normalise_s > 0 : d.normalise_s == 0);
    stk_reader_close(r);
}
END_TEST

/* The workers' normalising, f32 in both layouts: bit for bit the fused
 * v * (inv_std / 255) + (-mean * inv_std) and the host backend's (the CUDA
 * kernel's) output for the uncropped image, within 8 x 2^-23 (relative to
 * max(|x|, 1)) of the unfused (v / 255 - mean) * inv_std; every byte value, images whose pixel
 * count is no multiple of the SIMD step (or exactly one: 2 x 4, where the
 * loads must stop at the last byte; ASan sees them), a destination off the
 * alignment the non-temporal stores want. */
START_TEST(normalise_exact)
{
    static const uint32_t sizes[][2] = {{20, 20}, {7, 3}, {224, 224}, {5, 17}, {1, 1}, {2, 4}, {3, 3}};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int layout = 0; layout < 2; layout++)
            for (size_t skew = 0; skew < 2; skew++) {
                stk__xform_job j = {
                    .C = 3, .out_h = sizes[si][0], .out_w = sizes[si][1], .dtype = STK_DT_F32};
                j.layout = layout ? STK_IMAGE_NHWC : STK_IMAGE_NCHW;
                const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
                for (int c = 0; c < 3; c++) j.mean[c] = mean[c], j.inv_std[c] = 1.0f / sd[c];
                size_t n = (size_t)j.out_h * j.out_w, bytes = n * 3;
                uint8_t *hwc = malloc(bytes);
                float *buf = aligned_alloc(64, ((n * 3 + 16) * sizeof(float) + 63) & ~(size_t)63),
                      *out = buf + skew;
                ck_assert(hwc && buf);
                for (size_t k = 0; k < bytes; k++) hwc[k] = (uint8_t)(k * 7 + k / 3);
                stk__xform_normalise(&j, hwc, out);
                for (size_t p = 0; p < n; p++)
                    for (int c = 0; c < 3; c++) {
                        float x = (float)hwc[p * 3 + c];
                        volatile float scale = j.inv_std[c] * (1.0f / 255.0f),
                                       shift = -j.mean[c] * j.inv_std[c];
                        float want = fmaf(x, scale, shift);
                        volatile float v = x * (1.0f / 255.0f);
                        v = v - j.mean[c];
                        float unfused = v * j.inv_std[c];
                        size_t at = layout ? p * 3 + c : c * n + p;
                        ck_assert_msg(memcmp(&out[at], &want, 4) == 0,
                                      "%ux%u %s skew %zu: pixel %zu channel %d: %a, want %a", j.out_h,
                                      j.out_w, layout ? "NHWC" : "NCHW", skew, p, c, (double)out[at],
                                      (double)want);
                        ck_assert_msg(
                            fabsf(out[at] - unfused) <= 8 * FLT_EPSILON * fmaxf(fabsf(unfused), 1.0f),
                            "pixel %zu channel %d: %a, unfused %a", p, c, (double)out[at], (double)unfused);
                    }
                /* the host reference over the whole image, no resampling: the same bytes */
                float *ref = malloc(n * 3 * sizeof(float));
                ck_assert(ref);
                stk__crop_box box = {.x0 = 0, .y0 = 0, .w = (int32_t)j.out_w, .h = (int32_t)j.out_h};
                stk__xform_job hj = j;
                hj.src = hwc, hj.dst = ref, hj.boxes = &box, hj.n = 1, hj.H = j.out_h, hj.W = j.out_w;
                stk__xform_host(&hj);
                ck_assert_msg(memcmp(ref, out, n * 3 * sizeof(float)) == 0,
                              "%ux%u %s: the host backend differs", j.out_h, j.out_w,
                              layout ? "NHWC" : "NCHW");
                free(ref);
                free(buf);
                free(hwc);
            }
}
END_TEST

START_TEST(refusals)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "lc-refuse");
    write_ds(dir, 0);
    stk_transform t;
    stk_transform_imagenet(&t, 1, 0); /* no output size */
    t.dtype = STK_DT_U8;
    t.layout = STK_IMAGE_NHWC;
    stk_reader_options o = tu_reader_options(4, STK_ORDER_SEQUENTIAL);
    o.transform = &t;
    stk_error e;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &e));
    tu_assert_error(&e, STK_E_ARG, "give the output size");
    /* a square field that is not u8 RGB: the host backend transforms it */
    char sq[TU_PATH];
    tu_scratch(sq, sizeof sq, "lc-square");
    stk_schema s;
    stk_schema_init(&s);
    const uint64_t grey[3] = {8, 8, 1};
    ck_assert_int_eq(stk_schema_add_tensor(&s, "image", STK_DT_U8, 3, grey, NULL), 0);
    stk_dataset_options dopt = {.force = 1};
    stk_dataset_writer *dw = stk_dataset_writer_create(sq, &s, &dopt, &e);
    uint8_t px[64] = {0};
    stk_value v[1] = {{px, 64}};
    ck_assert_int_eq(stk_dataset_writer_append(dw, v, &e), 0);
    ck_assert_int_eq(stk_dataset_writer_finish(dw, &e), 0);
    t.out_height = t.out_width = 4;
    o.batch_size = 1;
    stk_reader *r = tu_open_reader(sq, &o);
    ck_assert_int_eq(stk_reader_get_options(r)->device, STK_DEVICE_HOST);
    const stk_batch *b = stk_reader_next(r, &e);
    ck_assert_msg(b && stk_reader_synchronize(r, &e) == 0, "%s", e.msg);
    ck_assert_uint_eq(b->fields[0].nbytes, 4 * 4 * 1); /* u8 [1, 4, 4, 1] */
    stk_reader_close(r);
}
END_TEST

/* A square u8 [H, W, 3] field without a device: cropped on the workers, as
 * an array field of the same images would be. */
START_TEST(square_field_on_workers)
{
    char dir[TU_PATH], sq[TU_PATH];
    tu_scratch(dir, sizeof dir, "lc-sq-array");
    tu_scratch(sq, sizeof sq, "lc-sq-tensor");
    stk_schema a, b;
    stk_schema_init(&a);
    stk_schema_init(&b);
    const uint64_t any[3] = {0, 0, 3}, fixed[3] = {30, 40, 3};
    ck_assert_int_eq(stk_schema_add_array(&a, "image", STK_DT_U8, 3, any, NULL), 0);
    ck_assert_int_eq(stk_schema_add_tensor(&b, "image", STK_DT_U8, 3, fixed, NULL), 0);
    stk_dataset_options dopt = {.force = 1};
    stk_error e;
    stk_dataset_writer *wa = stk_dataset_writer_create(dir, &a, &dopt, &e),
                       *wb = stk_dataset_writer_create(sq, &b, &dopt, &e);
    for (uint64_t i = 0; i < 20; i++) {
        uint8_t px[30 * 40 * 3];
        tu_fill(px, sizeof px, i);
        uint64_t dims[2] = {30, 40};
        stk_value v[1] = {{px, sizeof px}};
        ck_assert_int_eq(stk_dataset_writer_append_dims(wa, v, dims, &e), 0);
        ck_assert_int_eq(stk_dataset_writer_append(wb, v, &e), 0);
    }
    ck_assert_int_eq(stk_dataset_writer_finish(wa, &e), 0);
    ck_assert_int_eq(stk_dataset_writer_finish(wb, &e), 0);
    /* Per record, for both datasets and both orders; epoch 0 of batches of
     * 10. Sequential batches lie inside the one shard, where they would be
     * zero-copy views of the mapping: the cropped field is made in the slot
     * all the same, the crops of the shuffled order's. */
    enum { CROP_BYTES = 3 * 12 * 12 * 4 };
    static uint8_t got[2][2][20][CROP_BYTES]; /* [dataset][order][record] */
    for (int train = 0; train <= 1; train++) {
        stk_transform t;
        stk_transform_imagenet(&t, train, 12);
        for (int d = 0; d < 2; d++)
            for (int order = STK_ORDER_SEQUENTIAL; order <= STK_ORDER_SHUFFLE; order++) {
                stk_reader_options o = tu_reader_options(10, order);
                o.transform = &t;
                stk_reader *r = tu_open_reader(d ? sq : dir, &o);
                for (int k = 0; k < 2; k++) {
                    const stk_batch *bt = stk_reader_next(r, &e);
                    ck_assert_msg(bt != NULL, "%s", e.msg);
                    ck_assert_int_eq(bt->fields[0].dtype, STK_DT_F32);
                    ck_assert(!bt->fields[0].zero_copy);
                    ck_assert_uint_eq(bt->fields[0].nbytes, 10ull * CROP_BYTES);
                    for (uint32_t j = 0; j < bt->size; j++)
                        memcpy(got[d][order][bt->records[j]],
                               (const uint8_t *)bt->fields[0].data + j * CROP_BYTES, CROP_BYTES);
                }
                stk_reader_close(r);
            }
        for (int d = 0; d < 2; d++)
            ck_assert_msg(memcmp(got[d][0], got[d][1], sizeof got[d][0]) == 0,
                          "%s field, %s crop: sequential batches have other pixels than shuffled ones",
                          d ? "square" : "array", train ? "train" : "eval");
        if (train) /* eval differs by design: a square image is centre-cropped, not resized first */
            ck_assert_msg(memcmp(got[0][1], got[1][1], sizeof got[0][1]) == 0,
                          "the square field's crops differ from the array field's");
    }
}
END_TEST

/* A trace of JPEG crops marks the crop's stages inside the workers' gather. */
START_TEST(trace_marks_stages)
{
    char dir[TU_PATH], path[TU_PATH];
    tu_scratch(dir, sizeof dir, "lc-trace");
    write_ds(dir, 1);
    tu_scratch_file(path, sizeof path, dir, "trace.json");
    static uint8_t got[N][OUT * OUT * 3];
    trace_path = path;
    run_reader(dir, STK_CROP_RANDOM_RESIZED, STK_ORDER_SHUFFLE, 2, got);
    trace_path = NULL;
    size_t len;
    char *text = (char *)tu_read(path, &len);
    text = realloc(text, len + 1);
    text[len] = 0;
    ck_assert_msg(strstr(text, "\"name\":\"gather\"") != NULL, "no gather range");
    ck_assert_msg(strstr(text, "\"name\":\"decode\"") != NULL, "no decode range");
    ck_assert_msg(strstr(text, "\"name\":\"resize\"") != NULL, "no resize range");
    free(text);
}
END_TEST

TU_MAIN("load_crop", {.name = "load_crop",
                      .timeout = 300,
                      .loop = 2,
                      .loop_tests = {crops_match_reference, normalised_crops},
                      .tests = {square_field_on_workers, normalise_exact, refusals, trace_marks_stages}})
