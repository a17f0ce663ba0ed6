/* packer/image.c - one image file in, one size x size RGB tensor out.
 *
 * Order of work, so that hostile files cost little: sniff the magic bytes,
 * read the header only, refuse over max_pixels, and only then allocate and
 * decode. Decoded pixels go to a buffer kept in the decoder and reused.
 */
#include "image_internal.h"

#include <spng.h>
#include <turbojpeg.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* TurboJPEG flags for every decode.
 *   accurate IDCT (the default when decompressing; TJFLAG_FASTDCT not set):
 *     it is what Pillow decodes with, so an unscaled decode is bit-identical
 *     to Pillow's. TJFLAG_FASTDCT measured only about 2% faster here (the
 *     SIMD islow IDCT is nearly as fast as ifast) and is less accurate at
 *     high quality. It makes no difference to a DCT-scaled decode, whose
 *     reduced IDCTs do not depend on the method.
 *   fancy upsampling (TJFLAG_FASTUPSAMPLE not set): chroma is interpolated
 *     as Pillow does; nearest-neighbour chroma costs visible quality at edges.
 *   TJFLAG_STOPONWARNING: any warning (truncated data, corrupt entropy data)
 *     fails the image anyway, so stop at once rather than decode the rest.
 *   TJFLAG_LIMITSCANS: refuse progressive files with absurd numbers of scans
 *     (a CPU-exhaustion attack on progressive decoding). */
#define PK_TJ_FLAGS (TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS)

/* Memory libspng may keep for ancillary chunks (text, ICC profiles): their
 * compressed forms can expand like any zip bomb. */
#define PK_PNG_CACHE_LIMIT (16u << 20)

/* A scratch buffer over this size is given back when a much smaller image
 * follows: one huge image should not pin its memory for a whole run. */
#define PK_KEEP_BYTES ((size_t)64 << 20)

struct pk_decoder {
    tjhandle tj;
    unsigned scales; /* bit k set: TurboJPEG offers scaling by 1/2^k (k = 1..3) */
    uint8_t *pix;    /* decoded pixels */
    size_t cap;
    stk__resizer *rs;
};

/* What a decode leaves for render(): RGB pixels, or a JPEG's planes. */
typedef struct {
    bool planar;
    stk__rgb_view rgb;
    stk__ycc_view ycc;
} decoded;

/* ------------------------------------------------------------- plumbing */

int pk__fail(char *msg, size_t cap, int code, const char *fmt, ...)
{
    if (msg && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, cap, fmt, ap);
        va_end(ap);
    }
    return code;
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
    d->tj = tjInitDecompress();
    d->rs = stk__resizer_new();
    if (!d->tj || !d->rs) {
        pk_decoder_free(d);
        return NULL;
    }
    int n = 0;
    const tjscalingfactor *sf = tjGetScalingFactors(&n);
    for (int i = 0; sf && i < n; i++)
        for (unsigned k = 1; k <= 3; k++)
            if (sf[i].num == 1 && sf[i].denom == 1 << k) d->scales |= 1u << k;
    return d;
}

void pk_decoder_free(pk_decoder *d)
{
    if (!d) return;
    if (d->tj) tjDestroy(d->tj);
    stk__resizer_free(d->rs);
    free(d->pix);
    free(d);
}

/* Room for n bytes of pixels; old contents are not kept. */
static int grow(pk_decoder *d, size_t n, char *msg, size_t cap)
{
    if (n <= d->cap && !(d->cap > PK_KEEP_BYTES && n < d->cap / 4)) return PK_OK;
    free(d->pix);
    d->cap = 0;
    if (!(d->pix = malloc(n ? n : 1)))
        return pk__fail(msg, cap, PK_E_NOMEM, "out of memory (%zu bytes for the decoded image)", n);
    d->cap = n;
    return PK_OK;
}

/* ------------------------------------------------------------- sniffing */

static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

pk_format pk_sniff(const uint8_t *data, size_t len)
{
    /* A prefix of a signature counts: a file cut inside its signature is a
     * truncated JPEG/PNG, which is worth saying. */
    if (len >= 2 && data[0] == 0xff && data[1] == 0xd8 && (len == 2 || data[2] == 0xff)) return PK_FMT_JPEG;
    if (len >= 2 && memcmp(data, png_sig, len < 8 ? len : 8) == 0) return PK_FMT_PNG;
    if (len >= 12 && !memcmp(data, "RIFF", 4) && !memcmp(data + 8, "WEBP", 4)) return PK_FMT_WEBP;
    if (len >= 4 && !memcmp(data, "GIF8", 4)) return PK_FMT_GIF;
    /* "II*\0", "MM\0*", and BigTIFF's "II+\0", "MM\0+" */
    if (len >= 4 && ((!memcmp(data, "II", 2) && (data[2] == 42 || data[2] == 43) && data[3] == 0) ||
                     (!memcmp(data, "MM", 2) && data[2] == 0 && (data[3] == 42 || data[3] == 43))))
        return PK_FMT_TIFF;
    /* "BM" alone also starts text; a DIB header size it knows makes it a BMP
     * (a file cut before that is a truncated BMP, worth saying) */
    if (len >= 2 && !memcmp(data, "BM", 2)) {
        if (len < 18) return len >= 14 ? PK_FMT_BMP : PK_FMT_UNKNOWN;
        uint32_t hs = (uint32_t)data[14] | (uint32_t)data[15] << 8 | (uint32_t)data[16] << 16 |
                      (uint32_t)data[17] << 24;
        if (pk__bmp_header_size_ok(hs)) return PK_FMT_BMP;
    }
    return PK_FMT_UNKNOWN;
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

static int unsupported(const uint8_t *data, size_t len, char *msg, size_t cap)
{
    char hex[16] = "";
    size_t n = len < 4 ? len : 4, at = 0;
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(hex + at, sizeof hex - at, "%s%02x", i ? " " : "", data[i]);
    const char *name = format_name(data, len);
    return pk__fail(msg, cap, PK_E_UNSUPPORTED, "unsupported image format (starts with %s%s%s)", hex,
                    name ? ": " : "", name ? name : "");
}

/* ------------------------------------------------------------- geometry */

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }
static uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }

/* torchvision CenterCrop: int(round(d / 2.0)), Python rounding half to even. */
static uint64_t centre_offset(uint64_t d)
{
    uint64_t k = d / 2;
    return (d % 2 && k % 2) ? k + 1 : k;
}

void pk_layout_compute(const pk_params *p, uint32_t src_w, uint32_t src_h, pk_layout *l)
{
    uint32_t n = p->size, lo = min_u32(src_w, src_h), hi = max_u32(src_w, src_h);
    memset(l, 0, sizeof *l);
    l->w = l->h = n;
    if (p->mode == PK_RESIZE_STRETCH) {
        l->resized_w = l->resized_h = n;
    } else if (p->mode == PK_RESIZE_KEEP) {
        uint64_t s = lo, g = hi; /* the shorter and longer output sides */
        if (p->min_side) {
            s = p->min_side;
            g = (uint64_t)((double)((uint64_t)p->min_side * hi) / (double)lo);
        }
        if (g > p->max_side) { /* torchvision: int(max_size * short / long); integers are exact here */
            s = s * p->max_side / g;
            g = p->max_side;
        }
        s = s ? s : 1;
        l->w = (uint32_t)(l->resized_w = src_w >= src_h ? g : s);
        l->h = (uint32_t)(l->resized_h = src_w >= src_h ? s : g);
    } else if (p->mode == PK_RESIZE_FIT) {
        /* floor(n * lo / hi + 1/2) in integers */
        uint32_t s = (uint32_t)((2 * (uint64_t)n * lo + hi) / (2 * (uint64_t)hi));
        s = s ? s : 1;
        l->w = (uint32_t)(l->resized_w = src_w >= src_h ? n : s);
        l->h = (uint32_t)(l->resized_h = src_w >= src_h ? s : n);
        l->pad_x = (n - l->w) / 2;
        l->pad_y = (n - l->h) / 2;
    } else {
        /* torchvision: int(size * long / short). n * hi is exact in a double,
         * and one IEEE division rounds as Python's true division does. */
        uint64_t len = (uint64_t)((double)((uint64_t)n * hi) / (double)lo);
        l->resized_w = src_w <= src_h ? n : len;
        l->resized_h = src_w <= src_h ? len : n;
        l->crop_x = centre_offset(l->resized_w - n);
        l->crop_y = centre_offset(l->resized_h - n);
    }
}

int pk__pixels(pk_decoder *d, size_t n, uint8_t **pix, char *msg, size_t cap)
{
    int rc = grow(d, n, msg, cap);
    *pix = rc == PK_OK ? d->pix : NULL;
    return rc;
}

/* Refuse from the header, before any pixel memory exists. */
int pk__check_pixels(uint32_t w, uint32_t h, const pk_params *p, char *msg, size_t cap)
{
    uint64_t px = (uint64_t)w * h;
    if (p->max_pixels && px > p->max_pixels)
        return pk__fail(msg, cap, PK_E_TOO_LARGE, "image is %ux%u = %llu pixels, over --max-pixels %llu", w,
                        h, (unsigned long long)px, (unsigned long long)p->max_pixels);
    if (px > SIZE_MAX / 8)
        return pk__fail(msg, cap, PK_E_TOO_LARGE, "image is %ux%u = %llu pixels, too large to decode", w, h,
                        (unsigned long long)px);
    return PK_OK;
}

/* ----------------------------------------------------------------- JPEG */

/* Largest fast DCT reduction (1/8, 1/4, 1/2) that still decodes at least
 * as many pixels as the resized image has on each axis. */
static int jpeg_denominator(const pk_decoder *d, uint32_t w, uint32_t h, const pk_layout *l)
{
    for (unsigned k = 3; k >= 1; k--) {
        uint32_t den = 1u << k;
        if ((d->scales & den) && (w + den - 1) / den >= l->resized_w && (h + den - 1) / den >= l->resized_h)
            return (int)den;
    }
    return 1;
}

/* Pillow's CMYK -> RGB for Adobe (inverted) CMYK, which Pillow assumes for
 * every CMYK JPEG: with stored bytes c, k (ink 255 - c, 255 - k),
 * R = k - (255 - c) * k / 255, rounded as Pillow's MULDIV255. In place: each
 * 3-byte output lands at or before the 4-byte input it came from. */
static void cmyk_to_rgb(uint8_t *px, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint8_t *s = px + 4 * i;
        uint32_t k = s[3];
        uint8_t rgb[3];
        for (int c = 0; c < 3; c++) {
            uint32_t t = (255u - s[c]) * k + 128;
            rgb[c] = (uint8_t)(k - ((t + (t >> 8)) >> 8));
        }
        memcpy(px + 3 * i, rgb, 3);
    }
}

/* Report TurboJPEG's error, then replace the handle: after a failed
 * tjDecompressHeader3, libjpeg-turbo 2.1 leaves the handle in a state where
 * the next header read "succeeds" with garbage dimensions. One bad file must
 * not poison the next. */
static int jpeg_fail(pk_decoder *d, char *msg, size_t cap)
{
    const char *why = tjGetErrorStr2(d->tj);
    /* Valid JPEGs this build cannot decode (12-bit samples; lossless and
     * hierarchical processes) are unsupported; everything else is damage,
     * "Unsupported marker type" included, which noise produces. */
    int rc = strncmp(why, "Unsupported JPEG", 16) == 0
                 ? pk__fail(msg, cap, PK_E_UNSUPPORTED, "unsupported JPEG: %s", why)
                 : pk__fail(msg, cap, PK_E_CORRUPT, "corrupt JPEG: %s", why);
    tjDestroy(d->tj);
    d->tj = tjInitDecompress(); /* NULL: the next JPEG reports out of memory */
    return rc;
}

static uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }

/* Width, height and component count from the frame header (the first SOFn
 * marker), walking the marker segments from SOI. 0 when found. */
static int jpeg_sof(const uint8_t *d, size_t len, uint32_t *w, uint32_t *h, int *ncomp)
{
    size_t i = 2;
    while (i + 4 <= len && d[i] == 0xff) {
        uint8_t m = d[i + 1];
        if (m == 0xff) { /* fill byte */
            i++;
            continue;
        }
        if (m == 0x01 || (m >= 0xd0 && m <= 0xd8)) { /* markers without a length */
            i += 2;
            continue;
        }
        if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
            if (i + 10 > len || be16(d + i + 2) < 8) return -1;
            *h = be16(d + i + 5);
            *w = be16(d + i + 7);
            *ncomp = d[i + 9];
            return 0;
        }
        if (m == 0xda || m == 0xd9 || be16(d + i + 2) < 2) return -1; /* scan or end first */
        i += 2 + be16(d + i + 2);
    }
    return -1;
}

/* Source dimensions and whether the JPEG has 4 components (CMYK or YCCK:
 * both decode to CMYK). */
static int jpeg_header(pk_decoder *d, const uint8_t *data, size_t len, uint32_t *w, uint32_t *h, int *cmyk,
                       int *subsamp_out, int *cs_out, char *msg, size_t cap)
{
    int iw, ih, subsamp, cs, ncomp;
    if (tjDecompressHeader3(d->tj, data, (unsigned long)len, &iw, &ih, &subsamp, &cs) == 0) {
        /* TurboJPEG 2.1 also "succeeds" on a file cut before its frame header
         * (libjpeg reads it as a tables-only stream) and then reports whatever
         * the handle's fields held: trust only sizes the frame header confirms. */
        uint32_t fw, fh;
        if (jpeg_sof(data, len, &fw, &fh, &ncomp) != 0 || iw <= 0 || ih <= 0 || (uint32_t)iw != fw ||
            (uint32_t)ih != fh) {
            tjDestroy(d->tj);
            d->tj = tjInitDecompress();
            return pk__fail(msg, cap, PK_E_CORRUPT,
                            "corrupt JPEG: no complete frame header (truncated file?)");
        }
        *w = (uint32_t)iw;
        *h = (uint32_t)ih;
        *cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
        *subsamp_out = subsamp;
        *cs_out = cs;
        return PK_OK;
    }
    /* TurboJPEG 2.1 also refuses the header of JPEGs whose sampling factors
     * it has no name for (2x1,1x2,1x1; 3x1; ...), which libjpeg decodes
     * fine. Read the frame header ourselves and let the decode judge the
     * rest; keep TurboJPEG's message for when that fails too. */
    int rc = jpeg_fail(d, msg, cap);
    if (jpeg_sof(data, len, w, h, &ncomp) != 0 || *w == 0 || *h == 0) return rc;
    *cmyk = ncomp == 4;
    return PK_OK;
}

/* Whether a JPEG decodes to its planes and is resampled there
 * (stk__resize_ycc) rather than decoded to RGB first: YCbCr or grayscale with
 * the chroma layouts TurboJPEG names and libjpeg fancy-upsamples by 2 or 1
 * per axis, decoded at full size, and actually resampled (an image kept at
 * its own size goes the RGB way, and equals TurboJPEG's RGB decode). */
static bool jpeg_planar(int subsamp, int cs, int den, const pk_layout *l, uint32_t w, uint32_t h,
                        const pk_params *p)
{
    if (p->resample_rgb || den != 1 || (l->resized_w == w && l->resized_h == h)) return false;
    if (cs == TJCS_GRAY) return subsamp == TJSAMP_GRAY;
    return cs == TJCS_YCbCr &&
           (subsamp == TJSAMP_444 || subsamp == TJSAMP_422 || subsamp == TJSAMP_420 || subsamp == TJSAMP_440);
}

/* Decode to planes, each row 16 readable bytes longer than its samples and
 * 32 spare bytes at the end (what stk__resize_ycc's loads may touch). */
static int jpeg_decode_planes(pk_decoder *d, const uint8_t *data, size_t len, int subsamp, uint32_t w,
                              uint32_t h, stk__ycc_view *y, char *msg, size_t cap)
{
    int np = subsamp == TJSAMP_GRAY ? 1 : 3, stride[3] = {0, 0, 0};
    size_t at[3], total = 0;
    for (int c = 0; c < np; c++) {
        int pw = tjPlaneWidth(c, (int)w, subsamp), ph = tjPlaneHeight(c, (int)h, subsamp);
        stride[c] = (pw + 16 + 31) & ~31;
        at[c] = total;
        total += (size_t)stride[c] * (size_t)ph;
    }
    int rc = grow(d, total + 32, msg, cap);
    if (rc != PK_OK) return rc;
    unsigned char *planes[3] = {d->pix + at[0], np == 3 ? d->pix + at[1] : NULL,
                                np == 3 ? d->pix + at[2] : NULL};
    if (tjDecompressToYUVPlanes(d->tj, data, (unsigned long)len, planes, (int)w, stride, (int)h,
                                PK_TJ_FLAGS) != 0)
        return jpeg_fail(d, msg, cap);
    memset(d->pix + total, 0, 32);
    *y = (stk__ycc_view){{planes[0], planes[1], planes[2]},
                         {(size_t)stride[0], (size_t)stride[1], (size_t)stride[2]},
                         w,
                         h,
                         subsamp == TJSAMP_422 || subsamp == TJSAMP_420 ? 2u : 1u,
                         subsamp == TJSAMP_440 || subsamp == TJSAMP_420 ? 2u : 1u};
    return PK_OK;
}

static int jpeg_decode(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, decoded *out,
                       uint32_t *ow, uint32_t *oh, char *msg, size_t cap)
{
    int cmyk = 0, subsamp = -1, cs = -1;
    if (!d->tj && !(d->tj = tjInitDecompress()))
        return pk__fail(msg, cap, PK_E_NOMEM, "out of memory (TurboJPEG handle)");
    int rc = jpeg_header(d, data, len, ow, oh, &cmyk, &subsamp, &cs, msg, cap);
    if (rc == PK_OK) rc = pk__check_pixels(*ow, *oh, p, msg, cap);
    if (rc != PK_OK) return rc;
    if (!d->tj && !(d->tj = tjInitDecompress()))
        return pk__fail(msg, cap, PK_E_NOMEM, "out of memory (TurboJPEG handle)");
    pk_layout l;
    pk_layout_compute(p, *ow, *oh, &l);
    tjscalingfactor sf = {1, jpeg_denominator(d, *ow, *oh, &l)};
    out->planar = !cmyk && jpeg_planar(subsamp, cs, sf.denom, &l, *ow, *oh, p);
    if (out->planar) return jpeg_decode_planes(d, data, len, subsamp, *ow, *oh, &out->ycc, msg, cap);
    stk__rgb_view *v = &out->rgb;
    int sw = TJSCALED((int)*ow, sf), sh = TJSCALED((int)*oh, sf);
    if ((rc = grow(d, (size_t)sw * (size_t)sh * (cmyk ? 4 : 3), msg, cap)) != PK_OK) return rc;
    if (tjDecompress2(d->tj, data, (unsigned long)len, d->pix, sw, 0, sh, cmyk ? TJPF_CMYK : TJPF_RGB,
                      PK_TJ_FLAGS) != 0)
        return jpeg_fail(d, msg, cap);
    if (cmyk) cmyk_to_rgb(d->pix, (size_t)sw * (size_t)sh);
    *v = (stk__rgb_view){d->pix, (uint32_t)sw, (uint32_t)sh, 3 * (size_t)sw, 0};
    return PK_OK;
}

/* ------------------------------------------------------------------ PNG */

static int png_fail(int err, char *msg, size_t cap)
{
    if (err == SPNG_EMEM) return pk__fail(msg, cap, PK_E_NOMEM, "out of memory decoding PNG");
    return pk__fail(msg, cap, PK_E_CORRUPT, "corrupt PNG: %s", spng_strerror(err));
}

/* Header, limits, decode; ctx is the caller's to free. */
static int png_run(pk_decoder *d, spng_ctx *ctx, const uint8_t *data, size_t len, const pk_params *p,
                   stk__rgb_view *v, uint32_t *ow, uint32_t *oh, char *msg, size_t cap)
{
    struct spng_ihdr ihdr;
    size_t need = 0;
    int err;
    /* No chunk can be longer than the file (nor than PNG's 2^31 - 1); cap
     * what ancillary chunks may cache. */
    if ((err = spng_set_chunk_limits(ctx, len < INT32_MAX ? len : INT32_MAX, PK_PNG_CACHE_LIMIT)) ||
        (err = spng_set_png_buffer(ctx, data, len)) || (err = spng_get_ihdr(ctx, &ihdr)))
        return png_fail(err, msg, cap);
    *ow = ihdr.width;
    *oh = ihdr.height;
    int rc = pk__check_pixels(ihdr.width, ihdr.height, p, msg, cap);
    if (rc != PK_OK) return rc;
    if ((err = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &need))) return png_fail(err, msg, cap);
    if ((rc = grow(d, need, msg, cap)) != PK_OK) return rc;
    /* flags 0: no tRNS, no gamma; alpha is dropped as Pillow's convert("RGB") does */
    if ((err = spng_decode_image(ctx, d->pix, need, SPNG_FMT_RGB8, 0))) return png_fail(err, msg, cap);
    *v = (stk__rgb_view){d->pix, ihdr.width, ihdr.height, 3 * (size_t)ihdr.width, 0};
    return PK_OK;
}

static int png_decode(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, decoded *out,
                      uint32_t *ow, uint32_t *oh, char *msg, size_t cap)
{
    stk__rgb_view *v = &out->rgb;
    out->planar = false;
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx) return pk__fail(msg, cap, PK_E_NOMEM, "out of memory decoding PNG");
    int rc = png_run(d, ctx, data, len, p, v, ow, oh, msg, cap);
    spng_ctx_free(ctx);
    return rc;
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
    stk__rect win = {l.crop_x, l.crop_y, l.w, l.h};
    uint8_t *at = out + (size_t)l.pad_y * stride + 3 * (size_t)l.pad_x;
    if ((v->planar ? stk__resize_ycc(d->rs, &v->ycc, l.resized_w, l.resized_h, &win, at, stride)
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

/* The decoders of image_formats.c, in pk_format order from PK_FMT_WEBP. */
static int (*const other_decode[])(pk_decoder *, const uint8_t *, size_t, const pk_params *, stk__rgb_view *,
                                   uint32_t *, uint32_t *, char *, size_t) = {
    pk__webp_decode, pk__gif_decode, pk__bmp_decode, pk__tiff_decode};

int pk_process(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, uint8_t *out,
               uint32_t *orig_w, uint32_t *orig_h, char *msg, size_t msgcap)
{
    uint32_t ow = 0, oh = 0;
    decoded v;
    int rc = check_args(d, data, len, p, out, msg, msgcap);
    if (rc == PK_OK && len == 0) rc = pk__fail(msg, msgcap, PK_E_EMPTY, "empty file");
    if (rc == PK_OK) {
        pk_format fmt = pk_sniff(data, len);
        switch (fmt) {
        case PK_FMT_JPEG:
            rc = jpeg_decode(d, data, len, p, &v, &ow, &oh, msg, msgcap);
            break;
        case PK_FMT_PNG:
            rc = png_decode(d, data, len, p, &v, &ow, &oh, msg, msgcap);
            break;
        case PK_FMT_WEBP:
        case PK_FMT_GIF:
        case PK_FMT_BMP:
        case PK_FMT_TIFF: /* image_formats.c: RGB out */
            v.planar = false;
            rc = other_decode[fmt - PK_FMT_WEBP](d, data, len, p, &v.rgb, &ow, &oh, msg, msgcap);
            break;
        default:
            rc = unsupported(data, len, msg, msgcap);
            break;
        }
    }
    if (rc == PK_OK) rc = render(d, &v, ow, oh, p, out, msg, msgcap);
    if (rc == PK_OK && msg && msgcap) msg[0] = '\0'; /* nothing left of a recovered failure */
    if (orig_w) *orig_w = ow;
    if (orig_h) *orig_h = oh;
    return rc;
}
