/* reader/tune.h - the tune layer (tune.c): the online tuner above the
 * engine. It reads the engine's counters (stk__engine_sample) every period
 * of batches and turns its knobs (stk__engine_set_knobs); the engine calls
 * it back only through r->tune_fn, knowing nothing of its policy. The
 * decision itself (stk__tune_decide) is a pure function of the tuner's state
 * and a sample: no clock, no engine, so that tests replay recorded
 * sequences. Internal. */
#ifndef STK_READER_TUNE_H
#define STK_READER_TUNE_H

#include "engine.h"

#include <pthread.h>

typedef stk__engine_counters stk__tune_sample;

/* What the tuner may do, fixed at open. */
typedef struct {
    stk__knobs start;       /* the knobs at open */
    stk__knobs max;         /* their bounds (a pinned knob's is its start) */
    unsigned pin;           /* STK_PIN_* */
    double cpu_budget;      /* cores the workers may keep busy; 0: measured each period
                          (cores minus the rest of the process's CPU) */
    double cores;           /* cores of this rank: CPUs it may run on / ranks of the node */
    unsigned ranks;         /* ranks of the node ($LOCAL_WORLD_SIZE, $SLURM_NTASKS_PER_NODE, 1) */
    uint64_t memory_budget; /* bytes the slots may take (as resolved; reported) */
} stk__tune_config;

/* A move the tuner tries. */
enum {
    STK__MOVE_NONE,
    STK__MOVE_THREADS_UP,
    STK__MOVE_THREADS_DOWN, /* compute-bound: judged by the wait */
    STK__MOVE_PREFETCH_UP,
    STK__MOVE_DEPTH_UP,
    STK__MOVE_THREADS_TRIM, /* input-bound: one fewer, judged by throughput */
    STK__MOVE_COUNT
};

#define STK__TUNE_LOG 256 /* changes kept (stk_reader_tune_log) */

typedef struct stk__tuner {
    stk__tune_config c;
    /* the decision's state (stk__tune_decide) */
    stk__tune_sample base; /* the period's first sample */
    int have_base;
    uint64_t period;   /* batches between decisions (at least PERIOD_WALL of wall time) */
    uint64_t next;     /* batches until the next call: period, or what a short period still lacks */
    double step_ref;   /* the consumer's step (s per batch outside next) of the phase */
    int step_moved;    /* the last period's step was another phase's (confirmed by the next) */
    int trial;         /* STK__MOVE_*: the move of the last change, judged at the next decision */
    stk__knobs before; /* the knobs before it */
    double thr_before; /* batches/s and wait fraction of the period before it */
    double wait_before;
    double step_before;          /* the consumer's step (s per batch outside next) before it */
    double cpu_before;           /* worker CPU seconds per batch before it */
    double read_before;          /* the workers' read-wait share before it */
    double ready_before;         /* batches ready at next before it, on average */
    stk__tune_sample trial_at;   /* the sample the trial's periods count from */
    unsigned trial_periods;      /* periods the trial has run (extended while unsure) */
    stk__tune_sample run_at;     /* the first sample with the knobs in force: "before" is their mean */
    double thr_prev, ready_prev; /* the last period's batches/s and mean ready batches (0: none) */
    int depth_climb;             /* the last deeper I/O queue paid: try the next */
    double noise;                /* period-to-period change of batches/s with the knobs unchanged */
    uint64_t prefetch_asked;     /* the last decision whose period asked for a deeper prefetch */
    double cpu_prev;             /* the last period's worker CPU seconds per batch */
    uint64_t hold_until[STK__MOVE_COUNT]; /* a failed move is not tried again before this decision */
    unsigned fails[STK__MOVE_COUNT];      /* ... and holds twice as long each time it fails again */
    unsigned quiet;                       /* decisions since the last change */
    uint64_t decisions, changes, batches; /* batches: counted over the periods */
    double trainer_cpu, budget_now;       /* of the last period */
    /* the log and the glue (tune.c), under mu */
    pthread_mutex_t mu;
    double t_open;
    stk_reader_tune_event log[STK__TUNE_LOG];
} stk__tuner;

/* A tuner's state before its first sample. */
void stk__tune_init(stk__tuner *t, const stk__tune_config *c);
/* One decision: s is the engine's sample at the end of a period (the first
 * call only takes its baseline). Returns 1 with *out the knobs to set and
 * reason one line saying why ("wait 31% of wall, workers 97% busy: threads
 * 2 -> 3"), 0 to leave them. t->next says when to call again (in batches). */
int stk__tune_decide(stk__tuner *t, const stk__tune_sample *s, stk__knobs *out, char *reason, size_t cap);

/* The glue: a tuner for r (which it will turn through r->tune_fn), freed
 * by stk__tune_free; NULL when out of memory. */
stk__tuner *stk__tune_new(const stk__tune_config *c);
void stk__tune_free(stk__tuner *t);
void stk__tune_period(stk_reader *r); /* r->tune_fn */

/* The cores this process may run on (sched_getaffinity), shared by `ranks`. */
double stk__tune_cores(unsigned ranks);
/* STK_TUNE_MEMORY_DEFAULT: the lesser of 1/8 of MemAvailable per rank of
 * the node and 4 GiB (4 GiB when MemAvailable is unknown). */
uint64_t stk__tune_memory_default(unsigned ranks);

#endif
