/* fuzz_rhttp - libFuzzer target: HTTP response header lines and
 * Content-Range values (remote/client.c), which come from the network.
 *
 * The input is split into lines; each is read as a header line
 * (stk__rhttp_line, into small buffers so that truncation is exercised) and
 * as a Content-Range value. A status line gives a status of 100-999 and no
 * name; a header gives a lowercase name without spaces and a value that
 * fits its buffer; a Content-Range accepted has first <= last < total (or
 * an unknown total). */
#include "remote_impl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1 << 16)) return 0;
    const char *p = (const char *)data, *end = p + size;
    while (p <= end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        size_t n = e ? (size_t)(e - p) + 1 : (size_t)(end - p);
        long st = -1;
        char name[24], value[40];
        int rc = stk__rhttp_line(p, n, &st, name, sizeof name, value, sizeof value);
        if (rc >= 0) {
            CHECK(strlen(name) < sizeof name && strlen(value) < sizeof value);
            if (!name[0]) {
                CHECK(st >= 100 && st <= 999);
            } else {
                for (const char *c = name; *c; c++) CHECK(*c > ' ' && *c < 0x7f && !(*c >= 'A' && *c <= 'Z'));
            }
        }
        uint64_t f, l, t;
        if (stk__rhttp_content_range(p, n, &f, &l, &t) == 0) CHECK(f <= l && (t == UINT64_MAX || l < t));
        if (!e) break;
        p = e + 1;
    }
    return 0;
}
