/* format/files.c - small POSIX helpers: complete writes, durable commits,
 * path checks. Every failure names the file. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int stk__write_all(int fd, const void *buf, size_t len, const char *path, stk_error *err)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return stk__error_set_errno(err, STK_E_IO, errno, "%s: write failed", path);
        }
        p += n;
        len -= (size_t)n;
    }
    return STK_OK;
}

int stk__pwrite_all(int fd, const void *buf, size_t len, uint64_t off, const char *path, stk_error *err)
{
    const char *p = buf;
    while (len) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR) continue;
            return stk__error_set_errno(err, STK_E_IO, errno, "%s: write at offset %llu failed", path,
                                        (unsigned long long)off);
        }
        p += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return STK_OK;
}

int stk__fsync_parent(const char *path, stk_error *err)
{
    char *copy = strdup(path);
    if (!copy) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    const char *dir = dirname(copy);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = STK_OK;
    if (fd < 0) rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: cannot open directory", dir);
    else if (fsync(fd) != 0 && errno != EINVAL)
        rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: fsync of directory failed", dir);
    if (fd >= 0) close(fd);
    free(copy);
    return rc;
}

int stk__read_file(const char *path, size_t max, char **out, size_t *len, stk_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not hang us */
    if (fd < 0) return stk__error_set_errno(err, STK_E_IO, errno, "%s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return stk__error_set_errno(err, STK_E_IO, e, "%s: cannot stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return stk_error_set(err, STK_E_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return stk_error_set(err, STK_E_FORMAT, "%s: file of %lld bytes is larger than the %zu allowed", path,
                             (long long)st.st_size, max);
    }
    size_t n = (size_t)st.st_size, got = 0;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return stk_error_set(err, STK_E_NOMEM, "%s: out of memory", path);
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            free(buf);
            close(fd);
            return r < 0 ? stk__error_set_errno(err, STK_E_IO, e, "%s: read failed", path)
                         : stk_error_set(err, STK_E_TRUNCATED, "%s: file shrank while reading", path);
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    *out = buf;
    *len = n;
    return STK_OK;
}

int stk_file_commit(const char *path, const void *buf, size_t len, stk_error *err)
{
    if (!path || (!buf && len)) return stk_error_set(err, STK_E_ARG, "stk_file_commit: NULL argument");
    size_t n = strlen(path);
    char *tmp = malloc(n + 5);
    if (!tmp) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);
    int rc;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: cannot create", path); /* the name asked for */
        free(tmp);
        return rc;
    }
    rc = stk__write_all(fd, buf, len, tmp, err);
    if (rc == STK_OK && fsync(fd) != 0)
        rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: fsync failed", tmp);
    if (close(fd) != 0 && rc == STK_OK)
        rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: close failed", tmp);
    if (rc == STK_OK && rename(tmp, path) != 0)
        rc = stk__error_set_errno(err, STK_E_IO, errno, "%s: rename to %s failed", tmp, path);
    if (rc != STK_OK) unlink(tmp);
    else rc = stk__fsync_parent(path, err);
    free(tmp);
    return rc;
}

char *stk__path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

static bool safe_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

bool stk__path_is_safe(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n > 4096 || p[0] == '/') return false;
    const char *s = p;
    while (*s) {
        const char *e = s;
        while (*e && *e != '/') {
            if (!safe_char(*e)) return false;
            e++;
        }
        size_t len = (size_t)(e - s);
        if (len == 0) return false;                               /* "a//b", "a/" */
        if (len == 1 && s[0] == '.') return false;                /* "."          */
        if (len == 2 && s[0] == '.' && s[1] == '.') return false; /* ".."     */
        s = *e ? e + 1 : e;
        if (*e && !*s) return false; /* trailing '/' */
    }
    return true;
}

bool stk__name_is_valid(const char *name)
{
    size_t n = strnlen(name, STK_NAME_MAX);
    if (n == 0 || n >= STK_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (!safe_char(name[i])) return false;
    return true;
}
