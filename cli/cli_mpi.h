/*
 * A dataset dealt to MPI processes (cli/mpi.c): `mpirun -np N spotwave find FILES...`, and
 * the same for `pupil` and `aberrometry`, which run their frames one by one and gather
 * per-frame records (sw_cli_mpi_deal, sw_cli_mpi_gather_frames).
 *
 * Launched by mpirun (or srun, mpiexec: a process manager that sets OMPI_COMM_WORLD_SIZE,
 * PMI_SIZE or PMIX_RANK), a build with MPI (SW_WITH_MPI) initialises MPI and deals the frames to
 * the ranks in contiguous blocks; a plain run never touches MPI. Every rank opens the inputs and
 * prepares the same plan with a context of its own (the GPU local_rank % devices when there are
 * GPUs; the CPU otherwise, the node's cores shared among its ranks unless --threads is given),
 * runs its block through the library's pipeline (for find --decode gpu the chunk pipeline, its
 * bitshuffle/LZ4 chunks decoded on the rank's GPU), and sends its spot table (raw structs: ranks of
 * one architecture), its strong masks and its counts to rank 0, which merges them in frame order
 * and writes every output once with the code a one-process run uses, so they are byte-identical.
 * Only rank 0 stages and commits files (files.c) or prints a report or a progress bar.
 *
 * A frame that fails on a rank (an unreadable chunk, one that does not decode on the CPU or the
 * GPU, a frame refused by the finder: the pipeline says which, sw_find_sequence_failed_frame) stops
 * that rank's block as it stops a one-process run; the rank reports it with its file and index, the
 * other ranks finish theirs, and rank 0 lists every failed frame and fails the run (exit 1,
 * nothing written), as one process fails.
 *
 * The collective calls, which every rank makes in this order: sw_cli_mpi_start,
 * sw_cli_mpi_agree (once, also from sw_cli_mpi_end when a rank failed before reaching it),
 * sw_cli_mpi_gather (after the frames), sw_cli_mpi_end.
 */
#ifndef SW_CLI_MPI_H
#define SW_CLI_MPI_H

#include "cli.h"
#include "json.h"
#include "spotwave/find.h"
#include "spotwave/refine.h"

#define SW_CLI_MPI_MSG 19 /* int64s in a status message to rank 0 */

typedef struct sw_cli_mpi {
    int on;                     /* MPI initialised: the frames are dealt                  */
    int rank, size;             /* this rank and the ranks (0, 1 when off)                */
    int local_rank, local_size; /* among the ranks of this node                           */
    int agreed;                 /* sw_cli_mpi_agree was called                            */
    const char *sub;
    int64_t first, count;       /* the run's frames                                       */
    int64_t my_first, my_count; /* this rank's block                                      */
    /* the frame source wrapped by sw_cli_mpi_source */
    sw_find_source inner;
    const sw_cli_inputs *in;
    int64_t read_failed;         /* the first frame whose read failed on this rank, or -1     */
    int64_t *done;               /* rank 0: frames done per rank (for the progress bar)       */
    int64_t shown;               /* rank 0: the frames done the bar shows                     */
    int bar_on;                  /* src->progress draws a progress bar on stderr              */
    int64_t *hd;                 /* rank 0: each rank's last status message (SW_CLI_MPI_MSG)  */
    int headers;                 /* rank 0: the final status messages received                */
    double t_sent;               /* last progress message sent (other ranks)                  */
    void *req;                   /* that message's MPI request (other ranks)                  */
    int64_t msg[SW_CLI_MPI_MSG]; /* the progress message in flight (other ranks)       */
} sw_cli_mpi;

/* Finds whether a process manager launched this process and, in a build with MPI, initialises MPI
 * (rank and size, the node-local rank). Without MPI built in, a launch with several ranks is
 * refused (each process would do the whole job). Returns SW_EXIT_OK or SW_EXIT_FAIL with its
 * line printed; call sw_cli_mpi_end in both cases. */
int sw_cli_mpi_start(sw_cli_mpi *m, const char *sub);

/* The MPI library the command was built with ("Open MPI v4.1.4 (MPI 3.1)"), NULL without. */
const char *sw_cli_mpi_library(void);

/* 1 on the rank that writes the outputs (rank 0, or a run without MPI). */
int sw_cli_mpi_root(const sw_cli_mpi *m);

/* The globals a rank's context is made with: its GPU (local_rank % devices) and, on CPUs shared
 * by several ranks of a node, its share of the cores when --threads is not given. */
sw_cli_globals sw_cli_mpi_globals(const sw_cli_mpi *m, const sw_cli_globals *g);

/* Collective: every rank's rc before the frames. SW_EXIT_OK when all are; otherwise the worst,
 * on every rank (rank 0 says that another rank failed when it did not itself). */
int sw_cli_mpi_agree(sw_cli_mpi *m, int rc);

/* This rank's block of frames first..first+count-1 (all of them without MPI) into my_first,
 * my_count, and the source the pipeline should read through: src's callbacks wrapped to note a
 * failed read and, on rank 0, to show every rank's progress (src->progress gets the totals; the
 * other ranks send theirs to rank 0). in names the files in failure messages; bar_on says that
 * src->progress draws a bar (a failure message then starts on a new line). */
sw_find_source sw_cli_mpi_source(sw_cli_mpi *m, const sw_find_source *src, const sw_cli_inputs *in,
                                 int64_t first, int64_t count, int bar_on);

/* The same dealing for a command that runs frames one by one itself (pupil, aberrometry):
 * my_first, my_count; progress through sw_cli_mpi_progress, results through
 * sw_cli_mpi_gather_frames. */
void sw_cli_mpi_deal(sw_cli_mpi *m, const sw_cli_inputs *in, int64_t first, int64_t count,
                     int bar_on);

/* This rank has done `done` of its frames: rank 0 calls progress(user, all ranks' frames done,
 * count) when that changed; other ranks tell rank 0 (at most ten times a second). */
void sw_cli_mpi_progress(sw_cli_mpi *m, int64_t done, void (*progress)(void *, int64_t, int64_t),
                         void *user);

/* Per-frame records: base points at count records (one per frame of the run, in frame order) of
 * frame_bytes each; a rank fills those of its block. */
typedef struct sw_cli_mpi_array {
    void *base;
    size_t frame_bytes;
} sw_cli_mpi_array;

/* Collective, after this rank's frames (st: SW_OK, or the failure at failed_frame with its
 * message on ctx, or ctx NULL when the rank printed the message itself): rank 0 receives every
 * other rank's block of each array into place (the structs travel as bytes). A failed rank reports
 * its frame and file; rank 0 lists them all. SW_EXIT_OK when every rank succeeded, else
 * SW_EXIT_FAIL. Without MPI: SW_EXIT_OK when st is SW_OK (the caller reports a failure itself). */
int sw_cli_mpi_gather_frames(sw_cli_mpi *m, sw_context *ctx, sw_status st, int64_t failed_frame,
                             const sw_cli_mpi_array *arrays, int narrays);

/* Collective, after this rank's frames (st: what sw_find_sequence returned, message on ctx;
 * failed_frame: the frame it failed at, sw_find_sequence_failed_frame, or -1 when it does not
 * say, then the frame the source's read failed at or the one after the last frame done):
 * rank 0 appends every other rank's spots (and refined results, when refined is not NULL) to its
 * own in rank order, which is frame order, adds their counts to stats (and their frames decoded
 * on the GPU to *gpu_frames, when not NULL) and copies their strong masks into strong_cube (a
 * cube of count frames, NULL when none). A failed rank reports its frame with its file; rank 0
 * lists them all. Returns SW_EXIT_OK when every rank succeeded, else SW_EXIT_FAIL (rank 0 then
 * names the failed frames). Without MPI: SW_EXIT_OK when st is SW_OK. */
int sw_cli_mpi_gather(sw_cli_mpi *m, sw_context *ctx, sw_status st, int64_t failed_frame,
                      sw_spot_list *spots, sw_refine_list *refined, sw_find_stats *stats,
                      int64_t *gpu_frames, sw_image *strong_cube);

/* Adds mpi_ranks and frames_per_rank to a --json report. */
void sw_cli_mpi_json(const sw_cli_mpi *m, cJSON *report);

/* Takes part in sw_cli_mpi_agree when this rank has not (it failed before the frames, rc says
 * how), then finalises MPI. Returns rc. */
int sw_cli_mpi_end(sw_cli_mpi *m, int rc);

#endif /* SW_CLI_MPI_H */
