/*
 * Between the parts of the find stage (not public):
 *   find.c            the API (find.h): validation, the plan, one frame, spot finishing and filters
 *   find_sequence.c   the double-buffered pipeline and the 3-D joining of components
 *   find_threshold.c  the dispersion thresholds on the CPU (summed-area tables, OpenMP)
 *   find_threshold_cuda.cu  their GPU twins (brute-force and tiled window sums)
 *   find_model.h      the per-pixel value, validity and decisions, written once for both
 *   find_label.c      connected components and component moments on the CPU (union-find)
 *   find_label_cuda.cu      their GPU twins
 *   find_cuda.cu      the GPU orchestration: device frame slots, copy stream, one frame
 */
#ifndef SW_FIND_INTERNAL_H
#define SW_FIND_INTERNAL_H

#include "core/core_internal.h"
#include "spotwave/find.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The moments of one connected component of one frame. Additive, so that components can be
 * merged (3-D joining). Coordinates in the sums are taken about the root pixel (rx, ry) =
 * (root % width, root / width): dx = x - rx, dy = y - ry, to keep the sums small.
 * The root is the component's first pixel in raster order (its smallest linear index y*width+x):
 * the CPU and the GPU both label a component by its root, so their labels are identical and the
 * component tables come out in the same order (increasing root).
 */
typedef struct sw_find_comp {
    int64_t root;            /* linear index of the first pixel (raster order)       */
    double sum_i;            /* sum I                                                 */
    double sum_ix, sum_iy;   /* sum I dx, sum I dy                                    */
    double sum_ixx, sum_iyy; /* sum I dx^2, sum I dy^2                                */
    int64_t npix;            /* pixels                                                */
    int32_t x0, x1, y0, y1;  /* bounding box, upper bounds exclusive                  */
    uint32_t peak;           /* largest pixel value (as thresholded: find_model.h)    */
    int32_t peak_x, peak_y;  /* first pixel in raster order with that value           */
} sw_find_comp;

#define SW_FIND_SEQ_SLOTS 8 /* host slots of a sequence, at most (readers + 2) */

struct sw_find_plan {
    sw_context *ctx;
    sw_find_params p; /* as given, with defaults resolved; p.mask / p.gain_map point to the
                         copies below */
    int32_t width, height;
    int64_t npix;
    int32_t min_count; /* min_local resolved (the whole window when min_local <= 0)        */
    double overload;   /* resolved: values >= overload are invalid                          */
    int uniform_gain;  /* 1 when gain_map is NULL (p.gain everywhere)                       */
    uint8_t *mask;     /* npix, 1 = valid, or NULL                                         */
    float *gain_map;   /* npix, or NULL                                                     */

    /* CPU work, owned by find_threshold.c and find_label.c (NULL on a CUDA plan is allowed) */
    void *thr_cpu;
    void *lab_cpu;
    /* GPU work, owned by find_threshold_cuda.cu and find_label_cuda.cu */
    void *thr_gpu;
    void *lab_gpu;
    sw_find_window window; /* resolved for the GPU: BRUTE or TILED */

    /* find.c's own buffers */
    uint8_t *strong;     /* npix (CPU path)                             */
    int32_t *labels;     /* npix (CPU path)                             */
    sw_find_comp *comps; /* p.max_components, host (pinned on CUDA)     */
    int comps_pinned;
    void *gpu;            /* find.c's device buffers (frame staging etc.) */
    sw_image seq_host[2]; /* sw_find_sequence's host frame buffers (tight rows, pinned on CUDA),
                             made by the first sequence, freed with the plan */
    /* sw_find_sequence_chunks's host slots (pinned): stored chunks or a decoded frame each, and
     * each one's table of bitshuffle/LZ4 blocks; made by the first such sequence */
    sw_image seq_raw[SW_FIND_SEQ_SLOTS];
    size_t seq_raw_bytes;
    void *seq_table[SW_FIND_SEQ_SLOTS];
    size_t seq_table_cap;
    int seq_pinned; /* seq_raw and seq_table are pinned (a CUDA plan) */
    sw_image seq_dec[SW_FIND_SEQ_SLOTS];
    /* a CPU plan: each slot's frame decoded there  */ /* entries of each */
    struct sw_refine_plan *refine;         /* sw_find_set_refine's, not owned, or NULL */
    struct sw_refine_list *refine_results; /* where each refined spot's result goes, or NULL */
    int64_t seq_failed;                    /* the frame the last sequence failed at, or -1
                                              (sw_find_sequence_failed_frame) */
};

/* ---------------------------------------------------------------- thresholds (CPU) */

/* Allocates plan->thr_cpu (the summed-area tables and scratch) for the plan's size. */
sw_status sw_find_threshold_cpu_init(sw_find_plan *plan);
void sw_find_threshold_cpu_free(sw_find_plan *plan);
/*
 * The plan's algorithm on a host frame (plan's size and type; any stride): strong[i] = 1 for a
 * strong pixel, 0 otherwise (i = y * width + x). *valid_count, when not NULL, receives the
 * number of valid pixels. Uses plan->ctx's threads.
 */
sw_status sw_find_threshold_cpu(sw_find_plan *plan, const sw_image *frame, uint8_t *strong,
                                int64_t *valid_count);

#ifdef SW_HAVE_CUDA
/* ---------------------------------------------------------------- thresholds (GPU) */

/* Uploads the mask and gain map, allocates plan->thr_gpu. */
sw_status sw_find_threshold_gpu_init(sw_find_plan *plan);
void sw_find_threshold_gpu_free(sw_find_plan *plan);
/*
 * The plan's algorithm on a device frame into the device array d_strong (npix bytes, 1/0), with
 * the window sums of `window` (BRUTE or TILED), queued on `stream` (a cudaStream_t). d_counts,
 * when not NULL, is a device array of 2 unsigned long long that receives (added atomically;
 * the caller zeroes it) the valid and the strong pixel counts.
 */
sw_status sw_find_threshold_gpu(sw_find_plan *plan, const sw_image *frame, uint8_t *d_strong,
                                sw_find_window window, unsigned long long *d_counts, void *stream);
#endif

/* ---------------------------------------------------------------- components (CPU) */

sw_status sw_find_label_cpu_init(sw_find_plan *plan);
void sw_find_label_cpu_free(sw_find_plan *plan);
/*
 * Connected components (plan->p.connectivity) of the strong pixels: labels[i] = the root of
 * pixel i's component (the component's smallest linear index), -1 for pixels that are not
 * strong. Then the moments of each component, with I the pixel value as find_model.h reads it
 * (sw_fm_value), into comps[0 .. *ncomp) in order of increasing root. More than `capacity`
 * components: SW_ERANGE (nothing written beyond capacity).
 */
sw_status sw_find_label_cpu(sw_find_plan *plan, const uint8_t *strong, const sw_image *frame,
                            int32_t *labels, sw_find_comp *comps, int64_t capacity, int64_t *ncomp);

/*
 * The links between two consecutive frames' components (3-D connectivity: a pixel strong in both
 * frames joins its two components): pairs (root in prev, root in cur) written to pairs[2k],
 * pairs[2k+1], each distinct pair once, sorted by (prev, cur). More than `capacity` pairs:
 * SW_ERANGE.
 */
sw_status sw_find_links_cpu(sw_find_plan *plan, const int32_t *labels_prev,
                            const int32_t *labels_cur, int32_t *pairs, int64_t capacity,
                            int64_t *npairs);

#ifdef SW_HAVE_CUDA
/* ---------------------------------------------------------------- components (GPU) */

sw_status sw_find_label_gpu_init(sw_find_plan *plan);
void sw_find_label_gpu_free(sw_find_plan *plan);
/*
 * GPU twin of sw_find_label_cpu: d_strong, the device frame and d_labels (npix int32) are device
 * memory; the component table is copied to the host array comps (same content and order as the
 * CPU's; the sums may differ in the last bits since atomics add in any order). Synchronises
 * `stream` (the host needs the count).
 */
sw_status sw_find_label_gpu(sw_find_plan *plan, const uint8_t *d_strong, const sw_image *frame,
                            int32_t *d_labels, sw_find_comp *comps, int64_t capacity,
                            int64_t *ncomp, void *stream);
/* GPU twin of sw_find_links_cpu on two device label arrays; pairs is host memory (same
 * content and order as the CPU's). Synchronises `stream`. */
sw_status sw_find_links_gpu(sw_find_plan *plan, const int32_t *d_labels_prev,
                            const int32_t *d_labels_cur, int32_t *pairs, int64_t capacity,
                            int64_t *npairs, void *stream);
#endif

/* ---------------------------------------------------------------- spots (find.c) */

/* Moments about the origin, mergeable across frames (3-D joining) and turned into a spot. */
typedef struct sw_find_acc {
    double s, sx, sy, sz, sxx, syy, szz; /* sum I, sum I x, ..., sum I z^2              */
    int64_t npix;
    int32_t x0, x1, y0, y1;
    int64_t z0, z1;
    uint32_t peak;
    int32_t peak_x, peak_y;
    int64_t peak_z;
    int64_t first_z, first_root; /* the first frame and its first pixel: the listing order */
} sw_find_acc;

void sw_find_acc_from_comp(const sw_find_plan *plan, const sw_find_comp *c, int64_t z,
                           sw_find_acc *a);
void sw_find_acc_merge(sw_find_acc *a, const sw_find_acc *b);
/* three_d: z and z_var from the moments (a one-frame 3-D spot gets z_var = 1/(12 sum I) like x
 * and y); otherwise z is the frame and z_var 0. */
void sw_find_acc_to_spot(const sw_find_acc *a, int three_d, sw_spot *out);

/* Frame checks against the plan (size, type, memory vs backend). */
sw_status sw_find_check_frame(const sw_find_plan *plan, const sw_image *frame);
/* SW_ERANGE when strong > max_strong_fraction * valid. */
sw_status sw_find_check_strong_fraction(const sw_find_plan *plan, int64_t frame_index,
                                        int64_t valid, int64_t strong);
/* A frame's components -> filtered 2-D spots appended to spots (may be NULL: counts only). */
sw_status sw_find_emit_frame(sw_find_plan *plan, const sw_find_comp *comps, int64_t ncomp,
                             int64_t frame_index, sw_spot_list *spots, sw_find_stats *stats);
/* find_deblend.c: as sw_find_emit_frame, but every component is deblended first (find.h
 * "Deblending"); frame and labels (the component roots, -1 elsewhere) in host memory. */
sw_status sw_find_deblend_emit(sw_find_plan *plan, const sw_image *frame, const int32_t *labels,
                               const sw_find_comp *comps, int64_t ncomp, int64_t frame_index,
                               sw_spot_list *spots, sw_find_stats *stats);
/* The CPU path of one host frame: threshold into plan->strong, labels into label slot `slot`
 * (plan->labels + slot * npix), components into plan->comps. */
sw_status sw_find_frame_cpu(sw_find_plan *plan, const sw_image *frame, int64_t frame_index,
                            int slot, int64_t *ncomp, int64_t *valid, int64_t *strong);

#ifdef SW_HAVE_CUDA
/* ---------------------------------------------------------------- GPU orchestration (find_cuda.cu)
 */

/* Device frame slots (2), strong mask, label slots (2), counters, a copy stream and events. */
sw_status sw_find_gpu_create(sw_find_plan *plan);
void sw_find_gpu_destroy(sw_find_plan *plan);
/* Queues the copy of a host frame into device frame slot `slot` on the copy stream. */
sw_status sw_find_gpu_upload(sw_find_plan *plan, const sw_image *host, int slot);
/* Waits until the upload into `slot` has finished (its host frame may then be reused). */
sw_status sw_find_gpu_upload_wait(sw_find_plan *plan, int slot);
/*
 * Queues on the copy stream the copy of a frame's stored bitshuffle/LZ4 chunks (comp, bytes of
 * them, pinned) and their table of blocks (table[0..nblocks), pinned; sw_bshuf_frame_walk) and
 * their decoding on the GPU into device frame slot `slot` (bitshuffle_cuda.cu); big: the largest
 * block's decoded bytes. sw_find_gpu_upload_wait waits for all of it; then
 * sw_find_gpu_decode_error says whether a block failed.
 */
sw_status sw_find_gpu_upload_chunks(sw_find_plan *plan, const void *comp, size_t bytes,
                                    const void *table, uint32_t nblocks, size_t big, int slot);
/* After sw_find_gpu_upload_wait: the first block of the slot's last decoding that failed, or
 * UINT32_MAX when none did. */
uint32_t sw_find_gpu_decode_error(sw_find_plan *plan, int slot);
/*
 * One frame on the context's stream: `frame` (a device image), or when NULL the device frame
 * slot `slot` (after its upload). Labels go to label slot `label_slot`; the components to
 * plan->comps. strong_host, when not NULL, receives the strong mask. Synchronous (the host gets
 * the counts and the table). The strong fraction is checked.
 */
sw_status sw_find_gpu_process(sw_find_plan *plan, const sw_image *frame, int slot, int label_slot,
                              int64_t frame_index, int64_t *ncomp, int64_t *valid, int64_t *strong,
                              sw_image *strong_host);
/* The device frame slot `slot` (valid until the next upload into it). */
const sw_image *sw_find_gpu_frame(sw_find_plan *plan, int slot);
/* Deblending of one frame's components on the host (sw_find_deblend_emit) after copying back
 * label slot `label_slot` and `frame` (a device image), or when NULL device frame slot `slot`. */
sw_status sw_find_gpu_deblend_emit(sw_find_plan *plan, const sw_image *frame, int slot,
                                   int label_slot, int64_t ncomp, int64_t frame_index,
                                   sw_spot_list *spots, sw_find_stats *stats);
/* Links between the components of label slots prev and cur (sw_find_links_gpu). */
sw_status sw_find_gpu_links(sw_find_plan *plan, int prev, int cur, int32_t *pairs, int64_t capacity,
                            int64_t *npairs);
#endif

/* The attached refinement (refine.c) of spots[first .. count) on their frame (host, or the
 * device copy on CUDA); results appended to plan->refine_results. No-op without one. */
sw_status sw_find_refine_frame(sw_find_plan *plan, const sw_image *frame, sw_spot_list *spots,
                               int64_t first);

/* A component's spot (2-D, frame z), before the filters. */
void sw_find_comp_to_spot(const sw_find_plan *plan, const sw_find_comp *c, int64_t z, sw_spot *out);
/* 1 when the spot passes the plan's filters; otherwise 0 and the matching rejected_* of stats
 * (when not NULL) is counted. */
int sw_find_spot_filter(const sw_find_plan *plan, const sw_spot *s, sw_find_stats *stats);
/* dst += src, field by field; dst may be NULL. */
void sw_find_stats_add(sw_find_stats *dst, const sw_find_stats *src);
/* Appends one spot, growing the list. */
sw_status sw_find_spot_append(sw_context *ctx, sw_spot_list *l, const sw_spot *s);

#ifdef __cplusplus
}
#endif

#endif
