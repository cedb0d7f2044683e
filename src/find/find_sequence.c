/*
 * sw_find_sequence (find.h): frames streamed through a double-buffered pipeline, and the 3-D
 * joining of components across consecutive frames.
 *
 * Pipeline. Two host frame buffers (pinned on CUDA) and, on the GPU, two device frame slots.
 * A reader thread fills host buffer r % 2 with frame r as soon as frame r - 2 has released it.
 * On the GPU, iteration i queues the upload of frame i + 1 on the copy stream, processes frame i
 * on the context's stream (threshold, labels, component table), then releases frame i + 1's host
 * buffer once its upload is done; so reading frame i + 2, copying frame i + 1 and computing frame
 * i overlap. On the CPU, the reader reads frame i + 1 while frame i is processed.
 *
 * 3-D joining (rotation scans). Components of consecutive frames are joined where a pixel is
 * strong in both (find_internal.h, links). The joined groups are kept as moment accumulators
 * (sw_find_acc): at frame i, the groups still open after frame i - 1 and frame i's components
 * are the nodes of a small union-find, the links its edges; every resulting set becomes one
 * accumulator. A set without a component of frame i can grow no more: it is finished, filtered
 * at once, and kept only when it passes (the spots are sorted at the end). So memory grows with
 * the open groups and the spots found, not with the noise rejected over a long scan.
 */
#include "find/find_internal.h"
#include "io/bitshuffle.h"
#include "spotwave/refine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the reader threads */

static sw_status alloc_tight(sw_context *ctx, const sw_find_plan *plan, int pinned, sw_image *out);

/* A host slot: one frame as read, either decoded (img) or, with a chunk source, as its stored
 * bitshuffle/LZ4 chunks and their table of blocks, to be decoded on the GPU. */
typedef struct pipe_slot {
    sw_image img;          /* a decoded frame (tight rows; pinned on CUDA)                     */
    uint8_t *buf;          /* chunk source: the slot's buffer (img.data), cap bytes            */
    size_t cap;            /* ...                                                              */
    sw_find_chunk *chunks; /* the frame's chunks (max_chunks room)                             */
    int64_t nchunks;       /* ...                                                              */
    sw_bshuf_block *table; /* their blocks (table_cap room; pinned)                            */
    size_t nblocks, big;   /* entries, largest decoded block                                   */
    size_t bytes;          /* stored bytes of the chunks                                       */
    int compressed;        /* holds stored chunks (decoded on the GPU), not a decoded frame    */
    sw_status status;      /* the read's outcome, reported when the frame's turn comes         */
    char error[SW_ERROR_MAX];
} pipe_slot;

typedef struct pipe_state {
    sw_find_plan *plan;
    const sw_find_source *src;
    const sw_find_chunk_source *csrc; /* or NULL */
    int gpu;                          /* a CUDA plan: chunks are decoded on the GPU      */
    int64_t first, count;
    int nslots, nreaders;
    pipe_slot slot[SW_FIND_SEQ_SLOTS];
    size_t table_cap;
    int64_t gpu_frames; /* frames decoded on the GPU */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_mutex_t read_mu;       /* the frame source's read: one thread at a time            */
    int filled[SW_FIND_SEQ_SLOTS]; /* slot s holds its frame (and its status)                  */
    int64_t released;              /* frames 0 .. released-1 no longer need their slot         */
    int stop;                      /* the main thread gave up                                  */
} pipe_state;

typedef struct reader_arg {
    pipe_state *ps;
    int t; /* this reader takes frames t, t + nreaders, ... */
} reader_arg;

/* Records a failed read in the slot, with the calling thread's message (the callback reported
 * through it: sw_fail with ctx NULL). */
static void slot_fail(pipe_slot *sl, sw_status st, const char *fallback)
{
    const char *msg = sw_context_error(NULL);
    sl->status = st;
    snprintf(sl->error, sizeof(sl->error), "%s", msg && *msg ? msg : fallback);
}

/*
 * Reads frame r into its slot. With a chunk source: its stored chunks, which must tile the frame
 * in order, walked into the table (every block count checked, bitshuffle.h); a chunk that fails
 * the walk fails the frame with the CPU decoder's reason. A frame the source does not give as
 * chunks, or with more blocks than the table holds, is read decoded (the frame source's read).
 */
static void fill_slot(pipe_state *ps, int64_t r, pipe_slot *sl)
{
    sw_find_plan *plan = ps->plan;
    const size_t es = sw_pixel_size(plan->p.type);
    const size_t frame = (size_t)plan->width * es * (size_t)plan->height;
    sl->compressed = 0;
    sl->status = SW_OK;
    sl->error[0] = '\0';
    sw_error_set(NULL, SW_OK, "%s", ""); /* so that a silent failure quotes nothing old */
    if (ps->csrc) {
        int64_t n = 0;
        sw_status st = ps->csrc->read_chunks(ps->csrc->user, ps->first + r, sl->buf, sl->cap,
                                             sl->chunks, ps->csrc->max_chunks, &n);
        if (st != SW_OK) {
            slot_fail(sl, st, "the chunk source failed");
            return;
        }
        if (n > ps->csrc->max_chunks) { /* the source broke its contract: its list overran */
            slot_fail(sl, SW_EINTERNAL, "the chunk source gave more chunks than max_chunks");
            return;
        }
        if (n > 0) {
            uint64_t out = 0, end = 0;
            for (int64_t k = 0; k < n; ++k) {
                if (sl->chunks[k].out_offset != out || sl->chunks[k].offset > sl->cap ||
                    sl->chunks[k].size > sl->cap - sl->chunks[k].offset) {
                    sl->status = SW_EFORMAT;
                    snprintf(sl->error, sizeof(sl->error),
                             "chunk %lld of %lld does not follow the one before it in the frame "
                             "or lies outside the buffer",
                             (long long)k + 1, (long long)n);
                    return;
                }
                out += sl->chunks[k].out_size;
                if (sl->chunks[k].offset + sl->chunks[k].size > end)
                    end = sl->chunks[k].offset + sl->chunks[k].size;
            }
            if (out != frame) {
                sl->status = SW_EFORMAT;
                snprintf(sl->error, sizeof(sl->error),
                         "the chunks decode to %llu bytes but the frame has %zu",
                         (unsigned long long)out, frame);
                return;
            }
            size_t bad = 0;
            const int w =
                sw_bshuf_frame_walk(sl->buf, (size_t)end, sl->chunks, (size_t)n, es, frame,
                                    sl->table, ps->table_cap, &sl->nblocks, &sl->big, &bad);
            if (w == 0 && ps->gpu) {
                sl->nchunks = n;
                sl->bytes = (size_t)end;
                sl->compressed = 1;
                return;
            }
            if (w == 0) { /* a CPU plan: decoded here, on this reader thread */
                char why[SW_ERROR_MAX - 64];
                for (int64_t k = 0; k < n; ++k) {
                    const sw_find_chunk *c = &sl->chunks[k];
                    if (sw_bshuf_decode_lz4(sl->buf + c->offset, (size_t)c->size,
                                            (uint8_t *)sl->img.data + c->out_offset,
                                            (size_t)c->out_size, es, why, sizeof(why)) != 0) {
                        sl->status = SW_EFORMAT;
                        snprintf(sl->error, sizeof(sl->error),
                                 "bitshuffle/LZ4 chunk %lld of %lld: %s", (long long)k + 1,
                                 (long long)n, why);
                        return;
                    }
                }
                return;
            }
            if (w == -1) {
                char why[SW_ERROR_MAX - 64];
                sw_bshuf_frame_reason(sl->buf, (size_t)end, sl->chunks, (size_t)n, es, frame, why,
                                      sizeof(why));
                sl->status = SW_EFORMAT;
                snprintf(sl->error, sizeof(sl->error), "bitshuffle/LZ4 %s", why);
                return;
            }
            /* -3: more blocks than the table holds (tiny block sizes): read decoded */
        }
    }
    pthread_mutex_lock(&ps->read_mu);
    sw_status st = ps->src->read(ps->src->user, ps->first + r, &sl->img);
    pthread_mutex_unlock(&ps->read_mu);
    if (st != SW_OK)
        slot_fail(sl, st, "the frame source failed");
}

static void *reader_main(void *arg)
{
    const reader_arg *ra = arg;
    pipe_state *ps = ra->ps;
    for (int64_t r = ra->t; r < ps->count; r += ps->nreaders) {
        pthread_mutex_lock(&ps->mu);
        while (!ps->stop && r >= ps->released + ps->nslots)
            pthread_cond_wait(&ps->cv, &ps->mu);
        int stop = ps->stop;
        pthread_mutex_unlock(&ps->mu);
        if (stop)
            return NULL;
        pipe_slot *sl = &ps->slot[r % ps->nslots];
        fill_slot(ps, r, sl);
        pthread_mutex_lock(&ps->mu);
        ps->filled[r % ps->nslots] = 1;
        pthread_cond_broadcast(&ps->cv);
        pthread_mutex_unlock(&ps->mu);
        if (sl->status != SW_OK)
            return NULL; /* the run stops at this frame (or an earlier one) */
    }
    return NULL;
}

/* Waits until frame i is in its slot; its read's failure otherwise (in frame order: an earlier
 * frame's failure is reported before a later one's). */
static sw_status wait_filled(pipe_state *ps, int64_t i)
{
    const int s = (int)(i % ps->nslots);
    pthread_mutex_lock(&ps->mu);
    while (!ps->filled[s])
        pthread_cond_wait(&ps->cv, &ps->mu);
    pthread_mutex_unlock(&ps->mu);
    if (ps->slot[s].status != SW_OK)
        return sw_fail(ps->plan->ctx, ps->slot[s].status, "find: reading frame %lld: %s",
                       (long long)(ps->first + i), ps->slot[s].error);
    return SW_OK;
}

static void release_frame(pipe_state *ps, int64_t i)
{
    pthread_mutex_lock(&ps->mu);
    ps->filled[i % ps->nslots] = 0;
    ps->released = i + 1;
    pthread_cond_broadcast(&ps->cv);
    pthread_mutex_unlock(&ps->mu);
}

#ifdef SW_HAVE_CUDA
/* Queues frame r's copy to device slot d: its stored chunks and their decoding on the GPU, or
 * the decoded frame. */
static sw_status upload_frame(pipe_state *ps, int64_t r, int d)
{
    pipe_slot *sl = &ps->slot[r % ps->nslots];
    if (!sl->compressed)
        return sw_find_gpu_upload(ps->plan, &sl->img, d);
    ps->gpu_frames++;
    return sw_find_gpu_upload_chunks(ps->plan, sl->buf, sl->bytes, sl->table, (uint32_t)sl->nblocks,
                                     sl->big, d);
}

/*
 * After frame r's upload into device slot d: when a block failed on the GPU, the CPU decoder's
 * reason for the first bad chunk; or, where the CPU decodes what the GPU refused (an LZ4 offset
 * of 0, which liblz4 takes for zeros), the frame decoded here and uploaded, so that both decoders
 * give the same frames.
 */
static sw_status check_decoded(pipe_state *ps, int64_t r, int d)
{
    sw_find_plan *plan = ps->plan;
    pipe_slot *sl = &ps->slot[r % ps->nslots];
    if (!sl->compressed || sw_find_gpu_decode_error(plan, d) == UINT32_MAX)
        return SW_OK;
    const size_t es = sw_pixel_size(plan->p.type);
    const size_t frame = (size_t)plan->width * es * (size_t)plan->height;
    char why[SW_ERROR_MAX - 64];
    const int rc = sw_bshuf_frame_reason(sl->buf, sl->bytes, sl->chunks, (size_t)sl->nchunks, es,
                                         frame, why, sizeof(why));
    if (rc != 1)
        return sw_fail(plan->ctx, rc == -2 ? SW_ENOMEM : SW_EFORMAT,
                       "find: reading frame %lld: bitshuffle/LZ4 %s", (long long)(ps->first + r),
                       why);
    sw_status st = SW_OK;
    if (!plan->seq_host[0].data)
        st = alloc_tight(plan->ctx, plan, 1, &plan->seq_host[0]);
    for (int64_t k = 0; k < sl->nchunks && st == SW_OK; ++k) {
        const sw_find_chunk *c = &sl->chunks[k];
        if (sw_bshuf_decode_lz4_mt(sl->buf + c->offset, (size_t)c->size,
                                   (uint8_t *)plan->seq_host[0].data + c->out_offset,
                                   (size_t)c->out_size, es, sw_context_threads(plan->ctx), why,
                                   sizeof(why)) != 0)
            st = sw_fail(plan->ctx, SW_EFORMAT, "find: reading frame %lld: bitshuffle/LZ4 %s",
                         (long long)(ps->first + r), why);
    }
    if (st == SW_OK && (st = sw_find_gpu_upload(plan, &plan->seq_host[0], d)) == SW_OK)
        st = sw_find_gpu_upload_wait(plan, d);
    ps->gpu_frames--;
    return st;
}
#endif

/* ---------------------------------------------------------------- 3-D joining */

typedef struct join_state {
    sw_find_acc *open; /* groups still open after the previous frame */
    int64_t nopen, cap_open;
    int64_t *prev_roots; /* roots of the previous frame's components (increasing)  */
    int64_t *prev_group; /* the open group each of them belongs to                  */
    int64_t nprev, cap_prev, cap_group;
    sw_find_acc *done; /* finished groups */
    int64_t ndone, cap_done;
    /* scratch */
    int64_t *parent, *newid;
    sw_find_acc *acc;
    unsigned char *has_cur;
    int64_t cap_nodes, cap_aux;
    sw_find_stats stats; /* components and rejections, counted as groups finish */
} join_state;

static void join_free(join_state *j)
{
    free(j->open);
    free(j->prev_roots);
    free(j->prev_group);
    free(j->done);
    free(j->parent);
    free(j->newid);
    free(j->acc);
    free(j->has_cur);
    memset(j, 0, sizeof(*j));
}

static int grow(void **p, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap)
        return 1;
    int64_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return 0;
    *p = q;
    *cap = c;
    return 1;
}

static int64_t uf_find(int64_t *parent, int64_t k)
{
    while (parent[k] != k) {
        parent[k] = parent[parent[k]];
        k = parent[k];
    }
    return k;
}

static void uf_union(int64_t *parent, int64_t a, int64_t b)
{
    a = uf_find(parent, a);
    b = uf_find(parent, b);
    if (a < b)
        parent[b] = a;
    else if (b < a)
        parent[a] = b;
}

/* Index of root r in the increasing array roots[0..n), or -1. */
static int64_t find_root(const int64_t *roots, int64_t n, int64_t r)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (roots[mid] < r)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && roots[lo] == r ? lo : -1;
}

static int64_t comp_root_index(const sw_find_comp *c, int64_t n, int64_t r)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (c[mid].root < r)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && c[lo].root == r ? lo : -1;
}

/* A group that can grow no more: counted, filtered, and kept (in done) only when it passes, so
 * that rejected noise does not pile up over a long scan. 0 when out of memory. */
static int finish_group(const sw_find_plan *plan, join_state *j, const sw_find_acc *a)
{
    sw_spot s;
    sw_find_acc_to_spot(a, 1, &s);
    j->stats.components++;
    if (!sw_find_spot_filter(plan, &s, &j->stats))
        return 1;
    if (!grow((void **)&j->done, &j->cap_done, j->ndone + 1, sizeof(sw_find_acc)))
        return 0;
    j->done[j->ndone++] = *a;
    return 1;
}

/* Adds frame z's components (comps[0..m), links pairs[0..npairs) to the previous frame). */
static sw_status join_frame(sw_find_plan *plan, join_state *j, const sw_find_comp *comps, int64_t m,
                            int64_t z, const int32_t *pairs, int64_t npairs)
{
    int64_t na = j->nopen, nodes = na + m;
    if (!grow((void **)&j->parent, &j->cap_nodes, nodes, sizeof(int64_t)))
        goto nomem;
    if (j->cap_aux < j->cap_nodes) {
        size_t cap = (size_t)j->cap_nodes;
        int64_t *newid = realloc(j->newid, cap * sizeof(int64_t));
        if (newid)
            j->newid = newid;
        sw_find_acc *acc = realloc(j->acc, cap * sizeof(sw_find_acc));
        if (acc)
            j->acc = acc;
        unsigned char *has_cur = realloc(j->has_cur, cap);
        if (has_cur)
            j->has_cur = has_cur;
        if (!newid || !acc || !has_cur)
            goto nomem;
        j->cap_aux = j->cap_nodes;
    }
    for (int64_t k = 0; k < nodes; ++k)
        j->parent[k] = k;
    for (int64_t k = 0; k < npairs; ++k) {
        int64_t a = find_root(j->prev_roots, j->nprev, pairs[2 * k]);
        int64_t b = comp_root_index(comps, m, pairs[2 * k + 1]);
        if (a < 0 || b < 0)
            return sw_fail(plan->ctx, SW_EINTERNAL,
                           "find: a 3-D link names an unknown component (%d -> %d)", pairs[2 * k],
                           pairs[2 * k + 1]);
        uf_union(j->parent, j->prev_group[a], na + b);
    }
    /* Gather every set into its root's accumulator, in node order (deterministic sums). */
    for (int64_t k = 0; k < nodes; ++k) {
        j->has_cur[k] = 0;
        j->newid[k] = -1;
    }
    for (int64_t k = 0; k < nodes; ++k) {
        int64_t r = uf_find(j->parent, k);
        sw_find_acc a;
        if (k < na)
            a = j->open[k];
        else
            sw_find_acc_from_comp(plan, &comps[k - na], z, &a);
        if (r == k)
            j->acc[r] = a;
        else
            sw_find_acc_merge(&j->acc[r], &a);
        if (k >= na)
            j->has_cur[r] = 1;
    }
    /* Finished sets go to done; the others stay open, numbered afresh. */
    int64_t nopen = 0;
    for (int64_t k = 0; k < nodes; ++k) {
        if (uf_find(j->parent, k) != k)
            continue;
        if (j->has_cur[k])
            j->newid[k] = nopen++;
        else if (!finish_group(plan, j, &j->acc[k]))
            goto nomem;
    }
    if (!grow((void **)&j->open, &j->cap_open, nopen, sizeof(sw_find_acc)) ||
        !grow((void **)&j->prev_roots, &j->cap_prev, m, sizeof(int64_t)) ||
        !grow((void **)&j->prev_group, &j->cap_group, m, sizeof(int64_t)))
        goto nomem;
    for (int64_t k = 0; k < nodes; ++k)
        if (j->newid[k] >= 0)
            j->open[j->newid[k]] = j->acc[k];
    for (int64_t b = 0; b < m; ++b) {
        j->prev_roots[b] = comps[b].root;
        j->prev_group[b] = j->newid[uf_find(j->parent, na + b)];
    }
    j->nopen = nopen;
    j->nprev = m;
    return SW_OK;
nomem:
    return sw_fail(plan->ctx, SW_ENOMEM, "find: out of memory joining components in 3-D");
}

static int acc_order(const void *pa, const void *pb)
{
    const sw_find_acc *a = pa, *b = pb;
    if (a->first_z != b->first_z)
        return a->first_z < b->first_z ? -1 : 1;
    if (a->first_root != b->first_root)
        return a->first_root < b->first_root ? -1 : 1;
    return 0;
}

/* Closes every open group, sorts the 3-D spots into the listing order and appends the ones that
 * pass the filters. */
static sw_status join_finish(sw_find_plan *plan, join_state *j, sw_spot_list *spots,
                             sw_find_stats *stats)
{
    for (int64_t k = 0; k < j->nopen; ++k)
        if (!finish_group(plan, j, &j->open[k]))
            return sw_fail(plan->ctx, SW_ENOMEM, "find: out of memory joining components in 3-D");
    j->nopen = 0;
    /* done holds the groups that passed the filters. */
    qsort(j->done, (size_t)j->ndone, sizeof(sw_find_acc), acc_order);
    sw_find_stats local = j->stats;
    for (int64_t k = 0; k < j->ndone; ++k) {
        sw_spot s;
        sw_find_acc_to_spot(&j->done[k], 1, &s);
        local.spots++;
        if (spots) {
            sw_status st = sw_find_spot_append(plan->ctx, spots, &s);
            if (st != SW_OK)
                return st;
        }
    }
    sw_find_stats_add(stats, &local);
    return SW_OK;
}

/* ---------------------------------------------------------------- the sequence */

/* A host frame buffer with tight rows (stride = width * pixel size), pinned on CUDA: with the
 * device frame slots tight too (find_cuda.cu), each upload is one contiguous copy. Owned, so
 * sw_image_free releases it. */
static sw_status alloc_tight(sw_context *ctx, const sw_find_plan *plan, int pinned, sw_image *out)
{
    memset(out, 0, sizeof(*out));
    size_t row = (size_t)plan->width * sw_pixel_size(plan->p.type);
    void *data = sw_host_alloc(ctx, row * (size_t)plan->height, pinned);
    if (!data)
        return sw_fail(ctx, SW_ENOMEM, "find: out of %s memory for the frame buffers",
                       pinned ? "pinned host" : "host");
    out->width = plan->width;
    out->height = plan->height;
    out->stride = row;
    out->type = plan->p.type;
    out->memory = pinned ? SW_MEM_PINNED : SW_MEM_HOST;
    out->owned = 1;
    out->data = data;
    return SW_OK;
}

/* The slots of a sequence with a chunk source: pinned buffers of max(cap, frame) bytes and
 * tables of blocks, kept with the plan from one sequence to the next. */
static sw_status alloc_chunk_slots(sw_find_plan *plan, const sw_find_chunk_source *c, int nslots,
                                   int gpu, size_t *table_cap)
{
    sw_context *ctx = plan->ctx;
    const size_t es = sw_pixel_size(plan->p.type);
    const size_t frame = (size_t)plan->width * es * (size_t)plan->height;
    const size_t bytes = c->cap > frame ? c->cap : frame;
    /* room for blocks of 512 bytes on average (the filter's default is 8 KiB); frames of
     * smaller blocks are read decoded */
    size_t tcap = frame / 512 + 2 * (size_t)c->max_chunks + 64;
    if (tcap < 8192)
        tcap = 8192;
    if (plan->seq_raw_bytes < bytes || plan->seq_table_cap < tcap)
        for (int s = 0; s < SW_FIND_SEQ_SLOTS; ++s) {
            sw_image_free(&plan->seq_raw[s]);
            sw_host_free(plan->seq_table[s], plan->seq_pinned);
            plan->seq_table[s] = NULL;
        }
    plan->seq_pinned = gpu;
    plan->seq_raw_bytes = bytes > plan->seq_raw_bytes ? bytes : plan->seq_raw_bytes;
    plan->seq_table_cap = tcap > plan->seq_table_cap ? tcap : plan->seq_table_cap;
    for (int s = 0; s < nslots; ++s) {
        if (!plan->seq_raw[s].data) {
            sw_image *im = &plan->seq_raw[s];
            memset(im, 0, sizeof(*im));
            im->data = sw_host_alloc(ctx, plan->seq_raw_bytes, gpu);
            im->width = plan->width;
            im->height = plan->height;
            im->stride = (size_t)plan->width * es;
            im->type = plan->p.type;
            im->memory = gpu ? SW_MEM_PINNED : SW_MEM_HOST;
            im->owned = 1;
        }
        if (!gpu && !plan->seq_dec[s].data && alloc_tight(ctx, plan, 0, &plan->seq_dec[s]) != SW_OK)
            return SW_ENOMEM;
        if (!plan->seq_table[s])
            plan->seq_table[s] =
                sw_host_alloc(ctx, plan->seq_table_cap * sizeof(sw_bshuf_block), gpu);
        if (!plan->seq_raw[s].data || !plan->seq_table[s])
            return sw_fail(ctx, SW_ENOMEM,
                           "find: out of pinned host memory for the compressed frames' buffers");
    }
    *table_cap = plan->seq_table_cap;
    return SW_OK;
}

static sw_status run_sequence(sw_find_plan *plan, int64_t first, int64_t count,
                              const sw_find_source *source, const sw_find_chunk_source *csrc,
                              int three_d, sw_spot_list *spots, sw_find_stats *stats,
                              int64_t *gpu_frames)
{

    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "find: plan is NULL");
    sw_context *ctx = plan->ctx;
    plan->seq_failed = -1;
    if (!source || !source->read)
        return sw_fail(ctx, SW_EINVAL, "find: the frame source has no read function");
    if (first < 0 || count < 0)
        return sw_fail(ctx, SW_EINVAL, "find: frames %lld + %lld are not valid", (long long)first,
                       (long long)count);
    if (three_d && plan->refine)
        return sw_fail(ctx, SW_EINVAL,
                       "find: position refinement works on 2-D spots (one frame each), not with "
                       "3-D joining");
    if (three_d && plan->p.deblend)
        return sw_fail(ctx, SW_EINVAL,
                       "find: deblending works on 2-D spots (one frame each), not with 3-D "
                       "joining");
    if (count == 0)
        return SW_OK;

    int gpu = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    int64_t at = -1; /* the frame whose stage runs (and fails, if st does): seq_failed */
    int64_t count0 = spots ? spots->count : 0;
    int64_t refined0 = plan->refine_results ? plan->refine_results->count : 0;
    sw_find_stats local = {0};
    join_state join;
    memset(&join, 0, sizeof(join));
    int64_t link_cap = 4 * (int64_t)plan->p.max_components;
    int32_t *pairs = NULL;
    sw_image strong_img = {0};
    int strong_owned = 0;

    pipe_state ps;
    memset(&ps, 0, sizeof(ps));
    ps.plan = plan;
    ps.src = source;
    ps.first = first;
    ps.count = count;
    ps.csrc = csrc;
    ps.gpu = gpu;
    ps.nreaders = 1;
    ps.nslots = 2;
    sw_status st = SW_OK;
    sw_find_chunk *chunk_lists = NULL;
    if (ps.csrc) {
        /* several readers (reading stored chunks from the page cache is a copy, and one thread
         * copies a few GB/s), and two slots more than readers for the frames in flight */
        ps.nreaders = csrc->readers > 0 ? csrc->readers : 4;
        if (ps.nreaders > SW_FIND_SEQ_SLOTS - 2)
            ps.nreaders = SW_FIND_SEQ_SLOTS - 2;
        ps.nslots = ps.nreaders + 2;
        st = alloc_chunk_slots(plan, csrc, ps.nslots, gpu, &ps.table_cap);
        chunk_lists = st == SW_OK ? calloc((size_t)ps.nslots * (size_t)csrc->max_chunks,
                                           sizeof(sw_find_chunk))
                                  : NULL;
        if (st == SW_OK && !chunk_lists)
            st = sw_fail(ctx, SW_ENOMEM, "find: out of memory for the chunk lists");
        for (int s = 0; s < ps.nslots && st == SW_OK; ++s) {
            ps.slot[s].img = gpu ? plan->seq_raw[s] : plan->seq_dec[s];
            ps.slot[s].img.owned = 0;
            ps.slot[s].buf = plan->seq_raw[s].data;
            ps.slot[s].cap = plan->seq_raw_bytes;
            ps.slot[s].table = plan->seq_table[s];
            ps.slot[s].chunks = chunk_lists + (size_t)s * (size_t)csrc->max_chunks;
        }
    } else {
        /* The frame buffers stay with the plan from one sequence to the next (pinning 2 x 33 MB
         * costs milliseconds). */
        for (int s = 0; s < 2 && st == SW_OK; ++s) {
            if (!plan->seq_host[s].data)
                st = alloc_tight(ctx, plan, gpu, &plan->seq_host[s]);
            ps.slot[s].img = plan->seq_host[s];
        }
    }
    if (st == SW_OK && three_d) {
        pairs = malloc((size_t)link_cap * 2 * sizeof(int32_t));
        if (!pairs)
            st = sw_fail(ctx, SW_ENOMEM, "find: out of memory for 3-D links");
    }
    if (st == SW_OK && source->strong) {
        if (gpu) {
            st = sw_image_alloc(ctx, plan->width, plan->height, SW_PIX_U8, &strong_img);
            strong_owned = 1;
        } else {
            st = sw_image_wrap(plan->strong, plan->width, plan->height, 0, SW_PIX_U8, SW_MEM_HOST,
                               &strong_img);
        }
    }
    if (st != SW_OK) {
        free(pairs);
        free(chunk_lists);
        if (strong_owned)
            sw_image_free(&strong_img);
        return st;
    }
    pthread_mutex_init(&ps.mu, NULL);
    pthread_cond_init(&ps.cv, NULL);
    pthread_mutex_init(&ps.read_mu, NULL);
    pthread_t readers[SW_FIND_SEQ_SLOTS];
    reader_arg rargs[SW_FIND_SEQ_SLOTS];
    int started = 0;
    for (; started < ps.nreaders; ++started) {
        rargs[started] = (reader_arg){&ps, started};
        if (pthread_create(&readers[started], NULL, reader_main, &rargs[started]) != 0)
            break;
    }
    if (started < ps.nreaders) {
        st = sw_fail(ctx, SW_ENOMEM, "find: cannot start the reader threads");
        goto out_stop;
    }

    for (int64_t i = 0; i < count && st == SW_OK; ++i) {
        int64_t z = first + i, ncomp = 0, valid = 0, nstrong = 0;
        int slot = (int)(i % 2);                            /* device frame and label slot */
        const sw_image *host = &ps.slot[i % ps.nslots].img; /* the CPU path's frame        */
#ifdef SW_HAVE_CUDA
        if (gpu) {
            /* frame i + 1 is read, uploaded and decoded while frame i is processed: a failure
             * is that frame's */
            if (i == 0) {
                at = first;
                if ((st = wait_filled(&ps, 0)) != SW_OK ||
                    (st = upload_frame(&ps, 0, 0)) != SW_OK ||
                    (st = sw_find_gpu_upload_wait(plan, 0)) != SW_OK ||
                    (st = check_decoded(&ps, 0, 0)) != SW_OK)
                    break;
                release_frame(&ps, 0);
            }
            if (i + 1 < count) {
                at = first + i + 1;
                if ((st = wait_filled(&ps, i + 1)) != SW_OK ||
                    (st = upload_frame(&ps, i + 1, (int)((i + 1) % 2))) != SW_OK)
                    break;
            }
            at = z;
            st = sw_find_gpu_process(plan, NULL, slot, slot, z, &ncomp, &valid, &nstrong,
                                     source->strong ? &strong_img : NULL);
            if (st == SW_OK && i + 1 < count) {
                at = first + i + 1;
                st = sw_find_gpu_upload_wait(plan, (int)((i + 1) % 2));
                if (st == SW_OK)
                    st = check_decoded(&ps, i + 1, (int)((i + 1) % 2));
                if (st == SW_OK)
                    release_frame(&ps, i + 1);
            }
        } else
#endif
        {
            at = z;
            if ((st = wait_filled(&ps, i)) != SW_OK)
                break;
            st = sw_find_frame_cpu(plan, host, z, slot, &ncomp, &valid, &nstrong);
            /* a refinement or the deblending reads the frame after the labels: it is released
             * once the spots are made */
            if (!plan->refine && !plan->p.deblend)
                release_frame(&ps, i);
        }
        if (st != SW_OK)
            break;
        at = z; /* the frame's spots, masks and links */
        local.frames++;
        local.valid_pixels += valid;
        local.strong_pixels += nstrong;

        if (source->strong)
            sw_error_set(NULL, SW_OK, "%s", ""); /* as for the reader */
        if (source->strong && (st = source->strong(source->user, z, &strong_img)) != SW_OK) {
            /* The callback reported through this thread's message (sw_fail with ctx NULL). */
            const char *msg = sw_context_error(NULL);
            st = sw_fail(ctx, st, "find: the strong-mask callback failed at frame %lld: %s",
                         (long long)z, msg && *msg ? msg : sw_status_string(st));
            break;
        }
        if (!three_d) {
            const int64_t before = spots ? spots->count : 0;
            if (plan->p.deblend && !gpu)
                st = sw_find_deblend_emit(plan, host, plan->labels + (size_t)slot * plan->npix,
                                          plan->comps, ncomp, z, spots, &local);
#ifdef SW_HAVE_CUDA
            else if (plan->p.deblend)
                st = sw_find_gpu_deblend_emit(plan, NULL, slot, slot, ncomp, z, spots, &local);
#endif
            else
                st = sw_find_emit_frame(plan, plan->comps, ncomp, z, spots, &local);
            if (st == SW_OK && plan->refine) {
#ifdef SW_HAVE_CUDA
                const sw_image *on = gpu ? sw_find_gpu_frame(plan, slot) : host;
#else
                const sw_image *on = host;
#endif
                st = sw_find_refine_frame(plan, on, spots, before);
            }
            if (!gpu && (plan->refine || plan->p.deblend))
                release_frame(&ps, i);
        } else {
            int64_t npairs = 0;
            if (i > 0) {
#ifdef SW_HAVE_CUDA
                if (gpu)
                    st = sw_find_gpu_links(plan, 1 - slot, slot, pairs, link_cap, &npairs);
                else
#endif
                    st = sw_find_links_cpu(plan, plan->labels + (size_t)(1 - slot) * plan->npix,
                                           plan->labels + (size_t)slot * plan->npix, pairs,
                                           link_cap, &npairs);
            }
            if (st == SW_OK)
                st = join_frame(plan, &join, plan->comps, ncomp, z, pairs, npairs);
        }
        if (st == SW_OK && source->progress)
            source->progress(source->user, i + 1, count);
    }
    if (st == SW_OK && three_d) {
        at = -1; /* no one frame's */
        st = join_finish(plan, &join, spots, &local);
    }

out_stop:
    pthread_mutex_lock(&ps.mu);
    ps.stop = 1;
    pthread_cond_broadcast(&ps.cv);
    pthread_mutex_unlock(&ps.mu);
    for (int t = 0; t < started; ++t)
        pthread_join(readers[t], NULL);
    pthread_cond_destroy(&ps.cv);
    pthread_mutex_destroy(&ps.mu);
    pthread_mutex_destroy(&ps.read_mu);
    free(chunk_lists);
#ifdef SW_HAVE_CUDA
    if (gpu && st != SW_OK) { /* an upload may still be reading a host buffer */
        char saved[SW_ERROR_MAX];
        snprintf(saved, sizeof(saved), "%s", sw_context_error(ctx));
        for (int s = 0; s < 2; ++s)
            sw_find_gpu_upload_wait(plan, s);
        sw_fail(ctx, st, "%s", saved); /* the run's own message, not the waits' */
    }
#endif
    if (strong_owned)
        sw_image_free(&strong_img);
    free(pairs);
    join_free(&join);
    if (st != SW_OK) {
        plan->seq_failed = at;
        if (spots)
            spots->count = count0;
        if (plan->refine_results)
            plan->refine_results->count = refined0;
        return st;
    }
    sw_find_stats_add(stats, &local);
    if (gpu_frames)
        *gpu_frames += ps.gpu_frames;
    return SW_OK;
}

sw_status sw_find_sequence(sw_find_plan *plan, int64_t first, int64_t count,
                           const sw_find_source *source, int three_d, sw_spot_list *spots,
                           sw_find_stats *stats)
{
    return run_sequence(plan, first, count, source, NULL, three_d, spots, stats, NULL);
}

sw_status sw_find_sequence_chunks(sw_find_plan *plan, int64_t first, int64_t count,
                                  const sw_find_source *source, const sw_find_chunk_source *chunks,
                                  int three_d, sw_spot_list *spots, sw_find_stats *stats,
                                  int64_t *gpu_frames)
{
    if (chunks && (!chunks->read_chunks || chunks->max_chunks <= 0 || chunks->readers < 0))
        return sw_fail(plan ? plan->ctx : NULL, SW_EINVAL,
                       "find: the chunk source has no read_chunks, no room for chunks or a "
                       "negative reader count");
    return run_sequence(plan, first, count, source, chunks, three_d, spots, stats, gpu_frames);
}

int64_t sw_find_sequence_failed_frame(const sw_find_plan *plan)
{
    return plan ? plan->seq_failed : -1;
}
