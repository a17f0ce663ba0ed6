/* reader/timeline.h - the reader's timeline recorder (trace=PATH,
 * $STOKER_TRACE): stage ranges and counters kept in memory, one preallocated
 * array per track (a thread: the consumer, each worker, the copy thread),
 * written at close as a Chrome trace-event JSON file (Perfetto,
 * chrome://tracing). A track is written by its own thread only: no lock.
 * Bounded: STK__TIMELINE_CAP events per track; later ones are counted as
 * dropped and the file says how many. Part of the util layer: it calls no
 * other file of reader/. Used through trace.h. Internal. */
#ifndef STK_READER_TIMELINE_H
#define STK_READER_TIMELINE_H

#include "stoker/format.h"

#include <stdint.h>

#define STK__TIMELINE_CAP 65536u /* events per track */
#define STK__TIMELINE_DEPTH 4u   /* nested ranges per track */

typedef struct stk__timeline stk__timeline;

/* A recorder of `tracks` tracks writing to `path` at close. The file is
 * created (truncated) here, so a path that cannot be written fails the open
 * (STK_E_IO naming it). */
stk__timeline *stk__timeline_open(const char *path, unsigned tracks, stk_error *err);
/* The path as given (the recorder's copy). */
const char *stk__timeline_path(const stk__timeline *t);
/* Name track `track` (the thread_name shown). */
void stk__timeline_name(stk__timeline *t, unsigned track, const char *name);
/* Begin a range `stage` (a string literal: it is kept, not copied) on
 * `track`, with the batch's sequence number and part as its args; end the
 * innermost one. */
void stk__timeline_push(stk__timeline *t, unsigned track, const char *stage, uint64_t seq, unsigned part);
void stk__timeline_pop(stk__timeline *t, unsigned track);
/* A counter sample (`name` a string literal) on `track`'s array. */
void stk__timeline_counter(stk__timeline *t, unsigned track, const char *name, double value);
/* Write the file and free the recorder (NULL: no-op). Every track's thread
 * must be done. Returns STK_OK or STK_E_IO (the write failed). */
int stk__timeline_close(stk__timeline *t, stk_error *err);

#endif
