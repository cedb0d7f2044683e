/*
 * libFuzzer target: the slopes table of `spotwave sabre` (cli/cmd_sabre.c's read_slopes), with
 * slopes in radians or in pixels (converted with a pixel and focal length), through a shim that
 * includes the command's source (see fuzz_cli_loop.c). Invariants: an exit code; on success a
 * grid of 2.. lenslets a side, valid lenslets listed, finite slopes, 0 for invalid ones.
 */
#include "../../cli/cmd_sabre.c"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fuzz_file("slopes.csv", data, size, path, sizeof path);
    sabre_opts o;
    memset(&o, 0, sizeof o);
    o.input = path;
    o.have_pixel = o.have_focal = 1;
    o.pixel_um = 5.5;
    o.focal_mm = 4.0;
    slopes_in s;
    int rc = read_slopes(NULL, &o, &s);
    if (rc != SW_EXIT_OK && rc != SW_EXIT_FAIL)
        abort();
    if (rc == SW_EXIT_OK) {
        const size_t n = (size_t)s.nx * (size_t)s.ny;
        if (s.nx < 2 || s.ny < 2 || !s.valid || !s.slopes || s.nvalid > s.listed ||
            (int64_t)s.listed > s.rows || (size_t)s.listed > n)
            abort();
        int32_t nv = 0;
        for (size_t l = 0; l < n; l++) {
            nv += s.valid[l] != 0;
            if (!isfinite(s.slopes[l]) || !isfinite(s.slopes[n + l]))
                abort();
            if (!s.valid[l] && (s.slopes[l] != 0.0f || s.slopes[n + l] != 0.0f))
                abort();
        }
        if (nv != s.nvalid)
            abort();
    }
    slopes_free(&s);
    return 0;
}
