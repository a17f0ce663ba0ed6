/* bench/pack/decode_limit.c - the decode limit `pack` is measured against.
 *
 * Single-thread TurboJPEG decode of every JPEG under DIR to RGB at the DCT
 * scale pack itself would use for --size N (the largest of 1/2, 1/4, 1/8
 * that keeps the shorter side >= N, else 1/1: libjpeg-turbo 2.1's fast
 * scaling paths), with no resize and no writing. Files are loaded into
 * memory first; whole passes repeat until --seconds have elapsed.
 * --planes decodes the way pack does by default (--resample-space ycc):
 * full-size YCbCr and grayscale JPEGs to their planes (tjDecompressToYUVPlanes:
 * no chroma upsampling, no colour conversion), the others to RGB as above.
 * Prints: images/s, source MP/s, and "RESULT decode_limit <img/s>". */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>

typedef struct {
    unsigned char *data;
    unsigned long size;
} file_t;

typedef struct {
    file_t *f;
    size_t n, cap;
} set_t;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int is_jpeg(const unsigned char *d, unsigned long n)
{
    return n > 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff;
}

static void load(set_t *s, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = n > 0 ? malloc((size_t)n) : NULL;
    if (d && fread(d, 1, (size_t)n, f) == (size_t)n && is_jpeg(d, (unsigned long)n)) {
        if (s->n == s->cap) s->cap = s->cap ? 2 * s->cap : 1024, s->f = realloc(s->f, s->cap * sizeof *s->f);
        s->f[s->n++] = (file_t){d, (unsigned long)n};
    } else {
        free(d);
    }
    fclose(f);
}

static void walk(set_t *s, const char *dir, size_t max)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent **ents;
    closedir(d);
    int n = scandir(dir, &ents, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        char *p = NULL;
        if (ents[i]->d_name[0] != '.' && s->n < max && asprintf(&p, "%s/%s", dir, ents[i]->d_name) >= 0) {
            struct stat st;
            if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) walk(s, p, max);
            else if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) load(s, p);
        }
        free(p);
        free(ents[i]);
    }
    free(ents);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: decode_limit DIR [--size N] [--seconds S] [--max-images N] [--planes]\n");
        return 2;
    }
    int size = 256, planes = 0;
    double secs = 3;
    size_t max = 100000;
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--planes")) planes = 1;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--planes")) i--;
        else if (!strcmp(argv[i], "--size")) size = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds")) secs = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-images")) max = (size_t)atoll(argv[i + 1]);
    }
    set_t s = {0};
    walk(&s, argv[1], max);
    if (!s.n) {
        fprintf(stderr, "decode_limit: no JPEG files under %s\n", argv[1]);
        return 1;
    }
    tjhandle tj = tjInitDecompress();
    size_t cap = 0;
    unsigned char *out = NULL;
    double t0 = now(), el = 0, src_px = 0;
    size_t done = 0;
    while (el < secs) {
        for (size_t i = 0; i < s.n; i++) {
            int w, h, sub, cs;
            if (tjDecompressHeader3(tj, s.f[i].data, s.f[i].size, &w, &h, &sub, &cs)) continue;
            int shorter = w < h ? w : h, den = 1;
            while (den < 8 && (shorter + 2 * den - 1) / (2 * den) >= size)
                den *= 2; /* ceil(short / 2den) >= N */
            int sw = (w + den - 1) / den, sh = (h + den - 1) / den;
            if ((size_t)sw * sh * 3 > cap) cap = (size_t)sw * sh * 3, out = realloc(out, cap);
            int ycc = (cs == TJCS_YCbCr &&
                       (sub == TJSAMP_444 || sub == TJSAMP_422 || sub == TJSAMP_420 || sub == TJSAMP_440)) ||
                      (cs == TJCS_GRAY && sub == TJSAMP_GRAY);
            if (planes && den == 1 && ycc) {
                unsigned char *pl[3] = {out, NULL, NULL};
                for (int c = 1; c < 3 && sub != TJSAMP_GRAY; c++)
                    pl[c] = pl[c - 1] +
                            (size_t)tjPlaneWidth(c - 1, w, sub) * (size_t)tjPlaneHeight(c - 1, h, sub);
                tjDecompressToYUVPlanes(tj, s.f[i].data, s.f[i].size, pl, w, NULL, h, 0);
            } else {
                tjDecompress2(tj, s.f[i].data, s.f[i].size, out, sw, 0, sh, TJPF_RGB, 0);
            }
            src_px += (double)w * h;
            done++;
        }
        el = now() - t0;
    }
    printf("decode_limit: %zu JPEG files, %zu decodes%s in %.2f s at the DCT scale for --size %d: %.0f "
           "images/s, %.1f source MP/s\n",
           s.n, done, planes ? " (to planes where pack does)" : "", el, size, (double)done / el,
           src_px / el / 1e6);
    printf("RESULT decode_limit %.1f\n", (double)done / el);
    tjDestroy(tj);
    free(out);
    for (size_t i = 0; i < s.n; i++) free(s.f[i].data);
    free(s.f);
    return 0;
}
