/* tools/mixspec.c - see mixspec.h. */
#include "mixspec.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const ORDERS[] = {"sequential", "shuffle", "quasi"};

static int order_of(const char *s)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, ORDERS[i])) return i;
    return -2;
}

static int number(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return *s && !*end && !errno && isfinite(*v);
}

/* One ":SPEC" suffix into src; 0 when it is not one (then part of the path);
 * -1 for a second weight, repeat or choose (*kinds counts them). */
static int spec(const char *t, stk_source *src, int *kinds)
{
    double v;
    const char *eq = strchr(t, '=');
    if (!eq) {
        if (!number(t, &v)) return 0;
        if ((*kinds)++) return -1;
        src->kind = STK_MIX_WEIGHT, src->value = v;
        return 1;
    }
    size_t k = (size_t)(eq - t);
    if (k == 5 && !strncmp(t, "order", 5)) {
        int o = order_of(eq + 1);
        if (o < 0) return 0;
        src->order = o;
        return 1;
    }
    if (!number(eq + 1, &v)) return 0;
    if (k == 6 && !strncmp(t, "weight", 6)) src->kind = STK_MIX_WEIGHT;
    else if (k == 6 && !strncmp(t, "repeat", 6)) src->kind = STK_MIX_REPEAT;
    else if (k == 6 && !strncmp(t, "choose", 6)) src->kind = STK_MIX_CHOOSE;
    else return 0;
    if ((*kinds)++) return -1;
    src->value = v;
    return 1;
}

static int add(mix_spec *m, char *path, char *msg, size_t cap)
{
    if (m->n == MIX_MAX) {
        free(path);
        snprintf(msg, cap, "more than %d sources", MIX_MAX);
        return -1;
    }
    m->path[m->n] = path;
    m->src[m->n].path = path;
    m->n++;
    return 0;
}

/* "PATH[:SPEC]...": the suffixes that read as specs, from the right. */
static int parse_item(const char *item, size_t len, mix_spec *m, char *msg, size_t cap)
{
    char *p = strndup(item, len);
    if (!p) return snprintf(msg, cap, "out of memory"), -1;
    stk_source s;
    stk_source_init(&s);
    char *colon;
    int kinds = 0, rc = 0;
    while ((colon = strrchr(p, ':')) && (rc = spec(colon + 1, &s, &kinds)) > 0) *colon = 0;
    if (rc < 0) {
        snprintf(msg, cap, "'%.*s': give one of a weight, repeat= or choose= per source", (int)len, item);
        free(p);
        return -1;
    }
    if (!*p) {
        free(p);
        snprintf(msg, cap, "'%.*s': no dataset path", (int)len, item);
        return -1;
    }
    if (colon && strchr(colon + 1, '=')) { /* a spec misspelt (a ':' without '=' may be in the path) */
        snprintf(msg, cap, "'%s': not a weight, weight=W, repeat=R, choose=N or order=ORDER", colon + 1);
        free(p);
        return -1;
    }
    unsigned i = m->n;
    if (add(m, p, msg, cap)) return -1;
    s.path = m->path[i];
    m->src[i] = s;
    return 0;
}

static int json_source(json_t *o, const char *dir, unsigned i, mix_spec *m, char *msg, size_t cap)
{
    const char *path = json_string_value(json_object_get(o, "path"));
    if (!json_is_object(o) || !path || !*path)
        return snprintf(msg, cap, "source %u: an object with a \"path\"", i), -1;
    stk_source s;
    stk_source_init(&s);
    static const char *const kinds[] = {"weight", "repeat", "choose"};
    int given = 0;
    for (int k = 0; k < 3; k++) {
        json_t *v = json_object_get(o, kinds[k]);
        if (!v) continue;
        if (!json_is_number(v))
            return snprintf(msg, cap, "source %u: \"%s\" must be a number", i, kinds[k]), -1;
        s.kind = STK_MIX_WEIGHT + k;
        s.value = json_number_value(v);
        given++;
    }
    if (given > 1) return snprintf(msg, cap, "source %u: give one of weight, repeat or choose", i), -1;
    json_t *ord = json_object_get(o, "order");
    if (ord && (!json_is_string(ord) || (s.order = order_of(json_string_value(ord))) < 0))
        return snprintf(msg, cap, "source %u: \"order\" must be sequential, shuffle or quasi", i), -1;
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val)
    {
        if (strcmp(key, "path") && strcmp(key, "weight") && strcmp(key, "repeat") && strcmp(key, "choose") &&
            strcmp(key, "order"))
            return snprintf(msg, cap, "source %u: unknown key \"%.64s\"", i, key), -1;
    }
    size_t len = strlen(dir) + strlen(path) + 2;
    char *full = malloc(len);
    if (!full) return snprintf(msg, cap, "out of memory"), -1;
    if (path[0] == '/' || !*dir) snprintf(full, len, "%s", path);
    else snprintf(full, len, "%s/%s", dir, path);
    if (add(m, full, msg, cap)) return -1;
    s.path = m->path[m->n - 1];
    m->src[m->n - 1] = s;
    return 0;
}

static int parse_file(const char *file, mix_spec *m, char *msg, size_t cap)
{
    json_error_t je;
    json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
    if (!root) return snprintf(msg, cap, "%s: %s (line %d)", file, je.text, je.line), -1;
    const char *slash = strrchr(file, '/');
    char dir[4096] = "";
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - file) + (slash == file), file);
    json_t *a = json_object_get(root, "sources"), *es = json_object_get(root, "epoch_size");
    char sub[400] = "";
    int rc = 0;
    if (!json_is_array(a) || !json_array_size(a)) {
        snprintf(sub, sizeof sub, "\"sources\" must be a non-empty array");
        rc = -1;
    } else if (es && (!json_is_integer(es) || json_integer_value(es) < 0)) {
        snprintf(sub, sizeof sub, "\"epoch_size\" must be a whole number");
        rc = -1;
    }
    if (!rc && es) m->epoch_size = (uint64_t)json_integer_value(es);
    for (size_t i = 0; !rc && i < json_array_size(a); i++)
        rc = json_source(json_array_get(a, i), dir, (unsigned)i, m, sub, sizeof sub);
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (!rc && strcmp(key, "sources") && strcmp(key, "epoch_size")) {
            snprintf(sub, sizeof sub, "unknown key \"%.64s\"", key);
            rc = -1;
        }
    }
    json_decref(root);
    if (rc) snprintf(msg, cap, "%s: %s", file, sub);
    return rc;
}

int mix_spec_parse(const char *arg, mix_spec *m, char *msg, size_t cap)
{
    memset(m, 0, sizeof *m);
    size_t len = strlen(arg);
    int rc = 0;
    if (len > 5 && !strcmp(arg + len - 5, ".json")) {
        rc = parse_file(arg, m, msg, cap);
    } else {
        for (const char *p = arg; !rc;) {
            const char *comma = strchr(p, ',');
            size_t n = comma ? (size_t)(comma - p) : strlen(p);
            rc = parse_item(p, n, m, msg, cap);
            if (!comma) break;
            p = comma + 1;
        }
    }
    if (rc) mix_spec_free(m);
    return rc;
}

void mix_spec_free(mix_spec *m)
{
    for (unsigned i = 0; i < m->n; i++) free(m->path[i]);
    m->n = 0;
}
