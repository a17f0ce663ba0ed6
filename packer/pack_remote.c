/* packer/pack_remote.c - OUT in s3://: pack writes into a local staging
 * directory exactly as into a local OUT and uploads as it goes.
 *
 * Each shard is queued for upload when it is committed (stk_upload_file:
 * the upload thread sends it while the next one fills). The staged copy
 * stays until its part is complete: a resumed run verifies the shards it
 * keeps there as a local resume does, then skips the upload of every one
 * the upload log says is in place with its size and ETag (a HEAD each).
 * A part of N uploads its listing slices and then its record
 * (pack-part-K-of-N.json, the part's commit) and clears its staged files;
 * the merge (at once for 1 of 1, or pack --merge on any machine) fetches
 * the records and slices, checks every shard object by HEAD, uploads
 * listing.tsv and skipped.tsv, and PUTs manifest.json last: the commit
 * (S3 has no rename). The parts' records stay, so merging again gives the
 * same manifest. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pack.h"
#include "parts.h"

static void say(const stk_error *e) { fprintf(stderr, "pack: %s\n", e->msg); }

int pk_remote_begin(pk_opts *lo, const pk_opts *o, char *stage, size_t cap)
{
    *lo = *o;
    lo->url = NULL;
    lo->up = NULL;
    if (!stk_path_is_remote(o->out)) return 0;
    stk_error err;
    if (!(lo->up = stk_upload_open(o->out, &err)) || stk_upload_staging_dir(o->out, stage, cap, &err)) {
        say(&err);
        return -1;
    }
    lo->url = o->out;
    lo->out = stage;
    bool part = !o->merge && o->parts > 1;
    char name[64], what[64];
    if (part) snprintf(name, sizeof name, ".stoker-lock-part-%04u-of-%04u", o->part, o->parts);
    else snprintf(name, sizeof name, ".stoker-lock");
    if (o->merge) snprintf(what, sizeof what, "pack --merge");
    else if (part) snprintf(what, sizeof what, "pack --part %u/%u", o->part, o->parts);
    else snprintf(what, sizeof what, "pack");
    if (stk_upload_lock(lo->up, name, what, &err)) {
        say(&err);
        return -1;
    }
    /* The dataset under the prefix, as the staging directory's manifest:
     * the run then treats it as a local one (refused, replaced beside, or,
     * --force-in-place, removed first). */
    char *mp = NULL;
    uint64_t size;
    int rc = asprintf(&mp, "%s/%s", stage, STK_MANIFEST_NAME) < 0
                 ? stk_error_set(&err, STK_E_NOMEM, "out of memory")
                 : stk_upload_head(lo->up, STK_MANIFEST_NAME, &size, NULL, &err);
    if (!rc) unlink(mp);
    if (!rc && size != UINT64_MAX) {
        if (o->force && o->force_in_place && !o->merge)
            rc = stk_upload_delete(lo->up, STK_MANIFEST_NAME, &err);
        else rc = stk_upload_fetch(lo->up, STK_MANIFEST_NAME, mp, (size_t)1 << 30, NULL, &err);
    }
    free(mp);
    /* This part's record where another run (another machine) committed it:
     * a rerun sees the part as complete, or as another pack's. A staged
     * record whose upload never happened is dropped: the part is redone
     * from its staged shards. */
    if (!rc && part) {
        char *rp = pk_part_file(stage, o->part, o->parts, ".json");
        const char *base = rp ? strrchr(rp, '/') + 1 : NULL;
        int missing = 0;
        if (!rp) rc = stk_error_set(&err, STK_E_NOMEM, "out of memory");
        else if (stk_upload_fetch(lo->up, base, rp, (size_t)1 << 30, &missing, &err)) {
            if (missing) rc = STK_OK, unlink(rp);
            else rc = err.code;
        }
        free(rp);
    }
    if (rc) say(&err);
    return rc ? -1 : 0;
}

void pk_remote_end(pk_opts *lo)
{
    stk_upload_close(lo->up); /* waits for what it sent; deletes the lock object */
    lo->up = NULL;
    if (!lo->url) return;
    /* The staging directory goes when nothing but the upload log is left
     * (every part staged on this machine is complete). */
    DIR *d = opendir(lo->out);
    bool other = !d;
    for (struct dirent *de; d && !other && (de = readdir(d));)
        other = strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strcmp(de->d_name, ".stoker-uploaded");
    if (d) closedir(d);
    char *log = NULL;
    if (!other && asprintf(&log, "%s/.stoker-uploaded", lo->out) >= 0) unlink(log);
    free(log);
    rmdir(lo->out);
}

int pk_remote_sync_kept(pk_run *r)
{
    const pk_opts *o = r->o;
    size_t skipped = 0;
    for (size_t i = 0; i < r->out.nshards; i++) {
        char *path = pk_out_shard_path(&r->out, i);
        int sk = 0;
        stk_error err;
        int rc = path ? stk_upload_file_once(o->up, path, r->out.shards[i].path, &sk, &err)
                      : stk_error_set(&err, STK_E_NOMEM, "out of memory");
        free(path);
        if (rc) {
            say(&err);
            return -1;
        }
        skipped += (size_t)sk;
    }
    if (r->out.nshards && !o->quiet)
        fprintf(stderr, "pack: %zu kept shards already in %s, %zu uploaded again\n", skipped, o->url,
                r->out.nshards - skipped);
    return 0;
}

int pk_remote_sync_record(const pk_opts *o)
{
    char *rp = pk_part_file(o->out, 1, 1, ".json");
    stk_error err;
    stk_manifest *m = rp ? stk_manifest_load(rp, &err) : NULL;
    int rc = m ? STK_OK : rp ? err.code : stk_error_set(&err, STK_E_NOMEM, "out of memory");
    for (size_t i = 0; !rc && i < m->nshards; i++) {
        char *p = NULL;
        rc = asprintf(&p, "%s/%s", o->out, m->shards[i].path) < 0
                 ? stk_error_set(&err, STK_E_NOMEM, "out of memory")
                 : stk_upload_file_once(o->up, p, m->shards[i].path, NULL, &err);
        free(p);
    }
    if (!rc) rc = stk_upload_wait(o->up, &err);
    stk_manifest_free(m);
    free(rp);
    if (rc) say(&err);
    return rc ? -1 : 0;
}

static int upload_now(stk_upload *up, const char *path, stk_error *err)
{
    int rc = stk_upload_file(up, path, strrchr(path, '/') + 1, 0, err);
    return rc ? rc : stk_upload_wait(up, err);
}

int pk_remote_finish_part(const pk_run *r)
{
    const pk_opts *o = r->o;
    stk_error err;
    int rc = stk_upload_wait(o->up, &err); /* every shard in place before the record names them */
    if (o->parts > 1) {
        static const char *const suffixes[] = {".listing.tsv", ".skipped.tsv", ".json"}; /* the record last */
        for (size_t i = 0; !rc && i < 3; i++) {
            char *p = pk_part_file(o->out, o->part, o->parts, suffixes[i]);
            rc = p ? upload_now(o->up, p, &err) : stk_error_set(&err, STK_E_NOMEM, "out of memory");
            free(p);
        }
        if (!rc) { /* the part is in s3:// whole: its staged copy goes */
            pk_out_remove_from(&r->out, 0);
            pk_part_remove_files(o->out, o->part, o->parts);
        }
    }
    if (rc) say(&err);
    return rc ? -1 : 0;
}

/* The parts' records and slices, fetched into the staging directory. */
static int fetch_parts(const pk_opts *o, stk_error *err)
{
    char **names;
    uint64_t *sizes;
    size_t n;
    int rc = stk_upload_list(o->up, &names, &sizes, &n, err);
    for (size_t i = 0; !rc && i < n; i++) {
        unsigned k, m;
        int end = 0;
        if (sscanf(names[i], "pack-part-%4u-of-%4u%n", &k, &m, &end) != 2 || !end) continue;
        const char *tail = names[i] + end;
        if (strcmp(tail, ".json") && strcmp(tail, ".listing.tsv") && strcmp(tail, ".skipped.tsv")) continue;
        char *p = NULL;
        rc = asprintf(&p, "%s/%s", o->out, names[i]) < 0
                 ? stk_error_set(err, STK_E_NOMEM, "out of memory")
                 : stk_upload_fetch(o->up, names[i], p, SIZE_MAX, NULL, err);
        free(p);
    }
    if (!rc) stk_upload_list_free(names, sizes, n);
    return rc;
}

typedef struct {
    const pk_opts *o;
} check_ctx;

/* A part's shard in s3://: present with the size its part recorded. */
static int check_shard(void *user, const stk_shard_entry *e, unsigned part, stk_error *err)
{
    const check_ctx *c = user;
    uint64_t size;
    int rc = stk_upload_head(c->o->up, e->path, &size, NULL, err);
    if (!rc && size != e->file_size)
        rc = stk_error_set(err, STK_E_MANIFEST, "%s/%s: %s (part %u recorded %llu bytes); re-run that part",
                           c->o->url, e->path, size == UINT64_MAX ? "missing" : "has another size", part,
                           (unsigned long long)e->file_size);
    return rc;
}

/* Every file in the staging directory (it is this address's alone). */
static void clear_stage(const char *stage)
{
    DIR *d = opendir(stage);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.' && (!de->d_name[1] || !strcmp(de->d_name, ".."))) continue;
        if (!strcmp(de->d_name, ".stoker-lock")) continue; /* the local lock's: released by its holder */
        char *p = NULL;
        if (asprintf(&p, "%s/%s", stage, de->d_name) >= 0) unlink(p);
        free(p);
    }
    if (d) closedir(d);
}

int pk_remote_merge(const pk_opts *o, unsigned parts, pk_merge_result *mr, stk_error *err)
{
    check_ctx c = {.o = o};
    pk_shard_check chk = {.fn = check_shard, .user = &c};
    int rc = STK_OK;
    if (parts == 1) rc = pk_merge(o->out, 1, mr, err); /* the shards are staged here: opened as locally */
    else {
        if (!(rc = fetch_parts(o, err))) rc = pk_merge_checked(o->out, parts, &chk, mr, err);
    }
    static const char *const names[] = {"listing.tsv", "skipped.tsv",
                                        STK_MANIFEST_NAME}; /* the manifest last */
    for (size_t i = 0; !rc && i < 3; i++) {
        char *p = NULL;
        if (i == 2 && (rc = stk_upload_lock_check(o->up, err))) break;
        rc = asprintf(&p, "%s/%s", o->out, names[i]) < 0 ? stk_error_set(err, STK_E_NOMEM, "out of memory")
                                                         : upload_now(o->up, p, err);
        free(p);
    }
    if (!rc) {
        stk_error e2; /* an old generation's shards, a rerun part's leftovers: unnamed objects */
        char *mp = NULL;
        if (asprintf(&mp, "%s/%s", o->out, STK_MANIFEST_NAME) >= 0) stk_upload_sweep(o->up, o->out, &e2);
        free(mp);
        clear_stage(o->out);
    }
    return rc;
}

void pk_remote_remove_part(const pk_run *r, const pk_opts *o)
{
    char **names;
    uint64_t *sizes;
    size_t n;
    stk_error err;
    if (stk_upload_wait(o->up, &err) || stk_upload_list(o->up, &names, &sizes, &n, &err)) return;
    char rec[64];
    snprintf(rec, sizeof rec, "pack-part-%04u-of-%04u.", o->part, o->parts);
    size_t pl = strlen(r->out.prefix);
    for (size_t i = 0; i < n; i++) {
        const char *s = names[i];
        size_t len = strlen(s);
        bool shard =
            !strncmp(s, r->out.prefix, pl) && s[pl] == '-' && len > 4 && !strcmp(s + len - 4, ".stk");
        if (shard || !strncmp(s, rec, strlen(rec))) stk_upload_delete(o->up, s, &err);
    }
    stk_upload_list_free(names, sizes, n);
}

void pk_remote_json(const pk_opts *o)
{
    if (!o->up) return;
    uint64_t sent = 0, skipped = 0;
    stk_upload_counts(o->up, &sent, &skipped);
    printf("\"uploaded\": %llu, \"upload_skipped\": %llu, ", (unsigned long long)sent,
           (unsigned long long)skipped);
}
