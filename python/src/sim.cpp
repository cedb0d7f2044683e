// spotwave Python binding: the simulators — star fields (sim.h) and Shack-Hartmann spot
// patterns (sim_sh.h, turbulence.h), each with the detector model, in the order the `spotwave sim`
// command runs them so that a seed gives the command's image.
#include "common.h"

#include <nanobind/stl/string.h>

#include <cmath>
#include <cstring>
#include <deque>

namespace swpy
{

namespace
{

// Frees what a simulation allocated in C, whatever happens.
struct Images {
    std::deque<sw_image> v; // stable addresses as images are added
    sw_image *add()
    {
        v.emplace_back();
        return &v.back();
    }
    ~Images()
    {
        for (sw_image &i : v)
            sw_image_free(&i);
    }
};

struct Stars {
    sw_stars s{};
    ~Stars()
    {
        sw_stars_free(&s);
    }
};

void detector_from(Params &q, sw_detector &d)
{
    sw_detector_default(&d);
    d.sky_e = q.num("sky_e", d.sky_e);
    d.dark_e = q.num("dark_e", d.dark_e);
    d.shot_noise = q.flag("shot_noise", d.shot_noise != 0) ? 1 : 0;
    d.read_noise_e = q.num("read_noise_e", d.read_noise_e);
    d.gain_e_per_adu = q.num("gain", d.gain_e_per_adu);
    d.bias_adu = q.num("bias", d.bias_adu);
    d.full_well_e = q.num("full_well", d.full_well_e);
    d.seed = q.u64("seed", d.seed);
}

// The output image: a writable array of the detector's type and the image size, on the host or
// the device.
ImageArg out_image(nb::handle out, const char *name, int32_t w, int32_t h, Context &c)
{
    ImageArg im = image_arg(out, name, false, PIX_ALL, true);
    if (im.width != w || im.rows != h)
        value_error("%s: %d x %d, the simulation is %d x %d (width x height)", name, im.width,
                    im.rows, w, h);
    check_side(c, im.where, im.device_id, name);
    return im;
}

nb::dict stars_truth(const sw_stars &s, int32_t w, int32_t h)
{
    int64_t n = 0;
    for (int64_t i = 0; i < s.count; i++)
        n += s.x[i] >= -0.5 && s.x[i] < w - 0.5 && s.y[i] >= -0.5 && s.y[i] < h - 0.5;
    double *x, *y, *f, *m;
    nb::dict d;
    d["x_px"] = new_array((size_t)n, &x);
    d["y_px"] = new_array((size_t)n, &y);
    d["flux_e"] = new_array((size_t)n, &f);
    d["mag"] = new_array((size_t)n, &m);
    for (int64_t i = 0, k = 0; i < s.count; i++) {
        if (!(s.x[i] >= -0.5 && s.x[i] < w - 0.5 && s.y[i] >= -0.5 && s.y[i] < h - 0.5))
            continue;
        x[k] = s.x[i], y[k] = s.y[i], f[k] = s.flux[i], m[k] = s.mag[i];
        k++;
    }
    return d;
}

// A star field: the stars (random, or given by position and flux or magnitude), rendered and
// through the detector into `out` (host or device). Returns the truth columns and a report.
nb::tuple sim_stars(nb::object ctx_obj, nb::dict params, nb::handle out)
{
    Context &c = context_of(ctx_obj);
    Params q(params, "sim.stars");
    sw_starsim_params p;
    sw_starsim_params_default(&p);
    p.width = (int32_t)q.integer("width", 1024);
    p.height = (int32_t)q.integer("height", 1024);
    p.sigma = q.num("sigma", 1.0);
    p.roi_side = (int32_t)q.integer("roi_side", 11);
    std::string psf = q.str("psf", "integrated");
    if (psf == "integrated")
        p.psf = SW_PSF_INTEGRATED;
    else if (psf == "sampled")
        p.psf = SW_PSF_SAMPLED;
    else
        value_error("psf: '%s' is not 'sampled' or 'integrated'", psf.c_str());
    std::string method = q.str("method", "auto");
    if (sw_starsim_method_parse(method.c_str(), &p.method) != SW_OK)
        value_error("method: '%s' is not one of auto, sequential, openmp, parallel, adaptive, "
                    "deterministic",
                    method.c_str());
    p.phase_bins = (int32_t)q.integer("phase_bins", p.phase_bins);
    const double zp = q.num("zero_point", 1e6), ratio = q.num("ratio", 0.0);
    sw_detector det;
    detector_from(q, det);
    Stars stars;
    if (q.has("random")) {
        const int64_t n = q.integer("random", 0);
        const double mmin = q.num("mag_min", 0.0), mmax = q.num("mag_max", 15.0);
        call(c, [&] {
            return sw_stars_random(c.ctx, n, p.width, p.height, mmin, mmax, zp, ratio, det.seed,
                                   &stars.s);
        });
    } else {
        nb::object ox = q.get("x"), oy = q.get("y"), of = q.get("flux"), om = q.get("mag");
        if (ox.is_none() || oy.is_none() || (of.is_none() && om.is_none()))
            value_error("catalog: give x_px, y_px and flux_e or mag");
        FlatArg ax = flat_arg<double>(ox, "catalog x_px", 0, false);
        const size_t n = ax.size;
        FlatArg ay = flat_arg<double>(oy, "catalog y_px", n, false);
        FlatArg af, am;
        if (!of.is_none())
            af = flat_arg<double>(of, "catalog flux_e", n, false);
        if (!om.is_none())
            am = flat_arg<double>(om, "catalog mag", n, false);
        call(c, [&] { return sw_stars_alloc(c.ctx, (int64_t)n, &stars.s); });
        for (size_t i = 0; i < n; i++) {
            stars.s.x[i] = ((const double *)ax.data)[i];
            stars.s.y[i] = ((const double *)ay.data)[i];
            if (am.data)
                stars.s.mag[i] = ((const double *)am.data)[i];
            stars.s.flux[i] =
                af.data ? ((const double *)af.data)[i] : sw_mag_to_flux(stars.s.mag[i], zp, ratio);
        }
    }
    q.done();
    p.max_stars = stars.s.count > 0 ? stars.s.count : 1;

    ImageArg o = out_image(out, "out", p.width, p.height, c);
    det.out_type = o.img.type;
    const bool cuda = c.device >= 0;
    sw_starsim *plan = nullptr;
    int64_t rendered = 0;
    sw_starsim_method used = SW_STARSIM_AUTO;
    Images tmp;
    sw_status st;
    std::string msg;
    {
        nb::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(c.mu);
        st = sw_starsim_create(c.ctx, &p, &plan);
        // As the command: on CUDA electrons and ADU on the device (then copied to a host out);
        // on the CPU electrons in a host f32 image (the output itself when it is f32).
        sw_image *electrons = nullptr, *adu = &o.img;
        if (st == SW_OK && cuda) {
            electrons = tmp.add();
            st = sw_image_alloc_device(c.ctx, p.width, p.height, SW_PIX_F32, electrons);
            if (st == SW_OK && o.where != Where::device) {
                adu = tmp.add();
                st = sw_image_alloc_device(c.ctx, p.width, p.height, det.out_type, adu);
            }
        } else if (st == SW_OK) {
            if (det.out_type == SW_PIX_F32) {
                electrons = &o.img;
            } else {
                electrons = tmp.add();
                st = sw_image_alloc(nullptr, p.width, p.height, SW_PIX_F32, electrons);
            }
        }
        if (st == SW_OK)
            st = sw_starsim_run(plan, &stars.s, electrons);
        if (st == SW_OK)
            st = sw_context_synchronize(c.ctx);
        if (st == SW_OK) {
            rendered = sw_starsim_rendered(plan);
            used = sw_starsim_method_used(plan);
            st = sw_detector_apply(c.ctx, &det, electrons, adu);
        }
        if (st == SW_OK && adu != &o.img)
            st = sw_image_copy(c.ctx, adu, &o.img);
        if (st == SW_OK && o.where == Where::device)
            st = SW_OK; // queued on the context's stream; the Python layer orders CuPy after it
        if (st != SW_OK)
            msg = sw_context_error(c.ctx);
        sw_starsim_destroy(plan);
    }
    if (st != SW_OK)
        raise_status(st, msg);
    nb::dict report;
    report["stars"] = stars.s.count;
    report["rendered"] = rendered;
    report["method"] = std::string(sw_starsim_method_string(used));
    return nb::make_tuple(stars_truth(stars.s, p.width, p.height), report);
}

struct Shsim {
    sw_shsim *plan = nullptr;
    sw_wavefront w{};
    sw_sh_truth truth{};
    ~Shsim()
    {
        sw_sh_truth_free(&truth);
        sw_wavefront_free(&w);
        sw_shsim_destroy(plan);
    }
};

// A Shack-Hartmann spot pattern of a Zernike wavefront, an OPD map or an FFT turbulence screen,
// through the detector into `out`, and (optionally) the flat-wavefront reference exposure into
// `reference`. Returns the truth columns and a report.
nb::tuple sim_sh(nb::object ctx_obj, nb::dict params, nb::handle out, nb::handle reference)
{
    Context &c = context_of(ctx_obj);
    Params q(params, "sim.sh");
    sw_shsim_params p;
    sw_shsim_params_default(&p);
    p.width = (int32_t)q.integer("width", 0);
    p.height = (int32_t)q.integer("height", 0);
    sw_sh_geometry_default(&p.geom);
    p.geom.x0 = q.num("x0", 0.0);
    p.geom.y0 = q.num("y0", 0.0);
    p.geom.pitch_px = q.num("pitch", 32.0);
    p.geom.nx = (int32_t)q.integer("nx", 16);
    p.geom.ny = (int32_t)q.integer("ny", 16);
    p.geom.pixel_um = q.num("pixel_um", 5.5);
    p.geom.focal_mm = q.num("focal_mm", 3.5);
    std::string model = q.str("model", "geometric");
    if (sw_sh_model_parse(model.c_str(), &p.model) != SW_OK)
        value_error("model: '%s' is not 'geometric' or 'diffraction'", model.c_str());
    std::string spot = q.str("spot", "gaussian");
    if (sw_sh_spot_parse(spot.c_str(), &p.spot) != SW_OK)
        value_error("spot: '%s' is not 'gaussian' or 'sinc2'", spot.c_str());
    p.wavelength_um = q.num("wavelength_um", 0.8);
    p.sigma_px = q.num("sigma_px", 0.0);
    p.flux_e = q.num("flux_e", 5e4);
    p.min_illum = q.num("min_illum", 0.0);
    const int64_t roi = q.integer("roi_px", 0), samples = q.integer("samples", 0);
    if (roi > 0)
        p.roi_px = (int32_t)roi;
    if (samples > 0)
        p.samples = (int32_t)samples;
    p.oversample = (int32_t)q.integer("oversample", 0);
    p.fft_size = (int32_t)q.integer("fft_size", 0);
    if (q.has("pupil_diameter_um")) {
        p.pupil = sw_pupil_circle(q.num("pupil_diameter_um", 0.0));
        p.pupil.cu_um = q.num("pupil_cu_um", 0.0);
        p.pupil.cv_um = q.num("pupil_cv_um", 0.0);
        if (q.has("pupil_b_ratio")) {
            p.pupil.b_um = p.pupil.a_um * q.num("pupil_b_ratio", 1.0);
            p.pupil.angle_deg = q.num("pupil_angle_deg", 0.0);
        }
        p.pupil.obscuration = q.num("obscuration", 0.0);
    }
    sw_detector det;
    detector_from(q, det);
    // The wavefront: zernike (OSA coefficients, um, over radius_um), screen (an OPD map, um,
    // sampled at spacing_um, times scale) or turbulence (r0_m, L0_m, wavelength, subharmonics,
    // n, spacing_um, index; sky_spacing_m, the samples' spacing where r0 and L0 are given,
    // default spacing_um: the screen is made there and laid on the array at spacing_um).
    FlatArg zc;
    double zradius = 0.0;
    const bool zern = q.has("zernike");
    if (zern) {
        zc = flat_arg<double>(q.get("zernike"), "zernike", 0, false);
        if (zc.where == Where::device)
            type_error("zernike: a host (NumPy) array of coefficients is needed");
        zradius = q.num("zernike_radius_um", 0.0);
    }
    Array screen;
    const bool have_screen = q.has("screen");
    double spacing = 0.0, scale = 1.0;
    if (have_screen) {
        if (!nb::try_cast<Array>(q.get("screen"), screen, false) || screen.ndim() != 2 ||
            screen.device_type() != nb::device::cpu::value ||
            screen.dtype() != nb::dtype<double>() || screen.shape(0) == 0 || screen.shape(1) == 0)
            type_error("screen: a non-empty 2-D host (NumPy) float64 array of OPD values (um) "
                       "is needed");
        spacing = q.num("screen_spacing_um", 0.0);
        scale = q.num("screen_scale", 1.0);
    }
    const bool turb = q.has("r0_m");
    sw_turbulence tu;
    sw_turbulence_default(&tu);
    int32_t screen_n = 0;
    uint64_t screen_index = 0;
    double sky_spacing_m = 0.0;
    if (turb) {
        tu.r0_m = q.num("r0_m", tu.r0_m);
        tu.L0_m = q.num("L0_m", tu.L0_m);
        tu.wavelength_um = q.num("turbulence_wavelength_um", tu.wavelength_um);
        tu.subharmonics = (int32_t)q.integer("subharmonics", tu.subharmonics);
        screen_n = (int32_t)q.integer("screen_n", 0);
        spacing = q.num("screen_spacing_um", 0.0);
        screen_index = q.u64("screen_index", 0);
        sky_spacing_m = q.num("screen_sky_spacing_m", spacing * 1e-6);
    }
    q.done();

    ImageArg o = out_image(out, "out", p.width, p.height, c);
    ImageArg ro;
    const bool with_ref = !reference.is_none();
    if (with_ref) {
        ro = out_image(reference, "reference", p.width, p.height, c);
        if (ro.img.type != o.img.type || ro.where != o.where)
            type_error("reference: give it in the image's dtype and memory");
    }
    det.out_type = o.img.type;
    const bool cuda = c.device >= 0;
    Shsim s;
    Images tmp;
    int64_t lit = 0;
    double rms = NAN;
    sw_status st;
    std::string msg;
    {
        nb::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(c.mu);
        st = sw_shsim_create(c.ctx, &p, &s.plan);
        if (st == SW_OK && zern) {
            st = sw_shsim_add_zernike(s.plan, (const double *)zc.data, (int32_t)zc.size, zradius);
            if (st == SW_OK)
                rms = sw_zernike_rms((const double *)zc.data, (int32_t)zc.size, 1);
        } else if (st == SW_OK && have_screen) {
            const Array &a = screen;
            const int32_t nv = (int32_t)a.shape(0), nu = (int32_t)a.shape(1);
            st = sw_wavefront_alloc(c.ctx, nu, nv, spacing, &s.w);
            if (st == SW_OK) {
                const double *src = (const double *)a.data();
                for (int32_t k = 0; k < nv; k++)
                    for (int32_t i = 0; i < nu; i++)
                        s.w.opd_um[(size_t)k * nu + i] = src[k * a.stride(0) + i * a.stride(1)];
                st = sw_shsim_add_wavefront(s.plan, &s.w, scale);
            }
        } else if (st == SW_OK && turb) {
            st = sw_phase_screen(c.ctx, &tu, screen_n, sky_spacing_m, det.seed, screen_index, &s.w);
            if (st == SW_OK) {
                s.w.spacing_um = spacing;
                s.w.u0_um = s.w.v0_um = -0.5 * (screen_n - 1.0) * spacing;
                st = sw_shsim_add_wavefront(s.plan, &s.w, 1.0);
            }
        }
        // As the command: render (on CUDA into a device image copied to the host), the detector
        // on the host image. A device output renders and applies the detector on the device.
        sw_image *e_host = nullptr, *e_dev = nullptr;
        if (st == SW_OK && o.where == Where::device) {
            e_dev = tmp.add();
            st = sw_image_alloc_device(c.ctx, p.width, p.height, SW_PIX_F32, e_dev);
        } else if (st == SW_OK) {
            e_host = tmp.add();
            st = sw_image_alloc(c.ctx, p.width, p.height, SW_PIX_F32, e_host);
            if (st == SW_OK && cuda) {
                e_dev = tmp.add();
                st = sw_image_alloc_device(c.ctx, p.width, p.height, SW_PIX_F32, e_dev);
            }
        }
        for (int pass = 0; st == SW_OK && pass < (with_ref ? 2 : 1); pass++) {
            if (pass == 1)
                st = sw_shsim_clear_opd(s.plan);
            if (st == SW_OK)
                st = sw_shsim_run(s.plan, e_dev ? e_dev : e_host, 0);
            if (st == SW_OK && e_dev && e_host)
                st = sw_image_copy(c.ctx, e_dev, e_host);
            if (st == SW_OK && pass == 0)
                st = sw_shsim_truth(s.plan, &s.truth);
            sw_detector d = det;
            if (pass == 1) // another exposure: its own noise (the command's reference_detector)
                d.seed = det.seed + 0x9E3779B97F4A7C15ull;
            if (st == SW_OK)
                st = sw_detector_apply(c.ctx, &d, e_host ? e_host : e_dev,
                                       pass == 0 ? &o.img : &ro.img);
        }
        if (st == SW_OK) {
            const double min_illum = sw_shsim_params_used(s.plan)->min_illum;
            for (int64_t l = 0; l < (int64_t)s.truth.nx * s.truth.ny; l++)
                lit += s.truth.illum[l] > min_illum;
        }
        if (st != SW_OK)
            msg = sw_context_error(c.ctx);
    }
    if (st != SW_OK)
        raise_status(st, msg);
    const sw_sh_truth &t = s.truth;
    const size_t n = (size_t)t.nx * (size_t)t.ny;
    int32_t *ix, *iy;
    double *x, *y, *rx, *ry, *sx, *sy, *il;
    nb::dict d;
    d["ix"] = new_array(n, &ix);
    d["iy"] = new_array(n, &iy);
    d["x_px"] = new_array(n, &x);
    d["y_px"] = new_array(n, &y);
    d["ref_x_px"] = new_array(n, &rx);
    d["ref_y_px"] = new_array(n, &ry);
    d["slope_x_rad"] = new_array(n, &sx);
    d["slope_y_rad"] = new_array(n, &sy);
    d["illum"] = new_array(n, &il);
    for (size_t l = 0; l < n; l++) {
        ix[l] = (int32_t)(l % (size_t)t.nx);
        iy[l] = (int32_t)(l / (size_t)t.nx);
        x[l] = t.x_px[l], y[l] = t.y_px[l], rx[l] = t.ref_x_px[l], ry[l] = t.ref_y_px[l];
        sx[l] = t.slope_x[l], sy[l] = t.slope_y[l], il[l] = t.illum[l];
    }
    const sw_shsim_params *used = sw_shsim_params_used(s.plan);
    nb::dict report;
    report["lit"] = lit;
    report["lenslets"] = (int64_t)n;
    report["rms_um"] = rms;
    report["sigma_px"] = used->sigma_px;
    report["roi_px"] = used->roi_px;
    report["oversample"] = used->oversample;
    report["fft_size"] = used->fft_size;
    return nb::make_tuple(d, report);
}

void turbulence_from(Params &q, sw_turbulence &t)
{
    sw_turbulence_default(&t);
    t.r0_m = q.num("r0_m", t.r0_m);
    t.L0_m = q.num("L0_m", t.L0_m);
    t.wavelength_um = q.num("wavelength_um", t.wavelength_um);
    t.subharmonics = (int32_t)q.integer("subharmonics", t.subharmonics);
}

// A (n, n) NumPy float64 array of the wavefront's OPD (um), row k = v, column i = u.
nb::object wavefront_array(const sw_wavefront &w)
{
    double *d;
    auto a = new_array<double>((size_t)w.nu * (size_t)w.nv, &d);
    memcpy(d, w.opd_um, sizeof(double) * (size_t)w.nu * (size_t)w.nv);
    return nb::cast(a);
}

nb::object phase_screen(nb::object ctx_obj, nb::dict params)
{
    Context &c = context_of(ctx_obj);
    Params q(params, "phase_screen");
    sw_turbulence t;
    turbulence_from(q, t);
    const int32_t n = (int32_t)q.integer("n", 256);
    const double spacing_m = q.num("spacing_m", 0.01);
    const uint64_t seed = q.u64("seed", 1), index = q.u64("index", 0);
    q.done();
    sw_wavefront w{};
    call(c, [&] { return sw_phase_screen(c.ctx, &t, n, spacing_m, seed, index, &w); });
    nb::object a = wavefront_array(w);
    sw_wavefront_free(&w);
    return a;
}

double structure_function(nb::dict params, double r_m)
{
    Params q(params, "structure_function");
    sw_turbulence t;
    turbulence_from(q, t);
    q.done();
    call_noctx([&] { return sw_turbulence_check(nullptr, &t); });
    return sw_turbulence_structure(&t, r_m);
}

struct InfiniteScreen {
    nb::object ctx_obj;
    Context *ctx = nullptr;
    sw_infinite_screen *s = nullptr;
    sw_wavefront w{};
    InfiniteScreen() = default;
    InfiniteScreen(const InfiniteScreen &) = delete;
    InfiniteScreen &operator=(const InfiniteScreen &) = delete;
    ~InfiniteScreen()
    {
        sw_wavefront_free(&w);
        sw_infinite_screen_destroy(s);
    }
};

void infinite_init(InfiniteScreen *self, nb::object ctx_obj, nb::dict params)
{
    new (self) InfiniteScreen();
    self->ctx_obj = ctx_obj;
    self->ctx = &context_of(ctx_obj);
    Params q(params, "InfiniteScreen");
    sw_turbulence t;
    turbulence_from(q, t);
    const int32_t n = (int32_t)q.integer("n", 64);
    const double spacing_m = q.num("spacing_m", 0.01);
    const uint64_t seed = q.u64("seed", 1);
    q.done();
    Context &c = *self->ctx;
    call(c, [&] { return sw_infinite_screen_create(c.ctx, &t, n, spacing_m, seed, &self->s); });
}

} // namespace

void bind_sim(nb::module_ &m)
{
    m.def("phase_screen", &phase_screen, nb::arg("ctx"), nb::arg("params"));
    m.def("structure_function", &structure_function, nb::arg("params"), nb::arg("r_m"));
    nb::class_<InfiniteScreen>(m, "InfiniteScreen",
                               "An infinite phase screen (turbulence.h). Use "
                               "spotwave.sim.InfiniteScreen.")
        .def("__init__", &infinite_init, nb::arg("ctx"), nb::arg("params"))
        .def("advance",
             [](InfiniteScreen &is, double d) {
                 Context &c = *is.ctx;
                 call(c, [&] { return sw_infinite_screen_advance(is.s, d); });
             })
        .def("window",
             [](InfiniteScreen &is) {
                 Context &c = *is.ctx;
                 call(c, [&] { return sw_infinite_screen_window(is.s, &is.w); });
                 return wavefront_array(is.w);
             })
        .def_prop_ro("rows_added",
                     [](InfiniteScreen &is) { return sw_infinite_screen_rows_added(is.s); })
        .def_prop_ro("position_m",
                     [](InfiniteScreen &is) { return sw_infinite_screen_position(is.s); });
    m.def("sim_stars", &sim_stars, nb::arg("ctx"), nb::arg("params"), nb::arg("out"));
    m.def("sim_sh", &sim_sh, nb::arg("ctx"), nb::arg("params"), nb::arg("out"),
          nb::arg("reference").none());
}

} // namespace swpy
