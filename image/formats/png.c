/* image/formats/png.c - PNG (libspng): every colour type and depth.
 * formats.h says what every decoder here promises. */
#include "formats.h"

#include <spng.h>

#include <stdint.h>

/* Memory libspng may keep for ancillary chunks (text, ICC profiles): their
 * compressed forms can expand like any zip bomb. */
#define STK_IMG_PNG_CACHE_LIMIT (16u << 20)

static int png_fail(int code, stk_error *err)
{
    if (code == SPNG_EMEM) return stk_error_set(err, STK_IMG_E_NOMEM, "out of memory decoding PNG");
    return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt PNG: %s", spng_strerror(code));
}

/* Header, limits, decode; ctx is the caller's to free. */
static int png_run(spng_ctx *ctx, const uint8_t *data, size_t len, const stk__img_limits *lim,
                   stk__img_buf *buf, stk__rgb_view *v, uint32_t *ow, uint32_t *oh, stk_error *err)
{
    struct spng_ihdr ihdr;
    size_t need = 0;
    uint8_t *pix;
    int e;
    /* No chunk can be longer than the file (nor than PNG's 2^31 - 1); cap
     * what ancillary chunks may cache. */
    if ((e = spng_set_chunk_limits(ctx, len < INT32_MAX ? len : INT32_MAX, STK_IMG_PNG_CACHE_LIMIT)) ||
        (e = spng_set_png_buffer(ctx, data, len)) || (e = spng_get_ihdr(ctx, &ihdr)))
        return png_fail(e, err);
    *ow = ihdr.width;
    *oh = ihdr.height;
    int rc = stk__img_check(lim, ihdr.width, ihdr.height, err);
    if (rc != STK_OK) return rc;
    if ((e = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &need))) return png_fail(e, err);
    if ((rc = stk__img_pixels(buf, need, &pix, err)) != STK_OK) return rc;
    /* flags 0: no tRNS, no gamma; alpha is dropped as Pillow's convert("RGB") does */
    if ((e = spng_decode_image(ctx, pix, need, SPNG_FMT_RGB8, 0))) return png_fail(e, err);
    *v = (stk__rgb_view){pix, ihdr.width, ihdr.height, 3 * (size_t)ihdr.width, 0};
    return STK_OK;
}

int stk__img_png_decode(const uint8_t *data, size_t len, const stk__img_limits *lim, stk__img_buf *buf,
                        stk__rgb_view *v, uint32_t *ow, uint32_t *oh, stk_error *err)
{
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx) return stk_error_set(err, STK_IMG_E_NOMEM, "out of memory decoding PNG");
    int rc = png_run(ctx, data, len, lim, buf, v, ow, oh, err);
    spng_ctx_free(ctx);
    return rc;
}
