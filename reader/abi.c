/* reader/abi.c - what keeps callers of other releases working: the 0.1.0
 * entry points, the library's version (the sized copies of option structs
 * that every entry uses are in util.c, the layer below all others).
 *
 * In 0.1.0 stk_reader_options_init, stk_reader_open, stk_reader_open_dataset
 * and stk_transform_imagenet were exported functions; the header now makes
 * them inline wrappers that pass sizeof of the caller's structs to the
 * `_sized` calls. Binaries built against 0.1.0 still call the old symbols, so
 * they stay, defined here under internal C names (the public names belong to
 * the header's inline functions in every file that includes it) and bound to
 * the old symbol names with asm labels (GCC and Clang, ELF). They pass the
 * 0.1.0 sizes. */
#include "abi_v0.h"

const char *stk_version_string(void) { return STK_VERSION_STRING; }

/* ------------------------------------------------------ 0.1.0 entry points */

STK_API void stk__v0_reader_options_init(stk_reader_options *opts) __asm__("stk_reader_options_init");
STK_API stk_reader *stk__v0_reader_open(const char *path, const stk_reader_options *opts,
                                        stk_error *err) __asm__("stk_reader_open");
STK_API stk_reader *stk__v0_reader_open_dataset(const stk_dataset *ds, const stk_reader_options *opts,
                                                stk_error *err) __asm__("stk_reader_open_dataset");
STK_API void stk__v0_transform_imagenet(stk_transform *t, int train,
                                        uint32_t size) __asm__("stk_transform_imagenet");

void stk__v0_reader_options_init(stk_reader_options *opts)
{
    stk_reader_options_init_sized(opts, STK__READER_OPTIONS_MIN_SIZE);
}

stk_reader *stk__v0_reader_open(const char *path, const stk_reader_options *opts, stk_error *err)
{
    return stk_reader_open_sized(path, opts, STK__READER_OPTIONS_MIN_SIZE, STK__TRANSFORM_MIN_SIZE, err);
}

stk_reader *stk__v0_reader_open_dataset(const stk_dataset *ds, const stk_reader_options *opts, stk_error *err)
{
    return stk_reader_open_dataset_sized(ds, opts, STK__READER_OPTIONS_MIN_SIZE, STK__TRANSFORM_MIN_SIZE,
                                         err);
}

void stk__v0_transform_imagenet(stk_transform *t, int train, uint32_t size)
{
    stk_transform_imagenet_sized(t, STK__TRANSFORM_MIN_SIZE, train, size);
}
