/* tests/reader/test_decode_paths.c - a bad JPEG, then a good one, through
 * every decode path: pack's ingest (pk_process), the reader's centre crop
 * (a whole decode) and random crop (a region decode), and shardview.
 *
 * libjpeg-turbo 2.1 leaves a TurboJPEG handle whose next header read
 * "succeeds" with garbage sizes after a failed one, so a decoder that keeps
 * its handle after a failure refuses (or misreads) the good value that
 * follows. Each path here gets every prefix of a JPEG (cut in its tables,
 * its frame header, its scan), and a JPEG with its entropy data damaged,
 * each followed by the whole JPEG, whose output must equal what a fresh
 * decoder gives. shardview stops at its first failing record, so its
 * decoder never outlives a failure: it is checked to refuse the bad record
 * by name and to show a good one exactly.
 *
 * A stored JPEG whose bytes no longer match their checksum (one flipped
 * entropy byte near its end: bit rot below most crops) is refused with
 * CHECKSUM by the reader's centre and random crops with verify off, and by
 * shardview, before anything decodes it. */
#define STOKER_ADVANCED_API /* stk_dataset_writer_trust_jpeg: damaged values stored on purpose */
#include "cli_util.h"
#include "image_ref.h"
#include "testutil.h"

#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "ingest.h"
#include "reader_impl.h"

#define W 48
#define H 40
#define OUT 24

/* A detailed W x H image as a 4:2:0 JPEG (TurboJPEG's buffer). */
static uint8_t *good_jpeg(unsigned long *len)
{
    static uint8_t px[W * H * 3];
    for (uint32_t y = 0; y < H; y++)
        for (uint32_t x = 0; x < W; x++)
            for (int c = 0; c < 3; c++)
                px[(y * W + x) * 3 + c] = (uint8_t)((x * 37 + y * 11 + (uint32_t)c * 80) ^ (x * y * 3));
    tjhandle tj = tjInitCompress();
    unsigned char *jb = NULL;
    ck_assert_int_eq(tjCompress2(tj, px, W, 0, H, TJPF_RGB, &jb, len, TJSAMP_420, 90, 0), 0);
    tjDestroy(tj);
    return jb;
}

/* The bad values fed before the good one: every 3rd prefix up to a little
 * into the scan, then every 61st, and the whole file with its entropy data
 * flipped in the middle. *n gets the count; the caller frees each. */
typedef struct {
    uint8_t *p;
    size_t len;
} blob;

static blob *bad_values(const uint8_t *jpg, size_t len, size_t *n)
{
    size_t sos = tu_jpeg_marker(jpg, len, 0xDA), k = 0;
    ck_assert_uint_gt(sos, 0);
    blob *b = calloc(len + 2, sizeof *b);
    for (size_t cut = 2; cut < len; cut += cut < sos + 16 ? 3 : 61) b[k++] = (blob){tu_dup(jpg, cut), cut};
    uint8_t *flip = tu_dup(jpg, len);
    for (size_t i = sos + 20; i < len - 2; i += 7) flip[i] ^= 0xA5;
    b[k++] = (blob){flip, len};
    *n = k;
    return b;
}

static void free_values(blob *b, size_t n)
{
    for (size_t i = 0; i < n; i++) free(b[i].p);
    free(b);
}

START_TEST(pack_path)
{
    unsigned long len;
    uint8_t *jpg = good_jpeg(&len);
    pk_params p;
    pk_params_init(&p, OUT);
    uint8_t want[OUT * OUT * 3], got[OUT * OUT * 3];
    char msg[320];
    pk_decoder *fresh = pk_decoder_new(), *d = pk_decoder_new();
    ck_assert_int_eq(pk_process(fresh, jpg, len, &p, want, NULL, NULL, msg, sizeof msg), PK_OK);
    size_t n;
    blob *bad = bad_values(jpg, len, &n);
    for (size_t i = 0; i < n; i++) {
        int rc = pk_process(d, bad[i].p, bad[i].len, &p, got, NULL, NULL, msg, sizeof msg);
        ck_assert_msg(rc == PK_E_CORRUPT, "bad value %zu (%zu bytes): %s (%s)", i, bad[i].len,
                      pk_status_name(rc), msg);
        memset(got, 0, sizeof got);
        rc = pk_process(d, jpg, len, &p, got, NULL, NULL, msg, sizeof msg);
        ck_assert_msg(rc == PK_OK, "after bad value %zu (%zu bytes): %s", i, bad[i].len, msg);
        ck_assert_msg(memcmp(got, want, sizeof want) == 0, "after bad value %zu: other pixels", i);
    }
    free_values(bad, n);
    pk_decoder_free(d);
    pk_decoder_free(fresh);
    tjFree(jpg);
}
END_TEST

/* The reader's crop of `crop` kind after each bad value equals a fresh
 * cropper's. Random crops are drawn for several records, so that some boxes
 * end above the damage: those may decode (the region decode stops after its
 * last row) but must then give the good pixels of that region. */
static void crop_path(int crop)
{
    unsigned long len;
    uint8_t *jpg = good_jpeg(&len);
    stk_transform t;
    stk_transform_imagenet(&t, crop == STK_CROP_RANDOM_RESIZED, OUT);
    const uint64_t dims[3] = {H, W, 3};
    uint8_t want[OUT * OUT * 3], got[OUT * OUT * 3];
    stk_error e;
    stk__cropper *fresh = stk__cropper_new(), *c = stk__cropper_new();
    size_t n;
    blob *bad = bad_values(jpg, len, &n);
    for (size_t i = 0; i < n; i++) {
        uint64_t rec = i % 5;
        int rc = stk__cropper_run(c, &t, 1, 0, rec, bad[i].p, bad[i].len, dims, 1, 0, got, &e);
        /* both crops decode only their region now (damage below it goes unseen) */
        ck_assert_msg(rc == STK_OK || rc == STK_E_FORMAT, "bad value %zu: %d (%s)", i, rc, e.msg);
        if (rc) tu_assert_error(&e, STK_E_FORMAT, "record");
        ck_assert_int_eq(stk__cropper_run(fresh, &t, 1, 0, rec, jpg, len, dims, 1, 0, want, &e), STK_OK);
        memset(got, 0, sizeof got);
        rc = stk__cropper_run(c, &t, 1, 0, rec, jpg, len, dims, 1, 0, got, &e);
        ck_assert_msg(rc == STK_OK, "after bad value %zu (%zu bytes): %s", i, bad[i].len, e.msg);
        ck_assert_msg(memcmp(got, want, sizeof want) == 0, "after bad value %zu: other pixels", i);
    }
    free_values(bad, n);
    stk__cropper_free(c);
    stk__cropper_free(fresh);
    tjFree(jpg);
}

START_TEST(centre_crop_path) { crop_path(STK_CROP_CENTER); }
END_TEST

START_TEST(random_crop_path) { crop_path(STK_CROP_RANDOM_RESIZED); }
END_TEST

/* A dataset of n copies of jpg (u8[*,*,3], codec jpeg) in dir, cut to
 * sizes[i] where given: stored unchecked (stk_dataset_writer_trust_jpeg),
 * since the writer's own check refuses a cut value. */
static void write_jpeg_ds(const char *dir, const uint8_t *jpg, size_t len, const size_t *sizes, size_t n)
{
    stk_schema s;
    stk_schema_init(&s);
    const uint64_t any[3] = {0, 0, 3};
    ck_assert_int_eq(stk_schema_add_array(&s, "image", STK_DT_U8, 3, any, NULL), 0);
    ck_assert_int_eq(stk_schema_set_codec(&s, 0, STK_CODEC_JPEG, NULL), 0);
    stk_dataset_options o = {.force = 1};
    stk_error e;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    ck_assert_int_eq(stk_dataset_writer_trust_jpeg(dw, 1, &e), 0);
    const uint64_t dims[2] = {H, W};
    for (size_t i = 0; i < n; i++) {
        stk_value v = {jpg, sizes ? sizes[i] : len};
        ck_assert_msg(stk_dataset_writer_append_dims(dw, &v, dims, &e) == 0, "%s", e.msg);
    }
    ck_assert_msg(stk_dataset_writer_finish(dw, &e) == 0, "%s", e.msg);
}

/* shardview on a dataset of [good, cut in its Huffman tables, good]: the bad
 * record is refused by number, a good one shown at its stored size exactly
 * as TurboJPEG decodes it. */
START_TEST(shardview_path)
{
    tu_cli_setup();
    unsigned long len;
    uint8_t *jpg = good_jpeg(&len);
    size_t dht = tu_jpeg_marker(jpg, len, 0xC4);
    ck_assert_uint_gt(dht, tu_jpeg_marker(jpg, len, 0xC0)); /* after the frame header: the writer takes it */
    char dir[TU_PATH];
    tu_join(dir, sizeof dir, tu_tmp, "ds");
    const size_t sizes[3] = {len, dht + 8, len};
    write_jpeg_ds(dir, jpg, len, sizes, 3);
    ck_assert_int_eq(tu_sh("'%s/shardview' ds --out s.png --records 3", tu_tools), 1);
    ck_assert_ptr_nonnull(strstr(tu_slurp("err.txt"), "record 1: the JPEG does not decode"));
    ck_assert_int_eq(tu_sh("'%s/shardview' ds --record 2 --out one.png", tu_tools), 0);
    char png[TU_PATH];
    tu_join(png, sizeof png, tu_tmp, "one.png");
    size_t plen, need;
    uint8_t *file = tu_read(png, &plen);
    spng_ctx *ctx = spng_ctx_new(0);
    ck_assert_int_eq(spng_set_png_buffer(ctx, file, plen), 0);
    ck_assert_int_eq(spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &need), 0);
    ck_assert_uint_eq(need, W * H * 3);
    uint8_t *got = malloc(need), *want = malloc(need);
    ck_assert_int_eq(spng_decode_image(ctx, got, need, SPNG_FMT_RGB8, 0), 0);
    spng_ctx_free(ctx);
    tjhandle tj = tjInitDecompress();
    ck_assert_int_eq(tjDecompress2(tj, jpg, len, want, W, 0, H, TJPF_RGB, 0), 0);
    tjDestroy(tj);
    ck_assert(memcmp(got, want, need) == 0);
    free(got);
    free(want);
    free(file);
    tjFree(jpg);
}
END_TEST


/* Flip one entropy byte 12 bytes before the end of every copy of jpg in
 * dir's shard files (the checksum table keeps the old hashes). */
static void rot_values(const char *dir, const uint8_t *jpg, size_t len)
{
    size_t nf, flipped = 0;
    char **names = tu_list(dir, &nf);
    for (size_t k = 0; k < nf; k++) {
        if (!strstr(names[k], ".stk")) continue;
        char path[TU_PATH];
        tu_join(path, sizeof path, dir, names[k]);
        size_t n;
        uint8_t *file = tu_read(path, &n);
        for (size_t i = 0; i + len <= n; i++)
            if (memcmp(file + i, jpg, len) == 0) {
                file[i + len - 12] ^= 0x10;
                flipped++;
            }
        tu_write(path, file, n);
        free(file);
    }
    tu_free_names(names, nf);
    ck_assert_uint_gt(flipped, 0);
}

START_TEST(bit_rot_refused)
{
    tu_cli_setup();
    unsigned long len;
    uint8_t *jpg = good_jpeg(&len);
    char dir[TU_PATH];
    tu_join(dir, sizeof dir, tu_tmp, "ds");
    enum { NREC = 16 };
    write_jpeg_ds(dir, jpg, len, NULL, NREC);
    rot_values(dir, jpg, len);
    for (int crop = STK_CROP_CENTER; crop <= STK_CROP_RANDOM_RESIZED; crop++) {
        stk_transform t;
        stk_transform_imagenet(&t, crop == STK_CROP_RANDOM_RESIZED, OUT);
        t.dtype = STK_DT_U8;
        t.layout = STK_IMAGE_NHWC;
        t.crop = crop;
        for (uint32_t batch = 1; batch <= NREC; batch *= 4) { /* a record alone, and with others */
            stk_reader_options o = tu_reader_options(batch, STK_ORDER_SEQUENTIAL);
            o.transform = &t;
            o.verify = STK_VERIFY_OFF;
            o.threads = 1;
            stk_reader *r = tu_open_reader(dir, &o);
            stk_error e;
            ck_assert_ptr_null(stk_reader_next(r, &e));
            tu_assert_error(&e, STK_E_CHECKSUM, "checksum mismatch");
            stk_reader_close(r);
        }
    }
    ck_assert_int_eq(tu_sh("'%s/shardview' ds --record 3 --out one.png", tu_tools), 1);
    ck_assert_ptr_nonnull(strstr(tu_slurp("err.txt"), "checksum mismatch"));
    tjFree(jpg);
}
END_TEST

TU_MAIN("decode_paths",
        {.name = "bad_then_good",
         .timeout = 120,
         .tests = {pack_path, centre_crop_path, random_crop_path, shardview_path, bit_rot_refused}})
