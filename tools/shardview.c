/* shardview - see what pack stored: a contact sheet of records (a grid of
 * the stored images, each with its label drawn under it), or one record.
 *
 * The sheet's geometry is fixed so that machines can read it too (--json
 * prints it, and the tests check every cell's pixels): CELL_PAD pixels of
 * background around each image, LABEL_H pixels of label strip under it when
 * --label is given, cells left to right, top to bottom. Labels are drawn as
 * numbers with a built-in 3x5 digit font; --json (and the legend it prints)
 * maps every cell to its record, label and class name. */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <spng.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "image.h"

#include "stoker/reader.h"

#define CELL_PAD 2
#define GLYPH_SCALE 2
#define LABEL_H (5 * GLYPH_SCALE + 4)
#define BACKGROUND 24
#define INK 235

static void usage(FILE *f)
{
    fprintf(f, "Usage: shardview [OPTIONS] DATASET --out FILE\n"
               "Write a contact sheet of a dataset's stored images (FILE.jpg or FILE.png),\n"
               "or one record's image with --record.\n\n"
               "  -o, --out FILE        output image, its format by its name: .png (libspng),\n"
               "                        .jpg or .jpeg (TurboJPEG); other names are refused\n"
               "  -n, --records N       the first N records (default 64)\n"
               "      --random N        N records drawn at random (without repeats; at most\n"
               "                        the dataset's records)\n"
               "      --seed S          seed for --random (default 0)\n"
               "      --first I         start at record I (with --records)\n"
               "      --record I        only record I, at its stored size\n"
               "      --label           draw each record's label under it (the dataset\n"
               "                        needs an integer field 'label')\n"
               "      --field NAME      the image field, u8 [H, W, 1|3|4] (default image)\n"
               "      --columns C       cells per row (default: a square-ish grid)\n"
               "      --quality Q       JPEG quality (default 90)\n"
               "      --json            print the sheet's geometry and cells as JSON\n"
               "  -q, --quiet           accepted as by every tool (shardview prints only errors)\n"
               "  -h, --help            this help\n"
               "  -V, --version         version\n\n" CLI_EXIT_HELP);
}

typedef struct {
    const char *out, *field, *path;
    uint64_t n, first, seed, record;
    int random, one, label, json, quality, png;
    unsigned columns;
} opts;

/* 3x5 digits and '-', one row of 3 bits per byte. */
static const uint8_t DIGITS[11][5] = {
    {7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1}, {7, 4, 7, 1, 7},
    {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7}, {0, 0, 7, 0, 0},
};

static void draw_number(uint8_t *img, unsigned W, unsigned H, unsigned x, unsigned y, unsigned xmax,
                        long long v)
{
    char s[32];
    int len = snprintf(s, sizeof s, "%lld", v);
    for (int k = 0; k < len; k++) {
        const uint8_t *g = DIGITS[s[k] == '-' ? 10 : s[k] - '0'];
        for (unsigned r = 0; r < 5 * GLYPH_SCALE; r++)
            for (unsigned c = 0; c < 3 * GLYPH_SCALE; c++) {
                unsigned px = x + (unsigned)k * 4 * GLYPH_SCALE + c, py = y + r;
                if (px >= W || px >= xmax || py >= H || !(g[r / GLYPH_SCALE] & (4 >> (c / GLYPH_SCALE))))
                    continue;
                memset(img + ((size_t)py * W + px) * 3, INK, 3);
            }
    }
}

/* Copy a u8 [h, w, ch] value into the RGB canvas at (x, y). */
static void blit(uint8_t *dst, unsigned W, const uint8_t *src, unsigned w, unsigned h, unsigned ch,
                 unsigned x, unsigned y)
{
    for (unsigned r = 0; r < h; r++)
        for (unsigned c = 0; c < w; c++) {
            const uint8_t *p = src + ((size_t)r * w + c) * ch;
            uint8_t *q = dst + ((size_t)(y + r) * W + x + c) * 3;
            q[0] = p[0];
            q[1] = ch >= 3 ? p[1] : p[0];
            q[2] = ch >= 3 ? p[2] : p[0];
        }
}

/* The format --out names by its extension: 1 PNG, 0 JPEG, -1 neither. */
static int out_format(const char *path)
{
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return -1;
    if (!strcasecmp(dot, ".png")) return 1;
    return !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") ? 0 : -1;
}

/* Whether --out's directory can take a new file; else a message naming it. */
static bool out_writable(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + 1 : 1, slash ? path : ".");
    if (access(dir, W_OK | X_OK) == 0) return true;
    fprintf(stderr, "shardview: --out %s: cannot write there: %s\n", path, strerror(errno));
    return false;
}

static int write_image(const char *path, int png, const uint8_t *rgb, unsigned W, unsigned H, int quality)
{
    unsigned char *buf = NULL;
    size_t len = 0;
    char msg[256] = "";
    if (png) {
        spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
        struct spng_ihdr ihdr = {
            .width = W, .height = H, .bit_depth = 8, .color_type = SPNG_COLOR_TYPE_TRUECOLOR};
        int e = ctx ? 0 : SPNG_EMEM;
        if (!e) e = spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
        if (!e) e = spng_set_ihdr(ctx, &ihdr);
        if (!e) e = spng_encode_image(ctx, rgb, (size_t)W * H * 3, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
        if (!e) buf = spng_get_png_buffer(ctx, &len, &e);
        if (e) snprintf(msg, sizeof msg, "PNG encoding failed: %s", spng_strerror(e));
        spng_ctx_free(ctx);
    } else {
        tjhandle tj = tjInitCompress();
        unsigned long size = 0;
        if (!tj ||
            tjCompress2(tj, rgb, (int)W, 0, (int)H, TJPF_RGB, &buf, &size, TJSAMP_444, quality, 0) != 0)
            snprintf(msg, sizeof msg, "JPEG encoding failed: %s",
                     tj ? tjGetErrorStr2(tj) : "no TurboJPEG handle");
        len = size;
        if (tj) tjDestroy(tj);
    }
    stk_error err;
    int rc = msg[0] ? 1 : stk_file_commit(path, buf, len, &err) ? 1 : 0;
    if (msg[0]) fprintf(stderr, "shardview: %s: %s\n", path, msg);
    else if (rc) fprintf(stderr, "shardview: --out %s: %s\n", path, err.msg);
    if (png) free(buf);
    else tjFree(buf);
    return rc;
}

static int parse_args(int argc, char **argv, opts *o)
{
    enum { O_RANDOM = 256, O_SEED, O_FIRST, O_RECORD, O_LABEL, O_FIELD, O_COLS, O_QUALITY };
    static const struct option lo[] = {
        {"out", 1, 0, 'o'},           {"records", 1, 0, 'n'},   {"random", 1, 0, O_RANDOM},
        {"seed", 1, 0, O_SEED},       {"first", 1, 0, O_FIRST}, {"record", 1, 0, O_RECORD},
        {"label", 0, 0, O_LABEL},     {"field", 1, 0, O_FIELD}, {"columns", 1, 0, O_COLS},
        {"quality", 1, 0, O_QUALITY}, CLI_COMMON_OPTIONS};
    cli_args a = {.prog = "shardview", .usage = usage, .longopts = lo};
    memset(o, 0, sizeof *o);
    o->n = 64;
    o->field = "image";
    o->quality = 90;
    int c;
    uint64_t v;
    while ((c = cli_getopt(&a, argc, argv, "o:n:" CLI_COMMON_SHORT)) != -1) {
        bool ok = true;
        switch (c) {
        case 'o':
            o->out = optarg;
            break;
        case 'n':
        case O_RANDOM:
            ok = cli_uint(&a, optarg, 1, 100000, &o->n);
            o->random = c == O_RANDOM;
            break;
        case O_SEED:
            ok = cli_uint(&a, optarg, 0, UINT64_MAX, &o->seed);
            break;
        case O_FIRST:
            ok = cli_uint(&a, optarg, 0, UINT64_MAX, &o->first);
            break;
        case O_RECORD:
            ok = cli_uint(&a, optarg, 0, UINT64_MAX, &o->record);
            o->one = 1;
            break;
        case O_LABEL:
            o->label = 1;
            break;
        case O_FIELD:
            o->field = optarg;
            break;
        case O_COLS:
            ok = cli_uint(&a, optarg, 1, 1000, &v);
            o->columns = (unsigned)v;
            break;
        case O_QUALITY:
            ok = cli_uint(&a, optarg, 1, 100, &v);
            o->quality = (int)v;
            break;
        default:
            return CLI_EXIT_USAGE;
        }
        if (!ok) return CLI_EXIT_USAGE;
    }
    o->json = a.json;
    if (!cli_operands(&a, argc, 1, 1, "one DATASET")) return CLI_EXIT_USAGE;
    if (!o->out) return cli_usage_error(&a, "--out FILE is required");
    if ((o->png = out_format(o->out)) < 0)
        return cli_usage_error(&a, "--out %s: the format follows the name: end it in .png, .jpg or .jpeg",
                               o->out);
    o->path = argv[optind];
    return CLI_EXIT_OK;
}

/* The records to show: the first n from `first`, n distinct at random (a
 * shuffled epoch's first n: stoker's own permutation), or one. */
static uint64_t pick(const opts *o, uint64_t N, uint64_t i)
{
    if (o->one) return o->record;
    if (o->random) return stk_order_record(STK_ORDER_SHUFFLE, N, o->seed, 0, 0, 0, i);
    return o->first + i;
}

/* A record's value, also of a compressed field (through the cursor). */
static int value_of(const stk_dataset *ds, unsigned f, uint64_t rec, stk_block_cursor *bc, const void **p,
                    uint64_t *size, stk_error *err)
{
    size_t s;
    uint64_t local;
    int rc = stk_dataset_locate(ds, rec, &s, &local, err);
    return rc ? rc : stk_shard_value_at(stk_dataset_shard(ds, s), f, local, bc, p, size, err);
}

/* Shape of record rec's image (array fields: its own). */
static int shape_of(const stk_dataset *ds, unsigned f, uint64_t rec, uint64_t *dims, stk_error *err)
{
    size_t s;
    uint64_t local;
    int rc = stk_dataset_locate(ds, rec, &s, &local, err);
    return rc ? rc : stk_shard_value_shape(stk_dataset_shard(ds, s), f, local, dims, err);
}

/* A JPEG value (codec jpeg) decoded to its stored shape into *buf. */
static int decode_jpeg(stk__jpeg *j, const void *p, uint64_t size, const uint64_t *dims, stk__img_buf *buf,
                       uint64_t rec, stk_error *err)
{
    stk__jpeg_info info;
    stk_error e;
    int pf = dims[2] == 1 ? STK_IMG_PF_GRAY : STK_IMG_PF_RGB,
        rc = stk__jpeg_header(j, p, (size_t)size, &info, &e);
    if (!rc && (info.w != dims[1] || info.h != dims[0]))
        rc = stk_error_set(&e, STK_E_FORMAT, "its header gives %ux%u, not %llux%llu", info.w, info.h,
                           (unsigned long long)dims[1], (unsigned long long)dims[0]);
    if (!rc) rc = stk__img_buf_reserve(buf, stk__jpeg_decode_bytes(&info, pf, 1), "the image", &e);
    if (!rc) rc = stk__jpeg_decode(j, p, (size_t)size, &info, pf, 1, buf->p, &e);
    if (rc)
        return stk_error_set(err, rc == STK_E_NOMEM ? STK_E_NOMEM : STK_E_FORMAT,
                             "record %llu: the JPEG does not decode: %s", (unsigned long long)rec, e.msg);
    return STK_OK;
}

/* A coded value's checksum, checked before it is decoded whatever the
 * dataset's verification says (spec/FORMAT.md 9.1). */
static int check_value(const stk_dataset *ds, unsigned f, uint64_t rec, const void *p, uint64_t size,
                       stk_error *err)
{
    size_t s;
    uint64_t local;
    int rc = stk_dataset_locate(ds, rec, &s, &local, err);
    if (rc) return rc;
    const stk_shard *sh = stk_dataset_shard(ds, s);
    uint64_t want = stk_shard_stored_hash(sh, f, local), got = stk_hash(p, (size_t)size);
    if (want == got) return STK_OK;
    return stk_error_set(err, STK_E_CHECKSUM,
                         "%s: record %llu (dataset record %llu): checksum mismatch (stored %016llx, computed "
                         "%016llx)",
                         stk_shard_path(sh), (unsigned long long)local, (unsigned long long)rec,
                         (unsigned long long)want, (unsigned long long)got);
}

static int64_t label_of(const stk_dataset *ds, int lf, uint64_t rec, stk_block_cursor *bb)
{
    const void *p;
    uint64_t size;
    int64_t v = 0;
    if (lf < 0 || value_of(ds, (unsigned)lf, rec, bb, &p, &size, NULL)) return 0;
    memcpy(&v, p, size < 8 ? size : 8);
    int dt = stk_dataset_schema(ds)->fields[lf].dtype; /* sign-extend the narrow signed types */
    if (dt == STK_DT_I8) v = (int8_t)v;
    else if (dt == STK_DT_I16) v = (int16_t)v;
    else if (dt == STK_DT_I32) v = (int32_t)v;
    return v;
}

int main(int argc, char **argv)
{
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    if (!out_writable(o.out)) return CLI_EXIT_FAIL;
    stk_error err;
    stk_dataset *ds = stk_dataset_open(o.path, &err);
    if (!ds) {
        fprintf(stderr, "shardview: %s\n", err.msg);
        return CLI_EXIT_FAIL;
    }
    const stk_schema *sc = stk_dataset_schema(ds);
    const stk_manifest *m = stk_dataset_manifest(ds);
    int f = stk_schema_find(sc, o.field), lf = stk_schema_find(sc, "label");
    if (lf >= 0 &&
        (sc->fields[lf].kind != STK_KIND_TENSOR || sc->fields[lf].ndim || sc->fields[lf].dtype > STK_DT_I64))
        lf = -1;
    const stk_field *fd = f >= 0 ? &sc->fields[f] : NULL;
    if (!fd || (fd->kind != STK_KIND_TENSOR && fd->kind != STK_KIND_ARRAY) || fd->dtype != STK_DT_U8 ||
        fd->ndim != 3 || (fd->shape[2] != 1 && fd->shape[2] != 3 && fd->shape[2] != 4)) {
        fprintf(stderr, "shardview: %s: no u8 [H, W, 1|3|4] field '%s'\n", o.path, o.field);
        stk_dataset_close(ds);
        return CLI_EXIT_FAIL;
    }
    /* Geometry in 64 bits, refused before any allocation when too large
     * (and above what JPEG can hold: 65,500 pixels a side). */
    uint64_t h = fd->shape[0], w = fd->shape[1], ch = fd->shape[2];
    uint64_t N = stk_dataset_records(ds), n = o.one ? 1 : o.n;
    if (!o.one && !o.random && o.first < N && n > N - o.first) n = N - o.first;
    const char *refused = NULL;
    if (o.random && n > N) refused = "--random";
    else if (o.label && !o.one && lf < 0) refused = "--label";
    if (refused) {
        if (o.label && lf < 0)
            fprintf(stderr, "shardview: --label: %s has no integer scalar field 'label' to draw\n", o.path);
        else
            fprintf(stderr, "shardview: --random %llu: %s has %llu record%s (at most that many)\n",
                    (unsigned long long)n, o.path, (unsigned long long)N, cli_plural(N));
        stk_dataset_close(ds);
        return CLI_EXIT_USAGE;
    }
    if ((o.one && o.record >= N) || (!o.one && !o.random && o.first >= N)) {
        fprintf(stderr, "shardview: %s: record %llu out of range (%llu records)\n", o.path,
                (unsigned long long)(o.one ? o.record : o.first), (unsigned long long)N);
        stk_dataset_close(ds);
        return CLI_EXIT_FAIL;
    }
    /* Images of their own shape (array fields) sit in cells of the largest
     * shown, top left, at their stored size. */
    for (uint64_t i = 0; fd->kind == STK_KIND_ARRAY && i < n; i++) {
        uint64_t dims[STK_MAX_DIMS];
        if (i == 0) h = w = 1;
        if (shape_of(ds, (unsigned)f, pick(&o, N, i), dims, &err)) {
            fprintf(stderr, "shardview: %s\n", err.msg);
            stk_dataset_close(ds);
            return CLI_EXIT_FAIL;
        }
        h = dims[0] > h ? dims[0] : h;
        w = dims[1] > w ? dims[1] : w;
    }
    uint64_t cols = o.one ? 1 : o.columns ? o.columns : 1, pad = o.one ? 0 : CELL_PAD;
    while (!o.one && !o.columns && cols * cols < n) cols++;
    if (cols > n) cols = n;
    uint64_t rows = (n + cols - 1) / cols, lab = o.label && !o.one ? LABEL_H : 0;
    uint64_t cw = w + 2 * pad, chh = h + 2 * pad + lab, W = cols * cw, H = rows * chh;
    if (W > 65500 || H > 65500 || W * H > 400000000ULL) {
        fprintf(stderr,
                "shardview: a %llux%llu sheet is too large (at most 65500 a side, 400 megapixels): fewer "
                "--records or --columns\n",
                (unsigned long long)W, (unsigned long long)H);
        stk_dataset_close(ds);
        return CLI_EXIT_USAGE;
    }
    uint8_t *rgb = malloc((size_t)(W * H * 3));
    int64_t *labels = malloc(sizeof *labels * n);
    uint64_t *recs = malloc(sizeof *recs * n);
    if (!rgb || !labels || !recs) {
        fprintf(stderr, "shardview: out of memory for a %llux%llu sheet\n", (unsigned long long)W,
                (unsigned long long)H);
        free(rgb), free(labels), free(recs);
        stk_dataset_close(ds);
        return CLI_EXIT_FAIL;
    }
    memset(rgb, BACKGROUND, (size_t)(W * H * 3));
    stk_block_cursor ib = {0}, lb = {0}; /* image and label blocks (compressed fields) */
    stk__jpeg *jd = fd->codec == STK_CODEC_JPEG ? stk__jpeg_new() : NULL;
    stk__img_buf pixels = {0}; /* a decoded JPEG */
    if (fd->codec == STK_CODEC_JPEG && !jd) {
        fprintf(stderr, "shardview: out of memory for the JPEG decoder\n");
        rc = CLI_EXIT_FAIL;
    }
    for (uint64_t i = 0; i < n && !rc; i++) {
        uint64_t rec = recs[i] = pick(&o, N, i), dims[STK_MAX_DIMS] = {h, w, ch};
        const void *p;
        uint64_t size;
        if (value_of(ds, (unsigned)f, rec, &ib, &p, &size, &err) ||
            (fd->kind == STK_KIND_ARRAY && shape_of(ds, (unsigned)f, rec, dims, &err)) ||
            (jd && check_value(ds, (unsigned)f, rec, p, size, &err)) ||
            (jd && decode_jpeg(jd, p, size, dims, &pixels, rec, &err))) {
            fprintf(stderr, "shardview: %s\n", err.msg);
            rc = CLI_EXIT_FAIL;
            break;
        }
        unsigned x = (unsigned)((i % cols) * cw + pad), y = (unsigned)((i / cols) * chh + pad);
        blit(rgb, (unsigned)W, jd ? pixels.p : p, (unsigned)dims[1], (unsigned)dims[0], (unsigned)ch, x, y);
        labels[i] = label_of(ds, lf, rec, &lb);
        /* drawn inside its own cell only: a long label is cut, not spilled */
        if (lab && lf >= 0)
            draw_number(rgb, (unsigned)W, (unsigned)H, x + 1, y + (unsigned)h + 2, x + (unsigned)w,
                        labels[i]);
    }
    if (!rc && write_image(o.out, o.png, rgb, (unsigned)W, (unsigned)H, o.quality)) rc = CLI_EXIT_FAIL;
    if (!rc && o.json) { /* only for a sheet that was written */
        printf("{\"out\":");
        cli_json_string(stdout, o.out);
        printf(",\"width\":%llu,\"height\":%llu,\"columns\":%llu,\"rows\":%llu,\"cell_width\":%llu,"
               "\"cell_height\":%llu,\"pad\":%llu,\"cells\":[",
               (unsigned long long)W, (unsigned long long)H, (unsigned long long)cols,
               (unsigned long long)rows, (unsigned long long)cw, (unsigned long long)chh,
               (unsigned long long)pad);
        for (uint64_t i = 0; i < n; i++) {
            const char *cls =
                lf >= 0 && labels[i] >= 0 && (uint64_t)labels[i] < m->nclasses ? m->classes[labels[i]] : NULL;
            printf("%s{\"record\":%llu,\"x\":%llu,\"y\":%llu", i ? "," : "", (unsigned long long)recs[i],
                   (unsigned long long)((i % cols) * cw + pad), (unsigned long long)((i / cols) * chh + pad));
            if (lf >= 0) printf(",\"label\":%lld", (long long)labels[i]);
            if (cls) {
                printf(",\"class\":");
                cli_json_string(stdout, cls);
            }
            putchar('}');
        }
        printf("]}\n");
    }
    free(labels);
    free(recs);
    stk_block_cursor_free(&ib);
    stk__img_buf_free(&pixels);
    stk__jpeg_free(jd);
    stk_block_cursor_free(&lb);
    free(rgb);
    stk_dataset_close(ds);
    return rc;
}
