/* tests/reader/test_crop.c - RandomResizedCrop's boxes against torchvision's
 * algorithm.
 *
 * The reference below is RandomResizedCrop.get_params of torchvision 0.14,
 * transcribed, with its own random numbers (splitmix64; torch draws from
 * its generator): ten attempts of a scale drawn uniformly and a log-uniform
 * aspect ratio, w = round(sqrt(area * ratio)), h = round(sqrt(area /
 * ratio)) with Python's round (half to even), a uniform position, then the
 * centre-crop fallback clamped to the ratio range. stoker's boxes
 * (stk__xform_box) and the reference's are drawn 100,000 times each for
 * square, landscape, portrait, extreme and tiny images, and their
 * distributions compared with the two-sample Kolmogorov-Smirnov statistic:
 * scale (box area / image area), log aspect ratio, and the position of the
 * box inside its free range. The bound, 1.95 x sqrt(2 / n) (p = 0.001), is
 * what two samples of one distribution stay under; a different algorithm
 * (ratio not log-uniform, area drawn on the side, w and h swapped, no
 * fallback) moves them by far more. The seeds are fixed, so the test is
 * deterministic. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

enum { N = 100000 };

static uint64_t sm_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double sm_uniform(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * (double)(sm_next(s) >> 11) / 9007199254740992.0;
}

/* Python's round(): half to even. */
static int32_t py_round(double v)
{
    double f = floor(v), d = v - f;
    if (d > 0.5 || (d == 0.5 && fmod(f, 2.0) != 0)) f += 1;
    return (int32_t)f;
}

/* torchvision.transforms.RandomResizedCrop.get_params */
static void ref_box(uint64_t *s, int32_t H, int32_t W, double smin, double smax, double rmin, double rmax,
                    stk__crop_box *b)
{
    double area = (double)H * W, l0 = log(rmin), l1 = log(rmax);
    for (int k = 0; k < 10; k++) {
        double target = area * sm_uniform(s, smin, smax), ratio = exp(sm_uniform(s, l0, l1));
        int32_t w = py_round(sqrt(target * ratio)), h = py_round(sqrt(target / ratio));
        if (0 < w && w <= W && 0 < h && h <= H) {
            b->y0 = (int32_t)(sm_next(s) % (uint64_t)(H - h + 1));
            b->x0 = (int32_t)(sm_next(s) % (uint64_t)(W - w + 1));
            b->h = h, b->w = w;
            return;
        }
    }
    double in_ratio = (double)W / H;
    int32_t w = W, h = H;
    if (in_ratio < rmin) h = py_round(w / rmin);
    else if (in_ratio > rmax) w = py_round(h * rmax);
    b->y0 = (H - h) / 2, b->x0 = (W - w) / 2, b->h = h, b->w = w;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Two-sample KS statistic of a[0..n) and b[0..n) (both sorted here). */
static double ks(double *a, double *b, size_t n)
{
    qsort(a, n, sizeof *a, cmp_double);
    qsort(b, n, sizeof *b, cmp_double);
    size_t i = 0, j = 0;
    double d = 0;
    while (i < n && j < n) {
        double v = a[i] < b[j] ? a[i] : b[j];
        while (i < n && a[i] <= v) i++;
        while (j < n && b[j] <= v) j++;
        double g = fabs((double)i / n - (double)j / n);
        if (g > d) d = g;
    }
    return d;
}

typedef struct {
    double *scale, *logr, *pos;
} sample;

static void record(sample *s, size_t i, const stk__crop_box *b, int32_t H, int32_t W)
{
    ck_assert_msg(b->w > 0 && b->h > 0 && b->x0 >= 0 && b->y0 >= 0 && b->x0 + b->w <= W && b->y0 + b->h <= H,
                  "box %dx%d at (%d, %d) outside %dx%d", b->w, b->h, b->x0, b->y0, W, H);
    s->scale[i] = (double)b->w * b->h / ((double)W * H);
    s->logr[i] = log((double)b->w / b->h);
    /* where the box sits in its free range, in [0, 1] (0.5 when it has none) */
    int32_t fx = W - b->w, fy = H - b->h;
    s->pos[i] = (fx ? (double)b->x0 / fx : 0.5) + (fy ? (double)b->y0 / fy : 0.5);
}

static void compare(int32_t H, int32_t W, float smin, float smax, float rmin, float rmax)
{
    stk_transform t;
    stk_transform_imagenet(&t, 1, 224);
    t.scale_min = smin, t.scale_max = smax, t.ratio_min = rmin, t.ratio_max = rmax;
    sample a = {calloc(N, 8), calloc(N, 8), calloc(N, 8)}, r = {calloc(N, 8), calloc(N, 8), calloc(N, 8)};
    ck_assert(a.scale && a.logr && a.pos && r.scale && r.logr && r.pos);
    uint64_t s = 0x5eed20 ^ (uint64_t)H << 20 ^ (uint64_t)W;
    for (size_t i = 0; i < N; i++) {
        stk__crop_box b, c;
        stk__xform_box(&t, (uint32_t)H, (uint32_t)W, 20, i / 1000, i, &b);
        record(&a, i, &b, H, W);
        ref_box(&s, H, W, smin, smax, rmin, rmax, &c);
        record(&r, i, &c, H, W);
    }
    double bound = 1.95 * sqrt(2.0 / N), d1 = ks(a.scale, r.scale, N), d2 = ks(a.logr, r.logr, N),
           d3 = ks(a.pos, r.pos, N);
    printf("test_crop: %dx%d scale [%g, %g] ratio [%g, %g]: KS scale %.4f, log-ratio %.4f, position %.4f "
           "(bound %.4f)\n",
           W, H, smin, smax, rmin, rmax, d1, d2, d3, bound);
    ck_assert_msg(d1 < bound && d2 < bound && d3 < bound,
                  "%dx%d: KS scale %.4f, log-ratio %.4f, position %.4f over %.4f", W, H, d1, d2, d3, bound);
    free(a.scale), free(a.logr), free(a.pos), free(r.scale), free(r.logr), free(r.pos);
}

START_TEST(boxes_match_torchvision)
{
    compare(256, 256, 0.08f, 1.0f, 3.0f / 4, 4.0f / 3); /* the square pack stores today */
    compare(375, 500, 0.08f, 1.0f, 3.0f / 4, 4.0f / 3); /* landscape at its own aspect */
    compare(500, 333, 0.08f, 1.0f, 3.0f / 4, 4.0f / 3); /* portrait */
    compare(64, 640, 0.08f, 1.0f, 3.0f / 4, 4.0f / 3);  /* a strip: mostly the fallback */
    compare(7, 9, 0.08f, 1.0f, 3.0f / 4, 4.0f / 3);     /* tiny: rounding dominates */
    compare(300, 200, 0.35f, 1.0f, 0.5f, 2.0f);         /* other ranges */
}
END_TEST

/* The fallback rounds as Python does, half to even: with the ratio at most
 * 1.5, a 9 x 3 image keeps h = 3 and w = round(4.5) = 4 (not 5), a 21 x 7
 * one w = round(10.5) = 10. A scale over 1 fails every attempt. */
START_TEST(fallback_rounding)
{
    stk_transform t;
    stk_transform_imagenet(&t, 1, 224);
    t.scale_min = 2.0f, t.scale_max = 3.0f; /* every attempt is larger than the image: the fallback */
    t.ratio_min = 0.5f, t.ratio_max = 1.5f;
    static const struct {
        int32_t H, W, h, w;
    } c[] = {{1, 3, 1, 2}, {3, 9, 3, 4}, {5, 15, 5, 8}, {7, 21, 7, 10}, {9, 1, 2, 1}, {5, 1, 2, 1}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        stk__crop_box b;
        stk__xform_box(&t, (uint32_t)c[i].H, (uint32_t)c[i].W, 1, 0, 0, &b);
        ck_assert_msg(b.h == c[i].h && b.w == c[i].w, "%dx%d: box %dx%d, torchvision %dx%d", c[i].W, c[i].H,
                      b.w, b.h, c[i].w, c[i].h);
        ck_assert_int_eq(b.y0, (c[i].H - c[i].h) / 2);
        ck_assert_int_eq(b.x0, (c[i].W - c[i].w) / 2);
    }
}
END_TEST

TU_MAIN("crop", {.name = "boxes", .timeout = 120, .tests = {boxes_match_torchvision, fallback_rounding}})
