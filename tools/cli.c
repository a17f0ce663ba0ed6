/* tools/cli.c - the command-line helper library; see cli.h. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double cli_rss_anon_mib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %lf kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb / 1024;
}

void cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

void cli_progress_start(cli_progress *p, const char *label, uint64_t total, bool quiet)
{
    memset(p, 0, sizeof *p);
    p->enabled = !quiet && isatty(STDERR_FILENO);
    p->label = label;
    p->total = total;
    p->start = p->last = cli_now();
}

void cli_progress_start_units(cli_progress *p, const char *label, const char *unit, uint64_t total,
                              bool quiet)
{
    cli_progress_start(p, label, total, quiet);
    p->unit = unit;
}

void cli_progress_clear(const cli_progress *p)
{
    if (!p->enabled) return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
}

const char *cli_bytes(char *buf, size_t n, double v)
{
    const char *u[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    int i = 0;
    while (v >= 999.5 && i < 5) v /= 1000, i++;
    if (i == 0) snprintf(buf, n, "%.0f B", v);
    else snprintf(buf, n, v < 9.95 ? "%.1f %s" : "%.0f %s", v, u[i]);
    return buf;
}

const char *cli_plural(uint64_t n) { return n == 1 ? "" : "s"; }

static void fmt_count(const cli_progress *p, char *b, size_t n, double v, bool rate);

static void fmt_bytes(char *b, size_t n, double v)
{
    const char *u[] = {"B", "KB", "MB", "GB", "TB"};
    int i = 0;
    while (v >= 1000 && i < 4) v /= 1000, i++;
    snprintf(b, n, "%.1f %s", v, u[i]);
}

static void fmt_count(const cli_progress *p, char *b, size_t n, double v, bool rate)
{
    if (p->unit) {
        snprintf(b, n, rate ? "%.0f %s/s" : "%.0f %s", v, p->unit);
        return;
    }
    fmt_bytes(b, n, v);
    if (rate) strncat(b, "/s", n - strlen(b) - 1);
}

bool cli_progress_due(const cli_progress *p, uint64_t done)
{
    return p->enabled && (done >= p->total || cli_now() - p->last >= 0.1);
}

void cli_progress_update(cli_progress *p, uint64_t done, const char *extra)
{
    if (!p->enabled) return;
    double t = cli_now();
    if (t - p->last < 0.1 && done < p->total) return;
    p->last = t;
    double el = t - p->start, rate = el > 0 ? (double)done / el : 0;
    char bd[32], br[32];
    fmt_count(p, bd, sizeof bd, (double)done, false);
    fmt_count(p, br, sizeof br, rate, true);
    if (p->total) {
        double frac = (double)done / (double)p->total;
        if (frac > 1) frac = 1;
        char bar[31];
        int fill = (int)(frac * 30);
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        double eta = rate > 0 ? (double)(p->total - (done < p->total ? done : p->total)) / rate : 0;
        fprintf(stderr, "\r%s [%s] %5.1f%% %s %s ETA %.0fs %s\033[K", p->label, bar, frac * 100, bd, br, eta,
                extra ? extra : "");
    } else {
        fprintf(stderr, "\r%s %s %s %s\033[K", p->label, bd, br, extra ? extra : "");
    }
    fflush(stderr);
}

void cli_progress_end(cli_progress *p)
{
    if (!p->enabled) return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
}
