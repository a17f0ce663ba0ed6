/* tests/support/cli_util.c - see cli_util.h. */
#define _GNU_SOURCE
#include "cli_util.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

__attribute__((format(printf, 1, 0))) static int vsh(const char *fmt, va_list ap)
{
    char line[4096], cmd[6000];
    vsnprintf(line, sizeof line, fmt, ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && %s >out.txt 2>err.txt", tu_tmp, line);
    int st = system(cmd);
    ck_assert_msg(WIFEXITED(st), "command did not exit: %s", line);
    return WEXITSTATUS(st);
}

int tu_sh(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vsh(fmt, ap);
    va_end(ap);
    return rc;
}

void tu_sh_says(int code, const char *file, const char *sub, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vsh(fmt, ap);
    va_end(ap);
    const char *text = tu_slurp(file);
    ck_assert_msg(rc == code, "exit status %d, expected %d; %s:\n%s", rc, code, file, text);
    ck_assert_msg(strstr(text, sub) != NULL, "%s has no \"%s\":\n%s", file, sub, text);
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

void tu_check_int_option(const char *bin, const char *name, const char *opt, const char *pre,
                         const char *post, uint64_t max, const char *operands)
{
    static const char *const bad[] = {"4294967296", "18446744073709551616", "-1", "1e3", "12abc"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (i == 0 && max >= ((uint64_t)1 << 32)) continue; /* a value the option takes */
        int rc = tu_sh("'%s' %s '%s%s%s' %s", bin, opt, pre, bad[i], post, operands);
        const char *err = tu_slurp("err.txt");
        char want[160];
        snprintf(want, sizeof want, "%s: %s: '", name, opt);
        ck_assert_msg(rc == 2, "%s %s %s%s%s: exit %d (%s)", name, opt, pre, bad[i], post, rc, err);
        ck_assert_msg(tu_count_lines(err) == 1 && !strncmp(err, want, strlen(want)) && strstr(err, bad[i]),
                      "%s %s %s%s%s: '%s'", name, opt, pre, bad[i], post, err);
    }
}

void tu_check_common_options(const char *bin, const char *name)
{
    char want[200];
    ck_assert_int_eq(tu_sh("'%s' --no-such-option x", bin), 2);
    snprintf(want, sizeof want, "%s: unknown option '--no-such-option' (try '%s --help')\n", name, name);
    ck_assert_str_eq(tu_slurp("err.txt"), want);
    ck_assert_int_eq(tu_sh("'%s' -Z x", bin), 2);
    snprintf(want, sizeof want, "%s: unknown option '-Z' (try '%s --help')\n", name, name);
    ck_assert_str_eq(tu_slurp("err.txt"), want);
    ck_assert_int_eq(tu_sh("'%s' --help=x x", bin), 2);
    snprintf(want, sizeof want, "%s: option '--help' takes no value (try '%s --help')\n", name, name);
    ck_assert_str_eq(tu_slurp("err.txt"), want);
    ck_assert_int_eq(tu_sh("'%s' -V", bin), 0);
    snprintf(want, sizeof want, "%s (stoker) %s, format %d.%d\n", name, STK_VERSION_STRING, STK_FORMAT_MAJOR,
             STK_FORMAT_MINOR);
    ck_assert_str_eq(tu_slurp("out.txt"), want);
    ck_assert_int_eq(tu_sh("'%s' --help", bin), 0);
    const char *help = tu_slurp("out.txt");
    ck_assert_msg(strstr(help, "-q, --quiet") && strstr(help, "--json") && strstr(help, "-h, --help") &&
                      strstr(help, "-V, --version") &&
                      strstr(help, "Exit status, the same in every stoker tool: 0 success; 1 "),
                  "%s --help", name);
    ck_assert_int_eq(tu_sh("'%s' -q", bin), 2);
    snprintf(want, sizeof want, "%s: expected ", name);
    ck_assert_msg(tu_count_lines(tu_slurp("err.txt")) == 1 &&
                      !strncmp(tu_slurp("err.txt"), want, strlen(want)),
                  "%s: %s", name, tu_slurp("err.txt"));
    snprintf(want, sizeof want, "(try '%s --help')\n", name);
    ck_assert_msg(strstr(tu_slurp("err.txt"), want), "%s: %s", name, tu_slurp("err.txt"));
}
