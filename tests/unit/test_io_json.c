/*
 * JSON string literals (sw_json_write_string): quotes, the escapes, control characters as
 * \u00XX, valid UTF-8 passed through byte for byte, each invalid byte replaced by the escape
 * \ufffd, and NULL as null.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What sw_json_write_string writes for s, in a malloc'ed string. */
static char *json_of(const char *s)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    assert_non_null(f);
    sw_json_write_string(f, s);
    assert_int_equal(ferror(f), 0);
    assert_int_equal(fclose(f), 0);
    assert_non_null(buf);
    assert_int_equal(strlen(buf), size); /* no '\0' written inside */
    return buf;
}

static void expect_json(const char *in, const char *want)
{
    char *got = json_of(in);
    if (strcmp(got, want) != 0) {
        print_error("input \"%s\": wrote [%s], expected [%s]\n", in ? in : "(NULL)", got, want);
        free(got);
        fail();
    }
    free(got);
}

static void plain_and_escapes(void **state)
{
    (void)state;
    expect_json("", "\"\"");
    expect_json("abc XYZ 0-9 ~", "\"abc XYZ 0-9 ~\"");
    expect_json("say \"hi\"", "\"say \\\"hi\\\"\"");
    expect_json("C:\\dir\\", "\"C:\\\\dir\\\\\"");
    expect_json("/", "\"/\"");       /* '/' needs no escape */
    expect_json("\x7f", "\"\x7f\""); /* DEL is not a control character to JSON */
}

static void control_characters(void **state)
{
    (void)state;
    expect_json("a\nb\rc\td", "\"a\\nb\\rc\\td\"");
    expect_json("\x01", "\"\\u0001\"");
    expect_json("\x1f", "\"\\u001f\"");
    expect_json("\b\f", "\"\\u0008\\u000c\"");
    expect_json("x\x1b[0m", "\"x\\u001b[0m\""); /* an ANSI escape sequence stays harmless */
    /* every control character comes out as an escape, never raw */
    for (int c = 1; c < 0x20; c++) {
        char in[2] = {(char)c, 0};
        char *got = json_of(in);
        assert_true(got[0] == '"' && got[1] == '\\');
        for (const char *p = got; *p; p++)
            assert_true((unsigned char)*p >= 0x20);
        free(got);
    }
}

static void valid_utf8(void **state)
{
    (void)state;
    /* 2, 3 and 4 bytes, the ends of the ranges, passed through unchanged */
    const char *ok[] = {
        "\xC2\xB5m",                  /* U+00B5 micro sign */
        "\xC2\x80",                   /* U+0080, smallest 2-byte */
        "\xDF\xBF",                   /* U+07FF */
        "\xE0\xA0\x80",               /* U+0800, smallest 3-byte */
        "\xE2\x82\xAC 5",             /* U+20AC euro sign */
        "\xED\x9F\xBF",               /* U+D7FF, just below the surrogates */
        "\xEE\x80\x80",               /* U+E000, just above them */
        "\xEF\xBF\xBF",               /* U+FFFF */
        "\xF0\x90\x80\x80",           /* U+10000, smallest 4-byte */
        "\xF0\x9F\x94\xAD telescope", /* U+1F52D */
        "\xF4\x8F\xBF\xBF",           /* U+10FFFF, the last code point */
        "NVIDIA H100 80GB HBM3 \xE2\x80\x94 \xCE\xBC",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char want[128];
        snprintf(want, sizeof want, "\"%s\"", ok[i]);
        expect_json(ok[i], want);
    }
}

static void invalid_bytes_replaced(void **state)
{
    (void)state;
    /* one \ufffd escape per invalid byte; what follows is read afresh */
    expect_json("\xFF", "\"\\ufffd\"");
    expect_json("a\x80z", "\"a\\ufffdz\"");                   /* lone continuation byte */
    expect_json("\xC0\xAF", "\"\\ufffd\\ufffd\"");            /* overlong '/' */
    expect_json("\xC1\xBF", "\"\\ufffd\\ufffd\"");            /* overlong */
    expect_json("\xE0\x80\xAF", "\"\\ufffd\\ufffd\\ufffd\""); /* overlong 3-byte */
    expect_json("\xED\xA0\x80", "\"\\ufffd\\ufffd\\ufffd\""); /* surrogate U+D800 */
    expect_json("\xF0\x80\x80\xAF", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""); /* overlong 4-byte */
    expect_json("\xF4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""); /* beyond U+10FFFF */
    expect_json("\xF5\xBF", "\"\\ufffd\\ufffd\"");                       /* no such lead byte */
    /* truncated sequences: at the end of the string, or cut by an ASCII byte */
    expect_json("ab\xC2", "\"ab\\ufffd\"");
    expect_json("\xE2\x82", "\"\\ufffd\\ufffd\"");
    expect_json("\xE2\x82z", "\"\\ufffd\\ufffdz\"");
    expect_json("\xF0\x9F\x94", "\"\\ufffd\\ufffd\\ufffd\"");
    /* a valid sequence right after an invalid byte survives */
    expect_json("\xFF\xC2\xB5", "\"\\ufffd\xC2\xB5\"");
    /* the escape is applied after replacement: a quote after a bad lead byte is still escaped */
    expect_json("\xC2\"", "\"\\ufffd\\\"\"");
}

static void null_is_null(void **state)
{
    (void)state;
    expect_json(NULL, "null");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plain_and_escapes), cmocka_unit_test(control_characters),
        cmocka_unit_test(valid_utf8),        cmocka_unit_test(invalid_bytes_replaced),
        cmocka_unit_test(null_is_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
