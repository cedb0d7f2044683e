// spotwave Python binding: synthetic eyes (sim_eye.h) — the ocular population of Thibos et al.
// (2002), the coefficients' options, and Hartmann-Shack images of one or two eyes with the
// artefacts of living eyes, through the detector model in the order `spotwave sim eye` runs
// them, so that a seed gives the command's image.
#include "common.h"

#include <nanobind/stl/string.h>

#include <cmath>
#include <string>
#include <vector>

namespace swpy
{

namespace
{

std::string dir_of(nb::handle h)
{
    if (h.is_none())
        return std::string();
    if (!nb::isinstance<nb::str>(h))
        type_error("data: expected a folder name (str), got %s", nb::type_name(h.type()).c_str());
    return nb::cast<std::string>(h);
}

void options_from(nb::dict d, sw_ocular_options &o)
{
    Params q(d, "ocular options");
    sw_ocular_options_default(&o);
    o.pupil_mm = q.num("pupil_mm", 0.0);
    o.max_order = (int32_t)q.integer("max_order", -1);
    o.keep_tilt = q.flag("keep_tilt", false) ? 1 : 0;
    o.rx.sphere_d = q.num("sphere_d", 0.0);
    o.rx.cyl_d = q.num("cyl_d", 0.0);
    o.rx.axis_deg = q.num("axis_deg", 0.0);
    o.total_rms_um = q.num("total_rms_um", 0.0);
    q.done();
}

struct Population {
    sw_ocular_population p{};
    ~Population()
    {
        sw_ocular_population_free(&p);
    }
};

template <class T> nb::object vec_array(const T *src, size_t n)
{
    T *d;
    auto a = new_array<T>(n, &d);
    for (size_t i = 0; i < n; i++)
        d[i] = src[i];
    return nb::cast(a);
}

nb::dict population(nb::object ctx_obj, nb::handle data, double pupil_mm)
{
    Context &c = context_of(ctx_obj);
    const std::string dir = dir_of(data);
    Population pop;
    call(c, [&] {
        return sw_ocular_population_load(c.ctx, dir.empty() ? nullptr : dir.c_str(), pupil_mm,
                                         &pop.p);
    });
    const size_t n = (size_t)pop.p.count;
    nb::dict d;
    d["pupil_mm"] = pop.p.pupil_mm;
    d["mean_um"] = vec_array(pop.p.mean_um, n);
    d["sd_um"] = vec_array(pop.p.sd_um, n);
    d["cov_um2"] = vec_array(pop.p.cov_um2, n * n);
    return d;
}

nb::object ocular_draw(nb::object ctx_obj, nb::handle data, double population_mm, uint64_t seed,
                       uint64_t index, nb::dict options)
{
    Context &c = context_of(ctx_obj);
    const std::string dir = dir_of(data);
    sw_ocular_options o;
    options_from(options, o);
    Population pop;
    std::vector<double> out;
    call(c, [&] {
        sw_status st = sw_ocular_population_load(c.ctx, dir.empty() ? nullptr : dir.c_str(),
                                                 population_mm, &pop.p);
        if (st != SW_OK)
            return st;
        out.resize((size_t)pop.p.count);
        return sw_ocular_draw(c.ctx, &pop.p, seed, index, &o, out.data(), pop.p.count);
    });
    return vec_array(out.data(), out.size());
}

nb::object ocular_apply(nb::object ctx_obj, nb::handle coef, double from_mm, nb::dict options,
                        int32_t count)
{
    Context &c = context_of(ctx_obj);
    FlatArg a = flat_arg<double>(coef, "zernike", 0, false);
    if (a.where == Where::device)
        type_error("zernike: a host (NumPy) array of coefficients is needed");
    sw_ocular_options o;
    options_from(options, o);
    if (count < 1)
        value_error("zernike: no coefficients");
    std::vector<double> out((size_t)count);
    call(c, [&] {
        return sw_ocular_apply(c.ctx, (const double *)a.data, (int32_t)a.size, from_mm, &o,
                               out.data(), count);
    });
    return vec_array(out.data(), out.size());
}

nb::dict artefacts_dict(const sw_eye_artefacts &a)
{
    nb::dict d;
    d["glow_e"] = a.glow_e;
    d["glow_falloff"] = a.glow_falloff;
    d["glow_edge_px"] = a.glow_edge_px;
    d["reflection_e"] = a.reflection_e;
    d["reflection_sigma_px"] = a.reflection_sigma_px;
    d["reflection_offset"] = a.reflection_offset;
    d["brightness"] = a.brightness;
    d["brightness_modes"] = a.brightness_modes;
    d["tear_blobs"] = a.tear_blobs;
    d["tear_depth"] = a.tear_depth;
    d["tear_radius"] = a.tear_radius;
    d["tear_blur_px"] = a.tear_blur_px;
    d["white_noise_e"] = a.white_noise_e;
    return d;
}

nb::dict artefacts_default()
{
    sw_eye_artefacts a;
    sw_eye_artefacts_default(&a);
    return artefacts_dict(a);
}

struct Truth {
    sw_eyesim_truth t{};
    ~Truth()
    {
        sw_eyesim_truth_free(&t);
    }
};

struct Img {
    sw_image i{};
    ~Img()
    {
        sw_image_free(&i);
    }
};

// The eyes, rendered into electrons, through the detector into `out` (host), and with
// `reference` the flat-wavefront reference (no artefacts, another exposure's noise).
nb::list sim_eye(nb::object ctx_obj, nb::dict params, nb::list eyes, nb::handle out,
                 nb::handle reference)
{
    Context &c = context_of(ctx_obj);
    Params q(params, "sim.eye");
    sw_eyesim_params p;
    sw_eyesim_params_default(&p);
    sw_shsim_params &s = p.sh;
    sw_shsim_params_default(&s);
    s.width = (int32_t)q.integer("width", 0);
    s.height = (int32_t)q.integer("height", 0);
    sw_sh_geometry_default(&s.geom);
    s.geom.x0 = q.num("x0", 0.0);
    s.geom.y0 = q.num("y0", 0.0);
    s.geom.pitch_px = q.num("pitch", 32.0);
    s.geom.nx = (int32_t)q.integer("nx", 0);
    s.geom.ny = (int32_t)q.integer("ny", 0);
    s.geom.pixel_um = q.num("pixel_um", 5.5);
    s.geom.focal_mm = q.num("focal_mm", 3.5);
    std::string model = q.str("model", "geometric");
    if (sw_sh_model_parse(model.c_str(), &s.model) != SW_OK)
        value_error("model: '%s' is not 'geometric' or 'diffraction'", model.c_str());
    std::string spot = q.str("spot", "gaussian");
    if (sw_sh_spot_parse(spot.c_str(), &s.spot) != SW_OK)
        value_error("spot: '%s' is not 'gaussian' or 'sinc2'", spot.c_str());
    s.wavelength_um = q.num("wavelength_um", 0.78);
    s.sigma_px = q.num("sigma_px", 0.0);
    s.flux_e = q.num("flux_e", 2000.0);
    s.min_illum = q.num("min_illum", 0.0);
    const int64_t roi = q.integer("roi_px", 0), samples = q.integer("samples", 0);
    if (roi > 0)
        s.roi_px = (int32_t)roi;
    if (samples > 0)
        s.samples = (int32_t)samples;
    s.oversample = (int32_t)q.integer("oversample", 0);
    s.fft_size = (int32_t)q.integer("fft_size", 0);
    sw_eye_artefacts &a = p.art;
    a.glow_e = q.num("glow_e", a.glow_e);
    a.glow_falloff = q.num("glow_falloff", a.glow_falloff);
    a.glow_edge_px = q.num("glow_edge_px", a.glow_edge_px);
    a.reflection_e = q.num("reflection_e", a.reflection_e);
    a.reflection_sigma_px = q.num("reflection_sigma_px", a.reflection_sigma_px);
    a.reflection_offset = q.num("reflection_offset", a.reflection_offset);
    a.brightness = q.num("brightness", a.brightness);
    a.brightness_modes = (int32_t)q.integer("brightness_modes", a.brightness_modes);
    a.tear_blobs = (int32_t)q.integer("tear_blobs", a.tear_blobs);
    a.tear_depth = q.num("tear_depth", a.tear_depth);
    a.tear_radius = q.num("tear_radius", a.tear_radius);
    a.tear_blur_px = q.num("tear_blur_px", a.tear_blur_px);
    a.white_noise_e = q.num("white_noise_e", a.white_noise_e);
    p.seed = q.u64("seed", p.seed);
    sw_detector det;
    sw_detector_default(&det);
    det.sky_e = q.num("sky_e", det.sky_e);
    det.dark_e = q.num("dark_e", det.dark_e);
    det.shot_noise = q.flag("shot_noise", det.shot_noise != 0) ? 1 : 0;
    det.read_noise_e = q.num("read_noise_e", det.read_noise_e);
    det.gain_e_per_adu = q.num("gain", det.gain_e_per_adu);
    det.bias_adu = q.num("bias", det.bias_adu);
    det.full_well_e = q.num("full_well", det.full_well_e);
    det.seed = p.seed;
    q.done();

    const size_t ne = nb::len(eyes);
    if (ne < 1 || ne > 2)
        value_error("eyes: one or two eyes, got %zu", ne);
    p.n_eyes = (int32_t)ne;
    std::vector<FlatArg> coefs(ne);
    for (size_t k = 0; k < ne; k++) {
        if (!nb::isinstance<nb::dict>(eyes[k]))
            type_error("eyes: a list of dicts is needed");
        Params e(nb::borrow<nb::dict>(eyes[k]), "eye");
        sw_eye &y = p.eyes[k];
        y.cx_px = e.num("cx_px", 0.0);
        y.cy_px = e.num("cy_px", 0.0);
        y.diameter_px = e.num("diameter_px", 0.0);
        y.ellipticity = e.num("ellipticity", 1.0);
        y.angle_deg = e.num("angle_deg", 0.0);
        y.pupil_mm = e.num("pupil_mm", 0.0);
        nb::object cf = e.get("coef_um");
        e.done();
        y.coef_um = nullptr;
        y.count = 0;
        if (!cf.is_none()) {
            coefs[k] = flat_arg<double>(cf, "coef_um", 0, false);
            if (coefs[k].where == Where::device)
                type_error("coef_um: a host (NumPy) array is needed");
            y.coef_um = (const double *)coefs[k].data;
            y.count = (int32_t)coefs[k].size;
        }
    }
    ImageArg o = image_arg(out, "out", false, PIX_ALL, true);
    if (o.width != s.width || o.rows != s.height || o.where == Where::device)
        value_error("out: a host array of %d x %d (width x height) is needed", s.width, s.height);
    const bool with_ref = !reference.is_none();
    ImageArg ro;
    if (with_ref) {
        ro = image_arg(reference, "reference", false, PIX_ALL, true);
        if (ro.width != s.width || ro.rows != s.height || ro.img.type != o.img.type ||
            ro.where == Where::device)
            value_error("reference: a host array like out is needed");
    }
    det.out_type = o.img.type;
    Truth truth;
    Img e;
    sw_status st;
    std::string msg;
    {
        nb::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(c.mu);
        st = sw_image_alloc(c.ctx, s.width, s.height, SW_PIX_F32, &e.i);
        if (st == SW_OK)
            st = sw_eyesim_render(c.ctx, &p, &e.i, &truth.t);
        if (st == SW_OK)
            st = sw_detector_apply(c.ctx, &det, &e.i, &o.img);
        if (st == SW_OK && with_ref) {
            for (size_t k = 0; k < ne; k++) {
                p.eyes[k].coef_um = nullptr;
                p.eyes[k].count = 0;
            }
            sw_eye_artefacts_none(&p.art);
            st = sw_eyesim_render(c.ctx, &p, &e.i, nullptr);
            sw_detector rd = det;
            rd.seed = det.seed + 0x9E3779B97F4A7C15ull; // the command's reference_detector
            if (st == SW_OK)
                st = sw_detector_apply(c.ctx, &rd, &e.i, &ro.img);
        }
        if (st != SW_OK)
            msg = sw_context_error(c.ctx);
    }
    if (st != SW_OK)
        raise_status(st, msg);
    nb::list result;
    for (int k = 0; k < truth.t.n_eyes; k++) {
        const sw_eye_truth &t = truth.t.eye[k];
        nb::dict d;
        d["cx_px"] = t.cx_px;
        d["cy_px"] = t.cy_px;
        d["a_px"] = t.a_px;
        d["b_px"] = t.b_px;
        d["angle_deg"] = t.angle_deg;
        d["pupil_mm"] = t.pupil_mm;
        d["reflection_x_px"] = t.reflection_x_px;
        d["reflection_y_px"] = t.reflection_y_px;
        d["coef_um"] = vec_array(t.coef_um, (size_t)(t.count > 0 ? t.count : 0));
        const sw_sh_truth &h = t.sh;
        const size_t n = (size_t)h.nx * (size_t)h.ny;
        int32_t *ix, *iy;
        double *x, *y, *rx, *ry, *sx, *sy, *il;
        nb::dict cols;
        cols["ix"] = new_array(n, &ix);
        cols["iy"] = new_array(n, &iy);
        cols["x_px"] = new_array(n, &x);
        cols["y_px"] = new_array(n, &y);
        cols["ref_x_px"] = new_array(n, &rx);
        cols["ref_y_px"] = new_array(n, &ry);
        cols["illum"] = new_array(n, &il);
        cols["slope_x_rad"] = new_array(n, &sx);
        cols["slope_y_rad"] = new_array(n, &sy);
        for (size_t l = 0; l < n; l++) {
            ix[l] = (int32_t)(l % (size_t)h.nx);
            iy[l] = (int32_t)(l / (size_t)h.nx);
            x[l] = h.x_px[l], y[l] = h.y_px[l], rx[l] = h.ref_x_px[l], ry[l] = h.ref_y_px[l];
            sx[l] = h.slope_x[l], sy[l] = h.slope_y[l], il[l] = h.illum[l];
        }
        d["spots"] = cols;
        result.append(d);
    }
    return result;
}

} // namespace

void bind_sim_eye(nb::module_ &m)
{
    m.def("ocular_pupils", [] {
        nb::list l;
        for (int i = 0; i < SW_OCULAR_PUPILS_COUNT; i++)
            l.append(sw_ocular_pupils_mm[i]);
        return l;
    });
    m.def("ocular_population", &population, nb::arg("ctx"), nb::arg("data").none(),
          nb::arg("pupil_mm"));
    m.def("ocular_draw", &ocular_draw, nb::arg("ctx"), nb::arg("data").none(),
          nb::arg("population_mm"), nb::arg("seed"), nb::arg("index"), nb::arg("options"));
    m.def("ocular_apply", &ocular_apply, nb::arg("ctx"), nb::arg("coef"), nb::arg("from_mm"),
          nb::arg("options"), nb::arg("count"));
    m.def("eye_artefacts_default", &artefacts_default);
    m.def("sim_eye", &sim_eye, nb::arg("ctx"), nb::arg("params"), nb::arg("eyes"), nb::arg("out"),
          nb::arg("reference").none());
}

} // namespace swpy
