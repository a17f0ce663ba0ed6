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
 * A JPEG value under a random crop is decoded only as far as the crop needs
 * (libjpeg's API, since TurboJPEG 2.1's cannot crop): the rows above it are
 * skipped (jpeg_skip_scanlines: entropy-decoded, not transformed), its
 * columns alone are transformed and converted (jpeg_crop_scanline, widened to
 * iMCU boundaries), and decoding stops at its last row. The pixels are those
 * of a whole decode. Eval and whole-image crops decode whole (TurboJPEG). */
#include "reader_impl.h"
#include "resize.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include <jpeglib.h>

/* libjpeg reports errors through error_exit, which must not return (its
 * default calls exit()): jump back; a warning (corrupt data it worked
 * around) is an error here too, as it is for pack. */
typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jerr_t;

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

/* pack's default --max-pixels: no stored image of a real dataset is larger */
#define CROP_MAX_PIXELS 100000000u
/* Bytes kept readable after a decoded image, so that the resize's SIMD loads
 * may reach past its last row (stk__rgb_view.room): 16 per 4 taps of a
 * reduction by up to 16 (what a crop's decode leaves). */
#define PX_ROOM 64u

struct stk__cropper {
    stk__resizer *rs;
    tjhandle tj; /* JPEG fields: the whole-image decoder, made on first use */
    uint8_t *px; /* a decoded JPEG */
    size_t px_cap;
    struct jpeg_decompress_struct ci; /* the cropping decoder, kept: no pools */
    jerr_t je;                        /* to build per image                  */
    int ci_made;
};

stk__cropper *stk__cropper_new(void)
{
    stk__cropper *c = calloc(1, sizeof *c);
    if (c && !(c->rs = stk__resizer_new())) {
        free(c);
        c = NULL;
    }
    return c;
}

void stk__cropper_free(stk__cropper *c)
{
    if (!c) return;
    if (c->ci_made) jpeg_destroy_decompress(&c->ci);
    stk__resizer_free(c->rs);
    if (c->tj) tjDestroy(c->tj);
    free(c->px);
    free(c);
}

/* torchvision CenterCrop's offset: int(round(d / 2.0)), half to even. */
static uint64_t centre_offset(uint64_t d)
{
    uint64_t k = d / 2;
    return (d % 2 && k % 2) ? k + 1 : k;
}

/* c->px holding at least n bytes and PX_ROOM after them; 0, or -1 when out
 * of memory. */
static int px_reserve(stk__cropper *c, size_t n)
{
    if (n + PX_ROOM <= c->px_cap) return 0;
    uint8_t *p = realloc(c->px, n + PX_ROOM);
    if (!p) return -1;
    c->px = p;
    c->px_cap = n + PX_ROOM;
    return 0;
}

static int decode_jpeg(stk__cropper *c, const void *data, uint64_t size, uint32_t H, uint32_t W,
                       uint64_t record, stk_error *err)
{
    int w, h, sub, cs;
    if (!c->tj && !(c->tj = tjInitDecompress()))
        return stk_error_set(err, STK_E_NOMEM, "cannot start TurboJPEG");
    if (tjDecompressHeader3(c->tj, data, (unsigned long)size, &w, &h, &sub, &cs) != 0 || (uint32_t)w != W ||
        (uint32_t)h != H) {
        /* TurboJPEG leaves a handle whose header read failed half-way unable
         * to read the next header: the next record gets a new one */
        tjDestroy(c->tj);
        c->tj = NULL;
        return stk_error_set(err, STK_E_FORMAT,
                             "record %llu: the JPEG's header does not give its %ux%u shape",
                             (unsigned long long)record, W, H);
    }
    if (px_reserve(c, (size_t)H * W * 3))
        return stk_error_set(err, STK_E_NOMEM, "out of memory for a %ux%u image", W, H);
    if (tjDecompress2(c->tj, data, (unsigned long)size, c->px, (int)W, 0, (int)H, TJPF_RGB, 0) != 0)
        return stk_error_set(err, STK_E_FORMAT, "record %llu: the JPEG does not decode: %s",
                             (unsigned long long)record, tjGetErrorStr2(c->tj));
    return STK_OK;
}

/* Rows [y0, y0 + h) and at least columns [x0, x0 + w) of a JPEG of H x W,
 * into c->px; *at is where column x0 of the first row lands, *stride the
 * row length. */
static int decode_region(stk__cropper *c, const void *data, uint64_t size, uint32_t H, uint32_t W,
                         uint32_t x0, uint32_t y0, uint32_t w, uint32_t h, uint64_t record,
                         const uint8_t **at, size_t *stride, stk_error *err)
{
    struct jpeg_decompress_struct *ci = &c->ci;
    if (setjmp(c->je.jb)) {
        jpeg_abort_decompress(ci); /* back to a clean object for the next image */
        return stk_error_set(err, STK_E_FORMAT, "record %llu: the JPEG does not decode: %s",
                             (unsigned long long)record, c->je.msg);
    }
    if (!c->ci_made) {
        ci->err = jpeg_std_error(&c->je.pub);
        c->je.pub.error_exit = on_error;
        c->je.pub.emit_message = on_message;
        jpeg_create_decompress(ci);
        c->ci_made = 1;
    }
    jpeg_mem_src(ci, data, (unsigned long)size);
    jpeg_read_header(ci, TRUE);
    if (ci->image_width != W || ci->image_height != H || ci->num_components != 3) {
        snprintf(c->je.msg, sizeof c->je.msg, "its header does not give its %ux%u shape with 3 components", W,
                 H);
        longjmp(c->je.jb, 1);
    }
    ci->out_color_space = JCS_RGB;
    jpeg_start_decompress(ci);
    JDIMENSION xoff = x0, cw = w;
    jpeg_crop_scanline(ci, &xoff, &cw); /* widened to whole iMCU columns */
    size_t row = (size_t)cw * 3;
    if (px_reserve(c, row * h)) {
        snprintf(c->je.msg, sizeof c->je.msg, "out of memory for a %ux%u crop", cw, h);
        longjmp(c->je.jb, 1);
    }
    if (y0 && jpeg_skip_scanlines(ci, y0) != y0) {
        snprintf(c->je.msg, sizeof c->je.msg, "it ends before row %u of %u", y0, H);
        longjmp(c->je.jb, 1);
    }
    for (uint32_t y = 0; y < h;) { /* as many rows a call as libjpeg makes at once */
        JSAMPROW rows[16];
        JDIMENSION n = h - y < 16 ? h - y : 16;
        for (JDIMENSION k = 0; k < n; k++) rows[k] = c->px + row * (y + k);
        JDIMENSION got = jpeg_read_scanlines(ci, rows, n);
        if (got == 0) {
            snprintf(c->je.msg, sizeof c->je.msg, "it ends at row %u of %u", y0 + y, H);
            longjmp(c->je.jb, 1);
        }
        y += got;
    }
    jpeg_abort_decompress(ci); /* the rows below the crop are never decoded */
    *at = c->px + (size_t)(x0 - xoff) * 3;
    *stride = row;
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
                             (unsigned long long)record, (unsigned long long)dims[1], (unsigned long long)dims[0],
                             CROP_MAX_PIXELS);
    uint32_t H = (uint32_t)dims[0], W = (uint32_t)dims[1], oh = t->out_height, ow = t->out_width;
    stk__crop_box box;
    stk__xform_box(t, H, W, seed, epoch, record, &box);
    /* a box resized to the output: random crops, and centre crops of square
     * images (pack resized those already: the central S x S, as on the device) */
    int rc, rrc = t->crop == STK_CROP_RANDOM_RESIZED || (t->crop == STK_CROP_CENTER && square);
    stk__rgb_view src = {value, W, H, (size_t)W * 3, 0};
    const uint8_t *end = (const uint8_t *)value + size; /* what src's rows may be read up to */
    if (jpeg && rrc) { /* the crop's region alone */
        const uint8_t *at;
        size_t stride;
        if ((rc = decode_region(c, value, size, H, W, (uint32_t)box.x0, (uint32_t)box.y0, (uint32_t)box.w,
                                (uint32_t)box.h, record, &at, &stride, err)))
            return rc;
        src = (stk__rgb_view){at, (uint32_t)box.w, (uint32_t)box.h, stride, 0};
        end = c->px + c->px_cap;
    } else if (jpeg) {
        if ((rc = decode_jpeg(c, value, size, H, W, record, err))) return rc;
        src.data = c->px;
        end = c->px + c->px_cap;
    }
    uint64_t rw = ow, rh = oh;
    stk__rect win = {0, 0, ow, oh};
    if (rrc && !jpeg) {
        src.data += ((size_t)box.y0 * W + (size_t)box.x0) * 3;
        src.w = (uint32_t)box.w;
        src.h = (uint32_t)box.h;
    } else if (rrc) {
        /* decode_region made src the crop */
    } else if (t->crop == STK_CROP_CENTER) { /* Resize(round(S / 0.875)) + CenterCrop(S) */
        uint32_t s = oh < ow ? oh : ow, lo = H < W ? H : W, hi = H < W ? W : H;
        uint64_t r = (uint64_t)lround(s / 0.875), g = (uint64_t)((double)(r * hi) / (double)lo);
        rw = W <= H ? r : g;
        rh = W <= H ? g : r;
        if (rw < ow) rw = ow; /* a very elongated output: never a window outside the image */
        if (rh < oh) rh = oh;
        win.x = centre_offset(rw - ow);
        win.y = centre_offset(rh - oh);
    }
    if (box.flip) win.x = rw - ow - win.x; /* the same window of the mirrored image */
    const uint8_t *last = src.data + (size_t)(src.h - 1) * src.stride + 3 * (size_t)src.w;
    src.room = last <= end ? (size_t)(end - last) : 0;
    if (stk__resize(c->rs, &src, rw, rh, &win, box.flip, dst, (size_t)ow * 3) != 0)
        return stk_error_set(err, STK_E_NOMEM, "out of memory resizing record %llu",
                             (unsigned long long)record);
    return STK_OK;
}
