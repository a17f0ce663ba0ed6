/* image/ycc.h - JPEG's YCbCr to RGB, on resampled samples.
 *
 * The JFIF conversion as libjpeg does it (jdcolor.c: R = Y + 1.402 (Cr - 128),
 * G = Y - 0.34414 (Cb - 128) - 0.71414 (Cr - 128), B = Y + 1.772 (Cb - 128),
 * with libjpeg's 16-bit fixed-point constants), but on samples that keep
 * STK_IMG_PLANE_FRAC fractional bits (resize.h), rounded and clamped to 0..255
 * once at the end. */
#ifndef STOKER_IMAGE_YCC_H
#define STOKER_IMAGE_YCC_H

#include <stddef.h>
#include <stdint.h>

/* n pixels from planar y, cb, cr (cb and cr NULL: grayscale, R = G = B = Y)
 * to interleaved rgb. simd: a stk__resizer's kernel level (resize_internal.h):
 * 0 scalar, 1 AVX2, 2 also AVX-512BW and VBMI, which the CPU must have (the
 * bytes are the same). */
void stk__ycc_row(int simd, const int16_t *y, const int16_t *cb, const int16_t *cr, uint8_t *rgb, size_t n);

#endif
