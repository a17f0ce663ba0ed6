/* remote/cache.h - the node-local cache of a remote dataset's bytes.
 *
 * One sparse file per remote object (a shard), named by its content (the
 * caller's id: the shard's index hash and size), so datasets that share a
 * shard share its cache and a replaced object is never taken for the old
 * one. Beside it a state file: one byte per unit (the caller's units: a
 * record's value of a field, a compressed block), and a flag for the
 * object's metadata (the header, columns and checksum table the format
 * library fetches at open). Both are mapped MAP_SHARED, so the processes of
 * one node (the ranks, several jobs) see each other's fetches at once.
 *
 * Rules that make it safe without a daemon:
 * - bytes are written (pwrite) before their units are marked present, so a
 *   process killed in between leaves units absent, never wrong bytes;
 * - a reader checks what it takes from the cache against the checksum table
 *   (the caller's job), so bytes evicted or damaged under it are refetched,
 *   never used;
 * - every process holding a file open holds a shared flock on its state
 *   file; whole files are evicted (least recently opened first) only under
 *   an exclusive one, so no file in use is removed, and a killed process
 *   drops its locks with its descriptors;
 * - the bytes in the cache are counted in one shared counter per cache
 *   directory; a process alone in the directory recounts it at open.
 *
 * Admission, not thrash: when storing would pass the limit, whole files not
 * in use are evicted first; if that is not enough the bytes are not kept
 * (stk__rfile_store returns 0) and the caller uses them uncached. Under a
 * limit smaller than the dataset the cache therefore keeps a stable subset:
 * every epoch hits it and fetches the rest exactly once. */
#ifndef STK_REMOTE_CACHE_H
#define STK_REMOTE_CACHE_H

#include "stoker/format.h"

#include <stddef.h>
#include <stdint.h>

typedef struct stk__rcache stk__rcache;
typedef struct stk__rfile stk__rfile;

/* dir is created (0700) when missing; limit in bytes (0: no limit). */
int stk__rcache_open(stk__rcache **out, const char *dir, uint64_t limit, stk_error *err);
void stk__rcache_close(stk__rcache *c); /* after every file of it is closed */
uint64_t stk__rcache_used(const stk__rcache *c); /* bytes held, all processes */

/* The cached copy of one object of size bytes with nunits units; created
 * empty (a sparse file of the object's size) when absent. */
int stk__rfile_open(stk__rcache *c, const char *id, uint64_t size, uint64_t nunits, stk__rfile **out,
                    stk_error *err);
void stk__rfile_close(stk__rfile *f);
/* The object's bytes as a read-only shared mapping of size bytes: present
 * ranges hold the object's bytes, the rest reads as zeros. */
const uint8_t *stk__rfile_map(const stk__rfile *f);
int stk__rfile_fd(const stk__rfile *f); /* read-only descriptor of the same file */

int stk__rfile_meta_ready(const stk__rfile *f);
/* Store the metadata ranges (never evicted while the file is) and set the
 * flag: n ranges at offs[i], lens[i], bytes in data[i]. */
int stk__rfile_store_meta(stk__rfile *f, size_t n, const uint64_t *offs, const uint64_t *lens,
                          const void *const *data, stk_error *err);

int stk__rfile_present(const stk__rfile *f, uint64_t unit);
/* Store len bytes (already verified) at off and mark units [u0, u1)
 * present. 1 stored; 0 not kept (no room: the limit); <0 never. */
int stk__rfile_store(stk__rfile *f, uint64_t off, const void *data, uint64_t len, uint64_t u0, uint64_t u1,
                     stk_error *err);
/* Units [u0, u1), whose bytes are [off, off + len), are not (or no longer)
 * right: mark them absent and release their whole pages. */
void stk__rfile_drop(stk__rfile *f, uint64_t u0, uint64_t u1, uint64_t off, uint64_t len);

#endif
