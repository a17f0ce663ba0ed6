/* tests/tools/test_shardcheck_cli.c - shardcheck and shardgen from the outside.
 *
 * Every corruption is made in a fresh copy of a small generated dataset, at
 * an offset computed from the shard's own layout, and the test asserts the
 * exit status and the exact record/field that shardcheck names. A JPEG value
 * whose checksum holds but which does not decode passes --full and is named
 * by --decode. */
#define _GNU_SOURCE
#define STOKER_ADVANCED_API /* stk_dataset_writer_trust_jpeg: a value stored unchecked */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "internal.h"

#include "cli_util.h"

/* A dataset with an image, a label and a caption field in several shards. */
static void make_dataset(const char *name)
{
    ck_assert_int_eq(
        tu_sh("'%s/shardgen' -q -n 120 --size 24 --captions --records-per-shard 40 %s", tu_tools, name), 0);
}

static void copy_dataset(const char *from, const char *to)
{
    ck_assert_int_eq(tu_sh("rm -rf %s && cp -r %s %s", to, from, to), 0);
}

static void flip(const char *file, uint64_t off)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", tu_tmp, file);
    FILE *f = fopen(path, "r+b");
    ck_assert(f != NULL);
    fseek(f, (long)off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, (long)off, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
}

static stk__layout layout_of(const char *file)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", tu_tmp, file);
    /* The header is all that is needed: read its first 64 KiB, and the size. */
    static uint8_t buf[1 << 16];
    struct stat st;
    FILE *f = fopen(path, "rb");
    ck_assert(f != NULL && stat(path, &st) == 0);
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    stk_error err;
    stk__layout L;
    ck_assert_msg(stk__layout_decode(buf, len, (uint64_t)st.st_size, path, &L, &err) == 0, "%s", err.msg);
    return L;
}

START_TEST(help_version_usage)
{
    tu_cli_setup();
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --help", tu_tools), 0);
    ck_assert_ptr_nonnull(strstr(tu_slurp("out.txt"), "Exit status"));
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --version", tu_tools), 0);
    ck_assert_ptr_nonnull(strstr(tu_slurp("out.txt"), "shardcheck (stoker)"));
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --no-such-flag x", tu_tools), 2);
    ck_assert_int_eq(tu_sh("'%s/shardcheck'", tu_tools), 2);
    ck_assert_int_eq(tu_count_lines(tu_slurp("err.txt")), 1);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' -j 0 x", tu_tools), 2);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' does-not-exist", tu_tools), 1); /* unreadable input */
    ck_assert_ptr_nonnull(strstr(tu_slurp("err.txt"), "does-not-exist"));
    ck_assert_int_eq(tu_sh("'%s/shardgen' --size banana x", tu_tools), 2);
    ck_assert_ptr_nonnull(strstr(tu_slurp("err.txt"), "--size"));
}
END_TEST

START_TEST(clean_dataset_and_json)
{
    tu_cli_setup();
    make_dataset("ds");
    ck_assert_int_eq(tu_sh("'%s/shardcheck' ds", tu_tools), 0);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --quick ds/manifest.json", tu_tools), 0);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --file-hash -j2 ds", tu_tools), 0);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' ds/shard-00001.stk ds/shard-00002.stk", tu_tools), 0);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --json ds", tu_tools), 0);
    json_error_t je;
    json_t *j = json_loads(tu_slurp("out.txt"), 0, &je);
    ck_assert_msg(j != NULL, "--json output does not parse: %s", je.text);
    ck_assert(json_is_true(json_object_get(j, "ok")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "records")), 120);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "shards")), 3);
    ck_assert_int_eq(json_array_size(json_object_get(j, "problem_list")), 0);
    json_decref(j);
}
END_TEST

/* Flip one byte in region `what` of shard 1 and expect `expect` in the output. */
static void expect_flip(const char *ds, uint64_t off, const char *expect)
{
    copy_dataset(ds, "bad");
    flip("bad/shard-00001.stk", off);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' -j2 bad", tu_tools), 1);
    const char *out = tu_slurp("out.txt");
    ck_assert_msg(strstr(out, expect) != NULL, "flip at %llu: expected '%s' in:\n%s", (unsigned long long)off,
                  expect, out);
    ck_assert_msg(strstr(out, "bad/shard-00001.stk") != NULL, "problem line must name the shard:\n%s", out);
}

START_TEST(byte_flips_name_the_record)
{
    tu_cli_setup();
    make_dataset("ds");
    stk__layout L = layout_of("ds/shard-00001.stk");
    ck_assert_uint_eq(L.records, 40);
    const stk__region *img = &L.region[0], *lab = &L.region[1], *cap = &L.region[2];
    expect_flip("ds", img->data_off + 7 * img->stride + 5, "record 7, field 'image': checksum mismatch");
    expect_flip("ds", img->data_off + 39 * img->stride + img->stride - 1, "record 39, field 'image'");
    expect_flip("ds", lab->data_off + 12 * 8 + 3, "record 12, field 'label': checksum mismatch");
    expect_flip("ds", cap->heap_off, "record 0, field 'caption': checksum mismatch");
    expect_flip("ds", cap->data_off + 20 * 8, "record 19, field 'caption'");
    expect_flip("ds", L.cksum_off + (25 * 3 + 1) * 8, "checksum table corrupt");
    expect_flip("ds", L.cksum_off + (25 * 3 + 1) * 8, "record 25, field 'label'");
    expect_flip("ds", 100, "header checksum mismatch");
    expect_flip("ds", L.file_size - 2, "footer magic");
    expect_flip("ds", img->data_off + img->data_len + 1, "nonzero padding byte");
}
END_TEST

START_TEST(quick_is_structure_only)
{
    tu_cli_setup();
    make_dataset("ds");
    stk__layout L = layout_of("ds/shard-00001.stk");
    copy_dataset("ds", "bad");
    flip("bad/shard-00001.stk", L.region[0].data_off + 3);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --quick bad", tu_tools), 0); /* data is not read */
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --full bad", tu_tools), 1);
    ck_assert_int_eq(tu_sh("truncate -s 9000 bad/shard-00002.stk && '%s/shardcheck' --quick bad", tu_tools),
                     1);
    ck_assert_ptr_nonnull(strstr(tu_slurp("out.txt"), "bad/shard-00002.stk: truncated"));
}
END_TEST

START_TEST(manifest_tampering)
{
    tu_cli_setup();
    make_dataset("ds");
    copy_dataset("ds", "bad");
    ck_assert_int_eq(tu_sh("rm bad/shard-00002.stk && '%s/shardcheck' --quick bad", tu_tools), 1);
    ck_assert_ptr_nonnull(strstr(tu_slurp("out.txt"), "shard-00002.stk: cannot open"));
    copy_dataset("ds", "bad");
    ck_assert_int_eq(tu_sh("mv bad/shard-00000.stk x && mv bad/shard-00001.stk bad/shard-00000.stk && "
                           "mv x bad/shard-00001.stk && '%s/shardcheck' --quick bad",
                           tu_tools),
                     1);
    ck_assert_ptr_nonnull(strstr(tu_slurp("out.txt"), "differs from the manifest's"));
    copy_dataset("ds", "bad");
    ck_assert_int_eq(tu_sh("sed -i 's#\"shard-00001.stk\"#\"../shard-00001.stk\"#' bad/manifest.json && "
                           "'%s/shardcheck' bad",
                           tu_tools),
                     1);
    ck_assert_ptr_nonnull(strstr(tu_slurp("out.txt"), "not a plain relative path"));
    copy_dataset("ds", "bad");
    ck_assert_int_eq(tu_sh("sed -i '0,/\"records\": 40/s//\"records\": 41/' bad/manifest.json && "
                           "'%s/shardcheck' bad",
                           tu_tools),
                     1);
    ck_assert_ptr_nonnull(strstr(tu_slurp("out.txt"), "record_count"));
}
END_TEST

START_TEST(threads_give_the_same_report)
{
    tu_cli_setup();
    ck_assert_int_eq(
        tu_sh("'%s/shardgen' -q -n 400 --size 32 --captions --records-per-shard 25 ds", tu_tools), 0);
    copy_dataset("ds", "bad");
    for (int s = 0; s < 16; s += 3) {
        char f[64];
        snprintf(f, sizeof f, "bad/shard-%05d.stk", s);
        stk__layout L = layout_of(f);
        flip(f, L.region[0].data_off + (uint64_t)(s % 25) * L.region[0].stride);
        flip(f, L.region[2].heap_off + L.region[2].heap_len - 1);
    }
    ck_assert_int_eq(tu_sh("'%s/shardcheck' -j1 bad", tu_tools), 1);
    char one[1 << 16];
    snprintf(one, sizeof one, "%s", tu_slurp("out.txt"));
    ck_assert_int_eq(tu_count_lines(one), 12);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' -j4 bad", tu_tools), 1);
    ck_assert_str_eq(tu_slurp("out.txt"), one);
}
END_TEST

/* A shard larger than shardcheck's 64 MiB work unit is checked by several
 * threads at once; its report (capped at 100 lines) must still be the 100
 * smallest problems in order, whatever -j. */
START_TEST(capped_report_does_not_depend_on_threads)
{
    tu_cli_setup();
    ck_assert_int_eq(
        tu_sh("'%s/shardgen' -q -n 1400 --size 192 --records-per-shard 1400 --shard-size 1G ds", tu_tools),
        0);
    stk__layout L = layout_of("ds/shard-00000.stk");
    ck_assert_uint_gt(L.file_size, (uint64_t)130 << 20); /* at least three work units */
    for (uint64_t r = 0; r < 1400; r += 4)
        flip("ds/shard-00000.stk", L.region[0].data_off + r * L.region[0].stride + 7);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' -j1 ds", tu_tools), 1);
    static char one[1 << 16];
    snprintf(one, sizeof one, "%s", tu_slurp("out.txt"));
    ck_assert_int_eq(tu_count_lines(one), 101);
    ck_assert_ptr_nonnull(strstr(one, "record 0, field 'image'"));
    ck_assert_ptr_nonnull(strstr(one, "record 396, field 'image'"));
    ck_assert_ptr_null(strstr(one, "record 400, field 'image'"));
    ck_assert_ptr_nonnull(strstr(one, "... and 250 more problems"));
    ck_assert_int_eq(tu_sh("'%s/shardcheck' -j3 ds", tu_tools), 1);
    ck_assert_str_eq(tu_slurp("out.txt"), one);
}
END_TEST

/* A 40 x 32 RGB image as a JPEG (malloc'd). */
static uint8_t *encode_jpeg(unsigned long *len)
{
    uint8_t px[32 * 40 * 3];
    for (size_t k = 0; k < sizeof px; k++) px[k] = (uint8_t)(k * 31 + k / 97);
    tjhandle tj = tjInitCompress();
    unsigned char *out = NULL;
    ck_assert_int_eq(tjCompress2(tj, px, 40, 0, 32, TJPF_RGB, &out, len, TJSAMP_420, 90, 0), 0);
    tjDestroy(tj);
    uint8_t *j = malloc(*len);
    memcpy(j, out, *len);
    tjFree(out);
    return j;
}

/* 5 records of a JPEG field in shards of 3 under tu_tmp/NAME; record `cut`
 * (when < 5) is the JPEG cut in half, stored unchecked as the writer's
 * trusting path (pack's) stores values: its checksum is its own. */
static void write_jpeg_dataset(const char *name, uint64_t cut)
{
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", tu_tmp, name);
    stk_schema s;
    stk_schema_init(&s);
    const uint64_t any[3] = {0, 0, 3};
    ck_assert_int_eq(stk_schema_add_array(&s, "image", STK_DT_U8, 3, any, NULL), 0);
    ck_assert_int_eq(stk_schema_set_codec(&s, 0, STK_CODEC_JPEG, NULL), 0);
    stk_dataset_options o = {.force = 1, .records_per_shard = 3};
    stk_error e;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    ck_assert_int_eq(stk_dataset_writer_trust_jpeg(dw, 1, &e), 0);
    unsigned long len;
    uint8_t *jpg = encode_jpeg(&len);
    const uint64_t dims[2] = {32, 40};
    for (uint64_t i = 0; i < 5; i++) {
        stk_value v = {jpg, i == cut ? len / 2 : len};
        ck_assert_msg(stk_dataset_writer_append_dims(dw, &v, dims, &e) == 0, "%s", e.msg);
    }
    ck_assert_msg(stk_dataset_writer_finish(dw, &e) == 0, "%s", e.msg);
    free(jpg);
}

START_TEST(decode_names_what_does_not_decode)
{
    tu_cli_setup();
    write_jpeg_dataset("good", UINT64_MAX);
    write_jpeg_dataset("bad", 4); /* shard 1, record 1 */
    ck_assert_int_eq(tu_sh("'%s/shardcheck' -q --decode good", tu_tools), 0);
    /* its checksum holds: --full passes it, --decode does not */
    ck_assert_int_eq(tu_sh("'%s/shardcheck' -q --full bad", tu_tools), 0);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' -q --decode bad", tu_tools), 1);
    const char *out = tu_slurp("out.txt");
    ck_assert_int_eq(tu_count_lines(out), 1);
    ck_assert_msg(strstr(out, "bad/shard-00001.stk: record 1, field 'image': the JPEG does not decode: ") !=
                      NULL,
                  "%s", out);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --decode --json -j2 bad", tu_tools), 1);
    json_error_t je;
    json_t *j = json_loads(tu_slurp("out.txt"), 0, &je);
    ck_assert_msg(j != NULL, "--json output does not parse: %s", je.text);
    ck_assert(json_is_false(json_object_get(j, "ok")));
    ck_assert_str_eq(json_string_value(json_object_get(j, "mode")), "decode");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "decoded")), 4);
    json_t *p = json_array_get(json_object_get(j, "problem_list"), 0);
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(p, "file")), "bad/shard-00001.stk"));
    ck_assert_int_eq(json_integer_value(json_object_get(p, "record")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(p, "field")), "image");
    json_decref(j);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --decode --json good", tu_tools), 0);
    j = json_loads(tu_slurp("out.txt"), 0, &je);
    ck_assert_msg(j != NULL, "--json output does not parse: %s", je.text);
    ck_assert(json_is_true(json_object_get(j, "ok")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "decoded")), 5);
    json_decref(j);
    /* --decode reads every value: not with --quick, in either order */
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --decode --quick good", tu_tools), 2);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --quick --decode good", tu_tools), 2);
    ck_assert_int_eq(tu_count_lines(tu_slurp("err.txt")), 1);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --help", tu_tools), 0);
    ck_assert_ptr_nonnull(strstr(tu_slurp("out.txt"), "--decode"));
}
END_TEST

START_TEST(shardgen_is_reproducible)
{
    tu_cli_setup();
    make_dataset("a");
    make_dataset("b");
    ck_assert_int_eq(tu_sh("diff -r a b"), 0);
    ck_assert_int_eq(tu_sh("'%s/shardgen' -q -n 10 a", tu_tools), 1);
    ck_assert_ptr_nonnull(strstr(tu_slurp("err.txt"), "already holds a dataset"));
    ck_assert_int_eq(tu_sh("'%s/shardgen' -q --force -n 10 a", tu_tools), 0);
}
END_TEST

TU_MAIN("shardcheck_cli", {.name = "cli",
                           .timeout = 240,
                           .tests = {help_version_usage, clean_dataset_and_json, byte_flips_name_the_record,
                                     quick_is_structure_only, manifest_tampering,
                                     threads_give_the_same_report, capped_report_does_not_depend_on_threads,
                                     decode_names_what_does_not_decode, shardgen_is_reproducible}})
