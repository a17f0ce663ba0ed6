/* image/jpeg_splice.c - a region of a JPEG with restart markers, cut out as
 * a smaller JPEG without decoding anything.
 *
 * A restart marker (RSTn) ends an entropy-coded segment of a fixed number of
 * MCUs (the DRI interval) and resets the DC predictions and the bit reader:
 * each segment decodes on its own. When the segments tile the MCU rows (an
 * interval dividing the MCUs per row, or a whole number of rows), the
 * segments covering a box, renumbered and put behind the same tables and a
 * frame header of the cut's size, are a valid JPEG whose pixels are those of
 * the box in a whole decode (the IDCT works per block; with merged or no
 * chroma upsampling no pixel depends on a neighbouring MCU). Decoding it
 * entropy-decodes the box's segments only, where libjpeg's own region decode
 * (jpeg_skip_scanlines, jpeg_crop_scanline) entropy-decodes every row above
 * the box, at full width. pack stores JPEGs with restart markers
 * (stk__jpeg_transcode) for this.
 *
 * The walk trusts nothing: any stream it does not understand (no restart
 * markers, progressive or arithmetic coding, a first scan without every
 * component, markers out of sequence, fewer segments than the box needs) is
 * answered STK__JPEG_SPLICE_NO, and the caller decodes the stream itself,
 * whose decoder then names what is wrong. What follows the box's last
 * segment (more segments, more scans) is not looked at: the cut ends there. */
#include "image.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }

typedef struct {
    size_t sof, sos_end; /* the frame header's 0xFF; the first entropy byte */
    uint32_t W, H;
    uint32_t mcu_w, mcu_h; /* pixels */
    uint32_t mx, my;       /* MCUs per row, MCU rows */
    uint32_t ri;           /* the restart interval, in MCUs */
} frame_t;

/* Sampling factors of the frame header's components: the MCU's size. A
 * one-component scan is not interleaved: its MCU is one block. */
static bool frame_mcu(const uint8_t *s, uint32_t nf, frame_t *f)
{
    uint32_t hmax = 1, vmax = 1;
    for (uint32_t c = 0; c < nf; c++) {
        uint32_t hv = s[10 + 3 * c + 1], h = hv >> 4, v = hv & 15;
        if (h < 1 || h > 4 || v < 1 || v > 4) return false;
        hmax = h > hmax ? h : hmax;
        vmax = v > vmax ? v : vmax;
    }
    f->mcu_w = nf == 1 ? 8 : 8 * hmax;
    f->mcu_h = nf == 1 ? 8 : 8 * vmax;
    f->mx = (f->W + f->mcu_w - 1) / f->mcu_w;
    f->my = (f->H + f->mcu_h - 1) / f->mcu_h;
    return true;
}

/* The marker segments from SOI to the end of the first scan's header: one
 * baseline or extended Huffman frame of 1 or 3 components, a restart
 * interval, one scan of all of them in sequential mode. Its own walk, not
 * format/jpeg_dims.c's: that one passes over stray markers and gives the
 * first segment of a kind, where a cut must refuse what it does not know
 * and take the last DRI, as libjpeg does (a wrong interval would cut the
 * wrong segments). */
static bool walk_header(const uint8_t *d, size_t n, frame_t *f)
{
    if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return false;
    size_t at = 2;
    uint32_t nf = 0;
    f->sof = 0;
    f->ri = 0;
    for (;;) {
        while (at + 1 < n && d[at] == 0xFF && d[at + 1] == 0xFF) at++; /* fill bytes */
        if (at + 4 > n || d[at] != 0xFF) return false;
        uint32_t m = d[at + 1], len = be16(d + at + 2);
        if (len < 2 || len > n - at - 2) return false;
        const uint8_t *s = d + at; /* s[4 ..]: the segment's parameters */
        if (m == 0xC0 || m == 0xC1) {
            if (f->sof || len < 8 || s[4] != 8) return false;
            nf = s[9];
            if ((nf != 1 && nf != 3) || len != 8 + 3 * nf) return false;
            f->sof = at;
            f->H = be16(s + 5);
            f->W = be16(s + 7);
            if (!f->H || !f->W || !frame_mcu(s, nf, f)) return false;
        } else if (m == 0xDD) {
            if (len != 4) return false;
            f->ri = be16(s + 4);
        } else if (m == 0xDA) {
            uint32_t ns = len >= 3 ? s[4] : 0;
            if (!f->sof || ns != nf || len != 6 + 2 * ns) return false;
            const uint8_t *t = s + 5 + 2 * ns; /* Ss, Se, Ah/Al */
            if (t[0] != 0 || t[1] != 63 || t[2] != 0) return false;
            f->sos_end = at + 2 + len;
            return f->ri != 0;
        } else if ((m >= 0xC2 && m <= 0xCF && m != 0xC4 && m != 0xC8) || m < 0xC0 || m == 0xD8 || m == 0xD9 ||
                   (m >= 0xD0 && m <= 0xD7) || m == 0xDC) {
            return false; /* progressive, lossless, arithmetic, DNL, a stray marker */
        }
        at += 2 + (size_t)len;
    }
}

/* Which segments a box needs: per MCU row (rows spr segments wide, columns
 * [c0, c1)) or whole rows (segments [s0, s1) of rps rows each); the cut's
 * origin and size in pixels. */
typedef struct {
    uint32_t spr, c0, c1; /* segments per row (0: segments of whole rows) */
    uint32_t r0, r1;      /* MCU rows, or segments when spr == 0 */
    uint32_t ox, oy, w, h;
    uint64_t nseg;
} cut_t;

static bool plan_cut(const frame_t *f, uint32_t x0, uint32_t y0, uint32_t w, uint32_t h, cut_t *c)
{
    uint32_t mr0 = y0 / f->mcu_h, mr1 = (y0 + h - 1) / f->mcu_h + 1; /* MCU rows */
    uint64_t total = (uint64_t)f->mx * f->my;
    c->nseg = (total + f->ri - 1) / f->ri;
    if (f->mx % f->ri == 0) {
        c->spr = f->mx / f->ri;
        uint32_t seg_px = f->ri * f->mcu_w;
        c->c0 = x0 / seg_px;
        c->c1 = (x0 + w - 1) / seg_px + 1;
        c->r0 = mr0;
        c->r1 = mr1;
        c->ox = c->c0 * seg_px;
        c->oy = mr0 * f->mcu_h;
        uint64_t right = (uint64_t)c->c1 * seg_px, bottom = (uint64_t)mr1 * f->mcu_h;
        c->w = (uint32_t)(right < f->W ? right : f->W) - c->ox;
        c->h = (uint32_t)(bottom < f->H ? bottom : f->H) - c->oy;
        return c->r0 > 0 || c->c0 > 0 || c->c1 < c->spr; /* else nothing to leave out */
    }
    if (f->ri % f->mx) return false; /* segments straddle rows: no cut */
    uint32_t rps = f->ri / f->mx;
    c->spr = 0;
    c->c0 = 0;
    c->c1 = 1;
    c->r0 = mr0 / rps;
    c->r1 = (mr1 + rps - 1) / rps;
    c->ox = 0;
    c->oy = c->r0 * rps * f->mcu_h;
    uint64_t bottom = (uint64_t)c->r1 * rps * f->mcu_h;
    c->w = f->W;
    c->h = (uint32_t)(bottom < f->H ? bottom : f->H) - c->oy;
    return c->r0 > 0;
}

static bool wanted(const cut_t *c, uint64_t k)
{
    if (!c->spr) return k >= c->r0 && k < c->r1;
    uint64_t r = k / c->spr, col = k % c->spr;
    return r >= c->r0 && r < c->r1 && col >= c->c0 && col < c->c1;
}

static uint64_t last_wanted(const cut_t *c)
{
    return c->spr ? (uint64_t)(c->r1 - 1) * c->spr + c->c1 - 1 : (uint64_t)c->r1 - 1;
}

/* The end of entropy-coded segment k, which starts at `at`: the offset of
 * the marker that ends it (its first 0xFF: fill bytes may precede its code),
 * which must be RST(k mod 8), or any other marker for the stream's last
 * segment; *next: the byte after that marker. 0 when the stream does not
 * read so. */
static size_t segment_end(const uint8_t *d, size_t n, size_t at, uint64_t k, bool last, size_t *next)
{
    while (at < n) {
        const uint8_t *q = memchr(d + at, 0xFF, n - at);
        if (!q) return 0;
        size_t i = (size_t)(q - d), j = i + 1;
        while (j < n && d[j] == 0xFF) j++;
        if (j >= n) return 0;
        if (d[j] == 0x00) { /* a stuffed 0xFF data byte */
            at = j + 1;
            continue;
        }
        bool rst = d[j] >= 0xD0 && d[j] <= 0xD7;
        if (last ? rst : !rst || d[j] != 0xD0 + (k & 7)) return 0;
        *next = j + 1;
        return i;
    }
    return 0;
}

int stk__jpeg_splice(const uint8_t *data, size_t len, uint32_t x0, uint32_t y0, uint32_t w, uint32_t h,
                     stk__img_buf *out, stk__jpeg_cut *cut, stk_error *err)
{
    frame_t f = {0};
    cut_t c = {0};
    if (!walk_header(data, len, &f) || !w || !h || x0 >= f.W || y0 >= f.H || w > f.W - x0 || h > f.H - y0 ||
        !plan_cut(&f, x0, y0, w, h, &c))
        return STK__JPEG_SPLICE_NO;
    uint64_t last = last_wanted(&c);
    /* header + the wanted segments' bytes + a marker after each + EOI */
    uint64_t need = (uint64_t)len + 2 * (last + 1) + 2;
    if (need > SIZE_MAX / 2 || stk__img_buf_reserve(out, (size_t)need, "a JPEG cut", err))
        return STK_IMG_E_NOMEM;
    uint8_t *o = out->p;
    size_t ol = f.sos_end;
    memcpy(o, data, ol);
    o[f.sof + 5] = (uint8_t)(c.h >> 8); /* the frame header: the cut's size */
    o[f.sof + 6] = (uint8_t)c.h;
    o[f.sof + 7] = (uint8_t)(c.w >> 8);
    o[f.sof + 8] = (uint8_t)c.w;
    uint64_t emitted = 0;
    size_t at = f.sos_end;
    for (uint64_t k = 0; k <= last; k++) {
        size_t next = 0, end = segment_end(data, len, at, k, k + 1 == c.nseg, &next);
        if (!end) return STK__JPEG_SPLICE_NO;
        if (wanted(&c, k)) {
            if (emitted) { /* the marker before it, renumbered */
                o[ol++] = 0xFF;
                o[ol++] = (uint8_t)(0xD0 + ((emitted - 1) & 7));
            }
            memcpy(o + ol, data + at, end - at);
            ol += end - at;
            emitted++;
        }
        at = next;
    }
    o[ol++] = 0xFF;
    o[ol++] = 0xD9;
    *cut = (stk__jpeg_cut){c.ox, c.oy, c.w, c.h, ol};
    return STK_OK;
}
