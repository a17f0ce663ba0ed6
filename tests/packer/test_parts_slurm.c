/* tests/packer/test_parts_slurm.c - pack's part from a Slurm array task's
 * variables (pk_part_slurm, packer/parts.c).
 *
 * Arrays that start at 0, at 1 or anywhere (5-8) give parts 1..N of N in
 * task order, with steps; no SLURM_ARRAY_TASK_ID is no array; a missing,
 * malformed or contradictory variable is refused with a message naming it. */
#include "parts.h"
#include "testutil.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

#define NO NULL

/* The part of task `id` (k 0 when refused: why then names `want`). */
static unsigned part_of(const char *id, const char *min, const char *count, const char *step, const char *max,
                        unsigned *n, const char *want)
{
    char why[400] = "";
    unsigned k = 0;
    *n = 0;
    int rc = pk_part_slurm(id, min, count, step, max, 9999, &k, n, why, sizeof why);
    if (want) {
        ck_assert_int_eq(rc, -1);
        ck_assert_msg(strstr(why, want), "message \"%s\" lacks \"%s\"", why, want);
        return 0;
    }
    ck_assert_msg(rc == 1, "refused: %s", why);
    return k;
}

START_TEST(zero_one_and_offset_arrays)
{
    const char *first[] = {"0", "1", "5"};
    for (unsigned a = 0; a < 3; a++) {
        unsigned base = (unsigned)(first[a][0] - '0');
        for (unsigned t = 0; t < 4; t++) {
            char id[8], max[8];
            unsigned n;
            snprintf(id, sizeof id, "%u", base + t);
            snprintf(max, sizeof max, "%u", base + 3);
            ck_assert_uint_eq(part_of(id, first[a], "4", NO, NO, &n, NO), t + 1);
            ck_assert_uint_eq(n, 4);
            ck_assert_uint_eq(part_of(id, first[a], "4", "1", max, &n, NO), t + 1);
            ck_assert_uint_eq(n, 4);
        }
    }
    unsigned n;
    ck_assert_uint_eq(part_of("7", "7", "1", "1", "7", &n, NO), 1); /* --array=7: the whole pack */
    ck_assert_uint_eq(n, 1);
}
END_TEST

START_TEST(steps)
{
    unsigned n; /* --array=0-12:4 */
    ck_assert_uint_eq(part_of("0", "0", "4", "4", "12", &n, NO), 1);
    ck_assert_uint_eq(part_of("8", "0", "4", "4", "12", &n, NO), 3);
    ck_assert_uint_eq(part_of("12", "0", "4", "4", "12", &n, NO), 4);
    ck_assert_uint_eq(n, 4);
    part_of("6", "0", "4", "4", "12", &n, "SLURM_ARRAY_TASK_ID=6");
}
END_TEST

START_TEST(not_an_array)
{
    char why[64] = "";
    unsigned k = 9, n = 9;
    ck_assert_int_eq(pk_part_slurm(NO, NO, NO, NO, NO, 9999, &k, &n, why, sizeof why), 0);
    ck_assert_int_eq(pk_part_slurm(NO, "0", "4", NO, NO, 9999, &k, &n, why, sizeof why), 0);
    ck_assert_uint_eq(k, 9); /* untouched */
    ck_assert_uint_eq(n, 9);
}
END_TEST

START_TEST(missing_and_contradictory)
{
    unsigned n;
    part_of("2", NO, "4", NO, NO, &n, "SLURM_ARRAY_TASK_MIN is not");
    part_of("2", "0", NO, NO, NO, &n, "SLURM_ARRAY_TASK_COUNT is not");
    part_of("x", "0", "4", NO, NO, &n, "SLURM_ARRAY_TASK_ID=x is not a number");
    part_of("", "0", "4", NO, NO, &n, "SLURM_ARRAY_TASK_ID= is not a number");
    part_of("-1", "0", "4", NO, NO, &n, "SLURM_ARRAY_TASK_ID=-1");
    part_of("2", "1a", "4", NO, NO, &n, "SLURM_ARRAY_TASK_MIN=1a");
    part_of("4", "0", "4", NO, NO, &n, "SLURM_ARRAY_TASK_ID=4 is not one of SLURM_ARRAY_TASK_COUNT=4");
    part_of("0", "1", "4", NO, NO, &n, "SLURM_ARRAY_TASK_MIN=1");
    part_of("9", "5", "4", NO, NO, &n, "SLURM_ARRAY_TASK_ID=9");
    part_of("2", "0", "0", NO, NO, &n, "SLURM_ARRAY_TASK_COUNT=0");
    part_of("2", "0", "10000", NO, NO, &n, "SLURM_ARRAY_TASK_COUNT=10000");
    part_of("2", "0", "4", "0", NO, &n, "SLURM_ARRAY_TASK_STEP=0");
    /* --array=1,2,4: three tasks from 1 to 4 are not an even split */
    part_of("2", "1", "3", "1", "4", &n, "SLURM_ARRAY_TASK_MAX=4");
    part_of("2", "1", "3", NO, "0", &n, "SLURM_ARRAY_TASK_MAX=0");
}
END_TEST

TU_MAIN("parts_slurm",
        {.name = "slurm",
         .tests = {zero_one_and_offset_arrays, steps, not_an_array, missing_and_contradictory}})
