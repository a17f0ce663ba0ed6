/* packer/pack_stats.c - pack --stats: where the time went, per worker and
 * for the writer, in the JSON result or as a table on stderr. */
#include <stdio.h>
#include <sys/resource.h>

#include "pack.h"

/* One worker's figures, each moment of its life in one of busy and the waits. */
typedef struct {
    double wall, busy, input, window, pool, writer;
} thread_time;

static thread_time thread_time_of(const pk_thread_stats *t, const pk_stage *g)
{
    thread_time x = {.wall = t->wall,
                     .input = g->read,
                     .window = t->window,
                     .pool = g->pool_wait,
                     .writer = g->writer_wait};
    x.busy = t->init + t->prefetch + (t->produce - g->read) + (g->consume - g->pool_wait - g->writer_wait);
    return x;
}

/* The ordered part's CPU time per image: consume less its waits. */
static double serial_us(const pk_run *r)
{
    double s = 0;
    uint64_t n = 0;
    for (unsigned k = 0; k < r->nthreads; k++) {
        const pk_stage *g = &r->stages[k];
        s += g->consume - g->pool_wait - g->writer_wait;
        n += r->tstats[k].consumed;
    }
    return n ? s / (double)n * 1e6 : 0;
}

static void cpu_times(double *user, double *sys)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6;
    *sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* "stats": {...}, inside pack's JSON result; wall is the run's. */
void pk_stats_json(const pk_run *r, double wall)
{
    if (!r || !r->stages) return;
    double user, sys, us = serial_us(r);
    cpu_times(&user, &sys);
    const pk_out_stats *w = &r->out.stats;
    printf("\"stats\": {\"wall_s\": %.4f, \"pipeline_s\": %.4f, \"cpu_user_s\": %.3f, \"cpu_sys_s\": %.3f, "
           "\"cpu_busy_pct\": %.1f, \"threads\": [",
           wall, r->pipeline_s, user, sys, wall > 0 ? (user + sys) / wall * 100 : 0.0);
    for (unsigned k = 0; k < r->nthreads; k++) {
        const pk_thread_stats *t = &r->tstats[k];
        const pk_stage *g = &r->stages[k];
        thread_time x = thread_time_of(t, g);
        printf("%s{\"wall_s\": %.4f, \"busy_s\": %.4f, \"input_wait_s\": %.4f, \"window_wait_s\": %.4f, "
               "\"pool_wait_s\": %.4f, \"writer_wait_s\": %.4f, \"decode_s\": %.4f, \"hash_s\": %.4f, "
               "\"ordered_s\": %.4f, \"produced\": %llu, \"consumed\": %llu}",
               k ? ", " : "", x.wall, x.busy, x.input, x.window, x.pool, x.writer, g->decode, g->hash,
               g->consume - g->pool_wait - g->writer_wait, (unsigned long long)t->produced,
               (unsigned long long)t->consumed);
    }
    printf("], \"ordered_us_per_image\": %.3f, \"ordered_saturates_images_per_s\": %.0f, "
           "\"writer\": {\"bytes\": %llu, \"writes\": %llu, \"write_s\": %.4f, \"hash_s\": %.4f, "
           "\"queue_wait_s\": %.4f, \"commit_wait_s\": %.4f, \"commit_s\": %.4f, \"fsync_s\": %.4f, "
           "\"flush_s\": %.4f, \"flushes\": %llu}}, ",
           us, us > 0 ? 1e6 / us : 0.0, (unsigned long long)w->io.bytes, (unsigned long long)w->io.writes,
           w->io.write, w->io.hash, w->io.queue_wait, w->submit_wait, w->commit, w->io.fsync, w->flush,
           (unsigned long long)w->flushes);
}

/* pack --stats without --json: a table on stderr. */
void pk_stats_text(const pk_run *r, double wall)
{
    if (!r || !r->stages) return;
    double user, sys, us = serial_us(r);
    cpu_times(&user, &sys);
    fprintf(stderr,
            "pack: %u threads, %.2f s (pipeline %.2f s), CPU busy %.0f%% (user %.2f s + sys %.2f s)\n"
            "  thread     busy   input  window    pool  writer  images (s; input = reading files,\n"
            "                                                 window = the oldest image a window behind)\n",
            r->nthreads, wall, r->pipeline_s, wall > 0 ? (user + sys) / wall * 100 : 0.0, user, sys);
    for (unsigned k = 0; k < r->nthreads; k++) {
        thread_time x = thread_time_of(&r->tstats[k], &r->stages[k]);
        fprintf(stderr, "  %6u %8.2f %7.2f %7.2f %7.2f %7.2f %7llu\n", k, x.busy, x.input, x.window, x.pool,
                x.writer, (unsigned long long)r->tstats[k].produced);
    }
    const pk_out_stats *w = &r->out.stats;
    fprintf(
        stderr,
        "  ordered part (in order, one at a time): %.2f us/image of CPU, one core's worth at %.0f images/s\n"
        "  writer: %.2f GB in %llu writes: write %.2f s, hash %.2f s; commits %.2f s (fsync %.2f s),\n"
        "          background flushes %.2f s (%llu); waited for: queue %.2f s, commits %.2f s\n",
        us, us > 0 ? 1e6 / us : 0.0, (double)w->io.bytes / 1e9, (unsigned long long)w->io.writes, w->io.write,
        w->io.hash, w->commit, w->io.fsync, w->flush, (unsigned long long)w->flushes, w->io.queue_wait,
        w->submit_wait);
}
