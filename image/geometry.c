/* image/geometry.c - torchvision's geometry, once: Resize and CenterCrop
 * (pack's layouts), the ImageNet evaluation crop (the reader's centre crop)
 * and RandomResizedCrop's box (the reader's random crop, on the CPU and the
 * device). Pure arithmetic: the random numbers come from the caller.
 * Compiled with -ffp-contract=off: the box's floating-point steps must round
 * as Python's do, on every machine. */
#include "image.h"

#include <math.h>
#include <string.h>

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }
static uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }

/* torchvision CenterCrop: int(round(d / 2.0)), Python rounding half to even. */
static uint64_t centre_offset(uint64_t d)
{
    uint64_t k = d / 2;
    return (d % 2 && k % 2) ? k + 1 : k;
}

void stk__img_layout_compute(stk__img_mode mode, uint32_t size, uint32_t min_side, uint32_t max_side,
                             uint32_t src_w, uint32_t src_h, stk__img_layout *l)
{
    uint32_t n = size, lo = min_u32(src_w, src_h), hi = max_u32(src_w, src_h);
    memset(l, 0, sizeof *l);
    l->w = l->h = n;
    if (mode == STK_IMG_STRETCH) {
        l->resized_w = l->resized_h = n;
    } else if (mode == STK_IMG_KEEP) {
        uint64_t s = lo, g = hi; /* the shorter and longer output sides */
        if (min_side) {
            s = min_side;
            g = (uint64_t)((double)((uint64_t)min_side * hi) / (double)lo);
        }
        if (g > max_side) { /* torchvision: int(max_size * short / long); integers are exact here */
            s = s * max_side / g;
            g = max_side;
        }
        s = s ? s : 1;
        l->w = (uint32_t)(l->resized_w = src_w >= src_h ? g : s);
        l->h = (uint32_t)(l->resized_h = src_w >= src_h ? s : g);
    } else if (mode == STK_IMG_FIT) {
        /* floor(n * lo / hi + 1/2) in integers */
        uint32_t s = (uint32_t)((2 * (uint64_t)n * lo + hi) / (2 * (uint64_t)hi));
        s = s ? s : 1;
        l->w = (uint32_t)(l->resized_w = src_w >= src_h ? n : s);
        l->h = (uint32_t)(l->resized_h = src_w >= src_h ? s : n);
        l->pad_x = (n - l->w) / 2;
        l->pad_y = (n - l->h) / 2;
    } else {
        /* torchvision: int(size * long / short). n * hi is exact in a double,
         * and one IEEE division rounds as Python's true division does. */
        uint64_t len = (uint64_t)((double)((uint64_t)n * hi) / (double)lo);
        l->resized_w = src_w <= src_h ? n : len;
        l->resized_h = src_w <= src_h ? len : n;
        l->crop_x = centre_offset(l->resized_w - n);
        l->crop_y = centre_offset(l->resized_h - n);
    }
}

void stk__img_eval_layout(uint32_t out_w, uint32_t out_h, uint32_t W, uint32_t H, stk__img_layout *l)
{
    uint32_t s = min_u32(out_w, out_h), lo = min_u32(W, H), hi = max_u32(W, H);
    uint64_t r = (uint64_t)lround(s / 0.875), g = (uint64_t)((double)(r * hi) / (double)lo);
    memset(l, 0, sizeof *l);
    l->resized_w = W <= H ? r : g;
    l->resized_h = W <= H ? g : r;
    if (l->resized_w < out_w) l->resized_w = out_w; /* a very elongated output: never a window outside */
    if (l->resized_h < out_h) l->resized_h = out_h;
    l->crop_x = centre_offset(l->resized_w - out_w);
    l->crop_y = centre_offset(l->resized_h - out_h);
    l->w = out_w;
    l->h = out_h;
}

void stk__img_eval_box(uint32_t out_w, uint32_t out_h, uint32_t W, uint32_t H, double *bx, double *by,
                       double *bw, double *bh)
{
    stk__img_layout l;
    stk__img_eval_layout(out_w, out_h, W, H, &l);
    double sx = (double)W / (double)l.resized_w, sy = (double)H / (double)l.resized_h;
    *bx = (double)l.crop_x * sx;
    *by = (double)l.crop_y * sy;
    *bw = out_w * sx;
    *bh = out_h * sy;
}

double stk__img_uniform(const stk__img_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * (double)(r->next(r->state) >> 11) * (1.0 / 9007199254740992.0);
}

/* Inclusive [0, n]. */
static int32_t uniform_int(const stk__img_rng *r, int32_t n)
{
    return (int32_t)(r->next(r->state) % (uint64_t)(n + 1));
}

/* Python's round(), which torchvision's box arithmetic uses: half to even. */
static int32_t round_even(double v)
{
    double f = floor(v), d = v - f;
    if (d > 0.5 || (d == 0.5 && fmod(f, 2.0) != 0)) f += 1;
    return (int32_t)f;
}

void stk__img_rrc_box(uint32_t H_, uint32_t W_, double scale_min, double scale_max, double ratio_min,
                      double ratio_max, const stk__img_rng *r, stk__img_box *b)
{
    int32_t H = (int32_t)H_, W = (int32_t)W_;
    double area = (double)H * W, lr0 = log(ratio_min), lr1 = log(ratio_max);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * stk__img_uniform(r, scale_min, scale_max);
        double aspect = exp(stk__img_uniform(r, lr0, lr1));
        int32_t w = round_even(sqrt(target * aspect)), h = round_even(sqrt(target / aspect));
        if (w > 0 && w <= W && h > 0 && h <= H) {
            b->y0 = uniform_int(r, H - h);
            b->x0 = uniform_int(r, W - w);
            b->w = w;
            b->h = h;
            return;
        }
    }
    double in_ratio = (double)W / H;
    int32_t w = W, h = H;
    if (in_ratio < ratio_min) h = round_even(w / ratio_min);
    else if (in_ratio > ratio_max) w = round_even(h * ratio_max);
    b->y0 = (H - h) / 2;
    b->x0 = (W - w) / 2;
    b->w = w;
    b->h = h;
}
