/* tests/abi/abi_v0_test.c - a program built against stoker 0.1.0's public
 * headers (tests/abi/v0.1.0, copied from the 0.1.0 tree and never edited),
 * linked with this tree's libstoker, shared or static: what a trainer built
 * before the option structs had a size guard gets from a newer library.
 *
 * It calls the 0.1.0 symbols (stk_reader_options_init, stk_reader_open,
 * stk_reader_open_dataset, stk_transform_imagenet, stk_dataset_writer_create)
 * with 0.1.0 structs and checks it is served exactly: a dataset written with
 * 0.1.0 dataset options (shard size, prefix, classes), then a shardgen
 * dataset read with 0.1.0 reader options (batch sizes, records in the order
 * spec/ORDERS.md gives, values against the mapped shards, the options in
 * force, save/restore), and with a 0.1.0 transform on the host backend
 * (values against the formula). Exit status 0 when all hold.
 *
 * Usage: abi_v0_test (STOKER_TOOLS: the built tools; STOKER_TEST_TMP: scratch). */
#include "stoker/reader.h" /* 0.1.0's, from tests/abi/v0.1.0 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef STK_VERSION_STRING
#  if STK_VERSION_MAJOR != 0 || STK_VERSION_MINOR != 1 || STK_VERSION_PATCH != 0
#    error "abi_v0_test must be compiled against the 0.1.0 headers in tests/abi/v0.1.0"
#  endif
#endif

static int failures;

#define CHECK(cond, ...)                                        \
  do {                                                          \
    if (!(cond)) {                                              \
      fprintf(stderr, "abi_v0_test:%d: %s: ", __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                             \
      fputc('\n', stderr);                                      \
      failures++;                                               \
    }                                                           \
  } while (0)

/* Evaluates cond once (it is often the call under test); stops the test on failure. */
#define REQUIRE(cond, ...)                                      \
  do {                                                          \
    if (!(cond)) {                                              \
      fprintf(stderr, "abi_v0_test:%d: %s: ", __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                             \
      fputc('\n', stderr);                                      \
      exit(1);                                                  \
    }                                                           \
  } while (0)

static char tmp[1024];

static void path_in_tmp(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", tmp, name); }

/* ----------------------------------------------- 0.1.0 dataset options */

static void write_with_v0_dataset_options(void)
{
    stk_schema s;
    stk_error err;
    uint64_t shape[1] = {4};
    stk_schema_init(&s);
    REQUIRE(stk_schema_add_tensor(&s, "x", STK_DT_U8, 1, shape, &err) == 0, "%s", err.msg);
    REQUIRE(stk_schema_add_tensor(&s, "label", STK_DT_I64, 0, NULL, &err) == 0, "%s", err.msg);
    static const char *const classes[] = {"cat", "dog", "eel"};
    stk_dataset_options o;
    memset(&o, 0, sizeof o); /* 0.1.0 had no init call: zero means defaults */
    o.records_per_shard = 7;
    o.prefix = "legacy";
    o.force = 1;
    o.nclasses = 3;
    o.classes = classes;
    o.pack_json = "{\"tool\":\"abi_v0_test\"}";
    char dir[1100];
    path_in_tmp(dir, sizeof dir, "written");
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &err);
    REQUIRE(dw, "stk_dataset_writer_create: %s", err.msg);
    for (uint64_t i = 0; i < 30; i++) {
        uint8_t x[4] = {(uint8_t)i, (uint8_t)(i * 3), (uint8_t)(i * 7), 0xA5};
        int64_t label = (int64_t)(i % 3);
        stk_value v[2] = {{x, 4}, {&label, 8}};
        REQUIRE(stk_dataset_writer_append(dw, v, &err) == 0, "append %llu: %s", (unsigned long long)i,
                err.msg);
    }
    REQUIRE(stk_dataset_writer_finish(dw, &err) == 0, "finish: %s", err.msg);

    stk_manifest *m = stk_manifest_load(dir, &err);
    REQUIRE(m, "manifest: %s", err.msg);
    CHECK(m->nshards == 5, "%zu shards, want 5 (records_per_shard 7 read as something else?)", m->nshards);
    for (size_t i = 0; i < m->nshards; i++) {
        char want[32];
        snprintf(want, sizeof want, "legacy-%05zu.stk", i);
        CHECK(strcmp(m->shards[i].path, want) == 0, "shard %zu is %s, want %s", i, m->shards[i].path, want);
        CHECK(m->shards[i].records == (i < 4 ? 7u : 2u), "shard %zu: %llu records", i,
              (unsigned long long)m->shards[i].records);
    }
    CHECK(m->nclasses == 3 && strcmp(m->classes[2], "eel") == 0, "classes not stored");
    CHECK(strstr(m->pack_json, "abi_v0_test") != NULL, "pack_json: %s", m->pack_json);
    stk_manifest_free(m);
}

/* ------------------------------------------------ 0.1.0 reader options */

static void make_shardgen_dataset(char *dir, size_t cap)
{
    const char *tools = getenv("STOKER_TOOLS");
    REQUIRE(tools && *tools, "STOKER_TOOLS is not set");
    snprintf(dir, cap, "%s/gen", tmp);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s/shardgen' -q --force -n 53 --size 8 --records-per-shard 10 --seed 3 '%s'",
             tools, dir);
    REQUIRE(system(cmd) == 0, "%s failed", cmd);
}

static void read_with_v0_options(const char *dir)
{
    stk_error err;
    /* The struct with bytes behind it that are not stoker's: a newer library
     * must neither write nor read them (it would take them for fields a
     * later release added, instead of their defaults). */
    static struct {
        stk_reader_options o;
        unsigned char after[256];
    } mem;
    memset(&mem, 0xAB, sizeof mem);
    stk_reader_options *o = &mem.o;
    stk_reader_options_init(o); /* the 0.1.0 symbol: writes 0.1.0's layout */
    for (size_t i = 0; i < sizeof mem.after; i++)
        CHECK(mem.after[i] == 0xAB, "init wrote past the struct: byte %zu", i);
    o->batch_size = 4;
    o->order = STK_ORDER_SHUFFLE;
    o->seed = 7;
    o->rank = 0;
    o->world_size = 1;
    o->threads = 2;
    o->prefetch = 3;
    o->tail = STK_TAIL_PARTIAL;
    o->verify = STK_VERIFY_ALWAYS;
    o->fields = "image,label";
    stk_reader *r = stk_reader_open(dir, o, &err);
    REQUIRE(r, "stk_reader_open: %s", err.msg);

    const stk_reader_options *in = stk_reader_get_options(r); /* read through 0.1.0's layout */
    CHECK(in->batch_size == 4 && in->order == STK_ORDER_SHUFFLE && in->seed == 7 && in->rank == 0 &&
              in->world_size == 1 && in->threads == 2 && in->prefetch == 3 && in->tail == STK_TAIL_PARTIAL &&
              in->verify == STK_VERIFY_ALWAYS && in->release_pages == -1 && in->device == STK_DEVICE_NONE,
          "options in force differ from the ones given");
    CHECK(in->fields && strcmp(in->fields, "image,label") == 0, "fields in force: %s",
          in->fields ? in->fields : "NULL");

    const stk_dataset *ds = stk_reader_dataset(r);
    const uint64_t n = stk_dataset_records(ds);
    CHECK(n == 53, "%llu records", (unsigned long long)n);
    CHECK(stk_reader_batches_per_epoch(r) == 14, "%llu batches per epoch, want 14 (53 / 4, partial tail)",
          (unsigned long long)stk_reader_batches_per_epoch(r));
    stk_reader_set_epochs(r, 2);
    uint64_t pos = 0, seen = 0, batches = 0;
    stk_reader_state mid;
    const stk_batch *b;
    while ((b = stk_reader_next(r, &err))) {
        uint32_t want = b->index == 13 ? 1 : 4;
        CHECK(b->size == want, "epoch %llu batch %llu: %u records, want %u", (unsigned long long)b->epoch,
              (unsigned long long)b->index, b->size, want);
        CHECK(b->nfields == 2 && strcmp(b->fields[0].name, "image") == 0 &&
                  strcmp(b->fields[1].name, "label") == 0,
              "fields of the batch");
        CHECK(b->fields[0].ndim == 4 && b->fields[0].shape[0] == b->size && b->fields[0].shape[1] == 8 &&
                  b->fields[0].shape[3] == 3,
              "image shape");
        for (uint32_t i = 0; i < b->size; i++, pos++) {
            uint64_t e = pos / n, p = pos % n;
            uint64_t want_rec = stk_order_record(STK_ORDER_SHUFFLE, n, 7, e, 0, 0, p);
            CHECK(b->records[i] == want_rec, "position %llu: record %llu, want %llu", (unsigned long long)pos,
                  (unsigned long long)b->records[i], (unsigned long long)want_rec);
            const void *img, *lab;
            uint64_t isz, lsz;
            REQUIRE(stk_dataset_value(ds, 0, b->records[i], &img, &isz, &err) == 0, "%s", err.msg);
            REQUIRE(stk_dataset_value(ds, 1, b->records[i], &lab, &lsz, &err) == 0, "%s", err.msg);
            CHECK(memcmp((const uint8_t *)b->fields[0].data + (size_t)i * isz, img, isz) == 0,
                  "record %llu: image bytes differ", (unsigned long long)b->records[i]);
            CHECK(memcmp((const uint8_t *)b->fields[1].data + (size_t)i * 8, lab, 8) == 0,
                  "record %llu: label differs", (unsigned long long)b->records[i]);
        }
        seen += b->size;
        if (++batches == 5) stk_reader_save(r, &mid);
    }
    CHECK(err.code == STK_OK, "stream ended with %s", err.msg);
    CHECK(batches == 28 && seen == 106, "%llu batches / %llu records over 2 epochs, want 28 / 106",
          (unsigned long long)batches, (unsigned long long)seen);
    stk_reader_stats st;
    stk_reader_stats_get(r, &st);
    CHECK(st.batches == 28 && st.samples == 106 && st.threads == 2 && st.prefetch == 3 && st.verified == 106,
          "stats: %llu batches, %llu samples, %u threads, %u prefetch, %llu verified",
          (unsigned long long)st.batches, (unsigned long long)st.samples, st.threads, st.prefetch,
          (unsigned long long)st.verified);

    /* Resume: the state saved after batch 5 leads to batch 5 again. */
    char json[512];
    size_t len = stk_reader_state_format(&mid, json, sizeof json);
    stk_reader_state back;
    REQUIRE(stk_reader_state_parse(json, len, &back, &err) == 0, "%s", err.msg);
    REQUIRE(stk_reader_restore(r, &back, &err) == 0, "restore: %s", err.msg);
    b = stk_reader_next(r, &err);
    REQUIRE(b, "next after restore: %s", err.msg);
    CHECK(b->epoch == 0 && b->index == 5 &&
              b->records[0] == stk_order_record(STK_ORDER_SHUFFLE, n, 7, 0, 0, 0, 20),
          "after restore: epoch %llu batch %llu", (unsigned long long)b->epoch, (unsigned long long)b->index);
    stk_reader_close(r);
}

/* ------------------------------------------------ 0.1.0 transform */

static void transform_with_v0_struct(const char *dir)
{
    stk_error err;
    stk_dataset *ds = stk_dataset_open(dir, &err);
    REQUIRE(ds, "stk_dataset_open: %s", err.msg);
    stk_transform t;
    stk_transform_imagenet(&t, 0, 4); /* the 0.1.0 symbol: eval, centre 4 x 4 of 8 x 8 */
    t.field = "image";
    t.layout = STK_IMAGE_NCHW;
    stk_reader_options o;
    stk_reader_options_init(&o);
    o.batch_size = 5;
    o.rank = 0;
    o.world_size = 1;
    o.threads = 1;
    o.device = STK_DEVICE_HOST;
    o.transform = &t;
    stk_reader *r = stk_reader_open_dataset(ds, &o, &err);
    REQUIRE(r, "stk_reader_open_dataset with a transform: %s", err.msg);
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    for (int k = 0; k < 3; k++) {
        const stk_batch *b = stk_reader_next(r, &err);
        REQUIRE(b, "next: %s", err.msg);
        REQUIRE(stk_reader_synchronize(r, &err) == 0, "%s", err.msg);
        CHECK(b->on_device, "a host-backend batch is on the device");
        const stk_batch_field *f = &b->fields[0];
        CHECK(strcmp(f->name, "image") == 0 && f->dtype == STK_DT_F32 && f->ndim == 4 && f->shape[0] == 5 &&
                  f->shape[1] == 3 && f->shape[2] == 4 && f->shape[3] == 4,
              "transformed image: dtype %d, shape [%llu, %llu, %llu, %llu]", f->dtype,
              (unsigned long long)f->shape[0], (unsigned long long)f->shape[1],
              (unsigned long long)f->shape[2], (unsigned long long)f->shape[3]);
        const float *out = f->data;
        for (uint32_t i = 0; i < b->size; i++) {
            const void *img;
            uint64_t isz;
            REQUIRE(stk_dataset_value(ds, 0, b->records[i], &img, &isz, &err) == 0, "%s", err.msg);
            const uint8_t *px = img;
            for (int c = 0; c < 3; c++)
                for (int y = 0; y < 4; y++)
                    for (int x = 0; x < 4; x++) {
                        float want = (px[((y + 2) * 8 + (x + 2)) * 3 + c] / 255.0f - mean[c]) / sd[c];
                        float got = out[(((size_t)i * 3 + c) * 4 + y) * 4 + x];
                        CHECK(fabsf(got - want) < 1e-4f, "record %llu c%d y%d x%d: %g, want %g",
                              (unsigned long long)b->records[i], c, y, x, got, want);
                    }
        }
    }
    stk_reader_close(r);
    stk_dataset_close(ds);
}

int main(void)
{
    const char *t = getenv("STOKER_TEST_TMP");
    snprintf(tmp, sizeof tmp, "%s", t && *t ? t : "/tmp/stoker-abi");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", tmp);
    REQUIRE(system(cmd) == 0, "cannot create %s", tmp);

    write_with_v0_dataset_options();
    char dir[1100];
    make_shardgen_dataset(dir, sizeof dir);
    read_with_v0_options(dir);
    transform_with_v0_struct(dir);
    if (failures) {
        fprintf(stderr, "abi_v0_test: %d failures\n", failures);
        return 1;
    }
    printf("abi_v0_test: a 0.1.0 caller is served correctly\n");
    return 0;
}
