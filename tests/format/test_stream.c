/* tests/format/test_stream.c - the streaming shard writer (stk_writer_expect)
 * and lent values (stk_writer_append_lent): whatever path field 0 takes
 * (copied into staging buffers, lent and written from the caller's memory,
 * a mix, buffered or O_DIRECT) the shard is byte for byte the one a plain
 * writer makes; every lent value is given back exactly once, never read
 * after that (buffers are poisoned when they come back), also on abort and
 * on a failing disk; a given checksum is stored as given, and given block
 * sums (stk_hash_blocks) are what the whole-file hash is made from. */
#define _GNU_SOURCE
#define STOKER_ADVANCED_API /* the streaming writer, block sums */
#include "testutil.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* image u8[side, side, 3] (field 0), label i64. side 64: 12288 bytes, three
 * whole pages, so values can be lent; side 10: 300 bytes, never. */
static void schema_for(stk_schema *s, uint64_t side)
{
    stk_error e;
    const uint64_t shape[3] = {side, side, 3};
    stk_schema_init(s);
    ck_assert_int_eq(stk_schema_add_tensor(s, "image", STK_DT_U8, 3, shape, &e), STK_OK);
    ck_assert_int_eq(stk_schema_add_tensor(s, "label", STK_DT_I64, 0, NULL, &e), STK_OK);
}

static size_t image_bytes(uint64_t side) { return (size_t)(side * side * 3); }

/* ------------------------------------------------------------ a buffer pool */

/* Page-aligned buffers the test lends, with the bookkeeping that catches a
 * writer giving one back twice, giving back a buffer it was never lent, or
 * keeping one. Buffers are filled with 0xA5 when they come back: a writer
 * that still read them would write those bytes. */
#define POOL_MAX 1024
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    uint8_t *buf[POOL_MAX];
    bool out[POOL_MAX]; /* lent and not given back */
    unsigned n, nfree;
    unsigned free_idx[POOL_MAX];
    size_t bytes;
    uint64_t lent, returned, errors;
} pool_t;

static void pool_init(pool_t *p, unsigned n, size_t bytes)
{
    ck_assert_uint_le(n, POOL_MAX);
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->n = p->nfree = n;
    p->bytes = bytes;
    for (unsigned i = 0; i < n; i++) {
        ck_assert_int_eq(posix_memalign((void **)&p->buf[i], 4096, bytes + 4096), 0);
        p->free_idx[i] = i;
    }
}

static void pool_fini(pool_t *p)
{
    for (unsigned i = 0; i < p->n; i++) free(p->buf[i]);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->lock);
}

/* A free buffer (waiting for the writer to give one back), marked lent. */
static unsigned pool_get(pool_t *p)
{
    pthread_mutex_lock(&p->lock);
    while (!p->nfree) pthread_cond_wait(&p->cv, &p->lock);
    unsigned i = p->free_idx[--p->nfree];
    p->out[i] = true;
    p->lent++;
    pthread_mutex_unlock(&p->lock);
    return i;
}

/* stk_lent_done_fn: data may be a buffer's start or (unaligned lends) one
 * byte into it. Runs on the writer's I/O thread: no Check asserts here. */
static void pool_done(void *ctx, const void *data)
{
    pool_t *p = ctx;
    pthread_mutex_lock(&p->lock);
    unsigned i = 0;
    while (i < p->n && !((const uint8_t *)data >= p->buf[i] && (const uint8_t *)data <= p->buf[i] + 1)) i++;
    if (i == p->n || !p->out[i]) {
        p->errors++;
    } else {
        p->out[i] = false;
        memset(p->buf[i], 0xA5, p->bytes + 4096); /* the block sums too */
        p->free_idx[p->nfree++] = i;
        p->returned++;
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->lock);
}

static uint64_t pool_outstanding(pool_t *p)
{
    pthread_mutex_lock(&p->lock);
    uint64_t n = p->lent - p->returned;
    pthread_mutex_unlock(&p->lock);
    return n;
}

/* ------------------------------------------------------------- writing */

typedef enum {
    PLAIN,    /* stk_writer_append, no expect: the reference */
    COPY,     /* expect, stk_writer_append */
    LEND,     /* expect, every value lent */
    MIX,      /* expect, lent / copied / lent one byte off alignment, in turns */
    NO_STREAM /* no expect, values lent: the writer must copy */
} how_t;

static void fill_record(uint8_t *img, size_t n, int64_t *label, uint64_t i)
{
    tu_fill(img, n, 1000 + i);
    *label = (int64_t)(i * 7) - 3;
}

/* Write records [0, n) of side x side images to path the way `how` says,
 * expecting `expect` records (0: no expect call). */
static stk_shard_info write_shard(const char *path, uint64_t side, uint64_t n, uint64_t expect, how_t how,
                                  pool_t *pool)
{
    stk_schema s;
    stk_error e;
    stk_shard_info info;
    size_t bytes = image_bytes(side);
    schema_for(&s, side);
    stk_writer *w = stk_writer_create(path, &s, &e);
    ck_assert_msg(w != NULL, "%s", e.msg);
    if (expect) ck_assert_int_eq(stk_writer_expect(w, expect, &e), STK_OK);
    uint8_t *own = malloc(bytes);
    for (uint64_t i = 0; i < n; i++) {
        int64_t label;
        int mode = how == MIX ? (int)(i % 3) : how == COPY || how == PLAIN ? 1 : 0;
        uint8_t *img = own;
        if (mode != 1) img = pool->buf[pool_get(pool)] + (mode == 2);
        fill_record(img, bytes, &label, i);
        stk_value v[2] = {{img, bytes}, {&label, 8}};
        if (mode == 1) {
            ck_assert_msg(stk_writer_append(w, v, &e) == STK_OK, "%s", e.msg);
        } else {
            /* no checksum, the checksum alone, or with the block sums (in
             * the lent buffer after the image, given back with it) */
            uint64_t *sums = (uint64_t *)(void *)(img - (mode == 2) + bytes + 64);
            stk_prehash pre = {stk_hash(img, bytes), NULL};
            if (i % 4 >= 2) pre.hash = stk_hash_blocks(img, bytes, sums), pre.sums = sums;
            ck_assert_msg(stk_writer_append_lent(w, v, i % 4 ? &pre : NULL, pool_done, pool, &e) == STK_OK,
                          "%s", e.msg);
        }
    }
    free(own);
    ck_assert_msg(stk_writer_finish(w, &info, &e) == STK_OK, "%s", e.msg);
    if (pool) {
        ck_assert_uint_eq(pool_outstanding(pool), 0); /* all back once finish returns */
        ck_assert_uint_eq(pool->errors, 0);
    }
    return info;
}

/* The shard at path opens, verifies, and holds records [0, n). */
static void check_shard(const char *path, uint64_t side, uint64_t n, const stk_shard_info *info)
{
    stk_error e;
    stk_shard *sh = tu_shard_open(path);
    ck_assert_uint_eq(stk_shard_records(sh), n);
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, n, NULL, NULL), 0);
    ck_assert_uint_eq(stk_shard_verify_padding(sh, NULL, NULL), 0);
    ck_assert_int_eq(stk_shard_verify_index(sh, info->index_hash, &e), STK_OK);
    ck_assert_uint_eq(stk_shard_file_hash(sh), info->file_hash);
    size_t bytes = image_bytes(side);
    uint8_t *want = malloc(bytes);
    for (uint64_t i = 0; i < n; i += 37) {
        int64_t label;
        fill_record(want, bytes, &label, i);
        const void *d;
        uint64_t sz;
        ck_assert_int_eq(stk_shard_value(sh, 0, i, &d, &sz, &e), STK_OK);
        ck_assert_msg(sz == bytes && memcmp(d, want, bytes) == 0, "record %llu: image differs",
                      (unsigned long long)i);
        ck_assert_int_eq(stk_shard_value(sh, 1, i, &d, &sz, &e), STK_OK);
        ck_assert(memcmp(d, &label, 8) == 0);
    }
    free(want);
    stk_shard_close(sh);
}

static void assert_same_file(const char *a, const char *b)
{
    size_t na, nb;
    uint8_t *x = tu_read(a, &na), *y = tu_read(b, &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert_msg(memcmp(x, y, na) == 0, "%s and %s differ", a, b);
    free(x);
    free(y);
}

/* Every way of writing gives the reference bytes, in dir. n records of
 * 12 KiB: 1,000 cross the 4 MiB staging buffers, the write batches and the
 * writer's lent limit (so lending waits for buffers to come back). */
static void all_paths_agree(const char *dir, uint64_t n)
{
    char ref[TU_PATH], path[TU_PATH];
    pool_t pool;
    /* fewer buffers than the writer may hold: get() waits for give-backs */
    pool_init(&pool, 300, image_bytes(64));
    tu_join(ref, sizeof ref, dir, "plain.stk");
    stk_shard_info want = write_shard(ref, 64, n, 0, PLAIN, NULL);
    check_shard(ref, 64, n, &want);
    static const how_t hows[] = {COPY, LEND, MIX, NO_STREAM};
    static const char *const names[] = {"copy.stk", "lend.stk", "mix.stk", "nostream.stk"};
    for (size_t k = 0; k < 4; k++) {
        tu_join(path, sizeof path, dir, names[k]);
        stk_shard_info got = write_shard(path, 64, n, hows[k] == NO_STREAM ? 0 : n, hows[k], &pool);
        ck_assert_uint_eq(got.file_hash, want.file_hash);
        ck_assert_uint_eq(got.index_hash, want.index_hash);
        assert_same_file(ref, path);
    }
    /* A wrong guess of the count: finish reads the file back. */
    tu_join(path, sizeof path, dir, "guess.stk");
    stk_shard_info got = write_shard(path, 64, n, n + 100, LEND, &pool);
    ck_assert_uint_eq(got.file_hash, want.file_hash);
    assert_same_file(ref, path);
    ck_assert_uint_eq(pool.lent, pool.returned);
    pool_fini(&pool);
}

START_TEST(lent_and_copied_give_the_same_bytes)
{
    char dir[TU_PATH];
    tu_scratch(dir, sizeof dir, "same");
    all_paths_agree(dir, 1000);
    all_paths_agree(dir, 1);   /* one record: the last chunk is also the first */
    all_paths_agree(dir, 341); /* 341 x 12 KiB: just under one staging buffer */
}
END_TEST

/* tmpfs: O_DIRECT is refused at open or at the first write (kernel
 * dependent), so the same stream goes out buffered. */
START_TEST(buffered_file_system)
{
    struct stat st;
    if (stat("/dev/shm", &st) != 0 || !S_ISDIR(st.st_mode)) {
        printf("buffered_file_system: skipped: no /dev/shm\n");
        return;
    }
    char dir[TU_PATH];
    snprintf(dir, sizeof dir, "/dev/shm/stk-test-stream-%ld", (long)getpid());
    tu_rm_rf(dir);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    all_paths_agree(dir, 700);
    tu_rm_rf(dir);
}
END_TEST

START_TEST(unaligned_values_are_copied_at_once)
{
    char ref[TU_PATH], path[TU_PATH];
    tu_scratch_pair(ref, path, sizeof ref, "unaligned", "plain.stk", "lend.stk");
    stk_shard_info want = write_shard(ref, 10, 500, 0, PLAIN, NULL);
    /* 300-byte images cannot go out from where they are: each is copied and
     * given back before the append returns. */
    pool_t pool;
    pool_init(&pool, 1, image_bytes(10));
    stk_shard_info got = write_shard(path, 10, 500, 500, LEND, &pool);
    ck_assert_uint_eq(got.file_hash, want.file_hash);
    assert_same_file(ref, path);
    check_shard(path, 10, 500, &got);
    pool_fini(&pool);
}
END_TEST

/* How a record's checksum is given to the writer: pre from record i's
 * image (n bytes), with room for its block sums at sums. */
typedef void (*prehash_fn)(uint64_t i, const uint8_t *img, size_t n, uint64_t *sums, stk_prehash *pre);

/* Record i (64 x 64) filled into a buffer of the pool and lent to w, with
 * the checksum `how` gives (kept in *given), or none where how is NULL. */
static int lend_record(stk_writer *w, pool_t *pool, uint64_t i, prehash_fn how, uint64_t *given, stk_error *e)
{
    unsigned b = pool_get(pool);
    int64_t label;
    fill_record(pool->buf[b], image_bytes(64), &label, i);
    stk_prehash pre, *pp = NULL;
    if (how) {
        how(i, pool->buf[b], image_bytes(64), (uint64_t *)(void *)(pool->buf[b] + image_bytes(64)), &pre);
        *given = pre.hash;
        pp = &pre;
    }
    stk_value v[2] = {{pool->buf[b], image_bytes(64)}, {&label, 8}};
    return stk_writer_append_lent(w, v, pp, pool_done, pool, e);
}

/* A streaming writer of 64 x 64 records at path, told to expect n. */
static stk_writer *lend_writer(const char *path, uint64_t n)
{
    stk_schema s;
    stk_error e;
    schema_for(&s, 64);
    stk_writer *w = stk_writer_create(path, &s, &e);
    ck_assert_msg(w != NULL, "%s", e.msg);
    ck_assert_int_eq(stk_writer_expect(w, n, &e), STK_OK);
    return w;
}

/* Every one of the `lent` values came back exactly once, and neither path
 * nor its temporary file is left; frees the pool. */
static void all_given_back(pool_t *pool, uint64_t lent, const char *path)
{
    char tmp[TU_PATH + 8];
    tu_tmp_of(tmp, sizeof tmp, path);
    ck_assert_uint_eq(pool->lent, lent);
    ck_assert_uint_eq(pool_outstanding(pool), 0);
    ck_assert_uint_eq(pool->errors, 0);
    ck_assert(!tu_exists(tmp));
    ck_assert(!tu_exists(path));
    pool_fini(pool);
}

START_TEST(abort_gives_everything_back)
{
    char path[TU_PATH];
    tu_scratch_file(path, sizeof path, "abort", "a.stk");
    pool_t pool;
    pool_init(&pool, 900, image_bytes(64));
    stk_writer *w = lend_writer(path, 800);
    stk_error e;
    for (uint64_t i = 0; i < 800; i++) ck_assert_int_eq(lend_record(w, &pool, i, NULL, NULL, &e), STK_OK);
    stk_writer_abort(w);
    all_given_back(&pool, 800, path);
}
END_TEST

/* Eight records of 64 x 64 images lent to a streaming writer at path, each
 * with the checksum `how` gives (kept in given[i]); the writer's info. */
static stk_shard_info lend_eight(const char *path, pool_t *pool, prehash_fn how, uint64_t given[8])
{
    stk_writer *w = lend_writer(path, 8);
    stk_error e;
    for (uint64_t i = 0; i < 8; i++) ck_assert_int_eq(lend_record(w, pool, i, how, &given[i], &e), STK_OK);
    stk_shard_info info;
    ck_assert_int_eq(stk_writer_finish(w, &info, &e), STK_OK);
    return info;
}

static void hash_wrong_at_3(uint64_t i, const uint8_t *img, size_t n, uint64_t *sums, stk_prehash *pre)
{
    (void)sums;
    *pre = (stk_prehash){stk_hash(img, n) ^ (i == 3 ? 1 : 0), NULL}; /* record 3: wrong */
}

static void sums_right(uint64_t i, const uint8_t *img, size_t n, uint64_t *sums, stk_prehash *pre)
{
    (void)i;
    *pre = (stk_prehash){stk_hash_blocks(img, n, sums), sums};
}

static void sums_wrong_at_5(uint64_t i, const uint8_t *img, size_t n, uint64_t *sums, stk_prehash *pre)
{
    sums_right(i, img, n, sums, pre);
    if (i == 5) sums[8 * 3 + 1] ^= 4; /* record 5, block 3, lane 1 */
}

START_TEST(given_checksum_is_stored_as_given)
{
    char path[TU_PATH];
    tu_scratch_file(path, sizeof path, "given", "h.stk");
    pool_t pool;
    pool_init(&pool, 16, image_bytes(64));
    uint64_t given[8];
    lend_eight(path, &pool, hash_wrong_at_3, given);
    stk_shard *sh = tu_shard_open(path);
    for (uint64_t i = 0; i < 8; i++) ck_assert_uint_eq(stk_shard_stored_hash(sh, 0, i), given[i]);
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, 3, NULL, NULL), 0);
    ck_assert_uint_eq(stk_shard_verify_records(sh, 3, 1, NULL, NULL), 1);
    ck_assert_uint_eq(stk_shard_verify_records(sh, 4, 4, NULL, NULL), 0);
    stk_shard_close(sh);
    pool_fini(&pool);
}
END_TEST

/* The whole-file hash of lent values comes from their block sums: a wrong
 * sum gives a file hash that the bytes on disk do not have (everything else
 * verifies), so the sums are really used and not just accepted. */
START_TEST(block_sums_make_the_file_hash)
{
    char path[TU_PATH];
    tu_scratch_file(path, sizeof path, "sums", "s.stk");
    stk_error e;
    pool_t pool;
    pool_init(&pool, 16, image_bytes(64));
    for (int wrong = 0; wrong < 2; wrong++) {
        uint64_t given[8];
        stk_shard_info info = lend_eight(path, &pool, wrong ? sums_wrong_at_5 : sums_right, given);
        stk_shard *sh = tu_shard_open(path);
        ck_assert_uint_eq(stk_shard_verify_records(sh, 0, 8, NULL, NULL), 0);
        ck_assert_int_eq(stk_shard_verify_index(sh, info.index_hash, &e), STK_OK);
        if (wrong) ck_assert_uint_ne(stk_shard_file_hash(sh), info.file_hash);
        else ck_assert_uint_eq(stk_shard_file_hash(sh), info.file_hash);
        stk_shard_close(sh);
    }
    ck_assert_uint_eq(pool_outstanding(&pool), 0);
    pool_fini(&pool);
}
END_TEST

/* A disk that fills up (RLIMIT_FSIZE: writes past it fail with EFBIG):
 * appends start failing with the reason, finish refuses, nothing is left,
 * and every lent value still comes back exactly once. */
START_TEST(failing_disk_gives_everything_back)
{
    char path[TU_PATH];
    tu_scratch_file(path, sizeof path, "efbig", "f.stk");
    pool_t pool;
    pool_init(&pool, 1000, image_bytes(64));
    struct rlimit old, lim;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 2u << 20;
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    /* 3,000 records of 12 KiB from a pool of 1,000: more than the pool, so
     * the appends wait for the I/O thread's failed writes to come back, and
     * more than fit below the limit; fewer bytes than STK_WRITER_LENT_MAX,
     * which the pool (not the writer's queue) keeps from all being queued. */
    stk_writer *w = lend_writer(path, 3000);
    stk_error e;
    int first_err = STK_OK;
    uint64_t calls = 0;
    for (uint64_t i = 0; i < 3000 && first_err == STK_OK; i++, calls++)
        first_err = lend_record(w, &pool, i, NULL, NULL, &e);
    ck_assert_int_eq(first_err, STK_E_IO);
    ck_assert_msg(strstr(e.msg, "f.stk.tmp") && strstr(e.msg, "write"), "message: %s", e.msg);
    /* sticky: the next append fails at once, and gives its value back */
    unsigned b = pool_get(&pool);
    int64_t label = 0;
    stk_value v[2] = {{pool.buf[b], image_bytes(64)}, {&label, 8}};
    ck_assert_int_ne(stk_writer_append_lent(w, v, NULL, pool_done, &pool, &e), STK_OK);
    calls++;
    stk_shard_info info;
    ck_assert_int_ne(stk_writer_finish(w, &info, &e), STK_OK);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    all_given_back(&pool, calls, path);
}
END_TEST

TU_MAIN("stream", {.name = "stream",
                   .timeout = 300,
                   .tests = {lent_and_copied_give_the_same_bytes, buffered_file_system,
                             unaligned_values_are_copied_at_once, abort_gives_everything_back,
                             given_checksum_is_stored_as_given, block_sums_make_the_file_hash,
                             failing_disk_gives_everything_back}})
