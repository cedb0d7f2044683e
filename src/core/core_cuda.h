/*
 * The CUDA side of the core (core_cuda.cu), called from the C side only when the library was
 * built with CUDA (SW_HAVE_CUDA). Every function reports failures through sw_fail on ctx.
 */
#ifndef SW_CORE_CUDA_H
#define SW_CORE_CUDA_H

#include "core/core_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices, 0 when there is no driver or no device (reason written when not NULL). */
int sw_cuda_device_count_reason(char *reason, size_t n);
/* Makes ctx use device ctx->device: checks that spotwave's kernels run on it (a probe launch),
 * creates the stream. Returns SW_ENODEV with the reason in ctx->error when it is not usable. */
sw_status sw_cuda_context_init(sw_context *ctx);
void sw_cuda_context_release(sw_context *ctx);
sw_status sw_cuda_device_info(sw_context *ctx, sw_device_info *out);
sw_status sw_cuda_synchronize(sw_context *ctx);

void *sw_cuda_host_alloc(size_t bytes);
void sw_cuda_host_free(void *p);
sw_status sw_cuda_host_register(sw_context *ctx, void *p, size_t bytes);
void sw_cuda_host_unregister(void *p);
void sw_cuda_device_free(void *p);
/* Pitched, zeroed device allocation for an image descriptor already filled with size/type. */
sw_status sw_cuda_image_alloc(sw_context *ctx, sw_image *img);
/* 2-D copy between any two memories; synchronous when either side is on the host. */
sw_status sw_cuda_image_copy(sw_context *ctx, const sw_image *src, sw_image *dst);

/* A device view (owned = 0) of the context's staging buffer `slot` (0 or 1), grown as needed,
 * for a width x height image of type t: where host images are staged through the GPU. */
sw_status sw_cuda_staging_image(sw_context *ctx, int slot, int32_t width, int32_t height,
                                sw_pixel_type t, sw_image *out);

/* Device-resident images only (checked by the caller). */
sw_status sw_cuda_count_nonfinite(sw_context *ctx, const sw_image *src, int64_t *count);
sw_status sw_cuda_convert(sw_context *ctx, const sw_image *src, sw_image *dst, double scale,
                          double offset, size_t *clipped);
sw_status sw_cuda_stats(sw_context *ctx, const sw_image *img, sw_image_stats *out);
sw_status sw_cuda_fill_random(sw_context *ctx, sw_image *img, uint64_t seed, uint64_t stream,
                              int dist, double a, double b);

#ifdef __cplusplus
}
#endif

#endif
