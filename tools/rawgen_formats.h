/* tools/rawgen_formats.h - rawgen's writers of the formats besides JPEG and
 * PNG that pack reads: WebP, GIF, BMP and TIFF, from RGB8 pixels (rows top
 * to bottom). Each returns a malloc'd file in memory (*len bytes), or NULL
 * with a one-line reason in msg. */
#ifndef STOKER_TOOLS_RAWGEN_FORMATS_H
#define STOKER_TOOLS_RAWGEN_FORMATS_H

#include <stddef.h>
#include <stdint.h>

/* Lossy WebP at quality q. */
uint8_t *rg_webp(const uint8_t *rgb, uint32_t w, uint32_t h, int q, size_t *len, char *msg, size_t cap);
/* GIF89a, interlaced, the colours quantised to a 6x6x6 cube. */
uint8_t *rg_gif(const uint8_t *rgb, uint32_t w, uint32_t h, size_t *len, char *msg, size_t cap);
/* 24-bit bottom-up BMP (BITMAPINFOHEADER). */
uint8_t *rg_bmp(const uint8_t *rgb, uint32_t w, uint32_t h, size_t *len, char *msg, size_t cap);
/* 8-bit RGB TIFF, LZW, strips of 16 rows. */
uint8_t *rg_tiff(const uint8_t *rgb, uint32_t w, uint32_t h, size_t *len, char *msg, size_t cap);

typedef enum { RG_WEBP, RG_GIF, RG_BMP, RG_TIFF } rg_format;
/* The writer of `fmt` (q: the WebP quality). */
uint8_t *rg_encode(rg_format fmt, const uint8_t *rgb, uint32_t w, uint32_t h, int q, size_t *len, char *msg,
                   size_t cap);

#endif
