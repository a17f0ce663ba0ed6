/* reader/dataset.h - the dataset layer (dataset.c): a dataset as one
 * address space of records, several as one (a mixture's sources). It calls
 * no other reader file. Internal. */
#ifndef STK_READER_DATASET_H
#define STK_READER_DATASET_H

#include "stoker/reader.h"

#include <stddef.h>
#include <stdint.h>

#define STK__MIX_MAX 64 /* sources in one mixture: datasets in one concatenation */

/* n (1 to STK__MIX_MAX) open datasets as one: their shards in order, the schema of the
 * first, a fingerprint of theirs. Part i is closed with it when bit i of own
 * is set (on failure the caller keeps them all). */
stk_dataset *stk__dataset_concat(stk_dataset *const *parts, size_t n, uint64_t own, stk_error *err);
/* Part i of a concatenation (NULL past the end or for a dataset that is not
 * one). */
const stk_dataset *stk__dataset_part(const stk_dataset *ds, size_t i);

#endif
