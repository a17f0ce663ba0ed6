/* raw_probe - what libjpeg's raw-plane API would save on a crop's decode.
 *
 *   raw_probe [--eval] [--size S] [--rounds R] FILE.jpg...
 *
 * For each baseline or progressive YCbCr JPEG, the box the load path would
 * crop (a torchvision RandomResizedCrop box from a per-file seed, or the eval
 * centre crop's source box) planned by image/'s planner, then decoded in
 * these ways, in turn per file (the order rotating), each timed in the
 * thread's CPU time (a shared machine's other load moves wall time far more):
 *   rgb region   what the load path does today (image/jpeg.c's region():
 *                jpeg_crop_scanline, jpeg_skip_scanlines, stop after the
 *                region's last row), RGB out
 *   ycc region   the same, YCbCr out (libjpeg's null colour conversion)
 *   raw to last  jpeg_read_raw_data, iMCU rows down to the region's last
 *                row: the raw-plane route. libjpeg-turbo refuses
 *                jpeg_crop_scanline and jpeg_skip_scanlines once raw_data_out
 *                is set (both want DSTATE_SCANNING; raw mode is
 *                DSTATE_RAW_OK), so every column and the rows above are
 *                inverse-transformed too
 *   rgb wide     rgb region over the whole width (no column crop)
 *   rgb above    rgb region with the rows above read, not skipped
 *   raw frame    jpeg_read_raw_data of the whole frame
 *   rgb frame    the whole frame to RGB
 * at the plan's DCT scale. Prints microseconds per image and the ratio to
 * rgb region. Files that are not 3-component YCbCr are left out. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jpeglib.h>

#include "crop_box.h"
#include "image.h"

enum { RGB_REGION, YCC_REGION, RAW_LAST, RGB_WIDE, RGB_ABOVE, RAW_FRAME, RGB_FRAME, WAYS };
static const char *const way_name[WAYS] = {"rgb region (today)",  "ycc region", "raw to last row", "rgb wide",
                                           "rgb rows above read", "raw frame",  "rgb frame"};

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
} probe_err;

static void on_error(j_common_ptr ci) { longjmp(((probe_err *)(void *)ci->err)->jb, 1); }

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct {
    uint8_t *p;
    size_t cap;
} scratch;

static uint8_t *need(scratch *s, size_t n)
{
    if (n > s->cap) {
        free(s->p);
        if (!(s->p = malloc(n))) {
            fprintf(stderr, "raw_probe: out of memory\n");
            exit(1);
        }
        s->cap = n;
    }
    return s->p;
}

/* One decode of [x0, x0 + w) x [y0, y0 + h) of the frame at num/8, the way
 * `way` says. 0, or -1 when libjpeg failed. */
typedef struct {
    stk__rgb_view rgb; /* rgb region: the plan's region */
    stk__ycc_view ycc; /* raw frame: the whole frame's planes */
} decoded;

static int decode(struct jpeg_decompress_struct *ci, probe_err *pe, scratch *s, const uint8_t *d, size_t n,
                  int way, const stk__jpeg_plan *p, decoded *out)
{
    if (setjmp(pe->jb)) {
        jpeg_abort_decompress(ci);
        return -1;
    }
    jpeg_mem_src(ci, d, (unsigned long)n);
    jpeg_read_header(ci, TRUE);
    bool raw = way == RAW_LAST || way == RAW_FRAME;
    ci->scale_num = p->num;
    ci->scale_denom = 8;
    ci->raw_data_out = raw;
    ci->out_color_space = way == YCC_REGION ? JCS_YCbCr : JCS_RGB;
    jpeg_start_decompress(ci);
    JDIMENSION OW = ci->output_width, OH = ci->output_height, x0 = p->x0, w = p->w, y0 = p->y0, h = p->h;
    if (way == RAW_FRAME || way == RGB_FRAME) y0 = 0, h = OH;
    if (raw) {
        JSAMPROW rows[3][2 * DCTSIZE];
        JSAMPARRAY planes[3];
        /* raw frame keeps every row (for the resample after it); raw to
         * last row one iMCU row, reused */
        size_t pitch[3], at[3], total = 0, prows[3];
        JDIMENSION imcu = (JDIMENSION)(ci->max_v_samp_factor * ci->min_DCT_scaled_size);
        JDIMENSION calls = way == RAW_FRAME ? (OH + imcu - 1) / imcu : 1;
        for (int c = 0; c < 3; c++) {
            const jpeg_component_info *cp = &ci->comp_info[c];
            pitch[c] = (size_t)cp->width_in_blocks * (size_t)cp->DCT_scaled_size + 64;
            prows[c] = (size_t)(cp->v_samp_factor * cp->DCT_scaled_size);
            at[c] = total;
            total += pitch[c] * prows[c] * calls;
        }
        uint8_t *b = need(s, total + 64);
        for (JDIMENSION y = 0, call = 0; y < y0 + h; call += way == RAW_FRAME) {
            for (int c = 0; c < 3; c++) {
                for (size_t r = 0; r < prows[c]; r++)
                    rows[c][r] = b + at[c] + pitch[c] * (prows[c] * call + r);
                planes[c] = rows[c];
            }
            JDIMENSION got = jpeg_read_raw_data(ci, planes, imcu);
            if (!got) break;
            y += got;
        }
        unsigned full = (unsigned)(ci->max_h_samp_factor * ci->min_DCT_scaled_size),
                 fullv = (unsigned)(ci->max_v_samp_factor * ci->min_DCT_scaled_size);
        const jpeg_component_info *cb = &ci->comp_info[1];
        out->ycc = (stk__ycc_view){{b + at[0], b + at[1], b + at[2]},
                                   {pitch[0], pitch[1], pitch[2]},
                                   OW,
                                   OH,
                                   full / (unsigned)(cb->h_samp_factor * cb->DCT_scaled_size),
                                   fullv / (unsigned)(cb->v_samp_factor * cb->DCT_scaled_size)};
    } else {
        JDIMENSION xo = x0 ? x0 - 1 : 0, want = x0 - xo + w + 2, cw = OW - xo < want ? OW - xo : want;
        if (way == RGB_WIDE || way == RGB_FRAME) xo = 0, cw = OW;
        jpeg_crop_scanline(ci, &xo, &cw);
        size_t row = (size_t)cw * 3;
        uint8_t *b = need(s, row * (h + 16));
        if (way == RGB_ABOVE)
            for (JDIMENSION y = 0; y < y0;) {
                JSAMPROW r1 = b;
                JDIMENSION got = jpeg_read_scanlines(ci, &r1, 1);
                if (!got) break;
                y += got;
            }
        else if (y0) jpeg_skip_scanlines(ci, y0);
        out->rgb = (stk__rgb_view){b + (size_t)(x0 - xo) * 3, p->w, p->h, row, 16 * row};
        for (JDIMENSION y = 0; y < h;) {
            JSAMPROW rows[16];
            JDIMENSION k = h - y < 16 ? h - y : 16;
            for (JDIMENSION i = 0; i < k; i++) rows[i] = b + row * (y + i);
            JDIMENSION got = jpeg_read_scanlines(ci, rows, k);
            if (!got) break;
            y += got;
        }
    }
    jpeg_abort_decompress(ci);
    return 0;
}

/* 1 when d is a 3-component YCbCr JPEG (its size in *W, *H), else 0. */
static int is_ycc(struct jpeg_decompress_struct *ci, probe_err *pe, const uint8_t *d, size_t n, uint32_t *W,
                  uint32_t *H)
{
    if (setjmp(pe->jb)) {
        jpeg_abort_decompress(ci);
        return 0;
    }
    jpeg_mem_src(ci, d, (unsigned long)n);
    jpeg_read_header(ci, TRUE);
    *W = ci->image_width;
    *H = ci->image_height;
    int ycc = ci->num_components == 3 && ci->jpeg_color_space == JCS_YCbCr;
    jpeg_abort_decompress(ci);
    return ycc;
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *d = NULL;
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (len > 0 && fseek(f, 0, SEEK_SET) == 0 && (d = malloc((size_t)len)) &&
        fread(d, 1, (size_t)len, f) != (size_t)len) {
        free(d);
        d = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return d;
}

int main(int argc, char **argv)
{
    int eval = 0, rounds = 1, first = 1;
    uint32_t o = 224;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "--eval")) eval = 1;
        else if (!strcmp(argv[first], "--size") && first + 1 < argc) o = (uint32_t)atoi(argv[++first]);
        else if (!strcmp(argv[first], "--rounds") && first + 1 < argc) rounds = atoi(argv[++first]);
        else {
            fprintf(stderr, "usage: raw_probe [--eval] [--size S] [--rounds R] FILE.jpg...\n");
            return 2;
        }
    }
    struct jpeg_decompress_struct ci;
    probe_err pe;
    ci.err = jpeg_std_error(&pe.pub);
    pe.pub.error_exit = on_error;
    jpeg_create_decompress(&ci);
    scratch s = {NULL, 0};
    double t[WAYS] = {0}, rz_rgb = 0, rz_ycc = 0;
    long rz_n = 0;
    stk__resizer *rs = stk__resizer_new();
    uint8_t *dst = malloc((size_t)o * o * 3);
    if (!rs || !dst) return 1;
    long images = 0, left_out = 0, scaled = 0;
    for (int r = 0; r < rounds; r++)
        for (int i = first; i < argc; i++) {
            size_t n = 0;
            uint8_t *d = slurp(argv[i], &n);
            if (!d) {
                fprintf(stderr, "raw_probe: cannot read %s\n", argv[i]);
                return 1;
            }
            uint32_t W = 0, H = 0;
            if (!is_ycc(&ci, &pe, d, n, &W, &H)) {
                free(d);
                left_out++;
                continue;
            }
            lb_crop cb;
            lb_crop_of((uint64_t)i, W, H, o, eval, &cb);
            stk__jpeg_plan p;
            stk__jpeg_plan_make(W, H, cb.x, cb.y, cb.w, cb.h, o, o, STK_IMG_SCALES_POW2, eval, &p);
            scaled += p.num < 8;
            for (int k = 0; k < WAYS; k++) {
                int way = (k + i + r) % WAYS;
                double t0 = cpu_now();
                decoded dc;
                if (decode(&ci, &pe, &s, d, n, way, &p, &dc)) {
                    fprintf(stderr, "raw_probe: %s does not decode (%s)\n", argv[i], way_name[way]);
                    return 1;
                }
                t[way] += cpu_now() - t0;
                stk__rect win = {0, 0, o, o};
                if (way == RGB_REGION) { /* the load path's resample */
                    t0 = cpu_now();
                    if (stk__resize_box(rs, &dc.rgb, p.bx, p.by, p.bw, p.bh, o, o, &win, 0, dst,
                                        (size_t)o * 3))
                        return 1;
                    rz_rgb += cpu_now() - t0;
                } else if (way == RAW_FRAME && p.num == 8 && dc.ycc.sub_x <= 2 && dc.ycc.sub_y <= 2) {
                    /* the raw route's: the box as the window of a resize mapping it to S x S */
                    uint64_t rw, rh;
                    stk__rect pw;
                    lb_box_window(W, H, &cb, o, &rw, &rh, &pw);
                    t0 = cpu_now();
                    if (stk__resize_ycc(rs, &dc.ycc, rw, rh, &pw, dst, (size_t)o * 3)) return 1;
                    rz_ycc += cpu_now() - t0;
                    rz_n++;
                }
            }
            images++;
            free(d);
        }
    jpeg_destroy_decompress(&ci);
    free(s.p);
    stk__resizer_free(rs);
    free(dst);
    if (!images) {
        fprintf(stderr, "raw_probe: no YCbCr JPEG among the files\n");
        return 1;
    }
    printf("%ld images (%ld DCT-scaled, %ld left out), %s, CPU us per image:\n", images, scaled, left_out,
           eval ? "eval centre crop" : "RandomResizedCrop");
    for (int w = 0; w < WAYS; w++)
        printf("  %-22s %9.1f  %.2fx\n", way_name[w], t[w] / (double)images * 1e6, t[w] / t[RGB_REGION]);
    printf("  resample: RGB box (today) %.1f; YCbCr planes %.1f over %ld unscaled images\n",
           rz_rgb / (double)images * 1e6, rz_n ? rz_ycc / (double)rz_n * 1e6 : 0.0, rz_n);
    return 0;
}
