/* tools/cli_args.c - the tools' one command-line grammar: the common options,
 * the usage messages and strict number parsing; see cli.h. */
#include "cli.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/format.h"

/* ---------------------------------------------------------------- options */

static const struct option *find_val(const struct option *lo, int val)
{
    for (; lo && lo->name; lo++)
        if (lo->val == val) return lo;
    return NULL;
}

/* The option that failed, as the user wrote it: argv[optind - 1] for a long
 * one (getopt always steps past it), the character for a short one. */
static void say_bad_option(const cli_args *a, char *const *argv, int c)
{
    const char *e = optind > 0 ? argv[optind - 1] : "";
    const struct option *lo = find_val(a->longopts, optopt);
    bool is_long = !strncmp(e, "--", 2) && (optopt == 0 || c == ':' || (lo && strchr(e, '=')));
    char name[64];
    if (is_long) snprintf(name, sizeof name, "%.*s", (int)strcspn(e, "="), e);
    else snprintf(name, sizeof name, "-%c", optopt);
    if (c == ':')
        fprintf(stderr, "%s: option '%s' needs a value (try '%s --help')\n", a->prog, name, a->prog);
    else if (is_long && optopt)
        fprintf(stderr, "%s: option '%s' takes no value (try '%s --help')\n", a->prog, name, a->prog);
    else fprintf(stderr, "%s: unknown option '%s' (try '%s --help')\n", a->prog, name, a->prog);
}

int cli_getopt(cli_args *a, int argc, char *const *argv, const char *shortopts)
{
    char so[128];
    snprintf(so, sizeof so, ":%s", shortopts);
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, so, a->longopts, NULL);
        a->opt = c;
        switch (c) {
        case 'q':
            a->quiet = true;
            continue;
        case CLI_OPT_JSON:
            a->json = true;
            continue;
        case 'h':
            a->usage(stdout);
            exit(CLI_EXIT_OK);
        case 'V':
            printf("%s (stoker) %s, format %d.%d\n", a->prog, STK_VERSION_STRING, STK_FORMAT_MAJOR,
                   STK_FORMAT_MINOR);
            exit(CLI_EXIT_OK);
        case '?':
        case ':':
            say_bad_option(a, argv, c);
            return '?';
        default:
            for (const cli_flag *f = a->flags; f && f->val; f++)
                if (f->val == c) *f->out = true, c = 0;
            for (const cli_number *n = a->numbers; c && n && n->val; n++)
                if (n->val == c) {
                    bool ok = n->size ? cli_size(a, optarg, n->lo, n->hi, n->out)
                                      : cli_uint(a, optarg, n->lo, n->hi, n->out);
                    if (!ok) return '?';
                    c = 0; /* taken */
                    break;
                }
            if (c) return c;
        }
    }
}

bool cli_operands(const cli_args *a, int argc, int min, int max, const char *what)
{
    int n = argc - optind;
    if (n >= min && (max < 0 || n <= max)) return true;
    cli_usage_error(a, "expected %s, got %d", what, n);
    return false;
}

int cli_usage_error(const cli_args *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", a->prog);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (try '%s --help')\n", a->prog);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

const char *cli_optname(const cli_args *a)
{
    const struct option *lo = find_val(a->longopts, a->opt);
    return lo ? lo->name : "?";
}

bool cli_bad_value(const cli_args *a, const char *value, const char *what)
{
    fprintf(stderr, "%s: --%s: '%s' is not %s\n", a->prog, cli_optname(a), value, what);
    return false;
}

/* ---------------------------------------------------------------- numbers */

/* Decimal digits from *s up to the first non-digit, into *v; false when there
 * are none or the value passes UINT64_MAX. */
static bool digits(const char **s, uint64_t *v)
{
    const char *p = *s;
    uint64_t x = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (x > (UINT64_MAX - d) / 10) return false;
        x = x * 10 + d;
    }
    if (p == *s) return false;
    *s = p;
    *v = x;
    return true;
}

bool cli_parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    uint64_t v;
    if (!s || !digits(&s, &v) || *s || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s) return false;
    bool neg = *s == '-';
    uint64_t m;
    s += neg;
    if (!digits(&s, &m) || *s) return false;
    if (neg ? m > (uint64_t)INT64_MAX + 1 : m > (uint64_t)INT64_MAX) return false;
    int64_t v = neg ? (m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m) : (int64_t)m;
    if (v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_parse_size(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    uint64_t whole, frac = 0, scale = 1;
    if (!s || !digits(&s, &whole)) return false;
    if (*s == '.') { /* up to 9 decimals, exactly; more are refused */
        const char *f = ++s;
        if (!digits(&s, &frac) || s - f > 9) return false;
        for (long i = 0; i < s - f; i++) scale *= 10;
    }
    unsigned shift = 0;
    switch (*s) {
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    case 't':
    case 'T':
        shift = 40;
        break;
    default:
        break;
    }
    if (shift) s++;
    if (shift && *s == 'i' && s[1] == 'B') s += 2;
    else if (*s == 'B') s++;
    if (*s) return false;
    if (shift && whole > UINT64_MAX >> shift) return false;
    /* the fraction of one unit, rounded down: frac / scale < 1, so it fits */
    uint64_t v = (whole << shift) + (uint64_t)(((unsigned __int128)frac << shift) / scale);
    if (v < whole << shift || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_parse_fraction(const char *s, uint64_t max_n, uint64_t *k, uint64_t *n)
{
    uint64_t a, b;
    if (!s || !digits(&s, &a) || *s++ != '/' || !digits(&s, &b) || *s) return false;
    if (b < 1 || b > max_n || a < 1 || a > b) return false;
    *k = a, *n = b;
    return true;
}

bool cli_parse_real(const char *s, double lo, double hi, double *out)
{
    if (!s) return false;
    size_t whole = strspn(s, "0123456789"), frac = s[whole] == '.' ? strspn(s + whole + 1, "0123456789") : 0;
    size_t len = whole + (s[whole] == '.' ? 1 + frac : 0);
    if (!whole && !frac) return false;
    if (s[len]) return false;
    double v = strtod(s, NULL);
    if (!(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

bool cli_uint(const cli_args *a, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (cli_parse_uint(s, lo, hi, out)) return true;
    char what[96];
    snprintf(what, sizeof what, "an integer from %llu to %llu", (unsigned long long)lo,
             (unsigned long long)hi);
    return cli_bad_value(a, s, what);
}

bool cli_int(const cli_args *a, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (cli_parse_int(s, lo, hi, out)) return true;
    char what[96];
    snprintf(what, sizeof what, "an integer from %lld to %lld", (long long)lo, (long long)hi);
    return cli_bad_value(a, s, what);
}

bool cli_size(const cli_args *a, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (cli_parse_size(s, lo, hi, out)) return true;
    char what[128];
    snprintf(what, sizeof what, "a size from %llu to %llu bytes (suffixes K, M, G, T)",
             (unsigned long long)lo, (unsigned long long)hi);
    return cli_bad_value(a, s, what);
}

bool cli_fraction(const cli_args *a, const char *s, uint64_t max_n, uint64_t *k, uint64_t *n)
{
    if (cli_parse_fraction(s, max_n, k, n)) return true;
    char what[96];
    snprintf(what, sizeof what, "K/N with N an integer from 1 to %llu and K from 1 to N",
             (unsigned long long)max_n);
    return cli_bad_value(a, s, what);
}

bool cli_real(const cli_args *a, const char *s, double lo, double hi, double *out)
{
    if (cli_parse_real(s, lo, hi, out)) return true;
    char what[96];
    snprintf(what, sizeof what, "a number from %g to %g", lo, hi);
    return cli_bad_value(a, s, what);
}
