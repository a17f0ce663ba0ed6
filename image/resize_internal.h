/* image/resize_internal.h - what resize.c (weights, tables, passes) and
 * resize_kernels.c (the inner loops, scalar and AVX2) share. Not for other
 * files: the public interface is resize.h. */
#ifndef STOKER_IMAGE_RESIZE_INTERNAL_H
#define STOKER_IMAGE_RESIZE_INTERNAL_H

#include "resize.h"

#include <stddef.h>
#include <stdint.h>

/* STK_IMG_NO_SIMD builds the portable kernels only, as on other architectures. */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(STK_IMG_NO_SIMD)
#  define STOKER_HAVE_AVX2 1
#endif

#define STK_IMG_ONE (1 << STK_IMG_RESIZE_BITS)
#define STK_IMG_HALF (1 << (STK_IMG_RESIZE_BITS - 1))

/* The RGB horizontal SIMD kernel works on two rows and groups of 4 outputs
 * at a time, and per output on chunks of 4 taps: one 16-byte load (5 RGB
 * pixels) per row and chunk. */
#define STK_IMG_GROUP 4
#define STK_IMG_CHUNK_TAPS 4
#define STK_IMG_LOAD_BYTES 16
/* int16 weights per output and chunk: 2 vectors of 16 (see widen). */
#define STK_IMG_CHUNK_I16 32
/* Bytes the horizontal SIMD kernels may write past the end of a row. */
#define STK_IMG_H_ROOM 16
/* The plane horizontal SIMD kernel: groups of 8 outputs, 4 per 128-bit
 * lane, each lane one 16-byte load; per pair of taps a byte shuffle and a
 * multiply-add. A group qualifies when its 4 outputs per lane and all their
 * taps fit in those 16 bytes. */
#define STK_IMG_PGROUP 8
#define STK_IMG_PPAIRS_MAX 4
/* The same with AVX-512 VBMI: groups of 16 outputs from one 64-byte load;
 * per pair of taps one cross-lane byte permute and one multiply-add. */
#define STK_IMG_XGROUP 16
#define STK_IMG_XLOAD 64

/* How a table's source relates to the axis it resamples. */
enum {
    STK_IMG_AXIS_PLAIN = 0,  /* the source is the axis itself                       */
    STK_IMG_AXIS_FANCY2 = 1, /* a 2:1 subsampled (chroma) axis, as if first upsampled
                           by libjpeg's "fancy" triangle (3/4, 1/4 of the two
                           nearest samples, edges repeated) to `full` samples */
    STK_IMG_AXIS_BOX2 = 2    /* the same, upsampled by repeating each sample: what
                           libjpeg does instead for 2:1 chroma of at most two
                           samples across                                     */
};
/* The horizontal SIMD layout a table carries. */
enum { STK_IMG_LAYOUT_NONE = 0, STK_IMG_LAYOUT_RGB = 1, STK_IMG_LAYOUT_PLANE = 2 };

/* Weight table of one axis for the outputs [first, first + count). */
typedef struct {
    uint32_t in, full, count; /* key, with kind, layout, mirror, out and first; count 0: empty */
    uint8_t kind, layout;
    uint8_t mirror; /* output i is output out - 1 - (first + i) of the plain resize (RGB layout) */
    uint64_t out, first;
    double b0, bext; /* the source box of the axis: [b0, b0 + bext) of `full` (0, full: all of it) */
    uint64_t used;   /* resizer tick of the last use, for eviction */
    uint32_t taps;   /* row length of coef: the most taps any output uses */
    uint32_t *start; /* count: first source index */
    uint32_t *len;   /* count: taps used (the rest of the row is zero) */
    int16_t *coef;   /* count x taps */
    /* STK_IMG_LAYOUT_RGB */
    uint32_t chunks;         /* ceil(taps / STK_IMG_CHUNK_TAPS) */
    uint32_t nwide;          /* count rounded up to STK_IMG_GROUP: off and wide are padded with the
                                last output's, so every group can run the SIMD kernel */
    uint32_t over;           /* bytes the SIMD kernel reads past a row's last pixel, at most */
    uint32_t tight0, tight1; /* on a row with less room after it than `over`: outputs
                                [tight0, tight1) (whole groups) read only the row */
    size_t *off;             /* nwide: 3 * start, the byte offset in a row */
    int16_t *wide;           /* nwide x chunks x STK_IMG_CHUNK_I16 */
    /* STK_IMG_LAYOUT_PLANE: per group of STK_IMG_PGROUP outputs and pair of taps, a
     * 32-byte shuffle and 16 int16 weights; gok[g]: group g qualifies */
    uint32_t pairs, ngroups;
    uint8_t *gmask;
    int16_t *gw;
    uint8_t *gok;
    uint32_t nbad; /* groups that do not qualify (run scalar) */
    /* STK_IMG_LAYOUT_PLANE where the CPU has AVX-512 VBMI: per group of STK_IMG_XGROUP
     * outputs, the bytes of its 64-byte load that lie in the row (xload, a
     * mask), and per pair of taps a 64-byte permute and 32 int16 weights;
     * xok[g]: group g qualifies */
    uint32_t nxgroups, nxbad;
    uint8_t *xperm;
    int16_t *xw;
    uint64_t *xload;
    uint8_t *xok;
    void *mem;
    size_t cap;
} stk__axis;

/* Scalar kernels (every build). RGB rows: bytes in, bytes out. */
void stk__h_row_scalar(const stk__axis *a, const uint8_t *src, uint8_t *dst, uint32_t from, uint32_t to);
void stk__v_row_scalar(const uint8_t *const *rows, const int16_t *k, uint32_t n, size_t from, size_t bytes,
                       int32_t *acc, uint8_t *dst);
/* Planes: bytes in, int16 with STK_IMG_PLANE_FRAC fractional bits out; then
 * int16 in and out, the fractional bits kept. */
void stk__h_plane_scalar(const stk__axis *a, const uint8_t *src, int16_t *dst, uint32_t from, uint32_t to);
void stk__v_row16_scalar(const int16_t *const *rows, const int16_t *k, uint32_t n, size_t from, size_t count,
                         int32_t *acc, int16_t *dst);

/* Test seams (tests/packer/test_pack_image.c), on a fresh resizer: make every `every`-th
 * group of the plane tables it builds run the scalar kernel (0: off); put
 * every table key in one set of the cache (8 ways); the bytes the cached
 * tables hold. */
void stk__resizer_test_bad_groups(stk__resizer *r, unsigned every);
void stk__resizer_test_one_set(stk__resizer *r);
size_t stk__resizer_held(const stk__resizer *r);
/* Tests: run kernels of at most this level (0 scalar, 1 AVX2, 2 AVX-512BW/VBMI
 * where a kernel has it), as far as the CPU has them; returns the level in
 * effect. */
int stk__resizer_test_simd(stk__resizer *r, int level);

#ifdef STOKER_HAVE_AVX2
/* Outputs [from, to) (multiples of STK_IMG_GROUP, to <= a->nwide) of RGB rows
 * s0 and s0 + stride into d0 and d1 (stride 0 and d1 == d0 for one row);
 * writes up to STK_IMG_H_ROOM bytes past each row's output `to` - 1. */
void stk__h_rgb_avx2(const stk__axis *a, const uint8_t *s0, size_t stride, uint8_t *d0, uint8_t *d1,
                     uint32_t from, uint32_t to);
/* Every qualifying group of one plane row; src is readable 16 bytes past
 * any output's start. Writes 8 values per group. */
void stk__h_plane_avx2(const stk__axis *a, const uint8_t *src, int16_t *dst);
/* Bytes [0, bytes & ~31) / values [0, count & ~15) of one output row;
 * return how many were done. */
size_t stk__v_row_avx2(const uint8_t *const *rows, const int16_t *k, uint32_t n, size_t bytes, uint8_t *dst);
size_t stk__v_row16_avx2(const int16_t *const *rows, const int16_t *k, uint32_t n, size_t count,
                         int16_t *dst);
/* stk__h_plane_avx2 with AVX-512 VBMI, from the table's x layout: every
 * qualifying group of 16; reads only the row's own bytes. */
void stk__h_plane_vbmi(const stk__axis *a, const uint8_t *src, int16_t *dst);
/* stk__v_row16_avx2 with AVX-512BW (32 values a turn). */
size_t stk__v_row16_avx512(const int16_t *const *rows, const int16_t *k, uint32_t n, size_t count,
                           int16_t *dst);
#endif

#endif
