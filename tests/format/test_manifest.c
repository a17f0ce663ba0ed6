/* tests/format/test_manifest.c - manifest.json: serialise/parse round trip,
 * deterministic bytes, and strict refusal of every kind of tampering. These
 * work on text alone; test_dataset.c checks manifests against real shards. */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define MNAME "m.json"

/* A manifest of 3 shards (4 + 4 + 2 records), 3 classes and pack parameters.
 * The hashes are made up: nothing here opens the shards. */
static stk_manifest *base_manifest(void)
{
    stk_manifest *m = tu_manifest_new(3);
    tu_std_schema(&m->schema);
    for (size_t i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "shard-%05zu.stk", i);
        m->shards[i].path = strdup(name);
        m->shards[i].records = i < 2 ? 4 : 2;
        m->shards[i].file_size = 20000 + i;
        m->shards[i].file_hash = 0x0123456789abcdefull * (i + 1);
        m->shards[i].index_hash = 0xfedcba9876543210ull ^ i;
    }
    static const char *const cls[] = {"cat", "dog", "bird"};
    m->nclasses = 3;
    m->classes = calloc(3, sizeof *m->classes);
    ck_assert_ptr_nonnull(m->classes);
    for (size_t i = 0; i < 3; i++) m->classes[i] = strdup(cls[i]);
    m->pack_json = strdup("{\"source\":\"unit\",\"n\":3,\"opts\":{\"z\":[1,2]}}");
    return m;
}

static char *base_text(void)
{
    stk_error e;
    stk_manifest *m = base_manifest();
    char *t = stk_manifest_to_json(m, &e);
    ck_assert_msg(t != NULL, "%s", e.msg);
    stk_manifest_free(m);
    return t;
}

static stk_manifest *parse_ok(const char *text)
{
    stk_error e;
    stk_manifest *m = stk_manifest_parse(text, strlen(text), MNAME, &e);
    ck_assert_msg(m != NULL, "%s", e.msg);
    return m;
}

static void expect_refused(const char *text, size_t len, int code, const char *sub)
{
    stk_error e = {0, ""};
    stk_manifest *m = stk_manifest_parse(text, len, MNAME, &e);
    if (m) stk_manifest_free(m);
    ck_assert_msg(m == NULL, "accepted, expected \"%s\":\n%s", sub, text);
    tu_assert_error(&e, code, sub);
    ck_assert_msg(strncmp(e.msg, MNAME ": ", strlen(MNAME) + 2) == 0, "unnamed: %s", e.msg);
}

/* ------------------------------------------------ JSON tree tampering */

static json_t *load(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    ck_assert_msg(j != NULL, "%s", je.text);
    return j;
}

/* The base manifest as a fresh JSON tree, for a test to tamper with. */
static json_t *base_tree(void)
{
    char *t = base_text();
    json_t *j = load(t);
    free(t);
    return j;
}

/* Serialise a tampered tree, parse it, expect a refusal; frees j. */
static void refuse_tree(json_t *j, int code, const char *sub)
{
    char *t = json_dumps(j, JSON_INDENT(2));
    ck_assert_ptr_nonnull(t);
    expect_refused(t, strlen(t), code, sub);
    free(t);
    json_decref(j);
}

static stk_manifest *accept_tree(json_t *j)
{
    char *t = json_dumps(j, JSON_INDENT(2));
    ck_assert_ptr_nonnull(t);
    stk_manifest *m = parse_ok(t);
    free(t);
    json_decref(j);
    return m;
}

static json_t *shard_obj(json_t *root, size_t i)
{
    return json_array_get(json_object_get(root, "shards"), i);
}
static json_t *field_obj(json_t *root, size_t i)
{
    return json_array_get(json_object_get(root, "schema"), i);
}

/* ---------------------------------------------------------- round trip */

START_TEST(round_trip)
{
    stk_error e;
    stk_manifest *m = base_manifest();
    char *t1 = stk_manifest_to_json(m, &e);
    ck_assert_ptr_nonnull(t1);
    /* to_json fills in the derived fields. */
    ck_assert_uint_eq(m->record_count, 10);
    ck_assert_uint_eq(m->fingerprint, stk_manifest_fingerprint(m));
    ck_assert(t1[strlen(t1) - 1] == '\n');

    stk_manifest *p = parse_ok(t1);
    ck_assert_uint_eq(p->version_major, STK_FORMAT_MAJOR);
    ck_assert_uint_eq(p->version_minor, 0); /* no compressed field: still format 1.0 */
    ck_assert_int_eq(stk_schema_equal(&p->schema, &m->schema), 1);
    ck_assert_uint_eq(p->record_count, 10);
    ck_assert_uint_eq(p->fingerprint, m->fingerprint);
    ck_assert_uint_eq(p->nshards, 3);
    for (size_t i = 0; i < 3; i++) {
        ck_assert_str_eq(p->shards[i].path, m->shards[i].path);
        ck_assert_uint_eq(p->shards[i].records, m->shards[i].records);
        ck_assert_uint_eq(p->shards[i].file_size, m->shards[i].file_size);
        ck_assert_uint_eq(p->shards[i].file_hash, m->shards[i].file_hash);
        ck_assert_uint_eq(p->shards[i].index_hash, m->shards[i].index_hash);
    }
    ck_assert_uint_eq(p->nclasses, 3);
    for (size_t i = 0; i < 3; i++) ck_assert_str_eq(p->classes[i], m->classes[i]);
    ck_assert_str_eq(p->pack_json, m->pack_json);

    /* Serialising again gives the same bytes, from either copy. */
    char *t2 = stk_manifest_to_json(p, &e);
    char *t3 = stk_manifest_to_json(m, &e);
    ck_assert_str_eq(t2, t1);
    ck_assert_str_eq(t3, t1);
    free(t1);
    free(t2);
    free(t3);
    stk_manifest_free(p);
    stk_manifest_free(m);
}
END_TEST

/* Hashes print as 16 lowercase hex digits, leading zeros kept; the fields
 * come in a fixed order. */
START_TEST(serialised_form)
{
    stk_error e;
    stk_manifest *m = base_manifest();
    m->shards[0].file_hash = 0xabc;
    char *t = stk_manifest_to_json(m, &e);
    ck_assert_ptr_nonnull(strstr(t, "\"xxh3\": \"0000000000000abc\""));
    ck_assert_ptr_nonnull(strstr(t, "\"format\": \"stoker-dataset\""));
    ck_assert_ptr_nonnull(strstr(t, "\"format_version\": [\n    1,\n    0\n  ]"));
    const char *order[] = {"\"format\"", "\"format_version\"", "\"record_count\"", "\"fingerprint\"",
                           "\"schema\"", "\"classes\"",        "\"pack\"",         "\"shards\""};
    const char *prev = t;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const char *at = strstr(t, order[i]);
        ck_assert_msg(at != NULL && at >= prev, "%s out of order", order[i]);
        prev = at;
    }
    free(t);

    /* Non-ASCII class names are escaped and read back unchanged. */
    free(m->classes[1]);
    m->classes[1] = strdup("caf\xc3\xa9");
    t = stk_manifest_to_json(m, &e);
    ck_assert_ptr_nonnull(strstr(t, "caf\\u00E9"));
    stk_manifest *p = parse_ok(t);
    ck_assert_str_eq(p->classes[1], "caf\xc3\xa9");
    stk_manifest_free(p);
    free(t);
    stk_manifest_free(m);
}
END_TEST

/* No classes and no pack parameters are fine, and absent keys read as empty. */
START_TEST(minimal)
{
    stk_error e;
    stk_manifest *m = base_manifest();
    for (size_t i = 0; i < m->nclasses; i++) free(m->classes[i]);
    free(m->classes);
    m->classes = NULL;
    m->nclasses = 0;
    free(m->pack_json);
    m->pack_json = NULL;
    char *t = stk_manifest_to_json(m, &e);
    ck_assert_ptr_nonnull(t);
    stk_manifest *p = parse_ok(t);
    ck_assert_uint_eq(p->nclasses, 0);
    ck_assert_str_eq(p->pack_json, "{}");
    stk_manifest_free(p);

    json_t *j = load(t);
    json_object_del(j, "classes");
    json_object_del(j, "pack");
    p = accept_tree(j);
    ck_assert_uint_eq(p->nclasses, 0);
    ck_assert_str_eq(p->pack_json, "{}");
    stk_manifest_free(p);
    free(t);
    stk_manifest_free(m);
}
END_TEST

/* The fingerprint covers shard order, index hashes, record counts and class
 * names; not paths (checked against files) nor pack parameters. */
START_TEST(fingerprint_coverage)
{
    stk_manifest *m = base_manifest();
    uint64_t fp = stk_manifest_fingerprint(m);

    stk_shard_entry tmp = m->shards[0];
    m->shards[0] = m->shards[1];
    m->shards[1] = tmp;
    ck_assert_uint_ne(stk_manifest_fingerprint(m), fp);
    m->shards[1] = m->shards[0];
    m->shards[0] = tmp;
    ck_assert_uint_eq(stk_manifest_fingerprint(m), fp);

    m->shards[2].index_hash ^= 1;
    ck_assert_uint_ne(stk_manifest_fingerprint(m), fp);
    m->shards[2].index_hash ^= 1;
    m->shards[2].records++;
    ck_assert_uint_ne(stk_manifest_fingerprint(m), fp);
    m->shards[2].records--;
    m->classes[0][0] = 'b';
    ck_assert_uint_ne(stk_manifest_fingerprint(m), fp);
    m->classes[0][0] = 'c';
    ck_assert_uint_eq(stk_manifest_fingerprint(m), fp);

    m->shards[1].path[0] = 'S';
    m->shards[1].file_hash ^= 1;
    ck_assert_uint_eq(stk_manifest_fingerprint(m), fp);
    stk_manifest_free(m);
}
END_TEST

/* spec/FORMAT.md, "Fingerprint": the value for no shards and no classes. */
START_TEST(fingerprint_of_nothing)
{
    stk_manifest m;
    memset(&m, 0, sizeof m);
    ck_assert_uint_eq(stk_manifest_fingerprint(&m), 0x78d137d4325e3aa0ull);
}
END_TEST

START_TEST(to_json_refusals)
{
    stk_error e;
    stk_manifest *m = base_manifest();
    free(m->shards[1].path);
    m->shards[1].path = strdup("../escape.stk");
    ck_assert_ptr_null(stk_manifest_to_json(m, &e));
    tu_assert_error(&e, STK_E_ARG, "shard 1 has an unsafe path");
    free(m->shards[1].path);
    m->shards[1].path = NULL;
    ck_assert_ptr_null(stk_manifest_to_json(m, &e));
    tu_assert_error(&e, STK_E_ARG, "unsafe path");
    m->shards[1].path = strdup("ok.stk");

    free(m->pack_json);
    m->pack_json = strdup("[1,2]");
    ck_assert_ptr_null(stk_manifest_to_json(m, &e));
    tu_assert_error(&e, STK_E_ARG, "pack parameters are not a JSON object");
    free(m->pack_json);
    m->pack_json = strdup("{\"a\":1,\"a\":2}");
    ck_assert_ptr_null(stk_manifest_to_json(m, &e));
    tu_assert_error(&e, STK_E_ARG, "pack parameters");
    free(m->pack_json);
    m->pack_json = NULL;

    m->shards[0].records = (uint64_t)INT64_MAX + 1;
    ck_assert_ptr_null(stk_manifest_to_json(m, &e));
    tu_assert_error(&e, STK_E_RANGE, "counts overflow");
    m->shards[0].records = 1;

    m->schema.fields[0].codec = 7; /* no such codec */
    ck_assert_ptr_null(stk_manifest_to_json(m, &e));
    ck_assert_int_eq(e.code, STK_E_UNSUPPORTED);
    ck_assert_ptr_null(stk_manifest_to_json(NULL, &e));
    tu_assert_error(&e, STK_E_ARG, "NULL manifest");
    stk_manifest_free(m);
}
END_TEST

/* ---------------------------------------------------------- tampering */

START_TEST(unsafe_paths)
{
    const char *bad[] = {"../x.stk", "/abs.stk",     "a//b",    ".", "..",       "a/",
                         "a/./b",    "sub/../x.stk", "a b.stk", "",  "x\\y.stk", "./x.stk"};
    char *t = base_text();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j = load(t);
        json_object_set_new(shard_obj(j, 1), "path", json_string(bad[i]));
        refuse_tree(j, STK_E_MANIFEST, "shards[1]: path \"");
    }
    /* Paths are outside the fingerprint: a nested safe path is accepted. */
    json_t *j = load(t);
    json_object_set_new(shard_obj(j, 1), "path", json_string("sub/dir/x.stk"));
    stk_manifest *m = accept_tree(j);
    ck_assert_str_eq(m->shards[1].path, "sub/dir/x.stk");
    stk_manifest_free(m);
    free(t);
}
END_TEST

START_TEST(counts_and_fingerprint)
{
    char *t = base_text();
    json_t *j;

    j = load(t); /* a shard's count alone: the total no longer adds up */
    json_object_set_new(shard_obj(j, 0), "records", json_integer(5));
    refuse_tree(j, STK_E_MANIFEST, "record_count is 10 but the shards hold 11");

    j = load(t); /* the total alone */
    json_object_set_new(j, "record_count", json_integer(9));
    refuse_tree(j, STK_E_MANIFEST, "record_count is 9 but the shards hold 10");

    j = load(t); /* both, consistently: the fingerprint still catches it */
    json_object_set_new(shard_obj(j, 0), "records", json_integer(5));
    json_object_set_new(j, "record_count", json_integer(11));
    refuse_tree(j, STK_E_MANIFEST, "does not match the content");

    j = load(t);
    json_object_set_new(j, "fingerprint", json_string("0000000000000000"));
    refuse_tree(j, STK_E_MANIFEST, "fingerprint 0000000000000000 does not match the content");

    j = load(t); /* an index hash changed */
    json_object_set_new(shard_obj(j, 2), "index_xxh3", json_string("0000000000000001"));
    refuse_tree(j, STK_E_MANIFEST, "shards or classes were edited");

    j = load(t); /* two shards reordered */
    json_t *shards = json_object_get(j, "shards");
    json_t *s0 = json_incref(json_array_get(shards, 0));
    json_array_remove(shards, 0);
    json_array_append_new(shards, s0);
    refuse_tree(j, STK_E_MANIFEST, "fingerprint");

    j = load(t); /* a class renamed */
    json_array_set_new(json_object_get(j, "classes"), 0, json_string("cow"));
    refuse_tree(j, STK_E_MANIFEST, "fingerprint");

    j = load(t); /* counts that overflow 64 bits when added */
    json_object_set_new(shard_obj(j, 0), "records", json_integer(INT64_MAX));
    json_object_set_new(shard_obj(j, 1), "records", json_integer(INT64_MAX));
    json_object_set_new(shard_obj(j, 2), "records", json_integer(INT64_MAX));
    refuse_tree(j, STK_E_MANIFEST, "record counts overflow");
    free(t);
}
END_TEST

START_TEST(duplicates)
{
    char *t = base_text();
    json_t *j = load(t);
    json_object_set_new(shard_obj(j, 2), "path", json_string("shard-00000.stk"));
    refuse_tree(j, STK_E_MANIFEST, "shard \"shard-00000.stk\" is listed twice");

    j = load(t);
    json_array_set_new(json_object_get(j, "classes"), 2, json_string("cat"));
    refuse_tree(j, STK_E_MANIFEST, "class \"cat\" is listed twice");

    j = load(t);
    json_object_set_new(field_obj(j, 1), "name", json_string("image"));
    refuse_tree(j, STK_E_MANIFEST, "field name 'image' repeated");

    /* Duplicate keys are a JSON-level refusal, wherever they are. */
    const char *dup_at[] = {"{", "\"shards\": [\n    {", "\"schema\": [\n    {"};
    const char *dup_key[] = {"\"record_count\": 10,", "\"records\": 4,", "\"codec\": \"none\","};
    for (size_t i = 0; i < 3; i++) {
        const char *at = strstr(t, dup_at[i]);
        ck_assert_ptr_nonnull(at);
        size_t cut = (size_t)(at - t) + strlen(dup_at[i]);
        size_t n = strlen(t) + strlen(dup_key[i]) + 1;
        char *d = malloc(n);
        ck_assert_ptr_nonnull(d);
        snprintf(d, n, "%.*s%s%s", (int)cut, t, dup_key[i], t + cut);
        expect_refused(d, strlen(d), STK_E_MANIFEST, "duplicate object key");
        free(d);
    }
    free(t);
}
END_TEST

START_TEST(unknown_keys)
{
    json_t *j = base_tree();
    json_object_set_new(j, "comment", json_string("hi"));
    refuse_tree(j, STK_E_MANIFEST, "manifest: unknown key \"comment\"");

    j = base_tree();
    json_object_set_new(shard_obj(j, 1), "sha256", json_string("x"));
    refuse_tree(j, STK_E_MANIFEST, "shards[1]: unknown key \"sha256\"");

    j = base_tree();
    json_object_set_new(field_obj(j, 2), "max_len", json_integer(3));
    refuse_tree(j, STK_E_MANIFEST, "schema[2]: unknown key \"max_len\"");

    /* A later minor version may add keys: this build reads what it knows. */
    j = base_tree();
    json_array_set_new(json_object_get(j, "format_version"), 1, json_integer(STK_FORMAT_MINOR + 1));
    json_object_set_new(j, "comment", json_string("hi"));
    json_object_set_new(shard_obj(j, 1), "sha256", json_string("x"));
    json_object_set_new(field_obj(j, 0), "layout", json_string("nhwc"));
    stk_manifest *m = accept_tree(j);
    ck_assert_uint_eq(m->version_minor, STK_FORMAT_MINOR + 1);
    ck_assert_uint_eq(m->record_count, 10);
    stk_manifest_free(m);
}
END_TEST

START_TEST(versions)
{
    json_t *j = base_tree();
    json_array_set_new(json_object_get(j, "format_version"), 0, json_integer(2));
    refuse_tree(j, STK_E_VERSION, "unsupported format version 2.0");

    j = base_tree();
    json_array_set_new(json_object_get(j, "format_version"), 0, json_integer(0));
    json_array_set_new(json_object_get(j, "format_version"), 1, json_integer(9));
    refuse_tree(j, STK_E_VERSION, "unsupported format version 0.9");

    /* The version is read before anything else it might govern. */
    j = base_tree();
    json_array_set_new(json_object_get(j, "format_version"), 0, json_integer(7));
    json_object_set_new(j, "schema", json_string("a v7 schema"));
    refuse_tree(j, STK_E_VERSION, "unsupported format version 7.0");

    json_t *bad_versions[] = {
        json_string("1.0"),         json_pack("[i]", 1),       json_pack("[i,i,i]", 1, 0, 0),
        json_pack("[s,i]", "1", 0), json_pack("[i,i]", -1, 0), json_pack("[i,i]", 1, 70000)};
    for (size_t i = 0; i < sizeof bad_versions / sizeof bad_versions[0]; i++) {
        j = base_tree();
        json_object_set_new(j, "format_version", bad_versions[i]);
        refuse_tree(j, STK_E_MANIFEST, "\"format_version\" must be [major, minor]");
    }
    j = base_tree();
    json_object_del(j, "format_version");
    refuse_tree(j, STK_E_MANIFEST, "\"format_version\" must be");

    j = base_tree();
    json_object_set_new(j, "format", json_string("stoker-shard"));
    refuse_tree(j, STK_E_MANIFEST, "\"format\" is \"stoker-shard\", not \"stoker-dataset\"");
    j = base_tree();
    json_object_del(j, "format");
    refuse_tree(j, STK_E_MANIFEST, "manifest: missing \"format\"");
}
END_TEST

/* Every value of the wrong type or range is refused with a message naming
 * the place. */
START_TEST(wrong_types)
{
    char *t = base_text();
    json_t *j;
#define TOP(key, val, sub)          \
  j = load(t);                      \
  json_object_set_new(j, key, val); \
  refuse_tree(j, STK_E_MANIFEST, sub)
#define SHARD(i, key, val, sub)                   \
  j = load(t);                                    \
  json_object_set_new(shard_obj(j, i), key, val); \
  refuse_tree(j, STK_E_MANIFEST, sub)
#define FIELD(i, key, val, sub)                   \
  j = load(t);                                    \
  json_object_set_new(field_obj(j, i), key, val); \
  refuse_tree(j, STK_E_MANIFEST, sub)

    TOP("record_count", json_string("10"), "manifest: \"record_count\" must be a non-negative integer");
    TOP("record_count", json_integer(-1), "\"record_count\" must be a non-negative integer");
    TOP("record_count", json_real(10.0), "\"record_count\" must be a non-negative integer");
    TOP("fingerprint", json_integer(5), "manifest: \"fingerprint\" must be a string");
    TOP("fingerprint", json_string("ABCDEF0123456789"), "\"fingerprint\" must be 16 lowercase hex digits");
    TOP("fingerprint", json_string("abc"), "must be 16 lowercase hex digits");
    TOP("fingerprint", json_string("0123456789abcdef0"), "must be 16 lowercase hex digits");
    TOP("schema", json_object(), "\"schema\" must be an array of 1 to 32 fields");
    TOP("schema", json_array(), "\"schema\" must be an array of 1 to 32 fields");
    TOP("classes", json_string("cat"), "\"classes\" must be an array of strings");
    TOP("classes", json_pack("[s,i]", "cat", 1), "classes[1] must be a non-empty string");
    TOP("classes", json_pack("[s,s]", "cat", ""), "classes[1] must be a non-empty string");
    TOP("pack", json_pack("[i]", 1), "\"pack\" must be an object");
    TOP("pack", json_string("{}"), "\"pack\" must be an object");
    TOP("shards", json_object(), "\"shards\" must be an array");
    TOP("shards", json_null(), "\"shards\" must be an array");

    SHARD(0, "records", json_string("4"), "shards[0]: \"records\" must be a non-negative integer");
    SHARD(1, "records", json_integer(-4), "shards[1]: \"records\" must be a non-negative integer");
    SHARD(2, "bytes", json_true(), "shards[2]: \"bytes\" must be a non-negative integer");
    SHARD(0, "path", json_integer(1), "shards[0]: \"path\" must be a string");
    SHARD(0, "xxh3", json_string("0123"), "shards[0]: \"xxh3\" must be 16 lowercase hex digits");
    SHARD(1, "index_xxh3", json_string("g123456789abcdef"), "shards[1]: \"index_xxh3\" must be 16 lowercase");
    SHARD(1, "index_xxh3", json_integer(12), "shards[1]: \"index_xxh3\" must be a string");

    FIELD(0, "kind", json_integer(1), "schema[0]: \"kind\" must be a string");
    FIELD(0, "shape", json_pack("[i,i]", 3, 0),
          "schema[0]: \"shape\" must be an array of at most 6 positive integers");
    FIELD(0, "shape", json_pack("[i,i]", 3, -5), "\"shape\" must be an array");
    FIELD(0, "shape", json_pack("[i,i,i,i,i,i,i]", 1, 1, 1, 1, 1, 1, 1), "\"shape\" must be an array");
    FIELD(0, "shape", json_pack("[i,s]", 3, "5"), "\"shape\" must be an array");
    FIELD(0, "shape", json_integer(15), "\"shape\" must be an array");
    FIELD(1, "name", json_string("bad name"), "schema[1]: invalid field name \"bad name\"");
    FIELD(1, "name", json_string(""), "schema[1]: invalid field name");
    FIELD(2, "dtype", json_string("u8"), "schema[2]: a bytes field has no dtype or shape");
    FIELD(2, "shape", json_array(), "schema[2]: a bytes field has no dtype or shape");
    FIELD(0, "shape", json_pack("[i,i]", 1 << 21, 1 << 21), "record size overflows");

    j = load(t);
    json_object_del(field_obj(j, 0), "dtype");
    refuse_tree(j, STK_E_MANIFEST, "schema[0]: missing \"dtype\"");
    j = load(t);
    json_object_del(shard_obj(j, 2), "xxh3");
    refuse_tree(j, STK_E_MANIFEST, "shards[2]: missing \"xxh3\"");
    j = load(t);
    json_array_set_new(json_object_get(j, "shards"), 1, json_string("shard-00001.stk"));
    refuse_tree(j, STK_E_MANIFEST, "shards[1] must be an object");
    j = load(t);
    json_array_set_new(json_object_get(j, "schema"), 1, json_integer(3));
    refuse_tree(j, STK_E_MANIFEST, "schema[1] must be an object");

    /* A kind, dtype or codec this build lacks (a later minor version may add
     * them) is "unsupported", not "invalid". */
    j = load(t);
    json_object_set_new(field_obj(j, 0), "kind", json_string("blob"));
    refuse_tree(j, STK_E_UNSUPPORTED, "schema[0]: kind \"blob\" is not supported by this build");
    j = load(t);
    json_object_set_new(field_obj(j, 1), "dtype", json_string("f128"));
    refuse_tree(j, STK_E_UNSUPPORTED, "schema[1]: dtype \"f128\" is not supported by this build");
    j = load(t);
    json_object_set_new(field_obj(j, 0), "codec", json_string("lz4"));
    refuse_tree(j, STK_E_UNSUPPORTED, "schema[0]: codec \"lz4\" is not supported");

    j = json_array();
    refuse_tree(j, STK_E_MANIFEST, "top level must be a JSON object");
#undef TOP
#undef SHARD
#undef FIELD
    free(t);
}
END_TEST

START_TEST(invalid_json)
{
    const char *bad[] = {"",
                         "{",
                         "not json",
                         "{\"format\": }",
                         "[1, 2",
                         "{} x",
                         "\xff\xfe{}",
                         "{\"format\": \"stoker-dataset\",}",
                         "{\"a\": \"\\u0000\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_refused(bad[i], strlen(bad[i]), STK_E_MANIFEST, "invalid JSON at line ");
    /* A NUL byte inside the text. */
    char *t = base_text();
    t[40] = 0;
    expect_refused(t, strlen(t + 41) + 41, STK_E_MANIFEST, "invalid JSON");
    free(t);
    stk_error e;
    ck_assert_ptr_null(stk_manifest_parse(NULL, 0, MNAME, &e));
    tu_assert_error(&e, STK_E_ARG, "NULL text");
}
END_TEST

/* Every proper prefix of the text that stops before the closing brace is
 * refused (each copy exact-size, so ASan sees any over-read). */
START_TEST(truncated_json)
{
    char *t = base_text();
    size_t len = strlen(t);
    size_t close = (size_t)(strrchr(t, '}') - t);
    for (size_t n = 0; n <= close; n++) {
        char *c = (char *)tu_dup(t, n);
        stk_error e = {0, ""};
        stk_manifest *m = stk_manifest_parse(c, n, MNAME, &e);
        ck_assert_msg(m == NULL, "accepted a %zu-byte prefix", n);
        ck_assert_msg(e.code == STK_E_MANIFEST && strstr(e.msg, "invalid JSON"), "prefix %zu: %s", n, e.msg);
        free(c);
    }
    /* Up to the brace, without the final newline: whole again. */
    char *c = (char *)tu_dup(t, close + 1);
    stk_error e;
    stk_manifest *m = stk_manifest_parse(c, close + 1, MNAME, &e);
    ck_assert_msg(m != NULL, "%s", e.msg);
    stk_manifest_free(m);
    free(c);
    ck_assert_uint_eq(close + 2, len);
    free(t);
}
END_TEST

/* ------------------------------------------------------- files */

START_TEST(commit_and_load)
{
    char dir[TU_PATH], path[TU_PATH], tmp[TU_PATH];
    stk_error e;
    tu_scratch(dir, sizeof dir, "commit");
    stk_manifest *m = base_manifest();
    ck_assert_int_eq(stk_manifest_commit(m, dir, &e), STK_OK);
    tu_join(path, sizeof path, dir, STK_MANIFEST_NAME);
    tu_tmp_of(tmp, sizeof tmp, path);
    ck_assert(tu_exists(path));
    ck_assert(!tu_exists(tmp));

    /* The file holds exactly what to_json gives. */
    char *t = stk_manifest_to_json(m, &e);
    size_t n;
    uint8_t *f = tu_read(path, &n);
    ck_assert_uint_eq(n, strlen(t));
    ck_assert(memcmp(f, t, n) == 0);
    free(f);
    free(t);

    /* Loaded by directory and by file name alike. */
    stk_manifest *a = stk_manifest_load(dir, &e);
    ck_assert_msg(a != NULL, "%s", e.msg);
    stk_manifest *b = stk_manifest_load(path, &e);
    ck_assert_msg(b != NULL, "%s", e.msg);
    ck_assert_uint_eq(a->fingerprint, m->fingerprint);
    ck_assert_uint_eq(b->fingerprint, m->fingerprint);
    stk_manifest_free(a);
    stk_manifest_free(b);

    /* A bad manifest file is named in the message. */
    tu_write(path, "{\"format\": 1}", 13);
    ck_assert_ptr_null(stk_manifest_load(dir, &e));
    tu_assert_error(&e, STK_E_MANIFEST, path);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_ptr_null(stk_manifest_load(dir, &e));
    tu_assert_error(&e, STK_E_IO, "commit: not a stoker dataset (no manifest.json)");
    /* A FIFO in its place is refused, not waited on. */
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    ck_assert_ptr_null(stk_manifest_load(dir, &e));
    tu_assert_error(&e, STK_E_IO, "manifest.json: not a regular file");
    stk_manifest_free(m);
}
END_TEST

TU_MAIN("manifest",
        {.name = "serialise",
         .tests = {round_trip, serialised_form, minimal, fingerprint_coverage, fingerprint_of_nothing,
                   to_json_refusals}},
        {.name = "tampering",
         .tests = {unsafe_paths, counts_and_fingerprint, duplicates, unknown_keys, versions, wrong_types,
                   invalid_json, truncated_json}},
        {.name = "files", .tests = {commit_and_load}})
