/* fuzz_awsconf - libFuzzer target: the ~/.aws files and credential_process
 * output (remote/config.c).
 *
 * The first byte picks the parser: the INI dialect of ~/.aws/credentials and
 * ~/.aws/config (stk__ini_parse), the credential_process JSON, or an ISO 8601
 * time; the rest is the input. Every entry the INI parser reports has a
 * section and a lowercase key of 1-255 bytes and a value of at most 4096;
 * the count it returns is the entries it reported; a refusal names a line
 * inside the input. Credentials parsed are non-empty strings. */
#include "remote_impl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int entry(void *ud, const char *section, const char *key, const char *value)
{
    size_t *count = ud;
    size_t sn = strlen(section), kn = strlen(key);
    CHECK(sn >= 1 && sn <= 255);
    CHECK(kn >= 1 && kn <= 511);
    for (const char *k = key; *k; k++) CHECK(!(*k >= 'A' && *k <= 'Z'));
    CHECK(strlen(value) <= 4096);
    (*count)++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1 << 20)) return 0;
    const char *b = (const char *)data + 1;
    size_t n = size - 1;
    switch (data[0] % 3) {
    case 0: {
        size_t count = 0, line = 0, lines = 1;
        for (size_t i = 0; i < n; i++) lines += b[i] == '\n';
        int rc = stk__ini_parse(b, n, entry, &count, &line);
        if (rc >= 0) CHECK((size_t)rc == count);
        else CHECK(line >= 1 && line <= lines);
        break;
    }
    case 1: {
        char *ak, *sk, *tok;
        double exp;
        stk_error err;
        if (stk__cred_json_parse(b, n, &ak, &sk, &tok, &exp, &err) == STK_OK) {
            CHECK(ak && ak[0] && sk && sk[0] && (!tok || tok[0]) && exp >= 0);
            free(ak);
            free(sk);
            free(tok);
        } else {
            CHECK(!ak && !sk && !tok);
        }
        break;
    }
    default: {
        char *s = malloc(n + 1);
        CHECK(s != NULL);
        memcpy(s, b, n);
        s[n] = '\0';
        double t = stk__iso8601_parse(s);
        CHECK(t == -1 || t >= -86400.0 * 2);
        free(s);
        break;
    }
    }
    return 0;
}
