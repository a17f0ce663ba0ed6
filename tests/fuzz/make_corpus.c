/* make_corpus - write the seed corpus of the fuzz targets.
 *
 *   make_corpus OUTDIR
 *
 * writes small valid shards to OUTDIR/shard/ and manifests describing them to
 * OUTDIR/manifest/, through the format library's own writer, so the seeds are
 * exactly what `pack` writes. The output is deterministic: the committed seeds
 * in tests/fuzz/corpus/ are this program's output (the hand-made invalid
 * manifests, corpus/manifest/invalid-*.json and lenient-*.json, are not), and
 * the ctest fuzz_corpus_fresh checks that they still are. After a format
 * change, regenerate with
 *
 *   build-fuzz/tests/fuzz/make_corpus tests/fuzz/corpus
 *
 * It also writes OUTDIR/mixstate/: states saved by readers of the mixtures
 * of mixdata.h (over datasets it writes in a scratch directory and removes),
 * each behind the header that opens the same reader.
 *
 * Every region is 4096-aligned, so even a tiny shard is a few pages; keep the
 * shards few and small (the fuzzer's default max_len is the largest seed). */
#define _XOPEN_SOURCE 700 /* nftw, mkdtemp */
#include "stoker/format.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mixdata.h"

static void die(const char *what, const stk_error *err)
{
    fprintf(stderr, "make_corpus: %s: %s\n", what, err ? err->msg : strerror(errno));
    exit(1);
}

static void mkdir_p(const char *path)
{
    if (mkdir(path, 0777) != 0 && errno != EEXIST) die(path, NULL);
}

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (!p) die("out of memory", NULL);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

/* Deterministic filler bytes. */
static uint8_t next_byte(uint32_t *s)
{
    *s = *s * 1103515245u + 12345u;
    return (uint8_t)(*s >> 16);
}

/* A JPEG stream as far as the format looks at one: SOI, the frame header
 * (h x w, c components), a short scan, EOI. */
static uint64_t fake_jpeg(uint8_t *p, unsigned h, unsigned w, unsigned c)
{
    uint64_t n = 0;
    p[n++] = 0xFF, p[n++] = 0xD8, p[n++] = 0xFF, p[n++] = 0xC0, p[n++] = 0, p[n++] = (uint8_t)(8 + 3 * c);
    p[n++] = 8, p[n++] = 0, p[n++] = (uint8_t)h, p[n++] = 0, p[n++] = (uint8_t)w, p[n++] = (uint8_t)c;
    for (unsigned k = 0; k < c; k++) p[n++] = (uint8_t)(k + 1), p[n++] = 0x11, p[n++] = 0;
    p[n++] = 0xFF, p[n++] = 0xDA, p[n++] = 0, p[n++] = 2, p[n++] = 0x12, p[n++] = 0x34, p[n++] = 0xFF,
    p[n++] = 0xD9;
    return n;
}

/* Write one shard of `records` records; values are filler bytes, bytes fields
 * get lengths 0, 1, 2, ... (mod 7); array fields get 0, 1, 2 (mod 3) in each
 * per-record dim (JPEG ones 1 + that, with a frame header to match). */
static stk_shard_info write_shard(const char *dir, const char *name, const stk_schema *s, uint64_t records)
{
    stk_error err;
    char *path = join(dir, name);
    stk_writer *w = stk_writer_create(path, s, &err);
    if (!w) die(path, &err);
    stk_writer_trust_jpeg(w, 1, &err); /* fake_jpeg's streams only look like JPEG to the format */
    uint32_t seed = 1;
    for (uint64_t i = 0; i < records; i++) {
        stk_value v[STK_MAX_FIELDS];
        uint8_t buf[STK_MAX_FIELDS][64];
        uint64_t dims[STK_MAX_FIELDS * STK_MAX_DIMS];
        unsigned nd = 0;
        for (uint32_t f = 0; f < s->nfields; f++) {
            const stk_field *fd = &s->fields[f];
            uint64_t size = fd->kind == STK_KIND_BYTES ? (i * 3 + f) % 7 : stk_field_stride(fd);
            if (fd->kind == STK_KIND_ARRAY) {
                size = stk_dtype_size(fd->dtype);
                for (unsigned d = 0; d < fd->ndim; d++) {
                    uint64_t x = fd->shape[d] ? fd->shape[d] : (i + d) % 3 + (fd->codec == STK_CODEC_JPEG);
                    if (!fd->shape[d]) dims[nd++] = x;
                    size *= x;
                }
            }
            if (size > sizeof buf[f]) die("make_corpus: field too large for a seed", NULL);
            for (uint64_t k = 0; k < size; k++) buf[f][k] = next_byte(&seed);
            if (fd->codec == STK_CODEC_JPEG)
                size =
                    fake_jpeg(buf[f], (unsigned)dims[nd - 2], (unsigned)dims[nd - 1], (unsigned)fd->shape[2]);
            v[f] = (stk_value){buf[f], size};
        }
        if (stk_writer_append_dims(w, v, dims, &err)) die(path, &err);
    }
    stk_shard_info info;
    if (stk_writer_finish(w, &info, &err)) die(path, &err);
    free(path);
    return info;
}

static void write_manifest(const char *dir, const char *name, const stk_schema *s, size_t nshards,
                           const char *const *paths, const stk_shard_info *info, size_t nclasses,
                           const char *const *classes, const char *pack)
{
    stk_error err;
    stk_manifest m;
    memset(&m, 0, sizeof m);
    m.version_major = STK_FORMAT_MAJOR;
    m.version_minor = STK_FORMAT_MINOR;
    m.schema = *s;
    m.nshards = nshards;
    m.shards = calloc(nshards ? nshards : 1, sizeof *m.shards);
    if (!m.shards) die("out of memory", NULL);
    for (size_t i = 0; i < nshards; i++)
        m.shards[i] = (stk_shard_entry){(char *)paths[i], info[i].records, info[i].file_size,
                                        info[i].file_hash, info[i].index_hash};
    m.nclasses = nclasses;
    m.classes = (char **)classes;
    m.pack_json = (char *)pack;
    char *text = stk_manifest_to_json(&m, &err);
    if (!text) die(name, &err);
    char *path = join(dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fputs(text, f) == EOF || fclose(f) != 0) die(path, NULL);
    free(path);
    free(text);
    free(m.shards);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* fuzz_mixstate's seeds: for each (header, batches read) the reader's saved
 * state behind the header. */
static void write_mixstates(const char *out)
{
    static const struct {
        const char *name;
        uint8_t head[MIXDATA_HEAD];
        unsigned batches;
    } seeds[] = {
        {"weights-start", {0, 0, 3, 0, 0, 0}, 0},    {"weights-mid", {0, 0, 2, 1, 1, 7}, 3},
        {"weights-reweight", {0, 1, 2, 0, 0, 7}, 5}, {"kinds-drop", {1, 2, 4, 2, 1, 1}, 2},
        {"kinds-next-epoch", {1, 4, 7, 0, 0, 3}, 9}, {"quasi-epoch-size", {2, 0, 5, 0, 0, 9}, 4},
        {"quasi-partial", {2, 4, 1, 2, 2, 9}, 30},   {"one-source", {3, 1, 0, 0, 0, 2}, 11},
    };
    char root[] = "/tmp/make_corpus.XXXXXX", msg[512];
    if (!mkdtemp(root)) die(root, NULL);
    if (mixdata_write(root, msg, sizeof msg)) {
        fprintf(stderr, "make_corpus: %s\n", msg);
        exit(1);
    }
    char *dir = join(out, "mixstate");
    mkdir_p(dir);
    for (size_t k = 0; k < sizeof seeds / sizeof *seeds; k++) {
        stk_error err;
        stk_reader *r = mixdata_open(root, seeds[k].head, &err);
        if (!r) die(seeds[k].name, &err);
        for (unsigned b = 0; b < seeds[k].batches; b++)
            if (!stk_reader_next(r, &err)) die(seeds[k].name, &err);
        char text[4096];
        size_t n = stk_reader_save_text(r, text, sizeof text);
        if (n >= sizeof text) die("state too long for a seed", NULL);
        stk_reader_close(r);
        char *path = join(dir, seeds[k].name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(seeds[k].head, 1, MIXDATA_HEAD, f) != MIXDATA_HEAD || fwrite(text, 1, n, f) != n ||
            fclose(f) != 0)
            die(path, NULL);
        free(path);
    }
    free(dir);
    if (nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS)) die(root, NULL);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_corpus OUTDIR\n");
        return 2;
    }
    char *sdir = join(argv[1], "shard"), *mdir = join(argv[1], "manifest");
    mkdir_p(argv[1]);
    mkdir_p(sdir);
    mkdir_p(mdir);
    stk_error err;

    /* 1. tensor-only: an image and a label, as shardgen writes them. */
    stk_schema tensor;
    stk_schema_init(&tensor);
    uint64_t img[3] = {4, 4, 3};
    if (stk_schema_add_tensor(&tensor, "image", STK_DT_U8, 3, img, &err) ||
        stk_schema_add_tensor(&tensor, "label", STK_DT_I64, 0, NULL, &err))
        die("schema", &err);
    stk_shard_info ti = write_shard(sdir, "tensor.stk", &tensor, 3);

    /* 2. a bytes field between two tensors (some values empty). */
    stk_schema bytes;
    stk_schema_init(&bytes);
    uint64_t two[1] = {2};
    if (stk_schema_add_tensor(&bytes, "x", STK_DT_F32, 1, two, &err) ||
        stk_schema_add_bytes(&bytes, "caption", &err) ||
        stk_schema_add_tensor(&bytes, "label", STK_DT_I64, 0, NULL, &err))
        die("schema", &err);
    stk_shard_info bi[2] = {write_shard(sdir, "bytes.stk", &bytes, 5),
                            write_shard(sdir, "bytes-1.stk", &bytes, 1)};

    /* 3. no records at all. */
    stk_schema empty;
    stk_schema_init(&empty);
    uint64_t eight[1] = {8};
    if (stk_schema_add_tensor(&empty, "v", STK_DT_U8, 1, eight, &err) ||
        stk_schema_add_bytes(&empty, "b", &err))
        die("schema", &err);
    stk_shard_info ei = write_shard(sdir, "empty.stk", &empty, 0);

    /* 4. other dtypes and ranks. */
    stk_schema dt;
    stk_schema_init(&dt);
    uint64_t s23[2] = {2, 3}, s112[3] = {1, 1, 2}, s5[1] = {5};
    if (stk_schema_add_tensor(&dt, "u16.m", STK_DT_U16, 2, s23, &err) ||
        stk_schema_add_tensor(&dt, "bf16", STK_DT_BF16, 0, NULL, &err) ||
        stk_schema_add_tensor(&dt, "f64-cube", STK_DT_F64, 3, s112, &err) ||
        stk_schema_add_tensor(&dt, "i8_v", STK_DT_I8, 1, s5, &err))
        die("schema", &err);
    stk_shard_info di = write_shard(sdir, "dtypes.stk", &dt, 2);

    /* 5. format 1.2: an image of any size, token runs (zstd), boxes, JPEG. */
    stk_schema arr;
    stk_schema_init(&arr);
    uint64_t hw3[3] = {0, 0, 3}, run[1] = {0}, box[2] = {0, 4}, hw1[3] = {0, 0, 1};
    if (stk_schema_add_array(&arr, "image", STK_DT_U8, 3, hw3, &err) ||
        stk_schema_add_array(&arr, "tokens", STK_DT_U16, 1, run, &err) ||
        stk_schema_add_array(&arr, "boxes", STK_DT_F32, 2, box, &err) ||
        stk_schema_add_array(&arr, "jpeg", STK_DT_U8, 3, hw1, &err) ||
        stk_schema_set_codec(&arr, 1, STK_CODEC_ZSTD, &err) ||
        stk_schema_set_codec(&arr, 3, STK_CODEC_JPEG, &err))
        die("schema", &err);
    stk_shard_info ai = write_shard(sdir, "array.stk", &arr, 4);

    static const char *const pets[] = {"cat", "dog", "Hamster_3"};
    const char *tp[] = {"tensor.stk"};
    write_manifest(mdir, "tensor.json", &tensor, 1, tp, &ti, 3, pets,
                   "{\"tool\": \"make_corpus\", \"size\": 4}");
    const char *bp[] = {"bytes.stk", "more/bytes-1.stk"};
    write_manifest(mdir, "bytes.json", &bytes, 2, bp, bi, 0, NULL,
                   "{\"nested\": {\"a\": [1, 2.5, null, true, \"\\u00e9\"]}, \"empty\": {}}");
    const char *ep[] = {"empty.stk"};
    write_manifest(mdir, "empty.json", &empty, 1, ep, &ei, 0, NULL, NULL);
    write_manifest(mdir, "no-shards.json", &empty, 0, NULL, NULL, 1, pets, NULL);
    const char *dp[] = {"d/t/dtypes.stk"};
    write_manifest(mdir, "dtypes.json", &dt, 1, dp, &di, 0, NULL, "{}");
    const char *ap[] = {"array.stk"};
    write_manifest(mdir, "array.json", &arr, 1, ap, &ai, 0, NULL, "{}");
    free(sdir);
    free(mdir);
    write_mixstates(argv[1]);
    return 0;
}
