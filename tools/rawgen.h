/* tools/rawgen.h - what rawgen's files share: the options, the run, the
 * generator's buffers and the calls between them. rawgen.c reads the command
 * line and drives the run; rawgen_variants.c and rawgen_broken.c write the
 * flavour and bad files, rawgen_write.c the images and every file (OUTDIR,
 * class directories, counting); below them all rawgen_synth.c (the
 * deterministic randomness and the image content) and rawgen_encode.c (JPEG
 * and PNG); rawgen_formats.c the other formats. Calls go that one way. */
#ifndef STOKER_TOOLS_RAWGEN_H
#define STOKER_TOOLS_RAWGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <spng.h>
#include <turbojpeg.h>

#include "cli.h"

#define RG_CJPEG "/usr/bin/cjpeg"
#define RG_BOMB_SIDE 30000u
/* The files --variants and --broken add (rawgen_variants.c, rawgen_broken.c). */
enum { RG_VARIANT_COUNT = 16, RG_BROKEN_COUNT = 14 };

/* rawgen's options, as read from the command line (rawgen.c). */
typedef struct {
    uint64_t images, classes, seed, min_side, max_side;
    bool variants, broken, force, json, quiet;
    const char *out;
} rg_opts;

/* A file's random stream (splitmix64). */
typedef struct {
    uint64_t s;
} rg_rng;


/* The generator's buffers, reused from file to file. */
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
} rg_gen;

/* One run: what it has written so far. */
typedef struct {
    const rg_opts *o;
    rg_gen g;
    uint64_t files, bytes;
    char **extra; /* variant and broken files written (relative paths), for --json */
    size_t nextra, nvariants, nbroken;
    const char *skipped[4];
    size_t nskipped;
    cli_progress bar;
    int cwidth;
} rg_run;


/* rawgen_synth.c: deterministic randomness and image content. */
uint64_t rg_next(rg_rng *r);
float rg_unif(rg_rng *r);                                /* [0, 1) */
uint32_t rg_irange(rg_rng *r, uint32_t lo, uint32_t hi); /* [lo, hi] */
rg_rng rg_stream(uint64_t seed, uint64_t index);
bool rg_grow(void **p, size_t *cap, size_t need);
bool rg_make_noise(rg_gen *g, uint64_t seed, uint32_t max_side);
bool rg_synth(rg_gen *g, uint32_t w, uint32_t h, rg_rng *r);
void rg_pick_size(rg_rng *r, const rg_opts *o, uint32_t *w, uint32_t *h);

/* rawgen_encode.c: JPEG (into g->jpg) and PNG (malloc'd). */
int rg_jpeg_encode(rg_gen *g, const uint8_t *px, uint32_t w, uint32_t h, int pf, int samp, int q, int flags,
                   unsigned long *len, char *msg, size_t cap);
void *rg_png_encode(const void *img, size_t len, uint32_t w, uint32_t h, uint8_t depth, uint8_t type,
                    struct spng_plte *plte, size_t *out, char *msg, size_t cap);

/* rawgen_write.c: OUTDIR, names, writing and counting files, the images. */
int rg_prepare_outdir(const rg_opts *o);
char *rg_class_dir(const rg_run *r, uint64_t c);
char *rg_rel_name(const rg_run *r, uint64_t cls, const char *name);
int rg_counted(rg_run *r, const char *rel, uint64_t len, int kind);
int rg_emit(rg_run *r, const char *rel, const void *data, size_t len, int kind);
int rg_write_image(rg_run *r, uint64_t i);

/* rawgen_variants.c, rawgen_broken.c: file k of each. */
int rg_write_variant(rg_run *r, unsigned k);
int rg_write_broken(rg_run *r, unsigned k);

#endif
