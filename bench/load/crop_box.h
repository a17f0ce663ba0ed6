/* bench/load/crop_box.h - the crops load_bench and raw_probe both time:
 * the box the load path takes from an image, and a box as the window of a
 * resize (the raw-plane route's resample). Linked by both programs. */
#ifndef STK_BENCH_LOAD_CROP_BOX_H
#define STK_BENCH_LOAD_CROP_BOX_H

#include <stdint.h>

#include "image.h"

/* Image k's crop of a W x H image to size x size: torchvision's
 * RandomResizedCrop box (scale 0.08-1, ratio 3/4-4/3) and its flip drawn
 * from the seed k * 7919 + 1, or with eval the eval crop's source box (b the
 * whole image, no flip). x, y, w, h: the box (b's edges for a random crop). */
typedef struct {
    stk__img_box b;
    double x, y, w, h;
    int flip;
} lb_crop;

void lb_crop_of(uint64_t k, uint32_t W, uint32_t H, uint32_t size, int eval, lb_crop *c);

/* The box [x, x + w) x [y, y + h) of a W x H image as the window of a resize
 * that maps it to size x size: the resized *rw x *rh (at least size each)
 * and the window *pw in it (box edges rounded to output pixels). */
void lb_box_window(uint32_t W, uint32_t H, const lb_crop *c, uint32_t size, uint64_t *rw, uint64_t *rh,
                   stk__rect *pw);

#endif
