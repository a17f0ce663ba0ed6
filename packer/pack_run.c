/* packer/pack_run.c - one pack run: the listing, a fresh start or a resume
 * of this part, the pipeline, the part's record, and the merge of the parts
 * into the dataset (at once for a single part, or pack --merge). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pack.h"
#include "parts.h"

/* --json: where the part came from, when Slurm's variables gave it. */
static void pk_part_from_json(const pk_opts *o)
{
    if (!o->part_from[0]) return;
    printf("\"part_from\": ");
    cli_json_string(stdout, o->part_from);
    printf(", ");
}

static int finish_merge(const pk_opts *o, double t0, const pk_run *r)
{
    pk_merge_result mr;
    stk_error err;
    const char *shown = o->url ? o->url : o->out; /* s3://: the address, not the staging directory */
    if (o->up ? pk_remote_merge(o, r ? o->parts : 0, &mr, &err)
              : pk_merge(o->out, r ? o->parts : 0, &mr, &err)) {
        fprintf(stderr, "pack: %s\n", err.msg);
        return CLI_EXIT_FAIL;
    }
    double el = cli_now() - t0;
    bool orig = r && o->image_format == PK_IMG_ORIGINAL; /* this run's inputs, kept or re-encoded */
    if (o->json) {
        printf("{\"ok\": true, \"merged\": true, \"packed\": %llu, \"skipped\": %llu, \"shards\": %zu, "
               "\"seconds\": %.3f, \"images_per_s\": %.1f, \"input_mb_per_s\": %.2f, ",
               (unsigned long long)mr.packed, (unsigned long long)mr.skipped, mr.nshards, el,
               r && el > 0 ? (double)r->done / el : 0.0, r && el > 0 ? (double)r->in_bytes / el / 1e6 : 0.0);
        pk_stats_json(r, el);
        if (orig)
            printf("\"kept_original\": %llu, \"reencoded\": %llu, \"made_baseline\": %llu, ",
                   (unsigned long long)r->kept, (unsigned long long)r->reencoded,
                   (unsigned long long)r->baseline);
        if (r && o->image_format != PK_IMG_RAW)
            printf("\"jpeg_restart\": %u, \"restart_markers\": %llu, ", o->jpeg_restart,
                   (unsigned long long)r->restarted);
        pk_remote_json(o);
        pk_part_from_json(o);
        printf("\"output\": ");
        cli_json_string(stdout, shown);
        printf("}\n");
    } else if (!o->quiet) {
        fprintf(stderr, "pack: %s: %llu image%s packed into %zu shard%s, %llu skipped%s (%.1f s%s)\n", shown,
                (unsigned long long)mr.packed, cli_plural(mr.packed), mr.nshards, cli_plural(mr.nshards),
                (unsigned long long)mr.skipped, mr.skipped ? ", listed in skipped.tsv" : "", el,
                r ? "" : ", merge");
        if (orig)
            fprintf(stderr, "pack: %llu JPEG inputs stored as they were, %llu re-encoded at quality %d\n",
                    (unsigned long long)r->kept, (unsigned long long)r->reencoded, o->quality);
        if (orig && (o->jpeg_baseline || o->jpeg_restart))
            fprintf(stderr, "pack: %llu progressive JPEG inputs stored as baseline (the same coefficients)\n",
                    (unsigned long long)r->baseline);
        if (r && o->image_format != PK_IMG_RAW && o->jpeg_restart)
            fprintf(stderr, "pack: %llu JPEG values with a restart marker every %u MCU%s (lossless)\n",
                    (unsigned long long)r->restarted, o->jpeg_restart, cli_plural(o->jpeg_restart));
    }
    if (o->stats && !o->json) pk_stats_text(r, el);
    return mr.skipped ? CLI_EXIT_SKIPPED : CLI_EXIT_OK;
}

/* Reproduce the reasons for inputs skipped before an interruption, and say
 * them again as a fresh run would. A gap that now decodes means the input
 * changed: start the part over. Returns 0, -1 on error, 1 when --on-error
 * fail meets one of them. */
static int redo_gaps(pk_run *r, const uint64_t *gaps, size_t n, bool *restart)
{
    void *w = pk_worker_init(r, 0);              /* a worker of its own */
    uint8_t *slot = malloc(pk_slot_bytes(r->o)); /* the image, and its block sums after it (produce) */
    int rc = w && slot ? 0 : -1;
    for (size_t k = 0; !rc && k < n && !*restart; k++) {
        pk_result res;
        memset(&res, 0, sizeof res);
        pk_produce(r, w, gaps[k], slot, &res);
        if (res.status == 0) {
            *restart = true;
            break;
        }
        pk_report_bad(r, gaps[k], res.msg);
        if (r->o->fail_fast) rc = 1;
        else if (!pk_add_skip(r, gaps[k], res.msg)) rc = -1;
    }
    if (w) pk_worker_fini(w);
    free(slot);
    return rc;
}

static void note_dropped(void *user, const char *why)
{
    const pk_run *r = user;
    if (!r->o->quiet) fprintf(stderr, "pack: redoing a shard of the interrupted run: %s\n", why);
}

/* Decide between a fresh start, a resume and "already done". Returns -1 on
 * error, 0 to pack from *next, 1 when the part is already complete. */
static int prepare(pk_run *r, uint64_t params, uint64_t first, uint64_t end, uint64_t *next)
{
    const pk_opts *o = r->o;
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)params);
    if (pk_exists(o->out, STK_MANIFEST_NAME)) {
        /* Killed between committing its manifest and removing its own part
         * record: the dataset of this very command is complete. "Already
         * complete": the merge redoes its last step (the same bytes) and
         * removes the bookkeeping, as the first run would have. Likewise part
         * K of N run again after the merge (a requeued array task): its
         * record is there with these parameters, nothing to do. */
        if (!o->force && pk_part_params(o->out, o->part, o->parts) == params) return 1;
        if (!o->force) {
            fprintf(stderr, "pack: %s already holds a dataset (manifest.json); use --force to replace it\n",
                    o->url ? o->url : o->out);
            return -1;
        }
        if (o->force_in_place) {
            pk_remove_in(o->out, STK_MANIFEST_NAME); /* first: the directory stops being a dataset */
            pk_remove_in(o->out, "listing.tsv");
            pk_remove_in(o->out, "skipped.tsv");
        } /* else the old dataset stays until the merge commits the new manifest */
    }
    uint64_t done_params = pk_part_params(o->out, o->part, o->parts);
    char *state = pk_part_file(o->out, o->part, o->parts, ".state"), *old = NULL;
    size_t len = 0;
    FILE *f = state ? fopen(state, "r") : NULL;
    if (f) {
        if (getline(&old, &len, f) < 0) {
            free(old);
            old = NULL;
        }
        fclose(f);
    }
    bool same = (done_params ? done_params == params : old && !strncmp(old, hex, 16));
    bool present = done_params || old;
    free(old);
    if (present && !same && !o->force) {
        fprintf(stderr,
                "pack: %s holds part %u/%u of a pack with other inputs or flags; use --force to start over\n",
                o->url ? o->url : o->out, o->part, o->parts);
        free(state);
        return -1;
    }
    if (done_params && same) {
        free(state);
        return 1;
    }
    if (!same || o->force) pk_remove_part(r, o);
    stk_error err;
    int rc = stk_file_commit(state, hex, 16, &err);
    free(state);
    if (rc) {
        fprintf(stderr, "pack: %s\n", err.msg);
        return -1;
    }
    uint64_t *gaps = NULL;
    size_t ngaps = 0;
    bool restart = false;
    if (pk_out_resume(&r->out, first, end, next, &gaps, &ngaps, note_dropped, r, &err)) {
        fprintf(stderr, "pack: %s\n", err.msg);
        return -1;
    }
    if (o->up && pk_remote_sync_kept(r)) { /* s3://: what the killed run had not uploaded */
        free(gaps);
        return -1;
    }
    if (*next > first && !o->quiet)
        fprintf(stderr,
                "pack: resuming: kept %zu verified shard%s (%llu records), continuing at input %llu\n",
                r->out.nshards, cli_plural(r->out.nshards), (unsigned long long)pk_out_records(&r->out),
                (unsigned long long)*next);
    rc = redo_gaps(r, gaps, ngaps, &restart);
    free(gaps);
    if (rc == 1) { /* --on-error fail: the earlier run skipped a bad input */
        pk_out_abort(&r->out, true);
        pk_remove_part(r, o);
        return -1;
    }
    if (rc == 0 && restart) { /* the input changed under the kept shards */
        pk_out_abort(&r->out, true);
        for (size_t i = 0; i < r->out.nshards; i++) free(r->out.shards[i].path);
        r->out.nshards = r->out.opened = 0;
        for (size_t i = 0; i < r->nskips; i++) free(r->skips[i].reason);
        r->nskips = 0;
        *next = first;
    }
    r->packed = pk_out_records(&r->out);
    return rc;
}

static int finish_part(pk_run *r, uint64_t params, uint64_t first, uint64_t end, const char *pack_json)
{
    if (pk_out_flush(&r->out, &r->err)) {
        fprintf(stderr, "pack: %s\n", r->err.msg);
        return -1;
    }
    if (pk_write_slice(r, ".listing.tsv", first, end, false) ||
        pk_write_slice(r, ".skipped.tsv", first, end, true))
        return -1;
    pk_part part = {.part = r->o->part,
                    .parts = r->o->parts,
                    .params = params,
                    .first = first,
                    .end = end,
                    .packed = r->packed,
                    .skipped = r->nskips,
                    .nclasses = r->L.nclasses,
                    .classes = r->L.classes,
                    .pack_json = pack_json,
                    .schema = &r->schema,
                    .shards = r->out.shards,
                    .nshards = r->out.nshards};
    if (pk_part_commit(r->o->out, &part, &r->err)) {
        fprintf(stderr, "pack: %s\n", r->err.msg);
        return -1;
    }
    return r->o->up ? pk_remote_finish_part(r) : 0;
}

static int run_pack(const pk_opts *o)
{
    pk_run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    double t0 = cli_now();
    char msg[STK_ERROR_MSG_MAX];
    /* An OUTDIR that exists is held before the (long) listing, so a second
     * writer is refused at once; a new one is made after it, so a mistyped
     * INPUT leaves no directory behind. Either way before OUTDIR is touched. */
    stk_dir_lock *lock = NULL;
    if (pk_is_dir(o->out) && !(lock = pk_lock_out(o))) return CLI_EXIT_FAIL;
    if (pk_listing_load(o->input, &r.L, msg, sizeof msg)) {
        fprintf(stderr, "pack: %s\n", msg);
        stk_dir_lock_release(lock);
        return CLI_EXIT_FAIL;
    }
    int status = CLI_EXIT_FAIL;
    uint64_t first, end, next = 0, per_shard = 0, params = 0;
    char *pack_json = NULL, prefix[32];
    ino_t replacing = 0; /* --force over a dataset (its manifest's inode): new shard names beside it */
    pk_part_range(r.L.n, o->part, o->parts, &first, &end);
    if (o->parts == 1) snprintf(prefix, sizeof prefix, "shard");
    else snprintf(prefix, sizeof prefix, "part-%04u-of-%04u", o->part, o->parts);
    if (pk_make_schema(o, &r.schema) || pk_ensure_dir(o->out) || (!lock && !(lock = pk_lock_out(o))))
        goto out;
    replacing = o->force && !o->force_in_place ? pk_manifest_ino(o->out) : 0;
    if (replacing && stk_dataset_new_prefix(o->out, prefix, prefix, sizeof prefix, &r.err)) {
        fprintf(stderr, "pack: %s\n", r.err.msg);
        goto out;
    }
    per_shard = pk_records_per_shard(o, &r.schema);
    if (per_shard > r.L.n) per_shard = r.L.n; /* no shard can hold more; every part computes the same */
    if (!(pack_json = pk_pack_json(&r, per_shard))) {
        fprintf(stderr, "pack: out of memory\n");
        goto out;
    }
    params = pk_pack_hash(&r, pack_json);
    if (pk_out_init(&r.out, o->out, prefix, &r.schema, per_shard, &r.err)) {
        fprintf(stderr, "pack: %s\n", r.err.msg);
        goto out;
    }
    r.out.up = o->up;
    for (unsigned f = 0; f < 4; f++) r.out.zlevel[f] = o->zstd[f];
    r.out.zblock = o->block_bytes;
    r.out.zthreads = o->threads; /* blocks compressed in parallel, placed in order: the same bytes */
    int prep = prepare(&r, params, first, end, &next);
    if (prep < 0) goto out;
    /* s3://, 1 of 1 complete here but killed before its merge: what it had
     * not uploaded yet goes up first (a part of N found complete was
     * committed in s3:// with every shard in place). */
    if (prep == 1 && o->up && o->parts == 1 && pk_remote_sync_record(o)) goto out;
    if (prep == 0) {
        cli_progress_start_units(&r.bar, "pack", "files", end - next, o->quiet || o->json);
        /* A few images per thread, twice as many when images are small (up
         * to 1 MiB: 4 MiB per thread at most): the workers stop only when
         * the oldest unconsumed image is a window behind, so one slow file
         * (a large progressive JPEG) does not idle the others. */
        size_t slot = pk_slot_bytes(o);
        size_t window = (slot <= ((size_t)1 << 20) ? 8 : 4) * ((size_t)o->threads + 1);
        /* Beyond the window, what the writers hold: the open shard's and the
         * one being committed at a shard boundary (fewer would only make the
         * consumer wait for the disk, never deadlock). Images the writer
         * copies come back at once: one buffer is enough for them. */
        size_t img = pk_image_bytes(o);
        size_t lent = pk_lent_whole(o, img) ? (size_t)((STK_WRITER_LENT_MAX + img - 1) / img) + 1 : 1;
        r.pool = pk_pool_new(window + 2 * lent, slot);
        r.nthreads = o->threads;
        r.tstats = calloc(o->threads, sizeof *r.tstats);
        r.stages = calloc(o->threads, sizeof *r.stages);
        if (!r.tstats || !r.stages) { /* only the figures are lost */
            free(r.tstats), free(r.stages);
            r.tstats = NULL, r.stages = NULL;
        }
        pk_pipeline pl = {.threads = o->threads,
                          .stats = r.tstats,
                          .window = window,
                          .pool = r.pool,
                          .first = next,
                          .end = end,
                          .user = &r,
                          .thread_init = pk_worker_init,
                          .thread_fini = pk_worker_fini,
                          .produce = pk_produce,
                          .consume = pk_consume,
                          .prefetch = pk_prefetch,
                          .ahead = 2 * window};
        double tp = cli_now();
        int prc = r.pool ? pk_pipeline_run(&pl) : -1;
        r.pipeline_s = cli_now() - tp;
        cli_progress_end(&r.bar);
        if (prc < 0) fprintf(stderr, "pack: cannot start %u threads or allocate the slots\n", o->threads);
        if (r.fatal) fprintf(stderr, "pack: %s\n", r.err.msg);
        if (r.failed_input) pk_remove_part(&r, o);
        if (prc || r.fatal) {
            pk_out_abort(&r.out, r.failed_input);
            goto out;
        }
        if (finish_part(&r, params, first, end, pack_json)) goto out;
    }
    if (o->parts == 1) status = finish_merge(o, t0, &r);
    else {
        uint64_t packed = r.packed, skipped = r.nskips, nshards = r.out.nshards;
        if (prep == 1)
            pk_part_counts(o->out, o->part, o->parts, &packed, &skipped,
                           &nshards); /* as the first run said */
        status = skipped ? CLI_EXIT_SKIPPED : CLI_EXIT_OK;
        double el = cli_now() - t0;
        if (o->json) {
            printf(
                "{\"ok\": true, \"merged\": false, \"part\": [%u, %u], \"packed\": %llu, \"skipped\": %llu, "
                "\"shards\": %llu, ",
                o->part, o->parts, (unsigned long long)packed, (unsigned long long)skipped,
                (unsigned long long)nshards);
            pk_remote_json(o);
            pk_part_from_json(o);
            pk_stats_json(&r, el);
            printf("\"seconds\": %.3f}\n", el);
        } else if (o->stats) pk_stats_text(&r, el);
        if (!o->json && !o->quiet)
            fprintf(
                stderr,
                prep == 1
                    ? "pack: part %u/%u was already complete; run `pack --merge %s` once all parts are done\n"
                    : "pack: part %u/%u done; run `pack --merge %s` once all parts are done\n",
                o->part, o->parts, o->url ? o->url : o->out);
    }
out:
    if (status == CLI_EXIT_FAIL && replacing && pk_manifest_ino(o->out) == replacing) {
        if (r.out.dir) { /* this run's new shards and records: no manifest names them */
            pk_out_abort(&r.out, true);
            pk_remove_part(&r, o);
        }
        fprintf(stderr, "pack: the old dataset in %s is intact\n", o->url ? o->url : o->out);
    }
    for (size_t i = 0; i < r.nskips; i++) free(r.skips[i].reason);
    free(r.skips);
    free(pack_json);
    pk_out_free(&r.out); /* the writers have given every lent image back */
    free(r.tstats);
    free(r.stages);
    pk_pool_free(r.pool);
    pk_listing_free(&r.L);
    stk_dir_lock_release(lock); /* last: every file of this run is written or removed */
    return status;
}

/* OUT in s3://: the run in its staging directory (pack_remote.c). */
int pk_run_pack(const pk_opts *o0)
{
    pk_opts o;
    char stage[4096];
    int rc = pk_remote_begin(&o, o0, stage, sizeof stage) ? CLI_EXIT_FAIL : run_pack(&o);
    pk_remote_end(&o);
    return rc;
}

/* pack --merge: the whole directory, held while the parts become a dataset. */
static int run_merge(const pk_opts *o)
{
    stk_dir_lock *lock = NULL;
    if (pk_is_dir(o->out) && !(lock = pk_lock_out(o)))
        return CLI_EXIT_FAIL; /* none: the merge says what is missing */
    ino_t old = pk_manifest_ino(o->out);
    int rc = finish_merge(o, cli_now(), NULL);
    if (rc == CLI_EXIT_FAIL && old && pk_manifest_ino(o->out) == old && lock)
        fprintf(stderr, "pack: the old dataset in %s is intact\n", o->url ? o->url : o->out);
    stk_dir_lock_release(lock);
    return rc;
}

int pk_run_merge(const pk_opts *o0)
{
    pk_opts o;
    char stage[4096];
    int rc = pk_remote_begin(&o, o0, stage, sizeof stage) ? CLI_EXIT_FAIL : run_merge(&o);
    pk_remote_end(&o);
    return rc;
}
