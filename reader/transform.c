/* reader/transform.c - the image transform's parameters and its CPU
 * implementation.
 *
 * Crop boxes are torchvision's RandomResizedCrop.get_params
 * (image/geometry.c), drawn from a SplitMix64 stream keyed by (seed, epoch,
 * record) instead of a global RNG, so a record gets the same box in the same epoch on any
 * rank, thread or device. The pixel math here is the CUDA kernel's, line for
 * line (transform_cuda.cu): half-pixel centres, edge clamping inside the box,
 * bilinear weights in f32, then (v / 255 - mean) / std. */
#include "abi_v0.h"
#include "device.h"
#include "image.h"
#include "order.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define TAG_AUGMENT 0x73746b2d61756731ULL /* "stk-aug1" */

static void transform_defaults(stk_transform *t)
{
    memset(t, 0, sizeof *t);
    t->dtype = STK_DT_F32;
    t->layout = STK_IMAGE_NCHW;
    for (int c = 0; c < 4; c++) t->std[c] = 1;
    t->crop = STK_CROP_NONE;
    t->scale_min = 0.08f;
    t->scale_max = 1.0f;
    t->ratio_min = 3.0f / 4.0f;
    t->ratio_max = 4.0f / 3.0f;
}

void stk_transform_init_sized(stk_transform *t, size_t size)
{
    stk_transform d;
    transform_defaults(&d);
    if (t) stk__write_sized(t, size, &d, sizeof d);
}

void stk_transform_imagenet_sized(stk_transform *t, size_t size, int train, uint32_t out_size)
{
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    stk_transform d;
    transform_defaults(&d);
    for (int c = 0; c < 3; c++) {
        d.mean[c] = mean[c];
        d.std[c] = std[c];
    }
    d.crop = train ? STK_CROP_RANDOM_RESIZED : STK_CROP_CENTER;
    d.out_height = d.out_width = out_size;
    d.flip_prob = train ? 0.5f : 0.0f;
    if (t) stk__write_sized(t, size, &d, sizeof d);
}

uint64_t stk__xform_out_bytes(const stk_transform *t, uint32_t C)
{
    return (uint64_t)t->out_height * t->out_width * C * stk_dtype_size(t->dtype);
}

typedef struct {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r)
{
    r->s += 0x9e3779b97f4a7c15ULL;
    return stk__mix64(r->s);
}

static uint64_t rng_draw(void *state) { return rng_next(state); }

void stk__xform_box(const stk_transform *t, uint32_t H, uint32_t W, uint64_t seed, uint64_t epoch,
                    uint64_t record, stk__crop_box *box)
{
    memset(box, 0, sizeof *box);
    rng r = {stk__mix64(stk__order_key(seed, epoch, TAG_AUGMENT) ^ stk__mix64(record + 1))};
    const stk__img_rng draw = {rng_draw, &r};
    uint32_t oh = t->out_height ? t->out_height : H, ow = t->out_width ? t->out_width : W;
    switch (t->crop) {
    case STK_CROP_RANDOM_RESIZED: {
        stk__img_box b;
        stk__img_rrc_box(H, W, t->scale_min, t->scale_max, t->ratio_min, t->ratio_max, &draw, &b);
        *box = (stk__crop_box){b.x0, b.y0, b.w, b.h, 0, {0, 0, 0}};
        break;
    }
    case STK_CROP_CENTER:
        box->h = (int32_t)(oh < H ? oh : H);
        box->w = (int32_t)(ow < W ? ow : W);
        box->y0 = ((int32_t)H - box->h) / 2;
        box->x0 = ((int32_t)W - box->w) / 2;
        break;
    default:
        box->w = (int32_t)W;
        box->h = (int32_t)H;
        break;
    }
    box->flip = t->flip_prob > 0 && stk__img_uniform(&draw, 0, 1) < t->flip_prob;
}

void stk__xform_load_box(const stk_transform *t, int own_size, uint32_t H, uint32_t W,
                         const stk__crop_box *drawn, stk_crop_box *box)
{
    memset(box, 0, sizeof *box);
    box->x0 = drawn->x0;
    box->y0 = drawn->y0;
    box->w = drawn->w;
    box->h = drawn->h;
    box->flip = drawn->flip;
    if (own_size && t->crop == STK_CROP_CENTER) /* Resize(round(S / 0.875)) + CenterCrop(S) */
        stk__img_eval_box(t->out_width, t->out_height, W, H, &box->x0, &box->y0, &box->w, &box->h);
}

int stk__xform_check(const stk_transform *t, stk_error *err)
{
    if (t->crop < STK_CROP_NONE || t->crop > STK_CROP_RANDOM_RESIZED)
        return stk_error_set(err, STK_E_ARG, "transform: crop %d unknown", t->crop);
    if (t->crop == STK_CROP_RANDOM_RESIZED &&
        !(t->scale_min > 0 && t->scale_min <= t->scale_max && t->scale_max <= 1 && t->ratio_min > 0 &&
          t->ratio_min <= t->ratio_max))
        return stk_error_set(err, STK_E_ARG,
                             "transform: random-resized crop needs 0 < scale_min <= scale_max <= 1 "
                             "and 0 < ratio_min <= ratio_max");
    if (!(t->flip_prob >= 0 && t->flip_prob <= 1))
        return stk_error_set(err, STK_E_ARG, "transform: flip_prob must be in [0, 1]");
    return STK_OK;
}

int stk_transform_crop_box_sized(const stk_transform *transform, size_t transform_size, int own_size,
                                 uint64_t seed, uint64_t epoch, uint64_t record, uint32_t height,
                                 uint32_t width, stk_crop_box *box, size_t box_size, stk_error *err)
{
    if (!transform || !box) return stk_error_set(err, STK_E_ARG, "crop box: no transform or no box given");
    stk_transform t;
    transform_defaults(&t);
    int rc = stk__read_sized(&t, sizeof t, transform, transform_size, STK__TRANSFORM_MIN_SIZE,
                             "stk_transform", err);
    if (rc || (rc = stk__xform_check(&t, err))) return rc;
    if (height < 1 || width < 1 || height > 65535 || width > 65535)
        return stk_error_set(err, STK_E_ARG, "crop box: a %ux%u image cannot be cropped (sides 1 .. 65535)",
                             width, height);
    if (t.out_height > 65535 || t.out_width > 65535 || (own_size && (!t.out_height || !t.out_width)))
        return stk_error_set(err, STK_E_ARG,
                             "crop box: the output size (out_height and out_width) must be 1 .. 65535, and "
                             "given for images of their own size");
    stk__crop_box drawn;
    stk_crop_box b;
    stk__xform_box(&t, height, width, seed, epoch, record, &drawn);
    stk__xform_load_box(&t, own_size, height, width, &drawn, &b);
    stk__write_sized(box, box_size, &b, sizeof b);
    return STK_OK;
}

/* f32 -> IEEE half, round to nearest even (what __float2half_rn does). */
static uint16_t to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
    if (e == 0xff) return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
    int32_t ne = (int32_t)e - 127 + 15;
    if (ne >= 31) return (uint16_t)(sign | 0x7c00);
    if (ne <= 0) { /* subnormal half (or zero) */
        if (ne < -10) return (uint16_t)sign;
        m |= 0x800000;
        uint32_t shift = (uint32_t)(14 - ne), half = m >> shift, rem = m & ((1u << shift) - 1),
                 mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)ne << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++; /* may carry into the exponent: correct */
    return (uint16_t)half;
}

/* f32 -> bfloat16, round to nearest even (what __float2bfloat16_rn does). */
static uint16_t to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7f800000) == 0x7f800000 && (x & 0x7fffff)) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static void store(void *dst, uint64_t i, int dtype, float v)
{
    if (dtype == STK_DT_F32) ((float *)dst)[i] = v;
    else if (dtype == STK_DT_F16) ((uint16_t *)dst)[i] = to_f16(v);
    else ((uint16_t *)dst)[i] = to_bf16(v);
}

/* Where output column ox samples its box: byte offsets of columns x0, x1
 * (relative to the box) and the weights. */
typedef struct {
    uint32_t x0, x1;
    float fx, gx;
} xcol;

#define XCOLS 256 /* output columns per table: 4 KiB on the stack */

/* Output columns [ox0, ox0 + n) of box b. */
static void xform_cols(const stk__xform_job *j, const stk__crop_box *b, uint32_t ox0, uint32_t n, xcol *cols)
{
    float sx_scale = (float)b->w / (float)j->out_w;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t ox = ox0 + k, xs = b->flip ? j->out_w - 1 - ox : ox;
        float sx = ((float)xs + 0.5f) * sx_scale - 0.5f;
        sx = sx < 0 ? 0 : sx > (float)(b->w - 1) ? (float)(b->w - 1) : sx;
        int32_t x0 = (int32_t)sx, x1 = x0 + 1 < b->w ? x0 + 1 : x0;
        cols[k].fx = sx - (float)x0;
        cols[k].gx = 1.0f - cols[k].fx;
        cols[k].x0 = (uint32_t)x0 * j->C;
        cols[k].x1 = (uint32_t)x1 * j->C;
    }
}

/* (v / 255 - mean) / std is computed everywhere as one fused multiply-add
 * per value, fmaf(v, scale, shift): one rounding instead of the three of
 * (v * (1 / 255) - mean) * inv and a third of the floating-point work (what
 * the f32 output costs on top of the u8 crop). The host reference below, the
 * workers' scalar table and SIMD code and the CUDA kernel (__fmaf_rn, the
 * same coefficients) all round it once, correctly, so their bytes agree. */
static void norm_coef(const stk__xform_job *j, uint32_t c, float *scale, float *shift)
{
    *scale = j->inv_std[c] * (1.0f / 255.0f);
    *shift = -j->mean[c] * j->inv_std[c];
}

/* Samples [n0, n1) of the job. The arithmetic is the CUDA kernel's, term for
 * term (this file is built without contraction, so the loop order changes no
 * result); hoisted out of the pixel loop is only what does not depend on the
 * pixel: a row's source rows and weight, a block of columns' positions. */
static void xform_range(const stk__xform_job *j, uint32_t n0, uint32_t n1)
{
    const uint32_t C = j->C, OW = j->out_w, OH = j->out_h;
    const int nchw = j->layout == STK_IMAGE_NCHW;
    xcol cols[XCOLS];
    for (uint32_t n = n0; n < n1; n++) {
        const stk__crop_box *b = &j->boxes[n];
        const uint8_t *img = j->src + (uint64_t)n * j->H * j->W * C;
        float sy_scale = (float)b->h / (float)OH;
        for (uint32_t ox0 = 0; ox0 < OW; ox0 += XCOLS) {
            uint32_t nc = OW - ox0 < XCOLS ? OW - ox0 : XCOLS;
            xform_cols(j, b, ox0, nc, cols);
            for (uint32_t oy = 0; oy < OH; oy++) {
                float sy = ((float)oy + 0.5f) * sy_scale - 0.5f;
                sy = sy < 0 ? 0 : sy > (float)(b->h - 1) ? (float)(b->h - 1) : sy;
                int32_t y0 = (int32_t)sy, y1 = y0 + 1 < b->h ? y0 + 1 : y0;
                float fy = sy - (float)y0, gy = 1.0f - fy;
                const uint8_t *r0 = img + ((uint64_t)(b->y0 + y0) * j->W + (uint64_t)b->x0) * C;
                const uint8_t *r1 = img + ((uint64_t)(b->y0 + y1) * j->W + (uint64_t)b->x0) * C;
                for (uint32_t c = 0; c < C; c++) {
                    float scale, shift;
                    norm_coef(j, c, &scale, &shift);
                    /* NCHW: the row of channel c is contiguous; NHWC: stride C */
                    uint64_t at = nchw ? (((uint64_t)n * C + c) * OH + oy) * OW + ox0
                                       : (((uint64_t)n * OH + oy) * OW + ox0) * C + c,
                             step = nchw ? 1 : C;
                    for (uint32_t k = 0; k < nc; k++, at += step) {
                        const xcol *q = &cols[k];
                        float top = (float)r0[q->x0 + c] * q->gx + (float)r0[q->x1 + c] * q->fx;
                        float bot = (float)r1[q->x0 + c] * q->gx + (float)r1[q->x1 + c] * q->fx;
                        float v = top * gy + bot * fy;
                        if (j->dtype == STK_DT_U8) { /* the resampled pixel, rounded half to even */
                            float r = v < 0 ? 0 : v > 255 ? 255 : v;
                            r = (r + 8388608.0f) - 8388608.0f; /* 2^23: rounds as the FPU does, to even */
                            ((uint8_t *)j->dst)[at] = (uint8_t)r;
                            continue;
                        }
                        store(j->dst, at, j->dtype, fmaf(v, scale, shift));
                    }
                }
            }
        }
    }
}


#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#  define STK__NORM_AVX2 1
#  include <immintrin.h>

/* 8 f32 values of one channel, a 32-byte store; nt: non-temporal (dst
 * 32-byte aligned): the batch is read by the consumer, not by this core, so
 * it need not pass through its cache and its lines need not be read first. */
__attribute__((target("avx2,fma"))) static inline void norm8(__m256i dwords, __m256 scale, __m256 shift,
                                                             float *dst, int nt)
{
    __m256 f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dwords), scale, shift);
    if (nt) _mm256_stream_ps(dst, f);
    else _mm256_storeu_ps(dst, f);
}

/* Pixels [0, n & ~7) of a 3-channel image to f32, NCHW (three planes of n)
 * or NHWC; returns the pixels done. Reads no byte past the 3 * n. */
__attribute__((target("avx2,fma"))) static uint64_t
normalise_avx2(const stk__xform_job *j, const uint8_t *hwc, float *dst, uint64_t n, int nchw)
{
    const uint64_t done = n & ~(uint64_t)7;
    float sc[3], sh[3];
    for (uint32_t c = 0; c < 3; c++) norm_coef(j, c, &sc[c], &sh[c]);
    if (nchw) {
        /* 8 pixels: bytes 0-11 in the low lane (loaded at 3p), 12-23 at
         * bytes 4-15 of the high lane (loaded at 3p + 8); one shuffle per
         * channel puts its 8 values in the low bytes of 8 dwords */
        __m256i m[3];
        __m256 scale[3], shift[3];
        for (int c = 0; c < 3; c++) {
            int8_t b[32];
            for (int k = 0; k < 32; k++) b[k] = -128;
            for (int k = 0; k < 4; k++)
                b[4 * k] = (int8_t)(3 * k + c), b[16 + 4 * k] = (int8_t)(3 * k + 4 + c);
            m[c] = _mm256_loadu_si256((const __m256i *)(const void *)b);
            scale[c] = _mm256_set1_ps(sc[c]);
            shift[c] = _mm256_set1_ps(sh[c]);
        }
        int nt = (uintptr_t)dst % 32 == 0 && n % 8 == 0; /* every plane's rows aligned */
        for (uint64_t p = 0; p < done; p += 8) {
            const uint8_t *in = hwc + 3 * p;
            __m256i x = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)in)),
                _mm_loadu_si128((const __m128i *)(const void *)(in + 8)), 1);
            for (int c = 0; c < 3; c++)
                norm8(_mm256_shuffle_epi8(x, m[c]), scale[c], shift[c], dst + (uint64_t)c * n + p, nt);
        }
    } else {
        /* values in order; the channel of value i is i % 3, so the
         * constants repeat every 3 vectors of 8 */
        __m256 scale[3], shift[3];
        for (int v = 0; v < 3; v++) {
            float a[8], b[8];
            for (int k = 0; k < 8; k++) a[k] = sc[(8 * v + k) % 3], b[k] = sh[(8 * v + k) % 3];
            scale[v] = _mm256_loadu_ps(a);
            shift[v] = _mm256_loadu_ps(b);
        }
        int nt = (uintptr_t)dst % 32 == 0;
        for (uint64_t i = 0; i < 3 * done; i += 24)
            for (int v = 0; v < 3; v++)
                norm8(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(hwc + i + 8 * v))),
                      scale[v], shift[v], dst + i + 8 * v, nt);
    }
    _mm_sfence(); /* the stores are visible before the slot is handed on */
    return done;
}
#endif

void stk__xform_normalise(const stk__xform_job *j, const uint8_t *hwc, void *dst)
{
    const uint32_t C = j->C;
    const uint64_t n = (uint64_t)j->out_h * j->out_w;
    const int nchw = j->layout == STK_IMAGE_NCHW;
    uint64_t p0 = 0; /* pixels done by SIMD */
#ifdef STK__NORM_AVX2
    if (j->dtype == STK_DT_F32 && C == 3 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        p0 = normalise_avx2(j, hwc, dst, n, nchw);
#endif
    /* Each channel's 256 possible outputs: a load per element. */
    float lf[4][256];
    uint16_t lh[4][256];
    for (uint32_t c = 0; c < C; c++) {
        float scale, shift;
        norm_coef(j, c, &scale, &shift);
        for (int v = 0; v < 256; v++) {
            lf[c][v] = fmaf((float)v, scale, shift);
            if (j->dtype == STK_DT_F16 || j->dtype == STK_DT_BF16) store(&lh[c][v], 0, j->dtype, lf[c][v]);
        }
    }
    for (uint32_t c = 0; c < C; c++) {
        const uint8_t *in = hwc + c;
        uint64_t step = nchw ? 1 : C, at = (nchw ? (uint64_t)c * n : c) + p0 * step;
        if (j->dtype == STK_DT_U8)
            for (uint64_t p = p0; p < n; p++, at += step) ((uint8_t *)dst)[at] = in[p * C];
        else if (j->dtype == STK_DT_F32)
            for (uint64_t p = p0; p < n; p++, at += step) ((float *)dst)[at] = lf[c][in[p * C]];
        else
            for (uint64_t p = p0; p < n; p++, at += step) ((uint16_t *)dst)[at] = lh[c][in[p * C]];
    }
}

typedef struct {
    const stk__xform_job *job;
    uint32_t n0, n1;
} xform_part;

static void *xform_thread(void *arg)
{
    const xform_part *p = arg;
    xform_range(p->job, p->n0, p->n1);
    return NULL;
}

#define XFORM_MAX_THREADS 16

/* The samples are independent: split them over the machine's cores (up to
 * 16). On the CPU path there is no GPU to overlap with, and the reader's
 * workers wait for this batch's slot meanwhile, so the cores are free. A
 * thread that cannot be started leaves its share to the calling thread. */
void stk__xform_host(const stk__xform_job *j)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t T = cpus < 1 ? 1 : cpus > XFORM_MAX_THREADS ? XFORM_MAX_THREADS : (uint32_t)cpus;
    if (T > j->n) T = j->n ? j->n : 1;
    pthread_t th[XFORM_MAX_THREADS];
    xform_part part[XFORM_MAX_THREADS];
    int started[XFORM_MAX_THREADS] = {0};
    for (uint32_t t = 0; t < T; t++) {
        part[t] =
            (xform_part){j, (uint32_t)((uint64_t)j->n * t / T), (uint32_t)((uint64_t)j->n * (t + 1) / T)};
        if (t > 0) started[t] = pthread_create(&th[t], NULL, xform_thread, &part[t]) == 0;
    }
    xform_range(j, part[0].n0, part[0].n1);
    for (uint32_t t = 1; t < T; t++) {
        if (started[t]) pthread_join(th[t], NULL);
        else xform_range(j, part[t].n0, part[t].n1);
    }
}
