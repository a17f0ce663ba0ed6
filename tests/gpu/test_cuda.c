/* tests/gpu/test_cuda.c - the CUDA backend on a real device (label "cuda").
 *
 * Without a device it prints why and exits 77, which ctest reports as
 * skipped; the same protocol runs on every machine through the host backend
 * (tests/reader/test_device.c). With a device:
 *   - batches read back from device memory equal the records, also when the
 *     consumer's stream is held up by host functions of random length (a
 *     device buffer reused before its release event would show other data);
 *   - the CUDA transform equals the host backend's output bit for bit, for
 *     every dtype and layout (the kernel's arithmetic is written to match);
 *   - close while uploads are queued is clean. */
#define _GNU_SOURCE
#include "testutil.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define SEED 21
#define CK(expr) ck_assert_msg((expr) == cudaSuccess, "%s failed", #expr)

/* A scratch dataset of n standard records in shards of `per`. */
static void make(char *dir, size_t cap, const char *name, uint64_t n, uint64_t per)
{
    tu_scratch_std_dataset(dir, cap, name, SEED, n, per);
}

static void CUDART_CB dawdle(void *arg)
{
    struct timespec ts = {0, (long)(uintptr_t)arg * 1000};
    nanosleep(&ts, NULL);
}

START_TEST(batches_on_device)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "cuda-batches", 300, 70);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (int order = STK_ORDER_SEQUENTIAL; order <= STK_ORDER_SHUFFLE; order++) {
        stk_reader_options o = tu_reader_options(16, order);
        o.threads = 2;
        o.prefetch = 2;
        o.device = STK_DEVICE_CUDA;
        o.stream = st;
        o.fields = "image,label";
        stk_reader *r = tu_open_reader(dir, &o);
        stk_error err;
        stk_reader_set_epochs(r, 2);
        const stk_batch *b;
        uint16_t img[16 * TU_IMG_ELEMS];
        int32_t lab[16];
        srand(3);
        while ((b = stk_reader_next(r, &err))) {
            ck_assert(b->on_device);
            /* hold the consumer's stream up, then read the batch back on it */
            CK(cudaLaunchHostFunc(st, dawdle, (void *)(uintptr_t)(rand() % 3000)));
            CK(cudaMemcpyAsync(img, b->fields[0].data, b->fields[0].nbytes, cudaMemcpyDeviceToHost, st));
            CK(cudaMemcpyAsync(lab, b->fields[1].data, b->fields[1].nbytes, cudaMemcpyDeviceToHost, st));
            CK(cudaStreamSynchronize(st));
            for (uint32_t i = 0; i < b->size; i++) {
                tu_record want;
                tu_std_record(&want, SEED, b->records[i]);
                ck_assert(memcmp(img + i * TU_IMG_ELEMS, want.image, sizeof want.image) == 0);
                ck_assert_int_eq(lab[i], want.label);
            }
        }
        ck_assert_int_eq(err.code, STK_OK);
        stk_reader_stats s;
        stk_reader_stats_get(r, &s);
        ck_assert_int_eq(s.device, STK_DEVICE_CUDA);
        ck_assert(s.h2d_s > 0);
        stk_reader_close(r);
    }
    CK(cudaStreamDestroy(st));
}
END_TEST

/* A u8 image dataset: shardgen's layout, written here. */
static void make_images(char *dir, size_t cap)
{
    tu_scratch(dir, cap, "cuda-images");
    stk_schema s;
    stk_schema_init(&s);
    uint64_t shape[3] = {48, 40, 3};
    ck_assert_int_eq(stk_schema_add_tensor(&s, "image", STK_DT_U8, 3, shape, NULL), 0);
    stk_dataset_options o = {0};
    stk_dataset_writer *w = stk_dataset_writer_create(dir, &s, &o, NULL);
    ck_assert_ptr_nonnull(w);
    static uint8_t img[48 * 40 * 3];
    for (uint64_t i = 0; i < 40; i++) {
        tu_fill(img, sizeof img, i);
        stk_value v = {img, sizeof img};
        ck_assert_int_eq(stk_dataset_writer_append(w, &v, NULL), 0);
    }
    ck_assert_int_eq(stk_dataset_writer_finish(w, NULL), 0);
}

static void read_all(const char *dir, int device, const stk_transform *t, uint8_t *out, size_t cap,
                     size_t *len)
{
    stk_reader_options o = tu_reader_options(8, STK_ORDER_SHUFFLE);
    o.seed = 4;
    o.device = device;
    o.transform = t;
    stk_reader *r = tu_open_reader(dir, &o);
    stk_error err;
    stk_reader_set_epochs(r, 1);
    const stk_batch *b;
    *len = 0;
    while ((b = stk_reader_next(r, &err))) {
        const stk_batch_field *f = &b->fields[0];
        ck_assert(*len + f->nbytes <= cap);
        if (device == STK_DEVICE_CUDA) {
            ck_assert_int_eq(stk_reader_synchronize(r, &err), 0);
            CK(cudaMemcpy(out + *len, f->data, f->nbytes, cudaMemcpyDeviceToHost));
        } else {
            memcpy(out + *len, f->data, f->nbytes);
        }
        *len += f->nbytes;
    }
    ck_assert_int_eq(err.code, STK_OK);
    stk_reader_close(r);
}

START_TEST(transform_matches_host)
{
    char dir[TU_PATH];
    make_images(dir, sizeof dir);
    static uint8_t a[40 * 3 * 32 * 32 * 4], b[sizeof a];
    static const int dtypes[] = {STK_DT_F32, STK_DT_F16, STK_DT_BF16};
    for (int d = 0; d < 3; d++)
        for (int layout = 0; layout < 2; layout++) {
            stk_transform t;
            stk_transform_imagenet(&t, 1, 32);
            t.dtype = dtypes[d];
            t.layout = layout;
            size_t na, nb;
            read_all(dir, STK_DEVICE_CUDA, &t, a, sizeof a, &na);
            read_all(dir, STK_DEVICE_HOST, &t, b, sizeof b, &nb);
            ck_assert_uint_eq(na, nb);
            ck_assert_msg(memcmp(a, b, na) == 0, "CUDA and host transforms differ (dtype %d, layout %d)",
                          dtypes[d], layout);
        }
}
END_TEST

START_TEST(close_with_uploads_queued)
{
    char dir[TU_PATH];
    make(dir, sizeof dir, "cuda-close", 400, 100);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (int round = 0; round < 10; round++) {
        stk_reader_options o = tu_reader_options(10, round % 2);
        o.threads = 3;
        o.prefetch = 6;
        o.device = STK_DEVICE_CUDA;
        o.stream = round % 3 ? st : NULL;
        stk_reader *r = tu_open_reader(dir, &o);
        stk_error err;
        for (int i = 0; i < round % 4; i++) ck_assert_ptr_nonnull(stk_reader_next(r, &err));
        CK(cudaLaunchHostFunc(st, dawdle, (void *)(uintptr_t)20000));
        stk_reader_close(r);
    }
    CK(cudaStreamSynchronize(st));
    CK(cudaStreamDestroy(st));
}
END_TEST

int main(void)
{
    stk_error why;
    if (!stk_cuda_available(&why)) {
        printf("test_cuda: skipped: %s\n", why.msg);
        return 77;
    }
    const tu_case cases[] = {
        {.name = "cuda",
         .timeout = 300,
         .tests = {batches_on_device, transform_matches_host, close_with_uploads_queued}},
    };
    return tu_run_table("cuda", cases, sizeof cases / sizeof *cases);
}
