/* tests/reader/test_mix_reader.c - mixtures through the reader
 * (stk_reader_open_mix) against ref_mix.c, a reference written from
 * spec/ORDERS.md "Mixtures": every batch's records, sources and records
 * inside the source over many (sources, kinds, orders, batch, ranks, tail,
 * seed); per-epoch counts; ranks disjoint; per-batch proportions; the
 * values that land; save and restore (into another world size, refused
 * when the mixture changed, re-weighted when asked); per-source
 * statistics; schemas that disagree. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_mix.h"
#include "ref_order.h"

#define U(x) ((unsigned long long)(x))
#define MAXS 4

typedef struct {
    char dir[1024];
    uint64_t n, seed, avg; /* avg: file bytes per record, as the quasi block size is computed */
} src_ds;

/* Datasets of 5 to 60 records (std schema), made once per process. */
static src_ds pool[6];
static void make_pool(void)
{
    static const uint64_t sizes[6] = {5, 17, 40, 60, 23, 9};
    for (int i = 0; i < 6; i++) {
        src_ds *d = &pool[i];
        if (d->n) continue;
        char name[32];
        snprintf(name, sizeof name, "src%d", i);
        d->n = sizes[i];
        d->seed = 100 + 37 * (uint64_t)i;
        tu_scratch_std_dataset(d->dir, sizeof d->dir, name, d->seed, d->n, 7);
        stk_error e;
        stk_dataset *ds = stk_dataset_open(d->dir, &e);
        ck_assert_msg(ds != NULL, "%s", e.msg);
        uint64_t total = 0;
        for (size_t s = 0; s < stk_dataset_nshards(ds); s++)
            total += stk_shard_file_size(stk_dataset_shard(ds, s));
        d->avg = total / d->n;
        stk_dataset_close(ds);
    }
}

typedef struct {
    uint32_t S;
    const src_ds *d[MAXS];
    ref_source ref[MAXS];
    stk_source src[MAXS];
    uint64_t epoch_size, seed, qbb;
    int order, tail;
    uint32_t B, world;
} mix_case;

/* A random mixture: 1-3 sources of the pool, all weighted or each a repeat
 * or a choose, each with its own order or the reader's. */
static void random_case(mix_case *m, uint64_t *x)
{
    memset(m, 0, sizeof *m);
    m->S = 1 + (uint32_t)(*x % 3);
    int weighted = (*x >> 8) % 2 == 0;
    m->order = (int)((*x >> 12) % 3);
    m->tail = (int)((*x >> 16) % 3);
    m->B = 1 + (uint32_t)((*x >> 20) % 9);
    m->world = 1 + (uint32_t)((*x >> 26) % 3);
    m->seed = *x * 0x9e3779b97f4a7c15ull;
    m->epoch_size = weighted && (*x >> 30) % 2 ? 10 + (*x >> 32) % 90 : 0;
    m->qbb = 3 * 128; /* blocks of a few records */
    for (uint32_t s = 0; s < m->S; s++) {
        uint64_t y = ref_mix64(*x + s);
        const src_ds *d = &pool[(y >> 3) % 6];
        m->d[s] = d;
        stk_source_init(&m->src[s]);
        m->src[s].path = d->dir;
        m->src[s].order = (int)((y >> 10) % 4) - 1; /* -1: the reader's */
        int kind = weighted ? STK_MIX_WEIGHT : (y >> 14) % 2 ? STK_MIX_REPEAT : STK_MIX_CHOOSE;
        double v = kind == STK_MIX_WEIGHT   ? 0.1 + (double)((y >> 20) % 90) / 10
                   : kind == STK_MIX_REPEAT ? (double)((y >> 20) % 26) / 10 /* 0 .. 2.5 */
                                            : (double)((y >> 20) % (2 * d->n + 1));
        if (s == 0 && kind != STK_MIX_WEIGHT && v == 0) v = 1; /* some epoch */
        m->src[s].kind = kind;
        m->src[s].value = v;
        int order = m->src[s].order < 0 ? m->order : m->src[s].order;
        uint64_t K = m->qbb / d->avg ? m->qbb / d->avg : 1;
        m->ref[s] =
            (ref_source){d->n, kind, v, order, order == REF_QUASI ? K : 0, order == REF_QUASI ? 4 : 0};
    }
}

static stk_reader *open_case(const mix_case *m, uint32_t rank, uint32_t world, uint32_t B, stk_error *e)
{
    stk_reader_options o;
    stk_reader_options_init(&o);
    o.order = m->order;
    o.tail = m->tail;
    o.batch_size = B;
    o.rank = (int)rank;
    o.world_size = (int)world;
    o.seed = m->seed;
    o.threads = 1 + rank % 2;
    o.prefetch = 1 + rank % 3;
    o.epoch_size = m->epoch_size;
    o.quasi_block_bytes = m->qbb;
    o.quasi_window = 4;
    return stk_reader_open_mix(m->src, m->S, &o, e);
}

/* Source s's base in the concatenated records. */
static uint64_t base_of(const mix_case *m, uint32_t s)
{
    uint64_t b = 0;
    for (uint32_t z = 0; z < s; z++) b += m->d[z]->n;
    return b;
}

/* The label of a record: identifies its dataset and index (tu_std_record). */
static int32_t label_of(const src_ds *d, uint64_t i) { return (int32_t)(i * 7 + d->seed) - 50; }

/* Every batch of 2 epochs on every rank against the reference; the union of
 * the ranks' positions covers each epoch; the values are the records'. */
static void check_case(const mix_case *m, int trial)
{
    uint64_t c[MAXS], E = ref_mix_counts(m->ref, m->S, m->epoch_size, c);
    uint64_t G = (uint64_t)m->B * m->world;
    stk_error e;
    if (m->tail == STK_TAIL_DROP && E < G) {
        stk_reader *r = open_case(m, 0, m->world, m->B, &e);
        ck_assert_msg(r == NULL, "trial %d: drop with E %llu < G %llu opened", trial, U(E), U(G));
        return;
    }
    uint64_t bpe = ref_batches_per_epoch(E, G, m->tail);
    uint64_t *rec = malloc(E * sizeof *rec), *srcs = malloc(E * sizeof *srcs), *want = malloc(m->B * 8),
             *wsrc = malloc(m->B * 8);
    ck_assert(rec && srcs && want && wsrc);
    uint64_t *given = calloc(2 * E, sizeof *given); /* per epoch and position: how many ranks read it */
    ck_assert(given);
    for (uint32_t rank = 0; rank < m->world; rank++) {
        stk_reader *r = open_case(m, rank, m->world, m->B, &e);
        ck_assert_msg(r != NULL, "trial %d: open: %s", trial, e.msg);
        ck_assert_uint_eq(stk_reader_batches_per_epoch(r), bpe);
        ck_assert_uint_eq(stk_reader_sources(r), m->S);
        for (uint64_t ep = 0; ep < 2; ep++) {
            ref_mix_epoch(m->ref, m->S, m->epoch_size, m->seed, ep, rec, srcs);
            for (uint64_t j = 0; j < bpe; j++) {
                uint32_t k = ref_rank_batch(rec, E, G, m->B, rank, m->tail, j, want);
                ref_rank_batch(srcs, E, G, m->B, rank, m->tail, j, wsrc);
                const stk_batch *b = stk_reader_next(r, &e);
                ck_assert_msg(b != NULL, "trial %d: next: %s", trial, e.msg);
                ck_assert_uint_eq(b->epoch, ep);
                ck_assert_uint_eq(b->index, j);
                ck_assert_uint_eq(b->size, k);
                ck_assert_ptr_nonnull(b->sources);
                for (uint32_t i = 0; i < k; i++) {
                    ck_assert_msg(
                        b->records[i] == want[i] && b->sources[i] == wsrc[i],
                        "trial %d (S %u, order %d, tail %d, B %u, world %u) rank %u epoch %llu batch %llu "
                        "[%u]: record %llu of source %u, want %llu of %llu",
                        trial, m->S, m->order, m->tail, m->B, m->world, rank, U(ep), U(j), i,
                        U(b->records[i]), b->sources[i], U(want[i]), U(wsrc[i]));
                    uint32_t s = b->sources[i];
                    ck_assert_uint_eq(b->source_records[i], b->records[i] - base_of(m, s));
                    ck_assert_uint_lt(b->source_records[i], m->d[s]->n);
                    const int32_t *lab = b->fields[TU_LABEL].data;
                    ck_assert_int_eq(lab[i], label_of(m->d[s], b->source_records[i]));
                    uint64_t p = j * G + (uint64_t)rank * m->B + i;
                    if (p < E) given[ep * E + p]++;
                }
            }
        }
        stk_reader_close(r);
    }
    for (uint64_t p = 0; p < 2 * E; p++) /* drop leaves the tail's positions out */
        ck_assert_msg(given[p] == (m->tail == STK_TAIL_DROP && p % E >= bpe * G ? 0u : 1u),
                      "trial %d: position %llu of epoch %llu read %llu times", trial, U(p % E), U(p / E),
                      U(given[p]));
    free(given);
    free(rec);
    free(srcs);
    free(want);
    free(wsrc);
}

START_TEST(stream_matches_the_reference)
{
    make_pool();
    uint64_t x = 0x5eed;
    for (int trial = 0; trial < 90; trial++) {
        x = ref_mix64(x + (uint64_t)trial);
        mix_case m;
        random_case(&m, &x);
        uint64_t c[MAXS];
        if (!ref_mix_counts(m.ref, m.S, m.epoch_size, c))
            continue; /* an empty epoch: refused, tested below */
        check_case(&m, trial);
    }
}
END_TEST

/* A mixture that names one dataset twice maps its files once (the
 * concatenation's shards of both sources are the same objects), and reads
 * as the reference says; a different dataset beside it keeps its own. */
START_TEST(one_dataset_twice_is_mapped_once)
{
    make_pool();
    mix_case m;
    memset(&m, 0, sizeof m);
    m.S = 3;
    m.order = REF_SHUFFLE;
    m.tail = STK_TAIL_PAD;
    m.B = 4;
    m.world = 2;
    m.seed = 77;
    m.qbb = 3 * 128;
    const src_ds *d[3] = {&pool[2], &pool[3], &pool[2]};
    const double w[3] = {1, 0.5, 2};
    for (uint32_t s = 0; s < 3; s++) {
        m.d[s] = d[s];
        stk_source_init(&m.src[s]);
        m.src[s].path = d[s]->dir;
        m.src[s].value = w[s];
        m.ref[s] = (ref_source){d[s]->n, REF_WEIGHT, w[s], REF_SHUFFLE, 0, 0};
    }
    check_case(&m, -1);
    stk_error e;
    stk_reader *r = open_case(&m, 0, 1, 4, &e);
    ck_assert_msg(r != NULL, "%s", e.msg);
    /* the concatenation's shards: source 0's, source 1's, then source 2's */
    const stk_dataset *ds = stk_reader_dataset(r);
    stk_dataset *a = stk_dataset_open(pool[2].dir, &e), *b = stk_dataset_open(pool[3].dir, &e);
    ck_assert(a && b);
    size_t na = stk_dataset_nshards(a), nb = stk_dataset_nshards(b);
    ck_assert_uint_eq(stk_dataset_nshards(ds), 2 * na + nb);
    for (size_t k = 0; k < na; k++) {
        ck_assert_ptr_eq(stk_dataset_shard(ds, k), stk_dataset_shard(ds, na + nb + k));
        for (size_t j = 0; j < nb; j++)
            ck_assert_ptr_ne(stk_dataset_shard(ds, k), stk_dataset_shard(ds, na + j));
    }
    stk_dataset_close(a);
    stk_dataset_close(b);
    stk_reader_close(r);
}
END_TEST

/* A shuffled case (random_case from seed x for the rest) of S sources,
 * pool[first + s] by weight w[s] each in the reader's order. */
static mix_case weighted_case(uint64_t x, uint32_t S, const double *w, uint32_t first, int tail,
                              uint64_t epoch_size)
{
    mix_case m;
    random_case(&m, &x);
    m.S = S;
    m.order = STK_ORDER_SHUFFLE;
    m.tail = tail;
    m.epoch_size = epoch_size;
    for (uint32_t s = 0; s < S; s++) {
        m.d[s] = &pool[first + s];
        m.src[s].path = m.d[s]->dir;
        m.src[s].kind = STK_MIX_WEIGHT;
        m.src[s].value = w[s];
        m.src[s].order = -1;
    }
    return m;
}

/* Per epoch, each source gives exactly its count; no record of a source
 * repeats in an epoch unless its count exceeds its records; every global
 * batch holds each source within the spec's rounding of its share. */
START_TEST(counts_and_proportions)
{
    make_pool();
    const double w[3] = {0.15, 0.3, 0.55};
    mix_case m = weighted_case(3, 3, w, 1, STK_TAIL_PARTIAL, 100);
    m.B = 10;
    m.world = 1;
    for (uint32_t s = 0; s < 3; s++) m.ref[s] = (ref_source){m.d[s]->n, REF_WEIGHT, w[s], REF_SHUFFLE, 0, 0};
    stk_error e;
    stk_reader *r = open_case(&m, 0, 1, 10, &e);
    ck_assert_msg(r != NULL, "%s", e.msg);
    uint64_t per[3] = {0}, c[3], E = ref_mix_counts(m.ref, 3, 100, c);
    ck_assert(E == 100 && c[0] == 15 && c[1] == 30 && c[2] == 55); /* within each source's records */
    uint8_t seen[3][60];
    for (uint64_t ep = 0; ep < 3; ep++) {
        memset(seen, 0, sizeof seen);
        memset(per, 0, sizeof per);
        for (uint64_t j = 0; j < stk_reader_batches_per_epoch(r); j++) {
            const stk_batch *b = stk_reader_next(r, &e);
            ck_assert_msg(b != NULL, "%s", e.msg);
            uint64_t in[3] = {0};
            for (uint32_t i = 0; i < b->size; i++) {
                uint32_t s = b->sources[i];
                in[s]++;
                ck_assert_msg(!seen[s][b->source_records[i]]++, "epoch %llu: source %u record %llu twice",
                              U(ep), s, U(b->source_records[i]));
            }
            for (uint32_t s = 0; s < 3; s++) { /* a prefix is within (S + 1) / 2: a batch within S + 1 */
                ck_assert_msg(fabs((double)in[s] - (double)b->size * (double)c[s] / (double)E) <= 4.0,
                              "batch %llu: %llu of source %u", U(j), U(in[s]), s);
                per[s] += in[s];
            }
        }
        for (uint32_t s = 0; s < 3; s++) ck_assert_uint_eq(per[s], c[s]);
    }
    stk_reader_source_stats st;
    uint64_t total = 0;
    for (uint32_t s = 0; s < 3; s++) {
        ck_assert_int_eq(stk_reader_source_stats_get(r, s, &st, &e), STK_OK);
        ck_assert_uint_eq(st.samples, 3 * c[s]);
        ck_assert_uint_eq(st.per_epoch, c[s]);
        ck_assert_uint_eq(st.records, m.d[s]->n);
        ck_assert_uint_gt(st.bytes, st.samples * (30 + 4)); /* image and label, plus the text */
        ck_assert(st.busy_s >= 0);
        total += st.samples;
        ck_assert_str_eq(stk_reader_source_path(r, s), m.d[s]->dir);
    }
    stk_reader_stats all;
    stk_reader_stats_get(r, &all);
    ck_assert_uint_eq(total, all.samples);
    ck_assert_int_eq(stk_reader_source_stats_get(r, 3, &st, &e), STK_E_ARG);
    ck_assert_ptr_null(stk_reader_source_path(r, 3));
    stk_reader_close(r);
}
END_TEST

/* The next `count` batches' records of reader r. */
static void take(stk_reader *r, uint64_t count, uint64_t *out, uint32_t B)
{
    stk_error e;
    for (uint64_t j = 0; j < count; j++) {
        const stk_batch *b = stk_reader_next(r, &e);
        ck_assert_msg(b != NULL, "%s", e.msg);
        ck_assert_uint_eq(b->size, B);
        memcpy(out + j * B, b->records, B * sizeof *out);
    }
}

static mix_case two_sources(double w0, double w1)
{
    const double w[2] = {w0, w1};
    mix_case m = weighted_case(9, 2, w, 2, STK_TAIL_PAD, 0);
    m.src[1].order = STK_ORDER_QUASI;
    return m;
}

/* Two ranks save after 5 batches; one rank of twice the batch restores the
 * text and yields exactly the global batches the pair would have. */
START_TEST(resume_into_another_world_size)
{
    make_pool();
    mix_case m = two_sources(0.7, 0.3);
    stk_error e;
    uint64_t want[2][30 * 4], got[30 * 8];
    char text[8192];
    for (uint32_t rank = 0; rank < 2; rank++) {
        stk_reader *r = open_case(&m, rank, 2, 4, &e);
        ck_assert_msg(r != NULL, "%s", e.msg);
        uint64_t skip[5 * 4];
        take(r, 5, skip, 4);
        if (rank == 0) {
            size_t n = stk_reader_save_text(r, text, sizeof text);
            ck_assert_uint_lt(n, sizeof text);
            ck_assert_uint_eq(stk_reader_save_text(r, NULL, 0), n); /* the length it needs */
            ck_assert_ptr_nonnull(strstr(text, "\"stoker_reader_state\":2"));
            ck_assert_ptr_nonnull(strstr(text, "\"kind\":\"weight\",\"value\":0.7"));
            ck_assert_ptr_nonnull(strstr(text, "\"order\":\"quasi\""));
        }
        take(r, 30, want[rank], 4); /* past the epoch's end (100 records: 13 batches) */
        stk_reader_close(r);
    }
    stk_reader *r = open_case(&m, 0, 1, 8, &e);
    ck_assert_msg(r != NULL, "%s", e.msg);
    ck_assert_msg(stk_reader_restore_text(r, text, strlen(text), 0, &e) == STK_OK, "%s", e.msg);
    take(r, 30, got, 8);
    for (uint64_t j = 0; j < 30; j++)
        for (uint32_t i = 0; i < 8; i++) ck_assert_uint_eq(got[j * 8 + i], want[i / 4][j * 4 + i % 4]);
    /* seek (set_epoch) lands where reading there would: batch 3 of epoch 1 */
    ck_assert_int_eq(stk_reader_seek(r, 1, 3, &e), STK_OK);
    uint64_t after[4 * 8];
    take(r, 4, after, 8);
    ck_assert_int_eq(stk_reader_seek(r, 0, 0, &e), STK_OK);
    uint64_t walk[17 * 8];
    take(r, 17, walk, 8); /* 13 batches an epoch (100 records / 8, padded), then 4 of epoch 1 from batch 0 */
    for (uint32_t i = 0; i < 8; i++) ck_assert_uint_eq(after[i], walk[16 * 8 + i]);
    /* the frozen struct restores too, checked by the mixture's fingerprint */
    stk_reader_state st;
    ck_assert_int_eq(stk_reader_state_parse(text, strlen(text), &st, &e), STK_OK);
    ck_assert_int_eq(stk_reader_restore(r, &st, &e), STK_OK);
    stk_reader_close(r);
}
END_TEST

START_TEST(restore_refuses_another_mixture)
{
    make_pool();
    mix_case m = two_sources(0.7, 0.3);
    stk_error e;
    char text[8192];
    stk_reader *r = open_case(&m, 0, 1, 4, &e);
    ck_assert_msg(r != NULL, "%s", e.msg);
    uint64_t skip[20 * 4];
    take(r, 20, skip, 4); /* epoch 1, batch 20 - 25 = ... */
    uint64_t ep, bt;
    stk_reader_position(r, &ep, &bt);
    stk_reader_save_text(r, text, sizeof text);
    stk_reader_close(r);

    mix_case w = two_sources(0.5, 0.5); /* weights changed */
    r = open_case(&w, 0, 1, 4, &e);
    ck_assert_msg(r != NULL, "%s", e.msg);
    ck_assert_int_eq(stk_reader_restore_text(r, text, strlen(text), 0, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "source 0");
    tu_assert_error(&e, STK_E_ARG, "weight 0.7 in the state, weight 0.5 here");
    stk_reader_state st;
    ck_assert_int_eq(stk_reader_state_parse(text, strlen(text), &st, &e), STK_OK);
    ck_assert_int_eq(stk_reader_restore(r, &st, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "another mixture");
    /* re-weighted: the same position of the new mixture */
    ck_assert_msg(stk_reader_restore_text(r, text, strlen(text), STK_RESTORE_REWEIGHT, &e) == STK_OK, "%s",
                  e.msg);
    uint64_t e2, b2;
    stk_reader_position(r, &e2, &b2);
    ck_assert(e2 == ep && b2 == bt);
    stk_reader_close(r);

    /* the same mixture with another quasi window (source 1 is quasi): refused */
    mix_case q = two_sources(0.7, 0.3);
    stk_reader_options qo;
    stk_reader_options_init(&qo);
    qo.order = q.order, qo.tail = q.tail, qo.batch_size = 4, qo.rank = 0, qo.world_size = 1, qo.seed = q.seed;
    qo.quasi_block_bytes = q.qbb, qo.quasi_window = 5;
    r = stk_reader_open_mix(q.src, q.S, &qo, &e);
    ck_assert_msg(r != NULL, "%s", e.msg);
    ck_assert_int_eq(stk_reader_restore_text(r, text, strlen(text), 0, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "quasi window differs");
    stk_reader_close(r);
    /* a batch past the epoch's end, an edited fingerprint: refused */
    r = open_case(&m, 0, 1, 4, &e);
    ck_assert_msg(r != NULL, "%s", e.msg);
    char edited[8192];
    snprintf(edited, sizeof edited, "%s", text);
    char *bp = strstr(text, "\"batch\":");
    ck_assert_ptr_nonnull(bp);
    const char *after = bp + 8 + strspn(bp + 8, "0123456789");
    snprintf(edited, sizeof edited, "%.*s\"batch\":999999%s", (int)(bp - text), text, after);
    ck_assert_int_eq(stk_reader_restore_text(r, edited, strlen(edited), 0, &e), STK_E_RANGE);
    snprintf(edited, sizeof edited, "%s", text);
    char *fp = strstr(edited, "\"fingerprint\":\"") + 15;
    *fp = *fp == '0' ? '1' : '0';
    ck_assert_int_eq(stk_reader_restore_text(r, edited, strlen(edited), 0, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "fingerprint");
    stk_reader_close(r);

    mix_case o = two_sources(0.7, 0.3); /* another dataset in source 1 */
    o.d[1] = &pool[4];
    o.src[1].path = pool[4].dir;
    r = open_case(&o, 0, 1, 4, &e);
    ck_assert_msg(r != NULL, "%s", e.msg);
    ck_assert_int_eq(stk_reader_restore_text(r, text, strlen(text), STK_RESTORE_REWEIGHT, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "source 1");
    tu_assert_error(&e, STK_E_ARG, "another dataset");
    stk_reader_close(r);

    /* one dataset's state into a mixture, and a mixture's into one dataset */
    stk_reader_options opt = tu_reader_options(4, STK_ORDER_SHUFFLE);
    r = tu_open_reader(pool[2].dir, &opt);
    char one[1024];
    stk_reader_save_text(r, one, sizeof one);
    ck_assert_int_eq(stk_reader_restore_text(r, text, strlen(text), 0, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "a mixture's (2 sources)");
    stk_reader_close(r);
    r = open_case(&m, 0, 1, 4, &e);
    ck_assert_msg(r != NULL, "%s", e.msg);
    ck_assert_int_eq(stk_reader_restore_text(r, one, strlen(one), 0, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "one dataset's");
    stk_reader_close(r);
}
END_TEST

/* A dataset of one field "image" of shape [3, w] u16. */
static void write_other(char *dir, size_t cap, const char *name, uint64_t w, int extra_first)
{
    tu_scratch(dir, cap, name);
    stk_schema sc;
    stk_error e;
    stk_schema_init(&sc);
    const uint64_t shape[2] = {3, w};
    if (extra_first) ck_assert_int_eq(stk_schema_add_tensor(&sc, "label", STK_DT_I32, 0, NULL, &e), STK_OK);
    ck_assert_int_eq(stk_schema_add_tensor(&sc, "image", STK_DT_U16, 2, shape, &e), STK_OK);
    stk_dataset_options o;
    stk_dataset_options_init(&o);
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &sc, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    uint16_t img[3 * 8] = {0};
    int32_t lab = 1;
    stk_value v[2] = {{&lab, 4}, {img, 6 * w}};
    if (!extra_first) v[0] = v[1];
    for (int i = 0; i < 4; i++) ck_assert_int_eq(stk_dataset_writer_append(dw, v, &e), STK_OK);
    ck_assert_int_eq(stk_dataset_writer_finish(dw, &e), STK_OK);
}

START_TEST(sources_must_agree_on_the_fields)
{
    make_pool();
    char wide[1024], moved[1024];
    write_other(wide, sizeof wide, "wide", 8, 0);
    write_other(moved, sizeof moved, "moved", 5, 1);
    stk_source s[2];
    stk_source_init(&s[0]);
    stk_source_init(&s[1]);
    s[0].path = pool[0].dir;
    s[1].path = wide;
    stk_reader_options o = tu_reader_options(2, STK_ORDER_SHUFFLE);
    o.fields = "image";
    stk_error e;
    ck_assert_ptr_null(stk_reader_open_mix(s, 2, &o, &e));
    tu_assert_error(&e, STK_E_ARG, "source 1");
    tu_assert_error(&e, STK_E_ARG, "image u16[3,8]");
    s[1].path = moved;
    ck_assert_ptr_null(stk_reader_open_mix(s, 2, &o, &e));
    tu_assert_error(&e, STK_E_ARG, "at the same place");
    o.fields = "text";
    ck_assert_ptr_null(stk_reader_open_mix(s, 2, &o, &e));
    tu_assert_error(&e, STK_E_ARG, "has no field 'text'");
    s[1].path = "/nonexistent/stoker-mix";
    ck_assert_ptr_null(stk_reader_open_mix(s, 2, &o, &e));
    tu_assert_error(&e, STK_E_IO, "source 1");
    /* kinds: weights for all or none; one source of an open dataset */
    stk_dataset *ds = stk_dataset_open(pool[1].dir, &e);
    ck_assert_ptr_nonnull(ds);
    s[1].path = NULL;
    s[1].dataset = ds;
    s[1].kind = STK_MIX_REPEAT;
    o.fields = NULL;
    ck_assert_ptr_null(stk_reader_open_mix(s, 2, &o, &e));
    tu_assert_error(&e, STK_E_ARG, "weights are for all sources or none");
    s[0].kind = STK_MIX_CHOOSE;
    s[0].value = 3;
    s[1].value = 0.5;
    stk_reader *r = stk_reader_open_mix(s, 2, &o, &e);
    ck_assert_msg(r != NULL, "%s", e.msg);
    ck_assert_uint_eq(stk_reader_batches_per_epoch(r), (3 + 9 + 1) / 2); /* 17 x 0.5 = 8.5 rounds to 9 */
    ck_assert_str_eq(stk_reader_source_path(r, 1), "");
    stk_reader_close(r);
    stk_dataset_close(ds); /* borrowed: still open after the reader */
    o.epoch_size = 10;
    ck_assert_ptr_null(stk_reader_open(pool[0].dir, &o, &e));
    tu_assert_error(&e, STK_E_ARG, "epoch_size");
    s[0].path = pool[0].dir; /* repeat and choose make their own epoch */
    s[1].path = pool[1].dir;
    s[1].dataset = NULL;
    ck_assert_ptr_null(stk_reader_open_mix(s, 2, &o, &e));
    tu_assert_error(&e, STK_E_ARG, "epoch_size is for weighted sources");
}
END_TEST

TU_MAIN("mix_reader", {.name = "mix_reader",
                       .timeout = 300,
                       .tests = {stream_matches_the_reference, one_dataset_twice_is_mapped_once,
                                 counts_and_proportions, resume_into_another_world_size,
                                 restore_refuses_another_mixture, sources_must_agree_on_the_fields}})
