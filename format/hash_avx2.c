/* format/hash_avx2.c - XXH3-64 compiled for AVX2 (built with -mavx2; only
 * called after __builtin_cpu_supports("avx2"), see hash.c). */
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <stdint.h>

uint64_t stk__hash_avx2(const void *data, size_t len);
uint64_t stk__hash_avx2(const void *data, size_t len) { return XXH3_64bits(data, len); }
