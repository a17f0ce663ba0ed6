/* tests/format/test_hash_blocks.c - XXH3 taken apart at its blocks
 * (format/hash_blocks.h): stk_hash, stk_hash_blocks and the streaming
 * hasher (stk__hasher) give exactly what the system libxxhash's XXH3_64bits
 * gives, with the portable, AVX2 and AVX-512 kernels (those the CPU has),
 * however the input is cut into updates and whichever values arrive as block
 * sums instead of bytes. The reference is the system libxxhash (<xxhash.h>,
 * -lxxhash), not the pinned copy the format library inlines
 * (format/third_party/xxhash): these tests are what pins that copy, and
 * hash_blocks.h's use of its private names, to XXH3. */
#include "testutil_internal.h"

#include <stdlib.h>
#include <xxhash.h>

#define BLK STK_HASH_BLOCK

/* Deterministic bytes that are not periodic within a block. */
static uint8_t *bytes(size_t n, uint64_t seed)
{
    uint8_t *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    uint64_t x = seed * 0x9e3779b97f4a7c15u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)(x >> 24);
    }
    return p;
}

/* Whole-block values: the value's hash is XXH3's, and the sums are each
 * block's own (checked independently: the sums of a block do not depend on
 * what surrounds it, so hashing the block alone, as a 2-block value with a
 * fixed second block, must reproduce them). */
START_TEST(value_hash_and_sums)
{
    static const size_t blocks[] = {1, 2, 3, 15, 16, 17, 147, 192};
    for (int level = STK_HASH_ISA_BASE; level <= STK_HASH_ISA_AVX512; level++)
        for (size_t k = 0; k < sizeof blocks / sizeof *blocks; k++) {
            size_t len = blocks[k] * BLK;
            uint8_t *p = bytes(len, len + (size_t)level);
            uint64_t *sums = malloc(len / BLK * 8 * sizeof *sums),
                     *base = malloc(len / BLK * 8 * sizeof *base);
            ck_assert_uint_eq(stk__hash_blocks_isa(p, len, sums, level), XXH3_64bits(p, len));
            /* every level's sums are the portable kernels' (a writer may fold
             * sums made on one level into a hash kept on another) */
            stk__hash_blocks_isa(p, len, base, STK_HASH_ISA_BASE);
            ck_assert_msg(memcmp(sums, base, len / BLK * 64) == 0,
                          "level %d: sums differ from the portable ones", level);
            free(base);
            uint8_t pair[2 * BLK];
            uint64_t two[16];
            memset(pair + BLK, 0x5a, BLK);
            for (size_t b = 0; b < len / BLK; b += 7) {
                memcpy(pair, p + b * BLK, BLK);
                stk__hash_blocks_isa(pair, sizeof pair, two, level);
                ck_assert_msg(memcmp(two, sums + 8 * b, 64) == 0, "block %zu of %zu: sums differ", b,
                              len / BLK);
            }
            free(sums);
            free(p);
        }
}
END_TEST

/* Lengths that are not whole blocks, and NULL sums: plain stk_hash, sums
 * untouched. */
START_TEST(other_lengths_hash_plainly)
{
    static const size_t lens[] = {0, 1, 63, 240, 241, 1023, 1025, 5000};
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
        uint8_t *p = bytes(lens[k], lens[k]);
        uint64_t sums[8] = {7, 7, 7, 7, 7, 7, 7, 7};
        ck_assert_uint_eq(stk_hash_blocks(p, lens[k], sums), XXH3_64bits(p, lens[k]));
        for (int l = 0; l < 8; l++) ck_assert_uint_eq(sums[l], 7);
        free(p);
    }
    uint8_t *p = bytes(4 * BLK, 1);
    ck_assert_uint_eq(stk_hash_blocks(p, 4 * BLK, NULL), XXH3_64bits(p, 4 * BLK));
    free(p);
}
END_TEST

/* Feed data[0 .. len) to a file hash in pieces: plain updates of sizes from
 * `cuts` (cycled), and at block-aligned places every third time a run of
 * whole blocks as sums. */
static uint64_t fed(const uint8_t *data, size_t len, const size_t *cuts, size_t ncuts, int level, int absorb)
{
    stk__hasher *h = stk__hasher_new_isa(level);
    ck_assert_ptr_nonnull(h);
    size_t at = 0, k = 0;
    while (at < len) {
        size_t n = cuts[k++ % ncuts];
        if (n > len - at) n = len - at;
        if (absorb && at % BLK == 0 && k % 3 == 0 && len - at >= BLK) {
            size_t nb = (len - at) / BLK < 5 ? (len - at) / BLK : 5;
            uint64_t *sums = malloc(nb * 64);
            stk__hash_blocks_isa(data + at, nb * BLK, sums, level);
            stk__hasher_absorb(h, data + at, sums, nb * BLK);
            free(sums);
            at += nb * BLK;
            continue;
        }
        stk__hasher_update(h, data + at, n);
        at += n;
    }
    uint64_t v = stk__hasher_digest(h);
    stk__hasher_free(h);
    return v;
}

START_TEST(file_hash_any_split)
{
    /* around the short/long boundary (240), a block, two, and a tail of
     * fewer than 64 bytes after whole blocks (the last stripe reaches back
     * into the previous block) */
    static const size_t lens[] = {0,
                                  1,
                                  200,
                                  240,
                                  241,
                                  1000,
                                  BLK - 1,
                                  BLK,
                                  BLK + 1,
                                  BLK + 63,
                                  BLK + 64,
                                  2 * BLK,
                                  2 * BLK + 5,
                                  3 * BLK - 64,
                                  7 * BLK,
                                  10 * BLK + 17,
                                  50 * BLK + 900};
    static const size_t cut_sets[][4] = {{1 << 30, 1 << 30, 1 << 30, 1 << 30}, /* one update */
                                         {BLK, BLK, BLK, BLK},
                                         {1, 7, 64, 1000},
                                         {BLK - 1, 2, BLK + 1, 3 * BLK},
                                         {64, 64, 64, 64}};
    for (int level = STK_HASH_ISA_BASE; level <= STK_HASH_ISA_AVX512; level++)
        for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
            uint8_t *p = bytes(lens[k], 3 * lens[k] + 1);
            uint64_t want = XXH3_64bits(p, lens[k]);
            for (size_t c = 0; c < sizeof cut_sets / sizeof *cut_sets; c++)
                for (int absorb = 0; absorb < 2; absorb++)
                    ck_assert_msg(fed(p, lens[k], cut_sets[c], 4, level, absorb) == want,
                                  "len %zu, cuts %zu, absorb %d, level %d", lens[k], c, absorb, level);
            free(p);
        }
}
END_TEST

/* The writer's shape: a header, zeros to a 4 KiB boundary, lent images as
 * sums, a tail of the other regions; the last value may also end the input. */
START_TEST(file_hash_like_a_shard)
{
    size_t img = 192 * BLK, n = 9, len = 4096 + n * img + 333;
    uint8_t *p = bytes(len, 42);
    uint64_t *sums = malloc(img / BLK * 64);
    for (int level = STK_HASH_ISA_BASE; level <= STK_HASH_ISA_AVX512; level++)
        for (int tail = 0; tail < 2; tail++) {
            size_t total = tail ? len : 4096 + n * img;
            stk__hasher *h = stk__hasher_new_isa(level);
            stk__hasher_update(h, p, 300);
            stk__hasher_update(h, p + 300, 4096 - 300);
            for (size_t i = 0; i < n; i++) {
                const uint8_t *v = p + 4096 + i * img;
                ck_assert_uint_eq(stk__hash_blocks_isa(v, img, sums, level), XXH3_64bits(v, img));
                stk__hasher_absorb(h, v, sums, img);
            }
            if (tail) stk__hasher_update(h, p + total - 333, 333);
            ck_assert_uint_eq(stk__hasher_digest(h), XXH3_64bits(p, total));
            stk__hasher_free(h);
        }
    free(sums);
    free(p);
}
END_TEST

/* Absorbing really uses the sums (a wrong one changes the hash) and falls
 * back to the bytes off block boundaries (a wrong one then does not). */
START_TEST(sums_are_used_on_boundaries_only)
{
    size_t img = 8 * BLK;
    uint8_t *p = bytes(3 * img + 100, 9);
    uint64_t sums[8 * 8];
    for (int off = 0; off < 2; off++) {
        stk_hash_blocks(p + 100, img, sums);
        sums[8 * 2 + 5] += 1; /* block 2, lane 5 */
        stk__hasher *h = stk__hasher_new();
        stk__hasher_update(h, p, off ? 100 : 0);
        stk__hasher_absorb(h, p + 100, sums, img);
        stk__hasher_update(h, p + 100 + img, 77);
        uint64_t got = stk__hasher_digest(h),
                 want = XXH3_64bits(off ? p : p + 100, (off ? 100 : 0) + img + 77);
        if (off) ck_assert_uint_eq(got, want);
        else ck_assert_uint_ne(got, want);
        stk__hasher_free(h);
    }
    free(p);
}
END_TEST

/* ------------------------------------------- pinned to the system XXH3 */

/* The vendored xxhash.h (format/third_party/xxhash) is compiled into the
 * library three times, and hash_blocks.h uses its private names; what pins
 * all of it to XXH3 is that every path gives the system libxxhash's
 * XXH3_64bits. A small deterministic generator, so a failure replays. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Every length from 0 to 4 blocks, at an aligned and an odd address: the
 * one-shot hash of each level, the streaming hasher in one update and in
 * 1-byte-to-block pieces, and, on whole blocks, the value hash with sums and
 * their fold. */
START_TEST(every_length_to_4_blocks)
{
    const size_t max = 4 * BLK;
    uint8_t *p = bytes(max + 64, 77);
    uint64_t sums[4 * 8];
    for (int level = STK_HASH_ISA_BASE; level <= STK_HASH_ISA_AVX512; level++)
        for (size_t off = 0; off < 64; off += 37)
            for (size_t len = 0; len <= max; len++) {
                const uint8_t *d = p + off;
                uint64_t want = XXH3_64bits(d, len);
                ck_assert_msg(stk__hash_isa_cap(d, len, level) == want, "stk_hash, level %d, len %zu", level,
                              len);
                static const size_t one[] = {SIZE_MAX}, pieces[] = {1, 63, 64, 65, BLK - 1, BLK, 7};
                ck_assert_msg(fed(d, len, one, 1, level, 0) == want, "one update, level %d, len %zu", level,
                              len);
                ck_assert_msg(fed(d, len, pieces, 7, level, len % 2) == want, "pieces, level %d, len %zu",
                              level, len);
                if (len == 0 || len % BLK) continue;
                ck_assert_uint_eq(stk__hash_blocks_isa(d, len, sums, level), want);
                stk__hasher *h = stk__hasher_new_isa(level);
                stk__hasher_absorb(h, d, sums, len);
                ck_assert_msg(stk__hasher_digest(h) == want, "absorb, level %d, len %zu", level, len);
                stk__hasher_free(h);
            }
    free(p);
}
END_TEST

/* Whole-block values from one block to 4 MiB (every count to 64 blocks,
 * then counts around the powers of two): the value hash with sums, and a
 * file of a 4 KiB head, the value as sums and a short tail, whose hash takes
 * the value's last block as bytes and its other blocks from the sums. */
START_TEST(block_multiples_to_mibs)
{
    const size_t most = 4096, head = 4096, tail = 333;
    uint8_t *p = bytes(head + most * BLK + tail, 5);
    uint64_t *sums = malloc(most * 64);
    ck_assert_ptr_nonnull(sums);
    size_t counts[64 + 17]; /* 64, then 17 around the powers of two */
    for (size_t i = 0; i < 64; i++) counts[i] = i + 1;
    for (size_t i = 0, pow = 128; pow <= most; pow *= 2) /* 127, 128, 129, ..., 4095, 4096 */
        for (size_t d = 0; d < 3 && pow - 1 + d <= most; d++) counts[64 + i++] = pow - 1 + d;
    for (int level = STK_HASH_ISA_BASE; level <= STK_HASH_ISA_AVX512; level++)
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
            size_t n = counts[c];
            const uint8_t *v = p + head;
            ck_assert_msg(stk__hash_blocks_isa(v, n * BLK, sums, level) == XXH3_64bits(v, n * BLK),
                          "value of %zu blocks, level %d", n, level);
            for (int with_tail = 0; with_tail < 2; with_tail++) {
                stk__hasher *h = stk__hasher_new_isa(level);
                stk__hasher_update(h, p, head);
                stk__hasher_absorb(h, v, sums, n * BLK);
                if (with_tail) stk__hasher_update(h, v + n * BLK, tail);
                size_t total = head + n * BLK + (with_tail ? tail : 0);
                ck_assert_msg(stk__hasher_digest(h) == XXH3_64bits(p, total),
                              "file of %zu blocks, tail %d, level %d", n, with_tail, level);
                stk__hasher_free(h);
            }
        }
    free(sums);
    free(p);
}
END_TEST

/* Random files cut at random places: plain updates of random sizes, and,
 * where the stream is on a block boundary, runs of whole blocks as sums made
 * at a random level (sums are the same on every level). */
START_TEST(random_splits)
{
    const size_t max = (size_t)2 << 20;
    uint8_t *p = bytes(max, 11);
    uint64_t *sums = malloc(max / BLK * 64);
    ck_assert_ptr_nonnull(sums);
    uint64_t s = 0x5eed;
    for (int trial = 0; trial < 120; trial++) {
        size_t len = (size_t)(rng_next(&s) % (trial % 10 == 0 ? max : max / 16));
        int level = (int)(rng_next(&s) % 3);
        stk__hasher *h = stk__hasher_new_isa(level);
        for (size_t at = 0; at < len;) {
            uint64_t r = rng_next(&s);
            size_t left = len - at;
            if (at % BLK == 0 && left >= BLK && r % 3 == 0) {
                size_t nb = 1 + (size_t)(r >> 8) % (left / BLK);
                stk__hash_blocks_isa(p + at, nb * BLK, sums, (int)(r >> 40) % 3);
                stk__hasher_absorb(h, p + at, sums, nb * BLK);
                at += nb * BLK;
                continue;
            }
            size_t k = (size_t)(r >> 8) % (r % 5 == 0 ? 4 * BLK : 200) + 1;
            if (r % 7 == 0) k = BLK - at % BLK; /* onto the next block boundary */
            if (k > left) k = left;
            stk__hasher_update(h, p + at, k);
            at += k;
        }
        ck_assert_msg(stk__hasher_digest(h) == XXH3_64bits(p, len), "trial %d: len %zu, level %d", trial, len,
                      level);
        stk__hasher_free(h);
    }
    free(sums);
    free(p);
}
END_TEST

TU_MAIN("hash_blocks", {.name = "core",
                        .tests = {value_hash_and_sums, other_lengths_hash_plainly, file_hash_any_split,
                                  file_hash_like_a_shard, sums_are_used_on_boundaries_only,
                                  every_length_to_4_blocks, block_multiples_to_mibs, random_splits}})
