/* reader/env.h - the environment variables the library reads: all of them,
 * from one table (env.c), once per open (stk__reader_open), into a value the
 * plan passes on; nothing is kept between opens. Each is documented in
 * stoker/reader.h ("Environment"). Internal; part of the plan layer. */
#ifndef STK_READER_ENV_H
#define STK_READER_ENV_H

#include "stoker/format.h"

enum {
    STK__ENV_IO,           /* STOKER_IO: auto, mmap (0) or direct (1) */
    STK__ENV_IO_ENGINE,    /* STOKER_IO_ENGINE: auto, io_uring (0) or threads (1) */
    STK__ENV_QUASI_BLOCKS, /* STOKER_QUASI_BLOCKS: auto, 0 or 1 */
    STK__ENV_MAP_HUGE,     /* STOKER_MAP_HUGE: auto, 0 or 1 */
    STK__ENV_COPY,         /* STOKER_COPY: auto, stream (0) or cached (1) */
    STK__ENV_IO_FAULT,     /* STOKER_IO_FAULT: the direct engine's fault seam, for tests */
    STK__ENV_RANK,         /* RANK, then SLURM_PROCID: this process's rank */
    STK__ENV_SLURM_PROCID,
    STK__ENV_WORLD_SIZE, /* WORLD_SIZE, then SLURM_NTASKS: the number of ranks */
    STK__ENV_SLURM_NTASKS,
    STK__ENV_TRACE,            /* STOKER_TRACE: a path; trace=PATH when the option is unset */
    STK__ENV_TUNING,           /* STOKER_TUNING: auto, off (0) or on (1): tuning=AUTO's choice */
    STK__ENV_LOCAL_WORLD_SIZE, /* LOCAL_WORLD_SIZE, then SLURM_NTASKS_PER_NODE: ranks on this node */
    STK__ENV_SLURM_NTASKS_PER_NODE,
    STK__ENV_COUNT
};

#define STK__ENV_TEXT_MAX 256

typedef struct {
    /* choices: -1 unset, empty or "auto", else 0 or 1 (the table's order);
     * numbers: -1 unset or empty, else the value; text: 0 unset, 1 set */
    long value[STK__ENV_COUNT];
    unsigned char bad[STK__ENV_COUNT];            /* set to a value the table refuses */
    char text[STK__ENV_COUNT][STK__ENV_TEXT_MAX]; /* as set ("" unset), for messages and text switches */
} stk__env;

/* Read every variable of the table into *e. Cannot fail: a bad value is
 * refused (by stk__env_get) only where it is used, so an option the caller
 * set explicitly still overrides a variable it makes irrelevant. */
void stk__env_read(stk__env *e);
/* Variable `id`'s value into *value; STK_E_ARG naming the variable, its value
 * and what it expects when it was set to a value the table refuses. */
int stk__env_get(const stk__env *e, int id, long *value, stk_error *err);
/* A text variable's value; NULL when unset or empty. */
const char *stk__env_text(const stk__env *e, int id);

#endif
