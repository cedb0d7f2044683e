/*
 * Zernike coefficient files (zernike.h): CSV tables read and written through io.h's sw_table.
 *
 * A term is named by (n, m), by its OSA/ANSI index j = (n (n + 2) + m) / 2 (OSA/ANSI Z80.28,
 * ISO 24157) or by its Noll index (Noll, J. Opt. Soc. Am. 66, 207 (1976)); the conversions are
 * those of zernike_basis.c. Coefficients are micrometres of optical path difference.
 */
#include "core/core_internal.h"
#include "spotwave/io.h"
#include "spotwave/zernike.h"

#include <math.h>
#include <string.h>

#define SW_ZERNIKE_MAX_COUNT ((SW_ZERNIKE_MAX_ORDER + 1) * (SW_ZERNIKE_MAX_ORDER + 2) / 2)

/* Reads an integer-valued cell: 1 and *out when v is a finite integer that fits in an int. */
static int cell_int(double v, int *out)
{
    if (!isfinite(v) || v != floor(v) || v < -1e9 || v > 1e9)
        return 0;
    *out = (int)v;
    return 1;
}

sw_status sw_zernike_read_csv(sw_context *ctx, const char *path, sw_zernike_coefs *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_zernike_read_csv: out is NULL");
    out->count = 0;
    out->coef_um = NULL;
    if (!path)
        return sw_fail(ctx, SW_EINVAL, "sw_zernike_read_csv: path is NULL");

    sw_table t;
    sw_status st = sw_csv_read(ctx, path, &t);
    if (st != SW_OK)
        return st;

    int32_t cn = sw_table_column(&t, "n");
    int32_t cm = sw_table_column(&t, "m");
    int32_t cj = sw_table_column(&t, "j");
    int32_t cnoll = sw_table_column(&t, "noll");
    int32_t cc = sw_table_column(&t, "coef_um");
    if (cc < 0) {
        st = sw_fail(ctx, SW_EFORMAT, "%s: no coef_um column (the coefficients in micrometres)",
                     path);
        goto done;
    }
    if ((cn >= 0) != (cm >= 0)) {
        st = sw_fail(ctx, SW_EFORMAT, "%s: column %s without column %s: give both n and m", path,
                     cn >= 0 ? "n" : "m", cn >= 0 ? "m" : "n");
        goto done;
    }
    if (cn < 0 && cj < 0 && cnoll < 0) {
        st = sw_fail(ctx, SW_EFORMAT,
                     "%s: no index column: expected n and m, j (OSA/ANSI) or noll (Noll)", path);
        goto done;
    }
    if (t.nrows < 1) {
        st = sw_fail(ctx, SW_EFORMAT, "%s: the table holds no terms", path);
        goto done;
    }

    double value[SW_ZERNIKE_MAX_COUNT];
    int64_t row_of[SW_ZERNIKE_MAX_COUNT]; /* 1-based data row that gave each term, 0: none */
    memset(row_of, 0, sizeof row_of);
    int max_j = -1;
    for (int64_t r = 0; r < t.nrows; r++) {
        long long row = (long long)r + 1;
        int j = -1; /* OSA index of this row, from the first index columns read */
        const char *from = NULL;
        if (cn >= 0) {
            int n = 0, m = 0;
            double vn = t.cols[cn][r], vm = t.cols[cm][r];
            int ok_n = cell_int(vn, &n), ok_m = cell_int(vm, &m);
            if (!ok_n || !ok_m) {
                st = sw_fail(ctx, SW_EFORMAT, "%s: data row %lld: %s = %.17g is not an integer",
                             path, row, ok_n ? "m" : "n", ok_n ? vm : vn);
                goto done;
            }
            if (n < 0) {
                st = sw_fail(ctx, SW_EFORMAT, "%s: data row %lld: radial order n = %d is negative",
                             path, row, n);
                goto done;
            }
            if (m < -n || m > n) {
                st = sw_fail(ctx, SW_EFORMAT, "%s: data row %lld: |m| = %d exceeds n = %d", path,
                             row, m < 0 ? -m : m, n);
                goto done;
            }
            if (n > SW_ZERNIKE_MAX_ORDER) {
                st = sw_fail(ctx, SW_EFORMAT,
                             "%s: data row %lld: radial order n = %d is above the highest "
                             "supported order %d",
                             path, row, n, SW_ZERNIKE_MAX_ORDER);
                goto done;
            }
            if ((n - m) % 2 != 0) {
                st = sw_fail(ctx, SW_EFORMAT,
                             "%s: data row %lld: n - m = %d - (%d) is odd: no such Zernike term",
                             path, row, n, m);
                goto done;
            }
            j = sw_zernike_osa(n, m);
            from = "n,m";
        }
        if (cj >= 0) {
            int jj;
            double v = t.cols[cj][r];
            if (!cell_int(v, &jj)) {
                st = sw_fail(ctx, SW_EFORMAT, "%s: data row %lld: j = %.17g is not an integer",
                             path, row, v);
                goto done;
            }
            if (jj < 0 || jj >= SW_ZERNIKE_MAX_COUNT) {
                st = sw_fail(ctx, SW_EFORMAT,
                             "%s: data row %lld: OSA/ANSI index j = %d is out of range 0 .. %d "
                             "(radial orders up to %d)",
                             path, row, jj, SW_ZERNIKE_MAX_COUNT - 1, SW_ZERNIKE_MAX_ORDER);
                goto done;
            }
            if (from && jj != j) {
                st = sw_fail(ctx, SW_EFORMAT,
                             "%s: data row %lld: the indices disagree: j = %d but %s gives "
                             "j = %d",
                             path, row, jj, from, j);
                goto done;
            }
            j = jj;
            if (!from)
                from = "j";
        }
        if (cnoll >= 0) {
            int jn, n, m;
            double v = t.cols[cnoll][r];
            if (!cell_int(v, &jn)) {
                st = sw_fail(ctx, SW_EFORMAT, "%s: data row %lld: noll = %.17g is not an integer",
                             path, row, v);
                goto done;
            }
            if (jn < 1 || jn > SW_ZERNIKE_MAX_COUNT) {
                st = sw_fail(ctx, SW_EFORMAT,
                             "%s: data row %lld: Noll index %d is out of range 1 .. %d (radial "
                             "orders up to %d)",
                             path, row, jn, SW_ZERNIKE_MAX_COUNT, SW_ZERNIKE_MAX_ORDER);
                goto done;
            }
            if (sw_zernike_noll_nm(jn, &n, &m) != SW_OK) { /* cannot happen after the range check */
                st = sw_fail(ctx, SW_EINTERNAL, "%s: data row %lld: Noll index %d not converted",
                             path, row, jn);
                goto done;
            }
            int jo = sw_zernike_osa(n, m);
            if (from && jo != j) {
                st = sw_fail(ctx, SW_EFORMAT,
                             "%s: data row %lld: the indices disagree: noll = %d is j = %d "
                             "(n = %d, m = %d) but %s gives j = %d",
                             path, row, jn, jo, n, m, from, j);
                goto done;
            }
            j = jo;
        }
        double c = t.cols[cc][r];
        if (!isfinite(c)) {
            st = sw_fail(ctx, SW_EFORMAT, "%s: data row %lld: coef_um is %s", path, row,
                         isnan(c) ? "NaN" : "infinite");
            goto done;
        }
        if (row_of[j]) {
            int n, m;
            sw_zernike_osa_nm(j, &n, &m);
            st = sw_fail(ctx, SW_EFORMAT,
                         "%s: data row %lld: term j = %d (n = %d, m = %d) is given twice (also "
                         "in data row %lld)",
                         path, row, j, n, m, (long long)row_of[j]);
            goto done;
        }
        row_of[j] = row;
        value[j] = c;
        if (j > max_j)
            max_j = j;
    }

    st = sw_zernike_coefs_alloc(ctx, max_j + 1, out);
    if (st != SW_OK)
        goto done;
    for (int j = 0; j <= max_j; j++)
        out->coef_um[j] = row_of[j] ? value[j] : 0.0;

done:
    sw_table_free(&t);
    return st;
}

sw_status sw_zernike_write_csv(sw_context *ctx, const char *path, const sw_zernike_coefs *z)
{
    if (!path || !z)
        return sw_fail(ctx, SW_EINVAL, "sw_zernike_write_csv: %s is NULL", path ? "z" : "path");
    if (z->count < 1 || z->count > SW_ZERNIKE_MAX_COUNT || !z->coef_um)
        return sw_fail(ctx, SW_EINVAL,
                       "sw_zernike_write_csv: %s: the coefficient set is not valid (%d "
                       "coefficients%s; expected 1 .. %d)",
                       path, (int)z->count, z->coef_um ? "" : ", no array", SW_ZERNIKE_MAX_COUNT);
    for (int32_t j = 0; j < z->count; j++)
        if (!isfinite(z->coef_um[j]))
            return sw_fail(ctx, SW_ERANGE,
                           "sw_zernike_write_csv: %s: coefficient j = %d is %s: not written", path,
                           (int)j, isnan(z->coef_um[j]) ? "NaN" : "infinite");

    static const char *const names[] = {"j", "n", "m", "noll", "coef_um"};
    sw_table t;
    sw_status st = sw_table_create(ctx, 5, names, &t);
    if (st != SW_OK)
        return st;
    for (int32_t j = 0; j < z->count && st == SW_OK; j++) {
        int n, m;
        sw_zernike_osa_nm((int)j, &n, &m);
        double row[5] = {(double)j, (double)n, (double)m, (double)sw_zernike_noll(n, m),
                         z->coef_um[j]};
        st = sw_table_append(ctx, &t, row);
    }
    if (st == SW_OK)
        st = sw_csv_write(ctx, path, &t);
    sw_table_free(&t);
    return st;
}
