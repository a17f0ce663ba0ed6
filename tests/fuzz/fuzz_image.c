/* fuzz_image - libFuzzer target: arbitrary bytes as an image file for pack.
 *
 * The first byte picks the resize mode and output size; the rest is the
 * file. pk_process must return a known status; on failure its message is one
 * non-empty line; on success it wrote exactly size x size x 3 bytes (the
 * buffer is exact, so ASan sees any write past it). max_pixels stays small so
 * that a decompression bomb is refused from the header, as in pack. */
#include "ingest.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static pk_decoder *dec;
    if (!dec) CHECK((dec = pk_decoder_new()) != NULL);
    if (size < 1) return 0;
    pk_params p;
    pk_params_init(&p, 8 + (data[0] >> 2) % 25);
    p.mode = (pk_resize_mode)(data[0] % 3);
    p.max_pixels = 4u << 20;
    size_t n = (size_t)p.size * p.size * 3;
    uint8_t *out = malloc(n);
    CHECK(out != NULL);
    char msg[256];
    uint32_t w = 0, h = 0;
    int rc = pk_process(dec, data + 1, size - 1, &p, out, &w, &h, msg, sizeof msg);
    CHECK(rc >= PK_OK && rc <= PK_E_ARG && rc != PK_E_ARG);
    if (rc == PK_OK) {
        CHECK(msg[0] == 0 && w > 0 && h > 0 && (uint64_t)w * h <= p.max_pixels);
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < n; i++) sink ^= out[i]; /* every byte written (MSan/valgrind would see) */
        (void)sink;
    } else {
        size_t len = strnlen(msg, sizeof msg);
        CHECK(len > 0 && len < sizeof msg && !memchr(msg, '\n', len));
    }
    free(out);
    return 0;
}
