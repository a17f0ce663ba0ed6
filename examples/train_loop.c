/* examples/train_loop.c - the shape of a C/C++ trainer's input loop.
 *
 *     train_loop DATASET [EPOCHS] [STATE_FILE]
 *
 * Shuffled batches of 64 from persistent worker threads; the "step" is a
 * stand-in (a checksum of the pixels and a 5 ms sleep) where a trainer would
 * launch its kernels. Every 20 steps it prints the fetch-vs-step split and the
 * reader's verdict. Rank and world size come from $RANK / $WORLD_SIZE (as
 * torchrun and Slurm set them). With STATE_FILE it resumes from the state
 * saved there and saves the state again at the end: a restarted job continues
 * with exactly the batches an uninterrupted one would have read next.
 */
#ifndef _POSIX_C_SOURCE
#  define _POSIX_C_SOURCE 200809L
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <stoker/reader.h>

static void fake_step(const stk_batch *b)
{
    const stk_batch_field *img = &b->fields[0];
    const uint8_t *px = img->data;
    unsigned long sum = 0;
    for (uint64_t i = 0; i < img->nbytes; i += 64) sum += px[i]; /* touch the batch */
    if (sum == 1) puts("");
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static void load_state(stk_reader *r, const char *path)
{
    char buf[1024];
    FILE *f = fopen(path, "rb");
    if (!f) return; /* first run: nothing to resume */
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    stk_reader_state st;
    stk_error err;
    if (stk_reader_state_parse(buf, n, &st, &err) || stk_reader_restore(r, &st, &err)) {
        fprintf(stderr, "train_loop: %s: %s\n", path, err.msg);
        exit(2);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: %s DATASET [EPOCHS] [STATE_FILE]\n", argv[0]);
        return 2;
    }
    stk_reader_options o;
    stk_reader_options_init(&o); /* rank/world from the environment */
    o.batch_size = 64;
    o.order = STK_ORDER_SHUFFLE;
    o.seed = 1234;
    o.threads = 2;
    o.fields = "image,label"; /* read only what the model needs */
    stk_error err;
    stk_reader *r = stk_reader_open(argv[1], &o, &err);
    if (!r) {
        fprintf(stderr, "train_loop: %s\n", err.msg);
        return 2;
    }
    if (argc == 4) load_state(r, argv[3]);
    uint64_t epoch, batch;
    stk_reader_position(r, &epoch, &batch);
    stk_reader_set_epochs(r, argc >= 3 ? strtoull(argv[2], NULL, 10) : 1);
    printf("rank %d of %d: %llu batches per epoch, starting at epoch %llu batch %llu\n",
           stk_reader_get_options(r)->rank, stk_reader_get_options(r)->world_size,
           (unsigned long long)stk_reader_batches_per_epoch(r), (unsigned long long)epoch,
           (unsigned long long)batch);

    const stk_batch *b;
    uint64_t steps = 0;
    while ((b = stk_reader_next(r, &err))) {
        fake_step(b); /* b stays valid until the next call */
        if (++steps % 20 == 0) {
            stk_reader_stats s;
            char verdict[256];
            stk_reader_stats_get(r, &s);
            stk_reader_verdict(&s, verdict, sizeof verdict);
            printf("epoch %llu batch %llu: fetch %.1f ms/step, step %.1f ms/step; %s\n",
                   (unsigned long long)b->epoch, (unsigned long long)b->index, 1e3 * s.wait_s / s.batches,
                   1e3 * (s.wall_s - s.wait_s) / s.batches, verdict);
        }
    }
    int rc = err.code ? 1 : 0;
    if (rc) fprintf(stderr, "train_loop: %s\n", err.msg);
    if (argc == 4 && !rc) {
        stk_reader_state st;
        char buf[1024];
        stk_reader_save(r, &st);
        size_t n = stk_reader_state_format(&st, buf, sizeof buf);
        if (stk_file_commit(argv[3], buf, n, &err)) {
            fprintf(stderr, "train_loop: %s\n", err.msg);
            rc = 1;
        }
    }
    stk_reader_close(r);
    return rc;
}
