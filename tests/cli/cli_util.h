/* tests/cli/cli_util.h - running the tools from a test, as a user would:
 * a scratch directory, a shell command line with its exit status, and its
 * output read back. */
#ifndef STK_CLI_UTIL_H
#define STK_CLI_UTIL_H

#include <check.h>

/* $STOKER_TEST_TMP (emptied by setup_env) and $STOKER_TOOLS (the built tools). */
extern char tmp[1024], tools[1024];

void setup_env(void);
/* Run a shell command line in tmp with stdout to out.txt and stderr to
 * err.txt; returns its exit status. */
int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A file under tmp, NUL-terminated, in a static buffer (up to 1 MiB). */
char *slurp(const char *name);
int count_lines(const char *s);

#endif
