/* shardread - read a dataset the way a trainer does and say how fast, and
 * whether a trainer would wait for its data.
 *
 * It drives libstoker's reader (stoker/reader.h) with the options a trainer
 * would pass, optionally sleeps a simulated step after each batch, and prints
 * throughput, the reader's statistics and its verdict. --dump-order prints
 * the records of every batch so orders can be checked from outside;
 * --stop-after/--state-out/--state-in exercise resume across processes. */
#define _GNU_SOURCE
#include "cli.h"
#include "sweep.h"

#include <errno.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mixspec.h"
#include "stoker/reader.h"

/* A reader, dataset or state that could not be opened: the options' fault
 * (a --fields name the dataset lacks, settings over --memory-budget) is a
 * usage error, anything else (missing, unreadable, corrupt) the input's. */
static int open_status(int code) { return code == STK_E_ARG ? CLI_EXIT_USAGE : CLI_EXIT_FAIL; }

static void usage(FILE *f)
{
    fprintf(f, "Usage: shardread [OPTIONS] DATASET\n"
               "       shardread [OPTIONS] --mix SOURCES\n"
               "Read a stoker dataset (or a mixture of datasets) as a trainer would; print\n"
               "throughput, the reader's statistics and whether a trainer would be input-bound.\n\n"
               "      --mix SOURCES       read several datasets as one stream (spec/ORDERS.md,\n"
               "                          \"Mixtures\"): PATH:SPEC,PATH:SPEC,... where SPEC is\n"
               "                          a weight (0.7), weight=W, repeat=R (passes per epoch),\n"
               "                          choose=N (records per epoch), and may add\n"
               "                          :order=ORDER; or a JSON file (NAME.json):\n"
               "                          {\"sources\":[{\"path\":\"a\",\"weight\":0.7},...],\n"
               "                          \"epoch_size\":N}, paths relative to the file\n"
               "      --epoch-size N      a weighted mixture: records per epoch (default: the\n"
               "                          sum of the sources' records)\n"
               "      --reweight          with --state-in: a mixture's state whose sources are the\n"
               "                          same datasets with other weights goes on at its\n"
               "                          position with the new weights\n"
               "  -b, --batch-size N      records per batch on this rank (default 256)\n"
               "      --order ORDER       sequential (default), shuffle or quasi\n"
               "      --seed S            seed of the shuffled orders (default 0)\n"
               "  -e, --epochs E          epochs to read (default 1)\n"
               "      --rank R            this rank (default: $RANK, $SLURM_PROCID, 0)\n"
               "      --world-size W      ranks (default: $WORLD_SIZE, $SLURM_NTASKS, 1)\n"
               "  -j, --threads T         worker threads (default: cores, at most 8)\n"
               "  -p, --prefetch D        batches prepared ahead (default 2 x threads)\n"
               "      --drop-last         same as --tail drop\n"
               "      --tail POLICY       pad (default), drop or partial: the last global\n"
               "                          batch of an epoch (spec/ORDERS.md)\n"
               "  -f, --fields LIST       comma-separated fields to read (default all)\n"
               "      --verify MODE       off (default), once or always: check record\n"
               "                          checksums on read\n"
               "      --memory-budget SIZE  refuse settings whose slots exceed SIZE\n"
               "      --quasi-block SIZE  quasi: bytes of consecutive records per block (4M)\n"
               "      --quasi-window N    quasi: blocks mixed together (64)\n"
               "      --io MODE           auto (default), mmap or direct: how records reach\n"
               "                          the batches (direct: asynchronous O_DIRECT reads,\n"
               "                          for larger-than-RAM data or one pass over cold\n"
               "                          data; see README)\n"
               "      --io-depth N        direct: reads in flight per worker queue (default 32)\n"
               "      --tuning MODE       on (default: $STOKER_TUNING, else on) or off: turn\n"
               "                          threads, prefetch and io-depth while reading (the\n"
               "                          values given are where it starts)\n"
               "      --pin LIST          knobs the tuner leaves as given: threads, prefetch,\n"
               "                          io-depth (comma-separated)\n"
               "      --threads-max N     most worker threads the tuner may run (default: the\n"
               "                          CPU budget rounded up)\n"
               "      --cpu-budget CORES  cores the workers may keep busy (default: measured:\n"
               "                          this rank's cores minus the rest of the process's)\n"
               "      --cache-dir DIR     a remote dataset (s3://, https://): the node cache of\n"
               "                          fetched bytes, shared by the node's processes\n"
               "      --cache-limit SIZE  a remote dataset: bytes the cache may hold\n"
               "      --trace PATH        write a timeline of the reader to PATH (Chrome\n"
               "                          trace-event JSON: ui.perfetto.dev, chrome://tracing)\n"
               "      --metrics           print the statistics as Prometheus text at the end\n"
               "      --device DEV        none (default: host batches), host (the host\n"
               "                          backend of the device protocol) or cuda[:N]\n"
               "      --fallback          with --device cuda: use host batches when no\n"
               "                          device is usable instead of failing\n"
               "      --transform T       device-side image transform: imagenet-train[:SIZE]\n"
               "                          (random-resized crop + flip) or imagenet-eval[:SIZE]\n"
               "                          (centre crop), f32 NCHW, normalised (SIZE 224)\n"
               "      --crop C            the crop alone, u8 NHWC: random:SIZE (RandomResized-\n"
               "                          Crop + flip) or center:SIZE (Resize(SIZE / 0.875) +\n"
               "                          CenterCrop); images of their own size (pack\n"
               "                          --max-side) are cropped on the worker threads\n"
               "      --step-ms X         simulate a training step of X ms after each batch\n"
               "      --step-busy         ... as a busy loop instead of a sleep\n"
               "      --touch             read every byte of each batch (a consumer's work)\n"
               "      --dump-order        print each batch's global record indices, one\n"
               "                          line per batch (the summary goes to stderr)\n"
               "      --stop-after N      stop after N batches\n"
               "      --warmup N          leave the first N batches out of the statistics\n"
               "                          (first touch of fresh buffers; the reader's ramp)\n"
               "      --state-out FILE    save the reader's state at the end (resume point)\n"
               "      --state-in FILE     start from a saved state\n"
               "      --json              print the result as one JSON object (last line)\n"
               "      --sweep             measure a grid of settings instead (a table, the knee:\n"
               "                          the cheapest setting within 5%% of the best; tuning\n"
               "                          off at every point)\n"
               "      --sweep-threads L   thread counts (default 1,2,4,... up to 2 x cores)\n"
               "      --sweep-prefetch L  prefetch depths (default 1,2,4,8)\n"
               "      --sweep-batch L     batch sizes (default: --batch-size)\n"
               "      --sweep-io L        read paths: mmap,direct (default: --io)\n"
               "      --sweep-io-depth L  direct: reads in flight per thread (default: --io-depth)\n"
               "      --sweep-drop-cache  drop the page cache before each point (root): the\n"
               "                          cold-storage sweep\n"
               "      --sweep-seconds S   time per point (default 1)\n"
               "      --csv FILE          write the sweep as CSV (header, one row per point)\n"
               "      --plot FILE         write the sweep as an SVG chart\n"
               "  -q, --quiet             no progress bar or summary\n"
               "  -h, --help              this help\n"
               "  -V, --version           version\n\n" CLI_EXIT_HELP);
}

typedef struct {
    stk_reader_options ro;
    stk_transform xf;
    uint64_t epochs, stop_after, step_us, warmup;
    int step_busy, touch, dump, json, quiet, reweight, metrics;
    const char *state_in, *state_out, *path;
    mix_spec mix; /* mix.n > 0: --mix */
    int sweep;
    sweep_opts so;
} opts;

static int parse_enum(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

static const char *const ORDERS[] = {"sequential", "shuffle", "quasi"};
static const char *const TAILS[] = {"pad", "drop", "partial"};
static const char *const VERIFY[] = {"off", "once", "always"};
static const char *const IO_MODES[] = {"auto", "mmap", "direct"};

static int parse_args(int argc, char **argv, opts *o)
{
    enum {
        O_RANK = 256,
        O_WORLD,
        O_DROP,
        O_TAIL,
        O_VERIFY,
        O_BUDGET,
        O_QBLOCK,
        O_QWIN,
        O_IO,
        O_IO_DEPTH,
        O_SW_IO,
        O_SW_DEPTH,
        O_SW_DROP,
        O_STEP,
        O_BUSY,
        O_TOUCH,
        O_DUMP,
        O_STOP,
        O_WARMUP,
        O_SOUT,
        O_SIN,
        O_DEVICE,
        O_FALLBACK,
        O_XFORM,
        O_CROP,
        O_SWEEP,
        O_SW_T,
        O_SW_P,
        O_SW_B,
        O_SW_S,
        O_CSV,
        O_PLOT,
        O_MIX,
        O_EPOCH_SIZE,
        O_REWEIGHT,
        O_ORDER,
        O_SEED,
        O_CACHE_DIR,
        O_CACHE_LIMIT,
        O_TRACE,
        O_METRICS,
        O_TUNING,
        O_PIN,
        O_THREADS_MAX,
        O_CPU_BUDGET
    };
    static const struct option lo[] = {{"batch-size", 1, 0, 'b'},
                                       {"order", 1, 0, O_ORDER},
                                       {"seed", 1, 0, O_SEED},
                                       {"epochs", 1, 0, 'e'},
                                       {"rank", 1, 0, O_RANK},
                                       {"world-size", 1, 0, O_WORLD},
                                       {"threads", 1, 0, 'j'},
                                       {"prefetch", 1, 0, 'p'},
                                       {"drop-last", 0, 0, O_DROP},
                                       {"tail", 1, 0, O_TAIL},
                                       {"fields", 1, 0, 'f'},
                                       {"verify", 1, 0, O_VERIFY},
                                       {"memory-budget", 1, 0, O_BUDGET},
                                       {"quasi-block", 1, 0, O_QBLOCK},
                                       {"quasi-window", 1, 0, O_QWIN},
                                       {"io", 1, 0, O_IO},
                                       {"io-depth", 1, 0, O_IO_DEPTH},
                                       {"sweep-io", 1, 0, O_SW_IO},
                                       {"sweep-io-depth", 1, 0, O_SW_DEPTH},
                                       {"sweep-drop-cache", 0, 0, O_SW_DROP},
                                       {"step-ms", 1, 0, O_STEP},
                                       {"step-busy", 0, 0, O_BUSY},
                                       {"touch", 0, 0, O_TOUCH},
                                       {"dump-order", 0, 0, O_DUMP},
                                       {"stop-after", 1, 0, O_STOP},
                                       {"warmup", 1, 0, O_WARMUP},
                                       {"state-out", 1, 0, O_SOUT},
                                       {"state-in", 1, 0, O_SIN},
                                       {"device", 1, 0, O_DEVICE},
                                       {"fallback", 0, 0, O_FALLBACK},
                                       {"transform", 1, 0, O_XFORM},
                                       {"crop", 1, 0, O_CROP},
                                       {"sweep", 0, 0, O_SWEEP},
                                       {"sweep-threads", 1, 0, O_SW_T},
                                       {"sweep-prefetch", 1, 0, O_SW_P},
                                       {"sweep-batch", 1, 0, O_SW_B},
                                       {"sweep-seconds", 1, 0, O_SW_S},
                                       {"csv", 1, 0, O_CSV},
                                       {"plot", 1, 0, O_PLOT},
                                       {"mix", 1, 0, O_MIX},
                                       {"epoch-size", 1, 0, O_EPOCH_SIZE},
                                       {"reweight", 0, 0, O_REWEIGHT},
                                       {"cache-dir", 1, 0, O_CACHE_DIR},
                                       {"cache-limit", 1, 0, O_CACHE_LIMIT},
                                       {"trace", 1, 0, O_TRACE},
                                       {"metrics", 0, 0, O_METRICS},
                                       {"tuning", 1, 0, O_TUNING},
                                       {"pin", 1, 0, O_PIN},
                                       {"threads-max", 1, 0, O_THREADS_MAX},
                                       {"cpu-budget", 1, 0, O_CPU_BUDGET},
                                       CLI_COMMON_OPTIONS};
    memset(o, 0, sizeof *o);
    stk_reader_options_init(&o->ro);
    o->ro.batch_size = 256;
    o->epochs = 1;
    const cli_number num[] = {{O_SEED, false, 0, UINT64_MAX, &o->ro.seed},
                              {'e', false, 1, UINT64_MAX, &o->epochs},
                              {O_WARMUP, false, 0, UINT64_MAX, &o->warmup},
                              {O_STOP, false, 1, UINT64_MAX, &o->stop_after},
                              {O_EPOCH_SIZE, false, 1, UINT64_MAX, &o->ro.epoch_size},
                              {O_BUDGET, true, 0, UINT64_MAX, &o->ro.memory_budget},
                              {O_CACHE_LIMIT, true, 1, UINT64_MAX, &o->ro.cache_limit},
                              {O_QBLOCK, true, 1, UINT64_MAX, &o->ro.quasi_block_bytes},
                              {0, false, 0, 0, NULL}};
    cli_args a = {.prog = "shardread", .usage = usage, .longopts = lo, .numbers = num};
    int c;
    uint64_t v;
    double d;
    while ((c = cli_getopt(&a, argc, argv, "b:e:j:p:f:" CLI_COMMON_SHORT)) != -1) {
        switch (c) {
        case 'b':
            if (!cli_uint(&a, optarg, 1, UINT32_MAX, &v)) return CLI_EXIT_USAGE;
            o->ro.batch_size = (uint32_t)v;
            break;
        case O_ORDER:
            if ((o->ro.order = parse_enum(optarg, ORDERS, 3)) < 0)
                return cli_bad_value(&a, optarg, "sequential, shuffle or quasi"), CLI_EXIT_USAGE;
            break;
        case O_RANK:
            if (!cli_uint(&a, optarg, 0, 1 << 24, &v)) return CLI_EXIT_USAGE;
            o->ro.rank = (int)v;
            break;
        case O_WORLD:
            if (!cli_uint(&a, optarg, 1, 1 << 24, &v)) return CLI_EXIT_USAGE;
            o->ro.world_size = (int)v;
            break;
        case 'j':
            if (!cli_uint(&a, optarg, 1, 256, &v)) return CLI_EXIT_USAGE;
            o->ro.threads = (unsigned)v;
            break;
        case 'p':
            if (!cli_uint(&a, optarg, 1, 4096, &v)) return CLI_EXIT_USAGE;
            o->ro.prefetch = (unsigned)v;
            break;
        case O_DROP:
            o->ro.tail = STK_TAIL_DROP;
            break;
        case O_TAIL:
            if ((o->ro.tail = parse_enum(optarg, TAILS, 3)) < 0)
                return cli_bad_value(&a, optarg, "pad, drop or partial"), CLI_EXIT_USAGE;
            break;
        case 'f':
            o->ro.fields = optarg;
            break;
        case O_VERIFY:
            if ((o->ro.verify = parse_enum(optarg, VERIFY, 3)) < 0)
                return cli_bad_value(&a, optarg, "off, once or always"), CLI_EXIT_USAGE;
            break;
        case O_IO:
            if ((o->ro.io = parse_enum(optarg, IO_MODES, 3)) < 0)
                return cli_bad_value(&a, optarg, "auto, mmap or direct"), CLI_EXIT_USAGE;
            break;
        case O_IO_DEPTH:
            if (!cli_uint(&a, optarg, 1, 1024, &v)) return CLI_EXIT_USAGE;
            o->ro.io_depth = (unsigned)v;
            break;
        case O_TRACE:
            o->ro.trace = optarg;
            break;
        case O_METRICS:
            o->metrics = 1;
            break;
        case O_TUNING:
            if (strcmp(optarg, "on") && strcmp(optarg, "off"))
                return cli_bad_value(&a, optarg, "on or off"), CLI_EXIT_USAGE;
            o->ro.tuning = strcmp(optarg, "on") ? STK_TUNING_OFF : STK_TUNING_ON;
            break;
        case O_PIN: {
            static const char *const KNOBS[] = {"threads", "prefetch", "io-depth"};
            char buf[64];
            snprintf(buf, sizeof buf, "%s", optarg);
            o->ro.tune_pin = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int k = parse_enum(t, KNOBS, 3);
                if (k < 0)
                    return cli_bad_value(&a, optarg, "a list of threads, prefetch, io-depth"), CLI_EXIT_USAGE;
                o->ro.tune_pin |= 1u << k; /* STK_PIN_THREADS, _PREFETCH, _IO_DEPTH */
            }
            if (!o->ro.tune_pin)
                return cli_bad_value(&a, optarg, "a list of threads, prefetch, io-depth"), CLI_EXIT_USAGE;
            break;
        }
        case O_THREADS_MAX:
            if (!cli_uint(&a, optarg, 1, 256, &v)) return CLI_EXIT_USAGE;
            o->ro.threads_max = (unsigned)v;
            break;
        case O_CPU_BUDGET:
            if (!cli_real(&a, optarg, 0.01, 65536, &d)) return CLI_EXIT_USAGE;
            o->ro.cpu_budget = d;
            break;
        case O_SW_IO: {
            char buf[64];
            snprintf(buf, sizeof buf, "%s", optarg);
            o->so.nio = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int m = parse_enum(t, IO_MODES, 3);
                if (m < 0 || o->so.nio == 3)
                    return cli_bad_value(&a, optarg, "a list of auto, mmap, direct"), CLI_EXIT_USAGE;
                o->so.io[o->so.nio++] = m;
            }
            if (!o->so.nio) return cli_bad_value(&a, optarg, "a list of auto, mmap, direct"), CLI_EXIT_USAGE;
            break;
        }
        case O_SW_DEPTH:
            if (!(o->so.ndepth = sweep_parse_list(optarg, o->so.io_depth)))
                return cli_bad_value(&a, optarg, "a list of integers from 1 to 1024"), CLI_EXIT_USAGE;
            for (unsigned i = 0; i < o->so.ndepth; i++)
                if (o->so.io_depth[i] > 1024)
                    return cli_bad_value(&a, optarg, "a list of integers from 1 to 1024"), CLI_EXIT_USAGE;
            break;
        case O_SW_DROP:
            o->so.drop_cache = 1;
            break;
        case O_QWIN:
            if (!cli_uint(&a, optarg, 1, UINT32_MAX, &v)) return CLI_EXIT_USAGE;
            o->ro.quasi_window = (uint32_t)v;
            break;
        case O_STEP:
            if (!cli_real(&a, optarg, 0, 1e6, &d)) return CLI_EXIT_USAGE;
            o->step_us = (uint64_t)(d * 1000 + 0.5);
            break;
        case O_BUSY:
            o->step_busy = 1;
            break;
        case O_TOUCH:
            o->touch = 1;
            break;
        case O_DUMP:
            o->dump = 1;
            break;
        case O_SOUT:
            o->state_out = optarg;
            break;
        case O_SIN:
            o->state_in = optarg;
            break;
        case O_DEVICE:
            if (!strcmp(optarg, "none")) o->ro.device = STK_DEVICE_NONE;
            else if (!strcmp(optarg, "host")) o->ro.device = STK_DEVICE_HOST;
            else if (!strncmp(optarg, "cuda", 4) && (!optarg[4] || optarg[4] == ':')) {
                if (optarg[4] && !cli_uint(&a, optarg + 5, 0, 1023, &v)) return CLI_EXIT_USAGE;
                o->ro.device = STK_DEVICE_CUDA;
                o->ro.device_index = optarg[4] ? (int)v : 0;
            } else return cli_bad_value(&a, optarg, "none, host or cuda[:N]"), CLI_EXIT_USAGE;
            break;
        case O_FALLBACK:
            o->ro.device_fallback = 1;
            break;
        case O_SWEEP:
            o->sweep = 1;
            break;
        case O_SW_T:
            if (!(o->so.nthreads = sweep_parse_list(optarg, o->so.threads)))
                return cli_bad_value(&a, optarg, "a list of integers from 1 to 1048576"), CLI_EXIT_USAGE;
            break;
        case O_SW_P:
            if (!(o->so.nprefetch = sweep_parse_list(optarg, o->so.prefetch)))
                return cli_bad_value(&a, optarg, "a list of integers from 1 to 1048576"), CLI_EXIT_USAGE;
            break;
        case O_SW_B:
            if (!(o->so.nbatch = sweep_parse_list(optarg, o->so.batch)))
                return cli_bad_value(&a, optarg, "a list of integers from 1 to 1048576"), CLI_EXIT_USAGE;
            break;
        case O_SW_S:
            if (!cli_real(&a, optarg, 0.001, 3600, &d)) return CLI_EXIT_USAGE;
            o->so.seconds = d;
            break;
        case O_CSV:
            o->so.csv = optarg;
            break;
        case O_PLOT:
            o->so.plot = optarg;
            break;
        case O_MIX: {
            char msg[512];
            mix_spec_free(&o->mix);
            if (mix_spec_parse(optarg, &o->mix, msg, sizeof msg)) {
                fprintf(stderr, "shardread: --mix: %s\n", msg);
                return CLI_EXIT_USAGE;
            }
            break;
        }
        case O_CACHE_DIR:
            o->ro.cache_dir = optarg;
            break;
        case O_REWEIGHT:
            o->reweight = 1;
            break;
        case O_XFORM: {
            int train = !strncmp(optarg, "imagenet-train", 14), eval = !strncmp(optarg, "imagenet-eval", 13);
            const char *rest = optarg + (train ? 14 : eval ? 13 : 0);
            v = 224;
            if ((!train && !eval) || (*rest && *rest != ':'))
                return cli_bad_value(&a, optarg, "imagenet-train[:SIZE] or imagenet-eval[:SIZE]"),
                       CLI_EXIT_USAGE;
            if (*rest && !cli_uint(&a, rest + 1, 1, 8192, &v)) return CLI_EXIT_USAGE;
            if (o->ro.transform) return cli_usage_error(&a, "--transform and --crop do not go together");
            stk_transform_imagenet(&o->xf, train, (uint32_t)v);
            o->ro.transform = &o->xf;
            break;
        }
        case O_CROP: {
            int rnd = !strncmp(optarg, "random:", 7), ctr = !strncmp(optarg, "center:", 7);
            if (!rnd && !ctr) return cli_bad_value(&a, optarg, "random:SIZE or center:SIZE"), CLI_EXIT_USAGE;
            if (!cli_uint(&a, optarg + 7, 1, 8192, &v)) return CLI_EXIT_USAGE;
            if (o->ro.transform) return cli_usage_error(&a, "--transform and --crop do not go together");
            stk_transform_imagenet(&o->xf, rnd, (uint32_t)v);
            o->xf.dtype = STK_DT_U8;
            o->xf.layout = STK_IMAGE_NHWC;
            o->ro.transform = &o->xf;
            break;
        }
        default:
            return CLI_EXIT_USAGE;
        }
    }
    o->json = a.json, o->quiet = a.quiet;
    if (!cli_operands(&a, argc, o->mix.n ? 0 : 1, o->mix.n ? 0 : 1,
                      o->mix.n ? "no DATASET besides --mix (it names the datasets)" : "one DATASET"))
        return CLI_EXIT_USAGE;
    o->path = o->mix.n ? o->mix.path[0] : argv[optind];
    if (o->mix.n && !o->ro.epoch_size) o->ro.epoch_size = o->mix.epoch_size;
    if (o->mix.n && o->sweep) return cli_usage_error(&a, "--sweep reads one dataset, not a --mix");
    if (o->reweight && !o->state_in) return cli_usage_error(&a, "--reweight goes with --state-in");
    if (!o->sweep && (o->so.csv || o->so.plot || o->so.nthreads || o->so.nprefetch || o->so.nbatch ||
                      o->so.nio || o->so.ndepth || o->so.drop_cache))
        return cli_usage_error(&a, "--sweep-* options, --csv and --plot go with --sweep");
    if (o->sweep && (o->dump || o->stop_after || o->state_in || o->state_out || o->touch))
        return cli_usage_error(
            &a, "--dump-order, --stop-after, --state-in/out and --touch do not go with --sweep");
    return CLI_EXIT_OK;
}

/* Defaults of the grid: threads 1, 2, 4 ... up to twice the cores. */
static void sweep_defaults(opts *o)
{
    sweep_opts *so = &o->so;
    if (!so->nthreads) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        for (unsigned t = 1; t <= (unsigned)(cpus > 0 ? 2 * cpus : 2) && so->nthreads < SWEEP_MAX_VALUES;
             t *= 2)
            so->threads[so->nthreads++] = t;
    }
    if (!so->nprefetch)
        for (unsigned p = 1; p <= 8; p *= 2) so->prefetch[so->nprefetch++] = p;
    if (!so->nbatch) so->batch[so->nbatch++] = o->ro.batch_size;
    if (!so->seconds) so->seconds = 1;
    so->step_us = o->step_us;
    so->step_busy = o->step_busy;
    so->json = o->json;
    so->quiet = o->quiet;
}

static int run_sweep(opts *o)
{
    sweep_defaults(o);
    stk_error err;
    stk_dataset *ds = stk_dataset_open(o->path, &err);
    if (!ds) {
        fprintf(stderr, "shardread: %s\n", err.msg);
        return open_status(err.code);
    }
    int rc = sweep_run(ds, &o->ro, &o->so);
    stk_dataset_close(ds);
    return rc;
}

/* A simulated training step: the consumer's side of the wait/step split. */
static void step(const opts *o)
{
    if (!o->step_us) return;
    if (o->step_busy) {
        double until = cli_now() + o->step_us * 1e-6;
        while (cli_now() < until) {}
        return;
    }
    struct timespec ts = {(time_t)(o->step_us / 1000000), (long)(o->step_us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Read every byte once, as a consumer copying the batch out would. */
static uint64_t touch(const stk_batch *b)
{
    uint64_t sum = 0;
    for (unsigned k = 0; k < b->nfields; k++) {
        const stk_batch_field *f = &b->fields[k];
        if (f->data) {
            const uint64_t *p = f->data;
            for (uint64_t i = 0; i < f->nbytes / 8; i++) sum += p[i];
        } else {
            for (uint32_t i = 0; i < b->size; i++)
                for (uint64_t j = 0; j < f->values[i].size; j++)
                    sum += ((const uint8_t *)f->values[i].data)[j];
        }
    }
    return sum;
}

static int load_state(stk_reader *r, const char *path, int reweight)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "shardread: %s: %s\n", path, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    char buf[32768]; /* a mixture's state: ~200 bytes per source */
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    stk_error err;
    if (stk_reader_restore_text(r, buf, n, reweight ? STK_RESTORE_REWEIGHT : 0, &err)) {
        fprintf(stderr, "shardread: %s: %s\n", path, err.msg);
        return open_status(err.code);
    }
    return CLI_EXIT_OK;
}

static int save_state(const stk_reader *r, const char *path)
{
    size_t n = stk_reader_save_text(r, NULL, 0);
    char *buf = malloc(n + 2);
    if (!buf) return fprintf(stderr, "shardread: out of memory\n"), CLI_EXIT_FAIL;
    stk_reader_save_text(r, buf, n + 1);
    buf[n++] = '\n';
    stk_error err;
    int rc = stk_file_commit(path, buf, n, &err);
    free(buf);
    if (rc) {
        fprintf(stderr, "shardread: %s\n", err.msg);
        return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}

/* A mixture's sources: what each gave, its share, and its cost per sample
 * (the slowest source is where the time goes). */
static void report_sources(const stk_reader *r, FILE *out, int json)
{
    unsigned S = stk_reader_sources(r);
    if (S < 2 && !json) return;
    stk_reader_source_stats st[MIX_MAX];
    uint64_t all = 0;
    char hb[16];
    for (unsigned s = 0; s < S && s < MIX_MAX; s++) {
        stk_reader_source_stats_get(r, s, &st[s], NULL);
        all += st[s].samples;
    }
    if (json) {
        printf(",\"sources\":[");
        for (unsigned s = 0; s < S && s < MIX_MAX; s++) {
            printf("%s{\"path\":", s ? "," : "");
            cli_json_string(stdout, stk_reader_source_path(r, s));
            printf(",\"records\":%llu,\"per_epoch\":%llu,\"samples\":%llu,\"bytes\":%llu,\"busy_s\":%.6f}",
                   (unsigned long long)st[s].records, (unsigned long long)st[s].per_epoch,
                   (unsigned long long)st[s].samples, (unsigned long long)st[s].bytes, st[s].busy_s);
        }
        printf("]");
        return;
    }
    for (unsigned s = 0; s < S && s < MIX_MAX; s++)
        fprintf(out,
                "source %u %s: %llu of %llu records an epoch; %llu samples (%.1f%%), %s, workers %.3f s "
                "(%.2f us/sample)\n",
                s, stk_reader_source_path(r, s), (unsigned long long)st[s].per_epoch,
                (unsigned long long)st[s].records, (unsigned long long)st[s].samples,
                all ? 100.0 * (double)st[s].samples / (double)all : 0.0,
                cli_bytes(hb, sizeof hb, (double)st[s].bytes), st[s].busy_s,
                st[s].samples ? st[s].busy_s / (double)st[s].samples * 1e6 : 0.0);
}

/* Mean distinct values of the integer scalar field `label` per batch of B
 * over the first batches of epoch 0, for one order: how well batches mix. */
static double mean_distinct(const stk_reader *r, int order, int lf, uint64_t B, uint64_t K, uint32_t W)
{
    const stk_dataset *ds = stk_reader_dataset(r);
    const stk_reader_options *o = stk_reader_get_options(r);
    uint64_t N = stk_dataset_records(ds), nb = N / B < 200 ? N / B : 200, total = 0;
    int64_t *seen = malloc(sizeof *seen * B);
    if (!seen || !nb) return free(seen), 0;
    for (uint64_t j = 0; j < nb; j++) {
        uint64_t distinct = 0;
        for (uint64_t i = 0; i < B; i++) {
            const void *p;
            uint64_t sz;
            uint64_t rec = stk_order_record(order, N, o->seed, 0, K, W, j * B + i);
            if (stk_dataset_value(ds, (unsigned)lf, rec, &p, &sz, NULL)) continue;
            int64_t v = 0;
            memcpy(&v, p, sz < 8 ? sz : 8); /* little-endian integer of any width */
            uint64_t k = 0;
            while (k < distinct && seen[k] != v) k++;
            if (k == distinct) seen[distinct++] = v;
        }
        total += distinct;
    }
    free(seen);
    return (double)total / (double)nb;
}

static void shuffle_quality(const stk_reader *r, const opts *o, FILE *out)
{
    const stk_schema *sc = stk_dataset_schema(stk_reader_dataset(r));
    int lf = stk_schema_find(sc, "label");
    if (lf < 0 || sc->fields[lf].kind != STK_KIND_TENSOR || sc->fields[lf].ndim != 0 ||
        sc->fields[lf].dtype > STK_DT_I64) {
        fprintf(out, "shuffle quality: no integer 'label' field to measure it with\n");
        return;
    }
    uint64_t B = o->ro.batch_size, K = stk_reader_quasi_block_records(r);
    uint32_t W = stk_reader_get_options(r)->quasi_window;
    double q = mean_distinct(r, STK_ORDER_QUASI, lf, B, K, W);
    double s = mean_distinct(r, STK_ORDER_SHUFFLE, lf, B, 0, 0);
    double l = mean_distinct(r, STK_ORDER_SEQUENTIAL, lf, B, 0, 0);
    fprintf(out,
            "shuffle quality: %.1f distinct labels per batch of %llu (full shuffle %.1f, sequential %.1f): "
            "%.2f of a full shuffle; blocks of %llu records, window of %u blocks\n",
            q, (unsigned long long)B, s, l, s > l ? (q - l) / (s - l) : 1.0, (unsigned long long)K, W);
}

/* CPU seconds this process used (all threads). */
static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}


/* The tuner: its final knobs and its last changes (human: a few lines;
 * json: a "tuning" member, the log's last 16). */
static void report_tuning(const stk_reader *r, FILE *out, int json)
{
    stk_reader_tune_stats t;
    stk_reader_tune_stats_get(r, &t);
    stk_reader_tune_event ev[16];
    size_t n = stk_reader_tune_log(r, ev, json ? 16 : 4);
    if (json) {
        fprintf(out,
                ",\"tuning\":{\"on\":%s,\"threads\":%u,\"prefetch\":%u,\"io_depth\":%u,\"threads_max\":%u,"
                "\"prefetch_max\":%u,\"io_depth_max\":%u,\"cpu_budget\":%.2f,\"trainer_cpu\":%.2f,"
                "\"memory_budget\":%llu,\"decisions\":%llu,\"changes\":%llu,\"period\":%llu,\"settled\":%s,"
                "\"log\":[",
                t.on ? "true" : "false", t.threads, t.prefetch, t.io_depth, t.threads_max, t.prefetch_max,
                t.io_depth_max, t.cpu_budget, t.trainer_cpu, (unsigned long long)t.memory_budget,
                (unsigned long long)t.decisions, (unsigned long long)t.changes, (unsigned long long)t.period,
                t.settled ? "true" : "false");
        for (size_t i = 0; i < n; i++) {
            fprintf(
                out,
                "%s{\"batch\":%llu,\"t_s\":%.3f,\"threads\":%u,\"prefetch\":%u,\"io_depth\":%u,\"reason\":",
                i ? "," : "", (unsigned long long)ev[i].batch, ev[i].t_s, ev[i].threads, ev[i].prefetch,
                ev[i].io_depth);
            cli_json_string(out, ev[i].reason);
            fputc('}', out);
        }
        fputs("]}", out);
        return;
    }
    if (!t.on) {
        fprintf(out, "tuning: off (threads %u, prefetch %u, io-depth %u as given)\n", t.threads, t.prefetch,
                t.io_depth);
        return;
    }
    fprintf(out,
            "tuning: threads %u (of %u), prefetch %u (of %u), io-depth %u (of %u); %llu change%s in %llu "
            "decisions; cpu budget %.2f cores (the rest of the process %.2f)\n",
            t.threads, t.threads_max, t.prefetch, t.prefetch_max, t.io_depth, t.io_depth_max,
            (unsigned long long)t.changes, t.changes == 1 ? "" : "s", (unsigned long long)t.decisions,
            t.cpu_budget, t.trainer_cpu);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "  batch %llu (%.2f s): %s\n", (unsigned long long)ev[i].batch, ev[i].t_s, ev[i].reason);
}

static void report(const stk_reader *r, const opts *o, const stk_reader_stats *s, int rc, const char *errmsg,
                   double cpu_s, double anon_mib)
{
    char verdict[256];
    stk_reader_verdict(s, verdict, sizeof verdict);
    double sps = s->wall_s > 0 ? s->samples / s->wall_s : 0,
           gbs = s->wall_s > 0 ? s->bytes / s->wall_s / 1e9 : 0;
    double wf = s->wall_s > 0 ? s->wait_s / s->wall_s : 0;
    uint64_t e, b;
    stk_reader_position(r, &e, &b);
    stk_reader_io_stats io;
    stk_reader_io_stats_get(r, &io);
    const char *engine = io.engine == STK_IO_ENGINE_URING     ? "io_uring"
                         : io.engine == STK_IO_ENGINE_THREADS ? "threads"
                         : io.engine == STK_IO_ENGINE_REMOTE  ? "remote"
                                                              : "none";
    stk_reader_remote_stats rs;
    stk_reader_remote_stats_get(r, &rs);
    if (!o->quiet) {
        FILE *out = o->dump || o->json ? stderr : stdout;
        char hb[16], hb2[16];
        fprintf(out,
                "read %llu batch%s, %llu sample%s, %s in %.3f s: %.0f samples/s, %.3f GB/s "
                "(%llu zero-copy batch%s, %llu record%s verified)\n",
                (unsigned long long)s->batches, s->batches == 1 ? "" : "es", (unsigned long long)s->samples,
                cli_plural(s->samples), cli_bytes(hb, sizeof hb, s->bytes), s->wall_s, sps, gbs,
                (unsigned long long)s->zero_copy_batches, s->zero_copy_batches == 1 ? "" : "es",
                (unsigned long long)s->verified, cli_plural(s->verified));
        fprintf(
            out,
            "waited %.3f s (%.1f%%), workers busy %.3f s over %u threads, %.1f batches ready on average\n",
            s->wait_s, wf * 100, s->busy_s, s->threads, s->mean_ready);
        char diag[2048]; /* what the numbers show (the one-line verdict stays in --json's "verdict") */
        stk_reader_diag dg;
        stk_reader_diag_get(r, &dg);
        stk_reader_diagnose(&dg, diag, sizeof diag);
        fprintf(out, "%s\n", diag);
        char mixv[1024];
        if (stk_reader_verdict_sources(r, mixv, sizeof mixv) > 0) fprintf(out, "%s\n", mixv);
        fprintf(out, "cpu %.3f s (%.3f core-s per GB), anonymous memory %.1f MiB\n", cpu_s,
                s->bytes ? cpu_s / (s->bytes / 1e9) : 0.0, anon_mib);
        if (io.io == STK_IO_DIRECT)
            fprintf(out,
                    "io: direct (%s, depth %u): %llu reads, %s, %llu retried, %s bounced, %llu from "
                    "the map, %u files without O_DIRECT; %s\n",
                    engine, io.depth, (unsigned long long)io.reads,
                    cli_bytes(hb, sizeof hb, (double)io.bytes), (unsigned long long)io.retries,
                    cli_bytes(hb2, sizeof hb2, (double)io.bounced_bytes), (unsigned long long)io.map_reads,
                    io.buffered_files, io.reason);
        else fprintf(out, "io: mmap; %s\n", io.reason);
        if (rs.remote) {
            char b3[16], b4[16];
            fprintf(out,
                    "remote: %llu requests, %s fetched, %llu retried (%llu 5xx, %llu network), %llu failed, "
                    "%llu checksum refetches, at most %llu in flight; cache: %llu hits (%s), %s stored, %s "
                    "not admitted\n",
                    (unsigned long long)rs.requests, cli_bytes(hb, sizeof hb, (double)rs.bytes_fetched),
                    (unsigned long long)rs.retries, (unsigned long long)rs.retries_5xx,
                    (unsigned long long)rs.retries_network, (unsigned long long)rs.failures,
                    (unsigned long long)rs.checksum_refetches, (unsigned long long)rs.inflight_max,
                    (unsigned long long)rs.cache_hits, cli_bytes(hb2, sizeof hb2, (double)rs.cache_hit_bytes),
                    cli_bytes(b3, sizeof b3, (double)rs.cache_stored_bytes),
                    cli_bytes(b4, sizeof b4, (double)rs.cache_rejected_bytes));
        }
        report_sources(r, out, 0);
        if (o->ro.order == STK_ORDER_QUASI && !o->mix.n) shuffle_quality(r, o, out);
        report_tuning(r, out, 0);
    }
    if (o->metrics) { /* Prometheus text, last on stdout (stderr with --json or a dump) */
        int need = stk_reader_metrics(r, NULL, 0);
        char *m = need > 0 ? malloc((size_t)need + 512) : NULL;
        if (m && stk_reader_metrics(r, m, (size_t)need + 512) >= 0)
            fputs(m, o->dump || o->json ? stderr : stdout);
        free(m);
    }
    if (o->json) {
        printf("{\"ok\":%s,\"batches\":%llu,\"samples\":%llu,\"bytes\":%llu,\"seconds\":%.6f,"
               "\"samples_per_s\":%.1f,\"gb_per_s\":%.4f,\"wait_fraction\":%.4f,\"wait_s\":%.6f,"
               "\"busy_s\":%.6f,\"mean_ready\":%.2f,\"zero_copy_batches\":%llu,\"verified\":%llu,"
               "\"threads\":%u,\"prefetch\":%u,\"batch_size\":%u,\"device\":\"%s\",\"order\":\"%s\",\"next_"
               "epoch\":%llu,"
               "\"next_batch\":%llu,\"io\":\"%s\",\"io_engine\":\"%s\",\"io_depth\":%u,\"io_reads\":%llu,"
               "\"io_retries\":%llu,\"io_bounced_bytes\":%llu,\"io_map_reads\":%llu,\"cpu_s\":%.4f,"
               "\"rss_anon_mib\":%.1f,\"io_reason\":",
               rc ? "false" : "true", (unsigned long long)s->batches, (unsigned long long)s->samples,
               (unsigned long long)s->bytes, s->wall_s, sps, gbs, wf, s->wait_s, s->busy_s, s->mean_ready,
               (unsigned long long)s->zero_copy_batches, (unsigned long long)s->verified, s->threads,
               s->prefetch, o->ro.batch_size,
               s->device == STK_DEVICE_CUDA   ? "cuda"
               : s->device == STK_DEVICE_HOST ? "host"
                                              : "none",
               ORDERS[o->ro.order], (unsigned long long)e, (unsigned long long)b, IO_MODES[io.io], engine,
               io.depth, (unsigned long long)io.reads, (unsigned long long)io.retries,
               (unsigned long long)io.bounced_bytes, (unsigned long long)io.map_reads, cpu_s, anon_mib);
        cli_json_string(stdout, io.reason);
        printf(",\"verdict\":");
        cli_json_string(stdout, verdict);
        if (rs.remote)
            printf(
                ",\"remote\":{\"requests\":%llu,\"bytes_fetched\":%llu,\"retries\":%llu,\"retries_5xx\":%llu,"
                "\"retries_network\":%llu,\"failures\":%llu,\"gets\":%llu,\"get_bytes\":%llu,"
                "\"cache_hits\":%llu,\"cache_hit_bytes\":%llu,\"cache_stored_bytes\":%llu,"
                "\"cache_rejected_bytes\":%llu,\"checksum_refetches\":%llu,\"inflight_max\":%llu}",
                (unsigned long long)rs.requests, (unsigned long long)rs.bytes_fetched,
                (unsigned long long)rs.retries, (unsigned long long)rs.retries_5xx,
                (unsigned long long)rs.retries_network, (unsigned long long)rs.failures,
                (unsigned long long)rs.gets, (unsigned long long)rs.get_bytes,
                (unsigned long long)rs.cache_hits, (unsigned long long)rs.cache_hit_bytes,
                (unsigned long long)rs.cache_stored_bytes, (unsigned long long)rs.cache_rejected_bytes,
                (unsigned long long)rs.checksum_refetches, (unsigned long long)rs.inflight_max);
        report_sources(r, stdout, 1);
        report_tuning(r, stdout, 1);
        if (errmsg) {
            printf(",\"error\":");
            cli_json_string(stdout, errmsg);
        }
        printf("}\n");
    }
}

static void dump(const stk_batch *b)
{
    for (uint32_t i = 0; i < b->size; i++) printf(i ? " %llu" : "%llu", (unsigned long long)b->records[i]);
    putchar('\n');
}

int main(int argc, char **argv)
{
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) {
        mix_spec_free(&o.mix); /* a --mix parsed before the usage error */
        return rc;
    }
    if (o.sweep) return run_sweep(&o);
    stk_error err;
    double cpu0 = cpu_seconds();
    stk_reader *r =
        o.mix.n ? stk_reader_open_mix(o.mix.src, o.mix.n, &o.ro, &err) : stk_reader_open(o.path, &o.ro, &err);
    if (!r) {
        fprintf(stderr, "shardread: %s\n", err.msg);
        mix_spec_free(&o.mix);
        return open_status(err.code);
    }
    if (o.state_in && (rc = load_state(r, o.state_in, o.reweight))) {
        stk_reader_close(r);
        mix_spec_free(&o.mix);
        return rc;
    }
    uint64_t e0, b0, bpe = stk_reader_batches_per_epoch(r);
    stk_reader_position(r, &e0, &b0);
    if (o.epochs > (UINT64_MAX - e0) / 2 / bpe) o.epochs = (UINT64_MAX - e0) / 2 / bpe; /* "forever" */
    stk_reader_set_epochs(r, e0 + o.epochs);
    uint64_t total = (o.epochs * bpe) - b0;
    if (!o.quiet && *stk_reader_device_note(r)) fprintf(stderr, "shardread: %s\n", stk_reader_device_note(r));
    if (o.stop_after && o.stop_after < total) total = o.stop_after;
    cli_progress bar;
    cli_progress_start_units(&bar, "read", "batches", total, o.quiet || o.dump);
    uint64_t n = 0, sink = 0;
    const char *errmsg = NULL;
    while (n < total) {
        const stk_batch *b = stk_reader_next(r, &err);
        if (!b) {
            if (err.code) {
                cli_progress_clear(&bar);
                fprintf(stderr, "shardread: %s\n", err.msg);
                errmsg = err.msg;
                rc = CLI_EXIT_FAIL;
            }
            break;
        }
        if (o.dump) dump(b);
        if (o.touch && (!b->on_device || o.ro.device == STK_DEVICE_HOST)) sink += touch(b);
        step(&o);
        cli_progress_update(&bar, ++n, NULL);
        if (n == o.warmup) { /* the statistics, CPU time included, start here */
            stk_reader_stats_reset(r);
            cpu0 = cpu_seconds();
        }
    }
    if (!rc && stk_reader_synchronize(r, &err)) { /* the last upload is part of the time */
        fprintf(stderr, "shardread: %s\n", err.msg);
        rc = CLI_EXIT_FAIL;
    }
    stk_reader_release(r);
    cli_progress_end(&bar);
    if (sink == 1) fputc(' ', stderr); /* keep the touch loop from being optimised away */
    stk_reader_stats st;
    stk_reader_stats_get(r, &st);
    double cpu_s = cpu_seconds() - cpu0, anon = cli_rss_anon_mib();
    if (!rc && o.state_out) rc = save_state(r, o.state_out);
    report(r, &o, &st, rc, errmsg, cpu_s, anon);
    stk_reader_close(r);
    mix_spec_free(&o.mix);
    return rc;
}
