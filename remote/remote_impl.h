/* remote/remote_impl.h - what the files of remote/ share beyond remote.h.
 *
 * Internal to remote/ (and its tests and fuzz targets): the resolved
 * configuration, the parsers of untrusted bytes (the ~/.aws INI files, the
 * credential_process JSON, S3's XML bodies, HTTP response headers), the
 * request URL and canonical query builders, and the request engine s3.c
 * drives. */
#ifndef STK_REMOTE_IMPL_H
#define STK_REMOTE_IMPL_H

#include "remote.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* ---- url.c ----------------------------------------------------------------- */

/* AWS SigV4 URI encoding: every byte but A-Z a-z 0-9 - _ . ~ as %XX
 * (uppercase), '/' kept when keep_slash. NULL when out of memory. */
char *stk__rurl_encode(const char *s, size_t n, int keep_slash);
/* A canonical query string: the npairs pairs kv[2i] = kv[2i+1], each encoded,
 * sorted by name then value, joined with '&' ("" when npairs is 0). A NULL
 * value is written as an empty one ("uploads="). */
char *stk__rquery(const char *const *kv, size_t npairs);
/* An endpoint "http(s)://host[:port][/base]" checked; *out the canonical form
 * without a trailing '/'. STK_E_ARG naming it otherwise. */
int stk__rendpoint_check(const char *endpoint, char **out, stk_error *err);
/* The request URL of key (may be "") in bucket at the endpoint, path style
 * or virtual-hosted, with query (NULL or "": none). NULL: out of memory. */
char *stk__rurl_object(const char *endpoint, int virtual_host, const char *bucket, const char *key,
                       const char *query);
/* A key a request may carry: no NUL or control bytes, not longer than 1024. */
int stk__rkey_ok(const char *key);

/* ---- config.c -------------------------------------------------------------- */

typedef struct {
    char *endpoint;     /* canonical, no trailing '/' */
    char *region;       /* never NULL */
    char *profile;      /* never NULL */
    char *ca_bundle;    /* NULL: curl's default */
    char *cred_process; /* the profile's credential_process, NULL if none */
    /* Web identity (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN, or the
     * profile's): STS AssumeRoleWithWebIdentity at sts_endpoint. */
    char *wi_token_file, *wi_role_arn, *wi_session, *sts_endpoint;
    char *cred_source; /* where the credentials came from, for messages */
    int virtual_host;  /* 1: bucket.host; 0: host/bucket */
    int anonymous;     /* unsigned requests */
    unsigned max_inflight, retries;
    double retry_time_s, connect_timeout_s, stall_s;
    /* the credentials (client.c guards them with its own lock once open) */
    char *access_key, *secret_key, *session_token;
    double expiration; /* seconds since the epoch they expire; 0: never */
} stk__rcfg;

/* The configuration for address a: c's members first, then the environment,
 * then the profile files, then the defaults. Missing credentials are not an
 * error here. */
int stk__rcfg_resolve(stk__rcfg *out, const stk__raddr *a, const stk__rconfig *c, stk_error *err);
void stk__rcfg_free(stk__rcfg *c);
/* 1 when the credentials come from a source that can renew them (a
 * credential_process, web identity). */
int stk__rcfg_renewable(const stk__rcfg *c);
/* New credentials from that source (c is only read: its source's fields are
 * fixed after resolve, so a client calls this without its lock). */
int stk__rcfg_fetch(const stk__rcfg *c, char **access_key, char **secret_key, char **token,
                    double *expiration, stk_error *err);
/* stk__rcfg_fetch, and the credentials replaced. */
int stk__rcfg_refresh(stk__rcfg *c, stk_error *err);

/* The INI dialect of ~/.aws/credentials and ~/.aws/config, from a buffer:
 * "[section]" lines, "key = value" lines, '#' and ';' comment lines, indented
 * continuation lines (the nested "s3 =" blocks; passed with the nested key
 * as "s3.key"). Names are trimmed; keys folded to lowercase. cb returns
 * nonzero to stop. Returns the number of entries, -1 on a malformed line
 * (its 1-based number in *line when line is not NULL). Bounded: lines up to
 * 4096 bytes, sections and keys up to 255. */
typedef int (*stk__ini_cb)(void *ud, const char *section, const char *key, const char *value);
int stk__ini_parse(const char *buf, size_t len, stk__ini_cb cb, void *ud, size_t *line);

/* A credential_process's standard output (JSON, Version 1): the strings
 * malloc'd; *expiration 0 when absent. STK_E_FORMAT naming what is wrong
 * (never a value). */
int stk__cred_json_parse(const char *buf, size_t len, char **access_key, char **secret_key, char **token,
                         double *expiration, stk_error *err);
/* An ISO 8601 UTC time ("2026-12-07T17:00:00Z", fractions allowed) as
 * seconds since the epoch; -1 when malformed. */
double stk__iso8601_parse(const char *s);

/* ---- xml.c ----------------------------------------------------------------- */

/* The <Error> body: Code and Message, decoded, truncated to their buffers;
 * 0 when the body has an <Error> element, -1 otherwise. */
int stk__xml_error(const char *buf, size_t len, char *code, size_t code_cap, char *msg, size_t msg_cap);
/* One ListObjectsV2 page: its keys and sizes appended to l, *truncated from
 * IsTruncated, *next the NextContinuationToken (malloc'd, NULL if none).
 * STK_E_FORMAT on a body that is not one. */
int stk__xml_list(const char *buf, size_t len, stk__rlist *l, int *truncated, char **next, stk_error *err);
/* The UploadId of an InitiateMultipartUploadResult (malloc'd). */
int stk__xml_initiate(const char *buf, size_t len, char **upload_id, stk_error *err);
/* The text of the first element named name (decoded, malloc'd), NULL if
 * none or the body is malformed. */
char *stk__xml_text(const char *buf, size_t len, const char *name);
/* s with the five XML entities and numeric references decoded (n bytes);
 * NULL on a bad reference or out of memory. */
char *stk__xml_decode(const char *s, size_t n);

/* ---- client.c: responses ---------------------------------------------------- */

/* "bytes FIRST-LAST/TOTAL" (TOTAL may be "*"; *total then UINT64_MAX): 0, or
 * -1 when malformed or LAST < FIRST. */
int stk__rhttp_content_range(const char *v, size_t n, uint64_t *first, uint64_t *last, uint64_t *total);
/* One response header line (without CR LF): the status line ("HTTP/1.1 206
 * Partial Content", *status set, name "" ) or "Name: value" (name and value
 * trimmed into the buffers, name lowercased); -1 when neither. */
int stk__rhttp_line(const char *line, size_t n, long *status, char *name, size_t name_cap, char *value,
                    size_t value_cap);

/* ---- client.c: the request engine (s3.c builds requests) --------------------- */

enum { STK__M_GET, STK__M_HEAD, STK__M_PUT, STK__M_POST, STK__M_DELETE };

typedef struct stk__rreq stk__rreq;
typedef struct stk__rwaiter stk__rwaiter;

struct stk__rreq {
    /* The caller's part. */
    int method;
    char *key;      /* owned: the key (s3) or URL (http) */
    char *query;    /* owned: canonical query, NULL: none */
    char *if_match; /* owned, NULL: none */
    int ranged;     /* 1: GET of [off, off + len) into dst */
    uint64_t off, len;
    void *dst;
    int sink; /* 1: the body into buf (up to sink_max) */
    size_t sink_max;
    const void *body; /* PUT/POST from memory */
    size_t body_len;
    int body_fd; /* PUT from a file (>= 0): body_len bytes at body_off */
    uint64_t body_off;
    void *tag;
    /* The outcome. */
    int code; /* STK_OK or the error */
    stk_error err;
    long http;
    uint64_t size; /* Content-Length, or the total of a Content-Range */
    char etag[80];
    char *buf; /* sink: NUL-terminated */
    size_t buf_len;
    /* The engine's part. */
    stk__rreq *next, *prev; /* the ready queue (prev), or the delayed list */
    /* The ready queue's index of join candidates (client.c, jindex): chains
     * of the buckets by start and by end offset, the key's hash and the
     * order it was queued in. */
    stk__rreq *hoff, *hend;
    uint64_t khash, seq;
    int indexed;
    /* A joined GET (client.c, join): range GETs of one object queued
     * adjacent to each other go out as one request whose body is cut back
     * into each one's dst. The leader (the one started) carries the range
     * on the wire [woff, woff + wlen) and jfirst, the first of its members
     * in offset order (itself included), chained by jnext; NULL: alone. */
    stk__rreq *jfirst, *jnext;
    uint64_t woff, wlen;
    stk__rwaiter *waiter;
    char *url;
    unsigned attempts;
    double t_first, t_not_before;
    struct stk__rattempt *at;
};

/* A request made ready: key and query are taken over. */
stk__rreq *stk__rreq_new(int method, const char *key, char *query);
void stk__rreq_free(stk__rreq *q);
/* Runs q to its end (retries included); q->code, q->err; returns q->code. */
int stk__rreq_run(stk__remote *r, stk__rreq *q);
/* Runs n requests at once; returns the first failure's code in array order
 * (each has its own outcome). */
int stk__rreq_runv(stk__remote *r, stk__rreq **q, size_t n);
/* "s3://bucket/key", or the URL of key (http), for messages. */
void stk__remote_name(const stk__remote *r, const char *key, char *out, size_t cap);
int stk__remote_is_s3(const stk__remote *r);
/* stk__remote_list with max_keys keys a page (0: S3's 1000), for tests. */
int stk__remote_list_page(stk__remote *r, const char *prefix, unsigned max_keys, stk__rlist *out,
                          stk_error *err);

#endif
