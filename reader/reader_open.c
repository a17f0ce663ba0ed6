/* reader/reader_open.c - options, memory plan, slots and workers: the
 * reader's construction and teardown. Everything that can be refused is
 * refused here, before a thread starts, with the option named. */
#include "reader_impl.h"
#include "trace.h"
#include "tune.h"
#include "abi_v0.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIELD_ALIGN 64
#define FIELD_ALIGN_DIRECT 4096 /* direct reads land in place: O_DIRECT alignment */

/* Rank and world size the options leave to the environment: RANK, else
 * SLURM_PROCID; WORLD_SIZE, else SLURM_NTASKS. */
static int resolve_dist(stk_reader_options *o, const stk__env *env, stk_error *err)
{
    static const int rank_env[] = {STK__ENV_RANK, STK__ENV_SLURM_PROCID};
    static const int world_env[] = {STK__ENV_WORLD_SIZE, STK__ENV_SLURM_NTASKS};
    for (int i = 0; i < 2 && o->rank < 0; i++) {
        long v;
        if (stk__env_get(env, rank_env[i], &v, err)) return STK_E_ARG;
        if (v >= 0) o->rank = (int)v;
    }
    for (int i = 0; i < 2 && o->world_size < 0; i++) {
        long v;
        if (stk__env_get(env, world_env[i], &v, err)) return STK_E_ARG;
        if (v > 0) o->world_size = (int)v;
    }
    if (o->rank < 0) o->rank = 0;
    if (o->world_size < 0) o->world_size = 1;
    if (o->world_size == 0) return stk_error_set(err, STK_E_ARG, "world_size must be at least 1");
    if (o->rank >= o->world_size)
        return stk_error_set(err, STK_E_ARG, "rank %d out of range for world size %d", o->rank,
                             o->world_size);
    return STK_OK;
}

/* Tuning (tune.h): on or off ($STOKER_TUNING for auto), the ranks of the
 * node, the cores of this rank, and the threads to start: threads_max, else
 * the CPU budget rounded up, at least the threads to begin with (a default
 * thread count beyond threads_max comes down to it; a given one is refused).
 * Off, or every knob pinned: the knobs stay as given (nworkers = threads). */
static int plan_tuning(stk_reader *r, const stk__env *env, int threads_given, int old_caller,
                       stk__tune_config *tc, stk_error *err)
{
    stk_reader_options *o = &r->o;
    const unsigned knobs = STK_PIN_THREADS | STK_PIN_PREFETCH | STK_PIN_IO_DEPTH;
    long v;
    if (o->tuning < STK_TUNING_AUTO || o->tuning > STK_TUNING_OFF)
        return stk_error_set(err, STK_E_ARG, "tuning %d unknown (auto, on or off)", o->tuning);
    if (o->tune_pin & ~(knobs | STK_PIN_IO))
        return stk_error_set(err, STK_E_ARG, "tune_pin 0x%x: unknown bits (STK_PIN_*)", o->tune_pin);
    if (!(o->cpu_budget >= 0 && o->cpu_budget <= 65536))
        return stk_error_set(err, STK_E_ARG, "cpu_budget %g: 0 (measured) or the cores the workers may use",
                             o->cpu_budget);
    if (o->threads_max > 256)
        return stk_error_set(err, STK_E_ARG, "threads_max %u: at most 256", o->threads_max);
    if (o->tuning == STK_TUNING_AUTO) {
        if (stk__env_get(env, STK__ENV_TUNING, &v, err)) return STK_E_ARG;
        /* a caller built before tuning existed keeps its knobs unless asked */
        o->tuning = v == 1 || (v < 0 && !old_caller) ? STK_TUNING_ON : STK_TUNING_OFF;
    }
    memset(tc, 0, sizeof *tc);
    tc->pin = o->tune_pin & knobs;
    if ((tc->pin & knobs) == knobs) o->tuning = STK_TUNING_OFF; /* nothing left to turn */
    r->nworkers = o->threads;
    if (o->tuning == STK_TUNING_OFF) return STK_OK;
    static const int ranks_env[] = {STK__ENV_LOCAL_WORLD_SIZE, STK__ENV_SLURM_NTASKS_PER_NODE};
    tc->ranks = 1;
    for (int i = 0; i < 2; i++) {
        if (stk__env_get(env, ranks_env[i], &v, err)) return STK_E_ARG;
        if (v > 0) {
            tc->ranks = (unsigned)v;
            break;
        }
    }
    tc->cores = stk__tune_cores(tc->ranks);
    tc->cpu_budget = o->cpu_budget;
    unsigned tmax = o->threads_max;
    if (!tmax) {
        double b = ceil(o->cpu_budget > 0 ? o->cpu_budget : tc->cores);
        tmax = b < 1 ? 1 : b > 256 ? 256 : (unsigned)b;
        if (tmax < o->threads && threads_given) tmax = o->threads;
    }
    if (o->threads > tmax) {
        if (threads_given)
            return stk_error_set(err, STK_E_ARG, "threads %u is above threads_max %u", o->threads, tmax);
        o->threads = tmax;
    }
    if (tc->pin & STK_PIN_THREADS) tmax = o->threads;
    r->nworkers = tmax;
    tc->start.threads = o->threads;
    tc->max.threads = tmax;
    return STK_OK;
}

/* The caller's options (`size` bytes as its header has them) over the
 * defaults; its transform (`transform_size` bytes) into r->xf. */
static int resolve_options(stk_reader *r, const stk_reader_options *in, size_t size, size_t transform_size,
                           const stk__env *env, stk__tune_config *tc, stk_error *err)
{
    stk_reader_options *o = &r->o;
    stk_reader_options_init_sized(o, sizeof *o);
    if (in &&
        stk__read_sized(o, sizeof *o, in, size, STK__READER_OPTIONS_MIN_SIZE, "stk_reader_options", err))
        return err ? err->code : STK_E_ARG;
    if (o->transform) {
        stk_transform_init_sized(&r->xf, sizeof r->xf);
        if (stk__read_sized(&r->xf, sizeof r->xf, o->transform, transform_size, STK__TRANSFORM_MIN_SIZE,
                            "stk_transform", err))
            return err ? err->code : STK_E_ARG;
        o->transform = &r->xf; /* copied for the reader's lifetime */
    }
    if (o->batch_size == 0) return stk_error_set(err, STK_E_ARG, "batch_size must be at least 1");
    if (o->order < STK_ORDER_SEQUENTIAL || o->order > STK_ORDER_QUASI)
        return stk_error_set(err, STK_E_ARG, "order %d unknown (sequential, shuffle or quasi)", o->order);
    if (o->tail < STK_TAIL_PAD || o->tail > STK_TAIL_AUTO)
        return stk_error_set(err, STK_E_ARG, "tail %d unknown (pad, drop, partial or auto)", o->tail);
    if (o->verify < STK_VERIFY_OFF || o->verify > STK_VERIFY_ALWAYS)
        return stk_error_set(err, STK_E_ARG, "verify %d unknown (off, once or always)", o->verify);
    int rc = resolve_dist(o, env, err);
    if (rc) return rc;
    if (o->tail == STK_TAIL_AUTO) o->tail = o->world_size > 1 ? STK_TAIL_PAD : STK_TAIL_PARTIAL;
    int threads_given = o->threads != 0;
    if (o->threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o->threads = n < 1 ? 1 : n > 8 ? 8 : (unsigned)n;
    }
    if (o->threads > 256) return stk_error_set(err, STK_E_ARG, "threads %u: at most 256", o->threads);
    int old_caller = in && size < offsetof(stk_reader_options, tuning) + sizeof o->tuning;
    if ((rc = plan_tuning(r, env, threads_given, old_caller, tc, err))) return rc;
    r->prefetch_auto = o->prefetch == 0; /* a remote reader may deepen it: plan_remote_window */
    r->parts_ahead = 2;                  /* stk__io_plan may raise it */
    if (o->prefetch == 0) o->prefetch = 2 * o->threads < 2 ? 2 : 2 * o->threads;
    if (o->prefetch > 4096) return stk_error_set(err, STK_E_ARG, "prefetch %u: at most 4096", o->prefetch);
    if (o->quasi_block_bytes == 0) o->quasi_block_bytes = 4u << 20;
    if (o->quasi_window == 0) o->quasi_window = 64;
    if (o->fields && !(r->fields_text = strdup(o->fields)))
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    o->fields = r->fields_text;
    /* trace: the option, else $STOKER_TRACE; the recorder keeps the path */
    const char *trace = o->trace && *o->trace ? o->trace : stk__env_text(env, STK__ENV_TRACE);
    o->trace = NULL;
    if (trace) {
        /* tracks: the consumer, each worker, the copy thread */
        if (!(r->tl = stk__timeline_open(trace, r->nworkers + 2, err))) return err ? err->code : STK_E_IO;
        stk__timeline_name(r->tl, STK_TRACK_CONSUMER, "stoker consumer (next)");
        for (unsigned i = 0; i < r->nworkers; i++) {
            char name[32];
            snprintf(name, sizeof name, "stoker worker %u", i);
            stk__timeline_name(r->tl, STK_TRACK_WORKER(i), name);
        }
        stk__timeline_name(r->tl, STK_TRACK_COPIER(r->nworkers), "stoker copy thread");
        o->trace = stk__timeline_path(r->tl);
    }
    r->G = (uint64_t)o->batch_size * (uint64_t)o->world_size;
    return STK_OK;
}

static int add_field(stk_reader *r, int f, stk_error *err)
{
    for (unsigned i = 0; i < r->nsel; i++)
        if (r->sel[i] == (unsigned)f)
            return stk_error_set(err, STK_E_ARG, "field '%s' selected twice",
                                 stk_dataset_schema(r->ds)->fields[f].name);
    r->sel[r->nsel++] = (unsigned)f;
    return STK_OK;
}

/* Parse "a,b,c" against the schema; keep schema order in the batch. */
static int select_fields(stk_reader *r, stk_error *err)
{
    const stk_schema *sc = stk_dataset_schema(r->ds);
    if (!r->o.fields) {
        for (unsigned f = 0; f < sc->nfields; f++) r->sel[r->nsel++] = f;
    } else {
        const char *p = r->o.fields;
        while (*p) {
            const char *e = strchr(p, ',');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            char name[STK_NAME_MAX];
            if (len == 0 || len >= sizeof name)
                return stk_error_set(err, STK_E_ARG, "fields '%s': empty or overlong name", r->o.fields);
            memcpy(name, p, len);
            name[len] = 0;
            int f = stk_schema_find(sc, name);
            if (f < 0) return stk_error_set(err, STK_E_ARG, "fields: no field '%s' in this dataset", name);
            int rc = add_field(r, f, err);
            if (rc) return rc;
            p += len + (e != NULL);
        }
        if (r->nsel == 0) return stk_error_set(err, STK_E_ARG, "fields: no field selected");
        for (unsigned i = 1; i < r->nsel; i++) /* insertion sort: schema order */
            for (unsigned j = i; j > 0 && r->sel[j - 1] > r->sel[j]; j--) {
                unsigned t = r->sel[j];
                r->sel[j] = r->sel[j - 1];
                r->sel[j - 1] = t;
            }
    }
    for (unsigned i = 0; i < r->nsel; i++) {
        const stk_field *fd = &sc->fields[r->sel[i]];
        r->sel_stride[i] = stk_field_stride(fd);
        r->has_bytes |= fd->kind != STK_KIND_TENSOR;
        r->has_compressed |= fd->codec == STK_CODEC_ZSTD;
        r->zbytes |= fd->codec == STK_CODEC_ZSTD && fd->kind != STK_KIND_TENSOR;
        r->shape_words += fd->kind == STK_KIND_ARRAY ? fd->ndim : 0;
        uint64_t sz = r->sel_stride[i] * r->o.batch_size;
        /* strides are below 2^40 (the format's cap) and batch_size below
         * 2^32; 2^48 bytes per field per slot keeps every sum below 2^64 */
        if ((r->sel_stride[i] && sz / r->sel_stride[i] != r->o.batch_size) || sz > (1ULL << 48))
            return stk_error_set(err, STK_E_ARG, "batch_size %u x field '%s': too large", r->o.batch_size,
                                 fd->name);
        r->slot_stride_bytes += r->sel_stride[i];
    }
    return STK_OK;
}

/* Where each field's [B, ...] tensor sits in a slot (once the read path is
 * chosen: direct reads want block-aligned destinations). */
static void layout_slot(stk_reader *r)
{
    uint64_t off = 0, align = r->direct ? FIELD_ALIGN_DIRECT : FIELD_ALIGN;
    for (unsigned i = 0; i < r->nsel; i++) {
        r->sel_off[i] = off;
        off += (r->sel_stride[i] * r->o.batch_size + align - 1) & ~(align - 1);
    }
    r->slot_bytes = off;
}

/* An array field (images of their own size, spec 4.13) under a transform:
 * the workers crop and resize each image into out_h x out_w (load_crop.c)
 * and the field becomes a u8 [B, out_h, out_w, 3] tensor in the slot; the
 * device transform is left the normalising (no crop, no flip: done). */
static int plan_load_crop(stk_reader *r, const stk_field *fd, stk_error *err)
{
    stk_transform *t = &r->xf;
    if (fd->kind == STK_KIND_TENSOR) { /* a square field: its size is the default output */
        if (!t->out_height) t->out_height = (uint32_t)(fd->shape[0] < 65536 ? fd->shape[0] : 0);
        if (!t->out_width) t->out_width = (uint32_t)(fd->shape[1] < 65536 ? fd->shape[1] : 0);
    } else if (fd->dtype != STK_DT_U8 || fd->ndim != 3 || fd->shape[0] || fd->shape[1] || fd->shape[2] != 3 ||
               fd->codec == STK_CODEC_ZSTD)
        return stk_error_set(err, STK_E_ARG, "transform: the array field '%s' must be u8[*,*,3], raw or JPEG",
                             fd->name);
    if (!t->out_height || !t->out_width || t->out_height > 65535 || t->out_width > 65535)
        return stk_error_set(err, STK_E_ARG,
                             "transform: field '%s' holds images of their own size: give the output size "
                             "(out_height and out_width, 1 .. 65535)",
                             fd->name);
    r->load_crop = 1;
    r->load_xf = *t;
    t->crop = STK_CROP_NONE;
    t->flip_prob = 0;
    unsigned k = (unsigned)r->xf_sel;
    /* without a device the workers write the transform's output (normalised
     * unless it is the u8 HWC crop itself); else the u8 crop, for the device */
    r->load_norm = r->o.device == STK_DEVICE_NONE && !(t->dtype == STK_DT_U8 && t->layout == STK_IMAGE_NHWC);
    uint64_t stride = r->o.device == STK_DEVICE_NONE ? stk__xform_out_bytes(t, 3)
                                                     : (uint64_t)t->out_height * t->out_width * 3;
    r->slot_stride_bytes += stride - r->sel_stride[k];
    r->sel_stride[k] = stride;
    if (fd->kind == STK_KIND_ARRAY) r->shape_words -= fd->ndim;
    layout_slot(r); /* the field now has a stride */
    return STK_OK;
}

/* The transform: which field, its shape, and room for the crop boxes at the
 * end of each slot's buffer. */
static int plan_transform(stk_reader *r, stk_error *err)
{
    r->xf_sel = -1;
    if (!r->o.transform) return STK_OK;
    stk_transform *t = &r->xf; /* resolve_options copied it there */
    const char *name = t->field ? t->field : "image";
    const stk_schema *sc = stk_dataset_schema(r->ds);
    int f = stk_schema_find(sc, name);
    for (unsigned i = 0; i < r->nsel; i++)
        if ((int)r->sel[i] == f) r->xf_sel = (int)i;
    if (r->xf_sel < 0)
        return stk_error_set(err, STK_E_ARG, "transform: field '%s' is not among the fields read", name);
    t->field = sc->fields[f].name;
    const stk_field *fd = &sc->fields[f];
    /* Without a device the workers do it all (load_crop.c): images of their
     * own size always go that way, square ones then too. */
    int rgb = fd->dtype == STK_DT_U8 && fd->ndim == 3 && fd->shape[2] == 3 && fd->codec != STK_CODEC_ZSTD;
    int on_workers =
        fd->kind == STK_KIND_ARRAY || (r->o.device == STK_DEVICE_NONE && fd->kind == STK_KIND_TENSOR && rgb);
    if (r->o.device == STK_DEVICE_NONE && !on_workers)
        r->o.device = STK_DEVICE_HOST; /* other images: the host backend transforms them */
    if (fd->kind != STK_KIND_ARRAY && (fd->kind != STK_KIND_TENSOR || fd->dtype != STK_DT_U8 ||
                                       fd->ndim != 3 || fd->shape[2] < 1 || fd->shape[2] > 4))
        return stk_error_set(err, STK_E_ARG, "transform: field '%s' must be u8 [H, W, C] with C <= 4", name);
    if (t->dtype != STK_DT_F32 && t->dtype != STK_DT_F16 && t->dtype != STK_DT_BF16 && t->dtype != STK_DT_U8)
        return stk_error_set(err, STK_E_ARG, "transform: output dtype must be f32, f16, bf16 or u8");
    if (t->layout != STK_IMAGE_NCHW && t->layout != STK_IMAGE_NHWC)
        return stk_error_set(err, STK_E_ARG, "transform: layout must be NCHW or NHWC");
    int rc = stk__xform_check(t, err);
    if (!rc && on_workers) rc = plan_load_crop(r, fd, err);
    if (rc) return rc;
    stk__xform_job *j = &r->xf_job;
    if (fd->shape[0] > 65535 || fd->shape[1] > 65535)
        return stk_error_set(err, STK_E_ARG, "transform: field '%s' is larger than 65535 x 65535", name);
    j->H = r->load_crop ? t->out_height : (uint32_t)fd->shape[0]; /* load crop: the workers' crops */
    j->W = r->load_crop ? t->out_width : (uint32_t)fd->shape[1];
    j->C = (uint32_t)fd->shape[2];
    if (!t->out_height) t->out_height = j->H;
    if (!t->out_width) t->out_width = j->W;
    if (t->out_height > 65535 || t->out_width > 65535)
        return stk_error_set(err, STK_E_ARG, "transform: output too large");
    j->out_h = t->out_height;
    j->out_w = t->out_width;
    j->dtype = t->dtype;
    j->layout = t->layout;
    for (unsigned c = 0; c < 4; c++) {
        if (c < j->C && !(t->std[c] > 0 || t->std[c] < 0))
            return stk_error_set(err, STK_E_ARG, "transform: std[%u] must not be 0", c);
        j->mean[c] = t->mean[c];
        j->inv_std[c] = c < j->C ? 1.0f / t->std[c] : 1.0f;
    }
    r->xf_out_bytes = stk__xform_out_bytes(t, j->C); /* < 2^36: 65535^2 x 4 channels x 4 bytes */
    if (r->xf_out_bytes * r->o.batch_size > (1ULL << 48))
        return stk_error_set(err, STK_E_ARG, "transform: %u x %u outputs x batch_size %u: too large",
                             t->out_height, t->out_width, r->o.batch_size);
    r->boxes_off = r->slot_bytes;
    r->slot_bytes += (uint64_t)r->o.batch_size * sizeof(stk__crop_box);
    return STK_OK;
}

/* Field f of source s against source 0's: the same name, kind, dtype,
 * shape and codec, at the same place in the schema (the reader addresses
 * a field by its index in every shard). */
static int check_field(const stk_reader *r, uint32_t s, unsigned f, stk_error *err)
{
    const stk_field *a = &stk_dataset_schema(r->ds)->fields[f];
    const stk_schema *sc = stk_dataset_schema(stk__dataset_part(r->ds, s));
    int at = stk_schema_find(sc, a->name);
    if (at < 0)
        return stk_error_set(err, STK_E_ARG,
                             "mixture: source %u (%s) has no field '%s' (source 0, %s, has it)", s,
                             r->src_path[s], a->name, r->src_path[0]);
    if ((unsigned)at != f)
        return stk_error_set(
            err, STK_E_ARG,
            "mixture: source %u (%s): field '%s' is field %d of its schema, field %u in source 0 "
            "(%s): the fields read must be at the same place in every source (pack them with "
            "the same schema)",
            s, r->src_path[s], a->name, at, f, r->src_path[0]);
    const stk_field *b = &sc->fields[at];
    if (a->kind == b->kind && a->dtype == b->dtype && a->ndim == b->ndim && a->codec == b->codec &&
        !memcmp(a->shape, b->shape, sizeof a->shape))
        return STK_OK;
    char da[128], db[128]; /* the descriptions name the codec when there is one */
    stk_field_describe(b, db, sizeof db);
    stk_field_describe(a, da, sizeof da);
    return stk_error_set(err, STK_E_ARG, "mixture: source %u (%s): field %s differs from source 0's (%s): %s",
                         s, r->src_path[s], db, r->src_path[0], da);
}

/* A mixture: the selected fields agree in every source (STK_E_ARG naming
 * the source and field otherwise). */
static int check_mix_fields(const stk_reader *r, stk_error *err)
{
    for (uint32_t s = 1; stk__dataset_part(r->ds, s); s++)
        for (unsigned k = 0; k < r->nsel; k++) {
            int rc = check_field(r, s, r->sel[k], err);
            if (rc) return rc;
        }
    return STK_OK;
}

/* Records per quasi block of shards [s0, s1) holding n records: blocks of
 * about quasi_block_bytes of the records' average size. */
static uint64_t quasi_K(const stk_reader *r, size_t s0, size_t s1, uint64_t n)
{
    uint64_t total = 0;
    for (size_t i = s0; i < s1; i++) total += stk_shard_file_size(stk_dataset_shard(r->ds, i));
    uint64_t avg = total / n ? total / n : 1;
    return r->o.quasi_block_bytes / avg ? r->o.quasi_block_bytes / avg : 1;
}

/* A mixture's sources: their orders (the reader's where not their own) and
 * quasi blocks, then the counts (mix.c). */
static int plan_mix(stk_reader *r, const stk__mix_source *in, uint32_t S, stk_error *err)
{
    stk__mix_source src[STK__MIX_MAX];
    if (S == 0 || S > STK__MIX_MAX)
        return stk_error_set(err, STK_E_ARG, "mixture: %u sources (1 to %d)", S, STK__MIX_MAX);
    memcpy(src, in, S * sizeof *src);
    size_t sh = 0;
    for (uint32_t s = 0; s < S; s++) {
        size_t first = sh; /* the source's shards, empty ones included */
        sh += stk_dataset_nshards(stk__dataset_part(r->ds, s));
        if (src[s].order < 0) src[s].order = r->o.order;
        if (src[s].order > STK_ORDER_QUASI)
            return stk_error_set(err, STK_E_ARG, "mixture: source %u (%s): order %d unknown", s,
                                 r->src_path[s], src[s].order);
        src[s].K = src[s].order == STK_ORDER_QUASI && src[s].n ? quasi_K(r, first, sh, src[s].n) : 0;
        src[s].W = src[s].order == STK_ORDER_QUASI ? r->o.quasi_window : 0;
    }
    int weighted = 0;
    for (uint32_t s = 0; s < S; s++) weighted |= src[s].kind == STK__MIX_WEIGHT;
    if (r->o.epoch_size && !weighted)
        return stk_error_set(err, STK_E_ARG,
                             "mixture: epoch_size is for weighted sources (the counts of repeat and choose "
                             "make the epoch)");
    if (!(r->mix = malloc(sizeof *r->mix))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    return stk__mix_init(r->mix, src, S, r->o.epoch_size, r->o.seed, err);
}

/* The order's shape: batches per epoch and, for quasi, records per block. */
static int plan_stream(stk_reader *r, const stk__mix_source *src, uint32_t S, stk_error *err)
{
    r->records = r->N = stk_dataset_records(r->ds);
    if (src) {
        int rc = plan_mix(r, src, S, err);
        if (rc) return rc;
        r->N = r->mix->E;
    } else if (r->o.epoch_size) {
        return stk_error_set(err, STK_E_ARG, "epoch_size is for a mixture of weighted sources");
    }
    if (r->N == 0) return stk_error_set(err, STK_E_ARG, "the dataset has no records");
    if (r->o.tail == STK_TAIL_DROP) {
        r->nbatches = r->N / r->G;
        if (r->nbatches == 0)
            return stk_error_set(err, STK_E_ARG,
                                 "tail drop: the dataset's %llu records are fewer than one global batch "
                                 "(%u x %d ranks)",
                                 (unsigned long long)r->N, r->o.batch_size, r->o.world_size);
    } else {
        r->nbatches = (r->N - 1) / r->G + 1;
    }
    if (r->o.order == STK_ORDER_QUASI && !r->mix) { /* a mixture's sources have their own */
        r->K = quasi_K(r, 0, stk_dataset_nshards(r->ds), r->N);
        r->Wq = r->o.quasi_window;
    }
    r->end_seq = UINT64_MAX;
    return STK_OK;
}

/* Host memory per slot: the gathered tensors (staging on the device path),
 * the record indices and bytes-field values, and for the host backend the
 * "device" copy and the transform's output too (ordinary memory there). */
static uint64_t host_bytes_per_slot(const stk_reader *r)
{
    const stk_schema *sc = stk_dataset_schema(r->ds);
    uint64_t b = r->slot_bytes + 8ull * r->o.batch_size;
    for (unsigned i = 0; i < r->nsel; i++)
        if (sc->fields[r->sel[i]].kind != STK_KIND_TENSOR) b += sizeof(stk_value) * (uint64_t)r->o.batch_size;
    b += 8ull * r->shape_words * r->o.batch_size;
    if (r->be && r->be->kind == STK_DEVICE_HOST)
        b += r->slot_bytes + (r->xf_sel >= 0 ? r->xf_out_bytes * r->o.batch_size : 0);
    return b;
}

/* The block cache's size: a quasi window's worth (so each block of the
 * window is decompressed once), else a few blocks per worker. */
static int plan_block_cache(stk_reader *r, stk_error *err)
{
    if (!r->has_compressed) return STK_OK;
    uint64_t cap = r->o.block_cache_bytes;
    if (!cap) {
        cap = ((uint64_t)r->nworkers + 1) << 22;
        if (r->o.order == STK_ORDER_QUASI && !r->mix) {
            /* the window's records, uncompressed: K counts records by their stored (compressed)
             * size, so the window holds more raw bytes than quasi_block_bytes x quasi_window */
            uint64_t raw = 0;
            const stk_schema *sc = stk_dataset_schema(r->ds);
            for (unsigned i = 0; i < r->nsel; i++)
                if (sc->fields[r->sel[i]].codec == STK_CODEC_ZSTD)
                    raw += r->sel_stride[i] ? r->sel_stride[i] : 1024;
            uint64_t win = (uint64_t)r->Wq * r->K * raw + ((uint64_t)r->nworkers + 1) * (2ULL << 20);
            if (win > cap) cap = win < (1ULL << 30) ? win : 1ULL << 30;
        }
    }
    r->zcache_bytes = cap;
    if (!(r->zcache = stk__zcache_new(cap))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    return STK_OK;
}

/* How values reach the slots (membuf.c): with streaming stores where a
 * slot is far larger than a core's caches and the values are long runs of
 * whole lines; else memcpy, which leaves a small batch in the cache for the
 * consumer. STOKER_COPY=stream|cached overrides (for measuring both). */
#define STREAM_SLOT_MIN ((uint64_t)16 << 20)
static int plan_copy(stk_reader *r, const stk__env *env, stk_error *err)
{
    long copy;
    if (stk__env_get(env, STK__ENV_COPY, &copy, err)) return STK_E_ARG;
    r->stream_copy = copy >= 0 ? copy == 0 : r->slot_bytes >= STREAM_SLOT_MIN && stk__copy_stream_ok();
    return STK_OK;
}

/* The tuner's knobs' bounds beyond threads (plan_tuning): prefetch up to
 * what the memory budget allows (the slots are allocated for it, so the
 * budget holds whatever the tuner does; at most 256, or the opening prefetch
 * if more), io_depth up to 4x the opening one (at most 1024) on the direct
 * path. With tuning on, memory_budget 0 means STK_TUNE_MEMORY_DEFAULT (tune.h:
 * the lesser of 1/8 of MemAvailable per rank of the node and 4 GiB), or what
 * the opening prefetch needs if more. Not on the device path: its slots are
 * pinned staging memory and device buffers, which the prefetch given sizes. */
#define PREFETCH_TUNE_MAX 256

/* How many slots a memory budget holds beside the reader's fixed memory
 * (the block cache and the I/O plan's buffers); UINT64_MAX when a slot
 * costs no host memory. */
static uint64_t slots_within(const stk_reader *r, uint64_t budget)
{
    uint64_t per = host_bytes_per_slot(r), fixed = r->zcache_bytes + stk__io_plan_bytes(r);
    if (!per) return UINT64_MAX;
    return budget > fixed ? (budget - fixed) / per : 0;
}

/* A remote reader's window (stk__io_plan set parts_ahead above 2): its range
 * GETs go out a few dozen at a time and the rest wait queued, and only GETs
 * queued at once can be joined into one request (remote/client.c), so a
 * deeper window of parts begun turns more of a shuffled order's records into
 * neighbours of one another: fewer, larger requests, which the server's cost
 * per request bounds. The window is as many batches as the workers' parts
 * begun at once fill; a prefetch the options leave to the reader becomes
 * that plus a batch per thread for the caller (the GETs land straight in the
 * slots: no cache space), within the memory budget (given, or with tuning on
 * its default), never below the default. The tuner starts there and may
 * move it between 1 and its bound (plan_knobs). The window ramps: until the
 * stream's first batch is consumed a worker holds REMOTE_RAMP_PARTS begun,
 * so that the first batch's GETs do not share the server with the deeper
 * window's (the first batch is what a run waits for before any work). */
#define REMOTE_RAMP_PARTS 2
static void plan_remote_window(stk_reader *r, const stk__tune_config *tc)
{
    stk_reader_options *o = &r->o;
    r->parts_first = r->parts_ahead;
    if (r->parts_ahead <= 2) return;
    if (REMOTE_RAMP_PARTS < r->parts_ahead) r->parts_first = REMOTE_RAMP_PARTS;
    unsigned window = (r->parts_ahead * r->nworkers + r->parts - 1) / r->parts;
    if (r->prefetch_auto && !r->be) {
        uint64_t want = (uint64_t)window + o->threads, budget = o->memory_budget;
        if (!budget && o->tuning == STK_TUNING_ON) budget = stk__tune_memory_default(tc->ranks);
        uint64_t slots = budget ? slots_within(r, budget) : UINT64_MAX;
        if (slots <= want) want = slots ? slots - 1 : 0;
        if (want > o->prefetch && want <= 4096) o->prefetch = (unsigned)want;
    }
    size_t n = strlen(r->io_reason);
    snprintf(r->io_reason + n, sizeof r->io_reason - n,
             "; %u parts begun per worker (%u until the first batch is out; a window of %u batches, prefetch "
             "%u): more GETs queued at once, so more adjacent records join into one request",
             r->parts_ahead, r->parts_first, window, o->prefetch);
}

static void plan_knobs(stk_reader *r, stk__tune_config *tc)
{
    stk_reader_options *o = &r->o;
    r->nslots = o->prefetch + 1;
    r->io_depth_max = o->io_depth;
    tc->start.prefetch = tc->max.prefetch = o->prefetch;
    tc->start.io_depth = tc->max.io_depth = o->io_depth;
    if (o->tuning != STK_TUNING_ON) return;
    /* a direct reader's queue may deepen to 4x its start, and at least to
     * what the default depth may reach: a shallow start can recover */
    if (r->direct && !(tc->pin & STK_PIN_IO_DEPTH)) {
        unsigned d = o->io_depth * 4 > 4 * 32 ? o->io_depth * 4 : 4 * 32;
        r->io_depth_max = tc->max.io_depth = d < 1024 ? d : 1024;
    }
    if (o->io_depth > r->io_depth_max) r->io_depth_max = tc->max.io_depth = o->io_depth;
    uint64_t need = host_bytes_per_slot(r) * r->nslots + r->zcache_bytes + stk__io_plan_bytes(r);
    uint64_t budget = o->memory_budget;
    if (!budget) {
        budget = stk__tune_memory_default(tc->ranks);
        if (budget < need) budget = need;
    }
    tc->memory_budget = budget;
    if ((tc->pin & STK_PIN_PREFETCH) || r->be || budget < need) return; /* alloc_slots refuses the last */
    o->memory_budget = budget;
    uint64_t slots = slots_within(r, budget),
             cap = o->prefetch > PREFETCH_TUNE_MAX ? o->prefetch : PREFETCH_TUNE_MAX;
    uint64_t pmax = slots - 1 < cap ? slots - 1 : cap;
    r->nslots = (unsigned)pmax + 1;
    tc->max.prefetch = (unsigned)pmax;
}

static int alloc_slots(stk_reader *r, stk_error *err)
{
    /* A clock read (~40 ns) per source change is noise beside a record of a
     * few KiB, a decompression or a crop; smaller records cost their bytes. */
    r->mix_timed =
        r->mix && (r->slot_stride_bytes >= 4096 || r->has_bytes || r->has_compressed || r->load_crop);
    uint64_t per = host_bytes_per_slot(r), total = per * r->nslots + r->zcache_bytes +
                                                   stk__io_plan_bytes(r); /* < 2^62: see select_fields */
    if (r->o.memory_budget && total > r->o.memory_budget)
        return stk_error_set(err, STK_E_ARG,
                             "memory budget %llu bytes is too small for %u slots x %llu bytes = %llu "
                             "(lower prefetch, batch_size or the fields read)",
                             (unsigned long long)r->o.memory_budget, r->nslots, (unsigned long long)per,
                             (unsigned long long)total);
    if (!(r->slots = calloc(r->nslots, sizeof *r->slots)) ||
        !(r->slot_map = calloc(r->nslots, sizeof(unsigned))) ||
        !(r->free_slot = calloc(r->nslots, sizeof(unsigned))))
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    const stk_schema *sc = stk_dataset_schema(r->ds);
    unsigned nbytesf = 0;
    for (unsigned i = 0; i < r->nsel; i++)
        nbytesf += sc->fields[r->sel[i]].kind != STK_KIND_TENSOR && !(r->load_crop && (int)i == r->xf_sel);
    for (unsigned s = 0; s < r->nslots; s++) {
        stk__slot *sl = &r->slots[s];
        void *buf = NULL;
        if (r->be) { /* pinned staging memory: what the copy engine reads */
            if (r->be->host_alloc(r->be, r->slot_bytes ? r->slot_bytes : 1, &buf, err))
                return err ? err->code : STK_E_NOMEM;
        } else if (r->slot_bytes) {
            buf = stk__buf_alloc(r->slot_bytes); /* huge pages: membuf.c */
        }
        sl->buf = buf;
        sl->records = malloc(sizeof *sl->records * r->o.batch_size);
        if (r->zbytes && !(sl->zheap = calloc(r->nworkers, sizeof *sl->zheap)))
            return stk_error_set(err, STK_E_NOMEM, "out of memory");
        sl->values = nbytesf ? malloc(sizeof *sl->values * r->o.batch_size * nbytesf) : NULL;
        sl->shapes = r->shape_words ? malloc(8 * r->shape_words * r->o.batch_size) : NULL;
        if (r->mix_timed && !(sl->src_busy = calloc(r->mix->S, sizeof *sl->src_busy)))
            return stk_error_set(err, STK_E_NOMEM, "out of memory");
        if (r->mix) {
            sl->sources = malloc(sizeof *sl->sources * r->o.batch_size);
            sl->source_records = malloc(sizeof *sl->source_records * r->o.batch_size);
            if (!sl->sources || !sl->source_records) return stk_error_set(err, STK_E_NOMEM, "out of memory");
            sl->batch.sources = sl->sources;
            sl->batch.source_records = sl->source_records;
        }
        if ((r->slot_bytes && !sl->buf) || !sl->records || (nbytesf && !sl->values) ||
            (r->shape_words && !sl->shapes))
            return stk_error_set(err, STK_E_NOMEM, "out of memory for %u slots of %llu bytes", r->nslots,
                                 (unsigned long long)r->slot_bytes);
        unsigned bi = 0;
        uint64_t *shapes = sl->shapes;
        for (unsigned k = 0; k < r->nsel; k++) {
            const stk_field *fd = &sc->fields[r->sel[k]];
            stk_batch_field *bf = &sl->fields[k];
            bf->name = fd->name;
            int cropped = r->load_crop && (int)k == r->xf_sel; /* a u8 [B, out_h, out_w, 3] tensor */
            bf->kind = cropped ? STK_KIND_TENSOR : fd->kind;
            bf->dtype = fd->dtype;
            bf->ndim = 1 + fd->ndim;
            for (unsigned d = 0; d < fd->ndim; d++) bf->shape[1 + d] = fd->shape[d];
            if (fd->kind != STK_KIND_TENSOR && !cropped)
                bf->values = sl->values + (uint64_t)r->o.batch_size * bi++;
            if (fd->kind == STK_KIND_ARRAY && !cropped) {
                sl->field_shapes[k] = shapes;
                shapes += (uint64_t)fd->ndim * r->o.batch_size;
            }
            if ((int)k == r->xf_sel) { /* the view shows the transform's output */
                const stk__xform_job *j = &r->xf_job;
                bf->dtype = j->dtype;
                bf->ndim = 4;
                uint64_t nchw[3] = {j->C, j->out_h, j->out_w}, nhwc[3] = {j->out_h, j->out_w, j->C};
                memcpy(bf->shape + 1, j->layout == STK_IMAGE_NCHW ? nchw : nhwc, sizeof nchw);
            }
        }
        sl->batch.records = sl->records;
        sl->batch.nfields = r->nsel;
        sl->batch.fields = sl->fields;
    }
    stk__engine_free_slots(r);
    return STK_OK;
}

static int remember_shards(stk_reader *r, stk_error *err)
{
    size_t n = stk_dataset_nshards(r->ds);
    if (!(r->shard_id = calloc(n ? n : 1, sizeof *r->shard_id)))
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        uint64_t dev, ino;
        stk_shard_file_id(stk_dataset_shard(r->ds, i), &dev, &ino);
        r->shard_id[i].dev = (dev_t)dev;
        r->shard_id[i].ino = (ino_t)ino;
    }
    if (r->o.verify == STK_VERIFY_ONCE && !(r->verified_bits = calloc(r->records / 64 + 1, sizeof(uint64_t))))
        return stk_error_set(err, STK_E_NOMEM, "out of memory for the verified-records bitmap");
    return STK_OK;
}

static int start_workers(stk_reader *r, stk_error *err)
{
    size_t nsh = stk_dataset_nshards(r->ds);
    if (!(r->workers = calloc(r->nworkers, sizeof *r->workers)))
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    for (unsigned i = 0; i < r->nworkers; i++) {
        stk__worker *w = &r->workers[i];
        w->r = r;
        w->index = i;
        w->ord_epoch = UINT64_MAX;
        w->advise_left = 1; /* the first batch may be cold */
        for (unsigned k = 0; k < r->parts_ahead; k++)
            w->ioq[k] = r->io ? stk__io_queue(r->io, r->parts_ahead * i + k) : NULL;
        for (unsigned k = 0; k < 2; k++) {
            if (r->qcache && (!(w->qblk[k] = malloc(sizeof *w->qblk[k] * r->o.batch_size)) ||
                              !(w->qown[k] = malloc(sizeof *w->qown[k] * 2 * r->o.batch_size)) ||
                              !(w->qpre[k] = malloc(sizeof *w->qpre[k] * r->o.batch_size))))
                return stk_error_set(err, STK_E_NOMEM, "out of memory");
        }
        if (!(w->stamp = calloc(nsh ? nsh : 1, sizeof *w->stamp)))
            return stk_error_set(err, STK_E_NOMEM, "out of memory");
        if (r->mix) {
            if (!(w->mixc = malloc(sizeof *w->mixc))) return stk_error_set(err, STK_E_NOMEM, "out of memory");
            stk__mix_cache_init(w->mixc);
        }
        int e = pthread_create(&w->thread, NULL, stk__worker_main, w);
        if (e) return stk_error_set(err, STK_E_IO, "cannot start worker thread: %s", strerror(e));
        w->started = 1;
    }
    return STK_OK;
}

/* Releasing consumed pages costs a re-fault next epoch (half the speed of
 * sequential reading from the page cache, measured): worth it only when the
 * dataset cannot stay in memory anyway. */
static int larger_than_ram(const stk_reader *r)
{
    uint64_t total = stk__reader_file_bytes(r, 0);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 && total > (uint64_t)pages * (uint64_t)page / 2;
}

/* A mixture's statistics per source; its paths for messages. */
static int alloc_mix_stats(stk_reader *r, stk_error *err)
{
    uint32_t S = r->mix ? r->mix->S : 0;
    if (!S) return STK_OK;
    r->st_src_samples = calloc(S, sizeof *r->st_src_samples);
    r->st_src_bytes = calloc(S, sizeof *r->st_src_bytes);
    r->st_src_busy = calloc(S, sizeof *r->st_src_busy);
    if (!r->st_src_samples || !r->st_src_bytes || !r->st_src_busy)
        return stk_error_set(err, STK_E_NOMEM, "out of memory");
    return STK_OK;
}

stk_reader *stk__reader_open(const stk_dataset *ds, const stk__mix_source *src, uint32_t S, char **paths,
                             const stk_reader_options *opts, size_t size, size_t transform_size,
                             stk_error *err)
{
    stk_reader *r = calloc(1, sizeof *r);
    if (!r) {
        for (uint32_t i = 0; paths && i < S; i++) free(paths[i]);
        free(paths);
        return stk_error_set(err, STK_E_NOMEM, "out of memory"), NULL;
    }
    r->ds = ds;
    r->src_path = paths; /* the reader frees them, even when it fails */
    r->nsrc = paths ? S : 0;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->work_cv, NULL);
    pthread_cond_init(&r->ready_cv, NULL);
    pthread_cond_init(&r->knob_cv, NULL);
    r->xf_sel = -1;
    stk__env env; /* the one read of the environment */
    stk__env_read(&env);
    stk__tune_config tc;
    if (resolve_options(r, opts, size, transform_size, &env, &tc, err) || select_fields(r, err) ||
        (src && check_mix_fields(r, err)) || plan_stream(r, src, S, err) || alloc_mix_stats(r, err) ||
        stk__io_plan(r, &env, err))
        goto fail;
    layout_slot(r);
    if (plan_transform(r, err)) goto fail;
    /* Each batch is prepared by all threads at once, in one part each, so
     * the batch the consumer waits for (the first one, above all) comes
     * sooner; tiny batches stay whole. */
    r->parts = r->parts_now = stk__engine_parts(r, r->o.threads);
    if (stk__upload_backend(r, err) || plan_block_cache(r, err) || plan_copy(r, &env, err)) goto fail;
    plan_remote_window(r, &tc);
    plan_knobs(r, &tc);
    r->knob_threads = r->o.threads;
    r->knob_slots = r->o.prefetch + 1;
    r->knob_depth = r->o.io_depth;
    if (alloc_slots(r, err) || stk__upload_open(r, err) || remember_shards(r, err) ||
        stk__io_start(r, &env, err))
        goto fail;
    /* the direct path does not go through the page cache: nothing to release */
    r->release = !r->direct && !r->mix &&
                 (r->o.order == STK_ORDER_SEQUENTIAL || r->o.order == STK_ORDER_QUASI) &&
                 (r->o.release_pages > 0 || (r->o.release_pages < 0 && larger_than_ram(r)));
    r->st_faults0 = stk__major_faults();
    if (r->o.tuning == STK_TUNING_ON) {
        if (!(r->tuner = stk__tune_new(&tc))) {
            stk_error_set(err, STK_E_NOMEM, "out of memory");
            goto fail;
        }
        r->tune_fn = stk__tune_period;
    }
    if (start_workers(r, err)) goto fail;
    if (r->be) {
        int e = pthread_create(&r->copier, NULL, stk__copier_main, r);
        if (e) {
            stk_error_set(err, STK_E_IO, "cannot start the copy thread: %s", strerror(e));
            goto fail;
        }
        r->copier_started = 1;
    }
    return r;
fail:
    stk_reader_close(r);
    return NULL;
}

stk_reader *stk_reader_open_dataset_sized(const stk_dataset *ds, const stk_reader_options *opts, size_t size,
                                          size_t transform_size, stk_error *err)
{
    if (!ds) return stk_error_set(err, STK_E_ARG, "stk_reader_open_dataset: NULL dataset"), NULL;
    return stk__reader_open(ds, NULL, 0, NULL, opts, size, transform_size, err);
}

stk_dataset *stk__dataset_open_opts(const char *path, const stk_reader_options *opts, size_t size,
                                    stk_error *err)
{
    stk_reader_options o;
    stk_reader_options_init_sized(&o, sizeof o);
    if (opts &&
        stk__read_sized(&o, sizeof o, opts, size, STK__READER_OPTIONS_MIN_SIZE, "stk_reader_options", err))
        return NULL;
    stk_remote_options ro;
    stk_remote_options_init(&ro);
    ro.cache_dir = o.cache_dir;
    ro.cache_limit = o.cache_limit;
    ro.endpoint = o.endpoint;
    ro.region = o.region;
    ro.profile = o.profile;
    return stk_dataset_open_remote(path, &ro, err); /* a local path: stk_dataset_open */
}

stk_reader *stk_reader_open_sized(const char *path, const stk_reader_options *opts, size_t size,
                                  size_t transform_size, stk_error *err)
{
    stk_dataset *ds = stk__dataset_open_opts(path, opts, size, err);
    if (!ds) return NULL;
    stk_reader *r = stk_reader_open_dataset_sized(ds, opts, size, transform_size, err);
    if (!r) {
        stk_dataset_close(ds);
        return NULL;
    }
    r->owned = ds;
    return r;
}

void stk_reader_close(stk_reader *r)
{
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    if (r->be && r->released < r->consume) /* closing releases the batch held */
        stk__upload_release(r, stk__slot_index(r, r->consume - 1), NULL);
    r->stop = 1;
    __atomic_store_n(&r->gen, r->gen + 1, __ATOMIC_RELAXED); /* abandon batches in flight */
    pthread_cond_broadcast(&r->work_cv);
    pthread_cond_broadcast(&r->knob_cv);  /* workers the thread knob parks */
    pthread_cond_broadcast(&r->ready_cv); /* the copy thread waits there */
    pthread_mutex_unlock(&r->mu);
    stk__io_cancel(r->io); /* remote GETs of the abandoned batches: not waited for */
    if (r->workers) {
        for (unsigned i = 0; i < r->nworkers; i++) {
            if (r->workers[i].started) pthread_join(r->workers[i].thread, NULL);
            free(r->workers[i].stamp);
            stk__cropper_free(r->workers[i].cropper);
            free(r->workers[i].crop_buf);
            free(r->workers[i].rval);
            free(r->workers[i].mixc);
            for (unsigned k = 0; k < 2; k++) {
                free(r->workers[i].qblk[k]);
                free(r->workers[i].qown[k]);
                free(r->workers[i].qpre[k]);
            }
        }
        free(r->workers);
    }
    if (r->copier_started) pthread_join(r->copier, NULL);
    stk__fill_stop(r);                /* its threads fault the maps in */
    stk__timeline_close(r->tl, NULL); /* every track's thread is done; a failed write is not reported */
    stk__io_close(r->io);             /* after the workers: no read is in flight */
    stk__qcache_free(r->qcache);
    /* Uploads still queued read the staging slots: drain them first. The
     * caller's stream must still exist (it holds the last release events). */
    stk__backend *be = r->be;
    void (*host_free)(stk__backend *, void *) = be ? be->host_free : NULL;
    stk__upload_drain(r); /* queued uploads read the staging slots: finish them first */
    if (r->slots && r->dslots)
        for (unsigned s = 0; s < r->nslots && be; s++) {
            if (r->dslots[s].used) be->event_sync(be, r->dslots[s].ev_copied, NULL);
            /* and the consumer's stream must be done with the device buffers */
            if (r->dslots[s].ev_released) be->event_sync(be, r->dslots[s].ev_released, NULL);
        }
    if (r->slots)
        for (unsigned s = 0; s < r->nslots; s++) {
            if (host_free) {
                if (r->slots[s].buf) host_free(be, r->slots[s].buf);
            } else {
                free(r->slots[s].buf);
            }
            free(r->slots[s].records);
            free(r->slots[s].values);
            free(r->slots[s].shapes);
            free(r->slots[s].sources);
            free(r->slots[s].src_busy);
            free(r->slots[s].source_records);
            for (unsigned p = 0; r->slots[s].zheap && p < r->nworkers; p++) free(r->slots[s].zheap[p].p);
            free(r->slots[s].zheap);
        }
    free(r->slots);
    free(r->slot_map);
    free(r->free_slot);
    stk__upload_close(r);
    free(r->shard_id);
    free(r->shard_huge);
    free(r->verified_bits);
    stk__zcache_free(r->zcache);
    free(r->fields_text);
    stk__tune_free(r->tuner);
    pthread_cond_destroy(&r->knob_cv);
    pthread_cond_destroy(&r->work_cv);
    pthread_cond_destroy(&r->ready_cv);
    pthread_mutex_destroy(&r->mu);
    stk_dataset_close(r->owned);
    for (uint32_t i = 0; i < r->nsrc; i++) free(r->src_path[i]);
    free(r->src_path);
    free(r->mix);
    free(r->st_src_samples);
    free(r->st_src_bytes);
    free(r->st_src_busy);
    free(r);
}
