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
/* tu_sh, then assert that it exited with `code` and that `file` (out.txt or
 * err.txt) contains `sub`. */
void tu_sh_says(int code, const char *file, const char *sub, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A file under tu_tmp, NUL-terminated, in a static buffer (up to 1 MiB). */
char *tu_slurp(const char *name);
int tu_count_lines(const char *s);
/* $STOKER_PACK: the pack binary (ctest sets it for the tests that run pack). */
const char *tu_pack_bin(void);

/* The tools' one grammar for integer options: `bin` (a tool called `name`)
 * given `opt` (its long name) with each of 2^32 (where that is above `max`),
 * 2^64, -1, 1e3 and 12abc, written into the value as pre + V + post (e.g.
 * "zstd:" + V), then `operands`, must exit 2 with one line on stderr that
 * starts "NAME: OPT: '" and quotes V. */
/* The options and messages every tool shares: a mistyped option is one line
 * naming `name` and the hint, -V the same line everywhere, --help documents
 * -q, --json, -h, -V and the exit status, missing operands one line. */
void tu_check_common_options(const char *bin, const char *name);
void tu_check_int_option(const char *bin, const char *name, const char *opt, const char *pre,
                         const char *post, uint64_t max, const char *operands);

#endif
