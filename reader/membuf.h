/* reader/membuf.h - the reader's large buffers (slots, quasi blocks, read
 * bounce areas). Not installed. */
#ifndef STK_READER_MEMBUF_H
#define STK_READER_MEMBUF_H

#include <stddef.h>
#include <stdint.h>

/* n bytes, page-aligned, freed with free(); NULL when out of memory. Buffers
 * of a huge page (2 MiB) or more are aligned to one and advised as
 * transparent huge pages (membuf.c says why). */
void *stk__buf_alloc(uint64_t n);

/* Streaming copies: large values gathered into large slots are written with
 * non-temporal stores (membuf.c says when and why). stk__copy_stream_ok says
 * whether this CPU has them (x86-64 with AVX2); elsewhere stk__copy_stream
 * is memcpy. After a run of streaming copies, and before another thread may
 * read what they wrote, the writer calls stk__copy_fence. */
int stk__copy_stream_ok(void);
void stk__copy_stream(void *dst, const void *src, size_t n);
void stk__copy_fence(void);

#endif
