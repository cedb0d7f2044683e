/*
 * Between the loop stage's files (not public):
 *   dm.c, dm_cuda.cu          the mirror model, the shaper, the projector (loop.h)
 *   calib.c                   interaction matrix (push-pull) and control matrix (truncated SVD)
 *   controller.c              the controllers on the CPU
 *   rtc.c, rtc_cuda.cu        the real-time chain (CPU run here, GPU graph in rtc_cuda.cu)
 *   loopsim.c, loopsim_cuda.cu  the closed-loop simulator (phase grid and science PSF on the GPU)
 * The controller update is written once here for the CPU controller and the GPU chain.
 */
#ifndef SW_LOOP_INTERNAL_H
#define SW_LOOP_INTERNAL_H

#include <math.h>
#include <stdint.h>

#include "core/core_internal.h"
#include "spotwave/loop.h"

#ifdef __CUDACC__
#define SW_LOOP_HD __host__ __device__
#else
#define SW_LOOP_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The controller (controller.c); the real-time chain reads its parameters and copied arrays. */
struct sw_controller {
    sw_context *ctx;
    sw_controller_params p; /* p.modes / kp / ki point at the copies below (or NULL)          */
    int32_t nmodes;         /* PI: modes (nact when modes is NULL)                            */
    float *modes;           /* PI: nact x nmodes column-major copy, or NULL (identity)       */
    float *kp, *ki;         /* PI: nmodes gains each (always allocated for PI)               */
    float *u;               /* nact: u_{k-1}                                                  */
    float *integ;           /* PI: nmodes integrals                                          */
    float *e;               /* PI: nmodes scratch                                            */
    float *filter;          /* nact x nfilter copy of Z, or NULL                              */
    double *zt;             /* nfilter scratch (Z^T r)                                        */
    float *rf;              /* nact scratch (the filtered r)                                   */
    float *uc;              /* PI with a clip: nact scratch (the unclipped commands)           */
};

/* Stage 2 of a CPU chain alone: rvec (nact) = R s for the chain's slopes s (2 ns, pixels, the
 * order of sw_rtc_run's), the filter folded into C or P included, the others' not applied
 * (loopsim.c's check of the closed loop's modes). SW_EUNSUPPORTED on a CUDA chain. */
sw_status sw_rtc_reconstruct(sw_rtc *r, const float *slopes, float *rvec);

/* r - Z (Z^T r) into out (nact floats; Z nact x nf column-major; zt nf scratch): the unseen
 * modes' filter of controller.c, the CPU half of rtc_cuda.cu's rt_filter. Sums in double. */
void sw_loop_filter(const float *z, int32_t nact, int32_t nf, const float *r, double *zt,
                    float *out);
/* The same filter folded into a matrix whose rows are the commands: W <- W - Z (Z^T W), W nact x
 * cols row-major; sums in double (rtc.c folds it into C or P, loopsim.c's gain tuner into its
 * copy of C). 0, or -1 out of memory. */
int sw_loop_fold_filter(const float *z, int32_t nf, int32_t nact, int32_t cols, float *w);

/* How far two float evaluations of one command's dot product, row . s (n terms, FP32 sums), can
 * be apart when they sum in different orders (another split of the partial sums: the multi-GPU
 * chain's split by columns, another cuBLAS kernel): each is within gamma_n sum_j |row_j s_j| of
 * the exact value, gamma_n = n u / (1 - n u), u = 2^-24 (Higham N. J. (2002), "Accuracy and
 * Stability of Numerical Algorithms", 2nd ed., SIAM, section 3.1), so 2 gamma_n sum_j |row_j s_j|,
 * about n eps sum_j |row_j s_j| (eps = 2^-23); fp16: the matrix stored in FP16 (the same half
 * entries on both sides, FP32 sums), 0.1 % more for sum |half(row_j) s_j| against the floats'.
 * s2, when not NULL, are the other evaluation's slopes: + 1.01 sum_j |row_j| |s_j - s2_j|. Sums
 * in double. Used by tests/gpu/test_gpu_loop_rtc_multi.c and bench/bench_rtc_multi.c. */
double sw_rtc_split_bound(const float *row, int32_t n, const float *s, const float *s2, int fp16);

/* The multi-GPU chain's limits (rtc_multi.c, rtc_multi_cuda.cu): GPUs, and wavefront sensors
 * of sw_rtc_multi_create_wfs. */
#define SW_RTC_MULTI_MAX_GPUS 16
#define SW_RTC_MULTI_MAX_WFS  64
/* The checks of sw_rtc_multi_create (several = 0; wfs NULL, nwfs 0) and _create_wfs (several =
 * 1) that need neither CUDA nor NCCL: *out = NULL first; NULL arguments; m (NULL: the defaults)
 * resolved into *mp; the devices' count, graph, split, sensors, reconstructor, matrix, controller
 * and slope layout. SW_EINVAL or SW_EUNSUPPORTED with the message on ctx. rtc_multi.c; the
 * context's backend, the devices and everything else are checked by rtc_multi_cuda.cu. */
sw_status sw_rtc_multi_check(sw_context *ctx, const sw_rtc_params *p, int several,
                             const sw_centroid_params *wfs, int32_t nwfs,
                             const sw_rtc_multi_params *m, sw_rtc_multi **out,
                             sw_rtc_multi_params *mp);

/* Integrator / leaky update of one command (seed 000 section 6's regulator per actuator), then
 * the stroke clip (clip <= 0: none). Float arithmetic in this order on both backends. */
static inline SW_LOOP_HD float sw_loop_update(float u_prev, float r, float gain, float keep,
                                              float clip)
{
    float u = keep * u_prev + gain * r; /* keep = 1 (integrator) or 1 - leak */
    if (clip > 0.0f)
        u = u > clip ? clip : (u < -clip ? -clip : u);
    return u;
}

/* PI update of one mode: integral I += e, output kp e + ki I (the clip applies to the commands
 * B v afterwards). */
static inline SW_LOOP_HD float sw_loop_pi(float e, float kp, float ki, float *integ)
{
    *integ = *integ + e;
    return kp * e + ki * *integ;
}

/* ---- dm.c / dm_cuda.cu internal declarations (owned by the dm helper) ---- */

/* The mirror's shaper (dm.c): out = Fy U Fx^T (Eq. 12, separable). Fx[i nax + a] = f(x_i - x_a)
 * (width x nax, row-major), Fy[k nay + b] = f(y_k - y_b) (height x nay), nax = nx + 1,
 * nay = ny + 1; T = U Fx^T (nay x width, row-major) the scratch between the two products. */
struct sw_dm_shaper {
    sw_context *ctx;
    sw_dm_params dm;
    sw_lattice_grid grid;
    int32_t nax, nay;
    float *Fx, *Fy; /* host copies (the CPU run's operands, uploaded on CUDA)           */
    float *T;       /* CPU scratch, nay x width                                        */
    void *gpu;      /* dm_cuda.cu's state, NULL on the CPU                              */
};

/* The projector (dm.c): P (nact x nvalues, row-major float) on the host; on CUDA a device copy. */
struct sw_projector {
    sw_context *ctx;
    int32_t nact, nvalues;
    float *P;
    void *gpu; /* dm_cuda.cu's state, NULL on the CPU */
};

/* The projector's matrix (dm.c) into P (nax nay x lattice values, row-major floats, the
 * caller's), with only the actuators whose active[a] is non-zero in the fit (NULL: all, as
 * sw_projector_create): the others are left out of F (not fixed by the regularisation), so
 * their rows of P are 0, and lambda = regularisation trace(F^T F) / (active actuators). With
 * empty_ok a problem with no fitting point, or none that sees an active actuator, gives P = 0
 * (a D-SABRE window outside the pupil) instead of SW_EINVAL. The distributed projection on the
 * pupil (rtc.c, SW_RTC_PROJ_LOCAL_PUPIL) builds its windows' matrices with it. */
sw_status sw_projector_solve_masked(sw_context *ctx, const sw_projector_params *p,
                                    const uint8_t *active, int empty_ok, float *P);
/* 1 when lenslet corner (cx, cy) of an nx x ny array (the Fried actuator there) is a corner of a
 * valid lenslet (valid NULL: of any lenslet): an actuator the sensor sees (rtc.c). */
int sw_loop_corner_seen(const uint8_t *valid, int32_t nx, int32_t ny, int32_t cx, int32_t cy);

/* sw_projector_create with only the active actuators in the fit (as above; NULL: all): the
 * matrix is solved once, before the GPU side (if any) takes it. */
sw_status sw_projector_create_masked(sw_context *ctx, const sw_projector_params *p,
                                     const uint8_t *active, sw_projector **out);

/* GPU side (dm_cuda.cu): create uploads the host matrices, makes a cuBLAS handle on the
 * context's stream and the device buffers (scratch, staging for host arrays); destroy frees it
 * (gpu NULL ignored); run: host/pinned arrays are staged and the call has finished when it
 * returns, device arrays are only queued on the context's stream. */
sw_status sw_dm_shaper_gpu_create(sw_dm_shaper *s);
void sw_dm_shaper_gpu_destroy(sw_dm_shaper *s);
sw_status sw_dm_shaper_gpu_run(sw_dm_shaper *s, const float *commands, sw_memory memory,
                               float *out);
sw_status sw_projector_gpu_create(sw_projector *p);
void sw_projector_gpu_destroy(sw_projector *p);
sw_status sw_projector_gpu_run(sw_projector *p, const float *values, sw_memory memory,
                               float *commands);

/* ---- rtc.c / rtc_cuda.cu internal declarations (owned by the rtc helper) ---- */

/* The real-time chain. rtc.c builds everything host-side (validation, the centroid plan, the
 * copied matrices, the controller, the D-SABRE plan, the telemetry ring) and runs the CPU chain;
 * on a CUDA context rtc_cuda.cu uploads it and runs the GPU chain as one graph. */
struct sw_rtc {
    sw_context *ctx;
    sw_rtc_params p;        /* as given; p.cm / p.projection_matrix point at the copies below */
    int gpu;                /* 1 on a CUDA context */
    int32_t ns, nact;       /* slopes per axis, commands */
    int32_t nx, ny;         /* lenslet array */
    sw_centroid_plan *cent; /* HOST path (CPU), DEVICE path on the plan's frame buffer (GPU) */
    int32_t *slope_l;       /* ns: flat lenslet index of slope k (sw_centroid_plan_slope_lenslet) */
    float *cm;              /* MVM: nact x 2 ns row-major copy */
    sw_sabre *sabre;        /* SABRE: the D-SABRE plan (mask = the geometry's) */
    int64_t nvalues;        /* SABRE: values of the plan's extended lattice */
    float *proj;            /* GLOBAL: nact x nvalues copy; LOCAL: handed to the sabre plan */
    sw_controller *ctrl;    /* the controller (CPU run; parameters and copies for the GPU) */
    /* host buffers of the CPU run */
    float *slopes;     /* 2 ns: the frame's slopes (pinned staging of the telemetry on CUDA) */
    float *sab_slopes; /* SABRE: 2 nx ny slopes given to sabre */
    float *sab_values; /* GLOBAL: nvalues */
    float *rvec;       /* nact: the reconstruction r */
    float *commands;   /* nact: the last commands (pinned on CUDA) */
    int pinned;        /* slopes and commands are pinned (CUDA) */
    int32_t tslots;    /* telemetry ring slots (0: none) */
    void *tele;        /* rtc.c's ring (C11 atomics, so not visible to the CUDA side) */
    int64_t frames;    /* frames run (the number of the last one) */
    double last_us;
    void *gpu_state;   /* rtc_cuda.cu's state */
    sw_rtc_band *band; /* the band chain built on this plan (sw_rtc_run refuses), or NULL */
};

/* GPU side (rtc_cuda.cu, CUDA builds only). create: device buffers, matrices, cuBLAS, one plain
 * pass, then the graph (state back to 0); destroy frees it (NULL state ignored). run: copies the
 * frame in, launches the graph and returns when the commands are in r->commands (pinned); the
 * slopes' copy into r->slopes (only with telemetry) may still be running: finish waits for the
 * stream. reset: the controller state to 0 (queued). slopes: copies the frame's slopes from the
 * device to a host array (after run; synchronous). */
sw_status sw_rtc_gpu_create(sw_rtc *r);
void sw_rtc_gpu_destroy(sw_rtc *r);
sw_status sw_rtc_gpu_run(sw_rtc *r, const sw_image *frame);
sw_status sw_rtc_gpu_finish(sw_rtc *r);
sw_status sw_rtc_gpu_reset(sw_rtc *r);
/* The controller's kp, ki to the device, and the device's integrals times scale (nmodes). */
sw_status sw_rtc_gpu_set_gains(sw_rtc *r, const float *scale);
sw_status sw_rtc_gpu_slopes(sw_rtc *r, float *host);
/* rtc_cuda.cu's kernels, queued on `stream` (a cudaStream_t) of the current device for the
 * multi-GPU chain (rtc_multi_cuda.cu), which runs each GPU's share through the same code:
 * gemv_half: y = sw_loop_update(y, Wh x, gain, keep, clip) with update, else y = Wh x (FP16 rows
 * of ldh halves, x padded to ldh); update: u = sw_loop_update(u, r, gain, keep, clip) per
 * command; clip: u clipped to [-clip, clip]; to_half: rows x cols floats to half rows of ldh, zero
 * padded. Each returns 0 or the cudaError_t of the launch. */
int sw_rtc_gpu_gemv_half(const void *Wh, int32_t rows, int32_t ldh, const float *x, float *y,
                         int update, float gain, float keep, float clip, void *stream);
int sw_rtc_gpu_update(float *u, const float *r, int32_t n, float gain, float keep, float clip,
                      void *stream);
int sw_rtc_gpu_clip(float *u, int32_t n, float clip, void *stream);
int sw_rtc_gpu_to_half(const float *src, int32_t rows, int32_t cols, int32_t ldh, void *dst,
                       void *stream);

/* ---- rtc_band.c / rtc_band_cuda.cu: the band-wise chain (loop.h, sw_rtc_band_*) ---- */

/* The control words in mapped host memory (uint64 each; host-written and GPU-written words on
 * separate cache lines): */
#define SW_BAND_STOP      0  /* host: 1 stops the kernel                                   */
#define SW_BAND_CLK_REQ   1  /* host: a clock request 1, 2, ... (SW_BAND_CLK_END: no more)   */
#define SW_BAND_DONE      8  /* GPU: the last frame done (system fence, then the store)     */
#define SW_BAND_ERR       9  /* GPU: 0, or why the kernel stopped (SW_BAND_E*), released last */
#define SW_BAND_ERR_FRAME 10 /* GPU: the frame it stopped on                               */
#define SW_BAND_ERR_BAND  11 /* GPU: the band it waited for (-1: the frame's start)         */
#define SW_BAND_CLK_ACK   12 /* GPU: its clock when it saw the last clock request           */
#define SW_BAND_FLAGS     16 /* host: depth x bands flags, slot s band b at 16 + s bands + b */
#define SW_BAND_CLK_END   (~(uint64_t)0)
/* The trace ring (params.trace > 0): trace + depth entries of SW_BAND_TRACE_WORDS uint64 in mapped
 * host memory, frame f at (f - 1) % entries: the frame (stored last, with the done flag's fence),
 * then sw_rtc_band_trace's stamps in its order. */
#define SW_BAND_TRACE_WORDS 8
enum {
    SW_BAND_EOK = 0,
    SW_BAND_ETIMEOUT = 1, /* a band did not come in time */
    SW_BAND_ESTOP = 2,    /* the stop flag */
    SW_BAND_EWAIT = 3     /* the blocks' own frame barrier timed out (a bug or a stalled GPU) */
};

struct sw_rtc_band {
    sw_context *ctx;
    sw_rtc *r; /* the plan (NULL once it is destroyed: everything needed was copied) */
    sw_rtc_band_params p;
    int32_t nb, depth, width, height, ns, nact;
    size_t stride, slot_bytes; /* ring rows (a multiple of 64 bytes) and frame slots */
    int32_t *row0;             /* nb + 1 pixel row bounds of the bands                 */
    int32_t *lrow0;            /* nb + 1 lenslet row bounds                            */
    /* mapped pinned host memory (host addresses) */
    uint64_t *ctl;   /* the control words above                  */
    char *frames;    /* depth slots of height rows               */
    float *cmds;     /* depth x nact                             */
    float *slopes;   /* depth x 2 ns, or NULL                    */
    uint64_t *trace; /* the trace ring, or NULL                  */
    int64_t ntrace;  /* its entries (params.trace + depth)       */
    /* the producer's position: the next band expected */
    int64_t next_frame;
    int32_t next_band;
    /* counters (__atomic builtins: any thread reads them) */
    int64_t out_of_order, overruns, timeouts;
    int32_t blocks;
    void *gpu; /* rtc_band_cuda.cu's state */
};

/* rtc_band_cuda.cu: allocates the ring and the device state, launches the kernel (create); stops
 * it (bounded wait) and frees (destroy; NULL gpu state ignored). */
sw_status sw_rtc_band_gpu_create(sw_rtc_band *b);
void sw_rtc_band_gpu_destroy(sw_rtc_band *b);

/* ---- loopsim.c / loopsim_cuda.cu internal declarations (owned by the loopsim helper) ---- */

/* For tests and studies: the interaction matrix the simulator measured (2 ns x nact column-major,
 * im[a 2ns + k]) and its control matrix (nact x 2 ns row-major), MVM only (NULL otherwise; ns =
 * slopes per axis, *nslopes = 2 ns). */
const float *sw_loop_interaction(const sw_loop *l, int32_t *nslopes, int32_t *nact);
const float *sw_loop_control(const sw_loop *l);
/* The commands applied to the mirror in the last frame (nact floats, host). */
const float *sw_loop_applied(const sw_loop *l, int32_t *nact);
/* Host wall time of the phases of sw_loop_step, microseconds per frame (mean over the frames
 * since the last reset): see sw_loop_phase_name. reset != 0 zeroes the sums after reading. */
#define SW_LOOP_PHASES 5
void sw_loop_phase_us(sw_loop *l, int reset, double us[SW_LOOP_PHASES]);
const char *sw_loop_phase_name(int phase);

#ifdef SW_HAVE_CUDA
/* The science camera on the GPU (loopsim_cuda.cu): an n x n pupil (mask: 1 inside), its field
 * exp(2 pi i W / lambda) zero-padded to 2n x 2n, cuFFT C2C (float), |E|^2, its maximum and the
 * long-exposure sum (double). All work on the context's stream; nothing allocated per frame. */
typedef struct sw_loop_psf_gpu sw_loop_psf_gpu;
sw_status sw_loop_psf_gpu_create(sw_context *ctx, int32_t n, const uint8_t *mask,
                                 double wavelength_um, sw_loop_psf_gpu **out);
void sw_loop_psf_gpu_destroy(sw_loop_psf_gpu *g); /* NULL is ignored */
/* Queues the field of res (device, n x n floats W in um, rows `stride` floats apart), the FFT,
 * |E|^2 and its maximum (and, when accumulate, the sum into the long exposure). */
sw_status sw_loop_psf_gpu_enqueue(sw_loop_psf_gpu *g, const float *res, int64_t stride,
                                  int accumulate);
/* The last enqueued PSF's maximum; wait = 1 waits for the stream first, 0 when the caller has
 * already waited for it (after the queued work). */
sw_status sw_loop_psf_gpu_peak(sw_loop_psf_gpu *g, int wait, double *peak);
/* The maximum of the long-exposure sum (waits). */
sw_status sw_loop_psf_gpu_long_peak(sw_loop_psf_gpu *g, double *peak);

/* The phase grid on the GPU (loopsim_cuda.cu): gw x gw device buffers for the screen window,
 * the mirror surface and the residual, nact device commands, the pupil mask (gw x gw, 1 on the
 * pupil samples) and the residual's per-block sums. All on the context's stream. */
typedef struct sw_loop_gpu sw_loop_gpu;
sw_status sw_loop_gpu_create(sw_context *ctx, int32_t gw, const uint8_t *mask, int32_t nact,
                             sw_loop_gpu **out);
void sw_loop_gpu_destroy(sw_loop_gpu *g); /* NULL is ignored */
/* The pinned gw x gw host array (floats, um) that the next upload sends as the window. */
float *sw_loop_gpu_turb_input(sw_loop_gpu *g);
/* Device buffers: the commands (nact), the surface and the residual (gw x gw). */
float *sw_loop_gpu_commands(sw_loop_gpu *g);
float *sw_loop_gpu_surface(sw_loop_gpu *g);
const float *sw_loop_gpu_residual(sw_loop_gpu *g);
/* Copies commands (host, nact) to pinned memory and queues the window's and their uploads. */
sw_status sw_loop_gpu_upload(sw_loop_gpu *g, const float *commands);
/* Queues residual = window - surface and its sums over the pupil (and their download). */
sw_status sw_loop_gpu_residual_run(sw_loop_gpu *g);
/* The sums of the residual and its square over the pupil (um, um^2), once the stream has been
 * waited for after sw_loop_gpu_residual_run. */
void sw_loop_gpu_residual_sums(const sw_loop_gpu *g, double *s1, double *s2);
/* Copies the device surface into host (gw x gw floats); waits. */
sw_status sw_loop_gpu_download_surface(sw_loop_gpu *g, float *host);
#endif

#ifdef __cplusplus
}
#endif

#endif /* SW_LOOP_INTERNAL_H */
