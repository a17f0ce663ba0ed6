/* reader/membuf.c - large buffers as transparent huge pages.
 *
 * The reader's big buffers (slots of tens of MiB, 4 MiB quasi blocks, read
 * bounce areas) are fresh memory that the workers first touch while they
 * copy or read into it. With 4 KiB pages that is one page fault per 4 KiB:
 * in a virtual machine a fault costs ~10 us, so the first touch of a 48 MiB
 * slot takes ~0.15 s (0.3 GB/s), and direct reads into fresh blocks fault
 * the same way when the kernel pins their pages. Advised as huge pages, the
 * same memory takes one fault per 2 MiB, and copies into it miss the TLB
 * less. The advice only applies where transparent huge pages are set to
 * "madvise" or "always" (Debian's default is "madvise"); elsewhere it fails
 * and the buffer is ordinary memory. bench/README.md has the measurements. */
#define _GNU_SOURCE /* MADV_HUGEPAGE */
#include "membuf.h"

#include <stdlib.h>
#include <sys/mman.h>

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
