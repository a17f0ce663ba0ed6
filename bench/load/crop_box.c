/* bench/load/crop_box.c - see crop_box.h. */
#include "crop_box.h"

static uint64_t splitmix(void *st)
{
    uint64_t z = (*(uint64_t *)st += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

void lb_crop_of(uint64_t k, uint32_t W, uint32_t H, uint32_t size, int eval, lb_crop *c)
{
    uint64_t seed = k * 7919 + 1;
    stk__img_rng rng = {splitmix, &seed};
    c->b = (stk__img_box){0, 0, (int32_t)W, (int32_t)H};
    c->flip = 0;
    if (eval) {
        stk__img_eval_box(size, size, W, H, &c->x, &c->y, &c->w, &c->h);
        return;
    }
    stk__img_rrc_box(H, W, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &rng, &c->b);
    c->flip = (int)(splitmix(&seed) & 1);
    c->x = c->b.x0, c->y = c->b.y0, c->w = c->b.w, c->h = c->b.h;
}

void lb_box_window(uint32_t W, uint32_t H, const lb_crop *c, uint32_t size, uint64_t *rw, uint64_t *rh,
                   stk__rect *pw)
{
    uint64_t o = size, w = (uint64_t)((double)W * o / c->w + 0.5), h = (uint64_t)((double)H * o / c->h + 0.5);
    *rw = w < o ? o : w;
    *rh = h < o ? o : h;
    *pw = (stk__rect){(uint64_t)(c->x * o / c->w + 0.5), (uint64_t)(c->y * o / c->h + 0.5), size, size};
    if (pw->x > *rw - o) pw->x = *rw - o;
    if (pw->y > *rh - o) pw->y = *rh - o;
}
