/* packer/output.c - see output.h. */
#define _GNU_SOURCE
#include "output.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *pk_out_shard_path(const pk_out *o, size_t k)
{
    char name[sizeof o->prefix + 32], *p = NULL;
    stk_shard_file_name(name, sizeof name, o->prefix, k);
    return asprintf(&p, "%s/%s", o->dir, name) < 0 ? NULL : p;
}

int pk_out_init(pk_out *o, const char *dir, const char *prefix, const stk_schema *schema, uint64_t per_shard,
                stk_error *err)
{
    memset(o, 0, sizeof *o);
    pthread_mutex_init(&o->lock, NULL);
    pthread_cond_init(&o->cv, NULL);
    if (strlen(prefix) >= sizeof o->prefix || per_shard == 0)
        return stk_error_set(err, STK_E_ARG, "bad shard prefix or size");
    snprintf(o->prefix, sizeof o->prefix, "%s", prefix);
    o->schema = *schema;
    o->per_shard = per_shard;
    o->source_field = stk_schema_find(schema, "source");
    if (!(o->dir = strdup(dir))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    return STK_OK;
}

static int add_entry(pk_out *o, const char *path, const stk_shard_info *info, stk_error *err)
{
    if (o->nshards == o->cap) {
        size_t c = o->cap ? 2 * o->cap : 64;
        stk_shard_entry *s = realloc(o->shards, c * sizeof *s);
        if (!s) return stk_error_set(err, STK_E_NOMEM, "out of memory");
        o->shards = s;
        o->cap = c;
    }
    const char *base = strrchr(path, '/');
    stk_shard_entry *e = &o->shards[o->nshards];
    if (!(e->path = strdup(base ? base + 1 : path))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    e->records = info->records;
    e->file_size = info->file_size;
    e->file_hash = info->file_hash;
    e->index_hash = info->index_hash;
    o->nshards++;
    return STK_OK;
}

uint64_t pk_out_records(const pk_out *o)
{
    uint64_t n = 0;
    for (size_t i = 0; i < o->nshards; i++) n += o->shards[i].records;
    return n;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The open shard's file as the committer sees it. */
typedef struct {
    int fd;          /* a descriptor for path, or -1 */
    char *path;      /* the temporary file it was opened for */
    uint64_t synced; /* bytes of it made durable so far */
} open_file;

/* Start writeback of the open shard's dirty pages (Linux), and make what
 * was written of it durable once PK_OUT_FLUSH_BYTES more are (see
 * output.h). Failures are ignored: the commit's fsync reports them. */
static void writeback(pk_out *o, open_file *f)
{
    char *path = o->open_tmp ? strdup(o->open_tmp) : NULL;
    pthread_mutex_unlock(&o->lock);
    double t0 = now_s();
    if (path && (!f->path || strcmp(path, f->path))) {
        if (f->fd >= 0) close(f->fd);
        free(f->path);
        f->path = path;
        path = NULL;
        f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
        f->synced = 0;
    }
    struct stat st;
    bool flushed = false;
    if (f->fd >= 0 && f->path) {
#ifdef SYNC_FILE_RANGE_WRITE
        sync_file_range(f->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#endif
        if (fstat(f->fd, &st) == 0 && (uint64_t)st.st_size >= f->synced + PK_OUT_FLUSH_BYTES) {
            (void)fdatasync(f->fd);
            f->synced = (uint64_t)st.st_size;
            flushed = true;
        }
    }
    free(path);
    double dt = now_s() - t0;
    pthread_mutex_lock(&o->lock);
    o->stats.flush += dt;
    o->stats.flushes += flushed;
}

static void wait_tick(pk_out *o)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&o->cv, &o->lock, &ts);
}

/* The committer: finishes queued writers in order. A failure is sticky and
 * the rest of the queue is dropped (their shards would not follow on). */
static void *committer(void *arg)
{
    pk_out *o = arg;
    open_file f = {.fd = -1};
    pthread_mutex_lock(&o->lock);
    for (;;) {
        while (!o->qlen && !o->quit) {
            wait_tick(o);
            if (!o->qlen && !o->quit) writeback(o, &f);
        }
        if (!o->qlen) break;
        stk_writer *w = o->queue[o->qhead];
        o->qhead = (o->qhead + 1) % PK_OUT_PENDING;
        o->qlen--;
        int failed = o->error;
        pthread_mutex_unlock(&o->lock);
        stk_error e;
        stk_shard_info info;
        char *path = pk_out_shard_path(o, o->nshards);
        double t0 = now_s();
        int rc = failed ? (stk_writer_abort(w), failed)
                 : path ? stk_writer_finish(w, &info, &e)
                        : (stk_writer_abort(w), stk_error_set(&e, STK_E_NOMEM, "out of memory"));
        double dt = now_s() - t0;
        if (!rc) rc = add_entry(o, path, &info, &e);
        if (!rc && o->up) /* uploaded on the client's thread: the next commit does not wait for it */
            rc = stk_upload_file(o->up, path, o->shards[o->nshards - 1].path, 0, &e);
        free(path);
        pthread_mutex_lock(&o->lock);
        o->stats.commit += dt;
        if (rc && !o->error) o->error = rc, o->err = e;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->lock);
    if (f.fd >= 0) close(f.fd);
    free(f.path);
    return NULL;
}

/* Drop the open shard. Its figures are not added: the committer may be
 * adding a finished shard's into the same sink at this moment. */
static void abort_cur(pk_out *o)
{
    stk_writer_io_stats_into(o->cur, NULL);
    stk_writer_abort(o->cur);
}

static int ensure_thread(pk_out *o, stk_error *err)
{
    if (o->thread_on) return STK_OK;
    if (pthread_create(&o->thread, NULL, committer, o) != 0)
        return stk_error_set(err, STK_E_NOMEM, "cannot start a thread");
    o->thread_on = true;
    return STK_OK;
}

static void set_open_tmp(pk_out *o, char *tmp)
{
    pthread_mutex_lock(&o->lock);
    free(o->open_tmp);
    o->open_tmp = tmp;
    pthread_mutex_unlock(&o->lock);
}

/* Hand the open shard to the committer (waiting while PK_OUT_PENDING are queued). */
static int submit(pk_out *o, stk_error *err)
{
    int rc0 = ensure_thread(o, err);
    if (rc0) return rc0;
    set_open_tmp(o, NULL);
    pthread_mutex_lock(&o->lock);
    if (o->qlen == PK_OUT_PENDING && !o->error) {
        double t0 = now_s();
        while (o->qlen == PK_OUT_PENDING && !o->error) pthread_cond_wait(&o->cv, &o->lock);
        o->stats.submit_wait += now_s() - t0;
    }
    int rc = o->error;
    if (rc) {
        if (err) *err = o->err;
        abort_cur(o);
    } else {
        o->queue[(o->qhead + o->qlen) % PK_OUT_PENDING] = o->cur;
        o->qlen++;
        pthread_cond_broadcast(&o->cv);
    }
    o->cur = NULL;
    pthread_mutex_unlock(&o->lock);
    return rc;
}

/* Wait until nothing is queued or being committed; stop the committer. */
static int drain(pk_out *o, stk_error *err)
{
    if (!o->thread_on) return STK_OK;
    pthread_mutex_lock(&o->lock);
    o->quit = true;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->lock);
    pthread_join(o->thread, NULL);
    o->thread_on = o->quit = false;
    if (o->error && err) *err = o->err;
    return o->error;
}

int pk_out_flush(pk_out *o, stk_error *err)
{
    int rc = o->cur ? submit(o, err) : STK_OK;
    int rc2 = drain(o, rc ? NULL : err);
    return rc ? rc : rc2;
}

/* The writer for the next record: the open one, or a new shard when it is
 * full or none is open. */
static int open_for(pk_out *o, const stk_value *v, stk_error *err)
{
    int rc;
    if (o->cur && stk_writer_records(o->cur) >= o->per_shard && (rc = submit(o, err))) return rc;
    if (!o->cur) {
        pthread_mutex_lock(&o->lock);
        rc = o->error;
        if (rc && err) *err = o->err;
        pthread_mutex_unlock(&o->lock);
        if (rc) return rc;
        char *path = pk_out_shard_path(o, o->opened);
        if (!path) return stk_error_set(err, STK_E_NOMEM, "out of memory");
        o->cur = stk_writer_create(path, &o->schema, err);
        if (o->cur) stk_writer_io_stats_into(o->cur, &o->stats.io);
        /* pack's JPEG values are its own encoder's, or inputs kept as they are
         * after a full decode (pk_process): no second pass over them */
        if (o->cur) stk_writer_trust_jpeg(o->cur, 1, NULL);
        for (uint32_t f = 0; o->cur && f < o->schema.nfields; f++)
            if (o->schema.fields[f].codec == STK_CODEC_ZSTD &&
                ((rc = stk_writer_compression(o->cur, f, o->zlevel[f], o->zblock, err)) ||
                 (rc = stk_writer_threads(o->cur, o->zthreads, err)))) {
                abort_cur(o);
                o->cur = NULL;
                free(path);
                return rc;
            }
        /* Every shard is full but the last, which gets what is left of the
         * listing unless inputs are skipped: then the guess is wrong and the
         * writer reads that one shard back to hash it. */
        uint64_t src = 0, left = 0;
        if (o->source_field >= 0 && v[o->source_field].size == 8) memcpy(&src, v[o->source_field].data, 8);
        left = o->end > src ? o->end - src : 0;
        if (o->cur && (rc = stk_writer_expect(o->cur, left < o->per_shard ? left : o->per_shard, err))) {
            abort_cur(o);
            o->cur = NULL;
            free(path);
            return rc;
        }
        char *tmp = NULL;
        if (o->cur && asprintf(&tmp, "%s.tmp", path) >= 0)
            set_open_tmp(o, tmp); /* stk_writer_create's name */
        free(path);
        if (!o->cur) return err ? err->code : STK_E_IO;
        o->opened++;
        if ((rc = ensure_thread(o, err))) return rc;
    }
    return STK_OK;
}

int pk_out_append(pk_out *o, const stk_value *v, const uint64_t *dims, const stk_prehash *pre,
                  stk_lent_done_fn done, void *ctx, stk_error *err)
{
    int rc = open_for(o, v, err);
    if (rc || dims) { /* an image of its own shape is copied by the writer: given back at once */
        if (!rc) rc = stk_writer_append_dims(o->cur, v, dims, err);
        if (done) done(ctx, v[0].data);
        return rc;
    }
    return stk_writer_append_lent(o->cur, v, pre, done, ctx, err);
}

void pk_out_remove_from(const pk_out *o, size_t k)
{
    for (;; k++) {
        char *p = pk_out_shard_path(o, k);
        bool gone = !p || access(p, F_OK) != 0;
        if (!gone) unlink(p);
        free(p);
        if (gone) break;
    }
}

void pk_out_abort(pk_out *o, bool remove_committed)
{
    set_open_tmp(o, NULL);
    abort_cur(o);
    o->cur = NULL;
    drain(o, NULL); /* commits already handed over complete: they are whole shards */
    if (remove_committed) pk_out_remove_from(o, 0);
}

void pk_out_free(pk_out *o)
{
    set_open_tmp(o, NULL);
    abort_cur(o);
    o->cur = NULL;
    drain(o, NULL);
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->lock);
    for (size_t i = 0; i < o->nshards; i++) free(o->shards[i].path);
    free(o->shards);
    free(o->dir);
    memset(o, 0, sizeof *o);
}

/* Remove PREFIX-*.stk.tmp left by a killed run. */
static void remove_temps(const pk_out *o)
{
    DIR *d = opendir(o->dir);
    if (!d) return;
    size_t pl = strlen(o->prefix);
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n > pl + 8 && !strncmp(de->d_name, o->prefix, pl) && de->d_name[pl] == '-' &&
            !strcmp(de->d_name + n - 8, ".stk.tmp")) {
            char *p = NULL;
            if (asprintf(&p, "%s/%s", o->dir, de->d_name) >= 0) unlink(p);
            free(p);
        }
    }
    closedir(d);
}

/* Open shard k and check everything a resumed run relies on. Sources go to
 * *src (per_shard entries). */
static int check_kept(const pk_out *o, const char *path, uint64_t lo, uint64_t end, uint64_t *src,
                      stk_shard_info *info, char *why, size_t cap)
{
    stk_error err;
    stk_shard *sh = stk_shard_open(path, &err);
    if (!sh) return snprintf(why, cap, "%s", err.msg), -1;
    int rc = -1;
    uint64_t n = stk_shard_records(sh);
    if (!stk_schema_equal(stk_shard_schema(sh), &o->schema)) snprintf(why, cap, "%s: other schema", path);
    else if (n != o->per_shard)
        snprintf(why, cap, "%s: %llu records, not %llu", path, (unsigned long long)n,
                 (unsigned long long)o->per_shard);
    else if (stk_shard_verify_index(sh, 0, &err)) snprintf(why, cap, "%s", err.msg);
    else if (stk_shard_verify_records(sh, 0, n, NULL, NULL) || stk_shard_verify_padding(sh, NULL, NULL))
        snprintf(why, cap, "%s: records fail verification", path);
    else rc = 0;
    const uint64_t *s = stk_shard_field_base(sh, (unsigned)o->source_field);
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        memcpy(&src[i], &s[i], 8);
        if (src[i] < lo || src[i] >= end || (i && src[i] <= src[i - 1]))
            rc = -1, snprintf(why, cap, "%s: record %llu comes from another part of the listing", path,
                              (unsigned long long)i);
    }
    if (rc == 0) {
        info->records = n;
        info->file_size = stk_shard_file_size(sh);
        info->index_hash = stk_shard_index_hash(sh);
        info->file_hash = stk_shard_file_hash(sh);
    }
    stk_shard_close(sh);
    return rc;
}

int pk_out_resume(pk_out *o, uint64_t first, uint64_t end, uint64_t *next, uint64_t **gaps, size_t *ngaps,
                  void (*note)(void *, const char *), void *user, stk_error *err)
{
    *next = first;
    o->end = end;
    *gaps = NULL;
    *ngaps = 0;
    remove_temps(o);
    if (o->source_field < 0) return stk_error_set(err, STK_E_ARG, "schema has no 'source' field");
    uint64_t *src = malloc(o->per_shard * sizeof *src);
    if (!src) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    size_t gcap = 0;
    int rc = STK_OK;
    for (size_t k = 0;; k++) {
        char *path = pk_out_shard_path(o, k), why[STK_ERROR_MSG_MAX];
        stk_shard_info info;
        if (!path) {
            rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
            break;
        }
        if (access(path, F_OK) != 0) {
            free(path);
            break;
        }
        if (check_kept(o, path, *next, end, src, &info, why, sizeof why) != 0) {
            pk_out_remove_from(o, k); /* this shard and all later ones are redone */
            if (note) note(user, why);
            free(path);
            break;
        }
        for (uint64_t i = 0, want = *next; i < info.records; i++, want++) /* skipped inputs in between */
            for (; want < src[i]; want++) {
                if (*ngaps == gcap) {
                    gcap = gcap ? 2 * gcap : 64;
                    uint64_t *g = realloc(*gaps, gcap * sizeof *g);
                    if (!g) {
                        free(path);
                        free(src);
                        return stk_error_set(err, STK_E_NOMEM, "out of memory");
                    }
                    *gaps = g;
                }
                (*gaps)[(*ngaps)++] = want;
            }
        *next = src[info.records - 1] + 1;
        rc = add_entry(o, path, &info, err);
        o->opened = o->nshards;
        free(path);
        if (rc) break;
    }
    free(src);
    return rc;
}
