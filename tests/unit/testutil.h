/*
 * tests/unit/testutil.h - helpers shared by the unit tests: scratch
 * directories, whole-file I/O, a standard schema with deterministic records,
 * and header surgery (corrupt a field, then re-hash the header so that the
 * check behind the header checksum is the one that fires).
 *
 * Helpers assert with Check themselves, so a test reads as a list of steps.
 */
#ifndef STK_TESTUTIL_H
#define STK_TESTUTIL_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "stoker/reader.h"

#define TU_PATH 1024

/* Assert an stk_error's code and that its message contains `sub`. */
#define tu_assert_error(e, want, sub)                                                         \
    do {                                                                                      \
        const stk_error *e_ = (e);                                                            \
        ck_assert_msg(e_->code == (want), "error code %d (%s), expected %d (%s); message: %s", \
                      e_->code, stk_status_name(e_->code), (int)(want),                       \
                      stk_status_name(want), e_->msg);                                        \
        ck_assert_msg(strstr(e_->msg, (sub)) != NULL, "message \"%s\" lacks \"%s\"", e_->msg,  \
                      (sub));                                                                 \
    } while (0)

/* ------------------------------------------------------------- files */

/* A fresh, empty directory $STOKER_TEST_TMP/<name> (created, emptied first).
 * Writes its path into out. */
void tu_scratch(char *out, size_t cap, const char *name);
/* out = dir + "/" + name. */
void tu_join(char *out, size_t cap, const char *dir, const char *name);
/* out = path + ".tmp": where writers stage a file before renaming it. */
void tu_tmp_of(char *out, size_t cap, const char *path);
/* Whole file into a malloc'd buffer (exactly *len bytes, at least 1 allocated). */
uint8_t *tu_read(const char *path, size_t *len);
void tu_write(const char *path, const void *data, size_t len);
bool tu_exists(const char *path);
void tu_rm_rf(const char *path);
/* Copy a file. */
void tu_copy(const char *from, const char *to);
/* Sorted, malloc'd names of the entries of dir (without . and ..); free with
 * tu_free_names. */
char **tu_list(const char *dir, size_t *n);
void tu_free_names(char **names, size_t n);
/* An exact-size heap copy of the first len bytes of src, so that ASan
 * catches any read past len. */
uint8_t *tu_dup(const void *src, size_t len);

/* ------------------------------------------------------ deterministic data */

/* Fill buf with bytes that depend only on seed (splitmix64). */
void tu_fill(void *buf, size_t n, uint64_t seed);

/* The standard schema: "image" u16[3,5] (field 0, streamed by the writer),
 * "label" i32 scalar, "text" bytes (empty for every record i with i % 5 == 2). */
enum { TU_IMAGE = 0, TU_LABEL = 1, TU_TEXT = 2, TU_IMG_ELEMS = 15, TU_TEXT_MAX = 48 };

typedef struct {
    uint16_t image[TU_IMG_ELEMS];
    int32_t label;
    uint8_t text[TU_TEXT_MAX];
    stk_value v[3];
} tu_record;

void tu_std_schema(stk_schema *s);
/* Record i of the dataset identified by seed. */
void tu_std_record(tu_record *r, uint64_t seed, uint64_t i);
/* Write records [first, first+n) of `seed` as one shard at path. */
void tu_write_std_shard(const char *path, uint64_t seed, uint64_t first, uint64_t n,
                        stk_shard_info *info);
/* Assert that every value of the shard equals records [first, ...) of seed. */
void tu_check_std_shard(const stk_shard *sh, uint64_t seed, uint64_t first);
/* Write records [0, n) of seed as a dataset in dir. */
void tu_write_std_dataset(const char *dir, uint64_t seed, uint64_t n, const stk_dataset_options *o);
/* A fresh scratch directory `name` (tu_scratch) holding records [0, n) of
 * seed in shards of `per` records. */
void tu_scratch_std_dataset(char *dir, size_t cap, const char *name, uint64_t seed, uint64_t n, uint64_t per);

/* ------------------------------------------------------- header surgery */

/* Header size as stored in the (uncorrupted) file bytes. */
uint32_t tu_header_size(const uint8_t *file);
/* Descriptor of field f inside the header. */
uint8_t *tu_desc(uint8_t *file, unsigned f);
/* Recompute the header checksum: the last 8 bytes of the header_size-byte
 * header hold stk_hash of the bytes before them. */
void tu_rehash_header(uint8_t *file, uint32_t header_size);

/* ---------------------------------------------------------------- main */

/* Run every test of the suite; exit status for main(). */
int tu_run(Suite *s);

#endif
