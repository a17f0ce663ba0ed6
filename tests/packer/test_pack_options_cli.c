/* tests/packer/test_pack_options_cli.c - pack's command line in the tools'
 * one grammar (tools/cli.h): every integer option refuses what does not fit
 * (--part 1/4294967297 once packed part 1 of 1, --fill 4294967296 wrapped),
 * naming the option, with the usage exit status; the common options and
 * messages as in every tool. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>

#include "cli_util.h"

typedef struct {
    const char *opt, *pre, *post;
    uint64_t max;
} int_option;

static const int_option INT_OPTIONS[] = {
    {"--size", "", "", 16384},
    {"--max-side", "", "", 16384},
    {"--min-side", "", "", 16384},
    {"--image-format", "jpeg:", "", 100},
    {"--image-format", "original:", "", 100},
    {"--fill", "", ",0,0", 255},
    {"--fill", "0,0,", "", 255},
    {"--threads", "", "", 1024},
    {"--shard-size", "", "", UINT64_MAX},
    {"--records-per-shard", "", "", UINT64_MAX},
    {"--max-pixels", "", "", UINT64_MAX},
    {"--part", "1/", "", 9999},
    {"--part", "", "/4", 4},
    {"--compress", "zstd:", "", 19},
    {"--compress", "label=zstd:", "", 19},
    {"--block-size", "", "", 1u << 29},
};

START_TEST(integer_options)
{
    tu_cli_setup();
    for (size_t i = 0; i < sizeof INT_OPTIONS / sizeof *INT_OPTIONS; i++) {
        const int_option *o = &INT_OPTIONS[i];
        tu_check_int_option(tu_pack_bin(), "pack", o->opt, o->pre, o->post, o->max, "in out");
    }
    /* the two that wrapped, with the message's exact words */
    ck_assert_int_eq(tu_sh("'%s' --part 1/4294967297 in out", tu_pack_bin()), 2);
    ck_assert_str_eq(
        tu_slurp("err.txt"),
        "pack: --part: '1/4294967297' is not K/N with N an integer from 1 to 9999 and K from 1 to N\n");
    ck_assert_int_eq(tu_sh("'%s' --fill 4294967296,0,0 in out", tu_pack_bin()), 2);
    ck_assert_str_eq(tu_slurp("err.txt"), "pack: --fill: '4294967296' is not an integer from 0 to 255\n");
}
END_TEST

START_TEST(common_options)
{
    tu_cli_setup();
    tu_check_common_options(tu_pack_bin(), "pack");
}
END_TEST

TU_MAIN("pack_options_cli", {.name = "options", .timeout = 300, .tests = {integer_options, common_options}})
