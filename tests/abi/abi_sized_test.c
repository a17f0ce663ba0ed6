/* tests/abi/abi_sized_test.c - the size guard of the option structs, from a
 * caller built against this tree's headers: the inline wrappers pass sizeof,
 * the library never writes or reads past the caller's size, a struct from a
 * newer header is
 * accepted only when the fields this library does not know are zero, a size
 * below 0.1.0's is refused, and a zeroed stk_reader_options (no init call) is
 * refused as it always was. Exit status 0 when all hold.
 *
 * Usage: abi_sized_test (STOKER_TEST_TMP: scratch). */
#include "stoker/reader.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                           \
  do {                                                             \
    if (!(cond)) {                                                 \
      fprintf(stderr, "abi_sized_test:%d: %s: ", __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                \
      fputc('\n', stderr);                                         \
      failures++;                                                  \
    }                                                              \
  } while (0)

/* Evaluates cond once (it is often the call under test); stops the test on failure. */
#define REQUIRE(cond, ...)                                         \
  do {                                                             \
    if (!(cond)) {                                                 \
      fprintf(stderr, "abi_sized_test:%d: %s: ", __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                \
      fputc('\n', stderr);                                         \
      exit(1);                                                     \
    }                                                              \
  } while (0)

#define POISON 0xAB
#define SPARE 64

static char dir[1100];

static void make_dataset(void)
{
    const char *t = getenv("STOKER_TEST_TMP");
    char cmd[1200];
    snprintf(dir, sizeof dir, "%s/sized", t && *t ? t : "/tmp/stoker-abi");
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    REQUIRE(system(cmd) == 0, "cannot create %s", dir);
    stk_schema s;
    stk_error err;
    uint64_t shape[3] = {4, 4, 3};
    stk_schema_init(&s);
    REQUIRE(stk_schema_add_tensor(&s, "image", STK_DT_U8, 3, shape, &err) == 0, "%s", err.msg);
    stk_dataset_options o;
    stk_dataset_options_init(&o);
    o.records_per_shard = 8;
    o.force = 1;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &err);
    REQUIRE(dw, "%s", err.msg);
    for (unsigned i = 0; i < 20; i++) {
        uint8_t img[48];
        memset(img, (int)i, sizeof img);
        stk_value v = {img, sizeof img};
        REQUIRE(stk_dataset_writer_append(dw, &v, &err) == 0, "%s", err.msg);
    }
    REQUIRE(stk_dataset_writer_finish(dw, &err) == 0, "%s", err.msg);
}

static int all_poison(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != POISON) return 0;
    return 1;
}

/* An older caller's struct ends where its header's did, and the library
 * neither writes nor reads past that: init and open with this header's size
 * leave the bytes behind the struct alone. (Every struct is still 0.1.0's
 * size, the smallest accepted, so the older caller whose missing fields get
 * the defaults is abi_v0_test's, built against 0.1.0's header.) */
static void struct_end_respected(void)
{
    unsigned char buf[sizeof(stk_reader_options) + SPARE];
    memset(buf, POISON, sizeof buf);
    stk_reader_options *o = (stk_reader_options *)(void *)buf;
    stk_reader_options_init_sized(o, sizeof *o);
    CHECK(all_poison(buf + sizeof *o, SPARE), "init wrote past the caller's %zu bytes", sizeof *o);
    CHECK(o->batch_size == 1 && o->rank == -1 && o->world_size == -1 && o->release_pages == -1, "defaults");
    o->batch_size = 3;
    o->rank = 0;
    o->world_size = 1;
    o->threads = 1;
    stk_error err;
    stk_reader *r = stk_reader_open_sized(dir, o, sizeof *o, sizeof(stk_transform), &err);
    REQUIRE(r, "%s", err.msg);
    const stk_reader_options *in = stk_reader_get_options(r);
    CHECK(in->batch_size == 3 && in->block_cache_bytes == 0,
          "in force: batch_size %u, block_cache_bytes %llx", in->batch_size,
          (unsigned long long)in->block_cache_bytes);
    const stk_batch *b = stk_reader_next(r, &err);
    CHECK(b && b->size == 3 && b->records[2] == 2, "first batch");
    stk_reader_close(r);
}

/* A caller from a newer header: accepted when what this library does not know
 * is zero (its defaults), refused when set. */
static void newer_reader_options(void)
{
    unsigned char buf[sizeof(stk_reader_options) + SPARE];
    memset(buf, POISON, sizeof buf);
    stk_reader_options_init_sized((stk_reader_options *)(void *)buf, sizeof buf);
    CHECK(buf[sizeof(stk_reader_options)] == 0 && buf[sizeof buf - 1] == 0,
          "init leaves unknown fields unset");
    stk_reader_options *o = (stk_reader_options *)(void *)buf;
    o->rank = 0;
    o->world_size = 1;
    stk_error err;
    stk_reader *r = stk_reader_open_sized(dir, o, sizeof buf, sizeof(stk_transform), &err);
    CHECK(r, "a newer caller with unknown fields zero: %s", err.msg);
    stk_reader_close(r);
    buf[sizeof buf - 3] = 1;
    r = stk_reader_open_sized(dir, o, sizeof buf, sizeof(stk_transform), &err);
    CHECK(!r && err.code == STK_E_ARG && strstr(err.msg, "newer"), "a newer caller's unknown field: %s",
          r ? "accepted" : err.msg);
    stk_reader_close(r);
}

static void too_small(void)
{
    stk_reader_options o;
    stk_reader_options_init(&o);
    stk_error err;
    stk_reader *r = stk_reader_open_sized(dir, &o, offsetof(stk_reader_options, block_cache_bytes) - 8,
                                          sizeof(stk_transform), &err);
    CHECK(!r && err.code == STK_E_ARG && strstr(err.msg, "stk_reader_options: size"), "too small: %s",
          r ? "accepted" : err.msg);
    stk_reader_close(r);

    stk_transform t;
    stk_transform_imagenet(&t, 0, 2);
    o.device = STK_DEVICE_HOST;
    o.transform = &t;
    r = stk_reader_open_sized(dir, &o, sizeof o, sizeof t - 4, &err);
    CHECK(!r && err.code == STK_E_ARG && strstr(err.msg, "stk_transform: size"), "transform too small: %s",
          r ? "accepted" : err.msg);
    stk_reader_close(r);
}

/* A reader of batches of 2 over the test dataset, transform t on the host. */
static stk_reader *open_host_reader(const stk_transform *t)
{
    stk_reader_options o;
    stk_reader_options_init(&o);
    o.batch_size = 2;
    o.rank = 0;
    o.world_size = 1;
    o.device = STK_DEVICE_HOST;
    o.transform = t;
    stk_error err;
    stk_reader *r = stk_reader_open(dir, &o, &err);
    REQUIRE(r, "%s", err.msg);
    return r;
}

/* The wrappers pass this header's sizes: the transform reaches the reader. */
static void transform_through_wrappers(void)
{
    unsigned char tb[sizeof(stk_transform) + SPARE];
    memset(tb, POISON, sizeof tb);
    stk_transform_init_sized((stk_transform *)(void *)tb, sizeof(stk_transform));
    CHECK(all_poison(tb + sizeof(stk_transform), SPARE), "transform init wrote past the struct");
    stk_transform t;
    stk_transform_init(&t);
    CHECK(t.field == NULL && t.dtype == STK_DT_F32 && t.crop == STK_CROP_NONE && t.std[3] == 1.0f &&
              t.mean[0] == 0.0f && t.flip_prob == 0.0f,
          "transform defaults");
    stk_error err;
    stk_reader *r = open_host_reader(&t);
    const stk_batch *b = stk_reader_next(r, &err);
    REQUIRE(b && stk_reader_synchronize(r, &err) == 0, "%s", err.msg);
    const float *x = b->fields[0].data;
    CHECK(b->fields[0].dtype == STK_DT_F32 && x[0] == 0.0f && x[48] == 1.0f / 255.0f, "x / 255: %g %g", x[0],
          x[48]);
    stk_reader_close(r);
}

/* A caller from before the remote members (cache_dir ...): the bytes after
 * its struct are not read (poison there would be a pointer), and the remote
 * statistics are written only as far as the caller's struct goes. */
static void before_remote_members(void)
{
    size_t old = offsetof(stk_reader_options, cache_dir);
    unsigned char buf[sizeof(stk_reader_options) + SPARE];
    memset(buf, POISON, sizeof buf);
    stk_reader_options_init_sized((stk_reader_options *)(void *)buf, old);
    CHECK(all_poison(buf + old, sizeof buf - old), "init wrote past the older caller's %zu bytes", old);
    stk_reader_options *o = (stk_reader_options *)(void *)buf;
    o->rank = 0;
    o->world_size = 1;
    stk_error err;
    stk_reader *r = stk_reader_open_sized(dir, o, old, sizeof(stk_transform), &err);
    REQUIRE(r, "an older caller without the remote members: %s", err.msg);
    const stk_reader_options *in = stk_reader_get_options(r);
    CHECK(!in->cache_dir && !in->cache_limit && !in->endpoint && !in->region && !in->profile,
          "remote members defaulted");
    unsigned char sb[sizeof(stk_reader_remote_stats) + SPARE];
    memset(sb, POISON, sizeof sb);
    stk_reader_remote_stats_get_sized(r, (stk_reader_remote_stats *)(void *)sb, 8);
    CHECK(sb[0] == 0 && all_poison(sb + 8, sizeof sb - 8), "remote stats: 8 bytes written, no more");
    stk_reader_remote_stats_get_sized(r, (stk_reader_remote_stats *)(void *)sb, sizeof sb);
    CHECK(sb[sizeof sb - 1] == 0, "remote stats: a newer caller's tail zeroed");
    stk_reader_remote_stats rs;
    stk_reader_remote_stats_get(r, &rs);
    CHECK(!rs.remote && !rs.requests && !rs.gets, "a local dataset has no remote statistics");
    stk_reader_close(r);
}

/* A caller from before the tuning members: its knobs stay as given (tuning
 * resolves off, $STOKER_TUNING unset), and the tuner's statistics and log
 * are written only as far as the caller's structs go. */
static void before_tuning_members(void)
{
    size_t old = offsetof(stk_reader_options, tuning);
    unsigned char buf[sizeof(stk_reader_options) + SPARE];
    memset(buf, POISON, sizeof buf);
    stk_reader_options_init_sized((stk_reader_options *)(void *)buf, old);
    CHECK(all_poison(buf + old, sizeof buf - old), "init wrote past the older caller's %zu bytes", old);
    stk_reader_options *o = (stk_reader_options *)(void *)buf;
    o->rank = 0;
    o->world_size = 1;
    o->threads = 2;
    stk_error err;
    stk_reader *r = stk_reader_open_sized(dir, o, old, sizeof(stk_transform), &err);
    REQUIRE(r, "an older caller without the tuning members: %s", err.msg);
    const char *env = getenv("STOKER_TUNING");
    int on = env && !strcmp(env, "on");
    CHECK(stk_reader_get_options(r)->tuning == (on ? STK_TUNING_ON : STK_TUNING_OFF),
          "an older caller's tuning resolves off (unless $STOKER_TUNING=on)");
    unsigned char sb[sizeof(stk_reader_tune_stats) + SPARE];
    memset(sb, POISON, sizeof sb);
    stk_reader_tune_stats_get_sized(r, (stk_reader_tune_stats *)(void *)sb, 8);
    CHECK(sb[0] == on && sb[4] == 2 && all_poison(sb + 8, sizeof sb - 8),
          "tune stats: 8 bytes written, no more");
    stk_reader_tune_stats_get_sized(r, (stk_reader_tune_stats *)(void *)sb, sizeof sb);
    CHECK(sb[sizeof sb - 1] == 0, "tune stats: a newer caller's tail zeroed");
    stk_reader_tune_event ev[2];
    CHECK(on || stk_reader_tune_log_sized(r, ev, 2, sizeof ev[0]) == 0, "no tuner: an empty log");
    stk_reader_close(r);
}

static void zeroed_reader_options(void)
{
    stk_reader_options o = {0};
    stk_error err;
    stk_reader *r = stk_reader_open(dir, &o, &err);
    CHECK(!r && err.code == STK_E_ARG, "a zeroed stk_reader_options: %s", r ? "accepted" : err.msg);
    stk_reader_close(r);
}

static void dataset_options(void)
{
    unsigned char buf[sizeof(stk_dataset_options) + SPARE];
    memset(buf, POISON, sizeof buf);
    stk_dataset_options_init_sized((stk_dataset_options *)(void *)buf, sizeof(stk_dataset_options));
    CHECK(all_poison(buf + sizeof(stk_dataset_options), SPARE), "dataset options init wrote past the struct");
    stk_schema s;
    uint64_t shape[1] = {2};
    stk_schema_init(&s);
    stk_error err;
    REQUIRE(stk_schema_add_tensor(&s, "x", STK_DT_U8, 1, shape, &err) == 0, "%s", err.msg);
    char d[1200];
    snprintf(d, sizeof d, "%s-w", dir);
    memset(buf, 0, sizeof buf);
    buf[sizeof buf - 1] = 1;
    stk_dataset_writer *dw =
        stk_dataset_writer_create_sized(d, &s, (stk_dataset_options *)(void *)buf, sizeof buf, &err);
    CHECK(!dw && err.code == STK_E_ARG && strstr(err.msg, "newer"), "newer dataset options: %s",
          dw ? "accepted" : err.msg);
    stk_dataset_writer_abort(dw);
    dw = stk_dataset_writer_create_sized(d, &s, (stk_dataset_options *)(void *)buf, 16, &err);
    CHECK(!dw && err.code == STK_E_ARG, "16-byte dataset options: %s", dw ? "accepted" : err.msg);
    stk_dataset_writer_abort(dw);
}

/* The crop box: written only as far as the caller's struct goes, a newer
 * caller's tail zeroed; the transform read as far as the caller's goes
 * (0.1.0's size is served, its defaults for the rest), a newer one with
 * fields set refused. */
static void crop_box_sized(void)
{
    stk_transform t;
    stk_transform_imagenet(&t, 1, 2);
    stk_error err;
    stk_reader *r = open_host_reader(&t);
    stk_crop_box whole;
    REQUIRE(stk_reader_crop_box(r, 0, 1, 0, 0, &whole, &err) == 0, "%s", err.msg);
    CHECK(whole.w > 0 && whole.w <= 4 && whole.h > 0 && whole.h <= 4, "box %g x %g", whole.w, whole.h);
    unsigned char bb[sizeof(stk_crop_box) + SPARE];
    memset(bb, POISON, sizeof bb);
    REQUIRE(stk_reader_crop_box_sized(r, 0, 1, 0, 0, (stk_crop_box *)(void *)bb, 8, &err) == 0, "%s",
            err.msg);
    CHECK(memcmp(bb, &whole, 8) == 0 && all_poison(bb + 8, sizeof bb - 8),
          "crop box: 8 bytes written, no more");
    REQUIRE(stk_reader_crop_box_sized(r, 0, 1, 0, 0, (stk_crop_box *)(void *)bb, sizeof bb, &err) == 0, "%s",
            err.msg);
    CHECK(memcmp(bb, &whole, offsetof(stk_crop_box, flip) + sizeof whole.flip) == 0 && bb[sizeof bb - 1] == 0,
          "crop box: a newer caller's tail zeroed");
    stk_reader_close(r);

    stk_crop_box a, b;
    REQUIRE(stk_transform_crop_box(&t, 0, 5, 1, 3, 40, 60, &a, &err) == 0, "%s", err.msg);
    REQUIRE(stk_transform_crop_box_sized(&t, offsetof(stk_transform, flip_prob) + sizeof t.flip_prob, 0, 5, 1,
                                         3, 40, 60, &b, sizeof b, &err) == 0,
            "%s", err.msg);
    CHECK(memcmp(&a, &b, sizeof a) == 0, "crop box: a transform of 0.1.0's size draws the same box");
    unsigned char tb[sizeof(stk_transform) + SPARE];
    memset(tb, 0, sizeof tb);
    memcpy(tb, &t, sizeof t);
    REQUIRE(stk_transform_crop_box_sized((stk_transform *)(void *)tb, sizeof tb, 0, 5, 1, 3, 40, 60, &b,
                                         sizeof b, &err) == 0,
            "%s", err.msg);
    CHECK(memcmp(&a, &b, sizeof a) == 0, "crop box: a newer zero tail draws the same box");
    tb[sizeof tb - 1] = 1;
    CHECK(stk_transform_crop_box_sized((stk_transform *)(void *)tb, sizeof tb, 0, 5, 1, 3, 40, 60, &b,
                                       sizeof b, &err) == STK_E_ARG &&
              strstr(err.msg, "newer"),
          "crop box: a newer transform with fields set: %s", err.msg);
}

int main(void)
{
    make_dataset();
    struct_end_respected();
    newer_reader_options();
    too_small();
    transform_through_wrappers();
    before_remote_members();
    before_tuning_members();
    zeroed_reader_options();
    dataset_options();
    crop_box_sized();
    if (failures) {
        fprintf(stderr, "abi_sized_test: %d failures\n", failures);
        return 1;
    }
    printf("abi_sized_test: older, newer and zeroed callers are handled\n");
    return 0;
}
