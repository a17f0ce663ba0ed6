/* packer/resize.c - Pillow's antialiased bilinear resampling, windowed.
 *
 * Weights (axis_build) follow Pillow's precompute_coeffs exactly: for output
 * index i the centre is (i + 0.5) * scale in source coordinates, the triangle
 * of radius max(scale, 1) is sampled at source pixel centres, and the weights
 * are normalised in double. They are then rounded to 14-bit fixed point, and
 * the rounding remainder is handed out so every row of weights sums to
 * exactly 1 << 14: a flat area stays exactly flat, and an unscaled axis is an
 * exact copy. Against Pillow's 22-bit weights this moves an output by at most
 * 255 * taps / 2^15 of a level before rounding (under 0.05 for the tap counts
 * a DCT-prescaled decode leaves).
 *
 * Kernels: portable scalar C everywhere, and AVX2 on x86-64 when the CPU has
 * it (checked once, in pk_resizer_new). Both compute the same integer sums
 * and round the same way, so they give identical bytes.
 *   horizontal: two source rows at a time, one per 128-bit lane, so each
 *     output's weights are loaded once for both. Per output, a 16-byte load
 *     per row covers 4 taps (12 bytes of RGB); an in-lane byte shuffle makes
 *     16-bit (tap, tap) pairs per channel and a multiply-add sums them, twice
 *     (taps 0,1 and 2,3). Four outputs are packed and stored together.
 *   vertical: 32 bytes of two source rows are interleaved into 16-bit pairs
 *     and multiply-added against the pair of row weights: 64 products in 4
 *     instructions. The in-lane interleave and the in-lane packs at the end
 *     undo each other, so the bytes come out in order.
 * On this project's machines (Zen 3) the horizontal pass costs about 6.5
 * instructions per output pixel and row, the vertical about 1.3 per byte;
 * together about a seventh of a full-size TurboJPEG decode of the same image.
 */
#include "resize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* PK_NO_SIMD builds the portable kernels only, as on other architectures. */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(PK_NO_SIMD)
#  define PK_HAVE_AVX2 1
#  include <immintrin.h>
#endif

#define ONE (1 << PK_RESIZE_BITS)
#define HALF (1 << (PK_RESIZE_BITS - 1))
/* The horizontal SIMD kernel works on two rows and groups of 4 outputs at
 * a time, and per output on chunks of 4 taps: one 16-byte load (5 RGB
 * pixels) per row and chunk. */
#define GROUP 4
#define CHUNK_TAPS 4
#define LOAD_BYTES 16
/* int16 weights per output and chunk: 2 vectors of 16 (see widen). */
#define CHUNK_I16 32
/* Bytes the horizontal SIMD kernel may write past the end of its row. */
#define H_ROOM 16
/* Most chunks the horizontal SIMD kernel takes (64 taps: a downscale by
 * about 32). Its weight table is 16 times the plain one; past this the
 * scalar kernel runs, so that an absurd strip cannot blow up memory. */
#define H_CHUNKS_MAX 16
/* Weight tables kept per axis: images of common sizes (500x375, 375x500,
 * 500x333, ...) then find theirs already built. Real photo sets have a long
 * tail of sizes (709 different ones in 2,000 images of the 10k bench set):
 * 8 slots missed often enough that building tables cost about 2% of a
 * decode; 64 (about 2 MB per thread) keep most of the head. */
#define AXIS_CACHE 64

/* Weight table of one axis for the outputs [first, first + count). */
typedef struct {
    uint32_t in, count; /* key, with out and first; count 0: empty slot */
    uint64_t out, first;
    uint64_t used;      /* resizer tick of the last use, for eviction */
    uint32_t taps;      /* row length of coef: the most taps any output uses */
    uint32_t chunks;    /* ceil(taps / CHUNK_TAPS) */
    uint32_t nsimd;     /* outputs [0, nsimd) run the SIMD horizontal kernel */
    uint32_t *start;    /* count: first source index */
    uint32_t *len;      /* count: taps used (the rest of the row is zero) */
    size_t *off;        /* count: 3 * start, the byte offset in a row */
    int16_t *coef;      /* count x taps */
    int16_t *wide;      /* horizontal SIMD layout: nsimd x chunks x CHUNK_I16 */
    void *mem;
    size_t cap;
} pk_axis;

struct pk_resizer {
    int simd;           /* AVX2 kernels usable */
    uint64_t tick;
    pk_axis h[AXIS_CACHE], v[AXIS_CACHE];
    uint8_t *tmp;       /* horizontal pass output: the rows the vertical pass reads */
    size_t tmp_cap;
    int32_t *acc;       /* scalar vertical accumulators, one per output byte */
    size_t acc_cap;
};

/* ------------------------------------------------------------ weights */

static double triangle(double x)
{
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Grow *buf to hold n bytes; old contents are not kept. */
static int reserve(void **buf, size_t *cap, size_t n)
{
    if (n <= *cap) return 0;
    void *p = malloc(n);
    if (!p) return -1;
    free(*buf);
    *buf = p;
    *cap = n;
    return 0;
}

/* Pillow's source span of output i: [*lo, *lo + *n). */
static void span(uint32_t in, double scale, double support, uint64_t i, uint32_t *lo, uint32_t *n)
{
    double center = ((double)i + 0.5) * scale;
    double a = center - support + 0.5, b = center + support + 0.5;
    /* Pillow truncates with (int); for a > -1 that equals clamping at 0. */
    uint32_t x0 = a <= 0.0 ? 0 : (a >= (double)in ? in : (uint32_t)a);
    uint32_t x1 = b >= (double)in ? in : (b <= 0.0 ? 0 : (uint32_t)b);
    if (x1 <= x0) { /* cannot happen for a support >= 1; stay safe */
        x0 = x0 >= in ? in - 1 : x0;
        x1 = x0 + 1;
    }
    *lo = x0;
    *n = x1 - x0;
}

/* Round normalised weights to fixed point summing to exactly ONE. The
 * remainder (at most half a unit per tap) goes one unit at a time to the
 * non-zero taps from the heaviest onwards, so no tap changes by more than one
 * unit and none changes sign. */
static void quantise(const double *w, uint32_t n, int16_t *q)
{
    int32_t sum = 0;
    uint32_t top = 0;
    for (uint32_t t = 0; t < n; t++) {
        q[t] = (int16_t)(0.5 + w[t] * ONE);
        sum += q[t];
        if (w[t] > w[top]) top = t;
    }
    int32_t diff = ONE - sum;
    /* Each tap rounded by under half a unit, so |diff| is under half the
     * taps that may move and one pass settles it (two for safety). */
    for (uint32_t k = 0, t = top; diff != 0 && k < 2 * n; k++, t = t + 1 == n ? 0 : t + 1) {
        if (diff > 0 && w[t] > 0.0) { q[t]++; diff--; } /* outside the triangle stays out */
        else if (diff < 0 && q[t] > 0) { q[t]--; diff++; }
    }
}

/* The horizontal SIMD layout: per output and chunk of taps (0..3), two
 * vectors of 16 int16, (w_0, w_1) and (w_2, w_3) for each of R, G, B, then
 * 0, 0; the same in both lanes, which hold two different rows. */
static void widen(pk_axis *a)
{
    for (uint32_t i = 0; i < a->nsimd; i++) {
        const int16_t *q = a->coef + (size_t)i * a->taps;
        int16_t *v = a->wide + (size_t)i * a->chunks * CHUNK_I16;
        for (uint32_t t = 0; t < 4 * a->chunks; t += 2, v += 16) {
            int16_t w0 = t < a->taps ? q[t] : 0, w1 = t + 1 < a->taps ? q[t + 1] : 0;
            const int16_t lane[8] = {w0, w1, w0, w1, w0, w1, 0, 0};
            memcpy(v, lane, sizeof lane);
            memcpy(v + 8, lane, sizeof lane);
        }
    }
}

/* Carve the table's arrays for count outputs of up to `taps` taps out of
 * one allocation, largest alignment first; `wide`: with the SIMD layout. */
static int axis_alloc(pk_axis *a, uint32_t count, uint32_t taps, int wide)
{
    uint32_t chunks = wide ? (taps + CHUNK_TAPS - 1) / CHUNK_TAPS : 0;
    size_t n_w = (size_t)taps * sizeof(double);
    size_t n_off = (size_t)count * sizeof(size_t);
    size_t n_wide = (size_t)count * chunks * CHUNK_I16 * sizeof(int16_t);
    size_t n_idx = (size_t)count * sizeof(uint32_t);
    size_t n_coef = (size_t)count * taps * sizeof(int16_t);
    if (reserve(&a->mem, &a->cap, n_w + n_off + n_wide + 2 * n_idx + n_coef) != 0) return -1;
    char *m = (char *)a->mem + n_w;
    a->off = (size_t *)(void *)m;
    a->wide = (int16_t *)(void *)(m + n_off);
    a->start = (uint32_t *)(void *)(m + n_off + n_wide);
    a->len = a->start + count;
    a->coef = (int16_t *)(void *)(a->len + count);
    return 0;
}

/* Weights of output i (taps a->len[i] from a->start[i]), Pillow's way. */
static void weights(pk_axis *a, uint32_t i, double scale, double ss)
{
    double *w = a->mem; /* scratch at the front of the allocation */
    double center = ((double)(a->first + i) + 0.5) * scale, ww = 0.0;
    uint32_t n = a->len[i];
    for (uint32_t t = 0; t < n; t++) {
        w[t] = triangle(((double)(a->start[i] + t) - center + 0.5) * ss);
        ww += w[t];
    }
    double norm = ww != 0.0 ? 1.0 / ww : 0.0;
    for (uint32_t t = 0; t < n; t++) w[t] *= norm;
    int16_t *q = a->coef + (size_t)i * a->taps;
    memset(q + n, 0, (a->taps - n) * sizeof *q);
    quantise(w, n, q);
}

/* Build the weights of outputs [first, first + count) of an in -> out axis;
 * `wide`: also the horizontal SIMD layout. */
static int axis_build(pk_axis *a, uint32_t in, uint64_t out, uint64_t first, uint32_t count,
                      int wide)
{
    double scale = (double)in / (double)out;
    double fscale = scale < 1.0 ? 1.0 : scale;
    double support = fscale; /* the triangle's radius is 1 */
    /* Pillow's bound on the taps of any output, and never more than in */
    double bound = ceil(support) * 2 + 1;
    uint32_t most = bound < (double)in ? (uint32_t)bound : in;
    wide = wide && (most + CHUNK_TAPS - 1) / CHUNK_TAPS <= H_CHUNKS_MAX;
    a->count = 0;
    if (axis_alloc(a, count, most, wide) != 0) return -1;
    a->in = in;
    a->out = out;
    a->first = first;
    a->taps = 1;
    for (uint32_t i = 0; i < count; i++) {
        span(in, scale, support, first + i, &a->start[i], &a->len[i]);
        a->off[i] = 3 * (size_t)a->start[i];
        if (a->len[i] > a->taps) a->taps = a->len[i];
    }
    for (uint32_t i = 0; i < count; i++) weights(a, i, scale, 1.0 / fscale);
    a->chunks = (a->taps + CHUNK_TAPS - 1) / CHUNK_TAPS;
    /* start[] never decreases, so the outputs whose last load stays inside
     * the row form a prefix; whole groups of it run the SIMD kernel. */
    uint32_t safe = 0;
    while (wide && safe < count &&
           a->off[safe] + 3 * (size_t)CHUNK_TAPS * (a->chunks - 1) + LOAD_BYTES <= 3 * (size_t)in)
        safe++;
    a->nsimd = safe - safe % GROUP;
    if (wide) widen(a);
    a->count = count;
    return 0;
}

/* The table for (in, out, first, count) from the cache, built on a miss in
 * the least recently used slot. NULL when out of memory. */
static const pk_axis *axis_get(pk_resizer *r, pk_axis *slots, uint32_t in, uint64_t out,
                               uint64_t first, uint32_t count, int wide)
{
    pk_axis *victim = &slots[0];
    r->tick++;
    for (int i = 0; i < AXIS_CACHE; i++) {
        pk_axis *a = &slots[i];
        if (a->count == count && a->in == in && a->out == out && a->first == first) {
            a->used = r->tick;
            return a;
        }
        if (a->used < victim->used) victim = a;
    }
    if (axis_build(victim, in, out, first, count, wide) != 0) return NULL;
    victim->used = r->tick;
    return victim;
}

/* ------------------------------------------------------------ scalar kernels */

static uint8_t clamp8(int32_t v)
{
    v >>= PK_RESIZE_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Outputs [from, to) of one row. */
static void h_row_scalar(const pk_axis *a, const uint8_t *src, uint8_t *dst, uint32_t from,
                         uint32_t to)
{
    for (uint32_t i = from; i < to; i++) {
        const uint8_t *s = src + 3 * (size_t)a->start[i];
        const int16_t *k = a->coef + (size_t)i * a->taps;
        int32_t r = HALF, g = HALF, b = HALF;
        for (uint32_t t = 0; t < a->len[i]; t++) {
            r += k[t] * s[3 * t];
            g += k[t] * s[3 * t + 1];
            b += k[t] * s[3 * t + 2];
        }
        dst[3 * i] = clamp8(r);
        dst[3 * i + 1] = clamp8(g);
        dst[3 * i + 2] = clamp8(b);
    }
}

/* One output row from rows[0 .. n) (n bytes wide each). Row by row into an
 * accumulator line, which the compiler vectorises. */
static void v_row_scalar(const uint8_t *const *rows, const int16_t *k, uint32_t n, size_t from,
                         size_t bytes, int32_t *acc, uint8_t *dst)
{
    for (size_t i = from; i < bytes; i++) acc[i] = HALF;
    for (uint32_t t = 0; t < n; t++) {
        const uint8_t *s = rows[t];
        int32_t c = k[t];
        for (size_t i = from; i < bytes; i++) acc[i] += c * s[i];
    }
    for (size_t i = from; i < bytes; i++) dst[i] = clamp8(acc[i]);
}

/* -------------------------------------------------------------- AVX2 kernels */

#ifdef PK_HAVE_AVX2
#  define PK_AVX2 __attribute__((target("avx2")))

/* Both lanes: from 5 RGB pixels, taps (0,1) (s01) or (2,3) (s23) as 16-bit
 * (tap x, tap y) pairs per channel, then a zero pair. */
PK_AVX2 static inline __attribute__((always_inline)) __m256i h_shuffle(int second)
{
    const char z = (char)0x80, o = (char)(second ? 6 : 0);
    return _mm256_setr_epi8(o, z, o + 3, z, o + 1, z, o + 4, z, o + 2, z, o + 5, z, z, z, z, z,
                            o, z, o + 3, z, o + 1, z, o + 4, z, o + 2, z, o + 5, z, z, z, z, z);
}

/* One output's sums (R, G, B, 0 as i32) for row x (low lane) and row
 * x + stride (high lane): `chunks` chunks of 4 taps with weights w. */
PK_AVX2 static inline __attribute__((always_inline)) __m256i
h_two(const uint8_t *x, size_t stride, const int16_t *w, const uint32_t chunks)
{
    const __m256i s01 = h_shuffle(0), s23 = h_shuffle(1);
    __m256i acc = _mm256_set1_epi32(HALF);
    for (uint32_t c = 0; c < chunks; c++, x += 3 * CHUNK_TAPS, w += CHUNK_I16) {
        __m256i px = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)x)),
            _mm_loadu_si128((const __m128i *)(const void *)(x + stride)), 1);
        const __m256i *k = (const __m256i *)(const void *)w;
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(px, s01), _mm256_loadu_si256(k)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(px, s23), _mm256_loadu_si256(k + 1)));
    }
    return acc;
}

/* Sums of 4 consecutive outputs a..d (rows in lanes) to 12 bytes at d0
 * (low lane's row) and d1 (high lane's); 16 bytes are written at each. */
PK_AVX2 static inline __attribute__((always_inline)) void
h_store(__m256i a, __m256i b, __m256i c, __m256i d, uint8_t *d0, uint8_t *d1)
{
    const char z = (char)0x80;
    a = _mm256_srai_epi32(a, PK_RESIZE_BITS);
    b = _mm256_srai_epi32(b, PK_RESIZE_BITS);
    c = _mm256_srai_epi32(c, PK_RESIZE_BITS);
    d = _mm256_srai_epi32(d, PK_RESIZE_BITS);
    /* per lane: a b c d as R G B 0 bytes; drop the zeros */
    __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    p = _mm256_shuffle_epi8(p, _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, z, z, z, z,
                                                0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, z, z, z, z));
    _mm_storeu_si128((__m128i *)(void *)d0, _mm256_castsi256_si128(p));
    _mm_storeu_si128((__m128i *)(void *)d1, _mm256_extracti128_si256(p, 1));
}

/* Outputs [0, a->nsimd) of source rows s0 and s0 + stride into d0 and d1
 * (stride 0 and d1 == d0 for a single row). Writes up to H_ROOM bytes past
 * each row's last pixel: d0, d1 are scratch rows with room after them.
 * Inlined with a constant `chunks` for the common tap counts, so the tap
 * loop unrolls. */
PK_AVX2 static inline __attribute__((always_inline)) void
h_body(const pk_axis *a, const uint8_t *s0, size_t stride, uint8_t *d0, uint8_t *d1,
       const uint32_t chunks)
{
    const size_t *off = a->off, *end = a->off + a->nsimd;
    const int16_t *w = a->wide;
    const size_t step = (size_t)chunks * CHUNK_I16;
    for (; off < end; off += GROUP, w += GROUP * step, d0 += 3 * GROUP, d1 += 3 * GROUP) {
        __m256i pa = h_two(s0 + off[0], stride, w, chunks);
        __m256i pb = h_two(s0 + off[1], stride, w + step, chunks);
        __m256i pc = h_two(s0 + off[2], stride, w + 2 * step, chunks);
        __m256i pd = h_two(s0 + off[3], stride, w + 3 * step, chunks);
        h_store(pa, pb, pc, pd, d0, d1);
    }
}

PK_AVX2 static void h_two_rows_avx2(const pk_axis *a, const uint8_t *s0, size_t stride, uint8_t *d0,
                                    uint8_t *d1)
{
    switch (a->chunks) { /* 1: up to 4 taps (downscale < 1.5), 2: up to 8 (< 3.5) */
    case 1: h_body(a, s0, stride, d0, d1, 1); break;
    case 2: h_body(a, s0, stride, d0, d1, 2); break;
    default: h_body(a, s0, stride, d0, d1, a->chunks); break;
    }
}

/* Bytes [0, bytes & ~31) of one output row: `pairs` pairs of source rows
 * (rows[2p], rows[2p + 1]) with weights w[p] (two int16 per 32-bit lane).
 * Inlined with a constant `pairs` for the common tap counts. */
PK_AVX2 static inline __attribute__((always_inline)) size_t
v_body(const uint8_t *const *rows, const __m256i *w, const uint32_t pairs, size_t bytes, uint8_t *dst)
{
    const __m256i zero = _mm256_setzero_si256(), half = _mm256_set1_epi32(HALF);
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
        a0 = _mm256_srai_epi32(a0, PK_RESIZE_BITS);
        a1 = _mm256_srai_epi32(a1, PK_RESIZE_BITS);
        a2 = _mm256_srai_epi32(a2, PK_RESIZE_BITS);
        a3 = _mm256_srai_epi32(a3, PK_RESIZE_BITS);
        __m256i out = _mm256_packus_epi16(_mm256_packs_epi32(a0, a1), _mm256_packs_epi32(a2, a3));
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), out);
    }
    return i;
}

/* Most row pairs the AVX2 vertical kernel takes (64 taps: a downscale by
 * about 32); beyond that the scalar kernel runs. */
#define V_PAIRS_MAX 32

/* Bytes [0, bytes & ~31) of one output row from rows[0 .. n) with weights
 * k; returns the bytes done. */
PK_AVX2 static size_t v_row_avx2(const uint8_t *const *rows, const int16_t *k, uint32_t n,
                                 size_t bytes, uint8_t *dst)
{
    uint32_t pairs = (n + 1) / 2;
    if (pairs > V_PAIRS_MAX) return 0;
    __m256i w[V_PAIRS_MAX];
    const uint8_t *pr[2 * V_PAIRS_MAX];
    for (uint32_t p = 0; p < pairs; p++) {
        /* an odd last row pairs with itself at weight zero */
        uint32_t t = 2 * p, u = t + 1 < n ? t + 1 : t;
        uint16_t kt = (uint16_t)k[t], ku = t + 1 < n ? (uint16_t)k[t + 1] : 0;
        w[p] = _mm256_set1_epi32((int32_t)((uint32_t)kt | ((uint32_t)ku << 16)));
        pr[t] = rows[t];
        pr[t + 1] = rows[u];
    }
    switch (pairs) {
    case 1: return v_body(pr, w, 1, bytes, dst);
    case 2: return v_body(pr, w, 2, bytes, dst);
    case 3: return v_body(pr, w, 3, bytes, dst);
    default: return v_body(pr, w, pairs, bytes, dst);
    }
}
#endif /* PK_HAVE_AVX2 */

/* ----------------------------------------------------------------- passes */

/* The horizontal pass over source rows [0, n) from src into scratch rows
 * `pitch` bytes apart at dst. pitch leaves H_ROOM bytes after each row:
 * two rows are written at once, so a row's overrun must not reach the next. */
static void h_pass(const pk_resizer *r, const pk_axis *a, const uint8_t *src, size_t stride,
                   uint32_t n, uint8_t *dst, size_t pitch)
{
    uint32_t done = 0;
    (void)r; /* unused without SIMD kernels */
#ifdef PK_HAVE_AVX2
    if (r->simd && a->nsimd) {
        uint32_t y = 0;
        for (; y + 2 <= n; y += 2)
            h_two_rows_avx2(a, src + y * stride, stride, dst + y * pitch, dst + (y + 1) * pitch);
        if (y < n) /* the odd row twice over */
            h_two_rows_avx2(a, src + y * stride, 0, dst + y * pitch, dst + y * pitch);
        done = a->nsimd;
    }
#endif
    if (done < a->count)
        for (uint32_t y = 0; y < n; y++) h_row_scalar(a, src + y * stride, dst + y * pitch, done, a->count);
}

static void v_row(pk_resizer *r, const uint8_t *const *rows, const int16_t *k, uint32_t n,
                  size_t bytes, uint8_t *dst)
{
    size_t done = 0;
#ifdef PK_HAVE_AVX2
    if (r->simd) done = v_row_avx2(rows, k, n, bytes, dst);
#endif
    if (done < bytes) v_row_scalar(rows, k, n, done, bytes, r->acc, dst);
}

/* Most taps any vertical output uses: sizes the row-pointer array. */
#define V_ROWS_ON_STACK 64

static int v_pass(pk_resizer *r, const pk_axis *a, const uint8_t *mid, size_t mid_stride,
                  uint32_t mid_row0, size_t bytes, uint8_t *dst, size_t dst_stride)
{
    const uint8_t *stack_rows[V_ROWS_ON_STACK];
    const uint8_t **rows = stack_rows;
    if (a->taps > V_ROWS_ON_STACK && !(rows = malloc(a->taps * sizeof *rows))) return -1;
    for (uint32_t j = 0; j < a->count; j++) {
        for (uint32_t t = 0; t < a->len[j]; t++)
            rows[t] = mid + (size_t)(a->start[j] + t - mid_row0) * mid_stride;
        v_row(r, rows, a->coef + (size_t)j * a->taps, a->len[j], bytes, dst + j * dst_stride);
    }
    if (rows != stack_rows) free(rows);
    return 0;
}

/* -------------------------------------------------------------- public API */

pk_resizer *pk_resizer_new(void)
{
    pk_resizer *r = calloc(1, sizeof *r);
    if (!r) return NULL;
#ifdef PK_HAVE_AVX2
    r->simd = __builtin_cpu_supports("avx2");
#endif
    return r;
}

void pk_resizer_free(pk_resizer *r)
{
    if (!r) return;
    for (int i = 0; i < AXIS_CACHE; i++) {
        free(r->h[i].mem);
        free(r->v[i].mem);
    }
    free(r->tmp);
    free(r->acc);
    free(r);
}

void pk_resizer_force_scalar(pk_resizer *r, int on)
{
    (void)on; /* unused without SIMD kernels */
    r->simd = 0;
#ifdef PK_HAVE_AVX2
    if (!on) r->simd = __builtin_cpu_supports("avx2");
#endif
}

/* Neither axis changes: copy the window. */
static void copy_window(const pk_rgb_view *src, const pk_rect *win, uint8_t *dst, size_t dst_stride)
{
    for (uint32_t j = 0; j < win->h; j++)
        memcpy(dst + j * dst_stride, src->data + (size_t)(win->y + j) * src->stride + 3 * (size_t)win->x,
               3 * (size_t)win->w);
}

int pk_resize(pk_resizer *r, const pk_rgb_view *src, uint64_t out_w, uint64_t out_h,
              const pk_rect *win, uint8_t *dst, size_t dst_stride)
{
    int need_h = out_w != src->w, need_v = out_h != src->h;
    size_t bytes = 3 * (size_t)win->w;
    const pk_axis *h = NULL, *v = NULL;
    if (!need_h && !need_v) {
        copy_window(src, win, dst, dst_stride);
        return 0;
    }
    if (need_v && (!(v = axis_get(r, r->v, src->h, out_h, win->y, win->h, 0)) ||
                   reserve((void **)&r->acc, &r->acc_cap, bytes * sizeof *r->acc) != 0))
        return -1;
    if (!need_h) /* vertical only: read the window's columns in place */
        return v_pass(r, v, src->data + 3 * (size_t)win->x, src->stride, 0, bytes, dst, dst_stride);
    if (!(h = axis_get(r, r->h, src->w, out_w, win->x, win->w, 1))) return -1;
    /* The horizontal pass covers the source rows the vertical pass reads
     * (or the window's rows when there is none) into scratch rows. */
    uint64_t row0 = v ? v->start[0] : win->y;
    uint64_t row1 = v ? v->start[v->count - 1] + v->len[v->count - 1] : win->y + win->h;
    size_t pitch = bytes + H_ROOM;
    if (reserve((void **)&r->tmp, &r->tmp_cap, (size_t)(row1 - row0) * pitch) != 0) return -1;
    h_pass(r, h, src->data + (size_t)row0 * src->stride, src->stride, (uint32_t)(row1 - row0), r->tmp,
           pitch);
    if (v) return v_pass(r, v, r->tmp, pitch, (uint32_t)row0, bytes, dst, dst_stride);
    for (uint32_t j = 0; j < win->h; j++) memcpy(dst + j * dst_stride, r->tmp + j * pitch, bytes);
    return 0;
}
