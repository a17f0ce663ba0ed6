/* tests/remote/test_cache.c - the node-local cache of remote bytes
 * (remote/cache.h): store, present, the map and the metadata; several
 * processes sharing one cache (forked, some killed with SIGKILL while they
 * store); the limit and eviction; repair of damaged state files; released
 * blocks; threads storing and reading one file.
 *
 * Children never call Check: they report through their exit status. */
#define _GNU_SOURCE
#include "cache.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ helpers */

static stk__rcache *open_cache(const char *dir, uint64_t limit)
{
    stk__rcache *c = NULL;
    stk_error e = {0};
    int rc = stk__rcache_open(&c, dir, limit, &e);
    ck_assert_msg(rc == STK_OK, "rcache_open: %s", e.msg);
    return c;
}

static stk__rfile *open_file(stk__rcache *c, const char *id, uint64_t size, uint64_t nunits)
{
    stk__rfile *f = NULL;
    stk_error e = {0};
    int rc = stk__rfile_open(c, id, size, nunits, &f, &e);
    ck_assert_msg(rc == STK_OK, "rfile_open %s: %s", id, e.msg);
    return f;
}

/* The object's bytes: byte i of object `seed` (a function of both only:
 * byte i % 8 of a hash of i / 8 and seed), never 0, so that absent bytes,
 * which read as 0, never pass for stored ones. */
static void object_bytes(uint8_t *buf, uint64_t off, uint64_t len, uint64_t seed)
{
    uint64_t word = 0;
    for (uint64_t i = 0; i < len; i++) {
        uint64_t at = off + i;
        if (i == 0 || at % 8 == 0) {
            word = (at / 8 + 1) * 0x9E3779B97F4A7C15ull ^ seed * 0xBF58476D1CE4E5B9ull;
            word ^= word >> 31;
            word *= 0x94D049BB133111EBull;
            word ^= word >> 29;
        }
        buf[i] = (uint8_t)(word >> (at % 8 * 8)) | 1;
    }
}

/* Store units [u0, u1) of equal size `unit` of object seed. */
static int store_units(stk__rfile *f, uint64_t unit, uint64_t u0, uint64_t u1, uint64_t seed)
{
    uint64_t len = (u1 - u0) * unit;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return -1;
    object_bytes(buf, u0 * unit, len, seed);
    stk_error e = {0};
    int r = stk__rfile_store(f, u0 * unit, buf, len, u0, u1, &e);
    free(buf);
    return r;
}

/* The map holds object seed's bytes over [off, off + len). */
static bool map_holds(const stk__rfile *f, uint64_t off, uint64_t len, uint64_t seed)
{
    uint8_t *want = malloc(len ? len : 1);
    object_bytes(want, off, len, seed);
    bool ok = memcmp(stk__rfile_map(f) + off, want, len) == 0;
    free(want);
    return ok;
}

static bool map_zero(const stk__rfile *f, uint64_t off, uint64_t len)
{
    for (uint64_t i = 0; i < len; i++)
        if (stk__rfile_map(f)[off + i] != 0) return false;
    return true;
}

static void v1_path(char *out, const char *dir, const char *name)
{
    char v1[TU_PATH];
    tu_join(v1, sizeof v1, dir, "v1");
    tu_join(out, TU_PATH, v1, name);
}

static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Processes that start together: each child says it is ready on `ready`,
 * then waits for one byte on `go`. */
typedef struct {
    int ready[2], go[2];
} gate;

static void gate_init(gate *g)
{
    ck_assert(pipe(g->ready) == 0);
    ck_assert(pipe(g->go) == 0);
}

/* In a child: only its own ends stay open, so that a parent that fails
 * (and exits) ends the wait with EOF instead of leaving it blocked. */
static void gate_child_wait(gate *g)
{
    char b = 1;
    close(g->ready[0]);
    close(g->go[1]);
    if (write(g->ready[1], &b, 1) != 1) _exit(90);
    if (read(g->go[0], &b, 1) != 1) _exit(91);
}

/* Wait until n children are ready, then release them. */
static void gate_open(gate *g, int n)
{
    char b;
    for (int i = 0; i < n; i++) ck_assert(read(g->ready[0], &b, 1) == 1);
    for (int i = 0; i < n; i++) ck_assert(write(g->go[1], &b, 1) == 1);
}

static void gate_close(gate *g)
{
    close(g->ready[0]);
    close(g->ready[1]);
    close(g->go[0]);
    close(g->go[1]);
}

static void wait_ok(pid_t pid)
{
    int st = 0;
    ck_assert(waitpid(pid, &st, 0) == pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: %s %d", (int)pid,
                  WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

/* In a child: open cache and file or exit with 80/81. */
static stk__rfile *child_open(const char *dir, uint64_t limit, const char *id, uint64_t size, uint64_t nunits,
                              stk__rcache **c)
{
    stk__rfile *f = NULL;
    if (stk__rcache_open(c, dir, limit, NULL) != STK_OK) _exit(80);
    if (stk__rfile_open(*c, id, size, nunits, &f, NULL) != STK_OK) _exit(81);
    return f;
}

/* -------------------------------------------------------------- tests */

START_TEST(store_present_map)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "cache-basic");
    const uint64_t size = 3 * 4096 + 123, nunits = 8, seed = 7;
    stk__rcache *c = open_cache(dir, 0);
    stk__rfile *f = open_file(c, "obj-1", size, nunits);
    uint64_t b[9];
    for (int i = 0; i <= 8; i++) b[i] = size * (uint64_t)i / 8;
    for (uint64_t u = 0; u < nunits; u++) ck_assert(!stk__rfile_present(f, u));
    ck_assert_uint_eq(stk__rcache_used(c), 0);
    ck_assert(!stk__rfile_meta_ready(f));
    ck_assert(map_zero(f, 0, size));

    uint8_t *obj = malloc(size);
    object_bytes(obj, 0, size, seed);
    stk_error e = {0};
    ck_assert_int_eq(stk__rfile_store(f, 0, obj, b[4], 0, 4, &e), 1);
    ck_assert_int_eq(stk__rfile_store(f, b[6], obj + b[6], b[7] - b[6], 6, 7, &e), 1);
    for (uint64_t u = 0; u < nunits; u++) ck_assert_int_eq(stk__rfile_present(f, u), u < 4 || u == 6);
    ck_assert(!stk__rfile_present(f, nunits));
    ck_assert(map_holds(f, 0, b[4], seed));
    ck_assert(map_holds(f, b[6], b[7] - b[6], seed));
    ck_assert(map_zero(f, b[4], b[6] - b[4]));
    ck_assert(map_zero(f, b[7], size - b[7]));
    uint64_t used = b[4] + b[7] - b[6];
    ck_assert_uint_eq(stk__rcache_used(c), used);
    /* Stored again: present already, counted once. */
    ck_assert_int_eq(stk__rfile_store(f, b[1], obj + b[1], b[3] - b[1], 1, 3, &e), 1);
    ck_assert_uint_eq(stk__rcache_used(c), used);
    /* The descriptor reads the same file. */
    uint8_t got[64];
    ck_assert(pread(stk__rfile_fd(f), got, sizeof got, (off_t)b[6]) == (ssize_t)sizeof got);
    ck_assert(memcmp(got, obj + b[6], sizeof got) == 0);

    /* Metadata: two ranges, counted once. */
    const uint64_t offs[2] = {b[7], size - 10}, lens[2] = {100, 10};
    const void *data[2] = {obj + offs[0], obj + offs[1]};
    ck_assert_int_eq(stk__rfile_store_meta(f, 2, offs, lens, data, &e), STK_OK);
    ck_assert(stk__rfile_meta_ready(f));
    ck_assert(map_holds(f, offs[0], 100, seed) && map_holds(f, offs[1], 10, seed));
    used += 110;
    ck_assert_uint_eq(stk__rcache_used(c), used);
    ck_assert_int_eq(stk__rfile_store_meta(f, 2, offs, lens, data, &e), STK_OK);
    ck_assert_uint_eq(stk__rcache_used(c), used);

    /* Outside the object: not kept, named; never an error code. */
    ck_assert_int_eq(stk__rfile_store(f, size - 1, obj, 2, 7, 8, &e), 0);
    tu_assert_error(&e, STK_E_ARG, "outside the object");
    ck_assert_int_eq(stk__rfile_store(f, 0, obj, 1, 7, 9, &e), 0);
    ck_assert_int_eq(stk__rfile_store(f, 0, obj, 1, 3, 3, &e), 0);
    const uint64_t bad_off[1] = {size};
    ck_assert_int_eq(stk__rfile_store_meta(f, 1, bad_off, lens, data, &e), STK_E_ARG);
    ck_assert_uint_eq(stk__rcache_used(c), used);

    /* A second open of the id, and a reopen, see the same copy. */
    stk__rfile *g = open_file(c, "obj-1", size, nunits);
    ck_assert(stk__rfile_present(g, 6) && !stk__rfile_present(g, 5) && stk__rfile_meta_ready(g));
    ck_assert(map_holds(g, b[6], b[7] - b[6], seed));
    stk__rfile_close(g);
    stk__rfile_close(f);
    stk__rcache_close(c);
    /* Alone again: the recount finds the same bytes. */
    c = open_cache(dir, 0);
    ck_assert_uint_eq(stk__rcache_used(c), used);
    f = open_file(c, "obj-1", size, nunits);
    for (uint64_t u = 0; u < nunits; u++) ck_assert_int_eq(stk__rfile_present(f, u), u < 4 || u == 6);
    ck_assert(stk__rfile_meta_ready(f));
    ck_assert(map_holds(f, 0, b[4], seed));

    /* Bad ids are refused, named. */
    stk__rfile *h = NULL;
    ck_assert_int_eq(stk__rfile_open(c, "../x", 10, 1, &h, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "bad object id");
    ck_assert_int_eq(stk__rfile_open(c, ".hidden", 10, 1, &h, &e), STK_E_ARG);
    ck_assert_int_eq(stk__rfile_open(c, "", 10, 1, &h, &e), STK_E_ARG);
    ck_assert(h == NULL);
    /* An empty object and one without units. */
    h = open_file(c, "empty", 0, 0);
    ck_assert(stk__rfile_map(h) == NULL);
    stk__rfile_close(h);
    stk__rfile_close(f);
    stk__rcache_close(c);
    free(obj);
}
END_TEST

static size_t open_descriptors(void)
{
    size_t n;
    char **names = tu_list("/proc/self/fd", &n);
    tu_free_names(names, n);
    return n;
}

/* Objects held open cost no descriptors (a dataset opens every shard);
 * stk__rfile_fd makes one on demand. */
START_TEST(no_descriptor_per_object)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "cache-fds");
    enum { N = 300 };
    stk__rcache *c = open_cache(dir, 0);
    size_t before = open_descriptors();
    stk__rfile *f[N];
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "s%d", i);
        f[i] = open_file(c, id, 8192, 2);
        ck_assert_int_eq(store_units(f[i], 4096, (uint64_t)i % 2, (uint64_t)i % 2 + 1, (uint64_t)i), 1);
    }
    ck_assert_uint_le(open_descriptors(), before);
    int fd = stk__rfile_fd(f[7]);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(stk__rfile_fd(f[7]), fd);
    uint8_t got[16], want[16];
    object_bytes(want, 4096, sizeof want, 7);
    ck_assert(pread(fd, got, sizeof got, 4096) == (ssize_t)sizeof got && memcmp(got, want, sizeof got) == 0);
    ck_assert_uint_eq(open_descriptors(), before + 1);
    for (int i = 0; i < N; i++) stk__rfile_close(f[i]);
    ck_assert_uint_eq(open_descriptors(), before);
    ck_assert_uint_eq(stk__rcache_used(c), N * 4096);
    stk__rcache_close(c);
}
END_TEST

/* Four processes open one new id at once and each stores its unit and the
 * shared unit 0: one pair of files, every unit, unit 0 counted once. */
START_TEST(concurrent_create_one_file)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "cache-create");
    enum { KIDS = 4, ROUNDS = 6, UNIT = 5000 };
    stk__rcache *c = open_cache(dir, 0); /* held: the children's counter is live, not recounted */
    for (int round = 0; round < ROUNDS; round++) {
        char id[32];
        snprintf(id, sizeof id, "race-%d", round);
        gate g;
        gate_init(&g);
        pid_t pid[KIDS];
        for (int k = 0; k < KIDS; k++) {
            if ((pid[k] = fork()) == 0) {
                stk__rcache *cc;
                gate_child_wait(&g);
                stk__rfile *f = child_open(dir, 0, id, (KIDS + 1) * UNIT, KIDS + 1, &cc);
                if (store_units(f, UNIT, 0, 1, 3) != 1 || store_units(f, UNIT, k + 1, k + 2, 3) != 1)
                    _exit(82);
                stk__rfile_close(f);
                stk__rcache_close(cc);
                _exit(0);
            }
            ck_assert(pid[k] > 0);
        }
        gate_open(&g, KIDS);
        for (int k = 0; k < KIDS; k++) wait_ok(pid[k]);
        gate_close(&g);
        ck_assert_uint_eq(stk__rcache_used(c), (uint64_t)(round + 1) * (KIDS + 1) * UNIT);
        stk__rfile *f = open_file(c, id, (KIDS + 1) * UNIT, KIDS + 1);
        for (int u = 0; u <= KIDS; u++) ck_assert(stk__rfile_present(f, (uint64_t)u));
        ck_assert(map_holds(f, 0, (KIDS + 1) * UNIT, 3));
        stk__rfile_close(f);
    }
    char v1[TU_PATH];
    tu_join(v1, sizeof v1, dir, "v1");
    size_t n;
    char **names = tu_list(v1, &n);
    ck_assert_uint_eq(n, 3 + 2 * ROUNDS); /* lock, held, usage, and one .data and .state per id */
    tu_free_names(names, n);
    stk__rcache_close(c);
}
END_TEST

/* Three processes store every unit of one file at once, in different
 * orders and groupings: each unit counted once. */
START_TEST(same_units_counted_once)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "cache-once");
    enum { KIDS = 3, UNITS = 256, UNIT = 1000 };
    stk__rcache *c = open_cache(dir, 0);
    gate g;
    gate_init(&g);
    pid_t pid[KIDS];
    for (int k = 0; k < KIDS; k++) {
        if ((pid[k] = fork()) == 0) {
            stk__rcache *cc;
            stk__rfile *f = child_open(dir, 0, "shared", UNITS * UNIT, UNITS, &cc);
            gate_child_wait(&g);
            uint64_t s = (uint64_t)k + 1;
            for (int i = 0; i < 4 * UNITS; i++) {
                uint64_t u0 = next_rand(&s) % UNITS, n = 1 + (uint64_t)k;
                if (u0 + n > UNITS) n = UNITS - u0;
                if (store_units(f, UNIT, u0, u0 + n, 11) != 1) _exit(82);
            }
            for (uint64_t u = 0; u < UNITS; u++)
                if (store_units(f, UNIT, u, u + 1, 11) != 1) _exit(83);
            stk__rfile_close(f);
            stk__rcache_close(cc);
            _exit(0);
        }
        ck_assert(pid[k] > 0);
    }
    gate_open(&g, KIDS);
    for (int k = 0; k < KIDS; k++) wait_ok(pid[k]);
    gate_close(&g);
    ck_assert_uint_eq(stk__rcache_used(c), UNITS * UNIT);
    stk__rfile *f = open_file(c, "shared", UNITS * UNIT, UNITS);
    ck_assert(map_holds(f, 0, UNITS * UNIT, 11));
    stk__rfile_close(f);
    stk__rcache_close(c);
}
END_TEST

/* Children killed with SIGKILL while they store and drop (large stores, so
 * that many kills land between a pwrite and its marks), each round in a
 * fresh object (whose absent bytes are zeros, not an earlier round's):
 * every unit present holds its bytes, the live counter never errs low, and
 * the recount of a process alone is exact. */
START_TEST(sigkill_while_storing)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "cache-kill");
    enum { UNITS = 64, UNIT = 64 * 1024, ROUNDS = 40 };
    const char *trials = getenv("STOKER_FAULT_TRIALS");
    int rounds = ROUNDS * (trials && atoi(trials) > 0 ? atoi(trials) : 1);
    stk__rcache *c = open_cache(dir, 0);
    uint64_t seed = 99;
    for (int round = 0; round < rounds; round++) {
        char id[32];
        snprintf(id, sizeof id, "victim-%d", round);
        int ready[2];
        ck_assert(pipe(ready) == 0);
        pid_t pid = fork();
        if (pid == 0) {
            stk__rcache *cc;
            stk__rfile *f = child_open(dir, 0, id, UNITS * UNIT, UNITS, &cc);
            uint64_t s = (uint64_t)round * 7919;
            uint8_t *obj = malloc(UNITS * UNIT); /* made once: the loop is pwrites and marks */
            if (!obj) _exit(83);
            object_bytes(obj, 0, UNITS * UNIT, 5);
            if (stk__rfile_store(f, 0, obj, UNIT, 0, 1, NULL) != 1) _exit(82);
            char b = 1;
            if (write(ready[1], &b, 1) != 1) _exit(90);
            for (;;) {
                uint64_t u = next_rand(&s) % UNITS, n = 1 + next_rand(&s) % 4;
                if (u + n > UNITS) n = UNITS - u;
                if (next_rand(&s) % 4 == 0) stk__rfile_drop(f, u, u + n, u * UNIT, n * UNIT);
                else if (stk__rfile_store(f, u * UNIT, obj + u * UNIT, n * UNIT, u, u + n, NULL) != 1)
                    _exit(82);
            }
        }
        ck_assert(pid > 0);
        close(ready[1]);
        char b;
        ck_assert(read(ready[0], &b, 1) == 1);
        close(ready[0]);
        struct timespec ts = {0, (long)(next_rand(&seed) % 3000000)};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int st;
        ck_assert(waitpid(pid, &st, 0) == pid);
        ck_assert_msg(WIFSIGNALED(st), "the child ended before it was killed (status %d)", st);
    }
    uint64_t live = stk__rcache_used(c);
    stk__rcache_close(c);
    c = open_cache(dir, 0); /* alone: recount */
    uint64_t want = 0;
    for (int round = 0; round < rounds; round++) {
        char id[32];
        snprintf(id, sizeof id, "victim-%d", round);
        stk__rfile *f = open_file(c, id, UNITS * UNIT, UNITS);
        for (uint64_t u = 0; u < UNITS; u++) {
            if (!stk__rfile_present(f, u)) continue;
            want += UNIT;
            ck_assert_msg(map_holds(f, u * UNIT, UNIT, 5), "%s: unit %llu present with wrong bytes", id,
                          (unsigned long long)u);
        }
        stk__rfile_close(f);
    }
    ck_assert_uint_gt(want, 0); /* each child stored before it was killed */
    ck_assert_uint_eq(stk__rcache_used(c), want);
    ck_assert_uint_ge(live, want);
    stk__rcache_close(c);
}
END_TEST

/* Three processes store into six files under a tight limit, closing and
 * reopening them (so that eviction has work): the counter never passes
 * the limit, and ends equal to what the state files hold. */
START_TEST(limit_never_exceeded)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "cache-limit");
    enum { KIDS = 3, FILES = 6, UNITS = 32, UNIT = 4096, OPS = 300 };
    const uint64_t limit = 256 * 1024;
    stk__rcache *c = open_cache(dir, limit);
    gate g;
    gate_init(&g);
    pid_t pid[KIDS];
    for (int k = 0; k < KIDS; k++) {
        if ((pid[k] = fork()) == 0) {
            stk__rcache *cc;
            if (stk__rcache_open(&cc, dir, limit, NULL) != STK_OK) _exit(80);
            gate_child_wait(&g);
            uint64_t s = 1000 + (uint64_t)k;
            stk__rfile *open[FILES] = {NULL};
            int kept = 0;
            for (int i = 0; i < OPS; i++) {
                int which = (int)(next_rand(&s) % FILES);
                char id[16];
                snprintf(id, sizeof id, "f%d", which);
                if (!open[which] &&
                    stk__rfile_open(cc, id, UNITS * UNIT, UNITS, &open[which], NULL) != STK_OK)
                    _exit(81);
                uint64_t u = next_rand(&s) % UNITS, n = 1 + next_rand(&s) % 4;
                if (u + n > UNITS) n = UNITS - u;
                int r = store_units(open[which], UNIT, u, u + n, (uint64_t)which);
                if (r < 0) _exit(82);
                if (r) kept++;
                if (stk__rcache_used(cc) > limit) _exit(83);
                if (next_rand(&s) % 3 == 0) {
                    stk__rfile_close(open[which]);
                    open[which] = NULL;
                }
            }
            for (int i = 0; i < FILES; i++) stk__rfile_close(open[i]);
            stk__rcache_close(cc);
            _exit(kept > 0 ? 0 : 84);
        }
        ck_assert(pid[k] > 0);
    }
    gate_open(&g, KIDS);
    int left = KIDS;
    while (left > 0) {
        ck_assert_uint_le(stk__rcache_used(c), limit);
        for (int k = 0; k < KIDS; k++) {
            int st;
            if (pid[k] <= 0 || waitpid(pid[k], &st, WNOHANG) != pid[k]) continue;
            ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %d", k, st);
            pid[k] = 0;
            left--;
        }
    }
    gate_close(&g);
    uint64_t live = stk__rcache_used(c);
    ck_assert_uint_le(live, limit);
    ck_assert_uint_gt(live, limit / 4); /* the cache was used, not starved */
    stk__rcache_close(c);
    c = open_cache(dir, limit);
    ck_assert_uint_eq(stk__rcache_used(c), live);
    /* And what is present is right. */
    for (int i = 0; i < FILES; i++) {
        char id[16], path[TU_PATH], name[24];
        snprintf(id, sizeof id, "f%d", i);
        snprintf(name, sizeof name, "%s.state", id);
        v1_path(path, dir, name);
        if (!tu_exists(path)) continue;
        stk__rfile *f = open_file(c, id, UNITS * UNIT, UNITS);
        for (uint64_t u = 0; u < UNITS; u++)
            if (stk__rfile_present(f, u)) ck_assert(map_holds(f, u * UNIT, UNIT, (uint64_t)i));
        stk__rfile_close(f);
    }
    stk__rcache_close(c);
}
END_TEST

static void age(const char *dir, const char *id, time_t seconds_ago)
{
    char path[TU_PATH], name[64];
    snprintf(name, sizeof name, "%s.state", id);
    v1_path(path, dir, name);
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= seconds_ago;
    t[1] = t[0];
    ck_assert(utimensat(AT_FDCWD, path, t, 0) == 0);
}

static bool cached(const char *dir, const char *id)
{
    char path[TU_PATH], name[64];
    snprintf(name, sizeof name, "%s.state", id);
    v1_path(path, dir, name);
    bool state = tu_exists(path);
    snprintf(name, sizeof name, "%s.data", id);
    v1_path(path, dir, name);
    ck_assert_int_eq(state, tu_exists(path));
    return state;
}

/* Closed files go least recently opened first, only as many as needed; a
 * store larger than the limit evicts nothing. */
START_TEST(evict_oldest_first)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "cache-lru");
    stk__rcache *c = open_cache(dir, 100000);
    const char *ids[3] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        stk__rfile *f = open_file(c, ids[i], 30000, 1);
        ck_assert_int_eq(store_units(f, 30000, 0, 1, 1), 1);
        stk__rfile_close(f);
    }
    age(dir, "a", 100);
    age(dir, "b", 300); /* the oldest */
    age(dir, "c", 200);
    ck_assert_uint_eq(stk__rcache_used(c), 90000);
    stk__rfile *d = open_file(c, "d", 200002, 2);
    ck_assert_int_eq(store_units(d, 100001, 1, 2, 1), 0); /* larger than the limit */
    ck_assert(cached(dir, "a") && cached(dir, "b") && cached(dir, "c"));
    ck_assert_int_eq(store_units(d, 20000, 0, 1, 1), 1); /* 110000: one file goes, the oldest */
    ck_assert(cached(dir, "a") && !cached(dir, "b") && cached(dir, "c"));
    ck_assert_uint_eq(stk__rcache_used(c), 80000);
    stk__rfile_close(d);
    stk__rcache_close(c);
}
END_TEST

/* store_over keeps bytes past the limit once nothing can be evicted, and
 * counts them; a drop gives the room back. */
START_TEST(store_over_passes_limit)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "cache-over");
    stk__rcache *c = open_cache(dir, 100000);
    stk__rfile *old = open_file(c, "old", 30000, 1);
    ck_assert_int_eq(store_units(old, 30000, 0, 1, 3), 1);
    stk__rfile_close(old);
    stk__rfile *f = open_file(c, "f", 200000, 4);
    ck_assert_int_eq(store_units(f, 50000, 0, 1, 3), 1);
    uint8_t *buf = malloc(50000);
    object_bytes(buf, 50000, 50000, 3);
    stk_error e = {0};
    /* 130000: "old" goes first, then it fits. */
    ck_assert_int_eq(stk__rfile_store_over(f, 50000, buf, 50000, 1, 2, &e), STK_OK);
    ck_assert(!cached(dir, "old"));
    ck_assert_uint_eq(stk__rcache_used(c), 100000);
    /* Nothing left to evict: kept past the limit, counted. */
    object_bytes(buf, 100000, 50000, 3);
    ck_assert_int_eq(stk__rfile_store(f, 100000, buf, 50000, 2, 3, &e), 0);
    ck_assert(!stk__rfile_present(f, 2));
    ck_assert_int_eq(stk__rfile_store_over(f, 100000, buf, 50000, 2, 3, &e), STK_OK);
    ck_assert(stk__rfile_present(f, 2) && map_holds(f, 100000, 50000, 3));
    ck_assert_uint_eq(stk__rcache_used(c), 150000);
    ck_assert_int_eq(stk__rfile_store_over(f, 190000, buf, 50000, 3, 4, &e), STK_E_ARG);
    tu_assert_error(&e, STK_E_ARG, "outside the object");
    stk__rfile_drop(f, 1, 3, 50000, 100000);
    ck_assert_uint_eq(stk__rcache_used(c), 50000);
    free(buf);
    stk__rfile_close(f);
    stk__rcache_close(c);
}
END_TEST

/* A file another process holds is never evicted, even the oldest; once it
 * lets go, it is. */
START_TEST(held_file_not_evicted)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "cache-held");
    const uint64_t limit = 100000;
    stk__rcache *c = open_cache(dir, limit);
    gate g;
    gate_init(&g);
    pid_t pid = fork();
    if (pid == 0) {
        stk__rcache *cc;
        stk__rfile *f = child_open(dir, limit, "held", 40000, 1, &cc);
        if (store_units(f, 40000, 0, 1, 2) != 1) _exit(82);
        gate_child_wait(&g); /* holds it until the parent says go */
        stk__rfile_close(f);
        stk__rcache_close(cc);
        _exit(0);
    }
    ck_assert(pid > 0);
    char b;
    ck_assert(read(g.ready[0], &b, 1) == 1);
    stk__rfile *old = open_file(c, "old", 40000, 1);
    ck_assert_int_eq(store_units(old, 40000, 0, 1, 2), 1);
    stk__rfile_close(old);
    age(dir, "held", 300); /* the oldest: first in line, were it free */
    age(dir, "old", 100);
    ck_assert_uint_eq(stk__rcache_used(c), 80000);
    stk__rfile *nf = open_file(c, "new", 40000, 2);
    ck_assert_int_eq(store_units(nf, 20000, 0, 1, 2), 1); /* 100000: fits */
    ck_assert(cached(dir, "held") && cached(dir, "old"));
    ck_assert_int_eq(store_units(nf, 20000, 1, 2, 2), 1); /* "old" goes, not "held" */
    ck_assert(cached(dir, "held") && !cached(dir, "old"));
    ck_assert_uint_eq(stk__rcache_used(c), 80000);
    /* Only held files left: not kept. */
    stk__rfile *more = open_file(c, "more", 40000, 1);
    ck_assert_int_eq(store_units(more, 40000, 0, 1, 2), 0);
    ck_assert(cached(dir, "held"));
    ck_assert_uint_eq(stk__rcache_used(c), 80000);
    /* The holder closes and exits: its file goes now. */
    ck_assert(write(g.go[1], &b, 1) == 1);
    wait_ok(pid);
    gate_close(&g);
    ck_assert_int_eq(store_units(more, 40000, 0, 1, 2), 1);
    ck_assert(!cached(dir, "held") && cached(dir, "new") && cached(dir, "more"));
    ck_assert_uint_eq(stk__rcache_used(c), 80000);
    ck_assert(map_holds(nf, 0, 40000, 2) && map_holds(more, 0, 40000, 2));
    stk__rfile_close(nf);
    stk__rfile_close(more);
    stk__rcache_close(c);
}
END_TEST

/* A process killed with SIGKILL while it holds a file lets go of it as it
 * dies: the file is evicted as soon as room is needed, and its bytes are
 * there for others meanwhile. */
START_TEST(killed_holder_lets_go)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "cache-killed");
    const uint64_t limit = 100000;
    stk__rcache *c = open_cache(dir, limit);
    int ready[2];
    ck_assert(pipe(ready) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        stk__rcache *cc;
        stk__rfile *f = child_open(dir, limit, "rank1", 60000, 1, &cc);
        if (store_units(f, 60000, 0, 1, 9) != 1) _exit(82);
        char b = 1;
        if (write(ready[1], &b, 1) != 1) _exit(90);
        for (;;) pause(); /* holds it until killed */
    }
    ck_assert(pid > 0);
    close(ready[1]);
    char b;
    ck_assert(read(ready[0], &b, 1) == 1);
    close(ready[0]);
    stk__rfile *f = open_file(c, "rank0", 60000, 1);
    ck_assert_int_eq(store_units(f, 60000, 0, 1, 9), 0); /* "rank1" is held */
    kill(pid, SIGKILL);
    int st;
    ck_assert(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st));
    /* Its bytes, whole. (Closing g also tells this process's evictor that a
     * file may have come free; a kill alone is noticed within a second.) */
    stk__rfile *g = open_file(c, "rank1", 60000, 1);
    ck_assert(stk__rfile_present(g, 0) && map_holds(g, 0, 60000, 9));
    stk__rfile_close(g);
    ck_assert_int_eq(store_units(f, 60000, 0, 1, 9), 1); /* now it goes */
    ck_assert(!cached(dir, "rank1"));
    ck_assert_uint_eq(stk__rcache_used(c), 60000);
    stk__rfile_close(f);
    stk__rcache_close(c);
}
END_TEST

/* Store one unit of "d", close: a fresh copy to damage. */
static void fresh_copy(stk__rcache *c)
{
    stk__rfile *f = open_file(c, "d", 8192, 2);
    ck_assert_int_eq(store_units(f, 4096, 0, 1, 4), 1);
    stk__rfile_close(f);
}

/* Reopened after the damage: nothing trusted, and it works again. */
static void expect_recreated(stk__rcache *c, uint64_t size, uint64_t nunits)
{
    stk__rfile *f = open_file(c, "d", size, nunits);
    for (uint64_t u = 0; u < nunits; u++) ck_assert(!stk__rfile_present(f, u));
    ck_assert(!stk__rfile_meta_ready(f));
    ck_assert(map_zero(f, 0, size));
    ck_assert_int_eq(store_units(f, size / nunits, 0, 1, 4), 1);
    ck_assert(stk__rfile_present(f, 0) && map_holds(f, 0, size / nunits, 4));
    stk__rfile_close(f);
}

static void poke(const char *path, off_t off, const void *bytes, size_t n)
{
    int fd = open(path, O_WRONLY);
    ck_assert(fd >= 0);
    ck_assert(pwrite(fd, bytes, n, off) == (ssize_t)n);
    close(fd);
}

START_TEST(damaged_state_recreated)
{
    char dir[TU_PATH], state[TU_PATH], data[TU_PATH];
    tu_scratch(dir, sizeof dir, "cache-damage");
    v1_path(state, dir, "d.state");
    v1_path(data, dir, "d.data");
    stk__rcache *c = open_cache(dir, 0);
    /* The magic. */
    fresh_copy(c);
    poke(state, 0, "XX", 2);
    expect_recreated(c, 8192, 2);
    /* A slot counting more than the object (1 + 9000 > 8192). */
    fresh_copy(c);
    const uint32_t slot = 9001;
    poke(state, 64 + 4, &slot, 4);
    expect_recreated(c, 8192, 2);
    /* Cut short. */
    fresh_copy(c);
    ck_assert(truncate(state, 60) == 0);
    expect_recreated(c, 8192, 2);
    /* Its data file gone. */
    fresh_copy(c);
    ck_assert(unlink(data) == 0);
    expect_recreated(c, 8192, 2);
    /* Its data file of another size. */
    fresh_copy(c);
    ck_assert(truncate(data, 100) == 0);
    expect_recreated(c, 8192, 2);
    /* Opened for another object (size, unit count). */
    fresh_copy(c);
    expect_recreated(c, 16384, 4);
    expect_recreated(c, 8192, 2);
    /* Mismatched while another open holds it: refused, named; the holder
     * goes on. */
    stk__rfile *f = open_file(c, "d", 8192, 2), *g = NULL;
    ck_assert_int_eq(store_units(f, 4096, 1, 2, 4), 1);
    stk_error e = {0};
    ck_assert_int_eq(stk__rfile_open(c, "d", 8192, 3, &g, &e), STK_E_BUSY);
    tu_assert_error(&e, STK_E_BUSY, "d.state");
    ck_assert(g == NULL);
    ck_assert(stk__rfile_present(f, 1) && map_holds(f, 4096, 4096, 4));
    stk__rfile_close(f);
    stk__rcache_close(c);
    /* A recount alone removes a damaged state file and its data, and leftovers. */
    c = open_cache(dir, 0);
    fresh_copy(c);
    stk__rcache_close(c);
    poke(state, 0, "XX", 2);
    char tmp[TU_PATH], orphan[TU_PATH];
    v1_path(tmp, dir, "z.state.tmp.1.2");
    v1_path(orphan, dir, "y.data");
    tu_write(tmp, "x", 1);
    tu_write(orphan, "y", 1);
    c = open_cache(dir, 0);
    ck_assert_uint_eq(stk__rcache_used(c), 0);
    ck_assert(!tu_exists(state) && !tu_exists(data) && !tu_exists(tmp) && !tu_exists(orphan));
    stk__rcache_close(c);
}
END_TEST

static uint64_t blocks(int fd)
{
    ck_assert(fsync(fd) == 0);
    struct stat st;
    ck_assert(fstat(fd, &st) == 0);
    return (uint64_t)st.st_blocks;
}

/* drop releases the dropped units' whole pages on disk and keeps its
 * neighbours' bytes. */
START_TEST(drop_releases_blocks)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "cache-punch");
    enum { UNITS = 16, UNIT = 64 * 1024 };
    stk__rcache *c = open_cache(dir, 0);
    stk__rfile *f = open_file(c, "p", UNITS * UNIT, UNITS);
    ck_assert_uint_lt(blocks(stk__rfile_fd(f)), 64); /* sparse */
    ck_assert_int_eq(store_units(f, UNIT, 0, UNITS, 6), 1);
    uint64_t full = blocks(stk__rfile_fd(f));
    ck_assert_uint_ge(full, UNITS * UNIT / 512);
    stk__rfile_drop(f, 0, UNITS / 2, 0, UNITS / 2 * UNIT);
    uint64_t half = blocks(stk__rfile_fd(f));
    ck_assert_msg(half <= full - UNITS / 2 * UNIT / 512, "st_blocks %llu after the drop, %llu before",
                  (unsigned long long)half, (unsigned long long)full);
    for (uint64_t u = 0; u < UNITS; u++) ck_assert_int_eq(stk__rfile_present(f, u), u >= UNITS / 2);
    ck_assert_uint_eq(stk__rcache_used(c), UNITS / 2 * UNIT);
    ck_assert(map_zero(f, 0, UNITS / 2 * UNIT));
    ck_assert(map_holds(f, UNITS / 2 * UNIT, UNITS / 2 * UNIT, 6));
    stk__rfile_close(f);

    /* Units not on page bounds: only the pages wholly inside go. */
    f = open_file(c, "q", 3 * 10000, 3);
    ck_assert_int_eq(store_units(f, 10000, 0, 3, 8), 1);
    stk__rfile_drop(f, 1, 2, 10000, 10000);
    ck_assert(stk__rfile_present(f, 0) && !stk__rfile_present(f, 1) && stk__rfile_present(f, 2));
    ck_assert(map_holds(f, 0, 10000, 8) && map_holds(f, 20000, 10000, 8));
    ck_assert(map_zero(f, 12288, 4096));
    ck_assert_uint_eq(stk__rcache_used(c), UNITS / 2 * UNIT + 20000);
    stk__rfile_close(f);
    stk__rcache_close(c);
}
END_TEST

/* ------------------------------------------------------------ threads */

enum { T_THREADS = 8, T_UNITS = 512, T_UNIT = 1000, T_OPS = 4000 };

typedef struct {
    stk__rfile *f;
    uint64_t seed;
    int bad;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    uint8_t want[4 * T_UNIT];
    for (int i = 0; i < T_OPS; i++) {
        uint64_t u = next_rand(&w->seed) % T_UNITS, n = 1 + next_rand(&w->seed) % 4,
                 op = next_rand(&w->seed) % 8;
        if (u + n > T_UNITS) n = T_UNITS - u;
        if (op == 0) {
            stk__rfile_drop(w->f, u, u + n, u * T_UNIT, n * T_UNIT); /* units under a page: no punch */
        } else if (op < 4) {
            if (store_units(w->f, T_UNIT, u, u + n, 21) != 1) w->bad++;
        } else if (stk__rfile_present(w->f, u)) {
            object_bytes(want, u * T_UNIT, T_UNIT, 21);
            if (memcmp(stk__rfile_map(w->f) + u * T_UNIT, want, T_UNIT) != 0) w->bad++;
        }
    }
    return NULL;
}

/* Threads store, drop and read one object through two opens: bytes of a
 * present unit are right, and the counter ends equal to the units present. */
START_TEST(threads_store_present)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "cache-threads");
    stk__rcache *c = open_cache(dir, 0);
    stk__rfile *f[2] = {open_file(c, "t", T_UNITS * T_UNIT, T_UNITS),
                        open_file(c, "t", T_UNITS * T_UNIT, T_UNITS)};
    pthread_t th[T_THREADS];
    worker w[T_THREADS];
    for (int i = 0; i < T_THREADS; i++) {
        w[i] = (worker){.f = f[i % 2], .seed = (uint64_t)i * 31 + 1};
        ck_assert(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    }
    for (int i = 0; i < T_THREADS; i++) {
        ck_assert(pthread_join(th[i], NULL) == 0);
        ck_assert_int_eq(w[i].bad, 0);
    }
    uint64_t want = 0;
    for (uint64_t u = 0; u < T_UNITS; u++) {
        ck_assert_int_eq(stk__rfile_present(f[0], u), stk__rfile_present(f[1], u));
        if (stk__rfile_present(f[0], u)) want += T_UNIT;
    }
    ck_assert_uint_eq(stk__rcache_used(c), want);
    stk__rfile_close(f[0]);
    stk__rfile_close(f[1]);
    stk__rcache_close(c);
}
END_TEST

TU_MAIN("cache",
        {.name = "basic",
         .tests = {store_present_map, no_descriptor_per_object, damaged_state_recreated,
                   drop_releases_blocks},
         .timeout = 60},
        {.name = "evict",
         .tests = {evict_oldest_first, store_over_passes_limit, held_file_not_evicted, killed_holder_lets_go},
         .timeout = 60},
        {.name = "processes",
         .tests = {concurrent_create_one_file, same_units_counted_once, sigkill_while_storing,
                   limit_never_exceeded},
         .timeout = 300},
        {.name = "threads", .tests = {threads_store_present}, .timeout = 120})
