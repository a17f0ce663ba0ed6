/* format/shard_impl.h - struct stk_shard, shared by shard.c and rshard.c
 * (the remote shards' fetches read the layout and the map of the shard they
 * serve). Internal to format/; shard.c calls rshard.c, never the other way
 * round (scripts/check-layers: no file-level cycles). */
#ifndef STK_FORMAT_SHARD_IMPL_H
#define STK_FORMAT_SHARD_IMPL_H

#include "internal.h"
#include "rshard.h"

typedef struct stk__rshard stk__rshard; /* rshard.c */

struct stk_shard {
    char *path; /* the file, or the remote address (s3://bucket/key) */
    const uint8_t *map;
    size_t size;
    bool owns_map;
    stk__layout L;
    uint64_t index_hash; /* as stored in the footer */
    uint64_t dev, ino;   /* the file opened (0, 0 for memory and remote shards) */
    stk__rshard *remote; /* NULL for a local or memory shard; map is then its cache file's */
};

/* rshard.c, for shard.c. */

/* Fill sh (path and size set) as a remote shard: its cache file opened, the
 * metadata ranges fetched into it unless already there, sh->map and
 * sh->remote set; *head_len: the header's size (finish_open decodes it from
 * the map). On failure sh->remote may be set: stk_shard_close frees it. */
int stk__rshard_attach(stk_shard *sh, stk__remote *r, stk__rcache *c, const char *key, uint64_t index_hash,
                       uint64_t records, unsigned nfields, const char *etag, stk__rwindow *w,
                       size_t *head_len, stk_error *err);
void stk__rshard_free(stk__rshard *rs);
/* Units [u0, u1) of field f hold damaged bytes (a value that failed its
 * checksum when taken from the cache): forget them, so the next fetch gets
 * them again. */
/* Value i (or block i) of field f fetched as stk_shard_value needs it: a
 * miss right after the last one (a scan) also fetches up to 1 MiB of the
 * values after it, in the same GET. */
int stk__rshard_fetch_value(const stk_shard *sh, unsigned f, uint64_t i, int block, stk_error *err);
void stk__rshard_forget(const stk_shard *sh, unsigned f, uint64_t first, uint64_t count, int block);
/* Records [first, first + n) of the uncompressed fields present (fetched,
 * checked, stored); n is cut so that one call fetches about `bytes`. *done:
 * how many records were made present (>= 1 unless an error). */
int stk__rshard_fetch_records(const stk_shard *sh, uint64_t first, uint64_t n, uint64_t bytes, uint64_t *done,
                              stk_error *err);
/* Raw bytes [off, off + len) of the object into dst, not cached, not checked
 * (padding, the whole-file hash). */
int stk__rshard_read(const stk_shard *sh, uint64_t off, uint64_t len, void *dst, stk_error *err);
/* stk_shard_file_hash of a remote shard: the object streamed through the
 * hash (not cached); 0 when it could not be read. */
uint64_t stk__rshard_file_hash(const stk_shard *sh);

#endif
