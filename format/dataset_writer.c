/* format/dataset_writer.c - a directory of shards plus its manifest.
 *
 * Shards are committed one by one (each crash-safe on its own); the manifest
 * is committed last. Until then the directory holds no manifest, so no
 * reader can take a half-written dataset for a whole one. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

struct stk_dataset_writer {
    char *dir;
    char *prefix;
    stk_schema schema;
    uint64_t records_per_shard, shard_bytes;
    int zstd_level;
    uint64_t zstd_block_bytes;
    stk_writer *cur; /* open shard, or NULL */
    stk_manifest m;  /* shards committed so far, classes, pack */
    size_t cap;
    stk_dir_lock *lock; /* the whole directory, from create to finish/abort */
    bool replacing;     /* STK_FORCE_REPLACE over a manifest: the old dataset stays until finish */
    bool committed;     /* the new manifest is in place */
    bool trust_jpeg;    /* stk_dataset_writer_trust_jpeg: passed to each shard's writer */
    /* An s3:// dataset: dir is the local staging directory, url the address. */
    stk_upload *up;
    char *url;
    bool keep_staged;    /* stk_dataset_writer_keep_staged: shards stay in dir until finish */
    bool commit_unknown; /* the manifest's PUT failed in a way that may have landed it */
};

/* Replacing: the shards this writer committed, none of which the old
 * manifest names (stk_dataset_new_prefix), removed when it fails or aborts. */
static void remove_new_shards(const stk_dataset_writer *dw)
{
    for (size_t i = 0; i < dw->m.nshards; i++) {
        char *p = stk__path_join(dw->dir, dw->m.shards[i].path);
        if (p) unlink(p);
        free(p);
    }
}

static int mkdirs(const char *dir, stk_error *err)
{
    if (!*dir) return stk_error_set(err, STK_E_ARG, "dataset directory is an empty string");
    char *p = strdup(dir);
    if (!p) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            int rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: cannot create directory", p);
            free(p);
            return rc;
        }
        if (!(*s = c)) break;
    }
    free(p);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return stk_error_set(err, STK_E_IO, "%s: not a directory", dir);
    return STK_OK;
}

/* An s3:// writer that did not commit: the shards it uploaded are deleted
 * (no manifest names them; with the commit's outcome unknown they stay, as
 * a manifest may name them). */
static void remote_free(stk_dataset_writer *dw)
{
    stk_error e;
    if (!dw->committed && !dw->commit_unknown) {
        stk_upload_wait(dw->up, &e);
        for (size_t i = 0; i < dw->m.nshards; i++) stk_upload_delete(dw->up, dw->m.shards[i].path, &e);
        char *log = stk__path_join(dw->dir, ".stoker-uploaded"); /* names only deleted objects now */
        if (log) unlink(log);
        free(log);
    }
    stk_upload_close(dw->up); /* deletes the lock object */
    dw->up = NULL;
}

static void dw_free(stk_dataset_writer *dw)
{
    if (!dw) return;
    stk_writer_abort(dw->cur);
    if (dw->up) remote_free(dw);
    else if (dw->replacing && !dw->committed) remove_new_shards(dw);
    for (size_t i = 0; i < dw->m.nshards; i++) free(dw->m.shards[i].path);
    free(dw->m.shards);
    for (size_t i = 0; i < dw->m.nclasses; i++) free(dw->m.classes[i]);
    free(dw->m.classes);
    free(dw->m.pack_json);
    free(dw->prefix);
    stk_dir_lock_release(dw->lock);
    if (dw->url && dw->dir) rmdir(dw->dir); /* the staging directory, when nothing is left in it */
    free(dw->url);
    free(dw->dir);
    free(dw);
}

/* An old dataset in dir: refused without force; with STK_FORCE_IN_PLACE its
 * manifest is removed now; with STK_FORCE_REPLACE the new shards take names
 * it does not use and it stays until finish. */
static int handle_old(stk_dataset_writer *dw, int force, stk_error *err)
{
    char *mp = stk__path_join(dw->dir, STK_MANIFEST_NAME);
    if (!mp) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    int rc = STK_OK;
    if (access(mp, F_OK) == 0) {
        if (!force)
            rc = stk_error_set(err, STK_E_EXISTS,
                               "%s: directory already holds a dataset (%s); refusing to replace it", dw->dir,
                               STK_MANIFEST_NAME);
        else if (force == STK_FORCE_IN_PLACE) {
            if (unlink(mp) != 0) rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: cannot remove", mp);
            else rc = stk__fsync_parent(mp, err);
        } else {
            char pfx[STK_NAME_MAX + 16];
            char *p = NULL;
            rc = stk_dataset_new_prefix(dw->dir, dw->prefix, pfx, sizeof pfx, err);
            if (!rc && !(p = strdup(pfx))) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
            if (!rc) {
                free(dw->prefix);
                dw->prefix = p;
                dw->replacing = true;
            }
        }
    }
    free(mp);
    return rc;
}

/* An s3:// dataset: the staging directory, held on this machine; the lock
 * object; an old dataset under the prefix as handle_old treats one in a
 * directory (its manifest fetched into the staging directory to choose the
 * new generation's prefix). */
static int remote_prepare(stk_dataset_writer *dw, const char *url, int force, stk_error *err)
{
    char stage[4096];
    if (!(dw->url = strdup(url))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    if (!(dw->up = stk_upload_open(url, err))) return err ? err->code : STK_E_IO;
    if (stk_upload_staging_dir(url, stage, sizeof stage, err)) return err ? err->code : STK_E_IO;
    free(dw->dir);
    if (!(dw->dir = strdup(stage))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    if (!(dw->lock = stk_dir_lock_take(stage, 0, 0, "stk_dataset_writer", err)))
        return err ? err->code : STK_E_BUSY;
    if (stk_upload_lock(dw->up, ".stoker-lock", "stk_dataset_writer", err))
        return err ? err->code : STK_E_BUSY;
    char *mp = stk__path_join(stage, STK_MANIFEST_NAME);
    if (!mp) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    unlink(mp); /* a leftover of a writer killed after its commit */
    uint64_t size;
    int rc = stk_upload_head(dw->up, STK_MANIFEST_NAME, &size, NULL, err);
    if (!rc && size != UINT64_MAX) {
        if (!force)
            rc = stk_error_set(err, STK_E_EXISTS, "%s: already holds a dataset (%s); refusing to replace it",
                               url, STK_MANIFEST_NAME);
        else if (force == STK_FORCE_IN_PLACE) rc = stk_upload_delete(dw->up, STK_MANIFEST_NAME, err);
        else {
            char pfx[STK_NAME_MAX + 16];
            char *p = NULL;
            rc = stk_upload_fetch(dw->up, STK_MANIFEST_NAME, mp, (size_t)1 << 30, NULL, err);
            if (!rc) rc = stk_dataset_new_prefix(stage, dw->prefix, pfx, sizeof pfx, err);
            if (!rc && !(p = strdup(pfx))) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
            if (!rc) {
                free(dw->prefix);
                dw->prefix = p;
                dw->replacing = true;
            }
            unlink(mp);
        }
    }
    free(mp);
    return rc;
}

static int copy_meta(stk_dataset_writer *dw, const stk_dataset_options *o, stk_error *err)
{
    if (o && stk__manifest_check_meta(o->classes, o->nclasses, o->pack_json, err))
        return err ? err->code : STK_E_ARG;
    dw->m.pack_json = strdup(o && o->pack_json ? o->pack_json : "{}");
    if (!dw->m.pack_json) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    if (!o || !o->nclasses) return STK_OK;
    if (!(dw->m.classes = calloc(o->nclasses, sizeof(char *))))
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    for (size_t i = 0; i < o->nclasses; i++) {
        if (!o->classes[i] || !*o->classes[i])
            return stk_error_set(err, STK_E_ARG, "class %zu has an empty name", i);
        if (!(dw->m.classes[i] = strdup(o->classes[i])))
            return stk_error_set(err, STK_E_NOMEM, "out of memory");
        dw->m.nclasses = i + 1;
    }
    return STK_OK;
}

/* stk_dataset_options as 0.1.0 laid it out, frozen: the smallest struct a
 * caller has. Later fields are appended (the assertions hold every 0.1.0
 * field in place), so a caller's struct is a prefix of the library's and its
 * size says which fields it has. */
typedef struct {
    uint64_t records_per_shard;
    uint64_t shard_bytes;
    const char *prefix;
    int force;
    size_t nclasses;
    const char *const *classes;
    const char *pack_json;
    int zstd_level;
    uint64_t zstd_block_bytes;
} dataset_options_v0;

#define SAME(f)                                                                       \
  _Static_assert(offsetof(stk_dataset_options, f) == offsetof(dataset_options_v0, f), \
                 "stk_dataset_options." #f " moved: fields are appended, never moved")
SAME(records_per_shard);
SAME(shard_bytes);
SAME(prefix);
SAME(force);
SAME(nclasses);
SAME(classes);
SAME(pack_json);
SAME(zstd_level);
SAME(zstd_block_bytes);
#undef SAME

void stk_dataset_options_init_sized(stk_dataset_options *opts, size_t size)
{
    if (opts) memset(opts, 0, size); /* every default is zero, in the caller's size */
}

/* The caller's options (`size` bytes) over the defaults (zero). A size below
 * 0.1.0's, or a larger struct whose extra bytes are set (a caller built
 * against a newer stoker), is refused. */
static int read_options(stk_dataset_options *dst, const stk_dataset_options *src, size_t size, stk_error *err)
{
    memset(dst, 0, sizeof *dst);
    if (size < sizeof(dataset_options_v0))
        return stk_error_set(err, STK_E_ARG,
                             "stk_dataset_options: size %zu is smaller than any release's (%zu)", size,
                             sizeof(dataset_options_v0));
    for (size_t i = sizeof *dst; i < size; i++)
        if (((const unsigned char *)src)[i])
            return stk_error_set(err, STK_E_ARG,
                                 "stk_dataset_options: the caller was built against a newer stoker "
                                 "(%zu bytes, libstoker %s knows %zu) and sets fields this library lacks",
                                 size, STK_VERSION_STRING, sizeof *dst);
    memcpy(dst, src, size < sizeof *dst ? size : sizeof *dst);
    return STK_OK;
}

stk_dataset_writer *stk_dataset_writer_create_sized(const char *dir, const stk_schema *schema,
                                                    const stk_dataset_options *opts, size_t size,
                                                    stk_error *err)
{
    if (!dir || !schema)
        return stk_error_set(err, STK_E_ARG, "stk_dataset_writer_create: NULL argument"), NULL;
    stk_dataset_options copy;
    if (opts && read_options(&copy, opts, size, err)) return NULL;
    const stk_dataset_options *o = opts ? &copy : NULL;
    if (stk_schema_validate(schema, err)) return NULL;
    const char *prefix = o && o->prefix ? o->prefix : "shard";
    if (!stk__name_is_valid(prefix))
        return stk_error_set(err, STK_E_ARG, "shard prefix '%.40s' must be 1-31 characters of [A-Za-z0-9_.-]",
                             prefix),
               NULL;
    stk_dataset_writer *dw = calloc(1, sizeof *dw);
    if (!dw) return stk_error_set(err, STK_E_NOMEM, "out of memory"), NULL;
    dw->schema = *schema;
    dw->m.schema = *schema;
    dw->m.version_major = STK_FORMAT_MAJOR;
    dw->m.version_minor = STK_FORMAT_MINOR;
    dw->records_per_shard = o ? o->records_per_shard : 0;
    dw->shard_bytes = o ? o->shard_bytes : 0;
    dw->zstd_level = o ? o->zstd_level : 0;
    dw->zstd_block_bytes = o ? o->zstd_block_bytes : 0;
    dw->dir = strdup(dir);
    dw->prefix = strdup(prefix);
    if (!dw->dir || !dw->prefix) {
        stk_error_set(err, STK_E_NOMEM, "out of memory");
        goto fail;
    }
    if (copy_meta(dw, o, err)) goto fail;
    if (stk_path_is_remote(dir)) {
        if (remote_prepare(dw, dir, o ? o->force : 0, err)) goto fail;
        return dw;
    }
    if (mkdirs(dir, err)) goto fail;
    /* Before anything in dir is touched: a second writer is refused here. */
    if (!(dw->lock = stk_dir_lock_take(dir, 0, 0, "stk_dataset_writer", err))) goto fail;
    if (handle_old(dw, o ? o->force : 0, err)) goto fail;
    return dw;
fail:
    if (o && o->force && o->force != STK_FORCE_IN_PLACE && dw->dir &&
        !dw->url) { /* nothing of it was touched */
        char *mp = stk__path_join(dw->dir, STK_MANIFEST_NAME);
        if (mp && access(mp, F_OK) == 0) stk__error_note_intact(err, dw->dir);
        free(mp);
    }
    dw_free(dw);
    return NULL;
}

int stk_shard_file_name(char *buf, size_t cap, const char *prefix, uint64_t index)
{
    return snprintf(buf, cap, "%s-%05llu.stk", prefix, (unsigned long long)index);
}

/* File name of the shard being written: PREFIX-00000.stk, ... */
static void shard_name(const stk_dataset_writer *dw, char *name, size_t cap)
{
    stk_shard_file_name(name, cap, dw->prefix, dw->m.nshards);
}

static int close_shard(stk_dataset_writer *dw, stk_error *err)
{
    if (!dw->cur) return STK_OK;
    if (dw->m.nshards == dw->cap) {
        size_t cap = dw->cap ? 2 * dw->cap : 16;
        stk_shard_entry *s = realloc(dw->m.shards, cap * sizeof *s);
        if (!s) return stk_error_set(err, STK_E_NOMEM, "out of memory");
        dw->m.shards = s;
        dw->cap = cap;
    }
    char name[STK_NAME_MAX + 48];
    shard_name(dw, name, sizeof name);
    stk_shard_entry *e = &dw->m.shards[dw->m.nshards];
    memset(e, 0, sizeof *e);
    if (!(e->path = strdup(name))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    stk_shard_info info;
    int rc = stk_writer_finish(dw->cur, &info, err);
    dw->cur = NULL;
    if (rc) {
        free(e->path);
        return rc;
    }
    e->records = info.records;
    e->file_size = info.file_size;
    e->file_hash = info.file_hash;
    e->index_hash = info.index_hash;
    dw->m.nshards++;
    if (dw->up) { /* uploaded on the client's thread while the next shard fills */
        char *path = stk__path_join(dw->dir, name);
        rc = path ? stk_upload_file(dw->up, path, name, !dw->keep_staged, err)
                  : stk_error_set(err, STK_E_NOMEM, "out of memory");
        free(path);
    }
    return rc;
}

/* The records a full shard will hold, when the options say (0: unknown):
 * records_per_shard, or as many fixed-size records as fit shard_bytes. */
static uint64_t shard_capacity(const stk_dataset_writer *dw)
{
    uint64_t n = dw->records_per_shard;
    if (!dw->shard_bytes) return n;
    uint64_t lo = 0, hi = n ? n : dw->shard_bytes; /* a record takes at least a byte */
    while (lo < hi) {                              /* the largest count whose shard fits */
        uint64_t mid = lo + (hi - lo + 1) / 2, size = stk_shard_size_for(&dw->schema, mid);
        if (size && size <= dw->shard_bytes) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static int open_shard(stk_dataset_writer *dw, stk_error *err)
{
    char name[STK_NAME_MAX + 48];
    shard_name(dw, name, sizeof name);
    char *path = stk__path_join(dw->dir, name);
    if (!path) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    dw->cur = stk_writer_create(path, &dw->schema, err);
    free(path);
    if (dw->cur && dw->trust_jpeg) stk_writer_trust_jpeg(dw->cur, 1, NULL);
    if (dw->cur && stk__schema_minor(&dw->schema) &&
        stk_writer_compression(dw->cur, UINT32_MAX, dw->zstd_level, dw->zstd_block_bytes, err)) {
        stk_writer_abort(dw->cur);
        dw->cur = NULL;
    }
    /* Shards of fixed-size records are streamed: the header is known, field 0
     * goes out from the writer's thread as it comes and the whole-file hash
     * is taken on the way (no read-back at finish). The bytes are the same. */
    uint64_t cap = dw->cur ? shard_capacity(dw) : 0;
    if (cap && stk_writer_expect(dw->cur, cap, err)) {
        stk_writer_abort(dw->cur);
        dw->cur = NULL;
    }
    return dw->cur ? STK_OK : (err ? err->code : STK_E_IO);
}

int stk_dataset_writer_trust_jpeg(stk_dataset_writer *dw, int trusted, stk_error *err)
{
    if (!dw) return stk_error_set(err, STK_E_ARG, "stk_dataset_writer_trust_jpeg: NULL writer");
    dw->trust_jpeg = trusted != 0;
    if (dw->cur) stk_writer_trust_jpeg(dw->cur, trusted, NULL);
    return STK_OK;
}

int stk_dataset_writer_append(stk_dataset_writer *dw, const stk_value *v, stk_error *err)
{
    return stk_dataset_writer_append_dims(dw, v, NULL, err);
}

int stk_dataset_writer_append_dims(stk_dataset_writer *dw, const stk_value *v, const uint64_t *dims,
                                   stk_error *err)
{
    if (!dw || !v) return stk_error_set(err, STK_E_ARG, "stk_dataset_writer_append: NULL argument");
    int rc;
    if (dw->cur && stk_writer_records(dw->cur) > 0) {
        bool full = dw->records_per_shard && stk_writer_records(dw->cur) >= dw->records_per_shard;
        if (!full && dw->shard_bytes) full = stk__writer_bytes_after(dw->cur, v) > dw->shard_bytes;
        if (full && (rc = close_shard(dw, err))) goto out;
    }
    if (!dw->cur && (rc = open_shard(dw, err))) goto out;
    rc = dims ? stk_writer_append_dims(dw->cur, v, dims, err) : stk_writer_append(dw->cur, v, err);
out:
    if (rc && dw->replacing) stk__error_note_intact(err, dw->url ? dw->url : dw->dir);
    return rc;
}

/* A commit that failed after its rename (the directory's fsync): is the
 * manifest in dir this writer's? Its shards, which no old manifest names,
 * must then stay. */
static bool manifest_is_ours(const stk_dataset_writer *dw)
{
    stk_manifest *m = stk_manifest_load(dw->dir, NULL);
    bool ours = m && m->nshards == dw->m.nshards && m->nshards > 0;
    for (size_t i = 0; ours && i < m->nshards; i++) ours = !strcmp(m->shards[i].path, dw->m.shards[i].path);
    stk_manifest_free(m);
    return ours;
}

/* Local files the staging directory holds for a committed s3:// dataset. */
static void clear_staging(const stk_dataset_writer *dw)
{
    static const char *const names[] = {STK_MANIFEST_NAME, ".stoker-uploaded"};
    for (size_t i = 0; i < dw->m.nshards + 2; i++) {
        char *p = stk__path_join(dw->dir, i < 2 ? names[i] : dw->m.shards[i - 2].path);
        if (p) unlink(p);
        free(p);
    }
}

/* s3://: every shard uploaded, then the manifest (written in the staging
 * directory, then PUT: the commit), then the old generation's shards go. */
static int finish_remote(stk_dataset_writer *dw, int rc, stk_error *err)
{
    if (!rc) rc = stk_upload_wait(dw->up, err);
    if (!rc) rc = stk_manifest_commit(&dw->m, dw->dir, err);
    if (!rc) rc = stk_upload_lock_check(dw->up, err);
    char *mp = rc ? NULL : stk__path_join(dw->dir, STK_MANIFEST_NAME);
    if (!rc && !mp) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
    if (!rc) {
        rc = stk_upload_file(dw->up, mp, STK_MANIFEST_NAME, 0, err);
        if (!rc) rc = stk_upload_wait(dw->up, err);
        if (!rc) dw->committed = true;
        else { /* did it land? then its shards must stay; unknown: they stay too */ struct stat st;
            uint64_t size;
            stk_error e2;
            if (stk_upload_head(dw->up, STK_MANIFEST_NAME, &size, NULL, &e2) || stat(mp, &st) != 0)
                dw->commit_unknown = true;
            else if (size == (uint64_t)st.st_size) dw->committed = true, rc = STK_OK;
        }
    }
    if (!rc && dw->replacing) {
        stk_error e2;
        stk_upload_sweep(dw->up, dw->dir, &e2); /* a failure leaves unnamed objects, no dataset lost */
    }
    if (dw->committed) clear_staging(dw);
    else if (dw->replacing) stk__error_note_intact(err, dw->url);
    free(mp);
    dw_free(dw);
    return rc;
}

int stk_dataset_writer_finish(stk_dataset_writer *dw, stk_error *err)
{
    if (!dw) return stk_error_set(err, STK_E_ARG, "stk_dataset_writer_finish: NULL writer");
    int rc = close_shard(dw, err);
    if (dw->up) return finish_remote(dw, rc, err);
    if (!rc) rc = stk_manifest_commit(&dw->m, dw->dir, err);
    if (!rc || (dw->replacing && manifest_is_ours(dw))) dw->committed = true;
    if (!rc && dw->replacing) {
        /* The new dataset is in place: the old shards (and any other file
         * named like a shard that the new manifest does not name) go. */
        stk_error e2;
        stk_dataset_sweep(dw->dir, &e2); /* a failure leaves inert files, no dataset lost */
    } else if (rc && dw->replacing && !dw->committed) stk__error_note_intact(err, dw->dir);
    dw_free(dw);
    return rc;
}

void stk_dataset_writer_abort(stk_dataset_writer *dw) { dw_free(dw); }

/* The 0.1.0 entry point: stk_dataset_writer_create is now an inline wrapper
 * that passes sizeof the caller's options; binaries built against 0.1.0 call
 * this symbol, with the 0.1.0 struct. Bound to the old name by an asm label
 * (GCC and Clang, ELF): the C name belongs to the header's inline function.
 * Their `force` keeps its 0.1.0 meaning, remove-first (STK_FORCE_IN_PLACE):
 * such a program names its shards PREFIX-NNNNN.stk whatever the directory
 * held; rebuilt against this header it gets the replace beside the old one. */
STK_API stk_dataset_writer *
stk__v0_dataset_writer_create(const char *dir, const stk_schema *schema, const stk_dataset_options *o,
                              stk_error *err) __asm__("stk_dataset_writer_create");
stk_dataset_writer *stk__v0_dataset_writer_create(const char *dir, const stk_schema *schema,
                                                  const stk_dataset_options *o, stk_error *err)
{
    dataset_options_v0 v0;
    if (!o) return stk_dataset_writer_create_sized(dir, schema, o, sizeof v0, err);
    memcpy(&v0, o, sizeof v0);
    if (v0.force) v0.force = STK_FORCE_IN_PLACE;
    return stk_dataset_writer_create_sized(dir, schema, (const stk_dataset_options *)(const void *)&v0,
                                           sizeof v0, err);
}

uint64_t stk_dataset_writer_shards(const stk_dataset_writer *dw) { return dw ? dw->m.nshards : 0; }

const char *stk_dataset_writer_prefix(const stk_dataset_writer *dw) { return dw ? dw->prefix : NULL; }

/* The first problem a verification reports, for the message. */
typedef struct {
    uint64_t n;
    uint64_t record;
    int field;
    char what[160];
} first_problem;

static void note_problem(void *user, const stk_shard *sh, uint64_t record, int field, int code,
                         const char *what)
{
    (void)sh, (void)code;
    first_problem *p = user;
    if (p->n++) return;
    p->record = record;
    p->field = field;
    snprintf(p->what, sizeof p->what, "%s", what);
}

/* Shard `index` of an interrupted run, verified in full, as a manifest entry. */
static int keep_shard(stk_dataset_writer *dw, uint64_t index, stk_shard_entry *e, stk_error *err)
{
    char name[STK_NAME_MAX + 48];
    stk_shard_file_name(name, sizeof name, dw->prefix, index);
    char *path = stk__path_join(dw->dir, name);
    if (!path) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    /* s3://: the staged copy (uploaded again unless the object is the one
     * logged), else the object fetched into the staging directory */
    bool fetched = false;
    int rc = STK_OK;
    if (dw->up && access(path, F_OK) != 0) {
        rc = stk_upload_fetch(dw->up, name, path, SIZE_MAX, NULL, err);
        fetched = !rc;
    }
    stk_shard *sh = rc ? NULL : stk_shard_open(path, err);
    if (!rc) rc = sh ? STK_OK : (err ? err->code : STK_E_IO);
    if (!rc && !stk_schema_equal(stk_shard_schema(sh), &dw->schema))
        rc = stk_error_set(err, STK_E_FORMAT, "%s: written with another schema than this dataset's", path);
    if (!rc) rc = stk_shard_verify_index(sh, 0, err);
    if (!rc) {
        first_problem p = {0};
        stk_shard_verify_records(sh, 0, stk_shard_records(sh), note_problem, &p);
        stk_shard_verify_padding(sh, note_problem, &p);
        if (p.n && p.record != UINT64_MAX)
            rc = stk_error_set(err, STK_E_CHECKSUM, "%s: record %llu field %d: %s (%llu problems)", path,
                               (unsigned long long)p.record, p.field, p.what, (unsigned long long)p.n);
        else if (p.n)
            rc = stk_error_set(err, STK_E_FORMAT, "%s: %s (%llu problems)", path, p.what,
                               (unsigned long long)p.n);
    }
    if (!rc) {
        *e = (stk_shard_entry){.path = strdup(name),
                               .records = stk_shard_records(sh),
                               .file_size = stk_shard_file_size(sh),
                               .file_hash = stk_shard_file_hash(sh),
                               .index_hash = stk_shard_index_hash(sh)};
        if (!e->path) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
    }
    stk_shard_close(sh);
    if (!rc && dw->up && !fetched) rc = stk_upload_file_once(dw->up, path, name, NULL, err);
    if (fetched && !dw->keep_staged) unlink(path);
    free(path);
    return rc;
}

int stk_dataset_writer_keep_staged(stk_dataset_writer *dw, int keep, stk_error *err)
{
    if (!dw) return stk_error_set(err, STK_E_ARG, "stk_dataset_writer_keep_staged: NULL writer");
    dw->keep_staged = keep != 0;
    return STK_OK;
}

const char *stk_dataset_writer_staging(const stk_dataset_writer *dw)
{
    return dw && dw->url ? dw->dir : NULL;
}

int stk_dataset_writer_resume(stk_dataset_writer *dw, uint64_t shards, uint64_t *records, stk_error *err)
{
    if (!dw) return stk_error_set(err, STK_E_ARG, "stk_dataset_writer_resume: NULL writer");
    if (dw->cur || dw->m.nshards)
        return stk_error_set(err, STK_E_ARG, "stk_dataset_writer_resume: %s: only before the first append",
                             dw->dir);
    if (shards > SIZE_MAX / sizeof(stk_shard_entry))
        return stk_error_set(err, STK_E_ARG, "stk_dataset_writer_resume: %llu shards",
                             (unsigned long long)shards);
    stk_shard_entry *s = shards ? calloc((size_t)shards, sizeof *s) : NULL;
    if (shards && !s) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    dw->m.shards = s;
    dw->cap = (size_t)shards;
    uint64_t n = 0;
    for (uint64_t i = 0; i < shards; i++) {
        int rc = keep_shard(dw, i, &s[i], err);
        if (rc) { /* keep nothing: the caller starts over or stops */
            for (size_t k = 0; k < dw->m.nshards; k++) free(s[k].path);
            free(s);
            dw->m.shards = NULL;
            dw->m.nshards = dw->cap = 0;
            return rc;
        }
        n += s[i].records;
        dw->m.nshards = (size_t)i + 1;
    }
    if (records) *records = n;
    return STK_OK;
}
