/* tests/reader/test_crop_box.c - stk_reader_crop_box against the pixels the
 * reader made.
 *
 * Every stored image is a ramp: red is the pixel's column, green its row.
 * Resampling a linear ramp gives back the source position of each output
 * pixel's centre (away from the box's edges, where the filter is clipped),
 * so the crops the reader returns reveal the box and the flip it used: each
 * output pixel j of the box the API names must read
 * x0 + (j + 0.5) * w / out_w - 0.5 (j mirrored when flipped), within
 * rounding (half a level; JPEG q100's colour round trip and the scaled
 * decode add up to 2). A box one pixel off, or the other flip, must miss
 * by more than the tolerance, so the comparison can tell: it does for
 * at least 95% of the moved boxes (a box whose predicted values are all
 * halves, w / out_w an even whole number, rounds equally well one pixel
 * over). Covered: images of
 * their own size stored raw and as JPEG (the region decode, DCT-scaled when
 * the box is at least twice the output), RandomResizedCrop, the eval crop
 * (a fractional box) and the whole image, flips, two epochs shuffled; a
 * fixed-shape field cropped on the workers and by the host backend; a
 * mixture (records indexed over its sources concatenated); the
 * shape looked up by the call; the reader-free stk_transform_crop_box; the
 * refusals. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#define N 40
#define FIXED_H 120
#define FIXED_W 200

enum { DS_RAW, DS_JPEG, DS_FIXED };

/* 20 .. 256 a side: small images (crops upscaled) and large ones (boxes
 * decoded DCT-scaled). Red = x and green = y need sides of at most 256. */
static void dims_of(int kind, uint64_t i, uint32_t *h, uint32_t *w)
{
    if (kind == DS_FIXED) {
        *h = FIXED_H, *w = FIXED_W;
        return;
    }
    *h = 20 + (uint32_t)((i * 97 + 13) % 237);
    *w = 20 + (uint32_t)((i * 61 + 101) % 237);
}

static void ramp(uint32_t h, uint32_t w, uint8_t *px)
{
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)x, p[1] = (uint8_t)y, p[2] = 128;
        }
}

static void write_ds(const char *dir, int kind)
{
    stk_schema s;
    stk_schema_init(&s);
    const uint64_t any[3] = {0, 0, 3}, fixed[3] = {FIXED_H, FIXED_W, 3};
    if (kind == DS_FIXED) ck_assert_int_eq(stk_schema_add_tensor(&s, "image", STK_DT_U8, 3, fixed, NULL), 0);
    else ck_assert_int_eq(stk_schema_add_array(&s, "image", STK_DT_U8, 3, any, NULL), 0);
    if (kind == DS_JPEG) ck_assert_int_eq(stk_schema_set_codec(&s, 0, STK_CODEC_JPEG, NULL), 0);
    stk_dataset_options o = {.force = 1, .records_per_shard = 16};
    stk_error e;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    tjhandle tj = tjInitCompress();
    static uint8_t px[256 * 256 * 3];
    for (uint64_t i = 0; i < N; i++) {
        uint32_t h, w;
        dims_of(kind, i, &h, &w);
        ramp(h, w, px);
        uint64_t dims[2] = {h, w};
        unsigned char *jb = NULL;
        unsigned long jn = 0;
        if (kind == DS_JPEG)
            ck_assert_int_eq(tjCompress2(tj, px, (int)w, 0, (int)h, TJPF_RGB, &jb, &jn, TJSAMP_444, 100, 0),
                             0);
        stk_value v = {kind == DS_JPEG ? (void *)jb : px, kind == DS_JPEG ? jn : (uint64_t)h * w * 3};
        int rc = kind == DS_FIXED ? stk_dataset_writer_append(dw, &v, &e)
                                  : stk_dataset_writer_append_dims(dw, &v, dims, &e);
        ck_assert_msg(rc == 0, "%s", e.msg);
        tjFree(jb);
    }
    tjDestroy(tj);
    ck_assert_msg(stk_dataset_writer_finish(dw, &e) == 0, "%s", e.msg);
}

/* How far the out_h x out_w crop `out` (u8 HWC) is from the ramps that box
 * b predicts, per ramp (0: red, the columns; 1: green, the rows): the
 * largest and the mean absolute error and how many pixels, over the pixels
 * whose filter stays inside the box (its radius, max(scale, 1) source
 * pixels, plus `margin`). */
typedef struct {
    double max[2], mean[2];
    uint64_t n[2];
} ramp_fit;

static ramp_fit ramp_error(const uint8_t *out, uint32_t oh, uint32_t ow, const stk_crop_box *b, double margin)
{
    double sx = b->w / ow, sy = b->h / oh, rx = fmax(sx, 1) + margin, ry = fmax(sy, 1) + margin;
    ramp_fit f = {{0, 0}, {0, 0}, {0, 0}};
    for (uint32_t i = 0; i < oh; i++) {
        double cy = (i + 0.5) * sy; /* from the box's top edge */
        int in_y = cy >= ry && cy <= b->h - ry;
        for (uint32_t j = 0; j < ow; j++) {
            uint32_t jj = b->flip ? ow - 1 - j : j; /* the column of the unmirrored crop */
            double cx = (jj + 0.5) * sx, d[2] = {-1, -1};
            const uint8_t *p = out + ((size_t)i * ow + j) * 3;
            if (cx >= rx && cx <= b->w - rx) d[0] = fabs(p[0] - (b->x0 + cx - 0.5));
            if (in_y) d[1] = fabs(p[1] - (b->y0 + cy - 0.5));
            for (int c = 0; c < 2; c++)
                if (d[c] >= 0) f.max[c] = fmax(f.max[c], d[c]), f.mean[c] += d[c], f.n[c]++;
        }
    }
    for (int c = 0; c < 2; c++)
        if (f.n[c]) f.mean[c] /= (double)f.n[c];
    return f;
}

/* Ramp c fits within the tolerances (or has no pixels to tell). */
static int fits(const ramp_fit *f, int c, double max_tol, double mean_tol)
{
    return f->n[c] == 0 || (f->max[c] <= max_tol && f->mean[c] <= mean_tol);
}

typedef struct {
    int kind, crop, device;
    uint32_t oh, ow;
    double margin, max_tol, mean_tol;
    int mix; /* read as a mixture of the dataset twice: records N .. 2N - 1 are the second source's */
} crop_case;

/* Read two epochs of `c` shuffled; every record's crop against the box the
 * API gives for it, asked with its shape and without; the reader-free call
 * gives the same box. Counts the flipped crops and the moved boxes that
 * were told apart. */
static void check_case(const char *dir, const crop_case *c, int *flips, int *told, int *tried)
{
    stk_transform t;
    stk_transform_init(&t);
    t.dtype = STK_DT_U8;
    t.layout = STK_IMAGE_NHWC;
    t.crop = c->crop;
    t.out_height = c->oh;
    t.out_width = c->ow;
    t.flip_prob = 0.5f;
    stk_reader_options o = tu_reader_options(6, STK_ORDER_SHUFFLE);
    o.seed = 11;
    o.threads = 2;
    o.tail = STK_TAIL_PARTIAL;
    o.device = c->device;
    o.transform = &t;
    stk_error e;
    stk_reader *r;
    if (c->mix) {
        stk_source src[2];
        for (int k = 0; k < 2; k++) {
            stk_source_init(&src[k]);
            src[k].path = dir;
            src[k].kind = STK_MIX_REPEAT;
            src[k].value = 1;
        }
        r = stk_reader_open_mix(src, 2, &o, &e);
        ck_assert_msg(r != NULL, "%s", e.msg);
    } else {
        r = tu_open_reader(dir, &o);
    }
    int own_size = c->kind != DS_FIXED;
    uint64_t seen = 0;
    *flips = *told = *tried = 0;
    while (seen < 2 * N) {
        const stk_batch *b = stk_reader_next(r, &e);
        ck_assert_msg(b != NULL, "%s", e.msg);
        ck_assert_msg(stk_reader_synchronize(r, &e) == 0, "%s", e.msg);
        const stk_batch_field *f = &b->fields[0];
        ck_assert(f->dtype == STK_DT_U8 && f->ndim == 4 && f->shape[1] == c->oh && f->shape[2] == c->ow);
        for (uint32_t k = 0; k < b->size; k++) {
            uint64_t rec = b->records[k];
            uint32_t h, w;
            dims_of(c->kind, rec % N, &h, &w);
            stk_crop_box box, asked, pure;
            ck_assert_msg(stk_reader_crop_box(r, b->epoch, rec, h, w, &box, &e) == 0, "%s", e.msg);
            ck_assert_msg(stk_reader_crop_box(r, b->epoch, rec, 0, 0, &asked, &e) == 0, "%s", e.msg);
            ck_assert_msg(stk_transform_crop_box(&t, own_size, 11, b->epoch, rec, h, w, &pure, &e) == 0, "%s",
                          e.msg);
            ck_assert(memcmp(&box, &asked, sizeof box) == 0 && memcmp(&box, &pure, sizeof box) == 0);
            ck_assert(box.x0 >= 0 && box.y0 >= 0 && box.w > 0 && box.h > 0);
            ck_assert(box.x0 + box.w <= w + 1e-9 && box.y0 + box.h <= h + 1e-9);
            if (c->crop == STK_CROP_NONE) ck_assert(box.x0 == 0 && box.y0 == 0 && box.w == w && box.h == h);
            const uint8_t *px = (const uint8_t *)f->data + (size_t)k * c->oh * c->ow * 3;
            ramp_fit fit = ramp_error(px, c->oh, c->ow, &box, c->margin);
            ck_assert_msg(
                fits(&fit, 0, c->max_tol, c->mean_tol) && fits(&fit, 1, c->max_tol, c->mean_tol),
                "kind %d crop %d device %d, record %llu (%ux%u) epoch %llu, box %.3f %.3f %.3f %.3f "
                "flip %d: the crop is off the box by up to %.3f, %.3f (mean %.3f, %.3f)",
                c->kind, c->crop, c->device, (unsigned long long)rec, w, h, (unsigned long long)b->epoch,
                box.x0, box.y0, box.w, box.h, box.flip, fit.max[0], fit.max[1], fit.mean[0], fit.mean[1]);
            ck_assert(fit.n[0] + fit.n[1] > 0);
            /* the comparison can tell: a box a pixel off, or the other flip, misses */
            const double dx[4][2] = {{1, 0}, {-1, 0}, {0, 1}, {0, -1}};
            for (int m = 0; m < 5; m++) {
                stk_crop_box off = box;
                if (m < 4) off.x0 += dx[m][0], off.y0 += dx[m][1];
                else off.flip = !off.flip;
                int ramp = m == 2 || m == 3;
                if (fit.n[ramp] == 0) continue;
                ramp_fit moved = ramp_error(px, c->oh, c->ow, &off, c->margin);
                (*tried)++;
                *told += !fits(&moved, ramp, c->max_tol, c->mean_tol);
            }
            *flips += box.flip;
        }
        seen += b->size;
    }
    stk_reader_close(r);
}

START_TEST(box_matches_pixels)
{
    /* raw crops: rounding alone (half a level, and the 14-bit weights);
     * JPEG q100 4:4:4: its colour round trip and the scaled decode too */
    static const crop_case cases[] = {
        {DS_RAW, STK_CROP_RANDOM_RESIZED, STK_DEVICE_NONE, 24, 24, 0, 0.6, 0.55, 0},
        {DS_RAW, STK_CROP_CENTER, STK_DEVICE_NONE, 24, 32, 0, 0.6, 0.55, 0},
        {DS_RAW, STK_CROP_NONE, STK_DEVICE_NONE, 20, 28, 0, 0.6, 0.55, 0},
        {DS_JPEG, STK_CROP_RANDOM_RESIZED, STK_DEVICE_NONE, 24, 24, 1, 2.75, 0.7, 0},
        {DS_JPEG, STK_CROP_CENTER, STK_DEVICE_NONE, 32, 24, 1, 2.75, 0.7, 0},
        {DS_FIXED, STK_CROP_RANDOM_RESIZED, STK_DEVICE_NONE, 24, 24, 0, 0.6, 0.55, 0},
        {DS_FIXED, STK_CROP_CENTER, STK_DEVICE_NONE, 40, 56, 0, 0.6, 0.55, 0},
        {DS_FIXED, STK_CROP_RANDOM_RESIZED, STK_DEVICE_HOST, 24, 24, 0, 0.6, 0.55, 0},
        {DS_FIXED, STK_CROP_CENTER, STK_DEVICE_HOST, 40, 56, 0, 0.6, 0.55, 0},
        {DS_JPEG, STK_CROP_RANDOM_RESIZED, STK_DEVICE_NONE, 24, 24, 1, 2.75, 0.7, 1},
    };
    char dirs[3][TU_PATH];
    tu_scratch(dirs[DS_RAW], sizeof dirs[0], "cb-raw");
    tu_scratch(dirs[DS_JPEG], sizeof dirs[0], "cb-jpeg");
    tu_scratch(dirs[DS_FIXED], sizeof dirs[0], "cb-fixed");
    for (int k = 0; k < 3; k++) write_ds(dirs[k], k);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int flips, told, tried;
        check_case(dirs[cases[i].kind], &cases[i], &flips, &told, &tried);
        ck_assert_msg(flips > 0 && flips < 2 * N, "case %zu: %d of %d crops flipped", i, flips, 2 * N);
        ck_assert_msg(tried >= 3 * 2 * N && told * 20 >= tried * 19,
                      "case %zu: only %d of %d moved boxes told apart", i, told, tried);
    }
}
END_TEST

/* Boxes are a function of (transform, seed, epoch, record) alone: another
 * epoch or seed draws another; the eval box is the same every epoch. */
START_TEST(box_is_a_pure_function)
{
    stk_transform t;
    stk_transform_imagenet(&t, 1, 224);
    stk_crop_box a, b;
    stk_error e;
    int differ = 0;
    for (uint64_t rec = 0; rec < 50; rec++) {
        ck_assert(stk_transform_crop_box(&t, 1, 3, 0, rec, 375, 500, &a, &e) == 0);
        ck_assert(stk_transform_crop_box(&t, 1, 3, 0, rec, 375, 500, &b, &e) == 0);
        ck_assert(memcmp(&a, &b, sizeof a) == 0);
        ck_assert(a.x0 == floor(a.x0) && a.w == floor(a.w)); /* RandomResizedCrop's box is whole pixels */
        ck_assert(stk_transform_crop_box(&t, 1, 3, 1, rec, 375, 500, &b, &e) == 0);
        differ += memcmp(&a, &b, sizeof a) != 0;
        ck_assert(stk_transform_crop_box(&t, 1, 4, 0, rec, 375, 500, &b, &e) == 0);
        differ += memcmp(&a, &b, sizeof a) != 0;
    }
    ck_assert_int_ge(differ, 95);
    /* the eval crop of a 375 x 500 image: Resize(256) -> 341 x 256, CenterCrop(224) at (58, 16) */
    stk_transform_imagenet(&t, 0, 224);
    ck_assert(stk_transform_crop_box(&t, 1, 3, 7, 9, 375, 500, &a, &e) == 0);
    double s = 375.0 / 256;
    ck_assert(fabs(a.x0 - 58 * 500.0 / 341) < 1e-9 && fabs(a.y0 - 16 * s) < 1e-9);
    ck_assert(fabs(a.w - 224 * 500.0 / 341) < 1e-9 && fabs(a.h - 224 * s) < 1e-9 && a.flip == 0);
    /* a fixed-shape field: the central 224 x 224 */
    ck_assert(stk_transform_crop_box(&t, 0, 3, 7, 9, 256, 300, &a, &e) == 0);
    ck_assert(a.x0 == 38 && a.y0 == 16 && a.w == 224 && a.h == 224);
}
END_TEST

START_TEST(refusals)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "cb-refuse");
    write_ds(dir, DS_RAW);
    stk_reader_options o = tu_reader_options(4, STK_ORDER_SEQUENTIAL);
    stk_reader *r = tu_open_reader(dir, &o);
    stk_crop_box box;
    stk_error e;
    ck_assert_int_eq(stk_reader_crop_box(r, 0, 0, 0, 0, &box, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "no transform");
    stk_reader_close(r);
    stk_transform t;
    stk_transform_imagenet(&t, 1, 32);
    o.transform = &t;
    r = tu_open_reader(dir, &o);
    ck_assert_int_eq(stk_reader_crop_box(r, 0, N, 0, 0, &box, &e), STK_E_RANGE);
    tu_assert_error(&e, STK_E_RANGE, "past the dataset");
    ck_assert_int_eq(stk_reader_crop_box(r, 0, 1, 20, 0, &box, &e), STK_E_ARG);
    ck_assert_int_eq(stk_reader_crop_box(r, 0, 1, 70000, 20, &box, &e), STK_E_ARG);
    stk_reader_close(r);
    stk_transform_imagenet(&t, 1, 0); /* images of their own size need the output size */
    ck_assert_int_eq(stk_transform_crop_box(&t, 1, 0, 0, 0, 20, 20, &box, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "output size");
    ck_assert_int_eq(stk_transform_crop_box(&t, 0, 0, 0, 0, 20, 20, &box, &e),
                     0); /* a fixed field: its size */
    ck_assert(box.w <= 20 && box.h <= 20);
    t.scale_min = 0;
    ck_assert_int_eq(stk_transform_crop_box(&t, 0, 0, 0, 0, 20, 20, &box, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "scale_min");
}
END_TEST

TU_MAIN("crop_box",
        {.name = "crop_box", .timeout = 300, .tests = {box_matches_pixels, box_is_a_pure_function, refusals}})
