/*
 * What 'spotwave fit' and 'spotwave aberrometry' share about reading an eye's wavefront the way
 * clinicians and vision scientists do: the refraction options and report (second order by
 * default, the 4th and 6th orders on request; Thibos, Hong, Bradley & Applegate 2004, J. Vision
 * 4(4), 329-351), the chromatic correction from the measurement wavelength to a reference one
 * (the Chromatic Eye, Thibos, Ye, Zhang & Bradley 1992, Appl. Opt. 31(19), 3594-3600), the
 * instrument's image flips and the eye's side (ANSI Z80.28; Thibos, Applegate, Schwiegerling &
 * Webb 2002, J. Refract. Surg. 18, S652-S660), and the image quality (quality.h: PSF, MTF,
 * Strehl, visual Strehl, RMS by order) with its pictures.
 *
 * Frames of the coefficients. As fitted: the detector's x (columns) and y (rows). The examiner's
 * frame: the fitted ones with --flip-x / --flip-y applied (sw_zernike_flip); the refraction (axis
 * on the TABO scale, the same for both eyes) and the image quality are computed there. As
 * reported (CSV, JSON coefficients, maps): the examiner's frame for a right eye or an eye not
 * named, mirrored about the vertical axis for a left eye (ANSI Z80.28's left-eye frame).
 */
#ifndef SW_CLI_CLINICAL_H
#define SW_CLI_CLINICAL_H

#include <stdio.h>

#include "cli.h"
#include "json.h"

/* The measurement wavelength: sim sh's and sim eye's light, a near-infrared aberrometer's. */
#define SW_CLI_DEF_WAVELENGTH_UM 0.78
/* The clinical refraction's wavelength: near the peak of photopic vision. */
#define SW_CLI_DEF_REFERENCE_UM 0.555

/* Option codes (above any command's own). */
enum {
    SW_CLI_OPT_HIGHER_RX = 1000,
    SW_CLI_OPT_WAVELENGTH,
    SW_CLI_OPT_REFERENCE_WL,
    SW_CLI_OPT_FLIP_X,
    SW_CLI_OPT_FLIP_Y,
    SW_CLI_OPT_QUALITY,
    SW_CLI_OPT_QUALITY_WL,
    SW_CLI_OPT_QUALITY_HOA,
    SW_CLI_OPT_PSF,
    SW_CLI_OPT_MTF,
    SW_CLI_OPT_PSF_SIZE,
};

/* The long options, for a command's option table. */
#define SW_CLI_CLINICAL_LONGOPTS                                                                   \
    {"higher-order-rx", no_argument, NULL, SW_CLI_OPT_HIGHER_RX},                                  \
        {"wavelength-um", required_argument, NULL, SW_CLI_OPT_WAVELENGTH},                         \
        {"reference-wavelength-um", required_argument, NULL, SW_CLI_OPT_REFERENCE_WL},             \
        {"flip-x", no_argument, NULL, SW_CLI_OPT_FLIP_X},                                          \
        {"flip-y", no_argument, NULL, SW_CLI_OPT_FLIP_Y},                                          \
        {"quality", no_argument, NULL, SW_CLI_OPT_QUALITY},                                        \
        {"quality-wavelength-um", required_argument, NULL, SW_CLI_OPT_QUALITY_WL},                 \
        {"quality-hoa", no_argument, NULL, SW_CLI_OPT_QUALITY_HOA},                                \
        {"psf", required_argument, NULL, SW_CLI_OPT_PSF},                                          \
        {"mtf", required_argument, NULL, SW_CLI_OPT_MTF},                                          \
    {                                                                                              \
        "psf-size", required_argument, NULL, SW_CLI_OPT_PSF_SIZE                                   \
    }

typedef struct sw_cli_clinical {
    int higher_rx;        /* --higher-order-rx: the selected refraction has orders 4, 6 */
    double wavelength_um; /* measurement */
    double reference_um;  /* the clinical refraction's wavelength */
    int flip_x, flip_y;   /* the instrument's image flips */
    int quality;          /* compute the image quality (also with --psf / --mtf)  */
    double quality_um;    /* 0: the reference wavelength                           */
    int quality_hoa;      /* orders >= 3 only (the sphero-cylinder corrected)      */
    const char *psf_png, *mtf_png;
    long psf_size; /* the FFT grid (0: automatic)                           */
} sw_cli_clinical;

/* Defaults: second order, 0.78 um measured, 0.555 um reference, no flips, no quality. */
void sw_cli_clinical_init(sw_cli_clinical *o);

/* Handles one of the SW_CLI_OPT_* codes: SW_EXIT_OK, SW_EXIT_USAGE (message printed), or -1 when
 * c is not one of them. */
int sw_cli_clinical_option(const char *sub, int c, const char *arg, sw_cli_clinical *o);

/* Checks after parsing (picture names end in .png): SW_EXIT_OK or SW_EXIT_USAGE. */
int sw_cli_clinical_check(const char *sub, const sw_cli_clinical *o);

/* The --help lines of these options (the command's own words for its defaults go before). */
void sw_cli_clinical_help(FILE *out);
const char *sw_cli_clinical_help_text(void); /* the same text (a static buffer) */

/* The eye's side: 0 not named, 1 right (OD), 2 left (OS). Parses OD, OS, right, left (any case):
 * 0 on success, -1 otherwise. */
int sw_cli_eye_parse(const char *arg, int *side);
const char *sw_cli_eye_name(int side); /* "OD", "OS" or NULL */

/* One eye's clinical numbers, from its coefficients over pupil_mm in the examiner's frame. */
typedef struct sw_cli_eye_rx {
    int ok;
    sw_refraction measured; /* the selected order at the measurement wavelength ("refraction") */
    sw_refraction second, higher; /* at the reference wavelength (chromatic shift applied)      */
    double lca_d;                 /* the shift added to M                                        */
    int have_quality;
    sw_psf_quality q;
    double quality_um, psf_arcmin_px, mtf_cpd_px, cutoff_cpd;
    int32_t psf_size; /* the grid used */
    int sampled;      /* the grid holds the PSF (see --psf-size) */
} sw_cli_eye_rx;

/*
 * The refraction of an eye (count >= 6 terms, or fewer: those missing are 0) over pupil_mm and,
 * when o->quality, its image quality (psf and mtf: host f32 images, (re)allocated here to the grid
 * used, or NULL). The
 * defocus is moved to the quality wavelength with the same chromatic model. SW_EXIT_OK or a
 * failure printed with `what` (e.g. "frame 3, eye 1").
 */
int sw_cli_eye_clinical(sw_context *ctx, const char *sub, const char *what,
                        const sw_cli_clinical *o, const double *coef, int32_t count,
                        double pupil_mm, double vertex_mm, sw_image *psf, sw_image *mtf,
                        sw_cli_eye_rx *out);

/* JSON of an eye: "refraction_2nd_order", "refraction_higher_order", "rms_by_order_um",
 * "hoa_rms_um" and "quality" (null unless computed) added to obj. coef: as reported. */
void sw_cli_eye_json(cJSON *obj, const sw_cli_clinical *o, const sw_cli_eye_rx *rx, int side,
                     const double *coef, int32_t count, double pupil_mm, double vertex_mm);

/* The report's top-level keys of these options. */
void sw_cli_clinical_json(cJSON *obj, const sw_cli_clinical *o);

/* One line for people: "OD -1.25 -0.50 x 180 (plus cyl -1.75 +0.50 x 90) at 0.555 um". */
void sw_cli_rx_text(char *buf, size_t size, const sw_refraction *rx, int side, double wl_um);

/* The pictures: a PSF (arc minutes on both axes, grey levels sqrt-stretched) and the radially
 * averaged MTF against the diffraction-limited one (cycles per degree). From host images of a
 * run with the given scales. Returns SW_OK or the failure (message in ctx). */
sw_status sw_cli_psf_png(sw_context *ctx, const char *path, const sw_image *psf, double arcmin_px,
                         const char *title);
sw_status sw_cli_mtf_png(sw_context *ctx, const char *path, const sw_image *mtf, double cpd_px,
                         double cutoff_cpd, const char *title);

/* FILE, or FILE with _eye<k> (k 1-based) before its extension when n_eyes > 1. */
void sw_cli_eye_file(const char *path, int n_eyes, int k, char *buf, size_t size);

#endif
