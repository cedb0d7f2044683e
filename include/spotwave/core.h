/*
 * spotwave core: status codes, the context (backend, device, stream, log), images.
 *
 * Conventions used by every spotwave module:
 *   - Pixels are 0-based, (x, y) = (column, row); the centre of pixel (0,0) is at (0.0, 0.0).
 *     Formats with 1-based conventions (FITS WCS, DIALS) are converted at the I/O boundary.
 *   - Images are row-major with an explicit row stride in bytes (sw_image.stride).
 *   - Every fallible function returns sw_status. The message of the last failure is given by
 *     sw_context_error(ctx); functions called with ctx == NULL keep their message per thread,
 *     readable with sw_context_error(NULL).
 *   - The library never prints, exits or aborts; it speaks through the log callback only.
 *   - On the CUDA backend, work on device images is queued on the context's stream
 *     (sw_context_stream, a non-blocking stream) and may still be running when the call returns:
 *     sw_image_convert between device images (without a clipped count) and sw_image_fill_random
 *     on a device image are asynchronous. Calls that return a host result (statistics, the
 *     clipped count) or that touch host memory (copies to or from the host, host images staged
 *     through the GPU) have finished when they return. Before other streams or the host read
 *     device images, call sw_context_synchronize (or order them after the context's stream).
 *   - A context is used by one thread at a time; each call selects the context's device.
 */
#ifndef SPOTWAVE_CORE_H
#define SPOTWAVE_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ status codes */

typedef enum sw_status {
    SW_OK = 0,
    SW_EINVAL = 1,       /* an argument is invalid (NULL, out of range, inconsistent sizes)  */
    SW_ENOMEM = 2,       /* host or device memory could not be allocated                      */
    SW_EIO = 3,          /* a file could not be opened, read or written                       */
    SW_EFORMAT = 4,      /* a file or table is malformed, truncated or of an unsupported kind */
    SW_ECUDA = 5,        /* a CUDA call failed                                                */
    SW_ENODEV = 6,       /* the requested backend/device is not usable here                   */
    SW_EUNSUPPORTED = 7, /* valid request that this build or backend does not support         */
    SW_ERANGE = 8,       /* a value (pixel, NaN/Inf, dimension) lies outside what is allowed  */
    SW_EINTERNAL = 9,    /* a bug in spotwave: please report it                               */
    SW_ETIMEDOUT = 10,   /* a wait ran out of time (streams)                                  */
    SW_ECANCELED = 11    /* a wait was stopped by the caller's stop flag (streams)            */
} sw_status;

/* Short fixed name of a status code, e.g. "invalid argument". Never NULL. */
const char *sw_status_string(sw_status st);

/* ------------------------------------------------------------------ version */

#define SW_VERSION_MAJOR 0
#define SW_VERSION_MINOR 1
#define SW_VERSION_PATCH 0

/* "1.0.0" */
const char *sw_version(void);
/* Build description: compiler, CUDA yes/no (+ architectures), libraries. */
const char *sw_build_info(void);
/* 1 when the library was built with the CUDA backend, 0 otherwise. */
int sw_built_with_cuda(void);

/* ------------------------------------------------------------------ logging */

typedef enum sw_log_level {
    SW_LOG_DEBUG = 0,
    SW_LOG_INFO = 1,
    SW_LOG_WARN = 2,
    SW_LOG_ERROR = 3
} sw_log_level;

/* Receives one message (no trailing newline). Called from the thread that made the call. */
typedef void (*sw_log_fn)(sw_log_level level, const char *message, void *user);

/* Name of a level: "debug", "info", "warn", "error". */
const char *sw_log_level_string(sw_log_level level);

/* ------------------------------------------------------------------ context */

typedef enum sw_backend {
    SW_BACKEND_AUTO = 0, /* the GPU when one is usable, the CPU otherwise (with a logged reason) */
    SW_BACKEND_CPU = 1,
    SW_BACKEND_CUDA = 2
} sw_backend;

/* "auto", "cpu", "cuda" */
const char *sw_backend_string(sw_backend b);
/* Parses "auto" | "cpu" | "cuda" (case-insensitive). SW_EINVAL on anything else. */
sw_status sw_backend_parse(const char *text, sw_backend *out);

typedef struct sw_context_params {
    sw_backend backend;     /* requested backend; AUTO by default                              */
    int device;             /* CUDA device ordinal, default 0                                   */
    int threads;            /* CPU threads for OpenMP regions; 0 = library default (all cores)  */
    sw_log_fn log;          /* optional log callback; NULL = silent                             */
    void *log_user;         /* passed back to log                                               */
    sw_log_level log_level; /* messages below this level are not delivered (default INFO)   */
} sw_context_params;

/* Fills p with the defaults (AUTO, device 0, threads 0, no log, level INFO). */
void sw_context_params_default(sw_context_params *p);

typedef struct sw_context sw_context;

/*
 * Creates a context. params may be NULL (defaults).
 * AUTO: takes CUDA device params->device when the library was built with CUDA and the device is
 * usable; otherwise the CPU, and the reason is logged at INFO and kept in
 * sw_context_backend_reason(). CUDA requested explicitly but not usable: SW_ENODEV, *out = NULL,
 * message in sw_context_error(NULL).
 */
sw_status sw_context_create(const sw_context_params *params, sw_context **out);
void sw_context_destroy(sw_context *ctx); /* NULL is ignored */

/* Backend actually in use: SW_BACKEND_CPU or SW_BACKEND_CUDA (never AUTO). */
sw_backend sw_context_backend(const sw_context *ctx);
/* Why the backend was chosen, in words ("CUDA device 0 (NVIDIA H100) usable",
 * "no CUDA driver: CPU backend used", ...). Never NULL. */
const char *sw_context_backend_reason(const sw_context *ctx);
/* Records a failure message (printf-style) on ctx, or on the calling thread when ctx is NULL,
 * as the library does for its own failures, and returns st: for callbacks that fail and want to
 * say why (a frame source of sw_find_sequence, for instance). */
sw_status sw_error_set(sw_context *ctx, sw_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Message of the last failure on ctx (or of this thread when ctx is NULL); "" when none. */
const char *sw_context_error(const sw_context *ctx);
/* Number of CPU threads the context uses for parallel regions. */
int sw_context_threads(const sw_context *ctx);

typedef struct sw_device_info {
    int ordinal;            /* CUDA device ordinal                       */
    char name[256];         /* e.g. "NVIDIA H100 80GB HBM3"             */
    size_t total_memory;    /* bytes of global memory                    */
    size_t free_memory;     /* bytes free when queried                   */
    int cc_major, cc_minor; /* compute capability, e.g. 9.0              */
    int multiprocessors;
    int driver_version; /* e.g. 13000 for 13.0                       */
    int runtime_version;
} sw_device_info;

/* The host CPU's model name ("model name" in /proc/cpuinfo, or "unknown CPU") into buf, which
 * it returns; for reports and benchmark records. */
const char *sw_cpu_name(char *buf, size_t size);

/* Number of usable CUDA devices (0 when built without CUDA, or no driver, or no device). */
int sw_cuda_device_count(void);
/* Information on the context's device. SW_ENODEV when the context runs on the CPU. */
sw_status sw_context_device_info(sw_context *ctx, sw_device_info *out);
/* Waits until all work queued on the context's stream is done (no-op on the CPU). */
sw_status sw_context_synchronize(sw_context *ctx);
/* The context's cudaStream_t as void* (NULL on the CPU). */
void *sw_context_stream(const sw_context *ctx);

/* ------------------------------------------------------------------ memory budget */

/*
 * Work bounded by the input. Every allocation whose size a file or an argument decides (image and
 * cube sizes from FITS, PGM and HDF5 headers, table rows, frames x lenslets, star counts, loop
 * sizes, device buffers sized from them) is checked against the context's memory limit before it
 * is made: a request above the limit fails with SW_ENOMEM and a message that says how many bytes
 * were asked, for what, the limit, and how to raise it. The limit bounds each such request (what
 * one step asks for at once, e.g. all frames of a cube), not the sum over the process; allocations
 * of fixed or small size are not counted.
 *
 * Default: SPOTWAVE_MAX_MEMORY when it is set (sw_memory_size_parse's syntax; a value that does
 * not parse is ignored with a warning in the log), otherwise half of the memory this process may
 * use: the smallest of the physical memory (sysconf _SC_PHYS_PAGES x _SC_PAGESIZE), the cgroup v2
 * limit (/sys/fs/cgroup/memory.max) and the address-space limit (RLIMIT_AS). Half, so that a
 * legitimate large job still fits while a file claiming more than the machine has is refused
 * before anything is allocated or paged in; 1 GiB when none of them can be read.
 */

/* The default limit in bytes, as above (reads the environment and the system each call). */
uint64_t sw_memory_limit_default(void);
/* Parses a size: a number (decimals allowed) with an optional binary suffix K, M, G, T
 * (x 1024^1..4; "KiB", "KB", "k" alike, case-insensitive), "512M", "8G", "1.5G", "1048576", or
 * "unlimited" (UINT64_MAX). SW_EINVAL for anything else, for 0 and for sizes beyond 2^64. */
sw_status sw_memory_size_parse(const char *text, uint64_t *out);
/* Sets the context's limit in bytes (0: back to sw_memory_limit_default()). */
sw_status sw_context_set_memory_limit(sw_context *ctx, uint64_t bytes);
/* The context's limit in bytes; sw_memory_limit_default() when ctx is NULL. */
uint64_t sw_context_memory_limit(const sw_context *ctx);
/*
 * Checks a request of count x size bytes against the limit of ctx (the default when ctx is NULL)
 * before allocating it. SW_OK when it fits; otherwise SW_ENOMEM and the message
 *   "<what>: needs 16 GiB (17179869184 bytes), above the memory limit of 8 GiB; raise it with
 *    spotwave --max-memory SIZE, SPOTWAVE_MAX_MEMORY=SIZE or sw_context_set_memory_limit()"
 * where <what> is formatted from fmt (printf-style: "the 100 frames of 4096 x 4096 of x.fits").
 * A product that overflows 64 bits is refused alike.
 */
sw_status sw_memory_check(sw_context *ctx, uint64_t count, uint64_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* Formats a byte count as "1.5 GiB" / "512 MiB" / "100 bytes" into buf; returns buf. */
const char *sw_memory_size_string(uint64_t bytes, char *buf, size_t size);

/* ------------------------------------------------------------------ data files */

/*
 * The folder of spotwave's data files (e.g. ocular/, the population statistics of sim eye),
 * looked up at run time in this order, the first that exists winning:
 *   1. $SPOTWAVE_DATA_DIR, when set and not empty (used as given, even if it does not exist);
 *   2. <folder of libspotwave.so, or of the program linking libspotwave.a>/../share/spotwave
 *      (an installed tree, wherever it was moved);
 *   3. <that folder>/data (the Python package's layout);
 *   4. the installation prefix's share/spotwave, compiled in;
 *   5. the source tree's data/, compiled in (a build that was never installed).
 * Written into buf without a trailing slash. SW_EINVAL when it does not fit; SW_EIO when none
 * of them exists (the message lists where it looked).
 */
sw_status sw_data_dir(sw_context *ctx, char *buf, size_t size);

/* ------------------------------------------------------------------ images */

typedef enum sw_pixel_type {
    SW_PIX_U8 = 1,
    SW_PIX_U16 = 2,
    SW_PIX_U32 = 3,
    SW_PIX_F32 = 4
} sw_pixel_type;

/* Bytes per pixel (1, 2, 4, 4); 0 for an unknown type. */
size_t sw_pixel_size(sw_pixel_type t);
/* "u8", "u16", "u32", "f32"; "?" for an unknown type. */
const char *sw_pixel_type_string(sw_pixel_type t);
/* Parses "u8" | "u16" | "u32" | "f32" (also "8", "16", "32", "32f"). */
sw_status sw_pixel_type_parse(const char *text, sw_pixel_type *out);

typedef enum sw_memory {
    SW_MEM_HOST = 0,   /* ordinary host memory (malloc)                    */
    SW_MEM_PINNED = 1, /* page-locked host memory (cudaHostAlloc)          */
    SW_MEM_DEVICE = 2  /* CUDA device memory: not addressable by the host */
} sw_memory;

/* Largest width or height accepted anywhere (images larger than this are refused as absurd). */
#define SW_IMAGE_MAX_DIM 65536
/* Largest pixel count accepted (2^31 - 1): indices fit a signed 32-bit integer on the GPU. */
#define SW_IMAGE_MAX_PIXELS 2147483647LL

/*
 * An image descriptor, as in SEP: every function takes the same thing.
 * Pixel (x, y) lives at (char *)data + y * stride + x * sw_pixel_size(type).
 * owned != 0: the image was made by sw_image_alloc* and must be released with sw_image_free.
 * owned == 0: a view of someone else's memory (sw_image_wrap, sw_image_roi); free is a no-op.
 */
typedef struct sw_image {
    int32_t width;
    int32_t height;
    size_t stride; /* bytes between the starts of consecutive rows, >= width * pixel size */
    sw_pixel_type type;
    sw_memory memory;
    int owned;
    void *data;
} sw_image;

/* Validates dimensions, stride, type and pointer; SW_EINVAL with a message when bad. */
sw_status sw_image_check(sw_context *ctx, const sw_image *img);

/*
 * Allocates a host image with a tight stride rounded up to 64 bytes, pixels zeroed.
 * Page-locked (SW_MEM_PINNED) when ctx runs on CUDA, so transfers are fast; plain host otherwise.
 * ctx may be NULL (plain host memory).
 */
sw_status sw_image_alloc(sw_context *ctx, int32_t width, int32_t height, sw_pixel_type type,
                         sw_image *out);
/* Allocates the image on the context's CUDA device (pitched, zeroed). SW_ENODEV on the CPU. */
sw_status sw_image_alloc_device(sw_context *ctx, int32_t width, int32_t height, sw_pixel_type type,
                                sw_image *out);
/* Releases an owned image and zeroes the descriptor; views and NULL are ignored. */
void sw_image_free(sw_image *img);

/* Describes caller memory without copying (owned = 0). stride 0 means tight. */
sw_status sw_image_wrap(void *data, int32_t width, int32_t height, size_t stride,
                        sw_pixel_type type, sw_memory memory, sw_image *out);
/* A view of the rectangle [x, x+w) x [y, y+h) of src (shares memory, owned = 0). */
sw_status sw_image_roi(sw_context *ctx, const sw_image *src, int32_t x, int32_t y, int32_t w,
                       int32_t h, sw_image *out);

/* Host address of pixel (x, y); no checks (the caller knows the image is on the host). */
static inline void *sw_image_row(const sw_image *img, int32_t y)
{
    return (char *)img->data + (size_t)y * img->stride;
}

/* 1 when two host images have the same size and type and identical pixel bytes (their strides
 * may differ), 0 otherwise. */
int sw_image_equal(const sw_image *a, const sw_image *b);

/* Reads pixel (x, y) of a host image as a double; no checks. */
double sw_image_get(const sw_image *img, int32_t x, int32_t y);

/*
 * Copies pixels between images of equal size and type, in any memory (host <-> device),
 * respecting both strides. On the CUDA backend the copy is queued on the context's stream and
 * completes before the call returns when either side is host memory.
 */
sw_status sw_image_copy(sw_context *ctx, const sw_image *src, sw_image *dst);

/*
 * Page-locks caller memory (cudaHostRegister) so that copies from and to it on ctx's GPU run at
 * the bus's speed like those of pinned images (e.g. a shared-memory image stream's frames,
 * stream.h). A no-op on the CPU backend. SW_ECUDA with CUDA's message when refused. Undo with
 * sw_host_unregister before the memory goes away.
 */
sw_status sw_host_register(sw_context *ctx, void *p, size_t bytes);
void sw_host_unregister(sw_context *ctx, void *p);

/*
 * Converts src into dst (same size, any types, both on the host or both on the device).
 * out = in * scale + offset, then, for integer destinations, rounded to nearest and clamped to
 * the type's range (the number of clamped pixels is returned in *clipped when not NULL).
 * A NaN or Inf source pixel into an integer destination is refused with SW_ERANGE and dst is left
 * untouched; into f32 it is carried through.
 * Runs on the GPU when ctx is CUDA and the images are device memory, or host memory that is
 * staged through the device (pinned memory recommended).
 */
sw_status sw_image_convert(sw_context *ctx, const sw_image *src, sw_image *dst, double scale,
                           double offset, size_t *clipped);

typedef struct sw_image_stats {
    double min, max;  /* over finite pixels; NaN when there are none */
    double sum;       /* over finite pixels */
    double mean;      /* sum / n_finite */
    double stddev;    /* population standard deviation over finite pixels */
    int64_t n_finite; /* finite pixels */
    int64_t n_nan;    /* NaN pixels (f32 only) */
    int64_t n_inf;    /* +-Inf pixels (f32 only) */
} sw_image_stats;

/* One-pass statistics of an image (host or device); on CUDA runs as a fused reduction. */
sw_status sw_image_stats_compute(sw_context *ctx, const sw_image *img, sw_image_stats *out);

typedef enum sw_random_dist {
    SW_RANDOM_UNIFORM = 0, /* uniform in [a, b)                   */
    SW_RANDOM_NORMAL = 1   /* normal with mean a, standard deviation b */
} sw_random_dist;

/*
 * Fills an f32 image (host or device) with random numbers from the spotwave RNG (rng.h):
 * pixel (x, y) takes draw sw_rng_draw(seed, stream, y * width + x), so the CPU and the GPU give
 * the same image (uniform: bit-identical; normal: equal to within float rounding).
 */
sw_status sw_image_fill_random(sw_context *ctx, sw_image *img, uint64_t seed, uint64_t stream,
                               sw_random_dist dist, double a, double b);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_CORE_H */
