/* fuzz_mixstate - libFuzzer target: a mixture restored from a fuzzed state
 * (stk_reader_restore_text), its batches against the independent reference
 * of spec/ORDERS.md "Mixtures" (tests/reader/ref_mix.c).
 *
 * Input: the header of mixdata.h (which mixture of three small datasets,
 * written once per process; re-weighting; tail, batch, world, rank, seed),
 * then the state's text. A refused state must say why. An accepted one must
 * put the reader at the state's epoch and batch (with re-weighting, at the
 * next epoch's start when the saved batch is past the new epoch), the
 * reader's own state of that position must restore to it, and the next two
 * batches must be exactly the reference's: records, sources,
 * records inside the sources and the values stored there. Any mismatch
 * traps. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mixdata.h"
#include "ref_mix.h"
#include "ref_order.h"
#include "stoker/format.h"

#define CHECK(cond)                \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char root[64];
static uint64_t quasi_K[MIXDATA_SETS]; /* records per quasi block, as the reader sizes them */

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd)) return;
}

static void setup(void)
{
    char msg[512];
    snprintf(root, sizeof root, "/tmp/fuzz_mixstate.XXXXXX");
    CHECK(mkdtemp(root) != NULL);
    atexit(cleanup);
    CHECK(mixdata_write(root, msg, sizeof msg) == 0);
    for (unsigned d = 0; d < MIXDATA_SETS;
         d++) { /* the reader's block size: quasi_block_bytes / average record */
        char dir[128];
        stk_error e;
        snprintf(dir, sizeof dir, "%s/d%u", root, d);
        stk_dataset *ds = stk_dataset_open(dir, &e);
        CHECK(ds != NULL);
        uint64_t total = 0;
        for (size_t s = 0; s < stk_dataset_nshards(ds); s++)
            total += stk_shard_file_size(stk_dataset_shard(ds, s));
        uint64_t avg = total / mixdata_n[d] ? total / mixdata_n[d] : 1;
        quasi_K[d] = MIXDATA_QBB / avg ? MIXDATA_QBB / avg : 1;
        stk_dataset_close(ds);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < MIXDATA_HEAD) return 0;
    if (!root[0]) setup();
    const uint8_t *head = data;
    stk_error err;
    stk_reader *r = mixdata_open(root, head, &err);
    if (!r) { /* a drop tail longer than the epoch: refused at open */
        CHECK(err.code != STK_OK && err.msg[0]);
        return 0;
    }
    unsigned flags = head[1] & 1 ? STK_RESTORE_REWEIGHT : 0;
    err.code = STK_OK;
    int rc = stk_reader_restore_text(r, (const char *)data + MIXDATA_HEAD, size - MIXDATA_HEAD, flags, &err);
    if (rc != STK_OK) {
        CHECK(err.code != STK_OK && err.msg[0] && memchr(err.msg, 0, sizeof err.msg));
        stk_reader_close(r);
        return 0;
    }
    /* where the state says */
    stk_reader_state st;
    CHECK(stk_reader_state_parse((const char *)data + MIXDATA_HEAD, size - MIXDATA_HEAD, &st, &err) ==
          STK_OK);
    uint64_t bpe = stk_reader_batches_per_epoch(r), e, b;
    stk_reader_position(r, &e, &b);
    if (flags && st.batch >= bpe) CHECK(e == st.epoch + 1 && b == 0);
    else CHECK(e == st.epoch && b == st.batch);

    /* the reader's own state of that position restores, without re-weighting, to the same position */
    char text[8192];
    size_t tn = stk_reader_save_text(r, text, sizeof text);
    CHECK(tn < sizeof text);
    CHECK(stk_reader_restore_text(r, text, tn, 0, &err) == STK_OK);
    uint64_t e2, b2;
    stk_reader_position(r, &e2, &b2);
    CHECK(e2 == e && b2 == b);

    /* the reference's batches from there */
    const mixdata_cfg *c = &mixdata_cfgs[head[0] % MIXDATA_CFGS];
    ref_source ref[3];
    uint64_t base[4] = {0};
    for (unsigned s = 0; s < c->S; s++) {
        unsigned d = c->set[s];
        int order = c->order[s] < 0 ? c->reader_order : c->order[s];
        ref[s] = (ref_source){mixdata_n[d],
                              c->kind[s],
                              c->value[s],
                              order,
                              order == REF_QUASI ? quasi_K[d] : 0,
                              order == REF_QUASI ? MIXDATA_WQ : 0};
        base[s + 1] = base[s] + mixdata_n[d];
    }
    uint64_t cnt[3], E = ref_mix_counts(ref, c->S, c->epoch_size, cnt);
    uint32_t B = 1 + head[2] % 8, world = 1 + head[3] % 3, rank = head[4] % world;
    int tail = (head[1] >> 1) % 3;
    uint64_t G = (uint64_t)B * world;
    CHECK(E > 0 && bpe == ref_batches_per_epoch(E, G, tail));
    uint64_t *rec = malloc(E * sizeof *rec), *srcs = malloc(E * sizeof *srcs), want[8], wsrc[8];
    CHECK(rec && srcs);
    for (int k = 0; k < 2; k++) {
        ref_mix_epoch(ref, c->S, c->epoch_size, head[5], e, rec, srcs);
        uint32_t n = ref_rank_batch(rec, E, G, B, rank, tail, b, want);
        ref_rank_batch(srcs, E, G, B, rank, tail, b, wsrc);
        const stk_batch *bt = stk_reader_next(r, &err);
        CHECK(bt != NULL && bt->epoch == e && bt->index == b && bt->size == n && bt->sources);
        const int64_t *label = bt->fields[0].data;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t s = bt->sources[i];
            CHECK(bt->records[i] == want[i] && s == wsrc[i]);
            CHECK(bt->source_records[i] == bt->records[i] - base[s]);
            CHECK(label[i] == mixdata_label(c->set[s], bt->source_records[i]));
        }
        if (++b == bpe) e++, b = 0;
    }
    free(rec);
    free(srcs);
    stk_reader_close(r);
    return 0;
}
