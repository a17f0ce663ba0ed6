/* tests/format/test_jpeg_check.c - the writer reads every JPEG value it is
 * handed through to its end (image/jpeg.c's stk__jpeg_check) before it
 * stores it: a stream cut in its scan, one cut before its first scan
 * (header only), one whose frame header says 12-bit samples and one whose
 * entropy-coded data is damaged all pass the frame-header check, and each is
 * refused naming the shard, the record, the field and what is wrong, leaving
 * the writer as it was; a good one is stored byte for byte. A writer told to
 * trust its JPEGs (pack's) stores a cut one unchecked. */
#include "testutil_internal.h"

#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "jpeg_dims.h"

#define W 64
#define H 48

/* A detailed W x H RGB image as a 4:2:0 JPEG (malloc'd). */
static uint8_t *good_jpeg(size_t *len)
{
    uint8_t px[W * H * 3];
    for (unsigned y = 0; y < H; y++)
        for (unsigned x = 0; x < W; x++)
            for (unsigned c = 0; c < 3; c++)
                px[(y * W + x) * 3 + c] = (uint8_t)(x * 7 + y * 13 + c * 50 + x * y);
    tjhandle tj = tjInitCompress();
    ck_assert_ptr_nonnull(tj);
    unsigned char *out = NULL;
    unsigned long n = 0;
    ck_assert_int_eq(tjCompress2(tj, px, W, 0, H, TJPF_RGB, &out, &n, TJSAMP_420, 90, 0), 0);
    tjDestroy(tj);
    uint8_t *j = tu_dup(out, n);
    tjFree(out);
    *len = n;
    return j;
}

static size_t marker_at(const uint8_t *j, size_t n, uint8_t m)
{
    uint64_t at = 0;
    ck_assert_msg(stk__jpeg_marker(j, n, m, &at), "no marker %02x", m);
    return (size_t)at;
}

static void jpeg_schema(stk_schema *s)
{
    stk_schema_init(s);
    const uint64_t any[3] = {0, 0, 3};
    ck_assert_int_eq(stk_schema_add_array(s, "image", STK_DT_U8, 3, any, NULL), 0);
    const uint64_t one[1] = {1};
    ck_assert_int_eq(stk_schema_add_tensor(s, "label", STK_DT_I64, 1, one, NULL), 0);
    ck_assert_int_eq(stk_schema_set_codec(s, 0, STK_CODEC_JPEG, NULL), 0);
}

/* A shard writer of jpeg_schema at NAME/s.stk in scratch (its path in `path`). */
static stk_writer *jpeg_writer(const char *name, char *path, size_t cap, stk_error *e)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, name);
    tu_join(path, cap, dir, "s.stk");
    stk_schema s;
    jpeg_schema(&s);
    stk_writer *w = stk_writer_create(path, &s, e);
    ck_assert_msg(w != NULL, "%s", e->msg);
    return w;
}

static int append(stk_writer *w, const uint8_t *jpg, size_t len, int64_t label, stk_error *e)
{
    const uint64_t dims[2] = {H, W};
    stk_value v[2] = {{jpg, len}, {&label, 8}};
    return stk_writer_append_dims(w, v, dims, e);
}

typedef struct {
    const char *name;
    uint8_t *bytes;
    size_t len;
    int code;
    const char *why; /* what the message must say is wrong */
} bad_t;

/* The bad values a good JPEG gives; *n of them. Free each .bytes. */
static void bad_values(const uint8_t *jpg, size_t len, bad_t *b, size_t *n)
{
    size_t sos = marker_at(jpg, len, 0xDA), sof = marker_at(jpg, len, 0xC0);
    size_t scan = sos + 2 + ((size_t)jpg[sos + 2] << 8 | jpg[sos + 3]); /* first entropy-coded byte */
    ck_assert_uint_gt(len - 2, scan + 64);
    size_t k = 0;
    /* cut in the middle of its scan */
    b[k++] = (bad_t){"truncated", tu_dup(jpg, len), scan + (len - scan) / 2, STK_E_ARG, "corrupt JPEG"};
    /* every header, no scan: what a download cut early often is */
    b[k++] = (bad_t){"header only", tu_dup(jpg, len), sos, STK_E_ARG, "corrupt JPEG"};
    /* the frame header says 12-bit samples: libjpeg-turbo 2.1 is built for
     * 8-bit ones (its 12-bit decoder is a separate build), and so is every
     * stoker decoder */
    b[k] = (bad_t){"12-bit", tu_dup(jpg, len), len, STK_E_ARG, "precision 12"};
    ck_assert_int_eq(b[k].bytes[sof + 4], 8);
    b[k++].bytes[sof + 4] = 12;
    /* a marker where the entropy-coded data should go on */
    b[k] = (bad_t){"damaged", tu_dup(jpg, len), len, STK_E_ARG, "corrupt JPEG"};
    b[k].bytes[scan + (len - scan) / 3] = 0xFF;
    b[k++].bytes[scan + (len - scan) / 3 + 1] = 0xD3;
    *n = k;
}

/* Each bad value as record 1 of a shard after a good record 0: refused,
 * named, and the writer goes on as if it had not been offered. */
START_TEST(writer_refuses_what_does_not_decode)
{
    char dir[TU_PATH], path[TU_PATH + 16];
    tu_scratch(dir, sizeof dir, "jpeg-refuse");
    tu_join(path, sizeof path, dir, "s.stk");
    size_t len, n;
    uint8_t *jpg = good_jpeg(&len);
    bad_t bad[8];
    bad_values(jpg, len, bad, &n);
    stk_schema s;
    jpeg_schema(&s);
    for (size_t c = 0; c < n; c++) {
        stk_error e;
        stk_writer *w = stk_writer_create(path, &s, &e);
        ck_assert_msg(w != NULL, "%s", e.msg);
        ck_assert_msg(append(w, jpg, len, 0, &e) == 0, "%s", e.msg);
        /* the frame header is intact: only reading through to EOI sees it */
        uint32_t fh, fw;
        unsigned nc;
        ck_assert(stk__jpeg_dims(bad[c].bytes, bad[c].len, &fh, &fw, &nc) && fh == H && fw == W && nc == 3);
        ck_assert_msg(append(w, bad[c].bytes, bad[c].len, 1, &e) != 0, "%s: stored", bad[c].name);
        ck_assert_msg(e.code == bad[c].code, "%s: code %d: %s", bad[c].name, e.code, e.msg);
        ck_assert_msg(strstr(e.msg, path) && strstr(e.msg, "record 1, field 'image'") &&
                          strstr(e.msg, "does not decode") && strstr(e.msg, bad[c].why),
                      "%s: message \"%s\"", bad[c].name, e.msg);
        ck_assert_uint_eq(stk_writer_records(w), 1);
        ck_assert_msg(append(w, jpg, len, 2, &e) == 0, "%s", e.msg);
        stk_shard_info info;
        ck_assert_msg(stk_writer_finish(w, &info, &e) == 0, "%s", e.msg);
        ck_assert_uint_eq(info.records, 2);
    }
    for (size_t c = 0; c < n; c++) free(bad[c].bytes);
    free(jpg);
}
END_TEST

/* A frame header of 65000 x 65000 would need 12 GiB of coefficients: refused
 * before any of it is allocated, saying why. */
START_TEST(writer_refuses_what_it_cannot_check)
{
    char path[TU_PATH + 16];
    stk_error e;
    stk_writer *w = jpeg_writer("jpeg-huge", path, sizeof path, &e);
    size_t len;
    uint8_t *jpg = good_jpeg(&len);
    size_t sof = marker_at(jpg, len, 0xC0);
    jpg[sof + 5] = jpg[sof + 7] = 0xFD, jpg[sof + 6] = jpg[sof + 8] = 0xE8; /* 65000 x 65000 */
    const uint64_t dims[2] = {65000, 65000};
    int64_t label = 0;
    stk_value v[2] = {{jpg, len}, {&label, 8}};
    ck_assert_int_eq(stk_writer_append_dims(w, v, dims, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "record 0, field 'image': the ");
    ck_assert_msg(strstr(e.msg, "too large to check") && strstr(e.msg, "65000x65000"), "%s", e.msg);
    stk_writer_abort(w);
    free(jpg);
}
END_TEST

/* A good JPEG is stored as it came, and verifies. */
START_TEST(writer_stores_a_good_jpeg)
{
    char path[TU_PATH + 16];
    stk_error e;
    stk_writer *w = jpeg_writer("jpeg-good", path, sizeof path, &e);
    size_t len;
    uint8_t *jpg = good_jpeg(&len);
    for (int64_t i = 0; i < 3; i++) ck_assert_msg(append(w, jpg, len, i, &e) == 0, "%s", e.msg);
    stk_shard_info info;
    ck_assert_msg(stk_writer_finish(w, &info, &e) == 0, "%s", e.msg);
    stk_shard *sh = stk_shard_open(path, &e);
    ck_assert_msg(sh != NULL, "%s", e.msg);
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, 3, NULL, NULL), 0);
    for (uint64_t i = 0; i < 3; i++) {
        const void *p;
        uint64_t size;
        ck_assert_int_eq(stk_shard_value(sh, 0, i, &p, &size, &e), 0);
        ck_assert_uint_eq(size, len);
        ck_assert(memcmp(p, jpg, len) == 0);
    }
    stk_shard_close(sh);
    free(jpg);
}
END_TEST

/* The dataset writer refuses the same, naming the shard file and record; one
 * told to trust its JPEGs (pack's writers are) stores a cut one unchecked. */
START_TEST(dataset_writer_refuses_unless_trusted)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "jpeg-ds");
    size_t len;
    uint8_t *jpg = good_jpeg(&len);
    size_t cut = marker_at(jpg, len, 0xDA);
    stk_schema s;
    jpeg_schema(&s);
    const uint64_t dims[2] = {H, W};
    for (int trusted = 0; trusted < 2; trusted++) {
        stk_dataset_options o = {.force = 1};
        stk_error e;
        stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
        ck_assert_msg(dw != NULL, "%s", e.msg);
        if (trusted) ck_assert_int_eq(stk_dataset_writer_trust_jpeg(dw, 1, &e), 0);
        int64_t label = 0;
        stk_value good[2] = {{jpg, len}, {&label, 8}}, bad[2] = {{jpg, cut}, {&label, 8}};
        ck_assert_msg(stk_dataset_writer_append_dims(dw, good, dims, &e) == 0, "%s", e.msg);
        int rc = stk_dataset_writer_append_dims(dw, bad, dims, &e);
        if (trusted) {
            ck_assert_msg(rc == 0, "%s", e.msg);
        } else {
            tu_assert_error(&e, STK_E_ARG, "shard-00000.stk: record 1, field 'image': the ");
            ck_assert_ptr_nonnull(strstr(e.msg, "Premature end of JPEG file"));
        }
        ck_assert_msg(stk_dataset_writer_finish(dw, &e) == 0, "%s", e.msg);
        stk_dataset *ds = stk_dataset_open(dir, &e);
        ck_assert_msg(ds != NULL, "%s", e.msg);
        ck_assert_uint_eq(stk_dataset_records(ds), trusted ? 2 : 1);
        stk_dataset_close(ds);
    }
    free(jpg);
}
END_TEST

TU_MAIN("jpeg_check", {.name = "writer",
                       .tests = {writer_refuses_what_does_not_decode, writer_refuses_what_it_cannot_check,
                                 writer_stores_a_good_jpeg, dataset_writer_refuses_unless_trusted}});
