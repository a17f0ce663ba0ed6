/* remote/cache.c - the node-local cache of a remote dataset's bytes.
 *
 * The design, the layout on disk and the rules that keep it safe between
 * processes are in cache.h's head comment. Here, in order: the two shared
 * structures (the usage page, a state file's header), small file helpers,
 * the per-object locks, the cache directory (open, the alone-recount),
 * admission and eviction, then one object's files (open/create/repair,
 * store, drop, metadata).
 *
 * Memory order: a store pwrites its bytes, then sets its units' slots with
 * a release compare-exchange; stk__rfile_present loads them with acquire,
 * so a thread that sees a unit present sees its bytes through the map (the
 * page cache is what both the pwrite and the map reach). The byte counter
 * only bounds the cache: relaxed increments, compare-exchange for the
 * admission against the limit. */
#define _GNU_SOURCE
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if ATOMIC_LLONG_LOCK_FREE != 2 || ATOMIC_INT_LOCK_FREE != 2
#  error "the cache's counters in shared mappings need lock-free 32- and 64-bit atomics"
#endif

#define LAYOUT "v1"
#define STATE_MAGIC "STKCACHE"
#define USAGE_MAGIC "STKCUSED"
#define VERSION 1u
#define HDR_BYTES 64u
#define USAGE_BYTES 4096u
#define ID_MAX 200
#define TRIES 400                  /* open attempts, 1 ms apart while another process creates */
#define SLOT_COUNT_MAX 0xfffffffeu /* bytes one unit's slot can count */
#define RESCAN_NS 1000000000LL     /* a fruitless eviction scan is repeated this late at most... */
/* ... unless a file was closed since (the generation in the usage page). */

typedef struct {
    char magic[8]; /* "STKCACHE" */
    uint32_t version;
    uint32_t slot_bytes; /* 4 */
    uint64_t size;       /* the object's bytes */
    uint64_t nunits;
    _Atomic uint64_t meta; /* 0: no metadata; else 1 + the bytes counted for it */
    uint64_t reserved[3];
} state_hdr;
_Static_assert(sizeof(state_hdr) == HDR_BYTES, "the state header is 64 bytes");
_Static_assert(sizeof(_Atomic uint32_t) == 4, "a unit's slot is 4 bytes");

typedef struct {
    char magic[8]; /* "STKCUSED" */
    uint32_t version;
    uint32_t reserved0;
    _Atomic uint64_t used; /* bytes counted, all processes; stores in flight reserved */
    _Atomic uint64_t gen;  /* bumped when a file may have become evictable */
} usage_page;

/* An object this process holds: its lock byte and how many opens. */
typedef struct {
    uint64_t off; /* 0: an empty slot */
    uint64_t count;
} hold_slot;

struct stk__rcache {
    char *dir; /* DIR/v1 */
    uint64_t limit;
    int lock_fd; /* DIR/v1/lock, flocked shared while open */
    int held_fd; /* DIR/v1/held: read locks, one byte per object held open */
    int excl_fd; /* DIR/v1/held again: write locks (create, repair, evict) */
    usage_page *usage;
    long page;
    atomic_uint tmp_seq; /* temporary names of this cache object */
    /* Under mu: the objects held (open addressing on the lock byte), and
     * every write lock, so that no thread of this process takes one on an
     * object another thread holds or locks. */
    pthread_mutex_t mu;
    hold_slot *tab;
    size_t cap, n;
    pthread_mutex_t evict_mu;
    /* Under evict_mu: the last scan that found nothing to evict. */
    bool scan_failed;
    uint64_t fail_gen;
    struct timespec fail_at;
};

struct stk__rfile {
    stk__rcache *c;
    char *state_path, *data_path;
    uint64_t off; /* the object's lock byte in DIR/v1/held */
    bool held;
    atomic_int rfd; /* stk__rfile_fd's descriptor, opened on the first call; -1 */
    uint64_t size, nunits;
    state_hdr *hdr;
    size_t hdr_len; /* the state file's mapped length */
    _Atomic uint32_t *slots;
    const uint8_t *map; /* PROT_READ; the cache writes with pwrite */
};

/* ------------------------------------------------------------ helpers */

static char *join(const char *a, const char *b, const char *c)
{
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s%s%s", a, b, c);
    return s;
}

static int io_error(stk_error *err, int e, const char *path, const char *what)
{
    return stk_error_set(err, STK_E_IO, "%s: cannot %s: %s", path, what, strerror(e));
}

static int mkdir_p(const char *path)
{
    char *p = strdup(path);
    if (!p) return ENOMEM;
    int e = 0;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        char ch = *s;
        *s = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST) {
            e = errno;
            break;
        }
        *s = ch;
        if (ch == '\0') break;
    }
    struct stat st;
    if (!e && stat(p, &st) != 0) e = errno;
    if (!e && !S_ISDIR(st.st_mode)) e = ENOTDIR;
    free(p);
    return e;
}

static int xpwrite(int fd, const void *buf, uint64_t len, uint64_t off)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t w = pwrite(fd, p, len > (1u << 30) ? (1u << 30) : (size_t)len, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno;
        if (w == 0) return EIO;
        p += w;
        off += (uint64_t)w;
        len -= (uint64_t)w;
    }
    return 0;
}

static int flock_wait(int fd, int op)
{
    while (flock(fd, op) != 0)
        if (errno != EINTR) return -1;
    return 0;
}

/* ---------------------------------------------------- per-object locks
 *
 * An object open in a process holds a read lock (an open file description
 * lock, F_OFD_SETLK) on one byte of DIR/v1/held: the byte at a 62-bit hash
 * of its id. Creating, repairing and evicting an object take a write lock
 * on that byte without waiting, through a second description of the file,
 * so they fail while any process (this one included) holds it. Such locks
 * belong to the open file, not to a descriptor per object, so thousands of
 * open objects cost no descriptors, and they end with the process however
 * it ends. Two ids of one hash share a byte: while one is open the other is
 * neither evicted nor made (its open fails as busy after TRIES). Within a
 * process the opens of one object share one lock, counted in the hold
 * table. */

static uint64_t lock_byte(const char *id, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)id[i]) * 0x100000001b3ull;
    return (h >> 2) | 1;
}

static int ofd_lock(int fd, int cmd, short type, uint64_t off)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)off, .l_len = 1};
    int r;
    while ((r = fcntl(fd, cmd, &fl)) != 0 && errno == EINTR) {}
    return r;
}

/* Under mu: the table's slot for off (added when absent: NULL only when
 * out of memory). */
static hold_slot *hold_slot_of(stk__rcache *c, uint64_t off)
{
    if (2 * (c->n + 1) > c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        hold_slot *t = calloc(cap, sizeof *t);
        if (!t) return NULL;
        for (size_t i = 0; i < c->cap; i++) {
            if (!c->tab[i].off) continue;
            size_t j = (size_t)(c->tab[i].off * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
            while (t[j].off) j = (j + 1) & (cap - 1);
            t[j] = c->tab[i];
        }
        free(c->tab);
        c->tab = t;
        c->cap = cap;
    }
    size_t j = (size_t)(off * 0x9E3779B97F4A7C15ull >> 20) & (c->cap - 1);
    while (c->tab[j].off && c->tab[j].off != off) j = (j + 1) & (c->cap - 1);
    if (!c->tab[j].off) {
        c->tab[j].off = off; /* slots stay once used: as many as ids this process opened */
        c->n++;
    }
    return &c->tab[j];
}

/* Hold off (a read lock, waiting while another process creates, repairs
 * or evicts the object). 0 or an errno. */
static int hold(stk__rcache *c, uint64_t off)
{
    pthread_mutex_lock(&c->mu);
    hold_slot *h = hold_slot_of(c, off);
    int e = h ? 0 : ENOMEM;
    if (h && h->count == 0 && ofd_lock(c->held_fd, F_OFD_SETLKW, F_RDLCK, off) != 0) e = errno;
    if (!e) h->count++;
    pthread_mutex_unlock(&c->mu);
    return e;
}

static void unhold(stk__rcache *c, uint64_t off)
{
    pthread_mutex_lock(&c->mu);
    hold_slot *h = hold_slot_of(c, off);
    if (h && h->count > 0 && --h->count == 0) ofd_lock(c->held_fd, F_OFD_SETLK, F_UNLCK, off);
    pthread_mutex_unlock(&c->mu);
}

/* Under mu: the write lock on off without waiting. 0; EBUSY: this process
 * holds the object; EAGAIN: another process holds or locks it; else an
 * errno. */
static int excl_try(stk__rcache *c, uint64_t off)
{
    hold_slot *h = hold_slot_of(c, off);
    if (!h) return ENOMEM;
    if (h->count > 0) return EBUSY;
    if (ofd_lock(c->excl_fd, F_OFD_SETLK, F_WRLCK, off) == 0) return 0;
    return errno == EACCES || errno == EAGAIN ? EAGAIN : errno;
}

static void excl_end(stk__rcache *c, uint64_t off) { ofd_lock(c->excl_fd, F_OFD_SETLK, F_UNLCK, off); }

/* *a -= v, stopping at 0; what was taken off. */
static uint64_t sub_sat(_Atomic uint64_t *a, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);
    for (;;) {
        uint64_t take = cur < v ? cur : v;
        if (atomic_compare_exchange_weak_explicit(a, &cur, cur - take, memory_order_relaxed,
                                                  memory_order_relaxed))
            return take;
    }
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* dir/name with its suffix `from` replaced by `to` (name ends with from). */
static char *sibling(const char *dir, const char *name, const char *from, const char *to)
{
    size_t stem = strlen(name) - strlen(from), n = strlen(dir) + 1 + stem + strlen(to) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s/%.*s%s", dir, (int)stem, name, to);
    return s;
}

static bool id_ok(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > ID_MAX || id[0] == '.') return false;
    for (size_t i = 0; i < n; i++) {
        char ch = id[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

/* A state file of flen bytes mapped at h: whole and consistent (magic,
 * version, length, every slot within the object), with the bytes its slots
 * and metadata count in *sum. Other processes may be storing into it:
 * slots are read with atomic loads. */
static bool state_check(state_hdr *h, uint64_t flen, uint64_t *sum)
{
    if (flen < HDR_BYTES || memcmp(h->magic, STATE_MAGIC, 8) != 0 || h->version != VERSION ||
        h->slot_bytes != 4 || h->nunits > (flen - HDR_BYTES) / 4 || HDR_BYTES + 4 * h->nunits != flen)
        return false;
    uint64_t m = atomic_load_explicit(&h->meta, memory_order_relaxed);
    if (m > h->size + 1) return false;
    uint64_t s = m ? m - 1 : 0;
    _Atomic uint32_t *slots = (_Atomic uint32_t *)(h + 1);
    for (uint64_t u = 0; u < h->nunits; u++) {
        uint32_t v = atomic_load_explicit(&slots[u], memory_order_relaxed);
        if (v == 0) continue;
        if (v - 1 > h->size) return false;
        s += v - 1;
    }
    *sum = s;
    return true;
}

/* The bytes the state file open at fd counts, and the object's size; false
 * when it is damaged. For a file no other process has open: the recount and
 * eviction. */
static bool state_sum_fd(int fd, uint64_t *sum, uint64_t *size)
{
    struct stat st;
    *sum = 0;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)HDR_BYTES) return false;
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return false;
    bool valid = state_check(p, (uint64_t)st.st_size, sum);
    *size = ((const state_hdr *)p)->size;
    munmap(p, (size_t)st.st_size);
    if (!valid) *sum = 0;
    return valid;
}

/* ------------------------------------------------------------ the cache */

/* Alone in the directory: remove what killed processes left and count the
 * bytes of the state files that are whole. */
static uint64_t recount(const stk__rcache *c)
{
    DIR *d = opendir(c->dir);
    if (!d) return 0;
    uint64_t used = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (n[0] == '.' || strcmp(n, "lock") == 0 || strcmp(n, "usage") == 0 || strcmp(n, "held") == 0)
            continue;
        char *path = join(c->dir, "/", n);
        if (!path) break;
        if (strstr(n, ".tmp.")) {
            unlink(path); /* a create killed half-way */
        } else if (ends_with(n, ".state")) {
            char *data = sibling(c->dir, n, ".state", ".data");
            if (data) {
                uint64_t sum = 0, size = 0;
                struct stat st;
                int fd = open(path, O_RDWR | O_CLOEXEC);
                bool valid = fd >= 0 && state_sum_fd(fd, &sum, &size) && stat(data, &st) == 0 &&
                             S_ISREG(st.st_mode) && (uint64_t)st.st_size == size;
                if (fd >= 0) close(fd);
                if (valid) {
                    used += sum;
                } else { /* damaged, or its data file is gone */
                    unlink(data);
                    unlink(path);
                }
                free(data);
            }
        } else if (ends_with(n, ".data")) {
            char *state = sibling(c->dir, n, ".data", ".state");
            if (state) {
                struct stat st;
                if (stat(state, &st) != 0 && errno == ENOENT) unlink(path); /* its state file is gone */
                free(state);
            }
        }
        free(path);
    }
    closedir(d);
    return used;
}

static int map_usage(stk__rcache *c, bool alone, stk_error *err)
{
    char *path = join(c->dir, "/usage", "");
    if (!path) return stk_error_set(err, STK_E_NOMEM, "cache: out of memory");
    int rc = STK_OK;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        rc = io_error(err, errno, path, "open");
        goto out;
    }
    if (alone && st.st_size != (off_t)USAGE_BYTES && ftruncate(fd, USAGE_BYTES) != 0) {
        rc = io_error(err, errno, path, "size");
        goto out;
    }
    if (!alone && st.st_size != (off_t)USAGE_BYTES) {
        rc = stk_error_set(err, STK_E_FORMAT, "%s: not a cache usage page (%lld bytes)", path,
                           (long long)st.st_size);
        goto out;
    }
    void *p = mmap(NULL, USAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        rc = io_error(err, errno, path, "map");
        goto out;
    }
    c->usage = p;
    if (alone) {
        if (memcmp(c->usage->magic, USAGE_MAGIC, 8) != 0 || c->usage->version != VERSION) {
            memset(p, 0, sizeof(usage_page));
            memcpy(c->usage->magic, USAGE_MAGIC, 8);
            c->usage->version = VERSION;
        }
        atomic_store_explicit(&c->usage->used, recount(c), memory_order_relaxed);
        atomic_fetch_add_explicit(&c->usage->gen, 1, memory_order_relaxed);
    } else if (memcmp(c->usage->magic, USAGE_MAGIC, 8) != 0 || c->usage->version != VERSION) {
        rc = stk_error_set(err, STK_E_FORMAT, "%s: not a cache usage page (damaged?)", path);
    }
out:
    if (fd >= 0) close(fd);
    free(path);
    return rc;
}

int stk__rcache_open(stk__rcache **out, const char *dir, uint64_t limit, stk_error *err)
{
    *out = NULL;
    if (!dir || !*dir) return stk_error_set(err, STK_E_ARG, "cache: no directory named");
    stk__rcache *c = calloc(1, sizeof *c);
    if (!c) return stk_error_set(err, STK_E_NOMEM, "cache: out of memory");
    c->lock_fd = c->held_fd = c->excl_fd = -1;
    c->limit = limit;
    c->page = sysconf(_SC_PAGESIZE);
    if (c->page <= 0) c->page = 4096;
    pthread_mutex_init(&c->evict_mu, NULL);
    pthread_mutex_init(&c->mu, NULL);
    atomic_init(&c->tmp_seq, 0);
    c->dir = join(dir, "/" LAYOUT, "");
    char *lock = c->dir ? join(c->dir, "/lock", "") : NULL;
    char *held = c->dir ? join(c->dir, "/held", "") : NULL;
    int rc = STK_OK, e;
    if (!lock || !held) {
        rc = stk_error_set(err, STK_E_NOMEM, "cache: out of memory");
    } else if ((e = mkdir_p(c->dir)) != 0) {
        rc = io_error(err, e, c->dir, "create the cache directory");
    } else if ((c->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) {
        rc = io_error(err, errno, lock, "open");
    } else if ((c->held_fd = open(held, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0 ||
               (c->excl_fd = open(held, O_RDWR | O_CLOEXEC)) < 0) {
        rc = io_error(err, errno, held, "open");
    } else if (ofd_lock(c->excl_fd, F_OFD_GETLK, F_WRLCK, 1) != 0) {
        rc = io_error(err, errno, held, "lock (open file description locks)");
    } else {
        /* Alone: recount under the exclusive lock, then share it. Others
         * wait on the shared lock until the recount is done. */
        bool alone = flock(c->lock_fd, LOCK_EX | LOCK_NB) == 0;
        if (!alone && errno != EWOULDBLOCK) {
            rc = io_error(err, errno, lock, "lock");
        } else if (!alone && flock_wait(c->lock_fd, LOCK_SH) != 0) {
            rc = io_error(err, errno, lock, "lock");
        } else if ((rc = map_usage(c, alone, err)) == STK_OK && alone &&
                   flock_wait(c->lock_fd, LOCK_SH) != 0) {
            rc = io_error(err, errno, lock, "lock");
        }
    }
    free(lock);
    free(held);
    if (rc != STK_OK) {
        stk__rcache_close(c);
        return rc;
    }
    *out = c;
    return STK_OK;
}

void stk__rcache_close(stk__rcache *c)
{
    if (!c) return;
    if (c->usage) munmap(c->usage, USAGE_BYTES);
    if (c->excl_fd >= 0) close(c->excl_fd);
    if (c->held_fd >= 0) close(c->held_fd);
    if (c->lock_fd >= 0) close(c->lock_fd);
    pthread_mutex_destroy(&c->evict_mu);
    pthread_mutex_destroy(&c->mu);
    free(c->tab);
    free(c->dir);
    free(c);
}

uint64_t stk__rcache_used(const stk__rcache *c)
{
    return atomic_load_explicit(&c->usage->used, memory_order_relaxed);
}

/* ------------------------------------------------- admission and eviction */

static bool fits(const stk__rcache *c, uint64_t need)
{
    return atomic_load_explicit(&c->usage->used, memory_order_relaxed) <= c->limit - need;
}

/* Count need bytes if they fit under the limit (need <= limit). */
static bool reserve(stk__rcache *c, uint64_t need)
{
    uint64_t u = atomic_load_explicit(&c->usage->used, memory_order_relaxed);
    while (u <= c->limit - need)
        if (atomic_compare_exchange_weak_explicit(&c->usage->used, &u, u + need, memory_order_relaxed,
                                                  memory_order_relaxed))
            return true;
    return false;
}

/* Remove the object named by state file `name` if no process holds it;
 * uncount its bytes. */
static bool evict_file(stk__rcache *c, const char *name)
{
    char *state = join(c->dir, "/", name), *data = sibling(c->dir, name, ".state", ".data");
    uint64_t off = lock_byte(name, strlen(name) - strlen(".state"));
    bool done = false;
    pthread_mutex_lock(&c->mu);
    if (state && data && excl_try(c, off) == 0) {
        int fd = open(state, O_RDWR | O_CLOEXEC);
        uint64_t sum = 0, size;
        if (fd >= 0) {
            state_sum_fd(fd, &sum, &size); /* a damaged one uncounts nothing: the counter errs high */
            close(fd);
        }
        /* Data first: a kill in between leaves a state file without data,
         * which the next open repairs and the next recount removes. */
        unlink(data);
        done = unlink(state) == 0;
        if (done) sub_sat(&c->usage->used, sum);
        excl_end(c, off);
    }
    pthread_mutex_unlock(&c->mu);
    free(state);
    free(data);
    return done;
}

typedef struct {
    char *name;
    struct timespec mtime;
} candidate;

static int by_age(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Evict whole files, least recently opened (or stored) first, until need
 * bytes fit. false: nothing could be evicted and they do not fit. */
static bool evict(stk__rcache *c, uint64_t need)
{
    pthread_mutex_lock(&c->evict_mu);
    bool ok = fits(c, need);
    uint64_t gen = atomic_load_explicit(&c->usage->gen, memory_order_relaxed);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long long since = (now.tv_sec - c->fail_at.tv_sec) * 1000000000LL + (now.tv_nsec - c->fail_at.tv_nsec);
    if (ok || (c->scan_failed && gen == c->fail_gen && since < RESCAN_NS)) {
        pthread_mutex_unlock(&c->evict_mu);
        return ok;
    }
    candidate *cand = NULL;
    size_t n = 0, cap = 0;
    DIR *d = opendir(c->dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !ends_with(e->d_name, ".state")) continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, 0) != 0) continue;
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            candidate *m = realloc(cand, ncap * sizeof *m);
            if (!m) break;
            cand = m;
            cap = ncap;
        }
        if (!(cand[n].name = strdup(e->d_name))) break;
        cand[n++].mtime = st.st_mtim;
    }
    if (d) closedir(d);
    if (n) qsort(cand, n, sizeof *cand, by_age);
    bool evicted = false;
    for (size_t i = 0; i < n && !(ok = fits(c, need)); i++)
        if (evict_file(c, cand[i].name)) evicted = true;
    for (size_t i = 0; i < n; i++) free(cand[i].name);
    free(cand);
    ok = ok || fits(c, need);
    if (!ok && !evicted) {
        c->scan_failed = true;
        c->fail_gen = gen;
        c->fail_at = now;
    }
    pthread_mutex_unlock(&c->evict_mu);
    return ok || evicted;
}

/* Count need bytes, evicting to make room. false: they do not fit. */
static bool admit(stk__rcache *c, uint64_t need)
{
    if (c->limit == 0) {
        atomic_fetch_add_explicit(&c->usage->used, need, memory_order_relaxed);
        return true;
    }
    if (need > c->limit) return false;
    for (int t = 0; t < 64; t++) {
        if (reserve(c, need)) return true;
        if (!evict(c, need)) return false;
    }
    return reserve(c, need);
}

/* ------------------------------------------------------------ one file */

enum { OPENED, ABSENT, RETRY, DAMAGED, BUSY_HERE, BUSY_THERE, FAILED };

static void rfile_unmap(stk__rfile *f)
{
    if (f->map) munmap((void *)f->map, f->size);
    if (f->hdr) munmap(f->hdr, f->hdr_len);
    f->map = NULL;
    f->hdr = NULL;
    f->slots = NULL;
}

/* Map the object's two files as they are: OPENED (both whole and of this
 * object), ABSENT (no state file), DAMAGED (a state file damaged or made
 * for another object, or its data file missing or of another size),
 * FAILED. */
static int map_files(stk__rfile *f, stk_error *err)
{
    int fd = open(f->state_path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? ABSENT : (io_error(err, errno, f->state_path, "open"), FAILED);
    struct stat st;
    int r = DAMAGED;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) != 0) r = (io_error(err, errno, f->state_path, "stat"), FAILED);
    else if ((uint64_t)st.st_size == f->hdr_len &&
             (p = mmap(NULL, f->hdr_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        r = (io_error(err, errno, f->state_path, "map"), FAILED);
    close(fd);
    if (p == MAP_FAILED) return r;
    f->hdr = p;
    f->slots = (_Atomic uint32_t *)(f->hdr + 1);
    uint64_t sum;
    if (!state_check(f->hdr, f->hdr_len, &sum) || f->hdr->size != f->size || f->hdr->nunits != f->nunits)
        return DAMAGED;
    if ((fd = open(f->data_path, O_RDONLY | O_CLOEXEC)) < 0)
        return errno == ENOENT ? DAMAGED : (io_error(err, errno, f->data_path, "open"), FAILED);
    r = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == f->size ? OPENED : DAMAGED;
    if (r == OPENED && f->size > 0) {
        p = mmap(NULL, f->size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) r = (io_error(err, errno, f->data_path, "map"), FAILED);
        else f->map = p;
    }
    close(fd);
    return r;
}

/* Make the object's files afresh (removing what is there) under the write
 * lock: RETRY (made, or made by another process meanwhile: open them),
 * BUSY_HERE (this process holds the object), BUSY_THERE (another process
 * holds or locks it), FAILED. The state file is renamed into place last:
 * whoever finds it finds the data file beside it. */
static int create(stk__rfile *f, stk_error *err)
{
    stk__rcache *c = f->c;
    pthread_mutex_lock(&c->mu);
    int e = excl_try(c, f->off);
    if (e) {
        pthread_mutex_unlock(&c->mu);
        if (e == EBUSY) return BUSY_HERE;
        if (e == EAGAIN) return BUSY_THERE;
        return io_error(err, e, f->state_path, "lock"), FAILED;
    }
    int r = map_files(f, err); /* made by another process between our look and the lock? */
    rfile_unmap(f);
    if (r == OPENED || r == FAILED) goto out;
    char suffix[64];
    snprintf(suffix, sizeof suffix, ".tmp.%ld.%u", (long)getpid(),
             atomic_fetch_add_explicit(&c->tmp_seq, 1, memory_order_relaxed));
    char *tmp = join(f->state_path, suffix, ""), *dtmp = join(f->data_path, suffix, "");
    r = FAILED;
    if (!tmp || !dtmp) {
        stk_error_set(err, STK_E_NOMEM, "cache: out of memory");
    } else {
        unlink(f->state_path);
        unlink(f->data_path);
        state_hdr h;
        memset(&h, 0, sizeof h);
        memcpy(h.magic, STATE_MAGIC, 8);
        h.version = VERSION;
        h.slot_bytes = 4;
        h.size = f->size;
        h.nunits = f->nunits;
        int sfd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        int dfd = open(dtmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (sfd < 0 || dfd < 0) {
            io_error(err, errno, sfd < 0 ? tmp : dtmp, "create");
        } else if (ftruncate(sfd, (off_t)f->hdr_len) != 0 || (e = xpwrite(sfd, &h, sizeof h, 0)) != 0) {
            io_error(err, e ? e : errno, tmp, "write");
        } else if (ftruncate(dfd, (off_t)f->size) != 0) {
            io_error(err, errno, dtmp, "size");
        } else if (rename(dtmp, f->data_path) != 0 || rename(tmp, f->state_path) != 0) {
            io_error(err, errno, f->state_path, "create");
            unlink(f->data_path);
        } else {
            r = RETRY;
        }
        if (sfd >= 0) close(sfd);
        if (dfd >= 0) close(dfd);
        if (r != RETRY) {
            unlink(tmp);
            unlink(dtmp);
        }
    }
    free(tmp);
    free(dtmp);
out:
    excl_end(c, f->off);
    pthread_mutex_unlock(&c->mu);
    return r == OPENED ? RETRY : r;
}

int stk__rfile_open(stk__rcache *c, const char *id, uint64_t size, uint64_t nunits, stk__rfile **out,
                    stk_error *err)
{
    *out = NULL;
    if (!id_ok(id))
        return stk_error_set(err, STK_E_ARG, "cache: bad object id \"%.64s\" (1-%d of [A-Za-z0-9._-])",
                             id ? id : "", ID_MAX);
    if (size > (uint64_t)INT64_MAX || size > SIZE_MAX || nunits > (SIZE_MAX - HDR_BYTES) / 4 ||
        nunits > (uint64_t)(INT64_MAX - HDR_BYTES) / 4)
        return stk_error_set(err, STK_E_ARG, "cache: object %s too large (%llu bytes, %llu units)", id,
                             (unsigned long long)size, (unsigned long long)nunits);
    stk__rfile *f = calloc(1, sizeof *f);
    if (!f) return stk_error_set(err, STK_E_NOMEM, "cache: out of memory");
    f->c = c;
    atomic_init(&f->rfd, -1);
    f->size = size;
    f->nunits = nunits;
    f->hdr_len = HDR_BYTES + 4 * (size_t)nunits;
    f->off = lock_byte(id, strlen(id));
    char *base = join(c->dir, "/", id);
    f->state_path = base ? join(base, ".state", "") : NULL;
    f->data_path = base ? join(base, ".data", "") : NULL;
    free(base);
    if (!f->state_path || !f->data_path) {
        stk__rfile_close(f);
        return stk_error_set(err, STK_E_NOMEM, "cache: out of memory");
    }
    /* Hold it, then look; absent or damaged: let go, make it afresh under
     * the write lock, and look again. Another process making it at the same
     * moment holds the write lock a few milliseconds: wait for it. */
    stk_error e = {0}; /* the helpers' message, the caller's only on failure */
    int r = FAILED, busy = 0;
    for (int t = 0; t < TRIES; t++) {
        int he = hold(c, f->off);
        if (he) {
            io_error(&e, he, f->state_path, "lock");
            r = FAILED;
            break;
        }
        int seen = map_files(f, &e);
        if (seen == OPENED) {
            f->held = true;
            r = OPENED;
            break;
        }
        rfile_unmap(f);
        unhold(c, f->off);
        if (seen == FAILED) break;
        r = create(f, &e);
        if (r == RETRY) continue;
        if (r == FAILED) break;
        /* Held by another open: of this process (a damaged copy cannot be
         * replaced under it: refuse), or of another (that one may be
         * opening, or making it: a few tries later, refuse a damaged one). */
        if (seen == DAMAGED && (r == BUSY_HERE || ++busy > 50)) {
            stk_error_set(&e, STK_E_BUSY,
                          "%s: damaged or made for another object (not %llu bytes, %llu units), and in use "
                          "by another open",
                          f->state_path, (unsigned long long)size, (unsigned long long)nunits);
            break;
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
        r = FAILED;
    }
    if (r != OPENED) {
        stk__rfile_close(f);
        if (e.code == STK_OK) stk_error_set(&e, STK_E_IO, "cache: cannot open object %s: busy", id);
        if (err) *err = e;
        return e.code;
    }
    utimensat(AT_FDCWD, f->state_path, NULL, 0); /* the eviction order: least recently opened first */
    *out = f;
    return STK_OK;
}

void stk__rfile_close(stk__rfile *f)
{
    if (!f) return;
    rfile_unmap(f);
    int fd = atomic_load_explicit(&f->rfd, memory_order_relaxed);
    if (fd >= 0) close(fd);
    if (f->held) {
        unhold(f->c, f->off);
        atomic_fetch_add_explicit(&f->c->usage->gen, 1, memory_order_relaxed);
    }
    free(f->state_path);
    free(f->data_path);
    free(f);
}

const uint8_t *stk__rfile_map(const stk__rfile *f) { return f->map; }

int stk__rfile_fd(const stk__rfile *f)
{
    stk__rfile *m = (stk__rfile *)f; /* the descriptor is made once, on demand: not the object's state */
    int fd = atomic_load_explicit(&m->rfd, memory_order_acquire);
    if (fd >= 0) return fd;
    fd = open(f->data_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int none = -1;
    if (atomic_compare_exchange_strong_explicit(&m->rfd, &none, fd, memory_order_acq_rel,
                                                memory_order_acquire))
        return fd;
    close(fd); /* another thread made it first */
    return none;
}

/* The data file for writing, for the length of one call. */
static int open_data(const stk__rfile *f, stk_error *err)
{
    int fd = open(f->data_path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) io_error(err, errno, f->data_path, "open");
    return fd;
}

int stk__rfile_meta_ready(const stk__rfile *f)
{
    return atomic_load_explicit(&f->hdr->meta, memory_order_acquire) != 0;
}

int stk__rfile_store_meta(stk__rfile *f, size_t n, const uint64_t *offs, const uint64_t *lens,
                          const void *const *data, stk_error *err)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (offs[i] > f->size || lens[i] > f->size - offs[i])
            return stk_error_set(err, STK_E_ARG,
                                 "%s: metadata bytes [%llu, +%llu) outside the object (%llu bytes)",
                                 f->data_path, (unsigned long long)offs[i], (unsigned long long)lens[i],
                                 (unsigned long long)f->size);
        total += lens[i];
    }
    if (stk__rfile_meta_ready(f)) return STK_OK;
    if (total > f->size) total = f->size; /* overlapping ranges: the slot holds at most the object */
    /* Always kept: make what room there is, then count it regardless. */
    if (!admit(f->c, total)) atomic_fetch_add_explicit(&f->c->usage->used, total, memory_order_relaxed);
    int fd = open_data(f, err);
    if (fd < 0) {
        sub_sat(&f->c->usage->used, total);
        return STK_E_IO;
    }
    for (size_t i = 0; i < n; i++) {
        int e = xpwrite(fd, data[i], lens[i], offs[i]);
        if (e) {
            close(fd);
            sub_sat(&f->c->usage->used, total);
            return io_error(err, e, f->data_path, "write");
        }
    }
    close(fd);
    uint64_t none = 0;
    if (!atomic_compare_exchange_strong_explicit(&f->hdr->meta, &none, total + 1, memory_order_release,
                                                 memory_order_relaxed))
        sub_sat(&f->c->usage->used, total); /* another thread or process stored and counted it */
    return STK_OK;
}

int stk__rfile_present(const stk__rfile *f, uint64_t unit)
{
    return unit < f->nunits && atomic_load_explicit(&f->slots[unit], memory_order_acquire) != 0;
}

/* What unit u of a store of len bytes over units [u0, u1) counts. */
static uint32_t share(uint64_t len, uint64_t u0, uint64_t u1, uint64_t u)
{
    uint64_t n = u1 - u0, s = len / n + (u == u0 ? len % n : 0);
    return s > SLOT_COUNT_MAX ? SLOT_COUNT_MAX : (uint32_t)s;
}

/* The store: 1 stored, 0 not kept (err set unless the limit refused), -1
 * failed (err set). over: counted even past the limit. */
static int store(stk__rfile *f, uint64_t off, const void *data, uint64_t len, uint64_t u0, uint64_t u1,
                 bool over, stk_error *err)
{
    if (u0 >= u1 || u1 > f->nunits || off > f->size || len > f->size - off) {
        stk_error_set(
            err, STK_E_ARG,
            "%s: units [%llu, %llu) at bytes [%llu, +%llu) outside the object (%llu units, %llu bytes)",
            f->data_path, (unsigned long long)u0, (unsigned long long)u1, (unsigned long long)off,
            (unsigned long long)len, (unsigned long long)f->nunits, (unsigned long long)f->size);
        return -1;
    }
    uint64_t u = u0;
    while (u < u1 && atomic_load_explicit(&f->slots[u], memory_order_relaxed) != 0) u++;
    if (u == u1) return 1; /* all there already */
    uint64_t total = share(len, u0, u1, u0) + (u1 - u0 - 1) * (uint64_t)share(len, u0, u1, u1 - 1);
    if (!admit(f->c, total)) {
        if (!over) return 0;
        atomic_fetch_add_explicit(&f->c->usage->used, total, memory_order_relaxed);
    }
    if (len) {
        int fd = open_data(f, err), e = fd < 0 ? -1 : xpwrite(fd, data, len, off);
        if (fd >= 0) close(fd);
        if (e) {
            sub_sat(&f->c->usage->used, total);
            if (e > 0) io_error(err, e, f->data_path, "write");
            return -1;
        }
    }
    /* Bytes first, then the marks: each slot goes from absent to 1 + its
     * count in one step, so a unit is counted once and a kill leaves the
     * state file's sum exact. */
    uint64_t marked = 0;
    for (u = u0; u < u1; u++) {
        uint32_t none = 0, s = share(len, u0, u1, u);
        if (atomic_compare_exchange_strong_explicit(&f->slots[u], &none, s + 1, memory_order_release,
                                                    memory_order_relaxed))
            marked += s;
    }
    if (total > marked) sub_sat(&f->c->usage->used, total - marked);
    return 1;
}

int stk__rfile_store(stk__rfile *f, uint64_t off, const void *data, uint64_t len, uint64_t u0, uint64_t u1,
                     stk_error *err)
{
    return store(f, off, data, len, u0, u1, false, err) == 1;
}

int stk__rfile_store_over(stk__rfile *f, uint64_t off, const void *data, uint64_t len, uint64_t u0,
                          uint64_t u1, stk_error *err)
{
    stk_error e = {0};
    if (store(f, off, data, len, u0, u1, true, &e) == 1) return STK_OK;
    if (err) *err = e;
    return e.code;
}

void stk__rfile_drop(stk__rfile *f, uint64_t u0, uint64_t u1, uint64_t off, uint64_t len)
{
    if (u1 > f->nunits) u1 = f->nunits;
    uint64_t freed = 0;
    for (uint64_t u = u0; u < u1; u++) {
        uint32_t v = atomic_exchange_explicit(&f->slots[u], 0, memory_order_acq_rel);
        if (v) freed += v - 1;
    }
    if (off < f->size) {
        if (len > f->size - off) len = f->size - off;
        uint64_t pg = (uint64_t)f->c->page;
        uint64_t a = (off + pg - 1) / pg * pg, b = (off + len) / pg * pg;
        /* Whole pages only: a page shared with a neighbouring unit keeps its
         * bytes. Where the file system cannot punch, the blocks stay until
         * the file is evicted. */
        int fd = b > a ? open(f->data_path, O_WRONLY | O_CLOEXEC) : -1;
        if (fd >= 0) {
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a, (off_t)(b - a));
            close(fd);
        }
    }
    if (freed) sub_sat(&f->c->usage->used, freed);
}
