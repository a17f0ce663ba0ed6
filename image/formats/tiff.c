/* image/formats/tiff.c - TIFF (libtiff): the first page.
 * formats.h says what every decoder here promises. */
#include "formats.h"

#include <tiffio.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIFF_NAME "TIFF" /* the name libtiff knows the file by */

typedef struct {
    const uint8_t *p;
    uint64_t len, at;
    char err[200]; /* libtiff's first error */
} tiff_src;

static tmsize_t tiff_read(thandle_t h, void *buf, tmsize_t n)
{
    tiff_src *s = h;
    uint64_t k = s->at >= s->len ? 0 : s->len - s->at;
    if (n < 0) return 0;
    if ((uint64_t)n < k) k = (uint64_t)n;
    memcpy(buf, s->p + s->at, (size_t)k);
    s->at += k;
    return (tmsize_t)k;
}

static tmsize_t tiff_write(thandle_t h, void *buf, tmsize_t n)
{
    (void)h, (void)buf, (void)n;
    return 0;
}

static toff_t tiff_seek(thandle_t h, toff_t off, int whence)
{
    tiff_src *s = h;
    uint64_t base = whence == SEEK_CUR ? s->at : whence == SEEK_END ? s->len : 0;
    s->at = base + off;
    return s->at;
}

static int tiff_close(thandle_t h)
{
    (void)h;
    return 0;
}

static toff_t tiff_size(thandle_t h) { return ((tiff_src *)h)->len; }

static int tiff_map(thandle_t h, void **base, toff_t *size)
{
    (void)h, (void)base, (void)size;
    return 0; /* no mapping: libtiff reads through tiff_read */
}

static void tiff_unmap(thandle_t h, void *base, toff_t size) { (void)h, (void)base, (void)size; }

static int tiff_error(TIFF *t, void *user, const char *module, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
static int tiff_error(TIFF *t, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)t, (void)module;
    tiff_src *s = user;
    if (!s->err[0]) {
        vsnprintf(s->err, sizeof s->err, fmt, ap);
        size_t n = strlen(TIFF_NAME) + 2; /* libtiff prefixes many messages with the file's name */
        if (!strncmp(s->err, TIFF_NAME ": ", n)) memmove(s->err, s->err + n, strlen(s->err + n) + 1);
    }
    return 1; /* handled: nothing reaches libtiff's global handler */
}

static int tiff_warning(TIFF *t, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)t, (void)user, (void)module, (void)fmt, (void)ap;
    return 1; /* unknown tags and the like: ignored, as Pillow does */
}

/* The layouts read here rather than through libtiff's RGBA interface: 8- or
 * 16-bit unsigned grey or RGB (extra samples such as alpha dropped, as
 * Pillow's convert("RGB") drops them), contiguous or planar, strips or
 * tiles. libtiff 4.5's RGBA interface premultiplies unassociated alpha and
 * misplaces the pixels of partial tiles of 16-bit grey. */
typedef struct {
    uint32_t w, h;
    uint16_t bps, spp, planar, photometric;
} tiff_layout;

static int tiff_direct_ok(TIFF *t, tiff_layout *l)
{
    uint16_t fmt = SAMPLEFORMAT_UINT;
    TIFFGetFieldDefaulted(t, TIFFTAG_BITSPERSAMPLE, &l->bps);
    TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, &l->spp);
    TIFFGetFieldDefaulted(t, TIFFTAG_PLANARCONFIG, &l->planar);
    TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLEFORMAT, &fmt);
    if (!TIFFGetField(t, TIFFTAG_PHOTOMETRIC, &l->photometric)) return 0;
    int grey = l->photometric == PHOTOMETRIC_MINISBLACK || l->photometric == PHOTOMETRIC_MINISWHITE;
    return fmt == SAMPLEFORMAT_UINT && (l->bps == 8 || l->bps == 16) &&
           ((grey && l->spp >= 1) || (l->photometric == PHOTOMETRIC_RGB && l->spp >= 3)) && l->spp <= 8;
}

/* Pixels [x0, x0 + bw) x [y0, y0 + bh) of plane `plane` (or all samples,
 * contiguous) from a decoded strip or tile of row length bw_alloc. */
static void tiff_put(const tiff_layout *l, const uint8_t *buf, uint32_t bw_alloc, uint32_t x0, uint32_t y0,
                     uint32_t bw, uint32_t bh, int plane, uint8_t *pix)
{
    unsigned B = l->bps / 8, per = l->planar == PLANARCONFIG_SEPARATE ? 1 : l->spp;
    int grey = l->photometric != PHOTOMETRIC_RGB, inv = l->photometric == PHOTOMETRIC_MINISWHITE;
    for (uint32_t y = 0; y < bh; y++)
        for (uint32_t x = 0; x < bw; x++) {
            const uint8_t *px = buf + ((size_t)y * bw_alloc + x) * per * B;
            uint8_t *o = pix + 3 * ((size_t)(y0 + y) * l->w + x0 + x);
            for (unsigned k = 0; k < per; k++) {
                unsigned c = plane < 0 ? k : (unsigned)plane; /* the sample's channel */
                if (c >= (grey ? 1u : 3u)) break;             /* alpha and other extras */
                uint8_t v = B == 1 ? px[k] : (uint8_t)(*(const uint16_t *)(const void *)(px + 2 * k) >> 8);
                if (inv) v = (uint8_t)(255 - v);
                if (grey) o[0] = o[1] = o[2] = v;
                else o[c] = v;
            }
        }
}

static int tiff_direct(TIFF *t, tiff_src *s, const tiff_layout *l, uint8_t *pix, stk_error *err)
{
    int tiled = TIFFIsTiled(t), sep = l->planar == PLANARCONFIG_SEPARATE;
    uint32_t bw = l->w, bh = 0;
    if (tiled) {
        TIFFGetField(t, TIFFTAG_TILEWIDTH, &bw);
        TIFFGetField(t, TIFFTAG_TILELENGTH, &bh);
    } else {
        TIFFGetFieldDefaulted(t, TIFFTAG_ROWSPERSTRIP, &bh);
        if (bh > l->h) bh = l->h;
    }
    tmsize_t size = tiled ? TIFFTileSize(t) : TIFFStripSize(t);
    if (!bw || !bh || size <= 0)
        return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt TIFF: no strip or tile size");
    uint8_t *buf = malloc((size_t)size);
    if (!buf) return stk_error_set(err, STK_IMG_E_NOMEM, "out of memory decoding TIFF");
    int rc = STK_OK;
    unsigned planes = sep ? (l->photometric == PHOTOMETRIC_RGB ? 3u : 1u) : 1u;
    for (uint32_t y0 = 0; y0 < l->h && rc == STK_OK; y0 += bh)
        for (uint32_t x0 = 0; x0 < l->w && rc == STK_OK; x0 += bw)
            for (unsigned pl = 0; pl < planes; pl++) {
                tmsize_t got =
                    tiled ? TIFFReadEncodedTile(t, TIFFComputeTile(t, x0, y0, 0, (uint16_t)pl), buf, size)
                          : TIFFReadEncodedStrip(t, TIFFComputeStrip(t, y0, (uint16_t)pl), buf, size);
                uint32_t cw = l->w - x0 < bw ? l->w - x0 : bw, ch = l->h - y0 < bh ? l->h - y0 : bh;
                size_t need = ((size_t)(ch - 1) * bw + cw) * (sep ? 1 : l->spp) * (l->bps / 8);
                if (got < 0 || (size_t)got < need) {
                    rc = stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt TIFF: %s",
                                       s->err[0] ? s->err : "a strip or tile does not decode");
                    break;
                }
                tiff_put(l, buf, bw, x0, y0, cw, ch, sep ? (int)pl : -1, pix);
            }
    free(buf);
    return rc;
}

static int tiff_run(TIFF *t, tiff_src *s, const stk__img_limits *lim, stk__img_buf *buf, stk__rgb_view *v,
                    uint32_t *ow, uint32_t *oh, stk_error *err)
{
    uint32_t w = 0, h = 0;
    if (!TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &w) || !TIFFGetField(t, TIFFTAG_IMAGELENGTH, &h) || !w || !h)
        return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt TIFF: no image size");
    *ow = w;
    *oh = h;
    int rc = stk__img_check(lim, w, h, err);
    if (rc != STK_OK) return rc;
    tiff_layout l = {w, h, 0, 0, 0, 0};
    uint8_t *pix;
    if (tiff_direct_ok(t, &l)) {
        if ((rc = stk__img_pixels(buf, 3 * (size_t)w * h, &pix, err)) != STK_OK) return rc;
        if ((rc = tiff_direct(t, s, &l, pix, err)) == STK_OK)
            *v = (stk__rgb_view){pix, w, h, 3 * (size_t)w, 0};
        return rc;
    }
    char why[1024] = "";
    if (!TIFFRGBAImageOK(t, why))
        return stk_error_set(err, STK_IMG_E_UNSUPPORTED, "unsupported TIFF: %s",
                             why[0] ? why : "unknown layout");
    size_t px = (size_t)w * h;
    if ((rc = stk__img_pixels(buf, 4 * px, &pix, err)) != STK_OK) return rc;
    uint32_t *raster = (uint32_t *)(void *)pix; /* the buffer is malloc'd: aligned for uint32_t */
    if (!TIFFReadRGBAImageOriented(t, w, h, raster, ORIENTATION_TOPLEFT, 1))
        return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt TIFF: %s",
                             s->err[0] ? s->err : "the image data does not decode");
    for (size_t i = 0; i < px; i++) { /* ABGR words to RGB bytes, in place (3 i <= 4 i) */
        uint32_t c = raster[i];
        pix[3 * i] = (uint8_t)TIFFGetR(c), pix[3 * i + 1] = (uint8_t)TIFFGetG(c),
                pix[3 * i + 2] = (uint8_t)TIFFGetB(c);
    }
    *v = (stk__rgb_view){pix, w, h, 3 * (size_t)w, 0};
    return STK_OK;
}

/* The first page: 8- and 16-bit grey and RGB read here (tiff_direct), every
 * other photometric interpretation, bit depth and layout libtiff reads
 * through its RGBA interface. Differences from Pillow there: CMYK is
 * converted by libtiff's formula (255 - c) * (255 - k) / 255, not Pillow's
 * 255 - min(255, c + k), and unassociated alpha comes out premultiplied. */
int stk__img_tiff_decode(const uint8_t *data, size_t len, const stk__img_limits *lim, stk__img_buf *buf,
                         stk__rgb_view *v, uint32_t *ow, uint32_t *oh, stk_error *err)
{
    tiff_src s = {data, len, 0, ""};
    TIFFOpenOptions *o = TIFFOpenOptionsAlloc();
    if (!o) return stk_error_set(err, STK_IMG_E_NOMEM, "out of memory decoding TIFF");
    TIFFOpenOptionsSetErrorHandlerExtR(o, tiff_error, &s);
    TIFFOpenOptionsSetWarningHandlerExtR(o, tiff_warning, &s);
    TIFF *t = TIFFClientOpenExt(TIFF_NAME, "rm", &s, tiff_read, tiff_write, tiff_seek, tiff_close, tiff_size,
                                tiff_map, tiff_unmap, o);
    TIFFOpenOptionsFree(o);
    if (!t)
        return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt TIFF: %s",
                             s.err[0] ? s.err : "the header does not read");
    int rc = tiff_run(t, &s, lim, buf, v, ow, oh, err);
    TIFFClose(t);
    return rc;
}
