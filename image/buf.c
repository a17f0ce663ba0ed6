/* image/buf.c - the image room's scratch buffers (stk__img_buf, image.h):
 * grown to the largest image seen, given back after a huge one. */
#include "image.h"

#include <stdlib.h>

int stk__img_buf_reserve(stk__img_buf *b, size_t n, const char *what, stk_error *err)
{
    if (n <= b->cap && !(b->cap > STK_IMG_KEEP_BYTES && n < b->cap / 4)) return STK_OK;
    free(b->p);
    b->cap = 0;
    if (!(b->p = malloc(n ? n : 1)))
        return stk_error_set(err, STK_IMG_E_NOMEM, "out of memory (%zu bytes for %s)", n, what);
    b->cap = n;
    return STK_OK;
}

void stk__img_buf_free(stk__img_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->cap = 0;
}
