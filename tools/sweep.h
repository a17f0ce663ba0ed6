/* tools/sweep.h - shardread --sweep: the reader over a grid of threads x
 * prefetch depth x batch size x read path (io mode, io depth), with a table,
 * the knee, CSV and an SVG chart. */
#ifndef STOKER_TOOLS_SWEEP_H
#define STOKER_TOOLS_SWEEP_H

#include <stdint.h>

#include "stoker/reader.h"

#define SWEEP_MAX_VALUES 16

typedef struct {
    unsigned threads[SWEEP_MAX_VALUES], nthreads;
    unsigned prefetch[SWEEP_MAX_VALUES], nprefetch;
    uint32_t batch[SWEEP_MAX_VALUES], nbatch;
    int io[3]; /* stk_io values; 0 entries: the base's io */
    unsigned nio;
    unsigned io_depth[SWEEP_MAX_VALUES], ndepth; /* direct points only; 0 entries: the base's */
    int drop_cache;   /* drop the page cache before each point (root): cold storage */
    double seconds;   /* per point, after a warm-up batch */
    uint64_t step_us; /* simulated step per batch (0: none) */
    int step_busy;    /* the step as a busy loop instead of a sleep */
    const char *csv, *plot;
    int json, quiet;
} sweep_opts;

/* "1,2,4" -> values; 0 on junk, zeros or more than SWEEP_MAX_VALUES. */
unsigned sweep_parse_list(const char *s, unsigned *out);

/* Run the grid over the open dataset with `base` for everything else.
 * Prints the table (or JSON) on stdout; returns an exit status. */
int sweep_run(const stk_dataset *ds, const stk_reader_options *base, const sweep_opts *so);

#endif
