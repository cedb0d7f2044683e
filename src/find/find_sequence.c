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
#include "spotwave/refine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the reader thread */

typedef struct pipe_state {
    sw_find_plan *plan;
    const sw_find_source *src;
    int64_t first, count;
    sw_image host[2];

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int filled[2];    /* host[s] holds its frame                                */
    int64_t released; /* frames 0 .. released-1 no longer need their host buffer */
    int stop;         /* the main thread gave up                                */
    sw_status reader_status;
    char reader_error[SW_ERROR_MAX];
} pipe_state;

static void *reader_main(void *arg)
{
    pipe_state *ps = arg;
    for (int64_t r = 0; r < ps->count; ++r) {
        pthread_mutex_lock(&ps->mu);
        while (!ps->stop && r >= ps->released + 2)
            pthread_cond_wait(&ps->cv, &ps->mu);
        int stop = ps->stop;
        pthread_mutex_unlock(&ps->mu);
        if (stop)
            return NULL;
        sw_error_set(NULL, SW_OK, "%s", ""); /* so that a silent failure quotes nothing old */
        sw_status st = ps->src->read(ps->src->user, ps->first + r, &ps->host[r % 2]);
        pthread_mutex_lock(&ps->mu);
        if (st != SW_OK) {
            ps->reader_status = st;
            /* The callback reported through this thread's message (sw_fail with ctx NULL). */
            const char *msg = sw_context_error(NULL);
            snprintf(ps->reader_error, sizeof(ps->reader_error), "%s",
                     msg && *msg ? msg : "the frame source failed");
            pthread_cond_broadcast(&ps->cv);
            pthread_mutex_unlock(&ps->mu);
            return NULL;
        }
        ps->filled[r % 2] = 1;
        pthread_cond_broadcast(&ps->cv);
        pthread_mutex_unlock(&ps->mu);
    }
    return NULL;
}

/* Waits until frame i is in its host buffer; the reader's failure otherwise. */
static sw_status wait_filled(pipe_state *ps, int64_t i)
{
    sw_status st = SW_OK;
    pthread_mutex_lock(&ps->mu);
    while (!ps->filled[i % 2] && ps->reader_status == SW_OK)
        pthread_cond_wait(&ps->cv, &ps->mu);
    if (!ps->filled[i % 2])
        st = sw_fail(ps->plan->ctx, ps->reader_status, "find: reading frame %lld: %s",
                     (long long)(ps->first + i), ps->reader_error);
    pthread_mutex_unlock(&ps->mu);
    return st;
}

static void release_frame(pipe_state *ps, int64_t i)
{
    pthread_mutex_lock(&ps->mu);
    ps->filled[i % 2] = 0;
    ps->released = i + 1;
    pthread_cond_broadcast(&ps->cv);
    pthread_mutex_unlock(&ps->mu);
}

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

sw_status sw_find_sequence(sw_find_plan *plan, int64_t first, int64_t count,
                           const sw_find_source *source, int three_d, sw_spot_list *spots,
                           sw_find_stats *stats)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "find: plan is NULL");
    sw_context *ctx = plan->ctx;
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
    sw_status st = SW_OK;
    /* The frame buffers stay with the plan from one sequence to the next (pinning 2 x 33 MB
     * costs milliseconds). */
    for (int s = 0; s < 2 && st == SW_OK; ++s) {
        if (!plan->seq_host[s].data)
            st = alloc_tight(ctx, plan, gpu, &plan->seq_host[s]);
        ps.host[s] = plan->seq_host[s];
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
        if (strong_owned)
            sw_image_free(&strong_img);
        return st;
    }
    pthread_mutex_init(&ps.mu, NULL);
    pthread_cond_init(&ps.cv, NULL);
    pthread_t reader;
    if (pthread_create(&reader, NULL, reader_main, &ps) != 0) {
        st = sw_fail(ctx, SW_ENOMEM, "find: cannot start the reader thread");
        goto out_nothread;
    }

    for (int64_t i = 0; i < count && st == SW_OK; ++i) {
        int64_t z = first + i, ncomp = 0, valid = 0, nstrong = 0;
        int slot = (int)(i % 2);
#ifdef SW_HAVE_CUDA
        if (gpu) {
            if (i == 0) {
                if ((st = wait_filled(&ps, 0)) != SW_OK ||
                    (st = sw_find_gpu_upload(plan, &ps.host[0], 0)) != SW_OK ||
                    (st = sw_find_gpu_upload_wait(plan, 0)) != SW_OK)
                    break;
                release_frame(&ps, 0);
            }
            if (i + 1 < count) {
                if ((st = wait_filled(&ps, i + 1)) != SW_OK ||
                    (st = sw_find_gpu_upload(plan, &ps.host[(i + 1) % 2], (int)((i + 1) % 2))) !=
                        SW_OK)
                    break;
            }
            st = sw_find_gpu_process(plan, NULL, slot, slot, z, &ncomp, &valid, &nstrong,
                                     source->strong ? &strong_img : NULL);
            if (st == SW_OK && i + 1 < count) {
                st = sw_find_gpu_upload_wait(plan, (int)((i + 1) % 2));
                if (st == SW_OK)
                    release_frame(&ps, i + 1);
            }
        } else
#endif
        {
            if ((st = wait_filled(&ps, i)) != SW_OK)
                break;
            st = sw_find_frame_cpu(plan, &ps.host[slot], z, slot, &ncomp, &valid, &nstrong);
            /* a refinement or the deblending reads the frame after the labels: it is released
             * once the spots are made */
            if (!plan->refine && !plan->p.deblend)
                release_frame(&ps, i);
        }
        if (st != SW_OK)
            break;
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
                st = sw_find_deblend_emit(plan, &ps.host[slot],
                                          plan->labels + (size_t)slot * plan->npix, plan->comps,
                                          ncomp, z, spots, &local);
#ifdef SW_HAVE_CUDA
            else if (plan->p.deblend)
                st = sw_find_gpu_deblend_emit(plan, NULL, slot, slot, ncomp, z, spots, &local);
#endif
            else
                st = sw_find_emit_frame(plan, plan->comps, ncomp, z, spots, &local);
            if (st == SW_OK && plan->refine) {
#ifdef SW_HAVE_CUDA
                const sw_image *on = gpu ? sw_find_gpu_frame(plan, slot) : &ps.host[slot];
#else
                const sw_image *on = &ps.host[slot];
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
    if (st == SW_OK && three_d)
        st = join_finish(plan, &join, spots, &local);

    pthread_mutex_lock(&ps.mu);
    ps.stop = 1;
    pthread_cond_broadcast(&ps.cv);
    pthread_mutex_unlock(&ps.mu);
    pthread_join(reader, NULL);
out_nothread:
    pthread_cond_destroy(&ps.cv);
    pthread_mutex_destroy(&ps.mu);
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
        if (spots)
            spots->count = count0;
        if (plan->refine_results)
            plan->refine_results->count = refined0;
        return st;
    }
    sw_find_stats_add(stats, &local);
    return SW_OK;
}
