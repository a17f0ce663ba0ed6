/* packer/parts.c - see parts.h. */
#define _GNU_SOURCE
#include "parts.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

/* A decimal value of variable `name` into *v; false with why filled. */
static bool slurm_num(const char *name, const char *val, uint64_t *v, char *why, size_t cap)
{
    char *end;
    if (!val) {
        snprintf(why, cap, "SLURM_ARRAY_TASK_ID is set but %s is not", name);
        return false;
    }
    errno = 0;
    *v = strtoull(val, &end, 10);
    if (!*val || *end || errno || val[0] == '-' || val[0] == '+' || val[0] == ' ') {
        snprintf(why, cap, "%s=%s is not a number", name, val);
        return false;
    }
    return true;
}

int pk_part_slurm(const char *id, const char *min, const char *count, const char *step, const char *max,
                  unsigned max_parts, unsigned *k, unsigned *n, char *why, size_t cap)
{
    uint64_t vi, vmin, vn, vs = 1, vmax;
    if (!id) return 0;
    if (!slurm_num("SLURM_ARRAY_TASK_ID", id, &vi, why, cap) ||
        !slurm_num("SLURM_ARRAY_TASK_MIN", min, &vmin, why, cap) ||
        !slurm_num("SLURM_ARRAY_TASK_COUNT", count, &vn, why, cap) ||
        (step && !slurm_num("SLURM_ARRAY_TASK_STEP", step, &vs, why, cap)) ||
        (max && !slurm_num("SLURM_ARRAY_TASK_MAX", max, &vmax, why, cap)))
        return -1;
    if (vn < 1 || vn > max_parts) {
        snprintf(why, cap, "SLURM_ARRAY_TASK_COUNT=%s: a pack has 1 to %u parts", count, max_parts);
        return -1;
    }
    if (vs < 1 || vs > UINT32_MAX) {
        snprintf(why, cap, "SLURM_ARRAY_TASK_STEP=%s is not a step", step);
        return -1;
    }
    if (vi < vmin || (vi - vmin) % vs || (vi - vmin) / vs >= vn) {
        snprintf(why, cap,
                 "SLURM_ARRAY_TASK_ID=%s is not one of SLURM_ARRAY_TASK_COUNT=%s tasks from "
                 "SLURM_ARRAY_TASK_MIN=%s%s%s",
                 id, count, min, step ? " by SLURM_ARRAY_TASK_STEP=" : "", step ? step : "");
        return -1;
    }
    if (max && (vmax < vmin || (vmax - vmin) / vs + 1 != vn || (vmax - vmin) % vs)) {
        snprintf(why, cap,
                 "SLURM_ARRAY_TASK_MIN=%s to SLURM_ARRAY_TASK_MAX=%s%s%s is not SLURM_ARRAY_TASK_COUNT=%s "
                 "tasks (an array with gaps: give --part K/N)",
                 min, max, step ? " by SLURM_ARRAY_TASK_STEP=" : "", step ? step : "", count);
        return -1;
    }
    *k = (unsigned)((vi - vmin) / vs) + 1;
    *n = (unsigned)vn;
    return 1;
}

char *pk_part_file(const char *dir, unsigned k, unsigned n, const char *suffix)
{
    char *p = NULL;
    return asprintf(&p, "%s/pack-part-%04u-of-%04u%s", dir, k, n, suffix) < 0 ? NULL : p;
}

static uint64_t unhex(json_t *j)
{
    const char *s = json_string_value(j);
    return s && strlen(s) == 16 && strspn(s, "0123456789abcdef") == 16 ? strtoull(s, NULL, 16) : 0;
}

/* A part record is a manifest of the part's own shards, written and parsed by
 * the format library (so it gets the manifest's strict checks), whose "pack"
 * object also carries "part": {k, n, params, first, end, packed, skipped}. */
int pk_part_commit(const char *dir, const pk_part *p, stk_error *err)
{
    for (size_t i = 0; i < p->nclasses; i++) { /* json_string refuses what is not UTF-8 */
        json_t *s = json_string(p->classes[i]);
        if (!s)
            return stk_error_set(err, STK_E_ARG, "class name \"%.64s\" is not valid UTF-8", p->classes[i]);
        json_decref(s);
    }
    json_t *pack = json_loads(p->pack_json, 0, NULL);
    if (!json_is_object(pack)) {
        json_decref(pack);
        return stk_error_set(err, STK_E_ARG, "pack parameters are not a JSON object");
    }
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)p->params);
    json_object_set_new(pack, "part",
                        json_pack("{s:I, s:I, s:s, s:I, s:I, s:I, s:I}", "k", (json_int_t)p->part, "n",
                                  (json_int_t)p->parts, "params", hex, "first", (json_int_t)p->first, "end",
                                  (json_int_t)p->end, "packed", (json_int_t)p->packed, "skipped",
                                  (json_int_t)p->skipped));
    char *pack_json = json_dumps(pack, JSON_COMPACT);
    json_decref(pack);
    stk_manifest m;
    memset(&m, 0, sizeof m);
    m.version_major = STK_FORMAT_MAJOR;
    m.version_minor = STK_FORMAT_MINOR;
    m.schema = *p->schema;
    m.nshards = p->nshards;
    m.shards = (stk_shard_entry *)p->shards; /* read only by stk_manifest_to_json */
    m.nclasses = p->nclasses;
    m.classes = (char **)p->classes;
    m.pack_json = pack_json;
    char *text = pack_json ? stk_manifest_to_json(&m, err) : NULL;
    char *path = pk_part_file(dir, p->part, p->parts, ".json");
    int rc = text && path           ? stk_file_commit(path, text, strlen(text), err)
             : (pack_json && !text) ? (err ? err->code : STK_E_ARG)
                                    : stk_error_set(err, STK_E_NOMEM, "out of memory");
    free(text);
    free(path);
    free(pack_json);
    return rc;
}

static stk_manifest *load_part(const char *dir, unsigned k, unsigned n, stk_error *err)
{
    char *path = pk_part_file(dir, k, n, ".json");
    stk_manifest *m = path ? stk_manifest_load(path, err) : NULL;
    free(path);
    return m;
}

/* The "pack" object of a part record and its "part" object (NULL if absent). */
static json_t *part_pack(const stk_manifest *m, json_t **part)
{
    json_t *pack = json_loads(m->pack_json, 0, NULL);
    *part = json_object_get(pack, "part");
    if (!json_is_object(*part)) *part = NULL;
    return pack;
}

uint64_t pk_part_params(const char *dir, unsigned k, unsigned n)
{
    stk_manifest *m = load_part(dir, k, n, NULL);
    if (!m) return 0;
    json_t *part, *pack = part_pack(m, &part);
    uint64_t v = part ? unhex(json_object_get(part, "params")) : 0;
    json_decref(pack);
    stk_manifest_free(m);
    return v;
}

void pk_part_counts(const char *dir, unsigned k, unsigned n, uint64_t *packed, uint64_t *skipped,
                    uint64_t *nshards)
{
    stk_manifest *m = load_part(dir, k, n, NULL);
    if (!m) return;
    json_t *part, *pack = part_pack(m, &part);
    if (part) {
        *packed = (uint64_t)json_integer_value(json_object_get(part, "packed"));
        *skipped = (uint64_t)json_integer_value(json_object_get(part, "skipped"));
        *nshards = m->nshards;
    }
    json_decref(pack);
    stk_manifest_free(m);
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
        if (sscanf(de->d_name, "pack-part-%4u-of-%4u%7s", &k, &m, tail) != 3 || strcmp(tail, ".json"))
            continue;
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
    int rc =
        in ? STK_OK
           : stk_error_set(err, STK_E_IO, "%s: cannot open: %s", path ? path : "part file", strerror(errno));
    char buf[65536];
    size_t r;
    while (!rc && (r = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, r, out) != r)
            rc = stk_error_set(err, STK_E_IO, "write failed: %s", strerror(errno));
    if (in) fclose(in);
    free(path);
    return rc;
}

/* Concatenate every part's <suffix> slice under `header` into DIR/name,
 * committed the way every other file is (stk_file_commit). The slices are
 * text of about 50 bytes per input: tens of MB at ImageNet scale. */
static int commit_concat(const char *dir, unsigned n, const char *suffix, const char *name,
                         const char *header, stk_error *err)
{
    char *text = NULL, *path = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f || asprintf(&path, "%s/%s", dir, name) < 0) {
        if (f) fclose(f);
        free(text);
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    }
    fputs(header, f);
    int rc = STK_OK;
    for (unsigned k = 1; k <= n && !rc; k++) rc = append_file(f, dir, k, n, suffix, err);
    if (fclose(f) != 0 && !rc) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
    if (!rc) rc = stk_file_commit(path, text, len, err);
    free(text);
    free(path);
    return rc;
}

static bool same_classes(const stk_manifest *a, const stk_manifest *b)
{
    if (a->nclasses != b->nclasses) return false;
    for (size_t i = 0; i < a->nclasses; i++)
        if (strcmp(a->classes[i], b->classes[i])) return false;
    return true;
}

/* Check part k against part 1 and append its shards to `out`; each shard
 * must still be the one the part committed (an O(1) open). */
static int take_part(stk_manifest *out, const stk_manifest *pm, uint64_t params, uint64_t params1, unsigned k,
                     const char *dir, const pk_shard_check *check, stk_error *err)
{
    if (params != params1 || !same_classes(pm, out) || !stk_schema_equal(&pm->schema, &out->schema))
        return stk_error_set(err, STK_E_MANIFEST,
                             "%s: part %u was packed from another listing or with other flags than part 1",
                             dir, k);
    stk_shard_entry *e = realloc(out->shards, (out->nshards + pm->nshards + 1) * sizeof *e);
    if (!e) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    out->shards = e;
    for (size_t i = 0; i < pm->nshards; i++) {
        stk_shard_entry *x = &out->shards[out->nshards];
        *x = pm->shards[i];
        char *full = NULL;
        if (!(x->path = strdup(pm->shards[i].path)) || asprintf(&full, "%s/%s", dir, x->path) < 0) {
            free(x->path);
            return stk_error_set(err, STK_E_NOMEM, "out of memory");
        }
        out->nshards++;
        if (check) { /* shards that are not in dir (s3://): the caller checks them */
            free(full);
            int rc = check->fn(check->user, x, k, err);
            if (rc) return rc;
            continue;
        }
        stk_error e2;
        stk_shard *s2 = stk_shard_open(full, &e2);
        int bad = !s2 || stk_shard_index_hash(s2) != x->index_hash || stk_shard_records(s2) != x->records;
        stk_shard_close(s2);
        int rc = !bad ? STK_OK
                 : s2 ? stk_error_set(err, STK_E_MANIFEST,
                                      "%s: differs from what part %u recorded; re-run that part", full, k)
                      : stk_error_set(err, e2.code, "%s", e2.msg);
        free(full);
        if (rc) return rc;
    }
    return STK_OK;
}

/* DIR/name.new -> DIR/name, durable. */
static int take_new(const char *dir, const char *name, stk_error *err)
{
    char *from = NULL, *to = NULL;
    int rc = STK_OK;
    if (asprintf(&from, "%s/%s.new", dir, name) < 0 || asprintf(&to, "%s/%s", dir, name) < 0)
        rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
    else if (rename(from, to) != 0)
        rc = stk_error_set(err, STK_E_IO, "%s: rename to %s failed: %s", from, to, strerror(errno));
    free(from);
    free(to);
    if (rc) return rc;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0)
        rc = stk_error_set(err, STK_E_IO, "%s: fsync of directory failed: %s", dir, strerror(errno));
    if (fd >= 0) close(fd);
    return rc;
}

static int build_manifest(const char *dir, unsigned n, stk_manifest **parts, const pk_shard_check *check,
                          pk_merge_result *res, stk_error *err)
{
    stk_manifest m;
    memset(&m, 0, sizeof m);
    m.version_major = STK_FORMAT_MAJOR;
    m.version_minor = STK_FORMAT_MINOR;
    m.schema = parts[0]->schema;
    m.nclasses = parts[0]->nclasses;
    m.classes = parts[0]->classes; /* borrowed */
    json_t *part1, *pack = part_pack(parts[0], &part1);
    uint64_t params1 = part1 ? unhex(json_object_get(part1, "params")) : 0;
    int rc =
        part1 ? STK_OK : stk_error_set(err, STK_E_MANIFEST, "%s: part 1 record has no part information", dir);
    for (unsigned k = 1; k <= n && !rc; k++) {
        json_t *part, *pk = part_pack(parts[k - 1], &part);
        uint64_t params = part ? unhex(json_object_get(part, "params")) : 0;
        res->packed += (uint64_t)json_integer_value(json_object_get(part, "packed"));
        res->skipped += (uint64_t)json_integer_value(json_object_get(part, "skipped"));
        rc = take_part(&m, parts[k - 1], params, params1, k, dir, check, err);
        json_decref(pk);
    }
    if (!rc && !m.nshards)
        rc = stk_error_set(err, STK_E_ARG, "%s: no records were packed (every input was skipped)", dir);
    if (!rc) {
        json_object_del(pack, "part");
        json_object_set_new(pack, "packed", json_integer((json_int_t)res->packed));
        json_object_set_new(pack, "skipped", json_integer((json_int_t)res->skipped));
        if (!(m.pack_json = json_dumps(pack, JSON_COMPACT)))
            rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
    }
    /* The listings go beside a dataset this one replaces (.new) and take
     * its place after the manifest: until the commit the old dataset and
     * its listings stay as they were. */
    if (!rc) rc = commit_concat(dir, n, ".listing.tsv", "listing.tsv.new", "index\tlabel\tpath\n", err);
    if (!rc) rc = commit_concat(dir, n, ".skipped.tsv", "skipped.tsv.new", "path\treason\n", err);
    if (!rc) rc = stk_manifest_commit(&m, dir, err);
    if (!rc) rc = take_new(dir, "listing.tsv", err);
    if (!rc) rc = take_new(dir, "skipped.tsv", err);
    if (!rc) {
        stk_error e2; /* the replaced dataset's shards, stale shards: a failure leaves inert files */
        stk_dataset_sweep(dir, &e2);
    }
    res->nshards = m.nshards;
    for (size_t i = 0; i < m.nshards; i++) free(m.shards[i].path);
    free(m.shards);
    free(m.pack_json);
    json_decref(pack);
    return rc;
}

void pk_part_remove_files(const char *dir, unsigned k, unsigned n)
{
    static const char *const suffixes[] = {".json", ".listing.tsv", ".skipped.tsv", ".state", NULL};
    for (const char *const *s = suffixes; *s; s++) {
        char *p = pk_part_file(dir, k, n, *s);
        if (p) unlink(p);
        free(p);
    }
}

int pk_merge(const char *dir, unsigned want, pk_merge_result *res, stk_error *err)
{
    return pk_merge_checked(dir, want, NULL, res, err);
}

int pk_merge_checked(const char *dir, unsigned want, const pk_shard_check *check, pk_merge_result *res,
                     stk_error *err)
{
    memset(res, 0, sizeof *res);
    enum { MAXP = 9999 };
    bool *seen = calloc(MAXP + 1, sizeof *seen);
    if (!seen) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    unsigned n = find_parts(dir, want, seen, MAXP);
    int rc = STK_OK;
    if (n == 0 || n > MAXP) {
        rc = stk_error_set(err, STK_E_ARG,
                           n ? "%s: parts of different N (pack-part-K-of-N.json) in one directory"
                             : "%s: no finished parts (pack-part-K-of-N.json) to merge",
                           dir);
    } else {
        char missing[STK_ERROR_MSG_MAX] = "";
        size_t len = 0, count = 0;
        for (unsigned k = 1; k <= n; k++)
            if (!seen[k] && ++count && len < sizeof missing - 16)
                len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%u", len ? ", " : "", k);
        if (count)
            rc = stk_error_set(err, STK_E_ARG, "%s: cannot merge: %zu of %u parts missing or unfinished: %s",
                               dir, count, n, missing);
    }
    stk_manifest **parts = rc ? NULL : calloc(n, sizeof *parts);
    if (!rc && !parts) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
    for (unsigned k = 1; !rc && k <= n; k++)
        if (!(parts[k - 1] = load_part(dir, k, n, err))) rc = err ? err->code : STK_E_MANIFEST;
    if (!rc) rc = build_manifest(dir, n, parts, check, res, err);
    for (unsigned k = 1; !rc && k <= n; k++) pk_part_remove_files(dir, k, n);
    for (unsigned k = 0; parts && k < n; k++) stk_manifest_free(parts[k]);
    free(parts);
    free(seen);
    return rc;
}
