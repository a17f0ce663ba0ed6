/* reader/util.h - the util layer: helpers any reader file may call. They
 * call no other file of reader/ (membuf.h is the util layer's other half).
 * Internal. */
#ifndef STK_READER_UTIL_H
#define STK_READER_UTIL_H

#include "stoker/format.h"

#include <stddef.h>
#include <time.h>

/* Copy a caller's struct of `src_size` bytes into `dst` (`dst_size` bytes,
 * already holding the defaults): min(src_size, dst_size) bytes, so fields the
 * caller's header lacks keep their defaults. Refuses (STK_E_ARG, naming
 * `what`) a size below `min_size`, and a larger struct whose bytes beyond
 * dst_size are not all zero: a caller built against a newer stoker has set
 * fields this library does not know. */
int stk__read_sized(void *dst, size_t dst_size, const void *src, size_t src_size, size_t min_size,
                    const char *what, stk_error *err);
/* Write `src` (the defaults, `src_size` bytes) into a caller's struct of
 * `dst_size` bytes: never past its end; bytes beyond what this library knows
 * are zeroed. */
void stk__write_sized(void *dst, size_t dst_size, const void *src, size_t src_size);

/* Seconds on the monotonic clock (inline: the workers read it per batch
 * and per source change). */
static inline double stk__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The process's major page faults so far (reads from storage through the
 * maps; getrusage). */
uint64_t stk__major_faults(void);

#endif
