/*
 * A dataset dealt to MPI processes (cli_mpi.h says what each call does).
 *
 * The frames go to the ranks in contiguous blocks (sizes within one frame of each other), not
 * round-robin: each rank then runs one double-buffered pipeline over consecutive frames
 * (sw_find_sequence reads ahead in order), an Eiger data file and each of its multi-frame
 * chunks is read and decompressed by one rank instead of by all, and merging is a concatenation in
 * rank order. The price is balance: a stretch of costly frames (many spots) slows one rank; the
 * blocks are equal in frames, not in work.
 *
 * Messages to rank 0: small PROGRESS messages while the frames run (for its progress bar), then
 * one HEADER per rank (its status, failed frame, counts), then DATA (spots, refined results,
 * strong masks, in that order), which rank 0 receives rank by rank once every header is in. The
 * structs travel as bytes: the ranks must share one architecture (a cluster of one kind).
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */

#include "cli_mpi.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef SW_HAVE_MPI
#include <mpi.h>
#endif

/* A process manager started this process: Open MPI's mpirun, a PMI (MPICH's Hydra, srun) or
 * PMIx one. Its world size (1 when it does not say). 0: a plain run. */
static int launched_size(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v)
            continue;
        long n;
        if (i < 2 && sw_cli_parse_long(v, 1, 1L << 24, &n) == 0)
            return (int)n;
        return 1;
    }
    return 0;
}

const char *sw_cli_mpi_library(void)
{
#ifdef SW_HAVE_MPI
    /* one of the calls MPI allows before MPI_Init */
    static char text[MPI_MAX_LIBRARY_VERSION_STRING + 32];
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0, major = 0, minor = 0;
    MPI_Get_library_version(lib, &n);
    lib[strcspn(lib, ",\n")] = '\0'; /* "Open MPI v4.1.4, package: ..." */
    MPI_Get_version(&major, &minor);
    snprintf(text, sizeof text, "%s (MPI %d.%d)", lib, major, minor);
    return text;
#else
    return NULL;
#endif
}

int sw_cli_mpi_root(const sw_cli_mpi *m)
{
    return m->rank == 0;
}

sw_cli_globals sw_cli_mpi_globals(const sw_cli_mpi *m, const sw_cli_globals *g)
{
    sw_cli_globals r = *g;
    if (!m->on)
        return r;
    const int devices = g->backend == SW_BACKEND_CPU ? 0 : sw_cuda_device_count();
    if (devices > 0)
        r.device = m->local_rank % devices;
    cpu_set_t set;
    int cpus = 1;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        cpus = CPU_COUNT(&set);
    /* Open MPI binds each rank to one core by default when -np <= 2: the reader, decoder and
     * OpenMP threads then share it (measured: 11 Eiger frames/s instead of 98 on 32 cores) */
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus == 1 && online > m->local_size && m->local_rank == 0)
        fprintf(stderr,
                "spotwave: warning: MPI rank %d may use only 1 of this node's %ld CPUs (its "
                "binding): run `mpirun --bind-to none ...` (or --map-by slot:PE=N) so that "
                "each rank's reader and decoder threads get a share of the cores\n",
                m->rank, online);
    if (r.threads == 0 && m->local_size > 1)
        r.threads = cpus / m->local_size > 1 ? cpus / m->local_size : 1;
    if (m->rank != 0)
        r.quiet = 1; /* the library's log once, from rank 0 */
    return r;
}

/* Reader thread: notes the first frame whose read failed (read after the pipeline has joined
 * the thread). */
static sw_status wrapped_read(void *user, int64_t index, sw_image *dst)
{
    sw_cli_mpi *m = user;
    sw_status st = m->inner.read(m->inner.user, index, dst);
    if (st != SW_OK && m->read_failed < 0)
        m->read_failed = index;
    return st;
}

static sw_status wrapped_strong(void *user, int64_t index, const sw_image *mask)
{
    sw_cli_mpi *m = user;
    return m->inner.strong(m->inner.user, index, mask);
}

/* Rank 0: the progress bar (src->progress) when the frames done by all ranks have changed. */
static void show_progress(sw_cli_mpi *m)
{
    int64_t s = 0;
    for (int r = 0; r < m->size; r++)
        s += m->done[r];
    if (m->inner.progress && s != m->shown)
        m->inner.progress(m->inner.user, s, m->count);
    m->shown = s;
}

#ifdef SW_HAVE_MPI

/* Two tags: STATUS messages (progress, then the header: one layout, kind first) and DATA. One
 * tag for both kinds keeps them in the order they were sent, and DATA never matches a receive
 * of a status. */
enum { TAG_STATUS = 1, TAG_DATA };
enum { KIND_PROGRESS = 1, KIND_HEADER };
enum {
    H_KIND,
    H_DONE,                  /* frames done */
    H_FAILED,                /* 1: the rank's block failed */
    H_FRAME,                 /* at this frame */
    H_SPOTS,                 /* spots that follow as DATA */
    H_REFINED,               /* refined results that follow */
    H_STATS,                 /* sw_find_stats, 10 counts */
    H_STRONG = H_STATS + 10, /* strong-mask planes that follow */
    H_FIRST,                 /* the rank's first frame */
    H_GPU_FRAMES,            /* frames decoded on its GPU (find --decode) */
    H_N
};
_Static_assert(H_N <= SW_CLI_MPI_MSG, "a status message fits sw_cli_mpi's buffer");

/* The file and the frame within it of global frame `index`, for messages. */
static const char *frame_file(const sw_cli_inputs *in, int64_t index, int64_t *local)
{
    *local = index;
    for (int i = 0; in && i < in->n; i++) {
        if (index >= in->in[i].start && index < in->in[i].start + in->in[i].nframes) {
            *local = index - in->in[i].start;
            return in->in[i].path;
        }
    }
    return "?";
}

/* This rank's failure: its frame, file and the library's message (ctx NULL: printed already). */
static int64_t report_failure(sw_cli_mpi *m, sw_context *ctx, sw_status st)
{
    const int64_t done = m->done ? m->done[0] : 0;
    const int64_t frame = m->read_failed >= 0 ? m->read_failed : m->my_first + done;
    int64_t local;
    const char *file = frame_file(m->in, frame, &local);
    if (m->bar_on && m->shown > 0 && m->shown < m->count)
        fputc('\n', stderr); /* after the bar's line */
    if (!ctx)                /* the rank printed the failure's message itself */
        sw_cli_fail(m->sub, "MPI rank %d of %d: frame %lld ('%s', its frame %lld) failed (above)",
                    m->rank, m->size, (long long)frame, file, (long long)local);
    else
        sw_cli_fail(m->sub, "MPI rank %d of %d: frame %lld ('%s', its frame %lld) failed: %s",
                    m->rank, m->size, (long long)frame, file, (long long)local,
                    sw_cli_lib_error(ctx, st));
    return frame;
}

#define CHUNK (1 << 30) /* bytes per message: MPI counts are ints */

static void send_bytes(const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        int k = n > CHUNK ? CHUNK : (int)n;
        MPI_Send(c, k, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD);
        c += k;
        n -= (size_t)k;
    }
}

static void recv_bytes(void *p, size_t n, int from)
{
    char *c = p;
    while (n > 0) {
        int k = n > CHUNK ? CHUNK : (int)n;
        MPI_Recv(c, k, MPI_BYTE, from, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        c += k;
        n -= (size_t)k;
    }
}

/* Out of memory while ranks wait on each other: the whole job stops (no rank could finish). */
#if defined(__GNUC__)
__attribute__((noreturn))
#endif
static void
out_of_memory(const sw_cli_mpi *m)
{
    sw_cli_fail(m->sub, "MPI rank %d: out of memory while gathering the results", m->rank);
    MPI_Abort(MPI_COMM_WORLD, SW_EXIT_FAIL);
    exit(SW_EXIT_FAIL); /* (MPI_Abort does not return) */
}

/* Rank 0: status messages into m->done and m->hd: those waiting (wait 0), or the next one. */
static void take_status(sw_cli_mpi *m, int wait)
{
    for (;;) {
        int flag = 1;
        MPI_Status s;
        if (!wait)
            MPI_Iprobe(MPI_ANY_SOURCE, TAG_STATUS, MPI_COMM_WORLD, &flag, &s);
        if (!flag)
            return;
        int64_t msg[H_N];
        MPI_Recv(msg, H_N, MPI_INT64_T, wait ? MPI_ANY_SOURCE : s.MPI_SOURCE, TAG_STATUS,
                 MPI_COMM_WORLD, &s);
        const int r = s.MPI_SOURCE;
        m->done[r] = msg[H_DONE];
        if (msg[H_KIND] == KIND_HEADER && m->hd) {
            memcpy(&m->hd[(size_t)r * H_N], msg, sizeof msg);
            m->headers++;
        }
        if (wait)
            return;
    }
}

/* Another rank: its frames done, to rank 0, at most ten times a second (and the last); a message
 * still in flight is not doubled. */
static void send_progress(sw_cli_mpi *m, int64_t done)
{
    MPI_Request *req = m->req;
    const double now = sw_cli_now();
    if (done < m->my_count && now - m->t_sent < 0.1)
        return;
    if (*req != MPI_REQUEST_NULL) {
        int flag = 0;
        MPI_Test(req, &flag, MPI_STATUS_IGNORE);
        if (!flag && done < m->my_count)
            return;
        if (!flag)
            MPI_Wait(req, MPI_STATUS_IGNORE);
    }
    m->t_sent = now;
    memset(m->msg, 0, sizeof m->msg);
    m->msg[H_KIND] = KIND_PROGRESS;
    m->msg[H_DONE] = done;
    MPI_Isend(m->msg, H_N, MPI_INT64_T, 0, TAG_STATUS, MPI_COMM_WORLD, req);
}

/* Another rank's final header, its common part (the progress message in flight sent first). */
static void header_start(sw_cli_mpi *m, sw_status st, int64_t failed_frame, int64_t hd[H_N])
{
    MPI_Request *req = m->req;
    if (*req != MPI_REQUEST_NULL)
        MPI_Wait(req, MPI_STATUS_IGNORE);
    memset(hd, 0, H_N * sizeof *hd);
    hd[H_KIND] = KIND_HEADER;
    hd[H_DONE] = st == SW_OK ? m->my_count : m->done ? m->done[0] : 0;
    hd[H_FAILED] = st != SW_OK;
    hd[H_FRAME] = failed_frame;
}

/* Rank 0: every other rank's final header (its progress shown meanwhile while all is well). */
static void wait_headers(sw_cli_mpi *m, sw_status st)
{
    m->done[0] = m->my_count;
    while (m->headers < m->size - 1) {
        take_status(m, 1);
        if (st == SW_OK)
            show_progress(m);
    }
}

/* Rank 0, after every header: the failed ranks' frames in one message (exit 1). */
static int failed_list(const sw_cli_mpi *m, int self_failed, int64_t failed_frame, int nfailed)
{
    const int64_t(*hd)[SW_CLI_MPI_MSG] = (const int64_t(*)[SW_CLI_MPI_MSG])m->hd;
    char list[1024];
    size_t used = 0;
    list[0] = '\0';
    int64_t finished = 0; /* the frames of the ranks that did not fail */
    if (m->bar_on && m->shown > 0 && !self_failed)
        fputc('\n', stderr); /* after the bar's line */
    for (int r = 0; r < m->size; r++) {
        const int failed = r == 0 ? self_failed : hd[r][H_FAILED] != 0;
        if (!failed) {
            finished += r == 0 ? m->my_count : hd[r][H_DONE];
            continue;
        }
        const int64_t f = r == 0 ? failed_frame : hd[r][H_FRAME];
        int64_t local;
        const char *file = frame_file(m->in, f, &local);
        int n = snprintf(list + used, sizeof list - used, "%s%lld ('%s' frame %lld, rank %d)",
                         used ? ", " : "", (long long)f, file, (long long)local, r);
        if (n < 0 || (size_t)n >= sizeof list - used)
            break;
        used += (size_t)n;
    }
    return sw_cli_fail(m->sub,
                       "%d of %d MPI ranks failed, each at its first bad frame: %s; the other "
                       "ranks finished their %lld frames; nothing was written",
                       nfailed, m->size, list, (long long)finished);
}

#endif /* SW_HAVE_MPI */

static void wrapped_progress(void *user, int64_t done, int64_t total)
{
    sw_cli_mpi *m = user;
    (void)total;
    m->done[0] = done; /* (on rank r > 0, done[0] is its own count too) */
#ifdef SW_HAVE_MPI
    if (m->on && m->rank != 0) {
        send_progress(m, done);
        return;
    }
    if (m->on)
        take_status(m, 0);
#endif
    show_progress(m);
}

int sw_cli_mpi_start(sw_cli_mpi *m, const char *sub)
{
    memset(m, 0, sizeof *m);
    m->size = m->local_size = 1;
    m->sub = sub;
    m->read_failed = -1;
    const int launched = launched_size();
#ifdef SW_HAVE_MPI
    if (launched == 0)
        return SW_EXIT_OK;
    int provided = 0;
    /* the pipeline's reader thread never calls MPI: only this thread does */
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return sw_cli_fail(sub, "MPI_Init_thread failed");
    m->on = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &m->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m->size);
    MPI_Comm local;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, m->rank, MPI_INFO_NULL, &local) ==
        MPI_SUCCESS) {
        MPI_Comm_rank(local, &m->local_rank);
        MPI_Comm_size(local, &m->local_size);
        MPI_Comm_free(&local);
    }
    MPI_Request *req = malloc(sizeof *req);
    if (!req)
        return sw_cli_fail(sub, "out of memory");
    *req = MPI_REQUEST_NULL;
    m->req = req;
    return SW_EXIT_OK;
#else
    if (launched > 1)
        return sw_cli_fail(sub,
                           "started as one of %d MPI processes, but this spotwave was built "
                           "without MPI (SW_WITH_MPI; Debian: libopenmpi-dev), so each would do "
                           "the whole job: run it as one process",
                           launched);
    return SW_EXIT_OK;
#endif
}

int sw_cli_mpi_agree(sw_cli_mpi *m, int rc)
{
    if (!m->on || m->agreed)
        return rc;
    m->agreed = 1;
#ifdef SW_HAVE_MPI
    int worst = rc;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (worst != SW_EXIT_OK && rc == SW_EXIT_OK && m->rank == 0)
        sw_cli_fail(m->sub, "another MPI rank failed before the frames (its message is above)");
    return worst;
#else
    return rc;
#endif
}

void sw_cli_mpi_deal(sw_cli_mpi *m, const sw_cli_inputs *in, int64_t first, int64_t count,
                     int bar_on)
{
    m->bar_on = bar_on;
    m->in = in;
    m->first = first;
    m->count = count;
    m->my_first = first;
    m->my_count = count;
    if (m->on) {
        /* contiguous blocks, the first count % size ranks one frame more */
        const int64_t base = count / m->size, extra = count % m->size, r = m->rank;
        m->my_first = first + r * base + (r < extra ? r : extra);
        m->my_count = base + (r < extra);
    }
    if (!m->done)
        m->done = calloc((size_t)m->size, sizeof *m->done);
    if (m->on && m->rank == 0 && !m->hd)
        m->hd = calloc((size_t)m->size * SW_CLI_MPI_MSG, sizeof *m->hd);
}

sw_find_source sw_cli_mpi_source(sw_cli_mpi *m, const sw_find_source *src, const sw_cli_inputs *in,
                                 int64_t first, int64_t count, int bar_on)
{
    m->inner = *src;
    sw_cli_mpi_deal(m, in, first, count, bar_on);
    sw_find_source w = {wrapped_read, src->strong ? wrapped_strong : NULL,
                        m->done ? wrapped_progress : NULL, m};
    return w;
}

int sw_cli_mpi_gather(sw_cli_mpi *m, sw_context *ctx, sw_status st, int64_t failed_frame,
                      sw_spot_list *spots, sw_refine_list *refined, sw_find_stats *stats,
                      int64_t *gpu_frames, sw_image *strong_cube)
{
    if (!m->on)
        return st == SW_OK ? SW_EXIT_OK : SW_EXIT_FAIL;
#ifdef SW_HAVE_MPI
    if (st != SW_OK && failed_frame >= 0)
        m->read_failed = failed_frame; /* the pipeline's word over the reader's */
    failed_frame = st != SW_OK ? report_failure(m, ctx, st) : -1;
    const int32_t w = strong_cube ? strong_cube->width : 0;
    const int32_t h = strong_cube && m->count > 0 ? strong_cube->height / (int32_t)m->count : 0;
    const size_t plane = (size_t)w * (size_t)h;
    if (m->rank != 0) {
        int64_t hd[H_N];
        header_start(m, st, failed_frame, hd);
        hd[H_SPOTS] = st == SW_OK ? spots->count : 0;
        hd[H_REFINED] = st == SW_OK && refined ? refined->count : 0;
        const int64_t s10[10] = {
            stats->frames, stats->valid_pixels,   stats->strong_pixels,  stats->components,
            stats->spots,  stats->rejected_small, stats->rejected_large, stats->rejected_separation,
            stats->blends, stats->children};
        memcpy(&hd[H_STATS], s10, sizeof s10);
        hd[H_STRONG] = st == SW_OK && plane ? m->my_count : 0;
        hd[H_FIRST] = m->my_first;
        hd[H_GPU_FRAMES] = gpu_frames ? *gpu_frames : 0;
        MPI_Send(hd, H_N, MPI_INT64_T, 0, TAG_STATUS, MPI_COMM_WORLD);
        if (hd[H_SPOTS])
            send_bytes(spots->spots, (size_t)hd[H_SPOTS] * sizeof *spots->spots);
        if (hd[H_REFINED])
            send_bytes(refined->items, (size_t)hd[H_REFINED] * sizeof *refined->items);
        if (hd[H_STRONG]) {
            /* plane by plane, row by row: the cube's rows may be padded */
            uint8_t *buf = malloc(plane);
            if (!buf) {
                out_of_memory(m);
            }
            for (int64_t k = m->my_first - m->first; k < m->my_first - m->first + m->my_count;
                 k++) {
                for (int32_t y = 0; y < h; y++)
                    memcpy(buf + (size_t)y * (size_t)w,
                           sw_image_row(strong_cube, (int32_t)(k * h + y)), (size_t)w);
                send_bytes(buf, plane);
            }
            free(buf);
        }
        return st == SW_OK ? SW_EXIT_OK : SW_EXIT_FAIL;
    }

    /* rank 0: every header (and the progress before it), then the data rank by rank */
    uint8_t *buf = plane ? malloc(plane) : NULL;
    if (!m->hd || (plane && !buf) || !m->done) {
        out_of_memory(m);
    }
    wait_headers(m, st);
    const int64_t(*hd)[SW_CLI_MPI_MSG] = (const int64_t(*)[SW_CLI_MPI_MSG])m->hd;
    int nfailed = st != SW_OK;
    for (int r = 1; r < m->size; r++)
        nfailed += hd[r][H_FAILED] != 0;
    int rc = SW_EXIT_OK;
    for (int r = 1; r < m->size; r++) {
        const int64_t *x = hd[r];
        if (x[H_SPOTS]) {
            const int64_t n = spots->count + x[H_SPOTS];
            sw_spot *p = realloc(spots->spots, (size_t)n * sizeof *p);
            if (!p) {
                out_of_memory(m);
            }
            recv_bytes(p + spots->count, (size_t)x[H_SPOTS] * sizeof *p, r);
            /* deblending's parent is a 1-based position in the whole list: the rank counted
             * from its own first spot */
            for (int64_t i = spots->count; i < n; i++)
                if (p[i].parent)
                    p[i].parent += spots->count;
            spots->spots = p;
            spots->count = spots->capacity = n;
        }
        if (x[H_REFINED]) {
            const int64_t n = refined->count + x[H_REFINED];
            sw_refine_result *p = realloc(refined->items, (size_t)n * sizeof *p);
            if (!p) {
                out_of_memory(m);
            }
            recv_bytes(p + refined->count, (size_t)x[H_REFINED] * sizeof *p, r);
            refined->items = p;
            refined->count = refined->capacity = n;
        }
        for (int64_t k = x[H_FIRST] - m->first; k < x[H_FIRST] - m->first + x[H_STRONG]; k++) {
            recv_bytes(buf, plane, r);
            for (int32_t y = 0; y < h; y++)
                memcpy(sw_image_row(strong_cube, (int32_t)(k * h + y)), buf + (size_t)y * (size_t)w,
                       (size_t)w);
        }
        const int64_t *s8 = &x[H_STATS];
        stats->frames += s8[0];
        stats->valid_pixels += s8[1];
        stats->strong_pixels += s8[2];
        stats->components += s8[3];
        stats->spots += s8[4];
        stats->rejected_small += s8[5];
        stats->rejected_large += s8[6];
        stats->rejected_separation += s8[7];
        stats->blends += s8[8];
        stats->children += s8[9];
        if (gpu_frames)
            *gpu_frames += x[H_GPU_FRAMES];
    }
    if (nfailed)
        rc = failed_list(m, st != SW_OK, failed_frame, nfailed);
    free(buf);
    return rc;
#else
    (void)ctx;
    (void)failed_frame;
    (void)spots;
    (void)refined;
    (void)stats;
    (void)gpu_frames;
    (void)strong_cube;
    return st == SW_OK ? SW_EXIT_OK : SW_EXIT_FAIL;
#endif
}

void sw_cli_mpi_progress(sw_cli_mpi *m, int64_t done, void (*progress)(void *, int64_t, int64_t),
                         void *user)
{
    m->inner.progress = progress;
    m->inner.user = user;
    if (m->done)
        wrapped_progress(m, done, m->count);
}

int sw_cli_mpi_gather_frames(sw_cli_mpi *m, sw_context *ctx, sw_status st, int64_t failed_frame,
                             const sw_cli_mpi_array *arrays, int narrays)
{
    if (!m->on)
        return st == SW_OK ? SW_EXIT_OK : SW_EXIT_FAIL;
#ifdef SW_HAVE_MPI
    if (st != SW_OK) {
        m->read_failed = failed_frame;
        failed_frame = report_failure(m, ctx, st);
    }
    if (m->rank != 0) {
        int64_t hd[H_N];
        header_start(m, st, failed_frame, hd);
        hd[H_STRONG] = st == SW_OK ? m->my_count : 0; /* frames whose records follow */
        hd[H_FIRST] = m->my_first;
        MPI_Send(hd, H_N, MPI_INT64_T, 0, TAG_STATUS, MPI_COMM_WORLD);
        for (int a = 0; hd[H_STRONG] && a < narrays; a++)
            send_bytes((const char *)arrays[a].base +
                           (size_t)(m->my_first - m->first) * arrays[a].frame_bytes,
                       (size_t)m->my_count * arrays[a].frame_bytes);
        return st == SW_OK ? SW_EXIT_OK : SW_EXIT_FAIL;
    }

    /* rank 0: every header, then each rank's records into their frames' places */
    if (!m->hd || !m->done)
        out_of_memory(m);
    wait_headers(m, st);
    const int64_t(*hd)[SW_CLI_MPI_MSG] = (const int64_t(*)[SW_CLI_MPI_MSG])m->hd;
    int nfailed = st != SW_OK;
    for (int r = 1; r < m->size; r++) {
        nfailed += hd[r][H_FAILED] != 0;
        for (int a = 0; hd[r][H_STRONG] && a < narrays; a++)
            recv_bytes((char *)arrays[a].base +
                           (size_t)(hd[r][H_FIRST] - m->first) * arrays[a].frame_bytes,
                       (size_t)hd[r][H_STRONG] * arrays[a].frame_bytes, r);
    }
    return nfailed ? failed_list(m, st != SW_OK, failed_frame, nfailed) : SW_EXIT_OK;
#else
    (void)ctx;
    (void)failed_frame;
    (void)arrays;
    (void)narrays;
    return st == SW_OK ? SW_EXIT_OK : SW_EXIT_FAIL;
#endif
}

void sw_cli_mpi_json(const sw_cli_mpi *m, cJSON *report)
{
    sw_cli_json_int(report, "mpi_ranks", m->size);
    int64_t *per = malloc((size_t)m->size * sizeof *per);
    if (!per)
        return;
    const int64_t base = m->count / m->size, extra = m->count % m->size;
    for (int r = 0; r < m->size; r++)
        per[r] = base + (r < extra);
    sw_cli_json_int_array(report, "frames_per_rank", per, m->size);
    free(per);
}

int sw_cli_mpi_end(sw_cli_mpi *m, int rc)
{
    if (m->on) {
        rc = sw_cli_mpi_agree(m, rc) != SW_EXIT_OK && rc == SW_EXIT_OK ? SW_EXIT_FAIL : rc;
#ifdef SW_HAVE_MPI
        MPI_Finalize();
#endif
    }
    free(m->done);
    free(m->hd);
    free(m->req);
    m->done = m->hd = NULL;
    m->req = NULL;
    m->on = 0;
    return rc;
}
