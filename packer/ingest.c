/* packer/ingest.c - one image file in, one size x size RGB tensor out:
 * pack's policy over image/ (decoding, geometry, resampling).
 *
 * Order of work, so that hostile files cost little: sniff the magic bytes,
 * read the header only, refuse over max_pixels, and only then allocate and
 * decode. Decoded pixels go to a buffer kept in the decoder and reused.
 */
#include "ingest.h"

#include "formats.h"
#include "image.h"
#include "resize.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pk_decoder {
    stk__jpeg *jpeg;
    stk__img_buf pix; /* decoded pixels */
    stk__resizer *rs;
};

/* What a decode leaves for render(): RGB pixels, or a JPEG's planes; boxed:
 * the RGB pixels are a DCT-scaled region (the decode planner's) and
 * [bx, bx + bw) x [by, by + bh) of them is the output window's source. */
typedef struct {
    bool planar, boxed;
    stk__rgb_view rgb;
    stk__ycc_view ycc;
    double bx, by, bw, bh;
} decoded;

/* Bytes kept readable after a planned region (stk__rgb_view.room). */
#define PX_ROOM 64u

/* ------------------------------------------------------------- plumbing */

static int pk__fail(char *msg, size_t cap, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int pk__fail(char *msg, size_t cap, int code, const char *fmt, ...)
{
    if (msg && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, cap, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* image/'s error as pack's status, its message into msg. */
static int pk_status_of(int code, const stk_error *err, char *msg, size_t cap)
{
    int st = code == STK_IMG_E_UNSUPPORTED ? PK_E_UNSUPPORTED
             : code == STK_IMG_E_NOMEM     ? PK_E_NOMEM
             : code == STK_IMG_E_TOO_LARGE ? PK_E_TOO_LARGE
             : code == STK_E_ARG           ? PK_E_ARG
                                           : PK_E_CORRUPT;
    return pk__fail(msg, cap, st, "%s", err->msg);
}

const char *pk_status_name(int status)
{
    switch (status) {
    case PK_OK:
        return "ok";
    case PK_E_EMPTY:
        return "empty file";
    case PK_E_UNSUPPORTED:
        return "unsupported format";
    case PK_E_CORRUPT:
        return "corrupt image";
    case PK_E_TOO_LARGE:
        return "too large";
    case PK_E_NOMEM:
        return "out of memory";
    case PK_E_ARG:
        return "invalid argument";
    default:
        return "unknown error";
    }
}

void pk_params_init(pk_params *p, uint32_t size)
{
    memset(p, 0, sizeof *p);
    p->size = size;
    p->mode = PK_RESIZE_SHORTER;
    p->max_pixels = PK_DEFAULT_MAX_PIXELS;
}

pk_decoder *pk_decoder_new(void)
{
    pk_decoder *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->jpeg = stk__jpeg_new();
    d->rs = stk__resizer_new();
    if (!d->jpeg || !d->rs) {
        pk_decoder_free(d);
        return NULL;
    }
    return d;
}

void pk_decoder_free(pk_decoder *d)
{
    if (!d) return;
    stk__jpeg_free(d->jpeg);
    stk__resizer_free(d->rs);
    stk__img_buf_free(&d->pix);
    free(d);
}

void pk_layout_compute(const pk_params *p, uint32_t src_w, uint32_t src_h, pk_layout *l)
{
    stk__img_layout_compute((stk__img_mode)p->mode, p->size, p->min_side, p->max_side, src_w, src_h, l);
}

/* Refuse w x h from the header, before any pixel memory exists: over
 * max_pixels, or too large to address (image.h's size policy). */
static int check_pixels(void *ctx, uint32_t w, uint32_t h, stk_error *err)
{
    const pk_params *p = ctx;
    uint64_t px = (uint64_t)w * h;
    if (p->max_pixels && px > p->max_pixels)
        return stk_error_set(err, STK_IMG_E_TOO_LARGE, "image is %ux%u = %llu pixels, over --max-pixels %llu",
                             w, h, (unsigned long long)px, (unsigned long long)p->max_pixels);
    if (px > SIZE_MAX / 8)
        return stk_error_set(err, STK_IMG_E_TOO_LARGE, "image is %ux%u = %llu pixels, too large to decode", w,
                             h, (unsigned long long)px);
    return STK_OK;
}

/* ----------------------------------------------------------------- JPEG */

/* Whether a JPEG decodes to its planes and is resampled there
 * (stk__resize_ycc) rather than decoded to RGB first: the layouts
 * stk__jpeg_planar_ok names, decoded at full size, and actually resampled
 * (an image kept at its own size goes the RGB way, and equals TurboJPEG's
 * RGB decode). */
static bool jpeg_planar(const stk__jpeg_info *info, unsigned den, const pk_layout *l, const pk_params *p)
{
    if (p->resample_rgb || den != 1 || (l->resized_w == info->w && l->resized_h == info->h)) return false;
    return stk__jpeg_planar_ok(info);
}

static int jpeg_decode(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, decoded *out,
                       uint32_t *ow, uint32_t *oh, stk_error *err)
{
    stk__jpeg_info info;
    int rc = stk__jpeg_header(d->jpeg, data, len, &info, err);
    *ow = info.w;
    *oh = info.h;
    if (rc == STK_OK) rc = check_pixels((void *)p, info.w, info.h, err);
    if (rc != STK_OK) return rc;
    pk_layout l;
    pk_layout_compute(p, info.w, info.h, &l);
    out->boxed = false;
    /* Shrunk by 2 or more: through the decode planner, as the reader's crops
     * (image/plan.c): the source region of the output window (all of it but
     * for --resize shorter's centre crop) at the smallest power-of-two DCT
     * scale that keeps the output's resolution, resampled from the box's
     * fractional edges, and the rest of the stream read through (damage
     * anywhere is refused as before). */
    double fx = (double)info.w / (double)l.resized_w, fy = (double)info.h / (double)l.resized_h;
    stk__jpeg_plan pl;
    stk__jpeg_plan_make(info.w, info.h, (double)l.crop_x * fx, (double)l.crop_y * fy, l.w * fx, l.h * fy, l.w,
                        l.h, STK_IMG_SCALES_POW2, 1, &pl);
    if (pl.num < 8 && info.components != 4) {
        const uint8_t *at;
        size_t stride;
        rc = stk__jpeg_decode_plan_all(d->jpeg, data, len, info.w, info.h, &pl, &d->pix, PX_ROOM, &at,
                                       &stride, err);
        if (rc != STK_IMG_E_UNSUPPORTED) {
            if (rc) return rc;
            const uint8_t *last = at + (size_t)(pl.h - 1) * stride + 3 * (size_t)pl.w,
                          *end = d->pix.p + d->pix.cap;
            out->planar = false;
            out->boxed = true;
            out->rgb = (stk__rgb_view){at, pl.w, pl.h, stride, last <= end ? (size_t)(end - last) : 0};
            out->bx = pl.bx, out->by = pl.by, out->bw = pl.bw, out->bh = pl.bh;
            return STK_OK;
        }
    }
    unsigned den = stk__jpeg_scale(d->jpeg, info.w, info.h, l.resized_w, l.resized_h);
    out->planar = jpeg_planar(&info, den, &l, p);
    if (out->planar) return stk__jpeg_decode_planes(d->jpeg, data, len, &info, &d->pix, &out->ycc, err);
    size_t n = stk__jpeg_decode_bytes(&info, STK_IMG_PF_RGB, den);
    if ((rc = stk__img_buf_reserve(&d->pix, n, "the decoded image", err)) ||
        (rc = stk__jpeg_decode(d->jpeg, data, len, &info, STK_IMG_PF_RGB, den, d->pix.p, err)))
        return rc;
    uint32_t sw = stk__jpeg_scaled(info.w, den), sh = stk__jpeg_scaled(info.h, den);
    out->rgb = (stk__rgb_view){d->pix.p, sw, sh, 3 * (size_t)sw, 0};
    return STK_OK;
}

int pk_jpeg_three_components(pk_decoder *d, const uint8_t *data, size_t n, uint32_t w, uint32_t h)
{
    stk__jpeg_info info;
    stk_error err;
    return stk__jpeg_header(d->jpeg, data, n, &info, &err) == STK_OK &&
           (info.colorspace == STK_IMG_CS_YCBCR || info.colorspace == STK_IMG_CS_RGB) && info.w == w &&
           info.h == h;
}

/* ---------------------------------------------------------------- output */

static void fill_rect(uint8_t *out, size_t stride, uint32_t x, uint32_t y, uint32_t w, uint32_t h,
                      const uint8_t rgb[3])
{
    for (uint32_t j = 0; j < h; j++) {
        uint8_t *row = out + (size_t)(y + j) * stride + 3 * (size_t)x;
        for (uint32_t i = 0; i < w; i++) memcpy(row + 3 * (size_t)i, rgb, 3);
    }
}

/* Resize the decoded view into its place in out; pad around it in fit mode. */
static int render(pk_decoder *d, const decoded *v, uint32_t ow, uint32_t oh, const pk_params *p, uint8_t *out,
                  char *msg, size_t cap)
{
    pk_layout l;
    pk_layout_compute(p, ow, oh, &l);
    uint32_t n = p->size;
    size_t stride = 3 * (size_t)(p->mode == PK_RESIZE_KEEP ? l.w : n); /* keep: the image's own rows */
    stk__rect win = {l.crop_x, l.crop_y, l.w, l.h}, whole = {0, 0, l.w, l.h};
    uint8_t *at = out + (size_t)l.pad_y * stride + 3 * (size_t)l.pad_x;
    if ((v->boxed
             ? stk__resize_box(d->rs, &v->rgb, v->bx, v->by, v->bw, v->bh, l.w, l.h, &whole, 0, at, stride)
         : v->planar ? stk__resize_ycc(d->rs, &v->ycc, l.resized_w, l.resized_h, &win, at, stride)
                     : stk__resize(d->rs, &v->rgb, l.resized_w, l.resized_h, &win, 0, at, stride)) != 0)
        return pk__fail(msg, cap, PK_E_NOMEM, "out of memory resizing %ux%u to %llux%llu", ow, oh,
                        (unsigned long long)l.resized_w, (unsigned long long)l.resized_h);
    if ((l.w == n && l.h == n) || p->mode == PK_RESIZE_KEEP) return PK_OK;
    fill_rect(out, stride, 0, 0, n, l.pad_y, p->fill);                               /* top */
    fill_rect(out, stride, 0, l.pad_y + l.h, n, n - l.pad_y - l.h, p->fill);         /* bottom */
    fill_rect(out, stride, 0, l.pad_y, l.pad_x, l.h, p->fill);                       /* left */
    fill_rect(out, stride, l.pad_x + l.w, l.pad_y, n - l.pad_x - l.w, l.h, p->fill); /* right */
    return PK_OK;
}

static int check_args(const pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p,
                      const uint8_t *out, char *msg, size_t cap)
{
    if (!d || !p || !out || (!data && len))
        return pk__fail(msg, cap, PK_E_ARG, "invalid argument (NULL decoder, params, data or output)");
    if (p->size == 0 || p->size > PK_MAX_SIZE)
        return pk__fail(msg, cap, PK_E_ARG, "invalid size %u (1 .. %u)", p->size, PK_MAX_SIZE);
    if (p->mode != PK_RESIZE_SHORTER && p->mode != PK_RESIZE_STRETCH && p->mode != PK_RESIZE_FIT &&
        p->mode != PK_RESIZE_KEEP)
        return pk__fail(msg, cap, PK_E_ARG, "invalid resize mode %d", (int)p->mode);
    if (p->mode == PK_RESIZE_KEEP && (p->max_side < 1 || p->max_side > p->size || p->min_side > p->max_side))
        return pk__fail(msg, cap, PK_E_ARG, "invalid sides: min %u, max %u (1 .. size %u)", p->min_side,
                        p->max_side, p->size);
    return PK_OK;
}

/* The decoders of image/formats/, in stk__img_format order from STK_IMG_FMT_PNG. */
static int (*const other_decode[])(const uint8_t *, size_t, const stk__img_limits *, stk__img_buf *,
                                   stk__rgb_view *, uint32_t *, uint32_t *, stk_error *) = {
    stk__img_png_decode, stk__img_webp_decode, stk__img_gif_decode, stk__img_bmp_decode,
    stk__img_tiff_decode};

int pk_process(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, uint8_t *out,
               uint32_t *orig_w, uint32_t *orig_h, char *msg, size_t msgcap)
{
    uint32_t ow = 0, oh = 0;
    decoded v;
    stk_error err;
    int rc = check_args(d, data, len, p, out, msg, msgcap);
    if (rc == PK_OK && len == 0) rc = pk__fail(msg, msgcap, PK_E_EMPTY, "empty file");
    if (rc == PK_OK) {
        const stk__img_limits lim = {check_pixels, (void *)p};
        stk__img_format fmt = stk__img_sniff(data, len);
        int code;
        switch (fmt) {
        case STK_IMG_FMT_JPEG:
            code = jpeg_decode(d, data, len, p, &v, &ow, &oh, &err);
            break;
        case STK_IMG_FMT_PNG:
        case STK_IMG_FMT_WEBP:
        case STK_IMG_FMT_GIF:
        case STK_IMG_FMT_BMP:
        case STK_IMG_FMT_TIFF: /* RGB out */
            v.planar = v.boxed = false;
            code = other_decode[fmt - STK_IMG_FMT_PNG](data, len, &lim, &d->pix, &v.rgb, &ow, &oh, &err);
            break;
        default:
            code = stk__img_unsupported(data, len, &err);
            break;
        }
        if (code != STK_OK) rc = pk_status_of(code, &err, msg, msgcap);
    }
    if (rc == PK_OK) rc = render(d, &v, ow, oh, p, out, msg, msgcap);
    if (rc == PK_OK && msg && msgcap) msg[0] = '\0'; /* nothing left of a recovered failure */
    if (orig_w) *orig_w = ow;
    if (orig_h) *orig_h = oh;
    return rc;
}
