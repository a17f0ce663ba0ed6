/* reader/order.h - the orders of spec/ORDERS.md as O(1)-memory functions.
 * Internal to libstoker. */
#ifndef STK_READER_ORDER_H
#define STK_READER_ORDER_H

#include <stdint.h>

/* A keyed bijection of [0, n): 6-round Feistel with cycle walking. */
typedef struct {
    uint64_t n;
    unsigned half;
    uint64_t mask;
    uint64_t k[6];
} stk__perm;

uint64_t stk__mix64(uint64_t x);
uint64_t stk__order_key(uint64_t seed, uint64_t epoch, uint64_t tag);
void stk__perm_init(stk__perm *p, uint64_t n, uint64_t key);
uint64_t stk__perm_fwd(const stk__perm *p, uint64_t i);
uint64_t stk__perm_inv(const stk__perm *p, uint64_t i);

/* One epoch of one order, keys precomputed. */
typedef struct {
    int order;
    uint64_t n;
    stk__perm p; /* shuffle: records; quasi: blocks */
    /* quasi */
    uint64_t K, nb, Lz, q0, wkey;
    uint32_t W;
    /* quasi: the window last used (a cache; the order is a pure function) */
    uint64_t cur_w, cur_start;
    stk__perm wp;
} stk__epoch_order;

void stk__epoch_order_init(stk__epoch_order *o, int order, uint64_t n, uint64_t seed, uint64_t epoch,
                           uint64_t K, uint32_t W);
/* Record at position p (< n) of the epoch. Updates the window cache. */
uint64_t stk__epoch_order_record(stk__epoch_order *o, uint64_t p);

#endif
