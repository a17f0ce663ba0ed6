/* tools/rawgen_variants.c - rawgen --variants: one file of every JPEG and
 * PNG flavour a decoder must handle, and one of each other format pack reads. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rawgen.h"
#include "rawgen_formats.h"

extern char **environ;

/* Pipe a PPM of the current image through cjpeg ARGS into OUTDIR/rel. */
static int cjpeg_to(rg_run *r, const char *rel, uint32_t w, uint32_t h, int q, const char *a1, const char *a2,
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
    int e = posix_spawn(&pid, RG_CJPEG, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[0]);
    if (e) {
        fprintf(stderr, "rawgen: cannot run " RG_CJPEG ": %s\n", strerror(e));
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
        fprintf(stderr, "rawgen: %s: " RG_CJPEG " failed\n", path);
    else rc = rg_counted(r, rel, (uint64_t)sb.st_size, 1);
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
_Static_assert((int)V_COUNT == (int)RG_VARIANT_COUNT, "rawgen.h counts the variants");
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

int rg_write_variant(rg_run *r, unsigned k)
{
    rg_rng rg = rg_stream(r->o->seed, (1ull << 62) | k);
    uint32_t w, h;
    rg_pick_size(&rg, r->o, &w, &h);
    /* odd sides (where the range allows) exercise partial MCUs and odd chroma */
    if (!(w & 1) && w > r->o->min_side) w--;
    if (!(h & 1) && h > r->o->min_side) h--;
    int q = (int)rg_irange(&rg, 75, 95);
    char name[64], msg[256];
    snprintf(name, sizeof name, "variant-%s", vname[k]);
    char *rel = rg_rel_name(r, k, name);
    if (!rel || !rg_synth(&r->g, w, h, &rg)) {
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
        if (f) rc = rg_emit(r, rel, f, len, 1);
        else fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
        free(f);
        free(rel);
        return rc;
    }
    if (k >= V_PNG_GRAY && !rg_grow((void **)&r->g.aux, &r->g.aux_cap, npx * 6)) {
        fprintf(stderr, "rawgen: out of memory\n");
        free(rel);
        return -1;
    }
    if (k == V_CMYK && !rg_grow((void **)&r->g.aux, &r->g.aux_cap, npx * 4)) {
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
        if (!rg_jpeg_encode(&r->g, px, w, h, TJPF_RGB, samp, q, k == V_PROG ? TJFLAG_PROGRESSIVE : 0, &jl,
                            msg, sizeof msg))
            rc = rg_emit(r, rel, r->g.jpg, jl, 1);
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
        if (!rg_jpeg_encode(&r->g, aux, w, h, TJPF_CMYK, TJSAMP_444, q, 0, &jl, msg, sizeof msg))
            rc = rg_emit(r, rel, r->g.jpg, jl, 1);
        else fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
        break;
    case V_RST_ARITH:
    case V_RST:
        if (access(RG_CJPEG, X_OK) != 0) {
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
        png = rg_png_encode(aux, npx, w, h, 8, SPNG_COLOR_TYPE_GRAYSCALE, NULL, &len, msg, sizeof msg);
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
        png = rg_png_encode(aux, npx, w, h, 8, SPNG_COLOR_TYPE_INDEXED, &pl, &len, msg, sizeof msg);
        break;
    }
    case V_PNG_16: /* 16-bit samples: high byte the image, low byte fine detail. libspng
                    * 0.7 takes them in host byte order and writes them big-endian */
        for (size_t i = 0; i < npx * 3; i++) {
            uint16_t v = (uint16_t)(px[i] << 8 | (rg_next(&rg) & 0xff));
            memcpy(aux + 2 * i, &v, 2);
        }
        png = rg_png_encode(aux, npx * 6, w, h, 16, SPNG_COLOR_TYPE_TRUECOLOR, NULL, &len, msg, sizeof msg);
        break;
    case V_PNG_RGBA: /* alpha: a horizontal ramp from opaque to half transparent */
        for (size_t y = 0, i = 0; y < h; y++)
            for (size_t x = 0; x < w; x++, i++) {
                memcpy(&aux[4 * i], &px[3 * i], 3);
                aux[4 * i + 3] = (uint8_t)(255 - 128 * x / (w > 1 ? w - 1 : 1));
            }
        png = rg_png_encode(aux, npx * 4, w, h, 8, SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, NULL, &len, msg,
                            sizeof msg);
        break;
    default:
        break;
    }
    if (k >= V_PNG_GRAY) {
        if (png) rc = rg_emit(r, rel, png, len, 1);
        else fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
        free(png);
    }
    free(rel);
    return rc;
}
