/* reader/io_plan.c - which path records take to the slots (mmap or direct
 * reads), why, and the direct engine's start. The choice is made once, at
 * open; the reason is kept for stk_reader_io_stats_get and shardread. */
#define _GNU_SOURCE /* mincore */
#include "reader_impl.h"
#include "abi_v0.h"

#include "../format/rshard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define DEFAULT_IO_DEPTH 32 /* per worker; see bench/README.md, "cold" */
#define PROBE_PAGES 64

/* A selected field that direct reads serve: an uncompressed tensor
 * (r->io_field, set by stk__io_plan, says the same for the rest of the
 * reader). */
static int direct_field(const stk_reader *r, unsigned k)
{
    const stk_field *fd = &stk_dataset_schema(r->ds)->fields[r->sel[k]];
    return fd->kind == STK_KIND_TENSOR && fd->codec == STK_CODEC_NONE && r->sel_stride[k] > 0;
}

static uint64_t meminfo_bytes(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            kb = strtoull(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* Pages of the selected tensor fields found resident, out of those probed:
 * PROBE_PAGES records spread evenly over the dataset. */
static unsigned probe_resident(const stk_reader *r, unsigned *probed)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    unsigned hit = 0;
    *probed = 0;
    for (unsigned i = 0; i < PROBE_PAGES; i++) {
        uint64_t rec = (r->records * i + r->records / 2) / PROBE_PAGES, local;
        size_t s;
        if (stk_dataset_locate(r->ds, rec, &s, &local, NULL)) continue;
        const stk_shard *sh = stk_dataset_shard(r->ds, s);
        for (unsigned k = 0; k < r->nsel; k++) {
            const uint8_t *base = stk_shard_field_base(sh, r->sel[k]);
            /* only the fields read directly: small columns (labels) are
             * read through the map, and dataset open may have touched them */
            if (!base || !direct_field(r, k) || r->sel_stride[k] < STK__IO_MIN_READ) continue;
            uintptr_t a = (uintptr_t)(base + local * r->sel_stride[k]) & ~(page - 1);
            unsigned char v = 0;
            if (mincore((void *)a, page, &v) == 0) {
                hit += v & 1;
                ++*probed;
            }
        }
    }
    return hit;
}

static double gb(uint64_t b) { return (double)b / 1e9; }

/* Part p of the reader's dataset (a mixture's sources), the dataset itself
 * as part 0 when it is not a mixture; NULL past the end. */
static const stk_dataset *part_at(const stk_reader *r, size_t p)
{
    const stk_dataset *d = stk__dataset_part(r->ds, p);
    return d || p ? d : r->ds;
}

/* Whether part p is the same dataset as an earlier part (a mixture naming
 * one dataset twice shares it: reader_mix.c). */
static int part_repeats(const stk_reader *r, size_t p)
{
    for (size_t q = 0; q < p; q++)
        if (part_at(r, q) == part_at(r, p)) return 1;
    return 0;
}

/* The records of the reader's dataset, a dataset a mixture names twice
 * counted once (its files are read once). */
static uint64_t distinct_records(const stk_reader *r)
{
    uint64_t n = 0;
    const stk_dataset *d;
    for (size_t p = 0; (d = part_at(r, p)); p++)
        if (!part_repeats(r, p)) n += stk_dataset_records(d);
    return n;
}

uint64_t stk__reader_file_bytes(const stk_reader *r, uint64_t min_shard)
{
    uint64_t n = 0, b;
    const stk_dataset *d;
    for (size_t p = 0; (d = part_at(r, p)); p++)
        for (size_t s = 0; !part_repeats(r, p) && s < stk_dataset_nshards(d); s++)
            if ((b = stk_shard_file_size(stk_dataset_shard(d, s))) >= min_shard) n += b;
    return n;
}

/* The stored (compressed) bytes of the selected compressed fields: from
 * each shard's first and last block, so two lookups per shard (a dataset
 * a mixture names twice counted once). */
static uint64_t compressed_bytes(const stk_reader *r)
{
    uint64_t total = 0;
    const stk_dataset *d;
    for (unsigned k = 0; k < r->nsel; k++) {
        if (stk_dataset_schema(r->ds)->fields[r->sel[k]].codec != STK_CODEC_ZSTD) continue;
        for (size_t p = 0; (d = part_at(r, p)); p++)
            for (size_t s = 0; !part_repeats(r, p) && s < stk_dataset_nshards(d); s++) {
                const stk_shard *sh = stk_dataset_shard(d, s);
                uint64_t nb = stk_shard_nblocks(sh, r->sel[k]), a, b, n;
                if (nb && !stk_shard_block_span(sh, r->sel[k], 0, &a, NULL, NULL) &&
                    !stk_shard_block_span(sh, r->sel[k], nb - 1, &b, &n, NULL) && b + n >= a)
                    total += b + n - a;
            }
    }
    return total;
}

/* auto: direct when the selected tensor bytes cannot stay in the page cache
 * (more than half of RAM), or when they are cold and more than half of what
 * is available: the first epoch would fill the cache only to have it
 * reclaimed under the trainer. Cold data within that bound stays on the
 * mmap path when its maps are advised huge pages (map_huge: the advice
 * reaches most of its bytes), although direct reads bring a single cold epoch in
 * faster: the faults then read 2-4 MiB each, and from the second epoch on
 * (and in the next run, and for every rank on the machine) the data is
 * read from memory, where the direct path reads the device every epoch
 * (bench/README "cold", runs G, G2 and H). Without the advice a cold map
 * faults in 4-64 KiB at a time, much slower: cold data larger than a
 * quarter of what is available goes direct then. */
int stk__io_auto_rule(uint64_t sel_bytes, uint64_t ram, uint64_t avail, unsigned hit, unsigned probed,
                      int map_huge, char *why, size_t size)
{
    int cold = probed && hit * 2 < probed;
    if (ram && sel_bytes > ram / 2) {
        snprintf(why, size, "auto: the selected fields (%.1f GB) are larger than half of RAM (%.1f GB)",
                 gb(sel_bytes), gb(ram));
        return STK_IO_DIRECT;
    }
    if (cold && avail && (sel_bytes > avail / 2 || (sel_bytes > avail / 4 && !map_huge))) {
        snprintf(why, size,
                 "auto: the selected fields (%.1f GB) are cold (%u of %u sampled pages resident) and larger "
                 "than %s of available memory (%.1f GB)%s",
                 gb(sel_bytes), hit, probed, sel_bytes > avail / 2 ? "half" : "a quarter", gb(avail),
                 sel_bytes > avail / 2 ? "" : ", and their maps are not advised huge pages");
        return STK_IO_DIRECT;
    }
    if (cold && avail)
        snprintf(why, size,
                 "auto: the selected fields (%.1f GB) are cold (%u of %u sampled pages resident) but fit "
                 "in memory (%.1f GB available): read through the page cache, which keeps them for the next "
                 "epochs",
                 gb(sel_bytes), hit, probed, gb(avail));
    else if (cold)
        snprintf(why, size,
                 "auto: the selected fields (%.1f GB) are cold (%u of %u sampled pages resident); available "
                 "memory unknown",
                 gb(sel_bytes), hit, probed);
    else if (avail)
        snprintf(
            why, size,
            "auto: the selected fields (%.1f GB, %u of %u sampled pages resident) fit in memory (%.1f GB "
            "available)",
            gb(sel_bytes), hit, probed, gb(avail));
    else
        snprintf(
            why, size,
            "auto: the selected fields (%.1f GB, %u of %u sampled pages resident); available memory unknown",
            gb(sel_bytes), hit, probed);
    return STK_IO_MMAP;
}

/* Quasi order on the direct path reads blocks whole (qblocks.c) when one
 * rank reads them all: with W ranks each would read whole blocks to use a
 * W-th of them. The cache holds two windows (the one being consumed, the
 * next being read) plus a few blocks per worker, at most 1 GiB; a window
 * that does not fit in 1 GiB reads records one by one instead.
 *
 * Blocks pay where a record's read is too small for the device: every byte
 * is copied once more, out of the cache, and a window's first batch waits
 * for most of the window. Where every field the engine reads (strides of
 * STK__IO_MIN_READ and more; smaller ones go through the map) has values of
 * QBLOCK_RECORD_MAX and more, records are read one by one, straight into the
 * slots, as in shuffled order: a value is read on its own (fields are
 * separate columns), and random reads that large run at the block size's
 * rate on SSDs and virtual disks (bench/README "cold": fio 128 KiB-4 MiB
 * alike, 16 KiB a quarter of it; quasi records 1.2-1.4x blocks at a quarter
 * of the CPU). STOKER_QUASI_BLOCKS=1 asks for blocks whatever the size
 * (storage that is slow at such reads: a network file system far away), 0
 * for records; stk__io_plan refuses other values. */
#define QCACHE_MAX (1ull << 30)
#define QBLOCK_RECORD_MAX ((uint64_t)128 << 10)
static void plan_quasi_blocks(stk_reader *r, int blocks) /* STOKER_QUASI_BLOCKS: -1 auto, 0, 1 */
{
    if (r->o.order != STK_ORDER_QUASI || r->o.world_size != 1 || r->K < 2 || blocks == 0) return;
    uint64_t bytes = 0, smallest = UINT64_MAX; /* the smallest value the engine reads */
    for (unsigned k = 0; k < r->nsel; k++) {
        r->qb_off[k] = bytes;
        if (direct_field(r, k)) { /* room for the aligned overrun: see stk__qentry_shift */
            bytes += (r->sel_stride[k] * r->K + 2 * 4096 - 1) & ~(uint64_t)4095;
            if (r->sel_stride[k] >= STK__IO_MIN_READ && r->sel_stride[k] < smallest)
                smallest = r->sel_stride[k];
        }
    }
    if (!bytes) return; /* compressed fields only: the block cache serves quasi order */
    size_t n = strlen(r->io_reason);
    if (smallest != UINT64_MAX && smallest >= QBLOCK_RECORD_MAX && blocks < 0) {
        snprintf(
            r->io_reason + n, sizeof r->io_reason - n,
            "; quasi records read one by one (the smallest value read directly is %.0f KiB, at least %llu "
            "KiB: reads the device serves at its block rate)",
            smallest / 1024.0, (unsigned long long)(QBLOCK_RECORD_MAX >> 10));
        return;
    }
    uint64_t min = ((uint64_t)r->Wq + 4ull * r->nworkers) * bytes,
             want = (2ull * r->Wq + 4ull * r->nworkers) * bytes;
    if (bytes > QCACHE_MAX / 4 || min > QCACHE_MAX) {
        snprintf(r->io_reason + n, sizeof r->io_reason - n,
                 "; quasi blocks read record by record (a window of %u blocks of %.1f MB exceeds %llu MiB)",
                 r->Wq, bytes / 1e6, QCACHE_MAX >> 20);
        return;
    }
    uint64_t nblocks = (r->records + r->K - 1) / r->K; /* no more than the dataset's blocks */
    r->qb_bytes = bytes;
    r->qcache_bytes = want < QCACHE_MAX ? want : (QCACHE_MAX / bytes) * bytes;
    if (r->qcache_bytes > nblocks * bytes) r->qcache_bytes = nblocks * bytes;
    snprintf(r->io_reason + n, sizeof r->io_reason - n,
             "; quasi blocks read whole (%.2f MiB each, cache %.1f MiB)", bytes / 1048576.0,
             r->qcache_bytes / 1048576.0);
}

/* On the map path, data that fits in memory has its shard maps advised
 * huge pages (stk_shard_advise_huge): the pages the reader faults in come
 * into the page cache as 2 MiB folios, and every later mapping of them (the
 * next run, the other ranks of the node) maps them 2 MiB at a time. Shuffled
 * gathers from a page cache of small pages pay for every 4-64 KiB of a
 * record the first time each mapping touches it, and a page walk per 4 KiB
 * after (bench/README "Warm reads" has the figures).
 * Not when the shard files (every field, each file once) are larger than
 * half of available memory: there a fault's 2-4 MiB would be evicted before
 * it is used. Not with release_pages asked for: releasing consumed pages
 * would split the huge ones. Shards shorter than a huge page are left alone.
 * STOKER_MAP_HUGE=0 never advises, 1 always; stk__io_plan refuses other
 * values. r->shard_huge marks the advised shards (advise_records leaves
 * their readahead to the faults). */
#define HUGE_MAP_MIN ((uint64_t)2 << 20)

/* Whether plan_map_huge will advise the maps (huge: -1 auto, 0, 1; avail:
 * MemAvailable, 0 unknown; files: stk__reader_file_bytes(r, 0)). */
static int map_huge_planned(const stk_reader *r, int huge, uint64_t avail, uint64_t files)
{
    if (huge >= 0) return huge;
    return r->o.release_pages <= 0 && avail && files <= avail / 2;
}

/* For auto's rule, before io is chosen: whether advice that is planned will
 * reach most of the data, i.e. the kernel has transparent huge pages, and
 * at least half of the shard bytes are in shards of a huge page and more
 * (the only ones advised). */
static int map_huge_reaches(const stk_reader *r, int planned, uint64_t files)
{
    char mode[64] = "";
    FILE *f = planned ? fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r") : NULL;
    if (!f) return 0;
    size_t n = fread(mode, 1, sizeof mode - 1, f);
    fclose(f);
    mode[n] = 0;
    return !strstr(mode, "[never]") && stk__reader_file_bytes(r, HUGE_MAP_MIN) * 2 >= files;
}

static int plan_map_huge(stk_reader *r, int planned, stk_error *err)
{
    if (!planned) return STK_OK;
    size_t n = stk_dataset_nshards(r->ds), advised = 0, distinct = 0, at = 0;
    if (!(r->shard_huge = calloc(n ? n : 1, 1))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    const stk_dataset *d;
    for (size_t p = 0; (d = part_at(r, p)); p++) {
        int again = part_repeats(r, p); /* its shards are an earlier part's: counted there */
        for (size_t s = 0; s < stk_dataset_nshards(d); s++, at++) {
            const stk_shard *sh = stk_dataset_shard(d, s);
            /* a map shorter than a huge page has none to map (and a syscall costs) */
            r->shard_huge[at] = stk_shard_file_size(sh) >= HUGE_MAP_MIN && stk_shard_advise_huge(sh);
            distinct += !again;
            advised += !again && r->shard_huge[at];
        }
    }
    if (advised) {
        size_t len = strlen(r->io_reason);
        snprintf(r->io_reason + len, sizeof r->io_reason - len, "; %zu of %zu shard maps advised huge pages",
                 advised, distinct);
    }
    return STK_OK;
}

/* Shards of the reader's dataset in object storage (format/rshard.h). */
static size_t remote_shards(const stk_reader *r)
{
    size_t n = 0;
    for (size_t s = 0; s < stk_dataset_nshards(r->ds); s++)
        n += stk__shard_is_remote(stk_dataset_shard(r->ds, s)) != 0;
    return n;
}

/* Cold data that auto's rule keeps on the map path (it fits: later epochs
 * come from the page cache) is read ahead of the workers along the order
 * (fill.c): the map alone faults it in one fault at a time per worker, at a
 * fraction of the device's speed (bench/README.md "cold": 0.14-0.23 of fio
 * in the first epoch). With the fill the first epoch runs at the device's
 * speed and leaves the data in the page cache in 2 MiB folios, which the
 * later epochs copy from. The designs it was measured against (same place):
 * the direct engine through the page cache (buffered reads; small folios,
 * 2-3x slower than O_DIRECT here, and slower warm epochs); direct reads with
 * a fill behind them (every byte read from the device twice); direct while
 * cold, the map once resident (nothing makes it resident).
 *
 * A reader that reads each record once (opts.read_once: an evaluation
 * pass) pays for no fill nothing would use: cold data goes O_DIRECT. Data
 * found resident stays on the map either way (nothing to fill). Not read
 * ahead: mixtures (their positions come from mix.c's cursors), compressed
 * fields (their frames go through the block cache) and readers asked to
 * release consumed pages (release_pages 1). */
static int plan_cold(stk_reader *r, int io, uint64_t bytes, unsigned hit, unsigned probed)
{
    size_t n = strlen(r->io_reason);
    int once = r->o.read_once == 1, cold = probed && hit * 2 < probed;
    if (io != STK_IO_MMAP) { /* larger than the rule lets the cache hold: direct already */
        if (once) snprintf(r->io_reason + n, sizeof r->io_reason - n, "; read once");
        return io;
    }
    if (!cold) {
        if (once)
            snprintf(r->io_reason + n, sizeof r->io_reason - n,
                     "; read once: resident already, no page-cache fill to avoid");
        return io;
    }
    if (once) {
        snprintf(r->io_reason, sizeof r->io_reason,
                 "auto, read once: the selected fields (%.1f GB) are cold (%u of %u sampled pages resident): "
                 "read directly (O_DIRECT), no page-cache fill that nothing would use",
                 gb(bytes), hit, probed);
        return STK_IO_DIRECT;
    }
    if (r->mix || r->has_compressed || r->o.release_pages > 0) {
        snprintf(r->io_reason + n, sizeof r->io_reason - n, "; not read ahead (%s)",
                 r->mix              ? "a mixture"
                 : r->has_compressed ? "compressed fields selected"
                                     : "release_pages asked for: the pages are not to stay");
        return io;
    }
    r->fill = 1;
    snprintf(r->io_reason + n, sizeof r->io_reason - n,
             ", read ahead of the workers along the order (2 MiB runs, %u threads)",
             r->o.io_depth < 64 ? r->o.io_depth : 64);
    return io;
}

static int choose_auto(stk_reader *r, uint64_t bytes, uint64_t avail, int map_huge)
{
    uint64_t ram = meminfo_bytes("MemTotal");
    unsigned probed = 0, hit = 0;
    if (!ram || bytes <= ram / 2) hit = probe_resident(r, &probed); /* past half of RAM: not needed */
    int io = stk__io_auto_rule(bytes, ram, avail, hit, probed, map_huge, r->io_reason, sizeof r->io_reason);
    return plan_cold(r, io, bytes, hit, probed);
}

int stk__io_plan(stk_reader *r, const stk__env *env, stk_error *err)
{
    stk_reader_options *o = &r->o;
    long io_env, blocks, huge;
    if (o->io == STK_IO_AUTO) {
        if (stk__env_get(env, STK__ENV_IO, &io_env, err)) return STK_E_ARG;
        if (io_env >= 0) o->io = io_env ? STK_IO_DIRECT : STK_IO_MMAP;
    }
    if (o->io < STK_IO_AUTO || o->io > STK_IO_DIRECT)
        return stk_error_set(err, STK_E_ARG, "io %d unknown (auto, mmap or direct)", o->io);
    if (o->io_depth > 1024) return stk_error_set(err, STK_E_ARG, "io_depth %u: at most 1024", o->io_depth);
    if (o->read_once != 0 && o->read_once != 1)
        return stk_error_set(err, STK_E_ARG, "read_once %d: 0 (auto) or 1", o->read_once);
    if (stk__env_get(env, STK__ENV_QUASI_BLOCKS, &blocks, err) ||
        stk__env_get(env, STK__ENV_MAP_HUGE, &huge, err))
        return STK_E_ARG;
    if (o->io_depth == 0) o->io_depth = DEFAULT_IO_DEPTH;
    uint64_t sel_bytes = 0, records = distinct_records(r);
    for (unsigned k = 0; k < r->nsel; k++)
        if (direct_field(r, k)) sel_bytes += r->sel_stride[k] * records;
    int io = o->io;
    /* read once: the choice and the advice agree */
    uint64_t avail = meminfo_bytes("MemAvailable"), files = stk__reader_file_bytes(r, 0);
    int planned = map_huge_planned(r, (int)huge, avail, files);
    if (io == STK_IO_AUTO && remote_shards(r)) {
        io = STK_IO_DIRECT;         /* below: the reason */
    } else if (io == STK_IO_AUTO) { /* compressed fields' blocks go through the engine too (blockcache.c) */
        io = choose_auto(r, sel_bytes + compressed_bytes(r), avail, map_huge_reaches(r, planned, files));
    } else {
        snprintf(r->io_reason, sizeof r->io_reason, "%s: asked for", io == STK_IO_MMAP ? "mmap" : "direct");
    }
    size_t nremote = remote_shards(r);
    if (nremote) {
        /* A remote shard's mapping is the node cache's file, with holes where
         * nothing was fetched: its records are read through the engine's
         * remote backend (io_remote.c), which fetches, checks and caches
         * them, never straight from the map (no zero-copy, no short-run map
         * copies). Bytes fields go through stk_shard_value, which fetches
         * what is absent itself. */
        snprintf(r->io_reason, sizeof r->io_reason,
                 "remote: %zu of %zu shards in object storage, read by range GETs through the node cache%s",
                 nremote, stk_dataset_nshards(r->ds),
                 o->io == STK_IO_MMAP ? " (mmap asked for: not for remote shards)" : "");
        io = STK_IO_DIRECT;
        r->rbytes = r->zbytes = r->zbytes || r->has_bytes; /* reader.c, remote_value */
    } else if (io == STK_IO_DIRECT && !sel_bytes && !r->has_compressed) {
        snprintf(r->io_reason, sizeof r->io_reason,
                 "mmap: no tensor or compressed field selected (bytes fields read through the map)");
        io = STK_IO_MMAP;
    }
    o->io = io;
    r->direct = io == STK_IO_DIRECT;
    r->fill = r->fill && !r->direct && !nremote;
    for (unsigned k = 0; k < r->nsel && r->direct; k++) r->io_field[k] = (uint8_t)direct_field(r, k);
    /* Remote shards read quasi blocks whatever the value size: a GET per
     * record costs a round trip, a block's run of records is one GET. */
    if (r->direct) plan_quasi_blocks(r, nremote && blocks < 0 ? 1 : (int)blocks);
    /* Each worker begins the next part while it ends one; remote shards
     * outside quasi blocks, whose parts wait on range GETs, hold more begun
     * (reader_open.c, plan_remote_window: why). Quasi blocks keep two: their
     * block lists are per part, and whole blocks already make few GETs. */
    r->parts_ahead = nremote && r->direct && !r->qb_bytes ? STK__PARTS_AHEAD_MAX : 2;
    if ((!r->direct || nremote) && plan_map_huge(r, planned, err)) return err ? err->code : STK_E_NOMEM;
    return STK_OK;
}

/* What the direct path adds to a reader's memory. Each worker has two
 * queues (the part it ends, the next); a queue's bounce area holds, for the
 * fields whose stride is off 4 KiB, the aligned span of each record of a
 * part: at most the stride rounded up plus one block. In quasi block mode,
 * the cache, and a bounce area for blocks that straddle two shards (both
 * runs of such a block bounce): two blocks per queue are planned for, more
 * only when shards hold fewer than a few blocks each. */
uint64_t stk__io_plan_bytes(const stk_reader *r)
{
    if (!r->direct) return 0;
    uint64_t queues = (uint64_t)r->parts_ahead * r->nworkers;
    if (r->qb_bytes) return r->qcache_bytes + queues * 2 * r->qb_bytes;
    uint64_t part = ((uint64_t)r->o.batch_size + r->parts - 1) / r->parts, per = 0;
    for (unsigned k = 0; k < r->nsel; k++)
        if (direct_field(r, k) && (r->sel_stride[k] & 4095))
            per += part * (((r->sel_stride[k] + 4095) & ~(uint64_t)4095) + 4096);
    return queues * per;
}

int stk__io_start(stk_reader *r, const stk__env *env, stk_error *err)
{
    if (!r->direct) return stk__fill_start(r, err);
    long engine, fault;
    if (stk__env_get(env, STK__ENV_IO_ENGINE, &engine, err) ||
        stk__env_get(env, STK__ENV_IO_FAULT, &fault, err))
        return STK_E_ARG;
    stk__io_config c = {STK__ENGINE_AUTO, r->io_depth_max, r->parts_ahead * r->nworkers,
                        stk__env_text(env, STK__ENV_IO_FAULT), r->o.io_depth};
    if (engine >= 0) c.engine = engine ? STK__ENGINE_THREADS : STK__ENGINE_URING;
    char note[200];
    int rc = stk__io_open(&r->io, r->ds, &c, note, sizeof note, err);
    if (rc) return rc;
    if (r->qb_bytes && !(r->qcache = stk__qcache_new(r->qcache_bytes, r->qb_bytes, r->K, r->records)))
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    if (note[0]) {
        size_t n = strlen(r->io_reason);
        snprintf(r->io_reason + n, sizeof r->io_reason - n, "; %s", note);
    }
    return STK_OK;
}

void stk_reader_io_stats_get_sized(const stk_reader *r, stk_reader_io_stats *s, size_t size)
{
    stk_reader_io_stats v;
    memset(&v, 0, sizeof v);
    v.io = r->direct ? STK_IO_DIRECT : STK_IO_MMAP;
    if (r->io) {
        stk__io_counts c;
        stk__io_counts_get(r->io, &c);
        int e = stk__io_engine(r->io);
        v.engine = e == STK__ENGINE_URING    ? STK_IO_ENGINE_URING
                   : e == STK__ENGINE_REMOTE ? STK_IO_ENGINE_REMOTE
                                             : STK_IO_ENGINE_THREADS;
        stk__engine_counters now;
        stk__engine_sample((stk_reader *)r, &now); /* the mutex only: the tuner may turn it */
        v.depth = now.knobs.io_depth;
        v.reads = c.reads;
        v.bytes = c.bytes;
        v.retries = c.retries;
        v.bounced_bytes = c.bounced;
        v.map_reads = c.map_reads;
        v.buffered_files = c.buffered;
        v.quasi_blocks = r->qcache ? stk__qcache_loads(r->qcache) : 0;
    }
    v.filled_bytes = stk__fill_bytes(r);
    v.read_once = r->o.read_once == 1;
    snprintf(v.reason, sizeof v.reason, "%s", r->io_reason);
    if (s) stk__write_sized(s, size, &v, sizeof v);
}

void stk_reader_remote_stats_get_sized(const stk_reader *r, stk_reader_remote_stats *s, size_t size)
{
    stk_reader_remote_stats v;
    memset(&v, 0, sizeof v);
    stk__rio_counts c;
    stk__io_remote_counts(r->io, &c);
    if (c.remote) {
        v.remote = 1;
        v.requests = c.requests;
        v.bytes_fetched = c.bytes_in;
        v.retries = c.retries;
        v.retries_5xx = c.retry_5xx;
        v.retries_network = c.retry_net;
        v.failures = c.failures;
        v.gets = c.gets;
        v.get_bytes = c.bytes;
        v.cache_hits = c.cache_hits;
        v.cache_hit_bytes = c.cache_hit_bytes;
        v.cache_stored_bytes = c.cache_stored;
        v.cache_rejected_bytes = c.cache_rejected;
        v.checksum_refetches = c.refetches;
        v.inflight_max = c.inflight_max;
    }
    if (s) stk__write_sized(s, size, &v, sizeof v);
}
