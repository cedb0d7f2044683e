/*
 * Internals shared by the modules of the library (not installed, not public).
 */
#ifndef SW_CORE_INTERNAL_H
#define SW_CORE_INTERNAL_H

#include "spotwave/core.h"

#include <stdarg.h>

#ifdef SW_HAVE_OPENMP
#include <omp.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define SW_ERROR_MAX 1024

struct sw_context {
    sw_backend backend;  /* CPU or CUDA, never AUTO */
    char reason[320];    /* why this backend */
    int device;          /* CUDA ordinal */
    int multiprocessors; /* SM count of the CUDA device, for launch shapes */
    int threads;         /* OpenMP threads */
    void *stream;        /* cudaStream_t on CUDA */
    void *scratch;       /* device scratch buffer (CUDA), grown on demand */
    size_t scratch_size;
    void *stage[2]; /* device staging buffers for host images on CUDA, grown on demand */
    size_t stage_size[2];
    sw_log_fn log;
    void *log_user;
    sw_log_level log_level;
    uint64_t memory_limit;    /* bytes one input-sized request may ask for (memory.c) */
    char error[SW_ERROR_MAX]; /* last failure */
};

/*
 * Records a failure: formats the message into ctx (or the thread's buffer when ctx is NULL),
 * delivers it to the log at DEBUG level, and returns st so callers can write
 *     return sw_fail(ctx, SW_EINVAL, "width %d is not positive", w);
 */
sw_status sw_fail(sw_context *ctx, sw_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Returns the status of expr from the calling function when it is not SW_OK. */
#define SW_TRY(expr)                                                                               \
    do {                                                                                           \
        const sw_status st_ = (expr);                                                              \
        if (st_ != SW_OK)                                                                          \
            return st_;                                                                            \
    } while (0)

/* Sends a message to the context's log callback when its level is high enough. */
void sw_log(const sw_context *ctx, sw_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Checks a * b fits in size_t; 0 when it overflows. */
static inline int sw_mul_ok(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > (size_t)-1 / a)
        return 0;
    *out = a * b;
    return 1;
}

/* The output image of a plan's run: given, valid (sw_image_check), of type t and width x height,
 * and in device memory only when device_ok (else SW_ENODEV). The messages begin with who. */
sw_status sw_image_check_output(sw_context *ctx, const char *who, const sw_image *out,
                                sw_pixel_type t, int32_t width, int32_t height, int device_ok);

/* Loads n pixels of one host row of any type into doubles. */
void sw_load_row(const void *row, sw_pixel_type t, int32_t n, double *out);

/* SPOTWAVE_MAX_MEMORY when it is set but not a size (memory.c), NULL otherwise. */
const char *sw_memory_env_invalid(void);

/* Allocates/frees host memory for images: pinned through CUDA when pinned != 0. */
void *sw_host_alloc(sw_context *ctx, size_t bytes, int pinned);
void sw_host_free(void *p, int pinned);

/* The calling thread's number in the enclosing OpenMP team and the team's size (0 and 1 outside
 * a parallel region or without OpenMP). */
static inline int sw_omp_thread(void)
{
#ifdef SW_HAVE_OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static inline int sw_omp_threads(void)
{
#ifdef SW_HAVE_OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

/* FFTW's planner is not thread-safe: every fftw_plan_* and fftw_destroy_plan call in spotwave
 * (sim/shsim.c, sim/turbulence.c, ...) runs between these two. */
void sw_fftw_planner_lock(void);
void sw_fftw_planner_unlock(void);

#ifdef __cplusplus
}
#endif

#endif /* SW_CORE_INTERNAL_H */
