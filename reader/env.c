/* reader/env.c - the one table of environment variables the library reads
 * (env.h). A variable changes what the reader does only through this table;
 * adding one means a row here, a use in the plan and a line in stoker/reader.h's
 * "Environment" section. */
#include "env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CHOICE, NUMBER, TEXT };

static const struct {
    const char *name;
    int kind;
    const char *a, *b; /* CHOICE: the settings besides auto; NUMBER: what it is, for the message */
    long min;          /* NUMBER: the smallest value (at most 2^24) */
} table[STK__ENV_COUNT] = {
    [STK__ENV_IO] = {"STOKER_IO", CHOICE, "mmap", "direct", 0},
    [STK__ENV_IO_ENGINE] = {"STOKER_IO_ENGINE", CHOICE, "io_uring", "threads", 0},
    [STK__ENV_QUASI_BLOCKS] = {"STOKER_QUASI_BLOCKS", CHOICE, "0", "1", 0},
    [STK__ENV_MAP_HUGE] = {"STOKER_MAP_HUGE", CHOICE, "0", "1", 0},
    [STK__ENV_COPY] = {"STOKER_COPY", CHOICE, "stream", "cached", 0},
    [STK__ENV_IO_FAULT] = {"STOKER_IO_FAULT", TEXT, NULL, NULL, 0},
    [STK__ENV_RANK] = {"RANK", NUMBER, "a rank", NULL, 0},
    [STK__ENV_SLURM_PROCID] = {"SLURM_PROCID", NUMBER, "a rank", NULL, 0},
    [STK__ENV_WORLD_SIZE] = {"WORLD_SIZE", NUMBER, "a world size", NULL, 1},
    [STK__ENV_SLURM_NTASKS] = {"SLURM_NTASKS", NUMBER, "a world size", NULL, 1},
    [STK__ENV_TRACE] = {"STOKER_TRACE", TEXT, NULL, NULL, 0},
    [STK__ENV_TUNING] = {"STOKER_TUNING", CHOICE, "off", "on", 0},
    [STK__ENV_LOCAL_WORLD_SIZE] = {"LOCAL_WORLD_SIZE", NUMBER, "a count of ranks", NULL, 1},
    [STK__ENV_SLURM_NTASKS_PER_NODE] = {"SLURM_NTASKS_PER_NODE", NUMBER, "a count of ranks", NULL, 1},
};

void stk__env_read(stk__env *e)
{
    memset(e, 0, sizeof *e);
    for (int i = 0; i < STK__ENV_COUNT; i++) {
        const char *v = getenv(table[i].name);
        e->value[i] = -1;
        if (!v || !*v) continue;
        size_t n = strlen(v);
        snprintf(e->text[i], sizeof e->text[i], "%s", v);
        if (n >= sizeof e->text[i]) { /* no switch takes a value this long */
            e->bad[i] = 1;
            continue;
        }
        switch (table[i].kind) {
        case CHOICE:
            if (!strcmp(v, "auto")) break;
            if (!strcmp(v, table[i].a)) e->value[i] = 0;
            else if (!strcmp(v, table[i].b)) e->value[i] = 1;
            else e->bad[i] = 1;
            break;
        case NUMBER: {
            char *end;
            errno = 0;
            long x = strtol(v, &end, 10);
            if (errno || *end || x < table[i].min || x > 1 << 24) e->bad[i] = 1;
            else e->value[i] = x;
            break;
        }
        default:
            e->value[i] = 1;
            break;
        }
    }
}

int stk__env_get(const stk__env *e, int id, long *value, stk_error *err)
{
    *value = e->value[id];
    if (!e->bad[id]) return STK_OK;
    *value = -1;
    if (table[id].kind == CHOICE)
        return stk_error_set(err, STK_E_ARG, "environment %s='%s': expected auto, %s or %s", table[id].name,
                             e->text[id], table[id].a, table[id].b);
    if (table[id].kind == NUMBER)
        return stk_error_set(err, STK_E_ARG, "environment %s='%s' is not %s", table[id].name, e->text[id],
                             table[id].a);
    return stk_error_set(err, STK_E_ARG, "environment %s: longer than %d characters", table[id].name,
                         STK__ENV_TEXT_MAX - 1);
}

const char *stk__env_text(const stk__env *e, int id) { return e->text[id][0] ? e->text[id] : NULL; }
