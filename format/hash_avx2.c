/* format/hash_avx2.c - the hashing kernels compiled for AVX2 (built with
 * -mavx2; used only where __builtin_cpu_supports("avx2"), see hash.c). */
#define HASH_ISA_TABLE stk__hash_avx2
#include "hash_isa.h"
