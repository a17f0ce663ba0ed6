/*
 * stoker/format.h - the stoker on-disk format: shards, manifests, datasets.
 *
 * This is the one implementation of spec/FORMAT.md. `pack` writes with it, the
 * reader maps with it and `shardcheck` verifies with it. Everything here is
 * thread-compatible: distinct objects may be used from distinct threads, and a
 * shard or manifest opened read-only may be read from many threads at once.
 *
 * Errors: every function that can fail takes a `stk_error *` (which may be
 * NULL) and returns either a status code (STK_OK == 0 on success) or NULL. On
 * failure the error holds the code and one line of text naming the file, the
 * record and field where known, and what is wrong. Library code never prints
 * and never exits.
 *
 * The header reads top down in the order a user needs it: versions, errors,
 * schema, writing a dataset, writing one shard, reading a shard, the
 * manifest, datasets by record index, checksums. The last section, fenced by
 * STOKER_ADVANCED_API, is for pack, the tools and bindings (the streaming
 * writer's lent buffers and block sums, compressed fields' blocks, shard
 * naming): define STOKER_ADVANCED_API before including this header to see
 * it. Its calls are exported like the rest.
 *
 * ABI: option structs the caller allocates and the library reads
 * (stk_dataset_options here, stk_reader_options and stk_transform in
 * stoker/reader.h) only ever grow at the end. Their init functions and the
 * calls that take them are inline wrappers that pass the library the struct's
 * size as the caller compiled it (sizeof), so a newer libstoker reads only the
 * fields an older caller has and defaults the rest; the exported calls behind
 * them take that size (`_sized`), for bindings. Structs the library fills
 * (stk_shard_info, stk_manifest, ...) are frozen: new information comes through
 * new calls.
 */
#ifndef STOKER_FORMAT_H
#define STOKER_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/version.h" /* STK_VERSION_*: generated from CMakeLists.txt's project() */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) || defined(__CYGWIN__)
#  define STK_API
#elif defined(__GNUC__)
#  define STK_API __attribute__((visibility("default")))
#else
#  define STK_API
#endif

#if defined(__GNUC__)
#  define STK_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#  define STK_PRINTF(fmt, args)
#endif

/* ---------------------------------------------------------------- versions */

/* STK_VERSION_MAJOR/MINOR/PATCH/STRING (stoker/version.h) are the release
 * this header belongs to; stk_version_string is the release of the library
 * actually loaded (the same string when both come from one build). */
STK_API const char *stk_version_string(void);

/* The format version this build writes, and the major version it reads.
 * Files of another major version are refused with STK_E_VERSION. Files of a
 * later minor version are read when they use no feature this build lacks. */
#define STK_FORMAT_MAJOR 1
#define STK_FORMAT_MINOR \
  2 /* 1.1: compressed (zstd) fields; 1.2: variable-shape (array) fields and
                              JPEG values. A file is written with the lowest minor its features need */

/* ------------------------------------------------------------------ errors */

typedef enum {
    STK_OK = 0,
    STK_E_ARG = 1,          /* invalid argument from the caller              */
    STK_E_IO = 2,           /* the operating system refused (errno in text)  */
    STK_E_NOMEM = 3,        /* out of memory                                 */
    STK_E_FORMAT = 4,       /* bytes that break the format's rules           */
    STK_E_VERSION = 5,      /* a format version this build does not read     */
    STK_E_TRUNCATED = 6,    /* the file is shorter than its header says      */
    STK_E_CHECKSUM = 7,     /* stored and computed checksums differ          */
    STK_E_MANIFEST = 8,     /* manifest invalid or disagrees with the shards */
    STK_E_EXISTS = 9,       /* refusing to overwrite                         */
    STK_E_RANGE = 10,       /* record or field index out of range            */
    STK_E_UNSUPPORTED = 11, /* a feature (codec, dtype) this build lacks     */
    STK_E_BUSY = 12         /* another writer holds the output directory     */
} stk_status;

#define STK_ERROR_MSG_MAX 512

typedef struct {
    int code;                    /* a stk_status              */
    char msg[STK_ERROR_MSG_MAX]; /* one line, no trailing '\n' */
} stk_error;

/* Short stable name of a status code, e.g. "checksum". Never NULL. */
STK_API const char *stk_status_name(int code);
/* Fill err (if non-NULL) with code and a printf-formatted line; returns code.
 * For code built on this library that reports through stk_error too. */
STK_API int stk_error_set(stk_error *err, int code, const char *fmt, ...) STK_PRINTF(3, 4);

/* --------------------------------------------------------------- schema */

typedef enum {
    STK_DT_U8 = 1,
    STK_DT_I8 = 2,
    STK_DT_U16 = 3,
    STK_DT_I16 = 4,
    STK_DT_U32 = 5,
    STK_DT_I32 = 6,
    STK_DT_U64 = 7,
    STK_DT_I64 = 8,
    STK_DT_F16 = 9,
    STK_DT_BF16 = 10,
    STK_DT_F32 = 11,
    STK_DT_F64 = 12
} stk_dtype;

typedef enum {
    STK_KIND_TENSOR = 1, /* fixed shape: every record's value has the same size */
    STK_KIND_BYTES = 2,  /* variable-length byte string per record             */
    STK_KIND_ARRAY = 3   /* a tensor whose shape differs per record: the dims
                            declared 0 are stored with each record (1.2)     */
} stk_kind;

typedef enum {
    STK_CODEC_NONE = 0, /* values stored as they are                          */
    STK_CODEC_ZSTD = 1, /* values in independently compressed blocks of
                           consecutive records (format 1.1)                  */
    STK_CODEC_JPEG = 2  /* array fields u8[0,0,C], C = 1 or 3: each value is a
                           JPEG stream whose decoded shape is the record's
                           (format 1.2)                                      */
} stk_codec;

#define STK_NAME_MAX 32 /* field name bytes including the terminating NUL */
#define STK_MAX_DIMS 6
#define STK_MAX_FIELDS 32

typedef struct {
    char name[STK_NAME_MAX];      /* [A-Za-z0-9_.-]+, unique within a schema       */
    uint8_t kind;                 /* stk_kind                                       */
    uint8_t dtype;                /* stk_dtype; STK_DT_U8 for bytes fields          */
    uint8_t codec;                /* stk_codec                                      */
    uint8_t ndim;                 /* 0 (scalar) .. STK_MAX_DIMS; 0 for bytes fields */
    uint64_t shape[STK_MAX_DIMS]; /* array fields: 0 marks a per-record dimension */
} stk_field;

typedef struct {
    uint32_t nfields;
    stk_field fields[STK_MAX_FIELDS];
} stk_schema;

/* Size in bytes of one element of a dtype, 0 for an unknown dtype. */
STK_API size_t stk_dtype_size(int dtype);
/* "u8", "bf16", ...; NULL for an unknown dtype. */
STK_API const char *stk_dtype_name(int dtype);
/* Inverse of stk_dtype_name; 0 when the name is unknown. */
STK_API int stk_dtype_from_name(const char *name);

/* Zero the schema. */
STK_API void stk_schema_init(stk_schema *s);
/* Append a fixed-shape tensor field (ndim may be 0 for a scalar). */
STK_API int stk_schema_add_tensor(stk_schema *s, const char *name, int dtype, unsigned ndim,
                                  const uint64_t *shape, stk_error *err);
/* Append a variable-length bytes field. */
STK_API int stk_schema_add_bytes(stk_schema *s, const char *name, stk_error *err);
/* Append a variable-shape (array) field: 1 .. STK_MAX_DIMS dimensions, those
 * given as 0 (at least one) differ per record and are stored with it, the
 * others are fixed. An image of any size: u8 with shape {0, 0, 3}; a token
 * sequence: i32 {0}; boxes: f32 {0, 4}. */
STK_API int stk_schema_add_array(stk_schema *s, const char *name, int dtype, unsigned ndim,
                                 const uint64_t *shape, stk_error *err);
/* Store field f compressed (STK_CODEC_ZSTD), as JPEG (STK_CODEC_JPEG: array
 * fields u8 {0, 0, 1 or 3}) or as it is (STK_CODEC_NONE). */
STK_API int stk_schema_set_codec(stk_schema *s, unsigned f, int codec, stk_error *err);
/* Check names, kinds, dtypes, shapes and sizes. */
STK_API int stk_schema_validate(const stk_schema *s, stk_error *err);
/* 1 when both schemas declare the same fields in the same order, else 0. */
STK_API int stk_schema_equal(const stk_schema *a, const stk_schema *b);
/* Index of the field called `name`, or -1. */
STK_API int stk_schema_find(const stk_schema *s, const char *name);
/* Bytes per record of a tensor field (product of shape x dtype size);
 * 0 for bytes and array fields. */
STK_API uint64_t stk_field_stride(const stk_field *f);
/* The number of per-record (0) dimensions of an array field; 0 otherwise. */
STK_API unsigned stk_field_var_dims(const stk_field *f);
/* Writes e.g. "image u8[256,256,3]" or "caption bytes" into buf. */
STK_API void stk_field_describe(const stk_field *f, char *buf, size_t cap);

/* One record's value for one field. Tensor fields need size == stride; an
 * array field's value is its elements in C order (size = dtype size x the
 * product of its shape), or for STK_CODEC_JPEG the JPEG stream. */
typedef struct {
    const void *data;
    uint64_t size;
} stk_value;

/* ---------------------------------------------------------- dataset writer */

typedef struct stk_dataset_writer stk_dataset_writer;

/* Caller-allocated, read by stk_dataset_writer_create. All zero means the
 * defaults, so `stk_dataset_options o = {0};` (or stk_dataset_options_init)
 * followed by setting fields is the way to fill it. Grows at the end only
 * (see "ABI" at the top). */
/* clang-format off */
typedef struct {
    uint64_t records_per_shard; /* 0: no record limit                                  */
    uint64_t shard_bytes;       /* 0: no size limit; else whole records up to it       */
    const char *prefix;         /* shard file names: PREFIX-00000.stk; "shard" if NULL */
    int force;                  /* replace an existing dataset: STK_FORCE_*            */
    size_t nclasses;
    const char *const *classes;
    const char *pack_json;      /* a JSON object stored as "pack"; NULL for {}         */
    int zstd_level;             /* compressed fields: zstd level (0: 3)                */
    uint64_t zstd_block_bytes;  /* compressed fields: block size (0: 1 MiB)            */
} stk_dataset_options;
/* clang-format on */

/* stk_dataset_options.force (spec/FORMAT.md §7.3). Any other nonzero value
 * means STK_FORCE_REPLACE. */
#define STK_FORCE_REPLACE 1  /* build beside the old dataset; replace at the manifest commit */
#define STK_FORCE_IN_PLACE 2 /* remove the old manifest first (room for one dataset only) */

/* The exported calls behind the inline wrappers below: `size` is sizeof the
 * caller's stk_dataset_options. Bindings call these with their mirror's size. */
STK_API void stk_dataset_options_init_sized(stk_dataset_options *opts, size_t size);
STK_API stk_dataset_writer *stk_dataset_writer_create_sized(const char *dir, const stk_schema *schema,
                                                            const stk_dataset_options *opts, size_t size,
                                                            stk_error *err);

/* Fill opts with the defaults (all zero). */
static inline void stk_dataset_options_init(stk_dataset_options *opts)
{
    stk_dataset_options_init_sized(opts, sizeof *opts);
}

/* Create (or reuse) directory `dir` and start a dataset there; opts may be
 * NULL (defaults). Refuses with STK_E_EXISTS when it already holds a
 * manifest, unless opts->force. With STK_FORCE_REPLACE the new dataset is
 * built beside the old one, under shard names the old manifest does not use
 * (stk_dataset_new_prefix), and replaces it at finish's manifest commit,
 * after which the old shards are removed (stk_dataset_sweep): until then the
 * old dataset stays readable, a failure says "the old dataset in DIR is
 * intact" and abort removes the new shards. The disk must hold both. With
 * STK_FORCE_IN_PLACE the old manifest is removed first (the old shards are
 * overwritten as the new ones are written): a failure then leaves neither.
 * The writer holds the directory from
 * here to finish or abort: a second writer into it (in this process or
 * another, pack included) is refused with STK_E_BUSY naming the holder. */
static inline stk_dataset_writer *stk_dataset_writer_create(const char *dir, const stk_schema *schema,
                                                            const stk_dataset_options *opts, stk_error *err)
{
    return stk_dataset_writer_create_sized(dir, schema, opts, sizeof *opts, err);
}
/* Append a record; starts a new shard when the current one is full. */
STK_API int stk_dataset_writer_append(stk_dataset_writer *dw, const stk_value *values, stk_error *err);
/* The same with the per-record dimensions of the array fields (see
 * stk_writer_append_dims). */
STK_API int stk_dataset_writer_append_dims(stk_dataset_writer *dw, const stk_value *values,
                                           const uint64_t *dims, stk_error *err);
/* Commit the last shard, then the manifest. Frees dw whatever the outcome. */
STK_API int stk_dataset_writer_finish(stk_dataset_writer *dw, stk_error *err);
/* Abort: remove the open shard's temporary file; committed shards stay but no
 * manifest is written, so nothing can pass for a finished dataset. */
STK_API void stk_dataset_writer_abort(stk_dataset_writer *dw);

/* ------------------------------------------------------------ shard writer */

typedef struct stk_writer stk_writer;

/* What a committed shard looks like; also what the manifest records. */
typedef struct {
    uint64_t records;
    uint64_t file_size;
    uint64_t file_hash;  /* XXH3-64 of the whole file (as `xxhsum -H3`) */
    uint64_t index_hash; /* the footer's hash over header + checksum table */
} stk_shard_info;

/* Start writing the shard that will be committed at `path`. Data goes to a
 * temporary file `path.tmp` in the same directory, which is fsynced and
 * renamed over `path` by stk_writer_finish. An existing file at `path` is only
 * replaced at that moment. */
STK_API stk_writer *stk_writer_create(const char *path, const stk_schema *schema, stk_error *err);
/* Compressed fields: zstd `level` (1..19; 0: 3) and the target uncompressed
 * size of a block (0: 1 MiB; a block closes at the first record that reaches
 * it) for field f, or for every compressed field when f is UINT32_MAX.
 * Before the first append. Blocks are compressed one by one with a fixed
 * level: the bytes do not depend on threads or timing. */
STK_API int stk_writer_compression(stk_writer *w, uint32_t f, int level, uint64_t block_bytes,
                                   stk_error *err);
/* Compress blocks on `threads` threads (0 or 1: on the appending thread, the
 * default). Frames are compressed independently and placed in block order,
 * so the shard's bytes do not depend on the number. Before the first append. */
STK_API int stk_writer_threads(stk_writer *w, unsigned threads, stk_error *err);
/* Append one record: values[f] for every field f of the schema. On error the
 * writer is unchanged and may still be aborted (or the error ignored). */
STK_API int stk_writer_append(stk_writer *w, const stk_value *values, stk_error *err);
/* stk_writer_append for schemas with array fields: dims holds, for each
 * array field in schema order, the values of its per-record (0) dimensions,
 * one after another (an image u8{0,0,3} gives height, width). stk_writer_append
 * works too where each array field has one per-record dimension and no JPEG
 * codec: that dimension follows from the value's size. The value's size must
 * be dtype size x the product of the shape (JPEG: the stream must start with
 * a JPEG marker, its frame header give these dims, and it must read through
 * to its end: every scan's entropy-coded data is decoded, and a truncated,
 * header-only, damaged or 12-bit stream is refused, naming the record and
 * field). */
STK_API int stk_writer_append_dims(stk_writer *w, const stk_value *values, const uint64_t *dims,
                                   stk_error *err);
/* Records appended so far, and the bytes the shard would have if finished now. */
STK_API uint64_t stk_writer_records(const stk_writer *w);
STK_API uint64_t stk_writer_bytes(const stk_writer *w);
/* Write header, regions, checksum table and footer; fsync; rename into place;
 * fsync the directory. Frees the writer whatever the outcome. A failure before
 * the rename removes the temporary file and leaves `path` as it was; only the
 * final directory fsync can fail after the new shard is in place (the message
 * says so). */
STK_API int stk_writer_finish(stk_writer *w, stk_shard_info *info, stk_error *err);
/* Discard everything written; remove the temporary file; free. NULL is a no-op. */
STK_API void stk_writer_abort(stk_writer *w);
/* Size in bytes of a shard of `records` records of this schema, with every
 * bytes field empty; 0 on overflow or an invalid schema. For fixed-size
 * schemas this is exact: a packer uses it to fit whole records to a size.
 * With compressed fields it counts them uncompressed (an upper bound but for
 * a few bytes per block of incompressible data). */
STK_API uint64_t stk_shard_size_for(const stk_schema *schema, uint64_t records);

/* ------------------------------------------------------------ shard reader */

typedef struct stk_shard stk_shard;

/* Open and map a shard read-only. Checks in O(1): magic, version, header
 * checksum, schema, region bounds and alignment, file size against the
 * header (truncation), footer. Per-record data is never scanned here. */
STK_API stk_shard *stk_shard_open(const char *path, stk_error *err);
/* The same over bytes in memory (not copied: they must outlive the shard).
 * `name` is used in messages. */
STK_API stk_shard *stk_shard_open_memory(const void *data, size_t len, const char *name, stk_error *err);
STK_API void stk_shard_close(stk_shard *sh);

STK_API const char *stk_shard_path(const stk_shard *sh);
STK_API const stk_schema *stk_shard_schema(const stk_shard *sh);
STK_API uint64_t stk_shard_records(const stk_shard *sh);
STK_API uint64_t stk_shard_file_size(const stk_shard *sh);
/* Format version of the file. */
STK_API void stk_shard_version(const stk_shard *sh, unsigned *major, unsigned *minor);
/* The footer's stored hash over header + checksum table (not recomputed). */
STK_API uint64_t stk_shard_index_hash(const stk_shard *sh);

/* Start of tensor field f's region: record i's value is at
 * base + i * stk_field_stride(field). NULL for bytes fields, compressed
 * fields or f out of range.
 * Consecutive records form one contiguous tensor: this is what zero-copy
 * batches are cut from. The pointer lives until stk_shard_close. */
STK_API const void *stk_shard_field_base(const stk_shard *sh, unsigned f);

/* Value of field f of record i (tensor or bytes), bounds-checked, with the
 * variable-length offsets validated. The pointer lives until close; on a
 * shard of a remote dataset (s3://, https://), whose values are fetched and
 * checked against their checksums when asked for, until the shard is closed
 * or, for a value the cache limit did not admit, until 64 MiB more of such
 * values have been fetched (spec/FORMAT.md, "Remote datasets"). A
 * compressed field has no value in the map: STK_E_UNSUPPORTED (use the
 * reader, or the block calls and stk_shard_value_at of the advanced section). */
STK_API int stk_shard_value(const stk_shard *sh, unsigned f, uint64_t i, const void **data, uint64_t *size,
                            stk_error *err);

/* The shape of record i's value of field f: ndim entries into dims (the
 * field's shape for tensors, with an array field's per-record dimensions
 * filled in; nothing for bytes fields). STK_E_FORMAT when an uncompressed
 * array value's size disagrees with its shape. */
STK_API int stk_shard_value_shape(const stk_shard *sh, unsigned f, uint64_t i, uint64_t dims[STK_MAX_DIMS],
                                  stk_error *err);

/* Stored XXH3-64 of field f of record i. */
STK_API uint64_t stk_shard_stored_hash(const stk_shard *sh, unsigned f, uint64_t i);

/* Recompute the footer's hash over header + checksum table and compare it with
 * the footer (and with `expect` unless it is 0). Reads the checksum table:
 * O(records x fields x 8 bytes), a tiny fraction of the file. */
STK_API int stk_shard_verify_index(const stk_shard *sh, uint64_t expect, stk_error *err);

/* Called once per problem found by stk_shard_verify_records / _padding.
 * record is UINT64_MAX and field is -1 where the problem is not in a record. */
typedef void (*stk_problem_fn)(void *user, const stk_shard *sh, uint64_t record, int field, int code,
                               const char *what);

/* Check records [first, first+count): every field's bytes against the
 * checksum table, and bytes fields' offsets. Reports each bad (record, field)
 * through `fn` (may be NULL) and returns the number of problems found (0 when
 * clean). Hints the kernel to read ahead and drops nothing. */
STK_API uint64_t stk_shard_verify_records(const stk_shard *sh, uint64_t first, uint64_t count,
                                          stk_problem_fn fn, void *user);
/* Check that every byte of the file outside header, regions, checksum table
 * and footer (the alignment padding) is zero. Returns the number of problems. */
STK_API uint64_t stk_shard_verify_padding(const stk_shard *sh, stk_problem_fn fn, void *user);

/* XXH3-64 of the whole file, as `xxhsum -H3` prints it. Reads every byte. */
STK_API uint64_t stk_shard_file_hash(const stk_shard *sh);

/* --------------------------------------------------------------- manifest */

#define STK_MANIFEST_NAME "manifest.json"

typedef struct {
    char *path; /* relative to the dataset directory, never escapes it */
    uint64_t records;
    uint64_t file_size;
    uint64_t file_hash;  /* XXH3-64 of the whole shard file */
    uint64_t index_hash; /* the shard footer's hash */
} stk_shard_entry;

typedef struct {
    unsigned version_major, version_minor;
    stk_schema schema;
    uint64_t record_count; /* sum of the shards' records */
    uint64_t fingerprint;  /* see stk_manifest_fingerprint */
    size_t nshards;
    stk_shard_entry *shards;
    size_t nclasses;
    char **classes;  /* class names, label i is classes[i]; may be empty */
    char *pack_json; /* the "pack" object as compact JSON text ("{}" if none) */
} stk_manifest;

/* Parse and strictly validate manifest bytes (UTF-8 JSON). `name` is used in
 * messages. Rejects duplicate keys, unknown keys (unless the file's minor
 * version is newer than this build's), wrong types, unsafe paths, counts that
 * do not add up, and a fingerprint that does not match. */
STK_API stk_manifest *stk_manifest_parse(const char *text, size_t len, const char *name, stk_error *err);
/* Read `path`: a manifest file, or a dataset directory holding manifest.json. */
STK_API stk_manifest *stk_manifest_load(const char *path, stk_error *err);
STK_API void stk_manifest_free(stk_manifest *m);
/* The dataset fingerprint: XXH3-64 over a tag, each shard's index hash and
 * record count in order, then the class names (spec/FORMAT.md,
 * "Fingerprint"). Depends on content only, not on file names. */
STK_API uint64_t stk_manifest_fingerprint(const stk_manifest *m);
/* Serialise (deterministic bytes; caller frees with free()). Fills in
 * record_count and fingerprint first. */
STK_API char *stk_manifest_to_json(stk_manifest *m, stk_error *err);
/* Write manifest.json into `dir` crash-safely (temporary file, fsync, rename,
 * fsync dir). */
STK_API int stk_manifest_commit(stk_manifest *m, const char *dir, stk_error *err);
/* Directory part of a manifest path, or the path itself for a directory.
 * Returns a malloc'd string. */
STK_API char *stk_dataset_dir(const char *path, stk_error *err);

/* Write `len` bytes to `path` the way shards are committed: PATH.tmp, fsync,
 * rename, fsync the directory. Readers see the old file or the new one. */
STK_API int stk_file_commit(const char *path, const void *buf, size_t len, stk_error *err);

/* ------------------------------------------------------ datasets by index
 *
 * A whole dataset mapped: every shard of a manifest, any record found in
 * O(log shards). stk_reader_open_dataset (stoker/reader.h) reads one. */

typedef struct stk_dataset stk_dataset;

/* Open a dataset: `path` is its directory or its manifest.json. Reads the
 * manifest, opens and maps every shard and checks each against the manifest
 * (record count, size, the footer's index hash, schema): O(shards), no
 * per-record work. Fails on the first disagreement, naming the shard. Record
 * checksums are not verified here (see stk_shard_verify_records, or run
 * `shardcheck`).
 *
 * `path` may also name a dataset in object storage: "s3://bucket/prefix" or
 * "https://host/path" (each also with "/manifest.json"), configured from the
 * environment (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_PROFILE,
 * ...; STOKER_CACHE_DIR and STOKER_CACHE_LIMIT for the node's cache: see
 * stk_remote_options). Each shard's header, columns and checksum table are
 * fetched at open into the cache; values as they are asked for, checked
 * against their checksums (spec/FORMAT.md, "Remote datasets"). A missing
 * manifest fails with STK_E_IO "ADDRESS: not a stoker dataset (no
 * manifest.json)"; a refused request names the address, the HTTP status and
 * S3's error code, never a secret. */
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
STK_API int stk_dataset_locate(const stk_dataset *ds, uint64_t index, size_t *shard, uint64_t *local,
                               stk_error *err);
/* Field f of global record `index` (pointer into the mapping; valid until
 * close, or as stk_shard_value says for a remote dataset). */
STK_API int stk_dataset_value(const stk_dataset *ds, unsigned f, uint64_t index, const void **data,
                              uint64_t *size, stk_error *err);

/* ---------------------------------------------------------------- hashing */

/* XXH3-64 with seed 0: the checksum used everywhere in the format. Uses the
 * widest vector unit of the running CPU (AVX-512 or AVX2 where present). */
STK_API uint64_t stk_hash(const void *data, size_t len);

#ifdef STOKER_ADVANCED_API
/* ==================================================================== advanced
 *
 * For pack, the tools and bindings: the streaming shard writer that takes
 * page-aligned buffers by reference and block sums computed by the caller,
 * shard file naming, file identity, compressed fields' blocks. Define STOKER_ADVANCED_API to see it.
 * These calls are exported and kept working like the rest, but they expose
 * how pack and the reader work inside, and change with them. */

/* Optional, before the first append: the shard will most likely hold
 * `records` records. The header is then known up front, so the writer
 * computes the whole-file hash as the data goes out (no read-back at finish)
 * and writes field 0 from a thread of its own, with O_DIRECT where the file
 * system takes it. A different final count stays correct: finish then reads
 * the file back, as without this call. */
STK_API int stk_writer_expect(stk_writer *w, uint64_t records, stk_error *err);

/* XXH3 consumes long inputs in blocks of this many bytes. */
#  define STK_HASH_BLOCK 1024u
/* stk_hash(data, len), and for a len that is a non-zero multiple of
 * STK_HASH_BLOCK also each block's contribution to XXH3's accumulators:
 * 8 u64 per block, len / STK_HASH_BLOCK * 8 of them into sums. For other
 * lengths, or a NULL sums, sums is untouched. A streaming writer that is
 * given them (stk_writer_append_lent) folds the value into its whole-file
 * hash without reading the bytes again: for a packer, the bytes are hashed
 * once, on the thread that made them, instead of twice. */
STK_API uint64_t stk_hash_blocks(const void *data, size_t len, uint64_t *sums);

/* Called by a writer when it no longer needs a value it was lent
 * (stk_writer_append_lent), with that value's data pointer. It may run on
 * the writer's I/O thread: it must be thread-safe and must not call back
 * into the writer. */
typedef void (*stk_lent_done_fn)(void *ctx, const void *data);
/* A streaming writer holds at most this many bytes of lent values (plus
 * one value) that it has not given back yet. It writes them in batches of a
 * few MiB, or once they have waited 20 ms, so lending from a pool of any size
 * makes progress; a pool with this much beyond the caller's own never waits
 * for the disk's batching. The size is what rides out a disk's stalls (a
 * virtual disk flushing its cache stalls writes for a while) at the rate
 * pack writes; the figures are in bench/README.md (pack). */
#  define STK_WRITER_LENT_MAX ((uint64_t)64 << 20)
/* A lent value is taken by reference only when its address, its size and
 * its place in the file are multiples of this (whole pages: O_DIRECT). */
#  define STK_WRITER_LEND_ALIGN 4096u
/* stk_writer_append without copying field 0: the writer may keep
 * values[0].data and write the bytes from there, later, on its I/O thread,
 * so that a packer's images go to the disk without a copy. It calls
 * done(ctx, values[0].data) exactly once when it no longer reads them:
 * later, or before returning when it copied them after all, also when the
 * call fails, and at the latest in stk_writer_finish or stk_writer_abort.
 * Until then the caller must not change or free them. The bytes are taken by
 * reference only by a streaming writer (stk_writer_expect) and only when
 * data and size are multiples of STK_WRITER_LEND_ALIGN, as is the value's
 * place in the file (a tensor of whole pages; O_DIRECT needs that);
 * otherwise they are copied, as stk_writer_append does.
 * pre: NULL, or values[0]'s checksum computed by the caller where the bytes
 * were hot (pre->hash = stk_hash_blocks(data, size, sums) or stk_hash); it
 * is stored as the record's checksum as given, unchecked (a wrong one makes
 * every later verification fail). pre->sums, when not NULL, are the block
 * sums stk_hash_blocks gave: a writer that takes the bytes by reference
 * then adds the value to its whole-file hash from them instead of reading
 * the bytes; like the bytes, they must stay unchanged until done() (wrong
 * ones give a wrong whole-file hash, which shardcheck --file-hash reports). */
typedef struct {
    uint64_t hash;
    const uint64_t *sums;
} stk_prehash;
STK_API int stk_writer_append_lent(stk_writer *w, const stk_value *values, const stk_prehash *pre,
                                   stk_lent_done_fn done, void *ctx, stk_error *err);

/* Skip the entropy check of JPEG values (stk_writer_append_dims reads each
 * one through to its end) when trusted is non-zero; the frame header is
 * still checked against the dims. For a caller whose JPEG values come from
 * its own encoder or were decoded in full already (pack), or that stores
 * damaged ones on purpose (tests of the read paths). Any time; applies to
 * the appends that follow. The dataset writer's passes it to every shard. */
STK_API int stk_writer_trust_jpeg(stk_writer *w, int trusted, stk_error *err);
STK_API int stk_dataset_writer_trust_jpeg(stk_dataset_writer *dw, int trusted, stk_error *err);

/* Where a streaming writer's time went, for a caller that wants to say why
 * writing is slow (pack --stats). Seconds, summed over the writers that
 * added into it. */
typedef struct {
    double queue_wait; /* the appending thread waited for the I/O thread: the queue was full */
    double hash;       /* the I/O thread hashing the file (bytes it was not given block sums for) */
    double write;      /* the I/O thread in write calls */
    double fsync;      /* stk_writer_finish's fsync: what the disk had not yet made durable */
    uint64_t bytes;    /* field 0 bytes the I/O thread wrote */
    uint64_t writes;   /* its write calls */
} stk_writer_io_stats;
/* Have w add its figures into *sink (NULL: stop): queue_wait on the
 * appending thread as it waits, the others when w is finished or aborted, on
 * the thread that does it. The caller keeps sink alive until then and reads
 * it only after; writers adding into one sink must be appended to from one
 * thread at a time and finished or aborted one at a time. A writer that does
 * not stream (no stk_writer_expect) adds only its fsync. */
STK_API void stk_writer_io_stats_into(stk_writer *w, stk_writer_io_stats *sink);

/* The file name of shard `index` of a dataset whose shards are called
 * `prefix`: "PREFIX-00000.stk" (at least five digits). The one place shard
 * files are named: the dataset writer and pack (whose parts use the prefix
 * "part-K-of-N") both call it. Writes at most cap bytes, NUL-terminated;
 * returns the length like snprintf. */
STK_API int stk_shard_file_name(char *buf, size_t cap, const char *prefix, uint64_t index);

/* Device and inode of the file as opened (0, 0 for a shard in memory): with
 * them a reader tells a file rewritten in place from one replaced by rename. */
STK_API void stk_shard_file_id(const stk_shard *sh, uint64_t *dev, uint64_t *ino);

/* Advise the kernel to back the shard's mapping with huge pages
 * (MADV_HUGEPAGE): pages it reads in through the mapping from then on come
 * into the page cache as 2 MiB folios, where the file system has them (ext4
 * and XFS on recent Linux), and every later mapping of them, in this process
 * or another, takes one fault and one page-table entry per 2 MiB instead of
 * one per 4-64 KiB. Pages already cached keep their size. Worth it for data
 * read at random that stays in memory; not for a file larger than the page
 * cache (a fault reads 2 MiB). Returns 1 when the advice was taken, 0 when
 * not (a shard in memory, a kernel without it). */
STK_API int stk_shard_advise_huge(const stk_shard *sh);

/* The file offset of tensor field f's region (where stk_shard_field_base
 * points, counted from the start of the file), for readers that read the
 * file rather than the mapping (the reader's direct I/O). 0 where
 * stk_shard_field_base is NULL. */
STK_API uint64_t stk_shard_field_offset(const stk_shard *sh, unsigned f);

/* Compressed fields (codec STK_CODEC_ZSTD) hold their values in blocks of
 * consecutive records, each an independent zstd frame. Blocks of field f:
 * 0 for an uncompressed field. */
STK_API uint64_t stk_shard_nblocks(const stk_shard *sh, unsigned f);
/* The block holding record i of a compressed field. */
STK_API int stk_shard_block_find(const stk_shard *sh, unsigned f, uint64_t i, uint64_t *block,
                                 stk_error *err);
/* Block b: its first record and record count, its size decompressed and
 * compressed. */
STK_API int stk_shard_block_info(const stk_shard *sh, unsigned f, uint64_t block, uint64_t *first,
                                 uint64_t *count, uint64_t *raw_bytes, uint64_t *packed_bytes,
                                 stk_error *err);
/* Decompress block b into dst (at least raw_bytes of room). A frame that does
 * not decompress to exactly raw_bytes is STK_E_FORMAT, naming shard, field and
 * block. */
STK_API int stk_shard_block_read(const stk_shard *sh, unsigned f, uint64_t block, void *dst, uint64_t cap,
                                 stk_error *err);
/* Where block b's zstd frame lies in the shard's file: its byte offset and
 * packed_bytes (for readers that read the file themselves, e.g. O_DIRECT). */
STK_API int stk_shard_block_span(const stk_shard *sh, unsigned f, uint64_t block, uint64_t *file_off,
                                 uint64_t *packed_bytes, stk_error *err);
/* stk_shard_block_read from a copy of block b's frame (packed_bytes at src,
 * as stk_shard_block_span places them) instead of the map. */
STK_API int stk_shard_block_decode(const stk_shard *sh, unsigned f, uint64_t block, const void *src,
                                   void *dst, uint64_t cap, stk_error *err);
/* Record i's value inside `raw`, block b decompressed by stk_shard_block_read. */
STK_API int stk_shard_block_value(const stk_shard *sh, unsigned f, uint64_t block, const void *raw,
                                  uint64_t i, const void **data, uint64_t *size, stk_error *err);

/* Any field's value, compressed or not, for readers that go record by
 * record (tools): uncompressed values point into the map as with
 * stk_shard_value; a compressed value points into the cursor's decompressed
 * block, valid until the next call with this cursor or stk_block_cursor_free.
 * Consecutive records of one block decompress it once. Zero-initialise. */
typedef struct {
    const stk_shard *shard;
    unsigned field;
    uint64_t block;
    uint8_t *raw;
    uint64_t cap;
    int valid;
} stk_block_cursor;
STK_API int stk_shard_value_at(const stk_shard *sh, unsigned f, uint64_t i, stk_block_cursor *c,
                               const void **data, uint64_t *size, stk_error *err);
STK_API void stk_block_cursor_free(stk_block_cursor *c);

/* One writer per output directory. A writer of the whole directory
 * (part 0 of 0: a stk_dataset_writer, pack, pack --merge) holds it alone; part
 * K of N (1 <= K <= N) of a job array shares it with the other parts and
 * holds part K alone. Refused at once (no waiting) with STK_E_BUSY and one
 * line naming the directory and the holder(s): pid, program, host, since
 * when, and `what` they said they were doing (e.g. "pack --part 2/8"; NULL:
 * "a writer"). The locks are open file description locks on DIR/.stoker-lock
 * and DIR/.stoker-lock-part-K-of-N (dir must exist): they end with the
 * process however it ends, so a lock file left by a killed writer is stale
 * and taken over; two writers in one process conflict too; a child made by
 * fork shares its parent's lock until it exits or execs. Release removes the
 * lock file held alone; those left over are not part of the dataset. */
typedef struct stk_dir_lock stk_dir_lock;
STK_API stk_dir_lock *stk_dir_lock_take(const char *dir, unsigned part, unsigned parts, const char *what,
                                        stk_error *err);
/* NULL, or one line to show the user: the lock of a killed writer was taken
 * over (naming it), or the file system does not lock files, so the lock
 * stops nobody (NFS without a lock manager, some FUSE file systems). */
STK_API const char *stk_dir_lock_note(const stk_dir_lock *l);
/* Let go (NULL: nothing). */
STK_API void stk_dir_lock_release(stk_dir_lock *l);

/* Shards the dataset writer has committed so far: an append that starts a
 * new shard commits the one before it first. With the records appended, a
 * caller that writes from a list of inputs knows after each append which
 * inputs are safely on disk (stoker.pack's resume). */
STK_API uint64_t stk_dataset_writer_shards(const stk_dataset_writer *dw);
/* The prefix of the shard file names this writer writes (PREFIX-00000.stk):
 * the options' prefix, or, replacing a dataset beside itself, the one
 * stk_dataset_new_prefix chose. Valid until finish or abort. */
STK_API const char *stk_dataset_writer_prefix(const stk_dataset_writer *dw);
/* Continue an interrupted dataset: before the first append, adopt the first
 * `shards` shards already in the directory (PREFIX-00000.stk, ...), which an
 * earlier writer with the same schema and options committed. Each is opened
 * and verified in full (index, every record's checksum, padding) and must
 * have the writer's schema; the writer then goes on with shard `shards`, so
 * appending the records that followed them gives the bytes an uninterrupted
 * run gives. *records (may be NULL): the records they hold. On error (naming
 * the shard and the problem) nothing is adopted. */
STK_API int stk_dataset_writer_resume(stk_dataset_writer *dw, uint64_t shards, uint64_t *records,
                                      stk_error *err);
/* One dataset in `dir` from the datasets in its subdirectories `parts` (bare
 * names, in record order), as a job array writes them: a manifest naming
 * their shards ("PART/shard-00000.stk", ...), committed crash-safely. Every
 * part must have a manifest, and all the same schema, classes and pack
 * object (else STK_E_MANIFEST naming the part); their shards stay where they
 * are, and so do their manifests. The merge holds the whole directory
 * (stk_dir_lock_take) while it writes. */
STK_API int stk_dataset_merge(const char *dir, const char *const *parts, size_t nparts, stk_error *err);
/* Replacing a dataset beside itself (spec/FORMAT.md §7.3). The shard prefix
 * a new dataset in `dir` takes: `prefix` itself where dir holds no manifest;
 * else PREFIX, PREFIX.g1, PREFIX.g2, ...: the first whose shard names the
 * old manifest does not use (with an unreadable manifest: that no file in
 * dir has). Files under the chosen names that the old manifest does not name
 * (leftovers of a replace that failed) are removed. `out` takes cap bytes,
 * at least strlen(prefix) + 12. */
STK_API int stk_dataset_new_prefix(const char *dir, const char *prefix, char *out, size_t cap,
                                   stk_error *err);
/* After a manifest commit that replaced a dataset: remove every file at the
 * top of `dir` named like a shard or its temporary file (NAME-NNNNN.stk,
 * NAME-NNNNN.stk.tmp) that dir's manifest does not name, then fsync dir.
 * Subdirectories are not entered. Call it holding the directory's lock. */
STK_API int stk_dataset_sweep(const char *dir, stk_error *err);

/* ------------------------------------------------------- remote datasets
 *
 * Per-dataset settings of a dataset in object storage, over the environment
 * stk_dataset_open reads. Caller-allocated, grows at the end only (see "ABI"
 * at the top); all zero: everything from the environment and the defaults.
 *
 * The node's cache of fetched bytes: cache_dir, else STOKER_CACHE_DIR, else
 * ${TMPDIR:-/tmp}/stoker-cache-UID: node-local by default, because the
 * cache is shared by the processes of one node through shared mappings and
 * file locks, which home directories on network file systems do not carry
 * reliably (and their quotas are small). cache_limit, else
 * STOKER_CACHE_LIMIT (bytes, with a K, M, G or T suffix: powers of 1024;
 * "0" or "none": no limit), else half the free space of the cache's file
 * system at open: the cache never fills a node's scratch disk, and a limit
 * below the dataset's size costs refetches, never wrong or failed reads.
 *
 * A server that stops sending in the middle of a body: the request is
 * abandoned after stall_s seconds without a byte, else STOKER_S3_STALL_S,
 * else 30, and retried (counted among the retries; a bad STOKER_S3_STALL_S
 * fails the open naming it). Lower it where a stalled connection should be
 * replaced sooner; the reads of a batch wait for it meanwhile. */
#  define STK_REMOTE_ADDR_AUTO 0    /* path style for a custom endpoint or a bucket with '.', else virtual */
#  define STK_REMOTE_ADDR_PATH 1    /* https://endpoint/bucket/key */
#  define STK_REMOTE_ADDR_VIRTUAL 2 /* https://bucket.endpoint/key */
/* clang-format off */
typedef struct {
    const char *endpoint;   /* NULL: AWS_ENDPOINT_URL, S3_ENDPOINT_URL, the profile, AWS's for the region */
    const char *region;     /* NULL: AWS_REGION, AWS_DEFAULT_REGION, the profile, us-east-1            */
    const char *profile;    /* NULL: AWS_PROFILE, "default" (~/.aws/credentials and ~/.aws/config)      */
    int addressing;         /* STK_REMOTE_ADDR_*                                                        */
    int anonymous;          /* 1: unsigned requests (public buckets)                                    */
    const char *cache_dir;  /* NULL: STOKER_CACHE_DIR, ${TMPDIR:-/tmp}/stoker-cache-UID                 */
    uint64_t cache_limit;   /* bytes; 0: STOKER_CACHE_LIMIT or the default; UINT64_MAX: no limit        */
    double stall_s;         /* a response body with no byte for this many seconds (whole, rounded up)
                               is abandoned and retried; 0: STOKER_S3_STALL_S (1-3600), else 30     */
} stk_remote_options;
/* clang-format on */

/* The exported calls behind the inline wrappers: `size` is sizeof the
 * caller's stk_remote_options. */
STK_API void stk_remote_options_init_sized(stk_remote_options *opts, size_t size);
STK_API stk_dataset *stk_dataset_open_remote_sized(const char *path, const stk_remote_options *opts,
                                                   size_t size, stk_error *err);

/* Fill opts with the defaults (all zero). */
static inline void stk_remote_options_init(stk_remote_options *opts)
{
    stk_remote_options_init_sized(opts, sizeof *opts);
}
/* stk_dataset_open with these settings (opts may be NULL) for a remote
 * `path`; a local path opens as stk_dataset_open does, opts unused. */
static inline stk_dataset *stk_dataset_open_remote(const char *path, const stk_remote_options *opts,
                                                   stk_error *err)
{
    return stk_dataset_open_remote_sized(path, opts, sizeof *opts, err);
}

/* ---- Writing to object storage (s3://bucket/prefix) -------------------------
 *
 * The writers (stk_dataset_writer, pack, merge) write an s3:// dataset
 * through a local staging directory: each shard is written there exactly as
 * into a local directory, uploaded when it is complete (on a background
 * thread: appending goes on meanwhile; large files as multipart uploads),
 * and manifest.json is uploaded last, once every shard it names is in place:
 * S3 has no rename, so the manifest's PUT is the commit. Until then no
 * manifest exists under the prefix and nothing reads as a dataset. Names are
 * relative to the dataset's address. */
typedef struct stk_upload stk_upload;
/* A client for the dataset at `url` (s3://bucket/prefix) with its upload
 * thread. Credentials and endpoint come from the AWS variables; files above
 * STOKER_UPLOAD_PART_BYTES (default 64 MiB, at least 5 MiB) go up as
 * multipart uploads of parts that size. */
STK_API stk_upload *stk_upload_open(const char *url, stk_error *err);
/* Wait for every queued upload, delete the lock this client holds, close. */
STK_API void stk_upload_close(stk_upload *u);
/* The staging directory for url, made if missing: $STOKER_CACHE_DIR/staging/H,
 * else $TMPDIR/stoker-staging/H (TMPDIR unset: /tmp), H a hash of the url:
 * the same address gets the same directory, so a killed writer's resume
 * finds its shards there. */
STK_API int stk_upload_staging_dir(const char *url, char *out, size_t cap, stk_error *err);
/* Queue the upload of the local file `path` as `name`. Recorded, once its
 * PUT succeeded, with size and ETag in the staging directory's log
 * (.stoker-uploaded in path's directory); remove != 0: the local file is
 * removed after. A failure is reported by the next call and by wait. */
STK_API int stk_upload_file(stk_upload *u, const char *path, const char *name, int remove, stk_error *err);
/* Like stk_upload_file, unless the log of path's directory says `name` was
 * uploaded with path's size and the object is there with that size and
 * ETag (a HEAD): then nothing is sent and *skipped (may be NULL) is 1. */
STK_API int stk_upload_file_once(stk_upload *u, const char *path, const char *name, int *skipped,
                                 stk_error *err);
/* Wait until every queued upload has ended: the first failure, if any. */
STK_API int stk_upload_wait(stk_upload *u, stk_error *err);
/* One object from memory, now. */
STK_API int stk_upload_put(stk_upload *u, const char *name, const void *data, size_t len, stk_error *err);
/* Object `name` into the local file `path` (written whole, then renamed):
 * STK_OK, or with *missing (may be NULL) set to 1 and STK_E_IO when there is
 * no such object; refused above max bytes. */
STK_API int stk_upload_fetch(stk_upload *u, const char *name, const char *path, size_t max, int *missing,
                             stk_error *err);
/* HEAD: *size is UINT64_MAX when the object is missing. etag (80 bytes, may be NULL). */
STK_API int stk_upload_head(stk_upload *u, const char *name, uint64_t *size, char *etag, stk_error *err);
STK_API int stk_upload_delete(stk_upload *u, const char *name, stk_error *err);
/* Every name under the dataset ("shard-00000.stk", "part-1/manifest.json"),
 * sorted, with sizes. */
STK_API int stk_upload_list(stk_upload *u, char ***names, uint64_t **sizes, size_t *n, stk_error *err);
STK_API void stk_upload_list_free(char **names, uint64_t *sizes, size_t n);
/* After a manifest replaced another: delete every object at the top of the
 * dataset named like a shard that the manifest in `staging` does not name. */
STK_API int stk_upload_sweep(stk_upload *u, const char *staging, stk_error *err);
/* Objects this client sent (PUTs of files and objects) and skipped. */
STK_API void stk_upload_counts(const stk_upload *u, uint64_t *sent, uint64_t *skipped);
/* One writer per dataset (or per part K of N, name ".stoker-lock-part-K-of-N")
 * on a store that has no locks: a lock object NAME holding "host H pid P
 * token T[ job J]: what" (J: $SLURM_JOB_ID) is written, read back and must
 * still be this writer's just before the manifest is committed
 * (stk_upload_lock_check). A lock object of this host whose process is gone,
 * or of this Slurm job (requeued: it runs again under its id, maybe on
 * another node) is stale and taken over; any other is honoured (STK_E_BUSY
 * naming it: delete the object if that writer is gone). S3's PUT has no compare-and-set here (If-None-Match on PUT is not
 * implemented by every server), so two writers starting within one round
 * trip can both pass: the check before the commit narrows that window, and
 * the one whose token is not in the object refuses to commit. */
STK_API int stk_upload_lock(stk_upload *u, const char *name, const char *what, stk_error *err);
STK_API int stk_upload_lock_check(stk_upload *u, stk_error *err);
/* A stk_dataset_writer of an s3:// dataset: keep != 0 keeps each shard in the
 * staging directory after its upload, until finish (a caller that checks its
 * own resume state against the shards: stoker.pack); the staging directory
 * (NULL for a local dataset). */
STK_API int stk_dataset_writer_keep_staged(stk_dataset_writer *dw, int keep, stk_error *err);
STK_API const char *stk_dataset_writer_staging(const stk_dataset_writer *dw);
/* 1 when path names an s3:// (or http(s)://) address. */
STK_API int stk_path_is_remote(const char *path);

#endif /* STOKER_ADVANCED_API */

#ifdef __cplusplus
}
#endif
#endif /* STOKER_FORMAT_H */
