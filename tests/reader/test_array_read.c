/* tests/reader/test_array_read.c - the reader over variable-shape (array)
 * fields, raw and zstd: in every order and at 1 and 3 threads each record's
 * value and shape come back (stk_batch_field.values and .shapes), next to a
 * fixed tensor field, with verification on. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>

#define N 250

/* image u8[*,*,3], label i64, tokens i32[*] (zstd when asked). */
static void write_ds(const char *dir, int zstd)
{
    stk_schema s;
    stk_schema_init(&s);
    stk_error e;
    const uint64_t img[3] = {0, 0, 3}, tok[1] = {0};
    ck_assert_int_eq(stk_schema_add_array(&s, "image", STK_DT_U8, 3, img, &e), 0);
    ck_assert_int_eq(stk_schema_add_tensor(&s, "label", STK_DT_I64, 0, NULL, &e), 0);
    ck_assert_int_eq(stk_schema_add_array(&s, "tokens", STK_DT_I32, 1, tok, &e), 0);
    if (zstd) ck_assert_int_eq(stk_schema_set_codec(&s, 2, STK_CODEC_ZSTD, &e), 0);
    stk_dataset_options o = {.force = 1, .records_per_shard = 90, .zstd_block_bytes = 200};
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    for (uint64_t i = 0; i < N; i++) {
        uint8_t image[12 * 11 * 3];
        int32_t tokens[30];
        int64_t label = (int64_t)i;
        uint64_t dims[3] = {1 + i % 12, 1 + (i * 7) % 11, (i * 3) % 30};
        tu_fill(image, dims[0] * dims[1] * 3, i);
        for (uint64_t k = 0; k < dims[2]; k++) tokens[k] = (int32_t)(i * 100 + k);
        stk_value v[3] = {{image, dims[0] * dims[1] * 3}, {&label, 8}, {tokens, dims[2] * 4}};
        ck_assert_msg(stk_dataset_writer_append_dims(dw, v, dims, &e) == 0, "%s", e.msg);
    }
    ck_assert_msg(stk_dataset_writer_finish(dw, &e) == 0, "%s", e.msg);
}

static void check_record(const stk_batch *b, uint32_t j, int all_fields)
{
    uint64_t i = b->records[j];
    uint8_t image[12 * 11 * 3];
    uint64_t h = 1 + i % 12, w = 1 + (i * 7) % 11, nt = (i * 3) % 30;
    tu_fill(image, h * w * 3, i);
    const stk_batch_field *fi = &b->fields[0];
    ck_assert_str_eq(fi->name, "image");
    ck_assert_int_eq(fi->kind, STK_KIND_ARRAY);
    ck_assert_ptr_null(fi->data);
    ck_assert_uint_eq(fi->ndim, 4);
    ck_assert_uint_eq(fi->shape[1], 0);
    ck_assert_uint_eq(fi->shape[3], 3);
    const uint64_t *sh = stk_batch_shapes(b, 0) + (uint64_t)j * 3;
    ck_assert_msg(sh[0] == h && sh[1] == w && sh[2] == 3, "record %llu: shape %llux%llux%llu",
                  (unsigned long long)i, (unsigned long long)sh[0], (unsigned long long)sh[1],
                  (unsigned long long)sh[2]);
    ck_assert_uint_eq(fi->values[j].size, h * w * 3);
    ck_assert(memcmp(fi->values[j].data, image, h * w * 3) == 0);
    if (!all_fields) return;
    ck_assert_int_eq(((const int64_t *)b->fields[1].data)[j], (int64_t)i);
    ck_assert_ptr_null(stk_batch_shapes(b, 1));
    ck_assert_ptr_null(stk_batch_shapes(b, 3));
    const stk_batch_field *ft = &b->fields[2];
    ck_assert_uint_eq(stk_batch_shapes(b, 2)[j], nt);
    ck_assert_uint_eq(ft->values[j].size, nt * 4);
    const int32_t *t = ft->values[j].data;
    for (uint64_t k = 0; k < nt; k++) ck_assert_int_eq(t[k], (int32_t)(i * 100 + k));
}

START_TEST(every_order_and_thread_count)
{
    char dir[TU_PATH];
    int zstd = _i;
    tu_scratch(dir, sizeof dir, zstd ? "array-read-z" : "array-read");
    write_ds(dir, zstd);
    for (int order = STK_ORDER_SEQUENTIAL; order <= STK_ORDER_QUASI; order++)
        for (unsigned threads = 1; threads <= 3; threads += 2)
            for (int all = 0; all < 2; all++) {
                stk_reader_options o = tu_reader_options(16, order);
                o.threads = threads;
                o.tail = STK_TAIL_PARTIAL;
                o.verify = STK_VERIFY_ALWAYS;
                o.quasi_block_bytes = 512;
                o.quasi_window = 4;
                o.fields = all ? NULL : "image";
                stk_reader *r = tu_open_reader(dir, &o);
                uint8_t seen[N] = {0};
                uint64_t total = 0;
                for (int bi = 0; bi < 16; bi++) { /* one epoch: 250 / 16 -> 16 batches */
                    stk_error e;
                    const stk_batch *b = stk_reader_next(r, &e);
                    ck_assert_msg(b != NULL, "%s", e.msg);
                    ck_assert_uint_eq(b->nfields, all ? 3 : 1);
                    for (uint32_t j = 0; j < b->size; j++) {
                        check_record(b, j, all);
                        seen[b->records[j]]++;
                    }
                    total += b->size;
                }
                ck_assert_uint_eq(total, N);
                for (int i = 0; i < N; i++) ck_assert_uint_eq(seen[i], 1);
                stk_reader_close(r);
            }
}
END_TEST

TU_MAIN("array_read",
        {.name = "array_read", .timeout = 120, .loop = 2, .loop_tests = {every_order_and_thread_count}})
