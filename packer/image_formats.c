/* packer/image_formats.c - the image formats besides JPEG and PNG that a
 * Pillow user's folders hold: WebP (libwebp), GIF (giflib), TIFF (libtiff)
 * and BMP (read here: no library needed for a format this simple).
 *
 * Each decodes a whole file in memory to RGB8 in the decoder's pixel buffer,
 * after the header has been checked against max_pixels, the way image.c
 * does JPEG and PNG. What Pillow's Image.open(f).convert("RGB") gives is the
 * reference: alpha dropped (not composited), palettes expanded, the first
 * frame of an animation, the first page of a multi-page TIFF. Where the
 * result differs from Pillow's, the function's comment says so. No library
 * state is global: giflib and libwebp keep none, and libtiff's error and
 * warning handlers are set per file (TIFFOpenOptions, libtiff 4.5). */
#include "image_internal.h"

#include <gif_lib.h>
#include <tiffio.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- WebP */

static int webp_fail(VP8StatusCode st, char *msg, size_t cap)
{
    switch (st) {
    case VP8_STATUS_OUT_OF_MEMORY:
        return pk__fail(msg, cap, PK_E_NOMEM, "out of memory decoding WebP");
    case VP8_STATUS_UNSUPPORTED_FEATURE:
        return pk__fail(msg, cap, PK_E_UNSUPPORTED, "unsupported WebP: a feature libwebp does not decode");
    case VP8_STATUS_NOT_ENOUGH_DATA:
        return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt WebP: the file ends early (truncated?)");
    default:
        return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt WebP: %s",
                        st == VP8_STATUS_BITSTREAM_ERROR ? "the image data does not decode"
                                                         : "invalid headers");
    }
}

/* An animated WebP: its first frame on the canvas, as Pillow shows it. */
static int webp_first_frame(const uint8_t *data, size_t len, uint8_t *pix, uint32_t w, uint32_t h, char *msg,
                            size_t cap)
{
    WebPAnimDecoderOptions o;
    if (!WebPAnimDecoderOptionsInit(&o)) return pk__fail(msg, cap, PK_E_UNSUPPORTED, "unsupported WebP");
    o.color_mode = MODE_RGBA;
    o.use_threads = 0;
    const WebPData wd = {data, len};
    WebPAnimDecoder *ad = WebPAnimDecoderNew(&wd, &o);
    if (!ad) return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt WebP: the animation does not decode");
    uint8_t *rgba = NULL;
    int ts = 0, rc = PK_OK;
    WebPAnimInfo info;
    if (!WebPAnimDecoderGetInfo(ad, &info) || info.canvas_width != w || info.canvas_height != h ||
        !WebPAnimDecoderGetNext(ad, &rgba, &ts)) {
        rc = pk__fail(msg, cap, PK_E_CORRUPT, "corrupt WebP: the first frame does not decode");
    } else {
        for (size_t i = 0, n = (size_t)w * h; i < n; i++) memcpy(pix + 3 * i, rgba + 4 * i, 3);
    }
    WebPAnimDecoderDelete(ad);
    return rc;
}

int pk__webp_decode(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, stk__rgb_view *v,
                    uint32_t *ow, uint32_t *oh, char *msg, size_t cap)
{
    WebPBitstreamFeatures f;
    VP8StatusCode st = WebPGetFeatures(data, len, &f);
    if (st != VP8_STATUS_OK) return webp_fail(st, msg, cap);
    if (f.width <= 0 || f.height <= 0) return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt WebP: no image size");
    uint32_t w = (uint32_t)f.width, h = (uint32_t)f.height;
    *ow = w;
    *oh = h;
    uint8_t *pix;
    size_t stride = 3 * (size_t)w;
    int rc = pk__check_pixels(w, h, p, msg, cap);
    if (rc == PK_OK) rc = pk__pixels(d, stride * h, &pix, msg, cap);
    if (rc != PK_OK) return rc;
    if (f.has_animation) {
        rc = webp_first_frame(data, len, pix, w, h, msg, cap);
    } else {
        WebPDecoderConfig c;
        if (!WebPInitDecoderConfig(&c)) return pk__fail(msg, cap, PK_E_UNSUPPORTED, "unsupported WebP");
        c.output.colorspace = MODE_RGB; /* alpha dropped, not premultiplied */
        c.output.is_external_memory = 1;
        c.output.u.RGBA.rgba = pix;
        c.output.u.RGBA.stride = (int)stride;
        c.output.u.RGBA.size = stride * h;
        st = WebPDecode(data, len, &c);
        WebPFreeDecBuffer(&c.output);
        if (st != VP8_STATUS_OK) rc = webp_fail(st, msg, cap);
    }
    if (rc == PK_OK) *v = (stk__rgb_view){pix, w, h, stride, 0};
    return rc;
}

/* ------------------------------------------------------------------ GIF */

typedef struct {
    const uint8_t *p;
    size_t len, at;
} gif_src;

static int gif_read(GifFileType *g, GifByteType *buf, int n)
{
    gif_src *s = g->UserData;
    size_t k = s->len - s->at < (size_t)n ? s->len - s->at : (size_t)n;
    memcpy(buf, s->p + s->at, k);
    s->at += k;
    return (int)k;
}

static int gif_fail(int err, char *msg, size_t cap)
{
    if (err == D_GIF_ERR_NOT_ENOUGH_MEM) return pk__fail(msg, cap, PK_E_NOMEM, "out of memory decoding GIF");
    if (err == D_GIF_ERR_READ_FAILED) /* giflib: "Failed to read from given file" */
        return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt GIF: the file ends early (truncated?)");
    const char *why = GifErrorString(err);
    return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt GIF: %s", why ? why : "unknown error");
}

/* The first image's rows into the canvas (rows past the canvas dropped),
 * colours from its own colour map or the global one. */
static int gif_frame(GifFileType *g, uint8_t *pix, const pk_params *p, char *msg, size_t cap)
{
    const GifImageDesc *im = &g->Image;
    const ColorMapObject *cm = im->ColorMap ? im->ColorMap : g->SColorMap;
    if (!cm) return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt GIF: the first image has no colour map");
    if (im->Width <= 0 || im->Height <= 0 || im->Left < 0 || im->Top < 0)
        return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt GIF: the first image is %dx%d at (%d, %d)",
                        im->Width, im->Height, im->Left, im->Top);
    /* the frame's own size bounds the work, whatever the canvas says */
    int rc = pk__check_pixels((uint32_t)im->Width, (uint32_t)im->Height, p, msg, cap);
    if (rc != PK_OK) return rc;
    GifByteType *line = malloc((size_t)im->Width);
    if (!line) return pk__fail(msg, cap, PK_E_NOMEM, "out of memory decoding GIF");
    static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    for (int pass = 0, npass = im->Interlace ? 4 : 1; pass < npass && rc == PK_OK; pass++)
        for (int y = im->Interlace ? start[pass] : 0; y < im->Height; y += im->Interlace ? step[pass] : 1) {
            if (DGifGetLine(g, line, im->Width) == GIF_ERROR) {
                rc = gif_fail(g->Error, msg, cap);
                break;
            }
            uint32_t cy = (uint32_t)(im->Top + y);
            if (cy >= (uint32_t)g->SHeight) continue;
            for (int x = 0; x < im->Width && (uint32_t)(im->Left + x) < (uint32_t)g->SWidth; x++) {
                uint8_t *o = pix + 3 * ((size_t)cy * (size_t)g->SWidth + (size_t)(im->Left + x));
                const GifColorType *c = line[x] < cm->ColorCount ? &cm->Colors[line[x]] : NULL;
                o[0] = c ? c->Red : 0, o[1] = c ? c->Green : 0, o[2] = c ? c->Blue : 0;
            }
        }
    free(line);
    return rc;
}

/* The first frame. Canvas outside it: the background colour of the global
 * colour map (black without one). Transparency is ignored, as Pillow's
 * convert("RGB") of a palette image does. */
static int gif_run(GifFileType *g, pk_decoder *d, const pk_params *p, stk__rgb_view *v, uint32_t *ow,
                   uint32_t *oh, char *msg, size_t cap)
{
    if (g->SWidth <= 0 || g->SHeight <= 0)
        return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt GIF: canvas %dx%d", g->SWidth, g->SHeight);
    uint32_t w = (uint32_t)g->SWidth, h = (uint32_t)g->SHeight;
    *ow = w;
    *oh = h;
    uint8_t *pix;
    int rc = pk__check_pixels(w, h, p, msg, cap);
    if (rc == PK_OK) rc = pk__pixels(d, 3 * (size_t)w * h, &pix, msg, cap);
    if (rc != PK_OK) return rc;
    uint8_t bg[3] = {0, 0, 0};
    if (g->SColorMap && g->SBackGroundColor >= 0 && g->SBackGroundColor < g->SColorMap->ColorCount) {
        const GifColorType *c = &g->SColorMap->Colors[g->SBackGroundColor];
        bg[0] = c->Red, bg[1] = c->Green, bg[2] = c->Blue;
    }
    for (size_t i = 0, n = (size_t)w * h; i < n; i++) memcpy(pix + 3 * i, bg, 3);
    for (;;) {
        GifRecordType t;
        if (DGifGetRecordType(g, &t) == GIF_ERROR) return gif_fail(g->Error, msg, cap);
        if (t == TERMINATE_RECORD_TYPE)
            return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt GIF: no image in the file");
        if (t == EXTENSION_RECORD_TYPE) { /* comments, loop counts, frame timing: skipped */
            int code;
            GifByteType *ext = NULL;
            if (DGifGetExtension(g, &code, &ext) == GIF_ERROR) return gif_fail(g->Error, msg, cap);
            while (ext)
                if (DGifGetExtensionNext(g, &ext) == GIF_ERROR) return gif_fail(g->Error, msg, cap);
        } else if (t == IMAGE_DESC_RECORD_TYPE) {
            if (DGifGetImageDesc(g) == GIF_ERROR) return gif_fail(g->Error, msg, cap);
            if ((rc = gif_frame(g, pix, p, msg, cap)) != PK_OK) return rc;
            *v = (stk__rgb_view){pix, w, h, 3 * (size_t)w, 0};
            return PK_OK;
        }
    }
}

int pk__gif_decode(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, stk__rgb_view *v,
                   uint32_t *ow, uint32_t *oh, char *msg, size_t cap)
{
    gif_src src = {data, len, 0};
    int err = 0;
    GifFileType *g = DGifOpen(&src, gif_read, &err);
    if (!g) return gif_fail(err, msg, cap);
    int rc = gif_run(g, d, p, v, ow, oh, msg, cap);
    DGifCloseFile(g, &err);
    return rc;
}

/* ------------------------------------------------------------------ BMP */

enum { BI_RGB = 0, BI_RLE8 = 1, BI_RLE4 = 2, BI_BITFIELDS = 3, BI_ALPHABITFIELDS = 6 };

typedef struct {
    uint32_t w, h, bpp, compression, ncolors;
    int top_down;
    uint32_t mask[3];    /* bitfields: red, green, blue */
    uint8_t pal[256][3]; /* RGB */
    size_t data_off;
} bmp_info;

static uint32_t le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const uint8_t *p) { return le16(p) | le16(p + 2) << 16; }

int pk__bmp_header_size_ok(uint32_t hs)
{
    return hs == 12 || hs == 40 || hs == 52 || hs == 56 || hs == 64 || hs == 108 || hs == 124;
}

/* The file and DIB headers, the masks and the palette, all bounds-checked. */
static int bmp_header(const uint8_t *d, size_t len, bmp_info *b, char *msg, size_t cap)
{
    if (len < 18) return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt BMP: the file ends inside its header");
    uint32_t hs = le32(d + 14);
    if (!pk__bmp_header_size_ok(hs))
        return pk__fail(msg, cap, PK_E_UNSUPPORTED, "unsupported BMP: a %u-byte info header", hs);
    if (len < 14 + (size_t)hs)
        return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt BMP: the file ends inside its header");
    memset(b, 0, sizeof *b);
    int32_t h;
    if (hs == 12) { /* OS/2 1.x core header */
        b->w = le16(d + 18), h = (int32_t)le16(d + 20), b->bpp = le16(d + 24);
    } else {
        int32_t w = (int32_t)le32(d + 18);
        h = (int32_t)le32(d + 22);
        b->bpp = le16(d + 28), b->compression = le32(d + 30), b->ncolors = le32(d + 46);
        if (w <= 0 || h == INT32_MIN)
            return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt BMP: %d x %d pixels", w, h);
        b->w = (uint32_t)w;
    }
    b->top_down = h < 0;
    b->h = (uint32_t)(h < 0 ? -h : h);
    if (!b->w || !b->h) return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt BMP: an image of %ux%u", b->w, b->h);
    size_t at = 14 + hs; /* masks after a 40-byte header, then the palette */
    int fields = b->compression == BI_BITFIELDS || b->compression == BI_ALPHABITFIELDS;
    if (fields) {
        if (b->bpp != 16 && b->bpp != 32)
            return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt BMP: bit fields on %u-bit pixels", b->bpp);
        const uint8_t *m = hs >= 52 ? d + 54 : d + at;
        if (hs < 52) at += b->compression == BI_ALPHABITFIELDS ? 16 : 12;
        if (at > len)
            return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt BMP: the file ends inside its colour masks");
        for (int k = 0; k < 3; k++)
            if (!(b->mask[k] = le32(m + 4 * k)))
                return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt BMP: an empty colour mask");
    } else if (b->compression == BI_RLE8   ? b->bpp != 8
               : b->compression == BI_RLE4 ? b->bpp != 4
                                           : b->compression != BI_RGB) {
        return pk__fail(msg, cap, PK_E_UNSUPPORTED, "unsupported BMP: compression %u with %u-bit pixels",
                        b->compression, b->bpp);
    }
    if (b->bpp != 1 && b->bpp != 4 && b->bpp != 8 && b->bpp != 16 && b->bpp != 24 && b->bpp != 32)
        return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt BMP: %u bits per pixel", b->bpp);
    if ((b->compression == BI_RLE8 || b->compression == BI_RLE4) && b->top_down)
        return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt BMP: a top-down image cannot be run-length coded");
    if (b->bpp <= 8) {
        uint32_t max = 1u << b->bpp, n = b->ncolors ? b->ncolors : max, entry = hs == 12 ? 3 : 4;
        if (n > max) n = max; /* extra entries could never be indexed */
        if (at + (size_t)n * entry > len)
            return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt BMP: the file ends inside its palette");
        for (uint32_t i = 0; i < n; i++) {
            const uint8_t *e = d + at + (size_t)i * entry;
            b->pal[i][0] = e[2], b->pal[i][1] = e[1], b->pal[i][2] = e[0];
        }
        b->ncolors = n;
    }
    b->data_off = le32(d + 10);
    if (b->data_off > len)
        return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt BMP: pixel data at %zu, past the end", b->data_off);
    return PK_OK;
}

/* One bit-field channel scaled to 8 bits as Pillow does (v * 255 / max). */
static uint8_t bmp_field(uint32_t px, uint32_t mask)
{
    unsigned shift = 0;
    while (!((mask >> shift) & 1)) shift++;
    uint32_t max = mask >> shift;
    return (uint8_t)((uint64_t)((px & mask) >> shift) * 255 / max);
}

static void bmp_row(const bmp_info *b, const uint8_t *src, uint8_t *o)
{
    for (uint32_t x = 0; x < b->w; x++, o += 3) {
        if (b->bpp <= 8) {
            uint32_t per = 8 / b->bpp, bit = 8 - b->bpp * (1 + x % per);
            uint32_t i = (src[x / per] >> bit) & ((1u << b->bpp) - 1);
            memcpy(o, i < b->ncolors ? b->pal[i] : (const uint8_t[3]){0, 0, 0}, 3);
        } else if (b->bpp == 24) {
            o[0] = src[3 * x + 2], o[1] = src[3 * x + 1], o[2] = src[3 * x];
        } else {
            uint32_t px = b->bpp == 16 ? le16(src + 2 * x) : le32(src + 4 * x);
            if (b->compression == BI_RGB && b->bpp == 16) { /* 5-5-5 */
                o[0] = bmp_field(px, 0x7c00), o[1] = bmp_field(px, 0x03e0), o[2] = bmp_field(px, 0x001f);
            } else if (b->compression == BI_RGB) { /* BGRX */
                o[0] = src[4 * x + 2], o[1] = src[4 * x + 1], o[2] = src[4 * x];
            } else {
                for (int k = 0; k < 3; k++) o[k] = bmp_field(px, b->mask[k]);
            }
        }
    }
}

/* RLE8 / RLE4 into indices (0 where the runs leave pixels out, as Pillow's
 * decoder leaves them), bottom-up rows. */
static int bmp_rle(const bmp_info *b, const uint8_t *s, size_t n, uint8_t *idx, char *msg, size_t cap)
{
    size_t at = 0;
    uint32_t x = 0, y = 0; /* y counts rows from the bottom */
    int four = b->compression == BI_RLE4;
    memset(idx, 0, (size_t)b->w * b->h);
    while (y < b->h) {
        if (at + 2 > n)
            return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt BMP: the run-length data ends early");
        uint32_t c = s[at], v = s[at + 1];
        at += 2;
        if (c) { /* a run of c pixels */
            for (uint32_t i = 0; i < c && x < b->w; i++, x++)
                idx[(size_t)y * b->w + x] = (uint8_t)(four ? (i & 1 ? v & 15 : v >> 4) : v);
        } else if (v == 0) { /* end of line */
            x = 0, y++;
        } else if (v == 1) { /* end of bitmap */
            break;
        } else if (v == 2) { /* delta */
            if (at + 2 > n)
                return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt BMP: the run-length data ends early");
            x += s[at], y += s[at + 1];
            at += 2;
        } else { /* v literal pixels, padded to 16 bits */
            size_t bytes = four ? (v + 1) / 2 : v;
            if (at + bytes > n)
                return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt BMP: the run-length data ends early");
            for (uint32_t i = 0; i < v && x < b->w && y < b->h; i++, x++) {
                uint8_t byte = s[at + (four ? i / 2 : i)];
                idx[(size_t)y * b->w + x] = (uint8_t)(four ? (i & 1 ? byte & 15 : byte >> 4) : byte);
            }
            at += (bytes + 1) & ~(size_t)1;
        }
    }
    return PK_OK;
}

/* Uncompressed 1/4/8/16/24/32-bit, bit fields, RLE8 and RLE4; OS/2 1.x and
 * Windows headers up to V5 (colour spaces and profiles ignored, alpha
 * dropped). Embedded JPEG or PNG (compression 4, 5) is unsupported. */
int pk__bmp_decode(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, stk__rgb_view *v,
                   uint32_t *ow, uint32_t *oh, char *msg, size_t cap)
{
    bmp_info b;
    int rc = bmp_header(data, len, &b, msg, cap);
    if (rc != PK_OK) return rc;
    *ow = b.w;
    *oh = b.h;
    if ((rc = pk__check_pixels(b.w, b.h, p, msg, cap)) != PK_OK) return rc;
    size_t out = 3 * (size_t)b.w, px = (size_t)b.w * b.h;
    int rle = b.compression == BI_RLE8 || b.compression == BI_RLE4;
    uint8_t *pix;
    /* RLE: the indices after the RGB rows, expanded in place afterwards */
    if ((rc = pk__pixels(d, out * b.h + (rle ? px : 0), &pix, msg, cap)) != PK_OK) return rc;
    if (rle) {
        uint8_t *idx = pix + out * b.h;
        if ((rc = bmp_rle(&b, data + b.data_off, len - b.data_off, idx, msg, cap)) != PK_OK) return rc;
        for (uint32_t y = 0; y < b.h; y++)
            for (uint32_t x = 0; x < b.w; x++) {
                uint8_t i = idx[(size_t)(b.h - 1 - y) * b.w + x];
                memcpy(pix + y * out + 3 * (size_t)x, i < b.ncolors ? b.pal[i] : (const uint8_t[3]){0, 0, 0},
                       3);
            }
    } else {
        size_t stride = ((size_t)b.w * b.bpp + 31) / 32 * 4;
        if (b.h > (len - b.data_off) / stride)
            return pk__fail(msg, cap, PK_E_CORRUPT,
                            "corrupt BMP: %u rows of %zu bytes do not fit in the file (truncated?)", b.h,
                            stride);
        for (uint32_t y = 0; y < b.h; y++)
            bmp_row(&b, data + b.data_off + (size_t)(b.top_down ? y : b.h - 1 - y) * stride, pix + y * out);
    }
    *v = (stk__rgb_view){pix, b.w, b.h, out, 0};
    return PK_OK;
}

/* ----------------------------------------------------------------- TIFF */

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

static int tiff_direct(TIFF *t, tiff_src *s, const tiff_layout *l, uint8_t *pix, char *msg, size_t cap)
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
        return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt TIFF: no strip or tile size");
    uint8_t *buf = malloc((size_t)size);
    if (!buf) return pk__fail(msg, cap, PK_E_NOMEM, "out of memory decoding TIFF");
    int rc = PK_OK;
    unsigned planes = sep ? (l->photometric == PHOTOMETRIC_RGB ? 3u : 1u) : 1u;
    for (uint32_t y0 = 0; y0 < l->h && rc == PK_OK; y0 += bh)
        for (uint32_t x0 = 0; x0 < l->w && rc == PK_OK; x0 += bw)
            for (unsigned pl = 0; pl < planes; pl++) {
                tmsize_t got =
                    tiled ? TIFFReadEncodedTile(t, TIFFComputeTile(t, x0, y0, 0, (uint16_t)pl), buf, size)
                          : TIFFReadEncodedStrip(t, TIFFComputeStrip(t, y0, (uint16_t)pl), buf, size);
                uint32_t cw = l->w - x0 < bw ? l->w - x0 : bw, ch = l->h - y0 < bh ? l->h - y0 : bh;
                size_t need = ((size_t)(ch - 1) * bw + cw) * (sep ? 1 : l->spp) * (l->bps / 8);
                if (got < 0 || (size_t)got < need) {
                    rc = pk__fail(msg, cap, PK_E_CORRUPT, "corrupt TIFF: %s",
                                  s->err[0] ? s->err : "a strip or tile does not decode");
                    break;
                }
                tiff_put(l, buf, bw, x0, y0, cw, ch, sep ? (int)pl : -1, pix);
            }
    free(buf);
    return rc;
}

static int tiff_run(TIFF *t, tiff_src *s, pk_decoder *d, const pk_params *p, stk__rgb_view *v, uint32_t *ow,
                    uint32_t *oh, char *msg, size_t cap)
{
    uint32_t w = 0, h = 0;
    if (!TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &w) || !TIFFGetField(t, TIFFTAG_IMAGELENGTH, &h) || !w || !h)
        return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt TIFF: no image size");
    *ow = w;
    *oh = h;
    int rc = pk__check_pixels(w, h, p, msg, cap);
    if (rc != PK_OK) return rc;
    tiff_layout l = {w, h, 0, 0, 0, 0};
    uint8_t *pix;
    if (tiff_direct_ok(t, &l)) {
        if ((rc = pk__pixels(d, 3 * (size_t)w * h, &pix, msg, cap)) != PK_OK) return rc;
        if ((rc = tiff_direct(t, s, &l, pix, msg, cap)) == PK_OK)
            *v = (stk__rgb_view){pix, w, h, 3 * (size_t)w, 0};
        return rc;
    }
    char why[1024] = "";
    if (!TIFFRGBAImageOK(t, why))
        return pk__fail(msg, cap, PK_E_UNSUPPORTED, "unsupported TIFF: %s", why[0] ? why : "unknown layout");
    size_t px = (size_t)w * h;
    if ((rc = pk__pixels(d, 4 * px, &pix, msg, cap)) != PK_OK) return rc;
    uint32_t *raster = (uint32_t *)(void *)pix; /* the buffer is malloc'd: aligned for uint32_t */
    if (!TIFFReadRGBAImageOriented(t, w, h, raster, ORIENTATION_TOPLEFT, 1))
        return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt TIFF: %s",
                        s->err[0] ? s->err : "the image data does not decode");
    for (size_t i = 0; i < px; i++) { /* ABGR words to RGB bytes, in place (3 i <= 4 i) */
        uint32_t c = raster[i];
        pix[3 * i] = (uint8_t)TIFFGetR(c), pix[3 * i + 1] = (uint8_t)TIFFGetG(c),
                pix[3 * i + 2] = (uint8_t)TIFFGetB(c);
    }
    *v = (stk__rgb_view){pix, w, h, 3 * (size_t)w, 0};
    return PK_OK;
}

/* The first page: 8- and 16-bit grey and RGB read here (tiff_direct), every
 * other photometric interpretation, bit depth and layout libtiff reads
 * through its RGBA interface. Differences from Pillow there: CMYK is
 * converted by libtiff's formula (255 - c) * (255 - k) / 255, not Pillow's
 * 255 - min(255, c + k), and unassociated alpha comes out premultiplied. */
int pk__tiff_decode(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, stk__rgb_view *v,
                    uint32_t *ow, uint32_t *oh, char *msg, size_t cap)
{
    tiff_src s = {data, len, 0, ""};
    TIFFOpenOptions *o = TIFFOpenOptionsAlloc();
    if (!o) return pk__fail(msg, cap, PK_E_NOMEM, "out of memory decoding TIFF");
    TIFFOpenOptionsSetErrorHandlerExtR(o, tiff_error, &s);
    TIFFOpenOptionsSetWarningHandlerExtR(o, tiff_warning, &s);
    TIFF *t = TIFFClientOpenExt(TIFF_NAME, "rm", &s, tiff_read, tiff_write, tiff_seek, tiff_close, tiff_size,
                                tiff_map, tiff_unmap, o);
    TIFFOpenOptionsFree(o);
    if (!t)
        return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt TIFF: %s",
                        s.err[0] ? s.err : "the header does not read");
    int rc = tiff_run(t, &s, d, p, v, ow, oh, msg, cap);
    TIFFClose(t);
    return rc;
}
