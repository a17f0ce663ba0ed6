/* format/jpeg_dims.c - the frame size of a JPEG value, from its headers.
 *
 * A JPEG field stores each record's decoded shape beside its stream so that
 * readers plan crops without parsing (spec/FORMAT.md 4.13). The writer and
 * the verifier check the two agree; that needs only the markers before the
 * first scan, not a decoder, so the format library stays free of libjpeg. */
#include "jpeg_dims.h"

static bool is_sof(uint8_t m)
{
    /* SOF0-3, 5-7, 9-11, 13-15; C4 (DHT), C8 (JPG) and CC (DAC) are not frames. */
    return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
}

static uint64_t segment_length(const uint8_t *p, uint64_t at) { return (uint64_t)p[at + 2] << 8 | p[at + 3]; }

/* The walk over the marker segments from SOI up to the first scan's header
 * (SOS, the last it gives): moves *at from the segment there (0: the SOI)
 * to the next and returns its marker, the whole segment inside the bytes.
 * 0 at the end of the walk, the end of the image or bytes that are not one. */
static uint8_t next_segment(const uint8_t *p, uint64_t n, uint64_t *at)
{
    uint64_t i;
    if (*at == 0) {
        if (n < 4 || p[0] != 0xFF || p[1] != 0xD8) return 0;
        i = 2;
    } else {
        if (p[*at + 1] == 0xDA) return 0;
        i = *at + 2 + segment_length(p, *at);
    }
    while (i + 4 <= n) {
        if (p[i] != 0xFF) return 0;
        uint8_t m = p[i + 1];
        if (m == 0xFF) { /* fill byte */
            i++;
            continue;
        }
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) { /* markers without a length */
            i += 2;
            continue;
        }
        if (m == 0xD9) return 0; /* end of image */
        uint64_t len = segment_length(p, i);
        if (len < 2 || i + 2 + len > n) return 0;
        *at = i;
        return m;
    }
    return 0;
}

bool stk__jpeg_marker(const uint8_t *p, uint64_t n, uint8_t marker, uint64_t *at)
{
    uint64_t i = 0;
    for (uint8_t m; (m = next_segment(p, n, &i)) != 0;)
        if (m == marker) {
            *at = i;
            return true;
        }
    return false;
}

bool stk__jpeg_sof(const uint8_t *p, uint64_t n, uint64_t *at)
{
    uint64_t i = 0;
    for (uint8_t m; (m = next_segment(p, n, &i)) != 0;)
        if (is_sof(m)) {
            if (segment_length(p, i) < 8) return false;
            *at = i;
            return true;
        }
    return false;
}

bool stk__jpeg_dims(const uint8_t *p, uint64_t n, uint32_t *height, uint32_t *width, unsigned *components)
{
    uint64_t i;
    if (!stk__jpeg_sof(p, n, &i)) return false;
    *height = (uint32_t)p[i + 5] << 8 | p[i + 6];
    *width = (uint32_t)p[i + 7] << 8 | p[i + 8];
    *components = p[i + 9];
    return true;
}
