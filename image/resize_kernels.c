/* image/resize_kernels.c - the inner loops of resize.c: scalar C for
 * every build, AVX2 on x86-64, and AVX-512 for the plane passes (picked at
 * run time by resize.c). Scalar and SIMD kernels compute the same
 * integer sums and round the same way, so they give identical bytes; tests
 * compare every level the CPU has with the scalar one.
 *
 * RGB rows (stk__resize):
 *   horizontal: two source rows at a time, one per 128-bit lane, so each
 *     output's weights are loaded once for both. Per output, a 16-byte load
 *     per row covers 4 taps (12 bytes of RGB); an in-lane byte shuffle makes
 *     16-bit (tap, tap) pairs per channel and a multiply-add sums them, twice
 *     (taps 0,1 and 2,3). Four outputs are packed and stored together.
 *   vertical: 32 bytes of two source rows are interleaved into 16-bit pairs
 *     and multiply-added against the pair of row weights: 64 products in 4
 *     instructions. The in-lane interleave and the in-lane packs at the end
 *     undo each other, so the bytes come out in order.
 *
 * Planes (stk__resize_ycc): one byte per sample, so the RGB trick of one load
 * per output wastes two thirds of it. Instead a 128-bit lane holds 4
 * consecutive outputs: one 16-byte load covers all their taps (they overlap,
 * outputs being at most a few samples apart), and per pair of taps a
 * precomputed byte shuffle builds the 16-bit (tap, tap) pairs of all 4,
 * which one multiply-add sums: 8 outputs per shuffle and multiply-add. Both
 * passes keep STK_IMG_PLANE_FRAC more bits (int16): samples are rounded once, by
 * the colour conversion at the end.
 *
 * AVX-512 (only on CPUs with VBMI, where 512-bit multiplies do not pull the
 * clock down for the AVX2 decode around them): the plane vertical pass with
 * 512-bit vectors (AVX-512BW), and the horizontal plane pass with VBMI's
 * byte permute, 16 outputs per 64-byte load (stk__h_plane_vbmi). A horizontal
 * plane kernel that packs two AVX2-style groups into one 512-bit vector was
 * slower than the AVX2 one and is not kept. What each was measured at:
 * bench/README.md. */
#include "resize_internal.h"

#ifdef STOKER_HAVE_AVX2
#  include <immintrin.h>
#endif

/* ------------------------------------------------------------ scalar kernels */

static uint8_t clamp8(int32_t v)
{
    v >>= STK_IMG_RESIZE_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

#define MAX16 (255 << STK_IMG_PLANE_FRAC)
static int16_t clamp16(int32_t v)
{
    v >>= STK_IMG_RESIZE_BITS - STK_IMG_PLANE_FRAC;
    return (int16_t)(v < 0 ? 0 : v > MAX16 ? MAX16 : v);
}

void stk__h_row_scalar(const stk__axis *a, const uint8_t *src, uint8_t *dst, uint32_t from, uint32_t to)
{
    for (uint32_t i = from; i < to; i++) {
        const uint8_t *s = src + 3 * (size_t)a->start[i];
        const int16_t *k = a->coef + (size_t)i * a->taps;
        for (unsigned c = 0; c < 3; c++) {
            int32_t v = STK_IMG_HALF;
            for (uint32_t t = 0; t < a->len[i]; t++) v += k[t] * s[3 * t + c];
            dst[3 * i + c] = clamp8(v);
        }
    }
}

/* Sums of byte samples kept as int16 with STK_IMG_PLANE_FRAC fractional bits. */
#define FRAC_HALF (1 << (STK_IMG_RESIZE_BITS - STK_IMG_PLANE_FRAC - 1))

void stk__h_plane_scalar(const stk__axis *a, const uint8_t *src, int16_t *dst, uint32_t from, uint32_t to)
{
    for (uint32_t i = from; i < to; i++) {
        const uint8_t *s = src + a->start[i];
        const int16_t *k = a->coef + (size_t)i * a->taps;
        int32_t v = FRAC_HALF;
        for (uint32_t t = 0; t < a->len[i]; t++) v += k[t] * s[t];
        dst[i] = clamp16(v);
    }
}

/* One output row from rows[0 .. n) (n bytes wide each). Row by row into an
 * accumulator line, which the compiler vectorises. */
static void v_acc(const uint8_t *const *rows, const int16_t *k, uint32_t n, size_t from, size_t bytes,
                  int32_t *acc, int32_t bias)
{
    for (size_t i = from; i < bytes; i++) acc[i] = bias;
    for (uint32_t t = 0; t < n; t++) {
        const uint8_t *s = rows[t];
        int32_t c = k[t];
        for (size_t i = from; i < bytes; i++) acc[i] += c * s[i];
    }
}

void stk__v_row_scalar(const uint8_t *const *rows, const int16_t *k, uint32_t n, size_t from, size_t bytes,
                       int32_t *acc, uint8_t *dst)
{
    v_acc(rows, k, n, from, bytes, acc, STK_IMG_HALF);
    for (size_t i = from; i < bytes; i++) dst[i] = clamp8(acc[i]);
}

/* int16 rows in, int16 out, the fractional bits kept: a plain shift by
 * STK_IMG_RESIZE_BITS, rounded, clamped to 0 .. 255 in that scale. */
void stk__v_row16_scalar(const int16_t *const *rows, const int16_t *k, uint32_t n, size_t from, size_t count,
                         int32_t *acc, int16_t *dst)
{
    for (size_t i = from; i < count; i++) acc[i] = STK_IMG_HALF;
    for (uint32_t t = 0; t < n; t++) {
        const int16_t *s = rows[t];
        int32_t c = k[t];
        for (size_t i = from; i < count; i++) acc[i] += c * s[i];
    }
    for (size_t i = from; i < count; i++) {
        int32_t v = acc[i] >> STK_IMG_RESIZE_BITS;
        dst[i] = (int16_t)(v < 0 ? 0 : v > MAX16 ? MAX16 : v);
    }
}

/* -------------------------------------------------------------- AVX2 kernels */

#ifdef STOKER_HAVE_AVX2
#  define STK_IMG_AVX2 __attribute__((target("avx2")))

/* Both lanes: from 5 RGB pixels, taps (0,1) (s01) or (2,3) (s23) as 16-bit
 * (tap x, tap y) pairs per channel, then a zero pair. */
STK_IMG_AVX2 static inline __attribute__((always_inline)) __m256i h_shuffle(int second)
{
    const char z = (char)0x80, o = (char)(second ? 6 : 0);
    return _mm256_setr_epi8(o, z, o + 3, z, o + 1, z, o + 4, z, o + 2, z, o + 5, z, z, z, z, z, o, z, o + 3,
                            z, o + 1, z, o + 4, z, o + 2, z, o + 5, z, z, z, z, z);
}

/* One output's sums (R, G, B, 0 as i32) for row x (low lane) and row
 * x + stride (high lane): `chunks` chunks of 4 taps with weights w; taps2:
 * there are at most 2 taps (every enlargement), so taps 2 and 3, whose
 * weights are zero, are not summed. */
STK_IMG_AVX2 static inline __attribute__((always_inline)) __m256i
h_two(const uint8_t *x, size_t stride, const int16_t *w, const uint32_t chunks, const int taps2)
{
    const __m256i s01 = h_shuffle(0), s23 = h_shuffle(1);
    __m256i acc = _mm256_set1_epi32(STK_IMG_HALF);
    for (uint32_t c = 0; c < chunks; c++, x += 3 * STK_IMG_CHUNK_TAPS, w += STK_IMG_CHUNK_I16) {
        __m256i px =
            _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)x)),
                                    _mm_loadu_si128((const __m128i *)(const void *)(x + stride)), 1);
        const __m256i *k = (const __m256i *)(const void *)w;
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(px, s01), _mm256_loadu_si256(k)));
        if (!taps2)
            acc = _mm256_add_epi32(
                acc, _mm256_madd_epi16(_mm256_shuffle_epi8(px, s23), _mm256_loadu_si256(k + 1)));
    }
    return acc;
}

/* Sums of 4 consecutive outputs a..d (rows in lanes) to 12 bytes at d0
 * (low lane's row) and d1 (high lane's); 16 bytes are written at each. */
STK_IMG_AVX2 static inline __attribute__((always_inline)) void h_store(__m256i a, __m256i b, __m256i c,
                                                                       __m256i d, uint8_t *d0, uint8_t *d1)
{
    const char z = (char)0x80;
    a = _mm256_srai_epi32(a, STK_IMG_RESIZE_BITS);
    b = _mm256_srai_epi32(b, STK_IMG_RESIZE_BITS);
    c = _mm256_srai_epi32(c, STK_IMG_RESIZE_BITS);
    d = _mm256_srai_epi32(d, STK_IMG_RESIZE_BITS);
    /* per lane: a b c d as R G B 0 bytes; drop the zeros */
    __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    p = _mm256_shuffle_epi8(p, _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, z, z, z, z, 0, 1, 2,
                                                4, 5, 6, 8, 9, 10, 12, 13, 14, z, z, z, z));
    _mm_storeu_si128((__m128i *)(void *)d0, _mm256_castsi256_si128(p));
    _mm_storeu_si128((__m128i *)(void *)d1, _mm256_extracti128_si256(p, 1));
}

/* Outputs [from, to) of source rows s0 and s0 + stride into d0 and d1
 * (stride 0 and d1 == d0 for a single row). Writes up to H_ROOM bytes past
 * the last: d0, d1 are scratch rows with room after them. Each output loads
 * at its own offset, so a mirrored table (offsets falling) runs as is.
 * Inlined with a constant `chunks` for the common tap counts, so the tap
 * loop unrolls. */
STK_IMG_AVX2 static inline __attribute__((always_inline)) void h_body(const stk__axis *a, const uint8_t *s0,
                                                                      size_t stride, uint8_t *d0, uint8_t *d1,
                                                                      uint32_t from, uint32_t to,
                                                                      const uint32_t chunks, const int taps2)
{
    const size_t step = (size_t)chunks * STK_IMG_CHUNK_I16;
    const size_t *off = a->off + from, *end = a->off + to;
    const int16_t *w = a->wide + from * step;
    d0 += 3 * (size_t)from;
    d1 += 3 * (size_t)from;
    for (; off < end;
         off += STK_IMG_GROUP, w += STK_IMG_GROUP * step, d0 += 3 * STK_IMG_GROUP, d1 += 3 * STK_IMG_GROUP) {
        __m256i pa = h_two(s0 + off[0], stride, w, chunks, taps2);
        __m256i pb = h_two(s0 + off[1], stride, w + step, chunks, taps2);
        __m256i pc = h_two(s0 + off[2], stride, w + 2 * step, chunks, taps2);
        __m256i pd = h_two(s0 + off[3], stride, w + 3 * step, chunks, taps2);
        h_store(pa, pb, pc, pd, d0, d1);
    }
}

STK_IMG_AVX2 void stk__h_rgb_avx2(const stk__axis *a, const uint8_t *s0, size_t stride, uint8_t *d0,
                                  uint8_t *d1, uint32_t from, uint32_t to)
{
    /* 1: up to 4 taps (downscale < 1.5; 2 for any enlargement), 2: up to 8 (< 3.5) */
    switch (a->chunks) {
    case 1:
        if (a->taps <= 2) h_body(a, s0, stride, d0, d1, from, to, 1, 1);
        else h_body(a, s0, stride, d0, d1, from, to, 1, 0);
        break;
    case 2:
        h_body(a, s0, stride, d0, d1, from, to, 2, 0);
        break;
    default:
        h_body(a, s0, stride, d0, d1, from, to, a->chunks, 0);
        break;
    }
}

/* Bytes [0, bytes & ~31) of one output row: `pairs` pairs of source rows
 * (rows[2p], rows[2p + 1]) with weights w[p] (two int16 per 32-bit lane).
 * Inlined with a constant `pairs` for the common tap counts. */
STK_IMG_AVX2 static inline __attribute__((always_inline)) size_t
v_body(const uint8_t *const *rows, const __m256i *w, const uint32_t pairs, size_t bytes, uint8_t *dst)
{
    const __m256i zero = _mm256_setzero_si256(), half = _mm256_set1_epi32(STK_IMG_HALF);
    size_t i = 0;
    for (; i + 32 <= bytes; i += 32) {
        __m256i a0 = half, a1 = half, a2 = half, a3 = half;
        for (uint32_t p = 0; p < pairs; p++) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(rows[2 * p] + i));
            __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)(rows[2 * p + 1] + i));
            __m256i lo = _mm256_unpacklo_epi8(x, y), hi = _mm256_unpackhi_epi8(x, y);
            a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_unpacklo_epi8(lo, zero), w[p]));
            a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_unpackhi_epi8(lo, zero), w[p]));
            a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(_mm256_unpacklo_epi8(hi, zero), w[p]));
            a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(_mm256_unpackhi_epi8(hi, zero), w[p]));
        }
        a0 = _mm256_srai_epi32(a0, STK_IMG_RESIZE_BITS);
        a1 = _mm256_srai_epi32(a1, STK_IMG_RESIZE_BITS);
        a2 = _mm256_srai_epi32(a2, STK_IMG_RESIZE_BITS);
        a3 = _mm256_srai_epi32(a3, STK_IMG_RESIZE_BITS);
        __m256i out = _mm256_packus_epi16(_mm256_packs_epi32(a0, a1), _mm256_packs_epi32(a2, a3));
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), out);
    }
    return i;
}

/* Most row pairs the AVX2 vertical kernel takes (64 taps: a downscale by
 * about 32); beyond that the scalar kernel runs. */
#  define V_PAIRS_MAX 32

/* Bytes [0, bytes & ~31) of one output row from rows[0 .. n) with weights
 * k; returns the bytes done. */
/* The row pointers and weights of the AVX2 vertical kernels: pairs of rows
 * with their two weights in each 32-bit lane; an odd last row pairs with
 * itself at weight zero. Returns the pairs, 0 when there are too many. */
STK_IMG_AVX2 static uint32_t v_pairs(const void *const *rows, const int16_t *k, uint32_t n, __m256i *w,
                                     const void **pr)
{
    uint32_t pairs = (n + 1) / 2;
    if (pairs > V_PAIRS_MAX) return 0;
    for (uint32_t p = 0; p < pairs; p++) {
        uint32_t t = 2 * p, u = t + 1 < n ? t + 1 : t;
        uint16_t kt = (uint16_t)k[t], ku = t + 1 < n ? (uint16_t)k[t + 1] : 0;
        w[p] = _mm256_set1_epi32((int32_t)((uint32_t)kt | ((uint32_t)ku << 16)));
        pr[t] = rows[t];
        pr[t + 1] = rows[u];
    }
    return pairs;
}

STK_IMG_AVX2 size_t stk__v_row_avx2(const uint8_t *const *rows, const int16_t *k, uint32_t n, size_t bytes,
                                    uint8_t *dst)
{
    __m256i w[V_PAIRS_MAX];
    const uint8_t *pr[2 * V_PAIRS_MAX];
    uint32_t pairs = v_pairs((const void *const *)rows, k, n, w, (const void **)pr);
    switch (pairs) {
    case 0:
        return 0;
    case 1:
        return v_body(pr, w, 1, bytes, dst);
    case 2:
        return v_body(pr, w, 2, bytes, dst);
    case 3:
        return v_body(pr, w, 3, bytes, dst);
    default:
        return v_body(pr, w, pairs, bytes, dst);
    }
}
#endif /* STOKER_HAVE_AVX2 */

#ifdef STOKER_HAVE_AVX2
/* 16 plane values to 0 .. MAX16, as clamp16 does one. */
STK_IMG_AVX2 static inline __attribute__((always_inline)) __m256i clamp16_avx2(__m256i v)
{
    return _mm256_min_epi16(_mm256_max_epi16(v, _mm256_setzero_si256()), _mm256_set1_epi16(MAX16));
}

/* Outputs [0, count & ~15) of one output row from int16 rows, 16 at a
 * time: two rows' values interleaved into (a, b) pairs and multiply-added
 * against the pair of row weights; the in-lane unpacks and the final pack
 * undo each other. */
STK_IMG_AVX2 static inline __attribute__((always_inline)) size_t
v_body16(const int16_t *const *rows, const __m256i *w, const uint32_t pairs, size_t count, int16_t *dst)
{
    const __m256i half = _mm256_set1_epi32(STK_IMG_HALF);
    size_t i = 0;
    for (; i + 16 <= count; i += 16) {
        __m256i lo = half, hi = half;
        for (uint32_t p = 0; p < pairs; p++) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(rows[2 * p] + i));
            __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)(rows[2 * p + 1] + i));
            lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(x, y), w[p]));
            hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(x, y), w[p]));
        }
        __m256i v = _mm256_packs_epi32(_mm256_srai_epi32(lo, STK_IMG_RESIZE_BITS),
                                       _mm256_srai_epi32(hi, STK_IMG_RESIZE_BITS));
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), clamp16_avx2(v));
    }
    return i;
}

STK_IMG_AVX2 size_t stk__v_row16_avx2(const int16_t *const *rows, const int16_t *k, uint32_t n, size_t count,
                                      int16_t *dst)
{
    __m256i w[V_PAIRS_MAX];
    const int16_t *pr[2 * V_PAIRS_MAX];
    uint32_t pairs = v_pairs((const void *const *)rows, k, n, w, (const void **)pr);
    switch (pairs) {
    case 0:
        return 0;
    case 1:
        return v_body16(pr, w, 1, count, dst);
    case 2:
        return v_body16(pr, w, 2, count, dst);
    case 3:
        return v_body16(pr, w, 3, count, dst);
    default:
        return v_body16(pr, w, pairs, count, dst);
    }
}

#  define STK_IMG_AVX512 __attribute__((target("avx2,avx512f,avx512bw")))

/* v_body16 with 512-bit vectors: 32 values a turn (the in-lane unpacks and
 * the pack still undo each other, lane by lane); the last 16 with AVX2. */
STK_IMG_AVX512 size_t stk__v_row16_avx512(const int16_t *const *rows, const int16_t *k, uint32_t n,
                                          size_t count, int16_t *dst)
{
    __m256i w[V_PAIRS_MAX];
    const int16_t *pr[2 * V_PAIRS_MAX];
    const uint32_t pairs = v_pairs((const void *const *)rows, k, n, w, (const void **)pr);
    if (!pairs) return 0;
    __m512i w5[V_PAIRS_MAX];
    for (uint32_t p = 0; p < pairs; p++) w5[p] = _mm512_broadcastd_epi32(_mm256_castsi256_si128(w[p]));
    const __m512i half = _mm512_set1_epi32(STK_IMG_HALF), zero = _mm512_setzero_si512(),
                  top = _mm512_set1_epi16(MAX16);
    size_t i = 0;
    for (; i + 32 <= count; i += 32) {
        __m512i lo = half, hi = half;
        for (uint32_t p = 0; p < pairs; p++) {
            __m512i x = _mm512_loadu_si512((const void *)(pr[2 * p] + i));
            __m512i y = _mm512_loadu_si512((const void *)(pr[2 * p + 1] + i));
            lo = _mm512_add_epi32(lo, _mm512_madd_epi16(_mm512_unpacklo_epi16(x, y), w5[p]));
            hi = _mm512_add_epi32(hi, _mm512_madd_epi16(_mm512_unpackhi_epi16(x, y), w5[p]));
        }
        __m512i v = _mm512_packs_epi32(_mm512_srai_epi32(lo, STK_IMG_RESIZE_BITS),
                                       _mm512_srai_epi32(hi, STK_IMG_RESIZE_BITS));
        _mm512_storeu_si512((void *)(dst + i), _mm512_min_epi16(_mm512_max_epi16(v, zero), top));
    }
    if (i + 16 <= count) {
        const int16_t *pr2[2 * V_PAIRS_MAX];
        for (uint32_t t = 0; t < 2 * pairs; t++) pr2[t] = pr[t] + i;
        i += v_body16(pr2, w, pairs, 16, dst + i);
    }
    return i;
}

/* One group of 8 plane outputs: lane L holds outputs 4L .. 4L+3, loaded
 * from src + start[4L]; `pairs` shuffles and multiply-adds. */
STK_IMG_AVX2 static inline __attribute__((always_inline)) __m256i
h_plane_group(const uint8_t *s0, const uint8_t *s1, const __m256i *m, const __m256i *w, const uint32_t pairs)
{
    __m256i px =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)s0)),
                                _mm_loadu_si128((const __m128i *)(const void *)s1), 1);
    __m256i acc = _mm256_set1_epi32(FRAC_HALF);
    for (uint32_t p = 0; p < pairs; p++)
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(px, _mm256_loadu_si256(m + p)),
                                                      _mm256_loadu_si256(w + p)));
    return _mm256_srai_epi32(acc, STK_IMG_RESIZE_BITS - STK_IMG_PLANE_FRAC);
}

/* 8 int32 sums (lane L: outputs 4L .. 4L+3) to 8 int16 in output order: the
 * pack leaves lane L's four in its low 64 bits, the permute puts both lanes'
 * side by side. */
STK_IMG_AVX2 static inline __attribute__((always_inline)) __m128i h_plane_one(__m256i v)
{
    const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    v = clamp16_avx2(_mm256_packs_epi32(v, v));
    return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(v, order));
}

/* Groups two at a time where both qualify: one pack, clamp and 64-bit
 * permute for 16 outputs (the pack interleaves the two groups' lanes as
 * g0.lo, g1.lo, g0.hi, g1.hi; the permute restores g0.lo, g0.hi, g1.lo,
 * g1.hi), which halves the shuffle-port work besides the multiply-adds.
 * The table's fields are read into locals first: the stores may alias
 * anything, and the compiler would reload them for every group. */
STK_IMG_AVX2 static inline __attribute__((always_inline)) void
h_plane_body(const stk__axis *a, const uint8_t *src, int16_t *dst, const uint32_t pairs)
{
    const __m256i *m = (const __m256i *)(const void *)a->gmask;
    const __m256i *w = (const __m256i *)(const void *)a->gw;
    const uint32_t *start = a->start, ngroups = a->ngroups;
    const uint8_t *gok = a->gok;
    uint32_t g = 0;
    while (g < ngroups) {
        const uint32_t *st = start + (size_t)g * STK_IMG_PGROUP;
        if (g + 1 < ngroups && gok[g] && gok[g + 1]) {
            __m256i v0 = h_plane_group(src + st[0], src + st[4], m, w, pairs);
            __m256i v1 = h_plane_group(src + st[8], src + st[12], m + pairs, w + pairs, pairs);
            __m256i v = _mm256_permute4x64_epi64(clamp16_avx2(_mm256_packs_epi32(v0, v1)), 0xd8);
            _mm256_storeu_si256((__m256i *)(void *)(dst + (size_t)g * STK_IMG_PGROUP), v);
            g += 2, m += 2 * pairs, w += 2 * pairs;
            continue;
        }
        if (gok[g])
            _mm_storeu_si128((__m128i *)(void *)(dst + (size_t)g * STK_IMG_PGROUP),
                             h_plane_one(h_plane_group(src + st[0], src + st[4], m, w, pairs)));
        g++, m += pairs, w += pairs;
    }
}

STK_IMG_AVX2 void stk__h_plane_avx2(const stk__axis *a, const uint8_t *src, int16_t *dst)
{
    switch (a->pairs) {
    case 1:
        h_plane_body(a, src, dst, 1);
        break;
    case 2:
        h_plane_body(a, src, dst, 2);
        break;
    case 3:
        h_plane_body(a, src, dst, 3);
        break;
    default:
        h_plane_body(a, src, dst, a->pairs);
        break;
    }
}

#  define STK_IMG_VBMI __attribute__((target("avx2,avx512f,avx512bw,avx512vbmi")))

/* 16 outputs per 64-byte load: `vpermb` reaches any byte of it, so one
 * permute per pair of taps builds all 16 outputs' pairs (the AVX2 kernel
 * needs a 16-byte load per 4 outputs, an insert per 8 and a shuffle per 8
 * and pair, all on the shuffle port), and the sums come out in output
 * order: no permute after the pack. The zero high bytes of each pair come
 * from the permute's mask, not from the index. */
STK_IMG_VBMI static inline __attribute__((always_inline)) void
h_plane_xbody(const stk__axis *a, const uint8_t *src, int16_t *dst, const uint32_t pairs)
{
    const __m512i *m = (const __m512i *)(const void *)a->xperm;
    const __m512i *w = (const __m512i *)(const void *)a->xw;
    const uint32_t *start = a->start, n = a->nxgroups;
    const uint64_t *load = a->xload;
    const uint8_t *ok = a->xok;
    const __m512i half = _mm512_set1_epi32(FRAC_HALF);
    const __m256i zero = _mm256_setzero_si256(), top = _mm256_set1_epi16(MAX16);
    const __mmask64 lo_bytes = 0x5555555555555555u;
    for (uint32_t g = 0; g < n; g++, m += pairs, w += pairs) {
        if (!ok[g]) continue;
        __m512i px = _mm512_maskz_loadu_epi8(load[g], src + start[(size_t)g * STK_IMG_XGROUP]);
        __m512i acc = half;
        for (uint32_t p = 0; p < pairs; p++)
            acc = _mm512_add_epi32(
                acc, _mm512_madd_epi16(_mm512_maskz_permutexvar_epi8(lo_bytes, _mm512_loadu_si512(m + p), px),
                                       _mm512_loadu_si512(w + p)));
        __m256i v = _mm512_cvtsepi32_epi16(_mm512_srai_epi32(acc, STK_IMG_RESIZE_BITS - STK_IMG_PLANE_FRAC));
        _mm256_storeu_si256((__m256i *)(void *)(dst + (size_t)g * STK_IMG_XGROUP),
                            _mm256_min_epi16(_mm256_max_epi16(v, zero), top));
    }
}

STK_IMG_VBMI void stk__h_plane_vbmi(const stk__axis *a, const uint8_t *src, int16_t *dst)
{
    switch (a->pairs) {
    case 1:
        h_plane_xbody(a, src, dst, 1);
        break;
    case 2:
        h_plane_xbody(a, src, dst, 2);
        break;
    case 3:
        h_plane_xbody(a, src, dst, 3);
        break;
    default:
        h_plane_xbody(a, src, dst, a->pairs);
        break;
    }
}
#endif /* STOKER_HAVE_AVX2 */
