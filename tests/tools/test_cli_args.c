/* tests/tools/test_cli_args.c - the tools' strict number parsers (tools/cli.h)
 * at their edges: every form they must refuse, the limits they must keep. */
#include <check.h>
#include <stdint.h>

#include "cli.h"
#include "testutil.h"

START_TEST(uint_edges)
{
    uint64_t v = 7;
    ck_assert(cli_parse_uint("0", 0, UINT64_MAX, &v) && v == 0);
    ck_assert(cli_parse_uint("007", 0, UINT64_MAX, &v) && v == 7);
    ck_assert(cli_parse_uint("18446744073709551615", 0, UINT64_MAX, &v) && v == UINT64_MAX);
    ck_assert(cli_parse_uint("4294967295", 0, UINT32_MAX, &v) && v == UINT32_MAX);
    v = 42;
    static const char *const bad[] = {"18446744073709551616",
                                      "99999999999999999999999",
                                      "-1",
                                      "-0",
                                      "+1",
                                      "",
                                      " 1",
                                      "1 ",
                                      "1e3",
                                      "12abc",
                                      "0x10",
                                      "1.0",
                                      "abc",
                                      "1,2",
                                      "\t1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!cli_parse_uint(bad[i], 0, UINT64_MAX, &v), "accepted '%s'", bad[i]);
    ck_assert(!cli_parse_uint(NULL, 0, UINT64_MAX, &v));
    ck_assert(!cli_parse_uint("4294967296", 0, UINT32_MAX, &v)); /* the range, not a wrap to 0 */
    ck_assert(!cli_parse_uint("0", 1, 10, &v));
    ck_assert(!cli_parse_uint("11", 1, 10, &v));
    ck_assert_uint_eq(v, 42); /* untouched on failure */
}
END_TEST

START_TEST(int_edges)
{
    int64_t v = 0;
    ck_assert(cli_parse_int("-9223372036854775808", INT64_MIN, INT64_MAX, &v) && v == INT64_MIN);
    ck_assert(cli_parse_int("9223372036854775807", INT64_MIN, INT64_MAX, &v) && v == INT64_MAX);
    ck_assert(cli_parse_int("-1", -5, 5, &v) && v == -1);
    ck_assert(cli_parse_int("-0", -5, 5, &v) && v == 0);
    static const char *const bad[] = {"9223372036854775808",
                                      "-9223372036854775809",
                                      "18446744073709551616",
                                      "--1",
                                      "+1",
                                      "-",
                                      "",
                                      "1e3",
                                      "12abc",
                                      " -1",
                                      "-1 "};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!cli_parse_int(bad[i], INT64_MIN, INT64_MAX, &v), "accepted '%s'", bad[i]);
    ck_assert(!cli_parse_int("-6", -5, 5, &v));
    ck_assert(!cli_parse_int("6", -5, 5, &v));
}
END_TEST

START_TEST(size_edges)
{
    uint64_t v = 0;
    ck_assert(cli_parse_size("4096", 0, UINT64_MAX, &v) && v == 4096);
    ck_assert(cli_parse_size("64K", 0, UINT64_MAX, &v) && v == 65536);
    ck_assert(cli_parse_size("64k", 0, UINT64_MAX, &v) && v == 65536);
    ck_assert(cli_parse_size("1.5G", 0, UINT64_MAX, &v) && v == 1610612736);
    ck_assert(cli_parse_size("2MiB", 0, UINT64_MAX, &v) && v == 2 << 20);
    ck_assert(cli_parse_size("2MB", 0, UINT64_MAX, &v) && v == 2 << 20);
    ck_assert(cli_parse_size("100B", 0, UINT64_MAX, &v) && v == 100);
    ck_assert(cli_parse_size("1T", 0, UINT64_MAX, &v) && v == (uint64_t)1 << 40);
    ck_assert(cli_parse_size("16777215T", 0, UINT64_MAX, &v) && v == (uint64_t)16777215 << 40);
    ck_assert(cli_parse_size("18446744073709551615", 0, UINT64_MAX, &v) && v == UINT64_MAX);
    static const char *const bad[] = {"18446744073709551616",
                                      "16777216T",
                                      "-1",
                                      "-1K",
                                      "+1",
                                      "",
                                      "1e3",
                                      "12abc",
                                      "1KK",
                                      "1iB",
                                      "1Ki",
                                      "K",
                                      ".5K",
                                      "1.K",
                                      "0x10",
                                      " 1",
                                      "inf",
                                      "nan",
                                      "1.0000000001K"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!cli_parse_size(bad[i], 0, UINT64_MAX, &v), "accepted '%s'", bad[i]);
    ck_assert(!cli_parse_size("0", 1, UINT64_MAX, &v));
    ck_assert(!cli_parse_size("513M", 1, 1u << 29, &v));
    ck_assert(cli_parse_size("512M", 1, 1u << 29, &v) && v == 1u << 29);
}
END_TEST

START_TEST(fraction_edges)
{
    uint64_t k = 0, n = 0;
    ck_assert(cli_parse_fraction("1/1", 9999, &k, &n) && k == 1 && n == 1);
    ck_assert(cli_parse_fraction("3/9999", 9999, &k, &n) && k == 3 && n == 9999);
    static const char *const bad[] = {"1/4294967297",
                                      "4294967297/4294967297",
                                      "1/18446744073709551617",
                                      "0/4",
                                      "5/4",
                                      "1/0",
                                      "1/10000",
                                      "-1/4",
                                      "1/-4",
                                      "1/",
                                      "/4",
                                      "1",
                                      "",
                                      "1/4x",
                                      "1e3/1e4",
                                      "1 /4",
                                      "1/ 4",
                                      "+1/4"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!cli_parse_fraction(bad[i], 9999, &k, &n), "accepted '%s'", bad[i]);
}
END_TEST

START_TEST(real_edges)
{
    double d = 0;
    ck_assert(cli_parse_real("0.5", 0, 10, &d) && d == 0.5);
    ck_assert(cli_parse_real("12", 0, 100, &d) && d == 12);
    ck_assert(cli_parse_real("3.", 0, 10, &d) && d == 3);
    ck_assert(cli_parse_real(".25", 0, 10, &d) && d == 0.25);
    static const char *const bad[] = {"1e3", "-1",  "+1",   "",      ".",     " 1", "1 ",
                                      "inf", "nan", "0x10", "12abc", "1.2.3", "1,5"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!cli_parse_real(bad[i], 0, 1e9, &d), "accepted '%s'", bad[i]);
    ck_assert(!cli_parse_real("1000001", 0, 1e6, &d));
    ck_assert(!cli_parse_real("0", 0.001, 3600, &d));
}
END_TEST

/* Sizes for people: at most three figures, the unit that fits ("2.4 MB",
 * never "0.002 GB"); plurals. */
START_TEST(human_sizes)
{
    static const struct {
        double v;
        const char *want;
    } T[] = {{0, "0 B"},          {512, "512 B"},       {999, "999 B"},    {1000, "1.0 KB"},
             {12345, "12 KB"},    {2.4e6, "2.4 MB"},    {302e6, "302 MB"}, {999.4e6, "999 MB"},
             {999.6e6, "1.0 GB"}, {1.234e12, "1.2 TB"}, {5e15, "5.0 PB"}};
    char b[16];
    for (size_t i = 0; i < sizeof T / sizeof *T; i++)
        ck_assert_str_eq(cli_bytes(b, sizeof b, T[i].v), T[i].want);
    ck_assert_str_eq(cli_plural(1), "");
    ck_assert_str_eq(cli_plural(0), "s");
    ck_assert_str_eq(cli_plural(2), "s");
}
END_TEST

TU_MAIN("cli_args", {.name = "parse",
                     .tests = {uint_edges, int_edges, size_edges, fraction_edges, real_edges, human_sizes}})
