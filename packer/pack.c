/* pack - turn a raw image dataset into a verified stoker dataset.
 *
 * INPUT (an ImageFolder tree or a .csv/.tsv list) -> listing (fixed order)
 * -> worker threads decode + resize into a bounded ring of slots -> one
 * writer appends records in listing order into shards of a fixed record
 * count -> part record -> listing.tsv, skipped.tsv, manifest.json.
 * The output depends on the input and the flags only, never on -j.
 *
 * This file reads the command line; pack.h says which file does the rest. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pack.h"

static void usage(FILE *f)
{
    fprintf(f, "Usage: pack [OPTIONS] INPUT OUTDIR\n"
               "       pack --merge OUTDIR\n"
               "Decode, resize and pack the images of INPUT into a stoker dataset in OUTDIR.\n"
               "INPUT is an ImageFolder tree (ROOT/CLASS/FILE; labels are class indices in\n"
               "sorted order) or a .csv/.tsv list with a header naming `path` and `label`\n"
               "(label: an integer or a class name; paths relative to the list's folder).\n\n"
               "  -s, --size N            output images are N x N x 3 (default 256)\n"
               "      --resize MODE       shorter (default): shorter side to N, centre crop;\n"
               "                          stretch: to N x N; fit: inside N x N, padded;\n"
               "                          keep: each image at its own aspect and size,\n"
               "                          bounded by --max-side / --min-side (format 1.2)\n"
               "      --max-side N        keep: the longer side at most N, never enlarged\n"
               "                          (FFCV's max_resolution); implies --resize keep\n"
               "      --min-side N        keep: the shorter side N (torchvision Resize(N));\n"
               "                          the longer then at most --max-side (default 4N)\n"
               "      --image-format F    raw (default): pixels; jpeg[:Q]: re-encoded as JPEG\n"
               "                          at quality Q (default 90, 4:2:0); original[:Q]: a\n"
               "                          JPEG input's own coefficients where it needs no\n"
               "                          resize (see --jpeg-restart),\n"
               "                          others re-encoded at Q and counted (format 1.2)\n"
               "      --jpeg-baseline     with original: progressive inputs are stored as\n"
               "                          baseline JPEGs with the same DCT coefficients\n"
               "                          (lossless: the same pixels; decode faster at load)\n"
               "      --jpeg-restart N    JPEG values (jpeg, original) get a restart marker\n"
               "                          every N MCUs, losslessly (the same pixels; kept\n"
               "                          inputs then baseline): a crop at load decodes only\n"
               "                          the segments it covers; 0: none, original inputs'\n"
               "                          bytes kept as they are (default 1)\n"
               "      --fill R,G,B        padding colour for --resize fit (default 0,0,0)\n"
               "      --resample-space S  ycc (default): resample JPEGs on their stored YCbCr\n"
               "                          planes (faster; within a level of Pillow nearly\n"
               "                          everywhere); rgb: after an RGB decode, as Pillow\n"
               "                          does\n"
               "  -j, --threads N         decoding threads (default: all cores)\n"
               "      --shard-size BYTES  shard size limit, whole records (default 1G)\n"
               "      --records-per-shard N  records per shard (instead of --shard-size)\n"
               "      --on-error MODE     skip (default): report bad files and go on;\n"
               "                          fail: stop at the first bad file, keep nothing\n"
               "      --max-pixels N      refuse images larger than N pixels (default 100000000)\n"
               "      --compress SPEC     none (default), zstd[:LEVEL] for every field, or per\n"
               "                          field: image=none,label=zstd:9 (fields image, label,\n"
               "                          orig_size, source; LEVEL 1..19, default 3; format 1.1)\n"
               "      --block-size BYTES  uncompressed bytes per compressed block (default 1M)\n"
               "      --part K/N          pack only the K-th of N parts (K = 1..N) for a job array\n"
               "      --merge             write the manifest once every part is in OUTDIR\n"
               "      --force             replace a dataset or an unfinished pack in OUTDIR: the\n"
               "                          new one is built beside the old one (the disk must hold\n"
               "                          both) and replaces it only once complete; a failure\n"
               "                          leaves the old dataset as it was\n"
               "      --force-in-place    replace it removing the old dataset first (room for one\n"
               "                          dataset; a failure leaves neither)\n"
               "      --stats             say where the time went: per thread busy and\n"
               "                          waiting (input, window, pool, writer), the writer's\n"
               "                          time per image, CPU busy (in --json: \"stats\")\n"
               "      --json              print the result as one JSON object on stdout\n"
               "  -q, --quiet             no progress bar or summary\n"
               "  -h, --help              this help\n"
               "  -V, --version           version\n\n"
               "Records keep the listing order; the same input and flags give byte-identical\n"
               "shards whatever -j (a replace over a dataset may name them shard.gG-NNNNN.stk).\n"
               "Running the same command again after a crash keeps the shards already\n"
               "committed (verified) and finishes the rest.\n\n"
               "One writer per OUTDIR: while a pack (or part K, or a merge) writes into it,\n"
               "another is refused at once, naming the one that holds it (pid, host); parts\n"
               "of one job array run side by side. A lock left by a killed run is taken over.\n\n");
    fprintf(f, CLI_EXIT_HELP "3 packed, but some inputs were skipped (each is named on stderr and listed\n"
                             "in OUTDIR/skipped.tsv); a run that fails leaves nothing that looks like a\n"
                             "finished dataset.\n");
}

static const char *const FIELDS[4] = {"image", "label", "orig_size", "source"};

/* "none" / "zstd[:L]" (s[0..len)) into a level (0: none); false with a message. */
static bool parse_codec(const cli_args *a, const char *s, size_t len, int *level)
{
    if (len == 4 && !strncmp(s, "none", 4)) return *level = 0, true;
    char buf[32];
    snprintf(buf, sizeof buf, "%.*s", (int)len, s);
    if (len < 4 || strncmp(s, "zstd", 4) || (len > 4 && s[4] != ':') || len >= sizeof buf)
        return cli_bad_value(a, buf, "none or zstd[:LEVEL]");
    uint64_t v = 3;
    if (len > 4 && !cli_uint(a, buf + 5, 1, 19, &v)) return false;
    *level = (int)v;
    return true;
}

/* --compress none | zstd[:L] | field=codec,field=codec... */
static bool parse_compress(const cli_args *a, const char *s, int zstd[4])
{
    if (!strchr(s, '=')) {
        int l;
        if (!parse_codec(a, s, strlen(s), &l)) return false;
        for (int f = 0; f < 4; f++) zstd[f] = l;
        return true;
    }
    const char *all = s;
    while (*s) {
        const char *eq = strchr(s, '='), *end = strchr(s, ',');
        if (!end) end = s + strlen(s);
        if (!eq || eq > end) return cli_bad_value(a, all, "none, zstd[:LEVEL] or FIELD=CODEC,...");
        int f = 0;
        while (f < 4 && (strlen(FIELDS[f]) != (size_t)(eq - s) || strncmp(FIELDS[f], s, (size_t)(eq - s))))
            f++;
        if (f == 4)
            return cli_bad_value(a, all, "FIELD=CODEC,... with fields image, label, orig_size, source");
        if (!parse_codec(a, eq + 1, (size_t)(end - eq - 1), &zstd[f])) return false;
        s = *end ? end + 1 : end;
    }
    return true;
}

static bool parse_fill(const cli_args *a, const char *s, uint8_t fill[3])
{
    const char *p = s;
    for (int i = 0; i < 3; i++) {
        size_t len = strcspn(p, ",");
        char part[32];
        uint64_t v;
        if ((i < 2) != (p[len] == ',') || len >= sizeof part)
            return cli_bad_value(a, s, "R,G,B with each an integer from 0 to 255");
        memcpy(part, p, len);
        part[len] = 0;
        if (!cli_uint(a, part, 0, 255, &v)) return false;
        fill[i] = (uint8_t)v;
        p += len + 1;
    }
    return true;
}

static bool parse_mode(const char *s, pk_resize_mode *m)
{
    if (!strcmp(s, "shorter")) *m = PK_RESIZE_SHORTER;
    else if (!strcmp(s, "stretch")) *m = PK_RESIZE_STRETCH;
    else if (!strcmp(s, "fit")) *m = PK_RESIZE_FIT;
    else if (!strcmp(s, "keep")) *m = PK_RESIZE_KEEP;
    else return false;
    return true;
}

/* raw | jpeg[:Q] | original[:Q] */
static bool parse_image_format(const cli_args *a, const char *s, int *fmt, int *quality)
{
    static const char *const names[] = {"raw", "jpeg", "original"};
    for (int f = 0; f < 3; f++) {
        size_t n = strlen(names[f]);
        if (strncmp(s, names[f], n) || (s[n] && s[n] != ':') || (s[n] && f == PK_IMG_RAW)) continue;
        uint64_t q = 90;
        if (s[n] && !cli_uint(a, s + n + 1, 1, 100, &q)) return false;
        *fmt = f;
        *quality = (int)q;
        return true;
    }
    return cli_bad_value(a, s, "raw, jpeg[:Q] or original[:Q]");
}

/* The --resize keep bounds, once every option is read; false with a message. */
static bool settle_sides(const cli_args *a, pk_opts *o)
{
    pk_params *p = &o->img;
    if ((p->max_side || p->min_side) && !o->resize_set) p->mode = PK_RESIZE_KEEP;
    if (p->mode != PK_RESIZE_KEEP) {
        if (!p->max_side && !p->min_side) return true;
        cli_usage_error(a, "--max-side and --min-side go with --resize keep");
        return false;
    }
    if (!p->max_side && !p->min_side) {
        cli_usage_error(a, "--resize keep needs --max-side N or --min-side N");
        return false;
    }
    if (!p->max_side) p->max_side = p->min_side > PK_MAX_SIZE / 4 ? PK_MAX_SIZE : 4 * p->min_side;
    if (p->min_side > p->max_side) {
        cli_usage_error(a, "--min-side %u is larger than --max-side %u", p->min_side, p->max_side);
        return false;
    }
    p->size = p->max_side; /* the bound a stored image's sides keep to */
    return true;
}

/* No --part inside a Slurm array task: the task's part (parts.h). */
static int slurm_part(const cli_args *a, pk_opts *o)
{
    const char *id = getenv("SLURM_ARRAY_TASK_ID"), *min = getenv("SLURM_ARRAY_TASK_MIN");
    const char *count = getenv("SLURM_ARRAY_TASK_COUNT");
    char why[400];
    unsigned k, n;
    int rc = pk_part_slurm(id, min, count, getenv("SLURM_ARRAY_TASK_STEP"), getenv("SLURM_ARRAY_TASK_MAX"),
                           9999, &k, &n, why, sizeof why);
    if (rc < 0) return cli_usage_error(a, "%s", why);
    if (rc == 0) return 0;
    o->part = k, o->parts = n;
    snprintf(o->part_from, sizeof o->part_from,
             "SLURM_ARRAY_TASK_ID=%s SLURM_ARRAY_TASK_MIN=%s SLURM_ARRAY_TASK_COUNT=%s", id, min, count);
    if (!o->quiet) fprintf(stderr, "pack: part %u/%u from Slurm's %s\n", k, n, o->part_from);
    return 0;
}

static int parse(int argc, char **argv, pk_opts *o)
{
    static const struct option lo[] = {{"size", 1, 0, 's'},           {"resize", 1, 0, 'R'},
                                       {"fill", 1, 0, 'F'},           {"threads", 1, 0, 'j'},
                                       {"shard-size", 1, 0, 'B'},     {"records-per-shard", 1, 0, 'N'},
                                       {"on-error", 1, 0, 'E'},       {"max-pixels", 1, 0, 'P'},
                                       {"part", 1, 0, 'K'},           {"merge", 0, 0, 'M'},
                                       {"force", 0, 0, 'f'},          {"stats", 0, 0, 'T'},
                                       {"compress", 1, 0, 'Z'},       {"block-size", 1, 0, 'Q'},
                                       {"resample-space", 1, 0, 'Y'}, {"max-side", 1, 0, 'X'},
                                       {"min-side", 1, 0, 'W'},       {"image-format", 1, 0, 'I'},
                                       {"force-in-place", 0, 0, 'G'}, {"jpeg-baseline", 0, 0, 'J'},
                                       {"jpeg-restart", 1, 0, 'D'},   CLI_COMMON_OPTIONS};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (pk_opts){.img = {.size = 256, .mode = PK_RESIZE_SHORTER, .max_pixels = 100000000},
                   .quality = 90,
                   .jpeg_restart = 1,
                   .threads = ncpu > 0 ? (unsigned)ncpu : 1,
                   .part = 1,
                   .parts = 1,
                   .shard_size = (uint64_t)1 << 30};
    const cli_number num[] = {{'B', true, 1, UINT64_MAX, &o->shard_size},
                              {'N', false, 1, UINT64_MAX, &o->per_shard},
                              {'P', false, 1, UINT64_MAX, &o->img.max_pixels},
                              {'Q', true, 1, 1u << 29, &o->block_bytes},
                              {0, false, 0, 0, NULL}};
    const cli_flag flags[] = {
        {'M', &o->merge}, {'f', &o->force}, {'T', &o->stats}, {'J', &o->jpeg_baseline}, {0, NULL}};
    cli_args a = {.prog = "pack", .usage = usage, .longopts = lo, .numbers = num, .flags = flags};
    int c;
    uint64_t v, k, n;
    bool part_set = false, restart_set = false;
    while ((c = cli_getopt(&a, argc, argv, "s:j:" CLI_COMMON_SHORT)) != -1) {
        bool ok = true;
        switch (c) {
        case 's':
            ok = cli_uint(&a, optarg, 1, 16384, &v) && (o->img.size = (uint32_t)v);
            break;
        case 'R':
            ok = parse_mode(optarg, &o->img.mode) ||
                 cli_bad_value(&a, optarg, "shorter, stretch, fit or keep");
            o->resize_set = true;
            break;
        case 'X':
            ok = cli_uint(&a, optarg, 1, PK_MAX_SIZE, &v) && (o->img.max_side = (uint32_t)v);
            break;
        case 'W':
            ok = cli_uint(&a, optarg, 1, PK_MAX_SIZE, &v) && (o->img.min_side = (uint32_t)v);
            break;
        case 'G':
            o->force = o->force_in_place = true;
            break;
        case 'I':
            ok = parse_image_format(&a, optarg, &o->image_format, &o->quality);
            break;
        case 'D':
            ok = cli_uint(&a, optarg, 0, 65535, &v) && ((o->jpeg_restart = (unsigned)v), true);
            restart_set = true;
            break;
        case 'F':
            ok = parse_fill(&a, optarg, o->img.fill);
            break;
        case 'Y':
            ok = !strcmp(optarg, "ycc") || !strcmp(optarg, "rgb") || cli_bad_value(&a, optarg, "ycc or rgb");
            o->img.resample_rgb = !strcmp(optarg, "rgb");
            break;
        case 'j':
            ok = cli_uint(&a, optarg, 1, 1024, &v) && (o->threads = (unsigned)v);
            break;
        case 'E':
            ok = !strcmp(optarg, "skip") || !strcmp(optarg, "fail") ||
                 cli_bad_value(&a, optarg, "skip or fail");
            o->fail_fast = !strcmp(optarg, "fail");
            break;
        case 'K':
            ok = cli_fraction(&a, optarg, 9999, &k, &n);
            if (ok) o->part = (unsigned)k, o->parts = (unsigned)n, part_set = true;
            break;
        case 'Z':
            ok = parse_compress(&a, optarg, o->zstd);
            break;
        default:
            return CLI_EXIT_USAGE;
        }
        if (!ok) return CLI_EXIT_USAGE;
    }
    o->json = a.json, o->quiet = a.quiet;
    if (!cli_operands(&a, argc, o->merge ? 1 : 2, o->merge ? 1 : 2, o->merge ? "OUTDIR" : "INPUT OUTDIR"))
        return CLI_EXIT_USAGE;
    o->input = o->merge ? NULL : argv[optind];
    o->out = argv[argc - 1];
    if (!settle_sides(&a, o)) return CLI_EXIT_USAGE;
    if (!part_set && !o->merge && slurm_part(&a, o)) return CLI_EXIT_USAGE;
    if (o->jpeg_baseline && o->image_format != PK_IMG_ORIGINAL)
        return cli_usage_error(&a,
                               "--jpeg-baseline rewrites kept JPEG inputs: it needs --image-format original");
    if (restart_set && o->image_format == PK_IMG_RAW)
        return cli_usage_error(&a,
                               "--jpeg-restart is for JPEG values: it needs --image-format jpeg or original");
    if (o->image_format != PK_IMG_RAW && o->zstd[0])
        return cli_usage_error(&a, "the image is stored as JPEG: name the fields to compress "
                                   "(--compress label=zstd,...)");
    return CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
    pk_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    if (o.merge) return pk_run_merge(&o);
    return pk_run_pack(&o);
}
