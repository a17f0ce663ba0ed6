/* format/jpeg_dims.h - the one JPEG marker-segment walk and frame-header
 * (SOF) parser: the format library's writer and verifier, image/jpeg.c
 * (which checks every decoder's header against it), rawgen and the image
 * tests use it. Internal: not installed. */
#ifndef STOKER_FORMAT_JPEG_DIMS_H
#define STOKER_FORMAT_JPEG_DIMS_H

#include <stdbool.h>
#include <stdint.h>

/* Offset of the first segment with `marker` (its 0xFF byte) in p[0 .. n),
 * walking the marker segments from SOI up to the first scan's header (SOS,
 * 0xDA, the last it looks at); the whole segment lies inside the bytes.
 * false when there is no JPEG stream with that segment before its scan.
 * rawgen and the image tests find the segments they cut or damage with it. */
bool stk__jpeg_marker(const uint8_t *p, uint64_t n, uint8_t marker, uint64_t *at);

/* Offset of the first frame header's marker (its 0xFF byte) in p[0 .. n),
 * walking the marker segments from SOI; the whole segment lies inside the
 * bytes and is at least 8 bytes long. false when there is no JPEG stream
 * with a frame header before its first scan. */
bool stk__jpeg_sof(const uint8_t *p, uint64_t n, uint64_t *at);

/* A JPEG value's frame size and component count, from that frame header;
 * false as stk__jpeg_sof. */
bool stk__jpeg_dims(const uint8_t *p, uint64_t n, uint32_t *height, uint32_t *width, unsigned *components);

#endif
