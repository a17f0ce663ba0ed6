/* fuzz_crop - libFuzzer target: the reader's crop at load over hostile
 * array values (reader/load_crop.c), and a damaged stored value through the
 * whole reader.
 *
 * Input: 14 bytes of parameters, then the value (or, when synthesised, the
 * tile of one). Bytes 0-7 give the stored shape the shape column would
 * claim (height, width: 1 .. 4096), the crop (random-resized, centre or
 * none), the output size (1 .. 64), whether the field is square and the
 * record (the box depends on it). The value is run as a JPEG stream (the
 * codec jpeg path: libjpeg's cropped decode for random crops, TurboJPEG's
 * whole decode otherwise) and, where it holds the shape's pixels, as raw
 * pixels too. Must never crash, and every failure must say why.
 *
 * Byte 8, bit 0, synthesises a large image cheaply instead: the shape's
 * pixels (at most 1 Mpx) are the rest of the input repeated, encoded by
 * TurboJPEG (quality and subsampling from byte 8's other bits), so that a
 * few bytes make an image of a few thousand pixels a side. Its JPEG (and,
 * up to 64 Kpx, its raw pixels) must always crop, also right after the
 * same cropper was given the tile itself as a JPEG (a hostile record
 * before a good one in a worker). Then, with bit 1, bytes 9-12 pick a byte
 * of the JPEG's entropy-coded data and byte 13 what to XOR it with: the
 * JPEG is stored as a one-record dataset, that byte is damaged in the shard
 * file (its checksum now fails: bit rot), and a reader (verify off, the
 * default) with the same crop reads it. The reader must not crash and a
 * failure must say why, and it must fail: a value whose checksum fails is
 * never served, on either crop path (spec/FORMAT.md §9.1). */
#include "reader_impl.h"

#include "fuzz_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>

#define HEAD 14
#define SYNTH_MAX_PIXELS (1u << 20) /* 4096 x 256, 1024 x 1024: the resize is instrumented */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char root[64];
static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd)) return;
}

/* Store jpeg (H x W) as the only record of a dataset, damage the byte `at`
 * of its stream in the shard file (XOR x), and read it with transform t. */
static void read_damaged(const stk_transform *t, const uint8_t *jpeg, size_t n, uint64_t H, uint64_t W,
                         size_t at, uint8_t x)
{
    if (!root[0]) {
        snprintf(root, sizeof root, "/tmp/fuzz_crop.XXXXXX");
        CHECK(mkdtemp(root) != NULL);
        atexit(cleanup);
    }
    char dir[128], shard[256];
    snprintf(dir, sizeof dir, "%s/ds", root);
    stk_schema s;
    stk_error e;
    const uint64_t any[3] = {0, 0, 3}, dims[2] = {H, W};
    stk_schema_init(&s);
    CHECK_E(stk_schema_add_array(&s, "image", STK_DT_U8, 3, any, &e) == STK_OK, e);
    CHECK_E(stk_schema_set_codec(&s, 0, STK_CODEC_JPEG, &e) == STK_OK, e);
    stk_dataset_options o;
    stk_dataset_options_init(&o);
    o.force = 1;
    stk_dataset_writer *w = stk_dataset_writer_create(dir, &s, &o, &e);
    CHECK_E(w != NULL, e);
    stk_value v = {jpeg, n};
    CHECK_E(stk_dataset_writer_append_dims(w, &v, dims, &e) == STK_OK, e);
    CHECK_E(stk_dataset_writer_finish(w, &e) == STK_OK, e);
    stk_dataset *ds = stk_dataset_open(dir, &e);
    CHECK_E(ds != NULL && stk_dataset_nshards(ds) == 1, e);
    snprintf(shard, sizeof shard, "%s", stk_shard_path(stk_dataset_shard(ds, 0)));
    stk_dataset_close(ds);

    /* the damage, where the stream lies in the file */
    FILE *f = fopen(shard, "r+b");
    CHECK(f != NULL);
    CHECK(fseek(f, 0, SEEK_END) == 0);
    long len = ftell(f);
    uint8_t *file = malloc((size_t)len);
    CHECK(file && fseek(f, 0, SEEK_SET) == 0 && fread(file, 1, (size_t)len, f) == (size_t)len);
    uint8_t *hit = memmem(file, (size_t)len, jpeg, n);
    CHECK(hit != NULL);
    long off = (long)(hit - file) + (long)at;
    free(file);
    uint8_t b = (uint8_t)(jpeg[at] ^ x);
    CHECK(fseek(f, off, SEEK_SET) == 0 && fwrite(&b, 1, 1, f) == 1 && fclose(f) == 0);

    stk_reader_options ro;
    stk_reader_options_init(&ro);
    ro.transform = t;
    ro.threads = 1;
    ro.prefetch = 1;
    ro.world_size = 1;
    ro.rank = 0;
    ro.io = STK_IO_MMAP;
    stk_reader *r = stk_reader_open(dir, &ro, &e);
    CHECK_E(r != NULL, e);
    e.code = STK_OK;
    const stk_batch *bt = stk_reader_next(r, &e);
    if (!bt) CHECK(e.code != STK_OK && e.msg[0]);
    CHECK(bt == NULL); /* the value's checksum fails: never served */
    stk_reader_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static stk__cropper *c; /* kept across inputs, as a worker keeps it across records */
    static tjhandle enc;
    if (size < HEAD || (!c && !(c = stk__cropper_new()))) return 0;
    uint64_t dims[3] = {1 + (uint64_t)(data[0] | data[1] << 8) % 4096,
                        1 + (uint64_t)(data[2] | data[3] << 8) % 4096, 3};
    uint8_t mode = data[4], synth = data[8];
    uint32_t out = 1 + data[5] % 64;
    uint64_t record = data[6] | (uint64_t)data[7] << 8;
    uint32_t damage_at =
        (uint32_t)data[9] | (uint32_t)data[10] << 8 | (uint32_t)data[11] << 16 | (uint32_t)data[12] << 24;
    uint8_t damage = data[13];
    data += HEAD;
    size -= HEAD;
    stk_transform t;
    stk_transform_imagenet(&t, mode % 3 == 0, out);
    t.crop = mode % 3 == 0 ? STK_CROP_RANDOM_RESIZED : mode % 3 == 1 ? STK_CROP_CENTER : STK_CROP_NONE;
    t.out_width = 1 + (mode >> 2) % 64;
    t.dtype = STK_DT_U8;
    t.layout = STK_IMAGE_NHWC;
    int square = (mode >> 7) & 1;
    uint8_t *dst = malloc((size_t)t.out_height * t.out_width * 3);
    CHECK(dst != NULL);
    stk_error e;
    e.code = STK_OK;
    if (!(synth & 1)) {
        if (stk__cropper_run(c, &t, 7, 1, record, data, size, dims, 1, square, dst, &e) != STK_OK)
            CHECK(e.code != STK_OK && e.msg[0]); /* a failure must say why */
        if (size >= dims[0] * dims[1] * 3)       /* raw pixels of the right size always crop */
            CHECK_E(stk__cropper_run(c, &t, 7, 1, record, data, size, dims, 0, square, dst, &e) == STK_OK, e);
        free(dst);
        return 0;
    }

    /* a large image from a small tile */
    if (size == 0) {
        free(dst);
        return 0;
    }
    while (dims[0] * dims[1] > SYNTH_MAX_PIXELS) dims[dims[0] > dims[1] ? 0 : 1] /= 2;
    size_t n = (size_t)dims[0] * dims[1] * 3;
    uint8_t *px = malloc(n);
    CHECK(px != NULL);
    size_t have = size < n ? size : n; /* the tile, then doubled until it fills the image */
    memcpy(px, data, have);
    for (; have < n; have *= 2) memcpy(px + have, px, have < n - have ? have : n - have);
    if (n <= 3u << 16)
        CHECK_E(stk__cropper_run(c, &t, 7, 1, record, px, n, dims, 0, square, dst, &e) == STK_OK, e);
    if (!enc) CHECK((enc = tjInitCompress()) != NULL);
    static const int subsamp[3] = {TJSAMP_444, TJSAMP_422, TJSAMP_420};
    unsigned char *jpeg = NULL;
    unsigned long jn = 0;
    CHECK(tjCompress2(enc, px, (int)dims[1], 0, (int)dims[0], TJPF_RGB, &jpeg, &jn, subsamp[(synth >> 2) % 3],
                      50 + (synth >> 4) % 50, 0) == 0);
    free(px);
    /* a worker's record after a hostile one: the tile as a JPEG first, whatever it gives */
    if (stk__cropper_run(c, &t, 7, 1, record, data, size, dims, 1, square, dst, &e) != STK_OK)
        CHECK_E(e.code != STK_OK && e.msg[0], e);
    CHECK_E(stk__cropper_run(c, &t, 7, 1, record, jpeg, jn, dims, 1, square, dst, &e) == STK_OK, e);
    /* the entropy-coded data: after the last SOS header, before EOI */
    size_t sos = 0;
    for (size_t i = 0; i + 3 < jn; i++)
        if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xDA) sos = i + 2 + ((size_t)jpeg[i + 2] << 8 | jpeg[i + 3]);
    if ((synth & 2) && damage && sos && sos < jn - 2)
        read_damaged(&t, jpeg, jn, dims[0], dims[1], sos + damage_at % (jn - 2 - sos), damage);
    tjFree(jpeg);
    free(dst);
    return 0;
}
