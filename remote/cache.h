/* remote/cache.h - the node-local cache of a remote dataset's bytes.
 *
 * One sparse file per remote object (a shard), named by its content (the
 * caller's id: the shard's index hash and size), so datasets that share a
 * shard share its cache and a replaced object is never taken for the old
 * one. Beside it a state file: one slot per unit (the caller's units: a
 * record's value of a field, a compressed block), and a slot for the
 * object's metadata (the header, columns and checksum table the format
 * library fetches at open). The state file is mapped MAP_SHARED, so the
 * processes of one node (the ranks, several jobs) see each other's fetches
 * at once.
 *
 * Rules that make it safe without a daemon:
 * - bytes are written (pwrite) before their units are marked present, so a
 *   process killed in between leaves units absent, never wrong bytes;
 * - a reader checks what it takes from the cache against the checksum table
 *   (the caller's job), so bytes evicted or damaged under it are refetched,
 *   never used;
 * - every process holding an object open holds a read lock on the
 *   object's byte of DIR/v1/held; whole files are created, repaired and
 *   evicted (least recently opened first) only under a write lock on it,
 *   taken without waiting, so no file in use is removed or replaced, and a
 *   killed process drops its locks as it dies;
 * - the bytes in the cache are counted in one shared counter per cache
 *   directory; a process alone in the directory recounts it at open.
 *
 * Admission, not thrash: when storing would pass the limit, whole files not
 * in use are evicted first; if that is not enough the bytes are not kept
 * (stk__rfile_store returns 0) and the caller uses them uncached. Under a
 * limit smaller than the dataset the cache therefore keeps a stable subset:
 * every epoch hits it and fetches the rest exactly once.
 *
 * On disk (all under DIR/v1/; another layout gets another vN):
 *   lock        every process with the cache open holds a shared flock on
 *               it; one that takes it exclusively (without waiting) is
 *               alone: it recounts `usage` from the state files and removes
 *               what a killed process left (temporary files, a state file
 *               without its data, damaged state files)
 *   held        no bytes: open file description locks (F_OFD_SETLK) on
 *               one byte per object, at a 62-bit hash of its id (two ids of
 *               one hash, odds 2^-62 a pair, share a byte: while one is
 *               open the other is neither evicted nor made, and its open
 *               fails as busy).
 *               They belong to the cache's open file, not to a descriptor
 *               per object: thousands of open objects cost no descriptors
 *   usage       one page mapped MAP_SHARED: magic, version, the bytes
 *               counted (C11 atomics on the mapping: lock-free 64-bit
 *               atomics are required) and a generation bumped whenever a
 *               file may have become evictable
 *   ID.data     the object's bytes at their offsets, a sparse file of its
 *               size; mapped PROT_READ MAP_SHARED, written only by pwrite
 *               (LMDB's discipline: a stray store through the map faults)
 *   ID.state    a 64-byte header (magic "STKCACHE", version 1, the object's
 *               size and unit count, the metadata slot) then one 32-bit
 *               slot per unit. A slot is 0 while its unit is absent, else
 *               1 + the bytes counted for it, so marking a unit present and
 *               counting its bytes are one atomic step: a process killed at
 *               any point leaves the state file's sum exact, and a recount
 *               is exact. A store of len bytes over n units counts len / n
 *               per unit (the remainder on the first; at most 4 GiB - 2 a
 *               unit); a drop uncounts what its units hold.
 * An open takes the read lock (waiting while another process holds the
 * write lock: milliseconds), then maps both files and checks the header,
 * every slot and the data file's size. Absent, damaged or made for another
 * object (or the data file missing): it lets go, takes the write lock,
 * looks again (another process may have made it meanwhile), removes what is
 * there and makes both files under temporary names, renaming ID.data into
 * place and then ID.state (whoever finds a state file finds its data
 * beside it), lets go and opens again. Two processes opening a new id at
 * once thus make one pair of files. A damaged copy that another open holds
 * is refused (STK_E_BUSY), never replaced under it. Eviction removes
 * ID.data, then ID.state, under the write lock. The state file's mtime is
 * set at open (and moves with stores): the eviction order.
 *
 * The limit counts the bytes stored (units and metadata), not the state
 * files (64 bytes + 4 a unit) nor the rest of a page a unit ends in. A
 * process killed between counting a store and marking it leaves the
 * counter high by that store until the next recount; it is never low.
 *
 * Threads: every call on one stk__rfile or stk__rcache is thread-safe
 * (present/store/drop are lock-free atomics on the mapping; eviction is
 * serialised per stk__rcache). Descriptors: three per cache, none per open
 * object (both files are mapped; stores open the data file for the call;
 * stk__rfile_fd opens one on demand). A forked child must not use its
 * parent's objects (it shares their locks); it opens its own. The
 * directory needs a local file system's flock(2), F_OFD_SETLK (Linux 3.15)
 * and shared mappings (ext4, xfs, tmpfs, ...). */
#ifndef STK_REMOTE_CACHE_H
#define STK_REMOTE_CACHE_H

#include "stoker/format.h"

#include <stddef.h>
#include <stdint.h>

typedef struct stk__rcache stk__rcache;
typedef struct stk__rfile stk__rfile;

/* dir (and its parents) created 0700 when missing; limit in bytes (0: no
 * limit). */
int stk__rcache_open(stk__rcache **out, const char *dir, uint64_t limit, stk_error *err);
void stk__rcache_close(stk__rcache *c);          /* after every file of it is closed */
uint64_t stk__rcache_used(const stk__rcache *c); /* bytes held, all processes */

/* The cached copy of one object of size bytes with nunits units; created
 * empty (a sparse file of the object's size) when absent. id: 1-200 bytes of
 * [A-Za-z0-9._-], not starting with '.' (STK_E_ARG otherwise). Several opens
 * of one id, in one process or many, share the one copy. */
int stk__rfile_open(stk__rcache *c, const char *id, uint64_t size, uint64_t nunits, stk__rfile **out,
                    stk_error *err);
void stk__rfile_close(stk__rfile *f);
/* The object's bytes as a read-only shared mapping of size bytes (NULL when
 * size is 0): present ranges hold the object's bytes, the rest reads as
 * zeros. */
const uint8_t *stk__rfile_map(const stk__rfile *f);
/* A read-only descriptor of the data file, for pread or io_uring: opened on
 * the first call, closed with f (-1 if it cannot be opened). */
int stk__rfile_fd(const stk__rfile *f);

int stk__rfile_meta_ready(const stk__rfile *f);
/* Store the metadata ranges (never evicted while the file is open, and
 * always kept: they may take the cache past its limit by their size, after
 * eviction made what room it could) and set the flag: n ranges at offs[i],
 * lens[i], bytes in data[i]. Counted once however many processes store
 * them. STK_OK, or STK_E_ARG (a range outside the object) / STK_E_IO (the
 * write failed: the flag stays clear). */
int stk__rfile_store_meta(stk__rfile *f, size_t n, const uint64_t *offs, const uint64_t *lens,
                          const void *const *data, stk_error *err);

int stk__rfile_present(const stk__rfile *f, uint64_t unit);
/* Store len bytes (already verified) at off and mark units [u0, u1)
 * present. 1 stored (or already present); 0 not kept: no room under the
 * limit (err untouched), or the write failed or the range lies outside the
 * object (err says which). Never an error code: the caller goes on with its
 * bytes uncached either way. Units already present are left as they are
 * and counted once, however many threads or processes store them. */
int stk__rfile_store(stk__rfile *f, uint64_t off, const void *data, uint64_t len, uint64_t u0, uint64_t u1,
                     stk_error *err);
/* stk__rfile_store that always keeps the bytes: whole files not in use are
 * evicted to make room as for a store, and if that is not enough they are
 * kept and counted past the limit (the caller bounds what it keeps this
 * way and drops it: the window of bytes stk_shard_value hands out). STK_OK;
 * STK_E_ARG (outside the object) or STK_E_IO (the write failed). */
int stk__rfile_store_over(stk__rfile *f, uint64_t off, const void *data, uint64_t len, uint64_t u0,
                          uint64_t u1, stk_error *err);
/* Units [u0, u1), whose bytes are [off, off + len), are not (or no longer)
 * right: mark them absent, uncount them, and release their whole pages
 * (fallocate PUNCH_HOLE where the file system has it). */
void stk__rfile_drop(stk__rfile *f, uint64_t u0, uint64_t u1, uint64_t off, uint64_t len);

#endif
