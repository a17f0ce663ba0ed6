/* tests/image/test_geometry.c - torchvision's geometry (image/geometry.c):
 * Resize + CenterCrop layouts, the ImageNet evaluation crop and
 * RandomResizedCrop's box, against numbers worked by hand and against
 * torchvision's Python arithmetic written out again here. The box's
 * distribution against torchvision is tests/reader/test_crop.c's job; here
 * it is the arithmetic for given random numbers. */
#include "image.h"
#include "image_ref.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

START_TEST(layout_numbers)
{
    static const struct {
        uint32_t w, h, size;
        stk__img_mode mode;
        stk__img_layout want;
    } cases[] = {
        /* torchvision: 500x375 -> 341x256, crop left round(42.5) = 42 (half to even) */
        {500, 375, 256, STK_IMG_SHORTER, {341, 256, 42, 0, 256, 256, 0, 0}},
        {375, 500, 256, STK_IMG_SHORTER, {256, 341, 0, 42, 256, 256, 0, 0}},
        {500, 333, 256, STK_IMG_SHORTER, {384, 256, 64, 0, 256, 256, 0, 0}},
        {303, 256, 256, STK_IMG_SHORTER, {303, 256, 24, 0, 256, 256, 0, 0}}, /* round(23.5) = 24 */
        {301, 256, 256, STK_IMG_SHORTER, {301, 256, 22, 0, 256, 256, 0, 0}}, /* round(22.5) = 22 */
        {300, 300, 256, STK_IMG_SHORTER, {256, 256, 0, 0, 256, 256, 0, 0}},
        {100, 50, 224, STK_IMG_SHORTER, {448, 224, 112, 0, 224, 224, 0, 0}}, /* upscaling */
        {1, 10000, 256, STK_IMG_SHORTER, {256, 2560000, 0, 1279872, 256, 256, 0, 0}},
        {500, 375, 256, STK_IMG_STRETCH, {256, 256, 0, 0, 256, 256, 0, 0}},
        {500, 375, 256, STK_IMG_FIT, {256, 192, 0, 0, 256, 192, 0, 32}},
        {300, 200, 64, STK_IMG_FIT, {64, 43, 0, 0, 64, 43, 0, 10}}, /* 42.67 rounds to 43 */
        {200, 301, 64, STK_IMG_FIT, {43, 64, 0, 0, 43, 64, 10, 0}},
        {10000, 1, 64, STK_IMG_FIT, {64, 1, 0, 0, 64, 1, 0, 31}}, /* never 0 rows */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        stk__img_layout l;
        stk__img_layout_compute(cases[i].mode, cases[i].size, 0, cases[i].size, cases[i].w, cases[i].h, &l);
        const stk__img_layout *e = &cases[i].want;
        ck_assert_msg(l.resized_w == e->resized_w && l.resized_h == e->resized_h && l.crop_x == e->crop_x &&
                          l.crop_y == e->crop_y && l.w == e->w && l.h == e->h && l.pad_x == e->pad_x &&
                          l.pad_y == e->pad_y,
                      "case %zu (%ux%u size %u mode %d): got %llux%llu crop %llu,%llu %ux%u pad %u,%u", i,
                      cases[i].w, cases[i].h, cases[i].size, (int)cases[i].mode,
                      (unsigned long long)l.resized_w, (unsigned long long)l.resized_h,
                      (unsigned long long)l.crop_x, (unsigned long long)l.crop_y, l.w, l.h, l.pad_x, l.pad_y);
        if (cases[i].mode == STK_IMG_SHORTER) { /* and the independent torchvision reading */
            uint32_t rw, rh, left, top;
            tu_tv_geometry(cases[i].w, cases[i].h, cases[i].size, &rw, &rh, &left, &top);
            ck_assert_uint_eq(l.resized_w, rw);
            ck_assert_uint_eq(l.resized_h, rh);
            ck_assert_uint_eq(l.crop_x, left);
            ck_assert_uint_eq(l.crop_y, top);
        }
    }
}
END_TEST

/* shorter mode against torchvision's reading over many shapes */
START_TEST(layout_shorter_sweep)
{
    for (uint32_t w = 1; w < 700; w += 13)
        for (uint32_t h = 1; h < 700; h += 17)
            for (uint32_t n = 1; n < 300; n += 37) {
                stk__img_layout l;
                uint32_t rw, rh, left, top;
                stk__img_layout_compute(STK_IMG_SHORTER, n, 0, n, w, h, &l);
                tu_tv_geometry(w, h, n, &rw, &rh, &left, &top);
                ck_assert_msg(l.resized_w == rw && l.resized_h == rh && l.crop_x == left && l.crop_y == top,
                              "%ux%u to %u", w, h, n);
            }
}
END_TEST

/* --resize keep: torchvision Resize(min_side, max_size=max_side) and FFCV's
 * max_resolution, worked by hand. */
START_TEST(layout_keep_numbers)
{
    static const struct {
        uint32_t w, h, min_side, max_side, out_w, out_h;
    } cases[] = {
        {500, 375, 0, 256, 256, 192},    /* max only: 375 * 256 / 500 = 192 */
        {375, 500, 0, 256, 192, 256},    /* portrait */
        {100, 80, 0, 256, 100, 80},      /* small: never enlarged */
        {500, 333, 0, 256, 256, 170},    /* 170.5 floors */
        {500, 375, 256, 1024, 341, 256}, /* int(256 * 500 / 375) = 341 */
        {500, 375, 256, 300, 300, 225},  /* 341 > 300: int(300 * 256 / 341) = 225 */
        {100, 80, 160, 640, 200, 160},   /* min_side enlarges, as Resize(160) does */
        {10000, 1, 0, 64, 64, 1},        /* never 0 rows */
        {256, 256, 0, 256, 256, 256},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        stk__img_layout l;
        stk__img_layout_compute(STK_IMG_KEEP, cases[i].max_side, cases[i].min_side, cases[i].max_side,
                                cases[i].w, cases[i].h, &l);
        ck_assert_msg(l.w == cases[i].out_w && l.h == cases[i].out_h && l.resized_w == l.w &&
                          l.resized_h == l.h && !l.crop_x && !l.crop_y && !l.pad_x && !l.pad_y,
                      "case %zu: %ux%u (min %u max %u) -> %ux%u, want %ux%u", i, cases[i].w, cases[i].h,
                      cases[i].min_side, cases[i].max_side, l.w, l.h, cases[i].out_w, cases[i].out_h);
    }
}
END_TEST

/* Resize(round(S / 0.875)) + CenterCrop: 224 -> 256 on the shorter side. */
START_TEST(eval_layout_numbers)
{
    static const struct {
        uint32_t out_w, out_h, w, h;
        uint64_t rw, rh, x, y;
    } cases[] = {
        {224, 224, 500, 375, 341, 256, 58, 16}, /* int(256 * 500 / 375) = 341; round(58.5) = 58 */
        {224, 224, 375, 500, 256, 341, 16, 58}, {224, 224, 256, 256, 256, 256, 16, 16},
        {20, 20, 30, 17, 40, 23, 10, 2},  /* round(22.857) = 23; int(23 * 30 / 17) = 40; round(1.5) = 2 */
        {10, 10, 8, 8, 11, 11, 0, 0},     /* round(11.43) = 11; round(0.5) = 0 (half to even) */
        {100, 10, 50, 50, 100, 11, 0, 0}, /* elongated: 11 wide would be a window outside, so 100 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        stk__img_layout l;
        stk__img_eval_layout(cases[i].out_w, cases[i].out_h, cases[i].w, cases[i].h, &l);
        ck_assert_msg(l.resized_w == cases[i].rw && l.resized_h == cases[i].rh && l.crop_x == cases[i].x &&
                          l.crop_y == cases[i].y && l.w == cases[i].out_w && l.h == cases[i].out_h,
                      "case %zu: %llux%llu at %llu,%llu", i, (unsigned long long)l.resized_w,
                      (unsigned long long)l.resized_h, (unsigned long long)l.crop_x,
                      (unsigned long long)l.crop_y);
    }
}
END_TEST

/* A scripted generator: the 64-bit words given, then zeros; counts draws. */
typedef struct {
    const uint64_t *v;
    size_t n, at;
} script;

static uint64_t script_next(void *state)
{
    script *s = state;
    uint64_t r = s->at < s->n ? s->v[s->at] : 0;
    s->at++;
    return r;
}

/* The word whose top 53 bits give u in [0, 1). */
static uint64_t word_of(double u) { return (uint64_t)(u * 9007199254740992.0) << 11; }

START_TEST(rrc_box_first_try)
{
    /* area 100x80 = 8000; scale u = 0.5 of [0.08, 1] -> 0.54 -> 4320;
     * aspect u = 0.5 of [log 3/4, log 4/3] -> 1 -> w = h = round(65.73) = 66;
     * then y0 = 1000 % (80 - 66 + 1) = 10, x0 = 1001 % (100 - 66 + 1) = 21 */
    const uint64_t v[] = {word_of(0.5), word_of(0.5), 1000, 1001};
    script s = {v, 4, 0};
    const stk__img_rng r = {script_next, &s};
    stk__img_box b;
    stk__img_rrc_box(80, 100, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, &r, &b);
    ck_assert_int_eq(b.w, 66);
    ck_assert_int_eq(b.h, 66);
    ck_assert_int_eq(b.y0, 10);
    ck_assert_int_eq(b.x0, 21);
    ck_assert_uint_eq(s.at, 4); /* two uniforms, then the offsets: y first */
}
END_TEST

START_TEST(rrc_box_fallback)
{
    /* every try asks for the whole area at aspect 4/3 or more: too wide for
     * a 10x100 (W x H) image; the fallback clamps the ratio to 3/4 and
     * centres: h = round(10 / 0.75) = 13, y0 = (100 - 13) / 2 = 43 */
    uint64_t v[20];
    for (int k = 0; k < 20; k++) v[k] = ~0ull;
    script s = {v, 20, 0};
    const stk__img_rng r = {script_next, &s};
    stk__img_box b;
    stk__img_rrc_box(100, 10, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, &r, &b);
    ck_assert_uint_eq(s.at, 20); /* ten tries of two draws */
    ck_assert_int_eq(b.w, 10);
    ck_assert_int_eq(b.h, 13);
    ck_assert_int_eq(b.x0, 0);
    ck_assert_int_eq(b.y0, 43);
    /* a wide image clamps the other way: w = round(10 * 4/3) = 13 */
    s.at = 0;
    stk__img_rrc_box(10, 100, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, &r, &b);
    ck_assert_int_eq(b.w, 13);
    ck_assert_int_eq(b.h, 10);
    ck_assert_int_eq(b.x0, 43);
}
END_TEST

static uint64_t splitmix(void *state)
{
    uint64_t z = (*(uint64_t *)state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

START_TEST(rrc_box_inside)
{
    uint64_t st = 3;
    const stk__img_rng r = {splitmix, &st};
    for (uint32_t H = 1; H < 300; H += 23)
        for (uint32_t W = 1; W < 300; W += 29)
            for (int k = 0; k < 20; k++) {
                stk__img_box b;
                stk__img_rrc_box(H, W, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, &r, &b);
                ck_assert_msg(b.w >= 1 && b.h >= 1 && b.x0 >= 0 && b.y0 >= 0 && b.x0 + b.w <= (int32_t)W &&
                                  b.y0 + b.h <= (int32_t)H,
                              "%ux%u: box %d,%d %dx%d", W, H, b.x0, b.y0, b.w, b.h);
            }
    ck_assert(stk__img_uniform(&r, 2.0, 3.0) >= 2.0);
}
END_TEST

TU_MAIN("image_geometry",
        {.name = "geometry",
         .tests = {layout_numbers, layout_shorter_sweep, layout_keep_numbers, eval_layout_numbers,
                   rrc_box_first_try, rrc_box_fallback, rrc_box_inside}})
