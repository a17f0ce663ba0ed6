/*
 * tests/reader/test_orders.c - libstoker's orders and batching reader
 * against ref_order.c, an independent reading of spec/ORDERS.md: which
 * records land in which batch for every order, tail policy, thread count,
 * prefetch depth, rank and world size; elastic world sizes; save / format /
 * parse / restore (also into another world size); seek; field selection;
 * rank and world size from the environment.
 *
 * The datasets are tiny: field `x` (u64) of record i holds i, `label` (i64)
 * and `image` (u8[8,8,3]) are functions of i, so every batch's bytes are
 * checked against its record indices too.
 */
#define STOKER_ADVANCED_API /* stk_order_record, stk_reader_quasi_block_records */
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "expect.h"
#include "ref_order.h"


_Static_assert((int)REF_SEQUENTIAL == (int)STK_ORDER_SEQUENTIAL &&
                   (int)REF_SHUFFLE == (int)STK_ORDER_SHUFFLE && (int)REF_QUASI == (int)STK_ORDER_QUASI,
               "order numbers");
_Static_assert((int)REF_PAD == (int)STK_TAIL_PAD && (int)REF_DROP == (int)STK_TAIL_DROP &&
                   (int)REF_PARTIAL == (int)STK_TAIL_PARTIAL,
               "tail numbers");

#define U(x) ((unsigned long long)(x))
enum { IMG = 8 * 8 * 3 };
static const char *const ORDER_NAME[] = {"sequential", "shuffle", "quasi"};
static const char *const TAIL_NAME[] = {"pad", "drop", "partial"};

/* ------------------------------------------------------------ records */

static int64_t rec_label(uint64_t i) { return (int64_t)((i * 7919) % 1000) - 500; }
static void rec_image(uint8_t *img, uint64_t i) { tu_fill(img, IMG, 0xabc000 + i); }

static void test_schema(stk_schema *s)
{
    stk_error e;
    const uint64_t shape[3] = {8, 8, 3};
    stk_schema_init(s);
    ck_assert_int_eq(stk_schema_add_tensor(s, "x", STK_DT_U64, 0, NULL, &e), STK_OK);
    ck_assert_int_eq(stk_schema_add_tensor(s, "label", STK_DT_I64, 0, NULL, &e), STK_OK);
    ck_assert_int_eq(stk_schema_add_tensor(s, "image", STK_DT_U8, 3, shape, &e), STK_OK);
}

typedef struct {
    uint64_t x;
    int64_t label;
    uint8_t image[IMG];
    stk_value v[3];
} test_record;

static void make_record(test_record *r, uint64_t i)
{
    r->x = i;
    r->label = rec_label(i);
    rec_image(r->image, i);
    r->v[0] = (stk_value){&r->x, 8};
    r->v[1] = (stk_value){&r->label, 8};
    r->v[2] = (stk_value){r->image, IMG};
}

/* ------------------------------------------------------------ datasets */

typedef struct {
    char dir[TU_PATH];
    uint64_t n;
    uint64_t fingerprint;
    uint64_t avg; /* sum of shard file sizes / n (integer) */
    int made;
} test_ds;

static test_ds DS_A; /* 23 records, dataset writer: shards 6 + 6 + 6 + 5 */
static test_ds DS_B; /* 61 records, hand-made manifest: shards 17 + 1 + 30 + 13 */

static void ds_finish(test_ds *d)
{
    stk_error e;
    stk_manifest *m = stk_manifest_load(d->dir, &e);
    expect(m != NULL, "%s", e.msg);
    uint64_t sum = 0;
    for (size_t i = 0; i < m->nshards; i++) sum += m->shards[i].file_size;
    d->n = m->record_count;
    d->fingerprint = m->fingerprint;
    d->avg = sum / d->n;
    stk_manifest_free(m);
    d->made = 1;
}

static const test_ds *ds_a(void)
{
    if (DS_A.made) return &DS_A;
    stk_schema s;
    stk_error e;
    test_schema(&s);
    tu_scratch(DS_A.dir, sizeof DS_A.dir, "ds_a");
    stk_dataset_options o;
    memset(&o, 0, sizeof o);
    o.records_per_shard = 6;
    stk_dataset_writer *dw = stk_dataset_writer_create(DS_A.dir, &s, &o, &e);
    expect(dw != NULL, "%s", e.msg);
    for (uint64_t i = 0; i < 23; i++) {
        test_record r;
        make_record(&r, i);
        expect(stk_dataset_writer_append(dw, r.v, &e) == STK_OK, "%s", e.msg);
    }
    expect(stk_dataset_writer_finish(dw, &e) == STK_OK, "%s", e.msg);
    ds_finish(&DS_A);
    ck_assert_uint_eq(DS_A.n, 23);
    return &DS_A;
}

static const test_ds *ds_b(void)
{
    if (DS_B.made) return &DS_B;
    static const uint64_t counts[4] = {17, 1, 30, 13};
    stk_error e;
    tu_scratch(DS_B.dir, sizeof DS_B.dir, "ds_b");
    stk_manifest *m = tu_manifest_new(4);
    test_schema(&m->schema);
    uint64_t first = 0;
    for (size_t k = 0; k < 4; k++) {
        char name[32], path[TU_PATH];
        snprintf(name, sizeof name, "b-%zu.stk", k);
        tu_join(path, sizeof path, DS_B.dir, name);
        stk_writer *w = stk_writer_create(path, &m->schema, &e);
        expect(w != NULL, "%s", e.msg);
        for (uint64_t i = first; i < first + counts[k]; i++) {
            test_record r;
            make_record(&r, i);
            expect(stk_writer_append(w, r.v, &e) == STK_OK, "%s", e.msg);
        }
        stk_shard_info info;
        expect(stk_writer_finish(w, &info, &e) == STK_OK, "%s", e.msg);
        m->shards[k] =
            (stk_shard_entry){strdup(name), info.records, info.file_size, info.file_hash, info.index_hash};
        first += counts[k];
    }
    expect(stk_manifest_commit(m, DS_B.dir, &e) == STK_OK, "%s", e.msg);
    stk_manifest_free(m);
    ds_finish(&DS_B);
    ck_assert_uint_eq(DS_B.n, 61);
    return &DS_B;
}

/* quasi_block_bytes that gives K records per block whether the library
 * computes K as bytes / (size / N) or as bytes * N / size (the spec's
 * formula leaves the rounding open): K avg + avg / 2 with avg >> K. */
static uint64_t qbb_for(const test_ds *d, uint64_t K)
{
    ck_assert_uint_gt(d->avg / 2, K);
    return K * d->avg + d->avg / 2;
}

/* ------------------------------------------------------------ reference stream */

typedef struct {
    int order, tail;
    uint64_t n, seed, K, Wq, G;
    uint32_t B, r;
    uint64_t epoch; /* cached epoch in ord, UINT64_MAX: none */
    uint64_t *ord;
} ref_stream;

static void rs_init(ref_stream *rs, uint64_t n, const stk_reader_options *o, uint64_t K, uint64_t Wq)
{
    memset(rs, 0, sizeof *rs);
    rs->order = o->order;
    rs->tail = o->tail;
    rs->n = n;
    rs->seed = o->seed;
    rs->K = K;
    rs->Wq = Wq;
    rs->B = o->batch_size;
    rs->r = (uint32_t)o->rank;
    rs->G = (uint64_t)o->batch_size * (uint64_t)o->world_size;
    rs->epoch = UINT64_MAX;
    rs->ord = malloc(n * sizeof *rs->ord);
    ck_assert_ptr_nonnull(rs->ord);
}

static void rs_free(ref_stream *rs) { free(rs->ord); }

static uint64_t rs_bpe(const ref_stream *rs) { return ref_batches_per_epoch(rs->n, rs->G, rs->tail); }

static uint32_t rs_batch(ref_stream *rs, uint64_t e, uint64_t j, uint64_t *out)
{
    if (rs->epoch != e) {
        ref_epoch_order(rs->order, rs->n, rs->seed, e, rs->K, rs->Wq, rs->ord);
        rs->epoch = e;
    }
    return ref_rank_batch(rs->ord, rs->n, rs->G, rs->B, rs->r, rs->tail, j, out);
}

/* ------------------------------------------------------------ readers */

static stk_reader_options ropts(int order, int tail, uint32_t B, int rank, int world, uint64_t seed)
{
    stk_reader_options o;
    stk_reader_options_init(&o);
    o.order = order;
    o.tail = tail;
    o.batch_size = B;
    o.rank = rank;
    o.world_size = world;
    o.seed = seed;
    o.threads = 1;
    o.prefetch = 1;
    return o;
}

/* Open with quasi parameters K, Wq (ignored for other orders; Wq 0: the
 * default 64) and a reference stream for the same options. */
static stk_reader *open_ref(const test_ds *d, stk_reader_options *o, uint64_t K, uint32_t Wq, ref_stream *rs)
{
    stk_error e = {0, ""};
    if (o->order == STK_ORDER_QUASI) {
        o->quasi_block_bytes = qbb_for(d, K);
        o->quasi_window = Wq;
    }
    stk_reader *r = stk_reader_open(d->dir, o, &e);
    expect(r != NULL, "open (%s, %s, B=%u, rank %d/%d): %s", ORDER_NAME[o->order], TAIL_NAME[o->tail],
           o->batch_size, o->rank, o->world_size, e.msg);
    if (o->order == STK_ORDER_QUASI)
        expect(stk_reader_quasi_block_records(r) == K, "quasi K: %llu, expected %llu (bytes %llu, avg %llu)",
               U(stk_reader_quasi_block_records(r)), U(K), U(o->quasi_block_bytes), U(d->avg));
    else ck_assert_uint_eq(stk_reader_quasi_block_records(r), 0);
    if (rs) rs_init(rs, d->n, o, K, Wq ? Wq : 64);
    return r;
}

/* The batch's epoch, index, size, records and every selected field's bytes
 * equal rank rs->r's batch j of epoch e. nfields: how many fields selected
 * (3: all; then x, label, image in schema order). */
static void check_batch(const stk_batch *b, ref_stream *rs, uint64_t e, uint64_t j, unsigned nfields,
                        const char *ctx)
{
    uint64_t want[256];
    expect(rs->B <= 256, "rs->B <= 256");
    expect(b != NULL, "%s: no batch for epoch %llu batch %llu", ctx, U(e), U(j));
    expect(b->epoch == e && b->index == j, "%s: got batch (epoch %llu, index %llu), expected (%llu, %llu)",
           ctx, U(b->epoch), U(b->index), U(e), U(j));
    uint32_t k = rs_batch(rs, e, j, want);
    expect(b->size == k, "%s: N=%llu seed=%llu epoch %llu batch %llu: size %u, expected %u", ctx, U(rs->n),
           U(rs->seed), U(e), U(j), b->size, k);
    for (uint32_t i = 0; i < k; i++) {
        uint64_t p = j * rs->G + (uint64_t)rs->r * rs->B + i;
        expect(b->records[i] == want[i],
               "%s: N=%llu seed=%llu K=%llu Wq=%llu G=%llu rank %u epoch %llu batch %llu slot %u "
               "(position %llu): record %llu, expected %llu",
               ctx, U(rs->n), U(rs->seed), U(rs->K), U(rs->Wq), U(rs->G), rs->r, U(e), U(j), i, U(p),
               U(b->records[i]), U(want[i]));
    }
    expect(b->nfields == nfields, "%s: %u fields, expected %u", ctx, b->nfields, nfields);
    for (unsigned f = 0; f < b->nfields; f++) {
        const stk_batch_field *bf = &b->fields[f];
        expect_eq(bf->kind, STK_KIND_TENSOR);
        expect(bf->values == NULL, "bf->values == NULL");
        expect(bf->shape[0] == k, "%s: field %s shape[0] %llu, size %u", ctx, bf->name, U(bf->shape[0]), k);
        if (strcmp(bf->name, "x") == 0) {
            expect_eq(bf->dtype, STK_DT_U64);
            expect_eq(bf->ndim, 1);
            expect_eq(bf->nbytes, 8ull * k);
            for (uint32_t i = 0; i < k; i++) {
                uint64_t x;
                memcpy(&x, (const uint8_t *)bf->data + 8 * i, 8);
                expect(x == b->records[i], "%s: epoch %llu batch %llu slot %u: x = %llu, records[] = %llu",
                       ctx, U(e), U(j), i, U(x), U(b->records[i]));
            }
        } else if (strcmp(bf->name, "label") == 0) {
            expect_eq(bf->dtype, STK_DT_I64);
            expect_eq(bf->ndim, 1);
            expect_eq(bf->nbytes, 8ull * k);
            for (uint32_t i = 0; i < k; i++) {
                int64_t l;
                memcpy(&l, (const uint8_t *)bf->data + 8 * i, 8);
                expect(l == rec_label(b->records[i]), "%s: label of record %llu", ctx, U(b->records[i]));
            }
        } else if (strcmp(bf->name, "image") == 0) {
            expect_eq(bf->dtype, STK_DT_U8);
            expect_eq(bf->ndim, 4);
            expect(bf->shape[1] == 8 && bf->shape[2] == 8 && bf->shape[3] == 3,
                   "bf->shape[1] == 8 && bf->shape[2] == 8 && bf->shape[3] == 3");
            expect_eq(bf->nbytes, (uint64_t)IMG * k);
            for (uint32_t i = 0; i < k; i++) {
                uint8_t img[IMG];
                rec_image(img, b->records[i]);
                expect(memcmp((const uint8_t *)bf->data + (size_t)IMG * i, img, IMG) == 0,
                       "%s: image of record %llu", ctx, U(b->records[i]));
            }
        } else {
            ck_abort_msg("%s: unexpected field %s", ctx, bf->name);
        }
    }
    if (nfields == 3) {
        expect(strcmp(b->fields[0].name, "x") == 0, "%s: field %s, expected %s", ctx, b->fields[0].name, "x");
        expect(strcmp(b->fields[1].name, "label") == 0, "%s: field %s, expected %s", ctx, b->fields[1].name,
               "label");
        expect(strcmp(b->fields[2].name, "image") == 0, "%s: field %s, expected %s", ctx, b->fields[2].name,
               "image");
    }
}

/* Read `epochs` whole epochs (set_epochs), each batch checked, then the end. */
static void read_epochs(stk_reader *r, ref_stream *rs, uint64_t epochs, const char *ctx)
{
    stk_error e = {0, ""};
    uint64_t bpe = rs_bpe(rs);
    expect(stk_reader_batches_per_epoch(r) == bpe, "%s: batches per epoch %llu, expected %llu", ctx,
           U(stk_reader_batches_per_epoch(r)), U(bpe));
    stk_reader_set_epochs(r, epochs);
    for (uint64_t ep = 0; ep < epochs; ep++)
        for (uint64_t j = 0; j < bpe; j++) {
            uint64_t pe, pb;
            stk_reader_position(r, &pe, &pb);
            expect(pe == ep && pb == j, "%s: position (%llu, %llu), expected (%llu, %llu)", ctx, U(pe), U(pb),
                   U(ep), U(j));
            const stk_batch *b = stk_reader_next(r, &e);
            expect(b != NULL, "%s: next at (%llu, %llu): %s", ctx, U(ep), U(j), e.msg);
            check_batch(b, rs, ep, j, 3, ctx);
        }
    const stk_batch *b = stk_reader_next(r, &e);
    expect(b == NULL, "%s: a batch (%llu, %llu) after %llu epochs", ctx, U(b->epoch), U(b->index), U(epochs));
    expect(e.code == STK_OK, "%s: end of stream with error %s", ctx, e.msg);
}

/* ================================================= 1. stk_order_record */

START_TEST(order_record_matches_reference)
{
    static const uint64_t NS[] = {1, 2, 3, 4, 5, 7, 8, 11, 13, 16, 17, 31, 32, 64, 97, 100, 128, 257, 1024};
    static const uint64_t SEEDS[] = {0, 1, 42, 0x8000000000000000ull, UINT64_MAX};
    static const uint64_t EPOCHS[] = {0, 1, 9, UINT64_MAX};
    static const uint32_t WQS[] = {1, 2, 3, 64};
    uint64_t *want = malloc(1024 * sizeof *want), *got = malloc(1024 * sizeof *got);
    unsigned char *seen = malloc(1024);
    uint64_t checked = 0;
    for (size_t a = 0; a < sizeof NS / sizeof NS[0]; a++) {
        uint64_t n = NS[a];
        for (size_t s = 0; s < sizeof SEEDS / sizeof SEEDS[0]; s++)
            for (size_t ei = 0; ei < sizeof EPOCHS / sizeof EPOCHS[0]; ei++)
                for (int order = 0; order < 3; order++) {
                    /* quasi: K in 1, 2, 3, 5, 7, n - 1, n, n + 5 x Wq; others: once with K = Wq = 0, once 5, 3 */
                    size_t nk = order == STK_ORDER_QUASI ? 8 : 2, nw = order == STK_ORDER_QUASI ? 4 : 1;
                    for (size_t kk = 0; kk < nk; kk++)
                        for (size_t ww = 0; ww < nw; ww++) {
                            uint64_t K;
                            uint32_t Wq;
                            if (order == STK_ORDER_QUASI) {
                                static const uint64_t KS[] = {1, 2, 3, 5, 7};
                                K = kk < 5 ? KS[kk] : kk == 5 ? (n > 1 ? n - 1 : 1) : kk == 6 ? n : n + 5;
                                Wq = WQS[ww];
                                if (n > 257 && kk < 2 && ww > 0) continue; /* keep it short */
                            } else {
                                K = kk ? 5 : 0;
                                Wq = kk ? 3 : 0;
                            }
                            ref_epoch_order(order, n, SEEDS[s], EPOCHS[ei], K ? K : 1, Wq ? Wq : 1, want);
                            memset(seen, 0, n);
                            for (uint64_t p = 0; p < n; p++) {
                                got[p] = stk_order_record(order, n, SEEDS[s], EPOCHS[ei], K, Wq, p);
                                expect(got[p] == want[p],
                                       "stk_order_record(%s, N=%llu, seed=%llu, epoch=%llu, K=%llu, Wq=%u, "
                                       "p=%llu) = %llu, reference %llu",
                                       ORDER_NAME[order], U(n), U(SEEDS[s]), U(EPOCHS[ei]), U(K), Wq, U(p),
                                       U(got[p]), U(want[p]));
                                expect(got[p] < n && !seen[got[p]], "got[p] < n && !seen[got[p]]");
                                seen[got[p]] = 1;
                                checked++;
                            }
                        }
                }
    }
    ck_assert_uint_gt(checked, 500000);
    /* Shuffle: another epoch or another seed is another permutation. */
    for (size_t a = 0; a < sizeof NS / sizeof NS[0]; a++) {
        uint64_t n = NS[a];
        if (n < 16) continue;
        uint64_t de = 0, ds = 0;
        for (uint64_t p = 0; p < n; p++) {
            uint64_t v = stk_order_record(STK_ORDER_SHUFFLE, n, 42, 3, 0, 0, p);
            de += v != stk_order_record(STK_ORDER_SHUFFLE, n, 42, 4, 0, 0, p);
            ds += v != stk_order_record(STK_ORDER_SHUFFLE, n, 43, 3, 0, 0, p);
        }
        expect(de > 0 && ds > 0, "N=%llu: shuffle ignores the epoch (%llu moved) or seed (%llu)", U(n), U(de),
               U(ds));
    }
    free(want);
    free(got);
    free(seen);
}
END_TEST

/* ================================================= 2. reader == reference */

START_TEST(reader_batches_match_reference)
{
    const test_ds *d = ds_a();
    static const uint32_t BWR[][3] = {{4, 1, 0}, {3, 2, 1}, {2, 3, 2}, {5, 2, 0},
                                      {1, 1, 0}, {7, 3, 1}, {6, 1, 0}};
    static const uint32_t KW[][2] = {{3, 2}, {4, 3}, {1, 1}, {5, 0}, {30, 1}, {2, 5}};
    static const unsigned THREADS[] = {1, 2, 4};
    unsigned combo = 0;
    for (int order = 0; order < 3; order++)
        for (int tail = 0; tail < 3; tail++)
            for (size_t t = 0; t < 3; t++)
                for (unsigned pf = 1; pf <= 8; pf++, combo++) {
                    const uint32_t *bwr = BWR[combo % 7];
                    const uint32_t *kw = KW[combo % 6];
                    stk_reader_options o =
                        ropts(order, tail, bwr[0], (int)bwr[2], (int)bwr[1], combo * 0x9e37ull);
                    o.threads = THREADS[t];
                    o.prefetch = pf;
                    o.verify = (int)(combo % 3);
                    char ctx[200];
                    snprintf(ctx, sizeof ctx,
                             "%s/%s threads=%u prefetch=%u B=%u rank %u/%u seed=%llu K=%u Wq=%u",
                             ORDER_NAME[order], TAIL_NAME[tail], o.threads, pf, bwr[0], bwr[2], bwr[1],
                             U(o.seed), kw[0], kw[1]);
                    ref_stream rs;
                    stk_reader *r = open_ref(d, &o, kw[0], kw[1], &rs);
                    const stk_reader_options *eff = stk_reader_get_options(r);
                    ck_assert_int_eq(eff->rank, (int)bwr[2]);
                    ck_assert_int_eq(eff->world_size, (int)bwr[1]);
                    read_epochs(r, &rs, 3, ctx);
                    stk_reader_close(r);
                    rs_free(&rs);
                }
}
END_TEST

/* Without set_epochs the stream does not end, and crosses epochs in order. */
START_TEST(endless_stream_and_release)
{
    const test_ds *d = ds_b();
    for (int order = 0; order < 3; order++) {
        stk_reader_options o = ropts(order, STK_TAIL_PARTIAL, 7, 1, 2, 77);
        o.threads = 2;
        o.prefetch = 3;
        ref_stream rs;
        stk_reader *r = open_ref(d, &o, 4, 3, &rs);
        uint64_t bpe = rs_bpe(&rs);
        ck_assert_uint_eq(bpe, 5);
        stk_error e;
        for (uint64_t k = 0; k < 5 * bpe + 2; k++) {
            const stk_batch *b = stk_reader_next(r, &e);
            expect(b != NULL, "%s", e.msg);
            check_batch(b, &rs, k / bpe, k % bpe, 3, ORDER_NAME[order]);
            if (k % 2) stk_reader_release(r);
        }
        stk_reader_close(r);
        rs_free(&rs);
    }
    stk_reader_close(NULL);
}
END_TEST

/* A sequential batch inside one shard points into the mapping (reader.h):
 * on the mmap path, which this test pins (test_orders_direct runs the suite
 * with STOKER_IO=direct, which applies to io = auto only). */
START_TEST(sequential_zero_copy)
{
    const test_ds *d = ds_b(); /* shards [0,17) [17,18) [18,48) [48,61) */
    stk_reader_options o = ropts(STK_ORDER_SEQUENTIAL, STK_TAIL_PARTIAL, 3, 0, 1, 0);
    o.io = STK_IO_MMAP;
    ref_stream rs;
    stk_reader *r = open_ref(d, &o, 0, 0, &rs);
    stk_error e;
    stk_reader_set_epochs(r, 1);
    for (uint64_t j = 0; j < rs_bpe(&rs); j++) {
        const stk_batch *b = stk_reader_next(r, &e);
        check_batch(b, &rs, 0, j, 3, "zero-copy");
        uint64_t lo = b->records[0], hi = b->records[b->size - 1];
        int inside = (hi < 17) || (lo >= 18 && hi < 48) || lo >= 48;
        if (inside)
            for (unsigned f = 0; f < 3; f++)
                expect(b->fields[f].zero_copy, "batch %llu [%llu, %llu] field %s copied", U(j), U(lo), U(hi),
                       b->fields[f].name);
    }
    stk_reader_close(r);
    rs_free(&rs);
}
END_TEST

/* Pad with G > N: positions p >= 2N. The spec says p reads record(p - N),
 * which is only defined for p < 2N; the reference reads record(p mod N), as
 * PyTorch's DistributedSampler repeats its indices (see the report). */
START_TEST(pad_wraps_beyond_one_epoch)
{
    const test_ds *d = ds_a(); /* 23 records; G = 48: positions 23..47 wrap, 46 and 47 twice */
    for (int order = 0; order < 3; order++)
        for (uint32_t rank = 0; rank < 6; rank++) {
            stk_reader_options o = ropts(order, STK_TAIL_PAD, 8, (int)rank, 6, 3);
            ref_stream rs;
            stk_reader *r = open_ref(d, &o, 2, 3, &rs);
            read_epochs(r, &rs, 2, "pad with G > N");
            stk_reader_close(r);
            rs_free(&rs);
        }
}
END_TEST

/* quasi_block_bytes 0: K = max(1, 4 MiB / (sum of file sizes / N)) in
 * integer arithmetic; quasi_window 0: 64. Both are in the state. */
START_TEST(quasi_defaults)
{
    const test_ds *d = ds_a();
    stk_reader_options o = ropts(STK_ORDER_QUASI, STK_TAIL_PAD, 2, 0, 1, 11);
    stk_error e;
    stk_reader *r = stk_reader_open(d->dir, &o, &e);
    expect(r != NULL, "%s", e.msg);
    uint64_t K = (4ull << 20) / d->avg;
    expect(stk_reader_quasi_block_records(r) == K,
           "default K %llu, expected 4 MiB / (%llu bytes per record) = %llu",
           U(stk_reader_quasi_block_records(r)), U(d->avg), U(K));
    stk_reader_state st;
    stk_reader_save(r, &st);
    ck_assert_uint_eq(st.quasi_block_records, K);
    ck_assert_uint_eq(st.quasi_window, 64);
    ref_stream rs;
    rs_init(&rs, d->n, &o, K, 64);
    read_epochs(r, &rs, 2, "quasi defaults");
    stk_reader_close(r);
    rs_free(&rs);
    /* a block smaller than a record: K = 1 */
    o.quasi_block_bytes = 1;
    o.quasi_window = 4;
    r = stk_reader_open(d->dir, &o, &e);
    expect(r != NULL, "%s", e.msg);
    ck_assert_uint_eq(stk_reader_quasi_block_records(r), 1);
    rs_init(&rs, d->n, &o, 1, 4);
    read_epochs(r, &rs, 2, "quasi K=1");
    stk_reader_close(r);
    rs_free(&rs);
}
END_TEST

/* ================================================= 3. across ranks */

START_TEST(ranks_cover_the_epoch)
{
    const test_ds *d = ds_a();
    const uint64_t n = d->n;
    static const uint32_t BW[][2] = {{2, 1}, {2, 2}, {2, 3}, {2, 8}, {3, 1}, {3, 2}, {3, 3}, {3, 8}, {5, 3}};
    for (int order = 0; order < 3; order++)
        for (int tail = 0; tail < 3; tail++)
            for (size_t c = 0; c < sizeof BW / sizeof BW[0]; c++) {
                uint32_t B = BW[c][0], W = BW[c][1];
                uint64_t G = (uint64_t)B * W;
                if (tail == STK_TAIL_DROP && G > n)
                    continue; /* refused: see drop_smaller_than_global_batch */
                const uint64_t epochs = 2;
                unsigned count[2][23];
                memset(count, 0, sizeof count);
                uint64_t bpe = 0;
                ref_stream all = {0}; /* the global stream, for the pad duplicates */
                for (uint32_t rank = 0; rank < W; rank++) {
                    char ctx[160];
                    snprintf(ctx, sizeof ctx, "%s/%s B=%u rank %u/%u", ORDER_NAME[order], TAIL_NAME[tail], B,
                             rank, W);
                    stk_reader_options o = ropts(order, tail, B, (int)rank, (int)W, 1234);
                    ref_stream rs;
                    stk_reader *r = open_ref(d, &o, 3, 2, &rs);
                    if (rank == 0) {
                        bpe = stk_reader_batches_per_epoch(r);
                        ck_assert_uint_eq(bpe, ref_batches_per_epoch(n, G, tail));
                        all = rs;
                        all.ord = malloc(n * sizeof *all.ord);
                        all.epoch = UINT64_MAX;
                    }
                    expect(stk_reader_batches_per_epoch(r) == bpe,
                           "%s: %llu batches per epoch, rank 0 has %llu", ctx,
                           U(stk_reader_batches_per_epoch(r)), U(bpe));
                    stk_reader_set_epochs(r, epochs);
                    stk_error e;
                    const stk_batch *b;
                    uint64_t got = 0;
                    while ((b = stk_reader_next(r, &e)) != NULL) {
                        check_batch(b, &rs, got / bpe, got % bpe, 3, ctx);
                        for (uint32_t i = 0; i < b->size; i++) count[b->epoch][b->records[i]]++;
                        got++;
                    }
                    expect(e.code == STK_OK, "%s", e.msg);
                    expect(got == epochs * bpe, "%s: %llu batches in %llu epochs, expected %llu", ctx, U(got),
                           U(epochs), U(epochs * bpe));
                    stk_reader_close(r);
                    rs_free(&rs);
                }
                for (uint64_t ep = 0; ep < epochs; ep++) {
                    uint64_t total = 0;
                    unsigned want[23];
                    for (uint64_t i = 0; i < n; i++) want[i] = tail == STK_TAIL_PARTIAL ? 1 : 0;
                    if (tail == STK_TAIL_PAD) {
                        for (uint64_t i = 0; i < n; i++) want[i] = 1;
                        /* the wrapped positions p >= n read record(p - n) */
                        ref_epoch_order(order, n, 1234, ep, 3, 2, all.ord);
                        for (uint64_t p = n; p < bpe * G; p++) want[all.ord[p - n]]++;
                    }
                    for (uint64_t i = 0; i < n; i++) {
                        total += count[ep][i];
                        if (tail == STK_TAIL_DROP)
                            expect(count[ep][i] <= 1, "%s/drop G=%llu epoch %llu: record %llu read %u times",
                                   ORDER_NAME[order], U(G), U(ep), U(i), count[ep][i]);
                        else
                            expect(count[ep][i] == want[i],
                                   "%s/%s B=%u W=%u epoch %llu: record %llu read %u times, expected %u",
                                   ORDER_NAME[order], TAIL_NAME[tail], B, W, U(ep), U(i), count[ep][i],
                                   want[i]);
                    }
                    uint64_t want_total = tail == STK_TAIL_DROP  ? n / G * G
                                          : tail == STK_TAIL_PAD ? bpe * G
                                                                 : n;
                    expect(total == want_total, "%s/%s B=%u W=%u: %llu records in epoch %llu, expected %llu",
                           ORDER_NAME[order], TAIL_NAME[tail], B, W, U(total), U(ep), U(want_total));
                }
                free(all.ord);
            }
}
END_TEST

START_TEST(drop_smaller_than_global_batch)
{
    const test_ds *d = ds_a(); /* 23 records */
    stk_reader_options o = ropts(STK_ORDER_SHUFFLE, STK_TAIL_DROP, 3, 0, 8, 1);
    stk_error e = {0, ""};
    stk_reader *r = stk_reader_open(d->dir, &o, &e);
    if (r) stk_reader_close(r);
    expect(r == NULL, "drop with G = 24 > N = 23 opened");
    ck_assert_int_eq(e.code, STK_E_ARG);
    /* G == N is one batch, dropping nothing. */
    o = ropts(STK_ORDER_SHUFFLE, STK_TAIL_DROP, 23, 0, 1, 1);
    ref_stream rs;
    r = open_ref(d, &o, 0, 0, &rs);
    read_epochs(r, &rs, 2, "drop G=N");
    stk_reader_close(r);
    rs_free(&rs);
}
END_TEST

START_TEST(bad_options_refused)
{
    const test_ds *d = ds_a();
    struct {
        uint32_t B;
        int rank, world, order, tail;
        const char *what;
    } bad[] = {
        {0, 0, 1, 0, 0, "batch_size"}, {2, 2, 2, 0, 0, "rank"}, {2, 0, 0, 0, 0, "world"},
        {2, 0, 1, 9, 0, "order"},      {2, 0, 1, 0, 9, "tail"}, {2, 0, 1, 0, 4, "tail"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        stk_reader_options o = ropts(bad[i].order, bad[i].tail, bad[i].B, bad[i].rank, bad[i].world, 0);
        stk_error e = {0, ""};
        stk_reader *r = stk_reader_open(d->dir, &o, &e);
        if (r) stk_reader_close(r);
        expect(r == NULL, "opened with bad %s (case %zu: B=%u rank %d world %d order %d tail %d)",
               bad[i].what, i, bad[i].B, bad[i].rank, bad[i].world, bad[i].order, bad[i].tail);
        expect(e.code == STK_E_ARG, "bad %s: code %d (%s)", bad[i].what, e.code, e.msg);
    }
}
END_TEST

/* ================================================= 4. elastic */

START_TEST(elastic_same_global_batches)
{
    const test_ds *d = ds_b(); /* 61 records, G = 12 */
    static const uint32_t BW[][2] = {{12, 1}, {6, 2}, {4, 3}, {3, 4}};
    enum { EP = 2, MAXB = 6 };
    for (int order = 0; order < 3; order++)
        for (int tail = 0; tail < 3; tail++) {
            uint64_t glob[4][EP * MAXB][12];
            unsigned gsize[4][EP * MAXB];
            uint64_t bpe = ref_batches_per_epoch(61, 12, tail);
            ck_assert_uint_le(bpe, MAXB);
            for (size_t c = 0; c < 4; c++) {
                uint32_t B = BW[c][0], W = BW[c][1];
                memset(gsize[c], 0, sizeof gsize[c]);
                for (uint32_t rank = 0; rank < W; rank++) {
                    char ctx[160];
                    snprintf(ctx, sizeof ctx, "elastic %s/%s B=%u rank %u/%u", ORDER_NAME[order],
                             TAIL_NAME[tail], B, rank, W);
                    stk_reader_options o = ropts(order, tail, B, (int)rank, (int)W, 99);
                    o.threads = 2;
                    ref_stream rs;
                    stk_reader *r = open_ref(d, &o, 5, 2, &rs);
                    ck_assert_uint_eq(stk_reader_batches_per_epoch(r), bpe);
                    stk_reader_set_epochs(r, EP);
                    stk_error e;
                    for (uint64_t k = 0; k < EP * bpe; k++) {
                        const stk_batch *b = stk_reader_next(r, &e);
                        expect(b != NULL, "%s: %s", ctx, e.msg);
                        check_batch(b, &rs, k / bpe, k % bpe, 3, ctx);
                        for (uint32_t i = 0; i < b->size; i++) glob[c][k][gsize[c][k]++] = b->records[i];
                    }
                    ck_assert_ptr_null(stk_reader_next(r, &e));
                    stk_reader_close(r);
                    rs_free(&rs);
                }
                for (uint64_t k = 0; k < EP * bpe; k++) {
                    expect(gsize[c][k] == gsize[0][k],
                           "elastic %s/%s: global batch %llu has %u records with W=%u, %u with W=1",
                           ORDER_NAME[order], TAIL_NAME[tail], U(k), gsize[c][k], W, gsize[0][k]);
                    for (unsigned i = 0; i < gsize[c][k]; i++)
                        expect(glob[c][k][i] == glob[0][k][i],
                               "elastic %s/%s: global batch %llu slot %u: %llu with B=%u W=%u, %llu with "
                               "B=12 W=1",
                               ORDER_NAME[order], TAIL_NAME[tail], U(k), i, U(glob[c][k][i]), B, W,
                               U(glob[0][k][i]));
                }
            }
        }
}
END_TEST

/* ================================================= 5. save / restore */

static void state_eq(const stk_reader_state *a, const stk_reader_state *b, const char *ctx)
{
    expect(a->fingerprint == b->fingerprint && a->order == b->order && a->seed == b->seed &&
               a->global_batch == b->global_batch && a->tail == b->tail &&
               a->quasi_block_records == b->quasi_block_records && a->quasi_window == b->quasi_window &&
               a->epoch == b->epoch && a->batch == b->batch,
           "%s: states differ", ctx);
}

static void roundtrip(const stk_reader_state *st, stk_reader_state *back, const char *ctx)
{
    char buf[1024];
    size_t need = stk_reader_state_format(st, NULL, 0);
    size_t len = stk_reader_state_format(st, buf, sizeof buf);
    ck_assert_uint_eq(need, len);
    ck_assert_uint_eq(strlen(buf), len);
    expect(strchr(buf, '\n') == NULL, "%s: state has a newline: %s", ctx, buf);
    /* too small a buffer: returns what it needs, stays NUL-terminated */
    char small[8];
    ck_assert_uint_eq(stk_reader_state_format(st, small, sizeof small), len);
    ck_assert(memchr(small, 0, sizeof small) != NULL);
    stk_error e;
    memset(back, 0xa5, sizeof *back);
    expect(stk_reader_state_parse(buf, len, back, &e) == STK_OK, "%s: parse %s: %s", ctx, buf, e.msg);
    state_eq(st, back, ctx);
}

START_TEST(resume_equals_uninterrupted)
{
    const test_ds *d = ds_a(); /* 23 records, G = 8 */
    static const uint32_t NEW_BW[][2] = {{4, 2}, {2, 4}, {8, 1}, {1, 8}};
    for (int order = 0; order < 3; order++)
        for (int tail = 0; tail < 3; tail++) {
            uint64_t bpe = ref_batches_per_epoch(23, 8, tail);
            uint64_t ks[] = {0, 1, bpe - 1, bpe, bpe + 1, 2 * bpe - 1};
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                uint64_t k = ks[ki];
                char ctx[160];
                snprintf(ctx, sizeof ctx, "resume %s/%s after %llu batches", ORDER_NAME[order],
                         TAIL_NAME[tail], U(k));
                stk_reader_options o = ropts(order, tail, 4, 1, 2, 0xfeedull << 40);
                o.threads = 2;
                o.prefetch = 3;
                ref_stream rs;
                stk_reader *r = open_ref(d, &o, 3, 2, &rs);
                stk_error e;
                for (uint64_t i = 0; i < k; i++)
                    check_batch(stk_reader_next(r, &e), &rs, i / bpe, i % bpe, 3, ctx);
                stk_reader_state st, back;
                stk_reader_save(r, &st);
                expect(st.epoch == k / bpe && st.batch == k % bpe, "%s: saved (%llu, %llu)", ctx, U(st.epoch),
                       U(st.batch));
                ck_assert_uint_eq(st.fingerprint, d->fingerprint);
                ck_assert_int_eq(st.order, order);
                ck_assert_int_eq(st.tail, tail);
                ck_assert_uint_eq(st.seed, o.seed);
                ck_assert_uint_eq(st.global_batch, 8);
                if (order == STK_ORDER_QUASI) {
                    ck_assert_uint_eq(st.quasi_block_records, 3);
                    ck_assert_uint_eq(st.quasi_window, 2);
                }
                roundtrip(&st, &back, ctx);
                /* The saved reader goes on as if nothing happened. */
                for (uint64_t i = k; i < k + bpe + 1; i++)
                    check_batch(stk_reader_next(r, &e), &rs, i / bpe, i % bpe, 3, ctx);
                stk_reader_close(r);
                rs_free(&rs);
                /* New readers, every rank of several world sizes. */
                for (size_t c = 0; c < sizeof NEW_BW / sizeof NEW_BW[0]; c++)
                    for (uint32_t rank = 0; rank < NEW_BW[c][1]; rank++) {
                        char ctx2[400];
                        snprintf(ctx2, sizeof ctx2, "%s, restored into B=%u rank %u/%u", ctx, NEW_BW[c][0],
                                 rank, NEW_BW[c][1]);
                        stk_reader_options o2 =
                            ropts(order, tail, NEW_BW[c][0], (int)rank, (int)NEW_BW[c][1], o.seed);
                        o2.threads = 1 + rank % 2;
                        ref_stream rs2;
                        stk_reader *r2 = open_ref(d, &o2, 3, 2, &rs2);
                        if (rank % 2) { /* a reader that already moved */
                            check_batch(stk_reader_next(r2, &e), &rs2, 0, 0, 3, ctx2);
                        }
                        expect(stk_reader_restore(r2, &back, &e) == STK_OK, "%s: %s", ctx2, e.msg);
                        uint64_t pe, pb;
                        stk_reader_position(r2, &pe, &pb);
                        ck_assert(pe == k / bpe && pb == k % bpe);
                        stk_reader_set_epochs(r2, 3);
                        for (uint64_t i = k; i < 3 * bpe; i++)
                            check_batch(stk_reader_next(r2, &e), &rs2, i / bpe, i % bpe, 3, ctx2);
                        ck_assert_ptr_null(stk_reader_next(r2, &e));
                        ck_assert_int_eq(e.code, STK_OK);
                        stk_reader_close(r2);
                        rs_free(&rs2);
                    }
            }
        }
}
END_TEST

static void expect_restore_refused(const test_ds *d, stk_reader_options o, const stk_reader_state *st,
                                   const char *sub, const char *ctx)
{
    stk_reader *r = open_ref(d, &o, 3, 2, NULL);
    stk_error e = {0, ""};
    int rc = stk_reader_restore(r, st, &e);
    expect(rc == STK_E_ARG && e.code == STK_E_ARG, "%s: restore returned %d (%s)", ctx, rc, e.msg);
    if (sub) expect(strstr(e.msg, sub) != NULL, "%s: message \"%s\" lacks \"%s\"", ctx, e.msg, sub);
    stk_reader_close(r);
}

START_TEST(restore_refuses_other_streams)
{
    const test_ds *a = ds_a(), *b = ds_b();
    stk_reader_options o = ropts(STK_ORDER_QUASI, STK_TAIL_PAD, 4, 0, 2, 5);
    stk_reader *r = open_ref(a, &o, 3, 2, NULL);
    stk_error e;
    ck_assert_ptr_nonnull(stk_reader_next(r, &e));
    stk_reader_state st;
    stk_reader_save(r, &st);
    stk_reader_close(r);
    /* the same stream restores (sanity) */
    stk_reader *ok = open_ref(a, &o, 3, 2, NULL);
    expect(stk_reader_restore(ok, &st, &e) == STK_OK, "%s", e.msg);
    stk_reader_close(ok);

    stk_reader_options x = o;
    x.seed = 6;
    expect_restore_refused(a, x, &st, "seed", "other seed");
    x = o;
    x.batch_size = 3; /* G = 6 */
    expect_restore_refused(a, x, &st, "global", "other global batch");
    x = o;
    x.world_size = 1; /* G = 4 */
    expect_restore_refused(a, x, &st, "global", "other world size, other global batch");
    stk_reader_state bad = st;
    bad.fingerprint ^= 1;
    expect_restore_refused(a, o, &bad, "fingerprint", "other fingerprint");
    expect_restore_refused(b, o, &st, "fingerprint", "other dataset");
    x = o;
    x.order = STK_ORDER_SHUFFLE;
    expect_restore_refused(a, x, &st, "order", "other order");
    x = o;
    x.tail = STK_TAIL_PARTIAL;
    expect_restore_refused(a, x, &st, "tail", "other tail");
    x = o;
    x.quasi_block_bytes = qbb_for(a, 4);
    stk_reader *r4 = stk_reader_open(a->dir, &x, &e);
    ck_assert_ptr_nonnull(r4);
    ck_assert_uint_eq(stk_reader_quasi_block_records(r4), 4);
    ck_assert_int_eq(stk_reader_restore(r4, &st, &e), STK_E_ARG);
    stk_reader_close(r4);
    x = o;
    x.quasi_window = 3;
    x.quasi_block_bytes = qbb_for(a, 3);
    stk_reader *rw = stk_reader_open(a->dir, &x, &e);
    ck_assert_ptr_nonnull(rw);
    ck_assert_int_eq(stk_reader_restore(rw, &st, &e), STK_E_ARG);
    stk_reader_close(rw);
}
END_TEST

START_TEST(state_json)
{
    /* The spec's example line parses to its values and formats back to itself. */
    const char *ex = "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\","
                     "\"seed\":\"42\",\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,"
                     "\"quasi_window\":0,\"epoch\":3,\"batch\":117}";
    stk_reader_state st;
    stk_error e;
    expect(stk_reader_state_parse(ex, strlen(ex), &st, &e) == STK_OK, "%s", e.msg);
    ck_assert_uint_eq(st.fingerprint, 0x0123456789abcdefull);
    ck_assert_int_eq(st.order, STK_ORDER_SHUFFLE);
    ck_assert_uint_eq(st.seed, 42);
    ck_assert_uint_eq(st.global_batch, 512);
    ck_assert_int_eq(st.tail, STK_TAIL_PAD);
    ck_assert_uint_eq(st.quasi_block_records, 0);
    ck_assert_uint_eq(st.quasi_window, 0);
    ck_assert_uint_eq(st.epoch, 3);
    ck_assert_uint_eq(st.batch, 117);
    char buf[512];
    stk_reader_state_format(&st, buf, sizeof buf);
    ck_assert_str_eq(buf, ex);

    /* Full ranges round-trip. */
    /* (epoch, batch and the other JSON numbers kept below 2^63: see the report) */
    stk_reader_state big = {
        0xfedcba9876543210ull, STK_ORDER_QUASI, UINT64_MAX, 1ull << 40, STK_TAIL_PARTIAL, 123456789,
        4000000000u,           INT64_MAX,       1ull << 50};
    stk_reader_state back;
    roundtrip(&big, &back, "big");
    stk_reader_state_format(&big, buf, sizeof buf);
    expect(strstr(buf, "\"seed\":\"18446744073709551615\"") != NULL, "%s", buf);
    expect(strstr(buf, "\"fingerprint\":\"fedcba9876543210\"") != NULL, "%s", buf);
    expect(strstr(buf, "\"order\":\"quasi\"") && strstr(buf, "\"tail\":\"partial\""), "%s", buf);
    stk_reader_state small = {0, STK_ORDER_SEQUENTIAL, 0, 1, STK_TAIL_DROP, 0, 0, 0, 0};
    roundtrip(&small, &back, "small");
    stk_reader_state_format(&small, buf, sizeof buf);
    expect(strstr(buf, "\"fingerprint\":\"0000000000000000\"") != NULL, "%s", buf);

    /* Only the first len bytes count. */
    char longer[600];
    snprintf(longer, sizeof longer, "%sGARBAGE", ex);
    ck_assert_int_eq(stk_reader_state_parse(longer, strlen(ex), &st, &e), STK_OK);

    /* Malformed: each refused with an error code. */
    const char *bad[] = {
        "",
        "{",
        "not json",
        "[]",
        "{}",
        "null",
        /* wrong version */
        "{\"stoker_reader_state\":2,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":"
        "\"42\","
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3,"
        "\"batch\":117}",
        /* missing batch */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":"
        "\"42\","
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3}",
        /* short fingerprint */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123\",\"order\":\"shuffle\",\"seed\":\"42\","
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3,"
        "\"batch\":117}",
        /* non-hex fingerprint */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdeg\",\"order\":\"shuffle\",\"seed\":"
        "\"42\","
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3,"
        "\"batch\":117}",
        /* unknown order */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"random\",\"seed\":"
        "\"42\","
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3,"
        "\"batch\":117}",
        /* unknown tail */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":"
        "\"42\","
        "\"global_batch\":512,\"tail\":\"wrap\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3,"
        "\"batch\":117}",
        /* seed not a number */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":"
        "\"4x2\","
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3,"
        "\"batch\":117}",
        /* seed beyond 64 bits */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\","
        "\"seed\":\"18446744073709551616\",\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,"
        "\"quasi_window\":0,\"epoch\":3,\"batch\":117}",
        /* negative epoch */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":"
        "\"42\","
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":-3,"
        "\"batch\":117}",
        /* global batch 0 */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":"
        "\"42\","
        "\"global_batch\":0,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3,"
        "\"batch\":117}",
        /* batch as a string */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":"
        "\"42\","
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3,"
        "\"batch\":\"1\"}",
        /* upper-case fingerprint (the spec: lower-case) */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789ABCDEF\",\"order\":\"shuffle\",\"seed\":"
        "\"42\","
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3,"
        "\"batch\":117}",
        /* seed as a JSON number (the spec: a decimal string) */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":42,"
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3,"
        "\"batch\":117}",
        /* negative seed */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":\"-"
        "1\","
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3,"
        "\"batch\":117}",
        /* fractional epoch */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":"
        "\"42\","
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3.5,"
        "\"batch\":117}",
        /* quasi_window beyond 32 bits */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":"
        "\"42\","
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":4294967296,"
        "\"epoch\":3,\"batch\":117}",
        /* duplicate key */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":"
        "\"42\","
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3,"
        "\"batch\":117,\"batch\":5}",
        /* order as a number */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":1,\"seed\":\"42\","
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3,"
        "\"batch\":117}",
        /* trailing garbage inside len */
        "{\"stoker_reader_state\":1,\"fingerprint\":\"0123456789abcdef\",\"order\":\"shuffle\",\"seed\":"
        "\"42\","
        "\"global_batch\":512,\"tail\":\"pad\",\"quasi_block_records\":0,\"quasi_window\":0,\"epoch\":3,"
        "\"batch\":117}x",
    };
    char accepted[256] = "";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        stk_error be = {0, ""};
        int rc = stk_reader_state_parse(bad[i], strlen(bad[i]), &st, &be);
        if (rc == STK_OK) { /* collected, so that one run names every one accepted */
            fprintf(stderr, "state_json: parse accepted malformed state #%zu: %s\n", i, bad[i]);
            snprintf(accepted + strlen(accepted), sizeof accepted - strlen(accepted), " #%zu", i);
            continue;
        }
        expect(rc == be.code, "malformed state #%zu: returned %d, err.code %d", i, rc, be.code);
        expect(be.msg[0] != 0, "no message for malformed state #%zu", i);
    }
    /* Truncated example: every proper prefix is refused. */
    for (size_t len = 0; len < strlen(ex); len += 7) {
        stk_error be = {0, ""};
        expect(stk_reader_state_parse(ex, len, &st, &be) != STK_OK, "prefix of %zu bytes accepted", len);
    }
    expect(accepted[0] == 0, "parse accepted malformed states%s (listed on stderr)", accepted);
}
END_TEST

/* ================================================= 6. seek */

START_TEST(seek_equals_reading_there)
{
    const test_ds *d = ds_b(); /* 61 records */
    for (int order = 0; order < 3; order++) {
        stk_reader_options o = ropts(order, STK_TAIL_PAD, 3, 1, 2, 31337); /* G = 6, 11 batches */
        o.threads = 2;
        o.prefetch = 4;
        ref_stream rs;
        stk_reader *r = open_ref(d, &o, 4, 2, &rs);
        /* An uninterrupted run of 4 epochs, remembered. */
        stk_reader *u = open_ref(d, &o, 4, 2, NULL);
        uint64_t bpe = stk_reader_batches_per_epoch(u);
        ck_assert_uint_eq(bpe, 11);
        uint64_t(*seen)[3] = calloc(4 * bpe, sizeof *seen);
        stk_error e;
        stk_reader_set_epochs(u, 4);
        for (uint64_t k = 0; k < 4 * bpe; k++) {
            const stk_batch *b = stk_reader_next(u, &e);
            check_batch(b, &rs, k / bpe, k % bpe, 3, "uninterrupted");
            memcpy(seen[k], b->records, 3 * sizeof(uint64_t));
        }
        stk_reader_close(u);

        static const uint64_t TO[][2] = {{2, 5}, {0, 0}, {3, 10}, {1, 0}, {0, 7}, {3, 0}, {2, 5}};
        for (size_t t = 0; t < sizeof TO / sizeof TO[0]; t++) {
            char ctx[100];
            snprintf(ctx, sizeof ctx, "%s: seek(%llu, %llu)", ORDER_NAME[order], U(TO[t][0]), U(TO[t][1]));
            expect(stk_reader_seek(r, TO[t][0], TO[t][1], &e) == STK_OK, "%s: %s", ctx, e.msg);
            uint64_t pe, pb;
            stk_reader_position(r, &pe, &pb);
            ck_assert(pe == TO[t][0] && pb == TO[t][1]);
            uint64_t k0 = TO[t][0] * bpe + TO[t][1];
            /* read a few (t of them, at least 1) past the seek, across an epoch end where it lies near */
            for (uint64_t k = k0; k < k0 + 1 + t && k < 4 * bpe; k++) {
                const stk_batch *b = stk_reader_next(r, &e);
                check_batch(b, &rs, k / bpe, k % bpe, 3, ctx);
                expect(memcmp(b->records, seen[k], 3 * sizeof(uint64_t)) == 0,
                       "%s: batch %llu differs from the uninterrupted run", ctx, U(k));
            }
        }
        free(seen);
        stk_reader_close(r);
        rs_free(&rs);
    }
}
END_TEST

/* ================================================= 7. fields */

START_TEST(field_selection)
{
    const test_ds *d = ds_a();
    stk_reader_options o = ropts(STK_ORDER_SHUFFLE, STK_TAIL_PARTIAL, 5, 0, 1, 8);
    o.fields = "x";
    ref_stream rs;
    stk_reader *r = open_ref(d, &o, 0, 0, &rs);
    stk_error e;
    for (uint64_t k = 0; k < 7; k++) {
        const stk_batch *b = stk_reader_next(r, &e);
        check_batch(b, &rs, k / 5, k % 5, 1, "fields=x");
        ck_assert_str_eq(b->fields[0].name, "x");
    }
    stk_reader_close(r);
    rs_free(&rs);

    o.fields = "image,x"; /* returned in schema order */
    r = open_ref(d, &o, 0, 0, &rs);
    const stk_batch *b = stk_reader_next(r, &e);
    check_batch(b, &rs, 0, 0, 2, "fields=image,x");
    ck_assert_str_eq(b->fields[0].name, "x");
    ck_assert_str_eq(b->fields[1].name, "image");
    stk_reader_close(r);
    rs_free(&rs);

    o.fields = "x,nope";
    e.code = STK_OK;
    r = stk_reader_open(d->dir, &o, &e);
    if (r) stk_reader_close(r);
    expect(r == NULL, "opened with an unknown field");
    expect(e.code != STK_OK, "no error code");
    expect(strstr(e.msg, "nope") != NULL, "message \"%s\" does not name the field", e.msg);
}
END_TEST

/* ================================================= environment */

static char *save_env(const char *name)
{
    const char *v = getenv(name);
    return v ? strdup(v) : NULL;
}

static void restore_env(const char *name, char *v)
{
    if (v) setenv(name, v, 1);
    else unsetenv(name);
    free(v);
}

START_TEST(rank_and_world_from_environment)
{
    static const char *const NAMES[4] = {"RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"};
    char *saved[4];
    for (int i = 0; i < 4; i++) saved[i] = save_env(NAMES[i]);
    const test_ds *d = ds_a();
    struct {
        const char *rank, *world, *sproc, *stasks;
        int want_rank, want_world;
    } cases[] = {
        {"2", "3", "0", "5", 2, 3},   /* RANK / WORLD_SIZE win over SLURM */
        {NULL, NULL, "1", "2", 1, 2}, /* SLURM */
        {NULL, NULL, NULL, NULL, 0, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *vals[4] = {cases[c].rank, cases[c].world, cases[c].sproc, cases[c].stasks};
        for (int i = 0; i < 4; i++) {
            if (vals[i]) setenv(NAMES[i], vals[i], 1);
            else unsetenv(NAMES[i]);
        }
        stk_reader_options o = ropts(STK_ORDER_SHUFFLE, STK_TAIL_PAD, 2, -1, -1, 4);
        stk_error e = {0, ""};
        stk_reader *r = stk_reader_open(d->dir, &o, &e);
        expect(r != NULL, "%s", e.msg);
        const stk_reader_options *eff = stk_reader_get_options(r);
        ck_assert_int_eq(eff->rank, cases[c].want_rank);
        ck_assert_int_eq(eff->world_size, cases[c].want_world);
        o.rank = cases[c].want_rank;
        o.world_size = cases[c].want_world;
        ref_stream rs;
        rs_init(&rs, d->n, &o, 1, 1);
        read_epochs(r, &rs, 2, "from environment");
        stk_reader_close(r);
        rs_free(&rs);
    }
    for (int i = 0; i < 4; i++) restore_env(NAMES[i], saved[i]);
}
END_TEST

/* STK_TAIL_AUTO: pad across ranks, partial in one process, whether the
 * world size is given or comes from the environment; the state and the
 * effective options hold the resolved policy. */
START_TEST(tail_auto_by_world_size)
{
    static const char *const NAMES[2] = {"RANK", "WORLD_SIZE"};
    char *saved[2] = {save_env(NAMES[0]), save_env(NAMES[1])};
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    const test_ds *d = ds_a(); /* 23 records: no batch size below divides it */
    struct {
        int rank, world;
        const char *env_rank, *env_world;
        int want_tail;
    } cases[] = {
        {0, 1, NULL, NULL, STK_TAIL_PARTIAL},   {1, 3, NULL, NULL, STK_TAIL_PAD},
        {-1, -1, NULL, NULL, STK_TAIL_PARTIAL}, {-1, -1, "1", "2", STK_TAIL_PAD},
        {-1, -1, "0", "1", STK_TAIL_PARTIAL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (cases[c].env_rank) setenv("RANK", cases[c].env_rank, 1);
        if (cases[c].env_world) setenv("WORLD_SIZE", cases[c].env_world, 1);
        stk_reader_options o = ropts(STK_ORDER_SHUFFLE, STK_TAIL_AUTO, 4, cases[c].rank, cases[c].world, 9);
        stk_error e = {0, ""};
        stk_reader *r = stk_reader_open(d->dir, &o, &e);
        expect(r != NULL, "case %zu: %s", c, e.msg);
        const stk_reader_options *eff = stk_reader_get_options(r);
        expect(eff->tail == cases[c].want_tail, "case %zu (world %d): tail %d, expected %d", c,
               eff->world_size, eff->tail, cases[c].want_tail);
        stk_reader_state st;
        stk_reader_save(r, &st);
        ck_assert_int_eq(st.tail, cases[c].want_tail);
        o.tail = cases[c].want_tail;
        o.rank = eff->rank;
        o.world_size = eff->world_size;
        ref_stream rs;
        rs_init(&rs, d->n, &o, 1, 1);
        ck_assert_uint_eq(stk_reader_batches_per_epoch(r), rs_bpe(&rs));
        read_epochs(r, &rs, 2, "tail auto");
        stk_reader_close(r);
        rs_free(&rs);
        unsetenv("RANK");
        unsetenv("WORLD_SIZE");
    }
    for (int i = 0; i < 2; i++) restore_env(NAMES[i], saved[i]);
}
END_TEST

TU_MAIN("orders", {.name = "orders",
                   .timeout = 1200,
                   .tests = {order_record_matches_reference, reader_batches_match_reference,
                             endless_stream_and_release, sequential_zero_copy, pad_wraps_beyond_one_epoch,
                             quasi_defaults, ranks_cover_the_epoch, drop_smaller_than_global_batch,
                             bad_options_refused, elastic_same_global_batches, resume_equals_uninterrupted,
                             restore_refuses_other_streams, state_json, seek_equals_reading_there,
                             field_selection, rank_and_world_from_environment, tail_auto_by_world_size}})
