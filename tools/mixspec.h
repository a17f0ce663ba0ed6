/* tools/mixspec.h - a mixture of datasets from the command line
 * (shardread --mix): "PATH[:SPEC]...,PATH[:SPEC]..." where each SPEC is a
 * weight (a bare number), weight=W, repeat=R, choose=N or order=ORDER, or a
 * JSON file (a name ending in .json):
 *   {"sources": [{"path": "a", "weight": 0.7, "order": "quasi"},
 *                {"path": "b", "repeat": 0.5}], "epoch_size": 100000}
 * whose relative paths are taken from the file's directory. */
#ifndef STOKER_TOOLS_MIXSPEC_H
#define STOKER_TOOLS_MIXSPEC_H

#include <stddef.h>

#include "stoker/reader.h"

#define MIX_MAX 64

typedef struct {
    stk_source src[MIX_MAX];
    char *path[MIX_MAX]; /* src[i].path points here */
    unsigned n;
    uint64_t epoch_size; /* from a JSON file; 0: not given */
} mix_spec;

/* 0 on success; else -1 with one line in msg. */
int mix_spec_parse(const char *arg, mix_spec *m, char *msg, size_t cap);
void mix_spec_free(mix_spec *m);

#endif
