/*
 * spotwave loop: the adaptive-optics loop after the wavefront sensor (Brunner et al. section 4,
 * Mocci et al. section 6): a deformable-mirror model, the projection of a reconstructed wavefront
 * onto it (global Eq. 13 and distributed Eq. 14-16 of Brunner et al.), the interaction / control
 * matrices of the classic matrix-vector reconstructor, controllers, the real-time chain from camera
 * frame to commands, and a closed-loop simulator that proves they correct turbulence.
 *
 * Papers: Brunner E., de Visser C. C., Vuik C., Verhaegen M. 2018, "GPU implementation for
 * spline-based wavefront reconstruction", J. Opt. Soc. Am. A 35(6), 859-872 (Sec. 4: the DM, its
 * projections, the closed-loop setting); Mocci J., Busato F., Bombieri N., Bonora S., Muradore R.
 * 2020, J. Opt. Soc. Am. A 37(10), 1548 (Sec. 6: the loop after the centroids); Assemat F.,
 * Wilson R. W., Gendron E. 2006, Opt. Express 14(3), 988-999 (the infinite screen).
 *
 * Coordinates. Everything is placed on the lenslet lattice of sabre.h: lenslet (ix, iy) has its
 * reference centre at lattice position (x, y) = (ix, iy), one unit = one lenslet pitch, x along the
 * pupil's +u, y along +v (sim_sh.h).
 *
 * The deformable mirror (Fried geometry, Brunner et al. section 4.B): for an nx x ny lenslet array
 * the actuators sit at the (nx + 1)(ny + 1) lenslet corners; actuator a = cy (nx + 1) + cx is at
 * (cx - 1/2, cy - 1/2) (the Fried corners of sabre.h, the centre vertices of the SABRE lattice).
 * A command u_a is in units of optical path (micrometres of OPD throughout spotwave); the mirror's
 * correction is the surface
 *     phi_u(x, y) = sum_a u_a f(x - x_a) f(y - y_a)                         (Brunner et al. Eq. 12)
 * with the separable influence function f (one actuator pitch = one lattice unit) of coupling c,
 * the value of an actuator's influence at its neighbours, 0 < c < 1:
 *     GAUSSIAN  f(r) = c^(r^2)
 *     BEZIER    OOMAO's "monotonic" influence function (R. Conan and C. Correia, "Object-oriented
 *               Matlab adaptive optics toolbox", Proc. SPIE 9148, 91486C (2014);
 *               influenceFunction.m; Brunner et al. ref. 20): the planar curve of two cubic
 *               Bezier segments with the control points (0, 1), (0.2, 1), (0.4, 0.7), (0.6, 0.4)
 *               and (0.6, 0.4), (0.8, 0.1), (1, 0), (2, 0) (C1 where they meet, flat at both
 *               ends), its abscissa scaled by 1 / s so that it passes through (1 pitch, c):
 *                   f(r) = Y(tau) where X(tau) = |r| s, zero from |r| = 2 / s on,
 *               X, Y = sum_k B3_k(tau) P_k, B3_k the cubic Bernstein polynomials, and s the
 *               curve's X where Y = c. The shape is fixed and the coupling only stretches it:
 *               its reach, 2 / s pitches, is 1.72 at c = 0.05, 2.97 at c = 0.3, 3.75 at c = 0.5
 *               (f(2) = 0.024 at c = 0.3). OOMAO evaluates a spline through 201 samples of the
 *               curve; this exact curve is within 3e-6 of it.
 * The residual wavefront the sensor sees is W - phi_u (the mirror subtracts its shape).
 *
 * Sign of reconstructors. Every reconstructor here returns r, the commands whose mirror shape best
 * matches the wavefront that produced the slopes (the residual); an integrator adds g r to the
 * commands. Interaction matrices are measured with the wavefront +phi_u (push) and -phi_u (pull).
 *
 * Threading: a plan serves one thread at a time, except the telemetry reader of sw_rtc
 * (sw_rtc_telemetry_read may run on another thread while the owner runs frames).
 */
#ifndef SPOTWAVE_LOOP_H
#define SPOTWAVE_LOOP_H

#include <stdint.h>
#include "spotwave/centroid.h"
#include "spotwave/core.h"
#include "spotwave/sabre.h"
#include "spotwave/sim_sh.h"
#include "spotwave/turbulence.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ================================================================== deformable mirror */

typedef enum sw_dm_influence { SW_DM_GAUSSIAN = 0, SW_DM_BEZIER = 1 } sw_dm_influence;

const char *sw_dm_influence_string(sw_dm_influence f);                   /* "gaussian", "bezier" */
sw_status sw_dm_influence_parse(const char *text, sw_dm_influence *out); /* SW_EINVAL otherwise */

/* The 1-D influence profile f(r) above (r in actuator pitches, either sign). NaN for a coupling
 * outside (0, 1) or a NaN r. */
double sw_dm_profile(sw_dm_influence f, double coupling, double r);

typedef struct sw_dm_params {
    int32_t nx, ny;            /* lenslets; actuators (nx + 1)(ny + 1), 1..1024 lenslets per side */
    sw_dm_influence influence; /* (GAUSSIAN) */
    double coupling; /* 0 < c < 1 (0.3)                                                  */
} sw_dm_params;

void sw_dm_params_default(sw_dm_params *p); /* nx = ny = 0 (must be set), GAUSSIAN, 0.3 */
/* SW_EINVAL with a message for sizes outside 1..1024 or a coupling not in (0, 1). */
sw_status sw_dm_check(sw_context *ctx, const sw_dm_params *p);

/*
 * A regular grid of sample points on the lattice: sample (i, k), 0 <= i < width, 0 <= k < height,
 * at (x0 + i step, y0 + k step); arrays over it are row-major, out[k width + i].
 */
typedef struct sw_lattice_grid {
    int32_t width, height;
    double x0, y0, step;
} sw_lattice_grid;

/* q samples per lenslet side over an nx x ny array plus `margin` samples on every side: width =
 * nx q + 2 margin, step 1/q, x0 = -1/2 + (1/2 - margin) / q (sample centres; the array's
 * footprint [-1/2, nx - 1/2] is covered exactly by samples margin .. margin + nx q - 1). */
sw_lattice_grid sw_lattice_grid_lenslets(int32_t nx, int32_t ny, int32_t q, int32_t margin);

/*
 * The mirror's surface on a grid (Eq. 12): out = F u with F separable, computed as two matrix
 * products Fy U Fx^T (U the commands as an (ny + 1) x (nx + 1) matrix): OpenBLAS sgemm on the CPU,
 * cuBLAS sgemm on the GPU (float; GPU and CPU agree to 1e-5 of max |u|).
 */
typedef struct sw_dm_shaper sw_dm_shaper;

/* Grid of 1..8192 samples per side, finite positive step. SW_EINVAL, SW_ENOMEM. */
sw_status sw_dm_shaper_create(sw_context *ctx, const sw_dm_params *dm, const sw_lattice_grid *g,
                              sw_dm_shaper **out);
void sw_dm_shaper_destroy(sw_dm_shaper *s); /* NULL is ignored */
/* commands: (nx + 1)(ny + 1) floats; out: width x height floats; both in `memory` (HOST/PINNED on
 * any context, DEVICE on CUDA; on CUDA the run has finished when it returns unless both arrays
 * are device memory, in which case it is queued on the context's stream). NaN commands give
 * NaN samples (no check). */
sw_status sw_dm_shaper_run(sw_dm_shaper *s, const float *commands, sw_memory memory, float *out);

/* =================================================== projection (Brunner et al. 2018, Sec. 4.A) */

/*
 * Least-squares projection of a linear spline (sabre.h's lattice values c) onto the commands of a
 * set of actuators (Eq. 13, and Eq. 14-15 for one partition's window):
 *     u = P c,   P = (F^T F + lambda I)^-1 F^T B,
 * B(x, y) the spline evaluated (sw_sabre_eval's interpolation inside the squares) and F(x, y) the
 * influence functions at the fitting points: q x q points per lattice square, at
 * (I + (a + 1/2) / q - offx, J + (b + 1/2) / q - offy), a, b = 0..q-1, for every square (I, J) of
 * the lattice (0 <= I < sx, 0 <= J < sy) selected by square_mask (NULL: all). lambda =
 * regularisation x trace(F^T F) / nact keeps actuators that no point sees (outside the pupil) at 0
 * and the system positive definite. Built in double (dense normal equations, LAPACKE_dposv),
 * stored as float, row-major: P[a ncols + v].
 * Actuators: a rectangular grid of nax x nay, actuator a = j nax + i at (ax0 + i, ay0 + j).
 */
typedef struct sw_projector_params {
    sw_dm_influence influence;
    double coupling;
    sw_sabre_lattice lattice;   /* the spline's lattice                                       */
    int32_t nax, nay;           /* actuator grid, nax nay <= 16384                             */
    double ax0, ay0;            /* lattice position of actuator (0, 0)                         */
    int32_t samples;            /* q, fitting points per square side, 1..16 (4)               */
    const uint8_t *square_mask; /* optional sx * sy (J sx + I): squares whose points are fitted */
    double regularisation;      /* >= 0 (1e-6)                                                 */
} sw_projector_params;

void sw_projector_params_default(sw_projector_params *p);

/* The usual two: the whole nx x ny array's Fried actuators for a lattice (global projection), and
 * one D-SABRE window of w x w squares with its w x w actuators at the square centres (the local
 * projection of Eq. 14-15, lattice {w, w, 0, 0}, all squares). Influence and coupling from dm. */
void sw_projector_params_global(sw_projector_params *p, const sw_dm_params *dm,
                                const sw_sabre_lattice *lattice);
void sw_projector_params_window(sw_projector_params *p, const sw_dm_params *dm, int32_t w);

typedef struct sw_projector sw_projector;

/* SW_EINVAL (bad sizes, no fitting point, coupling), SW_ENOMEM, SW_EINTERNAL (LAPACK). */
sw_status sw_projector_create(sw_context *ctx, const sw_projector_params *p, sw_projector **out);
void sw_projector_destroy(sw_projector *p); /* NULL is ignored */
/* P (host, row-major rows x cols: rows = actuators, cols = lattice values). */
const float *sw_projector_matrix(const sw_projector *p, int32_t *rows, int32_t *cols);
/* commands = P values (GEMV: OpenBLAS / cuBLAS); arrays in `memory` as sw_dm_shaper_run. */
sw_status sw_projector_run(sw_projector *p, const float *values, sw_memory memory, float *commands);

/* ================================================================== interaction and control */

/* The system as the calibration sees it: apply `commands` (nact floats, host) to the mirror, take
 * a measurement and write nslopes slopes (host). Return SW_OK or a failure (stops the
 * calibration, which returns it). */
typedef sw_status (*sw_measure_fn)(void *user, const float *commands, float *slopes);

/*
 * Interaction matrix by push-pull: column a = (s(+amp e_a) - s(-amp e_a)) / (2 amp), with the
 * other commands 0. im: nslopes x nact, column-major (im[a nslopes + k]). amp > 0 and finite.
 */
sw_status sw_interaction_matrix(sw_context *ctx, int32_t nact, int32_t nslopes, double amp,
                                sw_measure_fn measure, void *user, float *im);

/*
 * Control matrix: the truncated pseudo-inverse of the interaction matrix, C = V S^+ U^T over the
 * kept modes (LAPACKE_dgesdd in double): singular values sigma_i >= sigma_0 / max_condition are
 * kept (max_condition >= 1; 0: no limit), and at most max_modes of them (0: no limit). Returns cm:
 * nact x nslopes row-major (cm[a nslopes + k]: actuator a's row, as the GPU's GEMV reads it);
 * optional outputs (NULL to skip): *kept, singular (min(nslopes, nact) doubles, descending) and
 * modes (nact x kept, column-major: the kept right singular vectors, an orthonormal modal basis
 * for sw_controller's PI). SW_EINVAL for bad sizes or a non-finite entry; SW_EINTERNAL when the
 * SVD fails.
 */
typedef struct sw_cm_result {
    int32_t kept;
    double *singular; /* caller's array or NULL */
    float *modes;     /* caller's array (nact x nact suffices) or NULL */
} sw_cm_result;

sw_status sw_control_matrix(sw_context *ctx, const float *im, int32_t nslopes, int32_t nact,
                            double max_condition, int32_t max_modes, float *cm,
                            sw_cm_result *result);

/* ====================================================== controllers (Mocci et al. 2020, Sec. 6) */

typedef enum sw_controller_kind {
    SW_CTRL_INTEGRATOR = 0, /* u_k = u_{k-1} + g r_k                                      */
    SW_CTRL_LEAKY = 1,      /* u_k = (1 - leak) u_{k-1} + g r_k                           */
    SW_CTRL_PI = 2          /* per mode: e = B^T r_k, I_k = I_{k-1} + e, u_k = B (kp e + ki I_k) */
} sw_controller_kind;

const char *sw_controller_kind_string(sw_controller_kind k); /* integrator|leaky|pi */
sw_status sw_controller_kind_parse(const char *text, sw_controller_kind *out);

typedef struct sw_controller_params {
    sw_controller_kind kind;
    int32_t nact;        /* commands, >= 1                                                   */
    double gain;         /* g (0.5); PI: ki of every mode when ki is NULL                       */
    double leak;         /* 0 <= leak < 1 (0.01), LEAKY only                                   */
    int32_t nmodes;      /* PI: modes (1..nact)                                               */
    const float *modes;  /* PI: B, nact x nmodes column-major, orthonormal columns (copied);
                            NULL: the identity (one mode per actuator, nmodes = nact)           */
    const float *kp;     /* PI: nmodes proportional gains, NULL: 0 (copied)                    */
    const float *ki;     /* PI: nmodes integral gains, NULL: gain (copied)                     */
    double clip;         /* > 0: every command clipped to [-clip, clip] (stroke); 0: none (0) */
    int32_t nfilter;     /* modes filtered out of every reconstruction, 0..nact (0)          */
    const float *filter; /* Z: nact x nfilter column-major, orthonormal columns (copied): the
                            modes the sensor cannot see (sw_unseen_modes); r is replaced by
                            r - Z Z^T r before the update                                      */
} sw_controller_params;

/* INTEGRATOR, nact 0 (must be set), gain 0.5, leak 0.01, no modes, no clip, no filter. */
void sw_controller_params_default(sw_controller_params *p);

/*
 * The largest stable gain of u_k = (1 - leak) u_{k-1} + g r_k when r_k sees the correction made
 * d >= 1 frames earlier (r_k = w_k - u_{k-d}; a unit-gain reconstructor): the closed loop's
 * characteristic equation is z^d - (1 - leak) z^(d-1) + g = 0 and its roots stay inside the unit
 * circle for 0 < g < g_max. For the pure integrator (leak 0) g_max = 2 sin(pi / (2 (2d - 1))):
 * 2 for d = 1, 1 for d = 2, 0.618 for d = 3, ~ pi / (2 (2d - 1)) beyond. With a leak the root
 * leaves the circle at the angle w where w (d - 1) + arg(e^{iw} - (1 - leak)) = pi, at the gain
 * |e^{iw} - (1 - leak)| (found by bisection): 2 - leak for d = 1, 1 for d = 2, a little above
 * the integrator's for d >= 3. PI with
 * kp = 0 is the integrator of gain ki. NaN for d < 1 or leak outside [0, 1).
 */
double sw_controller_max_gain(int32_t delay_frames, double leak);

/*
 * The controller on the CPU (the real-time chain runs the same update on the GPU). The state
 * (u_{k-1}, and the PI integrals) starts at 0. Each step:
 *   1. the unseen modes filtered out: r' = r - Z (Z^T r) (nfilter > 0);
 *   2. INTEGRATOR / LEAKY: u_k = clip(keep u_{k-1} + g r'), keep = 1 or 1 - leak. The state is the
 *      clipped command, so a saturated actuator does not wind up (anti-windup by construction);
 *   3. PI, per mode i of B (the identity when modes is NULL): e = B^T r', I_i += e_i,
 *      v_i = kp_i e_i + ki_i I_i, u = clip(B v). Its discrete transfer function from e to v is
 *      C(z) = kp + ki / (1 - z^-1). Anti-windup by back-calculation (Astrom & Hagglund 1995,
 *      "PID Controllers: Theory, Design, and Tuning", on integrator windup): when the clip
 *      changed u, the integrals are moved so that
 *      B (kp e + ki I) is the clipped command in the modal space, I_i += (B^T (u_clip - u))_i /
 *      ki_i (modes with ki_i = 0 keep theirs). Without a clip the law is unchanged.
 */
typedef struct sw_controller sw_controller;
sw_status sw_controller_create(sw_context *ctx, const sw_controller_params *p, sw_controller **out);
void sw_controller_destroy(sw_controller *c); /* NULL is ignored */
void sw_controller_reset(sw_controller *c);   /* state back to 0 */
/* One step: r (nact floats, host) -> commands u_k (nact floats, host). A non-finite r: SW_ERANGE,
 * state unchanged. */
sw_status sw_controller_step(sw_controller *c, const float *r, float *u);
/* PI: new per-mode gains (nmodes floats each, finite; NULL keeps that set) between steps (e.g.
 * from sw_modal_gains). Bumpless: each integral is rescaled by ki_old / ki_new so that the
 * command's integral part ki I does not jump; a mode whose ki was 0 (no integral part) starts
 * from I = 0, and one set to ki = 0 loses its integral part (I is kept). SW_EINVAL for another
 * kind or a non-finite gain. */
sw_status sw_controller_set_gains(sw_controller *c, const float *kp, const float *ki);
/* PI's modes (nmodes), 0 for the other kinds. */
int32_t sw_controller_modes(const sw_controller *c);

/*
 * Modal gain optimisation from closed-loop telemetry (Gendron E., Lena P. 1994, "Astronomical
 * adaptive optics. I. Modal control optimization", Astron. Astrophys. 291, 337-347). For each mode
 * i, y_k (the mode's measured residual, e.g. B^T r_k) was recorded with the leaky integrator
 * u_k = a u_{k-1} + g0 y_k acting d frames later (y_k = phi_k - u_{k-d} + n_k, a = 1 - leak).
 * The loop's rejection function is
 *     E(z) = (1 - a z^-1) / (1 - a z^-1 + g z^-d),
 * so the closed-loop PSD is |E_g0|^2 (P_phi + P_n). The PSD of y (Welch: Hann segments of
 * `segment` frames, half overlapped) divided by |E_g0|^2 is the pseudo-open-loop PSD; its median
 * over the highest frequencies (above noise_band x Nyquist) is the white noise level P_n (GL94's
 * plateau), and P_phi = max(P_ol - P_n, 0). The residual variance at gain g,
 *     sigma^2(g) = sum_f |E_g|^2 P_phi + |1 - E_g|^2 P_n
 * (the disturbance rejected by E, the noise passed by 1 - E), is minimised over `candidates` gains
 * evenly spread in (0, margin g_max], g_max = sw_controller_max_gain(d, leak). A mode whose
 * telemetry is all zero keeps its gain. On the CPU (FFTW), off the real-time path.
 */
typedef struct sw_modal_gains_params {
    int32_t delay_frames; /* d >= 1 (1): the loop's delay + 1 frames                            */
    double leak;          /* 0 <= leak < 1 (0)                                                   */
    int32_t segment;      /* Welch segment, a power of two in 16..65536, <= the frames (256)    */
    double margin;        /* 0 < margin < 1: fraction of the stable limit searched (0.9)        */
    int32_t candidates;   /* gains tried, 2..100000 (400)                                        */
    double noise_band;    /* 0 < x < 1: the noise plateau, above x Nyquist (0.75)                */
} sw_modal_gains_params;

void sw_modal_gains_params_default(sw_modal_gains_params *p);

/* y: nframes x nmodes floats, frame-major (y[k nmodes + i]); gains: the nmodes gains g0 it was
 * taken with (> 0 and finite); out: the nmodes optimised gains (may be gains). Optional (NULL to
 * skip): noise (per-frame noise variance estimated, nmodes) and predicted (sigma^2 at the new
 * gain, nmodes). SW_EINVAL for bad sizes, parameters or a non-finite sample. */
sw_status sw_modal_gains(sw_context *ctx, const sw_modal_gains_params *p, const float *y,
                         int64_t nframes, int32_t nmodes, const float *gains, float *out,
                         double *noise, double *predicted);

/*
 * The same from pseudo-open-loop measurements: y_pol = y - M D u, the closed-loop measurement plus
 * what the commands applied during the exposure removed (M: the modes' reconstructor, D = the
 * interaction matrix ds/du, u: the commands on the mirror while the frame was taken). Their PSD
 * is the pseudo-open-loop PSD itself (P_phi + P_n), so no model of the loop (its gains g0, delay
 * and leak) divides it out; the gains, delay and leak still set the prediction for the new
 * gains. gains: the current gains (kept for a mode whose telemetry is all zero).
 */
sw_status sw_modal_gains_pol(sw_context *ctx, const sw_modal_gains_params *p, const float *y_pol,
                             int64_t nframes, int32_t nmodes, const float *gains, float *out,
                             double *noise, double *predicted);

/*
 * Karhunen-Loeve modes of the mirror dm (the double diagonalisation AO simulators use, Gendron
 * 1995, PhD thesis, Universite Paris 7): command vectors (nact = (nx + 1)(ny + 1) floats each)
 * whose shapes over the pupil are orthonormal (piston removed: sum over the pupil samples of
 * shape_i shape_j = delta_ij, in command units squared) and whose coefficients in von Karman
 * turbulence t are uncorrelated, in order of decreasing variance. grid: where the influence
 * functions are sampled (sw_lattice_grid_lenslets; 4 samples a lenslet are plenty), pupil: its
 * width x height samples, non-zero inside (2 .. 4096 of them), step_m: the samples' spacing in
 * metres. Writes up to max_modes modes to `modes` (nact x max_modes column-major: mode j at
 * modes[j nact]), their variances (t's phase units squared times the samples' count, optional)
 * and the count in *nmodes (the mirror's shapes that are not piston, at most max_modes). CPU
 * (LAPACKE, OpenBLAS); any context (its threads).
 */
sw_status sw_dm_kl_modes(sw_context *ctx, const sw_dm_params *dm, const sw_lattice_grid *grid,
                         const uint8_t *pupil, double step_m, const sw_turbulence *t,
                         int32_t max_modes, float *modes, double *variance, int32_t *nmodes);

/*
 * The modes the sensor cannot see, as an orthonormal filter for sw_controller_params (nact x
 * nmodes column-major, written to Z, at most 2 columns). On the Fried geometry of an nx x ny array
 * (actuators at the lenslet corners) a Shack-Hartmann sensor measures differences of the corner
 * values across each lenslet, so piston (every active actuator equal) and waffle (+1 / -1 in a
 * checkerboard, (-1)^(cx + cy)) give zero slopes (Fried 1977, J. Opt. Soc. Am. 67(3), 370). `valid`
 * (nx ny, NULL: all) picks the lenslets; the active actuators are the corners of valid lenslets,
 * and the modes are zero on the others. `which`: SW_UNSEEN_PISTON | SW_UNSEEN_WAFFLE. The columns
 * are orthonormalised (Gram-Schmidt) over the actuators; *nmodes is their count.
 */
enum { SW_UNSEEN_PISTON = 1, SW_UNSEEN_WAFFLE = 2 };
/* "none", "piston", "waffle", "piston-waffle" (also "piston,waffle" and "waffle-piston" parsed). */
const char *sw_unseen_string(int which);
sw_status sw_unseen_parse(const char *text, int *out);
sw_status sw_unseen_modes(int32_t nx, int32_t ny, const uint8_t *valid, int which, float *z,
                          int32_t *nmodes);

/* ================================================================== real-time chain */

typedef enum sw_rtc_recon {
    SW_RTC_MVM = 0,  /* r = C s (control matrix), FP32 or FP16 storage                      */
    SW_RTC_SABRE = 1 /* r = projection of the D-SABRE wavefront of s (sabre.h)              */
} sw_rtc_recon;

typedef enum sw_rtc_projection {
    SW_RTC_PROJ_CORNERS = 0, /* r = the spline at the Fried corners (sw_sabre_run's actuators) */
    SW_RTC_PROJ_GLOBAL = 1,  /* r = P values, P an sw_projector of the extended lattice (Eq. 13) */
    SW_RTC_PROJ_LOCAL = 2,   /* distributed projection inside the D-SABRE run (Eq. 14-16,
                                sw_sabre_set_projection): one matrix for every window, the
                                whole window fitted (Brunner et al. Fig. 14's "MM")           */
    SW_RTC_PROJ_LOCAL_PUPIL = 3 /* distributed projection on the pupil only (section 4.A, Eq.
                                   14-15; Fig. 14's "MV"): a matrix per partition
                                   (sw_sabre_set_projection_partitions), see
                                   sw_rtc_params_sabre                                        */
} sw_rtc_projection;

/*
 * The chain frame -> calibration -> centroids -> slopes -> reconstruction -> controller ->
 * commands as one plan. Slopes are the centroid stage's (pixels, x block then y block over the
 * geometry's mask: ns per axis). On CUDA: the frame is copied in (from host memory, pinned for
 * speed, or taken from device memory), and the centroid kernel, the reconstruction (cuBLAS sgemv /
 * the FP16 GEMV kernel, or the D-SABRE kernels), the controller and the writes of the commands
 * (and of the telemetry) run as one CUDA graph; a run allocates nothing and synchronises once, at
 * its end. On the CPU the same stages run in turn (OpenMP / OpenBLAS).
 */
typedef struct sw_rtc_params {
    sw_centroid_params centroid; /* geometry, frame size and type, conditioning (path ignored)  */
    sw_rtc_recon recon;
    int32_t nact; /* commands                                                     */
    /* MVM */
    const float *cm; /* nact x 2 ns row-major (sw_control_matrix's layout), copied   */
    int fp16;        /* GPU: store C in FP16, accumulate in FP32 (CPU: float always);
                        every entry (and of B^T C for PI) must be below 65504 in
                        magnitude (SW_EINVAL otherwise)                            */
    /* SABRE (nx, ny of the geometry; pitch: the lenslet pitch in the unit wanted for values) */
    sw_sabre_params sabre;
    double slope_scale; /* pixel slopes x this = the slopes sabre is given (radians:
                           pixel_um / (focal_mm 1000)); > 0                            */
    sw_rtc_projection projection;
    const float *projection_matrix; /* GLOBAL: nact x nvalues (sw_projector_matrix of the plan's
                                       extended lattice); LOCAL: w^2 x nl (the window's);
                                       LOCAL_PUPIL: k^2 w^2 x nl, the partitions' w^2 x nl
                                       matrices stacked (partition b k + a's rows from
                                       (b k + a) w^2)                                          */
    int32_t projection_rows, projection_cols; /* its size, checked against the plan            */
    sw_controller_params controller; /* nact must equal nact above                            */
    int32_t telemetry; /* ring slots, 0 (none) .. 65536                               */
} sw_rtc_params;

void sw_rtc_params_default(sw_rtc_params *p);

/*
 * The D-SABRE fields of rp (recon SW_RTC_SABRE): the sabre plan's parameters (copied; its valid
 * mask must outlive the rtc's creation), slope_scale, and the projection: CORNERS needs nothing;
 * LOCAL the window's (Eq. 14-16; sw_projector_params_window: every square of the window fitted,
 * every square centre an actuator, even beyond the real array, so that one matrix serves all
 * partitions: Brunner et al. section 5.A, Fig. 14's "MM").
 * GLOBAL the projection of Eq. 13 onto the (nx + 1)(ny + 1) Fried actuators from the plan's
 * extended lattice (sw_projector_params_global), fitting the squares square_mask selects (NULL:
 * every square) by the actuators the sensor sees, the corners of the valid lenslets
 * (sabre->valid; NULL: all); the others are left out of the fit and their commands are 0, as
 * for a mirror with only the pupil's actuators. (Fitting them too made the loop diverge with
 * small partitions on an annular pupil: an actuator inside the central obscuration or beyond
 * the rim, whose influence mostly misses the fitted squares, was fixed mainly by the 1e-6
 * regularisation, and with D-SABRE's zero-padded values there the linearised loop had a mode of
 * negative gain, -0.33 for 8 x 8 partitions of 16 x 16 lenslets: BENCHMARKS.md, Figs. 12-14.)
 * LOCAL_PUPIL (section 4.A's projection, which section 5.A describes as computing "the actuator
 * commands within the pupil"; Fig. 14's "MV"): for each partition the least-squares fit of its
 * window's spline at the fitting points of the window's squares that square_mask selects (the
 * pupil; NULL: the squares centred on an actuator the sensor sees) by those of the window's
 * actuators that the sensor sees (lenslet corners of the real array, corners of valid
 * lenslets; the others left out, their commands 0), with LOCAL's fitting points and
 * regularisation; a window with no fitting point or no such actuator gets a zero matrix.
 * square_mask is over the extended lattice's squares (sx sy of sw_sabre_info.lattice, J sx + I)
 * for GLOBAL and LOCAL_PUPIL. The projection matrix is allocated into *matrix (free() it after
 * sw_rtc_create; NULL for CORNERS) and set in rp. Any context may build it (the CPU's does: the
 * matrix is host memory). This is how sw_loop builds its D-SABRE chain.
 */
sw_status sw_rtc_params_sabre(sw_context *ctx, const sw_sabre_params *sabre, const sw_dm_params *dm,
                              sw_rtc_projection projection, const uint8_t *square_mask,
                              double slope_scale, sw_rtc_params *rp, float **matrix);

typedef struct sw_rtc sw_rtc;

sw_status sw_rtc_create(sw_context *ctx, const sw_rtc_params *p, sw_rtc **out);
void sw_rtc_destroy(sw_rtc *r);    /* NULL is ignored */
sw_status sw_rtc_reset(sw_rtc *r); /* controller state to 0 (telemetry kept) */
/* Slopes per axis (ns) of the plan. */
int32_t sw_rtc_slopes(const sw_rtc *r);
/* PI: new per-mode gains between runs (sw_controller_set_gains; on CUDA uploaded before it
 * returns, the graph reads them from the next run). */
sw_status sw_rtc_set_gains(sw_rtc *r, const float *kp, const float *ki);

/*
 * One frame: `frame` (width x height of the plan's type, host/pinned memory, or device memory on
 * CUDA) -> commands (nact floats in host memory; NULL: only the plan's copy is updated, see
 * sw_rtc_commands). Has finished when it returns. The GPU chain does not check the commands
 * for NaN (the CPU controller refuses a non-finite r with SW_ERANGE); the centroid stage's slopes
 * are always finite, and FP16 matrices are checked at create. slopes: optional host array (2 ns
 * floats) for the frame's slopes (copied after the commands; costs a copy).
 */
sw_status sw_rtc_run(sw_rtc *r, const sw_image *frame, float *commands, float *slopes);
/* The last commands (host memory owned by the plan, nact floats; pinned on CUDA). */
const float *sw_rtc_commands(const sw_rtc *r);
/* Wall time of the last run (host clock, microseconds). */
double sw_rtc_last_us(const sw_rtc *r);

/*
 * Telemetry: a ring of `telemetry` slots, each the frame number (counting from 1), the slopes (2
 * ns) and the commands (nact) of one run, written at the end of every run. sw_rtc_telemetry_read
 * copies the newest complete slot (any thread; lock-free, retried while the writer overwrites it)
 * and returns its frame number in *frame (0: nothing yet). slopes / commands may be NULL.
 */
sw_status sw_rtc_telemetry_read(sw_rtc *r, int64_t *frame, float *slopes, float *commands);

/* ------------------------------------------------- the band-wise real-time chain (CUDA only)
 *
 * A camera delivers a frame row by row; the band chain starts on the first rows while the later
 * ones are still arriving, so that after the last pixel only the last rows' work and the end of
 * the reconstruction remain. Built on an sw_rtc plan (MVM, FP32 or FP16; integrator or leaky
 * controller, with the plan's clip; the centre-of-gravity centroids with an absolute or no
 * threshold), whose matrices, centroid conditioning and controller parameters it copies; its own
 * controller state starts at 0.
 *
 * Design: a ring of `depth` frame slots in pinned host memory mapped into the GPU's address
 * space. The frame is cut into `bands` bands of whole lenslet rows (band b holds lenslet rows
 * [b ny / bands, (b + 1) ny / bands) and the pixel rows from the first of them up to the first
 * of the next band; band 0 starts at row 0, the last ends at the frame's last row). The camera
 * (a producer thread) writes band b of frame f into sw_rtc_band_buffer's rows and then calls
 * sw_rtc_band_publish, which stores f into the band's flag with a release store. One persistent
 * kernel, launched at create (cooperative launch: all its blocks resident at once), loops over
 * the frames 1, 2, 3, ...: the blocks that own a band's lenslet rows wait for its flag (acquire
 * loads at system scope), read its pixels straight from host memory over the bus, and compute
 * those lenslets' centres of gravity with the centroid stage's arithmetic (the same slopes, bit
 * for bit, as sw_rtc_run); then every block adds the band's columns of the control matrix times
 * those slopes to the commands it owns (a column-blocked GEMV: after the last band only its
 * columns remain). After the last band each block applies the controller to its commands and
 * writes them to host memory; the last block to finish stores the frame's number into the done
 * flag (a release store at system scope), which sw_rtc_band_wait spins on.
 *
 * Memory ordering. Host: pixels, then __atomic_store_n(flag, f, __ATOMIC_RELEASE). GPU: one
 * thread's ld.acquire.sys of the flag, a block barrier, then the pixel loads (uncached). Slopes
 * between blocks: stores, a block barrier, one thread's __threadfence and an atomic count per
 * band; readers acquire the count (gpu scope) before the loads. Commands: stores to host memory,
 * a block barrier, one thread's __threadfence and an atomic count of finished blocks; the last
 * block alone fences at system scope (cumulative: every block's stores that it has observed)
 * and then stores the done flag; the host acquires it before reading the commands. A
 * system-scope fence waits for the bus, so the chain keeps to one per frame. Only the blocks
 * waiting for a band's flag read host memory (the flag, and the stop flag every 32 reads);
 * every other wait polls device memory.
 *
 * Errors are never silent: publishing out of order (a band twice or skipped, a frame number that
 * is not the next) is refused (SW_EINVAL) and counted; a slot still being read when its next
 * frame is asked for is refused (SW_ERANGE, an overrun) and counted; a band that does not arrive
 * within band_timeout_us of the previous band (or a first band within idle_timeout_us of the
 * previous frame's end) stops the kernel, and every later call returns SW_ETIMEDOUT naming the
 * band and frame (destroy the chain and make a new one). Every wait (GPU and host) has a timeout
 * and looks at the stop flag that sw_rtc_band_destroy raises.
 *
 * Threads: one producer thread (buffer, publish) and one consumer thread (wait) may run at once;
 * stats from any thread. While the chain lives its plan refuses sw_rtc_run, and the kernel
 * holds one or two blocks on every multiprocessor: other kernels still run beside it, but CUDA
 * calls that wait for the whole device (cudaFree inside creating or destroying another plan, or
 * another band chain's create) wait for the chain to end, which its idle timeout bounds: create
 * other plans first, destroy them after. One band chain per device at a time, and a device of
 * its own: kernels of other processes time-slice with it, and its band waits can run out
 * (measured: its test failed beside five other GPU test processes).
 */
typedef struct sw_rtc_band_params {
    int32_t bands;          /* row bands per frame, 1..ny (4)                                */
    int32_t depth;          /* frame slots in the ring, 2..64 (4)                           */
    double band_timeout_us; /* a band's wait after the previous band, 1..1e7 us (2000)       */
    double idle_timeout_us; /* the first band's wait after the previous frame, >= band's
                               timeout, at most 1e9 us (1e7: 10 s)                          */
    int slopes;             /* 1: every frame's slopes also go to host memory (for
                               sw_rtc_band_wait's slopes), 0: not (0)                       */
    int32_t trace;          /* > 0: the kernel records its clock at each phase of the last
                               `trace` frames (sw_rtc_band_trace_get), 0..2^20; 0: off (0)  */
} sw_rtc_band_params;

void sw_rtc_band_params_default(sw_rtc_band_params *p);

typedef struct sw_rtc_band sw_rtc_band;

/* Validates (SW_EINVAL with a message for bad parameters or a plan that already has a chain;
 * SW_EUNSUPPORTED for a reconstructor, controller or centroid method the chain does not run, and
 * on a CPU plan or build), allocates and launches the kernel. */
sw_status sw_rtc_band_create(sw_rtc *r, const sw_rtc_band_params *p, sw_rtc_band **out);
/* Raises the stop flag, waits (bounded) for the kernel to end, frees. NULL is ignored. The
 * producer and consumer threads must have stopped calling the chain. */
void sw_rtc_band_destroy(sw_rtc_band *b);
/* Band b's pixel rows [*row0, *row0 + *rows) of the frame (either may be NULL). */
sw_status sw_rtc_band_rows(const sw_rtc_band *b, int32_t band, int32_t *row0, int32_t *rows);
/* Where frame `frame` (1, 2, ...) band `band` is to be written: *data = its first row in the
 * ring (pinned host memory), rows *stride bytes apart (width x pixel size). SW_ERANGE when the
 * frame's slot is still in use (frame - depth not done: an overrun), SW_EINVAL for a band or
 * frame out of range. */
sw_status sw_rtc_band_buffer(sw_rtc_band *b, int64_t frame, int32_t band, void **data,
                             size_t *stride);
/* Band `band` of frame `frame` is complete: the release store of its flag. It must be the band
 * after the last one published (band 0 of frame f + 1 after the last band of f; the first:
 * band 0 of frame 1), else SW_EINVAL (counted, nothing stored). */
sw_status sw_rtc_band_publish(sw_rtc_band *b, int64_t frame, int32_t band);
/* Waits (spinning, at most timeout_us) until frame `frame` is done, then copies its commands
 * (nact floats) and, when the chain was made with slopes = 1, its slopes (2 ns floats; NULL
 * skips either). SW_ETIMEDOUT (counted) when the time runs out or the kernel stopped on a
 * missing band; SW_ERANGE when the frame's slot has been, or may be being, overwritten since
 * (frame + depth done, or its band 0 published when slopes are copied, its last band otherwise). */
sw_status sw_rtc_band_wait(sw_rtc_band *b, int64_t frame, double timeout_us, float *commands,
                           float *slopes);

typedef struct sw_rtc_band_stats {
    int64_t done;         /* the last frame done                                       */
    int64_t out_of_order; /* publish calls refused                                     */
    int64_t overruns;     /* buffer calls refused: the slot still in use               */
    int64_t timeouts;     /* waits that ran out of time, and missing bands              */
    int64_t missed_frame; /* the frame the kernel stopped on (0: none)                  */
    int32_t missed_band;  /* its band (-1: none)                                       */
    int32_t blocks;       /* the persistent kernel's blocks                            */
} sw_rtc_band_stats;

void sw_rtc_band_get_stats(const sw_rtc_band *b, sw_rtc_band_stats *s);
/* The last frame done (0: none; -1 for NULL): one acquire load, no error machinery (a producer
 * may spin on it before sw_rtc_band_buffer to wait for a slot). */
int64_t sw_rtc_band_done(const sw_rtc_band *b);

/* With params.trace > 0 the kernel stamps its clock (%globaltimer, ns since an arbitrary epoch)
 * at each phase of a frame: */
typedef struct sw_rtc_band_trace {
    int64_t frame;
    uint64_t band0_flag_ns;   /* band 0's flag seen (the block of its first lenslet row)    */
    uint64_t last_flag_ns;    /* the last band's flag seen (the block of its first row)     */
    uint64_t last_copied_ns;  /* that row's pixels in shared memory                         */
    uint64_t last_counted_ns; /* the last band's slopes all counted (the last block to count) */
    uint64_t last_seen_ns;    /* that count seen by block 0 (start of its last band's GEMV)  */
    uint64_t commands_ns;     /* every block's commands written (the last to count them)    */
    uint64_t done_ns;         /* after the system fence and the done flag's store           */
} sw_rtc_band_trace;
/* Frame `frame`'s stamps, while it is among the last params.trace frames done. SW_EINVAL
 * without a trace, SW_ERANGE when the frame is not done or no longer recorded. The kernel tags
 * an entry after the done word, so a frame just done may wait a moment (SW_ETIMEDOUT after
 * 10 ms). */
sw_status sw_rtc_band_trace_get(const sw_rtc_band *b, int64_t frame, sw_rtc_band_trace *t);
/* Relates the kernel's clock to CLOCK_MONOTONIC: round trips through mapped memory (the kernel
 * answers while it waits for band 0 of the next frame: call it when every published frame is
 * done), the shortest kept. *offset_ns = GPU clock - CLOCK_MONOTONIC (ns) at its midpoint,
 * *rtt_ns = that round trip (the offset's error is at most half of it). Needs params.trace > 0
 * (SW_EINVAL); SW_ETIMEDOUT when the kernel does not answer within 100 ms. */
sw_status sw_rtc_band_clock(sw_rtc_band *b, int64_t *offset_ns, int64_t *rtt_ns);

/* ============================================== the real-time chain over several GPUs (NCCL) */

/*
 * The MVM chain of sw_rtc split over the GPUs of one node, through NCCL, the NVIDIA Collective
 * Communications Library (one process, one thread driving every GPU inside ncclGroupStart /
 * ncclGroupEnd; the communicators, one per GPU, made once by ncclCommInitAll and kept for the
 * plan's life; one stream per GPU, the context's stream on GPU 0). GPU 0 (devices[0], the
 * context's device) drives the mirror. Per frame:
 *   1. GPU 0: the frame copied in, the centroid stage (the same plan and kernel as sw_rtc's);
 *   2. ncclBroadcast of the 2 ns slopes (FP32) from GPU 0 to every GPU;
 *   3. GPU i holds rows row0_i .. row0_i + rows_i - 1 of the control matrix (the commands are
 *      split, the slopes are not: rows_i = nact / N, the first nact % N GPUs one more), FP32
 *      or FP16 (sw_rtc_params.fp16), and the controller's state u of those commands; it runs
 *      sw_rtc's own GEMV on them: u_i = clip(keep u_i + g C_i s) (cuBLAS sgemv with alpha = g,
 *      beta = keep and the clip kernel, or the FP16 kernel with the update as its epilogue).
 *      The integrator and the leaky integrator act command by command, so each GPU runs the
 *      controller of its own commands;
 *   4. the command slices gathered into GPU 0's command buffer (ncclSend from GPU i, ncclRecv on
 *      GPU 0 at offset row0_i, all in one group), and copied to pinned host memory.
 * Each command is the same dot product over the same slopes as in sw_rtc (rows are split, not
 * columns), by the same kernel: FP16 commands should be bit-identical to sw_rtc's on a GPU of
 * the same kind (the FP16 kernel treats every row alike), FP32 ones too when cuBLAS picks the
 * same sgemv kernel for the smaller row count; otherwise they differ by a reordering of each
 * row's sum (|du| <= 2 gamma_n g sum_j |C_aj s_j| per frame, gamma_n = n 2^-24 / (1 - n 2^-24),
 * n = 2 ns, carried through the controller). tests/gpu/test_gpu_loop_rtc_multi.c reports which.
 * split = SW_RTC_MULTI_COLUMNS, the alternative: GPU i takes a band of whole lenslet rows (about
 * ns / N valid lenslets) and its own context and centroid plan (the geometry re-based on the
 * band's first pixel row); per frame each GPU copies its band's frame rows in (N copies over N
 * host links) and centroids them, computes the partial commands r_i = C[:, its slopes] s_i over
 * all nact commands (the columns of both axes of its slopes, the same GEMV without the update),
 * ncclReduce sums them into GPU 0, which runs the integrator / leaky update (sw_rtc's update
 * kernel) and copies the commands out (frames in pinned memory let the N copies overlap; a
 * pageable frame is copied band after band). Each command's sum is split across the GPUs, so it
 * agrees with sw_rtc's within the same 2 gamma_n g sum_j |C_aj s_j| per frame, never bit for bit by
 * design. A geometry whose lenslet edges (floor(y0 + pitch i)) move when re-based on a band's
 * row (non-integer y0 or pitch) is refused with SW_EUNSUPPORTED, as is a mask whose rows with
 * valid lenslets are fewer than the GPUs (SW_EINVAL).
 * graph = 1: steps 1 (after the frame's copy) to 4 are captured at create into ONE CUDA graph
 * spanning every GPU (the other streams forked from and joined to GPU 0's by events), launched
 * with one cudaGraphLaunch (NCCL >= 2.9 lets its calls be captured; NCCL warns that launching
 * several per-GPU graphs from one thread may deadlock, hence one graph); when the capture or
 * the instantiation fails the plan keeps plain launches (sw_rtc_multi_graph says which).
 * NCCL reads its settings from the environment when the communicators are made: machines whose
 * NVLink multicast (NVLS) must stay off need NCCL_NVLS_ENABLE=0 set before sw_rtc_multi_create
 * (the benchmark and the test set it when it is unset).
 * Supported: recon MVM, controller INTEGRATOR or LEAKY (a clip, and the unseen-mode filter,
 * folded into C as sw_rtc does); PI and SABRE give SW_EUNSUPPORTED. No telemetry ring
 * (telemetry is ignored). A build without NCCL returns SW_EUNSUPPORTED ("built without NCCL").
 * NCCL failures give SW_ECUDA with NCCL's message.
 */
typedef struct sw_rtc_multi_params {
    int32_t ndevices;       /* GPUs, 1..16 (1)                                                   */
    const int32_t *devices; /* ndevices distinct CUDA ordinals, devices[0] the context's device;
                               NULL: the context's device, then the next ordinals in turn      */
    int graph;              /* 1: one CUDA graph over all GPUs (plain launches when the capture
                               fails); 0: plain launches (1)                                   */
    int split;              /* SW_RTC_MULTI_ROWS (the commands; default) or SW_RTC_MULTI_COLUMNS
                               (the slopes: bands of lenslet rows, each GPU centroiding its own) */
} sw_rtc_multi_params;

enum { SW_RTC_MULTI_ROWS = 0, SW_RTC_MULTI_COLUMNS = 1 };

void sw_rtc_multi_params_default(sw_rtc_multi_params *m); /* 1 GPU, NULL, graph 1, ROWS */

typedef struct sw_rtc_multi sw_rtc_multi;

/* p as for sw_rtc_create on a CUDA context (ctx's device is GPU 0). SW_EINVAL for bad
 * parameters or devices, SW_EUNSUPPORTED (see above), SW_ECUDA / SW_ENOMEM from CUDA and NCCL. */
sw_status sw_rtc_multi_create(sw_context *ctx, const sw_rtc_params *p, const sw_rtc_multi_params *m,
                              sw_rtc_multi **out);
void sw_rtc_multi_destroy(sw_rtc_multi *r);    /* NULL is ignored */
sw_status sw_rtc_multi_reset(sw_rtc_multi *r); /* controller state to 0 on every GPU */
/* One frame, as sw_rtc_run (host, pinned or GPU 0 device memory); finished when it returns. */
sw_status sw_rtc_multi_run(sw_rtc_multi *r, const sw_image *frame, float *commands, float *slopes);
const float *sw_rtc_multi_commands(const sw_rtc_multi *r); /* nact floats, pinned, the plan's */
double sw_rtc_multi_last_us(const sw_rtc_multi *r);        /* host wall time of the last run */
int32_t sw_rtc_multi_slopes(const sw_rtc_multi *r);        /* ns (several sensors: their sum) */
/* 1 when the runs launch one CUDA graph, 0 plain launches; -1 for NULL. */
int sw_rtc_multi_graph(const sw_rtc_multi *r);
/* The GPUs, and GPU i's first command and command count (columns: 0 and nact, every GPU sums
 * its part of every command); any pointer may be NULL; SW_EINVAL for i out of range. */
sw_status sw_rtc_multi_device(const sw_rtc_multi *r, int32_t i, int32_t *ordinal, int32_t *row0,
                              int32_t *rows);
int32_t sw_rtc_multi_devices(const sw_rtc_multi *r); /* N, 0 for NULL */

/*
 * The stages one by one, for the benchmark's model of the latency: each stage is queued alone
 * `reps` times (all streams waited for between two), timed with CUDA events on every GPU's stream
 * and the slowest GPU kept; us[] receives the medians, microseconds:
 *   SW_RTC_MULTI_T_CENTROID  the frame's copy (host to GPU 0) and the centroid stage (columns:
 *                            every GPU's band, the slowest GPU's);
 *   SW_RTC_MULTI_T_BCAST     the slopes' ncclBroadcast (columns: none, 0);
 *   SW_RTC_MULTI_T_MVM       the GEMV with the controller's update (the slowest GPU's; columns:
 *                            the partial commands);
 *   SW_RTC_MULTI_T_GATHER    the commands' gather (ncclSend / ncclRecv group; columns: the
 *                            ncclReduce and the update on GPU 0);
 *   SW_RTC_MULTI_T_COPY      the commands to pinned host memory.
 * frame as for sw_rtc_multi_run. It changes the controller's state: reset afterwards.
 */
enum {
    SW_RTC_MULTI_T_CENTROID = 0,
    SW_RTC_MULTI_T_BCAST = 1,
    SW_RTC_MULTI_T_MVM = 2,
    SW_RTC_MULTI_T_GATHER = 3,
    SW_RTC_MULTI_T_COPY = 4,
    SW_RTC_MULTI_T_STAGES = 5
};
sw_status sw_rtc_multi_profile(sw_rtc_multi *r, const sw_image *frame, int reps,
                               double us[SW_RTC_MULTI_T_STAGES]);

/*
 * Several wavefront sensors feeding one reconstructor: each sensor's frame centroided on its own
 * GPU, all their slopes multiplied by one control matrix, one controller. It is the split by
 * columns with each GPU's share made of whole sensors instead of a band of one frame: GPU i
 * (devices[i]) takes the sensors k = i, i + N, i + 2 N, ... (k mod N = i; N = m->ndevices, at most
 * nwfs, so that every GPU has one); per frame each GPU copies its sensors' frames in and centroids
 * each with the sensor's own plan (wfs[k]: its geometry, frame size and type, conditioning), then
 * computes its partial commands r_i = C[:, its sensors' slopes] s_i over all nact commands;
 * ncclReduce sums them into GPU 0, which runs the integrator / leaky update and copies the
 * commands out. With N = 1 every sensor is on GPU 0 and no NCCL call is made.
 * The slope vector is the sensors' slopes in turn, each as sw_rtc orders one sensor's (its x
 * block, then its y block): s = [x_0, y_0, x_1, y_1, ...], 2 NS floats, NS = ns_0 + ns_1 + ...;
 * p->cm is nact x 2 NS row-major, its columns in that order (the unseen-mode filter folded in as
 * for one sensor). p is read as by sw_rtc_multi_create except p->centroid, which is not read
 * (wfs[k] takes its place; slope_layout SW_SLOPES_BLOCKS each), and m likewise except m->split.
 * Each command's sum is split across the sensors' GPUs, so plans over different GPU counts (and
 * the stacked product computed otherwise: each sensor's sw_rtc slopes times C) agree within
 * 2 gamma_n g sum_j |C_aj s_j| per frame (n = 2 NS), not bit for bit. Graphs as above (one graph
 * over every GPU, each GPU's centroid kernels in it). nwfs 1..64; fewer sensors than GPUs,
 * SW_EINVAL; otherwise as sw_rtc_multi_create (the parameters are checked on the host first, in
 * every build).
 */
sw_status sw_rtc_multi_create_wfs(sw_context *ctx, const sw_rtc_params *p,
                                  const sw_centroid_params *wfs, int32_t nwfs,
                                  const sw_rtc_multi_params *m, sw_rtc_multi **out);
/* One frame per sensor, frames[k] sensor k's, each in host, pinned or device memory (any GPU's:
 * one on the sensor's own GPU is copied there without crossing a link); finished when it returns.
 * commands: nact floats; slopes: 2 NS floats in the plan's order (NULL skips either). A plan of
 * sw_rtc_multi_create takes one frame here too; sw_rtc_multi_run and sw_rtc_multi_profile refuse
 * (SW_EINVAL) a plan of more than one sensor. */
sw_status sw_rtc_multi_run_wfs(sw_rtc_multi *r, const sw_image *const frames[], float *commands,
                               float *slopes);
/* sw_rtc_multi_profile with one frame per sensor (SW_RTC_MULTI_T_CENTROID: every GPU's frame
 * copies and centroids, the slowest GPU's; SW_RTC_MULTI_T_GATHER: the reduction and the update). */
sw_status sw_rtc_multi_profile_wfs(sw_rtc_multi *r, const sw_image *const frames[], int reps,
                                   double us[SW_RTC_MULTI_T_STAGES]);
/* Frames per run: nwfs, 1 for a plan of sw_rtc_multi_create; 0 for NULL. */
int32_t sw_rtc_multi_nwfs(const sw_rtc_multi *r);
/* Sensor k's GPU (i of sw_rtc_multi_device; -1 for the one frame of a plan split by columns,
 * which every GPU takes a band of), its first slope in the slope vector (its x block's; its y
 * block's is slope0 + nslopes) and its slopes per axis; any pointer may be NULL; SW_EINVAL for k
 * out of range. */
sw_status sw_rtc_multi_wfs(const sw_rtc_multi *r, int32_t k, int32_t *gpu, int32_t *slope0,
                           int32_t *nslopes);

/* NCCL's version as ncclGetVersion gives it (e.g. 22803 for 2.28.3) in a build with NCCL; 0
 * in a build without (or when the library cannot tell). */
int sw_nccl_version(void);

/* ================================================================== closed-loop simulator */

typedef enum sw_loop_recon {
    SW_LOOP_MVM = 0,           /* interaction matrix by push-pull, truncated-SVD control matrix  */
    SW_LOOP_SABRE_GLOBAL = 1,  /* global SABRE (CPU) + global projection (Eq. 13)                 */
    SW_LOOP_DSABRE_GLOBAL = 2, /* D-SABRE + global projection of its extended lattice (Eq. 13)    */
    SW_LOOP_DSABRE_LOCAL = 3,  /* D-SABRE + distributed projection (Eq. 14-16), each window whole
                                  with one shared matrix (Brunner et al. Fig. 14's "MM")         */
    SW_LOOP_DSABRE_LOCAL_PUPIL = 4 /* D-SABRE + distributed projection on the pupil only, a matrix
                                      per partition (section 4.A; Fig. 14's "MV";
                                      SW_RTC_PROJ_LOCAL_PUPIL)                                  */
} sw_loop_recon;

/* mvm|sabre|dsabre-global|dsabre-local|dsabre-local-pupil */
const char *sw_loop_recon_string(sw_loop_recon r);
sw_status sw_loop_recon_parse(const char *text, sw_loop_recon *out);

typedef struct sw_loop_params {
    /* telescope and sensor */
    int32_t nx;               /* lenslets per side (32)                                         */
    double diameter_m;        /* D (12)                                                          */
    int square_pupil;         /* 1: the whole square array is lit (Brunner Fig. 11) (1)          */
    double obscuration;       /* circular pupil only: central obscuration, fraction of D (0)    */
    int32_t px_per_lenslet;   /* detector pixels per lenslet side (8)                           */
    double wfs_wavelength_um; /* (0.7)                                                           */
    double nyquist_px;        /* lambda f / d in pixels at the WFS wavelength (2)                */
    sw_sh_model model;        /* DIFFRACTION (Brunner et al.'s OOMAO SH) or GEOMETRIC            */
    double magnitude;         /* guide star; NAN: noise-free (NAN)                                */
    double zero_point;        /* photons s^-1 m^-2 at magnitude 0 (9e9)                          */
    double throughput;        /* (0.5)                                                           */
    double read_noise_e;      /* (2), only with a magnitude                                       */
    double threshold_e;       /* centroid threshold subtracted, e- (0: 3 read_noise when noisy);
                                 the threshold in force is the larger of it and threshold_peak's  */
    /* atmosphere */
    sw_turbulence turbulence; /* r0 0.15 m at 0.5 um, L0 25 m (finite: the infinite screen)      */
    double wind_m_s;          /* (2.778 = 10 km/h)                                               */
    double rate_hz;           /* frame rate (500)                                                 */
    uint64_t seed;            /* screen and noise seed (1)                                        */
    int32_t samples;          /* phase samples per lenslet side (8)                               */
    /* mirror and reconstruction */
    sw_dm_params dm; /* nx, ny set from nx; influence and coupling used                  */
    sw_loop_recon recon;
    double cm_condition; /* MVM: max condition number (30)                                   */
    double poke_um;      /* MVM: push-pull amplitude, um (0.05)                              */
    int32_t partitions;  /* D-SABRE k (4)                                                    */
    int32_t overlap;     /* D-SABRE OL (1)                                                   */
    /* control */
    sw_controller_params controller; /* kind, gain, leak, PI gains (nact filled by the sim)       */
    int32_t delay; /* extra frames between a measurement and its command (0)           */
    /* science */
    double science_wavelength_um; /* (1.25, J band)                                              */
    int32_t warmup; /* frames before the long exposure starts (20)                      */
    /* control, continued */
    int unseen; /* SW_UNSEEN_* modes filtered out of every reconstruction, over the valid
                   lenslets' corners (sw_unseen_modes): PISTON | WAFFLE (default), 0: none    */
    int modal;  /* PI's modal basis: 0 one mode per actuator, 1 the interaction matrix's kept
                   singular modes (MVM only), 2 the mirror's KL modes (sw_dm_kl_modes over the
                   loop's pupil, sampled 4 to 1 times a lenslet to stay within 4096 samples: up
                   to ~70 x 70 lenslets, and turbulence; orthonormalised over the actuators in
                   order) (0);
                   ignored when controller.modes is given                                       */
    double kp;  /* PI: proportional gain of every mode (0), when controller.kp is NULL; the
                   integral gain of every mode is controller.gain (or controller.ki)            */
    int32_t gain_window; /* PI with MVM and kp = 0: frames of closed-loop telemetry (the modes'
                            measured residual B^T C s, after the warm-up) per round of modal gain
                            optimisation (sw_modal_gains), the new ki set between frames;
                            16..65536, 0: gains fixed (0); >= 1024 advised (a window of a few
                            hundred frames at 500 Hz cannot resolve the turbulence's few hertz
                            and chooses gains far too low). The closed-loop estimator, not the
                            pseudo-open-loop one (sw_modal_gains_pol on B^T C (s - D u)):
                            in test_loop_long's loop that one chose ki 0.45-0.82 and a 134 nm
                            residual, this one ki 0.80-1.49 and 117 nm (fixed: 147 nm); the
                            likely cause, not shown: D u, from the push-pull interaction
                            matrix, differs from what the mirror took out of a CoG sensor
                            under turbulence                                                   */
    /* sensor, continued */
    double threshold_peak; /* 0 <= f < 1: the centroid threshold is at least f x the peak pixel of
                              the noise-free, flat-wavefront spot at the loop's flux (0: the
                              threshold is threshold_e's alone) (0: a threshold costs the closed
                              loop accuracy, see loopsim.c's "Centroids")                       */
    int slope_calibration; /* SABRE / D-SABRE: the slopes divided by the sensor's slope gain,
                              measured at create (sw_loop_slope_gain) (1); 0: not             */
    int negative_filter;   /* SABRE / D-SABRE: the modes the closed loop pushes the wrong way
                              filtered out too: 1 with at most 600 actuators (default), 2 at any
                              size, 0 never. At create the loop measures its interaction matrix D
                              (as MVM's), forms the command-to-command map M = F R D (R the
                              reconstructor, F the unseen modes' filter) and adds the eigenvectors
                              of the eigenvalues whose real part is below -1e-3 x the median
                              |eigenvalue| (the leaky integrator: below -leak / gain too; the
                              leak holds the others) to the filter (orthonormalised; at most 32
                              modes in all, the most negative first): an integrator
                              u <- u - g M u runs such a mode away (sw_loop_negative_modes).
                              Square pupils with the global projection have two marginal ones
                              (-0.001 to -0.004). The cost at create is about MVM's calibration,
                              O(nact^3) (the pokes, the reconstructions, dgeev): on one core of
                              the development machine 0.3 s (geometric sensor) to 0.8 s
                              (diffraction) at 289 actuators, 4.5 to 12 s at 1089. spotwave sim
                              bench --rtc-config hands them to spotwave rtc as filter.fits     */
} sw_loop_params;

/* The Brunner et al. section 4.B setting: 32 x 32, D = 12 m, square pupil, DIFFRACTION, noise-free,
 * r0 = 0.15 m at 0.5 um, L0 = 25 m, 10 km/h, 500 Hz, Gaussian coupling 0.3, D-SABRE 4 x 4 with the
 * distributed projection, integrator gain 0.5, J band, 20 warm-up frames; piston and waffle
 * filtered. */
void sw_loop_params_default(sw_loop_params *p);

/* What one simulated frame gives (after the frame's measurement and command). */
typedef struct sw_loop_frame {
    int64_t frame;         /* 1, 2, ...                                                      */
    double turbulence_nm;  /* RMS of the turbulence over the pupil (piston removed), nm      */
    double residual_nm;    /* RMS of the residual W - phi_u seen by the science camera, nm   */
    double strehl;         /* short-exposure Strehl: peak of this frame's PSF / diffraction peak */
    double marechal;       /* exp(-(2 pi residual / lambda_science)^2)                         */
    double command_rms_um; /* RMS of the commands applied                                      */
} sw_loop_frame;

typedef struct sw_loop sw_loop;

/*
 * Builds the system: the infinite screen (CPU), the SH simulator and the detector, the RTC plan of
 * the chosen reconstructor (MVM: measures the interaction matrix through this simulator's own SH
 * model and centroids, noise-free, then the control matrix), the DM shaper, the science PSF (FFT of
 * twice the pupil grid: cuFFT on CUDA, FFTW on the CPU). SW_EINVAL with a message for bad
 * parameters. Everything runs on the context's backend except the screen (CPU) and global SABRE.
 */
sw_status sw_loop_create(sw_context *ctx, const sw_loop_params *p, sw_loop **out);
void sw_loop_destroy(sw_loop *l); /* NULL is ignored */
/* Runs one frame: the screen moves by wind / rate; the DM shape of the command due now (delay) is
 * subtracted; the SH frame is rendered (noise added) and put through the RTC; the science PSF of
 * the residual is formed and added to the long exposure when past the warm-up. After a failed
 * step the simulator refuses further steps (SW_EINVAL): destroy it and make a new one. */
sw_status sw_loop_step(sw_loop *l, sw_loop_frame *out);
/* Long-exposure Strehl: peak of the summed PSFs since the warm-up / (frames x diffraction peak);
 * NaN before any. */
double sw_loop_long_strehl(const sw_loop *l);
/* Best fit of the current turbulence by the mirror (the fitting error, nm): the residual of the
 * least-squares projection of the pupil's phase samples onto the influence functions. Dense
 * normal equations: SW_EUNSUPPORTED beyond 8100 actuators (nx > 89). */
sw_status sw_loop_fitting_error(sw_loop *l, double *rms_nm);
/* The control matrix's kept modes (MVM), -1 otherwise. */
int32_t sw_loop_modes(const sw_loop *l);
/* The modes of negative closed-loop gain the loop filters (negative_filter): their count, or -1
 * when it did not look (MVM, whose R D = V V^T has none; negative_filter 0; negative_filter 1
 * with more than 600 actuators). min_gain (may be NULL): the smallest real part of M's eigenvalues
 * before the filter, in units of the median |eigenvalue| (about 1 for a calibrated sensor), NaN
 * when it did not look. */
int32_t sw_loop_negative_modes(const sw_loop *l, double *min_gain);
/* Commands of the last frame at the stroke limit (|u| = controller.clip), of the nact
 * actuators; 0 without a clip (or before the first frame). The sensor's detector has no full
 * well in this simulator (f32 electrons), so the mirror's stroke is where the loop saturates. */
int32_t sw_loop_clipped(const sw_loop *l);
/* Actuators of the simulated mirror ((nx + 1)^2); 0 for NULL. */
int32_t sw_loop_actuators(const sw_loop *l);
/*
 * The sensor's slope gain, measured at create whatever the reconstructor: tilts of 1/16, 1/8 and
 * 1/4 lambda/d along x, then y (the small signals of a closed loop), pushed and pulled, rendered
 * noise-free through the loop's own SH model, flux and centroid conditioning; per tilt the mean
 * measured slope over the valid lenslets over the true one, and gain = the mean over the three
 * tilts, per axis: gain[0] along x, gain[1] along y. The centre of gravity of a diffraction spot
 * whose wings are cut off at the lenslet's edge responds below 1: 0.995 for the default sensor
 * (8 px lenslets, lambda f / d = 2 px: the edge falls on a zero of the spot's sinc^2), 0.81 with
 * 10 px lenslets or lambda f / d = 2.5 px, and less for larger motions (0.93 at 1/2 lambda/d; 0.61
 * on the open-loop turbulence of the 16 x 16, D = 12 m loop). Returns 1 when the reconstructor's
 * slopes are divided by the mean of the two (SABRE and D-SABRE with slope_calibration = 1: they
 * see unit-gain slopes), 0 when not: calibration off; MVM, whose interaction matrix, measured
 * through the same sensor, holds the gain already; or a gain outside 0.5..2, not taken as a
 * calibration (a faint star's noise-free spot entirely below the threshold measures 0). NULL: NaN
 * gains, 0.
 */
int sw_loop_slope_gain(const sw_loop *l, double gain[2]);
/* The centroid threshold in force, e- subtracted (0: none; sw_loop_params.threshold_e and
 * threshold_peak). NaN for NULL. */
double sw_loop_threshold_e(const sw_loop *l);
/* Phase maps of the last frame (pupil grid, samples x nx per side, um; NaN outside the pupil):
 * any may be NULL. */
sw_status sw_loop_maps(const sw_loop *l, int32_t *side, float *turbulence, float *correction,
                       float *residual);
/* The commands of the last sw_loop_step (u_k, nact floats owned by the loop, valid until the
 * next step); NULL before the first. */
const float *sw_loop_commands(const sw_loop *l);
/* PI: the integral gains per mode now (owned by the loop; NULL for other controllers), their
 * count in *nmodes and the rounds of modal gain optimisation run so far in *rounds (either may
 * be NULL). */
const float *sw_loop_gains(const sw_loop *l, int32_t *nmodes, int32_t *rounds);

/* ---------------------------------------------- the simulator as a bench's atmosphere and camera
 *
 * The simulated bench (`spotwave sim bench`) runs the atmosphere, the mirror and the camera of
 * this simulator in one process and the real-time chain in another, joined by image streams
 * (stream.h). These calls give it the two halves of sw_loop_step.
 */

/*
 * The next frame as the camera sees it with `commands` (nact floats, host, finite) on the mirror:
 * the screen moves as in sw_loop_step, the mirror's shape of `commands` is subtracted, the SH frame
 * is rendered with the frame's own noise draw (the same as sw_loop_step's frame of that number),
 * and the science PSF is formed (*out as sw_loop_step's, may be NULL). `frame` (host, width x
 * height floats, row-major, electrons: sw_loop_sensor gives the size) receives the frame. The
 * loop's reconstructor does not run, and p->delay is not used: the caller's chain gives the
 * commands. A chain equal to the loop's own (sw_loop_chain) fed back with no delay (frame k sees
 * u_{k-1}) reproduces sw_loop_step's frames and commands.
 */
sw_status sw_loop_camera(sw_loop *l, const float *commands, float *frame, sw_loop_frame *out);
/* The sensor's frame size in pixels and its slopes per axis (any may be NULL). */
void sw_loop_sensor(const sw_loop *l, int32_t *width, int32_t *height, int32_t *ns);
/* The chain the loop runs (sw_loop_chain): what sw_rtc needs to run it in another process. */
typedef struct sw_loop_chain_info {
    sw_centroid_params centroid; /* geometry, f32 frames on the host, the threshold          */
    int32_t nact;                /* commands, (nx + 1)^2                                      */
    sw_loop_recon recon;         /* MVM or DSABRE_LOCAL                                       */
    const float *cm;             /* MVM: nact x 2 ns row-major                                 */
    sw_sabre_params sabre;       /* DSABRE_LOCAL: the plan's parameters                        */
    double slope_scale;          /* DSABRE_LOCAL: pixel slopes to radians                      */
    sw_dm_params dm;             /* DSABRE_LOCAL: the mirror the projection fits               */
    int unseen;                  /* the loop's SW_UNSEEN_* filter (sw_unseen_modes of the mask) */
    int32_t nfilter;             /* the controller's filter: the unseen modes, then those of
                                    negative gain (negative_filter), nact x nfilter             */
    const float *filter;
} sw_loop_chain_info;

/* The chain of an MVM or DSABRE_LOCAL loop (SW_EUNSUPPORTED for the others: their projections
 * depend on the pupil's footprint (DSABRE_GLOBAL, DSABRE_LOCAL_PUPIL), or run on the host).
 * Pointers (the valid masks, cm, filter) into the loop and are valid while it lives. For
 * DSABRE_LOCAL, sw_rtc_params_sabre with SW_RTC_PROJ_LOCAL rebuilds the loop's projection. */
sw_status sw_loop_chain(const sw_loop *l, sw_loop_chain_info *out);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_LOOP_H */
