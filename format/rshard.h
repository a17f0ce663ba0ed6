/* format/rshard.h - shards of a remote dataset (s3://, https://), as the
 * format library's stk_shard. Internal: libstoker's dataset open and the
 * reader's remote I/O backend call these; users only name the dataset.
 *
 * A remote shard's bytes live in the node's cache file (remote/cache.h),
 * mapped read-only: at open the header, footer, the offsets columns and
 * block tables of its fields and its checksum table are fetched as ranges
 * and stored as the file's pinned metadata, so open, the layout checks and
 * every metadata call work as on a local file. Record bytes are fetched
 * when asked for: stk_shard_value, stk_shard_block_* and the verify calls
 * on a remote shard fetch the values they touch first (synchronously,
 * coalesced, checked against the checksum table as they arrive: a mismatch
 * refetches once, then fails naming shard, field and record), so nothing
 * ever reads a hole as data. The reader's engine fetches ahead of that
 * through stk__rgroup and stores with stk__rshard_store.
 *
 * Units of presence (the cache's units): field f of record i is unit
 * f * N + i for an uncompressed field; for a compressed field its block b
 * is unit f * N + b (blocks never outnumber records). */
#ifndef STK_FORMAT_RSHARD_H
#define STK_FORMAT_RSHARD_H

#include "remote.h"
#include "stoker/format.h"

#include <stddef.h>
#include <stdint.h>

typedef struct stk__rcache stk__rcache;

/* What the synchronous fetches (stk__rshard_fetch, so stk_shard_value and
 * the rest) stored past the cache limit, shared by the shards of one
 * dataset: at most `bytes` (0: STK__RWINDOW_DEFAULT) are held so; beyond
 * that the oldest are dropped from the cache again. A pointer into such
 * bytes (stk_shard_value) stays valid until that many further bytes have
 * been stored past the limit. */
#define STK__RWINDOW_DEFAULT ((uint64_t)64 << 20)
typedef struct stk__rwindow stk__rwindow;
stk__rwindow *stk__rwindow_new(uint64_t bytes);
void stk__rwindow_free(stk__rwindow *w); /* after every shard using it is closed */

/* Open the object `key` of client r (name: the address for messages,
 * "s3://bucket/prefix/shard.00000") through cache c; size and index_hash
 * from the manifest entry (the cache id; the footer must agree). records and
 * nfields: the manifest's (the cache file's units; 0: unknown, the header is
 * fetched first). etag: the object's (If-Match of every GET); NULL: taken
 * from a HEAD here. w: the dataset's window (NULL: the shard has its own).
 * r, c and w must outlive the shard. */
stk_shard *stk__rshard_open(stk__remote *r, stk__rcache *c, const char *key, const char *name, uint64_t size,
                            uint64_t index_hash, uint64_t records, unsigned nfields, const char *etag,
                            stk__rwindow *w, stk_error *err);
int stk__shard_is_remote(const stk_shard *sh);
stk__remote *stk__rshard_client(const stk_shard *sh);
const char *stk__rshard_key(const stk_shard *sh);
const char *stk__rshard_etag(const stk_shard *sh); /* If-Match for its GETs; NULL: none */

/* The field and records a run of file bytes [off, off + len) covers: the
 * records' values of one field (uncompressed: [first, first + count); a
 * compressed field's frames: its blocks, *block = 1). STK_E_ARG when the
 * range is not whole values of one field. */
int stk__rshard_span(const stk_shard *sh, uint64_t off, uint64_t len, unsigned *field, uint64_t *first,
                     uint64_t *count, int *block, stk_error *err);
/* 1 when every unit of the span is in the cache. */
int stk__rshard_present(const stk_shard *sh, unsigned field, uint64_t first, uint64_t count, int block);
/* Check bytes of a span (as stk__rshard_span gave) against the checksum
 * table (uncompressed values; a compressed block: its frame decodes and its
 * records' hashes agree). STK_E_CHECKSUM naming shard, field, record. */
int stk__rshard_check(const stk_shard *sh, unsigned field, uint64_t first, uint64_t count, int block,
                      const void *bytes, stk_error *err);
/* The cache file's read-only descriptor (-1: none), opened once: a copy of
 * present values by pread costs no page faults of the map (the map's
 * 4 KiB pages are set up a fault at a time in every process). */
int stk__rshard_fd(const stk_shard *sh);
/* Offer checked bytes of a span to the cache (it may not keep them). */
void stk__rshard_store(const stk_shard *sh, unsigned field, uint64_t first, uint64_t count, int block,
                       uint64_t off, const void *bytes, uint64_t len);
/* Make a span present now (synchronous fetch, checked, stored even past the
 * cache limit for a bounded window, see rshard.c). */
int stk__rshard_fetch(const stk_shard *sh, unsigned field, uint64_t first, uint64_t count, int block,
                      stk_error *err);

/* ---- Remote datasets (manifest.c) ---------------------------------------- */

/* A dataset address ("s3://bucket/prefix" or "https://host/path", a trailing
 * "/manifest.json" or '/' dropped) parsed into *a, and *dir (malloc'd): the
 * address as messages and stk_dataset_dir give it. */
int stk__rdataset_addr(const char *path, stk__raddr *a, char **dir, stk_error *err);
/* The key (s3) or URL (http) of rel inside the dataset at a (malloc'd). */
char *stk__rdataset_key(const stk__raddr *a, const char *rel);
/* GET and parse the dataset's manifest.json; etag (may be NULL) gets its
 * ETag. A missing manifest: STK_E_IO "DIR: not a stoker dataset (no
 * manifest.json)". */
stk_manifest *stk__rdataset_manifest(stk__remote *r, const stk__raddr *a, const char *dir, char *etag,
                                     size_t etag_cap, stk_error *err);

#endif
