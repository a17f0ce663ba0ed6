/* tests/reader/ref_mix.c - see ref_mix.h. */
#include "ref_mix.h"

#include <math.h>
#include <stdlib.h>

#include "ref_order.h"

uint64_t ref_mix_counts(const ref_source *src, uint32_t S, uint64_t epoch_size, uint64_t *c)
{
    uint32_t weighted = 0;
    uint64_t total = 0, E = 0;
    double wsum = 0;
    for (uint32_t s = 0; s < S; s++) {
        total += src[s].n;
        if (src[s].kind == REF_WEIGHT) weighted++, wsum += src[s].value;
        else if (src[s].kind == REF_REPEAT) c[s] = (uint64_t)floor(src[s].value * (double)src[s].n + 0.5);
        else c[s] = (uint64_t)src[s].value;
    }
    if (weighted && weighted != S) return 0;
    if (weighted) { /* largest remainder; ties to the lower source */
        uint64_t T = epoch_size ? epoch_size : total, given = 0;
        double rem[64];
        for (uint32_t s = 0; s < S; s++) {
            double q = (double)T * (src[s].value / wsum);
            c[s] = (uint64_t)floor(q);
            rem[s] = q - floor(q);
            given += c[s];
        }
        for (; given < T; given++) {
            uint32_t b = 0;
            for (uint32_t s = 0; s < S; s++)
                if (rem[s] > rem[b]) b = s;
            c[b]++;
            rem[b] = -1;
        }
    }
    for (uint32_t s = 0; s < S; s++) E += c[s];
    return E;
}

static int cmp_elem(const void *pa, const void *pb)
{
    const ref_elem *a = pa, *b = pb;
    unsigned __int128 x = (unsigned __int128)(2 * a->j + 1) * b->c,
                      y = (unsigned __int128)(2 * b->j + 1) * a->c;
    if (x != y) return x < y ? -1 : 1;
    return a->s < b->s ? -1 : a->s > b->s;
}

ref_elem *ref_mix_interleave(const uint64_t *c, uint32_t S, uint64_t E)
{
    ref_elem *e = malloc((E ? E : 1) * sizeof *e);
    if (!e) abort();
    uint64_t k = 0;
    for (uint32_t s = 0; s < S; s++)
        for (uint64_t j = 0; j < c[s]; j++) e[k++] = (ref_elem){s, j, c[s]};
    qsort(e, E, sizeof *e, cmp_elem);
    return e;
}

uint64_t ref_mix_source_seed(uint64_t seed, uint32_t s)
{
    return ref_mix64(seed ^ REF_TAG_MIXS) ^ ref_mix64(s + 1);
}

uint64_t ref_mix_record(const ref_source *x, uint64_t c, uint64_t sseed, uint64_t e, uint64_t j)
{
    uint64_t n = x->n, F = c / n, R = c % n;
    uint64_t pass = j < F * n ? j / n : F;
    uint64_t i = j < F * n ? j % n : (uint64_t)(((unsigned __int128)e * R + (j - F * n)) % n);
    return ref_record(x->order, n, sseed, e * (F + 1) + pass, x->K ? x->K : 1, x->W ? x->W : 1, i);
}

void ref_mix_epoch(const ref_source *src, uint32_t S, uint64_t epoch_size, uint64_t seed, uint64_t e,
                   uint64_t *rec, uint64_t *srcs)
{
    uint64_t c[64], base[65] = {0};
    uint64_t E = ref_mix_counts(src, S, epoch_size, c);
    for (uint32_t s = 0; s < S; s++) base[s + 1] = base[s] + src[s].n;
    ref_elem *el = ref_mix_interleave(c, S, E);
    for (uint64_t p = 0; p < E; p++) {
        uint32_t s = el[p].s;
        rec[p] = base[s] + ref_mix_record(&src[s], c[s], ref_mix_source_seed(seed, s), e, el[p].j);
        srcs[p] = s;
    }
    free(el);
}
