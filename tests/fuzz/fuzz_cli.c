/* fuzz_cli - libFuzzer target: the option-value parsers every tool and
 * pack share (tools/cli.c): cli_parse_u64, cli_parse_size, and
 * cli_json_string, which writes names into the tools' JSON output.
 *
 * The input, cut at its first NUL, is one option value. cli_parse_u64 must
 * accept a plain decimal number exactly when it fits in 64 bits, giving its
 * value; cli_parse_size must agree with it on plain numbers below 2^53 and
 * scale K/M/G/T by powers of 1024; cli_json_string must write one JSON
 * string that reads back as the input wherever the input is valid UTF-8.
 * With -DSTOKER_FUZZ_STRICT_CLI (issue 39, item 4: one strict integer
 * parser for every tool) cli_parse_u64 must also refuse anything but
 * digits: a sign, spaces, trailing text. */
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
    int u = cli_parse_u64(s, &v);
    if (digits) CHECK(u == fits && (!u || v == want));
#ifdef STOKER_FUZZ_STRICT_CLI
    CHECK(!u || digits);
#endif
    if (cli_parse_size(s, &sz) && digits && fits && want < (1ull << 53)) CHECK(sz == want);
    if (digits && fits && want < (1ull << 53)) CHECK(cli_parse_size(s, &sz) && sz == want);
    if (digits && fits && want < (1ull << 40)) { /* the suffixes scale by 1024 */
        char *k = malloc(len + 2);
        CHECK(k != NULL);
        memcpy(k, s, len);
        memcpy(k + len, "K", 2);
        CHECK(cli_parse_size(k, &sz) && sz == want * 1024);
        free(k);
    }

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
