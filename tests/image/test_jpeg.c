/* tests/image/test_jpeg.c - the one JPEG decoder (image/jpeg.c).
 *
 * Its whole, DCT-scaled, greyscale and region decodes give TurboJPEG's own
 * pixels (flags 0: what the decoder promises is the same pixels, only
 * stricter about damage); headers are trusted only where the frame header
 * agrees; every failure (a cut anywhere, damaged entropy data inside the
 * decoded part) is an error, and the decoder reads the next good value
 * right; a region decode stops after its last row, so damage below it goes
 * unseen (what the region decode may do). */
#include "image.h"
#include "image_ref.h"
#include "testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#define W 67
#define H 45

static uint8_t *make_jpeg(int samp, int quality, unsigned long *len)
{
    static uint8_t px[W * H * 3];
    for (uint32_t y = 0; y < H; y++)
        for (uint32_t x = 0; x < W; x++)
            for (int c = 0; c < 3; c++)
                px[(y * W + x) * 3 + c] = (uint8_t)((x * 29 + y * 13 + (uint32_t)c * 85) ^ (x * y * 5));
    tjhandle tj = tjInitCompress();
    unsigned char *jb = NULL;
    ck_assert_int_eq(tjCompress2(tj, px, W, 0, H, TJPF_RGB, &jb, len, samp, quality, 0), 0);
    tjDestroy(tj);
    return jb;
}

/* make_jpeg, and *at = where its first `marker` segment starts (found). */
static uint8_t *make_jpeg_at(int samp, int quality, unsigned long *len, uint8_t marker, size_t *at)
{
    uint8_t *jpg = make_jpeg(samp, quality, len);
    *at = tu_jpeg_marker(jpg, *len, marker);
    ck_assert_uint_gt(*at, 0);
    return jpg;
}

/* TurboJPEG's own decode at 1/den, pf TJPF_RGB or TJPF_GRAY. */
static uint8_t *tj_ref(const uint8_t *jpg, unsigned long len, int pf, unsigned den)
{
    tjhandle tj = tjInitDecompress();
    tjscalingfactor sf = {1, (int)den};
    int sw = TJSCALED(W, sf), sh = TJSCALED(H, sf);
    uint8_t *out = malloc((size_t)sw * sh * tjPixelSize[pf]);
    ck_assert_int_eq(tjDecompress2(tj, jpg, len, out, sw, 0, sh, pf, 0), 0);
    tjDestroy(tj);
    return out;
}

START_TEST(header_and_whole_decodes)
{
    static const int samps[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_440};
    stk__jpeg *j = stk__jpeg_new();
    ck_assert_ptr_nonnull(j);
    for (size_t s = 0; s < sizeof samps / sizeof samps[0]; s++) {
        unsigned long len;
        uint8_t *jpg = make_jpeg(samps[s], 90, &len);
        stk__jpeg_info info;
        stk_error e;
        ck_assert_int_eq(stk__jpeg_header(j, jpg, len, &info, &e), STK_OK);
        ck_assert_uint_eq(info.w, W);
        ck_assert_uint_eq(info.h, H);
        ck_assert_uint_eq(info.components, 3);
        ck_assert_int_eq(info.colorspace, STK_IMG_CS_YCBCR);
        ck_assert_int_eq(info.subsamp, samps[s]);
        ck_assert(stk__jpeg_planar_ok(&info));
        for (unsigned den = 1; den <= 8; den *= 2)
            for (int g = 0; g < 2; g++) {
                int pf = g ? STK_IMG_PF_GRAY : STK_IMG_PF_RGB;
                size_t n = stk__jpeg_decode_bytes(&info, pf, den);
                ck_assert_uint_eq(n,
                                  (size_t)stk__jpeg_scaled(W, den) * stk__jpeg_scaled(H, den) * (g ? 1 : 3));
                uint8_t *got = malloc(n), *want = tj_ref(jpg, len, g ? TJPF_GRAY : TJPF_RGB, den);
                ck_assert_msg(stk__jpeg_decode(j, jpg, len, &info, pf, den, got, &e) == STK_OK, "%s", e.msg);
                ck_assert_msg(memcmp(got, want, n) == 0, "subsampling %d, 1/%u, %s: not TurboJPEG's pixels",
                              samps[s], den, g ? "grey" : "RGB");
                free(got);
                free(want);
            }
        tjFree(jpg);
    }
    stk__jpeg_free(j);
    stk__jpeg_free(NULL);
}
END_TEST

START_TEST(scale_choice)
{
    stk__jpeg *j = stk__jpeg_new();
    ck_assert_uint_eq(stk__jpeg_scaled(67, 8), 9);
    ck_assert_uint_eq(stk__jpeg_scaled(64, 8), 8);
    ck_assert_uint_eq(stk__jpeg_scale(j, 1024, 768, 128, 96), 8);
    ck_assert_uint_eq(stk__jpeg_scale(j, 1024, 768, 256, 192), 4); /* 1/8 leaves 128: too few */
    ck_assert_uint_eq(stk__jpeg_scale(j, 1024, 768, 171, 128), 4);
    ck_assert_uint_eq(stk__jpeg_scale(j, 1024, 768, 600, 450), 1);
    stk__jpeg_free(j);
}
END_TEST

/* Every cut of a JPEG fails, on each entry, and the next whole JPEG then
 * decodes right: the decoder's handles are replaced after a failure. */
START_TEST(cuts_fail_and_the_next_decodes)
{
    unsigned long len;
    uint8_t *jpg = make_jpeg(TJSAMP_420, 90, &len);
    uint8_t *want = tj_ref(jpg, len, TJPF_RGB, 1), *got = malloc(W * H * 3);
    stk__jpeg *j = stk__jpeg_new();
    stk__img_buf buf = {0};
    size_t sos = tu_jpeg_marker(jpg, len, 0xDA);
    for (size_t cut = 2; cut < len; cut += cut < sos + 16 ? 1 : 37) {
        stk__jpeg_info info;
        stk_error e;
        const uint8_t *at;
        size_t stride;
        int rc = stk__jpeg_header(j, jpg, cut, &info, &e);
        if (rc == STK_OK) rc = stk__jpeg_decode(j, jpg, cut, &info, STK_IMG_PF_RGB, 1, got, &e);
        ck_assert_msg(rc == STK_IMG_E_CORRUPT, "whole decode of %zu of %zu bytes: %d", cut, len, rc);
        rc = stk__jpeg_decode_region(j, jpg, cut, W, H, 0, 0, W, H, &buf, 0, &at, &stride, &e);
        ck_assert_msg(rc == STK_IMG_E_CORRUPT, "region decode of %zu of %zu bytes: %d", cut, len, rc);
        /* the whole file next, through both */
        ck_assert_msg(stk__jpeg_header(j, jpg, len, &info, &e) == STK_OK, "after a cut at %zu: %s", cut,
                      e.msg);
        ck_assert_uint_eq(info.w, W);
        ck_assert_uint_eq(info.h, H);
        ck_assert_int_eq(stk__jpeg_decode(j, jpg, len, &info, STK_IMG_PF_RGB, 1, got, &e), STK_OK);
        ck_assert_msg(memcmp(got, want, W * H * 3) == 0, "after a cut at %zu: other pixels", cut);
        ck_assert_int_eq(stk__jpeg_decode_region(j, jpg, len, W, H, 0, 0, W, H, &buf, 0, &at, &stride, &e),
                         STK_OK);
        for (uint32_t y = 0; y < H; y++) ck_assert(memcmp(at + y * stride, want + y * W * 3, W * 3) == 0);
    }
    stk__img_buf_free(&buf);
    stk__jpeg_free(j);
    free(got);
    free(want);
    tjFree(jpg);
}
END_TEST

/* A file cut right before its frame header: TurboJPEG 2.1 reads it as a
 * tables-only stream and "succeeds"; the frame header says otherwise. */
START_TEST(header_needs_a_frame_header)
{
    unsigned long len;
    size_t sof;
    uint8_t *jpg = make_jpeg_at(TJSAMP_444, 90, &len, 0xC0, &sof);
    stk__jpeg *j = stk__jpeg_new();
    stk__jpeg_info info;
    stk_error e;
    ck_assert_int_eq(stk__jpeg_header(j, jpg, sof, &info, &e), STK_IMG_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(e.msg, "corrupt JPEG"));
    ck_assert_uint_eq(info.w, 0);
    stk__jpeg_free(j);
    tjFree(jpg);
}
END_TEST

/* Damaged entropy data inside the decoded part is an error on every entry;
 * below a region's last row it goes unseen (the decode stops there). */
START_TEST(warning_is_an_error)
{
    unsigned long len;
    size_t sos;
    uint8_t *jpg = make_jpeg_at(TJSAMP_420, 95, &len, 0xDA, &sos);
    size_t sos_len = (size_t)jpg[sos + 2] << 8 | jpg[sos + 3];
    /* the last quarter of the scan data, where the bottom rows are */
    uint8_t *bad = malloc(len);
    memcpy(bad, jpg, len);
    for (size_t i = sos + 2 + sos_len + (len - sos) * 3 / 4; i < len - 2; i += 3)
        if (bad[i] != 0xFF && bad[i] != 0x00) bad[i] ^= 0x5A;
    stk__jpeg *j = stk__jpeg_new();
    stk__img_buf buf = {0};
    stk__jpeg_info info;
    stk_error e;
    uint8_t *out = malloc(W * H * 4);
    const uint8_t *at;
    size_t stride;
    stk__ycc_view v;
    ck_assert_int_eq(stk__jpeg_header(j, bad, len, &info, &e), STK_OK);
    ck_assert_int_eq(stk__jpeg_decode(j, bad, len, &info, STK_IMG_PF_RGB, 1, out, &e), STK_IMG_E_CORRUPT);
    ck_assert_int_eq(stk__jpeg_header(j, bad, len, &info, &e), STK_OK);
    ck_assert_int_eq(stk__jpeg_decode(j, bad, len, &info, STK_IMG_PF_RGB, 4, out, &e), STK_IMG_E_CORRUPT);
    ck_assert_int_eq(stk__jpeg_header(j, bad, len, &info, &e), STK_OK);
    ck_assert_int_eq(stk__jpeg_decode_planes(j, bad, len, &info, &buf, &v, &e), STK_IMG_E_CORRUPT);
    ck_assert_int_eq(stk__jpeg_decode_region(j, bad, len, W, H, 0, 0, W, H, &buf, 0, &at, &stride, &e),
                     STK_IMG_E_CORRUPT);
    tu_assert_error(&e, STK_IMG_E_CORRUPT, "corrupt JPEG");
    /* the top rows alone: decoded, and right */
    uint8_t *want = tj_ref(jpg, len, TJPF_RGB, 1);
    ck_assert_int_eq(stk__jpeg_decode_region(j, bad, len, W, H, 5, 0, 20, 8, &buf, 0, &at, &stride, &e),
                     STK_OK);
    for (uint32_t y = 0; y < 8; y++) ck_assert(memcmp(at + y * stride, want + (y * W + 5) * 3, 20 * 3) == 0);
    free(want);
    free(out);
    free(bad);
    stk__img_buf_free(&buf);
    stk__jpeg_free(j);
    tjFree(jpg);
}
END_TEST

/* Regions of every position and size give a whole decode's pixels. */
START_TEST(region_is_whole_decode)
{
    static const int samps[] = {TJSAMP_444, TJSAMP_420, TJSAMP_422, TJSAMP_440, TJSAMP_411};
    stk__jpeg *j = stk__jpeg_new();
    stk__img_buf buf = {0};
    for (size_t s = 0; s < sizeof samps / sizeof samps[0]; s++) {
        unsigned long len;
        uint8_t *jpg = make_jpeg(samps[s], 90, &len);
        uint8_t *want = tj_ref(jpg, len, TJPF_RGB, 1);
        for (uint32_t y0 = 0; y0 < H; y0 += 7)
            for (uint32_t x0 = 0; x0 < W; x0 += 11)
                for (uint32_t h = 1; y0 + h <= H; h += 9)
                    for (uint32_t w = 1; x0 + w <= W; w += 13) {
                        const uint8_t *at;
                        size_t stride;
                        stk_error e;
                        ck_assert_int_eq(stk__jpeg_decode_region(j, jpg, len, W, H, x0, y0, w, h, &buf, 64,
                                                                 &at, &stride, &e),
                                         STK_OK);
                        ck_assert(buf.cap >= (size_t)(at - buf.p) + (h - 1) * stride + w * 3 + 64);
                        for (uint32_t y = 0; y < h; y++)
                            ck_assert_msg(memcmp(at + y * stride, want + ((y0 + y) * W + x0) * 3, w * 3) == 0,
                                          "region %u,%u %ux%u row %u", x0, y0, w, h, y);
                    }
        /* a frame of another shape is refused before decoding */
        const uint8_t *at;
        size_t stride;
        stk_error e;
        ck_assert_int_eq(
            stk__jpeg_decode_region(j, jpg, len, W + 1, H, 0, 0, 1, 1, &buf, 0, &at, &stride, &e),
            STK_IMG_E_CORRUPT);
        free(want);
        tjFree(jpg);
    }
    stk__img_buf_free(&buf);
    stk__jpeg_free(j);
}
END_TEST

START_TEST(buffer_reuse_and_give_back)
{
    stk__img_buf b = {0};
    stk_error e;
    ck_assert_int_eq(stk__img_buf_reserve(&b, 100, "x", &e), STK_OK);
    uint8_t *p = b.p;
    ck_assert_int_eq(stk__img_buf_reserve(&b, 50, "x", &e), STK_OK);
    ck_assert_ptr_eq(b.p, p); /* kept */
    ck_assert_int_eq(stk__img_buf_reserve(&b, STK_IMG_KEEP_BYTES + 1, "x", &e), STK_OK);
    ck_assert_int_eq(stk__img_buf_reserve(&b, 1000, "x", &e), STK_OK);
    ck_assert_uint_eq(b.cap, 1000); /* a huge one is given back */
    stk__img_buf_free(&b);
    ck_assert_ptr_null(b.p);
}
END_TEST

/* Progressive JPEGs rewritten as baseline: the same pixels (whole and
 * scaled decodes), a sequential frame, a file the check accepts; a baseline
 * input is left alone; a cut progressive one fails. */
START_TEST(progressive_to_baseline)
{
    static const int samps[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_440, TJSAMP_GRAY};
    static uint8_t px[W * H * 3];
    for (uint32_t i = 0; i < W * H * 3; i++) px[i] = (uint8_t)((i * 2654435761u) >> 13);
    for (size_t si = 0; si < sizeof samps / sizeof *samps; si++) {
        tjhandle tj = tjInitCompress();
        unsigned char *jb = NULL;
        unsigned long len = 0;
        ck_assert_int_eq(tjCompress2(tj, px, W, 0, H, TJPF_RGB, &jb, &len, samps[si], 85, TJFLAG_PROGRESSIVE),
                         0);
        tjDestroy(tj);
        ck_assert_uint_gt(tu_jpeg_marker(jb, len, 0xC2), 0); /* SOF2: progressive */
        uint8_t *b = NULL;
        size_t bn = 0;
        stk_error e;
        ck_assert_msg(stk__jpeg_transcode(jb, len, 0, &b, &bn, NULL, &e) == STK_OK, "%s", e.msg);
        ck_assert_ptr_nonnull(b);
        ck_assert_uint_eq(tu_jpeg_marker(b, bn, 0xC2), 0);
        ck_assert_uint_gt(tu_jpeg_marker(b, bn, 0xC0) + tu_jpeg_marker(b, bn, 0xC1), 0); /* sequential */
        ck_assert_int_eq(stk__jpeg_check(b, bn, &e), STK_OK);
        for (unsigned den = 1; den <= 8; den *= 2) {
            uint8_t *want = tj_ref(jb, len, TJPF_RGB, den), *got = tj_ref(b, bn, TJPF_RGB, den);
            tjscalingfactor sf = {1, (int)den};
            ck_assert_msg(memcmp(want, got, (size_t)TJSCALED(W, sf) * TJSCALED(H, sf) * 3) == 0,
                          "subsampling %d, 1/%u: other pixels", samps[si], den);
            free(want);
            free(got);
        }
        /* a baseline stream: nothing to do */
        uint8_t *again = (uint8_t *)1;
        size_t an = 1;
        ck_assert_int_eq(stk__jpeg_transcode(b, bn, 0, &again, &an, NULL, &e), STK_OK);
        ck_assert(again == NULL && an == 0);
        /* cut inside its scans: corrupt, nothing returned */
        ck_assert_int_eq(stk__jpeg_transcode(jb, len * 2 / 3, 0, &again, &an, NULL, &e), STK_IMG_E_CORRUPT);
        ck_assert_ptr_null(again);
        free(b);
        tjFree(jb);
    }
}
END_TEST

TU_MAIN("image_jpeg", {.name = "jpeg",
                       .timeout = 120,
                       .tests = {header_and_whole_decodes, scale_choice, cuts_fail_and_the_next_decodes,
                                 header_needs_a_frame_header, warning_is_an_error, region_is_whole_decode,
                                 buffer_reuse_and_give_back, progressive_to_baseline}})
