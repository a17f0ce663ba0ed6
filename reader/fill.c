/* reader/fill.c - cold data on the map path, brought into the page cache
 * ahead of the workers along the order (io_plan.c decides when: cold data
 * that fits in memory, a reader that does not read once).
 *
 * Why: the map path reads cold data one page fault at a time per worker
 * (2-4 MiB per fault on maps advised huge pages), a device queue two or
 * four deep: the first epoch of a cold dataset ran at 0.14-0.23 of what the
 * device gives. Direct reads run at the device's speed but leave nothing in
 * the page cache, so every epoch reads the device again. Here a pool of
 * threads (opts.io_depth of them, at most FILL_THREADS_MAX) walks the
 * reader's own records in the order the workers will want them, one epoch's
 * worth from where the reader starts, and faults each 2 MiB run of the
 * files that holds one of their values into the shard maps
 * (MADV_POPULATE_READ): many runs in flight, each read once, in the 2 MiB
 * folios the maps' huge-page advice asks for, mapped into the process's
 * page tables already. The workers copy from the same maps and find the
 * pages there (or wait on a read in flight); every later epoch, and every
 * later run while the cache keeps them, reads from memory through the map.
 * The batches do not change: only when the page cache gets the bytes.
 * (bench/README.md, "cold": the measurements behind this and the designs
 * it was chosen over.)
 *
 * Kernels without MADV_POPULATE_READ (before 5.14) get MADV_WILLNEED, which
 * starts the reads without waiting for them (in small folios). */
#define _GNU_SOURCE
#include "engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_READ
#  define MADV_POPULATE_READ 22
#endif

#define FILL_RUN_SHIFT 21 /* 2 MiB: a huge page, and a read the device serves at its block rate */
#define FILL_UNIT \
  8u /* records a thread takes at a time: the batch the workers want first
                             comes in from many threads at once */
#define FILL_THREADS_MAX 64u
#define FILL_STACK (256u << 10)

typedef struct stk__fill stk__fill;
struct stk__fill {
    stk_reader *r;
    pthread_t *th;
    unsigned nth, started;
    unsigned nf; /* the fields filled: selected uncompressed tensors of a page and more per record */
    unsigned f[STK_MAX_FIELDS];
    uint64_t stride[STK_MAX_FIELDS];
    uint64_t *run0; /* per shard: its first run's index in done[] */
    uint8_t *done;  /* per 2 MiB run: claimed by a thread (atomic) */
    uint64_t pos;   /* the next unit: batch * units_per_batch + unit (under mu) */
    uint64_t first; /* the batch the walk starts at */
    uint64_t units; /* units in the walk: one epoch's batches */
    int advice;     /* MADV_POPULATE_READ, or MADV_WILLNEED where the kernel lacks it (atomic) */
    int stop;       /* atomic */
    uint64_t bytes; /* populated (atomic) */
    pthread_mutex_t mu;
};

/* Bring run c of shard s into the page cache (once per reader). */
static void fill_run(stk__fill *fl, size_t s, uint64_t c)
{
    if (__atomic_exchange_n(&fl->done[fl->run0[s] + c], 1, __ATOMIC_RELAXED)) return;
    const stk_shard *sh = stk_dataset_shard(fl->r->ds, s);
    const uint8_t *base = stk_shard_field_base(sh, fl->f[0]);
    if (!base) return;
    const uint8_t *map = base - stk_shard_field_offset(sh, fl->f[0]);
    uint64_t off = c << FILL_RUN_SHIFT, size = stk_shard_file_size(sh);
    if (off >= size) return;
    uint64_t len = size - off < (1ull << FILL_RUN_SHIFT) ? size - off : 1ull << FILL_RUN_SHIFT;
    int advice = __atomic_load_n(&fl->advice, __ATOMIC_RELAXED);
    if (madvise((void *)(map + off), len, advice) != 0 && advice == MADV_POPULATE_READ && errno == EINVAL) {
        __atomic_store_n(&fl->advice, MADV_WILLNEED, __ATOMIC_RELAXED);
        (void)madvise((void *)(map + off), len, MADV_WILLNEED);
    }
    __atomic_add_fetch(&fl->bytes, len, __ATOMIC_RELAXED);
}

static void *fill_main(void *arg)
{
    stk__fill *fl = arg;
    stk_reader *r = fl->r;
    stk__epoch_order ord;
    uint64_t ord_epoch = UINT64_MAX, per = (r->o.batch_size + FILL_UNIT - 1) / FILL_UNIT;
    for (;;) {
        pthread_mutex_lock(&fl->mu);
        uint64_t u = fl->pos++, first = fl->first;
        pthread_mutex_unlock(&fl->mu);
        if (u >= fl->units || __atomic_load_n(&fl->stop, __ATOMIC_RELAXED)) break;
        /* batch s's positions, as the workers compute them (reader.c, batch_span) */
        uint64_t s = first + u / per, j = s % r->nbatches, e = s / r->nbatches;
        uint64_t p0 = j * r->G + (uint64_t)r->o.rank * r->o.batch_size;
        uint64_t i0 = (u % per) * FILL_UNIT,
                 i1 = i0 + FILL_UNIT < r->o.batch_size ? i0 + FILL_UNIT : r->o.batch_size;
        if (ord_epoch != e) {
            stk__epoch_order_init(&ord, r->o.order, r->N, r->o.seed, e, r->K, r->Wq);
            ord_epoch = e;
        }
        for (uint64_t i = i0; i < i1 && !__atomic_load_n(&fl->stop, __ATOMIC_RELAXED); i++) {
            if (r->o.tail == STK_TAIL_PARTIAL && p0 + i >= r->N) break;
            uint64_t rec = stk__epoch_order_record(&ord, (p0 + i) % r->N), local;
            size_t sh;
            if (stk_dataset_locate(r->ds, rec, &sh, &local, NULL)) continue;
            const stk_shard *shp = stk_dataset_shard(r->ds, sh);
            for (unsigned k = 0; k < fl->nf; k++) {
                uint64_t off = stk_shard_field_offset(shp, fl->f[k]) + local * fl->stride[k];
                for (uint64_t c = off >> FILL_RUN_SHIFT; c <= (off + fl->stride[k] - 1) >> FILL_RUN_SHIFT;
                     c++)
                    fill_run(fl, sh, c);
            }
        }
    }
    return NULL;
}

int stk__fill_start(stk_reader *r, stk_error *err)
{
    if (!r->fill) return STK_OK;
    stk__fill *fl = calloc(1, sizeof *fl);
    if (!fl) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    r->filler = fl;
    fl->r = r;
    fl->advice = MADV_POPULATE_READ;
    pthread_mutex_init(&fl->mu, NULL);
    const stk_schema *sc = stk_dataset_schema(r->ds);
    for (unsigned k = 0; k < r->nsel; k++) {
        const stk_field *fd = &sc->fields[r->sel[k]];
        if (fd->kind == STK_KIND_TENSOR && fd->codec == STK_CODEC_NONE && r->sel_stride[k] >= 4096) {
            fl->f[fl->nf] = r->sel[k];
            fl->stride[fl->nf++] = r->sel_stride[k];
        }
    }
    size_t ns = stk_dataset_nshards(r->ds);
    uint64_t runs = 0;
    if (!fl->nf || !ns || r->nbatches == 0) return STK_OK; /* nothing to fill */
    if (!(fl->run0 = malloc(ns * sizeof *fl->run0))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    for (size_t s = 0; s < ns; s++) {
        fl->run0[s] = runs;
        runs += (stk_shard_file_size(stk_dataset_shard(r->ds, s)) >> FILL_RUN_SHIFT) + 1;
    }
    if (!(fl->done = calloc(runs, 1))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    fl->first = r->claim;
    fl->units = r->nbatches * ((r->o.batch_size + FILL_UNIT - 1) / FILL_UNIT);
    fl->nth = r->o.io_depth ? r->o.io_depth : 1;
    if (fl->nth > FILL_THREADS_MAX) fl->nth = FILL_THREADS_MAX;
    if (!(fl->th = calloc(fl->nth, sizeof *fl->th))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, FILL_STACK);
    for (; fl->started < fl->nth; fl->started++) {
        int e = pthread_create(&fl->th[fl->started], &a, fill_main, fl);
        if (e) {
            pthread_attr_destroy(&a);
            return stk_error_set(err, STK_E_IO, "cannot start a page-cache fill thread: %s", strerror(e));
        }
    }
    pthread_attr_destroy(&a);
    return STK_OK;
}

/* A seek or a restore moved the stream to batch s: the walk starts over
 * there (a resumed run fills what its workers read next, not epoch 0). Runs
 * already brought in are skipped by done[]; threads that finished their walk
 * have covered an epoch, which touches every record's runs, so none is
 * restarted. */
void stk__fill_seek(stk_reader *r, uint64_t s)
{
    stk__fill *fl = r->filler;
    if (!fl || !fl->th) return;
    pthread_mutex_lock(&fl->mu);
    fl->first = s;
    fl->pos = 0;
    pthread_mutex_unlock(&fl->mu);
}

void stk__fill_stop(stk_reader *r)
{
    stk__fill *fl = r->filler;
    if (!fl) return;
    __atomic_store_n(&fl->stop, 1, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < fl->started; i++) pthread_join(fl->th[i], NULL);
    pthread_mutex_destroy(&fl->mu);
    free(fl->th);
    free(fl->run0);
    free(fl->done);
    free(fl);
    r->filler = NULL;
}

uint64_t stk__fill_bytes(const stk_reader *r)
{
    return r->filler ? __atomic_load_n(&r->filler->bytes, __ATOMIC_RELAXED) : 0;
}

unsigned stk__fill_threads(const stk_reader *r) { return r->filler ? r->filler->nth : 0; }
