/* tests/faults/test_pack_replace.c - `pack --force` over a dataset on a disk
 * that fills (issue 39): the new dataset is built beside the old one and
 * replaces it only when complete, so a full disk leaves the old dataset
 * readable and says so; a replace that fits leaves only the new files. The
 * same for `pack --merge`. The disk is a small tmpfs the test mounts (root
 * only; skipped with the reason printed otherwise) and unmounts. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_util.h"

static char mnt[1100];

static void unmount_it(void)
{
    if (mnt[0] && umount2(mnt, MNT_DETACH) == 0) mnt[0] = 0;
}

/* tu_tmp/mnt as a tmpfs of `kib` KiB; false, with the reason printed, where
 * it cannot be had. */
static bool mount_small(const char *test, unsigned kib)
{
    const char *t = getenv("STOKER_TEST_TMP");
    char stale[1100];
    if (t) { /* a mount a failed run left would stop tu_cli_setup's rm -rf */
        snprintf(stale, sizeof stale, "%s/mnt", t);
        umount2(stale, MNT_DETACH);
    }
    tu_cli_setup();
    snprintf(mnt, sizeof mnt, "%s/mnt", tu_tmp);
    ck_assert_int_eq(mkdir(mnt, 0755), 0);
    if (geteuid() != 0) {
        printf("%s: skipped: not root (a small tmpfs to fill needs mount)\n", test);
        mnt[0] = 0;
        return false;
    }
    char opt[32];
    snprintf(opt, sizeof opt, "size=%uk", kib);
    if (mount("tmpfs", mnt, "tmpfs", 0, opt) != 0) {
        printf("%s: skipped: cannot mount a tmpfs on %s: %s\n", test, mnt, strerror(errno));
        mnt[0] = 0;
        return false;
    }
    atexit(unmount_it);
    return true;
}

#define PACK(flags, in, out) tu_sh("'%s' -q " flags " %s %s", tu_pack_bin(), in, out)

START_TEST(force_on_a_full_disk_keeps_the_old_dataset)
{
    if (!mount_small("force_on_a_full_disk_keeps_the_old_dataset", 640)) return;
    ck_assert_int_eq(tu_sh("'%s/rawgen' -q -n 40 --classes 2 --min-side 40 --max-side 80 raw", tu_tools), 0);
    ck_assert_int_eq(PACK("--size 32 --records-per-shard 8", "raw", "ref"), 0);
    ck_assert_int_eq(PACK("--size 32 --records-per-shard 8", "raw", "mnt/ds"), 0);
    ck_assert_int_eq(tu_sh("(ls -A mnt/ds > ls0.txt)"), 0);

    /* 40 images of 96x96 (1.1 MB) fit neither beside it nor in its place */
    int rc = PACK("--force --size 96 --records-per-shard 8", "raw", "mnt/ds");
    char *err = strdup(tu_slurp("err.txt"));
    ck_assert_msg(rc == 1, "exit %d, want 1: %s", rc, err);
    ck_assert_msg(strstr(err, "No space left on device"), "%s", err);
    ck_assert_msg(strstr(err, "the old dataset in mnt/ds is intact"), "the error must say so: %s", err);
    free(err);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --full mnt/ds", tu_tools), 0);
    /* nothing of the new one left */
    ck_assert_msg(tu_sh("ls -A mnt/ds > ls1.txt && diff ls0.txt ls1.txt >&2") == 0, "files changed: %s",
                  tu_slurp("err.txt"));
    ck_assert_int_eq(tu_sh("cmp ref/manifest.json mnt/ds/manifest.json"), 0);

    /* leftovers of a replace that was killed: no reader or checker takes them for the dataset */
    ck_assert_int_eq(tu_sh("cp mnt/ds/shard-00001.stk mnt/ds/shard.g1-00000.stk && echo junk > "
                           "mnt/ds/shard.g1-00009.stk.tmp"),
                     0);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --full mnt/ds", tu_tools), 0);
    ck_assert_int_eq(tu_sh("cmp ref/manifest.json mnt/ds/manifest.json"), 0);
    /* a plain run is still refused: the directory holds a dataset */
    ck_assert_int_eq(PACK("--size 32 --records-per-shard 8", "raw", "mnt/ds"), 1);

    /* a replace that fits beside it: only the new dataset's files are left,
     * its shards byte-identical to the same command's anywhere else */
    ck_assert_int_eq(PACK("--force --size 32 --records-per-shard 8", "raw", "mnt/ds"), 0);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --full mnt/ds", tu_tools), 0);
    ck_assert_int_eq(tu_sh("(ls -A mnt/ds > ls2.txt)"), 0);
    ck_assert_str_eq(tu_slurp("ls2.txt"),
                     "listing.tsv\nmanifest.json\nshard.g1-00000.stk\nshard.g1-00001.stk\n"
                     "shard.g1-00002.stk\nshard.g1-00003.stk\nshard.g1-00004.stk\nskipped.tsv\n");
    for (int k = 0; k < 5; k++)
        ck_assert_int_eq(tu_sh("cmp ref/shard-%05d.stk mnt/ds/shard.g1-%05d.stk", k, k), 0);
    ck_assert_int_eq(tu_sh("cmp ref/listing.tsv mnt/ds/listing.tsv"), 0);

    /* --force-in-place, asked for by name: the old behaviour, both lost */
    rc = PACK("--force-in-place --size 96 --records-per-shard 8", "raw", "mnt/ds");
    ck_assert_int_eq(rc, 1);
    ck_assert(strstr(tu_slurp("err.txt"), "is intact") == NULL);
    ck_assert_int_ne(tu_sh("test -e mnt/ds/manifest.json"), 0);
    unmount_it();
}
END_TEST

START_TEST(merge_on_a_full_disk_keeps_the_old_dataset)
{
    if (!mount_small("merge_on_a_full_disk_keeps_the_old_dataset", 640)) return;
    ck_assert_int_eq(tu_sh("'%s/rawgen' -q -n 40 --classes 2 --min-side 40 --max-side 80 raw", tu_tools), 0);
    ck_assert_int_eq(PACK("--size 32 --records-per-shard 8", "raw", "mnt/ds"), 0);
    ck_assert_int_eq(tu_sh("cp -r mnt/ds old"), 0);
    /* the parts of a job array, with --force, beside the dataset */
    ck_assert_int_eq(PACK("--force --part 1/2 --size 24 --records-per-shard 8", "raw", "mnt/ds"), 0);
    ck_assert_int_eq(PACK("--force --part 2/2 --size 24 --records-per-shard 8", "raw", "mnt/ds"), 0);
    ck_assert_int_eq(
        tu_sh("'%s/shardcheck' --full mnt/ds && cmp old/manifest.json mnt/ds/manifest.json", tu_tools), 0);
    /* the disk full when the merge writes: one page left, for the lock */
    ck_assert_int_eq(tu_sh("dd if=/dev/zero of=mnt/filler bs=4k 2>/dev/null; truncate -s -4096 mnt/filler"),
                     0);
    int rc = tu_sh("'%s' --merge mnt/ds", tu_pack_bin());
    char *err = strdup(tu_slurp("err.txt"));
    ck_assert_msg(rc == 1, "exit %d, want 1: %s", rc, err);
    ck_assert_msg(strstr(err, "the old dataset in mnt/ds is intact"), "the error must say so: %s", err);
    free(err);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --full mnt/ds", tu_tools), 0);
    ck_assert_int_eq(
        tu_sh("cmp old/manifest.json mnt/ds/manifest.json && cmp old/listing.tsv mnt/ds/listing.tsv"), 0);
    ck_assert_int_eq(tu_sh("rm mnt/filler && '%s' -q --merge mnt/ds", tu_pack_bin()), 0);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' --full mnt/ds", tu_tools), 0);
    ck_assert_int_eq(tu_sh("(ls -A mnt/ds > ls.txt)"), 0);
    ck_assert_str_eq(tu_slurp("ls.txt"), "listing.tsv\nmanifest.json\npart-0001-of-0002-00000.stk\n"
                                         "part-0001-of-0002-00001.stk\npart-0001-of-0002-00002.stk\n"
                                         "part-0002-of-0002-00000.stk\npart-0002-of-0002-00001.stk\n"
                                         "part-0002-of-0002-00002.stk\nskipped.tsv\n");
    unmount_it();
}
END_TEST

TU_MAIN("pack_replace",
        {.name = "full_disk",
         .timeout = 300,
         .tests = {force_on_a_full_disk_keeps_the_old_dataset, merge_on_a_full_disk_keeps_the_old_dataset}})
