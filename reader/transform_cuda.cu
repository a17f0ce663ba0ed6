// reader/transform_cuda.cu - the image transform as one CUDA kernel.
//
// One thread per output pixel, all channels. The arithmetic is
// stk__xform_host's (transform.c) operation for operation, with explicit
// round-to-nearest intrinsics so that nvcc does not fuse multiply-adds: the
// device output equals the host backend's bit for bit, which is what lets the
// host backend's tests stand for this kernel (tests/gpu checks the equality
// on a real device).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

extern "C" {
#include "device.h"
}

namespace
{

__device__ void store(void *dst, unsigned long long i, int dtype, float v)
{
    if (dtype == STK_DT_F32) static_cast<float *>(dst)[i] = v;
    else if (dtype == STK_DT_F16) static_cast<__half *>(dst)[i] = __float2half_rn(v);
    else static_cast<__nv_bfloat16 *>(dst)[i] = __float2bfloat16_rn(v);
}

__global__ void transform_kernel(stk__xform_job j)
{
    unsigned ox = blockIdx.x * blockDim.x + threadIdx.x, oy = blockIdx.y * blockDim.y + threadIdx.y,
             n = blockIdx.z;
    if (ox >= j.out_w || oy >= j.out_h || n >= j.n) return;
    const stk__crop_box b = j.boxes[n];
    const unsigned char *img = j.src + (unsigned long long)n * j.H * j.W * j.C;
    float sx_scale = __fdiv_rn((float)b.w, (float)j.out_w), sy_scale = __fdiv_rn((float)b.h, (float)j.out_h);
    float sy = __fsub_rn(__fmul_rn(__fadd_rn((float)oy, 0.5f), sy_scale), 0.5f);
    sy = sy < 0 ? 0 : sy > (float)(b.h - 1) ? (float)(b.h - 1) : sy;
    int y0 = (int)sy, y1 = y0 + 1 < b.h ? y0 + 1 : y0;
    float fy = __fsub_rn(sy, (float)y0);
    unsigned xs = b.flip ? j.out_w - 1 - ox : ox;
    float sx = __fsub_rn(__fmul_rn(__fadd_rn((float)xs, 0.5f), sx_scale), 0.5f);
    sx = sx < 0 ? 0 : sx > (float)(b.w - 1) ? (float)(b.w - 1) : sx;
    int x0 = (int)sx, x1 = x0 + 1 < b.w ? x0 + 1 : x0;
    float fx = __fsub_rn(sx, (float)x0);
    const unsigned char *r0 = img + ((unsigned long long)(b.y0 + y0) * j.W + (unsigned long long)b.x0) * j.C;
    const unsigned char *r1 = img + ((unsigned long long)(b.y0 + y1) * j.W + (unsigned long long)b.x0) * j.C;
    float gx = __fsub_rn(1.0f, fx), gy = __fsub_rn(1.0f, fy);
    for (unsigned c = 0; c < j.C; c++) {
        float top = __fadd_rn(__fmul_rn((float)r0[x0 * j.C + c], gx), __fmul_rn((float)r0[x1 * j.C + c], fx));
        float bot = __fadd_rn(__fmul_rn((float)r1[x0 * j.C + c], gx), __fmul_rn((float)r1[x1 * j.C + c], fx));
        float v = __fadd_rn(__fmul_rn(top, gy), __fmul_rn(bot, fy));
        unsigned long long i = j.layout == STK_IMAGE_NCHW
                                   ? (((unsigned long long)n * j.C + c) * j.out_h + oy) * j.out_w + ox
                                   : (((unsigned long long)n * j.out_h + oy) * j.out_w + ox) * j.C + c;
        if (j.dtype == STK_DT_U8) { /* the resampled pixel, rounded half to even, as the host's nearbyintf */
            static_cast<unsigned char *>(j.dst)[i] =
                (unsigned char)__float2uint_rn(fminf(fmaxf(v, 0.0f), 255.0f));
            continue;
        }
        /* the host's norm_coef and fmaf: the same bytes */
        float scale = __fmul_rn(j.inv_std[c], 1.0f / 255.0f), shift = __fmul_rn(-j.mean[c], j.inv_std[c]);
        store(j.dst, i, j.dtype, __fmaf_rn(v, scale, shift));
    }
}

} // namespace

extern "C" int stk__cuda_transform(const stk__xform_job *job, cudaStream_t stream)
{
    dim3 block(32, 8), grid((job->out_w + 31) / 32, (job->out_h + 7) / 8, job->n);
    transform_kernel<<<grid, block, 0, stream>>>(*job);
    return (int)cudaGetLastError();
}
