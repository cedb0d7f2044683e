/*
 * libFuzzer target: the per-pixel maps of `spotwave find` (--mask, --gain-map: cli/cmd_find.c's
 * read_map, FITS or PGM through sw_cli_read_frames), through a shim that includes the command's
 * source (see fuzz_cli_loop.c). The first input byte picks the frame size (1..16 a side).
 * Invariants: an exit code; on success a map of exactly the frame's pixels.
 */
#include "../../cli/cmd_find.c"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    find_job j;
    memset(&j, 0, sizeof j);
    j.in.width = 1 + (data[0] & 15);
    j.in.height = 1 + (data[0] >> 4);
    char path[1024];
    fuzz_file("map.fits", data + 1, size - 1, path, sizeof path);
    float *m = NULL;
    int rc = read_map(NULL, &j, "mask", path, &m);
    if (rc != SW_EXIT_OK && rc != SW_EXIT_FAIL)
        abort();
    if (rc == SW_EXIT_OK) {
        float s = 0.0f;
        for (int32_t i = 0; i < j.in.width * j.in.height; i++)
            s += m[i] == m[i] ? 0.0f : 1.0f;
        if (s < 0.0f)
            abort();
        free(m);
    }
    return 0;
}
