/* tests/format/test_dataset.c - datasets: the dataset writer (deterministic
 * bytes, shard rotation by records and by size), crash safety of both
 * writers, and libstoker's stk_dataset_open / locate / value, including
 * shards that disagree with their manifest. */
#include "testutil_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const CLASSES[] = {"cat", "dog", "bird"};

static stk_dataset_options opts_rps(uint64_t records_per_shard)
{
    stk_dataset_options o;
    memset(&o, 0, sizeof o);
    o.records_per_shard = records_per_shard;
    o.nclasses = 3;
    o.classes = CLASSES;
    o.pack_json = "{\"tool\":\"unit\"}";
    return o;
}

static stk_dataset *open_ok(const char *path)
{
    stk_error e;
    stk_dataset *ds = stk_dataset_open(path, &e);
    ck_assert_msg(ds != NULL, "%s", e.msg);
    return ds;
}

static void expect_open_fails(const char *dir, int code, const char *sub)
{
    stk_error e = {0, ""};
    stk_dataset *ds = stk_dataset_open(dir, &e);
    if (ds) stk_dataset_close(ds);
    ck_assert_msg(ds == NULL, "opened, expected \"%s\"", sub);
    tu_assert_error(&e, code, sub);
}

static int dataset_value(const void *ds, unsigned f, uint64_t i, const void **p, uint64_t *n, stk_error *e)
{
    return stk_dataset_value(ds, f, i, p, n, e);
}

/* Every record of the dataset equals record i of `seed`. */
static void check_values(const stk_dataset *ds, uint64_t seed)
{
    tu_check_std_values(ds, dataset_value, stk_dataset_records(ds), seed, 0);
}

/* dir holds exactly `names` (NULL-terminated, sorted), dot files aside. */
static void assert_names(const char *dir, const char *const *names)
{
    size_t n, k = 0;
    char **got = tu_list(dir, &n);
    for (size_t i = 0; i < n; i++) {
        if (got[i][0] == '.') continue;
        ck_assert_msg(names[k] != NULL, "%s: unexpected file %s", dir, got[i]);
        ck_assert_msg(!strcmp(got[i], names[k]), "%s: file %s, expected %s", dir, got[i], names[k]);
        k++;
    }
    ck_assert_msg(names[k] == NULL, "%s: %s is missing", dir, names[k]);
    tu_free_names(got, n);
}

/* Both directories hold the same names with the same bytes. */
static void assert_same_tree(const char *a, const char *b)
{
    size_t na, nb;
    char **la = tu_list(a, &na), **lb = tu_list(b, &nb);
    ck_assert_uint_eq(na, nb);
    for (size_t i = 0; i < na; i++) {
        ck_assert_str_eq(la[i], lb[i]);
        char pa[TU_PATH], pb[TU_PATH];
        tu_join(pa, sizeof pa, a, la[i]);
        tu_join(pb, sizeof pb, b, lb[i]);
        size_t sa, sb;
        uint8_t *fa = tu_read(pa, &sa), *fb = tu_read(pb, &sb);
        ck_assert_msg(sa == sb && memcmp(fa, fb, sa) == 0, "%s differs between the two runs", la[i]);
        free(fa);
        free(fb);
    }
    tu_free_names(la, na);
    tu_free_names(lb, nb);
}

static size_t count_suffix(const char *dir, const char *suffix)
{
    size_t n, k = 0, sl = strlen(suffix);
    char **l = tu_list(dir, &n);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(l[i]);
        if (len >= sl && strcmp(l[i] + len - sl, suffix) == 0) k++;
    }
    tu_free_names(l, n);
    return k;
}

/* --------------------------------------------------------- determinism */

START_TEST(deterministic_records_per_shard)
{
    char a[TU_PATH], b[TU_PATH];
    tu_scratch_pair(a, b, sizeof a, "det_rps", "a", "b");
    stk_dataset_options o = opts_rps(5);
    tu_write_std_dataset(a, 3, 23, &o);
    tu_write_std_dataset(b, 3, 23, &o);
    assert_same_tree(a, b);
    ck_assert_uint_eq(count_suffix(a, ".stk"), 5);
    ck_assert_uint_eq(count_suffix(a, ".tmp"), 0);
    char m[TU_PATH];
    tu_join(m, sizeof m, a, STK_MANIFEST_NAME);
    ck_assert(tu_exists(m));
}
END_TEST

/* A schema whose records are large next to the alignment, so that size
 * limits cut shards at interesting places: "pixels" u8[1000] (streamed),
 * "id" u32, "blob" bytes of varying length (the big ones exceed a limit). */
static void big_schema(stk_schema *s)
{
    stk_error e;
    const uint64_t px[1] = {1000};
    stk_schema_init(s);
    ck_assert_int_eq(stk_schema_add_tensor(s, "pixels", STK_DT_U8, 1, px, &e), STK_OK);
    ck_assert_int_eq(stk_schema_add_tensor(s, "id", STK_DT_U32, 0, NULL, &e), STK_OK);
    ck_assert_int_eq(stk_schema_add_bytes(s, "blob", &e), STK_OK);
}

enum { BIG_N = 60, HUGE_REC = 37 };

static uint64_t blob_len(uint64_t i) { return i == HUGE_REC ? 70000 : (i * 2654435761u) % 9000; }

typedef struct {
    uint8_t px[1000];
    uint32_t id;
    uint8_t *blob;
    stk_value v[3];
} big_record;

static void big_make(big_record *r, uint64_t i)
{
    tu_fill(r->px, sizeof r->px, i);
    r->id = (uint32_t)i;
    uint64_t n = blob_len(i);
    r->blob = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(r->blob);
    tu_fill(r->blob, (size_t)n, ~i);
    r->v[0] = (stk_value){r->px, sizeof r->px};
    r->v[1] = (stk_value){&r->id, 4};
    r->v[2] = (stk_value){r->blob, n};
}

static uint64_t page(uint64_t n) { return (n + 4095) / 4096 * 4096; }

/* File size of a shard holding big records [first, first+n): the header
 * page, each region rounded up to 4096 bytes, checksums and footer. */
static uint64_t big_size(uint64_t first, uint64_t n)
{
    uint64_t heap = 0;
    for (uint64_t i = first; i < first + n; i++) heap += blob_len(i);
    return 4096 + page(1000 * n) + page(4 * n) + page(8 * (n + 1)) + page(heap) + 24 * n + 32;
}

static void write_big(const char *dir, uint64_t shard_bytes)
{
    stk_schema s;
    stk_error e;
    stk_dataset_options o;
    memset(&o, 0, sizeof o);
    o.shard_bytes = shard_bytes;
    o.prefix = "big";
    big_schema(&s);
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    for (uint64_t i = 0; i < BIG_N; i++) {
        big_record r;
        big_make(&r, i);
        ck_assert_msg(stk_dataset_writer_append(dw, r.v, &e) == STK_OK, "%s", e.msg);
        free(r.blob);
    }
    ck_assert_msg(stk_dataset_writer_finish(dw, &e) == STK_OK, "%s", e.msg);
}

/* Cut by size: same bytes twice, no shard over the limit unless it holds a
 * single record that alone exceeds it, and every record whole and in order. */
START_TEST(shard_bytes_rotation)
{
    const uint64_t limit = 48 * 1024;
    char a[TU_PATH], b[TU_PATH];
    stk_error e;
    tu_scratch_pair(a, b, sizeof a, "shard_bytes", "a", "b");
    write_big(a, limit);
    write_big(b, limit);
    assert_same_tree(a, b);

    stk_dataset *ds = open_ok(a);
    size_t ns = stk_dataset_nshards(ds);
    ck_assert_uint_gt(ns, 4);
    ck_assert_uint_eq(stk_dataset_records(ds), BIG_N);
    bool huge_alone = false;
    for (size_t k = 0; k < ns; k++) {
        const stk_shard *sh = stk_dataset_shard(ds, k);
        uint64_t size = stk_shard_file_size(sh), n = stk_shard_records(sh);
        ck_assert_uint_gt(n, 0);
        if (size > limit) {
            ck_assert_msg(n == 1, "shard %zu: %llu bytes over the %llu limit with %llu records", k,
                          (unsigned long long)size, (unsigned long long)limit, (unsigned long long)n);
            ck_assert_uint_eq(stk_dataset_shard_first(ds, k), HUGE_REC);
            huge_alone = true;
        }
        /* Cut as late as possible: the next record would not have fit. */
        uint64_t first = stk_dataset_shard_first(ds, k);
        ck_assert_uint_eq(big_size(first, n), size);
        if (k + 1 < ns) ck_assert_msg(big_size(first, n + 1) > limit, "shard %zu was cut early", k);
        ck_assert_uint_eq(stk_shard_verify_records(sh, 0, n, NULL, NULL), 0);
    }
    ck_assert(huge_alone);
    for (uint64_t i = 0; i < BIG_N; i++) {
        big_record r;
        big_make(&r, i);
        for (unsigned f = 0; f < 3; f++) {
            const void *p;
            uint64_t n;
            ck_assert_msg(stk_dataset_value(ds, f, i, &p, &n, &e) == STK_OK, "%s", e.msg);
            ck_assert_uint_eq(n, r.v[f].size);
            ck_assert_msg(memcmp(p, r.v[f].data, (size_t)n) == 0, "record %llu field %u",
                          (unsigned long long)i, f);
        }
        free(r.blob);
    }
    stk_dataset_close(ds);
}
END_TEST

/* A limit met exactly: a tensor-only schema where 4 records fill a shard to
 * the byte and a fifth would need another 4096-byte page. */
START_TEST(shard_bytes_exact_limit)
{
    char dir[TU_PATH];
    stk_error e;
    tu_scratch(dir, sizeof dir, "exact_limit");
    const uint64_t shape[1] = {3000};
    stk_schema s;
    stk_schema_init(&s);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "x", STK_DT_U8, 1, shape, &e), STK_OK);
    /* 4 records: header page + 12000 bytes in 3 pages + 4 x 8 hash + footer. */
    const uint64_t four = 4096 + 12288 + 32 + 32;
    stk_dataset_options o;
    memset(&o, 0, sizeof o);
    o.shard_bytes = four + 40; /* room for a fifth checksum but not its data */
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_ptr_nonnull(dw);
    uint8_t val[3000];
    for (int i = 0; i < 10; i++) {
        tu_fill(val, sizeof val, (uint64_t)i);
        stk_value v = {val, sizeof val};
        ck_assert_int_eq(stk_dataset_writer_append(dw, &v, &e), STK_OK);
    }
    ck_assert_int_eq(stk_dataset_writer_finish(dw, &e), STK_OK);
    stk_dataset *ds = open_ok(dir);
    ck_assert_uint_eq(stk_dataset_nshards(ds), 3);
    ck_assert_uint_eq(stk_shard_records(stk_dataset_shard(ds, 0)), 4);
    ck_assert_uint_eq(stk_shard_file_size(stk_dataset_shard(ds, 0)), four);
    ck_assert_uint_eq(stk_shard_records(stk_dataset_shard(ds, 1)), 4);
    ck_assert_uint_eq(stk_shard_records(stk_dataset_shard(ds, 2)), 2);
    stk_dataset_close(ds);
}
END_TEST

/* ---------------------------------------------------------- crash safety */

START_TEST(writer_abort_leaves_nothing)
{
    char path[TU_PATH], tmp[TU_PATH];
    stk_error e;
    tu_scratch_file(path, sizeof path, "writer_abort", "x.stk");
    tu_tmp_of(tmp, sizeof tmp, path);

    stk_writer *w = tu_std_writer(path, 1, 0, 3);
    ck_assert(tu_exists(tmp));
    stk_writer_abort(w);
    ck_assert(!tu_exists(path));
    ck_assert(!tu_exists(tmp));

    /* Over an existing shard: the old file is untouched until a finish. */
    stk_shard_info old;
    tu_write_std_shard(path, 1, 0, 4, &old);
    w = tu_std_writer(path, 2, 0, 1);
    stk_shard *sh = stk_shard_open(path, &e);
    ck_assert_ptr_nonnull(sh);
    ck_assert_uint_eq(stk_shard_file_hash(sh), old.file_hash);
    stk_shard_close(sh);
    stk_writer_abort(w);
    ck_assert(!tu_exists(tmp));
    sh = stk_shard_open(path, &e);
    ck_assert_ptr_nonnull(sh);
    ck_assert_uint_eq(stk_shard_file_hash(sh), old.file_hash);
    stk_shard_close(sh);

    /* And a finish replaces it whole. */
    stk_shard_info fresh;
    tu_write_std_shard(path, 2, 0, 2, &fresh);
    sh = stk_shard_open(path, &e);
    ck_assert_ptr_nonnull(sh);
    ck_assert_uint_eq(stk_shard_records(sh), 2);
    ck_assert_uint_eq(stk_shard_file_hash(sh), fresh.file_hash);
    tu_check_std_shard(sh, 2, 0);
    stk_shard_close(sh);
}
END_TEST

/* A finish that cannot rename into place (a directory is in the way) fails,
 * removes its temporary file and leaves the path as it was. */
START_TEST(writer_finish_failure_cleans_up)
{
    char path[TU_PATH], tmp[TU_PATH];
    stk_error e;
    tu_scratch_file(path, sizeof path, "finish_fail", "x.stk");
    tu_tmp_of(tmp, sizeof tmp, path);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    stk_writer *w = tu_std_writer(path, 1, 0, 1);
    stk_shard_info info;
    ck_assert_int_eq(stk_writer_finish(w, &info, &e), STK_E_IO);
    ck_assert_ptr_nonnull(strstr(e.msg, "rename to"));
    ck_assert(!tu_exists(tmp));
    struct stat st;
    ck_assert(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
}
END_TEST

START_TEST(dataset_abort_leaves_no_manifest)
{
    char dir[TU_PATH], m[TU_PATH];
    stk_error e;
    tu_scratch(dir, sizeof dir, "ds_abort");
    tu_join(m, sizeof m, dir, STK_MANIFEST_NAME);
    stk_schema s;
    tu_std_schema(&s);
    stk_dataset_options o = opts_rps(3);
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_ptr_nonnull(dw);
    for (uint64_t i = 0; i < 7; i++) {
        tu_record r;
        tu_std_record(&r, 1, i);
        ck_assert_int_eq(stk_dataset_writer_append(dw, r.v, &e), STK_OK);
    }
    ck_assert_uint_eq(count_suffix(dir, ".stk"), 2); /* two committed, one open */
    ck_assert_uint_eq(count_suffix(dir, ".tmp"), 1);
    stk_dataset_writer_abort(dw);
    ck_assert(!tu_exists(m));
    ck_assert_uint_eq(count_suffix(dir, ".tmp"), 0);
    ck_assert_uint_eq(count_suffix(dir, ".stk"), 2);
    expect_open_fails(dir, STK_E_IO, "ds_abort: not a stoker dataset (no manifest.json)");
    stk_dataset_writer_abort(NULL);
}
END_TEST

START_TEST(existing_dataset_refused_unless_force)
{
    char dir[TU_PATH], m[TU_PATH];
    stk_error e;
    tu_scratch(dir, sizeof dir, "exists");
    tu_join(m, sizeof m, dir, STK_MANIFEST_NAME);
    stk_dataset_options o = opts_rps(4);
    tu_write_std_dataset(dir, 1, 10, &o);
    size_t n0;
    uint8_t *m0 = tu_read(m, &n0);

    stk_schema s;
    tu_std_schema(&s);
    ck_assert_ptr_null(stk_dataset_writer_create(dir, &s, &o, &e));
    tu_assert_error(&e, STK_E_EXISTS, "directory already holds a dataset (manifest.json)");
    /* The refused attempt changed nothing. */
    size_t n1;
    uint8_t *m1 = tu_read(m, &n1);
    ck_assert(n0 == n1 && memcmp(m0, m1, n0) == 0);
    free(m1);
    stk_dataset *ds = open_ok(dir);
    check_values(ds, 1);
    stk_dataset_close(ds);

    /* With force, the new dataset is built beside the old one, which stays
     * readable until finish commits the new manifest. */
    o.force = STK_FORCE_REPLACE;
    o.records_per_shard = 3;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    for (uint64_t i = 0; i < 7; i++) {
        tu_record r;
        tu_std_record(&r, 2, i);
        ck_assert_int_eq(stk_dataset_writer_append(dw, r.v, &e), STK_OK);
        ds = open_ok(dir);
        ck_assert_uint_eq(stk_dataset_records(ds), 10);
        check_values(ds, 1);
        stk_dataset_close(ds);
    }
    ck_assert_int_eq(stk_dataset_writer_finish(dw, &e), STK_OK);
    ds = open_ok(dir);
    ck_assert_uint_eq(stk_dataset_records(ds), 7);
    ck_assert_uint_eq(stk_dataset_nshards(ds), 3);
    check_values(ds, 2);
    stk_dataset_close(ds);
    /* only the new dataset's files are left: its shards under new names */
    assert_names(dir, (const char *[]){"manifest.json", "shard.g1-00000.stk", "shard.g1-00001.stk",
                                       "shard.g1-00002.stk", NULL});

    /* STK_FORCE_IN_PLACE: the old behaviour, the manifest goes first. */
    o.force = STK_FORCE_IN_PLACE;
    dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    ck_assert(!tu_exists(m));
    for (uint64_t i = 0; i < 4; i++) {
        tu_record r;
        tu_std_record(&r, 3, i);
        ck_assert_int_eq(stk_dataset_writer_append(dw, r.v, &e), STK_OK);
        ck_assert(!tu_exists(m));
    }
    ck_assert_int_eq(stk_dataset_writer_finish(dw, &e), STK_OK);
    ds = open_ok(dir);
    ck_assert_uint_eq(stk_dataset_records(ds), 4);
    check_values(ds, 3);
    stk_dataset_close(ds);
    free(m0);
}
END_TEST

START_TEST(dataset_writer_refusals)
{
    char dir[TU_PATH], file[TU_PATH], nested[TU_PATH];
    stk_error e;
    tu_scratch(dir, sizeof dir, "dw_refusals");
    stk_schema s, empty;
    tu_std_schema(&s);
    stk_schema_init(&empty);
    stk_dataset_options o;
    memset(&o, 0, sizeof o);

    o.prefix = "bad/prefix";
    ck_assert_ptr_null(stk_dataset_writer_create(dir, &s, &o, &e));
    tu_assert_error(&e, STK_E_ARG, "shard prefix 'bad/prefix'");
    o.prefix = "";
    ck_assert_ptr_null(stk_dataset_writer_create(dir, &s, &o, &e));
    tu_assert_error(&e, STK_E_ARG, "shard prefix");
    o.prefix = NULL;

    const char *const bad_classes[] = {"a", ""};
    o.nclasses = 2;
    o.classes = bad_classes;
    ck_assert_ptr_null(stk_dataset_writer_create(dir, &s, &o, &e));
    tu_assert_error(&e, STK_E_ARG, "class 1: name is empty or not valid UTF-8");
    const char *const latin1[] = {"caf\xe9"};
    o.nclasses = 1;
    o.classes = latin1;
    ck_assert_ptr_null(stk_dataset_writer_create(dir, &s, &o, &e));
    tu_assert_error(&e, STK_E_ARG, "class 0: name is empty or not valid UTF-8");
    const char *const twice[] = {"cat", "dog", "cat"};
    o.nclasses = 3;
    o.classes = twice;
    ck_assert_ptr_null(stk_dataset_writer_create(dir, &s, &o, &e));
    tu_assert_error(&e, STK_E_ARG, "class \"cat\" is listed twice");
    o.nclasses = 0;
    const char *const bad_pack[] = {"[1]", "{\"a\": 1, \"a\": 2}", "{", "\"x\""};
    for (size_t i = 0; i < 4; i++) {
        o.pack_json = bad_pack[i];
        ck_assert_ptr_null(stk_dataset_writer_create(dir, &s, &o, &e));
        tu_assert_error(&e, STK_E_ARG, "pack parameters are not a JSON object");
    }
    o.pack_json = NULL;
    /* Refused before anything was written. */
    size_t nfiles;
    char **names = tu_list(dir, &nfiles);
    tu_free_names(names, nfiles);
    ck_assert_uint_eq(nfiles, 0);

    ck_assert_ptr_null(stk_dataset_writer_create(NULL, &s, &o, &e));
    tu_assert_error(&e, STK_E_ARG, "NULL argument");
    tu_join(file, sizeof file, dir, "plain-file");
    tu_write(file, "x", 1);
    ck_assert_ptr_null(stk_dataset_writer_create(file, &s, &o, &e));
    ck_assert_int_eq(e.code, STK_E_IO);
    ck_assert_ptr_nonnull(strstr(e.msg, "plain-file"));
    ck_assert_int_eq(stk_dataset_writer_append(NULL, NULL, &e), STK_E_ARG);
    ck_assert_int_eq(stk_dataset_writer_finish(NULL, &e), STK_E_ARG);

    /* Missing parent directories are created; an empty dataset is valid. */
    tu_join(nested, sizeof nested, dir, "a/b/c");
    stk_dataset_writer *dw = stk_dataset_writer_create(nested, &s, NULL, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    ck_assert_int_eq(stk_dataset_writer_finish(dw, &e), STK_OK);
    stk_dataset *ds = open_ok(nested);
    ck_assert_uint_eq(stk_dataset_records(ds), 0);
    ck_assert_uint_eq(stk_dataset_nshards(ds), 0);
    ck_assert_uint_eq(stk_dataset_shard_first(ds, 0), 0);
    size_t sh;
    uint64_t local;
    ck_assert_int_eq(stk_dataset_locate(ds, 0, &sh, &local, &e), STK_E_RANGE);
    ck_assert_ptr_null(stk_dataset_shard(ds, 0));
    stk_dataset_close(ds);
}
END_TEST

/* ---------------------------------------------------------------- reader */

START_TEST(open_locate_value)
{
    char dir[TU_PATH], m[TU_PATH];
    stk_error e;
    tu_scratch(dir, sizeof dir, "reader");
    stk_dataset_options o = opts_rps(5);
    o.prefix = "part";
    tu_write_std_dataset(dir, 4, 23, &o);
    tu_join(m, sizeof m, dir, STK_MANIFEST_NAME);

    /* Through the directory and through the manifest file alike. */
    const char *paths[2] = {dir, m};
    for (int k = 0; k < 2; k++) {
        stk_dataset *ds = open_ok(paths[k]);
        ck_assert_uint_eq(stk_dataset_records(ds), 23);
        ck_assert_uint_eq(stk_dataset_nshards(ds), 5);
        stk_schema s;
        tu_std_schema(&s);
        ck_assert_int_eq(stk_schema_equal(stk_dataset_schema(ds), &s), 1);
        const stk_manifest *man = stk_dataset_manifest(ds);
        ck_assert_uint_eq(man->nclasses, 3);
        ck_assert_str_eq(man->classes[2], "bird");
        ck_assert_str_eq(man->pack_json, "{\"tool\":\"unit\"}");
        ck_assert_str_eq(man->shards[4].path, "part-00004.stk");
        for (size_t i = 0; i <= 5; i++) ck_assert_uint_eq(stk_dataset_shard_first(ds, i), i < 5 ? 5 * i : 23);
        ck_assert_uint_eq(stk_dataset_shard_first(ds, 99), 23);
        ck_assert_ptr_null(stk_dataset_shard(ds, 5));

        /* First and last record of every shard. */
        for (size_t i = 0; i < 5; i++) {
            uint64_t n = stk_shard_records(stk_dataset_shard(ds, i));
            ck_assert_uint_eq(n, i < 4 ? 5 : 3);
            ck_assert_uint_eq(man->shards[i].records, n);
            size_t shard;
            uint64_t local;
            ck_assert_int_eq(stk_dataset_locate(ds, 5 * i, &shard, &local, &e), STK_OK);
            ck_assert_uint_eq(shard, i);
            ck_assert_uint_eq(local, 0);
            ck_assert_int_eq(stk_dataset_locate(ds, 5 * i + n - 1, &shard, &local, &e), STK_OK);
            ck_assert_uint_eq(shard, i);
            ck_assert_uint_eq(local, n - 1);
        }
        size_t shard = 77;
        uint64_t local = 77;
        ck_assert_int_eq(stk_dataset_locate(ds, 23, &shard, &local, &e), STK_E_RANGE);
        tu_assert_error(&e, STK_E_RANGE, "record 23 out of range (23 records)");
        ck_assert_int_eq(stk_dataset_locate(ds, UINT64_MAX, &shard, &local, &e), STK_E_RANGE);
        ck_assert_uint_eq(shard, 77);

        check_values(ds, 4);
        const void *p;
        uint64_t n;
        ck_assert_int_eq(stk_dataset_value(ds, 0, 23, &p, &n, &e), STK_E_RANGE);
        ck_assert_int_eq(stk_dataset_value(ds, 3, 0, &p, &n, &e), STK_E_RANGE);
        tu_assert_error(&e, STK_E_RANGE, "field 3 out of range");
        stk_dataset_close(ds);
    }
    stk_dataset_close(NULL);
}
END_TEST

/* Shards of 0 records in the middle (hand-made: the writer never makes
 * them) do not confuse locate. */
START_TEST(locate_across_empty_shards)
{
    char dir[TU_PATH];
    stk_error e;
    tu_scratch(dir, sizeof dir, "empty_shards");
    const uint64_t counts[5] = {0, 3, 0, 0, 2};
    stk_manifest *m = tu_manifest_new(5);
    tu_std_schema(&m->schema);
    uint64_t first = 0;
    for (size_t i = 0; i < 5; i++) {
        char name[32], path[TU_PATH];
        stk_shard_info info;
        snprintf(name, sizeof name, "s%zu.stk", i);
        tu_join(path, sizeof path, dir, name);
        tu_write_std_shard(path, 6, first, counts[i], &info);
        first += counts[i];
        m->shards[i] =
            (stk_shard_entry){strdup(name), info.records, info.file_size, info.file_hash, info.index_hash};
    }
    ck_assert_int_eq(stk_manifest_commit(m, dir, &e), STK_OK);
    stk_manifest_free(m);

    stk_dataset *ds = open_ok(dir);
    ck_assert_uint_eq(stk_dataset_records(ds), 5);
    const size_t want_shard[5] = {1, 1, 1, 4, 4};
    for (uint64_t i = 0; i < 5; i++) {
        size_t shard;
        uint64_t local;
        ck_assert_int_eq(stk_dataset_locate(ds, i, &shard, &local, &e), STK_OK);
        ck_assert_uint_eq(shard, want_shard[i]);
        ck_assert_uint_eq(local, i < 3 ? i : i - 3);
    }
    check_values(ds, 6);
    stk_dataset_close(ds);
}
END_TEST

/* ---------------------------------------------- shards vs their manifest */

/* A fresh 4-shard dataset (5 + 5 + 5 + 2 records) in scratch dir `name`. */
static void make_dataset(char *dir, size_t cap, const char *name, uint64_t seed)
{
    tu_scratch(dir, cap, name);
    stk_dataset_options o = opts_rps(5);
    tu_write_std_dataset(dir, seed, 17, &o);
}

static stk_manifest *load_manifest(const char *dir)
{
    stk_error e;
    stk_manifest *m = stk_manifest_load(dir, &e);
    ck_assert_msg(m != NULL, "%s", e.msg);
    return m;
}

/* Rewrite the manifest (with a correct total and fingerprint) after edits. */
static void commit_manifest(stk_manifest *m, const char *dir)
{
    stk_error e;
    ck_assert_msg(stk_manifest_commit(m, dir, &e) == STK_OK, "%s", e.msg);
    stk_manifest_free(m);
}

START_TEST(missing_shard)
{
    char dir[TU_PATH], p[TU_PATH];
    make_dataset(dir, sizeof dir, "missing_shard", 1);
    tu_join(p, sizeof p, dir, "shard-00002.stk");
    ck_assert_int_eq(unlink(p), 0);
    expect_open_fails(dir, STK_E_IO, "shard-00002.stk: cannot open");
}
END_TEST

START_TEST(swapped_paths)
{
    char dir[TU_PATH];
    make_dataset(dir, sizeof dir, "swapped", 1);
    stk_manifest *m = load_manifest(dir);
    /* Same size and count: only the index hash tells them apart. */
    ck_assert_uint_eq(m->shards[0].records, m->shards[1].records);
    ck_assert_uint_eq(m->shards[0].file_size, m->shards[1].file_size);
    char *t = m->shards[0].path;
    m->shards[0].path = m->shards[1].path;
    m->shards[1].path = t;
    commit_manifest(m, dir);
    expect_open_fails(dir, STK_E_MANIFEST, "shard-00001.stk: index hash");
}
END_TEST

START_TEST(wrong_counts_and_sizes)
{
    char dir[TU_PATH];
    make_dataset(dir, sizeof dir, "wrong_counts", 1);
    stk_manifest *m = load_manifest(dir);
    m->shards[1].records = 6;
    commit_manifest(m, dir);
    expect_open_fails(dir, STK_E_MANIFEST, "shard-00001.stk: holds 5 records, the manifest says 6");

    make_dataset(dir, sizeof dir, "wrong_sizes", 1);
    m = load_manifest(dir);
    m->shards[3].file_size += 4096;
    uint64_t size = m->shards[3].file_size;
    commit_manifest(m, dir);
    char want[128];
    snprintf(want, sizeof want, "shard-00003.stk: is %llu bytes, the manifest says %llu",
             (unsigned long long)(size - 4096), (unsigned long long)size);
    expect_open_fails(dir, STK_E_MANIFEST, want);

    /* Hand edits of the text are caught by the parser before any shard. */
    make_dataset(dir, sizeof dir, "wrong_total", 1);
    char mp[TU_PATH];
    tu_join(mp, sizeof mp, dir, STK_MANIFEST_NAME);
    size_t n;
    char *text = (char *)tu_read(mp, &n);
    char *at = strstr(text, "\"record_count\": 17");
    ck_assert_ptr_nonnull(at);
    at[strlen("\"record_count\": 1")] = '8';
    tu_write(mp, text, n);
    expect_open_fails(dir, STK_E_MANIFEST, "record_count is 18 but the shards hold 17");
    free(text);
}
END_TEST

/* A shard replaced by the same-numbered shard of another dataset. */
START_TEST(replaced_shard)
{
    char dir[TU_PATH], other[TU_PATH], from[TU_PATH], to[TU_PATH];
    make_dataset(dir, sizeof dir, "replaced", 1);
    make_dataset(other, sizeof other, "replaced_other", 2); /* different data */
    tu_join(from, sizeof from, other, "shard-00001.stk");
    tu_join(to, sizeof to, dir, "shard-00001.stk");
    tu_copy(from, to);
    expect_open_fails(dir, STK_E_MANIFEST, "shard-00001.stk: index hash");

    /* From a dataset cut differently: the record count differs first. */
    tu_scratch(other, sizeof other, "replaced_rps4");
    stk_dataset_options o = opts_rps(4);
    tu_write_std_dataset(other, 1, 17, &o);
    make_dataset(dir, sizeof dir, "replaced2", 1);
    tu_join(from, sizeof from, other, "shard-00000.stk");
    tu_join(to, sizeof to, dir, "shard-00000.stk");
    tu_copy(from, to);
    expect_open_fails(dir, STK_E_MANIFEST, "shard-00000.stk: holds 4 records, the manifest says 5");
}
END_TEST

/* The fingerprint does not cover the schema: a manifest whose schema was
 * edited is caught by comparing it with the shards'. */
START_TEST(schema_disagrees)
{
    char dir[TU_PATH];
    make_dataset(dir, sizeof dir, "schema_disagrees", 1);
    stk_manifest *m = load_manifest(dir);
    strcpy(m->schema.fields[2].name, "caption");
    commit_manifest(m, dir);
    expect_open_fails(dir, STK_E_MANIFEST, "shard-00000.stk: schema differs from the manifest's");
}
END_TEST

/* Damaged shard files: the shard's own error, naming the file. */
START_TEST(damaged_shard)
{
    char dir[TU_PATH], p[TU_PATH];
    make_dataset(dir, sizeof dir, "damaged", 1);
    tu_join(p, sizeof p, dir, "shard-00002.stk");
    size_t n;
    uint8_t *b = tu_read(p, &n);
    b[H_RECORDS] ^= 1;
    tu_write(p, b, n);
    expect_open_fails(dir, STK_E_CHECKSUM, "shard-00002.stk: header checksum mismatch");
    b[H_RECORDS] ^= 1;
    tu_write(p, b, n - 100);
    expect_open_fails(dir, STK_E_TRUNCATED, "shard-00002.stk: truncated");
    free(b);
}
END_TEST

/* ------------------------------------------------------ worked example */

/* spec/FORMAT.md section 10, byte for byte: the header dump, the checksum
 * table, the hashes and the manifest text printed there. */
static const char EXAMPLE_HEADER_HEX[] = "53544b534841524401000000c801000000000000030000000200000000000000"
                                         "5050000000000000005000000000000030000000000000000010000001000000"
                                         "696d616765000000000000000000000000000000000000000000000000000000"
                                         "0101000300000000020000000000000002000000000000000300000000000000"
                                         "0000000000000000000000000000000000000000000000000c00000000000000"
                                         "0010000000000000180000000000000000000000000000000000000000000000"
                                         "6c6162656c000000000000000000000000000000000000000000000000000000"
                                         "0108000000000000000000000000000000000000000000000000000000000000"
                                         "0000000000000000000000000000000000000000000000000800000000000000"
                                         "0020000000000000100000000000000000000000000000000000000000000000"
                                         "63617074696f6e00000000000000000000000000000000000000000000000000"
                                         "0201000000000000000000000000000000000000000000000000000000000000"
                                         "0000000000000000000000000000000000000000000000000800000000000000"
                                         "0030000000000000180000000000000000400000000000000200000000000000"
                                         "5c8e88c563c0b7df";

static const char EXAMPLE_MANIFEST[] = "{\n"
                                       "  \"format\": \"stoker-dataset\",\n"
                                       "  \"format_version\": [\n"
                                       "    1,\n"
                                       "    0\n"
                                       "  ],\n"
                                       "  \"record_count\": 2,\n"
                                       "  \"fingerprint\": \"7b214cf204ab3822\",\n"
                                       "  \"schema\": [\n"
                                       "    {\n"
                                       "      \"name\": \"image\",\n"
                                       "      \"kind\": \"tensor\",\n"
                                       "      \"dtype\": \"u8\",\n"
                                       "      \"shape\": [\n"
                                       "        2,\n"
                                       "        2,\n"
                                       "        3\n"
                                       "      ],\n"
                                       "      \"codec\": \"none\"\n"
                                       "    },\n"
                                       "    {\n"
                                       "      \"name\": \"label\",\n"
                                       "      \"kind\": \"tensor\",\n"
                                       "      \"dtype\": \"i64\",\n"
                                       "      \"shape\": [],\n"
                                       "      \"codec\": \"none\"\n"
                                       "    },\n"
                                       "    {\n"
                                       "      \"name\": \"caption\",\n"
                                       "      \"kind\": \"bytes\",\n"
                                       "      \"codec\": \"none\"\n"
                                       "    }\n"
                                       "  ],\n"
                                       "  \"classes\": [\n"
                                       "    \"cat\",\n"
                                       "    \"dog\"\n"
                                       "  ],\n"
                                       "  \"pack\": {\n"
                                       "    \"tool\": \"example\"\n"
                                       "  },\n"
                                       "  \"shards\": [\n"
                                       "    {\n"
                                       "      \"path\": \"shard-00000.stk\",\n"
                                       "      \"records\": 2,\n"
                                       "      \"bytes\": 20560,\n"
                                       "      \"xxh3\": \"6907795eac862503\",\n"
                                       "      \"index_xxh3\": \"674f82362d91715d\"\n"
                                       "    }\n"
                                       "  ]\n"
                                       "}\n";

static void write_example(const char *dir)
{
    stk_error e;
    stk_schema s;
    tu_caption_schema(&s, 2, 2);
    const char *classes[] = {"cat", "dog"};
    stk_dataset_options o = {
        .force = 1, .nclasses = 2, .classes = classes, .pack_json = "{\"tool\": \"example\"}"};
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    uint8_t img[2][12];
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 12; k++) img[r][k] = (uint8_t)(0x10 * (r + 1) + k);
    int64_t label[2] = {1, 0};
    const char *cap[2] = {"hi", ""};
    for (int r = 0; r < 2; r++) {
        stk_value v[3] = {{img[r], 12}, {&label[r], 8}, {cap[r], strlen(cap[r])}};
        ck_assert_int_eq(stk_dataset_writer_append(dw, v, &e), STK_OK);
    }
    ck_assert_msg(stk_dataset_writer_finish(dw, &e) == STK_OK, "%s", e.msg);
}

START_TEST(worked_example)
{
    char dir[TU_PATH], p[TU_PATH];
    stk_error e;
    tu_scratch(dir, sizeof dir, "example");
    write_example(dir);

    tu_join(p, sizeof p, dir, STK_MANIFEST_NAME);
    size_t n;
    char *text = (char *)tu_read(p, &n);
    ck_assert_uint_eq(n, 775);
    ck_assert_uint_eq(n, strlen(EXAMPLE_MANIFEST));
    ck_assert_msg(memcmp(text, EXAMPLE_MANIFEST, n) == 0, "manifest differs from the spec:\n%.*s", (int)n,
                  text);
    free(text);

    tu_join(p, sizeof p, dir, "shard-00000.stk");
    uint8_t *b = tu_read(p, &n);
    ck_assert_uint_eq(n, 20560);
    for (size_t i = 0; i < 456; i++) {
        unsigned want;
        ck_assert(sscanf(EXAMPLE_HEADER_HEX + 2 * i, "%2x", &want) == 1);
        ck_assert_msg(b[i] == want, "header byte 0x%zx is %02x, the spec says %02x", i, b[i], want);
    }
    for (size_t i = 456; i < 0x1000; i++) ck_assert_uint_eq(b[i], 0);
    ck_assert(memcmp(b + 0x4000, "hi", 2) == 0);
    ck_assert(memcmp(b + n - 8, "STKFOOT1", 8) == 0);
    static const uint64_t table[6] = {0x0960488fb0b4ea67ull, 0x2fbc593564db792eull, 0x2a2300bbd7ea6e9aull,
                                      0xf96e4a2a9b877438ull, 0xc77b3abb6f87acd9ull, 0x2d06800538d394c2ull};
    for (int k = 0; k < 6; k++) ck_assert_uint_eq(rd64(b + 0x5000 + 8 * k), table[k]);
    ck_assert_uint_eq(stk_hash(b, n), 0x6907795eac862503ull);
    free(b);

    stk_dataset *ds = open_ok(dir);
    const stk_shard *sh = stk_dataset_shard(ds, 0);
    ck_assert_uint_eq(stk_shard_index_hash(sh), 0x674f82362d91715dull);
    ck_assert_uint_eq(stk_shard_file_hash(sh), 0x6907795eac862503ull);
    ck_assert_uint_eq(stk_dataset_manifest(ds)->fingerprint, 0x7b214cf204ab3822ull);
    ck_assert_int_eq(stk_shard_verify_index(sh, 0x674f82362d91715dull, &e), STK_OK);
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, 2, NULL, NULL), 0);
    ck_assert_uint_eq(stk_shard_verify_padding(sh, NULL, NULL), 0);
    stk_dataset_close(ds);

    /* "The same program writes byte-identical files every time it runs";
     * force replaces the previous run, beside it: the same shard bytes under
     * the next generation's names, then the first names again. */
    char again[TU_PATH], q[TU_PATH];
    tu_scratch(again, sizeof again, "example_again");
    write_example(again);
    write_example(again);
    assert_names(again, (const char *[]){"manifest.json", "shard.g1-00000.stk", NULL});
    tu_join(p, sizeof p, dir, "shard-00000.stk");
    tu_join(q, sizeof q, again, "shard.g1-00000.stk");
    size_t na, nb;
    uint8_t *a = tu_read(p, &na), *b2 = tu_read(q, &nb);
    ck_assert(na == nb && memcmp(a, b2, na) == 0);
    free(a);
    free(b2);
    stk_dataset *d2 = open_ok(again);
    ck_assert_uint_eq(stk_dataset_manifest(d2)->fingerprint, 0x7b214cf204ab3822ull);
    stk_dataset_close(d2);
    write_example(again);
    assert_same_tree(dir, again);
}
END_TEST

/* ------------------------------------------------------- resume, merge */

/* Write records [0, n) of seed into dir with a writer that is dropped
 * (as a killed process leaves it) after `stop` records. */
static void write_interrupted(const char *dir, uint64_t n_stop, const stk_dataset_options *o)
{
    stk_schema s;
    tu_std_schema(&s);
    stk_error e;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    for (uint64_t i = 0; i < n_stop; i++) {
        tu_record r;
        tu_std_record(&r, 4, i);
        ck_assert_msg(stk_dataset_writer_append(dw, r.v, &e) == STK_OK, "%s", e.msg);
    }
    ck_assert_uint_eq(stk_dataset_writer_shards(dw), (n_stop - 1) / o->records_per_shard);
    stk_dataset_writer_abort(dw);
}

/* Resume after 3 committed shards: the same bytes as one uninterrupted run. */
START_TEST(resume_gives_the_uninterrupted_bytes)
{
    char a[TU_PATH], b[TU_PATH];
    tu_scratch_pair(a, b, sizeof a, "resume", "a", "b");
    stk_dataset_options o = opts_rps(5);
    tu_write_std_dataset(a, 4, 23, &o);
    write_interrupted(b, 17, &o); /* shards 0-2 committed, the 4th open */
    stk_schema s;
    tu_std_schema(&s);
    stk_error e;
    stk_dataset_writer *dw = stk_dataset_writer_create(b, &s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    uint64_t kept = 0;
    ck_assert_msg(stk_dataset_writer_resume(dw, 3, &kept, &e) == STK_OK, "%s", e.msg);
    ck_assert_uint_eq(kept, 15);
    ck_assert_uint_eq(stk_dataset_writer_shards(dw), 3);
    ck_assert_int_eq(stk_dataset_writer_resume(dw, 3, NULL, &e), STK_E_ARG); /* only once, before appends */
    for (uint64_t i = kept; i < 23; i++) {
        tu_record r;
        tu_std_record(&r, 4, i);
        ck_assert_msg(stk_dataset_writer_append(dw, r.v, &e) == STK_OK, "%s", e.msg);
    }
    ck_assert_msg(stk_dataset_writer_finish(dw, &e) == STK_OK, "%s", e.msg);
    assert_same_tree(a, b);
}
END_TEST

/* A kept shard that does not verify, is missing, or has another schema:
 * refused, naming the shard; nothing adopted. */
START_TEST(resume_refuses_a_bad_shard)
{
    char dir[TU_PATH], shard[TU_PATH];
    tu_scratch(dir, sizeof dir, "resume_bad");
    stk_dataset_options o = opts_rps(5);
    write_interrupted(dir, 12, &o);
    tu_join(shard, sizeof shard, dir, "shard-00001.stk");
    size_t n;
    uint8_t *bytes = tu_read(shard, &n);
    bytes[4096 + 3] ^= 0x40; /* a byte of the first region */
    FILE *f = fopen(shard, "wb");
    ck_assert(f && fwrite(bytes, 1, n, f) == n && fclose(f) == 0);
    free(bytes);
    stk_schema s;
    tu_std_schema(&s);
    stk_error e;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    ck_assert_int_ne(stk_dataset_writer_resume(dw, 2, NULL, &e), STK_OK);
    ck_assert_msg(strstr(e.msg, "shard-00001.stk") != NULL, "%s", e.msg);
    ck_assert_uint_eq(stk_dataset_writer_shards(dw), 0);
    ck_assert_int_ne(stk_dataset_writer_resume(dw, 9, NULL, &e), STK_OK); /* shard 1 still bad */
    stk_dataset_writer_abort(dw);
    stk_schema other;
    stk_schema_init(&other);
    ck_assert_int_eq(stk_schema_add_bytes(&other, "text", &e), STK_OK);
    dw = stk_dataset_writer_create(dir, &other, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    ck_assert_int_eq(stk_dataset_writer_resume(dw, 1, NULL, &e), STK_E_FORMAT);
    tu_assert_error(&e, STK_E_FORMAT, "another schema");
    stk_dataset_writer_abort(dw);
}
END_TEST

/* Three datasets in subdirectories become one: the records in part order,
 * the shards where they are; parts that differ are refused. */
START_TEST(merge_parts)
{
    char root[TU_PATH], p[3][TU_PATH];
    tu_scratch(root, sizeof root, "merge");
    const char *names[3] = {"part-1", "part-2", "part-3"};
    stk_dataset_options o = opts_rps(4);
    for (int k = 0; k < 3; k++) {
        tu_join(p[k], sizeof p[k], root, names[k]);
        tu_write_std_dataset(p[k], 4, 10, &o);
    }
    stk_error e;
    ck_assert_msg(stk_dataset_merge(root, names, 3, &e) == STK_OK, "%s", e.msg);
    stk_dataset *ds = open_ok(root);
    ck_assert_uint_eq(stk_dataset_records(ds), 30);
    stk_dataset_close(ds);
    stk_manifest *m = load_manifest(root);
    ck_assert_uint_eq(m->nshards, 9);
    ck_assert_str_eq(m->shards[3].path, "part-2/shard-00000.stk");
    ck_assert_str_eq(m->pack_json, "{\"tool\":\"unit\"}");
    stk_manifest_free(m);
    ck_assert_int_eq(stk_dataset_merge(root, names, 0, &e), STK_E_ARG);
    const char *bad[2] = {"part-1", "../x"};
    ck_assert_int_eq(stk_dataset_merge(root, bad, 2, &e), STK_E_ARG);
    const char *missing[2] = {"part-1", "part-9"};
    ck_assert_int_ne(stk_dataset_merge(root, missing, 2, &e), STK_OK);
    ck_assert_msg(strstr(e.msg, "part-9") != NULL, "%s", e.msg);
    char q[TU_PATH];
    tu_join(q, sizeof q, root, "other");
    stk_dataset_options o2 = opts_rps(4);
    o2.pack_json = "{\"tool\":\"else\"}";
    tu_write_std_dataset(q, 4, 10, &o2);
    const char *mixed[2] = {"part-1", "other"};
    ck_assert_int_eq(stk_dataset_merge(root, mixed, 2, &e), STK_E_MANIFEST);
    tu_assert_error(&e, STK_E_MANIFEST, "not parts of one dataset");
}
END_TEST

/* ------------------------------------------------- replacing on a full disk */

static char mounted[TU_PATH];

static void unmount_small(void)
{
    if (mounted[0] && umount2(mounted, MNT_DETACH) == 0) mounted[0] = 0;
}

/* A tmpfs of `kib` KiB mounted on scratch directory `name`/fs (root only),
 * unmounted at the end of the test or when its process exits. false, with
 * the reason printed, where it cannot be had. */
static bool mount_small(char *dir, size_t cap, const char *name, unsigned kib)
{
    char base[TU_PATH];
    const char *root = getenv("STOKER_TEST_TMP");
    if (root && *root) { /* one a failed run left (its process gone before the unmount) */
        snprintf(base, sizeof base, "%s/%s/fs", root, name);
        umount2(base, MNT_DETACH);
    }
    tu_scratch(base, sizeof base, name);
    tu_join(dir, cap, base, "fs");
    mkdir(dir, 0755);
    if (geteuid() != 0) {
        printf("%s: skipped: not root (a small tmpfs to fill needs mount)\n", name);
        return false;
    }
    char opt[32];
    snprintf(opt, sizeof opt, "size=%uk", kib);
    if (mount("tmpfs", dir, "tmpfs", 0, opt) != 0) {
        printf("%s: skipped: cannot mount a tmpfs on %s: %s\n", name, dir, strerror(errno));
        return false;
    }
    snprintf(mounted, sizeof mounted, "%s", dir);
    atexit(unmount_small);
    return true;
}

/* Fill the file system of dir to the last page but one (DIR/filler): room
 * for the directory lock's line, none for a shard or a manifest. */
static void fill_up(const char *dir)
{
    char p[TU_PATH];
    tu_join(p, sizeof p, dir, "filler");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    static char buf[4096];
    for (size_t chunk = sizeof buf; chunk;) {
        if (write(fd, buf, chunk) < 0) chunk /= 2; /* ENOSPC: what is left is smaller */
    }
    off_t end = lseek(fd, 0, SEEK_END);
    ck_assert_int_eq(ftruncate(fd, end > 4096 ? end - 4096 : 0), 0);
    close(fd);
}

/* The dataset in dir opens, verifies and holds records [0, n) of seed. */
static void assert_intact(const char *dir, uint64_t seed, uint64_t n)
{
    stk_error e;
    stk_dataset *ds = open_ok(dir);
    ck_assert_uint_eq(stk_dataset_records(ds), n);
    check_values(ds, seed);
    for (size_t k = 0; k < stk_dataset_nshards(ds); k++) {
        const stk_shard *sh = stk_dataset_shard(ds, k);
        ck_assert_msg(stk_shard_verify_index(sh, 0, &e) == STK_OK, "%s", e.msg);
        ck_assert_uint_eq(stk_shard_verify_records(sh, 0, stk_shard_records(sh), NULL, NULL), 0);
    }
    stk_dataset_close(ds);
}

/* Write records [0, n) of seed into dir (force as given); the first error
 * (STK_OK when all went in). */
static int try_write(const char *dir, uint64_t seed, uint64_t n, int force, stk_error *e)
{
    stk_schema s;
    tu_std_schema(&s);
    stk_dataset_options o = opts_rps(1);
    o.force = force;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, e);
    if (!dw) return e->code;
    for (uint64_t i = 0; i < n; i++) {
        tu_record r;
        tu_std_record(&r, seed, i);
        int rc = stk_dataset_writer_append(dw, r.v, e);
        if (rc) {
            stk_dataset_writer_abort(dw);
            return rc;
        }
    }
    return stk_dataset_writer_finish(dw, e);
}

/* Issue 39: force over a valid dataset on a disk that then fills kept
 * neither. Now the old dataset stays readable and the error says so. */
START_TEST(force_replace_on_a_full_disk)
{
    char fs[TU_PATH], dir[TU_PATH], p[TU_PATH], q[TU_PATH];
    if (!mount_small(fs, sizeof fs, "full_disk", 256)) return;
    tu_join(dir, sizeof dir, fs, "ds");
    stk_error e;
    stk_dataset_options o = opts_rps(4);
    tu_write_std_dataset(dir, 1, 10, &o);
    const char *old[] = {"manifest.json", "shard-00000.stk", "shard-00001.stk", "shard-00002.stk", NULL};
    assert_names(dir, old);

    /* 64 shards of one record do not fit beside it (nor in its place) */
    int rc = try_write(dir, 2, 64, STK_FORCE_REPLACE, &e);
    ck_assert_int_eq(rc, STK_E_IO);
    ck_assert_msg(strstr(e.msg, "No space left on device"), "%s", e.msg);
    char want[TU_PATH + 64];
    snprintf(want, sizeof want, "; the old dataset in %s is intact", dir);
    ck_assert_msg(strstr(e.msg, want), "the error must say the old dataset is intact: %s", e.msg);
    assert_intact(dir, 1, 10);
    assert_names(dir, old); /* the new shards went with the failure */

    /* leftovers of a replace that was killed: ignored by readers, removed by the next replace */
    tu_join(p, sizeof p, dir, "shard-00000.stk");
    tu_join(q, sizeof q, dir, "shard.g1-00000.stk");
    tu_copy(p, q);
    tu_join(q, sizeof q, dir, "shard.g1-00007.stk.tmp");
    tu_write(q, "junk", 4);
    assert_intact(dir, 1, 10);

    /* a replace that fits: only the new dataset's files are left */
    ck_assert_msg(try_write(dir, 3, 5, STK_FORCE_REPLACE, &e) == STK_OK, "%s", e.msg);
    assert_intact(dir, 3, 5);
    assert_names(dir,
                 (const char *[]){"manifest.json", "shard.g1-00000.stk", "shard.g1-00001.stk",
                                  "shard.g1-00002.stk", "shard.g1-00003.stk", "shard.g1-00004.stk", NULL});
    /* and the next one takes the first names again */
    ck_assert_msg(try_write(dir, 4, 2, STK_FORCE_REPLACE, &e) == STK_OK, "%s", e.msg);
    assert_intact(dir, 4, 2);
    assert_names(dir, (const char *[]){"manifest.json", "shard-00000.stk", "shard-00001.stk", NULL});

    /* the disk full at the manifest: the old dataset stays, the new shards go */
    fill_up(fs);
    rc = try_write(dir, 5, 1, STK_FORCE_REPLACE, &e);
    ck_assert_int_ne(rc, STK_OK);
    ck_assert_msg(strstr(e.msg, want), "%s", e.msg);
    assert_intact(dir, 4, 2);
    assert_names(dir, (const char *[]){"manifest.json", "shard-00000.stk", "shard-00001.stk", NULL});

    /* STK_FORCE_IN_PLACE, asked for by name, still loses the old one */
    tu_join(p, sizeof p, fs, "filler");
    unlink(p);
    rc = try_write(dir, 2, 64, STK_FORCE_IN_PLACE, &e);
    ck_assert_int_eq(rc, STK_E_IO);
    ck_assert(strstr(e.msg, "is intact") == NULL);
    tu_join(p, sizeof p, dir, STK_MANIFEST_NAME);
    ck_assert(!tu_exists(p));
    unmount_small();
}
END_TEST

/* stk_dataset_merge over a dataset: replaced by the manifest's rename, the
 * old one intact when that fails, its shards gone when it succeeds. */
START_TEST(merge_replaces_on_a_full_disk)
{
    char fs[TU_PATH], root[TU_PATH], p[TU_PATH];
    if (!mount_small(fs, sizeof fs, "merge_full", 512)) return;
    tu_join(root, sizeof root, fs, "ds");
    stk_dataset_options o = opts_rps(4);
    tu_write_std_dataset(root, 1, 6, &o);
    const char *names[2] = {"part-1", "part-2"};
    o = opts_rps(3);
    for (int k = 0; k < 2; k++) {
        tu_join(p, sizeof p, root, names[k]);
        tu_write_std_dataset(p, 4, 3, &o);
    }
    fill_up(fs);
    stk_error e;
    ck_assert_int_ne(stk_dataset_merge(root, names, 2, &e), STK_OK);
    char want[TU_PATH + 64];
    snprintf(want, sizeof want, "; the old dataset in %s is intact", root);
    ck_assert_msg(strstr(e.msg, want), "%s", e.msg);
    assert_intact(root, 1, 6);
    assert_names(root, (const char *[]){"manifest.json", "part-1", "part-2", "shard-00000.stk",
                                        "shard-00001.stk", NULL});
    tu_join(p, sizeof p, fs, "filler");
    unlink(p);
    ck_assert_msg(stk_dataset_merge(root, names, 2, &e) == STK_OK, "%s", e.msg);
    stk_dataset *ds = open_ok(root);
    ck_assert_uint_eq(stk_dataset_records(ds), 6);
    stk_dataset_close(ds);
    assert_names(root, (const char *[]){"manifest.json", "part-1", "part-2", NULL});
    unmount_small();
}
END_TEST

TU_MAIN("dataset",
        {.name = "writer",
         .tests = {deterministic_records_per_shard, shard_bytes_rotation, shard_bytes_exact_limit,
                   dataset_writer_refusals}},
        {.name = "crash_safety",
         .tests = {writer_abort_leaves_nothing, writer_finish_failure_cleans_up,
                   dataset_abort_leaves_no_manifest, existing_dataset_refused_unless_force,
                   resume_gives_the_uninterrupted_bytes, resume_refuses_a_bad_shard, merge_parts,
                   force_replace_on_a_full_disk, merge_replaces_on_a_full_disk}},
        {.name = "reader", .tests = {open_locate_value, locate_across_empty_shards}},
        {.name = "golden", .tests = {worked_example}},
        {.name = "tampering",
         .tests = {missing_shard, swapped_paths, wrong_counts_and_sizes, replaced_shard, schema_disagrees,
                   damaged_shard}})
