/* reader/membuf.c - large buffers as transparent huge pages.
 *
 * The reader's big buffers (slots of tens of MiB, 4 MiB quasi blocks, read
 * bounce areas) are fresh memory that the workers first touch while they
 * copy or read into it. With 4 KiB pages that is one page fault per 4 KiB,
 * and where faults are dear (a virtual machine) the first touch of a slot
 * is slow; direct reads into fresh blocks fault the same way when the
 * kernel pins their pages. Advised as huge pages, the
 * same memory takes one fault per 2 MiB, and copies into it miss the TLB
 * less. The advice only applies where transparent huge pages are set to
 * "madvise" or "always" (Debian's default is "madvise"); elsewhere it fails
 * and the buffer is ordinary memory. bench/README.md has the measurements. */
#define _GNU_SOURCE /* MADV_HUGEPAGE */
#include "membuf.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__x86_64__)
#  include <immintrin.h>
#  define STK_STREAM_X86 1
#endif

#define PAGE_ALIGN 4096u     /* pinnable, O_DIRECT- and DMA-friendly */
#define HUGE_PAGE (2u << 20) /* x86-64 and arm64 with 4 KiB base pages */

void *stk__buf_alloc(uint64_t n)
{
    void *p = NULL;
    if (n != (size_t)n) return NULL;
    if (n < HUGE_PAGE) return posix_memalign(&p, PAGE_ALIGN, n ? (size_t)n : 1) ? NULL : p;
    if (posix_memalign(&p, HUGE_PAGE, (size_t)n)) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, (size_t)(n & ~(uint64_t)(HUGE_PAGE - 1)),
                  MADV_HUGEPAGE); /* the whole huge pages inside */
#endif
    return p;
}

#ifdef STK_STREAM_X86
/* n a multiple of 128, d 64-byte aligned. */
__attribute__((target("avx2"))) static void stream_avx2(uint8_t *d, const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(s + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(s + i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(const void *)(s + i + 64));
        __m256i e = _mm256_loadu_si256((const __m256i *)(const void *)(s + i + 96));
        _mm256_stream_si256((__m256i *)(void *)(d + i), a);
        _mm256_stream_si256((__m256i *)(void *)(d + i + 32), b);
        _mm256_stream_si256((__m256i *)(void *)(d + i + 64), c);
        _mm256_stream_si256((__m256i *)(void *)(d + i + 96), e);
    }
}
#endif

int stk__copy_stream_ok(void)
{
#ifdef STK_STREAM_X86
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

void stk__copy_stream(void *dst, const void *src, size_t n)
{
#ifdef STK_STREAM_X86
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (64 - ((uintptr_t)d & 63)) & 63; /* whole lines only: the edges go through the cache */
    if (n >= head + 128 && stk__copy_stream_ok()) {
        memcpy(d, s, head);
        size_t body = (n - head) & ~(size_t)127;
        stream_avx2(d + head, s + head, body);
        memcpy(d + head + body, s + head + body, n - head - body);
        return;
    }
#endif
    memcpy(dst, src, n);
}

void stk__copy_fence(void)
{
#ifdef STK_STREAM_X86
    _mm_sfence(); /* streaming stores are weakly ordered: visible before the slot is handed on */
#endif
}
