/*
 * spotwave find: spot finding with the DIALS dispersion thresholds and connected components
 * (Winter et al. 2018; Winter 2024, "CUDA Spotfinding"; find.h) on the frames of one or more images
 * (FITS, PGM, CBF, TIFF, Eiger/NeXus HDF5), streamed through the library's double-buffered
 * pipeline; a spots CSV out (DESIGN.md), optionally the strong-pixel masks, a JSON report, and a
 * progress bar on stderr for long runs. With a diffraction geometry (diffraction.h: the file's
 * header, overridden by options) each spot's d-spacing, resolution and ice-ring masks, and a
 * per-frame summary.
 */
#define _GNU_SOURCE

#include "cli.h"
#include "cli_mpi.h"
#include "json.h"
#include "outfiles.h"
#include "plot.h"
#include "spotwave/diffraction.h"
#include "spotwave/refine.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SUB "find"

/* --ccd's sigma_b and sigma_s unless given (ccd_mode) */
#define SW_CLI_CCD_SIGMA 2.0

void sw_cmd_find_help(FILE *out)
{
    fprintf(
        out,
        "Usage: spotwave [GLOBAL OPTIONS] find IMAGE... [OPTIONS]\n"
        "\n"
        "Finds spots with the dispersion threshold of DIALS (Winter et al. 2018, Acta Cryst.\n"
        "D74, 85-97, spot finding; the index-of-dispersion test of XDS, Kabsch 2010, Acta\n"
        "Cryst. D66, 125-132; on GPUs as G. Winter 2024, \"CUDA Spotfinding\", describes it)\n"
        "and connected components, and writes one CSV row per spot:\n"
        "  frame,x_px,y_px,x_var,y_var,intensity,npix,bbox_x0,bbox_x1,bbox_y0,bbox_y1\n"
        "(0-based pixel centres, the centre of pixel (0,0) at 0.0: DIALS and XDS put it at\n"
        "0.5, see --convention; bounding boxes are pixel indices with exclusive upper bounds,\n"
        "as DIALS's; x_var, y_var: the Poisson variance of the centroid, px^2). With a\n"
        "complete diffraction geometry a column d_a is added: the spot's d-spacing in\n"
        "angstrom by Bragg's law at its centroid (inf on the direct beam); with --panels a\n"
        "last column panel.\n"
        "\n"
        "Input:\n"
        "  IMAGE...               FITS (2-D, or a cube of frames), 8/16-bit PGM, CBF (Pilatus;\n"
        "                         negative pixels are masked; every array of the file a\n"
        "                         frame), TIFF (every page a frame), or HDF5 as Eiger\n"
        "                         detectors write it (a NeXus master with\n"
        "                         /entry/data/data_000001..., or a data file with\n"
        "                         /entry/data/data; bitshuffle/LZ4 decoded by spotwave, a\n"
        "                         frame's blocks on the --threads threads). Frames are\n"
        "                         numbered from 0 across all inputs, which must share one\n"
        "                         size and pixel type.\n"
        "  --decode auto|cpu|gpu  where bitshuffle/LZ4 HDF5 frames are decoded: gpu copies\n"
        "                         the compressed chunks to the GPU and decodes them there\n"
        "                         (one warp per LZ4 block, then the bit transpose of Masui\n"
        "                         et al. 2015, Astronomy and Computing 12, 181), cpu decodes\n"
        "                         on the --threads threads; auto (default): gpu with\n"
        "                         --backend cuda when every input is such a file. Spots are\n"
        "                         the same either way; --json says which ran\n"
        "  --dataset PATH         HDF5 dataset to read instead of the automatic "
        "choice\n" SW_CLI_H5_LINKS_HELP
        "  --first N              first frame to process (default 0)\n"
        "  --count N              number of frames (default: all from --first)\n"
        "\n"
        "Following a folder (the files a detector writes, as they land; instead of IMAGE...):\n"
        "  --follow DIR           take image files from DIR as they land: a file is taken once\n"
        "                         two polls have seen the same size (> 0) and modification\n"
        "                         time (a writer that pauses longer than a poll should write\n"
        "                         under a name starting with '.' and rename the file into\n"
        "                         place: such names are never taken), in name order among\n"
        "                         the files complete at a poll, each once. Each file is read\n"
        "                         whole (an HDF5 file too: a growing one is not followed) and\n"
        "                         its frames numbered on from the last file's. Every frame's\n"
        "                         CSV rows and --summary line (with a key \"file\") are written\n"
        "                         and flushed as the frame is done, in place (not renamed into\n"
        "                         place at the end: they are read while they grow);\n"
        "                         --summary-plot and --out-h5 are written at the end. The\n"
        "                         frame size, geometry and masks are the first file's; a file\n"
        "                         that cannot be read or has other frames is skipped with a\n"
        "                         line on stderr (exit status 1, every output written all the\n"
        "                         same). Not with --3d, --strong-mask, --json, --ccd, --first,\n"
        "                         --count\n"
        "  --follow-pattern GLOB  the names to take (fnmatch(3); default *.cbf *.tif *.tiff\n"
        "                         *.h5 *.hdf5 *.nxs *.fits *.fit *.fts *.fits.gz *.fz *.pgm,\n"
        "                         any case, but not Eiger data files *_data_NNNNNN.h5)\n"
        "  --follow-idle S        end when no file has completed for S seconds (default 0:\n"
        "                         run until SIGINT or SIGTERM, which end it after the frame in\n"
        "                         hand with exit status 0 and every output whole)\n"
        "  --follow-poll S        seconds between two listings of DIR (default 0.2)\n"
        "\n"
        "Threshold (find.h; DIALS names and defaults):\n"
        "  --algorithm dispersion|dispersion_extended   (default dispersion_extended)\n"
        "  --kernel-size K|KX,KY  window half-sizes, 1..%d (default 3: a 7x7 window)\n"
        "  --sigma-b S            background (index of dispersion) sigma (default 6)\n"
        "  --sigma-s S            strong-pixel sigma (default 3)\n"
        "  --global-threshold T   pixels must exceed T (default 0)\n"
        "  --min-local N          fewest valid pixels in a window; 0 = the whole window\n"
        "                         (default 2)\n"
        "  --gain G               detector gain: the variance / mean of a pure background in\n"
        "                         the frame's units (default 1: photon counting, e.g. Eiger,\n"
        "                         Pilatus). For CCD/CMOS frames in ADU give var/mean of a\n"
        "                         star-free region (with a bias B, read noise r e-, g e-/ADU\n"
        "                         and background b e-: ((b + r^2) / g^2) / (B + b / g));\n"
        "                         too small a gain finds noise, too large one misses faint\n"
        "                         spots\n"
        "  --gain-map IMAGE       per-pixel gains (FITS/PGM of the frame size; instead of --gain)\n"
        "  --mask IMAGE           pixel mask (FITS/PGM of the frame size): non-zero = valid.\n"
        "                         An HDF5 input's pixel_mask is used too unless --no-pixel-mask\n"
        "  --no-pixel-mask        ignore the HDF5 detectorSpecific/pixel_mask and a CBF's\n"
        "                         negative pixels (they then count as 0)\n"
        "  --overload V           values >= V are masked (default: the HDF5 file's saturation\n"
        "                         value or the header's overload (a CBF's Count_cutoff), else\n"
        "                         255 / 0xfffe / 0xfffffffe for 8/16/32-bit)\n"
        "\n"
        "Diffraction geometry (from the input's header where it has one; these override it):\n"
        "  --wavelength-a L       X-ray wavelength, angstrom\n"
        "  --distance-mm D        sample to detector distance, mm (detector normal to the beam)\n"
        "  --beam-center X,Y      where the direct beam meets the detector, pixels (spotwave's\n"
        "                         convention: the centre of pixel (0,0) at 0,0)\n"
        "  --pixel-mm P|PX,PY     pixel size, mm\n"
        "\n"
        "Masks (pixels judged at their centres and masked before the threshold, as DIALS masks\n"
        "them: Winter et al. 2018, Acta Cryst. D74, 85-97; dials/util/masking.py):\n"
        "  --d-min A              mask pixels with d <= A angstrom (high-resolution limit)\n"
        "  --d-max A              mask pixels with d >= A angstrom (low-resolution limit)\n"
        "  --ice-rings            mask the rings of hexagonal ice (ice Ih: every reflection of\n"
        "                         P6_3/mmc, a = 4.498, c = 7.338 A, to the frame's corners, as\n"
        "                         DIALS's ice_rings.filter)\n"
        "  --ice-ring-width W     ring width in 1/d^2 (1/A^2): pixels with |1/d^2 - 1/d_ring^2|\n"
        "                         <= W/2 are masked (default 0.002, DIALS's)\n"
        "  --untrusted-rect X0,X1,Y0,Y1  mask pixels X0 <= x < X1, Y0 <= y < Y1 (repeatable;\n"
        "                         DIALS's untrusted.rectangle)\n"
        "  --untrusted-circle X,Y,R  mask pixels with (x-X)^2 + (y-Y)^2 < R^2 (repeatable;\n"
        "                         DIALS's untrusted.circle)\n"
        "  --untrusted-polygon X1,Y1,X2,Y2,X3,Y3[,...]  mask pixels whose centre is inside\n"
        "                         (repeatable; e.g. a beam stop's arm)\n"
        "  --beamstop-circle X,Y,R  the beam stop's shadow, masked as --untrusted-circle\n"
        "  --panels MWxMH[,GX,GY] the detector's modules: MW x MH pixels from the top-left\n"
        "                         corner, GX columns and GY rows of gap between them (an\n"
        "                         Eiger2 16M: 1028x512,12,38; a Pilatus 6M: 487x195,7,17). The\n"
        "                         gaps are masked, so no spot crosses one, and a last column\n"
        "                         panel gives each spot's module (numbered row by row from 0).\n"
        "                         Without --panels, an HDF5 master that lists several modules\n"
        "                         (NXmx NXdetector_module groups: data_origin, data_size, the\n"
        "                         first input's) gives them: every pixel outside them masked,\n"
        "                         panel k the k-th module by group name, and a module's own\n"
        "                         fast/slow pixel directions giving its spots' d (unless\n"
        "                         --beam-center, --distance-mm or --pixel-mm are given)\n"
        "  The d limits and ice rings need the geometry: wavelength, distance, beam centre and\n"
        "  pixel size.\n"
        "\n"
        "Spots:\n"
        "  --connectivity 4|8     pixel neighbourhood (default 4, as DIALS)\n"
        "  --3d                   join spots across consecutive frames (rotation scans); the\n"
        "                         frame column is then the intensity-weighted frame, and the\n"
        "                         columns z_var,bbox_z0,bbox_z1 are added\n"
        "  --min-spot-size N      fewest pixels (default 3)\n"
        "  --max-spot-size N      most pixels, 0 = no limit (default 1000)\n"
        "  --max-separation PX    largest peak-to-centroid distance, 0 = off (default 2)\n"
        "  --max-strong-fraction F  a frame with more than F of its valid pixels strong is\n"
        "                         an error, 0 = off (default 0.25)\n"
        "  --window auto|brute|tiled  GPU window sums (default auto)\n"
        "\n"
        "Deblending (find.h; 2-D spots only, not with --3d):\n"
        "  --deblend              split touching spots by SExtractor's multi-thresholding\n"
        "                         (Bertin & Arnouts 1996, A&AS 117, 393, section 2.4): each\n"
        "                         spot's pixels are thresholded again at --deblend-levels\n"
        "                         levels spaced exponentially between its lowest and highest\n"
        "                         value above the local background; where two or more branches\n"
        "                         each hold more than --deblend-contrast of the spot's flux,\n"
        "                         it splits (and each branch is tried again further up); the\n"
        "                         other pixels go to the child whose Gaussian model is largest\n"
        "                         there. Each child is a spot of its own (the filters apply\n"
        "                         to it) and a last column parent is added: the 1-based\n"
        "                         row of the first child of the same blend, 0 for a spot that\n"
        "                         was not split. Runs on the CPU (on a GPU after the labels).\n"
        "                         A pair splits only where its light has two maxima (equal\n"
        "                         stars beyond ~2.5 sigma, 1:5 beyond ~3.3 sigma). With\n"
        "                         --refine gauss or moffat the children of a blend are\n"
        "                         fitted jointly (a position and flux each, a shared width\n"
        "                         and constant; refine_flags 32; on the CPU with either\n"
        "                         backend): a one-star fit over a stamp holding the neighbour\n"
        "                         is pulled towards it (2-3 px at 3-4 sigma). With xwin, a\n"
        "                         blend of more than 16 children or wider than 96 px, a child\n"
        "                         off the frame or a failed joint fit, the children keep\n"
        "                         their deblended centroid (refine_flags 16)\n"
        "  --deblend-levels N     sub-thresholds, 1..%d (default 32: SExtractor's\n"
        "                         DEBLEND_NTHRESH)\n"
        "  --deblend-contrast C   least share of the spot's flux a branch needs, 0..1\n"
        "                         (default 0.005: SExtractor's DEBLEND_MINCONT; 1 = never split)\n"
        "\n"
        "Refined positions (refine.h; 2-D spots only, not with --3d):\n"
        "  --refine none|xwin|gauss|moffat  none (default): the intensity-weighted mean\n"
        "                         of the strong pixels. xwin: SExtractor's iterative Gaussian-\n"
        "                         windowed centroid XWIN_IMAGE (Bertin & Arnouts 1996, A&AS\n"
        "                         117, 393; window sigma = d50 / sqrt(8 ln 2), as SEP's\n"
        "                         winpos, Barbary 2016, JOSS 1(6), 58). gauss: a pixel-\n"
        "                         integrated circular Gaussian + constant fitted by\n"
        "                         Levenberg-Marquardt with Poisson + read-noise weights\n"
        "                         (reaches the Cramer-Rao bound at high SNR). moffat: the same\n"
        "                         with a circular Moffat profile (Moffat 1969, A&A 3, 455),\n"
        "                         F (beta-1)/(pi alpha^2) (1 + r^2/alpha^2)^-beta, beta fixed\n"
        "                         (--moffat-beta), integrated over each pixel by 3x3-node\n"
        "                         Gauss-Legendre; sigma_px is then alpha. x_px, y_px then\n"
        "                         hold the refined position and x_var, y_var its variance\n"
        "                         (xwin: SExtractor's ERRX2WIN; gauss, moffat: the fit's\n"
        "                         covariance); the columns refine_flags,flux_adu,sigma_px,\n"
        "                         background_adu are added last (flags: 1 stamp cut by the\n"
        "                         edge, 2 bad pixels left out, 4 not refined: the plain\n"
        "                         centroid is kept, 8 fit stopped at its pass limit, 16 a\n"
        "                         deblended child kept, 32 a deblended child fitted jointly)\n"
        "  --moffat-beta B        moffat's exponent, 1 < B <= 100 (default 4.765: the best\n"
        "                         Moffat fit to a Kolmogorov-turbulence PSF, Trujillo et al.\n"
        "                         2001, MNRAS 328, 977)\n"
        "  --background none|annulus|mesh  local sky subtracted before refining (default\n"
        "                         none: frames without sky). annulus: sigma-clipped median of\n"
        "                         the ring R+2..R+8 px about each spot (R the stamp radius).\n"
        "                         mesh: SExtractor's background map (boxes of --mesh-size px,\n"
        "                         sigma-clipped mode, 3x3 median filter, bilinear between box\n"
        "                         centres)\n"
        "  --mesh-size N          background box side, px (default 64)\n"
        "  --stamp-radius R       refinement stamp half-size, 2..%d (default: from the spot's\n"
        "                         bounding box)\n"
        "  --detector-gain G      e- per ADU of the weights and error bars (default 1)\n"
        "  --read-noise E         read noise, e- RMS (default 0)\n"
        "  --bias B               bias (offset) in ADU subtracted before refining (default 0)\n"
        "  --ccd                  CCD mode: estimate from the first frame's background (its\n"
        "                         pixels sigma-clipped at 3 sd, the stars removed) the\n"
        "                         detector gain, (mean - bias) / variance with the read noise\n"
        "                         taken out, unless --detector-gain is given, and the\n"
        "                         dispersion threshold's --gain as variance / mean, unless\n"
        "                         --gain is given; and --sigma-b 2 --sigma-s 2 unless given\n"
        "                         (sky-limited frames: faint objects raise each pixel little).\n"
        "                         The estimates go to stderr and the JSON\n"
        "\n"
        "Output:\n"
        "  -o, --out FILE         spots CSV (default: standard output)\n"
        "  --out-h5 FILE.h5       the spots table also as HDF5: a group /spots with one\n"
        "                         dataset per CSV column, named as the columns, in the same\n"
        "                         convention (attribute pixel_origin: 0 or 0.5), and parent\n"
        "                         always (0 without --deblend; refinement columns: CSV only)\n"
        "  --strong-mask FILE     the strong pixels (1) as an 8-bit FITS image, a cube for\n"
        "                         several frames (kept in memory: for a few frames)\n"
        "  --convention spotwave|dials  pixel coordinates of x_px, y_px in the CSV: spotwave\n"
        "                         (default; the centre of pixel (0,0) at 0.0) or dials (at 0.5,\n"
        "                         as DIALS and XDS: x and y are the default's + 0.5; bounding\n"
        "                         boxes, pixel indices, do not change)\n"
        "  --summary FILE.jsonl   one JSON object per frame: frame, n_spots, n_spots_d_lt_4A\n"
        "                         (spots with d < 4 A), n_spots_d_gt_4A (d > 4 A, DIALS's\n"
        "                         n_spots_4A), total_intensity, and resolution_estimate_a: the\n"
        "                         resolution limit by method 2 of Zhang et al. 2006, J. Appl.\n"
        "                         Cryst. 39, 112-119, section 2.4.4 (the d where the spots'\n"
        "                         density in shells of equal reciprocal volume falls below 15%%\n"
        "                         of the lowest shells', as DIALS's per-image analysis computes\n"
        "                         it; null with 10 spots or fewer). The d fields need the\n"
        "                         geometry (null without). A --3d spot counts on frame\n"
        "                         floor(z + 0.5), as DIALS's per-image analysis assigns it\n"
        "  --summary-plot FILE.png  spot counts and the resolution estimate against frame\n"
        "  --json                 print a JSON report on standard output (needs --out FILE)\n"
        "  --progress / --no-progress  a progress bar on stderr (default: when stderr is a\n"
        "                         terminal and there is more than one frame)\n"
        "  -h, --help             this help\n"
        "\n"
        "Under mpirun (a spotwave built with MPI: 'spotwave info' says), e.g. 'mpirun -np 4\n"
        "spotwave find FILES... --out spots.csv', the frames are dealt to the processes in\n"
        "contiguous blocks, each on its own GPU (node-local rank modulo the GPUs; with\n"
        "--decode gpu, or auto, a rank decodes its frames' chunks there) or CPU cores;\n"
        "rank 0 merges the spots in frame order and writes every output once, the same bytes\n"
        "as one process. A frame that fails stops its rank's block; the other ranks finish,\n"
        "rank 0 lists the failed frames and the run fails. Not with --3d.\n",
        SW_FIND_MAX_KERNEL, SW_FIND_MAX_DEBLEND_LEVELS, SW_REFINE_MAX_RADIUS);
}

enum {
    OPT_DATASET = 256,
    OPT_H5_LINK_DIRS,
    OPT_H5_LINKS_ANYWHERE,
    OPT_FIRST,
    OPT_COUNT,
    OPT_ALGORITHM,
    OPT_KERNEL,
    OPT_SIGMA_B,
    OPT_SIGMA_S,
    OPT_GLOBAL,
    OPT_MIN_LOCAL,
    OPT_GAIN,
    OPT_GAIN_MAP,
    OPT_MASK,
    OPT_NO_PIXEL_MASK,
    OPT_OVERLOAD,
    OPT_CONNECTIVITY,
    OPT_3D,
    OPT_DECODE,
    OPT_MIN_SIZE,
    OPT_MAX_SIZE,
    OPT_MAX_SEP,
    OPT_MAX_FRACTION,
    OPT_WINDOW,
    OPT_STRONG,
    OPT_JSON,
    OPT_PROGRESS,
    OPT_NO_PROGRESS,
    OPT_WAVELENGTH,
    OPT_DISTANCE,
    OPT_BEAM,
    OPT_PIXEL,
    OPT_D_MIN,
    OPT_D_MAX,
    OPT_ICE,
    OPT_ICE_WIDTH,
    OPT_RECT,
    OPT_CIRCLE,
    OPT_POLYGON,
    OPT_BEAMSTOP,
    OPT_CONVENTION,
    OPT_SUMMARY,
    OPT_SUMMARY_PLOT,
    OPT_PANELS,
    OPT_OUT_H5,
    OPT_REFINE,
    OPT_BACKGROUND,
    OPT_MESH_SIZE,
    OPT_STAMP_RADIUS,
    OPT_MOFFAT_BETA,
    OPT_DET_GAIN,
    OPT_READ_NOISE,
    OPT_BIAS,
    OPT_CCD,
    OPT_DEBLEND,
    OPT_DEBLEND_LEVELS,
    OPT_DEBLEND_CONTRAST,
    OPT_FOLLOW,
    OPT_FOLLOW_PATTERN,
    OPT_FOLLOW_IDLE,
    OPT_FOLLOW_POLL,
};

/* --follow-poll's default, seconds: a file is taken 2 to 3 polls after its last write */
#define SW_FIND_FOLLOW_POLL 0.2

/* Untrusted regions a run may give, and vertices a polygon may have. */
#define MAX_SHAPES   64
#define MAX_VERTICES 64

typedef struct find_opts {
    char **inputs;
    int ninputs;
    const char *dataset;
    long first, count; /* count -1: all */
    sw_find_params p;  /* size and type filled once the inputs are open */
    int have_kernel, kx, ky;
    const char *gain_map, *mask, *out, *strong;
    int no_pixel_mask, three_d, json, progress; /* progress: -1 auto */
    int have_overload;
    sw_diffraction_geometry geom_opt; /* what the options give (their have bits) */
    sw_diffraction_mask_params dmask;
    sw_diffraction_shape shapes[MAX_SHAPES];
    double vertices[MAX_SHAPES][2 * MAX_VERTICES];
    int nbeamstop;
    sw_diffraction_panels panels;
    int dials; /* --convention dials: + 0.5 on x and y */
    const char *summary, *summary_plot, *out_h5;
    sw_refine_params rp; /* size and type filled with the find parameters' */
    double moffat_beta;  /* --moffat-beta, 0: not given */
    int have_gain, have_det_gain, ccd;
    int have_deblend_opt; /* --deblend-levels or --deblend-contrast given */
    int have_sigma_b, have_sigma_s;
    sw_ccd_estimate ccd_est;
    const char *follow, *follow_pattern; /* --follow DIR, --follow-pattern GLOB */
    double follow_idle, follow_poll;     /* seconds; idle 0: until stopped */
    int decode;                          /* --decode: DECODE_AUTO, _CPU, _GPU */
} find_opts;

enum { DECODE_AUTO = 0, DECODE_CPU, DECODE_GPU };

typedef struct find_job {
    find_opts *o;
    sw_cli_inputs in;     /* the frames of all inputs, read on the pipeline's thread */
    double file_overload; /* from HDF5 or CBF (the lowest of the inputs'), 0 when none */
    uint8_t *pixel_mask;  /* from HDF5 (every input's mask ANDed), or NULL */
    size_t pixel_n;
    sw_image strong_cube; /* --strong-mask: count frames stacked */
    int64_t strong_first;
    sw_cli_progress bar;
    sw_diffraction_geometry geom, file_geom; /* the run's (file + options) and the file's */
    int have_geom;                           /* geom passes sw_diffraction_geometry_check */
    int64_t geom_masked;                     /* pixels the geometry-aware masks cleared */
    /* what prepare() makes from the first input, freed by release() */
    float *gain_map, *mask_f;
    uint8_t *mask;
    sw_find_plan *plan;
    sw_refine_plan *refine;
    sw_refine_list refined;
    /* the first input's modules (an NXmx master's NXdetector_module groups), the panels when
     * there are several and --panels is not given */
    sw_diffraction_module *modules;
    int32_t nmodules;
    sw_diffraction_panels file_panels;
    int gpu_decode;     /* frames stored as bitshuffle/LZ4 are decoded on the GPU */
    int64_t gpu_frames; /* ... so many of them were                              */
} find_job;

static int parse_opts(find_opts *o, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"dataset", required_argument, NULL, OPT_DATASET},
        {"h5-link-dirs", required_argument, NULL, OPT_H5_LINK_DIRS},
        {"h5-links-anywhere", no_argument, NULL, OPT_H5_LINKS_ANYWHERE},
        {"first", required_argument, NULL, OPT_FIRST},
        {"count", required_argument, NULL, OPT_COUNT},
        {"algorithm", required_argument, NULL, OPT_ALGORITHM},
        {"kernel-size", required_argument, NULL, OPT_KERNEL},
        {"sigma-b", required_argument, NULL, OPT_SIGMA_B},
        {"sigma-s", required_argument, NULL, OPT_SIGMA_S},
        {"global-threshold", required_argument, NULL, OPT_GLOBAL},
        {"min-local", required_argument, NULL, OPT_MIN_LOCAL},
        {"gain", required_argument, NULL, OPT_GAIN},
        {"gain-map", required_argument, NULL, OPT_GAIN_MAP},
        {"mask", required_argument, NULL, OPT_MASK},
        {"no-pixel-mask", no_argument, NULL, OPT_NO_PIXEL_MASK},
        {"overload", required_argument, NULL, OPT_OVERLOAD},
        {"connectivity", required_argument, NULL, OPT_CONNECTIVITY},
        {"3d", no_argument, NULL, OPT_3D},
        {"decode", required_argument, NULL, OPT_DECODE},
        {"min-spot-size", required_argument, NULL, OPT_MIN_SIZE},
        {"max-spot-size", required_argument, NULL, OPT_MAX_SIZE},
        {"max-separation", required_argument, NULL, OPT_MAX_SEP},
        {"max-strong-fraction", required_argument, NULL, OPT_MAX_FRACTION},
        {"window", required_argument, NULL, OPT_WINDOW},
        {"strong-mask", required_argument, NULL, OPT_STRONG},
        {"out", required_argument, NULL, 'o'},
        {"json", no_argument, NULL, OPT_JSON},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
        {"wavelength-a", required_argument, NULL, OPT_WAVELENGTH},
        {"distance-mm", required_argument, NULL, OPT_DISTANCE},
        {"beam-center", required_argument, NULL, OPT_BEAM},
        {"pixel-mm", required_argument, NULL, OPT_PIXEL},
        {"d-min", required_argument, NULL, OPT_D_MIN},
        {"d-max", required_argument, NULL, OPT_D_MAX},
        {"ice-rings", no_argument, NULL, OPT_ICE},
        {"ice-ring-width", required_argument, NULL, OPT_ICE_WIDTH},
        {"untrusted-rect", required_argument, NULL, OPT_RECT},
        {"untrusted-circle", required_argument, NULL, OPT_CIRCLE},
        {"untrusted-polygon", required_argument, NULL, OPT_POLYGON},
        {"beamstop-circle", required_argument, NULL, OPT_BEAMSTOP},
        {"convention", required_argument, NULL, OPT_CONVENTION},
        {"summary", required_argument, NULL, OPT_SUMMARY},
        {"summary-plot", required_argument, NULL, OPT_SUMMARY_PLOT},
        {"panels", required_argument, NULL, OPT_PANELS},
        {"out-h5", required_argument, NULL, OPT_OUT_H5},
        {"refine", required_argument, NULL, OPT_REFINE},
        {"background", required_argument, NULL, OPT_BACKGROUND},
        {"mesh-size", required_argument, NULL, OPT_MESH_SIZE},
        {"stamp-radius", required_argument, NULL, OPT_STAMP_RADIUS},
        {"moffat-beta", required_argument, NULL, OPT_MOFFAT_BETA},
        {"detector-gain", required_argument, NULL, OPT_DET_GAIN},
        {"read-noise", required_argument, NULL, OPT_READ_NOISE},
        {"bias", required_argument, NULL, OPT_BIAS},
        {"ccd", no_argument, NULL, OPT_CCD},
        {"deblend", no_argument, NULL, OPT_DEBLEND},
        {"deblend-levels", required_argument, NULL, OPT_DEBLEND_LEVELS},
        {"deblend-contrast", required_argument, NULL, OPT_DEBLEND_CONTRAST},
        {"follow", required_argument, NULL, OPT_FOLLOW},
        {"follow-pattern", required_argument, NULL, OPT_FOLLOW_PATTERN},
        {"follow-idle", required_argument, NULL, OPT_FOLLOW_IDLE},
        {"follow-poll", required_argument, NULL, OPT_FOLLOW_POLL},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *S = SUB;
    sw_diffraction_geometry_init(&o->geom_opt);
    o->dmask.shapes = o->shapes;
    sw_find_params_default(&o->p, 1, 1, SW_PIX_U16);
    sw_refine_params_default(&o->rp, 1, 1, SW_PIX_U16);
    o->rp.method = SW_REFINE_NONE;
    o->count = -1;
    o->progress = -1;
    int c;
    long v;
    double d;
    sw_cli_getopt_reset();
    while ((c = sw_cli_getopt(S, argc, argv, "o:h", longopts)) != -1) {
        const char *name = sw_cli_option_name(argv);
        switch (c) {
        case OPT_DATASET: o->dataset = optarg; break;
        case OPT_H5_LINK_DIRS: sw_cli_inputs_h5_links(optarg, -1); break;
        case OPT_H5_LINKS_ANYWHERE: sw_cli_inputs_h5_links(NULL, 1); break;
        case OPT_FIRST:
            if (sw_cli_parse_long(optarg, 0, LONG_MAX, &o->first) != 0)
                return sw_cli_usage(S, "%s: '%s' is not a frame number >= 0", name, optarg);
            break;
        case OPT_COUNT:
            if (sw_cli_parse_long(optarg, 1, LONG_MAX, &o->count) != 0)
                return sw_cli_usage(S, "%s: '%s' is not a count >= 1", name, optarg);
            break;
        case OPT_ALGORITHM:
            if (sw_find_algorithm_parse(optarg, &o->p.algorithm) != SW_OK)
                return sw_cli_usage(S, "%s: '%s' is not dispersion or dispersion_extended", name,
                                    optarg);
            break;
        case OPT_KERNEL: {
            double k[2];
            if (sw_cli_parse_list(optarg, k, 2) == 0) {
            } else if (sw_cli_parse_double(optarg, &k[0]) == 0) {
                k[1] = k[0];
            } else {
                return sw_cli_usage(S, "%s: '%s' is not K or KX,KY", name, optarg);
            }
            for (int i = 0; i < 2; i++)
                if (k[i] != floor(k[i]) || k[i] < 1 || k[i] > SW_FIND_MAX_KERNEL)
                    return sw_cli_usage(S, "%s: half-sizes must be whole numbers 1..%d", name,
                                        SW_FIND_MAX_KERNEL);
            o->p.kernel_x = (int32_t)k[0];
            o->p.kernel_y = (int32_t)k[1];
            break;
        }
        case OPT_SIGMA_B:
        case OPT_SIGMA_S:
        case OPT_GLOBAL:
        case OPT_GAIN:
        case OPT_MAX_SEP:
        case OPT_MAX_FRACTION:
        case OPT_OVERLOAD:
            if (sw_cli_opt_double(S, name, optarg, SW_CLI_NONNEG, "a number >= 0", &d) !=
                SW_EXIT_OK)
                return SW_EXIT_USAGE;
            if (c == OPT_SIGMA_B) {
                o->p.sigma_background = d;
                o->have_sigma_b = 1;
            } else if (c == OPT_SIGMA_S) {
                o->p.sigma_strong = d;
                o->have_sigma_s = 1;
            } else if (c == OPT_GLOBAL)
                o->p.global_threshold = d;
            else if (c == OPT_MAX_SEP)
                o->p.max_separation = d;
            else if (c == OPT_MAX_FRACTION)
                o->p.max_strong_fraction = d;
            else if (c == OPT_OVERLOAD) {
                if (d <= 0)
                    return sw_cli_usage(S, "%s: the overload must be > 0", name);
                o->p.overload = d;
                o->have_overload = 1;
            } else {
                if (d <= 0)
                    return sw_cli_usage(S, "%s: the gain must be > 0", name);
                o->p.gain = d;
                o->have_gain = 1;
            }
            break;
        case OPT_REFINE:
            if (sw_refine_method_parse(optarg, &o->rp.method) != SW_OK)
                return sw_cli_usage(S, "%s: '%s' is not none, xwin, gauss or moffat", name, optarg);
            break;
        case OPT_BACKGROUND:
            if (sw_refine_background_parse(optarg, &o->rp.background) != SW_OK)
                return sw_cli_usage(S, "%s: '%s' is not none, annulus or mesh", name, optarg);
            break;
        case OPT_MESH_SIZE:
            if (sw_cli_parse_long(optarg, 4, 4096, &v) != 0)
                return sw_cli_usage(S, "%s: '%s' is not a box side 4..4096 px", name, optarg);
            o->rp.mesh_size = (int32_t)v;
            break;
        case OPT_STAMP_RADIUS:
            if (sw_cli_parse_long(optarg, 2, SW_REFINE_MAX_RADIUS, &v) != 0)
                return sw_cli_usage(S, "%s: '%s' is not a radius 2..%d px", name, optarg,
                                    SW_REFINE_MAX_RADIUS);
            o->rp.radius = (int32_t)v;
            break;
        case OPT_MOFFAT_BETA:
            if (sw_cli_parse_double(optarg, &d) != 0 || !(d > 1.0 && d <= 100.0))
                return sw_cli_usage(S, "%s: '%s' is not an exponent 1 < beta <= 100", name, optarg);
            o->moffat_beta = d;
            break;
        case OPT_DET_GAIN:
            if (sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE, "a gain > 0 (e-/ADU)", &d) !=
                SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->rp.gain = d;
            o->have_det_gain = 1;
            break;
        case OPT_READ_NOISE:
            if (sw_cli_opt_double(S, name, optarg, SW_CLI_NONNEG, "a read noise >= 0 (e-)", &d) !=
                SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->rp.read_noise = d;
            break;
        case OPT_BIAS:
            if (sw_cli_parse_double(optarg, &d) != 0 || !isfinite(d))
                return sw_cli_usage(S, "%s: '%s' is not a bias in ADU", name, optarg);
            o->rp.bias = d;
            break;
        case OPT_CCD: o->ccd = 1; break;
        case OPT_DEBLEND: o->p.deblend = 1; break;
        case OPT_DEBLEND_LEVELS:
            if (sw_cli_parse_long(optarg, 1, SW_FIND_MAX_DEBLEND_LEVELS, &v) != 0)
                return sw_cli_usage(S, "%s: '%s' is not a number of levels 1..%d", name, optarg,
                                    SW_FIND_MAX_DEBLEND_LEVELS);
            o->p.deblend_levels = (int32_t)v;
            o->have_deblend_opt = 1;
            break;
        case OPT_DEBLEND_CONTRAST:
            if (sw_cli_parse_double(optarg, &d) != 0 || !(d >= 0.0 && d <= 1.0))
                return sw_cli_usage(S, "%s: '%s' is not a contrast 0..1", name, optarg);
            o->p.deblend_contrast = d;
            o->have_deblend_opt = 1;
            break;
        case OPT_MIN_LOCAL:
            if (sw_cli_parse_long(optarg, 0, 1000000, &v) != 0 || v == 1)
                return sw_cli_usage(S, "%s: '%s' is not 0 or a count >= 2", name, optarg);
            o->p.min_local = (int32_t)v;
            break;
        case OPT_GAIN_MAP: o->gain_map = optarg; break;
        case OPT_MASK: o->mask = optarg; break;
        case OPT_NO_PIXEL_MASK: o->no_pixel_mask = 1; break;
        case OPT_CONNECTIVITY:
            if (sw_cli_parse_long(optarg, 4, 8, &v) != 0 || (v != 4 && v != 8))
                return sw_cli_usage(S, "%s: '%s' is not 4 or 8", name, optarg);
            o->p.connectivity = (int32_t)v;
            break;
        case OPT_3D: o->three_d = 1; break;
        case OPT_DECODE:
            if (!strcmp(optarg, "auto"))
                o->decode = DECODE_AUTO;
            else if (!strcmp(optarg, "cpu"))
                o->decode = DECODE_CPU;
            else if (!strcmp(optarg, "gpu"))
                o->decode = DECODE_GPU;
            else
                return sw_cli_usage(SUB, "--decode: '%s' is not auto, cpu or gpu", optarg);
            break;
        case OPT_MIN_SIZE:
        case OPT_MAX_SIZE:
            if (sw_cli_parse_long(optarg, 0, LONG_MAX, &v) != 0)
                return sw_cli_usage(S, "%s: '%s' is not a pixel count >= 0", name, optarg);
            if (c == OPT_MIN_SIZE)
                o->p.min_spot_size = v;
            else
                o->p.max_spot_size = v;
            break;
        case OPT_WINDOW:
            if (strcmp(optarg, "auto") == 0)
                o->p.window = SW_FIND_WINDOW_AUTO;
            else if (strcmp(optarg, "brute") == 0)
                o->p.window = SW_FIND_WINDOW_BRUTE;
            else if (strcmp(optarg, "tiled") == 0)
                o->p.window = SW_FIND_WINDOW_TILED;
            else
                return sw_cli_usage(S, "%s: '%s' is not auto, brute or tiled", name, optarg);
            break;
        case OPT_STRONG: o->strong = optarg; break;
        case 'o': o->out = optarg; break;
        case OPT_JSON: o->json = 1; break;
        case OPT_PROGRESS: o->progress = 1; break;
        case OPT_NO_PROGRESS: o->progress = 0; break;
        case OPT_WAVELENGTH:
        case OPT_DISTANCE:
            if (sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE,
                                  c == OPT_WAVELENGTH ? "a wavelength > 0 (angstrom)"
                                                      : "a distance > 0 (mm)",
                                  &d) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            if (c == OPT_WAVELENGTH) {
                o->geom_opt.wavelength_a = d;
                o->geom_opt.have |= SW_DG_WAVELENGTH;
            } else {
                o->geom_opt.distance_mm = d;
                o->geom_opt.have |= SW_DG_DISTANCE;
            }
            break;
        case OPT_BEAM:
            if (sw_cli_opt_pair(S, name, optarg, "X,Y in pixels", &o->geom_opt.beam_x_px,
                                &o->geom_opt.beam_y_px) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->geom_opt.have |= SW_DG_BEAM;
            break;
        case OPT_PIXEL: {
            double px[2];
            if (sw_cli_parse_list(optarg, px, 2) == 0) {
            } else if (sw_cli_parse_double(optarg, &px[0]) == 0) {
                px[1] = px[0];
            } else {
                return sw_cli_usage(S, "%s: '%s' is not P or PX,PY in mm", name, optarg);
            }
            if (!(px[0] > 0.0) || !(px[1] > 0.0))
                return sw_cli_usage(S, "%s: pixel sizes must be > 0 mm", name);
            o->geom_opt.pixel_x_mm = px[0];
            o->geom_opt.pixel_y_mm = px[1];
            o->geom_opt.have |= SW_DG_PIXEL;
            break;
        }
        case OPT_D_MIN:
        case OPT_D_MAX:
        case OPT_ICE_WIDTH:
            if (sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE,
                                  c == OPT_ICE_WIDTH ? "a width > 0 (1/A^2)"
                                                     : "a d-spacing > 0 (angstrom)",
                                  &d) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            if (c == OPT_D_MIN)
                o->dmask.d_min = d;
            else if (c == OPT_D_MAX)
                o->dmask.d_max = d;
            else
                o->dmask.ice_ring_width = d;
            break;
        case OPT_ICE: o->dmask.ice_rings = 1; break;
        case OPT_RECT:
        case OPT_CIRCLE:
        case OPT_BEAMSTOP:
        case OPT_POLYGON: {
            if (o->dmask.nshapes >= MAX_SHAPES)
                return sw_cli_usage(S, "%s: at most %d untrusted regions", name, MAX_SHAPES);
            sw_diffraction_shape *sh = &o->shapes[o->dmask.nshapes];
            memset(sh, 0, sizeof *sh);
            if (c == OPT_RECT) {
                sh->kind = SW_DIFFRACTION_RECT;
                if (sw_cli_parse_list(optarg, sh->v, 4) != 0 || !(sh->v[1] > sh->v[0]) ||
                    !(sh->v[3] > sh->v[2]))
                    return sw_cli_usage(S, "%s: '%s' is not X0,X1,Y0,Y1 with X0 < X1, Y0 < Y1",
                                        name, optarg);
            } else if (c == OPT_POLYGON) {
                double *xy = o->vertices[o->dmask.nshapes];
                int n = 0;
                const char *t = optarg;
                while (n < 2 * MAX_VERTICES) {
                    char *end;
                    errno = 0;
                    xy[n] = strtod(t, &end);
                    if (end == t || errno || !isfinite(xy[n]))
                        break;
                    n++;
                    t = end;
                    if (*t != ',')
                        break;
                    t++;
                }
                if (*t != '\0' || n < 6 || n % 2)
                    return sw_cli_usage(S,
                                        "%s: '%s' is not X1,Y1,X2,Y2,X3,Y3[,...] (3 to %d "
                                        "vertices)",
                                        name, optarg, MAX_VERTICES);
                sh->kind = SW_DIFFRACTION_POLYGON;
                sh->nvertices = n / 2;
                sh->xy = xy;
            } else {
                sh->kind = SW_DIFFRACTION_CIRCLE;
                if (sw_cli_parse_list(optarg, sh->v, 3) != 0 || !(sh->v[2] > 0.0))
                    return sw_cli_usage(S, "%s: '%s' is not X,Y,R with R > 0", name, optarg);
                o->nbeamstop += c == OPT_BEAMSTOP;
            }
            o->dmask.nshapes++;
            break;
        }
        case OPT_PANELS: {
            char buf[128];
            double lay[4] = {0, 0, 0, 0};
            snprintf(buf, sizeof buf, "%s", optarg);
            char *xs = strchr(buf, 'x');
            if (xs)
                *xs = ',';
            int ok = xs && strlen(optarg) < sizeof buf &&
                     (sw_cli_parse_list(buf, lay, 4) == 0 || sw_cli_parse_list(buf, lay, 2) == 0);
            for (int i = 0; ok && i < 4; i++)
                ok = lay[i] == floor(lay[i]) && lay[i] >= (i < 2 ? 1 : 0) &&
                     lay[i] <= SW_IMAGE_MAX_DIM;
            if (!ok)
                return sw_cli_usage(S,
                                    "%s: '%s' is not MWxMH[,GX,GY] (module size >= 1 px, gaps "
                                    ">= 0 px)",
                                    name, optarg);
            o->panels.module_w = (int32_t)lay[0];
            o->panels.module_h = (int32_t)lay[1];
            o->panels.gap_x = (int32_t)lay[2];
            o->panels.gap_y = (int32_t)lay[3];
            o->dmask.panels = &o->panels;
            break;
        }
        case OPT_CONVENTION:
            if (strcmp(optarg, "spotwave") == 0)
                o->dials = 0;
            else if (strcmp(optarg, "dials") == 0)
                o->dials = 1;
            else
                return sw_cli_usage(S, "%s: '%s' is not spotwave or dials", name, optarg);
            break;
        case OPT_SUMMARY:
        case OPT_SUMMARY_PLOT:
        case OPT_OUT_H5:
            if (sw_cli_opt_file(S, name, optarg,
                                c == OPT_SUMMARY        ? &o->summary
                                : c == OPT_SUMMARY_PLOT ? &o->summary_plot
                                                        : &o->out_h5) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_FOLLOW: o->follow = optarg; break;
        case OPT_FOLLOW_PATTERN: o->follow_pattern = optarg; break;
        case OPT_FOLLOW_IDLE:
            if (sw_cli_opt_double(S, name, optarg, SW_CLI_NONNEG, "seconds >= 0 (0: until stopped)",
                                  &o->follow_idle) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_FOLLOW_POLL:
            if (sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE, "seconds > 0",
                                  &o->follow_poll) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            if (o->follow_poll > 3600.0)
                return sw_cli_usage(S, "%s: %g s is more than an hour", name, o->follow_poll);
            break;
        case 'h': sw_cmd_find_help(stdout); return -1;
        default: return SW_EXIT_USAGE;
        }
    }
    if (o->follow) {
        if (optind < argc)
            return sw_cli_usage(S, "--follow takes the images from its folder: no IMAGE ('%s')",
                                argv[optind]);
        const char *no = o->three_d       ? "--3d"
                         : o->strong      ? "--strong-mask"
                         : o->json        ? "--json"
                         : o->ccd         ? "--ccd"
                         : o->first != 0  ? "--first"
                         : o->count != -1 ? "--count"
                                          : NULL;
        if (no)
            return sw_cli_usage(S, "%s is not available with --follow", no);
        if (o->follow_poll == 0.0)
            o->follow_poll = SW_FIND_FOLLOW_POLL;
    } else {
        if (o->follow_pattern || o->follow_idle > 0.0 || o->follow_poll > 0.0)
            return sw_cli_usage(S, "--follow-pattern, --follow-idle and --follow-poll need "
                                   "--follow");
        if (optind >= argc)
            return sw_cli_usage(S, "no IMAGE given");
        o->inputs = argv + optind;
        o->ninputs = argc - optind;
    }
    if (o->p.max_spot_size > 0 && o->p.max_spot_size < o->p.min_spot_size)
        return sw_cli_usage(S, "--max-spot-size %lld is below --min-spot-size %lld",
                            (long long)o->p.max_spot_size, (long long)o->p.min_spot_size);
    if (o->json && (!o->out || strcmp(o->out, "-") == 0))
        return sw_cli_usage(S, "--json prints the report on standard output: give --out FILE "
                               "for the spots");
    if (o->gain_map && o->p.gain != 1.0)
        return sw_cli_usage(S, "--gain and --gain-map exclude each other");
    if (o->three_d && o->rp.method != SW_REFINE_NONE)
        return sw_cli_usage(S, "--refine works on 2-D spots: not with --3d");
    if (o->three_d && o->p.deblend)
        return sw_cli_usage(S, "--deblend works on 2-D spots: not with --3d");
    if (o->have_deblend_opt && !o->p.deblend)
        return sw_cli_usage(S, "--deblend-levels and --deblend-contrast need --deblend");
    if (o->rp.method == SW_REFINE_NONE && o->rp.background != SW_BACKGROUND_NONE)
        return sw_cli_usage(S, "--background needs --refine xwin, gauss or moffat");
    if (o->moffat_beta > 0.0 && o->rp.method != SW_REFINE_MOFFAT)
        return sw_cli_usage(S, "--moffat-beta needs --refine moffat");
    if (o->dmask.d_min > 0.0 && o->dmask.d_max > 0.0 && !(o->dmask.d_min < o->dmask.d_max))
        return sw_cli_usage(S, "--d-min %g is not below --d-max %g (angstrom)", o->dmask.d_min,
                            o->dmask.d_max);
    if (o->dmask.ice_ring_width > 0.0 && !o->dmask.ice_rings)
        return sw_cli_usage(S, "--ice-ring-width needs --ice-rings");
    return SW_EXIT_OK;
}

/* ---------------------------------------------------------------- inputs */

static void free_inputs(find_job *j)
{
    sw_cli_inputs_free(&j->in);
    free(j->pixel_mask);
    j->pixel_mask = NULL;
    j->pixel_n = 0;
    free(j->modules);
    j->modules = NULL;
    j->nmodules = 0;
    sw_image_free(&j->strong_cube);
}

/* sw_cli_inputs_open's call for each HDF5 input: several masters (several sweeps) give the
 * lowest overload, and a pixel is good only when every pixel mask says so. */
static int merge_h5(void *user, sw_cli_input *in, const sw_h5_info *info)
{
    find_job *j = user;
    if (in == &j->in.in[0]) { /* the first input's modules (its geometry is the run's) */
        int32_t n = 0;
        sw_h5_read_modules(in->h5, NULL, 0, &n);
        if (n > 0) {
            j->modules = malloc((size_t)n * sizeof *j->modules);
            if (!j->modules)
                return sw_cli_fail(SUB, "out of memory");
            sw_h5_read_modules(in->h5, j->modules, n, &j->nmodules);
        }
    }
    if (info->overload > 0 && (j->file_overload == 0 || info->overload < j->file_overload))
        j->file_overload = info->overload;
    if (!info->has_pixel_mask || j->o->no_pixel_mask)
        return SW_EXIT_OK;
    size_t n = (size_t)info->width * (size_t)info->height;
    uint8_t *m = malloc(n);
    if (!m)
        return sw_cli_fail(SUB, "out of memory");
    sw_status st = sw_h5_read_pixel_mask(in->h5, m);
    if (st != SW_OK) {
        free(m);
        return sw_cli_fail(SUB, "%s", sw_cli_lib_error(NULL, st));
    }
    if (!j->pixel_mask) {
        j->pixel_mask = m;
        j->pixel_n = n;
    } else {
        if (j->pixel_n == n) /* other sizes are refused with the frames */
            for (size_t k = 0; k < n; k++)
                j->pixel_mask[k] = j->pixel_mask[k] && m[k];
        free(m);
    }
    return SW_EXIT_OK;
}

/* Opens every input and checks they agree on size and type. The pipeline reads the frames on
 * its own thread: the HDF5 readers get no context (SW_CLI_INPUTS_THREAD). */
static int open_inputs(sw_context *ctx, find_job *j)
{
    const find_opts *o = j->o;
    int rc = sw_cli_inputs_open(ctx, SUB, o->inputs, o->ninputs, o->dataset, SW_CLI_INPUTS_THREAD,
                                merge_h5, j, &j->in);
    if (rc != SW_EXIT_OK)
        return rc;
    /* a CBF's Count_cutoff is its overload, as an HDF5 master's (the lowest of the inputs') */
    for (int i = 0; i < j->in.n; i++) {
        const sw_cli_input *in = &j->in.in[i];
        if (!in->h5 && (in->geom.have & SW_DG_OVERLOAD) &&
            (j->file_overload == 0 || in->geom.overload < j->file_overload))
            j->file_overload = in->geom.overload;
    }
    if (!j->in.valid || o->no_pixel_mask)
        return SW_EXIT_OK;
    /* a CBF's negative pixels (Pilatus: -1 bad, -2 a gap between modules) are a pixel mask */
    size_t n = (size_t)j->in.width * (size_t)j->in.height;
    if (!j->pixel_mask) {
        j->pixel_mask = malloc(n);
        if (!j->pixel_mask)
            return sw_cli_fail(SUB, "out of memory");
        memcpy(j->pixel_mask, j->in.valid, n);
        j->pixel_n = n;
    } else if (j->pixel_n == n) {
        for (size_t k = 0; k < n; k++)
            j->pixel_mask[k] = j->pixel_mask[k] && j->in.valid[k];
    }
    return SW_EXIT_OK;
}

/* A per-pixel map (mask or gain map) of the frame size from a FITS/PGM file, as floats. */
static int read_map(sw_context *ctx, const find_job *j, const char *what, const char *path,
                    float **out)
{
    sw_frames fr;
    int rc = sw_cli_read_frames(ctx, SUB, what, path, 0, &fr);
    if (rc != SW_EXIT_OK)
        return rc;
    const sw_image *img = &fr.frames[0];
    if (fr.count != 1 || img->width != j->in.width || img->height != j->in.height) {
        rc = sw_cli_fail(SUB, "%s '%s' is %d x %d (%d frames); the frames are %d x %d", what, path,
                         img->width, img->height, fr.count, j->in.width, j->in.height);
        sw_frames_free(&fr);
        return rc;
    }
    float *m = malloc((size_t)j->in.width * (size_t)j->in.height * sizeof(float));
    if (!m) {
        sw_frames_free(&fr);
        return sw_cli_fail(SUB, "out of memory");
    }
    for (int32_t y = 0; y < j->in.height; y++)
        for (int32_t x = 0; x < j->in.width; x++)
            m[(size_t)y * j->in.width + x] = (float)sw_image_get(img, x, y);
    sw_frames_free(&fr);
    *out = m;
    return SW_EXIT_OK;
}

/* ---------------------------------------------------------------- the frame source */

/* Reader thread: frame `index` (global) into dst. No context is used here. */
static sw_status source_read(void *user, int64_t index, sw_image *dst)
{
    return sw_cli_inputs_read(&((find_job *)user)->in, index, dst);
}

static sw_status source_chunks(void *user, int64_t index, void *buf, size_t cap,
                               sw_find_chunk *chunks, int64_t max_chunks, int64_t *nchunks)
{
    return sw_cli_inputs_read_chunks(&((find_job *)user)->in, index, buf, cap, chunks, max_chunks,
                                     nchunks);
}

static sw_status source_strong(void *user, int64_t index, const sw_image *mask)
{
    find_job *j = user;
    int64_t k = index - j->strong_first;
    for (int32_t y = 0; y < mask->height; y++)
        memcpy(sw_image_row(&j->strong_cube, (int32_t)(k * mask->height + y)),
               sw_image_row(mask, y), (size_t)mask->width);
    return SW_OK;
}

static void source_progress(void *user, int64_t done, int64_t total)
{
    sw_cli_progress_update(&((find_job *)user)->bar, done, total);
}

/* ---------------------------------------------------------------- output */

/* The CSV's header line. */
static void spots_header(FILE *f, const find_job *j, const sw_refine_list *refined)
{
    const find_opts *o = j->o;
    fprintf(
        f, "frame,x_px,y_px,x_var,y_var,intensity,npix,bbox_x0,bbox_x1,bbox_y0,bbox_y1%s%s%s%s%s\n",
        o->three_d ? ",z_var,bbox_z0,bbox_z1" : "", j->have_geom ? ",d_a" : "",
        o->dmask.panels ? ",panel" : "",
        refined ? ",refine_flags,flux_adu,sigma_px,background_adu" : "",
        o->p.deblend ? ",parent" : "");
}

/* The CSV's rows of spots[from..to-1] (refined: their results, in step). */
static void spots_rows(FILE *f, const find_job *j, const sw_spot_list *spots,
                       const sw_refine_list *refined, int64_t from, int64_t to)
{
    const find_opts *o = j->o;
    const double shift = o->dials ? 0.5 : 0.0;
    for (int64_t i = from; i < to; i++) {
        const sw_spot *s = &spots->spots[i];
        if (o->three_d)
            fprintf(f, "%.6f", s->z);
        else
            fprintf(f, "%lld", (long long)s->z0);
        fprintf(f, ",%.4f,%.4f,%.6g,%.6g,%.17g,%lld,%d,%d,%d,%d", s->x + shift, s->y + shift,
                s->x_var, s->y_var, s->intensity, (long long)s->npix, s->x0, s->x1, s->y0, s->y1);
        if (o->three_d)
            fprintf(f, ",%.6g,%lld,%lld", s->z_var, (long long)s->z0, (long long)s->z1);
        if (j->have_geom) {
            const double d = sw_diffraction_d_at(&j->geom, o->dmask.panels, j->in.width,
                                                 j->in.height, s->x, s->y);
            if (isfinite(d))
                fprintf(f, ",%.5f", d);
            else
                fputs(",inf", f);
        }
        if (o->dmask.panels)
            fprintf(f, ",%d",
                    (int)sw_diffraction_panel_at(o->dmask.panels, j->in.width, j->in.height, s->x,
                                                 s->y));
        if (refined) {
            const sw_refine_result *r = &refined->items[i];
            fprintf(f, ",%d,%.6g,%.5g,%.6g", (int)r->flags, r->flux, r->sigma, r->background);
        }
        if (o->p.deblend)
            fprintf(f, ",%lld", (long long)s->parent);
        fputc('\n', f);
    }
}

/* The CSV: x and y in the convention asked for (DIALS's: + 0.5), the d-spacing last when the
 * geometry is complete (d from the centroid in spotwave's convention, as the beam centre is). */
static int write_spots(const find_job *j, const sw_spot_list *spots, const sw_refine_list *refined)
{
    sw_cli_out out;
    int rc = sw_cli_out_open(SUB, &out, j->o->out);
    if (rc != SW_EXIT_OK)
        return rc;
    spots_header(out.f, j, refined);
    spots_rows(out.f, j, spots, refined, 0, spots->count);
    return sw_cli_out_close(SUB, &out, 1);
}

/* ---------------------------------------------------------------- the per-frame summary */

/* The frame a spot counts on: its own (2-D), or floor(z + 0.5) for a 3-D spot: DIALS's
 * per-image analysis takes floor of its z, whose frame i spans [i, i + 1) (ours is centred on i).
 */
static int64_t spot_frame(const sw_spot *s, int three_d)
{
    return three_d ? (int64_t)floor(s->z + 0.5) : s->z0;
}

/* Spots by the frame in z0. */
static int cmp_frame(const void *a, const void *b)
{
    const int64_t fa = ((const sw_spot *)a)->z0, fb = ((const sw_spot *)b)->z0;
    return (fa > fb) - (fa < fb);
}

static void put_count(FILE *f, const char *key, int64_t v)
{
    if (v < 0)
        fprintf(f, ",\"%s\":null", key);
    else
        fprintf(f, ",\"%s\":%lld", key, (long long)v);
}

/* One summary per frame first..first+count-1 (frames without spots too) into sum[count]. */
static int summarise(sw_context *ctx, const find_job *j, const sw_spot_list *spots, int64_t first,
                     int64_t count, sw_diffraction_summary *sum)
{
    sw_spot *sorted = malloc((size_t)(spots->count ? spots->count : 1) * sizeof *sorted);
    if (!sorted)
        return sw_cli_fail(SUB, "out of memory");
    if (spots->count)
        memcpy(sorted, spots->spots, (size_t)spots->count * sizeof *sorted);
    /* the copies carry the frame they count on in z0 (the summary does not read it) */
    for (int64_t i = 0; i < spots->count; i++)
        sorted[i].z0 = spot_frame(&sorted[i], j->o->three_d);
    qsort(sorted, (size_t)spots->count, sizeof *sorted, cmp_frame);
    const sw_diffraction_geometry *g = j->have_geom ? &j->geom : NULL;
    int64_t k = 0;
    for (int64_t f = 0; f < count; f++) {
        while (k < spots->count && sorted[k].z0 < first + f)
            k++;
        int64_t e = k;
        while (e < spots->count && sorted[e].z0 == first + f)
            e++;
        sw_status st =
            sw_diffraction_summarise_panels(ctx, g, j->o->dmask.panels, j->in.width, j->in.height,
                                            sorted + k, e - k, first + f, &sum[f]);
        if (st != SW_OK) {
            free(sorted);
            return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
        }
        k = e;
    }
    free(sorted);
    return SW_EXIT_OK;
}

/* One frame's JSON line (file: --follow's "file" key, the input the frame came from; or NULL). */
static void summary_line(FILE *f, const sw_diffraction_summary *s, const char *file)
{
    fprintf(f, "{\"frame\":%lld,\"n_spots\":%lld", (long long)s->frame, (long long)s->n_spots);
    put_count(f, "n_spots_d_lt_4A", s->n_spots_d_lt_4a);
    put_count(f, "n_spots_d_gt_4A", s->n_spots_d_gt_4a);
    fprintf(f, ",\"total_intensity\":%.17g", s->total_intensity);
    if (s->d_min_estimate > 0.0)
        fprintf(f, ",\"resolution_estimate_a\":%.4f", s->d_min_estimate);
    else
        fputs(",\"resolution_estimate_a\":null", f);
    if (file) {
        fputs(",\"file\":", f);
        sw_json_write_string(f, file);
    }
    fputs("}\n", f);
}

static int write_summary(const find_opts *o, const sw_diffraction_summary *sum, int64_t count)
{
    sw_cli_out out;
    int rc = sw_cli_out_open(SUB, &out, o->summary);
    if (rc != SW_EXIT_OK)
        return rc;
    for (int64_t f = 0; f < count; f++)
        summary_line(out.f, &sum[f], NULL);
    return sw_cli_out_close(SUB, &out, 1);
}

#define SUMMARY_PLOT_WIDTH  1200
#define SUMMARY_PLOT_HEIGHT 900

/* Spot counts (all, d < 4 A) and the resolution estimate against frame, one panel each. */
static int write_summary_plot(const find_job *j, const sw_diffraction_summary *sum, int64_t count)
{
    const find_opts *o = j->o;
    double *buf = malloc((size_t)count * 4 * sizeof *buf);
    if (!buf)
        return sw_cli_fail(SUB, "out of memory (plot)");
    double *x = buf, *n = buf + count, *n4 = buf + 2 * count, *res = buf + 3 * count;
    for (int64_t f = 0; f < count; f++) {
        x[f] = (double)sum[f].frame;
        n[f] = (double)sum[f].n_spots;
        n4[f] = sum[f].n_spots_d_lt_4a >= 0 ? (double)sum[f].n_spots_d_lt_4a : NAN;
        res[f] = sum[f].d_min_estimate > 0.0 ? sum[f].d_min_estimate : NAN;
    }
    const sw_plot_rgb blue = {31, 119, 180}, orange = {255, 127, 14}, red = {214, 39, 40},
                      white = {255, 255, 255};
    const sw_plot_series top[2] = {
        {x, n, count, blue, 0, "all spots"},
        {x, n4, count, orange, 0, "d under 4 A"},
    };
    const sw_plot_series bottom[1] = {{x, res, count, red, 0, "resolution estimate"}};
    sw_plot_canvas c;
    if (sw_plot_canvas_init(&c, SUMMARY_PLOT_WIDTH, SUMMARY_PLOT_HEIGHT, white) != 0) {
        free(buf);
        return sw_cli_fail(SUB, "out of memory (plot)");
    }
    const int32_t half = SUMMARY_PLOT_HEIGHT / 2;
    const double x0 = (double)sum[0].frame, x1 = (double)sum[count - 1].frame;
    sw_plot_panel p1 = {.x = 0,
                        .y = 0,
                        .width = SUMMARY_PLOT_WIDTH,
                        .height = half,
                        .title = "spots per frame",
                        .xlabel = "frame",
                        .ylabel = "spots",
                        .xmin = x0,
                        .xmax = x1 > x0 ? x1 : x0 + 1.0,
                        .ymin = 0.0,
                        .ymax = NAN,
                        .series = top,
                        .nseries = j->have_geom ? 2 : 1,
                        .vline = NAN,
                        .scale = 2};
    sw_plot_panel p2 = p1;
    p2.y = half;
    p2.height = SUMMARY_PLOT_HEIGHT - half;
    p2.title = "resolution estimate (Zhang et al. 2006, method 2)";
    p2.ylabel = "d min (A)";
    p2.ymin = NAN;
    p2.series = bottom;
    p2.nseries = 1;
    int rc = SW_EXIT_OK;
    if (sw_plot_panel_draw(&c, &p1, NULL) != 0 || sw_plot_panel_draw(&c, &p2, NULL) != 0)
        rc = sw_cli_fail(SUB, "internal error: the plot's panels do not fit");
    char err[512];
    const char *staged =
        rc == SW_EXIT_OK ? sw_cli_file_staged("--summary-plot", o->summary_plot) : NULL;
    if (rc == SW_EXIT_OK && !staged)
        rc = SW_EXIT_FAIL;
    if (rc == SW_EXIT_OK && sw_plot_write_png(&c, staged, err, sizeof err) != 0)
        rc = sw_cli_fail(SUB, "%s", err);
    sw_plot_canvas_free(&c);
    free(buf);
    return rc;
}

/* ---------------------------------------------------------------- the JSON report */

/* The geometry's fields and where each came from ("options" over "file"). */
static void json_geometry(cJSON *r, const find_job *j)
{
    const sw_diffraction_geometry *g = &j->geom;
    const uint32_t opt = j->o->geom_opt.have, file = j->file_geom.have;
    cJSON *o = cJSON_AddObjectToObject(r, "geometry");
    cJSON_AddBoolToObject(o, "complete", j->have_geom);
    static const struct {
        uint32_t bit;
        const char *name;
    } fields[] = {{SW_DG_WAVELENGTH, "wavelength_a"}, {SW_DG_DISTANCE, "distance_mm"},
                  {SW_DG_BEAM, "beam_center_px"},     {SW_DG_PIXEL, "pixel_mm"},
                  {SW_DG_ORIENTATION, "orientation"}, {SW_DG_OVERLOAD, "overload"},
                  {SW_DG_EXPOSURE, "exposure_s"}};
    cJSON *from = cJSON_AddObjectToObject(o, "from");
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const uint32_t b = fields[i].bit;
        if (b & opt)
            sw_cli_json_string(from, fields[i].name, "options");
        else if (b & file)
            sw_cli_json_string(from, fields[i].name, "file");
    }
    if (g->have & SW_DG_WAVELENGTH)
        sw_cli_json_double(o, "wavelength_a", g->wavelength_a);
    if (g->have & SW_DG_DISTANCE)
        sw_cli_json_double(o, "distance_mm", g->distance_mm);
    if (g->have & SW_DG_BEAM) {
        cJSON *a = cJSON_AddArrayToObject(o, "beam_center_px");
        cJSON_AddItemToArray(a, sw_cli_json_num(g->beam_x_px));
        cJSON_AddItemToArray(a, sw_cli_json_num(g->beam_y_px));
    }
    if (g->have & SW_DG_PIXEL) {
        cJSON *a = cJSON_AddArrayToObject(o, "pixel_mm");
        cJSON_AddItemToArray(a, sw_cli_json_num(g->pixel_x_mm));
        cJSON_AddItemToArray(a, sw_cli_json_num(g->pixel_y_mm));
    }
    cJSON_AddBoolToObject(o, "orientation", g->orientation != 0);
    const sw_diffraction_mask_params *m = &j->o->dmask;
    cJSON *k = cJSON_AddObjectToObject(r, "geometry_masks");
    if (m->d_min > 0.0)
        sw_cli_json_double(k, "d_min_a", m->d_min);
    else
        cJSON_AddNullToObject(k, "d_min_a");
    if (m->d_max > 0.0)
        sw_cli_json_double(k, "d_max_a", m->d_max);
    else
        cJSON_AddNullToObject(k, "d_max_a");
    cJSON_AddBoolToObject(k, "ice_rings", m->ice_rings);
    sw_cli_json_double(k, "ice_ring_width",
                       m->ice_ring_width > 0.0 ? m->ice_ring_width : SW_DIFFRACTION_ICE_RING_WIDTH);
    sw_cli_json_int(k, "untrusted_regions", m->nshapes - j->o->nbeamstop);
    sw_cli_json_int(k, "beamstop_circles", j->o->nbeamstop);
    if (m->panels && m->panels->nmodules > 0) { /* the master's modules */
        cJSON *pn = cJSON_AddObjectToObject(k, "panels");
        sw_cli_json_string(pn, "from", "file");
        sw_cli_json_int(pn, "count", m->panels->nmodules);
        cJSON *list = cJSON_AddArrayToObject(pn, "modules");
        for (int32_t i = 0; i < m->panels->nmodules; i++) {
            const sw_diffraction_module *md = &m->panels->modules[i];
            cJSON *e = cJSON_CreateObject();
            sw_cli_json_int_array(e, "origin_px", (const int64_t[]){md->x0, md->y0}, 2);
            sw_cli_json_int_array(e, "size_px", (const int64_t[]){md->width, md->height}, 2);
            cJSON_AddBoolToObject(e, "orientation", md->orientation != 0);
            cJSON_AddItemToArray(list, e);
        }
    } else if (m->panels) {
        cJSON *pn = cJSON_AddObjectToObject(k, "panels");
        sw_cli_json_int_array(pn, "module_px",
                              (const int64_t[]){m->panels->module_w, m->panels->module_h}, 2);
        sw_cli_json_int_array(pn, "gap_px", (const int64_t[]){m->panels->gap_x, m->panels->gap_y},
                              2);
        sw_cli_json_int(pn, "count",
                        sw_diffraction_panel_count(m->panels, j->in.width, j->in.height));
    } else {
        cJSON_AddNullToObject(k, "panels");
    }
    sw_cli_json_int(k, "masked_pixels", j->geom_masked);
}

static void json_report(const find_job *j, sw_context *ctx, const sw_find_stats *stats,
                        double seconds, int64_t first, int64_t count, const sw_cli_mpi *mpi)
{
    const find_opts *o = j->o;
    const sw_find_params *p = &o->p;
    cJSON *r = cJSON_CreateObject();
    sw_cli_json_string(r, "command", "find");
    cJSON *inputs = cJSON_AddArrayToObject(r, "inputs");
    for (int i = 0; i < o->ninputs; i++)
        cJSON_AddItemToArray(inputs, sw_cli_json_str(o->inputs[i]));
    sw_cli_json_string(r, "out", o->out);
    sw_cli_json_string(r, "convention", o->dials ? "dials" : "spotwave");
    sw_cli_json_string(r, "summary", o->summary);
    sw_cli_json_string(r, "summary_plot", o->summary_plot);
    sw_cli_json_string(r, "out_h5", o->out_h5);
    sw_cli_json_string(r, "backend", sw_backend_string(sw_context_backend(ctx)));
    sw_cli_json_string(r, "decoder", j->gpu_decode ? "gpu" : "cpu");
    sw_cli_json_int(r, "gpu_decoded_frames", j->gpu_frames);
    sw_cli_json_int_array(r, "frame_size", (const int64_t[]){j->in.width, j->in.height}, 2);
    sw_cli_json_string(r, "pixel_type", sw_pixel_type_string(j->in.type));
    sw_cli_json_int(r, "first_frame", first);
    sw_cli_json_int(r, "frames", count);
    sw_cli_json_string(r, "algorithm", sw_find_algorithm_string(p->algorithm));
    sw_cli_json_int_array(r, "kernel_size", (const int64_t[]){p->kernel_x, p->kernel_y}, 2);
    sw_cli_json_double(r, "sigma_b", p->sigma_background);
    sw_cli_json_double(r, "sigma_s", p->sigma_strong);
    sw_cli_json_double(r, "global_threshold", p->global_threshold);
    sw_cli_json_int(r, "min_local", p->min_local);
    sw_cli_json_double(r, "gain", p->gain);
    sw_cli_json_string(r, "gain_map", o->gain_map);
    sw_cli_json_string(r, "mask", o->mask);
    cJSON_AddBoolToObject(r, "pixel_mask_from_file", j->pixel_mask != NULL);
    json_geometry(r, j);
    if (p->overload > 0)
        sw_cli_json_double(r, "overload", p->overload);
    else
        cJSON_AddNullToObject(r, "overload");
    sw_cli_json_int(r, "connectivity", p->connectivity);
    cJSON_AddBoolToObject(r, "three_d", o->three_d);
    sw_cli_json_int(r, "min_spot_size", p->min_spot_size);
    sw_cli_json_int(r, "max_spot_size", p->max_spot_size);
    sw_cli_json_double(r, "max_separation", p->max_separation);
    sw_cli_json_double(r, "max_strong_fraction", p->max_strong_fraction);
    sw_cli_json_int(r, "valid_pixels", stats->valid_pixels);
    sw_cli_json_int(r, "strong_pixels", stats->strong_pixels);
    sw_cli_json_int(r, "components", stats->components);
    sw_cli_json_int(r, "spots", stats->spots);
    cJSON *rej = cJSON_AddObjectToObject(r, "rejected");
    sw_cli_json_int(rej, "small", stats->rejected_small);
    sw_cli_json_int(rej, "large", stats->rejected_large);
    sw_cli_json_int(rej, "separation", stats->rejected_separation);
    sw_cli_json_fixed(r, "seconds", seconds, 6);
    sw_cli_json_fixed(r, "frames_per_second", seconds > 0 ? (double)count / seconds : 0.0, 3);
    /* keys added after the report's first version come last */
    cJSON *rf = cJSON_AddObjectToObject(r, "refine");
    sw_cli_json_string(rf, "method", sw_refine_method_string(o->rp.method));
    sw_cli_json_string(rf, "background", sw_refine_background_string(o->rp.background));
    sw_cli_json_double(rf, "detector_gain_e_per_adu", o->rp.gain);
    sw_cli_json_double(rf, "read_noise_e", o->rp.read_noise);
    sw_cli_json_double(rf, "bias_adu", o->rp.bias);
    if (o->ccd) {
        cJSON *c = cJSON_AddObjectToObject(rf, "ccd");
        sw_cli_json_double(c, "background_mean_adu", o->ccd_est.mean);
        sw_cli_json_double(c, "background_variance_adu2", o->ccd_est.variance);
        sw_cli_json_int(c, "background_pixels", o->ccd_est.npix);
        sw_cli_json_double(c, "gain_e_per_adu", o->ccd_est.gain);
        sw_cli_json_double(c, "dispersion_gain", o->ccd_est.dispersion_gain);
    } else {
        cJSON_AddNullToObject(rf, "ccd");
    }
    if (o->rp.method == SW_REFINE_MOFFAT)
        sw_cli_json_double(rf, "moffat_beta",
                           o->moffat_beta > 0.0 ? o->moffat_beta : SW_REFINE_MOFFAT_BETA);
    else
        cJSON_AddNullToObject(rf, "moffat_beta");
    cJSON *db = cJSON_AddObjectToObject(r, "deblend");
    cJSON_AddBoolToObject(db, "on", p->deblend != 0);
    sw_cli_json_int(db, "levels", p->deblend_levels);
    sw_cli_json_double(db, "contrast", p->deblend_contrast);
    sw_cli_json_int(db, "blends", stats->blends);
    sw_cli_json_int(db, "children", stats->children);
    sw_cli_mpi_json(mpi, r);
    sw_cli_json_print(r);
}

/* ---------------------------------------------------------------- CCD mode */

/* --ccd: the background statistics of frame `first` give the detector gain (unless
 * --detector-gain) and the dispersion threshold's gain (unless --gain or --gain-map). */
static int ccd_mode(sw_context *ctx, find_job *j, int64_t first)
{
    find_opts *o = j->o;
    sw_image img;
    sw_status st = sw_image_alloc(ctx, j->in.width, j->in.height, j->in.type, &img);
    if (st == SW_OK)
        st = sw_cli_inputs_read(&j->in, first, &img);
    if (st == SW_OK)
        st = sw_ccd_estimate_frame(ctx, &img, o->p.mask, o->rp.bias, o->rp.read_noise, &o->ccd_est);
    sw_image_free(&img);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "--ccd: %s", sw_cli_lib_error(ctx, st));
    if (!o->have_det_gain)
        o->rp.gain = o->ccd_est.gain;
    if (!o->have_gain && !o->gain_map)
        o->p.gain = o->ccd_est.dispersion_gain;
    /* sky-limited frames: faint (often extended) objects raise each pixel little; DIALS's 6 and
     * 3 are made for sparse diffraction spots (BENCHMARKS.md: 68 % of SExtractor's catalogue of
     * SEP's CCD frame with them, 91 % with 2 and 2; unchanged recall on simulated star fields) */
    if (!o->have_sigma_b)
        o->p.sigma_background = SW_CLI_CCD_SIGMA;
    if (!o->have_sigma_s)
        o->p.sigma_strong = SW_CLI_CCD_SIGMA;
    fprintf(stderr,
            "spotwave %s: CCD mode: background mean %.6g ADU, variance %.6g ADU^2 over %lld "
            "pixels: detector gain %.4g e-/ADU%s, dispersion gain %.4g%s\n",
            SUB, o->ccd_est.mean, o->ccd_est.variance, (long long)o->ccd_est.npix, o->ccd_est.gain,
            o->have_det_gain ? " (not used: --detector-gain)" : "", o->ccd_est.dispersion_gain,
            o->have_gain || o->gain_map ? " (not used: --gain)" : "");
    return SW_EXIT_OK;
}

/* ---------------------------------------------------------------- the run's set-up */

/* From the inputs opened in j->in: the frame size and type, the overload, the gain map, the
 * geometry (the first input's header, the options over it), the mask (--mask, the files' own, the
 * geometry-aware masks), --ccd's estimates from frame `first`, and the find (and refine) plan. */
static int prepare(sw_context *ctx, find_job *j, int64_t first)
{
    find_opts *o = j->o;
    int rc = SW_EXIT_OK;
    sw_status st0;
    o->p.width = j->in.width;
    o->p.height = j->in.height;
    o->p.type = j->in.type;
    if (!o->have_overload && j->file_overload > 0)
        o->p.overload = j->file_overload;
    if (o->gain_map) {
        if ((rc = read_map(ctx, j, "gain map", o->gain_map, &j->gain_map)) != SW_EXIT_OK)
            return rc;
        o->p.gain_map = j->gain_map;
    }
    /* the geometry: the first input's header, the options over it */
    sw_cli_inputs_geometry(&j->in, &j->file_geom);
    j->geom = j->file_geom;
    sw_diffraction_geometry_merge(&j->geom, &o->geom_opt);
    j->have_geom = sw_diffraction_geometry_check(NULL, &j->geom) == SW_OK;
    /* a header's overload (a CBF's count cut-off) when neither --overload nor HDF5 gave one */
    if (!o->have_overload && j->file_overload == 0 && (j->geom.have & SW_DG_OVERLOAD) &&
        j->geom.overload > 0)
        o->p.overload = j->geom.overload;
    const int by_d = o->dmask.d_min > 0.0 || o->dmask.d_max > 0.0 || o->dmask.ice_rings;
    if (!j->have_geom && (by_d || o->geom_opt.have)) {
        sw_diffraction_geometry_check(ctx, &j->geom);
        if (by_d) {
            rc = sw_cli_usage(SUB,
                              "%s: --d-min, --d-max and --ice-rings need it (give "
                              "--wavelength-a, --distance-mm, --beam-center, --pixel-mm)",
                              sw_cli_lib_error(ctx, SW_EINVAL));
            return rc;
        }
        fprintf(stderr, "spotwave %s: warning: no d_a column: %s\n", SUB,
                sw_cli_lib_error(ctx, SW_EINVAL));
    }
    /* a master's modules are the panels unless --panels says otherwise; a beam centre, distance,
     * pixel size or orientation given as options replaces their own placement (as it replaces
     * the file's orientation: sw_diffraction_geometry_merge) */
    if (!o->dmask.panels && j->nmodules >= 2) {
        if (o->geom_opt.have & (SW_DG_BEAM | SW_DG_DISTANCE | SW_DG_PIXEL | SW_DG_ORIENTATION))
            for (int32_t k = 0; k < j->nmodules; k++)
                j->modules[k].orientation = 0;
        memset(&j->file_panels, 0, sizeof j->file_panels);
        j->file_panels.modules = j->modules;
        j->file_panels.nmodules = j->nmodules;
        o->dmask.panels = &j->file_panels;
    }
    const int geo_mask = by_d || o->dmask.nshapes > 0 || o->dmask.panels;
    if (o->mask || j->pixel_mask || geo_mask) {
        size_t n = (size_t)j->in.width * (size_t)j->in.height;
        j->mask = malloc(n);
        if (!j->mask) {
            rc = sw_cli_fail(SUB, "out of memory");
            return rc;
        }
        memset(j->mask, 1, n);
        if (o->mask) {
            if ((rc = read_map(ctx, j, "mask", o->mask, &j->mask_f)) != SW_EXIT_OK)
                return rc;
            for (size_t i = 0; i < n; i++)
                j->mask[i] = j->mask_f[i] != 0.0f;
        }
        if (j->pixel_mask)
            for (size_t i = 0; i < n; i++)
                j->mask[i] = j->mask[i] && j->pixel_mask[i];
        if (geo_mask) {
            st0 = sw_diffraction_mask(ctx, j->have_geom ? &j->geom : NULL, &o->dmask, j->in.width,
                                      j->in.height, j->mask, &j->geom_masked);
            if (st0 != SW_OK) {
                rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st0));
                return rc;
            }
        }
        o->p.mask = j->mask;
    }

    if (o->ccd && (rc = ccd_mode(ctx, j, first)) != SW_EXIT_OK)
        return rc;
    sw_status st = sw_find_create(ctx, &o->p, &j->plan);
    if (st != SW_OK) {
        rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
        return rc;
    }
    if (o->rp.method != SW_REFINE_NONE) {
        o->rp.width = j->in.width;
        o->rp.height = j->in.height;
        o->rp.type = j->in.type;
        o->rp.mask = o->p.mask;
        o->rp.overload = o->p.overload > 0          ? o->p.overload
                         : j->in.type == SW_PIX_U8  ? 255.0
                         : j->in.type == SW_PIX_U16 ? 65534.0
                         : j->in.type == SW_PIX_U32 ? 4294967294.0
                                                    : 0.0;
        st = sw_refine_create(ctx, &o->rp, &j->refine);
        if (st == SW_OK && o->moffat_beta > 0.0)
            st = sw_refine_set_moffat_beta(j->refine, o->moffat_beta);
        if (st == SW_OK)
            st = sw_find_set_refine(j->plan, j->refine, &j->refined);
        if (st != SW_OK) {
            rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
            return rc;
        }
    }
    return SW_EXIT_OK;
}

/* Frees what prepare() made. */
static void release(find_job *j)
{
    sw_find_destroy(j->plan);
    sw_refine_destroy(j->refine);
    sw_refine_list_free(&j->refined);
    free(j->gain_map);
    free(j->mask_f);
    free(j->mask);
    j->plan = NULL;
    j->refine = NULL;
    j->gain_map = j->mask_f = NULL;
    j->mask = NULL;
}

/* ---------------------------------------------------------------- --follow */

/* A followed folder's run: the spots and summaries so far, the streamed outputs. */
typedef struct follow_run {
    sw_context *ctx;
    find_job *j;
    const char *file;   /* the input being read                                      */
    int64_t base;       /* the global number of its first frame                       */
    int64_t done;       /* its frames done                                            */
    int64_t frames;     /* frames done before it                                      */
    int64_t emitted;    /* spots written so far                                       */
    sw_spot_list spots; /* every spot so far (for --out-h5)                           */
    sw_diffraction_summary *sum;
    int64_t nsum, capsum;
    FILE *csv, *jsonl; /* written in place, flushed after every frame (csv: stdout too) */
    int write_error;   /* errno of the first failed write, 0 when none                 */
    int64_t files, skipped;
    sw_cli_progress bar;
} follow_run;

/* Reader thread: frame index of the current input (no context is used here). */
static sw_status follow_read(void *user, int64_t index, sw_image *dst)
{
    follow_run *f = user;
    if (sw_cli_stop) /* SIGINT / SIGTERM: the run ends after the frames in hand */
        return sw_error_set(NULL, SW_ECANCELED, "stopped");
    return sw_cli_inputs_read(&f->j->in, index - f->base, dst);
}

/* After every frame (a 2-D sequence has appended that frame's spots by then): its CSV rows and
 * summary line, written and flushed. */
static void follow_frame(void *user, int64_t done, int64_t total)
{
    follow_run *f = user;
    find_job *j = f->j;
    (void)total;
    const int64_t frame = f->base + done - 1, from = f->emitted, to = f->spots.count;
    const sw_refine_list *refined = j->refine ? &j->refined : NULL;
    if (f->csv)
        spots_rows(f->csv, j, &f->spots, refined, from, to);
    if (f->nsum == f->capsum) {
        int64_t cap = f->capsum ? 2 * f->capsum : 256;
        sw_diffraction_summary *p = realloc(f->sum, (size_t)cap * sizeof *p);
        if (!p) {
            f->write_error = ENOMEM;
            return;
        }
        f->sum = p;
        f->capsum = cap;
    }
    sw_diffraction_summary *sm = &f->sum[f->nsum];
    if (sw_diffraction_summarise_panels(f->ctx, j->have_geom ? &j->geom : NULL, j->o->dmask.panels,
                                        j->in.width, j->in.height, f->spots.spots + from, to - from,
                                        frame, sm) == SW_OK) {
        f->nsum++;
        if (f->jsonl)
            summary_line(f->jsonl, sm, f->file);
    }
    if ((f->csv && fflush(f->csv) != 0) || (f->jsonl && fflush(f->jsonl) != 0))
        if (!f->write_error)
            f->write_error = errno ? errno : EIO;
    f->emitted = to;
    f->done = done;
    sw_cli_progress_open_ended(&f->bar, f->frames + done, f->files, 0, 0);
}

static void follow_waiting(void *user)
{
    follow_run *f = user;
    sw_cli_progress_open_ended(&f->bar, f->frames, f->files, 1, 0);
}

/* A streamed output, written in place (not staged: it is read while it grows); "-": stdout. */
static FILE *follow_open(const char *option, const char *path)
{
    if (strcmp(path, "-") == 0)
        return stdout;
    FILE *f = fopen(path, "w");
    if (!f)
        sw_cli_fail(SUB, "%s '%s': %s", option, path, strerror(errno));
    return f;
}

/* The first input: everything the run needs is made from it, and the streams are opened.
 * SW_EXIT_OK; -1 when the file does not read (skipped: the next is tried as the first); another
 * exit code after a failure line (the run ends). */
static int follow_first(follow_run *f, sw_cli_follow *w, char *path)
{
    find_job *j = f->j;
    find_opts *o = j->o;
    o->inputs = &path;
    o->ninputs = 1;
    int rc = open_inputs(f->ctx, j);
    o->inputs = NULL;
    o->ninputs = 0;
    if (rc != SW_EXIT_OK) { /* this file does not read: the next one may be the first */
        free_inputs(j);
        j->file_overload = 0;
        return -1;
    }
    if ((rc = prepare(f->ctx, j, 0)) != SW_EXIT_OK)
        return rc;
    f->csv = follow_open("--out", o->out ? o->out : "-");
    if (!f->csv)
        return SW_EXIT_FAIL;
    if (o->out)
        sw_cli_follow_skip(w, o->out);
    if (o->summary) {
        if (!(f->jsonl = follow_open("--summary", o->summary)))
            return SW_EXIT_FAIL;
        sw_cli_follow_skip(w, o->summary);
    }
    spots_header(f->csv, j, j->refine ? &j->refined : NULL);
    return SW_EXIT_OK;
}

/*
 * find --follow DIR: image files taken from the folder as they land (cli.h, "following a
 * folder"), each read whole and its frames found in turn, numbered on from the last file's; each
 * frame's CSV rows and summary line written and flushed as it is done. Ends when no file has
 * completed for --follow-idle seconds, or on SIGINT / SIGTERM after the frame in hand; then
 * --summary-plot and --out-h5 are written. A file that cannot be read, or whose frames differ
 * in size or type from the first file's, is skipped with a line on stderr (the exit status is
 * then 1; the outputs are complete all the same).
 */
static int run_follow(sw_context *ctx, find_job *j, const sw_cli_globals *g, sw_find_stats *stats)
{
    find_opts *o = j->o;
    follow_run f;
    memset(&f, 0, sizeof f);
    f.ctx = ctx;
    f.j = j;
    sw_cli_follow *w = NULL;
    int rc = sw_cli_follow_open(SUB, o->follow, o->follow_pattern, o->follow_poll, &w);
    if (rc != SW_EXIT_OK)
        return rc;
    sw_cli_catch_stop();
    sw_cli_progress_start(&f.bar, SUB, o->progress, g->quiet, 2);
    const char *path;
    int got;
    while ((got = sw_cli_follow_next(SUB, w, o->follow_idle, follow_waiting, &f, &path)) == 1) {
        char *name = strdup(path);
        if (!name) {
            rc = sw_cli_fail(SUB, "out of memory");
            break;
        }
        int frc;
        if (!j->plan) {
            frc = follow_first(&f, w, name);
            if (frc > 0) {
                free(name);
                rc = frc; /* the options do not fit the files (or out of memory) */
                break;
            }
        } else {
            sw_cli_inputs_free(&j->in);
            frc = sw_cli_inputs_open(ctx, SUB, &name, 1, o->dataset, SW_CLI_INPUTS_THREAD, NULL,
                                     NULL, &j->in);
            if (frc == SW_EXIT_OK && (j->in.width != o->p.width || j->in.height != o->p.height ||
                                      j->in.type != o->p.type))
                frc = sw_cli_fail(SUB, "'%s' has %d x %d %s frames, the first file %d x %d %s",
                                  name, j->in.width, j->in.height, sw_pixel_type_string(j->in.type),
                                  o->p.width, o->p.height, sw_pixel_type_string(o->p.type));
        }
        if (frc != SW_EXIT_OK) {
            fprintf(stderr, "spotwave %s: skipped '%s'\n", SUB, name);
            f.skipped++;
            f.files++;
            free(name);
            continue;
        }
        f.files++;
        f.file = name;
        f.base = f.frames;
        f.done = 0;
        sw_find_source src = {follow_read, NULL, follow_frame, &f};
        sw_status st = sw_find_sequence(j->plan, f.base, j->in.total, &src, 0, &f.spots, stats);
        /* what a failed frame may have left is dropped: the rows written stay the truth */
        f.spots.count = f.emitted;
        if (j->refine)
            j->refined.count = f.emitted;
        f.frames += f.done;
        f.file = NULL;
        if (st != SW_OK && !sw_cli_stop) {
            fprintf(stderr, "spotwave %s: skipped the rest of '%s' after %lld of %lld frames: %s\n",
                    SUB, name, (long long)f.done, (long long)j->in.total,
                    sw_cli_lib_error(ctx, st));
            f.skipped++;
        }
        free(name);
        if (f.write_error || sw_cli_stop)
            break;
    }
    sw_cli_progress_open_ended(&f.bar, f.frames, f.files, 0, 1);
    sw_cli_follow_close(w);
    if (got < 0 && rc == SW_EXIT_OK)
        rc = SW_EXIT_FAIL;
    if (rc == SW_EXIT_OK && !j->plan)
        rc = sw_cli_fail(SUB, "--follow: no image file %s in '%s'%s",
                         f.files ? "could be read" : "completed", o->follow,
                         sw_cli_stop ? " before the stop" : "");
    if (f.csv && f.csv != stdout && fclose(f.csv) != 0 && !f.write_error)
        f.write_error = errno;
    if (f.jsonl && fclose(f.jsonl) != 0 && !f.write_error)
        f.write_error = errno;
    if (f.csv == stdout && fflush(stdout) != 0 && !f.write_error)
        f.write_error = errno;
    if (rc == SW_EXIT_OK && f.write_error)
        rc = sw_cli_fail(SUB, "cannot write the spots or the summary: %s", strerror(f.write_error));
    if (rc == SW_EXIT_OK && o->out_h5) {
        const sw_diffraction_table tab = {
            0,           o->dials ? 0.5 : 0.0, j->have_geom ? &j->geom : NULL, o->dmask.panels,
            j->in.width, j->in.height};
        const char *h5 = sw_cli_file_staged("--out-h5", o->out_h5);
        sw_status st =
            h5 ? sw_diffraction_write_spots_h5(ctx, h5, f.spots.spots, f.spots.count, &tab)
               : SW_EIO;
        if (!h5)
            rc = SW_EXIT_FAIL;
        else if (st != SW_OK)
            rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
    }
    if (rc == SW_EXIT_OK && o->summary_plot && f.nsum > 0)
        rc = write_summary_plot(j, f.sum, f.nsum);
    if (rc == SW_EXIT_OK && f.skipped > 0) {
        rc = sw_cli_fail(SUB, "%lld of %lld files were skipped or read in part (above)",
                         (long long)f.skipped, (long long)f.files);
        sw_cli_files_keep(); /* what was read is written whole all the same */
    }
    sw_spot_list_free(&f.spots);
    free(f.sum);
    return rc;
}

/* ---------------------------------------------------------------- the command */

/* The keys of the --strong-mask file: what its pixels mean and the threshold that made them. */
static void strong_header(sw_cli_hdr *h, const find_opts *o, int64_t first, int64_t count)
{
    const sw_find_params *p = &o->p;
    sw_cli_hdr_init(h, "", "dimensionless: 1 a strong pixel, 0 not");
    sw_cli_hdr_comment(h, "spotwave find: the strong pixels of frames %lld..%lld", (long long)first,
                       (long long)(first + count - 1));
    sw_cli_hdr_command(h);
    sw_cli_hdr_int(h, "FRAME0", first, "input frame of plane 1 (0-based)");
    sw_cli_hdr_str(h, "ALGORITH", sw_find_algorithm_string(p->algorithm), "threshold algorithm");
    sw_cli_hdr_int(h, "KERNELX", p->kernel_x, "[pixel] window half-width");
    sw_cli_hdr_int(h, "KERNELY", p->kernel_y, "[pixel] window half-height");
    sw_cli_hdr_num(h, "SIGMAB", p->sigma_background, "background dispersion threshold sigma_b");
    sw_cli_hdr_num(h, "SIGMAS", p->sigma_strong, "strong-pixel threshold sigma_s");
    sw_cli_hdr_int(h, "MINLOCAL", p->min_local, "valid pixels a window needs");
    sw_cli_hdr_num(h, "GLOBTHR", p->global_threshold, "global threshold");
    if (o->gain_map)
        sw_cli_hdr_str(h, "GAINMAP", o->gain_map, "per-pixel gains");
    else
        sw_cli_hdr_num(h, "GAIN", p->gain, "detector gain the dispersion assumes");
    if (o->mask)
        sw_cli_hdr_str(h, "MASK", o->mask, "valid-pixel mask");
    if (p->overload > 0)
        sw_cli_hdr_num(h, "OVERLOAD", p->overload, "values at or above it masked");
}

int sw_cmd_find(const sw_cli_globals *g, int argc, char **argv)
{
    find_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_opts(&o, argc, argv);
    if (rc < 0)
        return SW_EXIT_OK; /* --help */
    if (rc != SW_EXIT_OK)
        return rc;
    for (int i = 0; i < o.ninputs; i++)
        sw_cli_file_in("image", o.inputs[i]);
    sw_cli_file_in("--gain-map", o.gain_map);
    sw_cli_file_in("--mask", o.mask);
    sw_cli_file_out("--out", o.out);
    sw_cli_file_out("--strong-mask", o.strong);
    sw_cli_file_out("--summary", o.summary);
    sw_cli_file_out("--summary-plot", o.summary_plot);
    sw_cli_file_out("--out-h5", o.out_h5);
    /* `mpirun -np N`: the frames dealt to N processes (cli_mpi.h); a plain run is rank 0 of 1 */
    sw_cli_mpi mpi;
    if ((rc = sw_cli_mpi_start(&mpi, SUB)) == SW_EXIT_OK && o.three_d && mpi.size > 1)
        rc = !sw_cli_mpi_root(&mpi) ? SW_EXIT_USAGE
                                    : sw_cli_usage(SUB, "--3d joins spots across frames: run it "
                                                        "as one process, not under mpirun");
    if (rc == SW_EXIT_OK && o.follow && mpi.size > 1)
        rc = !sw_cli_mpi_root(&mpi) ? SW_EXIT_USAGE
                                    : sw_cli_usage(SUB, "--follow reads one folder as its files "
                                                        "land: run it as one process, not under "
                                                        "mpirun");
    if (rc == SW_EXIT_OK && o.follow && o.decode == DECODE_GPU)
        rc = sw_cli_usage(SUB, "--decode gpu reads HDF5 inputs given on the command line, not "
                               "--follow");
    if (rc == SW_EXIT_OK)
        rc = sw_cli_files_check();
    const sw_cli_globals rank_g = sw_cli_mpi_globals(&mpi, g);

    sw_context *ctx = NULL;
    if (rc != SW_EXIT_OK || (rc = sw_cli_context(&rank_g, SUB, &ctx)) != SW_EXIT_OK)
        return sw_cli_mpi_end(&mpi, rc);
    find_job j;
    memset(&j, 0, sizeof j);
    j.o = &o;
    sw_diffraction_summary *sum = NULL;
    sw_spot_list spots = {0};
    sw_find_stats stats = {0};

    if (o.follow) {
        rc = run_follow(ctx, &j, g, &stats);
        goto done;
    }
    if ((rc = open_inputs(ctx, &j)) != SW_EXIT_OK)
        goto done;
    int64_t first = o.first, count = 0;
    if ((rc = sw_cli_inputs_range(SUB, &j.in, first, o.count, &count)) != SW_EXIT_OK)
        goto done;

    if ((rc = prepare(ctx, &j, first)) != SW_EXIT_OK)
        goto done;
    sw_status st;
    if (o.strong) {
        if ((int64_t)j.in.height * count > SW_IMAGE_MAX_DIM) {
            rc = sw_cli_fail(SUB,
                             "--strong-mask: %lld frames of %d rows are too many for one "
                             "image; use --count",
                             (long long)count, j.in.height);
            goto done;
        }
        st = sw_image_alloc(NULL, j.in.width, (int32_t)(j.in.height * count), SW_PIX_U8,
                            &j.strong_cube);
        if (st != SW_OK) {
            rc = sw_cli_fail(SUB, "--strong-mask: %s", sw_cli_lib_error(NULL, st));
            goto done;
        }
        j.strong_first = first;
    }

    sw_cli_progress_start(&j.bar, "find", sw_cli_mpi_root(&mpi) ? o.progress : 0, g->quiet, count);
    /* --decode: stored bitshuffle/LZ4 chunks to the GPU; under mpirun each rank's chunks of its
     * own block to its own GPU (sw_cli_mpi_globals) */
    size_t chunk_cap = 0;
    int64_t max_chunks = 0;
    const int all_chunks = sw_cli_inputs_chunk_limits(&j.in, &chunk_cap, &max_chunks);
    const int on_gpu = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    if (o.decode == DECODE_GPU && (!on_gpu || max_chunks == 0)) {
        const char *why = !on_gpu ? "needs --backend cuda"
                                  : "no input is an HDF5 file of bitshuffle/LZ4 chunks that are "
                                    "whole rows of a frame (use --decode cpu)";
        /* the ranks of one node share its inputs, build and GPUs, so they fail alike: rank 0
         * says why as one process does, and the first rank of each other node (its GPUs may
         * differ) */
        rc = sw_cli_mpi_root(&mpi) ? sw_cli_fail(SUB, "--decode gpu: %s", why)
             : mpi.local_rank == 0
                 ? sw_cli_fail(SUB, "MPI rank %d of %d: --decode gpu: %s", mpi.rank, mpi.size, why)
                 : SW_EXIT_FAIL;
    }
    j.gpu_decode = on_gpu && max_chunks > 0 &&
                   (o.decode == DECODE_GPU || (o.decode == DECODE_AUTO && all_chunks));
    if ((rc = sw_cli_mpi_agree(&mpi, rc)) != SW_EXIT_OK)
        goto done;
    sw_find_source src = {source_read, o.strong ? source_strong : NULL, source_progress, &j};
    /* this rank's frames (all of them in one process); rank 0 gathers the others' spots */
    sw_find_source rank_src = sw_cli_mpi_source(&mpi, &src, &j.in, first, count, j.bar.on);
    const sw_find_chunk_source csrc = {source_chunks, chunk_cap, max_chunks, 0, &j};
    st = mpi.my_count > 0 ? sw_find_sequence_chunks(j.plan, mpi.my_first, mpi.my_count, &rank_src,
                                                    j.gpu_decode ? &csrc : NULL, o.three_d, &spots,
                                                    &stats, &j.gpu_frames)
                          : SW_OK;
    if (mpi.on) {
        /* the frame the pipeline stopped at (with chunks decoded on the GPU, the source's read
         * never sees it), with its file, on the rank's line and in rank 0's list */
        rc = sw_cli_mpi_gather(
            &mpi, ctx, st, st != SW_OK ? sw_find_sequence_failed_frame(j.plan) : -1, &spots,
            j.refine ? &j.refined : NULL, &stats, &j.gpu_frames, o.strong ? &j.strong_cube : NULL);
        if (rc != SW_EXIT_OK || !sw_cli_mpi_root(&mpi))
            goto done; /* only rank 0 writes */
    }
    double seconds = sw_cli_now() - j.bar.t_start;
    if (st != SW_OK) {
        if (j.bar.on)
            fputc('\n', stderr);
        rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
        goto done;
    }
    if ((rc = write_spots(&j, &spots, j.refine ? &j.refined : NULL)) != SW_EXIT_OK)
        goto done;
    if (o.out_h5) {
        const sw_diffraction_table tab = {
            o.three_d,      o.dials ? 0.5 : 0.0, j.have_geom ? &j.geom : NULL,
            o.dmask.panels, j.in.width,          j.in.height};
        const char *h5 = sw_cli_file_staged("--out-h5", o.out_h5);
        if (!h5) {
            rc = SW_EXIT_FAIL;
            goto done;
        }
        st = sw_diffraction_write_spots_h5(ctx, h5, spots.spots, spots.count, &tab);
        if (st != SW_OK) {
            rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
            goto done;
        }
    }
    if (o.summary || o.summary_plot) {
        sum = calloc((size_t)count, sizeof *sum);
        if (!sum) {
            rc = sw_cli_fail(SUB, "out of memory");
            goto done;
        }
        if ((rc = summarise(ctx, &j, &spots, first, count, sum)) != SW_EXIT_OK)
            goto done;
        if (o.summary && (rc = write_summary(&o, sum, count)) != SW_EXIT_OK)
            goto done;
        if (o.summary_plot && (rc = write_summary_plot(&j, sum, count)) != SW_EXIT_OK)
            goto done;
    }
    if (o.strong) {
        sw_image cube = j.strong_cube;
        cube.height = j.in.height;
        sw_image *planes = calloc((size_t)count, sizeof *planes);
        if (!planes) {
            rc = sw_cli_fail(SUB, "out of memory");
            goto done;
        }
        for (int64_t k = 0; k < count; k++) {
            planes[k] = cube;
            planes[k].owned = 0;
            planes[k].data = sw_image_row(&j.strong_cube, (int32_t)(k * j.in.height));
        }
        sw_cli_hdr hdr;
        strong_header(&hdr, &o, first, count);
        const char *strong = sw_cli_file_staged("--strong-mask", o.strong);
        st = strong ? sw_cli_hdr_write(ctx, strong, planes, (int32_t)count, &hdr) : SW_EIO;
        free(planes);
        if (!strong) {
            rc = SW_EXIT_FAIL;
            goto done;
        }
        if (st != SW_OK) {
            rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
            goto done;
        }
    }
    if (o.json)
        json_report(&j, ctx, &stats, seconds, first, count, &mpi);
    rc = SW_EXIT_OK;

done:
    free(sum);
    sw_spot_list_free(&spots);
    release(&j);
    free_inputs(&j);
    sw_context_destroy(ctx);
    return sw_cli_mpi_end(&mpi, rc);
}
