/* packer/pack_meta.c - what a pack's records look like: the image value's
 * largest size and its slot, the schema, records per shard, and the
 * parameters recorded in the manifest (and hashed to tell runs apart). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "pack.h"

bool pk_variable_images(const pk_opts *o)
{
    return o->img.mode == PK_RESIZE_KEEP || o->image_format != PK_IMG_RAW;
}

/* The largest image value: size x size x 3 pixels (in keep mode size is
 * --max-side), or a JPEG of them as large as TurboJPEG may make it. */
size_t pk_image_bytes(const pk_opts *o)
{
    size_t px = (size_t)o->img.size * o->img.size * 3;
    if (o->image_format == PK_IMG_RAW) return px;
    size_t j = tjBufSize((int)o->img.size, (int)o->img.size, TJSAMP_420);
    return j > px ? j : px;
}

/* A slot holds an image and, when the writer takes it by reference (whole
 * pages: --size a multiple of 64, STK_WRITER_LEND_ALIGN), its XXH3 block
 * sums (stk_hash_blocks): they go to the writer with the image and come
 * back to the pool with it. Other images are copied by the writer, which
 * hashes the copy; sums would be computed for nothing. */
_Static_assert(STK_WRITER_LEND_ALIGN % STK_HASH_BLOCK == 0, "a lent image is whole XXH3 blocks");
bool pk_lent_whole(const pk_opts *o, size_t img)
{
    return !pk_variable_images(o) && img % STK_WRITER_LEND_ALIGN == 0;
}

uint64_t *pk_block_sums(const pk_opts *o, uint8_t *slot, size_t img)
{
    return pk_lent_whole(o, img) ? (uint64_t *)(void *)(slot + img) : NULL;
}

size_t pk_slot_bytes(const pk_opts *o)
{
    size_t img = pk_image_bytes(o);
    return img + (pk_lent_whole(o, img) ? img / STK_HASH_BLOCK * 8 * sizeof(uint64_t) : 0);
}

char *pk_pack_json(const pk_run *r, uint64_t per_shard)
{
    static const char *const modes[] = {"shorter", "stretch", "fit", "keep"}, *const formats[] = {
                                                                                  "raw", "jpeg", "original"};
    const pk_params *p = &r->o->img;
    char *s = NULL, extra[200] = "";
    if (pk_variable_images(r->o)) /* only then: the parameters of a square raw pack read as before */
        snprintf(extra, sizeof extra,
                 "\"max_side\": %u, \"min_side\": %u, \"image_format\": \"%s\", \"quality\": %d, %s"
                 "\"jpeg_restart\": %u, ",
                 p->mode == PK_RESIZE_KEEP ? p->max_side : 0, p->min_side, formats[r->o->image_format],
                 r->o->quality, r->o->jpeg_baseline ? "\"jpeg_baseline\": true, " : "",
                 r->o->image_format == PK_IMG_RAW ? 0 : r->o->jpeg_restart);
    if (asprintf(
            &s,
            "{\"tool\": \"pack\", \"version\": \"%s\", \"input\": \"%s\", \"size\": %u, \"resize\": \"%s\", "
            "\"resample_space\": \"%s\", %s"
            "\"fill\": [%u, %u, %u], \"max_pixels\": %llu, \"records_per_shard\": %llu, \"listed\": %zu, "
            "\"parts\": %u, \"compress\": [%d, %d, %d, %d], \"block_bytes\": %llu, "
            "\"listing\": \"listing.tsv\", \"skipped_list\": \"skipped.tsv\"}",
            STK_VERSION_STRING, r->L.kind == PK_LIST_IMAGEFOLDER ? "imagefolder" : "list", p->size,
            modes[p->mode], p->resample_rgb ? "rgb" : "ycc", extra, p->fill[0], p->fill[1], p->fill[2],
            (unsigned long long)p->max_pixels, (unsigned long long)per_shard, r->L.n, r->o->parts,
            r->o->zstd[0], r->o->zstd[1], r->o->zstd[2], r->o->zstd[3],
            (unsigned long long)r->o->block_bytes) < 0)
        return NULL;
    return s;
}

uint64_t pk_pack_hash(const pk_run *r, const char *pack_json)
{
    char *s = NULL;
    uint64_t h = 0;
    /* Not the part number: every part of one pack shares this (the merge
     * compares it); each part keeps its own state file. */
    if (asprintf(&s, "%016llx %s", (unsigned long long)pk_listing_hash(&r->L), pack_json) >= 0)
        h = stk_hash(s, strlen(s));
    free(s);
    return h ? h : 1;
}

/* The size of a shard of n records: exact for fixed-size records; with
 * images of their own size, as if every image were the largest possible
 * (so a shard never exceeds --shard-size; it is smaller by the ratio of the
 * mean image to the largest). 0 on overflow. */
static uint64_t shard_bytes(const pk_opts *o, const stk_schema *s, uint64_t n)
{
    uint64_t sz = stk_shard_size_for(s, n), img = pk_variable_images(o) ? pk_image_bytes(o) : 0;
    return sz && img && n > (UINT64_MAX - sz) / img ? 0 : sz + n * img;
}

uint64_t pk_records_per_shard(const pk_opts *o, const stk_schema *s)
{
    if (o->per_shard) return o->per_shard;
    uint64_t lo = 1, hi = 1;
    while (shard_bytes(o, s, hi * 2) && shard_bytes(o, s, hi * 2) <= o->shard_size &&
           hi < ((uint64_t)1 << 40))
        hi *= 2;
    if (shard_bytes(o, s, hi) > o->shard_size) return 1; /* one record is larger than the limit */
    uint64_t top = hi * 2;
    lo = hi;
    while (lo + 1 < top) { /* largest count that fits */
        uint64_t mid = lo + (top - lo) / 2, sz = shard_bytes(o, s, mid);
        if (sz && sz <= o->shard_size) lo = mid;
        else top = mid;
    }
    return lo;
}

int pk_make_schema(const pk_opts *o, stk_schema *s)
{
    stk_error err;
    uint64_t img[3] = {o->img.size, o->img.size, 3}, any[3] = {0, 0, 3}, two[1] = {2};
    stk_schema_init(s);
    if ((pk_variable_images(o) ? stk_schema_add_array(s, "image", STK_DT_U8, 3, any, &err)
                               : stk_schema_add_tensor(s, "image", STK_DT_U8, 3, img, &err)) ||
        (o->image_format != PK_IMG_RAW && stk_schema_set_codec(s, 0, STK_CODEC_JPEG, &err)) ||
        stk_schema_add_tensor(s, "label", STK_DT_I64, 0, NULL, &err) ||
        stk_schema_add_tensor(s, "orig_size", STK_DT_U32, 1, two, &err) ||
        stk_schema_add_tensor(s, "source", STK_DT_U64, 0, NULL, &err)) {
        fprintf(stderr, "pack: %s\n", err.msg);
        return -1;
    }
    for (unsigned f = 0; f < 4; f++)
        if (o->zstd[f]) stk_schema_set_codec(s, f, STK_CODEC_ZSTD, NULL);
    return 0;
}
