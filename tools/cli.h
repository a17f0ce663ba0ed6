/* tools/cli.h - the command-line helper library (stoker_cli) that the tools
 * and pack share: one command-line grammar (the common options, messages and
 * exit codes), strict number parsing, a terminal progress bar, JSON string
 * output, timing. Not installed, not part of libstoker. */
#ifndef STOKER_TOOLS_CLI_H
#define STOKER_TOOLS_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes, one per outcome across every tool and pack (each --help lists
 * those it uses). */
enum {
    CLI_EXIT_OK = 0,      /* done, nothing wrong found */
    CLI_EXIT_FAIL = 1,    /* problems in the data, an input that cannot be read, an output that
                             cannot be written: the message says which */
    CLI_EXIT_USAGE = 2,   /* the command line: unknown option, bad value, wrong operands */
    CLI_EXIT_SKIPPED = 3, /* pack: packed, but some inputs were skipped (each named) */
};

/* The exit codes as every tool's --help states them (pack adds 3). */
#define CLI_EXIT_HELP                                                            \
  "Exit status, the same in every stoker tool: 0 success; 1 problems found in\n" \
  "the data, an input that cannot be read or an output that cannot be written\n" \
  "(the message names the file and what is wrong); 2 usage error (the command\n" \
  "line, or options the input cannot serve).\n"

/* ---------------------------------------------------------------- options
 *
 * Every tool reads its command line with cli_getopt over a getopt_long table
 * that ends in CLI_COMMON_OPTIONS and a short-option string that ends in
 * CLI_COMMON_SHORT. cli_getopt handles the common options itself:
 *   -h, --help     the tool's usage() on stdout, exit 0
 *   -V, --version  "PROG (stoker) VERSION, format MAJOR.MINOR", exit 0
 *   -q, --quiet    sets a->quiet (no progress bar or summary on stderr)
 *       --json     sets a->json (the result as one JSON object on stdout)
 * and says in one line what is wrong with an unknown option or a missing
 * value ("PROG: unknown option '--x' (try 'PROG --help')"), then returns
 * '?': the tool returns CLI_EXIT_USAGE. Integer options listed in
 * a->numbers are parsed into their place here too (a bad value: '?'), and
 * the flags in a->flags set; a tool whose options all fit those tables
 * has no switch of its own. Errors name the program by its short
 * name, never its path. */
#define CLI_OPT_JSON 0x10000 /* --json's getopt value: above any character */
/* clang-format off */
#define CLI_COMMON_OPTIONS \
    {"quiet", 0, 0, 'q'}, {"json", 0, 0, CLI_OPT_JSON}, {"help", 0, 0, 'h'}, {"version", 0, 0, 'V'}, {0, 0, 0, 0}
/* clang-format on */
#define CLI_COMMON_SHORT "qhV"

/* An integer option that cli_getopt parses itself (cli_uint, or cli_size
 * when size): the option's getopt value, its range and where it goes. A
 * table of them ends with val 0. */
typedef struct {
    int val;
    bool size;
    uint64_t lo, hi;
    uint64_t *out;
} cli_number;

/* A flag option that cli_getopt sets itself: its getopt value and the bool
 * it sets. A table of them ends with val 0. */
typedef struct {
    int val;
    bool *out;
} cli_flag;

typedef struct {
    const char *prog;              /* the tool's short name, in every message */
    void (*usage)(FILE *f);        /* prints the tool's --help */
    const struct option *longopts; /* the tool's table, ending in CLI_COMMON_OPTIONS */
    const cli_number *numbers;     /* NULL, or integer options parsed here */
    const cli_flag *flags;         /* NULL, or flags set here */
    bool quiet, json;              /* -q, --json */
    int opt;                       /* the option cli_getopt returned last */
} cli_args;

/* getopt_long over a's table; the tool's short options, then CLI_COMMON_SHORT,
 * without a leading ':' (cli_getopt adds it). Returns the next tool option,
 * -1 after the last, '?' after a message. */
int cli_getopt(cli_args *a, int argc, char *const *argv, const char *shortopts);

/* The operands left after the options (argv[optind..argc-1]): between min and
 * max (max < 0: no limit), else "PROG: expected WHAT, got N (try 'PROG --help')"
 * and false. */
bool cli_operands(const cli_args *a, int argc, int min, int max, const char *what);

/* A usage error in one line: "PROG: MESSAGE (try 'PROG --help')". Returns
 * CLI_EXIT_USAGE. */
int cli_usage_error(const cli_args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The long name of the option cli_getopt returned last ("--threads", also
 * when given as -j). */
const char *cli_optname(const cli_args *a);

/* "PROG: --OPT: 'VALUE' is not WHAT" for the option cli_getopt returned last;
 * returns false, so that parsers can end in `return cli_bad_value(...)`. */
bool cli_bad_value(const cli_args *a, const char *value, const char *what);

/* ---------------------------------------------------------------- numbers
 *
 * Strict parsers: the whole string, decimal digits only (a leading '-' only
 * for the signed one), no blanks, no exponent, no overflow, within [lo, hi].
 * The cli_parse_* functions only parse; cli_uint, cli_int, cli_size and
 * cli_fraction parse an option's value and on failure print
 * "PROG: --OPT: 'VALUE' is not an integer from LO to HI" (or the size or K/N
 * form) and return false. */
bool cli_parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
bool cli_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Bytes: an integer or decimal fraction with an optional K, M, G or T (powers
 * of 1024) and an optional "B" or "iB": "4096", "64K", "1.5G", "2MiB". */
bool cli_parse_size(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
/* "K/N" with 1 <= K <= N <= max_n. */
bool cli_parse_fraction(const char *s, uint64_t max_n, uint64_t *k, uint64_t *n);
/* A decimal number: digits with an optional fraction ("0.5", "12", "3."),
 * no sign, exponent, blanks, "inf" or "nan"; within [lo, hi]. */
bool cli_parse_real(const char *s, double lo, double hi, double *out);

bool cli_uint(const cli_args *a, const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
bool cli_int(const cli_args *a, const char *s, int64_t lo, int64_t hi, int64_t *out);
bool cli_size(const cli_args *a, const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
bool cli_fraction(const cli_args *a, const char *s, uint64_t max_n, uint64_t *k, uint64_t *n);
bool cli_real(const cli_args *a, const char *s, double lo, double hi, double *out);

/* ---------------------------------------------------------------- output */

double cli_now(void);          /* monotonic seconds */
double cli_rss_anon_mib(void); /* this process's anonymous resident memory (RssAnon), MiB */

/* Bytes for people, in decimal units as the rates are: "512 B", "2.4 MB",
 * "302 MB", "1.2 GB" (three figures at most); buf holds at least 16. */
const char *cli_bytes(char *buf, size_t n, double bytes);
/* "s" unless n is 1: "%zu shard%s". */
const char *cli_plural(uint64_t n);

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
