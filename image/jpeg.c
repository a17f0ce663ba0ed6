/* image/jpeg.c - the one JPEG decoder: pack's ingest, the reader's crops
 * and shardview all decode here (image.h says what every decode promises).
 *
 * Whole, DCT-scaled and planar decodes go through TurboJPEG; a region goes
 * through libjpeg's own API, since TurboJPEG 2.1's cannot crop. */
#include "image.h"
#include "jpeg_dims.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include <jpeglib.h>

#include <jerror.h> /* after jpeglib.h: the message codes stk__jpeg_check sorts errors by */

/* TurboJPEG flags for every decode.
 *   accurate IDCT (TJFLAG_FASTDCT not set): what Pillow decodes with, so an
 *     unscaled decode is bit-identical to Pillow's; ifast is hardly faster
 *     with SIMD and less accurate at high quality, and makes no difference
 *     to a DCT-scaled decode, whose reduced IDCTs do not depend on it.
 *   fancy upsampling (TJFLAG_FASTUPSAMPLE not set): chroma interpolated as
 *     Pillow does; nearest-neighbour chroma costs visible quality at edges.
 *   TJFLAG_STOPONWARNING: a warning fails the image, so stop at once.
 *   TJFLAG_LIMITSCANS: refuse progressive files with absurd numbers of scans
 *     (a CPU-exhaustion attack on progressive decoding). */
#define STK_IMG_TJ_FLAGS (TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS)

/* libjpeg reports errors through error_exit, which must not return (its
 * default calls exit()): jump back. A warning (corrupt data it worked
 * around) is an error too, as TJFLAG_STOPONWARNING makes it for TurboJPEG. */
typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int code; /* STK_IMG_E_CORRUPT, or _NOMEM */
    char msg[STK_ERROR_MSG_MAX];
} jerr_t;

/* The region decodes' image-lifetime memory: libjpeg allocates its strip
 * buffers, tables and module objects per image and frees them all at the
 * end of each (free_pool(JPOOL_IMAGE)); served from chunks kept across
 * images instead, so that the heap is not grown and trimmed per image.
 * Chunks are ARENA_ALIGN-aligned, requests rounded up to ARENA_ALIGN as
 * libjpeg's own pools round them (its SIMD code may read and write up to
 * the next alignment). */
#define ARENA_ALIGN 32u
#define ARENA_CHUNK ((size_t)64 << 10)
/* larger requests go to libjpeg's own pools (a frame tens of thousands of
 * pixels wide); so does everything once the chunks hold this much */
#define ARENA_MAX_REQUEST ((size_t)16 << 20)
typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t cap, used; /* bytes of data, after the header's aligned end */
} arena_chunk;
#define ARENA_HDR ((sizeof(arena_chunk) + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1))

typedef struct {
    arena_chunk *head, *cur;
    size_t total; /* bytes held */
} arena_t;

struct stk__jpeg {
    tjhandle tj;                      /* whole, scaled and planar decodes */
    struct jpeg_decompress_struct ci; /* region decodes, kept: no pools to build per image */
    jerr_t je;
    struct jpeg_progress_mgr pm; /* the region decodes' scan limit */
    bool ci_made;
    unsigned scales;             /* bit k set: TurboJPEG offers scaling by 1/2^k (k = 1..3) */
    unsigned opts;               /* STK_IMG_JPEG_* settings of the region decodes */
    struct jpeg_memory_mgr mem0; /* libjpeg's own memory methods, which the arena's wrap */
    arena_t arena;
    stk__img_buf cut; /* SPLICE: the region's segments as a stream of their own */
};

/* ------------------------------------------------------------- handles */

#ifndef STK_IMG_JPEG_DEFAULT
#  define STK_IMG_JPEG_DEFAULT 0u
#endif

stk__jpeg *stk__jpeg_new(void)
{
    stk__jpeg *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->opts = STK_IMG_JPEG_ARENA;
    int n = 0;
    const tjscalingfactor *sf = tjGetScalingFactors(&n);
    for (int i = 0; sf && i < n; i++)
        for (unsigned k = 1; k <= 3; k++)
            if (sf[i].num == 1 && sf[i].denom == 1 << k) j->scales |= 1u << k;
    return j;
}

static void arena_release(arena_t *a)
{
    for (arena_chunk *c = a->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    *a = (arena_t){0};
}

void stk__jpeg_free(stk__jpeg *j)
{
    if (!j) return;
    if (j->tj) tjDestroy(j->tj);
    if (j->ci_made) jpeg_destroy_decompress(&j->ci);
    arena_release(&j->arena);
    stk__img_buf_free(&j->cut);
    free(j);
}

void stk__jpeg_set_opts(stk__jpeg *j, unsigned opts)
{
    if (j->ci_made && ((j->opts ^ opts) & STK_IMG_JPEG_ARENA)) { /* the arena is hooked at creation */
        jpeg_destroy_decompress(&j->ci);
        j->ci_made = false;
    }
    j->opts = opts;
}

static int tj_ready(stk__jpeg *j, stk_error *err)
{
    if (!j->tj && !(j->tj = tjInitDecompress()))
        return stk_error_set(err, STK_IMG_E_NOMEM, "out of memory (TurboJPEG handle)");
    return STK_OK;
}

/* Drop the TurboJPEG handle after any failure (made again on next use):
 * libjpeg-turbo 2.1 leaves it in a state where the next header read
 * "succeeds" with garbage sizes. */
static void tj_reset(stk__jpeg *j)
{
    if (j->tj) tjDestroy(j->tj);
    j->tj = NULL;
}

/* Report TurboJPEG's error, then replace the handle. Valid JPEGs this build
 * cannot decode (12-bit samples; lossless and hierarchical processes) are
 * unsupported; everything else is damage, "Unsupported marker type"
 * included, which noise produces. */
static int tj_fail(stk__jpeg *j, stk_error *err)
{
    const char *why = tjGetErrorStr2(j->tj);
    int rc = strncmp(why, "Unsupported JPEG", 16) == 0
                 ? stk_error_set(err, STK_IMG_E_UNSUPPORTED, "unsupported JPEG: %s", why)
                 : stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt JPEG: %s", why);
    tj_reset(j);
    return rc;
}

/* -------------------------------------------------------------- header */

int stk__jpeg_header(stk__jpeg *j, const uint8_t *data, size_t len, stk__jpeg_info *info, stk_error *err)
{
    memset(info, 0, sizeof *info);
    info->colorspace = info->subsamp = -1;
    uint32_t fw = 0, fh = 0;
    unsigned nc = 0;
    bool sof = stk__jpeg_dims(data, len, &fh, &fw, &nc);
    int rc = tj_ready(j, err), iw, ih, subsamp, cs;
    if (rc) return rc;
    if (tjDecompressHeader3(j->tj, data, (unsigned long)len, &iw, &ih, &subsamp, &cs) == 0) {
        /* TurboJPEG 2.1 also "succeeds" on a file cut before its frame header
         * (libjpeg reads it as a tables-only stream) and then reports whatever
         * the handle's fields held: trust only sizes the frame header confirms. */
        if (!sof || iw <= 0 || ih <= 0 || (uint32_t)iw != fw || (uint32_t)ih != fh) {
            tj_reset(j);
            return stk_error_set(err, STK_IMG_E_CORRUPT,
                                 "corrupt JPEG: no complete frame header (truncated file?)");
        }
        *info = (stk__jpeg_info){fw, fh, cs == TJCS_CMYK || cs == TJCS_YCCK ? 4u : nc, cs, subsamp};
        return STK_OK;
    }
    /* TurboJPEG 2.1 also refuses the header of JPEGs whose sampling factors
     * it has no name for (2x1,1x2,1x1; 3x1; ...), which libjpeg decodes
     * fine. Take the frame header's size and let the decode judge the rest;
     * keep TurboJPEG's message for when the frame header fails too. */
    rc = tj_fail(j, err);
    if (!sof) return rc;
    info->w = fw;
    info->h = fh;
    info->components = nc;
    return fw && fh ? STK_OK : rc;
}

/* -------------------------------------------------------- whole decodes */

unsigned stk__jpeg_scale(const stk__jpeg *j, uint32_t w, uint32_t h, uint64_t need_w, uint64_t need_h)
{
    for (unsigned k = 3; k >= 1; k--) {
        unsigned den = 1u << k;
        if ((j->scales & den) && stk__jpeg_scaled(w, den) >= need_w && stk__jpeg_scaled(h, den) >= need_h)
            return den;
    }
    return 1;
}

uint32_t stk__jpeg_scaled(uint32_t w, unsigned den) { return (uint32_t)(((uint64_t)w + den - 1) / den); }

static bool is_cmyk(const stk__jpeg_info *info) { return info->components == 4; }

size_t stk__jpeg_decode_bytes(const stk__jpeg_info *info, int pf, unsigned den)
{
    size_t px = (size_t)stk__jpeg_scaled(info->w, den) * stk__jpeg_scaled(info->h, den);
    return px * (pf == STK_IMG_PF_GRAY ? 1 : is_cmyk(info) ? 4 : 3);
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

int stk__jpeg_decode(stk__jpeg *j, const uint8_t *data, size_t len, const stk__jpeg_info *info, int pf,
                     unsigned den, uint8_t *out, stk_error *err)
{
    int rc = tj_ready(j, err);
    if (rc) return rc;
    bool cmyk = pf == STK_IMG_PF_RGB && is_cmyk(info);
    int sw = (int)stk__jpeg_scaled(info->w, den), sh = (int)stk__jpeg_scaled(info->h, den);
    int tpf = pf == STK_IMG_PF_GRAY ? TJPF_GRAY : cmyk ? TJPF_CMYK : TJPF_RGB;
    if (tjDecompress2(j->tj, data, (unsigned long)len, out, sw, 0, sh, tpf, STK_IMG_TJ_FLAGS) != 0)
        return tj_fail(j, err);
    if (cmyk) cmyk_to_rgb(out, (size_t)sw * (size_t)sh);
    return STK_OK;
}

int stk__jpeg_planar_ok(const stk__jpeg_info *info)
{
    if (info->colorspace == TJCS_GRAY) return info->subsamp == TJSAMP_GRAY;
    return info->colorspace == TJCS_YCbCr && (info->subsamp == TJSAMP_444 || info->subsamp == TJSAMP_422 ||
                                              info->subsamp == TJSAMP_420 || info->subsamp == TJSAMP_440);
}

int stk__jpeg_decode_planes(stk__jpeg *j, const uint8_t *data, size_t len, const stk__jpeg_info *info,
                            stk__img_buf *buf, stk__ycc_view *v, stk_error *err)
{
    int subsamp = info->subsamp, np = subsamp == TJSAMP_GRAY ? 1 : 3, stride[3] = {0, 0, 0};
    size_t at[3] = {0, 0, 0}, total = 0;
    for (int c = 0; c < np; c++) {
        int pw = tjPlaneWidth(c, (int)info->w, subsamp), ph = tjPlaneHeight(c, (int)info->h, subsamp);
        stride[c] = (pw + 16 + 31) & ~31;
        at[c] = total;
        total += (size_t)stride[c] * (size_t)ph;
    }
    int rc = tj_ready(j, err);
    if (rc || (rc = stk__img_buf_reserve(buf, total + 32, "the decoded image", err))) return rc;
    unsigned char *planes[3] = {buf->p + at[0], np == 3 ? buf->p + at[1] : NULL,
                                np == 3 ? buf->p + at[2] : NULL};
    if (tjDecompressToYUVPlanes(j->tj, data, (unsigned long)len, planes, (int)info->w, stride, (int)info->h,
                                STK_IMG_TJ_FLAGS) != 0)
        return tj_fail(j, err);
    memset(buf->p + total, 0, 32);
    *v = (stk__ycc_view){{planes[0], planes[1], planes[2]},
                         {(size_t)stride[0], (size_t)stride[1], (size_t)stride[2]},
                         info->w,
                         info->h,
                         subsamp == TJSAMP_422 || subsamp == TJSAMP_420 ? 2u : 1u,
                         subsamp == TJSAMP_440 || subsamp == TJSAMP_420 ? 2u : 1u};
    return STK_OK;
}

/* ------------------------------------------------------ the region arena */

static stk__jpeg *of_ci(j_common_ptr c) { return (stk__jpeg *)c->client_data; }

/* n bytes (a multiple of ARENA_ALIGN) from the arena, or NULL when it is
 * out of its bounds or of memory (the caller falls back to libjpeg's pools). */
static void *arena_get(arena_t *a, size_t n)
{
    if (n > ARENA_MAX_REQUEST) return NULL;
    for (; a->cur; a->cur = a->cur->next)
        if (a->cur->cap - a->cur->used >= n) break;
    if (!a->cur) {
        if (a->total >= ARENA_MAX_REQUEST) return NULL;
        size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        arena_chunk *c = aligned_alloc(ARENA_ALIGN, ARENA_HDR + cap);
        if (!c) return NULL;
        *c = (arena_chunk){NULL, cap, 0};
        arena_chunk **tail = &a->head;
        while (*tail) tail = &(*tail)->next;
        *tail = a->cur = c;
        a->total += cap;
    }
    void *p = (uint8_t *)a->cur + ARENA_HDR + a->cur->used;
    a->cur->used += n;
    return p;
}

static size_t arena_round(size_t n) { return (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1); }

static void *arena_small(j_common_ptr c, int pool, size_t n)
{
    stk__jpeg *j = of_ci(c);
    void *p = pool == JPOOL_IMAGE && n <= ARENA_MAX_REQUEST ? arena_get(&j->arena, arena_round(n)) : NULL;
    return p ? p : j->mem0.alloc_small(c, pool, n);
}

static void *arena_large(j_common_ptr c, int pool, size_t n)
{
    stk__jpeg *j = of_ci(c);
    void *p = pool == JPOOL_IMAGE && n <= ARENA_MAX_REQUEST ? arena_get(&j->arena, arena_round(n)) : NULL;
    return p ? p : j->mem0.alloc_large(c, pool, n);
}

/* As libjpeg's alloc_sarray: rows padded to 2 * ARENA_ALIGN samples (its
 * upsamplers write up to there), one block of rows. */
static JSAMPARRAY arena_sarray(j_common_ptr c, int pool, JDIMENSION per_row, JDIMENSION rows)
{
    stk__jpeg *j = of_ci(c);
    size_t w = ((size_t)per_row + 2 * ARENA_ALIGN - 1) & ~(size_t)(2 * ARENA_ALIGN - 1);
    if (pool == JPOOL_IMAGE && rows && w * rows <= ARENA_MAX_REQUEST) {
        JSAMPARRAY r = arena_get(&j->arena, arena_round(rows * sizeof(JSAMPROW)));
        JSAMPROW px = r ? arena_get(&j->arena, w * rows) : NULL;
        if (px) {
            for (JDIMENSION k = 0; k < rows; k++) r[k] = px + w * k;
            return r;
        }
    }
    return j->mem0.alloc_sarray(c, pool, per_row, rows);
}

static JBLOCKARRAY arena_barray(j_common_ptr c, int pool, JDIMENSION per_row, JDIMENSION rows)
{
    stk__jpeg *j = of_ci(c);
    size_t w = (size_t)per_row * sizeof(JBLOCK);
    if (pool == JPOOL_IMAGE && rows && w * rows <= ARENA_MAX_REQUEST) {
        JBLOCKARRAY r = arena_get(&j->arena, arena_round(rows * sizeof(JBLOCKROW)));
        JBLOCKROW b = r ? arena_get(&j->arena, arena_round(w * rows)) : NULL;
        if (b) {
            for (JDIMENSION k = 0; k < rows; k++) r[k] = b + (size_t)per_row * k;
            return r;
        }
    }
    return j->mem0.alloc_barray(c, pool, per_row, rows);
}

/* The image's memory given back: the arena's chunks kept for the next one
 * (all of them dropped if a huge frame made them grow past the bound). */
static void arena_reset(arena_t *a)
{
    if (a->total > ARENA_MAX_REQUEST) arena_release(a);
    for (arena_chunk *c = a->head; c; c = c->next) c->used = 0;
    a->cur = a->head;
}

static void arena_free_pool(j_common_ptr c, int pool)
{
    stk__jpeg *j = of_ci(c);
    j->mem0.free_pool(c, pool);
    if (pool == JPOOL_IMAGE) arena_reset(&j->arena);
}

static void arena_self_destruct(j_common_ptr c)
{
    stk__jpeg *j = of_ci(c);
    arena_reset(&j->arena);
    j->mem0.self_destruct(c);
}

/* The arena under a freshly created decompress object. */
static void arena_hook(stk__jpeg *j)
{
    struct jpeg_memory_mgr *m = j->ci.mem;
    j->ci.client_data = j;
    j->mem0 = *m;
    m->alloc_small = arena_small;
    m->alloc_large = arena_large;
    m->alloc_sarray = arena_sarray;
    m->alloc_barray = arena_barray;
    m->free_pool = arena_free_pool;
    m->self_destruct = arena_self_destruct;
}

/* -------------------------------------------------------- region decode */

static void on_error(j_common_ptr ci)
{
    jerr_t *e = (jerr_t *)(void *)ci->err;
    ci->err->format_message(ci, e->msg);
    longjmp(e->jb, 1);
}

static void on_message(j_common_ptr ci, int level)
{
    if (level < 0) on_error(ci); /* warnings; trace messages (level > 0) are ignored */
}

static void fail_region(stk__jpeg *j, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void fail_region(stk__jpeg *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->je.msg, sizeof j->je.msg, fmt, ap);
    va_end(ap);
    longjmp(j->je.jb, 1);
}

/* TurboJPEG's TJFLAG_LIMITSCANS bound, for the region decodes too. */
#define REGION_MAX_SCANS 500

static void region_progress(j_common_ptr c)
{
    j_decompress_ptr ci = (j_decompress_ptr)c;
    if (ci->input_scan_number > REGION_MAX_SCANS) {
        stk__jpeg *j = (stk__jpeg *)(void *)((char *)ci - offsetof(stk__jpeg, ci));
        fail_region(j, "more than %d scans", REGION_MAX_SCANS);
    }
}

/* SPLICE: the stream cut to the segments covering the region (in the num/8
 * frame) of its W x H frame, in j->cut; the frame and the region's origin
 * then those of the cut. STK__JPEG_SPLICE_NO leaves everything as it was. */
static int cut_to_region(stk__jpeg *j, const uint8_t **data, size_t *len, uint32_t *W, uint32_t *H,
                         unsigned num, uint32_t *x0, uint32_t *y0, uint32_t w, uint32_t h, stk_error *err)
{
    /* the frame's pixels under the scaled region, rounded outward */
    uint64_t X0 = (uint64_t)*x0 * 8 / num, Y0 = (uint64_t)*y0 * 8 / num;
    uint64_t X1 = (((uint64_t)*x0 + w) * 8 + num - 1) / num, Y1 = (((uint64_t)*y0 + h) * 8 + num - 1) / num;
    if (!w || !h || X0 >= *W || Y0 >= *H) return STK__JPEG_SPLICE_NO; /* region() says what is wrong */
    X1 = X1 < *W ? X1 : *W;
    Y1 = Y1 < *H ? Y1 : *H;
    stk__jpeg_cut c;
    int rc = stk__jpeg_splice(*data, *len, (uint32_t)X0, (uint32_t)Y0, (uint32_t)(X1 - X0),
                              (uint32_t)(Y1 - Y0), &j->cut, &c, err);
    if (rc != STK_OK) return rc;
    *data = j->cut.p;
    *len = c.len;
    *W = c.w;
    *H = c.h;
    *x0 -= (uint32_t)((uint64_t)c.x * num / 8); /* exact: the cut starts on an MCU */
    *y0 -= (uint32_t)((uint64_t)c.y * num / 8);
    return STK_OK;
}

/* Rows [y0, y0 + h) and at least columns [x0, x0 + w) of the frame decoded
 * at num/8 (coordinates of the scaled frame); gray: 1-component frames too.
 * to_end: the stream is then read through to its EOI (the rows below
 * entropy-decoded, their last one whole), so that damage anywhere fails. */
static int decode_region(stk__jpeg *j, const uint8_t *data, size_t len, uint32_t W, uint32_t H, unsigned num,
                         bool gray, bool to_end, uint32_t x0, uint32_t y0, uint32_t w, uint32_t h,
                         stk__img_buf *buf, size_t room, const uint8_t **at, size_t *stride, stk_error *err)
{
    struct jpeg_decompress_struct *ci = &j->ci;
    uint32_t fw = 0, fh = 0;
    unsigned nc = 0;
    bool sof = stk__jpeg_dims(data, len, &fh, &fw, &nc);
    if (gray && sof && fw == W && fh == H && nc == 4)
        return stk_error_set(err, STK_IMG_E_UNSUPPORTED, "a CMYK frame has no region decode");
    if (!sof || fw != W || fh != H || !(nc == 3 || (gray && nc == 1)))
        return stk_error_set(err, STK_IMG_E_CORRUPT,
                             "its frame header does not give its %ux%u shape with 3 components", W, H);
    if (setjmp(j->je.jb)) {
        /* a fresh object for the next image: nothing of this one is trusted */
        jpeg_destroy_decompress(ci);
        j->ci_made = false;
        return j->je.code == STK_IMG_E_NOMEM
                   ? stk_error_set(err, STK_IMG_E_NOMEM, "%s", j->je.msg)
                   : stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt JPEG: %s", j->je.msg);
    }
    j->je.code = STK_IMG_E_CORRUPT;
    if (!j->ci_made) {
        ci->err = jpeg_std_error(&j->je.pub);
        j->je.pub.error_exit = on_error;
        j->je.pub.emit_message = on_message;
        jpeg_create_decompress(ci);
        if (j->opts & STK_IMG_JPEG_ARENA) arena_hook(j);
        j->pm.progress_monitor = region_progress;
        ci->progress = &j->pm;
        j->ci_made = true;
    }
    jpeg_mem_src(ci, data, (unsigned long)len);
    jpeg_read_header(ci, TRUE);
    if (ci->image_width != W || ci->image_height != H || (unsigned)ci->num_components != nc)
        fail_region(j, "its header does not give its %ux%u shape with %u components", W, H, nc);
    ci->out_color_space = JCS_RGB; /* libjpeg-turbo converts grayscale to RGB too */
    ci->scale_num = num;
    ci->scale_denom = 8;
    if (j->opts & STK_IMG_JPEG_MERGED) ci->do_fancy_upsampling = FALSE;
    if (j->opts & STK_IMG_JPEG_IFAST) ci->dct_method = JDCT_IFAST;
    jpeg_start_decompress(ci);
    uint32_t OW = ci->output_width, OH = ci->output_height;
    if (x0 >= OW || w > OW - x0 || y0 >= OH || h > OH - y0 || !w || !h)
        fail_region(j, "the region %u+%u x %u+%u is outside its %ux%u decode", x0, w, y0, h, OW, OH);
    /* jpeg_crop_scanline widens the left edge to an iMCU boundary but
     * upsamples the chroma at the crop's edges by replication, unlike a
     * whole decode: ask for 1 more column on the left (an edge already on an
     * iMCU boundary would otherwise lose its left neighbour) and 2 more on
     * the right (fancy upsampling reads one chroma sample on each side), so
     * that the region's own columns get the neighbours a whole decode gives
     * them, at every subsampling and scale. */
    JDIMENSION xoff = x0 ? x0 - 1 : 0, want = x0 - xoff + w + 2, cw = OW - xoff < want ? OW - xoff : want;
    jpeg_crop_scanline(ci, &xoff, &cw); /* widened to whole iMCU columns */
    size_t row = (size_t)cw * 3;
    stk_error oom;
    /* to_end: the stream's last row lands after the region's, in its room */
    if (stk__img_buf_reserve(buf, row * h + (to_end && row > room ? row : room), "the crop", &oom)) {
        j->je.code = STK_IMG_E_NOMEM;
        fail_region(j, "%s", oom.msg);
    }
    if (y0 && jpeg_skip_scanlines(ci, y0) != y0) fail_region(j, "it ends before row %u of %u", y0, OH);
    for (uint32_t y = 0; y < h;) { /* as many rows a call as libjpeg makes at once */
        JSAMPROW rows[16];
        JDIMENSION n = h - y < 16 ? h - y : 16;
        for (JDIMENSION k = 0; k < n; k++) rows[k] = buf->p + row * (y + k);
        JDIMENSION got = jpeg_read_scanlines(ci, rows, n);
        if (got == 0) fail_region(j, "it ends at row %u of %u", y0 + y, OH);
        y += got;
    }
    if (to_end) {
        uint32_t left = OH - (y0 + h);
        JSAMPROW last = buf->p + row * h;
        /* skipping to the very end would mark EOI without reading: stop one row short */
        if (left > 1 && jpeg_skip_scanlines(ci, left - 1) != left - 1)
            fail_region(j, "it ends before row %u of %u", OH - 1, OH);
        if (left && jpeg_read_scanlines(ci, &last, 1) != 1)
            fail_region(j, "it ends at row %u of %u", OH - 1, OH);
        jpeg_finish_decompress(ci); /* through to EOI */
    } else {
        jpeg_abort_decompress(ci); /* the rows below the region are never decoded */
    }
    *at = buf->p + (size_t)(x0 - xoff) * 3;
    *stride = row;
    return STK_OK;
}

/* decode_region, of the cut when SPLICE finds one */
static int region(stk__jpeg *j, const uint8_t *data, size_t len, uint32_t W, uint32_t H, unsigned num,
                  bool gray, bool to_end, uint32_t x0, uint32_t y0, uint32_t w, uint32_t h, stk__img_buf *buf,
                  size_t room, const uint8_t **at, size_t *stride, stk_error *err)
{
    if ((j->opts & STK_IMG_JPEG_SPLICE) && !to_end) {
        int rc = cut_to_region(j, &data, &len, &W, &H, num, &x0, &y0, w, h, err);
        if (rc != STK_OK && rc != STK__JPEG_SPLICE_NO) return rc;
    }
    return decode_region(j, data, len, W, H, num, gray, to_end, x0, y0, w, h, buf, room, at, stride, err);
}

int stk__jpeg_decode_region(stk__jpeg *j, const uint8_t *data, size_t len, uint32_t W, uint32_t H,
                            uint32_t x0, uint32_t y0, uint32_t w, uint32_t h, stk__img_buf *buf, size_t room,
                            const uint8_t **at, size_t *stride, stk_error *err)
{
    return region(j, data, len, W, H, 8, false, false, x0, y0, w, h, buf, room, at, stride, err);
}

int stk__jpeg_decode_plan(stk__jpeg *j, const uint8_t *data, size_t len, uint32_t W, uint32_t H,
                          const stk__jpeg_plan *p, stk__img_buf *buf, size_t room, const uint8_t **at,
                          size_t *stride, stk_error *err)
{
    return region(j, data, len, W, H, p->num, true, false, p->x0, p->y0, p->w, p->h, buf, room, at, stride,
                  err);
}

int stk__jpeg_decode_plan_all(stk__jpeg *j, const uint8_t *data, size_t len, uint32_t W, uint32_t H,
                              const stk__jpeg_plan *p, stk__img_buf *buf, size_t room, const uint8_t **at,
                              size_t *stride, stk_error *err)
{
    return region(j, data, len, W, H, p->num, true, true, p->x0, p->y0, p->w, p->h, buf, room, at, stride,
                  err);
}

/* ---------------------------------------------------------- entropy check */

/* What stk__jpeg_check reads with: the libjpeg object, the error manager the
 * region decode uses (a warning is an error there too) and a scan counter. On
 * the heap: nothing that changes between setjmp and longjmp lives in a
 * register. */
typedef struct {
    struct jpeg_decompress_struct ci;
    jerr_t je;
    struct jpeg_progress_mgr pm;
    bool made, own; /* own: the failure is this file's, not libjpeg's */
} check_t;

/* TurboJPEG's TJFLAG_LIMITSCANS bound: the decoders refuse more scans, so
 * the check does too. */
#define CHECK_MAX_SCANS 500

static void fail_check(check_t *k, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

static void check_progress(j_common_ptr c)
{
    j_decompress_ptr ci = (j_decompress_ptr)c;
    if (ci->input_scan_number > CHECK_MAX_SCANS) {
        check_t *k = (check_t *)(void *)ci; /* ci is check_t's first member */
        fail_check(k, STK_IMG_E_CORRUPT, "more than %d scans", CHECK_MAX_SCANS);
    }
}

static void fail_check(check_t *k, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->je.msg, sizeof k->je.msg, fmt, ap);
    va_end(ap);
    k->je.code = code;
    k->own = true;
    longjmp(k->je.jb, 1);
}

/* What a libjpeg error means for the caller: valid streams this build cannot
 * read are unsupported (as tj_fail says for TurboJPEG), memory is memory,
 * everything else (every warning included) is damage. */
static int check_code(int msg_code)
{
    switch (msg_code) {
    case JERR_OUT_OF_MEMORY:
        return STK_IMG_E_NOMEM;
    case JERR_NO_BACKING_STORE:
        return STK_IMG_E_TOO_LARGE;
    case JERR_BAD_PRECISION:
    case JERR_NOT_COMPILED:
    case JERR_SOF_UNSUPPORTED:
        return STK_IMG_E_UNSUPPORTED;
    default:
        return STK_IMG_E_CORRUPT;
    }
}

int stk__jpeg_check(const uint8_t *data, size_t len, stk_error *err)
{
    check_t *k = calloc(1, sizeof *k);
    if (!k) return stk_error_set(err, STK_IMG_E_NOMEM, "out of memory (JPEG check)");
    struct jpeg_decompress_struct *ci = &k->ci;
    int rc = STK_OK;
    if (setjmp(k->je.jb)) {
        int code = k->own ? k->je.code : check_code(ci->err->msg_code);
        rc =
            code == STK_IMG_E_NOMEM ? stk_error_set(err, code, "out of memory checking a JPEG: %s", k->je.msg)
            : code == STK_IMG_E_TOO_LARGE ? stk_error_set(err, code, "JPEG too large to check: %s", k->je.msg)
            : code == STK_IMG_E_UNSUPPORTED ? stk_error_set(err, code, "unsupported JPEG: %s", k->je.msg)
                                            : stk_error_set(err, code, "corrupt JPEG: %s", k->je.msg);
        goto done;
    }
    ci->err = jpeg_std_error(&k->je.pub);
    k->je.pub.error_exit = on_error;
    k->je.pub.emit_message = on_message;
    jpeg_create_decompress(ci);
    k->made = true;
    /* a backstop above the bound below: libjpeg has no backing store here,
     * so arrays past this fail (JERR_NO_BACKING_STORE) instead of being
     * allocated */
    ci->mem->max_memory_to_use = (long)(STK_IMG_CHECK_MAX_BYTES + ((uint64_t)16 << 20));
    k->pm.progress_monitor = check_progress;
    ci->progress = &k->pm;
    jpeg_mem_src(ci, data, (unsigned long)len);
    jpeg_read_header(ci, TRUE); /* 12-bit samples fail here in an 8-bit libjpeg (JERR_BAD_PRECISION) */
    if (ci->data_precision != 8)
        fail_check(k, STK_IMG_E_UNSUPPORTED, "%d-bit samples (stoker decodes 8-bit JPEG only)",
                   ci->data_precision);
    /* jpeg_read_coefficients holds the whole image's coefficients, 128 bytes
     * a block (components rounded up to whole sampling groups) */
    uint64_t blocks = 0;
    for (int c = 0; c < ci->num_components; c++) {
        const jpeg_component_info *cp = &ci->comp_info[c];
        blocks += ((uint64_t)cp->width_in_blocks + (uint64_t)cp->h_samp_factor) *
                  ((uint64_t)cp->height_in_blocks + (uint64_t)cp->v_samp_factor);
    }
    if (blocks > STK_IMG_CHECK_MAX_BYTES / 128)
        fail_check(k, STK_IMG_E_TOO_LARGE,
                   "%ux%u with %d components needs %llu MiB of coefficients, over %llu", ci->image_width,
                   ci->image_height, ci->num_components, (unsigned long long)(blocks * 128 >> 20),
                   (unsigned long long)(STK_IMG_CHECK_MAX_BYTES >> 20));
    (void)jpeg_read_coefficients(ci); /* every scan's entropy-coded data, through to EOI */
    jpeg_finish_decompress(ci);
done:
    if (k->made) jpeg_destroy_decompress(ci);
    free(k);
    return rc;
}

/* ------------------------------------------------- progressive -> baseline */

/* A libjpeg destination into a buffer of ours that grows (jpeg_mem_dest's
 * own buffer cannot be freed safely after an error part way). */
typedef struct {
    struct jpeg_destination_mgr pub;
    uint8_t *p;
    size_t cap;
    check_t *k;
} grow_dest;

static void grow_init(j_compress_ptr c)
{
    grow_dest *d = (grow_dest *)(void *)c->dest;
    d->pub.next_output_byte = d->p;
    d->pub.free_in_buffer = d->cap;
}

static boolean grow_empty(j_compress_ptr c) /* called with the buffer full */
{
    grow_dest *d = (grow_dest *)(void *)c->dest;
    size_t n = d->cap * 2;
    uint8_t *q = realloc(d->p, n);
    if (!q) fail_check(d->k, STK_IMG_E_NOMEM, "out of memory (%zu bytes for a baseline JPEG)", n);
    d->pub.next_output_byte = q + d->cap;
    d->pub.free_in_buffer = n - d->cap;
    d->p = q;
    d->cap = n;
    return TRUE;
}

static void grow_term(j_compress_ptr c) { (void)c; }

/* What stk__jpeg_transcode works with: check_t's reader and a writer
 * sharing its error manager. On the heap, as check_t. */
typedef struct {
    check_t k; /* first: check_progress casts the decompress object to it */
    struct jpeg_compress_struct co;
    bool co_made;
    grow_dest dest;
} transcode_t;

int stk__jpeg_transcode(const uint8_t *data, size_t len, unsigned restart, uint8_t **out, size_t *out_len,
                        bool *was_progressive, stk_error *err)
{
    *out = NULL;
    *out_len = 0;
    if (was_progressive) *was_progressive = false;
    transcode_t *t = calloc(1, sizeof *t);
    if (!t) return stk_error_set(err, STK_IMG_E_NOMEM, "out of memory (JPEG transcode)");
    check_t *k = &t->k;
    struct jpeg_decompress_struct *ci = &k->ci;
    t->dest = (grow_dest){{NULL, 0, grow_init, grow_empty, grow_term}, malloc(len + 4096), len + 4096, k};
    if (!t->dest.p) {
        free(t);
        return stk_error_set(err, STK_IMG_E_NOMEM, "out of memory (JPEG transcode)");
    }
    int rc = STK_OK;
    if (setjmp(k->je.jb)) {
        int code = k->own ? k->je.code : check_code(k->je.pub.msg_code);
        rc = code == STK_IMG_E_NOMEM
                 ? stk_error_set(err, code, "out of memory transcoding a JPEG: %s", k->je.msg)
             : code == STK_IMG_E_UNSUPPORTED
                 ? stk_error_set(err, code, "unsupported JPEG: %s", k->je.msg)
                 : stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt JPEG: %s", k->je.msg);
        goto done;
    }
    ci->err = jpeg_std_error(&k->je.pub);
    k->je.pub.error_exit = on_error;
    k->je.pub.emit_message = on_message;
    jpeg_create_decompress(ci);
    k->made = true;
    k->pm.progress_monitor = check_progress;
    ci->progress = &k->pm;
    jpeg_mem_src(ci, data, (unsigned long)len);
    jpeg_read_header(ci, TRUE);
    if (was_progressive) *was_progressive = ci->progressive_mode;
    if (!ci->progressive_mode && !restart) goto done; /* nothing to do */
    if (ci->data_precision != 8)
        fail_check(k, STK_IMG_E_UNSUPPORTED, "%d-bit samples (stoker decodes 8-bit JPEG only)",
                   ci->data_precision);
    jvirt_barray_ptr *coef = jpeg_read_coefficients(ci);
    t->co.err = &k->je.pub; /* the one error manager: any failure jumps back above */
    jpeg_create_compress(&t->co);
    t->co_made = true;
    jpeg_copy_critical_parameters(ci, &t->co);
    t->co.optimize_coding = TRUE; /* two passes over the coefficients: the smallest baseline */
    t->co.restart_interval = restart;
    t->co.dest = &t->dest.pub;
    jpeg_write_coefficients(&t->co, coef);
    jpeg_finish_compress(&t->co);
    jpeg_finish_decompress(ci);
    *out = t->dest.p;
    *out_len = t->dest.cap - t->dest.pub.free_in_buffer;
    t->dest.p = NULL;
done:
    if (t->co_made) jpeg_destroy_compress(&t->co);
    if (k->made) jpeg_destroy_decompress(ci);
    free(t->dest.p);
    free(t);
    return rc;
}

/* stk__jpeg_encode's state, on the heap: the jmp_buf outlives no frame. */
typedef struct {
    jerr_t je;
    struct jpeg_compress_struct co;
    bool made;
    unsigned char *mem; /* jpeg_mem_dest's buffer: out, or one libjpeg grew */
    unsigned long mem_len;
} encode_t;

static int encode(encode_t *e, const uint8_t *rgb, uint32_t w, uint32_t h, int quality, unsigned restart,
                  stk_error *err)
{
    struct jpeg_compress_struct *co = &e->co;
    if (setjmp(e->je.jb)) return stk_error_set(err, STK_IMG_E_NOMEM, "JPEG encoding failed: %s", e->je.msg);
    co->err = jpeg_std_error(&e->je.pub);
    e->je.pub.error_exit = on_error;
    jpeg_create_compress(co);
    e->made = true;
    jpeg_mem_dest(co, &e->mem, &e->mem_len);
    co->image_width = w;
    co->image_height = h;
    co->input_components = 3;
    co->in_color_space = JCS_RGB;
    jpeg_set_defaults(co); /* YCbCr, 4:2:0 (2x2 luma), standard tables */
    jpeg_set_quality(co, quality, TRUE);
    co->dct_method = quality >= 96 ? JDCT_ISLOW : JDCT_FASTEST; /* as tjCompress2 */
    co->restart_interval = restart;
    jpeg_start_compress(co, TRUE);
    while (co->next_scanline < h) {
        JSAMPROW row = (JSAMPROW)(uintptr_t)(rgb + (size_t)co->next_scanline * w * 3);
        jpeg_write_scanlines(co, &row, 1);
    }
    jpeg_finish_compress(co);
    return STK_OK;
}

int stk__jpeg_encode(const uint8_t *rgb, uint32_t w, uint32_t h, int quality, unsigned restart, uint8_t *out,
                     size_t cap, size_t *out_len, stk_error *err)
{
    encode_t *e = calloc(1, sizeof *e);
    if (!e) return stk_error_set(err, STK_IMG_E_NOMEM, "out of memory (JPEG encoder)");
    e->mem = out;
    e->mem_len = cap;
    int rc = encode(e, rgb, w, h, quality, restart, err);
    if (rc == STK_OK && e->mem != out) /* did not fit in cap: libjpeg grew its own buffer */
        rc = stk_error_set(err, STK_IMG_E_TOO_LARGE, "a %ux%u JPEG of %lu bytes exceeds its %zu", w, h,
                           e->mem_len, cap);
    *out_len = rc == STK_OK ? e->mem_len : 0;
    if (e->made) jpeg_destroy_compress(&e->co);
    if (e->mem != out) free(e->mem);
    free(e);
    return rc;
}
