/* tests/packer/test_pack_image.c - pack's image ingest (packer/ingest.c over
 * image/: the decoders, the geometry, the resize; those have their own tests
 * in tests/image/).
 *
 * Every JPEG and PNG flavour decodes to the pixels its own decoder gives,
 * every WebP, GIF, BMP and TIFF one to what a PNG of its pixels gives;
 * pk_process's output agrees with an independent double-precision
 * implementation of Pillow's BILINEAR filter written here, framed by
 * torchvision's Resize(size) + CenterCrop(size); broken and hostile files are refused
 * with the right status and message, and do not upset the decoder for the
 * next file. Test images are made here with TurboJPEG, libspng, libwebp,
 * giflib, libtiff, a BMP writer of its own and (when installed) cjpeg; the one committed image is a 385-byte plain-CMYK JPEG,
 * which TurboJPEG cannot write.
 *
 * Tolerances: decodes without resampling must match byte for byte; resampled
 * pixels may differ from the double-precision reference by one level (the
 * kernels keep 14-bit weights and an 8-bit intermediate, as Pillow keeps
 * 22-bit weights and an 8-bit intermediate).
 */
#include "image.h"
#include "ingest.h"
#include "resize.h"
#include "resize_internal.h" /* test seams */
#include "ycc.h"
#include "image_ref.h"
#include "testutil.h"

#include <check.h>
#include <errno.h>
#include <gif_lib.h>
#include <math.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <tiffio.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <webp/encode.h>
#include <webp/mux.h>

/* ================================================================ helpers */

#define MSG 512

/* An exact-size heap copy, so that ASan sees any read past the end. */
static uint8_t *dup_bytes(const void *src, size_t n)
{
    uint8_t *p = tu_xmalloc(n);
    memcpy(p, src, n);
    return p;
}

/* ----------------------------------------------------------------- JPEG */

static uint8_t *jpeg_encode(const uint8_t *px, uint32_t w, uint32_t h, int pf, int subsamp, int quality,
                            int flags, size_t *len)
{
    tjhandle c = tjInitCompress();
    ck_assert_ptr_nonnull(c);
    unsigned char *buf = NULL;
    unsigned long n = 0;
    int rc = tjCompress2(c, px, (int)w, 0, (int)h, pf, &buf, &n, subsamp, quality, flags);
    ck_assert_msg(rc == 0, "tjCompress2: %s", tjGetErrorStr2(c));
    uint8_t *out = dup_bytes(buf, n);
    *len = n;
    tjFree(buf);
    tjDestroy(c);
    return out;
}

/* A baseline RGB JPEG of a w x h tu_synth picture (kind, seed). */
static uint8_t *synth_jpeg(uint32_t w, uint32_t h, int kind, uint64_t seed, int subsamp, int quality,
                           size_t *len)
{
    tu_image im = tu_synth(w, h, kind, seed);
    uint8_t *jpg = jpeg_encode(im.px, w, h, TJPF_RGB, subsamp, quality, 0, len);
    tu_image_free(&im);
    return jpg;
}

/* TurboJPEG's own full-size decode: what every unscaled result must equal.
 * TurboJPEG 2.1 cannot read the header of JPEGs with unusual sampling
 * factors (its decode can): then the caller's *w, *h stand. */
static uint8_t *tj_decode(const uint8_t *jpg, size_t len, int pf, int *w, int *h)
{
    tjhandle d = tjInitDecompress();
    int ss, cs, hw, hh;
    if (tjDecompressHeader3(d, jpg, len, &hw, &hh, &ss, &cs) == 0) {
        *w = hw;
        *h = hh;
    } else {
        tjDestroy(d); /* a failed header read leaves the handle unusable */
        d = tjInitDecompress();
    }
    ck_assert_int_gt(*w, 0);
    uint8_t *out = tu_xmalloc((size_t)*w * *h * tjPixelSize[pf]);
    ck_assert_msg(tjDecompress2(d, jpg, len, out, *w, 0, *h, pf, 0) == 0, "%s", tjGetErrorStr2(d));
    tjDestroy(d);
    return out;
}

/* Offset of the first marker `m` (FF m) in a JPEG, or 0. */
static size_t find_marker(const uint8_t *d, size_t len, uint8_t m)
{
    for (size_t i = 2; i + 1 < len; i++)
        if (d[i] == 0xff && d[i + 1] == m) return i;
    return 0;
}

/* ------------------------------------------------------------------ PNG */

/* Encode raw PNG samples (big-endian for 16 bits, packed for fewer than 8). */
static uint8_t *png_encode(const uint8_t *raw, size_t raw_len, uint32_t w, uint32_t h, int color, int depth,
                           int interlace, const struct spng_plte *plte, const struct spng_trns *trns,
                           size_t *len)
{
    spng_ctx *e = spng_ctx_new(SPNG_CTX_ENCODER);
    ck_assert_ptr_nonnull(e);
    struct spng_ihdr ihdr = {w, h, (uint8_t)depth, (uint8_t)color, 0, 0, (uint8_t)interlace};
    ck_assert_int_eq(spng_set_option(e, SPNG_ENCODE_TO_BUFFER, 1), 0);
    ck_assert_int_eq(spng_set_ihdr(e, &ihdr), 0);
    if (plte) ck_assert_int_eq(spng_set_plte(e, (struct spng_plte *)plte), 0);
    if (trns) ck_assert_int_eq(spng_set_trns(e, (struct spng_trns *)trns), 0);
    int rc = spng_encode_image(e, raw, raw_len, SPNG_FMT_RAW, SPNG_ENCODE_FINALIZE);
    ck_assert_msg(rc == 0, "spng_encode_image: %s", spng_strerror(rc));
    size_t n = 0;
    int err = 0;
    void *buf = spng_get_png_buffer(e, &n, &err);
    ck_assert_msg(buf && !err, "spng_get_png_buffer: %s", spng_strerror(err));
    uint8_t *out = dup_bytes(buf, n);
    *len = n;
    free(buf);
    spng_ctx_free(e);
    return out;
}

/* An 8-bit RGB PNG of im. */
static uint8_t *png_rgb(const tu_image *im, size_t *len)
{
    return png_encode(im->px, (size_t)im->w * im->h * 3, im->w, im->h, SPNG_COLOR_TYPE_TRUECOLOR, 8, 0, NULL,
                      NULL, len);
}

static uint32_t crc32_png(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return c ^ 0xffffffffu;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* ------------------------------------------------------------ processing */

static pk_params params(uint32_t size, pk_resize_mode mode)
{
    pk_params p;
    pk_params_init(&p, size);
    p.mode = mode;
    return p;
}

/* pk_process that must succeed; returns a malloc'd size^2*3 result. */
static uint8_t *process_ok(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, uint32_t *ow,
                           uint32_t *oh)
{
    uint8_t *out = tu_xmalloc((size_t)p->size * p->size * 3);
    char msg[MSG] = "unset";
    int rc = pk_process(d, data, len, p, out, ow, oh, msg, sizeof msg);
    ck_assert_msg(rc == PK_OK, "pk_process: %s (%s)", pk_status_name(rc), msg);
    ck_assert_str_eq(msg, "");
    return out;
}

/* pk_process that must fail with `want` and a message containing `sub`. */
static void process_fails(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, int want,
                          const char *sub)
{
    uint8_t *out = tu_xmalloc((size_t)p->size * p->size * 3);
    char msg[MSG] = "";
    uint8_t *copy = dup_bytes(data, len);
    int rc = pk_process(d, copy, len, p, out, NULL, NULL, msg, sizeof msg);
    ck_assert_msg(rc == want, "status %s, expected %s; message: %s", pk_status_name(rc), pk_status_name(want),
                  msg);
    ck_assert_msg(strstr(msg, sub) != NULL, "message \"%s\" lacks \"%s\"", msg, sub);
    ck_assert_msg(strchr(msg, '\n') == NULL, "message \"%s\" is not one line", msg);
    free(copy);
    free(out);
}

static double psnr(const uint8_t *a, const uint8_t *b, size_t n)
{
    double se = 0;
    for (size_t i = 0; i < n; i++) se += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return se == 0 ? 99.0 : 10 * log10(255.0 * 255.0 / (se / n));
}

/* ============================================================ sniffing */

START_TEST(sniff_magic_not_names)
{
    static const uint8_t jpg[] = {0xff, 0xd8, 0xff, 0xe0},
                         png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    ck_assert_int_eq(stk__img_sniff(jpg, sizeof jpg), STK_IMG_FMT_JPEG);
    ck_assert_int_eq(stk__img_sniff(png, sizeof png), STK_IMG_FMT_PNG);
    ck_assert_int_eq(stk__img_sniff(png, 4), STK_IMG_FMT_PNG); /* cut inside the signature: still PNG */
    ck_assert_int_eq(stk__img_sniff((const uint8_t *)"GIF89a", 6), STK_IMG_FMT_GIF);
    ck_assert_int_eq(stk__img_sniff((const uint8_t *)"RIFF\x10\0\0\0WEBPVP8L", 16), STK_IMG_FMT_WEBP);
    ck_assert_int_eq(stk__img_sniff((const uint8_t *)"RIFF\x10\0\0\0WAVEfmt ", 16), STK_IMG_FMT_UNKNOWN);
    ck_assert_int_eq(stk__img_sniff((const uint8_t *)"II*\0", 4), STK_IMG_FMT_TIFF);
    ck_assert_int_eq(stk__img_sniff((const uint8_t *)"MM\0*", 4), STK_IMG_FMT_TIFF);
    ck_assert_int_eq(stk__img_sniff((const uint8_t *)"BM\0\0\0\0\0\0\0\0\x36\0\0\0\x28\0\0\0", 18),
                     STK_IMG_FMT_BMP);
    ck_assert_int_eq(stk__img_sniff((const uint8_t *)"BMW is a car, not a bitmap", 26), STK_IMG_FMT_UNKNOWN);
    ck_assert_int_eq(stk__img_sniff(jpg, 1), STK_IMG_FMT_UNKNOWN);
    ck_assert_int_eq(stk__img_sniff(NULL, 0), STK_IMG_FMT_UNKNOWN);
}
END_TEST

START_TEST(empty_file)
{
    pk_decoder *d = pk_decoder_new();
    pk_params p = params(32, PK_RESIZE_SHORTER);
    uint8_t out[32 * 32 * 3];
    char msg[MSG];
    uint32_t w = 7, h = 7;
    ck_assert_int_eq(pk_process(d, NULL, 0, &p, out, &w, &h, msg, sizeof msg), PK_E_EMPTY);
    ck_assert_str_eq(msg, "empty file");
    ck_assert_uint_eq(w, 0);
    ck_assert_uint_eq(h, 0);
    pk_decoder_free(d);
}
END_TEST

START_TEST(unsupported_formats)
{
    pk_decoder *d = pk_decoder_new();
    pk_params p = params(32, PK_RESIZE_SHORTER);
    /* what a .jpg can hold that is no JPEG: the name is never consulted */
    static const uint8_t avif[] = "\x00\x00\x00\x1c"
                                  "ftypavif\x00\x00\x00\x00";
    process_fails(d, avif, sizeof avif - 1, &p, PK_E_UNSUPPORTED,
                  "unsupported image format (starts with 00 00 00 1c: AVIF)");
    static const uint8_t psd[] = "8BPS\x00\x01";
    process_fails(d, psd, sizeof psd - 1, &p, PK_E_UNSUPPORTED, "(starts with 38 42 50 53: Photoshop)");
    static const char html[] = "<!DOCTYPE html><html>404 Not Found</html>\n";
    process_fails(d, (const uint8_t *)html, sizeof html - 1, &p, PK_E_UNSUPPORTED,
                  "(starts with 3c 21 44 4f: text)");
    static const uint8_t bmp[] = "BM\x36\x00\x00\x00"; /* too short to be sure it is one */
    process_fails(d, bmp, sizeof bmp - 1, &p, PK_E_UNSUPPORTED, ": BMP)");
    static const uint8_t junk[] = {0x00, 0x9c, 0xfe, 0x13, 0x77};
    process_fails(d, junk, sizeof junk, &p, PK_E_UNSUPPORTED,
                  "unsupported image format (starts with 00 9c fe 13)");
    static const uint8_t one[] = {0xff};
    process_fails(d, one, 1, &p, PK_E_UNSUPPORTED, "(starts with ff)");
    pk_decoder_free(d);
}
END_TEST

/* ============================================================ JPEG */

/* Decode with stretch to the image's own size: no resampling, so the result
 * must be TurboJPEG's own decode, byte for byte. */
static void check_jpeg_exact(pk_decoder *d, const uint8_t *jpg, size_t len, uint32_t side, const char *what)
{
    int w = (int)side, h = (int)side;
    uint8_t *want = tj_decode(jpg, len, TJPF_RGB, &w, &h);
    ck_assert_int_eq(w, h);
    pk_params p = params((uint32_t)w, PK_RESIZE_STRETCH);
    uint32_t ow, oh;
    uint8_t *got = process_ok(d, jpg, len, &p, &ow, &oh);
    ck_assert_uint_eq(ow, (uint32_t)w);
    ck_assert_uint_eq(oh, (uint32_t)h);
    ck_assert_msg(memcmp(got, want, (size_t)w * h * 3) == 0, "%s: differs from tjDecompress2", what);
    free(got);
    free(want);
}

START_TEST(jpeg_flavours_exact)
{
    static const int samp[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_440, TJSAMP_411, TJSAMP_GRAY};
    static const char *const sname[] = {"4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "gray"};
    pk_decoder *d = pk_decoder_new();
    for (int kind = TU_FLAT; kind <= TU_DETAIL; kind++) {
        tu_image im = tu_synth(64, 64, kind, 1);
        for (size_t s = 0; s < sizeof samp / sizeof samp[0]; s++)
            for (int prog = 0; prog < 2; prog++) {
                size_t len;
                uint8_t *jpg =
                    jpeg_encode(im.px, 64, 64, TJPF_RGB, samp[s], 85, prog ? TJFLAG_PROGRESSIVE : 0, &len);
                char what[64];
                snprintf(what, sizeof what, "kind %d, %s, %s", kind, sname[s],
                         prog ? "progressive" : "baseline");
                check_jpeg_exact(d, jpg, len, 64, what);
                free(jpg);
            }
        tu_image_free(&im);
    }
    pk_decoder_free(d);
}
END_TEST

START_TEST(jpeg_grayscale_expands)
{
    pk_decoder *d = pk_decoder_new();
    size_t len;
    uint8_t *jpg = synth_jpeg(40, 40, TU_DETAIL, 2, TJSAMP_GRAY, 90, &len);
    int w = 0, h = 0;
    uint8_t *gray = tj_decode(jpg, len, TJPF_GRAY, &w, &h);
    pk_params p = params(40, PK_RESIZE_STRETCH);
    uint8_t *got = process_ok(d, jpg, len, &p, NULL, NULL);
    for (size_t i = 0; i < 40 * 40; i++)
        for (int c = 0; c < 3; c++) ck_assert_uint_eq(got[3 * i + c], gray[i]);
    free(got);
    free(gray);
    free(jpg);
    pk_decoder_free(d);
}
END_TEST

/* Pillow's CMYK -> RGB for Adobe (inverted) CMYK, in floating point:
 * R = K' * C' / 255 on the stored bytes. */
static int cmyk_pillow_float(uint8_t c, uint8_t k) { return (int)floor(c * (double)k / 255.0 + 0.5); }

START_TEST(jpeg_ycck_to_rgb)
{
    /* TurboJPEG writes CMYK input as a YCCK JPEG; libjpeg turns it back into
     * CMYK, which pk converts as Pillow does. */
    pk_decoder *d = pk_decoder_new();
    uint32_t n = 32;
    uint8_t *cmyk = tu_xmalloc((size_t)n * n * 4);
    uint64_t seed = 3;
    for (size_t i = 0; i < (size_t)n * n; i++) {
        uint8_t base = (uint8_t)(i % n * 8);
        cmyk[4 * i] = base, cmyk[4 * i + 1] = (uint8_t)(255 - base), cmyk[4 * i + 2] = (uint8_t)(i / n * 8);
        cmyk[4 * i + 3] = (uint8_t)(128 + (tu_rng_next(&seed) & 63));
    }
    size_t len;
    uint8_t *jpg = jpeg_encode(cmyk, n, n, TJPF_CMYK, TJSAMP_444, 95, 0, &len);
    int w = 0, h = 0;
    uint8_t *raw = tj_decode(jpg, len, TJPF_CMYK, &w, &h);
    pk_params p = params(n, PK_RESIZE_STRETCH);
    uint8_t *got = process_ok(d, jpg, len, &p, NULL, NULL);
    for (size_t i = 0; i < (size_t)n * n; i++)
        for (int c = 0; c < 3; c++) {
            int want = cmyk_pillow_float(raw[4 * i + c], raw[4 * i + 3]);
            ck_assert_msg(abs(got[3 * i + c] - want) <= 1, "pixel %zu channel %d: %d, want %d", i, c,
                          got[3 * i + c], want);
        }
    free(got);
    free(raw);
    free(jpg);
    free(cmyk);
    pk_decoder_free(d);
}
END_TEST

/* A 16x16 plain CMYK (not YCCK) JPEG with an Adobe marker, four quadrants,
 * written by Pillow 9.4 (which TurboJPEG cannot do). Pillow 9.4's
 * Image.open(f).convert("RGB") gives the quadrant centres below. */
static const uint8_t cmyk_jpeg[] = {
#include "cmyk4.inc"
};

START_TEST(jpeg_plain_cmyk_matches_pillow)
{
    static const struct {
        uint32_t x, y;
        uint8_t rgb[3];
    } want[] = {
        {4, 4, {207, 46, 190}}, {12, 4, {5, 235, 155}}, {4, 12, {0, 0, 0}}, {12, 12, {119, 179, 209}}};
    pk_decoder *d = pk_decoder_new();
    pk_params p = params(16, PK_RESIZE_STRETCH);
    uint8_t *got = process_ok(d, cmyk_jpeg, sizeof cmyk_jpeg, &p, NULL, NULL);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const uint8_t *px = got + (want[i].y * 16 + want[i].x) * 3;
        ck_assert_msg(memcmp(px, want[i].rgb, 3) == 0, "(%u,%u) is %d,%d,%d; Pillow says %d,%d,%d", want[i].x,
                      want[i].y, px[0], px[1], px[2], want[i].rgb[0], want[i].rgb[1], want[i].rgb[2]);
    }
    free(got);
    pk_decoder_free(d);
}
END_TEST

/* Run cjpeg with `args` on im (via a PPM); NULL when cjpeg is missing. */
static uint8_t *cjpeg(const tu_image *im, const char *args, size_t *len)
{
    const char *prog = getenv("STOKER_CJPEG");
    if (!prog || !*prog) return NULL;
    const char *dir = getenv("STOKER_TEST_TMP");
    char in[1024], out[1024], cmd[3072];
    if (!dir || !*dir) dir = "/tmp";
    ck_assert_msg(mkdir(dir, 0777) == 0 || errno == EEXIST, "mkdir %s: %s", dir, strerror(errno));
    snprintf(in, sizeof in, "%s/pk-%ld.ppm", dir, (long)getpid());
    snprintf(out, sizeof out, "%s/pk-%ld.jpg", dir, (long)getpid());
    FILE *f = fopen(in, "wb");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "P6\n%u %u\n255\n", im->w, im->h);
    ck_assert_uint_eq(fwrite(im->px, 1, (size_t)im->w * im->h * 3, f), (size_t)im->w * im->h * 3);
    ck_assert_int_eq(fclose(f), 0);
    snprintf(cmd, sizeof cmd, "'%s' %s -outfile '%s' '%s'", prog, args, out, in);
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
    f = fopen(out, "rb");
    ck_assert_ptr_nonnull(f);
    static uint8_t buf[1 << 20];
    *len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    unlink(in);
    unlink(out);
    return dup_bytes(buf, *len);
}

START_TEST(jpeg_cjpeg_variants)
{
    /* arithmetic coding, restart markers every row, and sampling factors
     * TurboJPEG 2.1's header reader has no name for (it refuses them; the
     * decode itself works) */
    static const char *const variants[] = {
        "-arithmetic",         "-restart 1",  "-restart 1 -arithmetic", "-progressive -arithmetic",
        "-sample 2x1,1x2,1x1", "-sample 3x1", "-sample 1x1,2x2,1x1",    "-sample 1x2 -restart 2B",
    };
    if (!getenv("STOKER_CJPEG") || !*getenv("STOKER_CJPEG")) {
        printf("jpeg_cjpeg_variants: skipped, cjpeg not found (install libjpeg-turbo-progs)\n");
        return;
    }
    pk_decoder *d = pk_decoder_new();
    tu_image im = tu_synth(48, 48, TU_DETAIL, 4);
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        size_t len;
        uint8_t *jpg = cjpeg(&im, variants[i], &len);
        check_jpeg_exact(d, jpg, len, 48, variants[i]);
        free(jpg);
    }
    tu_image_free(&im);
    pk_decoder_free(d);
}
END_TEST

START_TEST(jpeg_truncated)
{
    pk_decoder *d = pk_decoder_new();
    tu_image im = tu_synth(64, 48, TU_DETAIL, 5);
    pk_params p = params(32, PK_RESIZE_SHORTER);
    for (int prog = 0; prog < 2; prog++) {
        size_t len;
        uint8_t *jpg =
            jpeg_encode(im.px, 64, 48, TJPF_RGB, TJSAMP_420, 90, prog ? TJFLAG_PROGRESSIVE : 0, &len);
        size_t sos = find_marker(jpg, len, 0xda);
        ck_assert_uint_gt(sos, 0);
        /* inside the header, right before the scan, inside the scan, and
         * only the EOI marker missing */
        const size_t cuts[] = {2, 3, 20, sos, sos + 12, sos + (len - sos) / 4, len / 2, len - 40, len - 2};
        for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
            process_fails(d, jpg, cuts[i], &p, PK_E_CORRUPT, "corrupt JPEG: ");
        /* past the scan the message is libjpeg's own */
        process_fails(d, jpg, len / 2, &p, PK_E_CORRUPT, "corrupt JPEG: Premature end of JPEG file");
        /* the header alone still tells the size */
        uint8_t out[32 * 32 * 3];
        char msg[MSG];
        uint32_t w = 0, h = 0;
        ck_assert_int_eq(pk_process(d, jpg, len / 2, &p, out, &w, &h, msg, sizeof msg), PK_E_CORRUPT);
        ck_assert_uint_eq(w, 64);
        ck_assert_uint_eq(h, 48);
        free(jpg);
    }
    tu_image_free(&im);
    pk_decoder_free(d);
}
END_TEST

START_TEST(jpeg_garbage)
{
    pk_decoder *d = pk_decoder_new();
    pk_params p = params(32, PK_RESIZE_SHORTER);
    uint8_t out[32 * 32 * 3];
    char msg[MSG];
    uint64_t seed = 6;
    for (int t = 0; t < 200; t++) {
        size_t len = 3 + tu_rng_next(&seed) % 2000;
        uint8_t *buf = tu_xmalloc(len);
        for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)tu_rng_next(&seed);
        buf[0] = 0xff, buf[1] = 0xd8, buf[2] = 0xff;
        int rc = pk_process(d, buf, len, &p, out, NULL, NULL, msg, sizeof msg);
        ck_assert_msg(rc == PK_E_CORRUPT || rc == PK_E_UNSUPPORTED || rc == PK_E_TOO_LARGE,
                      "random JPEG %d: %s (%s)", t, pk_status_name(rc), msg);
        free(buf);
    }
    /* a JPEG whose header is all there is */
    size_t len;
    uint8_t *jpg = synth_jpeg(16, 16, TU_GRADIENT, 0, TJSAMP_420, 90, &len);
    size_t sos = find_marker(jpg, len, 0xda);
    process_fails(d, jpg, sos, &p, PK_E_CORRUPT, "corrupt JPEG: ");
    /* a JPEG with its scan data replaced by noise */
    uint8_t *bad = dup_bytes(jpg, len);
    for (size_t i = sos + 14; i < len - 2; i++) bad[i] = (uint8_t)tu_rng_next(&seed);
    int rc = pk_process(d, bad, len, &p, out, NULL, NULL, msg, sizeof msg);
    ck_assert_msg(rc == PK_E_CORRUPT, "noisy scan: %s (%s)", pk_status_name(rc), msg);
    free(bad);
    free(jpg);
    pk_decoder_free(d);
}
END_TEST

START_TEST(jpeg_bomb_refused_from_header)
{
    /* 16x16 pixels of data whose frame header claims 30000x30000: refused
     * from the header, before any pixel memory exists */
    pk_decoder *d = pk_decoder_new();
    size_t len;
    uint8_t *jpg = synth_jpeg(16, 16, TU_GRADIENT, 0, TJSAMP_420, 90, &len);
    size_t sof = find_marker(jpg, len, 0xc0);
    ck_assert_uint_gt(sof, 0);
    jpg[sof + 5] = 30000 >> 8, jpg[sof + 6] = 30000 & 0xff; /* height */
    jpg[sof + 7] = 30000 >> 8, jpg[sof + 8] = 30000 & 0xff; /* width */
    pk_params p = params(32, PK_RESIZE_SHORTER);
    p.max_pixels = 100000000;
    process_fails(d, jpg, len, &p, PK_E_TOO_LARGE,
                  "image is 30000x30000 = 900000000 pixels, over --max-pixels 100000000");
    uint8_t out[32 * 32 * 3];
    char msg[MSG];
    uint32_t w = 0, h = 0;
    ck_assert_int_eq(pk_process(d, jpg, len, &p, out, &w, &h, msg, sizeof msg), PK_E_TOO_LARGE);
    ck_assert_uint_eq(w, 30000);
    ck_assert_uint_eq(h, 30000);
    /* the limit is inclusive: exactly max_pixels passes the check */
    p.max_pixels = 900000000;
    p.size = 8;
    ck_assert_int_ne(pk_process(d, jpg, len, &p, out, &w, &h, msg, sizeof msg), PK_E_TOO_LARGE);
    free(jpg);
    pk_decoder_free(d);
}
END_TEST

START_TEST(decoder_survives_bad_files)
{
    /* libjpeg-turbo 2.1 leaves a TurboJPEG handle broken after a failed
     * header read; the next good file must still decode */
    pk_decoder *d = pk_decoder_new();
    size_t len;
    uint8_t *jpg = synth_jpeg(32, 32, TU_DETAIL, 7, TJSAMP_444, 90, &len);
    pk_params p = params(32, PK_RESIZE_STRETCH);
    size_t sos = find_marker(jpg, len, 0xda);
    for (size_t cut = 2; cut < len; cut += cut < sos + 16 ? 3 : 97) {
        process_fails(d, jpg, cut, &p, PK_E_CORRUPT, "corrupt JPEG");
        char what[64];
        snprintf(what, sizeof what, "after a file cut at %zu of %zu", cut, len);
        check_jpeg_exact(d, jpg, len, 32, what);
    }
    free(jpg);
    pk_decoder_free(d);
}
END_TEST

/* A large JPEG decodes with DCT scaling (1024x768 to 128: 1/4, whose short
 * side 192 is the least that is still >= 128) and still frames what a full
 * decode would; the image only differs by the filter, not by a shift. */
START_TEST(jpeg_dct_scaled)
{
    pk_decoder *d = pk_decoder_new();
    tu_image im = tu_synth(1024, 768, TU_GRADIENT, 8);
    /* a few sharp-edged blocks, so that a misplaced crop shows */
    for (uint32_t y = 300; y < 460; y++)
        for (uint32_t x = 200; x < 330; x++) memset(im.px + ((size_t)y * 1024 + x) * 3, 255, 3);
    size_t len;
    uint8_t *jpg = jpeg_encode(im.px, 1024, 768, TJPF_RGB, TJSAMP_444, 95, 0, &len);
    int w = 0, h = 0;
    uint8_t *full = tj_decode(jpg, len, TJPF_RGB, &w, &h);
    const uint32_t sizes[] = {128, 200, 400};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        uint32_t n = sizes[s], rw, rh, left, top, ow, oh;
        pk_params p = params(n, PK_RESIZE_SHORTER);
        uint8_t *got = process_ok(d, jpg, len, &p, &ow, &oh);
        ck_assert_uint_eq(ow, 1024);
        ck_assert_uint_eq(oh, 768);
        tu_tv_geometry(1024, 768, n, &rw, &rh, &left, &top);
        double *ref = tu_ref_resize(full, 1024, 768, rw, rh);
        uint8_t *want = tu_xmalloc((size_t)n * n * 3);
        for (uint32_t y = 0; y < n; y++)
            for (uint32_t x = 0; x < n; x++)
                for (int c = 0; c < 3; c++)
                    want[((size_t)y * n + x) * 3 + c] =
                        (uint8_t)tu_ref_level(ref[((size_t)(y + top) * rw + x + left) * 3 + c]);
        double db = psnr(got, want, (size_t)n * n * 3);
        /* 128 and 200 decode at 1/4 (about 51 and 55 dB here; one step too
         * far, 1/8, gives about 40 and 46). 400: 768 / 2 = 384 < 400, so a
         * full decode, resampled on the JPEG's planes (about 53 dB: the
         * white blocks' ringing leaves the RGB cube, which the reference
         * clamps before resizing); the RGB route differs by rounding only. */
        ck_assert_msg(db >= 48.0, "size %u: %.1f dB against a full decode", n, db);
        if (n == 400) {
            pk_params rgb = p;
            rgb.resample_rgb = 1;
            uint8_t *g2 = process_ok(d, jpg, len, &rgb, &ow, &oh);
            tu_compare_ref(g2, n, n, (size_t)n * 3, ref, rw, left, top, 1, "size 400, RGB route");
            free(g2);
        }
        free(want);
        free(ref);
        free(got);
    }
    free(full);
    free(jpg);
    tu_image_free(&im);
    pk_decoder_free(d);
}
END_TEST

/* Shrunk by 2 or more, a JPEG goes through the decode planner (image/plan.c)
 * as the reader's crops do: the pixels are its scaled region decode of the
 * output window's source, resampled from the box's fractional edges; and
 * the stream is still read through to its end, so that damage below the
 * window (which the region decode alone stops before) refuses the file. */
START_TEST(jpeg_planned_region)
{
    pk_decoder *d = pk_decoder_new();
    tu_image im = tu_synth(768, 1024, TU_DETAIL, 9);
    size_t len;
    uint8_t *jpg = jpeg_encode(im.px, 768, 1024, TJPF_RGB, TJSAMP_420, 90, 0, &len);
    for (int mode = PK_RESIZE_SHORTER; mode <= PK_RESIZE_FIT; mode++) {
        pk_params p = params(128, (pk_resize_mode)mode);
        uint32_t ow, oh;
        uint8_t *got = process_ok(d, jpg, len, &p, &ow, &oh);
        stk__img_layout l;
        stk__img_layout_compute((stk__img_mode)mode, 128, 0, 0, 768, 1024, &l);
        double fx = 768.0 / (double)l.resized_w, fy = 1024.0 / (double)l.resized_h;
        stk__jpeg_plan pl;
        stk__jpeg_plan_make(768, 1024, (double)l.crop_x * fx, (double)l.crop_y * fy, l.w * fx, l.h * fy, l.w,
                            l.h, STK_IMG_SCALES_POW2, 1, &pl);
        ck_assert_uint_lt(pl.num, 8);
        if (mode == PK_RESIZE_SHORTER) ck_assert_uint_lt(pl.h, pl.sh); /* the centre window's rows alone */
        stk__jpeg *j = stk__jpeg_new();
        stk__img_buf buf = {0};
        const uint8_t *at;
        size_t stride;
        stk_error e;
        ck_assert_int_eq(stk__jpeg_decode_plan(j, jpg, len, 768, 1024, &pl, &buf, 64, &at, &stride, &e),
                         STK_OK);
        stk__resizer *rs = stk__resizer_new();
        stk__rgb_view v = {at, pl.w, pl.h, stride, 0};
        stk__rect win = {0, 0, l.w, l.h};
        uint8_t *want = tu_xmalloc((size_t)l.w * l.h * 3);
        ck_assert_int_eq(
            stk__resize_box(rs, &v, pl.bx, pl.by, pl.bw, pl.bh, l.w, l.h, &win, 0, want, (size_t)l.w * 3), 0);
        for (uint32_t y = 0; y < l.h; y++)
            ck_assert_msg(memcmp(got + ((size_t)(y + l.pad_y) * 128 + l.pad_x) * 3,
                                 want + (size_t)y * l.w * 3, (size_t)l.w * 3) == 0,
                          "mode %d row %u: not the planner's pixels", mode, y);
        free(want);
        stk__resizer_free(rs);
        stk__img_buf_free(&buf);
        stk__jpeg_free(j);
        free(got);
        /* cut below the window, and only the EOI missing: refused all the same */
        process_fails(d, jpg, len * 19 / 20, &p, PK_E_CORRUPT, "corrupt JPEG: ");
        process_fails(d, jpg, len - 2, &p, PK_E_CORRUPT, "corrupt JPEG: ");
    }
    free(jpg);
    tu_image_free(&im);
    pk_decoder_free(d);
}
END_TEST

/* ---------------------------------------------- resampling on the planes */

/* A smooth image inside the RGB cube, as JPEG in every chroma layout that
 * goes through the planes: the planar result stays within one level of the
 * RGB route (decode to RGB, then resize) nearly everywhere. Numbers measured
 * here are in the messages. */
START_TEST(jpeg_planar_close_to_rgb_route)
{
    static const int samp[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_440, TJSAMP_GRAY};
    pk_decoder *d = pk_decoder_new();
    tu_image im = tu_synth(301, 203, TU_GRADIENT, 3);
    for (size_t i = 0; i < (size_t)im.w * im.h * 3; i++) im.px[i] = (uint8_t)(40 + im.px[i] * 170 / 255);
    static const uint32_t sizes[] = {128, 150, 202, 256, 400};
    for (size_t s = 0; s < sizeof samp / sizeof samp[0]; s++) {
        size_t len;
        uint8_t *jpg = jpeg_encode(im.px, im.w, im.h, TJPF_RGB, samp[s], 92, 0, &len);
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            uint32_t ow, oh, n = sizes[k];
            pk_params a = params(n, PK_RESIZE_SHORTER), b = a;
            b.resample_rgb = 1;
            uint8_t *x = process_ok(d, jpg, len, &a, &ow, &oh), *y = process_ok(d, jpg, len, &b, &ow, &oh);
            size_t off1 = 0, total = (size_t)n * n * 3;
            int worst = 0;
            for (size_t i = 0; i < total; i++) {
                int df = abs(x[i] - y[i]);
                off1 += df > 1;
                worst = df > worst ? df : worst;
            }
            ck_assert_msg(off1 * 1000 <= total && worst <= 3,
                          "subsampling %d, size %u: %zu of %zu bytes off by more than 1, worst %d", samp[s],
                          n, off1, total, worst);
            free(x);
            free(y);
        }
        free(jpg);
    }
    tu_image_free(&im);
    /* tiny and odd sizes: chroma planes of one or two samples */
    static const uint32_t tiny[][2] = {{1, 1}, {3, 2}, {2, 5}, {17, 9}};
    for (size_t t = 0; t < sizeof tiny / sizeof tiny[0]; t++) {
        tu_image sm = tu_synth(tiny[t][0], tiny[t][1], TU_GRADIENT, 4);
        for (size_t i = 0; i < (size_t)sm.w * sm.h * 3; i++) sm.px[i] = (uint8_t)(60 + sm.px[i] / 2);
        size_t len;
        uint8_t *jpg = jpeg_encode(sm.px, sm.w, sm.h, TJPF_RGB, TJSAMP_420, 92, 0, &len);
        uint32_t ow, oh;
        pk_params a = params(16, PK_RESIZE_SHORTER), b = a;
        b.resample_rgb = 1;
        uint8_t *x = process_ok(d, jpg, len, &a, &ow, &oh), *y = process_ok(d, jpg, len, &b, &ow, &oh);
        for (size_t i = 0; i < 16 * 16 * 3; i++)
            ck_assert_msg(abs(x[i] - y[i]) <= 2, "%ux%u: byte %zu is %d, RGB route %d", sm.w, sm.h, i, x[i],
                          y[i]);
        free(x);
        free(y);
        free(jpg);
        tu_image_free(&sm);
    }
    pk_decoder_free(d);
}
END_TEST

/* Saturated colours and sharp edges (TU_DETAIL: a blue channel of noise) leave
 * the RGB cube after JPEG; the RGB route clamps each pixel before the
 * resize, the planar one the result after it. They still agree closely. */
START_TEST(jpeg_planar_saturated)
{
    pk_decoder *d = pk_decoder_new();
    size_t len;
    uint8_t *jpg = synth_jpeg(320, 240, TU_DETAIL, 5, TJSAMP_420, 90, &len);
    uint32_t ow, oh;
    pk_params a = params(160, PK_RESIZE_SHORTER), b = a;
    b.resample_rgb = 1;
    uint8_t *x = process_ok(d, jpg, len, &a, &ow, &oh), *y = process_ok(d, jpg, len, &b, &ow, &oh);
    double db = psnr(x, y, (size_t)160 * 160 * 3);
    ck_assert_msg(db >= 38.0, "planar vs RGB route on saturated detail: %.1f dB", db);
    free(x);
    free(y);
    free(jpg);
    pk_decoder_free(d);
}
END_TEST

/* ============================================================ PNG */

/* Pack one sample of `depth` bits (< 8: MSB first) at index i of a row. */
static void put_sample(uint8_t *row, uint32_t i, int depth, uint32_t v)
{
    if (depth == 16) {
        row[2 * i] = (uint8_t)(v >> 8), row[2 * i + 1] = (uint8_t)v;
    } else if (depth == 8) {
        row[i] = (uint8_t)v;
    } else {
        uint32_t per = 8 / (uint32_t)depth, shift = 8 - (uint32_t)depth * (i % per + 1);
        row[i / per] = (uint8_t)(row[i / per] | (v << shift));
    }
}

/* One PNG flavour: random samples, encoded, decoded with stretch to its own
 * size, checked against the RGB its samples mean (alpha dropped, 16 bits to
 * the high byte, gray spread to 8 bits, palette looked up). */
static void check_png(pk_decoder *d, int color, int depth, int interlace, int with_trns)
{
    const uint32_t w = 23, h = 17;
    static const int channels[] = {1, 0, 3, 1, 2, 0, 4}; /* by colour type */
    int ch = channels[color];
    size_t row = ((size_t)w * ch * depth + 7) / 8;
    uint8_t *raw = calloc(h, row);
    uint8_t *want = tu_xmalloc((size_t)w * h * 3);
    struct spng_plte plte = {0};
    struct spng_trns trns = {0};
    uint64_t seed = (uint64_t)(color * 100 + depth * 10 + interlace);
    uint32_t maxv = (1u << depth) - 1;
    if (color == SPNG_COLOR_TYPE_INDEXED) {
        plte.n_entries = 1u << depth;
        for (uint32_t i = 0; i < plte.n_entries; i++) {
            plte.entries[i].red = (uint8_t)tu_rng_next(&seed);
            plte.entries[i].green = (uint8_t)tu_rng_next(&seed);
            plte.entries[i].blue = (uint8_t)tu_rng_next(&seed);
            trns.type3_alpha[i] = (uint8_t)(i * 37);
        }
        trns.n_type3_entries = plte.n_entries;
    }
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            uint32_t s[4] = {0};
            for (int c = 0; c < ch; c++) {
                s[c] = (uint32_t)tu_rng_next(&seed) & maxv;
                put_sample(raw + y * row, x * (uint32_t)ch + (uint32_t)c, depth, s[c]);
            }
            uint8_t *px = want + ((size_t)y * w + x) * 3;
            if (color == SPNG_COLOR_TYPE_INDEXED) {
                px[0] = plte.entries[s[0]].red, px[1] = plte.entries[s[0]].green,
                px[2] = plte.entries[s[0]].blue;
            } else if (color == SPNG_COLOR_TYPE_GRAYSCALE || color == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA) {
                uint8_t g = (uint8_t)(depth == 16 ? s[0] >> 8 : s[0] * 255 / maxv);
                px[0] = px[1] = px[2] = g;
            } else {
                for (int c = 0; c < 3; c++) px[c] = (uint8_t)(depth == 16 ? s[c] >> 8 : s[c]);
            }
        }
    if (with_trns && color == SPNG_COLOR_TYPE_TRUECOLOR) trns.red = 5, trns.green = 6, trns.blue = 7;
    if (with_trns && color == SPNG_COLOR_TYPE_GRAYSCALE) trns.gray = 1;
    size_t len;
    uint8_t *png =
        png_encode(raw, h * row, w, h, color, depth, interlace,
                   color == SPNG_COLOR_TYPE_INDEXED ? &plte : NULL, with_trns ? &trns : NULL, &len);
    /* stretch to 23x23 would resample; fit keeps 23x17 as it is and pads */
    pk_params p = params(w, PK_RESIZE_FIT);
    p.fill[0] = 1, p.fill[1] = 2, p.fill[2] = 3;
    uint32_t ow, oh;
    uint8_t *got = process_ok(d, png, len, &p, &ow, &oh);
    ck_assert_uint_eq(ow, w);
    ck_assert_uint_eq(oh, h);
    uint32_t pad = (w - h) / 2;
    for (uint32_t y = 0; y < w; y++)
        for (uint32_t x = 0; x < w; x++) {
            const uint8_t *g = got + ((size_t)y * w + x) * 3;
            if (y < pad || y >= pad + h) {
                ck_assert_msg(g[0] == 1 && g[1] == 2 && g[2] == 3, "padding at (%u,%u)", x, y);
                continue;
            }
            const uint8_t *e = want + ((size_t)(y - pad) * w + x) * 3;
            ck_assert_msg(memcmp(g, e, 3) == 0,
                          "colour %d depth %d interlace %d: (%u,%u) is %d,%d,%d, want %d,%d,%d", color, depth,
                          interlace, x, y - pad, g[0], g[1], g[2], e[0], e[1], e[2]);
        }
    free(got);
    free(png);
    free(want);
    free(raw);
}

START_TEST(png_flavours_exact)
{
    static const struct {
        int color, depth;
    } f[] = {
        {SPNG_COLOR_TYPE_GRAYSCALE, 1},        {SPNG_COLOR_TYPE_GRAYSCALE, 2},
        {SPNG_COLOR_TYPE_GRAYSCALE, 4},        {SPNG_COLOR_TYPE_GRAYSCALE, 8},
        {SPNG_COLOR_TYPE_GRAYSCALE, 16},       {SPNG_COLOR_TYPE_GRAYSCALE_ALPHA, 8},
        {SPNG_COLOR_TYPE_GRAYSCALE_ALPHA, 16}, {SPNG_COLOR_TYPE_INDEXED, 1},
        {SPNG_COLOR_TYPE_INDEXED, 2},          {SPNG_COLOR_TYPE_INDEXED, 4},
        {SPNG_COLOR_TYPE_INDEXED, 8},          {SPNG_COLOR_TYPE_TRUECOLOR, 8},
        {SPNG_COLOR_TYPE_TRUECOLOR, 16},       {SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, 8},
        {SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, 16},
    };
    pk_decoder *d = pk_decoder_new();
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        for (int interlace = 0; interlace < 2; interlace++)
            for (int trns = 0; trns < 2; trns++) {
                int has_alpha = f[i].color == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA ||
                                f[i].color == SPNG_COLOR_TYPE_TRUECOLOR_ALPHA;
                if (trns && has_alpha) continue; /* tRNS is not allowed with an alpha channel */
                check_png(d, f[i].color, f[i].depth, interlace, trns);
            }
    pk_decoder_free(d);
}
END_TEST

START_TEST(png_named_jpg_is_png)
{
    /* The bytes decide: a PNG decodes as PNG whatever the caller thinks it is. */
    pk_decoder *d = pk_decoder_new();
    tu_image im = tu_synth(20, 20, TU_DETAIL, 9);
    size_t len;
    uint8_t *png = png_rgb(&im, &len);
    ck_assert_int_eq(stk__img_sniff(png, len), STK_IMG_FMT_PNG);
    pk_params p = params(20, PK_RESIZE_STRETCH);
    uint8_t *got = process_ok(d, png, len, &p, NULL, NULL);
    ck_assert_int_eq(memcmp(got, im.px, 20 * 20 * 3), 0);
    free(got);
    free(png);
    tu_image_free(&im);
    pk_decoder_free(d);
}
END_TEST

START_TEST(png_corrupt_and_truncated)
{
    pk_decoder *d = pk_decoder_new();
    tu_image im = tu_synth(40, 30, TU_DETAIL, 10);
    size_t len;
    uint8_t *png = png_rgb(&im, &len);
    pk_params p = params(16, PK_RESIZE_SHORTER);
    /* inside the signature, inside IHDR, before IDAT, inside IDAT, before IEND's CRC */
    const size_t cuts[] = {4, 8, 20, 33, 41, len / 2, len - 20};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        process_fails(d, png, cuts[i], &p, PK_E_CORRUPT, "corrupt PNG: ");
    /* a flipped byte in the image data: the chunk CRC no longer matches */
    uint8_t *bad = dup_bytes(png, len);
    bad[len / 2] ^= 0x40;
    process_fails(d, bad, len, &p, PK_E_CORRUPT, "corrupt PNG: ");
    /* random bytes after a valid signature */
    uint64_t seed = 11;
    for (size_t i = 8; i < len; i++) bad[i] = (uint8_t)tu_rng_next(&seed);
    process_fails(d, bad, len, &p, PK_E_CORRUPT, "corrupt PNG: ");
    free(bad);
    free(png);
    tu_image_free(&im);
    pk_decoder_free(d);
}
END_TEST

START_TEST(png_bomb_refused_from_header)
{
    pk_decoder *d = pk_decoder_new();
    tu_image im = tu_synth(16, 16, TU_GRADIENT, 0);
    size_t len;
    uint8_t *png = png_rgb(&im, &len);
    /* IHDR: length at 8, type at 12, width 16, height 20, CRC 29 over type + data */
    put_be32(png + 16, 30000);
    put_be32(png + 20, 30000);
    put_be32(png + 29, crc32_png(png + 12, 17));
    pk_params p = params(32, PK_RESIZE_SHORTER);
    p.max_pixels = 100000000;
    process_fails(d, png, len, &p, PK_E_TOO_LARGE,
                  "image is 30000x30000 = 900000000 pixels, over --max-pixels 100000000");
    uint8_t out[32 * 32 * 3];
    char msg[MSG];
    uint32_t w = 0, h = 0;
    ck_assert_int_eq(pk_process(d, png, len, &p, out, &w, &h, msg, sizeof msg), PK_E_TOO_LARGE);
    ck_assert_uint_eq(w, 30000);
    ck_assert_uint_eq(h, 30000);
    free(png);
    tu_image_free(&im);
    pk_decoder_free(d);
}
END_TEST

/* ===================================================== WebP, GIF, BMP, TIFF */

/* The output of `data` equals that of a PNG of `want` (w x h RGB) under the
 * same params: the same pixels went into the same resize. */
static void same_as_png(pk_decoder *d, const uint8_t *data, size_t len, const uint8_t *want, uint32_t w,
                        uint32_t h, uint32_t size, const char *what)
{
    tu_image ref = {(uint8_t *)(uintptr_t)want, w, h};
    size_t plen;
    uint8_t *png = png_rgb(&ref, &plen);
    pk_params p = params(size, PK_RESIZE_SHORTER);
    uint32_t ow, oh, rw, rh;
    uint8_t *got = process_ok(d, data, len, &p, &ow, &oh), *exp = process_ok(d, png, plen, &p, &rw, &rh);
    ck_assert_msg(ow == w && oh == h, "%s: size %ux%u, expected %ux%u", what, ow, oh, w, h);
    size_t n = (size_t)size * size * 3, bad = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != exp[i];
    ck_assert_msg(bad == 0, "%s: %zu of %zu bytes differ from the PNG of the same pixels", what, bad, n);
    free(got);
    free(exp);
    free(png);
}

/* Every cut of a valid file short of its end fails with `want`; none crashes. */
static void cuts_fail(pk_decoder *d, const uint8_t *data, size_t len, const char *sub)
{
    pk_params p = params(16, PK_RESIZE_SHORTER);
    const size_t cuts[] = {14, 20, 40, len / 3, len / 2, len - 9};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        if (cuts[i] < len) process_fails(d, data, cuts[i], &p, PK_E_CORRUPT, sub);
}

/* A header over max_pixels is refused before any decoding. */
static void refused_over_max_pixels(pk_decoder *d, const uint8_t *data, size_t len, uint32_t w, uint32_t h)
{
    pk_params p = params(16, PK_RESIZE_SHORTER);
    p.max_pixels = (uint64_t)w * h - 1;
    char sub[96];
    snprintf(sub, sizeof sub, "image is %ux%u = %llu pixels, over --max-pixels", w, h,
             (unsigned long long)w * h);
    process_fails(d, data, len, &p, PK_E_TOO_LARGE, sub);
}

static uint8_t *webp_owned(uint8_t *out, size_t n, size_t *len)
{
    ck_assert_msg(out && n, "WebP encoding failed");
    uint8_t *copy = dup_bytes(out, n);
    WebPFree(out);
    *len = n;
    return copy;
}

/* Two frames, the first `a`, the second `b` (RGB, w x h, opaque). */
static uint8_t *webp_animated(const tu_image *a, const tu_image *b, size_t *len)
{
    WebPAnimEncoderOptions ao;
    WebPConfig c;
    ck_assert(WebPAnimEncoderOptionsInit(&ao) && WebPConfigInit(&c));
    c.lossless = 1;
    WebPAnimEncoder *enc = WebPAnimEncoderNew((int)a->w, (int)a->h, &ao);
    ck_assert_ptr_nonnull(enc);
    const tu_image *fr[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        WebPPicture pic;
        ck_assert(WebPPictureInit(&pic));
        pic.use_argb = 1;
        pic.width = (int)a->w, pic.height = (int)a->h;
        ck_assert(WebPPictureImportRGB(&pic, fr[k]->px, (int)(3 * a->w)));
        ck_assert(WebPAnimEncoderAdd(enc, &pic, 100 * k, &c));
        WebPPictureFree(&pic);
    }
    ck_assert(WebPAnimEncoderAdd(enc, NULL, 200, NULL));
    WebPData out;
    WebPDataInit(&out);
    ck_assert(WebPAnimEncoderAssemble(enc, &out));
    uint8_t *copy = dup_bytes(out.bytes, out.size);
    *len = out.size;
    WebPDataClear(&out);
    WebPAnimEncoderDelete(enc);
    return copy;
}

START_TEST(webp_lossless_lossy_animated)
{
    pk_decoder *d = pk_decoder_new();
    tu_image im = tu_synth(37, 23, TU_DETAIL, 5), other = tu_synth(37, 23, TU_FLAT, 0);
    uint8_t *out = NULL;
    size_t len;
    /* lossless: the very pixels */
    size_t n = WebPEncodeLosslessRGB(im.px, 37, 23, 3 * 37, &out);
    uint8_t *ll = webp_owned(out, n, &len);
    same_as_png(d, ll, len, im.px, 37, 23, 16, "lossless WebP");
    same_as_png(d, ll, len, im.px, 37, 23, 40, "lossless WebP, upscaled");
    cuts_fail(d, ll, len, "corrupt WebP: ");
    refused_over_max_pixels(d, ll, len, 37, 23);
    /* alpha dropped, not composited (alpha never 0: the encoder may change
     * the colour of fully transparent pixels) */
    uint8_t *rgba = tu_xmalloc((size_t)37 * 23 * 4);
    for (size_t i = 0; i < (size_t)37 * 23; i++) {
        memcpy(rgba + 4 * i, im.px + 3 * i, 3);
        rgba[4 * i + 3] = (uint8_t)(1 + i % 255);
    }
    n = WebPEncodeLosslessRGBA(rgba, 37, 23, 4 * 37, &out);
    uint8_t *la = webp_owned(out, n, &len);
    same_as_png(d, la, len, im.px, 37, 23, 16, "lossless WebP with alpha");
    free(la);
    free(rgba);
    /* lossy: close to the source */
    tu_image big = tu_synth(64, 64, TU_GRADIENT, 1);
    n = WebPEncodeRGB(big.px, 64, 64, 3 * 64, 90, &out);
    uint8_t *ly = webp_owned(out, n, &len);
    pk_params p = params(64, PK_RESIZE_STRETCH);
    uint8_t *got = process_ok(d, ly, len, &p, NULL, NULL);
    double db = psnr(got, big.px, (size_t)64 * 64 * 3);
    ck_assert_msg(db > 30, "lossy WebP: %.1f dB", db);
    free(got);
    cuts_fail(d, ly, len, "corrupt WebP: ");
    free(ly);
    /* animated: the first frame */
    uint8_t *an = webp_animated(&im, &other, &len);
    ck_assert_int_eq(stk__img_sniff(an, len), STK_IMG_FMT_WEBP);
    same_as_png(d, an, len, im.px, 37, 23, 16, "animated WebP");
    free(an);
    /* the RIFF header of a WebP whose data is garbage */
    ll[20] ^= 0xff, ll[21] ^= 0x5a;
    process_fails(d, ll, 30, &p, PK_E_CORRUPT, "corrupt WebP: ");
    free(ll);
    tu_image_free(&im);
    tu_image_free(&other);
    tu_image_free(&big);
    pk_decoder_free(d);
}
END_TEST

typedef struct {
    uint8_t *p;
    size_t len, cap;
} membuf;

static int gif_put(GifFileType *g, const GifByteType *b, int n)
{
    membuf *m = g->UserData;
    if (m->len + (size_t)n > m->cap) {
        m->cap = 2 * (m->len + (size_t)n);
        m->p = realloc(m->p, m->cap);
        ck_assert_ptr_nonnull(m->p);
    }
    memcpy(m->p + m->len, b, (size_t)n);
    m->len += (size_t)n;
    return n;
}

/* A GIF of the w x h canvas: frames[k] of fw x fh at (x, y), indices into
 * the global palette (or its own, when local), optionally interlaced. */
typedef struct {
    uint32_t x, y, w, h;
    const uint8_t *idx;
    int local, interlace;
} gif_frame_spec;

static uint8_t *gif_encode(uint32_t w, uint32_t h, const GifColorType *pal, int bg, const gif_frame_spec *fr,
                           int nfr, size_t *len)
{
    membuf m = {NULL, 0, 0};
    int err = 0;
    GifFileType *g = EGifOpen(&m, gif_put, &err);
    ck_assert_ptr_nonnull(g);
    ColorMapObject *cm = GifMakeMapObject(256, pal);
    ck_assert_int_eq(EGifPutScreenDesc(g, (int)w, (int)h, 8, bg, cm), GIF_OK);
    for (int k = 0; k < nfr; k++) {
        const gif_frame_spec *f = &fr[k];
        ColorMapObject *lm = f->local ? GifMakeMapObject(256, pal + 256) : NULL;
        ck_assert_int_eq(EGifPutImageDesc(g, (int)f->x, (int)f->y, (int)f->w, (int)f->h, f->interlace, lm),
                         GIF_OK);
        static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
        for (int pass = 0; pass < (f->interlace ? 4 : 1); pass++)
            for (uint32_t r = f->interlace ? (uint32_t)start[pass] : 0; r < f->h;
                 r += f->interlace ? step[pass] : 1)
                ck_assert_int_eq(
                    EGifPutLine(g, (GifPixelType *)(uintptr_t)(f->idx + (size_t)r * f->w), (int)f->w),
                    GIF_OK);
        GifFreeMapObject(lm);
    }
    ck_assert_int_eq(EGifCloseFile(g, &err), GIF_OK);
    GifFreeMapObject(cm);
    *len = m.len;
    return m.p;
}

START_TEST(gif_first_frame)
{
    pk_decoder *d = pk_decoder_new();
    enum { W = 29, H = 21 };
    GifColorType pal[512]; /* global, then a local palette */
    uint64_t seed = 3;
    for (int i = 0; i < 512; i++)
        pal[i] = (GifColorType){(GifByteType)tu_rng_next(&seed), (GifByteType)tu_rng_next(&seed),
                                (GifByteType)tu_rng_next(&seed)};
    uint8_t idx[W * H], idx2[W * H], want[W * H * 3];
    for (int i = 0; i < W * H; i++) idx[i] = (uint8_t)tu_rng_next(&seed), idx2[i] = (uint8_t)(255 - idx[i]);
    for (int local = 0; local < 2; local++)
        for (int interlace = 0; interlace < 2; interlace++) {
            /* both frames local or neither: giflib 5.2's encoder leaks a local map that a
             * frame without one follows */
            gif_frame_spec fr[2] = {{0, 0, W, H, idx, local, interlace}, {0, 0, W, H, idx2, local, 0}};
            for (int i = 0; i < W * H; i++) {
                const GifColorType *c = &pal[256 * local + idx[i]];
                want[3 * i] = c->Red, want[3 * i + 1] = c->Green, want[3 * i + 2] = c->Blue;
            }
            size_t len;
            uint8_t *gif = gif_encode(W, H, pal, 0, fr, 2, &len); /* two frames: the first counts */
            char what[64];
            snprintf(what, sizeof what, "GIF local %d interlace %d", local, interlace);
            same_as_png(d, gif, len, want, W, H, 16, what);
            if (!local && !interlace) refused_over_max_pixels(d, gif, len, W, H);
            free(gif);
            /* cut inside the one frame (a cut in a second frame is not read) */
            gif = gif_encode(W, H, pal, 0, fr, 1, &len);
            cuts_fail(d, gif, len - 1, "corrupt GIF: ");
            free(gif);
        }
    /* a frame smaller than the canvas: the rest is the background colour */
    gif_frame_spec small = {5, 3, 10, 8, idx, 0, 0};
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            int in = x >= 5 && x < 15 && y >= 3 && y < 11;
            const GifColorType *c = &pal[in ? idx[(y - 3) * 10 + (x - 5)] : 7];
            uint8_t *o = want + 3 * (y * W + x);
            o[0] = c->Red, o[1] = c->Green, o[2] = c->Blue;
        }
    size_t len;
    uint8_t *gif = gif_encode(W, H, pal, 7, &small, 1, &len);
    same_as_png(d, gif, len, want, W, H, 16, "GIF frame inside the canvas");
    free(gif);
    /* no image at all */
    gif = gif_encode(W, H, pal, 0, NULL, 0, &len);
    pk_params p = params(16, PK_RESIZE_SHORTER);
    process_fails(d, gif, len, &p, PK_E_CORRUPT, "corrupt GIF: no image in the file");
    free(gif);
    pk_decoder_free(d);
}
END_TEST

/* ------------------------------------------------------------------ BMP */

static void le16_put(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void le32_put(uint8_t *p, uint32_t v) { le16_put(p, v), le16_put(p + 2, v >> 16); }

typedef struct {
    uint32_t hs, bpp, comp; /* info header size, bits per pixel, compression */
    int top_down;
    uint32_t mask[4]; /* bit fields (R, G, B, A) */
} bmp_spec;

/* A BMP of `px` (w x h) indices (bpp <= 8, with palette `pal` of 1 << bpp
 * RGB entries) or RGB triples; fills want with what a reader must give. */
static uint8_t *bmp_encode(const bmp_spec *s, uint32_t w, uint32_t h, const uint8_t *px, const uint8_t *pal,
                           uint8_t *want, size_t *len)
{
    uint32_t ncol = s->bpp <= 8 ? 1u << s->bpp : 0, entry = s->hs == 12 ? 3 : 4;
    int fields = s->comp == 3;
    size_t masks = fields && s->hs == 40 ? 12 : 0, pal_off = 14 + s->hs + masks,
           data_off = pal_off + ncol * entry;
    size_t stride = ((size_t)w * s->bpp + 31) / 32 * 4, cap = data_off + (stride + 4 * (size_t)w + 16) * h;
    uint8_t *b = calloc(1, cap);
    ck_assert_ptr_nonnull(b);
    b[0] = 'B', b[1] = 'M';
    le32_put(b + 10, (uint32_t)data_off);
    le32_put(b + 14, s->hs);
    if (s->hs == 12) {
        le16_put(b + 18, w), le16_put(b + 20, h), le16_put(b + 22, 1), le16_put(b + 24, s->bpp);
    } else {
        le32_put(b + 18, w), le32_put(b + 22, s->top_down ? (uint32_t) - (int32_t)h : h);
        le16_put(b + 26, 1), le16_put(b + 28, s->bpp), le32_put(b + 30, s->comp);
        if (fields)
            for (int k = 0; k < (s->hs >= 56 ? 4 : 3); k++) le32_put(b + 54 + 4 * k, s->mask[k]);
    }
    for (uint32_t i = 0; i < ncol; i++) {
        uint8_t *e = b + pal_off + i * entry;
        e[0] = pal[3 * i + 2], e[1] = pal[3 * i + 1], e[2] = pal[3 * i];
    }
    size_t at = data_off;
    for (uint32_t y = 0; y < h; y++) { /* file row y: image row h - 1 - y unless top-down */
        uint32_t r = s->top_down ? y : h - 1 - y;
        if (s->comp == 1 || s->comp == 2) { /* RLE8 / RLE4: 4 literal pixels, runs of 2, end of line */
            const uint8_t *q = px + (size_t)r * w;
            b[at++] = 0, b[at++] = 4;
            if (s->comp == 1) b[at++] = q[0], b[at++] = q[1], b[at++] = q[2], b[at++] = q[3];
            else b[at++] = (uint8_t)(q[0] << 4 | q[1]), b[at++] = (uint8_t)(q[2] << 4 | q[3]);
            for (uint32_t x = 4; x < w; x += 2) {
                uint32_t n = x + 1 < w ? 2 : 1, a = px[r * w + x], c = n == 2 ? px[r * w + x + 1] : 0;
                if (s->comp == 1 && n == 2 && a != c) { /* absolute mode needs 3+: two runs of 1 */
                    b[at++] = 1, b[at++] = (uint8_t)a, b[at++] = 1, b[at++] = (uint8_t)c;
                } else {
                    b[at++] = (uint8_t)n, b[at++] = (uint8_t)(s->comp == 2 ? a << 4 | c : a);
                }
            }
            b[at++] = 0, b[at++] = y + 1 == h ? 1 : 0;
            continue;
        }
        uint8_t *row = b + at;
        for (uint32_t x = 0; x < w; x++) {
            const uint8_t *c = s->bpp <= 8 ? NULL : px + 3 * ((size_t)r * w + x);
            if (s->bpp <= 8) {
                uint32_t per = 8 / s->bpp;
                row[x / per] |= (uint8_t)(px[r * w + x] << (8 - s->bpp * (1 + x % per)));
            } else if (s->bpp == 24) {
                row[3 * x] = c[2], row[3 * x + 1] = c[1], row[3 * x + 2] = c[0];
            } else {
                uint32_t v = 0;
                const uint32_t *m = fields         ? s->mask
                                    : s->bpp == 16 ? (const uint32_t[4]){0x7c00, 0x3e0, 0x1f, 0}
                                                   : (const uint32_t[4]){0xff0000, 0xff00, 0xff, 0};
                for (int k = 0; k < 3; k++) {
                    unsigned sh = 0;
                    while (!((m[k] >> sh) & 1)) sh++;
                    v |= ((uint32_t)c[k] * (m[k] >> sh) / 255) << sh;
                }
                if (s->bpp == 16) le16_put(row + 2 * x, v);
                else le32_put(row + 4 * x, v | (fields ? 0 : 0xff000000u));
            }
        }
        at += stride;
    }
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            uint8_t *o = want + 3 * ((size_t)y * w + x);
            if (s->bpp <= 8) {
                memcpy(o, pal + 3 * px[y * w + x], 3);
            } else if (s->bpp == 24 || (s->bpp == 32 && !fields)) {
                memcpy(o, px + 3 * ((size_t)y * w + x), 3);
            } else { /* quantised to the field, then scaled back as Pillow does (v * 255 / max) */
                const uint32_t *m = fields ? s->mask : (const uint32_t[4]){0x7c00, 0x3e0, 0x1f, 0};
                for (int k = 0; k < 3; k++) {
                    unsigned sh = 0;
                    while (!((m[k] >> sh) & 1)) sh++;
                    uint32_t max = m[k] >> sh;
                    o[k] = (uint8_t)(px[3 * ((size_t)y * w + x) + k] * max / 255 * 255 / max);
                }
            }
        }
    *len = at;
    return b;
}

START_TEST(bmp_variants)
{
    static const bmp_spec v[] = {
        {40, 24, 0, 0, {0}},
        {40, 24, 0, 1, {0}},
        {12, 24, 0, 0, {0}},
        {124, 24, 0, 0, {0}},
        {40, 32, 0, 0, {0}},
        {40, 16, 0, 0, {0}},
        {40, 8, 0, 0, {0}},
        {40, 4, 0, 0, {0}},
        {40, 1, 0, 0, {0}},
        {12, 8, 0, 0, {0}},
        {40, 8, 1, 0, {0}},
        {40, 4, 2, 0, {0}},
        {40, 16, 3, 0, {0xf800, 0x7e0, 0x1f, 0}},
        {40, 32, 3, 0, {0xff0000, 0xff00, 0xff, 0}},
        {108, 32, 3, 1, {0xff, 0xff00, 0xff0000, 0xff000000u}},
        {56, 16, 3, 0, {0x7c00, 0x3e0, 0x1f, 0x8000}},
    };
    pk_decoder *d = pk_decoder_new();
    enum { W = 23, H = 17 };
    tu_image im = tu_synth(W, H, TU_DETAIL, 9);
    uint8_t pal[256 * 3], idx[W * H], want[W * H * 3];
    uint64_t seed = 5;
    for (int i = 0; i < 256 * 3; i++) pal[i] = (uint8_t)tu_rng_next(&seed);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        for (int k = 0; k < W * H; k++)
            idx[k] = (uint8_t)(tu_rng_next(&seed) & ((1u << (v[i].bpp <= 8 ? v[i].bpp : 8)) - 1));
        size_t len;
        uint8_t *bmp = bmp_encode(&v[i], W, H, v[i].bpp <= 8 ? idx : im.px, pal, want, &len);
        ck_assert_int_eq(stk__img_sniff(bmp, len), STK_IMG_FMT_BMP);
        char what[96];
        snprintf(what, sizeof what, "BMP header %u, %u bits, compression %u%s", v[i].hs, v[i].bpp, v[i].comp,
                 v[i].top_down ? ", top-down" : "");
        same_as_png(d, bmp, len, want, W, H, 12, what);
        if (i == 0 || i == 10) {
            cuts_fail(d, bmp, len, "corrupt BMP: ");
            refused_over_max_pixels(d, bmp, len, W, H);
        }
        free(bmp);
    }
    /* what BMP can hold that is not read here */
    size_t len;
    bmp_spec jpg = {40, 24, 4, 0, {0}};
    uint8_t *bmp = bmp_encode(&v[0], W, H, im.px, pal, want, &len);
    le32_put(bmp + 30, jpg.comp);
    pk_params p = params(16, PK_RESIZE_SHORTER);
    process_fails(d, bmp, len, &p, PK_E_UNSUPPORTED, "unsupported BMP: compression 4");
    le32_put(bmp + 30, 0);
    le32_put(bmp + 18, 0x7fffffff);
    le32_put(bmp + 22, 0x7fffffff);
    process_fails(d, bmp, len, &p, PK_E_TOO_LARGE, "over --max-pixels");
    free(bmp);
    tu_image_free(&im);
    pk_decoder_free(d);
}
END_TEST

/* ----------------------------------------------------------------- TIFF */

typedef struct {
    uint16_t photometric, bits, spp, planar, compression;
    uint32_t tile; /* 0: strips of 5 rows */
    int pages;
} tiff_spec;

/* Write a TIFF of im (grey: its green channel; palette: idx) to a scratch
 * file and read it back; fills want. */
static uint8_t *tiff_encode(const tiff_spec *s, const tu_image *im, const uint8_t *idx, const uint16_t *cmap,
                            uint8_t *want, size_t *len)
{
    char dir[TU_PATH], path[TU_PATH + 16];
    tu_scratch(dir, sizeof dir, "tiff");
    snprintf(path, sizeof path, "%s/t.tif", dir);
    TIFF *t = TIFFOpen(path, "w");
    ck_assert_ptr_nonnull(t);
    uint32_t w = im->w, h = im->h;
    for (int page = 0; page < s->pages; page++) {
        TIFFSetField(t, TIFFTAG_IMAGEWIDTH, w);
        TIFFSetField(t, TIFFTAG_IMAGELENGTH, h);
        TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, s->bits);
        TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, s->spp);
        TIFFSetField(t, TIFFTAG_PHOTOMETRIC, s->photometric);
        TIFFSetField(t, TIFFTAG_PLANARCONFIG, s->planar);
        TIFFSetField(t, TIFFTAG_COMPRESSION, s->compression);
        if (s->spp == 4 && s->photometric == PHOTOMETRIC_RGB) { /* alpha that varies: dropped, not applied */
            uint16_t extra = EXTRASAMPLE_UNASSALPHA;
            TIFFSetField(t, TIFFTAG_EXTRASAMPLES, 1, &extra);
        }
        if (s->photometric == PHOTOMETRIC_PALETTE)
            TIFFSetField(t, TIFFTAG_COLORMAP, cmap, cmap + 256, cmap + 512);
        if (s->tile) {
            TIFFSetField(t, TIFFTAG_TILEWIDTH, s->tile);
            TIFFSetField(t, TIFFTAG_TILELENGTH, s->tile);
        } else {
            TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 5);
        }
        if (s->pages > 1) TIFFSetField(t, TIFFTAG_SUBFILETYPE, FILETYPE_PAGE);
        size_t bps = s->bits / 8, n = (size_t)w * h;
        /* samples: page 0 is im, later pages its inverse */
        uint8_t *smp = tu_xmalloc(n * s->spp * bps);
        for (size_t i = 0; i < n; i++)
            for (unsigned c = 0; c < s->spp; c++) {
                unsigned v = s->photometric == PHOTOMETRIC_PALETTE ? idx[i]
                             : s->photometric != PHOTOMETRIC_RGB   ? im->px[3 * i + 1]
                             : c < 3                               ? im->px[3 * i + c]
                                                                   : (unsigned)(i * 7 % 256);
                if (page) v = 255 - v;
                size_t at = s->planar == PLANARCONFIG_SEPARATE ? c * n + i : i * s->spp + c;
                if (bps == 2) ((uint16_t *)(void *)smp)[at] = (uint16_t)(v * 257);
                else smp[at] = (uint8_t)v;
            }
        unsigned nplanes = s->planar == PLANARCONFIG_SEPARATE ? s->spp : 1,
                 per = s->planar == PLANARCONFIG_SEPARATE ? 1 : s->spp;
        for (unsigned pl = 0; pl < nplanes; pl++) {
            const uint8_t *base = smp + (size_t)pl * n * bps;
            if (s->tile) {
                uint8_t *tb = tu_xmalloc((size_t)s->tile * s->tile * per * bps);
                for (uint32_t ty = 0; ty < h; ty += s->tile)
                    for (uint32_t tx = 0; tx < w; tx += s->tile) {
                        memset(tb, 0, (size_t)s->tile * s->tile * per * bps);
                        for (uint32_t y = ty; y < ty + s->tile && y < h; y++)
                            for (uint32_t x = tx; x < tx + s->tile && x < w; x++)
                                memcpy(tb + (((size_t)(y - ty) * s->tile + (x - tx)) * per) * bps,
                                       base + ((size_t)y * w + x) * per * bps, per * bps);
                        ck_assert(TIFFWriteTile(t, tb, tx, ty, 0, (uint16_t)pl) >= 0);
                    }
                free(tb);
            } else {
                for (uint32_t y = 0; y < h; y++)
                    ck_assert(TIFFWriteScanline(t, (void *)(base + (size_t)y * w * per * bps), y,
                                                (uint16_t)pl) >= 0);
            }
        }
        free(smp);
        ck_assert(TIFFWriteDirectory(t));
    }
    TIFFClose(t);
    for (size_t i = 0; i < (size_t)w * h; i++) { /* what page 0 must read as */
        uint8_t *o = want + 3 * i;
        if (s->photometric == PHOTOMETRIC_PALETTE)
            for (int c = 0; c < 3; c++) o[c] = (uint8_t)(cmap[256 * c + idx[i]] >> 8);
        else if (s->photometric == PHOTOMETRIC_MINISBLACK) o[0] = o[1] = o[2] = im->px[3 * i + 1];
        else if (s->photometric == PHOTOMETRIC_MINISWHITE)
            o[0] = o[1] = o[2] = (uint8_t)(255 - im->px[3 * i + 1]);
        else memcpy(o, im->px + 3 * i, 3);
    }
    uint8_t *data = tu_read(path, len);
    unlink(path);
    return data;
}

START_TEST(tiff_variants)
{
    static const tiff_spec v[] = {
        {PHOTOMETRIC_RGB, 8, 3, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 0, 1},
        {PHOTOMETRIC_RGB, 8, 3, PLANARCONFIG_CONTIG, COMPRESSION_LZW, 0, 1},
        {PHOTOMETRIC_RGB, 8, 3, PLANARCONFIG_CONTIG, COMPRESSION_ADOBE_DEFLATE, 16, 1},
        {PHOTOMETRIC_RGB, 8, 3, PLANARCONFIG_SEPARATE, COMPRESSION_PACKBITS, 0, 1},
        {PHOTOMETRIC_RGB, 16, 3, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 0, 1},
        {PHOTOMETRIC_RGB, 8, 4, PLANARCONFIG_CONTIG, COMPRESSION_LZW, 0, 1},
        {PHOTOMETRIC_MINISBLACK, 8, 1, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 0, 1},
        {PHOTOMETRIC_MINISBLACK, 16, 1, PLANARCONFIG_CONTIG, COMPRESSION_LZW, 0, 1},
        {PHOTOMETRIC_MINISBLACK, 16, 1, PLANARCONFIG_CONTIG, COMPRESSION_LZW, 16,
         1}, /* libtiff RGBA misreads */
        {PHOTOMETRIC_MINISWHITE, 8, 1, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 0, 1},
        {PHOTOMETRIC_RGB, 16, 4, PLANARCONFIG_SEPARATE, COMPRESSION_ADOBE_DEFLATE, 16, 1},
        {PHOTOMETRIC_RGB, 8, 3, PLANARCONFIG_CONTIG, COMPRESSION_LZW, 16, 1},
        {PHOTOMETRIC_PALETTE, 8, 1, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 0, 1},
        {PHOTOMETRIC_RGB, 8, 3, PLANARCONFIG_CONTIG, COMPRESSION_LZW, 0, 3},
    };
    pk_decoder *d = pk_decoder_new();
    enum { W = 26, H = 19 };
    tu_image im = tu_synth(W, H, TU_DETAIL, 4);
    uint8_t idx[W * H], want[W * H * 3];
    uint16_t cmap[768];
    uint64_t seed = 8;
    for (int i = 0; i < 768; i++) cmap[i] = (uint16_t)(tu_rng_next(&seed) & 0xff) * 257;
    for (int i = 0; i < W * H; i++) idx[i] = (uint8_t)tu_rng_next(&seed);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        size_t len;
        uint8_t *tif = tiff_encode(&v[i], &im, idx, cmap, want, &len);
        ck_assert_int_eq(stk__img_sniff(tif, len), STK_IMG_FMT_TIFF);
        char what[96];
        snprintf(what, sizeof what,
                 "TIFF photometric %u, %u bits x %u, planar %u, compression %u, tile %u, %d pages",
                 v[i].photometric, v[i].bits, v[i].spp, v[i].planar, v[i].compression, v[i].tile, v[i].pages);
        same_as_png(d, tif, len, want, W, H, 12, what);
        if (i == 1) {
            cuts_fail(d, tif, len, "corrupt TIFF: ");
            refused_over_max_pixels(d, tif, len, W, H);
        }
        free(tif);
    }
    tu_image_free(&im);
    pk_decoder_free(d);
}
END_TEST

START_TEST(other_formats_survive_garbage)
{
    /* a valid magic number followed by noise: refused, never a crash, and
     * the decoder still decodes the next good file */
    static const char *const magic[] = {"RIFF\x40\x00\x00\x00WEBPVP8 ", "GIF89a", "II*\x00", "MM\x00*",
                                        "BM\x40\x00\x00\x00\x00\x00\x00\x00\x36\x00\x00\x00\x28\x00\x00\x00"};
    static const size_t mlen[] = {16, 6, 4, 4, 18};
    pk_decoder *d = pk_decoder_new();
    pk_params p = params(16, PK_RESIZE_SHORTER);
    uint64_t seed = 99;
    uint8_t buf[600], out[16 * 16 * 3];
    char msg[MSG];
    for (int round = 0; round < 200; round++) {
        int k = round % 5;
        memcpy(buf, magic[k], mlen[k]);
        for (size_t i = mlen[k]; i < sizeof buf; i++) buf[i] = (uint8_t)tu_rng_next(&seed);
        int rc =
            pk_process(d, buf, 40 + (size_t)(tu_rng_next(&seed) % 560), &p, out, NULL, NULL, msg, sizeof msg);
        ck_assert_msg(rc == PK_E_CORRUPT || rc == PK_E_UNSUPPORTED || rc == PK_E_TOO_LARGE || rc == PK_OK,
                      "round %d: status %d (%s)", round, rc, msg);
    }
    tu_image im = tu_synth(20, 20, TU_GRADIENT, 0);
    size_t len;
    uint8_t *png = png_rgb(&im, &len);
    free(process_ok(d, png, len, &p, NULL, NULL));
    free(png);
    tu_image_free(&im);
    pk_decoder_free(d);
}
END_TEST

/* PNG (no DCT scaling) through pk_process in shorter mode against the
 * reference resize and torchvision's crop. */
static void check_shorter(pk_decoder *d, uint32_t w, uint32_t h, uint32_t n)
{
    tu_image im = tu_synth(w, h, TU_DETAIL, w * 1000 + h);
    size_t len;
    uint8_t *png = png_rgb(&im, &len);
    pk_params p = params(n, PK_RESIZE_SHORTER);
    uint32_t ow, oh, rw, rh, left, top;
    uint8_t *got = process_ok(d, png, len, &p, &ow, &oh);
    ck_assert_uint_eq(ow, w);
    ck_assert_uint_eq(oh, h);
    tu_tv_geometry(w, h, n, &rw, &rh, &left, &top);
    double *ref = tu_ref_resize(im.px, w, h, rw, rh);
    char what[64];
    snprintf(what, sizeof what, "%ux%u shorter %u (crop %u,%u)", w, h, n, left, top);
    tu_compare_ref(got, n, n, (size_t)n * 3, ref, rw, left, top, 1, what);
    free(ref);
    free(got);
    free(png);
    tu_image_free(&im);
}

START_TEST(process_shorter_crops)
{
    pk_decoder *d = pk_decoder_new();
    check_shorter(d, 120, 80, 48); /* landscape: 72x48, left 12 */
    check_shorter(d, 80, 120, 48); /* portrait: 48x72, top 12 */
    check_shorter(d, 101, 48, 48); /* no resize, left round(26.5) = 26 */
    check_shorter(d, 48, 103, 48); /* no resize, top round(27.5) = 28 */
    check_shorter(d, 97, 61, 40);  /* 63x40, left round(11.5) = 12 */
    check_shorter(d, 61, 97, 40);
    check_shorter(d, 30, 20, 45); /* upscaling: 67x45 */
    check_shorter(d, 64, 64, 64); /* identity */
    pk_decoder_free(d);
}
END_TEST

START_TEST(process_fit_pads)
{
    pk_decoder *d = pk_decoder_new();
    static const uint32_t dims[][2] = {{120, 80}, {80, 120}, {50, 50}, {200, 9}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        uint32_t w = dims[i][0], h = dims[i][1], n = 48;
        tu_image im = tu_synth(w, h, TU_DETAIL, 19 + i);
        size_t len;
        uint8_t *png = png_rgb(&im, &len);
        pk_params p = params(n, PK_RESIZE_FIT);
        p.fill[0] = 10, p.fill[1] = 20, p.fill[2] = 30;
        uint8_t *got = process_ok(d, png, len, &p, NULL, NULL);
        pk_layout l;
        pk_layout_compute(&p, w, h, &l);
        double *ref = tu_ref_resize(im.px, w, h, (uint32_t)l.resized_w, (uint32_t)l.resized_h);
        tu_compare_ref(got + ((size_t)l.pad_y * n + l.pad_x) * 3, l.w, l.h, (size_t)n * 3, ref, l.w, 0, 0, 1,
                       "fit interior");
        for (uint32_t y = 0; y < n; y++)
            for (uint32_t x = 0; x < n; x++) {
                if (x >= l.pad_x && x < l.pad_x + l.w && y >= l.pad_y && y < l.pad_y + l.h) continue;
                const uint8_t *g = got + ((size_t)y * n + x) * 3;
                ck_assert_msg(g[0] == 10 && g[1] == 20 && g[2] == 30, "%ux%u: (%u,%u) is not fill", w, h, x,
                              y);
            }
        /* centred: the margins differ by at most one pixel */
        ck_assert_uint_le(n - l.w - 2 * l.pad_x, 1);
        ck_assert_uint_le(n - l.h - 2 * l.pad_y, 1);
        free(ref);
        free(got);
        free(png);
        tu_image_free(&im);
    }
    pk_decoder_free(d);
}
END_TEST

START_TEST(process_stretch)
{
    pk_decoder *d = pk_decoder_new();
    tu_image im = tu_synth(120, 80, TU_DETAIL, 23);
    size_t len;
    uint8_t *png = png_rgb(&im, &len);
    pk_params p = params(48, PK_RESIZE_STRETCH);
    uint8_t *got = process_ok(d, png, len, &p, NULL, NULL);
    double *ref = tu_ref_resize(im.px, 120, 80, 48, 48);
    tu_compare_ref(got, 48, 48, 48 * 3, ref, 48, 0, 0, 1, "stretch 120x80 -> 48x48");
    free(ref);
    free(got);
    free(png);
    tu_image_free(&im);
    pk_decoder_free(d);
}
END_TEST

START_TEST(decoder_reuse_matches_fresh)
{
    /* scratch buffers and weight tables carried between images of changing
     * sizes and formats never leak into the next result */
    pk_decoder *shared = pk_decoder_new();
    tu_image a = tu_synth(120, 90, TU_DETAIL, 24), b = tu_synth(64, 200, TU_DETAIL, 25),
             c = tu_synth(300, 301, TU_GRADIENT, 26);
    size_t la, lb, lc;
    uint8_t *ja = jpeg_encode(a.px, a.w, a.h, TJPF_RGB, TJSAMP_420, 90, 0, &la);
    uint8_t *pb = png_rgb(&b, &lb);
    uint8_t *jc = jpeg_encode(c.px, c.w, c.h, TJPF_RGB, TJSAMP_444, 90, TJFLAG_PROGRESSIVE, &lc);
    const uint8_t *files[] = {ja, pb, jc};
    const size_t lens[] = {la, lb, lc};
    for (int round = 0; round < 4; round++)
        for (int mode = PK_RESIZE_SHORTER; mode <= PK_RESIZE_FIT; mode++)
            for (int f = 0; f < 3; f++) {
                pk_params p = params(round % 2 ? 56 : 64, (pk_resize_mode)mode);
                pk_decoder *fresh = pk_decoder_new();
                uint8_t *x = process_ok(shared, files[f], lens[f], &p, NULL, NULL);
                uint8_t *y = process_ok(fresh, files[f], lens[f], &p, NULL, NULL);
                ck_assert_msg(memcmp(x, y, (size_t)p.size * p.size * 3) == 0, "file %d mode %d round %d", f,
                              mode, round);
                free(x);
                free(y);
                pk_decoder_free(fresh);
            }
    free(ja);
    free(pb);
    free(jc);
    tu_image_free(&a);
    tu_image_free(&b);
    tu_image_free(&c);
    pk_decoder_free(shared);
}
END_TEST

START_TEST(bad_arguments)
{
    pk_decoder *d = pk_decoder_new();
    tu_image im = tu_synth(8, 8, TU_FLAT, 0);
    size_t len;
    uint8_t *png = png_rgb(&im, &len);
    uint8_t out[64 * 64 * 3];
    char msg[MSG];
    pk_params p = params(0, PK_RESIZE_SHORTER);
    ck_assert_int_eq(pk_process(d, png, len, &p, out, NULL, NULL, msg, sizeof msg), PK_E_ARG);
    ck_assert_ptr_nonnull(strstr(msg, "invalid size 0"));
    p = params(PK_MAX_SIZE + 1, PK_RESIZE_SHORTER);
    ck_assert_int_eq(pk_process(d, png, len, &p, out, NULL, NULL, msg, sizeof msg), PK_E_ARG);
    p = params(64, (pk_resize_mode)7);
    ck_assert_int_eq(pk_process(d, png, len, &p, out, NULL, NULL, msg, sizeof msg), PK_E_ARG);
    p = params(64, PK_RESIZE_SHORTER);
    ck_assert_int_eq(pk_process(d, png, len, &p, NULL, NULL, NULL, msg, sizeof msg), PK_E_ARG);
    ck_assert_int_eq(pk_process(NULL, png, len, &p, out, NULL, NULL, msg, sizeof msg), PK_E_ARG);
    /* no message buffer at all is allowed */
    ck_assert_int_eq(pk_process(d, png, 5, &p, out, NULL, NULL, NULL, 0), PK_E_CORRUPT);
    /* a message buffer too small is cut, not overrun */
    char tiny[8];
    ck_assert_int_eq(pk_process(d, png, 5, &p, out, NULL, NULL, tiny, sizeof tiny), PK_E_CORRUPT);
    ck_assert_uint_eq(strlen(tiny), sizeof tiny - 1);
    for (int s = PK_OK; s <= PK_E_ARG + 1; s++) ck_assert_ptr_nonnull(pk_status_name(s));
    ck_assert_str_eq(pk_status_name(PK_E_CORRUPT), "corrupt image");
    pk_decoder_free(NULL);
    stk__resizer_free(NULL);
    free(png);
    tu_image_free(&im);
    pk_decoder_free(d);
}
END_TEST

TU_MAIN("pack_image",
        {.name = "formats", .tests = {sniff_magic_not_names, empty_file, unsupported_formats, bad_arguments}},
        {.name = "jpeg",
         .timeout = 120,
         .tests = {jpeg_flavours_exact, jpeg_grayscale_expands, jpeg_ycck_to_rgb,
                   jpeg_plain_cmyk_matches_pillow, jpeg_cjpeg_variants, jpeg_truncated, jpeg_garbage,
                   jpeg_bomb_refused_from_header, decoder_survives_bad_files, jpeg_dct_scaled,
                   jpeg_planned_region, jpeg_planar_close_to_rgb_route, jpeg_planar_saturated}},
        {.name = "png",
         .timeout = 60,
         .tests = {png_flavours_exact, png_named_jpg_is_png, png_corrupt_and_truncated,
                   png_bomb_refused_from_header}},
        {.name = "more",
         .timeout = 60,
         .tests = {webp_lossless_lossy_animated, gif_first_frame, bmp_variants, tiff_variants,
                   other_formats_survive_garbage}},
        {.name = "resize",
         .timeout = 120,
         .tests = {process_shorter_crops, process_fit_pads, process_stretch, decoder_reuse_matches_fresh}})
