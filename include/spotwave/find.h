/*
 * spotwave find: spot finding with the DIALS dispersion threshold and connected components
 * (papers below; DIALS's algorithms/image/threshold/local.h is the reference for what Winter's
 * note leaves out).
 *
 * Papers: Winter G. et al. 2018, "DIALS: implementation and evaluation of a new integration
 * package", Acta Cryst. D74, 85-97 (the dispersion spot finder); Kabsch W. 2010, "XDS", Acta
 * Cryst. D66, 125-132 (the index-of-dispersion test); Winter G. 2024, "CUDA Spotfinding"
 * (technical note: the dispersion kernel on GPUs).
 *
 * A frame goes through three steps:
 *   1. threshold: every pixel is classed strong or not (below);
 *   2. connected components of the strong pixels, 4- or 8-connected in a frame; in a sequence
 *      optionally also across consecutive frames (3-D, for rotation scans: a pixel is joined to
 *      the same pixel of the previous frame);
 *   3. spots: per component the intensity-weighted centroid, its variance, the summed intensity,
 *      the pixel count, the bounding box and the frame, then the filters.
 *
 * Pixel values. Spot finding counts photons: u8, u16 and u32 frames are used as they are; f32
 * frames are rounded to the nearest whole count (negative values to 0; NaN and Inf pixels are
 * masked). A pixel is *valid* when the mask (if any) says so and its value is below `overload`.
 * As in DIALS, values of 2^24 or more never enter the window sums (they can still be strong).
 * All window sums are exact integers, and the tests below are evaluated in double precision in
 * the same order on the CPU and the GPU, so both backends decide every pixel identically.
 *
 * Window statistics. For pixel (x, y) and half-sizes (kx, ky), the window is the rectangle
 * [x-kx, x+kx] x [y-ky, y+ky] clipped to the image; over its valid pixels
 *     m = count,  s = sum of values,  q = sum of squared values.
 * With g the gain at the pixel (the scalar `gain`, or the gain map), v its value:
 *
 * DISPERSION (DIALS "dispersion"; Winter's kernel): v is strong when it is valid, m >= min_local,
 * v > global_threshold and
 *     background test:  m q - s^2  >  g s (m - 1 + sigma_b sqrt(2 (m - 1)))
 *                       (the index of dispersion var/mean exceeds g + sigma_b g sqrt(2/(m-1)))
 *     strong test:      m v - s    >  sigma_s sqrt(g s m)
 *                       (v exceeds the local mean by sigma_s local standard deviations).
 *
 * DISPERSION_EXTENDED (DIALS "dispersion_extended", its default since 2019):
 *     1. the background test above alone (no strong test, no global threshold) gives the
 *        dispersed pixels D; invalid pixels count as in D (DIALS: "masked pixels are set as
 *        non-background in order to prevent them from affecting the erosion calculation"), so
 *        a masked or overloaded spot centre does not erode the strong ring around it;
 *     2. erosion: with d the Chebyshev distance from a pixel to the nearest pixel of the image
 *        that is not in D (pixels outside the image do not count), the core of D is
 *        C = { valid p in D : d(p) >= min(kx, ky) };
 *     3. the background B is the valid pixels outside C; its window sums m', s' are rebuilt over
 *        a wider window, half-sizes (kx + 2, ky + 2);
 *     4. a valid pixel is strong when it lies in C, v > global_threshold and
 *        v >= mean + sigma_s sqrt(g mean),  mean = s'/m' when m' >= 2, otherwise 0.
 *
 * min_local <= 0 means the whole window ((2kx+1)(2ky+1) pixels), as in DIALS; otherwise
 * 2 <= min_local <= (2kx+1)(2ky+1).
 *
 * Spots. Over a component's pixels (0-based pixel-centre coordinates, I = pixel value):
 *     intensity = sum I,   x = sum I x / sum I,   y likewise,
 *     x_var = (sum I (x - x_c)^2 / sum I + 1/12) / sum I
 * i.e. the Poisson variance of the centroid: the spot's intensity-weighted spread (plus the 1/12
 * px^2 of a pixel's own width, so that a one-pixel spot does not claim a zero error) over the
 * number of counts. z is the frame (the intensity-weighted frame of a 3-D spot) with z_var alike.
 * The bounding box is [x0, x1) x [y0, y1) x [z0, z1) (upper bounds exclusive, as in DIALS). The
 * peak is the brightest pixel (the first in raster order among equals).
 * Filters (DIALS's, with its defaults): npix < min_spot_size or npix > max_spot_size, and a peak
 * farther than max_separation px from the centroid (in 3-D, frames count as pixels), remove the
 * spot. A frame with more than max_strong_fraction of its valid pixels strong is an error
 * (SW_ERANGE): DIALS aborts there too, since such a frame is not a spot pattern.
 * Spots are listed in order of frame, then of their first pixel in raster order (3-D spots: of
 * their first frame, then first pixel).
 *
 * Deblending (deblend != 0; 2-D spots only): SExtractor's multi-thresholding (Bertin E., Arnouts
 * S. 1996, "SExtractor: Software for source extraction", A&AS 117, 393-404, section 2.4; the
 * parameters DEBLEND_NTHRESH and DEBLEND_MINCONT of SExtractor and SEP, Barbary K. 2016, JOSS
 * 1(6), 58). Per connected component (before the filters):
 *   - values: the pixel values as above (not smoothed: SExtractor deblends on its filtered
 *     detection image, which would merge spots closer than ~3 sigma) minus the component's local
 *     background b, the median of the valid pixels that are not strong within 2 px of the
 *     component's bounding box (0 when there are none): f_k for pixel k;
 *     F = sum of max(f_k, 0), the component's flux;
 *   - levels: t_i = t_0 (t_p / t_0)^(i / N), i = 1 .. N - 1 (N = deblend_levels), exponentially
 *     spaced between t_0 = the smallest f_k (at least t_p / 10^4) and the peak t_p = max f_k;
 *   - the tree, walked from the bottom: a branch at level t_i is an 8-connected set of the
 *     component's pixels with f > t_i; it counts when its flux (sum of f over its pixels) exceeds
 *     deblend_contrast * F. At the first level where two or more branches count, the component
 *     splits there; every such branch is walked on from level i + 1 the same way (the contrast
 *     is always against the whole component's F) and splits again or becomes a child. Branches
 *     that do not count stay with the rest. When no level has two counting branches the
 *     component is one spot, as without deblending;
 *   - the pixels: each child keeps its branch (its isophotal footprint at the level where it was
 *     cut); every other pixel of the component goes to the child whose Gaussian model is the
 *     largest there: peak P_c exp(-d^T S_c^-1 d / 2), d the pixel's offset from the child's
 *     footprint centroid, S_c the footprint's second moments (+ 1/12 px^2) rescaled to the
 *     size of a Gaussian that has P_c at its peak and the cut level at its footprint's edge
 *     (det S_c = (area / (2 pi ln(P_c / t)))^2).
 * Each child is then a spot of its own (moments of its pixels' values as above; the filters
 * apply to it) with `parent` = the 1-based position in the spot list of the first child of the
 * same component, so children of one blend share it; unsplit spots have parent 0. Children are
 * listed where their component would have been, in order of their first pixel. Deblending runs
 * on the CPU (on a CUDA context after the GPU's labelling: the labels and the frame are copied
 * back to the host), one component after another.
 * Limits: a pair becomes two branches only where its light has two maxima with a level between
 * saddle and peaks: equal Gaussian stars from ~3 sigma apart with 32 levels over a 100:1 range
 * (~2.5 sigma with 64), 1:5 stars beyond ~3.3 sigma (closer, the faint one has no maximum of its
 * own). A refinement (refine.h, "Blends") fits a blend's children jointly (GAUSS, MOFFAT): a
 * child fitted alone on a stamp that holds its neighbour too is pulled towards it; XWIN keeps
 * the deblended centroids (tests/unit/test_find_deblend.c measures all three).
 *
 * Backends. CPU: summed-area tables (as DIALS), OpenMP over rows; union-find labelling. CUDA:
 * window sums per pixel (Winter's brute-force window, or a shared-memory tiled version; see
 * sw_find_window), union-find labelling with atomics, moments by atomics; the component table is
 * copied back (only that, and the strong mask when asked for).
 */
#ifndef SPOTWAVE_FIND_H
#define SPOTWAVE_FIND_H

#include <stddef.h>
#include <stdint.h>
#include "spotwave/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sw_find_algorithm {
    SW_FIND_DISPERSION = 0,         /* DIALS "dispersion"                 */
    SW_FIND_DISPERSION_EXTENDED = 1 /* DIALS "dispersion_extended" (default) */
} sw_find_algorithm;

/* How the GPU computes the window sums (the CPU always uses summed-area tables). */
typedef enum sw_find_window {
    SW_FIND_WINDOW_AUTO = 0,  /* the faster one (benchmarked: see BENCHMARKS.md) */
    SW_FIND_WINDOW_BRUTE = 1, /* one thread per pixel sums its whole window (Winter) */
    SW_FIND_WINDOW_TILED = 2  /* a block sums column strips in shared memory, then rows */
} sw_find_window;

/* Largest kernel half-size accepted (windows up to 31 x 31; the sums stay exact in 64 bits). */
#define SW_FIND_MAX_KERNEL 15

/* Most deblending sub-thresholds accepted. */
#define SW_FIND_MAX_DEBLEND_LEVELS 1024

typedef struct sw_find_params {
    int32_t width, height; /* frame size                                                    */
    sw_pixel_type type;    /* u8, u16, u32 or f32                                            */

    sw_find_algorithm algorithm; /* default SW_FIND_DISPERSION_EXTENDED                    */
    int32_t kernel_x, kernel_y;  /* window half-sizes, default 3 x 3 (a 7 x 7 window)     */
    double sigma_background;     /* sigma_b, default 6                                      */
    double sigma_strong;         /* sigma_s, default 3                                      */
    int32_t min_local;           /* default 2; <= 0: the whole window                       */
    double global_threshold;     /* default 0                                               */
    double gain;                 /* default 1 (used when gain_map is NULL)                  */
    const float *gain_map;       /* width * height gains (> 0), or NULL; copied at create    */
    const uint8_t *mask;         /* width * height, non-zero = valid, or NULL; copied        */
    double overload;             /* values >= overload are masked; 0 = the type's default:
                                    u8 255, u16 0xfffe (Winter), u32 0xfffffffe, f32 none  */

    int32_t connectivity;       /* 4 (default, DIALS) or 8                                  */
    int64_t min_spot_size;      /* pixels, default 3 (DIALS for photon-counting detectors)  */
    int64_t max_spot_size;      /* pixels, default 1000; <= 0: no limit                     */
    double max_separation;      /* px, peak to centroid, default 2; <= 0: off               */
    double max_strong_fraction; /* default 0.25; <= 0: off                                  */

    sw_find_window window;  /* GPU window sums, default AUTO                              */
    int32_t max_components; /* components a frame may have before filtering (the GPU's
                               table), default 262144                                      */

    int32_t deblend;         /* 1: split touching spots (above), default 0 (off)             */
    int32_t deblend_levels;  /* N, sub-thresholds, 1 .. SW_FIND_MAX_DEBLEND_LEVELS (default 32:
                                SExtractor's  DEBLEND_NTHRESH)  */
    double deblend_contrast; /* C, 0 .. 1 (default 0.005: SExtractor's DEBLEND_MINCONT;
                                1 never splits)                                             */
} sw_find_params;

/* Fills p with the defaults above for a width x height frame of type t. */
void sw_find_params_default(sw_find_params *p, int32_t width, int32_t height, sw_pixel_type t);

/* "dispersion" | "dispersion_extended" */
const char *sw_find_algorithm_string(sw_find_algorithm a);
sw_status sw_find_algorithm_parse(const char *text, sw_find_algorithm *out);

typedef struct sw_spot {
    double x, y, z;             /* centroid: px, px, frame                                  */
    double x_var, y_var, z_var; /* variance of the centroid (above), px^2 / frames^2        */
    double intensity;           /* summed counts                                            */
    int64_t npix;               /* strong pixels                                            */
    int32_t x0, x1, y0, y1;     /* bounding box, upper bounds exclusive                     */
    int64_t z0, z1;             /* frames [z0, z1)                                          */
    int32_t peak_x, peak_y;     /* brightest pixel                                          */
    int64_t peak_z;
    double peak;    /* its value                                                        */
    int64_t parent; /* deblending: 0, or the 1-based list position of its blend's first child */
} sw_spot;

typedef struct sw_spot_list {
    int64_t count;
    int64_t capacity;
    sw_spot *spots;
} sw_spot_list;

void sw_spot_list_free(sw_spot_list *l); /* frees the array and zeroes the list; NULL ignored */

typedef struct sw_find_stats {
    int64_t frames;              /* frames processed                                       */
    int64_t valid_pixels;        /* summed over frames                                     */
    int64_t strong_pixels;       /* summed over frames                                     */
    int64_t components;          /* connected components (3-D ones in a 3-D sequence)      */
    int64_t spots;               /* kept after the filters                                 */
    int64_t rejected_small;      /* npix < min_spot_size                                   */
    int64_t rejected_large;      /* npix > max_spot_size                                   */
    int64_t rejected_separation; /* peak too far from the centroid                         */
    int64_t blends;              /* components that deblending split                       */
    int64_t children;            /* the spots they were split into (before the filters)    */
} sw_find_stats;

typedef struct sw_find_plan sw_find_plan;

/* Validates p (SW_EINVAL naming the bad field) and prepares the work buffers (device ones on a
 * CUDA context). */
sw_status sw_find_create(sw_context *ctx, const sw_find_params *p, sw_find_plan **out);
void sw_find_destroy(sw_find_plan *plan); /* NULL is ignored */

/*
 * One frame (host or device memory, the plan's size and type), labelled in 2-D. The spots that
 * pass the filters are appended to `spots` (grown as needed) with z = frame_index. strong, when
 * not NULL, is a host u8 image of the frame's size that receives 1 for strong pixels, 0 otherwise.
 * stats, when not NULL, is added to (zero it first). On failure nothing is appended.
 */
sw_status sw_find_run(sw_find_plan *plan, const sw_image *frame, int64_t frame_index,
                      sw_spot_list *spots, sw_image *strong, sw_find_stats *stats);

/* One stored chunk of a frame (sw_find_chunk_source, sw_h5_read_frame_chunks): its stored
 * bytes at offset (size of them) in the frame's buffer, decoding to out_size bytes that go to
 * out_offset in the frame (tight rows: row y of the frame at y * width * pixel size). */
typedef struct sw_find_chunk {
    uint64_t offset, size;
    uint64_t out_offset, out_size;
} sw_find_chunk;

/*
 * Where sw_find_sequence gets its frames and reports back. read fills dst (a host image of the
 * plan's size and type, pinned on CUDA) with frame `index`; it runs on a reader thread of its
 * own, one frame ahead of the GPU, so it may block on I/O freely (but must not call into the same
 * sw_context). strong (optional) receives each frame's strong mask; progress (optional) is
 * called after every frame (in a 2-D sequence, once that frame's spots, and their refinement
 * results, have been appended: the callback may read them). Both are called on the caller's
 * thread. A callback that returns an
 * error stops the run with that error; to say why, it calls sw_error_set(NULL, status, ...)
 * before returning, and the run's message (sw_context_error of the plan's context) quotes it.
 */
typedef struct sw_find_source {
    sw_status (*read)(void *user, int64_t index, sw_image *dst);
    sw_status (*strong)(void *user, int64_t index, const sw_image *mask);
    void (*progress)(void *user, int64_t done, int64_t total);
    void *user;
} sw_find_source;

/*
 * Frames first .. first+count-1 through a double-buffered pipeline: while frame n is thresholded
 * and labelled, frame n+1 is copied to the device and frame n+2 is read. three_d != 0 joins
 * components across consecutive frames (rotation scans); the filters then apply to the 3-D spots.
 * Spots are appended to `spots`; stats is added to.
 */
sw_status sw_find_sequence(sw_find_plan *plan, int64_t first, int64_t count,
                           const sw_find_source *source, int three_d, sw_spot_list *spots,
                           sw_find_stats *stats);

/*
 * Frames stored as bitshuffle/LZ4 chunks (HDF5 filter 32008 with LZ4: the Eiger detectors'
 * files), for sw_find_sequence_chunks to decode on the GPU. read_chunks fills buf (cap bytes,
 * pinned host memory) with frame `index`'s stored chunks and chunks[0..*nchunks) (room for
 * max_chunks) with where each lies and where it goes in the frame, the chunks tiling the frame's
 * rows in order (sw_h5_read_frame_chunks does this for an HDF5 reader); *nchunks = 0 says that
 * this frame is to be read decoded, with the frame source's read. It runs on `readers` threads at
 * once (0: 4, at most 6), each reading every readers-th frame, so it must be thread-safe; it
 * reports failures as the frame source's read does.
 */
typedef struct sw_find_chunk_source {
    sw_status (*read_chunks)(void *user, int64_t index, void *buf, size_t cap,
                             sw_find_chunk *chunks, int64_t max_chunks, int64_t *nchunks);
    size_t cap;         /* the most stored bytes of a frame (sw_h5_frame_chunks_limits) */
    int64_t max_chunks; /* the most chunks of a frame                                  */
    int readers;        /* threads that read at once (0: 4)                            */
    void *user;
} sw_find_chunk_source;

/*
 * sw_find_sequence with frames that come as stored bitshuffle/LZ4 chunks: on a CUDA plan, the
 * reader threads read each frame's chunks (and walk their block counts, every one checked), the
 * compressed bytes are copied to the GPU and decoded there into the frame (one warp per 8 KiB
 * LZ4 block, then the bit transpose: Masui K. et al. (2015), "A compression scheme for radio
 * data in high performance computing", Astronomy and Computing 12, 181-190), while the previous
 * frame is thresholded; the frames are bit-identical to the CPU decoder's, so are the spots. A
 * frame whose chunks do not decode is SW_EFORMAT with the CPU decoder's reason (a frame the GPU
 * refuses but liblz4 decodes, an LZ4 offset of 0, is decoded on the CPU instead). On a CPU plan
 * the reader threads decode the chunks themselves (the CPU decoder, one thread a frame). Frames
 * that chunks does not give (every frame with chunks NULL) are read with source->read, which is
 * then called from one reader thread at a time. *gpu_frames (when not
 * NULL) is added the number of frames decoded on the GPU.
 */
sw_status sw_find_sequence_chunks(sw_find_plan *plan, int64_t first, int64_t count,
                                  const sw_find_source *source, const sw_find_chunk_source *chunks,
                                  int three_d, sw_spot_list *spots, sw_find_stats *stats,
                                  int64_t *gpu_frames);

/*
 * The frame at which the plan's last sw_find_sequence or sw_find_sequence_chunks failed: the one
 * whose read, decoding (on the GPU or a reader thread), processing or callback stopped the run,
 * which is the frame its message names; -1 when that run succeeded, failed before its frames
 * (a bad argument, no memory for the buffers) or at the end of 3-D joining, or none ran. With
 * frames in flight (frame n + 1 read and decoded while frame n is processed) it can be the frame
 * after the last one the progress callback reported. For a caller that must say which frame of
 * which file failed (the command under MPI, whose ranks each run a block of frames).
 */
int64_t sw_find_sequence_failed_frame(const sw_find_plan *plan);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_FIND_H */
