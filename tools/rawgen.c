/* rawgen - write a synthetic raw image dataset: an ImageFolder tree of JPEG
 * and PNG files, for demos, tests and benchmarks of `pack`.
 *
 * OUTDIR/classNNN/img-NNNNNNNN.{jpg,png}: image i is in class i % classes.
 * Its content depends only on (seed, i): a smooth two-colour gradient under a
 * soft light, a low-frequency texture, a 4-pixel grain and a few soft-edged
 * shapes, computed on a grid of 4 x 4 pixel cells and interpolated, plus
 * sensor-like noise,
 * so that JPEG sizes are those of photos (~20-60 KB at 400 x 350), not of
 * white noise. Most files are JPEGs (baseline 4:2:0, about 10% each 4:4:4
 * and 4:2:2, quality 75..95); about one in 32 is an RGB PNG (PNG encoding
 * costs ~10x a JPEG's, so more would halve the rate).
 *
 * --variants adds one file of every JPEG/PNG flavour a decoder must handle
 * and one of each other format pack reads (rawgen_formats.c),
 * --broken the bad files a packer must skip with a reason (see usage()).
 * The same flags give byte-identical files (from the same build: the content
 * uses float arithmetic, with no contraction or reassociation).
 *
 * This file reads the command line and drives the run; rawgen.h says which
 * file does the rest. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rawgen.h"
#include "stoker/format.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: rawgen [OPTIONS] OUTDIR\n"
            "Write a synthetic raw image dataset into OUTDIR: an ImageFolder tree\n"
            "(OUTDIR/classNNN/img-NNNNNNNN.jpg or .png; image i is in class i %% N) of\n"
            "natural-looking JPEG and PNG images, deterministic from (seed, i).\n\n"
            "  -n, --images N        images to write (default 1000)\n"
            "      --classes N       class directories (default 10)\n"
            "      --seed S          content seed (default 0)\n"
            "      --min-side N      smallest image side in pixels (default 200)\n"
            "      --max-side N      largest image side in pixels (default 500); width and\n"
            "                        height are drawn separately (portrait, landscape, and\n"
            "                        some exactly square)\n"
            "      --variants        also write one file of each flavour, named\n"
            "                        variant-*: JPEG baseline 4:2:0, 4:2:2, 4:4:4,\n"
            "                        grayscale, progressive, CMYK (YCCK), restart markers\n"
            "                        with arithmetic coding and restart markers with Huffman\n"
            "                        coding (these two need " RG_CJPEG "; skipped, and said\n"
            "                        so, without it); PNG gray 8-bit, palette, RGB 16-bit,\n"
            "                        RGBA; lossy WebP, interlaced GIF, 24-bit BMP, LZW TIFF\n"
            "      --broken          also write files a packer must skip, named broken-*:\n"
            "                        an empty .jpg, truncated JPEGs (in the scan data and\n"
            "                        in the header) and PNG, random bytes\n"
            "                        named .jpg, a JPEG that ends after its headers,\n"
            "                        decompression bombs (small JPEG and PNG whose headers\n"
            "                        claim %ux%u pixels), a HEIF named .jpg, a text file,\n"
            "                        and WebP, GIF, BMP and TIFF files cut in half\n"
            "      --force           replace an earlier rawgen tree in OUTDIR\n"
            "      --json            print the result as one JSON object on stdout\n"
            "  -q, --quiet           no progress bar or summary\n"
            "  -h, --help            this help\n"
            "  -V, --version         version\n\n" CLI_EXIT_HELP,
            RG_BOMB_SIDE, RG_BOMB_SIDE);
}

static int parse(int argc, char **argv, rg_opts *o)
{
    static const struct option lo[] = {
        {"images", 1, 0, 'n'},   {"classes", 1, 0, 'c'},  {"seed", 1, 0, 'e'},
        {"min-side", 1, 0, 'a'}, {"max-side", 1, 0, 'b'}, {"variants", 0, 0, 'v'},
        {"broken", 0, 0, 'B'},   {"force", 0, 0, 'f'},    CLI_COMMON_OPTIONS};
    *o = (rg_opts){.images = 1000, .classes = 10, .min_side = 200, .max_side = 500};
    const cli_number num[] = {{'n', false, 0, 100000000, &o->images}, {'c', false, 1, 100000, &o->classes},
                              {'e', false, 0, UINT64_MAX, &o->seed},  {'a', false, 1, 16384, &o->min_side},
                              {'b', false, 1, 16384, &o->max_side},   {0, false, 0, 0, NULL}};
    const cli_flag flags[] = {{'v', &o->variants}, {'B', &o->broken}, {'f', &o->force}, {0, NULL}};
    cli_args a = {.prog = "rawgen", .usage = usage, .longopts = lo, .numbers = num, .flags = flags};
    /* the tables take every option: what comes back was refused, and said */
    if (cli_getopt(&a, argc, argv, "n:" CLI_COMMON_SHORT) != -1) return CLI_EXIT_USAGE;
    o->json = a.json, o->quiet = a.quiet;
    if (o->min_side > o->max_side)
        return cli_usage_error(&a, "--min-side %llu is larger than --max-side %llu",
                               (unsigned long long)o->min_side, (unsigned long long)o->max_side);
    if (!cli_operands(&a, argc, 1, 1, "one OUTDIR")) return CLI_EXIT_USAGE;
    o->out = argv[optind];
    return CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
    rg_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    signal(SIGPIPE, SIG_IGN); /* a dying cjpeg is an error, not our death */
    rg_run r;
    memset(&r, 0, sizeof r);
    r.o = &o;
    r.cwidth = 3;
    for (uint64_t c = o.classes - 1; c >= 1000; c /= 10) r.cwidth++;
    double t0 = cli_now();
    if (rg_prepare_outdir(&o)) return CLI_EXIT_FAIL;
    for (uint64_t c = 0; c < o.classes; c++) {
        char *d = rg_class_dir(&r, c), *p = NULL;
        if (!d || asprintf(&p, "%s/%s", o.out, d) < 0 || mkdir(p, 0755) != 0) {
            fprintf(stderr, "rawgen: %s: cannot create directory: %s\n", p ? p : o.out,
                    d ? strerror(errno) : "out of memory");
            free(d);
            free(p);
            return CLI_EXIT_FAIL;
        }
        free(d);
        free(p);
    }
    r.g.tj = tjInitCompress();
    r.g.jpg_cap = tjBufSize((int)o.max_side, (int)o.max_side, TJSAMP_444);
    r.g.jpg = tjAlloc((int)r.g.jpg_cap);
    if (!rg_make_noise(&r.g, o.seed, (uint32_t)o.max_side)) {
        fprintf(stderr, "rawgen: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    if (!r.g.tj || !r.g.jpg) {
        fprintf(stderr, "rawgen: cannot initialise TurboJPEG\n");
        return CLI_EXIT_FAIL;
    }
    uint64_t total = o.images + (o.variants ? RG_VARIANT_COUNT : 0) + (o.broken ? RG_BROKEN_COUNT : 0);
    cli_progress_start_units(&r.bar, "rawgen", "files", total, o.quiet || o.json);
    rc = 0;
    for (uint64_t i = 0; !rc && i < o.images; i++) rc = rg_write_image(&r, i);
    for (unsigned k = 0; !rc && o.variants && k < RG_VARIANT_COUNT; k++) rc = rg_write_variant(&r, k);
    for (unsigned k = 0; !rc && o.broken && k < RG_BROKEN_COUNT; k++) rc = rg_write_broken(&r, k);
    cli_progress_end(&r.bar);
    double el = cli_now() - t0;
    if (!rc && r.nskipped && !o.quiet)
        for (size_t k = 0; k < r.nskipped; k++)
            fprintf(stderr, "rawgen: " RG_CJPEG " not found: skipped variant %s\n", r.skipped[k]);
    if (!rc && o.json) {
        printf("{\"ok\": true, \"files\": %llu, \"images\": %llu, \"variants\": %zu, \"broken\": %zu, "
               "\"classes\": %llu, "
               "\"bytes\": %llu, \"seconds\": %.3f, \"files_per_s\": %.1f, \"output\": ",
               (unsigned long long)r.files, (unsigned long long)o.images, r.nvariants, r.nbroken,
               (unsigned long long)o.classes, (unsigned long long)r.bytes, el,
               el > 0 ? (double)r.files / el : 0.0);
        cli_json_string(stdout, o.out);
        const char *keys[2] = {"variant_files", "broken_files"};
        for (int kind = 0; kind < 2; kind++) {
            printf(", \"%s\": [", keys[kind]);
            bool first = true;
            for (size_t k = 0; k < r.nextra; k++) {
                const char *base = strrchr(r.extra[k], '/');
                if (strncmp(base ? base + 1 : r.extra[k], kind ? "broken-" : "variant-", kind ? 7 : 8))
                    continue;
                printf(first ? "" : ", ");
                cli_json_string(stdout, r.extra[k]);
                first = false;
            }
            printf("]");
        }
        printf(", \"skipped_variants\": [");
        for (size_t k = 0; k < r.nskipped; k++) {
            printf(k ? ", " : "");
            cli_json_string(stdout, r.skipped[k]);
        }
        printf("]}\n");
    } else if (!rc && !o.quiet)
        fprintf(stderr,
                "rawgen: wrote %llu files (%llu images, %zu variants, %zu broken) to %s: %.1f MB in %.2f s "
                "(%.0f files/s)\n",
                (unsigned long long)r.files, (unsigned long long)o.images, r.nvariants, r.nbroken, o.out,
                (double)r.bytes / 1e6, el, el > 0 ? (double)r.files / el : 0.0);
    for (size_t k = 0; k < r.nextra; k++) free(r.extra[k]);
    free(r.extra);
    free(r.g.rgb);
    free(r.g.aux);
    free(r.g.grid);
    free(r.g.hrows);
    free(r.g.frow);
    free(r.g.noise);
    tjFree(r.g.jpg);
    tjDestroy(r.g.tj);
    return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
