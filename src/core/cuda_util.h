/*
 * What every .cu file of the library shares, so that each does these things the same way (CUDA
 * translation units only: it includes the CUDA runtime's and cuBLAS's headers).
 *
 * 1. Checks that return from the calling function through sw_fail when a call fails, naming the
 *    stage and the call as written:
 *        "<stage>: CUDA call <call> failed: <cudaGetErrorString>"
 *        "<stage>: cuBLAS call <call> failed (<status>)"   (likewise cuSOLVER, cuFFT)
 *    with SW_ENOMEM for the library's out-of-memory code and SW_ECUDA otherwise. A file says once
 *    which context and stage its checks use, then writes SW_CU(call), SW_CUBLAS(call), ...:
 *        #define SW_CUDA_CTX   plan->ctx
 *        #define SW_CUDA_STAGE "centroid"
 *    (a NULL stage gives the message without "<stage>: "). SW_CUDA_CHECK takes both explicitly,
 *    for code that has another context at hand.
 *
 * 2. Device memory: sw_cuda_alloc, sw_cuda_upload (arrays of n elements), SW_CUDA_FREE (a list
 *    of them, NULL ones included).
 *
 * 3. sw_cublas_create: a cuBLAS handle on a stream with a workspace of its own.
 *
 * 4. sw_event_pair: the GPU time of queued work.
 *
 * 5. sw_graph: the run of a stage captured once from its stream into a CUDA graph and launched
 *    as one piece afterwards (the real-time stages: rtc, sabre, pupil, aberrometry).
 */
#ifndef SW_CORE_CUDA_UTIL_H
#define SW_CORE_CUDA_UTIL_H

#include "core/core_internal.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

/* sw_fail for a failed CUDA runtime call: the message above, SW_ENOMEM for
 * cudaErrorMemoryAllocation, SW_ECUDA otherwise. */
sw_status sw_cuda_fail_call(sw_context *ctx, const char *stage, const char *call, cudaError_t e);
/* sw_fail for a CUDA library (lib: "cuBLAS", ...) call that returned status code; SW_ENOMEM when
 * nomem is set, SW_ECUDA otherwise. */
sw_status sw_cuda_fail_status(sw_context *ctx, const char *stage, const char *lib, const char *call,
                              int code, int nomem);

#define SW_CUDA_CHECK_TEXT(ctx, stage, call, text)                                                 \
    do {                                                                                           \
        const cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess)                                                                     \
            return sw_cuda_fail_call((ctx), (stage), (text), e_);                                  \
    } while (0)

#define SW_CUDA_STATUS_CHECK_TEXT(ctx, stage, lib, call, text, ok, nomem)                          \
    do {                                                                                           \
        const auto e_ = (call);                                                                    \
        if (e_ != (ok))                                                                            \
            return sw_cuda_fail_status((ctx), (stage), (lib), (text), (int)e_, e_ == (nomem));     \
    } while (0)

#define SW_CUDA_CHECK(ctx, stage, call) SW_CUDA_CHECK_TEXT(ctx, stage, call, #call)

/* The file's short forms (SW_CUDA_CTX and SW_CUDA_STAGE defined by the file). */
#define SW_CU(call) SW_CUDA_CHECK_TEXT(SW_CUDA_CTX, SW_CUDA_STAGE, call, #call)
#define SW_CUBLAS(call)                                                                            \
    SW_CUDA_STATUS_CHECK_TEXT(SW_CUDA_CTX, SW_CUDA_STAGE, "cuBLAS", call, #call,                   \
                              CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_ALLOC_FAILED)
#define SW_CUSOLVER(call)                                                                          \
    SW_CUDA_STATUS_CHECK_TEXT(SW_CUDA_CTX, SW_CUDA_STAGE, "cuSOLVER", call, #call,                 \
                              CUSOLVER_STATUS_SUCCESS, CUSOLVER_STATUS_ALLOC_FAILED)
#define SW_CUFFT(call)                                                                             \
    SW_CUDA_STATUS_CHECK_TEXT(SW_CUDA_CTX, SW_CUDA_STAGE, "cuFFT", call, #call, CUFFT_SUCCESS,     \
                              CUFFT_ALLOC_FAILED)

/* cudaMalloc of n elements of T (at least one: an empty array has an address too). */
template <typename T> static inline cudaError_t sw_cuda_alloc(T **p, size_t n)
{
    return cudaMalloc((void **)p, (n ? n : 1) * sizeof(T));
}

/* sw_cuda_alloc, then the copy of n host elements queued on s (none when src is NULL). */
template <typename T>
static inline cudaError_t sw_cuda_upload(T **dst, const T *src, size_t n, cudaStream_t s)
{
    const cudaError_t e = sw_cuda_alloc(dst, n);
    if (e != cudaSuccess || !src || !n)
        return e;
    return cudaMemcpyAsync(*dst, src, n * sizeof(T), cudaMemcpyHostToDevice, s);
}

/* A blocking upload that is complete when it returns. cudaMemcpy from pageable host memory may
 * return once the bytes are staged, before their DMA has finished (CUDA Runtime API, "API
 * synchronization behavior"), and the library's streams are non-blocking: their kernels do not
 * wait for the legacy stream. So the copy is followed by a synchronisation of the legacy stream
 * (a wrong first-frame command of sw_rtc_multi came from this). sw_cuda_memset_sync the same for
 * cudaMemset, which is asynchronous for device memory. */
static inline cudaError_t sw_cuda_h2d(void *dst, const void *src, size_t bytes)
{
    const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? cudaStreamSynchronize(cudaStreamLegacy) : e;
}
static inline cudaError_t sw_cuda_memset_sync(void *dst, int value, size_t bytes)
{
    const cudaError_t e = cudaMemset(dst, value, bytes);
    return e == cudaSuccess ? cudaStreamSynchronize(cudaStreamLegacy) : e;
}

/* cudaFree of each of n device pointers (NULL ones are skipped); SW_CUDA_FREE(a, b, ...) lists
 * them in place. */
void sw_cuda_free_all(void *const *p, size_t n);
#define SW_CUDA_FREE(...)                                                                          \
    do {                                                                                           \
        void *const p_[] = {__VA_ARGS__};                                                          \
        sw_cuda_free_all(p_, sizeof p_ / sizeof p_[0]);                                            \
    } while (0)

/* A cuBLAS handle on stream s with a workspace of its own, ws_bytes (set after cublasSetStream,
 * which resets it), so that a captured run allocates nothing. On failure what was made is in
 * *blas and *ws (NULL otherwise), for the caller's destroy. */
sw_status sw_cublas_create(sw_context *ctx, const char *stage, cudaStream_t s, size_t ws_bytes,
                           cublasHandle_t *blas, void **ws);

/* Two events around queued work, for its time on the GPU; empty (both NULL) until created. */
typedef struct sw_event_pair {
    cudaEvent_t t0, t1;
} sw_event_pair;

sw_status sw_event_pair_create(sw_context *ctx, const char *stage, sw_event_pair *ev);
/* Frees both events (the empty ones are left alone). */
void sw_event_pair_destroy(sw_event_pair *ev);
/* Waits for t1, then the microseconds from t0 to t1; -1 when either wait or measure fails (an
 * event not recorded, ...). */
double sw_event_pair_us(const sw_event_pair *ev);

/* A captured graph and its executable; empty (both NULL) until captured. */
typedef struct sw_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
} sw_graph;

/* Starts capturing what is queued on s from this thread (cudaStreamCaptureModeThreadLocal). */
sw_status sw_graph_begin(sw_context *ctx, const char *stage, cudaStream_t s);

/*
 * Ends the capture that sw_graph_begin started, also when queueing inside failed (body, the
 * status of the queueing, not SW_OK), so that the stream is usable again; then instantiates the
 * graph into the empty g, and with `upload` set uploads it to the device (so that the first launch
 * is not slower). Returns body when it failed, else the capture's or the instantiation's failure
 * ("<stage>: capturing the <what>'s graph failed: ...", "... instantiating ...", g left empty and
 * the runtime's last error cleared, so that the next run may capture again). A failed upload
 * returns its SW_CU failure with g instantiated.
 */
sw_status sw_graph_end(sw_graph *g, sw_context *ctx, const char *stage, const char *what,
                       cudaStream_t s, sw_status body, int upload);

/* Frees the graph and its executable; g is empty afterwards (an empty g is left as it is). */
void sw_graph_destroy(sw_graph *g);

#endif /* SW_CORE_CUDA_UTIL_H */
