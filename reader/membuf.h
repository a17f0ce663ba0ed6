/* reader/membuf.h - the reader's large buffers (slots, quasi blocks, read
 * bounce areas). Not installed. */
#ifndef STK_READER_MEMBUF_H
#define STK_READER_MEMBUF_H

#include <stdint.h>

/* n bytes, page-aligned, freed with free(); NULL when out of memory. Buffers
 * of a huge page (2 MiB) or more are aligned to one and advised as
 * transparent huge pages (membuf.c says why). */
void *stk__buf_alloc(uint64_t n);

#endif
