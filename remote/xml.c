/* remote/xml.c - the few S3 XML bodies read: ListObjectsV2 pages, the
 * multipart initiate reply, error bodies.
 *
 * A small strict scanner of its own, not an XML library: these bodies come
 * from the network, so it reads elements, attributes (skipped), text, the
 * prolog and comments, and refuses everything else (DOCTYPE, so no entity
 * definitions; CDATA; processing instructions past the prolog; unbalanced or
 * mismatched tags; nesting deeper than 16). Text is decoded for the five
 * predefined entities and numeric references (to UTF-8). Every loop is
 * bounded by the body's length; nothing is recursive. */
#include "remote_impl.h"

#include <stdlib.h>
#include <string.h>

#define XML_DEPTH 16
#define XML_NAME 64

typedef struct {
    const char *name; /* the element's name, not NUL-terminated */
    size_t name_len;
    size_t text_at; /* offset after its start tag */
    int has_child;
} xml_frame;

/* Called at each element's end: depth 1 is the root; text the raw text of a
 * leaf (NULL when the element has children). Returns nonzero to stop. */
typedef int (*xml_cb)(void *ud, const xml_frame *stack, int depth, const char *text, size_t text_len);

static int name_start(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || ch == '_' || ch == ':' || ch >= 0x80;
}
static int name_char(unsigned char ch)
{
    return name_start(ch) || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.';
}
static int space(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n'; }

static const char *find(const char *p, const char *end, const char *needle)
{
    size_t nl = strlen(needle);
    while ((size_t)(end - p) >= nl) {
        if (!memcmp(p, needle, nl)) return p;
        p++;
    }
    return NULL;
}

/* 0: the whole body scanned, well formed; 1: stopped by cb; -1: malformed. */
static int xml_scan(const char *buf, size_t len, xml_cb cb, void *ud)
{
    xml_frame st[XML_DEPTH];
    int depth = 0, seen_root = 0;
    const char *p = buf, *end = buf + len;
    while (p < end) {
        if (*p != '<') {
            if (depth == 0 && !space(*p)) return -1; /* text outside the root */
            const char *lt = memchr(p, '<', (size_t)(end - p));
            p = lt ? lt : end;
            continue;
        }
        if (end - p >= 4 && !memcmp(p, "<!--", 4)) {
            const char *e = find(p + 4, end, "-->");
            if (!e) return -1;
            if (depth) st[depth - 1].has_child = 1;
            p = e + 3;
            continue;
        }
        if (end - p >= 2 && p[1] == '?') {
            if (seen_root || depth) return -1;
            const char *e = find(p + 2, end, "?>");
            if (!e) return -1;
            p = e + 2;
            continue;
        }
        if (end - p >= 2 && p[1] == '!') return -1; /* DOCTYPE, CDATA */
        int closing = end - p >= 2 && p[1] == '/';
        const char *n = p + 1 + closing;
        if (n >= end || !name_start((unsigned char)*n)) return -1;
        const char *ne = n;
        while (ne < end && name_char((unsigned char)*ne)) ne++;
        size_t nlen = (size_t)(ne - n);
        if (nlen > XML_NAME) return -1;
        const char *q = ne;
        if (closing) {
            while (q < end && space(*q)) q++;
            if (q >= end || *q != '>') return -1;
            if (depth == 0 || st[depth - 1].name_len != nlen || memcmp(st[depth - 1].name, n, nlen))
                return -1;
            xml_frame *f = &st[depth - 1];
            const char *text = f->has_child ? NULL : buf + f->text_at;
            size_t tl = f->has_child ? 0 : (size_t)(p - (buf + f->text_at));
            if (cb && cb(ud, st, depth, text, tl)) return 1;
            depth--;
            p = q + 1;
            continue;
        }
        /* Attributes: name = "value" or 'value', skipped. */
        int empty = 0;
        for (;;) {
            int had_space = 0;
            while (q < end && space(*q)) {
                q++;
                had_space = 1;
            }
            if (q >= end) return -1;
            if (*q == '>') break;
            if (*q == '/') {
                if (q + 1 >= end || q[1] != '>') return -1;
                empty = 1;
                q++;
                break;
            }
            if (!had_space || !name_start((unsigned char)*q)) return -1;
            while (q < end && name_char((unsigned char)*q)) q++;
            while (q < end && space(*q)) q++;
            if (q >= end || *q != '=') return -1;
            q++;
            while (q < end && space(*q)) q++;
            if (q >= end || (*q != '"' && *q != '\'')) return -1;
            const char *qe = memchr(q + 1, *q, (size_t)(end - q - 1));
            if (!qe || memchr(q + 1, '<', (size_t)(qe - q - 1))) return -1;
            q = qe + 1;
        }
        if (depth == 0 && seen_root) return -1; /* a second root */
        if (depth == XML_DEPTH) return -1;
        if (depth) st[depth - 1].has_child = 1;
        seen_root = 1;
        st[depth] =
            (xml_frame){.name = n, .name_len = nlen, .text_at = (size_t)(q + 1 - buf), .has_child = 0};
        depth++;
        p = q + 1;
        if (empty) {
            if (cb && cb(ud, st, depth, "", 0)) return 1;
            depth--;
        }
    }
    return (depth == 0 && seen_root) ? 0 : -1;
}

static int is(const xml_frame *f, const char *name)
{
    return f->name_len == strlen(name) && !memcmp(f->name, name, f->name_len);
}

static void put_utf8(char *o, size_t *j, unsigned long c)
{
    if (c < 0x80) {
        o[(*j)++] = (char)c;
    } else if (c < 0x800) {
        o[(*j)++] = (char)(0xC0 | (c >> 6));
        o[(*j)++] = (char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        o[(*j)++] = (char)(0xE0 | (c >> 12));
        o[(*j)++] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[(*j)++] = (char)(0x80 | (c & 0x3F));
    } else {
        o[(*j)++] = (char)(0xF0 | (c >> 18));
        o[(*j)++] = (char)(0x80 | ((c >> 12) & 0x3F));
        o[(*j)++] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[(*j)++] = (char)(0x80 | (c & 0x3F));
    }
}

char *stk__xml_decode(const char *s, size_t n)
{
    /* Decoding never lengthens: "&#x10FFFF;" (10 bytes) is 4 of UTF-8. */
    char *o = malloc(n + 1);
    if (!o) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] != '&') {
            if (s[i] == '\0') goto bad;
            o[j++] = s[i++];
            continue;
        }
        const char *semi = memchr(s + i, ';', n - i < 12 ? n - i : 12);
        if (!semi) goto bad;
        size_t en = (size_t)(semi - (s + i)) - 1; /* between '&' and ';' */
        const char *e = s + i + 1;
        static const struct {
            const char *name;
            char ch;
        } ents[] = {{"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
        int done = 0;
        for (size_t k = 0; k < sizeof ents / sizeof *ents; k++)
            if (en == strlen(ents[k].name) && !memcmp(e, ents[k].name, en)) {
                o[j++] = ents[k].ch;
                done = 1;
                break;
            }
        if (!done) {
            if (en < 2 || e[0] != '#') goto bad;
            unsigned long c = 0;
            int hex = e[1] == 'x';
            size_t k = hex ? 2 : 1;
            if (k >= en) goto bad;
            for (; k < en; k++) {
                char ch = e[k];
                unsigned d;
                if (ch >= '0' && ch <= '9') d = (unsigned)(ch - '0');
                else if (hex && ch >= 'a' && ch <= 'f') d = (unsigned)(ch - 'a' + 10);
                else if (hex && ch >= 'A' && ch <= 'F') d = (unsigned)(ch - 'A' + 10);
                else goto bad;
                c = c * (hex ? 16 : 10) + d;
                if (c > 0x10FFFF) goto bad;
            }
            if (c == 0 || (c >= 0xD800 && c <= 0xDFFF)) goto bad;
            put_utf8(o, &j, c);
        }
        i += en + 2;
    }
    o[j] = '\0';
    return o;
bad:
    free(o);
    return NULL;
}

/* ---- Error ------------------------------------------------------------------------- */

typedef struct {
    char *code, *msg;
    size_t code_cap, msg_cap;
    int root_error;
    int bad;
} err_ud;

static void copy_text(char *dst, size_t cap, const char *text, size_t n, int *bad)
{
    if (cap == 0) return;
    char *d = stk__xml_decode(text, n);
    if (!d) {
        *bad = 1;
        return;
    }
    size_t k = 0;
    for (const char *s = d; *s && k + 1 < cap; s++)
        dst[k++] = ((unsigned char)*s < 0x20 || *s == 0x7f) ? ' ' : *s; /* one line */
    dst[k] = '\0';
    free(d);
}

static int err_cb(void *ud, const xml_frame *st, int depth, const char *text, size_t tl)
{
    err_ud *u = ud;
    if (depth == 1) u->root_error = is(&st[0], "Error");
    if (depth == 2 && is(&st[0], "Error") && text) {
        if (is(&st[1], "Code")) copy_text(u->code, u->code_cap, text, tl, &u->bad);
        if (is(&st[1], "Message")) copy_text(u->msg, u->msg_cap, text, tl, &u->bad);
    }
    return 0;
}

int stk__xml_error(const char *buf, size_t len, char *code, size_t code_cap, char *msg, size_t msg_cap)
{
    if (code_cap) code[0] = '\0';
    if (msg_cap) msg[0] = '\0';
    err_ud u = {.code = code, .msg = msg, .code_cap = code_cap, .msg_cap = msg_cap};
    if (xml_scan(buf, len, err_cb, &u) != 0 || !u.root_error || u.bad) {
        if (code_cap) code[0] = '\0';
        if (msg_cap) msg[0] = '\0';
        return -1;
    }
    return 0;
}

/* ---- ListObjectsV2 --------------------------------------------------------------------- */

typedef struct {
    stk__rlist *l;
    size_t n0, cap; /* the arrays hold cap (the caller's: exactly n) */
    char *key;
    uint64_t size;
    int have_size, truncated, root_ok, bad, oom;
    char *next;
} list_ud;

static int list_cb(void *ud, const xml_frame *st, int depth, const char *text, size_t tl)
{
    list_ud *u = ud;
    if (!is(&st[0], "ListBucketResult")) {
        u->bad = 1;
        return 1;
    }
    if (depth == 1) {
        u->root_ok = 1;
        return 0;
    }
    if (depth == 2 && text && is(&st[1], "IsTruncated")) {
        if (tl == 4 && !memcmp(text, "true", 4)) u->truncated = 1;
        else if (tl == 5 && !memcmp(text, "false", 5)) u->truncated = 0;
        else u->bad = 1;
    } else if (depth == 2 && text && is(&st[1], "NextContinuationToken")) {
        free(u->next);
        u->next = stk__xml_decode(text, tl);
        if (!u->next) u->bad = 1;
    } else if (depth == 3 && is(&st[1], "Contents") && text) {
        if (is(&st[2], "Key")) {
            free(u->key);
            u->key = stk__xml_decode(text, tl);
            if (!u->key || !*u->key) u->bad = 1;
        } else if (is(&st[2], "Size")) {
            uint64_t v = 0;
            if (tl == 0 || tl > 20) u->bad = 1;
            for (size_t i = 0; i < tl && !u->bad; i++) {
                if (text[i] < '0' || text[i] > '9' || v > (UINT64_MAX - (uint64_t)(text[i] - '0')) / 10)
                    u->bad = 1;
                else v = v * 10 + (uint64_t)(text[i] - '0');
            }
            u->size = v;
            u->have_size = 1;
        }
    } else if (depth == 2 && is(&st[1], "Contents")) {
        if (!u->key || !u->have_size) {
            u->bad = 1;
        } else {
            stk__rlist *l = u->l;
            if (l->n == u->cap) {
                size_t cap = u->cap ? 2 * u->cap : 16;
                char **nk = realloc(l->keys, cap * sizeof *nk);
                if (nk) l->keys = nk;
                uint64_t *ns = nk ? realloc(l->sizes, cap * sizeof *ns) : NULL;
                if (ns) l->sizes = ns;
                if (!nk || !ns) {
                    u->oom = 1;
                    return 1;
                }
                u->cap = cap;
            }
            l->keys[l->n] = u->key;
            l->sizes[l->n] = u->size;
            l->n++;
            u->key = NULL;
        }
        u->have_size = 0;
    }
    return u->bad;
}

int stk__xml_list(const char *buf, size_t len, stk__rlist *l, int *truncated, char **next, stk_error *err)
{
    *truncated = 0;
    *next = NULL;
    list_ud u = {.l = l, .n0 = l->n, .cap = l->n};
    int rc = xml_scan(buf, len, list_cb, &u);
    free(u.key);
    if (u.oom || rc != 0 || u.bad || !u.root_ok || (u.truncated && !u.next)) {
        for (size_t i = u.n0; i < l->n; i++) free(l->keys[i]);
        l->n = u.n0;
        free(u.next);
        if (u.oom) return stk_error_set(err, STK_E_NOMEM, "out of memory");
        return stk_error_set(err, STK_E_FORMAT, "not a ListBucketResult%s",
                             u.truncated && !u.next && !u.bad && rc == 0 ? " (truncated without a token)"
                                                                         : "");
    }
    *truncated = u.truncated;
    *next = u.next;
    return STK_OK;
}

/* ---- Initiate, any element ----------------------------------------------------------- */

typedef struct {
    const char *name;
    char *text;
    int bad;
} text_ud;

static int text_cb(void *ud, const xml_frame *st, int depth, const char *text, size_t tl)
{
    text_ud *u = ud;
    if (text && is(&st[depth - 1], u->name)) {
        u->text = stk__xml_decode(text, tl);
        if (!u->text) u->bad = 1;
        return 1;
    }
    return 0;
}

char *stk__xml_text(const char *buf, size_t len, const char *name)
{
    text_ud u = {.name = name};
    int rc = xml_scan(buf, len, text_cb, &u);
    if (rc < 0 || u.bad) {
        free(u.text);
        return NULL;
    }
    return u.text;
}

typedef struct {
    int root_ok;
    char *id;
    int bad;
} init_ud;

static int init_cb(void *ud, const xml_frame *st, int depth, const char *text, size_t tl)
{
    init_ud *u = ud;
    if (!is(&st[0], "InitiateMultipartUploadResult")) return u->bad = 1;
    if (depth == 1) u->root_ok = 1;
    if (depth == 2 && text && is(&st[1], "UploadId")) {
        free(u->id);
        u->id = stk__xml_decode(text, tl);
        if (!u->id || !*u->id) u->bad = 1;
    }
    return u->bad;
}

int stk__xml_initiate(const char *buf, size_t len, char **upload_id, stk_error *err)
{
    init_ud u = {0};
    int rc = xml_scan(buf, len, init_cb, &u);
    if (rc != 0 || u.bad || !u.root_ok || !u.id) {
        free(u.id);
        *upload_id = NULL;
        return stk_error_set(err, STK_E_FORMAT, "not an InitiateMultipartUploadResult with an UploadId");
    }
    *upload_id = u.id;
    return STK_OK;
}
