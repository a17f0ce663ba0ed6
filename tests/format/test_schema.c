/* tests/format/test_schema.c - the small pure parts: dtypes, schemas, status
 * names, the XXH3 checksum, path and name rules. */
#include "testutil_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

/* ------------------------------------------------------------- dtypes */

START_TEST(dtype_table)
{
    static const struct {
        int dt;
        const char *name;
        size_t size;
    } want[] = {
        {STK_DT_U8, "u8", 1},   {STK_DT_I8, "i8", 1},     {STK_DT_U16, "u16", 2}, {STK_DT_I16, "i16", 2},
        {STK_DT_U32, "u32", 4}, {STK_DT_I32, "i32", 4},   {STK_DT_U64, "u64", 8}, {STK_DT_I64, "i64", 8},
        {STK_DT_F16, "f16", 2}, {STK_DT_BF16, "bf16", 2}, {STK_DT_F32, "f32", 4}, {STK_DT_F64, "f64", 8},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ck_assert_uint_eq(stk_dtype_size(want[i].dt), want[i].size);
        ck_assert_str_eq(stk_dtype_name(want[i].dt), want[i].name);
        ck_assert_int_eq(stk_dtype_from_name(want[i].name), want[i].dt);
    }
    /* Unknown codes and names map to 0 / NULL, never to a neighbour. */
    const int bad[] = {0, -1, 13, 255};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_uint_eq(stk_dtype_size(bad[i]), 0);
        ck_assert_ptr_null(stk_dtype_name(bad[i]));
    }
    ck_assert_int_eq(stk_dtype_from_name("f128"), 0);
    ck_assert_int_eq(stk_dtype_from_name(""), 0);
    ck_assert_int_eq(stk_dtype_from_name("U8"), 0);
}
END_TEST

/* ------------------------------------------------------------- schemas */

START_TEST(schema_build_and_query)
{
    stk_schema s;
    stk_error e;
    tu_caption_schema(&s, 256, 256);
    ck_assert_uint_eq(s.nfields, 3);
    ck_assert_int_eq(stk_schema_validate(&s, &e), STK_OK);

    ck_assert_int_eq(stk_schema_find(&s, "image"), 0);
    ck_assert_int_eq(stk_schema_find(&s, "caption"), 2);
    ck_assert_int_eq(stk_schema_find(&s, "missing"), -1);

    ck_assert_uint_eq(stk_field_stride(&s.fields[0]), 256 * 256 * 3);
    ck_assert_uint_eq(stk_field_stride(&s.fields[1]), 8);
    ck_assert_uint_eq(stk_field_stride(&s.fields[2]), 0);
    ck_assert_uint_eq(s.fields[2].dtype, STK_DT_U8);
    ck_assert_uint_eq(s.fields[2].ndim, 0);

    char buf[64];
    stk_field_describe(&s.fields[0], buf, sizeof buf);
    ck_assert_str_eq(buf, "image u8[256,256,3]");
    stk_field_describe(&s.fields[1], buf, sizeof buf);
    ck_assert_str_eq(buf, "label i64[]");
    stk_field_describe(&s.fields[2], buf, sizeof buf);
    ck_assert_str_eq(buf, "caption bytes");
    /* A small buffer truncates but stays terminated. */
    stk_field_describe(&s.fields[0], buf, 8);
    ck_assert_uint_eq(strlen(buf), 7);
}
END_TEST

START_TEST(schema_equal)
{
    stk_schema a, b;
    tu_std_schema(&a);
    tu_std_schema(&b);
    ck_assert_int_eq(stk_schema_equal(&a, &b), 1);
    b.fields[0].shape[1] = 6;
    ck_assert_int_eq(stk_schema_equal(&a, &b), 0);
    tu_std_schema(&b);
    b.fields[1].dtype = STK_DT_U32;
    ck_assert_int_eq(stk_schema_equal(&a, &b), 0);
    tu_std_schema(&b);
    strcpy(b.fields[2].name, "other");
    ck_assert_int_eq(stk_schema_equal(&a, &b), 0);
    tu_std_schema(&b);
    b.nfields = 2;
    ck_assert_int_eq(stk_schema_equal(&a, &b), 0);
}
END_TEST

/* Each refused field leaves the schema as it was. */
START_TEST(schema_add_refusals)
{
    stk_schema s;
    stk_error e;
    const uint64_t ok[1] = {4}, zero[2] = {4, 0}, huge[2] = {1ull << 21, 1ull << 21};
    const uint64_t seven[7] = {1, 1, 1, 1, 1, 1, 1};
    stk_schema_init(&s);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "x", STK_DT_F32, 1, ok, &e), STK_OK);

    ck_assert_int_eq(stk_schema_add_tensor(&s, "x", STK_DT_F32, 1, ok, &e), STK_E_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "declared twice"));
    ck_assert_int_eq(stk_schema_add_bytes(&s, "x", &e), STK_E_ARG);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "", STK_DT_F32, 1, ok, &e), STK_E_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "is not 1-31 characters"));
    ck_assert_int_eq(stk_schema_add_tensor(&s, "a b", STK_DT_F32, 1, ok, &e), STK_E_ARG);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "a/b", STK_DT_F32, 1, ok, &e), STK_E_ARG);
    ck_assert_int_eq(stk_schema_add_bytes(&s, "0123456789012345678901234567890123", &e), STK_E_ARG);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "y", 0, 1, ok, &e), STK_E_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "unknown dtype"));
    ck_assert_int_eq(stk_schema_add_tensor(&s, "y", 13, 1, ok, &e), STK_E_ARG);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "y", STK_DT_U8, 7, seven, &e), STK_E_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "dimensions"));
    ck_assert_int_eq(stk_schema_add_tensor(&s, "y", STK_DT_U8, 2, zero, &e), STK_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "dimension 1 is 0"));
    ck_assert_int_eq(stk_schema_add_tensor(&s, "y", STK_DT_U16, 2, huge, &e), STK_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "overflows"));
    ck_assert_int_eq(stk_schema_add_tensor(NULL, "y", STK_DT_U8, 0, NULL, &e), STK_E_ARG);
    ck_assert_int_eq(stk_schema_add_bytes(&s, NULL, &e), STK_E_ARG);
    ck_assert_uint_eq(s.nfields, 1);
    ck_assert_int_eq(stk_schema_validate(&s, &e), STK_OK);

    /* Longest legal name: 31 bytes. */
    ck_assert_int_eq(stk_schema_add_bytes(&s, "abcdefghijklmnopqrstuvwxyz01234", &e), STK_OK);
    ck_assert_int_eq(stk_schema_add_bytes(&s, "abcdefghijklmnopqrstuvwxyz012345", &e), STK_E_ARG);
}
END_TEST

START_TEST(schema_field_limit)
{
    stk_schema s;
    stk_error e;
    stk_schema_init(&s);
    for (int i = 0; i < STK_MAX_FIELDS; i++) {
        char name[16];
        snprintf(name, sizeof name, "f%d", i);
        ck_assert_int_eq(stk_schema_add_tensor(&s, name, STK_DT_U8, 0, NULL, &e), STK_OK);
    }
    ck_assert_int_eq(stk_schema_add_bytes(&s, "one_more", &e), STK_E_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "more than 32 fields"));
    ck_assert_uint_eq(s.nfields, STK_MAX_FIELDS);
}
END_TEST

static void expect_invalid(const stk_schema *s, int code, const char *sub)
{
    stk_error e;
    ck_assert_int_eq(stk_schema_validate(s, &e), code);
    tu_assert_error(&e, code, sub);
}

/* validate() is what guards schemas decoded from files and manifests. */
START_TEST(schema_validate_rules)
{
    stk_schema s;
    stk_error e;
    tu_std_schema(&s);
    s.fields[0].codec = 3; /* 1 is zstd, 2 jpeg */
    expect_invalid(&s, STK_E_UNSUPPORTED, "codec 3");

    tu_std_schema(&s);
    s.fields[0].codec = STK_CODEC_JPEG; /* only on array fields */
    expect_invalid(&s, STK_E_FORMAT, "codec jpeg needs an array field");

    tu_std_schema(&s);
    s.fields[1].kind = 0; /* a kind or dtype from a later minor version */
    expect_invalid(&s, STK_E_UNSUPPORTED, "field 'label': kind 0 is not supported by this build");

    tu_std_schema(&s);
    s.fields[1].dtype = 13;
    expect_invalid(&s, STK_E_UNSUPPORTED, "field 'label': dtype 13 is not supported by this build");

    tu_std_schema(&s);
    s.fields[2].dtype = STK_DT_U16;
    expect_invalid(&s, STK_E_FORMAT, "must have dtype u8");

    tu_std_schema(&s);
    s.fields[2].shape[3] = 1;
    expect_invalid(&s, STK_E_FORMAT, "has a shape");

    tu_std_schema(&s);
    s.fields[0].shape[4] = 2;
    expect_invalid(&s, STK_E_FORMAT, "beyond ndim");

    tu_std_schema(&s);
    s.fields[0].ndim = 7;
    expect_invalid(&s, STK_E_FORMAT, "dimensions");

    tu_std_schema(&s);
    strcpy(s.fields[1].name, "image");
    expect_invalid(&s, STK_E_FORMAT, "repeated");

    tu_std_schema(&s);
    memset(s.fields[1].name, 'a', STK_NAME_MAX); /* not terminated */
    expect_invalid(&s, STK_E_FORMAT, "invalid name");

    tu_std_schema(&s);
    s.nfields = STK_MAX_FIELDS + 1;
    ck_assert_int_eq(stk_schema_validate(&s, &e), STK_E_FORMAT);

    /* The empty schema is valid for validate(); writers refuse it. */
    stk_schema_init(&s);
    ck_assert_int_eq(stk_schema_validate(&s, &e), STK_OK);
}
END_TEST

/* ------------------------------------------------------------- status */

START_TEST(status_names)
{
    /* Every code has its own name; unknown codes are named as such. */
    for (int a = STK_OK; a <= STK_E_BUSY; a++) {
        ck_assert_str_ne(stk_status_name(a), "unknown error");
        for (int b = STK_OK; b < a; b++) ck_assert_str_ne(stk_status_name(a), stk_status_name(b));
    }
    ck_assert_str_eq(stk_status_name(STK_E_CHECKSUM), "checksum mismatch");
    ck_assert_str_eq(stk_status_name(99), "unknown error");
    ck_assert_str_eq(stk_status_name(-1), "unknown error");
}
END_TEST

/* A NULL error pointer is allowed everywhere. */
START_TEST(null_error_pointer)
{
    stk_schema s;
    stk_schema_init(&s);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "", STK_DT_U8, 0, NULL, NULL), STK_E_ARG);
    ck_assert_ptr_null(stk_shard_open("/nonexistent/x.stk", NULL));
    ck_assert_ptr_null(stk_manifest_parse("{", 1, NULL, NULL));
    ck_assert_ptr_null(stk_dataset_open(NULL, NULL));
}
END_TEST

/* ------------------------------------------------------------- hashing */

START_TEST(hash_known_value)
{
    /* XXH3-64 of the empty input (as `xxhsum -H3 /dev/null` prints it). */
    ck_assert_uint_eq(stk_hash("", 0), 0x2d06800538d394c2ull);
}
END_TEST

/* stk_hash picks an AVX2 or baseline build of XXH3 at run time: both must
 * give the reference library's values for every length class and alignment. */
START_TEST(hash_matches_reference)
{
    size_t cap = 70000;
    uint8_t *buf = malloc(cap + 64);
    ck_assert_ptr_nonnull(buf);
    tu_fill(buf, cap + 64, 42);
    for (size_t len = 0; len <= 2100; len++)
        ck_assert_uint_eq(stk_hash(buf + (len % 7), len), XXH3_64bits(buf + (len % 7), len));
    const size_t big[] = {4095, 4096, 4097, 65535, 65536, 70000};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        ck_assert_uint_eq(stk_hash(buf + 3, big[i]), XXH3_64bits(buf + 3, big[i]));
    free(buf);
}
END_TEST

/* The streaming hasher (used for file and index hashes) agrees with the
 * one-shot hash however the input is split. */
START_TEST(hash_streaming_agrees)
{
    uint8_t buf[9000];
    tu_fill(buf, sizeof buf, 7);
    const size_t steps[] = {1, 7, 64, 1000, 4096};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        stk__hasher *h = stk__hasher_new();
        ck_assert_ptr_nonnull(h);
        for (size_t off = 0; off < sizeof buf; off += steps[k]) {
            size_t n = sizeof buf - off < steps[k] ? sizeof buf - off : steps[k];
            stk__hasher_update(h, buf + off, n);
        }
        ck_assert_uint_eq(stk__hasher_digest(h), stk_hash(buf, sizeof buf));
        stk__hasher_free(h);
    }
}
END_TEST

/* ------------------------------------------------------- paths and names */

START_TEST(path_rules)
{
    const char *safe[] = {"a.stk", "shard-00000.stk", "sub/dir/x.stk", "a..b", "...", ".hidden", "A_b-9"};
    const char *unsafe[] = {"",    "/abs.stk", "../x.stk", "a/../b", "..",          ".",   "a//b", "a/",
                            "./a", "a/./b",    "a b",      "a\\b",   "caf\xc3\xa9", "x:y", "a/.."};
    for (size_t i = 0; i < sizeof safe / sizeof safe[0]; i++)
        ck_assert_msg(stk__path_is_safe(safe[i]), "'%s' should be safe", safe[i]);
    for (size_t i = 0; i < sizeof unsafe / sizeof unsafe[0]; i++)
        ck_assert_msg(!stk__path_is_safe(unsafe[i]), "'%s' should be refused", unsafe[i]);
    /* Length limit: 4096 bytes. */
    char *longp = malloc(4098);
    ck_assert_ptr_nonnull(longp);
    memset(longp, 'a', 4097);
    longp[4096] = 0;
    ck_assert(stk__path_is_safe(longp));
    longp[4096] = 'a';
    longp[4097] = 0;
    ck_assert(!stk__path_is_safe(longp));
    free(longp);

    ck_assert(stk__name_is_valid("image"));
    ck_assert(!stk__name_is_valid(""));
    ck_assert(!stk__name_is_valid("a/b"));
}
END_TEST

START_TEST(dataset_dir_of_paths)
{
    char dir[TU_PATH];
    stk_error e;
    tu_scratch(dir, sizeof dir, "dataset_dir");
    char *d = stk_dataset_dir(dir, &e); /* an existing directory is itself */
    ck_assert_str_eq(d, dir);
    free(d);
    d = stk_dataset_dir("some/where/manifest.json", &e);
    ck_assert_str_eq(d, "some/where");
    free(d);
    d = stk_dataset_dir("manifest.json", &e);
    ck_assert_str_eq(d, ".");
    free(d);
    d = stk_dataset_dir("/manifest.json", &e);
    ck_assert_str_eq(d, "/");
    free(d);
}
END_TEST

TU_MAIN("schema", {.name = "dtype", .tests = {dtype_table}},
        {.name = "schema",
         .tests = {schema_build_and_query, schema_equal, schema_add_refusals, schema_field_limit,
                   schema_validate_rules}},
        {.name = "errors", .tests = {status_names, null_error_pointer}},
        {.name = "hash", .tests = {hash_known_value, hash_matches_reference, hash_streaming_agrees}},
        {.name = "paths", .tests = {path_rules, dataset_dir_of_paths}})
