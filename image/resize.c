/* image/resize.c - Pillow's antialiased bilinear resampling, windowed.
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
 * A chroma axis stored at half resolution (stk__resize_ycc) gets the
 * composition of two linear filters: libjpeg's fancy upsampling (each full
 * sample 3/4 of its nearer chroma sample and 1/4 of the next nearest, edge
 * samples repeated) and the triangle above on the full axis. Its weights are
 * composed in double, then rounded like any other.
 *
 * The inner loops (scalar, and AVX2 picked once in stk__resizer_new) are in
 * resize_kernels.c; this file builds and caches the tables and runs the
 * passes.
 */
#include "resize_internal.h"
#include "ycc.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Most chunks the RGB horizontal SIMD kernel takes (64 taps: a downscale by
 * about 32). Its weight table is 16 times the plain one; past this the
 * scalar kernel runs, so that an absurd strip cannot blow up memory. */
#define H_CHUNKS_MAX 16
/* Weight tables kept per axis, in AXIS_SETS sets of AXIS_WAYS (a table's
 * key picks its set; the least recently used way of the set is rebuilt on
 * a miss). Real photo sets have a long tail of sizes, and a centre crop's
 * tables depend on both dimensions, each size needing a luma and a chroma
 * table per axis: a cache of 64 tables per axis missed most lookups on the
 * bench set, 1,024 far fewer (bench/README.md, "Weight-table cache"). Tables
 * are built on first use, so memory follows the sizes seen: about 12 KiB a horizontal and
 * 6 KiB a vertical plane table at --size 256, 18 MiB per thread for a full
 * cache. An RGB table of a large downscale is far bigger (4000 -> 256:
 * 150 KiB, its SIMD layout holding 4 taps per chunk and output), so the
 * cached tables' memory is held under AXIS_BUDGET: past it, the next resize
 * starts with an empty cache (never in the middle of one, whose tables are
 * in use). A resize adds at most 4 tables, so a thread holds at most the
 * budget and 4 tables. AXIS_SETS is a power of two (the set is a mask of the
 * key's hash); tests can fold every key into set 0, where keys that differ
 * in one field alone meet. */
#define AXIS_WAYS 8
#define AXIS_SETS 128
#define AXIS_CACHE (AXIS_WAYS * AXIS_SETS)
#define AXIS_BUDGET ((size_t)48 << 20)
_Static_assert(AXIS_WAYS >= 2, "stk__resize_ycc holds its luma tables while it looks up the chroma ones");
_Static_assert((AXIS_SETS & (AXIS_SETS - 1)) == 0, "the set is a mask of the hash");

/* A cached table's key, kept apart from the tables so that a lookup reads
 * one set's keys (8 x 56 bytes), not the tables' cache lines. */
typedef struct {
    uint64_t out, first, used; /* used: resizer tick of the last use */
    double b0, bext;           /* the source box: [b0, b0 + bext) of the axis */
    uint32_t in, full, count;  /* count 0: empty slot */
    uint8_t kind, layout, mirror;
} axis_key;

struct stk__resizer {
    int simd;     /* kernels: 0 scalar, 1 AVX2, 2 also AVX-512 (simd_level) */
    bool xlayout; /* the CPU has level 2: plane tables also carry the VBMI layout */
    uint64_t tick;
    stk__axis *h, *v; /* AXIS_CACHE tables per axis, set after set */
    axis_key *hk, *vk;
    size_t held;       /* bytes the cached tables hold (their mem's capacity) */
    size_t set_mask;   /* AXIS_SETS - 1; tests: 0 (one set) */
    unsigned test_bad; /* tests: every test_bad-th plane group runs scalar (0: off) */
    uint8_t *tmp;      /* horizontal pass output: the rows the vertical pass reads */
    size_t tmp_cap;
    int32_t *acc; /* scalar vertical accumulators, one per output byte */
    size_t acc_cap;
    int16_t *rows16; /* stk__resize_ycc: one output row per plane */
    size_t rows16_cap;
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
static void span(uint32_t in, double b0, double scale, double support, uint64_t i, uint32_t *lo, uint32_t *n)
{
    double center = b0 + ((double)i + 0.5) * scale;
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

/* The chroma span that a full-axis span [lo, lo + n) reads through fancy
 * upsampling of a 2:1 axis of `in` samples: each full sample j reads chroma
 * j / 2 and one neighbour. */
static void span2(uint32_t in, uint32_t lo, uint32_t n, uint32_t *clo, uint32_t *cn)
{
    uint32_t a = lo / 2, b = (lo + n - 1) / 2;
    a = a ? a - 1 : 0;
    b = b + 1 < in ? b + 1 : in - 1;
    *clo = a;
    *cn = b - a + 1;
}

/* Round normalised weights to fixed point summing to exactly STK_IMG_ONE. The
 * remainder (at most half a unit per tap) goes one unit at a time to the
 * non-zero taps from the heaviest onwards, so no tap changes by more than one
 * unit and none changes sign. */
static void quantise(const double *w, uint32_t n, int16_t *q)
{
    int32_t sum = 0;
    uint32_t top = 0;
    for (uint32_t t = 0; t < n; t++) {
        q[t] = (int16_t)(0.5 + w[t] * STK_IMG_ONE);
        sum += q[t];
        if (w[t] > w[top]) top = t;
    }
    int32_t diff = STK_IMG_ONE - sum;
    /* Each tap rounded by under half a unit, so |diff| is under half the
     * taps that may move and one pass settles it (two for safety). */
    for (uint32_t k = 0, t = top; diff != 0 && k < 2 * n; k++, t = t + 1 == n ? 0 : t + 1) {
        if (diff > 0 && w[t] > 0.0) {
            q[t]++;
            diff--;
        } /* outside the triangle stays out */
        else if (diff < 0 && q[t] > 0) {
            q[t]--;
            diff++;
        }
    }
}

/* The RGB horizontal SIMD layout: per output and chunk of taps (0..3), two
 * vectors of 16 int16, (w_0, w_1) and (w_2, w_3) for each of R, G, B, then
 * 0, 0; the same in both lanes, which hold two different rows. */
static void widen(stk__axis *a)
{
    for (uint32_t i = 0; i < a->nwide; i++) { /* the padding repeats the last output */
        const int16_t *q = a->coef + (size_t)(i < a->count ? i : a->count - 1) * a->taps;
        int16_t *v = a->wide + (size_t)i * a->chunks * STK_IMG_CHUNK_I16;
        for (uint32_t t = 0; t < 4 * a->chunks; t += 2, v += 16) {
            int16_t w0 = t < a->taps ? q[t] : 0, w1 = t + 1 < a->taps ? q[t + 1] : 0;
            const int16_t lane[8] = {w0, w1, w0, w1, w0, w1, 0, 0};
            memcpy(v, lane, sizeof lane);
            memcpy(v + 8, lane, sizeof lane);
        }
    }
}

/* The plane horizontal SIMD layout (resize_kernels.c): per group of 8
 * outputs and pair of taps p, a shuffle taking for each output q of a lane
 * the bytes (d_q + 2p, d_q + 2p + 1) of the lane's 16-byte load as 16-bit
 * values, d_q being the output's start less the lane's first start, and the
 * matching (w_2p, w_2p+1) pairs. A group whose taps reach past its loads
 * runs the scalar kernel. */
static void plane_layout(stk__axis *a)
{
    a->nbad = 0;
    for (uint32_t g = 0; g < a->ngroups; g++) {
        bool ok = true;
        for (uint32_t p = 0; p < a->pairs; p++) {
            uint8_t *m = a->gmask + ((size_t)g * a->pairs + p) * 32;
            int16_t *w = a->gw + ((size_t)g * a->pairs + p) * 16;
            for (uint32_t k = 0; k < STK_IMG_PGROUP; k++) {
                uint32_t i = g * STK_IMG_PGROUP + k, lane = k / 4, q = k % 4;
                uint32_t d = a->start[i] - a->start[g * STK_IMG_PGROUP + 4 * lane] + 2 * p;
                ok = ok && d + 1 < 16;
                const int16_t *c = a->coef + (size_t)i * a->taps;
                uint8_t *mq = m + 16 * lane + 4 * q;
                mq[0] = (uint8_t)(d & 15), mq[1] = 0x80, mq[2] = (uint8_t)((d + 1) & 15), mq[3] = 0x80;
                w[8 * lane + 2 * q] = 2 * p < a->taps ? c[2 * p] : 0;
                w[8 * lane + 2 * q + 1] = 2 * p + 1 < a->taps ? c[2 * p + 1] : 0;
            }
        }
        a->gok[g] = ok;
        a->nbad += !ok;
    }
}

/* The plane layout for AVX-512 VBMI (stk__h_plane_vbmi): per group of 16
 * outputs and pair of taps p, a permute taking for output q the bytes
 * (d_q + 2p, d_q + 2p + 1) of the group's 64-byte load into its two int16
 * slots (the odd bytes are zeroed by the kernel's mask), d_q being the
 * output's start less the group's first start, and the matching
 * (w_2p, w_2p+1) pairs; xload masks the load to the row's `in` bytes (a
 * masked load does not fault on the bytes it leaves out). */
static void plane_xlayout(stk__axis *a)
{
    a->nxbad = 0;
    for (uint32_t g = 0; g < a->nxgroups; g++) {
        uint32_t base = a->start[g * STK_IMG_XGROUP];
        bool ok = true;
        for (uint32_t p = 0; p < a->pairs; p++) {
            uint8_t *m = a->xperm + ((size_t)g * a->pairs + p) * STK_IMG_XLOAD;
            int16_t *w = a->xw + ((size_t)g * a->pairs + p) * 2 * STK_IMG_XGROUP;
            for (uint32_t q = 0; q < STK_IMG_XGROUP; q++) {
                uint32_t i = g * STK_IMG_XGROUP + q, d = a->start[i] - base + 2 * p;
                ok = ok && d + 1 < STK_IMG_XLOAD;
                const int16_t *c = a->coef + (size_t)i * a->taps;
                m[4 * q] = (uint8_t)(d & 63), m[4 * q + 1] = 0, m[4 * q + 2] = (uint8_t)((d + 1) & 63),
                      m[4 * q + 3] = 0;
                w[2 * q] = 2 * p < a->taps ? c[2 * p] : 0;
                w[2 * q + 1] = 2 * p + 1 < a->taps ? c[2 * p + 1] : 0;
            }
        }
        uint32_t room = a->in - base;
        a->xload[g] = room >= STK_IMG_XLOAD ? ~(uint64_t)0 : ((uint64_t)1 << room) - 1;
        a->xok[g] = ok;
        a->nxbad += !ok;
    }
}

/* Carve the table's arrays for count outputs of up to `taps` taps, and
 * `scratch` doubles, out of one allocation, largest alignment first. rgb,
 * plane: with that SIMD layout. */
static int axis_alloc(stk__axis *a, uint32_t count, uint32_t taps, uint32_t scratch, bool rgb, bool plane,
                      bool xl)
{
    uint32_t chunks = rgb ? (taps + STK_IMG_CHUNK_TAPS - 1) / STK_IMG_CHUNK_TAPS : 0;
    uint32_t nwide = (count + STK_IMG_GROUP - 1) / STK_IMG_GROUP * STK_IMG_GROUP; /* off and wide */
    uint32_t groups = plane ? count / STK_IMG_PGROUP : 0, pairs = (taps + 1) / 2;
    uint32_t xgroups = plane && xl ? count / STK_IMG_XGROUP : 0;
    size_t n_w = ((size_t)scratch * sizeof(double) + 63) & ~(size_t)63;
    size_t n_xp = (size_t)xgroups * pairs * STK_IMG_XLOAD,
           n_xw = (size_t)xgroups * pairs * 2 * STK_IMG_XGROUP * sizeof(int16_t);
    size_t n_xl = (size_t)xgroups * sizeof(uint64_t);
    size_t n_gm = (size_t)groups * pairs * 32, n_gw = (size_t)groups * pairs * 16 * sizeof(int16_t);
    size_t n_off = (size_t)nwide * sizeof(size_t);
    size_t n_wide = (size_t)nwide * chunks * STK_IMG_CHUNK_I16 * sizeof(int16_t);
    size_t n_idx = (size_t)count * sizeof(uint32_t);
    size_t n_coef = (size_t)count * taps * sizeof(int16_t);
    if (reserve(&a->mem, &a->cap,
                n_w + n_xp + n_xw + n_xl + n_gm + n_gw + n_off + n_wide + 2 * n_idx + n_coef + groups +
                    xgroups) != 0)
        return -1;
    char *m = (char *)a->mem + n_w;
    a->xperm = (uint8_t *)m;
    a->xw = (int16_t *)(void *)(m + n_xp);
    a->xload = (uint64_t *)(void *)(m + n_xp + n_xw);
    m += n_xp + n_xw + n_xl;
    a->gmask = (uint8_t *)m;
    a->gw = (int16_t *)(void *)(m + n_gm);
    a->off = (size_t *)(void *)(m + n_gm + n_gw);
    a->wide = (int16_t *)(void *)(m + n_gm + n_gw + n_off);
    a->start = (uint32_t *)(void *)(m + n_gm + n_gw + n_off + n_wide);
    a->len = a->start + count;
    a->coef = (int16_t *)(void *)(a->len + count);
    a->gok = (uint8_t *)(a->coef + (size_t)count * taps);
    a->xok = a->gok + groups;
    a->ngroups = groups;
    a->nxgroups = xgroups;
    a->pairs = pairs;
    return 0;
}

/* Normalised Pillow weights of output i (absolute index) of a full -> out
 * axis into w[0 .. *n), from source sample *lo. */
static void full_weights(uint32_t full, double b0, double scale, double support, uint64_t i, double *w,
                         uint32_t *lo, uint32_t *n)
{
    span(full, b0, scale, support, i, lo, n);
    double center = b0 + ((double)i + 0.5) * scale, ww = 0.0, ss = 1.0 / support;
    for (uint32_t t = 0; t < *n; t++) {
        w[t] = triangle(((double)(*lo + t) - center + 0.5) * ss);
        ww += w[t];
    }
    double norm = ww != 0.0 ? 1.0 / ww : 0.0;
    for (uint32_t t = 0; t < *n; t++) w[t] *= norm;
}

/* The output of the plain resize that table output i computes. */
static uint64_t axis_output(const stk__axis *a, uint32_t i)
{
    return a->mirror ? a->out - 1 - (a->first + i) : a->first + i;
}

/* Weights of table output i: Pillow's on the full axis (in scratch w, room
 * for `fmost`), composed with the fancy upsampling for a 2:1 axis (in
 * scratch after that); then fixed point. */
static void weights(stk__axis *a, uint32_t i, double scale, double support, uint32_t fmost)
{
    double *w = a->mem, *c = w + fmost;
    uint32_t lo, n;
    full_weights(a->full, a->b0, scale, support, axis_output(a, i), w, &lo, &n);
    if (a->kind != STK_IMG_AXIS_PLAIN) {
        memset(c, 0, a->len[i] * sizeof *c);
        for (uint32_t t = 0; t < n; t++) {
            uint32_t j = lo + t, c0 = j / 2;
            uint32_t nb = j % 2 == 0 ? (c0 ? c0 - 1 : 0) : (c0 + 1 < a->in ? c0 + 1 : a->in - 1);
            if (a->kind == STK_IMG_AXIS_BOX2) {
                c[c0 - a->start[i]] += w[t];
            } else {
                c[c0 - a->start[i]] += 0.75 * w[t];
                c[nb - a->start[i]] += 0.25 * w[t];
            }
        }
        w = c;
    }
    int16_t *q = a->coef + (size_t)i * a->taps;
    memset(q + a->len[i], 0, (a->taps - a->len[i]) * sizeof *q);
    quantise(w, a->len[i], q);
}

/* The RGB SIMD layout's bounds: how far past the row its loads reach
 * (over), and the whole groups whose loads stay inside it (tight0, tight1).
 * start[] rises (falls when mirrored), so the outputs that reach past the
 * row are a suffix (a prefix when mirrored). */
static void rgb_bounds(stk__axis *a)
{
    const size_t reach = 3 * (size_t)STK_IMG_CHUNK_TAPS * (a->chunks - 1) + STK_IMG_LOAD_BYTES,
                 row = 3 * (size_t)a->in;
    uint32_t fit = 0; /* outputs whose loads stay in the row */
    size_t most = 0;
    for (uint32_t i = 0; i < a->count; i++) {
        size_t end = a->off[i] + reach;
        fit += end <= row;
        if (end > most) most = end;
    }
    a->over = most > row ? (uint32_t)(most - row) : 0;
    if (!a->mirror) {
        a->tight0 = 0;
        a->tight1 = fit - fit % STK_IMG_GROUP;
    } else { /* the padding repeats the last output, which fits when any does */
        uint32_t first = a->count - fit;
        a->tight0 = (first + STK_IMG_GROUP - 1) / STK_IMG_GROUP * STK_IMG_GROUP;
        a->tight1 = fit ? a->nwide : a->tight0;
        if (a->tight0 > a->tight1) a->tight0 = a->tight1;
    }
}

/* Build the weights of outputs [first, first + count) of an axis resampled
 * from `in` samples (a `full`-sample axis, subsampled 2:1 for
 * STK_IMG_AXIS_FANCY2) to `out`, mirrored when asked (RGB layout only), with
 * the SIMD layout asked for where its limits allow. */
static int axis_build(stk__axis *a, uint32_t in, uint32_t full, double b0, double bext, int kind,
                      uint64_t out, uint64_t first, uint32_t count, int layout, bool mirror, bool xl)
{
    double scale = bext / (double)out;
    double support = scale < 1.0 ? 1.0 : scale; /* the triangle's radius is 1 */
    /* Pillow's bound on the taps of any output, and never more than full */
    double bound = ceil(support) * 2 + 1;
    uint32_t fmost = bound < (double)full ? (uint32_t)bound : full, most = fmost;
    if (kind != STK_IMG_AXIS_PLAIN) most = fmost / 2 + 3 < in ? fmost / 2 + 3 : in;
    bool rgb =
        layout == STK_IMG_LAYOUT_RGB && (most + STK_IMG_CHUNK_TAPS - 1) / STK_IMG_CHUNK_TAPS <= H_CHUNKS_MAX;
    bool plane = layout == STK_IMG_LAYOUT_PLANE && (most + 1) / 2 <= STK_IMG_PPAIRS_MAX;
    a->count = 0;
    if (axis_alloc(a, count, most, fmost + most, rgb, plane, xl) != 0) return -1;
    a->in = in;
    a->full = full;
    a->b0 = b0;
    a->bext = bext;
    a->kind = (uint8_t)kind;
    a->layout = (uint8_t)layout; /* as asked: the key */
    a->mirror = mirror;
    a->out = out;
    a->first = first;
    a->count = count; /* axis_output reads it */
    a->taps = 1;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t lo, n;
        span(full, b0, scale, support, axis_output(a, i), &lo, &n);
        if (kind != STK_IMG_AXIS_PLAIN) span2(in, lo, n, &lo, &n);
        a->start[i] = lo;
        a->len[i] = n;
        a->off[i] = 3 * (size_t)lo;
        if (n > a->taps) a->taps = n;
    }
    for (uint32_t i = 0; i < count; i++) weights(a, i, scale, support, fmost);
    a->nwide = a->over = a->tight0 = a->tight1 = 0;
    if (rgb) {
        a->chunks = (a->taps + STK_IMG_CHUNK_TAPS - 1) / STK_IMG_CHUNK_TAPS;
        a->nwide = (count + STK_IMG_GROUP - 1) / STK_IMG_GROUP * STK_IMG_GROUP;
        for (uint32_t i = count; i < a->nwide; i++) a->off[i] = a->off[count - 1];
        widen(a);
        rgb_bounds(a);
    }
    if (plane) {
        a->pairs = (a->taps + 1) / 2;
        plane_layout(a);
        plane_xlayout(a);
    }
    return 0;
}

/* Tests: make every k-th group of a plane table (from the first) run the
 * scalar kernel, a path real tables reach only at extreme scales. */
static void test_disqualify(stk__axis *a, unsigned k)
{
    for (uint32_t g = 0; g < a->ngroups; g += k)
        if (a->gok[g]) a->gok[g] = 0, a->nbad++;
    for (uint32_t g = 0; g < a->nxgroups; g += k)
        if (a->xok[g]) a->xok[g] = 0, a->nxbad++;
}

/* The set a key belongs to: a multiplicative hash of its fields. */
static size_t axis_set(const stk__resizer *r, uint32_t in, uint32_t full, int kind, uint64_t out,
                       uint64_t first, uint32_t count, int layout, bool mirror)
{
    uint64_t x = (uint64_t)in * 0x9e3779b97f4a7c15u;
    x = (x ^ full ^ (uint64_t)kind << 32 ^ (uint64_t)layout << 40 ^ (uint64_t)mirror << 48) *
        0xff51afd7ed558ccdu;
    x = (x ^ out) * 0xc4ceb9fe1a85ec53u;
    x = (x ^ first ^ (uint64_t)count << 32) * 0x9e3779b97f4a7c15u;
    return (size_t)(x >> 32) & r->set_mask;
}

/* The table for this key from the cache (slots/keys: r->h/hk or r->v/vk),
 * built on a miss in the least recently used way of its set. NULL when out
 * of memory. */
static const stk__axis *axis_get(stk__resizer *r, int vertical, uint32_t in, uint32_t full, double b0,
                                 double bext, int kind, uint64_t out, uint64_t first, uint32_t count,
                                 int layout, bool mirror)
{
    size_t base = axis_set(r, in, full, kind, out, first, count, layout, mirror) * AXIS_WAYS;
    stk__axis *slots = (vertical ? r->v : r->h) + base;
    axis_key *keys = (vertical ? r->vk : r->hk) + base;
    size_t victim = 0;
    r->tick++;
    for (size_t i = 0; i < AXIS_WAYS; i++) {
        axis_key *k = &keys[i];
        if (k->count == count && k->in == in && k->full == full && k->kind == kind && k->out == out &&
            k->first == first && k->layout == layout && k->mirror == mirror && k->b0 == b0 &&
            k->bext == bext) {
            k->used = r->tick;
            return &slots[i];
        }
        if (k->used < keys[victim].used) victim = i;
    }
    keys[victim].count = 0;
    stk__axis *a = &slots[victim];
    r->held -= a->cap;
    int rc = axis_build(a, in, full, b0, bext, kind, out, first, count, layout, mirror, r->xlayout);
    r->held += a->cap;
    if (rc != 0) return NULL;
    if (r->test_bad && (a->ngroups || a->nxgroups)) test_disqualify(a, r->test_bad);
    keys[victim] = (axis_key){out,           first,           r->tick,        b0, bext, in, full, count,
                              (uint8_t)kind, (uint8_t)layout, (uint8_t)mirror};
    return a;
}

/* Free every cached table and leave the cache empty (arrays that a failed
 * stk__resizer_new left NULL are skipped). */
static void axis_free_all(stk__resizer *r)
{
    for (size_t i = 0; i < AXIS_CACHE; i++) {
        if (r->h) free(r->h[i].mem), r->h[i] = (stk__axis){0};
        if (r->v) free(r->v[i].mem), r->v[i] = (stk__axis){0};
        if (r->hk) r->hk[i].count = 0;
        if (r->vk) r->vk[i].count = 0;
    }
    r->held = 0;
}

/* Empty the cache when its tables hold more than the budget (at the start
 * of a resize: no table is in use then). */
static void axis_trim(stk__resizer *r)
{
    if (r->held > AXIS_BUDGET) axis_free_all(r);
}

/* ----------------------------------------------------------------- passes */

/* One source row (or two: stride 0 for one) by SIMD over outputs [from, to)
 * and scalar over the rest. */
static void h_rows(const stk__axis *a, const uint8_t *s, size_t stride, uint8_t *d0, uint8_t *d1,
                   uint32_t from, uint32_t to)
{
#ifdef STOKER_HAVE_AVX2
    if (from < to) stk__h_rgb_avx2(a, s, stride, d0, d1, from, to);
#else
    from = to = 0;
#endif
    uint32_t end = to < a->count ? to : a->count;
    for (int k = 0; k < (d1 != d0 ? 2 : 1); k++) {
        stk__h_row_scalar(a, s + k * stride, k ? d1 : d0, 0, from < a->count ? from : a->count);
        if (end < a->count) stk__h_row_scalar(a, s + k * stride, k ? d1 : d0, end, a->count);
    }
}

/* The RGB horizontal pass over source rows [0, n) from src into scratch rows
 * `pitch` bytes apart at dst; `room` bytes are readable after row n - 1's
 * last pixel. pitch leaves STK_IMG_H_ROOM bytes after each row: two rows are
 * written at once, so a row's overrun must not reach the next. The SIMD
 * kernel reads up to a->over bytes past a row: every row but the last has
 * the next one after it (stride bytes); where that is too little, the
 * outputs whose loads would leave the row run scalar. */
static void h_pass(const stk__resizer *r, const stk__axis *a, const uint8_t *src, size_t stride, uint32_t n,
                   size_t room, uint8_t *dst, size_t pitch)
{
    uint32_t all = r->simd ? a->nwide : 0, t0 = r->simd ? a->tight0 : 0, t1 = r->simd ? a->tight1 : 0;
    int inner = stride >= a->over, last = room >= a->over && inner;
    uint32_t y = 0;
    for (; y + 2 <= n; y += 2) {
        int wide = inner && (y + 2 < n || last);
        h_rows(a, src + y * stride, stride, dst + y * pitch, dst + (y + 1) * pitch, wide ? 0 : t0,
               wide ? all : t1);
    }
    if (y < n) /* the odd row on its own */
        h_rows(a, src + y * stride, 0, dst + y * pitch, dst + y * pitch, last ? 0 : t0, last ? all : t1);
}

/* The same for one plane, into int16 rows `pitch` values apart: the
 * qualifying groups by SIMD (the VBMI layout's groups of 16 where the
 * resizer runs level 2 and the table has them, else the AVX2 layout's of
 * 8), the groups that do not qualify and the outputs after the last group
 * scalar. */
static void h_pass_plane(const stk__resizer *r, const stk__axis *a, const uint8_t *src, size_t stride,
                         uint32_t n, int16_t *dst, size_t pitch)
{
    void (*kernel)(const stk__axis *, const uint8_t *, int16_t *) = NULL;
    const uint8_t *ok = NULL;
    uint32_t groups = 0, size = 0, bad = 0;
#ifdef STOKER_HAVE_AVX2
    if (r->simd >= 2 && a->nxgroups)
        kernel = stk__h_plane_vbmi, ok = a->xok, groups = a->nxgroups, size = STK_IMG_XGROUP, bad = a->nxbad;
    else if (r->simd && a->ngroups)
        kernel = stk__h_plane_avx2, ok = a->gok, groups = a->ngroups, size = STK_IMG_PGROUP, bad = a->nbad;
#else
    (void)r;
#endif
    for (uint32_t y = 0; y < n; y++) {
        const uint8_t *s = src + (size_t)y * stride;
        int16_t *d = dst + (size_t)y * pitch;
        if (kernel) kernel(a, s, d);
        for (uint32_t g = 0; bad && g < groups; g++)
            if (!ok[g]) stk__h_plane_scalar(a, s, d, g * size, (g + 1) * size);
        stk__h_plane_scalar(a, s, d, groups * size, a->count);
    }
}

static void v_row(stk__resizer *r, const uint8_t *const *rows, const int16_t *k, uint32_t n, size_t bytes,
                  uint8_t *dst)
{
    size_t done = 0;
#ifdef STOKER_HAVE_AVX2
    if (r->simd) done = stk__v_row_avx2(rows, k, n, bytes, dst);
#endif
    if (done < bytes) stk__v_row_scalar(rows, k, n, done, bytes, r->acc, dst);
}

static void v_row16(stk__resizer *r, const int16_t *const *rows, const int16_t *k, uint32_t n, size_t count,
                    int16_t *dst)
{
    size_t done = 0;
#ifdef STOKER_HAVE_AVX2
    if (r->simd >= 2) done = stk__v_row16_avx512(rows, k, n, count, dst);
    else if (r->simd) done = stk__v_row16_avx2(rows, k, n, count, dst);
#endif
    if (done < count) stk__v_row16_scalar(rows, k, n, done, count, r->acc, dst);
}

/* Most taps any vertical output uses: sizes the row-pointer array. */
#define V_ROWS_ON_STACK 64

/* Row pointers of vertical output j into mid (rows from mid_row0 on). */
static void v_rows(const stk__axis *a, uint32_t j, const uint8_t *mid, size_t mid_stride, uint32_t mid_row0,
                   const uint8_t **rows)
{
    for (uint32_t t = 0; t < a->len[j]; t++)
        rows[t] = mid + (size_t)(a->start[j] + t - mid_row0) * mid_stride;
}

static int v_pass(stk__resizer *r, const stk__axis *a, const uint8_t *mid, size_t mid_stride,
                  uint32_t mid_row0, size_t bytes, uint8_t *dst, size_t dst_stride)
{
    const uint8_t *stack_rows[V_ROWS_ON_STACK];
    const uint8_t **rows = stack_rows;
    if (a->taps > V_ROWS_ON_STACK && !(rows = malloc(a->taps * sizeof *rows))) return -1;
    for (uint32_t j = 0; j < a->count; j++) {
        v_rows(a, j, mid, mid_stride, mid_row0, rows);
        v_row(r, rows, a->coef + (size_t)j * a->taps, a->len[j], bytes, dst + j * dst_stride);
    }
    if (rows != stack_rows) free(rows);
    return 0;
}

/* -------------------------------------------------------------- public API */

#ifdef STOKER_HAVE_AVX2
/* 0: scalar kernels; 1: AVX2; 2: AVX2, and AVX-512 (BW, VBMI) where a kernel has it.
 * AVX-512 only where the CPU also has VBMI (Ice Lake, Sapphire Rapids, Zen 4
 * and later): on Skylake-SP and Cascade Lake, which lack it, 512-bit
 * multiplies lower the core's clock for everything around them, TurboJPEG's
 * AVX2 decode included, which would cost more than the kernels save. */
static int simd_level(void)
{
    if (!__builtin_cpu_supports("avx2")) return 0;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vbmi")
               ? 2
               : 1;
}
#endif

stk__resizer *stk__resizer_new(void)
{
    stk__resizer *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->h = calloc(AXIS_CACHE, sizeof *r->h);
    r->v = calloc(AXIS_CACHE, sizeof *r->v);
    r->hk = calloc(AXIS_CACHE, sizeof *r->hk);
    r->vk = calloc(AXIS_CACHE, sizeof *r->vk);
    r->set_mask = AXIS_SETS - 1;
    if (!r->h || !r->v || !r->hk || !r->vk) {
        stk__resizer_free(r);
        return NULL;
    }
#ifdef STOKER_HAVE_AVX2
    r->simd = simd_level();
    r->xlayout = r->simd == 2;
#endif
    return r;
}

void stk__resizer_free(stk__resizer *r)
{
    if (!r) return;
    axis_free_all(r);
    free(r->h);
    free(r->v);
    free(r->hk);
    free(r->vk);
    free(r->tmp);
    free(r->acc);
    free(r->rows16);
    free(r);
}

void stk__resizer_force_scalar(stk__resizer *r, int on) { stk__resizer_test_simd(r, on ? 0 : 2); }

void stk__resizer_test_bad_groups(stk__resizer *r, unsigned every) { r->test_bad = every; }

void stk__resizer_test_one_set(stk__resizer *r) { r->set_mask = 0; }

/* Kernels of at most `level` as far as the CPU has them (the one place
 * r->simd is set after stk__resizer_new). */
int stk__resizer_test_simd(stk__resizer *r, int level)
{
    int have = 0;
#ifdef STOKER_HAVE_AVX2
    have = simd_level();
#endif
    r->simd = level < have ? level : have;
    return r->simd;
}

size_t stk__resizer_held(const stk__resizer *r) { return r->held; }

/* Neither axis changes: copy the window. */
static void copy_window(const stk__rgb_view *src, const stk__rect *win, uint8_t *dst, size_t dst_stride)
{
    for (uint32_t j = 0; j < win->h; j++)
        memcpy(dst + j * dst_stride, src->data + (size_t)(win->y + j) * src->stride + 3 * (size_t)win->x,
               3 * (size_t)win->w);
}

/* stk__resize and stk__resize_box: the source box [bx, bx + bw) x [by, by +
 * bh) of src resampled to out_w x out_h (the whole src for the plain one). */
static int resize_box(stk__resizer *r, const stk__rgb_view *src, double bx, double by, double bw, double bh,
                      uint64_t out_w, uint64_t out_h, const stk__rect *win, int mirror, uint8_t *dst,
                      size_t dst_stride)
{
    bool whole_w = bx == 0.0 && bw == (double)src->w, whole_h = by == 0.0 && bh == (double)src->h;
    /* a mirrored axis is filtered even at its own size: an identity table
     * (one tap of weight one per output) copies it, reversed */
    int need_h = out_w != src->w || mirror || !whole_w, need_v = out_h != src->h || !whole_h;
    size_t bytes = 3 * (size_t)win->w;
    const stk__axis *h = NULL, *v = NULL;
    axis_trim(r);
    if (!need_h && !need_v) {
        copy_window(src, win, dst, dst_stride);
        return 0;
    }
    if (need_v && (!(v = axis_get(r, 1, src->h, src->h, by, bh, STK_IMG_AXIS_PLAIN, out_h, win->y, win->h,
                                  STK_IMG_LAYOUT_NONE, false)) ||
                   reserve((void **)&r->acc, &r->acc_cap, bytes * sizeof *r->acc) != 0))
        return -1;
    if (!need_h) /* vertical only: read the window's columns in place */
        return v_pass(r, v, src->data + 3 * (size_t)win->x, src->stride, 0, bytes, dst, dst_stride);
    if (!(h = axis_get(r, 0, src->w, src->w, bx, bw, STK_IMG_AXIS_PLAIN, out_w, win->x, win->w,
                       STK_IMG_LAYOUT_RGB, mirror != 0)))
        return -1;
    /* The horizontal pass covers the source rows the vertical pass reads
     * (or the window's rows when there is none) into scratch rows. */
    uint64_t row0 = v ? v->start[0] : win->y;
    uint64_t row1 = v ? v->start[v->count - 1] + v->len[v->count - 1] : win->y + win->h;
    size_t pitch = bytes + STK_IMG_H_ROOM;
    if (reserve((void **)&r->tmp, &r->tmp_cap, (size_t)(row1 - row0) * pitch) != 0) return -1;
    size_t room = row1 < src->h ? src->stride : src->room; /* after the last row read */
    h_pass(r, h, src->data + (size_t)row0 * src->stride, src->stride, (uint32_t)(row1 - row0), room, r->tmp,
           pitch);
    if (v) return v_pass(r, v, r->tmp, pitch, (uint32_t)row0, bytes, dst, dst_stride);
    for (uint32_t j = 0; j < win->h; j++) memcpy(dst + j * dst_stride, r->tmp + j * pitch, bytes);
    return 0;
}

int stk__resize(stk__resizer *r, const stk__rgb_view *src, uint64_t out_w, uint64_t out_h,
                const stk__rect *win, int mirror, uint8_t *dst, size_t dst_stride)
{
    return resize_box(r, src, 0.0, 0.0, (double)src->w, (double)src->h, out_w, out_h, win, mirror, dst,
                      dst_stride);
}

int stk__resize_box(stk__resizer *r, const stk__rgb_view *src, double bx, double by, double bw, double bh,
                    uint64_t out_w, uint64_t out_h, const stk__rect *win, int mirror, uint8_t *dst,
                    size_t dst_stride)
{
    return resize_box(r, src, bx, by, bw, bh, out_w, out_h, win, mirror, dst, dst_stride);
}

/* The tables of plane p of src (chroma planes share theirs). libjpeg
 * upsamples 2:1 chroma with its triangle, but for chroma at most two samples
 * wide it repeats samples instead (jdsample.c: h2v1 and h2v2 "fancy" only
 * when downsampled_width > 2; h1v2 always): so do the tables. */
static int ycc_tables(stk__resizer *r, const stk__ycc_view *src, unsigned p, uint64_t out_w, uint64_t out_h,
                      const stk__rect *win, const stk__axis **h, const stk__axis **v)
{
    bool sx = p && src->sub_x == 2, sy = p && src->sub_y == 2;
    uint32_t in_w = sx ? (src->w + 1) / 2 : src->w, in_h = sy ? (src->h + 1) / 2 : src->h;
    int narrow = sx && in_w <= 2;
    int kx = !sx ? STK_IMG_AXIS_PLAIN : narrow ? STK_IMG_AXIS_BOX2 : STK_IMG_AXIS_FANCY2;
    int ky = !sy ? STK_IMG_AXIS_PLAIN : narrow ? STK_IMG_AXIS_BOX2 : STK_IMG_AXIS_FANCY2;
    *h = axis_get(r, 0, in_w, src->w, 0.0, (double)src->w, kx, out_w, win->x, win->w, STK_IMG_LAYOUT_PLANE,
                  false);
    *v = *h ? axis_get(r, 1, in_h, src->h, 0.0, (double)src->h, ky, out_h, win->y, win->h,
                       STK_IMG_LAYOUT_NONE, false)
            : NULL;
    return *v ? 0 : -1;
}

/* One plane's horizontal pass, run lazily: source rows go through the
 * horizontal filter only when the vertical pass first needs them, into a
 * ring of rows (a power of two, at least the most taps of any vertical
 * output, so that a row's place is a mask, not a division). The
 * vertical pass's rows never reach back further than that (its spans only
 * move forward), so the intermediate image is a few rows in L1, not a
 * third of a megabyte through L2. */
typedef struct {
    const stk__axis *h, *v;
    const uint8_t *src;
    size_t stride;
    int16_t *ring;
    uint32_t mask, next; /* mask: ring rows - 1; next: the first source row not yet filtered */
} plane_run;

static void plane_rows(const stk__resizer *r, plane_run *pr, uint32_t j, size_t pitch, const int16_t **rows)
{
    uint32_t end = pr->v->start[j] + pr->v->len[j];
    if (pr->next < pr->v->start[j]) pr->next = pr->v->start[j]; /* rows no output reads */
    for (; pr->next < end; pr->next++)
        h_pass_plane(r, pr->h, pr->src + (size_t)pr->next * pr->stride, pr->stride, 1,
                     pr->ring + (size_t)(pr->next & pr->mask) * pitch, pitch);
    for (uint32_t t = 0, at = pr->v->start[j]; t < pr->v->len[j]; t++, at++)
        rows[t] = pr->ring + (size_t)(at & pr->mask) * pitch;
}

int stk__resize_ycc(stk__resizer *r, const stk__ycc_view *src, uint64_t out_w, uint64_t out_h,
                    const stk__rect *win, uint8_t *dst, size_t dst_stride)
{
    const unsigned np = src->data[1] ? 3 : 1;
    plane_run pr[3];
    /* int16 rows of whole 32-byte vectors */
    size_t pitch = ((size_t)win->w + 15) & ~(size_t)15, rows = 0;
    uint32_t most = 0;
    axis_trim(r);
    for (unsigned p = 0; p < np; p++) {
        if (p == 2) pr[2].h = pr[1].h, pr[2].v = pr[1].v;
        else if (ycc_tables(r, src, p, out_w, out_h, win, &pr[p].h, &pr[p].v) != 0) return -1;
        pr[p].src = src->data[p];
        pr[p].stride = src->stride[p];
        uint32_t nring = 1;
        while (nring < pr[p].v->taps) nring *= 2;
        pr[p].mask = nring - 1;
        pr[p].next = 0;
        rows += nring;
        most = pr[p].v->taps > most ? pr[p].v->taps : most;
    }
    if (reserve((void **)&r->tmp, &r->tmp_cap, rows * pitch * sizeof(int16_t)) != 0 ||
        reserve((void **)&r->acc, &r->acc_cap, pitch * sizeof *r->acc) != 0 ||
        reserve((void **)&r->rows16, &r->rows16_cap, 3 * pitch * sizeof *r->rows16) != 0)
        return -1;
    for (unsigned p = 0, at = 0; p < np; at += pr[p].mask + 1, p++)
        pr[p].ring = (int16_t *)(void *)r->tmp + (size_t)at * pitch;
    const int16_t *stack_rows[V_ROWS_ON_STACK];
    const int16_t **rp = stack_rows;
    if (most > V_ROWS_ON_STACK && !(rp = malloc(most * sizeof *rp))) return -1;
    int16_t *row[3] = {r->rows16, r->rows16 + pitch, r->rows16 + 2 * pitch};
    /* One output row of every plane at a time, converted at once while the
     * three rows are in L1. */
    for (uint32_t j = 0; j < win->h; j++) {
        for (unsigned p = 0; p < np; p++) {
            plane_rows(r, &pr[p], j, pitch, rp);
            v_row16(r, rp, pr[p].v->coef + (size_t)j * pr[p].v->taps, pr[p].v->len[j], win->w, row[p]);
        }
        stk__ycc_row(r->simd, row[0], np == 3 ? row[1] : NULL, np == 3 ? row[2] : NULL, dst + j * dst_stride,
                     win->w);
    }
    if (rp != stack_rows) free(rp);
    return 0;
}
