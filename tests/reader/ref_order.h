/*
 * tests/reader/ref_order.h - an independent reference of spec/ORDERS.md
 * (version 1), written from the spec text alone, for the reader tests.
 *
 * Two computations of the quasi order are kept on purpose: ref_record follows
 * the spec's position formula (q0, C(x), window search), ref_epoch_order builds
 * the epoch's stream by construction (blocks in block order, windows
 * concatenated, each window permuted). The reference's own tests check that
 * they agree, so that a mistake in one of them cannot pass for the contract.
 */
#ifndef STK_REF_ORDER_H
#define STK_REF_ORDER_H

#include <stdint.h>

/* The same numbers as stk_order / stk_tail in stoker/reader.h (the tests
 * assert so); kept separate so that the reference depends on nothing. */
enum { REF_SEQUENTIAL = 0, REF_SHUFFLE = 1, REF_QUASI = 2 };
enum { REF_PAD = 0, REF_DROP = 1, REF_PARTIAL = 2 };

#define REF_TAG_SHUFFLE 0x73746b2d73687566ull /* "stk-shuf" */
#define REF_TAG_BLOCKS 0x73746b2d626c636bull  /* "stk-blck" */
#define REF_TAG_WINDOW 0x73746b2d77696e64ull  /* "stk-wind" */

uint64_t ref_mix64(uint64_t x);
uint64_t ref_key(uint64_t seed, uint64_t epoch, uint64_t tag);
/* The Feistel bijection of [0, n) and its inverse. */
uint64_t ref_perm(uint64_t n, uint64_t key, uint64_t i);
uint64_t ref_perm_inv(uint64_t n, uint64_t key, uint64_t i);

/* record(p) of epoch e by the spec's position formulas (K, Wq used by quasi
 * only; both >= 1). */
uint64_t ref_record(int order, uint64_t n, uint64_t seed, uint64_t epoch, uint64_t K, uint64_t Wq,
                    uint64_t p);
/* The whole epoch's stream record(0..n-1) into out[n], by construction. */
void ref_epoch_order(int order, uint64_t n, uint64_t seed, uint64_t epoch, uint64_t K, uint64_t Wq,
                     uint64_t *out);

/* Batches per epoch for every rank. */
uint64_t ref_batches_per_epoch(uint64_t n, uint64_t G, int tail);
/* Rank r's batch j of an epoch whose stream is ord[0..n-1]: writes its
 * records into out[B] and returns how many (B, or fewer for a partial tail).
 * A pad position p >= n reads ord[p - n] (ord[p % n] where p - n >= n too,
 * which the spec leaves open: see the report). */
uint32_t ref_rank_batch(const uint64_t *ord, uint64_t n, uint64_t G, uint32_t B, uint32_t r, int tail,
                        uint64_t j, uint64_t *out);

#endif
