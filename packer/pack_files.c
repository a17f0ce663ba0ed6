/* packer/pack_files.c - OUTDIR: made, held (the directory lock), cleared of
 * a part's files; and the part's listing and skipped slices. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pack.h"
#include "parts.h"

int pk_ensure_dir(const char *dir)
{
    if (!*dir) {
        fprintf(stderr, "pack: OUTDIR is an empty string\n");
        return -1;
    }
    char *p = strdup(dir);
    if (!p) {
        fprintf(stderr, "pack: out of memory\n");
        return -1;
    }
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/') continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "pack: %s: cannot create directory: %s\n", p, strerror(errno));
            free(p);
            return -1;
        }
        if (!(*s = c)) break;
    }
    free(p);
    return 0;
}

bool pk_exists(const char *dir, const char *name)
{
    char *p = NULL;
    bool e = asprintf(&p, "%s/%s", dir, name) >= 0 && access(p, F_OK) == 0;
    free(p);
    return e;
}

void pk_remove_in(const char *dir, const char *name)
{
    char *p = NULL;
    if (asprintf(&p, "%s/%s", dir, name) >= 0) unlink(p);
    free(p);
}

/* The inode of DIR/manifest.json (0: none): a replace's commit renames a
 * new file over it, so an unchanged inode is the old dataset still there. */
ino_t pk_manifest_ino(const char *dir)
{
    char *p = NULL;
    struct stat st;
    ino_t ino = asprintf(&p, "%s/%s", dir, STK_MANIFEST_NAME) >= 0 && stat(p, &st) == 0 ? st.st_ino : 0;
    free(p);
    return ino;
}

bool pk_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Hold OUTDIR for this run: the whole of it, or part K of N shared with the
 * other parts; NULL (said on stderr) when another writer holds it. */
stk_dir_lock *pk_lock_out(const pk_opts *o)
{
    char what[64];
    bool part = !o->merge && o->parts > 1;
    if (o->merge) snprintf(what, sizeof what, "pack --merge");
    else if (part) snprintf(what, sizeof what, "pack --part %u/%u", o->part, o->parts);
    else snprintf(what, sizeof what, "pack");
    stk_error err;
    stk_dir_lock *l = stk_dir_lock_take(o->out, part ? o->part : 0, part ? o->parts : 0, what, &err);
    if (!l) fprintf(stderr, "pack: %s\n", err.msg);
    else if (stk_dir_lock_note(l) && !o->quiet) fprintf(stderr, "pack: %s\n", stk_dir_lock_note(l));
    return l;
}

/* Remove this part's files (shards, slices, record, state). */
void pk_remove_part(const pk_run *r, const pk_opts *o)
{
    pk_out_remove_from(&r->out, 0);
    pk_part_remove_files(o->out, o->part, o->parts);
    if (o->up) pk_remote_remove_part(r, o); /* s3://: the part's objects too */
}

static void tsv_field(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '\t') fputs("\\t", f);
        else if (*s == '\n') fputs("\\n", f);
        else if (*s == '\r') fputs("\\r", f);
        else if (*s == '\\') fputs("\\\\", f);
        else fputc(*s, f);
    }
}

int pk_write_slice(const pk_run *r, const char *suffix, uint64_t first, uint64_t end, bool skipped)
{
    char *path = pk_part_file(r->o->out, r->o->part, r->o->parts, suffix);
    char *text = NULL;
    size_t len = 0;
    FILE *f = path ? open_memstream(&text, &len) : NULL;
    if (!f) {
        free(path);
        return -1;
    }
    if (skipped)
        for (size_t k = 0; k < r->nskips; k++) {
            tsv_field(f, r->L.e[r->skips[k].index].path);
            fputc('\t', f);
            tsv_field(f, r->skips[k].reason);
            fputc('\n', f);
        }
    else
        for (uint64_t i = first; i < end; i++) {
            fprintf(f, "%llu\t%lld\t", (unsigned long long)i, (long long)r->L.e[i].label);
            tsv_field(f, r->L.e[i].path);
            fputc('\n', f);
        }
    fclose(f);
    stk_error err;
    int rc = stk_file_commit(path, text, len, &err);
    if (rc) fprintf(stderr, "pack: %s\n", err.msg);
    free(text);
    free(path);
    return rc ? -1 : 0;
}
