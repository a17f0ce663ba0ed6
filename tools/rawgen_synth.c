/* tools/rawgen_synth.c - rawgen's content: each file's random stream and
 * the natural-looking image drawn from it (see rawgen.c). The same seed and
 * index give the same pixels, from the same build: float arithmetic with no
 * contraction or reassociation. */
#include <math.h>
#include <stdlib.h>

#include "rawgen.h"

uint64_t rg_next(rg_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float rg_unif(rg_rng *r) { return (float)(rg_next(r) >> 40) * 0x1p-24f; } /* [0, 1) */

uint32_t rg_irange(rg_rng *r, uint32_t lo, uint32_t hi) /* [lo, hi] */
{
    return lo + (uint32_t)(rg_next(r) % ((uint64_t)hi - lo + 1));
}

/* Every file's stream: image i, variant k (1 << 62 | k), broken k (1 << 63 | k). */
rg_rng rg_stream(uint64_t seed, uint64_t index)
{
    rg_rng r = {seed * 0x2545f4914f6cdd1dull ^ (index + 1) * 0x9e3779b97f4a7c15ull};
    rg_next(&r);
    return r;
}

#define MAX_SHAPES 6

typedef struct {
    float cx, cy, rx, ry, cs, sn, soft, alpha, col[3];
    float x0, x1, y0, y1, irx, iry, isoft; /* derived */
    bool rect;
} shape_t;


bool rg_grow(void **p, size_t *cap, size_t need)
{
    if (need <= *cap) return true;
    void *q = realloc(*p, need);
    if (!q) return false;
    *p = q;
    *cap = need;
    return true;
}

/* Sensor-like noise, drawn once per run: triangular luma shared by the three
 * channels of a pixel, plus a little independent noise per channel. */
bool rg_make_noise(rg_gen *g, uint64_t seed, uint32_t max_side)
{
    g->noise_n = 3 * ((size_t)max_side * 2 > 16384 ? (size_t)max_side * 2 : 16384);
    if (!(g->noise = malloc(g->noise_n * sizeof *g->noise))) return false;
    rg_rng r = rg_stream(seed, ~0ull);
    for (size_t i = 0; i < g->noise_n; i += 3) {
        uint64_t b = rg_next(&r);
        int lum = ((int)(b & 255) + (int)((b >> 8) & 255) - 255) / 4;
        for (int k = 0; k < 3; k++)
            g->noise[i + (size_t)k] = (int16_t)(lum + (int)((b >> (16 + 8 * k)) & 31) - 15);
    }
    return true;
}

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* A natural-ish colour: a grey level with a moderate tint. */
static void pick_colour(rg_rng *r, float c[3])
{
    float v = 35 + 185 * rg_unif(r), sat = 0.15f + 0.5f * rg_unif(r);
    for (int k = 0; k < 3; k++) c[k] = clampf(v * (1 - sat) + (20 + 215 * rg_unif(r)) * sat, 0, 255);
}

/* One output row: vertical blend of two interpolated grid rows plus scaled
 * noise, rounded and clamped. A plain loop the compiler vectorises. */
static void blend_row(uint8_t *restrict out, const int16_t *restrict h0, const int16_t *restrict h1,
                      const int16_t *restrict nz, size_t n, int16_t c0, int16_t c1, int16_t amp)
{
    for (size_t e = 0; e < n; e++) { /* |sum| <= 16320 + 79 * 19 + 32 < 2^15: 16-bit lanes are exact */
        int16_t v = (int16_t)((int16_t)(h0[e] * c0 + h1[e] * c1) + (int16_t)(nz[e] * amp) + 32);
        v = (int16_t)(v >> 6);
        out[e] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

/* Fill g->rgb with a w x h RGB image drawn from r. */
bool rg_synth(rg_gen *g, uint32_t w, uint32_t h, rg_rng *r)
{
    size_t gw = (w + 3) / 4 + 2, gh = (h + 3) / 4 + 2, w3 = (size_t)w * 3;
    if (!rg_grow((void **)&g->rgb, &g->rgb_cap, (size_t)w * h * 3) ||
        !rg_grow((void **)&g->grid, &g->grid_cap, gw * gh * 3 * sizeof(int16_t)) ||
        !rg_grow((void **)&g->hrows, &g->hrows_cap, gh * w3 * sizeof(int16_t)) ||
        !rg_grow((void **)&g->frow, &g->frow_cap, gw * 4 * sizeof(float)))
        return false;
    /* background: a gradient between two colours along a random direction */
    float c0[3], c1[3];
    pick_colour(r, c0);
    pick_colour(r, c1);
    float th = 6.2831853f * rg_unif(r), gx = cosf(th), gy = sinf(th);
    float iext = 1 / (fabsf(gx) * (float)w + fabsf(gy) * (float)h + 1);
    /* a soft light (or shadow) */
    float lx = (float)w * rg_unif(r), ly = (float)h * rg_unif(r), ls = 0.5f * rg_unif(r) - 0.15f;
    float lr = (float)(w > h ? w : h) * (0.6f + 0.6f * rg_unif(r)), ilr2 = 1 / (lr * lr);
    /* a low-frequency texture (period >= 16 px, so the 4 px grid carries it) */
    float ta = 12 * rg_unif(r), tp = 16 + 60 * rg_unif(r), tf = 6.2831853f / tp,
          tph = 6.2831853f * rg_unif(r);
    float tth = 3.1415926f * rg_unif(r), tx = cosf(tth) * tf, ty = sinf(tth) * tf;
    /* shapes */
    shape_t sh[MAX_SHAPES];
    unsigned ns = 2 + (unsigned)(rg_next(r) % (MAX_SHAPES - 1));
    float md = (float)(w < h ? w : h);
    for (unsigned k = 0; k < ns; k++) {
        shape_t *s = &sh[k];
        s->cx = (float)w * rg_unif(r), s->cy = (float)h * rg_unif(r);
        s->rx = md * (0.05f + 0.3f * rg_unif(r)) + 1, s->ry = md * (0.05f + 0.3f * rg_unif(r)) + 1;
        float a = 3.1415926f * rg_unif(r);
        s->cs = cosf(a), s->sn = sinf(a);
        s->soft = 2 + 8 * rg_unif(r);
        s->alpha = 0.45f + 0.55f * rg_unif(r);
        s->rect = rg_next(r) & 1;
        pick_colour(r, s->col);
    }
    int amp = 6 + (int)(rg_next(r) % 14); /* noise: about +-amp levels */
    float grain = 4 + 20 * rg_unif(r);    /* 4-pixel-scale texture (fabric, foliage, gravel), levels */

    for (unsigned k = 0; k < ns; k++) { /* reciprocals and the bounding box of the soft edge */
        shape_t *s = &sh[k];
        float reach = fmaxf(s->rx, s->ry) * (s->rect ? 1.4143f : 1) + s->soft;
        s->x0 = s->cx - reach, s->x1 = s->cx + reach, s->y0 = s->cy - reach, s->y1 = s->cy + reach;
        s->irx = 1 / s->rx, s->iry = 1 / s->ry, s->isoft = fminf(s->rx, s->ry) / s->soft;
    }
    /* Row by row, each layer a plain loop over the row (the compiler
     * vectorises most of them); a shape only over the columns of its box. */
    float *cr = g->frow, *cg = cr + gw, *cb = cg + gw, *lt = cb + gw;
    float dcs = cosf(4 * tx), dsn = sinf(4 * tx); /* the texture's phase steps by a fixed angle along x */
    for (size_t j = 0; j < gh; j++) {
        float y = (float)(j * 4), ts = sinf(y * ty + tph), tc = cosf(y * ty + tph);
        float t0 = ((0 - (float)w / 2) * gx + (y - (float)h / 2) * gy) * iext + 0.5f, dt = 4 * gx * iext;
        float dy2 = (y - ly) * (y - ly);
        for (size_t i = 0; i < gw; i++) {
            float x = (float)(i * 4), dx = x - lx;
            lt[i] = 1 + ls * (1 - 2 * clampf((dx * dx + dy2) * ilr2, 0, 1));
            float t = clampf(t0 + dt * (float)i, 0, 1);
            cr[i] = (c0[0] + (c1[0] - c0[0]) * t) * lt[i];
            cg[i] = (c0[1] + (c1[1] - c0[1]) * t) * lt[i];
            cb[i] = (c0[2] + (c1[2] - c0[2]) * t) * lt[i];
        }
        for (size_t i = 0; i < gw; i++) { /* texture, grain (4-pixel scale), a little chroma */
            float tex = ta * ts, nts = ts * dcs + tc * dsn;
            tc = tc * dcs - ts * dsn, ts = nts;
            uint64_t gb = rg_next(r);
            float gl = tex + grain * ((float)(gb & 0xffff) * (1.0f / 32768) - 1) - 2;
            cr[i] += gl + (float)((gb >> 16) & 255) * (1.0f / 64);
            cg[i] += gl + (float)((gb >> 24) & 255) * (1.0f / 64);
            cb[i] += gl + (float)((gb >> 32) & 255) * (1.0f / 64);
        }
        for (unsigned k = 0; k < ns; k++) {
            const shape_t *sp = &sh[k];
            if (y < sp->y0 || y > sp->y1 || sp->x1 < 0) continue;
            size_t i0 = sp->x0 <= 0 ? 0 : (size_t)ceilf(sp->x0 / 4), i1 = (size_t)(sp->x1 / 4) + 1;
            if (i1 > gw) i1 = gw;
            float uy = y - sp->cy, usn = uy * sp->sn, ucs = uy * sp->cs;
            for (size_t i = i0; i < i1; i++) {
                float ux = (float)(i * 4) - sp->cx;
                float u = (ux * sp->cs + usn) * sp->irx, v = (-ux * sp->sn + ucs) * sp->iry;
                float d = sp->rect ? fmaxf(fabsf(u), fabsf(v)) : sqrtf(u * u + v * v);
                float al = clampf(0.5f - (d - 1) * sp->isoft, 0, 1) *
                           sp->alpha; /* (d - 1) * min(rx, ry): ~ pixels to the edge */
                cr[i] += (sp->col[0] * lt[i] - cr[i]) * al;
                cg[i] += (sp->col[1] * lt[i] - cg[i]) * al;
                cb[i] += (sp->col[2] * lt[i] - cb[i]) * al;
            }
        }
        int16_t *o = &g->grid[j * gw * 3];
        for (size_t i = 0; i < gw; i++) {
            o[3 * i] = (int16_t)(clampf(cr[i], 0, 255) * 4 + 0.5f);
            o[3 * i + 1] = (int16_t)(clampf(cg[i], 0, 255) * 4 + 0.5f);
            o[3 * i + 2] = (int16_t)(clampf(cb[i], 0, 255) * 4 + 0.5f);
        }
    }
    /* each grid row to full width (the grid step is 4 pixels) */
    for (size_t j = 0; j < gh; j++) {
        const int16_t *gr = &g->grid[j * gw * 3];
        int16_t *hr = &g->hrows[j * w3];
        for (size_t i = 0; i < w / 4; i++) { /* whole cells: 4 pixels from a to a + 3 (b - a) / 4 */
            const int16_t *a = &gr[i * 3];
            int16_t *o = &hr[i * 12];
            for (int k = 0; k < 3; k++) {
                int16_t b = (int16_t)(a[k] * 4), d = (int16_t)(a[k + 3] - a[k]);
                o[k] = b, o[k + 3] = (int16_t)(b + d), o[k + 6] = (int16_t)(b + 2 * d),
                o[k + 9] = (int16_t)(b + 3 * d);
            }
        }
        for (uint32_t x = w & ~3u; x < w; x++) {
            const int16_t *a = &gr[(size_t)(x >> 2) * 3];
            int f = (int)(x & 3);
            for (int k = 0; k < 3; k++)
                hr[(size_t)x * 3 + (size_t)k] = (int16_t)(a[k] * (4 - f) + a[k + 3] * f);
        }
    }
    /* rows: between two grid rows, plus noise from a random place in the table */
    for (uint32_t y = 0; y < h; y++) {
        const int16_t *h0 = &g->hrows[(size_t)(y >> 2) * w3];
        size_t off = (size_t)(rg_next(r) % (g->noise_n / 3 - w)) * 3;
        int fy = (int)(y & 3);
        blend_row(g->rgb + (size_t)y * w3, h0, h0 + w3, g->noise + off, w3, (int16_t)(4 - fy), (int16_t)fy,
                  (int16_t)amp);
    }
    return true;
}

/* Width and height in [min, max]: independent (portrait or landscape), one
 * in eight exactly square. */
void rg_pick_size(rg_rng *r, const rg_opts *o, uint32_t *w, uint32_t *h)
{
    *w = rg_irange(r, (uint32_t)o->min_side, (uint32_t)o->max_side);
    *h = rg_irange(r, (uint32_t)o->min_side, (uint32_t)o->max_side);
    if ((rg_next(r) & 7) == 0) *h = *w;
}
