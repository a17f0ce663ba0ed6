/* image/image.h - the image room's interface: JPEG decoding (jpeg.c) and
 * torchvision's geometry (geometry.c), below both pack and the reader.
 * Resampling is resize.h, colour conversion ycc.h; the other file formats
 * (formats/formats.h) are pack's alone, so libstoker links no PNG, WebP,
 * GIF or TIFF library. Internal: not installed.
 *
 * Errors: every function that can fail returns STK_OK or an STK_IMG_E_*
 * code and fills a stk_error with one line that names no file or record
 * (the caller adds those). Policy stays with the callers: pack decides what
 * is too large and what it skips, the reader what a crop may cost. Nothing
 * here prints, exits or keeps global state; a stk__jpeg is one thread's.
 */
#ifndef STOKER_IMAGE_IMAGE_H
#define STOKER_IMAGE_IMAGE_H

#include "resize.h"
#include "stoker/format.h" /* stk_error, STK_E_* */

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- errors */

#define STK_IMG_E_CORRUPT STK_E_FORMAT          /* does not decode cleanly (any libjpeg warning too) */
#define STK_IMG_E_UNSUPPORTED STK_E_UNSUPPORTED /* valid, but a variant this build cannot decode      */
#define STK_IMG_E_TOO_LARGE STK_E_RANGE         /* refused by the caller's size check                 */
#define STK_IMG_E_NOMEM STK_E_NOMEM             /* out of memory                                      */

/* A caller's size policy, asked with the size from a header before any
 * pixel memory exists: STK_OK to go on, else a code (STK_IMG_E_TOO_LARGE)
 * and err filled. */
typedef struct {
    int (*check)(void *ctx, uint32_t w, uint32_t h, stk_error *err);
    void *ctx;
} stk__img_limits;

/* A scratch buffer that grows to the largest image seen and is reused; one
 * over STK_IMG_KEEP_BYTES is given back when a much smaller image follows,
 * so that one huge image does not pin its memory for a whole run. */
#define STK_IMG_KEEP_BYTES ((size_t)64 << 20)
typedef struct {
    uint8_t *p;
    size_t cap;
} stk__img_buf;

/* Room for n bytes (old contents lost): STK_OK, or STK_IMG_E_NOMEM with err
 * saying what for. */
int stk__img_buf_reserve(stk__img_buf *b, size_t n, const char *what, stk_error *err);
void stk__img_buf_free(stk__img_buf *b);

/* --------------------------------------------------------------- JPEG */

/* Every decode here, TurboJPEG's and libjpeg's alike:
 *   - the accurate integer IDCT and fancy upsampling (what Pillow decodes
 *     with: an unscaled decode is bit-identical to Pillow's), unless
 *     stk__jpeg_set_opts asks a region decode for merged upsampling;
 *   - a libjpeg warning inside the decoded part (corrupt entropy data,
 *     truncated data, a bad marker) is an error (STK_IMG_E_CORRUPT), and
 *     progressive files with absurd numbers of scans are refused;
 *   - the header is trusted only where the frame header that
 *     format/jpeg_dims.c parses confirms its size;
 *   - after any failure the decoder's handles are replaced: libjpeg-turbo
 *     2.1 leaves a TurboJPEG handle whose next header read "succeeds" with
 *     garbage sizes, so one bad value must not poison the next. */
typedef struct stk__jpeg stk__jpeg;

/* NULL when out of memory. The TurboJPEG and libjpeg objects are made on
 * first use. */
stk__jpeg *stk__jpeg_new(void);
void stk__jpeg_free(stk__jpeg *j); /* NULL: no-op */

/* Settings of the region decodes (stk__jpeg_decode_region, _plan, _all),
 * bits; a new decoder has ARENA alone. MERGED: no fancy upsampling
 * (libjpeg's merged upsampling and colour conversion of 4:2:0 and 4:2:2
 * frames, chroma replicated instead of interpolated: the pixels then are
 * not a whole decode's; the reader's crops use it); IFAST: the fast integer
 * IDCT (not used: its pixels differ on every image); ARENA: libjpeg's
 * image-lifetime memory served from chunks kept across images (the same
 * pixels); SPLICE: a stream with restart markers is first cut to the
 * segments that cover the region (stk__jpeg_splice), so that the rows above
 * it and the columns beside it are not entropy-decoded (the same pixels
 * with MERGED; not with fancy upsampling, whose chroma at the cut's edges
 * is then replicated; not used by _all, which reads the whole stream).
 * Takes effect at the next decode. */
#define STK_IMG_JPEG_MERGED 1u
#define STK_IMG_JPEG_IFAST 2u
#define STK_IMG_JPEG_ARENA 4u
#define STK_IMG_JPEG_SPLICE 8u
/* What the reader's crops decode with (reader/load_crop.c), and load_bench
 * measures as the load path: one place, so the two cannot drift. */
#define STK_IMG_JPEG_LOAD_OPTS (STK_IMG_JPEG_ARENA | STK_IMG_JPEG_MERGED | STK_IMG_JPEG_SPLICE)
void stk__jpeg_set_opts(stk__jpeg *j, unsigned opts);

/* Colour spaces and chroma layouts (TurboJPEG's TJCS_ and TJSAMP_ values). */
enum {
    STK_IMG_CS_RGB = 0,
    STK_IMG_CS_YCBCR = 1,
    STK_IMG_CS_GRAY = 2,
    STK_IMG_CS_CMYK = 3,
    STK_IMG_CS_YCCK = 4
};
enum {
    STK_IMG_SUB_444 = 0,
    STK_IMG_SUB_422 = 1,
    STK_IMG_SUB_420 = 2,
    STK_IMG_SUB_GRAY = 3,
    STK_IMG_SUB_440 = 4,
    STK_IMG_SUB_411 = 5
};

typedef struct {
    uint32_t w, h;       /* the frame's size                                    */
    unsigned components; /* 1, 3 or 4 (CMYK and YCCK)                           */
    int colorspace;      /* STK_IMG_CS_*, -1 when TurboJPEG has no name for it  */
    int subsamp;         /* STK_IMG_SUB_*, -1 likewise (odd sampling factors)   */
} stk__jpeg_info;

/* The header: *info filled, or STK_IMG_E_CORRUPT / _UNSUPPORTED. A frame
 * header whose sampling factors TurboJPEG has no name for is read from the
 * SOF (colorspace and subsamp -1) and left to the decode to judge.
 * info->w, info->h are set whenever the SOF gives them, also on failure
 * (else 0). */
int stk__jpeg_header(stk__jpeg *j, const uint8_t *data, size_t len, stk__jpeg_info *info, stk_error *err);

/* Output pixel formats of stk__jpeg_decode. */
enum { STK_IMG_PF_RGB = 0, STK_IMG_PF_GRAY = 1 };

/* The smallest DCT scale 1/den (den 1, 2, 4, 8: libjpeg-turbo's other
 * factors are slower than a full decode) whose decode of a w x h frame still
 * has at least need_w x need_h pixels. */
unsigned stk__jpeg_scale(const stk__jpeg *j, uint32_t w, uint32_t h, uint64_t need_w, uint64_t need_h);
/* A side of w pixels decoded at 1/den: ceil(w / den). */
uint32_t stk__jpeg_scaled(uint32_t w, unsigned den);
/* Bytes stk__jpeg_decode writes at out for this frame, format and scale
 * (a CMYK frame decoded to RGB needs 4 a pixel: converted in place). */
size_t stk__jpeg_decode_bytes(const stk__jpeg_info *info, int pf, unsigned den);

/* The whole frame at 1/den into out (stk__jpeg_decode_bytes of room),
 * tightly packed rows of stk__jpeg_scaled(info->w, den) pixels. CMYK and
 * YCCK become RGB by Pillow's formula for Adobe (inverted) CMYK. info is
 * stk__jpeg_header's for these bytes. */
int stk__jpeg_decode(stk__jpeg *j, const uint8_t *data, size_t len, const stk__jpeg_info *info, int pf,
                     unsigned den, uint8_t *out, stk_error *err);

/* Whether stk__jpeg_decode_planes reads this frame: YCbCr 4:4:4, 4:2:2,
 * 4:2:0, 4:4:0 or grayscale, which libjpeg fancy-upsamples by 2 or 1 per
 * axis. */
int stk__jpeg_planar_ok(const stk__jpeg_info *info);
/* The full-size frame's planes before colour conversion into buf, each row
 * 16 readable bytes longer than its samples and 32 spare bytes at the end
 * (what stk__resize_ycc's loads may touch); *v describes them. */
int stk__jpeg_decode_planes(stk__jpeg *j, const uint8_t *data, size_t len, const stk__jpeg_info *info,
                            stk__img_buf *buf, stk__ycc_view *v, stk_error *err);

/* Rows [y0, y0 + h) and at least columns [x0, x0 + w) of an RGB frame that
 * must be exactly W x H with 3 components, decoded as far as they need
 * (libjpeg: the rows above skipped without colour work, the columns widened
 * to whole iMCUs, and decoding stopped after the last row, so damage below
 * it goes unseen). The pixels are those of a whole decode. buf gets the
 * rows and `room` readable bytes after them; *at is where column x0 of the
 * first row lands, *stride the row length. */
int stk__jpeg_decode_region(stk__jpeg *j, const uint8_t *data, size_t len, uint32_t W, uint32_t H,
                            uint32_t x0, uint32_t y0, uint32_t w, uint32_t h, stk__img_buf *buf, size_t room,
                            const uint8_t **at, size_t *stride, stk_error *err);

/* A region of a JPEG with restart markers as a JPEG of its own
 * (jpeg_splice.c): the entropy-coded segments that cover the box
 * [x0, x0 + w) x [y0, y0 + h) of the frame, renumbered, behind the
 * stream's own tables and a frame header of the cut's size. Its pixels are
 * those of the same place in a whole decode wherever no chroma sample of a
 * neighbouring MCU is read (merged or no upsampling, 4:4:4, grayscale).
 * The cut's origin is on an MCU boundary, so at any DCT scale num/8 it maps
 * to a whole pixel (x * num / 8). */
typedef struct {
    uint32_t x, y, w, h; /* the cut, in the frame's pixels */
    size_t len;          /* its stream's bytes, at the start of out */
} stk__jpeg_cut;

/* Not an error: the stream has no restart markers the box can use
 * (none, progressive, segments that straddle rows), nothing would be left
 * out, or it does not read as stk__jpeg_splice expects: decode it whole. */
#define STK__JPEG_SPLICE_NO (-1)

/* STK_OK with out holding the cut and *cut describing it;
 * STK__JPEG_SPLICE_NO; or STK_IMG_E_NOMEM with err filled. Reads only the
 * markers and scans for 0xFF bytes: no decoding. */
int stk__jpeg_splice(const uint8_t *data, size_t len, uint32_t x0, uint32_t y0, uint32_t w, uint32_t h,
                     stk__img_buf *out, stk__jpeg_cut *cut, stk_error *err);

/* ------------------------------------------------------ decode planner */

/* How a crop of a JPEG is decoded (plan.c): the smallest DCT scale num/8
 * whose decode keeps at least the output's resolution over the box, the
 * region of the scaled frame that covers the box (rounded outward; libjpeg
 * widens its left edge to whole iMCU columns of that scale itself), and the
 * box in that region's coordinates, for stk__resize_box. */
typedef struct {
    unsigned num;          /* scale num/8, 1..8                                         */
    uint32_t sw, sh;       /* the scaled frame: ceil(W * num / 8) x ceil(H * num / 8)    */
    uint32_t x0, y0, w, h; /* the region to decode, in the scaled frame                 */
    double bx, by, bw, bh; /* the box in the region (fractional edges)                  */
} stk__jpeg_plan;

/* Allowed scales, bit n for num n/8. Powers of two are the SIMD-accelerated
 * reduced IDCTs of libjpeg-turbo (the others are slower than a full decode)
 * and leave a resize by 1 to 2, which keeps the result close to
 * torchvision's filter on a full decode. */
#define STK_IMG_SCALES_POW2 ((1u << 1) | (1u << 2) | (1u << 4) | (1u << 8))
#define STK_IMG_SCALES_ALL 0x1feu

/* The plan for the box [bx, bx + bw) x [by, by + bh) of a W x H frame
 * (inside it, bw, bh > 0) resampled to out_w x out_h, choosing among the
 * scales in `nums` (8/8 always allowed). spill: the resize may read past
 * the box (a Resize then CenterCrop, whose filter sees the neighbours of
 * the window): the region then extends by the filter's reach where the
 * frame allows; else (RandomResizedCrop, a crop then a resize) the region
 * is the box rounded outward. */
void stk__jpeg_plan_make(uint32_t W, uint32_t H, double bx, double by, double bw, double bh, uint32_t out_w,
                         uint32_t out_h, unsigned nums, int spill, stk__jpeg_plan *p);

/* The plan's region of a W x H JPEG with 1 or 3 components, decoded at its
 * scale as stk__jpeg_decode_region decodes (rows above skipped, columns
 * widened to whole iMCUs, decoding stopped after the last row), to RGB. At
 * 8/8 the pixels are those of a whole decode; below, libjpeg's reduced
 * IDCT's. buf, room, *at, *stride as for stk__jpeg_decode_region (*at is
 * region column 0 of its first row). A CMYK or YCCK frame:
 * STK_IMG_E_UNSUPPORTED before any work (the caller decodes it whole). */
int stk__jpeg_decode_plan(stk__jpeg *j, const uint8_t *data, size_t len, uint32_t W, uint32_t H,
                          const stk__jpeg_plan *p, stk__img_buf *buf, size_t room, const uint8_t **at,
                          size_t *stride, stk_error *err);

/* stk__jpeg_decode_plan, then the rest of the stream read through to its
 * EOI (the rows below the region entropy-decoded without IDCT or colour
 * work, but for the last), so that damage anywhere fails the decode as a
 * whole decode's would: what pack, which must refuse damaged inputs, uses. */
int stk__jpeg_decode_plan_all(stk__jpeg *j, const uint8_t *data, size_t len, uint32_t W, uint32_t H,
                              const stk__jpeg_plan *p, stk__img_buf *buf, size_t room, const uint8_t **at,
                              size_t *stride, stk_error *err);

/* Whether data[0 .. len) is a whole JPEG stream that stoker's decoders read:
 * its headers and every scan's entropy-coded data read through to EOI with
 * libjpeg's jpeg_read_coefficients (no IDCT, upsampling or colour work:
 * about half of a whole decode's time), under the policy of every decode
 * here (a libjpeg warning is an error; at most 500 scans). STK_OK, or
 * STK_IMG_E_CORRUPT (truncated, header-only, damaged), _UNSUPPORTED (12-bit
 * samples, lossless, ...), _TOO_LARGE (its coefficients, 128 bytes per 8x8
 * block, would need more than STK_IMG_CHECK_MAX_BYTES: over 179 megapixels
 * at 4:4:4) or _NOMEM, err saying what. What it does not see: what only
 * the IDCT, upsampling or colour conversion refuse (a whole decode does).
 * Keeps no state, so it is safe on any thread. This is the one call from the format library into
 * image/: its writer checks each JPEG value it is handed with it. */
#define STK_IMG_CHECK_MAX_BYTES ((uint64_t)1 << 30)
int stk__jpeg_check(const uint8_t *data, size_t len, stk_error *err);

/* data[0 .. len), a JPEG stream, rewritten as a baseline (sequential,
 * Huffman) JPEG when it is progressive or `restart` asks for restart
 * markers (every `restart` MCUs, up to 65535; 0: none): its DCT
 * coefficients, quantisation tables and sampling are copied as they are
 * (libjpeg's jpeg_read_coefficients, jpeg_copy_critical_parameters,
 * jpeg_write_coefficients: jpegtran's lossless transcode), so that every
 * decoder gives the very pixels of the original; the Huffman tables are
 * optimised for the image. Restart markers let a crop decode only the
 * segments it covers (stk__jpeg_splice). Markers other than the frame's own
 * (EXIF, ICC, comments) are left out; a JFIF or Adobe marker is written as
 * libjpeg writes one for the colour space. *out (malloc'd, the caller
 * frees) and *out_len: the new stream; *out NULL when data is sequential
 * and restart 0 (nothing to do); *was_progressive (may be NULL): whether it
 * was progressive. STK_OK, or STK_IMG_E_CORRUPT /
 * _UNSUPPORTED / _NOMEM with err filled, under the policy of every decode
 * here (a libjpeg warning is an error; at most 500 scans). Keeps no state. */
int stk__jpeg_transcode(const uint8_t *data, size_t len, unsigned restart, uint8_t **out, size_t *out_len,
                        bool *was_progressive, stk_error *err);

/* h rows of w RGB pixels (3 w bytes each) encoded as a baseline 4:2:0 JPEG
 * at `quality` as TurboJPEG's tjCompress2 encodes one (its DCT: the fast
 * integer one below quality 96, the standard Huffman tables), with a
 * restart marker every `restart` MCUs (0: none) into out[0 .. cap). (Tables
 * optimised for the image would win back the markers' bytes, about 6% at
 * one a MCU, for a third more encoding time.) STK_OK with
 * *out_len; STK_IMG_E_TOO_LARGE when it does not fit in cap, _NOMEM.
 * Keeps no state. */
int stk__jpeg_encode(const uint8_t *rgb, uint32_t w, uint32_t h, int quality, unsigned restart, uint8_t *out,
                     size_t cap, size_t *out_len, stk_error *err);

/* ----------------------------------------------------------- geometry */

/* torchvision's Resize + CenterCrop for a src_w x src_h source (both >= 1)
 * into a size x size output. The source is resized to resized_w x
 * resized_h, the window [crop_x, crop_x + w) x [crop_y, crop_y + h) of that
 * is written at (pad_x, pad_y) of the output, and the rest (only in FIT) is
 * padding.
 *   SHORTER: the shorter side becomes size, the longer int(size * long /
 *            short) (torchvision truncates); crop offsets are CenterCrop's
 *            int(round((resized - size) / 2.0)), half to even.
 *   STRETCH: size x size.
 *   FIT:     the longer side becomes size, the shorter round(size * short /
 *            long) (half up, at least 1), placed at ((size - w) / 2,
 *            (size - h) / 2) rounded down.
 *   KEEP:    no crop, no padding, w x h = resized_w x resized_h. With
 *            min_side, Resize(min_side, max_size=max_side): the shorter side
 *            min_side, the longer int(min_side * long / short); if that
 *            exceeds max_side, the longer becomes max_side and the shorter
 *            int(max_side * shorter / longer) (at least 1). Without, only
 *            images whose longer side exceeds max_side are resized: the
 *            longer to max_side, the shorter floor(short * max_side / long)
 *            (at least 1); smaller ones keep their size. */
typedef enum { STK_IMG_SHORTER = 0, STK_IMG_STRETCH = 1, STK_IMG_FIT = 2, STK_IMG_KEEP = 3 } stk__img_mode;

typedef struct {
    uint64_t resized_w, resized_h;
    uint64_t crop_x, crop_y;
    uint32_t w, h;
    uint32_t pad_x, pad_y;
} stk__img_layout;

void stk__img_layout_compute(stk__img_mode mode, uint32_t size, uint32_t min_side, uint32_t max_side,
                             uint32_t src_w, uint32_t src_h, stk__img_layout *l);

/* The ImageNet evaluation recipe for an out_w x out_h output of a W x H
 * image: Resize(round(S / 0.875)) on the shorter side (S the output's
 * shorter side), then CenterCrop(out_h, out_w); a very elongated output
 * never gets a window outside the resized image. l->w, l->h are the
 * output's; no padding. */
void stk__img_eval_layout(uint32_t out_w, uint32_t out_h, uint32_t W, uint32_t H, stk__img_layout *l);

/* The source region that stk__img_eval_layout's window maps to: [*bx, *bx +
 * *bw) x [*by, *by + *bh) of the W x H image (fractional edges), what a
 * decode of the eval crop alone needs (image/plan.c). */
void stk__img_eval_box(uint32_t out_w, uint32_t out_h, uint32_t W, uint32_t H, double *bx, double *by,
                       double *bw, double *bh);

/* A crop box in the source image. */
typedef struct {
    int32_t x0, y0, w, h;
} stk__img_box;

/* The random numbers a box is drawn from: 64 uniform bits a call. The
 * caller owns the generator (the reader keys it by seed, epoch and record). */
typedef struct {
    uint64_t (*next)(void *state);
    void *state;
} stk__img_rng;

/* A uniform double in [lo, hi) from the top 53 bits of one draw. */
double stk__img_uniform(const stk__img_rng *r, double lo, double hi);

/* torchvision's RandomResizedCrop.get_params for an H x W image, step for
 * step: ten tries of a uniform area fraction in [scale_min, scale_max) and
 * a log-uniform aspect ratio in [ratio_min, ratio_max), Python's round
 * (half to even), a uniform offset of the first box that fits; else the
 * whole image clamped to the ratio range, centred. */
void stk__img_rrc_box(uint32_t H, uint32_t W, double scale_min, double scale_max, double ratio_min,
                      double ratio_max, const stk__img_rng *r, stk__img_box *b);

#ifdef __cplusplus
}
#endif
#endif /* STOKER_IMAGE_IMAGE_H */
