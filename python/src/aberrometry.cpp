// spotwave Python binding: ocular aberrometry (aberrometry.h) — the reference centroids of a
// reference image, the per-frame pipeline of one or two eyes (pupil tracking, PAPYCS / CoM /
// Reichenbach search with the dynamic mesh, the modal fit, the refraction), batches, the
// per-lenslet spots, and the command's rescaling of an eye's result to a smaller pupil.
#include "common.h"

#include <nanobind/stl/string.h>

#include <cmath>
#include <string>
#include <vector>

namespace swpy
{

namespace
{

void geometry_from(Params &q, sw_sh_geometry &g)
{
    sw_sh_geometry_default(&g);
    g.x0 = q.num("x0", g.x0);
    g.y0 = q.num("y0", g.y0);
    g.pitch_px = q.num("pitch", g.pitch_px);
    g.nx = (int32_t)q.integer("nx", g.nx);
    g.ny = (int32_t)q.integer("ny", g.ny);
    g.pixel_um = q.num("pixel_um", g.pixel_um);
    g.focal_mm = q.num("focal_mm", g.focal_mm);
    g.valid = nullptr;
}

template <class T> nb::object vec_array(const T *src, size_t n)
{
    T *d;
    auto a = new_array<T>(n, &d);
    for (size_t i = 0; i < n; i++)
        d[i] = src[i];
    return nb::cast(a);
}

nb::tuple reference(nb::object ctx_obj, nb::dict geometry, nb::handle image)
{
    Context &c = context_of(ctx_obj);
    Params q(geometry, "geometry");
    sw_sh_geometry g;
    geometry_from(q, g);
    q.done();
    ImageArg im = image_arg(image, "reference", false, PIX_U8 | PIX_U16 | PIX_F32);
    check_side(c, im.where, im.device_id, "reference");
    call(c, [&] { return sw_sh_geometry_check(c.ctx, &g, im.width, im.rows); });
    const size_t n = (size_t)g.nx * (size_t)g.ny;
    double *rx, *ry;
    auto ax = new_array<double>(n, &rx);
    auto ay = new_array<double>(n, &ry);
    int32_t found = 0;
    call(c, [&] { return sw_aberrometry_reference(c.ctx, &g, &im.img, rx, ry, &found); });
    return nb::make_tuple(ax, ay, found);
}

nb::dict rx_dict(const sw_refraction &r)
{
    nb::dict d;
    d["sphere_d"] = r.sphere_d;
    d["cyl_d"] = r.cyl_d;
    d["axis_deg"] = r.axis_deg;
    d["M"] = r.M;
    d["J0"] = r.J0;
    d["J45"] = r.J45;
    return d;
}

nb::dict eye_dict(const sw_aberrometry_eye &e)
{
    nb::dict d;
    d["valid"] = e.valid != 0;
    d["failure"] = e.valid ? nb::none() : nb::cast(std::string(sw_ab_failure_string(e.failure)));
    d["failure_code"] = (int)e.failure;
    const sw_pupil_ellipse &p = e.pupil;
    nb::dict pd;
    pd["valid"] = p.valid != 0;
    pd["failure"] =
        p.valid ? nb::none() : nb::cast(std::string(sw_pupil_failure_string(p.failure)));
    pd["cx_px"] = p.valid ? p.cx_px : NAN;
    pd["cy_px"] = p.valid ? p.cy_px : NAN;
    pd["a_px"] = p.valid ? p.a_px : NAN;
    pd["b_px"] = p.valid ? p.b_px : NAN;
    pd["angle_deg"] = p.valid ? p.angle_deg : NAN;
    pd["inliers"] = p.inliers;
    d["pupil"] = pd;
    d["cx_px"] = e.cx_px;
    d["cy_px"] = e.cy_px;
    d["radius_px"] = e.radius_px;
    d["pupil_mm"] = e.pupil_mm;
    d["lenslets"] = e.lenslets;
    d["central"] = e.central;
    d["found"] = e.found;
    d["kept"] = e.kept;
    nb::list disc;
    for (int k = 0; k < 3; k++)
        disc.append(e.discarded[k]);
    d["discarded"] = disc;
    d["outliers"] = e.outliers;
    d["terms"] = e.terms;
    const size_t t = (size_t)(e.terms > 0 ? e.terms : 0);
    d["coef_um"] = vec_array(e.coef_um, t);
    d["prelim_um"] = vec_array(e.prelim_um, t);
    d["residual_px"] = e.residual_px;
    d["rx"] = rx_dict(e.rx);
    d["rms_um"] = e.valid ? sw_zernike_rms(e.coef_um, e.terms, 3) : NAN;
    d["hoa_rms_um"] = e.valid && e.terms > 6 ? sw_zernike_rms(e.coef_um, e.terms, 6) : NAN;
    return d;
}

nb::dict result_dict(const sw_aberrometry_result &r)
{
    nb::dict d;
    d["scale"] = r.scale;
    d["split_x"] = r.split_x;
    nb::list eyes;
    for (int k = 0; k < r.n_eyes; k++)
        eyes.append(eye_dict(r.eye[k]));
    d["eyes"] = eyes;
    return d;
}

struct Plan {
    nb::object ctx_obj;
    Context *ctx = nullptr;
    sw_aberrometry_plan *plan = nullptr;
    sw_aberrometry_params p{};
    std::vector<double> ref_x, ref_y;
    Plan() = default;
    Plan(const Plan &) = delete;
    Plan &operator=(const Plan &) = delete;
    ~Plan()
    {
        sw_aberrometry_destroy(plan);
    }
};

nb::dict defaults()
{
    sw_sh_geometry g;
    sw_sh_geometry_default(&g);
    sw_aberrometry_params p;
    sw_aberrometry_params_default(&p, 640, 640, SW_PIX_U8, &g);
    nb::dict d;
    d["algorithm"] = std::string(sw_search_algorithm_string(p.algorithm));
    d["order"] = p.order;
    d["prelim_order"] = p.prelim_order;
    d["central_fraction"] = p.central_fraction;
    d["mesh_stages"] = p.mesh_stages;
    d["mesh_tolerance"] = p.mesh_tolerance;
    d["mesh_slopes_per_term"] = p.mesh_slopes_per_term;
    d["neighbour_window"] = p.neighbour_window;
    d["mesh_raise_residual_px"] = p.mesh_raise_residual_px;
    d["outlier_sigma"] = p.outlier_sigma;
    d["outlier_min_px"] = p.outlier_min_px;
    d["magnification"] = p.magnification;
    d["min_window_px"] = p.min_window_px;
    d["discard_contrast"] = p.discard_contrast;
    d["discard_ring_px"] = p.discard_ring_px;
    d["min_spacing"] = p.min_spacing;
    d["max_spacing"] = p.max_spacing;
    d["peak_box"] = p.peak_box;
    d["streams"] = p.streams;
    return d;
}

void plan_init(Plan *self, nb::object ctx_obj, nb::dict params)
{
    new (self) Plan();
    self->ctx_obj = ctx_obj;
    self->ctx = &context_of(ctx_obj);
    Params q(params, "AberrometryPlan");
    sw_sh_geometry g;
    geometry_from(q, g);
    const int32_t w = (int32_t)q.integer("width", 0), h = (int32_t)q.integer("height", 0);
    sw_pixel_type t;
    std::string ts = q.str("pixel_type", "u8");
    if (sw_pixel_type_parse(ts.c_str(), &t) != SW_OK)
        value_error("dtype: '%s' is not uint8, uint16 or float32", ts.c_str());
    sw_aberrometry_params &p = self->p;
    sw_aberrometry_params_default(&p, w, h, t, &g);
    p.n_eyes = (int32_t)q.integer("n_eyes", p.n_eyes);
    std::string alg = q.str("algorithm", "papycs");
    if (sw_search_algorithm_parse(alg.c_str(), &p.algorithm) != SW_OK)
        value_error("algorithm: '%s' is not 'papycs', 'com' or 'reichenbach'", alg.c_str());
    p.order = (int32_t)q.integer("order", p.order);
    p.prelim_order = (int32_t)q.integer("prelim_order", p.prelim_order);
    p.central_fraction = q.num("central_fraction", p.central_fraction);
    p.mesh_stages = (int32_t)q.integer("mesh_stages", p.mesh_stages);
    p.mesh_tolerance = q.num("mesh_tolerance", p.mesh_tolerance);
    p.mesh_slopes_per_term = (int32_t)q.integer("mesh_slopes_per_term", p.mesh_slopes_per_term);
    p.neighbour_window = q.num("neighbour_window", p.neighbour_window);
    p.mesh_raise_residual_px = q.num("mesh_raise_residual_px", p.mesh_raise_residual_px);
    p.outlier_sigma = q.num("outlier_sigma", p.outlier_sigma);
    p.outlier_min_px = q.num("outlier_min_px", p.outlier_min_px);
    p.fit_radius_px = q.num("fit_radius_px", p.fit_radius_px);
    p.magnification = q.num("magnification", p.magnification);
    p.vertex_mm = q.num("vertex_mm", p.vertex_mm);
    p.higher_order_rx = q.flag("higher_order_rx", false) ? 1 : 0;
    p.window_px = (int32_t)q.integer("window_px", p.window_px);
    p.min_window_px = (int32_t)q.integer("min_window_px", p.min_window_px);
    p.discard = q.flag("discard", true) ? 1 : 0;
    p.discard_contrast = q.num("discard_contrast", p.discard_contrast);
    p.discard_ring_px = (int32_t)q.integer("discard_ring_px", p.discard_ring_px);
    p.min_spacing = q.num("min_spacing", p.min_spacing);
    p.max_spacing = q.num("max_spacing", p.max_spacing);
    p.peak_box = (int32_t)q.integer("peak_box", p.peak_box);
    p.peak_threshold = q.num("peak_threshold", p.peak_threshold);
    p.streams = (int32_t)q.integer("streams", p.streams);
    p.pupil.n_pupils = p.n_eyes;
    pupil_extras(q, p.pupil);
    nb::object rx = q.get("ref_x"), ry = q.get("ref_y");
    q.done();
    const size_t n = (size_t)(g.nx > 0 ? g.nx : 0) * (size_t)(g.ny > 0 ? g.ny : 0);
    if (rx.is_none() != ry.is_none())
        value_error("reference: give ref_x and ref_y, or neither");
    if (!rx.is_none()) {
        FlatArg a = flat_arg<double>(rx, "ref_x", n, false),
                b = flat_arg<double>(ry, "ref_y", n, false);
        if (a.where == Where::device || b.where == Where::device)
            type_error("reference: host (NumPy) arrays are needed");
        self->ref_x.assign((const double *)a.data, (const double *)a.data + n);
        self->ref_y.assign((const double *)b.data, (const double *)b.data + n);
        p.ref_x = self->ref_x.data();
        p.ref_y = self->ref_y.data();
    }
    Context &c = *self->ctx;
    call(c, [&] { return sw_aberrometry_create(c.ctx, &p, &self->plan); });
}

void check_frame(const Plan &pl, const ImageArg &im)
{
    if (im.width != pl.p.width || im.rows != pl.p.height || im.img.type != pl.p.type)
        value_error("image: %s frames of %d x %d (width x height), the plan was made for %s "
                    "frames of %d x %d",
                    sw_pixel_type_string(im.img.type), im.width, im.rows,
                    sw_pixel_type_string(pl.p.type), pl.p.width, pl.p.height);
    check_side(*pl.ctx, im.where, im.device_id, "image");
}

// One frame (2-D) or a stack (3-D: run_batch, frames in flight on the GPU); returns a list of
// result dicts, one per frame.
nb::list plan_run(Plan &pl, nb::handle frames)
{
    ImageArg im = image_arg(frames, "image", true, PIX_U8 | PIX_U16 | PIX_F32);
    check_frame(pl, im);
    std::vector<sw_aberrometry_result> res((size_t)im.frames);
    Context &c = *pl.ctx;
    if (im.frames == 1) {
        call(c, [&] { return sw_aberrometry_run(pl.plan, &im.img, &res[0]); });
    } else {
        std::vector<sw_image> imgs((size_t)im.frames, im.img);
        std::vector<const sw_image *> ptr((size_t)im.frames);
        for (int32_t f = 0; f < im.frames; f++) {
            imgs[f].height = im.rows;
            imgs[f].data = (uint8_t *)im.img.data + (size_t)f * im.rows * im.img.stride;
            ptr[f] = &imgs[f];
        }
        call(c,
             [&] { return sw_aberrometry_run_batch(pl.plan, ptr.data(), im.frames, res.data()); });
    }
    nb::list out;
    for (auto &r : res)
        out.append(result_dict(r));
    return out;
}

nb::dict plan_spots(Plan &pl)
{
    const size_t n = (size_t)pl.p.geometry.nx * (size_t)pl.p.geometry.ny;
    double *x, *y, *x0, *y0;
    uint8_t *st, *eye;
    nb::dict d;
    d["x_px"] = new_array(n, &x);
    d["y_px"] = new_array(n, &y);
    d["x0_px"] = new_array(n, &x0);
    d["y0_px"] = new_array(n, &y0);
    d["status"] = new_array(n, &st);
    d["eye"] = new_array(n, &eye);
    Context &c = *pl.ctx;
    call(c, [&] { return sw_aberrometry_spots(pl.plan, x, y, st, eye, x0, y0); });
    return d;
}

nb::object plan_stage_us(Plan &pl)
{
    double us[SW_AB_STAGES];
    sw_aberrometry_stage_us(pl.plan, us);
    return vec_array(us, SW_AB_STAGES);
}

// The command's --pupil-mm: an eye's coefficients rescaled to a smaller pupil and the refraction
// over it (second order, or with the 4th and 6th orders). Returns (coef, rx dict).
nb::tuple rescale_eye(nb::object ctx_obj, nb::handle coef, double from_mm, double to_mm,
                      double vertex_mm, bool higher_orders)
{
    Context &c = context_of(ctx_obj);
    FlatArg a = flat_arg<double>(coef, "coef", 0, false);
    if (a.where == Where::device)
        type_error("coef: a host (NumPy) array is needed");
    const int32_t terms = (int32_t)a.size;
    std::vector<double> v((size_t)(terms < 6 ? 6 : terms), 0.0);
    sw_refraction rx{};
    call(c, [&] {
        sw_status st =
            sw_zernike_rescale(c.ctx, (const double *)a.data, terms, from_mm, to_mm, v.data());
        if (st == SW_OK)
            st = sw_zernike_refraction(c.ctx, v.data(), terms < 6 ? 6 : terms, to_mm,
                                       higher_orders ? 1 : 0, vertex_mm, &rx);
        return st;
    });
    return nb::make_tuple(vec_array(v.data(), (size_t)terms), rx_dict(rx));
}

} // namespace

void bind_aberrometry(nb::module_ &m)
{
    m.def("aberrometry_reference", &reference, nb::arg("ctx"), nb::arg("geometry"),
          nb::arg("image"));
    m.def("aberrometry_defaults", &defaults);
    m.def("aberrometry_rescale_eye", &rescale_eye, nb::arg("ctx"), nb::arg("coef"),
          nb::arg("from_mm"), nb::arg("to_mm"), nb::arg("vertex_mm"),
          nb::arg("higher_orders") = false);
    m.def("zernike_rms", [](nb::handle coef, int32_t first_j) {
        FlatArg a = flat_arg<double>(coef, "coef", 0, false);
        if (a.where == Where::device)
            type_error("coef: a host (NumPy) array is needed");
        return sw_zernike_rms((const double *)a.data, (int32_t)a.size, first_j);
    });
    nb::class_<Plan>(m, "AberrometryPlan", "The aberrometry plan (aberrometry.h).")
        .def("__init__", &plan_init, nb::arg("ctx"), nb::arg("params"))
        .def("run", &plan_run, nb::arg("image"))
        .def("spots", &plan_spots)
        .def("enable_timing",
             [](Plan &pl, bool on) { sw_aberrometry_enable_timing(pl.plan, on ? 1 : 0); })
        .def("stage_us", &plan_stage_us)
        .def_prop_ro("window_px", [](Plan &pl) { return pl.p.window_px; });
}

} // namespace swpy
