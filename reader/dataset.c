/* reader/dataset.c - a dataset as one address space of records; several
 * datasets concatenated as one (a mixture's sources). */
#include "dataset.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
            ds->shards[i] = stk_shard_open(p, &e);
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

stk_dataset *stk_dataset_open(const char *path, stk_error *err)
{
    if (!path) return stk_error_set(err, STK_E_ARG, "stk_dataset_open: NULL path"), NULL;
    stk_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return stk_error_set(err, STK_E_NOMEM, "out of memory"), NULL;
    if (!(ds->m = stk_manifest_load(path, err)) || !(ds->dir = stk_dataset_dir(path, err))) goto fail;
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
    pthread_t t[8];
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
