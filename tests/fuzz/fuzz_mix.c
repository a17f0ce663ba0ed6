/* fuzz_mix - libFuzzer target: the mixture arithmetic (reader/mix.c) on
 * fuzzed sources, against the independent reference of spec/ORDERS.md
 * "Mixtures" (tests/reader/ref_mix.c).
 *
 * Input: a header (sources, epoch size, seed, epoch, positions), then per
 * source its records, kind, value, order and quasi block/window. Flags in
 * the header keep some numbers small (so that whole epochs can be compared)
 * and let others take any 64-bit value (so that the 128-bit time products,
 * the weight shares and the overflow guards are reached).
 *
 * stk__mix_counts must either refuse with a message or give counts that sum
 * to E, equal the reference's, and follow each kind's rule. Then, at fuzzed
 * positions of any epoch: the prefix counts sum to the position, the next
 * element after them is the one stk__mix_locate finds there, and one step
 * gives the next position's prefix (the interleave is house-monotone). For
 * epochs of up to 4096 positions the whole epoch is compared with the
 * reference: every position's source, element and record, through both
 * stk__mix_record and stk__mix_positions. Any mismatch traps. */
#include "mix.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_mix.h"
#include "ref_order.h"

#define CHECK(cond)                \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    const uint8_t *p;
    size_t n;
} input;

static uint64_t take(input *in, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned k = 0; k < bytes; k++) {
        v |= (uint64_t)(in->n ? *in->p : 0) << (8 * k);
        if (in->n) in->p++, in->n--;
    }
    return v;
}

#define MAXS 8
#define WHOLE 4096 /* epochs this long are compared position by position */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    input in = {data, size};
    uint8_t head = (uint8_t)take(&in, 1);
    uint32_t S = 1 + (head & 7); /* 1 .. 8: the walks are O(S) per position */
    int small = !(head & 8);     /* records, values and epoch sizes kept small */
    uint64_t es = take(&in, 8), seed = take(&in, 8), epoch = take(&in, 8), pos = take(&in, 8);
    if (small) es = head & 16 ? 0 : es % 2000, epoch %= 1000;
    stk__mix_source src[MAXS];
    ref_source ref[MAXS];
    for (uint32_t s = 0; s < S; s++) {
        uint64_t n = take(&in, 8);
        uint8_t kind = (uint8_t)take(&in, 1), order = (uint8_t)take(&in, 1);
        uint64_t raw = take(&in, 8), K = 1 + take(&in, 1), W = 1 + take(&in, 1) % 8;
        double v;
        if (small) {
            n = 1 + n % 300;
            /* weights and repeats as tenths, chooses as whole numbers, some invalid */
            v = (kind >> 2) % 4 == 0 ? (double)(raw % 1000) : (double)(int64_t)(raw % 2001) / 10 - 10;
        } else {
            memcpy(&v, &raw, sizeof v);
        }
        src[s] = (stk__mix_source){n, kind % 4, v, order % 3, K, (uint32_t)W};
        ref[s] = (ref_source){n, kind % 4, v, order % 3, K, W};
    }
    uint64_t c[MAXS], E = 0;
    stk_error err;
    err.code = STK_OK;
    if (stk__mix_counts(src, S, es, c, &E, &err) != STK_OK) {
        CHECK(err.code != STK_OK && err.msg[0] && memchr(err.msg, 0, sizeof err.msg));
        return 0;
    }
    /* the counts: each kind's rule, the reference's numbers, the sum */
    uint64_t sum = 0, total = 0, rc[MAXS];
    int weighted = src[0].kind == STK__MIX_WEIGHT;
    for (uint32_t s = 0; s < S; s++) {
        CHECK(src[s].n > 0 && (src[s].kind == STK__MIX_WEIGHT) == weighted);
        if (src[s].kind == STK__MIX_CHOOSE) CHECK(c[s] == (uint64_t)src[s].value);
        if (src[s].kind == STK__MIX_REPEAT)
            CHECK(c[s] == (uint64_t)floor(src[s].value * (double)src[s].n + 0.5));
        sum += c[s];
        total += src[s].n;
    }
    CHECK(sum == E && E > 0);
    if (weighted) CHECK(E == (es ? es : total));
    if (!weighted || E <= (1ull << 53)) { /* the reference's shares convert doubles unchecked */
        CHECK(ref_mix_counts(ref, S, es, rc) == E);
        for (uint32_t s = 0; s < S; s++) CHECK(rc[s] == c[s]);
    }

    /* fuzzed positions of the epoch: prefix, locate and next agree */
    uint64_t A[STK__MIX_MAX], B[STK__MIX_MAX];
    for (int k = 0; k < 4; k++) {
        uint64_t p = k == 0   ? pos % E
                     : k == 1 ? E - 1 - pos % E
                              : (pos * (uint64_t)(k + 1) + (uint64_t)k) % E;
        stk__mix_prefix(c, S, p, A);
        uint64_t t = 0;
        for (uint32_t s = 0; s < S; s++) {
            CHECK(A[s] <= c[s]);
            t += A[s];
        }
        CHECK(t == p);
        uint32_t z;
        uint64_t j;
        stk__mix_locate(c, S, p, &z, &j);
        CHECK(z < S && j < c[z] && A[z] == j);
        CHECK(stk__mix_next(c, S, A) == z && A[z] == j + 1);
        stk__mix_prefix(c, S, p + 1, B);
        CHECK(!memcmp(A, B, S * sizeof *A));
    }
    stk__mix_prefix(c, S, E, A);
    CHECK(!memcmp(A, c, S * sizeof *A));
    CHECK(stk__mix_next(c, S, A) == UINT32_MAX);

    if (E > WHOLE || !small) return 0;
    /* the whole epoch against the reference */
    static uint64_t rec[WHOLE], rsrc[WHOLE], got[WHOLE];
    static uint32_t gsrc[WHOLE];
    ref_elem *el = ref_mix_interleave(c, S, E);
    ref_mix_epoch(ref, S, es, seed, epoch, rec, rsrc);
    stk__mix m;
    CHECK(stk__mix_init(&m, src, S, es, seed, &err) == STK_OK && m.E == E);
    memset(A, 0, sizeof A);
    for (uint64_t p = 0; p < E; p++) {
        uint32_t z;
        uint64_t j;
        stk__mix_locate(c, S, p, &z, &j);
        CHECK(z == el[p].s && j == el[p].j);
        CHECK(stk__mix_next(c, S, A) == z);
        uint64_t r = stk__mix_record(&src[z], c[z], stk__mix_source_seed(seed, z), epoch, j);
        CHECK(r < src[z].n && m.base[z] + r == rec[p] && rsrc[p] == z);
    }
    free(el);
    /* stk__mix_positions from a fuzzed start, wrapping past the epoch's end */
    stk__mix_cache mc;
    stk__mix_cache_init(&mc);
    uint64_t p0 = pos % E;
    uint32_t n = (uint32_t)(E < WHOLE ? E : WHOLE);
    stk__mix_positions(&m, &mc, epoch, p0, n, got, gsrc);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t p = (p0 + i) % E;
        CHECK(got[i] == rec[p] && gsrc[i] == rsrc[p]);
    }
    return 0;
}
