/* shardcheck - verify stoker shards and datasets, and say exactly what is
 * wrong where.
 *
 * --quick: structure only, O(shards): headers, footers, sizes, the checksum
 *          table's own hash, and agreement with the manifest.
 * --full:  also every record of every field against its XXH3-64 and every
 *          padding byte, on N threads over ~64 MiB pieces of the shards
 *          (compressed blocks are decompressed to check their records).
 * --decode: also every JPEG value decoded in full through image/jpeg.c, the
 *          reader's decoder: what passes its checksum but would fail every
 *          read (a value stored unchecked, or damaged before its checksum
 *          was taken).
 * Problems are printed sorted (shard, record, field), one per line. */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stoker/format.h"

#include "image.h"     /* the one JPEG decoder, for --decode */
#include "jpeg_dims.h" /* the frame-header check --full already made */

#define UNIT_BYTES ((uint64_t)64 << 20)
#define MAX_LISTED_PER_SHARD 100

static void usage(FILE *f)
{
    fprintf(f, "Usage: shardcheck [OPTIONS] PATH...\n"
               "Verify stoker datasets and shards. PATH is a dataset directory, a manifest\n"
               "(manifest.json), shard files (*.stk) or a dataset in object storage\n"
               "(s3://bucket/prefix, https://...: the objects' bytes are checked, fetched\n"
               "into a temporary cache). Each problem is printed as one line:\n"
               "FILE: record R, field 'F': what is wrong.\n\n"
               "      --quick          structure only: headers, footers, sizes, checksum\n"
               "                       tables, agreement with the manifest (O(shards))\n"
               "      --full           also every record's checksum and all padding (default);\n"
               "                       decodes no value: a JPEG whose bytes match their\n"
               "                       checksum may still not decode (see --decode)\n"
               "      --decode         --full, and every JPEG value decoded in full as the\n"
               "                       reader decodes it; slower by the decode time\n"
               "      --file-hash      also hash each whole shard file and compare with the\n"
               "                       manifest's xxh3 (as `xxhsum -H3` prints it)\n"
               "  -j, --threads N      threads for --full and --decode (default: all cores)\n"
               "      --json           print the result as one JSON object on stdout\n"
               "  -q, --quiet          no progress bar or summary line\n"
               "  -h, --help           this help\n"
               "  -V, --version        version\n\n"
               "--file-hash needs a manifest (a dataset directory or manifest.json):\n"
               "shard files named alone carry no whole-file hash to compare with.\n\n" CLI_EXIT_HELP);
}

typedef struct {
    bool full, decode, file_hash, json, quiet;
    unsigned threads;
} opts;

/* One shard to check: from a manifest (entry != NULL) or named directly. */
typedef struct {
    char *path;
    stk_shard *sh; /* NULL when it could not be opened, or once checked */
    bool opened;
    bool borrowed;           /* a remote dataset's shard: its dataset closes it */
    uint64_t records, bytes; /* as the shard says, kept for the report */
    const stk_shard_entry *entry;
    const stk_manifest *m;
    atomic_uint_fast64_t listed;       /* problems found in this shard */
    size_t kept[MAX_LISTED_PER_SHARD]; /* indexes into checker.p: its first problems in */
    size_t nkept;                      /* (record, field) order, whatever the threads did */
    atomic_size_t units_left;          /* --full: units not yet done; the last one closes sh */
} target;

typedef struct {
    size_t t;
    int field;
    uint64_t record;  /* UINT64_MAX: not about one record */
    char *field_name; /* NULL when field < 0 */
    char *msg;
} problem;

typedef enum { U_RECORDS, U_PADDING, U_FILEHASH } unit_kind;
typedef struct {
    size_t t;
    unit_kind kind;
    uint64_t first, count, bytes;
} unit;

typedef struct {
    opts o;
    target *t;
    size_t nt, capt;
    stk_manifest **manifests;
    size_t nm;
    stk_dataset **datasets; /* remote datasets, opened whole (their shards are borrowed) */
    size_t nds;
    char cache_dir[4096]; /* their temporary cache, removed at the end ("" if none) */
    problem *p;
    size_t np, capp;
    atomic_uint_fast64_t total_problems; /* written under lock, read by the progress bar without */
    pthread_mutex_t lock;
    unit *u;
    size_t nu, capu;
    atomic_size_t next_unit;
    atomic_uint_fast64_t bytes_done;
    atomic_uint_fast64_t decoded; /* --decode: JPEG values decoded whole */
    int io_error;
} checker;

/* One thread's JPEG decoder and pixel buffer (--decode). */
typedef struct {
    stk__jpeg *j;
    stk__img_buf buf;
} decoder;

static void *grow(void *p, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap) return p;
    size_t c = *cap ? *cap * 2 : 16;
    void *q = realloc(p, c * elem);
    if (!q) {
        fprintf(stderr, "shardcheck: out of memory\n");
        exit(CLI_EXIT_FAIL);
    }
    *cap = c;
    return q;
}

static int cmp_problem(const void *a, const void *b);

/* Record a problem (thread-safe). Each shard lists its MAX_LISTED_PER_SHARD
 * smallest (record, field) problems, so the report does not depend on which
 * thread found what first; counting is not capped. field_name is kept with
 * the problem because the shard may be closed by the time it is printed. */
static void add_field_problem(checker *c, size_t t, uint64_t record, int field, const char *field_name,
                              const char *msg)
{
    problem p = {t, field, record, field_name ? strdup(field_name) : NULL, strdup(msg)};
    pthread_mutex_lock(&c->lock);
    c->total_problems++;
    target *tg = t == SIZE_MAX ? NULL : &c->t[t];
    if (tg) atomic_fetch_add(&tg->listed, 1);
    if (!tg || tg->nkept < MAX_LISTED_PER_SHARD) {
        c->p = grow(c->p, &c->capp, c->np, sizeof *c->p);
        if (tg) tg->kept[tg->nkept++] = c->np;
        c->p[c->np++] = p;
    } else {
        size_t worst = 0; /* the largest kept one makes room if the new one is smaller */
        for (size_t k = 1; k < tg->nkept; k++)
            if (cmp_problem(&c->p[tg->kept[k]], &c->p[tg->kept[worst]]) > 0) worst = k;
        problem *w = &c->p[tg->kept[worst]];
        if (cmp_problem(&p, w) < 0) {
            problem old = *w;
            *w = p;
            p = old;
        }
        free(p.field_name);
        free(p.msg);
    }
    pthread_mutex_unlock(&c->lock);
}

static void add_problem(checker *c, size_t t, uint64_t record, int field, const char *msg)
{
    add_field_problem(c, t, record, field, NULL, msg);
}

static size_t add_target(checker *c, const char *path, const stk_shard_entry *e, const stk_manifest *m)
{
    c->t = grow(c->t, &c->capt, c->nt, sizeof *c->t);
    target *t = &c->t[c->nt];
    memset(t, 0, sizeof *t);
    t->path = strdup(path);
    t->entry = e;
    t->m = m;
    return c->nt++;
}

/* Open one shard and do the structural checks (O(1) plus the checksum table). */
static void check_structure(checker *c, size_t i)
{
    target *t = &c->t[i];
    stk_error err;
    if (!t->sh) t->sh = stk_shard_open(t->path, &err);
    if (!t->sh) {
        add_problem(c, i, UINT64_MAX, -1, err.msg);
        return;
    }
    t->opened = true;
    t->records = stk_shard_records(t->sh);
    t->bytes = stk_shard_file_size(t->sh);
    const stk_shard_entry *e = t->entry;
    char msg[STK_ERROR_MSG_MAX + 64];
    if (e && stk_shard_records(t->sh) != e->records) {
        snprintf(msg, sizeof msg, "%s: holds %llu records, the manifest says %llu", t->path,
                 (unsigned long long)stk_shard_records(t->sh), (unsigned long long)e->records);
        add_problem(c, i, UINT64_MAX, -1, msg);
    }
    if (e && stk_shard_file_size(t->sh) != e->file_size) {
        snprintf(msg, sizeof msg, "%s: is %llu bytes, the manifest says %llu", t->path,
                 (unsigned long long)stk_shard_file_size(t->sh), (unsigned long long)e->file_size);
        add_problem(c, i, UINT64_MAX, -1, msg);
    }
    if (t->m && !stk_schema_equal(stk_shard_schema(t->sh), &t->m->schema)) {
        snprintf(msg, sizeof msg, "%s: schema differs from the manifest's", t->path);
        add_problem(c, i, UINT64_MAX, -1, msg);
    }
    if (stk_shard_verify_index(t->sh, e ? e->index_hash : 0, &err))
        add_problem(c, i, UINT64_MAX, -1, err.msg);
}

static int add_dataset(checker *c, const char *path)
{
    stk_error err;
    stk_manifest *m = stk_manifest_load(path, &err);
    if (!m) {
        if (err.code == STK_E_IO) {
            fprintf(stderr, "shardcheck: %s\n", err.msg);
            return CLI_EXIT_FAIL;
        }
        add_problem(c, SIZE_MAX, UINT64_MAX, -1, err.msg);
        return CLI_EXIT_OK;
    }
    c->manifests = realloc(c->manifests, (c->nm + 1) * sizeof *c->manifests);
    c->manifests[c->nm++] = m;
    char *dir = stk_dataset_dir(path, &err);
    for (size_t i = 0; dir && i < m->nshards; i++) {
        size_t n = strlen(dir) + strlen(m->shards[i].path) + 2;
        char *p = malloc(n);
        snprintf(p, n, "%s/%s", dir, m->shards[i].path);
        add_target(c, p, &m->shards[i], m);
        free(p);
    }
    free(dir);
    return CLI_EXIT_OK;
}

static int remove_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(p); /* best effort: what stays is a temporary directory */
    return 0;
}

/* s3://bucket/prefix or https://...: opened as a dataset (one client), its
 * shards checked in place. The bytes checked are the object's, fetched into
 * a temporary cache of this run: the node's cache (STOKER_CACHE_DIR) would
 * answer with its own copy of a shard that another dataset shares. The open
 * checks every shard against the manifest and stops at the first that
 * disagrees: that one is reported. */
static int add_remote(checker *c, const char *path)
{
    stk_error err;
    size_t n = strlen(path);
    if (n >= 4 && strcmp(path + n - 4, ".stk") == 0) {
        fprintf(stderr, "shardcheck: %s: a remote shard is checked through its dataset: name the dataset\n",
                path);
        return CLI_EXIT_FAIL;
    }
    if (!c->cache_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(c->cache_dir, sizeof c->cache_dir, "%s/shardcheck-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(c->cache_dir)) {
            fprintf(stderr, "shardcheck: %s: %s\n", c->cache_dir, strerror(errno));
            c->cache_dir[0] = 0;
            return CLI_EXIT_FAIL;
        }
    }
    stk_remote_options ro;
    stk_remote_options_init(&ro);
    ro.cache_dir = c->cache_dir;
    ro.cache_limit = 1; /* the metadata, and the values being checked (rshard.h's window) */
    stk_dataset *ds = stk_dataset_open_remote(path, &ro, &err);
    if (!ds) {
        if (err.code == STK_E_IO) {
            fprintf(stderr, "shardcheck: %s\n", err.msg);
            return CLI_EXIT_FAIL;
        }
        add_problem(c, SIZE_MAX, UINT64_MAX, -1, err.msg);
        return CLI_EXIT_OK;
    }
    c->datasets = realloc(c->datasets, (c->nds + 1) * sizeof *c->datasets);
    c->datasets[c->nds++] = ds;
    const stk_manifest *m = stk_dataset_manifest(ds);
    for (size_t i = 0; i < m->nshards; i++) {
        const stk_shard *sh = stk_dataset_shard(ds, i);
        size_t t = add_target(c, stk_shard_path(sh), &m->shards[i], m);
        c->t[t].sh = (stk_shard *)sh;
        c->t[t].borrowed = true;
    }
    return CLI_EXIT_OK;
}

static int add_path(checker *c, const char *path)
{
    if (!strncmp(path, "s3://", 5) || !strncmp(path, "http://", 7) || !strncmp(path, "https://", 8))
        return add_remote(c, path);
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "shardcheck: %s: %s\n", path, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    size_t n = strlen(path);
    if (S_ISDIR(st.st_mode) || (n >= 5 && strcmp(path + n - 5, ".json") == 0)) return add_dataset(c, path);
    add_target(c, path, NULL, NULL);
    return CLI_EXIT_OK;
}

static void plan_units(checker *c)
{
    for (size_t i = 0; i < c->nt; i++) {
        const stk_shard *sh = c->t[i].sh;
        if (!sh) continue;
        uint64_t n = stk_shard_records(sh), size = stk_shard_file_size(sh);
        uint64_t per = n ? size / n + 1 : 1, chunk = UNIT_BYTES / per + 1;
        for (uint64_t f = 0; f < n; f += chunk) {
            c->u = grow(c->u, &c->capu, c->nu, sizeof *c->u);
            uint64_t k = n - f < chunk ? n - f : chunk;
            c->u[c->nu++] = (unit){i, U_RECORDS, f, k, k * per};
        }
        c->u = grow(c->u, &c->capu, c->nu, sizeof *c->u);
        c->u[c->nu++] = (unit){i, U_PADDING, 0, 0, 0};
        if (c->o.file_hash && c->t[i].entry) {
            c->u = grow(c->u, &c->capu, c->nu, sizeof *c->u);
            c->u[c->nu++] = (unit){i, U_FILEHASH, 0, 0, size};
        }
    }
    for (size_t k = 0; k < c->nu; k++) atomic_fetch_add(&c->t[c->u[k].t].units_left, 1);
}

typedef struct {
    checker *c;
    size_t t;
} cb_ctx;

static void on_problem(void *user, const stk_shard *sh, uint64_t record, int field, int code,
                       const char *what)
{
    (void)code;
    cb_ctx *x = user;
    char msg[STK_ERROR_MSG_MAX + 128];
    if (record == UINT64_MAX) snprintf(msg, sizeof msg, "%s: %s", stk_shard_path(sh), what);
    else if (field >= 0)
        snprintf(msg, sizeof msg, "%s: record %llu, field '%s': %s", stk_shard_path(sh),
                 (unsigned long long)record, stk_shard_schema(sh)->fields[field].name, what);
    else
        snprintf(msg, sizeof msg, "%s: record %llu: %s", stk_shard_path(sh), (unsigned long long)record,
                 what);
    add_field_problem(x->c, x->t, record, field, field >= 0 ? stk_shard_schema(sh)->fields[field].name : NULL,
                      msg);
}

/* Decode record i's JPEG value of field f in full, as the reader's whole
 * decode does (RGB, or grey for a one-component field). Values --full
 * already reports (no frame header, a shape other than the record's, a
 * checksum mismatch) are left to it: one problem a value. */
static void decode_value(const stk_shard *sh, unsigned f, uint64_t i, decoder *d, cb_ctx *x)
{
    const stk_field *fd = &stk_shard_schema(sh)->fields[f];
    const void *data;
    uint64_t size, dims[STK_MAX_DIMS];
    uint32_t fh, fw;
    unsigned nc;
    stk_error e;
    if (stk_shard_value(sh, f, i, &data, &size, &e) || stk_shard_value_shape(sh, f, i, dims, &e) ||
        stk_hash(data, (size_t)size) != stk_shard_stored_hash(sh, f, i) ||
        !stk__jpeg_dims(data, size, &fh, &fw, &nc) || fh != dims[0] || fw != dims[1] || nc != fd->shape[2])
        return;
    char what[STK_ERROR_MSG_MAX + 32];
    stk__jpeg_info info;
    int pf = fd->shape[2] == 1 ? STK_IMG_PF_GRAY : STK_IMG_PF_RGB, rc;
    if (!d->j && !(d->j = stk__jpeg_new())) rc = stk_error_set(&e, STK_E_NOMEM, "out of memory");
    else if (!(rc = stk__jpeg_header(d->j, data, (size_t)size, &info, &e)) &&
             !(rc = stk__img_buf_reserve(&d->buf, stk__jpeg_decode_bytes(&info, pf, 1), "the decoded image",
                                         &e)))
        rc = stk__jpeg_decode(d->j, data, (size_t)size, &info, pf, 1, d->buf.p, &e);
    if (rc == STK_OK) {
        atomic_fetch_add(&x->c->decoded, 1);
        return;
    }
    snprintf(what, sizeof what, "the JPEG does not decode: %s", e.msg);
    on_problem(x, sh, i, (int)f, rc, what);
}

static void run_unit(checker *c, const unit *u, decoder *d)
{
    const target *t = &c->t[u->t];
    cb_ctx x = {c, u->t};
    if (u->kind == U_RECORDS) {
        stk_shard_verify_records(t->sh, u->first, u->count, on_problem, &x);
        const stk_schema *s = stk_shard_schema(t->sh);
        for (unsigned f = 0; c->o.decode && f < s->nfields; f++)
            for (uint64_t i = u->first; s->fields[f].codec == STK_CODEC_JPEG && i < u->first + u->count; i++)
                decode_value(t->sh, f, i, d, &x);
    } else if (u->kind == U_PADDING) {
        stk_shard_verify_padding(t->sh, on_problem, &x);
    } else {
        uint64_t h = stk_shard_file_hash(t->sh);
        if (h != t->entry->file_hash) {
            char what[128];
            snprintf(what, sizeof what, "whole-file hash %016llx differs from the manifest's %016llx",
                     (unsigned long long)h, (unsigned long long)t->entry->file_hash);
            on_problem(&x, t->sh, UINT64_MAX, -1, STK_E_CHECKSUM, what);
        }
    }
    atomic_fetch_add(&c->bytes_done, u->bytes);
    /* The thread that finishes a shard's last unit unmaps it: unmapping
     * costs about a third of the time mapping and hashing took, and done
     * here it is spread over the threads instead of left to the end. */
    if (atomic_fetch_sub(&c->t[u->t].units_left, 1) == 1) {
        if (!c->t[u->t].borrowed) stk_shard_close(c->t[u->t].sh);
        c->t[u->t].sh = NULL;
    }
}

static void decoder_free(decoder *d)
{
    stk__jpeg_free(d->j);
    stk__img_buf_free(&d->buf);
}

static void *worker(void *arg)
{
    checker *c = arg;
    decoder d = {0};
    for (size_t i; (i = atomic_fetch_add(&c->next_unit, 1)) < c->nu;) run_unit(c, &c->u[i], &d);
    decoder_free(&d);
    return NULL;
}

/* The main thread works too, and draws the progress bar between units. */
static void run_full(checker *c)
{
    plan_units(c);
    uint64_t total = 0;
    for (size_t i = 0; i < c->nu; i++) total += c->u[i].bytes;
    unsigned n = c->o.threads;
    pthread_t *th = calloc(n, sizeof *th);
    unsigned started = 0;
    for (unsigned k = 1; k < n; k++)
        if (pthread_create(&th[k], NULL, worker, c) == 0) started++;
        else break;
    cli_progress p;
    cli_progress_start(&p, "shardcheck", total, c->o.quiet || c->o.json);
    decoder d = {0};
    for (size_t i; (i = atomic_fetch_add(&c->next_unit, 1)) < c->nu;) {
        run_unit(c, &c->u[i], &d);
        char extra[48];
        snprintf(extra, sizeof extra, "%llu problems", (unsigned long long)c->total_problems);
        cli_progress_update(&p, atomic_load(&c->bytes_done), extra);
    }
    decoder_free(&d);
    for (unsigned k = 1; k <= started; k++) pthread_join(th[k], NULL);
    cli_progress_end(&p);
    free(th);
}

static int cmp_problem(const void *a, const void *b)
{
    const problem *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if (x->record != y->record) return x->record < y->record ? -1 : 1;
    if (x->field != y->field) return x->field < y->field ? -1 : 1;
    return strcmp(x->msg, y->msg);
}

static void report(checker *c, double seconds)
{
    if (c->np) qsort(c->p, c->np, sizeof *c->p, cmp_problem); /* c->p is NULL when there are none */
    uint64_t records = 0, bytes = 0;
    for (size_t i = 0; i < c->nt; i++)
        if (c->t[i].opened) records += c->t[i].records, bytes += c->t[i].bytes;
    double gbs = seconds > 0 ? (double)bytes / seconds / 1e9 : 0;
    const char *mode = c->o.decode ? "decode" : c->o.full ? "full" : "quick";
    unsigned long long decoded = atomic_load(&c->decoded);
    if (c->o.json) {
        printf("{\"ok\": %s, \"mode\": \"%s\", \"shards\": %zu, \"records\": %llu, \"bytes\": %llu, "
               "\"seconds\": %.6f, \"gb_per_s\": %.3f, \"decoded\": %llu, \"problems\": %llu, "
               "\"problem_list\": [",
               c->total_problems ? "false" : "true", mode, c->nt, (unsigned long long)records,
               (unsigned long long)bytes, seconds, gbs, decoded, (unsigned long long)c->total_problems);
        for (size_t i = 0; i < c->np; i++) {
            const problem *p = &c->p[i];
            printf("%s{\"file\": ", i ? ", " : "");
            cli_json_string(stdout, p->t == SIZE_MAX ? "" : c->t[p->t].path);
            if (p->record == UINT64_MAX) printf(", \"record\": null");
            else printf(", \"record\": %llu", (unsigned long long)p->record);
            if (!p->field_name) printf(", \"field\": null, \"message\": ");
            else {
                printf(", \"field\": ");
                cli_json_string(stdout, p->field_name);
                printf(", \"message\": ");
            }
            cli_json_string(stdout, p->msg);
            printf("}");
        }
        printf("]}\n");
        return;
    }
    for (size_t i = 0; i < c->np; i++) printf("%s\n", c->p[i].msg);
    for (size_t i = 0; i < c->nt; i++) {
        uint64_t l = atomic_load(&c->t[i].listed);
        if (l > MAX_LISTED_PER_SHARD)
            printf("%s: ... and %llu more problems\n", c->t[i].path,
                   (unsigned long long)(l - MAX_LISTED_PER_SHARD));
    }
    char rate[64] = "", hb[16]; /* --quick reads no data: a rate would mislead */
    if (c->o.full) snprintf(rate, sizeof rate, " (%.2f GB/s)", gbs);
    if (c->o.decode)
        snprintf(rate + strlen(rate), sizeof rate - strlen(rate), ", %llu JPEG values decoded", decoded);
    if (!c->o.quiet)
        fprintf(stderr,
                "shardcheck: %s check of %zu shard%s, %llu record%s, %s in %.2f s%s: %s%llu problem%s\n",
                mode, c->nt, cli_plural(c->nt), (unsigned long long)records, cli_plural(records),
                cli_bytes(hb, sizeof hb, (double)bytes), seconds, rate, c->total_problems ? "" : "OK, ",
                (unsigned long long)c->total_problems, cli_plural(c->total_problems));
}

static int parse(int argc, char **argv, opts *o)
{
    static const struct option lo[] = {{"quick", 0, 0, 'Q'},   {"full", 0, 0, 'F'},
                                       {"decode", 0, 0, 'D'},  {"file-hash", 0, 0, 'H'},
                                       {"threads", 1, 0, 'j'}, CLI_COMMON_OPTIONS};
    cli_args a = {.prog = "shardcheck", .usage = usage, .longopts = lo};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (opts){.full = true, .threads = ncpu > 0 ? (unsigned)ncpu : 1};
    int ch;
    uint64_t v;
    bool quick = false, full = false;
    while ((ch = cli_getopt(&a, argc, argv, "j:" CLI_COMMON_SHORT)) != -1) {
        switch (ch) {
        case 'Q':
            o->full = false;
            quick = true;
            break;
        case 'F':
            o->full = full = true;
            break;
        case 'D':
            o->decode = true;
            break;
        case 'H':
            o->file_hash = true;
            break;
        case 'j':
            if (!cli_uint(&a, optarg, 1, 1024, &v)) return CLI_EXIT_USAGE;
            o->threads = (unsigned)v;
            break;
        default:
            return CLI_EXIT_USAGE;
        }
    }
    o->json = a.json, o->quiet = a.quiet;
    if (!cli_operands(&a, argc, 1, -1, "at least one PATH")) return CLI_EXIT_USAGE;
    if (quick && full) return cli_usage_error(&a, "--quick and --full are different checks: give one");
    if (quick) o->full = false;
    if (o->file_hash && !o->full)
        return cli_usage_error(&a, "--file-hash reads every byte; it cannot go with --quick");
    if (quick && o->decode)
        return cli_usage_error(&a, "--decode reads every value; it cannot go with --quick");
    if (o->decode) o->full = true;
    return CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
    checker c;
    memset(&c, 0, sizeof c);
    int rc = parse(argc, argv, &c.o);
    if (rc) return rc;
    pthread_mutex_init(&c.lock, NULL);
    double t0 = cli_now();
    for (int i = optind; i < argc && !rc; i++) rc = add_path(&c, argv[i]);
    if (rc) {
        for (size_t i = 0; i < c.nds; i++) stk_dataset_close(c.datasets[i]);
        if (c.cache_dir[0]) nftw(c.cache_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        return rc;
    }
    for (size_t i = 0; i < c.nt; i++) check_structure(&c, i);
    if (c.o.full) run_full(&c);
    report(&c, cli_now() - t0);
    int status = c.total_problems ? CLI_EXIT_FAIL : CLI_EXIT_OK;
    for (size_t i = 0; i < c.nt; i++) {
        if (!c.t[i].borrowed) stk_shard_close(c.t[i].sh);
        free(c.t[i].path);
    }
    for (size_t i = 0; i < c.nds; i++) stk_dataset_close(c.datasets[i]);
    if (c.cache_dir[0]) nftw(c.cache_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    for (size_t i = 0; i < c.np; i++) free(c.p[i].msg), free(c.p[i].field_name);
    for (size_t i = 0; i < c.nm; i++) stk_manifest_free(c.manifests[i]);
    free(c.t), free(c.p), free(c.u), free(c.manifests), free(c.datasets);
    pthread_mutex_destroy(&c.lock);
    return status;
}
