/* format/hash_avx512.c - the hashing kernels compiled for AVX-512F (built
 * with -mavx512f; used only where the CPU has AVX-512F and VBMI, see
 * hash.c): twice the vector width of the AVX2 build, the same values. */
#define HASH_ISA_TABLE stk__hash_avx512
#include "hash_isa.h"
