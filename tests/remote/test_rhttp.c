/* tests/remote/test_rhttp.c - the transport against a canned HTTP server of
 * its own (a thread answering each request with the next scripted reply):
 * the headers sent (Range, If-Match), replies for other bytes, a 200 for a
 * range, a missing Content-Range, bodies too short or too long, a stalled
 * body, the retry bounds. No S3 server needed: http:// addresses are
 * unsigned. */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#include "remote_impl.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A reply "STALL" sends nothing and holds the connection; "CLOSE" closes
 * it. The last reply repeats. */
typedef struct {
    int fd, port;
    pthread_t th;
    const char *const *replies;
    size_t n;
    pthread_mutex_t mu;
    size_t served;
    char last[4096]; /* the last request (head and body) */
    int stop;
} canned;

static int stopping(canned *c)
{
    pthread_mutex_lock(&c->mu);
    int s = c->stop;
    pthread_mutex_unlock(&c->mu);
    return s;
}

static void serve_conn(canned *c, int fd)
{
    char buf[4096];
    size_t have = 0;
    while (!stopping(c)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        ssize_t got = read(fd, buf + have, sizeof buf - 1 - have);
        if (got <= 0) return;
        have += (size_t)got;
        buf[have] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (!end) continue;
        /* The body too (a POST's form), when it says how long it is. */
        const char *cl = strstr(buf, "Content-Length: ");
        size_t body = cl && cl < end ? strtoul(cl + 16, NULL, 10) : 0;
        if (have < (size_t)(end - buf) + 4 + body && have < sizeof buf - 1) continue;
        pthread_mutex_lock(&c->mu);
        size_t hl = have < sizeof c->last - 1 ? have : sizeof c->last - 1;
        memcpy(c->last, buf, hl);
        c->last[hl] = '\0';
        const char *reply = c->replies[c->served < c->n ? c->served : c->n - 1];
        c->served++;
        pthread_mutex_unlock(&c->mu);
        have = 0;
        if (!strcmp(reply, "CLOSE")) return;
        if (!strncmp(reply, "STALL", 5)) {
            /* STALL<head>: the head, then nothing. */
            if (write(fd, reply + 5, strlen(reply + 5)) < 0) return;
            while (!stopping(c)) {
                struct pollfd q = {.fd = fd, .events = POLLIN};
                if (poll(&q, 1, 50) > 0 && read(fd, buf, sizeof buf) <= 0) return;
            }
            return;
        }
        if (write(fd, reply, strlen(reply)) < 0) return;
        if (strstr(reply, "Connection: close")) return;
    }
}

static void *canned_main(void *arg)
{
    canned *c = arg;
    while (!stopping(c)) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        int fd = accept(c->fd, NULL, NULL);
        if (fd < 0) continue;
        serve_conn(c, fd);
        close(fd);
    }
    return NULL;
}

static void canned_start(canned *c, const char *const *replies, size_t n)
{
    memset(c, 0, sizeof *c);
    c->replies = replies;
    c->n = n;
    pthread_mutex_init(&c->mu, NULL);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(c->fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(c->fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(c->fd, 16), 0);
    socklen_t al = sizeof a;
    getsockname(c->fd, (struct sockaddr *)&a, &al);
    c->port = ntohs(a.sin_port);
    ck_assert_int_eq(pthread_create(&c->th, NULL, canned_main, c), 0);
}

static void canned_stop(canned *c)
{
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->th, NULL);
    close(c->fd);
    pthread_mutex_destroy(&c->mu);
}

/* The last request's head, copied under the lock. */
static const char *last(canned *c, char *out)
{
    pthread_mutex_lock(&c->mu);
    memcpy(out, c->last, sizeof c->last);
    pthread_mutex_unlock(&c->mu);
    return out;
}

static stk__remote *open_http(const canned *c, const stk__rconfig *cfg)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/obj", c->port);
    stk__raddr a;
    stk_error err;
    ck_assert_int_eq(stk__raddr_parse(url, &a, &err), STK_OK);
    stk__remote *r;
    ck_assert_msg(stk__remote_open(&r, &a, cfg, &err) == STK_OK, "%s", err.msg);
    stk__raddr_free(&a);
    return r;
}

#define OK_10_19                                                                                   \
  "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 10-19/100\r\nContent-Length: 10\r\nETag: " \
  "\"e1\"\r\n\r\n"                                                                                 \
  "abcdefghij"

START_TEST(range_headers_sent_and_content_range_checked)
{
    static const char *const replies[] = {
        /* Other bytes: retried. */
        "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/100\r\nContent-Length: "
        "10\r\n\r\n0123456789",
        /* No Content-Range: retried. */
        "HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\n\r\n0123456789",
        /* A malformed one: retried. */
        "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 19-10/100\r\nContent-Length: "
        "10\r\n\r\n0123456789",
        /* More bytes than asked for: retried. */
        "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 10-19/100\r\nContent-Length: "
        "12\r\n\r\n0123456789ab",
        /* Cut short: retried. */
        "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 10-19/100\r\nContent-Length: 10\r\n"
        "Connection: close\r\n\r\n01234",
        OK_10_19};
    canned c;
    canned_start(&c, replies, sizeof replies / sizeof *replies);
    stk__rconfig cfg = {.retries = 8};
    stk__remote *r = open_http(&c, &cfg);
    char buf[10], seen[4096];
    stk_error err;
    long http = 0;
    ck_assert_msg(stk__remote_get_range(r, "", 10, 10, buf, "\"e1\"", &http, &err) == STK_OK, "%s", err.msg);
    ck_assert(!memcmp(buf, "abcdefghij", 10));
    ck_assert_int_eq(http, 206);
    ck_assert_msg(strstr(last(&c, seen), "Range: bytes=10-19\r\n") != NULL, "request: %s", seen);
    ck_assert_msg(strstr(last(&c, seen), "If-Match: \"e1\"") != NULL, "request: %s", seen);
    ck_assert_msg(strstr(last(&c, seen), "GET /obj HTTP/1.1") != NULL, "request: %s", seen);
    /* Unsigned: no credentials, no signature. */
    ck_assert(!strstr(last(&c, seen), "Authorization"));
    stk__rcounts n;
    stk__remote_counts(r, &n);
    ck_assert_uint_eq(n.retries, 5);
    ck_assert_uint_eq(n.retry_net, 5);
    ck_assert_uint_eq(n.requests, 6);
    ck_assert_uint_eq(n.failures, 0);
    stk__remote_close(r);
    canned_stop(&c);
}
END_TEST

START_TEST(a_200_for_a_range_fails_at_once)
{
    static const char *const replies[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
        "0123456789012345678901234567890123456789012345678901234567890123456789"
        "012345678901234567890123456789"};
    canned c;
    canned_start(&c, replies, 1);
    stk__remote *r = open_http(&c, NULL);
    char buf[10];
    stk_error err;
    ck_assert_int_eq(stk__remote_get_range(r, "", 10, 10, buf, NULL, NULL, &err), STK_E_IO);
    tu_assert_error(&err, STK_E_IO, "ignored Range");
    char want[64];
    snprintf(want, sizeof want, "http://127.0.0.1:%d/obj", c.port);
    tu_assert_error(&err, STK_E_IO, want);
    /* The whole object as the range [0, size): taken. */
    char all[100];
    ck_assert_msg(stk__remote_get_range(r, "", 0, 100, all, NULL, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert(!memcmp(all, "0123456789", 10));
    stk__rcounts n;
    stk__remote_counts(r, &n);
    ck_assert_uint_eq(n.retries, 0);
    stk__remote_close(r);
    canned_stop(&c);
}
END_TEST

START_TEST(a_stalled_body_is_abandoned)
{
    static const char *const replies[] = {"STALLHTTP/1.1 206 Partial Content\r\nContent-Range: bytes "
                                          "10-19/100\r\nContent-Length: 10\r\n\r\nabc",
                                          "STALL", OK_10_19};
    canned c;
    canned_start(&c, replies, 3);
    stk__rconfig cfg = {.stall_s = 1};
    stk__remote *r = open_http(&c, &cfg);
    char buf[10];
    stk_error err;
    ck_assert_msg(stk__remote_get_range(r, "", 10, 10, buf, NULL, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert(!memcmp(buf, "abcdefghij", 10));
    stk__rcounts n;
    stk__remote_counts(r, &n);
    ck_assert_uint_eq(n.retry_net, 2);
    stk__remote_close(r);
    canned_stop(&c);
}
END_TEST

START_TEST(retries_bounded_by_count_and_time)
{
    static const char *const replies[] = {
        "HTTP/1.1 503 Slow Down\r\nContent-Length: 72\r\n\r\n"
        "<Error><Code>SlowDown</Code><Message>Please reduce</Message></Error>    "};
    canned c;
    canned_start(&c, replies, 1);
    stk__rconfig cfg = {.retries = 3};
    stk__remote *r = open_http(&c, &cfg);
    char buf[10];
    stk_error err;
    long http = 0;
    ck_assert_int_eq(stk__remote_get_range(r, "", 10, 10, buf, NULL, &http, &err), STK_E_IO);
    ck_assert_int_eq(http, 503);
    tu_assert_error(&err, STK_E_IO, "gave up after 4 attempts");
    tu_assert_error(&err, STK_E_IO, "HTTP 503 SlowDown (Please reduce)");
    stk__rcounts n;
    stk__remote_counts(r, &n);
    ck_assert_uint_eq(n.retry_5xx, 3);
    ck_assert_uint_eq(n.requests, 4);
    stk__remote_close(r);
    /* A retry time shorter than the first backoff could be: fewer attempts. */
    cfg = (stk__rconfig){.retries = 1000, .retry_time_s = 0.3};
    r = open_http(&c, &cfg);
    ck_assert_int_eq(stk__remote_get_range(r, "", 10, 10, buf, NULL, &http, &err), STK_E_IO);
    tu_assert_error(&err, STK_E_IO, "gave up");
    stk__remote_counts(r, &n);
    ck_assert_uint_lt(n.requests, 30);
    stk__remote_close(r);
    /* Nothing listening: a connection refused is retried, then named. */
    canned_stop(&c);
    cfg = (stk__rconfig){.retries = 2};
    r = open_http(&c, &cfg);
    ck_assert_int_eq(stk__remote_get_range(r, "", 10, 10, buf, NULL, &http, &err), STK_E_IO);
    ck_assert_int_eq(http, 0);
    tu_assert_error(&err, STK_E_IO, "gave up after 3 attempts");
    stk__remote_counts(r, &n);
    ck_assert_uint_eq(n.retry_net, 2);
    stk__remote_close(r);
}
END_TEST

START_TEST(http_head_and_whole_get)
{
    static const char *const replies[] = {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"x\"\r\n\r\n",
                                          "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"x\"\r\n\r\nhello",
                                          "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"};
    canned c;
    canned_start(&c, replies, 3);
    stk__remote *r = open_http(&c, NULL);
    char seen[4096];
    stk__robject o;
    stk_error err;
    long http;
    ck_assert_msg(stk__remote_head(r, "", &o, &http, &err) == STK_OK, "%s", err.msg);
    ck_assert_uint_eq(o.size, 5);
    ck_assert_str_eq(o.etag, "\"x\"");
    ck_assert_msg(strstr(last(&c, seen), "HEAD /obj HTTP/1.1") != NULL, "%s", seen);
    char *d;
    size_t len;
    ck_assert_msg(stk__remote_get_object(r, "", 100, &d, &len, &o, &http, &err) == STK_OK, "%s", err.msg);
    ck_assert_uint_eq(len, 5);
    ck_assert_str_eq(d, "hello");
    free(d);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/other", c.port);
    ck_assert_int_eq(stk__remote_head(r, url, &o, &http, &err), STK_E_IO);
    ck_assert_int_eq(http, 404);
    tu_assert_error(&err, STK_E_IO, url);
    ck_assert_msg(strstr(last(&c, seen), "HEAD /other HTTP/1.1") != NULL, "%s", seen);
    /* Writing to an http address is refused. */
    ck_assert_int_eq(stk__remote_put_file(r, "", "/dev/null", 0, &http, &err), STK_E_ARG);
    stk__remote_close(r);
    canned_stop(&c);
}
END_TEST

/* ---- Web identity: STS AssumeRoleWithWebIdentity ------------------------------ */

START_TEST(web_identity_through_sts)
{
    static const char *const replies[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 377\r\nConnection: close\r\n\r\n"
        "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
        "<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>ASIAWEB</AccessKeyId>"
        "<SecretAccessKey>web-secret</SecretAccessKey><SessionToken>web-token</SessionToken>"
        "<Expiration>2030-01-02T03:04:05Z</Expiration></Credentials></AssumeRoleWithWebIdentityResult>"
        "</AssumeRoleWithWebIdentityResponse>",
        "HTTP/1.1 403 Forbidden\r\nContent-Length: 147\r\nConnection: close\r\n\r\n"
        "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>Not authorized"
        "</Message></Error><RequestId>x</RequestId></ErrorResponse>"};
    canned c;
    canned_start(&c, replies, 2);
    char dir[TU_PATH], tokf[TU_PATH], ep[128], seen[4096];
    tu_scratch(dir, sizeof dir, "web_identity");
    tu_join(tokf, sizeof tokf, dir, "token");
    tu_write(tokf, "eyJ.tok+en/=\n", 13);
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", c.port);
    const char *vars[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
    setenv("HOME", dir, 1);
    setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tokf, 1);
    setenv("AWS_ROLE_ARN", "arn:aws:iam::123:role/reader", 1);
    setenv("AWS_ROLE_SESSION_NAME", "sess-1", 1);
    setenv("AWS_ENDPOINT_URL_STS", ep, 1);
    stk__raddr a;
    stk_error err;
    ck_assert_int_eq(stk__raddr_parse("s3://bucket/x", &a, &err), STK_OK);
    stk__rcfg cfg;
    ck_assert_msg(stk__rcfg_resolve(&cfg, &a, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert_str_eq(cfg.access_key, "ASIAWEB");
    ck_assert_str_eq(cfg.secret_key, "web-secret");
    ck_assert_str_eq(cfg.session_token, "web-token");
    ck_assert(cfg.expiration == 1893553445.0);
    ck_assert(stk__rcfg_renewable(&cfg));
    last(&c, seen);
    ck_assert_msg(strstr(seen, "POST / HTTP/1.1") != NULL, "%s", seen);
    ck_assert_msg(strstr(seen,
                         "Action=AssumeRoleWithWebIdentity&RoleArn=arn%3Aaws%3Aiam%3A%3A123%3Arole%2Freader"
                         "&RoleSessionName=sess-1&Version=2011-06-15&WebIdentityToken=eyJ.tok%2Ben%2F%3D") !=
                      NULL,
                  "%s", seen);
    /* Refused: named with the role and the code, never the token. */
    ck_assert_int_eq(stk__rcfg_refresh(&cfg, &err), STK_E_IO);
    tu_assert_error(&err, STK_E_IO, "AssumeRoleWithWebIdentity of arn:aws:iam::123:role/reader");
    tu_assert_error(&err, STK_E_IO, "HTTP 403 AccessDenied (Not authorized)");
    ck_assert(!strstr(err.msg, "eyJ"));
    stk__rcfg_free(&cfg);
    /* A token file that is gone is named. */
    unlink(tokf);
    ck_assert_int_eq(stk__rcfg_resolve(&cfg, &a, NULL, &err), STK_E_IO);
    tu_assert_error(&err, STK_E_IO, tokf);
    stk__raddr_free(&a);
    const char *wi[] = {"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
                        "AWS_ENDPOINT_URL_STS"};
    for (size_t i = 0; i < sizeof wi / sizeof *wi; i++) unsetenv(wi[i]);
    canned_stop(&c);
}
END_TEST

TU_MAIN("remote_http",
        {.name = "replies",
         .tests = {range_headers_sent_and_content_range_checked, a_200_for_a_range_fails_at_once,
                   a_stalled_body_is_abandoned, retries_bounded_by_count_and_time, http_head_and_whole_get},
         .timeout = 120},
        {.name = "sts", .tests = {web_identity_through_sts}})
