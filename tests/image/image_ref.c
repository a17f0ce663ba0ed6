/* tests/image/image_ref.c - image_ref.h: the image tests' shared references. */
#include "image_ref.h"

#include "jpeg_dims.h" /* format/: the marker walk */

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t tu_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
void *tu_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}
tu_image tu_synth(uint32_t w, uint32_t h, int kind, uint64_t seed)
{
    tu_image im = {tu_xmalloc((size_t)w * h * 3), w, h};
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            uint8_t *p = im.px + ((size_t)y * w + x) * 3;
            double u = (x + 0.5) / w, v = (y + 0.5) / h;
            if (kind == TU_FLAT) {
                p[0] = 200, p[1] = 40, p[2] = 90;
            } else if (kind == TU_GRADIENT) {
                p[0] = (uint8_t)(255 * u), p[1] = (uint8_t)(255 * v), p[2] = (uint8_t)(127 * (u + v));
            } else {
                double s = 127.5 + 127.5 * sin(x * 0.9 + y * 0.35);
                int edge = ((x / 7) + (y / 5)) % 2 ? 255 : 0;
                p[0] = (uint8_t)s;
                p[1] = (uint8_t)(x % 13 < 6 ? edge : 255 * u);
                p[2] = (uint8_t)(tu_rng_next(&seed) & 0xff);
            }
        }
    return im;
}
void tu_image_free(tu_image *im)
{
    free(im->px);
    im->px = NULL;
}
uint32_t tu_ref_weights(uint32_t in, uint32_t out, uint32_t i, uint32_t *lo, double *w)
{
    double scale = (double)in / out, fs = scale > 1 ? scale : 1, centre = (i + 0.5) * scale;
    long a = (long)floor(centre - fs - 1), b = (long)ceil(centre + fs + 1);
    a = a < 0 ? 0 : a;
    b = b > (long)in ? (long)in : b;
    double sum = 0;
    for (long x = a; x < b; x++) {
        double t = fabs((x + 0.5 - centre) / fs);
        w[x - a] = t < 1 ? 1 - t : 0;
        sum += w[x - a];
    }
    for (long x = a; x < b; x++) w[x - a] /= sum;
    *lo = (uint32_t)a;
    return (uint32_t)(b - a);
}
double *tu_ref_resize_d(const double *src, uint32_t sw, uint32_t sh, uint32_t dw, uint32_t dh)
{
    double *mid = tu_xmalloc(sizeof(double) * sh * dw * 3), *out = tu_xmalloc(sizeof(double) * dh * dw * 3);
    double *w = tu_xmalloc(sizeof(double) * (2 * (sw > sh ? sw : sh) + 8));
    for (uint32_t x = 0; x < dw; x++) {
        uint32_t lo, n = tu_ref_weights(sw, dw, x, &lo, w);
        for (uint32_t y = 0; y < sh; y++)
            for (int c = 0; c < 3; c++) {
                double s = 0;
                for (uint32_t t = 0; t < n; t++) s += w[t] * src[((size_t)y * sw + lo + t) * 3 + c];
                mid[((size_t)y * dw + x) * 3 + c] = s;
            }
    }
    for (uint32_t y = 0; y < dh; y++) {
        uint32_t lo, n = tu_ref_weights(sh, dh, y, &lo, w);
        for (uint32_t x = 0; x < dw; x++)
            for (int c = 0; c < 3; c++) {
                double s = 0;
                for (uint32_t t = 0; t < n; t++) s += w[t] * mid[((size_t)(lo + t) * dw + x) * 3 + c];
                out[((size_t)y * dw + x) * 3 + c] = s;
            }
    }
    free(w);
    free(mid);
    return out;
}
/* tu_ref_resize_d of an 8-bit source (widened exactly, so the same arithmetic). */
double *tu_ref_resize(const uint8_t *src, uint32_t sw, uint32_t sh, uint32_t dw, uint32_t dh)
{
    size_t n = (size_t)sw * sh * 3;
    double *d = tu_xmalloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) d[i] = src[i];
    double *out = tu_ref_resize_d(d, sw, sh, dw, dh);
    free(d);
    return out;
}
int tu_ref_level(double v) { return v < 0 ? 0 : v > 255 ? 255 : (int)floor(v + 0.5); }
int tu_compare_ref(const uint8_t *got, uint32_t gw, uint32_t gh, size_t gs, const double *ref, uint32_t rw,
                   uint32_t x0, uint32_t y0, int tol, const char *what)
{
    int worst = 0;
    for (uint32_t y = 0; y < gh; y++)
        for (uint32_t x = 0; x < gw; x++)
            for (int c = 0; c < 3; c++) {
                int g = got[y * gs + x * 3 + c];
                int r = tu_ref_level(ref[((size_t)(y + y0) * rw + x + x0) * 3 + c]);
                int diff = abs(g - r);
                if (diff > worst) worst = diff;
                ck_assert_msg(diff <= tol, "%s: pixel (%u,%u) channel %d is %d, reference %d", what, x, y, c,
                              g, r);
            }
    return worst;
}

/* torchvision Resize(size) + CenterCrop(size) geometry, written the way
 * torchvision's Python reads: int(size * long / short), then
 * int(round((resized - size) / 2.0)) with round-half-to-even (rint). */
void tu_tv_geometry(uint32_t w, uint32_t h, uint32_t size, uint32_t *rw, uint32_t *rh, uint32_t *left,
                    uint32_t *top)
{
    if (w <= h) {
        *rw = size;
        *rh = (uint32_t)((double)size * h / w);
    } else {
        *rh = size;
        *rw = (uint32_t)((double)size * w / h);
    }
    *left = (uint32_t)rint((*rw - size) / 2.0);
    *top = (uint32_t)rint((*rh - size) / 2.0);
}

size_t tu_jpeg_marker(const uint8_t *j, size_t n, uint8_t m)
{
    uint64_t at;
    return stk__jpeg_marker(j, n, m, &at) ? (size_t)at : 0;
}
