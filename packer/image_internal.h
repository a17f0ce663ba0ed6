/* packer/image_internal.h - what image.c shares with the decoders of the
 * other formats (image_formats.c). Not for pack's other files. */
#ifndef STOKER_PACKER_IMAGE_INTERNAL_H
#define STOKER_PACKER_IMAGE_INTERNAL_H

#include "image.h"
#include "resize.h"

#include <stddef.h>
#include <stdint.h>

/* Write a one-line message (when msg and cap) and return code. */
int pk__fail(char *msg, size_t cap, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Refuse w x h from the header: over p->max_pixels, or too large to address. */
int pk__check_pixels(uint32_t w, uint32_t h, const pk_params *p, char *msg, size_t cap);
/* The decoder's pixel buffer with room for n bytes (old contents lost). */
int pk__pixels(pk_decoder *d, size_t n, uint8_t **pix, char *msg, size_t cap);

/* Whether a BMP info header of hs bytes is one of the kinds read here. */
int pk__bmp_header_size_ok(uint32_t hs);

/* Decode a whole WebP, GIF (first frame), BMP or TIFF (first page) file to
 * RGB8 in the decoder's pixel buffer, *v pointing at it; *ow, *oh get the
 * source size as soon as the header gives it. Alpha is dropped, as Pillow's
 * convert("RGB") does. Statuses and messages as pk_process. */
int pk__webp_decode(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, stk__rgb_view *v,
                    uint32_t *ow, uint32_t *oh, char *msg, size_t cap);
int pk__gif_decode(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, stk__rgb_view *v,
                   uint32_t *ow, uint32_t *oh, char *msg, size_t cap);
int pk__bmp_decode(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, stk__rgb_view *v,
                   uint32_t *ow, uint32_t *oh, char *msg, size_t cap);
int pk__tiff_decode(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, stk__rgb_view *v,
                    uint32_t *ow, uint32_t *oh, char *msg, size_t cap);

#endif
