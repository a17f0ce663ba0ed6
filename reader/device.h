/* reader/device.h - the device layer (upload backends, the transform, the
 * load-time crop): what happens to a sample's pixels, on the host or a
 * device. It calls the order layer (the crop's random draws) and util only.
 * Internal.
 *
 * The backend seam of the upload path: the upload protocol (upload.c) is written once against these operations,
 * which mirror the CUDA runtime's stream/event model:
 *   - a stream runs its operations in order, asynchronously to the caller;
 *   - event_record(e, s) marks "everything queued on s so far";
 *   - stream_wait(s, e) makes s wait (not the caller) until the last record
 *     of e made before the call has completed; an event never recorded is
 *     complete;
 *   - event_sync(e) blocks the caller the same way.
 * A NULL stream is the default stream: CUDA's legacy stream 0, or for the
 * host backend the calling thread itself (operations run at once).
 *
 * device_host.c implements it with threads and ordinary memory; device_cuda.c
 * with the CUDA runtime. */
#ifndef STK_READER_DEVICE_H
#define STK_READER_DEVICE_H

#include "stoker/reader.h"
#include "timeline.h"

/* One transform launch: n samples of src u8 [H, W, C] (device memory) into
 * dst (device memory), with per-sample boxes from params (device memory). */
typedef struct {
    int32_t x0, y0, w, h; /* crop box in the source image */
    int32_t flip;         /* 1: mirror horizontally        */
    int32_t pad[3];       /* 32 bytes per sample           */
} stk__crop_box;

typedef struct {
    const uint8_t *src;
    void *dst;
    const stk__crop_box *boxes;
    uint32_t n, H, W, C;
    uint32_t out_h, out_w;
    int dtype, layout;
    float mean[4], inv_std[4];
} stk__xform_job;

typedef struct stk__backend stk__backend;
struct stk__backend {
    int kind; /* stk_device */
    const char *name;
    int (*host_alloc)(stk__backend *b, size_t n, void **p, stk_error *err);
    void (*host_free)(stk__backend *b, void *p);
    int (*dev_alloc)(stk__backend *b, size_t n, void **p, stk_error *err);
    void (*dev_free)(stk__backend *b, void *p);
    int (*stream_create)(stk__backend *b, void **s, stk_error *err);
    void (*stream_destroy)(stk__backend *b, void *s); /* drains first */
    int (*event_create)(stk__backend *b, void **e, int timing, stk_error *err);
    void (*event_destroy)(stk__backend *b, void *e);
    int (*copy_h2d)(stk__backend *b, void *dst, const void *src, size_t n, void *s, stk_error *err);
    int (*event_record)(stk__backend *b, void *e, void *s, stk_error *err);
    int (*stream_wait)(stk__backend *b, void *s, void *e, stk_error *err);
    int (*event_sync)(stk__backend *b, void *e, stk_error *err);
    /* Seconds between two completed timing events (0 when unknown). */
    double (*elapsed)(stk__backend *b, void *start, void *end);
    int (*transform)(stk__backend *b, const stk__xform_job *job, void *s, stk_error *err);
    void (*destroy)(stk__backend *b);
};

stk__backend *stk__backend_host_create(stk_error *err);
/* NULL with STK_E_UNSUPPORTED when the build lacks CUDA or no device works. */
stk__backend *stk__backend_cuda_create(int device, stk_error *err);

/* The transform's CPU reference, used by the host backend: the same math as
 * the CUDA kernel, sample by sample. */
void stk__xform_host(const stk__xform_job *job);
/* One sample already cropped to out_h x out_w (u8 HWC at hwc) into job's
 * dtype and layout at dst, (x / 255 - mean) / std as one fused multiply-add
 * per value (the bytes stk__xform_host gives for an uncropped input of that
 * size): the workers' normalising when the crop was theirs and there is no
 * device. */
void stk__xform_normalise(const stk__xform_job *j, const uint8_t *hwc, void *dst);
/* The crop box and flip of one sample: a pure function of the transform,
 * the image size, seed, epoch and global record index. */
void stk__xform_box(const stk_transform *t, uint32_t H, uint32_t W, uint64_t seed, uint64_t epoch,
                    uint64_t record, stk__crop_box *box);
/* The box the reader crops for a drawn one (stk_crop_box, public): the
 * drawn box itself, except for the eval crop of images of their own size
 * (own_size), whose box is the source region that the window of
 * Resize(round(S / 0.875)) + CenterCrop(S) covers. load_crop.c decodes and
 * resamples this box; stk_reader_crop_box returns it. */
void stk__xform_load_box(const stk_transform *t, int own_size, uint32_t H, uint32_t W,
                         const stk__crop_box *drawn, stk_crop_box *box);
/* STK_E_ARG for a crop, random-resized range or flip probability the
 * transform may not have (the message names it). */
int stk__xform_check(const stk_transform *t, stk_error *err);
/* Output bytes per sample. */
uint64_t stk__xform_out_bytes(const stk_transform *t, uint32_t C);

/* The load-time crop of images of their own size (load_crop.c): one per
 * worker, made on first use. */
typedef struct stk__cropper stk__cropper;
stk__cropper *stk__cropper_new(void);
void stk__cropper_free(stk__cropper *c);
/* Record `record`'s image (value: dims[0] x dims[1] x 3 pixels, or a JPEG
 * stream of that shape when jpeg) cropped as t says for (seed, epoch), resized
 * to t->out_height x t->out_width x 3 at dst, mirrored when drawn so. */
int stk__cropper_run(stk__cropper *c, const stk_transform *t, uint64_t seed, uint64_t epoch, uint64_t record,
                     const void *value, uint64_t size, const uint64_t *dims, int jpeg, int square,
                     uint8_t *dst, stk_error *err);
/* The crop's stages, timed per cropper (so per worker) and summed: the JPEG
 * decode (entropy decoding, IDCT, upsampling and colour conversion of the
 * region), the resize with its flip (one pass: the mirror is in the
 * resize's tables), and the workers' normalising after it (timed by the
 * caller, stk__cropper_add). */
enum { STK__CROP_DECODE = 0, STK__CROP_RESIZE = 1, STK__CROP_NORM = 2, STK__CROP_STAGES = 3 };
/* Add the seconds per stage since the last call to sum[] and zero them. */
void stk__cropper_take(stk__cropper *c, double sum[STK__CROP_STAGES]);
/* Add secs to stage s. */
void stk__cropper_add(stk__cropper *c, int s, double secs);
/* Mark the decode and the resize of the next crop as ranges "decode" and
 * "resize" on track `track` of tl (trace.h), with batch seq and part as
 * their args: one crop a part, so that a trace keeps its room for the
 * coarser stages. tl NULL: nothing. */
void stk__cropper_trace(stk__cropper *c, stk__timeline *tl, unsigned track, uint64_t seq, unsigned part);

#endif
