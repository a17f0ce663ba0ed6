/*
 * tests/reader/ref_mix.h - an independent reference of spec/ORDERS.md
 * "Mixtures", written from the spec text alone: the counts, the interleave
 * by sorting every element's time, and each source's records from
 * ref_order.c's orders. Quadratic where the library is not; for tests.
 */
#ifndef STK_REF_MIX_H
#define STK_REF_MIX_H

#include <stdint.h>

enum { REF_WEIGHT = 1, REF_REPEAT = 2, REF_CHOOSE = 3 };
#define REF_TAG_MIXS 0x73746b2d6d697873ull /* "stk-mixs" */

typedef struct {
    uint64_t n; /* records */
    int kind;   /* REF_WEIGHT, REF_REPEAT, REF_CHOOSE */
    double value;
    int order;     /* REF_SEQUENTIAL, ... */
    uint64_t K, W; /* quasi */
} ref_source;

/* One element of an epoch: element j of source s (c: that source's count). */
typedef struct {
    uint32_t s;
    uint64_t j, c;
} ref_elem;

/* Each source's records per epoch (c[s]); returns E, 0 when the spec
 * refuses the sources. */
uint64_t ref_mix_counts(const ref_source *src, uint32_t S, uint64_t epoch_size, uint64_t *c);
/* The epoch's E elements in order (malloc'd). */
ref_elem *ref_mix_interleave(const uint64_t *c, uint32_t S, uint64_t E);
uint64_t ref_mix_source_seed(uint64_t seed, uint32_t s);
/* The record (inside the source) of element j of source s in epoch e. */
uint64_t ref_mix_record(const ref_source *x, uint64_t c, uint64_t sseed, uint64_t e, uint64_t j);
/* The whole epoch e as concatenated records rec[E] and sources src[E]. */
void ref_mix_epoch(const ref_source *src, uint32_t S, uint64_t epoch_size, uint64_t seed, uint64_t e,
                   uint64_t *rec, uint64_t *srcs);

#endif
