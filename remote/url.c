/* remote/url.c - addresses: s3://bucket/key and http(s)://host/path parsed
 * strictly, request URLs for an endpoint and addressing style, canonical
 * query strings (curl 7.88 signs the query as given, unsorted: see
 * remote.h). */
#include "remote_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int stk__remote_is_url(const char *path)
{
    if (!path) return 0;
    return !strncmp(path, "s3://", 5) || !strncmp(path, "http://", 7) || !strncmp(path, "https://", 8);
}

static char *dupn(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

int stk__rkey_ok(const char *key)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++, n++)
        if (*p < 0x20 || *p == 0x7f) return 0;
    return n <= 1024;
}

/* A key or path: no "//", no "." or ".." segment, no control bytes. */
static int path_ok(const char *k, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)k[i];
        if (ch < 0x20 || ch == 0x7f) return 0;
    }
    size_t i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && k[j] != '/') j++;
        size_t len = j - i;
        if (j < n && len == 0) return 0; /* "//" or a leading '/' */
        if ((len == 1 && k[i] == '.') || (len == 2 && k[i] == '.' && k[i + 1] == '.')) return 0;
        i = j + 1;
    }
    return 1;
}

static int bucket_ok(const char *b, size_t n)
{
    if (n < 3 || n > 63) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = b[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '-')) return 0;
    }
    const char f = b[0], l = b[n - 1];
    if (f == '.' || f == '-' || l == '.' || l == '-') return 0;
    return 1;
}

/* A host[:port]: letters, digits, '.', '-', '_', or an [IPv6] literal; a port
 * of 1-5 digits. No userinfo: credentials never sit in an address. */
static int host_ok(const char *h, size_t n)
{
    if (n == 0 || n > 255) return 0;
    size_t i = 0;
    if (h[0] == '[') {
        while (i < n && h[i] != ']') {
            char ch = h[i];
            if (i > 0 && !((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F') ||
                           ch == ':' || ch == '.'))
                return 0;
            i++;
        }
        if (i == n || i < 2) return 0;
        i++;
    } else {
        while (i < n && h[i] != ':') {
            char ch = h[i];
            if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                  ch == '.' || ch == '-' || ch == '_'))
                return 0;
            i++;
        }
        if (i == 0) return 0;
    }
    if (i == n) return 1;
    if (h[i] != ':') return 0;
    size_t digits = n - i - 1;
    if (digits < 1 || digits > 5) return 0;
    unsigned long port = 0;
    for (size_t j = i + 1; j < n; j++) {
        if (h[j] < '0' || h[j] > '9') return 0;
        port = port * 10 + (unsigned long)(h[j] - '0');
    }
    return port >= 1 && port <= 65535;
}

/* A path sent as it is (http addresses, an endpoint's base): printable
 * ASCII that needs no encoding; users percent-encode the rest. */
static int uri_ok(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch <= ' ' || ch >= 0x7f || strchr("\"<>\\^`{|}#?", ch)) return 0;
    }
    return 1;
}

/* http(s)://host[:port][/path]: *host_end the offset after the host, or 0. */
static size_t http_prefix(const char *url)
{
    if (!strncmp(url, "http://", 7)) return 7;
    if (!strncmp(url, "https://", 8)) return 8;
    return 0;
}

int stk__raddr_parse(const char *url, stk__raddr *a, stk_error *err)
{
    memset(a, 0, sizeof *a);
    if (!url) return stk_error_set(err, STK_E_ARG, "remote address: none given");
    size_t n = strlen(url);
    if (n > 2048) return stk_error_set(err, STK_E_ARG, "remote address longer than 2048 bytes");
    if (!strncmp(url, "s3://", 5)) {
        const char *b = url + 5;
        const char *slash = strchr(b, '/');
        size_t bn = slash ? (size_t)(slash - b) : strlen(b);
        if (!bucket_ok(b, bn))
            return stk_error_set(
                err, STK_E_ARG,
                "%.300s: the bucket must be 3-63 of a-z 0-9 . - starting and ending with a letter "
                "or digit",
                url);
        const char *k = slash ? slash + 1 : b + bn;
        size_t kn = strlen(k);
        while (kn > 0 && k[kn - 1] == '/') kn--;
        if (kn > 1024 || !path_ok(k, kn))
            return stk_error_set(
                err, STK_E_ARG,
                "%.300s: a key must not hold \"//\", a \".\" or \"..\" segment, control bytes, or "
                "more than 1024 bytes",
                url);
        a->s3 = 1;
        a->bucket = dupn(b, bn);
        a->key = dupn(k, kn);
        if (!a->bucket || !a->key) {
            stk__raddr_free(a);
            return stk_error_set(err, STK_E_NOMEM, "out of memory");
        }
        return STK_OK;
    }
    size_t p = http_prefix(url);
    if (!p) return stk_error_set(err, STK_E_ARG, "%.300s: not an s3://, http:// or https:// address", url);
    const char *h = url + p;
    size_t hn = strcspn(h, "/");
    if (!host_ok(h, hn))
        return stk_error_set(err, STK_E_ARG, "%.300s: no valid host[:port] (no user@ either)", url);
    const char *path = h + hn;
    size_t pn = strlen(path);
    while (pn > 0 && path[pn - 1] == '/') pn--;
    if (pn > 0 && (!uri_ok(path, pn) || !path_ok(path + 1, pn - 1)))
        return stk_error_set(
            err, STK_E_ARG,
            "%.300s: a path must be printable ASCII (percent-encode the rest) without '?', '#', "
            "\"//\", or a \".\" or \"..\" segment",
            url);
    a->s3 = 0;
    a->key = dupn(url, (size_t)(path - url) + pn);
    if (!a->key) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    return STK_OK;
}

void stk__raddr_free(stk__raddr *a)
{
    if (!a) return;
    free(a->bucket);
    free(a->key);
    a->bucket = a->key = NULL;
}

char *stk__raddr_join(const stk__raddr *a, const char *rel)
{
    if (!rel) rel = "";
    while (*rel == '/') rel++;
    const char *head = a->s3 ? "s3://" : "";
    const char *bucket = a->s3 ? a->bucket : "";
    const char *bsep = a->s3 ? "/" : "";
    const char *key = a->key ? a->key : "";
    const char *sep = (*key && *rel) ? "/" : "";
    size_t n = strlen(head) + strlen(bucket) + strlen(bsep) + strlen(key) + strlen(sep) + strlen(rel) + 1;
    char *s = malloc(n);
    if (!s) return NULL;
    snprintf(s, n, "%s%s%s%s%s%s", head, bucket, (*key || *rel) ? bsep : "", key, sep, rel);
    return s;
}

char *stk__rurl_encode(const char *s, size_t n, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    char *o = malloc(3 * n + 1);
    if (!o) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' ||
            ch == '_' || ch == '.' || ch == '~' || (keep_slash && ch == '/')) {
            o[j++] = (char)ch;
        } else {
            o[j++] = '%';
            o[j++] = hex[ch >> 4];
            o[j++] = hex[ch & 15];
        }
    }
    o[j] = '\0';
    return o;
}

typedef struct {
    char *name, *value;
} qpair;

static int qpair_cmp(const void *a, const void *b)
{
    const qpair *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

char *stk__rquery(const char *const *kv, size_t npairs)
{
    qpair *p = calloc(npairs ? npairs : 1, sizeof *p);
    if (!p) return NULL;
    size_t total = 1;
    char *out = NULL;
    for (size_t i = 0; i < npairs; i++) {
        const char *v = kv[2 * i + 1] ? kv[2 * i + 1] : "";
        p[i].name = stk__rurl_encode(kv[2 * i], strlen(kv[2 * i]), 0);
        p[i].value = stk__rurl_encode(v, strlen(v), 0);
        if (!p[i].name || !p[i].value) goto done;
        total += strlen(p[i].name) + strlen(p[i].value) + 2;
    }
    /* Byte order of the encoded names: what SigV4's canonical query is. */
    qsort(p, npairs, sizeof *p, qpair_cmp);
    out = malloc(total);
    if (!out) goto done;
    size_t j = 0;
    for (size_t i = 0; i < npairs; i++)
        j += (size_t)sprintf(out + j, "%s%s=%s", i ? "&" : "", p[i].name, p[i].value);
    out[j] = '\0';
done:
    for (size_t i = 0; i < npairs; i++) {
        free(p[i].name);
        free(p[i].value);
    }
    free(p);
    return out;
}

int stk__rendpoint_check(const char *endpoint, char **out, stk_error *err)
{
    *out = NULL;
    size_t p = http_prefix(endpoint);
    size_t n = strlen(endpoint);
    if (!p || n > 1024)
        return stk_error_set(err, STK_E_ARG, "endpoint %.300s: not an http:// or https:// address", endpoint);
    const char *h = endpoint + p;
    size_t hn = strcspn(h, "/");
    while (n > p + hn && endpoint[n - 1] == '/') n--;
    if (!host_ok(h, hn) ||
        (n > p + hn && (!uri_ok(h + hn, n - (p + hn)) || !path_ok(h + hn + 1, n - (p + hn) - 1))))
        return stk_error_set(err, STK_E_ARG, "endpoint %.300s: not scheme://host[:port][/path]", endpoint);
    *out = dupn(endpoint, n);
    return *out ? STK_OK : stk_error_set(err, STK_E_NOMEM, "out of memory");
}

char *stk__rurl_object(const char *endpoint, int virtual_host, const char *bucket, const char *key,
                       const char *query)
{
    char *ek = stk__rurl_encode(key, strlen(key), 1);
    if (!ek) return NULL;
    size_t p = http_prefix(endpoint);
    size_t n = strlen(endpoint) + strlen(bucket) + strlen(ek) + (query ? strlen(query) : 0) + 8;
    char *u = malloc(n);
    if (u) {
        const char *q = (query && *query) ? "?" : "";
        if (virtual_host) {
            /* scheme://bucket.host/key: the key's path always starts with '/'. */
            snprintf(u, n, "%.*s%s.%s/%s%s%s", (int)p, endpoint, bucket, endpoint + p, ek, q,
                     query ? query : "");
        } else if (*ek) {
            snprintf(u, n, "%s/%s/%s%s%s", endpoint, bucket, ek, q, query ? query : "");
        } else {
            /* "/bucket" without the trailing '/': S3 takes both, s3rver signs
             * only this form (see tests/remote). */
            snprintf(u, n, "%s/%s%s%s", endpoint, bucket, q, query ? query : "");
        }
    }
    free(ek);
    return u;
}
