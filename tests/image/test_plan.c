/* tests/image/test_plan.c - the decode planner (image/plan.c), the scaled
 * region decode it drives (image/jpeg.c) and the fractional-box resize
 * (image/resize.c's stk__resize_box).
 *
 * The planner picks the smallest allowed DCT scale that keeps the output's
 * resolution over the box, and its region covers the box inside the scaled
 * frame. A planned decode gives, for every subsampling, greyscale,
 * progressive and restart-marker files, exactly the pixels of a whole
 * TurboJPEG decode at that scale over its region (with merged upsampling,
 * the reader's setting, those of a whole merged decode), also with
 * libjpeg's memory kept across images. Fidelity: the planned
 * crop against a full decode + the same resample (the current path, itself
 * torchvision's PIL antialias within rounding) stays within the PSNR bound
 * README states (mean >= 35 dB, worst >= 30 dB). */
#include "image.h"
#include "image_ref.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include <jpeglib.h>

/* ------------------------------------------------------------ planner */

START_TEST(every_scale_chosen)
{
    stk__jpeg_plan p;
    /* all eight steps: the smallest k with box * k / 8 >= out */
    for (unsigned k = 1; k <= 8; k++) {
        double box = ceil(8.0 * 224 / k);
        stk__jpeg_plan_make(2000, 2000, 10, 20, box, box, 224, 224, STK_IMG_SCALES_ALL, 0, &p);
        ck_assert_uint_eq(p.num, k);
        ck_assert(p.bw * 1 >= 224 - 1e-9 && p.bh >= 224 - 1e-9);
        if (k > 1) { /* one pixel less needs the next scale up */
            stk__jpeg_plan_make(2000, 2000, 10, 20, box - 1, box, 224, 224, STK_IMG_SCALES_ALL, 0, &p);
            ck_assert_uint_eq(p.num, k == 8 ? 8 : k + 1);
        }
    }
    /* powers of two: box 2x, 4x, 8x the output; smaller than it */
    const double box[] = {448, 896, 1792, 447, 200, 224};
    const unsigned want[] = {4, 2, 1, 8, 8, 8};
    for (int i = 0; i < 6; i++) {
        stk__jpeg_plan_make(1800, 1900, 0, 0, box[i], box[i], 224, 224, STK_IMG_SCALES_POW2, 0, &p);
        ck_assert_uint_eq(p.num, want[i]);
    }
    /* the tighter axis decides */
    stk__jpeg_plan_make(1800, 1900, 0, 0, 1792, 448, 224, 224, STK_IMG_SCALES_POW2, 0, &p);
    ck_assert_uint_eq(p.num, 4);
    /* a 1-pixel image */
    stk__jpeg_plan_make(1, 1, 0, 0, 1, 1, 224, 224, STK_IMG_SCALES_ALL, 1, &p);
    ck_assert_uint_eq(p.num, 8);
    ck_assert(p.x0 == 0 && p.y0 == 0 && p.w == 1 && p.h == 1 && p.sw == 1 && p.sh == 1);
    ck_assert(p.bx == 0 && p.by == 0 && p.bw == 1 && p.bh == 1);
    stk__jpeg_plan_make(1, 1, 0, 0, 1, 1, 1, 1, STK_IMG_SCALES_ALL, 0, &p);
    ck_assert_uint_eq(p.num, 8); /* 1 * k >= 8 only at 8 */
    /* the eval crop's source region: 1000 x 1000 resized to 256, the central 224 from 16 */
    double bx, by, bw, bh;
    stk__img_eval_box(224, 224, 1000, 1000, &bx, &by, &bw, &bh);
    ck_assert(bx == 62.5 && by == 62.5 && bw == 875 && bh == 875);
    stk__img_eval_box(224, 224, 1000, 500, &bx, &by, &bw, &bh); /* 512 x 256: window at (144, 16) */
    ck_assert(fabs(bx - 144 * 1000.0 / 512) < 1e-9 && fabs(by - 16 * 500.0 / 256) < 1e-9);
    ck_assert(fabs(bw - 437.5) < 1e-9 && fabs(bh - 437.5) < 1e-9);
}
END_TEST

/* The region covers the box, stays in the scaled frame, and the box maps to
 * the region's coordinates. */
static void check_cover(uint32_t W, uint32_t H, double bx, double by, double bw, double bh, unsigned out,
                        unsigned nums, int spill)
{
    stk__jpeg_plan p;
    stk__jpeg_plan_make(W, H, bx, by, bw, bh, out, out, nums, spill, &p);
    double f = p.num / 8.0;
    ck_assert_uint_eq(p.sw, (W * p.num + 7) / 8);
    ck_assert_uint_eq(p.sh, (H * p.num + 7) / 8);
    ck_assert(p.w >= 1 && p.h >= 1 && p.x0 + p.w <= p.sw && p.y0 + p.h <= p.sh);
    ck_assert(p.bx >= 0 && p.by >= 0 && p.bx + p.bw <= p.w + 1e-9 && p.by + p.bh <= p.h + 1e-9);
    ck_assert_msg(fabs(p.x0 + p.bx - bx * f) < 1e-9 && fabs(p.y0 + p.by - by * f) < 1e-9, "box origin");
    ck_assert_msg(fabs(p.bw - bw * f) < 1e-9 && fabs(p.bh - bh * f) < 1e-9, "box size");
}

START_TEST(box_edges)
{
    const uint32_t W = 1003, H = 777;
    for (int spill = 0; spill <= 1; spill++)
        for (unsigned nums = STK_IMG_SCALES_POW2; nums;
             nums = nums == STK_IMG_SCALES_POW2 ? STK_IMG_SCALES_ALL : 0) {
            check_cover(W, H, 0, 0, 500, 400, 100, nums, spill);              /* top left */
            check_cover(W, H, W - 500, 0, 500, 400, 100, nums, spill);        /* right */
            check_cover(W, H, 0, H - 400, 500, 400, 100, nums, spill);        /* bottom */
            check_cover(W, H, W - 333, H - 401, 333, 401, 37, nums, spill);   /* bottom right */
            check_cover(W, H, 0, 0, W, H, 224, nums, spill);                  /* the whole frame */
            check_cover(W, H, 517, 301, 5, 3, 224, nums, spill);              /* under an iMCU */
            check_cover(W, H, 17.25, 33.5, 611.125, 400.75, 64, nums, spill); /* fractional */
        }
}
END_TEST

/* ------------------------------------------------------ planned decode */

/* A JPEG of a detailed W x H image through libjpeg's own compressor:
 * sampling factors h x v of the luma (0: greyscale), progressive, restart
 * interval in MCU rows (0: none). */
static uint8_t *make(const tu_image *im, int hs, int vs, int progressive, int restart, unsigned long *len)
{
    struct jpeg_compress_struct cc;
    struct jpeg_error_mgr jerr;
    cc.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&cc);
    unsigned char *out = NULL;
    jpeg_mem_dest(&cc, &out, len);
    cc.image_width = im->w;
    cc.image_height = im->h;
    cc.input_components = 3;
    cc.in_color_space = JCS_RGB;
    jpeg_set_defaults(&cc);
    jpeg_set_quality(&cc, 92, TRUE);
    if (hs == 0) {
        jpeg_set_colorspace(&cc, JCS_GRAYSCALE);
    } else {
        cc.comp_info[0].h_samp_factor = hs;
        cc.comp_info[0].v_samp_factor = vs;
    }
    if (progressive) jpeg_simple_progression(&cc);
    cc.restart_in_rows = restart;
    jpeg_start_compress(&cc, TRUE);
    for (uint32_t y = 0; y < im->h; y++) {
        JSAMPROW row = im->px + (size_t)y * im->w * 3;
        jpeg_write_scanlines(&cc, &row, 1);
    }
    jpeg_finish_compress(&cc);
    jpeg_destroy_compress(&cc);
    return out;
}

/* A whole decode at num/8 to RGB through libjpeg itself (TurboJPEG picks
 * its scale from the output size, which several scales share on images
 * this small); merged: without fancy upsampling. */
static void libjpeg_whole(const uint8_t *jb, unsigned long len, unsigned num, int merged, uint8_t *out)
{
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, jb, len);
    jpeg_read_header(&ci, TRUE);
    ci.out_color_space = JCS_RGB;
    ci.scale_num = num;
    ci.scale_denom = 8;
    ci.do_fancy_upsampling = merged ? FALSE : TRUE;
    jpeg_start_decompress(&ci);
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = out + (size_t)ci.output_scanline * ci.output_width * 3;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
}

/* The planned decode of each box equals the region of a whole decode at
 * the plan's scale; with merged upsampling (the reader's crops), the region
 * of a whole decode with merged upsampling. */
static void planned_equals_whole(int hs, int vs, int progressive, int restart)
{
    tu_image im = tu_synth(203, 157, TU_DETAIL, 7);
    unsigned long len = 0;
    uint8_t *jpg = make(&im, hs, vs, progressive, restart, &len);
    stk__jpeg *j = stk__jpeg_new();
    stk__img_buf buf = {0};
    tjhandle tj = tjInitDecompress();
    const double boxes[][4] = {{0, 0, 203, 157},  {0, 0, 90, 60},  {113, 0, 90, 70},         {0, 97, 80, 60},
                               {120, 90, 83, 67}, {101, 77, 3, 2}, {64.5, 31.25, 100.5, 99}, {7, 9, 1, 1}};
    for (unsigned m = 0; m < 2; m++) {
        stk__jpeg_set_opts(j, STK_IMG_JPEG_ARENA | (m ? STK_IMG_JPEG_MERGED : 0));
        for (unsigned k = 1; k <= 8; k++) {
            for (size_t b = 0; b < sizeof boxes / sizeof *boxes; b++) {
                stk__jpeg_plan p;
                /* out 1 x 1 and only scale k: the plan takes k wherever the box allows */
                stk__jpeg_plan_make(im.w, im.h, boxes[b][0], boxes[b][1], boxes[b][2], boxes[b][3], 1, 1,
                                    1u << k, b == 6, &p);
                const uint8_t *at;
                size_t stride;
                stk_error e;
                ck_assert_msg(
                    stk__jpeg_decode_plan(j, jpg, len, im.w, im.h, &p, &buf, 64, &at, &stride, &e) == STK_OK,
                    "%s", e.msg);
                uint8_t *whole = tu_xmalloc((size_t)p.sw * p.sh * 3);
                if (m) libjpeg_whole(jpg, len, p.num, 1, whole);
                else
                    ck_assert_int_eq(tjDecompress2(tj, jpg, len, whole, (int)p.sw, 0, (int)p.sh, TJPF_RGB, 0),
                                     0);
                for (uint32_t y = 0; y < p.h; y++)
                    ck_assert_msg(memcmp(at + y * stride, whole + ((size_t)(p.y0 + y) * p.sw + p.x0) * 3,
                                         (size_t)p.w * 3) == 0,
                                  "samp %dx%d prog %d rst %d merged %u: scale %u/8 box %zu row %u differs",
                                  hs, vs, progressive, restart, m, p.num, b, y);
                free(whole);
            }
        }
    }
    tjDestroy(tj);
    stk__img_buf_free(&buf);
    stk__jpeg_free(j);
    free(jpg);
    tu_image_free(&im);
}

START_TEST(sub_444) { planned_equals_whole(1, 1, 0, 0); }
END_TEST
START_TEST(sub_422) { planned_equals_whole(2, 1, 0, 0); }
END_TEST
START_TEST(sub_420) { planned_equals_whole(2, 2, 0, 0); }
END_TEST
START_TEST(sub_440) { planned_equals_whole(1, 2, 0, 0); }
END_TEST
START_TEST(sub_411) { planned_equals_whole(4, 1, 0, 0); }
END_TEST
START_TEST(greyscale) { planned_equals_whole(0, 0, 0, 0); }
END_TEST
START_TEST(progressive) { planned_equals_whole(2, 2, 1, 0); }
END_TEST
START_TEST(restart_markers) { planned_equals_whole(2, 2, 0, 1); }
END_TEST


/* 1-pixel and 1-pixel-thin images, colour (4:2:0, 4:4:4) and greyscale:
 * every scale's plan decodes to the pixels of a whole decode at that
 * scale. */
START_TEST(one_pixel_images)
{
    static const uint32_t dims[][2] = {{1, 1}, {1, 17}, {23, 1}, {2, 2}};
    static const int samps[] = {TJSAMP_420, TJSAMP_444, TJSAMP_GRAY};
    stk__jpeg *j = stk__jpeg_new();
    stk__img_buf buf = {0};
    tjhandle tc = tjInitCompress();
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
        for (size_t si = 0; si < sizeof samps / sizeof *samps; si++) {
            uint32_t w = dims[di][0], h = dims[di][1];
            tu_image im = tu_synth(w, h, TU_DETAIL, (unsigned)(di * 3 + si));
            unsigned char *jb = NULL;
            unsigned long len = 0;
            ck_assert_int_eq(tjCompress2(tc, im.px, (int)w, 0, (int)h, TJPF_RGB, &jb, &len, samps[si], 90, 0),
                             0);
            for (unsigned k = 1; k <= 8; k++) {
                stk__jpeg_plan p;
                stk__jpeg_plan_make(w, h, 0, 0, w, h, 1, 1, 1u << k, 0, &p);
                ck_assert(p.w == p.sw && p.h == p.sh && p.w >= 1 && p.h >= 1);
                const uint8_t *at;
                size_t stride;
                stk_error e;
                ck_assert_msg(stk__jpeg_decode_plan(j, jb, len, w, h, &p, &buf, 64, &at, &stride, &e) ==
                                  STK_OK,
                              "%ux%u samp %d scale %u/8: %s", w, h, samps[si], p.num, e.msg);
                uint8_t whole[64 * 3];
                ck_assert_uint_le((size_t)p.sw * p.sh, 64);
                libjpeg_whole(jb, len, p.num, 0, whole);
                for (uint32_t y = 0; y < p.h; y++)
                    ck_assert_msg(memcmp(at + y * stride, whole + (size_t)y * p.sw * 3, (size_t)p.w * 3) == 0,
                                  "%ux%u samp %d scale %u/8 row %u differs", w, h, samps[si], p.num, y);
            }
            tjFree(jb);
            tu_image_free(&im);
        }
    tjDestroy(tc);
    stk__img_buf_free(&buf);
    stk__jpeg_free(j);
}
END_TEST

/* A progressive JPEG of 757 scans (each AC coefficient of each component
 * alone, in four successive-approximation steps): over the 500 scans every
 * decoder here allows, so the region decode, the transcode to baseline and
 * the check all refuse it, and the decoder reads a good file next. */
START_TEST(too_many_scans_refused)
{
    tu_image im = tu_synth(16, 16, TU_DETAIL, 2);
    struct jpeg_compress_struct cc;
    struct jpeg_error_mgr jerr;
    cc.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&cc);
    unsigned char *jb = NULL;
    unsigned long len = 0;
    jpeg_mem_dest(&cc, &jb, &len);
    cc.image_width = cc.image_height = 16;
    cc.input_components = 3;
    cc.in_color_space = JCS_RGB;
    jpeg_set_defaults(&cc);
    for (int c = 0; c < 3; c++) cc.comp_info[c].h_samp_factor = cc.comp_info[c].v_samp_factor = 1;
    static jpeg_scan_info scans[1 + 3 * 63 * 4];
    int n = 0;
    scans[n++] = (jpeg_scan_info){3, {0, 1, 2, 0}, 0, 0, 0, 0};
    for (int c = 0; c < 3; c++)
        for (int k = 1; k < 64; k++)
            for (int al = 3; al >= 0; al--)
                scans[n++] = (jpeg_scan_info){1, {c, 0, 0, 0}, k, k, al == 3 ? 0 : al + 1, al};
    cc.scan_info = scans;
    cc.num_scans = n;
    jpeg_start_compress(&cc, TRUE);
    for (uint32_t y = 0; y < 16; y++) {
        JSAMPROW row = im.px + (size_t)y * 16 * 3;
        jpeg_write_scanlines(&cc, &row, 1);
    }
    jpeg_finish_compress(&cc);
    jpeg_destroy_compress(&cc);
    ck_assert_int_gt(n, 500);
    stk__jpeg *j = stk__jpeg_new();
    stk__img_buf buf = {0};
    stk__jpeg_plan p;
    stk__jpeg_plan_make(16, 16, 0, 0, 16, 16, 16, 16, STK_IMG_SCALES_POW2, 0, &p);
    const uint8_t *at;
    size_t stride;
    stk_error e;
    ck_assert_int_eq(stk__jpeg_decode_plan(j, jb, len, 16, 16, &p, &buf, 64, &at, &stride, &e),
                     STK_IMG_E_CORRUPT);
    ck_assert_msg(strstr(e.msg, "more than 500 scans") != NULL, "%s", e.msg);
    uint8_t *b = NULL;
    size_t bn = 0;
    ck_assert_int_eq(stk__jpeg_transcode(jb, len, 0, &b, &bn, NULL, &e), STK_IMG_E_CORRUPT);
    ck_assert_msg(strstr(e.msg, "more than 500 scans") != NULL, "%s", e.msg);
    ck_assert_ptr_null(b);
    ck_assert_int_eq(stk__jpeg_check(jb, len, &e), STK_IMG_E_CORRUPT);
    /* the next, good file decodes */
    unsigned long glen = 0;
    uint8_t *good = make(&im, 1, 1, 1, 0, &glen);
    ck_assert_int_eq(stk__jpeg_decode_plan(j, good, glen, 16, 16, &p, &buf, 64, &at, &stride, &e), STK_OK);
    free(good);
    free(jb);
    stk__img_buf_free(&buf);
    stk__jpeg_free(j);
    tu_image_free(&im);
}
END_TEST

/* The region decodes' memory kept across images (STK_IMG_JPEG_ARENA) gives
 * the pixels of libjpeg's own per-image pools, over a run of images that
 * grow, shrink, change sampling and scale, are progressive, and fail part
 * way (truncated), each decoded twice in a row, with the merged upsampling
 * and without. */
START_TEST(arena_keeps_pixels)
{
    static const struct {
        uint32_t w, h;
        int hs, vs, prog;
    } ims[] = {{203, 157, 2, 2, 0}, {1900, 40, 1, 1, 0}, {16, 16, 2, 2, 1},   {640, 480, 2, 1, 0},
               {640, 480, 2, 2, 0}, {7, 300, 0, 0, 0},   {203, 157, 2, 2, 1}, {1200, 900, 2, 2, 0}};
    enum { N = sizeof ims / sizeof *ims };
    uint8_t *jpg[N];
    unsigned long len[N];
    for (size_t i = 0; i < N; i++) {
        tu_image im = tu_synth(ims[i].w, ims[i].h, TU_DETAIL, (uint64_t)i + 20);
        len[i] = 0;
        jpg[i] = make(&im, ims[i].hs, ims[i].vs, ims[i].prog, 0, &len[i]);
        tu_image_free(&im);
    }
    for (unsigned base = 0; base <= STK_IMG_JPEG_MERGED; base += STK_IMG_JPEG_MERGED) {
        stk__jpeg *a = stk__jpeg_new(), *b = stk__jpeg_new();
        stk__jpeg_set_opts(a, base);
        stk__jpeg_set_opts(b, base | STK_IMG_JPEG_ARENA);
        stk__img_buf ba = {0}, bb = {0};
        for (int round = 0; round < 2; round++)
            for (size_t i = 0; i < N; i++)
                for (int twice = 0; twice < 2; twice++) {
                    /* every third image cut short before its last rows: a failure part way */
                    int cut = (i + (size_t)round) % 3 == 1 && twice == 1;
                    size_t n = cut ? len[i] * 2 / 3 : len[i];
                    double bw = ims[i].w * (0.3 + 0.7 * twice), bh = ims[i].h * (0.3 + 0.7 * twice);
                    stk__jpeg_plan p;
                    stk__jpeg_plan_make(ims[i].w, ims[i].h, ims[i].w - bw, ims[i].h - bh, bw, bh, 100, 60,
                                        STK_IMG_SCALES_POW2, round, &p);
                    const uint8_t *ata, *atb;
                    size_t sa, sb;
                    stk_error ea, eb;
                    int ra =
                        stk__jpeg_decode_plan(a, jpg[i], n, ims[i].w, ims[i].h, &p, &ba, 64, &ata, &sa, &ea);
                    int rb =
                        stk__jpeg_decode_plan(b, jpg[i], n, ims[i].w, ims[i].h, &p, &bb, 64, &atb, &sb, &eb);
                    ck_assert_int_eq(ra, rb);
                    ck_assert_int_eq(ra, cut ? STK_IMG_E_CORRUPT : STK_OK);
                    if (ra) continue;
                    for (uint32_t y = 0; y < p.h; y++)
                        ck_assert_msg(memcmp(ata + y * sa, atb + y * sb, (size_t)p.w * 3) == 0,
                                      "opts %u image %zu (%ux%u) scale %u/8: row %u differs", base, i,
                                      ims[i].w, ims[i].h, p.num, y);
                }
        stk__img_buf_free(&ba);
        stk__img_buf_free(&bb);
        stk__jpeg_free(a);
        stk__jpeg_free(b);
    }
    for (size_t i = 0; i < N; i++) free(jpg[i]);
}
END_TEST

START_TEST(cmyk_is_left_to_the_caller)
{
    /* a CMYK frame: unsupported before any work, so the caller decodes it whole */
    uint8_t px[16 * 16 * 4];
    memset(px, 77, sizeof px);
    tjhandle tj = tjInitCompress();
    unsigned char *jb = NULL;
    unsigned long len = 0;
    ck_assert_int_eq(tjCompress2(tj, px, 16, 0, 16, TJPF_CMYK, &jb, &len, TJSAMP_444, 90, 0), 0);
    tjDestroy(tj);
    stk__jpeg *j = stk__jpeg_new();
    stk__img_buf buf = {0};
    stk__jpeg_plan p;
    stk__jpeg_plan_make(16, 16, 0, 0, 16, 16, 8, 8, STK_IMG_SCALES_POW2, 0, &p);
    const uint8_t *at;
    size_t stride;
    stk_error e;
    ck_assert_int_eq(stk__jpeg_decode_plan(j, jb, len, 16, 16, &p, &buf, 64, &at, &stride, &e),
                     STK_IMG_E_UNSUPPORTED);
    stk__img_buf_free(&buf);
    stk__jpeg_free(j);
    tjFree(jb);
}
END_TEST

/* ------------------------------------------------------------ fidelity */

static double psnr(const uint8_t *a, const uint8_t *b, size_t n)
{
    double se = 0;
    for (size_t i = 0; i < n; i++) se += (double)(a[i] - b[i]) * (a[i] - b[i]);
    return se == 0 ? 99.0 : 10 * log10(255.0 * 255.0 * (double)n / se);
}

/* The planned crop (scaled region + fractional-box resize) against a full
 * decode + stk__resize of the same integer box, for random boxes of
 * RandomResizedCrop's range on photo-like images of 1,600 x 1,200. */
static void fidelity(uint32_t W, uint32_t H, unsigned opts, unsigned min_scaled)
{
    enum { OUT = 224, N = 60 };
    tu_image im = tu_synth(W, H, TU_GRADIENT, 11);
    tu_image det = tu_synth(W, H, TU_DETAIL, 12);
    for (size_t i = 0; i < (size_t)im.w * im.h * 3; i++) /* smooth areas with some texture, as photos */
        im.px[i] = (uint8_t)((3 * im.px[i] + det.px[i]) / 4);
    unsigned long len = 0;
    uint8_t *jpg = make(&im, 2, 2, 0, 0, &len);
    stk__jpeg *j = stk__jpeg_new();
    stk__jpeg_set_opts(j, opts);
    stk__resizer *rs = stk__resizer_new();
    stk__img_buf buf = {0};
    uint8_t *full = tu_xmalloc((size_t)im.w * im.h * 3 + 64);
    tjhandle tj = tjInitDecompress();
    ck_assert_int_eq(tjDecompress2(tj, jpg, len, full, (int)im.w, 0, (int)im.h, TJPF_RGB, 0), 0);
    tjDestroy(tj);
    static uint8_t got[OUT * OUT * 3], want[OUT * OUT * 3];
    uint64_t s = 5;
    double sum = 0, worst = 99;
    unsigned scaled = 0;
    for (int n = 0; n < N; n++) {
        double area = 0.08 + 0.92 * (double)(tu_rng_next(&s) >> 11) / 9007199254740992.0;
        double ar = exp(log(3.0 / 4) + log(16.0 / 9) * (double)(tu_rng_next(&s) >> 11) / 9007199254740992.0);
        uint32_t bw = (uint32_t)fmin(im.w, round(sqrt(area * im.w * im.h * ar)));
        uint32_t bh = (uint32_t)fmin(im.h, round(sqrt(area * im.w * im.h / ar)));
        uint32_t x0 = (uint32_t)(tu_rng_next(&s) % (im.w - bw + 1)),
                 y0 = (uint32_t)(tu_rng_next(&s) % (im.h - bh + 1));
        int flip = (int)(tu_rng_next(&s) & 1);
        stk__rect win = {0, 0, OUT, OUT};
        stk__rgb_view src = {full + ((size_t)y0 * im.w + x0) * 3, bw, bh, (size_t)im.w * 3, 0};
        ck_assert_int_eq(stk__resize(rs, &src, OUT, OUT, &win, flip, want, OUT * 3), 0);
        stk__jpeg_plan p;
        stk__jpeg_plan_make(im.w, im.h, x0, y0, bw, bh, OUT, OUT, STK_IMG_SCALES_POW2, 0, &p);
        scaled += p.num < 8;
        const uint8_t *at;
        size_t stride;
        stk_error e;
        ck_assert_int_eq(stk__jpeg_decode_plan(j, jpg, len, im.w, im.h, &p, &buf, 64, &at, &stride, &e),
                         STK_OK);
        stk__rgb_view rv = {at, p.w, p.h, stride, 0};
        ck_assert_int_eq(stk__resize_box(rs, &rv, p.bx, p.by, p.bw, p.bh, OUT, OUT, &win, flip, got, OUT * 3),
                         0);
        double q = psnr(got, want, sizeof got);
        sum += q;
        if (q < worst) worst = q;
    }
    printf("fidelity %ux%u, opts %u: %u of %d crops scaled, PSNR mean %.2f dB, worst %.2f dB\n", W, H, opts,
           scaled, N, sum / N, worst);
    ck_assert_uint_ge(scaled, min_scaled);
    ck_assert_msg(sum / N >= 35.0, "mean PSNR %.2f dB", sum / N);
    ck_assert_msg(worst >= 30.0, "worst PSNR %.2f dB", worst);
    free(full);
    stk__img_buf_free(&buf);
    stk__resizer_free(rs);
    stk__jpeg_free(j);
    free(jpg);
    tu_image_free(&im);
    tu_image_free(&det);
}

START_TEST(fidelity_psnr) { fidelity(1600, 1200, STK_IMG_JPEG_ARENA, 31); }
END_TEST

/* The reader's settings (merged upsampling) on images of 300-500 px, whose
 * random crops are mostly decoded at full scale, 4:2:0. */
START_TEST(fidelity_psnr_merged)
{
    fidelity(480, 360, STK_IMG_JPEG_ARENA | STK_IMG_JPEG_MERGED, 0);
    fidelity(1600, 1200, STK_IMG_JPEG_ARENA | STK_IMG_JPEG_MERGED, 31);
}
END_TEST

/* The flip folded into the box resize (its tables mirrored: no pass of its
 * own) gives the pixels of the plain box resize mirrored afterwards, for
 * fractional boxes, shrinking and enlarging, SIMD and scalar kernels. */
START_TEST(box_resize_mirror_is_flip_after)
{
    tu_image im = tu_synth(211, 157, TU_DETAIL, 4);
    stk__resizer *rs = stk__resizer_new();
    stk__rgb_view src = {im.px, im.w, im.h, (size_t)im.w * 3, 0};
    static const double boxes[][4] = {{0, 0, 211, 157}, {13.25, 7.5, 150.5, 120.75}, {100.125, 40, 9.5, 11}};
    static const uint32_t outs[][2] = {{64, 48}, {224, 224}, {5, 3}};
    for (int scalar = 0; scalar < 2; scalar++) {
        stk__resizer_force_scalar(rs, scalar);
        for (size_t b = 0; b < 3; b++)
            for (size_t o = 0; o < 3; o++) {
                uint32_t ow = outs[o][0], oh = outs[o][1];
                size_t row = (size_t)ow * 3;
                uint8_t *plain = tu_xmalloc(row * oh), *mir = tu_xmalloc(row * oh);
                stk__rect win = {0, 0, ow, oh};
                ck_assert_int_eq(stk__resize_box(rs, &src, boxes[b][0], boxes[b][1], boxes[b][2], boxes[b][3],
                                                 ow, oh, &win, 0, plain, row),
                                 0);
                ck_assert_int_eq(stk__resize_box(rs, &src, boxes[b][0], boxes[b][1], boxes[b][2], boxes[b][3],
                                                 ow, oh, &win, 1, mir, row),
                                 0);
                for (uint32_t y = 0; y < oh; y++)
                    for (uint32_t x = 0; x < ow; x++)
                        ck_assert_msg(memcmp(mir + y * row + 3 * x, plain + y * row + 3 * (ow - 1 - x), 3) ==
                                          0,
                                      "box %zu out %ux%u (%s): (%u, %u) is not the mirrored pixel", b, ow, oh,
                                      scalar ? "scalar" : "SIMD", x, y);
                free(plain);
                free(mir);
            }
    }
    stk__resizer_free(rs);
    tu_image_free(&im);
}
END_TEST

/* At 8/8 with an integer box the box resize is the plain resize, byte for byte. */
START_TEST(box_resize_at_integer_box_is_plain)
{
    tu_image im = tu_synth(300, 200, TU_DETAIL, 3);
    stk__resizer *rs = stk__resizer_new();
    static uint8_t a[100 * 80 * 3], b[100 * 80 * 3];
    stk__rect win = {0, 0, 100, 80};
    stk__rgb_view src = {im.px + (20 * 300 + 30) * 3, 170, 150, 300 * 3, 0};
    ck_assert_int_eq(stk__resize(rs, &src, 100, 80, &win, 1, a, 300), 0);
    stk__rgb_view whole = {im.px, 300, 200, 300 * 3, 0};
    /* the box inside a larger view: the same centres; taps clipped to the view, not the box, so
     * compare inner outputs only */
    ck_assert_int_eq(stk__resize_box(rs, &whole, 30, 20, 170, 150, 100, 80, &win, 1, b, 300), 0);
    for (int y = 2; y < 78; y++)
        ck_assert_msg(memcmp(a + y * 300 + 6, b + y * 300 + 6, 300 - 12) == 0, "row %d", y);
    ck_assert_int_eq(stk__resize_box(rs, &src, 0, 0, 170, 150, 100, 80, &win, 1, b, 300), 0);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    stk__resizer_free(rs);
    tu_image_free(&im);
}
END_TEST

TU_MAIN("image_plan", {.name = "plan", .tests = {every_scale_chosen, box_edges}},
        {.name = "decode",
         .timeout = 120,
         .tests = {sub_444, sub_422, sub_420, sub_440, sub_411, greyscale, progressive, restart_markers,
                   one_pixel_images, too_many_scans_refused, cmyk_is_left_to_the_caller, arena_keeps_pixels}},
        {.name = "fidelity",
         .timeout = 300,
         .tests = {fidelity_psnr, fidelity_psnr_merged, box_resize_at_integer_box_is_plain,
                   box_resize_mirror_is_flip_after}})
