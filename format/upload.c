/* format/upload.c - the writers' side of an s3:// dataset (stoker/format.h,
 * "Writing to object storage"): a staging directory, an upload thread, the
 * upload log that lets a resumed writer skip what is already there, and the
 * lock object.
 *
 * One thread uploads the queued files in order, each through
 * stk__remote_put_file (one PUT, or a multipart upload with several parts in
 * flight for a large file), so the caller's appends never wait for the
 * network. After each PUT a HEAD reads the object's size and ETag, which go
 * into the log. */
#define _GNU_SOURCE
#include "internal.h"
#include "remote.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOG_NAME ".stoker-uploaded"

typedef struct job {
    struct job *next;
    char *path, *name;
    int remove;
} job;

struct stk_upload {
    stk__remote *r;
    stk__raddr a;
    char *url, *base; /* the dataset's key prefix ("" or "p/q") */
    pthread_t thread;
    bool thread_on, quit;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail;
    bool busy;     /* the thread is uploading a job it took */
    int error;     /* sticky: the first failed upload */
    stk_error err; /* its message */
    uint64_t sent, skipped;
    uint64_t part_bytes; /* multipart part size; 0: the client's default */
    char *lock_name;     /* the lock object held, or NULL */
    char lock_line[256];
};

int stk_path_is_remote(const char *path) { return path && stk__remote_is_url(path); }

static char *key_of(const stk_upload *u, const char *name)
{
    char *k = NULL;
    if (!*u->base) return strdup(name);
    return asprintf(&k, "%s/%s", u->base, name) < 0 ? NULL : k;
}

static int name_error(const stk_upload *u, stk_error *err, const char *name)
{
    (void)name;
    return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", u->url);
}

/* Append "name\tsize\tetag" to the log beside path (one write: lines of
 * parts sharing a staging directory do not interleave). */
static void log_upload(const char *path, const char *name, uint64_t size, const char *etag)
{
    const char *slash = strrchr(path, '/');
    char *lp = NULL, *line = NULL;
    int n = asprintf(&line, "%s\t%llu\t%s\n", name, (unsigned long long)size, etag);
    if (n > 0 &&
        asprintf(&lp, "%.*s/%s", slash ? (int)(slash - path) : 1, slash ? path : ".", LOG_NAME) >= 0) {
        int fd = open(lp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            (void)!write(fd, line, (size_t)n);
            close(fd);
        }
    }
    free(lp);
    free(line);
}

/* The log's last entry for name (size, etag); false when none. */
static bool log_find(const char *path, const char *name, uint64_t *size, char *etag)
{
    const char *slash = strrchr(path, '/');
    char *lp = NULL, *text = NULL;
    size_t len = 0;
    bool found = false;
    if (asprintf(&lp, "%.*s/%s", slash ? (int)(slash - path) : 1, slash ? path : ".", LOG_NAME) < 0)
        return false;
    if (stk__read_file(lp, (size_t)1 << 28, &text, &len, NULL) == STK_OK) {
        size_t nl = strlen(name);
        for (char *line = text, *end; line && *line; line = end ? end + 1 : NULL) {
            end = strchr(line, '\n');
            if (end) *end = 0;
            if (strncmp(line, name, nl) || line[nl] != '\t') continue;
            char *t = strchr(line + nl + 1, '\t');
            if (!t) continue;
            *size = strtoull(line + nl + 1, NULL, 10);
            snprintf(etag, 80, "%s", t + 1);
            found = true;
        }
    }
    free(text);
    free(lp);
    return found;
}

static int upload_one(stk_upload *u, const job *j, stk_error *err)
{
    char *key = key_of(u, j->name);
    if (!key) return name_error(u, err, j->name);
    int rc = stk__remote_put_file(u->r, key, j->path, u->part_bytes, NULL, err);
    stk__robject o = {0};
    if (!rc) rc = stk__remote_head(u->r, key, &o, NULL, err);
    free(key);
    if (rc) return rc;
    log_upload(j->path, j->name, o.size, o.etag);
    if (j->remove) unlink(j->path);
    return STK_OK;
}

static void free_job(job *j)
{
    if (!j) return;
    free(j->path);
    free(j->name);
    free(j);
}

static void *uploader(void *arg)
{
    stk_upload *u = arg;
    pthread_mutex_lock(&u->mu);
    for (;;) {
        while (!u->head && !u->quit) pthread_cond_wait(&u->cv, &u->mu);
        if (!u->head) break;
        job *j = u->head;
        u->head = j->next;
        if (!u->head) u->tail = NULL;
        u->busy = true;
        int failed = u->error;
        pthread_mutex_unlock(&u->mu);
        stk_error e;
        int rc = failed ? failed : upload_one(u, j, &e); /* after a failure the rest is dropped */
        pthread_mutex_lock(&u->mu);
        if (rc && !u->error) u->error = rc, u->err = e;
        if (!rc) u->sent++;
        u->busy = false;
        pthread_cond_broadcast(&u->cv);
        free_job(j);
    }
    pthread_mutex_unlock(&u->mu);
    return NULL;
}

stk_upload *stk_upload_open(const char *url, stk_error *err)
{
    if (!url) return stk_error_set(err, STK_E_ARG, "stk_upload_open: NULL address"), NULL;
    stk_upload *u = calloc(1, sizeof *u);
    if (!u) return stk_error_set(err, STK_E_NOMEM, "out of memory"), NULL;
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, NULL);
    if (stk__raddr_parse(url, &u->a, err)) goto fail;
    if (!u->a.s3) {
        stk_error_set(err, STK_E_ARG, "%s: http(s) addresses are read-only; write to s3://bucket/prefix",
                      url);
        goto fail;
    }
    u->url = strdup(url);
    u->base = strdup(u->a.key ? u->a.key : "");
    if (!u->url || !u->base) {
        stk_error_set(err, STK_E_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t n = strlen(u->base); n && u->base[n - 1] == '/'; n--) u->base[n - 1] = 0;
    if (stk__remote_open(&u->r, &u->a, NULL, err)) goto fail;
    /* The multipart part size (the client's default when unset); also how
     * the tests get multipart uploads out of small shards. */
    const char *ps = getenv("STOKER_UPLOAD_PART_BYTES");
    if (ps && *ps) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(ps, &end, 10);
        if (errno || *end || !v) {
            stk_error_set(err, STK_E_ARG, "STOKER_UPLOAD_PART_BYTES=%.40s: not a positive number of bytes",
                          ps);
            goto fail;
        }
        u->part_bytes = v;
    }
    if (pthread_create(&u->thread, NULL, uploader, u) != 0) {
        stk_error_set(err, STK_E_NOMEM, "%s: cannot start the upload thread", url);
        goto fail;
    }
    u->thread_on = true;
    return u;
fail:
    stk_upload_close(u);
    return NULL;
}

int stk_upload_wait(stk_upload *u, stk_error *err)
{
    if (!u) return stk_error_set(err, STK_E_ARG, "stk_upload_wait: NULL client");
    pthread_mutex_lock(&u->mu);
    while (u->head || u->busy) pthread_cond_wait(&u->cv, &u->mu);
    int rc = u->error;
    if (rc && err) *err = u->err;
    pthread_mutex_unlock(&u->mu);
    return rc;
}

void stk_upload_close(stk_upload *u)
{
    if (!u) return;
    if (u->thread_on) {
        pthread_mutex_lock(&u->mu);
        u->quit = true;
        pthread_cond_broadcast(&u->cv);
        pthread_mutex_unlock(&u->mu);
        pthread_join(u->thread, NULL);
    }
    for (job *j = u->head, *n; j; j = n) n = j->next, free_job(j);
    if (u->lock_name && u->r) {
        stk_error e;
        stk_upload_delete(u, u->lock_name, &e);
    }
    free(u->lock_name);
    if (u->r) stk__remote_close(u->r);
    stk__raddr_free(&u->a);
    free(u->url);
    free(u->base);
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
    free(u);
}

int stk_upload_staging_dir(const char *url, char *out, size_t cap, stk_error *err)
{
    if (!url || !out) return stk_error_set(err, STK_E_ARG, "stk_upload_staging_dir: NULL argument");
    uint64_t h = 1469598103934665603ull; /* FNV-1a: a name, not a checksum */
    for (const unsigned char *p = (const unsigned char *)url; *p; p++) h = (h ^ *p) * 1099511628211ull;
    const char *cache = getenv("STOKER_CACHE_DIR"), *tmp = getenv("TMPDIR");
    int n = cache && *cache ? snprintf(out, cap, "%s/staging/%016llx", cache, (unsigned long long)h)
                            : snprintf(out, cap, "%s/stoker-staging/%016llx", tmp && *tmp ? tmp : "/tmp",
                                       (unsigned long long)h);
    if (n < 0 || (size_t)n >= cap)
        return stk_error_set(err, STK_E_ARG, "%s: the staging directory's name is too long", url);
    char *p = strdup(out);
    if (!p) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    int rc = STK_OK;
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/') continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0700) != 0 && errno != EEXIST) {
            rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: cannot create the staging directory for %s",
                                      p, url);
            break;
        }
        if (!(*s = c)) break;
    }
    free(p);
    return rc;
}

int stk_upload_file(stk_upload *u, const char *path, const char *name, int remove, stk_error *err)
{
    if (!u || !path || !name) return stk_error_set(err, STK_E_ARG, "stk_upload_file: NULL argument");
    job *j = calloc(1, sizeof *j);
    if (j) j->path = strdup(path), j->name = strdup(name), j->remove = remove;
    if (!j || !j->path || !j->name) {
        free_job(j);
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    }
    pthread_mutex_lock(&u->mu);
    int rc = u->error;
    if (rc) {
        if (err) *err = u->err;
        free_job(j);
    } else {
        if (u->tail) u->tail->next = j;
        else u->head = j;
        u->tail = j;
        pthread_cond_broadcast(&u->cv);
    }
    pthread_mutex_unlock(&u->mu);
    return rc;
}

int stk_upload_head(stk_upload *u, const char *name, uint64_t *size, char *etag, stk_error *err)
{
    if (!u || !name || !size) return stk_error_set(err, STK_E_ARG, "stk_upload_head: NULL argument");
    char *key = key_of(u, name);
    if (!key) return name_error(u, err, name);
    stk__robject o = {0};
    long http = 0;
    int rc = stk__remote_head(u->r, key, &o, &http, err);
    free(key);
    if (rc && http == 404) rc = STK_OK, o.size = UINT64_MAX;
    if (rc) return rc;
    *size = o.size;
    if (etag) snprintf(etag, 80, "%s", o.size == UINT64_MAX ? "" : o.etag);
    return STK_OK;
}

int stk_upload_file_once(stk_upload *u, const char *path, const char *name, int *skipped, stk_error *err)
{
    if (skipped) *skipped = 0;
    if (!u || !path || !name) return stk_error_set(err, STK_E_ARG, "stk_upload_file_once: NULL argument");
    struct stat st;
    uint64_t lsize, rsize;
    char letag[80], retag[80];
    if (stat(path, &st) == 0 && log_find(path, name, &lsize, letag) && lsize == (uint64_t)st.st_size &&
        stk_upload_head(u, name, &rsize, retag, NULL) == STK_OK && rsize == lsize && !strcmp(retag, letag)) {
        pthread_mutex_lock(&u->mu);
        u->skipped++;
        pthread_mutex_unlock(&u->mu);
        if (skipped) *skipped = 1;
        return STK_OK;
    }
    return stk_upload_file(u, path, name, 0, err);
}

int stk_upload_put(stk_upload *u, const char *name, const void *data, size_t len, stk_error *err)
{
    if (!u || !name || (!data && len)) return stk_error_set(err, STK_E_ARG, "stk_upload_put: NULL argument");
    char *key = key_of(u, name);
    if (!key) return name_error(u, err, name);
    int rc = stk__remote_put_object(u->r, key, data, len, NULL, err);
    free(key);
    if (!rc) {
        pthread_mutex_lock(&u->mu);
        u->sent++;
        pthread_mutex_unlock(&u->mu);
    }
    return rc;
}

int stk_upload_fetch(stk_upload *u, const char *name, const char *path, size_t max, int *missing,
                     stk_error *err)
{
    if (missing) *missing = 0;
    if (!u || !name || !path) return stk_error_set(err, STK_E_ARG, "stk_upload_fetch: NULL argument");
    char *key = key_of(u, name), *data = NULL;
    if (!key) return name_error(u, err, name);
    size_t len = 0;
    long http = 0;
    int rc = stk__remote_get_object(u->r, key, max, &data, &len, NULL, &http, err);
    free(key);
    if (rc && http == 404 && missing) *missing = 1;
    if (!rc) rc = stk_file_commit(path, data, len, err);
    free(data);
    return rc;
}

int stk_upload_delete(stk_upload *u, const char *name, stk_error *err)
{
    if (!u || !name) return stk_error_set(err, STK_E_ARG, "stk_upload_delete: NULL argument");
    char *key = key_of(u, name);
    if (!key) return name_error(u, err, name);
    long http = 0;
    int rc = stk__remote_delete(u->r, key, &http, err);
    free(key);
    return rc && http == 404 ? STK_OK : rc;
}

int stk_upload_list(stk_upload *u, char ***names, uint64_t **sizes, size_t *n, stk_error *err)
{
    if (!u || !names || !sizes || !n) return stk_error_set(err, STK_E_ARG, "stk_upload_list: NULL argument");
    *names = NULL, *sizes = NULL, *n = 0;
    char *pfx = NULL;
    if (asprintf(&pfx, "%s%s", u->base, *u->base ? "/" : "") < 0)
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    stk__rlist l = {0};
    int rc = stk__remote_list(u->r, pfx, &l, err);
    size_t pl = strlen(pfx);
    free(pfx);
    if (rc) return rc;
    char **nm = calloc(l.n + 1, sizeof *nm);
    uint64_t *sz = calloc(l.n + 1, sizeof *sz);
    size_t k = 0;
    if (!nm || !sz) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
    for (size_t i = 0; !rc && i < l.n; i++) {
        const char *rel = strlen(l.keys[i]) >= pl ? l.keys[i] + pl : "";
        if (!*rel) continue;
        if (!(nm[k] = strdup(rel))) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
        else sz[k++] = l.sizes[i];
    }
    stk__rlist_free(&l);
    if (rc) {
        stk_upload_list_free(nm, sz, k);
        return rc;
    }
    *names = nm, *sizes = sz, *n = k;
    return STK_OK;
}

void stk_upload_list_free(char **names, uint64_t *sizes, size_t n)
{
    for (size_t i = 0; names && i < n; i++) free(names[i]);
    free(names);
    free(sizes);
}

int stk_upload_sweep(stk_upload *u, const char *staging, stk_error *err)
{
    if (!u || !staging) return stk_error_set(err, STK_E_ARG, "stk_upload_sweep: NULL argument");
    stk_manifest *m = stk_manifest_load(staging, err);
    if (!m) return err ? err->code : STK_E_MANIFEST;
    char **names;
    uint64_t *sizes;
    size_t n;
    int rc = stk_upload_list(u, &names, &sizes, &n, err);
    for (size_t i = 0; !rc && i < n; i++) {
        if (!stk__shard_like(names[i])) continue;
        bool named = false;
        for (size_t k = 0; k < m->nshards && !named; k++) named = !strcmp(m->shards[k].path, names[i]);
        if (!named) rc = stk_upload_delete(u, names[i], err);
    }
    if (!rc) stk_upload_list_free(names, sizes, n);
    stk_manifest_free(m);
    return rc;
}

void stk_upload_counts(const stk_upload *u, uint64_t *sent, uint64_t *skipped)
{
    stk_upload *m = (stk_upload *)u; /* the mutex only */
    if (!u) return;
    pthread_mutex_lock(&m->mu);
    if (sent) *sent = u->sent;
    if (skipped) *skipped = u->skipped;
    pthread_mutex_unlock(&m->mu);
}

/* "host H pid P token T[ job J]: what": is it a line of this host whose
 * process is gone, or of this Slurm job (a requeued job runs again under its
 * id, on any node, after the first run was stopped)? */
static bool lock_is_stale(const char *line)
{
    char host[256] = "", myhost[256] = "";
    long pid = 0;
    const char *slurm = getenv("SLURM_JOB_ID"), *colon = strchr(line, ':'), *j = strstr(line, " job ");
    if (slurm && *slurm && j && colon && j < colon && !strncmp(j + 5, slurm, strlen(slurm)) &&
        j + 5 + strlen(slurm) == colon)
        return true;
    if (sscanf(line, "host %255s pid %ld", host, &pid) != 2 || pid <= 0) return false;
    if (gethostname(myhost, sizeof myhost - 1) != 0 || strcmp(host, myhost)) return false;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static int read_lock(stk_upload *u, const char *name, char **line, stk_error *err)
{
    char *key = key_of(u, name);
    if (!key) return name_error(u, err, name);
    size_t len;
    long http = 0;
    *line = NULL;
    int rc = stk__remote_get_object(u->r, key, 4096, line, &len, NULL, &http, err);
    free(key);
    if (rc && http == 404) return STK_OK;
    return rc;
}

int stk_upload_lock(stk_upload *u, const char *name, const char *what, stk_error *err)
{
    if (!u || !name) return stk_error_set(err, STK_E_ARG, "stk_upload_lock: NULL argument");
    if (u->lock_name) return stk_error_set(err, STK_E_ARG, "%s: this client holds a lock already", u->url);
    char *held = NULL;
    int rc = read_lock(u, name, &held, err);
    if (!rc && held && *held && !lock_is_stale(held)) {
        held[strcspn(held, "\n")] = 0;
        rc = stk_error_set(
            err, STK_E_BUSY,
            "%s/%s: another writer holds this dataset (%.160s); if it is gone, delete that object", u->url,
            name, held);
    }
    free(held);
    if (rc) return rc;
    char host[256] = "";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    gethostname(host, sizeof host - 1);
    for (char *c = host; *c; c++)
        if (*c == ' ' || *c == '\n') *c = '_';
    const char *slurm = getenv("SLURM_JOB_ID");
    bool has_job = slurm && *slurm && strlen(slurm) < 32 && !strpbrk(slurm, ": \n");
    snprintf(u->lock_line, sizeof u->lock_line, "host %s pid %ld token %llx%09ld%s%s: %s\n", host,
             (long)getpid(), (unsigned long long)ts.tv_sec, (long)ts.tv_nsec, has_job ? " job " : "",
             has_job ? slurm : "", what ? what : "a writer");
    char *key = key_of(u, name); /* not counted among the dataset's objects */
    rc = key ? stk__remote_put_object(u->r, key, u->lock_line, strlen(u->lock_line), NULL, err)
             : name_error(u, err, name);
    free(key);
    if (rc) return rc;
    if (!(u->lock_name = strdup(name))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    rc = stk_upload_lock_check(u, err);
    if (rc) { /* another writer's PUT came after ours: it holds the lock */
        free(u->lock_name);
        u->lock_name = NULL;
    }
    return rc;
}

int stk_upload_lock_check(stk_upload *u, stk_error *err)
{
    if (!u || !u->lock_name) return STK_OK;
    char *held = NULL;
    int rc = read_lock(u, u->lock_name, &held, err);
    if (!rc && (!held || strcmp(held, u->lock_line))) {
        if (held) held[strcspn(held, "\n")] = 0;
        rc =
            stk_error_set(err, STK_E_BUSY, "%s/%s: another writer took this dataset (%.160s); not committing",
                          u->url, u->lock_name, held ? held : "the lock object is gone");
        free(u->lock_name); /* not ours to delete at close */
        u->lock_name = NULL;
    }
    free(held);
    return rc;
}
