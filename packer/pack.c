/* pack - turn a raw image dataset into a verified stoker dataset.
 *
 * INPUT (an ImageFolder tree or a .csv/.tsv list) -> listing (fixed order)
 * -> worker threads decode + resize into a bounded ring of slots -> one
 * writer appends records in listing order into shards of a fixed record
 * count -> part record -> listing.tsv, skipped.tsv, manifest.json.
 * The output depends on the input and the flags only, never on -j. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "cli.h"
#include "image.h"
#include "listing.h"
#include "output.h"
#include "parts.h"
#include "pipeline.h"
#include "stoker/format.h"

enum { PACK_OK = 0, PACK_FAIL = 1, PACK_USAGE = 2, PACK_SKIPPED = 3 };
#define MAX_FILE_BYTES ((uint64_t)1 << 30)

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
               "                          JPEG input's own bytes where it needs no resize,\n"
               "                          others re-encoded at Q and counted (format 1.2)\n"
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
               "of one job array run side by side. A lock left by a killed run is taken over.\n\n"
               "Exit status: 0 every input packed; 1 error, or OUTDIR is held by another\n"
               "writer (nothing is left that looks like a finished dataset); 2 usage error;\n"
               "3 packed, but some inputs were skipped (each is named on stderr and listed\n"
               "in OUTDIR/skipped.tsv).\n");
}

enum { IMG_RAW = 0, IMG_JPEG = 1, IMG_ORIGINAL = 2 };

typedef struct {
    pk_params img;
    int image_format; /* IMG_*: how the image field stores its values */
    int quality;      /* JPEG quality for IMG_JPEG and re-encoded IMG_ORIGINAL inputs */
    bool resize_set;  /* --resize was given */
    unsigned threads, part, parts;
    uint64_t shard_size, per_shard;
    int zstd[4]; /* per field (image, label, orig_size, source): 0 raw, else the level */
    uint64_t block_bytes;
    bool fail_fast, merge, force, force_in_place, json, quiet, stats;
    const char *input, *out;
} opts;

static const char *const FIELDS[4] = {"image", "label", "orig_size", "source"};

/* "none" / "zstd[:L]" into a level (0: none). */
static bool parse_codec(const char *s, size_t len, int *level)
{
    unsigned v = 3;
    char tail;
    if (len == 4 && !strncmp(s, "none", 4)) return *level = 0, true;
    if (len < 4 || strncmp(s, "zstd", 4)) return false;
    if (len > 4) {
        char buf[16];
        if (s[4] != ':' || len - 5 >= sizeof buf) return false;
        memcpy(buf, s + 5, len - 5);
        buf[len - 5] = 0;
        if (sscanf(buf, "%u%c", &v, &tail) != 1 || v < 1 || v > 19) return false;
    }
    *level = (int)v;
    return true;
}

/* --compress none | zstd[:L] | field=codec,field=codec... */
static bool parse_compress(const char *s, int zstd[4])
{
    if (!strchr(s, '=')) {
        int l;
        if (!parse_codec(s, strlen(s), &l)) return false;
        for (int f = 0; f < 4; f++) zstd[f] = l;
        return true;
    }
    while (*s) {
        const char *eq = strchr(s, '='), *end = strchr(s, ',');
        if (!end) end = s + strlen(s);
        if (!eq || eq > end) return false;
        int f = 0;
        while (f < 4 && (strlen(FIELDS[f]) != (size_t)(eq - s) || strncmp(FIELDS[f], s, (size_t)(eq - s))))
            f++;
        if (f == 4 || !parse_codec(eq + 1, (size_t)(end - eq - 1), &zstd[f])) return false;
        s = *end ? end + 1 : end;
    }
    return true;
}

static bool parse_part(const char *s, unsigned *k, unsigned *n)
{
    char tail;
    return sscanf(s, "%u/%u%c", k, n, &tail) == 2 && *n >= 1 && *n <= 9999 && *k >= 1 && *k <= *n;
}

static bool parse_fill(const char *s, uint8_t fill[3])
{
    unsigned r, g, b;
    char tail;
    if (sscanf(s, "%u,%u,%u%c", &r, &g, &b, &tail) != 3 || r > 255 || g > 255 || b > 255) return false;
    fill[0] = (uint8_t)r, fill[1] = (uint8_t)g, fill[2] = (uint8_t)b;
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
static bool parse_image_format(const char *s, int *fmt, int *quality)
{
    static const char *const names[] = {"raw", "jpeg", "original"};
    for (int f = 0; f < 3; f++) {
        size_t n = strlen(names[f]);
        if (strncmp(s, names[f], n) || (s[n] && s[n] != ':') || (s[n] && f == IMG_RAW)) continue;
        unsigned q = 90;
        char tail;
        if (s[n] && (sscanf(s + n + 1, "%u%c", &q, &tail) != 1 || q < 1 || q > 100)) return false;
        *fmt = f;
        *quality = (int)q;
        return true;
    }
    return false;
}

/* The --resize keep bounds, once every option is read; false with a message. */
static bool settle_sides(opts *o)
{
    pk_params *p = &o->img;
    if ((p->max_side || p->min_side) && !o->resize_set) p->mode = PK_RESIZE_KEEP;
    if (p->mode != PK_RESIZE_KEEP) {
        if (!p->max_side && !p->min_side) return true;
        fprintf(stderr, "pack: --max-side and --min-side go with --resize keep (try --help)\n");
        return false;
    }
    if (!p->max_side && !p->min_side) {
        fprintf(stderr, "pack: --resize keep needs --max-side N or --min-side N (try --help)\n");
        return false;
    }
    if (!p->max_side) p->max_side = p->min_side > PK_MAX_SIZE / 4 ? PK_MAX_SIZE : 4 * p->min_side;
    if (p->min_side > p->max_side) {
        fprintf(stderr, "pack: --min-side %u is larger than --max-side %u\n", p->min_side, p->max_side);
        return false;
    }
    p->size = p->max_side; /* the bound a stored image's sides keep to */
    return true;
}

static int parse(int argc, char **argv, opts *o)
{
    // clang-format off
    static const struct option lo[] = {{"size", 1, 0, 's'},
                                       {"resize", 1, 0, 'R'},
                                       {"fill", 1, 0, 'F'},
                                       {"threads", 1, 0, 'j'},
                                       {"shard-size", 1, 0, 'B'},
                                       {"records-per-shard", 1, 0, 'N'},
                                       {"on-error", 1, 0, 'E'},
                                       {"max-pixels", 1, 0, 'P'},
                                       {"part", 1, 0, 'K'},
                                       {"merge", 0, 0, 'M'},
                                       {"force", 0, 0, 'f'},
                                       {"json", 0, 0, 'J'},
                                       {"stats", 0, 0, 'T'},
                                       {"quiet", 0, 0, 'q'},
                                       {"help", 0, 0, 'h'},
                                       {"version", 0, 0, 'V'},
                                       {"compress", 1, 0, 'Z'},
                                       {"block-size", 1, 0, 'Q'},
                                       {"resample-space", 1, 0, 'Y'},
                                       {"max-side", 1, 0, 'X'},
                                       {"min-side", 1, 0, 'W'},
                                       {"image-format", 1, 0, 'I'},
                                       {"force-in-place", 0, 0, 'G'},
                                       {0, 0, 0, 0}};
    // clang-format on
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (opts){.img = {.size = 256, .mode = PK_RESIZE_SHORTER, .max_pixels = 100000000},
                .quality = 90,
                .threads = ncpu > 0 ? (unsigned)ncpu : 1,
                .part = 1,
                .parts = 1,
                .shard_size = (uint64_t)1 << 30};
    int c, li = -1;
    uint64_t v;
    while ((c = getopt_long(argc, argv, "s:j:qhV", lo, &li)) != -1) {
        bool ok = true;
        switch (c) {
        case 's':
            ok = cli_parse_u64(optarg, &v) && v >= 1 && v <= 16384 && (o->img.size = (uint32_t)v);
            break;
        case 'R':
            ok = parse_mode(optarg, &o->img.mode);
            o->resize_set = true;
            break;
        case 'X':
            ok = cli_parse_u64(optarg, &v) && v >= 1 && v <= PK_MAX_SIZE && (o->img.max_side = (uint32_t)v);
            break;
        case 'W':
            ok = cli_parse_u64(optarg, &v) && v >= 1 && v <= PK_MAX_SIZE && (o->img.min_side = (uint32_t)v);
            break;
        case 'I':
            ok = parse_image_format(optarg, &o->image_format, &o->quality);
            break;
        case 'F':
            ok = parse_fill(optarg, o->img.fill);
            break;
        case 'Y':
            ok = !strcmp(optarg, "ycc") || !strcmp(optarg, "rgb");
            o->img.resample_rgb = !strcmp(optarg, "rgb");
            break;
        case 'j':
            ok = cli_parse_u64(optarg, &v) && v >= 1 && v <= 1024 && (o->threads = (unsigned)v);
            break;
        case 'B':
            ok = cli_parse_size(optarg, &o->shard_size) && o->shard_size > 0;
            break;
        case 'N':
            ok = cli_parse_u64(optarg, &o->per_shard) && o->per_shard > 0;
            break;
        case 'E':
            ok = !strcmp(optarg, "skip") || !strcmp(optarg, "fail");
            o->fail_fast = !strcmp(optarg, "fail");
            break;
        case 'P':
            ok = cli_parse_u64(optarg, &o->img.max_pixels) && o->img.max_pixels > 0;
            break;
        case 'K':
            ok = parse_part(optarg, &o->part, &o->parts);
            break;
        case 'M':
            o->merge = true;
            break;
        case 'Z':
            ok = parse_compress(optarg, o->zstd);
            break;
        case 'Q':
            ok =
                cli_parse_size(optarg, &o->block_bytes) && o->block_bytes > 0 && o->block_bytes <= (1u << 29);
            break;
        case 'f':
            o->force = true;
            break;
        case 'G':
            o->force = o->force_in_place = true;
            break;
        case 'J':
            o->json = true;
            break;
        case 'T':
            o->stats = true;
            break;
        case 'q':
            o->quiet = true;
            break;
        case 'h':
            usage(stdout);
            exit(PACK_OK);
        case 'V':
            printf("pack (stoker) %s, format %d.%d\n", STK_VERSION_STRING, STK_FORMAT_MAJOR,
                   STK_FORMAT_MINOR);
            exit(PACK_OK);
        default:
            return PACK_USAGE;
        }
        if (!ok) {
            fprintf(stderr, "pack: invalid value '%s' for --%s (try --help)\n", optarg,
                    li >= 0 ? lo[li].name : (c == 's' ? "size" : "threads"));
            return PACK_USAGE;
        }
        li = -1;
    }
    int want = o->merge ? 1 : 2;
    if (argc - optind != want) {
        fprintf(stderr, "pack: expected %s (try --help)\n", o->merge ? "OUTDIR" : "INPUT OUTDIR");
        return PACK_USAGE;
    }
    o->input = o->merge ? NULL : argv[optind];
    o->out = argv[argc - 1];
    if (!settle_sides(o)) return PACK_USAGE;
    if (o->image_format != IMG_RAW && o->zstd[0]) {
        fprintf(stderr, "pack: the image is stored as JPEG: name the fields to compress "
                        "(--compress label=zstd,...)\n");
        return PACK_USAGE;
    }
    return PACK_OK;
}

/* ------------------------------------------------------------ the run */

typedef struct {
    uint64_t index;
    char *reason;
} skip_t;

/* One worker's time inside produce and consume (pack --stats), seconds. */
typedef struct {
    double read;        /* produce: reading the input file (waiting for input) */
    double decode;      /* produce: decode, resize, encode */
    double hash;        /* produce: the record's checksum and block sums */
    double pool_wait;   /* consume: waiting for a free image buffer */
    double writer_wait; /* consume: waiting for the writer (its queue, or a shard's commit) */
    double append;      /* consume: the rest of handing the record to the writer */
    double consume;     /* consume: all of it (the ordered, serial part) */
} stage_t;

typedef struct {
    const opts *o;
    pk_listing L;
    stk_schema schema;
    pk_out out;
    skip_t *skips;
    size_t nskips, capskips;
    uint64_t packed, in_bytes, done;
    uint64_t kept, reencoded; /* --image-format original: inputs stored as they were, and not */
    cli_progress bar;
    stk_error err;
    int fatal;         /* a write failed: stop */
    bool failed_input; /* --on-error fail hit a bad file */
    pk_pool *pool;     /* image buffers: the pipeline's slots and those lent to the writer */
    /* pack --stats: per worker (pipeline and pack's own split), the run */
    unsigned nthreads;
    pk_thread_stats *tstats;
    stage_t *stages;
    double pipeline_s;
} run_t;

typedef struct {
    pk_decoder *dec;
    uint8_t *buf;
    size_t cap;
    tjhandle enc;        /* --image-format jpeg/original: the encoder */
    tjhandle hdr;        /* --image-format original: reads an input's JPEG header */
    unsigned char *jpeg; /* its output, tjBufSize of the largest image */
    unsigned long jcap;
    stage_t st; /* copied to run_t.stages[k] by worker_fini */
    stage_t *out;
} worker_t;

static bool variable_images(const opts *o)
{
    return o->img.mode == PK_RESIZE_KEEP || o->image_format != IMG_RAW;
}

static void worker_fini(void *state)
{
    worker_t *w = state;
    if (w->out) *w->out = w->st;
    pk_decoder_free(w->dec);
    if (w->enc) tjDestroy(w->enc);
    if (w->hdr) tjDestroy(w->hdr);
    tjFree(w->jpeg);
    free(w->buf);
    free(w);
}

static void *worker_init(void *user, unsigned k)
{
    run_t *r = user;
    worker_t *w = calloc(1, sizeof *w);
    if (!w || !(w->dec = pk_decoder_new())) {
        free(w);
        return NULL;
    }
    if (r->stages && k < r->nthreads) w->out = &r->stages[k];
    if (r->o->image_format != IMG_RAW) {
        w->jcap = tjBufSize((int)r->o->img.size, (int)r->o->img.size, TJSAMP_420);
        w->enc = tjInitCompress();
        w->jpeg = w->enc ? tjAlloc((int)w->jcap) : NULL;
        w->hdr = r->o->image_format == IMG_ORIGINAL ? tjInitDecompress() : NULL;
        if (!w->jpeg || (r->o->image_format == IMG_ORIGINAL && !w->hdr)) {
            worker_fini(w);
            return NULL;
        }
    }
    return w;
}

/* Read a whole file into w->buf; returns its size, or -1 with res set. */
static int64_t read_input(worker_t *w, const char *path, pk_result *res)
{
    /* An input that cannot be read (vanished, no permission, a FIFO) is a
     * bad input like a corrupt one: skipped with its reason, not fatal. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    const char *why = NULL;
    if (fd < 0 || fstat(fd, &st) != 0) why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) why = "not a regular file";
    if (why) {
        res->status = PK_E_CORRUPT;
        snprintf(res->msg, sizeof res->msg, "cannot read: %s", why);
        if (fd >= 0) close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size > MAX_FILE_BYTES) {
        close(fd);
        res->status = PK_E_TOO_LARGE;
        snprintf(res->msg, sizeof res->msg, "file of %lld bytes is larger than 1 GiB", (long long)st.st_size);
        return -1;
    }
    size_t n = (size_t)st.st_size, got = 0;
    if (n + 1 > w->cap) {
        uint8_t *b = realloc(w->buf, n + 1);
        if (!b) {
            close(fd);
            res->status = PK_E_NOMEM;
            snprintf(res->msg, sizeof res->msg, "out of memory reading %zu bytes", n);
            return -1;
        }
        w->buf = b;
        w->cap = n + 1;
    }
    while (got < n) {
        ssize_t r = read(fd, w->buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    int e = errno;
    close(fd);
    if (got != n) {
        res->status = PK_E_CORRUPT;
        snprintf(res->msg, sizeof res->msg, "cannot read: %s",
                 got < n && e ? strerror(e) : "file shrank while reading");
        return -1;
    }
    return (int64_t)n;
}

/* Start reading item i's file into the page cache (pipeline prefetch): an
 * open, an fadvise and a close, 2 us here against a decode's several
 * hundred. Failures are ignored: read_input reports them when the item is
 * produced. At most the first PREFETCH_BYTES: a rare huge file's decode
 * takes long enough to hide the rest, and two windows of them must not
 * flood the page cache. */
#define PREFETCH_BYTES ((off_t)16 << 20)
static void prefetch(void *user, uint64_t i)
{
    run_t *r = user;
    char *path = r->L.e[i].label < 0 ? NULL : pk_listing_path(&r->L, (size_t)i);
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY) : -1;
    free(path);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) /* not a device's readahead for an input refused anyway */
        (void)posix_fadvise(fd, 0, PREFETCH_BYTES, POSIX_FADV_WILLNEED);
    close(fd);
}

/* The largest image value: size x size x 3 pixels (in keep mode size is
 * --max-side), or a JPEG of them as large as TurboJPEG may make it. */
static size_t image_bytes(const opts *o)
{
    size_t px = (size_t)o->img.size * o->img.size * 3;
    if (o->image_format == IMG_RAW) return px;
    size_t j = tjBufSize((int)o->img.size, (int)o->img.size, TJSAMP_420);
    return j > px ? j : px;
}

/* A slot holds an image and, when the writer takes it by reference (whole
 * pages: --size a multiple of 64, STK_WRITER_LEND_ALIGN), its XXH3 block
 * sums (stk_hash_blocks): they go to the writer with the image and come
 * back to the pool with it. Other images are copied by the writer, which
 * hashes the copy; sums would be computed for nothing. */
_Static_assert(STK_WRITER_LEND_ALIGN % STK_HASH_BLOCK == 0, "a lent image is whole XXH3 blocks");
static bool lent_whole(const opts *o, size_t img)
{
    return !variable_images(o) && img % STK_WRITER_LEND_ALIGN == 0;
}

static uint64_t *block_sums(const opts *o, uint8_t *slot, size_t img)
{
    return lent_whole(o, img) ? (uint64_t *)(void *)(slot + img) : NULL;
}

static size_t slot_bytes(const opts *o)
{
    size_t img = image_bytes(o);
    return img + (lent_whole(o, img) ? img / STK_HASH_BLOCK * 8 * sizeof(uint64_t) : 0);
}

/* A JPEG input stored as it is (--image-format original): it needs no
 * resize or crop, decodes to three components (not greyscale or CMYK, which
 * the field's u8[*,*,3] could not hold), and fits a slot. */
static bool keep_original(const run_t *r, worker_t *w, const uint8_t *data, size_t n, const pk_result *res)
{
    pk_layout l;
    int jw, jh, ss, cs;
    if (pk_sniff(data, n) != PK_FMT_JPEG || n > image_bytes(r->o)) return false;
    pk_layout_compute(&r->o->img, res->w, res->h, &l);
    if (l.resized_w != res->w || l.resized_h != res->h || l.w != res->w || l.h != res->h || l.crop_x ||
        l.crop_y || l.pad_x || l.pad_y)
        return false;
    return tjDecompressHeader3(w->hdr, data, (unsigned long)n, &jw, &jh, &ss, &cs) == 0 &&
           (cs == TJCS_YCbCr || cs == TJCS_RGB) && (unsigned)jw == res->w && (unsigned)jh == res->h;
}

/* The image in slot (res->out_w x res->out_h RGB) as the image format wants
 * it: raw stays, JPEG is encoded (or, for a kept original, the input copied). */
static void encode_image(const run_t *r, worker_t *w, const uint8_t *data, size_t n, uint8_t *slot,
                         pk_result *res)
{
    res->out_bytes = (uint64_t)res->out_w * res->out_h * 3;
    if (r->o->image_format == IMG_RAW) return;
    if (r->o->image_format == IMG_ORIGINAL && keep_original(r, w, data, n, res)) {
        memcpy(slot, data, n);
        res->out_bytes = n;
        res->kept = 1;
        return;
    }
    unsigned long size = w->jcap;
    if (tjCompress2(w->enc, slot, (int)res->out_w, 0, (int)res->out_h, TJPF_RGB, &w->jpeg, &size, TJSAMP_420,
                    r->o->quality, TJFLAG_NOREALLOC) != 0) {
        res->status = PK_E_NOMEM;
        snprintf(res->msg, sizeof res->msg, "JPEG encoding failed: %s", tjGetErrorStr2(w->enc));
        return;
    }
    memcpy(slot, w->jpeg, size);
    res->out_bytes = size;
}

static void produce(void *user, void *state, uint64_t i, uint8_t *slot, pk_result *res)
{
    run_t *r = user;
    worker_t *w = state;
    if (r->L.e[i].label < 0) {
        res->status = PK_E_UNSUPPORTED;
        snprintf(res->msg, sizeof res->msg,
                 "not inside a class directory (ImageFolder wants ROOT/CLASS/FILE)");
        return;
    }
    double t0 = cli_now();
    char *path = pk_listing_path(&r->L, (size_t)i);
    int64_t n = path ? read_input(w, path, res) : -1;
    free(path);
    double t1 = cli_now();
    w->st.read += t1 - t0;
    if (n < 0) return;
    res->in_bytes = (uint64_t)n;
    res->status =
        pk_process(w->dec, w->buf, (size_t)n, &r->o->img, slot, &res->w, &res->h, res->msg, sizeof res->msg);
    if (variable_images(r->o)) {
        pk_layout l;
        if (res->status == PK_OK) {
            pk_layout_compute(&r->o->img, res->w, res->h, &l);
            res->out_w = l.w, res->out_h = l.h;
            encode_image(r, w, w->buf, (size_t)n, slot, res);
        }
        w->st.decode += cli_now() - t1;
        return; /* the writer hashes it as it copies it */
    }
    double t2 = cli_now();
    w->st.decode += t2 - t1;
    /* The record's checksum, here, while the image is in this core's cache
     * and in parallel, not on the one thread that puts records in order;
     * with it the block sums the writer's whole-file hash takes instead of
     * reading the image again from this core's cache (they live in the
     * slot, after the image: see slot_bytes). */
    size_t img = image_bytes(r->o);
    if (res->status == PK_OK) res->hash = stk_hash_blocks(slot, img, block_sums(r->o, slot, img));
    w->st.hash += cli_now() - t2;
}

static bool add_skip(run_t *r, uint64_t index, const char *reason)
{
    if (r->nskips == r->capskips) {
        size_t c = r->capskips ? 2 * r->capskips : 64;
        skip_t *s = realloc(r->skips, c * sizeof *s);
        if (!s) return false;
        r->skips = s;
        r->capskips = c;
    }
    r->skips[r->nskips].index = index;
    if (!(r->skips[r->nskips].reason = strdup(reason))) return false;
    r->nskips++;
    return true;
}

static void report_bad(run_t *r, uint64_t i, const char *msg)
{
    char *path = pk_listing_path(&r->L, (size_t)i);
    cli_progress_clear(&r->bar);
    fprintf(stderr, "pack: %s: %s%s\n", path ? path : r->L.e[i].path, msg,
            r->o->fail_fast ? " (--on-error fail: stopping)" : "");
    free(path);
}

/* The writer's waits so far, summed: its queue and the committer's. */
static double writer_waits(const pk_out *o) { return o->stats.io.queue_wait + o->stats.submit_wait; }

static int consume_one(run_t *r, worker_t *w, uint64_t i, uint8_t **slot, const pk_result *res);

/* The ordered part, on whichever worker finished item i: timed for --stats. */
static int consume(void *user, void *state, uint64_t i, uint8_t **slot, const pk_result *res)
{
    run_t *r = user;
    worker_t *w = state;
    double t0 = cli_now();
    int rc = consume_one(r, w, i, slot, res);
    w->st.consume += cli_now() - t0;
    return rc;
}

static int consume_one(run_t *r, worker_t *w, uint64_t i, uint8_t **slot, const pk_result *res)
{
    r->done++;
    r->in_bytes += res->in_bytes;
    if (res->status) {
        report_bad(r, i, res->msg);
        if (r->o->fail_fast) return r->failed_input = true, 1;
        if (!add_skip(r, i, res->msg))
            return r->fatal = STK_E_NOMEM, snprintf(r->err.msg, sizeof r->err.msg, "out of memory"), 1;
    } else {
        int64_t label = r->L.e[i].label;
        uint32_t size[2] = {res->w, res->h};
        uint64_t source = i;
        bool var = variable_images(r->o);
        size_t img = var ? (size_t)res->out_bytes : image_bytes(r->o);
        uint64_t dims[2] = {res->out_h, res->out_w};
        /* The image is lent to the writer, which writes it from this very
         * buffer and puts it back in the pool; the pipeline gets another. */
        uint8_t *px = *slot;
        double t0 = cli_now();
        *slot = pk_pool_get(r->pool);
        double t1 = cli_now(), waited = writer_waits(&r->out);
        stk_value v[4] = {{px, img}, {&label, 8}, {size, 8}, {&source, 8}};
        stk_prehash pre = {res->hash, block_sums(r->o, px, img)};
        r->fatal =
            pk_out_append(&r->out, v, var ? dims : NULL, var ? NULL : &pre, pk_pool_done, r->pool, &r->err);
        waited = writer_waits(&r->out) - waited;
        w->st.pool_wait += t1 - t0;
        w->st.writer_wait += waited;
        w->st.append += cli_now() - t1 - waited;
        if (r->fatal) return 1;
        r->packed++;
        if (r->o->image_format == IMG_ORIGINAL) ++*(res->kept ? &r->kept : &r->reencoded);
    }
    if (cli_progress_due(&r->bar, r->done)) {
        char extra[96];
        double el = cli_now() - r->bar.start;
        snprintf(extra, sizeof extra, "%.1f MB/s, %zu skipped", el > 0 ? (double)r->in_bytes / el / 1e6 : 0.0,
                 r->nskips);
        cli_progress_update(&r->bar, r->done, extra);
    }
    return 0;
}

/* ------------------------------------------------------------ outdir */

static int ensure_dir(const char *dir)
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

static bool exists(const char *dir, const char *name)
{
    char *p = NULL;
    bool e = asprintf(&p, "%s/%s", dir, name) >= 0 && access(p, F_OK) == 0;
    free(p);
    return e;
}

static void remove_in(const char *dir, const char *name)
{
    char *p = NULL;
    if (asprintf(&p, "%s/%s", dir, name) >= 0) unlink(p);
    free(p);
}

/* The inode of OUTDIR/manifest.json (0: none): a replace's commit renames a
 * new file over it, so an unchanged inode is the old dataset still there. */
static ino_t manifest_ino(const char *dir)
{
    char *p = NULL;
    struct stat st;
    ino_t ino = asprintf(&p, "%s/%s", dir, STK_MANIFEST_NAME) >= 0 && stat(p, &st) == 0 ? st.st_ino : 0;
    free(p);
    return ino;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Hold OUTDIR for this run: the whole of it, or part K of N shared with the
 * other parts; NULL (said on stderr) when another writer holds it. */
static stk_dir_lock *lock_out(const opts *o)
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
static void remove_part(const run_t *r, const opts *o)
{
    pk_out_remove_from(&r->out, 0);
    pk_part_remove_files(o->out, o->part, o->parts);
}

/* ------------------------------------------------------------ slices */

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

static int write_slice(const run_t *r, const char *suffix, uint64_t first, uint64_t end, bool skipped)
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

/* ------------------------------------------------------------ main flow */

static char *pack_params_json(const run_t *r, uint64_t per_shard)
{
    static const char *const modes[] = {"shorter", "stretch", "fit", "keep"}, *const formats[] = {
                                                                                  "raw", "jpeg", "original"};
    const pk_params *p = &r->o->img;
    char *s = NULL, extra[160] = "";
    if (variable_images(r->o)) /* only then: the parameters of a square raw pack read as before */
        snprintf(extra, sizeof extra,
                 "\"max_side\": %u, \"min_side\": %u, \"image_format\": \"%s\", \"quality\": %d, ",
                 p->mode == PK_RESIZE_KEEP ? p->max_side : 0, p->min_side, formats[r->o->image_format],
                 r->o->quality);
    if (asprintf(
            &s,
            "{\"tool\": \"pack\", \"version\": \"%s\", \"input\": \"%s\", \"size\": %u, \"resize\": \"%s\", "
            "\"resample_space\": \"%s\", %s"
            "\"fill\": [%u, %u, %u], \"max_pixels\": %llu, \"records_per_shard\": %llu, \"listed\": %zu, "
            "\"parts\": %u, \"compress\": [%d, %d, %d, %d], \"block_bytes\": %llu, "
            "\"listing\": \"listing.tsv\", \"skipped_list\": \"skipped.tsv\"}",
            STK_VERSION_STRING, r->L.kind == PK_LIST_IMAGEFOLDER ? "imagefolder" : "list", p->size,
            modes[p->mode], p->resample_rgb ? "rgb" : "ycc", extra, p->fill[0], p->fill[1], p->fill[2],
            (unsigned long long)p->max_pixels, (unsigned long long)per_shard, r->L.n, r->o->parts,
            r->o->zstd[0], r->o->zstd[1], r->o->zstd[2], r->o->zstd[3],
            (unsigned long long)r->o->block_bytes) < 0)
        return NULL;
    return s;
}

static uint64_t params_hash(const run_t *r, const char *pack_json)
{
    char *s = NULL;
    uint64_t h = 0;
    /* Not the part number: every part of one pack shares this (the merge
     * compares it); each part keeps its own state file. */
    if (asprintf(&s, "%016llx %s", (unsigned long long)pk_listing_hash(&r->L), pack_json) >= 0)
        h = stk_hash(s, strlen(s));
    free(s);
    return h ? h : 1;
}

/* The size of a shard of n records: exact for fixed-size records; with
 * images of their own size, as if every image were the largest possible
 * (so a shard never exceeds --shard-size; it is smaller by the ratio of the
 * mean image to the largest). 0 on overflow. */
static uint64_t shard_bytes(const opts *o, const stk_schema *s, uint64_t n)
{
    uint64_t sz = stk_shard_size_for(s, n), img = variable_images(o) ? image_bytes(o) : 0;
    return sz && img && n > (UINT64_MAX - sz) / img ? 0 : sz + n * img;
}

static uint64_t records_per_shard(const opts *o, const stk_schema *s)
{
    if (o->per_shard) return o->per_shard;
    uint64_t lo = 1, hi = 1;
    while (shard_bytes(o, s, hi * 2) && shard_bytes(o, s, hi * 2) <= o->shard_size &&
           hi < ((uint64_t)1 << 40))
        hi *= 2;
    if (shard_bytes(o, s, hi) > o->shard_size) return 1; /* one record is larger than the limit */
    uint64_t top = hi * 2;
    lo = hi;
    while (lo + 1 < top) { /* largest count that fits */
        uint64_t mid = lo + (top - lo) / 2, sz = shard_bytes(o, s, mid);
        if (sz && sz <= o->shard_size) lo = mid;
        else top = mid;
    }
    return lo;
}

static int make_schema(const opts *o, stk_schema *s)
{
    stk_error err;
    uint64_t img[3] = {o->img.size, o->img.size, 3}, any[3] = {0, 0, 3}, two[1] = {2};
    stk_schema_init(s);
    if ((variable_images(o) ? stk_schema_add_array(s, "image", STK_DT_U8, 3, any, &err)
                            : stk_schema_add_tensor(s, "image", STK_DT_U8, 3, img, &err)) ||
        (o->image_format != IMG_RAW && stk_schema_set_codec(s, 0, STK_CODEC_JPEG, &err)) ||
        stk_schema_add_tensor(s, "label", STK_DT_I64, 0, NULL, &err) ||
        stk_schema_add_tensor(s, "orig_size", STK_DT_U32, 1, two, &err) ||
        stk_schema_add_tensor(s, "source", STK_DT_U64, 0, NULL, &err)) {
        fprintf(stderr, "pack: %s\n", err.msg);
        return -1;
    }
    for (unsigned f = 0; f < 4; f++)
        if (o->zstd[f]) stk_schema_set_codec(s, f, STK_CODEC_ZSTD, NULL);
    return 0;
}

/* ------------------------------------------------------------ --stats */

/* One worker's figures, each moment of its life in one of busy and the waits. */
typedef struct {
    double wall, busy, input, window, pool, writer;
} thread_time;

static thread_time thread_time_of(const pk_thread_stats *t, const stage_t *g)
{
    thread_time x = {.wall = t->wall,
                     .input = g->read,
                     .window = t->window,
                     .pool = g->pool_wait,
                     .writer = g->writer_wait};
    x.busy = t->init + t->prefetch + (t->produce - g->read) + (g->consume - g->pool_wait - g->writer_wait);
    return x;
}

/* The ordered part's CPU time per image: consume less its waits. */
static double serial_us(const run_t *r)
{
    double s = 0;
    uint64_t n = 0;
    for (unsigned k = 0; k < r->nthreads; k++) {
        const stage_t *g = &r->stages[k];
        s += g->consume - g->pool_wait - g->writer_wait;
        n += r->tstats[k].consumed;
    }
    return n ? s / (double)n * 1e6 : 0;
}

static void cpu_times(double *user, double *sys)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6;
    *sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* "stats": {...}, inside pack's JSON result; wall is the run's. */
static void stats_json(const run_t *r, double wall)
{
    if (!r || !r->stages) return;
    double user, sys, us = serial_us(r);
    cpu_times(&user, &sys);
    const pk_out_stats *w = &r->out.stats;
    printf("\"stats\": {\"wall_s\": %.4f, \"pipeline_s\": %.4f, \"cpu_user_s\": %.3f, \"cpu_sys_s\": %.3f, "
           "\"cpu_busy_pct\": %.1f, \"threads\": [",
           wall, r->pipeline_s, user, sys, wall > 0 ? (user + sys) / wall * 100 : 0.0);
    for (unsigned k = 0; k < r->nthreads; k++) {
        const pk_thread_stats *t = &r->tstats[k];
        const stage_t *g = &r->stages[k];
        thread_time x = thread_time_of(t, g);
        printf("%s{\"wall_s\": %.4f, \"busy_s\": %.4f, \"input_wait_s\": %.4f, \"window_wait_s\": %.4f, "
               "\"pool_wait_s\": %.4f, \"writer_wait_s\": %.4f, \"decode_s\": %.4f, \"hash_s\": %.4f, "
               "\"ordered_s\": %.4f, \"produced\": %llu, \"consumed\": %llu}",
               k ? ", " : "", x.wall, x.busy, x.input, x.window, x.pool, x.writer, g->decode, g->hash,
               g->consume - g->pool_wait - g->writer_wait, (unsigned long long)t->produced,
               (unsigned long long)t->consumed);
    }
    printf("], \"ordered_us_per_image\": %.3f, \"ordered_saturates_images_per_s\": %.0f, "
           "\"writer\": {\"bytes\": %llu, \"writes\": %llu, \"write_s\": %.4f, \"hash_s\": %.4f, "
           "\"queue_wait_s\": %.4f, \"commit_wait_s\": %.4f, \"commit_s\": %.4f, \"fsync_s\": %.4f, "
           "\"flush_s\": %.4f, \"flushes\": %llu}}, ",
           us, us > 0 ? 1e6 / us : 0.0, (unsigned long long)w->io.bytes, (unsigned long long)w->io.writes,
           w->io.write, w->io.hash, w->io.queue_wait, w->submit_wait, w->commit, w->io.fsync, w->flush,
           (unsigned long long)w->flushes);
}

/* pack --stats without --json: a table on stderr. */
static void stats_text(const run_t *r, double wall)
{
    if (!r || !r->stages) return;
    double user, sys, us = serial_us(r);
    cpu_times(&user, &sys);
    fprintf(stderr,
            "pack: %u threads, %.2f s (pipeline %.2f s), CPU busy %.0f%% (user %.2f s + sys %.2f s)\n"
            "  thread     busy   input  window    pool  writer  images (s; input = reading files,\n"
            "                                                 window = the oldest image a window behind)\n",
            r->nthreads, wall, r->pipeline_s, wall > 0 ? (user + sys) / wall * 100 : 0.0, user, sys);
    for (unsigned k = 0; k < r->nthreads; k++) {
        thread_time x = thread_time_of(&r->tstats[k], &r->stages[k]);
        fprintf(stderr, "  %6u %8.2f %7.2f %7.2f %7.2f %7.2f %7llu\n", k, x.busy, x.input, x.window, x.pool,
                x.writer, (unsigned long long)r->tstats[k].produced);
    }
    const pk_out_stats *w = &r->out.stats;
    fprintf(
        stderr,
        "  ordered part (in order, one at a time): %.2f us/image of CPU, one core's worth at %.0f images/s\n"
        "  writer: %.2f GB in %llu writes: write %.2f s, hash %.2f s; commits %.2f s (fsync %.2f s),\n"
        "          background flushes %.2f s (%llu); waited for: queue %.2f s, commits %.2f s\n",
        us, us > 0 ? 1e6 / us : 0.0, (double)w->io.bytes / 1e9, (unsigned long long)w->io.writes, w->io.write,
        w->io.hash, w->commit, w->io.fsync, w->flush, (unsigned long long)w->flushes, w->io.queue_wait,
        w->submit_wait);
}

static int finish_merge(const opts *o, double t0, const run_t *r)
{
    pk_merge_result mr;
    stk_error err;
    if (pk_merge(o->out, r ? o->parts : 0, &mr, &err)) {
        fprintf(stderr, "pack: %s\n", err.msg);
        return PACK_FAIL;
    }
    double el = cli_now() - t0;
    bool orig = r && o->image_format == IMG_ORIGINAL; /* this run's inputs, kept or re-encoded */
    if (o->json) {
        printf("{\"ok\": true, \"merged\": true, \"packed\": %llu, \"skipped\": %llu, \"shards\": %zu, "
               "\"seconds\": %.3f, \"images_per_s\": %.1f, \"input_mb_per_s\": %.2f, ",
               (unsigned long long)mr.packed, (unsigned long long)mr.skipped, mr.nshards, el,
               r && el > 0 ? (double)r->done / el : 0.0, r && el > 0 ? (double)r->in_bytes / el / 1e6 : 0.0);
        stats_json(r, el);
        if (orig)
            printf("\"kept_original\": %llu, \"reencoded\": %llu, ", (unsigned long long)r->kept,
                   (unsigned long long)r->reencoded);
        printf("\"output\": ");
        cli_json_string(stdout, o->out);
        printf("}\n");
    } else if (!o->quiet) {
        fprintf(stderr, "pack: %s: %llu images packed into %zu shards, %llu skipped%s (%.1f s%s)\n", o->out,
                (unsigned long long)mr.packed, mr.nshards, (unsigned long long)mr.skipped,
                mr.skipped ? ", listed in skipped.tsv" : "", el, r ? "" : ", merge");
        if (orig)
            fprintf(stderr, "pack: %llu JPEG inputs stored as they were, %llu re-encoded at quality %d\n",
                    (unsigned long long)r->kept, (unsigned long long)r->reencoded, o->quality);
    }
    if (o->stats && !o->json) stats_text(r, el);
    return mr.skipped ? PACK_SKIPPED : PACK_OK;
}

/* Reproduce the reasons for inputs skipped before an interruption, and say
 * them again as a fresh run would. A gap that now decodes means the input
 * changed: start the part over. Returns 0, -1 on error, 1 when --on-error
 * fail meets one of them. */
static int redo_gaps(run_t *r, const uint64_t *gaps, size_t n, bool *restart)
{
    worker_t *w = worker_init(r, 0);
    uint8_t *slot = malloc(slot_bytes(r->o)); /* the image, and its block sums after it (produce) */
    int rc = w && slot ? 0 : -1;
    for (size_t k = 0; !rc && k < n && !*restart; k++) {
        pk_result res;
        memset(&res, 0, sizeof res);
        produce(r, w, gaps[k], slot, &res);
        if (res.status == 0) {
            *restart = true;
            break;
        }
        report_bad(r, gaps[k], res.msg);
        if (r->o->fail_fast) rc = 1;
        else if (!add_skip(r, gaps[k], res.msg)) rc = -1;
    }
    if (w) worker_fini(w);
    free(slot);
    return rc;
}

static void note_dropped(void *user, const char *why)
{
    const run_t *r = user;
    if (!r->o->quiet) fprintf(stderr, "pack: redoing a shard of the interrupted run: %s\n", why);
}

/* Decide between a fresh start, a resume and "already done". Returns -1 on
 * error, 0 to pack from *next, 1 when the part is already complete. */
static int prepare(run_t *r, uint64_t params, uint64_t first, uint64_t end, uint64_t *next)
{
    const opts *o = r->o;
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)params);
    if (exists(o->out, STK_MANIFEST_NAME)) {
        /* Killed between committing its manifest and removing its own part
         * record: the dataset of this very command is complete. "Already
         * complete": the merge redoes its last step (the same bytes) and
         * removes the bookkeeping, as the first run would have. */
        if (!o->force && o->parts == 1 && pk_part_params(o->out, 1, 1) == params) return 1;
        if (!o->force) {
            fprintf(stderr, "pack: %s already holds a dataset (manifest.json); use --force to replace it\n",
                    o->out);
            return -1;
        }
        if (o->force_in_place) {
            remove_in(o->out, STK_MANIFEST_NAME); /* first: the directory stops being a dataset */
            remove_in(o->out, "listing.tsv");
            remove_in(o->out, "skipped.tsv");
        } /* else the old dataset stays until the merge commits the new manifest */
    }
    uint64_t done_params = pk_part_params(o->out, o->part, o->parts);
    char *state = pk_part_file(o->out, o->part, o->parts, ".state"), *old = NULL;
    size_t len = 0;
    FILE *f = state ? fopen(state, "r") : NULL;
    if (f) {
        if (getline(&old, &len, f) < 0) {
            free(old);
            old = NULL;
        }
        fclose(f);
    }
    bool same = (done_params ? done_params == params : old && !strncmp(old, hex, 16));
    bool present = done_params || old;
    free(old);
    if (present && !same && !o->force) {
        fprintf(stderr,
                "pack: %s holds part %u/%u of a pack with other inputs or flags; use --force to start over\n",
                o->out, o->part, o->parts);
        free(state);
        return -1;
    }
    if (done_params && same) {
        free(state);
        return 1;
    }
    if (!same || o->force) remove_part(r, o);
    stk_error err;
    int rc = stk_file_commit(state, hex, 16, &err);
    free(state);
    if (rc) {
        fprintf(stderr, "pack: %s\n", err.msg);
        return -1;
    }
    uint64_t *gaps = NULL;
    size_t ngaps = 0;
    bool restart = false;
    if (pk_out_resume(&r->out, first, end, next, &gaps, &ngaps, note_dropped, r, &err)) {
        fprintf(stderr, "pack: %s\n", err.msg);
        return -1;
    }
    if (*next > first && !o->quiet)
        fprintf(stderr, "pack: resuming: kept %zu verified shards (%llu records), continuing at input %llu\n",
                r->out.nshards, (unsigned long long)pk_out_records(&r->out), (unsigned long long)*next);
    rc = redo_gaps(r, gaps, ngaps, &restart);
    free(gaps);
    if (rc == 1) { /* --on-error fail: the earlier run skipped a bad input */
        pk_out_abort(&r->out, true);
        remove_part(r, o);
        return -1;
    }
    if (rc == 0 && restart) { /* the input changed under the kept shards */
        pk_out_abort(&r->out, true);
        for (size_t i = 0; i < r->out.nshards; i++) free(r->out.shards[i].path);
        r->out.nshards = r->out.opened = 0;
        for (size_t i = 0; i < r->nskips; i++) free(r->skips[i].reason);
        r->nskips = 0;
        *next = first;
    }
    r->packed = pk_out_records(&r->out);
    return rc;
}

static int finish_part(run_t *r, uint64_t params, uint64_t first, uint64_t end, const char *pack_json)
{
    if (pk_out_flush(&r->out, &r->err)) {
        fprintf(stderr, "pack: %s\n", r->err.msg);
        return -1;
    }
    if (write_slice(r, ".listing.tsv", first, end, false) || write_slice(r, ".skipped.tsv", first, end, true))
        return -1;
    pk_part part = {.part = r->o->part,
                    .parts = r->o->parts,
                    .params = params,
                    .first = first,
                    .end = end,
                    .packed = r->packed,
                    .skipped = r->nskips,
                    .nclasses = r->L.nclasses,
                    .classes = r->L.classes,
                    .pack_json = pack_json,
                    .schema = &r->schema,
                    .shards = r->out.shards,
                    .nshards = r->out.nshards};
    if (pk_part_commit(r->o->out, &part, &r->err)) {
        fprintf(stderr, "pack: %s\n", r->err.msg);
        return -1;
    }
    return 0;
}

static int run_pack(const opts *o)
{
    run_t r;
    memset(&r, 0, sizeof r);
    r.o = o;
    double t0 = cli_now();
    char msg[STK_ERROR_MSG_MAX];
    /* An OUTDIR that exists is held before the (long) listing, so a second
     * writer is refused at once; a new one is made after it, so a mistyped
     * INPUT leaves no directory behind. Either way before OUTDIR is touched. */
    stk_dir_lock *lock = NULL;
    if (is_dir(o->out) && !(lock = lock_out(o))) return PACK_FAIL;
    if (pk_listing_load(o->input, &r.L, msg, sizeof msg)) {
        fprintf(stderr, "pack: %s\n", msg);
        stk_dir_lock_release(lock);
        return PACK_FAIL;
    }
    int status = PACK_FAIL;
    uint64_t first, end, next = 0, per_shard = 0, params = 0;
    char *pack_json = NULL, prefix[32];
    ino_t replacing = 0; /* --force over a dataset (its manifest's inode): new shard names beside it */
    pk_part_range(r.L.n, o->part, o->parts, &first, &end);
    if (o->parts == 1) snprintf(prefix, sizeof prefix, "shard");
    else snprintf(prefix, sizeof prefix, "part-%04u-of-%04u", o->part, o->parts);
    if (make_schema(o, &r.schema) || ensure_dir(o->out) || (!lock && !(lock = lock_out(o)))) goto out;
    replacing = o->force && !o->force_in_place ? manifest_ino(o->out) : 0;
    if (replacing && stk_dataset_new_prefix(o->out, prefix, prefix, sizeof prefix, &r.err)) {
        fprintf(stderr, "pack: %s\n", r.err.msg);
        goto out;
    }
    per_shard = records_per_shard(o, &r.schema);
    if (per_shard > r.L.n) per_shard = r.L.n; /* no shard can hold more; every part computes the same */
    if (!(pack_json = pack_params_json(&r, per_shard))) {
        fprintf(stderr, "pack: out of memory\n");
        goto out;
    }
    params = params_hash(&r, pack_json);
    if (pk_out_init(&r.out, o->out, prefix, &r.schema, per_shard, &r.err)) {
        fprintf(stderr, "pack: %s\n", r.err.msg);
        goto out;
    }
    for (unsigned f = 0; f < 4; f++) r.out.zlevel[f] = o->zstd[f];
    r.out.zblock = o->block_bytes;
    r.out.zthreads = o->threads; /* blocks compressed in parallel, placed in order: the same bytes */
    int prep = prepare(&r, params, first, end, &next);
    if (prep < 0) goto out;
    if (prep == 0) {
        cli_progress_start_units(&r.bar, "pack", "files", end - next, o->quiet || o->json);
        /* A few images per thread, twice as many when images are small (up
         * to 1 MiB: 4 MiB per thread at most): the workers stop only when
         * the oldest unconsumed image is a window behind, so one slow file
         * (a large progressive JPEG) does not idle the others. */
        size_t slot = slot_bytes(o);
        size_t window = (slot <= ((size_t)1 << 20) ? 8 : 4) * ((size_t)o->threads + 1);
        /* Beyond the window, what the writers hold: the open shard's and the
         * one being committed at a shard boundary (fewer would only make the
         * consumer wait for the disk, never deadlock). Images the writer
         * copies come back at once: one buffer is enough for them. */
        size_t img = image_bytes(o);
        size_t lent = lent_whole(o, img) ? (size_t)((STK_WRITER_LENT_MAX + img - 1) / img) + 1 : 1;
        r.pool = pk_pool_new(window + 2 * lent, slot);
        r.nthreads = o->threads;
        r.tstats = calloc(o->threads, sizeof *r.tstats);
        r.stages = calloc(o->threads, sizeof *r.stages);
        if (!r.tstats || !r.stages) { /* only the figures are lost */
            free(r.tstats), free(r.stages);
            r.tstats = NULL, r.stages = NULL;
        }
        pk_pipeline pl = {.threads = o->threads,
                          .stats = r.tstats,
                          .window = window,
                          .pool = r.pool,
                          .first = next,
                          .end = end,
                          .user = &r,
                          .thread_init = worker_init,
                          .thread_fini = worker_fini,
                          .produce = produce,
                          .consume = consume,
                          .prefetch = prefetch,
                          .ahead = 2 * window};
        double tp = cli_now();
        int prc = r.pool ? pk_pipeline_run(&pl) : -1;
        r.pipeline_s = cli_now() - tp;
        cli_progress_end(&r.bar);
        if (prc < 0) fprintf(stderr, "pack: cannot start %u threads or allocate the slots\n", o->threads);
        if (r.fatal) fprintf(stderr, "pack: %s\n", r.err.msg);
        if (r.failed_input) remove_part(&r, o);
        if (prc || r.fatal) {
            pk_out_abort(&r.out, r.failed_input);
            goto out;
        }
        if (finish_part(&r, params, first, end, pack_json)) goto out;
    }
    if (o->parts == 1) status = finish_merge(o, t0, &r);
    else {
        uint64_t packed = r.packed, skipped = r.nskips, nshards = r.out.nshards;
        if (prep == 1)
            pk_part_counts(o->out, o->part, o->parts, &packed, &skipped,
                           &nshards); /* as the first run said */
        status = skipped ? PACK_SKIPPED : PACK_OK;
        double el = cli_now() - t0;
        if (o->json) {
            printf(
                "{\"ok\": true, \"merged\": false, \"part\": [%u, %u], \"packed\": %llu, \"skipped\": %llu, "
                "\"shards\": %llu, ",
                o->part, o->parts, (unsigned long long)packed, (unsigned long long)skipped,
                (unsigned long long)nshards);
            stats_json(&r, el);
            printf("\"seconds\": %.3f}\n", el);
        } else if (o->stats) stats_text(&r, el);
        if (!o->json && !o->quiet)
            fprintf(
                stderr,
                prep == 1
                    ? "pack: part %u/%u was already complete; run `pack --merge %s` once all parts are done\n"
                    : "pack: part %u/%u done; run `pack --merge %s` once all parts are done\n",
                o->part, o->parts, o->out);
    }
out:
    if (status == PACK_FAIL && replacing && manifest_ino(o->out) == replacing) {
        if (r.out.dir) { /* this run's new shards and records: no manifest names them */
            pk_out_abort(&r.out, true);
            remove_part(&r, o);
        }
        fprintf(stderr, "pack: the old dataset in %s is intact\n", o->out);
    }
    for (size_t i = 0; i < r.nskips; i++) free(r.skips[i].reason);
    free(r.skips);
    free(pack_json);
    pk_out_free(&r.out); /* the writers have given every lent image back */
    free(r.tstats);
    free(r.stages);
    pk_pool_free(r.pool);
    pk_listing_free(&r.L);
    stk_dir_lock_release(lock); /* last: every file of this run is written or removed */
    return status;
}

/* pack --merge: the whole directory, held while the parts become a dataset. */
static int run_merge(const opts *o)
{
    stk_dir_lock *lock = NULL;
    if (is_dir(o->out) && !(lock = lock_out(o))) return PACK_FAIL; /* none: the merge says what is missing */
    ino_t old = manifest_ino(o->out);
    int rc = finish_merge(o, cli_now(), NULL);
    if (rc == PACK_FAIL && old && manifest_ino(o->out) == old && lock)
        fprintf(stderr, "pack: the old dataset in %s is intact\n", o->out);
    stk_dir_lock_release(lock);
    return rc;
}

int main(int argc, char **argv)
{
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    if (o.merge) return run_merge(&o);
    return run_pack(&o);
}
