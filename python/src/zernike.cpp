// spotwave Python binding: the Zernike stage (zernike.h, zernike_fit.h) — index conversion,
// the modal fit plan, refraction and pupil transforms.
#include "common.h"

#include <nanobind/stl/string.h>

namespace swpy
{

namespace
{

struct ZfitPlan {
    nb::object ctx_obj;
    Context *ctx = nullptr;
    sw_zfit_plan *plan = nullptr;
    sw_zfit_params p{};
    std::vector<uint8_t> mask;
    std::vector<double> weights;
    int32_t terms = 0, nslopes = 0, lenslets = 0;
    ZfitPlan() = default;
    ZfitPlan(const ZfitPlan &) = delete;
    ZfitPlan &operator=(const ZfitPlan &) = delete;
    ~ZfitPlan()
    {
        sw_zfit_destroy(plan);
    }
};

void plan_init(ZfitPlan *self, nb::object ctx_obj, nb::dict params)
{
    new (self) ZfitPlan();
    self->ctx_obj = ctx_obj;
    self->ctx = &context_of(ctx_obj);
    sw_zfit_params &p = self->p;
    sw_zfit_params_default(&p);
    Params q(params, "ZernikeFitPlan");
    sw_sh_geometry &g = p.geometry;
    g.x0 = q.num("x0", g.x0);
    g.y0 = q.num("y0", g.y0);
    g.pitch_px = q.num("pitch", g.pitch_px);
    g.nx = (int32_t)q.integer("nx", g.nx);
    g.ny = (int32_t)q.integer("ny", g.ny);
    g.pixel_um = q.num("pixel_um", g.pixel_um);
    g.focal_mm = q.num("focal_mm", g.focal_mm);
    const int64_t nl = (int64_t)g.nx * g.ny;
    if (nl <= 0 || nl > (1 << 24))
        value_error("grid: %d x %d lenslets is not a grid of 1 .. 2^24 lenslets", g.nx, g.ny);
    self->lenslets = (int32_t)nl;
    if (q.has("mask")) {
        FlatArg a = flat_arg<uint8_t>(q.get("mask"), "mask", (size_t)nl, false);
        if (a.where == Where::device)
            type_error("mask: a host (NumPy) array is needed: the plan copies it");
        self->mask.assign((const uint8_t *)a.data, (const uint8_t *)a.data + nl);
        g.valid = self->mask.data();
    }
    if (q.has("weights")) {
        FlatArg a = flat_arg<double>(q.get("weights"), "weights", (size_t)nl, false);
        if (a.where == Where::device)
            type_error("weights: a host (NumPy) array is needed: the plan copies it");
        self->weights.assign((const double *)a.data, (const double *)a.data + nl);
        p.weights = self->weights.data();
    }
    p.pupil_cx_px = q.num("pupil_cx_px", p.pupil_cx_px);
    p.pupil_cy_px = q.num("pupil_cy_px", p.pupil_cy_px);
    p.pupil_radius_px = q.num("pupil_radius_px", p.pupil_radius_px);
    p.obscuration = q.num("obscuration", p.obscuration);
    p.max_order = (int32_t)q.integer("order", p.max_order);
    p.min_illum = q.num("min_illum", p.min_illum);
    std::string method = q.str("method", "pinv");
    if (method == "pinv")
        p.method = SW_ZFIT_PINV;
    else if (method == "qr")
        p.method = SW_ZFIT_QR;
    else
        value_error("method: '%s' is not 'pinv' or 'qr'", method.c_str());
    p.truncate = (int32_t)q.integer("truncate", p.truncate);
    std::string layout = q.str("slope_layout", "blocks");
    if (layout == "blocks")
        p.layout = SW_SLOPES_BLOCKS;
    else if (layout == "interleaved")
        p.layout = SW_SLOPES_INTERLEAVED;
    else
        value_error("slope_layout: '%s' is not 'blocks' or 'interleaved'", layout.c_str());
    p.max_frames = (int32_t)q.integer("max_frames", p.max_frames);
    q.done();
    Context &c = *self->ctx;
    call(c, [&] { return sw_zfit_create(c.ctx, &p, &self->plan); });
    self->terms = sw_zfit_terms(self->plan);
    self->nslopes = sw_zfit_slopes(self->plan);
}

// Fits `frames` frames: slopes (frames x 2n float32), valid (frames x nx*ny uint8, or None),
// coef out (frames x J float64), residual out (frames float64, or None); one kind of memory.
void plan_run(ZfitPlan &zp, nb::handle slopes, nb::handle valid, int32_t frames, nb::handle coef,
              nb::handle residual)
{
    if (frames < 1 || frames > zp.p.max_frames)
        value_error("frames: %d is not in 1 .. %d (max_frames)", frames, zp.p.max_frames);
    FlatArg s = flat_arg<float>(slopes, "slopes", (size_t)frames * 2 * zp.nslopes, false);
    FlatArg v, r;
    if (!valid.is_none())
        v = flat_arg<uint8_t>(valid, "valid", (size_t)frames * zp.lenslets, false);
    FlatArg c = flat_arg<double>(coef, "coef", (size_t)frames * zp.terms, true);
    if (!residual.is_none())
        r = flat_arg<double>(residual, "residual", (size_t)frames, true);
    Context &ctx = *zp.ctx;
    const FlatArg *all[4] = {&s, &v, &c, &r};
    const char *names[4] = {"slopes", "valid", "coef", "residual"};
    for (int i = 0; i < 4; i++) {
        if (!all[i]->data)
            continue;
        check_side(ctx, all[i]->where, all[i]->device_id, names[i]);
        if ((all[i]->where == Where::device) != (s.where == Where::device))
            type_error("%s: %s memory, slopes %s: give all arrays in one kind of memory", names[i],
                       where_name(all[i]->where), where_name(s.where));
    }
    const sw_memory mem = where_memory(s.where);
    call(ctx, [&] {
        return sw_zfit_run(zp.plan, (const float *)s.data, (const uint8_t *)v.data, frames, mem,
                           (double *)c.data, (double *)r.data);
    });
}

nb::object plan_matrix(ZfitPlan &zp)
{
    const size_t n = 2 * (size_t)zp.nslopes * (size_t)(zp.terms - 1);
    double *d;
    auto a = new_array<double>(n, &d);
    const double *m = sw_zfit_matrix(zp.plan);
    for (size_t i = 0; i < n; i++)
        d[i] = m[i];
    return nb::cast(a);
}

nb::object plan_illum(ZfitPlan &zp)
{
    double *d;
    auto a = new_array<double>((size_t)zp.nslopes, &d);
    for (int32_t k = 0; k < zp.nslopes; k++)
        d[k] = sw_zfit_illum(zp.plan, k);
    return nb::cast(a);
}

nb::dict refraction(nb::handle coef, double pupil_mm, bool higher_orders, double vertex_mm,
                    double shift_d)
{
    FlatArg c = flat_arg<double>(coef, "coef", 0, false);
    if (c.where == Where::device)
        type_error("coef: a host (NumPy) array is needed");
    sw_refraction rx{};
    call_noctx([&] {
        return sw_zernike_refraction_shifted(nullptr, (const double *)c.data, (int32_t)c.size,
                                             pupil_mm, higher_orders ? 1 : 0, vertex_mm, shift_d,
                                             &rx);
    });
    nb::dict d;
    d["M"] = rx.M;
    d["J0"] = rx.J0;
    d["J45"] = rx.J45;
    d["sphere_d"] = rx.sphere_d;
    d["cyl_d"] = rx.cyl_d;
    d["axis_deg"] = rx.axis_deg;
    return d;
}

// The image quality of a wavefront (quality.h): (psf, mtf, numbers), the images flat N * N.
nb::tuple image_quality(nb::object ctx_obj, nb::handle coef, double pupil_mm, double wavelength_um,
                        int32_t size, int32_t pupil_samples, int32_t first_j)
{
    Context &c = context_of(ctx_obj);
    FlatArg a = flat_arg<double>(coef, "coef", 0, false);
    if (a.where == Where::device)
        type_error("coef: a host (NumPy) array is needed");
    if (size < 16 || size > SW_PSF_MAX_SIZE)
        value_error("size: %d is outside 16..%d", (int)size, SW_PSF_MAX_SIZE);
    sw_psf_params p;
    sw_psf_params_default(&p);
    p.size = size;
    p.pupil_samples = pupil_samples;
    p.pupil_mm = pupil_mm;
    p.wavelength_um = wavelength_um;
    p.first_j = first_j;
    int n = 1, m = 0;
    if (a.size > 0 && sw_zernike_osa_nm((int)a.size - 1, &n, &m) != SW_OK)
        value_error("coef: %d terms is beyond order %d", (int)a.size, SW_ZERNIKE_MAX_ORDER);
    p.max_order = n < 1 ? 1 : n;
    float *psf, *mtf;
    auto pa = new_array<float>((size_t)size * (size_t)size, &psf);
    auto ma = new_array<float>((size_t)size * (size_t)size, &mtf);
    sw_psf_quality q{};
    double scale[3] = {0, 0, 0};
    call(c, [&] {
        sw_psf_plan *plan = nullptr;
        sw_status st = sw_psf_create(c.ctx, &p, &plan);
        sw_image pi{}, mi{};
        if (st == SW_OK)
            st = sw_image_wrap(psf, size, size, 0, SW_PIX_F32, SW_MEM_HOST, &pi);
        if (st == SW_OK)
            st = sw_image_wrap(mtf, size, size, 0, SW_PIX_F32, SW_MEM_HOST, &mi);
        if (st == SW_OK)
            st = sw_psf_run(plan, (const double *)a.data, (int32_t)a.size, &pi, &mi, &q);
        if (st == SW_OK) {
            scale[0] = sw_psf_arcmin_per_px(plan);
            scale[1] = sw_psf_cpd_per_px(plan);
            scale[2] = sw_psf_cutoff_cpd(plan);
        }
        sw_psf_destroy(plan);
        return st;
    });
    nb::dict d;
    d["strehl"] = q.strehl;
    d["vsotf"] = q.vsotf;
    d["vsmtf"] = q.vsmtf;
    d["peak_xy"] = nb::make_tuple(q.peak_x, q.peak_y);
    d["arcmin_per_px"] = scale[0];
    d["cpd_per_px"] = scale[1];
    d["cutoff_cpd"] = scale[2];
    return nb::make_tuple(pa, ma, d);
}

nb::object rescale(nb::handle coef, double from_r, double to_r)
{
    FlatArg c = flat_arg<double>(coef, "coef", 0, false);
    if (c.where == Where::device)
        type_error("coef: a host (NumPy) array is needed");
    double *d;
    auto a = new_array<double>(c.size, &d);
    call_noctx([&] {
        return sw_zernike_rescale(nullptr, (const double *)c.data, (int32_t)c.size, from_r, to_r,
                                  d);
    });
    return nb::cast(a);
}

nb::object mirror_x(nb::handle coef)
{
    FlatArg c = flat_arg<double>(coef, "coef", 0, false);
    if (c.where == Where::device)
        type_error("coef: a host (NumPy) array is needed");
    double *d;
    auto a = new_array<double>(c.size, &d);
    sw_zernike_mirror_x((const double *)c.data, (int32_t)c.size, d);
    return nb::cast(a);
}

// Z_j (and optionally its gradient) at N points for K indices: (K x N) float64 arrays.
nb::tuple zernike_eval(nb::handle js, nb::handle x, nb::handle y, bool grad)
{
    FlatArg aj = flat_arg<int32_t>(js, "j", 0, false);
    FlatArg ax = flat_arg<double>(x, "x", 0, false);
    FlatArg ay = flat_arg<double>(y, "y", ax.size, false);
    if (aj.where == Where::device || ax.where == Where::device || ay.where == Where::device)
        type_error("x, y: host (NumPy) arrays are needed");
    const size_t k = aj.size, n = ax.size;
    const int32_t *jj = (const int32_t *)aj.data;
    std::vector<int> nn(k), mm(k);
    for (size_t i = 0; i < k; i++)
        if (sw_zernike_osa_nm(jj[i], &nn[i], &mm[i]) != SW_OK)
            value_error("j: %d is not an OSA/ANSI index (0 .. %d)", jj[i],
                        sw_zernike_count(SW_ZERNIKE_MAX_ORDER) - 1);
    double *v, *gx = nullptr, *gy = nullptr;
    auto av = new_array<double>(k * n, &v);
    nb::object ox = nb::none(), oy = nb::none();
    if (grad) {
        ox = nb::cast(new_array<double>(k * n, &gx));
        oy = nb::cast(new_array<double>(k * n, &gy));
    }
    const double *px = (const double *)ax.data, *py = (const double *)ay.data;
    {
        nb::gil_scoped_release nogil;
        for (size_t i = 0; i < k; i++)
            for (size_t p = 0; p < n; p++) {
                if (grad)
                    sw_zernike_eval_grad(nn[i], mm[i], px[p], py[p], &v[i * n + p], &gx[i * n + p],
                                         &gy[i * n + p]);
                else
                    v[i * n + p] = sw_zernike_eval(nn[i], mm[i], px[p], py[p]);
            }
    }
    return nb::make_tuple(av, ox, oy);
}

struct ZmapPlan {
    nb::object ctx_obj;
    Context *ctx = nullptr;
    sw_zmap_plan *plan = nullptr;
    sw_zmap_params p{};
    ZmapPlan() = default;
    ZmapPlan(const ZmapPlan &) = delete;
    ZmapPlan &operator=(const ZmapPlan &) = delete;
    ~ZmapPlan()
    {
        sw_zmap_destroy(plan);
    }
};

void zmap_init(ZmapPlan *self, nb::object ctx_obj, nb::dict params)
{
    new (self) ZmapPlan();
    self->ctx_obj = ctx_obj;
    self->ctx = &context_of(ctx_obj);
    sw_zmap_params_default(&self->p);
    Params q(params, "MapPlan");
    self->p.size = (int32_t)q.integer("size", self->p.size);
    self->p.max_order = (int32_t)q.integer("order", self->p.max_order);
    self->p.obscuration = q.num("obscuration", self->p.obscuration);
    self->p.half = q.flag("half", false) ? 1 : 0;
    q.done();
    Context &c = *self->ctx;
    call(c, [&] { return sw_zmap_create(c.ctx, &self->p, &self->plan); });
}

// The map of coef (host float64, OSA) into out (a writable float32 size x size image, host or
// device on a CUDA context); direct: per-pixel evaluation instead of the basis maps.
void zmap_run(ZmapPlan &zp, nb::handle coef, nb::handle out, bool direct)
{
    FlatArg c = flat_arg<double>(coef, "coef", 0, false);
    if (c.where == Where::device)
        type_error("coef: a host (NumPy) array of coefficients is needed");
    ImageArg o = image_arg(out, "out", false, PIX_F32, true);
    check_side(*zp.ctx, o.where, o.device_id, "out");
    Context &ctx = *zp.ctx;
    call(ctx, [&] {
        return direct ? sw_zmap_run_direct(zp.plan, (const double *)c.data, (int32_t)c.size, &o.img)
                      : sw_zmap_run(zp.plan, (const double *)c.data, (int32_t)c.size, &o.img);
    });
}

} // namespace

void bind_zernike(nb::module_ &m)
{
    m.def("zernike_eval", &zernike_eval, nb::arg("j"), nb::arg("x"), nb::arg("y"),
          nb::arg("grad") = false);
    nb::class_<ZmapPlan>(m, "ZernikeMapPlan",
                         "The wavefront map plan (zernike_fit.h): ZernikeMapPlan(ctx, params). "
                         "Use spotwave.zernike.MapPlan.")
        .def("__init__", &zmap_init, nb::arg("ctx"), nb::arg("params"))
        .def("run", &zmap_run, nb::arg("coef"), nb::arg("out"), nb::arg("direct") = false)
        .def_prop_ro("size", [](ZmapPlan &zp) { return zp.p.size; })
        .def_prop_ro("terms", [](ZmapPlan &zp) { return sw_zernike_count(zp.p.max_order); })
        .def_prop_ro("ctx", [](ZmapPlan &zp) { return zp.ctx_obj; });

    nb::class_<ZfitPlan>(m, "ZernikeFitPlan",
                         "The Zernike fit plan (zernike_fit.h): ZernikeFitPlan(ctx, params). Use "
                         "spotwave.zernike.FitPlan.")
        .def("__init__", &plan_init, nb::arg("ctx"), nb::arg("params"))
        .def("run", &plan_run, nb::arg("slopes"), nb::arg("valid").none(), nb::arg("frames"),
             nb::arg("coef"), nb::arg("residual").none())
        .def("matrix", &plan_matrix)
        .def("illum", &plan_illum)
        .def_prop_ro("terms", [](ZfitPlan &zp) { return zp.terms; })
        .def_prop_ro("nslopes", [](ZfitPlan &zp) { return zp.nslopes; })
        .def_prop_ro("used", [](ZfitPlan &zp) { return sw_zfit_used(zp.plan); })
        .def_prop_ro("lenslets", [](ZfitPlan &zp) { return zp.lenslets; })
        .def_prop_ro("max_frames", [](ZfitPlan &zp) { return zp.p.max_frames; })
        .def_prop_ro("ctx", [](ZfitPlan &zp) { return zp.ctx_obj; });

    m.def("zernike_osa", [](int n, int m_) { return sw_zernike_osa(n, m_); });
    m.def("zernike_noll", [](int n, int m_) { return sw_zernike_noll(n, m_); });
    m.def("zernike_osa_nm", [](int j) {
        int n = 0, mm = 0;
        if (sw_zernike_osa_nm(j, &n, &mm) != SW_OK)
            value_error("j: %d is not an OSA/ANSI index (0 .. %d)", j,
                        sw_zernike_count(SW_ZERNIKE_MAX_ORDER) - 1);
        return nb::make_tuple(n, mm);
    });
    m.def("zernike_noll_nm", [](int j) {
        int n = 0, mm = 0;
        if (sw_zernike_noll_nm(j, &n, &mm) != SW_OK)
            value_error("j: %d is not a Noll index (1 .. %d)", j,
                        sw_zernike_count(SW_ZERNIKE_MAX_ORDER));
        return nb::make_tuple(n, mm);
    });
    m.def("zernike_count", [](int order) { return sw_zernike_count(order); });
    m.attr("ZERNIKE_MAX_ORDER") = SW_ZERNIKE_MAX_ORDER;
    m.def("zernike_refraction", &refraction, nb::arg("coef"), nb::arg("pupil_mm"),
          nb::arg("higher_orders") = false, nb::arg("vertex_mm") = 0.0, nb::arg("shift_d") = 0.0);
    m.def("eye_lca_d", [](double from_um, double to_um) { return sw_eye_lca_d(from_um, to_um); });
    m.def("zernike_flip", [](nb::handle coef, bool fx, bool fy) {
        FlatArg c = flat_arg<double>(coef, "coef", 0, false);
        double *d;
        auto a = new_array<double>(c.size, &d);
        sw_zernike_flip((const double *)c.data, (int32_t)c.size, fx ? 1 : 0, fy ? 1 : 0, d);
        return a;
    });
    m.def("refraction_transpose", [](double s, double c, double a) {
        double s2, c2, a2;
        sw_refraction_transpose(s, c, a, &s2, &c2, &a2);
        return nb::make_tuple(s2, c2, a2);
    });
    m.def("image_quality", &image_quality, nb::arg("ctx"), nb::arg("coef"), nb::arg("pupil_mm"),
          nb::arg("wavelength_um"), nb::arg("size"), nb::arg("pupil_samples"), nb::arg("first_j"));
    m.def("zernike_rescale", &rescale, nb::arg("coef"), nb::arg("from_r"), nb::arg("to_r"));
    m.def("zernike_mirror_x", &mirror_x, nb::arg("coef"));
}

} // namespace swpy
