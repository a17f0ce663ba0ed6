/* fuzz_crop - libFuzzer target: the reader's crop at load over hostile
 * array values (reader/load_crop.c).
 *
 * Input: 8 bytes of parameters, then the value. The parameters give the
 * stored shape the shape column would claim (height, width: 1 .. 512), the
 * crop (random-resized, centre or none), the output size (1 .. 64), whether
 * the field is square and the record (the box depends on it). The value is
 * run as a JPEG stream (the codec jpeg path: libjpeg's cropped decode for
 * random crops, TurboJPEG's whole decode otherwise) and, where it holds the
 * shape's pixels, as raw pixels too. Must never crash, and every failure
 * must say why. */
#include "reader_impl.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static stk__cropper *c; /* kept across inputs, as a worker keeps it across records */
    if (size < 8 || (!c && !(c = stk__cropper_new()))) return 0;
    uint64_t dims[3] = {1 + (uint64_t)(data[0] | data[1] << 8) % 512, 1 + (uint64_t)(data[2] | data[3] << 8) % 512, 3};
    uint8_t mode = data[4];
    uint32_t out = 1 + data[5] % 64;
    uint64_t record = data[6] | (uint64_t)data[7] << 8;
    data += 8;
    size -= 8;
    stk_transform t;
    stk_transform_imagenet(&t, mode % 3 == 0, out);
    t.crop = mode % 3 == 0 ? STK_CROP_RANDOM_RESIZED : mode % 3 == 1 ? STK_CROP_CENTER : STK_CROP_NONE;
    t.out_width = 1 + (mode >> 2) % 64;
    t.dtype = STK_DT_U8;
    t.layout = STK_IMAGE_NHWC;
    int square = (mode >> 7) & 1;
    uint8_t *dst = malloc((size_t)t.out_height * t.out_width * 3);
    if (!dst) return 0;
    stk_error e;
    e.code = STK_OK;
    if (stk__cropper_run(c, &t, 7, 1, record, data, size, dims, 1, square, dst, &e) != STK_OK && e.code == STK_OK)
        __builtin_trap(); /* a failure must say why */
    if (size >= dims[0] * dims[1] * 3 &&
        stk__cropper_run(c, &t, 7, 1, record, data, size, dims, 0, square, dst, &e) != STK_OK)
        __builtin_trap(); /* raw pixels of the right size always crop */
    free(dst);
    return 0;
}
