/* fuzz_jpeg_splice - libFuzzer target: a region of a JPEG with restart
 * markers cut out as a JPEG of its own (image/jpeg_splice.c), and the
 * region decodes that use the cut (STK_IMG_JPEG_SPLICE, image/jpeg.c).
 *
 * Input: 12 bytes of parameters, then the stream (or the tile of an image).
 * Bytes 0-7 give the box (x, y, w, h: 16 bits each, little-endian), taken
 * as they are once and once folded into the frame the stream's header
 * claims; byte 8 the DCT scale num/8 (bits 0-2: num - 1), merged
 * upsampling (bit 3), stk__jpeg_decode_region instead of _plan at 8/8
 * (bit 4) and synthesis (bit 5). stk__jpeg_splice must answer a cut or
 * STK__JPEG_SPLICE_NO, never crash or read outside the stream, and a cut
 * must contain the box, lie inside the frame on MCU boundaries, be
 * shorter than the stream and carry a frame header of its own size. The
 * box's region is then decoded with and without SPLICE (decoders kept
 * across inputs, as a reader's worker keeps them): failures must say why,
 * and with merged upsampling, where both succeed, the pixels must be the
 * same (image.h's promise).
 *
 * With bit 5 the stream is made here instead: the rest of the input,
 * repeated, as the pixels of a (1 + byte 10) x (1 + byte 11) image,
 * compressed by libjpeg with the sampling (byte 9 % 9: 4:4:4, 4:2:2,
 * 4:2:0, 4:4:0, 4:1:1, greyscale, then chroma finer than luma, a luma
 * factor of 3, all 2 x 1) and restart interval (byte 9 / 9 % 6: 1, 2, 3
 * MCUs, 1, 2 rows, none) byte 9 picks. Both decodes must then succeed.
 *
 * The seeds (corpus/jpeg_splice): small restart-marked JPEGs at every
 * subsampling, made by cjpeg, and synthesis heads, each behind its 12-byte
 * head; tests/fuzz/jpeg_splice_seeds.py writes them. */
#include "image.h"
#include "jpeg_dims.h"

#include "fuzz_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#define HEAD 12
#define MAX_DECODE_PIXELS (1u << 24) /* frames larger than this are cut, not decoded */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t u16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

/* A restart-marked JPEG of w x h pixels tiled from px[0 .. n). */
static uint8_t *synth(const uint8_t *px, size_t n, uint32_t w, uint32_t h, unsigned pick, size_t *len)
{
    /* Y, Cb, Cr; Y 0: greyscale. The last three have no TurboJPEG name. */
    static const int samp[9][3][2] = {
        {{1, 1}, {1, 1}, {1, 1}}, {{2, 1}, {1, 1}, {1, 1}}, {{2, 2}, {1, 1}, {1, 1}},
        {{1, 2}, {1, 1}, {1, 1}}, {{4, 1}, {1, 1}, {1, 1}}, {{0, 0}, {0, 0}, {0, 0}},
        {{1, 1}, {2, 2}, {2, 1}}, {{3, 1}, {1, 1}, {1, 1}}, {{2, 1}, {2, 1}, {2, 1}},
    };
    static const unsigned ri[6][2] = {{1, 0}, {2, 0}, {3, 0}, {0, 1}, {0, 2}, {0, 0}};
    const int(*s)[2] = samp[pick % 9];
    const unsigned *r = ri[pick / 9 % 6];
    size_t rowb = (size_t)w * 3;
    uint8_t *img = malloc(rowb * h);
    CHECK(img != NULL);
    for (size_t i = 0; i < rowb * h; i++) img[i] = n ? px[i % n] : (uint8_t)(i * 37 + (i >> 7));
    struct jpeg_compress_struct cc;
    struct jpeg_error_mgr jerr;
    cc.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&cc);
    unsigned char *out = NULL;
    unsigned long on = 0;
    jpeg_mem_dest(&cc, &out, &on);
    cc.image_width = w;
    cc.image_height = h;
    cc.input_components = 3;
    cc.in_color_space = JCS_RGB;
    jpeg_set_defaults(&cc);
    jpeg_set_quality(&cc, 85, TRUE);
    if (!s[0][0]) {
        jpeg_set_colorspace(&cc, JCS_GRAYSCALE);
    } else {
        for (int c = 0; c < 3; c++) {
            cc.comp_info[c].h_samp_factor = s[c][0];
            cc.comp_info[c].v_samp_factor = s[c][1];
        }
    }
    cc.restart_interval = r[0];
    cc.restart_in_rows = (int)r[1];
    jpeg_start_compress(&cc, TRUE);
    for (uint32_t y = 0; y < h; y++) {
        JSAMPROW row = img + rowb * y;
        jpeg_write_scanlines(&cc, &row, 1);
    }
    jpeg_finish_compress(&cc);
    jpeg_destroy_compress(&cc);
    free(img);
    uint8_t *exact = malloc(on); /* exactly its size: ASan sees a read past it */
    CHECK(exact != NULL);
    memcpy(exact, out, on);
    free(out);
    *len = on;
    return exact;
}

/* The cut of box (x, y, w, h) of a W x H frame (W, H 0: unknown) is sound. */
static void check_cut(const uint8_t *jpg, size_t len, uint32_t W, uint32_t H, uint32_t x, uint32_t y,
                      uint32_t w, uint32_t h, const stk__img_buf *out, const stk__jpeg_cut *c)
{
    CHECK(w && h && c->w && c->h);
    CHECK(c->x <= x && c->y <= y && (uint64_t)c->x + c->w >= (uint64_t)x + w &&
          (uint64_t)c->y + c->h >= (uint64_t)y + h);
    CHECK(c->x % 8 == 0 && c->y % 8 == 0);
    if (W) CHECK((uint64_t)c->x + c->w <= W && (uint64_t)c->y + c->h <= H);
    CHECK(c->len >= 4 && c->len <= out->cap && c->len < len);
    CHECK(out->p[0] == 0xFF && out->p[1] == 0xD8 && out->p[c->len - 2] == 0xFF && out->p[c->len - 1] == 0xD9);
    uint32_t ch = 0, cw = 0;
    unsigned nc = 0;
    CHECK(stk__jpeg_dims(out->p, c->len, &ch, &cw, &nc));
    CHECK(cw == c->w && ch == c->h);
    (void)jpg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static stk__jpeg *plain, *spliced; /* kept across inputs, as a worker keeps its decoder */
    static stk__img_buf cut, b0, b1;
    if (size < HEAD) return 0;
    if (!plain) {
        plain = stk__jpeg_new();
        spliced = stk__jpeg_new();
        CHECK(plain && spliced);
    }
    uint32_t bx = u16(data), by = u16(data + 2), bw = u16(data + 4), bh = u16(data + 6);
    uint8_t flags = data[8];
    unsigned num = 1 + (flags & 7);
    int merged = (flags >> 3) & 1, use_region = (flags >> 4) & 1, made = (flags >> 5) & 1;
    const uint8_t *jpg = data + HEAD;
    size_t len = size - HEAD;
    uint8_t *own = NULL;
    if (made) {
        own = synth(jpg, len, 1 + (uint32_t)data[10], 1 + (uint32_t)data[11], data[9], &len);
        jpg = own;
    } else {
        own = malloc(len ? len : 1); /* exactly its size */
        CHECK(own != NULL);
        memcpy(own, jpg, len);
        jpg = own;
    }
    stk_error e;
    stk__jpeg_cut c;

    /* the box as it is */
    uint32_t W = 0, H = 0;
    unsigned nc = 0;
    int dims = stk__jpeg_dims(jpg, len, &H, &W, &nc);
    int rc = stk__jpeg_splice(jpg, len, bx, by, bw, bh, &cut, &c, &e);
    CHECK_E(rc == STK_OK || rc == STK__JPEG_SPLICE_NO || rc == STK_IMG_E_NOMEM, e);
    if (rc == STK_OK) check_cut(jpg, len, dims ? W : 0, H, bx, by, bw, bh, &cut, &c);

    if (!dims || !W || !H) {
        CHECK(!made);
        free(own);
        return 0;
    }
    /* folded into the frame */
    bx %= W;
    by %= H;
    bw = 1 + bw % (W - bx);
    bh = 1 + bh % (H - by);
    rc = stk__jpeg_splice(jpg, len, bx, by, bw, bh, &cut, &c, &e);
    CHECK_E(rc == STK_OK || rc == STK__JPEG_SPLICE_NO || rc == STK_IMG_E_NOMEM, e);
    if (rc == STK_OK) check_cut(jpg, len, W, H, bx, by, bw, bh, &cut, &c);
    if ((uint64_t)W * H > MAX_DECODE_PIXELS) {
        free(own);
        return 0;
    }

    /* the region decoded with and without SPLICE */
    stk__jpeg_plan p = {0};
    p.num = num;
    p.sw = (uint32_t)(((uint64_t)W * num + 7) / 8);
    p.sh = (uint32_t)(((uint64_t)H * num + 7) / 8);
    p.x0 = (uint32_t)((uint64_t)bx * num / 8);
    p.y0 = (uint32_t)((uint64_t)by * num / 8);
    uint64_t x1 = ((uint64_t)(bx + bw) * num + 7) / 8, y1 = ((uint64_t)(by + bh) * num + 7) / 8;
    p.w = (uint32_t)((x1 < p.sw ? x1 : p.sw) - p.x0);
    p.h = (uint32_t)((y1 < p.sh ? y1 : p.sh) - p.y0);
    p.bw = p.w;
    p.bh = p.h;
    unsigned base = STK_IMG_JPEG_ARENA | (merged ? STK_IMG_JPEG_MERGED : 0);
    stk__jpeg_set_opts(plain, base);
    stk__jpeg_set_opts(spliced, base | STK_IMG_JPEG_SPLICE);
    const uint8_t *at[2];
    size_t stride[2];
    int r[2];
    stk_error er[2];
    stk__jpeg *dec[2] = {plain, spliced};
    stk__img_buf *buf[2] = {&b0, &b1};
    for (int k = 0; k < 2; k++) {
        er[k].code = STK_OK;
        er[k].msg[0] = 0;
        if (use_region && num == 8)
            r[k] = stk__jpeg_decode_region(dec[k], jpg, len, W, H, p.x0, p.y0, p.w, p.h, buf[k], 0, &at[k],
                                           &stride[k], &er[k]);
        else r[k] = stk__jpeg_decode_plan(dec[k], jpg, len, W, H, &p, buf[k], 0, &at[k], &stride[k], &er[k]);
        if (r[k] != STK_OK) CHECK_E(er[k].code == r[k] && er[k].msg[0], er[k]);
    }
    if (made) {
        int gray_ok = !(use_region && num == 8) || nc == 3; /* decode_region reads colour frames only */
        if (gray_ok) {
            CHECK_E(r[0] == STK_OK, er[0]);
            CHECK_E(r[1] == STK_OK, er[1]);
        }
    }
    /* merged upsampling: the same pixels with and without the cut */
    if (merged && r[0] == STK_OK && r[1] == STK_OK)
        for (uint32_t y = 0; y < p.h; y++)
            CHECK(memcmp(at[0] + y * stride[0], at[1] + y * stride[1], (size_t)p.w * 3) == 0);
    free(own);
    return 0;
}
