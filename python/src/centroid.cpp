// spotwave Python binding: the centroid stage (centroid.h, geometry.h) — the Shack-Hartmann
// centroid plan (centre of gravity and the other methods, their error bars and status), its
// reference, and the geometry finder.
#include "common.h"

#include <nanobind/stl/string.h>

#include <cmath>

namespace swpy
{

namespace
{

// The result arrays a run writes, in the order of run's arguments: x, y, intensity, valid,
// slopes, saturated, x_var, y_var, snr, status.
constexpr int NOUT = 10;

struct CentroidPlan {
    nb::object ctx_obj;
    Context *ctx = nullptr;
    sw_centroid_plan *plan = nullptr;
    sw_centroid_params p{};
    std::vector<uint8_t> mask;
    std::vector<float> dark, flat, lut, corr;
    int32_t lenslets = 0, nslopes = 0;
    // Outputs bound once (bind_outputs) for run_device: their pointers, and the arrays held.
    sw_centroid_result bound{};
    FlatArg bound_keep[NOUT];
    bool has_bound = false;
    CentroidPlan() = default;
    CentroidPlan(const CentroidPlan &) = delete;
    CentroidPlan &operator=(const CentroidPlan &) = delete;
    ~CentroidPlan()
    {
        sw_centroid_destroy(plan);
    }
};

template <class T> void copy_host(nb::handle obj, const char *name, size_t n, std::vector<T> &v)
{
    FlatArg a = flat_arg<T>(obj, name, n, false);
    if (a.where == Where::device)
        type_error("%s: a host (NumPy) array is needed: the plan copies it when it is made", name);
    v.assign((const T *)a.data, (const T *)a.data + n);
}

// The geometry from a params dict (the keys of sw_sh_geometry).
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
}

void plan_init(CentroidPlan *self, nb::object ctx_obj, nb::dict params)
{
    new (self) CentroidPlan();
    self->ctx_obj = ctx_obj;
    self->ctx = &context_of(ctx_obj);
    sw_centroid_params &p = self->p;
    sw_centroid_params_default(&p);
    Params q(params, "CentroidPlan");
    geometry_from(q, p.geometry);
    p.width = (int32_t)q.integer("width", p.width);
    p.height = (int32_t)q.integer("height", p.height);
    std::string t = q.str("pixel_type", "u8");
    if (sw_pixel_type_parse(t.c_str(), &p.type) != SW_OK)
        value_error("pixel_type: '%s' is not uint8, uint16 or float32", t.c_str());
    p.max_frames = (int32_t)q.integer("max_frames", p.max_frames);
    std::string path = q.str("path", "auto");
    if (sw_centroid_path_parse(path.c_str(), &p.path) != SW_OK)
        value_error("path: '%s' is not 'auto', 'host', 'device', 'copy' or 'mapped'", path.c_str());
    const size_t npix = (size_t)(p.width > 0 ? p.width : 0) * (size_t)(p.height > 0 ? p.height : 0);
    const int64_t nl = (int64_t)p.geometry.nx * p.geometry.ny;
    if (q.has("mask")) {
        if (nl <= 0 || nl > (1 << 24))
            value_error("mask: the grid %d x %d has no valid lenslet count", p.geometry.nx,
                        p.geometry.ny);
        copy_host<uint8_t>(q.get("mask"), "mask", (size_t)nl, self->mask);
        p.geometry.valid = self->mask.data();
    }
    if (q.has("dark")) {
        copy_host<float>(q.get("dark"), "dark", npix, self->dark);
        p.dark = self->dark.data();
    }
    if (q.has("flat")) {
        copy_host<float>(q.get("flat"), "flat", npix, self->flat);
        p.flat = self->flat.data();
    }
    if (q.has("lut")) {
        const size_t n = p.type == SW_PIX_U8 ? 256 : p.type == SW_PIX_U16 ? 65536 : 0;
        if (n == 0)
            value_error("lut: a look-up table needs uint8 or uint16 frames, not %s",
                        sw_pixel_type_string(p.type));
        copy_host<float>(q.get("lut"), "lut", n, self->lut);
        p.lut = self->lut.data();
    }
    std::string mode = q.str("threshold_mode", "none");
    if (mode == "none")
        p.threshold_mode = SW_THRESHOLD_NONE;
    else if (mode == "subtract")
        p.threshold_mode = SW_THRESHOLD_SUBTRACT;
    else if (mode == "zero")
        p.threshold_mode = SW_THRESHOLD_ZERO;
    else
        value_error("threshold_mode: '%s' is not 'subtract' or 'zero'", mode.c_str());
    std::string kind = q.str("threshold_kind", "absolute");
    if (kind == "absolute")
        p.threshold_kind = SW_THRESHOLD_ABSOLUTE;
    else if (kind == "fraction")
        p.threshold_kind = SW_THRESHOLD_FRACTION;
    else
        value_error("threshold_kind: '%s' is not 'absolute' or 'fraction'", kind.c_str());
    p.threshold = q.num("threshold", p.threshold);
    p.gamma = q.num("gamma", p.gamma);
    p.window = (int32_t)q.integer("window", p.window);
    std::string layout = q.str("slope_layout", "blocks");
    if (layout == "blocks")
        p.slope_layout = SW_SLOPES_BLOCKS;
    else if (layout == "interleaved")
        p.slope_layout = SW_SLOPES_INTERLEAVED;
    else
        value_error("slope_layout: '%s' is not 'blocks' or 'interleaved'", layout.c_str());
    // 0: the type's full scale (none for f32); negative: none; else the raw level
    p.saturation = q.num("saturation", p.saturation);
    p.drop_saturated = q.flag("drop_saturated", false) ? 1 : 0;
    // The method and its parameters (centroid.h "Methods"); the library checks them.
    std::string method = q.str("method", "cog");
    if (sw_centroid_method_parse(method.c_str(), &p.method) != SW_OK)
        value_error("method: '%s' is not 'cog', 'wcog', 'local', 'brightest', 'correlation' or "
                    "'quadcell'",
                    method.c_str());
    p.fwhm_px = q.num("fwhm_px", p.fwhm_px);
    p.wcog_iterations = (int32_t)q.integer("iterations", p.wcog_iterations);
    p.local_k = q.num("local_k", p.local_k);
    p.brightest_n = (int32_t)q.integer("brightest_n", p.brightest_n);
    if (q.has("template")) {
        copy_host<float>(q.get("template"), "template", npix, self->corr);
        p.corr_reference = self->corr.data();
    }
    p.corr_search_px = (int32_t)q.integer("search_px", p.corr_search_px);
    p.quad_gain_px = q.num("quad_gain_px", p.quad_gain_px);
    // Detector (error bars, SNR) and the validity checks (centroid.h "Status").
    p.gain_e_per_adu = q.num("gain", p.gain_e_per_adu);
    p.read_noise_e = q.num("read_noise", p.read_noise_e);
    p.min_snr = q.num("min_snr", p.min_snr);
    p.max_shift_px = q.num("max_shift_px", p.max_shift_px);
    p.peak_border = q.flag("peak_border", false) ? 1 : 0;
    p.edge_px = q.num("edge_px", p.edge_px);
    p.edge_fraction = q.num("edge_fraction", p.edge_fraction);
    q.done();
    Context &c = *self->ctx;
    call(c, [&] { return sw_centroid_create(c.ctx, &p, &self->plan); });
    self->lenslets = sw_centroid_plan_lenslets(self->plan);
    self->nslopes = sw_centroid_plan_slopes(self->plan);
}

// The result descriptor of the given output arrays h (NOUT, any of them None), checked against
// the plan (sizes: whole frames, at least `frames`; one kind of memory; the context's device);
// the arrays are held in keep.
sw_centroid_result outputs_of(CentroidPlan &cp, int32_t frames, const nb::handle h[NOUT],
                              FlatArg keep[NOUT])
{
    sw_centroid_result r{};
    r.lenslets = cp.lenslets;
    r.nslopes = cp.nslopes;
    r.frames = -1;
    bool first = true;
    Where where = Where::host;
    static const char *const names[NOUT] = {
        "out.x",         "out.y",     "out.intensity", "out.valid", "out.slopes",
        "out.saturated", "out.x_var", "out.y_var",     "out.snr",   "out.status"};
    for (int i = 0; i < NOUT; i++) {
        if (h[i].is_none())
            continue;
        const bool u8 = i == 3 || i == 5 || i == 9; // valid, saturated, status
        const char *name = names[i];
        keep[i] =
            u8 ? flat_arg<uint8_t>(h[i], name, 0, true) : flat_arg<float>(h[i], name, 0, true);
        const size_t per = i == 4 ? 2 * (size_t)cp.nslopes : (size_t)cp.lenslets;
        if (per == 0 ? keep[i].size != 0
                     : keep[i].size % per != 0 || keep[i].size / per < (size_t)frames)
            value_error(
                "%s: %zu elements; the outputs hold whole frames of %zu, at least %d frames", name,
                keep[i].size, per, frames);
        check_side(*cp.ctx, keep[i].where, keep[i].device_id, name);
        const int32_t cap = per == 0 ? frames : (int32_t)(keep[i].size / per);
        if (first) {
            where = keep[i].where;
            r.frames = cap;
            first = false;
        } else {
            if (keep[i].where != where)
                type_error("%s: %s memory, the other outputs %s: give all outputs in one kind",
                           name, where_name(keep[i].where), where_name(where));
            r.frames = cap < r.frames ? cap : r.frames;
        }
    }
    if (first)
        r.frames = frames;
    r.memory = where_memory(where);
    r.x = (float *)keep[0].data;
    r.y = (float *)keep[1].data;
    r.intensity = (float *)keep[2].data;
    r.valid = (uint8_t *)keep[3].data;
    r.slopes = (float *)keep[4].data;
    r.saturated = (uint8_t *)keep[5].data;
    r.x_var = (float *)keep[6].data;
    r.y_var = (float *)keep[7].data;
    r.snr = (float *)keep[8].data;
    r.status = (uint8_t *)keep[9].data;
    return r;
}

int32_t plan_run(CentroidPlan &cp, nb::handle frames, nb::handle x, nb::handle y,
                 nb::handle intensity, nb::handle valid, nb::handle slopes, nb::handle saturated,
                 nb::handle x_var, nb::handle y_var, nb::handle snr, nb::handle status)
{
    ImageArg im = image_arg(frames, "image", true, PIX_U8 | PIX_U16 | PIX_F32);
    const sw_centroid_params &p = cp.p;
    if (im.width != p.width || im.rows != p.height || im.img.type != p.type)
        value_error("image: %s frames of %d x %d (width x height), the plan was made for %s "
                    "frames of %d x %d",
                    sw_pixel_type_string(im.img.type), im.width, im.rows,
                    sw_pixel_type_string(p.type), p.width, p.height);
    if (im.frames > p.max_frames)
        value_error("image: %d frames, the plan takes at most %d (max_frames)", im.frames,
                    p.max_frames);
    check_side(*cp.ctx, im.where, im.device_id, "image");
    const sw_centroid_path path = sw_centroid_plan_path(cp.plan);
    const bool want_device = path == SW_CENTROID_DEVICE;
    if (want_device != (im.where == Where::device))
        type_error("image: %s memory, but the plan runs the '%s' path, which reads %s frames "
                   "(make the plan with memory='%s')",
                   where_name(im.where), sw_centroid_path_string(path),
                   want_device ? "device" : "host", im.where == Where::device ? "device" : "host");
    FlatArg keep[NOUT];
    const nb::handle h[NOUT] = {x,         y,     intensity, valid, slopes,
                                saturated, x_var, y_var,     snr,   status};
    sw_centroid_result r = outputs_of(cp, im.frames, h, keep);
    Context &c = *cp.ctx;
    call(c, [&] { return sw_centroid_run(cp.plan, &im.img, &r); });
    return im.frames;
}

// Binds device output arrays once, for run_device (the real-time path: no argument conversion
// per frame). The arrays are held by the plan until the next bind or the plan's end.
void plan_bind_outputs(CentroidPlan &cp, nb::handle x, nb::handle y, nb::handle intensity,
                       nb::handle valid, nb::handle slopes, nb::handle saturated, nb::handle x_var,
                       nb::handle y_var, nb::handle snr, nb::handle status)
{
    FlatArg keep[NOUT];
    const nb::handle h[NOUT] = {x,         y,     intensity, valid, slopes,
                                saturated, x_var, y_var,     snr,   status};
    sw_centroid_result r = outputs_of(cp, 1, h, keep);
    if (r.memory != SW_MEM_DEVICE)
        type_error("out: run_device writes device outputs (a result made with memory='device')");
    for (int i = 0; i < NOUT; i++)
        cp.bound_keep[i] = std::move(keep[i]);
    cp.bound = r;
    cp.has_bound = true;
}

// One device frame (or a vertical stack of `frames`) given by its address and row stride in
// bytes, into the bound outputs: the C call and nothing else. The caller (Python) has checked
// the array's shape and dtype against the plan and ordered the streams.
int32_t plan_run_device(CentroidPlan &cp, uintptr_t ptr, size_t stride, int32_t frames)
{
    if (!cp.has_bound)
        type_error("run_device: bind_outputs first");
    if (sw_centroid_plan_path(cp.plan) != SW_CENTROID_DEVICE)
        type_error("run_device: the plan runs the '%s' path (make it with memory='device')",
                   sw_centroid_path_string(sw_centroid_plan_path(cp.plan)));
    if (frames < 1 || frames > cp.bound.frames)
        value_error("image: %d frames, the bound outputs hold %d", frames, cp.bound.frames);
    sw_image img{};
    img.width = cp.p.width;
    img.height = cp.p.height * frames;
    img.stride = stride;
    img.type = cp.p.type;
    img.memory = SW_MEM_DEVICE;
    img.data = (void *)ptr;
    Context &c = *cp.ctx;
    call(c, [&] { return sw_centroid_run(cp.plan, &img, &cp.bound); });
    return frames;
}

void plan_set_reference(CentroidPlan &cp, nb::handle ref_x, nb::handle ref_y)
{
    if (ref_x.is_none() != ref_y.is_none())
        value_error("reference: give both ref_x and ref_y, or neither");
    std::vector<double> rx, ry;
    if (!ref_x.is_none()) {
        copy_host<double>(ref_x, "ref_x", (size_t)cp.lenslets, rx);
        copy_host<double>(ref_y, "ref_y", (size_t)cp.lenslets, ry);
    }
    Context &c = *cp.ctx;
    call(c, [&] {
        return sw_centroid_set_reference(cp.plan, rx.empty() ? nullptr : rx.data(),
                                         ry.empty() ? nullptr : ry.data());
    });
}

nb::object slope_lenslets(CentroidPlan &cp)
{
    int32_t *d;
    auto a = new_array<int32_t>((size_t)cp.nslopes, &d);
    for (int32_t k = 0; k < cp.nslopes; k++)
        d[k] = sw_centroid_plan_slope_lenslet(cp.plan, k);
    return nb::cast(a);
}

// The reference positions of the geometry's lenslets (geometry.h), (ny, nx) each, flat.
nb::tuple geometry_reference(nb::dict params)
{
    Params q(params, "geometry");
    sw_sh_geometry g;
    geometry_from(q, g);
    q.done();
    call_noctx([&] { return sw_sh_geometry_check(nullptr, &g, 0, 0); });
    const size_t n = (size_t)g.nx * (size_t)g.ny;
    double *rx, *ry;
    auto ax = new_array<double>(n, &rx);
    auto ay = new_array<double>(n, &ry);
    for (int32_t iy = 0; iy < g.ny; iy++)
        for (int32_t ix = 0; ix < g.nx; ix++)
            sw_sh_reference(&g, ix, iy, &rx[(size_t)iy * g.nx + ix], &ry[(size_t)iy * g.nx + ix]);
    return nb::make_tuple(ax, ay);
}

// sw_sh_geometry_check against an image size (0, 0: the geometry alone).
void geometry_check(nb::dict params, int32_t width, int32_t height)
{
    Params q(params, "geometry");
    sw_sh_geometry g;
    geometry_from(q, g);
    q.done();
    call_noctx([&] { return sw_sh_geometry_check(nullptr, &g, width, height); });
}

nb::dict find_geometry(nb::object ctx_obj, nb::handle reference, double pixel_um, double focal_mm)
{
    Context &c = context_of(ctx_obj);
    ImageArg im = image_arg(reference, "reference", false, PIX_ALL);
    sw_sh_geometry g;
    sw_sh_geometry_default(&g);
    g.pixel_um = pixel_um;
    g.focal_mm = focal_mm;
    call(c, [&] { return sw_centroid_find_geometry(c.ctx, &im.img, &g); });
    nb::dict d;
    d["x0"] = g.x0;
    d["y0"] = g.y0;
    d["pitch"] = g.pitch_px;
    d["nx"] = g.nx;
    d["ny"] = g.ny;
    d["pixel_um"] = g.pixel_um;
    d["focal_mm"] = g.focal_mm;
    return d;
}

} // namespace

void bind_centroid(nb::module_ &m)
{
    nb::class_<CentroidPlan>(m, "CentroidPlan",
                             "The centroid plan (centroid.h): CentroidPlan(ctx, params). Use "
                             "spotwave.CentroidPlan.")
        .def("__init__", &plan_init, nb::arg("ctx"), nb::arg("params"))
        .def("run", &plan_run, nb::arg("image"), nb::arg("x").none(), nb::arg("y").none(),
             nb::arg("intensity").none(), nb::arg("valid").none(), nb::arg("slopes").none(),
             nb::arg("saturated").none() = nb::none(), nb::arg("x_var").none() = nb::none(),
             nb::arg("y_var").none() = nb::none(), nb::arg("snr").none() = nb::none(),
             nb::arg("status").none() = nb::none())
        .def("bind_outputs", &plan_bind_outputs, nb::arg("x").none(), nb::arg("y").none(),
             nb::arg("intensity").none(), nb::arg("valid").none(), nb::arg("slopes").none(),
             nb::arg("saturated").none() = nb::none(), nb::arg("x_var").none() = nb::none(),
             nb::arg("y_var").none() = nb::none(), nb::arg("snr").none() = nb::none(),
             nb::arg("status").none() = nb::none())
        .def("run_device", &plan_run_device, nb::arg("ptr"), nb::arg("stride"),
             nb::arg("frames") = 1)
        .def("set_reference", &plan_set_reference, nb::arg("ref_x").none(), nb::arg("ref_y").none())
        .def("slope_lenslets", &slope_lenslets)
        .def_prop_ro("lenslets", [](CentroidPlan &cp) { return cp.lenslets; })
        .def_prop_ro("nslopes", [](CentroidPlan &cp) { return cp.nslopes; })
        .def_prop_ro("nx", [](CentroidPlan &cp) { return cp.p.geometry.nx; })
        .def_prop_ro("ny", [](CentroidPlan &cp) { return cp.p.geometry.ny; })
        .def_prop_ro("width", [](CentroidPlan &cp) { return cp.p.width; })
        .def_prop_ro("height", [](CentroidPlan &cp) { return cp.p.height; })
        .def_prop_ro("max_frames", [](CentroidPlan &cp) { return cp.p.max_frames; })
        .def_prop_ro("saturation",
                     [](CentroidPlan &cp) -> nb::object {
                         const double v = sw_centroid_plan_saturation(cp.plan);
                         return v < 0 ? nb::none() : nb::cast(v);
                     })
        .def_prop_ro("drop_saturated", [](CentroidPlan &cp) { return cp.p.drop_saturated != 0; })
        .def_prop_ro(
            "method",
            [](CentroidPlan &cp) { return std::string(sw_centroid_method_string(cp.p.method)); })
        .def_prop_ro("fast", [](CentroidPlan &cp) { return sw_centroid_plan_fast(cp.plan) != 0; })
        .def_prop_ro("pixel_type",
                     [](CentroidPlan &cp) { return std::string(sw_pixel_type_string(cp.p.type)); })
        .def_prop_ro("path",
                     [](CentroidPlan &cp) {
                         return std::string(
                             sw_centroid_path_string(sw_centroid_plan_path(cp.plan)));
                     })
        .def_prop_ro("ctx", [](CentroidPlan &cp) { return cp.ctx_obj; })
        .def("enable_timing",
             [](CentroidPlan &cp, bool on) { sw_centroid_enable_timing(cp.plan, on); })
        .def_prop_ro("kernel_us", [](CentroidPlan &cp) { return sw_centroid_kernel_us(cp.plan); });
    m.def(
        "centroid_status_string",
        [](int status) { return std::string(sw_centroid_status_string(status)); },
        nb::arg("status"));
    m.def("geometry_reference", &geometry_reference, nb::arg("params"));
    m.def("geometry_check", &geometry_check, nb::arg("params"), nb::arg("width") = 0,
          nb::arg("height") = 0);
    m.def("find_geometry", &find_geometry, nb::arg("ctx"), nb::arg("reference"),
          nb::arg("pixel_um"), nb::arg("focal_mm"));
}

} // namespace swpy
