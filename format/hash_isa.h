/* format/hash_isa.h - the hashing kernels of one instruction set.
 *
 * XXH3 compiled inline for one vector unit: hash.c includes this with the
 * baseline ISA, hash_avx2.c with -mavx2 and hash_avx512.c with -mavx512f
 * (xxhash.h picks its kernels from the compiler's target). Each defines
 * HASH_ISA_TABLE, the name of the table it exports; hash.c picks a table per
 * call from what the CPU has (__builtin_cpu_supports, which reads a flag
 * libgcc sets at start-up: no state of ours). */
#ifndef STOKER_FORMAT_HASH_ISA_H
#define STOKER_FORMAT_HASH_ISA_H

/* The pinned copy (third_party/xxhash/README.md), by its path relative to
 * this file: hash_blocks.h uses xxHash's private names, which only that
 * version is known to have. Never <xxhash.h>. */
#define XXH_INLINE_ALL
#include "third_party/xxhash/xxhash.h"

_Static_assert(XXH_VERSION_NUMBER == 801, "format/ is written against the vendored xxHash 0.8.1");

#include <stddef.h>
#include <stdint.h>

#include "hash_blocks.h"

typedef struct {
    uint64_t (*hash)(const void *data, size_t len);
    uint64_t (*value)(const uint8_t *p, size_t len, uint64_t *sums);
    void (*blocks)(uint64_t *acc, const uint8_t *p, size_t n);
    void (*sums)(uint64_t *acc, const uint64_t *sums, size_t n);
    uint64_t (*final)(const uint64_t *acc, const uint8_t *last, size_t n, const uint8_t *prev,
                      uint64_t total);
} stk__hash_isa;

extern const stk__hash_isa stk__hash_base, stk__hash_avx2, stk__hash_avx512;

#ifdef HASH_ISA_TABLE
static uint64_t isa_hash(const void *data, size_t len) { return XXH3_64bits(data, len); }
static uint64_t isa_value(const uint8_t *p, size_t len, uint64_t *sums) { return hb_value(p, len, sums); }
static void isa_blocks(uint64_t *acc, const uint8_t *p, size_t n) { hb_blocks(acc, p, n); }
static void isa_sums(uint64_t *acc, const uint64_t *sums, size_t n) { hb_sums(acc, sums, n); }
static uint64_t isa_final(const uint64_t *acc, const uint8_t *last, size_t n, const uint8_t *prev,
                          uint64_t total)
{
    return hb_final(acc, last, n, prev, total);
}
const stk__hash_isa HASH_ISA_TABLE = {isa_hash, isa_value, isa_blocks, isa_sums, isa_final};
#endif

#endif
