/*
 * stoker/reader.h - libstoker, the library trainers link.
 *
 * This release maps a whole dataset and finds any record in O(log shards);
 * batching, orders, prefetch threads and GPU upload build on it. The format
 * API (stoker/format.h) is part of libstoker too and is included here.
 *
 * Link with `pkg-config --cflags --libs stoker`, or in CMake:
 *     find_package(stoker REQUIRED)
 *     target_link_libraries(trainer PRIVATE stoker::stoker)
 */
#ifndef STOKER_READER_H
#define STOKER_READER_H

#include "stoker/format.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct stk_dataset stk_dataset;

/* Open a dataset: `path` is its directory or its manifest.json. Reads the
 * manifest, opens and maps every shard and checks each against the manifest
 * (record count, size, the footer's index hash, schema): O(shards), no
 * per-record work. Fails on the first disagreement, naming the shard. Record
 * checksums are not verified here (see stk_shard_verify_records, or run
 * `shardcheck`). */
STK_API stk_dataset *stk_dataset_open(const char *path, stk_error *err);
STK_API void stk_dataset_close(stk_dataset *ds);

STK_API const stk_manifest *stk_dataset_manifest(const stk_dataset *ds);
STK_API const stk_schema *stk_dataset_schema(const stk_dataset *ds);
STK_API uint64_t stk_dataset_records(const stk_dataset *ds);
STK_API size_t stk_dataset_nshards(const stk_dataset *ds);
STK_API const stk_shard *stk_dataset_shard(const stk_dataset *ds, size_t i);
/* Global index of the first record of shard i (i == nshards gives the total). */
STK_API uint64_t stk_dataset_shard_first(const stk_dataset *ds, size_t i);

/* Which shard holds global record `index`, and its index inside that shard. */
STK_API int stk_dataset_locate(const stk_dataset *ds, uint64_t index, size_t *shard,
                               uint64_t *local, stk_error *err);
/* Field f of global record `index` (pointer into the mapping; valid until close). */
STK_API int stk_dataset_value(const stk_dataset *ds, unsigned f, uint64_t index,
                              const void **data, uint64_t *size, stk_error *err);

#ifdef __cplusplus
}
#endif
#endif
