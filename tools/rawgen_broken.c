/* tools/rawgen_broken.c - rawgen --broken: the bad files a packer must skip
 * with a reason (see rawgen's --help). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jpeg_dims.h"
#include "rawgen.h"
#include "rawgen_formats.h"

static uint32_t crc32_png(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

enum {
    B_EMPTY,
    B_TRUNC_JPEG,
    B_TRUNC_HDR,
    B_TRUNC_PNG,
    B_RANDOM,
    B_HEADER_ONLY,
    B_BOMB_JPEG,
    B_BOMB_PNG,
    B_HEIC,
    B_TEXT,
    B_TRUNC_WEBP,
    B_TRUNC_GIF,
    B_TRUNC_BMP,
    B_TRUNC_TIFF,
    B_COUNT
};
_Static_assert((int)B_COUNT == (int)RG_BROKEN_COUNT, "rawgen.h counts the broken files");
static const char *const bname[B_COUNT] = {"empty.jpg",     "truncated.jpg",  "truncated-header.jpg",
                                           "truncated.png", "random.jpg",     "header-only.jpg",
                                           "bomb.jpg",      "bomb.png",       "heic.jpg",
                                           "notes.txt",     "truncated.webp", "truncated.gif",
                                           "truncated.bmp", "truncated.tif"};

int rg_write_broken(rg_run *r, unsigned k)
{
    rg_rng rg = rg_stream(r->o->seed, (1ull << 63) | k);
    char name[64], msg[256];
    snprintf(name, sizeof name, "broken-%s", bname[k]);
    char *rel = rg_rel_name(r, k, name);
    if (!rel) {
        fprintf(stderr, "rawgen: out of memory\n");
        return -1;
    }
    uint32_t w, h;
    rg_pick_size(&rg, r->o, &w, &h);
    if (k == B_BOMB_JPEG || k == B_BOMB_PNG) w = h = 64; /* small inside, huge on paper */
    int rc = -1;
    unsigned long jl;
    size_t len;
    uint8_t buf[4096];
    if (!rg_synth(&r->g, w, h, &rg)) {
        fprintf(stderr, "rawgen: out of memory\n");
        free(rel);
        return -1;
    }
    switch (k) {
    case B_EMPTY:
        rc = rg_emit(r, rel, "", 0, 2);
        break;
    case B_TRUNC_WEBP:
    case B_TRUNC_GIF:
    case B_TRUNC_BMP:
    case B_TRUNC_TIFF: { /* cut in half: inside the image data (a TIFF's directory is at its end) */
        uint8_t *f = rg_encode((rg_format)(k - B_TRUNC_WEBP), r->g.rgb, w, h, 85, &len, msg, sizeof msg);
        if (f) rc = rg_emit(r, rel, f, len / 2, 2);
        else fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
        free(f);
        break;
    }
    case B_TRUNC_JPEG:
    case B_TRUNC_HDR:
    case B_HEADER_ONLY:
    case B_BOMB_JPEG:
        if (rg_jpeg_encode(&r->g, r->g.rgb, w, h, TJPF_RGB, TJSAMP_420, 85, 0, &jl, msg, sizeof msg)) {
            fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
            break;
        }
        if (k == B_TRUNC_JPEG) rc = rg_emit(r, rel, r->g.jpg, jl / 2, 2);
        else if (k ==
                 B_TRUNC_HDR) { /* cut halfway through the first Huffman table: the header does not parse */
            uint64_t dht;
            if (!stk__jpeg_marker(r->g.jpg, jl, 0xC4, &dht)) {
                fprintf(stderr, "rawgen: %s: no DHT marker in the encoded JPEG\n", rel);
                break;
            }
            rc = rg_emit(r, rel, r->g.jpg, dht + 4 + ((size_t)r->g.jpg[dht + 2] << 8 | r->g.jpg[dht + 3]) / 2,
                         2);
        } else if (k ==
                   B_HEADER_ONLY) { /* everything up to and including the SOS header: no scan data, no EOI */
            uint64_t sos;
            if (!stk__jpeg_marker(r->g.jpg, jl, 0xDA, &sos)) {
                fprintf(stderr, "rawgen: %s: no SOS marker in the encoded JPEG\n", rel);
                break;
            }
            rc = rg_emit(r, rel, r->g.jpg, sos + 2 + ((size_t)r->g.jpg[sos + 2] << 8 | r->g.jpg[sos + 3]), 2);
        } else {
            uint64_t sof;
            if (!stk__jpeg_sof(r->g.jpg, jl, &sof) || r->g.jpg[sof + 1] != 0xC0) {
                fprintf(stderr, "rawgen: %s: no SOF0 marker in the encoded JPEG\n", rel);
                break;
            }
            uint8_t *s = r->g.jpg + sof + 5; /* FF C0, length (2), precision (1), height, width */
            s[0] = RG_BOMB_SIDE >> 8, s[1] = RG_BOMB_SIDE & 0xff, s[2] = RG_BOMB_SIDE >> 8,
            s[3] = RG_BOMB_SIDE & 0xff;
            rc = rg_emit(r, rel, r->g.jpg, jl, 2);
        }
        break;
    case B_TRUNC_PNG:
    case B_BOMB_PNG: {
        uint8_t *png = rg_png_encode(r->g.rgb, (size_t)w * h * 3, w, h, 8, SPNG_COLOR_TYPE_TRUECOLOR, NULL,
                                     &len, msg, sizeof msg);
        if (!png) {
            fprintf(stderr, "rawgen: %s: %s\n", rel, msg);
            break;
        }
        if (k == B_TRUNC_PNG) rc = rg_emit(r, rel, png, len / 2, 2);
        else { /* IHDR: signature (8), length (4), "IHDR" (4), width, height, ...; CRC after 13 data bytes */
            put_be32(png + 16, RG_BOMB_SIDE);
            put_be32(png + 20, RG_BOMB_SIDE);
            put_be32(png + 29, crc32_png(png + 12, 17));
            rc = rg_emit(r, rel, png, len, 2);
        }
        free(png);
        break;
    }
    case B_RANDOM:
        for (size_t i = 0; i < sizeof buf; i += 8) {
            uint64_t v = rg_next(&rg);
            memcpy(buf + i, &v, 8);
        }
        buf[0] = 0x00; /* no signature pack reads starts with 00 (FF, 89, R, G, B, I, M) */
        rc = rg_emit(r, rel, buf, sizeof buf, 2);
        break;
    case B_HEIC: {
        /* what a phone saves and a user names .jpg: a HEIF file (its ftyp box;
         * pack reads no HEIF) */
        static const uint8_t heic[] = {0,   0,   0, 24, 'f', 't', 'y', 'p', 'h', 'e', 'i',
                                       'c', 0,   0, 0,  0,   'm', 'i', 'f', '1', 'h', 'e',
                                       'i', 'c', 0, 0,  0,   8,   'm', 'e', 't', 'a'};
        rc = rg_emit(r, rel, heic, sizeof heic, 2);
        break;
    }
    case B_TEXT: {
        static const char text[] = "rawgen: this file is deliberately not an image.\n";
        rc = rg_emit(r, rel, text, sizeof text - 1, 2);
        break;
    }
    default:
        break;
    }
    free(rel);
    return rc;
}
