/* tools/rawgen_formats.c - see rawgen_formats.h. */
#include "rawgen_formats.h"

#include <gif_lib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>
#include <webp/encode.h>

typedef struct {
    uint8_t *p;
    size_t len, cap, at; /* at: the TIFF writer's position */
} membuf;

static int put(membuf *m, const void *src, size_t n, size_t at)
{
    if (at + n > m->cap) {
        size_t cap = m->cap ? m->cap : 4096;
        while (cap < at + n) cap *= 2;
        uint8_t *q = realloc(m->p, cap);
        if (!q) return -1;
        memset(q + m->cap, 0, cap - m->cap);
        m->p = q;
        m->cap = cap;
    }
    memcpy(m->p + at, src, n);
    if (at + n > m->len) m->len = at + n;
    return 0;
}

uint8_t *rg_webp(const uint8_t *rgb, uint32_t w, uint32_t h, int q, size_t *len, char *msg, size_t cap)
{
    uint8_t *out = NULL;
    size_t n = WebPEncodeRGB(rgb, (int)w, (int)h, (int)(3 * w), (float)q, &out);
    uint8_t *copy = n ? malloc(n) : NULL;
    if (copy) memcpy(copy, out, n);
    WebPFree(out);
    if (!copy) snprintf(msg, cap, "WebP encoding failed");
    *len = n;
    return copy;
}

static int gif_write(GifFileType *g, const GifByteType *b, int n)
{
    membuf *m = g->UserData;
    return put(m, b, (size_t)n, m->len) ? 0 : n;
}

uint8_t *rg_gif(const uint8_t *rgb, uint32_t w, uint32_t h, size_t *len, char *msg, size_t cap)
{
    GifColorType pal[256];
    memset(pal, 0, sizeof pal);
    for (unsigned e = 0; e < 216; e++)
        pal[e] = (GifColorType){(GifByteType)(e / 36 * 51), (GifByteType)(e / 6 % 6 * 51),
                                (GifByteType)(e % 6 * 51)};
    membuf m = {0};
    int err = 0;
    GifFileType *g = EGifOpen(&m, gif_write, &err);
    ColorMapObject *cm = g ? GifMakeMapObject(256, pal) : NULL;
    GifByteType *line = malloc(w);
    int ok = g && cm && line && EGifPutScreenDesc(g, (int)w, (int)h, 8, 0, cm) == GIF_OK &&
             EGifPutImageDesc(g, 0, 0, (int)w, (int)h, true, NULL) == GIF_OK;
    static const uint32_t start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    for (int pass = 0; ok && pass < 4; pass++)
        for (uint32_t y = start[pass]; ok && y < h; y += step[pass]) {
            for (uint32_t x = 0; x < w; x++) {
                const uint8_t *p = rgb + 3 * ((size_t)y * w + x);
                line[x] = (GifByteType)((p[0] + 25) / 51 * 36 + (p[1] + 25) / 51 * 6 + (p[2] + 25) / 51);
            }
            ok = EGifPutLine(g, line, (int)w) == GIF_OK;
        }
    if (g && EGifCloseFile(g, &err) != GIF_OK) ok = 0;
    GifFreeMapObject(cm);
    free(line);
    if (!ok) {
        snprintf(msg, cap, "GIF encoding failed: %s", GifErrorString(err) ? GifErrorString(err) : "?");
        free(m.p);
        return NULL;
    }
    *len = m.len;
    return m.p;
}

static void le16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void le32(uint8_t *p, uint32_t v) { le16(p, v), le16(p + 2, v >> 16); }

uint8_t *rg_bmp(const uint8_t *rgb, uint32_t w, uint32_t h, size_t *len, char *msg, size_t cap)
{
    size_t stride = ((size_t)w * 3 + 3) & ~(size_t)3, n = 54 + stride * h;
    uint8_t *b = calloc(1, n);
    if (!b) {
        snprintf(msg, cap, "out of memory");
        return NULL;
    }
    b[0] = 'B', b[1] = 'M';
    le32(b + 2, (uint32_t)n), le32(b + 10, 54), le32(b + 14, 40), le32(b + 18, w), le32(b + 22, h);
    le16(b + 26, 1), le16(b + 28, 24), le32(b + 34, (uint32_t)(stride * h));
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *row = b + 54 + (size_t)(h - 1 - y) * stride;
        for (uint32_t x = 0; x < w; x++) {
            const uint8_t *p = rgb + 3 * ((size_t)y * w + x);
            row[3 * x] = p[2], row[3 * x + 1] = p[1], row[3 * x + 2] = p[0];
        }
    }
    *len = n;
    return b;
}

static tmsize_t t_read(thandle_t h, void *buf, tmsize_t n)
{
    membuf *m = h;
    size_t k = m->at < m->len ? m->len - m->at : 0;
    if ((size_t)n < k) k = (size_t)n;
    memcpy(buf, m->p + m->at, k);
    m->at += k;
    return (tmsize_t)k;
}

static tmsize_t t_write(thandle_t h, void *buf, tmsize_t n)
{
    membuf *m = h;
    if (put(m, buf, (size_t)n, m->at)) return -1;
    m->at += (size_t)n;
    return n;
}

static toff_t t_seek(thandle_t h, toff_t off, int whence)
{
    membuf *m = h;
    m->at = (size_t)((whence == SEEK_CUR ? m->at : whence == SEEK_END ? m->len : 0) + off);
    return m->at;
}

static int t_close(thandle_t h)
{
    (void)h;
    return 0;
}

static toff_t t_size(thandle_t h) { return ((membuf *)h)->len; }

static int t_map(thandle_t h, void **base, toff_t *size)
{
    (void)h, (void)base, (void)size;
    return 0;
}

static void t_unmap(thandle_t h, void *base, toff_t size) { (void)h, (void)base, (void)size; }

uint8_t *rg_tiff(const uint8_t *rgb, uint32_t w, uint32_t h, size_t *len, char *msg, size_t cap)
{
    membuf m = {0};
    TIFF *t = TIFFClientOpen("rawgen", "wm", &m, t_read, t_write, t_seek, t_close, t_size, t_map, t_unmap);
    int ok = t != NULL;
    if (ok) {
        TIFFSetField(t, TIFFTAG_IMAGEWIDTH, w);
        TIFFSetField(t, TIFFTAG_IMAGELENGTH, h);
        TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
        TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 3);
        TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_RGB);
        TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
        TIFFSetField(t, TIFFTAG_COMPRESSION, COMPRESSION_LZW);
        TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 16);
        for (uint32_t y = 0; ok && y < h; y++)
            ok = TIFFWriteScanline(t, (void *)(uintptr_t)(rgb + 3 * (size_t)y * w), y, 0) >= 0;
        ok = ok && TIFFWriteDirectory(t);
        TIFFClose(t);
    }
    if (!ok) {
        snprintf(msg, cap, "TIFF encoding failed");
        free(m.p);
        return NULL;
    }
    *len = m.len;
    return m.p;
}

uint8_t *rg_encode(rg_format fmt, const uint8_t *rgb, uint32_t w, uint32_t h, int q, size_t *len, char *msg,
                   size_t cap)
{
    switch (fmt) {
    case RG_WEBP:
        return rg_webp(rgb, w, h, q, len, msg, cap);
    case RG_GIF:
        return rg_gif(rgb, w, h, len, msg, cap);
    case RG_BMP:
        return rg_bmp(rgb, w, h, len, msg, cap);
    default:
        return rg_tiff(rgb, w, h, len, msg, cap);
    }
}
