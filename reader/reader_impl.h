/* reader/reader_impl.h - the reader's internal header: its layers, and the
 * interface of the top two. Not installed.
 *
 * reader/ is layered, top first:
 *     api -> plan -> tune -> engine -> {device, caches} -> {order, io} -> {dataset, util}
 * A file calls the files of its own layer and of the layers below; never a
 * layer above, never a sibling in braces. Each layer's interface is its own
 * header, which includes only headers of its layer and those below
 * (abi_v0.h, the frozen 0.1.0 layouts, is types only: any file may use it):
 *   api      abi.c state.c reader_mix.c diagnose.c  public entries over a reader  (here)
 *   plan     reader_open.c io_plan.c env.c        options, environment, memory, read path  (here, env.h)
 *   tune     tune.c                               the online tuner: turns the engine's knobs  tune.h
 *   engine   reader.c upload.c                    the reader's state, workers, copy thread  engine.h
 *   device   transform.c load_crop.c device_*.c   pixels: transform, crop, upload backends  device.h
 *   caches   blockcache.c qblocks.c               blocks shared by the workers  caches.h
 *   order    order.c mix.c                        orders and mixtures, pure functions  order.h mix.h
 *   io       io.c io_remote.c                     the read engine and its remote backend  io.h
 *   dataset  dataset.c                            datasets as one address space  dataset.h
 *   util     util.c membuf.c timeline.c           sized copies, clock, buffers, trace  util.h membuf.h timeline.h
 * scripts/check-layers (run by scripts/test) reads the call graph from the
 * objects and fails on a call up or sideways and on any file-level cycle. */
#ifndef STK_READER_IMPL_H
#define STK_READER_IMPL_H

#include "engine.h"
#include "env.h"

/* ---------------------------------------------------------------- plan */

/* reader_open.c: the reader over ds; for a mixture, ds concatenates the
 * sources src[0..S) (order -1: the reader's; K, W: filled in) and paths
 * names them (freed by the reader, whether it opens or not). The
 * environment (env.h) is read here, once. */
stk_reader *stk__reader_open(const stk_dataset *ds, const stk__mix_source *src, uint32_t S, char **paths,
                             const stk_reader_options *opts, size_t size, size_t transform_size,
                             stk_error *err);

/* reader_open.c: the dataset at path (local, or remote: s3://, https://)
 * opened with the remote members of the caller's options (`size` bytes of
 * them, NULL: none): cache_dir, cache_limit, endpoint, region, profile. */
stk_dataset *stk__dataset_open_opts(const char *path, const stk_reader_options *opts, size_t size,
                                    stk_error *err);

/* io_plan.c: choose the read path (before the slots are sized), start it */
int stk__io_plan(stk_reader *r, const stk__env *env, stk_error *err);
uint64_t stk__io_plan_bytes(const stk_reader *r);
/* auto's rule (comment in io_plan.c): STK_IO_DIRECT or STK_IO_MMAP for
 * sel_bytes of selected fields, with hit of probed sampled pages resident,
 * ram and avail from /proc/meminfo (0: unknown), map_huge whether the maps
 * would be advised huge pages; why gets the reason. */
int stk__io_auto_rule(uint64_t sel_bytes, uint64_t ram, uint64_t avail, unsigned hit, unsigned probed,
                      int map_huge, char *why, size_t size);
int stk__io_start(stk_reader *r, const stk__env *env, stk_error *err);
/* The bytes of the reader's shard files of at least min_shard bytes each
 * (0: all), a dataset a mixture names twice counted once. */
uint64_t stk__reader_file_bytes(const stk_reader *r, uint64_t min_shard);

/* ----------------------------------------------------------------- api */

/* reader_mix.c: the mixture's fingerprint: its sources (fingerprints, sizes,
 * kinds, values, orders, quasi blocks, counts) and epoch size. */
uint64_t stk__mix_fingerprint(const stk_reader *r);
const char *stk__mix_kind_name(int kind); /* "weight", "repeat", "choose" */

#endif
