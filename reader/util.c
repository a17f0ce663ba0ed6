/* reader/util.c - the util layer's helpers (util.h): the sized struct copies
 * every ABI-versioned entry point uses. */
#include "util.h"

#include <sys/resource.h>

#include <string.h>

int stk__read_sized(void *dst, size_t dst_size, const void *src, size_t src_size, size_t min_size,
                    const char *what, stk_error *err)
{
    if (src_size < min_size)
        return stk_error_set(err, STK_E_ARG,
                             "%s: size %zu is smaller than any release's (%zu): not a %s, or not "
                             "compiled from stoker's header",
                             what, src_size, min_size, what);
    if (src_size > dst_size) {
        const unsigned char *extra = (const unsigned char *)src + dst_size;
        for (size_t i = 0; i < src_size - dst_size; i++)
            if (extra[i])
                return stk_error_set(
                    err, STK_E_ARG,
                    "%s: the caller was built against a newer stoker (%zu bytes, "
                    "libstoker %s knows %zu) and sets fields this library lacks: use a libstoker "
                    "at least as new as the header",
                    what, src_size, STK_VERSION_STRING, dst_size);
    }
    memcpy(dst, src, src_size < dst_size ? src_size : dst_size);
    return STK_OK;
}

void stk__write_sized(void *dst, size_t dst_size, const void *src, size_t src_size)
{
    memcpy(dst, src, dst_size < src_size ? dst_size : src_size);
    if (dst_size > src_size) memset((unsigned char *)dst + src_size, 0, dst_size - src_size);
}

uint64_t stk__major_faults(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return 0;
    return (uint64_t)ru.ru_majflt;
}
