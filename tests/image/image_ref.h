/* tests/image/image_ref.h - references shared by the image tests
 * (tests/image/test_resize.c, tests/packer/test_pack_image.c): synthetic
 * images and an independent double-precision implementation of Pillow's
 * BILINEAR (antialiased) resize, written from Pillow's source, not from
 * image/resize.c. Check assertions inside: for Check tests only. */
#ifndef STK_TESTS_IMAGE_REF_H
#define STK_TESTS_IMAGE_REF_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *px; /* RGB, rows top to bottom */
    uint32_t w, h;
} tu_image;

/* What tu_synth draws: TU_FLAT one colour; TU_GRADIENT smooth ramps;
 * TU_DETAIL ramps, a sine pattern, sharp edges and noise: everything a
 * resampler can get wrong. */
enum { TU_FLAT, TU_GRADIENT, TU_DETAIL };

/* SplitMix64. */
uint64_t tu_rng_next(uint64_t *s);
/* malloc that fails the test instead of returning NULL. */
void *tu_xmalloc(size_t n);
tu_image tu_synth(uint32_t w, uint32_t h, int kind, uint64_t seed);
void tu_image_free(tu_image *im);

/* Pillow's BILINEAR weights of output pixel i of in -> out: *lo the first
 * input, the count returned, w the normalised weights. */
uint32_t tu_ref_weights(uint32_t in, uint32_t out, uint32_t i, uint32_t *lo, double *w);
/* sw x sh RGB doubles resized to dw x dh, horizontal pass first, in double. */
double *tu_ref_resize_d(const double *src, uint32_t sw, uint32_t sh, uint32_t dw, uint32_t dh);
/* tu_ref_resize_d of an 8-bit source (widened exactly, so the same arithmetic). */
double *tu_ref_resize(const uint8_t *src, uint32_t sw, uint32_t sh, uint32_t dw, uint32_t dh);
/* A reference value as an 8-bit level: rounded half up, clamped. */
int tu_ref_level(double v);
/* got (gw x gh at stride gs bytes) against the window (x0, y0) of ref
 * (rw wide): every byte within `tol`. Returns the largest difference. */
int tu_compare_ref(const uint8_t *got, uint32_t gw, uint32_t gh, size_t gs, const double *ref, uint32_t rw,
                   uint32_t x0, uint32_t y0, int tol, const char *what);

/* torchvision Resize(size) + CenterCrop(size) for a w x h source, written
 * the way torchvision's Python reads: the resized size and the crop's
 * left and top. */
void tu_tv_geometry(uint32_t w, uint32_t h, uint32_t size, uint32_t *rw, uint32_t *rh, uint32_t *left,
                    uint32_t *top);

/* Offset of JPEG marker m (its 0xFF) among the segments before the first
 * scan; 0 when it is not there. */
size_t tu_jpeg_marker(const uint8_t *j, size_t n, uint8_t m);

#endif
