/* tests/tools/test_diag_cli.c - the diagnostics tools from the outside:
 * shardview's contact sheet (decoded back: grid size and every cell's pixels
 * against the records), shardinfo --json, and shardread --sweep's CSV. */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "cli_util.h"
#include "stoker/reader.h"

#define SIDE 24

static void make_dataset(void)
{
    ck_assert_int_eq(
        tu_sh("'%s/shardgen' -q -n 50 --size %d --classes 7 --records-per-shard 20 ds", tu_tools, SIDE), 0);
}

static json_t *last_json_line(const char *out)
{
    const char *last = out, *p;
    while ((p = strchr(last, '\n')) && p[1]) last = p + 1;
    json_error_t je;
    json_t *j = json_loads(last, 0, &je);
    ck_assert_msg(j != NULL, "not JSON: %.200s (%s)", last, je.text);
    return j;
}

/* Decode tu_tmp/name (PNG or JPEG) to RGB. */
static uint8_t *decode(const char *name, int *w, int *h)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", tu_tmp, name);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static uint8_t file[8 << 20];
    size_t n = fread(file, 1, sizeof file, f);
    fclose(f);
    uint8_t *rgb = NULL;
    if (strstr(name, ".png")) {
        spng_ctx *ctx = spng_ctx_new(0);
        struct spng_ihdr ihdr;
        size_t len;
        ck_assert_int_eq(spng_set_png_buffer(ctx, file, n), 0);
        ck_assert_int_eq(spng_get_ihdr(ctx, &ihdr), 0);
        ck_assert_int_eq(spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &len), 0);
        rgb = malloc(len);
        ck_assert_int_eq(spng_decode_image(ctx, rgb, len, SPNG_FMT_RGB8, 0), 0);
        *w = (int)ihdr.width;
        *h = (int)ihdr.height;
        spng_ctx_free(ctx);
    } else {
        tjhandle tj = tjInitDecompress();
        int ss, cs;
        ck_assert_int_eq(tjDecompressHeader3(tj, file, n, w, h, &ss, &cs), 0);
        rgb = malloc((size_t)*w * *h * 3);
        ck_assert_int_eq(tjDecompress2(tj, file, n, rgb, *w, 0, *h, TJPF_RGB, 0), 0);
        tjDestroy(tj);
    }
    return rgb;
}

/* Mean absolute difference between the cell at (x, y) and record rec. */
static double cell_mad(const stk_dataset *ds, const uint8_t *rgb, int W, int x, int y, uint64_t rec)
{
    const void *p;
    uint64_t size;
    ck_assert_int_eq(stk_dataset_value(ds, 0, rec, &p, &size, NULL), 0);
    const uint8_t *img = p;
    double sum = 0;
    for (int r = 0; r < SIDE; r++)
        for (int c = 0; c < SIDE * 3; c++)
            sum += abs((int)rgb[((size_t)(y + r) * W + x) * 3 + c] - (int)img[r * SIDE * 3 + c]);
    return sum / (SIDE * SIDE * 3);
}

static void check_sheet(const char *file, double tol)
{
    json_t *j = last_json_line(tu_slurp("out.txt"));
    int W = (int)json_integer_value(json_object_get(j, "width")),
        H = (int)json_integer_value(json_object_get(j, "height"));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "columns")), 4); /* 13 cells: a 4 x 4 grid */
    ck_assert_int_eq(json_integer_value(json_object_get(j, "rows")), 4);
    ck_assert_int_eq(W, 4 * (SIDE + 4));
    int w, h;
    uint8_t *rgb = decode(file, &w, &h);
    ck_assert_int_eq(w, W);
    ck_assert_int_eq(h, H);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/ds", tu_tmp);
    stk_dataset *ds = stk_dataset_open(dir, NULL);
    ck_assert_ptr_nonnull(ds);
    json_t *cells = json_object_get(j, "cells");
    ck_assert_int_eq(json_array_size(cells), 13);
    for (size_t i = 0; i < 13; i++) {
        json_t *c = json_array_get(cells, i);
        int x = (int)json_integer_value(json_object_get(c, "x")),
            y = (int)json_integer_value(json_object_get(c, "y"));
        uint64_t rec = (uint64_t)json_integer_value(json_object_get(c, "record"));
        ck_assert_int_eq(x, (int)(i % 4) * (SIDE + 4) + 2);
        double own = cell_mad(ds, rgb, W, x, y, rec), other = cell_mad(ds, rgb, W, x, y, (rec + 1) % 50);
        ck_assert_msg(own <= tol, "cell %zu (record %llu): differs by %.2f on average", i,
                      (unsigned long long)rec, own);
        ck_assert_msg(other > own + 10, "cell %zu does not tell record %llu from its neighbour", i,
                      (unsigned long long)rec);
        ck_assert(json_is_integer(json_object_get(c, "label")));
    }
    stk_dataset_close(ds);
    free(rgb);
    json_decref(j);
}

START_TEST(contact_sheet_png_exact)
{
    tu_cli_setup();
    make_dataset();
    ck_assert_int_eq(tu_sh("'%s/shardview' ds --out s.png --records 13 --first 5 --label --json", tu_tools),
                     0);
    check_sheet("s.png", 0);
}
END_TEST

START_TEST(contact_sheet_jpeg_and_random)
{
    tu_cli_setup();
    make_dataset();
    ck_assert_int_eq(
        tu_sh("'%s/shardview' ds --out s.jpg --random 13 --seed 4 --label --quality 95 --json", tu_tools), 0);
    check_sheet("s.jpg", 8);
    /* one record at its stored size */
    ck_assert_int_eq(tu_sh("'%s/shardview' ds --record 7 --out one.png", tu_tools), 0);
    int w, h;
    uint8_t *rgb = decode("one.png", &w, &h);
    ck_assert_int_eq(w, SIDE);
    ck_assert_int_eq(h, SIDE);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/ds", tu_tmp);
    stk_dataset *ds = stk_dataset_open(dir, NULL);
    ck_assert(cell_mad(ds, rgb, SIDE, 0, 0, 7) == 0);
    stk_dataset_close(ds);
    free(rgb);
    tu_sh_says(1, "err.txt", "out of range", "'%s/shardview' ds --record 50 --out one.png", tu_tools);
    ck_assert_int_eq(tu_sh("'%s/shardview' ds", tu_tools), 2);
}
END_TEST

/* Images of their own shape (format 1.2 array field): shardinfo's shape
 * statistics, shardview at each image's own size, shardcheck naming a
 * record whose stored shape was damaged. */
START_TEST(variable_shapes)
{
    tu_cli_setup();
    ck_assert_int_eq(
        tu_sh("'%s/shardgen' -q -n 30 --size %d --aspect --records-per-shard 30 ds", tu_tools, SIDE), 0);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/ds", tu_tmp);
    stk_dataset *ds = stk_dataset_open(dir, NULL);
    ck_assert_ptr_nonnull(ds);
    const stk_shard *sh = stk_dataset_shard(ds, 0);
    uint64_t lo[2] = {UINT64_MAX, UINT64_MAX}, hi[2] = {0, 0}, dims[STK_MAX_DIMS];
    for (uint64_t i = 0; i < 30; i++) {
        ck_assert_int_eq(stk_shard_value_shape(sh, 0, i, dims, NULL), 0);
        for (int d = 0; d < 2; d++) {
            lo[d] = dims[d] < lo[d] ? dims[d] : lo[d];
            hi[d] = dims[d] > hi[d] ? dims[d] : hi[d];
        }
    }
    ck_assert(lo[0] < hi[0] && lo[1] < hi[1] && hi[0] == SIDE && lo[0] >= SIDE / 2);
    ck_assert_int_eq(tu_sh("'%s/shardinfo' --json ds", tu_tools), 0);
    json_t *j = last_json_line(tu_slurp("out.txt"));
    json_t *img = json_array_get(json_object_get(j, "fields"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(img, "kind")), "array");
    ck_assert(json_is_null(json_array_get(json_object_get(img, "shape"), 0)));
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(img, "shape"), 2)), 3);
    for (int d = 0; d < 2; d++) {
        json_t *st = json_array_get(json_object_get(img, "shapes"), (size_t)d);
        ck_assert_int_eq(json_integer_value(json_object_get(st, "min")), (json_int_t)lo[d]);
        ck_assert_int_eq(json_integer_value(json_object_get(st, "max")), (json_int_t)hi[d]);
    }
    json_decref(j);
    /* one record at its own size, pixel for pixel */
    ck_assert_int_eq(stk_shard_value_shape(sh, 0, 11, dims, NULL), 0);
    ck_assert_int_eq(tu_sh("'%s/shardview' ds --record 11 --out one.png", tu_tools), 0);
    int w, h;
    uint8_t *rgb = decode("one.png", &w, &h);
    ck_assert_int_eq(h, (int)dims[0]);
    ck_assert_int_eq(w, (int)dims[1]);
    const void *p;
    uint64_t size;
    ck_assert_int_eq(stk_shard_value(sh, 0, 11, &p, &size, NULL), 0);
    ck_assert_uint_eq(size, (uint64_t)w * h * 3);
    ck_assert(memcmp(rgb, p, size) == 0);
    free(rgb);
    ck_assert_int_eq(tu_sh("'%s/shardview' ds --records 30 --out all.png --json", tu_tools), 0);
    stk_dataset_close(ds);
    /* record 4's width in the shape column, 1 more: shardcheck names it */
    ck_assert_int_eq(tu_sh("'%s/shardcheck' ds", tu_tools), 0);
    ck_assert_int_eq(tu_sh("python3 -c \"import sys\n"
                           "p='ds/shard-00000.stk'; b=bytearray(open(p,'rb').read())\n"
                           "off=int.from_bytes(b[64+96:64+104],'little')+31*8+4*16+8\n"
                           "b[off]^=1; open(p,'wb').write(b)\""),
                     0);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' ds", tu_tools), 1);
    ck_assert_msg(strstr(tu_slurp("out.txt"), "record 4") &&
                      strstr(tu_slurp("out.txt"), "does not hold its shape"),
                  "%s", tu_slurp("out.txt"));
}
END_TEST

START_TEST(shardinfo_json)
{
    tu_cli_setup();
    make_dataset();
    ck_assert_int_eq(tu_sh("'%s/shardinfo' --json ds", tu_tools), 0);
    json_t *j = last_json_line(tu_slurp("out.txt"));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "records")), 50);
    ck_assert_int_eq(json_array_size(json_object_get(j, "shards")), 3);
    ck_assert_int_eq(json_array_size(json_object_get(j, "fields")), 2);
    ck_assert_int_eq(strlen(json_string_value(json_object_get(j, "fingerprint"))), 16);
    json_t *hist = json_object_get(j, "histogram");
    json_int_t total = 0;
    for (size_t i = 0; i < json_array_size(hist); i++)
        total += json_integer_value(json_object_get(json_array_get(hist, i), "count"));
    ck_assert_int_eq(total, 50);
    ck_assert(json_array_size(hist) <= 7 && json_array_size(hist) > 1);
    json_decref(j);
    tu_sh_says(0, "out.txt", "records      50 in 3 shards", "'%s/shardinfo' ds", tu_tools);
    tu_sh_says(1, "err.txt", "shardinfo: nowhere: cannot open", "'%s/shardinfo' nowhere", tu_tools);
}
END_TEST

/* A dataset of 4 images u8[4,4,3] and no label field. */
static void write_images_only(const char *dir)
{
    stk_schema sc;
    stk_error e;
    const uint64_t shape[3] = {4, 4, 3};
    stk_schema_init(&sc);
    ck_assert_int_eq(stk_schema_add_tensor(&sc, "image", STK_DT_U8, 3, shape, &e), STK_OK);
    stk_dataset_options o;
    stk_dataset_options_init(&o);
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &sc, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    uint8_t px[48];
    for (int i = 0; i < 4; i++) {
        memset(px, 60 * i, sizeof px);
        stk_value v = {px, sizeof px};
        ck_assert_int_eq(stk_dataset_writer_append(dw, &v, &e), STK_OK);
    }
    ck_assert_msg(stk_dataset_writer_finish(dw, &e) == STK_OK, "%s", e.msg);
}

/* What shardview once took silently: the output's format follows its name
 * (a .png holds PNG, a .jpg JPEG, other names are refused before any
 * work), --random above the records, --label without a label field, an
 * --out directory that is not there (named as given, not a temporary
 * file); and a directory without a manifest is not a dataset. */
START_TEST(refusals)
{
    tu_cli_setup();
    make_dataset();
    ck_assert_int_eq(
        tu_sh("'%s/shardview' ds --out a.png && '%s/shardview' ds --out b.JPEG", tu_tools, tu_tools), 0);
    ck_assert(!memcmp(tu_slurp("a.png"), "\x89PNG", 4));
    ck_assert(!memcmp(tu_slurp("b.JPEG"), "\xff\xd8\xff", 3));
    tu_sh_says(2, "err.txt",
               "shardview: --out s.gif: the format follows the name: end it in .png, .jpg or .jpeg",
               "'%s/shardview' ds --out s.gif", tu_tools);
    ck_assert(!tu_exists("s.gif"));
    tu_sh_says(2, "err.txt", "shardview: --random 51: ds has 50 records",
               "'%s/shardview' ds --random 51 --out r.png", tu_tools);
    ck_assert(!tu_exists("r.png"));
    ck_assert_int_eq(tu_sh("'%s/shardview' ds --random 50 --out r.png", tu_tools), 0);
    tu_sh_says(1, "err.txt", "shardview: --out /nonexistent-dir/s.jpg: cannot write there: No such file",
               "'%s/shardview' ds --out /nonexistent-dir/s.jpg", tu_tools);
    ck_assert(!strstr(tu_slurp("err.txt"), ".tmp"));
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/nolabel", tu_tmp);
    write_images_only(dir);
    tu_sh_says(2, "err.txt", "shardview: --label: nolabel has no integer scalar field 'label'",
               "'%s/shardview' nolabel --label --out l.png", tu_tools);
    ck_assert_int_eq(tu_sh("mkdir empty"), 0);
    for (int i = 0; i < 4; i++) {
        static const char *const cmd[] = {"shardinfo empty", "shardview --out e.png empty",
                                          "shardread -q empty", "shardcheck -q empty"};
        tu_sh_says(1, "err.txt", "empty: not a stoker dataset (no manifest.json)", "'%s'/%s", tu_tools,
                   cmd[i]);
    }
}
END_TEST

/* shardinfo prints the pack parameters as one "key: value" line each
 * (--json keeps the object). */
START_TEST(shardinfo_pack_lines)
{
    tu_cli_setup();
    make_dataset();
    tu_sh_says(0, "out.txt", "\npack\n  tool: shardgen\n", "'%s/shardinfo' ds", tu_tools);
    ck_assert_ptr_nonnull(strstr(tu_slurp("out.txt"), "\n  size: 24\n"));
    ck_assert_ptr_nonnull(strstr(tu_slurp("out.txt"), "in 3 shards, 120 KB ("));
    ck_assert_ptr_null(strstr(tu_slurp("out.txt"), "{"));
    /* one of a thing is singular, sizes in units that fit */
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/one", tu_tmp);
    write_images_only(dir);
    tu_sh_says(0, "out.txt", "records      4 in 1 shard, ", "'%s/shardinfo' one", tu_tools);
    tu_sh_says(0, "err.txt", "full check of 1 shard, 4 records, ", "'%s/shardcheck' one", tu_tools);
    tu_sh_says(0, "out.txt", "read 1 batch, 4 samples, ", "'%s/shardread' -b 4 one", tu_tools);
    ck_assert_ptr_nonnull(strstr(tu_slurp("out.txt"), "(1 zero-copy batch, 0 records verified)"));
}
END_TEST

/* shardread -q --sweep with `args` on ds, its table written to `file`: it
 * exits 0 and the table has a header and `rows` points; the table's text. */
static char *sweep_csv(const char *args, const char *file, int rows)
{
    ck_assert_int_eq(tu_sh("'%s/shardread' -q --sweep %s --csv %s ds", tu_tools, args, file), 0);
    char *csv = tu_slurp(file);
    ck_assert_int_eq(tu_count_lines(csv), 1 + rows);
    return csv;
}

START_TEST(sweep_csv_and_json)
{
    tu_cli_setup();
    make_dataset();
    char *csv = sweep_csv("--sweep-threads 1,2 --sweep-prefetch 1,3 --sweep-batch 4,8 --sweep-seconds 0.05 "
                          "--order shuffle --plot sweep.svg",
                          "sweep.csv", 8);
    static const char header[] =
        "threads,prefetch,batch_size,samples_per_s,gb_per_s,wait_fraction,peak_anon_mib,knee,io,io_depth\n";
    ck_assert(strncmp(csv, header, sizeof header - 1) == 0);
    int knees = 0;
    for (char *line = strchr(csv, '\n') + 1; *line; line = strchr(line, '\n') + 1) {
        unsigned t, p, b;
        double sps, gbs, wait, mib;
        int knee;
        ck_assert_int_eq(
            sscanf(line, "%u,%u,%u,%lf,%lf,%lf,%lf,%d", &t, &p, &b, &sps, &gbs, &wait, &mib, &knee), 8);
        ck_assert(sps > 0 && wait >= 0 && wait <= 1 && mib > 0);
        knees += knee;
    }
    ck_assert_int_eq(knees, 1);
    ck_assert(strstr(tu_slurp("sweep.svg"), "<svg") != NULL);
    ck_assert_int_eq(
        tu_sh("'%s/shardread' -q --sweep --json --sweep-threads 1 --sweep-prefetch 1 --sweep-seconds 0.05 ds",
              tu_tools),
        0);
    json_t *j = last_json_line(tu_slurp("out.txt"));
    ck_assert_int_eq(json_array_size(json_object_get(j, "points")), 1);
    json_decref(j);
    ck_assert_int_eq(tu_sh("'%s/shardread' --csv x.csv ds", tu_tools), 2); /* --csv without --sweep */
}
END_TEST

/* The read path as sweep axes: io depth applies to direct points only. */
START_TEST(sweep_io_axes)
{
    tu_cli_setup();
    make_dataset();
    char *csv = sweep_csv("--sweep-threads 1 --sweep-prefetch 1 --sweep-io mmap,direct --sweep-io-depth 2,8 "
                          "--sweep-seconds 0.05 --order shuffle",
                          "io.csv", 3);
    ck_assert_msg(strstr(csv, ",mmap,0\n") && strstr(csv, ",direct,2\n") && strstr(csv, ",direct,8\n"), "%s",
                  csv);
    ck_assert_int_eq(tu_sh("'%s/shardread' --sweep --sweep-io fast ds", tu_tools), 2);
    ck_assert_int_eq(tu_sh("'%s/shardread' --sweep-io-depth 4 ds", tu_tools), 2); /* without --sweep */
    ck_assert_int_eq(tu_sh("'%s/shardread' --io sideways ds", tu_tools), 2);
    ck_assert_int_eq(tu_sh("'%s/shardread' -q --json --io direct --io-depth 3 ds", tu_tools), 0);
    json_t *j = last_json_line(tu_slurp("out.txt"));
    ck_assert_str_eq(json_string_value(json_object_get(j, "io")), "direct");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "io_depth")), 3);
    ck_assert_int_gt(json_integer_value(json_object_get(j, "io_reads")), 0);
    ck_assert_str_eq(json_string_value(json_object_get(j, "io_reason")), "direct: asked for");
    json_decref(j);
}
END_TEST

TU_MAIN("diagnostics cli",
        {.name = "cli",
         .timeout = 120,
         .tests = {contact_sheet_png_exact, contact_sheet_jpeg_and_random, shardinfo_json, variable_shapes,
                   sweep_csv_and_json, sweep_io_axes, refusals, shardinfo_pack_lines}})
