/* image/formats/sniff.c - which format a file's magic bytes say, and a
 * message for the formats people feed by mistake. */
#include "formats.h"

#include <stdio.h>
#include <string.h>

static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

stk__img_format stk__img_sniff(const uint8_t *data, size_t len)
{
    /* A prefix of a signature counts: a file cut inside its signature is a
     * truncated JPEG/PNG, which is worth saying. */
    if (len >= 2 && data[0] == 0xff && data[1] == 0xd8 && (len == 2 || data[2] == 0xff))
        return STK_IMG_FMT_JPEG;
    if (len >= 2 && memcmp(data, png_sig, len < 8 ? len : 8) == 0) return STK_IMG_FMT_PNG;
    if (len >= 12 && !memcmp(data, "RIFF", 4) && !memcmp(data + 8, "WEBP", 4)) return STK_IMG_FMT_WEBP;
    if (len >= 4 && !memcmp(data, "GIF8", 4)) return STK_IMG_FMT_GIF;
    /* "II*\0", "MM\0*", and BigTIFF's "II+\0", "MM\0+" */
    if (len >= 4 && ((!memcmp(data, "II", 2) && (data[2] == 42 || data[2] == 43) && data[3] == 0) ||
                     (!memcmp(data, "MM", 2) && data[2] == 0 && (data[3] == 42 || data[3] == 43))))
        return STK_IMG_FMT_TIFF;
    /* "BM" alone also starts text; a DIB header size it knows makes it a BMP
     * (a file cut before that is a truncated BMP, worth saying) */
    if (len >= 2 && !memcmp(data, "BM", 2)) {
        if (len < 18) return len >= 14 ? STK_IMG_FMT_BMP : STK_IMG_FMT_UNKNOWN;
        uint32_t hs = (uint32_t)data[14] | (uint32_t)data[15] << 8 | (uint32_t)data[16] << 16 |
                      (uint32_t)data[17] << 24;
        if (stk__img_bmp_header_size_ok(hs)) return STK_IMG_FMT_BMP;
    }
    return STK_IMG_FMT_UNKNOWN;
}

static int has(const uint8_t *d, size_t len, size_t at, const char *s)
{
    size_t n = strlen(s);
    return len >= at + n && memcmp(d + at, s, n) == 0;
}

/* A name for formats people feed by mistake; NULL when unrecognised. */
static const char *format_name(const uint8_t *d, size_t len)
{
    if (has(d, len, 0, "GIF8")) return "GIF";
    if (has(d, len, 0, "RIFF") && has(d, len, 8, "WEBP")) return "WebP";
    if (has(d, len, 0, "BM")) return "BMP";
    if (has(d, len, 0, "II*") || has(d, len, 0, "MM")) return "TIFF";
    if (has(d, len, 4, "ftypavif") || has(d, len, 4, "ftypavis")) return "AVIF";
    if (has(d, len, 4, "ftyp")) return "HEIF/MP4";
    if (has(d, len, 4, "jP  ") || (len >= 2 && d[0] == 0xff && d[1] == 0x4f)) return "JPEG 2000";
    if (has(d, len, 4, "JXL ") || (len >= 2 && d[0] == 0xff && d[1] == 0x0a)) return "JPEG XL";
    if (has(d, len, 0, "8BPS")) return "Photoshop";
    if (has(d, len, 0, "%PDF")) return "PDF";
    if (len >= 4 && d[0] == 0 && d[1] == 0 && d[2] == 1 && d[3] == 0) return "ICO";
    size_t n = len < 16 ? len : 16, printable = 0;
    for (size_t i = 0; i < n; i++)
        printable += (d[i] >= 0x20 && d[i] < 0x7f) || d[i] == '\n' || d[i] == '\r' || d[i] == '\t';
    return printable == n ? "text" : NULL;
}

int stk__img_unsupported(const uint8_t *data, size_t len, stk_error *err)
{
    char hex[16] = "";
    size_t n = len < 4 ? len : 4, at = 0;
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(hex + at, sizeof hex - at, "%s%02x", i ? " " : "", data[i]);
    const char *name = format_name(data, len);
    return stk_error_set(err, STK_IMG_E_UNSUPPORTED, "unsupported image format (starts with %s%s%s)", hex,
                         name ? ": " : "", name ? name : "");
}
