/* image/formats/bmp.c - BMP, read here: no library needed for a format this simple.
 * formats.h says what every decoder here promises. */
#include "formats.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int stk__img_bmp_header_size_ok(uint32_t hs)
{
    return hs == 12 || hs == 40 || hs == 52 || hs == 56 || hs == 64 || hs == 108 || hs == 124;
}

/* The file and DIB headers, the masks and the palette, all bounds-checked. */
static int bmp_header(const uint8_t *d, size_t len, bmp_info *b, stk_error *err)
{
    if (len < 18)
        return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt BMP: the file ends inside its header");
    uint32_t hs = le32(d + 14);
    if (!stk__img_bmp_header_size_ok(hs))
        return stk_error_set(err, STK_IMG_E_UNSUPPORTED, "unsupported BMP: a %u-byte info header", hs);
    if (len < 14 + (size_t)hs)
        return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt BMP: the file ends inside its header");
    memset(b, 0, sizeof *b);
    int32_t h;
    if (hs == 12) { /* OS/2 1.x core header */
        b->w = le16(d + 18), h = (int32_t)le16(d + 20), b->bpp = le16(d + 24);
    } else {
        int32_t w = (int32_t)le32(d + 18);
        h = (int32_t)le32(d + 22);
        b->bpp = le16(d + 28), b->compression = le32(d + 30), b->ncolors = le32(d + 46);
        if (w <= 0 || h == INT32_MIN)
            return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt BMP: %d x %d pixels", w, h);
        b->w = (uint32_t)w;
    }
    b->top_down = h < 0;
    b->h = (uint32_t)(h < 0 ? -h : h);
    if (!b->w || !b->h)
        return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt BMP: an image of %ux%u", b->w, b->h);
    size_t at = 14 + hs; /* masks after a 40-byte header, then the palette */
    int fields = b->compression == BI_BITFIELDS || b->compression == BI_ALPHABITFIELDS;
    if (fields) {
        if (b->bpp != 16 && b->bpp != 32)
            return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt BMP: bit fields on %u-bit pixels", b->bpp);
        const uint8_t *m = hs >= 52 ? d + 54 : d + at;
        if (hs < 52) at += b->compression == BI_ALPHABITFIELDS ? 16 : 12;
        if (at > len)
            return stk_error_set(err, STK_IMG_E_CORRUPT,
                                 "corrupt BMP: the file ends inside its colour masks");
        for (int k = 0; k < 3; k++)
            if (!(b->mask[k] = le32(m + 4 * k)))
                return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt BMP: an empty colour mask");
    } else if (b->compression == BI_RLE8   ? b->bpp != 8
               : b->compression == BI_RLE4 ? b->bpp != 4
                                           : b->compression != BI_RGB) {
        return stk_error_set(err, STK_IMG_E_UNSUPPORTED, "unsupported BMP: compression %u with %u-bit pixels",
                             b->compression, b->bpp);
    }
    if (b->bpp != 1 && b->bpp != 4 && b->bpp != 8 && b->bpp != 16 && b->bpp != 24 && b->bpp != 32)
        return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt BMP: %u bits per pixel", b->bpp);
    if ((b->compression == BI_RLE8 || b->compression == BI_RLE4) && b->top_down)
        return stk_error_set(err, STK_IMG_E_CORRUPT,
                             "corrupt BMP: a top-down image cannot be run-length coded");
    if (b->bpp <= 8) {
        uint32_t max = 1u << b->bpp, n = b->ncolors ? b->ncolors : max, entry = hs == 12 ? 3 : 4;
        if (n > max) n = max; /* extra entries could never be indexed */
        if (at + (size_t)n * entry > len)
            return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt BMP: the file ends inside its palette");
        for (uint32_t i = 0; i < n; i++) {
            const uint8_t *e = d + at + (size_t)i * entry;
            b->pal[i][0] = e[2], b->pal[i][1] = e[1], b->pal[i][2] = e[0];
        }
        b->ncolors = n;
    }
    b->data_off = le32(d + 10);
    if (b->data_off > len)
        return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt BMP: pixel data at %zu, past the end",
                             b->data_off);
    return STK_OK;
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
static int bmp_rle(const bmp_info *b, const uint8_t *s, size_t n, uint8_t *idx, stk_error *err)
{
    size_t at = 0;
    uint32_t x = 0, y = 0; /* y counts rows from the bottom */
    int four = b->compression == BI_RLE4;
    memset(idx, 0, (size_t)b->w * b->h);
    while (y < b->h) {
        if (at + 2 > n)
            return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt BMP: the run-length data ends early");
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
                return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt BMP: the run-length data ends early");
            x += s[at], y += s[at + 1];
            at += 2;
        } else { /* v literal pixels, padded to 16 bits */
            size_t bytes = four ? (v + 1) / 2 : v;
            if (at + bytes > n)
                return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt BMP: the run-length data ends early");
            for (uint32_t i = 0; i < v && x < b->w && y < b->h; i++, x++) {
                uint8_t byte = s[at + (four ? i / 2 : i)];
                idx[(size_t)y * b->w + x] = (uint8_t)(four ? (i & 1 ? byte & 15 : byte >> 4) : byte);
            }
            at += (bytes + 1) & ~(size_t)1;
        }
    }
    return STK_OK;
}

/* Uncompressed 1/4/8/16/24/32-bit, bit fields, RLE8 and RLE4; OS/2 1.x and
 * Windows headers up to V5 (colour spaces and profiles ignored, alpha
 * dropped). Embedded JPEG or PNG (compression 4, 5) is unsupported. */
int stk__img_bmp_decode(const uint8_t *data, size_t len, const stk__img_limits *lim, stk__img_buf *buf,
                        stk__rgb_view *v, uint32_t *ow, uint32_t *oh, stk_error *err)
{
    bmp_info b;
    int rc = bmp_header(data, len, &b, err);
    if (rc != STK_OK) return rc;
    *ow = b.w;
    *oh = b.h;
    if ((rc = stk__img_check(lim, b.w, b.h, err)) != STK_OK) return rc;
    size_t out = 3 * (size_t)b.w, px = (size_t)b.w * b.h;
    int rle = b.compression == BI_RLE8 || b.compression == BI_RLE4;
    uint8_t *pix;
    /* RLE: the indices after the RGB rows, expanded in place afterwards */
    if ((rc = stk__img_pixels(buf, out * b.h + (rle ? px : 0), &pix, err)) != STK_OK) return rc;
    if (rle) {
        uint8_t *idx = pix + out * b.h;
        if ((rc = bmp_rle(&b, data + b.data_off, len - b.data_off, idx, err)) != STK_OK) return rc;
        for (uint32_t y = 0; y < b.h; y++)
            for (uint32_t x = 0; x < b.w; x++) {
                uint8_t i = idx[(size_t)(b.h - 1 - y) * b.w + x];
                memcpy(pix + y * out + 3 * (size_t)x, i < b.ncolors ? b.pal[i] : (const uint8_t[3]){0, 0, 0},
                       3);
            }
    } else {
        size_t stride = ((size_t)b.w * b.bpp + 31) / 32 * 4;
        if (b.h > (len - b.data_off) / stride)
            return stk_error_set(err, STK_IMG_E_CORRUPT,
                                 "corrupt BMP: %u rows of %zu bytes do not fit in the file (truncated?)", b.h,
                                 stride);
        for (uint32_t y = 0; y < b.h; y++)
            bmp_row(&b, data + b.data_off + (size_t)(b.top_down ? y : b.h - 1 - y) * stride, pix + y * out);
    }
    *v = (stk__rgb_view){pix, b.w, b.h, out, 0};
    return STK_OK;
}
