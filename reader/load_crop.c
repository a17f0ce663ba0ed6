/* reader/load_crop.c - the image pipeline at load: images of their own size
 * (array fields u8[*,*,3], raw or JPEG) cropped and resized on the worker
 * threads into out_h x out_w, so a batch leaves the worker as one u8
 * [B, out_h, out_w, 3] tensor that the device transform, Python and the tools
 * take as they take a square field.
 *
 * The crop box is torchvision's, drawn per (seed, epoch, record) over the
 * stored image's whole size (stk__xform_box, as on the device); the crop is
 * resampled with pack's filter (image/resize.c: Pillow's antialiased
 * bilinear, torchvision's Resize(antialias=True) on a PIL image), mirrored
 * when the draw says so (by the resize's own tables: no pass of its own).
 * Eval (STK_CROP_CENTER) is the ImageNet recipe for images of their own
 * size: the shorter side to round(S / 0.875), then the central S x S
 * (torchvision Resize + CenterCrop); for square images (resized by pack
 * already) the central S x S, as on the device.
 * STK_CROP_NONE stretches the whole image.
 * A JPEG value under a random or eval crop goes through image/'s decode
 * planner: the box (the random crop's, or the source region the eval
 * window maps to) decoded alone (rows above skipped, its iMCU columns alone
 * transformed, decoding stopped after its last row) at the smallest power-of-
 * two DCT scale that keeps the output's resolution over it, then resampled
 * from its fractional edges to the output with the flip. The region decode
 * uses libjpeg's merged upsampling (4:2:0 and 4:2:2 chroma replicated), and
 * a DCT scale when the box is at least twice the output, so the pixels are
 * not a whole decode's (README: within the stated PSNR of it). CMYK JPEGs, and the
 * whole-image stretch, decode whole. The geometry
 * is image/geometry.c's; this file keeps the crop's policy (which decode,
 * the pixel limit, what a record's error says). */
#include "image.h"
#include "device.h"
#include "resize.h"
#include "trace.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* pack's default --max-pixels: no stored image of a real dataset is larger */
#define CROP_MAX_PIXELS 100000000u
/* Bytes kept readable after a decoded image, so that the resize's SIMD loads
 * may reach past its last row (stk__rgb_view.room): 16 per 4 taps of a
 * reduction by up to 16 (what a crop's decode leaves). */
#define PX_ROOM 64u

struct stk__cropper {
    stk__resizer *rs;
    stk__jpeg *jpeg;                /* JPEG fields: the decoder */
    stk__img_buf px;                /* a decoded JPEG, PX_ROOM bytes after it */
    double stage[STK__CROP_STAGES]; /* seconds per stage since the last take */
    stk__timeline *tl;              /* stk__cropper_trace: the next crop's stages marked there */
    unsigned track, part;
    uint64_t seq;
};

void stk__cropper_take(stk__cropper *c, double sum[STK__CROP_STAGES])
{
    for (int s = 0; s < STK__CROP_STAGES; s++) {
        sum[s] += c->stage[s];
        c->stage[s] = 0;
    }
}

void stk__cropper_add(stk__cropper *c, int s, double secs) { c->stage[s] += secs; }

void stk__cropper_trace(stk__cropper *c, stk__timeline *tl, unsigned track, uint64_t seq, unsigned part)
{
    c->tl = tl;
    c->track = track;
    c->seq = seq;
    c->part = part;
}

/* Stage s begins: its start time, and its range when the crop is traced. */
static double stage_begin(const stk__cropper *c, const char *name)
{
    STK_TRACE_PUSH(c->tl, c->track, name, c->seq, c->part);
    return stk__now();
}

static void stage_end(stk__cropper *c, int s, double t0)
{
    c->stage[s] += stk__now() - t0;
    STK_TRACE_POP(c->tl, c->track);
}

stk__cropper *stk__cropper_new(void)
{
    stk__cropper *c = calloc(1, sizeof *c);
    if (c && (!(c->rs = stk__resizer_new()) || !(c->jpeg = stk__jpeg_new()))) {
        stk__cropper_free(c);
        return NULL;
    }
    /* merged upsampling: the region is resampled anyway, and libjpeg's merged
     * upsampling + colour conversion is cheaper than its fancy upsampling
     * (bench/README.md, issue 43); the PSNR promise holds (README); a value
 * with restart markers is cut to the box's segments first (the same pixels) */
    if (c) stk__jpeg_set_opts(c->jpeg, STK_IMG_JPEG_LOAD_OPTS);
    return c;
}

void stk__cropper_free(stk__cropper *c)
{
    if (!c) return;
    stk__resizer_free(c->rs);
    stk__jpeg_free(c->jpeg);
    stk__img_buf_free(&c->px);
    free(c);
}

/* A failed decode of record `record` as the reader reports it. */
static int decode_failed(int code, uint64_t record, const stk_error *e, stk_error *err)
{
    return code == STK_IMG_E_NOMEM
               ? stk_error_set(err, STK_E_NOMEM, "record %llu: %s", (unsigned long long)record, e->msg)
               : stk_error_set(err, STK_E_FORMAT, "record %llu: the JPEG does not decode: %s",
                               (unsigned long long)record, e->msg);
}

/* The whole H x W RGB image into c->px. */
static int decode_jpeg(stk__cropper *c, const void *data, uint64_t size, uint32_t H, uint32_t W,
                       uint64_t record, stk_error *err)
{
    stk__jpeg_info info;
    stk_error e;
    int rc = stk__jpeg_header(c->jpeg, data, (size_t)size, &info, &e);
    if (rc == STK_IMG_E_NOMEM) return decode_failed(rc, record, &e, err);
    if (rc || info.w != W || info.h != H)
        return stk_error_set(err, STK_E_FORMAT,
                             "record %llu: the JPEG's header does not give its %ux%u shape",
                             (unsigned long long)record, W, H);
    if (stk__img_buf_reserve(&c->px, (size_t)H * W * 3 + PX_ROOM, "the image", &e))
        return stk_error_set(err, STK_E_NOMEM, "out of memory for a %ux%u image", W, H);
    double t0 = stage_begin(c, "decode");
    rc = stk__jpeg_decode(c->jpeg, data, (size_t)size, &info, STK_IMG_PF_RGB, 1, c->px.p, &e);
    stage_end(c, STK__CROP_DECODE, t0);
    if (rc) return decode_failed(rc, record, &e, err);
    return STK_OK;
}

/* A JPEG crop through the decode planner: the box (the random crop's, or
 * the source region that the eval crop's window maps to: the box
 * stk_reader_crop_box gives) decoded at the plan's scale, then resampled
 * from its fractional edges to the output. */
static int crop_planned(stk__cropper *c, const stk_transform *t, const stk_crop_box *box, int rrc,
                        const void *value, uint64_t size, uint32_t W, uint32_t H, uint64_t record,
                        uint8_t *dst, stk_error *err)
{
    uint32_t ow = t->out_width, oh = t->out_height;
    stk__jpeg_plan p;
    stk__jpeg_plan_make(W, H, box->x0, box->y0, box->w, box->h, ow, oh, STK_IMG_SCALES_POW2, !rrc, &p);
    const uint8_t *at;
    size_t stride;
    stk_error e;
    double t0 = stage_begin(c, "decode");
    int rc = stk__jpeg_decode_plan(c->jpeg, value, (size_t)size, W, H, &p, &c->px, PX_ROOM, &at, &stride, &e);
    stage_end(c, STK__CROP_DECODE, t0);
    if (rc == STK_IMG_E_UNSUPPORTED) return rc; /* CMYK: decoded whole by the caller */
    if (rc) return decode_failed(rc, record, &e, err);
    stk__rgb_view src = {at, p.w, p.h, stride, 0};
    const uint8_t *last = at + (size_t)(p.h - 1) * stride + 3 * (size_t)p.w, *end = c->px.p + c->px.cap;
    src.room = last <= end ? (size_t)(end - last) : 0;
    stk__rect win = {0, 0, ow, oh};
    t0 = stage_begin(c, "resize");
    rc = stk__resize_box(c->rs, &src, p.bx, p.by, p.bw, p.bh, ow, oh, &win, box->flip, dst, (size_t)ow * 3);
    stage_end(c, STK__CROP_RESIZE, t0);
    c->tl = NULL; /* one traced crop a part */
    if (rc != 0)
        return stk_error_set(err, STK_E_NOMEM, "out of memory resizing record %llu",
                             (unsigned long long)record);
    return STK_OK;
}

int stk__cropper_run(stk__cropper *c, const stk_transform *t, uint64_t seed, uint64_t epoch, uint64_t record,
                     const void *value, uint64_t size, const uint64_t *dims, int jpeg, int square,
                     uint8_t *dst, stk_error *err)
{
    if (dims[0] == 0 || dims[1] == 0 || dims[0] > 65535 || dims[1] > 65535)
        return stk_error_set(err, STK_E_FORMAT, "record %llu: a %llux%llu image cannot be cropped",
                             (unsigned long long)record, (unsigned long long)dims[1],
                             (unsigned long long)dims[0]);
    if (dims[0] * dims[1] > CROP_MAX_PIXELS) /* a hostile shape: refused before any allocation */
        return stk_error_set(err, STK_E_FORMAT, "record %llu: a %llux%llu image is over the %u-pixel limit",
                             (unsigned long long)record, (unsigned long long)dims[1],
                             (unsigned long long)dims[0], CROP_MAX_PIXELS);
    uint32_t H = (uint32_t)dims[0], W = (uint32_t)dims[1], oh = t->out_height, ow = t->out_width;
    stk__crop_box box;
    stk__xform_box(t, H, W, seed, epoch, record, &box);
    /* a box resized to the output: random crops, and centre crops of square
     * images (pack resized those already: the central S x S, as on the device) */
    int rc, rrc = t->crop == STK_CROP_RANDOM_RESIZED || (t->crop == STK_CROP_CENTER && square);
    stk__rgb_view src = {value, W, H, (size_t)W * 3, 0};
    const uint8_t *end = (const uint8_t *)value + size; /* what src's rows may be read up to */
    if (jpeg && (rrc || t->crop == STK_CROP_CENTER)) {  /* the box's region alone, at the scale it needs */
        stk_crop_box lb;
        stk__xform_load_box(t, !square, H, W, &box, &lb);
        if ((rc = crop_planned(c, t, &lb, rrc, value, size, W, H, record, dst, err)) != STK_IMG_E_UNSUPPORTED)
            return rc;
    }
    if (jpeg) {
        if ((rc = decode_jpeg(c, value, size, H, W, record, err))) return rc;
        src.data = c->px.p;
        end = c->px.p + c->px.cap;
    }
    uint64_t rw = ow, rh = oh;
    stk__rect win = {0, 0, ow, oh};
    if (rrc) {
        src.data += ((size_t)box.y0 * W + (size_t)box.x0) * 3;
        src.w = (uint32_t)box.w;
        src.h = (uint32_t)box.h;
    } else if (t->crop == STK_CROP_CENTER) { /* Resize(round(S / 0.875)) + CenterCrop(S) */
        stk__img_layout l;
        stk__img_eval_layout(ow, oh, W, H, &l);
        rw = l.resized_w;
        rh = l.resized_h;
        win.x = l.crop_x;
        win.y = l.crop_y;
    }
    if (box.flip) win.x = rw - ow - win.x; /* the same window of the mirrored image */
    const uint8_t *last = src.data + (size_t)(src.h - 1) * src.stride + 3 * (size_t)src.w;
    src.room = last <= end ? (size_t)(end - last) : 0;
    double t0 = stage_begin(c, "resize");
    rc = stk__resize(c->rs, &src, rw, rh, &win, box.flip, dst, (size_t)ow * 3);
    stage_end(c, STK__CROP_RESIZE, t0);
    c->tl = NULL; /* one traced crop a part */
    if (rc != 0)
        return stk_error_set(err, STK_E_NOMEM, "out of memory resizing record %llu",
                             (unsigned long long)record);
    return STK_OK;
}
