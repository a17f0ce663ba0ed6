/* tests/fuzz/mixdata.h - the small datasets and mixtures of fuzz_mixstate,
 * shared with make_corpus (which writes its seeds: states saved by readers
 * of these mixtures). Written by the format library in a scratch directory,
 * deterministically, so that the fingerprints the seeds name are those the
 * fuzzer's own copies have.
 *
 * An input of fuzz_mixstate is MIXDATA_HEAD bytes, then a state's text:
 *   [0] mixture (mixdata_cfg), [1] bit 0: re-weight, bits 1-2: tail,
 *   [2] batch size - 1 (mod 8), [3] world size - 1 (mod 3), [4] rank
 *   (mod world), [5] seed. */
#ifndef STOKER_TESTS_FUZZ_MIXDATA_H
#define STOKER_TESTS_FUZZ_MIXDATA_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/reader.h"

#define MIXDATA_SETS 3
#define MIXDATA_CFGS 4
#define MIXDATA_HEAD 6
#define MIXDATA_QBB 1024 /* quasi_block_bytes: blocks of a few records */
#define MIXDATA_WQ 4     /* quasi_window */

static const uint64_t mixdata_n[MIXDATA_SETS] = {5, 17, 40};

/* Record i of dataset d: its label, which says both. */
static inline int64_t mixdata_label(unsigned d, uint64_t i) { return (int64_t)(1000 * d + i); }

/* Write the datasets under root (root/d0, d1, d2); 0 or -1 with msg. */
static inline int mixdata_write(const char *root, char *msg, size_t cap)
{
    for (unsigned d = 0; d < MIXDATA_SETS; d++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/d%u", root, d);
        stk_schema s;
        stk_error e;
        stk_schema_init(&s);
        if (stk_schema_add_tensor(&s, "label", STK_DT_I64, 0, NULL, &e))
            return snprintf(msg, cap, "schema: %s", e.msg), -1;
        stk_dataset_options o;
        stk_dataset_options_init(&o);
        o.records_per_shard = 16;
        stk_dataset_writer *w = stk_dataset_writer_create(dir, &s, &o, &e);
        if (!w) return snprintf(msg, cap, "%s: %s", dir, e.msg), -1;
        for (uint64_t i = 0; i < mixdata_n[d]; i++) {
            int64_t v = mixdata_label(d, i);
            stk_value val = {&v, sizeof v};
            if (stk_dataset_writer_append(w, &val, &e)) {
                stk_dataset_writer_abort(w);
                return snprintf(msg, cap, "%s: %s", dir, e.msg), -1;
            }
        }
        if (stk_dataset_writer_finish(w, &e)) return snprintf(msg, cap, "%s: %s", dir, e.msg), -1;
    }
    return 0;
}

/* One mixture: its sources (datasets, kinds, values, orders), the reader's
 * order and the epoch size. */
typedef struct {
    unsigned S;
    unsigned set[3];
    int kind[3];
    double value[3];
    int order[3]; /* -1: the reader's */
    int reader_order;
    uint64_t epoch_size;
} mixdata_cfg;

static const mixdata_cfg mixdata_cfgs[MIXDATA_CFGS] = {
    {2, {0, 1}, {STK_MIX_WEIGHT, STK_MIX_WEIGHT}, {2, 1}, {-1, -1}, STK_ORDER_SEQUENTIAL, 0},
    {3,
     {0, 1, 2},
     {STK_MIX_REPEAT, STK_MIX_CHOOSE, STK_MIX_REPEAT},
     {1.5, 7, 0.5},
     {-1, STK_ORDER_SHUFFLE, STK_ORDER_QUASI},
     STK_ORDER_SHUFFLE,
     0},
    {2, {1, 2}, {STK_MIX_WEIGHT, STK_MIX_WEIGHT}, {0.7, 0.3}, {-1, -1}, STK_ORDER_QUASI, 50},
    {1, {2}, {STK_MIX_REPEAT}, {2}, {STK_ORDER_SHUFFLE}, STK_ORDER_SEQUENTIAL, 0},
};

/* The reader an input's header asks for, over the datasets under root. */
static inline stk_reader *mixdata_open(const char *root, const uint8_t *head, stk_error *err)
{
    const mixdata_cfg *c = &mixdata_cfgs[head[0] % MIXDATA_CFGS];
    char dirs[3][1024];
    stk_source src[3];
    for (unsigned s = 0; s < c->S; s++) {
        snprintf(dirs[s], sizeof dirs[s], "%s/d%u", root, c->set[s]);
        stk_source_init(&src[s]);
        src[s].path = dirs[s];
        src[s].kind = c->kind[s];
        src[s].value = c->value[s];
        src[s].order = c->order[s];
    }
    stk_reader_options o;
    stk_reader_options_init(&o);
    o.order = c->reader_order;
    o.tail = (head[1] >> 1) % 3;
    o.batch_size = 1 + head[2] % 8;
    o.world_size = 1 + head[3] % 3;
    o.rank = head[4] % o.world_size;
    o.seed = head[5];
    o.threads = 1;
    o.prefetch = 1;
    o.epoch_size = c->epoch_size;
    o.quasi_block_bytes = MIXDATA_QBB;
    o.quasi_window = MIXDATA_WQ;
    o.io = STK_IO_MMAP;
    return stk_reader_open_mix(src, c->S, &o, err);
}

#endif
