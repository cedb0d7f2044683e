// spotwave Python binding: the pupil tracker (pupil.h) — one or two pupils per frame, with the
// lenslet mask for the centroid stage.
#include "common.h"

#include <nanobind/stl/string.h>

#include <cmath>
#include <cstring>

namespace swpy
{

void pupil_extras(Params &q, sw_pupil_params &p)
{
    const std::string m = q.str("pupil_method", "auto");
    if (m == "auto")
        p.spots_fallback = 1;
    else if (m == "glow")
        p.spots_fallback = 0;
    else if (m == "spots")
        p.spots_fallback = 2;
    else
        value_error("pupil_method: '%s' is not 'auto', 'glow' or 'spots'", m.c_str());
    nb::object given = q.get("given");
    if (given.is_none())
        return;
    const size_t n = nb::len(given);
    if ((int32_t)n != p.n_pupils)
        value_error("given: %zu pupils for %d eyes", n, (int)p.n_pupils);
    for (size_t i = 0; i < n; i++) {
        nb::object e = given[i];
        if (nb::len(e) != 5)
            value_error("given: pupil %zu is not (cx_px, cy_px, a_px, b_px, angle_deg)", i);
        sw_pupil_shape &s = p.given_pupil[i];
        s.cx_px = nb::cast<double>(e[0]);
        s.cy_px = nb::cast<double>(e[1]);
        s.a_px = nb::cast<double>(e[2]);
        s.b_px = nb::cast<double>(e[3]);
        s.angle_deg = nb::cast<double>(e[4]);
    }
    p.given = 1;
}

namespace
{

struct PupilPlan {
    nb::object ctx_obj;
    Context *ctx = nullptr;
    sw_pupil_plan *plan = nullptr;
    sw_pupil_params p{};
    sw_sh_geometry geom{};
    bool have_geom = false;
    PupilPlan() = default;
    PupilPlan(const PupilPlan &) = delete;
    PupilPlan &operator=(const PupilPlan &) = delete;
    ~PupilPlan()
    {
        sw_pupil_destroy(plan);
    }
};

void plan_init(PupilPlan *self, nb::object ctx_obj, int32_t width, int32_t height,
               const std::string &pixel_type, nb::dict params)
{
    new (self) PupilPlan();
    self->ctx_obj = ctx_obj;
    self->ctx = &context_of(ctx_obj);
    sw_pixel_type t;
    if (sw_pixel_type_parse(pixel_type.c_str(), &t) != SW_OK)
        value_error("pixel_type: '%s' is not uint8, uint16, uint32 or float32", pixel_type.c_str());
    sw_pupil_params &p = self->p;
    sw_pupil_params_default(&p, width, height, t);
    Params q(params, "PupilPlan");
    p.n_pupils = (int32_t)q.integer("pupils", p.n_pupils);
    p.split_x = (int32_t)q.integer("split_x", p.split_x);
    p.input_scale = q.num("input_scale", p.input_scale);
    p.gauss_radius = (int32_t)q.integer("gauss_radius", p.gauss_radius);
    p.gauss_sigma = q.num("gauss_sigma", p.gauss_sigma);
    p.close_radius = (int32_t)q.integer("close_radius", p.close_radius);
    p.candidates = (int32_t)q.integer("candidates", p.candidates);
    p.inlier_px = q.num("inlier_px", p.inlier_px);
    p.refine_iterations = (int32_t)q.integer("refine_iterations", p.refine_iterations);
    p.min_radius_px = q.num("min_radius_px", p.min_radius_px);
    p.max_radius_px = q.num("max_radius_px", p.max_radius_px);
    p.min_coverage = q.num("min_coverage", p.min_coverage);
    p.otsu_classes = (int32_t)q.integer("otsu_classes", p.otsu_classes);
    p.edge_level = q.num("edge_level", p.edge_level);
    p.max_near_ratio = q.num("max_near_ratio", p.max_near_ratio);
    p.seed = q.u64("seed", p.seed);
    if (q.has("pitch")) {
        sw_sh_geometry &g = self->geom;
        sw_sh_geometry_default(&g);
        g.pitch_px = q.num("pitch", g.pitch_px);
        g.nx = (int32_t)q.integer("nx", g.nx);
        g.ny = (int32_t)q.integer("ny", g.ny);
        g.x0 = q.num("x0", g.x0);
        g.y0 = q.num("y0", g.y0);
        self->have_geom = true;
        p.geometry = &self->geom;
    }
    pupil_extras(q, p);
    std::string rule = q.str("lenslet_rule", "full");
    if (rule == "full")
        p.lenslet_rule = SW_PUPIL_LENSLET_FULL;
    else if (rule == "centre" || rule == "center")
        p.lenslet_rule = SW_PUPIL_LENSLET_CENTRE;
    else
        value_error("lenslet_rule: '%s' is not 'full' or 'centre'", rule.c_str());
    q.done();
    Context &c = *self->ctx;
    call(c, [&] { return sw_pupil_create(c.ctx, &p, &self->plan); });
}

// Tracks the pupil(s) in each frame of a frame or stack; returns per pupil row the columns of
// the `spotwave pupil` CSV (frame, pupil, cx_px, ..., near, failure) and per frame scale and
// split_x. lenslet_mask: a writable uint8 host array of frames x nx x ny, or None.
nb::dict plan_run(PupilPlan &pp, nb::handle frames, nb::handle lenslet_mask)
{
    ImageArg im = image_arg(frames, "image", true, PIX_ALL);
    const sw_pupil_params &p = pp.p;
    if (im.width != p.width || im.rows != p.height || im.img.type != p.type)
        value_error("image: %s frames of %d x %d (width x height), the plan was made for %s "
                    "frames of %d x %d",
                    sw_pixel_type_string(im.img.type), im.width, im.rows,
                    sw_pixel_type_string(p.type), p.width, p.height);
    check_side(*pp.ctx, im.where, im.device_id, "image");
    FlatArg lm;
    const size_t nl = pp.have_geom ? (size_t)pp.geom.nx * (size_t)pp.geom.ny : 0;
    if (!lenslet_mask.is_none()) {
        if (!pp.have_geom)
            value_error("lenslet_mask: the plan has no lenslet grid (make it with pitch=...)");
        lm = flat_arg<uint8_t>(lenslet_mask, "lenslet_mask", (size_t)im.frames * nl, true);
        if (lm.where == Where::device)
            type_error("lenslet_mask: the mask is written on the host: give a NumPy uint8 array");
    }
    std::vector<sw_pupil_result> res((size_t)im.frames);
    Context &c = *pp.ctx;
    call(c, [&] {
        for (int32_t f = 0; f < im.frames; f++) {
            sw_image one = im.img;
            one.height = im.rows;
            one.data = (char *)im.img.data + (size_t)f * im.rows * im.img.stride;
            sw_status st = sw_pupil_run(pp.plan, &one, &res[f],
                                        lm.data ? (uint8_t *)lm.data + (size_t)f * nl : nullptr);
            if (st != SW_OK)
                return st;
        }
        return SW_OK;
    });
    const size_t rows = (size_t)im.frames * (size_t)p.n_pupils;
    int32_t *frame, *pupil, *inl, *valid, *thr, *nr;
    double *cx, *cy, *a, *b, *ang, *scale;
    int32_t *split;
    nb::dict d;
    d["frame"] = new_array(rows, &frame);
    d["pupil"] = new_array(rows, &pupil);
    d["cx_px"] = new_array(rows, &cx);
    d["cy_px"] = new_array(rows, &cy);
    d["a_px"] = new_array(rows, &a);
    d["b_px"] = new_array(rows, &b);
    d["angle_deg"] = new_array(rows, &ang);
    d["inliers"] = new_array(rows, &inl);
    d["valid"] = new_array(rows, &valid);
    d["threshold"] = new_array(rows, &thr);
    d["near"] = new_array(rows, &nr);
    d["scale"] = new_array((size_t)im.frames, &scale);
    d["split_x"] = new_array((size_t)im.frames, &split);
    nb::list failure, method;
    size_t k = 0;
    for (int32_t f = 0; f < im.frames; f++) {
        scale[f] = res[f].scale;
        split[f] = res[f].split_x;
        for (int32_t i = 0; i < res[f].n_pupils; i++, k++) {
            const sw_pupil_ellipse &e = res[f].pupil[i];
            frame[k] = f, pupil[k] = i;
            cx[k] = e.cx_px, cy[k] = e.cy_px, a[k] = e.a_px, b[k] = e.b_px, ang[k] = e.angle_deg;
            inl[k] = e.inliers, valid[k] = e.valid ? 1 : 0, thr[k] = e.threshold, nr[k] = e.near;
            failure.append(nb::str(e.valid ? "" : sw_pupil_failure_string(e.failure)));
            method.append(nb::str(sw_pupil_method_string(e.method)));
        }
    }
    d["failure"] = failure;
    d["method"] = method;
    return d;
}

} // namespace

void bind_pupil(nb::module_ &m)
{
    nb::class_<PupilPlan>(m, "PupilPlan",
                          "The pupil tracker's plan (pupil.h): PupilPlan(ctx, width, height, "
                          "pixel_type, params). Use spotwave.PupilPlan.")
        .def("__init__", &plan_init, nb::arg("ctx"), nb::arg("width"), nb::arg("height"),
             nb::arg("pixel_type"), nb::arg("params"))
        .def("run", &plan_run, nb::arg("image"), nb::arg("lenslet_mask").none())
        .def_prop_ro("pupils", [](PupilPlan &pp) { return pp.p.n_pupils; })
        .def_prop_ro("min_radius_px", [](PupilPlan &pp) { return pp.p.min_radius_px; })
        .def_prop_ro("ctx", [](PupilPlan &pp) { return pp.ctx_obj; });
}

} // namespace swpy
