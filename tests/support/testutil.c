/* tests/support/testutil.c - see testutil.h. */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------- files */

static void mkdir_p(const char *dir)
{
    char p[TU_PATH];
    ck_assert_msg(strlen(dir) < sizeof p, "path too long: %s", dir);
    strcpy(p, dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        ck_assert_msg(mkdir(p, 0755) == 0 || errno == EEXIST, "mkdir %s: %s", p, strerror(errno));
        *s = '/';
    }
    ck_assert_msg(mkdir(p, 0755) == 0 || errno == EEXIST, "mkdir %s: %s", p, strerror(errno));
}

void tu_rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        ck_assert_msg(d != NULL, "opendir %s: %s", path, strerror(errno));
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char sub[TU_PATH];
            tu_join(sub, sizeof sub, path, e->d_name);
            tu_rm_rf(sub);
        }
        closedir(d);
        ck_assert_msg(rmdir(path) == 0, "rmdir %s: %s", path, strerror(errno));
    } else {
        ck_assert_msg(unlink(path) == 0, "unlink %s: %s", path, strerror(errno));
    }
}

bool tu_thp_available(void) { return access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0; }

void tu_scratch(char *out, size_t cap, const char *name)
{
    const char *root = getenv("STOKER_TEST_TMP");
    char fallback[64];
    if (!root || !*root) { /* run by hand, outside ctest */
        snprintf(fallback, sizeof fallback, "/tmp/stk-unit-%ld", (long)getpid());
        root = fallback;
    }
    tu_join(out, cap, root, name);
    tu_rm_rf(out);
    mkdir_p(out);
}

void tu_scratch_file(char *out, size_t cap, const char *dir, const char *file)
{
    char d[TU_PATH];
    tu_scratch(d, sizeof d, dir);
    tu_join(out, cap, d, file);
}

void tu_scratch_pair(char *a, char *b, size_t cap, const char *dir, const char *an, const char *bn)
{
    char d[TU_PATH];
    tu_scratch(d, sizeof d, dir);
    tu_join(a, cap, d, an);
    tu_join(b, cap, d, bn);
}

void tu_join(char *out, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);
    ck_assert_msg(n > 0 && (size_t)n < cap, "path too long: %s/%s", dir, name);
}

void tu_tmp_of(char *out, size_t cap, const char *path)
{
    int n = snprintf(out, cap, "%s.tmp", path);
    ck_assert_msg(n > 0 && (size_t)n < cap, "path too long: %s.tmp", path);
}

uint8_t *tu_read(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY);
    ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
    struct stat st;
    ck_assert(fstat(fd, &st) == 0);
    size_t n = (size_t)st.st_size, got = 0;
    uint8_t *buf = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(buf);
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        ck_assert_msg(r > 0, "read %s: %s", path, strerror(errno));
        got += (size_t)r;
    }
    close(fd);
    *len = n;
    return buf;
}

void tu_write(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_msg(fd >= 0, "create %s: %s", path, strerror(errno));
    const uint8_t *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        ck_assert_msg(w > 0, "write %s: %s", path, strerror(errno));
        p += w;
        len -= (size_t)w;
    }
    ck_assert(close(fd) == 0);
}

bool tu_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

void tu_copy(const char *from, const char *to)
{
    size_t n;
    uint8_t *b = tu_read(from, &n);
    tu_write(to, b, n);
    free(b);
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

char **tu_list(const char *dir, size_t *n)
{
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "opendir %s: %s", dir, strerror(errno));
    size_t cap = 16, k = 0;
    char **names = malloc(cap * sizeof *names);
    ck_assert_ptr_nonnull(names);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (k == cap) {
            cap *= 2;
            names = realloc(names, cap * sizeof *names);
            ck_assert_ptr_nonnull(names);
        }
        names[k] = strdup(e->d_name);
        ck_assert_ptr_nonnull(names[k]);
        k++;
    }
    closedir(d);
    qsort(names, k, sizeof *names, cmp_name);
    *n = k;
    return names;
}

void tu_free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

uint8_t *tu_dup(const void *src, size_t len)
{
    uint8_t *p = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(p);
    if (len) memcpy(p, src, len);
    return p;
}

/* ------------------------------------------------------ deterministic data */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void tu_fill(void *buf, size_t n, uint64_t seed)
{
    uint8_t *p = buf;
    uint64_t s = seed;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = splitmix(&s);
        size_t k = n - i < 8 ? n - i : 8;
        memcpy(p + i, &v, k);
    }
}

void tu_std_schema(stk_schema *s)
{
    stk_error e;
    const uint64_t shape[2] = {3, 5};
    stk_schema_init(s);
    ck_assert_int_eq(stk_schema_add_tensor(s, "image", STK_DT_U16, 2, shape, &e), STK_OK);
    ck_assert_int_eq(stk_schema_add_tensor(s, "label", STK_DT_I32, 0, NULL, &e), STK_OK);
    ck_assert_int_eq(stk_schema_add_bytes(s, "text", &e), STK_OK);
}

void tu_caption_schema(stk_schema *s, uint64_t h, uint64_t w)
{
    stk_error e;
    const uint64_t shape[3] = {h, w, 3};
    stk_schema_init(s);
    ck_assert_msg(stk_schema_add_tensor(s, "image", STK_DT_U8, 3, shape, &e) == STK_OK, "%s", e.msg);
    ck_assert_msg(stk_schema_add_tensor(s, "label", STK_DT_I64, 0, NULL, &e) == STK_OK, "%s", e.msg);
    ck_assert_msg(stk_schema_add_bytes(s, "caption", &e) == STK_OK, "%s", e.msg);
}

void tu_std_record(tu_record *r, uint64_t seed, uint64_t i)
{
    uint64_t k = seed * 1000003u + i;
    tu_fill(r->image, sizeof r->image, k);
    r->label = (int32_t)(i * 7 + seed) - 50;
    size_t tl = i % 5 == 2 ? 0 : 1 + (size_t)((seed * 31 + i * 7) % (TU_TEXT_MAX - 1));
    tu_fill(r->text, tl, ~k);
    r->v[TU_IMAGE] = (stk_value){r->image, sizeof r->image};
    r->v[TU_LABEL] = (stk_value){&r->label, sizeof r->label};
    r->v[TU_TEXT] = (stk_value){r->text, tl};
}

stk_writer *tu_std_writer(const char *path, uint64_t seed, uint64_t first, uint64_t n)
{
    stk_schema s;
    stk_error e;
    tu_std_schema(&s);
    stk_writer *w = stk_writer_create(path, &s, &e);
    ck_assert_msg(w != NULL, "%s", e.msg);
    for (uint64_t i = first; i < first + n; i++) {
        tu_record r;
        tu_std_record(&r, seed, i);
        ck_assert_msg(stk_writer_append(w, r.v, &e) == STK_OK, "%s", e.msg);
    }
    return w;
}

stk_manifest *tu_manifest_new(size_t nshards)
{
    stk_manifest *m = calloc(1, sizeof *m);
    ck_assert_ptr_nonnull(m);
    m->version_major = STK_FORMAT_MAJOR;
    m->version_minor = STK_FORMAT_MINOR;
    m->nshards = nshards;
    m->shards = calloc(nshards, sizeof *m->shards);
    ck_assert_ptr_nonnull(m->shards);
    return m;
}

void tu_write_std_shard(const char *path, uint64_t seed, uint64_t first, uint64_t n, stk_shard_info *info)
{
    stk_error e;
    stk_writer *w = tu_std_writer(path, seed, first, n);
    ck_assert_msg(stk_writer_finish(w, info, &e) == STK_OK, "%s", e.msg);
}

void tu_check_std_values(const void *src, tu_value_fn get, uint64_t count, uint64_t seed, uint64_t first)
{
    stk_error e;
    for (uint64_t i = 0; i < count; i++) {
        tu_record r;
        tu_std_record(&r, seed, first + i);
        for (unsigned f = 0; f < 3; f++) {
            const void *p;
            uint64_t n;
            ck_assert_msg(get(src, f, i, &p, &n, &e) == STK_OK, "%s", e.msg);
            ck_assert_uint_eq(n, r.v[f].size);
            ck_assert_msg(n == 0 || memcmp(p, r.v[f].data, (size_t)n) == 0, "record %llu field %u differs",
                          (unsigned long long)i, f);
        }
    }
}

static int shard_value(const void *sh, unsigned f, uint64_t i, const void **p, uint64_t *n, stk_error *e)
{
    return stk_shard_value(sh, f, i, p, n, e);
}

stk_shard *tu_shard_open(const char *path)
{
    stk_error e;
    stk_shard *sh = stk_shard_open(path, &e);
    ck_assert_msg(sh != NULL, "%s: %s", path, e.msg);
    return sh;
}

void tu_check_std_shard(const stk_shard *sh, uint64_t seed, uint64_t first)
{
    tu_check_std_values(sh, shard_value, stk_shard_records(sh), seed, first);
}

const stk_shard *tu_locate_value(const stk_dataset *ds, uint64_t rec, unsigned f, uint64_t *local,
                                 const void **p, uint64_t *size)
{
    size_t s;
    uint64_t i;
    ck_assert_int_eq(stk_dataset_locate(ds, rec, &s, &i, NULL), 0);
    const stk_shard *sh = stk_dataset_shard(ds, s);
    ck_assert_int_eq(stk_shard_value(sh, f, i, p, size, NULL), 0);
    if (local) *local = i;
    return sh;
}

void tu_write_std_dataset(const char *dir, uint64_t seed, uint64_t n, const stk_dataset_options *o)
{
    stk_schema s;
    stk_error e;
    tu_std_schema(&s);
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, &s, o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    for (uint64_t i = 0; i < n; i++) {
        tu_record r;
        tu_std_record(&r, seed, i);
        ck_assert_msg(stk_dataset_writer_append(dw, r.v, &e) == STK_OK, "%s", e.msg);
    }
    ck_assert_msg(stk_dataset_writer_finish(dw, &e) == STK_OK, "%s", e.msg);
}

void tu_scratch_std_dataset(char *dir, size_t cap, const char *name, uint64_t seed, uint64_t n, uint64_t per)
{
    tu_scratch(dir, cap, name);
    stk_dataset_options o = {0};
    o.records_per_shard = per;
    tu_write_std_dataset(dir, seed, n, &o);
}

/* The field that holds the record's index in tu_write_tensor_dataset. */
static bool index_field(const stk_field *f) { return f->ndim == 0 && f->dtype == STK_DT_U64; }

void tu_write_tensor_dataset(const char *dir, const stk_schema *s, uint64_t n, uint64_t per, uint64_t seed)
{
    stk_dataset_options o;
    memset(&o, 0, sizeof o);
    o.records_per_shard = per;
    stk_error e;
    stk_dataset_writer *dw = stk_dataset_writer_create(dir, s, &o, &e);
    ck_assert_msg(dw != NULL, "%s", e.msg);
    uint8_t *buf[STK_MAX_FIELDS] = {NULL};
    stk_value v[STK_MAX_FIELDS];
    for (unsigned f = 0; f < s->nfields; f++) {
        const stk_field *fd = &s->fields[f];
        ck_assert_msg(fd->kind == STK_KIND_TENSOR, "field %s: not a tensor", fd->name);
        v[f].size = stk_field_stride(fd);
        if (index_field(fd)) continue;
        buf[f] = malloc(v[f].size);
        ck_assert_ptr_nonnull(buf[f]);
    }
    for (uint64_t i = 0; i < n; i++) {
        for (unsigned f = 0; f < s->nfields; f++) {
            if (buf[f]) tu_fill(buf[f], v[f].size, seed + i);
            v[f].data = buf[f] ? (const void *)buf[f] : &i;
        }
        ck_assert_msg(stk_dataset_writer_append(dw, v, &e) == STK_OK, "%s", e.msg);
    }
    ck_assert_msg(stk_dataset_writer_finish(dw, &e) == STK_OK, "%s", e.msg);
    for (unsigned f = 0; f < s->nfields; f++) free(buf[f]);
}

/* ---------------------------------------------------------------- reader */

stk_reader_options tu_reader_options(uint32_t batch, int order)
{
    stk_reader_options o;
    stk_reader_options_init(&o);
    o.batch_size = batch;
    o.order = order;
    o.rank = 0;
    o.world_size = 1;
    return o;
}

stk_reader *tu_open_reader(const char *dir, const stk_reader_options *o)
{
    stk_error err;
    stk_reader *r = stk_reader_open(dir, o, &err);
    ck_assert_msg(r != NULL, "open %s: %s", dir, err.msg);
    return r;
}

/* ---------------------------------------------------------------- main */

int tu_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

int tu_run_table(const char *name, const tu_case *cases, size_t n)
{
    Suite *s = suite_create(name);
    for (size_t i = 0; i < n; i++) {
        const tu_case *c = &cases[i];
        TCase *tc = tcase_create(c->name);
        if (c->timeout > 0) tcase_set_timeout(tc, c->timeout);
        if (c->setup || c->teardown) tcase_add_checked_fixture(tc, c->setup, c->teardown);
        for (size_t t = 0; t < TU_TESTS_MAX && c->loop_tests[t]; t++)
            tcase_add_loop_test(tc, c->loop_tests[t], 0, c->loop > 0 ? c->loop : 1);
        for (size_t t = 0; t < TU_TESTS_MAX && c->tests[t]; t++) tcase_add_test(tc, c->tests[t]);
        suite_add_tcase(s, tc);
    }
    return tu_run(s);
}
