/*
 * libFuzzer target: an Eiger master and up to three data files it links to by name
 * ("f_master.h5" -> "f_data_000001.h5", ...), from one input split as fuzz_common.h says (the
 * master first). Opened through the master and read (fuzz_h5.h). Seeds: linked sets the writer
 * makes (tests/fuzz/corpus/h5_linked).
 */
#include "fuzz_h5.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[4];
    size_t len[4];
    fuzz_split(data, size, 4, part, len);
    static const char *const names[4] = {"f_master.h5", "f_data_000001.h5", "f_data_000002.h5",
                                         "f_data_000003.h5"};
    char path[1024], master[1024];
    for (int i = 3; i >= 0; i--)
        fuzz_file(names[i], part[i], len[i], i ? path : master, sizeof path);
    fuzz_h5_check(master);
    return 0;
}
