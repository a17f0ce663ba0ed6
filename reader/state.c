/* reader/state.c - where a reader stands, as a few integers and as one line
 * of JSON (spec/ORDERS.md, "State"); and the verdict line of the statistics.
 *
 * The parser takes untrusted bytes (a state file from a crashed job, a
 * checkpoint from somewhere else): strict like the manifest's, every key
 * required once, nothing else accepted. tests/fuzz/fuzz_state.c runs it. */
#include "reader_impl.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const order_names[] = {"sequential", "shuffle", "quasi"};
static const char *const tail_names[] = {"pad", "drop", "partial"};

void stk_reader_save(const stk_reader *r, stk_reader_state *st)
{
    uint64_t e, b;
    stk_reader_position(r, &e, &b);
    memset(st, 0, sizeof *st);
    st->fingerprint = stk_dataset_manifest(r->ds)->fingerprint;
    st->order = r->o.order;
    st->seed = r->o.seed;
    st->global_batch = r->G;
    st->tail = r->o.tail;
    st->quasi_block_records = r->o.order == STK_ORDER_QUASI ? r->K : 0;
    st->quasi_window = r->o.order == STK_ORDER_QUASI ? r->Wq : 0;
    st->epoch = e;
    st->batch = b;
}

int stk_reader_restore(stk_reader *r, const stk_reader_state *st, stk_error *err)
{
    stk_reader_state me;
    stk_reader_save(r, &me);
    const char *what = NULL;
    if (st->fingerprint != me.fingerprint) what = "fingerprint (another dataset)";
    else if (st->order != me.order) what = "order";
    else if (st->seed != me.seed) what = "seed";
    else if (st->global_batch != me.global_batch) what = "global batch (batch_size x world_size)";
    else if (st->tail != me.tail) what = "tail";
    else if (st->quasi_block_records != me.quasi_block_records || st->quasi_window != me.quasi_window)
        what = "quasi block or window";
    if (what) return stk_error_set(err, STK_E_ARG, "state does not belong to this reader: %s differs", what);
    return stk_reader_seek(r, st->epoch, st->batch, err);
}

size_t stk_reader_state_format(const stk_reader_state *st, char *buf, size_t cap)
{
    const char *order = st->order >= 0 && st->order <= 2 ? order_names[st->order] : "?";
    const char *tail = st->tail >= 0 && st->tail <= 2 ? tail_names[st->tail] : "?";
    int n = snprintf(buf, cap,
                     "{\"stoker_reader_state\":1,\"fingerprint\":\"%016" PRIx64 "\",\"order\":\"%s\","
                     "\"seed\":\"%" PRIu64 "\",\"global_batch\":%" PRIu64 ",\"tail\":\"%s\","
                     "\"quasi_block_records\":%" PRIu64 ",\"quasi_window\":%" PRIu32 ","
                     "\"epoch\":%" PRIu64 ",\"batch\":%" PRIu64 "}",
                     st->fingerprint, order, st->seed, st->global_batch, tail, st->quasi_block_records,
                     st->quasi_window, st->epoch, st->batch);
    return n < 0 ? 0 : (size_t)n;
}

static int name_index(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

/* A JSON integer in [0, max] (jansson integers are signed 64-bit). */
static int get_uint(json_t *o, const char *key, uint64_t max, uint64_t *out, stk_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max)
        return stk_error_set(err, STK_E_FORMAT, "state: \"%s\" must be an integer in 0..%" PRIu64, key, max);
    *out = (uint64_t)json_integer_value(v);
    return STK_OK;
}

/* A string of decimal (base 10) or hex (base 16) digits, the full u64 range. */
static int get_u64_text(json_t *o, const char *key, int base, size_t maxlen, uint64_t *out, stk_error *err)
{
    const char *s = json_string_value(json_object_get(o, key));
    size_t len = s ? strlen(s) : 0;
    int ok = len > 0 && len <= maxlen && (base == 10 || len == maxlen); /* hex: all 16 digits */
    for (size_t i = 0; ok && i < len; i++)
        ok = base == 10 ? (s[i] >= '0' && s[i] <= '9')
                        : ((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'));
    uint64_t v = 0;
    for (size_t i = 0; ok && i < len; i++) {
        unsigned d = s[i] <= '9' ? (unsigned)(s[i] - '0') : (unsigned)(s[i] - 'a' + 10);
        if (v > (UINT64_MAX - d) / (unsigned)base) ok = 0;
        v = v * (unsigned)base + d;
    }
    if (!ok)
        return stk_error_set(err, STK_E_FORMAT, "state: \"%s\" must be a string of %s digits", key,
                             base == 10 ? "decimal (up to 2^64-1)" : "16 lower-case hex");
    *out = v;
    return STK_OK;
}

static int get_name(json_t *o, const char *key, const char *const *names, int *out, stk_error *err)
{
    const char *s = json_string_value(json_object_get(o, key));
    int i = s ? name_index(s, names, 3) : -1;
    if (i < 0)
        return stk_error_set(err, STK_E_FORMAT, "state: \"%s\" must be one of \"%s\", \"%s\", \"%s\"", key,
                             names[0], names[1], names[2]);
    *out = i;
    return STK_OK;
}

static int parse_obj(json_t *o, stk_reader_state *st, stk_error *err)
{
    static const char *const keys[] = {
        "stoker_reader_state", "fingerprint",  "order", "seed", "global_batch", "tail",
        "quasi_block_records", "quasi_window", "epoch", "batch"};
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        size_t i = 0;
        while (i < sizeof keys / sizeof *keys && strcmp(k, keys[i]) != 0) i++;
        if (i == sizeof keys / sizeof *keys)
            return stk_error_set(err, STK_E_FORMAT, "state: unknown key \"%.64s\"", k);
    }
    uint64_t version, window;
    int rc;
    if ((rc = get_uint(o, "stoker_reader_state", UINT32_MAX, &version, err))) return rc;
    if (version != 1)
        return stk_error_set(err, STK_E_VERSION,
                             "state: unsupported version %" PRIu64 " (this build reads 1)", version);
    if ((rc = get_u64_text(o, "fingerprint", 16, 16, &st->fingerprint, err)) ||
        (rc = get_name(o, "order", order_names, &st->order, err)) ||
        (rc = get_u64_text(o, "seed", 10, 20, &st->seed, err)) ||
        (rc = get_uint(o, "global_batch", INT64_MAX, &st->global_batch, err)) ||
        (rc = get_name(o, "tail", tail_names, &st->tail, err)) ||
        (rc = get_uint(o, "quasi_block_records", INT64_MAX, &st->quasi_block_records, err)) ||
        (rc = get_uint(o, "quasi_window", UINT32_MAX, &window, err)) ||
        (rc = get_uint(o, "epoch", INT64_MAX, &st->epoch, err)) ||
        (rc = get_uint(o, "batch", INT64_MAX, &st->batch, err)))
        return rc;
    st->quasi_window = (uint32_t)window;
    if (st->global_batch == 0)
        return stk_error_set(err, STK_E_FORMAT, "state: \"global_batch\" must be at least 1");
    return STK_OK;
}

int stk_reader_state_parse(const char *text, size_t len, stk_reader_state *st, stk_error *err)
{
    if (!text || !st) return stk_error_set(err, STK_E_ARG, "stk_reader_state_parse: NULL argument");
    json_error_t je;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) return stk_error_set(err, STK_E_FORMAT, "state: not JSON: %s (line %d)", je.text, je.line);
    int rc = json_is_object(o) ? STK_OK : stk_error_set(err, STK_E_FORMAT, "state: not a JSON object");
    stk_reader_state tmp;
    memset(&tmp, 0, sizeof tmp);
    if (!rc) rc = parse_obj(o, &tmp, err);
    json_decref(o);
    if (!rc) *st = tmp;
    return rc;
}

size_t stk_reader_sizeof(const char *type)
{
    static const struct {
        const char *name;
        size_t size;
    } t[] = {{"stk_reader_options", sizeof(stk_reader_options)},
             {"stk_batch", sizeof(stk_batch)},
             {"stk_batch_field", sizeof(stk_batch_field)},
             {"stk_reader_state", sizeof(stk_reader_state)},
             {"stk_reader_stats", sizeof(stk_reader_stats)},
             {"stk_reader_io_stats", sizeof(stk_reader_io_stats)},
             {"stk_transform", sizeof(stk_transform)},
             {"stk_error", sizeof(stk_error)},
             {"stk_value", sizeof(stk_value)},
             {"stk_dataset_options", sizeof(stk_dataset_options)}};
    for (size_t i = 0; type && i < sizeof t / sizeof *t; i++)
        if (strcmp(type, t[i].name) == 0) return t[i].size;
    return 0;
}

/* ------------------------------------------------------------- verdict */

int stk_reader_verdict(const stk_reader_stats *s, char *buf, size_t cap)
{
    if (!s->batches || s->wall_s <= 0) return snprintf(buf, cap, "no batches read yet");
    double wait = s->wait_s / s->wall_s, busy = s->busy_s / s->wall_s; /* busy: in threads */
    int pct = (int)(wait * 100 + 0.5);
    if (wait < 0.10)
        return snprintf(buf, cap, "not input-bound: %d%% of wall time spent waiting for data (threads=%u)",
                        pct, s->threads);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (busy >= 0.6 * s->threads && (long)s->threads < cpus)
        return snprintf(buf, cap,
                        "input-bound: %d%% of wall time spent waiting for data (threads=%u; try %ld)", pct,
                        s->threads, (long)s->threads * 2 < cpus ? (long)s->threads * 2 : cpus);
    if (busy >= 0.6 * s->threads)
        return snprintf(
            buf, cap,
            "input-bound: %d%% of wall time spent waiting for data (threads=%u, all %ld cores busy: "
            "read fewer fields or give the loader more cores)",
            pct, s->threads, cpus);
    return snprintf(buf, cap,
                    "input-bound: %d%% of wall time spent waiting for data (threads=%u, workers %d%% busy: "
                    "storage is the limit; try a deeper prefetch or faster storage)",
                    pct, s->threads, (int)(busy / s->threads * 100 + 0.5));
}
