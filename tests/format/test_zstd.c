/* tests/format/test_zstd.c - compressed fields (format 1.1): every block size
 * from one record per block to one block per shard, tensor and bytes fields,
 * mixed with raw fields; the bytes back, the block table, verification
 * naming the corrupt block, and the version rules. */
#include "testutil_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* image u8[6,5,3] zstd, label i32 raw, text bytes zstd, meta bytes raw. */
static void schema(stk_schema *s)
{
    stk_schema_init(s);
    uint64_t shape[3] = {6, 5, 3};
    ck_assert_int_eq(stk_schema_add_tensor(s, "image", STK_DT_U8, 3, shape, NULL), 0);
    ck_assert_int_eq(stk_schema_add_tensor(s, "label", STK_DT_I32, 0, NULL, NULL), 0);
    ck_assert_int_eq(stk_schema_add_bytes(s, "text", NULL), 0);
    ck_assert_int_eq(stk_schema_add_bytes(s, "meta", NULL), 0);
    ck_assert_int_eq(stk_schema_set_codec(s, 0, STK_CODEC_ZSTD, NULL), 0);
    ck_assert_int_eq(stk_schema_set_codec(s, 2, STK_CODEC_ZSTD, NULL), 0);
}

typedef struct {
    uint8_t image[90];
    int32_t label;
    uint8_t text[40];
    uint8_t meta[8];
    stk_value v[4];
} rec;

/* Record i: compressible image (a ramp plus noise), text of i % 37 bytes
 * (empty for some), meta 0..7 bytes. */
static void make_rec(rec *r, uint64_t i)
{
    for (int k = 0; k < 90; k++) r->image[k] = (uint8_t)(k + i * 3 + ((k * 7 + i) % 5));
    r->label = (int32_t)(i * 13 - 50);
    size_t tl = (size_t)(i % 37);
    for (size_t k = 0; k < tl; k++) r->text[k] = (uint8_t)('a' + (i + k) % 26);
    size_t ml = (size_t)(i % 8);
    tu_fill(r->meta, ml, i);
    r->v[0] = (stk_value){r->image, 90};
    r->v[1] = (stk_value){&r->label, 4};
    r->v[2] = (stk_value){r->text, tl};
    r->v[3] = (stk_value){r->meta, ml};
}

static void write_shard_threads(const char *path, uint64_t n, uint64_t block_bytes, int level,
                                unsigned threads)
{
    stk_schema s;
    schema(&s);
    stk_error err;
    stk_writer *w = stk_writer_create(path, &s, &err);
    ck_assert_msg(w != NULL, "%s", err.msg);
    ck_assert_int_eq(stk_writer_compression(w, UINT32_MAX, level, block_bytes, &err), 0);
    ck_assert_int_eq(stk_writer_threads(w, threads, &err), 0);
    for (uint64_t i = 0; i < n; i++) {
        rec r;
        make_rec(&r, i);
        ck_assert_msg(stk_writer_append(w, r.v, &err) == 0, "%s", err.msg);
    }
    ck_assert_msg(stk_writer_finish(w, NULL, &err) == 0, "%s", err.msg);
}

static void write_shard(const char *path, uint64_t n, uint64_t block_bytes, int level)
{
    write_shard_threads(path, n, block_bytes, level, 1);
}

/* Every value of every record, compressed or not, equals what was written. */
static void check_shard(const stk_shard *sh, uint64_t n)
{
    ck_assert_uint_eq(stk_shard_records(sh), n);
    uint64_t cap = 0;
    void *raw = NULL;
    for (unsigned f = 0; f < 4; f++) {
        uint64_t nb = stk_shard_nblocks(sh, f);
        ck_assert(f == 0 || f == 2 ? (n ? nb >= 1 : nb == 0) : nb == 0);
        uint64_t b = UINT64_MAX;
        for (uint64_t i = 0; i < n; i++) {
            rec r;
            make_rec(&r, i);
            const void *p;
            uint64_t size;
            stk_error err;
            if (f == 1 || f == 3) {
                ck_assert_int_eq(stk_shard_value(sh, f, i, &p, &size, &err), 0);
            } else {
                ck_assert_int_eq(stk_shard_value(sh, f, i, &p, &size, &err), STK_E_UNSUPPORTED);
                uint64_t want;
                ck_assert_int_eq(stk_shard_block_find(sh, f, i, &want, &err), 0);
                if (want != b) {
                    uint64_t first, count, rb, pb;
                    ck_assert_int_eq(stk_shard_block_info(sh, f, want, &first, &count, &rb, &pb, &err), 0);
                    ck_assert(first <= i && i < first + count);
                    if (rb > cap) {
                        free(raw);
                        raw = malloc(cap = rb);
                    }
                    ck_assert_msg(stk_shard_block_read(sh, f, want, raw, cap, &err) == 0, "%s", err.msg);
                    b = want;
                }
                ck_assert_int_eq(stk_shard_block_value(sh, f, b, raw, i, &p, &size, &err), 0);
            }
            ck_assert_uint_eq(size, r.v[f].size);
            ck_assert(memcmp(p, r.v[f].data, size) == 0);
        }
    }
    free(raw);
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, n, NULL, NULL), 0);
    ck_assert_uint_eq(stk_shard_verify_padding(sh, NULL, NULL), 0);
    ck_assert_int_eq(stk_shard_verify_index(sh, 0, NULL), 0);
}

START_TEST(round_trip_every_block_size)
{
    char dir[TU_PATH], path[TU_PATH + 32];
    tu_scratch(dir, sizeof dir, "zstd-rt");
    static const uint64_t counts[] = {0, 1, 7, 300};
    static const uint64_t blocks[] = {1, 100, 1000, 1 << 20};
    for (size_t c = 0; c < 4; c++)
        for (size_t b = 0; b < 4; b++) {
            snprintf(path, sizeof path, "%s/s-%zu-%zu.stk", dir, c, b);
            write_shard_threads(path, counts[c], blocks[b], 1 + (int)b * 3, (unsigned)(1 + c % 3));
            stk_error err;
            stk_shard *sh = stk_shard_open(path, &err);
            ck_assert_msg(sh != NULL, "%s", err.msg);
            unsigned major, minor;
            stk_shard_version(sh, &major, &minor);
            ck_assert_uint_eq(minor, 1); /* a compressed field makes it 1.1 */
            if (counts[c] && blocks[b] == 1) ck_assert_uint_eq(stk_shard_nblocks(sh, 0), counts[c]);
            if (counts[c] && blocks[b] == 1 << 20) ck_assert_uint_eq(stk_shard_nblocks(sh, 0), 1);
            check_shard(sh, counts[c]);
            stk_shard_close(sh);
        }
}
END_TEST

/* The same records give the same bytes (compression is per block, fixed level). */
START_TEST(deterministic_and_smaller)
{
    char a[TU_PATH], b[TU_PATH];
    tu_scratch_pair(a, b, sizeof a, "zstd-det", "a.stk", "b.stk");
    write_shard(a, 500, 4096, 3);
    write_shard_threads(b, 500, 4096, 3, 4); /* four compression threads: the same bytes */
    size_t la, lb;
    uint8_t *x = tu_read(a, &la), *y = tu_read(b, &lb);
    ck_assert_uint_eq(la, lb);
    ck_assert(memcmp(x, y, la) == 0);
    stk_shard *sh = stk_shard_open(a, NULL);
    uint64_t raw = 0, packed = 0;
    for (uint64_t k = 0; k < stk_shard_nblocks(sh, 0); k++) {
        uint64_t rb, pb;
        ck_assert_int_eq(stk_shard_block_info(sh, 0, k, NULL, NULL, &rb, &pb, NULL), 0);
        raw += rb;
        packed += pb;
    }
    ck_assert_uint_eq(raw, 500 * 90);
    ck_assert_msg(packed < raw / 2, "ramps should compress: %llu of %llu", (unsigned long long)packed,
                  (unsigned long long)raw);
    stk_shard_close(sh);
    free(x);
    free(y);
}
END_TEST

/* A corrupt frame is reported once, naming the field, block and records; a
 * frame that decompresses but to other bytes fails the record checksums. */
START_TEST(corrupt_block_is_named)
{
    char path[TU_PATH];
    tu_scratch_file(path, sizeof path, "zstd-bad", "s.stk");
    write_shard(path, 200, 900, 3); /* 10 records per image block */
    stk_shard *sh = stk_shard_open(path, NULL);
    ck_assert_ptr_nonnull(sh);
    size_t len;
    uint8_t *file = tu_read(path, &len);
    stk__layout L;
    ck_assert_int_eq(stk__layout_decode(file, len, len, "s", &L, NULL), 0);
    uint64_t first, count, rb, pb;
    ck_assert_int_eq(stk_shard_block_info(sh, 0, 7, &first, &count, &rb, &pb, NULL), 0);
    ck_assert_uint_eq(first, 70);
    const uint8_t *t = file + L.region[0].data_off + 8; /* table of field 0 (a tensor: no offsets column) */
    uint64_t fo = rd64(t + 16 * 7 + 8);
    stk_shard_close(sh);
    file[L.region[0].heap_off + fo + pb / 2] ^= 0x55; /* inside frame 7 */
    tu_write(path, file, len);
    free(file);
    sh = stk_shard_open(path, NULL);
    ck_assert_ptr_nonnull(sh); /* open is O(blocks): the frame is not read */
    stk_error err;
    void *raw = malloc(rb);
    int rc = stk_shard_block_read(sh, 0, 7, raw, rb, &err);
    if (rc) {
        tu_assert_error(&err, STK_E_FORMAT, "field 'image', block 7 (records 70..79): the zstd frame");
        ck_assert(strstr(err.msg, path) != NULL);
    }
    free(raw);
    ck_assert_uint_ge(stk_shard_verify_records(sh, 0, 200, NULL, NULL), 1); /* found either way */
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, 70, NULL, NULL), 0);  /* only that block */
    ck_assert_uint_eq(stk_shard_verify_records(sh, 80, 120, NULL, NULL), 0);
    stk_shard_close(sh);
}
END_TEST

START_TEST(versions_and_refusals)
{
    char path[TU_PATH];
    tu_scratch_file(path, sizeof path, "zstd-ver", "s.stk");
    write_shard(path, 20, 100, 3);
    size_t len;
    uint8_t *file = tu_read(path, &len);
    /* the same file labelled 1.0 (header re-hashed): a 1.0 file cannot hold zstd */
    file[H_MINOR] = 0;
    tu_rehash_header(file, tu_header_size(file));
    stk_error err;
    ck_assert_ptr_null(stk_shard_open_memory(file, len, "old", &err));
    tu_assert_error(&err, STK_E_FORMAT, "codec zstd needs format 1.1");
    /* a codec this build does not know: a clear refusal */
    file[H_MINOR] = 1;
    tu_desc(file, 0)[D_CODEC] = 9;
    tu_rehash_header(file, tu_header_size(file));
    ck_assert_ptr_null(stk_shard_open_memory(file, len, "future", &err));
    tu_assert_error(&err, STK_E_UNSUPPORTED, "codec 9");
    free(file);
    /* writer API misuse */
    stk_schema s;
    schema(&s);
    stk_writer *w = stk_writer_create(path, &s, NULL);
    ck_assert_int_eq(stk_writer_compression(w, 1, 3, 0, &err), STK_E_ARG); /* label is raw */
    ck_assert_int_eq(stk_writer_compression(w, 0, 99, 0, &err), STK_E_ARG);
    stk_writer_abort(w);
    ck_assert_int_eq(stk_schema_set_codec(&s, 0, 5, &err), STK_E_UNSUPPORTED);
}
END_TEST

/* A dataset with compressed fields: manifest [1, 1] and "zstd", read back. */
START_TEST(dataset_manifest)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "zstd-ds");
    stk_schema s;
    schema(&s);
    stk_dataset_options o = {0};
    o.records_per_shard = 64;
    o.zstd_block_bytes = 500;
    stk_error err;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &err);
    ck_assert_ptr_nonnull(dw);
    for (uint64_t i = 0; i < 150; i++) {
        rec r;
        make_rec(&r, i);
        ck_assert_int_eq(stk_dataset_writer_append(dw, r.v, &err), 0);
    }
    ck_assert_msg(stk_dataset_writer_finish(dw, &err) == 0, "%s", err.msg);
    stk_dataset *ds = stk_dataset_open(dir, &err);
    ck_assert_msg(ds != NULL, "%s", err.msg);
    const stk_manifest *m = stk_dataset_manifest(ds);
    ck_assert_uint_eq(m->version_minor, 1);
    ck_assert_int_eq(m->schema.fields[0].codec, STK_CODEC_ZSTD);
    ck_assert_int_eq(m->schema.fields[1].codec, STK_CODEC_NONE);
    ck_assert_uint_eq(stk_dataset_nshards(ds), 3);
    ck_assert_uint_gt(stk_shard_nblocks(stk_dataset_shard(ds, 0), 0), 10); /* 500-byte blocks */
    stk_dataset_close(ds);
    char mf[TU_PATH];
    tu_join(mf, sizeof mf, dir, "manifest.json");
    size_t len;
    char *text = (char *)tu_read(mf, &len);
    ck_assert(strstr(text, "\"codec\": \"zstd\"") != NULL);
    char *v = strstr(text, "\"format_version\"");
    ck_assert(v && strstr(v, "1\n  ]") && strstr(v, "1,"));
    free(text);
}
END_TEST

TU_MAIN("zstd", {.name = "zstd",
                 .timeout = 120,
                 .tests = {round_trip_every_block_size, deterministic_and_smaller, corrupt_block_is_named,
                           versions_and_refusals, dataset_manifest}})
