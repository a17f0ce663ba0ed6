/* bench/read/to_memmap.c - the PyTorch baseline's input, from a packed dataset.
 *
 * Writes the `image` field of every record, in dataset order, as one NumPy
 * .npy array u8[N, H, W, C] (OUT.npy) and the `label` field as i64[N]
 * (OUT.labels.npy), so that the memmap baseline (torch_memmap.py) serves
 * exactly the pixels and labels stoker serves. Going through libstoker rather
 * than re-decoding the JPEGs is what makes the two sides byte-identical.
 *
 * Usage: to_memmap DATASET OUT.npy
 * Files are written to NAME.tmp and renamed, so an interrupted run never
 * leaves a short array that a later run would take as complete. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stoker/reader.h>

/* An .npy v1.0 header: magic, version, little-endian u16 length, then a
 * Python dict literal padded with spaces and ended by '\n' so that the data
 * starts at a multiple of 64 bytes (what NumPy itself writes). */
static int write_npy_header(FILE *f, const char *descr, const uint64_t *shape, unsigned ndim)
{
    char dict[256];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (unsigned i = 0; i < ndim; i++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%llu,%s", (unsigned long long)shape[i],
                      i + 1 < ndim ? " " : "");
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    size_t total = 10 + (size_t)n + 1, padded = (total + 63) / 64 * 64;
    size_t hlen = padded - 10;
    unsigned char pre[10] = {
        0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
    if (fwrite(pre, 1, 10, f) != 10 || fwrite(dict, 1, (size_t)n, f) != (size_t)n) return -1;
    for (size_t i = 10 + (size_t)n; i + 1 < padded; i++)
        if (fputc(' ', f) == EOF) return -1;
    return fputc('\n', f) == EOF ? -1 : 0;
}

static int find_field(const stk_schema *s, const char *name, int kind, int dtype, const char *path)
{
    int f = stk_schema_find(s, name);
    if (f < 0 || s->fields[f].kind != kind || s->fields[f].dtype != dtype) {
        fprintf(stderr, "to_memmap: %s: no %s field '%s' (a dataset written by pack or shardgen has one)\n",
                path, stk_dtype_name(dtype), name);
        return -1;
    }
    return f;
}

int main(int argc, char **argv)
{
    if (argc != 3 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc == 2 ? stdout : stderr,
                "usage: to_memmap DATASET OUT.npy   (also writes OUT.labels.npy)\n");
        return argc == 2 ? 0 : 2;
    }
    const char *out = argv[2];
    size_t olen = strlen(out);
    if (olen < 5 || strcmp(out + olen - 4, ".npy")) {
        fprintf(stderr, "to_memmap: OUT must end in .npy\n");
        return 2;
    }
    stk_error err;
    stk_dataset *ds = stk_dataset_open(argv[1], &err);
    if (!ds) {
        fprintf(stderr, "to_memmap: %s\n", err.msg);
        return 1;
    }
    const stk_schema *s = stk_dataset_schema(ds);
    int fi = find_field(s, "image", STK_KIND_TENSOR, STK_DT_U8, argv[1]);
    int fl = find_field(s, "label", STK_KIND_TENSOR, STK_DT_I64, argv[1]);
    if (fi < 0 || fl < 0 || s->fields[fl].ndim != 0) {
        if (fl >= 0 && fi >= 0) fprintf(stderr, "to_memmap: %s: 'label' is not a scalar\n", argv[1]);
        stk_dataset_close(ds);
        return 1;
    }
    uint64_t n = stk_dataset_records(ds);
    uint64_t shape[1 + STK_MAX_DIMS] = {n};
    for (unsigned d = 0; d < s->fields[fi].ndim; d++) shape[1 + d] = s->fields[fi].shape[d];

    char *lab = malloc(olen + 16), *itmp = malloc(olen + 16), *ltmp = malloc(olen + 32);
    snprintf(lab, olen + 16, "%.*s.labels.npy", (int)(olen - 4), out);
    snprintf(itmp, olen + 16, "%s.tmp", out);
    snprintf(ltmp, olen + 32, "%s.tmp", lab);
    FILE *fimg = fopen(itmp, "wb"), *flab = fopen(ltmp, "wb");
    int rc = 1;
    if (!fimg || !flab) {
        perror("to_memmap: cannot create the output");
        goto done;
    }
    if (write_npy_header(fimg, "|u1", shape, 1 + s->fields[fi].ndim) ||
        write_npy_header(flab, "<i8", shape, 1))
        goto write_error;
    for (uint64_t i = 0; i < n; i++) {
        const void *img, *label;
        uint64_t isz, lsz;
        if (stk_dataset_value(ds, (unsigned)fi, i, &img, &isz, &err) ||
            stk_dataset_value(ds, (unsigned)fl, i, &label, &lsz, &err)) {
            fprintf(stderr, "to_memmap: %s\n", err.msg);
            goto done;
        }
        /* The format stores little-endian values, which is what '<i8' says. */
        if (fwrite(img, 1, isz, fimg) != isz || fwrite(label, 1, lsz, flab) != lsz) goto write_error;
    }
    if (fclose(fimg) | fclose(flab)) {
        fimg = flab = NULL;
        goto write_error;
    }
    fimg = flab = NULL;
    if (rename(itmp, out) || rename(ltmp, lab)) {
        perror("to_memmap: rename");
        goto done;
    }
    printf("to_memmap: %llu records -> %s, %s\n", (unsigned long long)n, out, lab);
    rc = 0;
    goto done;
write_error:
    perror("to_memmap: write");
done:
    if (fimg) fclose(fimg);
    if (flab) fclose(flab);
    if (rc) remove(itmp), remove(ltmp);
    free(lab);
    free(itmp);
    free(ltmp);
    stk_dataset_close(ds);
    return rc;
}
