/* tests/reader/test_mix.c - mixtures of datasets (reader/mix.c) against a
 * reference written from spec/ORDERS.md "Mixtures": the epoch's interleave
 * built by sorting every element's time (exact fractions), each source's
 * records from ref_order.c's orders. Many (counts, orders, seeds, epochs). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>

#include "../../reader/mix.h"
#include "ref_mix.h"
#include "ref_order.h"

typedef ref_elem elem;

static elem *ref_interleave(const uint64_t *c, uint32_t S, uint64_t E) { return ref_mix_interleave(c, S, E); }

static uint64_t rnd(uint64_t *x) { return *x = ref_mix64(*x + 0x9e3779b97f4a7c15ull); }

/* locate, prefix and next against the sorted reference, and the bound on
 * every prefix: |A_s(p) - p c_s / E| <= (S + 1) / 2. */
START_TEST(interleave_matches_the_reference)
{
    uint64_t x = 11;
    for (int trial = 0; trial < 400; trial++) {
        uint32_t S = 1 + (uint32_t)(rnd(&x) % 7);
        uint64_t c[8], E = 0;
        for (uint32_t s = 0; s < S; s++) {
            uint64_t r = rnd(&x) % 10;
            c[s] = r < 2 ? r : r < 5 ? 1 + rnd(&x) % 9 : rnd(&x) % 300; /* zeros, ones, small, large */
            E += c[s];
        }
        if (!E) continue;
        elem *ref = ref_interleave(c, S, E);
        uint64_t A[8] = {0}, W[8] = {0};
        for (uint64_t p = 0; p < E; p++) {
            uint32_t s;
            uint64_t j, P[8];
            if (p % 7 == 0 || p < 3) { /* the random-access calls at a sample of positions */
                stk__mix_locate(c, S, p, &s, &j);
                ck_assert_msg(s == ref[p].s && j == ref[p].j, "trial %d p %llu: (%u, %llu), want (%u, %llu)",
                              trial, (unsigned long long)p, s, (unsigned long long)j, ref[p].s,
                              (unsigned long long)ref[p].j);
                stk__mix_prefix(c, S, p, P);
                for (uint32_t z = 0; z < S; z++) ck_assert_uint_eq(P[z], A[z]);
            }
            for (uint32_t z = 0; z < S; z++)
                ck_assert_msg(fabs((double)A[z] - (double)p * (double)c[z] / (double)E) <= (S + 1) / 2.0,
                              "trial %d: source %u holds %llu of the first %llu", trial, z,
                              (unsigned long long)A[z], (unsigned long long)p);
            ck_assert_uint_eq(ref[p].j, A[ref[p].s]);
            A[ref[p].s]++;
            ck_assert_uint_eq(stk__mix_next(c, S, W), ref[p].s);
        }
        ck_assert_uint_eq(stk__mix_next(c, S, W), UINT32_MAX); /* the epoch is over */
        free(ref);
    }
}
END_TEST

static stk__mix_source src(uint64_t n, int kind, double v, int order)
{
    return (stk__mix_source){.n = n, .kind = kind, .value = v, .order = order, .K = 3, .W = 2};
}

START_TEST(counts_follow_the_spec)
{
    stk_error e;
    uint64_t c[4], E;
    stk__mix_source w[3] = {src(100, STK__MIX_WEIGHT, 0.7, 0), src(50, STK__MIX_WEIGHT, 0.2, 0),
                            src(10, STK__MIX_WEIGHT, 0.1, 0)};
    ck_assert_int_eq(stk__mix_counts(w, 3, 0, c, &E, &e), STK_OK); /* 160 by 0.7/0.2/0.1: 112, 32, 16 */
    ck_assert(E == 160 && c[0] == 112 && c[1] == 32 && c[2] == 16);
    ck_assert_int_eq(stk__mix_counts(w, 3, 7, c, &E, &e),
                     STK_OK); /* 4.9, 1.4, 0.7: 4, 1, 0 + 2 by remainder */
    ck_assert(E == 7 && c[0] == 5 && c[1] == 1 && c[2] == 1);
    stk__mix_source r[3] = {src(100, STK__MIX_REPEAT, 0.5, 0), src(7, STK__MIX_REPEAT, 2.5, 0),
                            src(9, STK__MIX_CHOOSE, 20, 0)};
    ck_assert_int_eq(stk__mix_counts(r, 3, 0, c, &E, &e), STK_OK);
    ck_assert(c[0] == 50 && c[1] == 18 && c[2] == 20 && E == 88); /* 17.5 rounds up */
    stk__mix_source bad[2] = {src(100, STK__MIX_WEIGHT, 1, 0), src(7, STK__MIX_REPEAT, 1, 0)};
    ck_assert_int_eq(stk__mix_counts(bad, 2, 0, c, &E, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "weights are for all sources or none");
    bad[1] = src(7, STK__MIX_CHOOSE, 2.5, 0);
    bad[0] = src(7, STK__MIX_CHOOSE, 1, 0);
    ck_assert_int_eq(stk__mix_counts(bad, 2, 0, c, &E, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "source 1: choose 2.5");
    bad[1] = src(7, STK__MIX_WEIGHT, -1, 0);
    bad[0] = src(7, STK__MIX_WEIGHT, 1, 0);
    ck_assert_int_eq(stk__mix_counts(bad, 2, 0, c, &E, &e), STK_E_ARG);
    bad[0] = src(7, STK__MIX_REPEAT, 0, 0);
    bad[1] = src(7, STK__MIX_CHOOSE, 0, 0);
    ck_assert_int_eq(stk__mix_counts(bad, 2, 0, c, &E, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "empty");
    ck_assert_int_eq(stk__mix_counts(w, 3, UINT64_MAX, c, &E, &e), STK_E_ARG); /* refused, not a long loop */
    tu_assert_error(&e, STK_E_ARG, "at most 2^53");
    stk__mix_source huge[2] = {src(7, STK__MIX_WEIGHT, 1e308, 0), src(7, STK__MIX_WEIGHT, 1e308, 0)};
    ck_assert_int_eq(stk__mix_counts(huge, 2, 0, c, &E, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "sum overflows");
    ck_assert_int_eq(stk__mix_counts(w, 3, 1ULL << 53, c, &E, &e), STK_OK);
    ck_assert(E == 1ULL << 53 && c[0] + c[1] + c[2] == E);
}
END_TEST

/* Each source's records against ref_record: full passes are the source's own
 * order of sub-epoch e (F + 1) + k, the partial pass a window of R records at
 * (e R) mod n; no record repeats within an epoch unless c > n, and then
 * every record comes floor(c / n) or ceil(c / n) times. */
START_TEST(source_records_match_the_reference)
{
    uint64_t x = 5;
    for (int trial = 0; trial < 300; trial++) {
        uint64_t n = 1 + rnd(&x) % 60, c = rnd(&x) % (3 * n + 2), seed = rnd(&x);
        int order = (int)(rnd(&x) % 3);
        stk__mix_source s = src(n, STK__MIX_CHOOSE, (double)c, order);
        uint64_t sseed = stk__mix_source_seed(seed, (uint32_t)(trial % 5));
        uint64_t F = c / n, R = c % n;
        uint32_t *seen = calloc(n, sizeof *seen);
        ck_assert(seen);
        for (uint64_t e = 0; e < 3; e++) {
            for (uint64_t k = 0; k < n; k++) seen[k] = 0;
            for (uint64_t j = 0; j < c; j++) {
                uint64_t pass = j < F * n ? j / n : F, i = j < F * n ? j % n : (e * R + (j - F * n)) % n;
                uint64_t want = ref_record(order, n, sseed, e * (F + 1) + pass, 3, 2, i);
                uint64_t got = stk__mix_record(&s, c, sseed, e, j);
                ck_assert_msg(got == want, "trial %d epoch %llu j %llu: %llu, want %llu", trial,
                              (unsigned long long)e, (unsigned long long)j, (unsigned long long)got,
                              (unsigned long long)want);
                seen[got]++;
            }
            for (uint64_t k = 0; k < n; k++) ck_assert(seen[k] == F || seen[k] == F + 1);
        }
        free(seen);
    }
}
END_TEST

/* Sequential sources with repeat < 1 read consecutive windows: over
 * ceil(n / c) epochs every record comes (a different part each epoch). */
START_TEST(partial_sources_cover_the_dataset_over_epochs)
{
    stk__mix_source s = src(10, STK__MIX_REPEAT, 0.3, 0);
    int seen[10] = {0};
    for (uint64_t e = 0; e < 4; e++)
        for (uint64_t j = 0; j < 3; j++) seen[stk__mix_record(&s, 3, 0, e, j)]++;
    for (int k = 0; k < 10; k++) ck_assert_int_ge(seen[k], 1);
}
END_TEST

TU_MAIN("mix", {.name = "mix",
                .timeout = 120,
                .tests = {interleave_matches_the_reference, counts_follow_the_spec,
                          source_records_match_the_reference, partial_sources_cover_the_dataset_over_epochs}})
