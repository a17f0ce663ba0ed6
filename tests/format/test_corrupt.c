/* tests/format/test_corrupt.c - damaged shards. Each header field corrupted
 * (and the header re-hashed, so its own check is the one reached), footer
 * damage, truncation at every length, and a flip of every single byte of a
 * small shard, each of which must be caught and pinned to the right place. */
#include "testutil_internal.h"

#include <stdio.h>
#include <stdlib.h>

#define NAME "c.stk"
#define NREC 5

/* The standard shard with NREC records, read into memory (exact-size buffer). */
static uint8_t *base_shard(size_t *len)
{
    char dir[TU_PATH], path[TU_PATH];
    tu_scratch(dir, sizeof dir, "base");
    tu_join(path, sizeof path, dir, NAME);
    tu_write_std_shard(path, 9, 0, NREC, NULL);
    return tu_read(path, len);
}

/* Where everything lies, read straight from the header bytes with the
 * offsets of internal.h (independently of the decoder under test). */
typedef struct {
    uint32_t hs, nf;
    uint64_t records, file_size, cksum_off, cksum_len;
    uint8_t kind[STK_MAX_FIELDS];
    uint64_t stride[STK_MAX_FIELDS], data_off[STK_MAX_FIELDS], data_len[STK_MAX_FIELDS];
    uint64_t heap_off[STK_MAX_FIELDS], heap_len[STK_MAX_FIELDS];
} layout;

static void read_layout(uint8_t *b, layout *L)
{
    L->hs = rd32(b + H_HEADER_SIZE);
    L->nf = rd32(b + H_NFIELDS);
    L->records = rd64(b + H_RECORDS);
    L->file_size = rd64(b + H_FILE_SIZE);
    L->cksum_off = rd64(b + H_CKSUM_OFF);
    L->cksum_len = rd64(b + H_CKSUM_LEN);
    for (unsigned f = 0; f < L->nf; f++) {
        const uint8_t *d = tu_desc(b, f);
        L->kind[f] = d[D_KIND];
        L->stride[f] = rd64(d + D_STRIDE);
        L->data_off[f] = rd64(d + D_DATA_OFF);
        L->data_len[f] = rd64(d + D_DATA_LEN);
        L->heap_off[f] = rd64(d + D_HEAP_OFF);
        L->heap_len[f] = rd64(d + D_HEAP_LEN);
    }
}

/* Open must fail with `code` and a message naming the file and saying `sub`:
 * from memory, and from a file (where stk_shard_open reads the header and
 * footer with pread rather than through the map). */
static void expect_open_fails(const uint8_t *buf, size_t len, int code, const char *sub)
{
    stk_error e = {0, ""};
    stk_shard *sh = stk_shard_open_memory(buf, len, NAME, &e);
    if (sh) stk_shard_close(sh);
    ck_assert_msg(sh == NULL, "opened, expected %s (%s)", stk_status_name(code), sub);
    tu_assert_error(&e, code, sub);
    ck_assert_msg(strncmp(e.msg, NAME ": ", strlen(NAME) + 2) == 0, "message does not name the file: %s",
                  e.msg);
    char dir[TU_PATH], path[TU_PATH];
    tu_scratch(dir, sizeof dir, "bad");
    tu_join(path, sizeof path, dir, NAME);
    tu_write(path, buf, len);
    sh = stk_shard_open(path, &e);
    if (sh) stk_shard_close(sh);
    ck_assert_msg(sh == NULL, "file opened, expected %s (%s)", stk_status_name(code), sub);
    tu_assert_error(&e, code, sub);
    ck_assert_msg(strncmp(e.msg, path, strlen(path)) == 0, "message does not name the file: %s", e.msg);
}

/* Problems reported by verify_records / verify_padding. */
typedef struct {
    int n;
    uint64_t record[8];
    int field[8], code[8];
    char what[200];
} problems;

static void collect(void *user, const stk_shard *sh, uint64_t record, int field, int code, const char *what)
{
    problems *p = user;
    (void)sh;
    if (p->n < 8) {
        p->record[p->n] = record;
        p->field[p->n] = field;
        p->code[p->n] = code;
    }
    snprintf(p->what, sizeof p->what, "%s", what);
    p->n++;
}

/* ------------------------------------------------ header fields, one by one */

#define DESC(f, field) (STK_HEADER_FIXED + (f)*STK_FIELD_DESC + (field))

enum { SET, ADD };

typedef struct {
    const char *what;
    unsigned off, width; /* bytes of the field */
    int mode;            /* SET: store val; ADD: add val to what is there */
    int64_t val;
    int code; /* STK_OK: the file must still open */
    const char *sub;
} header_case;

/* The standard shard: field 0 "image" u16[3,5], 1 "label" i32, 2 "text" bytes;
 * regions at 4096 (image), 8192 (label), 12288 (text offsets), 16384 (text
 * heap), checksum table at 20480. */
static const header_case CASES[] = {
    {"magic", H_MAGIC, 1, SET, 'X', STK_E_FORMAT, "not a stoker shard (bad magic)"},
    {"major 2", H_MAJOR, 2, SET, 2, STK_E_VERSION, "unsupported format version 2.0"},
    {"major 0", H_MAJOR, 2, SET, 0, STK_E_VERSION, "unsupported format version 0.0"},
    {"newer minor", H_MINOR, 2, SET, 1, STK_OK, ""},
    {"header_size +8", H_HEADER_SIZE, 4, ADD, 8, STK_E_FORMAT, "header size 464 does not fit 3 fields"},
    {"header_size 0", H_HEADER_SIZE, 4, SET, 0, STK_E_FORMAT, "header size 0 does not fit"},
    {"flags", H_FLAGS, 4, SET, 1, STK_E_UNSUPPORTED, "header flags 0x1 unknown"},
    {"flags high", H_FLAGS, 4, SET, 0x80000000, STK_E_UNSUPPORTED, "header flags 0x80000000"},
    {"nfields 0", H_NFIELDS, 4, SET, 0, STK_E_FORMAT, "header declares 0 fields (1 to 32 allowed)"},
    {"nfields 33", H_NFIELDS, 4, SET, 33, STK_E_FORMAT, "header declares 33 fields"},
    {"nfields 2", H_NFIELDS, 4, SET, 2, STK_E_FORMAT, "header size 456 does not fit 2 fields"},
    {"records +1", H_RECORDS, 8, ADD, 1, STK_E_FORMAT,
     "checksum table length 120 is not records x fields x 8"},
    {"records 0", H_RECORDS, 8, SET, 0, STK_E_FORMAT, "checksum table length"},
    {"records huge", H_RECORDS, 8, SET, INT64_MAX, STK_E_FORMAT, "checksum table length"},
    {"file_size +1", H_FILE_SIZE, 8, ADD, 1, STK_E_TRUNCATED,
     "truncated: file is 20632 bytes, header says 20633 (1 missing)"},
    {"file_size -1", H_FILE_SIZE, 8, ADD, -1, STK_E_FORMAT, "header says 20631 (1 extra)"},
    {"cksum_off +4096", H_CKSUM_OFF, 8, ADD, 4096, STK_E_FORMAT,
     "checksum table at 24576 (+120) and the footer do not end the file"},
    {"cksum_off +8", H_CKSUM_OFF, 8, ADD, 8, STK_E_FORMAT, "checksum table at 20488"},
    {"cksum_off -4096", H_CKSUM_OFF, 8, ADD, -4096, STK_E_FORMAT, "checksum table at 16384"},
    {"cksum_off 0", H_CKSUM_OFF, 8, SET, 0, STK_E_FORMAT, "checksum table at 0"},
    {"cksum_len +8", H_CKSUM_LEN, 8, ADD, 8, STK_E_FORMAT, "checksum table length 128"},
    {"alignment 3000", H_ALIGN, 4, SET, 3000, STK_E_FORMAT,
     "region alignment is not a power of two from 4096 to 2^30 (3000)"},
    {"alignment 2048", H_ALIGN, 4, SET, 2048, STK_E_FORMAT, "region alignment is not a power of two"},
    {"alignment 0", H_ALIGN, 4, SET, 0, STK_E_FORMAT, "region alignment is not a power of two"},
    {"alignment 2^31", H_ALIGN, 4, SET, 0x80000000, STK_E_FORMAT, "region alignment is not a power of two"},
    {"alignment 8192", H_ALIGN, 4, SET, 8192, STK_E_FORMAT, "checksum table at 20480"},
    {"checksum algo 2", H_ALGO, 4, SET, 2, STK_E_UNSUPPORTED, "checksum algorithm 2 unknown"},
    {"checksum algo 0", H_ALGO, 4, SET, 0, STK_E_UNSUPPORTED, "checksum algorithm 0 unknown"},

    {"name empty", DESC(0, D_NAME), 8, SET, 0, STK_E_FORMAT, "schema: field 0: invalid name"},
    {"name bad char", DESC(0, D_NAME + 2), 1, SET, ' ', STK_E_FORMAT, "field 0: invalid name"},
    {"name tail", DESC(0, D_NAME + 20), 1, SET, 'X', STK_E_FORMAT,
     "field 0: bytes after the name are not zero"},
    {"name last byte", DESC(2, D_NAME + 31), 1, SET, 'X', STK_E_FORMAT,
     "field 2: bytes after the name are not zero"},
    {"kind 4", DESC(1, D_KIND), 1, SET, 4, STK_E_UNSUPPORTED,
     "field 'label': kind 4 is not supported by this build"},
    {"tensor as array", DESC(1, D_KIND), 1, SET, STK_KIND_ARRAY, STK_E_FORMAT,
     "array field 'label' has no per-record dimension"},
    {"kind 0", DESC(1, D_KIND), 1, SET, 0, STK_E_UNSUPPORTED, "field 'label': kind 0 is not supported"},
    {"tensor as bytes", DESC(0, D_KIND), 1, SET, STK_KIND_BYTES, STK_E_FORMAT,
     "bytes field 'image' must have dtype u8 and no shape"},
    {"bytes as tensor", DESC(2, D_KIND), 1, SET, STK_KIND_TENSOR, STK_E_FORMAT,
     "field 'text': stride 8 does not match its shape (1)"},
    {"dtype 0", DESC(0, D_DTYPE), 1, SET, 0, STK_E_UNSUPPORTED,
     "field 'image': dtype 0 is not supported by this build"},
    {"dtype 13", DESC(1, D_DTYPE), 1, SET, 13, STK_E_UNSUPPORTED, "field 'label': dtype 13 is not supported"},
    {"dtype wider", DESC(0, D_DTYPE), 1, SET, STK_DT_F32, STK_E_FORMAT,
     "field 'image': stride 30 does not match its shape (60)"},
    {"dtype of bytes", DESC(2, D_DTYPE), 1, SET, STK_DT_I8, STK_E_FORMAT,
     "bytes field 'text' must have dtype u8"},
    {"codec", DESC(0, D_CODEC), 1, SET, 3, STK_E_UNSUPPORTED, "field 'image' uses codec 3"},
    {"codec jpeg on a tensor", DESC(0, D_CODEC), 1, SET, STK_CODEC_JPEG, STK_E_FORMAT,
     "codec jpeg needs an array field"},
    {"zstd in a 1.0 file", DESC(0, D_CODEC), 1, SET, 1, STK_E_FORMAT,
     "codec zstd needs format 1.1, the file says 1.0"},
    {"codec of bytes", DESC(2, D_CODEC), 1, SET, 200, STK_E_UNSUPPORTED, "field 'text' uses codec 200"},
    {"ndim 7", DESC(0, D_NDIM), 1, SET, 7, STK_E_FORMAT, "field 'image': 7 dimensions (at most 6)"},
    {"ndim 1", DESC(0, D_NDIM), 1, SET, 1, STK_E_FORMAT, "field 'image': shape entry 1 set beyond ndim"},
    {"ndim 3", DESC(0, D_NDIM), 1, SET, 3, STK_E_FORMAT, "field 'image': dimension 2 is 0"},
    {"ndim of scalar", DESC(1, D_NDIM), 1, SET, 1, STK_E_FORMAT, "field 'label': dimension 0 is 0"},
    {"ndim of bytes", DESC(2, D_NDIM), 1, SET, 1, STK_E_FORMAT,
     "bytes field 'text' must have dtype u8 and no shape"},
    {"reserved", DESC(1, D_RESERVED), 4, SET, 1, STK_E_FORMAT, "field 1: reserved bytes are not zero"},
    {"shape 0", DESC(0, D_SHAPE), 8, SET, 0, STK_E_FORMAT, "field 'image': dimension 0 is 0"},
    {"shape grown", DESC(0, D_SHAPE + 8), 8, SET, 6, STK_E_FORMAT,
     "field 'image': stride 30 does not match its shape (36)"},
    {"shape huge", DESC(0, D_SHAPE), 8, SET, 1ll << 40, STK_E_FORMAT, "field 'image': record size overflows"},
    {"shape of scalar", DESC(1, D_SHAPE + 40), 8, SET, 1, STK_E_FORMAT,
     "field 'label': shape entry 5 set beyond ndim"},
    {"shape of bytes", DESC(2, D_SHAPE), 8, SET, 4, STK_E_FORMAT, "bytes field 'text' has a shape"},
    {"stride +2", DESC(0, D_STRIDE), 8, ADD, 2, STK_E_FORMAT,
     "field 'image': stride 32 does not match its shape (30)"},
    {"stride 0", DESC(1, D_STRIDE), 8, SET, 0, STK_E_FORMAT,
     "field 'label': stride 0 does not match its shape (4)"},
    {"stride of bytes", DESC(2, D_STRIDE), 8, SET, 16, STK_E_FORMAT,
     "field 'text': offsets column is not (records + 1) x 8 bytes"},
    {"data_off +2", DESC(0, D_DATA_OFF), 8, ADD, 2, STK_E_FORMAT,
     "field 'image': data region [4098, +150) is misaligned or outside the data area"},
    {"data_off 0", DESC(0, D_DATA_OFF), 8, SET, 0, STK_E_FORMAT,
     "field 'image': data region [0, +150) is misaligned or outside"},
    {"data_off at table", DESC(1, D_DATA_OFF), 8, SET, 20480, STK_E_FORMAT,
     "field 'label': data region [20480, +20) is misaligned or outside"},
    {"data_off overlap", DESC(0, D_DATA_OFF), 8, SET, 8192, STK_E_FORMAT, "regions at 8192 and 8192 overlap"},
    {"data_off bytes", DESC(2, D_DATA_OFF), 8, ADD, 8, STK_E_FORMAT,
     "field 'text': data region [12296, +48) is misaligned"},
    {"data_len +1", DESC(0, D_DATA_LEN), 8, ADD, 1, STK_E_FORMAT,
     "field 'image': region length 151 is not records x stride"},
    {"data_len 0", DESC(1, D_DATA_LEN), 8, SET, 0, STK_E_FORMAT,
     "field 'label': region length 0 is not records x stride"},
    {"data_len bytes", DESC(2, D_DATA_LEN), 8, ADD, 8, STK_E_FORMAT,
     "field 'text': offsets column is not (records + 1) x 8 bytes"},
    {"heap_off of tensor", DESC(0, D_HEAP_OFF), 8, SET, 4096, STK_E_FORMAT,
     "field 'image': tensor field has a heap"},
    {"heap_len of tensor", DESC(1, D_HEAP_LEN), 8, SET, 1, STK_E_FORMAT,
     "field 'label': tensor field has a heap"},
    {"heap_off +1", DESC(2, D_HEAP_OFF), 8, ADD, 1, STK_E_FORMAT, "field 'text': heap region [16385, "},
    {"heap_off at table", DESC(2, D_HEAP_OFF), 8, ADD, 4096, STK_E_FORMAT,
     "field 'text': heap region [20480, "},
    {"heap_off overlap", DESC(2, D_HEAP_OFF), 8, SET, 12288, STK_E_FORMAT,
     "regions at 12288 and 12288 overlap"},
    {"heap_len +1", DESC(2, D_HEAP_LEN), 8, ADD, 1, STK_E_FORMAT,
     "field 'text': offsets column does not span the"},
    {"heap_len -1", DESC(2, D_HEAP_LEN), 8, ADD, -1, STK_E_FORMAT,
     "field 'text': offsets column does not span the"},
    {"heap_len past table", DESC(2, D_HEAP_LEN), 8, ADD, 4096, STK_E_FORMAT,
     "field 'text': heap region [16384, "},
};
#define NCASES (sizeof CASES / sizeof CASES[0])

static void apply(uint8_t *b, const header_case *c)
{
    uint64_t old = c->width == 1   ? b[c->off]
                   : c->width == 2 ? rd16(b + c->off)
                   : c->width == 4 ? rd32(b + c->off)
                                   : rd64(b + c->off);
    uint64_t v = c->mode == SET ? (uint64_t)c->val : old + (uint64_t)c->val;
    switch (c->width) {
    case 1:
        b[c->off] = (uint8_t)v;
        break;
    case 2:
        wr16(b + c->off, (uint16_t)v);
        break;
    case 4:
        wr32(b + c->off, (uint32_t)v);
        break;
    default:
        wr64(b + c->off, v);
        break;
    }
    ck_assert_msg(v != old, "%s: the corruption changes nothing", c->what);
}

/* The layout the table's expected messages were written for. */
static void check_base_layout(uint8_t *b, size_t len)
{
    layout L;
    read_layout(b, &L);
    ck_assert_uint_eq(len, 20632);
    ck_assert_uint_eq(L.hs, 456);
    ck_assert_uint_eq(L.data_off[0], 4096);
    ck_assert_uint_eq(L.data_off[1], 8192);
    ck_assert_uint_eq(L.data_off[2], 12288);
    ck_assert_uint_eq(L.heap_off[2], 16384);
    ck_assert_uint_eq(L.cksum_off, 20480);
}

START_TEST(header_fields_rehashed)
{
    size_t len;
    uint8_t *base = base_shard(&len);
    check_base_layout(base, len);
    uint32_t hs = tu_header_size(base);
    for (size_t i = 0; i < NCASES; i++) {
        const header_case *c = &CASES[i];
        uint8_t *b = tu_dup(base, len);
        apply(b, c);
        tu_rehash_header(b, hs);
        stk_error e = {0, ""};
        stk_shard *sh = stk_shard_open_memory(b, len, NAME, &e);
        if (c->code == STK_OK) {
            ck_assert_msg(sh != NULL, "%s: %s", c->what, e.msg);
            stk_shard_close(sh);
        } else {
            if (sh) stk_shard_close(sh);
            ck_assert_msg(sh == NULL, "%s: opened", c->what);
            ck_assert_msg(e.code == c->code, "%s: code %s, expected %s: %s", c->what, stk_status_name(e.code),
                          stk_status_name(c->code), e.msg);
            ck_assert_msg(strstr(e.msg, c->sub) != NULL, "%s: message \"%s\" lacks \"%s\"", c->what, e.msg,
                          c->sub);
            ck_assert_msg(strncmp(e.msg, NAME ": ", strlen(NAME) + 2) == 0, "%s: unnamed: %s", c->what,
                          e.msg);
        }
        free(b);
    }
    free(base);
}
END_TEST

/* Checked before the header checksum (they say how to read the rest). */
static bool before_checksum(unsigned off)
{
    return off < H_FLAGS || (off >= H_NFIELDS && off < H_NFIELDS + 4);
}

/* The same corruptions without re-hashing: the header checksum catches every
 * one that the structural checks before it do not. */
START_TEST(header_fields_not_rehashed)
{
    size_t len;
    uint8_t *base = base_shard(&len);
    int n = 0;
    for (size_t i = 0; i < NCASES; i++) {
        const header_case *c = &CASES[i];
        if (before_checksum(c->off) && c->off != H_MINOR) continue;
        uint8_t *b = tu_dup(base, len);
        apply(b, c);
        expect_open_fails(b, len, STK_E_CHECKSUM, "header checksum mismatch (stored ");
        free(b);
        n++;
    }
    ck_assert_int_ge(n, 60);
    /* And damage to the stored checksum itself. */
    uint32_t hs = tu_header_size(base);
    base[hs - 1] ^= 0x40;
    expect_open_fails(base, len, STK_E_CHECKSUM, "header checksum mismatch");
    free(base);
}
END_TEST

/* The version check also holds through the file path, and does not depend
 * on the rest of the header being readable. */
START_TEST(version_from_file)
{
    char dir[TU_PATH], path[TU_PATH];
    stk_error e;
    size_t len;
    uint8_t *b = base_shard(&len);
    tu_scratch(dir, sizeof dir, "version");
    tu_join(path, sizeof path, dir, "v2.stk");
    wr16(b + H_MAJOR, 2);
    wr16(b + H_MINOR, 7);
    memset(b + H_NFIELDS, 0xff, 4); /* a v2 header may say anything after the version */
    tu_write(path, b, len);
    ck_assert_ptr_null(stk_shard_open(path, &e));
    tu_assert_error(&e, STK_E_VERSION, "unsupported format version 2.7 (this build reads 1.x, up to 1.2)");
    ck_assert_ptr_nonnull(strstr(e.msg, "v2.stk"));
    free(b);
}
END_TEST

/* A later minor version may grow the header (up to the 1 MiB cap); this
 * build reads the fields it knows. A current-minor file must match exactly. */
START_TEST(newer_minor_larger_header)
{
    size_t len;
    uint8_t *base = base_shard(&len);
    uint8_t *b = tu_dup(base, len);
    uint32_t hs = tu_header_size(b);
    wr16(b + H_MINOR, 3);
    wr32(b + H_HEADER_SIZE, hs + 16);
    memset(b + hs - 8, 0, 8); /* old hash slot becomes extension bytes */
    tu_rehash_header(b, hs + 16);
    stk_error e;
    stk_shard *sh = stk_shard_open_memory(b, len, NAME, &e);
    ck_assert_msg(sh != NULL, "%s", e.msg);
    unsigned major, minor;
    stk_shard_version(sh, &major, &minor);
    ck_assert_uint_eq(major, 1);
    ck_assert_uint_eq(minor, 3);
    tu_check_std_shard(sh, 9, 0);
    stk_shard_close(sh);

    wr32(b + H_HEADER_SIZE, hs + 12); /* not a multiple of 8 */
    expect_open_fails(b, len, STK_E_FORMAT, "header size 468 does not fit 3 fields");
    wr32(b + H_HEADER_SIZE, hs - 8); /* smaller than the fields need */
    expect_open_fails(b, len, STK_E_FORMAT, "header size 448 does not fit");
    wr32(b + H_HEADER_SIZE, 2u << 20); /* over the cap */
    expect_open_fails(b, len, STK_E_FORMAT, "does not fit");
    free(b);
    free(base);
}
END_TEST

/* A later minor version's header longer than what stk_shard_open reads
 * first (8 KiB): every region moved 16 KiB on to make room, the header
 * grown to 12 KiB. Opened from a file (the open reads the header again
 * through the map) and from memory, it reads the same records. */
START_TEST(newer_minor_header_past_first_read)
{
    size_t len;
    uint8_t *base = base_shard(&len);
    layout L;
    read_layout(base, &L);
    const uint64_t delta = 16384;
    const uint32_t hs = 12288;
    ck_assert_uint_eq(delta % rd32(base + H_ALIGN), 0);
    uint8_t *b = calloc(1, len + delta);
    ck_assert_ptr_nonnull(b);
    memcpy(b, base, L.hs - 8); /* the header but its hash; the rest of it is zero extension */
    memcpy(b + L.hs + delta, base + L.hs, len - L.hs);
    wr16(b + H_MINOR, 3);
    wr32(b + H_HEADER_SIZE, hs);
    wr64(b + H_FILE_SIZE, L.file_size + delta);
    wr64(b + H_CKSUM_OFF, L.cksum_off + delta);
    for (unsigned f = 0; f < L.nf; f++) {
        wr64(tu_desc(b, f) + D_DATA_OFF, L.data_off[f] + delta);
        if (L.heap_off[f]) wr64(tu_desc(b, f) + D_HEAP_OFF, L.heap_off[f] + delta);
    }
    wr64(b + len + delta - STK_FOOTER_SIZE + F_FILE_SIZE, L.file_size + delta);
    tu_rehash_header(b, hs);
    char dir[TU_PATH], path[TU_PATH];
    tu_scratch(dir, sizeof dir, "grown");
    tu_join(path, sizeof path, dir, NAME);
    tu_write(path, b, len + delta);
    stk_error e;
    for (int from_file = 0; from_file < 2; from_file++) {
        stk_shard *sh =
            from_file ? stk_shard_open(path, &e) : stk_shard_open_memory(b, len + delta, NAME, &e);
        ck_assert_msg(sh != NULL, "%s", e.msg);
        unsigned major, minor;
        stk_shard_version(sh, &major, &minor);
        ck_assert_uint_eq(minor, 3);
        tu_check_std_shard(sh, 9, 0);
        ck_assert_uint_eq(stk_shard_verify_padding(sh, NULL, NULL), 0);
        stk_shard_close(sh);
    }
    free(b);
    free(base);
}
END_TEST

/* Names: every byte non-zero, and a name that repeats another's. */
START_TEST(header_names)
{
    size_t len;
    uint8_t *b = base_shard(&len);
    uint32_t hs = tu_header_size(b);
    uint8_t *copy = tu_dup(b, len);
    memset(tu_desc(copy, 1) + D_NAME, 'a', STK_NAME_MAX);
    tu_rehash_header(copy, hs);
    expect_open_fails(copy, len, STK_E_FORMAT, "field 1: name is not NUL-terminated");
    free(copy);

    copy = tu_dup(b, len);
    memcpy(tu_desc(copy, 1) + D_NAME, "image", 6);
    tu_rehash_header(copy, hs);
    expect_open_fails(copy, len, STK_E_FORMAT, "field name 'image' repeated");
    free(copy);
    free(b);
}
END_TEST

/* ------------------------------------------------------------- footer */

START_TEST(footer_damage)
{
    size_t len;
    uint8_t *b = base_shard(&len);
    uint8_t *foot = b + len - STK_FOOTER_SIZE;

    foot[F_MAGIC + 7] = '2';
    expect_open_fails(b, len, STK_E_FORMAT, "footer magic missing at offset 20600");
    foot[F_MAGIC + 7] = '1';

    wr64(foot + F_FILE_SIZE, len + 1);
    expect_open_fails(b, len, STK_E_FORMAT, "footer file size 20633 disagrees with the header's 20632");
    wr64(foot + F_FILE_SIZE, len);

    foot[F_RESERVED + 3] = 1;
    expect_open_fails(b, len, STK_E_FORMAT, "footer reserved bytes are not zero");
    foot[F_RESERVED + 3] = 0;

    /* The index hash is only read at open; verify_index recomputes it. */
    uint64_t good = rd64(foot + F_INDEX_HASH);
    wr64(foot + F_INDEX_HASH, good ^ 0x100);
    stk_error e;
    stk_shard *sh = stk_shard_open_memory(b, len, NAME, &e);
    ck_assert_ptr_nonnull(sh);
    ck_assert_uint_eq(stk_shard_index_hash(sh), good ^ 0x100);
    ck_assert_int_eq(stk_shard_verify_index(sh, 0, &e), STK_E_CHECKSUM);
    tu_assert_error(&e, STK_E_CHECKSUM, NAME ": checksum table corrupt: footer hash");
    stk_shard_close(sh);
    free(b);
}
END_TEST

/* The ends of an offsets column bound its heap: checked at open. Inner
 * entries are checked when a value is read. */
START_TEST(offsets_column)
{
    size_t len;
    uint8_t *b = base_shard(&len);
    layout L;
    read_layout(b, &L);
    uint8_t *col = b + L.data_off[TU_TEXT];
    uint64_t first = rd64(col), last = rd64(col + 8 * NREC), mid = rd64(col + 16);

    wr64(col, 1);
    expect_open_fails(b, len, STK_E_FORMAT, "field 'text': offsets column does not span the");
    wr64(col, first);
    wr64(col + 8 * NREC, last - 1);
    expect_open_fails(b, len, STK_E_FORMAT, "(first 0, last ");
    wr64(col + 8 * NREC, last);

    wr64(col + 16, UINT64_MAX - 3); /* end of record 1, start of record 2 */
    stk_error e;
    stk_shard *sh = stk_shard_open_memory(b, len, NAME, &e);
    ck_assert_ptr_nonnull(sh);
    const void *p;
    uint64_t n;
    ck_assert_int_eq(stk_shard_value(sh, TU_TEXT, 1, &p, &n, &e), STK_E_FORMAT);
    tu_assert_error(&e, STK_E_FORMAT, "record 1, field 'text': offsets [");
    ck_assert_int_eq(stk_shard_value(sh, TU_TEXT, 2, &p, &n, &e), STK_E_FORMAT);
    tu_assert_error(&e, STK_E_FORMAT, "not an increasing range inside the");
    ck_assert_int_eq(stk_shard_value(sh, TU_TEXT, 0, &p, &n, &e), STK_OK);
    ck_assert_int_eq(stk_shard_value(sh, TU_TEXT, 3, &p, &n, &e), STK_OK);
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, NREC, NULL, NULL), 2);
    stk_shard_close(sh);
    wr64(col + 16, mid);
    free(b);
}
END_TEST

/* Padding problems are counted per gap: its first non-zero byte. */
START_TEST(padding_per_gap)
{
    size_t len;
    uint8_t *b = base_shard(&len);
    layout L;
    read_layout(b, &L);
    b[L.hs + 10] = 1; /* gap after the header, twice */
    b[L.hs + 900] = 2;
    b[L.data_off[TU_LABEL] - 1] = 3; /* end of the gap after "image" */
    b[L.cksum_off - 1] = 4;          /* end of the gap after the heap */
    stk_error e;
    stk_shard *sh = stk_shard_open_memory(b, len, NAME, &e);
    ck_assert_ptr_nonnull(sh);
    problems p;
    memset(&p, 0, sizeof p);
    ck_assert_uint_eq(stk_shard_verify_padding(sh, collect, &p), 3);
    ck_assert_int_eq(p.n, 3);
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(p.code[k], STK_E_FORMAT);
        ck_assert_uint_eq(p.record[k], UINT64_MAX);
        ck_assert_int_eq(p.field[k], -1);
    }
    char want[64];
    snprintf(want, sizeof want, "at offset %llu ", (unsigned long long)(L.cksum_off - 1));
    ck_assert_msg(strstr(p.what, want) != NULL, "%s", p.what);
    /* Nothing else notices padding. */
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, NREC, NULL, NULL), 0);
    ck_assert_int_eq(stk_shard_verify_index(sh, 0, &e), STK_OK);
    stk_shard_close(sh);
    free(b);
}
END_TEST

/* ------------------------------------------------------------ truncation */

/* Every shorter length, from memory: each copy is exactly that long, so a
 * read past the end is an ASan error rather than a silent success. */
START_TEST(truncated_memory_every_length)
{
    size_t len;
    uint8_t *b = base_shard(&len);
    uint32_t hs = tu_header_size(b);
    for (size_t n = 0; n < len; n++) {
        uint8_t *t = tu_dup(b, n);
        stk_error e = {0, ""};
        stk_shard *sh = stk_shard_open_memory(t, n, NAME, &e);
        ck_assert_msg(sh == NULL, "opened at length %zu", n);
        ck_assert_msg(e.code == STK_E_TRUNCATED || e.code == STK_E_FORMAT, "length %zu: %s", n, e.msg);
        ck_assert_msg(strncmp(e.msg, NAME ": ", strlen(NAME) + 2) == 0, "length %zu: %s", n, e.msg);
        if (n >= hs) {
            char want[64];
            snprintf(want, sizeof want, "(%zu missing)", len - n);
            ck_assert_msg(strstr(e.msg, want) != NULL, "length %zu: %s", n, e.msg);
        }
        free(t);
    }
    free(b);
}
END_TEST

/* Through the file path: every length inside the header, every region
 * boundary and its neighbours, and a dense sample of the rest. */
START_TEST(truncated_file_sampled)
{
    char dir[TU_PATH], path[TU_PATH];
    size_t len;
    uint8_t *b = base_shard(&len);
    layout L;
    read_layout(b, &L);
    tu_scratch(dir, sizeof dir, "truncated");
    tu_join(path, sizeof path, dir, "t.stk");

    uint64_t marks[4 * STK_MAX_FIELDS + 8];
    unsigned nm = 0;
    for (unsigned f = 0; f < L.nf; f++) {
        marks[nm++] = L.data_off[f];
        marks[nm++] = L.data_off[f] + L.data_len[f];
        marks[nm++] = L.heap_off[f];
        marks[nm++] = L.heap_off[f] + L.heap_len[f];
    }
    marks[nm++] = L.hs;
    marks[nm++] = L.cksum_off;
    marks[nm++] = L.cksum_off + L.cksum_len;
    marks[nm++] = len - 1;

    int tried = 0;
    for (size_t n = 0; n < len; n++) {
        bool pick = n <= (size_t)L.hs + 8 || n % 61 == 0;
        for (unsigned k = 0; k < nm && !pick; k++) pick = n + 1 >= marks[k] && n <= marks[k] + 1;
        if (!pick) continue;
        tu_write(path, b, n);
        stk_error e = {0, ""};
        stk_shard *sh = stk_shard_open(path, &e);
        ck_assert_msg(sh == NULL, "opened at length %zu", n);
        ck_assert_msg(e.code == STK_E_TRUNCATED || e.code == STK_E_FORMAT, "length %zu: %s", n, e.msg);
        ck_assert_msg(strstr(e.msg, path) != NULL, "length %zu: %s", n, e.msg);
        tried++;
    }
    ck_assert_int_gt(tried, 700);
    free(b);
}
END_TEST

/* ----------------------------------------------------- single-byte flips */

/* The shard is open and the flip at `off` must show up as exactly the
 * record problems in want (n of them, in report order) and nothing else
 * besides what index_bad and pad_bad say. */
static void expect_detected(const stk_shard *sh, size_t off, bool index_bad, bool pad_bad, int nwant,
                            const uint64_t *rec, int field)
{
    stk_error e = {0, ""};
    int rc = stk_shard_verify_index(sh, 0, &e);
    ck_assert_msg((rc == STK_E_CHECKSUM) == index_bad, "offset %zu: verify_index gave %d (%s)", off, rc,
                  e.msg);
    ck_assert_msg(rc == STK_OK || rc == STK_E_CHECKSUM, "offset %zu: %s", off, e.msg);

    problems p;
    memset(&p, 0, sizeof p);
    uint64_t n = stk_shard_verify_records(sh, 0, NREC, collect, &p);
    ck_assert_msg(n == (uint64_t)p.n && p.n == nwant, "offset %zu: %d record problems, expected %d (%s)", off,
                  p.n, nwant, p.what);
    for (int k = 0; k < nwant; k++) {
        ck_assert_msg(p.record[k] == rec[k] && p.field[k] == field,
                      "offset %zu: problem at record %llu field %d, expected record %llu field %d", off,
                      (unsigned long long)p.record[k], p.field[k], (unsigned long long)rec[k], field);
        ck_assert_msg(p.code[k] == STK_E_CHECKSUM || p.code[k] == STK_E_FORMAT, "offset %zu: code %d", off,
                      p.code[k]);
    }

    memset(&p, 0, sizeof p);
    n = stk_shard_verify_padding(sh, collect, &p);
    ck_assert_msg((n == 1) == pad_bad && n <= 1, "offset %zu: %llu padding problems", off,
                  (unsigned long long)n);
    if (pad_bad) {
        char want[48];
        snprintf(want, sizeof want, "nonzero padding byte at offset %zu ", off);
        ck_assert_msg(strstr(p.what, want) != NULL, "offset %zu: %s", off, p.what);
        ck_assert_uint_eq(p.record[0], UINT64_MAX);
        ck_assert_int_eq(p.field[0], -1);
    }
}

static bool in(uint64_t off, uint64_t start, uint64_t len) { return off >= start && off - start < len; }

/* Check one flipped copy: classify the byte from the layout, then demand
 * the matching detection. */
static void check_flip(const uint8_t *b, size_t len, const layout *L, size_t off)
{
    stk_error e = {0, ""};
    stk_shard *sh = stk_shard_open_memory(b, len, NAME, &e);

    /* Header: refused at open, by the first check the byte feeds. */
    if (off < L->hs) {
        int code = STK_E_CHECKSUM;
        const char *sub = "header checksum mismatch";
        if (off < H_MAJOR) code = STK_E_FORMAT, sub = "bad magic";
        else if (off < H_MINOR) code = STK_E_VERSION, sub = "unsupported format version";
        else if (in(off, H_HEADER_SIZE, 4) || in(off, H_NFIELDS, 4)) code = STK_E_FORMAT, sub = "fields";
        ck_assert_msg(sh == NULL, "offset %zu (header): opened", off);
        ck_assert_msg(e.code == code && strstr(e.msg, sub), "offset %zu: got %s, expected %s \"%s\"", off,
                      e.msg, stk_status_name(code), sub);
        return;
    }
    /* Footer: the index hash is checked by verify_index, the rest at open. */
    uint64_t foot = L->file_size - STK_FOOTER_SIZE;
    if (off >= foot) {
        uint64_t rel = off - foot;
        if (rel < F_FILE_SIZE) {
            ck_assert_msg(sh != NULL, "offset %zu: %s", off, e.msg);
            expect_detected(sh, off, true, false, 0, NULL, -1);
            stk_shard_close(sh);
            return;
        }
        const char *sub = rel < F_RESERVED ? "footer file size"
                          : rel < F_MAGIC  ? "footer reserved"
                                           : "footer magic";
        ck_assert_msg(sh == NULL && e.code == STK_E_FORMAT && strstr(e.msg, sub),
                      "offset %zu: got \"%s\", expected %s", off, sh ? "(opened)" : e.msg, sub);
        return;
    }
    /* First and last entries of an offsets column: refused at open. */
    for (unsigned f = 0; f < L->nf; f++) {
        if (L->kind[f] != STK_KIND_BYTES || !in(off, L->data_off[f], L->data_len[f])) continue;
        uint64_t k = (off - L->data_off[f]) / 8;
        if (k == 0 || k == L->records) {
            ck_assert_msg(sh == NULL && e.code == STK_E_FORMAT &&
                              strstr(e.msg, "offsets column does not span"),
                          "offset %zu: got \"%s\"", off, sh ? "(opened)" : e.msg);
            return;
        }
    }
    ck_assert_msg(sh != NULL, "offset %zu: %s", off, e.msg);

    uint64_t rec[2];
    if (in(off, L->cksum_off, L->cksum_len)) { /* one stored hash: the index and its record */
        uint64_t k = (off - L->cksum_off) / 8;
        rec[0] = k / L->nf;
        expect_detected(sh, off, true, false, 1, rec, (int)(k % L->nf));
        stk_shard_close(sh);
        return;
    }
    for (unsigned f = 0; f < L->nf; f++) {
        if (in(off, L->data_off[f], L->data_len[f])) {
            if (L->kind[f] == STK_KIND_TENSOR) {
                rec[0] = (off - L->data_off[f]) / L->stride[f];
                expect_detected(sh, off, false, false, 1, rec, (int)f);
            } else { /* entry k ends record k-1 and starts record k */
                uint64_t k = (off - L->data_off[f]) / 8;
                rec[0] = k - 1, rec[1] = k;
                expect_detected(sh, off, false, false, 2, rec, (int)f);
            }
            stk_shard_close(sh);
            return;
        }
        if (L->kind[f] == STK_KIND_BYTES && in(off, L->heap_off[f], L->heap_len[f])) {
            const uint8_t *col = b + L->data_off[f];
            uint64_t pos = off - L->heap_off[f], r = 0;
            while (!(rd64(col + 8 * r) <= pos && pos < rd64(col + 8 * (r + 1)))) r++;
            rec[0] = r;
            expect_detected(sh, off, false, false, 1, rec, (int)f);
            stk_shard_close(sh);
            return;
        }
    }
    /* Anywhere else is alignment padding, which must be zero. */
    expect_detected(sh, off, false, true, 0, NULL, -1);
    stk_shard_close(sh);
}

START_TEST(flip_every_byte)
{
    size_t len;
    uint8_t *b = base_shard(&len);
    layout L;
    read_layout(b, &L);
    ck_assert_uint_eq(L.records, NREC);
    ck_assert_uint_lt(len, 64 * 1024);
    for (size_t off = 0; off < len; off++) {
        /* A different bit at each offset, so every bit position is covered. */
        uint8_t mask = (uint8_t)(1u << (off % 8));
        b[off] ^= mask;
        check_flip(b, len, &L, off);
        b[off] ^= mask;
    }
    /* Restored: clean again. */
    stk_error e;
    stk_shard *sh = stk_shard_open_memory(b, len, NAME, &e);
    ck_assert_ptr_nonnull(sh);
    ck_assert_uint_eq(stk_shard_verify_records(sh, 0, NREC, NULL, NULL), 0);
    ck_assert_uint_eq(stk_shard_verify_padding(sh, NULL, NULL), 0);
    stk_shard_close(sh);
    free(b);
}
END_TEST

TU_MAIN("corrupt",
        {.name = "header",
         .tests = {header_fields_rehashed, header_fields_not_rehashed, version_from_file,
                   newer_minor_larger_header, newer_minor_header_past_first_read, header_names}},
        {.name = "footer_and_offsets", .tests = {footer_damage, offsets_column, padding_per_gap}},
        {.name = "truncation", .tests = {truncated_memory_every_length, truncated_file_sampled}},
        {.name = "flips", .tests = {flip_every_byte}})
