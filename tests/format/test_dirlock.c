/* tests/format/test_dirlock.c - one writer per output directory.
 *
 * stk_dir_lock_take between two holders in this process and between this
 * process and forked children: the whole directory against itself and
 * against parts, parts against each other, the lock of a child killed with
 * SIGKILL taken over, the refusal naming the directory and the holder's pid
 * and host, and the dataset writer holding its directory. */
#define _GNU_SOURCE
#define STOKER_ADVANCED_API /* stk_dir_lock_* */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static char dir[TU_PATH];

static void fresh(const char *name) { tu_scratch(dir, sizeof dir, name); }

/* Take a lock that must be granted. */
static stk_dir_lock *take(unsigned part, unsigned parts, const char *what)
{
    stk_error e = {0};
    stk_dir_lock *l = stk_dir_lock_take(dir, part, parts, what, &e);
    ck_assert_msg(l != NULL, "take %u/%u (%s): %s", part, parts, what, e.msg);
    return l;
}

/* A lock that must be refused: STK_E_BUSY naming the directory and `holder`. */
static void refused(unsigned part, unsigned parts, const char *holder)
{
    stk_error e = {0};
    stk_dir_lock *l = stk_dir_lock_take(dir, part, parts, "the second writer", &e);
    ck_assert_msg(l == NULL, "%u/%u was granted; expected a refusal naming %s", part, parts, holder);
    tu_assert_error(&e, STK_E_BUSY, dir);
    ck_assert_msg(strstr(e.msg, holder), "refusal \"%s\" does not name \"%s\"", e.msg, holder);
    ck_assert_msg(!strchr(e.msg, '\n'), "refusal is not one line: %s", e.msg);
}

static void pid_str(char *buf, size_t cap, pid_t pid) { snprintf(buf, cap, "pid %ld ", (long)pid); }

static size_t entries(void)
{
    size_t n;
    char **names = tu_list(dir, &n);
    tu_free_names(names, n);
    return n;
}

/* ---------------------------------------------------- within one process */

START_TEST(whole_refuses_whole)
{
    fresh("whole");
    stk_dir_lock *a = take(0, 0, "first writer");
    ck_assert_ptr_null(stk_dir_lock_note(a));
    char me[64], host[256] = "";
    pid_str(me, sizeof me, getpid());
    ck_assert_int_eq(gethostname(host, sizeof host), 0);
    refused(0, 0, me);
    refused(0, 0, host);
    refused(0, 0, "first writer");
    refused(1, 2, me); /* a part waits for the whole directory too */
    stk_dir_lock_release(a);
    ck_assert_uint_eq(entries(), 0);           /* the lock file goes with the lock */
    stk_dir_lock_release(take(0, 0, "again")); /* free again */
    stk_dir_lock_release(NULL);
}
END_TEST

START_TEST(parts_share_the_directory)
{
    fresh("parts");
    stk_dir_lock *p1 = take(1, 3, "pack --part 1/3"), *p2 = take(2, 3, "pack --part 2/3");
    refused(1, 3, "part 1/3");
    refused(1, 3, "pack --part 1/3");
    refused(2, 3, "pack --part 2/3");
    /* the whole directory waits for every part, and names them */
    refused(0, 0, "pack --part 1/3");
    refused(0, 0, "pack --part 2/3");
    stk_dir_lock *p3 = take(3, 3, "pack --part 3/3");
    stk_dir_lock_release(p1);
    refused(0, 0, "pack --part 3/3");
    stk_dir_lock *again = take(1, 3, "pack --part 1/3 again"); /* free once let go */
    stk_dir_lock_release(again);
    stk_dir_lock_release(p2);
    stk_dir_lock_release(p3);
    stk_dir_lock *w = take(0, 0, "merge"); /* every part done: the merge may start */
    stk_dir_lock_release(w);
    ck_assert_uint_eq(entries(), 0);
}
END_TEST

START_TEST(many_parts_named_in_one_line)
{
    fresh("many");
    stk_dir_lock *p[12];
    for (unsigned k = 0; k < 12; k++) {
        char what[32];
        snprintf(what, sizeof what, "part number %u", k + 1);
        p[k] = take(k + 1, 12, what);
    }
    refused(0, 0, "part number 1;");
    refused(0, 0, "and 9 more");
    for (unsigned k = 0; k < 12; k++) stk_dir_lock_release(p[k]);
}
END_TEST

START_TEST(bad_arguments)
{
    fresh("args");
    stk_error e;
    ck_assert_ptr_null(stk_dir_lock_take(NULL, 0, 0, "x", &e));
    tu_assert_error(&e, STK_E_ARG, "no directory");
    ck_assert_ptr_null(stk_dir_lock_take(dir, 0, 2, "x", &e));
    tu_assert_error(&e, STK_E_ARG, "part 0 of 2");
    ck_assert_ptr_null(stk_dir_lock_take(dir, 3, 2, "x", &e));
    tu_assert_error(&e, STK_E_ARG, "part 3 of 2");
    ck_assert_ptr_null(stk_dir_lock_take(dir, 1, 0, "x", &e));
    tu_assert_error(&e, STK_E_ARG, "part 1 of 0");
    char gone[TU_PATH];
    tu_join(gone, sizeof gone, dir, "no/such/dir");
    ck_assert_ptr_null(stk_dir_lock_take(gone, 0, 0, "x", &e));
    tu_assert_error(&e, STK_E_IO, gone);
    ck_assert_uint_eq(entries(), 0);
}
END_TEST

/* ------------------------------------------------------ across processes */

typedef struct {
    pid_t pid;
    int go; /* write a byte: the child lets go and exits */
} child_t;

/* A child that takes part/parts (it exits 3 when refused) and then waits. */
static child_t child_holding(unsigned part, unsigned parts, const char *what)
{
    int ready[2], go[2];
    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(go), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(ready[0]);
        close(go[1]);
        stk_error e;
        stk_dir_lock *l = stk_dir_lock_take(dir, part, parts, what, &e);
        char c = l ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1 || !l) _exit(3);
        ssize_t n = read(go[0], &c, 1);
        stk_dir_lock_release(l);
        _exit(n == 1 ? 0 : 4);
    }
    close(ready[1]);
    close(go[0]);
    char c = 0;
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    close(ready[0]);
    ck_assert_msg(c == 'y', "the child was refused %u/%u", part, parts);
    return (child_t){pid, go[1]};
}

static void child_exits(child_t c)
{
    int st;
    ck_assert_int_eq(write(c.go, "x", 1), 1);
    close(c.go);
    ck_assert_int_eq(waitpid(c.pid, &st, 0), c.pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
}

static void child_killed(child_t c)
{
    int st;
    ck_assert_int_eq(kill(c.pid, SIGKILL), 0);
    ck_assert_int_eq(waitpid(c.pid, &st, 0), c.pid);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    close(c.go);
}

START_TEST(another_process_is_refused)
{
    fresh("procs");
    child_t c = child_holding(0, 0, "the child");
    char who[64];
    pid_str(who, sizeof who, c.pid);
    refused(0, 0, who);
    refused(0, 0, "the child");
    refused(2, 2, who);
    child_exits(c);
    stk_dir_lock_release(take(0, 0, "after the child"));

    /* a part in a child: another part goes ahead, the same part and the whole do not */
    c = child_holding(2, 4, "child part");
    pid_str(who, sizeof who, c.pid);
    stk_dir_lock *mine = take(1, 4, "my part");
    refused(2, 4, who);
    refused(0, 0, who);
    refused(0, 0, "my part");
    child_exits(c);
    refused(0, 0, "my part");
    stk_dir_lock_release(mine);
    stk_dir_lock_release(take(0, 0, "after both"));
    ck_assert_uint_eq(entries(), 0);
}
END_TEST

/* A child holding part/parts as `what` is killed: its lock file stays, and
 * the next taker of the same lock has it, told whose it was. */
static void taken_over_after_kill(unsigned part, unsigned parts, const char *what)
{
    child_t c = child_holding(part, parts, what);
    char who[64], me[64];
    pid_str(who, sizeof who, c.pid);
    pid_str(me, sizeof me, getpid());
    refused(part, parts, who);
    child_killed(c);
    ck_assert_uint_ge(entries(), 1);                 /* its lock file stays behind ... */
    stk_dir_lock *l = take(part, parts, "survivor"); /* ... and is taken over */
    const char *note = stk_dir_lock_note(l);
    ck_assert_msg(note && strstr(note, "took over") && strstr(note, who) && strstr(note, what), "note: %s",
                  note ? note : "(none)");
    refused(part, parts, me); /* the line is now ours */
    stk_dir_lock_release(l);
}

START_TEST(killed_holder_is_stale)
{
    fresh("stale");
    taken_over_after_kill(0, 0, "doomed writer");
    taken_over_after_kill(3, 3, "doomed part");
    /* a killed part does not hold up the whole directory either */
    child_t c = child_holding(2, 3, "another doomed part");
    child_killed(c);
    stk_dir_lock *l = take(0, 0, "whole after a killed part");
    ck_assert_ptr_null(stk_dir_lock_note(l)); /* the part's file is not the directory's */
    ck_assert_uint_eq(entries(), 2);          /* .stoker-lock, the killed part's file */
    stk_dir_lock_release(l);                  /* removes both */
    ck_assert_uint_eq(entries(), 0);
}
END_TEST

/* ------------------------------------------------------- dataset writer */

START_TEST(dataset_writer_holds_its_directory)
{
    fresh("dw");
    stk_schema s;
    tu_std_schema(&s);
    stk_error e;
    stk_dataset_writer *a = stk_dataset_writer_create(dir, &s, NULL, &e);
    ck_assert_msg(a != NULL, "%s", e.msg);
    ck_assert_ptr_null(stk_dataset_writer_create(dir, &s, NULL, &e));
    tu_assert_error(&e, STK_E_BUSY, dir);
    char me[64];
    pid_str(me, sizeof me, getpid());
    ck_assert_msg(strstr(e.msg, me) && strstr(e.msg, "stk_dataset_writer"), "%s", e.msg);
    refused(1, 2, "stk_dataset_writer");
    tu_record r;
    for (uint64_t i = 0; i < 5; i++) {
        tu_std_record(&r, 7, i);
        ck_assert_msg(stk_dataset_writer_append(a, r.v, &e) == STK_OK, "%s", e.msg);
    }
    ck_assert_msg(stk_dataset_writer_finish(a, &e) == STK_OK, "%s", e.msg);
    size_t n;
    char **names = tu_list(dir, &n); /* the dataset and nothing else */
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(names[0], "manifest.json");
    ck_assert_str_eq(names[1], "shard-00000.stk");
    tu_free_names(names, n);

    /* a part of a pack in the directory: a dataset writer is refused, before
     * it touches anything (force set: it would replace the dataset) */
    stk_dir_lock *p = take(1, 2, "pack --part 1/2");
    stk_dataset_options o;
    stk_dataset_options_init(&o);
    o.force = 1;
    ck_assert_ptr_null(stk_dataset_writer_create(dir, &s, &o, &e));
    tu_assert_error(&e, STK_E_BUSY, "pack --part 1/2");
    char mf[TU_PATH];
    tu_join(mf, sizeof mf, dir, "manifest.json");
    ck_assert(tu_exists(mf));
    stk_dir_lock_release(p);
    a = stk_dataset_writer_create(dir, &s, &o, &e);
    ck_assert_msg(a != NULL, "%s", e.msg);
    stk_dataset_writer_abort(a); /* abort lets go too */
    stk_dir_lock_release(take(0, 0, "after abort"));
}
END_TEST

TU_MAIN("dirlock", {.name = "dirlock",
                    .tests = {whole_refuses_whole, parts_share_the_directory, many_parts_named_in_one_line,
                              bad_arguments, another_process_is_refused, killed_holder_is_stale,
                              dataset_writer_holds_its_directory}})
