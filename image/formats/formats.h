/* image/formats/formats.h - the image file formats pack reads besides JPEG
 * (image/jpeg.c): sniffing (sniff.c), PNG (libspng), WebP (libwebp), GIF
 * (giflib: the first frame), TIFF (libtiff: the first page) and BMP (read
 * here). Linked by pack alone (stoker_image_formats): libstoker links none
 * of these libraries.
 *
 * Each decoder reads a whole file in memory to RGB8 in buf (*v pointing at
 * it), after asking the caller's size policy (lim) about the size in the
 * header; *ow, *oh get the source size as soon as the header gives it.
 * What Pillow's Image.open(f).convert("RGB") gives is the reference: alpha
 * dropped (not composited), palettes expanded, PNG gamma and ICC profiles
 * ignored, 16-bit samples kept by their high byte, the first frame of an
 * animation, the first page of a multi-page TIFF; where a decoder differs
 * from Pillow its comment says so. Errors as image.h: STK_IMG_E_CORRUPT,
 * _UNSUPPORTED, _NOMEM, or the policy's own code. No library state is
 * global: libspng, giflib and libwebp keep none, and libtiff's error and
 * warning handlers are set per file (TIFFOpenOptions, libtiff 4.5). */
#ifndef STOKER_IMAGE_FORMATS_H
#define STOKER_IMAGE_FORMATS_H

#include "image.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    STK_IMG_FMT_UNKNOWN = 0,
    STK_IMG_FMT_JPEG = 1,
    STK_IMG_FMT_PNG = 2,
    STK_IMG_FMT_WEBP = 3,
    STK_IMG_FMT_GIF = 4,
    STK_IMG_FMT_BMP = 5,
    STK_IMG_FMT_TIFF = 6
} stk__img_format;

/* What the magic bytes say (never the file name); a prefix of a JPEG or
 * PNG signature counts, so that a file cut inside it is called truncated. */
stk__img_format stk__img_sniff(const uint8_t *data, size_t len);
/* STK_IMG_E_UNSUPPORTED with a message naming the first bytes and, where
 * known, the format people feed by mistake: "unsupported image format
 * (starts with 00 00 00 1c: AVIF)". */
int stk__img_unsupported(const uint8_t *data, size_t len, stk_error *err);
/* Whether a BMP info header of hs bytes is one of the kinds read here. */
int stk__img_bmp_header_size_ok(uint32_t hs);

int stk__img_png_decode(const uint8_t *data, size_t len, const stk__img_limits *lim, stk__img_buf *buf,
                        stk__rgb_view *v, uint32_t *ow, uint32_t *oh, stk_error *err);
int stk__img_webp_decode(const uint8_t *data, size_t len, const stk__img_limits *lim, stk__img_buf *buf,
                         stk__rgb_view *v, uint32_t *ow, uint32_t *oh, stk_error *err);
int stk__img_gif_decode(const uint8_t *data, size_t len, const stk__img_limits *lim, stk__img_buf *buf,
                        stk__rgb_view *v, uint32_t *ow, uint32_t *oh, stk_error *err);
int stk__img_bmp_decode(const uint8_t *data, size_t len, const stk__img_limits *lim, stk__img_buf *buf,
                        stk__rgb_view *v, uint32_t *ow, uint32_t *oh, stk_error *err);
int stk__img_tiff_decode(const uint8_t *data, size_t len, const stk__img_limits *lim, stk__img_buf *buf,
                         stk__rgb_view *v, uint32_t *ow, uint32_t *oh, stk_error *err);

/* For the decoders: the caller's size policy (none: anything goes), and
 * the pixel buffer with room for n bytes at *pix. */
static inline int stk__img_check(const stk__img_limits *lim, uint32_t w, uint32_t h, stk_error *err)
{
    return lim && lim->check ? lim->check(lim->ctx, w, h, err) : STK_OK;
}

static inline int stk__img_pixels(stk__img_buf *buf, size_t n, uint8_t **pix, stk_error *err)
{
    int rc = stk__img_buf_reserve(buf, n, "the decoded image", err);
    *pix = rc == STK_OK ? buf->p : NULL;
    return rc;
}

#endif
