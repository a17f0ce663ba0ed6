/* reader/tune.c - the online tuner (tune.h): a hill climb over the engine's
 * knobs, one knob and one step at a time, judged on the reader's own
 * counters.
 *
 * The baseline is taken once the ring has turned once (prefetch + 1 batches:
 * until then every slot is new, its pages faulted in as the workers first
 * fill it, and the consumer waits on that, not on the knobs). Then every
 * period of batches (8 at first, doubling while nothing changes, up to 256;
 * and at least PERIOD_WALL of wall time: a shorter one is extended, its
 * figures would be noise) it looks at the period just over:
 *   wait    the consumer's time blocked in next, against wall time;
 *   busy    the workers' time preparing parts, against threads x wall;
 *   cpu     the workers' CPU time (their thread clocks), and the rest of the
 *           process's (the trainer's), in cores;
 *   demand  the cores the process would keep busy: the workers' busy time
 *           less their waits for direct reads, and the rest's CPU;
 *   step    the consumer's time per batch outside next;
 *   ready   the batches ready when next was called, on average.
 * Input-bound (wait > 5%):
 *   - workers busy (>= 85%): on the direct path with half their time
 *     waiting for reads, a deeper I/O queue; else a thread more when the
 *     CPU budget has room for one (their CPU per thread); else a thread
 *     fewer (a trim) when the process wants more cores than it has (demand
 *     above the cores by a quarter) while it has most of them (its CPU at
 *     least 3/4 of them: the workers and the trainer take turns on them,
 *     and one thread fewer may make as many batches and give the trainer
 *     its core back; workers slowed by other processes' load, the process
 *     getting far less than its cores, are not that; "most", not "all":
 *     on a VM a busy worker's wall time holds time its vCPU did not run,
 *     page faults the host serves, so a process alone on its cores gets
 *     less CPU than it has busy threads), or when a thread more was just
 *     tried here and did not pay (still held); else a deeper I/O queue;
 *   - workers idle while the consumer waits (the hand-off, bursts,
 *     latency): a trim when the process wants more cores than it has, as
 *     above; else a deeper prefetch (up to 4 batches a thread, at least 8:
 *     what covers a step's jitter; more only holds memory) once two periods
 *     running with the same knobs ask for it, the second with the workers'
 *     CPU per batch not a quarter below the first's (the first periods after
 *     open are often a warm-up: the workers' first touches of the data cost
 *     them several times the CPU per batch of later periods, falling from
 *     period to period, and the consumer waits on that; one period alone
 *     may be a burst), then a deeper I/O queue, then a thread.
 * On the direct path, workers that spend half their time waiting for reads
 * want a deeper I/O queue whatever the wait: a shallow queue costs CPU per
 * batch (and threads) even when the consumer does not wait; and after a
 * deeper queue paid, the next is tried, until one does not.
 * Compute-bound (wait < 1.5%, two periods running with the same knobs): one
 * thread fewer when the others could do the workers' work (their busy time
 * against (threads - 1) x wall stays under 80%) and the ready queue is not
 * draining (mean ready batches under 3/4 of the last period's): a period
 * served from a full queue by saturated workers is not a compute-bound
 * trainer. (The period does not double while such a move waits for its
 * second period: from a start with threads to spare, the first goes 8
 * batches after the first decision.)
 * Each change is a trial judged at the next decisions, against the mean of
 * the whole stretch before it with the knobs unchanged:
 *   - a move up pays when throughput rose by 5% or the wait fell by a
 *     quarter (and a point), or, for a deeper I/O queue, the workers' CPU
 *     per batch or read-wait share fell by a tenth or a quarter; it is
 *     undone at once when throughput fell by more than the noise (twice the
 *     mean period-to-period change of batches/s with the knobs unchanged, at
 *     least 5%) while the consumer waited more (a consumer slowed without
 *     waiting was slowed by something else), else it runs on for up to 3
 *     periods, judged on all of them; a deeper I/O queue (it takes no CPU
 *     from the consumer) is judged on the rate the consumer would have had
 *     at its step before the change (a step stretched by other load is not
 *     the queue's doing), and when the consumer waited under 5% before it,
 *     never undone at once: one period's wait is the worker descheduled,
 *     and the CPU it saves shows over the trial's periods together; there,
 *     with the consumer under 5% wait during it as well, it is kept unless
 *     it costs (the rate within the noise, the CPU per batch not up by a
 *     quarter), as a trim is;
 *   - a trim is kept when throughput stayed within 5%, or within the noise
 *     over 3 periods; undone when it fell beyond the noise while the
 *     consumer waited more (measured on, up to 3 periods, when it did not);
 *   - a thread taken away while compute-bound is kept while the wait stays
 *     under 5% and the ready queue does not drain (a queue that drains is
 *     measured on, up to 3 periods), else undone.
 * An undone move is not tried again for 8 decisions, twice as long each
 * time it fails again; after a thread more paid a trim is held the same
 * way, and after a trim paid a thread more: noise and a flat optimum do not
 * make the knobs swing. Workers over their CPU budget (by a quarter and a
 * quarter of a core) lose a thread whatever the wait.
 * A step time that moves by more than 30% (and at least one of the two is
 * 1 ms or more: a consumer that takes no step has none to compare) for two
 * periods running is a new phase (evaluation, another model stage): the
 * period starts over at 8 and the failed moves are forgotten.
 *
 * The CPU budget, unless opts.cpu_budget sets it: the CPUs this process may
 * run on (sched_getaffinity) divided by the ranks of the node
 * ($LOCAL_WORLD_SIZE, else $SLURM_NTASKS_PER_NODE, else 1), minus the cores
 * the rest of the process kept busy in the last period (process CPU time
 * less the workers'), and at least one core. The trim compares the demand
 * with those cores (not the budget). */
#define _GNU_SOURCE
#include "tune.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PERIOD_MIN 8
#define PERIOD_MAX 256
#define PERIOD_WALL 0.025   /* s: a shorter period is extended */
#define PERIOD_STRETCH 4096 /* ... up to this many batches */
#define WAIT_HIGH 0.05      /* input-bound above */
#define WAIT_LOW 0.015      /* compute-bound below: a thread may go */
#define BUSY_HIGH 0.85      /* workers saturated */
#define CAPACITY 0.8        /* a thread may go: busy / ((threads - 1) x wall) under this */
#define DRAIN 0.75          /* the ready queue draining: mean ready below this of the last period's */
#define GAIN 0.05           /* a move up pays: throughput up by this much ... */
#define WAIT_CUT 0.75       /* ... or the wait down to this fraction (and by WAIT_CUT_ABS) */
#define WAIT_CUT_ABS 0.01
#define CPU_CUT 0.9           /* a deeper I/O queue pays: CPU per batch down to this fraction ... */
#define READ_CUT 0.75         /* ... or the read-wait share down to this fraction */
#define CPU_RISE 1.25         /* compute-bound, it is kept unless its CPU per batch rose above this */
#define NOISE_MAX 0.5         /* the noise margin's cap */
#define TRIAL_MAX 3           /* periods a trial may run while its outcome is unsure */
#define PREFETCH_PER_THREAD 4 /* prefetch grows up to this many batches a thread ... */
#define PREFETCH_COVER 8      /* ... and at least to this */
#define PHASE 0.30            /* a step time change that starts a new phase */
#define STEP_MIN 1e-3         /* steps shorter than this count as none */
#define HOLD 8                /* decisions a failed move waits (doubling) */
#define HOLD_MAX 1024
#define READ_BOUND 0.5 /* direct path: workers' time waiting for reads */
#define OVER_BUDGET 1.25
#define OVER_BUDGET_ABS 0.25
#define OVERSUB_ABS 0.25 /* the process wants more cores than it has by this much ... */
#define HAS_CORES 0.75   /* ... while its CPU is at least this share of them */
#define WARMING 0.75     /* the workers' CPU per batch falling below this of the last period's */

void stk__tune_init(stk__tuner *t, const stk__tune_config *c)
{
    memset(t, 0, sizeof *t);
    t->c = *c;
    t->period = t->next = PERIOD_MIN;
    t->noise = GAIN;
    t->budget_now = c->cpu_budget > 0 ? c->cpu_budget : c->cores;
}

static int is_threads(int m)
{
    return m == STK__MOVE_THREADS_UP || m == STK__MOVE_THREADS_DOWN || m == STK__MOVE_THREADS_TRIM;
}

static const char *move_name(int m)
{
    return is_threads(m) ? "threads" : m == STK__MOVE_PREFETCH_UP ? "prefetch" : "io_depth";
}

static unsigned knob_of(const stk__knobs *k, int m)
{
    return is_threads(m) ? k->threads : m == STK__MOVE_PREFETCH_UP ? k->prefetch : k->io_depth;
}

/* The deepest prefetch the tuner grows to with k's threads: enough batches
 * ahead to cover a step's jitter; beyond it a deeper ring only holds memory. */
static unsigned prefetch_cover(const stk__knobs *k)
{
    unsigned p = PREFETCH_PER_THREAD * (k->threads ? k->threads : 1);
    return p > PREFETCH_COVER ? p : PREFETCH_COVER;
}

/* Whether move m is possible from k: within bounds, unpinned, not held. */
static int can_move(const stk__tuner *t, const stk__knobs *k, int m)
{
    if (t->decisions < t->hold_until[m]) return 0;
    switch (m) {
    case STK__MOVE_THREADS_UP:
        return !(t->c.pin & STK_PIN_THREADS) && k->threads < t->c.max.threads;
    case STK__MOVE_THREADS_DOWN:
    case STK__MOVE_THREADS_TRIM:
        return !(t->c.pin & STK_PIN_THREADS) && k->threads > 1;
    case STK__MOVE_PREFETCH_UP:
        return !(t->c.pin & STK_PIN_PREFETCH) && k->prefetch < t->c.max.prefetch &&
               k->prefetch < prefetch_cover(k);
    case STK__MOVE_DEPTH_UP:
        return !(t->c.pin & STK_PIN_IO_DEPTH) && k->io_depth < t->c.max.io_depth;
    }
    return 0;
}

/* The knobs after move m from k: threads one at a time, the depths doubled. */
static stk__knobs moved(const stk__tuner *t, stk__knobs k, int m)
{
    switch (m) {
    case STK__MOVE_THREADS_UP:
        k.threads++;
        break;
    case STK__MOVE_THREADS_DOWN:
    case STK__MOVE_THREADS_TRIM:
        k.threads--;
        break;
    case STK__MOVE_PREFETCH_UP: {
        unsigned cap = prefetch_cover(&k) < t->c.max.prefetch ? prefetch_cover(&k) : t->c.max.prefetch;
        k.prefetch = k.prefetch * 2 < cap ? k.prefetch * 2 : cap;
        break;
    }
    case STK__MOVE_DEPTH_UP:
        k.io_depth = k.io_depth * 2 < t->c.max.io_depth ? k.io_depth * 2 : t->c.max.io_depth;
        break;
    }
    return k;
}

/* The figures between two samples. */
typedef struct {
    double dt, wait, thr, step, busy, cpu_w, trainer, read_share, cpu_batch, ready;
    double demand; /* cores the process would keep busy: the workers' busy time less their
                      read waits, and the rest of the process's CPU */
    uint64_t batches;
} figures;

static int period_figures(const stk__tune_sample *a, const stk__tune_sample *b, figures *f)
{
    memset(f, 0, sizeof *f);
    f->dt = b->t - a->t;
    f->batches = b->batches - a->batches;
    if (f->dt <= 0 || f->batches == 0) return 0;
    double wait = b->wait_s - a->wait_s, busy = b->busy_s - a->busy_s;
    double wcpu = b->worker_cpu_s - a->worker_cpu_s, pcpu = b->process_cpu_s - a->process_cpu_s;
    unsigned threads = b->knobs.threads ? b->knobs.threads : 1;
    f->wait = wait > 0 ? wait / f->dt : 0;
    if (f->wait > 1) f->wait = 1;
    f->thr = (double)f->batches / f->dt;
    f->step = f->dt > wait ? (f->dt - wait) / (double)f->batches : 0;
    f->busy = busy > 0 ? busy / (threads * f->dt) : 0;
    f->cpu_w = wcpu > 0 ? wcpu / f->dt : 0;
    f->cpu_batch = wcpu > 0 ? wcpu / (double)f->batches : 0;
    f->trainer = pcpu > wcpu ? (pcpu - wcpu) / f->dt : 0;
    f->read_share = busy > 0 ? (b->read_wait_s - a->read_wait_s) / busy : 0;
    f->ready = b->ready_sum > a->ready_sum ? (double)(b->ready_sum - a->ready_sum) / (double)f->batches : 0;
    f->demand = f->busy * threads * (f->read_share < 1 ? 1 - f->read_share : 0) + f->trainer;
    return 1;
}

static int new_phase(double ref, double step)
{
    if (ref < STEP_MIN && step < STEP_MIN) return 0; /* no step before, none now */
    double lo = ref < step ? ref : step, hi = ref < step ? step : ref;
    return hi - lo > PHASE * (lo > 0 ? lo : hi) || (lo < STEP_MIN) != (hi < STEP_MIN);
}

static void fail_move(stk__tuner *t, int m)
{
    unsigned hold = HOLD << (t->fails[m] < 7 ? t->fails[m] : 7);
    t->hold_until[m] = t->decisions + (hold < HOLD_MAX ? hold : HOLD_MAX);
    t->fails[m]++;
}

/* Move m is not tried for a hold (as after its last failure), without
 * counting a failure. */
static void hold_move(stk__tuner *t, int m)
{
    unsigned hold = HOLD << (t->fails[m] < 7 ? t->fails[m] : 7);
    uint64_t until = t->decisions + (hold < HOLD_MAX ? hold : HOLD_MAX);
    if (t->hold_until[m] < until) t->hold_until[m] = until;
}

enum { JUDGE_FAILED, JUDGE_PAID, JUDGE_UNSURE };

/* The noise margin: twice the mean period-to-period change of batches/s. */
static double noise_margin(const stk__tuner *t)
{
    double m = 2 * t->noise;
    return m < GAIN ? GAIN : m > NOISE_MAX ? NOISE_MAX : m;
}

/* The trial's rate (f) had the consumer's step stayed as it was before
 * it: the wait of the trial's periods per batch on top of the step before. */
static double rate_at_step(const stk__tuner *t, const figures *f)
{
    double per = t->step_before + (f->thr > 0 ? f->wait / f->thr : 0);
    return t->step_before > 0 && per > 0 ? 1 / per : f->thr;
}

/* Judge the change made earlier against the trial's periods so far (f) and
 * its last period (last). */
static int judge(const stk__tuner *t, int m, const figures *f, const figures *last)
{
    int unsure_or_failed = t->trial_periods >= TRIAL_MAX ? JUDGE_FAILED : JUDGE_UNSURE;
    if (m == STK__MOVE_THREADS_DOWN) {
        if (f->wait >= WAIT_HIGH) return JUDGE_FAILED;
        if (t->ready_before > 0 && last->ready < t->ready_before * DRAIN) /* served from the queue */
            return unsure_or_failed;
        return JUDGE_PAID;
    }
    if (m == STK__MOVE_THREADS_TRIM) { /* kept unless throughput fell beyond the noise */
        double margin = noise_margin(t);
        if (f->thr >= t->thr_before * (1 - GAIN)) return JUDGE_PAID;
        if (f->thr < t->thr_before * (1 - margin)) /* slower through the loader: undone */
            return f->wait > t->wait_before + WAIT_CUT_ABS ? JUDGE_FAILED : unsure_or_failed;
        /* within the noise: measured on, and kept if it stays there */
        return t->trial_periods >= TRIAL_MAX ? JUDGE_PAID : JUDGE_UNSURE;
    }
    /* a deeper I/O queue takes no CPU from the consumer: judged on the rate
     * at the consumer's step before it (its step stretched by other load is
     * not the queue's doing) */
    double thr = m == STK__MOVE_DEPTH_UP ? rate_at_step(t, f) : f->thr;
    if (thr > t->thr_before * (1 + GAIN) ||
        (f->wait < t->wait_before * WAIT_CUT && t->wait_before - f->wait > WAIT_CUT_ABS))
        return JUDGE_PAID;
    if (m == STK__MOVE_DEPTH_UP && f->wait < WAIT_HIGH && thr >= t->thr_before * (1 - GAIN) &&
        ((t->cpu_before > 0 && f->cpu_batch < t->cpu_before * CPU_CUT) ||
         (t->read_before >= READ_BOUND && f->read_share < t->read_before * READ_CUT)))
        return JUDGE_PAID; /* the same work for less CPU, or less waiting on reads */
    double margin = noise_margin(t);
    /* compute-bound before and during it: a deeper queue is kept unless it
     * costs, as a trim is (a deeper queue does not cost CPU per batch as a
     * rule, and a period's CPU per batch moves by a third under load, which
     * hides the tenth it saves): after all its periods, when the consumer's
     * rate held within the noise and the CPU per batch did not rise by a
     * quarter */
    if (m == STK__MOVE_DEPTH_UP && t->wait_before < WAIT_HIGH && f->wait < WAIT_HIGH &&
        thr >= t->thr_before * (1 - margin) && f->cpu_batch <= t->cpu_before * CPU_RISE)
        return t->trial_periods >= TRIAL_MAX ? JUDGE_PAID : JUDGE_UNSURE;
    /* clearly worse: slower by more than the noise, and through the loader (a
     * consumer that did not wait more was slowed by something else) */
    int worse = thr < t->thr_before * (1 - margin) && f->wait > t->wait_before + WAIT_CUT_ABS;
    /* a deeper I/O queue tried for its CPU while the consumer hardly waited:
     * one period's wait (the worker descheduled by other load) is not
     * worth undoing it for; judged on all its periods */
    if (worse && m == STK__MOVE_DEPTH_UP && t->wait_before < WAIT_HIGH) worse = 0;
    if (worse || t->trial_periods >= TRIAL_MAX) return JUDGE_FAILED;
    return JUDGE_UNSURE;
}

/* The move this period's figures ask for, or NONE; why: the reason's head. */
static int choose(const stk__tuner *t, const stk__knobs *k, const figures *f, int direct, int have_prev,
                  double ready_prev, char *why, size_t cap, int *forced, int *pending, int *asks_prefetch)
{
    *forced = *pending = *asks_prefetch = 0;
    double per_thread = f->cpu_w / (k->threads ? k->threads : 1);
    int room = f->cpu_w + per_thread <= t->budget_now + 0.1; /* CPU for one more thread */
    if (can_move(t, k, STK__MOVE_THREADS_DOWN) && f->cpu_w > t->budget_now * OVER_BUDGET + OVER_BUDGET_ABS) {
        snprintf(why, cap, "workers use %.2f cores, budget %.2f", f->cpu_w, t->budget_now);
        *forced = 1; /* the budget's, not a trial: not judged */
        return STK__MOVE_THREADS_DOWN;
    }
    if (f->wait > WAIT_HIGH) {
        /* the workers and the rest of the process want more cores than it
         * has, and it has most of them (not other processes' load): they
         * take turns, and a thread fewer may do as much */
        int oversub = t->c.cores > 0 && f->demand > t->c.cores + OVERSUB_ABS &&
                      f->cpu_w + f->trainer >= t->c.cores * HAS_CORES;
        /* a thread more was tried here and did not pay (held): one fewer may
         * do as much for less */
        int up_failed =
            t->fails[STK__MOVE_THREADS_UP] > 0 && t->decisions < t->hold_until[STK__MOVE_THREADS_UP];
        int n = snprintf(why, cap, "wait %.0f%% of wall, workers %.0f%% busy", 100 * f->wait, 100 * f->busy);
        if (oversub && n > 0 && (size_t)n < cap)
            snprintf(why + n, cap - (size_t)n, ", %.2f cores wanted of %.2f", f->demand, t->c.cores);
        if (f->busy >= BUSY_HIGH) {
            if (direct && f->read_share >= READ_BOUND && can_move(t, k, STK__MOVE_DEPTH_UP))
                return STK__MOVE_DEPTH_UP;
            if (room && can_move(t, k, STK__MOVE_THREADS_UP)) return STK__MOVE_THREADS_UP;
            if ((oversub || up_failed) && can_move(t, k, STK__MOVE_THREADS_TRIM)) {
                if (!oversub && n > 0 && (size_t)n < cap)
                    snprintf(why + n, cap - (size_t)n, ", a thread more did not pay");
                return STK__MOVE_THREADS_TRIM;
            }
            if (direct && can_move(t, k, STK__MOVE_DEPTH_UP)) return STK__MOVE_DEPTH_UP;
            return STK__MOVE_NONE; /* CPU-bound at the budget */
        }
        if (oversub && can_move(t, k, STK__MOVE_THREADS_TRIM)) return STK__MOVE_THREADS_TRIM;
        if (can_move(t, k, STK__MOVE_PREFETCH_UP)) {
            /* a deeper ring on the word of two periods running with these
             * knobs, the workers' CPU per batch no longer falling: one alone
             * may be a burst, and a warm-up (the workers' first touches of
             * the data, new slots) lasts while their CPU per batch falls */
            *asks_prefetch = 1;
            if (have_prev && t->prefetch_asked && t->prefetch_asked == t->decisions - 1 &&
                f->cpu_batch >= t->cpu_prev * WARMING)
                return STK__MOVE_PREFETCH_UP;
            *pending = 1;
            return STK__MOVE_NONE;
        }
        if (direct && can_move(t, k, STK__MOVE_DEPTH_UP)) return STK__MOVE_DEPTH_UP;
        if (room && can_move(t, k, STK__MOVE_THREADS_UP)) return STK__MOVE_THREADS_UP;
        return STK__MOVE_NONE;
    }
    if (direct && (f->read_share >= READ_BOUND || t->depth_climb) && can_move(t, k, STK__MOVE_DEPTH_UP)) {
        snprintf(why, cap, "workers wait for reads %.0f%% of their time, %.3f ms CPU a batch",
                 100 * f->read_share, 1e3 * f->cpu_batch);
        return STK__MOVE_DEPTH_UP;
    }
    unsigned th = k->threads ? k->threads : 1;
    double load = th > 1 ? f->busy * th / (th - 1) : 1; /* the work against one thread fewer */
    int draining = ready_prev > 0 && f->ready < ready_prev * DRAIN;
    if (f->wait < WAIT_LOW && !have_prev && load < CAPACITY && !draining &&
        can_move(t, k, STK__MOVE_THREADS_DOWN))
        *pending = 1; /* one period more to confirm it: not a settled state */
    if (f->wait < WAIT_LOW && have_prev && load < CAPACITY && !draining &&
        can_move(t, k, STK__MOVE_THREADS_DOWN)) {
        snprintf(why, cap, "wait %.1f%% of wall (compute-bound), workers %.0f%% busy", 100 * f->wait,
                 100 * f->busy);
        return STK__MOVE_THREADS_DOWN;
    }
    return STK__MOVE_NONE;
}

/* A change to k: the trial starts at s; the stretch before it, from run_at. */
static void start_trial(stk__tuner *t, int m, const stk__knobs *k, const stk__tune_sample *s,
                        const figures *f)
{
    figures run;
    if (!period_figures(&t->run_at, s, &run)) run = *f;
    t->trial = m;
    t->trial_periods = 0;
    t->trial_at = *s;
    t->before = *k;
    t->thr_before = run.thr;
    t->wait_before = run.wait;
    t->step_before = run.step;
    t->cpu_before = run.cpu_batch;
    t->read_before = run.read_share;
    t->ready_before = f->ready;
}

int stk__tune_decide(stk__tuner *t, const stk__tune_sample *s, stk__knobs *out, char *reason, size_t cap)
{
    if (cap) reason[0] = 0;
    uint64_t fill = (uint64_t)s->knobs.prefetch + 1; /* the slots in turn */
    if (!t->have_base && s->batches < fill) {
        /* the ring's first turn: each slot is new (its pages faulted in as
         * the workers first fill it) and the consumer waits on that, not on
         * the knobs; the baseline comes after it */
        t->next = fill - s->batches;
        return 0;
    }
    if (!t->have_base || s->resets != t->base.resets || s->batches < t->base.batches || s->t < t->base.t) {
        t->base = t->run_at = *s; /* the first sample, or the statistics were reset: a new baseline */
        t->have_base = 1;
        t->trial = STK__MOVE_NONE;
        t->thr_prev = t->ready_prev = 0;
        t->next = t->period;
        return 0;
    }
    figures f;
    if (!period_figures(&t->base, s, &f)) return 0;
    if (f.dt < PERIOD_WALL && f.batches < PERIOD_STRETCH) { /* too short to tell: extend it */
        double more = (double)f.batches * (PERIOD_WALL / f.dt - 1);
        t->next = more < 1 ? 1 : more > PERIOD_STRETCH ? PERIOD_STRETCH : (uint64_t)ceil(more);
        return 0;
    }
    t->base = *s;
    t->next = t->period;
    t->decisions++;
    t->batches += f.batches;
    t->trainer_cpu = f.trainer;
    t->budget_now = t->c.cpu_budget > 0 ? t->c.cpu_budget : t->c.cores - f.trainer;
    if (t->budget_now < 1) t->budget_now = 1;
    stk__knobs k = s->knobs;
    int moved_now = t->decisions > 1 && new_phase(t->step_ref, f.step);
    int phase = moved_now && t->step_moved; /* two periods running: one is a blip (load) */
    t->step_moved = moved_now && !phase;
    if (t->decisions == 1 || phase) t->step_ref = f.step;
    if (phase) {
        t->period = t->next = PERIOD_MIN;
        memset(t->hold_until, 0, sizeof t->hold_until);
        memset(t->fails, 0, sizeof t->fails);
        t->run_at = *s;
        t->thr_prev = t->ready_prev = 0;
    }
    /* the noise: how much a period's rate moves with the knobs unchanged */
    if (!t->trial && !phase && t->thr_prev > 0) {
        double d = fabs(f.thr / t->thr_prev - 1);
        t->noise = 0.75 * t->noise + 0.25 * (d < 1 ? d : 1);
    }
    char why[96] = "";
    if (t->trial) { /* the change: paid, undone, or measured on */
        int m = t->trial;
        figures tf;
        t->trial_periods++;
        if (!period_figures(&t->trial_at, s, &tf)) tf = f;
        int j = judge(t, m, &tf, &f);
        if (j == JUDGE_UNSURE) {
            t->thr_prev = f.thr;
            t->ready_prev = f.ready;
            return 0;
        }
        t->trial = STK__MOVE_NONE;
        if (m == STK__MOVE_DEPTH_UP) t->depth_climb = j == JUDGE_PAID;
        if (j == JUDGE_FAILED) {
            fail_move(t, m);
            *out = t->before;
            snprintf(reason, cap, "%s %u -> %u undone: %.0f -> %.0f batches/s, wait %.0f%% -> %.0f%%",
                     move_name(m), knob_of(&k, m), knob_of(out, m), t->thr_before, tf.thr,
                     100 * t->wait_before, 100 * tf.wait);
            t->changes++;
            t->quiet = 0;
            t->run_at = *s;
            t->thr_prev = t->ready_prev = 0;
            return 1;
        }
        t->fails[m] = 0;         /* it paid: next time it fails, hold it the shortest */
        t->run_at = t->trial_at; /* the knobs in force since the trial began */
        /* the way back was just measured worse (or no better): not tried at once */
        if (m == STK__MOVE_THREADS_UP) hold_move(t, STK__MOVE_THREADS_TRIM);
        if (m == STK__MOVE_THREADS_TRIM) hold_move(t, STK__MOVE_THREADS_UP);
    }
    int have_prev = t->thr_prev > 0; /* a period before this one with the same knobs */
    double ready_prev = t->ready_prev;
    t->thr_prev = f.thr;
    t->ready_prev = f.ready;
    int forced, pending, asks_prefetch;
    int m = choose(t, &k, &f, s->direct, have_prev, ready_prev, why, sizeof why, &forced, &pending,
                   &asks_prefetch);
    if (asks_prefetch) t->prefetch_asked = t->decisions;
    t->cpu_prev = f.cpu_batch;
    if (m == STK__MOVE_NONE) {
        t->quiet++;
        /* the period doubles while nothing is to be done, not while a move
         * waits for its second period */
        if (!phase && !pending && t->period < PERIOD_MAX) t->next = t->period *= 2;
        return 0;
    }
    *out = moved(t, k, m);
    snprintf(reason, cap, "%s: %s %u -> %u", why, move_name(m), knob_of(&k, m), knob_of(out, m));
    if (forced) {
        t->trial = STK__MOVE_NONE;
        t->run_at = *s;
    } else {
        start_trial(t, m, &k, s, &f);
    }
    t->thr_prev = t->ready_prev = 0; /* the next period is another configuration's */
    t->changes++;
    t->quiet = 0;
    return 1;
}

/* ------------------------------------------------------------- the glue */

stk__tuner *stk__tune_new(const stk__tune_config *c)
{
    stk__tuner *t = malloc(sizeof *t);
    if (!t) return NULL;
    stk__tune_init(t, c);
    pthread_mutex_init(&t->mu, NULL);
    t->t_open = stk__now();
    return t;
}

void stk__tune_free(stk__tuner *t)
{
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    free(t);
}

void stk__tune_period(stk_reader *r)
{
    stk__tuner *t = r->tuner;
    stk__tune_sample s;
    stk__engine_sample(r, &s);
    pthread_mutex_lock(&t->mu);
    stk__knobs k;
    char reason[sizeof t->log[0].reason];
    if (stk__tune_decide(t, &s, &k, reason, sizeof reason)) {
        stk__engine_set_knobs(r, k.threads, k.prefetch, k.io_depth);
        stk_reader_tune_event *e = &t->log[(t->changes - 1) % STK__TUNE_LOG];
        memset(e, 0, sizeof *e);
        e->batch = t->batches;
        e->t_s = s.t - t->t_open;
        e->threads = k.threads;
        e->prefetch = k.prefetch;
        e->io_depth = k.io_depth;
        snprintf(e->reason, sizeof e->reason, "%s", reason);
    }
    uint64_t period = t->next;
    pthread_mutex_unlock(&t->mu);
    stk__engine_tune_after(r, period);
}

/* -------------------------------------------------------------- budgets */

double stk__tune_cores(unsigned ranks)
{
    cpu_set_t set;
    long n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n < 1) n = 1;
    return (double)n / (ranks ? ranks : 1);
}

static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb << 10;
}

uint64_t stk__tune_memory_default(unsigned ranks)
{
    uint64_t cap = 4ULL << 30, avail = mem_available() / 8 / (ranks ? ranks : 1);
    return avail && avail < cap ? avail : cap;
}

/* ------------------------------------------------------------- the API */

void stk_reader_tune_stats_get_sized(const stk_reader *r, stk_reader_tune_stats *out, size_t size)
{
    stk_reader_tune_stats v;
    memset(&v, 0, sizeof v);
    stk__tune_sample c;
    stk__tuner *t = r->tuner;
    if (t) pthread_mutex_lock(&t->mu);
    stk__engine_sample((stk_reader *)r, &c); /* the mutex only */
    v.threads = c.knobs.threads;
    v.prefetch = c.knobs.prefetch;
    v.io_depth = c.knobs.io_depth;
    v.threads_max = c.max.threads;
    v.prefetch_max = c.max.prefetch;
    v.io_depth_max = c.max.io_depth;
    v.memory_budget = r->o.memory_budget;
    if (t) {
        v.on = 1;
        v.threads_max = t->c.max.threads;
        v.prefetch_max = t->c.max.prefetch;
        v.io_depth_max = t->c.max.io_depth;
        v.cpu_budget = t->budget_now;
        v.trainer_cpu = t->trainer_cpu;
        v.memory_budget = t->c.memory_budget;
        v.decisions = t->decisions;
        v.changes = t->changes;
        v.period = t->period;
        v.settled = t->quiet >= 2;
        pthread_mutex_unlock(&t->mu);
    }
    if (out) stk__write_sized(out, size, &v, sizeof v);
}

size_t stk_reader_tune_log_sized(const stk_reader *r, stk_reader_tune_event *ev, size_t cap, size_t size)
{
    stk__tuner *t = r->tuner;
    if (!t || !ev || !size) return 0;
    pthread_mutex_lock(&t->mu);
    uint64_t n = t->changes < STK__TUNE_LOG ? t->changes : STK__TUNE_LOG;
    if (cap < n) n = cap;
    for (uint64_t i = 0; i < n; i++) { /* the latest n, oldest first */
        const stk_reader_tune_event *e = &t->log[(t->changes - n + i) % STK__TUNE_LOG];
        stk__write_sized((char *)ev + i * size, size, e, sizeof *e);
    }
    pthread_mutex_unlock(&t->mu);
    return (size_t)n;
}
