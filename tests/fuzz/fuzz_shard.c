/* fuzz_shard - libFuzzer target: arbitrary bytes as a shard.
 *
 * Every input is opened twice with stk_shard_open_memory: as it is, and as a
 * copy whose header checksum has been recomputed. Random mutations almost
 * never keep the XXH3 header checksum valid, so without the second pass the
 * fuzzer would stop at the checksum and never reach the header's field,
 * region and footer checks or the per-record code behind them.
 *
 * When a shard opens, everything a reader or shardcheck may call on it is
 * called: the index, record and padding checks, every value of every field
 * (of the first MAX_RECORDS records; compressed ones block by block) and
 * its shape, the tensor base pointers and the
 * whole-file hash; returned pointers are read to their full length so that
 * ASan sees any pointer that leaves the input. Must never crash. */
#define STOKER_ADVANCED_API /* the compressed fields' blocks, stk_shard_value_at */
#include "stoker/format.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RECORDS 4096u

static volatile uint8_t sink;

static void touch(const void *p, uint64_t n)
{
    const uint8_t *b = p;
    uint8_t x = 0;
    for (uint64_t i = 0; i < n; i++) x ^= b[i];
    sink ^= x;
}

static void count_problem(void *user, const stk_shard *sh, uint64_t record, int field, int code,
                          const char *what)
{
    (void)record, (void)code;
    /* Callers print the field name and the message: both must be readable. */
    if (field >= 0)
        touch(stk_shard_schema(sh)->fields[field].name, strlen(stk_shard_schema(sh)->fields[field].name));
    touch(what, strlen(what));
    ++*(uint64_t *)user;
}

static void exercise(const uint8_t *data, size_t size)
{
    stk_error err;
    stk_shard *sh = stk_shard_open_memory(data, size, "fuzz.stk", &err);
    if (!sh) {
        touch(err.msg, strlen(err.msg));
        if (err.code == STK_OK) __builtin_trap(); /* a failure must say why */
        return;
    }
    const stk_schema *s = stk_shard_schema(sh);
    uint64_t records = stk_shard_records(sh), problems = 0;
    if (stk_shard_file_size(sh) != size || s->nfields == 0 || s->nfields > STK_MAX_FIELDS) __builtin_trap();
    unsigned major, minor;
    stk_shard_version(sh, &major, &minor);
    touch(stk_shard_path(sh), strlen(stk_shard_path(sh)));

    if (stk_shard_verify_index(sh, 0, &err)) touch(err.msg, strlen(err.msg));
    stk_shard_verify_index(sh, stk_shard_index_hash(sh) ^ 1, NULL);

    uint64_t n = records < MAX_RECORDS ? records : MAX_RECORDS;
    stk_shard_verify_records(sh, 0, n, count_problem, &problems);
    stk_shard_verify_records(sh, records, 1, count_problem, &problems); /* out of range */
    stk_shard_verify_records(sh, UINT64_MAX, 2, NULL, NULL);            /* overflows    */
    if (records > n) stk_shard_verify_records(sh, records - 1, 1, count_problem, &problems);
    stk_shard_verify_padding(sh, count_problem, &problems);

    for (unsigned f = 0; f <= s->nfields; f++) {
        const void *base = stk_shard_field_base(sh, f);
        if (f < s->nfields && s->fields[f].kind == STK_KIND_TENSOR && s->fields[f].codec != STK_CODEC_ZSTD) {
            uint64_t stride = stk_field_stride(&s->fields[f]);
            if (!base) __builtin_trap();
            /* The whole region, records x stride, must lie inside the input. */
            if (n) touch(base, n * stride);
        } else if (base) {
            __builtin_trap();
        }
        stk_block_cursor cur = {0};
        for (uint64_t i = 0; i < n; i++) {
            const void *p = NULL;
            uint64_t len = 0, dims[STK_MAX_DIMS];
            /* any codec: compressed values come out of their decompressed block */
            if (stk_shard_value_at(sh, f, i, &cur, &p, &len, &err) == STK_OK) {
                if (f >= s->nfields) __builtin_trap();
                touch(p, len);
                (void)stk_shard_stored_hash(sh, f, i);
            } else {
                touch(err.msg, strlen(err.msg));
            }
            if (stk_shard_value_shape(sh, f, i, dims, &err) == STK_OK) {
                if (f >= s->nfields) __builtin_trap();
                touch(dims, sizeof(uint64_t) * s->fields[f].ndim);
            } else {
                touch(err.msg, strlen(err.msg));
            }
        }
        stk_block_cursor_free(&cur);
        const void *p;
        uint64_t len;
        if (stk_shard_value(sh, f, records, &p, &len, NULL) == STK_OK) __builtin_trap();
    }
    (void)stk_shard_stored_hash(sh, s->nfields, 0);
    (void)stk_shard_stored_hash(sh, 0, records);
    sink ^= (uint8_t)stk_shard_file_hash(sh);
    sink ^= (uint8_t)problems;
    stk_shard_close(sh);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    exercise(data, size);

    /* Second pass: the same bytes with a valid header checksum. The header
     * size is the u32 at offset 12; its last 8 bytes are the checksum. */
    if (size < 64) return 0;
    uint32_t hs =
        (uint32_t)data[12] | (uint32_t)data[13] << 8 | (uint32_t)data[14] << 16 | (uint32_t)data[15] << 24;
    if (hs < 72 || hs > size || hs % 8) return 0;
    uint8_t *copy = malloc(size); /* exactly `size` bytes, so ASan sees overreads */
    if (!copy) return 0;
    memcpy(copy, data, size);
    uint64_t h = stk_hash(copy, hs - 8);
    for (int k = 0; k < 8; k++) copy[hs - 8 + k] = (uint8_t)(h >> (8 * k));
    if (memcmp(copy, data, size) != 0) exercise(copy, size);
    free(copy);
    return 0;
}
