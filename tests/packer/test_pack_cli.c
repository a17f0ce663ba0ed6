/* tests/packer/test_pack_cli.c - pack (and rawgen) from the outside.
 *
 * Raw inputs come from rawgen (small images, so an ASan build stays fast);
 * pack runs as a user runs it (system(), exit codes, stderr), and its output
 * is read back through libstoker and compared with an independent decode,
 * with other runs of pack, and with the files it was made from.
 *
 * Environment (set by ctest): STOKER_TEST_TMP, STOKER_TOOLS (rawgen, shardcheck),
 * STOKER_PACK (the pack binary; default $STOKER_TOOLS/../packer/pack). */
#define _GNU_SOURCE
#define STOKER_ADVANCED_API /* stk_dir_lock_take: a writer holding OUTDIR */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "cli_util.h"
#include "stoker/reader.h"

static char pack[1100]; /* tu_tools + "/../packer/pack" */

/* cli_util's scratch directory and tu_tools, plus the pack binary. */
static void setup_pack(void)
{
    tu_cli_setup();
    const char *p = getenv("STOKER_PACK");
    if (p && *p) snprintf(pack, sizeof pack, "%s", p);
    else snprintf(pack, sizeof pack, "%s/../packer/pack", tu_tools);
    ck_assert_msg(access(pack, X_OK) == 0, "pack not found at %s (set STOKER_PACK)", pack);
}

static char *path_in(const char *rel)
{
    char *p = NULL;
    ck_assert(asprintf(&p, "%s/%s", tu_tmp, rel) >= 0);
    return p;
}

/* Whole file (relative to tu_tmp), NUL-terminated, malloc'd; *len may be NULL. */
static char *slurp_n(const char *rel, size_t *len)
{
    char *path = path_in(rel);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert(buf != NULL);
    ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = 0;
    if (len) *len = (size_t)n;
    free(path);
    return buf;
}

static char *slurp_own(const char *rel) { return slurp_n(rel, NULL); }

/* Assert that the file `rel` (e.g. err.txt) contains `needle`. */
static void expect_in(const char *rel, const char *needle)
{
    char *s = slurp_own(rel);
    bool ok = strstr(s, needle) != NULL;
    free(s);
    ck_assert_msg(ok, "'%s' not found in %s", needle, rel);
}

/* Check's messages have a size limit: the first 1500 bytes of s, for a
 * message (a static copy; s is freed when it came from slurp). */
static const char *clip_(char *s, bool owned)
{
    static char buf[4][1600];
    static int k;
    char *b = buf[k++ & 3];
    snprintf(b, 1500, "%s", s);
    if (strlen(s) >= 1499) strcpy(b + 1490, "\n[...]");
    if (owned) free(s);
    return b;
}
#define clip(s) clip_((s), false)
#define clipf(s) clip_((s), true)

static bool exists(const char *rel)
{
    char *p = path_in(rel);
    bool e = access(p, F_OK) == 0;
    free(p);
    return e;
}

static int count_substr(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* Number of files matching a glob pattern relative to tu_tmp. */
static size_t count_glob(const char *pattern)
{
    char *p = path_in(pattern);
    glob_t g;
    size_t n = glob(p, 0, NULL, &g) == 0 ? g.gl_pathc : 0;
    if (n) globfree(&g);
    free(p);
    return n;
}

/* The lines of a TSV file (without its header line), split in place. */
typedef struct {
    char *text;
    char **line;
    size_t n;
} lines_t;

static lines_t read_lines(const char *rel, bool header)
{
    lines_t L = {slurp_own(rel), NULL, 0};
    size_t cap = (size_t)tu_count_lines(L.text) + 1;
    L.line = calloc(cap, sizeof *L.line);
    ck_assert(L.line != NULL);
    char *save = NULL, *s = L.text;
    for (char *t = strtok_r(s, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) L.line[L.n++] = t;
    if (header) {
        ck_assert_msg(L.n >= 1, "%s: no header line", rel);
        memmove(L.line, L.line + 1, (L.n - 1) * sizeof *L.line);
        L.n--;
    }
    return L;
}

static void free_lines(lines_t *L)
{
    free(L->text);
    free(L->line);
}

/* rawgen with --json; returns its parsed output. */
static json_t *rawgen(const char *args, const char *dir)
{
    int rc = tu_sh("'%s/rawgen' --json %s %s", tu_tools, args, dir);
    char *err = slurp_own("err.txt");
    ck_assert_msg(rc == 0, "rawgen %s failed (%d): %s", args, rc, clip(err));
    free(err);
    char *out = slurp_own("out.txt");
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    ck_assert_msg(j != NULL, "rawgen --json output does not parse: %s", je.text);
    free(out);
    return j;
}

static stk_dataset *open_ds(const char *rel)
{
    char *p = path_in(rel);
    stk_error err;
    stk_dataset *ds = stk_dataset_open(p, &err);
    ck_assert_msg(ds != NULL, "cannot open dataset %s: %s", p, err.msg);
    free(p);
    return ds;
}

static unsigned field(const stk_dataset *ds, const char *name)
{
    int f = stk_schema_find(stk_dataset_schema(ds), name);
    ck_assert_msg(f >= 0, "dataset has no field '%s'", name);
    return (unsigned)f;
}

static const void *value(const stk_dataset *ds, unsigned f, uint64_t i, uint64_t expect_size)
{
    const void *p;
    uint64_t size;
    stk_error err;
    ck_assert_msg(stk_dataset_value(ds, f, i, &p, &size, &err) == 0, "record %llu: %s", (unsigned long long)i,
                  err.msg);
    ck_assert_uint_eq(size, expect_size);
    return p;
}

typedef struct {
    int64_t label;
    uint32_t size[2];
    uint64_t source;
    const uint8_t *image;
} rec_t;

static rec_t record(const stk_dataset *ds, uint64_t i, uint32_t n)
{
    rec_t r;
    r.image = value(ds, field(ds, "image"), i, (uint64_t)n * n * 3);
    memcpy(&r.label, value(ds, field(ds, "label"), i, 8), 8);
    memcpy(r.size, value(ds, field(ds, "orig_size"), i, 8), 8);
    memcpy(&r.source, value(ds, field(ds, "source"), i, 8), 8);
    return r;
}

/* Full-size RGB decode of a JPEG with TurboJPEG (malloc'd). */
static uint8_t *decode_jpeg(const char *rel, int *w, int *h)
{
    size_t len;
    char *data = slurp_n(rel, &len);
    tjhandle tj = tjInitDecompress();
    int sub, cs;
    ck_assert_msg(tjDecompressHeader3(tj, (unsigned char *)data, len, w, h, &sub, &cs) == 0, "%s: %s", rel,
                  tjGetErrorStr2(tj));
    uint8_t *px = malloc((size_t)*w * *h * 3);
    ck_assert(px != NULL);
    ck_assert_msg(tjDecompress2(tj, (unsigned char *)data, len, px, *w, 0, *h, TJPF_RGB, 0) == 0, "%s: %s",
                  rel, tjGetErrorStr2(tj));
    tjDestroy(tj);
    free(data);
    return px;
}

/* ------------------------------------------------------------ help, rawgen */

START_TEST(help_version_and_rawgen)
{
    setup_pack();
    ck_assert_int_eq(tu_sh("'%s' --help", pack), 0);
    char *s = slurp_own("out.txt");
    ck_assert_ptr_nonnull(strstr(s, "Exit status"));
    free(s);
    ck_assert_int_eq(tu_sh("'%s' --version", pack), 0);
    s = slurp_own("out.txt");
    ck_assert_ptr_nonnull(strstr(s, "pack (stoker)"));
    free(s);
    /* rawgen: documented exit codes, byte-identical output for the same flags */
    ck_assert_int_eq(tu_sh("'%s/rawgen' --help", tu_tools), 0);
    s = slurp_own("out.txt");
    ck_assert_ptr_nonnull(strstr(s, "Exit status"));
    free(s);
    ck_assert_int_eq(tu_sh("'%s/rawgen' --bogus x", tu_tools), 2);
    ck_assert_int_eq(tu_sh("'%s/rawgen' --min-side 9 --max-side 8 x", tu_tools), 2);
    ck_assert_int_eq(tu_sh("'%s/rawgen'", tu_tools), 2);
    const char *args = "-n 30 --classes 4 --seed 7 --min-side 40 --max-side 90 --variants --broken";
    json_decref(rawgen(args, "a"));
    json_t *j = rawgen(args, "b");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "images")), 30);
    ck_assert_int_eq(json_array_size(json_object_get(j, "broken_files")), 14);
    if (access("/usr/bin/cjpeg", X_OK) == 0)
        ck_assert_int_eq(json_array_size(json_object_get(j, "variant_files")), 16);
    json_decref(j);
    ck_assert_int_eq(tu_sh("diff -r a b"), 0);
    ck_assert_int_eq(tu_sh("'%s/rawgen' -q -n 3 a", tu_tools), 1); /* not empty */
    s = slurp_own("err.txt");
    ck_assert_ptr_nonnull(strstr(s, "--force"));
    free(s);
    ck_assert_int_eq(tu_sh("'%s/rawgen' -q -n 3 --force a && test $(find a -type f | wc -l) = 3", tu_tools),
                     0);
    ck_assert_int_eq(tu_sh("mkdir -p c && touch c/mine && '%s/rawgen' -q -n 3 --force c", tu_tools),
                     1); /* not ours */
    ck_assert(exists("c/mine"));
}
END_TEST

/* ------------------------------------------------------------ a. variants and broken files */

static bool any_of(const char *s, const char *const *needles)
{
    for (; *needles; needles++)
        if (strstr(s, *needles)) return true;
    return false;
}

START_TEST(variants_packed_broken_skipped)
{
    setup_pack();
    json_t *j = rawgen("-n 40 --classes 3 --min-side 64 --max-side 160 --variants --broken", "raw");
    json_t *variants = json_object_get(j, "variant_files"), *broken = json_object_get(j, "broken_files");
    size_t nfiles = (size_t)json_integer_value(json_object_get(j, "files"));
    ck_assert_int_eq(json_array_size(broken), 14);
    ck_assert_int_eq(tu_sh("'%s' -q --size 32 --records-per-shard 16 -j2 raw ds", pack), 3);
    char *err = slurp_own("err.txt");
    lines_t skipped = read_lines("ds/skipped.tsv", true), listing = read_lines("ds/listing.tsv", true);
    ck_assert_int_eq(skipped.n, json_array_size(broken));
    ck_assert_int_eq(listing.n, nfiles);

    static const char *const corrupt[] = {"corrupt", "truncated", "Premature end", NULL};
    static const char *const unsupported[] = {"unsupported image format", NULL};
    static const char *const empty[] = {"empty file", NULL};
    static const char *const bomb[] = {"--max-pixels", NULL};
    static const struct {
        const char *name;
        const char *const *reason;
    } expect[] = {{"broken-empty.jpg", empty},        {"broken-truncated.jpg", corrupt},
                  {"broken-truncated.png", corrupt},  {"broken-truncated-header.jpg", corrupt},
                  {"broken-random.jpg", unsupported}, {"broken-header-only.jpg", corrupt},
                  {"broken-bomb.jpg", bomb},          {"broken-bomb.png", bomb},
                  {"broken-heic.jpg", unsupported},   {"broken-notes.txt", unsupported},
                  {"broken-truncated.webp", corrupt}, {"broken-truncated.gif", corrupt},
                  {"broken-truncated.bmp", corrupt},  {"broken-truncated.tif", corrupt}};
    size_t i;
    json_t *v;
    json_array_foreach(broken, i, v)
    {
        const char *rel = json_string_value(v), *base = strrchr(rel, '/') + 1;
        /* named on stderr, one line */
        char needle[512];
        snprintf(needle, sizeof needle, "raw/%s: ", rel);
        ck_assert_msg(count_substr(err, needle) == 1, "%s should be named once on stderr:\n%s", rel,
                      clip(err));
        /* listed in skipped.tsv with the right kind of reason */
        const char *reason = NULL;
        for (size_t k = 0; k < skipped.n; k++)
            if (!strncmp(skipped.line[k], rel, strlen(rel)) && skipped.line[k][strlen(rel)] == '\t')
                reason = skipped.line[k] + strlen(rel) + 1;
        ck_assert_msg(reason != NULL, "%s not in skipped.tsv", rel);
        bool known = false;
        for (size_t k = 0; k < sizeof expect / sizeof *expect; k++)
            if (!strcmp(base, expect[k].name)) {
                known = true;
                ck_assert_msg(any_of(reason, expect[k].reason), "%s: unexpected reason '%s'", rel, reason);
            }
        ck_assert_msg(known, "rawgen wrote an unexpected broken file %s", rel);
    }
    /* every variant was packed: in listing.tsv, not in skipped.tsv */
    json_array_foreach(variants, i, v)
    {
        const char *rel = json_string_value(v);
        char tab[512];
        snprintf(tab, sizeof tab, "%s\t", rel);
        ck_assert_msg(!strstr(err, rel), "variant %s was reported:\n%s", rel, clip(err));
        for (size_t k = 0; k < skipped.n; k++)
            ck_assert_msg(strncmp(skipped.line[k], tab, strlen(tab)), "variant %s skipped", rel);
        bool listed = false;
        for (size_t k = 0; k < listing.n; k++) {
            const char *p = strrchr(listing.line[k], '\t');
            listed |= p && !strcmp(p + 1, rel);
        }
        ck_assert_msg(listed, "variant %s not in listing.tsv", rel);
    }
    if (access("/usr/bin/cjpeg", X_OK) == 0) ck_assert_int_eq(json_array_size(variants), 16);
    ck_assert_int_eq(count_substr(err, "pack: raw/"), (int)json_array_size(broken));
    /* records + skipped == listed */
    stk_error e;
    char *dir = path_in("ds");
    stk_manifest *m = stk_manifest_load(dir, &e);
    ck_assert_msg(m != NULL, "%s", e.msg);
    ck_assert_uint_eq(m->record_count + skipped.n, nfiles);
    ck_assert_uint_eq(m->nclasses, 3);
    stk_manifest_free(m);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --full ds", tu_tools), 0);
    free(dir);
    free(err);
    free_lines(&skipped);
    free_lines(&listing);
    json_decref(j);
}
END_TEST

/* ------------------------------------------------------------ a bad file leaves no trace */

/* Each broken file, then a good JPEG, through ONE worker thread (-j1): the
 * good files must come out exactly as when packed without the broken ones
 * (same orig_size, same pixels). A decoder that keeps state from a failed
 * file (TurboJPEG 2.1 does after a failed header read) fails this. */
START_TEST(bad_input_does_not_poison_next)
{
    setup_pack();
    json_t *j = rawgen("-n 16 --classes 1 --min-side 40 --max-side 90 --broken", "raw");
    json_t *broken = json_object_get(j, "broken_files");
    ck_assert_int_eq(
        tu_sh("sh -c \"cd raw && find . -name 'img-*.jpg' | sed 's#^./##' | sort > ../good.txt\""), 0);
    lines_t good = read_lines("good.txt", false);
    ck_assert_int_ge(good.n, json_array_size(broken));
    /* a JPEG cut inside its tables too, made here, whatever rawgen does */
    ck_assert_int_eq(tu_sh("head -c 120 raw/%s > cut.jpg", good.line[0]), 0);
    char *mixed = path_in("mixed.csv"), *clean = path_in("clean.csv");
    FILE *m = fopen(mixed, "w"), *c = fopen(clean, "w");
    ck_assert(m && c);
    fprintf(m, "path,label\n");
    fprintf(c, "path,label\n");
    size_t i;
    json_t *v;
    json_array_foreach(broken, i, v)
    {
        fprintf(m, "raw/%s,0\ncut.jpg,0\nraw/%s,0\n", json_string_value(v), good.line[i]);
        fprintf(c, "raw/%s,0\n", good.line[i]);
    }
    fclose(m);
    fclose(c);
    ck_assert_int_eq(tu_sh("'%s' -q -j1 --size 24 mixed.csv mixed", pack), 3);
    ck_assert_int_eq(tu_sh("'%s' -q -j1 --size 24 clean.csv clean", pack), 0);
    stk_dataset *a = open_ds("mixed"), *b = open_ds("clean");
    ck_assert_uint_eq(stk_dataset_records(a), json_array_size(broken));
    ck_assert_uint_eq(stk_dataset_records(b), json_array_size(broken));
    for (uint64_t k = 0; k < stk_dataset_records(b); k++) {
        rec_t x = record(a, k, 24), y = record(b, k, 24);
        ck_assert_msg(x.source == 3 * k + 2, "record %llu: source %llu, want %llu (a good file was skipped?)",
                      (unsigned long long)k, (unsigned long long)x.source, (unsigned long long)(3 * k + 2));
        ck_assert_msg(!memcmp(x.size, y.size, 8) && !memcmp(x.image, y.image, 24 * 24 * 3),
                      "%s after %s: orig_size %ux%u (alone: %ux%u)%s", good.line[k],
                      json_string_value(json_array_get(broken, k)), x.size[0], x.size[1], y.size[0],
                      y.size[1], memcmp(x.image, y.image, 24 * 24 * 3) ? ", pixels differ" : "");
    }
    stk_dataset_close(a);
    stk_dataset_close(b);
    free(mixed);
    free(clean);
    free_lines(&good);
    json_decref(j);
}
END_TEST

/* ------------------------------------------------------------ b. pixels */

/* Python's round() of x.0 or x.5: half to even. */
static uint64_t round_half_even(double x)
{
    double f = floor(x), d = x - f;
    uint64_t r = (uint64_t)f;
    return d > 0.5 || (d == 0.5 && (r & 1)) ? r + 1 : r;
}

/* Reference for --resize shorter: the geometry image.h documents
 * (torchvision Resize + CenterCrop), with a plain area-average (box) filter
 * over the full-size decode: each output pixel is the mean of the source
 * area it covers, fractional pixels weighted by coverage. Deliberately not
 * pack's filter (antialiased bilinear) nor its DCT-scaled decode. `shift`
 * moves the crop window by that many resized pixels along the longer side. */
static void reference_shorter(const uint8_t *src, int w, int h, uint32_t n, int64_t shift, uint8_t *out)
{
    uint64_t rw, rh;
    if (w <= h) rw = n, rh = (uint64_t)((double)n * h / w);
    else rh = n, rw = (uint64_t)((double)n * w / h);
    uint64_t cx = round_half_even((double)(rw - n) / 2.0), cy = round_half_even((double)(rh - n) / 2.0);
    if (rw > n) cx = (uint64_t)((int64_t)cx + shift); /* shift: move the crop along the longer side (tests) */
    else cy = (uint64_t)((int64_t)cy + shift);
    double sx = (double)w / (double)rw, sy = (double)h / (double)rh;
    for (uint32_t j = 0; j < n; j++) {
        double y0 = (double)(cy + j) * sy, y1 = y0 + sy;
        for (uint32_t i = 0; i < n; i++) {
            double x0 = (double)(cx + i) * sx, x1 = x0 + sx, acc[3] = {0, 0, 0}, area = 0;
            for (int y = (int)y0; y < h && y < y1; y++) {
                double wy = fmin(y1, y + 1.0) - fmax(y0, (double)y);
                for (int x = (int)x0; x < w && x < x1; x++) {
                    double wgt = wy * (fmin(x1, x + 1.0) - fmax(x0, (double)x));
                    if (wgt <= 0) continue;
                    for (int k = 0; k < 3; k++) acc[k] += wgt * src[((size_t)y * w + x) * 3 + k];
                    area += wgt;
                }
            }
            for (int k = 0; k < 3; k++) out[((size_t)j * n + i) * 3 + k] = (uint8_t)(acc[k] / area + 0.5);
        }
    }
}

static double mean_abs_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    double sum = 0;
    for (size_t k = 0; k < n; k++) sum += abs((int)a[k] - (int)b[k]);
    return sum / (double)n;
}

START_TEST(pixels_match_reference)
{
    setup_pack();
    json_decref(rawgen("-n 24 --classes 3 --min-side 64 --max-side 160 --seed 5", "raw"));
    const uint32_t N = 48;
    ck_assert_int_eq(tu_sh("'%s' -q --size 48 -j2 raw ds", pack), 0);
    stk_dataset *ds = open_ds("ds");
    const stk_manifest *m = stk_dataset_manifest(ds);
    lines_t listing = read_lines("ds/listing.tsv", true);
    ck_assert_uint_eq(stk_dataset_records(ds), 24);
    uint8_t *ref = malloc((size_t)N * N * 3);
    int checked = 0, crops = 0;
    double worst = 0, total = 0;
    for (uint64_t i = 0; i < stk_dataset_records(ds); i++) {
        rec_t r = record(ds, i, N);
        /* source points at the right listing.tsv line: "index<TAB>label<TAB>path" */
        ck_assert_uint_lt(r.source, listing.n);
        unsigned long long idx;
        long long lab;
        char rel[512];
        ck_assert_int_eq(sscanf(listing.line[r.source], "%llu\t%lld\t%511s", &idx, &lab, rel), 3);
        ck_assert_uint_eq(idx, r.source);
        ck_assert_int_eq(lab, r.label);
        /* label == the class index of the file's directory */
        ck_assert(r.label >= 0 && (size_t)r.label < m->nclasses);
        char *slash = strchr(rel, '/');
        ck_assert_ptr_nonnull(slash);
        ck_assert_msg(!strncmp(rel, m->classes[r.label], (size_t)(slash - rel)) &&
                          strlen(m->classes[r.label]) == (size_t)(slash - rel),
                      "record %llu: label %lld (%s) but file %s", (unsigned long long)i, (long long)r.label,
                      m->classes[r.label], rel);
        char want_dir[64];
        snprintf(want_dir, sizeof want_dir, "class%03lld/",
                 (long long)r.label); /* rawgen's classes sort numerically */
        ck_assert_msg(!strncmp(rel, want_dir, strlen(want_dir)), "record %llu: label %lld, file %s",
                      (unsigned long long)i, (long long)r.label, rel);
        size_t len = strlen(rel);
        if (len < 4 || strcmp(rel + len - 4, ".jpg")) continue; /* the reference decode is TurboJPEG's */
        char src[600];
        snprintf(src, sizeof src, "raw/%s", rel);
        int w, h;
        uint8_t *px = decode_jpeg(src, &w, &h);
        ck_assert_uint_eq(r.size[0], (uint32_t)w);
        ck_assert_uint_eq(r.size[1], (uint32_t)h);
        reference_shorter(px, w, h, N, 0, ref);
        /* Tolerance: mean |packed - reference| <= 3 levels over all N*N*3
         * samples. The filters differ (box vs antialiased bilinear, full vs
         * DCT-scaled decode) by 1-2.6 levels on rawgen's noisy content; a
         * flip, swapped channels, a missing antialias (the noise comes
         * through) or a grossly wrong crop is far over. */
        double mad = mean_abs_diff(r.image, ref, (size_t)N * N * 3);
        ck_assert_msg(mad <= 3.0, "record %llu (%s, %dx%d): mean abs difference %.2f > 3 levels",
                      (unsigned long long)i, rel, w, h, mad);
        /* The crop: where the documented window can move 3 resized pixels
         * either way, both moved references must match worse. */
        uint64_t lng = w > h ? (uint64_t)((double)N * w / h) : (uint64_t)((double)N * h / w);
        uint64_t off = round_half_even((double)(lng - N) / 2.0);
        for (int dir = -1; dir <= 1 && off >= 3 && off + 3 <= lng - N; dir += 2) {
            reference_shorter(px, w, h, N, 3 * dir, ref);
            double moved = mean_abs_diff(r.image, ref, (size_t)N * N * 3);
            ck_assert_msg(
                mad < moved,
                "record %llu (%s, %dx%d): the crop moved by %d pixels matches better (%.2f) than the "
                "documented one (%.2f)",
                (unsigned long long)i, rel, w, h, 3 * dir, moved, mad);
            crops++;
        }
        worst = mad > worst ? mad : worst;
        total += mad;
        checked++;
        free(px);
    }
    ck_assert_int_ge(checked, 15);
    ck_assert_int_ge(crops, 6);
    fprintf(
        stderr,
        "pixels_match_reference: %d JPEG records, mean abs difference %.2f levels on average, %.2f at worst; "
        "%d moved crops match worse\n",
        checked, total / checked, worst, crops);
    free(ref);
    free_lines(&listing);
    stk_dataset_close(ds);
}
END_TEST

/* --resample-space rgb resamples after an RGB decode (as Pillow), the
 * default on the JPEG's planes: both verify, say which in the manifest, and
 * stay close (rawgen's noise is saturated enough to exercise the clamping
 * difference, which keeps the mean under half a level). */
START_TEST(resample_space_rgb_and_ycc)
{
    setup_pack();
    json_decref(rawgen("-n 16 --classes 2 --min-side 64 --max-side 160 --seed 9", "raw"));
    ck_assert_int_eq(tu_sh("'%s' -q --size 48 raw y", pack), 0);
    ck_assert_int_eq(tu_sh("'%s' -q --size 48 --resample-space rgb raw r", pack), 0);
    ck_assert_int_eq(tu_sh("'%s' -q --size 48 --resample-space RGB raw bad", pack), 2);
    char *my = slurp_own("y/manifest.json"), *mr = slurp_own("r/manifest.json");
    ck_assert_msg(strstr(my, "\"resample_space\": \"ycc\"") && strstr(mr, "\"resample_space\": \"rgb\""),
                  "manifests do not say the resample space");
    free(my);
    free(mr);
    stk_dataset *a = open_ds("y"), *b = open_ds("r");
    ck_assert_uint_eq(stk_dataset_records(a), stk_dataset_records(b));
    int differ = 0;
    for (uint64_t i = 0; i < stk_dataset_records(a); i++) {
        rec_t x = record(a, i, 48), y = record(b, i, 48);
        double mad = mean_abs_diff(x.image, y.image, 48 * 48 * 3);
        ck_assert_msg(mad <= 0.5, "record %llu: ycc and rgb routes differ by %.2f levels on average",
                      (unsigned long long)i, mad);
        differ += memcmp(x.image, y.image, 48 * 48 * 3) != 0;
    }
    ck_assert_msg(differ > 0, "the two routes gave identical images: was --resample-space ignored?");
    stk_dataset_close(a);
    stk_dataset_close(b);
}
END_TEST

/* ------------------------------------------------------------ c. -j1 == -j2 == -j64 */

START_TEST(threads_give_identical_bytes)
{
    setup_pack();
    json_decref(rawgen("-n 60 --classes 4 --min-side 40 --max-side 120 --variants --broken", "raw"));
    ck_assert_int_eq(tu_sh("'%s' -q -j1 --size 32 --records-per-shard 7 raw a", pack), 3);
    ck_assert_int_eq(tu_sh("'%s' -q -j2 --size 32 --records-per-shard 7 raw b", pack), 3);
    ck_assert_int_eq(tu_sh("'%s' -q -j5 --size 32 --records-per-shard 7 raw c", pack), 3);
    ck_assert_int_eq(tu_sh("'%s' -q -j7 --size 32 --records-per-shard 7 raw d", pack), 3);
    ck_assert_int_eq(tu_sh("'%s' -q -j64 --size 32 --records-per-shard 7 raw e", pack),
                     3); /* more threads than inputs */
    ck_assert(exists("a/manifest.json") && exists("a/listing.tsv") && exists("a/skipped.tsv"));
    ck_assert_msg(tu_sh("diff -r a b") == 0, "-j1 and -j2 differ:\n%s", clipf(slurp_own("out.txt")));
    ck_assert_msg(tu_sh("diff -r a c") == 0, "-j1 and -j5 differ:\n%s", clipf(slurp_own("out.txt")));
    ck_assert_msg(tu_sh("diff -r a d") == 0, "-j1 and -j7 differ:\n%s", clipf(slurp_own("out.txt")));
    ck_assert_msg(tu_sh("diff -r a e") == 0, "-j1 and -j64 differ:\n%s", clipf(slurp_own("out.txt")));
}
END_TEST

static double num(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    ck_assert_msg(json_is_number(v), "pack --json --stats: \"%s\" missing or not a number", key);
    return json_number_value(v);
}

/* pack --stats in --json: every field there, each thread's busy time and
 * waits add up to its life, every image produced and consumed once, and the
 * writer streamed exactly the images' bytes. The tolerance: a thread's only
 * unmeasured time is taking the pipeline's lock, well under a tenth of its
 * life (the test allows that and 30 ms, for sanitizer builds). */
START_TEST(stats_add_up)
{
    setup_pack();
    json_decref(rawgen("-n 300 --classes 3 --min-side 40 --max-side 160 --broken", "raw"));
    ck_assert_int_eq(tu_sh("'%s' -q -j3 --json --stats --size 32 --records-per-shard 50 raw s", pack), 3);
    char *out = slurp_own("out.txt");
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    ck_assert_msg(j != NULL, "pack --json --stats does not parse (%s):\n%s", je.text, clip(out));
    free(out);
    json_t *st = json_object_get(j, "stats"), *th = json_object_get(st, "threads"),
           *w = json_object_get(st, "writer");
    ck_assert(json_is_object(st) && json_is_array(th) && json_is_object(w));
    ck_assert_uint_eq(json_array_size(th), 3);
    double produced = 0, consumed = 0, wall = num(st, "wall_s"), pipe = num(st, "pipeline_s");
    ck_assert(pipe > 0 && pipe <= wall);
    for (size_t k = 0; k < 3; k++) {
        const json_t *t = json_array_get(th, k);
        double life = num(t, "wall_s"), busy = num(t, "busy_s");
        double waits = num(t, "input_wait_s") + num(t, "window_wait_s") + num(t, "pool_wait_s") +
                       num(t, "writer_wait_s");
        ck_assert_msg(busy > 0 && waits >= 0 && life <= pipe + 0.01,
                      "thread %zu: busy %.4f waits %.4f wall %.4f", k, busy, waits, life);
        ck_assert_msg(fabs(busy + waits - life) <= 0.1 * life + 0.03,
                      "thread %zu: busy %.4f + waits %.4f is not its wall %.4f", k, busy, waits, life);
        ck_assert(num(t, "decode_s") <= busy + 1e-6 && num(t, "ordered_s") <= busy + 1e-6);
        produced += num(t, "produced");
        consumed += num(t, "consumed");
    }
    double packed = num(j, "packed"), skipped = num(j, "skipped");
    ck_assert_double_eq(produced, packed + skipped);
    ck_assert_double_eq(consumed, packed + skipped);
    ck_assert_double_eq(num(w, "bytes"), packed * 32 * 32 * 3);
    ck_assert(num(w, "writes") >= num(j, "shards") && num(j, "shards") == 6 && num(w, "fsync_s") > 0 &&
              num(w, "commit_s") >= num(w, "fsync_s"));
    ck_assert(num(st, "cpu_busy_pct") > 0 && num(st, "ordered_us_per_image") > 0);
    ck_assert(num(st, "cpu_user_s") + num(st, "cpu_sys_s") > 0);
    ck_assert(num(w, "write_s") > 0 && num(w, "hash_s") >= 0 && num(w, "queue_wait_s") >= 0 &&
              num(w, "commit_wait_s") >= 0 && num(w, "flush_s") >= 0 && num(w, "flushes") >= 0);
    ck_assert(num(st, "ordered_saturates_images_per_s") > 0);
    json_decref(j);
    /* and as a table without --json */
    ck_assert_int_eq(tu_sh("'%s' -q -j2 --stats --size 32 --records-per-shard 50 raw s2", pack), 3);
    expect_in("err.txt", "ordered part (in order, one at a time)");
    expect_in("err.txt", "background flushes");
}
END_TEST

/* ------------------------------------------------------------ d. kill -9, resume */

static size_t committed_shards(const char *dir)
{
    DIR *d = opendir(dir);
    size_t n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        n += !strncmp(de->d_name, "shard-", 6) && l > 4 && !strcmp(de->d_name + l - 4, ".stk");
    }
    if (d) closedir(d);
    return n;
}

/* Start `pack -q -jTHREADS --size SIZE --records-per-shard 4 raw NAME` (in
 * tu_tmp) and kill -9 it once `shards` shards are committed; fails the test
 * if it finished first. */
static void pack_killed_after(const char *name, const char *threads, const char *size, size_t shards)
{
    char *dir = path_in(name);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        if (chdir(tu_tmp) != 0) _exit(126);
        execl(pack, "pack", "-q", "-j", threads, "--size", size, "--records-per-shard", "4", "raw", name,
              (char *)NULL);
        _exit(127);
    }
    int st = 0;
    bool done = false;
    struct timespec nap = {0, 100000}; /* 0.1 ms */
    for (int spins = 0; spins < 600000 && committed_shards(dir) < shards; spins++) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            done = true;
            break;
        }
        nanosleep(&nap, NULL);
    }
    if (!done) {
        kill(pid, SIGKILL);
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    }
    ck_assert_msg(!done && WIFSIGNALED(st),
                  "pack finished before %zu shards were committed: make the run longer", shards);
    free(dir);
}

START_TEST(kill_and_resume_gives_same_bytes)
{
    setup_pack();
    /* 600 inputs (10 of them broken, at the start of each class: the resume
     * must reproduce their reasons) into 4-record shards: ~150 commits */
    json_decref(rawgen("-n 590 --classes 3 --min-side 24 --max-side 64 --broken", "raw"));
    const char *flags = "-q -j2 --size 16 --records-per-shard 4";
    ck_assert_int_eq(tu_sh("'%s' %s raw ref", pack, flags), 3);
    static const size_t kill_at[] = {2, 40, 110};
    for (size_t t = 0; t < sizeof kill_at / sizeof *kill_at; t++) {
        char name[32], *dir;
        snprintf(name, sizeof name, "k%zu", kill_at[t]);
        dir = path_in(name);
        pack_killed_after(name, t == 1 ? "64" : "2", "16", kill_at[t]); /* -j64: 64 workers in flight */
        size_t kept = committed_shards(dir);
        ck_assert_uint_ge(kept, kill_at[t]);
        ck_assert_uint_lt(kept, 150);
        char mf[64];
        snprintf(mf, sizeof mf, "%s/manifest.json", name);
        ck_assert_msg(!exists(mf), "a killed pack left %s", mf);
        char lk[64];
        snprintf(lk, sizeof lk, "%s/.stoker-lock", name);
        ck_assert_msg(exists(lk), "a killed pack left no lock file (%s)", lk); /* stale: taken over below */
        if (t == 0) { /* resumed with --on-error fail: the inputs skipped before the kill now stop it */
            ck_assert_int_eq(tu_sh("cp -r %s kfail", name), 0);
            ck_assert_int_eq(tu_sh("'%s' -q --on-error fail --size 16 --records-per-shard 4 raw kfail", pack),
                             1);
            expect_in("err.txt", "(--on-error fail: stopping)");
            ck_assert(!exists("kfail/manifest.json"));
            char *kf = path_in("kfail");
            ck_assert_uint_eq(committed_shards(kf), 0);
            free(kf);
        }
        /* the same command (-q and -j do not shape the output) */
        int rc = tu_sh("'%s' -j1 --size 16 --records-per-shard 4 raw %s", pack, name);
        char *err = slurp_own("err.txt");
        ck_assert_msg(rc == 3, "re-run after kill at %zu shards: exit %d:\n%s", kill_at[t], rc, clip(err));
        ck_assert_msg(strstr(err, "resuming: kept"), "the re-run did not keep the committed shards:\n%s",
                      clip(err));
        ck_assert_msg(strstr(err, "took over the lock of pid"), "the re-run did not name the stale lock:\n%s",
                      clip(err));
        free(err);
        ck_assert_msg(tu_sh("diff -r ref %s", name) == 0, "resumed run (killed at %zu shards) differs:\n%s",
                      kill_at[t], clipf(slurp_own("out.txt")));
        free(dir);
    }
}
END_TEST

/* An input the interrupted run skipped decodes now (the file was replaced):
 * the resume starts the part over, and the result equals a fresh pack of
 * the inputs as they are. At --size 64 an image is whole pages, so its slot
 * also holds its block sums: the slot the resume re-decodes skipped inputs
 * into must have room for them (under ASan an overflow fails the run). */
START_TEST(resume_restarts_when_a_skipped_input_decodes)
{
    setup_pack();
    json_decref(rawgen("-n 590 --classes 3 --min-side 24 --max-side 64 --broken", "raw"));
    pack_killed_after("kc", "2", "64", 60); /* class000 and its broken inputs are in the kept shards */
    ck_assert_int_eq(tu_sh("cp raw/class000/img-00000000.jpg raw/class000/broken-empty.jpg"), 0);
    int rc = tu_sh("'%s' -j1 --size 64 --records-per-shard 4 raw kc", pack);
    ck_assert_msg(rc == 3, "resume after the input changed: exit %d:\n%s", rc, clipf(slurp_own("err.txt")));
    ck_assert_int_eq(tu_sh("'%s' -q -j2 --size 64 --records-per-shard 4 raw fresh", pack), 3);
    ck_assert_msg(tu_sh("diff -r fresh kc") == 0, "the restarted resume differs from a fresh pack:\n%s",
                  clipf(slurp_own("out.txt")));
}
END_TEST

/* ------------------------------------------------------------ e. parts + merge */

START_TEST(parts_merge_equals_plain_pack)
{
    setup_pack();
    json_decref(rawgen("-n 80 --classes 4 --min-side 40 --max-side 100 --variants --broken", "raw"));
    const char *flags = "-q --size 24 --records-per-shard 8";
    int rc;
    rc = tu_sh("'%s' %s --part 3/3 raw parts", pack, flags);
    ck_assert_msg(rc == 0 || rc == 3, "part 3/3: exit %d", rc);
    ck_assert_int_ne(tu_sh("'%s' -q --merge parts", pack), 0);
    char *err = slurp_own("err.txt");
    ck_assert_msg(strstr(err, "missing") && strstr(err, ": 1, 2"), "merge must name parts 1 and 2:\n%s",
                  clip(err));
    free(err);
    ck_assert(!exists("parts/manifest.json"));
    rc = tu_sh("'%s' %s --part 1/3 raw parts", pack, flags);
    ck_assert_msg(rc == 0 || rc == 3, "part 1/3: exit %d", rc);
    rc = tu_sh("'%s' %s --part 3/3 raw parts", pack, flags); /* again: already complete */
    ck_assert_msg(rc == 0 || rc == 3, "part 3/3 again: exit %d", rc);
    ck_assert_int_ne(tu_sh("'%s' -q --merge parts", pack), 0);
    err = slurp_own("err.txt");
    ck_assert_msg(strstr(err, "missing") && strstr(err, ": 2"), "merge must name part 2:\n%s", clip(err));
    ck_assert_msg(!strstr(err, ": 1, 2") && !strstr(err, "3\n"), "merge names a part that is there:\n%s",
                  clip(err));
    free(err);
    ck_assert(!exists("parts/manifest.json"));
    rc = tu_sh("'%s' %s --part 2/3 raw parts", pack, flags);
    ck_assert_msg(rc == 0 || rc == 3, "part 2/3: exit %d", rc);
    rc = tu_sh("'%s' -q --merge parts", pack);
    ck_assert_msg(rc == 3, "merge of all parts (with skipped files): exit %d: %s", rc,
                  clipf(slurp_own("err.txt")));
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --full parts", tu_tools), 0);

    ck_assert_int_eq(tu_sh("'%s' %s raw plain", pack, flags), 3);
    stk_dataset *a = open_ds("plain"), *b = open_ds("parts");
    ck_assert_uint_eq(stk_dataset_records(a), stk_dataset_records(b));
    ck_assert_uint_ge(stk_dataset_records(a), 80);
    for (uint64_t i = 0; i < stk_dataset_records(a); i++) {
        rec_t x = record(a, i, 24), y = record(b, i, 24);
        ck_assert_msg(x.source == y.source && x.label == y.label && !memcmp(x.size, y.size, 8),
                      "record %llu differs", (unsigned long long)i);
        ck_assert_msg(!memcmp(x.image, y.image, 24 * 24 * 3), "record %llu: image differs",
                      (unsigned long long)i);
    }
    const stk_manifest *ma = stk_dataset_manifest(a), *mb = stk_dataset_manifest(b);
    ck_assert_uint_eq(ma->nclasses, mb->nclasses);
    for (size_t k = 0; k < ma->nclasses; k++) ck_assert_str_eq(ma->classes[k], mb->classes[k]);
    stk_dataset_close(a);
    stk_dataset_close(b);
    ck_assert_int_eq(tu_sh("cmp plain/listing.tsv parts/listing.tsv"), 0);
    ck_assert_int_eq(tu_sh("cmp plain/skipped.tsv parts/skipped.tsv"), 0);
}
END_TEST

/* ------------------------------------------------------------ f. exit codes, refusals, lists */

START_TEST(exit_codes_and_refusals)
{
    setup_pack();
    json_decref(rawgen("-n 12 --classes 3 --min-side 40 --max-side 80", "raw"));
    /* usage errors: 2 */
    ck_assert_int_eq(tu_sh("'%s' --bogus raw o", pack), 2);
    ck_assert_int_eq(tu_sh("'%s' --size 0 raw o", pack), 2);
    char *err = slurp_own("err.txt");
    ck_assert_ptr_nonnull(strstr(err, "--size"));
    free(err);
    ck_assert_int_eq(tu_sh("'%s' --part 4/3 raw o", pack), 2);
    ck_assert_int_eq(tu_sh("'%s' --part 0/3 raw o", pack), 2);
    ck_assert_int_eq(tu_sh("'%s' --on-error maybe raw o", pack), 2);
    ck_assert_int_eq(tu_sh("'%s'", pack), 2);
    ck_assert_int_eq(tu_sh("'%s' raw", pack), 2);
    ck_assert_int_eq(tu_sh("'%s' raw o extra", pack), 2);
    ck_assert_int_eq(tu_sh("'%s' --merge", pack), 2);
    ck_assert(!exists("o"));
    /* empty and missing inputs: 1, naming the input */
    ck_assert_int_eq(tu_sh("mkdir empty && '%s' -q empty o", pack), 1);
    err = slurp_own("err.txt");
    ck_assert_msg(strstr(err, "empty") && tu_count_lines(err) == 1, "%s", clip(err));
    free(err);
    ck_assert_int_eq(tu_sh("mkdir -p hollow/cat hollow/dog && '%s' -q hollow o", pack), 1);
    err = slurp_own("err.txt");
    ck_assert_msg(strstr(err, "hollow") && strstr(err, "no input files"), "%s", clip(err));
    free(err);
    ck_assert_int_eq(tu_sh("'%s' -q nowhere o", pack), 1);
    err = slurp_own("err.txt");
    ck_assert_msg(strstr(err, "nowhere") && strstr(err, "No such file"), "%s", clip(err));
    free(err);
    ck_assert(!exists("o/manifest.json"));
    /* an OUTDIR holding a dataset is refused, and replaced with --force */
    ck_assert_int_eq(tu_sh("'%s' -q --size 16 raw ds", pack), 0);
    ck_assert_int_eq(tu_sh("'%s' -q --size 16 raw ds", pack), 1);
    err = slurp_own("err.txt");
    ck_assert_msg(strstr(err, "--force"), "%s", clip(err));
    free(err);
    ck_assert_int_eq(tu_sh("'%s' -q --size 20 --force raw ds", pack), 0);
    stk_dataset *ds = open_ds("ds");
    ck_assert_uint_eq(stk_dataset_schema(ds)->fields[field(ds, "image")].shape[0], 20);
    stk_dataset_close(ds);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' ds", tu_tools), 0);
    /* --on-error fail: 1, nothing left that looks like a dataset */
    json_decref(rawgen("-n 30 --classes 3 --min-side 40 --max-side 80 --broken", "bad"));
    ck_assert_int_eq(tu_sh("'%s' -q --size 16 --records-per-shard 2 --on-error fail bad failed", pack), 1);
    err = slurp_own("err.txt");
    ck_assert_msg(strstr(err, "--on-error fail"), "%s", clip(err));
    free(err);
    ck_assert(!exists("failed/manifest.json"));
    ck_assert_uint_eq(count_glob("failed/*.stk"), 0);
}
END_TEST

/* ------------------------------------------------------------ one writer per OUTDIR */

/* Start `pack FLAGS raw OUT` in the background (stderr to first.txt) and
 * stop it (SIGSTOP) once it holds OUT: its lock file names it. */
static pid_t pack_stopped_holding(const char *flags, const char *out)
{
    char *lock = NULL, *cmd = NULL;
    ck_assert(asprintf(&lock, "%s/%s/.stoker-lock", tu_tmp, out) >= 0);
    ck_assert(asprintf(&cmd, "cd '%s' && exec '%s' %s raw %s >first-out.txt 2>first.txt", tu_tmp, pack, flags,
                       out) >= 0);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    struct timespec nap = {0, 100000}; /* 0.1 ms */
    bool held = false;
    int st;
    for (int spins = 0; spins < 600000 && !held; spins++) {
        FILE *f = fopen(lock, "r");
        char line[256] = "";
        if (f) {
            held = fgets(line, sizeof line, f) && strstr(line, ": pack");
            fclose(f);
        }
        if (!held) {
            ck_assert_msg(waitpid(pid, &st, WNOHANG) == 0,
                          "the first pack ended before it was seen holding %s: make the run longer", out);
            nanosleep(&nap, NULL);
        }
    }
    ck_assert_msg(held, "the first pack never held %s", out);
    ck_assert_int_eq(kill(pid, SIGSTOP), 0);
    free(lock);
    free(cmd);
    return pid;
}

/* A second pack into an OUTDIR another writer holds is refused at once
 * (exit 1, naming the directory and the holder) and touches nothing; the
 * holder finishes a dataset as if it had been alone. Parts of one job array
 * share OUTDIR; the merge waits for all of them. */
START_TEST(one_writer_per_outdir)
{
    setup_pack();
    json_decref(rawgen("-n 300 --classes 3 --min-side 24 --max-side 64", "raw"));
    const char *flags = "-q -j2 --size 16 --records-per-shard 4";
    ck_assert_int_eq(tu_sh("'%s' %s raw ref", pack, flags), 0);

    /* held by a writer in this process, as any other writer would hold it */
    char *out = path_in("busy");
    ck_assert_int_eq(mkdir(out, 0755), 0);
    stk_error e;
    stk_dir_lock *l = stk_dir_lock_take(out, 0, 0, "the test's writer", &e);
    ck_assert_msg(l != NULL, "%s", e.msg);
    char me[64];
    snprintf(me, sizeof me, "pid %ld ", (long)getpid());
    static const char *const second[] = {"raw busy", "--part 1/2 raw busy", "--merge busy"};
    for (size_t k = 0; k < 3; k++) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "%s %s", k < 2 ? flags : "-q", second[k]);
        ck_assert_int_eq(tu_sh("'%s' %s", pack, cmd), 1);
        char *err = slurp_own("err.txt");
        ck_assert_msg(strstr(err, "pack: busy: another writer holds this directory") && strstr(err, me) &&
                          strstr(err, "the test's writer") && tu_count_lines(err) == 1,
                      "`pack %s` into a held OUTDIR:\n%s", cmd, clip(err));
        free(err);
    }
    size_t n;
    char **names = tu_list(out, &n);
    ck_assert_msg(n == 1 && !strcmp(names[0], ".stoker-lock"), "the refused packs left %zu files (%s)", n,
                  n ? names[0] : "");
    tu_free_names(names, n);
    stk_dir_lock_release(l);

    /* two packs: the second is refused while the first holds OUTDIR */
    pid_t first = pack_stopped_holding(flags, "busy");
    char who[64];
    snprintf(who, sizeof who, "pid %ld ", (long)first);
    int rc = tu_sh("'%s' %s raw busy", pack, flags);
    char *err = slurp_own("err.txt");
    ck_assert_msg(rc == 1 && strstr(err, "pack: busy: ") && strstr(err, who) && strstr(err, "(pack)") &&
                      strstr(err, "on host "),
                  "second pack: exit %d:\n%s", rc, clip(err));
    free(err);
    ck_assert_int_eq(tu_sh("'%s' -q --merge busy", pack), 1);
    expect_in("err.txt", who);
    ck_assert_int_eq(kill(first, SIGCONT), 0);
    int st;
    ck_assert_int_eq(waitpid(first, &st, 0), first);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the first pack: status %d:\n%s", st,
                  clipf(slurp_own("first.txt")));
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --full busy", tu_tools), 0);
    ck_assert_msg(tu_sh("diff -r ref busy") == 0,
                  "the first pack's dataset differs from one packed alone:\n%s", clipf(slurp_own("out.txt")));

    /* parts: another part goes ahead, the same part and the merge wait */
    char *parts = path_in("parts");
    ck_assert_int_eq(mkdir(parts, 0755), 0);
    l = stk_dir_lock_take(parts, 1, 2, "the test's part 1/2", &e);
    ck_assert_msg(l != NULL, "%s", e.msg);
    ck_assert_int_eq(tu_sh("'%s' %s --part 2/2 raw parts", pack, flags), 0);
    ck_assert_int_eq(tu_sh("'%s' %s --part 1/2 raw parts", pack, flags), 1);
    expect_in("err.txt", "part 1/2 is already being written");
    expect_in("err.txt", me);
    ck_assert_int_eq(tu_sh("'%s' -q --merge parts", pack), 1);
    expect_in("err.txt", "the test's part 1/2");
    ck_assert_int_eq(tu_sh("'%s' %s raw parts", pack, flags), 1); /* nor a whole pack */
    expect_in("err.txt", "the test's part 1/2");
    stk_dir_lock_release(l);
    ck_assert_int_eq(tu_sh("'%s' %s --part 1/2 raw parts", pack, flags), 0);
    ck_assert_int_eq(tu_sh("'%s' -q --merge parts", pack), 0);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --full parts", tu_tools), 0);
    ck_assert_uint_eq(count_glob("parts/.stoker-lock*"), 0); /* the merge tidies the parts' shared file */
    free(parts);
    free(out);
}
END_TEST

START_TEST(list_file_inputs)
{
    setup_pack();
    json_decref(rawgen("-n 12 --classes 3 --min-side 40 --max-side 90", "raw"));
    /* the JPEGs, in an order of our own (reverse), class names as labels */
    ck_assert_int_eq(
        tu_sh("sh -c \"cd raw && find . -name '*.jpg' | sed 's#^./##' | sort -r > ../files.txt\""), 0);
    lines_t files = read_lines("files.txt", false);
    ck_assert_int_ge(files.n, 8);
    static const char *const names[] = {"zebra", "apple", "mango"}; /* sorted: apple 0, mango 1, zebra 2 */
    static const int64_t sorted_index[] = {2, 0, 1};
    static const int64_t int_labels[] = {7, 0, 3};
    char *csv = path_in("list.csv"), *tsv = path_in("list.tsv");
    FILE *c = fopen(csv, "w"), *t = fopen(tsv, "w");
    ck_assert(c && t);
    fprintf(c, "path,label\n");
    fprintf(t, "label\tpath\n"); /* columns found by their header names */
    for (size_t i = 0; i < files.n; i++) {
        fprintf(c, "raw/%s,%s\n", files.line[i], names[i % 3]);
        fprintf(t, "%lld\traw/%s\n", (long long)int_labels[i % 3], files.line[i]);
    }
    fclose(c);
    fclose(t);
    for (int kind = 0; kind < 2; kind++) {
        const char *in = kind ? "list.tsv" : "list.csv", *out = kind ? "dtsv" : "dcsv";
        int rc = tu_sh("'%s' -q --size 16 -j2 %s %s", pack, in, out);
        ck_assert_msg(rc == 0, "%s: exit %d: %s", in, rc, clipf(slurp_own("err.txt")));
        stk_dataset *ds = open_ds(out);
        const stk_manifest *m = stk_dataset_manifest(ds);
        ck_assert_uint_eq(stk_dataset_records(ds), files.n);
        if (kind == 0) {
            ck_assert_uint_eq(m->nclasses, 3);
            ck_assert_str_eq(m->classes[0], "apple");
            ck_assert_str_eq(m->classes[1], "mango");
            ck_assert_str_eq(m->classes[2], "zebra");
        }
        char lrel[64];
        snprintf(lrel, sizeof lrel, "%s/listing.tsv", out);
        lines_t listing = read_lines(lrel, true);
        ck_assert_uint_eq(listing.n, files.n);
        for (uint64_t i = 0; i < files.n; i++) {
            rec_t r = record(ds, i, 16);
            ck_assert_uint_eq(r.source, i); /* list order */
            ck_assert_int_eq(r.label, kind ? int_labels[i % 3] : sorted_index[i % 3]);
            char want[600], src[600];
            snprintf(want, sizeof want, "raw/%s", files.line[i]);
            const char *p = strrchr(listing.line[i], '\t');
            ck_assert_msg(p && !strcmp(p + 1, want), "%s line %llu: %s, want %s", lrel, (unsigned long long)i,
                          listing.line[i], want);
            snprintf(src, sizeof src, "raw/%s", files.line[i]); /* the right file: its size */
            int w, h;
            free(decode_jpeg(src, &w, &h));
            ck_assert_uint_eq(r.size[0], (uint32_t)w);
            ck_assert_uint_eq(r.size[1], (uint32_t)h);
        }
        free_lines(&listing);
        stk_dataset_close(ds);
    }
    free(csv);
    free(tsv);
    free_lines(&files);
}
END_TEST

/* ------------------------------------------------------------ g. disk full */

/* Refusals found in review: each asserts the documented behaviour. */
START_TEST(review_refusals)
{
    setup_pack();
    json_decref(rawgen("-n 24 --classes 3 --min-side 40 --max-side 90 --broken", "raw"));
    /* an empty OUTDIR string is a clear error, not a crash */
    ck_assert_int_eq(tu_sh("'%s' -q --size 16 raw ''", pack), 1);
    expect_in("err.txt", "empty string");
    /* a negative label in a list file is refused before anything is decoded */
    char *neg = path_in("neg.csv");
    FILE *f = fopen(neg, "w");
    free(neg);
    ck_assert(f != NULL);
    fprintf(f, "path,label\nraw/class000/img-00000000.jpg,-3\n");
    fclose(f);
    ck_assert_int_eq(tu_sh("'%s' -q --size 16 neg.csv dneg", pack), 1);
    expect_in("err.txt", "label -3 is negative");
    /* a class name that is not UTF-8 cannot go into the manifest */
    ck_assert_int_eq(tu_sh("mkdir -p bad/$(printf 'caf\\351') && cp raw/class000/img-00000000.jpg "
                           "bad/$(printf 'caf\\351')/"),
                     0);
    ck_assert_int_eq(tu_sh("'%s' -q --size 16 bad dbad", pack), 1);
    expect_in("err.txt", "not valid UTF-8");
    /* re-running a finished part reports what the first run found */
    int first = tu_sh("'%s' -q --size 16 --part 1/2 raw dparts", pack);
    ck_assert_int_eq(first, 3); /* the broken files of class000 fall into part 1 */
    ck_assert_int_eq(tu_sh("'%s' -q --size 16 --part 1/2 raw dparts", pack), first);
}
END_TEST

START_TEST(disk_full_fails_cleanly)
{
    setup_pack();
    json_decref(rawgen("-n 40 --classes 2 --min-side 40 --max-side 80", "raw"));
    /* RLIMIT_FSIZE of 64 blocks (32 KiB in dash's 512-byte units; a shard of
     * 64 records of 32x32x3 is ~200 KiB): write() fails with EFBIG once
     * SIGXFSZ is ignored (an ignored signal stays ignored across exec). */
    int rc = tu_sh(
        "sh -c \"trap '' XFSZ; ulimit -f 64; exec '%s' -q --size 32 --records-per-shard 64 raw full\"", pack);
    char *err = slurp_own("err.txt");
    ck_assert_msg(rc == 1, "exit %d, want 1:\n%s", rc, clip(err));
    ck_assert_msg(strstr(err, "full/shard-") && strstr(err, "File too large"),
                  "the error must name the file and the cause:\n%s", clip(err));
    free(err);
    ck_assert(!exists("full/manifest.json"));
    /* the limit hit after the shards: the listing slice (1500 lines, ~48 KiB)
     * does not fit, the shards (2 records of 8x8x3, ~20 KiB) do */
    json_decref(rawgen("-n 1500 --classes 2 --min-side 8 --max-side 16", "many"));
    rc = tu_sh("sh -c \"trap '' XFSZ; ulimit -f 64; exec '%s' -q --size 8 --records-per-shard 2 many full2\"",
               pack);
    err = slurp_own("err.txt");
    ck_assert_msg(rc == 1, "exit %d, want 1:\n%s", rc, clip(err));
    ck_assert_msg(strstr(err, "full2/") && strstr(err, "File too large"),
                  "the error must name the file and the cause:\n%s", clip(err));
    free(err);
    ck_assert(!exists("full2/manifest.json"));
    /* without the limit the same command succeeds in the same directory */
    ck_assert_int_eq(tu_sh("'%s' -q --size 8 --records-per-shard 2 many full2", pack), 0);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' full2", tu_tools), 0);
}
END_TEST

/* ------------------------------------------------------------ f. images as they are */

/* The source path of listing index `source` in dataset `dir` (malloc'd,
 * relative to tu_tmp: "raw/" + the listed path). */
static char *listed_path(const char *dir, uint64_t source)
{
    char rel[128];
    snprintf(rel, sizeof rel, "%s/listing.tsv", dir);
    char *tsv = slurp_own(rel), *line = strchr(tsv, '\n') + 1, *out = NULL;
    for (uint64_t k = 0; k < source && line; k++) line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL;
    ck_assert_ptr_nonnull(line);
    char *path = strrchr(strtok(line, "\n"), '\t') + 1;
    ck_assert(asprintf(&out, "raw/%s", path) >= 0);
    free(tsv);
    return out;
}

/* Each record of a keep-mode dataset against the rule: the source size
 * (orig_size) gives the stored shape. */
static void check_keep_shapes(const char *dir, uint32_t min_side, uint32_t max_side)
{
    stk_dataset *ds = open_ds(dir);
    unsigned fi = field(ds, "image"), fo = field(ds, "orig_size");
    const stk_field *fd = &stk_dataset_schema(ds)->fields[fi];
    ck_assert_int_eq(fd->kind, STK_KIND_ARRAY);
    for (uint64_t i = 0; i < stk_dataset_records(ds); i++) {
        uint32_t wh[2];
        memcpy(wh, value(ds, fo, i, 8), 8);
        uint64_t lo = wh[0] < wh[1] ? wh[0] : wh[1], hi = wh[0] < wh[1] ? wh[1] : wh[0], s = lo, g = hi;
        if (min_side) s = min_side, g = (uint64_t)((double)min_side * (double)hi / (double)lo);
        if (g > max_side) s = s * max_side / g, g = max_side;
        s = s ? s : 1;
        uint64_t want_w = wh[0] >= wh[1] ? g : s, want_h = wh[0] >= wh[1] ? s : g, dims[STK_MAX_DIMS];
        size_t sh;
        uint64_t local;
        ck_assert_int_eq(stk_dataset_locate(ds, i, &sh, &local, NULL), 0);
        ck_assert_int_eq(stk_shard_value_shape(stk_dataset_shard(ds, sh), fi, local, dims, NULL), 0);
        ck_assert_msg(dims[0] == want_h && dims[1] == want_w && dims[2] == 3,
                      "%s record %llu: %ux%u source stored as %llux%llu, want %llux%llu", dir,
                      (unsigned long long)i, wh[0], wh[1], (unsigned long long)dims[1],
                      (unsigned long long)dims[0], (unsigned long long)want_w, (unsigned long long)want_h);
        if (fd->codec != STK_CODEC_JPEG) (void)value(ds, fi, i, dims[0] * dims[1] * 3);
    }
    stk_dataset_close(ds);
}

START_TEST(keep_aspect_raw_and_jpeg)
{
    setup_pack();
    json_decref(rawgen("-n 40 --classes 2 --min-side 20 --max-side 90 --variants --broken", "raw"));
    ck_assert_int_eq(tu_sh("'%s' -q -j1 --max-side 48 --records-per-shard 9 raw a", pack), 3);
    ck_assert_int_eq(tu_sh("'%s' -q -j2 --resize keep --max-side 48 --records-per-shard 9 raw b", pack), 3);
    ck_assert_msg(tu_sh("diff -r a b") == 0, "-j1 and -j2 differ:\n%s", clipf(slurp_own("out.txt")));
    check_keep_shapes("a", 0, 48);
    ck_assert_int_eq(tu_sh("'%s' -q -j2 --min-side 24 --max-side 64 raw m", pack), 3);
    check_keep_shapes("m", 24, 64);
    ck_assert_int_eq(
        tu_sh("'%s' -q -j1 --max-side 48 --image-format jpeg:85 --records-per-shard 9 raw j1", pack), 3);
    ck_assert_int_eq(
        tu_sh("'%s' -q -j2 --max-side 48 --image-format jpeg:85 --records-per-shard 9 raw j2", pack), 3);
    ck_assert_msg(tu_sh("diff -r j1 j2") == 0, "JPEG -j1 and -j2 differ:\n%s", clipf(slurp_own("out.txt")));
    check_keep_shapes("j1", 0, 48);
    ck_assert_int_eq(
        tu_sh("'%s/shardcheck' a && '%s/shardcheck' m && '%s/shardcheck' j1", tu_tools, tu_tools, tu_tools),
        0);
    /* every stored image, greyscale and CMYK sources included (converted to RGB at pack time), goes
     * through the reader's crop on the workers: raw and JPEG, train and eval */
    for (int k = 0; k < 4; k++)
        ck_assert_msg(tu_sh("'%s/shardread' %s -b 8 --order shuffle --crop %s --epochs 1 -q", tu_tools,
                            k % 2 ? "a" : "j1", k / 2 ? "center:24" : "random:24") == 0,
                      "shardread --crop: %s", clipf(slurp_own("err.txt")));
    /* every JPEG decodes to its stored shape, close to the raw pixels */
    stk_dataset *raw = open_ds("a"), *jp = open_ds("j1");
    ck_assert_uint_eq(stk_dataset_records(raw), stk_dataset_records(jp));
    tjhandle tj = tjInitDecompress();
    double se = 0, n = 0;
    for (uint64_t i = 0; i < stk_dataset_records(jp); i++) {
        size_t sh;
        uint64_t local, dims[STK_MAX_DIMS], size;
        const void *p;
        ck_assert_int_eq(stk_dataset_locate(jp, i, &sh, &local, NULL), 0);
        ck_assert_int_eq(stk_shard_value_shape(stk_dataset_shard(jp, sh), 0, local, dims, NULL), 0);
        ck_assert_int_eq(stk_dataset_value(jp, 0, i, &p, &size, NULL), 0);
        uint8_t *px = malloc(dims[0] * dims[1] * 3);
        ck_assert_int_eq(tjDecompress2(tj, p, size, px, (int)dims[1], 0, (int)dims[0], TJPF_RGB, 0), 0);
        const uint8_t *ref = value(raw, 0, i, dims[0] * dims[1] * 3);
        for (uint64_t k = 0; k < dims[0] * dims[1] * 3; k++) se += (px[k] - ref[k]) * (px[k] - ref[k]), n++;
        free(px);
    }
    double psnr = 10 * log10(255.0 * 255.0 / (se / n));
    ck_assert_msg(psnr > 28, "JPEG q85 storage is %.1f dB from the raw pixels", psnr);
    tjDestroy(tj);
    stk_dataset_close(raw);
    stk_dataset_close(jp);
    /* refusals */
    ck_assert_int_eq(tu_sh("'%s' --resize fit --max-side 48 raw x", pack), 2);
    ck_assert_int_eq(tu_sh("'%s' --resize keep raw x", pack), 2);
    ck_assert_int_eq(tu_sh("'%s' --min-side 50 --max-side 40 raw x", pack), 2);
    ck_assert_int_eq(tu_sh("'%s' --image-format jpeg --compress image=zstd raw x", pack), 2);
    ck_assert_int_eq(tu_sh("'%s' --image-format jpeg:101 raw x", pack), 2);
}
END_TEST

/* --image-format original --jpeg-restart 0: a JPEG that needs no resize is
 * stored bit for bit as the file was; the others (resized, greyscale, CMYK, PNG, ...) are
 * re-encoded, and the two counts add up. */
START_TEST(original_bytes_kept_bit_exact)
{
    setup_pack();
    json_decref(rawgen("-n 30 --classes 2 --min-side 20 --max-side 90 --variants", "raw"));
    ck_assert_int_eq(
        tu_sh("'%s' -q -j2 --json --max-side 64 --image-format original --jpeg-restart 0 raw o", pack), 0);
    char *out = slurp_own("out.txt");
    json_t *j = json_loads(out, 0, NULL);
    free(out);
    ck_assert_ptr_nonnull(j);
    json_int_t kept = json_integer_value(json_object_get(j, "kept_original")),
               re = json_integer_value(json_object_get(j, "reencoded")),
               packed = json_integer_value(json_object_get(j, "packed"));
    json_decref(j);
    ck_assert_int_eq(kept + re, packed);
    ck_assert_int_gt(kept, 3);
    ck_assert_int_gt(re, 3);
    ck_assert_int_eq(tu_sh("'%s' -q -j1 --max-side 64 --image-format original --jpeg-restart 0 raw o1", pack),
                     0);
    ck_assert_msg(tu_sh("diff -r o o1") == 0, "-j1 and -j2 differ:\n%s", clipf(slurp_own("out.txt")));
    check_keep_shapes("o", 0, 64);
    stk_dataset *ds = open_ds("o");
    json_int_t same = 0;
    for (uint64_t i = 0; i < stk_dataset_records(ds); i++) {
        uint64_t src, size;
        const void *p;
        memcpy(&src, value(ds, field(ds, "source"), i, 8), 8);
        ck_assert_int_eq(stk_dataset_value(ds, 0, i, &p, &size, NULL), 0);
        char *path = listed_path("o", src);
        size_t len;
        char *file = slurp_n(path, &len);
        uint32_t wh[2];
        memcpy(wh, value(ds, field(ds, "orig_size"), i, 8), 8);
        bool fits = wh[0] <= 64 && wh[1] <= 64,
             jpeg = len > 2 && (uint8_t)file[0] == 0xFF && (uint8_t)file[1] == 0xD8;
        bool identical = size == len && memcmp(p, file, len) == 0;
        ck_assert_msg(!identical || (fits && jpeg), "%s was stored as it was but needed a resize", path);
        if (fits && jpeg && !strstr(path, "gray") && !strstr(path, "cmyk"))
            ck_assert_msg(identical, "%s (%ux%u, a colour JPEG within the bound) was re-encoded", path, wh[0],
                          wh[1]);
        same += identical;
        free(file);
        free(path);
    }
    ck_assert_int_eq(same, kept);
    stk_dataset_close(ds);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' o", tu_tools), 0);
}
END_TEST

/* --jpeg-baseline: a progressive JPEG kept by original storage is stored as
 * baseline with the very pixels of the file; the others as they were; the
 * same bytes from -j1 and -j2; refused without original storage. */
START_TEST(jpeg_baseline_lossless)
{
    setup_pack();
    json_decref(rawgen("-n 12 --classes 2 --min-side 20 --max-side 90 --variants", "raw"));
    const char *flags = "--max-side 16384 --image-format original --jpeg-baseline --jpeg-restart 0";
    ck_assert_int_eq(tu_sh("'%s' -q -j2 --json %s raw b", pack, flags), 0);
    char *out = slurp_own("out.txt");
    json_t *j = json_loads(out, 0, NULL);
    free(out);
    ck_assert_ptr_nonnull(j);
    json_int_t made = json_integer_value(json_object_get(j, "made_baseline"));
    json_decref(j);
    ck_assert_int_eq(tu_sh("'%s' -q -j1 %s raw b1", pack, flags), 0);
    ck_assert_msg(tu_sh("diff -r b b1") == 0, "-j1 and -j2 differ:\n%s", clipf(slurp_own("out.txt")));
    stk_dataset *ds = open_ds("b");
    tjhandle tj = tjInitDecompress();
    json_int_t progressive = 0;
    for (uint64_t i = 0; i < stk_dataset_records(ds); i++) {
        uint64_t src, size;
        const void *p;
        memcpy(&src, value(ds, field(ds, "source"), i, 8), 8);
        ck_assert_int_eq(stk_dataset_value(ds, 0, i, &p, &size, NULL), 0);
        char *path = listed_path("b", src);
        if (!strstr(path, "progressive")) {
            free(path);
            continue;
        }
        progressive++;
        size_t len;
        char *file = slurp_n(path, &len);
        ck_assert_msg(size != len || memcmp(p, file, len) != 0, "%s stored progressive as it was", path);
        int w, h, sub, cs, w2, h2;
        ck_assert_int_eq(tjDecompressHeader3(tj, (const uint8_t *)file, len, &w, &h, &sub, &cs), 0);
        ck_assert_int_eq(tjDecompressHeader3(tj, p, size, &w2, &h2, &sub, &cs), 0);
        ck_assert(w == w2 && h == h2);
        uint8_t *a = malloc((size_t)w * h * 3), *b = malloc((size_t)w * h * 3);
        ck_assert_int_eq(tjDecompress2(tj, (const uint8_t *)file, len, a, w, 0, h, TJPF_RGB, 0), 0);
        ck_assert_int_eq(tjDecompress2(tj, p, size, b, w, 0, h, TJPF_RGB, 0), 0);
        ck_assert_msg(memcmp(a, b, (size_t)w * h * 3) == 0, "%s: baseline pixels differ", path);
        free(a);
        free(b);
        free(file);
        free(path);
    }
    tjDestroy(tj);
    stk_dataset_close(ds);
    ck_assert_int_gt(progressive, 0);
    ck_assert_int_eq(made, progressive);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' b", tu_tools), 0);
    ck_assert_int_eq(tu_sh("'%s' --max-side 64 --image-format jpeg --jpeg-baseline raw x", pack), 2);
    expect_in("err.txt", "needs --image-format original");
}
END_TEST

/* The restart interval of a JPEG value's DRI segment, -1 without one. */
static int restart_interval(const uint8_t *p, uint64_t n)
{
    for (uint64_t i = 2; i + 4 <= n && p[i] == 0xFF && p[i + 1] != 0xDA;
         i += 2 + ((uint64_t)p[i + 2] << 8 | p[i + 3]))
        if (p[i + 1] == 0xDD) return p[i + 4] << 8 | p[i + 5];
    return -1;
}

/* --jpeg-restart (default 1): every JPEG value pack writes, kept inputs and
 * its own encodes, has a restart marker every MCU and decodes to the very
 * pixels of the same pack without them; -j1 and -j2 give the same bytes. */
START_TEST(restart_markers_lossless)
{
    setup_pack();
    json_decref(rawgen("-n 16 --classes 2 --min-side 20 --max-side 90 --variants", "raw"));
    tjhandle tj = tjInitDecompress();
    for (int orig = 0; orig < 2; orig++) {
        const char *fmt =
            orig ? "--max-side 64 --image-format original" : "--max-side 64 --image-format jpeg";
        ck_assert_int_eq(tu_sh("'%s' -q -j2 --json %s raw r", pack, fmt), 0);
        char *out = slurp_own("out.txt");
        json_t *j = json_loads(out, 0, NULL);
        free(out);
        ck_assert_ptr_nonnull(j);
        json_int_t marked = json_integer_value(json_object_get(j, "restart_markers")),
                   packed = json_integer_value(json_object_get(j, "packed"));
        json_decref(j);
        ck_assert_int_gt(packed, 10);
        ck_assert_int_eq(marked, packed);
        ck_assert_int_eq(tu_sh("'%s' -q -j1 %s raw r1", pack, fmt), 0);
        ck_assert_msg(tu_sh("diff -r r r1") == 0, "-j1 and -j2 differ:\n%s", clipf(slurp_own("out.txt")));
        ck_assert_int_eq(tu_sh("'%s' -q -j2 %s --jpeg-restart 0 raw n", pack, fmt), 0);
        stk_dataset *dr = open_ds("r"), *dn = open_ds("n");
        ck_assert_uint_eq(stk_dataset_records(dr), stk_dataset_records(dn));
        for (uint64_t i = 0; i < stk_dataset_records(dr); i++) {
            uint64_t sr, sn;
            const void *pr, *pn;
            ck_assert_int_eq(stk_dataset_value(dr, 0, i, &pr, &sr, NULL), 0);
            ck_assert_int_eq(stk_dataset_value(dn, 0, i, &pn, &sn, NULL), 0);
            ck_assert_int_eq(restart_interval(pr, sr), 1);
            if (!orig) ck_assert_int_eq(restart_interval(pn, sn), -1); /* an input may have its own */
            int w, h, sub, cs, w2, h2;
            ck_assert_int_eq(tjDecompressHeader3(tj, pr, sr, &w, &h, &sub, &cs), 0);
            ck_assert_int_eq(tjDecompressHeader3(tj, pn, sn, &w2, &h2, &sub, &cs), 0);
            ck_assert(w == w2 && h == h2);
            uint8_t *a = malloc((size_t)w * h * 3), *b = malloc((size_t)w * h * 3);
            ck_assert_int_eq(tjDecompress2(tj, pr, sr, a, w, 0, h, TJPF_RGB, 0), 0);
            ck_assert_int_eq(tjDecompress2(tj, pn, sn, b, w, 0, h, TJPF_RGB, 0), 0);
            ck_assert_msg(memcmp(a, b, (size_t)w * h * 3) == 0,
                          "record %llu: pixels differ with restart markers", (unsigned long long)i);
            free(a);
            free(b);
        }
        stk_dataset_close(dr);
        stk_dataset_close(dn);
        ck_assert_int_eq(tu_sh("'%s/shardcheck' r", tu_tools), 0);
        ck_assert_int_eq(tu_sh("rm -rf r r1 n"), 0);
    }
    tjDestroy(tj);
    ck_assert_int_eq(tu_sh("'%s' --max-side 64 --jpeg-restart 1 raw x", pack), 2);
    expect_in("err.txt", "needs --image-format jpeg or original");
    ck_assert_int_eq(tu_sh("'%s' --max-side 64 --image-format jpeg --jpeg-restart 65536 raw x", pack), 2);
}
END_TEST

/* kill -9 in the middle of a keep + JPEG pack, run again: the same bytes. */
START_TEST(keep_jpeg_resume)
{
    setup_pack();
    json_decref(rawgen("-n 400 --classes 2 --min-side 24 --max-side 64 --broken", "raw"));
    const char *flags = "-j2 --max-side 40 --image-format jpeg --records-per-shard 4";
    ck_assert_int_eq(tu_sh("'%s' -q %s raw ref", pack, flags), 3);
    char *dir = path_in("k");
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        if (chdir(tu_tmp) != 0) _exit(126);
        execl(pack, "pack", "-q", "-j2", "--max-side", "40", "--image-format", "jpeg", "--records-per-shard",
              "4", "raw", "k", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    bool done = false;
    struct timespec nap = {0, 100000};
    for (int spins = 0; spins < 600000 && committed_shards(dir) < 20; spins++) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            done = true;
            break;
        }
        nanosleep(&nap, NULL);
    }
    if (!done) {
        kill(pid, SIGKILL);
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    }
    ck_assert_msg(!done, "pack finished before it could be killed: make the run longer");
    ck_assert_msg(!exists("k/manifest.json"), "a killed pack left a manifest");
    int rc = tu_sh("'%s' %s raw k", pack, flags);
    ck_assert_msg(rc == 3, "re-run: exit %d:\n%s", rc, clipf(slurp_own("err.txt")));
    expect_in("err.txt", "resuming: kept");
    ck_assert_msg(tu_sh("diff -r ref k") == 0, "resumed run differs:\n%s", clipf(slurp_own("out.txt")));
    free(dir);
}
END_TEST

TU_MAIN("pack_cli", {.name = "cli",
                     .timeout = 300,
                     .tests = {help_version_and_rawgen,
                               variants_packed_broken_skipped,
                               bad_input_does_not_poison_next,
                               pixels_match_reference,
                               resample_space_rgb_and_ycc,
                               threads_give_identical_bytes,
                               stats_add_up,
                               kill_and_resume_gives_same_bytes,
                               resume_restarts_when_a_skipped_input_decodes,
                               parts_merge_equals_plain_pack,
                               exit_codes_and_refusals,
                               one_writer_per_outdir,
                               list_file_inputs,
                               disk_full_fails_cleanly,
                               review_refusals,
                               keep_aspect_raw_and_jpeg,
                               original_bytes_kept_bit_exact,
                               keep_jpeg_resume,
                               jpeg_baseline_lossless,
                               restart_markers_lossless}})
