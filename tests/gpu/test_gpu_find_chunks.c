/*
 * sw_find_sequence_chunks (find_sequence.c) on the GPU: frames given as stored bitshuffle/LZ4
 * chunks (several per frame, read by several reader threads from memory) give exactly the spots
 * and statistics of sw_find_sequence on the CPU over the same frames decoded by the CPU decoder,
 * in 2-D and 3-D, with frames the chunk source does not give (read decoded instead) mixed in, and
 * a frame whose LZ4 block has an offset of 0 (liblz4 decodes it as zeros, the GPU refuses it:
 * decoded on the CPU, same frame). A damaged frame fails the run with SW_EFORMAT naming the frame
 * and the CPU decoder's reason, and leaves the spot list as it was. The frames and checks are
 * tests/find_chunks_cases.h's (test_find_chunks runs them on the CPU). Skips (77) without a GPU.
 */
#include "testutil.h"

#ifndef SW_HAVE_CUDA
int main(void)
{
    return 77; /* built without CUDA: nothing to compare */
}
#else

#include "find_chunks_cases.h"

static sw_context *gpu, *cpu;

static int setup(void **state)
{
    (void)state;
    gpu = sw_test_cuda_context_or_skip();
    cpu = sw_test_cpu_context(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(gpu);
    sw_context_destroy(cpu);
    return 0;
}

static void same_spots(void **state)
{
    (void)state;
    make_frames();
    for (int readers = 1; readers <= 6; readers += 5) {
        chunks_compare(cpu, gpu, 0, readers, NF);
        chunks_compare(cpu, gpu, 1, readers, NF);
    }
    chunks_compare(cpu, gpu, 0, 0, NF); /* the default: 4 readers */
    /* frames 2 and 5 read decoded (the chunk source does not give them) */
    S->not_chunks[2] = S->not_chunks[5] = 1;
    chunks_compare(cpu, gpu, 0, 3, NF - 2);
    chunks_compare(cpu, gpu, 1, 3, NF - 2);
    free_frames();
}

/* Frame 4's chunk 3 with an LZ4 offset of 0: the GPU refuses it, the frame is decoded on the CPU
 * (liblz4: zeros), the spots are the CPU's. */
static void offset_zero_frame(void **state)
{
    (void)state;
    make_frames();
    offset_zero(4, 3);
    chunks_compare(cpu, gpu, 0, 2, NF - 1);
    free_frames();
}

static void damaged_frame(void **state)
{
    (void)state;
    chunks_damaged(gpu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_spots),
        cmocka_unit_test(offset_zero_frame),
        cmocka_unit_test(damaged_frame),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#endif
