/* reader/dataset.c - a dataset as one address space of records; several
 * datasets concatenated as one (a mixture's sources). A dataset in object
 * storage (s3://, https://) is opened here too: its manifest fetched, its
 * shards opened through format/rshard.h, the client and the node's cache
 * owned by the dataset. */
#define _GNU_SOURCE
#include "dataset.h"

#include "cache.h"
#include "remote.h"
#include "rshard.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

struct stk_dataset {
    stk_manifest *m;
    char *dir;
    stk_shard **shards;
    uint64_t *first; /* nshards + 1 prefix sums */
    /* a concatenation: the shards belong to parts[]; part i is closed with
     * it when bit i of own is set */
    stk_dataset **parts;
    size_t nparts;
    uint64_t own;
    /* a remote dataset: what its shards use, closed after them */
    stk__remote *remote;
    stk__rcache *cache;
    stk__rwindow *window;
    stk__raddr addr; /* valid when remote */
    char etag[80];   /* the manifest's */
};

/* The shard must be the one the manifest describes. */
static int agree(const stk_dataset *ds, size_t i, const stk_shard *sh, stk_error *err)
{
    const stk_shard_entry *e = &ds->m->shards[i];
    const char *p = stk_shard_path(sh);
    if (stk_shard_records(sh) != e->records)
        return stk_error_set(err, STK_E_MANIFEST, "%s: holds %llu records, the manifest says %llu", p,
                             (unsigned long long)stk_shard_records(sh), (unsigned long long)e->records);
    if (stk_shard_file_size(sh) != e->file_size)
        return stk_error_set(err, STK_E_MANIFEST, "%s: is %llu bytes, the manifest says %llu", p,
                             (unsigned long long)stk_shard_file_size(sh), (unsigned long long)e->file_size);
    if (stk_shard_index_hash(sh) != e->index_hash)
        return stk_error_set(
            err, STK_E_MANIFEST,
            "%s: index hash %016llx differs from the manifest's %016llx (a different or replaced shard)", p,
            (unsigned long long)stk_shard_index_hash(sh), (unsigned long long)e->index_hash);
    if (!stk_schema_equal(stk_shard_schema(sh), &ds->m->schema))
        return stk_error_set(err, STK_E_MANIFEST, "%s: schema differs from the manifest's", p);
    return STK_OK;
}

/* Opening is a few syscalls and two page faults per shard (~20 us), which
 * for thousands of shards is most of the time to the first batch: threads
 * open them in parallel. The error reported is the lowest-numbered shard's,
 * as a sequential open would report it. */
typedef struct {
    stk_dataset *ds;
    size_t next; /* atomic: the next shard to open */
    pthread_mutex_t mu;
    size_t fail_at; /* lowest failing shard, SIZE_MAX if none */
    stk_error err;
} opener;

static void *open_shards(void *arg)
{
    opener *o = arg;
    stk_dataset *ds = o->ds;
    size_t n = ds->m->nshards, a = strlen(ds->dir);
    for (;;) {
        size_t i = __atomic_fetch_add(&o->next, 1, __ATOMIC_RELAXED);
        if (i >= n) break;
        stk_error e = {STK_OK, ""};
        size_t b = strlen(ds->m->shards[i].path);
        char *p = malloc(a + b + 2);
        if (!p) {
            stk_error_set(&e, STK_E_NOMEM, "out of memory");
        } else {
            snprintf(p, a + b + 2, "%s/%s", ds->dir, ds->m->shards[i].path);
            if (ds->remote) {
                const stk_shard_entry *se = &ds->m->shards[i];
                char *key = stk__rdataset_key(&ds->addr, se->path);
                if (!key) stk_error_set(&e, STK_E_NOMEM, "out of memory");
                else
                    ds->shards[i] =
                        stk__rshard_open(ds->remote, ds->cache, key, p, se->file_size, se->index_hash,
                                         se->records, ds->m->schema.nfields, NULL, ds->window, &e);
                free(key);
            } else {
                ds->shards[i] = stk_shard_open(p, &e);
            }
            free(p);
            if (ds->shards[i]) agree(ds, i, ds->shards[i], &e);
        }
        if (e.code) {
            pthread_mutex_lock(&o->mu);
            if (i < o->fail_at) {
                o->fail_at = i;
                o->err = e;
            }
            pthread_mutex_unlock(&o->mu);
        }
    }
    return NULL;
}

/* The shards of ds (its manifest and dir set), opened and checked. */
static stk_dataset *open_shards_of(stk_dataset *ds, stk_error *err)
{
    size_t n = ds->m->nshards;
    ds->shards = calloc(n ? n : 1, sizeof *ds->shards);
    ds->first = calloc(n + 1, sizeof *ds->first);
    if (!ds->shards || !ds->first) {
        stk_error_set(err, STK_E_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) ds->first[i + 1] = ds->first[i] + ds->m->shards[i].records;
    opener o = {ds, 0, PTHREAD_MUTEX_INITIALIZER, SIZE_MAX, {STK_OK, ""}};
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t want = n / 64; /* a thread per 64 shards, up to the cores, at most 8 */
    if (cpus > 0 && want > (size_t)cpus) want = (size_t)cpus;
    if (want > 8) want = 8;
    /* Remote: each open is three round trips (HEAD, header and footer, the
     * metadata), waiting on the network, not the CPU: 32 at once keep the
     * client's requests in flight busy. */
    if (ds->remote) want = n < 32 ? n : 32;
    pthread_t t[32];
    size_t started = 0;
    while (started + 1 < want && pthread_create(&t[started], NULL, open_shards, &o) == 0) started++;
    open_shards(&o); /* this thread is one of them */
    for (size_t i = 0; i < started; i++) pthread_join(t[i], NULL);
    pthread_mutex_destroy(&o.mu);
    if (o.fail_at != SIZE_MAX) {
        if (err) *err = o.err;
        goto fail;
    }
    return ds;
fail:
    stk_dataset_close(ds);
    return NULL;
}

/* A size: a whole number with an optional K, M, G or
 * T (powers of 1024, an optional "iB" or "B" after); "0" and "none": no
 * limit (UINT64_MAX). 0 on success. */
static int parse_bytes(const char *v, uint64_t *out)
{
    if (!strcmp(v, "none")) return *out = UINT64_MAX, 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *v == '-' || *v == '+') return -1;
    unsigned shift = 0;
    const char *u = "KMGT", *k = *end ? strchr(u, *end & ~0x20) : NULL;
    if (k && *k) shift = 10 * (unsigned)(k - u + 1), end++;
    if (shift && *end == 'i') end++;
    if (shift && (*end == 'B' || *end == 'b')) end++;
    if (*end || (shift && x > (UINT64_MAX >> shift))) return -1;
    *out = x == 0 ? UINT64_MAX : (uint64_t)x << shift;
    return 0;
}

/* The cache directory and limit: the options, the environment, the
 * defaults (stoker/format.h, stk_remote_options, says why these). */
static int cache_settings(const stk_remote_options *o, char **dir, uint64_t *limit, stk_error *err)
{
    const char *d = o && o->cache_dir && *o->cache_dir ? o->cache_dir : getenv("STOKER_CACHE_DIR");
    bool dflt = !d || !*d;
    char buf[4096];
    if (dflt) {
        const char *tmp = getenv("TMPDIR");
        snprintf(buf, sizeof buf, "%s/stoker-cache-%lu", tmp && *tmp ? tmp : "/tmp",
                 (unsigned long)geteuid());
        d = buf;
        struct stat st; /* in a shared /tmp: ours, or refused */
        if (lstat(d, &st) == 0 && (!S_ISDIR(st.st_mode) || st.st_uid != geteuid()))
            return stk_error_set(err, STK_E_IO,
                                 "%s: the default cache directory is not a directory of this user (set "
                                 "STOKER_CACHE_DIR)",
                                 d);
    }
    if (!(*dir = strdup(d))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    if (o && o->cache_limit) {
        *limit = o->cache_limit;
        return STK_OK;
    }
    const char *v = getenv("STOKER_CACHE_LIMIT");
    if (v && *v) {
        if (parse_bytes(v, limit))
            return stk_error_set(
                err, STK_E_ARG,
                "STOKER_CACHE_LIMIT=%.40s: not a size (bytes, with K, M, G or T; 0 or none: no "
                "limit)",
                v);
        return STK_OK;
    }
    /* half the free space where the cache is (or will be) */
    snprintf(buf, sizeof buf, "%s", *dir);
    struct statvfs vf;
    while (statvfs(buf, &vf) != 0) {
        char *slash = strrchr(buf, '/');
        if (!slash || slash == buf) {
            snprintf(buf, sizeof buf, "%s", slash == buf ? "/" : ".");
            if (statvfs(buf, &vf) != 0) vf.f_bavail = 0;
            break;
        }
        *slash = 0;
    }
    *limit = (uint64_t)vf.f_bavail * vf.f_frsize / 2;
    if (*limit == 0) *limit = (uint64_t)1 << 30;
    return STK_OK;
}

/* "s3://bucket/prefix" or "https://host/path": the manifest fetched, a client
 * and a cache opened for the dataset's shards. */
static stk_dataset *open_remote(const char *path, const stk_remote_options *o, stk_error *err)
{
    stk_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return stk_error_set(err, STK_E_NOMEM, "out of memory"), NULL;
    char *cdir = NULL;
    uint64_t limit = 0;
    stk__rconfig cfg;
    memset(&cfg, 0, sizeof cfg);
    if (o) {
        cfg.endpoint = o->endpoint;
        cfg.region = o->region;
        cfg.profile = o->profile;
        cfg.addressing = o->addressing;
        cfg.anonymous = o->anonymous;
        cfg.stall_s = o->stall_s;
    }
    if (stk__rdataset_addr(path, &ds->addr, &ds->dir, err)) {
        free(ds);
        return NULL;
    }
    if (stk__remote_open(&ds->remote, &ds->addr, &cfg, err) || cache_settings(o, &cdir, &limit, err) ||
        stk__rcache_open(&ds->cache, cdir, limit == UINT64_MAX ? 0 : limit, err))
        goto fail;
    if (!(ds->window = stk__rwindow_new(0))) {
        stk_error_set(err, STK_E_NOMEM, "out of memory");
        goto fail;
    }
    if (!(ds->m = stk__rdataset_manifest(ds->remote, &ds->addr, ds->dir, ds->etag, sizeof ds->etag, err)))
        goto fail;
    free(cdir);
    return open_shards_of(ds, err);
fail:
    free(cdir);
    stk_dataset_close(ds);
    return NULL;
}

stk_dataset *stk_dataset_open(const char *path, stk_error *err)
{
    if (!path) return stk_error_set(err, STK_E_ARG, "stk_dataset_open: NULL path"), NULL;
    if (stk__remote_is_url(path)) return open_remote(path, NULL, err);
    stk_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return stk_error_set(err, STK_E_NOMEM, "out of memory"), NULL;
    if (!(ds->m = stk_manifest_load(path, err)) || !(ds->dir = stk_dataset_dir(path, err))) {
        stk_dataset_close(ds);
        return NULL;
    }
    return open_shards_of(ds, err);
}

void stk_remote_options_init_sized(stk_remote_options *opts, size_t size)
{
    if (opts) memset(opts, 0, size); /* every default is zero */
}

/* The first release's stk_remote_options: up to cache_limit. */
#define REMOTE_OPTIONS_MIN_SIZE (offsetof(stk_remote_options, cache_limit) + sizeof(uint64_t))

stk_dataset *stk_dataset_open_remote_sized(const char *path, const stk_remote_options *opts, size_t size,
                                           stk_error *err)
{
    if (!path) return stk_error_set(err, STK_E_ARG, "stk_dataset_open_remote: NULL path"), NULL;
    stk_remote_options o;
    memset(&o, 0, sizeof o);
    if (opts) { /* the first release's size is the smallest; a newer caller's unknown tail must be zero */
        if (size < REMOTE_OPTIONS_MIN_SIZE)
            return stk_error_set(err, STK_E_ARG,
                                 "stk_remote_options: size %zu is smaller than any release's (%zu)", size,
                                 (size_t)REMOTE_OPTIONS_MIN_SIZE),
                   NULL;
        for (size_t i = sizeof o; i < size; i++)
            if (((const unsigned char *)opts)[i])
                return stk_error_set(
                           err, STK_E_ARG,
                           "stk_remote_options: the caller was built against a newer stoker (%zu bytes, "
                           "libstoker %s knows %zu) and sets fields this library lacks",
                           size, STK_VERSION_STRING, sizeof o),
                       NULL;
        memcpy(&o, opts, size < sizeof o ? size : sizeof o); /* an older caller's: the rest zero */
        if (o.addressing < STK_REMOTE_ADDR_AUTO || o.addressing > STK_REMOTE_ADDR_VIRTUAL)
            return stk_error_set(err, STK_E_ARG, "stk_remote_options: addressing %d unknown", o.addressing),
                   NULL;
        if (!(o.stall_s >= 0 && o.stall_s <= 3600)) /* NaN too */
            return stk_error_set(err, STK_E_ARG,
                                 "stk_remote_options: stall_s %g: 0 (the default) to 3600 seconds",
                                 o.stall_s),
                   NULL;
    }
    if (!stk__remote_is_url(path)) return stk_dataset_open(path, err);
    return open_remote(path, opts ? &o : NULL, err);
}

/* Part i's shard paths as "dir/path", so that messages name the file. */
static int concat_entries(stk_manifest *m, const stk_dataset *part, size_t at, stk_error *err)
{
    for (size_t j = 0; j < part->m->nshards; j++) {
        stk_shard_entry *e = &m->shards[at + j];
        *e = part->m->shards[j];
        size_t len = strlen(part->dir) + strlen(part->m->shards[j].path) + 2;
        if (!(e->path = malloc(len))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
        snprintf(e->path, len, "%s/%s", part->dir, part->m->shards[j].path);
    }
    return STK_OK;
}

#define TAG_CONCAT 0x73746b2d63617431ULL /* "stk-cat1" */

stk_dataset *stk__dataset_concat(stk_dataset *const *parts, size_t n, uint64_t own, stk_error *err)
{
    if (n == 0 || n > STK__MIX_MAX) return stk_error_set(err, STK_E_ARG, "%zu datasets (1 to 64)", n), NULL;
    stk_dataset *ds = calloc(1, sizeof *ds);
    size_t nsh = 0;
    for (size_t i = 0; i < n; i++) nsh += parts[i]->m->nshards;
    if (!ds || !(ds->m = calloc(1, sizeof *ds->m)) ||
        !(ds->shards = calloc(nsh ? nsh : 1, sizeof *ds->shards)) ||
        !(ds->first = calloc(nsh + 1, sizeof *ds->first)) ||
        !(ds->m->shards = calloc(nsh ? nsh : 1, sizeof *ds->m->shards)) ||
        !(ds->m->pack_json = strdup("{}")) || !(ds->dir = strdup(parts[0]->dir)) ||
        !(ds->parts = malloc(n * sizeof *ds->parts))) {
        stk_error_set(err, STK_E_NOMEM, "out of memory");
        if (ds) free(ds->parts);
        stk_dataset_close(ds);
        return NULL;
    }
    memcpy(ds->parts, parts, n * sizeof *parts); /* close treats the shards as borrowed */
    ds->nparts = n;
    const stk_manifest *m0 = parts[0]->m;
    ds->m->version_major = m0->version_major;
    ds->m->version_minor = m0->version_minor;
    ds->m->schema = m0->schema;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const stk_dataset *p = parts[i];
        int rc = concat_entries(ds->m, p, at, err);
        ds->m->nshards = at + p->m->nshards; /* what close frees */
        if (rc) {
            stk_dataset_close(ds);
            return NULL;
        }
        for (size_t j = 0; j < p->m->nshards; j++, at++) {
            ds->shards[at] = p->shards[j];
            ds->first[at + 1] = ds->first[at] + p->m->shards[j].records;
        }
    }
    ds->m->record_count = ds->first[nsh];
    uint64_t fp[1 + 2 * STK__MIX_MAX] = {TAG_CONCAT}; /* the parts' fingerprints and sizes, in order */
    for (size_t i = 0; i < n && i < STK__MIX_MAX; i++) {
        fp[1 + 2 * i] = parts[i]->m->fingerprint;
        fp[2 + 2 * i] = parts[i]->m->record_count;
    }
    ds->m->fingerprint = stk_hash(fp, sizeof fp);
    ds->own = own; /* on failure the caller keeps them */
    return ds;
}

void stk_dataset_close(stk_dataset *ds)
{
    if (!ds) return;
    if (ds->parts) {
        for (size_t i = 0; i < ds->nparts; i++)
            if (ds->own >> i & 1) stk_dataset_close(ds->parts[i]);
        free(ds->parts);
    } else if (ds->shards && ds->m) {
        for (size_t i = 0; i < ds->m->nshards; i++) stk_shard_close(ds->shards[i]);
    }
    free(ds->shards);
    free(ds->first);
    free(ds->dir);
    stk_manifest_free(ds->m);
    if (ds->remote || ds->addr.key || ds->addr.bucket) { /* after its shards */
        stk__rwindow_free(ds->window);
        stk__rcache_close(ds->cache);
        stk__remote_close(ds->remote);
        stk__raddr_free(&ds->addr);
    }
    free(ds);
}

const stk_dataset *stk__dataset_part(const stk_dataset *ds, size_t i)
{
    return i < ds->nparts ? ds->parts[i] : NULL;
}

const stk_manifest *stk_dataset_manifest(const stk_dataset *ds) { return ds->m; }
const stk_schema *stk_dataset_schema(const stk_dataset *ds) { return &ds->m->schema; }
uint64_t stk_dataset_records(const stk_dataset *ds) { return ds->m->record_count; }
size_t stk_dataset_nshards(const stk_dataset *ds) { return ds->m->nshards; }
const stk_shard *stk_dataset_shard(const stk_dataset *ds, size_t i)
{
    return i < ds->m->nshards ? ds->shards[i] : NULL;
}
uint64_t stk_dataset_shard_first(const stk_dataset *ds, size_t i)
{
    return ds->first[i <= ds->m->nshards ? i : ds->m->nshards];
}

int stk_dataset_locate(const stk_dataset *ds, uint64_t index, size_t *shard, uint64_t *local, stk_error *err)
{
    size_t n = ds->m->nshards;
    if (index >= ds->first[n])
        return stk_error_set(err, STK_E_RANGE, "%s: record %llu out of range (%llu records)", ds->dir,
                             (unsigned long long)index, (unsigned long long)ds->first[n]);
    size_t lo = 0, hi = n; /* first[lo] <= index < first[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (ds->first[mid] <= index) lo = mid;
        else hi = mid;
    }
    *shard = lo;
    *local = index - ds->first[lo];
    return STK_OK;
}

int stk_dataset_value(const stk_dataset *ds, unsigned f, uint64_t index, const void **data, uint64_t *size,
                      stk_error *err)
{
    size_t s;
    uint64_t local;
    int rc = stk_dataset_locate(ds, index, &s, &local, err);
    return rc ? rc : stk_shard_value(ds->shards[s], f, local, data, size, err);
}
