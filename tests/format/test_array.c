/* tests/format/test_array.c - variable-shape (array) fields and JPEG values
 * (format 1.2): round trips of every dtype and of 1 to 3 per-record dims,
 * raw, zstd and JPEG, through the shard and dataset writers; shapes back;
 * writer refusals that leave the writer as it was; corruption of the shape
 * column, the offsets and the JPEG bytes named by record and field; the
 * version rules and the manifest. */
#include "testutil_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

enum { F_IMAGE, F_TOKENS, F_BOXES, F_LABEL, F_VOL, F_JPEG, NF };

/* image u8[*,*,3], tokens i32[*] zstd, boxes f32[*,4], label i64,
 * vol u16[*,2,*,*], jpeg u8[*,*,3] jpeg. */
static void schema(stk_schema *s, int zstd)
{
    stk_schema_init(s);
    stk_error e;
    const uint64_t img[3] = {0, 0, 3}, tok[1] = {0}, box[2] = {0, 4}, vol[4] = {0, 2, 0, 0};
    ck_assert_msg(stk_schema_add_array(s, "image", STK_DT_U8, 3, img, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(stk_schema_add_array(s, "tokens", STK_DT_I32, 1, tok, &e), 0);
    ck_assert_int_eq(stk_schema_add_array(s, "boxes", STK_DT_F32, 2, box, &e), 0);
    ck_assert_int_eq(stk_schema_add_tensor(s, "label", STK_DT_I64, 0, NULL, &e), 0);
    ck_assert_int_eq(stk_schema_add_array(s, "vol", STK_DT_U16, 4, vol, &e), 0);
    ck_assert_int_eq(stk_schema_add_array(s, "jpeg", STK_DT_U8, 3, img, &e), 0);
    ck_assert_msg(stk_schema_set_codec(s, F_JPEG, STK_CODEC_JPEG, &e) == 0, "%s", e.msg);
    if (zstd) ck_assert_int_eq(stk_schema_set_codec(s, F_TOKENS, STK_CODEC_ZSTD, &e), 0);
}

/* A JPEG stream as far as the format looks: SOI, an APP0, the frame header
 * (SOF0 here, SOF2 for odd records), a scan of filler bytes, EOI. No
 * decoder reads it: its writers are told to trust it (stk_writer_trust_jpeg),
 * as tests/format/test_jpeg_check.c shows the check these skip. */
static size_t make_jpeg(uint8_t *p, uint32_t h, uint32_t w, unsigned c, uint64_t i)
{
    size_t n = 0;
    static const uint8_t app0[] = {0xFF, 0xE0, 0x00, 0x06, 'J', 'F', 'I', 'F'};
    p[n++] = 0xFF, p[n++] = 0xD8;
    memcpy(p + n, app0, sizeof app0), n += sizeof app0;
    p[n++] = 0xFF, p[n++] = i % 2 ? 0xC2 : 0xC0, p[n++] = 0, p[n++] = (uint8_t)(8 + 3 * c), p[n++] = 8;
    p[n++] = (uint8_t)(h >> 8), p[n++] = (uint8_t)h, p[n++] = (uint8_t)(w >> 8), p[n++] = (uint8_t)w;
    p[n++] = (uint8_t)c;
    for (unsigned k = 0; k < c; k++) p[n++] = (uint8_t)(k + 1), p[n++] = 0x11, p[n++] = 0;
    p[n++] = 0xFF, p[n++] = 0xDA, p[n++] = 0, p[n++] = 2;
    size_t fill = 5 + i % 23;
    tu_fill(p + n, fill, i), n += fill;
    for (size_t k = n - fill; k < n; k++) p[k] &= 0x7F; /* no stray markers */
    p[n++] = 0xFF, p[n++] = 0xD9;
    return n;
}

typedef struct {
    uint8_t image[9 * 7 * 3];
    int32_t tokens[40];
    float boxes[6 * 4];
    int64_t label;
    uint16_t vol[3 * 2 * 2 * 4];
    uint8_t jpeg[128];
    uint64_t dims[2 + 1 + 1 + 3 + 2]; /* image h w, tokens n, boxes n, vol a b c, jpeg h w */
    stk_value v[NF];
} rec;

/* Record i: shapes that vary with i, including empty ones (0 tokens, 0 boxes). */
static void make_rec(rec *r, uint64_t i)
{
    uint64_t h = 1 + i % 9, w = 1 + (i * 5) % 7, nt = (i * 7) % 41, nb = i % 7, a = 1 + i % 3,
             b = 1 + (i / 3) % 2, c = 1 + i % 4, jh = 1 + (uint32_t)(i * 37) % 3000,
             jw = 1 + (uint32_t)(i * 53) % 4000;
    tu_fill(r->image, h * w * 3, i);
    for (uint64_t k = 0; k < nt; k++) r->tokens[k] = (int32_t)(k * 1000 + i);
    for (uint64_t k = 0; k < nb * 4; k++) r->boxes[k] = (float)k * 0.5f + (float)i;
    r->label = (int64_t)i - 3;
    tu_fill(r->vol, a * 2 * b * c * 2, i + 7);
    size_t jn = make_jpeg(r->jpeg, (uint32_t)jh, (uint32_t)jw, 3, i);
    const uint64_t d[] = {h, w, nt, nb, a, b, c, jh, jw};
    memcpy(r->dims, d, sizeof d);
    r->v[F_IMAGE] = (stk_value){r->image, h * w * 3};
    r->v[F_TOKENS] = (stk_value){r->tokens, nt * 4};
    r->v[F_BOXES] = (stk_value){r->boxes, nb * 16};
    r->v[F_LABEL] = (stk_value){&r->label, 8};
    r->v[F_VOL] = (stk_value){r->vol, a * 2 * b * c * 2};
    r->v[F_JPEG] = (stk_value){r->jpeg, jn};
}

/* The full shape of each field of record i, as the reader should give it. */
static unsigned want_shape(const rec *r, unsigned f, uint64_t *s)
{
    const uint64_t *d = r->dims;
    switch (f) {
    case F_IMAGE:
        s[0] = d[0], s[1] = d[1], s[2] = 3;
        return 3;
    case F_TOKENS:
        s[0] = d[2];
        return 1;
    case F_BOXES:
        s[0] = d[3], s[1] = 4;
        return 2;
    case F_LABEL:
        return 0;
    case F_VOL:
        s[0] = d[4], s[1] = 2, s[2] = d[5], s[3] = d[6];
        return 4;
    default:
        s[0] = d[7], s[1] = d[8], s[2] = 3;
        return 3;
    }
}

static void check_shard(const stk_shard *sh, uint64_t first)
{
    stk_block_cursor cur = {0};
    for (uint64_t i = 0; i < stk_shard_records(sh); i++) {
        rec r;
        make_rec(&r, first + i);
        for (unsigned f = 0; f < NF; f++) {
            const void *p;
            uint64_t size, got[STK_MAX_DIMS], want[STK_MAX_DIMS];
            stk_error e;
            ck_assert_msg(stk_shard_value_at(sh, f, i, &cur, &p, &size, &e) == 0, "%s", e.msg);
            ck_assert_uint_eq(size, r.v[f].size);
            ck_assert(size == 0 || memcmp(p, r.v[f].data, size) == 0);
            unsigned nd = want_shape(&r, f, want);
            ck_assert_uint_eq(stk_shard_schema(sh)->fields[f].ndim, nd);
            ck_assert_msg(stk_shard_value_shape(sh, f, i, got, &e) == 0, "%s", e.msg);
            for (unsigned d = 0; d < nd; d++) ck_assert_uint_eq(got[d], want[d]);
        }
    }
    stk_block_cursor_free(&cur);
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, stk_shard_records(sh), NULL, NULL), 0);
    ck_assert_uint_eq(stk_shard_verify_padding(sh, NULL, NULL), 0);
    ck_assert_int_eq(stk_shard_verify_index(sh, 0, NULL), 0);
}

static void write_dataset(const char *dir, uint64_t n, int zstd, uint64_t per)
{
    stk_schema s;
    schema(&s, zstd);
    stk_dataset_options o = {.force = 1, .records_per_shard = per, .zstd_block_bytes = 300};
    stk_error e;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    ck_assert_int_eq(stk_dataset_writer_trust_jpeg(dw, 1, &e), 0);
    for (uint64_t i = 0; i < n; i++) {
        rec r;
        make_rec(&r, i);
        ck_assert_msg(stk_dataset_writer_append_dims(dw, r.v, r.dims, &e) == 0, "%s", e.msg);
    }
    ck_assert_msg(stk_dataset_writer_finish(dw, &e) == 0, "%s", e.msg);
}

START_TEST(round_trip)
{
    char dir[TU_PATH];
    for (int zstd = 0; zstd < 2; zstd++) {
        tu_scratch(dir, sizeof dir, zstd ? "array-rt-z" : "array-rt");
        write_dataset(dir, 130, zstd, 50);
        stk_error e;
        stk_dataset *ds = stk_dataset_open(dir, &e);
        ck_assert_msg(ds != NULL, "%s", e.msg);
        ck_assert_uint_eq(stk_dataset_nshards(ds), 3);
        const stk_manifest *m = stk_dataset_manifest(ds);
        ck_assert_uint_eq(m->version_minor, 2);
        uint64_t first = 0;
        for (size_t k = 0; k < stk_dataset_nshards(ds); k++) {
            const stk_shard *sh = stk_dataset_shard(ds, k);
            unsigned major, minor;
            stk_shard_version(sh, &major, &minor);
            ck_assert_uint_eq(minor, 2);
            check_shard(sh, first);
            first += stk_shard_records(sh);
        }
        ck_assert_uint_eq(first, 130);
        stk_dataset_close(ds);
    }
}
END_TEST

/* One per-record dim is inferred from the size; the bytes do not depend on
 * whether dims were given. Same records, same bytes. */
START_TEST(inferred_dims_and_determinism)
{
    char a[TU_PATH + 16], b[TU_PATH + 16];
    tu_scratch_pair(a, b, sizeof a, "array-det", "a.stk", "b.stk");
    stk_schema s;
    stk_schema_init(&s);
    const uint64_t tok[1] = {0}, box[2] = {0, 4};
    ck_assert_int_eq(stk_schema_add_array(&s, "tokens", STK_DT_I32, 1, tok, NULL), 0);
    ck_assert_int_eq(stk_schema_add_array(&s, "boxes", STK_DT_F32, 2, box, NULL), 0);
    for (int pass = 0; pass < 2; pass++) {
        stk_error e;
        stk_writer *w = stk_writer_create(pass ? b : a, &s, &e);
        ck_assert_ptr_nonnull(w);
        for (uint64_t i = 0; i < 40; i++) {
            rec r;
            make_rec(&r, i);
            stk_value v[2] = {r.v[F_TOKENS], r.v[F_BOXES]};
            uint64_t d[2] = {r.dims[2], r.dims[3]};
            ck_assert_msg((pass ? stk_writer_append_dims(w, v, d, &e) : stk_writer_append(w, v, &e)) == 0,
                          "%s", e.msg);
        }
        ck_assert_int_eq(stk_writer_finish(w, NULL, &e), 0);
    }
    size_t la, lb;
    uint8_t *x = tu_read(a, &la), *y = tu_read(b, &lb);
    ck_assert_uint_eq(la, lb);
    ck_assert(memcmp(x, y, la) == 0);
    free(x);
    free(y);
}
END_TEST

/* Each refusal names the record and field, and the writer goes on as if the
 * refused record had never been offered. */
START_TEST(writer_refusals)
{
    char path[TU_PATH + 16];
    tu_scratch_file(path, sizeof path, "array-refuse", "s.stk");
    stk_schema s;
    schema(&s, 0);
    stk_error e;
    stk_writer *w = stk_writer_create(path, &s, &e);
    stk_writer_trust_jpeg(w, 1, &e);
    rec r;
    make_rec(&r, 0);
    ck_assert_int_eq(stk_writer_append_dims(w, r.v, r.dims, &e), 0);
    make_rec(&r, 1);
    /* image needs two dims: no inference */
    ck_assert_int_eq(stk_writer_append(w, r.v, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "record 1, field 'image': its shape has 2 per-record dims");
    uint64_t d[9];
    memcpy(d, r.dims, sizeof d);
    d[0]++; /* image height off by one */
    ck_assert_int_eq(stk_writer_append_dims(w, r.v, d, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "record 1, field 'image': value is");
    memcpy(d, r.dims, sizeof d);
    d[8] += 1; /* JPEG width disagrees with its frame */
    ck_assert_int_eq(stk_writer_append_dims(w, r.v, d, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "field 'jpeg': JPEG is");
    rec bad = r;
    bad.jpeg[1] = 0; /* no SOI */
    bad.v[F_JPEG].data = bad.jpeg;
    ck_assert_int_eq(stk_writer_append_dims(w, bad.v, r.dims, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "field 'jpeg': value is not a JPEG stream");
    bad = r;
    bad.v[F_BOXES].size -= 4; /* not whole boxes */
    bad.v[F_BOXES].data = bad.boxes;
    ck_assert_int_eq(stk_writer_append_dims(w, bad.v, r.dims, &e), STK_E_ARG);
    ck_assert_int_eq(stk_writer_append_dims(w, r.v, r.dims, &e), 0);
    ck_assert_int_eq(stk_writer_finish(w, NULL, &e), 0);
    stk_shard *sh = stk_shard_open(path, &e);
    ck_assert_msg(sh != NULL, "%s", e.msg);
    ck_assert_uint_eq(stk_shard_records(sh), 2);
    check_shard(sh, 0);
    stk_shard_close(sh);
}
END_TEST

/* Write a shard of n records; return its bytes and the layout's offsets of
 * field f's data and heap regions. */
static uint8_t *shard_bytes(const char *path, uint64_t n, size_t *len)
{
    stk_schema s;
    schema(&s, 0);
    stk_error e;
    stk_writer *w = stk_writer_create(path, &s, &e);
    stk_writer_trust_jpeg(w, 1, &e);
    for (uint64_t i = 0; i < n; i++) {
        rec r;
        make_rec(&r, i);
        ck_assert_int_eq(stk_writer_append_dims(w, r.v, r.dims, &e), 0);
    }
    ck_assert_int_eq(stk_writer_finish(w, NULL, &e), 0);
    return tu_read(path, len);
}

static uint64_t desc64(const uint8_t *b, unsigned f, unsigned off)
{
    return rd64(b + STK_HEADER_FIXED + f * STK_FIELD_DESC + off);
}

typedef struct {
    uint64_t record;
    int field, code;
    char what[200];
    unsigned n;
} seen;

static void note(void *user, const stk_shard *sh, uint64_t record, int field, int code, const char *what)
{
    (void)sh;
    seen *s = user;
    if (s->n++ == 0) {
        s->record = record, s->field = field, s->code = code;
        snprintf(s->what, sizeof s->what, "%s", what);
    }
}

/* A damaged shape, offset or JPEG byte is reported at the record and field. */
START_TEST(corruption_named)
{
    char path[TU_PATH + 16], bad[TU_PATH + 16];
    tu_scratch_pair(path, bad, sizeof path, "array-corrupt", "s.stk", "bad.stk");
    const uint64_t n = 12;
    size_t len;
    uint8_t *good = shard_bytes(path, n, &len);
    struct {
        const char *name;
        unsigned field;
        int heap;     /* 0: columns at data_off + at, 1: heap + at */
        uint64_t at;  /* byte to change */
        uint8_t xor_; /* how */
        uint64_t record;
        int code;
        const char *sub;
    } cases[] = {
        /* image dims column: record 5's height at data_off + 13*8 + 5*16 */
        {"image height", F_IMAGE, 0, 13 * 8 + 5 * 16, 0x01, 5, STK_E_FORMAT, "does not hold its shape"},
        /* vol: record 3's last dim */
        {"vol dim", F_VOL, 0, 13 * 8 + 3 * 24 + 16, 0x02, 3, STK_E_FORMAT, "does not hold its shape"},
        /* jpeg width of record 7 in the dims column */
        {"jpeg dims", F_JPEG, 0, 13 * 8 + 7 * 16 + 8, 0x10, 7, STK_E_FORMAT, "JPEG frame is"},
        /* a byte of the first JPEG (record 0) */
        {"jpeg byte", F_JPEG, 1, 20, 0x04, 0, STK_E_CHECKSUM, "checksum mismatch"},
        /* tokens offset o[4] moved up: records 3 and 4 change */
        {"tokens offset", F_TOKENS, 0, 4 * 8, 0x04, 3, STK_E_FORMAT, "does not hold its shape"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint8_t *b = tu_dup(good, len);
        uint64_t base =
            cases[c].heap ? desc64(b, cases[c].field, D_HEAP_OFF) : desc64(b, cases[c].field, D_DATA_OFF);
        b[base + cases[c].at] ^= cases[c].xor_;
        tu_write(bad, b, len);
        stk_error e;
        stk_shard *sh = stk_shard_open(bad, &e);
        ck_assert_msg(sh != NULL, "%s: %s", cases[c].name, e.msg);
        seen s = {0};
        ck_assert_uint_gt(stk_shard_verify_records(sh, 0, n, note, &s), 0);
        ck_assert_msg(s.record == cases[c].record && s.field == (int)cases[c].field &&
                          s.code == cases[c].code && strstr(s.what, cases[c].sub),
                      "%s: record %llu field %d code %d: %s", cases[c].name, (unsigned long long)s.record,
                      s.field, s.code, s.what);
        if (cases[c].code == STK_E_FORMAT && cases[c].field != F_JPEG) {
            const void *p;
            uint64_t size, dims[STK_MAX_DIMS];
            ck_assert_int_eq(stk_shard_value(sh, cases[c].field, cases[c].record, &p, &size, &e),
                             STK_E_FORMAT);
            ck_assert_msg(strstr(e.msg, "bad.stk: record") &&
                              strstr(e.msg, stk_shard_schema(sh)->fields[cases[c].field].name),
                          "%s", e.msg);
            ck_assert_int_eq(stk_shard_value_shape(sh, cases[c].field, cases[c].record, dims, &e),
                             STK_E_FORMAT);
        }
        stk_shard_close(sh);
        free(b);
    }
    free(good);
}
END_TEST

/* 1.2 features in a file that says 1.1 are malformed; the manifest says
 * [1, 2] and gives per-record dims as null. */
START_TEST(version_and_manifest)
{
    char dir[TU_PATH], path[TU_PATH + 32];
    tu_scratch(dir, sizeof dir, "array-version");
    write_dataset(dir, 5, 0, 0);
    tu_join(path, sizeof path, dir, "shard-00000.stk");
    size_t len;
    uint8_t *b = tu_read(path, &len);
    wr16(b + H_MINOR, 1);
    uint32_t hs = rd32(b + H_HEADER_SIZE);
    wr64(b + hs - 8, stk_hash(b, hs - 8));
    stk_error e;
    stk_shard *sh = stk_shard_open_memory(b, len, "old.stk", &e);
    ck_assert_ptr_null(sh);
    tu_assert_error(&e, STK_E_FORMAT, "array fields and JPEG values need format 1.2, the file says 1.1");
    free(b);

    tu_join(path, sizeof path, dir, "manifest.json");
    size_t mlen;
    char *text = (char *)tu_read(path, &mlen);
    ck_assert_ptr_nonnull(strstr(text, "\"kind\": \"array\""));
    ck_assert_ptr_nonnull(strstr(text, "\"codec\": \"jpeg\""));
    json_error_t je;
    json_t *root = json_loadb(text, mlen, 0, &je);
    ck_assert_ptr_nonnull(root);
    json_t *shape = json_object_get(json_array_get(json_object_get(root, "schema"), F_VOL), "shape");
    ck_assert(json_is_null(json_array_get(shape, 0)) && json_integer_value(json_array_get(shape, 1)) == 2 &&
              json_is_null(json_array_get(shape, 3)));
    json_t *ver = json_object_get(root, "format_version");
    ck_assert_int_eq(json_integer_value(json_array_get(ver, 1)), 2);
    /* the same manifest saying [1, 1] is refused */
    json_array_set_new(ver, 1, json_integer(1));
    char *old = json_dumps(root, 0);
    stk_manifest *m = stk_manifest_parse(old, strlen(old), "m.json", &e);
    ck_assert_ptr_null(m);
    tu_assert_error(&e, STK_E_MANIFEST, "array fields and JPEG values need format_version [1, 2]");
    free(old);
    /* a null in a tensor's shape is refused */
    json_array_set_new(ver, 1, json_integer(2));
    json_object_set_new(json_array_get(json_object_get(root, "schema"), F_VOL), "kind",
                        json_string("tensor"));
    old = json_dumps(root, 0);
    ck_assert_ptr_null(stk_manifest_parse(old, strlen(old), "m.json", &e));
    tu_assert_error(&e, STK_E_MANIFEST, "positive integers");
    free(old);
    json_decref(root);
    free(text);
}
END_TEST

START_TEST(schema_rules)
{
    stk_schema s;
    stk_error e;
    stk_schema_init(&s);
    const uint64_t fixed[2] = {3, 4}, var[2] = {0, 4}, jp[3] = {0, 0, 4}, big[2] = {0, (uint64_t)1 << 40};
    ck_assert_int_eq(stk_schema_add_array(&s, "a", STK_DT_U8, 2, fixed, &e), STK_E_FORMAT);
    tu_assert_error(&e, STK_E_FORMAT, "no per-record dimension");
    ck_assert_int_eq(stk_schema_add_array(&s, "a", STK_DT_U8, 0, var, &e), STK_E_ARG);
    ck_assert_int_eq(stk_schema_add_array(&s, "a", STK_DT_U16, 2, big, &e), STK_E_FORMAT);
    ck_assert_int_eq(stk_schema_add_array(&s, "a", STK_DT_U8, 3, jp, &e), 0);
    ck_assert_int_eq(stk_schema_set_codec(&s, 0, STK_CODEC_JPEG, &e), STK_E_ARG); /* 4 channels */
    ck_assert_int_eq(s.fields[0].codec, STK_CODEC_NONE);
    ck_assert_uint_eq(stk_field_var_dims(&s.fields[0]), 2);
    ck_assert_uint_eq(stk_field_stride(&s.fields[0]), 0);
    char d[64];
    stk_field_describe(&s.fields[0], d, sizeof d);
    ck_assert_str_eq(d, "a u8[*,*,4]");
    /* every dtype round-trips as a 1-d array */
    stk_schema_init(&s);
    for (int dt = STK_DT_U8; dt <= STK_DT_F64; dt++) {
        char name[8];
        snprintf(name, sizeof name, "d%d", dt);
        ck_assert_int_eq(stk_schema_add_array(&s, name, dt, 1, var, &e), 0);
    }
    ck_assert_int_eq(stk_schema_validate(&s, &e), 0);
}
END_TEST

/* Every dtype: values of 0..n elements come back bit for bit. */
START_TEST(every_dtype)
{
    char path[TU_PATH + 16];
    tu_scratch_file(path, sizeof path, "array-dtypes", "s.stk");
    stk_schema s;
    stk_schema_init(&s);
    const uint64_t var[1] = {0};
    for (int dt = STK_DT_U8; dt <= STK_DT_F64; dt++) {
        char name[8];
        snprintf(name, sizeof name, "d%d", dt);
        ck_assert_int_eq(stk_schema_add_array(&s, name, dt, 1, var, NULL), 0);
    }
    stk_error e;
    stk_writer *w = stk_writer_create(path, &s, &e);
    uint8_t buf[12][64];
    for (uint64_t i = 0; i < 9; i++) {
        stk_value v[12];
        for (unsigned f = 0; f < 12; f++) {
            tu_fill(buf[f], sizeof buf[f], i * 12 + f);
            v[f] = (stk_value){buf[f], stk_dtype_size((int)f + 1) * i};
        }
        ck_assert_int_eq(stk_writer_append(w, v, &e), 0);
    }
    ck_assert_int_eq(stk_writer_finish(w, NULL, &e), 0);
    stk_shard *sh = stk_shard_open(path, &e);
    ck_assert_msg(sh != NULL, "%s", e.msg);
    for (uint64_t i = 0; i < 9; i++)
        for (unsigned f = 0; f < 12; f++) {
            const void *p;
            uint64_t size, dims[STK_MAX_DIMS];
            tu_fill(buf[f], sizeof buf[f], i * 12 + f);
            ck_assert_int_eq(stk_shard_value(sh, f, i, &p, &size, &e), 0);
            ck_assert_uint_eq(size, stk_dtype_size((int)f + 1) * i);
            ck_assert(memcmp(p, buf[f], size) == 0);
            ck_assert_int_eq(stk_shard_value_shape(sh, f, i, dims, &e), 0);
            ck_assert_uint_eq(dims[0], i);
        }
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, 9, NULL, NULL), 0);
    stk_shard_close(sh);
}
END_TEST

TU_MAIN("array", {.name = "array",
                  .tests = {schema_rules, round_trip, inferred_dims_and_determinism, writer_refusals,
                            corruption_named, version_and_manifest, every_dtype}})
