/* reader/trace.h - the reader's stages, marked once for both timelines:
 * the JSON recorder of trace=PATH (timeline.h; always built, one
 * predictable branch per range while it is off) and, built with CUDA, NVTX
 * ranges, so Nsight Systems shows gather, upload and the consumer's wait next
 * to the trainer's kernels (NVTX3 is header-only and costs a branch per range
 * until a tool attaches). `tl` is the reader's recorder (NULL: off), `track`
 * the calling thread's track, `stage` a string literal, `seq` the batch's
 * sequence number, `part` its part. Internal. */
#ifndef STK_READER_TRACE_H
#define STK_READER_TRACE_H

#include "timeline.h"

#ifdef STOKER_HAVE_CUDA
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wstrict-prototypes"
#  pragma GCC diagnostic ignored "-Wshadow"
#  include <nvtx3/nvToolsExt.h>
#  pragma GCC diagnostic pop
#  include <stdio.h>
#  define STK__NVTX_PUSH(stage, seq, part)                                                            \
    do {                                                                                              \
      char trace_[64];                                                                                \
      snprintf(trace_, sizeof trace_, "stoker %s %llu.%u", stage, (unsigned long long)(seq), (part)); \
      nvtxRangePushA(trace_);                                                                         \
    } while (0)
#  define STK__NVTX_POP() nvtxRangePop()
#else
#  define STK__NVTX_PUSH(stage, seq, part) ((void)0)
#  define STK__NVTX_POP() ((void)0)
#endif

#define STK_TRACE_PUSH(tl, track, stage, seq, part)                                         \
  do {                                                                                      \
    if (__builtin_expect((tl) != NULL, 0)) stk__timeline_push(tl, track, stage, seq, part); \
    STK__NVTX_PUSH(stage, seq, part);                                                       \
  } while (0)
#define STK_TRACE_POP(tl, track)                                         \
  do {                                                                   \
    if (__builtin_expect((tl) != NULL, 0)) stk__timeline_pop(tl, track); \
    STK__NVTX_POP();                                                     \
  } while (0)
#define STK_TRACE_COUNTER(tl, track, name, value)                                         \
  do {                                                                                    \
    if (__builtin_expect((tl) != NULL, 0)) stk__timeline_counter(tl, track, name, value); \
  } while (0)

/* Tracks: the consumer (the thread calling next), worker i, the copy thread. */
#define STK_TRACK_CONSUMER 0u
#define STK_TRACK_WORKER(i) (1u + (i))
#define STK_TRACK_COPIER(threads) (1u + (threads))

#endif
