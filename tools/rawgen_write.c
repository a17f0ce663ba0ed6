/* tools/rawgen_write.c - rawgen's files: OUTDIR and its class directories,
 * writing and counting each file, and the images themselves. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rawgen.h"

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
int rg_prepare_outdir(const rg_opts *o)
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

char *rg_class_dir(const rg_run *r, uint64_t c)
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
int rg_counted(rg_run *r, const char *rel, uint64_t len, int kind)
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
int rg_emit(rg_run *r, const char *rel, const void *data, size_t len, int kind)
{
    char *path = NULL;
    if (asprintf(&path, "%s/%s", r->o->out, rel) < 0) return -1;
    int rc = write_all(path, data, len);
    free(path);
    return rc ? -1 : rg_counted(r, rel, len, kind);
}

char *rg_rel_name(const rg_run *r, uint64_t cls, const char *name)
{
    char *d = rg_class_dir(r, cls % r->o->classes), *s = NULL;
    if (d && asprintf(&s, "%s/%s", d, name) < 0) s = NULL;
    free(d);
    return s;
}

int rg_write_image(rg_run *r, uint64_t i)
{
    rg_rng rg = rg_stream(r->o->seed, i);
    uint32_t w, h;
    rg_pick_size(&rg, r->o, &w, &h);
    int q = (int)rg_irange(&rg, 75, 95);
    uint64_t kind = rg_next(&rg) % 64; /* 0,1: PNG; 2..7: 4:4:4; 8..13: 4:2:2; else 4:2:0 */
    if (!rg_synth(&r->g, w, h, &rg)) {
        fprintf(stderr, "rawgen: out of memory\n");
        return -1;
    }
    char name[64], msg[256];
    snprintf(name, sizeof name, "img-%08llu.%s", (unsigned long long)i, kind < 2 ? "png" : "jpg");
    char *rel = rg_rel_name(r, i, name);
    int rc = -1;
    if (!rel) fprintf(stderr, "rawgen: out of memory\n");
    else if (kind < 2) {
        size_t len;
        void *png = rg_png_encode(r->g.rgb, (size_t)w * h * 3, w, h, 8, SPNG_COLOR_TYPE_TRUECOLOR, NULL, &len,
                                  msg, sizeof msg);
        if (!png) fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
        else rc = rg_emit(r, rel, png, len, 0);
        free(png);
    } else {
        int samp = kind < 8 ? TJSAMP_444 : kind < 14 ? TJSAMP_422 : TJSAMP_420;
        unsigned long len;
        if (rg_jpeg_encode(&r->g, r->g.rgb, w, h, TJPF_RGB, samp, q, 0, &len, msg, sizeof msg))
            fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
        else rc = rg_emit(r, rel, r->g.jpg, len, 0);
    }
    free(rel);
    return rc;
}
