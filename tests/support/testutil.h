/*
 * tests/support/testutil.h - the test-helper library (stoker_testutil) seen
 * from a black-box test: scratch directories, whole-file I/O, a standard
 * schema with deterministic records, opening a reader, and the one Check
 * runner (TU_MAIN). Only the public headers come with it; a test that needs
 * the library's internals (header surgery, layouts, the hasher) includes
 * testutil_internal.h instead and says WHITEBOX in its CMakeLists.txt.
 * Running the tools from a test: cli_util.h.
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

#include "stoker/format.h"
#include "stoker/reader.h"

#define TU_PATH 1024

/* Assert an stk_error's code and that its message contains `sub`. */
#define tu_assert_error(e, want, sub)                                                                \
  do {                                                                                               \
    const stk_error *e_ = (e);                                                                       \
    ck_assert_msg(e_->code == (want), "error code %d (%s), expected %d (%s); message: %s", e_->code, \
                  stk_status_name(e_->code), (int)(want), stk_status_name(want), e_->msg);           \
    ck_assert_msg(strstr(e_->msg, (sub)) != NULL, "message \"%s\" lacks \"%s\"", e_->msg, (sub));    \
  } while (0)

/* ------------------------------------------------------------- files */

/* Whether madvise(MADV_HUGEPAGE) is taken here: a Linux kernel with
 * transparent huge pages (it takes the advice whatever their setting). */
bool tu_thp_available(void);

/* A fresh, empty directory $STOKER_TEST_TMP/<name> (created, emptied first).
 * Writes its path into out. */
void tu_scratch(char *out, size_t cap, const char *name);
/* out = the path of `file` in a fresh scratch directory `dir` (tu_scratch):
 * for a test that needs one file and not the directory. */
void tu_scratch_file(char *out, size_t cap, const char *dir, const char *file);
/* a, b (each of cap bytes) = the paths of `an` and `bn` in one fresh scratch
 * directory `dir`: two things a test compares. */
void tu_scratch_pair(char *a, char *b, size_t cap, const char *dir, const char *an, const char *bn);
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
/* s = image u8[h, w, 3], label i64 (a scalar), caption (bytes), each
 * added with an assert that the add succeeds. */
void tu_caption_schema(stk_schema *s, uint64_t h, uint64_t w);
/* Record i of the dataset identified by seed. */
void tu_std_record(tu_record *r, uint64_t seed, uint64_t i);
/* A writer of the standard schema at path (staging in its .tmp) that has
 * taken records [first, first+n) of `seed`; not finished. */
stk_writer *tu_std_writer(const char *path, uint64_t seed, uint64_t first, uint64_t n);
/* A manifest of this build's format version with room for nshards
 * (zeroed) shard entries and an empty schema; free with stk_manifest_free. */
stk_manifest *tu_manifest_new(size_t nshards);
/* Write records [first, first+n) of `seed` as one shard at path. */
void tu_write_std_shard(const char *path, uint64_t seed, uint64_t first, uint64_t n, stk_shard_info *info);
/* Reads value f of record i of src (a shard, a dataset, ...) as
 * stk_shard_value does. */
typedef int (*tu_value_fn)(const void *src, unsigned f, uint64_t i, const void **p, uint64_t *n,
                           stk_error *e);
/* Assert that the `count` records of src, read with get, equal records
 * [first, ...) of seed. */
void tu_check_std_values(const void *src, tu_value_fn get, uint64_t count, uint64_t seed, uint64_t first);
/* stk_shard_open, asserting that it succeeds (the message if not). */
stk_shard *tu_shard_open(const char *path);
/* Assert that every value of the shard equals records [first, ...) of seed. */
void tu_check_std_shard(const stk_shard *sh, uint64_t seed, uint64_t first);
/* The shard of ds that holds dataset record rec, with the record's index in
 * that shard (*local, unless NULL) and where its field f's value lies in the
 * shard's map (*p, *size). */
const stk_shard *tu_locate_value(const stk_dataset *ds, uint64_t rec, unsigned f, uint64_t *local,
                                 const void **p, uint64_t *size);
/* Write records [0, n) of seed as a dataset in dir. */
void tu_write_std_dataset(const char *dir, uint64_t seed, uint64_t n, const stk_dataset_options *o);
/* A fresh scratch directory `name` (tu_scratch) holding records [0, n) of
 * seed in shards of `per` records. */
void tu_scratch_std_dataset(char *dir, size_t cap, const char *name, uint64_t seed, uint64_t n, uint64_t per);
/* Write n records of schema s, whose fields are all tensors, as a dataset
 * in dir (a fresh directory: tu_scratch) in shards of `per` records: in
 * record i a u64 scalar field holds i, every other field the bytes
 * tu_fill(seed + i) (the same in each such field, up to its size). */
void tu_write_tensor_dataset(const char *dir, const stk_schema *s, uint64_t n, uint64_t per, uint64_t seed);

/* ---------------------------------------------------------------- reader */

/* Options for one process reading batches of `batch` in `order`: rank 0 of a
 * world of 1, so that RANK / WORLD_SIZE in the environment play no part;
 * everything else as stk_reader_options_init leaves it. */
stk_reader_options tu_reader_options(uint32_t batch, int order);
/* stk_reader_open that must succeed: the test fails with the library's
 * message otherwise. */
stk_reader *tu_open_reader(const char *dir, const stk_reader_options *o);

/* ---------------------------------------------------------------- main */

/* One Check test case of a test file's suite table: its name (what
 * CK_RUN_CASE selects), its tests in the order they run, its timeout in
 * seconds (0: Check's default, or CK_DEFAULT_TIMEOUT), a checked fixture run
 * around each of its tests, and loop tests, which run first, each with
 * _i = 0 .. loop-1 (at least once). */
#define TU_TESTS_MAX 32
typedef struct {
    const char *name;
    const TTest *tests[TU_TESTS_MAX];
    double timeout;
    SFun setup, teardown;
    int loop;
    const TTest *loop_tests[TU_TESTS_MAX];
} tu_case;

/* Run every test of the suite (CK_VERBOSITY in the environment picks the
 * output, CK_FORK whether each test forks); exit status for main(). */
int tu_run(Suite *s);
/* Build suite `name` from a table of test cases, in table order, and
 * tu_run it. */
int tu_run_table(const char *name, const tu_case *cases, size_t n);
/* A test file's main: TU_MAIN("suite", {.name = "case", .tests = {a, b}}, ...)
 * runs suite "suite" of the test cases given (tu_case initialisers). */
#define TU_MAIN(suite, ...)                                                        \
  int main(void)                                                                   \
  {                                                                                \
    const tu_case tu_cases_[] = {__VA_ARGS__};                                     \
    return tu_run_table((suite), tu_cases_, sizeof tu_cases_ / sizeof *tu_cases_); \
  }

#endif
