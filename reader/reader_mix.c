/* reader/reader_mix.c - a mixture of datasets as one reader: opening the
 * sources, checking that they agree on the fields read, the statistics per
 * source and the mixture's fingerprint. The order itself is in mix.c, the
 * state's text in state.c. */
#include "reader_impl.h"
#include "abi_v0.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STK__SOURCE_MIN_SIZE sizeof(stk_source) /* the first release that had it */
#define TAG_MIXFP 0x73746b2d6d697866ULL         /* "stk-mixf" */

void stk_source_init_sized(stk_source *s, size_t size)
{
    stk_source d;
    memset(&d, 0, sizeof d);
    d.kind = STK_MIX_WEIGHT;
    d.value = 1;
    d.order = -1;
    stk__write_sized(s, size, &d, sizeof d);
}

const char *stk__mix_kind_name(int kind)
{
    return kind == STK_MIX_WEIGHT ? "weight" : kind == STK_MIX_REPEAT ? "repeat" : "choose";
}

uint64_t stk__mix_fingerprint(const stk_reader *r)
{
    const stk__mix *m = r->mix;
    uint64_t w[2 + 8 * STK__MIX_MAX], *p = w;
    memset(w, 0, sizeof w);
    *p++ = TAG_MIXFP;
    *p++ = m->E;
    for (uint32_t s = 0; s < m->S; s++) {
        const stk__mix_source *x = &m->src[s];
        uint64_t v;
        memcpy(&v, &x->value, sizeof v);
        *p++ = stk_dataset_manifest(stk__dataset_part(r->ds, s))->fingerprint;
        *p++ = x->n;
        *p++ = (uint64_t)x->kind;
        *p++ = v;
        *p++ = (uint64_t)x->order;
        *p++ = x->K;
        *p++ = x->W;
        *p++ = m->c[s];
    }
    return stk_hash(w, (size_t)(p - w) * sizeof *w);
}

/* Source i as the caller gave it (`size` bytes of their struct), checked;
 * its dataset opened when given by path (*opened: to close). */
static int open_source(const stk_source *in, size_t size, unsigned i, stk_source *s, stk_dataset **opened,
                       char **path, const stk_reader_options *opts, size_t opts_size, stk_error *err)
{
    if (stk__read_sized(s, sizeof *s, in, size, STK__SOURCE_MIN_SIZE, "stk_source", err))
        return err ? err->code : STK_E_ARG;
    if (s->kind < STK_MIX_WEIGHT || s->kind > STK_MIX_CHOOSE)
        return stk_error_set(err, STK_E_ARG, "mixture: source %u: kind %d unknown (weight, repeat or choose)",
                             i, s->kind);
    if (s->order < -1 || s->order > STK_ORDER_QUASI)
        return stk_error_set(err, STK_E_ARG, "mixture: source %u: order %d unknown", i, s->order);
    if (!s->path == !s->dataset)
        return stk_error_set(err, STK_E_ARG,
                             "mixture: source %u: give a path or an open dataset (one of them)", i);
    if (!(*path = strdup(s->path ? s->path : ""))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    if (s->path && !(*opened = stk__dataset_open_opts(s->path, opts, opts_size, err))) {
        if (err) {
            char msg[STK_ERROR_MSG_MAX];
            snprintf(msg, sizeof msg, "%s", err->msg);
            stk_error_set(err, err->code, "mixture: source %u: %s", i, msg);
        }
        return err ? err->code : STK_E_IO;
    }
    return STK_OK;
}

/* An earlier source that is the same dataset as `ds` (the same manifest,
 * every shard the same file), or -1. A mixture that names one dataset twice
 * (upsampled in one source, read whole in another) then maps its files once:
 * each mapping of the same files would cost its own page tables and its own
 * first-touch faults (bench/README "Warm reads"). */
static int same_dataset(stk_dataset *const *parts, unsigned n, const stk_dataset *ds)
{
    size_t nsh = stk_dataset_nshards(ds);
    for (unsigned j = 0; j < n; j++) {
        const stk_dataset *p = parts[j];
        if (p == ds) return (int)j;
        if (stk_dataset_manifest(p)->fingerprint != stk_dataset_manifest(ds)->fingerprint ||
            stk_dataset_nshards(p) != nsh)
            continue;
        size_t k = 0;
        for (; k < nsh; k++) {
            uint64_t d0, i0, d1, i1;
            stk_shard_file_id(stk_dataset_shard(p, k), &d0, &i0);
            stk_shard_file_id(stk_dataset_shard(ds, k), &d1, &i1);
            if (d0 != d1 || i0 != i1 || !i0) break; /* a shard in memory (ino 0) is not a file to share */
        }
        if (k == nsh) return (int)j;
    }
    return -1;
}

stk_reader *stk_reader_open_mix_sized(const stk_source *sources, unsigned n, size_t source_size,
                                      const stk_reader_options *opts, size_t size, size_t transform_size,
                                      stk_error *err)
{
    if (!sources || n == 0 || n > STK__MIX_MAX)
        return stk_error_set(err, STK_E_ARG, "mixture: %u sources (1 to %d)", sources ? n : 0, STK__MIX_MAX),
               NULL;
    if (source_size < STK__SOURCE_MIN_SIZE)
        return stk_error_set(err, STK_E_ARG, "stk_source: size %zu is smaller than any release's",
                             source_size),
               NULL;
    stk_dataset *parts[STK__MIX_MAX] = {0}, *cat = NULL;
    stk__mix_source src[STK__MIX_MAX];
    char **paths = calloc(n, sizeof *paths);
    uint64_t own = 0;
    int rc = paths ? STK_OK : stk_error_set(err, STK_E_NOMEM, "out of memory");
    for (unsigned i = 0; i < n && !rc; i++) {
        stk_source s;
        stk_dataset *opened = NULL;
        rc = open_source((const stk_source *)(const void *)((const char *)sources + (size_t)i * source_size),
                         source_size, i, &s, &opened, &paths[i], opts, size, err);
        if (rc) break;
        int j = opened ? same_dataset(parts, i, opened) : -1;
        if (j >= 0) {
            stk_dataset_close(opened);
            opened = NULL;
        }
        parts[i] = j >= 0   ? parts[j]
                   : opened ? opened
                            : (stk_dataset *)s.dataset; /* borrowed: never closed here */
        if (opened) own |= 1ULL << i;
        src[i] = (stk__mix_source){stk_dataset_records(parts[i]), s.kind, s.value, s.order, 0, 0};
    }
    if (!rc && !(cat = stk__dataset_concat(parts, n, own, err))) rc = err ? err->code : STK_E_NOMEM;
    if (rc) {
        for (unsigned i = 0; i < n; i++)
            if (own >> i & 1) stk_dataset_close(parts[i]);
        for (unsigned i = 0; paths && i < n; i++) free(paths[i]);
        free(paths);
        return NULL;
    }
    stk_reader *r = stk__reader_open(cat, src, n, paths, opts, size, transform_size, err);
    if (!r) {
        stk_dataset_close(cat);
        return NULL;
    }
    r->owned = cat;
    return r;
}

unsigned stk_reader_sources(const stk_reader *r) { return r->mix ? r->mix->S : 1; }

const char *stk_reader_source_path(const stk_reader *r, unsigned s)
{
    if (s >= stk_reader_sources(r)) return NULL;
    return r->src_path ? r->src_path[s] : "";
}

/* Source s's statistics; under r->mu. */
static void source_stats_locked(const stk_reader *r, unsigned s, stk_reader_source_stats *out)
{
    stk_reader_source_stats st;
    memset(&st, 0, sizeof st);
    if (r->mix) {
        st.records = r->mix->src[s].n;
        st.per_epoch = r->mix->c[s];
        st.samples = r->st_src_samples[s];
        st.bytes = r->st_src_bytes[s];
        st.busy_s = r->st_src_busy[s];
    } else {
        st.records = st.per_epoch = r->records;
        st.samples = r->st_samples;
        st.bytes = r->st_bytes;
        st.busy_s = r->st_busy;
    }
    *out = st;
}

int stk_reader_source_stats_get_sized(const stk_reader *r, unsigned s, stk_reader_source_stats *out,
                                      size_t size, stk_error *err)
{
    if (s >= stk_reader_sources(r))
        return stk_error_set(err, STK_E_ARG, "source %u: the reader has %u", s, stk_reader_sources(r));
    stk_reader_source_stats st;
    pthread_mutex_lock((pthread_mutex_t *)&r->mu);
    source_stats_locked(r, s, &st);
    pthread_mutex_unlock((pthread_mutex_t *)&r->mu);
    stk__write_sized(out, size, &st, sizeof st);
    return STK_OK;
}

/* The last path component, for a short line. */
static const char *short_name(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    const char *p = path + n;
    while (p > path && p[-1] != '/') p--;
    return *p ? p : path;
}

int stk_reader_verdict_sources(const stk_reader *r, char *buf, size_t cap)
{
    if (cap) buf[0] = 0;
    if (!r->mix) return 0;
    uint32_t S = r->mix->S;
    stk_reader_source_stats st[STK__MIX_MAX];
    double samples = 0, busy = 0;
    pthread_mutex_lock((pthread_mutex_t *)&r->mu); /* one snapshot: shares that add up */
    for (uint32_t s = 0; s < S; s++) source_stats_locked(r, s, &st[s]);
    pthread_mutex_unlock((pthread_mutex_t *)&r->mu);
    for (uint32_t s = 0; s < S; s++) {
        samples += (double)st[s].samples;
        busy += st[s].busy_s;
    }
    if (samples == 0) return snprintf(buf, cap, "sources: no batches read yet");
    char line[STK_ERROR_MSG_MAX * 2];
    size_t n = (size_t)snprintf(line, sizeof line, "sources:");
    uint32_t hi = UINT32_MAX, lo = UINT32_MAX; /* costliest and cheapest per sample */
    for (uint32_t s = 0; s < S && n < sizeof line; s++) {
        double share = (double)st[s].samples / samples * 100,
               tshare = busy > 0 ? st[s].busy_s / busy * 100 : 0;
        n += (size_t)snprintf(line + n, sizeof line - n,
                              s ? "; %s %.0f%%, %.0f%%" : " %s %.0f%% of samples, %.0f%% of worker time",
                              *r->src_path[s] ? short_name(r->src_path[s]) : "(dataset)", share, tshare);
        if (!st[s].samples) continue;
        double c = st[s].busy_s / (double)st[s].samples;
        if (hi == UINT32_MAX || c > st[hi].busy_s / (double)st[hi].samples) hi = s;
        if (lo == UINT32_MAX || c < st[lo].busy_s / (double)st[lo].samples) lo = s;
    }
    if (hi != lo && hi != UINT32_MAX && st[lo].busy_s > 0 && n < sizeof line) {
        double x = (st[hi].busy_s / (double)st[hi].samples) / (st[lo].busy_s / (double)st[lo].samples);
        snprintf(line + n, sizeof line - n, " (costliest per sample: %s, %.1fx %s)",
                 *r->src_path[hi] ? short_name(r->src_path[hi]) : "(dataset)", x,
                 *r->src_path[lo] ? short_name(r->src_path[lo]) : "(dataset)");
    }
    return snprintf(buf, cap, "%s", line);
}
