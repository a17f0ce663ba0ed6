/*
 * format/internal.h - shared by the format library's files; not installed.
 *
 * The byte layout below is the code side of spec/FORMAT.md. Change the two
 * together, and bump STK_FORMAT_MINOR (compatible addition) or
 * STK_FORMAT_MAJOR (anything an older reader would misread).
 */
#ifndef STOKER_FORMAT_INTERNAL_H
#define STOKER_FORMAT_INTERNAL_H

#include "stoker/format.h"

#include <stdarg.h>
#include <stdbool.h>
#include <string.h>

/* ------------------------------------------------------------- layout */

#define STK_SHARD_MAGIC "STKSHARD"  /* 8 bytes at offset 0           */
#define STK_FOOTER_MAGIC "STKFOOT1" /* last 8 bytes of the file      */
#define STK_ALIGN 4096u             /* region alignment the writer uses */
#define STK_ALIGN_MAX (1u << 30)

#define STK_HEADER_FIXED 64u /* fixed part of the header      */
#define STK_FIELD_DESC 128u  /* bytes per field descriptor    */
#define STK_FOOTER_SIZE 32u

#define STK_HASH_XXH3_64 1u /* checksum_algo                 */

/* Fixed header offsets. */
enum {
    H_MAGIC = 0,
    H_MAJOR = 8,
    H_MINOR = 10,
    H_HEADER_SIZE = 12,
    H_FLAGS = 16,
    H_NFIELDS = 20,
    H_RECORDS = 24,
    H_FILE_SIZE = 32,
    H_CKSUM_OFF = 40,
    H_CKSUM_LEN = 48,
    H_ALIGN = 56,
    H_ALGO = 60
};
/* Field descriptor offsets. */
enum {
    D_NAME = 0,
    D_KIND = 32,
    D_DTYPE = 33,
    D_CODEC = 34,
    D_NDIM = 35,
    D_RESERVED = 36,
    D_SHAPE = 40,
    D_STRIDE = 88,
    D_DATA_OFF = 96,
    D_DATA_LEN = 104,
    D_HEAP_OFF = 112,
    D_HEAP_LEN = 120
};
/* Footer offsets (relative to file_size - 32). */
enum { F_INDEX_HASH = 0, F_FILE_SIZE = 8, F_RESERVED = 16, F_MAGIC = 24 };

static inline uint64_t stk__header_size(uint32_t nfields)
{
    return STK_HEADER_FIXED + (uint64_t)nfields * STK_FIELD_DESC + 8u; /* + header hash */
}

/* Where each region of one field lies. For tensor fields data is the values;
 * for bytes fields data is the (records + 1) u64 offsets column and heap the
 * concatenated values. A compressed field's data region is [the offsets
 * column, bytes fields only][u64 nblocks][(nblocks + 1) x (u64 first record,
 * u64 frame offset)] and its heap the zstd frames (spec/FORMAT.md 4.12). */
typedef struct {
    uint64_t stride;
    uint64_t data_off, data_len;
    uint64_t heap_off, heap_len;
} stk__region;

/* Block-compressed (zstd). A JPEG field is not: its values are stored one
 * by one, like bytes, and the codec says how to decode each. */
static inline bool stk__field_compressed(const stk_field *f) { return f->codec == STK_CODEC_ZSTD; }

/* Bytes and array fields keep their values in a heap, found through a
 * column of (records + 1) u64 offsets; an array field's data region goes on
 * with records x (its per-record dims) u64 (spec/FORMAT.md 4.7, 4.13). */
static inline bool stk__field_has_heap(const stk_field *f) { return f->kind != STK_KIND_TENSOR; }

/* Length of those columns, false on overflow (0 for tensor fields). */
static inline bool stk__columns_len(const stk_field *f, uint64_t records, uint64_t *len)
{
    uint64_t a, b;
    if (!stk__field_has_heap(f)) return *len = 0, true;
    if (__builtin_add_overflow(records, 1, &a) || __builtin_mul_overflow(a, 8, &a) ||
        __builtin_mul_overflow(records, (uint64_t)stk_field_var_dims(f) * 8, &b) ||
        __builtin_add_overflow(a, b, len))
        return false;
    return true;
}

/* Field 0 is an uncompressed array field: the canonical placement puts its
 * heap first, right after the header, so that a writer streams the values
 * (images of their own size) to the file before it knows how many records
 * the shard will hold (spec/FORMAT.md 4.5). */
static inline bool stk__heap_first(const stk_schema *s)
{
    return s->nfields && s->fields[0].kind == STK_KIND_ARRAY && s->fields[0].codec != STK_CODEC_ZSTD;
}

/* Bytes before a compressed field's block table in its data region (the
 * columns; the layout has checked them for overflow). */
static inline uint64_t stk__block_table_at(const stk_field *f, uint64_t records)
{
    uint64_t n = 0;
    stk__columns_len(f, records, &n);
    return n;
}

/* Elements' bytes of one unit of an array field's per-record extent: dtype
 * size x its fixed dims (<= 2^40, checked by the schema). */
static inline uint64_t stk__array_item(const stk_field *f)
{
    uint64_t n = stk_dtype_size(f->dtype);
    for (unsigned d = 0; d < f->ndim && d < STK_MAX_DIMS; d++) n *= f->shape[d] ? f->shape[d] : 1;
    return n;
}

/* A JPEG value's frame size, from its SOF marker (jpeg_dims.c). */
#include "jpeg_dims.h"

/* Largest uncompressed block a reader must hold (1 GiB). */
#define STK_BLOCK_RAW_MAX ((uint64_t)1 << 30)

/* The minor version a shard of this schema is written with: the lowest its
 * features need (2: array fields or JPEG values; 1: zstd; else 0), so a file
 * without the newer features stays readable by older builds. */
static inline unsigned stk__schema_minor(const stk_schema *s)
{
    unsigned m = 0;
    for (uint32_t i = 0; i < s->nfields; i++) {
        const stk_field *f = &s->fields[i];
        if (f->kind == STK_KIND_ARRAY || f->codec == STK_CODEC_JPEG) return 2;
        if (stk__field_compressed(f)) m = 1;
    }
    return m;
}

/* Everything the header says, decoded and validated. */
typedef struct {
    unsigned major, minor;
    uint32_t header_size;
    uint32_t alignment;
    uint64_t records;
    uint64_t file_size;
    uint64_t cksum_off, cksum_len;
    stk_schema schema;
    stk__region region[STK_MAX_FIELDS];
} stk__layout;

/* Decode and validate a header from `buf` (at least `len` bytes of the start
 * of a file whose real size is `file_size`). Pure: no I/O. */
int stk__layout_decode(const uint8_t *buf, size_t len, uint64_t file_size, const char *name, stk__layout *out,
                       stk_error *err);
/* Encode a header (header_size bytes, header hash included) into buf. */
void stk__layout_encode(const stk__layout *lay, uint8_t *buf);
/* Compute the canonical layout of a shard with this schema and these region
 * sizes (regions in field order, each aligned; checksum table; footer).
 * data_len/heap_len/stride must be filled in; fills in the offsets. */
int stk__layout_place(stk__layout *lay, stk_error *err);

/* File size the shard would have after appending `v` (UINT64_MAX on
 * overflow): lets the dataset writer cut shards at an exact byte limit. */
uint64_t stk__writer_bytes_after(const stk_writer *w, const stk_value *v);

/* Check what a dataset writer will put into its manifest before any shard
 * is written: class names non-empty, valid UTF-8 and unique; pack_json a
 * JSON object (NULL allowed). */
int stk__manifest_check_meta(const char *const *classes, size_t n, const char *pack_json, stk_error *err);

/* ------------------------------------------------------- little-endian */

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static inline void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void wr64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---------------------------------------------------- checked arithmetic */

static inline bool mul_ok(uint64_t a, uint64_t b, uint64_t *r) { return !__builtin_mul_overflow(a, b, r); }
static inline bool add_ok(uint64_t a, uint64_t b, uint64_t *r) { return !__builtin_add_overflow(a, b, r); }
/* Round up to a power-of-two alignment; false on overflow. */
static inline bool align_ok(uint64_t v, uint64_t a, uint64_t *r)
{
    uint64_t t;
    if (!add_ok(v, a - 1, &t)) return false;
    *r = t & ~(a - 1);
    return true;
}

/* ---------------------------------------------------------------- errors */

/* stk_error_set (stoker/format.h), appending ": strerror(errno_value)". */
int stk__error_set_errno(stk_error *err, int code, int errno_value, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ------------------------------------------------------------- hashing */

/* Streaming XXH3-64 (hash.c): what is fed in order hashes as XXH3_64bits
 * over the same bytes would. A value whose bytes were already hashed by
 * stk_hash_blocks can be fed as its block sums (absorb) instead of being
 * read again (hash_blocks.h says why that works): the streamed shard's
 * whole-file hash takes a packer's images that way. NULL when out of
 * memory. */
typedef struct stk__hasher stk__hasher;
stk__hasher *stk__hasher_new(void);
void stk__hasher_update(stk__hasher *h, const void *data, size_t len);
/* data[0 .. len) with its sums (stk_hash_blocks); read from data: one block
 * (the last, which may end the input) and a stripe. Where the stream or the
 * value is not on a block boundary, or sums is NULL, the bytes are hashed. */
void stk__hasher_absorb(stk__hasher *h, const void *data, const uint64_t *sums, size_t len);
uint64_t stk__hasher_digest(const stk__hasher *h);
void stk__hasher_free(stk__hasher *h);

/* Tests: the kernels of level at most cap (every level the CPU has is
 * compared with the system libxxhash); the rest use STK_HASH_ISA_BEST. */
enum { STK_HASH_ISA_BASE = 0, STK_HASH_ISA_AVX2 = 1, STK_HASH_ISA_AVX512 = 2, STK_HASH_ISA_BEST = 2 };
uint64_t stk__hash_isa_cap(const void *data, size_t len, int cap); /* stk_hash */
stk__hasher *stk__hasher_new_isa(int cap);
uint64_t stk__hash_blocks_isa(const void *data, size_t len, uint64_t *sums, int cap);

/* ----------------------------------------------------------- files */

/* write()/pwrite() everything or fail with a message naming `path`. */
int stk__write_all(int fd, const void *buf, size_t len, const char *path, stk_error *err);
int stk__pwrite_all(int fd, const void *buf, size_t len, uint64_t off, const char *path, stk_error *err);
/* fsync the directory that holds `path` (so a rename in it is durable). */
int stk__fsync_parent(const char *path, stk_error *err);
/* Read a whole (small) file into a NUL-terminated malloc'd buffer. */
int stk__read_file(const char *path, size_t max, char **out, size_t *len, stk_error *err);
/* malloc'd "dir/name". */
char *stk__path_join(const char *dir, const char *name);

/* A shard path inside a manifest: relative, '/'-separated, components of
 * [A-Za-z0-9._-] that are neither "." nor "..", at most 4096 bytes. */
bool stk__path_is_safe(const char *p);
bool stk__name_is_valid(const char *name);
/* Named like a shard or its temporary file: NAME-NNNNN.stk(.tmp) (dataset_replace.c). */
bool stk__shard_like(const char *name);
/* Append "; the old dataset in DIR is intact" to err's message (kept whole:
 * the message is cut before it if need be). */
void stk__error_note_intact(stk_error *err, const char *dir);

#endif
