/* reader/state.c - where a reader stands, as a few integers and as one line
 * of JSON (spec/ORDERS.md, "State"); the crop box a record gets; and the
 * verdict line of the statistics.
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
    st->fingerprint = r->mix ? stk__mix_fingerprint(r) : stk_dataset_manifest(r->ds)->fingerprint;
    st->order = r->o.order;
    st->seed = r->o.seed;
    st->global_batch = r->G;
    st->tail = r->o.tail;
    st->quasi_block_records = r->o.order == STK_ORDER_QUASI ? r->K : 0;
    st->quasi_window = r->o.order == STK_ORDER_QUASI ? r->Wq : 0;
    if (r->mix) /* a mixture: the window of its quasi sources (their blocks are theirs, in the sources) */
        for (uint32_t s = 0; s < r->mix->S; s++)
            if (r->mix->src[s].order == STK_ORDER_QUASI) st->quasi_window = r->mix->src[s].W;
    st->epoch = e;
    st->batch = b;
}

int stk_reader_restore(stk_reader *r, const stk_reader_state *st, stk_error *err)
{
    stk_reader_state me;
    stk_reader_save(r, &me);
    const char *what = NULL;
    if (st->fingerprint != me.fingerprint)
        what = r->mix ? "fingerprint (another mixture: its sources, their weights or the epoch size; "
                        "stk_reader_restore_text says which)"
                      : "fingerprint (another dataset)";
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

/* A mixture's source in a state (version 2). */
typedef struct {
    uint64_t fingerprint, records, per_epoch, K;
    int kind, order;
    double value;
} src_state;

static const char *const kind_names[] = {"weight", "repeat", "choose"};

static int parse_source(json_t *o, unsigned i, src_state *x, stk_error *err)
{
    static const char *const keys[] = {"fingerprint",         "records",  "kind", "value", "order",
                                       "quasi_block_records", "per_epoch"};
    const char *k;
    json_t *v;
    if (!json_is_object(o)) return stk_error_set(err, STK_E_FORMAT, "state: source %u is not an object", i);
    json_object_foreach(o, k, v)
    {
        size_t j = 0;
        while (j < sizeof keys / sizeof *keys && strcmp(k, keys[j]) != 0) j++;
        if (j == sizeof keys / sizeof *keys)
            return stk_error_set(err, STK_E_FORMAT, "state: source %u: unknown key \"%.64s\"", i, k);
    }
    int rc;
    json_t *val = json_object_get(o, "value");
    if ((rc = get_u64_text(o, "fingerprint", 16, 16, &x->fingerprint, err)) ||
        (rc = get_uint(o, "records", INT64_MAX, &x->records, err)) ||
        (rc = get_name(o, "kind", kind_names, &x->kind, err)) ||
        (rc = get_name(o, "order", order_names, &x->order, err)) ||
        (rc = get_uint(o, "quasi_block_records", INT64_MAX, &x->K, err)) ||
        (rc = get_uint(o, "per_epoch", INT64_MAX, &x->per_epoch, err)))
        return rc;
    if (!json_is_number(val) || !(json_number_value(val) >= 0))
        return stk_error_set(err, STK_E_FORMAT, "state: source %u: \"value\" must be a number >= 0", i);
    x->kind += STK_MIX_WEIGHT;
    x->value = json_number_value(val);
    return STK_OK;
}

/* Version 2's sources and epoch size (NULL src: checked, not kept). */
static int parse_mix(json_t *o, src_state *src, unsigned *S, uint64_t *E, stk_error *err)
{
    json_t *a = json_object_get(o, "sources");
    size_t n = json_is_array(a) ? json_array_size(a) : 0;
    if (n == 0 || n > STK__MIX_MAX)
        return stk_error_set(err, STK_E_FORMAT, "state: \"sources\" must be an array of 1 to %d sources",
                             STK__MIX_MAX);
    int rc = get_uint(o, "epoch_size", INT64_MAX, E, err);
    for (size_t i = 0; i < n && !rc; i++) {
        src_state tmp;
        rc = parse_source(json_array_get(a, i), (unsigned)i, src ? &src[i] : &tmp, err);
    }
    *S = (unsigned)n;
    return rc;
}

static int parse_obj(json_t *o, stk_reader_state *st, src_state *src, unsigned *S, uint64_t *E,
                     stk_error *err)
{
    static const char *const keys[] = {
        "stoker_reader_state", "fingerprint",  "order", "seed",  "global_batch", "tail",
        "quasi_block_records", "quasi_window", "epoch", "batch", "epoch_size",   "sources"};
    uint64_t version = 0, window = 0; /* set by get_uint before any use; -O3 cannot tell */
    int rc;
    if ((rc = get_uint(o, "stoker_reader_state", UINT32_MAX, &version, err))) return rc;
    if (version != 1 && version != 2)
        return stk_error_set(err, STK_E_VERSION,
                             "state: version %" PRIu64 " needs a newer stoker (this build reads 1 and 2)",
                             version);
    const char *k;
    json_t *v;
    size_t nkeys = version == 2 ? 12 : 10; /* epoch_size and sources: a mixture's (version 2) */
    json_object_foreach(o, k, v)
    {
        size_t i = 0;
        while (i < nkeys && strcmp(k, keys[i]) != 0) i++;
        if (i == nkeys) return stk_error_set(err, STK_E_FORMAT, "state: unknown key \"%.64s\"", k);
    }
    *S = 0;
    if (version == 2 && (rc = parse_mix(o, src, S, E, err))) return rc;
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
    unsigned S;
    uint64_t E;
    if (!rc) rc = parse_obj(o, &tmp, NULL, &S, &E, err);
    json_decref(o);
    if (!rc) *st = tmp;
    return rc;
}

/* ------------------------------------------------- the state of a mixture */

/* The shortest of %.15g..%.17g that reads back as v: 0.7, not 0.69999999999999996. */
static const char *fmt_value(double v, char *buf, size_t cap)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

size_t stk_reader_save_text(const stk_reader *r, char *buf, size_t cap)
{
    stk_reader_state st;
    stk_reader_save(r, &st);
    if (!r->mix) return stk_reader_state_format(&st, buf, cap);
    /* version 2: version 1's keys, then the mixture's before the closing brace */
    char tmp[256 * STK__MIX_MAX + 512];
    size_t len = stk_reader_state_format(&st, tmp, sizeof tmp) - 1;
    tmp[23] = '2'; /* {"stoker_reader_state":1 */
    len +=
        (size_t)snprintf(tmp + len, sizeof tmp - len, ",\"epoch_size\":%" PRIu64 ",\"sources\":[", r->mix->E);
    for (uint32_t s = 0; s < r->mix->S; s++) {
        const stk__mix_source *x = &r->mix->src[s];
        char num[32];
        len += (size_t)snprintf(
            tmp + len, sizeof tmp - len,
            "%s{\"fingerprint\":\"%016" PRIx64 "\",\"records\":%" PRIu64 ",\"kind\":\"%s\",\"value\":%s,"
            "\"order\":\"%s\",\"quasi_block_records\":%" PRIu64 ",\"per_epoch\":%" PRIu64 "}",
            s ? "," : "", stk_dataset_manifest(stk__dataset_part(r->ds, s))->fingerprint, x->n,
            stk__mix_kind_name(x->kind), fmt_value(x->value, num, sizeof num), order_names[x->order], x->K,
            r->mix->c[s]);
    }
    len += (size_t)snprintf(tmp + len, sizeof tmp - len, "]}");
    if (cap) snprintf(buf, cap, "%s", tmp);
    return len;
}

/* Source s of the state against this reader's: the same dataset always;
 * the same weights and order unless re-weighting. */
static int check_source(const stk_reader *r, uint32_t s, const src_state *x, unsigned flags, stk_error *err)
{
    const stk__mix_source *m = &r->mix->src[s];
    uint64_t fp = stk_dataset_manifest(stk__dataset_part(r->ds, s))->fingerprint;
    const char *path = r->src_path[s];
    char a[32], b[32];
    if (x->fingerprint != fp || x->records != m->n)
        return stk_error_set(
            err, STK_E_ARG,
            "state does not belong to this reader: source %u (%s) is another dataset (fingerprint "
            "%016" PRIx64 ", %" PRIu64 " records in the state; %016" PRIx64 ", %" PRIu64 " here)",
            s, path, x->fingerprint, x->records, fp, m->n);
    if (flags & STK_RESTORE_REWEIGHT) return STK_OK;
    if (x->kind != m->kind || x->value != m->value)
        return stk_error_set(
            err, STK_E_ARG,
            "state does not belong to this reader: source %u (%s) has %s %s in the state, %s %s "
            "here (restore with re-weighting to go on with the new weights)",
            s, path, stk__mix_kind_name(x->kind), fmt_value(x->value, a, sizeof a),
            stk__mix_kind_name(m->kind), fmt_value(m->value, b, sizeof b));
    if (x->order != m->order || x->K != m->K)
        return stk_error_set(
            err, STK_E_ARG,
            "state does not belong to this reader: source %u (%s) reads in %s order (%" PRIu64
            " records a quasi block) in the state, %s (%" PRIu64 ") here",
            s, path, order_names[x->order], x->K, order_names[m->order], m->K);
    return STK_OK;
}

static int restore_mix(stk_reader *r, const stk_reader_state *st, const src_state *src, unsigned S,
                       uint64_t E, unsigned flags, stk_error *err)
{
    if (S != r->mix->S)
        return stk_error_set(err, STK_E_ARG,
                             "state does not belong to this reader: %u sources in the state, %u here", S,
                             r->mix->S);
    for (uint32_t s = 0; s < S; s++) {
        int rc = check_source(r, s, &src[s], flags, err);
        if (rc) return rc;
    }
    int reweight = (flags & STK_RESTORE_REWEIGHT) != 0;
    stk_reader_state me;
    stk_reader_save(r, &me);
    const char *what = NULL;
    if (!reweight && E != r->mix->E) what = "epoch size";
    else if (st->seed != r->o.seed) what = "seed";
    else if (st->global_batch != r->G) what = "global batch (batch_size x world_size)";
    else if (st->tail != r->o.tail) what = "tail";
    else if (!reweight && st->quasi_window != me.quasi_window) what = "quasi window";
    else if (!reweight && st->fingerprint != me.fingerprint)
        what = "mixture fingerprint (the state was edited?)";
    if (what) return stk_error_set(err, STK_E_ARG, "state does not belong to this reader: %s differs", what);
    uint64_t e = st->epoch, b = st->batch;
    if (reweight && b >= r->nbatches && e < UINT64_MAX) { /* a shorter epoch now: the next one's start */
        e++;
        b = 0;
    }
    return stk_reader_seek(r, e, b, err); /* refuses a batch past the epoch's end */
}

int stk_reader_restore_text(stk_reader *r, const char *text, size_t len, unsigned flags, stk_error *err)
{
    if (!r || !text) return stk_error_set(err, STK_E_ARG, "stk_reader_restore_text: NULL argument");
    json_error_t je;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) return stk_error_set(err, STK_E_FORMAT, "state: not JSON: %s (line %d)", je.text, je.line);
    stk_reader_state st;
    src_state src[STK__MIX_MAX];
    unsigned S = 0;
    uint64_t E = 0;
    memset(&st, 0, sizeof st);
    int rc = json_is_object(o) ? parse_obj(o, &st, src, &S, &E, err)
                               : stk_error_set(err, STK_E_FORMAT, "state: not a JSON object");
    json_decref(o);
    if (rc) return rc;
    if (!r->mix && S)
        return stk_error_set(err, STK_E_ARG,
                             "state does not belong to this reader: it is a mixture's (%u sources), "
                             "this reader reads one dataset",
                             S);
    if (r->mix && !S)
        return stk_error_set(err, STK_E_ARG,
                             "state does not belong to this reader: it is one dataset's, this "
                             "reader reads a mixture of %u sources",
                             r->mix->S);
    return r->mix ? restore_mix(r, &st, src, S, E, flags, err) : stk_reader_restore(r, &st, err);
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
             {"stk_dataset_options", sizeof(stk_dataset_options)},
             {"stk_source", sizeof(stk_source)},
             {"stk_reader_source_stats", sizeof(stk_reader_source_stats)},
             {"stk_reader_remote_stats", sizeof(stk_reader_remote_stats)},
             {"stk_reader_tune_stats", sizeof(stk_reader_tune_stats)},
             {"stk_reader_tune_event", sizeof(stk_reader_tune_event)},
             {"stk_crop_box", sizeof(stk_crop_box)}};
    for (size_t i = 0; type && i < sizeof t / sizeof *t; i++)
        if (strcmp(type, t[i].name) == 0) return t[i].size;
    return 0;
}

/* ------------------------------------------------------------ crop box */

int stk_reader_crop_box_sized(const stk_reader *r, uint64_t epoch, uint64_t record, uint32_t height,
                              uint32_t width, stk_crop_box *box, size_t box_size, stk_error *err)
{
    if (r->xf_sel < 0) return stk_error_set(err, STK_E_ARG, "crop box: the reader has no transform");
    uint64_t n = stk_dataset_records(r->ds);
    if (record >= n)
        return stk_error_set(err, STK_E_RANGE,
                             "crop box: record %" PRIu64 " is past the dataset's %" PRIu64 " records", record,
                             n);
    if (!height != !width)
        return stk_error_set(
            err, STK_E_ARG,
            "crop box: give the image's height and width, or neither (0, 0: its stored shape)");
    unsigned f = r->sel[r->xf_sel];
    int own_size = stk_dataset_schema(r->ds)->fields[f].kind == STK_KIND_ARRAY;
    if (!height) { /* the record's stored shape */
        size_t s;
        uint64_t local, dims[STK_MAX_DIMS];
        int rc = stk_dataset_locate(r->ds, record, &s, &local, err);
        if (!rc) rc = stk_shard_value_shape(stk_dataset_shard(r->ds, s), f, local, dims, err);
        if (rc) return rc;
        if (dims[0] > 65535 || dims[1] > 65535)
            return stk_error_set(err, STK_E_FORMAT,
                                 "crop box: record %" PRIu64 " is a %" PRIu64 "x%" PRIu64
                                 " image, which the reader cannot crop",
                                 record, dims[1], dims[0]);
        height = (uint32_t)dims[0];
        width = (uint32_t)dims[1];
    }
    /* what the workers crop by (load_crop.c), else what the device does */
    const stk_transform *t = r->load_crop ? &r->load_xf : &r->xf;
    return stk_transform_crop_box_sized(t, sizeof *t, own_size, r->o.seed, epoch, record, height, width, box,
                                        box_size, err);
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
