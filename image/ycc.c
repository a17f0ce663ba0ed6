/* image/ycc.c - see ycc.h. Portable C, and AVX2 on x86-64 (16 pixels per
 * iteration); both compute the same integers (tests compare them). */
#include "ycc.h"

#include "resize.h"

/* libjpeg's constants: FIX(x) = round(x * 2^16) (jdcolor.c). */
#define FIX_1_40200 91881
#define FIX_0_34414 22554
#define FIX_0_71414 46802
#define FIX_1_77200 116130
#define MID (128 << STK_IMG_PLANE_FRAC)
#define HALF16 (1 << 15)

static inline uint8_t out8(int32_t v) /* STK_IMG_PLANE_FRAC fractional bits to a level */
{
    v = (v + (1 << (STK_IMG_PLANE_FRAC - 1))) >> STK_IMG_PLANE_FRAC;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Right shifts of negative values are arithmetic with every compiler this
 * project supports (as libjpeg's RIGHT_SHIFT assumes). */
static void ycc_plain(const int16_t *y, const int16_t *cb, const int16_t *cr, uint8_t *rgb, size_t n)
{
    if (!cb) {
        for (size_t i = 0; i < n; i++) {
            uint8_t g = out8(y[i]);
            rgb[3 * i] = g, rgb[3 * i + 1] = g, rgb[3 * i + 2] = g;
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        int32_t yy = y[i], u = cb[i] - MID, v = cr[i] - MID;
        rgb[3 * i] = out8(yy + ((FIX_1_40200 * v + HALF16) >> 16));
        rgb[3 * i + 1] = out8(yy + ((-FIX_0_34414 * u - FIX_0_71414 * v + HALF16) >> 16));
        rgb[3 * i + 2] = out8(yy + ((FIX_1_77200 * u + HALF16) >> 16));
    }
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(STK_IMG_NO_SIMD)
#  include <immintrin.h>
#  define HAVE_YCC_AVX2 1
#  define AVX2 __attribute__((target("avx2")))

/* The same integers, 16 pixels at a time. libjpeg's constants do not fit a
 * 16-bit multiply, so each is split into a multiple of 2^16 (which commutes
 * with the shift) and a 16-bit rest:
 *   (91881 v + 2^15) >> 16                = v  + ((26345 v + 2^15) >> 16)
 *   (116130 u + 2^15) >> 16               = 2u + ((-14942 u + 2^15) >> 16)
 *   (-22554 u - 46802 v + 2^15) >> 16     = -v + ((-22554 u + 18734 v + 2^15) >> 16)
 * A rest of one product, (k x + 2^15) >> 16, is the high half of k x plus
 * one when bit 15 of the low half is set (round_hi): two multiplies and two
 * arithmetic operations, none on the shuffle port, which the interleaving
 * into RGB keeps busy. G's two products go through a multiply-add of (u, v)
 * pairs instead, with 2^15 added apart. */
AVX2 static inline __attribute__((always_inline)) __m256i round_hi(__m256i x, __m256i k)
{
    __m256i hi = _mm256_mulhi_epi16(x, k), lo = _mm256_mullo_epi16(x, k);
    return _mm256_sub_epi16(hi, _mm256_srai_epi16(lo, 15)); /* lo < 0 as int16: bit 15 set */
}

/* 16 R, G or B values with STK_IMG_PLANE_FRAC fractional bits to bytes 0..255
 * (the pack saturates, which is the clamp). */
AVX2 static inline __attribute__((always_inline)) __m256i level(__m256i x)
{
    return _mm256_srai_epi16(_mm256_add_epi16(x, _mm256_set1_epi16(1 << (STK_IMG_PLANE_FRAC - 1))),
                             STK_IMG_PLANE_FRAC);
}

/* Byte shuffles that interleave 16 R, 16 G and 16 B into 48 bytes of RGB:
 * output vector o (of 3) takes from channel c (R, G, B) the byte of pixel
 * (16 o + k) / 3 where (16 o + k) % 3 == c, else zero. */
static const uint8_t rgb_masks[9][16] = {
    {0x00, 0x80, 0x80, 0x01, 0x80, 0x80, 0x02, 0x80, 0x80, 0x03, 0x80, 0x80, 0x04, 0x80, 0x80, 0x05},
    {0x80, 0x00, 0x80, 0x80, 0x01, 0x80, 0x80, 0x02, 0x80, 0x80, 0x03, 0x80, 0x80, 0x04, 0x80, 0x80},
    {0x80, 0x80, 0x00, 0x80, 0x80, 0x01, 0x80, 0x80, 0x02, 0x80, 0x80, 0x03, 0x80, 0x80, 0x04, 0x80},
    {0x80, 0x80, 0x06, 0x80, 0x80, 0x07, 0x80, 0x80, 0x08, 0x80, 0x80, 0x09, 0x80, 0x80, 0x0a, 0x80},
    {0x05, 0x80, 0x80, 0x06, 0x80, 0x80, 0x07, 0x80, 0x80, 0x08, 0x80, 0x80, 0x09, 0x80, 0x80, 0x0a},
    {0x80, 0x05, 0x80, 0x80, 0x06, 0x80, 0x80, 0x07, 0x80, 0x80, 0x08, 0x80, 0x80, 0x09, 0x80, 0x80},
    {0x80, 0x0b, 0x80, 0x80, 0x0c, 0x80, 0x80, 0x0d, 0x80, 0x80, 0x0e, 0x80, 0x80, 0x0f, 0x80, 0x80},
    {0x80, 0x80, 0x0b, 0x80, 0x80, 0x0c, 0x80, 0x80, 0x0d, 0x80, 0x80, 0x0e, 0x80, 0x80, 0x0f, 0x80},
    {0x0a, 0x80, 0x80, 0x0b, 0x80, 0x80, 0x0c, 0x80, 0x80, 0x0d, 0x80, 0x80, 0x0e, 0x80, 0x80, 0x0f},
};

AVX2 static void ycc_avx2(const int16_t *y, const int16_t *cb, const int16_t *cr, uint8_t *rgb, size_t n)
{
    size_t i = 0;
    if (cb) {
        __m128i m[3][3];
        for (int o = 0; o < 3; o++)
            for (int c = 0; c < 3; c++)
                m[o][c] = _mm_loadu_si128((const __m128i *)(const void *)rgb_masks[3 * o + c]);
        const __m256i mid = _mm256_set1_epi16(MID);
        const __m256i kr = _mm256_set1_epi16(26345), kb = _mm256_set1_epi16(-14942);
        const __m256i kg = _mm256_set1_epi32((int32_t)((uint16_t)-22554 | (18734u << 16)));
        for (; i + 16 <= n; i += 16) {
            __m256i yy = _mm256_loadu_si256((const __m256i *)(const void *)(y + i));
            __m256i u = _mm256_sub_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(cb + i)), mid);
            __m256i v = _mm256_sub_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(cr + i)), mid);
            __m256i r = _mm256_add_epi16(_mm256_add_epi16(yy, v), round_hi(v, kr));
            __m256i b = _mm256_add_epi16(_mm256_add_epi16(yy, _mm256_add_epi16(u, u)), round_hi(u, kb));
            /* G: the (u, v) pairs, then 2^15 added apart (no third slot) */
            __m256i lo = _mm256_madd_epi16(_mm256_unpacklo_epi16(u, v), kg);
            __m256i hi = _mm256_madd_epi16(_mm256_unpackhi_epi16(u, v), kg);
            const __m256i h32 = _mm256_set1_epi32(1 << 15);
            lo = _mm256_srai_epi32(_mm256_add_epi32(lo, h32), 16);
            hi = _mm256_srai_epi32(_mm256_add_epi32(hi, h32), 16);
            __m256i g = _mm256_add_epi16(_mm256_sub_epi16(yy, v), _mm256_packs_epi32(lo, hi));
            /* bytes: lanes hold pixels 0-7 and 8-15 */
            __m256i rg = _mm256_permute4x64_epi64(_mm256_packus_epi16(level(r), level(g)), 0xd8);
            __m256i bb = _mm256_permute4x64_epi64(_mm256_packus_epi16(level(b), level(b)), 0xd8);
            __m128i R = _mm256_castsi256_si128(rg), G = _mm256_extracti128_si256(rg, 1),
                    B = _mm256_castsi256_si128(bb);
            for (int o = 0; o < 3; o++) {
                __m128i x =
                    _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(R, m[o][0]), _mm_shuffle_epi8(G, m[o][1])),
                                 _mm_shuffle_epi8(B, m[o][2]));
                _mm_storeu_si128((__m128i *)(void *)(rgb + 3 * i + 16 * o), x);
            }
        }
    }
    ycc_plain(y + i, cb ? cb + i : NULL, cr ? cr + i : NULL, rgb + 3 * i, n - i);
}

#  define AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512vbmi")))

AVX512 static inline __attribute__((always_inline)) __m512i round_hi512(__m512i x, __m512i k)
{
    __m512i hi = _mm512_mulhi_epi16(x, k), lo = _mm512_mullo_epi16(x, k);
    return _mm512_sub_epi16(hi, _mm512_srai_epi16(lo, 15));
}

AVX512 static inline __attribute__((always_inline)) __m512i level512(__m512i x)
{
    return _mm512_srai_epi16(_mm512_add_epi16(x, _mm512_set1_epi16(1 << (STK_IMG_PLANE_FRAC - 1))),
                             STK_IMG_PLANE_FRAC);
}

/* Where output byte k of 32 pixels comes from, for vpermt2b over two
 * tables: a = packus(R, G), whose 128-bit lane L holds R then G of pixels
 * 8L .. 8L+7, and b = packus(B, B) (index + 64), lane L B of the same. */
static const uint8_t rgb_index[128] = {
    0,  8,  64,  1,  9,  65,  2,  10, 66,  3,  11, 67,  4,  12, 68,  5,  13, 69,  6,  14, 70,  7,  15, 71,
    16, 24, 80,  17, 25, 81,  18, 26, 82,  19, 27, 83,  20, 28, 84,  21, 29, 85,  22, 30, 86,  23, 31, 87,
    32, 40, 96,  33, 41, 97,  34, 42, 98,  35, 43, 99,  36, 44, 100, 37, 45, 101, 38, 46, 102, 39, 47, 103,
    48, 56, 112, 49, 57, 113, 50, 58, 114, 51, 59, 115, 52, 60, 116, 53, 61, 117, 54, 62, 118, 55, 63, 119,
};

/* ycc_avx2 with 512-bit vectors, 32 pixels a turn: the same integers (the
 * in-lane unpacks and packs still undo each other), and the interleave into
 * RGB is two cross-lane byte permutes (AVX-512 VBMI) where AVX2 needs nine
 * shuffles per 16 pixels. The last pixels go to ycc_avx2. */
AVX512 static void ycc_avx512(const int16_t *y, const int16_t *cb, const int16_t *cr, uint8_t *rgb, size_t n)
{
    size_t i = 0;
    if (cb) {
        const __m512i i0 = _mm512_loadu_si512((const void *)rgb_index);
        const __m512i i1 = _mm512_loadu_si512((const void *)(rgb_index + 64));
        const __m512i mid = _mm512_set1_epi16(MID);
        const __m512i kr = _mm512_set1_epi16(26345), kb = _mm512_set1_epi16(-14942);
        const __m512i kg = _mm512_set1_epi32((int32_t)((uint16_t)-22554 | (18734u << 16)));
        const __m512i h32 = _mm512_set1_epi32(1 << 15);
        for (; i + 32 <= n; i += 32) {
            __m512i yy = _mm512_loadu_si512((const void *)(y + i));
            __m512i u = _mm512_sub_epi16(_mm512_loadu_si512((const void *)(cb + i)), mid);
            __m512i v = _mm512_sub_epi16(_mm512_loadu_si512((const void *)(cr + i)), mid);
            __m512i r = _mm512_add_epi16(_mm512_add_epi16(yy, v), round_hi512(v, kr));
            __m512i b = _mm512_add_epi16(_mm512_add_epi16(yy, _mm512_add_epi16(u, u)), round_hi512(u, kb));
            __m512i lo = _mm512_madd_epi16(_mm512_unpacklo_epi16(u, v), kg);
            __m512i hi = _mm512_madd_epi16(_mm512_unpackhi_epi16(u, v), kg);
            lo = _mm512_srai_epi32(_mm512_add_epi32(lo, h32), 16);
            hi = _mm512_srai_epi32(_mm512_add_epi32(hi, h32), 16);
            __m512i g = _mm512_add_epi16(_mm512_sub_epi16(yy, v), _mm512_packs_epi32(lo, hi));
            __m512i rg = _mm512_packus_epi16(level512(r), level512(g));
            __m512i bb = _mm512_packus_epi16(level512(b), level512(b));
            _mm512_storeu_si512((void *)(rgb + 3 * i), _mm512_permutex2var_epi8(rg, i0, bb));
            _mm256_storeu_si256((__m256i *)(void *)(rgb + 3 * i + 64),
                                _mm512_castsi512_si256(_mm512_permutex2var_epi8(rg, i1, bb)));
        }
    }
    ycc_avx2(y + i, cb ? cb + i : NULL, cr ? cr + i : NULL, rgb + 3 * i, n - i);
}
#endif

void stk__ycc_row(int simd, const int16_t *y, const int16_t *cb, const int16_t *cr, uint8_t *rgb, size_t n)
{
#ifdef HAVE_YCC_AVX2
    if (simd >= 2) {
        ycc_avx512(y, cb, cr, rgb, n);
        return;
    }
    if (simd) {
        ycc_avx2(y, cb, cr, rgb, n);
        return;
    }
#endif
    (void)simd;
    ycc_plain(y, cb, cr, rgb, n);
}
