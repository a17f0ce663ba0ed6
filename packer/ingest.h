/*
 * packer/ingest.h - pack's image ingest: one file's bytes in, a fixed
 * size x size x 3 u8 RGB tensor (HWC, rows top to bottom) out.
 *
 * The format is sniffed from the magic bytes, never from the file name.
 * JPEG goes through image/jpeg.c (every JPEG libjpeg-turbo decodes: baseline,
 * progressive, arithmetic, any subsampling, grayscale, CMYK and YCCK), the
 * others through image/formats/ (PNG: every colour type and depth; WebP;
 * GIF: the first frame; TIFF: the first page; BMP), which says where they
 * differ from Pillow. This file keeps pack's policy: the output size and
 * mode, max_pixels, the fill, and the statuses pack reports and skips by.
 * The result matches what
 * torchvision does to a PIL image:
 *
 *   Image.open(f).convert("RGB") -> Resize(size) -> CenterCrop(size)     (shorter)
 *
 * with Pillow's antialiased BILINEAR filter (resize.h). JPEGs are decoded
 * straight to a smaller size by DCT scaling where that leaves enough pixels
 * (1/2, 1/4, 1/8 only: libjpeg-turbo's other factors are slower than a full
 * decode), then resized from there; the geometry is always computed from
 * the full-size dimensions, so the output frames the same region as a full
 * decode would. A YCbCr or grayscale JPEG decoded at full size is resampled
 * on its planes (stk__resize_ycc: the chroma upsampling folded into the
 * filter, the colour conversion at the output size), unless resample_rgb
 * asks for the RGB route: the same pixels but for rounding and for colours
 * outside the RGB cube, which Pillow clamps before resizing and this after.
 *
 * Like Pillow's convert("RGB"): alpha is dropped (not composited), PNG
 * gamma and ICC profiles are ignored, CMYK is converted with Pillow's formula
 * (Adobe inverted CMYK), and the EXIF orientation is not applied. 16-bit
 * samples keep their high byte (Pillow clips 16-bit grayscale at 255, which
 * turns most of it white; that is not copied).
 *
 * A pk_decoder holds a JPEG decoder (image.h) and scratch buffers that grow to the
 * largest image seen and are reused: one per thread, never shared. Nothing
 * here prints, exits or keeps global state.
 */
#ifndef STOKER_PACKER_INGEST_H
#define STOKER_PACKER_INGEST_H

#include "formats.h" /* stk__img_sniff: what the magic bytes say */
#include "image.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PK_RESIZE_SHORTER = 0, /* shorter side to size (torchvision Resize(size)), centre crop */
    PK_RESIZE_STRETCH = 1, /* both sides to size; the aspect ratio is not kept          */
    PK_RESIZE_FIT = 2,     /* longer side to size, aspect kept, centred on `fill`       */
    PK_RESIZE_KEEP = 3     /* the image at its own aspect and about its own size:
                              min_side and max_side say how (pk_layout_compute);
                              the output is resized_w x resized_h, not size^2  */
} pk_resize_mode;

/* Largest accepted `size`: 16384 x 16384 x 3 is 768 MiB per record. */
#define PK_MAX_SIZE 16384u
/* A sensible default for `max_pixels` (pk_params_init): 100 megapixels, about
 * 300 MB of decoded RGB, far above any photo a training set holds. */
#define PK_DEFAULT_MAX_PIXELS 100000000u

typedef struct {
    uint32_t size; /* output is size x size x 3; 1 .. PK_MAX_SIZE          */
    pk_resize_mode mode;
    uint64_t max_pixels; /* refuse sources with more pixels (from the header,
                              before any pixel memory is allocated); 0: no limit */
    uint8_t fill[3];     /* RGB of the padding in PK_RESIZE_FIT (default 0,0,0)  */
    int resample_rgb;    /* 1: resample JPEGs after an RGB decode, as Pillow
                              does; 0 (default): on their YCbCr planes where
                              that applies (stk__resize_ycc), which is faster   */
    uint32_t min_side;   /* PK_RESIZE_KEEP: the shorter side becomes this
                              (torchvision Resize(min_side)); 0: not resized
                              up, only down to max_side                     */
    uint32_t max_side;   /* PK_RESIZE_KEEP: the longer side at most this
                              (FFCV's max_resolution; with min_side,
                              torchvision's max_size); 1 .. size            */
} pk_params;

/* size as given, PK_RESIZE_SHORTER, PK_DEFAULT_MAX_PIXELS, black fill. */
void pk_params_init(pk_params *p, uint32_t size);

typedef enum {
    PK_OK = 0,
    PK_E_EMPTY = 1,       /* zero-length input                                    */
    PK_E_UNSUPPORTED = 2, /* none of the formats read here (AVIF, HEIF, text, ...),
                             or a variant its decoder lacks (12-bit or lossless
                             JPEG, a BMP holding a JPEG, a TIFF layout libtiff's
                             RGBA interface refuses)                            */
    PK_E_CORRUPT = 3,     /* an image that does not decode cleanly, including
                             truncated data and any libjpeg warning              */
    PK_E_TOO_LARGE = 4,   /* over max_pixels, or too large to address              */
    PK_E_NOMEM = 5,       /* out of memory                                        */
    PK_E_ARG = 6          /* invalid parameters (size 0 or over PK_MAX_SIZE, mode) */
} pk_status;

/* Short stable name of a status, e.g. "corrupt". Never NULL. */
const char *pk_status_name(int status);

/* Where a src_w x src_h image lands in the output: torchvision's Resize +
 * CenterCrop as image.h's stk__img_layout_compute says, with pk_params'
 * mode (whose values are stk__img_mode's), size, min_side and max_side. */
typedef stk__img_layout pk_layout;

/* Fill *l for a src_w x src_h source (both >= 1) under valid params. */
void pk_layout_compute(const pk_params *p, uint32_t src_w, uint32_t src_h, pk_layout *l);

typedef struct pk_decoder pk_decoder;

/* NULL when out of memory or when TurboJPEG cannot start. */
pk_decoder *pk_decoder_new(void);
/* NULL is a no-op. */
void pk_decoder_free(pk_decoder *d);

/* Whether data[0 .. n) is a JPEG of exactly w x h whose header says it
 * decodes to three components (YCbCr or RGB: not greyscale or CMYK), as
 * pack's --image-format original needs to store it as it is. */
int pk_jpeg_three_components(pk_decoder *d, const uint8_t *data, size_t n, uint32_t w, uint32_t h);

/* Decode data[0 .. len) (a whole file) and write p->size^2 * 3 bytes of RGB
 * into out. *orig_w, *orig_h (either may be NULL) get the source dimensions
 * whenever the header could be read, also on most failures, else 0.
 * Returns PK_OK (msg then empty) or a pk_status; on failure out is
 * unspecified and msg gets one line without the file name (the caller
 * prefixes it), e.g.
 *   unsupported image format (starts with 00 00 00 1c: AVIF)
 *   corrupt JPEG: Premature end of JPEG file
 *   image is 20000x20000 = 400000000 pixels, over --max-pixels 100000000
 * msg may be NULL when msgcap is 0. */
int pk_process(pk_decoder *d, const uint8_t *data, size_t len, const pk_params *p, uint8_t *out,
               uint32_t *orig_w, uint32_t *orig_h, char *msg, size_t msgcap);

#ifdef __cplusplus
}
#endif
#endif /* STOKER_PACKER_INGEST_H */
