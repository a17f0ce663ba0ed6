/* format/dataset_replace.c - a dataset replaced beside itself (FORMAT.md §7.3).
 *
 * A writer told to replace the dataset in a directory leaves the old one
 * whole until the new one is complete: the new shards get names the old
 * manifest does not use (a generation tag in the prefix), the new manifest's
 * rename is the one moment the directory changes datasets, and only then are
 * the old shards removed. */
#define _GNU_SOURCE
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Does `name` read as a shard file name, PFX-NNNNN.stk or PFX-NNNNN.stk.tmp
 * (PFX of [A-Za-z0-9_.-], at least 5 digits)? *plen gets PFX's length. */
static bool shard_like(const char *name, size_t *plen)
{
    size_t n = strlen(name);
    if (n > 4 && !strcmp(name + n - 4, ".tmp")) n -= 4;
    if (n < 4 || strncmp(name + n - 4, ".stk", 4)) return false;
    n -= 4;
    size_t d = 0;
    while (d < n && name[n - 1 - d] >= '0' && name[n - 1 - d] <= '9') d++;
    if (d < 5 || d == n || name[n - 1 - d] != '-') return false;
    n -= d + 1;
    if (!n) return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '.' || c == '-'))
            return false;
    }
    *plen = n;
    return true;
}

bool stk__shard_like(const char *name)
{
    size_t pl;
    return shard_like(name, &pl);
}

static void gen_prefix(char *out, size_t cap, const char *prefix, unsigned gen)
{
    if (gen) snprintf(out, cap, "%s.g%u", prefix, gen);
    else snprintf(out, cap, "%s", prefix);
}

/* Is `name` a shard (or its temporary file) of prefix `pfx`? */
static bool of_prefix(const char *name, const char *pfx)
{
    size_t pl;
    return shard_like(name, &pl) && pl == strlen(pfx) && !strncmp(name, pfx, pl);
}

static bool named_by(const stk_manifest *m, const char *name)
{
    for (size_t i = 0; m && i < m->nshards; i++)
        if (!strcmp(m->shards[i].path, name)) return true;
    return false;
}

int stk_dataset_new_prefix(const char *dir, const char *prefix, char *out, size_t cap, stk_error *err)
{
    if (!dir || !prefix || !out)
        return stk_error_set(err, STK_E_ARG, "stk_dataset_new_prefix: NULL argument");
    if (cap < strlen(prefix) + 12)
        return stk_error_set(err, STK_E_ARG, "stk_dataset_new_prefix: a buffer of %zu bytes is too small",
                             cap);
    char base[STK_NAME_MAX + 16]; /* out may be prefix itself */
    if (strlen(prefix) >= sizeof base)
        return stk_error_set(err, STK_E_ARG, "shard prefix '%.40s' is too long", prefix);
    snprintf(base, sizeof base, "%s", prefix);
    prefix = base;
    char *mp = stk__path_join(dir, STK_MANIFEST_NAME);
    if (!mp) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    bool present = access(mp, F_OK) == 0;
    stk_manifest *old = present ? stk_manifest_load(mp, NULL) : NULL;
    free(mp);
    gen_prefix(out, cap, prefix, 0);
    if (!present) return STK_OK; /* nothing to replace: the plain names */
    DIR *d = opendir(dir);
    if (!d) return stk__error_set_errno(err, STK_E_IO, errno, "%s: cannot list the directory", dir);
    /* The smallest generation none of whose names the old dataset uses (with
     * an unreadable manifest: none of whose names any file in dir has). */
    for (unsigned gen = 0;; gen++) {
        gen_prefix(out, cap, prefix, gen);
        bool used = false;
        if (old) {
            for (size_t i = 0; i < old->nshards && !used; i++) used = of_prefix(old->shards[i].path, out);
        } else {
            rewinddir(d);
            for (struct dirent *de; !used && (de = readdir(d));) used = of_prefix(de->d_name, out);
        }
        if (!used) break;
    }
    /* Leftovers of an earlier replace that failed, under the names this one
     * takes: removed first, so their room is free again. */
    rewinddir(d);
    int rc = STK_OK;
    for (struct dirent *de; (de = readdir(d));) {
        if (!of_prefix(de->d_name, out) || named_by(old, de->d_name)) continue;
        char *p = stk__path_join(dir, de->d_name);
        if (!p) {
            rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
            break;
        }
        if (unlink(p) != 0 && errno != ENOENT)
            rc = stk__error_set_errno(err, STK_E_IO, errno,
                                      "%s: cannot remove a leftover of a failed replace", p);
        free(p);
        if (rc) break;
    }
    closedir(d);
    stk_manifest_free(old);
    return rc;
}

int stk_dataset_sweep(const char *dir, stk_error *err)
{
    if (!dir) return stk_error_set(err, STK_E_ARG, "stk_dataset_sweep: NULL argument");
    char *mp = stk__path_join(dir, STK_MANIFEST_NAME);
    if (!mp) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    stk_manifest *m = stk_manifest_load(mp, err);
    if (!m) {
        free(mp);
        return err ? err->code : STK_E_MANIFEST;
    }
    DIR *d = opendir(dir);
    int rc = d ? STK_OK : stk__error_set_errno(err, STK_E_IO, errno, "%s: cannot list the directory", dir);
    bool removed = false;
    for (struct dirent *de; d && !rc && (de = readdir(d));) {
        size_t pl;
        if (!shard_like(de->d_name, &pl) || named_by(m, de->d_name)) continue;
        char *p = stk__path_join(dir, de->d_name);
        struct stat st;
        if (!p) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
        else if (lstat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            if (unlink(p) == 0) removed = true;
            else if (errno != ENOENT) rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: cannot remove", p);
        }
        free(p);
    }
    if (d) closedir(d);
    if (!rc && removed) rc = stk__fsync_parent(mp, err);
    free(mp);
    stk_manifest_free(m);
    return rc;
}

void stk__error_note_intact(stk_error *err, const char *dir)
{
    if (!err) return;
    char tail[STK_ERROR_MSG_MAX];
    int n = snprintf(tail, sizeof tail, "; the old dataset in %s is intact", dir);
    if (n < 0 || (size_t)n >= sizeof tail) return;
    size_t len = strlen(err->msg);
    if (len + (size_t)n >= sizeof err->msg) len = sizeof err->msg - 1 - (size_t)n; /* the note wins */
    memcpy(err->msg + len, tail, (size_t)n + 1);
}
