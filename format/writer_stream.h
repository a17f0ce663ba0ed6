/* format/writer_stream.h - the shard writer's streaming I/O thread
 * (writer_stream.c). Internal to the format library; only writer.c uses it.
 *
 * When the record count is known up front (stk_writer_expect), the header
 * is too, and field 0 can go to the file in file order while the shard is
 * being written: a thread of its own hashes it into the whole-file XXH3 and
 * writes it, with O_DIRECT where the file system takes it. The appending
 * thread only queues: values are copied into staging buffers, or lent
 * (written from the caller's memory and handed back through its callback).
 *
 * Every function but stk__stream_free returns a stk_status. An error is
 * sticky: the stream then queues nothing more, and the writer is done. */
#ifndef STOKER_FORMAT_WRITER_STREAM_H
#define STOKER_FORMAT_WRITER_STREAM_H

#include "stoker/format.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct stk__stream stk__stream;

/* Start the thread (*out) for the shard being written to `tmp`, whose
 * buffered descriptor is fd (writes O_DIRECT cannot do go there); path names
 * the shard in messages. The stream borrows fd, path and tmp until freed.
 * The file starts with hdr (hdr_len bytes: the header made for the expected
 * record count; copied) and zeros up to data_off, where field 0 begins.
 * *out stays NULL when out of memory or the thread cannot start. */
int stk__stream_start(stk__stream **out, int fd, const char *path, const char *tmp, const uint8_t *hdr,
                      size_t hdr_len, uint64_t data_off, stk_error *err);

/* Field 0 of one record, copied into a staging buffer. */
int stk__stream_copy(stk__stream *st, const void *p, size_t n, stk_error *err);

/* Whether p[0 .. n) can be lent: it starts and ends on STK_WRITER_LEND_ALIGN,
 * and so does its place in the file (O_DIRECT writes it from there). */
bool stk__stream_can_lend(const stk__stream *st, const void *p, size_t n);

/* Field 0 of one record, queued by reference (stk__stream_can_lend holds):
 * written from p, then given back with done(ctx, p) on the I/O thread, or
 * when the stream is freed. sums: NULL, or p's block sums (stk_hash_blocks),
 * which the file hash then takes instead of reading p. On an error p is not
 * queued and stays the caller's. */
int stk__stream_lend(stk__stream *st, const void *p, size_t n, const uint64_t *sums, stk_lent_done_fn done,
                     void *ctx, stk_error *err);

/* Queue what is buffered, wait for every write, end the thread. *end: the
 * file offset after field 0's last byte (set on an error too). */
int stk__stream_drain(stk__stream *st, uint64_t *end, stk_error *err);

/* Whether the file hash started with exactly this header (the header holds
 * the record count, so a shard that got another count does not match). */
bool stk__stream_header_is(const stk__stream *st, const uint8_t *hdr, size_t len);

/* After a successful drain: the whole-file XXH3, given the file's bytes
 * after field 0's data (tail[0 .. n), laid out as in the file). */
uint64_t stk__stream_digest(stk__stream *st, const uint8_t *tail, size_t n);

/* Add the appender's waits into sink->queue_wait from now on (NULL: stop). */
void stk__stream_sink(stk__stream *st, stk_writer_io_stats *sink);

/* Add the I/O thread's figures (hash, write, bytes, writes) into *into.
 * Ends the thread first if it still runs, dropping what is queued, as
 * stk__stream_free does (after stk__stream_drain nothing is). */
void stk__stream_stats_add(stk__stream *st, stk_writer_io_stats *into);

/* End the thread if it still runs (dropping what is queued; lent values go
 * back to their owners) and free everything. NULL is fine. */
void stk__stream_free(stk__stream *st);

#endif
