/* packer/listing.c - ImageFolder trees and list files. */
#define _GNU_SOURCE
#include "listing.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "stoker/format.h"

#define MAX_DEPTH 64 /* symlinked directory cycles end here */

static int say(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int say(char *msg, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return -1;
}

typedef struct {
    char *dir, *name; /* relative directory ("" at the class root) and file name */
    int64_t label;
} item;

typedef struct {
    item *v;
    size_t n, cap;
} items;

static bool push(items *it, const char *dir, const char *name, int64_t label)
{
    if (it->n == it->cap) {
        size_t c = it->cap ? it->cap * 2 : 1024;
        item *v = realloc(it->v, c * sizeof *v);
        if (!v) return false;
        it->v = v;
        it->cap = c;
    }
    item *x = &it->v[it->n];
    x->dir = strdup(dir);
    x->name = strdup(name);
    x->label = label;
    if (!x->dir || !x->name) {
        free(x->dir), free(x->name);
        return false;
    }
    it->n++;
    return true;
}

static char *join(const char *a, const char *b)
{
    if (!*a) return strdup(b);
    char *p = NULL;
    return asprintf(&p, "%s/%s", a, b) < 0 ? NULL : p;
}

/* Whether entry de (at path) is a directory, following symlinks as
 * torchvision's os.walk(followlinks=True) does. The entry's type from
 * readdir settles it without a stat for plain files and directories: a
 * stat per file was a quarter of a million-file listing's time. */
static bool is_dir(const struct dirent *de, const char *path)
{
#ifdef DT_DIR
    if (de->d_type == DT_DIR) return true;
    if (de->d_type == DT_REG) return false;
#endif
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Walk root/rel recursively; every non-directory entry is an item. */
static int walk(const char *root, const char *rel, int64_t label, int depth, items *it, char *msg, size_t cap)
{
    char *full = join(root, rel);
    DIR *d = full ? opendir(full) : NULL;
    if (!d) {
        int rc = say(msg, cap, "%s: cannot read directory: %s", full ? full : rel, strerror(errno));
        free(full);
        return rc;
    }
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char *sub = join(rel, de->d_name), *path = join(full, de->d_name);
        if (!sub || !path) rc = say(msg, cap, "out of memory");
        else if (is_dir(de, path)) {
            rc = depth >= MAX_DEPTH ? say(msg, cap, "%s: directories nested deeper than %d (a symlink loop?)",
                                          path, MAX_DEPTH)
                                    : walk(root, sub, label, depth + 1, it, msg, cap);
        } else if (!push(it, rel, de->d_name, label)) {
            rc = say(msg, cap, "out of memory");
        }
        free(sub);
        free(path);
    }
    closedir(d);
    free(full);
    return rc;
}

/* torchvision: sorted(os.walk(class_dir)), then sorted(file names). */
static int cmp_item(const void *a, const void *b)
{
    const item *x = a, *y = b;
    if (x->label != y->label) return x->label < y->label ? -1 : 1;
    int c = strcmp(x->dir, y->dir);
    return c ? c : strcmp(x->name, y->name);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int load_folder(const char *root, pk_listing *l, char *msg, size_t cap)
{
    DIR *d = opendir(root);
    if (!d) return say(msg, cap, "%s: cannot read directory: %s", root, strerror(errno));
    items it = {0};
    size_t ccap = 0;
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char *path = join(root, de->d_name);
        if (!path) rc = say(msg, cap, "out of memory");
        else if (is_dir(de, path)) {
            if (l->nclasses == ccap) {
                ccap = ccap ? 2 * ccap : 64;
                char **c = realloc(l->classes, ccap * sizeof *c);
                if (!c) rc = say(msg, cap, "out of memory");
                else l->classes = c;
            }
            if (!rc && !(l->classes[l->nclasses++] = strdup(de->d_name))) rc = say(msg, cap, "out of memory");
        } else if (!push(&it, "", de->d_name,
                         -1)) { /* a file outside any class: skipped later, with a reason */
            rc = say(msg, cap, "out of memory");
        }
        free(path);
    }
    closedir(d);
    if (!rc && l->nclasses == 0)
        rc = say(msg, cap, "%s: no class directories (expected ROOT/CLASS/FILE)", root);
    if (!rc) qsort(l->classes, l->nclasses, sizeof *l->classes, cmp_str);
    for (size_t c = 0; !rc && c < l->nclasses; c++)
        rc = walk(root, l->classes[c], (int64_t)c, 1, &it, msg, cap);
    if (!rc) {
        if (it.n) qsort(it.v, it.n, sizeof *it.v, cmp_item); /* it.v is NULL when empty */
        l->e = calloc(it.n ? it.n : 1, sizeof *l->e);
        if (!l->e) rc = say(msg, cap, "out of memory");
    }
    for (size_t i = 0; i < it.n; i++) {
        if (!rc) {
            char *rel = join(it.v[i].dir, it.v[i].name);
            if (!rel) rc = say(msg, cap, "out of memory");
            else l->e[l->n++] = (pk_entry){rel, it.v[i].label};
        }
        free(it.v[i].dir);
        free(it.v[i].name);
    }
    free(it.v);
    return rc;
}

/* One CSV/TSV field starting at *p; handles "quoted ""fields""" in CSV. */
static char *next_field(char **p, char sep)
{
    char *s = *p, *out = s, *w = s;
    if (sep == ',' && *s == '"') {
        for (s++; *s; s++) {
            if (*s == '"' && s[1] == '"') *w++ = '"', s++;
            else if (*s == '"') {
                s++;
                break;
            } else *w++ = *s;
        }
        while (*s && *s != sep) s++;
    } else {
        while (*s && *s != sep) *w++ = *s++;
    }
    *p = *s ? s + 1 : s;
    *w = 0;
    return out;
}

static bool parse_i64(const char *s, int64_t *v)
{
    if (!*s) return false;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || *end) return false;
    *v = x;
    return true;
}

typedef struct {
    char **path, **label;
    size_t n, cap;
} rows;

static int read_rows(FILE *f, const char *file, char sep, rows *r, char *msg, size_t cap)
{
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    int pcol = -1, lcol = -1, rc = 0;
    for (size_t lineno = 1; !rc && (len = getline(&line, &lcap, f)) >= 0; lineno++) {
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (lineno > 1 && len == 0) continue;
        char *p = line, *path = NULL, *label = NULL;
        for (int col = 0; *p || col == 0; col++) {
            char *v = next_field(&p, sep);
            if (lineno == 1) {
                if (!strcmp(v, "path")) pcol = col;
                if (!strcmp(v, "label")) lcol = col;
            } else if (col == pcol) path = v;
            else if (col == lcol) label = v;
            if (!*p) break;
        }
        if (lineno == 1) {
            if (pcol < 0 || lcol < 0)
                rc = say(msg, cap, "%s: line 1: header must name the columns 'path' and 'label'", file);
            continue;
        }
        if (!path || !*path || !label || !*label) {
            rc = say(msg, cap, "%s: line %zu: missing path or label", file, lineno);
            continue;
        }
        if (r->n == r->cap) {
            size_t c = r->cap ? 2 * r->cap : 1024;
            char **np = realloc(r->path, c * sizeof *np);
            if (np) r->path = np;
            char **nl = np ? realloc(r->label, c * sizeof *nl) : NULL;
            if (nl) r->label = nl;
            if (!np || !nl) {
                rc = say(msg, cap, "out of memory");
                break;
            }
            r->cap = c;
        }
        r->path[r->n] = strdup(path);
        r->label[r->n] = strdup(label);
        if (!r->path[r->n] || !r->label[r->n]) {
            free(r->path[r->n]), free(r->label[r->n]);
            rc = say(msg, cap, "out of memory");
            break;
        }
        r->n++;
    }
    free(line);
    return rc;
}

static int load_file(const char *file, pk_listing *l, char *msg, size_t cap)
{
    size_t n = strlen(file);
    char sep = n > 4 && !strcasecmp(file + n - 4, ".tsv") ? '\t' : ',';
    FILE *f = fopen(file, "r");
    if (!f) return say(msg, cap, "%s: cannot open: %s", file, strerror(errno));
    rows r = {0};
    int rc = read_rows(f, file, sep, &r, msg, cap);
    fclose(f);
    bool numeric = true;
    int64_t v;
    for (size_t i = 0; i < r.n && numeric; i++) numeric = parse_i64(r.label[i], &v);
    if (!rc && !numeric) { /* class names: number them in sorted order */
        char **sorted = malloc((r.n ? r.n : 1) * sizeof *sorted);
        if (!sorted) rc = say(msg, cap, "out of memory");
        for (size_t i = 0; !rc && i < r.n; i++) sorted[i] = r.label[i];
        if (!rc) qsort(sorted, r.n, sizeof *sorted, cmp_str);
        l->classes = calloc(r.n ? r.n : 1, sizeof *l->classes);
        for (size_t i = 0; !rc && l->classes && i < r.n; i++)
            if (!l->nclasses || strcmp(l->classes[l->nclasses - 1], sorted[i]))
                l->classes[l->nclasses++] = strdup(sorted[i]);
        free(sorted);
    }
    l->e = calloc(r.n ? r.n : 1, sizeof *l->e);
    for (size_t i = 0; i < r.n; i++) {
        if (!rc && l->e) {
            int64_t lab = -1;
            if (numeric) parse_i64(r.label[i], &lab);
            else {
                char **hit = bsearch(&r.label[i], l->classes, l->nclasses, sizeof *l->classes, cmp_str);
                lab = hit ? hit - l->classes : -1;
            }
            l->e[l->n++] = (pk_entry){r.path[i], lab};
        } else {
            free(r.path[i]);
        }
        free(r.label[i]);
    }
    free(r.path);
    free(r.label);
    if (!rc && !l->e) rc = say(msg, cap, "out of memory");
    return rc;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF):
 * class names go into the manifest's JSON. */
static bool utf8_ok(const unsigned char *s)
{
    while (*s) {
        unsigned n = *s < 0x80             ? 0
                     : (*s & 0xe0) == 0xc0 ? 1
                     : (*s & 0xf0) == 0xe0 ? 2
                     : (*s & 0xf8) == 0xf0 ? 3
                                           : 4;
        if (n == 4 || (n == 1 && *s < 0xc2)) return false;
        unsigned cp = n ? *s & (0x3f >> n) : *s;
        for (unsigned k = 1; k <= n; k++) {
            if ((s[k] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (s[k] & 0x3f);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return false;
        s += n + 1;
    }
    return true;
}

/* What every listing must satisfy before anything is decoded. */
static int check_listing(const char *input, const pk_listing *l, char *msg, size_t cap)
{
    for (size_t c = 0; c < l->nclasses; c++)
        if (!utf8_ok((const unsigned char *)l->classes[c]))
            return say(
                msg, cap,
                "%s: class name \"%.64s\" is not valid UTF-8 (rename it: class names go into the manifest)",
                input, l->classes[c]);
    for (size_t i = 0; l->kind == PK_LIST_FILE && i < l->n; i++)
        if (l->e[i].label < 0)
            return say(msg, cap, "%s: entry %zu (%.200s): label %lld is negative", input, i + 1, l->e[i].path,
                       (long long)l->e[i].label);
    return 0;
}

int pk_listing_load(const char *input, pk_listing *l, char *msg, size_t cap)
{
    memset(l, 0, sizeof *l);
    struct stat st;
    if (stat(input, &st) != 0) return say(msg, cap, "%s: %s", input, strerror(errno));
    int rc;
    if (S_ISDIR(st.st_mode)) {
        l->kind = PK_LIST_IMAGEFOLDER;
        l->root = strdup(input);
        rc = load_folder(input, l, msg, cap);
    } else {
        l->kind = PK_LIST_FILE;
        const char *slash = strrchr(input, '/');
        l->root = slash ? strndup(input, (size_t)(slash - input) + (slash == input)) : strdup(".");
        rc = load_file(input, l, msg, cap);
    }
    if (!rc && l->n == 0) rc = say(msg, cap, "%s: no input files", input);
    if (!rc) rc = check_listing(input, l, msg, cap);
    if (rc) pk_listing_free(l);
    return rc;
}

void pk_listing_free(pk_listing *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->e[i].path);
    for (size_t i = 0; i < l->nclasses; i++) free(l->classes[i]);
    free(l->e);
    free(l->classes);
    free(l->root);
    memset(l, 0, sizeof *l);
}

char *pk_listing_path(const pk_listing *l, size_t i)
{
    if (l->e[i].path[0] == '/') return strdup(l->e[i].path);
    return join(l->root, l->e[i].path);
}

uint64_t pk_listing_hash(const pk_listing *l)
{
    /* Hash a canonical text form; a streaming hash is not in the public API
     * and the listing is hashed once per run. */
    size_t total = 1;
    for (size_t i = 0; i < l->n; i++) total += strlen(l->e[i].path) + 24;
    for (size_t i = 0; i < l->nclasses; i++) total += strlen(l->classes[i]) + 1;
    char *buf = malloc(total), *p = buf;
    if (!buf) return 0;
    for (size_t i = 0; i < l->n; i++) p += sprintf(p, "%s\t%lld\n", l->e[i].path, (long long)l->e[i].label);
    for (size_t i = 0; i < l->nclasses; i++) p += sprintf(p, "%s\n", l->classes[i]);
    uint64_t h = stk_hash(buf, (size_t)(p - buf));
    free(buf);
    return h;
}
