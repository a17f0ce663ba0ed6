/* reader/trace.h - the reader's stages as NVTX ranges, so Nsight Systems
 * timelines show gather, upload and the consumer's wait next to the
 * trainer's kernels. Built with CUDA only; NVTX3 is header-only and costs a
 * branch per range until a tool (nsys) attaches. Internal. */
#ifndef STK_READER_TRACE_H
#define STK_READER_TRACE_H

#ifdef STOKER_HAVE_CUDA
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wstrict-prototypes"
#  pragma GCC diagnostic ignored "-Wshadow"
#  include <nvtx3/nvToolsExt.h>
#  pragma GCC diagnostic pop
#  include <stdio.h>
#  define STK_TRACE_PUSH(...)                       \
    do {                                            \
      char trace_[64];                              \
      snprintf(trace_, sizeof trace_, __VA_ARGS__); \
      nvtxRangePushA(trace_);                       \
    } while (0)
#  define STK_TRACE_POP() nvtxRangePop()
#else
#  define STK_TRACE_PUSH(...) ((void)0)
#  define STK_TRACE_POP() ((void)0)
#endif

#endif
