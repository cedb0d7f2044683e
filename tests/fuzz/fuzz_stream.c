/*
 * libFuzzer target: an image stream's file in ImageStreamIO's layout (sw_stream_open: the header
 * checked against the file, then mapped). A stream that opens is read in full: its info, every
 * slice of a circular buffer, the newest frame (when no write is flagged: a reader waits out a
 * writer for a second), every keyword. Nothing it maps may be touched outside the file.
 */
#include "fuzz_common.h"

#include "spotwave/spotwave.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fuzz_file("s.im.shm", data, size, path, sizeof path);
    sw_stream *s = NULL;
    const sw_status st = sw_stream_open(NULL, fuzz_dir(), "s", &s);
    if (st != SW_OK) {
        if (s)
            abort();
        return 0;
    }
    sw_stream_info in;
    if (sw_stream_get_info(s, &in) != SW_OK || in.frame_bytes == 0 || in.file_bytes != size)
        abort();
    unsigned sum = 0;
    const uint32_t depth = in.circular ? in.size[2] : 1;
    for (uint32_t z = 0; z < depth; z++) {
        const uint8_t *p = sw_stream_slice(s, z);
        if (!p)
            abort();
        for (size_t i = 0; i < in.frame_bytes; i++)
            sum += p[i];
    }
    if (!in.write_flag) {
        void *buf = malloc(in.frame_bytes);
        if (!buf)
            abort();
        uint64_t c0 = 0;
        (void)sw_stream_read(s, buf, in.frame_bytes, &c0);
        free(buf);
    }
    const int32_t nk = sw_stream_keyword_count(s);
    for (int32_t i = 0; i < nk; i++) {
        char name[17], sv[17], comment[81], type = 0;
        int64_t iv = 0;
        double dv = 0.0;
        if (sw_stream_keyword_get(s, i, name, &type, &iv, &dv, sv, comment) == SW_OK)
            sum += (unsigned)strlen(name) + (unsigned)strlen(sv) + (unsigned)strlen(comment);
    }
    if (sum == 1u && size == 0)
        abort();
    sw_stream_close(s);
    return 0;
}
