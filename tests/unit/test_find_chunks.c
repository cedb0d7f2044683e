/*
 * sw_find_sequence_chunks (find_sequence.c) on a CPU plan: frames given as stored bitshuffle/LZ4
 * chunks, read and decoded by 1 to 6 reader threads, give exactly the spots and statistics of
 * sw_find_sequence over the frames decoded one at a time, in 2-D and 3-D, with frames the chunk
 * source does not give (read decoded instead) mixed in and a frame with an LZ4 offset of 0 (which
 * liblz4 decodes); a damaged frame fails the run with SW_EFORMAT naming the frame and the CPU
 * decoder's reason, and leaves the spot list as it was. The GPU's twin: test_gpu_find_chunks.
 */
#include "find_chunks_cases.h"
#include "testutil.h"

static sw_context *cpu, *cpu1;

static int setup(void **state)
{
    (void)state;
    cpu = sw_test_cpu_context(0);
    cpu1 = sw_test_cpu_context(1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(cpu);
    sw_context_destroy(cpu1);
    return 0;
}

static void same_spots(void **state)
{
    (void)state;
    make_frames();
    for (int readers = 1; readers <= 6; readers += 5) {
        chunks_compare(cpu, cpu, 0, readers, 0);
        chunks_compare(cpu, cpu1, 1, readers, 0);
    }
    chunks_compare(cpu, cpu, 0, 0, 0);
    S->not_chunks[2] = S->not_chunks[5] = 1;
    chunks_compare(cpu, cpu, 0, 3, 0);
    chunks_compare(cpu, cpu, 1, 2, 0);
    free_frames();
    make_frames();
    offset_zero(4, 3);
    chunks_compare(cpu, cpu, 0, 2, 0);
    free_frames();
}

static void damaged_frame(void **state)
{
    (void)state;
    chunks_damaged(cpu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_spots),
        cmocka_unit_test(damaged_frame),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
