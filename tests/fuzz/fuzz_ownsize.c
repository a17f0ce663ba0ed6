/* fuzz_ownsize - libFuzzer target: pack's images of their own size
 * (--resize keep with --max-side / --min-side; packer/ingest.c,
 * PK_RESIZE_KEEP), stored as JPEG or as the original file.
 *
 * Input: 5 bytes of parameters, then the image file. The parameters give
 * max_side (1 .. 1024, or 0: from min_side as pack derives it), min_side
 * (0: none, else 1 .. 1024) and the storage (raw, jpeg, original). The sides
 * are settled as pack settles them (min_side <= max_side; size = max_side).
 * pk_process must return a known status with one line of message on
 * failure; on success the image it wrote is the layout's w x h, within
 * max_side, and min_side on its shorter side unless max_side bounds the
 * longer: a second decode into a buffer of exactly w x h x 3 bytes lets
 * ASan see a write past it, and must give the same pixels. Stored as JPEG,
 * the pixels encode and decode back to w x h; an original is kept only as
 * pack keeps it (a 3-component JPEG of the output's own size). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "ingest.h"

#define CHECK(cond)                \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static pk_decoder *dec;
    static tjhandle enc, hdr;
    if (!dec) CHECK((dec = pk_decoder_new()) && (enc = tjInitCompress()) && (hdr = tjInitDecompress()));
    if (size < 5) return 0;
    uint32_t max_side = (uint32_t)(data[0] | data[1] << 8) % 1025,
             min_side = (uint32_t)(data[2] | data[3] << 8) % 1025;
    int storage = data[4] % 3; /* raw, jpeg, original */
    data += 5, size -= 5;
    if (!max_side && !min_side) min_side = 1;
    if (!max_side) max_side = 4 * min_side; /* pack's default bound */
    if (min_side > max_side) return 0;      /* pack refuses it */
    pk_params p;
    pk_params_init(&p, max_side);
    p.mode = PK_RESIZE_KEEP;
    p.min_side = min_side;
    p.max_side = max_side;
    p.max_pixels = 4u << 20;
    size_t cap = (size_t)max_side * max_side * 3; /* pack's slot */
    uint8_t *out = malloc(cap);
    CHECK(out != NULL);
    char msg[256];
    uint32_t w = 0, h = 0;
    int rc = pk_process(dec, data, size, &p, out, &w, &h, msg, sizeof msg);
    CHECK(rc >= PK_OK && rc < PK_E_ARG);
    if (rc != PK_OK) {
        size_t len = strnlen(msg, sizeof msg);
        CHECK(len > 0 && len < sizeof msg && !memchr(msg, '\n', len));
        free(out);
        return 0;
    }
    CHECK(msg[0] == 0 && w > 0 && h > 0 && (uint64_t)w * h <= p.max_pixels);
    pk_layout l;
    pk_layout_compute(&p, w, h, &l);
    uint32_t lo = l.w < l.h ? l.w : l.h, hi = l.w < l.h ? l.h : l.w;
    CHECK(l.w >= 1 && l.h >= 1 && hi <= max_side && l.resized_w == l.w && l.resized_h == l.h);
    CHECK(!l.crop_x && !l.crop_y && !l.pad_x && !l.pad_y);
    if (min_side && hi < max_side) CHECK(lo == min_side); /* not bounded by max_side */
    if (!min_side && (w > max_side || h > max_side)) CHECK(hi == max_side);
    if (!min_side && w <= max_side && h <= max_side) CHECK(l.w == w && l.h == h);
    size_t n = (size_t)l.w * l.h * 3;
    uint8_t *exact = malloc(n);
    CHECK(exact != NULL);
    CHECK(pk_process(dec, data, size, &p, exact, NULL, NULL, msg, sizeof msg) == PK_OK);
    CHECK(!memcmp(exact, out, n));
    if (storage == 1 ||
        (storage == 2 && stk__img_sniff(data, size) != STK_IMG_FMT_JPEG)) { /* encoded as pack does */
        unsigned char *jpg = NULL;
        unsigned long jlen = 0;
        int jw, jh, ss, cs;
        CHECK(tjCompress2(enc, exact, (int)l.w, 0, (int)l.h, TJPF_RGB, &jpg, &jlen, TJSAMP_420, 90, 0) == 0);
        CHECK(tjDecompressHeader3(hdr, jpg, jlen, &jw, &jh, &ss, &cs) == 0 && (uint32_t)jw == l.w &&
              (uint32_t)jh == l.h);
        tjFree(jpg);
    } else if (storage == 2) { /* the original, where pack would keep it: it must say what it holds */
        int jw, jh, ss, cs;
        if (l.w == w && l.h == h && size <= cap &&
            tjDecompressHeader3(hdr, data, size, &jw, &jh, &ss, &cs) == 0 &&
            (cs == TJCS_YCbCr || cs == TJCS_RGB))
            CHECK((uint32_t)jw == w && (uint32_t)jh == h);
    }
    free(exact);
    free(out);
    return 0;
}
