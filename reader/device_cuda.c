/* reader/device_cuda.c - the CUDA backend: pinned staging memory, device
 * buffers, a copy stream, events. Plain C over the CUDA runtime API; the one
 * kernel (the transform) is in transform_cuda.cu.
 *
 * libstoker links the static CUDA runtime, which loads the driver
 * (libcuda.so) at run time: the library loads on machines without a GPU or
 * driver, and this backend then reports why it cannot start. */
#include "device.h"

#include <stdlib.h>

#ifndef STOKER_HAVE_CUDA

stk__backend *stk__backend_cuda_create(int device, stk_error *err)
{
    (void)device;
    return stk_error_set(err, STK_E_UNSUPPORTED,
                         "this libstoker was built without CUDA (configure with "
                         "-DSTOKER_CUDA=ON where the CUDA toolkit is installed)"),
           NULL;
}

int stk_cuda_available(stk_error *err)
{
    stk_error_set(err, STK_E_UNSUPPORTED, "this libstoker was built without CUDA");
    return 0;
}

#else

#  include <cuda_runtime_api.h>

int stk__cuda_transform(const stk__xform_job *job, cudaStream_t stream); /* transform_cuda.cu */

typedef struct {
    stk__backend b;
    int device;
} cuda_backend;

static int fail(stk_error *err, cudaError_t e, const char *what)
{
    return stk_error_set(err, e == cudaErrorMemoryAllocation ? STK_E_NOMEM : STK_E_IO, "CUDA %s: %s (%s)",
                         what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Every call runs on the reader's threads: make sure they use our device. */
static int use(stk__backend *b, stk_error *err)
{
    cudaError_t e = cudaSetDevice(((cuda_backend *)b)->device);
    return e == cudaSuccess ? STK_OK : fail(err, e, "cudaSetDevice");
}

#  define CALL(expr, what)                               \
    do {                                                 \
      cudaError_t e_ = (expr);                           \
      if (e_ != cudaSuccess) return fail(err, e_, what); \
    } while (0)

static int c_host_alloc(stk__backend *b, size_t n, void **p, stk_error *err)
{
    if (use(b, err)) return err ? err->code : STK_E_IO;
    CALL(cudaHostAlloc(p, n, cudaHostAllocPortable), "cudaHostAlloc (pinned staging slots)");
    return STK_OK;
}

static void c_host_free(stk__backend *b, void *p)
{
    (void)b;
    cudaFreeHost(p);
}

static int c_dev_alloc(stk__backend *b, size_t n, void **p, stk_error *err)
{
    if (use(b, err)) return err ? err->code : STK_E_IO;
    CALL(cudaMalloc(p, n), "cudaMalloc (device batch buffers)");
    return STK_OK;
}

static void c_dev_free(stk__backend *b, void *p)
{
    (void)b;
    if (p) cudaFree(p);
}

static int c_stream_create(stk__backend *b, void **s, stk_error *err)
{
    if (use(b, err)) return err ? err->code : STK_E_IO;
    cudaStream_t st;
    /* non-blocking: the copy stream must not serialise with the legacy
     * default stream the trainer may be using */
    CALL(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    *s = st;
    return STK_OK;
}

static void c_stream_destroy(stk__backend *b, void *s)
{
    (void)b;
    cudaStreamSynchronize((cudaStream_t)s);
    cudaStreamDestroy((cudaStream_t)s);
}

static int c_event_create(stk__backend *b, void **e, int timing, stk_error *err)
{
    if (use(b, err)) return err ? err->code : STK_E_IO;
    cudaEvent_t ev;
    CALL(cudaEventCreateWithFlags(&ev, timing ? cudaEventDefault : cudaEventDisableTiming),
         "cudaEventCreate");
    *e = ev;
    return STK_OK;
}

static void c_event_destroy(stk__backend *b, void *e)
{
    (void)b;
    cudaEventDestroy((cudaEvent_t)e);
}

static int c_copy(stk__backend *b, void *dst, const void *src, size_t n, void *s, stk_error *err)
{
    if (use(b, err)) return err ? err->code : STK_E_IO;
    CALL(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, (cudaStream_t)s), "cudaMemcpyAsync (upload)");
    return STK_OK;
}

static int c_record(stk__backend *b, void *e, void *s, stk_error *err)
{
    (void)b;
    CALL(cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s), "cudaEventRecord");
    return STK_OK;
}

static int c_wait(stk__backend *b, void *s, void *e, stk_error *err)
{
    (void)b;
    CALL(cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0), "cudaStreamWaitEvent");
    return STK_OK;
}

static int c_sync(stk__backend *b, void *e, stk_error *err)
{
    (void)b;
    CALL(cudaEventSynchronize((cudaEvent_t)e), "cudaEventSynchronize");
    return STK_OK;
}

static double c_elapsed(stk__backend *b, void *start, void *end)
{
    (void)b;
    float ms = 0;
    return cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)end) == cudaSuccess ? ms * 1e-3 : 0;
}

static int c_transform(stk__backend *b, const stk__xform_job *job, void *s, stk_error *err)
{
    if (use(b, err)) return err ? err->code : STK_E_IO;
    CALL((cudaError_t)stk__cuda_transform(job, (cudaStream_t)s), "transform kernel launch");
    return STK_OK;
}

static void c_destroy(stk__backend *b) { free(b); }

int stk_cuda_available(stk_error *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        stk_error_set(err, STK_E_UNSUPPORTED, "no CUDA device: cudaGetDeviceCount: %s",
                      cudaGetErrorString(e));
        return 0;
    }
    if (n == 0) {
        stk_error_set(err, STK_E_UNSUPPORTED, "no CUDA device: cudaGetDeviceCount found none");
        return 0;
    }
    return 1;
}

stk__backend *stk__backend_cuda_create(int device, stk_error *err)
{
    if (!stk_cuda_available(err)) return NULL;
    int n = 0;
    cudaGetDeviceCount(&n);
    if (device < 0 || device >= n)
        return stk_error_set(err, STK_E_ARG, "CUDA device %d out of range (%d devices)", device, n), NULL;
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) return fail(err, e, "cudaSetDevice"), NULL;
    cuda_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return stk_error_set(err, STK_E_NOMEM, "out of memory"), NULL;
    stk__backend *b = &cb->b;
    cb->device = device;
    b->kind = STK_DEVICE_CUDA;
    b->name = "cuda";
    b->host_alloc = c_host_alloc;
    b->host_free = c_host_free;
    b->dev_alloc = c_dev_alloc;
    b->dev_free = c_dev_free;
    b->stream_create = c_stream_create;
    b->stream_destroy = c_stream_destroy;
    b->event_create = c_event_create;
    b->event_destroy = c_event_destroy;
    b->copy_h2d = c_copy;
    b->event_record = c_record;
    b->stream_wait = c_wait;
    b->event_sync = c_sync;
    b->elapsed = c_elapsed;
    b->transform = c_transform;
    b->destroy = c_destroy;
    return b;
}

#endif
