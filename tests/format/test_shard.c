/* tests/format/test_shard.c - one shard: write with stk_writer, reopen, and
 * compare every value byte for byte, for every dtype and shape, bytes fields
 * (empty values included), empty shards and large streamed fields. Also the
 * writer's refusals and the reader's accessors at their bounds. */
#include "testutil_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* ------------------------------------------------- deterministic values */

/* Length of bytes-field values: every fourth is empty, the rest vary. */
static uint64_t bytes_len(unsigned f, uint64_t i) { return i % 4 == 1 ? 0 : (i * 13 + f * 5) % 300 + 1; }

/* Value of field f of record i (malloc'd; the caller frees). */
static uint8_t *make_value(const stk_field *fd, unsigned f, uint64_t i, uint64_t seed, uint64_t *size)
{
    *size = fd->kind == STK_KIND_TENSOR ? stk_field_stride(fd) : bytes_len(f, i);
    uint8_t *p = malloc(*size ? *size : 1);
    ck_assert_ptr_nonnull(p);
    tu_fill(p, (size_t)*size, seed * 7919 + f * 1000003u + i);
    return p;
}

/* ------------------------------------------------------- the round trip */

/* Write n records of `schema` to dir/name, then check the file through the
 * reader; returns what finish reported. */
static stk_shard_info round_trip(const char *dir, const char *name, const stk_schema *schema, uint64_t n,
                                 uint64_t seed)
{
    char path[TU_PATH], tmp[TU_PATH];
    stk_error e;
    stk_shard_info info;
    const uint32_t nf = schema->nfields;
    tu_join(path, sizeof path, dir, name);
    tu_tmp_of(tmp, sizeof tmp, path);

    stk_writer *w = stk_writer_create(path, schema, &e);
    ck_assert_msg(w != NULL, "%s", e.msg);
    ck_assert(tu_exists(tmp));
    for (uint64_t i = 0; i < n; i++) {
        stk_value v[STK_MAX_FIELDS];
        uint8_t *bufs[STK_MAX_FIELDS];
        for (unsigned f = 0; f < nf; f++) {
            bufs[f] = make_value(&schema->fields[f], f, i, seed, &v[f].size);
            v[f].data = bufs[f];
        }
        /* The size prediction the dataset writer cuts shards by. */
        uint64_t predicted = stk__writer_bytes_after(w, v);
        ck_assert_msg(stk_writer_append(w, v, &e) == STK_OK, "%s", e.msg);
        ck_assert_uint_eq(stk_writer_bytes(w), predicted);
        for (unsigned f = 0; f < nf; f++) free(bufs[f]);
    }
    ck_assert_uint_eq(stk_writer_records(w), n);
    uint64_t predicted = stk_writer_bytes(w);
    ck_assert_msg(stk_writer_finish(w, &info, &e) == STK_OK, "%s", e.msg);
    ck_assert(!tu_exists(tmp));
    ck_assert_uint_eq(info.records, n);
    ck_assert_uint_eq(info.file_size, predicted);

    size_t flen;
    uint8_t *file = tu_read(path, &flen);
    ck_assert_uint_eq(flen, info.file_size);
    ck_assert_uint_eq(stk_hash(file, flen), info.file_hash);

    stk_shard *sh = stk_shard_open(path, &e);
    ck_assert_msg(sh != NULL, "%s", e.msg);
    ck_assert_str_eq(stk_shard_path(sh), path);
    ck_assert_uint_eq(stk_shard_records(sh), n);
    ck_assert_uint_eq(stk_shard_file_size(sh), info.file_size);
    ck_assert_uint_eq(stk_shard_index_hash(sh), info.index_hash);
    ck_assert_int_eq(stk_schema_equal(stk_shard_schema(sh), schema), 1);
    unsigned major = 99, minor = 99;
    stk_shard_version(sh, &major, &minor);
    ck_assert_uint_eq(major, STK_FORMAT_MAJOR);
    ck_assert_uint_eq(minor, 0); /* 1.1 only when a field is compressed (test_zstd) */

    for (unsigned f = 0; f < nf; f++) {
        const stk_field *fd = &schema->fields[f];
        const uint8_t *base = stk_shard_field_base(sh, f);
        uint64_t stride = stk_field_stride(fd);
        if (fd->kind == STK_KIND_BYTES) ck_assert_ptr_null(base);
        else ck_assert_ptr_nonnull(base);
        for (uint64_t i = 0; i < n; i++) {
            uint64_t want_size, size;
            uint8_t *want = make_value(fd, f, i, seed, &want_size);
            const void *got;
            ck_assert_msg(stk_shard_value(sh, f, i, &got, &size, &e) == STK_OK, "%s", e.msg);
            ck_assert_uint_eq(size, want_size);
            ck_assert_msg(memcmp(got, want, (size_t)size) == 0, "%s: field %u record %llu differs", name, f,
                          (unsigned long long)i);
            if (fd->kind == STK_KIND_TENSOR) {
                /* Records of a tensor field form one contiguous array. */
                ck_assert_ptr_eq(got, base + i * stride);
                ck_assert(memcmp(base + i * stride, want, (size_t)stride) == 0);
            }
            ck_assert_uint_eq(stk_shard_stored_hash(sh, f, i), stk_hash(want, (size_t)want_size));
            free(want);
        }
    }
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, n, NULL, NULL), 0);
    ck_assert_uint_eq(stk_shard_verify_padding(sh, NULL, NULL), 0);
    ck_assert_msg(stk_shard_verify_index(sh, info.index_hash, &e) == STK_OK, "%s", e.msg);
    ck_assert_msg(stk_shard_verify_index(sh, 0, &e) == STK_OK, "%s", e.msg);
    ck_assert_uint_eq(stk_shard_file_hash(sh), info.file_hash);
    /* A file's mapping takes the huge-page advice where the kernel has
     * transparent huge pages; the values read the same after it. */
    ck_assert_int_eq(stk_shard_advise_huge(sh), tu_thp_available());
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, n, NULL, NULL), 0);
    stk_shard_close(sh);

    /* The same bytes opened from memory read the same. */
    sh = stk_shard_open_memory(file, flen, name, &e);
    ck_assert_msg(sh != NULL, "%s", e.msg);
    ck_assert_str_eq(stk_shard_path(sh), name);
    ck_assert_uint_eq(stk_shard_records(sh), n);
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, n, NULL, NULL), 0);
    ck_assert_uint_eq(stk_shard_file_hash(sh), info.file_hash);
    ck_assert_int_eq(stk_shard_advise_huge(sh), 0); /* the caller's memory is not advised */
    stk_shard_close(sh);
    free(file);
    return info;
}

static void add_tensor(stk_schema *s, const char *name, int dt, unsigned ndim, const uint64_t *shape)
{
    stk_error e;
    ck_assert_msg(stk_schema_add_tensor(s, name, dt, ndim, shape, &e) == STK_OK, "%s", e.msg);
}

static void add_bytes(stk_schema *s, const char *name)
{
    stk_error e;
    ck_assert_msg(stk_schema_add_bytes(s, name, &e) == STK_OK, "%s", e.msg);
}

/* Every dtype, as a scalar and in 1, 3 and 6 dimensions, next to a bytes field. */
START_TEST(every_dtype)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "every_dtype");
    static const uint64_t v3[1] = {3}, m234[3] = {2, 3, 4}, d6[6] = {1, 2, 1, 3, 1, 2};
    for (int dt = STK_DT_U8; dt <= STK_DT_F64; dt++) {
        stk_schema s;
        stk_schema_init(&s);
        add_tensor(&s, "m", dt, 3, m234); /* field 0: streamed by the writer */
        add_tensor(&s, "s", dt, 0, NULL);
        add_tensor(&s, "v", dt, 1, v3);
        add_tensor(&s, "d6", dt, 6, d6);
        add_bytes(&s, "b");
        ck_assert_uint_eq(stk_field_stride(&s.fields[0]), 24 * stk_dtype_size(dt));
        ck_assert_uint_eq(stk_field_stride(&s.fields[3]), 12 * stk_dtype_size(dt));
        char name[32];
        snprintf(name, sizeof name, "%s.stk", stk_dtype_name(dt));
        round_trip(dir, name, &s, 6, (uint64_t)dt);
    }
}
END_TEST

/* A bytes field first: no field is streamed, everything is spooled. */
START_TEST(bytes_first)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "bytes_first");
    static const uint64_t v2[1] = {2};
    stk_schema s;
    stk_schema_init(&s);
    add_bytes(&s, "key");
    add_tensor(&s, "x", STK_DT_F32, 1, v2);
    add_bytes(&s, "payload");
    round_trip(dir, "a.stk", &s, 9, 1);
}
END_TEST

/* Bytes fields only, with every value of the second one empty: a heap of
 * zero bytes. */
START_TEST(bytes_only_and_empty)
{
    char dir[TU_PATH];
    char path[TU_PATH];
    stk_error e;
    tu_scratch(dir, sizeof dir, "bytes_only");
    tu_join(path, sizeof path, dir, "empty.stk");
    stk_schema s;
    stk_schema_init(&s);
    add_bytes(&s, "a");
    add_bytes(&s, "none");
    stk_writer *w = stk_writer_create(path, &s, &e);
    ck_assert_ptr_nonnull(w);
    for (int i = 0; i < 5; i++) {
        char txt[8];
        snprintf(txt, sizeof txt, "r%d", i);
        stk_value v[2] = {{txt, strlen(txt)}, {NULL, 0}};
        ck_assert_int_eq(stk_writer_append(w, v, &e), STK_OK);
    }
    stk_shard_info info;
    ck_assert_int_eq(stk_writer_finish(w, &info, &e), STK_OK);
    stk_shard *sh = stk_shard_open(path, &e);
    ck_assert_msg(sh != NULL, "%s", e.msg);
    for (uint64_t i = 0; i < 5; i++) {
        const void *p;
        uint64_t n;
        char txt[8];
        snprintf(txt, sizeof txt, "r%d", (int)i);
        ck_assert_int_eq(stk_shard_value(sh, 0, i, &p, &n, &e), STK_OK);
        ck_assert_uint_eq(n, strlen(txt));
        ck_assert(memcmp(p, txt, n) == 0);
        ck_assert_int_eq(stk_shard_value(sh, 1, i, &p, &n, &e), STK_OK);
        ck_assert_uint_eq(n, 0);
        ck_assert_uint_eq(stk_shard_stored_hash(sh, 1, i), stk_hash("", 0));
    }
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, 5, NULL, NULL), 0);
    ck_assert_uint_eq(stk_shard_verify_padding(sh, NULL, NULL), 0);
    ck_assert_int_eq(stk_shard_verify_index(sh, info.index_hash, &e), STK_OK);
    stk_shard_close(sh);

    /* And the generic round trip with mixed empty and non-empty values. */
    round_trip(dir, "mixed.stk", &s, 12, 3);
}
END_TEST

/* A shard with no records is valid for every schema shape. */
START_TEST(zero_records)
{
    char dir[TU_PATH];
    stk_error e;
    tu_scratch(dir, sizeof dir, "zero_records");
    stk_schema s;
    tu_std_schema(&s);
    stk_shard_info info = round_trip(dir, "std.stk", &s, 0, 1);
    ck_assert_uint_eq(info.records, 0);

    stk_schema b;
    stk_schema_init(&b);
    add_bytes(&b, "only");
    round_trip(dir, "bytes.stk", &b, 0, 1);

    char path[TU_PATH];
    tu_join(path, sizeof path, dir, "std.stk");
    stk_shard *sh = stk_shard_open(path, &e);
    ck_assert_ptr_nonnull(sh);
    const void *p;
    uint64_t n;
    ck_assert_int_eq(stk_shard_value(sh, 0, 0, &p, &n, &e), STK_E_RANGE);
    ck_assert_int_eq(stk_shard_value(sh, 2, 0, &p, &n, &e), STK_E_RANGE);
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, 0, NULL, NULL), 0);
    stk_shard_close(sh);
}
END_TEST

/* The maximum of 32 fields, alternating kinds. */
START_TEST(max_fields)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "max_fields");
    static const uint64_t sh2[2] = {2, 3};
    stk_schema s;
    stk_schema_init(&s);
    for (int i = 0; i < STK_MAX_FIELDS; i++) {
        char name[16];
        snprintf(name, sizeof name, "f%02d", i);
        if (i % 3 == 2) add_bytes(&s, name);
        else add_tensor(&s, name, STK_DT_U8 + i % 12, (unsigned)(i % 2) * 2, sh2);
    }
    round_trip(dir, "wide.stk", &s, 4, 5);
}
END_TEST

/* Field 0 is streamed through a 4 MiB buffer: values that cross the buffer
 * boundary, and values larger than the buffer (written directly). */
START_TEST(large_streamed_field)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "large_field");
    static const uint64_t mid[2] = {3, 1u << 19};        /* 1.5 MiB per record */
    static const uint64_t big[1] = {(4u << 20) / 8 + 1}; /* 4 MiB + 8 bytes */
    stk_schema s;
    stk_schema_init(&s);
    add_tensor(&s, "pixels", STK_DT_U8, 2, mid);
    add_bytes(&s, "tag");
    round_trip(dir, "mid.stk", &s, 5, 11);

    stk_schema_init(&s);
    add_tensor(&s, "big", STK_DT_F64, 1, big);
    add_tensor(&s, "small", STK_DT_I16, 0, NULL);
    round_trip(dir, "big.stk", &s, 3, 12);
    tu_rm_rf(dir); /* 20 MB that no one needs after the test */
}
END_TEST

/* ------------------------------------------------------ writer refusals */

START_TEST(writer_refusals)
{
    char path[TU_PATH];
    stk_error e;
    tu_scratch_file(path, sizeof path, "writer_refusals", "r.stk");
    stk_schema s, empty, bad;
    tu_std_schema(&s);
    stk_schema_init(&empty);
    tu_std_schema(&bad);
    bad.fields[1].codec = 3;

    ck_assert_ptr_null(stk_writer_create(NULL, &s, &e));
    tu_assert_error(&e, STK_E_ARG, "NULL");
    ck_assert_ptr_null(stk_writer_create(path, &empty, &e));
    tu_assert_error(&e, STK_E_ARG, "no fields");
    ck_assert_ptr_null(stk_writer_create(path, &bad, &e));
    tu_assert_error(&e, STK_E_UNSUPPORTED, "codec");
    ck_assert_ptr_null(stk_writer_create("/nonexistent-dir/x/r.stk", &s, &e));
    tu_assert_error(&e, STK_E_IO, "/nonexistent-dir/x/r.stk.tmp: cannot create");
    ck_assert(!tu_exists(path));

    stk_writer *w = tu_std_writer(path, 1, 0, 1);
    tu_record r;
    tu_std_record(&r, 1, 0);

    /* Refused records leave the writer as it was. */
    tu_record bad_rec;
    tu_std_record(&bad_rec, 1, 1);
    bad_rec.v[TU_IMAGE].size -= 2;
    ck_assert_int_eq(stk_writer_append(w, bad_rec.v, &e), STK_E_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "record 1, field 'image': value is 28 bytes, expected 30"));
    tu_std_record(&bad_rec, 1, 1);
    bad_rec.v[TU_LABEL].size = 8;
    ck_assert_int_eq(stk_writer_append(w, bad_rec.v, &e), STK_E_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "field 'label'"));
    tu_std_record(&bad_rec, 1, 1);
    bad_rec.v[TU_TEXT] = (stk_value){NULL, 5};
    ck_assert_int_eq(stk_writer_append(w, bad_rec.v, &e), STK_E_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "NULL data"));
    ck_assert_int_eq(stk_writer_append(w, NULL, &e), STK_E_ARG);
    ck_assert_int_eq(stk_writer_append(NULL, r.v, &e), STK_E_ARG);
    ck_assert_uint_eq(stk_writer_records(w), 1);

    for (uint64_t i = 1; i < 4; i++) {
        tu_std_record(&r, 1, i);
        ck_assert_int_eq(stk_writer_append(w, r.v, &e), STK_OK);
    }
    stk_shard_info info;
    ck_assert_int_eq(stk_writer_finish(w, &info, &e), STK_OK);
    ck_assert_uint_eq(info.records, 4);
    stk_shard *sh = stk_shard_open(path, &e);
    ck_assert_ptr_nonnull(sh);
    tu_check_std_shard(sh, 1, 0);
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, 4, NULL, NULL), 0);
    stk_shard_close(sh);

    ck_assert_int_eq(stk_writer_finish(NULL, NULL, &e), STK_E_ARG);
    stk_writer_abort(NULL); /* a no-op */
    ck_assert_uint_eq(stk_writer_records(NULL), 0);
    ck_assert_uint_eq(stk_writer_bytes(NULL), 0);
}
END_TEST

/* ------------------------------------------------------ reader bounds */

typedef struct {
    int calls;
    uint64_t record;
    int field, code;
} seen_t;

static void remember(void *user, const stk_shard *sh, uint64_t record, int field, int code, const char *what)
{
    seen_t *s = user;
    (void)sh;
    ck_assert_ptr_nonnull(what);
    s->calls++;
    s->record = record;
    s->field = field;
    s->code = code;
}

START_TEST(reader_bounds)
{
    char path[TU_PATH];
    stk_error e;
    tu_scratch_file(path, sizeof path, "reader_bounds", "b.stk");
    tu_write_std_shard(path, 4, 0, 6, NULL);
    stk_shard *sh = stk_shard_open(path, &e);
    ck_assert_ptr_nonnull(sh);
    const void *p;
    uint64_t n;
    ck_assert_int_eq(stk_shard_value(sh, 3, 0, &p, &n, &e), STK_E_RANGE);
    ck_assert_ptr_nonnull(strstr(e.msg, "field 3 out of range (3 fields)"));
    ck_assert_int_eq(stk_shard_value(sh, 0, 6, &p, &n, &e), STK_E_RANGE);
    ck_assert_ptr_nonnull(strstr(e.msg, "record 6 out of range (6 records)"));
    ck_assert_int_eq(stk_shard_value(sh, 2, UINT64_MAX, &p, &n, &e), STK_E_RANGE);
    ck_assert_uint_eq(stk_shard_stored_hash(sh, 3, 0), 0);
    ck_assert_uint_eq(stk_shard_stored_hash(sh, 0, 6), 0);
    ck_assert_ptr_null(stk_shard_field_base(sh, TU_TEXT));
    ck_assert_ptr_null(stk_shard_field_base(sh, 99));

    /* Sub-ranges verify; ranges past the end are one problem, reported. */
    ck_assert_uint_eq(stk_shard_verify_records(sh, 2, 3, NULL, NULL), 0);
    ck_assert_uint_eq(stk_shard_verify_records(sh, 6, 0, NULL, NULL), 0);
    seen_t seen = {0, 0, 0, 0};
    ck_assert_uint_eq(stk_shard_verify_records(sh, 5, 2, remember, &seen), 1);
    ck_assert_int_eq(seen.calls, 1);
    ck_assert_int_eq(seen.code, STK_E_RANGE);
    ck_assert_int_eq(seen.field, -1);
    ck_assert_uint_eq(stk_shard_verify_records(sh, UINT64_MAX, 2, NULL, NULL), 1);

    /* A wrong expected index hash is a manifest disagreement. */
    ck_assert_int_eq(stk_shard_verify_index(sh, stk_shard_index_hash(sh) ^ 1, &e), STK_E_MANIFEST);
    ck_assert_ptr_nonnull(strstr(e.msg, "differs from the manifest"));
    stk_shard_close(sh);
    stk_shard_close(NULL);
}
END_TEST

START_TEST(open_refusals)
{
    char dir[TU_PATH], path[TU_PATH], small[TU_PATH], big[TU_PATH];
    stk_error e;
    tu_scratch(dir, sizeof dir, "open_refusals");
    tu_join(path, sizeof path, dir, "ok.stk");
    tu_join(small, sizeof small, dir, "small.stk");
    tu_join(big, sizeof big, dir, "big.stk");

    ck_assert_ptr_null(stk_shard_open(NULL, &e));
    tu_assert_error(&e, STK_E_ARG, "NULL path");
    tu_join(path, sizeof path, dir, "missing.stk");
    ck_assert_ptr_null(stk_shard_open(path, &e));
    tu_assert_error(&e, STK_E_IO, "missing.stk: cannot open");
    ck_assert_ptr_null(stk_shard_open(dir, &e));
    tu_assert_error(&e, STK_E_IO, "not a regular file");

    /* A FIFO planted at the path is refused, not waited on. */
    char fifo[TU_PATH];
    tu_join(fifo, sizeof fifo, dir, "fifo.stk");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_ptr_null(stk_shard_open(fifo, &e));
    tu_assert_error(&e, STK_E_IO, "fifo.stk: not a regular file");

    tu_write(small, "", 0);
    ck_assert_ptr_null(stk_shard_open(small, &e));
    tu_assert_error(&e, STK_E_TRUNCATED, "shorter than the 64-byte shard header");
    tu_write(small, "STKSHARD", 8);
    ck_assert_ptr_null(stk_shard_open(small, &e));
    tu_assert_error(&e, STK_E_TRUNCATED, "small.stk: file is 8 bytes");

    ck_assert_ptr_null(stk_shard_open_memory(NULL, 0, "m", &e));
    tu_assert_error(&e, STK_E_TRUNCATED, "m: 0 bytes");
    ck_assert_ptr_null(stk_shard_open_memory(NULL, 10, "m", &e));
    tu_assert_error(&e, STK_E_ARG, "NULL data");

    /* A 64-byte file of zeros: not a shard. */
    uint8_t zeros[64] = {0};
    ck_assert_ptr_null(stk_shard_open_memory(zeros, sizeof zeros, NULL, &e));
    tu_assert_error(&e, STK_E_FORMAT, "<memory>: not a stoker shard (bad magic)");

    /* Bytes after the footer: the file is longer than its header says. */
    tu_join(path, sizeof path, dir, "ok.stk");
    tu_write_std_shard(path, 1, 0, 3, NULL);
    size_t n;
    uint8_t *file = tu_read(path, &n);
    uint8_t *longer = calloc(1, n + 5);
    ck_assert_ptr_nonnull(longer);
    memcpy(longer, file, n);
    tu_write(big, longer, n + 5);
    ck_assert_ptr_null(stk_shard_open(big, &e));
    tu_assert_error(&e, STK_E_FORMAT, "(5 extra)");
    free(longer);
    free(file);
}
END_TEST

TU_MAIN("shard",
        {.name = "round_trip",
         .tests = {every_dtype, bytes_first, bytes_only_and_empty, zero_records, max_fields,
                   large_streamed_field}},
        {.name = "api", .tests = {writer_refusals, reader_bounds, open_refusals}})
