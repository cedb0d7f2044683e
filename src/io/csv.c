/*
 * Tables of named double columns, read from and written to CSV.
 *
 * Reading: one header row of names (optionally in double quotes, "" for a quote), then rows of
 * numbers; cells separated by commas, blanks around cells ignored, '#' comment lines and blank
 * lines skipped anywhere, CRLF line ends accepted, a UTF-8 byte-order mark at the start ignored.
 * Lines may be of any length. Writing: names quoted only when they need it; numbers with %.17g
 * (bit-exact on reading back), "nan", "inf", "-inf" for non-finite values.
 * Numbers are formatted and parsed in the C locale's style ('.' as the decimal point), which is
 * what the process uses unless the application called setlocale().
 */
#define _POSIX_C_SOURCE 200809L

#include "io/io_internal.h"

#include <math.h>

/* ------------------------------------------------------------------ tables */

void sw_table_free(sw_table *t)
{
    if (!t)
        return;
    for (int32_t i = 0; i < t->ncols; i++) {
        if (t->names)
            free(t->names[i]);
        if (t->cols)
            free(t->cols[i]);
    }
    free(t->names);
    free(t->cols);
    memset(t, 0, sizeof *t);
}

static int name_ok(const char *s)
{
    for (; *s; s++)
        if (*s == '\n' || *s == '\r')
            return 0;
    return 1;
}

sw_status sw_table_create(sw_context *ctx, int32_t ncols, const char *const *names, sw_table *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_table_create: out is NULL");
    memset(out, 0, sizeof *out);
    if (ncols < 1)
        return sw_fail(ctx, SW_EINVAL, "sw_table_create: %d columns: a table needs at least one",
                       (int)ncols);
    if (!names)
        return sw_fail(ctx, SW_EINVAL, "sw_table_create: names is NULL");
    for (int32_t i = 0; i < ncols; i++) {
        if (!names[i])
            return sw_fail(ctx, SW_EINVAL, "sw_table_create: the name of column %d is NULL",
                           (int)i);
        if (!name_ok(names[i]))
            return sw_fail(ctx, SW_EINVAL,
                           "sw_table_create: the name of column %d contains a "
                           "line break",
                           (int)i);
    }
    sw_table t;
    memset(&t, 0, sizeof t);
    t.names = calloc((size_t)ncols, sizeof *t.names);
    t.cols = calloc((size_t)ncols, sizeof *t.cols);
    if (!t.names || !t.cols) {
        free(t.names);
        free(t.cols);
        return sw_fail(ctx, SW_ENOMEM, "sw_table_create: out of memory");
    }
    t.ncols = ncols;
    for (int32_t i = 0; i < ncols; i++) {
        t.names[i] = strdup(names[i]);
        if (!t.names[i]) {
            sw_table_free(&t);
            return sw_fail(ctx, SW_ENOMEM, "sw_table_create: out of memory");
        }
    }
    *out = t;
    return SW_OK;
}

sw_status sw_table_append(sw_context *ctx, sw_table *t, const double *row)
{
    if (!t || !row)
        return sw_fail(ctx, SW_EINVAL, "sw_table_append: %s is NULL", t ? "row" : "table");
    if (t->ncols < 1 || !t->cols || t->nrows < 0 || t->nrows > t->capacity)
        return sw_fail(ctx, SW_EINVAL,
                       "sw_table_append: the table is not valid (create it with "
                       "sw_table_create)");
    if (t->nrows == t->capacity) {
        int64_t cap = t->capacity ? t->capacity * 2 : 64;
        size_t bytes;
        if (t->capacity > INT64_MAX / 4 || !sw_mul_ok((size_t)cap, sizeof(double), &bytes))
            return sw_fail(ctx, SW_ENOMEM, "sw_table_append: table too large");
        SW_TRY(sw_memory_check(ctx, (uint64_t)cap * (uint64_t)t->ncols, sizeof(double),
                               "a table of %lld rows x %d columns", (long long)cap, (int)t->ncols));
        for (int32_t i = 0; i < t->ncols; i++) {
            double *p = realloc(t->cols[i], bytes);
            if (!p)
                return sw_fail(ctx, SW_ENOMEM, "sw_table_append: out of memory for %lld rows",
                               (long long)cap);
            t->cols[i] = p;
        }
        t->capacity = cap;
    }
    for (int32_t i = 0; i < t->ncols; i++)
        t->cols[i][t->nrows] = row[i];
    t->nrows++;
    return SW_OK;
}

int32_t sw_table_column(const sw_table *t, const char *name)
{
    if (!t || !name || !t->names)
        return -1;
    for (int32_t i = 0; i < t->ncols; i++)
        if (t->names[i] && strcmp(t->names[i], name) == 0)
            return i;
    return -1;
}

/* ------------------------------------------------------------------ reading */

typedef struct csv_cell {
    char *s;    /* NUL-terminated in the line buffer */
    size_t len; /* bytes before the terminator (embedded NULs make strlen shorter) */
} csv_cell;

typedef struct csv_cells {
    csv_cell *v;
    size_t n, cap;
} csv_cells;

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/*
 * Splits line[0, len) into cells in place. Returns NULL on success or a static description of
 * the syntax error; *col receives the 1-based character column of the error.
 */
static const char *split_line(char *line, size_t len, csv_cells *cells, size_t *col)
{
    cells->n = 0;
    size_t i = 0;
    for (;;) {
        while (i < len && is_blank(line[i]))
            i++;
        char *start;
        size_t clen;
        if (i < len && line[i] == '"') {
            size_t q = i;
            start = line + i;
            char *dst = start;
            i++;
            for (;;) {
                if (i >= len) {
                    *col = q + 1;
                    return "unterminated quoted cell";
                }
                if (line[i] == '"') {
                    if (i + 1 < len && line[i + 1] == '"') {
                        *dst++ = '"';
                        i += 2;
                        continue;
                    }
                    i++;
                    break;
                }
                *dst++ = line[i++];
            }
            clen = (size_t)(dst - start);
            while (i < len && is_blank(line[i]))
                i++;
            if (i < len && line[i] != ',') {
                *col = i + 1;
                return "text after the closing quote of a cell";
            }
            start[clen] = '\0'; /* dst <= position of the closing quote */
        } else {
            size_t b = i;
            while (i < len && line[i] != ',')
                i++;
            size_t e = i;
            while (e > b && is_blank(line[e - 1]))
                e--;
            start = line + b;
            clen = e - b;
            /* line[e] is a blank, the comma or the terminator written by the reader */
        }
        if (cells->n == cells->cap) {
            size_t cap = cells->cap ? cells->cap * 2 : 16;
            csv_cell *p = realloc(cells->v, cap * sizeof *p);
            if (!p)
                return "out of memory";
            cells->v = p;
            cells->cap = cap;
        }
        int more = i < len; /* stopped on a comma */
        start[clen] = '\0';
        cells->v[cells->n].s = start;
        cells->v[cells->n].len = clen;
        cells->n++;
        if (!more)
            return NULL;
        i++; /* past the comma */
    }
}

/* Shortened copy of a cell for messages. */
static const char *cell_excerpt(const csv_cell *c, char buf[48])
{
    size_t n = c->len < 40 ? c->len : 40;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        buf[k++] = (c->s[i] >= 0x20 && c->s[i] < 0x7F) ? c->s[i] : '?';
    if (c->len > 40) {
        buf[k++] = '.';
        buf[k++] = '.';
        buf[k++] = '.';
    }
    buf[k] = '\0';
    return buf;
}

sw_status sw_csv_read(sw_context *ctx, const char *path, sw_table *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_csv_read: out is NULL");
    memset(out, 0, sizeof *out);
    if (!path)
        return sw_fail(ctx, SW_EINVAL, "sw_csv_read: path is NULL");
    FILE *f = fopen(path, "rb");
    if (!f)
        return sw_fail(ctx, SW_EIO, "%s: cannot open (%s)", path, strerror(errno));

    sw_status st = SW_OK;
    char *line = NULL;
    size_t linecap = 0;
    csv_cells cells = {NULL, 0, 0};
    double *row = NULL;
    sw_table t;
    memset(&t, 0, sizeof t);
    long long lineno = 0, header_line = 0;
    int have_header = 0;
    char buf[48];

    for (;;) {
        errno = 0;
        ssize_t got = getline(&line, &linecap, f);
        if (got < 0) {
            if (ferror(f))
                st = sw_fail(ctx, SW_EIO, "%s: read error after line %lld (%s)", path, lineno,
                             strerror(errno ? errno : EIO));
            else if (errno == ENOMEM)
                st = sw_fail(ctx, SW_ENOMEM, "%s: out of memory reading line %lld", path,
                             lineno + 1);
            break;
        }
        lineno++;
        size_t len = (size_t)got;
        if (len && line[len - 1] == '\n')
            len--;
        if (len && line[len - 1] == '\r')
            len--;
        line[len] = '\0';
        char *s = line;
        if (lineno == 1 && len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
            s += 3;
            len -= 3;
        }
        size_t i = 0;
        while (i < len && is_blank(s[i]))
            i++;
        if (i == len || s[i] == '#')
            continue; /* blank or comment */

        size_t col = 0;
        const char *err = split_line(s, len, &cells, &col);
        if (err) {
            st = strcmp(err, "out of memory") == 0
                     ? sw_fail(ctx, SW_ENOMEM, "%s: line %lld: out of memory", path, lineno)
                     : sw_fail(ctx, SW_EFORMAT, "%s: line %lld, column %zu: %s", path, lineno, col,
                               err);
            break;
        }
        if (!have_header) {
            if (cells.n > INT32_MAX) {
                st = sw_fail(ctx, SW_EFORMAT, "%s: line %lld: too many columns", path, lineno);
                break;
            }
            for (size_t k = 0; k < cells.n; k++) {
                if (cells.v[k].len == 0) {
                    st = sw_fail(ctx, SW_EFORMAT,
                                 "%s: line %lld: header column %zu has an empty "
                                 "name",
                                 path, lineno, k + 1);
                    break;
                }
                if (strlen(cells.v[k].s) != cells.v[k].len) {
                    st = sw_fail(ctx, SW_EFORMAT,
                                 "%s: line %lld: header column %zu contains a "
                                 "NUL byte",
                                 path, lineno, k + 1);
                    break;
                }
                /* (a lone carriage return inside a line; sw_table_create refuses line breaks,
                 * with SW_EINVAL, which would blame the caller for the file) */
                if (strpbrk(cells.v[k].s, "\r\n")) {
                    st = sw_fail(ctx, SW_EFORMAT,
                                 "%s: line %lld: header column %zu contains a line break", path,
                                 lineno, k + 1);
                    break;
                }
            }
            if (st != SW_OK)
                break;
            const char **names = malloc(cells.n * sizeof *names);
            row = malloc(cells.n * sizeof *row);
            if (!names || !row) {
                free(names);
                st = sw_fail(ctx, SW_ENOMEM, "%s: out of memory", path);
                break;
            }
            for (size_t k = 0; k < cells.n; k++)
                names[k] = cells.v[k].s;
            st = sw_table_create(ctx, (int32_t)cells.n, names, &t);
            free(names);
            if (st != SW_OK)
                break;
            have_header = 1;
            header_line = lineno;
            continue;
        }
        if (cells.n != (size_t)t.ncols) {
            st = sw_fail(ctx, SW_EFORMAT,
                         "%s: line %lld: %zu cell%s but the header (line %lld) "
                         "has %d column%s",
                         path, lineno, cells.n, cells.n == 1 ? "" : "s", header_line, (int)t.ncols,
                         t.ncols == 1 ? "" : "s");
            break;
        }
        for (size_t k = 0; k < cells.n; k++) {
            const csv_cell *c = &cells.v[k];
            if (c->len == 0) {
                st = sw_fail(ctx, SW_EFORMAT, "%s: line %lld: cell %zu (column \"%s\") is empty",
                             path, lineno, k + 1, t.names[k]);
                break;
            }
            char *end = NULL;
            errno = 0;
            double v = strtod(c->s, &end);
            if (end != c->s + c->len) {
                st = sw_fail(ctx, SW_EFORMAT,
                             "%s: line %lld: cell %zu (column \"%s\") is not a "
                             "number: \"%s\"",
                             path, lineno, k + 1, t.names[k], cell_excerpt(c, buf));
                break;
            }
            row[k] = v; /* overflow gives +-HUGE_VAL (inf), underflow a denormal or 0 */
        }
        if (st != SW_OK)
            break;
        st = sw_table_append(ctx, &t, row);
        if (st == SW_ENOMEM) { /* the message names the file and its line */
            char m[SW_ERROR_MAX];
            snprintf(m, sizeof m, "%s", sw_context_error(ctx));
            st = sw_fail(ctx, st, "%s, line %lld: %s", path, lineno, m);
        }
        if (st != SW_OK)
            break;
    }
    if (st == SW_OK && !have_header)
        st = sw_fail(ctx, SW_EFORMAT,
                     "%s: no header row (the file is empty or holds only "
                     "comments and blank lines)",
                     path);
    free(line);
    free(cells.v);
    free(row);
    fclose(f);
    if (st != SW_OK) {
        sw_table_free(&t);
        return st;
    }
    *out = t;
    return SW_OK;
}

/* ------------------------------------------------------------------ writing */

static int needs_quotes(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || is_blank(s[0]) || is_blank(s[n - 1]) || s[0] == '#')
        return 1;
    return strpbrk(s, ",\"") != NULL;
}

static void write_name(FILE *f, const char *s)
{
    if (!needs_quotes(s)) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void format_number(double v, char buf[40])
{
    if (isnan(v))
        strcpy(buf, "nan");
    else if (isinf(v))
        strcpy(buf, v > 0 ? "inf" : "-inf");
    else
        snprintf(buf, 40, "%.17g", v);
}

sw_status sw_csv_write(sw_context *ctx, const char *path, const sw_table *t)
{
    if (!path)
        return sw_fail(ctx, SW_EINVAL, "sw_csv_write: path is NULL");
    if (!t)
        return sw_fail(ctx, SW_EINVAL, "%s: table is NULL", path);
    if (t->ncols < 1 || !t->names || t->nrows < 0 || (t->nrows > 0 && !t->cols))
        return sw_fail(ctx, SW_EINVAL, "%s: the table is not valid (%d columns, %lld rows)", path,
                       (int)t->ncols, (long long)t->nrows);
    for (int32_t i = 0; i < t->ncols; i++) {
        if (!t->names[i] || !name_ok(t->names[i]))
            return sw_fail(ctx, SW_EINVAL, "%s: the name of column %d is %s", path, (int)i,
                           t->names[i] ? "not writable (it contains a line break)" : "NULL");
        if (t->nrows > 0 && !t->cols[i])
            return sw_fail(ctx, SW_EINVAL, "%s: column %d (\"%s\") has no data", path, (int)i,
                           t->names[i]);
    }
    char *tmp;
    FILE *f;
    sw_status st = sw_io_tmp_open(ctx, path, &tmp, &f);
    if (st != SW_OK)
        return st;
    for (int32_t i = 0; i < t->ncols; i++) {
        if (i)
            fputc(',', f);
        write_name(f, t->names[i]);
    }
    fputc('\n', f);
    char buf[40];
    for (int64_t r = 0; r < t->nrows && !ferror(f); r++) {
        for (int32_t i = 0; i < t->ncols; i++) {
            if (i)
                fputc(',', f);
            format_number(t->cols[i][r], buf);
            fputs(buf, f);
        }
        fputc('\n', f);
    }
    return sw_io_tmp_commit(ctx, path, tmp, f);
}
