/* reader/load_crop.c - the image pipeline at load: images of their own size
 * (array fields u8[*,*,3], raw or JPEG) cropped and resized on the worker
 * threads into out_h x out_w, so a batch leaves the worker as one u8
 * [B, out_h, out_w, 3] tensor that the device transform, Python and the tools
 * take as they take a square field.
 *
 * The crop box is torchvision's, drawn per (seed, epoch, record) over the
 * stored image's whole size (stk__xform_box, as on the device); the crop is
 * resampled with pack's filter (image/resize.c: Pillow's antialiased
 * bilinear, torchvision's Resize(antialias=True) on a PIL image), then
 * mirrored when the draw says so. Eval (STK_CROP_CENTER) is the ImageNet
 * recipe: the shorter side to round(S / 0.875), then the central S x S
 * (torchvision Resize + CenterCrop). STK_CROP_NONE stretches the whole image.
 * JPEG values are decoded whole by TurboJPEG first (a decode limited to the
 * crop, and DCT scaling, are still to come: see bench/README.md). */
#include "reader_impl.h"
#include "resize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

struct stk__cropper {
    stk__resizer *rs;
    tjhandle tj; /* JPEG fields: the decoder, made on first use */
    uint8_t *px; /* a decoded JPEG */
    size_t px_cap;
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

static int decode_jpeg(stk__cropper *c, const void *data, uint64_t size, uint32_t H, uint32_t W,
                       uint64_t record, stk_error *err)
{
    int w, h, sub, cs;
    if (!c->tj && !(c->tj = tjInitDecompress()))
        return stk_error_set(err, STK_E_NOMEM, "cannot start TurboJPEG");
    if (tjDecompressHeader3(c->tj, data, (unsigned long)size, &w, &h, &sub, &cs) != 0 || (uint32_t)w != W ||
        (uint32_t)h != H)
        return stk_error_set(err, STK_E_FORMAT,
                             "record %llu: the JPEG's header does not give its %ux%u shape",
                             (unsigned long long)record, W, H);
    size_t need = (size_t)H * W * 3;
    if (need > c->px_cap) {
        uint8_t *p = realloc(c->px, need);
        if (!p) return stk_error_set(err, STK_E_NOMEM, "out of memory for a %ux%u image", W, H);
        c->px = p;
        c->px_cap = need;
    }
    if (tjDecompress2(c->tj, data, (unsigned long)size, c->px, (int)W, 0, (int)H, TJPF_RGB, 0) != 0)
        return stk_error_set(err, STK_E_FORMAT, "record %llu: the JPEG does not decode: %s",
                             (unsigned long long)record, tjGetErrorStr2(c->tj));
    return STK_OK;
}

static void mirror(uint8_t *img, uint32_t w, uint32_t h)
{
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *row = img + (size_t)y * w * 3;
        for (uint32_t a = 0, b = w - 1; a < b; a++, b--)
            for (int k = 0; k < 3; k++) {
                uint8_t t = row[3 * a + k];
                row[3 * a + k] = row[3 * b + k];
                row[3 * b + k] = t;
            }
    }
}

int stk__cropper_run(stk__cropper *c, const stk_transform *t, uint64_t seed, uint64_t epoch, uint64_t record,
                     const void *value, uint64_t size, const uint64_t *dims, int jpeg, uint8_t *dst,
                     stk_error *err)
{
    if (dims[0] == 0 || dims[1] == 0 || dims[0] > 65535 || dims[1] > 65535)
        return stk_error_set(err, STK_E_FORMAT, "record %llu: a %llux%llu image cannot be cropped",
                             (unsigned long long)record, (unsigned long long)dims[1],
                             (unsigned long long)dims[0]);
    uint32_t H = (uint32_t)dims[0], W = (uint32_t)dims[1], oh = t->out_height, ow = t->out_width;
    int rc = jpeg ? decode_jpeg(c, value, size, H, W, record, err) : STK_OK;
    if (rc) return rc;
    stk__rgb_view src = {jpeg ? c->px : value, W, H, (size_t)W * 3};
    stk__crop_box box;
    stk__xform_box(t, H, W, seed, epoch, record, &box);
    uint64_t rw = ow, rh = oh;
    stk__rect win = {0, 0, ow, oh};
    if (t->crop == STK_CROP_RANDOM_RESIZED) {
        src.data += ((size_t)box.y0 * W + (size_t)box.x0) * 3;
        src.w = (uint32_t)box.w;
        src.h = (uint32_t)box.h;
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
    if (stk__resize(c->rs, &src, rw, rh, &win, dst, (size_t)ow * 3) != 0)
        return stk_error_set(err, STK_E_NOMEM, "out of memory resizing record %llu",
                             (unsigned long long)record);
    if (box.flip) mirror(dst, ow, oh);
    return STK_OK;
}
