/* remote/client.c - the transport: one curl multi handle driven by one I/O
 * thread per client.
 *
 * Callers (any thread) hand requests over through a queue under the client's
 * mutex and wake the I/O thread with curl_multi_wakeup; the thread keeps up
 * to max_inflight easy handles busy (reused, so the multi handle's
 * connection cache keeps connections open), and on each completion decides:
 * done, failed for good, or retried after a backoff with full jitter
 * (uniform in [0, min(20 s, 0.1 s * 2^attempt)]), bounded by the retry count
 * and retry_time_s. A request's waiter (a count and a condition variable) is
 * signalled when its last request ends; nothing else is shared.
 *
 * Every wait is bounded: the connect timeout, the stall timeout
 * (CURLOPT_LOW_SPEED_LIMIT of 1 byte/s over stall_s, which covers a server
 * that never answers as well as one that stops mid-body), the retry count
 * and retry time.
 *
 * Signing: CURLOPT_AWS_SIGV4 "aws:amz:REGION:s3" with the key and secret as
 * user name and password. curl 7.88 neither adds x-amz-content-sha256 nor
 * sorts the query: every signed request carries "x-amz-content-sha256:
 * UNSIGNED-PAYLOAD" (curl then signs that value as the payload hash), and
 * s3.c builds its queries canonical already (stk__rquery). */
#define _POSIX_C_SOURCE 200809L
#include "remote_impl.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ERRBODY_MAX (16 * 1024)
/* Joined range GETs (join): at most this many bytes on the wire. */
#define JOIN_MAX ((uint64_t)8 << 20)
/* The join index's buckets at first (a power of two; doubled as it fills). */
#define JINDEX_MIN 64
#define BACKOFF_BASE_S 0.1
#define BACKOFF_CAP_S 20.0
/* Credentials from a credential_process are refreshed this long before they
 * expire. */
#define REFRESH_AHEAD_S 300.0

struct stk__rwaiter {
    pthread_cond_t cv;
    size_t pending;
    int cancelled; /* atomic: its requests end at once, failed (stk__rgroup_cancel) */
};

static int cancelled(const stk__rreq *q)
{
    return q->waiter && __atomic_load_n(&q->waiter->cancelled, __ATOMIC_ACQUIRE);
}

/* A transfer is abandoned when every request it carries is cancelled (one
 * of a joined GET's members cancelled waits for the others' bytes). */
static int all_cancelled(const stk__rreq *q)
{
    if (!q->jfirst) return cancelled(q);
    for (const stk__rreq *m = q->jfirst; m; m = m->jnext)
        if (!cancelled(m)) return 0;
    return 1;
}

typedef struct stk__rattempt {
    CURL *h;
    struct curl_slist *hdrs;
    long status; /* of the last status line seen */
    int have_clen, have_crange, bad_crange, range_checked;
    uint64_t clen, cr_first, cr_last, cr_total;
    uint64_t got, sent, bytes_in;
    struct stk__rreq *cur; /* a joined GET: the member the body is in (NULL: the first) */
    char *ebuf;
    size_t elen;
    int fault, fatal;
    char fault_msg[200];
    char curl_err[CURL_ERROR_SIZE];
    char etag[80];
} stk__rattempt;

struct stk__remote {
    stk__rcfg cfg;
    int s3;
    char *bucket; /* s3 */
    char *base;   /* http: the address */
    char sigv4[160];
    CURLM *multi;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;                 /* the queues, the counters, the waiters */
    stk__rreq *ready_head, *ready_tail; /* doubly linked (next, prev) */
    stk__rreq *delayed;
    /* The ready queue's join candidates (range GETs) by (key, start) and
     * (key, end): jmask + 1 buckets each, jcount entries; seq numbers
     * requests in queue order. */
    stk__rreq **by_off, **by_end;
    size_t jmask, jcount;
    uint64_t seq;
    CURL **idle;
    size_t nidle;
    size_t active;
    int stop;
    int sweep; /* a group was cancelled: end its queued requests */
    stk__rcounts counts;
    uint64_t rng;
    pthread_mutex_t cred_mu; /* the credentials */
    int refreshing;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;
static void global_init(void) { global_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- Response parsing ----------------------------------------------------------- */

static int parse_u64(const char *s, size_t n, uint64_t *v)
{
    if (n == 0 || n > 20) return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (x > (UINT64_MAX - d) / 10) return -1;
        x = x * 10 + d;
    }
    *v = x;
    return 0;
}

int stk__rhttp_content_range(const char *v, size_t n, uint64_t *first, uint64_t *last, uint64_t *total)
{
    if (n < 6 || memcmp(v, "bytes ", 6)) return -1;
    const char *p = v + 6, *end = v + n;
    const char *dash = memchr(p, '-', (size_t)(end - p));
    if (!dash) return -1;
    const char *slash = memchr(dash, '/', (size_t)(end - dash));
    if (!slash) return -1;
    if (parse_u64(p, (size_t)(dash - p), first) || parse_u64(dash + 1, (size_t)(slash - dash - 1), last))
        return -1;
    if (*last < *first) return -1;
    if (end - slash == 2 && slash[1] == '*') {
        *total = UINT64_MAX;
        return 0;
    }
    if (parse_u64(slash + 1, (size_t)(end - slash - 1), total)) return -1;
    if (*last >= *total) return -1;
    return 0;
}

int stk__rhttp_line(const char *line, size_t n, long *status, char *name, size_t name_cap, char *value,
                    size_t value_cap)
{
    if (name_cap < 1 || value_cap < 1) return -1;
    name[0] = value[0] = '\0';
    while (n && (line[n - 1] == '\r' || line[n - 1] == '\n')) n--;
    if (n >= 5 && !memcmp(line, "HTTP/", 5)) {
        const char *sp = memchr(line, ' ', n);
        if (!sp) return -1;
        size_t rest = n - (size_t)(sp + 1 - line);
        if (rest < 3) return -1;
        long st = 0;
        for (int i = 0; i < 3; i++) {
            char ch = sp[1 + i];
            if (ch < '0' || ch > '9') return -1;
            st = st * 10 + (ch - '0');
        }
        if (rest > 3 && sp[4] != ' ') return -1;
        if (st < 100) return -1;
        *status = st;
        return 0;
    }
    const char *colon = memchr(line, ':', n);
    if (!colon || colon == line) return -1;
    size_t nn = (size_t)(colon - line);
    if (nn >= name_cap) return -1;
    for (size_t i = 0; i < nn; i++) {
        unsigned char ch = (unsigned char)line[i];
        if (ch <= ' ' || ch >= 0x7f) return -1;
        name[i] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
    }
    name[nn] = '\0';
    const char *v = colon + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == ' ' || end[-1] == '\t')) end--;
    size_t vn = (size_t)(end - v);
    int truncated = 0;
    if (vn >= value_cap) {
        vn = value_cap - 1;
        truncated = 1;
    }
    memcpy(value, v, vn);
    value[vn] = '\0';
    return truncated;
}

/* ---- Requests ----------------------------------------------------------------- */

stk__rreq *stk__rreq_new(int method, const char *key, char *query)
{
    stk__rreq *q = calloc(1, sizeof *q);
    if (!q || !(q->key = strdup(key ? key : ""))) {
        free(q);
        free(query);
        return NULL;
    }
    q->method = method;
    q->query = query;
    q->body_fd = -1;
    return q;
}

void stk__rreq_free(stk__rreq *q)
{
    if (!q) return;
    free(q->key);
    free(q->query);
    free(q->if_match);
    free(q->url);
    free(q->buf);
    if (q->at) {
        curl_slist_free_all(q->at->hdrs);
        free(q->at->ebuf);
        free(q->at);
    }
    free(q);
}

static const char *method_name(int m)
{
    static const char *const names[] = {"GET", "HEAD", "PUT", "POST", "DELETE"};
    return (m >= 0 && m <= STK__M_DELETE) ? names[m] : "?";
}

void stk__remote_name(const stk__remote *r, const char *key, char *out, size_t cap)
{
    if (r->s3) snprintf(out, cap, "s3://%s/%.400s", r->bucket, key);
    else snprintf(out, cap, "%.460s", *key ? key : r->base);
}

int stk__remote_is_s3(const stk__remote *r) { return r->s3; }

static int fail(stk__rreq *q, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(stk__rreq *q, int code, const char *fmt, ...)
{
    char msg[STK_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    q->code = code;
    stk_error_set(&q->err, code, "%s", msg);
    return code;
}

/* ---- The I/O thread's callbacks --------------------------------------------------- */

static size_t on_header(char *b, size_t sz, size_t nm, void *ud)
{
    stk__rreq *q = ud;
    stk__rattempt *at = q->at;
    size_t n = sz * nm;
    if (all_cancelled(q)) return 0; /* curl ends the transfer; finish() names it cancelled */
    long st = 0;
    char name[64], value[256];
    int k = stk__rhttp_line(b, n, &st, name, sizeof name, value, sizeof value);
    if (k < 0) return n;
    if (!name[0]) {
        /* A new response (after a 100 Continue, say): forget the last one's. */
        at->status = st;
        at->have_clen = at->have_crange = at->bad_crange = 0;
        at->etag[0] = '\0';
        return n;
    }
    if (!strcmp(name, "content-length")) {
        at->have_clen = !k && !parse_u64(value, strlen(value), &at->clen);
    } else if (!strcmp(name, "content-range")) {
        at->have_crange =
            !k && !stk__rhttp_content_range(value, strlen(value), &at->cr_first, &at->cr_last, &at->cr_total);
        at->bad_crange = !at->have_crange;
    } else if (!strcmp(name, "etag") && !k && strlen(value) < sizeof at->etag) {
        memcpy(at->etag, value, strlen(value) + 1);
    }
    return n;
}

static size_t abort_with(stk__rattempt *at, int fatal, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static size_t abort_with(stk__rattempt *at, int fatal, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(at->fault_msg, sizeof at->fault_msg, fmt, ap);
    va_end(ap);
    at->fault = 1;
    at->fatal = fatal;
    return 0; /* curl ends the transfer: CURLE_WRITE_ERROR */
}

static size_t on_body(char *b, size_t sz, size_t nm, void *ud)
{
    stk__rreq *q = ud;
    stk__rattempt *at = q->at;
    size_t n = sz * nm;
    at->bytes_in += n;
    if (at->status < 200 || at->status >= 300) {
        if (!at->ebuf) at->ebuf = malloc(ERRBODY_MAX + 1);
        if (at->ebuf) {
            size_t take = n < ERRBODY_MAX - at->elen ? n : ERRBODY_MAX - at->elen;
            memcpy(at->ebuf + at->elen, b, take);
            at->elen += take;
            at->ebuf[at->elen] = '\0';
        }
        return n;
    }
    if (q->ranged) {
        if (all_cancelled(q)) return 0; /* curl ends the transfer; finish() names it cancelled */
        if (!at->range_checked) {
            uint64_t want_last = q->woff + q->wlen - 1;
            if (at->status == 206) {
                if (!at->have_crange)
                    return abort_with(at, 0, "HTTP 206 %s Content-Range",
                                      at->bad_crange ? "with a malformed" : "without");
                if (at->cr_first != q->woff || at->cr_last != want_last)
                    return abort_with(at, 0, "Content-Range bytes %llu-%llu for bytes %llu-%llu",
                                      (unsigned long long)at->cr_first, (unsigned long long)at->cr_last,
                                      (unsigned long long)q->woff, (unsigned long long)want_last);
            } else if (at->status != 200 || q->woff != 0 || (at->have_clen && at->clen != q->wlen)) {
                return abort_with(at, 1,
                                  "HTTP %ld for a range request (bytes %llu-%llu): the server ignored Range",
                                  at->status, (unsigned long long)q->woff, (unsigned long long)want_last);
            }
            at->range_checked = 1;
        }
        if (n > q->wlen - at->got)
            return abort_with(at, 0, "more than the %llu bytes asked for", (unsigned long long)q->wlen);
        if (!q->jfirst) {
            memcpy((char *)q->dst + at->got, b, n);
            at->got += n;
            return n;
        }
        /* joined: the members tile [woff, woff + wlen) in offset order */
        for (size_t done = 0; done < n;) {
            stk__rreq *m = at->cur ? at->cur : q->jfirst;
            uint64_t pos = q->woff + at->got - m->off, take = m->len - pos;
            if (take > n - done) take = n - done;
            memcpy((char *)m->dst + pos, b + done, take);
            done += take;
            at->got += take;
            at->cur = pos + take == m->len ? m->jnext : m;
        }
        return n;
    }
    if (q->sink) {
        if (n > q->sink_max - q->buf_len)
            return abort_with(at, 1, "larger than the %zu bytes allowed", q->sink_max);
        size_t need = q->buf_len + n + 1, cap = q->buf ? q->buf_len + 1 : 0;
        (void)cap;
        char *nb = realloc(q->buf, need);
        if (!nb) return abort_with(at, 1, "out of memory");
        q->buf = nb;
        memcpy(q->buf + q->buf_len, b, n);
        q->buf_len += n;
        q->buf[q->buf_len] = '\0';
    }
    at->got += n;
    return n;
}

static size_t on_read(char *b, size_t sz, size_t nm, void *ud)
{
    stk__rreq *q = ud;
    stk__rattempt *at = q->at;
    size_t n = sz * nm;
    uint64_t left = q->body_len - at->sent;
    if (n > left) n = (size_t)left;
    if (n == 0) return 0;
    if (q->body_fd >= 0) {
        ssize_t got;
        do {
            got = pread(q->body_fd, b, n, (off_t)(q->body_off + at->sent));
        } while (got < 0 && errno == EINTR);
        if (got <= 0) {
            snprintf(at->fault_msg, sizeof at->fault_msg, "reading the local file: %s",
                     got < 0 ? strerror(errno) : "it shrank");
            at->fault = at->fatal = 1;
            return CURL_READFUNC_ABORT;
        }
        n = (size_t)got;
    } else {
        memcpy(b, (const char *)q->body + at->sent, n);
    }
    at->sent += n;
    return n;
}

/* ---- Attempts ------------------------------------------------------------------- */

/* A handle for an attempt: reset, every option set again. Caller holds mu. */
static int setup(stk__remote *r, stk__rreq *q, CURL *h)
{
    stk__rattempt *at = q->at;
    struct curl_slist *hl = NULL;
    char line[512];
    int ok = 1;
#define ADD(s)                                          \
  do {                                                  \
    struct curl_slist *t_ = curl_slist_append(hl, (s)); \
    if (!t_) ok = 0;                                    \
    else hl = t_;                                       \
  } while (0)
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, q->url);
    curl_easy_setopt(h, CURLOPT_PRIVATE, q);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, at->curl_err);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, q);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, q);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(r->cfg.connect_timeout_s * 1000));
    /* A transfer moving less than 1 byte/s for stall_s (waiting for the
     * reply included) ends with CURLE_OPERATION_TIMEDOUT and is retried. */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)ceil(r->cfg.stall_s));
    if (r->cfg.ca_bundle) curl_easy_setopt(h, CURLOPT_CAINFO, r->cfg.ca_bundle);
    /* curl signs every header it is given, an "Expect:" that removes one
     * included (then refused), so the 100-continue curl sends before a
     * large body stays; its wait is bounded here. */
    curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 200L);
    if (!r->cfg.anonymous) {
        curl_easy_setopt(h, CURLOPT_AWS_SIGV4, r->sigv4);
        pthread_mutex_lock(&r->cred_mu);
        curl_easy_setopt(h, CURLOPT_USERNAME, r->cfg.access_key ? r->cfg.access_key : "");
        curl_easy_setopt(h, CURLOPT_PASSWORD, r->cfg.secret_key ? r->cfg.secret_key : "");
        if (r->cfg.session_token) {
            size_t tn = strlen(r->cfg.session_token) + 32;
            char *t = malloc(tn);
            if (t) {
                snprintf(t, tn, "x-amz-security-token: %s", r->cfg.session_token);
                ADD(t);
                memset(t, 0, tn);
                free(t);
            } else {
                ok = 0;
            }
        }
        pthread_mutex_unlock(&r->cred_mu);
        ADD("x-amz-content-sha256: UNSIGNED-PAYLOAD");
    }
    if (q->ranged) {
        snprintf(line, sizeof line, "Range: bytes=%llu-%llu", (unsigned long long)q->woff,
                 (unsigned long long)(q->woff + q->wlen - 1));
        ADD(line);
    }
    if (q->if_match) {
        snprintf(line, sizeof line, "If-Match: %.80s", q->if_match);
        ADD(line);
    }
    switch (q->method) {
    case STK__M_HEAD:
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        break;
    case STK__M_PUT:
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)q->body_len);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, q);
        break;
    case STK__M_POST:
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->body_len);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->body_len ? (const char *)q->body : "");
        ADD("Content-Type: application/xml");
        break;
    case STK__M_DELETE:
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
        break;
    default:
        break;
    }
#undef ADD
    curl_slist_free_all(at->hdrs);
    at->hdrs = hl;
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    return ok ? 0 : -1;
}

static void attempt_reset(stk__rattempt *at)
{
    CURL *h = at->h;
    struct curl_slist *hl = at->hdrs;
    char *eb = at->ebuf;
    memset(at, 0, sizeof *at);
    at->h = h;
    at->hdrs = hl;
    at->ebuf = eb;
}

static void complete(stk__remote *r, stk__rreq *q)
{
    if (q->code && !cancelled(q)) r->counts.failures++;
    stk__rwaiter *w = q->waiter;
    if (w && --w->pending == 0) pthread_cond_broadcast(&w->cv);
}

/* q and the members joined to it, failed and ended: an attempt that could
 * not start. Caller holds mu. */
static void fail_start(stk__remote *r, stk__rreq *q, const char *what)
{
    stk__rreq *m = q->jfirst ? q->jfirst : q;
    q->jfirst = NULL;
    while (m) {
        stk__rreq *nx = m->jnext;
        m->jnext = NULL;
        fail(m, STK_E_NOMEM, "out of memory (%s)", what);
        complete(r, m);
        m = nx;
    }
}

/* Starts q's next attempt (with its joined members, see join). Caller
 * holds mu. */
static void start(stk__remote *r, stk__rreq *q)
{
    if (!q->at && !(q->at = calloc(1, sizeof *q->at))) {
        fail_start(r, q, "request");
        return;
    }
    CURL *h = r->nidle ? r->idle[--r->nidle] : curl_easy_init();
    if (!h) {
        fail_start(r, q, "curl handle");
        return;
    }
    attempt_reset(q->at);
    q->at->h = h;
    q->buf_len = 0;
    double now = mono();
    for (stk__rreq *m = q->jfirst ? q->jfirst : q; m; m = m->jnext) {
        if (m->t_first == 0) m->t_first = now;
        m->attempts++;
    }
    if (setup(r, q, h) || curl_multi_add_handle(r->multi, h) != CURLM_OK) {
        r->idle[r->nidle++] = h;
        q->at->h = NULL;
        fail_start(r, q, "curl setup");
        return;
    }
    r->active++;
    if (r->active > r->counts.inflight_max) r->counts.inflight_max = r->active;
}

/* ---- The ready queue and its join index ------------------------------------------ */

/* A request join may take into another's GET, or lead one: a plain range
 * GET. */
static int candidate(const stk__rreq *q)
{
    return q->ranged && q->method == STK__M_GET && !q->sink && !q->query;
}

/* FNV-1a of the key. */
static uint64_t key_hash(const char *k)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *k; k++) h = (h ^ (unsigned char)*k) * 0x100000001b3ULL;
    return h;
}

static size_t bucket(const stk__remote *r, uint64_t kh, uint64_t off)
{
    uint64_t h = kh ^ (off * 0x9e3779b97f4a7c15ULL);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 29;
    return (size_t)(h & r->jmask);
}

static void jindex_link(stk__remote *r, stk__rreq *q)
{
    stk__rreq **bo = &r->by_off[bucket(r, q->khash, q->off)];
    stk__rreq **be = &r->by_end[bucket(r, q->khash, q->off + q->len)];
    q->hoff = *bo;
    *bo = q;
    q->hend = *be;
    *be = q;
}

/* Doubles the buckets once they are as many as the entries (kept as they
 * are when memory is short: the chains only grow longer). */
static void jindex_grow(stk__remote *r)
{
    size_t n = (r->jmask + 1) * 2;
    stk__rreq **bo = calloc(n, sizeof *bo), **be = calloc(n, sizeof *be);
    if (!bo || !be) {
        free(bo);
        free(be);
        return;
    }
    stk__rreq **oo = r->by_off;
    size_t on = r->jmask + 1;
    free(r->by_end);
    r->by_off = bo;
    r->by_end = be;
    r->jmask = n - 1;
    for (size_t i = 0; i < on; i++)
        for (stk__rreq *q = oo[i], *nx; q; q = nx) {
            nx = q->hoff;
            jindex_link(r, q);
        }
    free(oo);
}

static void unchain(stk__remote *r, stk__rreq *q)
{
    stk__rreq **pp = &r->by_off[bucket(r, q->khash, q->off)];
    while (*pp != q) pp = &(*pp)->hoff;
    *pp = q->hoff;
    pp = &r->by_end[bucket(r, q->khash, q->off + q->len)];
    while (*pp != q) pp = &(*pp)->hend;
    *pp = q->hend;
    q->hoff = q->hend = NULL;
}

/* Appends q to the ready queue (and the index, where it may join). Caller
 * holds mu. */
static void ready_push(stk__remote *r, stk__rreq *q)
{
    q->next = NULL;
    q->prev = r->ready_tail;
    if (r->ready_tail) r->ready_tail->next = q;
    else r->ready_head = q;
    r->ready_tail = q;
    q->seq = ++r->seq;
    q->indexed = candidate(q);
    if (!q->indexed) return;
    q->khash = key_hash(q->key);
    if (r->jcount > r->jmask) jindex_grow(r);
    jindex_link(r, q);
    r->jcount++;
}

/* Takes q out of the ready queue (and the index). Caller holds mu. */
static void ready_remove(stk__remote *r, stk__rreq *q)
{
    if (q->prev) q->prev->next = q->next;
    else r->ready_head = q->next;
    if (q->next) q->next->prev = q->prev;
    else r->ready_tail = q->prev;
    q->next = q->prev = NULL;
    if (!q->indexed) return;
    unchain(r, q);
    q->indexed = 0;
    r->jcount--;
}

/* Whether p may ride in q's GET: a range GET of the same object and ETag
 * condition, not cancelled, not already joined. */
static int joinable(const stk__rreq *q, const stk__rreq *p)
{
    if (!p->ranged || p->method != STK__M_GET || p->sink || p->query || p->jfirst || cancelled(p)) return 0;
    if ((q->if_match == NULL) != (p->if_match == NULL)) return 0;
    if (q->if_match && strcmp(q->if_match, p->if_match)) return 0;
    return !strcmp(q->key, p->key);
}

/* Before q starts: range GETs still queued behind it whose bytes are
 * adjacent to q's (before or after, repeatedly) leave the queue and ride
 * in q's request, up to JOIN_MAX bytes; of the two neighbours the one
 * queued first joins first. The queue holds what the in-flight limit keeps
 * back, so this joins only while requests wait anyway (a reader's shuffled
 * records of one shard, queued by different batches), never takes bytes
 * nobody asked for, and leaves parallel pieces that can all be in flight
 * alone. Each neighbour is one lookup in the join index. Caller holds mu. */
static void join(stk__remote *r, stk__rreq *q)
{
    q->woff = q->off;
    q->wlen = q->len;
    q->jfirst = q->jnext = NULL;
    if (!candidate(q) || !r->jcount || q->len >= JOIN_MAX) return;
    uint64_t kh = key_hash(q->key);
    stk__rreq *first = q, *last = q;
    for (;;) {
        uint64_t room = JOIN_MAX - q->wlen, at = q->woff + q->wlen;
        stk__rreq *right = NULL, *left = NULL;
        for (stk__rreq *p = r->by_off[bucket(r, kh, at)]; p; p = p->hoff)
            if (p->khash == kh && p->off == at && p->len <= room && joinable(q, p) &&
                (!right || p->seq < right->seq))
                right = p;
        for (stk__rreq *p = r->by_end[bucket(r, kh, q->woff)]; p; p = p->hend)
            if (p->khash == kh && p->off + p->len == q->woff && p->len <= room && joinable(q, p) &&
                (!left || p->seq < left->seq))
                left = p;
        if (!right && !left) break;
        if (right && (!left || right->seq < left->seq)) {
            ready_remove(r, right);
            last->jnext = right;
            last = right;
            q->wlen += right->len;
        } else {
            ready_remove(r, left);
            left->jnext = first;
            first = left;
            q->woff = left->off;
            q->wlen += left->len;
        }
    }
    if (first != last) q->jfirst = first;
}

static double jitter(stk__remote *r, double max)
{
    /* xorshift64*: the client's own state, under mu. */
    uint64_t x = r->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->rng = x;
    return max * (double)((x * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
}

static int retryable_curl(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_BAD_CONTENT_ENCODING:
        return 1;
    default:
        return 0;
    }
}

/* The error body's Code and Message, for a message: " NoSuchKey (The ...)". */
static void s3_code(const stk__rattempt *at, char *out, size_t cap)
{
    char code[64], msg[160];
    out[0] = '\0';
    if (at->ebuf && !stk__xml_error(at->ebuf, at->elen, code, sizeof code, msg, sizeof msg))
        snprintf(out, cap, " %s%s%s%s", code, msg[0] ? " (" : "", msg, msg[0] ? ")" : "");
}

/* The bytes of q an attempt delivered: its own range's share of the wire
 * range when joined. */
static uint64_t delivered(const stk__rreq *q, const stk__rattempt *at, const stk__rreq *lead)
{
    if (q == lead && !lead->jfirst) return at->got;
    uint64_t start = q->off - lead->woff;
    if (at->got <= start) return 0;
    return at->got - start < q->len ? at->got - start : q->len;
}

/* q's attempt (at, run by lead: q itself, or a joined GET q rode in) is
 * over: q finished, failed, or queued again. A member of a joined GET whose
 * own bytes all arrived before the transfer broke is done; the others are
 * retried each on its own (and may be joined again). Caller holds mu. */
static void settle(stk__remote *r, stk__rreq *q, const stk__rreq *lead, const stk__rattempt *at, long status,
                   CURLcode cc)
{
    q->http = status;
    char name[480], why[400], code[240];
    stk__remote_name(r, q->key, name, sizeof name);
    const char *m = method_name(q->method);
    if (cancelled(q)) { /* ended by its group's cancel: never retried */
        fail(q, STK_E_IO, "%s %s: cancelled (its reads were abandoned)", m, name);
        complete(r, q);
        return;
    }
    int kind = 0; /* 1: 5xx, 2: network */
    int joined = lead->jfirst != NULL;
    if (joined && !at->fault && status >= 200 && status < 300 && at->range_checked &&
        delivered(q, at, lead) == q->len)
        cc = CURLE_OK; /* its bytes are in, whatever happened after them */
    if (at->fault && at->fatal) {
        fail(q, STK_E_IO, "%s %s: %s", m, name, at->fault_msg);
    } else if (at->fault) {
        kind = 2;
        snprintf(why, sizeof why, "%s", at->fault_msg);
    } else if (cc != CURLE_OK) {
        const char *ce = at->curl_err[0] ? at->curl_err : curl_easy_strerror(cc);
        if (retryable_curl(cc)) {
            kind = 2;
            snprintf(why, sizeof why, "%s (curl %d)", ce, (int)cc);
        } else {
            fail(q, STK_E_IO, "%s %s: %s (curl %d)", m, name, ce, (int)cc);
        }
    } else if (status == 500 || status == 502 || status == 503 || status == 504 || status == 429) {
        kind = 1;
        s3_code(at, code, sizeof code);
        snprintf(why, sizeof why, "HTTP %ld%s", status, code);
    } else if (status >= 200 && status < 300) {
        if (q->ranged && delivered(q, at, lead) != q->len) {
            kind = 2;
            snprintf(why, sizeof why, "short body: %llu of %llu bytes",
                     (unsigned long long)delivered(q, at, lead), (unsigned long long)q->len);
        } else if (q->method != STK__M_HEAD && at->have_clen && at->got != at->clen && !q->ranged) {
            kind = 2;
            snprintf(why, sizeof why, "short body: %llu of %llu bytes", (unsigned long long)at->got,
                     (unsigned long long)at->clen);
        } else {
            q->code = STK_OK;
            memcpy(q->etag, at->etag, sizeof q->etag);
            if (q->ranged && at->status == 206 && at->cr_total != UINT64_MAX) q->size = at->cr_total;
            else if (at->have_clen) q->size = at->clen;
            else q->size = at->got;
        }
    } else if (status == 412) {
        s3_code(at, code, sizeof code);
        fail(q, STK_E_IO, "%s %s: the object changed (its ETag is no longer %.80s): HTTP 412%s", m, name,
             q->if_match ? q->if_match : "?", code);
    } else {
        s3_code(at, code, sizeof code);
        if (!code[0] && status == 404) snprintf(code, sizeof code, " (not found)");
        if (!code[0] && status == 403) snprintf(code, sizeof code, " (access denied)");
        if (status == 0) snprintf(code, sizeof code, " (no response)");
        fail(q, STK_E_IO, "%s %s: HTTP %ld%s", m, name, status, code);
    }
    if (kind) {
        double now = mono();
        double elapsed = now - q->t_first;
        unsigned retries = q->attempts - 1;
        double cap = BACKOFF_BASE_S * pow(2.0, retries < 30 ? retries : 30);
        double delay = jitter(r, cap < BACKOFF_CAP_S ? cap : BACKOFF_CAP_S);
        if (retries < r->cfg.retries && elapsed + delay < r->cfg.retry_time_s && !r->stop) {
            r->counts.retries++;
            if (kind == 1) r->counts.retry_5xx++;
            else r->counts.retry_net++;
            q->t_not_before = now + delay;
            q->next = r->delayed;
            r->delayed = q;
            return;
        }
        fail(q, STK_E_IO, "%s %s: gave up after %u attempts in %.1f s; the last: %s", m, name, q->attempts,
             elapsed, why);
    }
    complete(r, q);
}

/* Attempt done: q (and each request joined to it) finished, failed, or
 * queued again. Caller holds mu. */
static void finish(stk__remote *r, stk__rreq *q, CURLcode cc)
{
    stk__rattempt *at = q->at;
    long status = 0;
    curl_easy_getinfo(at->h, CURLINFO_RESPONSE_CODE, &status);
    curl_multi_remove_handle(r->multi, at->h);
    r->idle[r->nidle++] = at->h;
    at->h = NULL;
    r->active--;
    r->counts.requests++;
    r->counts.bytes_in += at->bytes_in;
    r->counts.bytes_out += at->sent;
    if (!q->jfirst) {
        settle(r, q, q, at, status, cc);
        return;
    }
    r->counts.joined++;
    /* the leader last: the members read its attempt */
    for (stk__rreq *m = q->jfirst, *nx; m; m = nx) {
        nx = m->jnext;
        if (m != q) {
            m->jnext = NULL;
            settle(r, m, q, at, status, cc);
        }
    }
    q->jnext = NULL;
    settle(r, q, q, at, status, cc);
    q->jfirst = NULL;
}

static void *io_main(void *arg)
{
    stk__remote *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        double now = mono(), next_due = -1;
        if (r->sweep) { /* a cancelled group's queued requests end now, failed */
            r->sweep = 0;
            for (stk__rreq *q = r->ready_head, *nx; q; q = nx) {
                nx = q->next;
                if (cancelled(q)) {
                    ready_remove(r, q);
                    fail(q, STK_E_IO, "%s: cancelled (its reads were abandoned)", method_name(q->method));
                    complete(r, q);
                }
            }
        }
        for (stk__rreq **pp = &r->delayed; *pp;) {
            stk__rreq *q = *pp;
            if (cancelled(q) && !r->stop) {
                *pp = q->next;
                q->next = NULL;
                fail(q, STK_E_IO, "%s: cancelled (its reads were abandoned)", method_name(q->method));
                complete(r, q);
            } else if (q->t_not_before <= now || r->stop) {
                *pp = q->next;
                ready_push(r, q);
            } else {
                if (next_due < 0 || q->t_not_before < next_due) next_due = q->t_not_before;
                pp = &q->next;
            }
        }
        while (r->ready_head && (r->active < r->cfg.max_inflight || r->stop)) {
            stk__rreq *q = r->ready_head;
            ready_remove(r, q);
            if (r->stop) {
                fail(q, STK_E_IO, "%s: the client was closed", method_name(q->method));
                complete(r, q);
            } else if (cancelled(q)) {
                fail(q, STK_E_IO, "%s: cancelled (its reads were abandoned)", method_name(q->method));
                complete(r, q);
            } else {
                join(r, q);
                start(r, q);
            }
        }
        if (r->stop && r->active == 0 && !r->ready_head && !r->delayed) break;
        pthread_mutex_unlock(&r->mu);
        int timeout = 1000;
        if (next_due >= 0) {
            double ms = (next_due - now) * 1000 + 1;
            if (ms < timeout) timeout = ms < 0 ? 0 : (int)ms;
        }
        curl_multi_poll(r->multi, NULL, 0, timeout, NULL);
        int running = 0;
        curl_multi_perform(r->multi, &running);
        pthread_mutex_lock(&r->mu);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(r->multi, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            stk__rreq *q = NULL;
            CURL *h = msg->easy_handle;
            CURLcode cc = msg->data.result;
            curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&q);
            finish(r, q, cc);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---- Open, close, counters ------------------------------------------------------- */

int stk__remote_open(stk__remote **out, const stk__raddr *a, const stk__rconfig *c, stk_error *err)
{
    *out = NULL;
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return stk_error_set(err, STK_E_IO, "libcurl failed to initialise: %s",
                             curl_easy_strerror(global_rc));
    stk__remote *r = calloc(1, sizeof *r);
    if (!r) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    int rc = stk__rcfg_resolve(&r->cfg, a, c, err);
    if (rc) {
        free(r);
        return rc;
    }
    r->s3 = a->s3;
    r->bucket = a->bucket ? strdup(a->bucket) : NULL;
    r->base = strdup(a->key ? a->key : "");
    r->idle = calloc(r->cfg.max_inflight, sizeof *r->idle);
    r->multi = curl_multi_init();
    r->jmask = JINDEX_MIN - 1;
    r->by_off = calloc(JINDEX_MIN, sizeof *r->by_off);
    r->by_end = calloc(JINDEX_MIN, sizeof *r->by_end);
    r->rng = ((uint64_t)(uintptr_t)r ^ (uint64_t)(wall() * 1e6)) | 1;
    snprintf(r->sigv4, sizeof r->sigv4, "aws:amz:%.64s:s3", r->cfg.region);
    if ((a->s3 && !r->bucket) || !r->base || !r->idle || !r->multi || !r->by_off || !r->by_end) {
        rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
        goto bad;
    }
    curl_multi_setopt(r->multi, CURLMOPT_MAXCONNECTS, (long)r->cfg.max_inflight);
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->cred_mu, NULL);
    int te = pthread_create(&r->thread, NULL, io_main, r);
    if (te) {
        pthread_mutex_destroy(&r->mu);
        pthread_mutex_destroy(&r->cred_mu);
        rc = stk_error_set(err, STK_E_IO, "remote client: cannot start its thread: %s", strerror(te));
        goto bad;
    }
    r->thread_started = 1;
    *out = r;
    return STK_OK;
bad:
    if (r->multi) curl_multi_cleanup(r->multi);
    free(r->idle);
    free(r->by_off);
    free(r->by_end);
    free(r->bucket);
    free(r->base);
    stk__rcfg_free(&r->cfg);
    free(r);
    return rc;
}

void stk__remote_close(stk__remote *r)
{
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_mutex_unlock(&r->mu);
    curl_multi_wakeup(r->multi);
    pthread_join(r->thread, NULL);
    for (size_t i = 0; i < r->nidle; i++) curl_easy_cleanup(r->idle[i]);
    curl_multi_cleanup(r->multi);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->cred_mu);
    free(r->idle);
    free(r->by_off);
    free(r->by_end);
    free(r->bucket);
    free(r->base);
    stk__rcfg_free(&r->cfg);
    free(r);
}

void stk__remote_counts(stk__remote *r, stk__rcounts *c)
{
    pthread_mutex_lock(&r->mu);
    *c = r->counts;
    pthread_mutex_unlock(&r->mu);
}

/* ---- Submitting ------------------------------------------------------------------ */

/* Credentials from a credential_process refreshed when they are about to
 * expire; the process runs outside the lock, one refresh at a time. */
static int creds_ready(stk__remote *r, stk_error *err)
{
    if (r->cfg.anonymous) return STK_OK;
    pthread_mutex_lock(&r->cred_mu);
    int have = r->cfg.access_key && r->cfg.secret_key;
    double expiration = r->cfg.expiration;
    int due = stk__rcfg_renewable(&r->cfg) &&
              (!have || (expiration > 0 && wall() + REFRESH_AHEAD_S >= expiration)) && !r->refreshing;
    if (due) r->refreshing = 1;
    pthread_mutex_unlock(&r->cred_mu);
    if (!have && !due)
        return stk_error_set(
            err, STK_E_ARG,
            "no credentials for s3://%s: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
            "AWS_PROFILE with ~/.aws/credentials (or anonymous access)",
            r->bucket ? r->bucket : "");
    if (!due) return STK_OK;
    /* The source's fields of cfg are fixed after open: read without the lock. */
    char *ak, *sk, *tok;
    double exp;
    int rc = stk__rcfg_fetch(&r->cfg, &ak, &sk, &tok, &exp, err);
    char *old[3] = {NULL, NULL, NULL};
    pthread_mutex_lock(&r->cred_mu);
    r->refreshing = 0;
    if (rc == STK_OK) {
        old[0] = r->cfg.access_key;
        old[1] = r->cfg.secret_key;
        old[2] = r->cfg.session_token;
        r->cfg.access_key = ak;
        r->cfg.secret_key = sk;
        r->cfg.session_token = tok;
        r->cfg.expiration = exp;
    }
    pthread_mutex_unlock(&r->cred_mu);
    for (int i = 0; i < 3; i++) {
        if (old[i]) memset(old[i], 0, strlen(old[i]));
        free(old[i]);
    }
    /* A renewal that failed while the old credentials still hold is tried
     * again on the next request. */
    if (rc && have && wall() < expiration) return STK_OK;
    return rc;
}

/* Ready for the queue: URL built, credentials at hand; else q failed. */
static int prepare(stk__remote *r, stk__rreq *q)
{
    stk_error e;
    char name[480];
    q->code = STK_OK;
    q->attempts = 0;
    q->t_first = 0;
    free(q->url);
    q->url = NULL;
    if (!stk__rkey_ok(q->key)) {
        stk__remote_name(r, q->key, name, sizeof name);
        return fail(q, STK_E_ARG, "%s: a key with control bytes or over 1024 bytes", name);
    }
    if (r->s3) q->url = stk__rurl_object(r->cfg.endpoint, r->cfg.virtual_host, r->bucket, q->key, q->query);
    else q->url = strdup(*q->key ? q->key : r->base);
    if (!q->url) return fail(q, STK_E_NOMEM, "out of memory");
    if (creds_ready(r, &e)) return fail(q, e.code, "%s", e.msg);
    return STK_OK;
}

/* Queues the n requests under waiter w (those prepare fails end at once). */
static void submit(stk__remote *r, stk__rreq **qs, size_t n, stk__rwaiter *w)
{
    for (size_t i = 0; i < n; i++) prepare(r, qs[i]);
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < n; i++) {
        stk__rreq *q = qs[i];
        if (q->code) {
            r->counts.failures++;
            continue;
        }
        q->waiter = w;
        w->pending++;
        if (w->cancelled) r->sweep = 1; /* ends them at once */
        ready_push(r, q);
    }
    pthread_mutex_unlock(&r->mu);
    curl_multi_wakeup(r->multi);
}

static void wait_for(stk__remote *r, stk__rwaiter *w)
{
    pthread_mutex_lock(&r->mu);
    while (w->pending) pthread_cond_wait(&w->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

int stk__rreq_runv(stk__remote *r, stk__rreq **q, size_t n)
{
    stk__rwaiter w = {.pending = 0};
    pthread_cond_init(&w.cv, NULL);
    submit(r, q, n, &w);
    wait_for(r, &w);
    pthread_cond_destroy(&w.cv);
    for (size_t i = 0; i < n; i++)
        if (q[i]->code) return q[i]->code;
    return STK_OK;
}

int stk__rreq_run(stk__remote *r, stk__rreq *q) { return stk__rreq_runv(r, &q, 1); }

/* ---- Groups of range GETs --------------------------------------------------------- */

struct stk__rgroup {
    stk__remote *r;
    stk__rreq **q;
    size_t n, cap, started;
    stk__rwaiter w;
};

stk__rgroup *stk__rgroup_new(stk__remote *r)
{
    stk__rgroup *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->r = r;
    pthread_cond_init(&g->w.cv, NULL);
    return g;
}

void stk__rgroup_clear(stk__rgroup *g)
{
    for (size_t i = 0; i < g->n; i++) stk__rreq_free(g->q[i]);
    g->n = g->started = 0;
}

void stk__rgroup_free(stk__rgroup *g)
{
    if (!g) return;
    wait_for(g->r, &g->w);
    stk__rgroup_clear(g);
    free(g->q);
    pthread_cond_destroy(&g->w.cv);
    free(g);
}

int stk__rgroup_add(stk__rgroup *g, const char *key, uint64_t off, uint64_t len, void *dst,
                    const char *if_match, void *tag, stk_error *err)
{
    if (len == 0 || off + len < off)
        return stk_error_set(err, STK_E_ARG, "remote range GET: empty or overflowing range at %llu",
                             (unsigned long long)off);
    if (g->n == g->cap) {
        size_t nc = g->cap ? 2 * g->cap : 64;
        stk__rreq **nq = realloc(g->q, nc * sizeof *nq);
        if (!nq) return stk_error_set(err, STK_E_NOMEM, "out of memory");
        g->q = nq;
        g->cap = nc;
    }
    stk__rreq *q = stk__rreq_new(STK__M_GET, key, NULL);
    if (!q || (if_match && !(q->if_match = strdup(if_match)))) {
        stk__rreq_free(q);
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    }
    q->ranged = 1;
    q->off = off;
    q->len = len;
    q->dst = dst;
    q->tag = tag;
    g->q[g->n++] = q;
    return STK_OK;
}

void stk__rgroup_cancel(stk__rgroup *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->r->mu);
    __atomic_store_n(&g->w.cancelled, 1, __ATOMIC_RELEASE);
    g->r->sweep = 1;
    pthread_mutex_unlock(&g->r->mu);
    curl_multi_wakeup(g->r->multi);
}

void stk__rgroup_start(stk__rgroup *g)
{
    if (g->started == g->n) return;
    submit(g->r, g->q + g->started, g->n - g->started, &g->w);
    g->started = g->n;
}

int stk__rgroup_wait(stk__rgroup *g, stk_error *err)
{
    wait_for(g->r, &g->w);
    for (size_t i = 0; i < g->started; i++)
        if (g->q[i]->code) {
            if (err) *err = g->q[i]->err;
            return g->q[i]->code;
        }
    return STK_OK;
}

size_t stk__rgroup_count(const stk__rgroup *g) { return g->n; }

int stk__rgroup_result(const stk__rgroup *g, size_t i, void **tag, stk_error *err)
{
    if (i >= g->n) return stk_error_set(err, STK_E_RANGE, "remote group: no GET %zu", i);
    if (tag) *tag = g->q[i]->tag;
    if (g->q[i]->code && err) *err = g->q[i]->err;
    return g->q[i]->code;
}
