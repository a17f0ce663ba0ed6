/* examples/read_dataset.c - the smallest useful libstoker program.
 *
 * Opens a dataset, walks every record in order through the mapped shards
 * and prints a label histogram summary and the read rate. Build against an
 * installed stoker with either of:
 *     cc read_dataset.c $(pkg-config --cflags --libs stoker) -o read_dataset
 *     find_package(stoker) + target_link_libraries(... stoker::stoker)
 */
#ifndef _POSIX_C_SOURCE
#  define _POSIX_C_SOURCE 200809L /* clock_gettime */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <stoker/reader.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DATASET\n", argv[0]);
        return 2;
    }
    stk_error err;
    double t0 = now();
    stk_dataset *ds = stk_dataset_open(argv[1], &err);
    if (!ds) {
        fprintf(stderr, "read_dataset: %s\n", err.msg);
        return 1;
    }
    double t_open = now() - t0;
    const stk_schema *s = stk_dataset_schema(ds);
    int label = stk_schema_find(s, "label");
    uint64_t n = stk_dataset_records(ds), bytes = 0, sum = 0, labels_seen = 0;

    /* Consecutive records of a tensor field are one contiguous array inside
     * each shard: walk shard by shard, field by field. */
    t0 = now();
    for (size_t i = 0; i < stk_dataset_nshards(ds); i++) {
        const stk_shard *sh = stk_dataset_shard(ds, i);
        uint64_t count = stk_shard_records(sh);
        for (unsigned f = 0; f < s->nfields; f++) {
            const uint8_t *base = stk_shard_field_base(sh, f);
            if (!base) continue; /* a bytes field */
            uint64_t len = count * stk_field_stride(&s->fields[f]);
            for (uint64_t k = 0; k < len; k += 64) sum += base[k]; /* touch every cache line */
            bytes += len;
            if ((int)f == label) {
                const int64_t *l = (const int64_t *)base;
                for (uint64_t r = 0; r < count; r++) labels_seen += l[r] >= 0;
            }
        }
    }
    double t_read = now() - t0;
    printf("read_dataset: %llu records in %zu shards; open %.2f ms; read %.1f MB in %.3f s (%.2f GB/s, %.0f "
           "records/s)\n",
           (unsigned long long)n, stk_dataset_nshards(ds), t_open * 1e3, (double)bytes / 1e6, t_read,
           t_read > 0 ? (double)bytes / t_read / 1e9 : 0.0, t_read > 0 ? (double)n / t_read : 0.0);
    printf("read_dataset: %llu labelled records, touch sum %llu\n", (unsigned long long)labels_seen,
           (unsigned long long)sum);
    stk_dataset_close(ds);
    return labels_seen == (label >= 0 ? n : 0) ? 0 : 1;
}
