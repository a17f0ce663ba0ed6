/* tests/reader/expect.h - cheap assertions for the order tests' hot loops. */
#ifndef STK_TESTS_EXPECT_H
#define STK_TESTS_EXPECT_H

#include <check.h>
#include <stdint.h>

/* ck_assert_* records its location through a pipe on every call (even when
 * it passes), which costs a write(2) per check in the hot loops: these check
 * first and involve Check only on failure. */
#define expect(cond, ...)                   \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)
#define expect_eq(a, b)                                                               \
  do {                                                                                \
    uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                                  \
    if (a_ != b_)                                                                     \
      ck_abort_msg("%s == %llu, expected %s == %llu", #a, (unsigned long long)a_, #b, \
                   (unsigned long long)b_);                                           \
  } while (0)

#endif
