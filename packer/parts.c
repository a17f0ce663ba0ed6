/* packer/parts.c - see parts.h. */
#define _GNU_SOURCE
#include "parts.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void pk_part_range(uint64_t total, unsigned k, unsigned n, uint64_t *first, uint64_t *end)
{
    /* 128-bit products: total * k cannot overflow. */
    *first = (uint64_t)((unsigned __int128)total * (k - 1) / n);
    *end = (uint64_t)((unsigned __int128)total * k / n);
}

char *pk_part_file(const char *dir, unsigned k, unsigned n, const char *suffix)
{
    char *p = NULL;
    return asprintf(&p, "%s/pack-part-%04u-of-%04u%s", dir, k, n, suffix) < 0 ? NULL : p;
}

static json_t *hexj(uint64_t v)
{
    char b[17];
    snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
    return json_string(b);
}

static uint64_t unhex(json_t *j)
{
    const char *s = json_string_value(j);
    return s && strlen(s) == 16 ? strtoull(s, NULL, 16) : 0;
}

int pk_part_commit(const char *dir, const pk_part *p, stk_error *err)
{
    json_t *pack = json_loads(p->pack_json, 0, NULL);
    if (!json_is_object(pack)) {
        json_decref(pack);
        return stk_error_set(err, STK_E_ARG, "pack parameters are not a JSON object");
    }
    for (size_t i = 0; i < p->nclasses; i++) { /* json_string refuses what is not UTF-8 */
        json_t *s = json_string(p->classes[i]);
        if (!s) {
            json_decref(pack);
            return stk_error_set(err, STK_E_ARG, "class name \"%.64s\" is not valid UTF-8", p->classes[i]);
        }
        json_decref(s);
    }
    json_t *o = json_object(), *cls = json_array(), *sh = json_array();
    json_object_set_new(o, "part", json_integer(p->part));
    json_object_set_new(o, "parts", json_integer(p->parts));
    json_object_set_new(o, "params", hexj(p->params));
    json_object_set_new(o, "first", json_integer((json_int_t)p->first));
    json_object_set_new(o, "end", json_integer((json_int_t)p->end));
    json_object_set_new(o, "packed", json_integer((json_int_t)p->packed));
    json_object_set_new(o, "skipped", json_integer((json_int_t)p->skipped));
    for (size_t i = 0; i < p->nclasses; i++) json_array_append_new(cls, json_string(p->classes[i]));
    json_object_set_new(o, "classes", cls);
    json_object_set_new(o, "pack", pack);
    for (size_t i = 0; i < p->nshards; i++) {
        const stk_shard_entry *e = &p->shards[i];
        json_t *s = json_object();
        json_object_set_new(s, "path", json_string(e->path));
        json_object_set_new(s, "records", json_integer((json_int_t)e->records));
        json_object_set_new(s, "bytes", json_integer((json_int_t)e->file_size));
        json_object_set_new(s, "xxh3", hexj(e->file_hash));
        json_object_set_new(s, "index_xxh3", hexj(e->index_hash));
        json_array_append_new(sh, s);
    }
    json_object_set_new(o, "shards", sh);
    char *text = json_dumps(o, JSON_INDENT(1));
    json_decref(o);
    char *path = pk_part_file(dir, p->part, p->parts, ".json");
    int rc = text && path ? stk_file_commit(path, text, strlen(text), err) : stk_error_set(err, STK_E_NOMEM, "out of memory");
    free(text);
    free(path);
    return rc;
}

static json_t *load_part(const char *dir, unsigned k, unsigned n)
{
    char *path = pk_part_file(dir, k, n, ".json");
    json_t *j = path ? json_load_file(path, JSON_REJECT_DUPLICATES, NULL) : NULL;
    free(path);
    return json_is_object(j) ? j : (json_decref(j), NULL);
}

uint64_t pk_part_params(const char *dir, unsigned k, unsigned n)
{
    json_t *j = load_part(dir, k, n);
    uint64_t v = j ? unhex(json_object_get(j, "params")) : 0;
    json_decref(j);
    return v;
}

void pk_part_counts(const char *dir, unsigned k, unsigned n, uint64_t *packed, uint64_t *skipped, uint64_t *nshards)
{
    json_t *j = load_part(dir, k, n);
    if (!j) return;
    *packed = (uint64_t)json_integer_value(json_object_get(j, "packed"));
    *skipped = (uint64_t)json_integer_value(json_object_get(j, "skipped"));
    *nshards = json_array_size(json_object_get(j, "shards"));
    json_decref(j);
}

/* The N of the parts present in dir (0 if none, UINT32_MAX if they
 * disagree); with want != 0, only parts of that N count. */
static unsigned find_parts(const char *dir, unsigned want, bool *seen, unsigned max)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    unsigned n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        unsigned k, m;
        char tail[8];
        if (sscanf(de->d_name, "pack-part-%4u-of-%4u%7s", &k, &m, tail) != 3 || strcmp(tail, ".json")) continue;
        if (want && m != want) continue;
        if (n && m != n) n = UINT32_MAX;
        else n = m;
        if (k >= 1 && k <= max && n != UINT32_MAX) seen[k] = true;
    }
    closedir(d);
    return n;
}

/* Append DIR/pack-part-...<suffix> to `out` (header written once by caller). */
static int append_file(FILE *out, const char *dir, unsigned k, unsigned n, const char *suffix, stk_error *err)
{
    char *path = pk_part_file(dir, k, n, suffix);
    FILE *in = path ? fopen(path, "rb") : NULL;
    int rc = in ? STK_OK : stk_error_set(err, STK_E_IO, "%s: cannot open: %s", path ? path : "part file", strerror(errno));
    char buf[65536];
    size_t r;
    while (!rc && (r = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, r, out) != r) rc = stk_error_set(err, STK_E_IO, "write failed: %s", strerror(errno));
    if (in) fclose(in);
    free(path);
    return rc;
}

/* Concatenate every part's <suffix> slice under `header` into DIR/name, committed. */
static int commit_concat(const char *dir, unsigned n, const char *suffix, const char *name, const char *header,
                         stk_error *err)
{
    char *path = NULL, *tmp = NULL;
    if (asprintf(&path, "%s/%s", dir, name) < 0 || asprintf(&tmp, "%s/%s.tmp", dir, name) < 0)
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    FILE *f = fopen(tmp, "wb");
    int rc = f ? STK_OK : stk_error_set(err, STK_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
    if (!rc) fputs(header, f);
    for (unsigned k = 1; k <= n && !rc; k++) rc = append_file(f, dir, k, n, suffix, err);
    if (f && (fflush(f) != 0 || fsync(fileno(f)) != 0) && !rc) rc = stk_error_set(err, STK_E_IO, "%s: write failed: %s", tmp, strerror(errno));
    if (f && fclose(f) != 0 && !rc) rc = stk_error_set(err, STK_E_IO, "%s: close failed", tmp);
    if (!rc && rename(tmp, path) != 0) rc = stk_error_set(err, STK_E_IO, "%s: rename failed: %s", tmp, strerror(errno));
    if (rc) unlink(tmp);
    free(path);
    free(tmp);
    return rc;
}

/* Check the part against part 1 and append its shards to the manifest. */
static int take_part(stk_manifest *m, json_t *p, json_t *p1, unsigned k, const char *dir, stk_error *err)
{
    if (unhex(json_object_get(p, "params")) != unhex(json_object_get(p1, "params")) ||
        !json_equal(json_object_get(p, "classes"), json_object_get(p1, "classes")))
        return stk_error_set(err, STK_E_MANIFEST, "%s: part %u was packed from another listing or with other flags than part 1", dir, k);
    json_t *sh = json_object_get(p, "shards");
    size_t n = json_array_size(sh);
    stk_shard_entry *e = realloc(m->shards, (m->nshards + n + 1) * sizeof *e);
    if (!e) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    m->shards = e;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(sh, i);
        stk_shard_entry *x = &m->shards[m->nshards];
        x->path = strdup(json_string_value(json_object_get(s, "path")) ? json_string_value(json_object_get(s, "path")) : "");
        x->records = (uint64_t)json_integer_value(json_object_get(s, "records"));
        x->file_size = (uint64_t)json_integer_value(json_object_get(s, "bytes"));
        x->file_hash = unhex(json_object_get(s, "xxh3"));
        x->index_hash = unhex(json_object_get(s, "index_xxh3"));
        m->nshards++;
        /* The shard must still be the one the part committed: O(1) check. */
        char *full = NULL;
        stk_error e2;
        if (!x->path || asprintf(&full, "%s/%s", dir, x->path) < 0) return stk_error_set(err, STK_E_NOMEM, "out of memory");
        stk_shard *s2 = stk_shard_open(full, &e2);
        int bad = !s2 || stk_shard_index_hash(s2) != x->index_hash || stk_shard_records(s2) != x->records;
        stk_shard_close(s2);
        if (bad) {
            int rc = s2 ? stk_error_set(err, STK_E_MANIFEST, "%s: differs from what part %u recorded; re-run that part", full, k)
                        : stk_error_set(err, e2.code, "%s", e2.msg);
            free(full);
            return rc;
        }
        free(full);
    }
    return STK_OK;
}

static int build_manifest(const char *dir, unsigned n, json_t **parts, pk_merge_result *res, stk_error *err)
{
    stk_manifest m;
    memset(&m, 0, sizeof m);
    json_t *p1 = parts[0], *cls = json_object_get(p1, "classes"), *pack = json_deep_copy(json_object_get(p1, "pack"));
    int rc = STK_OK;
    for (unsigned k = 1; k <= n && !rc; k++) {
        rc = take_part(&m, parts[k - 1], p1, k, dir, err);
        res->packed += (uint64_t)json_integer_value(json_object_get(parts[k - 1], "packed"));
        res->skipped += (uint64_t)json_integer_value(json_object_get(parts[k - 1], "skipped"));
    }
    m.nclasses = json_array_size(cls);
    m.classes = calloc(m.nclasses + 1, sizeof *m.classes);
    for (size_t i = 0; m.classes && i < m.nclasses; i++) m.classes[i] = (char *)json_string_value(json_array_get(cls, i));
    json_object_set_new(pack, "packed", json_integer((json_int_t)res->packed));
    json_object_set_new(pack, "skipped", json_integer((json_int_t)res->skipped));
    m.pack_json = json_dumps(pack, JSON_COMPACT);
    if (!rc && (!m.classes || !m.pack_json)) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
    /* Schema: from the first shard (every part shares the flags). */
    stk_shard *s0 = NULL;
    if (!rc && m.nshards) {
        char *full = NULL;
        if (asprintf(&full, "%s/%s", dir, m.shards[0].path) >= 0) s0 = stk_shard_open(full, err);
        free(full);
        if (!s0) rc = err ? err->code : STK_E_IO;
        else m.schema = *stk_shard_schema(s0);
        stk_shard_close(s0);
    } else if (!rc) {
        rc = stk_error_set(err, STK_E_ARG, "%s: no records were packed (every input was skipped)", dir);
    }
    if (!rc) rc = commit_concat(dir, n, ".listing.tsv", "listing.tsv", "index\tlabel\tpath\n", err);
    if (!rc) rc = commit_concat(dir, n, ".skipped.tsv", "skipped.tsv", "path\treason\n", err);
    m.version_major = STK_FORMAT_MAJOR;
    m.version_minor = STK_FORMAT_MINOR;
    if (!rc) rc = stk_manifest_commit(&m, dir, err);
    res->nshards = m.nshards;
    for (size_t i = 0; i < m.nshards; i++) free(m.shards[i].path);
    free(m.shards);
    free(m.classes);
    free(m.pack_json);
    json_decref(pack);
    return rc;
}

static void remove_part_files(const char *dir, unsigned n)
{
    static const char *const suffixes[] = {".json", ".listing.tsv", ".skipped.tsv", ".state", NULL};
    for (unsigned k = 1; k <= n; k++)
        for (const char *const *s = suffixes; *s; s++) {
            char *p = pk_part_file(dir, k, n, *s);
            if (p) unlink(p);
            free(p);
        }
}

int pk_merge(const char *dir, unsigned want, pk_merge_result *res, stk_error *err)
{
    memset(res, 0, sizeof *res);
    enum { MAXP = 9999 };
    bool *seen = calloc(MAXP + 1, sizeof *seen);
    if (!seen) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    unsigned n = find_parts(dir, want, seen, MAXP);
    int rc = STK_OK;
    if (n == 0 || n > MAXP) {
        rc = stk_error_set(err, STK_E_ARG, n ? "%s: parts of different N (pack-part-K-of-N.json) in one directory"
                                    : "%s: no finished parts (pack-part-K-of-N.json) to merge", dir);
    } else {
        char missing[STK_ERROR_MSG_MAX] = "";
        size_t len = 0, count = 0;
        for (unsigned k = 1; k <= n; k++)
            if (!seen[k] && ++count && len < sizeof missing - 16)
                len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%u", len ? ", " : "", k);
        if (count)
            rc = stk_error_set(err, STK_E_ARG, "%s: cannot merge: %zu of %u parts missing or unfinished: %s", dir, count, n, missing);
    }
    json_t **parts = rc ? NULL : calloc(n, sizeof *parts);
    for (unsigned k = 1; !rc && k <= n; k++)
        if (!(parts[k - 1] = load_part(dir, k, n)))
            rc = stk_error_set(err, STK_E_MANIFEST, "%s: part %u of %u: unreadable pack-part file", dir, k, n);
    if (!rc) rc = build_manifest(dir, n, parts, res, err);
    if (!rc) remove_part_files(dir, n);
    for (unsigned k = 0; parts && k < n; k++) json_decref(parts[k]);
    free(parts);
    free(seen);
    return rc;
}
