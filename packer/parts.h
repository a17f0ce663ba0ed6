/* packer/parts.h - pack parts and the merge that turns them into a dataset.
 *
 * `pack --part K/N` packs the K-th of N slices of the listing into shards
 * named after the part, then commits pack-part-K-of-N.json (its shards,
 * counts and parameters) next to two TSV slices (listing, skipped). A run
 * without --part is part 1 of 1. `pack --merge` (automatic for 1 of 1)
 * checks that every part is present with identical parameters and commits
 * listing.tsv, skipped.tsv and finally manifest.json. */
#ifndef STOKER_PACKER_PARTS_H
#define STOKER_PACKER_PARTS_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/format.h"

typedef struct {
    unsigned part, parts; /* 1-based K of N */
    uint64_t params;      /* hash of the listing and every output-shaping flag */
    uint64_t first, end;  /* listing slice [first, end) */
    uint64_t packed, skipped;
    size_t nclasses;
    char *const *classes;
    const char *pack_json; /* the manifest's "pack" object */
    const stk_schema *schema;
    const stk_shard_entry *shards;
    size_t nshards;
} pk_part;

/* Listing indices [first, end) of part k (1-based) of n over `total` entries. */
void pk_part_range(uint64_t total, unsigned k, unsigned n, uint64_t *first, uint64_t *end);
/* The part of a Slurm array task, from the values of SLURM_ARRAY_TASK_ID,
 * _MIN, _COUNT, _STEP and _MAX (NULL when unset): part (ID - MIN) / STEP + 1
 * of COUNT, so arrays 0-3, 1-4 and 5-8 all give parts 1..4 of 4 (STEP unset:
 * 1; MAX, when set, must be MIN + (COUNT - 1) * STEP). Returns 0 when id is
 * NULL (not an array task), 1 with *k, *n set, or -1 with why (naming the
 * variables and their values) when one is missing, not a number or
 * contradicts the others, or COUNT exceeds max_parts. */
int pk_part_slurm(const char *id, const char *min, const char *count, const char *step, const char *max,
                  unsigned max_parts, unsigned *k, unsigned *n, char *why, size_t cap);
/* "DIR/pack-part-000K-of-000N<suffix>", malloc'd. */
char *pk_part_file(const char *dir, unsigned k, unsigned n, const char *suffix);
/* Delete part k's record, TSV slices and state file (not its shards). */
void pk_part_remove_files(const char *dir, unsigned k, unsigned n);
/* Commit the part's JSON record (crash-safe). */
int pk_part_commit(const char *dir, const pk_part *p, stk_error *err);
/* Params hash recorded by a committed part, or 0 with no (readable) record. */
uint64_t pk_part_params(const char *dir, unsigned k, unsigned n);
/* Counts recorded by a committed part (left unchanged when unreadable). */
void pk_part_counts(const char *dir, unsigned k, unsigned n, uint64_t *packed, uint64_t *skipped,
                    uint64_t *nshards);

typedef struct {
    uint64_t packed, skipped;
    size_t nshards;
} pk_merge_result;

/* Merge the parts of N in `dir` into a dataset (n == 0: find N from the part
 * files, which must all agree). On failure returns nonzero with one line in
 * err (e.g. the list of missing parts). */
int pk_merge(const char *dir, unsigned n, pk_merge_result *res, stk_error *err);
/* The same, with each part's shards checked by `check` instead of opened in
 * dir (a merge of parts in s3://: the shards are objects, the records and
 * slices copies in a staging directory). */
typedef struct {
    int (*fn)(void *user, const stk_shard_entry *e, unsigned part, stk_error *err);
    void *user;
} pk_shard_check;
int pk_merge_checked(const char *dir, unsigned n, const pk_shard_check *check, pk_merge_result *res,
                     stk_error *err);

#endif
