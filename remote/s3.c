/* remote/s3.c - the object calls on top of the request engine: head, get,
 * put (one PUT or a multipart upload), delete, list (ListObjectsV2). Every
 * query string is built canonical (sorted, encoded: stk__rquery), as curl
 * 7.88 signs it as given. */
#define _POSIX_C_SOURCE 200809L
#include "remote_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIB (1024ull * 1024ull)
/* S3's rules: parts of 5 MiB at least (but the last), 10000 parts at most. */
#define PART_MIN (5 * MIB)
#define PARTS_MAX 10000u
#define PART_DEFAULT (64 * MIB)
/* Parts uploaded at once. */
#define PARTS_INFLIGHT 8u
/* A listing page or an XML reply is refused above this. */
#define XML_MAX (64u * 1024u * 1024u)

static int oom(stk_error *err) { return stk_error_set(err, STK_E_NOMEM, "out of memory"); }

/* q's outcome into the caller's: its error, its status. */
static int outcome(stk__rreq *q, long *http, stk_error *err)
{
    if (http) *http = q->http;
    if (q->code && err) *err = q->err;
    return q->code;
}

int stk__remote_head(stk__remote *r, const char *key, stk__robject *o, long *http, stk_error *err)
{
    stk__rreq *q = stk__rreq_new(STK__M_HEAD, key, NULL);
    if (!q) return oom(err);
    int rc = stk__rreq_run(r, q);
    if (rc == STK_OK && o) {
        o->size = q->size;
        snprintf(o->etag, sizeof o->etag, "%s", q->etag);
    }
    rc = outcome(q, http, err);
    stk__rreq_free(q);
    return rc;
}

int stk__remote_get_object(stk__remote *r, const char *key, size_t max, char **data, size_t *len,
                           stk__robject *o, long *http, stk_error *err)
{
    *data = NULL;
    *len = 0;
    stk__rreq *q = stk__rreq_new(STK__M_GET, key, NULL);
    if (!q) return oom(err);
    q->sink = 1;
    q->sink_max = max;
    int rc = stk__rreq_run(r, q);
    if (rc == STK_OK) {
        if (!q->buf && !(q->buf = calloc(1, 1))) {
            stk__rreq_free(q);
            return oom(err);
        }
        *data = q->buf;
        *len = q->buf_len;
        q->buf = NULL;
        if (o) {
            o->size = *len;
            snprintf(o->etag, sizeof o->etag, "%s", q->etag);
        }
    }
    rc = outcome(q, http, err);
    stk__rreq_free(q);
    return rc;
}

int stk__remote_get_range(stk__remote *r, const char *key, uint64_t off, uint64_t len, void *dst,
                          const char *if_match, long *http, stk_error *err)
{
    if (http) *http = 0;
    if (len == 0) return STK_OK;
    if (off + len < off) return stk_error_set(err, STK_E_ARG, "range GET: the range overflows");
    stk__rreq *q = stk__rreq_new(STK__M_GET, key, NULL);
    if (!q || (if_match && !(q->if_match = strdup(if_match)))) {
        stk__rreq_free(q);
        return oom(err);
    }
    q->ranged = 1;
    q->off = off;
    q->len = len;
    q->dst = dst;
    stk__rreq_run(r, q);
    int rc = outcome(q, http, err);
    stk__rreq_free(q);
    return rc;
}

int stk__remote_put_object(stk__remote *r, const char *key, const void *data, size_t len, long *http,
                           stk_error *err)
{
    stk__rreq *q = stk__rreq_new(STK__M_PUT, key, NULL);
    if (!q) return oom(err);
    q->body = data;
    q->body_len = len;
    stk__rreq_run(r, q);
    int rc = outcome(q, http, err);
    stk__rreq_free(q);
    return rc;
}

int stk__remote_delete(stk__remote *r, const char *key, long *http, stk_error *err)
{
    stk__rreq *q = stk__rreq_new(STK__M_DELETE, key, NULL);
    if (!q) return oom(err);
    stk__rreq_run(r, q);
    int rc = outcome(q, http, err);
    stk__rreq_free(q);
    return rc;
}

/* ---- Multipart ------------------------------------------------------------------ */

static char *query2(const char *k1, const char *v1, const char *k2, const char *v2)
{
    const char *kv[4] = {k1, v1, k2, v2};
    return stk__rquery(kv, k2 ? 2 : 1);
}

/* The CompleteMultipartUpload body: every part's number and ETag. */
static char *complete_body(char (*etags)[80], unsigned nparts, size_t *len)
{
    size_t cap = 64 + (size_t)nparts * (64 + 6 * 80), n = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    n += (size_t)snprintf(b + n, cap - n, "<CompleteMultipartUpload>");
    for (unsigned i = 0; i < nparts; i++) {
        n += (size_t)snprintf(b + n, cap - n, "<Part><PartNumber>%u</PartNumber><ETag>", i + 1);
        for (const char *e = etags[i]; *e; e++) {
            const char *rep = *e == '&'   ? "&amp;"
                              : *e == '<' ? "&lt;"
                              : *e == '>' ? "&gt;"
                              : *e == '"' ? "&quot;"
                                          : NULL;
            if (rep) n += (size_t)snprintf(b + n, cap - n, "%s", rep);
            else b[n++] = *e;
        }
        n += (size_t)snprintf(b + n, cap - n, "</ETag></Part>");
    }
    n += (size_t)snprintf(b + n, cap - n, "</CompleteMultipartUpload>");
    *len = n;
    return b;
}

static void abort_upload(stk__remote *r, const char *key, const char *upload_id)
{
    stk__rreq *q = stk__rreq_new(STK__M_DELETE, key, query2("uploadId", upload_id, NULL, NULL));
    if (q) stk__rreq_run(r, q);
    stk__rreq_free(q);
}

static int multipart(stk__remote *r, const char *key, int fd, uint64_t size, uint64_t part, long *http,
                     stk_error *err)
{
    char name[480];
    stk__remote_name(r, key, name, sizeof name);
    if ((size + part - 1) / part > PARTS_MAX) {
        part = (size + PARTS_MAX - 1) / PARTS_MAX;
        part = (part + MIB - 1) / MIB * MIB;
    }
    unsigned nparts = (unsigned)((size + part - 1) / part);

    /* Initiate. */
    stk__rreq *q = stk__rreq_new(STK__M_POST, key, query2("uploads", NULL, NULL, NULL));
    if (!q) return oom(err);
    q->sink = 1;
    q->sink_max = XML_MAX;
    int rc = stk__rreq_run(r, q);
    char *upload_id = NULL;
    if (rc == STK_OK) {
        stk_error xe;
        if (stk__xml_initiate(q->buf ? q->buf : "", q->buf_len, &upload_id, &xe)) {
            stk_error_set(&q->err, STK_E_IO, "POST %s (initiate multipart upload): the reply: %s", name,
                          xe.msg);
            q->code = STK_E_IO;
        }
    }
    rc = outcome(q, http, err);
    stk__rreq_free(q);
    if (rc) return rc;

    /* The parts, PARTS_INFLIGHT at once. */
    char(*etags)[80] = calloc(nparts, sizeof *etags);
    stk__rreq *batch[PARTS_INFLIGHT];
    unsigned nb = 0;
    if (!etags) rc = oom(err);
    for (unsigned p0 = 0; rc == STK_OK && p0 < nparts; p0 += PARTS_INFLIGHT) {
        nb = 0;
        for (unsigned i = p0; i < nparts && i < p0 + PARTS_INFLIGHT; i++) {
            char num[16];
            snprintf(num, sizeof num, "%u", i + 1);
            stk__rreq *pq = stk__rreq_new(STK__M_PUT, key, query2("partNumber", num, "uploadId", upload_id));
            if (!pq) {
                rc = oom(err);
                break;
            }
            pq->body_fd = fd;
            pq->body_off = (uint64_t)i * part;
            pq->body_len = (size_t)(i + 1 == nparts ? size - pq->body_off : part);
            batch[nb++] = pq;
        }
        if (rc == STK_OK) {
            stk__rreq_runv(r, batch, nb);
            for (unsigned i = 0; i < nb && rc == STK_OK; i++) {
                if (batch[i]->code) {
                    rc = outcome(batch[i], http, err);
                } else if (!batch[i]->etag[0]) {
                    rc = stk_error_set(err, STK_E_IO, "PUT %s (part %u of %u): no ETag in the reply", name,
                                       p0 + i + 1, nparts);
                } else {
                    memcpy(etags[p0 + i], batch[i]->etag, sizeof *etags);
                }
            }
        }
        for (unsigned i = 0; i < nb; i++) stk__rreq_free(batch[i]);
    }

    /* Complete: a 200 reply may still carry an <Error>. */
    if (rc == STK_OK) {
        size_t blen = 0;
        char *body = complete_body(etags, nparts, &blen);
        q = body ? stk__rreq_new(STK__M_POST, key, query2("uploadId", upload_id, NULL, NULL)) : NULL;
        if (!q) {
            rc = oom(err);
        } else {
            q->body = body;
            q->body_len = blen;
            q->sink = 1;
            q->sink_max = XML_MAX;
            rc = stk__rreq_run(r, q);
            char code[64], msg[160];
            if (rc == STK_OK && q->buf &&
                !stk__xml_error(q->buf, q->buf_len, code, sizeof code, msg, sizeof msg)) {
                stk_error_set(&q->err, STK_E_IO, "POST %s (complete multipart upload): %s (%s)", name, code,
                              msg);
                q->code = STK_E_IO;
            }
            rc = outcome(q, http, err);
        }
        stk__rreq_free(q);
        free(body);
    }
    if (rc) abort_upload(r, key, upload_id);
    free(etags);
    free(upload_id);
    return rc;
}

int stk__remote_put_file(stk__remote *r, const char *key, const char *path, uint64_t part_size, long *http,
                         stk_error *err)
{
    if (http) *http = 0;
    if (!stk__remote_is_s3(r)) {
        char name[480];
        stk__remote_name(r, key, name, sizeof name);
        return stk_error_set(err, STK_E_ARG, "%s: http(s) addresses are read-only", name);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return stk_error_set(err, STK_E_IO, "%.300s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        return stk_error_set(err, STK_E_IO, "%.300s: %s", path,
                             S_ISREG(st.st_mode) ? strerror(e) : "not a file");
    }
    uint64_t size = (uint64_t)st.st_size;
    uint64_t part = part_size ? part_size : PART_DEFAULT;
    if (part < PART_MIN) part = PART_MIN;
    int rc;
    if (size <= part) {
        stk__rreq *q = stk__rreq_new(STK__M_PUT, key, NULL);
        if (!q) {
            close(fd);
            return oom(err);
        }
        q->body_fd = fd;
        q->body_len = (size_t)size;
        stk__rreq_run(r, q);
        rc = outcome(q, http, err);
        stk__rreq_free(q);
    } else {
        rc = multipart(r, key, fd, size, part, http, err);
    }
    close(fd);
    return rc;
}

/* ---- Listing --------------------------------------------------------------------- */

void stk__rlist_free(stk__rlist *l)
{
    if (!l) return;
    for (size_t i = 0; i < l->n; i++) free(l->keys[i]);
    free(l->keys);
    free(l->sizes);
    memset(l, 0, sizeof *l);
}

typedef struct {
    char *key;
    uint64_t size;
} kv_pair;

static int kv_cmp(const void *a, const void *b)
{
    return strcmp(((const kv_pair *)a)->key, ((const kv_pair *)b)->key);
}

int stk__remote_list_page(stk__remote *r, const char *prefix, unsigned max_keys, stk__rlist *out,
                          stk_error *err)
{
    memset(out, 0, sizeof *out);
    char name[480];
    stk__remote_name(r, prefix, name, sizeof name);
    if (!stk__remote_is_s3(r))
        return stk_error_set(err, STK_E_ARG, "%s: http(s) addresses cannot be listed", name);
    char *token = NULL;
    char mk[16];
    snprintf(mk, sizeof mk, "%u", max_keys ? max_keys : 1000);
    int rc = STK_OK;
    for (unsigned page = 0;; page++) {
        const char *kv[8] = {"list-type", "2", "prefix", prefix, "max-keys", mk, "continuation-token", token};
        char *query = stk__rquery(kv, token ? 4 : 3);
        stk__rreq *q = query ? stk__rreq_new(STK__M_GET, "", query) : NULL;
        if (!q) {
            rc = oom(err);
            break;
        }
        q->sink = 1;
        q->sink_max = XML_MAX;
        rc = stk__rreq_run(r, q);
        if (rc) {
            rc = stk_error_set(err, q->code, "listing %s: %s", name, q->err.msg);
            stk__rreq_free(q);
            break;
        }
        int truncated = 0;
        char *next = NULL;
        stk_error xe;
        rc = stk__xml_list(q->buf ? q->buf : "", q->buf_len, out, &truncated, &next, &xe);
        stk__rreq_free(q);
        if (rc) {
            rc = stk_error_set(err, rc, "listing %s (page %u): %s", name, page + 1, xe.msg);
            break;
        }
        free(token);
        token = next;
        if (!truncated) break;
        if (token && strlen(token) > 4096) {
            rc = stk_error_set(err, STK_E_FORMAT, "listing %s: a continuation token over 4096 bytes", name);
            break;
        }
    }
    free(token);
    if (rc) {
        stk__rlist_free(out);
        return rc;
    }
    if (out->n > 1) {
        kv_pair *p = malloc(out->n * sizeof *p);
        if (!p) {
            stk__rlist_free(out);
            return oom(err);
        }
        for (size_t i = 0; i < out->n; i++) p[i] = (kv_pair){out->keys[i], out->sizes[i]};
        qsort(p, out->n, sizeof *p, kv_cmp);
        for (size_t i = 0; i < out->n; i++) {
            out->keys[i] = p[i].key;
            out->sizes[i] = p[i].size;
        }
        free(p);
    }
    return STK_OK;
}

int stk__remote_list(stk__remote *r, const char *prefix, stk__rlist *out, stk_error *err)
{
    return stk__remote_list_page(r, prefix, 0, out, err);
}
