/*
 * libFuzzer target: one HDF5 file (an Eiger data file, or a master whose data is inside it),
 * written to a temporary file and opened and read through sw_h5_open_ex (fuzz_h5.h says what
 * must hold). Seeds: every layout the writer makes (tests/fuzz/corpus/h5).
 */
#include "fuzz_h5.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fuzz_file("f.h5", data, size, path, sizeof path);
    fuzz_h5_check(path);
    return 0;
}
