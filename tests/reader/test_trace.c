/* tests/reader/test_trace.c - the timeline (trace=PATH, $STOKER_TRACE): the
 * file written at close is Chrome trace-event JSON whose events match the
 * batches read: one "next" per batch on the consumer's thread, the workers'
 * "gather" covering every batch, named threads, per-thread monotonic
 * timestamps, counters; off by default. */
#include "testutil.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

enum { N = 300, PER = 64, BATCH = 8, THREADS = 2 };

/* One epoch (the stream goes on over epochs): its batches. */
static void read_all(stk_reader *r, uint64_t *batches)
{
    stk_error err;
    const uint64_t want = (N + BATCH - 1) / BATCH; /* one rank: a partial tail */
    for (*batches = 0; *batches < want; ++*batches) {
        const stk_batch *b = stk_reader_next(r, &err);
        ck_assert_msg(b != NULL, "%s", err.msg);
        ck_assert_uint_eq(b->epoch, 0);
    }
}

static json_t *load(const char *path)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    ck_assert_msg(root != NULL, "%s: not JSON: line %d: %s", path, je.line, je.text);
    return root;
}

/* The structure of the trace of a reader that returned `batches` batches. */
static void check_trace(const char *path, uint64_t batches)
{
    json_t *root = load(path);
    json_t *ev = json_object_get(root, "traceEvents");
    ck_assert(json_is_array(ev));
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(root, "otherData"), "dropped_events")), 0);
    uint64_t next = 0, gather_parts = 0, counters = 0;
    unsigned named = 0, consumer_tid = 0;
    double last_ts[64];
    for (unsigned i = 0; i < 64; i++) last_ts[i] = -1;
    int seen_batch[N / BATCH + 2] = {0};
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *name = json_string_value(json_object_get(e, "name"));
        ck_assert_ptr_nonnull(ph);
        ck_assert_ptr_nonnull(name);
        ck_assert(json_is_integer(json_object_get(e, "pid")));
        ck_assert(json_is_integer(json_object_get(e, "tid")));
        json_int_t tid = json_integer_value(json_object_get(e, "tid"));
        ck_assert_int_lt(tid, 64);
        if (!strcmp(ph, "M")) {
            if (!strcmp(name, "thread_name")) {
                const char *tn = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
                ck_assert_ptr_nonnull(tn);
                ck_assert_msg(!strncmp(tn, "stoker ", 7), "thread name '%s'", tn);
                if (strstr(tn, "consumer")) consumer_tid = (unsigned)tid;
                named++;
            }
            continue;
        }
        double ts = json_number_value(json_object_get(e, "ts"));
        ck_assert(json_is_number(json_object_get(e, "ts")));
        ck_assert_msg(ts >= last_ts[tid], "thread %d: ts %.3f after %.3f", (int)tid, ts, last_ts[tid]);
        last_ts[tid] = ts;
        if (!strcmp(ph, "C")) {
            ck_assert(json_is_number(json_object_get(json_object_get(e, "args"), "value")));
            counters++;
            continue;
        }
        ck_assert_str_eq(ph, "X");
        ck_assert(json_number_value(json_object_get(e, "dur")) >= 0);
        json_int_t seq = json_integer_value(json_object_get(json_object_get(e, "args"), "batch"));
        if (!strcmp(name, "next")) {
            ck_assert_uint_eq((unsigned)tid, consumer_tid);
            ck_assert_int_eq(seq, (json_int_t)next); /* in order, one per batch */
            next++;
        } else if (!strcmp(name, "gather")) {
            ck_assert_uint_ne((unsigned)tid, consumer_tid);
            if (seq < (json_int_t)(sizeof seen_batch / sizeof *seen_batch)) seen_batch[seq] = 1;
            gather_parts++;
        } else {
            ck_assert_msg(!strcmp(name, "wait") || !strcmp(name, "begin") || !strcmp(name, "read wait"),
                          "unknown stage '%s'", name);
        }
    }
    ck_assert_uint_eq(named, THREADS + 2); /* consumer, workers, copy thread */
    ck_assert_uint_ne(consumer_tid, 0);
    ck_assert_uint_eq(next, batches);
    ck_assert_uint_ge(gather_parts, batches);
    for (uint64_t b = 0; b < batches; b++)
        ck_assert_msg(seen_batch[b], "batch %llu: no gather", (unsigned long long)b);
    ck_assert_uint_eq(counters, 2 * batches); /* batches ready, bytes in flight */
    json_decref(root);
}

START_TEST(trace_option)
{
    char dir[512], path[600];
    tu_scratch_std_dataset(dir, sizeof dir, "trace_option", 7, N, PER);
    tu_join(path, sizeof path, dir, "trace.json");
    stk_reader_options o = tu_reader_options(BATCH, STK_ORDER_SHUFFLE);
    o.threads = THREADS;
    o.trace = path;
    stk_reader *r = tu_open_reader(dir, &o);
    ck_assert_str_eq(stk_reader_get_options(r)->trace, path);
    uint64_t batches;
    read_all(r, &batches);
    ck_assert_uint_eq(batches, (N + BATCH - 1) / BATCH);
    stk_reader_close(r);
    check_trace(path, batches);
}
END_TEST

START_TEST(trace_env_and_off)
{
    char dir[512], path[600];
    tu_scratch_std_dataset(dir, sizeof dir, "trace_env", 9, N, PER);
    tu_join(path, sizeof path, dir, "env.json");
    stk_reader_options o = tu_reader_options(BATCH, STK_ORDER_SEQUENTIAL);
    o.threads = THREADS;
    /* off by default: no file */
    stk_reader *r = tu_open_reader(dir, &o);
    ck_assert_ptr_null(stk_reader_get_options(r)->trace);
    uint64_t batches;
    read_all(r, &batches);
    stk_reader_close(r);
    ck_assert(!tu_exists(path));
    setenv("STOKER_TRACE", path, 1);
    r = tu_open_reader(dir, &o);
    unsetenv("STOKER_TRACE");
    read_all(r, &batches);
    stk_reader_close(r);
    check_trace(path, batches);
    /* an unwritable path fails the open, naming it */
    char bad[700];
    tu_join(bad, sizeof bad, dir, "no/such/dir/t.json");
    o.trace = bad;
    stk_error err;
    ck_assert_ptr_null(stk_reader_open(dir, &o, &err));
    ck_assert_int_eq(err.code, STK_E_IO);
    ck_assert_msg(strstr(err.msg, "no/such/dir") != NULL, "%s", err.msg);
}
END_TEST

TU_MAIN("trace", {.name = "trace", .tests = {trace_option, trace_env_and_off}})
