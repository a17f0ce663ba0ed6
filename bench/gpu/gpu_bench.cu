// bench/gpu/gpu_bench.cu - the device path measured against its limits, in
// one run (needs a CUDA device; exits 77 with the reason without one).
//
//   gpu_bench DATASET [-t THREADS] [-b BATCH] [-s SECONDS] [-k KERNEL_MS]
//
// 1. H2D limit: plain cudaMemcpyAsync of batch-sized buffers from pinned
//    memory on one stream, back to back.
// 2. H2D through the reader: shuffled batches (image + label) uploaded by
//    libstoker, consumed by a stream that waits on each batch's event; GB/s
//    of wall time, and of the copy engine's own time (stats.h2d_s).
//    Target: at least 90% of (1).
// 3. Zero-copy sequential batches, two ways: cudaMemcpyAsync straight from
//    a shard's mapping registered read-only with cudaHostRegister, against
//    staging (memcpy from the mapping into pinned memory, then the async
//    copy), for consecutive batch-sized runs of the first shard. The reader
//    stages today; this is the measurement that decides (README, "Feeding
//    a GPU").
// 4. Overlap: a synthetic "training step" kernel that spins for KERNEL_MS
//    (by %globaltimer) and reads the batch; step time with the loader
//    feeding it against the same kernel alone. Target: at most 1.03x when
//    the upload of a batch is shorter than the kernel.
#include <cuda_runtime.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

extern "C" {
#include <stoker/reader.h>
}

#define CK(x)                                                             \
  do {                                                                    \
    cudaError_t e_ = (x);                                                 \
    if (e_ != cudaSuccess) {                                              \
      fprintf(stderr, "gpu_bench: %s: %s\n", #x, cudaGetErrorString(e_)); \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__device__ unsigned long long globaltimer(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// One block spins for ns nanoseconds; reading the batch makes the kernel
// depend on the upload, as a real step would.
__global__ void step_kernel(const unsigned char *batch, unsigned long long ns, unsigned *sink)
{
    unsigned long long t0 = globaltimer();
    unsigned acc = batch ? batch[threadIdx.x] : 0;
    while (globaltimer() - t0 < ns) acc += 1;
    if (acc == 0xdeadbeef) *sink = acc;
}

static stk_reader *open_reader(const char *path, unsigned threads, unsigned batch, cudaStream_t st)
{
    stk_reader_options o;
    stk_reader_options_init(&o);
    o.batch_size = batch;
    o.order = STK_ORDER_SHUFFLE;
    o.seed = 1;
    o.threads = threads;
    o.prefetch = 2 * threads;
    o.world_size = 1;
    o.rank = 0;
    o.fields = "image,label";
    o.device = STK_DEVICE_CUDA;
    o.stream = st;
    stk_error err;
    stk_reader *r = stk_reader_open(path, &o, &err);
    if (!r) {
        fprintf(stderr, "gpu_bench: %s\n", err.msg);
        exit(1);
    }
    return r;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    unsigned threads = 8, batch = 256;
    double seconds = 5, kernel_ms = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "-b") && i + 1 < argc) batch = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "-k") && i + 1 < argc) kernel_ms = atof(argv[++i]);
        else path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "usage: gpu_bench DATASET [-t THREADS] [-b BATCH] [-s SECONDS] [-k KERNEL_MS]\n");
        return 2;
    }
    stk_error why;
    if (!stk_cuda_available(&why)) {
        printf("gpu_bench: skipped: %s\n", why.msg);
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s\n", prop.name);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    unsigned *sink;
    CK(cudaMalloc(&sink, 4));

    // --- the reader first, to learn the batch bytes
    stk_reader *r = open_reader(path, threads, batch, st);
    const stk_batch *b;
    stk_error err;
    for (int i = 0; i < 8 && (b = stk_reader_next(r, &err)); i++) { // warm-up: page cache, pinned slots
    }
    b = stk_reader_next(r, &err);
    uint64_t batch_bytes = 0;
    for (unsigned k = 0; k < b->nfields; k++) batch_bytes += b->fields[k].nbytes;
    stk_reader_stats_reset(r);
    double t0 = now(), t;
    uint64_t n = 0;
    do {
        if (!(b = stk_reader_next(r, &err))) {
            fprintf(stderr, "gpu_bench: %s\n", err.msg);
            return 1;
        }
        n++;
        t = now();
    } while (t - t0 < seconds);
    stk_reader_synchronize(r, &err);
    t = now();
    stk_reader_stats s;
    stk_reader_stats_get(r, &s);
    double reader_gbs = n * (double)batch_bytes / (t - t0) / 1e9;
    double engine_gbs = s.h2d_s > 0 ? s.h2d_bytes / s.h2d_s / 1e9 : 0;
    char verdict[256];
    stk_reader_verdict(&s, verdict, sizeof verdict);

    // --- plain pinned cudaMemcpyAsync of the same sizes
    void *host, *dev;
    CK(cudaHostAlloc(&host, batch_bytes, cudaHostAllocDefault));
    CK(cudaMalloc(&dev, batch_bytes));
    memset(host, 1, batch_bytes);
    for (int i = 0; i < 4; i++) CK(cudaMemcpyAsync(dev, host, batch_bytes, cudaMemcpyHostToDevice, st));
    CK(cudaStreamSynchronize(st));
    uint64_t m = 0;
    double p0 = now(), p;
    do {
        for (int i = 0; i < 8; i++) CK(cudaMemcpyAsync(dev, host, batch_bytes, cudaMemcpyHostToDevice, st));
        CK(cudaStreamSynchronize(st));
        m += 8;
        p = now();
    } while (p - p0 < seconds);
    double plain_gbs = m * (double)batch_bytes / (p - p0) / 1e9;

    // --- zero-copy from a registered mapping against staging
    double reg_gbs = 0, staged_gbs = 0;
    {
        const stk_shard *sh = stk_dataset_shard(stk_reader_dataset(r), 0);
        int fd = open(stk_shard_path(sh), O_RDONLY);
        struct stat fst;
        if (fd >= 0 && fstat(fd, &fst) == 0 && (uint64_t)fst.st_size > 2 * batch_bytes) {
            size_t len = (size_t)fst.st_size;
            void *map = mmap(NULL, len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
            cudaError_t e =
                map == MAP_FAILED
                    ? cudaErrorInvalidValue
                    : cudaHostRegister(map, len, cudaHostRegisterReadOnly | cudaHostRegisterPortable);
            size_t chunks = len / batch_bytes;
            if (e == cudaSuccess) {
                double z0 = now();
                for (size_t i = 0; i < chunks; i++)
                    CK(cudaMemcpyAsync(dev, (const char *)map + i * batch_bytes, batch_bytes,
                                       cudaMemcpyHostToDevice, st));
                CK(cudaStreamSynchronize(st));
                reg_gbs = chunks * (double)batch_bytes / (now() - z0) / 1e9;
                cudaHostUnregister(map);
            } else {
                printf("cudaHostRegister of a shard mapping failed: %s\n", cudaGetErrorString(e));
                cudaGetLastError();
            }
            if (map != MAP_FAILED) {
                double z0 = now(); // staged, as the reader does: one copy into pinned memory, then the upload
                for (size_t i = 0; i < chunks; i++) {
                    memcpy(host, (const char *)map + i * batch_bytes, batch_bytes);
                    CK(cudaMemcpyAsync(dev, host, batch_bytes, cudaMemcpyHostToDevice, st));
                    CK(cudaStreamSynchronize(st)); // one staging buffer here: wait before refilling it
                }
                staged_gbs = chunks * (double)batch_bytes / (now() - z0) / 1e9;
                munmap(map, len);
            }
        }
        if (fd >= 0) close(fd);
    }

    // --- overlap: the step kernel alone, then fed by the reader
    unsigned long long ns = (unsigned long long)(kernel_ms * 1e6);
    int steps = (int)(seconds * 1000 / kernel_ms);
    if (steps < 20) steps = 20;
    step_kernel<<<1, 32, 0, st>>>((const unsigned char *)dev, ns, sink);
    CK(cudaStreamSynchronize(st));
    double c0 = now();
    for (int i = 0; i < steps; i++) step_kernel<<<1, 32, 0, st>>>((const unsigned char *)dev, ns, sink);
    CK(cudaStreamSynchronize(st));
    double compute_step = (now() - c0) / steps;
    double f0 = now();
    for (int i = 0; i < steps; i++) {
        b = stk_reader_next(r, &err); // the stream now waits for this batch's upload
        step_kernel<<<1, 32, 0, st>>>((const unsigned char *)b->fields[0].data, ns, sink);
        CK(cudaGetLastError());
    }
    CK(cudaStreamSynchronize(st));
    double fed_step = (now() - f0) / steps;
    double upload_ms = batch_bytes / (engine_gbs > 0 ? engine_gbs : plain_gbs) / 1e6;

    printf("batch %u records = %.1f MB, %u threads, prefetch %u\n", batch, batch_bytes / 1e6, threads,
           2 * threads);
    printf("RESULT h2d_plain %.2f GB/s\n", plain_gbs);
    printf("RESULT h2d_reader %.2f GB/s (copy engine %.2f GB/s; %.0f samples/s)\n", reader_gbs, engine_gbs,
           n * batch / (t - t0));
    printf(
        "RESULT zero_copy_registered %.2f GB/s (cudaMemcpyAsync from a cudaHostRegister'ed shard mapping)\n",
        reg_gbs);
    printf("RESULT zero_copy_staged %.2f GB/s (memcpy into pinned, then cudaMemcpyAsync; one buffer, not "
           "overlapped)\n",
           staged_gbs);
    printf("RESULT step_compute_only %.3f ms\n", compute_step * 1e3);
    printf("RESULT step_with_loader %.3f ms (upload of one batch %.2f ms)\n", fed_step * 1e3, upload_ms);
    printf("reader verdict: %s\n", verdict);
    double r1 = reader_gbs / plain_gbs, r2 = fed_step / compute_step;
    printf("H2D through the reader / plain pinned cudaMemcpyAsync   %.3f  target >= 0.90  %s\n", r1,
           r1 >= 0.90 ? "PASS" : "BELOW TARGET");
    printf("step with loader / compute-only step                    %.3f  target <= 1.03  %s%s\n", r2,
           r2 <= 1.03 ? "PASS" : "BELOW TARGET",
           upload_ms < kernel_ms ? "" : " (upload longer than the kernel)");
    stk_reader_close(r);
    CK(cudaFreeHost(host));
    CK(cudaFree(dev));
    CK(cudaFree(sink));
    CK(cudaStreamDestroy(st));
    return 0;
}
