/*
 * Given pupils for `spotwave pupil` and `spotwave aberrometry` (pupil.h "Given pupils"): the
 * options that skip tracking, for images whose pupil the tracker cannot see or that another
 * instrument has already measured.
 */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char sw_cli_given_help[] =
    "  --pupil-center X,Y     a given pupil's centre, pixels; once per eye (left eye first),\n"
    "                         with --pupil-radius-px: nothing is tracked\n"
    "  --pupil-radius-px R    its radius, pixels (once for every eye, or once per eye)\n"
    "  --pupil-ellipse X,Y,A,B,ANGLE\n"
    "                         a given elliptical pupil: centre, semi-axes (pixels) and the\n"
    "                         major axis' angle (degrees from +x towards +y); once per eye\n";

/* "v1,v2,...,vn": n finite numbers. 0 on success. */
static int parse_list(const char *arg, int n, double *v)
{
    const char *s = arg;
    for (int i = 0; i < n; i++) {
        char *end = NULL;
        v[i] = strtod(s, &end);
        if (end == s || !isfinite(v[i]))
            return -1;
        s = end;
        if (i < n - 1) {
            if (*s != ',')
                return -1;
            s++;
        }
    }
    return *s ? -1 : 0;
}

int sw_cli_given_option(const char *sub, const char *name, int kind, const char *arg,
                        sw_cli_given *g)
{
    double v[5];
    switch (kind) {
    case SW_CLI_GIVEN_CENTER:
        if (g->n_center >= 2)
            return sw_cli_usage(sub, "%s: at most two (one per eye)", name);
        if (parse_list(arg, 2, v) != 0)
            return sw_cli_usage(sub, "%s: '%s' is not X,Y in pixels", name, arg);
        g->center[g->n_center][0] = v[0];
        g->center[g->n_center][1] = v[1];
        g->n_center++;
        return SW_EXIT_OK;
    case SW_CLI_GIVEN_RADIUS:
        if (g->n_radius >= 2)
            return sw_cli_usage(sub, "%s: at most two (one per eye)", name);
        if (parse_list(arg, 1, v) != 0 || !(v[0] >= 1.0))
            return sw_cli_usage(sub, "%s: '%s' is not a radius >= 1 pixel", name, arg);
        g->radius[g->n_radius++] = v[0];
        return SW_EXIT_OK;
    default:
        if (g->n_ellipse >= 2)
            return sw_cli_usage(sub, "%s: at most two (one per eye)", name);
        if (parse_list(arg, 5, v) != 0 || !(v[2] >= 1.0) || !(v[3] >= 1.0))
            return sw_cli_usage(
                sub, "%s: '%s' is not X,Y,A,B,ANGLE (pixels, semi-axes >= 1, degrees)", name, arg);
        g->ellipse[g->n_ellipse] = (sw_pupil_shape){
            .cx_px = v[0], .cy_px = v[1], .a_px = v[2], .b_px = v[3], .angle_deg = v[4]};
        g->n_ellipse++;
        return SW_EXIT_OK;
    }
}

int sw_cli_given_finish(const char *sub, const sw_cli_given *g, int n_eyes, sw_pupil_params *p)
{
    if (g->n_center == 0 && g->n_radius == 0 && g->n_ellipse == 0)
        return SW_EXIT_OK;
    if (g->n_ellipse > 0 && (g->n_center > 0 || g->n_radius > 0))
        return sw_cli_usage(sub, "give the pupils with --pupil-ellipse or with --pupil-center and "
                                 "--pupil-radius-px, not both");
    if (g->n_ellipse > 0) {
        if (g->n_ellipse != n_eyes)
            return sw_cli_usage(sub, "--pupil-ellipse given %d time%s for %d eye%s: once per eye",
                                g->n_ellipse, g->n_ellipse == 1 ? "" : "s", n_eyes,
                                n_eyes == 1 ? "" : "s");
        for (int i = 0; i < n_eyes; i++)
            p->given_pupil[i] = g->ellipse[i];
    } else {
        if (g->n_center != n_eyes)
            return sw_cli_usage(sub, "--pupil-center given %d time%s for %d eye%s: once per eye",
                                g->n_center, g->n_center == 1 ? "" : "s", n_eyes,
                                n_eyes == 1 ? "" : "s");
        if (g->n_radius != 1 && g->n_radius != n_eyes)
            return sw_cli_usage(sub, "--pupil-center needs --pupil-radius-px (once, or once per "
                                     "eye)");
        for (int i = 0; i < n_eyes; i++) {
            const double r = g->radius[g->n_radius == 1 ? 0 : i];
            p->given_pupil[i] = (sw_pupil_shape){.cx_px = g->center[i][0],
                                                 .cy_px = g->center[i][1],
                                                 .a_px = r,
                                                 .b_px = r,
                                                 .angle_deg = 0.0};
        }
    }
    p->given = 1;
    return SW_EXIT_OK;
}

int sw_cli_pupil_method(const char *arg)
{
    if (strcmp(arg, "auto") == 0)
        return 1;
    if (strcmp(arg, "glow") == 0)
        return 0;
    if (strcmp(arg, "spots") == 0)
        return 2;
    return -1;
}

const char *sw_cli_pupil_method_name(int spots_fallback)
{
    return spots_fallback == 0 ? "glow" : spots_fallback == 2 ? "spots" : "auto";
}
