/* tests/image/test_jpeg_splice.c - a region of a JPEG with restart markers
 * cut out as a smaller JPEG (image/jpeg_splice.c) and the region decodes
 * that use it (STK_IMG_JPEG_SPLICE in image/jpeg.c).
 *
 * The JPEGs are made here by libjpeg's compressor from a detailed synthetic
 * image (a wrong segment shows), at every subsampling, with restart
 * intervals of 1, 2 and 3 MCUs and of 1 and 2 MCU rows, at sizes that are
 * and are not multiples of the MCU, down to 1 x 1. For every box (touching
 * each border, under an MCU, the whole frame) and every scale num/8 in
 * 1 to 8:
 *   - stk__jpeg_splice cuts exactly where the restart intervals say it can
 *     (an independent reading of the frame: the MCU grid and which segments
 *     cover the box), its cut contains the box, its frame header gives the
 *     cut's size and it is shorter than the stream;
 *   - the planned decode with SPLICE gives byte for byte the pixels without
 *     it, and those of a whole decode, with merged upsampling and, for
 *     4:4:4 and greyscale, with fancy upsampling too.
 * Hostile streams (progressive, no DRI, restart markers out of order,
 * truncated, too few segments, every byte flipped, every length cut) give
 * STK__JPEG_SPLICE_NO or a clean decode error: never a crash, never a read
 * outside the stream (each is decoded from a buffer of exactly its size:
 * the ASan build sees any overread). */
#include "image.h"
#include "image_ref.h"
#include "jpeg_dims.h"
#include "testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

/* ------------------------------------------------------------- streams */

/* A JPEG of im through libjpeg's compressor: sampling factors h x v of
 * Y, Cb, Cr in s (s[0][0] 0: greyscale), restart every ri_mcus MCUs or
 * every ri_rows MCU rows (both 0: no DRI), progressive or not. */
static uint8_t *make_s(const tu_image *im, const int s[3][2], unsigned ri_mcus, unsigned ri_rows,
                       int progressive, size_t *len)
{
    struct jpeg_compress_struct cc;
    struct jpeg_error_mgr jerr;
    cc.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&cc);
    unsigned char *out = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&cc, &out, &n);
    cc.image_width = im->w;
    cc.image_height = im->h;
    cc.input_components = 3;
    cc.in_color_space = JCS_RGB;
    jpeg_set_defaults(&cc);
    jpeg_set_quality(&cc, 90, TRUE);
    if (s[0][0] == 0) {
        jpeg_set_colorspace(&cc, JCS_GRAYSCALE);
    } else {
        for (int c = 0; c < 3; c++) {
            cc.comp_info[c].h_samp_factor = s[c][0];
            cc.comp_info[c].v_samp_factor = s[c][1];
        }
    }
    if (progressive) jpeg_simple_progression(&cc);
    cc.restart_interval = ri_mcus;
    cc.restart_in_rows = (int)ri_rows;
    jpeg_start_compress(&cc, TRUE);
    for (uint32_t y = 0; y < im->h; y++) {
        JSAMPROW row = im->px + (size_t)y * im->w * 3;
        jpeg_write_scanlines(&cc, &row, 1);
    }
    jpeg_finish_compress(&cc);
    jpeg_destroy_compress(&cc);
    /* a buffer of exactly its size: ASan sees a read past it */
    uint8_t *exact = tu_xmalloc(n);
    memcpy(exact, out, n);
    free(out);
    *len = n;
    return exact;
}

/* make_s with luma sampling hs x vs and chroma 1 x 1 (hs 0: greyscale). */
static uint8_t *make(const tu_image *im, int hs, int vs, unsigned ri_mcus, unsigned ri_rows, int progressive,
                     size_t *len)
{
    const int s[3][2] = {{hs, vs}, {1, 1}, {1, 1}};
    return make_s(im, s, ri_mcus, ri_rows, progressive, len);
}

static uint8_t *dup_n(const uint8_t *p, size_t n)
{
    uint8_t *d = tu_xmalloc(n ? n : 1);
    memcpy(d, p, n);
    return d;
}

/* Offset of the first entropy-coded byte (after the SOS segment). */
static size_t scan_start(const uint8_t *j, size_t n)
{
    size_t sos = tu_jpeg_marker(j, n, 0xDA);
    ck_assert_uint_gt(sos, 0);
    return sos + 2 + ((size_t)j[sos + 2] << 8 | j[sos + 3]);
}

/* Offsets of the restart markers (their 0xFF) in the entropy-coded data, at
 * most cap; the count. */
static size_t find_rst(const uint8_t *j, size_t n, size_t *at, size_t cap)
{
    size_t k = 0;
    for (size_t i = scan_start(j, n); i + 1 < n && k < cap; i++)
        if (j[i] == 0xFF && j[i + 1] >= 0xD0 && j[i + 1] <= 0xD7) at[k++] = i;
    return k;
}

/* A whole decode at num/8 to RGB through libjpeg itself, without fancy
 * upsampling (the same as with it at 4:4:4 and greyscale). */
static uint8_t *whole_decode(const uint8_t *jb, size_t len, unsigned num, uint32_t *ow, uint32_t *oh)
{
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, jb, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    ci.out_color_space = JCS_RGB;
    ci.scale_num = num;
    ci.scale_denom = 8;
    ci.do_fancy_upsampling = FALSE;
    jpeg_start_decompress(&ci);
    *ow = ci.output_width;
    *oh = ci.output_height;
    uint8_t *out = tu_xmalloc((size_t)*ow * *oh * 3);
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = out + (size_t)ci.output_scanline * *ow * 3;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    return out;
}

/* ------------------------------------------------- the expected cut */

typedef struct {
    uint32_t W, H;
    int hs, vs;       /* luma sampling; hs 0: greyscale */
    unsigned ri_mcus; /* restart interval in MCUs, or */
    unsigned ri_rows; /* in MCU rows */
    int cs[2][2];     /* Cb's and Cr's sampling (0 x 0: 1 x 1) */
} frame;

/* The frame's Y, Cb, Cr sampling factors; the largest of each axis. */
static void factors(const frame *f, int s[3][2], int *hmax, int *vmax)
{
    s[0][0] = f->hs;
    s[0][1] = f->vs;
    *hmax = f->hs ? f->hs : 1;
    *vmax = f->hs ? f->vs : 1;
    for (int c = 0; c < 2; c++) {
        s[c + 1][0] = f->cs[c][0] ? f->cs[c][0] : 1;
        s[c + 1][1] = f->cs[c][1] ? f->cs[c][1] : 1;
        if (f->hs) {
            *hmax = s[c + 1][0] > *hmax ? s[c + 1][0] : *hmax;
            *vmax = s[c + 1][1] > *vmax ? s[c + 1][1] : *vmax;
        }
    }
}

/* No component is upsampled: every pixel of a fancy decode is its MCU's. */
static int no_upsampling(const frame *f)
{
    int s[3][2], hm, vm;
    factors(f, s, &hm, &vm);
    if (!f->hs) return 1;
    for (int c = 0; c < 3; c++)
        if (s[c][0] != hm || s[c][1] != vm) return 0;
    return 1;
}

/* Where a cut of the box [x, x + w) x [y, y + h) must lie, read from the
 * JPEG standard (ITU T.81 A.2, B.2.4.4, F.1.2.3): an interleaved scan's MCU
 * is hmax x vmax blocks, a one-component scan's one block; a restart
 * interval of ri MCUs counts MCUs in raster order. A cut needs segments
 * that tile the MCU rows (ri dividing the MCUs per row: each row is
 * mx / ri segments; or a whole number of rows) and something to leave out
 * above or beside the box. 0 when there is no cut, else 1 and *c. */
static int expect_cut(const frame *f, uint32_t x, uint32_t y, uint32_t w, uint32_t h, stk__jpeg_cut *c)
{
    int s[3][2], hm, vm;
    factors(f, s, &hm, &vm);
    uint32_t mw = 8u * (uint32_t)hm, mh = 8u * (uint32_t)vm;
    uint32_t mx = (f->W + mw - 1) / mw;
    uint32_t ri = f->ri_rows ? f->ri_rows * mx : f->ri_mcus;
    uint32_t row0 = y / mh, row1 = (y + h - 1) / mh; /* MCU rows of the box, inclusive */
    if (mx % ri == 0) {
        uint32_t seg = ri * mw, spr = mx / ri, col0 = x / seg, col1 = (x + w - 1) / seg;
        if (row0 == 0 && col0 == 0 && col1 == spr - 1) return 0;
        c->x = col0 * seg;
        c->y = row0 * mh;
        c->w = ((col1 + 1) * seg < f->W ? (col1 + 1) * seg : f->W) - c->x;
        c->h = ((row1 + 1) * mh < f->H ? (row1 + 1) * mh : f->H) - c->y;
        return 1;
    }
    if (ri % mx) return 0; /* segments straddle rows */
    uint32_t rps = ri / mx, s0 = row0 / rps, s1 = row1 / rps;
    if (s0 == 0) return 0;
    c->x = 0;
    c->y = s0 * rps * mh;
    c->w = f->W;
    c->h = ((s1 + 1) * rps * mh < f->H ? (s1 + 1) * rps * mh : f->H) - c->y;
    return 1;
}

/* ------------------------------------------------------------ the cases */

typedef struct {
    uint32_t x, y, w, h;
} box;

/* The boxes of a W x H frame: every border, corners, under an MCU, bands,
 * the whole frame. */
static size_t boxes_of(uint32_t W, uint32_t H, box *b)
{
#define MIN(a, c) ((a) < (c) ? (a) : (c))
    size_t n = 0;
    b[n++] = (box){0, 0, W, H};                                         /* the whole frame */
    b[n++] = (box){0, 0, MIN(5, W), MIN(3, H)};                         /* top left */
    b[n++] = (box){W - MIN(W, 30), MIN(9, H - 1), MIN(W, 30), 1};       /* touching the right */
    b[n++] = (box){MIN(17, W - 1), H - MIN(H, 20), 1, MIN(H, 20)};      /* touching the bottom */
    b[n++] = (box){W - 1, H - 1, 1, 1};                                 /* the last pixel */
    b[n++] = (box){W / 2, H / 2, MIN(3, W - W / 2), MIN(2, H - H / 2)}; /* under an MCU */
    b[n++] = (box){W / 3, H / 3, W / 3 + 1, H / 3 + 1};                 /* across MCU edges */
    b[n++] = (box){0, H / 2, W, H - H / 2};                             /* the bottom half, whole rows */
    b[n++] = (box){W / 2, 0, W - W / 2, H};                             /* the right half, whole columns */
    b[n++] = (box){0, 0, W, 1};                                         /* the top row */
    b[n++] = (box){0, MIN(16, H - 1), MIN(16, W), H - MIN(16, H - 1)};  /* left, from an MCU row down */
    b[n++] = (box){MIN(48, W - 1), MIN(32, H - 1), 1, 1};               /* one pixel on MCU corners */
#undef MIN
    return n;
}

/* stk__jpeg_splice on the frame box b against expect_cut: the same answer,
 * the same cut, a frame header of its size, shorter than the stream. 1 when
 * it cut. */
static int check_splice(const frame *f, const uint8_t *jpg, size_t len, box b, stk__img_buf *out,
                        const char *what)
{
    stk__jpeg_cut c, want;
    stk_error e;
    int rc = stk__jpeg_splice(jpg, len, b.x, b.y, b.w, b.h, out, &c, &e);
    int cut = expect_cut(f, b.x, b.y, b.w, b.h, &want);
    ck_assert_msg(rc == (cut ? STK_OK : STK__JPEG_SPLICE_NO), "%s box %u+%u x %u+%u: splice %d, expected %s",
                  what, b.x, b.w, b.y, b.h, rc, cut ? "a cut" : "none");
    if (!cut) return 0;
    ck_assert_msg(c.x == want.x && c.y == want.y && c.w == want.w && c.h == want.h,
                  "%s box %u+%u x %u+%u: cut %u+%u x %u+%u, expected %u+%u x %u+%u", what, b.x, b.w, b.y, b.h,
                  c.x, c.w, c.y, c.h, want.x, want.w, want.y, want.h);
    ck_assert(c.x <= b.x && c.y <= b.y && c.x + c.w >= b.x + b.w && c.y + c.h >= b.y + b.h);
    ck_assert_msg(c.len < len, "%s: the cut (%zu bytes) is not shorter than the stream (%zu)", what, c.len,
                  len);
    uint32_t ch = 0, cw = 0;
    unsigned nc = 0;
    ck_assert(stk__jpeg_dims(out->p, c.len, &ch, &cw, &nc));
    ck_assert_msg(cw == c.w && ch == c.h, "%s: the cut's frame header says %ux%u, the cut is %ux%u", what, cw,
                  ch, c.w, c.h);
    ck_assert_uint_eq(nc, f->hs ? 3 : 1);
    ck_assert(out->p[0] == 0xFF && out->p[1] == 0xD8 && out->p[c.len - 2] == 0xFF &&
              out->p[c.len - 1] == 0xD9);
    return 1;
}

/* The plan for frame box b at num/8 (what stk__jpeg_plan_make would give a
 * box with that region, without its choice of scale). */
static stk__jpeg_plan plan_at(uint32_t W, uint32_t H, box b, unsigned num)
{
    stk__jpeg_plan p = {0};
    p.num = num;
    p.sw = (uint32_t)(((uint64_t)W * num + 7) / 8);
    p.sh = (uint32_t)(((uint64_t)H * num + 7) / 8);
    uint32_t x0 = (uint32_t)((uint64_t)b.x * num / 8), y0 = (uint32_t)((uint64_t)b.y * num / 8);
    uint32_t x1 = (uint32_t)(((uint64_t)(b.x + b.w) * num + 7) / 8),
             y1 = (uint32_t)(((uint64_t)(b.y + b.h) * num + 7) / 8);
    p.x0 = x0;
    p.y0 = y0;
    p.w = (x1 < p.sw ? x1 : p.sw) - x0;
    p.h = (y1 < p.sh ? y1 : p.sh) - y0;
    p.bw = p.w;
    p.bh = p.h;
    return p;
}

/* The frame box the decode cuts for the plan's region (the region in frame
 * pixels, rounded outward, as image/jpeg.c's cut_to_region reads it). */
static box frame_box(uint32_t W, uint32_t H, const stk__jpeg_plan *p)
{
    uint64_t X0 = (uint64_t)p->x0 * 8 / p->num, Y0 = (uint64_t)p->y0 * 8 / p->num;
    uint64_t X1 = (((uint64_t)p->x0 + p->w) * 8 + p->num - 1) / p->num,
             Y1 = (((uint64_t)p->y0 + p->h) * 8 + p->num - 1) / p->num;
    X1 = X1 < W ? X1 : W;
    Y1 = Y1 < H ? Y1 : H;
    return (box){(uint32_t)X0, (uint32_t)Y0, (uint32_t)(X1 - X0), (uint32_t)(Y1 - Y0)};
}

typedef struct {
    stk__jpeg *plain, *spliced, *fplain, *fspliced; /* merged; f: fancy upsampling */
    stk__img_buf b1, b2, cut;
    unsigned long cuts, decodes; /* how often the decode had a cut to use */
} rig;

static void rig_init(rig *r)
{
    memset(r, 0, sizeof *r);
    r->plain = stk__jpeg_new();
    r->spliced = stk__jpeg_new();
    r->fplain = stk__jpeg_new();
    r->fspliced = stk__jpeg_new();
    ck_assert(r->plain && r->spliced && r->fplain && r->fspliced);
    stk__jpeg_set_opts(r->plain, STK_IMG_JPEG_ARENA | STK_IMG_JPEG_MERGED);
    stk__jpeg_set_opts(r->spliced, STK_IMG_JPEG_ARENA | STK_IMG_JPEG_MERGED | STK_IMG_JPEG_SPLICE);
    stk__jpeg_set_opts(r->fplain, STK_IMG_JPEG_ARENA);
    stk__jpeg_set_opts(r->fspliced, STK_IMG_JPEG_ARENA | STK_IMG_JPEG_SPLICE);
}

static void rig_free(rig *r)
{
    stk__jpeg_free(r->plain);
    stk__jpeg_free(r->spliced);
    stk__jpeg_free(r->fplain);
    stk__jpeg_free(r->fspliced);
    stk__img_buf_free(&r->b1);
    stk__img_buf_free(&r->b2);
    stk__img_buf_free(&r->cut);
}

/* The plan decoded by a and b (b with SPLICE): both succeed and give the
 * same pixels, which are those of whole (ww wide) at the region. */
static void same_pixels(rig *r, stk__jpeg *a, stk__jpeg *b, const uint8_t *jpg, size_t len, const frame *f,
                        const stk__jpeg_plan *p, const uint8_t *whole, uint32_t ww, const char *what)
{
    const uint8_t *at1, *at2;
    size_t s1, s2;
    stk_error e;
    /* num 8 goes through stk__jpeg_decode_region (the random crop's call), the others through _plan */
    if (p->num == 8 && f->hs) {
        ck_assert_msg(stk__jpeg_decode_region(a, jpg, len, f->W, f->H, p->x0, p->y0, p->w, p->h, &r->b1, 0,
                                              &at1, &s1, &e) == STK_OK,
                      "%s: %s", what, e.msg);
        ck_assert_msg(stk__jpeg_decode_region(b, jpg, len, f->W, f->H, p->x0, p->y0, p->w, p->h, &r->b2, 0,
                                              &at2, &s2, &e) == STK_OK,
                      "%s: %s", what, e.msg);
    } else {
        ck_assert_msg(stk__jpeg_decode_plan(a, jpg, len, f->W, f->H, p, &r->b1, 0, &at1, &s1, &e) == STK_OK,
                      "%s: %s", what, e.msg);
        ck_assert_msg(stk__jpeg_decode_plan(b, jpg, len, f->W, f->H, p, &r->b2, 0, &at2, &s2, &e) == STK_OK,
                      "%s: %s", what, e.msg);
    }
    for (uint32_t y = 0; y < p->h; y++) {
        ck_assert_msg(memcmp(at1 + y * s1, at2 + y * s2, (size_t)p->w * 3) == 0,
                      "%s: region %u+%u x %u+%u at %u/8, row %u: SPLICE changes the pixels", what, p->x0,
                      p->w, p->y0, p->h, p->num, y);
        ck_assert_msg(
            memcmp(at2 + y * s2, whole + ((size_t)(p->y0 + y) * ww + p->x0) * 3, (size_t)p->w * 3) == 0,
            "%s: region %u+%u x %u+%u at %u/8, row %u: not a whole decode's pixels", what, p->x0, p->w, p->y0,
            p->h, p->num, y);
    }
}

/* Every box of f's frame at every scale: the cut is where expect_cut says,
 * and the decodes with and without SPLICE agree with a whole decode. */
static void run_frame(rig *r, const frame *f, uint64_t seed)
{
    tu_image im = tu_synth(f->W, f->H, TU_DETAIL, seed);
    size_t len = 0;
    int s[3][2], hm, vm;
    factors(f, s, &hm, &vm);
    uint8_t *jpg = make_s(&im, s, f->ri_mcus, f->ri_rows, 0, &len);
    char what[128];
    snprintf(what, sizeof what, "%ux%u samp %dx%d,%dx%d,%dx%d restart %u MCUs / %u rows", f->W, f->H, s[0][0],
             s[0][1], s[1][0], s[1][1], s[2][0], s[2][1], f->ri_mcus, f->ri_rows);
    box bs[16];
    size_t nb = boxes_of(f->W, f->H, bs);
    /* the whole frame leaves nothing out */
    stk__jpeg_cut c;
    stk_error e;
    ck_assert_int_eq(stk__jpeg_splice(jpg, len, 0, 0, f->W, f->H, &r->cut, &c, &e), STK__JPEG_SPLICE_NO);
    static const unsigned nums[] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (size_t k = 0; k < sizeof nums / sizeof *nums; k++) {
        uint32_t ww, wh;
        uint8_t *whole = whole_decode(jpg, len, nums[k], &ww, &wh);
        for (size_t i = 0; i < nb; i++) {
            check_splice(f, jpg, len, bs[i], &r->cut, what);
            stk__jpeg_plan p = plan_at(f->W, f->H, bs[i], nums[k]);
            ck_assert(ww == p.sw && wh == p.sh);
            r->cuts += (unsigned long)check_splice(f, jpg, len, frame_box(f->W, f->H, &p), &r->cut, what);
            r->decodes++;
            same_pixels(r, r->plain, r->spliced, jpg, len, f, &p, whole, ww, what);
            if (no_upsampling(f)) /* 4:4:4 and greyscale: the same with fancy upsampling */
                same_pixels(r, r->fplain, r->fspliced, jpg, len, f, &p, whole, ww, what);
        }
        free(whole);
    }
    free(jpg);
    tu_image_free(&im);
}

static const int samps[][2] = {{1, 1}, {2, 1}, {2, 2}, {1, 2}, {4, 1}, {0, 0}};
static const char *const samp_names[] = {"4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "grey"};

/* One subsampling: sizes that are and are not multiples of the MCU (and
 * whose MCUs per row 1, 2 and 3 do and do not divide), thin and 1-pixel
 * images; restart intervals of 1, 2, 3 MCUs and 1, 2 rows. */
static void subsampling(int s)
{
    static const uint32_t sizes[][2] = {{173, 131}, {192, 96}, {200, 72}, {1, 1}, {1, 45}, {61, 1}, {8, 300}};
    static const unsigned ri[][2] = {{1, 0}, {2, 0}, {3, 0}, {0, 1}, {0, 2}};
    rig r;
    rig_init(&r);
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (size_t k = 0; k < sizeof ri / sizeof *ri; k++) {
            frame f = {sizes[si][0], sizes[si][1], samps[s][0],     samps[s][1],
                       ri[k][0],     ri[k][1],     {{0, 0}, {0, 0}}};
            run_frame(&r, &f, si * 8 + k);
        }
    /* the cases above do exercise the cut */
    ck_assert_msg(r.cuts * 4 > r.decodes, "%s: %lu of %lu decodes had a cut", samp_names[s], r.cuts,
                  r.decodes);
    rig_free(&r);
}

/* Sampling factors TurboJPEG has no name for, which libjpeg decodes: chroma
 * sampled finer than luma, a factor of 3, all components 2 x 1 (4:4:4 in
 * 16 x 8 MCUs). */
START_TEST(odd_sampling)
{
    static const frame fs[] = {
        {173, 131, 1, 1, 1, 0, {{2, 2}, {1, 1}}}, {173, 131, 1, 1, 0, 1, {{2, 2}, {2, 1}}},
        {173, 131, 3, 1, 1, 0, {{1, 1}, {1, 1}}}, {173, 131, 3, 1, 2, 0, {{1, 1}, {1, 1}}},
        {173, 131, 2, 1, 1, 0, {{2, 1}, {2, 1}}}, {50, 70, 1, 3, 0, 2, {{1, 1}, {1, 1}}},
    };
    rig r;
    rig_init(&r);
    for (size_t i = 0; i < sizeof fs / sizeof *fs; i++) run_frame(&r, &fs[i], 100 + i);
    ck_assert_msg(r.cuts * 4 > r.decodes, "%lu of %lu decodes had a cut", r.cuts, r.decodes);
    rig_free(&r);
}
END_TEST

START_TEST(sub_444) { subsampling(0); }
END_TEST
START_TEST(sub_422) { subsampling(1); }
END_TEST
START_TEST(sub_420) { subsampling(2); }
END_TEST
START_TEST(sub_440) { subsampling(3); }
END_TEST
START_TEST(sub_411) { subsampling(4); }
END_TEST
START_TEST(greyscale) { subsampling(5); }
END_TEST

/* Cuts at 8/8 where the answer is plain from the frame: 4:2:0 173 x 131
 * has 11 x 9 MCUs of 16 x 16. */
START_TEST(known_cuts)
{
    tu_image im = tu_synth(173, 131, TU_DETAIL, 1);
    stk__img_buf out = {0};
    stk__jpeg_cut c;
    stk_error e;
    size_t len;
    /* 1 MCU: a box inside MCU (5, 4) is that MCU alone */
    uint8_t *j1 = make(&im, 2, 2, 1, 0, 0, &len);
    ck_assert_int_eq(stk__jpeg_splice(j1, len, 85, 70, 3, 2, &out, &c, &e), STK_OK);
    ck_assert(c.x == 80 && c.y == 64 && c.w == 16 && c.h == 16);
    ck_assert_uint_lt(c.len, len / 4);
    /* the bottom right corner: the last MCU, 13 x 3 pixels */
    ck_assert_int_eq(stk__jpeg_splice(j1, len, 172, 130, 1, 1, &out, &c, &e), STK_OK);
    ck_assert(c.x == 160 && c.y == 128 && c.w == 13 && c.h == 3);
    /* the first MCU row, all of it: nothing left out */
    ck_assert_int_eq(stk__jpeg_splice(j1, len, 0, 0, 173, 16, &out, &c, &e), STK__JPEG_SPLICE_NO);
    /* boxes outside the frame or empty */
    ck_assert_int_eq(stk__jpeg_splice(j1, len, 0, 0, 0, 1, &out, &c, &e), STK__JPEG_SPLICE_NO);
    ck_assert_int_eq(stk__jpeg_splice(j1, len, 173, 0, 1, 1, &out, &c, &e), STK__JPEG_SPLICE_NO);
    ck_assert_int_eq(stk__jpeg_splice(j1, len, 100, 100, 74, 1, &out, &c, &e), STK__JPEG_SPLICE_NO);
    ck_assert_int_eq(stk__jpeg_splice(j1, len, 100, 100, UINT32_MAX, UINT32_MAX, &out, &c, &e),
                     STK__JPEG_SPLICE_NO);
    free(j1);
    /* 2 MCUs do not divide 11 MCUs a row: the segments straddle rows */
    uint8_t *j2 = make(&im, 2, 2, 2, 0, 0, &len);
    ck_assert_int_eq(stk__jpeg_splice(j2, len, 85, 70, 3, 2, &out, &c, &e), STK__JPEG_SPLICE_NO);
    free(j2);
    /* 2 rows: from row 4 (pixels 64 ..) through row 5, whole width */
    uint8_t *j3 = make(&im, 2, 2, 0, 2, 0, &len);
    ck_assert_int_eq(stk__jpeg_splice(j3, len, 85, 70, 3, 2, &out, &c, &e), STK_OK);
    ck_assert(c.x == 0 && c.y == 64 && c.w == 173 && c.h == 32);
    /* rows 0 and 1 are one segment: a box in row 1 leaves nothing out above */
    ck_assert_int_eq(stk__jpeg_splice(j3, len, 85, 20, 3, 2, &out, &c, &e), STK__JPEG_SPLICE_NO);
    free(j3);
    stk__img_buf_free(&out);
    tu_image_free(&im);
}
END_TEST

/* -------------------------------------------------------------- hostile */

/* A decode with SPLICE of stream n bytes long (copied to a buffer of that
 * size): STK_OK or a clean error with a message. */
static int decode_any(stk__jpeg *j, const uint8_t *p, size_t n, uint32_t W, uint32_t H, box b, unsigned num,
                      stk__img_buf *buf)
{
    uint8_t *d = dup_n(p, n);
    stk__jpeg_plan pl = plan_at(W, H, b, num);
    const uint8_t *at;
    size_t stride;
    stk_error e;
    e.msg[0] = 0;
    int rc = stk__jpeg_decode_plan(j, d, n, W, H, &pl, buf, 0, &at, &stride, &e);
    ck_assert_msg(rc == STK_OK || rc == STK_IMG_E_CORRUPT || rc == STK_IMG_E_UNSUPPORTED, "rc %d: %s", rc,
                  e.msg);
    if (rc) ck_assert_msg(e.msg[0] != 0, "an error without a message");
    free(d);
    return rc;
}

/* stk__jpeg_splice of a copy of exactly n bytes. */
static int splice_n(const uint8_t *p, size_t n, box b, stk__img_buf *out, stk__jpeg_cut *c)
{
    uint8_t *d = dup_n(p, n);
    stk_error e;
    int rc = stk__jpeg_splice(d, n, b.x, b.y, b.w, b.h, out, c, &e);
    ck_assert(rc == STK_OK || rc == STK__JPEG_SPLICE_NO);
    free(d);
    return rc;
}

START_TEST(progressive_and_no_dri)
{
    tu_image im = tu_synth(173, 131, TU_DETAIL, 2);
    stk__img_buf out = {0};
    stk__jpeg_cut c;
    stk_error e;
    size_t len;
    for (int prog = 0; prog <= 1; prog++) {
        /* progressive with restart markers, and baseline without */
        uint8_t *j = make(&im, 2, 2, prog ? 1 : 0, 0, prog, &len);
        ck_assert(prog || tu_jpeg_marker(j, len, 0xDD) == 0);
        ck_assert(!prog || tu_jpeg_marker(j, len, 0xDD) != 0);
        ck_assert_int_eq(stk__jpeg_splice(j, len, 85, 70, 3, 2, &out, &c, &e), STK__JPEG_SPLICE_NO);
        ck_assert_int_eq(stk__jpeg_splice(j, len, 100, 100, 73, 31, &out, &c, &e), STK__JPEG_SPLICE_NO);
        /* the decode with SPLICE reads them whole */
        rig r;
        rig_init(&r);
        frame f = {173, 131, 2, 2, 0, 0, {{0, 0}, {0, 0}}};
        uint32_t ww, wh;
        uint8_t *whole = whole_decode(j, len, 4, &ww, &wh);
        stk__jpeg_plan p = plan_at(173, 131, (box){85, 70, 40, 30}, 4);
        same_pixels(&r, r.plain, r.spliced, j, len, &f, &p, whole, ww, prog ? "progressive" : "no DRI");
        free(whole);
        rig_free(&r);
        free(j);
    }
    /* a DRI of 0: no restart markers */
    uint8_t *j = make(&im, 1, 1, 1, 0, 0, &len);
    size_t dri = tu_jpeg_marker(j, len, 0xDD);
    ck_assert_uint_gt(dri, 0);
    ck_assert_int_eq(stk__jpeg_splice(j, len, 85, 70, 3, 2, &out, &c, &e), STK_OK);
    j[dri + 4] = j[dri + 5] = 0;
    ck_assert_int_eq(stk__jpeg_splice(j, len, 85, 70, 3, 2, &out, &c, &e), STK__JPEG_SPLICE_NO);
    free(j);
    stk__img_buf_free(&out);
    tu_image_free(&im);
}
END_TEST

/* Restart markers out of order, a stream truncated inside the box's
 * segments, one with fewer segments than its frame needs, one whose last
 * segment ends in a restart marker: no cut where it would need them, and
 * the decode with SPLICE fails cleanly as the whole decode does. A damaged
 * segment above the box fails the decode without SPLICE only (the cut
 * leaves it unread). Fill bytes before a marker are read through. */
START_TEST(damaged_segments)
{
    const uint32_t W = 64, H = 48; /* 4:4:4, 8 x 6 MCUs, one a segment */
    tu_image im = tu_synth(W, H, TU_DETAIL, 3);
    size_t len;
    uint8_t *j = make(&im, 1, 1, 1, 0, 0, &len);
    size_t rst[64];
    ck_assert_uint_eq(find_rst(j, len, rst, 64), 47);
    stk__jpeg *d = stk__jpeg_new();
    stk__jpeg_set_opts(d, STK_IMG_JPEG_ARENA | STK_IMG_JPEG_MERGED | STK_IMG_JPEG_SPLICE);
    stk__img_buf out = {0}, buf = {0};
    stk__jpeg_cut c;
    const box bottom = {40, 40, 8, 8}, top = {8, 8, 8, 8}; /* MCUs 45 and 9 */

    /* the marker after segment 20 (RST4) numbered RST5 */
    uint8_t *bad = dup_n(j, len);
    bad[rst[20] + 1] = (uint8_t)(0xD0 + (21 & 7));
    ck_assert_int_eq(splice_n(bad, len, bottom, &out, &c), STK__JPEG_SPLICE_NO);
    ck_assert_int_eq(splice_n(bad, len, top, &out, &c), STK_OK); /* the walk stops before it */
    ck_assert_int_eq(decode_any(d, bad, len, W, H, bottom, 8, &buf), STK_IMG_E_CORRUPT);
    ck_assert_int_eq(decode_any(d, bad, len, W, H, top, 8, &buf), STK_OK);
    free(bad);

    /* truncated inside the box's segment */
    size_t cut_at = rst[45] - 3;
    ck_assert_int_eq(splice_n(j, cut_at, bottom, &out, &c), STK__JPEG_SPLICE_NO);
    ck_assert_int_eq(splice_n(j, cut_at, top, &out, &c), STK_OK);
    ck_assert_int_eq(decode_any(d, j, cut_at, W, H, bottom, 8, &buf), STK_IMG_E_CORRUPT);
    ck_assert_int_eq(decode_any(d, j, cut_at, W, H, top, 8, &buf), STK_OK);

    /* fewer segments: the stream ends (EOI) after segment 40 */
    uint8_t *few = dup_n(j, rst[40] + 2);
    few[rst[40] + 1] = 0xD9;
    ck_assert_int_eq(splice_n(few, rst[40] + 2, bottom, &out, &c), STK__JPEG_SPLICE_NO);
    ck_assert_int_eq(splice_n(few, rst[40] + 2, (box){0, 40, 8, 8}, &out, &c), STK__JPEG_SPLICE_NO); /* 40 */
    ck_assert_int_eq(decode_any(d, few, rst[40] + 2, W, H, bottom, 8, &buf), STK_IMG_E_CORRUPT);
    free(few);

    /* the last segment ends in a restart marker, not EOI: more segments than the frame has */
    size_t eoi = len - 2;
    ck_assert(j[eoi] == 0xFF && j[eoi + 1] == 0xD9);
    uint8_t *more = dup_n(j, len);
    more[eoi + 1] = (uint8_t)(0xD0 + (47 & 7));
    ck_assert_int_eq(splice_n(more, len, (box){56, 40, 8, 8}, &out, &c), STK__JPEG_SPLICE_NO);
    ck_assert_int_eq(splice_n(more, len, bottom, &out, &c), STK_OK); /* segment 45 ends as it should */
    free(more);

    /* segment 3 (above the box) cut to one byte: without SPLICE its rows are entropy-decoded and
     * fail; with it they are not read, and the box's pixels are the intact stream's */
    size_t sn = len - (rst[3] - rst[2] - 3);
    uint8_t *shortened = tu_xmalloc(sn);
    memcpy(shortened, j, rst[2] + 3);
    memcpy(shortened + rst[2] + 3, j + rst[3], len - rst[3]);
    {
        stk__jpeg *plain = stk__jpeg_new();
        stk__jpeg_set_opts(plain, STK_IMG_JPEG_ARENA | STK_IMG_JPEG_MERGED);
        stk__jpeg_plan p = plan_at(W, H, bottom, 8);
        const uint8_t *a1, *a2;
        size_t s1, s2;
        stk_error e;
        stk__img_buf other = {0};
        ck_assert_int_eq(stk__jpeg_decode_plan(plain, shortened, sn, W, H, &p, &buf, 0, &a1, &s1, &e),
                         STK_IMG_E_CORRUPT);
        ck_assert_int_eq(stk__jpeg_decode_plan(plain, j, len, W, H, &p, &buf, 0, &a1, &s1, &e), STK_OK);
        ck_assert_msg(stk__jpeg_decode_plan(d, shortened, sn, W, H, &p, &other, 0, &a2, &s2, &e) == STK_OK,
                      "%s", e.msg);
        for (uint32_t y = 0; y < p.h; y++) ck_assert(memcmp(a1 + y * s1, a2 + y * s2, (size_t)p.w * 3) == 0);
        stk__img_buf_free(&other);
        stk__jpeg_free(plain);
    }
    free(shortened);

    /* fill bytes (0xFF) before a restart marker: the same cut, the same pixels */
    uint8_t *fill = tu_xmalloc(len + 3);
    memcpy(fill, j, rst[45]); /* after segment 45, the box's */
    memset(fill + rst[45], 0xFF, 3);
    memcpy(fill + rst[45] + 3, j + rst[45], len - rst[45]);
    stk__jpeg_cut c2;
    ck_assert_int_eq(splice_n(j, len, bottom, &out, &c), STK_OK);
    ck_assert_int_eq(splice_n(fill, len + 3, bottom, &buf, &c2), STK_OK);
    ck_assert(c.len == c2.len && memcmp(out.p, buf.p, c.len) == 0);
    free(fill);

    stk__img_buf_free(&out);
    stk__img_buf_free(&buf);
    stk__jpeg_free(d);
    free(j);
    tu_image_free(&im);
}
END_TEST

/* Every prefix of a restart-marked stream and every byte of it flipped:
 * stk__jpeg_splice answers and the decode with SPLICE succeeds or fails
 * cleanly (the ASan build checks the reads). A cut made of a prefix is
 * never longer than the prefix. */
START_TEST(every_prefix_and_flip)
{
    static const int sub[][2] = {{2, 2}, {1, 1}, {0, 0}};
    stk__jpeg *d = stk__jpeg_new();
    stk__jpeg_set_opts(d, STK_IMG_JPEG_ARENA | STK_IMG_JPEG_MERGED | STK_IMG_JPEG_SPLICE);
    stk__img_buf out = {0}, buf = {0};
    for (size_t s = 0; s < 3; s++) {
        const uint32_t W = 40, H = 35;
        tu_image im = tu_synth(W, H, TU_DETAIL, 4 + s);
        size_t len;
        uint8_t *j = make(&im, sub[s][0], sub[s][1], 1, 0, 0, &len);
        const box bs[] = {{30, 30, 10, 5}, {17, 9, 3, 3}};
        stk__jpeg_cut c;
        for (size_t n = 0; n <= len; n++)
            for (size_t b = 0; b < 2; b++) {
                if (splice_n(j, n, bs[b], &out, &c) == STK_OK) ck_assert_uint_le(c.len, n);
                if (n % 7 == 0 || n + 8 > len) decode_any(d, j, n, W, H, bs[b], b ? 8 : 2, &buf);
            }
        for (size_t i = 0; i < len; i++)
            for (int x = 0; x < 2; x++) {
                uint8_t *f = dup_n(j, len);
                f[i] ^= x ? 0xFF : 0x10;
                splice_n(f, len, bs[x], &out, &c);
                decode_any(d, f, len, W, H, bs[x], x ? 4 : 8, &buf);
                free(f);
            }
        free(j);
        tu_image_free(&im);
    }
    stk__img_buf_free(&out);
    stk__img_buf_free(&buf);
    stk__jpeg_free(d);
}
END_TEST

TU_MAIN("image_jpeg_splice",
        {.name = "cut",
         .timeout = 300,
         .tests = {known_cuts, sub_444, sub_422, sub_420, sub_440, sub_411, greyscale, odd_sampling}},
        {.name = "hostile",
         .timeout = 300,
         .tests = {progressive_and_no_dri, damaged_segments, every_prefix_and_flip}})
