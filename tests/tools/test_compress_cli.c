/* tests/tools/test_compress_cli.c - compressed fields end to end: pack
 * --compress gives the same records as an uncompressed pack, the same bytes
 * whatever -j; shardcheck names a corrupt block; shardgen --compress reads
 * back through the reader in every order. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "stoker/reader.h"

/* Every record of every field of a and b, read through the reader in
 * order, is equal; returns the record count. */
static uint64_t same_records(const char *a, const char *b)
{
    char pa[1200], pb[1200];
    snprintf(pa, sizeof pa, "%s/%s", tu_tmp, a);
    snprintf(pb, sizeof pb, "%s/%s", tu_tmp, b);
    stk_reader_options o = tu_reader_options(32, STK_ORDER_SEQUENTIAL);
    o.tail = STK_TAIL_PARTIAL;
    stk_reader *ra = tu_open_reader(pa, &o), *rb = tu_open_reader(pb, &o);
    stk_error err;
    stk_reader_set_epochs(ra, 1);
    stk_reader_set_epochs(rb, 1);
    uint64_t n = 0;
    const stk_batch *x, *y;
    while ((x = stk_reader_next(ra, &err))) {
        y = stk_reader_next(rb, &err);
        ck_assert_ptr_nonnull(y);
        ck_assert_uint_eq(x->size, y->size);
        for (unsigned k = 0; k < x->nfields; k++) {
            ck_assert_uint_eq(x->fields[k].nbytes, y->fields[k].nbytes);
            if (x->fields[k].data)
                ck_assert(memcmp(x->fields[k].data, y->fields[k].data, x->fields[k].nbytes) == 0);
        }
        n += x->size;
    }
    ck_assert_int_eq(err.code, STK_OK);
    ck_assert_ptr_null(stk_reader_next(rb, &err));
    stk_reader_close(ra);
    stk_reader_close(rb);
    return n;
}

START_TEST(pack_compress)
{
    tu_cli_setup();
    ck_assert_int_eq(tu_sh("'%s/rawgen' -q -n 120 --classes 3 --min-side 40 --max-side 80 raw", tu_tools), 0);
    ck_assert_int_eq(tu_sh("'%s' -q --size 24 raw plain", tu_pack_bin()), 0);
    ck_assert_int_eq(tu_sh("'%s' -q -j 1 --size 24 --compress image=zstd:5,label=zstd --block-size 4K raw z1",
                           tu_pack_bin()),
                     0);
    ck_assert_int_eq(tu_sh("'%s' -q -j 2 --size 24 --compress image=zstd:5,label=zstd --block-size 4K raw z2",
                           tu_pack_bin()),
                     0);
    ck_assert_int_eq(tu_sh("diff -r z1 z2"), 0); /* byte-identical whatever -j */
    ck_assert_int_eq(tu_sh("'%s/shardcheck' -q --file-hash z1", tu_tools), 0);
    ck_assert_int_eq(same_records("plain", "z1"), 120);
    ck_assert_int_eq(tu_sh("'%s/shardinfo' z1", tu_tools), 0);
    char *info = tu_slurp("out.txt");
    ck_assert(strstr(info, "format       1.1") && strstr(info, "image u8[24,24,3] zstd") &&
              strstr(info, "source u64[]  "));
    ck_assert_int_eq(tu_sh("'%s' -q --size 24 --compress brotli raw bad", tu_pack_bin()), 2);
    ck_assert_int_eq(tu_sh("'%s' -q --size 24 --compress image=zstd:30 raw bad", tu_pack_bin()), 2);
}
END_TEST

START_TEST(shardcheck_names_block)
{
    tu_cli_setup();
    ck_assert_int_eq(tu_sh("'%s/shardgen' -q -n 200 --size 16 --captions --compress zstd:1 --block-size 2K "
                           "--records-per-shard 100 ds",
                           tu_tools),
                     0);
    ck_assert_int_eq(tu_sh("'%s/shardcheck' -q ds", tu_tools), 0);
    /* a byte in the middle of shard 1's file: inside the image frames */
    ck_assert_int_eq(tu_sh("cp -r ds bad && f=bad/shard-00001.stk && n=$(stat -c %%s $f) && "
                           "printf '\\001' | dd of=$f bs=1 seek=$((n / 2)) conv=notrunc status=none"),
                     0);
    tu_sh_says(1, "out.txt", "bad/shard-00001.stk: record ", "'%s/shardcheck' bad", tu_tools);
    ck_assert_msg(strstr(tu_slurp("out.txt"), "block "), "%s", tu_slurp("out.txt"));
    /* the reader reads the intact copy in every order */
    for (int order = 0; order < 3; order++) {
        ck_assert_int_eq(tu_sh("'%s/shardread' -q --verify always -b 16 -e 2 --order %s ds", tu_tools,
                               order == 0   ? "sequential"
                               : order == 1 ? "shuffle"
                                            : "quasi"),
                         0);
    }
    tu_sh_says(1, "err.txt", "shard-00001.stk", "'%s/shardread' -q --verify always -b 16 bad", tu_tools);
}
END_TEST

TU_MAIN("compressed fields cli",
        {.name = "cli", .timeout = 300, .tests = {pack_compress, shardcheck_names_block}})
