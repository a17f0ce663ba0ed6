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

int stk_dataset_merge(const char *dir, const char *const *parts, size_t nparts, stk_error *err)
{
    if (!dir || (!parts && nparts)) return stk_error_set(err, STK_E_ARG, "stk_dataset_merge: NULL argument");
    if (!nparts) return stk_error_set(err, STK_E_ARG, "%s: no parts to merge", dir);
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
        out.version_major = first->version_major;
        out.version_minor = first->version_minor;
        out.schema = first->schema;
        out.nclasses = first->nclasses;
        out.classes = first->classes;
        out.pack_json = first->pack_json;
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
