/*
 * The controllers on the CPU (loop.h, seed 000 section 6: one regulator per actuator, or one PI
 * regulator per wavefront mode). The per-command and per-mode updates are loop_internal.h's
 * sw_loop_update and sw_loop_pi, which the GPU chain (rtc_cuda.cu) uses too. PI's modal
 * projections e = B^T r and u = B v are float GEMVs (OpenBLAS here, cuBLAS there).
 */
#include "loop/loop_internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *sw_controller_kind_string(sw_controller_kind k)
{
    switch (k) {
    case SW_CTRL_INTEGRATOR: return "integrator";
    case SW_CTRL_LEAKY: return "leaky";
    case SW_CTRL_PI: return "pi";
    }
    return "unknown";
}

sw_status sw_controller_kind_parse(const char *text, sw_controller_kind *out)
{
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "controller: NULL %s", !text ? "text" : "out");
    for (int i = 0; i <= (int)SW_CTRL_PI; i++)
        if (strcasecmp(text, sw_controller_kind_string((sw_controller_kind)i)) == 0) {
            *out = (sw_controller_kind)i;
            return SW_OK;
        }
    return sw_fail(NULL, SW_EINVAL, "controller: unknown kind '%s' (integrator, leaky or pi)",
                   text);
}

/*
 * Stability of the integrator with a d-frame delay. With r_k = w_k - u_{k-d} and
 * u_k = a u_{k-1} + g r_k (a = 1 - leak), the closed loop's transfer function from w to u has the
 * denominator 1 - a z^-1 + g z^-d, i.e. the characteristic polynomial z^d - a z^(d-1) + g. At
 * g = 0 its roots are a and 0 (inside the unit circle); as g grows a root first crosses the
 * circle at z = e^{iw}, where g = -e^{iw(d-1)} (e^{iw} - a) must be real and positive:
 *     |g| = |e^{iw} - a|  and  w (d - 1) + arg(e^{iw} - a) = pi.
 * For a = 1: e^{iw} - 1 = 2 sin(w/2) e^{i(pi + w)/2}, so w (d - 1) + (pi + w) / 2 = pi gives
 * w = pi / (2d - 1) and g_max = 2 sin(w / 2) = 2 sin(pi / (2 (2d - 1))) (d = 1: z = 1 - g, g < 2;
 * d = 2: z^2 - z + g, g < 1). For a < 1 the left side of the phase condition grows with w from 0
 * (w = 0) to d pi (w = pi), so its root is found by bisection. tests/unit/test_loop_control.c
 * checks both against the scalar recursion itself.
 */
double sw_controller_max_gain(int32_t delay_frames, double leak)
{
    if (delay_frames < 1 || !(leak >= 0.0 && leak < 1.0))
        return NAN;
    const double pi = 3.14159265358979323846, d = (double)delay_frames, a = 1.0 - leak;
    if (leak == 0.0)
        return 2.0 * sin(pi / (2.0 * (2.0 * d - 1.0)));
    double lo = 0.0, hi = pi;
    for (int i = 0; i < 200; i++) {
        const double w = 0.5 * (lo + hi);
        const double phase = w * (d - 1.0) + atan2(sin(w), cos(w) - a);
        if (phase < pi)
            lo = w;
        else
            hi = w;
    }
    const double w = 0.5 * (lo + hi);
    return hypot(cos(w) - a, sin(w));
}

void sw_controller_params_default(sw_controller_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->kind = SW_CTRL_INTEGRATOR;
    p->nact = 0;
    p->gain = 0.5;
    p->leak = 0.01;
    p->nmodes = 0;
    p->modes = NULL;
    p->kp = NULL;
    p->ki = NULL;
    p->clip = 0.0;
    p->nfilter = 0;
    p->filter = NULL;
}

void sw_controller_destroy(sw_controller *c)
{
    if (!c)
        return;
    free(c->modes);
    free(c->kp);
    free(c->ki);
    free(c->u);
    free(c->integ);
    free(c->e);
    free(c->filter);
    free(c->zt);
    free(c->rf);
    free(c->uc);
    free(c);
}

/* Index of the first non-finite of n floats, or -1. */
static int64_t first_nonfinite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return -1;
}

static sw_status check_params(sw_context *ctx, const sw_controller_params *p)
{
    if (p->kind != SW_CTRL_INTEGRATOR && p->kind != SW_CTRL_LEAKY && p->kind != SW_CTRL_PI)
        return sw_fail(ctx, SW_EINVAL, "controller: unknown kind %d", (int)p->kind);
    if (p->nact < 1)
        return sw_fail(ctx, SW_EINVAL, "controller: %d commands (>= 1)", (int)p->nact);
    if (!isfinite(p->gain))
        return sw_fail(ctx, SW_EINVAL, "controller: gain %g is not finite", p->gain);
    if (p->kind == SW_CTRL_LEAKY && !(p->leak >= 0.0 && p->leak < 1.0))
        return sw_fail(ctx, SW_EINVAL, "controller: leak %g is not in [0, 1)", p->leak);
    if (!(isfinite(p->clip) && p->clip >= 0.0))
        return sw_fail(ctx, SW_EINVAL, "controller: clip %g is not finite and >= 0 (0: none)",
                       p->clip);
    if (p->nfilter < 0 || p->nfilter > p->nact || (p->nfilter > 0 && !p->filter))
        return sw_fail(ctx, SW_EINVAL, "controller: %d filtered modes%s (0..nact = %d)",
                       (int)p->nfilter, p->nfilter > 0 && !p->filter ? " but no filter" : "",
                       (int)p->nact);
    if (p->nfilter > 0 && first_nonfinite(p->filter, (int64_t)p->nact * p->nfilter) >= 0)
        return sw_fail(ctx, SW_EINVAL, "controller: the filter has a non-finite entry");
    if (p->kind != SW_CTRL_PI)
        return SW_OK;
    const int32_t nm = p->modes ? p->nmodes : p->nact;
    if (p->modes && (p->nmodes < 1 || p->nmodes > p->nact))
        return sw_fail(ctx, SW_EINVAL, "controller: %d modes for %d commands (1..nact)",
                       (int)p->nmodes, (int)p->nact);
    if (p->modes && first_nonfinite(p->modes, (int64_t)p->nact * nm) >= 0)
        return sw_fail(ctx, SW_EINVAL, "controller: the modal basis has a non-finite entry");
    int64_t bad = p->kp ? first_nonfinite(p->kp, nm) : -1;
    if (bad >= 0)
        return sw_fail(ctx, SW_EINVAL, "controller: kp of mode %lld is not finite", (long long)bad);
    bad = p->ki ? first_nonfinite(p->ki, nm) : -1;
    if (bad >= 0)
        return sw_fail(ctx, SW_EINVAL, "controller: ki of mode %lld is not finite", (long long)bad);
    return SW_OK;
}

sw_status sw_controller_create(sw_context *ctx, const sw_controller_params *p, sw_controller **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "controller: NULL output");
    *out = NULL;
    if (!p)
        return sw_fail(ctx, SW_EINVAL, "controller: NULL parameters");
    sw_status st = check_params(ctx, p);
    if (st != SW_OK)
        return st;

    sw_controller *c = (sw_controller *)calloc(1, sizeof *c);
    if (!c)
        return sw_fail(ctx, SW_ENOMEM, "controller: out of memory");
    c->ctx = ctx;
    c->p = *p;
    c->p.modes = NULL;
    c->p.kp = NULL;
    c->p.ki = NULL;
    const int32_t nact = p->nact;
    c->u = (float *)calloc((size_t)nact, sizeof(float));
    c->rf = (float *)calloc((size_t)nact, sizeof(float));
    int ok = c->u != NULL && c->rf != NULL;
    c->p.filter = NULL;
    if (ok && p->nfilter > 0) {
        const size_t bytes = (size_t)nact * p->nfilter * sizeof(float);
        c->filter = (float *)malloc(bytes);
        c->zt = (double *)malloc((size_t)p->nfilter * sizeof(double));
        ok = c->filter && c->zt;
        if (ok) {
            memcpy(c->filter, p->filter, bytes);
            c->p.filter = c->filter;
        }
    }
    if (ok && p->kind == SW_CTRL_PI && p->clip > 0.0)
        ok = (c->uc = (float *)malloc((size_t)nact * sizeof(float))) != NULL;
    if (p->kind == SW_CTRL_PI) {
        const int32_t nm = p->modes ? p->nmodes : nact;
        c->nmodes = nm;
        c->p.nmodes = nm;
        c->kp = (float *)malloc((size_t)nm * sizeof(float));
        c->ki = (float *)malloc((size_t)nm * sizeof(float));
        c->integ = (float *)calloc((size_t)nm, sizeof(float));
        c->e = (float *)calloc((size_t)nm, sizeof(float));
        ok = ok && c->kp && c->ki && c->integ && c->e;
        if (ok && p->modes) {
            const size_t bytes = (size_t)nact * nm * sizeof(float);
            c->modes = (float *)malloc(bytes);
            ok = c->modes != NULL;
            if (ok)
                memcpy(c->modes, p->modes, bytes);
        }
        if (ok) {
            for (int32_t i = 0; i < nm; i++) {
                c->kp[i] = p->kp ? p->kp[i] : 0.0f;
                c->ki[i] = p->ki ? p->ki[i] : (float)p->gain;
            }
            c->p.modes = c->modes;
            c->p.kp = c->kp;
            c->p.ki = c->ki;
        }
    }
    if (!ok) {
        sw_controller_destroy(c);
        return sw_fail(ctx, SW_ENOMEM, "controller: out of memory (%d commands)", (int)nact);
    }
    *out = c;
    return SW_OK;
}

void sw_controller_reset(sw_controller *c)
{
    if (!c)
        return;
    memset(c->u, 0, (size_t)c->p.nact * sizeof(float));
    if (c->integ)
        memset(c->integ, 0, (size_t)c->nmodes * sizeof(float));
}

sw_status sw_controller_step(sw_controller *c, const float *r, float *u)
{
    if (!c)
        return sw_fail(NULL, SW_EINVAL, "controller: NULL controller");
    if (!r || !u)
        return sw_fail(c->ctx, SW_EINVAL, "controller: NULL %s", !r ? "input" : "output");
    const int32_t nact = c->p.nact;
    const int64_t bad = first_nonfinite(r, nact);
    if (bad >= 0) /* before anything changes: the state stays as it was */
        return sw_fail(c->ctx, SW_ERANGE, "controller: input %lld is %s", (long long)bad,
                       isnan(r[bad]) ? "NaN" : "infinite");
    const float clip = (float)c->p.clip;
    if (c->filter) { /* 1. r' = r - Z (Z^T r) */
        sw_loop_filter(c->filter, nact, c->p.nfilter, r, c->zt, c->rf);
        r = c->rf;
    }

    if (c->p.kind != SW_CTRL_PI) {
        /* u_k = keep u_{k-1} + g r_k, keep = 1 (integrator) or 1 - leak, then the clip */
        const float gain = (float)c->p.gain;
        const float keep = c->p.kind == SW_CTRL_LEAKY ? (float)(1.0 - c->p.leak) : 1.0f;
        for (int32_t a = 0; a < nact; a++) {
            const float v = sw_loop_update(c->u[a], r[a], gain, keep, clip);
            c->u[a] = v;
            u[a] = v;
        }
        return SW_OK;
    }

    /* PI per mode: e = B^T r, v_i = kp_i e_i + ki_i I_i (I_i += e_i), u = B v, then the clip */
    const int32_t nm = c->nmodes;
    if (c->modes)
        cblas_sgemv(CblasColMajor, CblasTrans, nact, nm, 1.0f, c->modes, nact, r, 1, 0.0f, c->e, 1);
    else
        memcpy(c->e, r, (size_t)nact * sizeof(float));
    for (int32_t i = 0; i < nm; i++)
        c->e[i] = sw_loop_pi(c->e[i], c->kp[i], c->ki[i], &c->integ[i]);
    if (c->modes)
        cblas_sgemv(CblasColMajor, CblasNoTrans, nact, nm, 1.0f, c->modes, nact, c->e, 1, 0.0f,
                    c->u, 1);
    else
        memcpy(c->u, c->e, (size_t)nact * sizeof(float));
    if (c->uc)
        memcpy(c->uc, c->u, (size_t)nact * sizeof(float));
    int clipped = 0;
    for (int32_t a = 0; a < nact; a++) {
        /* the clip alone: 0 * 0 + 1 * x is x exactly */
        const float v = sw_loop_update(0.0f, c->u[a], 1.0f, 0.0f, clip);
        clipped |= v != c->u[a];
        c->u[a] = v;
        u[a] = v;
    }
    if (clipped && c->uc) {
        /* anti-windup by back-calculation: d = B^T (u_clip - u) in e's scratch, I_i += d_i / ki_i
         */
        for (int32_t a = 0; a < nact; a++)
            c->uc[a] = c->u[a] - c->uc[a];
        if (c->modes)
            cblas_sgemv(CblasColMajor, CblasTrans, nact, nm, 1.0f, c->modes, nact, c->uc, 1, 0.0f,
                        c->e, 1);
        else
            memcpy(c->e, c->uc, (size_t)nact * sizeof(float));
        for (int32_t i = 0; i < nm; i++)
            if (c->ki[i] != 0.0f)
                c->integ[i] += c->e[i] / c->ki[i];
    }
    return SW_OK;
}

sw_status sw_controller_set_gains(sw_controller *c, const float *kp, const float *ki)
{
    if (!c)
        return sw_fail(NULL, SW_EINVAL, "controller: NULL controller");
    if (c->p.kind != SW_CTRL_PI)
        return sw_fail(c->ctx, SW_EINVAL, "controller: per-mode gains need the PI controller (%s)",
                       sw_controller_kind_string(c->p.kind));
    const int64_t bad = kp ? first_nonfinite(kp, c->nmodes) : -1;
    const int64_t bad2 = ki ? first_nonfinite(ki, c->nmodes) : -1;
    if (bad >= 0 || bad2 >= 0)
        return sw_fail(c->ctx, SW_EINVAL, "controller: %s of mode %lld is not finite",
                       bad >= 0 ? "kp" : "ki", (long long)(bad >= 0 ? bad : bad2));
    if (kp)
        memcpy(c->kp, kp, (size_t)c->nmodes * sizeof(float));
    if (ki)
        for (int32_t i = 0; i < c->nmodes; i++) {
            /* bumpless: ki I is the command's integral part; keep it, I *= ki_old / ki_new. A
             * mode whose ki was 0 had no integral part (its I summed e unchecked: no
             * back-calculation at ki = 0), so it starts again from I = 0 */
            if (ki[i] != 0.0f && c->ki[i] != 0.0f)
                c->integ[i] = (float)((double)c->integ[i] * c->ki[i] / ki[i]);
            else if (ki[i] != 0.0f)
                c->integ[i] = 0.0f;
            c->ki[i] = ki[i];
        }
    return SW_OK;
}

int32_t sw_controller_modes(const sw_controller *c)
{
    return c && c->p.kind == SW_CTRL_PI ? c->nmodes : 0;
}

void sw_loop_filter(const float *z, int32_t nact, int32_t nf, const float *r, double *zt,
                    float *out)
{
    for (int32_t j = 0; j < nf; j++) {
        const float *zj = z + (size_t)j * nact;
        double t = 0.0;
        for (int32_t a = 0; a < nact; a++)
            t += (double)zj[a] * r[a];
        zt[j] = t;
    }
    for (int32_t a = 0; a < nact; a++) {
        double v = r[a];
        for (int32_t j = 0; j < nf; j++)
            v -= zt[j] * z[(size_t)j * nact + a];
        out[a] = (float)v;
    }
}

const char *sw_unseen_string(int which)
{
    static const char *const names[4] = {"none", "piston", "waffle", "piston-waffle"};
    return which >= 0 && which <= 3 ? names[which] : "unknown";
}

sw_status sw_unseen_parse(const char *text, int *out)
{
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "unseen modes: NULL %s", !text ? "text" : "out");
    static const struct {
        const char *name;
        int which;
    } names[] = {{"none", 0},
                 {"piston", SW_UNSEEN_PISTON},
                 {"waffle", SW_UNSEEN_WAFFLE},
                 {"piston-waffle", SW_UNSEEN_PISTON | SW_UNSEEN_WAFFLE},
                 {"piston,waffle", SW_UNSEEN_PISTON | SW_UNSEEN_WAFFLE},
                 {"waffle-piston", SW_UNSEEN_PISTON | SW_UNSEEN_WAFFLE},
                 {"waffle,piston", SW_UNSEEN_PISTON | SW_UNSEEN_WAFFLE}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(text, names[i].name) == 0) {
            *out = names[i].which;
            return SW_OK;
        }
    return sw_fail(NULL, SW_EINVAL, "unseen modes: '%s' (none, piston, waffle or piston-waffle)",
                   text);
}

int sw_loop_fold_filter(const float *z, int32_t nf, int32_t nact, int32_t cols, float *w)
{
    double *t = (double *)malloc((size_t)(cols > 0 ? cols : 1) * sizeof(double));
    if (!t)
        return -1;
    for (int32_t j = 0; j < nf; j++) {
        const float *zj = z + (size_t)j * nact;
        memset(t, 0, (size_t)cols * sizeof(double));
        for (int32_t a = 0; a < nact; a++) { /* t = Z_j^T W */
            const float *row = w + (size_t)a * cols;
            for (int32_t c = 0; c < cols; c++)
                t[c] += (double)zj[a] * row[c];
        }
        for (int32_t a = 0; a < nact; a++) { /* W -= Z_j t (the columns are orthonormal) */
            float *row = w + (size_t)a * cols;
            for (int32_t c = 0; c < cols; c++)
                row[c] = (float)((double)row[c] - (double)zj[a] * t[c]);
        }
    }
    free(t);
    return 0;
}

sw_status sw_unseen_modes(int32_t nx, int32_t ny, const uint8_t *valid, int which, float *z,
                          int32_t *nmodes)
{
    if (!z || !nmodes)
        return sw_fail(NULL, SW_EINVAL, "unseen modes: NULL %s", !z ? "output" : "count");
    *nmodes = 0;
    if (nx < 1 || ny < 1 || nx > 1024 || ny > 1024)
        return sw_fail(NULL, SW_EINVAL, "unseen modes: %d x %d lenslets (1..1024 per side)",
                       (int)nx, (int)ny);
    if (which & ~(SW_UNSEEN_PISTON | SW_UNSEEN_WAFFLE))
        return sw_fail(NULL, SW_EINVAL, "unseen modes: unknown modes 0x%x", which);
    const int32_t cx = nx + 1, cy = ny + 1, nact = cx * cy;
    uint8_t *active = (uint8_t *)calloc((size_t)nact, 1);
    double *col = (double *)malloc((size_t)nact * sizeof(double));
    if (!active || !col) {
        free(active);
        free(col);
        return sw_fail(NULL, SW_ENOMEM, "unseen modes: out of memory");
    }
    /* the active actuators: the four corners of every valid lenslet */
    for (int32_t iy = 0; iy < ny; iy++)
        for (int32_t ix = 0; ix < nx; ix++)
            if (!valid || valid[(size_t)iy * nx + ix]) {
                const size_t a = (size_t)iy * cx + ix;
                active[a] = active[a + 1] = active[a + cx] = active[a + cx + 1] = 1;
            }
    int32_t n = 0;
    for (int m = 0; m < 2; m++) {
        if (!(which & (m == 0 ? SW_UNSEEN_PISTON : SW_UNSEEN_WAFFLE)))
            continue;
        for (int32_t a = 0; a < nact; a++)
            col[a] = !active[a] ? 0.0 : (m == 0 || ((a % cx + a / cx) % 2 == 0) ? 1.0 : -1.0);
        /* Gram-Schmidt against the columns already kept, then unit norm */
        for (int32_t j = 0; j < n; j++) {
            double t = 0.0;
            for (int32_t a = 0; a < nact; a++)
                t += col[a] * z[(size_t)j * nact + a];
            for (int32_t a = 0; a < nact; a++)
                col[a] -= t * z[(size_t)j * nact + a];
        }
        double norm = 0.0;
        for (int32_t a = 0; a < nact; a++)
            norm += col[a] * col[a];
        norm = sqrt(norm);
        if (norm < 1e-6) /* waffle inside piston: a single lenslet's corners are not enough */
            continue;
        for (int32_t a = 0; a < nact; a++)
            z[(size_t)n * nact + a] = (float)(col[a] / norm);
        n++;
    }
    free(active);
    free(col);
    *nmodes = n;
    return SW_OK;
}
