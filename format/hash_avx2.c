/* format/hash_avx2.c - XXH3-64 compiled for AVX2 (built with -mavx2; only
 * called after __builtin_cpu_supports("avx2"), see hash.c). */
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <stddef.h>
#include <stdint.h>

#include "hash_blocks.h"

uint64_t stk__hash_avx2(const void *data, size_t len);
uint64_t stk__hash_avx2(const void *data, size_t len) { return XXH3_64bits(data, len); }

/* The streaming hasher's update, for the same reason: pack hashes every shard
 * as it writes it (2 GB per 10k ImageNet-size images). The state layout is
 * the one xxhash.h defines for both translation units. */
void stk__hasher_update_avx2(XXH3_state_t *st, const void *data, size_t len);
void stk__hasher_update_avx2(XXH3_state_t *st, const void *data, size_t len) { XXH3_64bits_update(st, data, len); }

/* hash_blocks.h's pieces with the AVX2 kernels (hash.c dispatches). */
uint64_t stk__hb_value_avx2(const uint8_t *p, size_t len, uint64_t *sums);
void stk__hb_blocks_avx2(uint64_t *acc, const uint8_t *p, size_t n);
void stk__hb_sums_avx2(uint64_t *acc, const uint64_t *sums, size_t n);
uint64_t stk__hb_final_avx2(const uint64_t *acc, const uint8_t *last, size_t n, const uint8_t *prev, uint64_t total);
uint64_t stk__hb_value_avx2(const uint8_t *p, size_t len, uint64_t *sums) { return hb_value(p, len, sums); }
void stk__hb_blocks_avx2(uint64_t *acc, const uint8_t *p, size_t n) { hb_blocks(acc, p, n); }
void stk__hb_sums_avx2(uint64_t *acc, const uint64_t *sums, size_t n) { hb_sums(acc, sums, n); }
uint64_t stk__hb_final_avx2(const uint64_t *acc, const uint8_t *last, size_t n, const uint8_t *prev, uint64_t total)
{
    return hb_final(acc, last, n, prev, total);
}
