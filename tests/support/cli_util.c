/* tests/support/cli_util.c - see cli_util.h. */
#define _GNU_SOURCE
#include "cli_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

char tu_tmp[1024], tu_tools[1024];

void tu_cli_setup(void)
{
    const char *t = getenv("STOKER_TEST_TMP"), *b = getenv("STOKER_TOOLS");
    ck_assert_msg(t && b, "STOKER_TEST_TMP and STOKER_TOOLS must be set (run through ctest)");
    snprintf(tu_tmp, sizeof tu_tmp, "%s", t);
    snprintf(tu_tools, sizeof tu_tools, "%s", b);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", tu_tmp, tu_tmp);
    ck_assert_int_eq(system(cmd), 0);
}

int tu_sh(const char *fmt, ...)
{
    char line[4096], cmd[6000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && %s >out.txt 2>err.txt", tu_tmp, line);
    int st = system(cmd);
    ck_assert_msg(WIFEXITED(st), "command did not exit: %s", line);
    return WEXITSTATUS(st);
}

char *tu_slurp(const char *name)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", tu_tmp, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

const char *tu_pack_bin(void)
{
    const char *p = getenv("STOKER_PACK");
    ck_assert_msg(p != NULL, "STOKER_PACK must name the pack binary (run through ctest)");
    return p;
}

int tu_count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}
