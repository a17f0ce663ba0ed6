/* tests/remote/test_rconfig.c - addresses, request URLs, canonical queries,
 * and the configuration: the environment, ~/.aws files in a temporary HOME,
 * credential_process through a tiny script. In-process, no server. */
#include "testutil.h"

#include "remote_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

START_TEST(addresses_parsed_strictly)
{
    stk__raddr a;
    stk_error err;
    ck_assert_int_eq(stk__raddr_parse("s3://my-bucket/some/prefix/", &a, &err), STK_OK);
    ck_assert_int_eq(a.s3, 1);
    ck_assert_str_eq(a.bucket, "my-bucket");
    ck_assert_str_eq(a.key, "some/prefix");
    char *j = stk__raddr_join(&a, "shard-0.stk");
    ck_assert_str_eq(j, "s3://my-bucket/some/prefix/shard-0.stk");
    free(j);
    j = stk__raddr_join(&a, "");
    ck_assert_str_eq(j, "s3://my-bucket/some/prefix");
    free(j);
    stk__raddr_free(&a);
    ck_assert_int_eq(stk__raddr_parse("s3://b.with.dots", &a, &err), STK_OK);
    ck_assert_str_eq(a.key, "");
    j = stk__raddr_join(&a, "x");
    ck_assert_str_eq(j, "s3://b.with.dots/x");
    free(j);
    stk__raddr_free(&a);
    ck_assert_int_eq(stk__raddr_parse("https://host.example:8443/data/set/", &a, &err), STK_OK);
    ck_assert_int_eq(a.s3, 0);
    ck_assert_ptr_null(a.bucket);
    ck_assert_str_eq(a.key, "https://host.example:8443/data/set");
    j = stk__raddr_join(&a, "m.json");
    ck_assert_str_eq(j, "https://host.example:8443/data/set/m.json");
    free(j);
    stk__raddr_free(&a);

    const char *bad[] = {"s3://",
                         "s3://ab",
                         "s3://UPPER/x",
                         "s3://-bucket/x",
                         "s3://bucket-/x",
                         "s3://b_u/x",
                         "s3://bucket//x",
                         "s3://bucket/a//b",
                         "s3://bucket/a/./b",
                         "s3://bucket/../b",
                         "s3://bucket/a/..",
                         "s3://bucket/a\tb",
                         "s3:/bucket/x",
                         "S3://bucket/x",
                         "ftp://h/x",
                         "https://",
                         "https://user:pw@host/x",
                         "https://host/a?b",
                         "https://host/a#b",
                         "https://host:99999/x",
                         "https://host:/x",
                         "http://[::1/x",
                         "s3://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_msg(stk__raddr_parse(bad[i], &a, &err) == STK_E_ARG, "%s accepted", bad[i]);
        ck_assert_ptr_null(a.key);
    }
    /* The message names the address, never more than 300 bytes of it. */
    stk__raddr_parse("s3://bucket//x", &a, &err);
    tu_assert_error(&err, STK_E_ARG, "s3://bucket//x");
    ck_assert(stk__remote_is_url("s3://b/x") && stk__remote_is_url("https://h") &&
              stk__remote_is_url("http://h"));
    ck_assert(!stk__remote_is_url("/data/s3://x") && !stk__remote_is_url("S3://b") &&
              !stk__remote_is_url(NULL));
}
END_TEST

START_TEST(request_urls_and_queries)
{
    char *u = stk__rurl_object("http://127.0.0.1:9000", 0, "bkt", "a b/c+d~e%.bin", NULL);
    ck_assert_str_eq(u, "http://127.0.0.1:9000/bkt/a%20b/c%2Bd~e%25.bin");
    free(u);
    u = stk__rurl_object("https://s3.eu-west-1.amazonaws.com", 1, "bkt", "k", "x=1");
    ck_assert_str_eq(u, "https://bkt.s3.eu-west-1.amazonaws.com/k?x=1");
    free(u);
    u = stk__rurl_object("http://h:1/base", 0, "bkt", "", "list-type=2");
    ck_assert_str_eq(u, "http://h:1/base/bkt?list-type=2");
    free(u);
    u = stk__rurl_object("https://h", 1, "bkt", "", "list-type=2");
    ck_assert_str_eq(u, "https://bkt.h/?list-type=2");
    free(u);
    /* Sorted by name, encoded, empty values written "name=". */
    const char *kv[] = {"uploadId", "a/b+c=", "partNumber", "7", "uploads", NULL, "list-type", "2"};
    char *q = stk__rquery(kv, 4);
    ck_assert_str_eq(q, "list-type=2&partNumber=7&uploadId=a%2Fb%2Bc%3D&uploads=");
    free(q);
    q = stk__rquery(NULL, 0);
    ck_assert_str_eq(q, "");
    free(q);
    char *ep;
    stk_error err;
    ck_assert_int_eq(stk__rendpoint_check("http://127.0.0.1:4600/", &ep, &err), STK_OK);
    ck_assert_str_eq(ep, "http://127.0.0.1:4600");
    free(ep);
    ck_assert_int_eq(stk__rendpoint_check("ftp://x", &ep, &err), STK_E_ARG);
    tu_assert_error(&err, STK_E_ARG, "ftp://x");
    ck_assert_int_eq(stk__rendpoint_check("https://u:p@h", &ep, &err), STK_E_ARG);
}
END_TEST

/* ---- Configuration ---------------------------------------------------------- */

static const char *const aws_vars[] = {"AWS_ENDPOINT_URL",
                                       "AWS_ENDPOINT_URL_S3",
                                       "S3_ENDPOINT_URL",
                                       "AWS_REGION",
                                       "AWS_DEFAULT_REGION",
                                       "AWS_ACCESS_KEY_ID",
                                       "AWS_SECRET_ACCESS_KEY",
                                       "AWS_SESSION_TOKEN",
                                       "AWS_PROFILE",
                                       "AWS_DEFAULT_PROFILE",
                                       "AWS_SHARED_CREDENTIALS_FILE",
                                       "AWS_CONFIG_FILE",
                                       "AWS_CA_BUNDLE"};

/* A clean environment and an empty HOME (written into home). */
static void fresh_env(char *home, size_t cap, const char *name)
{
    for (size_t i = 0; i < sizeof aws_vars / sizeof *aws_vars; i++) unsetenv(aws_vars[i]);
    tu_scratch(home, cap, name);
    setenv("HOME", home, 1);
}

static void write_text(const char *dir, const char *rel, const char *text)
{
    char path[TU_PATH];
    tu_join(path, sizeof path, dir, rel);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    mkdir(path, 0700);
    *slash = '/';
    tu_write(path, text, strlen(text));
}

static stk__raddr addr(const char *url)
{
    stk__raddr a;
    stk_error err;
    ck_assert_msg(stk__raddr_parse(url, &a, &err) == STK_OK, "%s", err.msg);
    return a;
}

START_TEST(environment_then_defaults)
{
    char home[TU_PATH];
    fresh_env(home, sizeof home, "cfg_env");
    stk__raddr a = addr("s3://bucket/p");
    stk__rcfg c;
    stk_error err;
    ck_assert_msg(stk__rcfg_resolve(&c, &a, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert_str_eq(c.region, "us-east-1");
    ck_assert_str_eq(c.endpoint, "https://s3.us-east-1.amazonaws.com");
    ck_assert_int_eq(c.virtual_host, 1);
    ck_assert_ptr_null(c.access_key);
    ck_assert_uint_eq(c.max_inflight, 64);
    ck_assert_uint_eq(c.retries, 8);
    stk__rcfg_free(&c);

    setenv("AWS_DEFAULT_REGION", "eu-west-3", 1);
    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "secret-env", 1);
    setenv("AWS_SESSION_TOKEN", "token-env", 1);
    ck_assert_msg(stk__rcfg_resolve(&c, &a, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert_str_eq(c.region, "eu-west-3");
    ck_assert_str_eq(c.endpoint, "https://s3.eu-west-3.amazonaws.com");
    ck_assert_str_eq(c.access_key, "AKIDENV");
    ck_assert_str_eq(c.secret_key, "secret-env");
    ck_assert_str_eq(c.session_token, "token-env");
    stk__rcfg_free(&c);

    /* AWS_REGION before AWS_DEFAULT_REGION; AWS_ENDPOINT_URL before
     * S3_ENDPOINT_URL; a custom endpoint means path style. */
    setenv("AWS_REGION", "ap-south-1", 1);
    setenv("S3_ENDPOINT_URL", "http://streaming:9000/", 1);
    ck_assert_msg(stk__rcfg_resolve(&c, &a, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert_str_eq(c.region, "ap-south-1");
    ck_assert_str_eq(c.endpoint, "http://streaming:9000");
    ck_assert_int_eq(c.virtual_host, 0);
    stk__rcfg_free(&c);
    setenv("AWS_ENDPOINT_URL", "https://minio.local:9000", 1);
    ck_assert_msg(stk__rcfg_resolve(&c, &a, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert_str_eq(c.endpoint, "https://minio.local:9000");
    stk__rcfg_free(&c);

    /* The options before everything. */
    stk__rconfig o = {.endpoint = "http://127.0.0.1:1",
                      .region = "r1",
                      .access_key = "AKIDOPT",
                      .secret_key = "secret-opt",
                      .addressing = STK__ADDR_VIRTUAL,
                      .max_inflight = 5,
                      .retries = 3,
                      .stall_s = 2};
    ck_assert_msg(stk__rcfg_resolve(&c, &a, &o, &err) == STK_OK, "%s", err.msg);
    ck_assert_str_eq(c.endpoint, "http://127.0.0.1:1");
    ck_assert_str_eq(c.region, "r1");
    ck_assert_str_eq(c.access_key, "AKIDOPT");
    ck_assert_ptr_null(c.session_token);
    ck_assert_int_eq(c.virtual_host, 1);
    ck_assert_uint_eq(c.max_inflight, 5);
    ck_assert_uint_eq(c.retries, 3);
    ck_assert(c.stall_s == 2);
    stk__rcfg_free(&c);
    /* The stall timeout: the options, STOKER_S3_STALL_S, 30; a bad value named. */
    unsetenv("STOKER_S3_STALL_S");
    ck_assert_msg(stk__rcfg_resolve(&c, &a, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert(c.stall_s == 30);
    stk__rcfg_free(&c);
    setenv("STOKER_S3_STALL_S", "5", 1);
    ck_assert_msg(stk__rcfg_resolve(&c, &a, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert(c.stall_s == 5);
    stk__rcfg_free(&c);
    ck_assert_msg(stk__rcfg_resolve(&c, &a, &o, &err) == STK_OK, "%s", err.msg);
    ck_assert(c.stall_s == 2);
    stk__rcfg_free(&c);
    const char *bad[] = {"0", "-1", "2.5", "x", "3601", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("STOKER_S3_STALL_S", bad[i], 1);
        ck_assert_int_eq(stk__rcfg_resolve(&c, &a, NULL, &err), STK_E_ARG);
        tu_assert_error(&err, STK_E_ARG, "STOKER_S3_STALL_S");
    }
    unsetenv("STOKER_S3_STALL_S");
    stk__raddr_free(&a);

    /* A bucket with a dot on AWS: path style (its certificate would not fit). */
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("S3_ENDPOINT_URL");
    a = addr("s3://my.bucket/x");
    ck_assert_msg(stk__rcfg_resolve(&c, &a, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert_int_eq(c.virtual_host, 0);
    stk__rcfg_free(&c);
    stk__raddr_free(&a);

    /* A bad endpoint is named. */
    setenv("AWS_ENDPOINT_URL", "minio:9000", 1);
    a = addr("s3://bucket/x");
    ck_assert_int_eq(stk__rcfg_resolve(&c, &a, NULL, &err), STK_E_ARG);
    tu_assert_error(&err, STK_E_ARG, "minio:9000");
    stk__raddr_free(&a);
    /* http(s) addresses are unsigned. */
    unsetenv("AWS_ENDPOINT_URL");
    a = addr("https://host/data");
    ck_assert_msg(stk__rcfg_resolve(&c, &a, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert_int_eq(c.anonymous, 1);
    ck_assert_ptr_null(c.access_key);
    stk__rcfg_free(&c);
    stk__raddr_free(&a);
}
END_TEST

START_TEST(profiles_from_aws_files)
{
    char home[TU_PATH];
    fresh_env(home, sizeof home, "cfg_profiles");
    write_text(
        home, ".aws/credentials",
        "# comment\n[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key=secret-default\n\n"
        "[dev]\n  aws_access_key_id = AKIDDEV\n; another comment\nAWS_Secret_Access_Key = secret-dev\n"
        "aws_session_token = token-dev\n");
    write_text(home, ".aws/config",
               "[default]\nregion = eu-central-1\n[profile dev]\nregion = us-west-2\n"
               "endpoint_url = https://ceph.example:7480\ns3 =\n  addressing_style = virtual\n"
               "[profile other]\nregion = sa-east-1\n");
    stk__raddr a = addr("s3://bucket/p");
    stk__rcfg c;
    stk_error err;
    ck_assert_msg(stk__rcfg_resolve(&c, &a, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert_str_eq(c.profile, "default");
    ck_assert_str_eq(c.region, "eu-central-1");
    ck_assert_str_eq(c.access_key, "AKIDDEFAULT");
    ck_assert_str_eq(c.secret_key, "secret-default");
    ck_assert_ptr_null(c.session_token);
    stk__rcfg_free(&c);

    setenv("AWS_PROFILE", "dev", 1);
    ck_assert_msg(stk__rcfg_resolve(&c, &a, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert_str_eq(c.profile, "dev");
    ck_assert_str_eq(c.region, "us-west-2");
    ck_assert_str_eq(c.endpoint, "https://ceph.example:7480");
    ck_assert_int_eq(c.virtual_host, 1);
    ck_assert_str_eq(c.access_key, "AKIDDEV");
    ck_assert_str_eq(c.secret_key, "secret-dev");
    ck_assert_str_eq(c.session_token, "token-dev");
    stk__rcfg_free(&c);

    /* The environment's keys before the profile's. */
    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "secret-env", 1);
    ck_assert_msg(stk__rcfg_resolve(&c, &a, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert_str_eq(c.access_key, "AKIDENV");
    ck_assert_ptr_null(c.session_token);
    stk__rcfg_free(&c);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");

    /* A profile that exists in neither file is named. */
    setenv("AWS_PROFILE", "nope", 1);
    ck_assert_int_eq(stk__rcfg_resolve(&c, &a, NULL, &err), STK_E_ARG);
    tu_assert_error(&err, STK_E_ARG, "\"nope\"");
    /* A profile only in the config file, files moved by the variables. */
    char other[TU_PATH];
    tu_join(other, sizeof other, home, "elsewhere/cfg");
    write_text(home, "elsewhere/cfg",
               "[profile moved]\nregion = moved-1\naws_access_key_id = AKIDM\n"
               "aws_secret_access_key = secret-m\n");
    setenv("AWS_CONFIG_FILE", other, 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
    setenv("AWS_PROFILE", "moved", 1);
    ck_assert_msg(stk__rcfg_resolve(&c, &a, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert_str_eq(c.region, "moved-1");
    ck_assert_str_eq(c.access_key, "AKIDM");
    stk__rcfg_free(&c);

    /* A malformed file is named with its line, and no value is shown. */
    write_text(home, "elsewhere/cfg", "[profile moved]\nregion = x\naws_secret_access_key secret-shown\n");
    ck_assert_int_eq(stk__rcfg_resolve(&c, &a, NULL, &err), STK_E_FORMAT);
    tu_assert_error(&err, STK_E_FORMAT, "line 3");
    tu_assert_error(&err, STK_E_FORMAT, other);
    ck_assert(!strstr(err.msg, "secret-shown"));
    stk__raddr_free(&a);
}
END_TEST

START_TEST(ca_bundle_missing_is_named)
{
    char home[TU_PATH];
    fresh_env(home, sizeof home, "cfg_ca");
    stk__raddr a = addr("s3://bucket/p");
    stk__rcfg c;
    stk_error err;
    setenv("AWS_CA_BUNDLE", "/nonexistent/ca.pem", 1);
    ck_assert_int_eq(stk__rcfg_resolve(&c, &a, NULL, &err), STK_E_IO);
    tu_assert_error(&err, STK_E_IO, "/nonexistent/ca.pem");
    tu_assert_error(&err, STK_E_IO, "AWS_CA_BUNDLE");
    char ca[TU_PATH];
    tu_join(ca, sizeof ca, home, "ca.pem");
    tu_write(ca, "x", 1);
    setenv("AWS_CA_BUNDLE", ca, 1);
    ck_assert_msg(stk__rcfg_resolve(&c, &a, NULL, &err) == STK_OK, "%s", err.msg);
    ck_assert_str_eq(c.ca_bundle, ca);
    stk__rcfg_free(&c);
    unsetenv("AWS_CA_BUNDLE");
    write_text(home, ".aws/config", "[default]\nca_bundle = /nonexistent/profile-ca.pem\n");
    ck_assert_int_eq(stk__rcfg_resolve(&c, &a, NULL, &err), STK_E_IO);
    tu_assert_error(&err, STK_E_IO, "/nonexistent/profile-ca.pem");
    stk__raddr_free(&a);
}
END_TEST

START_TEST(credential_process_runs)
{
    char home[TU_PATH], script[TU_PATH], cfg[4 * TU_PATH];
    fresh_env(home, sizeof home, "cfg_process");
    tu_join(script, sizeof script, home, "creds.sh");
    const char *body =
        "#!/bin/sh\n"
        "echo run >> \"$(dirname \"$0\")/runs\"\n"
        "case \"$1\" in\n"
        "ok) echo '{\"Version\": 1, \"AccessKeyId\": \"AKIDPROC\", \"SecretAccessKey\": \"secret-proc\","
        " \"SessionToken\": \"token-proc\", \"Expiration\": \"2030-01-02T03:04:05Z\"}' ;;\n"
        "fail) echo '{\"Version\": 1, \"AccessKeyId\": \"AKIDX\", \"SecretAccessKey\": \"leak-me\"}';"
        " exit 3 ;;\n"
        "bad) echo '{\"Version\": 2, \"SecretAccessKey\": \"leak-me\"}' ;;\n"
        "esac\n";
    tu_write(script, body, strlen(body));
    chmod(script, 0700);
    snprintf(cfg, sizeof cfg,
             "[profile p]\ncredential_process = %s ok\n[profile f]\ncredential_process = %s fail\n"
             "[profile b]\ncredential_process = %s bad\n",
             script, script, script);
    write_text(home, ".aws/config", cfg);
    stk__raddr a = addr("s3://bucket/p");
    stk__rcfg c;
    stk_error err;
    stk__rconfig o = {.profile = "p"};
    ck_assert_msg(stk__rcfg_resolve(&c, &a, &o, &err) == STK_OK, "%s", err.msg);
    ck_assert_str_eq(c.access_key, "AKIDPROC");
    ck_assert_str_eq(c.secret_key, "secret-proc");
    ck_assert_str_eq(c.session_token, "token-proc");
    ck_assert(c.expiration == 1893553445.0);
    ck_assert_ptr_nonnull(c.cred_process);
    ck_assert_int_eq(stk__rcfg_refresh(&c, &err), STK_OK);
    stk__rcfg_free(&c);
    char runs[TU_PATH];
    tu_join(runs, sizeof runs, home, "runs");
    size_t len;
    uint8_t *text = tu_read(runs, &len);
    ck_assert_uint_eq(len, 8); /* "run\n" twice */
    free(text);

    o.profile = "f";
    ck_assert_int_eq(stk__rcfg_resolve(&c, &a, &o, &err), STK_E_IO);
    tu_assert_error(&err, STK_E_IO, "credential_process of profile \"f\" exited with status 3");
    ck_assert(!strstr(err.msg, "leak-me"));
    o.profile = "b";
    ck_assert_int_eq(stk__rcfg_resolve(&c, &a, &o, &err), STK_E_FORMAT);
    tu_assert_error(&err, STK_E_FORMAT, "\"Version\" is not 1");
    ck_assert(!strstr(err.msg, "leak-me"));
    stk__raddr_free(&a);
}
END_TEST

/* ---- Parsers of untrusted bytes ------------------------------------------------- */

typedef struct {
    char all[2048];
} ini_out;

static int ini_collect(void *ud, const char *section, const char *key, const char *value)
{
    ini_out *o = ud;
    size_t n = strlen(o->all);
    snprintf(o->all + n, sizeof o->all - n, "[%s]%s=%s;", section, key, value);
    return 0;
}

START_TEST(ini_dialect)
{
    ini_out o = {{0}};
    const char *t = "\xef\xbb\xbf"
                    "[ a ]\r\nK = v = w \n\n# c\n;c\n[profile b]\ns3 =\n  Endpoint_URL = http://x\n"
                    "  addressing_style=path\nnext = 1\n";
    /* A byte order mark is not a section: refused on line 1. */
    size_t line = 0;
    ck_assert_int_eq(stk__ini_parse(t, strlen(t), ini_collect, &o, &line), -1);
    ck_assert_uint_eq(line, 1);
    t += 3;
    ck_assert_int_eq(stk__ini_parse(t, strlen(t), ini_collect, &o, &line), 4);
    ck_assert_str_eq(o.all,
                     "[a]k=v = w;[profile b]s3.endpoint_url=http://x;[profile b]s3.addressing_style=path;"
                     "[profile b]next=1;");
    const char *bad[] = {"key = before section\n", "[open\n", "[]\n", "[s]\nno equals\n", "[s]\n= novalue\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(stk__ini_parse(bad[i], strlen(bad[i]), NULL, NULL, NULL) == -1, "%s accepted", bad[i]);
    ck_assert_int_eq(stk__ini_parse("", 0, NULL, NULL, NULL), 0);
    ck_assert_int_eq(stk__ini_parse("[s]\nk=v", 7, NULL, NULL, NULL), 1);
    ck_assert_int_eq(stk__ini_parse("[s]\nk=\0v\n", 9, NULL, NULL, NULL), -1);
}
END_TEST

START_TEST(credential_json_and_times)
{
    char *ak, *sk, *tok;
    double exp;
    stk_error err;
    const char *j = "{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}";
    ck_assert_int_eq(stk__cred_json_parse(j, strlen(j), &ak, &sk, &tok, &exp, &err), STK_OK);
    ck_assert_str_eq(ak, "A");
    ck_assert_str_eq(sk, "S");
    ck_assert_ptr_null(tok);
    ck_assert(exp == 0);
    free(ak);
    free(sk);
    const char *bad[] = {
        "[]",
        "{\"Version\":1}",
        "{\"Version\":\"1\",\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}",
        "{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"Expiration\":\"soon\"}",
        "{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"SessionToken\":5}",
        "{\"Version\":1,\"AccessKeyId\":\"A\\u0000B\",\"SecretAccessKey\":\"S\"}",
        "not json"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_msg(stk__cred_json_parse(bad[i], strlen(bad[i]), &ak, &sk, &tok, &exp, &err) ==
                          STK_E_FORMAT,
                      "%s accepted", bad[i]);
        ck_assert_ptr_null(ak);
    }
    ck_assert(stk__iso8601_parse("1970-01-01T00:00:00Z") == 0);
    ck_assert(stk__iso8601_parse("2000-03-01T00:00:00Z") == 951868800.0);
    ck_assert(stk__iso8601_parse("2030-01-02T03:04:05.5Z") == 1893553445.5);
    ck_assert(stk__iso8601_parse("2030-01-02T04:04:05+01:00") == 1893553445.0);
    const char *bt[] = {"",
                        "2030-01-02",
                        "2030-01-02T03:04:05",
                        "2030-13-02T03:04:05Z",
                        "2030-01-02T03:04:05Zx",
                        "2030-01-02T03:04:05.Z",
                        "2030-01-02 03:04:05Z"};
    for (size_t i = 0; i < sizeof bt / sizeof *bt; i++)
        ck_assert_msg(stk__iso8601_parse(bt[i]) < 0, "%s accepted", bt[i]);
}
END_TEST

START_TEST(xml_bodies)
{
    char code[64], msg[64];
    const char *e =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>"
        "<Message>The key &quot;a&amp;b&quot; does not exist.</Message><Key>a&amp;b</Key></Error>";
    ck_assert_int_eq(stk__xml_error(e, strlen(e), code, sizeof code, msg, sizeof msg), 0);
    ck_assert_str_eq(code, "NoSuchKey");
    ck_assert_str_eq(msg, "The key \"a&b\" does not exist.");
    /* Truncated to the buffers; not an Error root: -1. */
    ck_assert_int_eq(stk__xml_error(e, strlen(e), code, 4, msg, 5), 0);
    ck_assert_str_eq(code, "NoS");
    ck_assert_str_eq(msg, "The ");
    const char *notxml[] = {"<Other><Code>x</Code></Other>",
                            "<Error><Code>x</Code>",
                            "<Error><Code>x</Error></Code>",
                            "<!DOCTYPE x [<!ENTITY a \"b\">]><Error><Code>&a;</Code></Error>",
                            "<Error><Code><![CDATA[x]]></Code></Error>",
                            "<Error><Code>&bogus;</Code></Error>",
                            "<Error><Code>&#0;</Code></Error>",
                            "<Error/><Error/>",
                            "text<Error/>",
                            ""};
    for (size_t i = 0; i < sizeof notxml / sizeof *notxml; i++)
        ck_assert_msg(stk__xml_error(notxml[i], strlen(notxml[i]), code, sizeof code, msg, sizeof msg) == -1,
                      "%s accepted", notxml[i]);
    char deep[2000] = "";
    for (int i = 0; i < 40; i++) strcat(deep, "<a>");
    ck_assert_int_eq(stk__xml_error(deep, strlen(deep), code, sizeof code, msg, sizeof msg), -1);

    const char *l1 =
        "<?xml version=\"1.0\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Name>b</Name><IsTruncated>true</IsTruncated><NextContinuationToken>t&amp;1</NextContinuationToken>"
        "<Contents><Key>k&lt;1&gt; "
        "&apos;&#x263A;&#65;</Key><Size>12</Size><ETag>&quot;e&quot;</ETag></Contents>"
        "<Contents><Key>k2</Key><Size>18446744073709551615</Size></Contents>"
        "<CommonPrefixes><Prefix>p/</Prefix></CommonPrefixes></ListBucketResult>";
    stk__rlist l = {0};
    int truncated;
    char *next;
    stk_error err;
    ck_assert_msg(stk__xml_list(l1, strlen(l1), &l, &truncated, &next, &err) == STK_OK, "%s", err.msg);
    ck_assert_int_eq(truncated, 1);
    ck_assert_str_eq(next, "t&1");
    free(next);
    ck_assert_uint_eq(l.n, 2);
    ck_assert_str_eq(l.keys[0], "k<1> '\xe2\x98\xba"
                                "A");
    ck_assert_uint_eq(l.sizes[0], 12);
    ck_assert_uint_eq(l.sizes[1], UINT64_MAX);
    /* A second page appends; a bad page leaves the list as it was. */
    const char *l2 = "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>k3</Key><Size>0</Size>"
                     "</Contents></ListBucketResult>";
    ck_assert_int_eq(stk__xml_list(l2, strlen(l2), &l, &truncated, &next, &err), STK_OK);
    ck_assert_uint_eq(l.n, 3);
    ck_assert_int_eq(truncated, 0);
    ck_assert_ptr_null(next);
    const char *badl[] = {
        "<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>",
        ("<ListBucketResult><Contents><Key>k</Key><Size>18446744073709551616</Size></Contents>"
         "</ListBucketResult>"),
        "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
        "<ListBucketResult><IsTruncated>yes</IsTruncated></ListBucketResult>",
        "<Error><Code>x</Code></Error>",
        "<ListBucketResult><Contents><Key>a</Key><Size>1</Size></Contents><Contents><Key>b</Key>"};
    for (size_t i = 0; i < sizeof badl / sizeof *badl; i++) {
        ck_assert_msg(stk__xml_list(badl[i], strlen(badl[i]), &l, &truncated, &next, &err) == STK_E_FORMAT,
                      "%s accepted", badl[i]);
        ck_assert_uint_eq(l.n, 3);
    }
    stk__rlist_free(&l);

    const char *in =
        "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>u-1&amp;2</UploadId>"
        "</InitiateMultipartUploadResult>";
    char *id;
    ck_assert_int_eq(stk__xml_initiate(in, strlen(in), &id, &err), STK_OK);
    ck_assert_str_eq(id, "u-1&2");
    free(id);
    ck_assert_int_eq(stk__xml_initiate(e, strlen(e), &id, &err), STK_E_FORMAT);
    ck_assert_ptr_null(id);
    char *t = stk__xml_text(in, strlen(in), "Key");
    ck_assert_str_eq(t, "k");
    free(t);
    ck_assert_ptr_null(stk__xml_text(in, strlen(in), "Nope"));
}
END_TEST

START_TEST(http_headers_and_content_range)
{
    uint64_t f, l, t;
    ck_assert_int_eq(stk__rhttp_content_range("bytes 0-0/1", 11, &f, &l, &t), 0);
    ck_assert(f == 0 && l == 0 && t == 1);
    const char *cr = "bytes 100-199/18446744073709551615";
    ck_assert_int_eq(stk__rhttp_content_range(cr, strlen(cr), &f, &l, &t), 0);
    ck_assert(f == 100 && l == 199 && t == UINT64_MAX);
    ck_assert_int_eq(stk__rhttp_content_range("bytes 5-9/*", 11, &f, &l, &t), 0);
    ck_assert(t == UINT64_MAX);
    const char *bad[] = {"bytes 9-5/10",
                         "bytes 0-10/10",
                         "bytes -5/10",
                         "bytes 5-/10",
                         "bytes 1-2",
                         "items 1-2/3",
                         "bytes 1-2/3x",
                         "bytes 1-18446744073709551616/*",
                         "bytes  1-2/3",
                         "bytes */10",
                         ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(stk__rhttp_content_range(bad[i], strlen(bad[i]), &f, &l, &t) == -1, "%s accepted",
                      bad[i]);
    long st = 0;
    char name[16], value[16];
    ck_assert_int_eq(
        stk__rhttp_line("HTTP/1.1 206 Partial Content\r\n", 30, &st, name, sizeof name, value, sizeof value),
        0);
    ck_assert_int_eq(st, 206);
    ck_assert_str_eq(name, "");
    ck_assert_int_eq(stk__rhttp_line("HTTP/2 200\r\n", 12, &st, name, sizeof name, value, sizeof value), 0);
    ck_assert_int_eq(st, 200);
    ck_assert_int_eq(
        stk__rhttp_line("Content-Range:  bytes 1-2/3 \r\n", 30, &st, name, sizeof name, value, sizeof value),
        0);
    ck_assert_str_eq(name, "content-range");
    ck_assert_str_eq(value, "bytes 1-2/3");
    /* A value longer than the buffer: truncated, and said so. */
    ck_assert_int_eq(
        stk__rhttp_line("ETag: \"0123456789abcdef\"", 24, &st, name, sizeof name, value, sizeof value), 1);
    const char *badh[] = {"HTTP/1.1 20 OK",
                          "HTTP/1.1 2000",
                          "HTTP/1.1",
                          ": x",
                          "No colon",
                          "Bad Name: x",
                          "A-very-long-header-name: x"};
    for (size_t i = 0; i < sizeof badh / sizeof *badh; i++)
        ck_assert_msg(
            stk__rhttp_line(badh[i], strlen(badh[i]), &st, name, sizeof name, value, sizeof value) == -1,
            "%s accepted", badh[i]);
}
END_TEST

TU_MAIN("remote_config", {.name = "url", .tests = {addresses_parsed_strictly, request_urls_and_queries}},
        {.name = "config",
         .tests = {environment_then_defaults, profiles_from_aws_files, ca_bundle_missing_is_named,
                   credential_process_runs}},
        {.name = "parsers",
         .tests = {ini_dialect, credential_json_and_times, xml_bodies, http_headers_and_content_range}})
