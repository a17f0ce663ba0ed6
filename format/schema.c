/* format/schema.c - dtypes and schemas. */
#include "internal.h"

#include <stdio.h>

static const struct {
    const char *name;
    size_t size;
} DTYPES[] = {
    [STK_DT_U8] = {"u8", 1},     [STK_DT_I8] = {"i8", 1},   [STK_DT_U16] = {"u16", 2},
    [STK_DT_I16] = {"i16", 2},   [STK_DT_U32] = {"u32", 4}, [STK_DT_I32] = {"i32", 4},
    [STK_DT_U64] = {"u64", 8},   [STK_DT_I64] = {"i64", 8}, [STK_DT_F16] = {"f16", 2},
    [STK_DT_BF16] = {"bf16", 2}, [STK_DT_F32] = {"f32", 4}, [STK_DT_F64] = {"f64", 8},
};
#define NDTYPES ((int)(sizeof DTYPES / sizeof DTYPES[0]))

size_t stk_dtype_size(int dtype) { return dtype > 0 && dtype < NDTYPES ? DTYPES[dtype].size : 0; }
const char *stk_dtype_name(int dtype) { return dtype > 0 && dtype < NDTYPES ? DTYPES[dtype].name : NULL; }

int stk_dtype_from_name(const char *name)
{
    for (int d = 1; d < NDTYPES; d++)
        if (strcmp(DTYPES[d].name, name) == 0) return d;
    return 0;
}

void stk_schema_init(stk_schema *s) { memset(s, 0, sizeof *s); }

static int add_field(stk_schema *s, const char *name, stk_error *err, stk_field **out)
{
    if (!s || !name) return stk_error_set(err, STK_E_ARG, "schema: NULL argument");
    if (s->nfields >= STK_MAX_FIELDS)
        return stk_error_set(err, STK_E_ARG, "schema: more than %d fields", STK_MAX_FIELDS);
    if (!stk__name_is_valid(name))
        return stk_error_set(err, STK_E_ARG,
                             "schema: field name '%.64s' is not 1-%d characters of [A-Za-z0-9_.-]", name,
                             STK_NAME_MAX - 1);
    if (stk_schema_find(s, name) >= 0)
        return stk_error_set(err, STK_E_ARG, "schema: field '%s' declared twice", name);
    stk_field *f = &s->fields[s->nfields];
    memset(f, 0, sizeof *f);
    strcpy(f->name, name);
    *out = f;
    return STK_OK;
}

/* A tensor or array field: what the two share but the rule on dimensions. */
static int add_shaped(stk_schema *s, const char *name, uint8_t kind, int dtype, unsigned ndim,
                      const uint64_t *shape, stk_error *err)
{
    stk_field *f = NULL;
    int rc = add_field(s, name, err, &f);
    if (rc) return rc;
    if (!stk_dtype_size(dtype))
        return stk_error_set(err, STK_E_ARG, "schema: field '%s': unknown dtype %d", name, dtype);
    if (kind == STK_KIND_ARRAY && (ndim < 1 || ndim > STK_MAX_DIMS || !shape))
        return stk_error_set(err, STK_E_ARG, "schema: array field '%s': %u dimensions (1 to %d)", name, ndim,
                             STK_MAX_DIMS);
    if (ndim > STK_MAX_DIMS)
        return stk_error_set(err, STK_E_ARG, "schema: field '%s': %u dimensions (at most %d)", name, ndim,
                             STK_MAX_DIMS);
    f->kind = kind;
    f->dtype = (uint8_t)dtype;
    f->codec = STK_CODEC_NONE;
    f->ndim = (uint8_t)ndim;
    for (unsigned d = 0; d < ndim; d++) f->shape[d] = shape[d];
    s->nfields++;
    rc = stk_schema_validate(s, err);
    if (rc) s->nfields--;
    return rc;
}

int stk_schema_add_tensor(stk_schema *s, const char *name, int dtype, unsigned ndim, const uint64_t *shape,
                          stk_error *err)
{
    return add_shaped(s, name, STK_KIND_TENSOR, dtype, ndim, shape, err);
}

int stk_schema_add_bytes(stk_schema *s, const char *name, stk_error *err)
{
    stk_field *f = NULL;
    int rc = add_field(s, name, err, &f);
    if (rc) return rc;
    f->kind = STK_KIND_BYTES;
    f->dtype = STK_DT_U8;
    f->codec = STK_CODEC_NONE;
    s->nfields++;
    return STK_OK;
}

int stk_schema_add_array(stk_schema *s, const char *name, int dtype, unsigned ndim, const uint64_t *shape,
                         stk_error *err)
{
    return add_shaped(s, name, STK_KIND_ARRAY, dtype, ndim, shape, err);
}

unsigned stk_field_var_dims(const stk_field *f)
{
    unsigned n = 0;
    if (f->kind == STK_KIND_ARRAY)
        for (unsigned d = 0; d < f->ndim && d < STK_MAX_DIMS; d++) n += f->shape[d] == 0;
    return n;
}

int stk_schema_find(const stk_schema *s, const char *name)
{
    for (uint32_t i = 0; i < s->nfields; i++)
        if (strncmp(s->fields[i].name, name, STK_NAME_MAX) == 0) return (int)i;
    return -1;
}

int stk_schema_equal(const stk_schema *a, const stk_schema *b)
{
    if (a->nfields != b->nfields) return 0;
    for (uint32_t i = 0; i < a->nfields && i < STK_MAX_FIELDS; i++) {
        const stk_field *x = &a->fields[i], *y = &b->fields[i];
        if (strncmp(x->name, y->name, STK_NAME_MAX) || x->kind != y->kind || x->dtype != y->dtype ||
            x->codec != y->codec || x->ndim != y->ndim || memcmp(x->shape, y->shape, sizeof x->shape))
            return 0;
    }
    return 1;
}

uint64_t stk_field_stride(const stk_field *f)
{
    if (f->kind != STK_KIND_TENSOR) return 0;
    uint64_t n = stk_dtype_size(f->dtype);
    for (unsigned d = 0; d < f->ndim && d < STK_MAX_DIMS; d++)
        if (!mul_ok(n, f->shape[d], &n)) return 0;
    return n;
}

/* Largest value a record of one field may have: keeps every later size
 * computation (count x stride) far from overflow and refuses absurd shapes. */
#define STK_STRIDE_MAX ((uint64_t)1 << 40)

int stk_schema_validate(const stk_schema *s, stk_error *err)
{
    if (s->nfields > STK_MAX_FIELDS)
        return stk_error_set(err, STK_E_FORMAT, "schema: %u fields (at most %d)", s->nfields, STK_MAX_FIELDS);
    for (uint32_t i = 0; i < s->nfields; i++) {
        const stk_field *f = &s->fields[i];
        if (!stk__name_is_valid(f->name))
            return stk_error_set(err, STK_E_FORMAT, "schema: field %u: invalid name", i);
        for (uint32_t j = 0; j < i; j++)
            if (strncmp(s->fields[j].name, f->name, STK_NAME_MAX) == 0)
                return stk_error_set(err, STK_E_FORMAT, "schema: field name '%s' repeated", f->name);
        if (f->codec > STK_CODEC_JPEG)
            return stk_error_set(err, STK_E_UNSUPPORTED,
                                 "schema: field '%s' uses codec %u, which this build does not support",
                                 f->name, f->codec);
        if (f->codec == STK_CODEC_JPEG &&
            (f->kind != STK_KIND_ARRAY || f->dtype != STK_DT_U8 || f->ndim != 3 || f->shape[0] ||
             f->shape[1] || (f->shape[2] != 1 && f->shape[2] != 3)))
            return stk_error_set(err, STK_E_FORMAT,
                                 "schema: field '%s': codec jpeg needs an array field u8[*,*,1] or u8[*,*,3]",
                                 f->name);
        if (f->kind == STK_KIND_BYTES) {
            if (f->dtype != STK_DT_U8 || f->ndim != 0)
                return stk_error_set(err, STK_E_FORMAT,
                                     "schema: bytes field '%s' must have dtype u8 and no shape", f->name);
            for (unsigned d = 0; d < STK_MAX_DIMS; d++)
                if (f->shape[d])
                    return stk_error_set(err, STK_E_FORMAT, "schema: bytes field '%s' has a shape", f->name);
            continue;
        }
        if (f->kind != STK_KIND_TENSOR && f->kind != STK_KIND_ARRAY)
            return stk_error_set(err, STK_E_UNSUPPORTED,
                                 "schema: field '%s': kind %u is not supported by this build", f->name,
                                 f->kind);
        if (!stk_dtype_size(f->dtype))
            return stk_error_set(err, STK_E_UNSUPPORTED,
                                 "schema: field '%s': dtype %u is not supported by this build", f->name,
                                 f->dtype);
        if (f->ndim > STK_MAX_DIMS)
            return stk_error_set(err, STK_E_FORMAT, "schema: field '%s': %u dimensions (at most %d)", f->name,
                                 f->ndim, STK_MAX_DIMS);
        bool array = f->kind == STK_KIND_ARRAY;
        if (array && (f->ndim == 0 || stk_field_var_dims(f) == 0))
            return stk_error_set(err, STK_E_FORMAT,
                                 "schema: array field '%s' has no per-record dimension (a 0 in its shape)",
                                 f->name);
        for (unsigned d = 0; d < STK_MAX_DIMS; d++) {
            if (d < f->ndim && f->shape[d] == 0 && !array)
                return stk_error_set(err, STK_E_FORMAT, "schema: field '%s': dimension %u is 0", f->name, d);
            if (d >= f->ndim && f->shape[d] != 0)
                return stk_error_set(err, STK_E_FORMAT, "schema: field '%s': shape entry %u set beyond ndim",
                                     f->name, d);
        }
        uint64_t st = array ? 1 : stk_field_stride(f);
        for (unsigned d = 0; array && d < f->ndim && st; d++)
            if (!mul_ok(st, f->shape[d] ? f->shape[d] : 1, &st)) st = 0;
        if (array && st && !mul_ok(st, stk_dtype_size(f->dtype), &st)) st = 0;
        if (st == 0 || st > STK_STRIDE_MAX)
            return stk_error_set(err, STK_E_FORMAT,
                                 "schema: field '%s': record size overflows (at most 2^40 bytes)", f->name);
    }
    return STK_OK;
}

void stk_field_describe(const stk_field *f, char *buf, size_t cap)
{
    const char *z = f->codec == STK_CODEC_ZSTD ? " zstd" : f->codec == STK_CODEC_JPEG ? " jpeg" : "";
    if (f->kind == STK_KIND_BYTES) {
        snprintf(buf, cap, "%s bytes%s", f->name, z);
        return;
    }
    const char *dt = stk_dtype_name(f->dtype);
    int n = snprintf(buf, cap, "%s %s[", f->name, dt ? dt : "?");
    for (unsigned d = 0; d < f->ndim && d < STK_MAX_DIMS && n >= 0 && (size_t)n < cap; d++)
        n += f->shape[d] || f->kind != STK_KIND_ARRAY
                 ? snprintf(buf + n, cap - (size_t)n, "%s%llu", d ? "," : "", (unsigned long long)f->shape[d])
                 : snprintf(buf + n, cap - (size_t)n, "%s*", d ? "," : "");
    if (n >= 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "]%s", z);
}

int stk_schema_set_codec(stk_schema *s, unsigned f, int codec, stk_error *err)
{
    if (!s || f >= s->nfields) return stk_error_set(err, STK_E_RANGE, "schema: field %u out of range", f);
    if (codec < STK_CODEC_NONE || codec > STK_CODEC_JPEG)
        return stk_error_set(err, STK_E_UNSUPPORTED, "schema: codec %d unknown (none, zstd or jpeg)", codec);
    uint8_t old = s->fields[f].codec;
    s->fields[f].codec = (uint8_t)codec;
    int rc = stk_schema_validate(s, err);
    if (rc) {
        s->fields[f].codec = old;
        if (err) err->code = STK_E_ARG; /* the caller's choice, not bytes from a file */
        return STK_E_ARG;
    }
    return STK_OK;
}
