/* fuzz_state - libFuzzer target: arbitrary bytes as a saved reader state
 * (shardread --state-in, a checkpoint's loader state), one dataset's (version 1)
 * or a mixture's (version 2: its sources are parsed and checked too).
 *
 * A state that parses must format and parse back to the same integers, and
 * the order it names must map positions into range for a small dataset
 * derived from it (the order functions take the state's integers as they
 * come: any block size and window). Any mismatch traps. */
#define STOKER_ADVANCED_API /* stk_order_record */
#include "stoker/reader.h"

#include <stdint.h>
#include <string.h>

#define CHECK(cond)                \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    stk_reader_state st, back;
    stk_error err;
    if (stk_reader_state_parse((const char *)data, size, &st, &err) != STK_OK) {
        CHECK(err.code != STK_OK && memchr(err.msg, 0, sizeof err.msg));
        return 0;
    }
    char buf[1024];
    size_t n = stk_reader_state_format(&st, buf, sizeof buf);
    CHECK(n < sizeof buf);
    CHECK(stk_reader_state_parse(buf, n, &back, &err) == STK_OK);
    CHECK(back.fingerprint == st.fingerprint && back.order == st.order && back.seed == st.seed &&
          back.global_batch == st.global_batch && back.tail == st.tail &&
          back.quasi_block_records == st.quasi_block_records && back.quasi_window == st.quasi_window &&
          back.epoch == st.epoch && back.batch == st.batch);
    uint64_t records = 1 + st.batch % 1000;
    for (uint64_t p = 0; p < records; p += 1 + records / 16) {
        uint64_t r = stk_order_record(st.order, records, st.seed, st.epoch, st.quasi_block_records,
                                      st.quasi_window, p);
        CHECK(r < records);
    }
    return 0;
}
