/* remote/remote.h - object storage: s3:// and http(s):// datasets.
 *
 * The remote room sits below the format library: format/ (shard and dataset
 * open, the writers, merge) and reader/ (the engine's remote backend) call
 * it; it calls only format/error.c's stk_error_set and libcurl. Internal:
 * users name a dataset "s3://bucket/prefix" or "https://host/path" where they
 * named a directory, and set the AWS variables they already have.
 *
 * Files, one job each:
 *   url.c      addresses: s3://bucket/key and http(s)://host/path, parsed
 *              strictly; the request URL for an endpoint and addressing
 *   config.c   the configuration: AWS_* environment, ~/.aws/credentials and
 *              ~/.aws/config (profiles, credential_process), overrides
 *   client.c   the transport: one curl multi handle on one thread per client,
 *              many requests in flight, connection reuse, SigV4 through
 *              CURLOPT_AWS_SIGV4, retries with backoff and jitter, stall
 *              timeouts, counters
 *   xml.c      the few S3 XML bodies read: ListObjectsV2, the multipart
 *              initiate reply, error bodies
 *   s3.c       the object calls on top: head, get, put, multipart, delete,
 *              list
 *   cache.c    the node-local cache of fetched bytes (cache.h)
 *
 * Secrets never enter an error message, a log line or the stats: messages
 * name the address (s3://bucket/key), the HTTP status and S3's error code.
 *
 * curl_global_init is called once per process, on the first client open,
 * under a pthread_once (libcurl >= 7.84 makes it thread-safe; the once keeps
 * older builds right). A program that calls curl itself may have called it
 * first: a second call is harmless. */
#ifndef STK_REMOTE_H
#define STK_REMOTE_H

#include "stoker/format.h"

#include <stddef.h>
#include <stdint.h>

/* 1 when path names a remote dataset or object: "s3://", "http://",
 * "https://" (case-sensitive scheme, as the AWS CLI). */
int stk__remote_is_url(const char *path);

/* ---- Addresses (url.c) ---------------------------------------------------- */

typedef struct {
    int s3;       /* 1: s3://bucket/key; 0: http(s)://host/path (read-only) */
    char *bucket; /* s3: the bucket; http: NULL */
    char *key;    /* s3: the key or prefix, no leading or trailing '/', may be
                     ""; http: the full URL without a trailing '/' */
} stk__raddr;

/* Strict: a bucket of 3-63 of [a-z0-9.-], a key without "//", "/./",
 * "/../", NUL or control bytes; http(s) needs a host. STK_E_ARG naming the
 * address otherwise. */
int stk__raddr_parse(const char *url, stk__raddr *a, stk_error *err);
void stk__raddr_free(stk__raddr *a);
/* "s3://bucket/key" joined with a relative path ("" gives the address). */
char *stk__raddr_join(const stk__raddr *a, const char *rel);

/* ---- Configuration (config.c) ---------------------------------------------- */

enum { STK__ADDR_AUTO = 0, STK__ADDR_PATH = 1, STK__ADDR_VIRTUAL = 2 };

/* Overrides (per dataset: the reader options, the Python keywords). NULL or
 * 0 members: from the environment, then the profile, then the defaults. */
typedef struct {
    const char *endpoint;      /* AWS_ENDPOINT_URL, S3_ENDPOINT_URL, profile endpoint_url;
                                  default https://s3.<region>.amazonaws.com */
    const char *region;        /* AWS_REGION, AWS_DEFAULT_REGION, profile region; us-east-1 */
    const char *profile;       /* AWS_PROFILE; "default" */
    const char *access_key;    /* AWS_ACCESS_KEY_ID, profile, credential_process */
    const char *secret_key;    /* AWS_SECRET_ACCESS_KEY, ... */
    const char *session_token; /* AWS_SESSION_TOKEN, ... */
    const char *ca_bundle;     /* AWS_CA_BUNDLE, profile ca_bundle */
    int addressing;            /* STK__ADDR_*; AUTO: path style for a custom
                                  endpoint or a bucket with '.', else virtual */
    unsigned max_inflight;     /* requests in flight per client; default 64 */
    unsigned retries;          /* attempts after the first; default 8 */
    double retry_time_s;       /* give up retrying after this long; default 120 */
    double connect_timeout_s;  /* default 10 */
    double stall_s;            /* a body with no byte for this long is abandoned
                                  and retried; default 30 */
    int anonymous;             /* 1: unsigned requests (public buckets, http) */
} stk__rconfig;

/* ---- The client (client.c, s3.c) ------------------------------------------ */

typedef struct stk__remote stk__remote;

/* A client for one bucket (s3) or host (http): the configuration resolved
 * once (missing credentials are an error only when a signed request is
 * made); thread-safe; its I/O thread starts here. */
int stk__remote_open(stk__remote **out, const stk__raddr *a, const stk__rconfig *c, stk_error *err);
void stk__remote_close(stk__remote *r);

/* Counters since open, for the stats and the bench. */
typedef struct {
    uint64_t requests;  /* HTTP requests completed, retries included */
    uint64_t bytes_in;  /* body bytes received (all attempts) */
    uint64_t bytes_out; /* body bytes sent */
    uint64_t retries;   /* attempts repeated, all causes */
    uint64_t retry_5xx; /* of which 500/502/503/504 (SlowDown included), 429 */
    uint64_t retry_net; /* of which resets, timeouts, short bodies, stalls */
    uint64_t failures;  /* requests that failed for good */
    uint64_t inflight_max;
    uint64_t joined; /* of the requests, those that carried several range GETs
                        queued adjacent (one object, bytes back to back) */
} stk__rcounts;
void stk__remote_counts(stk__remote *r, stk__rcounts *c);

/* An object's identity. */
typedef struct {
    uint64_t size;
    char etag[80]; /* as the server sent it, quotes included; "" if none */
} stk__robject;

/* Every call below: key relative to the client's bucket (s3) or a full URL
 * (http, where the key "" is the client's own address); STK_OK, else
 * STK_E_IO with a message naming s3://bucket/key, the HTTP status and S3's
 * error code (AccessDenied, NoSuchBucket, ...). *http (may be NULL) gets the
 * last HTTP status, 0 when no response came: callers tell a missing object
 * (404) from a failure with it. */

int stk__remote_head(stk__remote *r, const char *key, stk__robject *o, long *http, stk_error *err);
/* A whole object into a malloc'd buffer (NUL-terminated, *len excludes the
 * NUL), refused above max bytes; o (may be NULL) gets size and ETag. */
int stk__remote_get_object(stk__remote *r, const char *key, size_t max, char **data, size_t *len,
                           stk__robject *o, long *http, stk_error *err);
/* Bytes [off, off + len) into dst. if_match (NULL: none): the object must
 * still have this ETag (412 is an error naming the object as changed). A
 * short body is retried, never returned. */
int stk__remote_get_range(stk__remote *r, const char *key, uint64_t off, uint64_t len, void *dst,
                          const char *if_match, long *http, stk_error *err);
int stk__remote_put_object(stk__remote *r, const char *key, const void *data, size_t len, long *http,
                           stk_error *err);
/* A local file, as one PUT up to part_size bytes (0: 64 MiB; at least S3's
 * 5 MiB), above it as a multipart upload of part_size parts (larger when
 * 10000 would not do), 8 in flight; a failed multipart upload is aborted
 * (its parts are not left billed). */
int stk__remote_put_file(stk__remote *r, const char *key, const char *path, uint64_t part_size, long *http,
                         stk_error *err);
int stk__remote_delete(stk__remote *r, const char *key, long *http, stk_error *err);

/* Keys under prefix (ListObjectsV2, every page), sorted, with sizes. */
typedef struct {
    size_t n;
    char **keys; /* relative to the bucket */
    uint64_t *sizes;
} stk__rlist;
int stk__remote_list(stk__remote *r, const char *prefix, stk__rlist *out, stk_error *err);
void stk__rlist_free(stk__rlist *l);

/* ---- Many range GETs in flight (client.c) ---------------------------------- */

/* A group of range GETs one caller waits on, run by the client's thread
 * together with every other group's: a reader's queue adds the reads of its
 * next part, starts them, and waits for the current part's. One thread uses
 * a group at a time. A GET that waits for a free connection may go out in
 * one request with queued GETs (of any group) of the bytes right before or
 * after it in the same object; each still lands in its own dst and has its
 * own outcome (stk__rcounts.joined counts such requests). */
typedef struct stk__rgroup stk__rgroup;

stk__rgroup *stk__rgroup_new(stk__remote *r);
void stk__rgroup_free(stk__rgroup *g); /* waits for what it started first */
/* Queue a GET of [off, off + len) of key into dst (len bytes, written only
 * by the client's thread until the group is waited on). key is copied. tag
 * is the caller's. */
int stk__rgroup_add(stk__rgroup *g, const char *key, uint64_t off, uint64_t len, void *dst,
                    const char *if_match, void *tag, stk_error *err);
/* Start what was added since the last start. */
void stk__rgroup_start(stk__rgroup *g);
/* Wait for every started GET (retries happen inside). The first failure, in
 * add order, is the error; all GETs have ended either way. */
int stk__rgroup_wait(stk__rgroup *g, stk_error *err);
/* From any thread, while another uses the group: its GETs queued or in
 * flight, and any started later, end soon (queued ones at once, one in
 * flight at its next bytes), failed as cancelled and never retried, so that
 * a wait returns without their bytes. For a reader that abandons what it
 * prefetched (closing): nothing is downloaded for nobody. Sticky. */
void stk__rgroup_cancel(stk__rgroup *g);
/* After a wait: how many GETs, GET i's outcome and tag; then clear for reuse. */
size_t stk__rgroup_count(const stk__rgroup *g);
int stk__rgroup_result(const stk__rgroup *g, size_t i, void **tag, stk_error *err);
void stk__rgroup_clear(stk__rgroup *g);

#endif
