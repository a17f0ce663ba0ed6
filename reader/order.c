/* reader/order.c - which record sits at which position of an epoch.
 *
 * spec/ORDERS.md is the contract; every constant here is in it. Nothing is
 * stored per record: a permutation of 1.3 M or 10 G records costs the same
 * 100 bytes, and any position can be computed on its own (resume, ranks). */
#include "order.h"

#include "stoker/reader.h"

#define TAG_SHUFFLE 0x73746b2d73687566ULL /* "stk-shuf" */
#define TAG_BLOCKS 0x73746b2d626c636bULL  /* "stk-blck" */
#define TAG_WINDOW 0x73746b2d77696e64ULL  /* "stk-wind" */

uint64_t stk__mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

uint64_t stk__order_key(uint64_t seed, uint64_t epoch, uint64_t tag)
{
    return stk__mix64(stk__mix64(seed ^ tag) ^ stk__mix64(epoch + 1));
}

void stk__perm_init(stk__perm *p, uint64_t n, uint64_t key)
{
    unsigned b = 0;
    while (b < 64 && (1ULL << b) < n) b++;
    p->n = n;
    p->half = (b + 1) / 2;
    p->mask = p->half >= 64 ? ~0ULL : (1ULL << p->half) - 1;
    for (unsigned j = 0; j < 6; j++) p->k[j] = stk__mix64(key + (j + 1) * 0x9e3779b97f4a7c15ULL);
}

static uint64_t feistel(const stk__perm *p, uint64_t x)
{
    uint64_t L = x >> p->half, R = x & p->mask;
    for (unsigned j = 0; j < 6; j++) {
        uint64_t t = L ^ (stk__mix64(R ^ p->k[j]) & p->mask);
        L = R;
        R = t;
    }
    return (L << p->half) | R;
}

static uint64_t feistel_inv(const stk__perm *p, uint64_t x)
{
    uint64_t L = x >> p->half, R = x & p->mask;
    for (unsigned j = 6; j-- > 0;) {
        uint64_t t = R ^ (stk__mix64(L ^ p->k[j]) & p->mask);
        R = L;
        L = t;
    }
    return (L << p->half) | R;
}

/* Cycle walking: the Feistel domain 2^(2h) is below 4n, and i < n is on a
 * cycle that returns into [0, n), so the walk ends. */
uint64_t stk__perm_fwd(const stk__perm *p, uint64_t i)
{
    if (p->n <= 1) return i;
    uint64_t x = feistel(p, i);
    while (x >= p->n) x = feistel(p, x);
    return x;
}

uint64_t stk__perm_inv(const stk__perm *p, uint64_t i)
{
    if (p->n <= 1) return i;
    uint64_t x = feistel_inv(p, i);
    while (x >= p->n) x = feistel_inv(p, x);
    return x;
}

void stk__epoch_order_init(stk__epoch_order *o, int order, uint64_t n, uint64_t seed, uint64_t epoch,
                           uint64_t K, uint32_t W)
{
    o->order = order;
    o->n = n;
    o->cur_w = UINT64_MAX; /* no window yet: quasi_record computes cur_start first */
    o->cur_start = 0;
    if (order == STK_ORDER_SHUFFLE) {
        stk__perm_init(&o->p, n, stk__order_key(seed, epoch, TAG_SHUFFLE));
    } else if (order == STK_ORDER_QUASI) {
        /* A block larger than the dataset is one block, a window wider than
         * the blocks is one window: the same order, and W x K cannot overflow. */
        o->K = K ? (K < n ? K : (n ? n : 1)) : 1;
        o->nb = n ? (n - 1) / o->K + 1 : 0;
        o->W = W ? (W < o->nb ? W : (uint32_t)(o->nb ? o->nb : 1)) : 1;
        o->Lz = n - (o->nb ? o->nb - 1 : 0) * o->K;
        stk__perm_init(&o->p, o->nb, stk__order_key(seed, epoch, TAG_BLOCKS));
        o->q0 = o->nb ? stk__perm_inv(&o->p, o->nb - 1) : 0;
        o->wkey = stk__order_key(seed, epoch, TAG_WINDOW);
    }
}

/* Records before block position x: every block holds K except the short one
 * (block nb-1), which sits at position q0. */
static uint64_t before(const stk__epoch_order *o, uint64_t x)
{
    return x * o->K - (o->q0 < x ? o->K - o->Lz : 0);
}

static uint64_t quasi_record(stk__epoch_order *o, uint64_t p)
{
    uint64_t WK = (uint64_t)o->W * o->K;
    uint64_t w = p / WK; /* the short block only moves windows earlier */
    uint64_t lastw = (o->nb - 1) / o->W;
    if (w < lastw && before(o, (w + 1) * o->W) <= p) w++;
    if (w != o->cur_w) {
        uint64_t x0 = w * o->W, x1 = x0 + o->W < o->nb ? x0 + o->W : o->nb;
        o->cur_w = w;
        o->cur_start = before(o, x0);
        stk__perm_init(&o->wp, before(o, x1) - o->cur_start, stk__mix64(o->wkey ^ stk__mix64(w + 1)));
    }
    uint64_t c = stk__perm_fwd(&o->wp, p - o->cur_start);
    uint64_t x0 = w * o->W, j, off;
    if (o->q0 >= x0 && o->q0 - x0 < o->W) {
        uint64_t ql = o->q0 - x0;
        if (c < ql * o->K) {
            j = c / o->K;
            off = c % o->K;
        } else if (c < ql * o->K + o->Lz) {
            j = ql;
            off = c - ql * o->K;
        } else {
            uint64_t c2 = c - ql * o->K - o->Lz;
            j = ql + 1 + c2 / o->K;
            off = c2 % o->K;
        }
    } else {
        j = c / o->K;
        off = c % o->K;
    }
    return stk__perm_fwd(&o->p, x0 + j) * o->K + off;
}

uint64_t stk__epoch_order_record(stk__epoch_order *o, uint64_t p)
{
    switch (o->order) {
    case STK_ORDER_SHUFFLE:
        return stk__perm_fwd(&o->p, p);
    case STK_ORDER_QUASI:
        return quasi_record(o, p);
    default:
        return p;
    }
}

uint64_t stk_order_record(int order, uint64_t records, uint64_t seed, uint64_t epoch, uint64_t block_records,
                          uint32_t window, uint64_t p)
{
    stk__epoch_order o;
    stk__epoch_order_init(&o, order, records, seed, epoch, block_records, window);
    return p < records ? stk__epoch_order_record(&o, p) : UINT64_MAX;
}
