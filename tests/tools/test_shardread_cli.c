/* tests/tools/test_shardread_cli.c - shardread from the outside: the
 * --dump-order format, resume across processes (also into another world
 * size), --json, exit codes, and mixtures (--mix). */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"

/* 150 records in shards of 40: batches of 16 cross shard boundaries. */
static void make_dataset(void)
{
    ck_assert_int_eq(
        tu_sh("'%s/shardgen' -q -n 150 --size 8 --classes 7 --records-per-shard 40 ds", tu_tools), 0);
}

static char *dup_out(const char *name)
{
    char *s = strdup(tu_slurp(name));
    ck_assert_ptr_nonnull(s);
    return s;
}

/* Two ranks' --dump-order lines side by side are the whole run's lines. */
static void expect_joined(const char *a, const char *b, const char *w)
{
    while (*w) {
        const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n'), *ew = strchr(w, '\n');
        ck_assert(ea && eb && ew);
        char joined[2048];
        snprintf(joined, sizeof joined, "%.*s %.*s", (int)(ea - a), a, (int)(eb - b), b);
        ck_assert_msg(strlen(joined) == (size_t)(ew - w) && strncmp(joined, w, (size_t)(ew - w)) == 0,
                      "global batch differs: %s vs %.*s", joined, (int)(ew - w), w);
        a = ea + 1, b = eb + 1, w = ew + 1;
    }
    ck_assert(*a == 0 && *b == 0);
}

START_TEST(dump_order_format)
{
    tu_cli_setup();
    make_dataset();
    ck_assert_int_eq(tu_sh("'%s/shardread' --dump-order -b 16 -e 2 ds", tu_tools), 0);
    const char *out = tu_slurp("out.txt");
    ck_assert_int_eq(tu_count_lines(out), 2 * 10); /* ceil(150 / 16) per epoch */
    for (const char *p = out; *p; p++)
        ck_assert_msg((*p >= '0' && *p <= '9') || *p == ' ' || *p == '\n', "junk in dump");
    /* sequential, padded: epoch 0's last batch is 144..149 then 0..9 */
    char want[512] = "";
    for (int i = 0; i < 16; i++) sprintf(want + strlen(want), i ? " %d" : "%d", i < 6 ? 144 + i : i - 6);
    const char *line10 = out;
    for (int i = 0; i < 9; i++) line10 = strchr(line10, '\n') + 1;
    ck_assert_msg(strncmp(line10, want, strlen(want)) == 0 && line10[strlen(want)] == '\n',
                  "last batch: %.80s", line10);
    ck_assert(strstr(tu_slurp("err.txt"), "samples/s") != NULL); /* the summary went to stderr */
}
END_TEST

/* Stop after 7 batches in one process, continue in another: the same lines
 * as one uninterrupted run; and continued by two ranks of half the batch,
 * whose lines side by side are the same global batches. */
START_TEST(resume_across_processes)
{
    tu_cli_setup();
    make_dataset();
    const char *common = "--order shuffle --seed 9 --dump-order -e 2 -q";
    ck_assert_int_eq(tu_sh("'%s/shardread' %s -b 16 ds", tu_tools, common), 0);
    char *whole = dup_out("out.txt");
    ck_assert_int_eq(tu_sh("'%s/shardread' %s -b 16 --stop-after 7 --state-out st.json ds", tu_tools, common),
                     0);
    char *first = dup_out("out.txt");
    ck_assert_int_eq(tu_count_lines(first), 7);
    ck_assert_int_eq(tu_sh("'%s/shardread' %s -b 16 --state-in st.json ds", tu_tools, common), 0);
    char *rest = dup_out("out.txt");
    size_t n1 = strlen(first);
    ck_assert(strncmp(whole, first, n1) == 0);
    ck_assert_str_eq(whole + n1, rest);

    /* elastic: world 2, batch 8 each, from the same state */
    char *rank[2];
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(tu_sh("'%s/shardread' %s -b 8 --rank %d --world-size 2 --state-in st.json ds",
                               tu_tools, common, r),
                         0);
        rank[r] = dup_out("out.txt");
    }
    expect_joined(rank[0], rank[1], whole + n1);
    /* a state from another seed is refused */
    ck_assert_int_eq(tu_sh("'%s/shardread' --order shuffle --seed 10 -b 16 --state-in st.json ds", tu_tools),
                     2);
    ck_assert(strstr(tu_slurp("err.txt"), "seed differs") != NULL);
    free(whole);
    free(first);
    free(rest);
    free(rank[0]);
    free(rank[1]);
}
END_TEST

START_TEST(json_and_quasi_quality)
{
    tu_cli_setup();
    make_dataset();
    ck_assert_int_eq(
        tu_sh("'%s/shardread' --json -b 10 --order quasi --quasi-block 1K --quasi-window 3 -e 2 ds",
              tu_tools),
        0);
    const char *out = tu_slurp("out.txt"), *last = out, *p;
    while ((p = strchr(last, '\n')) && p[1]) last = p + 1;
    json_error_t je;
    json_t *j = json_loads(last, 0, &je);
    ck_assert_msg(j != NULL, "last line is not JSON: %s (%s)", last, je.text);
    ck_assert(json_is_true(json_object_get(j, "ok")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "samples")), 2 * 150);
    ck_assert(json_number_value(json_object_get(j, "samples_per_s")) > 0);
    ck_assert(json_is_number(json_object_get(j, "gb_per_s")));
    double wf = json_number_value(json_object_get(j, "wait_fraction"));
    ck_assert(wf >= 0 && wf <= 1);
    ck_assert(json_is_string(json_object_get(j, "verdict")));
    json_decref(j);
    ck_assert(strstr(tu_slurp("err.txt"), "shuffle quality:") != NULL);
}
END_TEST

START_TEST(exit_codes)
{
    tu_cli_setup();
    make_dataset();
    tu_sh_says(2, "err.txt", "--order", "'%s/shardread' --order random ds", tu_tools);
    ck_assert_int_eq(tu_sh("'%s/shardread' nowhere", tu_tools), 1); /* unreadable input */
    tu_sh_says(2, "err.txt", "no field 'nope'", "'%s/shardread' --fields image,nope ds", tu_tools);
    tu_sh_says(0, "out.txt", "Exit status", "'%s/shardread' --help", tu_tools);
    /* flip a byte of record 45's image (shard 1, local record 5) */
    ck_assert_int_eq(tu_sh("cp -r ds bad && '%s/shardread' -q -b 1 --stop-after 1 bad", tu_tools), 0);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' -q bad", tu_tools), 0);
    /* the image region starts at the first 4096-aligned offset after the header */
    ck_assert_int_eq(tu_sh("printf '\\377' | dd of=bad/shard-00001.stk bs=1 seek=$((4096 + 5 * 8 * 8 * 3 + "
                           "7)) conv=notrunc status=none"),
                     0);
    tu_sh_says(1, "err.txt",
               "shard-00001.stk: record 5 (dataset record 45), field 'image': checksum mismatch",
               "'%s/shardread' -q --verify always -b 10 bad", tu_tools);
    ck_assert_int_eq(tu_sh("'%s/shardread' -q --verify off -b 10 bad", tu_tools), 0);
}
END_TEST

/* A mixture (--mix) stopped in one process and continued in others, one
 * rank of the whole batch or two of half: the same global batches as one
 * run; the JSON names the sources; a changed weight is refused unless
 * --reweight; a mistyped spec and a JSON file's errors are usage errors. */
START_TEST(mix_resume_and_errors)
{
    tu_cli_setup();
    make_dataset();
    ck_assert_int_eq(
        tu_sh("'%s/shardgen' -q -n 70 --size 8 --classes 3 --seed 4 --records-per-shard 30 ds2", tu_tools),
        0);
    const char *common =
        "--mix ds:0.6,ds2:0.4:order=quasi --quasi-block 2K --order shuffle --seed 3 --dump-order -e 2 -q";
    ck_assert_int_eq(tu_sh("'%s/shardread' %s -b 12 ", tu_tools, common), 0);
    char *whole = dup_out("out.txt");
    ck_assert_int_eq(tu_count_lines(whole), 2 * 19); /* ceil(220 / 12) per epoch */
    ck_assert_int_eq(tu_sh("'%s/shardread' %s -b 12 --stop-after 5 --state-out st.json", tu_tools, common),
                     0);
    size_t n1 = strlen(tu_slurp("out.txt"));
    ck_assert(strstr(tu_slurp("st.json"), "\"stoker_reader_state\":2") != NULL);
    char *rank[2];
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(
            tu_sh("'%s/shardread' %s -b 6 --rank %d --world-size 2 --state-in st.json", tu_tools, common, r),
            0);
        rank[r] = dup_out("out.txt");
    }
    expect_joined(rank[0], rank[1], whole + n1);
    ck_assert_int_eq(tu_sh("'%s/shardread' --mix ds:0.5,ds2:0.5:order=quasi --quasi-block 2K --order shuffle "
                           "--seed 3 -b 12 -q --state-in st.json",
                           tu_tools),
                     2);
    ck_assert(strstr(tu_slurp("err.txt"), "source 0 (ds) has weight 0.6 in the state, weight 0.5 here") !=
              NULL);
    ck_assert_int_eq(tu_sh("'%s/shardread' --mix ds:0.5,ds2:0.5:order=quasi --quasi-block 2K --order shuffle "
                           "--seed 3 -b 12 -q --state-in st.json --reweight",
                           tu_tools),
                     0);
    /* --json: the sources with their counts */
    ck_assert_int_eq(
        tu_sh("(echo '{\"sources\":[{\"path\":\"ds\",\"repeat\":0.5},{\"path\":\"ds2\",\"choose\":10}]}' > "
              "m.json)"),
        0);
    ck_assert_int_eq(tu_sh("'%s/shardread' -q --json -b 5 --mix m.json", tu_tools), 0);
    json_error_t je;
    json_t *j = json_loads(tu_slurp("out.txt"), 0, &je);
    ck_assert_msg(j != NULL, "%s", je.text);
    json_t *src = json_object_get(j, "sources");
    ck_assert_uint_eq(json_array_size(src), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(src, 0), "per_epoch")), 75);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(src, 1), "samples")), 10);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "samples")), 85);
    json_decref(j);
    /* errors: usage (2) with the reason */
    tu_sh_says(2, "err.txt", "'wieght=2'", "'%s/shardread' --mix ds:wieght=2,ds2", tu_tools);
    tu_sh_says(2, "err.txt",
               "one of a weight, repeat= or choose=", "'%s/shardread' --mix ds:repeat=2:0.5,ds2", tu_tools);
    ck_assert_int_eq(tu_sh("'%s/shardread' --mix ds,ds2 ds", tu_tools), 2);
    ck_assert_int_eq(tu_sh("(echo '{\"sources\":[{\"path\":\"ds\",\"wieght\":1}]}' > bad.json)"), 0);
    tu_sh_says(2, "err.txt", "unknown key \"wieght\"", "'%s/shardread' --mix bad.json", tu_tools);
    tu_sh_says(2, "err.txt", "weights are for all sources or none", "'%s/shardread' --mix ds:1,ds2:repeat=1",
               tu_tools);
    free(whole);
    free(rank[0]);
    free(rank[1]);
}
END_TEST

/* --trace writes a trace file of one "next" per batch read; the summary
 * prints the new verdict; --metrics ends stdout with Prometheus text. */
START_TEST(trace_verdict_metrics)
{
    tu_cli_setup();
    make_dataset();
    ck_assert_int_eq(tu_sh("'%s/shardread' -b 16 -j 2 --trace t.json --metrics ds", tu_tools), 0);
    const char *out = tu_slurp("out.txt");
    ck_assert_msg(strstr(out, "\nworkers: decode/crop ") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "\ntrainer: no training step recorded") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "\nbound by: ") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "# TYPE stoker_batches_total counter\nstoker_batches_total 10\n") != NULL, "%s",
                  out);
    json_error_t je;
    char path[1100];
    snprintf(path, sizeof path, "%s/t.json", tu_tmp);
    json_t *t = json_load_file(path, 0, &je);
    ck_assert_msg(t != NULL, "t.json: %s", je.text);
    size_t i, next = 0;
    json_t *e;
    json_array_foreach(json_object_get(t, "traceEvents"), i, e) next +=
        !strcmp(json_string_value(json_object_get(e, "name")), "next");
    ck_assert_uint_eq(next, 10); /* ceil(150 / 16) */
    json_decref(t);
    ck_assert_int_eq(tu_sh("'%s/shardread' -b 16 --step-ms 1 -q ds", tu_tools), 0);
}
END_TEST

/* The last line of out.txt as JSON. */
static json_t *last_json(void)
{
    const char *out = tu_slurp("out.txt"), *last = out, *p;
    while ((p = strchr(last, '\n')) && p[1]) last = p + 1;
    json_error_t je;
    json_t *j = json_loads(last, 0, &je);
    ck_assert_msg(j != NULL, "last line is not JSON: %s (%s)", last, je.text);
    return j;
}

/* --tuning, --pin, --threads-max, --cpu-budget: the tuner's knobs and log
 * in --json and the summary; pinned knobs stay; bad values are usage. */
START_TEST(tuning_options)
{
    tu_cli_setup();
    make_dataset();
    ck_assert_int_eq(tu_sh("'%s/shardread' --json -b 8 -e 3 -j 1 -p 1 --tuning on --threads-max 2 "
                           "--cpu-budget 2 ds",
                           tu_tools),
                     0);
    json_t *j = last_json(), *t = json_object_get(j, "tuning");
    ck_assert(json_is_true(json_object_get(t, "on")));
    ck_assert_int_eq(json_integer_value(json_object_get(t, "threads_max")), 2);
    ck_assert(json_number_value(json_object_get(t, "cpu_budget")) == 2.0);
    json_int_t threads = json_integer_value(json_object_get(t, "threads"));
    ck_assert(threads >= 1 && threads <= 2);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "threads")), threads);
    ck_assert(json_array_size(json_object_get(t, "log")) ==
              (size_t)(json_integer_value(json_object_get(t, "changes")) < 16
                           ? json_integer_value(json_object_get(t, "changes"))
                           : 16));
    json_decref(j);
    ck_assert(strstr(tu_slurp("err.txt"), "tuning: threads ") != NULL);
    ck_assert_int_eq(tu_sh("'%s/shardread' --json -b 8 -e 3 -j 1 -p 1 --tuning on --threads-max 2 "
                           "--pin threads,prefetch ds",
                           tu_tools),
                     0);
    j = last_json();
    t = json_object_get(j, "tuning");
    ck_assert_int_eq(json_integer_value(json_object_get(t, "threads")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(t, "prefetch")), 1);
    json_decref(j);
    ck_assert_int_eq(tu_sh("'%s/shardread' -b 8 --tuning off -j 2 ds", tu_tools), 0);
    ck_assert(strstr(tu_slurp("out.txt"), "tuning: off (threads 2, prefetch 4") != NULL);
    tu_sh_says(2, "err.txt", "--tuning", "'%s/shardread' --tuning maybe ds", tu_tools);
    tu_sh_says(2, "err.txt", "--pin", "'%s/shardread' --pin speed ds", tu_tools);
    tu_sh_says(2, "err.txt", "--cpu-budget", "'%s/shardread' --cpu-budget 0 ds", tu_tools);
    tu_sh_says(2, "err.txt", "threads_max 1", "'%s/shardread' --tuning on -j 2 --threads-max 1 ds", tu_tools);
}
END_TEST

TU_MAIN("shardread cli",
        {.name = "cli",
         .timeout = 120,
         .tests = {dump_order_format, resume_across_processes, json_and_quasi_quality, exit_codes,
                   mix_resume_and_errors, trace_verdict_metrics, tuning_options}})
