/*
 * image/resize.h - antialiased bilinear resampling of 8-bit RGB images.
 *
 * The filter is Pillow's Image.resize(..., Image.BILINEAR) (ImagingResample):
 * a triangle of radius 1 stretched by the downscale factor, so that every
 * source pixel contributes (this is torchvision's Resize on PIL images, and
 * its antialias=True on tensors). Per output pixel the weights are computed in
 * double and normalised as Pillow does, then turned into 14-bit fixed point;
 * the horizontal pass runs first into an 8-bit intermediate, then the
 * vertical pass, each rounding and clamping to 0..255. Pillow keeps 22 bits of
 * weight in 32-bit integers; 14 bits fit the 16-bit multiply-add of the SIMD
 * kernels and move results by well under one level (see resize.c).
 *
 * Only a window of the output is computed (a centre crop needs nothing
 * outside it), and the horizontal pass runs only over the source rows the
 * vertical pass reads. Weight tables depend on (source size, output size,
 * window) alone and are kept in the stk__resizer, so images of repeating
 * dimensions reuse them.
 *
 * A stk__resizer is single-threaded: one per thread (pk_decoder holds one).
 */
#ifndef STOKER_IMAGE_RESIZE_H
#define STOKER_IMAGE_RESIZE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fractional bits of the fixed-point weights. */
#define STK_IMG_RESIZE_BITS 14

/* An 8-bit RGB image in memory: row y starts at data + y * stride and holds
 * w pixels of 3 bytes (R, G, B). room: how many bytes after the last row's
 * last pixel may be read (what they hold does not matter; 0 when unknown).
 * The horizontal SIMD kernel loads 16 bytes per 4 taps, so the outputs at the
 * right edge read past a row; with room for that (16 bytes for up to 4 taps:
 * any enlargement, reductions by less than 1.5; 12 more per 4 taps beyond)
 * the last row runs them by SIMD too instead of the scalar kernel. */
typedef struct {
    const uint8_t *data;
    uint32_t w, h;
    size_t stride;
    size_t room;
} stk__rgb_view;

/* A rectangle of the (virtual) resized image: columns [x, x + w), rows
 * [y, y + h). The resized image itself may be far larger than anything
 * allocated (a 1 x 100000 strip scaled so its short side is 256), hence
 * 64-bit offsets. */
typedef struct {
    uint64_t x, y;
    uint32_t w, h;
} stk__rect;

typedef struct stk__resizer stk__resizer;

/* NULL when out of memory. Picks the kernels the running CPU supports. */
stk__resizer *stk__resizer_new(void);
/* NULL is a no-op. */
void stk__resizer_free(stk__resizer *r);

/* Use the portable scalar kernels even where SIMD ones exist (0: allow SIMD,
 * the default). Both give identical bytes; tests compare them. */
void stk__resizer_force_scalar(stk__resizer *r, int on);

/* Resample src to out_w x out_h and write the window `win` of that image to
 * dst (row j of the window at dst + j * dst_stride, 3 * win.w bytes each);
 * mirror: of the image mirrored left to right (the window is then a window
 * of the mirrored image), at no cost over the plain resize.
 * An axis whose size does not change is copied, not filtered (as Pillow
 * does). The window must lie inside out_w x out_h and be non-empty; src must
 * be non-empty. Returns 0, or -1 when out of memory (dst is then undefined). */
int stk__resize(stk__resizer *r, const stk__rgb_view *src, uint64_t out_w, uint64_t out_h,
                const stk__rect *win, int mirror, uint8_t *dst, size_t dst_stride);

/* stk__resize of a box of src with fractional edges: [bx, bx + bw) x [by,
 * by + bh) (inside src, bw, bh > 0) resampled to out_w x out_h, as Pillow's
 * resize(box=...) does: output i of an axis centred at b0 + (i + 0.5) *
 * bext / out, its taps clipped to src (not to the box). What a DCT-scaled
 * decode of a crop needs, whose box edges fall between scaled pixels. */
int stk__resize_box(stk__resizer *r, const stk__rgb_view *src, double bx, double by, double bw, double bh,
                    uint64_t out_w, uint64_t out_h, const stk__rect *win, int mirror, uint8_t *dst,
                    size_t dst_stride);

/* Fractional bits the vertical pass of stk__resize_ycc keeps for the colour
 * conversion (so that samples are rounded once, at the end, not twice). */
#define STK_IMG_PLANE_FRAC 6

/* A JPEG's decoded planes before colour conversion (image.h's
 * stk__jpeg_decode_planes): Y (w x h) and, unless grayscale, Cb and Cr,
 * each subsampled by sub_x, sub_y (1 or 2) into ceil(w / sub_x) x
 * ceil(h / sub_y) samples. Every row must be readable 16 bytes past its last
 * sample, the last row included (the SIMD kernels load 16 bytes at a time;
 * what they read there is multiplied by zero). */
typedef struct {
    const uint8_t *data[3]; /* Y, Cb, Cr; data[1] == NULL: grayscale */
    size_t stride[3];
    uint32_t w, h;
    unsigned sub_x, sub_y;
} stk__ycc_view;

/* stk__resize for a JPEG's planes, to RGB: what TurboJPEG's RGB decode (fancy
 * upsampling of the chroma, then colour conversion as libjpeg does it)
 * followed by stk__resize would give, in one pass over the stored planes. All
 * steps before the colour conversion are linear, so each plane is resampled
 * on its own at its own resolution: the upsampling triangle and the resize
 * filter are composed into one table per axis, the sums are kept with
 * STK_IMG_PLANE_FRAC more bits, and the conversion runs at the output size.
 * Against the RGB route the result differs by rounding (within one level
 * nearly everywhere) and where the RGB route clamps a colour outside the
 * RGB cube before resizing instead of after. Same contract as stk__resize
 * otherwise, except that every axis is filtered (even one whose size does
 * not change: chroma still needs upsampling). */
int stk__resize_ycc(stk__resizer *r, const stk__ycc_view *src, uint64_t out_w, uint64_t out_h,
                    const stk__rect *win, uint8_t *dst, size_t dst_stride);

#ifdef __cplusplus
}
#endif
#endif /* STOKER_IMAGE_RESIZE_H */
