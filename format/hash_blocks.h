/* format/hash_blocks.h - XXH3-64 taken apart at its 1024-byte blocks.
 *
 * Included through hash_isa.h (after the vendored xxhash.h with
 * XXH_INLINE_ALL) by hash.c, hash_avx2.c and hash_avx512.c, so that
 * XXH3_accumulate_512 and XXH3_scrambleAcc are the vector kernels of that
 * translation unit; everything here is static. These are xxHash's private
 * names, which is why format/ builds against a pinned copy of xxhash.h
 * (third_party/xxhash/README.md), never the system's.
 *
 * Why: a packer hashes every image twice, once as the record's checksum (on
 * the decoding thread, the bytes in its cache) and once as part of the
 * whole-file hash (on the writer's I/O thread, which would have to read them
 * again, from the other core's cache). XXH3 on long inputs (xxHash's spec,
 * "hashLong") keeps eight 64-bit accumulators; a block of 16 stripes of 64
 * bytes only ADDS to them (each stripe: acc[i ^ 1] += d[i], acc[i] +=
 * lo32(d[i] ^ k[i]) * hi32(d[i] ^ k[i]), the key k depending on the
 * stripe's place in its block), and only the scramble after each block
 * mixes. So a block's contribution can be computed anywhere, from zero
 * accumulators, as eight sums; whoever streams the file adds them and
 * scrambles in file order, which reads 64 bytes per kilobyte instead of the
 * kilobyte. The decoding thread pays a little more for the record's hash
 * plus sums than for the hash alone; the writer's thread pays a fraction of
 * a second read (bench/README.md, "Design measurements behind the source",
 * has the figures). The value is the same to the bit: tests compare it with
 * the system libxxhash's XXH3_64bits on many lengths and splits.
 *
 * Only xxHash's own kernels, secret and final merge are used; the loops are
 * XXH3_hashLong_internal_loop's. */
#ifndef STOKER_FORMAT_HASH_BLOCKS_H
#define STOKER_FORMAT_HASH_BLOCKS_H

#include <stdint.h>
#include <string.h>
#ifdef __AVX512F__
#  include <immintrin.h>
#endif

#define HB_STRIPE 64u
#define HB_BLOCK 1024u /* (secret size 192 - 64) / 8 = 16 stripes */
#define HB_SCRAMBLE_KEY (XXH3_kSecret + sizeof(XXH3_kSecret) - HB_STRIPE)
#define HB_LAST_KEY (XXH3_kSecret + sizeof(XXH3_kSecret) - HB_STRIPE - 7) /* XXH_SECRET_LASTACC_START */
#define HB_MERGE_KEY (XXH3_kSecret + 11)                                  /* XXH_SECRET_MERGEACCS_START */

_Static_assert(sizeof(XXH3_kSecret) == 192, "XXH3's default secret gives 16 stripes per block");

/* acc += s, lane by lane, as vectors as wide as the scramble's loads: a
 * load is forwarded from one earlier store, not pieced together from several,
 * so eight scalar adds in memory or two 32-byte stores ahead of the AVX-512
 * scramble's 64-byte load would stall every block (what that cost: bench/README.md). */
static inline void hb_add(uint64_t *acc, const uint64_t *s)
{
#ifdef __AVX512F__
    /* The AVX-512 scramble loads all eight at once. Intrinsics, not a 64-byte
     * vector type: clang splits those in two where -march prefers 256 bits. */
    _mm512_storeu_si512(acc, _mm512_add_epi64(_mm512_loadu_si512(acc), _mm512_loadu_si512(s)));
#else
    typedef uint64_t u64x4 __attribute__((vector_size(32)));
    for (unsigned h = 0; h < 2; h++) {
        u64x4 a, b;
        memcpy(&a, acc + 4 * h, sizeof a);
        memcpy(&b, s + 4 * h, sizeof b);
        a += b;
        memcpy(acc + 4 * h, &a, sizeof a);
    }
#endif
}

/* dst = s, as whole vectors (a 64-byte memcpy from registers goes through
 * the stack in 16-byte pieces). */
static inline void hb_copy(uint64_t *dst, const uint64_t *s)
{
    typedef uint64_t u64x4 __attribute__((vector_size(32)));
    for (unsigned h = 0; h < 2; h++) {
        u64x4 a;
        memcpy(&a, s + 4 * h, sizeof a);
        memcpy(dst + 4 * h, &a, sizeof a);
    }
}

/* acc += the first `stripes` stripes of block b (keys from the block's start). */
static inline void hb_stripes(uint64_t *acc, const uint8_t *b, unsigned stripes)
{
    /* Two stripes a turn: fully unrolled, GCC 12 computes all 16 stripes'
     * products first and spills them to the stack. */
#pragma GCC unroll 2
    for (unsigned s = 0; s < stripes; s++) {
        XXH_PREFETCH(b + s * HB_STRIPE + XXH_PREFETCH_DIST); /* as XXH3_accumulate does */
        XXH3_accumulate_512(acc, b + s * HB_STRIPE, XXH3_kSecret + 8 * s);
    }
}

/* The file's accumulators after n whole blocks of data, each followed by
 * more input (so each is scrambled). */
static inline void hb_blocks(uint64_t *acc, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        hb_stripes(acc, p + i * HB_BLOCK, HB_BLOCK / HB_STRIPE);
        XXH3_scrambleAcc(acc, HB_SCRAMBLE_KEY);
    }
}

/* The same from precomputed block sums (8 per block). */
static inline void hb_sums(uint64_t *acc, const uint64_t *sums, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        hb_add(acc, sums + 8 * i);
        XXH3_scrambleAcc(acc, HB_SCRAMBLE_KEY);
    }
}

/* XXH3-64 of data[0 .. len), len a non-zero multiple of HB_BLOCK, and the
 * sums of each of its blocks (8 per block) into sums. */
static inline uint64_t hb_value(const uint8_t *p, size_t len, uint64_t *sums)
{
    XXH_ALIGN(64) uint64_t acc[8] = XXH3_INIT_ACC;
    size_t n = len / HB_BLOCK;
    for (size_t i = 0; i < n; i++) {
        XXH_ALIGN(64) uint64_t s[8] = {0};
        const uint8_t *b = p + i * HB_BLOCK;
        hb_stripes(s, b, HB_BLOCK / HB_STRIPE - 1);
        if (i + 1 == n) {
            /* The value's own last block is its final one: 15 stripes
             * (the 16th would start at len - 64, one byte short of "more
             * input"), then the last stripe with the shifted key. */
            hb_add(acc, s);
            XXH3_accumulate_512(acc, p + len - HB_STRIPE, HB_LAST_KEY);
        }
        XXH3_accumulate_512(s, b + HB_BLOCK - HB_STRIPE, XXH3_kSecret + 8 * (HB_BLOCK / HB_STRIPE - 1));
        hb_copy(sums + 8 * i, s);
        if (i + 1 < n) {
            hb_add(acc, s);
            XXH3_scrambleAcc(acc, HB_SCRAMBLE_KEY);
        }
    }
    return XXH3_mergeAccs(acc, HB_MERGE_KEY, (uint64_t)len * XXH_PRIME64_1);
}

/* The digest of a stream of `total` bytes (> HB_BLOCK) whose accumulators
 * stand at acc after every block but the last: `last` holds the final
 * 1 .. HB_BLOCK bytes, `prev` the 64 bytes before them. acc is not changed. */
static inline uint64_t hb_final(const uint64_t *acc_in, const uint8_t *last, size_t n, const uint8_t *prev,
                                uint64_t total)
{
    XXH_ALIGN(64) uint64_t acc[8];
    memcpy(acc, acc_in, sizeof acc);
    hb_stripes(acc, last, (unsigned)((n - 1) / HB_STRIPE));
    uint8_t tail[HB_STRIPE];
    if (n >= HB_STRIPE) {
        memcpy(tail, last + n - HB_STRIPE, HB_STRIPE);
    } else {
        memcpy(tail, prev + n, HB_STRIPE - n);
        memcpy(tail + HB_STRIPE - n, last, n);
    }
    XXH3_accumulate_512(acc, tail, HB_LAST_KEY);
    return XXH3_mergeAccs(acc, HB_MERGE_KEY, total * XXH_PRIME64_1);
}

#endif
