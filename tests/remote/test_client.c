/* tests/remote/test_client.c - the transport against a real S3 server
 * (s3rver, started by with_s3rver, which exports AWS_ENDPOINT_URL and the
 * keys): range GETs, If-Match, wrong secrets and missing buckets named,
 * multipart uploads, list paging, a group of 500 GETs in flight. */
#include "testutil.h"

#include "remote_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *bucket(void)
{
    const char *b = getenv("STOKER_TEST_BUCKET");
    return b ? b : "stoker-test";
}

/* A client for s3://BUCKET/ with the configuration c (NULL: environment). */
static stk__remote *client(const char *b, const stk__rconfig *c)
{
    char url[256];
    snprintf(url, sizeof url, "s3://%s/", b ? b : bucket());
    stk__raddr a;
    stk_error err;
    ck_assert_msg(stk__raddr_parse(url, &a, &err) == STK_OK, "%s", err.msg);
    stk__remote *r = NULL;
    ck_assert_msg(stk__remote_open(&r, &a, c, &err) == STK_OK, "%s", err.msg);
    stk__raddr_free(&a);
    return r;
}

static uint8_t *pattern(size_t n, uint32_t seed)
{
    uint8_t *p = malloc(n ? n : 1);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
    return p;
}

static void put(stk__remote *r, const char *key, const void *data, size_t n)
{
    stk_error err;
    long http = 0;
    ck_assert_msg(stk__remote_put_object(r, key, data, n, &http, &err) == STK_OK, "%s", err.msg);
    ck_assert_int_eq(http, 200);
}

START_TEST(put_get_head_range)
{
    stk__remote *r = client(NULL, NULL);
    const size_t n = (1 << 20) + 17;
    uint8_t *d = pattern(n, 1);
    put(r, "t/obj one.bin", d, n);
    stk_error err;
    long http = 0;
    stk__robject o;
    ck_assert_msg(stk__remote_head(r, "t/obj one.bin", &o, &http, &err) == STK_OK, "%s", err.msg);
    ck_assert_int_eq(o.size, n);
    ck_assert_int_eq(http, 200);
    ck_assert_msg(o.etag[0] == '"', "etag %s", o.etag);
    char *all;
    size_t len;
    stk__robject o2;
    ck_assert_msg(stk__remote_get_object(r, "t/obj one.bin", n, &all, &len, &o2, &http, &err) == STK_OK, "%s",
                  err.msg);
    ck_assert_uint_eq(len, n);
    ck_assert(!memcmp(all, d, n));
    ck_assert_str_eq(o2.etag, o.etag);
    free(all);
    /* One byte under the size: refused. */
    ck_assert_int_eq(stk__remote_get_object(r, "t/obj one.bin", n - 1, &all, &len, NULL, NULL, &err),
                     STK_E_IO);
    tu_assert_error(&err, STK_E_IO, "s3://");
    /* Not {0, 1}: s3rver 4.0.4 reads "bytes=0-0" as "bytes=0-" (a falsy end);
     * the client refuses the reply for other bytes. */
    const uint64_t ranges[][2] = {{0, 2},        {0, n},      {n - 1, 1},
                                  {4095, 70000}, {123457, 1}, {500000, n - 500000}};
    for (size_t i = 0; i < sizeof ranges / sizeof *ranges; i++) {
        uint64_t off = ranges[i][0], l = ranges[i][1];
        uint8_t *buf = malloc(l);
        ck_assert_msg(stk__remote_get_range(r, "t/obj one.bin", off, l, buf, o.etag, &http, &err) == STK_OK,
                      "%s", err.msg);
        ck_assert_int_eq(http, 206);
        ck_assert_msg(!memcmp(buf, d + off, l), "range %llu+%llu differs", (unsigned long long)off,
                      (unsigned long long)l);
        free(buf);
    }
    stk__rcounts c;
    stk__remote_counts(r, &c);
    ck_assert_uint_ge(c.requests, 9);
    ck_assert_uint_ge(c.bytes_in, 2 * n);
    ck_assert_uint_ge(c.bytes_out, n);
    ck_assert_uint_eq(c.retries, 0);
    free(d);
    stk__remote_close(r);
}
END_TEST

START_TEST(wrong_secret_is_403_named)
{
    const char *secret = "Secret-That-Must-Not-Show";
    stk__rconfig c = {.access_key = "S3RVER", .secret_key = secret};
    stk__remote *r = client(NULL, &c);
    stk_error err;
    long http = 0;
    stk__robject o;
    char *data;
    size_t len;
    int rc = stk__remote_get_object(r, "t/anything", 100, &data, &len, &o, &http, &err);
    ck_assert_int_eq(rc, STK_E_IO);
    ck_assert_int_eq(http, 403);
    tu_assert_error(&err, STK_E_IO, "s3://stoker-test/t/anything");
    tu_assert_error(&err, STK_E_IO, "403");
    tu_assert_error(&err, STK_E_IO, "SignatureDoesNotMatch");
    ck_assert_msg(!strstr(err.msg, secret), "the secret shows: %s", err.msg);
    stk__rcounts cn;
    stk__remote_counts(r, &cn);
    ck_assert_uint_eq(cn.retries, 0);
    ck_assert_uint_eq(cn.failures, 1);
    stk__remote_close(r);
}
END_TEST

START_TEST(missing_bucket_and_key_named)
{
    stk__remote *r = client("no-such-bucket", NULL);
    stk_error err;
    long http = 0;
    char *data;
    size_t len;
    ck_assert_int_eq(stk__remote_get_object(r, "x/y", 100, &data, &len, NULL, &http, &err), STK_E_IO);
    ck_assert_int_eq(http, 404);
    tu_assert_error(&err, STK_E_IO, "s3://no-such-bucket/x/y");
    tu_assert_error(&err, STK_E_IO, "NoSuchBucket");
    stk__remote_close(r);

    r = client(NULL, NULL);
    stk__robject o;
    ck_assert_int_eq(stk__remote_head(r, "t/not-there", &o, &http, &err), STK_E_IO);
    ck_assert_int_eq(http, 404);
    tu_assert_error(&err, STK_E_IO, "s3://stoker-test/t/not-there");
    ck_assert_int_eq(stk__remote_get_object(r, "t/not-there", 100, &data, &len, NULL, &http, &err), STK_E_IO);
    tu_assert_error(&err, STK_E_IO, "NoSuchKey");
    /* Delete, then gone. */
    put(r, "t/gone", "x", 1);
    ck_assert_msg(stk__remote_delete(r, "t/gone", &http, &err) == STK_OK, "%s", err.msg);
    ck_assert_int_eq(stk__remote_head(r, "t/gone", &o, &http, &err), STK_E_IO);
    ck_assert_int_eq(http, 404);
    stk__remote_close(r);
}
END_TEST

START_TEST(multipart_put_equals_file)
{
    stk__remote *r = client(NULL, NULL);
    const size_t n = 11 * 1024 * 1024 + 3; /* three parts of 5 MiB at most */
    uint8_t *d = pattern(n, 3);
    char path[TU_PATH];
    tu_scratch_file(path, sizeof path, "multipart", "big.bin");
    tu_write(path, d, n);
    stk_error err;
    long http = 0;
    ck_assert_msg(stk__remote_put_file(r, "t/big.bin", path, 5 * 1024 * 1024, &http, &err) == STK_OK, "%s",
                  err.msg);
    char *all;
    size_t len;
    stk__robject o;
    ck_assert_msg(stk__remote_get_object(r, "t/big.bin", n, &all, &len, &o, &http, &err) == STK_OK, "%s",
                  err.msg);
    ck_assert_uint_eq(len, n);
    ck_assert(!memcmp(all, d, n));
    free(all);
    /* Initiate, three parts, complete, and the GET. */
    stk__rcounts c;
    stk__remote_counts(r, &c);
    ck_assert_uint_eq(c.requests, 6);
    /* A small file: one PUT. */
    tu_write(path, d, 1000);
    ck_assert_msg(stk__remote_put_file(r, "t/small.bin", path, 0, &http, &err) == STK_OK, "%s", err.msg);
    ck_assert_msg(stk__remote_get_object(r, "t/small.bin", n, &all, &len, NULL, &http, &err) == STK_OK, "%s",
                  err.msg);
    ck_assert_uint_eq(len, 1000);
    ck_assert(!memcmp(all, d, 1000));
    free(all);
    free(d);
    stk__remote_close(r);
}
END_TEST

START_TEST(list_pages)
{
    stk__remote *r = client(NULL, NULL);
    enum { N = 53 };
    /* Keys that need encoding: spaces, a '+' (s3rver 4.0.4 escapes '&', '<'
     * and '>' in listed keys twice: the XML tests cover their decoding). */
    for (int i = 0; i < N; i++) {
        char key[64];
        snprintf(key, sizeof key, "l/k %03d+.bin", (i * 37) % N);
        char val[8];
        memset(val, 'v', sizeof val);
        put(r, key, val, (size_t)(i % 8));
    }
    put(r, "l2/outside", "x", 1);
    stk__rlist l;
    stk_error err;
    ck_assert_msg(stk__remote_list_page(r, "l/", 7, &l, &err) == STK_OK, "%s", err.msg);
    ck_assert_uint_eq(l.n, N);
    for (size_t i = 0; i < l.n; i++) {
        char key[64];
        snprintf(key, sizeof key, "l/k %03zu+.bin", i);
        ck_assert_str_eq(l.keys[i], key);
        int put_i = -1;
        for (int j = 0; j < N; j++)
            if ((size_t)((j * 37) % N) == i) put_i = j;
        ck_assert_uint_eq(l.sizes[i], (uint64_t)(put_i % 8));
    }
    stk__rlist_free(&l);
    ck_assert_msg(stk__remote_list(r, "l", &l, &err) == STK_OK, "%s", err.msg);
    ck_assert_uint_eq(l.n, N + 1);
    stk__rlist_free(&l);
    ck_assert_msg(stk__remote_list(r, "none/", &l, &err) == STK_OK, "%s", err.msg);
    ck_assert_uint_eq(l.n, 0);
    stk__rlist_free(&l);
    stk__remote_close(r);
}
END_TEST

START_TEST(group_of_500_gets)
{
    stk__rconfig c = {.max_inflight = 32};
    stk__remote *r = client(NULL, &c);
    const size_t n = 4 * 1024 * 1024;
    uint8_t *d = pattern(n, 4);
    put(r, "t/group.bin", d, n);
    stk__rgroup *g = stk__rgroup_new(r);
    ck_assert_ptr_nonnull(g);
    enum { G = 500 };
    uint8_t *out = calloc(1, n);
    uint64_t offs[G], lens[G];
    uint32_t x = 12345;
    /* Disjoint ranges of 1..16 KiB spread over the object, two starts. */
    uint64_t at = 0;
    stk_error err;
    for (int i = 0; i < G; i++) {
        x = x * 1103515245u + 12345u;
        lens[i] = 1 + (x >> 8) % 8000;
        offs[i] = at;
        at += lens[i] + (x >> 20) % 400;
        ck_assert_uint_le(at, n);
        ck_assert_int_eq(stk__rgroup_add(g, "t/group.bin", offs[i], lens[i], out + offs[i], NULL,
                                         (void *)(intptr_t)i, &err),
                         STK_OK);
        if (i == G / 2) stk__rgroup_start(g);
    }
    stk__rgroup_start(g);
    ck_assert_msg(stk__rgroup_wait(g, &err) == STK_OK, "%s", err.msg);
    ck_assert_uint_eq(stk__rgroup_count(g), G);
    for (int i = 0; i < G; i++) {
        void *tag;
        ck_assert_int_eq(stk__rgroup_result(g, (size_t)i, &tag, &err), STK_OK);
        ck_assert_int_eq((int)(intptr_t)tag, i);
        ck_assert_msg(!memcmp(out + offs[i], d + offs[i], lens[i]), "GET %d differs", i);
    }
    stk__rcounts cn;
    stk__remote_counts(r, &cn);
    ck_assert_uint_le(cn.inflight_max, 32);
    ck_assert_uint_ge(cn.inflight_max, 2);
    /* Reused: one failing GET among good ones is the group's error. */
    stk__rgroup_clear(g);
    ck_assert_int_eq(stk__rgroup_add(g, "t/group.bin", 0, 10, out, NULL, NULL, &err), STK_OK);
    ck_assert_int_eq(stk__rgroup_add(g, "t/missing.bin", 0, 10, out + 10, NULL, NULL, &err), STK_OK);
    ck_assert_int_eq(stk__rgroup_add(g, "t/group.bin", n - 10, 10, out + 20, NULL, NULL, &err), STK_OK);
    stk__rgroup_start(g);
    ck_assert_int_eq(stk__rgroup_wait(g, &err), STK_E_IO);
    tu_assert_error(&err, STK_E_IO, "s3://stoker-test/t/missing.bin");
    ck_assert_int_eq(stk__rgroup_result(g, 0, NULL, &err), STK_OK);
    ck_assert_int_eq(stk__rgroup_result(g, 1, NULL, &err), STK_E_IO);
    ck_assert_int_eq(stk__rgroup_result(g, 2, NULL, &err), STK_OK);
    ck_assert(!memcmp(out + 20, d + n - 10, 10));
    /* Freed with GETs started and not waited for. */
    stk__rgroup_clear(g);
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(
            stk__rgroup_add(g, "t/group.bin", (uint64_t)i * 1000, 1000, out + i * 1000, NULL, NULL, &err),
            STK_OK);
    stk__rgroup_start(g);
    stk__rgroup_free(g);
    free(out);
    free(d);
    stk__remote_close(r);
}
END_TEST

TU_MAIN("remote_client", {.name = "objects", .tests = {put_get_head_range}},
        {.name = "errors", .tests = {wrong_secret_is_403_named, missing_bucket_and_key_named}},
        {.name = "multipart", .tests = {multipart_put_equals_file}}, {.name = "list", .tests = {list_pages}},
        {.name = "group", .tests = {group_of_500_gets}, .timeout = 120})
