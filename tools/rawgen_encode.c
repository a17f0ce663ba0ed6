/* tools/rawgen_encode.c - rawgen's JPEG and PNG encoders (TurboJPEG,
 * libspng); the other formats are in rawgen_formats.c. */
#include <stdio.h>
#include <stdlib.h>

#include "rawgen.h"

int rg_jpeg_encode(rg_gen *g, const uint8_t *px, uint32_t w, uint32_t h, int pf, int samp, int q, int flags,
                   unsigned long *len, char *msg, size_t cap)
{
    unsigned long size = g->jpg_cap;
    /* TurboJPEG 2.1 bug: once a handle has written a progressive JPEG, the
     * next baseline ones it writes are corrupt ("bad Huffman code"). So a
     * progressive JPEG gets a handle of its own. */
    tjhandle tj = flags & TJFLAG_PROGRESSIVE ? tjInitCompress() : g->tj;
    int rc = tj ? tjCompress2(tj, px, (int)w, 0, (int)h, pf, &g->jpg, &size, samp, q, flags) : -1;
    if (rc != 0)
        snprintf(msg, cap, "JPEG encoding failed: %s",
                 tj ? tjGetErrorStr2(tj) : "cannot initialise TurboJPEG");
    if (tj && tj != g->tj) tjDestroy(tj);
    if (rc != 0) return -1;
    if (size > g->jpg_cap) g->jpg_cap = size; /* TurboJPEG grew the buffer */
    *len = size;
    return 0;
}

/* PNG of `img` (PNG sample layout, but 16-bit samples in host byte order). malloc'd. */
void *rg_png_encode(const void *img, size_t len, uint32_t w, uint32_t h, uint8_t depth, uint8_t type,
                    struct spng_plte *plte, size_t *out, char *msg, size_t cap)
{
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    struct spng_ihdr ihdr = {.width = w, .height = h, .bit_depth = depth, .color_type = type};
    void *buf = NULL;
    int e = ctx ? 0 : SPNG_EMEM;
    if (!e) e = spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
    /* the Sub filter and zlib's run-length strategy: as small as the default
     * (adaptive filters, level 6) on photo-like content, 3x faster */
    if (!e) e = spng_set_option(ctx, SPNG_IMG_COMPRESSION_LEVEL, 1);
    if (!e) e = spng_set_option(ctx, SPNG_IMG_COMPRESSION_STRATEGY, 3 /* Z_RLE */);
    if (!e) e = spng_set_option(ctx, SPNG_FILTER_CHOICE, SPNG_FILTER_CHOICE_SUB);
    if (!e) e = spng_set_ihdr(ctx, &ihdr);
    if (!e && plte) e = spng_set_plte(ctx, plte);
    if (!e) e = spng_encode_image(ctx, img, len, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    if (!e) buf = spng_get_png_buffer(ctx, out, &e);
    if (e || !buf) {
        snprintf(msg, cap, "PNG encoding failed: %s", spng_strerror(e ? e : SPNG_EMEM));
        free(buf);
        buf = NULL;
    }
    spng_ctx_free(ctx);
    return buf;
}
