/* format/hash_avx2.c - XXH3-64 compiled for AVX2 (built with -mavx2; only
 * called after __builtin_cpu_supports("avx2"), see hash.c). */
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <stdint.h>

uint64_t stk__hash_avx2(const void *data, size_t len);
uint64_t stk__hash_avx2(const void *data, size_t len) { return XXH3_64bits(data, len); }

/* The streaming hasher's update, for the same reason: pack hashes every shard
 * as it writes it (2 GB per 10k ImageNet-size images). The state layout is
 * the one xxhash.h defines for both translation units. */
void stk__hasher_update_avx2(XXH3_state_t *st, const void *data, size_t len);
void stk__hasher_update_avx2(XXH3_state_t *st, const void *data, size_t len) { XXH3_64bits_update(st, data, len); }
