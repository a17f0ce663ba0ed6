/* tools/cli.h - the command-line helper library (stoker_cli) that the tools
 * and pack share: a terminal progress bar, size parsing, JSON string output,
 * timing, exit codes. Not installed, not part of libstoker. */
#ifndef STOKER_TOOLS_CLI_H
#define STOKER_TOOLS_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes shared by the tools (documented in each --help). */
enum { EXIT_OK = 0, EXIT_PROBLEMS = 1, EXIT_USAGE = 2 };

double cli_now(void);          /* monotonic seconds */
double cli_rss_anon_mib(void); /* this process's anonymous resident memory (RssAnon), MiB */

/* "4096", "64K", "1.5G" (powers of 1024) -> bytes; false on junk/overflow. */
bool cli_parse_size(const char *s, uint64_t *out);
/* Plain non-negative decimal integer; false on junk/overflow. */
bool cli_parse_u64(const char *s, uint64_t *out);

/* Print s as a JSON string literal (quotes included). */
void cli_json_string(FILE *f, const char *s);

/* A progress bar on stderr, drawn only when stderr is a terminal, at most
 * every 100 ms. total == 0 means unknown. */
typedef struct {
    bool enabled;
    const char *label;
    const char *unit; /* NULL: counts are bytes; else e.g. "files" */
    uint64_t total;
    double start, last;
} cli_progress;

void cli_progress_start(cli_progress *p, const char *label, uint64_t total_bytes, bool quiet);
/* Same, counting `unit`s (e.g. "files") instead of bytes. */
void cli_progress_start_units(cli_progress *p, const char *label, const char *unit, uint64_t total,
                              bool quiet);
/* Clear the bar's line (before printing a message under it). */
void cli_progress_clear(const cli_progress *p);
void cli_progress_update(cli_progress *p, uint64_t done_bytes, const char *extra);
/* Whether an update with `done` would draw now (the bar redraws at most ten
 * times a second): callers skip formatting `extra` when it would not. */
bool cli_progress_due(const cli_progress *p, uint64_t done);
void cli_progress_end(cli_progress *p);

#endif
