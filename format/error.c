/* format/error.c - error codes and messages. */
#include "internal.h"

#include <stdio.h>

const char *stk_status_name(int code)
{
    switch (code) {
    case STK_OK:
        return "ok";
    case STK_E_ARG:
        return "invalid argument";
    case STK_E_IO:
        return "I/O error";
    case STK_E_NOMEM:
        return "out of memory";
    case STK_E_FORMAT:
        return "corrupt";
    case STK_E_VERSION:
        return "unsupported version";
    case STK_E_TRUNCATED:
        return "truncated";
    case STK_E_CHECKSUM:
        return "checksum mismatch";
    case STK_E_MANIFEST:
        return "bad manifest";
    case STK_E_EXISTS:
        return "exists";
    case STK_E_RANGE:
        return "out of range";
    case STK_E_UNSUPPORTED:
        return "unsupported";
    case STK_E_BUSY:
        return "busy";
    default:
        return "unknown error";
    }
}

static void set(stk_error *err, int code, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
static void set(stk_error *err, int code, const char *fmt, va_list ap)
{
    if (!err) return;
    err->code = code;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
}

int stk_error_set(stk_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set(err, code, fmt, ap);
    va_end(ap);
    return code;
}

int stk__error_set_errno(stk_error *err, int code, int errno_value, const char *fmt, ...)
{
    if (!err) return code;
    va_list ap;
    va_start(ap, fmt);
    set(err, code, fmt, ap);
    va_end(ap);
    size_t n = strlen(err->msg);
    snprintf(err->msg + n, sizeof err->msg - n, ": %s", strerror(errno_value));
    return code;
}
