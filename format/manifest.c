/* format/manifest.c - manifest.json: strict parse, deterministic write.
 *
 * JSON through jansson: a well-kept C library (in Debian since 2009) that
 * rejects duplicate keys on request and keeps key order, which we need for
 * strict parsing and byte-identical output. */
#define _GNU_SOURCE
#include "internal.h"
#include "remote.h"
#include "rshard.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define MANIFEST_MAX ((size_t)256 << 20)
#define FORMAT_TAG "stoker-dataset"

typedef struct {
    const char *name; /* file name for messages */
    stk_error *err;
    bool lenient;   /* newer minor version: ignore unknown keys */
    unsigned minor; /* the manifest's minor version */
} ctx;

static int mfail(ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int mfail(ctx *c, const char *fmt, ...)
{
    char buf[STK_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return stk_error_set(c->err, STK_E_MANIFEST, "%s: %s", c->name, buf);
}

/* Every key of `obj` must be one of the NULL-terminated `allowed`. */
static int only_keys(ctx *c, json_t *obj, const char *where, const char *const *allowed)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(*a, key) == 0;
        if (!ok && !c->lenient) return mfail(c, "%s: unknown key \"%s\"", where, key);
    }
    return STK_OK;
}

/* Element i of the array `array` (where = "array[i]", for the messages):
 * an object with only the keys `allowed`. */
static int entry_keys(ctx *c, json_t *j, const char *array, size_t i, const char *const *allowed, char *where,
                      size_t cap)
{
    snprintf(where, cap, "%s[%zu]", array, i);
    if (!json_is_object(j)) return mfail(c, "%s must be an object", where);
    return only_keys(c, j, where, allowed);
}

static int get_u64(ctx *c, json_t *obj, const char *key, const char *where, uint64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v) return mfail(c, "%s: missing \"%s\"", where, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return mfail(c, "%s: \"%s\" must be a non-negative integer", where, key);
    *out = (uint64_t)json_integer_value(v);
    return STK_OK;
}

static int get_str(ctx *c, json_t *obj, const char *key, const char *where, const char **out)
{
    json_t *v = json_object_get(obj, key);
    if (!v) return mfail(c, "%s: missing \"%s\"", where, key);
    if (!json_is_string(v)) return mfail(c, "%s: \"%s\" must be a string", where, key);
    *out = json_string_value(v);
    return STK_OK;
}

static int get_hash(ctx *c, json_t *obj, const char *key, const char *where, uint64_t *out)
{
    const char *s = NULL;
    int rc = get_str(c, obj, key, where, &s);
    if (rc) return rc;
    if (strlen(s) != 16 || strspn(s, "0123456789abcdef") != 16)
        return mfail(c, "%s: \"%s\" must be 16 lowercase hex digits", where, key);
    *out = strtoull(s, NULL, 16);
    return STK_OK;
}

static int parse_field(ctx *c, json_t *j, unsigned i, stk_field *f)
{
    char where[48];
    static const char *const keys[] = {"name", "kind", "dtype", "shape", "codec", NULL};
    int rc = entry_keys(c, j, "schema", i, keys, where, sizeof where);
    const char *name = NULL, *kind = NULL, *codec = NULL;
    if (rc || (rc = get_str(c, j, "name", where, &name)) || (rc = get_str(c, j, "kind", where, &kind)) ||
        (rc = get_str(c, j, "codec", where, &codec)))
        return rc;
    if (!stk__name_is_valid(name)) return mfail(c, "%s: invalid field name \"%.40s\"", where, name);
    memset(f, 0, sizeof *f);
    strcpy(f->name, name);
    if (strcmp(codec, "none") == 0) f->codec = STK_CODEC_NONE;
    else if (strcmp(codec, "zstd") == 0) f->codec = STK_CODEC_ZSTD;
    else if (strcmp(codec, "jpeg") == 0) f->codec = STK_CODEC_JPEG;
    else
        return stk_error_set(c->err, STK_E_UNSUPPORTED,
                             "%s: %s: codec \"%.32s\" is not supported by this build", c->name, where, codec);
    if (strcmp(kind, "bytes") == 0) {
        if (json_object_get(j, "dtype") || json_object_get(j, "shape"))
            return mfail(c, "%s: a bytes field has no dtype or shape", where);
        f->kind = STK_KIND_BYTES;
        f->dtype = STK_DT_U8;
        return STK_OK;
    }
    bool array = strcmp(kind, "array") == 0;
    if (strcmp(kind, "tensor") != 0 && !array)
        return stk_error_set(c->err, STK_E_UNSUPPORTED,
                             "%s: %s: kind \"%.16s\" is not supported by this build", c->name, where, kind);
    const char *dt = NULL;
    if ((rc = get_str(c, j, "dtype", where, &dt))) return rc;
    f->kind = array ? STK_KIND_ARRAY : STK_KIND_TENSOR;
    f->dtype = (uint8_t)stk_dtype_from_name(dt);
    if (!f->dtype)
        return stk_error_set(c->err, STK_E_UNSUPPORTED,
                             "%s: %s: dtype \"%.16s\" is not supported by this build", c->name, where, dt);
    json_t *shape = json_object_get(j, "shape");
    if (!json_is_array(shape) || json_array_size(shape) > STK_MAX_DIMS)
        return mfail(c, "%s: \"shape\" must be an array of at most %d positive integers", where,
                     STK_MAX_DIMS);
    f->ndim = (uint8_t)json_array_size(shape);
    for (unsigned d = 0; d < f->ndim; d++) { /* an array field's per-record dims are null */
        json_t *v = json_array_get(shape, d);
        if (array && json_is_null(v)) continue;
        if (!json_is_integer(v) || json_integer_value(v) <= 0)
            return mfail(c,
                         array ? "%s: \"shape\" must be an array of at most %d positive integers or nulls"
                               : "%s: \"shape\" must be an array of at most %d positive integers",
                         where, STK_MAX_DIMS);
        f->shape[d] = (uint64_t)json_integer_value(v);
    }
    return STK_OK;
}

static int parse_schema(ctx *c, json_t *arr, stk_schema *s)
{
    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > STK_MAX_FIELDS)
        return mfail(c, "\"schema\" must be an array of 1 to %d fields", STK_MAX_FIELDS);
    stk_schema_init(s);
    s->nfields = (uint32_t)json_array_size(arr);
    for (unsigned i = 0; i < s->nfields; i++) {
        int rc = parse_field(c, json_array_get(arr, i), i, &s->fields[i]);
        if (rc) return rc;
    }
    stk_error e;
    if (stk_schema_validate(s, &e)) return mfail(c, "%s", e.msg);
    unsigned need = stk__schema_minor(s);
    if (need > c->minor)
        return mfail(c, "%s need format_version [1, %u], the manifest says [1, %u]",
                     need == 1 ? "compressed (zstd) fields" : "array fields and JPEG values", need, c->minor);
    return STK_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int parse_classes(ctx *c, json_t *arr, stk_manifest *m)
{
    if (!arr) return STK_OK;
    if (!json_is_array(arr)) return mfail(c, "\"classes\" must be an array of strings");
    size_t n = json_array_size(arr);
    m->classes = calloc(n ? n : 1, sizeof *m->classes);
    char **sorted = calloc(n ? n : 1, sizeof *sorted);
    if (!m->classes || !sorted) {
        free(sorted);
        return stk_error_set(c->err, STK_E_NOMEM, "%s: out of memory", c->name);
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            strlen(json_string_value(v)) != json_string_length(v)) {
            free(sorted);
            return mfail(c, "classes[%zu] must be a non-empty string without NUL", i);
        }
        if (!(m->classes[i] = strdup(json_string_value(v)))) {
            free(sorted);
            return stk_error_set(c->err, STK_E_NOMEM, "%s: out of memory", c->name);
        }
        m->nclasses = i + 1;
        sorted[i] = m->classes[i];
    }
    qsort(sorted, n, sizeof *sorted, cmp_str);
    for (size_t i = 1; i < n; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            int rc = mfail(c, "class \"%.64s\" is listed twice", sorted[i]);
            free(sorted);
            return rc;
        }
    free(sorted);
    return STK_OK;
}

static int parse_shard(ctx *c, json_t *j, size_t i, stk_shard_entry *e)
{
    char where[48];
    static const char *const keys[] = {"path", "records", "bytes", "xxh3", "index_xxh3", NULL};
    int rc = entry_keys(c, j, "shards", i, keys, where, sizeof where);
    const char *path = NULL;
    if (rc || (rc = get_str(c, j, "path", where, &path)) ||
        (rc = get_u64(c, j, "records", where, &e->records)) ||
        (rc = get_u64(c, j, "bytes", where, &e->file_size)) ||
        (rc = get_hash(c, j, "xxh3", where, &e->file_hash)) ||
        (rc = get_hash(c, j, "index_xxh3", where, &e->index_hash)))
        return rc;
    if (!stk__path_is_safe(path))
        return mfail(c, "%s: path \"%.100s\" is not a plain relative path inside the dataset directory",
                     where, path);
    if (!(e->path = strdup(path))) return stk_error_set(c->err, STK_E_NOMEM, "%s: out of memory", c->name);
    return STK_OK;
}

static int parse_shards(ctx *c, json_t *arr, stk_manifest *m)
{
    if (!json_is_array(arr)) return mfail(c, "\"shards\" must be an array");
    size_t n = json_array_size(arr);
    m->shards = calloc(n ? n : 1, sizeof *m->shards);
    if (!m->shards) return stk_error_set(c->err, STK_E_NOMEM, "%s: out of memory", c->name);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = parse_shard(c, json_array_get(arr, i), i, &m->shards[i]);
        m->nshards = i + 1;
        if (rc) return rc;
        if (!add_ok(total, m->shards[i].records, &total)) return mfail(c, "record counts overflow");
    }
    /* Duplicate paths would make one file count twice. */
    char **paths = malloc((n ? n : 1) * sizeof *paths);
    if (!paths) return stk_error_set(c->err, STK_E_NOMEM, "%s: out of memory", c->name);
    for (size_t i = 0; i < n; i++) paths[i] = m->shards[i].path;
    qsort(paths, n, sizeof *paths, cmp_str);
    int rc = STK_OK;
    for (size_t i = 1; i < n && !rc; i++)
        if (strcmp(paths[i - 1], paths[i]) == 0) rc = mfail(c, "shard \"%.100s\" is listed twice", paths[i]);
    free(paths);
    m->record_count = total;
    return rc;
}

static int parse_version(ctx *c, json_t *root, stk_manifest *m)
{
    const char *tag = NULL;
    int rc = get_str(c, root, "format", "manifest", &tag);
    if (rc) return rc;
    if (strcmp(tag, FORMAT_TAG) != 0) return mfail(c, "\"format\" is \"%.40s\", not \"" FORMAT_TAG "\"", tag);
    json_t *v = json_object_get(root, "format_version");
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(json_array_get(v, 0)) ||
        !json_is_integer(json_array_get(v, 1)) || json_integer_value(json_array_get(v, 0)) < 0 ||
        json_integer_value(json_array_get(v, 1)) < 0 || json_integer_value(json_array_get(v, 0)) > 65535 ||
        json_integer_value(json_array_get(v, 1)) > 65535)
        return mfail(c, "\"format_version\" must be [major, minor]");
    m->version_major = (unsigned)json_integer_value(json_array_get(v, 0));
    m->version_minor = (unsigned)json_integer_value(json_array_get(v, 1));
    if (m->version_major != STK_FORMAT_MAJOR)
        return stk_error_set(c->err, STK_E_VERSION,
                             "%s: unsupported format version %u.%u (this build reads %d.x, up to %d.%d)",
                             c->name, m->version_major, m->version_minor, STK_FORMAT_MAJOR, STK_FORMAT_MAJOR,
                             STK_FORMAT_MINOR);
    c->lenient = m->version_minor > STK_FORMAT_MINOR;
    c->minor = m->version_minor;
    return STK_OK;
}

static int parse_root(ctx *c, json_t *root, stk_manifest *m)
{
    static const char *const keys[] = {"format",  "format_version", "record_count", "fingerprint", "schema",
                                       "classes", "pack",           "shards",       NULL};
    if (!json_is_object(root)) return mfail(c, "top level must be a JSON object");
    int rc = parse_version(c, root, m);
    uint64_t count = 0, fp = 0;
    if (rc || (rc = only_keys(c, root, "manifest", keys)) ||
        (rc = parse_schema(c, json_object_get(root, "schema"), &m->schema)) ||
        (rc = parse_classes(c, json_object_get(root, "classes"), m)) ||
        (rc = parse_shards(c, json_object_get(root, "shards"), m)) ||
        (rc = get_u64(c, root, "record_count", "manifest", &count)) ||
        (rc = get_hash(c, root, "fingerprint", "manifest", &fp)))
        return rc;
    if (count != m->record_count)
        return mfail(c, "record_count is %llu but the shards hold %llu", (unsigned long long)count,
                     (unsigned long long)m->record_count);
    json_t *pack = json_object_get(root, "pack");
    if (pack && !json_is_object(pack)) return mfail(c, "\"pack\" must be an object");
    m->pack_json = pack ? json_dumps(pack, JSON_COMPACT) : strdup("{}");
    if (!m->pack_json) return stk_error_set(c->err, STK_E_NOMEM, "%s: out of memory", c->name);
    m->fingerprint = stk_manifest_fingerprint(m);
    if (fp != m->fingerprint)
        return mfail(
            c, "fingerprint %016llx does not match the content (%016llx): shards or classes were edited",
            (unsigned long long)fp, (unsigned long long)m->fingerprint);
    return STK_OK;
}

stk_manifest *stk_manifest_parse(const char *text, size_t len, const char *name, stk_error *err)
{
    ctx c = {name ? name : "<manifest>", err, false, 0};
    if (!text) return stk_error_set(err, STK_E_ARG, "%s: NULL text", c.name), NULL;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        mfail(&c, "invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
        return NULL;
    }
    stk_manifest *m = calloc(1, sizeof *m);
    int rc = m ? parse_root(&c, root, m) : stk_error_set(err, STK_E_NOMEM, "out of memory");
    json_decref(root);
    if (rc) {
        stk_manifest_free(m);
        return NULL;
    }
    return m;
}

/* ------------------------------------------------------ remote datasets */

int stk__rdataset_addr(const char *path, stk__raddr *a, char **dir, stk_error *err)
{
    *dir = NULL;
    int rc = stk__raddr_parse(path, a, err);
    if (rc) return rc;
    char *k = a->key;
    size_t n = strlen(k), m = strlen(STK_MANIFEST_NAME);
    while (n && k[n - 1] == '/') k[--n] = 0;
    if (n >= m && !strcmp(k + n - m, STK_MANIFEST_NAME) && (n == m || k[n - m - 1] == '/')) {
        n -= m;
        k[n] = 0;
        while (n && k[n - 1] == '/') k[--n] = 0;
    }
    if (!a->s3 && !n) {
        stk__raddr_free(a);
        return stk_error_set(err, STK_E_ARG, "%s: no dataset address", path);
    }
    size_t len = (a->s3 ? strlen(a->bucket) + 6 : 0) + n + 2;
    if (!(*dir = malloc(len))) {
        stk__raddr_free(a);
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    }
    if (!a->s3) snprintf(*dir, len, "%s", k);
    else if (n) snprintf(*dir, len, "s3://%s/%s", a->bucket, k);
    else snprintf(*dir, len, "s3://%s", a->bucket);
    return STK_OK;
}

char *stk__rdataset_key(const stk__raddr *a, const char *rel)
{
    size_t len = strlen(a->key) + strlen(rel) + 2;
    char *k = malloc(len);
    if (k) snprintf(k, len, "%s%s%s", a->key, a->key[0] ? "/" : "", rel);
    return k;
}

stk_manifest *stk__rdataset_manifest(stk__remote *r, const stk__raddr *a, const char *dir, char *etag,
                                     size_t etag_cap, stk_error *err)
{
    char *key = stk__rdataset_key(a, STK_MANIFEST_NAME), *name = stk__path_join(dir, STK_MANIFEST_NAME);
    char *text = NULL;
    size_t len = 0;
    long http = 0;
    stk__robject o = {0, ""};
    stk_error e = {STK_OK, ""};
    stk_manifest *m = NULL;
    if (!key || !name) {
        stk_error_set(&e, STK_E_NOMEM, "out of memory");
    } else if (stk__remote_get_object(r, key, MANIFEST_MAX, &text, &len, &o, &http, &e)) {
        /* a missing key is no dataset; a missing bucket (also 404) keeps its S3 code */
        if (http == 404 && !strstr(e.msg, "NoSuchBucket"))
            stk_error_set(&e, STK_E_IO, "%s: not a stoker dataset (no %s)", dir, STK_MANIFEST_NAME);
    } else {
        m = stk_manifest_parse(text, len, name, &e);
        if (m && etag) snprintf(etag, etag_cap, "%s", o.etag);
    }
    if (!m && err) *err = e;
    free(text);
    free(key);
    free(name);
    return m;
}

/* stk_manifest_load of an address: a client of its own, from the environment. */
static stk_manifest *load_remote(const char *path, stk_error *err)
{
    stk__raddr a;
    char *dir;
    if (stk__rdataset_addr(path, &a, &dir, err)) return NULL;
    stk__rconfig cfg;
    memset(&cfg, 0, sizeof cfg);
    stk__remote *r = NULL;
    stk_manifest *m = NULL;
    if (stk__remote_open(&r, &a, &cfg, err) == STK_OK) m = stk__rdataset_manifest(r, &a, dir, NULL, 0, err);
    stk__remote_close(r);
    stk__raddr_free(&a);
    free(dir);
    return m;
}

char *stk_dataset_dir(const char *path, stk_error *err)
{
    if (stk__remote_is_url(path)) { /* the address without a trailing /manifest.json */
        stk__raddr a;
        char *dir;
        if (stk__rdataset_addr(path, &a, &dir, err)) return NULL;
        stk__raddr_free(&a);
        return dir;
    }
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        char *d = strdup(path);
        if (!d) stk_error_set(err, STK_E_NOMEM, "out of memory");
        return d;
    }
    const char *slash = strrchr(path, '/');
    char *d = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
    if (!d) stk_error_set(err, STK_E_NOMEM, "out of memory");
    return d;
}

stk_manifest *stk_manifest_load(const char *path, stk_error *err)
{
    if (path && stk__remote_is_url(path)) return load_remote(path, err);
    struct stat st;
    char *file = NULL;
    bool dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (dir) file = stk__path_join(path, STK_MANIFEST_NAME);
    else file = strdup(path);
    if (!file) return stk_error_set(err, STK_E_NOMEM, "out of memory"), NULL;
    if (dir && access(file, F_OK) != 0 && errno == ENOENT) { /* a directory, no manifest */
        free(file);
        return stk_error_set(err, STK_E_IO, "%s: not a stoker dataset (no %s)", path, STK_MANIFEST_NAME),
               NULL;
    }
    char *text;
    size_t len;
    stk_manifest *m = NULL;
    if (stk__read_file(file, MANIFEST_MAX, &text, &len, err) == STK_OK) {
        m = stk_manifest_parse(text, len, file, err);
        free(text);
    } else if (err && err->code == STK_E_FORMAT) {
        err->code = STK_E_MANIFEST; /* too large to be a manifest */
    }
    free(file);
    return m;
}

void stk_manifest_free(stk_manifest *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->nshards; i++) free(m->shards[i].path);
    free(m->shards);
    for (size_t i = 0; i < m->nclasses; i++) free(m->classes[i]);
    free(m->classes);
    free(m->pack_json);
    free(m);
}

uint64_t stk_manifest_fingerprint(const stk_manifest *m)
{
    static const char tag[] = "stoker-fingerprint-v1";
    stk__hasher *h = stk__hasher_new();
    if (!h) return 0;
    stk__hasher_update(h, tag, sizeof tag); /* includes the NUL */
    for (size_t i = 0; i < m->nshards; i++) {
        uint8_t b[16];
        wr64(b, m->shards[i].index_hash);
        wr64(b + 8, m->shards[i].records);
        stk__hasher_update(h, b, sizeof b);
    }
    for (size_t i = 0; i < m->nclasses; i++) stk__hasher_update(h, m->classes[i], strlen(m->classes[i]) + 1);
    uint64_t v = stk__hasher_digest(h);
    stk__hasher_free(h);
    return v;
}

static json_t *hex(uint64_t v)
{
    char b[17];
    snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
    return json_string(b);
}

static json_t *field_json(const stk_field *f)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(f->name));
    if (f->kind == STK_KIND_BYTES) {
        json_object_set_new(o, "kind", json_string("bytes"));
    } else {
        bool array = f->kind == STK_KIND_ARRAY;
        json_object_set_new(o, "kind", json_string(array ? "array" : "tensor"));
        json_object_set_new(o, "dtype", json_string(stk_dtype_name(f->dtype)));
        json_t *shape = json_array();
        for (unsigned d = 0; d < f->ndim; d++)
            json_array_append_new(shape, array && !f->shape[d] ? json_null()
                                                               : json_integer((json_int_t)f->shape[d]));
        json_object_set_new(o, "shape", shape);
    }
    static const char *const codecs[] = {
        [STK_CODEC_NONE] = "none", [STK_CODEC_ZSTD] = "zstd", [STK_CODEC_JPEG] = "jpeg"};
    json_object_set_new(o, "codec", json_string(codecs[f->codec <= STK_CODEC_JPEG ? f->codec : 0]));
    return o;
}

static json_t *manifest_json(const stk_manifest *m, json_t *pack)
{
    json_t *root = json_object(), *ver = json_array(), *schema = json_array(), *cls = json_array(),
           *shards = json_array();
    json_object_set_new(root, "format", json_string(FORMAT_TAG));
    json_array_append_new(ver, json_integer(STK_FORMAT_MAJOR));
    json_array_append_new(ver, json_integer(stk__schema_minor(&m->schema))); /* 1.0 unless compressed */
    json_object_set_new(root, "format_version", ver);
    json_object_set_new(root, "record_count", json_integer((json_int_t)m->record_count));
    json_object_set_new(root, "fingerprint", hex(m->fingerprint));
    for (uint32_t i = 0; i < m->schema.nfields; i++)
        json_array_append_new(schema, field_json(&m->schema.fields[i]));
    json_object_set_new(root, "schema", schema);
    for (size_t i = 0; i < m->nclasses; i++) json_array_append_new(cls, json_string(m->classes[i]));
    json_object_set_new(root, "classes", cls);
    json_object_set_new(root, "pack", pack);
    for (size_t i = 0; i < m->nshards; i++) {
        const stk_shard_entry *e = &m->shards[i];
        json_t *o = json_object();
        json_object_set_new(o, "path", json_string(e->path));
        json_object_set_new(o, "records", json_integer((json_int_t)e->records));
        json_object_set_new(o, "bytes", json_integer((json_int_t)e->file_size));
        json_object_set_new(o, "xxh3", hex(e->file_hash));
        json_object_set_new(o, "index_xxh3", hex(e->index_hash));
        json_array_append_new(shards, o);
    }
    json_object_set_new(root, "shards", shards);
    return root;
}

char *stk_manifest_to_json(stk_manifest *m, stk_error *err)
{
    if (!m) return stk_error_set(err, STK_E_ARG, "stk_manifest_to_json: NULL manifest"), NULL;
    int rc = stk_schema_validate(&m->schema, err);
    if (rc) return NULL;
    uint64_t total = 0;
    for (size_t i = 0; i < m->nshards; i++) {
        if (!m->shards[i].path || !stk__path_is_safe(m->shards[i].path))
            return stk_error_set(err, STK_E_ARG, "manifest: shard %zu has an unsafe path", i), NULL;
        if (!add_ok(total, m->shards[i].records, &total) || m->shards[i].records > INT64_MAX ||
            m->shards[i].file_size > INT64_MAX)
            return stk_error_set(err, STK_E_RANGE, "manifest: counts overflow"), NULL;
    }
    m->record_count = total;
    m->fingerprint = stk_manifest_fingerprint(m);
    json_error_t je;
    json_t *pack = json_loads(m->pack_json ? m->pack_json : "{}", JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(pack)) {
        json_decref(pack);
        return stk_error_set(err, STK_E_ARG, "manifest: pack parameters are not a JSON object"), NULL;
    }
    json_t *root = manifest_json(m, pack);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_ENSURE_ASCII);
    json_decref(root);
    if (!text) return stk_error_set(err, STK_E_NOMEM, "out of memory"), NULL;
    /* End the file with a newline, as text files do. */
    size_t n = strlen(text);
    char *out = realloc(text, n + 2);
    if (!out) {
        free(text);
        return stk_error_set(err, STK_E_NOMEM, "out of memory"), NULL;
    }
    out[n] = '\n';
    out[n + 1] = 0;
    return out;
}

int stk__manifest_check_meta(const char *const *classes, size_t n, const char *pack_json, stk_error *err)
{
    const char **sorted = malloc((n ? n : 1) * sizeof *sorted);
    if (!sorted) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    int rc = STK_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        json_t *s = classes[i] ? json_string(classes[i]) : NULL; /* NULL: not UTF-8 */
        if (!s || !*classes[i])
            rc = stk_error_set(err, STK_E_ARG, "class %zu: name is empty or not valid UTF-8", i);
        json_decref(s);
        sorted[i] = classes[i];
    }
    if (!rc) {
        qsort(sorted, n, sizeof *sorted, cmp_str);
        for (size_t i = 1; i < n && !rc; i++)
            if (strcmp(sorted[i - 1], sorted[i]) == 0)
                rc = stk_error_set(err, STK_E_ARG, "class \"%.64s\" is listed twice", sorted[i]);
    }
    free(sorted);
    if (!rc && pack_json) {
        json_error_t je;
        json_t *p = json_loads(pack_json, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_object(p))
            rc = stk_error_set(err, STK_E_ARG, "pack parameters are not a JSON object: %s",
                               p ? "not an object" : je.text);
        json_decref(p);
    }
    return rc;
}

int stk_manifest_commit(stk_manifest *m, const char *dir, stk_error *err)
{
    char *text = stk_manifest_to_json(m, err);
    if (!text) return err ? err->code : STK_E_ARG;
    char *path = stk__path_join(dir, STK_MANIFEST_NAME);
    int rc = path ? stk_file_commit(path, text, strlen(text), err)
                  : stk_error_set(err, STK_E_NOMEM, "out of memory");
    free(path);
    free(text);
    return rc;
}
