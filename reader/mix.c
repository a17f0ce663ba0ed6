/* reader/mix.c - mixtures of datasets (spec/ORDERS.md, "Mixtures").
 *
 * The interleave is Sainte-Lague's divisor method read as a merge: source s
 * places its c_s elements at the times (2j + 1) / (2 c_s) of the epoch, and
 * the epoch lists them by time. Every prefix then holds each source in
 * proportion (within (S + 1) / 2 of p c_s / E), and, because the method is
 * house-monotone, position p never changes when p + 1 is asked: the counts
 * before p are a pure function of p, so ranks, seeks and restores need no
 * walk from the epoch's start. Times are compared exactly, as products of
 * 64-bit integers in 128 bits. */
#include "mix.h"

#include <math.h>
#include <string.h>

typedef unsigned __int128 u128;

#define TAG_MIX 0x73746b2d6d697873ULL /* "stk-mixs" */

static int counts_weighted(const stk__mix_source *src, uint32_t S, uint64_t E, uint64_t *c, stk_error *err)
{
    double sum = 0;
    for (uint32_t s = 0; s < S; s++) sum += src[s].value;
    if (!isfinite(sum))
        return stk_error_set(err, STK_E_ARG, "mixture: the weights' sum overflows (scale them down)");
    double rem[STK__MIX_MAX];
    uint64_t given = 0;
    for (uint32_t s = 0; s < S; s++) {
        double q = (double)E * (src[s].value / sum);
        double f = floor(q);
        c[s] = f >= (double)E ? E : (uint64_t)f;
        rem[s] = q - f;
        given += c[s];
    }
    /* q_s in double is exact to the record below 2^53; above, the shares
     * could miss E by more than one record per source */
    if (given > E || E - given > S)
        return stk_error_set(err, STK_E_ARG,
                             "mixture: epoch_size %llu cannot be shared by weight (at most 2^53)",
                             (unsigned long long)E);
    for (uint64_t left = E - given; left; left--) { /* the largest remainders, the lower source on ties */
        uint32_t best = 0;
        for (uint32_t s = 1; s < S; s++)
            if (rem[s] > rem[best]) best = s;
        c[best]++;
        rem[best] = -1;
    }
    return STK_OK;
}

int stk__mix_counts(const stk__mix_source *src, uint32_t S, uint64_t epoch_size, uint64_t *c, uint64_t *E,
                    stk_error *err)
{
    if (S == 0 || S > STK__MIX_MAX)
        return stk_error_set(err, STK_E_ARG, "mixture: %u sources (1 to %d)", S, STK__MIX_MAX);
    uint32_t weighted = 0;
    uint64_t total = 0;
    for (uint32_t s = 0; s < S; s++) {
        const stk__mix_source *x = &src[s];
        double v = x->value;
        if (x->kind == STK__MIX_WEIGHT) {
            weighted++;
            if (!(v > 0) || !isfinite(v))
                return stk_error_set(err, STK_E_ARG, "mixture: source %u: weight %g (a positive number)", s,
                                     v);
        } else if (x->kind == STK__MIX_REPEAT) {
            if (!(v >= 0) || !(v * (double)x->n < 9.2e18))
                return stk_error_set(err, STK_E_ARG, "mixture: source %u: repeat %g (0 or more)", s, v);
            c[s] = (uint64_t)floor(v * (double)x->n + 0.5);
        } else if (x->kind == STK__MIX_CHOOSE) {
            if (!(v >= 0) || v != floor(v) || !(v < 9.2e18))
                return stk_error_set(err, STK_E_ARG, "mixture: source %u: choose %g (a whole number)", s, v);
            c[s] = (uint64_t)v;
        } else {
            return stk_error_set(err, STK_E_ARG, "mixture: source %u: give a weight, a repeat or a choose",
                                 s);
        }
        if (x->n == 0) return stk_error_set(err, STK_E_ARG, "mixture: source %u has no records", s);
        if (total > UINT64_MAX - x->n) return stk_error_set(err, STK_E_RANGE, "mixture: too many records");
        total += x->n;
    }
    if (weighted && weighted != S)
        return stk_error_set(err, STK_E_ARG,
                             "mixture: %u of %u sources have a weight: weights are for all sources or none "
                             "(the others: repeat or choose)",
                             weighted, S);
    uint64_t sum = 0;
    if (weighted) {
        if (epoch_size > (1ULL << 53))
            return stk_error_set(err, STK_E_ARG,
                                 "mixture: epoch_size %llu cannot be shared by weight (at most 2^53)",
                                 (unsigned long long)epoch_size);
        int rc = counts_weighted(src, S, epoch_size ? epoch_size : total, c, err);
        if (rc) return rc;
    }
    for (uint32_t s = 0; s < S; s++) {
        if (sum > (UINT64_MAX >> 2) - c[s])
            return stk_error_set(err, STK_E_RANGE, "mixture: epoch too large");
        sum += c[s];
    }
    if (!sum)
        return stk_error_set(err, STK_E_ARG, "mixture: the epoch is empty (every source gives 0 records)");
    *E = sum;
    return STK_OK;
}

/* Elements of source s with a time before (or at, for a lower source: ties
 * go to the lower source) the time of element j of source z:
 * #{i < c_s : (2i + 1) c_z < (2j + 1) c_s}, or <= when s < z. */
static uint64_t before_elem(const uint64_t *c, uint32_t s, uint32_t z, uint64_t j)
{
    if (s == z) return j;
    if (!c[s]) return 0;
    u128 num = (u128)(2 * j + 1) * c[s]; /* (2i + 1) c_z < num */
    u128 k = num / c[z];                 /* largest odd m = 2i + 1 with m c_z < num (or <=) */
    if (s > z && k * c[z] == num) k--;   /* strict: equal times go to the lower source */
    if (k == 0) return 0;
    u128 i = (k - 1) / 2 + 1; /* odd numbers 1, 3, .. <= k */
    return i < c[s] ? (uint64_t)i : c[s];
}

static uint64_t rank_of(const uint64_t *c, uint32_t S, uint32_t z, uint64_t j)
{
    uint64_t r = 0;
    for (uint32_t s = 0; s < S; s++) r += before_elem(c, s, z, j);
    return r;
}

void stk__mix_locate(const uint64_t *c, uint32_t S, uint64_t p, uint32_t *s, uint64_t *j)
{
    for (uint32_t z = 0; z < S; z++) {
        if (!c[z]) continue;
        uint64_t lo = 0, hi = c[z]; /* the element of z whose rank is p, if any: ranks rise with j */
        while (lo < hi) {
            uint64_t mid = lo + (hi - lo) / 2;
            if (rank_of(c, S, z, mid) < p) lo = mid + 1;
            else hi = mid;
        }
        if (lo < c[z] && rank_of(c, S, z, lo) == p) {
            *s = z;
            *j = lo;
            return;
        }
    }
    *s = 0, *j = 0; /* p >= E: not a position */
}

void stk__mix_prefix(const uint64_t *c, uint32_t S, uint64_t p, uint64_t *A)
{
    uint64_t E = 0;
    for (uint32_t s = 0; s < S; s++) E += c[s];
    if (p >= E) {
        memcpy(A, c, S * sizeof *A);
        return;
    }
    uint32_t z;
    uint64_t j;
    stk__mix_locate(c, S, p, &z, &j);
    for (uint32_t s = 0; s < S; s++) A[s] = before_elem(c, s, z, j);
}

uint32_t stk__mix_next(const uint64_t *c, uint32_t S, uint64_t *A)
{
    uint32_t best = UINT32_MAX;
    for (uint32_t s = 0; s < S; s++) {
        if (A[s] >= c[s]) continue;
        /* earlier time: (2 A_s + 1) / c_s < (2 A_b + 1) / c_b; ties keep the lower source */
        if (best == UINT32_MAX || (u128)(2 * A[s] + 1) * c[best] < (u128)(2 * A[best] + 1) * c[s]) best = s;
    }
    if (best != UINT32_MAX) A[best]++;
    return best;
}

uint64_t stk__mix_source_seed(uint64_t seed, uint32_t s)
{
    return stk__mix64(seed ^ TAG_MIX) ^ stk__mix64(s + 1);
}

/* Element j of a source of n records giving c an epoch: its pass (the
 * epoch of the source's own order) and its position in that pass. */
static uint64_t pass_pos(uint64_t n, uint64_t c, uint64_t epoch, uint64_t j, uint64_t *i)
{
    uint64_t F = c / n, R = c % n;
    if (j < F * n) {
        *i = j % n;
        return epoch * (F + 1) + j / n;
    }
    /* the partial pass: a window of R records, moving by R each epoch */
    *i = (uint64_t)(((u128)epoch * R + (j - F * n)) % n);
    return epoch * (F + 1) + F;
}

uint64_t stk__mix_record(const stk__mix_source *src, uint64_t c, uint64_t seed, uint64_t epoch, uint64_t j)
{
    uint64_t i, pass = pass_pos(src->n, c, epoch, j, &i);
    stk__epoch_order o;
    stk__epoch_order_init(&o, src->order, src->n, seed, pass, src->K, src->W);
    return stk__epoch_order_record(&o, i);
}

int stk__mix_init(stk__mix *m, const stk__mix_source *src, uint32_t S, uint64_t epoch_size, uint64_t seed,
                  stk_error *err)
{
    memset(m, 0, sizeof *m);
    int rc = stk__mix_counts(src, S, epoch_size, m->c, &m->E, err);
    if (rc) return rc;
    m->S = S;
    memcpy(m->src, src, S * sizeof *src);
    for (uint32_t s = 0; s < S; s++) {
        m->seed[s] = stk__mix_source_seed(seed, s);
        m->base[s + 1] = m->base[s] + src[s].n;
    }
    return STK_OK;
}

void stk__mix_cache_init(stk__mix_cache *mc)
{
    for (uint32_t s = 0; s < STK__MIX_MAX; s++) mc->pass[s] = UINT64_MAX;
}

/* stk__mix_record with the pass's order cached. */
static uint64_t cached_record(const stk__mix *m, stk__mix_cache *mc, uint32_t s, uint64_t epoch, uint64_t j)
{
    const stk__mix_source *x = &m->src[s];
    uint64_t i, pass = pass_pos(x->n, m->c[s], epoch, j, &i);
    if (mc->pass[s] != pass) {
        stk__epoch_order_init(&mc->ord[s], x->order, x->n, m->seed[s], pass, x->K, x->W);
        mc->pass[s] = pass;
    }
    return stk__epoch_order_record(&mc->ord[s], i);
}

void stk__mix_positions(const stk__mix *m, stk__mix_cache *mc, uint64_t e, uint64_t p, uint32_t n,
                        uint64_t *rec, uint32_t *src)
{
    uint64_t A[STK__MIX_MAX];
    p %= m->E;
    stk__mix_prefix(m->c, m->S, p, A);
    for (uint32_t i = 0; i < n; i++) {
        if (p == m->E) { /* wrapped: the epoch's start again */
            p = 0;
            memset(A, 0, m->S * sizeof *A);
        }
        uint32_t s = stk__mix_next(m->c, m->S, A);
        rec[i] = m->base[s] + cached_record(m, mc, s, e, A[s] - 1);
        if (src) src[i] = s;
        p++;
    }
}
