/* fuzz_mixspec - libFuzzer target: shardread's --mix argument
 * (tools/mixspec.c), both forms.
 *
 * The first byte picks the form: even, the rest is the PATH[:SPEC],...
 * argument itself (cut at a NUL, as a command line would be); odd, the rest
 * is the content of a JSON mixture file, written to a scratch file whose
 * name ends in .json. A spec that parses must hold 1 to MIX_MAX sources,
 * each with a non-empty path it owns, a known kind, a finite value and a
 * known order; a refusal must say why in one NUL-terminated message. */
#include "mixspec.h"

#include <math.h>
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

static char file[64]; /* the scratch JSON file, in a directory of this process's own */
static void cleanup(void)
{
    unlink(file);
    *strrchr(file, '/') = 0;
    rmdir(file);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int json = data[0] & 1;
    data++, size--;
    char *arg;
    if (json) {
        if (!file[0]) {
            char dir[] = "/tmp/fuzz_mixspec.XXXXXX";
            CHECK(mkdtemp(dir) != NULL);
            snprintf(file, sizeof file, "%s/mix.json", dir);
            atexit(cleanup);
        }
        FILE *f = fopen(file, "wb");
        CHECK(f != NULL);
        CHECK(fwrite(data, 1, size, f) == size || size == 0);
        CHECK(fclose(f) == 0);
        arg = strdup(file);
    } else {
        arg = strndup((const char *)data, size);
    }
    CHECK(arg != NULL);
    mix_spec *m = malloc(sizeof *m);
    CHECK(m != NULL);
    char msg[512];
    msg[0] = 0;
    if (mix_spec_parse(arg, m, msg, sizeof msg) != 0) {
        CHECK(msg[0] != 0 && memchr(msg, 0, sizeof msg) != NULL);
        CHECK(m->n == 0); /* freed on failure */
    } else {
        CHECK(m->n >= 1 && m->n <= MIX_MAX);
        for (unsigned i = 0; i < m->n; i++) {
            const stk_source *s = &m->src[i];
            CHECK(s->path == m->path[i] && s->path && s->path[0]);
            CHECK(s->kind >= STK_MIX_WEIGHT && s->kind <= STK_MIX_CHOOSE);
            CHECK(isfinite(s->value));
            CHECK(s->order >= -1 && s->order <= STK_ORDER_QUASI);
            CHECK(s->dataset == NULL);
        }
        mix_spec_free(m);
    }
    free(m);
    free(arg);
    return 0;
}
