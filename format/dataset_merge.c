/* format/dataset_merge.c - one dataset from the datasets of a job array.
 *
 * Each part of a job array writes a whole dataset of its own into a
 * subdirectory; the merge writes one manifest above them that names their
 * shards in part order. No shard is copied or rewritten, so the merge is
 * cheap and the parts' own manifests keep checking their shards. */
#define _GNU_SOURCE
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool same_meta(const stk_manifest *a, const stk_manifest *b)
{
    if (!stk_schema_equal(&a->schema, &b->schema) || a->nclasses != b->nclasses) return false;
    for (size_t i = 0; i < a->nclasses; i++)
        if (strcmp(a->classes[i], b->classes[i]) != 0) return false;
    return strcmp(a->pack_json, b->pack_json) == 0;
}

/* Append part p's shards to out, their paths prefixed with the part's
 * directory name. */
static int take_shards(stk_manifest *out, size_t *cap, const stk_manifest *p, const char *part,
                       stk_error *err)
{
    for (size_t i = 0; i < p->nshards; i++) {
        if (out->nshards == *cap) {
            size_t c = *cap ? 2 * *cap : 16;
            stk_shard_entry *s = realloc(out->shards, c * sizeof *s);
            if (!s) return stk_error_set(err, STK_E_NOMEM, "out of memory");
            out->shards = s;
            *cap = c;
        }
        stk_shard_entry *e = &out->shards[out->nshards];
        *e = p->shards[i];
        size_t len = strlen(part) + 1 + strlen(p->shards[i].path) + 1;
        if (!(e->path = malloc(len))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
        snprintf(e->path, len, "%s/%s", part, p->shards[i].path);
        out->nshards++;
    }
    return STK_OK;
}

/* The merged manifest's version, schema, classes and pack object: the first
 * part's (same_meta checked the others), borrowed until out is freed. */
static void take_meta(stk_manifest *out, const stk_manifest *first)
{
    out->version_major = first->version_major;
    out->version_minor = first->version_minor;
    out->schema = first->schema;
    out->nclasses = first->nclasses;
    out->classes = first->classes;
    out->pack_json = first->pack_json;
}

/* Part k of an s3:// merge: its manifest fetched into the staging
 * directory, every shard it names present with its size. */
static stk_manifest *remote_part(stk_upload *up, const char *url, const char *stage, const char *part,
                                 stk_error *err)
{
    char *name = NULL, *local = NULL;
    stk_manifest *m = NULL;
    int missing = 0;
    if (asprintf(&name, "%s/%s", part, STK_MANIFEST_NAME) < 0 ||
        asprintf(&local, "%s/%s.%s", stage, part, STK_MANIFEST_NAME) < 0) {
        stk_error_set(err, STK_E_NOMEM, "out of memory");
        goto out;
    }
    if (stk_upload_fetch(up, name, local, (size_t)1 << 30, &missing, err)) {
        if (missing)
            stk_error_set(err, STK_E_MANIFEST, "%s: part '%s' is missing or unfinished (no %s/%s)", url, part,
                          part, STK_MANIFEST_NAME);
        goto out;
    }
    if (!(m = stk_manifest_load(local, err))) goto out;
    for (size_t i = 0; i < m->nshards; i++) {
        char *sn = NULL;
        uint64_t size;
        int rc = asprintf(&sn, "%s/%s", part, m->shards[i].path) < 0
                     ? stk_error_set(err, STK_E_NOMEM, "out of memory")
                     : stk_upload_head(up, sn, &size, NULL, err);
        if (!rc && size != m->shards[i].file_size)
            rc = stk_error_set(err, STK_E_MANIFEST,
                               "%s/%s: %s (part '%s' names it with %llu bytes); re-run that part", url, sn,
                               size == UINT64_MAX ? "missing" : "another size", part,
                               (unsigned long long)m->shards[i].file_size);
        free(sn);
        if (rc) {
            stk_manifest_free(m);
            m = NULL;
            break;
        }
    }
out:
    if (local) unlink(local);
    free(local);
    free(name);
    return m;
}

/* stk_dataset_merge into s3://: the parts' manifests are fetched, the merged
 * manifest is written in the staging directory and PUT last (the commit);
 * the parts stay as they are, so merging again gives the same manifest. */
static int merge_remote(const char *url, const char *const *parts, size_t nparts, stk_error *err)
{
    char stage[4096];
    stk_upload *up = stk_upload_open(url, err);
    stk_dir_lock *lock = NULL;
    int rc = up ? STK_OK : (err ? err->code : STK_E_IO);
    if (!rc) rc = stk_upload_staging_dir(url, stage, sizeof stage, err);
    if (!rc && !(lock = stk_dir_lock_take(stage, 0, 0, "merging parts", err)))
        rc = err ? err->code : STK_E_BUSY;
    if (!rc) rc = stk_upload_lock(up, ".stoker-lock", "merging parts", err);
    uint64_t old = UINT64_MAX;
    if (!rc) rc = stk_upload_head(up, STK_MANIFEST_NAME, &old, NULL, err);
    stk_manifest *first = NULL, out = {0};
    size_t cap = 0;
    for (size_t k = 0; k < nparts && !rc; k++) {
        if (!parts[k] || !stk__name_is_valid(parts[k])) {
            rc = stk_error_set(err, STK_E_ARG, "%s: part %zu: '%.64s' is not a part name ([A-Za-z0-9_.-])",
                               url, k, parts[k] ? parts[k] : "(null)");
            break;
        }
        stk_manifest *m = remote_part(up, url, stage, parts[k], err);
        if (!m) rc = err ? err->code : STK_E_MANIFEST;
        else if (first && !same_meta(first, m))
            rc = stk_error_set(
                err, STK_E_MANIFEST,
                "%s/%s: another schema, class list or pack object than %s/%s: not parts of one dataset", url,
                parts[k], url, parts[0]);
        else rc = take_shards(&out, &cap, m, parts[k], err);
        if (!first) first = m;
        else stk_manifest_free(m);
    }
    char *mp = stk__path_join(stage, STK_MANIFEST_NAME);
    if (!rc && !mp) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
    if (!rc) {
        take_meta(&out, first);
        rc = stk_manifest_commit(&out, stage, err);
    }
    if (!rc) rc = stk_upload_lock_check(up, err);
    if (!rc) rc = stk_upload_file(up, mp, STK_MANIFEST_NAME, 0, err);
    if (!rc) rc = stk_upload_wait(up, err);
    if (!rc && old != UINT64_MAX) {
        stk_error e2;
        stk_upload_sweep(up, stage, &e2); /* a failure leaves unnamed objects, no dataset lost */
    }
    if (mp) unlink(mp);
    free(mp);
    char *log = stk__path_join(stage, ".stoker-uploaded"); /* the manifest's line */
    if (log) unlink(log);
    free(log);
    for (size_t i = 0; i < out.nshards; i++) free(out.shards[i].path);
    free(out.shards);
    stk_manifest_free(first);
    stk_upload_close(up);
    stk_dir_lock_release(lock);
    if (lock) rmdir(stage);
    return rc;
}

int stk_dataset_merge(const char *dir, const char *const *parts, size_t nparts, stk_error *err)
{
    if (!dir || (!parts && nparts)) return stk_error_set(err, STK_E_ARG, "stk_dataset_merge: NULL argument");
    if (!nparts) return stk_error_set(err, STK_E_ARG, "%s: no parts to merge", dir);
    if (stk_path_is_remote(dir)) return merge_remote(dir, parts, nparts, err);
    stk_dir_lock *lock = stk_dir_lock_take(dir, 0, 0, "merging parts", err);
    if (!lock) return err ? err->code : STK_E_BUSY;
    /* A dataset already in dir stays whole until the new manifest replaces
     * it by rename; then its shards at the top of dir go (stk_dataset_sweep). */
    char *mp = stk__path_join(dir, STK_MANIFEST_NAME);
    struct stat st;
    ino_t old = mp && stat(mp, &st) == 0 ? st.st_ino : 0; /* the commit renames a new file over it */
    stk_manifest *first = NULL, out = {0};
    size_t cap = 0;
    int rc = STK_OK;
    for (size_t k = 0; k < nparts && !rc; k++) {
        if (!parts[k] || !stk__name_is_valid(parts[k])) {
            rc = stk_error_set(err, STK_E_ARG,
                               "%s: part %zu: '%.64s' is not a subdirectory name ([A-Za-z0-9_.-])", dir, k,
                               parts[k] ? parts[k] : "(null)");
            break;
        }
        char *pd = stk__path_join(dir, parts[k]);
        stk_manifest *m = pd ? stk_manifest_load(pd, err) : NULL;
        if (!pd) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
        else if (!m) rc = err ? err->code : STK_E_MANIFEST;
        else if (first && !same_meta(first, m))
            rc = stk_error_set(
                err, STK_E_MANIFEST,
                "%s: another schema, class list or pack object than %s/%s: not parts of one dataset", pd, dir,
                parts[0]);
        else rc = take_shards(&out, &cap, m, parts[k], err);
        free(pd);
        if (!first) first = m;
        else stk_manifest_free(m);
    }
    if (!rc) {
        take_meta(&out, first);
        rc = stk_manifest_commit(&out, dir, err);
        if (!rc && old) {
            stk_error e2;
            stk_dataset_sweep(dir, &e2); /* a failure leaves inert files, no dataset lost */
        }
    }
    if (rc && old && mp && stat(mp, &st) == 0 && st.st_ino == old) stk__error_note_intact(err, dir);
    free(mp);
    for (size_t i = 0; i < out.nshards; i++) free(out.shards[i].path);
    free(out.shards);
    stk_manifest_free(first);
    stk_dir_lock_release(lock);
    return rc;
}
