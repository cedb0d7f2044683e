/*
 * The closed-loop simulator of loop.h (sw_loop_*): an infinite turbulence screen moving with the
 * wind, a deformable mirror subtracting its shape, a Shack-Hartmann sensor, a reconstructor and a
 * controller, and a science camera (seed 002 section 4.B; the control law of seed 000 section 6).
 *
 * Design (the choices loop.h leaves open are marked "choice").
 *
 * Sensor. nx x nx lenslets of px_per_lenslet pixels of 10 um (lenslet_um = 10 px), grid corner
 * (0, 0), frame nx px square; the focal length makes lambda_wfs f / lenslet = nyquist_px pixels:
 * f = nyquist_px 10 um lenslet_um / lambda_wfs. sw_shsim renders f32 electrons (params.model);
 * with a finite magnitude sw_detector_apply adds shot and read noise (f32 out, gain 1, in place,
 * seed = params.seed mixed with the frame number so every frame draws new noise). Photometry as
 * bench/bench_sabre.c: zero_point 10^(-0.4 mag) d^2 (1 / rate) throughput electrons per fully lit
 * lenslet, d = D / nx; noise-free: 1e4 e-, no detector. Square pupil: the whole array is lit
 * (shsim pupil a_um = 0); otherwise a circle of the array's diameter with the obscuration. Valid
 * lenslets: illuminated fraction >= 0.5 (sw_shsim_truth's illum); every lit lenslet is rendered
 * (choice: partly lit ones still put light on the detector), only valid ones are measured.
 * Centroids: centre of gravity, slopes in pixels against the geometry's reference positions; a
 * threshold T is subtracted (SUBTRACT, ABSOLUTE) when positive: the larger of threshold_e (or,
 * when it is 0, 3 read_noise_e when noisy and 0 noise-free) and threshold_peak x the peak pixel
 * of the noise-free frame of a flat wavefront at the loop's flux (the reference spot; choice: an
 * absolute level set from the known flux rather than a fraction of each lenslet's own maximum,
 * which at a faint magnitude is often a noise pixel). threshold_peak is 0 by default (choice,
 * measured; BENCHMARKS.md, issue 30): a threshold trims the wings of a diffraction spot cut off at
 * the lenslet's edge and so raises the centre of gravity's gain for large spot motions (16 x 16,
 * D = 12 m: 0.61 -> 0.83 on the open-loop turbulence with 0.05), but on the Nyquist-sampled spot
 * it makes the response to sub-pixel motions uneven (1.07 at 1/20 lambda/d, 1.00 at 1/4), and the
 * closed loop's residual grew with it (0.05, seed 1: 165 -> 170 nm MVM, 173 -> 178 nm D-SABRE,
 * noise-free and at magnitude 8), while the small-signal gain it corrects is calibrated anyway
 * (below).
 *
 * Slope gain (sensor calibration, for every reconstructor, after the threshold): tilts of 1/16,
 * 1/8 and 1/4 lambda/d (the small signals of a closed loop) along x, then y (W = a u or a v on
 * the phase grid), pushed and pulled, rendered noise-free through the simulator and the centroid
 * plan; per tilt the mean over the valid lenslets of the push-pull half-difference (a reference
 * offset cancels) in radians (pixel_um / (focal_mm 1000) per pixel) over a; the gain is the mean
 * over the tilts, per axis. SABRE and D-SABRE take slopes in radians: with slope_calibration
 * their slope_scale (and global SABRE's scale) is divided by the mean of the two gains, so they
 * see unit-gain slopes (choice: one scale for both axes, as the rtc takes one; the square
 * lenslet makes them equal). A gain outside [0.5, 2] is reported, not applied (a faint star's
 * spot all below the threshold measures 0). MVM needs none: its interaction matrix is measured
 * through the same sensor and holds the gain.
 *
 * Phase grid. sw_lattice_grid_lenslets(nx, nx, samples, 2): gw = nx q + 4 samples per side at
 * 1/q lenslet. Sample i is at lattice x = -1/2 + (i + 1/2 - 2) / q, i.e. at pupil u = (x - (nx -
 * 1) / 2) lenslet_um = (i - (gw - 1) / 2) lenslet_um / q: exactly where a centred sw_wavefront of
 * gw samples at spacing lenslet_um / q puts it, so the residual goes to the simulator as such a
 * map (sw_shsim_clear_opd + sw_shsim_add_wavefront, bilinear onto its own grid; on CUDA the
 * same map in device memory, sw_shsim_set_opd_device, same rule; the two margin
 * samples cover the simulator's lit samples that reach half a sample beyond the array). The
 * screen is sw_infinite_screen with n = gw (rounded up to even; then its first gw columns and
 * rows are used; for even gw the window's buffer is used in place), spacing D / (nx q) m, made on
 * the private CPU context (so both backends see the same screen, bit for bit), moved by wind /
 * rate along +v before every frame but the first (frame k shows the screen at t = (k - 1) /
 * rate). The pupil samples are the central nx q x nx q (all of them for the square pupil; those
 * inside the circle / annulus otherwise).
 *
 * Mirror and residual. The surface of the commands applied now (sw_dm_shaper on the phase grid)
 * is subtracted: residual = W - phi_u (loop.h). Delay: the surface of frame k uses the commands
 * computed at frame k - 1 - delay (zero before the first), from a ring of delay + 1 command sets.
 * The shaper runs on the caller's context (on CUDA: on device arrays, see below).
 *
 * Reconstructors (seed 002 section 4.B):
 *   MVM: the interaction matrix by push-pull (sw_interaction_matrix, +-poke_um) through a
 *     measurement that renders the mirror surface alone (+phi_u, loop.h's sign) noise-free with
 *     the same SH model, flux and centroid conditioning as the loop (choice: so that the
 *     centroid gain of the threshold is calibrated too), control matrix sw_control_matrix
 *     (cm_condition, no mode limit), then an sw_rtc with SW_RTC_MVM.
 *   DSABRE_GLOBAL / DSABRE_LOCAL / DSABRE_LOCAL_PUPIL: an sw_rtc with SW_RTC_SABRE (pitch =
 *     lenslet_um so values are um of OPD, slope_scale = pixel_um / (focal_mm 1000) over the
 *     slope gain (above), k = partitions, overlap, H-PME, the valid mask, extend_eq17 = 1 for
 *     all: choice, so that global and distributed projections see the same reconstruction and
 *     differ only in the projection, as in seed 002 Fig. 11). GLOBAL: the projection of the
 *     plan's extended lattice (Eq. 13), actuators the Fried corners of the valid lenslets
 *     (sw_rtc_params_sabre: the others left out, 0), fitting squares those of the extended
 *     lattice whose centre is inside the pupil footprint (the array for the square pupil, the
 *     circle / annulus otherwise). LOCAL: sw_projector_params_window with the plan's window w
 *     (Eq. 14-16, seed 002 Fig. 14's "MM"). LOCAL_PUPIL (Fig. 14's "MV"): a matrix per
 *     partition, its window's squares in that footprint fitted by its window's actuators at
 *     valid lenslets' corners. A throwaway sw_sabre plan gives the lattice and w.
 *   SABRE_GLOBAL: on the host: a centroid plan, slopes in radians by the same calibrated scale,
 *     sw_sabre_global_run on the valid lenslets (the per-triangle model, lambda = 1, as
 *     DSABRE_GLOBAL: see build_sabre_global), the global projector on its lattice (vertices it
 *     does not estimate set to 0 and their squares not fitted; actuators the corners of the
 *     valid lenslets, the others left out, 0), an sw_controller.
 *   The controller is p->controller with nact = (nx + 1)^2.
 *
 * Science camera. The residual over the pupil samples, field A exp(2 pi i W / lambda_sci) (A = 1
 * on pupil samples, 0 elsewhere) zero-padded to 2 nx q square, FFT (FFTW double on the CPU, cuFFT
 * C2C float on CUDA: loopsim_cuda.cu), |E|^2. Short-exposure Strehl = max |E|^2 / (sum A)^2, the
 * diffraction peak of the same sampling (choice: the maximum over the sampled PSF, no centring).
 * Long exposure: the sum of the PSFs of frames k > warmup (double), Strehl = its max / (count
 * (sum A)^2). Turbulence and residual RMS: piston removed over the pupil samples, nm; Marechal
 * exp(-(2 pi rms / lambda_sci)^2).
 *
 * CUDA ("GPU end to end"). The host moves the screen (sw_infinite_screen stays on the CPU, so
 * both backends see the same screen), writes the window as floats into a pinned buffer and forms
 * the turbulence RMS from the double window (so it is the CPU's to rounding). Then, all queued
 * on the context's stream (loopsim_cuda.cu): the window's and the applied commands' uploads (one
 * cudaMemcpyAsync each), the shaper on device arrays into a device surface, residual = W - phi_u
 * on the device with its RMS sums over the pupil (double, per block), the science PSF from the
 * device residual, sw_shsim_set_opd_device (the simulator resamples the residual and computes its
 * spots on the GPU: no host work, no upload), the render into a device f32 frame, the detector in
 * place, and the rtc on the device frame, whose run is the frame's one synchronisation; the
 * residual RMS and the PSF's peak are read after it. sw_loop_maps downloads the surface on
 * demand. The MVM calibration takes the host path (host shaper arrays, sw_shsim_add_wavefront).
 * Every buffer is made at create (the simulator's device-OPD buffers by one device OPD there):
 * a step allocates nothing. sw_loop_phase_us gives the host wall time of the step's phases.
 *
 * Fitting error. Least squares fit of the turbulence's pupil samples by the influence functions,
 * F c = w with F(x, y; a) = f(x - x_a) f(y - y_a): the normal matrix F^T F + lambda I (lambda =
 * 1e-9 trace / nact, so actuators no sample sees stay determined) is accumulated row by row of
 * the pupil (for row y: sum over its pupil samples of fx fx^T, times fy fy^T) and factorised once
 * by LAPACKE_dpotrf on first use; each call solves (dpotrs) for F^T w (two matrix products) and
 * returns the RMS of w - F c over the pupil, piston removed, nm.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "loop/loop_internal.h"

#include "spotwave/sim.h"

#include <cblas.h>
#include <fftw3.h>
#include <lapacke.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define LOOP_PIXEL_UM   10.0 /* detector pixel */
#define LOOP_MARGIN     2    /* phase grid margin, samples */
#define LOOP_NOISELESS  1e4  /* e- per lit lenslet without a magnitude */
#define LOOP_MIN_ILLUM  0.5  /* valid lenslets: lit fraction */
#define LOOP_MAX_DELAY  1000
#define LOOP_FIT_LAMBDA 1e-9 /* fitting regularisation, of trace / nact */
#define LOOP_PI         3.14159265358979323846
#define LOOP_GAIN_MIN   0.5 /* slope gains applied: within [min, max] */
#define LOOP_GAIN_MAX   2.0

struct sw_loop {
    sw_context *ctx; /* the caller's */
    sw_context *cpu; /* private CPU context: host shaper, global SABRE path, fitting */
    sw_loop_params p;
    int gpu;     /* ctx is CUDA */
    int threads; /* the context's CPU threads */
    int noisy;   /* finite magnitude */
    int32_t nx;  /* lenslets per side */
    int32_t q;   /* samples per lenslet */
    int32_t nq;  /* pupil samples per side, nx q */
    int32_t gw;  /* phase grid side, nq + 2 margin */
    int32_t nact;
    double lenslet_um, focal_mm, flux_e;
    sw_pupil pupil; /* the SH pupil (a_um = 0: square) */
    uint8_t *valid; /* nx^2 valid lenslets */
    uint8_t *pmask; /* nq^2 pupil samples */
    int64_t npup;   /* pupil samples */
    sw_lattice_grid grid;

    /* atmosphere */
    sw_infinite_screen *screen;
    int32_t screen_n;
    sw_wavefront window; /* screen_n^2 */
    double *turb;        /* gw^2 OPD um: the window's buffer when screen_n = gw, else turb_own */
    double *turb_own;
    float *surf;        /* gw^2 mirror surface um */
    sw_wavefront resid; /* gw^2 residual (the simulator's input) */
    float *pres;        /* nq^2 residual over the pupil square (CPU science; NULL on CUDA) */

    /* mirror */
    sw_dm_params dm;
    sw_dm_shaper *shaper; /* on the caller's context (CUDA: device arrays per frame) */
    float *ring;          /* (delay + 1) nact */
    float *applied;       /* nact */

    /* sensor */
    sw_shsim *sim;
    sw_image frame; /* f32, device on CUDA */
    sw_detector det;
    sw_centroid_params cen_params;
    uint8_t *cen_valid; /* the mask the centroid plans use (NULL: square) */

    /* reconstruction */
    sw_rtc *rtc;
    sw_centroid_plan *cen; /* MVM calibration, SABRE_GLOBAL */
    sw_centroid_result cres;
    int32_t ns;             /* slopes per axis */
    float *im, *cm;         /* MVM */
    int32_t kept;           /* MVM */
    sw_sabre_global *sglob; /* SABRE_GLOBAL */
    sw_sabre_lattice glat;
    double *gvals;
    float *gvalsf, *gslopes, *gr;
    sw_projector *gproj;
    sw_controller *ctrl;
    float *filter; /* the unseen modes (nact x nfilter), NULL: none                  */
    int32_t nfilter;
    int32_t neg_modes;    /* of them, the modes of negative gain (-1: not looked for)            */
    double neg_min;       /* the smallest Re(eigenvalue) of M / median |eigenvalue| (NaN: idem)  */
    float *modes;         /* PI, modal = 1: the interaction matrix's kept modes (nact x kept) */
    float *kl;            /* PI, modal = 2: the mirror's KL modes, orthonormal over actuators */
    int32_t nkl;          /* their count                                                     */
    float *pi_kp, *pi_ki; /* PI: per-mode gains the loop made (NULL: the caller's)           */
    int32_t pi_nm;        /* PI: modes                                                       */
    /* modal gain optimisation (gain_window > 0): e = M s per frame, M = B^T C (or C) */
    float *gm;      /* nm x 2 ns row-major                                                   */
    float *gs;      /* 2 ns: the frame's slopes                                              */
    float *gtel;    /* gain_window x nm telemetry                                            */
    int32_t gtel_n; /* frames in it                                                          */
    int32_t gain_rounds;
    sw_sabre_params chain_sabre; /* D-SABRE: the rtc's parameters (sw_loop_chain)          */
    double chain_slope_scale;
    double threshold_e;   /* the centroid threshold in force, e- (0: none)                     */
    double slope_gain[2]; /* the sensor's measured slope gain along x, y                      */
    int gain_applied;     /* 1: slope_scale is divided by the gain                             */
    double slope_scale;   /* SABRE / D-SABRE: pixel slopes to radians, the gain divided out    */

    /* science */
    int32_t n2;     /* 2 nq */
    double sum_a;   /* pupil samples, the diffraction peak's square root */
    double *fft;    /* CPU: n2^2 complex (re, im) */
    void *fft_plan; /* fftw_plan */
    double *lacc;   /* CPU: n2^2 long-exposure sum */
    int64_t lcount; /* frames summed */
#ifdef SW_HAVE_CUDA
    sw_loop_psf_gpu *psf;
    sw_loop_gpu *dev; /* the phase grid on the device */
#endif

    /* fitting */
    double *fit_nn; /* nact^2 Cholesky factor, NULL until used */
    double *fit_gx; /* nq x (nx + 1) profiles */

    /* state */
    int64_t nframe;      /* frames run */
    const float *camera; /* sw_loop_camera's commands during its step, NULL otherwise */
    const float *last;   /* u_k of the last sw_loop_step, NULL before the first */
    int broken; /* a step failed part-way: the screen, noise and exposure are out of step */
    double last_turb_nm, last_resid_nm;
    int32_t last_clipped;             /* commands of the last frame at the stroke limit */
    double phase_sum[SW_LOOP_PHASES]; /* host wall time per phase, us (sw_loop_phase_us) */
    int64_t phase_frames;
};

/* ------------------------------------------------------------------ names and defaults */

static const char *const RECON_NAMES[] = {"mvm", "sabre", "dsabre-global", "dsabre-local",
                                          "dsabre-local-pupil"};
#define N_RECON ((int)(sizeof RECON_NAMES / sizeof RECON_NAMES[0]))

const char *sw_loop_recon_string(sw_loop_recon r)
{
    if ((int)r < 0 || (int)r >= N_RECON)
        return "unknown";
    return RECON_NAMES[r];
}

sw_status sw_loop_recon_parse(const char *text, sw_loop_recon *out)
{
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "sw_loop_recon_parse: %s is NULL", text ? "out" : "text");
    for (int i = 0; i < N_RECON; i++)
        if (strcasecmp(text, RECON_NAMES[i]) == 0) {
            *out = (sw_loop_recon)i;
            return SW_OK;
        }
    return sw_fail(NULL, SW_EINVAL,
                   "unknown reconstructor '%s' (expected mvm, sabre, dsabre-global, dsabre-local "
                   "or dsabre-local-pupil)",
                   text);
}

void sw_loop_params_default(sw_loop_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->nx = 32;
    p->diameter_m = 12.0;
    p->square_pupil = 1;
    p->obscuration = 0.0;
    p->px_per_lenslet = 8;
    p->wfs_wavelength_um = 0.7;
    p->nyquist_px = 2.0;
    p->model = SW_SH_DIFFRACTION;
    p->magnitude = NAN;
    p->zero_point = 9e9;
    p->throughput = 0.5;
    p->read_noise_e = 2.0;
    p->threshold_e = 0.0;
    sw_turbulence_default(&p->turbulence);
    p->turbulence.r0_m = 0.15;
    p->turbulence.L0_m = 25.0;
    p->turbulence.wavelength_um = 0.5;
    p->wind_m_s = 2.778;
    p->rate_hz = 500.0;
    p->seed = 1;
    p->samples = 8;
    sw_dm_params_default(&p->dm);
    p->dm.nx = p->dm.ny = 32;
    p->dm.influence = SW_DM_GAUSSIAN;
    p->dm.coupling = 0.3;
    p->recon = SW_LOOP_DSABRE_LOCAL;
    p->cm_condition = 30.0;
    p->poke_um = 0.05;
    p->partitions = 4;
    p->overlap = 1;
    sw_controller_params_default(&p->controller);
    p->controller.kind = SW_CTRL_INTEGRATOR;
    p->controller.gain = 0.5;
    p->delay = 0;
    p->science_wavelength_um = 1.25;
    p->warmup = 20;
    p->unseen = SW_UNSEEN_PISTON | SW_UNSEEN_WAFFLE;
    p->modal = 0;
    p->kp = 0.0;
    p->gain_window = 0;
    p->threshold_peak = 0.0;
    p->slope_calibration = 1;
    p->negative_filter = 1;
}

/* ------------------------------------------------------------------ validation */

static int pos_finite(double v)
{
    return v > 0.0 && isfinite(v);
}

static int is_pow2(int32_t k)
{
    return k >= 1 && (k & (k - 1)) == 0;
}

static sw_status check_params(sw_context *ctx, const sw_loop_params *p)
{
    if (p->nx < 2 || p->nx > 1024)
        return sw_fail(ctx, SW_EINVAL, "loop: nx = %d lenslets per side: expected 2 to 1024",
                       (int)p->nx);
    if (!pos_finite(p->diameter_m))
        return sw_fail(ctx, SW_EINVAL, "loop: telescope diameter %g m must be positive and finite",
                       p->diameter_m);
    if (p->square_pupil != 0 && p->square_pupil != 1)
        return sw_fail(ctx, SW_EINVAL, "loop: square_pupil is %d: expected 0 or 1",
                       p->square_pupil);
    if (!(p->obscuration >= 0.0 && p->obscuration < 1.0))
        return sw_fail(ctx, SW_EINVAL, "loop: obscuration %g: expected 0 <= o < 1", p->obscuration);
    if (p->px_per_lenslet < 2 || p->px_per_lenslet > 128)
        return sw_fail(ctx, SW_EINVAL, "loop: %d pixels per lenslet: expected 2 to 128",
                       (int)p->px_per_lenslet);
    if (!pos_finite(p->wfs_wavelength_um) || p->wfs_wavelength_um > 1e3)
        return sw_fail(ctx, SW_EINVAL,
                       "loop: WFS wavelength %g um must be positive and finite (at most 1000)",
                       p->wfs_wavelength_um);
    if (!pos_finite(p->nyquist_px) || p->nyquist_px > 1e3)
        return sw_fail(ctx, SW_EINVAL,
                       "loop: lambda f / d = %g px must be positive and finite (at most 1000)",
                       p->nyquist_px);
    if (p->model != SW_SH_GEOMETRIC && p->model != SW_SH_DIFFRACTION)
        return sw_fail(ctx, SW_EINVAL, "loop: unknown SH model %d", (int)p->model);
    if (!isnan(p->magnitude) && !isfinite(p->magnitude))
        return sw_fail(ctx, SW_EINVAL, "loop: magnitude %g must be finite (NaN: noise-free)",
                       p->magnitude);
    if (!pos_finite(p->zero_point))
        return sw_fail(ctx, SW_EINVAL, "loop: zero point %g must be positive and finite",
                       p->zero_point);
    if (!pos_finite(p->throughput) || p->throughput > 1.0)
        return sw_fail(ctx, SW_EINVAL, "loop: throughput %g: expected 0 < t <= 1", p->throughput);
    if (!(p->read_noise_e >= 0.0) || !isfinite(p->read_noise_e))
        return sw_fail(ctx, SW_EINVAL, "loop: read noise %g e- must be finite and >= 0",
                       p->read_noise_e);
    if (!(p->threshold_e >= 0.0) || !isfinite(p->threshold_e))
        return sw_fail(ctx, SW_EINVAL, "loop: threshold %g e- must be finite and >= 0",
                       p->threshold_e);
    if (!(p->threshold_peak >= 0.0 && p->threshold_peak < 1.0))
        return sw_fail(ctx, SW_EINVAL,
                       "loop: threshold_peak %g: expected 0 <= f < 1 (a fraction of the reference "
                       "spot's peak)",
                       p->threshold_peak);
    if (p->slope_calibration != 0 && p->slope_calibration != 1)
        return sw_fail(ctx, SW_EINVAL, "loop: slope_calibration is %d: expected 0 or 1",
                       p->slope_calibration);
    if (p->negative_filter < 0 || p->negative_filter > 2)
        return sw_fail(ctx, SW_EINVAL, "loop: negative_filter is %d: expected 0, 1 or 2",
                       p->negative_filter);
    sw_status st = sw_turbulence_check(ctx, &p->turbulence);
    if (st != SW_OK)
        return st;
    if (sw_turbulence_is_kolmogorov(&p->turbulence))
        return sw_fail(ctx, SW_EINVAL,
                       "loop: the infinite screen needs a finite outer scale (L0 = %g m)",
                       p->turbulence.L0_m);
    if (!(p->wind_m_s >= 0.0) || !isfinite(p->wind_m_s))
        return sw_fail(ctx, SW_EINVAL, "loop: wind speed %g m/s must be finite and >= 0",
                       p->wind_m_s);
    if (!pos_finite(p->rate_hz))
        return sw_fail(ctx, SW_EINVAL, "loop: frame rate %g Hz must be positive and finite",
                       p->rate_hz);
    if (p->samples < 1 || p->samples > 32)
        return sw_fail(ctx, SW_EINVAL, "loop: %d phase samples per lenslet: expected 1 to 32",
                       (int)p->samples);
    const int64_t gw = (int64_t)p->nx * p->samples + 2 * LOOP_MARGIN;
    if (gw + (gw & 1) > SW_INFINITE_SCREEN_MAX)
        return sw_fail(ctx, SW_EINVAL,
                       "loop: %d lenslets x %d samples need a phase grid of %lld samples per "
                       "side; the infinite screen takes at most %d (fewer samples)",
                       (int)p->nx, (int)p->samples, (long long)gw, SW_INFINITE_SCREEN_MAX);
    if (p->recon < SW_LOOP_MVM || p->recon > SW_LOOP_DSABRE_LOCAL_PUPIL)
        return sw_fail(ctx, SW_EINVAL, "loop: unknown reconstructor %d", (int)p->recon);
    if (p->recon == SW_LOOP_MVM) {
        if (!(p->cm_condition == 0.0 || p->cm_condition >= 1.0) || !isfinite(p->cm_condition))
            return sw_fail(ctx, SW_EINVAL,
                           "loop: control-matrix condition %g: expected >= 1 (0: no limit)",
                           p->cm_condition);
        if (!pos_finite(p->poke_um))
            return sw_fail(ctx, SW_EINVAL, "loop: poke %g um must be positive and finite",
                           p->poke_um);
    }
    if (p->recon == SW_LOOP_DSABRE_GLOBAL || p->recon == SW_LOOP_DSABRE_LOCAL ||
        p->recon == SW_LOOP_DSABRE_LOCAL_PUPIL) {
        if (p->partitions < 1 || p->partitions > p->nx - 1)
            return sw_fail(ctx, SW_EINVAL, "loop: %d D-SABRE partitions per side: expected 1 to %d",
                           (int)p->partitions, (int)(p->nx - 1));
        if (!is_pow2(p->partitions))
            return sw_fail(ctx, SW_EINVAL,
                           "loop: %d D-SABRE partitions per side: H-PME needs a power of two",
                           (int)p->partitions);
        if (p->overlap < 0 || p->overlap > 64)
            return sw_fail(ctx, SW_EINVAL, "loop: D-SABRE overlap %d: expected 0 to 64",
                           (int)p->overlap);
    }
    if (p->unseen & ~(SW_UNSEEN_PISTON | SW_UNSEEN_WAFFLE))
        return sw_fail(ctx, SW_EINVAL, "loop: unknown unseen modes 0x%x (piston 1, waffle 2)",
                       p->unseen);
    if (p->modal < 0 || p->modal > 2)
        return sw_fail(ctx, SW_EINVAL,
                       "loop: modal basis %d (0: actuators, 1: the interaction matrix's modes, 2: "
                       "the mirror's Karhunen-Loeve modes)",
                       p->modal);
    if (p->modal == 1 && p->recon != SW_LOOP_MVM)
        return sw_fail(ctx, SW_EINVAL,
                       "loop: the interaction matrix's modes (modal = 1) need recon = mvm");
    if (!isfinite(p->kp))
        return sw_fail(ctx, SW_EINVAL, "loop: kp %g must be finite", p->kp);
    if (p->gain_window != 0 &&
        (p->gain_window < 16 || p->gain_window > 65536 || p->controller.kind != SW_CTRL_PI ||
         p->recon != SW_LOOP_MVM || p->kp != 0.0 || p->controller.kp || p->controller.ki ||
         !(p->controller.gain > 0.0)))
        return sw_fail(ctx, SW_EINVAL,
                       "loop: modal gain optimisation (gain_window = %d) needs 16..65536 frames, "
                       "controller = pi with kp = 0, a gain > 0 to start from and the loop's own "
                       "gains, and recon = mvm (its model is the integrator per mode)",
                       (int)p->gain_window);
    if (!isfinite(p->controller.gain))
        return sw_fail(ctx, SW_EINVAL, "loop: controller gain %g must be finite",
                       p->controller.gain);
    if (p->delay < 0 || p->delay > LOOP_MAX_DELAY)
        return sw_fail(ctx, SW_EINVAL, "loop: delay %d frames: expected 0 to %d", (int)p->delay,
                       LOOP_MAX_DELAY);
    if (!pos_finite(p->science_wavelength_um) || p->science_wavelength_um > 1e3)
        return sw_fail(ctx, SW_EINVAL,
                       "loop: science wavelength %g um must be positive and finite (at most 1000)",
                       p->science_wavelength_um);
    if (p->warmup < 0)
        return sw_fail(ctx, SW_EINVAL, "loop: warm-up of %d frames must be >= 0", (int)p->warmup);
    sw_dm_params dm = p->dm;
    dm.nx = dm.ny = p->nx;
    return sw_dm_check(ctx, &dm);
}

/* A failure on the private CPU context, reported on the caller's. */
static sw_status relay(sw_loop *l, sw_status st)
{
    if (st == SW_OK)
        return st;
    return sw_fail(l->ctx, st, "%s", sw_context_error(l->cpu));
}

/* ------------------------------------------------------------------ helpers */

/* Pupil-plane position (um) of lattice position x (lenslet units). */
static double lattice_um(const sw_loop *l, double x)
{
    return (x - 0.5 * (double)(l->nx - 1)) * l->lenslet_um;
}

/* 1 when lattice point (x, y) is inside the pupil footprint (strictly, for the square pupil:
 * choice; so the extended squares centred on the array's rim, half outside it, are not fitted by
 * the global projection. A review measured that fitting them too halves the rim actuators' error
 * for random commands (0.13 -> 0.06) and leaves the interior unchanged; the figures in
 * BENCHMARKS.md were taken with this rule). */
static int in_footprint(const sw_loop *l, double x, double y)
{
    if (l->p.square_pupil)
        return x > -0.5 && x < l->nx - 0.5 && y > -0.5 && y < l->nx - 0.5;
    return sw_pupil_contains(&l->pupil, lattice_um(l, x), lattice_um(l, y));
}

/* RMS about the mean of n values from their sum s1 and sum of squares s2. */
static double rms_of(double s1, double s2, double n)
{
    const double mean = s1 / n, v = s2 / n - mean * mean;
    return v > 0.0 ? sqrt(v) : 0.0;
}

/* The current screen window into turb. */
static sw_status load_window(sw_loop *l)
{
    sw_status st = sw_infinite_screen_window(l->screen, &l->window);
    if (st != SW_OK)
        return relay(l, st);
    const int32_t gw = l->gw, n = l->screen_n;
    if (n == gw) {
        l->turb = l->window.opd_um; /* the same layout: no copy */
        return SW_OK;
    }
    for (int32_t k = 0; k < gw; k++)
        memcpy(l->turb_own + (size_t)k * gw, l->window.opd_um + (size_t)k * n,
               (size_t)gw * sizeof(double));
    l->turb = l->turb_own;
    return SW_OK;
}

/* The mirror surface of `commands` into surf (host arrays). */
static sw_status shape(sw_loop *l, const float *commands)
{
    return sw_dm_shaper_run(l->shaper, commands, SW_MEM_HOST, l->surf);
}

/* Renders the simulator's current OPD into the frame (no noise). */
static sw_status render(sw_loop *l)
{
    return sw_shsim_run(l->sim, &l->frame, 0);
}

/* Hands resid (already filled) to the simulator. */
static sw_status feed(sw_loop *l)
{
    sw_status st = sw_shsim_clear_opd(l->sim);
    if (st == SW_OK)
        st = sw_shsim_add_wavefront(l->sim, &l->resid, 1.0);
    return st;
}

/* ------------------------------------------------------------------ the controller */

/*
 * PI's basis for modal = 2: the mirror's Karhunen-Loeve modes (sw_dm_kl_modes: its influence
 * functions sampled 4 times a lenslet over the loop's pupil, the loop's turbulence), then
 * orthonormalised over the actuators by Gram-Schmidt in order of decreasing variance (the
 * controller projects with B^T: it needs B^T B = I), which keeps the span of every leading set of
 * modes; a vector left with under 1e-6 of its norm is dropped.
 */
static sw_status build_kl(sw_loop *l)
{
    if (l->kl)
        return SW_OK;
    const int32_t nact = l->nact;
    sw_lattice_grid g = sw_lattice_grid_lenslets(l->nx, l->nx, 4, 0);
    uint8_t *pupil = malloc((size_t)g.width * g.height);
    float *b = malloc((size_t)nact * nact * sizeof(float));
    double *v = malloc((size_t)nact * sizeof(double));
    sw_status st = SW_OK;
    int32_t n = 0;
    if (!pupil || !b || !v)
        st = sw_fail(l->ctx, SW_ENOMEM, "loop: out of memory (KL modes)");
    /* 4 samples a lenslet, fewer (down to 1) while the pupil holds more than 4096 */
    for (int32_t q = 4; st == SW_OK && q >= 1; q--) {
        g = sw_lattice_grid_lenslets(l->nx, l->nx, q, 0);
        int64_t inside = 0;
        for (int32_t k = 0; k < g.height; k++)
            for (int32_t i = 0; i < g.width; i++)
                inside += pupil[(size_t)k * g.width + i] =
                    (uint8_t)in_footprint(l, g.x0 + i * g.step, g.y0 + k * g.step);
        if (inside <= 4096)
            break;
    }
    if (st == SW_OK)
        st = sw_dm_kl_modes(l->ctx, &l->dm, &g, pupil, l->p.diameter_m / l->nx * g.step,
                            &l->p.turbulence, nact, b, NULL, &n);
    int32_t kept = 0;
    for (int32_t j = 0; st == SW_OK && j < n; j++) {
        double n0 = 0.0, nn = 0.0;
        for (int32_t a = 0; a < nact; a++) {
            v[a] = b[(size_t)j * nact + a];
            n0 += v[a] * v[a];
        }
        for (int32_t i = 0; i < kept; i++) { /* modified Gram-Schmidt against the kept ones */
            const float *q = b + (size_t)i * nact;
            double d = 0.0;
            for (int32_t a = 0; a < nact; a++)
                d += q[a] * v[a];
            for (int32_t a = 0; a < nact; a++)
                v[a] -= d * q[a];
        }
        for (int32_t a = 0; a < nact; a++)
            nn += v[a] * v[a];
        if (!(nn > 1e-6 * n0))
            continue;
        const double s = 1.0 / sqrt(nn);
        for (int32_t a = 0; a < nact; a++)
            b[(size_t)kept * nact + a] = (float)(v[a] * s);
        kept++;
    }
    free(pupil);
    free(v);
    if (st != SW_OK) {
        free(b);
        return st;
    }
    l->kl = b;
    l->nkl = kept;
    return SW_OK;
}

/* The controller the loop runs: p->controller with nact, the unseen modes' filter and, for PI,
 * the modal basis and its per-mode gains (kp, and ki = gain) unless the caller gave them. */
static sw_status controller_params(sw_loop *l, sw_controller_params *cp)
{
    const sw_loop_params *p = &l->p;
    *cp = p->controller;
    cp->nact = l->nact;
    cp->nfilter = l->nfilter;
    cp->filter = l->filter;
    if (cp->kind != SW_CTRL_PI)
        return SW_OK;
    if (!cp->modes && p->modal == 1) {
        cp->modes = l->modes;
        cp->nmodes = l->kept;
    }
    if (!cp->modes && p->modal == 2) {
        SW_TRY(build_kl(l));
        cp->modes = l->kl;
        cp->nmodes = l->nkl;
    }
    const int32_t nm = cp->modes ? cp->nmodes : l->nact;
    if (!cp->kp || !cp->ki) {
        free(l->pi_kp);
        free(l->pi_ki);
        l->pi_kp = malloc((size_t)nm * sizeof(float));
        l->pi_ki = malloc((size_t)nm * sizeof(float));
        if (!l->pi_kp || !l->pi_ki)
            return sw_fail(l->ctx, SW_ENOMEM, "loop: out of memory (PI gains)");
        for (int32_t i = 0; i < nm; i++) {
            l->pi_kp[i] = cp->kp ? cp->kp[i] : (float)p->kp;
            l->pi_ki[i] = cp->ki ? cp->ki[i] : (float)cp->gain;
        }
        cp->kp = l->pi_kp;
        cp->ki = l->pi_ki;
    }
    l->pi_nm = nm;
    return SW_OK;
}

/* Modal gain optimisation's buffers: M = B^T C (nm x 2 ns; B the identity: C), the slopes, the
 * telemetry window. */
static sw_status build_gain_tuning(sw_loop *l, const sw_controller_params *cp)
{
    const int32_t nm = l->pi_nm, n2 = 2 * l->ns, nact = l->nact;
    l->gm = malloc((size_t)nm * n2 * sizeof(float));
    l->gs = malloc((size_t)n2 * sizeof(float));
    l->gtel = malloc((size_t)l->p.gain_window * nm * sizeof(float));
    if (!l->gm || !l->gs || !l->gtel)
        return sw_fail(l->ctx, SW_ENOMEM, "loop: out of memory (gain tuning)");
    /* C as the chain runs it: the unseen modes folded out, C <- C - Z (Z^T C) */
    float *c = malloc((size_t)nact * n2 * sizeof(float));
    if (c)
        memcpy(c, l->cm, (size_t)nact * n2 * sizeof(float));
    if (!c || sw_loop_fold_filter(l->filter, l->nfilter, nact, n2, c) != 0) {
        free(c);
        return sw_fail(l->ctx, SW_ENOMEM, "loop: out of memory (gain tuning)");
    }
    for (int32_t m = 0; m < nm; m++)
        for (int32_t j = 0; j < n2; j++) {
            double acc = 0.0;
            if (cp->modes)
                for (int32_t a = 0; a < nact; a++)
                    acc += (double)cp->modes[(size_t)m * nact + a] * c[(size_t)a * n2 + j];
            else
                acc = c[(size_t)m * n2 + j];
            l->gm[(size_t)m * n2 + j] = (float)acc;
        }
    free(c);
    l->gtel_n = 0;
    return SW_OK;
}

/* After frame k: the modes' measured residual into the window; a full window gives new gains
 * (sw_modal_gains with the loop's delay), set into the chain between frames. */
static sw_status tune_gains(sw_loop *l, int64_t k)
{
    if (!l->gtel || k <= l->p.warmup)
        return SW_OK;
    const int32_t nm = l->pi_nm, n2 = 2 * l->ns;
    cblas_sgemv(CblasRowMajor, CblasNoTrans, nm, n2, 1.0f, l->gm, n2, l->gs, 1, 0.0f,
                l->gtel + (size_t)l->gtel_n * nm, 1);
    if (++l->gtel_n < l->p.gain_window)
        return SW_OK;
    l->gtel_n = 0;
    sw_modal_gains_params mp;
    sw_modal_gains_params_default(&mp);
    mp.delay_frames = l->p.delay + 1;
    /* segments of a quarter of the window (7 half-overlapped), at most 1024 frames: a loop's
     * disturbance lives at a few hertz, so the resolution matters more than the averaging */
    mp.segment = 16;
    while (mp.segment * 8 <= l->p.gain_window && mp.segment < 1024)
        mp.segment *= 2;
    sw_status st =
        sw_modal_gains(l->cpu, &mp, l->gtel, l->p.gain_window, nm, l->pi_ki, l->pi_ki, NULL, NULL);
    if (st != SW_OK)
        return relay(l, st);
    if ((st = sw_rtc_set_gains(l->rtc, NULL, l->pi_ki)) != SW_OK)
        return st;
    l->gain_rounds++;
    return SW_OK;
}

/* The unseen modes over the valid lenslets' corners (sw_unseen_modes), when asked. */
static sw_status build_filter(sw_loop *l)
{
    if (!l->p.unseen)
        return SW_OK;
    if (!(l->filter = malloc((size_t)l->nact * 2 * sizeof(float))))
        return sw_fail(l->ctx, SW_ENOMEM, "loop: out of memory (filter)");
    const sw_status st =
        sw_unseen_modes(l->nx, l->nx, l->cen_valid, l->p.unseen, l->filter, &l->nfilter);
    return st == SW_OK ? SW_OK : relay(l, st);
}

/* ------------------------------------------------------------------ sensor calibration */

/* The centroid threshold (the top's "Centroids"): the larger of threshold_e (3 read noise when
 * noisy and it is 0) and threshold_peak x the peak pixel of the noise-free flat-wavefront
 * frame. */
static sw_status set_threshold(sw_loop *l)
{
    const sw_loop_params *p = &l->p;
    double thr = p->threshold_e > 0.0 ? p->threshold_e : (l->noisy ? 3.0 * p->read_noise_e : 0.0);
    if (p->threshold_peak > 0.0) {
        sw_image_stats s;
        sw_status st = sw_shsim_clear_opd(l->sim);
        if (st == SW_OK)
            st = render(l);
        if (st == SW_OK)
            st = sw_image_stats_compute(l->ctx, &l->frame, &s);
        if (st != SW_OK)
            return st;
        if (p->threshold_peak * s.max > thr)
            thr = p->threshold_peak * s.max;
    }
    l->threshold_e = thr;
    sw_centroid_params *cp = &l->cen_params;
    if (thr > 0.0) {
        cp->threshold_mode = SW_THRESHOLD_SUBTRACT;
        cp->threshold_kind = SW_THRESHOLD_ABSOLUTE;
        cp->threshold = thr;
    }
    return SW_OK;
}

/* The tilts of the gain calibration, in lambda/d (each pushed and pulled): the small signals
 * of a closed loop, whose residual tilts per lenslet are about a tenth of lambda/d. */
static const double GAIN_TILTS[] = {0.0625, 0.125, 0.25};
#define LOOP_GAIN_TILTS ((int)(sizeof GAIN_TILTS / sizeof GAIN_TILTS[0]))

/* The sensor's slope gain per axis (the top's "Slope gain") and the SABRE slope scale. Needs the
 * centroid plan l->cen (with the threshold in force). */
static sw_status calibrate_gain(sw_loop *l)
{
    const double px_rad = LOOP_PIXEL_UM / (l->focal_mm * 1000.0); /* radians per pixel */
    const double lod = l->p.wfs_wavelength_um / l->lenslet_um;    /* lambda/d, radians */
    const int32_t gw = l->gw, ns = l->ns;
    const double u0 = l->resid.u0_um, v0 = l->resid.v0_um, sp = l->resid.spacing_um;
    double *opd = l->resid.opd_um;
    float *push = malloc((size_t)ns * sizeof(float));
    if (!push)
        return sw_fail(l->ctx, SW_ENOMEM, "loop: out of memory (slope gain)");
    sw_status st = SW_OK;
    for (int axis = 0; axis < 2 && st == SW_OK; axis++) {
        double sum = 0.0; /* of the tilts' gains */
        for (int t = 0; t < LOOP_GAIN_TILTS && st == SW_OK; t++) {
            const double a = GAIN_TILTS[t] * lod;
            for (int sign = 1; sign >= -1 && st == SW_OK; sign -= 2) {
                for (int32_t k = 0; k < gw; k++)
                    for (int32_t i = 0; i < gw; i++)
                        opd[(size_t)k * gw + i] =
                            sign * a * (axis == 0 ? u0 + i * sp : v0 + k * sp);
                if ((st = feed(l)) != SW_OK || (st = render(l)) != SW_OK ||
                    (st = sw_centroid_run(l->cen, &l->frame, &l->cres)) != SW_OK)
                    break;
                const float *m = l->cres.slopes + (size_t)axis * ns;
                if (sign > 0) {
                    memcpy(push, m, (size_t)ns * sizeof(float));
                    continue;
                }
                double d = 0.0; /* the push-pull half-difference, summed over the lenslets */
                for (int32_t s = 0; s < ns; s++)
                    d += 0.5 * ((double)push[s] - (double)m[s]);
                sum += d * px_rad / (ns * a);
            }
        }
        l->slope_gain[axis] = sum / LOOP_GAIN_TILTS;
    }
    free(push);
    memset(opd, 0, (size_t)gw * gw * sizeof(double));
    if (st == SW_OK)
        st = sw_shsim_clear_opd(l->sim);
    if (st != SW_OK)
        return st;
    /* a gain outside [LOOP_GAIN_MIN, LOOP_GAIN_MAX] is not a calibration (a threshold above
     * every pixel of a faint star's noise-free spot measures 0): reported, not applied */
    const double g = 0.5 * (l->slope_gain[0] + l->slope_gain[1]);
    const int sane = l->slope_gain[0] >= LOOP_GAIN_MIN && l->slope_gain[0] <= LOOP_GAIN_MAX &&
                     l->slope_gain[1] >= LOOP_GAIN_MIN && l->slope_gain[1] <= LOOP_GAIN_MAX;
    l->slope_scale = px_rad;
    if (l->p.slope_calibration && l->p.recon != SW_LOOP_MVM && sane) {
        l->slope_scale = px_rad / g;
        l->gain_applied = 1;
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ MVM calibration */

/* sw_measure_fn: the wavefront +phi_u alone, noise-free, through the SH model and the
 * centroids. */
static sw_status measure(void *user, const float *commands, float *slopes)
{
    sw_loop *l = user;
    sw_status st = shape(l, commands);
    if (st != SW_OK)
        return st;
    const size_t n = (size_t)l->gw * l->gw;
    for (size_t s = 0; s < n; s++)
        l->resid.opd_um[s] = (double)l->surf[s];
    if ((st = feed(l)) != SW_OK || (st = render(l)) != SW_OK ||
        (st = sw_centroid_run(l->cen, &l->frame, &l->cres)) != SW_OK)
        return st;
    memcpy(slopes, l->cres.slopes, 2 * (size_t)l->ns * sizeof(float));
    return SW_OK;
}

static sw_status build_mvm(sw_loop *l, sw_rtc_params *rp)
{
    const int32_t nsl = 2 * l->ns, nact = l->nact;
    l->im = malloc((size_t)nsl * nact * sizeof(float));
    l->cm = malloc((size_t)nsl * nact * sizeof(float));
    if (!l->im || !l->cm)
        return sw_fail(l->ctx, SW_ENOMEM, "loop: out of memory for the %d x %d interaction matrix",
                       (int)nsl, (int)nact);
    sw_status st = sw_interaction_matrix(l->ctx, nact, nsl, l->p.poke_um, measure, l, l->im);
    if (st != SW_OK)
        return st;
    sw_cm_result res;
    memset(&res, 0, sizeof res);
    if (l->p.modal == 1 && l->p.controller.kind == SW_CTRL_PI && !l->p.controller.modes) {
        if (!(l->modes = malloc((size_t)nact * nact * sizeof(float))))
            return sw_fail(l->ctx, SW_ENOMEM, "loop: out of memory for the %d modes", (int)nact);
        res.modes = l->modes;
    }
    st = sw_control_matrix(l->ctx, l->im, nsl, nact, l->p.cm_condition, 0, l->cm, &res);
    if (st != SW_OK)
        return st;
    l->kept = res.kept;
    if (l->kept < 1)
        return sw_fail(l->ctx, SW_EINVAL,
                       "loop: the interaction matrix has no mode (the spots of the %g e- star are "
                       "below the centroid threshold?)",
                       l->flux_e);
    rp->recon = SW_RTC_MVM;
    rp->cm = l->cm;
    rp->fp16 = 0;
    return SW_OK;
}

/* ------------------------------------------------------------------ modes of negative gain */

/*
 * The closed loop's command-to-command map M = F R D: D the interaction matrix measured through
 * the loop's own sensor (push-pull, noise-free, as MVM's), R the reconstructor (slopes -> r), F
 * the unseen modes' filter. An integrator u <- u - g M u (+ the turbulence's r) is stable only if
 * |1 - g lambda| < 1 for every eigenvalue lambda of M (a leaky one: |1 - leak - g lambda| < 1), so
 * a real lambda < 0 runs away (past -leak / g); D-SABRE and SABRE are not the
 * pseudo-inverse of D, and on small or annular pupils their M can have a mode of negative gain
 * (bench_loop --fig12 --quick: 8 x 8 on an annulus, 2 x 2 lenslets a partition, -0.11 with the
 * distributed projection, Strehl 0.40 against 0.84). Such a mode's invariant subspace Q
 * (orthonormal) filtered out, (I - Q Q^T) M has the eigenvalues of M with Q's replaced by 0 (M is
 * block-triangular in a basis [Q, W]), so the integrator holds the rest and leaves Q alone.
 */
/* negative_filter 1: the largest mirror looked at (the check is O(nact^3)); a mode of negative
 * gain: Re(lambda) < -NEG_TOL x median |lambda| (the leaky integrator: below -leak / gain too);
 * the filter's columns in all (rtc_cuda.cu's RT_MAX_FILTER) */
#define NEG_MAX_ACT    600
#define NEG_TOL        1e-3
#define NEG_MAX_FILTER 32

typedef sw_status (*recon_fn)(sw_loop *l, void *user, const float *slopes, float *r);

/* Whether the loop looks for modes of negative gain (negative_filter, nact actuators). */
static int negative_check(const sw_loop_params *p, int64_t nact)
{
    return p->negative_filter == 2 || (p->negative_filter == 1 && nact <= NEG_MAX_ACT);
}

/* Gram-Schmidt of v (nact doubles) against the filter's columns, twice; 1 when what is left has
 * a norm above 1e-6 (then normalised into v). */
static int orthonormalise(const float *z, int32_t nz, int32_t nact, double *v)
{
    for (int pass = 0; pass < 2; pass++)
        for (int32_t j = 0; j < nz; j++) {
            double d = 0.0;
            for (int32_t a = 0; a < nact; a++)
                d += (double)z[(size_t)j * nact + a] * v[a];
            for (int32_t a = 0; a < nact; a++)
                v[a] -= d * (double)z[(size_t)j * nact + a];
        }
    double n = 0.0;
    for (int32_t a = 0; a < nact; a++)
        n += v[a] * v[a];
    n = sqrt(n);
    if (!(n > 1e-6))
        return 0;
    for (int32_t a = 0; a < nact; a++)
        v[a] /= n;
    return 1;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* M's modes of negative gain into the filter (l->filter, l->nfilter); recon(user, s, r) is the
 * reconstructor without the controller. */
static sw_status filter_negative(sw_loop *l, recon_fn recon, void *user)
{
    l->neg_modes = -1;
    l->neg_min = NAN;
    const int32_t na = l->nact, n2 = 2 * l->ns;
    if (!negative_check(&l->p, na))
        return SW_OK;
    float *D = malloc((size_t)n2 * na * sizeof(float)), *r = malloc((size_t)na * sizeof(float));
    float *rf = malloc((size_t)na * sizeof(float));
    double *M = malloc((size_t)na * na * sizeof(double));
    double *V = malloc((size_t)na * na * sizeof(double));
    double *wr = malloc((size_t)na * sizeof(double)), *wi = malloc((size_t)na * sizeof(double));
    double *mag = malloc((size_t)na * sizeof(double)),
           *zt = malloc((size_t)(l->nfilter + 1) * sizeof(double));
    float *z = malloc((size_t)na * NEG_MAX_FILTER * sizeof(float));
    sw_status st = SW_OK;
    if (!D || !r || !rf || !M || !V || !wr || !wi || !mag || !zt || !z)
        st = sw_fail(l->ctx, SW_ENOMEM,
                     "loop: out of memory (the closed loop's modes, %d actuators)", (int)na);
    if (st == SW_OK)
        st = sw_interaction_matrix(l->ctx, na, n2, l->p.poke_um, measure, l, D);
    memset(l->surf, 0, (size_t)l->gw * l->gw * sizeof(float)); /* the last poke's shape */
    /* M column a = F R D e_a (column-major) */
    for (int32_t a = 0; a < na && st == SW_OK; a++) {
        if ((st = recon(l, user, D + (size_t)a * n2, r)) != SW_OK)
            break;
        sw_loop_filter(l->filter, na, l->nfilter, r, zt, rf);
        for (int32_t i = 0; i < na; i++)
            M[(size_t)a * na + i] = rf[i];
    }
    if (st == SW_OK &&
        LAPACKE_dgeev(LAPACK_COL_MAJOR, 'N', 'V', na, M, na, wr, wi, NULL, na, V, na) != 0)
        st = sw_fail(l->ctx, SW_EINTERNAL, "loop: the closed loop's eigenvalues did not converge");
    if (st == SW_OK) {
        /* the median |lambda| over the modes the loop acts on (the filtered modes and the
         * actuators a global projection leaves out give exact zeros) */
        for (int32_t i = 0; i < na; i++)
            mag[i] = hypot(wr[i], wi[i]);
        qsort(mag, (size_t)na, sizeof *mag, cmp_double);
        int32_t i0 = 0;
        while (i0 < na - 1 && !(mag[i0] > 1e-6 * mag[na - 1]))
            i0++;
        const double ref = mag[i0 + (na - i0) / 2] > 0.0 ? mag[i0 + (na - i0) / 2] : 1.0;
        double tol = NEG_TOL * ref;
        const sw_controller_params *cp = &l->p.controller;
        if (cp->kind == SW_CTRL_LEAKY && cp->gain > 0.0 && cp->leak / cp->gain > tol)
            tol = cp->leak / cp->gain; /* held by the leak above this */
        /* the filter so far, then the negative modes, most negative first */
        const int32_t nz0 = l->nfilter < NEG_MAX_FILTER ? l->nfilter : NEG_MAX_FILTER;
        if (nz0 > 0)
            memcpy(z, l->filter, (size_t)na * nz0 * sizeof(float));
        int32_t nz = nz0;
        double lo = INFINITY;
        for (int32_t i = 0; i < na; i++)
            lo = fmin(lo, wr[i]);
        l->neg_min = lo / ref;
        for (;;) {
            int32_t best = -1;
            for (int32_t i = 0; i < na; i++)
                if (wr[i] < -tol && (best < 0 || wr[i] < wr[best]))
                    best = i;
            /* a real eigenvalue: its vector; a complex pair (columns j, j + 1 of V hold the
             * real and imaginary parts): both, the pair's invariant plane. Beyond 32 columns
             * the least negative are left (a pair is taken whole or not at all). */
            const int parts = best < 0 || wi[best] == 0.0 ? 1 : 2;
            if (best < 0 || nz + parts > NEG_MAX_FILTER)
                break;
            const int32_t j = wi[best] == 0.0 ? best : (wi[best] > 0.0 ? best : best - 1);
            for (int k = 0; k < parts; k++) {
                double *v = M; /* M's storage is free after dgeev */
                for (int32_t a = 0; a < na; a++)
                    v[a] = V[(size_t)(j + k) * na + a];
                if (!orthonormalise(z, nz, na, v))
                    continue;
                for (int32_t a = 0; a < na; a++)
                    z[(size_t)nz * na + a] = (float)v[a];
                nz++;
            }
            wr[j] = INFINITY;
            if (parts == 2)
                wr[j + 1] = INFINITY;
        }
        l->neg_modes = nz - nz0;
        if (nz > l->nfilter) {
            free(l->filter);
            l->filter = z;
            l->nfilter = nz;
            z = NULL;
        }
    }
    free(D);
    free(r);
    free(rf);
    free(M);
    free(V);
    free(wr);
    free(wi);
    free(mag);
    free(zt);
    free(z);
    return st;
}

/* recon_fn of a D-SABRE chain: a CPU copy of the chain (sw_rtc_reconstruct). */
static sw_status rtc_recon(sw_loop *l, void *user, const float *slopes, float *r)
{
    const sw_status st = sw_rtc_reconstruct((sw_rtc *)user, slopes, r);
    return st == SW_OK ? SW_OK : relay(l, st);
}

/* ------------------------------------------------------------------ D-SABRE */

static sw_status build_dsabre(sw_loop *l, sw_rtc_params *rp, float **pmat_out, uint8_t **mask_out)
{
    sw_sabre_params sp;
    sw_sabre_params_default(&sp);
    sp.nx = sp.ny = l->nx;
    sp.pitch = l->lenslet_um;
    sp.valid = l->cen_valid;
    sp.partitions = l->p.partitions;
    sp.overlap = l->p.overlap;
    sp.pme = SW_SABRE_PME_HIERARCHICAL;
    sp.extend_eq17 = 1;
    /* choice: the global projection keeps the per-triangle measurement model (lambda = 1). With
     * the lenslet-mean model's default lambda the 6 x 6, k = 2 loop of tests/unit/test_loop_long.c
     * diverged slowly (from frame ~4400: a mode of the extended lattice the sensor barely sees,
     * projected onto the mirror); the distributed projection stays bounded with it. */
    if (l->p.recon == SW_LOOP_DSABRE_GLOBAL)
        sp.triangle_weight = 1.0;
    uint8_t *mask = NULL;
    const int pupil_fit =
        l->p.recon == SW_LOOP_DSABRE_GLOBAL || l->p.recon == SW_LOOP_DSABRE_LOCAL_PUPIL;
    if (pupil_fit) {
        /* the fitting squares of the extended lattice whose centre is inside the footprint */
        sw_sabre *tmp = NULL;
        sw_status st = sw_sabre_create(l->cpu, &sp, &tmp);
        if (st != SW_OK)
            return relay(l, st);
        sw_sabre_info info;
        sw_sabre_get_info(tmp, &info);
        sw_sabre_destroy(tmp);
        const sw_sabre_lattice *lat = &info.lattice;
        mask = malloc((size_t)lat->sx * lat->sy);
        if (!mask)
            return sw_fail(l->ctx, SW_ENOMEM, "loop: out of memory");
        for (int32_t sj = 0; sj < lat->sy; sj++)
            for (int32_t si = 0; si < lat->sx; si++)
                mask[(size_t)sj * lat->sx + si] =
                    (uint8_t)in_footprint(l, si + 0.5 - lat->offx, sj + 0.5 - lat->offy);
    }
    *mask_out = mask;
    l->chain_sabre = sp;
    l->chain_slope_scale = l->slope_scale;
    const sw_status st =
        sw_rtc_params_sabre(l->cpu, &sp, &l->dm,
                            l->p.recon == SW_LOOP_DSABRE_GLOBAL        ? SW_RTC_PROJ_GLOBAL
                            : l->p.recon == SW_LOOP_DSABRE_LOCAL_PUPIL ? SW_RTC_PROJ_LOCAL_PUPIL
                                                                       : SW_RTC_PROJ_LOCAL,
                            mask, l->chain_slope_scale, rp, pmat_out);
    return st == SW_OK ? SW_OK : relay(l, st);
}

/* The negative modes of a D-SABRE chain, through a CPU copy of it (the filter so far, an
 * integrator: the controller does not enter R). */
static sw_status dsabre_negative(sw_loop *l, const sw_rtc_params *rp)
{
    if (!negative_check(&l->p, l->nact)) {
        l->neg_modes = -1;
        l->neg_min = NAN;
        return SW_OK;
    }
    sw_rtc_params cp = *rp;
    sw_controller_params_default(&cp.controller);
    cp.controller.nact = l->nact;
    cp.controller.nfilter = l->nfilter;
    cp.controller.filter = l->filter;
    cp.telemetry = 0;
    sw_rtc *tmp = NULL;
    sw_status st = sw_rtc_create(l->cpu, &cp, &tmp);
    if (st != SW_OK)
        return relay(l, st);
    if (sw_rtc_slopes(tmp) != l->ns)
        st = sw_fail(l->ctx, SW_EINTERNAL, "loop: the chain has %d slopes, the sensor %d",
                     (int)sw_rtc_slopes(tmp), (int)l->ns);
    else
        st = filter_negative(l, rtc_recon, tmp);
    sw_rtc_destroy(tmp);
    return st;
}

/* ------------------------------------------------------------------ global SABRE (host) */

static sw_status sabre_global_recon(sw_loop *l, void *user, const float *slopes, float *r);

static sw_status build_sabre_global(sw_loop *l)
{
    const int32_t nx = l->nx;
    /* choice: the per-triangle measurement model (lambda = 1, sabre.h), as D-SABRE with the
     * global projection (above). With the lenslet-mean model's default lambda = 0.2 the loop
     * diverged slowly through the actuator at a corner of the square pupil, which one lenslet
     * sees: bench_loop --fig11's 32 x 32 loop, coupling 0.3, gain 1.0, residual 97 -> 1407 nm
     * over 400 frames and commands 0.64 -> 4.7 um (gain 0.5: 213 nm on average over 400
     * frames); lambda = 1: 97 nm and 0.66 um at frame 400, and 100 against 108 nm at gain 0.3. */
    sw_sabre_global_params gp;
    sw_sabre_global_params_default(&gp);
    gp.nx = gp.ny = nx;
    gp.pitch = l->lenslet_um;
    gp.valid = l->cen_valid;
    gp.triangle_weight = 1.0;
    sw_status st = sw_sabre_global_create_params(l->cpu, &gp, &l->sglob);
    if (st != SW_OK)
        return relay(l, st);
    sw_sabre_global_lattice(l->sglob, &l->glat);
    const sw_sabre_lattice *lat = &l->glat;
    const int64_t nv = sw_sabre_lattice_values(lat);
    l->gvals = malloc((size_t)nv * sizeof(double));
    l->gvalsf = malloc((size_t)nv * sizeof(float));
    l->gslopes = calloc(2 * (size_t)nx * nx, sizeof(float));
    l->gr = malloc((size_t)l->nact * sizeof(float));
    uint8_t *mask = malloc((size_t)lat->sx * lat->sy);
    if (!l->gvals || !l->gvalsf || !l->gslopes || !l->gr || !mask) {
        free(mask);
        return sw_fail(l->ctx, SW_ENOMEM, "loop: out of memory for global SABRE");
    }
    /* which vertices the problem estimates: a run on zero slopes leaves the others NaN */
    if ((st = sw_sabre_global_run(l->sglob, l->gslopes, l->gvals)) != SW_OK) {
        free(mask);
        return relay(l, st);
    }
    const int32_t sx = lat->sx, cx = sx + 1;
    const int64_t nc = (int64_t)(sx + 1) * (lat->sy + 1);
    for (int32_t sj = 0; sj < lat->sy; sj++)
        for (int32_t si = 0; si < sx; si++) {
            const double *v = l->gvals;
            const int ok = isfinite(v[(size_t)sj * cx + si]) &&
                           isfinite(v[(size_t)sj * cx + si + 1]) &&
                           isfinite(v[(size_t)(sj + 1) * cx + si]) &&
                           isfinite(v[(size_t)(sj + 1) * cx + si + 1]) &&
                           isfinite(v[nc + (size_t)sj * sx + si]);
            mask[(size_t)sj * sx + si] =
                (uint8_t)(ok && in_footprint(l, si + 0.5 - lat->offx, sj + 0.5 - lat->offy));
        }
    sw_projector_params pp;
    sw_projector_params_global(&pp, &l->dm, lat);
    pp.square_mask = mask;
    /* the fit by the actuators the sensor sees, the corners of the valid lenslets, as D-SABRE's
     * global projection (sw_rtc_params_sabre): the others are left out, their commands 0. Fitted
     * too, those inside the obscuration and beyond the rim took commands of 5-9 um RMS on the
     * annular 16 x 16 loop of bench_loop --fig12 (0.5-0.9 um without them) and cost 1-2 % of
     * Strehl. */
    uint8_t *act = malloc((size_t)pp.nax * pp.nay);
    if (!act)
        st = sw_fail(l->cpu, SW_ENOMEM, "loop: out of memory");
    else {
        for (int32_t ay = 0; ay < pp.nay; ay++)
            for (int32_t ax = 0; ax < pp.nax; ax++)
                act[(size_t)ay * pp.nax + ax] =
                    (uint8_t)sw_loop_corner_seen(l->cen_valid, l->nx, l->nx, ax, ay);
        st = sw_projector_create_masked(l->cpu, &pp, act, &l->gproj);
    }
    free(act);
    free(mask);
    if (st != SW_OK)
        return relay(l, st);
    if ((st = filter_negative(l, sabre_global_recon, NULL)) != SW_OK)
        return st;
    sw_controller_params cp;
    if ((st = controller_params(l, &cp)) != SW_OK)
        return st;
    if ((st = sw_controller_create(l->cpu, &cp, &l->ctrl)) != SW_OK)
        return relay(l, st);
    return SW_OK;
}

/* recon_fn of global SABRE: the slopes (2 ns, pixels) -> r, as run_sabre_global. */
static sw_status sabre_global_recon(sw_loop *l, void *user, const float *slopes, float *r)
{
    (void)user;
    const int32_t n = l->nx * l->nx;
    const double scale = l->slope_scale;
    for (int32_t k = 0; k < l->ns; k++) {
        const int32_t le = sw_centroid_plan_slope_lenslet(l->cen, k);
        l->gslopes[le] = (float)(slopes[k] * scale);
        l->gslopes[n + le] = (float)(slopes[l->ns + k] * scale);
    }
    sw_status st = sw_sabre_global_run(l->sglob, l->gslopes, l->gvals);
    if (st != SW_OK)
        return relay(l, st);
    const int64_t nv = sw_sabre_lattice_values(&l->glat);
    for (int64_t v = 0; v < nv; v++)
        l->gvalsf[v] = isfinite(l->gvals[v]) ? (float)l->gvals[v] : 0.0f;
    if ((st = sw_projector_run(l->gproj, l->gvalsf, SW_MEM_HOST, r)) != SW_OK)
        return relay(l, st);
    return SW_OK;
}

/* One frame through the host path: centroids, global SABRE, projection, controller. */
static sw_status run_sabre_global(sw_loop *l, float *commands)
{
    sw_status st = sw_centroid_run(l->cen, &l->frame, &l->cres);
    if (st != SW_OK)
        return st;
    if ((st = sabre_global_recon(l, NULL, l->cres.slopes, l->gr)) != SW_OK)
        return st;
    if ((st = sw_controller_step(l->ctrl, l->gr, commands)) != SW_OK)
        return relay(l, st);
    return SW_OK;
}

/* ------------------------------------------------------------------ science (CPU) */

/* The PSF of pres into the FFT buffer; returns its maximum; adds it to lacc when accumulate. */
static double psf_cpu(sw_loop *l, int accumulate)
{
    const int32_t n2 = l->n2, nq = l->nq;
    const double kw = 2.0 * LOOP_PI / l->p.science_wavelength_um;
    double *f = l->fft;
    memset(f, 0, (size_t)n2 * n2 * 2 * sizeof(double));
    for (int32_t k = 0; k < nq; k++)
        for (int32_t i = 0; i < nq; i++) {
            const size_t s = (size_t)k * nq + i;
            if (l->pmask[s]) {
                const double ph = kw * (double)l->pres[s];
                f[2 * ((size_t)k * n2 + i)] = cos(ph);
                f[2 * ((size_t)k * n2 + i) + 1] = sin(ph);
            }
        }
    fftw_execute((fftw_plan)l->fft_plan);
    const size_t n = (size_t)n2 * n2;
    double mx = 0.0;
    for (size_t s = 0; s < n; s++) {
        const double v = f[2 * s] * f[2 * s] + f[2 * s + 1] * f[2 * s + 1];
        if (v > mx)
            mx = v;
        if (accumulate)
            l->lacc[s] += v;
    }
    return mx;
}

/* ------------------------------------------------------------------ create / destroy */

void sw_loop_destroy(sw_loop *l)
{
    if (!l)
        return;
    sw_rtc_destroy(l->rtc);
    sw_centroid_result_free(&l->cres);
    sw_centroid_destroy(l->cen);
    sw_controller_destroy(l->ctrl);
    sw_projector_destroy(l->gproj);
    sw_sabre_global_destroy(l->sglob);
    sw_dm_shaper_destroy(l->shaper);
    sw_shsim_destroy(l->sim);
    sw_image_free(&l->frame);
    sw_infinite_screen_destroy(l->screen);
    sw_wavefront_free(&l->window);
    sw_wavefront_free(&l->resid);
#ifdef SW_HAVE_CUDA
    sw_loop_psf_gpu_destroy(l->psf);
    sw_loop_gpu_destroy(l->dev);
#endif
    if (l->fft_plan) {
        sw_fftw_planner_lock();
        fftw_destroy_plan((fftw_plan)l->fft_plan);
        sw_fftw_planner_unlock();
    }
    fftw_free(l->fft);
    free(l->lacc);
    free(l->valid);
    free(l->cen_valid);
    free(l->pmask);
    free(l->turb_own);
    free(l->surf);
    free(l->pres);
    free(l->ring);
    free(l->applied);
    free(l->im);
    free(l->cm);
    free(l->gvals);
    free(l->gvalsf);
    free(l->gslopes);
    free(l->gr);
    free(l->filter);
    free(l->modes);
    free(l->kl);
    free(l->pi_kp);
    free(l->pi_ki);
    free(l->gm);
    free(l->gs);
    free(l->gtel);
    free(l->fit_nn);
    free(l->fit_gx);
    sw_context_destroy(l->cpu);
    free(l);
}

/* The SH simulator, the frame, the detector and the valid lenslets. */
static sw_status build_sensor(sw_loop *l)
{
    const sw_loop_params *p = &l->p;
    sw_shsim_params sp;
    sw_shsim_params_default(&sp);
    sp.width = sp.height = l->nx * p->px_per_lenslet;
    sw_sh_geometry_default(&sp.geom);
    sp.geom.x0 = sp.geom.y0 = 0.0;
    sp.geom.pitch_px = p->px_per_lenslet;
    sp.geom.nx = sp.geom.ny = l->nx;
    sp.geom.pixel_um = LOOP_PIXEL_UM;
    sp.geom.focal_mm = l->focal_mm;
    sp.geom.valid = NULL;
    sp.model = p->model;
    sp.wavelength_um = p->wfs_wavelength_um;
    sp.flux_e = l->flux_e;
    sp.samples = l->q;
    sp.pupil = l->pupil;
    sw_status st = sw_shsim_create(l->ctx, &sp, &l->sim);
    if (st != SW_OK)
        return st;
    sw_sh_truth tr;
    memset(&tr, 0, sizeof tr);
    if ((st = sw_shsim_truth(l->sim, &tr)) != SW_OK)
        return st;
    const int32_t n = l->nx * l->nx;
    int32_t count = 0;
    for (int32_t i = 0; i < n; i++) {
        l->valid[i] = (uint8_t)(tr.illum[i] >= LOOP_MIN_ILLUM);
        count += l->valid[i];
    }
    sw_sh_truth_free(&tr);
    if (count == 0)
        return sw_fail(l->ctx, SW_EINVAL, "loop: no lenslet is lit to %g or more", LOOP_MIN_ILLUM);
    if (!p->square_pupil) {
        if (!(l->cen_valid = malloc((size_t)n)))
            return sw_fail(l->ctx, SW_ENOMEM, "loop: out of memory");
        memcpy(l->cen_valid, l->valid, (size_t)n);
    }
    st = l->gpu ? sw_image_alloc_device(l->ctx, sp.width, sp.height, SW_PIX_F32, &l->frame)
                : sw_image_alloc(l->ctx, sp.width, sp.height, SW_PIX_F32, &l->frame);
    if (st != SW_OK)
        return st;
    sw_detector_default(&l->det);
    l->det.sky_e = 0.0;
    l->det.dark_e = 0.0;
    l->det.shot_noise = 1;
    l->det.read_noise_e = p->read_noise_e;
    l->det.gain_e_per_adu = 1.0;
    l->det.bias_adu = 0.0;
    l->det.full_well_e = 0.0;
    l->det.out_type = SW_PIX_F32;

    sw_centroid_params *cp = &l->cen_params;
    sw_centroid_params_default(cp);
    cp->geometry = sp.geom;
    cp->geometry.valid = l->cen_valid;
    cp->width = cp->height = sp.width;
    cp->type = SW_PIX_F32;
    cp->max_frames = 1;
    cp->path = l->gpu ? SW_CENTROID_DEVICE : SW_CENTROID_HOST;
    return SW_OK; /* the threshold: set_threshold */
}

/* Pupil samples, the screen, the phase buffers. */
static sw_status build_phase(sw_loop *l)
{
    const sw_loop_params *p = &l->p;
    const int32_t nq = l->nq, gw = l->gw;
    l->grid = sw_lattice_grid_lenslets(l->nx, l->nx, l->q, LOOP_MARGIN);
    if (l->grid.width != gw || l->grid.height != gw)
        return sw_fail(l->ctx, SW_EINTERNAL, "loop: phase grid %dx%d, expected %dx%d",
                       (int)l->grid.width, (int)l->grid.height, (int)gw, (int)gw);
    l->npup = 0;
    for (int32_t k = 0; k < nq; k++)
        for (int32_t i = 0; i < nq; i++) {
            const double x = l->grid.x0 + (i + LOOP_MARGIN) * l->grid.step;
            const double y = l->grid.y0 + (k + LOOP_MARGIN) * l->grid.step;
            const uint8_t in = (uint8_t)(p->square_pupil || in_footprint(l, x, y));
            l->pmask[(size_t)k * nq + i] = in;
            l->npup += in;
        }
    if (l->npup < 2)
        return sw_fail(l->ctx, SW_EINVAL, "loop: the pupil holds %lld phase samples",
                       (long long)l->npup);
    l->sum_a = (double)l->npup;
    l->screen_n = gw + (gw & 1);
    /* on the private CPU context: the same screen, bit for bit, whatever the backend */
    sw_status st = sw_infinite_screen_create(l->cpu, &p->turbulence, l->screen_n,
                                             p->diameter_m / (double)nq, p->seed, &l->screen);
    if (st != SW_OK)
        return relay(l, st);
    if ((st = sw_wavefront_alloc(l->ctx, gw, gw, l->lenslet_um / l->q, &l->resid)) != SW_OK)
        return st;
    return load_window(l);
}

static sw_status build_science(sw_loop *l)
{
    const int32_t n2 = l->n2;
    const size_t n = (size_t)n2 * n2;
#ifdef SW_HAVE_CUDA
    if (l->gpu) {
        return sw_loop_psf_gpu_create(l->ctx, l->nq, l->pmask, l->p.science_wavelength_um, &l->psf);
    }
#endif
    l->pres = malloc((size_t)l->nq * l->nq * sizeof(float));
    l->fft = fftw_malloc(n * 2 * sizeof(double));
    l->lacc = calloc(n, sizeof(double));
    if (!l->pres || !l->fft || !l->lacc)
        return sw_fail(l->ctx, SW_ENOMEM, "loop: out of memory for the %dx%d science PSF", (int)n2,
                       (int)n2);
    sw_fftw_planner_lock();
    l->fft_plan = fftw_plan_dft_2d(n2, n2, (fftw_complex *)l->fft, (fftw_complex *)l->fft,
                                   FFTW_FORWARD, FFTW_ESTIMATE);
    sw_fftw_planner_unlock();
    if (!l->fft_plan)
        return sw_fail(l->ctx, SW_EINTERNAL, "loop: FFTW could not plan a %dx%d transform", (int)n2,
                       (int)n2);
    return SW_OK;
}

/* The shaper on the caller's context, and on CUDA the phase grid's device buffers. */
static sw_status build_shaper(sw_loop *l)
{
    sw_status st = sw_dm_shaper_create(l->ctx, &l->dm, &l->grid, &l->shaper);
    if (st != SW_OK)
        return st;
#ifdef SW_HAVE_CUDA
    if (l->gpu) {
        const int32_t gw = l->gw, nq = l->nq;
        uint8_t *mask = calloc((size_t)gw * gw, 1);
        if (!mask)
            return sw_fail(l->ctx, SW_ENOMEM, "loop: out of memory");
        for (int32_t k = 0; k < nq; k++)
            memcpy(mask + (size_t)(k + LOOP_MARGIN) * gw + LOOP_MARGIN, l->pmask + (size_t)k * nq,
                   (size_t)nq);
        st = sw_loop_gpu_create(l->ctx, gw, mask, l->nact, &l->dev);
        free(mask);
    }
#endif
    return st;
}

static sw_status build(sw_loop *l)
{
    const sw_loop_params *p = &l->p;
    sw_context_params cpp;
    sw_context_params_default(&cpp);
    cpp.backend = SW_BACKEND_CPU;
    cpp.threads = sw_context_threads(l->ctx);
    if (sw_context_create(&cpp, &l->cpu) != SW_OK)
        return sw_fail(l->ctx, SW_EINTERNAL, "loop: cannot make a CPU context: %s",
                       sw_context_error(NULL));
    const int32_t nx = l->nx, gw = l->gw, nq = l->nq;
    l->valid = malloc((size_t)nx * nx);
    l->pmask = malloc((size_t)nq * nq);
    l->turb_own = calloc((size_t)gw * gw, sizeof(double));
    l->surf = calloc((size_t)gw * gw, sizeof(float));
    l->ring = calloc((size_t)(p->delay + 1) * l->nact, sizeof(float));
    l->applied = calloc((size_t)l->nact, sizeof(float));
    if (!l->valid || !l->pmask || !l->turb_own || !l->surf || !l->ring || !l->applied)
        return sw_fail(l->ctx, SW_ENOMEM, "loop: out of memory");
    sw_status st;
    if ((st = build_sensor(l)) != SW_OK || (st = build_filter(l)) != SW_OK ||
        (st = build_phase(l)) != SW_OK || (st = build_shaper(l)) != SW_OK)
        return st;
#ifdef SW_HAVE_CUDA
    /* the simulator's device-OPD buffers are made by its first device OPD: here (the residual
     * buffer is zero), not in a step; then back to the host OPD for the calibration */
    if (l->gpu && ((st = sw_shsim_set_opd_device(l->sim, sw_loop_gpu_residual(l->dev), gw, gw,
                                                 l->resid.spacing_um, l->resid.u0_um,
                                                 l->resid.v0_um)) != SW_OK ||
                   (st = sw_shsim_clear_opd(l->sim)) != SW_OK))
        return st;
#endif

    /* the threshold, a centroid plan (the calibrations', SABRE_GLOBAL's), the slope gain */
    if ((st = set_threshold(l)) != SW_OK ||
        (st = sw_centroid_create(l->ctx, &l->cen_params, &l->cen)) != SW_OK ||
        (st = sw_centroid_result_alloc(l->cen, 1, SW_MEM_HOST, &l->cres)) != SW_OK)
        return st;
    l->ns = sw_centroid_plan_slopes(l->cen);
    if ((st = calibrate_gain(l)) != SW_OK)
        return st;

    /* reconstruction */
    if (p->recon == SW_LOOP_SABRE_GLOBAL)
        return build_sabre_global(l);
    sw_rtc_params rp;
    sw_rtc_params_default(&rp);
    rp.centroid = l->cen_params;
    rp.nact = l->nact;
    rp.telemetry = 0;
    float *pmat = NULL;
    uint8_t *mask = NULL;
    if (p->recon == SW_LOOP_MVM) {
        st = build_mvm(l, &rp);
        memset(l->surf, 0, (size_t)gw * gw * sizeof(float)); /* the last poke's shape */
    } else {
        st = build_dsabre(l, &rp, &pmat, &mask);
        if (st == SW_OK)
            st = dsabre_negative(l, &rp);
    }
    if (st == SW_OK)
        st = controller_params(l, &rp.controller);
    if (st == SW_OK && p->gain_window > 0)
        st = build_gain_tuning(l, &rp.controller);
    if (st == SW_OK)
        st = sw_rtc_create(l->ctx, &rp, &l->rtc);
    free(pmat);
    free(mask);
    if (st == SW_OK && p->recon != SW_LOOP_MVM)
        l->ns = sw_rtc_slopes(l->rtc);
    return st;
}

sw_status sw_loop_create(sw_context *ctx, const sw_loop_params *p, sw_loop **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_loop_create: out is NULL");
    *out = NULL;
    if (!ctx)
        return sw_fail(NULL, SW_EINVAL, "sw_loop_create: the context is NULL");
    if (!p)
        return sw_fail(ctx, SW_EINVAL, "sw_loop_create: params is NULL");
    sw_status st = check_params(ctx, p);
    if (st != SW_OK)
        return st;
    {
        /* The arrays whose size the parameters decide, summed before any is made: the science
         * PSF (FFT and long exposure, (2 nq)^2 x 24 bytes), the phase grid (turbulence, mirror
         * surface, residual, masks: gw^2 x ~20 bytes), the SH frame (and its copy) and, for MVM,
         * the interaction and control matrices (2 nx^2 slopes x (nx + 1)^2 actuators, floats). */
        const uint64_t nq = (uint64_t)p->nx * (uint64_t)p->samples, gw = nq + 2 * LOOP_MARGIN;
        const uint64_t frame = (uint64_t)p->nx * (uint64_t)p->px_per_lenslet;
        const uint64_t nact = ((uint64_t)p->nx + 1) * ((uint64_t)p->nx + 1);
        uint64_t bytes = 4 * nq * nq * 24 + gw * gw * 20 + frame * frame * 8;
        if (p->recon == SW_LOOP_MVM)
            bytes += 2 * (2 * (uint64_t)p->nx * (uint64_t)p->nx) * nact * sizeof(float);
        else if (negative_check(p, (int64_t)nact))
            /* the negative modes' check: D (floats), M and its eigenvectors (doubles) */
            bytes += 2 * (uint64_t)p->nx * (uint64_t)p->nx * nact * sizeof(float) +
                     2 * nact * nact * sizeof(double);
        SW_TRY(sw_memory_check(ctx, 1, bytes,
                               "loop: %d x %d lenslets, %d samples and %d pixels per lenslet%s",
                               (int)p->nx, (int)p->nx, (int)p->samples, (int)p->px_per_lenslet,
                               p->recon == SW_LOOP_MVM ? ", MVM matrices" : ""));
    }
    sw_loop *l = calloc(1, sizeof *l);
    if (!l)
        return sw_fail(ctx, SW_ENOMEM, "loop: out of memory");
    l->ctx = ctx;
    l->p = *p;
    l->p.controller.nact = (p->nx + 1) * (p->nx + 1);
    l->neg_modes = -1;
    l->neg_min = NAN;
    /* arrays the caller owns are read at create only */
    l->gpu = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    l->threads = sw_context_threads(ctx);
    l->noisy = !isnan(p->magnitude);
    l->nx = p->nx;
    l->q = p->samples;
    l->nq = p->nx * p->samples;
    l->gw = l->nq + 2 * LOOP_MARGIN;
    l->n2 = 2 * l->nq;
    l->nact = (p->nx + 1) * (p->nx + 1);
    l->lenslet_um = p->px_per_lenslet * LOOP_PIXEL_UM;
    /* lambda f / d = nyquist_px pixels */
    l->focal_mm = p->nyquist_px * LOOP_PIXEL_UM * l->lenslet_um / p->wfs_wavelength_um / 1000.0;
    const double d = p->diameter_m / p->nx;
    l->flux_e = l->noisy ? p->zero_point * pow(10.0, -0.4 * p->magnitude) * d * d / p->rate_hz *
                               p->throughput
                         : LOOP_NOISELESS;
    if (p->square_pupil) {
        memset(&l->pupil, 0, sizeof l->pupil);
    } else {
        l->pupil = sw_pupil_circle(p->nx * l->lenslet_um);
        l->pupil.obscuration = p->obscuration;
    }
    l->dm = p->dm;
    l->dm.nx = l->dm.ny = p->nx;
    l->kept = -1;
    if (!(l->flux_e <= FLT_MAX)) {
        sw_loop_destroy(l);
        return sw_fail(ctx, SW_EINVAL, "loop: magnitude %g gives %g e- per lenslet: too bright",
                       p->magnitude, l->flux_e);
    }
    st = build(l);
    if (st != SW_OK) {
        sw_loop_destroy(l);
        return st;
    }
    st = build_science(l);
    if (st != SW_OK) {
        sw_loop_destroy(l);
        return st;
    }
    *out = l;
    return SW_OK;
}

/* ------------------------------------------------------------------ step */

/* Noise on the SH frame (frame k), then the reconstructor and the controller: the commands u_k
 * into `commands`. */
static sw_status detect_and_reconstruct(sw_loop *l, int64_t k, float *commands)
{
    sw_status st;
    if (l->noisy) {
        l->det.seed = l->p.seed * 0x9E3779B97F4A7C15ull + (uint64_t)k;
        if ((st = sw_detector_apply(l->ctx, &l->det, &l->frame, &l->frame)) != SW_OK)
            return st;
    }
    if (l->camera)
        return SW_OK; /* the caller's chain reconstructs (sw_loop_camera) */
    if (l->rtc)       /* gs: the slopes for the gain tuning, NULL otherwise */
        return sw_rtc_run(l->rtc, &l->frame, commands, l->gs);
    return run_sabre_global(l, commands);
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

/* Adds the time since *t to phase i and restarts *t. */
static void lap(sw_loop *l, int i, double *t)
{
    const double n = now_us();
    l->phase_sum[i] += n - *t;
    *t = n;
}

/* Frame k on the CPU: the surface of `applied`, the residual W - phi_u on the grid, its pupil
 * square for the science camera and the RMS sums in one pass, the SH frame, u_k into slot, the
 * science PSF. */
static sw_status step_cpu(sw_loop *l, int64_t k, float *slot, int acc, double *peak, double *t)
{
    sw_status st;
    if ((st = shape(l, l->applied)) != SW_OK)
        return st;
    const int32_t gw = l->gw, nq = l->nq;
    const double *turb = l->turb;
    const float *surf = l->surf;
    double *res = l->resid.opd_um;
    float *pres = l->pres;
    const uint8_t *pmask = l->pmask;
    double st1 = 0.0, st2 = 0.0, sr1 = 0.0, sr2 = 0.0;
#pragma omp parallel for schedule(static) num_threads(l->threads) reduction(+ : st1, st2, sr1, sr2)
    for (int32_t r = 0; r < gw; r++) {
        const double *tu = turb + (size_t)r * gw;
        const float *u = surf + (size_t)r * gw;
        double *o = res + (size_t)r * gw;
        for (int32_t i = 0; i < gw; i++)
            o[i] = tu[i] - (double)u[i];
        const int32_t pk = r - LOOP_MARGIN; /* pupil row */
        if (pk < 0 || pk >= nq)
            continue;
        const uint8_t *m = pmask + (size_t)pk * nq;
        float *dst = pres + (size_t)pk * nq;
        for (int32_t i = 0; i < nq; i++) {
            const double w = tu[i + LOOP_MARGIN], v = o[i + LOOP_MARGIN];
            dst[i] = (float)v;
            if (m[i]) {
                st1 += w;
                st2 += w * w;
                sr1 += v;
                sr2 += v * v;
            }
        }
    }
    l->last_turb_nm = 1e3 * rms_of(st1, st2, (double)l->npup);
    l->last_resid_nm = 1e3 * rms_of(sr1, sr2, (double)l->npup);
    lap(l, 1, t);
    if ((st = feed(l)) != SW_OK || (st = render(l)) != SW_OK)
        return st;
    lap(l, 2, t);
    if ((st = detect_and_reconstruct(l, k, slot)) != SW_OK)
        return st;
    lap(l, 3, t);
    *peak = psf_cpu(l, acc);
    if (acc)
        l->lcount++;
    return SW_OK;
}

#ifdef SW_HAVE_CUDA
/* Frame k on CUDA (see the top): the window as floats (pinned) and the turbulence sums on the
 * host; then queued: the uploads, the shaper, the residual and its sums, the science PSF, the
 * simulator's OPD, the SH frame, the noise; the rtc's run waits for the stream once. */
static sw_status step_gpu(sw_loop *l, int64_t k, float *slot, int acc, double *peak, double *t)
{
    const int32_t gw = l->gw, nq = l->nq;
    const double *turb = l->turb;
    const uint8_t *pmask = l->pmask;
    float *tf = sw_loop_gpu_turb_input(l->dev);
    double st1 = 0.0, st2 = 0.0;
#pragma omp parallel for schedule(static) num_threads(l->threads) reduction(+ : st1, st2)
    for (int32_t r = 0; r < gw; r++) {
        const double *tu = turb + (size_t)r * gw;
        float *o = tf + (size_t)r * gw;
        for (int32_t i = 0; i < gw; i++)
            o[i] = (float)tu[i];
        const int32_t pk = r - LOOP_MARGIN; /* pupil row */
        if (pk < 0 || pk >= nq)
            continue;
        const uint8_t *m = pmask + (size_t)pk * nq;
        for (int32_t i = 0; i < nq; i++)
            if (m[i]) {
                const double w = tu[i + LOOP_MARGIN];
                st1 += w;
                st2 += w * w;
            }
    }
    l->last_turb_nm = 1e3 * rms_of(st1, st2, (double)l->npup);
    lap(l, 1, t);
    const float *res = sw_loop_gpu_residual(l->dev);
    sw_status st;
    if ((st = sw_loop_gpu_upload(l->dev, l->applied)) != SW_OK ||
        (st = sw_dm_shaper_run(l->shaper, sw_loop_gpu_commands(l->dev), SW_MEM_DEVICE,
                               sw_loop_gpu_surface(l->dev))) != SW_OK ||
        (st = sw_loop_gpu_residual_run(l->dev)) != SW_OK)
        return st;
    if ((st = sw_loop_psf_gpu_enqueue(l->psf, res + (size_t)LOOP_MARGIN * gw + LOOP_MARGIN, gw,
                                      acc)) != SW_OK)
        return st;
    /* from here on the PSF is queued: it is counted even after a failure (drained below) */
    if ((st = sw_shsim_set_opd_device(l->sim, res, gw, gw, l->resid.spacing_um, l->resid.u0_um,
                                      l->resid.v0_um)) == SW_OK &&
        (st = render(l)) == SW_OK) {
        lap(l, 2, t);
        st = detect_and_reconstruct(l, k, slot);
        lap(l, 3, t);
    }
    /* the rtc has waited for the stream: the residual sums and the PSF's maximum are in */
    const sw_status sp =
        sw_loop_psf_gpu_peak(l->psf, st != SW_OK || !l->rtc || l->camera != NULL, peak);
    if (acc)
        l->lcount++;
    if (st != SW_OK)
        return st;
    if (sp != SW_OK)
        return sp;
    double sr1, sr2;
    sw_loop_gpu_residual_sums(l->dev, &sr1, &sr2);
    l->last_resid_nm = 1e3 * rms_of(sr1, sr2, (double)l->npup);
    return SW_OK;
}
#endif

static sw_status step_once(sw_loop *l, sw_loop_frame *out);

sw_status sw_loop_step(sw_loop *l, sw_loop_frame *out)
{
    if (!l)
        return sw_fail(NULL, SW_EINVAL, "sw_loop_step: the loop is NULL");
    if (l->broken)
        return sw_fail(l->ctx, SW_EINVAL,
                       "loop: an earlier step failed part-way (screen moved, frame not counted): "
                       "destroy and recreate the simulator");
    const sw_status st = step_once(l, out);
    if (st != SW_OK)
        l->broken = 1;
    return st;
}

static sw_status step_once(sw_loop *l, sw_loop_frame *out)
{
    const sw_loop_params *p = &l->p;
    const int64_t k = l->nframe + 1;
    double t = now_us();
    sw_status st;
    if (k > 1) {
        if ((st = sw_infinite_screen_advance(l->screen, p->wind_m_s / p->rate_hz)) != SW_OK)
            return relay(l, st);
        if ((st = load_window(l)) != SW_OK)
            return st;
    }
    /* the command due now: u_{k-1-delay} (zero before the first) */
    const int32_t nact = l->nact, slots = p->delay + 1;
    float *slot = l->ring + (size_t)(k % slots) * nact;
    if (l->camera)
        memcpy(l->applied, l->camera, (size_t)nact * sizeof(float));
    else if (k - 1 - p->delay >= 1)
        memcpy(l->applied, slot, (size_t)nact * sizeof(float));
    else
        memset(l->applied, 0, (size_t)nact * sizeof(float));
    lap(l, 0, &t);

    const int acc = k > p->warmup;
    double peak = 0.0;
#ifdef SW_HAVE_CUDA
    if (l->gpu)
        st = step_gpu(l, k, slot, acc, &peak, &t);
    else
#endif
        st = step_cpu(l, k, slot, acc, &peak, &t);
    if (st != SW_OK)
        return st;
    l->nframe = k;
    if (!l->camera && (st = tune_gains(l, k)) != SW_OK)
        return st;
    /* u_k is in slot now (the applied commands for the camera): how many commands sit at the
     * stroke limit (the clamp gives +-clip) */
    const float *uk = l->camera ? l->applied : slot;
    if (!l->camera)
        l->last = slot;
    l->last_clipped = 0;
    if (p->controller.clip > 0.0) {
        const float lim = (float)p->controller.clip;
        for (int32_t a = 0; a < nact; a++)
            l->last_clipped += fabsf(uk[a]) >= lim;
    }
    if (out) {
        const double a2 = l->sum_a * l->sum_a;
        const double ph = 2.0 * LOOP_PI * l->last_resid_nm * 1e-3 / p->science_wavelength_um;
        double c2 = 0.0;
        for (int32_t a = 0; a < nact; a++)
            c2 += (double)l->applied[a] * l->applied[a];
        out->frame = k;
        out->turbulence_nm = l->last_turb_nm;
        out->residual_nm = l->last_resid_nm;
        out->strehl = peak / a2;
        out->marechal = exp(-ph * ph);
        out->command_rms_um = sqrt(c2 / nact);
    }
    lap(l, 4, &t);
    l->phase_frames++;
    return SW_OK;
}

sw_status sw_loop_camera(sw_loop *l, const float *commands, float *frame, sw_loop_frame *out)
{
    if (!l || !commands || !frame)
        return sw_fail(l ? l->ctx : NULL, SW_EINVAL, "sw_loop_camera: NULL argument");
    if (l->broken)
        return sw_fail(l->ctx, SW_EINVAL,
                       "loop: an earlier step failed part-way (screen moved, frame not counted): "
                       "destroy and recreate the simulator");
    for (int32_t a = 0; a < l->nact; a++)
        if (!isfinite(commands[a]))
            return sw_fail(l->ctx, SW_ERANGE, "loop camera: command %d is not finite", (int)a);
    l->camera = commands;
    sw_status st = step_once(l, out);
    l->camera = NULL;
    if (st == SW_OK) {
        /* the frame as the camera delivers it: host floats, row-major (sw_image_copy waits for
         * the device) */
        sw_image dst;
        st = sw_image_wrap(frame, l->frame.width, l->frame.height,
                           (size_t)l->frame.width * sizeof(float), SW_PIX_F32, SW_MEM_HOST, &dst);
        if (st == SW_OK)
            st = sw_image_copy(l->ctx, &l->frame, &dst);
    }
    if (st != SW_OK)
        l->broken = 1;
    return st;
}

void sw_loop_sensor(const sw_loop *l, int32_t *width, int32_t *height, int32_t *ns)
{
    if (width)
        *width = l ? l->frame.width : 0;
    if (height)
        *height = l ? l->frame.height : 0;
    if (ns)
        *ns = l ? l->ns : 0;
}

sw_status sw_loop_chain(const sw_loop *l, sw_loop_chain_info *out)
{
    if (!l || !out)
        return sw_fail(l ? l->ctx : NULL, SW_EINVAL, "sw_loop_chain: NULL argument");
    if (!(l->p.recon == SW_LOOP_MVM && l->cm) && l->p.recon != SW_LOOP_DSABRE_LOCAL)
        return sw_fail(l->ctx, SW_EUNSUPPORTED,
                       "loop: only the mvm and dsabre-local chains are exported (recon = %s: "
                       "its projection depends on the pupil's footprint or runs on the host)",
                       sw_loop_recon_string(l->p.recon));
    memset(out, 0, sizeof *out);
    out->centroid = l->cen_params;
    out->centroid.path = SW_CENTROID_HOST; /* the frame a camera stream delivers */
    out->nact = l->nact;
    out->recon = l->p.recon;
    out->cm = l->cm;
    out->sabre = l->chain_sabre;
    out->slope_scale = l->chain_slope_scale;
    out->dm = l->dm;
    out->unseen = l->p.unseen;
    out->nfilter = l->nfilter;
    out->filter = l->filter;
    return SW_OK;
}

const float *sw_loop_gains(const sw_loop *l, int32_t *nmodes, int32_t *rounds)
{
    const int pi = l && l->p.controller.kind == SW_CTRL_PI;
    if (nmodes)
        *nmodes = pi ? l->pi_nm : 0;
    if (rounds)
        *rounds = l ? l->gain_rounds : 0;
    return pi ? l->pi_ki : NULL;
}

const float *sw_loop_commands(const sw_loop *l)
{
    return l ? l->last : NULL;
}

static const char *const PHASE_NAMES[SW_LOOP_PHASES] = {
    "screen: advance and window", "CPU: shaper and residual; CUDA: window to float, turbulence RMS",
    "CPU: SH simulator; CUDA: queueing uploads, shaper, residual, PSF, SH simulator",
    "detector and reconstruction (CUDA: with the wait for the GPU)",
    "science PSF (CPU) and the rest"};

const char *sw_loop_phase_name(int phase)
{
    return phase >= 0 && phase < SW_LOOP_PHASES ? PHASE_NAMES[phase] : "?";
}

void sw_loop_phase_us(sw_loop *l, int reset, double us[SW_LOOP_PHASES])
{
    if (!l)
        return;
    for (int i = 0; i < SW_LOOP_PHASES; i++) {
        if (us)
            us[i] = l->phase_frames > 0 ? l->phase_sum[i] / (double)l->phase_frames : 0.0;
        if (reset)
            l->phase_sum[i] = 0.0;
    }
    if (reset)
        l->phase_frames = 0;
}

double sw_loop_long_strehl(const sw_loop *l)
{
    if (!l || l->lcount == 0)
        return NAN;
    double peak = 0.0;
#ifdef SW_HAVE_CUDA
    if (l->gpu) {
        if (sw_loop_psf_gpu_long_peak(l->psf, &peak) != SW_OK)
            return NAN;
    } else
#endif
    {
        const size_t n = (size_t)l->n2 * l->n2;
        for (size_t s = 0; s < n; s++)
            if (l->lacc[s] > peak)
                peak = l->lacc[s];
    }
    return peak / ((double)l->lcount * l->sum_a * l->sum_a);
}

int32_t sw_loop_modes(const sw_loop *l)
{
    return l && l->p.recon == SW_LOOP_MVM ? l->kept : -1;
}

int32_t sw_loop_negative_modes(const sw_loop *l, double *min_gain)
{
    if (min_gain)
        *min_gain = l ? l->neg_min : NAN;
    return l ? l->neg_modes : -1;
}

int32_t sw_loop_clipped(const sw_loop *l)
{
    return l ? l->last_clipped : 0;
}

int32_t sw_loop_actuators(const sw_loop *l)
{
    return l ? l->nact : 0;
}

int sw_loop_slope_gain(const sw_loop *l, double gain[2])
{
    if (gain) {
        gain[0] = l ? l->slope_gain[0] : NAN;
        gain[1] = l ? l->slope_gain[1] : NAN;
    }
    return l ? l->gain_applied : 0;
}

double sw_loop_threshold_e(const sw_loop *l)
{
    return l ? l->threshold_e : NAN;
}

/* ------------------------------------------------------------------ fitting error */

/* Profiles and the factorised normal matrix (see the top). */
/* The dense normal matrix costs nact^2 doubles and an O(nact^3) factorisation: refused beyond
 * this many actuators (nx = 89; 0.5 GB, tens of seconds) rather than seeming to hang. */
#define LOOP_FIT_MAX_ACT 8100

static sw_status fit_prepare(sw_loop *l)
{
    const int32_t nq = l->nq, na = l->nx + 1, nact = l->nact;
    if (nact > LOOP_FIT_MAX_ACT)
        return sw_fail(l->ctx, SW_EUNSUPPORTED,
                       "loop: the fitting error needs a dense %d x %d normal matrix; it is "
                       "computed for up to %d actuators (nx <= 89)",
                       nact, nact, LOOP_FIT_MAX_ACT);
    double *gx = malloc((size_t)nq * na * sizeof(double));
    double *nn = calloc((size_t)nact * nact, sizeof(double));
    double *h = malloc((size_t)na * na * sizeof(double));
    double *rows = malloc((size_t)nq * na * sizeof(double));
    if (!gx || !nn || !h || !rows) {
        free(gx);
        free(nn);
        free(h);
        free(rows);
        return sw_fail(l->ctx, SW_ENOMEM,
                       "loop: out of memory for the %d x %d fitting normal matrix", (int)nact,
                       (int)nact);
    }
    /* gx[i na + a] = f(x_i - x_a), x_i = -1/2 + (i + 1/2) / q, x_a = a - 1/2 (Eq. 12) */
    for (int32_t i = 0; i < nq; i++) {
        const double x = -0.5 + (i + 0.5) / l->q;
        for (int32_t a = 0; a < na; a++)
            gx[(size_t)i * na + a] =
                sw_dm_profile(l->dm.influence, l->dm.coupling, x - ((double)a - 0.5));
    }
    for (int32_t k = 0; k < nq; k++) {
        /* h = sum over the pupil samples of row k of fx fx^T */
        int32_t m = 0;
        for (int32_t i = 0; i < nq; i++)
            if (l->pmask[(size_t)k * nq + i])
                memcpy(rows + (size_t)(m++) * na, gx + (size_t)i * na, (size_t)na * sizeof(double));
        if (m == 0)
            continue;
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, na, na, m, 1.0, rows, na, rows, na,
                    0.0, h, na);
        /* nn[(ay na + ax), (by na + bx)] += fy[ay] fy[by] h[ax, bx] */
        const double *fy = gx + (size_t)k * na;
        for (int32_t ay = 0; ay < na; ay++) {
            if (fabs(fy[ay]) < 1e-12)
                continue;
            for (int32_t by = 0; by < na; by++) {
                const double w = fy[ay] * fy[by];
                if (fabs(w) < 1e-24)
                    continue;
                for (int32_t ax = 0; ax < na; ax++) {
                    double *dst = nn + ((size_t)ay * na + ax) * nact + (size_t)by * na;
                    const double *src = h + (size_t)ax * na;
                    for (int32_t bx = 0; bx < na; bx++)
                        dst[bx] += w * src[bx];
                }
            }
        }
    }
    free(h);
    free(rows);
    double tr = 0.0;
    for (int32_t a = 0; a < nact; a++)
        tr += nn[(size_t)a * nact + a];
    const double lambda = LOOP_FIT_LAMBDA * tr / nact;
    for (int32_t a = 0; a < nact; a++)
        nn[(size_t)a * nact + a] += lambda;
    const lapack_int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', nact, nn, nact);
    if (info != 0) {
        free(gx);
        free(nn);
        return sw_fail(l->ctx, SW_EINTERNAL,
                       "loop: the fitting normal matrix is not positive definite (dpotrf %d)",
                       (int)info);
    }
    l->fit_gx = gx;
    l->fit_nn = nn;
    return SW_OK;
}

sw_status sw_loop_fitting_error(sw_loop *l, double *rms_nm)
{
    if (!l || !rms_nm)
        return sw_fail(l ? l->ctx : NULL, SW_EINVAL, "sw_loop_fitting_error: %s is NULL",
                       l ? "rms_nm" : "the loop");
    sw_status st;
    if (!l->fit_nn && (st = fit_prepare(l)) != SW_OK)
        return st;
    const int32_t nq = l->nq, na = l->nx + 1, gw = l->gw;
    double *w = malloc((size_t)nq * nq * sizeof(double));
    double *t = malloc((size_t)nq * na * sizeof(double));
    double *c = malloc((size_t)l->nact * sizeof(double));
    if (!w || !t || !c) {
        free(w);
        free(t);
        free(c);
        return sw_fail(l->ctx, SW_ENOMEM, "loop: out of memory for the fit");
    }
    for (int32_t k = 0; k < nq; k++)
        for (int32_t i = 0; i < nq; i++) {
            const size_t s = (size_t)k * nq + i;
            w[s] = l->pmask[s] ? l->turb[(size_t)(k + LOOP_MARGIN) * gw + i + LOOP_MARGIN] : 0.0;
        }
    const double *g = l->fit_gx;
    /* F^T w = Gy^T (M w) Gx: t = (M w) Gx (nq x na), c = Gy^T t (na x na, row ay, column ax) */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, na, nq, 1.0, w, nq, g, na, 0.0, t,
                na);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, na, na, nq, 1.0, g, na, t, na, 0.0, c, na);
    const lapack_int info =
        LAPACKE_dpotrs(LAPACK_ROW_MAJOR, 'L', l->nact, 1, l->fit_nn, l->nact, c, 1);
    if (info != 0) {
        free(w);
        free(t);
        free(c);
        return sw_fail(l->ctx, SW_EINTERNAL, "loop: dpotrs failed (%d)", (int)info);
    }
    /* fit = Gy C Gx^T: t = Gy C (nq x na), fit = t Gx^T (nq x nq), then w - fit over the pupil */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, na, na, 1.0, g, na, c, na, 0.0, t,
                na);
    double s = 0.0, s2 = 0.0;
    for (int32_t k = 0; k < nq; k++)
        for (int32_t i = 0; i < nq; i++) {
            const size_t q = (size_t)k * nq + i;
            if (!l->pmask[q])
                continue;
            double fit = 0.0;
            for (int32_t a = 0; a < na; a++)
                fit += t[(size_t)k * na + a] * g[(size_t)i * na + a];
            const double r = w[q] - fit;
            s += r;
            s2 += r * r;
        }
    free(w);
    free(t);
    free(c);
    const double n = (double)l->npup, mean = s / n, v = s2 / n - mean * mean;
    *rms_nm = 1e3 * (v > 0.0 ? sqrt(v) : 0.0);
    return SW_OK;
}

/* ------------------------------------------------------------------ maps and internals */

sw_status sw_loop_maps(const sw_loop *l, int32_t *side, float *turbulence, float *correction,
                       float *residual)
{
    if (!l)
        return sw_fail(NULL, SW_EINVAL, "sw_loop_maps: the loop is NULL");
    const int32_t nq = l->nq, gw = l->gw;
    if (side)
        *side = nq;
#ifdef SW_HAVE_CUDA
    if (l->gpu && (correction || residual)) {
        /* the surface lives on the device: l->surf is the host's copy */
        const sw_status st = sw_loop_gpu_download_surface(l->dev, l->surf);
        if (st != SW_OK)
            return st;
    }
#endif
    for (int32_t k = 0; k < nq; k++)
        for (int32_t i = 0; i < nq; i++) {
            const size_t s = (size_t)k * nq + i;
            const size_t g = (size_t)(k + LOOP_MARGIN) * gw + i + LOOP_MARGIN;
            const int in = l->pmask[s];
            if (turbulence)
                turbulence[s] = in ? (float)l->turb[g] : NAN;
            if (correction)
                correction[s] = in ? l->surf[g] : NAN;
            if (residual)
                residual[s] = in ? (float)(l->turb[g] - (double)l->surf[g]) : NAN;
        }
    return SW_OK;
}

const float *sw_loop_interaction(const sw_loop *l, int32_t *nslopes, int32_t *nact)
{
    if (!l || !l->im)
        return NULL;
    if (nslopes)
        *nslopes = 2 * l->ns;
    if (nact)
        *nact = l->nact;
    return l->im;
}

const float *sw_loop_control(const sw_loop *l)
{
    return l ? l->cm : NULL;
}

const float *sw_loop_applied(const sw_loop *l, int32_t *nact)
{
    if (!l)
        return NULL;
    if (nact)
        *nact = l->nact;
    return l->applied;
}
