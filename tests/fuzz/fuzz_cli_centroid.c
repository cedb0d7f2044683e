/*
 * libFuzzer target: the tables of `spotwave centroid` (cli/cmd_centroid.c): the look-up table
 * (read_lut, u8 and u16 frames), the reference positions (read_lenslet_table, every lenslet of a
 * grid exactly once) and the lenslet mask (any subset), through a shim that includes the
 * command's source (see fuzz_cli_loop.c). The first input byte picks the grid (1..16 a side).
 * Invariants: an exit code; a LUT of exactly 256 or 65536 finite values; a table whose listed
 * lenslets are in the grid, each once, all of them when exact.
 */
#include "../../cli/cmd_centroid.c"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int32_t nx = 1 + (data[0] & 15), ny = 1 + (data[0] >> 4);
    char path[1024];
    fuzz_file("table.csv", data + 1, size - 1, path, sizeof path);
    for (int t = 0; t < 2; t++) {
        float *lut = NULL;
        int rc = read_lut(NULL, path, t ? SW_PIX_U16 : SW_PIX_U8, &lut);
        if (rc != SW_EXIT_OK && rc != SW_EXIT_FAIL)
            abort();
        if (rc == SW_EXIT_OK) {
            for (int i = 0; i < (t ? 65536 : 256); i++)
                if (!isfinite(lut[i]))
                    abort();
            free(lut);
        }
    }
    const int32_t nl = nx * ny;
    double *vals[2] = {malloc(sizeof(double) * (size_t)nl), malloc(sizeof(double) * (size_t)nl)};
    uint8_t *seen = malloc((size_t)nl);
    if (!vals[0] || !vals[1] || !seen)
        abort();
    static const char *const ref_names[2] = {"x_px", "y_px"};
    static const char *const mask_names[1] = {"valid"};
    for (int exact = 0; exact < 2; exact++) {
        int rc = read_lenslet_table(NULL, exact ? "reference CSV" : "mask", path, nx, ny, exact,
                                    exact ? ref_names : mask_names, exact ? 2 : 1, vals, seen);
        if (rc != SW_EXIT_OK && rc != SW_EXIT_FAIL)
            abort();
        if (rc == SW_EXIT_OK && exact)
            for (int32_t l = 0; l < nl; l++)
                if (!seen[l])
                    abort();
    }
    free(vals[0]);
    free(vals[1]);
    free(seen);
    return 0;
}
