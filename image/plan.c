/* image/plan.c - the decode planner: which DCT scale and which region of a
 * JPEG a crop needs (image.h's stk__jpeg_plan). Pure arithmetic; the box
 * rules themselves are geometry.c's. */
#include "image.h"

#include <math.h>

static uint32_t scaled(uint32_t n, unsigned num) { return (uint32_t)(((uint64_t)n * num + 7) / 8); }

/* One axis: the box [b, b + e) of a side of n pixels at num/8, as a region
 * [*r0, *r0 + *rn) of the scaled side and the box in it. */
static void axis(uint32_t n, unsigned num, double b, double e, uint32_t out, int spill, uint32_t *r0,
                 uint32_t *rn, double *rb, double *re)
{
    uint32_t sn = scaled(n, num);
    double f = num / 8.0, a = b * f, z = (b + e) * f;
    /* the resize's reach past the box: its triangle's radius, at least 1 */
    double reach = spill ? ceil(fmax((z - a) / out, 1.0)) + 1 : 0;
    double lo = floor(a - reach), hi = ceil(z + reach);
    uint32_t x0 = lo <= 0 ? 0 : (uint32_t)lo, x1 = hi >= sn ? sn : (uint32_t)hi;
    if (x0 >= sn) x0 = sn - 1;
    if (x1 <= x0) x1 = x0 + 1;
    if (z > x1) z = x1; /* rounding of the scaled size: stay inside */
    *r0 = x0;
    *rn = x1 - x0;
    *rb = a - x0 < 0 ? 0 : a - x0;
    *re = z - x0 - *rb;
}

void stk__jpeg_plan_make(uint32_t W, uint32_t H, double bx, double by, double bw, double bh, uint32_t out_w,
                         uint32_t out_h, unsigned nums, int spill, stk__jpeg_plan *p)
{
    unsigned num = 8;
    for (unsigned k = 1; k < 8; k++)
        if ((nums >> k & 1u) && bw * k >= 8.0 * out_w && bh * k >= 8.0 * out_h) {
            num = k;
            break;
        }
    p->num = num;
    p->sw = scaled(W, num);
    p->sh = scaled(H, num);
    axis(W, num, bx, bw, out_w, spill, &p->x0, &p->w, &p->bx, &p->bw);
    axis(H, num, by, bh, out_h, spill, &p->y0, &p->h, &p->by, &p->bh);
}
