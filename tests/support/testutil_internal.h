/*
 * tests/support/testutil_internal.h - testutil.h plus the format library's
 * internals (format/internal.h: layout offsets, rd/wr helpers, stk__*), for
 * the white-box tests. Only a test added with WHITEBOX format in its
 * CMakeLists.txt has format/ on its include path, so a black-box test that
 * reaches for this header fails to build rather than quietly growing a
 * dependency on internals.
 */
#ifndef STK_TESTUTIL_INTERNAL_H
#define STK_TESTUTIL_INTERNAL_H

/* White-box tests see everything the format library does, its advanced API too. */
#ifndef STOKER_ADVANCED_API
#  define STOKER_ADVANCED_API
#endif
#include "internal.h"
#include "testutil.h"

/* ------------------------------------------------------- header surgery */
/* Corrupt a field, then re-hash the header, so that the check behind the
 * header checksum is the one that fires. */

/* Header size as stored in the (uncorrupted) file bytes. */
static inline uint32_t tu_header_size(const uint8_t *file) { return rd32(file + H_HEADER_SIZE); }

/* Descriptor of field f inside the header. */
static inline uint8_t *tu_desc(uint8_t *file, unsigned f)
{
    return file + STK_HEADER_FIXED + (size_t)f * STK_FIELD_DESC;
}

/* Recompute the header checksum: the last 8 bytes of the header_size-byte
 * header hold stk_hash of the bytes before them. */
static inline void tu_rehash_header(uint8_t *file, uint32_t header_size)
{
    wr64(file + header_size - 8, stk_hash(file, header_size - 8));
}

#endif
