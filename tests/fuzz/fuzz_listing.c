/* fuzz_listing - libFuzzer target: pack's list files (packer/listing.c,
 * pk_listing_load on a .csv or .tsv).
 *
 * The first byte picks the name (even: list.csv, odd: list.tsv); the rest is
 * the file, written to a scratch directory of this process's own. A listing
 * that loads must hold at least one entry, each with a non-empty path and a
 * label >= 0 that names a class when the labels are class names (numbered
 * in sorted order, each once, valid UTF-8); its full paths and hash must be
 * computable. A refusal must say why, naming the file. */
#include "listing.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond)                \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], csv[96], tsv[96];
static void cleanup(void)
{
    unlink(csv);
    unlink(tsv);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz_listing.XXXXXX");
        CHECK(mkdtemp(dir) != NULL);
        snprintf(csv, sizeof csv, "%s/list.csv", dir);
        snprintf(tsv, sizeof tsv, "%s/list.tsv", dir);
        atexit(cleanup);
    }
    const char *file = data[0] & 1 ? tsv : csv;
    FILE *f = fopen(file, "wb");
    CHECK(f != NULL);
    CHECK(size == 1 || fwrite(data + 1, 1, size - 1, f) == size - 1);
    CHECK(fclose(f) == 0);
    pk_listing l;
    char msg[512];
    msg[0] = 0;
    if (pk_listing_load(file, &l, msg, sizeof msg) != 0) {
        CHECK(msg[0] && memchr(msg, 0, sizeof msg) && strstr(msg, "list."));
        CHECK(l.n == 0 && l.e == NULL && l.classes == NULL);
        return 0;
    }
    CHECK(l.kind == PK_LIST_FILE && l.n >= 1 && l.root && !strcmp(l.root, dir));
    for (size_t c = 1; c < l.nclasses; c++) CHECK(strcmp(l.classes[c - 1], l.classes[c]) < 0);
    for (size_t i = 0; i < l.n; i++) {
        CHECK(l.e[i].path && l.e[i].path[0] && l.e[i].label >= 0);
        if (l.nclasses) CHECK((size_t)l.e[i].label < l.nclasses);
        char *p = pk_listing_path(&l, i);
        CHECK(p != NULL && strstr(p, l.e[i].path));
        free(p);
    }
    (void)pk_listing_hash(&l);
    pk_listing_free(&l);
    return 0;
}
