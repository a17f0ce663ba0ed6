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

TU_MAIN("remote_config", {.name = "url", .tests = {addresses_parsed_strictly, request_urls_and_queries}})
