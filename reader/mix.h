/* reader/mix.h - mixtures of datasets as one stream (spec/ORDERS.md,
 * "Mixtures"): per-source counts, the interleave, each source's records.
 * Pure functions of their arguments, O(S) memory. Internal to libstoker. */
#ifndef STK_READER_MIX_H
#define STK_READER_MIX_H

#include <stdint.h>

#include "dataset.h" /* STK__MIX_MAX */
#include "order.h"
#include "stoker/format.h"

typedef enum { STK__MIX_WEIGHT = 1, STK__MIX_REPEAT = 2, STK__MIX_CHOOSE = 3 } stk__mix_kind;

typedef struct {
    uint64_t n;   /* records of the source */
    int kind;     /* stk__mix_kind */
    double value; /* weight (> 0), repeat (>= 0) or choose (a whole number) */
    int order;    /* the source's own order: STK_ORDER_* */
    uint64_t K;   /* quasi: records per block, blocks per window */
    uint32_t W;
} stk__mix_source;

/* The records each source gives every epoch (c[s]) and the epoch's size
 * (their sum, *E). Weights: all sources or none, sharing `epoch_size`
 * records (0: the sum of the sources' records) by the largest remainder. */
int stk__mix_counts(const stk__mix_source *src, uint32_t S, uint64_t epoch_size, uint64_t *c, uint64_t *E,
                    stk_error *err);
/* The interleave: position p (< E) of an epoch holds element *j of source
 * *s, the p-th in the merge of t(s, j) = (2j + 1) / (2 c[s]) (ties: the
 * lower s). */
void stk__mix_locate(const uint64_t *c, uint32_t S, uint64_t p, uint32_t *s, uint64_t *j);
/* The elements of each source before position p: A[s], summing to p. */
void stk__mix_prefix(const uint64_t *c, uint32_t S, uint64_t p, uint64_t *A);
/* After the element at a position (counts A before it, as stk__mix_prefix
 * gives), the source of that element; A is advanced past it. */
uint32_t stk__mix_next(const uint64_t *c, uint32_t S, uint64_t *A);
/* The record of source s that its element j gives in epoch e, for a source
 * of n records giving c records an epoch in its own order (seed: the
 * source's, stk__mix_source_seed). */
uint64_t stk__mix_record(const stk__mix_source *src, uint64_t c, uint64_t seed, uint64_t epoch, uint64_t j);
/* The seed of source s's own order in a mixture seeded with `seed`. */
uint64_t stk__mix_source_seed(uint64_t seed, uint32_t s);

/* A mixture as the reader reads it: the sources, their counts and seeds,
 * and where each starts in the concatenated record space. */
typedef struct {
    uint32_t S;
    uint64_t E; /* records an epoch */
    stk__mix_source src[STK__MIX_MAX];
    uint64_t c[STK__MIX_MAX], seed[STK__MIX_MAX], base[STK__MIX_MAX + 1];
} stk__mix;

/* Set m up for sources src[0..S) (base: their first records, base[S] the
 * total) under `seed`; epoch_size as for stk__mix_counts. */
int stk__mix_init(stk__mix *m, const stk__mix_source *src, uint32_t S, uint64_t epoch_size, uint64_t seed,
                  stk_error *err);

/* One worker's cache of the sources' orders: a source's order for one pass
 * is built once, not per record. */
typedef struct {
    stk__epoch_order ord[STK__MIX_MAX];
    uint64_t pass[STK__MIX_MAX]; /* the pass epoch ord[s] is for; UINT64_MAX: none */
} stk__mix_cache;
void stk__mix_cache_init(stk__mix_cache *mc);

/* Positions [p, p + n) of epoch e (taken modulo E: a padded tail wraps to
 * the epoch's start) as concatenated records rec[] and their sources src[]
 * (src may be NULL). O(S log E) once, then O(S) per position. */
void stk__mix_positions(const stk__mix *m, stk__mix_cache *mc, uint64_t e, uint64_t p, uint32_t n,
                        uint64_t *rec, uint32_t *src);

#endif
