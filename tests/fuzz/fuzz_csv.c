/*
 * libFuzzer target: the CSV reader (sw_csv_read) on a file. Invariants: a failure leaves the
 * table zeroed; a success has at least one named column, every column nrows values, and
 * capacity >= nrows; sw_table_column finds every name it read.
 */
#include "fuzz_common.h"
#include "spotwave/spotwave.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fuzz_file("t.csv", data, size, path, sizeof path);
    sw_table t;
    memset(&t, 0x5A, sizeof t);
    sw_status st = sw_csv_read(NULL, path, &t);
    if (st != SW_OK) {
        if (t.ncols != 0 || t.nrows != 0 || t.names || t.cols)
            abort();
        if (st != SW_EFORMAT && st != SW_EIO && st != SW_ENOMEM)
            abort();
        return 0;
    }
    if (t.ncols < 1 || t.nrows < 0 || !t.names || !t.cols || t.capacity < t.nrows)
        abort();
    double sum = 0.0;
    for (int32_t c = 0; c < t.ncols; c++) {
        if (!t.names[c] || (t.nrows > 0 && !t.cols[c]))
            abort();
        int32_t k = sw_table_column(&t, t.names[c]);
        if (k < 0 || k > c || strcmp(t.names[k], t.names[c]) != 0)
            abort();
        for (int64_t r = 0; r < t.nrows; r++)
            sum += t.cols[c][r] == t.cols[c][r] ? 0.0 : 1.0; /* every value is readable */
    }
    if (sum < 0.0)
        abort();
    sw_table_free(&t);
    return 0;
}
