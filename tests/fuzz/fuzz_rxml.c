/* fuzz_rxml - libFuzzer target: the S3 XML bodies (remote/xml.c), which come
 * from the network.
 *
 * The first byte picks the reader (an <Error> body, a ListObjectsV2 page
 * appended to a list that already holds one key, an initiate reply, the text
 * of an element, entity decoding); the rest is the body. Whatever it gets, a
 * reader returns in bounded time and memory; what it accepts holds to its
 * promises: NUL-terminated strings, keys not empty, a truncated page with a
 * token, decoded text never longer than its source, a refused page leaving
 * the list as it was. */
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
    if (size < 1 || size > (1 << 20)) return 0;
    const char *b = (const char *)data + 1;
    size_t n = size - 1;
    stk_error err;
    switch (data[0] % 5) {
    case 0: {
        char code[16], msg[32];
        if (stk__xml_error(b, n, code, sizeof code, msg, sizeof msg) == 0) {
            CHECK(strlen(code) < sizeof code && strlen(msg) < sizeof msg);
        } else {
            CHECK(code[0] == '\0' && msg[0] == '\0');
        }
        break;
    }
    case 1: {
        stk__rlist l = {0};
        l.keys = malloc(sizeof *l.keys);
        l.sizes = malloc(sizeof *l.sizes);
        CHECK(l.keys && l.sizes);
        l.keys[0] = strdup("first");
        l.sizes[0] = 7;
        l.n = 1;
        int truncated = -1;
        char *next = (char *)1;
        if (stk__xml_list(b, n, &l, &truncated, &next, &err) == STK_OK) {
            CHECK(truncated == 0 || truncated == 1);
            CHECK(!truncated || next != NULL);
            for (size_t i = 1; i < l.n; i++) CHECK(l.keys[i] && l.keys[i][0]);
        } else {
            CHECK(l.n == 1 && next == NULL && err.code != STK_OK);
        }
        CHECK(!strcmp(l.keys[0], "first") && l.sizes[0] == 7);
        free(next);
        stk__rlist_free(&l);
        break;
    }
    case 2: {
        char *id = (char *)1;
        if (stk__xml_initiate(b, n, &id, &err) == STK_OK) CHECK(id && id[0]);
        else CHECK(id == NULL);
        free(id);
        break;
    }
    case 3: {
        char *t = stk__xml_text(b, n, "Key");
        free(t);
        break;
    }
    default: {
        char *d = stk__xml_decode(b, n);
        if (d) {
            CHECK(strlen(d) <= n);
            free(d);
        }
        break;
    }
    }
    return 0;
}
