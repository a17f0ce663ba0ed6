/* fuzz_cli - libFuzzer target: the option-value parsers every tool and
 * pack share (tools/cli_args.c) and cli_json_string, which writes names into
 * the tools' JSON output.
 *
 * The input, cut at its first NUL, is one option value. cli_parse_uint must
 * accept exactly the strings of decimal digits whose value fits in 64 bits
 * (no sign, blank, exponent or trailing text), giving that value;
 * cli_parse_int the same with an optional '-', within int64; cli_parse_size
 * must agree with cli_parse_uint on plain numbers and scale K/M/G/T by
 * powers of 1024; cli_parse_fraction accepts "K/N" only with 1 <= K <= N;
 * cli_json_string must write one JSON string that reads back as the input
 * wherever the input is valid UTF-8. */
#include "cli.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The value of a string of digits; 0 with *ok false past 2^64 - 1. */
static uint64_t digits_value(const char *s, int *ok)
{
    uint64_t v = 0;
    *ok = 1;
    for (; *s; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return *ok = 0, 0;
        v = v * 10 + d;
    }
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = strndup((const char *)data, size);
    CHECK(s != NULL);
    size_t len = strlen(s);
    int digits = len > 0 && strspn(s, "0123456789") == len, fits = 0;
    uint64_t want = digits ? digits_value(s, &fits) : 0, v = 0, sz = 0;
    int u = cli_parse_uint(s, 0, UINT64_MAX, &v);
    CHECK(u == (digits && fits) && (!u || v == want));
    int64_t iv;
    int neg = s[0] == '-', idigits = len > 1 && neg && strspn(s + 1, "0123456789") == len - 1;
    if (cli_parse_int(s, INT64_MIN, INT64_MAX, &iv)) CHECK(digits || idigits);
    if (digits && fits && want <= (uint64_t)INT64_MAX)
        CHECK(cli_parse_int(s, INT64_MIN, INT64_MAX, &iv) && (uint64_t)iv == want);
    if (digits && fits) CHECK(cli_parse_size(s, 0, UINT64_MAX, &sz) && sz == want);
    if (digits && fits && want < (1ull << 40)) { /* the suffixes scale by 1024 */
        char *k = malloc(len + 2);
        CHECK(k != NULL);
        memcpy(k, s, len);
        memcpy(k + len, "K", 2);
        CHECK(cli_parse_size(k, 0, UINT64_MAX, &sz) && sz == want * 1024);
        free(k);
    }
    uint64_t fk, fn;
    if (cli_parse_fraction(s, UINT64_MAX, &fk, &fn)) CHECK(fk >= 1 && fk <= fn);

    char *out = NULL;
    size_t olen = 0;
    FILE *f = open_memstream(&out, &olen);
    CHECK(f != NULL);
    cli_json_string(f, s);
    CHECK(fclose(f) == 0);
    json_error_t je;
    json_t *j = json_loadb(out, olen, JSON_DECODE_ANY, &je);
    json_t *utf8 = json_string(s); /* NULL: not valid UTF-8, which no JSON reader takes back */
    if (utf8)
        CHECK(j && json_is_string(j) && json_string_length(j) == len &&
              !memcmp(json_string_value(j), s, len));
    json_decref(utf8);
    json_decref(j);
    free(out);
    free(s);
    return 0;
}
