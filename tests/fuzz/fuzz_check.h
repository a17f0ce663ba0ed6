/* tests/fuzz/fuzz_check.h - a fuzz target's own checks: a failed one names
 * its file and line (and the library's message, where there is one) before
 * it traps, which libFuzzer reports as a crash with that input. noinline:
 * the optimiser would otherwise merge the traps of several checks. */
#ifndef STOKER_TESTS_FUZZ_CHECK_H
#define STOKER_TESTS_FUZZ_CHECK_H

#include <stdio.h>

static void fuzz_fail(const char *file, int line, const char *msg)
    __attribute__((noinline, noreturn, unused));
static void fuzz_fail(const char *file, int line, const char *msg)
{
    fprintf(stderr, "%s:%d: check failed%s%s\n", file, line, msg ? ": " : "", msg ? msg : "");
    __builtin_trap();
}
#define CHECK(cond)                                   \
  do {                                                \
    if (!(cond)) fuzz_fail(__FILE__, __LINE__, NULL); \
  } while (0)
#define CHECK_E(cond, e)                                 \
  do {                                                   \
    if (!(cond)) fuzz_fail(__FILE__, __LINE__, (e).msg); \
  } while (0)

#endif
