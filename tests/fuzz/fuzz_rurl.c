/* fuzz_rurl - libFuzzer target: remote addresses (remote/url.c).
 *
 * The input, as a string, is parsed as an address (stk__raddr_parse); one
 * that parses must hold to its rules (a bucket of 3-63 of [a-z0-9.-], a key
 * without "//", "." or ".." segments or control bytes, an http key that
 * starts with its scheme), join back to an address that parses to the same
 * parts, and give request URLs of URI-safe bytes only. The input is also
 * checked as an endpoint and split into query pairs for the canonical query
 * builder, whose output must be sorted and encoded. */
#include "remote_impl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int uri_safe(const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= ' ' || c >= 0x7f || c == '"' || c == '<' || c == '>' || c == '\\' || c == '^' || c == '`' ||
            c == '{' || c == '|' || c == '}' || c == '#')
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096) return 0;
    char *s = malloc(size + 1);
    CHECK(s != NULL);
    memcpy(s, data, size);
    s[size] = '\0';
    stk__raddr a;
    stk_error err;
    if (stk__raddr_parse(s, &a, &err) == STK_OK) {
        CHECK(stk__remote_is_url(s));
        CHECK(a.key != NULL && stk__rkey_ok(a.key));
        size_t kn = strlen(a.key);
        const char *path = a.s3 ? a.key : strstr(a.key, "//") + 2;
        CHECK(!strstr(path, "//") && (kn == 0 || a.key[kn - 1] != '/'));
        if (a.s3) {
            size_t bn = strlen(a.bucket);
            CHECK(bn >= 3 && bn <= 63);
            CHECK(strspn(a.bucket, "abcdefghijklmnopqrstuvwxyz0123456789.-") == bn);
            CHECK(a.key[0] != '/');
            char *u = stk__rurl_object("https://s3.example.com:443", 1, a.bucket, a.key, "a=b");
            CHECK(u != NULL && uri_safe(u));
            free(u);
            u = stk__rurl_object("http://127.0.0.1:9000", 0, a.bucket, a.key, NULL);
            CHECK(u != NULL && uri_safe(u));
            free(u);
        } else {
            CHECK(a.bucket == NULL);
            CHECK(!strncmp(a.key, "http://", 7) || !strncmp(a.key, "https://", 8));
            CHECK(uri_safe(a.key) && !strchr(a.key, '?'));
        }
        char *j = stk__raddr_join(&a, "");
        CHECK(j != NULL);
        stk__raddr b;
        CHECK(stk__raddr_parse(j, &b, &err) == STK_OK);
        CHECK(a.s3 == b.s3 && !strcmp(a.key, b.key));
        CHECK(!a.s3 || !strcmp(a.bucket, b.bucket));
        stk__raddr_free(&b);
        free(j);
        if (kn < 1000) {
            j = stk__raddr_join(&a, "x/y.stk");
            CHECK(j != NULL && stk__raddr_parse(j, &b, &err) == STK_OK);
            stk__raddr_free(&b);
            free(j);
        }
        stk__raddr_free(&a);
    } else {
        CHECK(err.code == STK_E_ARG && a.key == NULL && a.bucket == NULL);
        CHECK(memchr(err.msg, '\0', sizeof err.msg) != NULL);
    }
    char *ep = NULL;
    if (stk__rendpoint_check(s, &ep, &err) == STK_OK) {
        CHECK(uri_safe(ep) && ep[strlen(ep) - 1] != '/');
        free(ep);
    }
    /* Query pairs: the input split at '\n' into names and values. */
    const char *kv[16];
    size_t n = 0;
    for (char *p = s, *e; n < 16; p = e + 1) {
        e = strchr(p, '\n');
        kv[n++] = p;
        if (!e) break;
        *e = '\0';
    }
    if (n % 2) kv[n++] = NULL;
    if (n >= 2 && kv[0]) {
        char *q = stk__rquery(kv, n / 2);
        CHECK(q != NULL && uri_safe(q));
        /* Sorted: each '&'-separated pair's name at least the one before. */
        char *prev = NULL;
        for (char *p = strtok(q, "&"); p; p = strtok(NULL, "&")) {
            char *eq = strchr(p, '=');
            CHECK(eq != NULL);
            *eq = '\0';
            CHECK(!prev || strcmp(prev, p) <= 0);
            prev = p;
        }
        free(q);
    }
    char *enc = stk__rurl_encode(s, strlen(s), 0);
    CHECK(enc != NULL && uri_safe(enc) && !strchr(enc, '/'));
    free(enc);
    free(s);
    return 0;
}
