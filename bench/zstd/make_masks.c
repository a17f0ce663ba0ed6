/* bench/zstd/make_masks.c - a segmentation-like dataset: mask u8[H,W] of a
 * few class blobs on background (what label maps look like: long runs of
 * one value) plus label i64, written raw and at zstd levels.
 *
 *   make_masks OUTDIR RECORDS SIDE LEVEL [BLOCK_BYTES]     (LEVEL 0: raw) */
#include <stdio.h>
#include <stdlib.h>

#include <stoker/format.h>

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: make_masks OUTDIR RECORDS SIDE LEVEL [BLOCK_BYTES]\n");
        return 2;
    }
    uint64_t n = strtoull(argv[2], NULL, 10), side = strtoull(argv[3], NULL, 10);
    int level = atoi(argv[4]);
    stk_schema s;
    stk_error err;
    stk_schema_init(&s);
    uint64_t shape[2] = {side, side};
    if (stk_schema_add_tensor(&s, "mask", STK_DT_U8, 2, shape, &err) ||
        stk_schema_add_tensor(&s, "label", STK_DT_I64, 0, NULL, &err) ||
        (level && (stk_schema_set_codec(&s, 0, STK_CODEC_ZSTD, &err) ||
                   stk_schema_set_codec(&s, 1, STK_CODEC_ZSTD, &err)))) {
        fprintf(stderr, "make_masks: %s\n", err.msg);
        return 1;
    }
    stk_dataset_options o = {0};
    o.force = 1;
    o.zstd_level = level;
    o.zstd_block_bytes = argc > 5 ? strtoull(argv[5], NULL, 10) : 0;
    stk_dataset_writer *dw = stk_dataset_writer_create(argv[1], &s, &o, &err);
    uint8_t *m = malloc(side * side);
    if (!dw || !m) {
        fprintf(stderr, "make_masks: %s\n", dw ? "out of memory" : err.msg);
        return 1;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t st = i * 7919 + 1;
        for (uint64_t k = 0; k < side * side; k++) m[k] = 0;
        int blobs = 1 + (int)(next(&st) % 5);
        for (int b = 0; b < blobs; b++) { /* ellipses of one class each */
            int64_t cx = (int64_t)(next(&st) % side), cy = (int64_t)(next(&st) % side);
            int64_t rx = 8 + (int64_t)(next(&st) % (side / 3)), ry = 8 + (int64_t)(next(&st) % (side / 3));
            uint8_t cls = (uint8_t)(1 + next(&st) % 20);
            for (int64_t y = 0; y < (int64_t)side; y++)
                for (int64_t x = 0; x < (int64_t)side; x++)
                    if ((x - cx) * (x - cx) * ry * ry + (y - cy) * (y - cy) * rx * rx <= rx * rx * ry * ry)
                        m[y * side + x] = cls;
        }
        int64_t label = (int64_t)(next(&st) % 20);
        stk_value v[2] = {{m, side * side}, {&label, 8}};
        if (stk_dataset_writer_append(dw, v, &err)) {
            fprintf(stderr, "make_masks: %s\n", err.msg);
            return 1;
        }
    }
    if (stk_dataset_writer_finish(dw, &err)) {
        fprintf(stderr, "make_masks: %s\n", err.msg);
        return 1;
    }
    free(m);
    return 0;
}
