/* format/jpeg_dims.h - the one JPEG frame-header (SOF) parser: the format
 * library's writer and verifier, image/jpeg.c (which checks every decoder's
 * header against it) and rawgen use it. Internal: not installed. */
#ifndef STOKER_FORMAT_JPEG_DIMS_H
#define STOKER_FORMAT_JPEG_DIMS_H

#include <stdbool.h>
#include <stdint.h>

/* Offset of the first frame header's marker (its 0xFF byte) in p[0 .. n),
 * walking the marker segments from SOI; the whole segment lies inside the
 * bytes and is at least 8 bytes long. false when there is no JPEG stream
 * with a frame header before its first scan. */
bool stk__jpeg_sof(const uint8_t *p, uint64_t n, uint64_t *at);

/* A JPEG value's frame size and component count, from that frame header;
 * false as stk__jpeg_sof. */
bool stk__jpeg_dims(const uint8_t *p, uint64_t n, uint32_t *height, uint32_t *width, unsigned *components);

#endif
