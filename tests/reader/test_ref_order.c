/*
 * tests/reader/test_ref_order.c - the reference of spec/ORDERS.md checked on
 * its own (no libstoker code involved), so that test_orders compares the
 * library with something that is known to hold the spec's stated properties:
 * mix64 is SplitMix64's finaliser, perm is a bijection and perm_inv its
 * inverse, the quasi position formula equals the construction, every order
 * is a permutation, the rank slices tile the global stream.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "ref_order.h"
#include "testutil.h"


static const uint64_t NS[] = {1,  2,  3,  4,  5,   7,   8,   13,  16,   17,  31,
                              32, 33, 64, 97, 100, 127, 128, 257, 1000, 1024};
#define NN (sizeof NS / sizeof NS[0])
static const uint64_t SEEDS[] = {0, 1, 42, 0xdeadbeefull, UINT64_MAX};
#define NSEEDS (sizeof SEEDS / sizeof SEEDS[0])

static void assert_permutation(const uint64_t *v, uint64_t n, const char *what)
{
    unsigned char *seen = calloc(n, 1);
    ck_assert_ptr_nonnull(seen);
    for (uint64_t i = 0; i < n; i++) {
        expect(v[i] < n, "%s: value %llu at %llu out of [0,%llu)", what, (unsigned long long)v[i],
               (unsigned long long)i, (unsigned long long)n);
        expect(!seen[v[i]], "%s: value %llu twice", what, (unsigned long long)v[i]);
        seen[v[i]] = 1;
    }
    free(seen);
}

START_TEST(mix64_is_splitmix_finaliser)
{
    /* SplitMix64 seeded with 0: its first outputs are mix64(k * golden). */
    ck_assert_uint_eq(ref_mix64(0x9e3779b97f4a7c15ull), 0xe220a8397b1dcdafull);
    ck_assert_uint_eq(ref_mix64(2 * 0x9e3779b97f4a7c15ull), 0x6e789e6aa1b965f4ull);
    ck_assert_uint_eq(ref_mix64(0), 0);
    /* The tags spell their names. */
    ck_assert_uint_eq(REF_TAG_SHUFFLE, 0x73746b2d73687566ull);
    ck_assert(memcmp("stk-shuf", (char[]){0x73, 0x74, 0x6b, 0x2d, 0x73, 0x68, 0x75, 0x66}, 8) == 0);
    ck_assert(memcmp("stk-blck", (char[]){0x73, 0x74, 0x6b, 0x2d, 0x62, 0x6c, 0x63, 0x6b}, 8) == 0);
    ck_assert(memcmp("stk-wind", (char[]){0x73, 0x74, 0x6b, 0x2d, 0x77, 0x69, 0x6e, 0x64}, 8) == 0);
}
END_TEST

START_TEST(perm_is_bijection_with_inverse)
{
    for (size_t a = 0; a < NN; a++) {
        uint64_t n = NS[a];
        uint64_t *v = malloc(n * sizeof *v);
        for (size_t s = 0; s < NSEEDS; s++) {
            uint64_t k = ref_key(SEEDS[s], s, REF_TAG_SHUFFLE);
            for (uint64_t i = 0; i < n; i++) {
                v[i] = ref_perm(n, k, i);
                expect_eq(ref_perm_inv(n, k, v[i]), i);
            }
            assert_permutation(v, n, "perm");
        }
        free(v);
    }
    /* Not the identity (for a large enough n). */
    uint64_t moved = 0;
    for (uint64_t i = 0; i < 1000; i++) moved += ref_perm(1000, 7, i) != i;
    ck_assert_uint_gt(moved, 900);
}
END_TEST

START_TEST(quasi_formula_equals_construction)
{
    const uint64_t KS[] = {1, 2, 3, 5, 7, 16};
    const uint64_t WS[] = {1, 2, 3, 4, 64};
    for (size_t a = 0; a < NN; a++) {
        uint64_t n = NS[a];
        if (n > 257) continue;
        uint64_t *v = malloc(n * sizeof *v);
        for (size_t s = 0; s < NSEEDS; s++)
            for (uint64_t e = 0; e < 3; e++)
                for (size_t kk = 0; kk < sizeof KS / sizeof KS[0] + 3; kk++) {
                    /* also K = n - 1, n, n + 5 */
                    uint64_t K = kk < 6 ? KS[kk] : kk == 6 ? (n > 1 ? n - 1 : 1) : kk == 7 ? n : n + 5;
                    for (size_t ww = 0; ww < sizeof WS / sizeof WS[0]; ww++) {
                        ref_epoch_order(REF_QUASI, n, SEEDS[s], e, K, WS[ww], v);
                        assert_permutation(v, n, "quasi");
                        for (uint64_t p = 0; p < n; p++)
                            expect(ref_record(REF_QUASI, n, SEEDS[s], e, K, WS[ww], p) == v[p],
                                   "quasi n=%llu K=%llu Wq=%llu p=%llu", (unsigned long long)n,
                                   (unsigned long long)K, (unsigned long long)WS[ww], (unsigned long long)p);
                    }
                }
        free(v);
    }
}
END_TEST

/* Wq = 1, K = 1: every window is one record, so the stream is the block
 * order itself; K >= n: one block, so the stream is one window permutation. */
START_TEST(quasi_degenerate_cases)
{
    uint64_t n = 97, v[97];
    ref_epoch_order(REF_QUASI, n, 5, 2, 1, 1, v);
    for (uint64_t p = 0; p < n; p++) expect_eq(v[p], ref_perm(n, ref_key(5, 2, REF_TAG_BLOCKS), p));
    ref_epoch_order(REF_QUASI, n, 5, 2, 200, 3, v);
    uint64_t kw = ref_mix64(ref_key(5, 2, REF_TAG_WINDOW) ^ ref_mix64(1));
    for (uint64_t p = 0; p < n; p++) expect_eq(v[p], ref_perm(n, kw, p));
    /* Wq >= nb: one window holding every block. */
    ref_epoch_order(REF_QUASI, n, 5, 2, 10, 10, v);
    for (uint64_t p = 0; p < n; p++) expect_eq(v[p], ref_record(REF_QUASI, n, 5, 2, 10, 10, p));
    /* With Wq = 1 each window is one block: positions [x K, ...) hold block
     * perm(nb, kb, x)'s records (the short block where it falls). */
    ref_epoch_order(REF_QUASI, n, 9, 0, 10, 1, v);
    uint64_t kb = ref_key(9, 0, REF_TAG_BLOCKS), p = 0;
    for (uint64_t x = 0; x < 10; x++) {
        uint64_t blk = ref_perm(10, kb, x), size = blk == 9 ? 7 : 10;
        for (uint64_t i = 0; i < size; i++, p++) expect_eq(v[p] / 10, blk);
    }
    expect_eq(p, n);
}
END_TEST

START_TEST(rank_slices_tile_the_stream)
{
    const uint64_t n = 23;
    uint64_t ord[23], out[64];
    for (uint64_t i = 0; i < n; i++) ord[i] = 100 + i;
    const uint32_t BW[][2] = {{1, 1}, {2, 3}, {4, 2}, {5, 4}, {7, 3}, {23, 1}, {3, 8}};
    for (size_t c = 0; c < sizeof BW / sizeof BW[0]; c++)
        for (int tail = 0; tail < 3; tail++) {
            uint32_t B = BW[c][0], W = BW[c][1];
            uint64_t G = (uint64_t)B * W;
            if (tail == REF_DROP && G > n) continue;
            uint64_t nb = ref_batches_per_epoch(n, G, tail), count[23] = {0}, total = 0;
            for (uint64_t j = 0; j < nb; j++)
                for (uint32_t r = 0; r < W; r++) {
                    uint32_t k = ref_rank_batch(ord, n, G, B, r, tail, j, out);
                    ck_assert(tail == REF_PARTIAL ? k <= B : k == B);
                    for (uint32_t i = 0; i < k; i++) {
                        count[out[i] - 100]++;
                        total++;
                        /* position j G + r B + i */
                        if (tail != REF_PAD || j * G + r * B + i < n)
                            expect_eq(out[i], 100 + j * G + r * B + i);
                    }
                }
            if (tail == REF_PARTIAL) expect_eq(total, n);
            if (tail == REF_DROP) expect_eq(total, n / G * G);
            if (tail == REF_PAD) expect_eq(total, (n + G - 1) / G * G);
            for (uint64_t i = 0; i < n; i++) {
                if (tail == REF_PARTIAL) expect_eq(count[i], 1);
                if (tail == REF_DROP) ck_assert_uint_le(count[i], 1);
                if (tail == REF_PAD) expect_eq(count[i], 1 + (i < total - n));
            }
        }
}
END_TEST

TU_MAIN("ref_order",
        {.name = "ref",
         .timeout = 600,
         .tests = {mix64_is_splitmix_finaliser, perm_is_bijection_with_inverse,
                   quasi_formula_equals_construction, quasi_degenerate_cases, rank_slices_tile_the_stream}})
