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

bool stk__jpeg_sof(const uint8_t *p, uint64_t n, uint64_t *at)
{
    if (n < 4 || p[0] != 0xFF || p[1] != 0xD8) return false;
    uint64_t i = 2;
    while (i + 4 <= n) {
        if (p[i] != 0xFF) return false;
        uint8_t m = p[i + 1];
        if (m == 0xFF) { /* fill byte */
            i++;
            continue;
        }
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) { /* markers without a length */
            i += 2;
            continue;
        }
        if (m == 0xD9 || m == 0xDA) return false; /* end of image or first scan: no frame header */
        uint64_t len = (uint64_t)p[i + 2] << 8 | p[i + 3];
        if (len < 2 || i + 2 + len > n) return false;
        if (is_sof(m)) {
            if (len < 8) return false;
            *at = i;
            return true;
        }
        i += 2 + len;
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
