/* format/layout.c - the shard header: decode + validate, encode, and the
 * canonical placement of regions. Pure functions over bytes (no I/O), so the
 * fuzzer reaches every check. The byte layout is spec/FORMAT.md, "Header". */
#include "internal.h"

#include <stdio.h>

/* A header larger than this is refused before it is hashed. */
#define STK_HEADER_MAX (1u << 20)

static int bad(stk_error *err, const char *name, const char *what, unsigned long long a)
{
    return stk_error_set(err, STK_E_FORMAT, "%s: %s (%llu)", name, what, a);
}

static int decode_fixed(const uint8_t *b, size_t len, uint64_t file_size, const char *name, stk__layout *L,
                        stk_error *err)
{
    if (file_size < STK_HEADER_FIXED || len < STK_HEADER_FIXED)
        return stk_error_set(err, STK_E_TRUNCATED,
                             "%s: file is %llu bytes, shorter than the %u-byte shard header", name,
                             (unsigned long long)file_size, STK_HEADER_FIXED);
    if (memcmp(b + H_MAGIC, STK_SHARD_MAGIC, 8) != 0)
        return stk_error_set(err, STK_E_FORMAT, "%s: not a stoker shard (bad magic)", name);
    L->major = rd16(b + H_MAJOR);
    L->minor = rd16(b + H_MINOR);
    if (L->major != STK_FORMAT_MAJOR)
        return stk_error_set(err, STK_E_VERSION,
                             "%s: unsupported format version %u.%u (this build reads %d.x, up to %d.%d)",
                             name, L->major, L->minor, STK_FORMAT_MAJOR, STK_FORMAT_MAJOR, STK_FORMAT_MINOR);
    uint32_t nf = rd32(b + H_NFIELDS);
    if (nf == 0 || nf > STK_MAX_FIELDS)
        return stk_error_set(err, STK_E_FORMAT, "%s: header declares %u fields (1 to %d allowed)", name, nf,
                             STK_MAX_FIELDS);
    L->header_size = rd32(b + H_HEADER_SIZE);
    uint64_t want = stk__header_size(nf);
    /* A later minor version may grow the header; this one must match exactly. */
    bool exact = L->minor <= STK_FORMAT_MINOR;
    if ((exact && L->header_size != want) || L->header_size < want || L->header_size % 8 ||
        L->header_size > STK_HEADER_MAX)
        return stk_error_set(err, STK_E_FORMAT, "%s: header size %u does not fit %u fields (expected %llu)",
                             name, L->header_size, nf, (unsigned long long)want);
    if (file_size < L->header_size || len < L->header_size)
        return stk_error_set(err, STK_E_TRUNCATED, "%s: file is %llu bytes, shorter than its %u-byte header",
                             name, (unsigned long long)file_size, L->header_size);
    uint64_t stored = rd64(b + L->header_size - 8);
    uint64_t got = stk_hash(b, L->header_size - 8);
    if (stored != got)
        return stk_error_set(err, STK_E_CHECKSUM,
                             "%s: header checksum mismatch (stored %016llx, computed %016llx)", name,
                             (unsigned long long)stored, (unsigned long long)got);
    uint32_t flags = rd32(b + H_FLAGS);
    if (flags)
        return stk_error_set(err, STK_E_UNSUPPORTED, "%s: header flags 0x%x unknown to this build", name,
                             flags);
    L->schema.nfields = nf;
    L->records = rd64(b + H_RECORDS);
    L->file_size = rd64(b + H_FILE_SIZE);
    L->cksum_off = rd64(b + H_CKSUM_OFF);
    L->cksum_len = rd64(b + H_CKSUM_LEN);
    L->alignment = rd32(b + H_ALIGN);
    if (L->alignment < STK_ALIGN || L->alignment > STK_ALIGN_MAX || (L->alignment & (L->alignment - 1)))
        return bad(err, name, "region alignment is not a power of two from 4096 to 2^30", L->alignment);
    if (rd32(b + H_ALGO) != STK_HASH_XXH3_64)
        return stk_error_set(err, STK_E_UNSUPPORTED, "%s: checksum algorithm %u unknown to this build", name,
                             rd32(b + H_ALGO));
    if (L->file_size != file_size) {
        if (file_size < L->file_size)
            return stk_error_set(err, STK_E_TRUNCATED,
                                 "%s: truncated: file is %llu bytes, header says %llu (%llu missing)", name,
                                 (unsigned long long)file_size, (unsigned long long)L->file_size,
                                 (unsigned long long)(L->file_size - file_size));
        return stk_error_set(err, STK_E_FORMAT, "%s: file is %llu bytes, header says %llu (%llu extra)", name,
                             (unsigned long long)file_size, (unsigned long long)L->file_size,
                             (unsigned long long)(file_size - L->file_size));
    }
    return STK_OK;
}

static int decode_field(const uint8_t *d, unsigned i, const char *name, stk__layout *L, stk_error *err)
{
    stk_field *f = &L->schema.fields[i];
    stk__region *r = &L->region[i];
    memset(f, 0, sizeof *f);
    if (memchr(d + D_NAME, 0, STK_NAME_MAX) == NULL)
        return stk_error_set(err, STK_E_FORMAT, "%s: field %u: name is not NUL-terminated", name, i);
    memcpy(f->name, d + D_NAME, STK_NAME_MAX);
    size_t nl = strlen(f->name);
    for (size_t k = nl; k < STK_NAME_MAX; k++)
        if (d[D_NAME + k])
            return stk_error_set(err, STK_E_FORMAT, "%s: field %u: bytes after the name are not zero", name,
                                 i);
    f->kind = d[D_KIND];
    f->dtype = d[D_DTYPE];
    f->codec = d[D_CODEC];
    f->ndim = d[D_NDIM];
    if (rd32(d + D_RESERVED))
        return stk_error_set(err, STK_E_FORMAT, "%s: field %u: reserved bytes are not zero", name, i);
    for (unsigned k = 0; k < STK_MAX_DIMS; k++) f->shape[k] = rd64(d + D_SHAPE + 8 * k);
    r->stride = rd64(d + D_STRIDE);
    r->data_off = rd64(d + D_DATA_OFF);
    r->data_len = rd64(d + D_DATA_LEN);
    r->heap_off = rd64(d + D_HEAP_OFF);
    r->heap_len = rd64(d + D_HEAP_LEN);
    return STK_OK;
}

/* Region [off, off+len) must be aligned, after the header and before the
 * checksum table. */
static int check_region(const stk__layout *L, uint64_t off, uint64_t len, const char *name, const char *field,
                        const char *what, stk_error *err)
{
    uint64_t end;
    if (off % L->alignment || off < L->header_size || !add_ok(off, len, &end) || end > L->cksum_off)
        return stk_error_set(err, STK_E_FORMAT,
                             "%s: field '%s': %s region [%llu, +%llu) is misaligned or outside the data area",
                             name, field, what, (unsigned long long)off, (unsigned long long)len);
    return STK_OK;
}

/* A compressed field: stride as uncompressed, a data region that holds the
 * offsets column (bytes fields) and a block table of whole entries, frames in
 * the heap. The table's contents are checked at open (shard.c), where the
 * mapped bytes are at hand. */
static int check_compressed(const stk__layout *L, const stk_field *f, const stk__region *r, const char *name,
                            stk_error *err)
{
    if (L->minor < 1)
        return stk_error_set(err, STK_E_FORMAT,
                             "%s: field '%s': codec zstd needs format 1.1, the file says %u.%u", name,
                             f->name, L->major, L->minor);
    uint64_t stride = f->kind == STK_KIND_TENSOR ? stk_field_stride(f) : 8, base = 0, min;
    if (r->stride != stride)
        return stk_error_set(err, STK_E_FORMAT, "%s: field '%s': stride %llu, expected %llu", name, f->name,
                             (unsigned long long)r->stride, (unsigned long long)stride);
    if (!stk__columns_len(f, L->records, &base) || !add_ok(base, 8 + 16, &min))
        return stk_error_set(err, STK_E_FORMAT, "%s: field '%s': offsets column overflows", name, f->name);
    if (r->data_len < min || (r->data_len - base - 8) % 16)
        return stk_error_set(err, STK_E_FORMAT,
                             "%s: field '%s': compressed data region of %llu bytes does not hold "
                             "%sa block table",
                             name, f->name, (unsigned long long)r->data_len,
                             stk__field_has_heap(f) ? "the offsets column and " : "");
    return check_region(L, r->heap_off, r->heap_len, name, f->name, "frames", err);
}

static int check_fields(const stk__layout *L, const char *name, stk_error *err)
{
    int rc = stk_schema_validate(&L->schema, err);
    if (rc) {
        /* Prefix the file name: schema messages do not know it. A feature of
         * a newer minor version says which version it needs. */
        char tmp[STK_ERROR_MSG_MAX];
        snprintf(tmp, sizeof tmp, "%s", err ? err->msg : "");
        if (rc == STK_E_UNSUPPORTED && L->minor > STK_FORMAT_MINOR)
            return stk_error_set(err, rc, "%s: %s (the file is format %u.%u; this build reads up to %d.%d)",
                                 name, tmp, L->major, L->minor, STK_FORMAT_MAJOR, STK_FORMAT_MINOR);
        return stk_error_set(err, rc, "%s: %s", name, tmp);
    }
    if (stk__schema_minor(&L->schema) == 2 && L->minor < 2)
        return stk_error_set(err, STK_E_FORMAT,
                             "%s: array fields and JPEG values need format 1.2, the file says %u.%u", name,
                             L->major, L->minor);
    for (uint32_t i = 0; i < L->schema.nfields; i++) {
        const stk_field *f = &L->schema.fields[i];
        const stk__region *r = &L->region[i];
        uint64_t want_len;
        if (stk__field_compressed(f)) {
            if ((rc = check_compressed(L, f, r, name, err))) return rc;
        } else if (f->kind == STK_KIND_TENSOR) {
            if (r->stride != stk_field_stride(f))
                return stk_error_set(
                    err, STK_E_FORMAT, "%s: field '%s': stride %llu does not match its shape (%llu)", name,
                    f->name, (unsigned long long)r->stride, (unsigned long long)stk_field_stride(f));
            if (!mul_ok(L->records, r->stride, &want_len) || r->data_len != want_len)
                return stk_error_set(err, STK_E_FORMAT,
                                     "%s: field '%s': region length %llu is not records x stride", name,
                                     f->name, (unsigned long long)r->data_len);
            if (r->heap_off || r->heap_len)
                return stk_error_set(err, STK_E_FORMAT, "%s: field '%s': tensor field has a heap", name,
                                     f->name);
        } else {
            if (r->stride != 8 || !stk__columns_len(f, L->records, &want_len) || r->data_len != want_len)
                return stk_error_set(
                    err, STK_E_FORMAT,
                    f->kind == STK_KIND_ARRAY
                        ? "%s: field '%s': columns are not (records + 1) x 8 bytes of offsets "
                          "and records x dims x 8 of shapes"
                        : "%s: field '%s': offsets column is not (records + 1) x 8 bytes",
                    name, f->name);
            if ((rc = check_region(L, r->heap_off, r->heap_len, name, f->name, "heap", err))) return rc;
        }
        if ((rc = check_region(L, r->data_off, r->data_len, name, f->name, "data", err))) return rc;
    }
    return STK_OK;
}

/* No two regions may share a byte (empty regions share nothing). */
static int check_overlaps(const stk__layout *L, const char *name, stk_error *err)
{
    uint64_t off[2 * STK_MAX_FIELDS], len[2 * STK_MAX_FIELDS];
    unsigned n = 0;
    for (uint32_t i = 0; i < L->schema.nfields; i++) {
        off[n] = L->region[i].data_off, len[n++] = L->region[i].data_len;
        if (stk__field_has_heap(&L->schema.fields[i]) || stk__field_compressed(&L->schema.fields[i]))
            off[n] = L->region[i].heap_off, len[n++] = L->region[i].heap_len;
    }
    for (unsigned a = 0; a < n; a++)
        for (unsigned b = a + 1; b < n; b++)
            if (len[a] && len[b] && off[a] < off[b] + len[b] && off[b] < off[a] + len[a])
                return stk_error_set(err, STK_E_FORMAT, "%s: regions at %llu and %llu overlap", name,
                                     (unsigned long long)off[a], (unsigned long long)off[b]);
    return STK_OK;
}

int stk__layout_decode(const uint8_t *b, size_t len, uint64_t file_size, const char *name, stk__layout *L,
                       stk_error *err)
{
    memset(L, 0, sizeof *L);
    int rc = decode_fixed(b, len, file_size, name, L, err);
    if (rc) return rc;
    for (uint32_t i = 0; i < L->schema.nfields; i++)
        if ((rc = decode_field(b + STK_HEADER_FIXED + (size_t)i * STK_FIELD_DESC, i, name, L, err)))
            return rc;
    uint64_t want, end;
    if (!mul_ok(L->records, L->schema.nfields, &want) || !mul_ok(want, 8, &want) || L->cksum_len != want)
        return stk_error_set(err, STK_E_FORMAT, "%s: checksum table length %llu is not records x fields x 8",
                             name, (unsigned long long)L->cksum_len);
    if (L->cksum_off % L->alignment || L->cksum_off < L->header_size ||
        !add_ok(L->cksum_off, L->cksum_len, &end) || !add_ok(end, STK_FOOTER_SIZE, &end) ||
        end != L->file_size)
        return stk_error_set(err, STK_E_FORMAT,
                             "%s: checksum table at %llu (+%llu) and the footer do not end the file at %llu",
                             name, (unsigned long long)L->cksum_off, (unsigned long long)L->cksum_len,
                             (unsigned long long)L->file_size);
    if ((rc = check_fields(L, name, err))) return rc;
    return check_overlaps(L, name, err);
}

void stk__layout_encode(const stk__layout *L, uint8_t *b)
{
    uint32_t nf = L->schema.nfields;
    size_t hs = (size_t)stk__header_size(nf);
    memset(b, 0, hs);
    memcpy(b + H_MAGIC, STK_SHARD_MAGIC, 8);
    wr16(b + H_MAJOR, STK_FORMAT_MAJOR);
    wr16(b + H_MINOR, (uint16_t)stk__schema_minor(&L->schema));
    wr32(b + H_HEADER_SIZE, (uint32_t)hs);
    wr32(b + H_FLAGS, 0);
    wr32(b + H_NFIELDS, nf);
    wr64(b + H_RECORDS, L->records);
    wr64(b + H_FILE_SIZE, L->file_size);
    wr64(b + H_CKSUM_OFF, L->cksum_off);
    wr64(b + H_CKSUM_LEN, L->cksum_len);
    wr32(b + H_ALIGN, L->alignment);
    wr32(b + H_ALGO, STK_HASH_XXH3_64);
    for (uint32_t i = 0; i < nf; i++) {
        uint8_t *d = b + STK_HEADER_FIXED + (size_t)i * STK_FIELD_DESC;
        const stk_field *f = &L->schema.fields[i];
        const stk__region *r = &L->region[i];
        memcpy(d + D_NAME, f->name, strnlen(f->name, STK_NAME_MAX - 1));
        d[D_KIND] = f->kind;
        d[D_DTYPE] = f->dtype;
        d[D_CODEC] = f->codec;
        d[D_NDIM] = f->ndim;
        for (unsigned k = 0; k < STK_MAX_DIMS; k++) wr64(d + D_SHAPE + 8 * k, f->shape[k]);
        wr64(d + D_STRIDE, r->stride);
        wr64(d + D_DATA_OFF, r->data_off);
        wr64(d + D_DATA_LEN, r->data_len);
        wr64(d + D_HEAP_OFF, r->heap_off);
        wr64(d + D_HEAP_LEN, r->heap_len);
    }
    wr64(b + hs - 8, stk_hash(b, hs - 8));
}

uint64_t stk_shard_size_for(const stk_schema *s, uint64_t records)
{
    if (!s || stk_schema_validate(s, NULL)) return 0;
    stk__layout L;
    memset(&L, 0, sizeof L);
    L.schema = *s;
    for (uint32_t f = 0; f < s->nfields; f++) L.schema.fields[f].codec = STK_CODEC_NONE; /* an upper bound */
    L.records = records;
    for (uint32_t f = 0; f < s->nfields; f++) {
        stk__region *r = &L.region[f];
        if (s->fields[f].kind == STK_KIND_TENSOR) {
            r->stride = stk_field_stride(&s->fields[f]);
            if (!mul_ok(records, r->stride, &r->data_len)) return 0;
        } else {
            r->stride = 8;
            if (!stk__columns_len(&s->fields[f], records, &r->data_len)) return 0;
        }
    }
    return stk__layout_place(&L, NULL) == STK_OK ? L.file_size : 0;
}

int stk__layout_place(stk__layout *L, stk_error *err)
{
    uint64_t a = L->alignment = STK_ALIGN;
    L->header_size = (uint32_t)stk__header_size(L->schema.nfields);
    uint64_t off;
    align_ok(L->header_size, a, &off);
    for (uint32_t i = 0; i < L->schema.nfields; i++) {
        stk__region *r = &L->region[i];
        if (i == 0 && stk__heap_first(&L->schema)) { /* the heap, then the columns */
            r->heap_off = off;
            if (!add_ok(off, r->heap_len, &off) || !align_ok(off, a, &off)) goto overflow;
            r->data_off = off;
            if (!add_ok(off, r->data_len, &off) || !align_ok(off, a, &off)) goto overflow;
            continue;
        }
        r->data_off = off;
        if (!add_ok(off, r->data_len, &off) || !align_ok(off, a, &off)) goto overflow;
        if (stk__field_has_heap(&L->schema.fields[i]) || stk__field_compressed(&L->schema.fields[i])) {
            r->heap_off = off;
            if (!add_ok(off, r->heap_len, &off) || !align_ok(off, a, &off)) goto overflow;
        }
    }
    L->cksum_off = off;
    if (!mul_ok(L->records, (uint64_t)L->schema.nfields * 8, &L->cksum_len) ||
        !add_ok(off, L->cksum_len, &off) || !add_ok(off, STK_FOOTER_SIZE, &L->file_size))
        goto overflow;
    return STK_OK;
overflow:
    return stk_error_set(err, STK_E_RANGE, "shard size overflows 64 bits");
}
