/*
 * libFuzzer target: the slopes/centroids table of `spotwave fit` (cli/cmd_fit.c's read_table,
 * then place_rows onto the table's own grid), through a shim that includes the command's source
 * (see fuzz_cli_loop.c). Invariants: an exit code; on success a grid and frames consistent with
 * the rows (every valid lenslet listed, slopes finite). Tables whose frames x lenslets exceed
 * 2^22 are not placed: the command's memory bound for them is issue 24 item 4.
 */
#include "../../cli/cmd_fit.c"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fuzz_file("slopes.csv", data, size, path, sizeof path);
    slopes_in s;
    int rc = read_table(NULL, path, &s);
    if (rc != SW_EXIT_OK && rc != SW_EXIT_FAIL)
        abort();
    if (rc == SW_EXIT_OK) {
        if (s.rows < 1 || s.nx < 1 || s.ny < 1 || s.frames < 1 || !s.label)
            abort();
        const int64_t nl = (int64_t)s.nx * s.ny;
        if (nl * s.frames <= ((int64_t)1 << 22)) {
            rc = place_rows(NULL, path, s.nx, s.ny, &s);
            if (rc == SW_EXIT_OK) {
                int64_t listed = 0;
                for (int64_t i = 0; i < nl * s.frames; i++) {
                    if (s.valid[i] && (!s.listed[i] || !isfinite(s.dx[i]) || !isfinite(s.dy[i])))
                        abort();
                    listed += s.listed[i];
                }
                if (listed > s.rows)
                    abort();
            } else if (rc != SW_EXIT_FAIL) {
                abort();
            }
        }
    }
    slopes_free(&s);
    return 0;
}
