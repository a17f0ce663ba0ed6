/* image/formats/webp.c - WebP (libwebp): still images and the first frame of an animation.
 * formats.h says what every decoder here promises. */
#include "formats.h"

#include <webp/decode.h>
#include <webp/demux.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int webp_fail(VP8StatusCode st, stk_error *err)
{
    switch (st) {
    case VP8_STATUS_OUT_OF_MEMORY:
        return stk_error_set(err, STK_IMG_E_NOMEM, "out of memory decoding WebP");
    case VP8_STATUS_UNSUPPORTED_FEATURE:
        return stk_error_set(err, STK_IMG_E_UNSUPPORTED,
                             "unsupported WebP: a feature libwebp does not decode");
    case VP8_STATUS_NOT_ENOUGH_DATA:
        return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt WebP: the file ends early (truncated?)");
    default:
        return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt WebP: %s",
                             st == VP8_STATUS_BITSTREAM_ERROR ? "the image data does not decode"
                                                              : "invalid headers");
    }
}

/* An animated WebP: its first frame on the canvas, as Pillow shows it. */
static int webp_first_frame(const uint8_t *data, size_t len, uint8_t *pix, uint32_t w, uint32_t h,
                            stk_error *err)
{
    WebPAnimDecoderOptions o;
    if (!WebPAnimDecoderOptionsInit(&o)) return stk_error_set(err, STK_IMG_E_UNSUPPORTED, "unsupported WebP");
    o.color_mode = MODE_RGBA;
    o.use_threads = 0;
    const WebPData wd = {data, len};
    WebPAnimDecoder *ad = WebPAnimDecoderNew(&wd, &o);
    if (!ad) return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt WebP: the animation does not decode");
    uint8_t *rgba = NULL;
    int ts = 0, rc = STK_OK;
    WebPAnimInfo info;
    if (!WebPAnimDecoderGetInfo(ad, &info) || info.canvas_width != w || info.canvas_height != h ||
        !WebPAnimDecoderGetNext(ad, &rgba, &ts)) {
        rc = stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt WebP: the first frame does not decode");
    } else {
        for (size_t i = 0, n = (size_t)w * h; i < n; i++) memcpy(pix + 3 * i, rgba + 4 * i, 3);
    }
    WebPAnimDecoderDelete(ad);
    return rc;
}

int stk__img_webp_decode(const uint8_t *data, size_t len, const stk__img_limits *lim, stk__img_buf *buf,
                         stk__rgb_view *v, uint32_t *ow, uint32_t *oh, stk_error *err)
{
    WebPBitstreamFeatures f;
    VP8StatusCode st = WebPGetFeatures(data, len, &f);
    if (st != VP8_STATUS_OK) return webp_fail(st, err);
    if (f.width <= 0 || f.height <= 0)
        return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt WebP: no image size");
    uint32_t w = (uint32_t)f.width, h = (uint32_t)f.height;
    *ow = w;
    *oh = h;
    uint8_t *pix;
    size_t stride = 3 * (size_t)w;
    int rc = stk__img_check(lim, w, h, err);
    if (rc == STK_OK) rc = stk__img_pixels(buf, stride * h, &pix, err);
    if (rc != STK_OK) return rc;
    if (f.has_animation) {
        rc = webp_first_frame(data, len, pix, w, h, err);
    } else {
        WebPDecoderConfig c;
        if (!WebPInitDecoderConfig(&c)) return stk_error_set(err, STK_IMG_E_UNSUPPORTED, "unsupported WebP");
        c.output.colorspace = MODE_RGB; /* alpha dropped, not premultiplied */
        c.output.is_external_memory = 1;
        c.output.u.RGBA.rgba = pix;
        c.output.u.RGBA.stride = (int)stride;
        c.output.u.RGBA.size = stride * h;
        st = WebPDecode(data, len, &c);
        WebPFreeDecBuffer(&c.output);
        if (st != VP8_STATUS_OK) rc = webp_fail(st, err);
    }
    if (rc == STK_OK) *v = (stk__rgb_view){pix, w, h, stride, 0};
    return rc;
}
