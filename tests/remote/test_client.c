/* tests/remote/test_client.c - the transport against a real S3 server
 * (s3rver behind the fault-injecting proxy, tests/support/s3env, which
 * exports AWS_ENDPOINT_URL and the keys): range GETs, wrong secrets and
 * missing buckets named, multipart uploads, list paging, a group of 500 GETs
 * in flight; then the proxy's faults (503 SlowDown, resets, truncated and
 * stalled bodies, 412, 403) survived and counted, or named. */
#include "testutil.h"

#include "remote_impl.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *bucket(void)
{
    const char *b = getenv("STOKER_TEST_S3_BUCKET");
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
    const uint64_t ranges[][2] = {
        {0, 1}, {0, 2}, {0, n}, {n - 1, 1}, {4095, 70000}, {123457, 1}, {500000, n - 500000}};
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
    /* The object replaced: a GET bound to the old ETag fails naming it. */
    d[0] ^= 1;
    put(r, "t/obj one.bin", d, n);
    uint8_t small[10];
    ck_assert_int_eq(stk__remote_get_range(r, "t/obj one.bin", 0, 10, small, o.etag, &http, &err), STK_E_IO);
    ck_assert_int_eq(http, 412);
    tu_assert_error(&err, STK_E_IO, "s3://stoker-test/t/obj one.bin");
    tu_assert_error(&err, STK_E_IO, "changed");
    tu_assert_error(&err, STK_E_IO, "PreconditionFailed");
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
    /* Keys that need encoding and decoding: spaces, '&', '<', a '+'. */
    for (int i = 0; i < N; i++) {
        char key[64];
        snprintf(key, sizeof key, "l/k %03d&<+>.bin", (i * 37) % N);
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
        snprintf(key, sizeof key, "l/k %03zu&<+>.bin", i);
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

/* ---- Faults through the proxy ------------------------------------------------ */

/* POST a plan to the proxy's admin endpoint (s3proxy.py). */
static void plan(const char *json)
{
    const char *admin = getenv("STOKER_TEST_S3_PROXY_ADMIN");
    ck_assert_msg(admin != NULL, "no STOKER_TEST_S3_PROXY_ADMIN (run under tests/support/s3env)");
    char url[512];
    snprintf(url, sizeof url, "%s/plan", admin);
    CURL *h = curl_easy_init();
    ck_assert_ptr_nonnull(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, json);
    FILE *null = fopen("/dev/null", "w");
    curl_easy_setopt(h, CURLOPT_WRITEDATA, null);
    ck_assert_int_eq(curl_easy_perform(h), CURLE_OK);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    ck_assert_int_eq(code, 200);
    fclose(null);
    curl_easy_cleanup(h);
}

/* One range GET of key that must come back equal to d. */
static void get_equal(stk__remote *r, const char *key, const uint8_t *d, uint64_t off, uint64_t len)
{
    uint8_t *buf = malloc(len);
    stk_error err;
    long http = 0;
    ck_assert_msg(stk__remote_get_range(r, key, off, len, buf, NULL, &http, &err) == STK_OK, "%s", err.msg);
    ck_assert(!memcmp(buf, d + off, len));
    free(buf);
}

START_TEST(faults_retried_and_counted)
{
    stk__rconfig c = {.stall_s = 1};
    stk__remote *r = client(NULL, &c);
    const size_t n = 2 * 1024 * 1024;
    uint8_t *d = pattern(n, 5);
    put(r, "f/obj.bin", d, n);
    stk__rcounts c0, c1;
    struct {
        const char *fault;
        int five;
    } cases[] = {{"503", 1}, {"500", 1}, {"reset", 0}, {"truncate", 0}, {"stall", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char json[256];
        snprintf(json, sizeof json,
                 "{\"rules\": [{\"match\": \"f/obj.bin\", \"method\": \"GET\", \"fault\": \"%s\", \"count\": "
                 "2%s}]}",
                 cases[i].fault, cases[i].five == 1 && i == 0 ? ", \"code\": \"SlowDown\"" : "");
        plan(json);
        stk__remote_counts(r, &c0);
        get_equal(r, "f/obj.bin", d, 1000, n - 2000);
        stk__remote_counts(r, &c1);
        /* A stall is a timeout (1 s without a byte): on a machine slow enough
         * the good transfer after the two planned stalls can time out too,
         * so that case counts at least its two. */
        int stall = !strcmp(cases[i].fault, "stall");
        uint64_t retries = c1.retries - c0.retries;
        ck_assert_msg(stall ? retries >= 2 : retries == 2, "%s: %llu retries", cases[i].fault,
                      (unsigned long long)retries);
        ck_assert_uint_eq(c1.retry_5xx - c0.retry_5xx, cases[i].five ? 2 : 0);
        ck_assert_uint_eq(c1.retry_net - c0.retry_net, cases[i].five ? 0 : retries);
        ck_assert_uint_eq(c1.failures, c0.failures);
    }
    /* A whole-object GET and a PUT survive a reset too. */
    plan("{\"rules\": [{\"match\": \"f/obj.bin\", \"fault\": \"reset\", \"count\": 1}]}");
    char *all;
    size_t len;
    stk_error err;
    ck_assert_msg(stk__remote_get_object(r, "f/obj.bin", n, &all, &len, NULL, NULL, &err) == STK_OK, "%s",
                  err.msg);
    ck_assert(len == n && !memcmp(all, d, n));
    free(all);
    plan("{\"rules\": [{\"match\": \"f/put.bin\", \"method\": \"PUT\", \"fault\": \"503\", \"count\": 1}]}");
    put(r, "f/put.bin", d, 5000);
    get_equal(r, "f/put.bin", d, 0, 5000);
    free(d);
    stk__remote_close(r);
}
END_TEST

/* The stall timeout from STOKER_S3_STALL_S (no option set): a body that
 * stops mid-way is abandoned after 1 s and retried (with the default 30 s
 * the suite's timeout would end the test first). */
START_TEST(stall_timeout_from_environment)
{
    setenv("STOKER_S3_STALL_S", "1", 1);
    stk__remote *r = client(NULL, NULL);
    unsetenv("STOKER_S3_STALL_S");
    const size_t n = 1024 * 1024;
    uint8_t *d = pattern(n, 9);
    put(r, "f/stall.bin", d, n);
    plan("{\"rules\": [{\"match\": \"f/stall.bin\", \"method\": \"GET\", \"fault\": \"stall\", \"count\": "
         "2}]}");
    stk__rcounts c0, c1;
    stk__remote_counts(r, &c0);
    get_equal(r, "f/stall.bin", d, 10, n - 20);
    stk__remote_counts(r, &c1);
    ck_assert_uint_eq(c1.retry_net - c0.retry_net, 2);
    ck_assert_uint_eq(c1.failures, c0.failures);
    free(d);
    stk__remote_close(r);
}
END_TEST

/* A cancelled group: its queued GETs never go out, those in flight end
 * without retries, the wait returns "cancelled", nothing counts as a
 * failure, and GETs started after the cancel end at once. Every GET is
 * delayed 300 ms by the proxy, so all 200 are still queued or in flight
 * when the cancel comes. */
START_TEST(group_cancelled)
{
    stk__rconfig c = {.max_inflight = 8};
    stk__remote *r = client(NULL, &c);
    const size_t n = 200 * 1000;
    uint8_t *d = pattern(n, 11), *out = calloc(1, n);
    put(r, "t/cancel.bin", d, n);
    plan("{\"rules\": [{\"match\": \"t/cancel.bin\", \"method\": \"GET\", \"fault\": \"delay:300ms\", "
         "\"count\": 1000}]}");
    stk__rcounts c0, c1;
    stk__remote_counts(r, &c0);
    stk__rgroup *g = stk__rgroup_new(r);
    stk_error err;
    for (int i = 0; i < 200; i++)
        ck_assert_int_eq(
            stk__rgroup_add(g, "t/cancel.bin", (uint64_t)i * 1000, 1000, out + i * 1000, NULL, NULL, &err),
            STK_OK);
    stk__rgroup_start(g);
    stk__rgroup_cancel(g);
    ck_assert_int_eq(stk__rgroup_wait(g, &err), STK_E_IO);
    ck_assert_msg(strstr(err.msg, "cancelled"), "%s", err.msg);
    stk__remote_counts(r, &c1);
    ck_assert_uint_le(c1.requests - c0.requests, 8); /* at most those in flight */
    ck_assert_uint_eq(c1.retries, c0.retries);
    ck_assert_uint_eq(c1.failures, c0.failures);
    /* GETs added after the cancel: ended at once, none sent */
    stk__rgroup_clear(g);
    ck_assert_int_eq(stk__rgroup_add(g, "t/cancel.bin", 0, 10, out, NULL, NULL, &err), STK_OK);
    stk__rgroup_start(g);
    ck_assert_int_eq(stk__rgroup_wait(g, &err), STK_E_IO);
    stk__remote_counts(r, &c0);
    ck_assert_uint_eq(c0.requests, c1.requests);
    stk__rgroup_free(g);
    /* the client goes on for other groups */
    plan("{\"rules\": []}");
    get_equal(r, "t/cancel.bin", d, 5, 1000);
    free(out);
    free(d);
    stk__remote_close(r);
}
END_TEST

/* Range GETs queued adjacent to each other (one object, bytes back to back,
 * from several groups) go out joined while the in-flight limit holds them
 * back, and each lands in its own buffer: with faults that cut a joined
 * body short, and with one of the groups cancelled while they ride
 * together. */
enum { JN = 300 };

typedef struct {
    uint64_t off[JN], len[JN];
    uint64_t total;
} tiling;

static void tile(tiling *t, uint32_t seed)
{
    t->total = 0;
    for (int i = 0; i < JN; i++) {
        seed = seed * 1103515245u + 12345u;
        t->len[i] = 1 + (seed >> 8) % 8000;
        t->off[i] = t->total;
        t->total += t->len[i];
    }
}

/* Add range i to group i % ng in a scrambled order (each group's ranges
 * sit between the others'), start them all and wait: every group's wait
 * must succeed, but for group 0 when cancel_first (cancelled after the
 * start: its wait must only return). */
static void run_groups(const char *key, const tiling *t, uint8_t *out, stk__rgroup **g, int ng,
                       int cancel_first)
{
    stk_error err;
    for (int k = 0; k < JN; k++) {
        int i = (int)(((unsigned)k * 7919u) % JN); /* a permutation: 7919 is prime to 300 */
        ck_assert_int_eq(stk__rgroup_add(g[i % ng], key, t->off[i], t->len[i], out + t->off[i], NULL,
                                         (void *)(intptr_t)i, &err),
                         STK_OK);
    }
    for (int j = 0; j < ng; j++) stk__rgroup_start(g[j]);
    if (cancel_first) stk__rgroup_cancel(g[0]);
    for (int j = cancel_first ? 1 : 0; j < ng; j++)
        ck_assert_msg(stk__rgroup_wait(g[j], &err) == STK_OK, "group %d: %s", j, err.msg);
    if (cancel_first) (void)stk__rgroup_wait(g[0], &err); /* returns, whatever it got */
}

START_TEST(adjacent_gets_joined)
{
    stk__rconfig c = {.max_inflight = 2, .stall_s = 1};
    stk__remote *r = client(NULL, &c);
    tiling t;
    tile(&t, 77);
    uint8_t *d = pattern(t.total, 13), *out = calloc(1, t.total);
    put(r, "t/join.bin", d, t.total);
    stk__rgroup *g[3];
    for (int j = 0; j < 3; j++) ck_assert_ptr_nonnull(g[j] = stk__rgroup_new(r));
    stk__rcounts c0, c1;
    stk__remote_counts(r, &c0);
    run_groups("t/join.bin", &t, out, g, 3, 0);
    stk__remote_counts(r, &c1);
    ck_assert(!memcmp(out, d, t.total));
    for (int j = 0; j < 3; j++) {
        for (size_t i = 0; i < stk__rgroup_count(g[j]); i++) {
            void *tag;
            stk_error err;
            ck_assert_int_eq(stk__rgroup_result(g[j], i, &tag, &err), STK_OK);
            ck_assert_int_eq((int)(intptr_t)tag % 3, j);
        }
        stk__rgroup_clear(g[j]);
    }
    ck_assert_msg(c1.joined > c0.joined && c1.requests - c0.requests < JN / 2,
                  "%llu requests for %d GETs, %llu joined", (unsigned long long)(c1.requests - c0.requests),
                  JN, (unsigned long long)(c1.joined - c0.joined));
    ck_assert_uint_le(c1.inflight_max, 2);

    /* joined bodies cut short, reset and stalled: every GET still right */
    const char *faults[] = {"truncate", "reset", "stall", "503"};
    for (size_t f = 0; f < sizeof faults / sizeof *faults; f++) {
        char json[200];
        snprintf(json, sizeof json,
                 "{\"rules\": [{\"match\": \"t/join.bin\", \"method\": \"GET\", \"fault\": \"%s\", "
                 "\"count\": 3}]}",
                 faults[f]);
        plan(json);
        memset(out, 0, t.total);
        stk__remote_counts(r, &c0);
        run_groups("t/join.bin", &t, out, g, 3, 0);
        stk__remote_counts(r, &c1);
        ck_assert_msg(!memcmp(out, d, t.total), "%s: bytes differ", faults[f]);
        ck_assert_msg(c1.retries > c0.retries, "%s: no retry", faults[f]);
        ck_assert_uint_eq(c1.failures, c0.failures);
        for (int j = 0; j < 3; j++) stk__rgroup_clear(g[j]);
    }

    /* one group cancelled while its GETs ride with the other's: the other's
     * all arrive; the cancelled one's wait returns */
    plan("{\"rules\": [{\"match\": \"t/join.bin\", \"method\": \"GET\", \"fault\": \"delay:200ms\", "
         "\"count\": 1000}]}");
    memset(out, 0, t.total);
    run_groups("t/join.bin", &t, out, g, 2, 1);
    for (int i = 1; i < JN; i += 2)
        ck_assert_msg(!memcmp(out + t.off[i], d + t.off[i], t.len[i]), "GET %d of the live group differs", i);
    plan("{\"rules\": []}");
    for (int j = 0; j < 3; j++) stk__rgroup_free(g[j]);
    free(out);
    free(d);
    stk__remote_close(r);
}
END_TEST

START_TEST(faults_bounded_and_named)
{
    stk__rconfig c = {.retries = 2};
    stk__remote *r = client(NULL, &c);
    uint8_t *d = pattern(10000, 6);
    put(r, "f/named.bin", d, 10000);
    uint8_t buf[100];
    stk_error err;
    long http = 0;
    /* Every attempt 503: given up after 1 + 2 attempts, the cause named. */
    plan("{\"rules\": [{\"match\": \"f/named.bin\", \"fault\": \"503\", \"count\": 50, \"code\": "
         "\"SlowDown\"}]}");
    ck_assert_int_eq(stk__remote_get_range(r, "f/named.bin", 0, 100, buf, NULL, &http, &err), STK_E_IO);
    ck_assert_int_eq(http, 503);
    tu_assert_error(&err, STK_E_IO, "s3://stoker-test/f/named.bin");
    tu_assert_error(&err, STK_E_IO, "3 attempts");
    tu_assert_error(&err, STK_E_IO, "HTTP 503 SlowDown");
    stk__rcounts cn;
    stk__remote_counts(r, &cn);
    ck_assert_uint_eq(cn.retry_5xx, 2);
    ck_assert_uint_eq(cn.failures, 1);
    /* 403 and 404 fail at once. */
    plan("{\"rules\": [{\"match\": \"f/named.bin\", \"fault\": \"403\", \"code\": \"AccessDenied\"}]}");
    ck_assert_int_eq(stk__remote_get_range(r, "f/named.bin", 0, 100, buf, NULL, &http, &err), STK_E_IO);
    ck_assert_int_eq(http, 403);
    tu_assert_error(&err, STK_E_IO, "HTTP 403 AccessDenied");
    tu_assert_error(&err, STK_E_IO, "s3://stoker-test/f/named.bin");
    /* An object that changed: 412 names it (s3rver itself ignores If-Match). */
    plan("{\"rules\": [{\"match\": \"f/named.bin\", \"fault\": \"412\", \"code\": \"PreconditionFailed\"}]}");
    ck_assert_int_eq(stk__remote_get_range(r, "f/named.bin", 0, 100, buf, "\"0123\"", &http, &err), STK_E_IO);
    ck_assert_int_eq(http, 412);
    tu_assert_error(&err, STK_E_IO, "s3://stoker-test/f/named.bin");
    tu_assert_error(&err, STK_E_IO, "changed");
    stk__remote_counts(r, &cn);
    ck_assert_uint_eq(cn.retries, 2);
    plan("{\"rules\": []}");
    free(d);
    stk__remote_close(r);
}
END_TEST

/* The uploads the proxy knows are still open (ListMultipartUploads). */
static int open_uploads(stk__remote *r)
{
    const char *kv[] = {"uploads", NULL};
    stk__rreq *q = stk__rreq_new(STK__M_GET, "", stk__rquery(kv, 1));
    q->sink = 1;
    q->sink_max = 1 << 20;
    ck_assert_msg(stk__rreq_run(r, q) == STK_OK, "%s", q->err.msg);
    int n = 0;
    for (const char *p = q->buf; p && (p = strstr(p, "<UploadId>")); p++) n++;
    stk__rreq_free(q);
    return n;
}

START_TEST(multipart_failure_aborts)
{
    stk__rconfig c = {.retries = 1};
    stk__remote *r = client(NULL, &c);
    const size_t n = 10 * 1024 * 1024 + 1;
    uint8_t *d = pattern(n, 7);
    char path[TU_PATH];
    tu_scratch_file(path, sizeof path, "multipart_abort", "big.bin");
    tu_write(path, d, n);
    int before = open_uploads(r);
    /* Every part 2 upload fails: the upload is aborted, not left open. */
    plan("{\"rules\": [{\"match\": \"partNumber=2\", \"fault\": \"500\", \"count\": 10}]}");
    stk_error err;
    long http = 0;
    ck_assert_int_eq(stk__remote_put_file(r, "m/aborted.bin", path, 5 * 1024 * 1024, &http, &err), STK_E_IO);
    tu_assert_error(&err, STK_E_IO, "s3://stoker-test/m/aborted.bin");
    tu_assert_error(&err, STK_E_IO, "HTTP 500");
    ck_assert_int_eq(open_uploads(r), before);
    stk__robject o;
    ck_assert_int_eq(stk__remote_head(r, "m/aborted.bin", &o, &http, &err), STK_E_IO);
    ck_assert_int_eq(http, 404);
    /* One part fails once: retried, the upload completes. */
    plan("{\"rules\": [{\"match\": \"partNumber=1\", \"fault\": \"reset\", \"count\": 1}]}");
    ck_assert_msg(stk__remote_put_file(r, "m/retried.bin", path, 5 * 1024 * 1024, &http, &err) == STK_OK,
                  "%s", err.msg);
    char *all;
    size_t len;
    ck_assert_msg(stk__remote_get_object(r, "m/retried.bin", n, &all, &len, NULL, NULL, &err) == STK_OK, "%s",
                  err.msg);
    ck_assert(len == n && !memcmp(all, d, n));
    free(all);
    free(d);
    stk__remote_close(r);
}
END_TEST

/* ---- Credentials from a credential_process, refreshed ------------------------ */

static size_t count_lines(const char *path)
{
    size_t len, n = 0;
    uint8_t *t = tu_read(path, &len);
    for (size_t i = 0; i < len; i++) n += t[i] == '\n';
    free(t);
    return n;
}

START_TEST(credential_process_refreshed)
{
    char home[TU_PATH], script[TU_PATH], cfg[TU_PATH], runs[TU_PATH], text[4 * TU_PATH];
    tu_scratch(home, sizeof home, "cred_refresh");
    tu_join(script, sizeof script, home, "creds.sh");
    tu_join(cfg, sizeof cfg, home, "config");
    tu_join(runs, sizeof runs, home, "runs");
    /* Credentials that expire in $1 seconds: within the refresh margin (300
     * s) every request runs the process again; an hour away none does. */
    const char *body =
        "#!/bin/sh\n"
        "echo run >> \"$(dirname \"$0\")/runs\"\n"
        "exp=$(date -u -d \"@$(( $(date +%s) + $1 ))\" +%Y-%m-%dT%H:%M:%SZ)\n"
        "printf '{\"Version\": 1, \"AccessKeyId\": \"S3RVER\", \"SecretAccessKey\": \"S3RVER\", "
        "\"SessionToken\": \"tok\", \"Expiration\": \"%s\"}\\n' \"$exp\"\n";
    tu_write(script, body, strlen(body));
    chmod(script, 0700);
    snprintf(text, sizeof text,
             "[profile soon]\ncredential_process = %s 120\n[profile later]\ncredential_process = %s 3600\n",
             script, script);
    tu_write(cfg, text, strlen(text));
    setenv("AWS_CONFIG_FILE", cfg, 1);
    stk__rconfig c = {.profile = "soon"};
    stk__remote *r = client(NULL, &c);
    ck_assert_uint_eq(count_lines(runs), 1);
    put(r, "c/obj", "hello", 5);
    uint8_t buf[5];
    stk_error err;
    ck_assert_msg(stk__remote_get_range(r, "c/obj", 0, 5, buf, NULL, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert(!memcmp(buf, "hello", 5));
    ck_assert_uint_eq(count_lines(runs), 3);
    stk__remote_close(r);
    c.profile = "later";
    r = client(NULL, &c);
    ck_assert_msg(stk__remote_get_range(r, "c/obj", 0, 5, buf, NULL, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert_msg(stk__remote_get_range(r, "c/obj", 1, 4, buf, NULL, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert_uint_eq(count_lines(runs), 4);
    stk__remote_close(r);
    unsetenv("AWS_CONFIG_FILE");
}
END_TEST

TU_MAIN("remote_client", {.name = "objects", .tests = {put_get_head_range}},
        {.name = "errors", .tests = {wrong_secret_is_403_named, missing_bucket_and_key_named}},
        {.name = "multipart", .tests = {multipart_put_equals_file}}, {.name = "list", .tests = {list_pages}},
        {.name = "group", .tests = {group_of_500_gets}, .timeout = 120},
        {.name = "join", .tests = {adjacent_gets_joined}, .timeout = 120},
        {.name = "credentials", .tests = {credential_process_refreshed}},
        {.name = "faults",
         .tests = {faults_retried_and_counted, faults_bounded_and_named, multipart_failure_aborts},
         .timeout = 240},
        {.name = "stall", .tests = {stall_timeout_from_environment}, .timeout = 25},
        {.name = "cancel", .tests = {group_cancelled}, .timeout = 60})
