/* tests/tools/test_grammar_cli.c - one command-line grammar across the tools
 * (tools/cli.h): every integer option refuses what does not fit, naming the
 * option, with the usage exit status; a mistyped option is one line naming
 * the program, not its path; -V, -q, --json and --help the same everywhere;
 * a dataset that is not there is the same exit status in every tool. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "cli_util.h"

static const char *const TOOLS[] = {"shardgen",  "shardcheck", "shardinfo",
                                    "shardview", "shardread",  "rawgen"};

typedef struct {
    const char *tool, *opt, *pre, *post;
    uint64_t max;
} int_option;

/* Every integer option of every tool (pack's are in tests/packer), with the
 * largest value it takes. */
static const int_option INT_OPTIONS[] = {
    {"shardgen", "--records", "", "", UINT64_MAX},
    {"shardgen", "--size", "", "", 16384},
    {"shardgen", "--classes", "", "", 100000},
    {"shardgen", "--records-per-shard", "", "", UINT64_MAX},
    {"shardgen", "--shard-size", "", "", UINT64_MAX},
    {"shardgen", "--seed", "", "", UINT64_MAX},
    {"shardgen", "--compress", "zstd:", "", 19},
    {"shardgen", "--block-size", "", "", UINT64_MAX},
    {"shardcheck", "--threads", "", "", 1024},
    {"shardview", "--records", "", "", 100000},
    {"shardview", "--random", "", "", 100000},
    {"shardview", "--seed", "", "", UINT64_MAX},
    {"shardview", "--first", "", "", UINT64_MAX},
    {"shardview", "--record", "", "", UINT64_MAX},
    {"shardview", "--columns", "", "", 1000},
    {"shardview", "--quality", "", "", 100},
    {"shardread", "--batch-size", "", "", UINT32_MAX},
    {"shardread", "--seed", "", "", UINT64_MAX},
    {"shardread", "--epochs", "", "", UINT64_MAX},
    {"shardread", "--rank", "", "", 1 << 24},
    {"shardread", "--world-size", "", "", 1 << 24},
    {"shardread", "--threads", "", "", 256},
    {"shardread", "--prefetch", "", "", 4096},
    {"shardread", "--memory-budget", "", "", UINT64_MAX},
    {"shardread", "--quasi-block", "", "", UINT64_MAX},
    {"shardread", "--quasi-window", "", "", UINT32_MAX},
    {"shardread", "--io-depth", "", "", 1024},
    {"shardread", "--warmup", "", "", UINT64_MAX},
    {"shardread", "--stop-after", "", "", UINT64_MAX},
    {"shardread", "--epoch-size", "", "", UINT64_MAX},
    {"shardread", "--device", "cuda:", "", 1023},
    {"shardread", "--transform", "imagenet-train:", "", 8192},
    {"shardread", "--crop", "center:", "", 8192},
    {"shardread", "--sweep-threads", "", "", 1 << 20},
    {"shardread", "--sweep-prefetch", "", "", 1 << 20},
    {"shardread", "--sweep-batch", "", "", 1 << 20},
    {"shardread", "--sweep-io-depth", "", "", 1024},
    {"rawgen", "--images", "", "", 100000000},
    {"rawgen", "--classes", "", "", 100000},
    {"rawgen", "--seed", "", "", UINT64_MAX},
    {"rawgen", "--min-side", "", "", 16384},
    {"rawgen", "--max-side", "", "", 16384},
};

START_TEST(integer_options)
{
    tu_cli_setup();
    for (size_t i = 0; i < sizeof INT_OPTIONS / sizeof *INT_OPTIONS; i++) {
        const int_option *o = &INT_OPTIONS[i];
        char bin[1200];
        snprintf(bin, sizeof bin, "%s/%s", tu_tools, o->tool);
        tu_check_int_option(bin, o->tool, o->opt, o->pre, o->post, o->max, "x");
    }
}
END_TEST

START_TEST(common_options)
{
    tu_cli_setup();
    for (size_t i = 0; i < sizeof TOOLS / sizeof *TOOLS; i++) {
        char bin[1200];
        snprintf(bin, sizeof bin, "%s/%s", tu_tools, TOOLS[i]);
        tu_check_common_options(bin, TOOLS[i]);
    }
    tu_check_common_options(tu_pack_bin(), "pack"); /* pack reads its command line the same way */
}
END_TEST

/* A dataset that is not there: unreadable input, 1 in every tool that reads one. */
START_TEST(missing_dataset)
{
    tu_cli_setup();
    ck_assert_int_eq(tu_sh("'%s/shardinfo' nowhere", tu_tools), 1);
    ck_assert_int_eq(tu_sh("'%s/shardview' --out x.png nowhere", tu_tools), 1);
    ck_assert_int_eq(tu_sh("'%s/shardread' -q nowhere", tu_tools), 1);
    ck_assert_int_eq(tu_sh("'%s/shardread' -q --sweep nowhere", tu_tools), 1);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' -q nowhere", tu_tools), 1);
    ck_assert_ptr_nonnull(strstr(tu_slurp("err.txt"), "nowhere"));
}
END_TEST

/* One exit status per outcome in every tool (CONTRIBUTING.md, "The tools'
 * grammar"): 0 success, 1 problems in the data or an input that cannot be
 * read (or an output that cannot be written), 2 usage; pack 3 when it
 * skipped inputs. */
START_TEST(exit_codes)
{
    tu_cli_setup();
    ck_assert_int_eq(tu_sh("'%s/shardgen' -q -n 30 --size 8 --records-per-shard 10 ok && cp -r ok bad && "
                           "truncate -s -100 bad/shard-00001.stk && "
                           "'%s/rawgen' -q -n 4 --classes 2 --min-side 16 --max-side 24 raw && "
                           "cp -r raw rawbad && echo 'not an image' > rawbad/class000/zz.jpg",
                           tu_tools, tu_tools),
                     0);
    static const struct {
        const char *tool, *ok, *bad_data, *unreadable, *usage;
    } T[] = {
        {"shardcheck", "ok", "bad", "nowhere", "--quick --full ok"},
        {"shardinfo", "ok", "bad", "nowhere", "--shards=1 ok"},
        {"shardview", "--out v.png ok", "--out v.png bad", "--out v.png nowhere", "--out v.gif ok"},
        {"shardread", "ok", "bad", "nowhere", "--order random ok"},
        {"shardgen", "-n 5 --force gen", NULL, NULL, "-n five gen"},
        {"rawgen", "-n 2 --force rg", NULL, NULL, "-n 0x2 rg"},
        {"pack", "-s 16 raw p1", "-s 16 rawbad p2", "-s 16 nowhere p3", "-s 0 raw p4"},
    };
    for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
        char bin[1200];
        if (!strcmp(T[i].tool, "pack")) snprintf(bin, sizeof bin, "%s", tu_pack_bin());
        else snprintf(bin, sizeof bin, "%s/%s", tu_tools, T[i].tool);
        int want_bad = !strcmp(T[i].tool, "pack") ? 3 : 1;
        ck_assert_msg(tu_sh("'%s' -q %s", bin, T[i].ok) == 0, "%s %s: %s", T[i].tool, T[i].ok,
                      tu_slurp("err.txt"));
        if (T[i].bad_data)
            ck_assert_msg(tu_sh("'%s' -q %s", bin, T[i].bad_data) == want_bad, "%s %s", T[i].tool,
                          T[i].bad_data);
        if (T[i].unreadable)
            ck_assert_msg(tu_sh("'%s' -q %s", bin, T[i].unreadable) == 1, "%s %s", T[i].tool,
                          T[i].unreadable);
        ck_assert_msg(tu_sh("'%s' -q %s", bin, T[i].usage) == 2, "%s %s", T[i].tool, T[i].usage);
        ck_assert_int_eq(tu_count_lines(tu_slurp("err.txt")), 1);
    }
    /* an output that cannot be written: 1, as an input that cannot be read */
    ck_assert_int_eq(tu_sh("touch afile && '%s/shardgen' -q -n 5 afile/x", tu_tools), 1);
    ck_assert_int_eq(tu_sh("'%s/rawgen' -q -n 2 afile/x", tu_tools), 1);
}
END_TEST

TU_MAIN("grammar_cli", {.name = "grammar",
                        .timeout = 300,
                        .tests = {integer_options, common_options, missing_dataset, exit_codes}})
