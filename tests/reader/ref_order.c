/* tests/reader/ref_order.c - see ref_order.h. Deliberately plain code that
 * mirrors the sentences of spec/ORDERS.md; speed does not matter. */
#include "ref_order.h"

#include <stdlib.h>

uint64_t ref_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

uint64_t ref_key(uint64_t seed, uint64_t epoch, uint64_t tag)
{
    return ref_mix64(ref_mix64(seed ^ tag) ^ ref_mix64(epoch + 1));
}

typedef struct {
    unsigned h;
    uint64_t mask;
    uint64_t k[6];
} feistel;

static void feistel_init(feistel *f, uint64_t n, uint64_t key)
{
    unsigned b = 0; /* smallest b with 2^b >= n */
    while (b < 64 && (1ull << b) < n) b++;
    f->h = (b + 1) / 2;
    f->mask = (1ull << f->h) - 1; /* h <= 32 */
    for (uint64_t j = 0; j < 6; j++) f->k[j] = ref_mix64(key + (j + 1) * 0x9e3779b97f4a7c15ull);
}

static uint64_t feistel_fwd(const feistel *f, uint64_t x)
{
    uint64_t L = x >> f->h, R = x & f->mask;
    for (int j = 0; j < 6; j++) {
        uint64_t nl = R, nr = L ^ (ref_mix64(R ^ f->k[j]) & f->mask);
        L = nl;
        R = nr;
    }
    return (L << f->h) | R;
}

static uint64_t feistel_back(const feistel *f, uint64_t x)
{
    uint64_t L = x >> f->h, R = x & f->mask;
    for (int j = 5; j >= 0; j--) {
        uint64_t nl = R ^ (ref_mix64(L ^ f->k[j]) & f->mask), nr = L;
        L = nl;
        R = nr;
    }
    return (L << f->h) | R;
}

uint64_t ref_perm(uint64_t n, uint64_t key, uint64_t i)
{
    if (n <= 1) return i;
    feistel f;
    feistel_init(&f, n, key);
    uint64_t x = feistel_fwd(&f, i);
    while (x >= n) x = feistel_fwd(&f, x);
    return x;
}

uint64_t ref_perm_inv(uint64_t n, uint64_t key, uint64_t i)
{
    if (n <= 1) return i;
    feistel f;
    feistel_init(&f, n, key);
    uint64_t x = feistel_back(&f, i);
    while (x >= n) x = feistel_back(&f, x);
    return x;
}

/* ------------------------------------------------------------ quasi */

static uint64_t nblocks(uint64_t n, uint64_t K) { return n / K + (n % K != 0); }

static uint64_t window_key(uint64_t seed, uint64_t epoch, uint64_t w)
{
    return ref_mix64(ref_key(seed, epoch, REF_TAG_WINDOW) ^ ref_mix64(w + 1));
}

/* The spec's formula: q0, C(x), the largest window w with C(w Wq) <= p. */
static uint64_t quasi_record(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t K, uint64_t Wq, uint64_t p)
{
    uint64_t nb = nblocks(n, K);
    uint64_t Lz = n - (nb - 1) * K;
    uint64_t kb = ref_key(seed, epoch, REF_TAG_BLOCKS);
    uint64_t q0 = ref_perm_inv(nb, kb, nb - 1);
#define C(x) ((x)*K - (q0 < (x) ? K - Lz : 0))
    uint64_t nw = nb / Wq + (nb % Wq != 0);
    uint64_t w = 0;
    for (uint64_t v = 0; v < nw; v++)
        if (C(v * Wq) <= p) w = v;
    uint64_t first = w * Wq, last = (w + 1) * Wq < nb ? (w + 1) * Wq : nb; /* positions [first, last) */
    uint64_t start = C(first), M = C(last) - start;
#undef C
    uint64_t c = ref_perm(M, window_key(seed, epoch, w), p - start);
    uint64_t x = first;
    for (;;) {
        uint64_t size = x == q0 ? Lz : K;
        if (c < size) break;
        c -= size;
        x++;
    }
    return ref_perm(nb, kb, x) * K + c;
}

uint64_t ref_record(int order, uint64_t n, uint64_t seed, uint64_t epoch, uint64_t K, uint64_t Wq, uint64_t p)
{
    switch (order) {
    case REF_SEQUENTIAL:
        return p;
    case REF_SHUFFLE:
        return ref_perm(n, ref_key(seed, epoch, REF_TAG_SHUFFLE), p);
    default:
        return quasi_record(n, seed, epoch, K, Wq, p);
    }
}

void ref_epoch_order(int order, uint64_t n, uint64_t seed, uint64_t epoch, uint64_t K, uint64_t Wq,
                     uint64_t *out)
{
    if (order != REF_QUASI) {
        for (uint64_t p = 0; p < n; p++)
            out[p] = order == REF_SEQUENTIAL ? p : ref_perm(n, ref_key(seed, epoch, REF_TAG_SHUFFLE), p);
        return;
    }
    /* By construction: block order, then each window's blocks concatenated
     * in block-position order and permuted as a whole. */
    uint64_t nb = nblocks(n, K);
    uint64_t kb = ref_key(seed, epoch, REF_TAG_BLOCKS);
    uint64_t *cat = malloc((size_t)n * sizeof *cat);
    if (!cat) abort();
    uint64_t pos = 0;
    for (uint64_t w = 0; w * Wq < nb; w++) {
        uint64_t M = 0;
        for (uint64_t x = w * Wq; x < nb && x < (w + 1) * Wq; x++) {
            uint64_t blk = ref_perm(nb, kb, x);
            uint64_t lo = blk * K, hi = blk == nb - 1 ? n : lo + K;
            for (uint64_t rec = lo; rec < hi; rec++) cat[M++] = rec;
        }
        uint64_t kw = window_key(seed, epoch, w);
        for (uint64_t t = 0; t < M; t++) out[pos + t] = cat[ref_perm(M, kw, t)];
        pos += M;
    }
    free(cat);
}

/* ------------------------------------------------------------ batches */

uint64_t ref_batches_per_epoch(uint64_t n, uint64_t G, int tail)
{
    return tail == REF_DROP ? n / G : n / G + (n % G != 0);
}

uint32_t ref_rank_batch(const uint64_t *ord, uint64_t n, uint64_t G, uint32_t B, uint32_t r, int tail,
                        uint64_t j, uint64_t *out)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < B; i++) {
        uint64_t p = j * G + (uint64_t)r * B + i;
        if (p >= n) {
            if (tail == REF_PARTIAL) continue;
            p = tail == REF_PAD ? p % n : p; /* drop never gets here */
        }
        out[k++] = ord[p];
    }
    return k;
}
