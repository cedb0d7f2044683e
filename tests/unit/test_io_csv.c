/*
 * CSV tables: bit-exact round trips (non-finite values included), the tolerated syntax
 * (comments, blank lines, CRLF, blanks around cells, quoted names, very long lines) and the
 * errors, which must carry the line number.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sw_status read_text(const char *text, sw_table *t)
{
    const char *path = sw_test_path("in.csv");
    sw_test_write_file(path, text, strlen(text));
    memset(t, 0x5A, sizeof *t);
    sw_status st = sw_csv_read(NULL, path, t);
    if (st != SW_OK) {
        assert_int_equal(t->ncols, 0);
        assert_int_equal(t->nrows, 0);
        assert_null(t->names);
        assert_null(t->cols);
    }
    return st;
}

static void expect_error(const char *text, const char *words1, const char *words2)
{
    sw_table t;
    sw_status st = read_text(text, &t);
    const char *msg = sw_context_error(NULL);
    if (st != SW_EFORMAT || !strstr(msg, words1) || (words2 && !strstr(msg, words2)) ||
        !strstr(msg, "in.csv")) {
        print_error("status %d, message \"%s\"; wanted \"%s\" and \"%s\"\n", st, msg, words1,
                    words2 ? words2 : "");
        fail();
    }
}

static int same_bits(double a, double b)
{
    if (isnan(a))
        return isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

static void table_api(void **state)
{
    (void)state;
    const char *names[3] = {"x_px", "y_px", "flux_e"};
    sw_table t;
    assert_int_equal(sw_table_create(NULL, 3, names, &t), SW_OK);
    assert_int_equal(t.ncols, 3);
    assert_int_equal(t.nrows, 0);
    assert_int_equal(sw_table_column(&t, "y_px"), 1);
    assert_int_equal(sw_table_column(&t, "z"), -1);
    assert_int_equal(sw_table_column(NULL, "z"), -1);
    for (int i = 0; i < 1000; i++) {
        double row[3] = {i, -i, i * 0.5};
        assert_int_equal(sw_table_append(NULL, &t, row), SW_OK);
    }
    assert_int_equal(t.nrows, 1000);
    assert_true(t.capacity >= 1000);
    assert_true(t.cols[2][999] == 499.5);
    assert_true(t.cols[1][500] == -500.0);
    sw_table_free(&t);
    assert_null(t.cols);
    sw_table_free(&t);
    sw_table_free(NULL);

    assert_int_equal(sw_table_create(NULL, 0, names, &t), SW_EINVAL);
    assert_int_equal(sw_table_create(NULL, 3, NULL, &t), SW_EINVAL);
    const char *bad[2] = {"a", NULL};
    assert_int_equal(sw_table_create(NULL, 2, bad, &t), SW_EINVAL);
    const char *nl[2] = {"a", "b\nc"};
    assert_int_equal(sw_table_create(NULL, 2, nl, &t), SW_EINVAL);
    assert_int_equal(sw_table_append(NULL, NULL, (double[]){1}), SW_EINVAL);
}

/* Every double (random bit patterns, extremes, non-finite, -0) comes back bit for bit. */
static void roundtrip_bit_exact(void **state)
{
    (void)state;
    const char *names[4] = {"a", "b_um", "with,comma", "\"quoted\" name"};
    sw_table t;
    assert_int_equal(sw_table_create(NULL, 4, names, &t), SW_OK);
    const double special[] = {0.0,
                              -0.0,
                              1.0 / 3.0,
                              -1e-310,
                              5e-324,
                              1.7976931348623157e308,
                              -2.2250738585072014e-308,
                              NAN,
                              INFINITY,
                              -INFINITY,
                              0.1,
                              123456789.0};
    const size_t ns = sizeof special / sizeof special[0];
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int r = 0; r < 500; r++) {
        double row[4];
        for (int c = 0; c < 4; c++) {
            if (r < (int)ns && c == 0) {
                row[c] = special[r];
                continue;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            double d;
            memcpy(&d, &x, sizeof d);
            row[c] = d; /* any bit pattern: includes NaNs, denormals, huge values */
        }
        assert_int_equal(sw_table_append(NULL, &t, row), SW_OK);
    }
    const char *path = sw_test_path("rt.csv");
    assert_int_equal(sw_csv_write(NULL, path, &t), SW_OK);
    sw_table b;
    assert_int_equal(sw_csv_read(NULL, path, &b), SW_OK);
    assert_int_equal(b.ncols, 4);
    assert_int_equal(b.nrows, 500);
    for (int c = 0; c < 4; c++)
        assert_string_equal(b.names[c], names[c]);
    for (int c = 0; c < 4; c++)
        for (int64_t r = 0; r < 500; r++)
            if (!same_bits(t.cols[c][r], b.cols[c][r])) {
                print_error("column %d row %lld: %.17g became %.17g\n", c, (long long)r,
                            t.cols[c][r], b.cols[c][r]);
                fail();
            }
    assert_true(isinf(b.cols[0][8]) && b.cols[0][8] > 0);
    assert_true(isinf(b.cols[0][9]) && b.cols[0][9] < 0);
    assert_true(signbit(b.cols[0][1]));
    sw_table_free(&b);

    /* an empty table (header only) round-trips too */
    sw_table e;
    assert_int_equal(sw_table_create(NULL, 2, names, &e), SW_OK);
    assert_int_equal(sw_csv_write(NULL, path, &e), SW_OK);
    assert_int_equal(sw_csv_read(NULL, path, &b), SW_OK);
    assert_int_equal(b.ncols, 2);
    assert_int_equal(b.nrows, 0);
    sw_table_free(&b);
    sw_table_free(&e);
    sw_table_free(&t);
}

static void tolerated_syntax(void **state)
{
    (void)state;
    sw_table t;
    const char *text = "\xEF\xBB\xBF# produced by a test\r\n"
                       "\r\n"
                       "  x_px , \"y px\",\t\"a \"\"q\"\"\"  \r\n"
                       "# a comment between rows\n"
                       "1,2,3\r\n"
                       "   \t \n"
                       "  -1.5e3 ,\t nan , inf\n"
                       "  # indented comment\n"
                       "0x10,-INF,\"7\"\n"
                       "4,5,6"; /* no newline at the end */
    assert_int_equal(read_text(text, &t), SW_OK);
    assert_int_equal(t.ncols, 3);
    assert_string_equal(t.names[0], "x_px");
    assert_string_equal(t.names[1], "y px");
    assert_string_equal(t.names[2], "a \"q\"");
    assert_int_equal(t.nrows, 4);
    assert_true(t.cols[0][0] == 1 && t.cols[1][0] == 2 && t.cols[2][0] == 3);
    assert_true(t.cols[0][1] == -1500.0);
    assert_true(isnan(t.cols[1][1]));
    assert_true(isinf(t.cols[2][1]) && t.cols[2][1] > 0);
    assert_true(t.cols[0][2] == 16.0);
    assert_true(isinf(t.cols[1][2]) && t.cols[1][2] < 0);
    assert_true(t.cols[2][2] == 7.0);
    assert_true(t.cols[2][3] == 6.0);
    assert_int_equal(sw_table_column(&t, "y px"), 1);
    sw_table_free(&t);

    /* header only: a valid table with no rows */
    assert_int_equal(read_text("# comment\na,b\n\n", &t), SW_OK);
    assert_int_equal(t.ncols, 2);
    assert_int_equal(t.nrows, 0);
    sw_table_free(&t);
}

/* Lines of 100k characters and more are read whole, not truncated. */
static void long_lines(void **state)
{
    (void)state;
    size_t n = 100000;
    char *text = malloc(3 * n + 200);
    assert_non_null(text);
    char *p = text;
    p += sprintf(p, "a,b\n#");
    memset(p, 'c', n); /* a 100k-character comment */
    p += n;
    p += sprintf(p, "\n1,");
    memset(p, ' ', n); /* a cell padded with 100k blanks */
    p += n;
    p += sprintf(p, "2.5\n3,");
    memset(p, '0', n); /* 100k leading zeros: the number is 1.25 */
    p += n;
    p += sprintf(p, "1.25\n");
    sw_table t;
    assert_int_equal(read_text(text, &t), SW_OK);
    assert_int_equal(t.nrows, 2);
    assert_true(t.cols[1][0] == 2.5);
    assert_true(t.cols[1][1] == 1.25);
    sw_table_free(&t);

    /* many columns: a header and rows of ~120k characters, written and read back */
    int32_t nc = 5000;
    char **names = malloc(sizeof *names * (size_t)nc);
    for (int32_t i = 0; i < nc; i++) {
        names[i] = malloc(16);
        snprintf(names[i], 16, "col%d", (int)i);
    }
    assert_int_equal(sw_table_create(NULL, nc, (const char *const *)names, &t), SW_OK);
    double *row = malloc(sizeof *row * (size_t)nc);
    for (int r = 0; r < 3; r++) {
        for (int32_t i = 0; i < nc; i++)
            row[i] = (r + 1) * 1.0 / (i + 3);
        assert_int_equal(sw_table_append(NULL, &t, row), SW_OK);
    }
    const char *path = sw_test_path("wide.csv");
    assert_int_equal(sw_csv_write(NULL, path, &t), SW_OK);
    sw_table b;
    assert_int_equal(sw_csv_read(NULL, path, &b), SW_OK);
    assert_int_equal(b.ncols, nc);
    assert_int_equal(b.nrows, 3);
    assert_string_equal(b.names[nc - 1], "col4999");
    for (int32_t i = 0; i < nc; i++)
        assert_true(b.cols[i][2] == t.cols[i][2]);
    sw_table_free(&b);
    sw_table_free(&t);
    for (int32_t i = 0; i < nc; i++)
        free(names[i]);
    free(names);
    free(row);
    free(text);
}

static void errors_with_line_numbers(void **state)
{
    (void)state;
    expect_error("", "no header", NULL);
    expect_error("# only a comment\n\n   \n", "no header", NULL);
    expect_error("a,b\n1,2\n\n3\n", "line 4", "1 cell");
    expect_error("a,b\n1,2\n3,4,5\n", "line 3", "3 cells");
    expect_error("# c\r\na,b\r\n1,2\r\n1,x\r\n", "line 4", "\"x\"");
    expect_error("a,b\n1,2abc\n", "line 2", "not a number");
    expect_error("a,b\n1,\n", "line 2", "empty");
    expect_error("a,b\n1,2,\n", "line 2", "3 cells");
    expect_error("a,b\n1 2,3\n", "line 2", "not a number");
    expect_error("a,,b\n", "line 1", "empty name");
    expect_error("a,\"b\n1,2\n", "line 1", "unterminated");
    expect_error("a,\"b\"c\n1,2\n", "line 1", "after the closing quote");
    expect_error("a,b\n1,\"2\"x\n", "line 2", "closing quote");
    /* found by fuzz_csv: a carriage return inside a header name was SW_EINVAL */
    expect_error("\xEF\xBB\xBF\n\ri0nf,1inf\n-\n", "line 2", "line break");
    const char nul[] = "a,b\n1,2\0\n";
    const char *path = sw_test_path("nul.csv");
    sw_test_write_file(path, nul, sizeof nul - 1);
    sw_table t;
    assert_int_equal(sw_csv_read(NULL, path, &t), SW_EFORMAT);
    assert_non_null(strstr(sw_context_error(NULL), "line 2"));

    memset(&t, 0x5A, sizeof t);
    assert_int_equal(sw_csv_read(NULL, sw_test_path("missing.csv"), &t), SW_EIO);
    assert_null(t.cols);
    assert_non_null(strstr(sw_context_error(NULL), "missing.csv"));
    assert_int_equal(sw_csv_read(NULL, sw_test_tmpdir(), &t), SW_EIO);
    assert_int_equal(sw_csv_read(NULL, NULL, &t), SW_EINVAL);
    assert_int_equal(sw_csv_read(NULL, path, NULL), SW_EINVAL);
}

static void write_errors(void **state)
{
    (void)state;
    const char *names[1] = {"v"};
    sw_table t;
    assert_int_equal(sw_table_create(NULL, 1, names, &t), SW_OK);
    assert_int_equal(sw_table_append(NULL, &t, (double[]){1.0}), SW_OK);
    assert_int_equal(sw_csv_write(NULL, NULL, &t), SW_EINVAL);
    assert_int_equal(sw_csv_write(NULL, sw_test_path("x.csv"), NULL), SW_EINVAL);
    const char *missing = sw_test_path("nodir/x.csv");
    assert_int_equal(sw_csv_write(NULL, missing, &t), SW_EIO);
    assert_false(sw_test_file_exists(missing));
    assert_non_null(strstr(sw_context_error(NULL), "x.csv"));
    sw_test_write_file(sw_test_path("cfile"), "x", 1);
    assert_int_equal(sw_csv_write(NULL, sw_test_path("cfile/x.csv"), &t), SW_EIO);
    if (sw_test_readonly_dir("ro")) {
        assert_int_equal(sw_csv_write(NULL, sw_test_path("ro/x.csv"), &t), SW_EIO);
        assert_false(sw_test_file_exists(sw_test_path("ro/x.csv")));
    }
    sw_table_free(&t);
}

/* Text files through a temporary name: nothing at the path until the commit, nothing left after
 * an abort, and an unwritable directory gives SW_EIO. */
static void text_file(void **state)
{
    (void)state;
    const char *path = sw_test_path("text.csv");
    FILE *f = NULL;
    char *tmp = NULL;
    assert_int_equal(sw_text_file_open(NULL, path, &f, &tmp), SW_OK);
    fputs("a,b\n1,2\n", f);
    assert_false(sw_test_file_exists(path));
    assert_int_equal(sw_text_file_commit(NULL, path, tmp, f), SW_OK);
    size_t n = 0;
    char *text = sw_test_read_all(path, &n);
    assert_string_equal(text, "a,b\n1,2\n");
    free(text);
    const char *path2 = sw_test_path("dropped.csv");
    assert_int_equal(sw_text_file_open(NULL, path2, &f, &tmp), SW_OK);
    fputs("x\n", f);
    sw_text_file_abort(tmp, f);
    assert_false(sw_test_file_exists(path2));
    assert_int_equal(sw_test_count_temp_files(), 0);
    const char *ro = sw_test_readonly_dir("ro_text");
    if (ro) {
        char p2[4096];
        snprintf(p2, sizeof p2, "%s/x.csv", ro);
        assert_int_equal(sw_text_file_open(NULL, p2, &f, &tmp), SW_EIO);
        assert_true(strlen(sw_context_error(NULL)) > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table_api),
        cmocka_unit_test(roundtrip_bit_exact),
        cmocka_unit_test(tolerated_syntax),
        cmocka_unit_test(long_lines),
        cmocka_unit_test(errors_with_line_numbers),
        cmocka_unit_test(write_errors),
        cmocka_unit_test(text_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
