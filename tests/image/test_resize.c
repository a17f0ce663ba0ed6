/* tests/image/test_resize.c - image/'s resampling (resize.c, its kernels)
 * and YCbCr conversion (ycc.c).
 *
 * The resize agrees with an independent double-precision implementation of
 * Pillow's BILINEAR filter written here, on RGB and on a JPEG's planes
 * (with libjpeg's fancy upsampling, in double); mirrored, windowed and
 * roomy sources give the same bytes as the plain resize; the SIMD and scalar
 * kernels agree; the resizer's cache reuses, evicts and keeps its budget.
 *
 * Tolerances: resampled pixels may differ from the double-precision
 * reference by one level (the kernels keep 14-bit weights and an 8-bit
 * intermediate, as Pillow keeps 22-bit weights and an 8-bit intermediate).
 */
#include "resize.h"
#include "resize_internal.h" /* test seams */
#include "image_ref.h"
#include "testutil.h"
#include "ycc.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libjpeg's fancy upsampling of one 2:1 axis, in double: full sample j is
 * 3/4 of chroma sample j / 2 and 1/4 of its other neighbour (edges repeat);
 * with `box`, just sample j / 2 (what libjpeg does for chroma at most two
 * samples wide). */
static double fancy_at(const double *c, uint32_t n, uint32_t j, size_t step, int box)
{
    uint32_t c0 = j / 2, nb = j % 2 == 0 ? (c0 ? c0 - 1 : 0) : (c0 + 1 < n ? c0 + 1 : n - 1);
    if (box) return c[(size_t)c0 * step];
    return 0.75 * c[(size_t)c0 * step] + 0.25 * c[(size_t)nb * step];
}

/* The RGB image (doubles, w x h x 3) that planes y, cb, cr (cw x ch,
 * subsampled by sx, sy) stand for: chroma upsampled, JFIF conversion, no
 * rounding, no clamping. */
static double *ref_planes_rgb(const uint8_t *y, const uint8_t *cb, const uint8_t *cr, uint32_t w, uint32_t h,
                              unsigned sx, unsigned sy)
{
    uint32_t cw = (w + sx - 1) / sx, ch = (h + sy - 1) / sy;
    double *up[2], *rgb = tu_xmalloc(sizeof(double) * w * h * 3);
    const uint8_t *src[2] = {cb, cr};
    for (int k = 0; k < 2 && cb; k++) {
        double *c = tu_xmalloc(sizeof(double) * cw * ch), *mid = tu_xmalloc(sizeof(double) * w * ch);
        up[k] = tu_xmalloc(sizeof(double) * w * h);
        for (size_t i = 0; i < (size_t)cw * ch; i++) c[i] = src[k][i];
        for (uint32_t r = 0; r < ch; r++)
            for (uint32_t x = 0; x < w; x++)
                mid[(size_t)r * w + x] =
                    sx == 2 ? fancy_at(c + (size_t)r * cw, cw, x, 1, cw <= 2) : c[(size_t)r * cw + x];
        for (uint32_t yy = 0; yy < h; yy++)
            for (uint32_t x = 0; x < w; x++)
                up[k][(size_t)yy * w + x] =
                    sy == 2 ? fancy_at(mid + x, ch, yy, w, sx == 2 && cw <= 2) : mid[(size_t)yy * w + x];
        free(c);
        free(mid);
    }
    for (size_t i = 0; i < (size_t)w * h; i++) {
        double Y = y[i], u = cb ? up[0][i] - 128 : 0, v = cb ? up[1][i] - 128 : 0;
        rgb[3 * i] = Y + 1.402 * v;
        rgb[3 * i + 1] = Y - 0.34414 * u - 0.71414 * v;
        rgb[3 * i + 2] = Y + 1.772 * u;
    }
    if (cb) free(up[0]), free(up[1]);
    return rgb;
}

typedef struct {
    uint8_t *mem;
    stk__ycc_view v;
} planes;

/* Random planes inside the RGB cube (Y 60..190, chroma 100..156, so no
 * conversion clamps), each row 16 bytes longer and 32 spare bytes at the
 * end, as stk__resize_ycc asks; the spare bytes are garbage on purpose. */
static planes make_planes(uint32_t w, uint32_t h, unsigned sx, unsigned sy, int gray, uint64_t seed)
{
    planes p;
    uint32_t cw = (w + sx - 1) / sx, ch = (h + sy - 1) / sy;
    size_t st[3] = {w + 16, cw + 16, cw + 16}, at[3] = {0, st[0] * h, st[0] * h + st[1] * ch};
    size_t total = at[2] + st[2] * ch + 32;
    p.mem = tu_xmalloc(total);
    for (size_t i = 0; i < total; i++) p.mem[i] = (uint8_t)tu_rng_next(&seed);
    for (int k = 0; k < 3; k++) {
        uint32_t pw = k ? cw : w, ph = k ? ch : h;
        for (uint32_t yy = 0; yy < ph; yy++)
            for (uint32_t x = 0; x < pw; x++) {
                uint32_t r = (uint32_t)(tu_rng_next(&seed) % 57);
                double s = sin(x * 0.7 + yy * 0.3 + k);
                p.mem[at[k] + yy * st[k] + x] = (uint8_t)(k ? 100 + r : 60 + r + (uint32_t)(36 + 36 * s));
            }
    }
    p.v = (stk__ycc_view){{p.mem + at[0], gray ? NULL : p.mem + at[1], gray ? NULL : p.mem + at[2]},
                          {st[0], st[1], st[2]},
                          w,
                          h,
                          sx,
                          sy};
    return p;
}

/* The planes' tight copies (w x h, cw x ch) for the reference. */
static uint8_t *tight(const planes *p, int k)
{
    uint32_t pw = k ? (p->v.w + p->v.sub_x - 1) / p->v.sub_x : p->v.w;
    uint32_t ph = k ? (p->v.h + p->v.sub_y - 1) / p->v.sub_y : p->v.h;
    uint8_t *t = tu_xmalloc((size_t)pw * ph);
    for (uint32_t y = 0; y < ph; y++) memcpy(t + (size_t)y * pw, p->v.data[k] + y * p->v.stride[k], pw);
    return t;
}

static void check_ycc(stk__resizer *r, uint32_t w, uint32_t h, unsigned sx, unsigned sy, int gray,
                      uint32_t dw, uint32_t dh)
{
    planes p = make_planes(w, h, sx, sy, gray, w * 7919u + h * 31u + dw + sx * 3 + sy);
    uint8_t *y = tight(&p, 0), *cb = gray ? NULL : tight(&p, 1), *cr = gray ? NULL : tight(&p, 2);
    double *rgb = ref_planes_rgb(y, cb, cr, w, h, sx, sy);
    double *ref = tu_ref_resize_d(rgb, w, h, dw, dh);
    stk__rect all = {0, 0, dw, dh};
    uint8_t *simd = tu_xmalloc((size_t)dw * dh * 3), *scalar = tu_xmalloc((size_t)dw * dh * 3);
    char what[96];
    snprintf(what, sizeof what, "planes %ux%u sub %ux%u%s -> %ux%u", w, h, sx, sy, gray ? " gray" : "", dw,
             dh);
    ck_assert_int_eq(stk__resizer_test_simd(r, 0), 0);
    ck_assert_int_eq(stk__resize_ycc(r, &p.v, dw, dh, &all, scalar, (size_t)dw * 3), 0);
    /* every vector level the CPU has (AVX2, AVX-512BW) against the scalar kernels */
    for (int level = 1; level <= 2 && stk__resizer_test_simd(r, level) == level; level++) {
        ck_assert_int_eq(stk__resize_ycc(r, &p.v, dw, dh, &all, simd, (size_t)dw * 3), 0);
        ck_assert_msg(memcmp(simd, scalar, (size_t)dw * dh * 3) == 0, "%s: SIMD level %d and scalar differ",
                      what, level);
    }
    stk__resizer_force_scalar(r, 0);
    ck_assert_int_eq(stk__resize_ycc(r, &p.v, dw, dh, &all, simd, (size_t)dw * 3), 0);
    /* Every byte within one level of the exact result: the samples are
     * rounded once, at the end (weights are 14-bit, which moves a value by
     * far less than a level). */
    tu_compare_ref(simd, dw, dh, (size_t)dw * 3, ref, dw, 0, 0, 1, what);
    const stk__rect wins[] = {
        {dw / 3, dh / 4, dw - dw / 3, dh / 2 + 1}, {dw - 1, dh - 1, 1, 1}, {1, 0, dw - 1, dh}};
    for (size_t i = 0; i < sizeof wins / sizeof wins[0]; i++) {
        const stk__rect *wn = &wins[i];
        if (!wn->w || wn->x + wn->w > dw || wn->y + wn->h > dh) continue;
        uint8_t *part = tu_xmalloc((size_t)wn->w * wn->h * 3);
        ck_assert_int_eq(stk__resize_ycc(r, &p.v, dw, dh, wn, part, (size_t)wn->w * 3), 0);
        for (uint32_t yy = 0; yy < wn->h; yy++)
            ck_assert_msg(memcmp(part + (size_t)yy * wn->w * 3,
                                 simd + ((size_t)(wn->y + yy) * dw + wn->x) * 3, (size_t)wn->w * 3) == 0,
                          "%s: window %zu row %u differs from the full resize", what, i, yy);
        free(part);
    }
    free(scalar);
    free(simd);
    free(ref);
    free(rgb);
    free(y);
    free(cb);
    free(cr);
    free(p.mem);
}

START_TEST(ycc_resize_matches_reference)
{
    stk__resizer *r = stk__resizer_new();
    static const unsigned subs[][3] = {{1, 1, 0}, {2, 2, 0}, {2, 1, 0}, {1, 2, 0}, {1, 1, 1}};
    static const uint32_t sizes[][4] = {
        {97, 61, 40, 25},     {97, 61, 150, 90},    {97, 61, 97, 61},     {97, 61, 96, 60}, {96, 64, 48, 32},
        {61, 97, 31, 47},     {33, 21, 13, 7},      {200, 9, 70, 3},      {7, 1, 3, 4},     {1, 1, 5, 3},
        {640, 480, 256, 192}, {500, 375, 341, 256}, {375, 500, 256, 341}, {1200, 8, 64, 8}, {3, 2, 24, 16},
        {4, 40, 8, 80},       {2, 7, 9, 9},         {5, 5, 16, 16},
    };
    for (size_t s = 0; s < sizeof subs / sizeof subs[0]; s++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            check_ycc(r, sizes[i][0], sizes[i][1], subs[s][0], subs[s][1], (int)subs[s][2], sizes[i][2],
                      sizes[i][3]);
    stk__resizer_free(r);
}
END_TEST

/* The colour conversion at every vector level the CPU has (AVX2; AVX-512
 * VBMI, 32 pixels a turn) gives the scalar bytes, for every length (the
 * vector loops' tails), random samples over the whole range the resize
 * passes give (0 .. 255 << STK_IMG_PLANE_FRAC), and the extremes, where R, G or
 * B leave 0..255 and must clamp. */
START_TEST(ycc_row_levels_agree)
{
    enum { N = 200 };
    int16_t y[N], cb[N], cr[N];
    uint8_t want[3 * N], got[3 * N];
    uint64_t seed = 99;
    const int16_t top = 255 << STK_IMG_PLANE_FRAC;
    for (int i = 0; i < N; i++) {
        y[i] = (int16_t)(tu_rng_next(&seed) % (top + 1));
        cb[i] = (int16_t)(tu_rng_next(&seed) % (top + 1));
        cr[i] = (int16_t)(tu_rng_next(&seed) % (top + 1));
        if (i % 7 == 0) cb[i] = i % 2 ? top : 0, cr[i] = i % 3 ? 0 : top, y[i] = i % 5 ? top : 0;
    }
    stk__resizer *r = stk__resizer_new();
    const int levels = stk__resizer_test_simd(r, 2); /* the levels this CPU has */
    stk__resizer_free(r);
    for (int gray = 0; gray < 2; gray++)
        for (size_t n = 0; n <= N; n += n < 70 ? 1 : 13) {
            stk__ycc_row(0, y, gray ? NULL : cb, gray ? NULL : cr, want, n);
            for (int level = 1; level <= levels; level++) {
                memset(got, 0xEE, sizeof got);
                stk__ycc_row(level, y, gray ? NULL : cb, gray ? NULL : cr, got, n);
                ck_assert_msg(memcmp(got, want, 3 * n) == 0, "level %d, %zu pixels%s: differs from scalar",
                              level, n, gray ? " (gray)" : "");
                ck_assert_msg(n == N || got[3 * n] == 0xEE, "level %d wrote past %zu pixels", level, n);
            }
        }
}
END_TEST

/* The mirrored resize (and windows of it) against the plain one mirrored,
 * and with room after the last row (the SIMD kernel then reads past it)
 * against without: the same bytes, by SIMD and scalar kernels alike. */
static void check_mirror_room(stk__resizer *r, const stk__rgb_view *v, uint32_t dw, uint32_t dh,
                              const uint8_t *plain, const char *what)
{
    size_t row = (size_t)dw * 3, n = row * dh, src_bytes = (size_t)v->h * v->stride;
    uint8_t *want = tu_xmalloc(n), *got = tu_xmalloc(n), *copy = tu_xmalloc(src_bytes + 64);
    for (uint32_t y = 0; y < dh; y++)
        for (uint32_t x = 0; x < dw; x++)
            memcpy(want + y * row + 3 * x, plain + y * row + 3 * (dw - 1 - x), 3);
    memcpy(copy, v->data, src_bytes);
    memset(copy + src_bytes, 0xA5, 64); /* read, multiplied by zero */
    stk__rgb_view roomy = {copy, v->w, v->h, v->stride, 64};
    const stk__rect all = {0, 0, dw, dh}, part = {dw / 5, dh / 3, dw - dw / 5 - dw / 7, dh - dh / 3};
    for (int scalar = 0; scalar < 2; scalar++) {
        stk__resizer_force_scalar(r, scalar);
        for (int k = 0; k < 2; k++) {
            const stk__rgb_view *s = k ? &roomy : v;
            ck_assert_int_eq(stk__resize(r, s, dw, dh, &all, 1, got, row), 0);
            ck_assert_msg(memcmp(got, want, n) == 0,
                          "%s: mirrored (%s, room %zu) is not the plain resize mirrored", what,
                          scalar ? "scalar" : "SIMD", s->room);
            ck_assert_int_eq(stk__resize(r, s, dw, dh, &all, 0, got, row), 0);
            ck_assert_msg(memcmp(got, plain, n) == 0, "%s: room %zu changes the %s resize", what, s->room,
                          scalar ? "scalar" : "SIMD");
            if (part.w && part.h) {
                ck_assert_int_eq(stk__resize(r, s, dw, dh, &part, 1, got, (size_t)part.w * 3), 0);
                for (uint32_t y = 0; y < part.h; y++)
                    ck_assert_msg(memcmp(got + (size_t)y * part.w * 3, want + (part.y + y) * row + 3 * part.x,
                                         (size_t)part.w * 3) == 0,
                                  "%s: mirrored window row %u differs", what, y);
            }
        }
    }
    stk__resizer_force_scalar(r, 0);
    free(copy);
    free(got);
    free(want);
}

static void check_resize(stk__resizer *r, const tu_image *src, uint32_t dw, uint32_t dh)
{
    double *ref = tu_ref_resize(src->px, src->w, src->h, dw, dh);
    stk__rgb_view v = {src->px, src->w, src->h, (size_t)src->w * 3, 0};
    stk__rect all = {0, 0, dw, dh};
    uint8_t *simd = tu_xmalloc((size_t)dw * dh * 3), *scalar = tu_xmalloc((size_t)dw * dh * 3);
    stk__resizer_force_scalar(r, 0);
    ck_assert_int_eq(stk__resize(r, &v, dw, dh, &all, 0, simd, (size_t)dw * 3), 0);
    stk__resizer_force_scalar(r, 1);
    ck_assert_int_eq(stk__resize(r, &v, dw, dh, &all, 0, scalar, (size_t)dw * 3), 0);
    stk__resizer_force_scalar(r, 0);
    char what[64];
    snprintf(what, sizeof what, "%ux%u -> %ux%u", src->w, src->h, dw, dh);
    ck_assert_msg(memcmp(simd, scalar, (size_t)dw * dh * 3) == 0, "%s: SIMD and scalar differ", what);
    tu_compare_ref(simd, dw, dh, (size_t)dw * 3, ref, dw, 0, 0, 1, what);
    /* windows of it, as a crop asks for: the same bytes as the full result */
    const stk__rect wins[] = {{0, 0, 1, 1},
                              {dw / 3, dh / 4, dw - dw / 3, dh / 2 + 1},
                              {dw - 1, dh - 1, 1, 1},
                              {1, 0, dw - 1 > 0 ? dw - 1 : 1, dh}};
    for (size_t i = 0; i < sizeof wins / sizeof wins[0]; i++) {
        const stk__rect *wn = &wins[i];
        if (wn->x + wn->w > dw || wn->y + wn->h > dh) continue;
        uint8_t *part = tu_xmalloc((size_t)wn->w * wn->h * 3);
        ck_assert_int_eq(stk__resize(r, &v, dw, dh, wn, 0, part, (size_t)wn->w * 3), 0);
        for (uint32_t y = 0; y < wn->h; y++)
            ck_assert_msg(memcmp(part + (size_t)y * wn->w * 3, simd + ((size_t)(wn->y + y) * dw + wn->x) * 3,
                                 (size_t)wn->w * 3) == 0,
                          "%s: window %zu row %u differs from the full resize", what, i, y);
        free(part);
    }
    check_mirror_room(r, &v, dw, dh, simd, what);
    free(scalar);
    free(simd);
    free(ref);
}

START_TEST(resize_matches_reference)
{
    stk__resizer *r = stk__resizer_new();
    tu_image im = tu_synth(97, 61, TU_DETAIL, 12);
    static const uint32_t sizes[][2] = {
        {40, 25}, {31, 47}, {150, 90}, {60, 61}, {97, 30}, {13, 7},  {97, 61},
        {70, 44}, {96, 60}, {48, 30},  {33, 21}, {1, 1},   {200, 3}, {5, 122},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        check_resize(r, &im, sizes[i][0], sizes[i][1]);
    tu_image_free(&im);
    /* tiny and degenerate sources */
    tu_image one = tu_synth(1, 1, TU_DETAIL, 13), strip = tu_synth(7, 1, TU_DETAIL, 14);
    check_resize(r, &one, 5, 3);
    check_resize(r, &strip, 3, 4);
    tu_image_free(&one);
    tu_image_free(&strip);
    stk__resizer_free(r);
}
END_TEST

START_TEST(resize_wide_strips)
{
    /* long horizontal filters: 1200 -> 64 (about 38 taps, SIMD) and
     * 3000 -> 40 (about 150 taps, past the SIMD limit: scalar) */
    stk__resizer *r = stk__resizer_new();
    tu_image a = tu_synth(1200, 6, TU_DETAIL, 15), b = tu_synth(3000, 5, TU_DETAIL, 16),
             c = tu_synth(6, 900, TU_DETAIL, 17);
    check_resize(r, &a, 64, 6);
    check_resize(r, &a, 64, 3);
    check_resize(r, &b, 40, 5);
    check_resize(r, &c, 6, 20);
    tu_image_free(&a);
    tu_image_free(&b);
    tu_image_free(&c);
    stk__resizer_free(r);
}
END_TEST

/* Window `win` of v resized to dw x dh (ycc: of the planes yv) by a used
 * resizer equals a fresh resizer's result. */
static void expect_as_fresh(stk__resizer *used, const stk__rgb_view *v, const stk__ycc_view *yv, uint64_t dw,
                            uint64_t dh, const stk__rect *win, int round)
{
    size_t n = (size_t)win->w * win->h * 3, stride = (size_t)win->w * 3;
    uint8_t *a = tu_xmalloc(n), *b = tu_xmalloc(n);
    stk__resizer *fresh = stk__resizer_new();
    ck_assert_ptr_nonnull(fresh);
    ck_assert_int_eq(yv ? stk__resize_ycc(used, yv, dw, dh, win, a, stride)
                        : stk__resize(used, v, dw, dh, win, 0, a, stride),
                     0);
    ck_assert_int_eq(yv ? stk__resize_ycc(fresh, yv, dw, dh, win, b, stride)
                        : stk__resize(fresh, v, dw, dh, win, 0, b, stride),
                     0);
    ck_assert_msg(memcmp(a, b, n) == 0,
                  "%s %llux%llu window %llu+%u, %llu+%u differs with a used resizer (round %d)",
                  yv ? "planes" : "rgb", (unsigned long long)dw, (unsigned long long)dh,
                  (unsigned long long)win->x, win->w, (unsigned long long)win->y, win->h, round);
    stk__resizer_free(fresh);
    free(a);
    free(b);
}

START_TEST(resize_cache_reuse)
{
    /* one resizer across changing sizes gives what a fresh one gives */
    stk__resizer *shared = stk__resizer_new();
    tu_image im = tu_synth(90, 70, TU_DETAIL, 18);
    stk__rgb_view v = {im.px, 90, 70, 270, 0};
    static const uint32_t sizes[][2] = {{40, 30}, {41, 30}, {40, 31}, {64, 64}, {40, 30}, {12, 50}, {41, 30}};
    for (int round = 0; round < 3; round++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            stk__rect all = {0, 0, sizes[i][0], sizes[i][1]};
            expect_as_fresh(shared, &v, NULL, sizes[i][0], sizes[i][1], &all, round);
        }
    tu_image_free(&im);
    stk__resizer_free(shared);
}
END_TEST

START_TEST(resize_cache_evicts)
{
    /* More keys than the cache holds (1,024 tables per axis in 128 sets of
     * 8), among them keys that differ only in the window's offset or only
     * in its width, in turn; the second round comes back to keys evicted
     * meanwhile. RGB and planes. Then all over again with every key in one
     * set, where keys that differ in one field meet: a lookup that ignored
     * the window's offset or width, the output size, the source size of a
     * chroma axis or its kind of upsampling would hand back the wrong table
     * (checked by breaking each comparison in turn). (`in` never differs
     * alone, and a table of the wrong SIMD layout only runs the scalar
     * kernel on the same weights.) */
    tu_image im = tu_synth(90, 70, TU_DETAIL, 19);
    stk__rgb_view v = {im.px, 90, 70, 270, 0};
    planes p = make_planes(90, 70, 2, 2, 0, 77);
    /* chroma 3 wide from 5 and from 6 (keys that differ in `full` alone);
     * chroma 2 wide, which libjpeg repeats instead of interpolating, and 45
     * wide over the same 35 rows (keys that differ in `kind` alone) */
    planes q[4] = {make_planes(5, 70, 2, 2, 0, 78), make_planes(6, 70, 2, 2, 0, 79),
                   make_planes(3, 70, 2, 2, 0, 80), p};
    stk__resizer *shared = NULL;
    for (int round = 0; round < 4; round++) {
        if (round % 2 == 0) {
            stk__resizer_free(shared);
            shared = stk__resizer_new();
            if (round) stk__resizer_test_one_set(shared);
        }
        for (uint32_t dw = 1; dw <= 1300; dw += round % 2 ? 97 : 1) {
            stk__rect all = {0, 0, dw, 3};
            expect_as_fresh(shared, &v, NULL, dw, 3, &all, round);
        }
        for (uint32_t w = 1; w <= 40; w++) { /* keys that differ in the output size alone, in turn */
            stk__rect win = {0, 0, w, 3};
            expect_as_fresh(shared, &v, NULL, w, 3, &win, round);
            expect_as_fresh(shared, &v, NULL, 600, 9, &win, round);
            expect_as_fresh(shared, NULL, &p.v, w + 1, 3, &win, round);
            expect_as_fresh(shared, NULL, &p.v, 600, 9, &win, round);
        }
        for (unsigned i = 0; i < 12; i++) { /* upscaled, mid-axis: the tables differ in most outputs */
            stk__rect win = {297, 0, 4, 3};
            expect_as_fresh(shared, NULL, &q[i % 4].v, 600, 200, &win, round);
        }
        for (uint32_t k = 0; k < 600; k += round % 2 ? 37 : 1) {
            /* inside 600 x 9: offsets (x, y) with the same width in turn, then
             * widths with the same offset */
            stk__rect win = k < 300 ? (stk__rect){k % 3 * 100, k % 3, 1 + k / 3 * 2, 2}
                                    : (stk__rect){(k - 300) / 2, 5, 1 + (k % 2), 2};
            expect_as_fresh(shared, &v, NULL, 600, 9, &win, round);
            expect_as_fresh(shared, NULL, &p.v, 600, 9, &win, round);
        }
    }
    stk__resizer_free(shared);
    for (int i = 0; i < 3; i++) free(q[i].mem);
    free(p.mem);
    tu_image_free(&im);
}
END_TEST

START_TEST(resize_cache_budget)
{
    /* RGB tables of large downscales are big (their SIMD layout holds 4
     * taps per chunk and output): 300 of them would hold about 45 MiB. The
     * cache keeps under its budget (48 MiB, then at most a resize's 4 more
     * tables) and the results stay those of a fresh resizer. */
    const uint32_t w = 4000, h = 4;
    tu_image im = tu_synth(w, h, TU_DETAIL, 23);
    stk__resizer *r = stk__resizer_new();
    size_t most = 0;
    for (uint32_t k = 0; k < 700; k++) {
        stk__rgb_view v = {im.px, w - k, h, (size_t)w * 3, 0};
        stk__rect all = {0, 0, 256, 2};
        uint8_t out[256 * 2 * 3];
        ck_assert_int_eq(stk__resize(r, &v, 256, 2, &all, 0, out, sizeof out / 2), 0);
        size_t held = stk__resizer_held(r);
        most = held > most ? held : most;
        ck_assert_msg(held <= ((size_t)48 << 20) + 4 * ((size_t)1 << 20), "tables hold %zu bytes", held);
        if (k % 100 == 99) expect_as_fresh(r, &v, NULL, 256, 2, &all, (int)k);
    }
    ck_assert_msg(most > ((size_t)40 << 20), "the cache never came near its budget (%zu bytes)", most);
    stk__resizer_free(r);
    tu_image_free(&im);
}
END_TEST

START_TEST(ycc_scalar_groups_in_simd)
{
    /* Plane groups whose taps reach past their 16-byte loads run the scalar
     * kernel between SIMD ones; real tables have them only at extreme
     * scales, so the test seam makes every k-th group such a group (the
     * first, odd and even ones, neighbours of pairs). check_ycc: bytes equal
     * the all-scalar run's (and the reference, windows included). */
    static const uint32_t sizes[][4] = {
        {97, 61, 40, 25}, {500, 375, 341, 256}, {375, 500, 256, 341}, {61, 97, 150, 90}};
    for (unsigned every = 1; every <= 3; every++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            for (unsigned sub = 1; sub <= 2; sub++) {
                stk__resizer *bad = stk__resizer_new();
                stk__resizer_test_bad_groups(bad, every);
                check_ycc(bad, sizes[i][0], sizes[i][1], sub, sub, 0, sizes[i][2], sizes[i][3]);
                stk__resizer_free(bad);
            }
}
END_TEST

TU_MAIN("image_resize", {.name = "resize",
                         .timeout = 120,
                         .tests = {ycc_resize_matches_reference, ycc_row_levels_agree,
                                   resize_matches_reference, resize_wide_strips, resize_cache_reuse,
                                   resize_cache_evicts, resize_cache_budget, ycc_scalar_groups_in_simd}})
