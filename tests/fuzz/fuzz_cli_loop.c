/*
 * libFuzzer target: the loop configuration file (`spotwave loop --config`), parsed by
 * cli/cmd_loop.c's read_config and build_config. The command's readers are static functions of
 * the command, so this file includes cli/cmd_loop.c (a shim) and links the rest of the command
 * from sw_cli_fuzz (tests/CMakeLists.txt). Invariants: the result is an exit code (0, 1, 2); on
 * success frames > warmup and every double setting is finite.
 */
#include "../../cli/cmd_loop.c"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fuzz_file("loop.cfg", data, size, path, sizeof path);
    loop_opts o;
    memset(&o, 0, sizeof o);
    o.config = path;
    int rc = build_config(&o);
    if (rc != SW_EXIT_OK && rc != SW_EXIT_FAIL && rc != SW_EXIT_USAGE)
        abort();
    if (rc == SW_EXIT_OK) {
        if (o.frames <= o.p.warmup)
            abort();
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            if (keys[i].type == KT_DOUBLE &&
                !isfinite(*(const double *)(const void *)((const char *)&o.p + keys[i].offset)))
                abort();
    }
    return 0;
}
