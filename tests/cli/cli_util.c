/* tests/cli/cli_util.c - see cli_util.h. */
#define _GNU_SOURCE
#include "cli_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

char tmp[1024], tools[1024];

void setup_env(void)
{
    const char *t = getenv("STOKER_TEST_TMP"), *b = getenv("STOKER_TOOLS");
    ck_assert_msg(t && b, "STOKER_TEST_TMP and STOKER_TOOLS must be set (run through ctest)");
    snprintf(tmp, sizeof tmp, "%s", t);
    snprintf(tools, sizeof tools, "%s", b);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", tmp, tmp);
    ck_assert_int_eq(system(cmd), 0);
}

int run(const char *fmt, ...)
{
    char line[4096], cmd[6000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && %s >out.txt 2>err.txt", tmp, line);
    int st = system(cmd);
    ck_assert_msg(WIFEXITED(st), "command did not exit: %s", line);
    return WEXITSTATUS(st);
}

char *slurp(const char *name)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}
