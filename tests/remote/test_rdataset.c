/* tests/remote/test_rdataset.c - datasets in object storage through the
 * format library (format/rshard.c, stk_dataset_open of s3://), against the
 * S3 test server (tests/support/s3env): a dataset written here with JPEG,
 * zstd-compressed, bytes and tensor fields is uploaded with the client and
 * read back as s3://: every value of every record equals the local copy's,
 * under a tiny cache limit too; a value damaged in the object is named by
 * shard, field and record, one damaged in the cache is fetched again; a
 * missing dataset, a wrong secret and an object replaced under an open
 * dataset are each named. */
#define _GNU_SOURCE
#include "testutil.h"

#include "remote.h"
#include "rshard.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>

enum { F_IMAGE, F_LABEL, F_CAPTION, F_BLOB, F_EMB, NF };
enum { RECORDS = 180, PER_SHARD = 60 };

static const char *bucket(void)
{
    const char *b = getenv("STOKER_TEST_S3_BUCKET");
    return b ? b : "stoker-test";
}

/* image u8[*,*,3] JPEG, label i64[1], caption bytes, blob bytes zstd, emb
 * u8[64] zstd. */
static void schema(stk_schema *s)
{
    stk_error e;
    stk_schema_init(s);
    const uint64_t any[3] = {0, 0, 3}, one[1] = {1}, emb[1] = {64};
    ck_assert_int_eq(stk_schema_add_array(s, "image", STK_DT_U8, 3, any, &e), 0);
    ck_assert_int_eq(stk_schema_set_codec(s, F_IMAGE, STK_CODEC_JPEG, &e), 0);
    ck_assert_int_eq(stk_schema_add_tensor(s, "label", STK_DT_I64, 1, one, &e), 0);
    ck_assert_int_eq(stk_schema_add_bytes(s, "caption", &e), 0);
    ck_assert_int_eq(stk_schema_add_bytes(s, "blob", &e), 0);
    ck_assert_int_eq(stk_schema_set_codec(s, F_BLOB, STK_CODEC_ZSTD, &e), 0);
    ck_assert_int_eq(stk_schema_add_tensor(s, "emb", STK_DT_U8, 1, emb, &e), 0);
    ck_assert_int_eq(stk_schema_set_codec(s, F_EMB, STK_CODEC_ZSTD, &e), 0);
}

/* Record i's JPEG: (16 + i % 5 * 8) x (24 + i % 3 * 8), malloc'd by TurboJPEG. */
static unsigned char *jpeg_of(uint64_t i, unsigned long *len, uint64_t *h, uint64_t *w)
{
    *h = 16 + i % 5 * 8, *w = 24 + i % 3 * 8;
    uint8_t px[48 * 40 * 3];
    for (uint64_t y = 0; y < *h; y++)
        for (uint64_t x = 0; x < *w; x++)
            for (unsigned c = 0; c < 3; c++)
                px[(y * *w + x) * 3 + c] = (uint8_t)(x * 7 + y * 13 + c * 50 + i);
    tjhandle tj = tjInitCompress();
    ck_assert_ptr_nonnull(tj);
    unsigned char *out = NULL;
    ck_assert_int_eq(tjCompress2(tj, px, (int)*w, 0, (int)*h, TJPF_RGB, &out, len, TJSAMP_420, 90, 0), 0);
    tjDestroy(tj);
    return out;
}

/* The dataset, written once per process into scratch dir `name`. */
static void write_dataset(char *dir, size_t cap, const char *name)
{
    tu_scratch(dir, cap, name);
    stk_schema s;
    schema(&s);
    stk_dataset_options o;
    stk_dataset_options_init(&o);
    o.records_per_shard = PER_SHARD;
    o.zstd_block_bytes = 4096; /* several blocks a shard */
    stk_error e;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    for (uint64_t i = 0; i < RECORDS; i++) {
        unsigned long jl;
        uint64_t dims[2];
        unsigned char *j = jpeg_of(i, &jl, &dims[0], &dims[1]);
        int64_t label = (int64_t)(i * 7 % 11);
        char caption[64], blob[300];
        int cl = i % 4 == 1
                     ? 0
                     : snprintf(caption, sizeof caption, "record %llu says hello", (unsigned long long)i);
        size_t bl = (size_t)(i * 37 % 300);
        tu_fill(blob, bl, i);
        uint8_t emb[64];
        for (int k = 0; k < 64; k++) emb[k] = (uint8_t)(i + k / 8);
        stk_value v[NF] = {{j, jl}, {&label, 8}, {caption, (size_t)cl}, {blob, bl}, {emb, 64}};
        ck_assert_msg(stk_dataset_writer_append_dims(dw, v, dims, &e) == 0, "%s", e.msg);
        tjFree(j);
    }
    ck_assert_msg(stk_dataset_writer_finish(dw, &e) == 0, "%s", e.msg);
}

static stk__remote *client(void)
{
    char url[256];
    snprintf(url, sizeof url, "s3://%s/", bucket());
    stk__raddr a;
    stk_error e;
    ck_assert_msg(stk__raddr_parse(url, &a, &e) == STK_OK, "%s", e.msg);
    stk__remote *r = NULL;
    ck_assert_msg(stk__remote_open(&r, &a, NULL, &e) == STK_OK, "%s", e.msg);
    stk__raddr_free(&a);
    return r;
}

/* Every file of dir to s3://BUCKET/prefix/NAME. */
static void upload(const char *dir, const char *prefix)
{
    stk__remote *r = client();
    size_t n;
    char **names = tu_list(dir, &n);
    for (size_t i = 0; i < n; i++) {
        char path[TU_PATH], key[TU_PATH];
        tu_join(path, sizeof path, dir, names[i]);
        snprintf(key, sizeof key, "%s/%s", prefix, names[i]);
        stk_error e;
        ck_assert_msg(stk__remote_put_file(r, key, path, 0, NULL, &e) == STK_OK, "%s", e.msg);
    }
    tu_free_names(names, n);
    stk__remote_close(r);
}

static void url_of(char *out, size_t cap, const char *prefix)
{
    snprintf(out, cap, "s3://%s/%s", bucket(), prefix);
}

/* Options with a fresh cache directory `name` and this limit (0: default). */
static stk_remote_options fresh_cache(const char *name, uint64_t limit, char *dir, size_t cap)
{
    tu_scratch(dir, cap, name);
    stk_remote_options o;
    stk_remote_options_init(&o);
    o.cache_dir = dir;
    o.cache_limit = limit;
    return o;
}

static stk_dataset *open_remote(const char *url, const stk_remote_options *o)
{
    stk_error e;
    stk_dataset *ds = stk_dataset_open_remote(url, o, &e);
    ck_assert_msg(ds != NULL, "%s: %s", url, e.msg);
    return ds;
}

/* Field f of global record i, compressed or not, through the shard calls. */
static int value_of(const stk_dataset *ds, unsigned f, uint64_t i, stk_block_cursor *c, const void **p,
                    uint64_t *n, stk_error *e)
{
    size_t s;
    uint64_t local;
    int rc = stk_dataset_locate(ds, i, &s, &local, e);
    return rc ? rc : stk_shard_value_at(stk_dataset_shard(ds, s), f, local, c, p, n, e);
}

/* Every value of every record of a equals b's. */
static void assert_same_values(const stk_dataset *a, const stk_dataset *b)
{
    ck_assert_uint_eq(stk_dataset_records(a), stk_dataset_records(b));
    stk_block_cursor ca = {0}, cb = {0};
    for (uint64_t i = 0; i < stk_dataset_records(a); i++)
        for (unsigned f = 0; f < NF; f++) {
            const void *pa, *pb;
            uint64_t na, nb;
            stk_error e;
            ck_assert_msg(value_of(a, f, i, &ca, &pa, &na, &e) == 0, "%s", e.msg);
            ck_assert_msg(value_of(b, f, i, &cb, &pb, &nb, &e) == 0, "%s", e.msg);
            ck_assert_msg(na == nb && !memcmp(pa, pb, na), "record %llu field %u differs",
                          (unsigned long long)i, f);
            uint64_t da[STK_MAX_DIMS] = {0}, db[STK_MAX_DIMS] = {0};
            ck_assert_int_eq(
                stk_shard_value_shape(stk_dataset_shard(a, i / PER_SHARD), f, i % PER_SHARD, da, &e), 0);
            ck_assert_int_eq(
                stk_shard_value_shape(stk_dataset_shard(b, i / PER_SHARD), f, i % PER_SHARD, db, &e), 0);
            ck_assert(!memcmp(da, db, sizeof da));
        }
    stk_block_cursor_free(&ca);
    stk_block_cursor_free(&cb);
}

static uint64_t verify_all(const stk_dataset *ds)
{
    uint64_t problems = 0;
    for (size_t s = 0; s < stk_dataset_nshards(ds); s++) {
        const stk_shard *sh = stk_dataset_shard(ds, s);
        problems += stk_shard_verify_records(sh, 0, stk_shard_records(sh), NULL, NULL);
        problems += stk_shard_verify_padding(sh, NULL, NULL);
    }
    return problems;
}

static char local_dir[TU_PATH];

/* The dataset written and uploaded to PREFIX once per process. */
static void setup(void)
{
    if (local_dir[0]) return;
    write_dataset(local_dir, sizeof local_dir, "rds-local");
    upload(local_dir, "rds");
}

START_TEST(values_equal_local)
{
    setup();
    stk_error e;
    stk_dataset *loc = stk_dataset_open(local_dir, &e);
    ck_assert_msg(loc != NULL, "%s", e.msg);
    char url[256], cdir[TU_PATH];
    url_of(url, sizeof url, "rds");
    stk_remote_options o = fresh_cache("rds-cache-a", 0, cdir, sizeof cdir);
    stk_dataset *rem = open_remote(url, &o);
    ck_assert_uint_eq(stk_dataset_nshards(rem), RECORDS / PER_SHARD);
    /* the label column came with the open's first GET (the whole small
     * object): in the cache, checked, before any value is read */
    for (size_t s = 0; s < stk_dataset_nshards(rem); s++)
        ck_assert(stk__rshard_present(stk_dataset_shard(rem, s), F_LABEL, 0, PER_SHARD, 0));
    ck_assert_uint_eq(stk_dataset_manifest(rem)->fingerprint, stk_dataset_manifest(loc)->fingerprint);
    assert_same_values(loc, rem);
    ck_assert_uint_eq(verify_all(rem), 0);
    for (size_t s = 0; s < stk_dataset_nshards(rem); s++)
        ck_assert_uint_eq(stk_shard_file_hash(stk_dataset_shard(rem, s)),
                          stk_dataset_manifest(rem)->shards[s].file_hash);
    char want[300];
    snprintf(want, sizeof want, "%s/%s", url, stk_dataset_manifest(rem)->shards[1].path);
    ck_assert_str_eq(stk_shard_path(stk_dataset_shard(rem, 1)), want);
    stk_dataset_close(rem);
    /* again from the cache the first open filled, by the manifest's address */
    char murl[300];
    snprintf(murl, sizeof murl, "%s/manifest.json", url);
    char *d = stk_dataset_dir(murl, &e);
    ck_assert_str_eq(d, url);
    free(d);
    rem = open_remote(murl, &o);
    assert_same_values(loc, rem);
    stk_dataset_close(rem);
    stk_dataset_close(loc);
}
END_TEST

START_TEST(tiny_cache_reads_every_value)
{
    setup();
    stk_error e;
    stk_dataset *loc = stk_dataset_open(local_dir, &e);
    ck_assert_msg(loc != NULL, "%s", e.msg);
    char url[256], cdir[TU_PATH];
    url_of(url, sizeof url, "rds");
    stk_remote_options o = fresh_cache("rds-cache-tiny", 1, cdir, sizeof cdir); /* one byte */
    stk_dataset *rem = open_remote(url, &o);
    assert_same_values(loc, rem);
    ck_assert_uint_eq(verify_all(rem), 0);
    /* a value's pointer stays right while less than the window is fetched after it */
    const void *p0, *p;
    uint64_t n0, n;
    ck_assert_int_eq(stk_dataset_value(rem, F_CAPTION, 5, &p0, &n0, &e), 0);
    for (uint64_t i = 6; i < 40; i++) ck_assert_int_eq(stk_dataset_value(rem, F_CAPTION, i, &p, &n, &e), 0);
    ck_assert_int_eq(stk_dataset_value(loc, F_CAPTION, 5, &p, &n, &e), 0);
    ck_assert(n == n0 && !memcmp(p, p0, n));
    stk_dataset_close(rem);
    /* the environment's limit, with a suffix; a bad one is named */
    setenv("STOKER_CACHE_LIMIT", "2K", 1);
    o.cache_limit = 0;
    rem = open_remote(url, &o);
    assert_same_values(loc, rem);
    stk_dataset_close(rem);
    setenv("STOKER_CACHE_LIMIT", "12Q", 1);
    ck_assert_ptr_null(stk_dataset_open_remote(url, &o, &e));
    tu_assert_error(&e, STK_E_ARG, "STOKER_CACHE_LIMIT=12Q");
    unsetenv("STOKER_CACHE_LIMIT");
    stk_dataset_close(loc);
}
END_TEST

/* The cache file of shard s of ds (DIR/v1/ID.data, remote/cache.h). */
static void cache_file(char *out, size_t cap, const char *cdir, const stk_dataset *ds, size_t s)
{
    const stk_shard_entry *se = &stk_dataset_manifest(ds)->shards[s];
    snprintf(out, cap, "%s/v1/%016llx-%llu.data", cdir, (unsigned long long)se->index_hash,
             (unsigned long long)se->file_size);
}

START_TEST(damaged_cache_refetched)
{
    setup();
    stk_error e;
    stk_dataset *loc = stk_dataset_open(local_dir, &e);
    ck_assert_msg(loc != NULL, "%s", e.msg);
    char url[256], cdir[TU_PATH], path[TU_PATH + 64];
    url_of(url, sizeof url, "rds");
    stk_remote_options o = fresh_cache("rds-cache-dmg", 0, cdir, sizeof cdir);
    stk_dataset *rem = open_remote(url, &o);
    assert_same_values(loc, rem); /* all cached now */
    const void *p;
    uint64_t n, local;
    const stk_shard *sh = tu_locate_value(loc, 70, F_CAPTION, &local, &p, &n);
    uint64_t off = (uint64_t)((const uint8_t *)p - (const uint8_t *)stk_shard_field_base(sh, F_LABEL)) +
                   stk_shard_field_offset(sh, F_LABEL);
    stk_dataset_close(rem);
    cache_file(path, sizeof path, cdir, loc, 1);
    int fd = open(path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, "XX", 2, (off_t)off), 2);
    close(fd);
    rem = open_remote(url, &o);
    const void *q;
    uint64_t m;
    ck_assert_msg(stk_dataset_value(rem, F_CAPTION, 70, &q, &m, &e) == 0, "%s", e.msg);
    ck_assert(m == n && !memcmp(p, q, n));
    ck_assert_uint_eq(verify_all(rem), 0);
    stk_dataset_close(rem);
    stk_dataset_close(loc);
}
END_TEST

START_TEST(damaged_object_named)
{
    setup();
    char dir[TU_PATH], path[TU_PATH], url[256], cdir[TU_PATH];
    tu_scratch(dir, sizeof dir, "rds-bad");
    size_t nn;
    char **names = tu_list(local_dir, &nn);
    for (size_t i = 0; i < nn; i++) {
        char a[TU_PATH], b[TU_PATH];
        tu_join(a, sizeof a, local_dir, names[i]);
        tu_join(b, sizeof b, dir, names[i]);
        tu_copy(a, b);
    }
    tu_free_names(names, nn);
    stk_error e;
    stk_dataset *loc = stk_dataset_open(local_dir, &e);
    ck_assert_msg(loc != NULL, "%s", e.msg);
    const void *p;
    uint64_t n, local;
    const stk_shard *sh = tu_locate_value(loc, 70, F_CAPTION, &local, &p, &n);
    uint64_t off = (uint64_t)((const uint8_t *)p - (const uint8_t *)stk_shard_field_base(sh, F_LABEL)) +
                   stk_shard_field_offset(sh, F_LABEL);
    tu_join(path, sizeof path, dir, stk_dataset_manifest(loc)->shards[1].path);
    stk_dataset_close(loc);
    int fd = open(path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, "XX", 2, (off_t)off + 1), 2);
    close(fd);
    upload(dir, "rds-bad");
    url_of(url, sizeof url, "rds-bad");
    stk_remote_options o = fresh_cache("rds-cache-bad", 0, cdir, sizeof cdir);
    stk_dataset *rem = open_remote(url, &o);
    ck_assert_int_eq(stk_dataset_value(rem, F_CAPTION, 70, &p, &n, &e), STK_E_CHECKSUM);
    char want[300];
    snprintf(want, sizeof want, "%s/%s: record %llu, field 'caption'", url,
             stk_dataset_manifest(rem)->shards[1].path, (unsigned long long)local);
    tu_assert_error(&e, STK_E_CHECKSUM, want);
    ck_assert_int_eq(stk_dataset_value(rem, F_CAPTION, 69, &p, &n, &e), 0); /* its neighbours read */
    ck_assert_int_eq(stk_dataset_value(rem, F_CAPTION, 71, &p, &n, &e), 0);
    ck_assert_uint_eq(verify_all(rem), 1);
    stk_dataset_close(rem);
}
END_TEST

START_TEST(missing_dataset_named)
{
    char url[256], cdir[TU_PATH];
    url_of(url, sizeof url, "no/such/dataset");
    stk_remote_options o = fresh_cache("rds-cache-none", 0, cdir, sizeof cdir);
    stk_error e;
    ck_assert_ptr_null(stk_dataset_open_remote(url, &o, &e));
    char want[300];
    snprintf(want, sizeof want, "%s: not a stoker dataset (no manifest.json)", url);
    tu_assert_error(&e, STK_E_IO, want);
    ck_assert_ptr_null(stk_dataset_open(url, &e)); /* the plain call takes addresses too */
    tu_assert_error(&e, STK_E_IO, "not a stoker dataset");
}
END_TEST

START_TEST(wrong_secret_named)
{
    setup();
    char url[256], cdir[TU_PATH];
    url_of(url, sizeof url, "rds");
    stk_remote_options o = fresh_cache("rds-cache-403", 0, cdir, sizeof cdir);
    char *good = strdup(getenv("AWS_SECRET_ACCESS_KEY"));
    const char *bad = "Wr0ngSecretValue4Tests";
    setenv("AWS_SECRET_ACCESS_KEY", bad, 1);
    stk_error e;
    stk_dataset *ds = stk_dataset_open_remote(url, &o, &e);
    setenv("AWS_SECRET_ACCESS_KEY", good, 1);
    free(good);
    ck_assert_ptr_null(ds);
    tu_assert_error(&e, STK_E_IO, "403");
    ck_assert_ptr_nonnull(strstr(e.msg, url));
    ck_assert_ptr_null(strstr(e.msg, bad));
}
END_TEST

START_TEST(replaced_object_named)
{
    setup();
    char dir[TU_PATH], url[256], cdir[TU_PATH];
    tu_scratch(dir, sizeof dir, "rds-rep");
    size_t nn;
    char **names = tu_list(local_dir, &nn);
    for (size_t i = 0; i < nn; i++) {
        char a[TU_PATH], b[TU_PATH];
        tu_join(a, sizeof a, local_dir, names[i]);
        tu_join(b, sizeof b, dir, names[i]);
        tu_copy(a, b);
    }
    tu_free_names(names, nn);
    upload(dir, "rds-rep");
    url_of(url, sizeof url, "rds-rep");
    stk_remote_options o = fresh_cache("rds-cache-rep", 0, cdir, sizeof cdir);
    stk_dataset *rem = open_remote(url, &o);
    /* shard 0 replaced by shard 1's bytes (same size) while the dataset is open */
    const stk_manifest *m = stk_dataset_manifest(rem);
    char a[TU_PATH], key[TU_PATH];
    tu_join(a, sizeof a, dir, m->shards[1].path);
    snprintf(key, sizeof key, "rds-rep/%s", m->shards[0].path);
    stk__remote *r = client();
    stk_error e;
    ck_assert_msg(stk__remote_put_file(r, key, a, 0, NULL, &e) == STK_OK, "%s", e.msg);
    stk__remote_close(r);
    const void *p;
    uint64_t n;
    ck_assert_int_ne(stk_dataset_value(rem, F_CAPTION, 3, &p, &n, &e), 0);
    char want[300];
    snprintf(want, sizeof want, "%s/%s", url, m->shards[0].path);
    ck_assert_msg(strstr(e.msg, want), "'%s' does not name %s", e.msg, want);
    stk_dataset_close(rem);
}
END_TEST

START_TEST(options_checked)
{
    stk_remote_options o;
    stk_remote_options_init(&o);
    stk_error e;
    o.addressing = 7;
    ck_assert_ptr_null(stk_dataset_open_remote("s3://b-x/p", &o, &e));
    tu_assert_error(&e, STK_E_ARG, "addressing 7");
    o.addressing = 0;
    o.stall_s = -1;
    ck_assert_ptr_null(stk_dataset_open_remote("s3://b-x/p", &o, &e));
    tu_assert_error(&e, STK_E_ARG, "stall_s");
    o.stall_s = 0;
    /* the first release's size (up to cache_limit) is taken, less is not */
    const size_t first = offsetof(stk_remote_options, cache_limit) + sizeof(uint64_t);
    ck_assert_ptr_null(stk_dataset_open_remote_sized("s3://b-x/p", &o, first - 8, &e));
    tu_assert_error(&e, STK_E_ARG, "smaller than any release");
    setenv("STOKER_S3_STALL_S", "never", 1); /* an old caller's open reads the environment */
    ck_assert_ptr_null(stk_dataset_open_remote_sized("s3://b-x/p", &o, first, &e));
    unsetenv("STOKER_S3_STALL_S");
    tu_assert_error(&e, STK_E_ARG, "STOKER_S3_STALL_S");
    struct {
        stk_remote_options o;
        uint64_t extra;
    } big = {o, 1};
    big.o.addressing = 0;
    ck_assert_ptr_null(stk_dataset_open_remote_sized("s3://b-x/p", &big.o, sizeof big, &e));
    tu_assert_error(&e, STK_E_ARG, "newer stoker");
}
END_TEST

TU_MAIN("remote_dataset",
        {.name = "values", .tests = {values_equal_local, tiny_cache_reads_every_value}, .timeout = 240},
        {.name = "damage", .tests = {damaged_cache_refetched, damaged_object_named}, .timeout = 120},
        {.name = "errors",
         .tests = {missing_dataset_named, wrong_secret_named, replaced_object_named, options_checked},
         .timeout = 120})
