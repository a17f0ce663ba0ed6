/* format/hash_avx512.c - the hashing kernels compiled for AVX-512F (built
 * with -mavx512f; used only where the CPU has AVX-512F and VBMI, see
 * hash.c): XXH3 at about 53 GB/s on a 192 KiB image in L2, against 41 GB/s
 * with AVX2. */
#define HASH_ISA_TABLE stk__hash_avx512
#include "hash_isa.h"
