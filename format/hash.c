/* format/hash.c - XXH3-64, dispatched to the widest vector unit present.
 *
 * Why not just link libxxhash: a distribution's shared build is compiled for
 * the baseline ISA (SSE2 on x86-64), and checksums are on the read path,
 * where the same code built for AVX2 or AVX-512 runs well over twice as fast
 * (bench/README.md, "Design measurements behind the source"). So XXH3 is
 * compiled inline three times from the pinned copy in third_party/xxhash
 * (here with the baseline ISA, in hash_avx2.c and hash_avx512.c; hash_isa.h)
 * and a table of kernels is picked per call. The values are XXH3's whatever
 * the table: the tests compare every level the CPU has with the system
 * libxxhash. */
#define HASH_ISA_TABLE stk__hash_base
#include "hash_isa.h"

#include "internal.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(STK_HASH_BLOCK == HB_BLOCK, "the public block size is XXH3's");

/* The widest kernels this CPU runs, up to level cap (STK_HASH_ISA_*: tests
 * ask for narrower ones). */
static const stk__hash_isa *isa(int cap)
{
#if defined(STOKER_HAVE_AVX512_HASH)
    /* VBMI marks the CPUs whose clock 512-bit multiplies do not pull down
     * (Ice Lake, Sapphire Rapids, Zen 4 and later; not Skylake-SP or Cascade
     * Lake): packers hash between AVX2 decodes. */
    if (cap >= STK_HASH_ISA_AVX512 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512vbmi"))
        return &stk__hash_avx512;
#endif
#if defined(STOKER_HAVE_AVX2_HASH)
    if (cap >= STK_HASH_ISA_AVX2 && __builtin_cpu_supports("avx2")) return &stk__hash_avx2;
#endif
    (void)cap;
    return &stk__hash_base;
}

uint64_t stk_hash(const void *data, size_t len) { return isa(STK_HASH_ISA_BEST)->hash(data, len); }

uint64_t stk__hash_isa_cap(const void *data, size_t len, int cap) { return isa(cap)->hash(data, len); }

/* ------------------------------------------------- hashing by blocks */

uint64_t stk__hash_blocks_isa(const void *data, size_t len, uint64_t *sums, int cap)
{
    if (len == 0 || len % HB_BLOCK || !sums) return stk_hash(data, len);
    return isa(cap)->value(data, len, sums);
}

uint64_t stk_hash_blocks(const void *data, size_t len, uint64_t *sums)
{
    return stk__hash_blocks_isa(data, len, sums, STK_HASH_ISA_BEST);
}

/* The streaming hasher (internal.h): whole files (shardcheck --file-hash, a
 * writer's read-back, a streamed shard), index hashes, fingerprints. Bytes
 * gather in buf until a whole block is there AND more input follows (XXH3
 * treats the block that holds the last byte differently); prev keeps the 64
 * bytes before buf, which the last stripe reads when the final block is
 * shorter than a stripe. */
struct stk__hasher {
    XXH_ALIGN(64) uint64_t acc[8];
    uint8_t buf[HB_BLOCK];
    uint8_t prev[HB_STRIPE];
    size_t buffered;
    uint64_t total;
    const stk__hash_isa *isa;
};

stk__hasher *stk__hasher_new_isa(int cap)
{
    XXH_ALIGN(64) static const uint64_t init[8] = XXH3_INIT_ACC;
    stk__hasher *h = aligned_alloc(64, (sizeof(stk__hasher) + 63) & ~(size_t)63);
    if (!h) return NULL;
    memcpy(h->acc, init, sizeof init);
    h->buffered = 0;
    h->total = 0;
    h->isa = isa(cap);
    return h;
}

stk__hasher *stk__hasher_new(void) { return stk__hasher_new_isa(STK_HASH_ISA_BEST); }

/* The full buffered block, now that more input follows. */
static void flush_block(stk__hasher *h)
{
    h->isa->blocks(h->acc, h->buf, 1);
    memcpy(h->prev, h->buf + HB_BLOCK - HB_STRIPE, HB_STRIPE);
    h->buffered = 0;
}

void stk__hasher_update(stk__hasher *h, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len) {
        if (h->buffered == HB_BLOCK) flush_block(h);
        if (h->buffered == 0 && len > HB_BLOCK) { /* whole blocks straight from the input */
            size_t n = (len - 1) / HB_BLOCK;
            h->isa->blocks(h->acc, p, n);
            memcpy(h->prev, p + n * HB_BLOCK - HB_STRIPE, HB_STRIPE);
            p += n * HB_BLOCK;
            len -= n * HB_BLOCK;
            h->total += n * HB_BLOCK;
        }
        size_t k = HB_BLOCK - h->buffered < len ? HB_BLOCK - h->buffered : len;
        memcpy(h->buf + h->buffered, p, k);
        h->buffered += k;
        h->total += k;
        p += k;
        len -= k;
    }
}

void stk__hasher_absorb(stk__hasher *h, const void *data, const uint64_t *sums, size_t len)
{
    if (!len) return;
    if (!sums || len % HB_BLOCK || h->total % HB_BLOCK) { /* not on block boundaries: the bytes */
        stk__hasher_update(h, data, len);
        return;
    }
    const uint8_t *p = data;
    size_t n = len / HB_BLOCK;
    if (h->buffered == HB_BLOCK) flush_block(h);
    h->isa->sums(h->acc, sums, n - 1);
    /* The last block waits in buf like any other: it may end the input. */
    if (n >= 2) memcpy(h->prev, p + (n - 1) * HB_BLOCK - HB_STRIPE, HB_STRIPE);
    memcpy(h->buf, p + (n - 1) * HB_BLOCK, HB_BLOCK);
    h->buffered = HB_BLOCK;
    h->total += len;
}

uint64_t stk__hasher_digest(const stk__hasher *h)
{
    if (h->total <= HB_BLOCK) return stk_hash(h->buf, (size_t)h->total); /* nothing mixed yet */
    return h->isa->final(h->acc, h->buf, h->buffered, h->prev, h->total);
}

void stk__hasher_free(stk__hasher *h) { free(h); }
