/* format/dirlock.c - one writer per output directory.
 *
 * DIR/.stoker-lock stands for the directory. A writer of the whole of it
 * (stk_dataset_writer, pack, pack --merge) holds a write lock on its byte 0;
 * part K of N of a job array holds a read lock there, shared with the other
 * parts, and a write lock on DIR/.stoker-lock-part-K-of-N. The locks are
 * Linux open file description locks (F_OFD_SETLK): like flock they belong to
 * the open file, so they conflict between two writers of one process and end
 * with the process however it ends (a file left by a kill -9 is stale by
 * construction and simply taken over); unlike flock, F_OFD_GETLK tells who
 * holds one without taking it, so describing a refusal never gets in the way
 * of a writer starting at that moment. NFS forwards them to the server.
 *
 * The holder of a write lock writes one line into the file it holds ("pid P
 * (prog) on host H since T: what"), which a refused writer quotes. A clean
 * release removes the file it holds alone (under the lock: a taker checks
 * that the path still names the file it locked, and retries otherwise), so a
 * line found by a new holder was left by a writer that was killed. */
#define _GNU_SOURCE
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOCK_NAME ".stoker-lock"
#define PART_PREFIX ".stoker-lock-part-"
#define HOLDER_MAX 200 /* bytes of a holder line quoted in a message */
#define TRIES 8        /* a lock file replaced under us, or a holder gone while we look */
#define PARTS_NAMED 3  /* live parts a refusal names before "and N more" */

struct stk_dir_lock {
    int dir_fd;  /* DIR/.stoker-lock: write lock (whole) or read lock (part), -1 when unsupported */
    int part_fd; /* DIR/.stoker-lock-part-K-of-N: write lock, or -1 */
    char *dir, *dir_path, *part_path;
    bool locked;                  /* false: the file system has no locks (note says so) */
    char note[STK_ERROR_MSG_MAX]; /* "" or one line for the caller to show */
};

enum { TAKEN, BUSY, NOLOCKS, FAILED };

static int ofd_set(int fd, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    return fcntl(fd, F_OFD_SETLK, &fl);
}

/* The type of a lock that stops `type` on fd's file (F_UNLCK: none now). */
static short ofd_holder(int fd, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    return fcntl(fd, F_OFD_GETLK, &fl) == 0 ? fl.l_type : F_UNLCK;
}

static bool no_locks_here(int e) { return e == ENOLCK || e == EINVAL || e == ENOSYS || e == EOPNOTSUPP; }

/* Open path (created) and lock byte 0 with `type` without waiting. TAKEN:
 * *fd holds the lock on the file path names now; BUSY: *fd is open on it
 * unlocked, for ofd_holder; NOLOCKS: the file system has no such locks
 * (*fd open, unlocked; *why the errno); FAILED: err is set, *fd is -1. */
static int open_locked(const char *path, short type, int *fd, int *why, stk_error *err)
{
    for (int t = 0; t < TRIES; t++) {
        *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (*fd < 0) return stk__error_set_errno(err, STK_E_IO, errno, "%s: cannot open", path), FAILED;
        if (ofd_set(*fd, type) != 0) {
            int e = errno;
            if (e == EAGAIN || e == EACCES) return BUSY;
            if (no_locks_here(e)) return *why = e, NOLOCKS;
            close(*fd);
            *fd = -1;
            return stk__error_set_errno(err, STK_E_IO, e, "%s: cannot lock", path), FAILED;
        }
        struct stat a, b;
        if (fstat(*fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
            return TAKEN;
        close(*fd); /* removed by a holder letting go after we opened it: open the new one */
    }
    *fd = -1;
    return stk_error_set(err, STK_E_IO, "%s: the lock file keeps being replaced", path), FAILED;
}

/* The holder line in fd's file, one line of at most HOLDER_MAX bytes ("" if none). */
static void read_holder(int fd, char *buf, size_t cap)
{
    ssize_t n = fd >= 0 ? pread(fd, buf, cap - 1, 0) : -1;
    buf[n > 0 ? n : 0] = 0;
    buf[strcspn(buf, "\r\n")] = 0;
}

static int write_holder(int fd, const char *path, const char *what, stk_error *err)
{
    char host[256] = "?", when[32] = "?", line[512];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = 0;
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    int n = snprintf(line, sizeof line, "pid %ld (%.32s) on host %.64s since %s: %.100s\n", (long)getpid(),
                     program_invocation_short_name, host, when, what);
    if (n < 0 || (size_t)n >= sizeof line) n = (int)strlen(line);
    if (ftruncate(fd, 0) != 0) return stk__error_set_errno(err, STK_E_IO, errno, "%s: cannot write", path);
    return stk__pwrite_all(fd, line, (size_t)n, 0, path, err);
}

/* After taking a write lock: what a killed holder left, as a note. */
static void note_stale(stk_dir_lock *l, int fd, const char *dir)
{
    char old[HOLDER_MAX + 1];
    read_holder(fd, old, sizeof old);
    if (*old)
        snprintf(l->note, sizeof l->note, "%s: took over the lock of %s, which no longer holds it", dir, old);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The live part lock files of dir, sorted by name (malloc'd, *n of them). */
static char **live_parts(const char *dir, size_t *n)
{
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **names = NULL;
    size_t cap = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (strncmp(de->d_name, PART_PREFIX, strlen(PART_PREFIX))) continue;
        char *p = stk__path_join(dir, de->d_name);
        int fd = p ? open(p, O_RDONLY | O_CLOEXEC) : -1;
        free(p);
        if (fd < 0) continue;
        bool live = ofd_holder(fd, F_WRLCK) != F_UNLCK;
        close(fd);
        if (!live) continue;
        if (*n == cap) {
            char **g = realloc(names, (cap = cap ? 2 * cap : 8) * sizeof *g);
            if (!g) break;
            names = g;
        }
        if (!(names[*n] = strdup(de->d_name))) break;
        ++*n;
    }
    closedir(d);
    if (*n) qsort(names, *n, sizeof *names, cmp_str);
    return names;
}

/* The holder line of a live part lock file (quoted, or a placeholder). */
static void part_holder(const char *dir, const char *name, char *buf, size_t cap)
{
    char *p = stk__path_join(dir, name);
    int fd = p ? open(p, O_RDONLY | O_CLOEXEC) : -1;
    free(p);
    read_holder(fd, buf, cap);
    if (fd >= 0) close(fd);
    if (!*buf) snprintf(buf, cap, "a writer that has not yet named itself (%s)", name);
}

/* A whole-directory writer holds .stoker-lock (fd open on it, unlocked):
 * say so, quoting its line; false when it does not (any more). */
static bool describe_whole(int fd, const char *dir, stk_error *err)
{
    if (ofd_holder(fd, F_RDLCK) != F_WRLCK) return false;
    char line[HOLDER_MAX + 1];
    read_holder(fd, line, sizeof line);
    stk_error_set(err, STK_E_BUSY, "%s: another writer holds this directory: %s", dir,
                  *line ? line : "one that has not yet named itself");
    return true;
}

/* Refused a write lock on .stoker-lock (fd open on it, unlocked): say who
 * holds the directory, a whole writer or parts. false when nobody does any
 * more (try again). */
static bool describe_dir(int fd, const char *dir, stk_error *err)
{
    char line[HOLDER_MAX + 1], msg[STK_ERROR_MSG_MAX];
    if (describe_whole(fd, dir, err)) return true;
    short held = ofd_holder(fd, F_WRLCK);
    if (held != F_RDLCK) return false;
    size_t n;
    char **names = live_parts(dir, &n);
    int len = snprintf(msg, sizeof msg, "parts of a job array are being written into this directory");
    for (size_t i = 0; i < n && i < PARTS_NAMED && len >= 0 && (size_t)len < sizeof msg; i++) {
        part_holder(dir, names[i], line, sizeof line);
        len += snprintf(msg + len, sizeof msg - (size_t)len, "%s%s", i ? "; " : ": ", line);
    }
    if (n > PARTS_NAMED && len >= 0 && (size_t)len < sizeof msg)
        snprintf(msg + len, sizeof msg - (size_t)len, "; and %zu more", n - PARTS_NAMED);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    stk_error_set(err, STK_E_BUSY, "%s: %s", dir, msg);
    return true;
}

static void lock_free(stk_dir_lock *l)
{
    if (l->part_fd >= 0) close(l->part_fd);
    if (l->dir_fd >= 0) close(l->dir_fd);
    free(l->dir);
    free(l->dir_path);
    free(l->part_path);
    free(l);
}

/* The directory's lock: TAKEN, BUSY (err says who holds it), NOLOCKS or FAILED. */
static int take_dir(stk_dir_lock *l, const char *dir, short type, int *why, stk_error *err)
{
    for (int t = 0; t < TRIES; t++) {
        int rc = open_locked(l->dir_path, type, &l->dir_fd, why, err);
        if (rc != BUSY) return rc;
        bool said = type == F_WRLCK ? describe_dir(l->dir_fd, dir, err) : describe_whole(l->dir_fd, dir, err);
        close(l->dir_fd);
        l->dir_fd = -1;
        if (said) return BUSY;
    }
    return stk_error_set(err, STK_E_BUSY, "%s: writers keep taking and letting go of this directory", dir),
           BUSY;
}

static int take_part(stk_dir_lock *l, const char *dir, unsigned part, unsigned parts, int *why,
                     stk_error *err)
{
    int rc = open_locked(l->part_path, F_WRLCK, &l->part_fd, why, err);
    if (rc == BUSY) {
        char line[HOLDER_MAX + 1];
        read_holder(l->part_fd, line, sizeof line);
        stk_error_set(err, STK_E_BUSY, "%s: part %u/%u is already being written: %s", dir, part, parts,
                      *line ? line : "by a writer that has not yet named itself");
        close(l->part_fd);
        l->part_fd = -1;
    }
    return rc;
}

stk_dir_lock *stk_dir_lock_take(const char *dir, unsigned part, unsigned parts, const char *what,
                                stk_error *err)
{
    if (!dir || !*dir) return stk_error_set(err, STK_E_ARG, "stk_dir_lock_take: no directory"), NULL;
    if (parts ? part < 1 || part > parts : part != 0)
        return stk_error_set(err, STK_E_ARG, "stk_dir_lock_take: part %u of %u (want 1..N of N, or 0 of 0)",
                             part, parts),
               NULL;
    stk_dir_lock *l = calloc(1, sizeof *l);
    if (!l) return stk_error_set(err, STK_E_NOMEM, "out of memory"), NULL;
    l->dir_fd = l->part_fd = -1;
    char name[64];
    snprintf(name, sizeof name, PART_PREFIX "%04u-of-%04u", part, parts);
    l->dir = strdup(dir);
    l->dir_path = stk__path_join(dir, LOCK_NAME);
    l->part_path = parts ? stk__path_join(dir, name) : NULL;
    if (!l->dir || !l->dir_path || (parts && !l->part_path)) {
        stk_error_set(err, STK_E_NOMEM, "out of memory");
        goto fail;
    }
    if (!what || !*what) what = "a writer";
    int why = 0, rc = take_dir(l, dir, parts ? F_RDLCK : F_WRLCK, &why, err);
    if (rc == TAKEN && parts) {
        note_stale(l, l->dir_fd, dir); /* a whole-directory writer's, killed: no longer true */
        if (ftruncate(l->dir_fd, 0) != 0) {
            stk__error_set_errno(err, STK_E_IO, errno, "%s: cannot write", l->dir_path);
            goto fail;
        }
        rc = take_part(l, dir, part, parts, &why, err);
    }
    if (rc == NOLOCKS) {
        snprintf(l->note, sizeof l->note,
                 "%s: this file system does not lock files (%s): nothing stops a second writer into this "
                 "directory",
                 dir, strerror(why));
        return l; /* fds open, unlocked: released as usual, no file removed */
    }
    if (rc != TAKEN) goto fail;
    l->locked = true;
    int fd = parts ? l->part_fd : l->dir_fd;
    note_stale(l, fd, dir);
    if (write_holder(fd, parts ? l->part_path : l->dir_path, what, err)) goto fail;
    return l;
fail:
    lock_free(l);
    return NULL;
}

const char *stk_dir_lock_note(const stk_dir_lock *l) { return l && *l->note ? l->note : NULL; }

/* Holding the whole directory, no part can hold its file: those there were
 * left by killed parts. */
static void remove_stale_parts(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *de; (de = readdir(d));) {
        if (strncmp(de->d_name, PART_PREFIX, strlen(PART_PREFIX))) continue;
        char *p = stk__path_join(dir, de->d_name);
        if (p) unlink(p);
        free(p);
    }
    closedir(d);
}

void stk_dir_lock_release(stk_dir_lock *l)
{
    if (!l) return;
    /* Remove the file held alone, still under its lock: a writer that opened
     * it meanwhile finds the path gone and opens a new one (open_locked). The
     * parts' shared .stoker-lock stays for the next whole writer to remove. */
    if (l->locked && l->part_path) unlink(l->part_path);
    else if (l->locked) {
        remove_stale_parts(l->dir);
        unlink(l->dir_path);
    }
    lock_free(l);
}
