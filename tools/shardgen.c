/* shardgen - write a synthetic image dataset through the format library.
 *
 * For demos, tests and benchmarks: deterministic images (a per-class
 * gradient plus noise, so they look like something and compress like
 * photos more than like random bytes), labels, and optionally a
 * variable-length caption. The same flags give byte-identical output. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

#include "stoker/format.h"

static void usage(FILE *f)
{
    fprintf(f, "Usage: shardgen [OPTIONS] OUTDIR\n"
               "Write a synthetic stoker dataset (fields: image u8[N,N,3], label i64,\n"
               "and with --captions a variable-length 'caption') into OUTDIR.\n\n"
               "  -n, --records N           records to write (default 1000)\n"
               "  -s, --size N              image side in pixels (default 64)\n"
               "      --classes N           number of classes (default 10)\n"
               "      --records-per-shard N\n"
               "                            start a new shard every N records\n"
               "      --shard-size BYTES    shard size limit, whole records (default 64M;\n"
               "                            suffixes K, M, G)\n"
               "      --seed S              content seed (default 0)\n"
               "      --captions            add a variable-length bytes field 'caption'\n"
               "      --aspect              images of their own aspect: 'image' becomes\n"
               "                            u8[*,*,3] (format 1.2), the longer side N, the\n"
               "                            shorter N/2..N, landscape or portrait\n"
               "      --compress zstd[:L]   store image and caption compressed (zstd level L,\n"
               "                            default 3; format 1.1)\n"
               "      --block-size BYTES    uncompressed bytes per compressed block (1M)\n"
               "      --force               replace a dataset already in OUTDIR\n"
               "      --json                print the result as one JSON object\n"
               "  -q, --quiet               no progress bar or summary\n"
               "  -h, --help                this help\n"
               "  -V, --version             version\n\n" CLI_EXIT_HELP);
}

typedef struct {
    uint64_t records, size, classes, per_shard, shard_bytes, seed, block;
    int zstd; /* 0: none, else the level */
    bool captions, aspect, force, json, quiet;
    const char *out;
} opts;

static int parse(int argc, char **argv, opts *o)
{
    static const struct option lo[] = {
        {"records", 1, 0, 'n'},           {"size", 1, 0, 's'},       {"classes", 1, 0, 'c'},
        {"records-per-shard", 1, 0, 'r'}, {"shard-size", 1, 0, 'b'}, {"seed", 1, 0, 'e'},
        {"captions", 0, 0, 'C'},          {"aspect", 0, 0, 'A'},     {"force", 0, 0, 'f'},
        {"compress", 1, 0, 'z'},          {"block-size", 1, 0, 'k'}, CLI_COMMON_OPTIONS};
    *o = (opts){.records = 1000, .size = 64, .classes = 10, .shard_bytes = 64u << 20};
    const cli_number num[] = {
        {'n', false, 0, UINT64_MAX, &o->records},    {'s', false, 1, 16384, &o->size},
        {'c', false, 1, 100000, &o->classes},        {'r', false, 0, UINT64_MAX, &o->per_shard},
        {'b', true, 0, UINT64_MAX, &o->shard_bytes}, {'e', false, 0, UINT64_MAX, &o->seed},
        {'k', true, 1, UINT64_MAX, &o->block},       {0, false, 0, 0, NULL}};
    const cli_flag flags[] = {{'C', &o->captions}, {'A', &o->aspect}, {'f', &o->force}, {0, NULL}};
    cli_args a = {.prog = "shardgen", .usage = usage, .longopts = lo, .numbers = num, .flags = flags};
    int c;
    while ((c = cli_getopt(&a, argc, argv, "n:s:" CLI_COMMON_SHORT)) != -1) {
        bool ok = true;
        switch (c) {
        case 'z': {
            uint64_t lv = 3;
            if (!strcmp(optarg, "none")) lv = 0;
            else if (strncmp(optarg, "zstd", 4) || (optarg[4] && optarg[4] != ':'))
                ok = cli_bad_value(&a, optarg, "none or zstd[:L]");
            else if (optarg[4]) ok = cli_uint(&a, optarg + 5, 1, 19, &lv);
            o->zstd = (int)lv;
            break;
        }
        default:
            return CLI_EXIT_USAGE;
        }
        if (!ok) return CLI_EXIT_USAGE;
    }
    if (!cli_operands(&a, argc, 1, 1, "one OUTDIR")) return CLI_EXIT_USAGE;
    o->out = argv[optind];
    o->json = a.json, o->quiet = a.quiet;
    return CLI_EXIT_OK;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void make_image(uint8_t *img, uint64_t h, uint64_t w, int64_t label, uint64_t *rng)
{
    uint64_t gx = 1 + (uint64_t)label % 7, gy = 1 + (uint64_t)label % 5, bias = splitmix(rng) & 0xff;
    uint64_t noise = 0, n = h > w ? h : w;
    for (uint64_t y = 0, k = 0; y < h; y++)
        for (uint64_t x = 0; x < w; x++)
            for (int ch = 0; ch < 3; ch++, k++) {
                if ((k & 7) == 0) noise = splitmix(rng);
                uint64_t base =
                    (x * gx + y * gy) * 256 / (n * 6) + bias + (uint64_t)ch * 40 + (uint64_t)label * 13;
                img[k] = (uint8_t)(base + ((noise >> (8 * (k & 7))) & 15));
            }
}

static char **class_names(uint64_t n)
{
    char **c = calloc(n, sizeof *c);
    for (uint64_t i = 0; c && i < n; i++) {
        c[i] = malloc(32);
        if (c[i]) snprintf(c[i], 32, "class%03llu", (unsigned long long)i);
    }
    return c;
}

int main(int argc, char **argv)
{
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    stk_schema s;
    stk_error err;
    stk_schema_init(&s);
    uint64_t shape[3] = {o.size, o.size, 3}, any[3] = {0, 0, 3};
    if ((o.aspect ? stk_schema_add_array(&s, "image", STK_DT_U8, 3, any, &err)
                  : stk_schema_add_tensor(&s, "image", STK_DT_U8, 3, shape, &err)) ||
        stk_schema_add_tensor(&s, "label", STK_DT_I64, 0, NULL, &err) ||
        (o.captions && stk_schema_add_bytes(&s, "caption", &err)) ||
        (o.zstd && stk_schema_set_codec(&s, 0, STK_CODEC_ZSTD, &err)) ||
        (o.zstd && o.captions && stk_schema_set_codec(&s, 2, STK_CODEC_ZSTD, &err))) {
        fprintf(stderr, "shardgen: %s\n", err.msg);
        return CLI_EXIT_USAGE;
    }
    char **names = class_names(o.classes);
    char pack[256];
    snprintf(pack, sizeof pack, "{\"tool\": \"shardgen\", \"seed\": %llu, \"size\": %llu}",
             (unsigned long long)o.seed, (unsigned long long)o.size);
    stk_dataset_options dopt = {.records_per_shard = o.per_shard,
                                .shard_bytes = o.shard_bytes,
                                .force = o.force,
                                .nclasses = (size_t)o.classes,
                                .classes = (const char *const *)names,
                                .pack_json = pack,
                                .zstd_level = o.zstd,
                                .zstd_block_bytes = o.block};
    uint8_t *img = malloc((size_t)(o.size * o.size * 3));
    if (!names || !img) {
        fprintf(stderr, "shardgen: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    double t0 = cli_now();
    stk_dataset_writer *dw = stk_dataset_writer_create(o.out, &s, &dopt, &err);
    cli_progress p;
    cli_progress_start(&p, "shardgen", o.records * o.size * o.size * 3, o.quiet || o.json);
    for (uint64_t i = 0; dw && i < o.records; i++) {
        uint64_t rng = o.seed * 0x2545f4914f6cdd1dull ^ (i + 1) * 0x9e3779b97f4a7c15ull;
        int64_t label = (int64_t)(splitmix(&rng) % o.classes);
        uint64_t dims[2] = {o.size, o.size};
        if (o.aspect) { /* the shorter side N/2 .. N, either way round */
            uint64_t r = splitmix(&rng), shorter = o.size / 2 + (r >> 1) % (o.size - o.size / 2 + 1);
            dims[r & 1] = shorter ? shorter : 1;
        }
        make_image(img, dims[0], dims[1], label, &rng);
        char cap[160];
        int clen = snprintf(cap, sizeof cap, "record %llu of %s%.*s", (unsigned long long)i, names[label],
                            (int)(splitmix(&rng) % 64),
                            " a synthetic caption of variable length, for testing bytes");
        stk_value v[3] = {{img, dims[0] * dims[1] * 3}, {&label, 8}, {cap, (uint64_t)clen}};
        if (stk_dataset_writer_append_dims(dw, v, dims, &err)) {
            stk_dataset_writer_abort(dw);
            dw = NULL;
            break;
        }
        cli_progress_update(&p, (i + 1) * o.size * o.size * 3, NULL);
    }
    cli_progress_end(&p);
    rc = dw && stk_dataset_writer_finish(dw, &err) == STK_OK ? CLI_EXIT_OK : CLI_EXIT_FAIL;
    double el = cli_now() - t0;
    if (rc) fprintf(stderr, "shardgen: %s\n", err.msg);
    else if (o.json) printf("{\"records\": %llu, \"seconds\": %.3f}\n", (unsigned long long)o.records, el);
    else if (!o.quiet)
        fprintf(stderr, "shardgen: wrote %llu records to %s in %.2f s\n", (unsigned long long)o.records,
                o.out, el);
    for (uint64_t i = 0; i < o.classes; i++) free(names[i]);
    free(names);
    free(img);
    return rc;
}
