/* tests/reader/test_membuf.c - the reader's large buffers and streaming
 * copies (reader/membuf.c): every length and alignment gives memcpy's bytes
 * and touches nothing outside the destination. */
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "membuf.h"

enum { PAD = 192, MAXLEN = 4096 + 300 };

/* dst and src offsets 0..63 against every 64-byte line position, lengths
 * around the 128-byte blocks and the 64-byte head. */
START_TEST(stream_copy_bytes)
{
    static uint8_t src[MAXLEN + 2 * PAD], dst[MAXLEN + 2 * PAD], want[MAXLEN + 2 * PAD];
    tu_fill(src, sizeof src, 11);
    static const size_t lens[] = {0, 1, 63, 64, 127, 128, 129, 191, 255, 256, 257, 1000, 4096, MAXLEN};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (unsigned so = 0; so < 64; so += 7)
            for (unsigned doff = 0; doff < 64; doff += 5) {
                size_t n = lens[li];
                memset(dst, 0xa5, sizeof dst);
                memset(want, 0xa5, sizeof want);
                memcpy(want + PAD + doff, src + PAD + so, n);
                stk__copy_stream(dst + PAD + doff, src + PAD + so, n);
                stk__copy_fence();
                ck_assert_msg(!memcmp(dst, want, sizeof dst), "length %zu, source +%u, destination +%u", n,
                              so, doff);
            }
}
END_TEST

/* A large buffer (huge-page aligned) copied whole, as a slot's record is. */
START_TEST(stream_copy_large)
{
    const size_t n = (size_t)3 << 20;
    uint8_t *a = stk__buf_alloc(n + 64), *b = stk__buf_alloc(n + 64);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq((uintptr_t)a % 4096, 0);
    tu_fill(a, n + 64, 5);
    memset(b, 0, n + 64);
    stk__copy_stream(b + 8, a + 3, n);
    stk__copy_fence();
    ck_assert(!memcmp(b + 8, a + 3, n));
    ck_assert_uint_eq(b[n + 8], 0);
    ck_assert_uint_eq(b[7], 0);
    free(a);
    free(b);
}
END_TEST

TU_MAIN("membuf", {.name = "membuf", .tests = {stream_copy_bytes, stream_copy_large}})
