/* shardinfo - what a dataset holds: schema, counts, sizes, shards, how it
 * was packed, the class histogram and the fingerprint. Reads the manifest and
 * maps the shards (no verification: that is shardcheck's job); the
 * histogram reads the integer scalar field `label` of every record. */
#define _GNU_SOURCE
#include "cli.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/reader.h"

/* The pack parameters (the manifest's "pack" object), one "key: value" line
 * each, objects indented under their key (--json keeps the raw object). */
static void print_pack(const json_t *v, int indent)
{
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)v, k, x)
    {
        if (json_is_object(x)) {
            printf("%*s%s:\n", indent, "", k);
            print_pack(x, indent + 2);
            continue;
        }
        char *t = json_is_string(x) ? NULL : json_dumps(x, JSON_COMPACT | JSON_ENCODE_ANY);
        printf("%*s%s: %s\n", indent, "", k, t ? t : json_string_value(x));
        free(t);
    }
}

static void usage(FILE *f)
{
    fprintf(f, "Usage: shardinfo [OPTIONS] DATASET\n"
               "Describe a stoker dataset: schema, record and byte counts, shards, pack\n"
               "parameters, class histogram and fingerprint.\n\n"
               "      --shards        list every shard (default: the first and last 5)\n"
               "      --no-histogram  skip the class histogram (it reads every label)\n"
               "      --json          print one JSON object instead\n"
               "  -q, --quiet         no note on stderr when the histogram cannot be made\n"
               "  -h, --help          this help\n"
               "  -V, --version       version\n\n" CLI_EXIT_HELP);
}

typedef struct {
    int all_shards, histogram, json, quiet;
} opts;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Counts per label value, as sorted (value, count) pairs; 0 pairs when the
 * dataset has no integer scalar 'label' field. */
typedef struct {
    size_t n;
    int64_t *value;
    uint64_t *count;
} histogram;

static int label_field(const stk_schema *s)
{
    int f = stk_schema_find(s, "label");
    if (f < 0 || s->fields[f].kind != STK_KIND_TENSOR || s->fields[f].ndim != 0 ||
        s->fields[f].dtype > STK_DT_I64)
        return -1;
    return f;
}

static int64_t as_i64(const void *p, int dtype)
{
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        int64_t i64;
    } v;
    memcpy(&v, p, stk_dtype_size(dtype)); /* an integer dtype, at most 8 bytes */
    switch (dtype) {
    case STK_DT_U8:
        return v.u8;
    case STK_DT_I8:
        return v.i8;
    case STK_DT_U16:
        return v.u16;
    case STK_DT_I16:
        return v.i16;
    case STK_DT_U32:
        return v.u32;
    case STK_DT_I32:
        return v.i32;
    default:
        return v.i64;
    }
}

static int make_histogram(const stk_dataset *ds, histogram *h)
{
    memset(h, 0, sizeof *h);
    const stk_schema *s = stk_dataset_schema(ds);
    int f = label_field(s);
    uint64_t n = stk_dataset_records(ds);
    if (f < 0 || n == 0) return 0;
    int64_t *all = malloc(n * sizeof *all);
    h->value = malloc(n * sizeof *h->value);
    h->count = malloc(n * sizeof *h->count);
    if (!all || !h->value || !h->count) {
        free(all);
        return -1;
    }
    uint64_t k = 0;
    stk_block_cursor bc = {0}; /* a compressed label column is read block by block */
    for (size_t i = 0; i < stk_dataset_nshards(ds); i++) {
        const stk_shard *sh = stk_dataset_shard(ds, i);
        for (uint64_t r = 0; r < stk_shard_records(sh); r++) {
            const void *p;
            uint64_t size;
            if (stk_shard_value_at(sh, (unsigned)f, r, &bc, &p, &size, NULL)) {
                stk_block_cursor_free(&bc);
                free(all);
                return -1;
            }
            all[k++] = as_i64(p, s->fields[f].dtype);
        }
    }
    stk_block_cursor_free(&bc);
    qsort(all, n, sizeof *all, cmp_i64);
    for (uint64_t i = 0; i < n; i++) {
        if (h->n && h->value[h->n - 1] == all[i]) {
            h->count[h->n - 1]++;
        } else {
            h->value[h->n] = all[i];
            h->count[h->n++] = 1;
        }
    }
    free(all);
    return 0;
}

static const char *class_name(const stk_manifest *m, int64_t v)
{
    return v >= 0 && (uint64_t)v < m->nclasses ? m->classes[v] : NULL;
}

static uint64_t total_bytes(const stk_dataset *ds)
{
    uint64_t t = 0;
    for (size_t i = 0; i < stk_dataset_nshards(ds); i++) t += stk_shard_file_size(stk_dataset_shard(ds, i));
    return t;
}

/* Per-record shapes of the array fields (format 1.2): each dimension's
 * range and mean, and the stored bytes per value. The shape column is read,
 * not the values: O(records x dims x 8 bytes). */
typedef struct {
    uint64_t lo[STK_MAX_DIMS], hi[STK_MAX_DIMS], bytes, problems;
    double sum[STK_MAX_DIMS];
} shape_stats;

static void array_stats(const stk_dataset *ds, unsigned f, shape_stats *st)
{
    const stk_field *fd = &stk_dataset_schema(ds)->fields[f];
    memset(st, 0, sizeof *st);
    for (unsigned d = 0; d < STK_MAX_DIMS; d++) st->lo[d] = UINT64_MAX;
    for (size_t s = 0; s < stk_dataset_nshards(ds); s++) {
        const stk_shard *sh = stk_dataset_shard(ds, s);
        for (uint64_t i = 0; i < stk_shard_records(sh); i++) {
            uint64_t dims[STK_MAX_DIMS], size = 0;
            const void *p;
            if (stk_shard_value_shape(sh, f, i, dims, NULL) ||
                (fd->codec != STK_CODEC_ZSTD && stk_shard_value(sh, f, i, &p, &size, NULL))) {
                st->problems++;
                continue;
            }
            st->bytes += size;
            for (unsigned d = 0; d < fd->ndim; d++) {
                st->lo[d] = dims[d] < st->lo[d] ? dims[d] : st->lo[d];
                st->hi[d] = dims[d] > st->hi[d] ? dims[d] : st->hi[d];
                st->sum[d] += (double)dims[d];
            }
        }
    }
}

static void print_array_text(const stk_dataset *ds, unsigned f)
{
    const stk_field *fd = &stk_dataset_schema(ds)->fields[f];
    shape_stats st;
    array_stats(ds, f, &st);
    uint64_t n = stk_dataset_records(ds);
    printf("      shapes");
    for (unsigned d = 0; d < fd->ndim; d++)
        if (!fd->shape[d] && n)
            printf("  dim %u: %llu..%llu, mean %.1f", d, (unsigned long long)st.lo[d],
                   (unsigned long long)st.hi[d], st.sum[d] / (double)n);
    if (fd->codec != STK_CODEC_ZSTD && n)
        printf("; %.0f bytes per value stored", (double)st.bytes / (double)n);
    if (st.problems) printf("; %llu unreadable (run shardcheck)", (unsigned long long)st.problems);
    printf("\n");
}

static void print_text(const char *path, const stk_dataset *ds, const histogram *h, const opts *o)
{
    const stk_manifest *m = stk_dataset_manifest(ds);
    const stk_schema *s = stk_dataset_schema(ds);
    uint64_t n = stk_dataset_records(ds), bytes = total_bytes(ds);
    printf("dataset      %s\n", path);
    printf("format       %u.%u, fingerprint %016llx\n", m->version_major, m->version_minor,
           (unsigned long long)m->fingerprint);
    char hb[16];
    printf("records      %llu in %zu shard%s, %s (%.0f bytes per record with overhead)\n",
           (unsigned long long)n, stk_dataset_nshards(ds), cli_plural(stk_dataset_nshards(ds)),
           cli_bytes(hb, sizeof hb, (double)bytes), n ? (double)bytes / n : 0);
    printf("fields\n");
    for (unsigned f = 0; f < s->nfields; f++) {
        char d[128];
        stk_field_describe(&s->fields[f], d, sizeof d);
        uint64_t st = stk_field_stride(&s->fields[f]);
        if (st) printf("  %-40s %llu bytes per record\n", d, (unsigned long long)st);
        else if (s->fields[f].kind == STK_KIND_ARRAY) printf("  %-40s shape per record\n", d);
        else printf("  %-40s variable length\n", d);
        if (s->fields[f].kind == STK_KIND_ARRAY) print_array_text(ds, f);
    }
    printf("shards\n");
    size_t ns = stk_dataset_nshards(ds);
    for (size_t i = 0; i < ns; i++) {
        if (!o->all_shards && ns > 10 && i == 5) {
            printf("  ... %zu more (--shards lists them)\n", ns - 10);
            i = ns - 5;
        }
        const stk_shard_entry *e = &m->shards[i];
        printf("  %-28s %10llu records %12llu bytes  xxh3 %016llx\n", e->path, (unsigned long long)e->records,
               (unsigned long long)e->file_size, (unsigned long long)e->file_hash);
    }
    printf("pack%s\n",
           m->pack_json && strcmp(m->pack_json, "{}") && strcmp(m->pack_json, "null") ? "" : "         none");
    json_t *pj = m->pack_json ? json_loads(m->pack_json, 0, NULL) : NULL;
    print_pack(pj, 2);
    json_decref(pj);
    printf("classes      %zu\n", m->nclasses);
    if (h->n) {
        uint64_t lo = UINT64_MAX, hi = 0;
        for (size_t i = 0; i < h->n; i++) {
            lo = h->count[i] < lo ? h->count[i] : lo;
            hi = h->count[i] > hi ? h->count[i] : hi;
        }
        printf("histogram    %zu distinct labels, %llu to %llu records each\n", h->n, (unsigned long long)lo,
               (unsigned long long)hi);
        for (size_t i = 0; i < h->n; i++) {
            if (h->n > 40 && i == 20) {
                printf("  ... %zu more labels (--json lists all)\n", h->n - 40);
                i = h->n - 20;
            }
            const char *c = class_name(m, h->value[i]);
            printf("  %6lld %-24s %10llu\n", (long long)h->value[i], c ? c : "",
                   (unsigned long long)h->count[i]);
        }
    }
}

static void print_json(const char *path, const stk_dataset *ds, const histogram *h)
{
    const stk_manifest *m = stk_dataset_manifest(ds);
    const stk_schema *s = stk_dataset_schema(ds);
    printf("{\"dataset\":");
    cli_json_string(stdout, path);
    printf(",\"format_version\":[%u,%u],\"fingerprint\":\"%016llx\",\"records\":%llu,\"bytes\":%llu,"
           "\"fields\":[",
           m->version_major, m->version_minor, (unsigned long long)m->fingerprint,
           (unsigned long long)stk_dataset_records(ds), (unsigned long long)total_bytes(ds));
    for (unsigned f = 0; f < s->nfields; f++) {
        const stk_field *fd = &s->fields[f];
        printf("%s{\"name\":", f ? "," : "");
        cli_json_string(stdout, fd->name);
        static const char *const kinds[] = {"?", "tensor", "bytes", "array"}, *const codecs[] = {
                                                                                  "none", "zstd", "jpeg"};
        printf(",\"kind\":\"%s\",\"dtype\":\"%s\",\"codec\":\"%s\",\"shape\":[",
               kinds[fd->kind <= 3 ? fd->kind : 0], stk_dtype_name(fd->dtype),
               codecs[fd->codec <= 2 ? fd->codec : 0]);
        for (unsigned d = 0; d < fd->ndim; d++)
            if (fd->kind == STK_KIND_ARRAY && !fd->shape[d]) printf("%snull", d ? "," : "");
            else printf("%s%llu", d ? "," : "", (unsigned long long)fd->shape[d]);
        printf("],\"bytes_per_record\":%llu", (unsigned long long)stk_field_stride(fd));
        if (fd->kind == STK_KIND_ARRAY) {
            shape_stats st;
            array_stats(ds, f, &st);
            double n = (double)stk_dataset_records(ds);
            printf(",\"shapes\":[");
            for (unsigned d = 0; d < fd->ndim; d++) {
                if (fd->shape[d] || !n) printf("%snull", d ? "," : "");
                else
                    printf("%s{\"min\":%llu,\"max\":%llu,\"mean\":%.3f}", d ? "," : "",
                           (unsigned long long)st.lo[d], (unsigned long long)st.hi[d], st.sum[d] / n);
            }
            printf("],\"stored_bytes\":%llu,\"unreadable\":%llu", (unsigned long long)st.bytes,
                   (unsigned long long)st.problems);
        }
        putchar('}');
    }
    printf("],\"shards\":[");
    for (size_t i = 0; i < m->nshards; i++) {
        printf("%s{\"path\":", i ? "," : "");
        cli_json_string(stdout, m->shards[i].path);
        printf(",\"records\":%llu,\"bytes\":%llu,\"xxh3\":\"%016llx\"}",
               (unsigned long long)m->shards[i].records, (unsigned long long)m->shards[i].file_size,
               (unsigned long long)m->shards[i].file_hash);
    }
    printf("],\"pack\":%s,\"classes\":[", m->pack_json);
    for (size_t i = 0; i < m->nclasses; i++) {
        if (i) putchar(',');
        cli_json_string(stdout, m->classes[i]);
    }
    printf("],\"histogram\":[");
    for (size_t i = 0; i < h->n; i++)
        printf("%s{\"label\":%lld,\"count\":%llu}", i ? "," : "", (long long)h->value[i],
               (unsigned long long)h->count[i]);
    printf("]}\n");
}

int main(int argc, char **argv)
{
    enum { O_SHARDS = 256, O_NOHIST };
    static const struct option lo[] = {
        {"shards", 0, 0, O_SHARDS}, {"no-histogram", 0, 0, O_NOHIST}, CLI_COMMON_OPTIONS};
    cli_args a = {.prog = "shardinfo", .usage = usage, .longopts = lo};
    opts o = {0, 1, 0, 0};
    int c;
    while ((c = cli_getopt(&a, argc, argv, CLI_COMMON_SHORT)) != -1) {
        switch (c) {
        case O_SHARDS:
            o.all_shards = 1;
            break;
        case O_NOHIST:
            o.histogram = 0;
            break;
        default:
            return CLI_EXIT_USAGE;
        }
    }
    o.json = a.json, o.quiet = a.quiet;
    if (!cli_operands(&a, argc, 1, 1, "one DATASET")) return CLI_EXIT_USAGE;
    stk_error err;
    stk_dataset *ds = stk_dataset_open(argv[optind], &err);
    if (!ds) {
        fprintf(stderr, "shardinfo: %s\n", err.msg);
        return CLI_EXIT_FAIL;
    }
    histogram h = {0, NULL, NULL};
    if (o.histogram && make_histogram(ds, &h) && !o.quiet) /* 24 bytes a record: a billion may not fit */
        fprintf(stderr,
                "shardinfo: the class histogram could not be made (memory, or a corrupt label block); "
                "described without it\n");
    if (o.json) print_json(argv[optind], ds, &h);
    else print_text(argv[optind], ds, &h, &o);
    free(h.value);
    free(h.count);
    stk_dataset_close(ds);
    return CLI_EXIT_OK;
}
