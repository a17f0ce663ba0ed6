/* fuzz_manifest - libFuzzer target: arbitrary bytes as manifest.json.
 *
 * A manifest that parses must serialise, and what it serialises to must
 * parse again to the same dataset: same fingerprint, record count, schema,
 * shards and classes, and the serialisation must be a fixed point (writing
 * the re-parsed manifest gives the same bytes). Any mismatch traps. */
#include "stoker/format.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

static void same_dataset(const stk_manifest *a, const stk_manifest *b)
{
    CHECK(a->fingerprint == b->fingerprint);
    CHECK(a->fingerprint == stk_manifest_fingerprint(b));
    CHECK(a->record_count == b->record_count);
    CHECK(stk_schema_equal(&a->schema, &b->schema));
    CHECK(a->nshards == b->nshards && a->nclasses == b->nclasses);
    for (size_t i = 0; i < a->nshards; i++) {
        const stk_shard_entry *x = &a->shards[i], *y = &b->shards[i];
        CHECK(strcmp(x->path, y->path) == 0 && x->records == y->records && x->file_size == y->file_size &&
              x->file_hash == y->file_hash && x->index_hash == y->index_hash);
    }
    for (size_t i = 0; i < a->nclasses; i++) CHECK(strcmp(a->classes[i], b->classes[i]) == 0);
    CHECK(strcmp(a->pack_json, b->pack_json) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    stk_error err;
    stk_manifest *m = stk_manifest_parse((const char *)data, size, "fuzz.json", &err);
    if (!m) {
        CHECK(err.code != STK_OK && strlen(err.msg) < sizeof err.msg);
        return 0;
    }
    uint64_t fp = m->fingerprint;
    CHECK(fp == stk_manifest_fingerprint(m));
    char *text = stk_manifest_to_json(m, &err);
    CHECK(text != NULL);
    CHECK(m->fingerprint == fp); /* to_json recomputes it: content did not change */
    stk_manifest *m2 = stk_manifest_parse(text, strlen(text), "fuzz-roundtrip.json", &err);
    CHECK(m2 != NULL);
    same_dataset(m, m2);
    char *text2 = stk_manifest_to_json(m2, &err);
    CHECK(text2 != NULL && strcmp(text, text2) == 0);
    free(text2);
    free(text);
    stk_manifest_free(m2);
    stk_manifest_free(m);
    return 0;
}
