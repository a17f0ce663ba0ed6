/* reader/abi_v0.h - the option structs as stoker 0.1.0 laid them out, frozen,
 * and their smallest sizes; the sized copy that lets any release's caller be
 * served is util.h's stk__read_sized. Not installed.
 *
 * 0.1.0 had no size guard: its binaries call stk_reader_options_init,
 * stk_reader_open, stk_reader_open_dataset and stk_transform_imagenet, which
 * are now inline wrappers in the header, so those symbols are kept as entry
 * points that take the 0.1.0 sizes (abi.c). Later fields are only ever
 * appended, which the assertions below hold this tree to: every 0.1.0 field
 * keeps its offset, so a caller's struct of any release is a prefix of the
 * library's and a size says which fields it has. A field appended where the
 * previous struct had tail padding would be read from that padding: when a
 * new field would start before the old sizeof, add explicit padding first. */
#ifndef STK_READER_ABI_V0_H
#define STK_READER_ABI_V0_H

#include "stoker/reader.h"
#include "util.h" /* the sized copies */

#include <stddef.h>

typedef struct {
    uint32_t batch_size;
    int order;
    uint64_t seed;
    int rank;
    int world_size;
    unsigned threads;
    unsigned prefetch;
    int tail;
    int verify;
    const char *fields;
    uint64_t memory_budget;
    uint64_t quasi_block_bytes;
    uint32_t quasi_window;
    int release_pages;
    int device;
    int device_index;
    int device_fallback;
    void *stream;
    const struct stk_transform *transform;
    uint64_t block_cache_bytes;
} stk__reader_options_v0;

typedef struct {
    const char *field;
    int dtype;
    int layout;
    float mean[4], std[4];
    int crop;
    uint32_t out_height, out_width;
    float scale_min, scale_max;
    float ratio_min, ratio_max;
    float flip_prob;
} stk__transform_v0;

#define STK__SAME(cur, v0, f)                                                                           \
  _Static_assert(offsetof(cur, f) == offsetof(v0, f), #cur "." #f " moved: fields are appended, never " \
                                                           "moved")
STK__SAME(stk_reader_options, stk__reader_options_v0, batch_size);
STK__SAME(stk_reader_options, stk__reader_options_v0, order);
STK__SAME(stk_reader_options, stk__reader_options_v0, seed);
STK__SAME(stk_reader_options, stk__reader_options_v0, rank);
STK__SAME(stk_reader_options, stk__reader_options_v0, world_size);
STK__SAME(stk_reader_options, stk__reader_options_v0, threads);
STK__SAME(stk_reader_options, stk__reader_options_v0, prefetch);
STK__SAME(stk_reader_options, stk__reader_options_v0, tail);
STK__SAME(stk_reader_options, stk__reader_options_v0, verify);
STK__SAME(stk_reader_options, stk__reader_options_v0, fields);
STK__SAME(stk_reader_options, stk__reader_options_v0, memory_budget);
STK__SAME(stk_reader_options, stk__reader_options_v0, quasi_block_bytes);
STK__SAME(stk_reader_options, stk__reader_options_v0, quasi_window);
STK__SAME(stk_reader_options, stk__reader_options_v0, release_pages);
STK__SAME(stk_reader_options, stk__reader_options_v0, device);
STK__SAME(stk_reader_options, stk__reader_options_v0, device_index);
STK__SAME(stk_reader_options, stk__reader_options_v0, device_fallback);
STK__SAME(stk_reader_options, stk__reader_options_v0, stream);
STK__SAME(stk_reader_options, stk__reader_options_v0, transform);
STK__SAME(stk_reader_options, stk__reader_options_v0, block_cache_bytes);
STK__SAME(stk_transform, stk__transform_v0, field);
STK__SAME(stk_transform, stk__transform_v0, dtype);
STK__SAME(stk_transform, stk__transform_v0, layout);
STK__SAME(stk_transform, stk__transform_v0, mean);
STK__SAME(stk_transform, stk__transform_v0, std);
STK__SAME(stk_transform, stk__transform_v0, crop);
STK__SAME(stk_transform, stk__transform_v0, out_height);
STK__SAME(stk_transform, stk__transform_v0, out_width);
STK__SAME(stk_transform, stk__transform_v0, scale_min);
STK__SAME(stk_transform, stk__transform_v0, scale_max);
STK__SAME(stk_transform, stk__transform_v0, ratio_min);
STK__SAME(stk_transform, stk__transform_v0, ratio_max);
STK__SAME(stk_transform, stk__transform_v0, flip_prob);
_Static_assert(sizeof(stk_reader_options) >= sizeof(stk__reader_options_v0), "stk_reader_options shrank");
_Static_assert(sizeof(stk_transform) >= sizeof(stk__transform_v0), "stk_transform shrank");

/* The smallest size any caller's struct has: 0.1.0's. */
#define STK__READER_OPTIONS_MIN_SIZE sizeof(stk__reader_options_v0)
#define STK__TRANSFORM_MIN_SIZE sizeof(stk__transform_v0)

#endif
