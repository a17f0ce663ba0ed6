/* remote/config.c - the configuration as users already have it.
 *
 * Each setting: the caller's override (stk__rconfig), then the environment,
 * then the profile (~/.aws/credentials, ~/.aws/config), then the default.
 * Credentials follow the AWS CLI's chain: the override, AWS_ACCESS_KEY_ID +
 * AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), web identity
 * (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN [+ AWS_ROLE_SESSION_NAME], or
 * the profile's web_identity_token_file + role_arn: STS
 * AssumeRoleWithWebIdentity at AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL or
 * https://sts.REGION.amazonaws.com), the profile's keys in the credentials
 * file, its credential_process, its keys in the config file. Credentials
 * from a credential_process or web identity are renewed before they expire
 * (client.c). Not supported: role_arn with source_profile (assume-role
 * chains), SSO, instance and container metadata.
 *
 * Proxies: libcurl itself reads https_proxy/HTTPS_PROXY, http_proxy (lower
 * case only, as curl refuses HTTP_PROXY from a CGI environment), ALL_PROXY
 * and NO_PROXY/no_proxy for every request it makes, so nothing here sets
 * CURLOPT_PROXY: the variables users already have simply work (checked: a
 * request with http_proxy naming a closed port fails to connect to it; with
 * NO_PROXY naming the endpoint's host it goes direct).
 *
 * Secrets never enter a message: errors name the variable, file, profile or
 * key, never a value read from them. */
#define _POSIX_C_SOURCE 200809L
#include "remote_impl.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

static int dup_to(char **dst, const char *s)
{
    free(*dst);
    *dst = NULL;
    if (!s) return 0;
    *dst = strdup(s);
    return *dst ? 0 : -1;
}

/* ---- The INI dialect ------------------------------------------------------- */

static void trim(const char **s, size_t *n)
{
    while (*n && isspace((unsigned char)**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n && isspace((unsigned char)(*s)[*n - 1])) (*n)--;
}

int stk__ini_parse(const char *buf, size_t len, stk__ini_cb cb, void *ud, size_t *line_out)
{
    char section[256] = "", parent[256] = "", key[512], value[4097];
    int in_section = 0, count = 0;
    size_t line = 0, i = 0;
    while (i < len) {
        size_t e = i;
        while (e < len && buf[e] != '\n') e++;
        line++;
        const char *s = buf + i;
        size_t n = e - i;
        i = e + 1;
        if (n && s[n - 1] == '\r') n--;
        if (n > 4096 || memchr(s, '\0', n)) goto bad;
        int indented = n && (s[0] == ' ' || s[0] == '\t');
        trim(&s, &n);
        if (n == 0 || s[0] == '#' || s[0] == ';') continue;
        if (s[0] == '[') {
            if (s[n - 1] != ']') goto bad;
            const char *t = s + 1;
            size_t tn = n - 2;
            trim(&t, &tn);
            if (tn == 0 || tn > 255) goto bad;
            memcpy(section, t, tn);
            section[tn] = '\0';
            in_section = 1;
            parent[0] = '\0';
            continue;
        }
        if (!in_section) goto bad;
        const char *eq = memchr(s, '=', n);
        if (!eq) goto bad;
        const char *k = s, *v = eq + 1;
        size_t kn = (size_t)(eq - s), vn = n - kn - 1;
        trim(&k, &kn);
        trim(&v, &vn);
        if (kn == 0 || kn > 255) goto bad;
        char lk[256];
        for (size_t j = 0; j < kn; j++) lk[j] = (char)tolower((unsigned char)k[j]);
        lk[kn] = '\0';
        if (!indented) {
            parent[0] = '\0';
            if (vn == 0) {
                /* "s3 =" opens a nested block of indented lines. */
                memcpy(parent, lk, kn + 1);
                continue;
            }
            snprintf(key, sizeof key, "%s", lk);
        } else if (parent[0]) {
            snprintf(key, sizeof key, "%s.%s", parent, lk);
        } else {
            snprintf(key, sizeof key, "%s", lk);
        }
        memcpy(value, v, vn);
        value[vn] = '\0';
        count++;
        if (cb && cb(ud, section, key, value)) break;
    }
    return count;
bad:
    if (line_out) *line_out = line;
    return -1;
}

/* The settings of one profile, from both files. */
enum {
    P_ACCESS,
    P_SECRET,
    P_TOKEN,
    P_PROCESS,
    P_REGION,
    P_ENDPOINT,
    P_S3_ENDPOINT,
    P_CA,
    P_ADDRESSING,
    P_WI_FILE,
    P_ROLE_ARN,
    P_ROLE_SESSION,
    P_NKEYS
};
static const char *const pkeys[] = {"aws_access_key_id",
                                    "aws_secret_access_key",
                                    "aws_session_token",
                                    "credential_process",
                                    "region",
                                    "endpoint_url",
                                    "s3.endpoint_url",
                                    "ca_bundle",
                                    "s3.addressing_style",
                                    "web_identity_token_file",
                                    "role_arn",
                                    "role_session_name"};

_Static_assert(sizeof pkeys / sizeof *pkeys == P_NKEYS, "one name per profile key");

typedef struct {
    const char *want; /* the section name that holds the profile */
    const char *alt;  /* another accepted name ("profile default") */
    char *v[P_NKEYS];
    int found;
    int oom;
} profile;

static int profile_cb(void *ud, const char *section, const char *key, const char *value)
{
    profile *p = ud;
    if (strcmp(section, p->want) && !(p->alt && !strcmp(section, p->alt))) return 0;
    p->found = 1;
    for (int i = 0; i < P_NKEYS; i++)
        if (!strcmp(key, pkeys[i]) && !p->v[i]) {
            p->v[i] = strdup(value);
            if (!p->v[i]) p->oom = 1;
        }
    return 0;
}

static void profile_free(profile *p)
{
    for (int i = 0; i < P_NKEYS; i++) free(p->v[i]);
}

/* Reads path (absent: fine) into the profile. */
static int profile_read(profile *p, const char *path, stk_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT || errno == ENOTDIR) return STK_OK;
        return stk_error_set(err, STK_E_IO, "%.300s: %s", path, strerror(errno));
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    int rc = STK_OK;
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
        if (n == cap) {
            if (cap >= (1u << 24)) {
                rc = stk_error_set(err, STK_E_FORMAT, "%.300s: larger than 16 MiB", path);
                break;
            }
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            } else {
                buf = nb;
            }
        }
    }
    int rerr = ferror(f);
    fclose(f);
    if (!buf) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    if (rc == STK_OK && rerr) rc = stk_error_set(err, STK_E_IO, "%.300s: read error", path);
    if (rc == STK_OK) {
        size_t line = 0;
        if (stk__ini_parse(buf, n, profile_cb, p, &line) < 0)
            rc = stk_error_set(err, STK_E_FORMAT, "%.300s line %zu: not \"[section]\" or \"key = value\"",
                               path, line);
        else if (p->oom) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
    }
    free(buf);
    return rc;
}

/* $HOME/.aws/NAME, or the variable's file. */
static char *aws_file(const char *var, const char *name)
{
    const char *v = env(var);
    if (v) return strdup(v);
    const char *home = env("HOME");
    if (!home) return NULL;
    size_t n = strlen(home) + strlen(name) + 8;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s/.aws/%s", home, name);
    return s;
}

/* ---- credential_process ----------------------------------------------------- */

double stk__iso8601_parse(const char *s)
{
    int Y, M, D, h, m, sec, used = 0;
    if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &Y, &M, &D, &h, &m, &sec, &used) != 6 || used != 19)
        return -1;
    if (Y < 1970 || Y > 9999 || M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60 || h < 0 ||
        m < 0 || sec < 0)
        return -1;
    const char *p = s + 19;
    double frac = 0, scale = 0.1;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p)) return -1;
        for (int i = 0; isdigit((unsigned char)*p); p++, i++)
            if (i < 9) {
                frac += (*p - '0') * scale;
                scale /= 10;
            }
    }
    long off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om, u2 = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &u2) != 2 || u2 != 5 || oh > 23 || om > 59 || oh < 0 ||
            om < 0)
            return -1;
        off = (*p == '+' ? 1 : -1) * (oh * 3600L + om * 60L);
        p += 6;
    } else {
        return -1;
    }
    if (*p) return -1;
    /* Days from the civil date (Howard Hinnant's algorithm), no timegm. */
    int y = M <= 2 ? Y - 1 : Y;
    long era = y / 400;
    long yoe = y - era * 400;
    long doy = (153L * (M + (M > 2 ? -3 : 9)) + 2) / 5 + D - 1;
    long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    long days = era * 146097 + doe - 719468;
    return (double)days * 86400.0 + h * 3600.0 + m * 60.0 + sec + frac - (double)off;
}

int stk__cred_json_parse(const char *buf, size_t len, char **ak, char **sk, char **tok, double *expiration,
                         stk_error *err)
{
    *ak = *sk = *tok = NULL;
    *expiration = 0;
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return stk_error_set(err, STK_E_FORMAT, "not a JSON object");
    }
    int rc = STK_OK;
    json_t *ver = json_object_get(root, "Version");
    json_t *a = json_object_get(root, "AccessKeyId"), *s = json_object_get(root, "SecretAccessKey");
    json_t *t = json_object_get(root, "SessionToken"), *e = json_object_get(root, "Expiration");
    if (!json_is_integer(ver) || json_integer_value(ver) != 1) {
        rc = stk_error_set(err, STK_E_FORMAT, "\"Version\" is not 1");
    } else if (!json_is_string(a) || !json_string_length(a) || !json_is_string(s) || !json_string_length(s)) {
        rc = stk_error_set(err, STK_E_FORMAT,
                           "\"AccessKeyId\" or \"SecretAccessKey\" missing or not a string");
    } else if ((t && !json_is_null(t) && !json_is_string(t)) ||
               (e && !json_is_null(e) && !json_is_string(e))) {
        rc = stk_error_set(err, STK_E_FORMAT, "\"SessionToken\" or \"Expiration\" not a string");
    } else if (json_is_string(e) && (*expiration = stk__iso8601_parse(json_string_value(e))) < 0) {
        *expiration = 0;
        rc = stk_error_set(err, STK_E_FORMAT, "\"Expiration\" is not an ISO 8601 time");
    } else if (strlen(json_string_value(a)) != json_string_length(a) ||
               strlen(json_string_value(s)) != json_string_length(s) ||
               (json_is_string(t) && strlen(json_string_value(t)) != json_string_length(t))) {
        rc = stk_error_set(err, STK_E_FORMAT, "a credential holds a NUL byte");
    } else {
        *ak = strdup(json_string_value(a));
        *sk = strdup(json_string_value(s));
        if (json_is_string(t) && json_string_length(t)) *tok = strdup(json_string_value(t));
        if (!*ak || !*sk || (json_is_string(t) && json_string_length(t) && !*tok))
            rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
    }
    json_decref(root);
    if (rc) {
        free(*ak);
        free(*sk);
        free(*tok);
        *ak = *sk = *tok = NULL;
    }
    return rc;
}

static double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Runs "sh -c cmd", reads up to 64 KiB of its output within 60 s. */
#define PROCESS_MAX_OUT (64 * 1024)
#define PROCESS_TIMEOUT_S 60.0
static int run_process(const char *cmd, const char *what, char **out, size_t *outlen, stk_error *err)
{
    int fds[2];
    *out = NULL;
    *outlen = 0;
    if (pipe(fds)) return stk_error_set(err, STK_E_IO, "%s: pipe: %s", what, strerror(errno));
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    pid_t pid;
    int se = posix_spawn(&pid, "/bin/sh", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (se) {
        close(fds[0]);
        return stk_error_set(err, STK_E_IO, "%s: cannot start /bin/sh: %s", what, strerror(se));
    }
    char *buf = malloc(PROCESS_MAX_OUT + 1);
    size_t n = 0;
    int rc = buf ? STK_OK : stk_error_set(err, STK_E_NOMEM, "out of memory");
    double end = now_mono() + PROCESS_TIMEOUT_S;
    while (rc == STK_OK) {
        double left = end - now_mono();
        if (left <= 0) {
            rc = stk_error_set(err, STK_E_IO, "%s: no answer within %.0f s", what, PROCESS_TIMEOUT_S);
            break;
        }
        struct pollfd pf = {.fd = fds[0], .events = POLLIN};
        int pr = poll(&pf, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) continue;
        ssize_t got = read(fds[0], buf + n, PROCESS_MAX_OUT - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            rc = stk_error_set(err, STK_E_IO, "%s: read: %s", what, strerror(errno));
            break;
        }
        if (got == 0) break;
        n += (size_t)got;
        if (n == PROCESS_MAX_OUT) {
            rc = stk_error_set(err, STK_E_IO, "%s: more than %d bytes of output", what, PROCESS_MAX_OUT);
            break;
        }
    }
    close(fds[0]);
    if (rc) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (rc == STK_OK && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        if (WIFEXITED(status))
            rc = stk_error_set(err, STK_E_IO, "%s exited with status %d", what, WEXITSTATUS(status));
        else rc = stk_error_set(err, STK_E_IO, "%s was killed by signal %d", what, WTERMSIG(status));
    }
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *out = buf;
    *outlen = n;
    return STK_OK;
}

static int process_fetch(const stk__rcfg *c, char **ak, char **sk, char **tok, double *exp, stk_error *err)
{
    char what[320];
    snprintf(what, sizeof what, "credential_process of profile \"%.200s\"", c->profile);
    char *out;
    size_t n;
    int rc = run_process(c->cred_process, what, &out, &n, err);
    if (rc) return rc;
    stk_error perr;
    rc = stk__cred_json_parse(out, n, ak, sk, tok, exp, &perr);
    /* The output holds secrets: wiped before it is freed. */
    memset(out, 0, n);
    free(out);
    if (rc) return stk_error_set(err, rc, "%s: its output: %s", what, perr.msg);
    return STK_OK;
}

/* ---- Web identity: STS AssumeRoleWithWebIdentity ------------------------------ */

#define STS_REPLY_MAX (256 * 1024)
#define STS_TOKEN_MAX (64 * 1024)
#define STS_TIMEOUT_S 60L
#define STS_ATTEMPTS 3

typedef struct {
    char *buf;
    size_t len;
} sts_body;

static size_t sts_write(char *b, size_t sz, size_t nm, void *ud)
{
    sts_body *o = ud;
    size_t n = sz * nm;
    if (n > STS_REPLY_MAX - o->len) return 0;
    char *nb = realloc(o->buf, o->len + n + 1);
    if (!nb) return 0;
    o->buf = nb;
    memcpy(o->buf + o->len, b, n);
    o->len += n;
    o->buf[o->len] = '\0';
    return n;
}

/* The token file, read again at each call (it is rotated under us). */
static int read_token(const char *path, char **out, stk_error *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return stk_error_set(err, STK_E_IO, "web identity token file %.300s: %s", path, strerror(errno));
    char *b = malloc(STS_TOKEN_MAX + 1);
    size_t n = b ? fread(b, 1, STS_TOKEN_MAX + 1, f) : 0;
    fclose(f);
    if (!b) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    while (n && (b[n - 1] == '\n' || b[n - 1] == '\r' || b[n - 1] == ' ')) n--;
    if (n == 0 || n > STS_TOKEN_MAX) {
        free(b);
        return stk_error_set(err, STK_E_FORMAT, "web identity token file %.300s: %s", path,
                             n ? "larger than 64 KiB" : "empty");
    }
    b[n] = '\0';
    *out = b;
    return STK_OK;
}

static int sts_fetch(const stk__rcfg *c, char **ak, char **sk, char **tok, double *exp, stk_error *err)
{
    char what[700];
    snprintf(what, sizeof what, "AssumeRoleWithWebIdentity of %.200s at %.300s", c->wi_role_arn,
             c->sts_endpoint);
    char *token;
    int rc = read_token(c->wi_token_file, &token, err);
    if (rc) return rc;
    char *e_role = stk__rurl_encode(c->wi_role_arn, strlen(c->wi_role_arn), 0);
    char *e_sess = stk__rurl_encode(c->wi_session, strlen(c->wi_session), 0);
    char *e_tok = stk__rurl_encode(token, strlen(token), 0);
    memset(token, 0, strlen(token));
    free(token);
    size_t bl =
        (e_role ? strlen(e_role) : 0) + (e_sess ? strlen(e_sess) : 0) + (e_tok ? strlen(e_tok) : 0) + 200;
    char *form = (e_role && e_sess && e_tok) ? malloc(bl) : NULL;
    if (form)
        snprintf(form, bl,
                 "Action=AssumeRoleWithWebIdentity&RoleArn=%s&RoleSessionName=%s&Version=2011-06-15&"
                 "WebIdentityToken=%s",
                 e_role, e_sess, e_tok);
    if (e_tok) memset(e_tok, 0, strlen(e_tok));
    free(e_role);
    free(e_sess);
    free(e_tok);
    if (!form) return stk_error_set(err, STK_E_NOMEM, "out of memory");
    char url[1100];
    snprintf(url, sizeof url, "%s/", c->sts_endpoint);
    sts_body body = {0};
    long status = 0;
    CURLcode cc = CURLE_OK;
    for (int attempt = 0; attempt < STS_ATTEMPTS; attempt++) {
        if (attempt) {
            struct timespec ts = {0, 200000000L << attempt};
            nanosleep(&ts, NULL);
        }
        CURL *h = curl_easy_init();
        if (!h) {
            cc = CURLE_OUT_OF_MEMORY;
            break;
        }
        free(body.buf);
        body = (sts_body){0};
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, form);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sts_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
        curl_easy_setopt(h, CURLOPT_TIMEOUT, STS_TIMEOUT_S);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(c->connect_timeout_s * 1000));
        if (c->ca_bundle) curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_bundle);
        cc = curl_easy_perform(h);
        status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(h);
        if (cc == CURLE_OK && status < 500) break;
    }
    memset(form, 0, strlen(form));
    free(form);
    if (cc != CURLE_OK) {
        free(body.buf);
        return stk_error_set(err, STK_E_IO, "%s: %s", what, curl_easy_strerror(cc));
    }
    const char *b = body.buf ? body.buf : "";
    if (status != 200) {
        char *code = stk__xml_text(b, body.len, "Code"), *msg = stk__xml_text(b, body.len, "Message");
        rc = stk_error_set(err, STK_E_IO, "%s: HTTP %ld %.80s%s%.200s%s", what, status, code ? code : "",
                           msg ? " (" : "", msg ? msg : "", msg ? ")" : "");
        free(code);
        free(msg);
        free(body.buf);
        return rc;
    }
    *ak = stk__xml_text(b, body.len, "AccessKeyId");
    *sk = stk__xml_text(b, body.len, "SecretAccessKey");
    *tok = stk__xml_text(b, body.len, "SessionToken");
    char *ex = stk__xml_text(b, body.len, "Expiration");
    *exp = ex ? stk__iso8601_parse(ex) : 0;
    free(ex);
    memset(body.buf, 0, body.len);
    free(body.buf);
    if (!*ak || !**ak || !*sk || !**sk || !*tok || *exp < 0) {
        free(*ak);
        free(*sk);
        free(*tok);
        *ak = *sk = *tok = NULL;
        *exp = 0;
        return stk_error_set(err, STK_E_FORMAT,
                             "%s: a reply without AccessKeyId, SecretAccessKey, SessionToken "
                             "or a valid Expiration",
                             what);
    }
    return STK_OK;
}

int stk__rcfg_renewable(const stk__rcfg *c) { return c->cred_process || c->wi_token_file; }

int stk__rcfg_fetch(const stk__rcfg *c, char **ak, char **sk, char **tok, double *exp, stk_error *err)
{
    *ak = *sk = *tok = NULL;
    *exp = 0;
    if (c->cred_process) return process_fetch(c, ak, sk, tok, exp, err);
    if (c->wi_token_file) return sts_fetch(c, ak, sk, tok, exp, err);
    return stk_error_set(err, STK_E_ARG, "no renewable credentials");
}

int stk__rcfg_refresh(stk__rcfg *c, stk_error *err)
{
    if (!stk__rcfg_renewable(c)) return STK_OK;
    char *ak, *sk, *tok;
    double exp;
    int rc = stk__rcfg_fetch(c, &ak, &sk, &tok, &exp, err);
    if (rc) return rc;
    char **secrets[] = {&c->access_key, &c->secret_key, &c->session_token};
    for (size_t i = 0; i < 3; i++) {
        if (*secrets[i]) memset(*secrets[i], 0, strlen(*secrets[i]));
        free(*secrets[i]);
    }
    c->access_key = ak;
    c->secret_key = sk;
    c->session_token = tok;
    c->expiration = exp;
    return STK_OK;
}

/* ---- Resolution -------------------------------------------------------------- */

void stk__rcfg_free(stk__rcfg *c)
{
    if (!c) return;
    char **strs[] = {&c->endpoint,    &c->region,        &c->profile,     &c->ca_bundle,  &c->cred_process,
                     &c->cred_source, &c->wi_token_file, &c->wi_role_arn, &c->wi_session, &c->sts_endpoint};
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) {
        free(*strs[i]);
        *strs[i] = NULL;
    }
    char **secrets[] = {&c->access_key, &c->secret_key, &c->session_token};
    for (size_t i = 0; i < 3; i++) {
        if (*secrets[i]) memset(*secrets[i], 0, strlen(*secrets[i]));
        free(*secrets[i]);
        *secrets[i] = NULL;
    }
}

static const char *first(const char *a, const char *b, const char *c, const char *d)
{
    return a ? a : b ? b : c ? c : d;
}

int stk__rcfg_resolve(stk__rcfg *out, const stk__raddr *a, const stk__rconfig *c, stk_error *err)
{
    static const stk__rconfig none;
    memset(out, 0, sizeof *out);
    if (!c) c = &none;
    int rc = STK_OK;
    out->max_inflight = c->max_inflight ? c->max_inflight : 64;
    if (out->max_inflight > 1024) out->max_inflight = 1024;
    out->retries = c->retries ? c->retries : 8;
    out->retry_time_s = c->retry_time_s > 0 ? c->retry_time_s : 120;
    out->connect_timeout_s = c->connect_timeout_s > 0 ? c->connect_timeout_s : 10;
    out->stall_s = c->stall_s > 0 ? c->stall_s : 30;
    out->anonymous = c->anonymous || !a->s3;

    const char *prof = first(c->profile, env("AWS_PROFILE"), env("AWS_DEFAULT_PROFILE"), "default");
    if (dup_to(&out->profile, prof)) goto oom;
    char want_cfg[300], alt_cfg[300];
    snprintf(want_cfg, sizeof want_cfg, "profile %.255s", prof);
    snprintf(alt_cfg, sizeof alt_cfg, "%.255s", prof);
    profile pc = {.want = want_cfg, .alt = !strcmp(prof, "default") ? "default" : NULL};
    profile pk = {.want = alt_cfg};
    (void)alt_cfg;
    char *cred_file = aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    char *conf_file = aws_file("AWS_CONFIG_FILE", "config");
    if (cred_file) rc = profile_read(&pk, cred_file, err);
    if (!rc && conf_file) rc = profile_read(&pc, conf_file, err);
    free(cred_file);
    free(conf_file);
    if (rc) goto done;
    int explicit_profile = c->profile || env("AWS_PROFILE") || env("AWS_DEFAULT_PROFILE");

    const char *stall = c->stall_s > 0 ? NULL : env("STOKER_S3_STALL_S");
    if (stall) { /* seconds, as curl counts them: a whole number 1-3600 */
        char *end;
        errno = 0;
        long v = strtol(stall, &end, 10);
        if (errno || end == stall || *end || v < 1 || v > 3600) {
            rc =
                stk_error_set(err, STK_E_ARG,
                              "STOKER_S3_STALL_S=%.40s: not a whole number of seconds from 1 to 3600", stall);
            goto done;
        }
        out->stall_s = (double)v;
    }

    /* Region and endpoint. */
    if (dup_to(&out->region, first(c->region, env("AWS_REGION"), env("AWS_DEFAULT_REGION"),
                                   pc.v[P_REGION] ? pc.v[P_REGION] : "us-east-1")))
        goto oom;
    const char *ep = first(c->endpoint, env("AWS_ENDPOINT_URL_S3"), env("AWS_ENDPOINT_URL"),
                           first(env("S3_ENDPOINT_URL"), pc.v[P_S3_ENDPOINT], pc.v[P_ENDPOINT], NULL));
    int custom = ep != NULL;
    if (a->s3) {
        char dflt[200];
        if (!ep) {
            snprintf(dflt, sizeof dflt, "https://s3.%.100s.amazonaws.com", out->region);
            ep = dflt;
        }
        if ((rc = stk__rendpoint_check(ep, &out->endpoint, err))) goto done;
    }

    /* Addressing. */
    int addr = c->addressing;
    if (addr == STK__ADDR_AUTO && pc.v[P_ADDRESSING]) {
        if (!strcmp(pc.v[P_ADDRESSING], "path")) addr = STK__ADDR_PATH;
        else if (!strcmp(pc.v[P_ADDRESSING], "virtual")) addr = STK__ADDR_VIRTUAL;
    }
    if (addr == STK__ADDR_AUTO)
        addr = (custom || (a->bucket && strchr(a->bucket, '.'))) ? STK__ADDR_PATH : STK__ADDR_VIRTUAL;
    out->virtual_host = a->s3 && addr == STK__ADDR_VIRTUAL;

    /* CA bundle: a missing file is an error naming it (curl would say only
     * that the certificate could not be verified). */
    const char *ca = first(c->ca_bundle, env("AWS_CA_BUNDLE"), pc.v[P_CA], NULL);
    if (ca) {
        struct stat st;
        if (stat(ca, &st) || !S_ISREG(st.st_mode)) {
            rc = stk_error_set(err, STK_E_IO, "CA bundle %.300s (%s): %s", ca,
                               c->ca_bundle           ? "the options"
                               : env("AWS_CA_BUNDLE") ? "AWS_CA_BUNDLE"
                                                      : "the profile's ca_bundle",
                               stat(ca, &st) ? strerror(errno) : "not a regular file");
            goto done;
        }
        if (dup_to(&out->ca_bundle, ca)) goto oom;
    }

    /* Credentials. */
    char src[320];
    if (!out->anonymous) {
        const char *ak = NULL, *sk = NULL, *tok = NULL;
        src[0] = '\0';
        if (c->access_key && c->secret_key) {
            ak = c->access_key, sk = c->secret_key, tok = c->session_token;
            snprintf(src, sizeof src, "the options");
        } else if (env("AWS_ACCESS_KEY_ID") && env("AWS_SECRET_ACCESS_KEY") && !(c->profile)) {
            ak = env("AWS_ACCESS_KEY_ID"), sk = env("AWS_SECRET_ACCESS_KEY"), tok = env("AWS_SESSION_TOKEN");
            snprintf(src, sizeof src, "AWS_ACCESS_KEY_ID");
        } else if ((env("AWS_WEB_IDENTITY_TOKEN_FILE") && env("AWS_ROLE_ARN")) ||
                   (pc.v[P_WI_FILE] && pc.v[P_ROLE_ARN])) {
            int from_env = env("AWS_WEB_IDENTITY_TOKEN_FILE") && env("AWS_ROLE_ARN");
            char session[64];
            snprintf(session, sizeof session, "stoker-%ld", (long)time(NULL));
            char dflt[200];
            snprintf(dflt, sizeof dflt, "https://sts.%.100s.amazonaws.com", out->region);
            const char *sts =
                first(env("AWS_ENDPOINT_URL_STS"), env("AWS_ENDPOINT_URL"), pc.v[P_ENDPOINT], dflt);
            if (dup_to(&out->wi_token_file,
                       from_env ? env("AWS_WEB_IDENTITY_TOKEN_FILE") : pc.v[P_WI_FILE]) ||
                dup_to(&out->wi_role_arn, from_env ? env("AWS_ROLE_ARN") : pc.v[P_ROLE_ARN]) ||
                dup_to(&out->wi_session, first(from_env ? env("AWS_ROLE_SESSION_NAME") : NULL,
                                               pc.v[P_ROLE_SESSION], session, NULL)))
                goto oom;
            if ((rc = stk__rendpoint_check(sts, &out->sts_endpoint, err))) goto done;
            snprintf(src, sizeof src, "web identity (%.200s)", out->wi_role_arn);
        } else if (pk.v[P_ACCESS] && pk.v[P_SECRET]) {
            ak = pk.v[P_ACCESS], sk = pk.v[P_SECRET], tok = pk.v[P_TOKEN];
            snprintf(src, sizeof src, "profile \"%.200s\" in the credentials file", prof);
        } else if (pk.v[P_PROCESS] || pc.v[P_PROCESS]) {
            if (dup_to(&out->cred_process, pk.v[P_PROCESS] ? pk.v[P_PROCESS] : pc.v[P_PROCESS])) goto oom;
            snprintf(src, sizeof src, "credential_process of profile \"%.200s\"", prof);
        } else if (pc.v[P_ACCESS] && pc.v[P_SECRET]) {
            ak = pc.v[P_ACCESS], sk = pc.v[P_SECRET], tok = pc.v[P_TOKEN];
            snprintf(src, sizeof src, "profile \"%.200s\" in the config file", prof);
        } else if (explicit_profile && !pk.found && !pc.found) {
            rc = stk_error_set(err, STK_E_ARG,
                               "profile \"%.200s\" is in neither ~/.aws/credentials nor ~/.aws/config", prof);
            goto done;
        }
        if (dup_to(&out->cred_source, src[0] ? src : "none") || dup_to(&out->access_key, ak) ||
            dup_to(&out->secret_key, sk) || dup_to(&out->session_token, tok))
            goto oom;
        if (stk__rcfg_renewable(out) && (rc = stk__rcfg_refresh(out, err))) goto done;
    } else if (dup_to(&out->cred_source, "anonymous")) {
        goto oom;
    }
    goto done;
oom:
    rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
done:
    profile_free(&pk);
    profile_free(&pc);
    if (rc) stk__rcfg_free(out);
    return rc;
}
