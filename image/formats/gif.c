/* image/formats/gif.c - GIF (giflib): the first frame.
 * formats.h says what every decoder here promises. */
#include "formats.h"

#include <gif_lib.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *p;
    size_t len, at;
} gif_src;

static int gif_read(GifFileType *g, GifByteType *buf, int n)
{
    gif_src *s = g->UserData;
    size_t k = s->len - s->at < (size_t)n ? s->len - s->at : (size_t)n;
    memcpy(buf, s->p + s->at, k);
    s->at += k;
    return (int)k;
}

static int gif_fail(int code, stk_error *err)
{
    if (code == D_GIF_ERR_NOT_ENOUGH_MEM)
        return stk_error_set(err, STK_IMG_E_NOMEM, "out of memory decoding GIF");
    if (code == D_GIF_ERR_READ_FAILED) /* giflib: "Failed to read from given file" */
        return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt GIF: the file ends early (truncated?)");
    const char *why = GifErrorString(code);
    return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt GIF: %s", why ? why : "unknown error");
}

/* The first image's rows into the canvas (rows past the canvas dropped),
 * colours from its own colour map or the global one. */
static int gif_frame(GifFileType *g, uint8_t *pix, const stk__img_limits *lim, stk_error *err)
{
    const GifImageDesc *im = &g->Image;
    const ColorMapObject *cm = im->ColorMap ? im->ColorMap : g->SColorMap;
    if (!cm) return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt GIF: the first image has no colour map");
    if (im->Width <= 0 || im->Height <= 0 || im->Left < 0 || im->Top < 0)
        return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt GIF: the first image is %dx%d at (%d, %d)",
                             im->Width, im->Height, im->Left, im->Top);
    /* the frame's own size bounds the work, whatever the canvas says */
    int rc = stk__img_check(lim, (uint32_t)im->Width, (uint32_t)im->Height, err);
    if (rc != STK_OK) return rc;
    GifByteType *line = malloc((size_t)im->Width);
    if (!line) return stk_error_set(err, STK_IMG_E_NOMEM, "out of memory decoding GIF");
    static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    for (int pass = 0, npass = im->Interlace ? 4 : 1; pass < npass && rc == STK_OK; pass++)
        for (int y = im->Interlace ? start[pass] : 0; y < im->Height; y += im->Interlace ? step[pass] : 1) {
            if (DGifGetLine(g, line, im->Width) == GIF_ERROR) {
                rc = gif_fail(g->Error, err);
                break;
            }
            uint32_t cy = (uint32_t)(im->Top + y);
            if (cy >= (uint32_t)g->SHeight) continue;
            for (int x = 0; x < im->Width && (uint32_t)(im->Left + x) < (uint32_t)g->SWidth; x++) {
                uint8_t *o = pix + 3 * ((size_t)cy * (size_t)g->SWidth + (size_t)(im->Left + x));
                const GifColorType *c = line[x] < cm->ColorCount ? &cm->Colors[line[x]] : NULL;
                o[0] = c ? c->Red : 0, o[1] = c ? c->Green : 0, o[2] = c ? c->Blue : 0;
            }
        }
    free(line);
    return rc;
}

/* The first frame. Canvas outside it: the background colour of the global
 * colour map (black without one). Transparency is ignored, as Pillow's
 * convert("RGB") of a palette image does. */
static int gif_run(GifFileType *g, const stk__img_limits *lim, stk__img_buf *buf, stk__rgb_view *v,
                   uint32_t *ow, uint32_t *oh, stk_error *err)
{
    if (g->SWidth <= 0 || g->SHeight <= 0)
        return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt GIF: canvas %dx%d", g->SWidth, g->SHeight);
    uint32_t w = (uint32_t)g->SWidth, h = (uint32_t)g->SHeight;
    *ow = w;
    *oh = h;
    uint8_t *pix;
    int rc = stk__img_check(lim, w, h, err);
    if (rc == STK_OK) rc = stk__img_pixels(buf, 3 * (size_t)w * h, &pix, err);
    if (rc != STK_OK) return rc;
    uint8_t bg[3] = {0, 0, 0};
    if (g->SColorMap && g->SBackGroundColor >= 0 && g->SBackGroundColor < g->SColorMap->ColorCount) {
        const GifColorType *c = &g->SColorMap->Colors[g->SBackGroundColor];
        bg[0] = c->Red, bg[1] = c->Green, bg[2] = c->Blue;
    }
    for (size_t i = 0, n = (size_t)w * h; i < n; i++) memcpy(pix + 3 * i, bg, 3);
    for (;;) {
        GifRecordType t;
        if (DGifGetRecordType(g, &t) == GIF_ERROR) return gif_fail(g->Error, err);
        if (t == TERMINATE_RECORD_TYPE)
            return stk_error_set(err, STK_IMG_E_CORRUPT, "corrupt GIF: no image in the file");
        if (t == EXTENSION_RECORD_TYPE) { /* comments, loop counts, frame timing: skipped */
            int code;
            GifByteType *ext = NULL;
            if (DGifGetExtension(g, &code, &ext) == GIF_ERROR) return gif_fail(g->Error, err);
            while (ext)
                if (DGifGetExtensionNext(g, &ext) == GIF_ERROR) return gif_fail(g->Error, err);
        } else if (t == IMAGE_DESC_RECORD_TYPE) {
            if (DGifGetImageDesc(g) == GIF_ERROR) return gif_fail(g->Error, err);
            if ((rc = gif_frame(g, pix, lim, err)) != STK_OK) return rc;
            *v = (stk__rgb_view){pix, w, h, 3 * (size_t)w, 0};
            return STK_OK;
        }
    }
}

int stk__img_gif_decode(const uint8_t *data, size_t len, const stk__img_limits *lim, stk__img_buf *buf,
                        stk__rgb_view *v, uint32_t *ow, uint32_t *oh, stk_error *err)
{
    gif_src src = {data, len, 0};
    int code = 0;
    GifFileType *g = DGifOpen(&src, gif_read, &code);
    if (!g) return gif_fail(code, err);
    int rc = gif_run(g, lim, buf, v, ow, oh, err);
    DGifCloseFile(g, &code);
    return rc;
}
