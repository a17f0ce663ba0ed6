/* rawgen - write a synthetic raw image dataset: an ImageFolder tree of JPEG
 * and PNG files, for demos, tests and benchmarks of `pack`.
 *
 * OUTDIR/classNNN/img-NNNNNNNN.{jpg,png}: image i is in class i % classes.
 * Its content depends only on (seed, i): a smooth two-colour gradient under a
 * soft light, a low-frequency texture, a 4-pixel grain and a few soft-edged
 * shapes, computed on a grid of 4 x 4 pixel cells and interpolated, plus
 * sensor-like noise,
 * so that JPEG sizes are those of photos (~20-60 KB at 400 x 350), not of
 * white noise. Most files are JPEGs (baseline 4:2:0, about 10% each 4:4:4
 * and 4:2:2, quality 75..95); about one in 32 is an RGB PNG (PNG encoding
 * costs ~10x a JPEG's, so more would halve the rate).
 *
 * --variants adds one file of every JPEG/PNG flavour a decoder must handle
 * and one of each other format pack reads (rawgen_formats.c),
 * --broken the bad files a packer must skip with a reason (see usage()).
 * The same flags give byte-identical files (from the same build: the content
 * uses float arithmetic, with no contraction or reassociation). */
#define _GNU_SOURCE
#include "cli.h"
#include "rawgen_formats.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <spng.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "stoker/format.h"

extern char **environ;

#define CJPEG "/usr/bin/cjpeg"
#define BOMB_SIDE 30000u

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: rawgen [OPTIONS] OUTDIR\n"
            "Write a synthetic raw image dataset into OUTDIR: an ImageFolder tree\n"
            "(OUTDIR/classNNN/img-NNNNNNNN.jpg or .png; image i is in class i %% N) of\n"
            "natural-looking JPEG and PNG images, deterministic from (seed, i).\n\n"
            "  -n, --images N        images to write (default 1000)\n"
            "      --classes N       class directories (default 10)\n"
            "      --seed S          content seed (default 0)\n"
            "      --min-side N      smallest image side in pixels (default 200)\n"
            "      --max-side N      largest image side in pixels (default 500); width and\n"
            "                        height are drawn separately (portrait, landscape, and\n"
            "                        some exactly square)\n"
            "      --variants        also write one file of each flavour, named\n"
            "                        variant-*: JPEG baseline 4:2:0, 4:2:2, 4:4:4,\n"
            "                        grayscale, progressive, CMYK (YCCK), restart markers\n"
            "                        with arithmetic coding and restart markers with Huffman\n"
            "                        coding (these two need " CJPEG "; skipped, and said\n"
            "                        so, without it); PNG gray 8-bit, palette, RGB 16-bit,\n"
            "                        RGBA; lossy WebP, interlaced GIF, 24-bit BMP, LZW TIFF\n"
            "      --broken          also write files a packer must skip, named broken-*:\n"
            "                        an empty .jpg, truncated JPEGs (in the scan data and\n"
            "                        in the header) and PNG, random bytes\n"
            "                        named .jpg, a JPEG that ends after its headers,\n"
            "                        decompression bombs (small JPEG and PNG whose headers\n"
            "                        claim %ux%u pixels), a HEIF named .jpg, a text file,\n"
            "                        and WebP, GIF, BMP and TIFF files cut in half\n"
            "      --force           replace an earlier rawgen tree in OUTDIR\n"
            "      --json            print the result as one JSON object on stdout\n"
            "  -q, --quiet           no progress bar or summary\n"
            "  -h, --help            this help\n"
            "  -V, --version         version\n\n"
            "Exit status: 0 written; 1 could not be written (the message says why, e.g.\n"
            "OUTDIR is not empty and --force was not given); 2 usage error.\n",
            BOMB_SIDE, BOMB_SIDE);
}

typedef struct {
    uint64_t images, classes, seed, min_side, max_side;
    bool variants, broken, force, json, quiet;
    const char *out;
} opts;

static int parse(int argc, char **argv, opts *o)
{
    static const struct option lo[] = {
        {"images", 1, 0, 'n'},   {"classes", 1, 0, 'c'},  {"seed", 1, 0, 'e'},
        {"min-side", 1, 0, 'a'}, {"max-side", 1, 0, 'b'}, {"variants", 0, 0, 'v'},
        {"broken", 0, 0, 'B'},   {"force", 0, 0, 'f'},    CLI_COMMON_OPTIONS};
    cli_args a = {.prog = "rawgen", .usage = usage, .longopts = lo};
    *o = (opts){.images = 1000, .classes = 10, .min_side = 200, .max_side = 500};
    int c;
    while ((c = cli_getopt(&a, argc, argv, "n:" CLI_COMMON_SHORT)) != -1) {
        bool ok = true;
        switch (c) {
        case 'n':
            ok = cli_uint(&a, optarg, 0, 100000000, &o->images);
            break;
        case 'c':
            ok = cli_uint(&a, optarg, 1, 100000, &o->classes);
            break;
        case 'e':
            ok = cli_uint(&a, optarg, 0, UINT64_MAX, &o->seed);
            break;
        case 'a':
            ok = cli_uint(&a, optarg, 1, 16384, &o->min_side);
            break;
        case 'b':
            ok = cli_uint(&a, optarg, 1, 16384, &o->max_side);
            break;
        case 'v':
            o->variants = true;
            break;
        case 'B':
            o->broken = true;
            break;
        case 'f':
            o->force = true;
            break;
        default:
            return CLI_EXIT_USAGE;
        }
        if (!ok) return CLI_EXIT_USAGE;
    }
    o->json = a.json, o->quiet = a.quiet;
    if (o->min_side > o->max_side)
        return cli_usage_error(&a, "--min-side %llu is larger than --max-side %llu",
                               (unsigned long long)o->min_side, (unsigned long long)o->max_side);
    if (!cli_operands(&a, argc, 1, 1, "one OUTDIR")) return CLI_EXIT_USAGE;
    o->out = argv[optind];
    return CLI_EXIT_OK;
}

/* ------------------------------------------------------------ randomness */

typedef struct {
    uint64_t s;
} rng_t;

static uint64_t next(rng_t *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float unif(rng_t *r) { return (float)(next(r) >> 40) * 0x1p-24f; } /* [0, 1) */

static uint32_t irange(rng_t *r, uint32_t lo, uint32_t hi) /* [lo, hi] */
{
    return lo + (uint32_t)(next(r) % ((uint64_t)hi - lo + 1));
}

/* Every file's stream: image i, variant k (1 << 62 | k), broken k (1 << 63 | k). */
static rng_t stream(uint64_t seed, uint64_t index)
{
    rng_t r = {seed * 0x2545f4914f6cdd1dull ^ (index + 1) * 0x9e3779b97f4a7c15ull};
    next(&r);
    return r;
}

/* ------------------------------------------------------------ content */

#define MAX_SHAPES 6

typedef struct {
    float cx, cy, rx, ry, cs, sn, soft, alpha, col[3];
    float x0, x1, y0, y1, irx, iry, isoft; /* derived */
    bool rect;
} shape_t;


typedef struct {
    tjhandle tj;
    uint8_t *rgb, *aux; /* w*h*3 pixels; scratch (gray, CMYK, 16-bit, ...) */
    size_t rgb_cap, aux_cap;
    int16_t *grid, *hrows; /* 4x4-cell grid (value * 4); grid rows interpolated to full width (value * 16) */
    size_t grid_cap, hrows_cap;
    float *frow; /* one grid row: R, G, B, light */
    size_t frow_cap;
    int16_t *noise;     /* noise_n samples: luma (+-63) + chroma (+-15) per pixel, unit amplitude */
    size_t noise_n;     /* a multiple of 3, > 3 * the widest row: small enough for L2 */
    unsigned char *jpg; /* TurboJPEG output buffer (grows) */
    unsigned long jpg_cap;
} gen_t;

static bool grow(void **p, size_t *cap, size_t need)
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
static bool make_noise(gen_t *g, uint64_t seed, uint32_t max_side)
{
    g->noise_n = 3 * ((size_t)max_side * 2 > 16384 ? (size_t)max_side * 2 : 16384);
    if (!(g->noise = malloc(g->noise_n * sizeof *g->noise))) return false;
    rng_t r = stream(seed, ~0ull);
    for (size_t i = 0; i < g->noise_n; i += 3) {
        uint64_t b = next(&r);
        int lum = ((int)(b & 255) + (int)((b >> 8) & 255) - 255) / 4;
        for (int k = 0; k < 3; k++)
            g->noise[i + (size_t)k] = (int16_t)(lum + (int)((b >> (16 + 8 * k)) & 31) - 15);
    }
    return true;
}

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* A natural-ish colour: a grey level with a moderate tint. */
static void pick_colour(rng_t *r, float c[3])
{
    float v = 35 + 185 * unif(r), sat = 0.15f + 0.5f * unif(r);
    for (int k = 0; k < 3; k++) c[k] = clampf(v * (1 - sat) + (20 + 215 * unif(r)) * sat, 0, 255);
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
static bool synth(gen_t *g, uint32_t w, uint32_t h, rng_t *r)
{
    size_t gw = (w + 3) / 4 + 2, gh = (h + 3) / 4 + 2, w3 = (size_t)w * 3;
    if (!grow((void **)&g->rgb, &g->rgb_cap, (size_t)w * h * 3) ||
        !grow((void **)&g->grid, &g->grid_cap, gw * gh * 3 * sizeof(int16_t)) ||
        !grow((void **)&g->hrows, &g->hrows_cap, gh * w3 * sizeof(int16_t)) ||
        !grow((void **)&g->frow, &g->frow_cap, gw * 4 * sizeof(float)))
        return false;
    /* background: a gradient between two colours along a random direction */
    float c0[3], c1[3];
    pick_colour(r, c0);
    pick_colour(r, c1);
    float th = 6.2831853f * unif(r), gx = cosf(th), gy = sinf(th);
    float iext = 1 / (fabsf(gx) * (float)w + fabsf(gy) * (float)h + 1);
    /* a soft light (or shadow) */
    float lx = (float)w * unif(r), ly = (float)h * unif(r), ls = 0.5f * unif(r) - 0.15f;
    float lr = (float)(w > h ? w : h) * (0.6f + 0.6f * unif(r)), ilr2 = 1 / (lr * lr);
    /* a low-frequency texture (period >= 16 px, so the 4 px grid carries it) */
    float ta = 12 * unif(r), tp = 16 + 60 * unif(r), tf = 6.2831853f / tp, tph = 6.2831853f * unif(r);
    float tth = 3.1415926f * unif(r), tx = cosf(tth) * tf, ty = sinf(tth) * tf;
    /* shapes */
    shape_t sh[MAX_SHAPES];
    unsigned ns = 2 + (unsigned)(next(r) % (MAX_SHAPES - 1));
    float md = (float)(w < h ? w : h);
    for (unsigned k = 0; k < ns; k++) {
        shape_t *s = &sh[k];
        s->cx = (float)w * unif(r), s->cy = (float)h * unif(r);
        s->rx = md * (0.05f + 0.3f * unif(r)) + 1, s->ry = md * (0.05f + 0.3f * unif(r)) + 1;
        float a = 3.1415926f * unif(r);
        s->cs = cosf(a), s->sn = sinf(a);
        s->soft = 2 + 8 * unif(r);
        s->alpha = 0.45f + 0.55f * unif(r);
        s->rect = next(r) & 1;
        pick_colour(r, s->col);
    }
    int amp = 6 + (int)(next(r) % 14); /* noise: about +-amp levels */
    float grain = 4 + 20 * unif(r);    /* 4-pixel-scale texture (fabric, foliage, gravel), levels */

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
            uint64_t gb = next(r);
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
        size_t off = (size_t)(next(r) % (g->noise_n / 3 - w)) * 3;
        int fy = (int)(y & 3);
        blend_row(g->rgb + (size_t)y * w3, h0, h0 + w3, g->noise + off, w3, (int16_t)(4 - fy), (int16_t)fy,
                  (int16_t)amp);
    }
    return true;
}

/* Width and height in [min, max]: independent (portrait or landscape), one
 * in eight exactly square. */
static void pick_size(rng_t *r, const opts *o, uint32_t *w, uint32_t *h)
{
    *w = irange(r, (uint32_t)o->min_side, (uint32_t)o->max_side);
    *h = irange(r, (uint32_t)o->min_side, (uint32_t)o->max_side);
    if ((next(r) & 7) == 0) *h = *w;
}

/* ------------------------------------------------------------ encoders */

static int jpeg_encode(gen_t *g, const uint8_t *px, uint32_t w, uint32_t h, int pf, int samp, int q,
                       int flags, unsigned long *len, char *msg, size_t cap)
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
static void *png_encode(const void *img, size_t len, uint32_t w, uint32_t h, uint8_t depth, uint8_t type,
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

/* ------------------------------------------------------------ output */

typedef struct {
    const opts *o;
    gen_t g;
    uint64_t files, bytes;
    char **extra; /* variant and broken files written (relative paths), for --json */
    size_t nextra, nvariants, nbroken;
    const char *skipped[4];
    size_t nskipped;
    cli_progress bar;
    int cwidth;
} run_t;

static char *class_dir(const run_t *r, uint64_t c)
{
    char *s = NULL;
    return asprintf(&s, "class%0*llu", r->cwidth, (unsigned long long)c) < 0 ? NULL : s;
}

static int write_all(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "rawgen: %s: cannot create: %s\n", path, strerror(errno));
        return -1;
    }
    const uint8_t *p = data;
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, p + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            fprintf(stderr, "rawgen: %s: cannot write: %s\n", path, n < 0 ? strerror(errno) : "short write");
            close(fd);
            return -1;
        }
        done += (size_t)n;
    }
    if (close(fd) != 0) {
        fprintf(stderr, "rawgen: %s: cannot write: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Count a written file of `len` bytes; variants and broken files are also
 * remembered (for --json). kind: 0 image, 1 variant, 2 broken. */
static int counted(run_t *r, const char *rel, uint64_t len, int kind)
{
    r->files++;
    r->bytes += len;
    if (kind) {
        char **e = realloc(r->extra, (r->nextra + 1) * sizeof *e);
        if (e) r->extra = e;
        if (!e || !(e[r->nextra] = strdup(rel))) {
            fprintf(stderr, "rawgen: out of memory\n");
            return -1;
        }
        r->nextra++;
        if (kind == 1) r->nvariants++;
        else r->nbroken++;
    }
    cli_progress_update(&r->bar, r->files, NULL);
    return 0;
}

/* Write `rel` (relative to OUTDIR) and count it. */
static int emit(run_t *r, const char *rel, const void *data, size_t len, int kind)
{
    char *path = NULL;
    if (asprintf(&path, "%s/%s", r->o->out, rel) < 0) return -1;
    int rc = write_all(path, data, len);
    free(path);
    return rc ? -1 : counted(r, rel, len, kind);
}

static char *rel_name(const run_t *r, uint64_t cls, const char *name)
{
    char *d = class_dir(r, cls % r->o->classes), *s = NULL;
    if (d && asprintf(&s, "%s/%s", d, name) < 0) s = NULL;
    free(d);
    return s;
}

/* ------------------------------------------------------------ images */

static int write_image(run_t *r, uint64_t i)
{
    rng_t rg = stream(r->o->seed, i);
    uint32_t w, h;
    pick_size(&rg, r->o, &w, &h);
    int q = (int)irange(&rg, 75, 95);
    uint64_t kind = next(&rg) % 64; /* 0,1: PNG; 2..7: 4:4:4; 8..13: 4:2:2; else 4:2:0 */
    if (!synth(&r->g, w, h, &rg)) {
        fprintf(stderr, "rawgen: out of memory\n");
        return -1;
    }
    char name[64], msg[256];
    snprintf(name, sizeof name, "img-%08llu.%s", (unsigned long long)i, kind < 2 ? "png" : "jpg");
    char *rel = rel_name(r, i, name);
    int rc = -1;
    if (!rel) fprintf(stderr, "rawgen: out of memory\n");
    else if (kind < 2) {
        size_t len;
        void *png = png_encode(r->g.rgb, (size_t)w * h * 3, w, h, 8, SPNG_COLOR_TYPE_TRUECOLOR, NULL, &len,
                               msg, sizeof msg);
        if (!png) fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
        else rc = emit(r, rel, png, len, 0);
        free(png);
    } else {
        int samp = kind < 8 ? TJSAMP_444 : kind < 14 ? TJSAMP_422 : TJSAMP_420;
        unsigned long len;
        if (jpeg_encode(&r->g, r->g.rgb, w, h, TJPF_RGB, samp, q, 0, &len, msg, sizeof msg))
            fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
        else rc = emit(r, rel, r->g.jpg, len, 0);
    }
    free(rel);
    return rc;
}

/* ------------------------------------------------------------ variants */

/* Pipe a PPM of the current image through cjpeg ARGS into OUTDIR/rel. */
static int cjpeg_to(run_t *r, const char *rel, uint32_t w, uint32_t h, int q, const char *a1, const char *a2,
                    const char *a3)
{
    char *path = NULL, qs[16], hdr[64];
    if (asprintf(&path, "%s/%s", r->o->out, rel) < 0) return -1;
    snprintf(qs, sizeof qs, "%d", q);
    int hl = snprintf(hdr, sizeof hdr, "P6\n%u %u\n255\n", w, h);
    char *argv[12];
    int n = 0;
    argv[n++] = (char *)"cjpeg", argv[n++] = (char *)"-quality", argv[n++] = qs;
    if (a1) argv[n++] = (char *)a1;
    if (a2) argv[n++] = (char *)a2;
    if (a3) argv[n++] = (char *)a3;
    argv[n++] = (char *)"-outfile", argv[n++] = path, argv[n] = NULL;
    int fds[2], rc = -1;
    pid_t pid;
    posix_spawn_file_actions_t fa;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(stderr, "rawgen: cannot make a pipe: %s\n", strerror(errno));
        free(path);
        return -1;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[0], 0);
    int e = posix_spawn(&pid, CJPEG, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[0]);
    if (e) {
        fprintf(stderr, "rawgen: cannot run " CJPEG ": %s\n", strerror(e));
        close(fds[1]);
        free(path);
        return -1;
    }
    bool ok = true;
    const uint8_t *parts[2] = {(const uint8_t *)hdr, r->g.rgb};
    size_t lens[2] = {(size_t)hl, (size_t)w * h * 3};
    for (int k = 0; k < 2 && ok; k++)
        for (size_t done = 0; done < lens[k] && ok;) {
            ssize_t m = write(fds[1], parts[k] + done, lens[k] - done);
            if (m < 0 && errno == EINTR) continue;
            if (m <= 0) ok = false;
            else done += (size_t)m;
        }
    close(fds[1]);
    int st = 0;
    pid_t got;
    while ((got = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {}
    struct stat sb;
    if (!ok || got != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || stat(path, &sb) != 0)
        fprintf(stderr, "rawgen: %s: " CJPEG " failed\n", path);
    else rc = counted(r, rel, (uint64_t)sb.st_size, 1);
    free(path);
    return rc;
}

enum {
    V_420,
    V_422,
    V_444,
    V_GRAY,
    V_PROG,
    V_CMYK,
    V_RST_ARITH,
    V_RST,
    V_PNG_GRAY,
    V_PNG_PAL,
    V_PNG_16,
    V_PNG_RGBA,
    V_WEBP,
    V_GIF,
    V_BMP,
    V_TIFF,
    V_COUNT
};
static const char *const vname[V_COUNT] = {"jpeg-420.jpg",
                                           "jpeg-422.jpg",
                                           "jpeg-444.jpg",
                                           "jpeg-gray.jpg",
                                           "jpeg-progressive.jpg",
                                           "jpeg-cmyk.jpg",
                                           "jpeg-restart-arithmetic.jpg",
                                           "jpeg-restart.jpg",
                                           "png-gray8.png",
                                           "png-palette.png",
                                           "png-rgb16.png",
                                           "png-rgba.png",
                                           "webp-lossy.webp",
                                           "gif-interlaced.gif",
                                           "bmp-24bit.bmp",
                                           "tiff-lzw.tif"};

static int write_variant(run_t *r, unsigned k)
{
    rng_t rg = stream(r->o->seed, (1ull << 62) | k);
    uint32_t w, h;
    pick_size(&rg, r->o, &w, &h);
    /* odd sides (where the range allows) exercise partial MCUs and odd chroma */
    if (!(w & 1) && w > r->o->min_side) w--;
    if (!(h & 1) && h > r->o->min_side) h--;
    int q = (int)irange(&rg, 75, 95);
    char name[64], msg[256];
    snprintf(name, sizeof name, "variant-%s", vname[k]);
    char *rel = rel_name(r, k, name);
    if (!rel || !synth(&r->g, w, h, &rg)) {
        free(rel);
        fprintf(stderr, "rawgen: out of memory\n");
        return -1;
    }
    size_t npx = (size_t)w * h, len = 0;
    unsigned long jl = 0;
    int rc = -1;
    uint8_t *px = r->g.rgb;
    if (k >= V_WEBP) { /* the other formats pack reads: one file each */
        uint8_t *f = rg_encode((rg_format)(k - V_WEBP), px, w, h, q, &len, msg, sizeof msg);
        if (f) rc = emit(r, rel, f, len, 1);
        else fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
        free(f);
        free(rel);
        return rc;
    }
    if (k >= V_PNG_GRAY && !grow((void **)&r->g.aux, &r->g.aux_cap, npx * 6)) {
        fprintf(stderr, "rawgen: out of memory\n");
        free(rel);
        return -1;
    }
    if (k == V_CMYK && !grow((void **)&r->g.aux, &r->g.aux_cap, npx * 4)) {
        fprintf(stderr, "rawgen: out of memory\n");
        free(rel);
        return -1;
    }
    uint8_t *aux = r->g.aux;
    void *png = NULL;
    switch (k) {
    case V_420:
    case V_422:
    case V_444:
    case V_GRAY:
    case V_PROG: {
        int samp = k == V_420 || k == V_PROG ? TJSAMP_420
                   : k == V_422              ? TJSAMP_422
                   : k == V_444              ? TJSAMP_444
                                             : TJSAMP_GRAY;
        if (!jpeg_encode(&r->g, px, w, h, TJPF_RGB, samp, q, k == V_PROG ? TJFLAG_PROGRESSIVE : 0, &jl, msg,
                         sizeof msg))
            rc = emit(r, rel, r->g.jpg, jl, 1);
        else fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
        break;
    }
    case V_CMYK:
        /* Adobe convention, as libjpeg-turbo's own tools: inverted CMYK
         * (255 = no ink), so R = C * K / 255. TurboJPEG writes it as YCCK. */
        for (size_t i = 0; i < npx; i++) {
            int rr = px[3 * i], gg = px[3 * i + 1], bb = px[3 * i + 2];
            int mx = rr > gg ? (rr > bb ? rr : bb) : (gg > bb ? gg : bb);
            uint8_t *c = &aux[4 * i];
            if (mx == 0) c[0] = c[1] = c[2] = 255, c[3] = 0;
            else {
                c[0] = (uint8_t)((rr * 255 + mx / 2) / mx);
                c[1] = (uint8_t)((gg * 255 + mx / 2) / mx);
                c[2] = (uint8_t)((bb * 255 + mx / 2) / mx);
                c[3] = (uint8_t)mx;
            }
        }
        if (!jpeg_encode(&r->g, aux, w, h, TJPF_CMYK, TJSAMP_444, q, 0, &jl, msg, sizeof msg))
            rc = emit(r, rel, r->g.jpg, jl, 1);
        else fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
        break;
    case V_RST_ARITH:
    case V_RST:
        if (access(CJPEG, X_OK) != 0) {
            r->skipped[r->nskipped++] = vname[k];
            rc = 0;
            break;
        }
        rc = k == V_RST_ARITH ? cjpeg_to(r, rel, w, h, q, "-restart", "1", "-arithmetic")
                              : cjpeg_to(r, rel, w, h, q, "-restart", "2", NULL);
        break;
    case V_PNG_GRAY:
        for (size_t i = 0; i < npx; i++)
            aux[i] = (uint8_t)((77 * px[3 * i] + 150 * px[3 * i + 1] + 29 * px[3 * i + 2] + 128) >> 8);
        png = png_encode(aux, npx, w, h, 8, SPNG_COLOR_TYPE_GRAYSCALE, NULL, &len, msg, sizeof msg);
        break;
    case V_PNG_PAL: {
        /* a 6x6x6 colour cube */
        struct spng_plte pl = {.n_entries = 216};
        for (unsigned e = 0; e < 216; e++)
            pl.entries[e] = (struct spng_plte_entry){(uint8_t)(e / 36 * 51), (uint8_t)(e / 6 % 6 * 51),
                                                     (uint8_t)(e % 6 * 51), 255};
        for (size_t i = 0; i < npx; i++)
            aux[i] = (uint8_t)((px[3 * i] + 25) / 51 * 36 + (px[3 * i + 1] + 25) / 51 * 6 +
                               (px[3 * i + 2] + 25) / 51);
        png = png_encode(aux, npx, w, h, 8, SPNG_COLOR_TYPE_INDEXED, &pl, &len, msg, sizeof msg);
        break;
    }
    case V_PNG_16: /* 16-bit samples: high byte the image, low byte fine detail. libspng
                    * 0.7 takes them in host byte order and writes them big-endian */
        for (size_t i = 0; i < npx * 3; i++) {
            uint16_t v = (uint16_t)(px[i] << 8 | (next(&rg) & 0xff));
            memcpy(aux + 2 * i, &v, 2);
        }
        png = png_encode(aux, npx * 6, w, h, 16, SPNG_COLOR_TYPE_TRUECOLOR, NULL, &len, msg, sizeof msg);
        break;
    case V_PNG_RGBA: /* alpha: a horizontal ramp from opaque to half transparent */
        for (size_t y = 0, i = 0; y < h; y++)
            for (size_t x = 0; x < w; x++, i++) {
                memcpy(&aux[4 * i], &px[3 * i], 3);
                aux[4 * i + 3] = (uint8_t)(255 - 128 * x / (w > 1 ? w - 1 : 1));
            }
        png = png_encode(aux, npx * 4, w, h, 8, SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, NULL, &len, msg, sizeof msg);
        break;
    default:
        break;
    }
    if (k >= V_PNG_GRAY) {
        if (png) rc = emit(r, rel, png, len, 1);
        else fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
        free(png);
    }
    free(rel);
    return rc;
}

/* ------------------------------------------------------------ broken files */

static uint32_t crc32_png(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* Offset of JPEG marker `m` (its 0xFF), or 0 when it is not before the scan. */
static size_t jpeg_marker(const uint8_t *j, size_t n, uint8_t m)
{
    size_t p = 2;
    while (p + 4 <= n && j[p] == 0xFF) {
        if (j[p + 1] == m) return p;
        if (j[p + 1] == 0xDA) return 0;
        p += 2 + ((size_t)j[p + 2] << 8 | j[p + 3]);
    }
    return 0;
}

enum {
    B_EMPTY,
    B_TRUNC_JPEG,
    B_TRUNC_HDR,
    B_TRUNC_PNG,
    B_RANDOM,
    B_HEADER_ONLY,
    B_BOMB_JPEG,
    B_BOMB_PNG,
    B_HEIC,
    B_TEXT,
    B_TRUNC_WEBP,
    B_TRUNC_GIF,
    B_TRUNC_BMP,
    B_TRUNC_TIFF,
    B_COUNT
};
static const char *const bname[B_COUNT] = {"empty.jpg",     "truncated.jpg",  "truncated-header.jpg",
                                           "truncated.png", "random.jpg",     "header-only.jpg",
                                           "bomb.jpg",      "bomb.png",       "heic.jpg",
                                           "notes.txt",     "truncated.webp", "truncated.gif",
                                           "truncated.bmp", "truncated.tif"};

static int write_broken(run_t *r, unsigned k)
{
    rng_t rg = stream(r->o->seed, (1ull << 63) | k);
    char name[64], msg[256];
    snprintf(name, sizeof name, "broken-%s", bname[k]);
    char *rel = rel_name(r, k, name);
    if (!rel) {
        fprintf(stderr, "rawgen: out of memory\n");
        return -1;
    }
    uint32_t w, h;
    pick_size(&rg, r->o, &w, &h);
    if (k == B_BOMB_JPEG || k == B_BOMB_PNG) w = h = 64; /* small inside, huge on paper */
    int rc = -1;
    unsigned long jl;
    size_t len;
    uint8_t buf[4096];
    if (!synth(&r->g, w, h, &rg)) {
        fprintf(stderr, "rawgen: out of memory\n");
        free(rel);
        return -1;
    }
    switch (k) {
    case B_EMPTY:
        rc = emit(r, rel, "", 0, 2);
        break;
    case B_TRUNC_WEBP:
    case B_TRUNC_GIF:
    case B_TRUNC_BMP:
    case B_TRUNC_TIFF: { /* cut in half: inside the image data (a TIFF's directory is at its end) */
        uint8_t *f = rg_encode((rg_format)(k - B_TRUNC_WEBP), r->g.rgb, w, h, 85, &len, msg, sizeof msg);
        if (f) rc = emit(r, rel, f, len / 2, 2);
        else fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
        free(f);
        break;
    }
    case B_TRUNC_JPEG:
    case B_TRUNC_HDR:
    case B_HEADER_ONLY:
    case B_BOMB_JPEG:
        if (jpeg_encode(&r->g, r->g.rgb, w, h, TJPF_RGB, TJSAMP_420, 85, 0, &jl, msg, sizeof msg)) {
            fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
            break;
        }
        if (k == B_TRUNC_JPEG) rc = emit(r, rel, r->g.jpg, jl / 2, 2);
        else if (k ==
                 B_TRUNC_HDR) { /* cut halfway through the first Huffman table: the header does not parse */
            size_t dht = jpeg_marker(r->g.jpg, jl, 0xC4);
            if (!dht) {
                fprintf(stderr, "rawgen: %s: no DHT marker in the encoded JPEG\n", rel);
                break;
            }
            rc =
                emit(r, rel, r->g.jpg, dht + 4 + ((size_t)r->g.jpg[dht + 2] << 8 | r->g.jpg[dht + 3]) / 2, 2);
        } else if (k ==
                   B_HEADER_ONLY) { /* everything up to and including the SOS header: no scan data, no EOI */
            size_t p = 2;
            while (p + 4 <= jl && r->g.jpg[p] == 0xFF && r->g.jpg[p + 1] != 0xDA)
                p += 2 + ((size_t)r->g.jpg[p + 2] << 8 | r->g.jpg[p + 3]);
            if (p + 4 <= jl) p += 2 + ((size_t)r->g.jpg[p + 2] << 8 | r->g.jpg[p + 3]);
            rc = emit(r, rel, r->g.jpg, p, 2);
        } else {
            size_t sof = jpeg_marker(r->g.jpg, jl, 0xC0);
            if (!sof) {
                fprintf(stderr, "rawgen: %s: no SOF0 marker in the encoded JPEG\n", rel);
                break;
            }
            uint8_t *s = r->g.jpg + sof + 5; /* FF C0, length (2), precision (1), height, width */
            s[0] = BOMB_SIDE >> 8, s[1] = BOMB_SIDE & 0xff, s[2] = BOMB_SIDE >> 8, s[3] = BOMB_SIDE & 0xff;
            rc = emit(r, rel, r->g.jpg, jl, 2);
        }
        break;
    case B_TRUNC_PNG:
    case B_BOMB_PNG: {
        uint8_t *png = png_encode(r->g.rgb, (size_t)w * h * 3, w, h, 8, SPNG_COLOR_TYPE_TRUECOLOR, NULL, &len,
                                  msg, sizeof msg);
        if (!png) {
            fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
            break;
        }
        if (k == B_TRUNC_PNG) rc = emit(r, rel, png, len / 2, 2);
        else { /* IHDR: signature (8), length (4), "IHDR" (4), width, height, ...; CRC after 13 data bytes */
            put_be32(png + 16, BOMB_SIDE);
            put_be32(png + 20, BOMB_SIDE);
            put_be32(png + 29, crc32_png(png + 12, 17));
            rc = emit(r, rel, png, len, 2);
        }
        free(png);
        break;
    }
    case B_RANDOM:
        for (size_t i = 0; i < sizeof buf; i += 8) {
            uint64_t v = next(&rg);
            memcpy(buf + i, &v, 8);
        }
        buf[0] = 0x00; /* no signature pack reads starts with 00 (FF, 89, R, G, B, I, M) */
        rc = emit(r, rel, buf, sizeof buf, 2);
        break;
    case B_HEIC: {
        /* what a phone saves and a user names .jpg: a HEIF file (its ftyp box;
         * pack reads no HEIF) */
        static const uint8_t heic[] = {0,   0,   0, 24, 'f', 't', 'y', 'p', 'h', 'e', 'i',
                                       'c', 0,   0, 0,  0,   'm', 'i', 'f', '1', 'h', 'e',
                                       'i', 'c', 0, 0,  0,   8,   'm', 'e', 't', 'a'};
        rc = emit(r, rel, heic, sizeof heic, 2);
        break;
    }
    case B_TEXT: {
        static const char text[] = "rawgen: this file is deliberately not an image.\n";
        rc = emit(r, rel, text, sizeof text - 1, 2);
        break;
    }
    default:
        break;
    }
    free(rel);
    return rc;
}

/* ------------------------------------------------------------ OUTDIR */

static bool is_class_name(const char *s)
{
    if (strncmp(s, "class", 5) || !s[5]) return false;
    for (s += 5; *s; s++)
        if (*s < '0' || *s > '9') return false;
    return true;
}

/* OUTDIR must be absent or empty; with --force it may hold an earlier rawgen
 * tree (only classNNN directories of plain files), which is removed. Anything
 * else is left alone. */
static int prepare_outdir(const opts *o)
{
    char *p = strdup(o->out);
    for (char *s = p + 1; p && *s; s++) { /* mkdir -p the parents */
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "rawgen: %s: cannot create directory: %s\n", p, strerror(errno));
            free(p);
            return -1;
        }
        *s = '/';
    }
    free(p);
    if (mkdir(o->out, 0755) == 0) return 0;
    if (errno != EEXIST) {
        fprintf(stderr, "rawgen: %s: cannot create directory: %s\n", o->out, strerror(errno));
        return -1;
    }
    DIR *d = opendir(o->out);
    if (!d) {
        fprintf(stderr, "rawgen: %s: cannot open directory: %s\n", o->out, strerror(errno));
        return -1;
    }
    struct dirent *de;
    bool empty = true, ours = true;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        empty = false;
        char *sub = NULL;
        struct stat st;
        if (!is_class_name(de->d_name) || asprintf(&sub, "%s/%s", o->out, de->d_name) < 0 ||
            lstat(sub, &st) != 0 || !S_ISDIR(st.st_mode)) {
            ours = false;
            free(sub);
            continue;
        }
        DIR *c = opendir(sub);
        struct dirent *f;
        while (c && (f = readdir(c))) {
            char *fp = NULL;
            if (!strcmp(f->d_name, ".") || !strcmp(f->d_name, "..")) continue;
            if (asprintf(&fp, "%s/%s", sub, f->d_name) < 0 || lstat(fp, &st) != 0 || !S_ISREG(st.st_mode))
                ours = false;
            free(fp);
        }
        if (!c) ours = false;
        else closedir(c);
        free(sub);
    }
    closedir(d);
    if (empty) return 0;
    if (!o->force) {
        fprintf(stderr, "rawgen: %s is not empty; use --force to replace an earlier rawgen tree\n", o->out);
        return -1;
    }
    if (!ours) {
        fprintf(
            stderr,
            "rawgen: %s holds files that rawgen did not write; not removing anything (even with --force)\n",
            o->out);
        return -1;
    }
    d = opendir(o->out);
    while (d && (de = readdir(d))) {
        if (!is_class_name(de->d_name)) continue;
        char *sub = NULL;
        if (asprintf(&sub, "%s/%s", o->out, de->d_name) < 0) continue;
        DIR *c = opendir(sub);
        struct dirent *f;
        while (c && (f = readdir(c))) {
            char *fp = NULL;
            if (strcmp(f->d_name, ".") && strcmp(f->d_name, "..") &&
                asprintf(&fp, "%s/%s", sub, f->d_name) >= 0)
                unlink(fp);
            free(fp);
        }
        if (c) closedir(c);
        if (rmdir(sub) != 0) {
            fprintf(stderr, "rawgen: %s: cannot remove: %s\n", sub, strerror(errno));
            free(sub);
            closedir(d);
            return -1;
        }
        free(sub);
    }
    if (d) closedir(d);
    return 0;
}

/* ------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    signal(SIGPIPE, SIG_IGN); /* a dying cjpeg is an error, not our death */
    run_t r;
    memset(&r, 0, sizeof r);
    r.o = &o;
    r.cwidth = 3;
    for (uint64_t c = o.classes - 1; c >= 1000; c /= 10) r.cwidth++;
    double t0 = cli_now();
    if (prepare_outdir(&o)) return CLI_EXIT_FAIL;
    for (uint64_t c = 0; c < o.classes; c++) {
        char *d = class_dir(&r, c), *p = NULL;
        if (!d || asprintf(&p, "%s/%s", o.out, d) < 0 || mkdir(p, 0755) != 0) {
            fprintf(stderr, "rawgen: %s: cannot create directory: %s\n", p ? p : o.out,
                    d ? strerror(errno) : "out of memory");
            free(d);
            free(p);
            return CLI_EXIT_FAIL;
        }
        free(d);
        free(p);
    }
    r.g.tj = tjInitCompress();
    r.g.jpg_cap = tjBufSize((int)o.max_side, (int)o.max_side, TJSAMP_444);
    r.g.jpg = tjAlloc((int)r.g.jpg_cap);
    if (!make_noise(&r.g, o.seed, (uint32_t)o.max_side)) {
        fprintf(stderr, "rawgen: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    if (!r.g.tj || !r.g.jpg) {
        fprintf(stderr, "rawgen: cannot initialise TurboJPEG\n");
        return CLI_EXIT_FAIL;
    }
    uint64_t total = o.images + (o.variants ? V_COUNT : 0) + (o.broken ? B_COUNT : 0);
    cli_progress_start_units(&r.bar, "rawgen", "files", total, o.quiet || o.json);
    rc = 0;
    for (uint64_t i = 0; !rc && i < o.images; i++) rc = write_image(&r, i);
    for (unsigned k = 0; !rc && o.variants && k < V_COUNT; k++) rc = write_variant(&r, k);
    for (unsigned k = 0; !rc && o.broken && k < B_COUNT; k++) rc = write_broken(&r, k);
    cli_progress_end(&r.bar);
    double el = cli_now() - t0;
    if (!rc && r.nskipped && !o.quiet)
        for (size_t k = 0; k < r.nskipped; k++)
            fprintf(stderr, "rawgen: " CJPEG " not found: skipped variant %s\n", r.skipped[k]);
    if (!rc && o.json) {
        printf("{\"ok\": true, \"files\": %llu, \"images\": %llu, \"variants\": %zu, \"broken\": %zu, "
               "\"classes\": %llu, "
               "\"bytes\": %llu, \"seconds\": %.3f, \"files_per_s\": %.1f, \"output\": ",
               (unsigned long long)r.files, (unsigned long long)o.images, r.nvariants, r.nbroken,
               (unsigned long long)o.classes, (unsigned long long)r.bytes, el,
               el > 0 ? (double)r.files / el : 0.0);
        cli_json_string(stdout, o.out);
        const char *keys[2] = {"variant_files", "broken_files"};
        for (int kind = 0; kind < 2; kind++) {
            printf(", \"%s\": [", keys[kind]);
            bool first = true;
            for (size_t k = 0; k < r.nextra; k++) {
                const char *base = strrchr(r.extra[k], '/');
                if (strncmp(base ? base + 1 : r.extra[k], kind ? "broken-" : "variant-", kind ? 7 : 8))
                    continue;
                printf(first ? "" : ", ");
                cli_json_string(stdout, r.extra[k]);
                first = false;
            }
            printf("]");
        }
        printf(", \"skipped_variants\": [");
        for (size_t k = 0; k < r.nskipped; k++) {
            printf(k ? ", " : "");
            cli_json_string(stdout, r.skipped[k]);
        }
        printf("]}\n");
    } else if (!rc && !o.quiet)
        fprintf(stderr,
                "rawgen: wrote %llu files (%llu images, %zu variants, %zu broken) to %s: %.1f MB in %.2f s "
                "(%.0f files/s)\n",
                (unsigned long long)r.files, (unsigned long long)o.images, r.nvariants, r.nbroken, o.out,
                (double)r.bytes / 1e6, el, el > 0 ? (double)r.files / el : 0.0);
    for (size_t k = 0; k < r.nextra; k++) free(r.extra[k]);
    free(r.extra);
    free(r.g.rgb);
    free(r.g.aux);
    free(r.g.grid);
    free(r.g.hrows);
    free(r.g.frow);
    free(r.g.noise);
    tjFree(r.g.jpg);
    tjDestroy(r.g.tj);
    return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
