/* tests/support/cli_util.h - running the tools from a test, as a user would:
 * a scratch directory, a shell command line with its exit status, and its
 * output read back. Part of the test-helper library (stoker_testutil);
 * brings testutil.h with it. */
#ifndef STK_CLI_UTIL_H
#define STK_CLI_UTIL_H

#include "testutil.h"

/* $STOKER_TEST_TMP (emptied by tu_cli_setup) and $STOKER_TOOLS (the built tools). */
extern char tu_tmp[1024], tu_tools[1024];

void tu_cli_setup(void);
/* Run a shell command line in tu_tmp with stdout to out.txt and stderr to
 * err.txt; returns its exit status. */
int tu_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A file under tu_tmp, NUL-terminated, in a static buffer (up to 1 MiB). */
char *tu_slurp(const char *name);
int tu_count_lines(const char *s);
/* $STOKER_PACK: the pack binary (ctest sets it for the tests that run pack). */
const char *tu_pack_bin(void);

#endif
